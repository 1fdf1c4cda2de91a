/* function_obj.c — smelt._C.CompiledFunction: a Python function compiled
 * on its first calls.
 *
 * A call binds the arguments to the function's parameters, then looks for a
 * cache entry whose guards all hold; a hit runs the entry's compiled plan
 * (or the function itself for an entry recorded as a graph break); a miss
 * traces the function on these arguments (tracer/interp.c), compiles the
 * graph and adds an entry. After MAX_ENTRIES entries the function runs
 * eagerly, with one warning.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <string.h>

#include "module.h"
#include "log.h"
#include "../tracer/trace.h"

#define MAX_ENTRIES 8
#define MAX_LOCALS 64

typedef struct entry {
    tr_result r;
    PyObject *compiled;    /* smelt._C.Compiled, or NULL: run eagerly */
    int grad_mode;         /* -1: any; else torch.is_grad_enabled() must equal it */
    struct entry *next;
} entry;

typedef struct FunctionObject {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fn;
    entry *entries;
    int nentries, fullgraph, warned;
    long ncompiles, nbreaks, nhits;
    PyObject *last_reason;
    PyObject *weakrefs;
} FunctionObject;

static PyObject *grad_enabled_fn;   /* torch.is_grad_enabled */

/* ---------- binding ---------- */

/* Lays out fn's parameters from a vectorcall into locals (new refs), as
 * CPython does: positional/keyword parameters, *args tuple, **kwargs dict. */
static int bind(PyObject *fn, PyObject *const *args, size_t nargsf, PyObject *kwn, PyObject **loc, int *nloc)
{
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(fn);
    Py_ssize_t na = PyVectorcall_NARGS(nargsf), nkw = kwn ? PyTuple_GET_SIZE(kwn) : 0;
    int np = co->co_argcount, nk = co->co_kwonlyargcount;
    int hv = !!(co->co_flags & CO_VARARGS), hk = !!(co->co_flags & CO_VARKEYWORDS);
    int total = np + nk + hv + hk;
    if (total > MAX_LOCALS)
        return PyErr_SetString(PyExc_TypeError, "smelt: too many parameters"), -1;
    memset(loc, 0, sizeof(PyObject *) * (size_t)total);
    *nloc = total;
    PyObject *names = PyObject_GetAttrString((PyObject *)co, "co_varnames");
    PyObject *kwd = hk ? PyDict_New() : NULL;
    if (!names || (hk && !kwd))
        goto fail;
    if (na > np && !hv) {
        PyErr_Format(PyExc_TypeError, "%U() takes %d positional arguments but %zd were given", co->co_name, np, na);
        goto fail;
    }
    for (Py_ssize_t i = 0; i < na && i < np; i++)
        loc[i] = Py_NewRef(args[i]);
    if (hv && !(loc[np + nk] = PyTuple_New(na > np ? na - np : 0)))
        goto fail;
    for (Py_ssize_t i = np; hv && i < na; i++)
        PyTuple_SET_ITEM(loc[np + nk], i - np, Py_NewRef(args[i]));
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *kn = PyTuple_GET_ITEM(kwn, k);
        int slot = -1;
        for (int i = co->co_posonlyargcount; i < np + nk; i++)
            if (PyUnicode_Compare(PyTuple_GET_ITEM(names, i), kn) == 0)
                slot = i;
        if (slot >= 0 && !loc[slot])
            loc[slot] = Py_NewRef(args[na + k]);
        else if (slot < 0 && kwd && !PyDict_SetItem(kwd, kn, args[na + k]))
            continue;
        else {
            PyErr_Format(PyExc_TypeError, "%U() got an unexpected or repeated argument %R", co->co_name, kn);
            goto fail;
        }
    }
    if (hk)
        loc[np + nk + hv] = kwd;
    kwd = NULL;
    PyObject *defs = PyFunction_GET_DEFAULTS(fn), *kwdefs = PyFunction_GET_KW_DEFAULTS(fn);
    Py_ssize_t nd = defs ? PyTuple_GET_SIZE(defs) : 0;
    for (int i = 0; i < np + nk; i++) {
        if (loc[i])
            continue;
        PyObject *d = i < np ? (i >= np - nd ? PyTuple_GET_ITEM(defs, i - (np - nd)) : NULL)
                             : (kwdefs ? PyDict_GetItem(kwdefs, PyTuple_GET_ITEM(names, i)) : NULL);
        if (!d) {
            PyErr_Format(PyExc_TypeError, "%U() missing argument %R", co->co_name, PyTuple_GET_ITEM(names, i));
            goto fail;
        }
        loc[i] = Py_NewRef(d);
    }
    Py_DECREF(names);
    return 0;
fail:
    Py_XDECREF(names);
    Py_XDECREF(kwd);
    for (int i = 0; i < total; i++)
        Py_CLEAR(loc[i]);
    return -1;
}

/* ---------- sources and guards ---------- */

typedef struct fetch_ctx {
    const tr_result *r;
    PyObject *const *loc;
    PyObject *globals, *builtins;
    PyObject *fn;          /* the compiled function (root of SRC_CELL with no parent) */
    PyObject **memo;       /* new refs, NULL = not fetched */
} fetch_ctx;

/* Value of source s (borrowed from the memo); NULL with no error set when
 * it cannot be fetched (a failed guard), or with an error. */
static PyObject *fetch(fetch_ctx *c, int32_t s)
{
    if (c->memo[s])
        return c->memo[s];
    const tr_src *src = &c->r->srcs[s];
    PyObject *p = src->parent >= 0 ? fetch(c, src->parent) : NULL, *v = NULL;
    if (src->parent >= 0 && !p)
        return NULL;
    switch (src->kind) {
    case SRC_LOCAL: v = Py_XNewRef(c->loc[src->index]); break;
    case SRC_GLOBAL: v = Py_XNewRef(PyDict_GetItemWithError(c->globals, src->key)); break;
    case SRC_BUILTIN: v = Py_XNewRef(PyDict_GetItemWithError(c->builtins, src->key)); break;
    case SRC_ATTR: v = PyObject_GetAttr(p, src->key); break;
    case SRC_ITEM: v = PySequence_GetItem(p, src->index); break;
    case SRC_DICT: v = PyDict_Check(p) ? Py_XNewRef(PyDict_GetItemWithError(p, src->key)) : NULL; break;
    case SRC_TYPE: v = Py_NewRef((PyObject *)Py_TYPE(p)); break;
    case SRC_CELL: {
        PyObject *owner = src->parent >= 0 ? p : c->fn;
        PyObject *clo = PyFunction_Check(owner) ? PyFunction_GET_CLOSURE(owner) : NULL;
        PyObject *cell = clo && src->index < PyTuple_GET_SIZE(clo) ? PyTuple_GET_ITEM(clo, src->index) : NULL;
        v = cell ? Py_XNewRef(PyCell_GET(cell)) : NULL;
        break;
    }
    }
    if (!v && PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_MemoryError))
        PyErr_Clear();
    c->memo[s] = v;
    return v;
}

static int tensor_matches(PyObject *v, PyObject *ex)
{
    static const char *attrs[] = { "dtype", "shape", "is_cpu", "requires_grad" };
    if (Py_TYPE(v) != Py_TYPE(ex))
        return 0;
    for (int i = 0; i < 4; i++) {
        PyObject *a = PyObject_GetAttrString(v, attrs[i]), *b = PyObject_GetAttrString(ex, attrs[i]);
        int eq = a && b && (a == b || PyObject_RichCompareBool(a, b, Py_EQ) == 1);
        Py_XDECREF(a);
        Py_XDECREF(b);
        if (!eq)
            return PyErr_Occurred() ? -1 : 0;
    }
    PyObject *a = PyObject_CallMethod(v, "stride", NULL), *b = PyObject_CallMethod(ex, "stride", NULL);
    int eq = a && b && PyObject_RichCompareBool(a, b, Py_EQ) == 1;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return eq ? 1 : PyErr_Occurred() ? -1 : 0;
}

static int guard_holds(fetch_ctx *c, const tr_guard *gd)
{
    PyObject *v = fetch(c, gd->src);
    if (!v)
        return PyErr_Occurred() ? -1 : 0;
    switch (gd->kind) {
    case TG_TYPE: return (PyObject *)Py_TYPE(v) == gd->obj;
    case TG_ID: return v == gd->obj;
    case TG_EQ: return Py_TYPE(v) == Py_TYPE(gd->obj) && PyObject_RichCompareBool(v, gd->obj, Py_EQ) == 1;
    case TG_LEN: return PyObject_Length(v) == gd->n;
    case TG_EMPTY: return v == Py_None || (PyDict_Check(v) && PyDict_GET_SIZE(v) == 0);
    default: return tensor_matches(v, gd->obj);
    }
}

static void src_text(const tr_result *r, int32_t s, char *buf, size_t n)
{
    const tr_src *src = &r->srcs[s];
    char p[400] = "";
    if (src->parent >= 0)
        src_text(r, src->parent, p, sizeof p);
    switch (src->kind) {
    case SRC_LOCAL: snprintf(buf, n, "L[%zd]", src->index); break;
    case SRC_GLOBAL: snprintf(buf, n, "G['%s']", PyUnicode_AsUTF8(src->key)); break;
    case SRC_BUILTIN: snprintf(buf, n, "B['%s']", PyUnicode_AsUTF8(src->key)); break;
    case SRC_ATTR: snprintf(buf, n, "%s.%s", p, PyUnicode_AsUTF8(src->key)); break;
    case SRC_ITEM: snprintf(buf, n, "%s[%zd]", p, src->index); break;
    case SRC_DICT: {
        PyObject *rep = PyObject_Repr(src->key);
        snprintf(buf, n, "%s[%s]", p, rep ? PyUnicode_AsUTF8(rep) : "?");
        Py_XDECREF(rep);
        break;
    }
    case SRC_TYPE: snprintf(buf, n, "type(%s)", p); break;
    case SRC_CELL: snprintf(buf, n, "%s.__closure__[%zd]", src->parent >= 0 ? p : "F", src->index); break;
    }
}

static const char *guard_kind_name(int k)
{
    static const char *names[] = { "type is", "is", "==", "tensor matches", "len ==", "is empty" };
    return names[k];
}

/* 1 if every guard of e holds; 0 with the first failure described in why
 * (if given); -1 on error. */
static int entry_matches(entry *e, PyObject *fn, PyObject *const *loc, PyObject *globals, char *why, size_t n)
{
    PyObject *memo_small[64], **memo = memo_small;
    if (e->r.nsrcs > 64 && !(memo = PyMem_Calloc((size_t)e->r.nsrcs, sizeof(PyObject *))))
        return PyErr_NoMemory(), -1;
    memset(memo, 0, sizeof(PyObject *) * (size_t)(e->r.nsrcs < 64 ? 64 : e->r.nsrcs));
    fetch_ctx c = { .r = &e->r, .loc = loc, .globals = globals, .builtins = PyEval_GetBuiltins(), .fn = fn, .memo = memo };
    int ok = 1;
    if (e->grad_mode >= 0) {
        PyObject *g = PyObject_CallNoArgs(grad_enabled_fn);
        ok = g ? (g == Py_True) == e->grad_mode : -1;
        Py_XDECREF(g);
        if (!ok && why)
            snprintf(why, n, "grad mode changed");
    }
    for (int32_t i = 0; ok == 1 && i < e->r.nguards; i++) {
        ok = guard_holds(&c, &e->r.guards[i]);
        if (ok == 0 && why) {
            char s[400];
            src_text(&e->r, e->r.guards[i].src, s, sizeof s);
            PyObject *rep = e->r.guards[i].obj ? PyObject_Repr(e->r.guards[i].obj) : NULL;
            snprintf(why, n, "%s %s %s failed", s, guard_kind_name(e->r.guards[i].kind),
                     rep ? PyUnicode_AsUTF8(rep) : "");
            Py_XDECREF(rep);
            PyErr_Clear();
        }
    }
    for (int32_t i = 0; i < e->r.nsrcs; i++)
        Py_XDECREF(memo[i]);
    if (memo != memo_small)
        PyMem_Free(memo);
    return ok;
}

/* ---------- running an entry ---------- */

static PyObject *build_result(const tr_result *r, int32_t o, PyObject *outs)
{
    const tr_out *x = &r->outs[o];
    switch (x->kind) {
    case TO_TENSOR: return Py_NewRef(PyList_GET_ITEM(outs, x->index));
    case TO_CONST: return Py_NewRef(x->obj);
    default: break;
    }
    PyObject *c = x->kind == TO_DICT ? PyDict_New() : x->kind == TO_LIST ? PyList_New(x->n) : PyTuple_New(x->n);
    for (int32_t i = 0; c && i < x->n; i++) {
        PyObject *v = build_result(r, x->first + i, outs);
        if (!v) {
            Py_CLEAR(c);
            break;
        }
        if (x->kind == TO_DICT) {
            int bad = PyDict_SetItem(c, PyTuple_GET_ITEM(x->obj, i), v);
            Py_DECREF(v);
            if (bad)
                Py_CLEAR(c);
        } else if (x->kind == TO_LIST) {
            PyList_SET_ITEM(c, i, v);
        } else {
            PyTuple_SET_ITEM(c, i, v);
        }
    }
    if (c && x->kind == TO_TUPLE && x->obj)   /* a named result type */
        Py_SETREF(c, PyObject_CallOneArg(x->obj, c));
    return c;
}

static PyObject *run_entry(entry *e, PyObject *fn, PyObject *const *loc, PyObject *globals)
{
    PyObject *ins_small[32], **ins = ins_small, *res = NULL;
    int32_t n = e->r.ninputs;
    if (n > 32 && !(ins = PyMem_Calloc((size_t)n, sizeof(PyObject *))))
        return PyErr_NoMemory();
    PyObject *memo_small[64], **memo = memo_small;
    if (e->r.nsrcs > 64 && !(memo = PyMem_Calloc((size_t)e->r.nsrcs, sizeof(PyObject *))))
        goto out;
    memset(memo, 0, sizeof(PyObject *) * (size_t)(e->r.nsrcs < 64 ? 64 : e->r.nsrcs));
    fetch_ctx c = { .r = &e->r, .loc = loc, .globals = globals, .builtins = PyEval_GetBuiltins(), .fn = fn, .memo = memo };
    int ok = 1;
    for (int32_t k = 0; k < n && ok; k++)
        ok = (ins[k] = fetch(&c, e->r.input_src[k])) != NULL;
    if (ok) {
        PyObject *outs = PyObject_Vectorcall(e->compiled, ins, (size_t)n, NULL);
        if (outs) {
            res = build_result(&e->r, 0, outs);
            Py_DECREF(outs);
        }
    } else if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_RuntimeError, "smelt: an input vanished between guard check and run");
    }
    for (int32_t i = 0; i < e->r.nsrcs; i++)
        Py_XDECREF(memo[i]);
    if (memo != memo_small)
        PyMem_Free(memo);
out:
    if (ins != ins_small)
        PyMem_Free(ins);
    return res;
}

static void entry_free(entry *e)
{
    tracer_result_clear(&e->r);
    Py_XDECREF(e->compiled);
    PyMem_Free(e);
}

/* ---------- tracing a new entry ---------- */

static int any_requires_grad(const tr_result *r, PyObject *fn, PyObject *const *loc, PyObject *globals)
{
    PyObject *memo_small[64] = { 0 }, **memo = memo_small;
    if (r->nsrcs > 64 && !(memo = PyMem_Calloc((size_t)r->nsrcs, sizeof(PyObject *))))
        return -1;
    fetch_ctx c = { .r = r, .loc = loc, .globals = globals, .builtins = PyEval_GetBuiltins(), .fn = fn, .memo = memo };
    int any = 0;
    for (int32_t k = 0; k < r->ninputs && !any; k++) {
        PyObject *t = fetch(&c, r->input_src[k]);
        PyObject *rg = t ? PyObject_GetAttrString(t, "requires_grad") : NULL;
        any = rg == Py_True;
        Py_XDECREF(rg);
    }
    for (int32_t i = 0; i < r->nsrcs; i++)
        Py_XDECREF(memo[i]);
    if (memo != memo_small)
        PyMem_Free(memo);
    return any;
}

static void log_guards(const tr_result *r)
{
    if (!pyext_log_on(PYEXT_LOG_GUARDS))
        return;
    PyObject *lines = PyList_New(0);
    for (int32_t i = 0; lines && i < r->nguards; i++) {
        char s[400];
        src_text(r, r->guards[i].src, s, sizeof s);
        PyObject *rep = r->guards[i].obj ? PyObject_Repr(r->guards[i].obj) : PyUnicode_FromString("");
        PyObject *l = rep ? PyUnicode_FromFormat("  %s %s %U", s, guard_kind_name(r->guards[i].kind), rep) : NULL;
        if (!l || PyList_Append(lines, l))
            PyErr_Clear();
        Py_XDECREF(l);
        Py_XDECREF(rep);
    }
    PyObject *nl = PyUnicode_FromString("\n"), *txt = lines && nl ? PyUnicode_Join(nl, lines) : NULL;
    if (txt)
        pyext_log_write(PYEXT_LOG_GUARDS, PyUnicode_AsUTF8(txt));
    PyErr_Clear();
    Py_XDECREF(txt);
    Py_XDECREF(nl);
    Py_XDECREF(lines);
}

/* Traces and compiles a new entry for this call (a break entry when the
 * trace stops). NULL with an exception on error. */
static entry *new_entry(FunctionObject *self, PyObject *const *loc, int nloc)
{
    entry *e = PyMem_Calloc(1, sizeof *e);
    if (!e)
        return (entry *)PyErr_NoMemory();
    e->grad_mode = -1;
    int rc = tracer_trace(self->fn, loc, nloc, &e->r);
    if (rc < 0) {
        entry_free(e);
        return NULL;
    }
    PyObject *globals = PyFunction_GET_GLOBALS(self->fn);
    if (rc == 0) {
        int rg = any_requires_grad(&e->r, self->fn, loc, globals);
        PyObject *g = rg > 0 ? PyObject_CallNoArgs(grad_enabled_fn) : NULL;
        if (rg > 0 && g == Py_True) {
            rc = 1;
            snprintf(e->r.reason, sizeof e->r.reason, "inputs require grad: autograd through compiled code is not built yet");
        }
        if (rg > 0)
            e->grad_mode = g == Py_True;
        Py_XDECREF(g);
        PyErr_Clear();
    }
    if (rc == 1) {
        self->nbreaks++;
        Py_XSETREF(self->last_reason, PyUnicode_FromString(e->r.reason));
        return e;
    }
    pyext_state *st = pyext_state_of((PyObject *)self);
    if (pyext_log_on(PYEXT_LOG_GRAPH)) {
        char *txt = smelt_graph_print(e->r.graph);
        if (txt)
            pyext_log_write(PYEXT_LOG_GRAPH, txt);
        free(txt);
    }
    log_guards(&e->r);
    char err[512];
    smelt_compile_opts o = { .opt_level = 2, .keep_ir = pyext_log_on(PYEXT_LOG_OUTPUT_CODE) || pyext_log_on(PYEXT_LOG_ASM) };
    smelt_plan *plan = smelt_compile(e->r.graph, &o, err, sizeof err);
    if (!plan) {
        snprintf(e->r.reason, sizeof e->r.reason, "compile failed: %.400s", err);
        self->nbreaks++;
        return e;
    }
    if (pyext_log_on(PYEXT_LOG_OUTPUT_CODE) && smelt_plan_code(plan, "kernels"))
        pyext_log_write(PYEXT_LOG_OUTPUT_CODE, smelt_plan_code(plan, "kernels"));
    e->compiled = pyext_compiled_new(st, e->r.graph, plan);
    if (!e->compiled) {
        entry_free(e);
        return NULL;
    }
    self->ncompiles++;
    return e;
}

/* ---------- the call ---------- */

static PyObject *function_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwn)
{
    FunctionObject *self = (FunctionObject *)op;
    PyObject *loc[MAX_LOCALS];
    int nloc;
    if (bind(self->fn, args, nargsf, kwn, loc, &nloc))
        return NULL;
    PyObject *globals = PyFunction_GET_GLOBALS(self->fn), *res = NULL;
    char why[512] = "";
    entry *e = self->entries;
    int m = 0;
    for (; e; e = e->next)
        if ((m = entry_matches(e, self->fn, loc, globals, why[0] ? NULL : why, sizeof why)) != 0)
            break;
    if (m < 0)
        goto out;
    if (!e && self->nentries >= MAX_ENTRIES) {
        if (!self->warned++)
            PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "smelt: %U recompiled %d times; running it eagerly from now on (last: %s)",
                             ((PyCodeObject *)PyFunction_GET_CODE(self->fn))->co_name, MAX_ENTRIES, why);
        res = PyObject_Vectorcall(self->fn, args, nargsf, kwn);
        goto out;
    }
    if (!e) {
        if (self->entries && pyext_log_on(PYEXT_LOG_RECOMPILES))
            pyext_log_write(PYEXT_LOG_RECOMPILES, why);
        if (!(e = new_entry(self, loc, nloc)))
            goto out;
        e->next = self->entries;
        self->entries = e;
        self->nentries++;
        if (!e->compiled) {
            if (pyext_log_on(PYEXT_LOG_GRAPH_BREAKS))
                pyext_log_write(PYEXT_LOG_GRAPH_BREAKS, e->r.reason);
            if (self->fullgraph) {
                PyErr_Format(PyExc_RuntimeError, "smelt (fullgraph=True): %s", e->r.reason);
                goto out;
            }
        }
    } else {
        self->nhits++;
    }
    res = e->compiled ? run_entry(e, self->fn, loc, globals) : PyObject_Vectorcall(self->fn, args, nargsf, kwn);
out:
    for (int i = 0; i < nloc; i++)
        Py_XDECREF(loc[i]);
    return res;
}

/* ---------- type ---------- */

static PyObject *function_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "fn", "fullgraph", NULL };
    PyObject *fn;
    int fullgraph = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p", kwlist, &fn, &fullgraph))
        return NULL;
    if (!PyFunction_Check(fn))
        return PyErr_Format(PyExc_TypeError, "smelt: can only compile Python functions, got %s", Py_TYPE(fn)->tp_name);
    if (!grad_enabled_fn) {
        PyObject *torch = PyImport_ImportModule("torch");
        grad_enabled_fn = torch ? PyObject_GetAttrString(torch, "is_grad_enabled") : NULL;
        Py_XDECREF(torch);
        if (!grad_enabled_fn || tracer_init())
            return NULL;
    }
    FunctionObject *self = (FunctionObject *)tp->tp_alloc(tp, 0);
    if (!self)
        return NULL;
    self->vectorcall = function_call;
    self->fn = Py_NewRef(fn);
    self->fullgraph = fullgraph;
    return (PyObject *)self;
}

static void drop_entries(FunctionObject *self)
{
    while (self->entries) {
        entry *e = self->entries;
        self->entries = e->next;
        entry_free(e);
    }
    self->nentries = 0;
}

static int function_traverse(PyObject *op, visitproc visit, void *arg)
{
    FunctionObject *self = (FunctionObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->fn);
    Py_VISIT(self->last_reason);
    for (entry *e = self->entries; e; e = e->next) {
        Py_VISIT(e->compiled);
        Py_VISIT(e->r.keep);
    }
    return 0;
}

static int function_clear(PyObject *op)
{
    FunctionObject *self = (FunctionObject *)op;
    Py_CLEAR(self->fn);
    Py_CLEAR(self->last_reason);
    drop_entries(self);
    return 0;
}

static void function_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    if (((FunctionObject *)op)->weakrefs)
        PyObject_ClearWeakRefs(op);
    function_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyObject *function_reset(PyObject *op, PyObject *unused)
{
    (void)unused;
    drop_entries((FunctionObject *)op);
    Py_RETURN_NONE;
}

static PyObject *function_stats(PyObject *op, PyObject *unused)
{
    FunctionObject *self = (FunctionObject *)op;
    (void)unused;
    int eager = 0;
    for (entry *e = self->entries; e; e = e->next)
        eager += !e->compiled;
    return Py_BuildValue("{s:i,s:i,s:l,s:l,s:l,s:O}", "entries", self->nentries, "eager_entries", eager,
                         "compiles", self->ncompiles, "breaks", self->nbreaks, "hits", self->nhits,
                         "last_break", self->last_reason ? self->last_reason : Py_None);
}

static PyObject *function_get_fn(PyObject *op, void *unused)
{
    (void)unused;
    return Py_NewRef(((FunctionObject *)op)->fn);
}

static PyMethodDef function_methods[] = {
    { "reset", function_reset, METH_NOARGS, "Drop every compiled entry." },
    { "stats", function_stats, METH_NOARGS, "Counters: entries, compiles, breaks, hits, last_break." },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef function_getset[] = {
    { "fn", function_get_fn, NULL, "The original function.", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyMemberDef function_members[] = {
    { "__vectorcalloffset__", T_PYSSIZET, offsetof(FunctionObject, vectorcall), READONLY, NULL },
    { "__weaklistoffset__", T_PYSSIZET, offsetof(FunctionObject, weakrefs), READONLY, NULL },
    { NULL, 0, 0, 0, NULL },
};

static PyType_Slot function_slots[] = {
    { Py_tp_new, function_new },
    { Py_tp_dealloc, function_dealloc },
    { Py_tp_traverse, function_traverse },
    { Py_tp_clear, function_clear },
    { Py_tp_call, PyVectorcall_Call },
    { Py_tp_methods, function_methods },
    { Py_tp_getset, function_getset },
    { Py_tp_members, function_members },
    { Py_tp_doc, "CompiledFunction(fn, fullgraph=False): fn traced and compiled per guard set." },
    { 0, NULL },
};

static PyType_Spec function_spec = {
    .name = "smelt._C.CompiledFunction",
    .basicsize = sizeof(FunctionObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = function_slots,
};

int pyext_function_type_init(PyObject *m)
{
    PyObject *tp = PyType_FromModuleAndSpec(m, &function_spec, NULL);
    if (!tp)
        return -1;
    int rc = PyModule_AddObjectRef(m, "CompiledFunction", tp);
    Py_DECREF(tp);
    return rc;
}
