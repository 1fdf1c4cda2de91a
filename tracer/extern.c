/* extern.c — host calls: a torch op smelt has no graph op for stays in the
 * graph as CALL nodes that run the op at run time (tracer/hostcall.h; the
 * run-time callback is pyext/hostcall.c).
 *
 * ext_call turns the symbolic arguments of one call into templates (a
 * tensor becomes Slot(k), the call's k-th source; constants are guarded),
 * learns the results' dtypes and shapes from torch's shape rules
 * (shapes.c) or, for ops those do not cover, a run on meta tensors, adds
 * the CALL nodes and appends (fn, args, kwargs) to the trace result's table
 * of calls, where the call's id is its index. ext_prepare and ext_emit
 * are the two halves, for handlers that decide between graph ops and a
 * host call once the call is inferred (native.c).
 */
#include "tstate.h"

#include "hostcall.h"

#include <string.h>

/* ---------- which callables ---------- */

/* Modules whose builtin functions are torch ops (__module__ of torch.conv2d
 * is "torch"; torch._C._nn.upsample_nearest2d's is "torch._C._nn"). */
static const char *const op_modules[] = { "torch", "torch._C._nn", "torch._C._linalg", "torch._C._special",
                                          "torch._C._fft" };

/* Names that are builtins of those modules or Tensor methods but are no
 * pure tensor -> tensor op: results that are not tensors, side effects,
 * global state, autograd. */
static const char *const denied[] = {
    "item", "tolist", "numpy", "data_ptr", "numel", "nelement", "element_size", "storage", "untyped_storage",
    "storage_offset", "stride", "size", "dim", "backward", "register_hook", "retain_grad", "record_stream",
    "is_nonzero", "equal", "allclose", "cuda", "pin_memory", "__bool__", "__int__", "__float__", "__index__",
    "__complex__", "__len__", "__iter__", "__setitem__", "__delitem__", "__array__", "__dlpack__", "__repr__",
    "__str__", "__format__", "__reduce_ex__", "__deepcopy__", "__setstate__", "save", "load", "initial_seed",
};

/* Substrings of the names of ops that draw random numbers (global RNG
 * state: not reproducible from a compiled graph) or set global state. */
static const char *const denied_parts[] = { "rand", "dropout", "bernoulli", "multinomial", "poisson", "rrelu",
                                            "normal", "binomial", "dirichlet", "standard_gamma", "uniform",
                                            "exponential", "geometric", "cauchy", "seed" };

/* The bare name of callable fn ("conv2d", "cumsum", "cumsum.default"), or
 * NULL when fn is none of torch's builtins. New reference; no error set. */
static PyObject *torch_builtin_name(PyObject *fn)
{
    if (PyCFunction_Check(fn)) {
        PyObject *mod = PyObject_GetAttrString(fn, "__module__");
        int ok = 0;
        for (size_t i = 0; mod && PyUnicode_Check(mod) && i < sizeof op_modules / sizeof op_modules[0]; i++)
            ok |= PyUnicode_CompareWithASCIIString(mod, op_modules[i]) == 0;
        Py_XDECREF(mod);
        PyErr_Clear();
        return ok ? PyUnicode_FromString(((PyCFunctionObject *)fn)->m_ml->ml_name) : NULL;
    }
    PyTypeObject *tt = (PyTypeObject *)ops_tensor_type();
    if (Py_IS_TYPE(fn, &PyMethodDescr_Type) && tt &&
        (PyDescr_TYPE(fn) == tt || PyDescr_TYPE(fn) == tt->tp_base))
        return Py_NewRef(PyDescr_NAME(fn));
    const char *tn = Py_TYPE(fn)->tp_name;
    if (strcmp(tn, "OpOverload") && strcmp(tn, "OpOverloadPacket"))
        return NULL;
    PyObject *mod = PyObject_GetAttrString((PyObject *)Py_TYPE(fn), "__module__");
    int ok = mod && PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "torch._ops") == 0;
    Py_XDECREF(mod);
    PyObject *name = ok ? PyObject_GetAttrString(fn, "__name__") : NULL;
    PyErr_Clear();
    return name;
}

/* Whether op name s (an overload's "add_.Tensor" reads as "add_") is one
 * a host call may run: not in place, not denied. */
static int name_allowed(const char *s)
{
    size_t n = strcspn(s, ".");
    int dunder = n > 4 && !strncmp(s, "__", 2) && !strncmp(s + n - 2, "__", 2);
    if (n == 0 || (s[n - 1] == '_' && !dunder))
        return 0;   /* x.add_(), aten.add_.Tensor */
    if (!strncmp(s, "__i", 3) && strncmp(s, "__invert__", 10))
        return 0;   /* __iadd__ and the other augmented assignments */
    if (!strncmp(s, "set_", 4) || !strncmp(s, "_set", 4))
        return 0;
    for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++)
        if (strlen(denied[i]) == n && !strncmp(s, denied[i], n))
            return 0;
    for (size_t i = 0; i < sizeof denied_parts / sizeof denied_parts[0]; i++)
        if (strstr(s, denied_parts[i]))
            return 0;
    return 1;
}

/* An OpOverload whose schema says it mutates an argument. */
static int schema_mutable(PyObject *fn)
{
    PyObject *sch = PyObject_GetAttrString(fn, "_schema");
    PyObject *m = sch ? PyObject_GetAttrString(sch, "is_mutable") : NULL;
    int r = m == Py_True;
    Py_XDECREF(sch);
    Py_XDECREF(m);
    PyErr_Clear();
    return r;
}

int ext_eligible(PyObject *fn)
{
    PyObject *name = torch_builtin_name(fn);
    const char *s = name ? PyUnicode_AsUTF8(name) : NULL;
    int ok = s && name_allowed(s) && !schema_mutable(fn);
    Py_XDECREF(name);
    PyErr_Clear();
    return ok;
}

/* ---------- argument templates ---------- */


static PyObject *const_types[4];   /* torch.dtype, device, layout, memory_format */

/* Resolves const_types once. 0, or -1 with an error. */
static int const_types_init(void)
{
    static const char *names[4] = { "dtype", "device", "layout", "memory_format" };
    if (const_types[3])
        return 0;
    PyObject *torch = PyImport_ImportModule("torch");
    for (int i = 0; torch && i < 4; i++)
        if (!const_types[i] && !(const_types[i] = PyObject_GetAttrString(torch, names[i])))
            break;
    Py_XDECREF(torch);
    return const_types[3] ? 0 : -1;
}

/* Whether constant o can stand in a template: numbers, strings, None,
 * Ellipsis, torch dtypes/devices/layouts/memory formats, and tuples,
 * lists and slices of those. */
static int const_ok(PyObject *o, int depth)
{
    if (o == Py_None || o == Py_Ellipsis || PyLong_Check(o) || PyFloat_Check(o) || PyComplex_Check(o) ||
        PyUnicode_Check(o))
        return 1;
    for (int i = 0; i < 4; i++)
        if (PyObject_TypeCheck(o, (PyTypeObject *)const_types[i]))
            return 1;
    if (depth > 8)
        return 0;
    if (PySlice_Check(o)) {
        PySliceObject *s = (PySliceObject *)o;
        return const_ok(s->start, depth + 1) && const_ok(s->stop, depth + 1) && const_ok(s->step, depth + 1);
    }
    if (!PyTuple_Check(o) && !PyList_Check(o))
        return 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); i++)
        if (!const_ok(PySequence_Fast_GET_ITEM(o, i), depth + 1))
            return 0;
    return 1;
}

/* Slot for graph node `node`: the same Slot for the same node. New
 * reference, or NULL (a break past SMELT_MAX_SRC sources, or an error). */
static PyObject *slot_of(tracer *T, ext_srcs *s, int32_t node)
{
    for (int k = 0; k < s->n; k++)
        if (s->node[k] == node)
            return Py_NewRef(s->slot[k]);
    if (s->n == SMELT_MAX_SRC) {
        tr_break(T, "host call with more than %d distinct tensor arguments", SMELT_MAX_SRC);
        return NULL;
    }
    PyObject *sl = tracer_slot_new(s->n);
    if (!sl)
        return NULL;
    s->node[s->n] = node;
    s->slot[s->n++] = sl;
    return Py_NewRef(sl);
}

static PyObject *tmpl(tracer *T, ext_srcs *s, int32_t v, int depth);

typedef struct tmpl_ctx { ext_srcs *s; int depth; } tmpl_ctx;

static PyObject *item_tmpl(tracer *T, int32_t v, void *ctx)
{
    tmpl_ctx *c = ctx;
    return tmpl(T, c->s, v, c->depth);
}

/* Template of a V_TUPLE / V_LIST / V_DICT: the container rebuilt from its
 * items' templates (a V_TUPLE with obj as obj(tuple): torch.Size, ...). */
static PyObject *container_tmpl(tracer *T, ext_srcs *s, int32_t v, int depth)
{
    tmpl_ctx c = { s, depth + 1 };
    return tr_build_container(T, v, item_tmpl, &c);
}

/* Template of a constant value (guarded through tr_const / tr_pyobj). */
static PyObject *const_tmpl(tracer *T, int32_t v)
{
    PyObject *o = tr_pyobj(T, v);
    if (!o || const_ok(o, 0))
        return o;
    tr_break(T, "a %s argument cannot be passed to a host call", Py_TYPE(o)->tp_name);
    Py_DECREF(o);
    return NULL;
}

/* Template of value v: tensors -> Slot(k), containers rebuilt, constants
 * as they are. New reference, or NULL with a break or an error. */
static PyObject *tmpl(tracer *T, ext_srcs *s, int32_t v, int depth)
{
    if (depth > 8) {
        tr_break(T, "host call argument nested too deeply");
        return NULL;
    }
    switch (T->vals[v].kind) {
    case V_TENSOR:
        return slot_of(T, s, T->vals[v].node);
    case V_TUPLE: case V_LIST: case V_DICT:
        return container_tmpl(T, s, v, depth);
    case V_OBJ: case V_SLICE:
        return const_tmpl(T, v);
    default:
        tr_break(T, "a function, iterator or cell cannot be passed to a host call");
        return NULL;
    }
}

/* args tuple and kwargs dict templates of call a. 0, or -1 (break/error;
 * *args and *kwargs then NULL). */
static int call_tmpl(tracer *T, ext_srcs *s, const call_args *a, PyObject **args, PyObject **kwargs)
{
    *args = PyTuple_New(a->npos);
    *kwargs = PyDict_New();
    for (int i = 0; *args && i < a->npos; i++) {
        PyObject *t = tmpl(T, s, a->pos[i], 0);
        if (!t)
            Py_CLEAR(*args);
        else
            PyTuple_SET_ITEM(*args, i, t);
    }
    for (int i = 0; *args && *kwargs && i < a->nkw; i++) {
        PyObject *t = tmpl(T, s, a->kwv[i], 0);
        if (!t || PyDict_SetItem(*kwargs, a->kwn[i], t))
            Py_CLEAR(*kwargs);
        Py_XDECREF(t);
    }
    if (*args && *kwargs)
        return 0;
    Py_CLEAR(*args);
    Py_CLEAR(*kwargs);
    return -1;
}

/* Whether value v holds a tensor (at any depth of containers); when
 * freeze is set, marks each such tensor value frozen. */
static int has_tensor(tracer *T, int32_t v, int depth, int freeze)
{
    tv *x = &T->vals[v];
    if (x->kind == V_TENSOR) {
        x->frozen |= (uint8_t)freeze;
        return 1;
    }
    int found = 0;
    if ((x->kind == V_TUPLE || x->kind == V_LIST || x->kind == V_DICT) && depth < 8)
        for (int i = 0; i < x->n; i++)
            found |= has_tensor(T, x->items[i], depth + 1, freeze);
    return found;
}

static int args_have_tensor(tracer *T, const call_args *a, int freeze)
{
    int found = 0;
    for (int i = 0; i < a->npos; i++)
        found |= has_tensor(T, a->pos[i], 0, freeze);
    for (int i = 0; i < a->nkw; i++)
        found |= has_tensor(T, a->kwv[i], 0, freeze);
    return found;
}

/* ---------- checks on the arguments ---------- */

/* Argument i or keyword `name` of a, -1 if absent. */
static int32_t arg_at(const call_args *a, int i, const char *name)
{
    if (i < a->npos)
        return a->pos[i];
    for (int k = 0; k < a->nkw; k++)
        if (PyUnicode_CompareWithASCIIString(a->kwn[k], name) == 0)
            return a->kwv[k];
    return -1;
}

/* batch_norm / instance_norm given running statistics update them in
 * place unless the training flag (argument 5) is a constant False. */
static int updates_stats(tracer *T, const char *name, const call_args *a)
{
    if (!strstr(name, "batch_norm") && !strstr(name, "instance_norm"))
        return 0;
    int32_t mean = arg_at(a, 3, "running_mean"), var = arg_at(a, 4, "running_var");
    int32_t train = arg_at(a, 5, "training");
    if (train < 0)
        train = arg_at(a, 5, "use_input_stats");
    int stats = (mean >= 0 && T->vals[mean].kind == V_TENSOR) || (var >= 0 && T->vals[var].kind == V_TENSOR);
    int off = train >= 0 && T->vals[train].kind == V_OBJ && T->vals[train].obj == Py_False;
    return stats && !off;
}

/* A name for fn in messages ("conv2d", "Tensor.cumsum",
 * "Tensor.__getitem__", "MyFunction.apply" for a class's bound method).
 * New reference, or NULL with an error. */
static PyObject *display_name(PyObject *fn)
{
    if (Py_IS_TYPE(fn, &PyMethodDescr_Type) || Py_IS_TYPE(fn, &PyWrapperDescr_Type))
        return PyUnicode_FromFormat("Tensor.%U", PyDescr_NAME(fn));
    if (PyMethod_Check(fn) && PyType_Check(PyMethod_GET_SELF(fn)) && PyFunction_Check(PyMethod_GET_FUNCTION(fn)))
        return PyUnicode_FromFormat("%s.%U", ((PyTypeObject *)PyMethod_GET_SELF(fn))->tp_name,
                                    ((PyFunctionObject *)PyMethod_GET_FUNCTION(fn))->func_name);
    PyObject *n = torch_builtin_name(fn);
    return n ? n : PyObject_Repr(fn);
}

/* Refuses calls a host call cannot reproduce: out= (writes an existing
 * tensor), running statistics updated in place. 0, or -1 with a break. */
static int check_args(tracer *T, PyObject *name, const call_args *a)
{
    const char *s = PyUnicode_AsUTF8(name);
    if (!s)
        return -1;
    for (int k = 0; k < a->nkw; k++)
        if (PyUnicode_CompareWithASCIIString(a->kwn[k], "out") == 0)
            return tr_break(T, "%U with out= (writes an existing tensor) is not supported", name);
    if (updates_stats(T, s, a))
        return tr_break(T, "%U updates running statistics in place (training mode): not supported", name);
    return 0;
}

/* ---------- the call ---------- */

/* ext_call_unseeded's call in progress: the meta run goes through
 * smelt._autograd.call_unseeded. */
static int g_unseeded;

/* The callable the meta run uses: calls fn and notes the result's type;
 * self is the list [fn, type-or-None]. */
static PyObject *probe_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    PyObject *fn = PyList_GET_ITEM(self, 0), *r;
    if (g_unseeded) {   /* call_unseeded(fn, *args, **kwargs) */
        PyObject *m = PyImport_ImportModule("smelt._autograd");
        PyObject *chk = m ? PyObject_GetAttrString(m, "call_unseeded") : NULL;
        Py_XDECREF(m);
        PyObject *a2 = chk ? PyTuple_New(PyTuple_GET_SIZE(args) + 1) : NULL;
        for (Py_ssize_t i = 0; a2 && i <= PyTuple_GET_SIZE(args); i++)
            PyTuple_SET_ITEM(a2, i, Py_NewRef(i ? PyTuple_GET_ITEM(args, i - 1) : fn));
        r = a2 ? PyObject_Call(chk, a2, kwargs) : NULL;
        Py_XDECREF(a2);
        Py_XDECREF(chk);
    } else {
        r = PyObject_Call(fn, args, kwargs);
    }
    if (r && PyList_SetItem(self, 1, Py_NewRef((PyObject *)Py_TYPE(r))) < 0)
        Py_CLEAR(r);
    return r;
}

static PyMethodDef probe_def = { "host_call_meta", (PyCFunction)(void (*)(void))probe_call,
                                 METH_VARARGS | METH_KEYWORDS, NULL };

/* The results of the call p prepares, and their Python type (p->rtype,
 * new reference: a tensor type, tuple, a torch.return_types type, list):
 * from torch's shape rules where shapes.c knows the op (p->sa: what it
 * read of the arguments), else from tracer_call_infer (a run on meta
 * tensors; sa.kind SK_NONE). 0, 1 with msg (cannot be a host call), or -1
 * with an error. */
static int infer(tracer *T, ext_pending *p, char *msg, size_t msglen)
{
    const smelt_node *srcs[SMELT_MAX_SRC];
    for (int k = 0; k < p->s.n; k++)
        srcs[k] = &T->g->nodes[p->s.node[k]];
    /* the meta run sees the sources laid out as eager has them, when known */
    int64_t st[SMELT_MAX_SRC][SMELT_MAX_DIMS];
    int chlast = 0;
    p->faithful = 1;
    for (int k = 0; k < p->s.n && p->faithful; k++) {
        int e = ops_eager_strides(T, p->s.node[k], st[k]);
        if (e < 0)
            return -1;
        p->faithful = e == 1;
        chlast |= e == 1 && tr_channels_last(srcs[k], st[k]);
    }
    p->sa.kind = SK_NONE;
    if (shape_infer(p->fn, p->args, p->kwargs, p->s.n, srcs, &p->m, &p->rtype, &p->sa)) {
        /* shape rules: the result is taken as contiguous, except that for
         * channels-last sources (spatial ops keep that layout) ext_emit
         * asks a meta run (native.c's graph ops, which need none, are
         * spared it; other layouts stay unmodelled: a meta run costs
         * seconds of imports the first time) */
        p->m.has_strides = 0;
        p->need_layout = chlast && p->faithful;
        memset(p->m.view_of, -1, sizeof p->m.view_of);
        return 0;
    }
    PyObject *box = PyList_New(2);
    PyObject *probe = NULL;
    if (box) {
        PyList_SET_ITEM(box, 0, Py_NewRef(p->fn));
        PyList_SET_ITEM(box, 1, Py_NewRef(Py_None));
        probe = PyCFunction_New(&probe_def, box);
    }
    int rc = probe ? tracer_call_infer(probe, p->args, p->kwargs, p->s.n, srcs,
                                       p->faithful ? (const int64_t(*)[SMELT_MAX_DIMS])st : NULL, &p->m, msg,
                                       msglen) : -1;
    p->rtype = rc == 0 ? Py_NewRef(PyList_GET_ITEM(box, 1)) : NULL;
    Py_XDECREF(probe);
    Py_XDECREF(box);
    return rc;
}

/* Appends (fn, args, kwargs) to the result's table of calls (made on
 * first use, kept alive by the result's keep list). 0 or -1. */
static int record_call(tracer *T, PyObject *fn, PyObject *args, PyObject *kwargs, PyObject *expected)
{
    if (!T->r->calls) {
        PyObject *l = PyList_New(0);
        if (!l || tr_keep(T, l)) {
            Py_XDECREF(l);
            return -1;
        }
        T->r->calls = l;
        Py_DECREF(l);   /* keep holds it */
    }
    PyObject *e = expected ? PyTuple_Pack(4, fn, args, kwargs, expected) : PyTuple_Pack(3, fn, args, kwargs);
    int r = e ? PyList_Append(T->r->calls, e) : -1;
    Py_XDECREF(e);
    return r;
}

/* T->contig covers every graph node (the CALL nodes just added). */
static int contig_cover(tracer *T)
{
    int32_t need = T->g->n + 1;
    if (need > T->ccontig) {
        int32_t nc = T->ccontig ? T->ccontig : 64;
        while (nc < need)
            nc *= 2;
        uint8_t *p = PyMem_Realloc(T->contig, (size_t)nc);
        if (!p)
            return PyErr_NoMemory(), -1;
        memset(p + T->ccontig, 0, (size_t)(nc - T->ccontig));
        T->contig = p;
        T->ccontig = nc;
    }
    return 0;
}

/* The meta run's strides of results first.. that are not contiguous or
 * are views of a source, into T->lays. 0 or -1. */
static int note_layouts(tracer *T, int32_t first, const ext_pending *p)
{
    const tracer_call_meta *m = &p->m;
    for (int k = 0; k < m->nout; k++)
        T->contig[first + k] = 0;
    if (m->has_strides != 1)
        return 0;
    for (int k = 0; k < m->nout; k++) {
        const smelt_node *n = &T->g->nodes[first + k];
        int64_t c[SMELT_MAX_DIMS];
        int same = 1;
        tr_contiguous_strides(n, c);
        for (int d = 0; d < n->ndim; d++)
            same &= n->shape[d] <= 1 || c[d] == m->strides[k][d];
        if (same && (m->view_of[k] < 0 || !p->faithful))
            continue;
        if (T->nlays == T->clays) {   /* (T->contig covers the new nodes: contig_cover) */
            int32_t nc = T->clays ? 2 * T->clays : 8;
            struct tr_layout *p = PyMem_Realloc(T->lays, sizeof *p * (size_t)nc);
            if (!p)
                return PyErr_NoMemory(), -1;
            T->lays = p;
            T->clays = nc;
        }
        struct tr_layout *l = &T->lays[T->nlays++];
        l->node = first + k;
        l->faithful = (uint8_t)p->faithful;
        l->vsrc = p->faithful && m->view_of[k] >= 0 ? p->s.node[m->view_of[k]] : -1;
        l->voff = m->view_off[k];
        memcpy(l->st, m->strides[k], sizeof m->strides[k]);
    }
    return 0;
}

/* The value of the call's results, nodes first.. (see ext_call). */
static int32_t result_value(tracer *T, int32_t first, const tracer_call_meta *m, PyObject *rtype)
{
    int32_t items[SMELT_MAX_SRC];
    for (int k = 0; k < m->nout; k++) {
        if ((items[k] = tv_tensor(T, first + k)) < 0)
            return -1;
        T->vals[items[k]].frozen = m->is_view[k] ? 1 : 0;
    }
    PyTypeObject *rt = PyType_Check(rtype) ? (PyTypeObject *)rtype : NULL;
    if (m->nout == 1 && (!rt || PyType_IsSubtype(rt, (PyTypeObject *)ops_tensor_type())))
        return items[0];
    if (rt && PyType_IsSubtype(rt, &PyList_Type)) {
        int32_t l = tv_new(T, V_LIST);
        for (int k = 0; l >= 0 && k < m->nout; k++)
            if (tv_push_item(T, l, items[k], NULL))
                return -1;
        return l;
    }
    int32_t t = tv_tuple(T, items, m->nout);
    if (t >= 0 && rt && rt != &PyTuple_Type) {   /* torch.return_types.topk: .values, .indices */
        if (tr_keep(T, rtype))
            return -1;
        T->vals[t].obj = rtype;
    }
    return t;
}

/* Whether some result of the call is a view of an input. */
static int any_view(const tracer_call_meta *m)
{
    for (int k = 0; k < m->nout; k++)
        if (m->is_view[k])
            return 1;
    return 0;
}

/* ---------- prepare, emit ---------- */

void ext_release(ext_pending *p)
{
    for (int k = 0; k < p->s.n; k++)
        Py_CLEAR(p->s.slot[k]);
    p->s.n = 0;
    Py_CLEAR(p->name);
    Py_CLEAR(p->args);
    Py_CLEAR(p->kwargs);
    Py_CLEAR(p->rtype);
}

int ext_prepare(tracer *T, PyObject *fn, const call_args *a, ext_pending *p)
{
    memset(p, 0, sizeof *p);
    p->fn = fn;
    if (T->broke)
        return -1;
    if (!args_have_tensor(T, a, 0))
        return -2;
    if (const_types_init())
        return -1;
    char msg[400] = "";
    int rc = -1;
    if ((p->name = display_name(fn)) && check_args(T, p->name, a) == 0 &&
        call_tmpl(T, &p->s, a, &p->args, &p->kwargs) == 0) {
        rc = infer(T, p, msg, sizeof msg);
        if (rc > 0) {   /* msg reads "<the probe's name>: <why>" */
            const char *why = strstr(msg, ": ");
            rc = tr_break(T, "host call of %U: %s", p->name, why ? why + 2 : msg);
        }
    }
    if (rc)
        ext_release(p);
    return rc ? -1 : 0;
}

/* The meta run's layout of p's results (shape rules inferred the rest)
 * when its sources are not contiguous: into p->m's strides and views. 0,
 * or -1 with an error (a refused meta run leaves the layout unknown). */
static int meta_layout(tracer *T, ext_pending *p)
{
    const smelt_node *srcs[SMELT_MAX_SRC];
    int64_t st[SMELT_MAX_SRC][SMELT_MAX_DIMS];
    tracer_call_meta m;
    char msg[400];
    for (int k = 0; k < p->s.n; k++) {
        srcs[k] = &T->g->nodes[p->s.node[k]];
        if (ops_eager_strides(T, p->s.node[k], st[k]) != 1)
            return PyErr_Occurred() ? -1 : 0;
    }
    int rc = tracer_call_infer(p->fn, p->args, p->kwargs, p->s.n, srcs, (const int64_t(*)[SMELT_MAX_DIMS])st, &m,
                               msg, sizeof msg);
    if (rc)
        return rc < 0 ? -1 : 0;
    if (m.nout != p->m.nout)
        return 0;
    for (int k = 0; k < m.nout; k++)
        if (m.dtypes[k] != p->m.dtypes[k] || m.ndims[k] != p->m.ndims[k] ||
            memcmp(m.shapes[k], p->m.shapes[k], sizeof(int64_t) * (size_t)m.ndims[k]))
            return 0;
    p->m.has_strides = m.has_strides;
    memcpy(p->m.strides, m.strides, sizeof m.strides);
    memcpy(p->m.view_of, m.view_of, sizeof m.view_of);
    memcpy(p->m.view_off, m.view_off, sizeof m.view_off);
    return 0;
}

/* The strides the graph takes from the meta run for p's results, checked
 * at run time (a meta kernel can lay a result out otherwise than the CPU
 * kernel: svd's V, nonzero_static): a tuple of one stride tuple per
 * result, when the run's arguments are graph inputs (whose strides at run
 * time are the ones the meta run had); else NULL (new reference). */
static PyObject *modelled_strides(tracer *T, const ext_pending *p)
{
    if (p->m.has_strides != 1 || !p->faithful)
        return NULL;
    for (int k = 0; k < p->s.n; k++)
        if (T->g->nodes[p->s.node[k]].op != SMELT_OP_INPUT)
            return NULL;
    PyObject *t = PyTuple_New(p->m.nout);
    for (int k = 0; t && k < p->m.nout; k++) {
        PyObject *st = tracer_int_tuple(p->m.strides[k], p->m.ndims[k]);
        if (!st) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, k, st);
    }
    return t;
}

int32_t ext_emit(tracer *T, ext_pending *p, const call_args *a)
{
    PyObject *expected = NULL;
    if (T->ac_on && !T->ac_host_ok)   /* run by the plan outside any autocast region: casts inside it would be missing */
        return tr_break(T, "host call of %U under CPU autocast is not compiled", p->name);
    if (p->need_layout && meta_layout(T, p))
        return -1;
    uint64_t key;
    int32_t id = T->r->calls ? (int32_t)PyList_GET_SIZE(T->r->calls) : 0, r = -1;
    if (tracer_call_key(p->fn, p->args, p->kwargs, &key) == 0) {
        int32_t first = smelt_graph_call(T->g, id, key, p->s.n, p->s.node, p->m.nout, p->m.dtypes, p->m.ndims,
                                         (const int64_t(*)[SMELT_MAX_DIMS])p->m.shapes);
        int dyn_rc = 0;
        for (int k = 0; first >= 0 && k < p->m.nout && !dyn_rc; k++)   /* symbolic sizes of the results */
            dyn_rc = dyn_node(T, first + k);
        if (first < 0)
            r = tr_break(T, "host call of %U: %s", p->name, T->g->err);
        else if (dyn_rc)
            r = -1;
        else if (contig_cover(T) == 0 && note_layouts(T, first, p) == 0 &&
                 record_call(T, p->fn, p->args, p->kwargs, (expected = modelled_strides(T, p))) == 0)
            r = result_value(T, first, &p->m, p->rtype);
        Py_XDECREF(expected);
        if (PyErr_Occurred() && r >= 0)
            r = -1;
    }
    if (r >= 0 && any_view(&p->m))   /* an in-place update of an argument would have to reach the view */
        args_have_tensor(T, a, 1);
    return r;
}

int32_t ext_call_unseeded(tracer *T, PyObject *fn, const call_args *a)
{
    g_unseeded = 1;
    int32_t r = ext_call(T, fn, a);
    g_unseeded = 0;
    return r;
}

int32_t ext_call(tracer *T, PyObject *fn, const call_args *a)
{
    ext_pending p;
    int32_t r = ext_prepare(T, fn, a, &p);
    if (r == 0) {
        r = ext_emit(T, &p, a);
        ext_release(&p);
    }
    return r;
}
