/* optim.c — an optimizer step in compiled code: torch.optim.SGD, Adam and
 * AdamW's step() become one graph that updates every parameter and every
 * state tensor in place.
 *
 * torch's step() is Python that the tracer could not follow usefully (a
 * profiling wrapper, lazily created state keyed by the parameters, step
 * counters read with .item(), device grouping). What a step reads is
 * fixed, though: the groups' hyperparameters, each parameter's .grad, and
 * its state tensors. So a call of the step of an optimizer of exactly one
 * of those classes (its step torch's own, no hooks, options the graph
 * models) is traced here: each of those is read from its source and
 * guarded (hyperparameters by value, tensors by metadata, a gradient's
 * absence as None, state by the parameter it is keyed by), and the update
 * itself is the matching function of smelt/_optim.py inlined over them
 * with grad mode off, as the real step runs. A float learning rate is a
 * graph input instead (guarded by type): a scheduler changing it every
 * step reuses the entry. Its in-place updates of the
 * parameters and the state are the entry's write-backs.
 *
 * A parameter with a gradient and no state yet has it created while
 * tracing, as the first step would create it (init_state), so the first
 * step is compiled too (the entry is guarded on the state's size). */
#include "tstate.h"

#include <string.h>

enum { OPT_SGD, OPT_ADAM, OPT_ADAMW, NOPT };

static PyObject *opt_cls[NOPT];   /* torch.optim.SGD, Adam, AdamW */
static PyObject *impl[2];         /* smelt._optim.sgd, adam */

static int optim_init(void)
{
    if (impl[1])
        return 0;
    PyObject *m = PyImport_ImportModule("torch.optim");
    static const char *names[NOPT] = { "SGD", "Adam", "AdamW" };
    for (int i = 0; m && i < NOPT; i++)
        if (!(opt_cls[i] = PyObject_GetAttrString(m, names[i])))
            break;
    Py_XDECREF(m);
    PyObject *s = PyImport_ImportModule("smelt._optim");
    impl[0] = s ? PyObject_GetAttrString(s, "sgd") : NULL;
    impl[1] = impl[0] ? PyObject_GetAttrString(s, "adam") : NULL;
    Py_XDECREF(s);
    return impl[1] && opt_cls[NOPT - 1] ? 0 : -1;
}

/* Whether fn, unwrapped through __wrapped__ (torch's profiling and
 * grad-mode wrappers), is a step defined in torch.optim. */
static int torch_step(PyObject *fn)
{
    PyObject *f = Py_NewRef(fn);
    for (int i = 0; i < 4; i++) {
        PyObject *w = PyObject_GetAttrString(f, "__wrapped__");
        if (!w) {
            PyErr_Clear();
            break;
        }
        Py_SETREF(f, w);
    }
    int ok = 0;
    if (PyFunction_Check(f)) {
        PyObject *mod = PyFunction_GET_MODULE(f);
        const char *ms = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
        const char *qn = PyUnicode_AsUTF8(((PyFunctionObject *)f)->func_qualname);
        ok = ms && qn && !strncmp(ms, "torch.optim.", 12) && strlen(qn) > 5 && !strcmp(qn + strlen(qn) - 5, ".step");
    }
    PyErr_Clear();
    Py_DECREF(f);
    return ok;
}

/* Interned str s, kept alive by the trace (borrowed), or NULL. */
static PyObject *kstr(tracer *T, const char *s)
{
    PyObject *k = PyUnicode_InternFromString(s);
    if (!k || tr_keep(T, k)) {
        Py_XDECREF(k);
        return NULL;
    }
    Py_DECREF(k);
    return k;
}

/* d[key] of dict d from source ds, a constant guarded by value: the value
 * (borrowed) and its source, or NULL (a break, or an error). */
static PyObject *group_opt(tracer *T, PyObject *d, int32_t ds, const char *key)
{
    PyObject *k = kstr(T, key);
    PyObject *v = k ? PyDict_GetItemWithError(d, k) : NULL;
    if (!v) {
        if (k && !PyErr_Occurred())
            tr_break(T, "optimizer group without '%s'", key);
        return NULL;
    }
    int plain = tr_is_plain_const(v);
    if (!plain && PyTuple_CheckExact(v)) {
        plain = 1;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); i++)
            plain &= tr_is_plain_const(PyTuple_GET_ITEM(v, i));
    }
    if (!plain) {
        tr_break(T, "optimizer option '%s' of type %s (a tensor learning rate or betas: not traced)", key,
                 Py_TYPE(v)->tp_name);
        return NULL;
    }
    if (tr_add_guard(T, TG_EQ, tr_src_new(T, SRC_DICT, ds, 0, k), v, 0))
        return NULL;
    return v;
}

static int is_true(PyObject *v) { return v == Py_True || (PyLong_Check(v) && PyLong_AsLong(v) != 0); }

/* The constant value of a group option, for the implementation's call. */
static int32_t cval(tracer *T, PyObject *v) { return v ? tv_obj(T, v, -1) : -1; }

/* A dict from a source that must stay empty (hooks). */
static int no_hooks(tracer *T, PyObject *d, int32_t src, const char *what)
{
    if (d && d != Py_None && (!PyDict_Check(d) || PyDict_GET_SIZE(d)))
        return tr_break(T, "optimizer step with %s", what);
    return tr_add_guard(T, TG_EMPTY, src, NULL, 0);
}

/* opt.<name> is absent or None (getattr(self, name, None) in the step). */
static int attr_none(tracer *T, int32_t ov, const char *name)
{
    PyObject *o = T->vals[ov].obj, *k = kstr(T, name);
    if (!k)
        return -1;
    PyObject *v = PyObject_GetAttr(o, k);
    if (!v) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        return tr_guard_absent(T, ov, k);
    }
    Py_DECREF(v);
    if (v != Py_None)
        return tr_break(T, "optimizer with %s set (gradient scaling)", name);
    return tr_add_guard(T, TG_EQ, tr_src_new(T, SRC_ATTR, T->vals[ov].src, 0, k), Py_None, 0);
}

/* Tensor value of d[key] (a state dict from source ds): -1 on a break. */
static int32_t state_tensor(tracer *T, PyObject *d, int32_t ds, const char *key)
{
    PyObject *k = kstr(T, key), *v = k ? PyDict_GetItemWithError(d, k) : NULL;
    if (!v)
        return !k || PyErr_Occurred() ? -1 : tr_break(T, "optimizer state without '%s'", key);
    if (!ops_is_tensor(v))
        return tr_break(T, "optimizer state '%s' of type %s", key, Py_TYPE(v)->tp_name);
    return tv_obj(T, v, tr_src_new(T, SRC_DICT, ds, 0, k));
}

/* Creates parameter p's state the first step would create (it does not
 * exist yet), exactly as torch's _init_group does: Adam's step counter
 * (0-d, torch.optim's scalar dtype) and zeroed moments in p's memory
 * format; SGD's momentum buffer. The compiled update then is the first
 * step's: Adam's from zeroed moments is torch's; SGD's first step sets
 * the buffer to the gradient, which the update computes from a zero
 * buffer exactly (0 * momentum + g) when dampening is 0; otherwise the
 * step runs eagerly. Done while tracing: if the trace breaks later, the
 * eager step finds this state and computes the same step. 0, or -1 (a
 * break or an error). */
static int init_state(tracer *T, int which, PyObject *state, PyObject *p, int amsgrad, PyObject *dampening)
{
    if (which == OPT_SGD && (!dampening || PyObject_IsTrue(dampening) != 0))
        return tr_break(T, "SGD with dampening: its first step sets the momentum buffer otherwise");
    PyObject *torch = PyImport_AddModule("torch"), *optm = PyImport_ImportModule("torch.optim.optimizer");
    PyObject *pf = torch ? PyObject_GetAttrString(torch, "preserve_format") : NULL;
    PyObject *zl = torch ? PyObject_GetAttrString(torch, "zeros_like") : NULL;
    PyObject *kw = pf ? Py_BuildValue("{s:O}", "memory_format", pf) : NULL;
    PyObject *st = PyObject_GetItem(state, p);   /* the defaultdict makes {} */
    int rc = -1;
    if (!optm || !zl || !kw || !st || !PyDict_Check(st))
        goto out;
    if (which == OPT_SGD) {
        PyObject *a = PyTuple_Pack(1, p), *z = a ? PyObject_Call(zl, a, kw) : NULL;
        rc = z ? PyDict_SetItemString(st, "momentum_buffer", z) : -1;
        Py_XDECREF(a);
        Py_XDECREF(z);
        goto out;
    }
    PyObject *dt = PyObject_CallMethod(optm, "_get_scalar_dtype", NULL);
    PyObject *step = NULL;
    if (dt) {
        PyObject *args = Py_BuildValue("(d)", 0.0), *skw = Py_BuildValue("{s:O}", "dtype", dt);
        PyObject *tf = PyObject_GetAttrString(torch, "tensor");
        step = args && skw && tf ? PyObject_Call(tf, args, skw) : NULL;
        Py_XDECREF(args);
        Py_XDECREF(skw);
        Py_XDECREF(tf);
    }
    Py_XDECREF(dt);
    rc = step ? PyDict_SetItemString(st, "step", step) : -1;
    Py_XDECREF(step);
    static const char *moments[3] = { "exp_avg", "exp_avg_sq", "max_exp_avg_sq" };
    for (int i = 0; rc == 0 && i < 2 + amsgrad; i++) {
        PyObject *a = PyTuple_Pack(1, p), *z = a ? PyObject_Call(zl, a, kw) : NULL;
        rc = z ? PyDict_SetItemString(st, moments[i], z) : -1;
        Py_XDECREF(a);
        Py_XDECREF(z);
    }
out:
    Py_XDECREF(optm);
    Py_XDECREF(pf);
    Py_XDECREF(zl);
    Py_XDECREF(kw);
    Py_XDECREF(st);
    return rc;
}

/* The per-tensor lists of one group, grown as parameters are read. */
typedef struct plists {
    int32_t *v[6];
    int n, cap;
} plists;

static int plist_push(plists *l, const int32_t *vals, int k)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        for (int i = 0; i < 6; i++) {
            int32_t *p = PyMem_Realloc(l->v[i], sizeof(int32_t) * (size_t)cap);
            if (!p)
                return PyErr_NoMemory(), -1;
            l->v[i] = p;
        }
        l->cap = cap;
    }
    for (int i = 0; i < k; i++)
        l->v[i][l->n] = vals[i];
    l->n++;
    return 0;
}

static void plist_free(plists *l)
{
    for (int i = 0; i < 6; i++)
        PyMem_Free(l->v[i]);
}

/* One group's update: reads and guards its options, parameters,
 * gradients and state, then inlines the implementation. 0, or -1. */
static int group_step(tracer *T, int which, PyObject *group, int32_t gs, int32_t sstate, PyObject *state)
{
    static const char *adam_keys[] = { "amsgrad", "betas", "lr", "weight_decay", "eps", "maximize", "foreach",
                                       "capturable", "differentiable", "fused", "decoupled_weight_decay" };
    static const char *sgd_keys[] = { "lr", "weight_decay", "momentum", "dampening", "nesterov", "maximize",
                                      "foreach", "differentiable", "fused" };
    const char **keys = which == OPT_SGD ? sgd_keys : adam_keys;
    int nk = which == OPT_SGD ? 9 : 11;
    PyObject *o[11];
    int32_t lr_in = -1, ilr = which == OPT_SGD ? 0 : 2;
    for (int i = 0; i < nk; i++) {
        if (i == ilr) {   /* the learning rate: a float is an input (a scheduler changes it every step) */
            PyObject *k = kstr(T, "lr"), *v = k ? PyDict_GetItemWithError(group, k) : NULL;
            if (v && PyFloat_CheckExact(v)) {
                if ((lr_in = tr_float_input(T, tr_src_new(T, SRC_DICT, gs, 0, k))) < 0)
                    return -1;
                o[i] = v;
                continue;
            }
            if (PyErr_Occurred())
                return -1;
        }
        if (!(o[i] = group_opt(T, group, gs, keys[i])))
            return -1;
    }
    PyObject *fused = which == OPT_SGD ? o[8] : o[9], *diff = which == OPT_SGD ? o[7] : o[8];
    if (is_true(fused) || is_true(diff) || (which != OPT_SGD && is_true(o[7])))
        return tr_break(T, "optimizer with fused, differentiable or capturable set");
    if (which != OPT_SGD && (!PyTuple_CheckExact(o[1]) || PyTuple_GET_SIZE(o[1]) != 2))
        return tr_break(T, "optimizer betas that are not a pair");
    int amsgrad = which != OPT_SGD && is_true(o[0]);
    int momentum = which == OPT_SGD && PyObject_IsTrue(o[2]) == 1;

    PyObject *pk = kstr(T, "params"), *gk = kstr(T, "grad");
    if (!pk || !gk)
        return -1;
    PyObject *params = PyDict_GetItemWithError(group, pk);
    if (!params || !PyList_CheckExact(params))
        return PyErr_Occurred() ? -1 : tr_break(T, "optimizer group whose params are not a list");
    int32_t ps = tr_src_new(T, SRC_DICT, gs, 0, pk);
    if (tr_add_guard(T, TG_TYPE, ps, (PyObject *)&PyList_Type, 0) ||
        tr_add_guard(T, TG_LEN, ps, NULL, PyList_GET_SIZE(params)))
        return -1;
    plists l = { 0 };
    int rc = -1;
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(params); j++) {
        PyObject *p = PyList_GET_ITEM(params, j);
        int32_t sp = tr_src_new(T, SRC_ITEM, ps, j, NULL);
        if (sp < 0 || !ops_is_tensor(p)) {
            if (sp >= 0)
                tr_break(T, "optimizer parameter of type %s", Py_TYPE(p)->tp_name);
            goto out;
        }
        PyObject *g = PyObject_GetAttr(p, gk);
        if (!g)
            goto out;
        int32_t sg = tr_src_new(T, SRC_ATTR, sp, 0, gk);
        if (g == Py_None) {
            Py_DECREF(g);
            if (tr_add_guard(T, TG_EMPTY, sg, NULL, 0))
                goto out;
            continue;
        }
        int ok = ops_is_tensor(g) && !tr_keep(T, g);
        Py_DECREF(g);   /* kept alive by the trace */
        PyObject *lay = ok ? PyObject_GetAttrString(g, "layout") : NULL;
        PyObject *strided = lay ? PyObject_GetAttrString(PyImport_AddModule("torch"), "strided") : NULL;
        PyObject *cplx = ok ? PyObject_CallMethod(p, "is_complex", NULL) : NULL;
        int dense = lay && strided && lay == strided && cplx == Py_False;
        Py_XDECREF(lay);
        Py_XDECREF(strided);
        Py_XDECREF(cplx);
        if (!dense) {
            if (!PyErr_Occurred())
                tr_break(T, "optimizer parameter with a sparse or complex gradient");
            goto out;
        }
        int32_t vals[6] = { tv_obj(T, p, sp), tv_obj(T, g, sg), -1, -1, -1, -1 };
        if (vals[0] < 0 || vals[1] < 0)
            goto out;
        int nv = 2;
        if (which != OPT_SGD || momentum) {
            PyObject *st = PyDict_GetItemWithError(state, p);
            if (!st && PyErr_Occurred())
                goto out;
            PyObject *buf = st && PyDict_Check(st) && which == OPT_SGD ? PyDict_GetItemString(st, "momentum_buffer") : NULL;
            if (!st || !PyDict_Check(st) || !PyDict_GET_SIZE(st) || (which == OPT_SGD && (!buf || buf == Py_None))) {
                int r = init_state(T, which, state, p, amsgrad, which == OPT_SGD ? o[3] : NULL);
                if (r)
                    goto out;
                if (!(st = PyDict_GetItemWithError(state, p)))
                    goto out;
            }
            int32_t ss = tr_src_new(T, SRC_DICT, sstate, (Py_ssize_t)sp + 1, p);   /* keyed by the parameter */
            if (ss < 0 || tr_add_guard(T, TG_TYPE, ss, (PyObject *)Py_TYPE(st), 0))
                goto out;
            static const char *adam_state[] = { "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step" };
            if (which == OPT_SGD) {
                if ((vals[2] = state_tensor(T, st, ss, "momentum_buffer")) < 0)
                    goto out;
                nv = 3;
            } else {
                for (int k = 0; k < 4; k++)
                    if ((k != 2 || amsgrad) && (vals[2 + k] = state_tensor(T, st, ss, adam_state[k])) < 0)
                        goto out;
                if (!amsgrad)
                    vals[4] = vals[2];   /* unused by the update */
                nv = 6;
            }
        }
        if (plist_push(&l, vals, nv))
            goto out;
    }
    /* the call: lists of tensors, then the options */
    int32_t args[16], na = 0;
    int nlists = which == OPT_SGD ? 3 : 6;
    for (int i = 0; i < nlists; i++) {
        int32_t *items = (i == 2 && which == OPT_SGD && !momentum) ? NULL : l.v[i];
        if ((args[na++] = tv_tuple(T, items, items ? l.n : 0)) < 0)
            goto out;
    }
    if (which == OPT_SGD) {   /* lr, weight_decay, momentum, dampening, nesterov, maximize */
        for (int i = 0; i < 6; i++)
            if ((args[na++] = i == 0 && lr_in >= 0 ? lr_in : cval(T, o[i])) < 0)
                goto out;
    } else {   /* amsgrad, beta1, beta2, lr, weight_decay, eps, maximize, decoupled */
        PyObject *c[8] = { o[0], PyTuple_GET_ITEM(o[1], 0), PyTuple_GET_ITEM(o[1], 1), o[2], o[3], o[4], o[5], o[10] };
        for (int i = 0; i < 8; i++)
            if ((args[na++] = i == 3 && lr_in >= 0 ? lr_in : cval(T, c[i])) < 0)
                goto out;
    }
    call_args a = { .pos = args, .npos = na };
    rc = l.n ? (tr_inline(T, impl[which != OPT_SGD], -1, &a) < 0 ? -1 : 0) : 0;
out:
    plist_free(&l);
    return rc;
}

int32_t optim_step(tracer *T, PyObject *fn, const call_args *a)
{
    if (a->npos < 1 || T->vals[a->pos[0]].kind != V_OBJ || !PyFunction_Check(fn))
        return -2;
    int32_t ov = a->pos[0];
    PyObject *o = T->vals[ov].obj;
    if (optim_init())
        return -1;
    int which = -1;
    for (int i = 0; i < NOPT; i++)
        if ((PyObject *)Py_TYPE(o) == opt_cls[i])
            which = i;
    if (which < 0)
        return -2;
    PyObject *name = kstr(T, "step");
    if (!name)
        return -1;
    if (_PyType_Lookup(Py_TYPE(o), name) != fn || !torch_step(fn))
        return -2;
    if (a->npos > 2 || a->nkw > 1 || (a->npos == 2 && !(T->vals[a->pos[1]].kind == V_OBJ &&
                                                         T->vals[a->pos[1]].obj == Py_None)) ||
        (a->nkw == 1 && !(T->vals[a->kwv[0]].kind == V_OBJ && T->vals[a->kwv[0]].obj == Py_None)))
        return tr_break(T, "optimizer step with a closure");
    int32_t so = T->vals[ov].src;
    if (so < 0)
        return tr_break(T, "an optimizer made in the traced code");
    int32_t sstep = tr_src_new(T, SRC_ATTR, tr_src_new(T, SRC_TYPE, so, 0, NULL), 0, name);
    if (tr_add_guard(T, TG_TYPE, so, (PyObject *)Py_TYPE(o), 0) || tr_add_guard(T, TG_ID, sstep, fn, 0))
        return -1;

    /* hooks (the optimizer's and the global ones, in the step's module) and gradient scaling */
    static const char *hooks[2] = { "_optimizer_step_pre_hooks", "_optimizer_step_post_hooks" };
    static const char *ghooks[2] = { "_global_optimizer_pre_hooks", "_global_optimizer_post_hooks" };
    PyObject *globals = PyFunction_GET_GLOBALS(fn);
    PyObject *kg = kstr(T, "__globals__"), *kpg = kstr(T, "param_groups"), *kst = kstr(T, "state");
    if (!kg || !kpg || !kst)
        return -1;
    int32_t sglob = tr_src_new(T, SRC_ATTR, sstep, 0, kg);
    for (int i = 0; i < 2; i++) {
        PyObject *hk = kstr(T, hooks[i]), *gk = kstr(T, ghooks[i]);
        if (!hk || !gk)
            return -1;
        PyObject *h = PyObject_GetAttr(o, hk);
        if (!h)
            return -1;
        int rc = no_hooks(T, h, tr_src_new(T, SRC_ATTR, so, 0, hk), "step hooks");
        Py_DECREF(h);
        PyObject *gh = PyDict_GetItemWithError(globals, gk);
        if (rc || (!gh && PyErr_Occurred()) || (gh && no_hooks(T, gh, tr_src_new(T, SRC_DICT, sglob, 0, gk), "global step hooks")))
            return -1;
    }
    if (attr_none(T, ov, "grad_scale") || attr_none(T, ov, "found_inf"))
        return -1;

    PyObject *groups = PyObject_GetAttrString(o, "param_groups");
    PyObject *state = groups ? PyObject_GetAttrString(o, "state") : NULL;
    int rc = -1;
    if (!state)
        goto out;
    if (!PyList_CheckExact(groups) || !PyDict_Check(state)) {
        tr_break(T, "optimizer whose param_groups or state has an unexpected type");
        goto out;
    }
    int32_t sg = tr_src_new(T, SRC_ATTR, so, 0, kpg);
    int32_t ss = tr_src_new(T, SRC_ATTR, so, 0, kst);
    if (tr_add_guard(T, TG_TYPE, sg, (PyObject *)&PyList_Type, 0) ||
        tr_add_guard(T, TG_LEN, sg, NULL, PyList_GET_SIZE(groups)) ||
        tr_add_guard(T, TG_TYPE, ss, (PyObject *)Py_TYPE(state), 0))
        goto out;
    int saved = T->no_grad;
    PyObject *ge = PyObject_CallMethod(PyImport_AddModule("torch"), "is_grad_enabled", NULL);
    if (!ge)
        goto out;
    tr_grad_mode(T, ge == Py_True ? 1 : 0);   /* the step runs with grad off */
    Py_DECREF(ge);
    rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(groups); i++) {
        PyObject *g = PyList_GET_ITEM(groups, i);
        int32_t gs = tr_src_new(T, SRC_ITEM, sg, i, NULL);
        if (!PyDict_CheckExact(g))
            rc = tr_break(T, "optimizer group of type %s", Py_TYPE(g)->tp_name);
        else if (tr_add_guard(T, TG_TYPE, gs, (PyObject *)&PyDict_Type, 0))
            rc = -1;
        else
            rc = group_step(T, which, g, gs, ss, state);
    }
    tr_grad_mode(T, saved);
    if (rc == 0)   /* its size after the state this trace created */
        rc = tr_add_guard(T, TG_LEN, ss, NULL, PyDict_GET_SIZE(state));
out:
    Py_XDECREF(groups);
    Py_XDECREF(state);
    return rc ? -1 : tv_obj(T, Py_None, -1);   /* the step returns the closure's loss: None */
}
