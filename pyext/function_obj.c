/* function_obj.c — smelt._C.CompiledFunction: a Python function compiled
 * on its first calls.
 *
 * A call binds the arguments to the function's parameters, then looks for a
 * cache entry whose guard tree (guards/guards.h) holds on that frame; a hit
 * runs the entry's compiled plan on the graph inputs that very check
 * fetched (guard_check_values: fetched once, not re-validated), or the
 * function itself for an entry recorded as a graph break; a miss traces the function on these arguments (tracer/interp.c),
 * builds the entry's guard tree from the sources and guards the trace
 * recorded, compiles the graph and adds the entry. After MAX_ENTRIES
 * entries the function runs eagerly, with one warning.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "module.h"
#include "log.h"
#include "autograd_bridge.h"
#include "../autograd/autograd.h"
#include "debugdir.h"
#include "../guards/guards.h"
#include "../guards/pycompat.h"
#include "../tracer/trace.h"
#include "../tracer/eval_frame.h"
#include "../inductor/cpu/jit.h"
#include "../inductor/backend.h"

#define MAX_ENTRIES 8
#define MAX_LOCALS 64
#define MAX_CELLS 64
#define VALS_SMALL 128   /* guard nodes whose values fit on the stack */

/* A cache entry. Calls that run it hold a reference (refs), taken and
 * dropped under the GIL: a plan runs with the GIL released, and another
 * thread may reset the function meanwhile; the entry is then unlinked
 * (dead) and freed by the last call that used it. */
typedef struct entry {
    tr_result r;
    guard_tree *tree;      /* NULL: its guards could not be built; never matches */
    int *input_node;       /* graph input k is the value of tree node input_node[k] */
    uint8_t *want;         /* by node id: 1 for the nodes whose values a run uses */
    int *wanted, nwanted;  /* those node ids: the graph inputs' and TO_SOURCE results' */
    PyObject *compiled;    /* smelt._C.Compiled, or NULL: run eagerly */
    pyext_ad ad;           /* inputs require grad: forward and backward plans (ad.spec set), compiled = ad.fwd */
    struct entry *next;
    int refs;              /* the list's reference (while linked) + running calls */
    int dead;              /* unlinked by a reset */
    /* a partial entry (r.stop_pc >= 0): its graph yields the frame's state
     * before instruction `insn`, which then runs eagerly */
    tr_insn insn;
    int resume_pc;         /* where CPython restarts the frame to run insn itself */
    /* an entry with symbolic sizes (r.dyn): `compiled` runs the sizes it was
     * traced with; plans for other sizes are made on their first call, from
     * the graph rebuilt for them (tracer_dyn_graph), and kept in a ring */
    struct dyn_plan *dp;
    int ndp, next_dp;
    int32_t *dyn_in;       /* graph inputs with symbolic sizes */
    int ndyn_in;
    int8_t (*view_order)[SMELT_MAX_DIMS];   /* per output plan slot of a view result: its dims from the
                                               outermost stride in, a dense layout (NULL: no views) */
    uint8_t *rg;           /* a symbolic entry under autograd: the graph inputs that require grad (each
                              size's graph is split again for them) */
} entry;

#define DYN_PLANS 64

typedef struct dyn_plan {
    int64_t vals[SYM_MAX_VARS];
    PyObject *compiled;    /* under autograd: ad.fwd */
    pyext_ad ad;           /* under autograd (e->rg): forward and backward for these values */
    PyObject *views;       /* per output plan slot, the (size, stride, offset) of a view for these
                              values (a tuple; NULL: the entry has no view results) */
} dyn_plan;

/* Where the entries of a function start: its call (pc 0), or a resume
 * point, the instruction after a partial entry's break (pc > 0), whose
 * entries are traced from a frame state (continuations). */
typedef struct site {
    int pc;
    entry *entries;
    int nentries, warned;
    PyObject *names;       /* pc > 0: a name per frame state slot, for guard texts */
    PyObject *seen;        /* dynamic=None: sizes of the tensor inputs traced so far (tr_start's seen) */
    struct site *next;
} site;

typedef struct FunctionObject {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fn;
    PyObject *code;        /* fn.__code__ the entries were traced from (NULL: none yet) */
    site top;              /* entries of the call */
    site *resumes;         /* resume points after breaks */
    int fullgraph;
    int dynamic;           /* -1 None (sizes that change become symbols), 0 False, 1 True */
    long ndynentries, ndynplans;   /* entries with symbolic sizes; plans made for their new sizes */
    int packing;           /* weight_packing (PYEXT_PACK_*) of the Compiled objects it makes */
    char backend[16];      /* options["backend"] ("cpu", "spirv"), "" for the default (SMELT_BACKEND) */
    PyThread_type_lock compiling;    /* held by the thread tracing and compiling a new entry */
    unsigned long compiler;          /* that thread's id (0: none) */
    long ncompiles, nbreaks, nhits;
    long nbackward;        /* compiles with a backward plan (inputs required grad) */
    long ngenerated, nplans_cached;   /* functions LLVM generated; plans read from the disk cache */
    double trace_ms, compile_ms;   /* of the last new entry */
    PyObject *last_reason;
    PyObject *weakrefs;
} FunctionObject;

static PyObject *grad_enabled_fn;   /* torch.is_grad_enabled */
static PyObject *autocast_fn;   /* torch._C._is_any_autocast_enabled */
static PyObject *autocast_dev_fn;   /* torch.is_autocast_enabled */
static PyObject *increment_version_fn;   /* torch._C._increment_version */
static PyObject *scalar_tensor_fn;   /* torch.scalar_tensor */
static PyObject *mode_stack_fn[2];   /* torch._C._len_torch_function_stack, _len_torch_dispatch_stack */
static PyObject *hook_made;   /* list of weakrefs to the CompiledFunctions the hook made */

/* ---------- the frame ----------
 *
 * What the guard trees see as the frame's locals: the bound parameters
 * loc[0..nargs) in CPython's order, then the contents of the function's
 * closure cells loc[nargs + i] (NULL for an empty cell). So a closure
 * variable of the compiled function is the local L['name'] of its trees:
 * the function object is fixed per CompiledFunction, and so is its closure
 * tuple (read-only); only the cells' contents change. nargs depends on the
 * code object only, which is why entries are dropped when fn.__code__ is
 * replaced. */

/* One call: its frame for the guard trees (loc[0..nloc): parameters, then
 * cell contents; at a resume point the frame state's slots, then its
 * stack: see tr_start), and the original arguments for running eagerly.
 * nargs: where closure cell contents start in loc. */
typedef struct call_frame {
    PyObject *const *loc;
    int nloc, nargs;
    site *site;
    PyObject *globals, *builtins;
    PyObject *closure;     /* the called function's closure (cells a compiled entry assigns), or NULL */
    PyObject *const *args;
    size_t nargsf;
    PyObject *kwn;
    int from_hook;         /* a frame offered by the hook: "eager" = let it run */
    const tracer_frame_view *view;   /* that frame (NULL for a call from Python) */
    tr_fstate *state;      /* at a resume point: the state loc comes from */
} call_frame;

/* co_varnames of co, fetched on first use into *names (NULL + error). */
static PyObject *varnames(PyCodeObject *co, PyObject **names)
{
    if (!*names)
        *names = PyCode_GetVarnames(co);
    return *names;
}

/* Slot of keyword kn among the parameters that accept keywords; -1 if
 * none, -2 on error. */
static int keyword_slot(PyCodeObject *co, PyObject **names, PyObject *kn)
{
    if (!varnames(co, names))
        return -2;
    int last = co->co_argcount + co->co_kwonlyargcount;
    for (int i = co->co_posonlyargcount; i < last; i++)
        if (PyUnicode_Compare(PyTuple_GET_ITEM(*names, i), kn) == 0)
            return i;
    return PyErr_Occurred() ? -2 : -1;
}

/* Fills the unbound parameters of loc[0..np+nk) from fn's defaults. */
static int bind_defaults(PyObject *fn, PyCodeObject *co, PyObject **names, PyObject **loc)
{
    int np = co->co_argcount, nk = co->co_kwonlyargcount;
    PyObject *defs = PyFunction_GET_DEFAULTS(fn), *kwdefs = PyFunction_GET_KW_DEFAULTS(fn);
    Py_ssize_t nd = defs ? PyTuple_GET_SIZE(defs) : 0;
    for (int i = 0; i < np + nk; i++) {
        if (loc[i])
            continue;
        PyObject *d = i < np && i >= np - nd ? PyTuple_GET_ITEM(defs, i - (np - nd)) : NULL;
        if (i >= np && kwdefs && varnames(co, names))
            d = PyDict_GetItem(kwdefs, PyTuple_GET_ITEM(*names, i));
        if (!d) {
            if (varnames(co, names))
                PyErr_Format(PyExc_TypeError, "%U() missing argument %R", co->co_name,
                             PyTuple_GET_ITEM(*names, i));
            return -1;
        }
        loc[i] = Py_NewRef(d);
    }
    return 0;
}

/* Parameters of code co: positional, keyword-only, *args, **kwargs. */
static int param_count(PyCodeObject *co)
{
    return co->co_argcount + co->co_kwonlyargcount + !!(co->co_flags & CO_VARARGS) +
           !!(co->co_flags & CO_VARKEYWORDS);
}

/* Lays out fn's parameters from a vectorcall into loc (new refs), as
 * CPython does: positional/keyword parameters, *args tuple, **kwargs dict;
 * *nargs gets their number. 0, or -1 with TypeError (loc then empty). */

static int bind(PyObject *fn, PyObject *const *args, size_t nargsf, PyObject *kwn, PyObject **loc, int *nargs)
{
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(fn);
    Py_ssize_t na = PyVectorcall_NARGS(nargsf), nkw = kwn ? PyTuple_GET_SIZE(kwn) : 0;
    int np = co->co_argcount, nk = co->co_kwonlyargcount;
    int hv = !!(co->co_flags & CO_VARARGS), hk = !!(co->co_flags & CO_VARKEYWORDS);
    int total = param_count(co);
    *nargs = 0;
    if (total > MAX_LOCALS)
        return PyErr_SetString(PyExc_TypeError, "smelt: too many parameters"), -1;
    memset(loc, 0, sizeof(PyObject *) * (size_t)total);
    PyObject *names = NULL, *kwd = hk ? PyDict_New() : NULL;
    if (hk && !kwd)
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
        int slot = keyword_slot(co, &names, kn);
        if (slot == -2)
            goto fail;
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
    if (bind_defaults(fn, co, &names, loc))
        goto fail;
    Py_XDECREF(names);
    *nargs = total;
    return 0;
fail:
    Py_XDECREF(names);
    Py_XDECREF(kwd);
    for (int i = 0; i < total; i++)
        Py_CLEAR(loc[i]);
    return -1;
}

/* Appends the contents of fn's closure cells to loc[0..nargs) (new refs,
 * NULL for an empty cell; cells past MAX_CELLS are left out, so guards on
 * them fail as missing locals). Returns the frame's size. */
static int add_cells(PyObject *fn, PyObject **loc, int nargs)
{
    PyObject *clo = PyFunction_GET_CLOSURE(fn);
    int n = clo && PyTuple_Check(clo) ? (int)PyTuple_GET_SIZE(clo) : 0;
    if (n > MAX_CELLS)
        n = MAX_CELLS;
    for (int i = 0; i < n; i++) {
        PyObject *cell = PyTuple_GET_ITEM(clo, i);
        loc[nargs + i] = PyCell_Check(cell) ? Py_XNewRef(PyCell_GET(cell)) : NULL;
    }
    return nargs + n;
}

/* ---------- guard trees ---------- */

/* UTF-8 of name i of tuple names ("?" when there is none). */
static const char *name_at(PyObject *names, Py_ssize_t i)
{
    const char *s = names && i < PyTuple_GET_SIZE(names) ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, i)) : NULL;
    if (!s)
        PyErr_Clear();
    return s ? s : "?";
}

/* The tree node of source src, whose ancestors' nodes are in nodes[]
 * (sources come parent first). vars/cells: the code's co_varnames and
 * co_freevars (for the names of locals); nargs: the frame's parameter
 * count. NULL with an exception. */
static guard_node *src_node(guard_tree *t, const tr_src *src, guard_node **nodes, PyObject *vars, PyObject *cells,
                            int nargs)
{
    guard_node *p = src->parent >= 0 ? nodes[src->parent] : NULL;
    const char *key = src->key && PyUnicode_Check(src->key) ? PyUnicode_AsUTF8(src->key) : NULL;
    switch ((tr_src_kind)src->kind) {
    case SRC_LOCAL: return guard_local(t, (int)src->index, name_at(vars, src->index));
    case SRC_GLOBAL:
    case SRC_BUILTIN: return guard_global(t, key);   /* a global shadowing a builtin is found first */
    case SRC_ATTR: return guard_attr(t, p, key);
    case SRC_ITEM: return guard_item(t, p, src->index);
    case SRC_DICT:   /* index > 0: a key hashed by identity, itself fetched by source index - 1 */
        return src->index > 0 ? guard_dict_item_id(t, p, src->key, guard_node_source(nodes[src->index - 1]))
                              : guard_dict_item(t, p, src->key);
    case SRC_TYPE: return guard_type(t, p);
    case SRC_CELL:
        if (p)
            return guard_closure_cell(t, p, (int)src->index);
        return guard_local(t, nargs + (int)src->index, name_at(cells, src->index));
    }
    PyErr_SetString(PyExc_SystemError, "smelt: unknown source kind");
    return NULL;
}

/* Adds the leaf for tracer guard gd on node n (nodes: by source). 0, or -1
 * with an exception. */
static int add_leaf(guard_node *n, const tr_guard *gd, guard_node *const *nodes)
{
    switch ((tr_guard_kind)gd->kind) {
    case TG_SAME: return guard_add_same_as(n, nodes[gd->n]);
    case TG_NOT_SAME: return guard_add_not_same_as(n, nodes[gd->n]);
    case TG_TYPE: return guard_add_type_is(n, (PyTypeObject *)gd->obj);
    case TG_ID: return guard_add_id_is(n, gd->obj);
    case TG_EQ:
        if (guard_add_equals(n, gd->obj) == 0)
            return 0;
        if (!PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear();   /* not a constant equals knows (Ellipsis, ...): identity */
        return guard_add_id_is(n, gd->obj);
    case TG_TENSOR: {
        uint8_t dyn[SMELT_MAX_DIMS] = { 0 };
        for (int d = 0; d < SMELT_MAX_DIMS; d++)
            dyn[d] = (uint8_t)((gd->n >> d) & 1);
        return guard_add_tensor_match(n, gd->obj, gd->n ? dyn : NULL);
    }
    case TG_LEN: return guard_add_len_eq(n, gd->n);
    case TG_EMPTY: return guard_add_empty_dict_or_none(n);
    case TG_VALUE: return guard_add_value_eq(n, gd->obj);
    case TG_HAS_KEY: return guard_add_has_key(n, gd->obj, (int)gd->n);
    case TG_KEYS: return guard_add_dict_keys(n, gd->obj);
    }
    PyErr_SetString(PyExc_SystemError, "smelt: unknown guard kind");
    return -1;
}

/* The guard tree of a trace of fn whose closure cells' contents start at
 * loc[nargs] (names: a name per local, NULL for co_varnames): global state
 * (grad mode, default dtype) on the root, one node per source, one leaf
 * per guard; input_node[k] gets the node of graph input k, and each
 * TO_SOURCE output of r its node. NULL + exception. */
static guard_tree *build_tree(PyObject *fn, int nargs, PyObject *names, tr_result *r, int *input_node)
{
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(fn);
    guard_tree *t = guard_tree_new();
    guard_node **nodes = PyMem_Calloc((size_t)r->nsrcs + 1, sizeof *nodes);
    PyObject *vars = names ? Py_NewRef(names) : PyCode_GetVarnames(co), *cells = PyCode_GetFreevars(co);
    int ok = t && nodes && vars && cells && guard_add_global_state(t) == 0 &&
             (!r->autocast || guard_add_autocast_state(t) == 0);
    if (t && !nodes)
        PyErr_NoMemory();
    for (int32_t i = 0; ok && i < r->nsrcs; i++)
        ok = (nodes[i] = src_node(t, &r->srcs[i], nodes, vars, cells, nargs)) != NULL;
    for (int32_t i = 0; ok && i < r->nguards; i++)
        ok = add_leaf(nodes[r->guards[i].src], &r->guards[i], nodes) == 0;
    for (int32_t k = 0; ok && k < r->ninputs; k++)
        input_node[k] = guard_node_id(nodes[r->input_src[k]]);
    for (int32_t i = 0; ok && i < r->nouts; i++)
        if (r->outs[i].kind == TO_SOURCE) {
            r->outs[i].node = guard_node_id(nodes[r->outs[i].index]);
            guard_node_fetch(nodes[r->outs[i].index]);
        }
    PyMem_Free(nodes);
    Py_XDECREF(vars);
    Py_XDECREF(cells);
    if (ok)
        return t;
    guard_tree_free(t);
    return NULL;
}

/* "<qualname> (<file>:<line>)" of fn's code, for log lines (new ref). */
static PyObject *fn_where(PyObject *fn)
{
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(fn);
    return PyUnicode_FromFormat("%U (%U:%d)", co->co_qualname, co->co_filename, co->co_firstlineno);
}

/* Logs "<what> <where>: <text>" on channel ch (when it is on). */
static void log_fn(pyext_log_channel ch, PyObject *fn, const char *what, const char *text)
{
    if (!pyext_log_on(ch))
        return;
    PyObject *where = fn_where(fn);
    PyObject *line = where ? PyUnicode_FromFormat("%s %U: %s", what, where, text) : NULL;
    const char *s = line ? PyUnicode_AsUTF8(line) : NULL;
    if (s)
        pyext_log_write(ch, s);
    PyErr_Clear();
    Py_XDECREF(line);
    Py_XDECREF(where);
}

/* ---------- running an entry ---------- */

/* A view of input tensor t as spec (size, stride, offset from t's own
 * storage offset) says: t.as_strided(size, stride, t.storage_offset() +
 * offset). New reference or NULL with an error. */
static PyObject *input_view(PyObject *t, PyObject *spec)
{
    PyObject *so = PyObject_CallMethod(t, "storage_offset", NULL);
    long long off = so ? PyLong_AsLongLong(so) : -1;
    Py_XDECREF(so);
    if (!so || (off == -1 && PyErr_Occurred()))
        return NULL;
    return PyObject_CallMethod(t, "as_strided", "OOL", PyTuple_GET_ITEM(spec, 0), PyTuple_GET_ITEM(spec, 1),
                               off + PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 2)));
}

/* Stands for NULL (an unbound variable, a NULL stack entry) in the frame
 * state a partial entry's graph yields. */
static PyObject *null_mark;

/* What a compiled entry's run produced, for build_result: graph outputs
 * `outs`, the call's graph inputs `ins` (results that are inputs or views
 * of them) and the values its guard check fetched, by tree node (vals). */
typedef struct run_vals {
    PyObject *outs;
    PyObject *const *ins;
    PyObject *const *vals;
    PyObject *views;       /* a symbolic entry's view geometry for this call (see dyn_plan), or NULL */
} run_vals;

/* The value of output plan slot o of r. */
static PyObject *build_result(const tr_result *r, int32_t o, const run_vals *rv)
{
    const tr_out *x = &r->outs[o];
    switch (x->kind) {
    case TO_TENSOR: return Py_NewRef(PyList_GET_ITEM(rv->outs, x->index));
    case TO_CONST: return Py_NewRef(x->obj);
    case TO_INPUT: return Py_NewRef(rv->ins[x->index]);
    case TO_VIEW: return input_view(rv->ins[x->index], rv->views ? PyTuple_GET_ITEM(rv->views, o) : x->obj);
    case TO_OUTVIEW:
        return input_view(PyList_GET_ITEM(rv->outs, x->index), rv->views ? PyTuple_GET_ITEM(rv->views, o) : x->obj);
    case TO_SOURCE:
        if (rv->vals[x->node])
            return Py_NewRef(rv->vals[x->node]);
        return PyErr_Format(PyExc_SystemError, "smelt: a returned object was not fetched by its guards");
    case TO_NULL: return Py_NewRef(null_mark);
    case TO_INT: return PyNumber_Index(PyList_GET_ITEM(rv->outs, x->index));
    case TO_BOUND: {
        PyObject *self = build_result(r, x->first, rv), *b = NULL;
        if (self)
            b = PyUnicode_Check(x->obj) ? PyObject_GetAttr(self, x->obj) : PyMethod_New(x->obj, self);
        Py_XDECREF(self);
        return b;
    }
    default: break;
    }
    PyObject *c = x->kind == TO_DICT ? PyDict_New() : x->kind == TO_LIST ? PyList_New(x->n) : PyTuple_New(x->n);
    for (int32_t i = 0; c && i < x->n; i++) {
        PyObject *v = build_result(r, x->first + i, rv);
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
    if (c && x->kind == TO_OBJ)   /* an instance made by the traced code */
        Py_SETREF(c, tracer_build_instance(x->obj, c));
    return c;
}

/* Writes the entry's in-place updates of its inputs back: ins[mut_in[i]]
 * takes outs[mut_out[i]]. 0, or -1 with an error. */
static int write_back(const entry *e, PyObject *const *ins, PyObject *outs)
{
    PyObject *bumped = NULL;   /* inputs the plan updated in place: their version counters move */
    for (int32_t i = 0; i < e->r.nmut; i++) {
        PyObject *in = ins[e->r.mut_in[i]], *out = PyList_GET_ITEM(outs, e->r.mut_out[i]);
        if (in == out) {
            if ((!bumped && !(bumped = PyList_New(0))) || PyList_Append(bumped, in)) {
                Py_XDECREF(bumped);
                return -1;
            }
            continue;
        }
        PyObject *r = PyObject_CallMethod(in, "copy_", "O", out);
        if (!r) {
            Py_XDECREF(bumped);
            return -1;
        }
        Py_DECREF(r);
    }
    if (!bumped)
        return 0;
    PyObject *r = PyObject_CallOneArg(increment_version_fn, bumped);
    Py_DECREF(bumped);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* Runs compiled entry e on vals, the values its guard check just fetched
 * (by node id); releases the wanted values. The inputs passed their
 * TENSOR_MATCH checks, so the plan runs without re-validating them.
 * Py_NotImplemented when an input it updates in place shares memory with
 * another input (eager would see the update through the other one, the
 * plan would not): the caller runs the frame eagerly. */
/* Replays the trace's side effects on objects from outside (see
 * tr_effect), in order. 0, or -1 with the error one raised. */
static int apply_effects(const tr_result *r, const run_vals *rv, PyObject *globals, PyObject *closure)
{
    for (int32_t i = 0; i < r->neffects; i++) {
        const tr_effect *x = &r->effects[i];
        PyObject *target = x->target >= 0 ? build_result(r, x->target, rv) : NULL;
        PyObject *val = x->val >= 0 ? build_result(r, x->val, rv) : NULL;
        int rc = -1;
        if ((x->target >= 0 && !target) || (x->val >= 0 && !val))
            rc = -1;
        else if (x->kind == EF_GLOBAL)
            rc = PyDict_SetItem(globals, x->name, val);
        else if (x->kind == EF_ATTR)
            rc = PyObject_SetAttr(target, x->name, val);   /* NULL val: delattr */
        else if (x->kind == EF_CELL) {
            PyObject *cell = target ? target : closure && PyTuple_Check(closure) && x->index < PyTuple_GET_SIZE(closure)
                                                   ? PyTuple_GET_ITEM(closure, x->index) : NULL;
            if (cell && PyCell_Check(cell))
                rc = PyCell_Set(cell, val);
            else
                PyErr_SetString(PyExc_SystemError, "smelt: the closure cell a compiled entry assigns is missing");
        }
        else if (PyList_Check(target))
            rc = PyList_SetSlice(target, 0, PyList_GET_SIZE(target), val);
        else if (PyDict_Check(target)) {
            PyDict_Clear(target);
            rc = PyDict_Update(target, val);
        }
        Py_XDECREF(target);
        Py_XDECREF(val);
        if (rc)
            return -1;
    }
    return 0;
}

static PyObject *run_compiled_grad(entry *e, PyObject *compiled, const pyext_ad *ad, PyObject *views,
                                   PyObject **vals, PyObject *globals, PyObject *closure);

/* Runs compiled entry e with plan `compiled` (e->compiled, or one for
 * other symbol values; under autograd, ad holds both halves); an entry that computes nothing with grad on (a
 * no_grad region over inputs that require grad: an optimizer step) runs
 * with grad off throughout, its write-backs and results included, as
 * eager ran it. */
static PyObject *run_compiled(entry *e, PyObject *compiled, const pyext_ad *ad, PyObject *views, PyObject **vals,
                              PyObject *globals, PyObject *closure)
{
    if (!e->r.grad_free)
        return run_compiled_grad(e, compiled, ad, views, vals, globals, closure);
    pyext_state *st = pyext_state_of(compiled);
    PyObject *t = PyObject_CallOneArg(st->set_grad, Py_False);
    if (!t) {
        for (int k = 0; k < e->nwanted; k++)
            Py_CLEAR(vals[e->wanted[k]]);
        return NULL;
    }
    Py_DECREF(t);
    PyObject *res = run_compiled_grad(e, compiled, ad, views, vals, globals, closure);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    t = PyObject_CallOneArg(st->set_grad, Py_True);   /* the guards saw grad mode on */
    if (!t) {
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        Py_XDECREF(res);
        return NULL;
    }
    Py_DECREF(t);
    PyErr_Restore(et, ev, tb);
    return res;
}

static PyObject *run_compiled_grad(entry *e, PyObject *compiled, const pyext_ad *ad, PyObject *views,
                                   PyObject **vals, PyObject *globals, PyObject *closure)
{
    PyObject *ins_small[32], **ins = ins_small, *res = NULL;
    int32_t n = e->r.ninputs, k = 0;
    if (n > 32 && !(ins = PyMem_Malloc(sizeof *ins * (size_t)n)))
        PyErr_NoMemory();
    PyObject *made = NULL;   /* 0-d tensors of the float inputs (see tr_float_input) */
    while (ins && k < n && (ins[k] = vals[e->input_node[k]])) {   /* each has a check: fetched */
        if (PyFloat_CheckExact(ins[k])) {
            pyext_state *st = pyext_state_of(compiled);
            PyObject *t = PyObject_Vectorcall(scalar_tensor_fn, (PyObject *[]){ ins[k], st->dtypes[SMELT_F64] }, 1,
                                              st->kw_dtype);
            if (!t || (!made && !(made = PyList_New(0))) || PyList_Append(made, t)) {
                Py_XDECREF(t);
                break;
            }
            Py_DECREF(t);   /* held by made */
            ins[k] = t;
        }
        k++;
    }
    if (ins && k < n && !PyErr_Occurred())
        PyErr_SetString(PyExc_SystemError, "smelt: a graph input was not fetched by its guards");
    PyObject *outs = !ins || k < n ? NULL : ad->spec ? pyext_ad_run(ad, ins, n)
                                                      : pyext_compiled_call_trusted(compiled, ins, e->r.mut_in, e->r.nmut);
    if (outs == Py_NotImplemented)
        res = Py_NewRef(outs);
    else if (outs && !write_back(e, ins, outs)) {
        run_vals rv = { outs, ins, vals, views };
        res = apply_effects(&e->r, &rv, globals, closure) ? NULL : build_result(&e->r, 0, &rv);
    }
    Py_XDECREF(outs);
    Py_XDECREF(made);
    for (k = 0; k < e->nwanted; k++)
        Py_CLEAR(vals[e->wanted[k]]);
    if (ins != ins_small)
        PyMem_Free(ins);
    return res;
}

static const tracer_callback hook_cb;
static _Thread_local PyObject *skip_code;   /* the next frame of this code runs unintercepted */
static int making_for_hook;   /* frame_function is constructing one: it registers it itself */

/* A frame to start in the middle of its code (a Python call whose rest
 * runs eagerly after a partial entry): the next frame of `code` the hook
 * offers on this thread is given this state and resumed at pc. */
static _Thread_local struct { PyObject *code; const tr_fstate *state; int pc; } resume_req;

/* What dispatch returns when the frame the hook offered was set up to
 * resume mid-code: on_frame then lets it run. */
static PyObject *resume_mark;

/* The callback the frame hook runs under for what smelt runs eagerly
 * around graph breaks (a break instruction's call, a frame resumed):
 * hook_cb, or explain's reporting callback while _explain_partial runs. */
static _Thread_local const tracer_callback *step_cb;

static const tracer_callback *around_breaks_cb(void)
{
    return step_cb ? step_cb : &hook_cb;
}

static PyObject *dispatch(FunctionObject *self, const call_frame *f);

/* Runs the function eagerly for call f. From a Python call: under the
 * frame hook, so the user functions it calls are still captured and
 * compiled. From the hook itself (f->from_hook): returns NULL with no
 * error set, which lets the intercepted frame run normally. */
static PyObject *run_eager(FunctionObject *self, const call_frame *f)
{
    if (f->from_hook)
        return NULL;
    skip_code = self->code ? self->code : PyFunction_GET_CODE(self->fn);   /* its own frame runs as is */
    const tracer_callback *prev = tracer_hook_enter(&hook_cb);
    PyObject *r = PyObject_Vectorcall(self->fn, f->args, f->nargsf, f->kwn);
    tracer_hook_exit(prev);
    skip_code = NULL;
    return r;
}

/* The rest of the frame of call f run eagerly by CPython from code unit pc
 * with state st: the frame the hook offered is set up and left to run
 * (resume_mark), or, for a call from Python, the function is called
 * again under the hook, which sets up its fresh frame likewise. */
static PyObject *resume_eager(FunctionObject *self, const call_frame *f, const tr_fstate *st, int pc)
{
    if (f->view)
        return tracer_frame_resume(f->view, pc, st->slots, st->slots + st->nslots, st->sp) ? NULL
                                                                                            : Py_NewRef(resume_mark);
    resume_req.code = PyFunction_GET_CODE(self->fn);
    resume_req.state = st;
    resume_req.pc = pc;
    tracer_hook_force(resume_req.code);   /* offered even where skip rules apply (smelt's own trampolines) */
    const tracer_callback *prev = tracer_hook_enter(around_breaks_cb());
    PyObject *r = PyObject_Vectorcall(self->fn, f->args, f->nargsf, f->kwn);
    tracer_hook_exit(prev);
    tracer_hook_force(NULL);
    if (resume_req.code) {   /* never offered: it ran from its start, so eager effects ran twice */
        resume_req.code = NULL;
        Py_XDECREF(r);
        return PyErr_Format(PyExc_SystemError, "smelt: the frame of %R was not resumed", self->fn);
    }
    return r;
}

/* The resume point of self at pc, made on first use (NULL + error). */
static site *resume_site(FunctionObject *self, int pc, int nstack)
{
    for (site *s = self->resumes; s; s = s->next)
        if (s->pc == pc)
            return s;
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(self->fn);
    site *s = PyMem_Calloc(1, sizeof *s);
    PyObject *names = s ? PyTuple_New(co->co_nlocalsplus + nstack) : NULL;
    for (int i = 0; names && i < co->co_nlocalsplus + nstack; i++) {
        PyObject *n = i < co->co_nlocalsplus ? Py_NewRef(PyTuple_GET_ITEM(co->co_localsplusnames, i))
                                             : PyUnicode_FromFormat("<stack %d>", i - co->co_nlocalsplus);
        if (!n)
            Py_CLEAR(names);
        else
            PyTuple_SET_ITEM(names, i, n);
    }
    if (!names) {
        PyMem_Free(s);
        return s ? NULL : (site *)PyErr_NoMemory();
    }
    s->pc = pc;
    s->names = names;
    s->next = self->resumes;
    self->resumes = s;
    return s;
}

/* A state's slots as the continuation's guards see them: its free
 * variables are the contents of fn's closure cells (borrowed: fn holds
 * them). */
static void state_free_vars(PyObject *fn, tr_fstate *st)
{
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(fn);
    PyObject *clo = PyFunction_GET_CLOSURE(fn);
    int first_free = co->co_nlocalsplus - co->co_nfreevars;
    for (int i = first_free; i < co->co_nlocalsplus; i++) {
        PyObject *cell = clo && i - first_free < PyTuple_GET_SIZE(clo) ? PyTuple_GET_ITEM(clo, i - first_free) : NULL;
        Py_XSETREF(st->slots[i], cell && PyCell_Check(cell) ? Py_XNewRef(PyCell_GET(cell)) : NULL);
    }
}

/* After partial entry e's graph: its state `state` (the tuple its output
 * plan built; the sentinel none for NULLs), the break instruction run
 * eagerly, and the rest of the frame: a continuation entry at the resume
 * point after it, or CPython resumed on the frame. */
static PyObject *continue_after(FunctionObject *self, entry *e, PyObject *state, const call_frame *f)
{
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(self->fn);
    int n = e->r.nslots + e->r.nstack;
    tr_fstate st = { .slots = PyMem_Calloc((size_t)(co->co_nlocalsplus + co->co_stacksize) + 1, sizeof(PyObject *)),
                     .nslots = e->r.nslots, .sp = e->r.nstack, .kwnames = e->r.kwnames, .pc = e->r.stop_pc };
    if (!st.slots)
        return PyErr_NoMemory();
    for (int i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(state, i);
        st.slots[i] = v == null_mark ? NULL : Py_NewRef(v);
    }
    state_free_vars(self->fn, &st);
    const tracer_callback *prev = tracer_hook_enter(around_breaks_cb());
    int rc = tracer_step(self->fn, &e->insn, &st);   /* the callees it calls are compiled too */
    tracer_hook_exit(prev);
    PyObject *res = NULL;
    if (rc == 0)
        res = resume_eager(self, f, &st, e->resume_pc);
    else if (rc == 1) {
        site *s = resume_site(self, st.pc, st.sp);
        call_frame g = *f;
        g.loc = st.slots;
        g.nloc = st.nslots + st.sp;
        g.nargs = co->co_nlocalsplus - co->co_nfreevars;
        g.site = s;
        g.state = &st;
        res = s ? dispatch(self, &g) : NULL;
    }
    for (int i = 0; i < st.nslots + st.sp; i++)
        Py_XDECREF(st.slots[i]);
    PyMem_Free(st.slots);
    return res;
}

/* Checks entry e's guards on call f; when they hold, runs the entry into
 * *res: compiled: its graph on the values the check fetched (a partial
 * entry goes on with continue_after); a break entry: the function itself,
 * or at a resume point the rest of the frame. 1 matched (*res may be
 * NULL with an error), 0 not, -1 error. */
/* The in-place updates e's plans may write straight into their inputs
 * (pairs graph input, graph output in o->update): those whose new value
 * is not also a result (that would be a new tensor in eager, not the
 * input). The array to free (NULL when none, or out of memory: -1). */
/* The back end of trace r's graph: CUDA when its tensors are on a CUDA
 * device (whatever the options name); a device-memory back end named for
 * a graph on the CPU is not used. */
static void opts_device(smelt_compile_opts *o, const tr_result *r)
{
    if (r->device >= 0) {
        o->backend = "cuda";
        o->device = r->device;
    } else if (o->backend && !strcmp(o->backend, "cuda")) {
        o->backend = NULL;
    }
}

static int entry_updates(const entry *e, smelt_compile_opts *o, int32_t **upd)
{
    *upd = e->r.nmut ? PyMem_Malloc(sizeof(int32_t) * 2 * (size_t)e->r.nmut) : NULL;
    if (e->r.nmut && !*upd)
        return PyErr_NoMemory(), -1;
    for (int32_t i = 0; i < e->r.nmut; i++) {
        int shown = 0;
        for (int32_t k = 0; k < e->r.nouts && !shown; k++)
            shown = (e->r.outs[k].kind == TO_TENSOR || e->r.outs[k].kind == TO_OUTVIEW) &&
                    e->r.outs[k].index == e->r.mut_out[i];
        if (!shown) {
            (*upd)[2 * o->nupdate] = e->r.mut_in[i];
            (*upd)[2 * o->nupdate++ + 1] = e->r.mut_out[i];
        }
    }
    o->update = *upd;
    return 0;
}

static const char *fn_name(const FunctionObject *self);
static double now_ms(void);

/* Whether view spec (size, stride, offset) of a result lays out its
 * sizes densely from offset 0 (a permutation of a contiguous tensor): 1
 * with order[] its dims from the outermost stride in, else 0. */
static int view_dense(PyObject *spec, int8_t *order)
{
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 3 || PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 2)) != 0)
        return PyErr_Clear(), 0;
    PyObject *sz = PyTuple_GET_ITEM(spec, 0), *st = PyTuple_GET_ITEM(spec, 1);
    Py_ssize_t nd = PyTuple_GET_SIZE(sz);
    int64_t size[SMELT_MAX_DIMS], stride[SMELT_MAX_DIMS];
    if (nd > SMELT_MAX_DIMS || PyTuple_GET_SIZE(st) != nd)
        return 0;
    for (Py_ssize_t d = 0; d < nd; d++) {
        size[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(sz, d));
        stride[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(st, d));
        order[d] = (int8_t)d;
    }
    if (PyErr_Occurred())
        return PyErr_Clear(), 0;
    for (Py_ssize_t i = 1; i < nd; i++)   /* by stride, outermost first (stable) */
        for (Py_ssize_t j = i; j > 0 && stride[order[j]] > stride[order[j - 1]]; j--) {
            int8_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int64_t want = 1;
    for (Py_ssize_t i = nd - 1; i >= 0; i--) {
        int d = order[i];
        if (size[d] != 1 && stride[d] != want)
            return 0;
        want *= size[d];
    }
    return 1;
}

/* The views of entry e's results for symbol values vals: a tuple per
 * output plan slot, (size, stride, 0) of the view's node sizes laid out
 * in e->view_order, None for the other slots. New reference or NULL. */
static PyObject *dyn_views(const entry *e, const int64_t *vals)
{
    const tr_dyn *D = e->r.dyn;
    PyObject *t = PyTuple_New(e->r.nouts);
    for (int32_t o = 0; t && o < e->r.nouts; o++) {
        const tr_out *x = &e->r.outs[o];
        if ((x->kind != TO_VIEW && x->kind != TO_OUTVIEW) || e->view_order[o][0] < 0) {   /* (geometry: dyn_plan_new) */
            PyTuple_SET_ITEM(t, o, Py_NewRef(Py_None));
            continue;
        }
        const smelt_node *n = &e->r.graph->nodes[x->node];
        int64_t size[SMELT_MAX_DIMS], stride[SMELT_MAX_DIMS], want = 1;
        for (int d = 0; d < n->ndim; d++) {
            int32_t ex = x->node < D->ndims ? D->dims[x->node][d] : -1;
            size[d] = n->shape[d];
            if (ex >= 0 && sym_eval(&D->t, ex, vals, &size[d]))
                return Py_DECREF(t), PyErr_SetString(PyExc_OverflowError, "smelt: a view's size overflows"), NULL;
        }
        for (int i = n->ndim - 1; i >= 0; i--) {
            int d = e->view_order[o][i];
            stride[d] = want;
            want *= size[d];
        }
        PyObject *a = PyTuple_New(n->ndim), *b = PyTuple_New(n->ndim);
        for (int d = 0; a && b && d < n->ndim; d++) {
            PyTuple_SET_ITEM(a, d, PyLong_FromLongLong(size[d]));
            PyTuple_SET_ITEM(b, d, PyLong_FromLongLong(stride[d]));
        }
        PyObject *spec = a && b && !PyErr_Occurred() ? Py_BuildValue("(OOi)", a, b, 0) : NULL;
        Py_XDECREF(a);
        Py_XDECREF(b);
        if (!spec)
            return Py_DECREF(t), NULL;
        PyTuple_SET_ITEM(t, o, spec);
    }
    return t;
}

/* SMELT_LOGS=dynamic: a plan (what: "" or "forward and backward ") made
 * for symbol values vals in ms, generating `generated` kernels. */
static void dyn_log_plan(FunctionObject *self, const entry *e, const int64_t *vals, double ms, int generated,
                         const char *what)
{
    char line[600];
    int n = snprintf(line, sizeof line, "%s: a %splan for sizes (", fn_name(self), what);
    for (int k = 0; k < e->r.dyn->t.nvars && n < 400; k++)
        n += snprintf(line + n, sizeof line - (size_t)n, "%ss%d=%lld", k ? ", " : "", k, (long long)vals[k]);
    snprintf(line + n, sizeof line - (size_t)n, "): %.1f ms, %d kernels generated (the others' code reused)", ms,
             generated);
    pyext_log_write(PYEXT_LOG_DYNAMIC, line);
}

/* The plan of symbolic entry e for symbol values vals: its graph rebuilt
 * for them and compiled (the kernels whose code does not depend on the
 * sizes come from the JIT's registry or the disk cache); under autograd
 * (e->rg) the rebuilt graph is split again and both halves compiled into
 * *ad. A new reference; NULL with err when the graph does not rebuild or
 * split (no exception), or with an exception. */
static PyObject *dyn_plan_new(FunctionObject *self, entry *e, const int64_t *vals,
                              const int64_t (*strides)[SMELT_MAX_DIMS], pyext_ad *ad, PyObject *views, char *err,
                              size_t errlen)
{
    smelt_graph *g = tracer_dyn_graph(&e->r, vals, strides, err, errlen);
    if (!g)
        return NULL;
    for (int32_t o = 0; views && o < e->r.nouts; o++) {   /* views walked again over these sizes */
        if (e->view_order[o][0] >= 0 || (e->r.outs[o].kind != TO_VIEW && e->r.outs[o].kind != TO_OUTVIEW))
            continue;
        PyObject *spec = tracer_view_spec(&e->r, g, o, strides);
        if (!spec) {
            smelt_graph_free(g);
            if (!PyErr_Occurred())
                snprintf(err, errlen, "a view result's geometry does not follow for these sizes");
            return NULL;
        }
        PyTuple_SET_ITEM(views, o, spec);   /* (replaces dyn_views' None) */
        Py_DECREF(Py_None);
    }
    smelt_compile_opts o = { .opt_level = 2, .keep_ir = pyext_log_on(PYEXT_LOG_OUTPUT_CODE) || pyext_log_on(PYEXT_LOG_ASM),
                             .param_sizes = 1, .backend = self->backend[0] ? self->backend : NULL };
    opts_device(&o, &e->r);
    double t0 = now_ms();
    if (e->rg) {   /* forward and backward for these sizes */
        tr_result r = e->r;   /* (a view of e's result with this graph: what the split reads) */
        r.graph = g;
        pyext_ad_about about = { fn_name(self), NULL, 0.0 };
        int arc = pyext_ad_compile(pyext_state_of((PyObject *)self), &r, e->rg, &o, &about, ad, err, errlen);
        smelt_graph_free(g);
        if (arc < 0)
            return NULL;
        if (arc > 0) {   /* not differentiable here (or nothing needs a gradient): a new trace decides */
            pyext_ad_clear(ad);
            if (arc == 2)
                snprintf(err, errlen, "no output needs a gradient at these sizes");
            return NULL;
        }
        self->ngenerated += ad->generated;
        self->nplans_cached += ad->plans_cached;
        self->ndynplans++;
        if (pyext_log_on(PYEXT_LOG_DYNAMIC))
            dyn_log_plan(self, e, vals, now_ms() - t0, ad->generated, "forward and backward ");
        return Py_NewRef(ad->fwd);
    }
    int32_t *upd;
    if (entry_updates(e, &o, &upd)) {
        smelt_graph_free(g);
        return NULL;
    }
    smelt_plan *plan;
    Py_BEGIN_ALLOW_THREADS
    plan = smelt_compile(g, &o, err, errlen);
    Py_END_ALLOW_THREADS
    PyMem_Free(upd);
    PyObject *c = NULL;
    if (plan) {
        smelt_compile_times ct = { 0 };
        smelt_plan_compile_times(plan, &ct);
        self->ngenerated += ct.generated;
        self->nplans_cached += ct.plan_cached;
        self->ndynplans++;
        if (pyext_log_on(PYEXT_LOG_DYNAMIC))
            dyn_log_plan(self, e, vals, now_ms() - t0, ct.generated, "");
        c = pyext_compiled_new(pyext_state_of((PyObject *)self), g, plan, e->r.calls);
        if (c)
            pyext_compiled_set_packing(c, self->packing);
    } else {
        PyErr_Format(PyExc_RuntimeError, "smelt: compiling a graph for new symbolic sizes failed (internal "
                     "error, please report): %s", err);
    }
    smelt_graph_free(g);
    return c;
}

/* Symbolic entry e for a call whose guards hold (graph inputs fetched in
 * vals): 1 with *plan the Compiled for this call's symbol values (made
 * on the first call with them) and *ad its autograd halves (borrowed),
 * 0 when the values fail e's checks (why filled when given: then no plan
 * is made), -1 with an exception. */
static int dyn_select(FunctionObject *self, entry *e, PyObject **vals, PyObject **plan, const pyext_ad **ad,
                      PyObject **views, char *why, size_t whylen)
{
    const tr_dyn *D = e->r.dyn;
    int32_t n = e->r.ninputs;
    int64_t small[16][SMELT_MAX_DIMS], (*sizes)[SMELT_MAX_DIMS] = small;   /* (per call: no allocation) */
    if (n > 16 && !(sizes = PyMem_Calloc((size_t)n + 1, sizeof *sizes)))
        return PyErr_NoMemory(), -1;
    int rc = -1;
    for (int i = 0; i < e->ndyn_in; i++) {
        int32_t k = e->dyn_in[i];
        PyObject *shape = PyObject_GetAttrString(vals[e->input_node[k]], "shape");
        if (!shape || !PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) > SMELT_MAX_DIMS) {
            Py_XDECREF(shape);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_SystemError, "smelt: a symbolic input's shape is not a tuple");
            goto out;
        }
        for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(shape); d++)
            sizes[k][d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
        Py_DECREF(shape);
    }
    int64_t sv[SYM_MAX_VARS] = { 0 };
    char buf[300];
    rc = tracer_dyn_values(&e->r, (const int64_t(*)[SMELT_MAX_DIMS])sizes, sv, why ? why : buf,
                           why ? whylen : sizeof buf);
    if (rc != 1 || why)
        goto out;
    size_t nb = sizeof(int64_t) * (size_t)D->t.nvars;
    *views = NULL;
    if (!memcmp(sv, D->hint, nb)) {
        *plan = e->compiled;
        *ad = &e->ad;
        goto out;
    }
    for (int i = 0; i < e->ndp; i++)
        if (!memcmp(sv, e->dp[i].vals, nb)) {
            *plan = e->dp[i].compiled;
            *ad = &e->dp[i].ad;
            *views = e->dp[i].views;
            goto out;
        }
    /* a first call with these values: strides of the inputs as they come */
    for (int32_t i = 0; i < e->r.graph->n; i++) {
        const smelt_node *in = &e->r.graph->nodes[i];
        if (in->op == SMELT_OP_INPUT)
            memcpy(sizes[in->a.input.index], in->stride, sizeof sizes[0]);
    }
    for (int i = 0; i < e->ndyn_in; i++) {
        int32_t k = e->dyn_in[i];
        PyObject *st = PyObject_CallMethod(vals[e->input_node[k]], "stride", NULL);
        if (!st || !PyTuple_Check(st)) {
            Py_XDECREF(st);
            rc = -1;
            goto out;
        }
        for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(st) && d < SMELT_MAX_DIMS; d++)
            sizes[k][d] = PyLong_AsLongLong(PyTuple_GET_ITEM(st, d));
        Py_DECREF(st);
    }
    char err[512] = "";
    pyext_ad nad = { 0 };
    PyObject *vw = e->view_order ? dyn_views(e, sv) : NULL;
    if (e->view_order && !vw) {
        rc = -1;
        goto out;
    }
    PyObject *c = dyn_plan_new(self, e, sv, (const int64_t(*)[SMELT_MAX_DIMS])sizes, &nad, vw, err, sizeof err);
    if (!c) {
        Py_XDECREF(vw);
        if (PyErr_Occurred()) {
            rc = -1;
        } else {   /* these sizes make no valid graph of this trace: a new trace decides */
            log_fn(PYEXT_LOG_DYNAMIC, self->fn, "new sizes do not fit the symbolic graph of", err);
            rc = 0;
        }
        goto out;
    }
    if (!e->dp && !(e->dp = PyMem_Calloc(DYN_PLANS, sizeof *e->dp))) {
        Py_DECREF(c);
        Py_XDECREF(vw);
        pyext_ad_clear(&nad);
        rc = -1;
        PyErr_NoMemory();
        goto out;
    }
    dyn_plan *slot = &e->dp[e->next_dp];
    e->next_dp = (e->next_dp + 1) % DYN_PLANS;
    if (e->ndp < DYN_PLANS)
        e->ndp++;
    Py_XSETREF(slot->compiled, c);   /* (a running call holds its own references) */
    pyext_ad_clear(&slot->ad);
    slot->ad = nad;
    Py_XSETREF(slot->views, vw);
    memcpy(slot->vals, sv, nb);
    *plan = c;
    *ad = &slot->ad;
    *views = vw;
out:
    if (sizes != small)
        PyMem_Free(sizes);
    return rc;
}

static int try_entry(FunctionObject *self, entry *e, const call_frame *f, PyObject **res)
{
    if (!e->tree)
        return 0;
    int nn = guard_tree_num_nodes(e->tree);
    PyObject *small[VALS_SMALL], **vals = small;
    if (nn > VALS_SMALL && !(vals = PyMem_Calloc((size_t)nn, sizeof *vals)))
        return PyErr_NoMemory(), -1;
    if (vals == small)
        memset(small, 0, sizeof *small * (size_t)nn);
    int m = guard_check_values(e->tree, f->loc, f->nloc, f->globals, f->builtins, e->compiled ? e->want : NULL, vals);
    PyObject *plan = e->compiled, *views = NULL;
    const pyext_ad *ad = &e->ad;
    if (m == 1 && e->compiled && e->r.dyn) {   /* symbolic sizes: the plan for this call's values */
        m = dyn_select(self, e, vals, &plan, &ad, &views, NULL, 0);
        if (m != 1)
            for (int k = 0; k < e->nwanted; k++)
                Py_CLEAR(vals[e->wanted[k]]);
    }
    if (m == 1 && e->compiled) {
        pyext_ad held = *ad;   /* (another call may replace them in the ring meanwhile) */
        Py_INCREF(plan);
        Py_XINCREF(views);
        Py_XINCREF(held.fwd);
        Py_XINCREF(held.bwd);
        Py_XINCREF(held.spec);
        *res = run_compiled(e, plan, &held, views, vals, f->globals, f->closure);
        Py_DECREF(plan);
        Py_XDECREF(views);
        pyext_ad_clear(&held);
    }
    if (m == 1 && (!e->compiled || *res == Py_NotImplemented)) {   /* eager (also: inputs alias an updated input) */
        if (e->compiled)
            Py_DECREF(*res);
        *res = f->site->pc ? resume_eager(self, f, f->state, f->site->pc) : run_eager(self, f);
    } else if (m == 1 && *res && e->r.stop_pc >= 0) {
        PyObject *state = *res;
        *res = continue_after(self, e, state, f);
        Py_DECREF(state);
    }
    if (vals != small)
        PyMem_Free(vals);
    return m;
}

/* Why entry e does not match call f, into why[0..n). 0, or -1 on error. */
static int reason_of(const entry *e, const call_frame *f, char *why, size_t n)
{
    if (!e->tree) {
        snprintf(why, n, "the guards of an entry could not be built: it never matches");
        return 0;
    }
    int m = guard_check(e->tree, f->loc, f->nloc, f->globals, f->builtins, why, n);
    if (m == 1 && e->r.dyn && e->compiled) {   /* the symbols' checks */
        int nn = guard_tree_num_nodes(e->tree);
        PyObject **vals = PyMem_Calloc((size_t)nn + 1, sizeof *vals);
        if (!vals)
            return PyErr_NoMemory(), -1;
        m = guard_check_values(e->tree, f->loc, f->nloc, f->globals, f->builtins, e->want, vals);
        PyObject *plan, *views;
        const pyext_ad *ad;
        if (m == 1)
            m = dyn_select(NULL, (entry *)e, vals, &plan, &ad, &views, why, n);
        for (int k = 0; k < e->nwanted; k++)
            Py_CLEAR(vals[e->wanted[k]]);
        PyMem_Free(vals);
    }
    if (m == 1)
        snprintf(why, n, "the guards passed when checked again (a fetch with side effects?)");
    return m < 0 ? -1 : 0;
}

static void entry_free(entry *e)
{
    tracer_result_clear(&e->r);
    guard_tree_free(e->tree);
    PyMem_Free(e->input_node);
    PyMem_Free(e->want);
    PyMem_Free(e->wanted);
    Py_XDECREF(e->compiled);
    pyext_ad_clear(&e->ad);
    for (int i = 0; i < e->ndp; i++) {
        Py_XDECREF(e->dp[i].compiled);
        pyext_ad_clear(&e->dp[i].ad);
        Py_XDECREF(e->dp[i].views);
    }
    PyMem_Free(e->dp);
    PyMem_Free(e->rg);
    PyMem_Free(e->dyn_in);
    PyMem_Free(e->view_order);
    PyMem_Free(e);
}

/* ---------- tracing a new entry ---------- */

/* The compiled function's qualified name (logs, SMELT_DEBUG_DIR). */
static const char *fn_name(const FunctionObject *self)
{
    return PyUnicode_AsUTF8(((PyCodeObject *)PyFunction_GET_CODE(self->fn))->co_qualname);
}

/* SMELT_LOGS=perf: where one plan's compile time went. */
static void perf_times(char *buf, size_t n, const smelt_compile_times *ct)
{
    if (ct->plan_cached)
        snprintf(buf, n, "plan and code from the disk cache, load %.1f ms", ct->load_ms);
    else
        snprintf(buf, n, "lower %.1f ms, codegen %.1f ms (%d functions generated), load %.1f ms", ct->lower_ms,
                 ct->codegen_ms, ct->generated, ct->load_ms);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* 1 if some graph input requires grad. Every TENSOR guard's example is an
 * input of this very call (the tracer adds one per graph input). */
static int inputs_require_grad(const tr_result *r)
{
    int any = 0;
    for (int32_t i = 0; i < r->nguards && !any; i++) {
        PyObject *rg = r->guards[i].kind == TG_TENSOR ? PyObject_GetAttrString(r->guards[i].obj, "requires_grad") : NULL;
        any = rg == Py_True;
        Py_XDECREF(rg);
    }
    PyErr_Clear();
    return any;
}

/* 0 if a traced call can compile in the current global state (*autograd:
 * 1 when inputs require grad in grad mode: the region compiles with a
 * backward); 1 if it runs eagerly (autocast on, a torch mode active; the
 * reason in r), -1 with an exception. The entry's guards on autocast and
 * grad mode keep the decision to this state. */
static int eager_state(tr_result *r, int *autograd)
{
    PyObject *on = PyObject_CallNoArgs(autocast_fn);   /* any device's: the state guards see */
    if (!on)
        return -1;
    int rc = on == Py_True;
    Py_DECREF(on);
    if (rc) {   /* the trace applied CPU autocast's casts (tracer/ops.c); CUDA's are not built */
        PyObject *cuda = PyObject_CallFunction(autocast_dev_fn, "s", "cuda");
        if (!cuda)
            return -1;
        rc = cuda == Py_True;
        Py_DECREF(cuda);
    }
    if (rc) {
        snprintf(r->reason, sizeof r->reason, "CUDA autocast is on: compiled CUDA autocast regions are not built yet");
        return 1;
    }
    for (int k = 0; k < 2; k++) {   /* a TorchFunctionMode / TorchDispatchMode would not see compiled ops */
        PyObject *n = PyObject_CallNoArgs(mode_stack_fn[k]);
        long len = n ? PyLong_AsLong(n) : -1;
        Py_XDECREF(n);
        if (len < 0 && PyErr_Occurred())
            return -1;
        if (len > 0) {
            snprintf(r->reason, sizeof r->reason, "a torch %s mode is active", k ? "dispatch" : "function");
            return 1;
        }
    }
    *autograd = 0;
    if (r->grad_free || !inputs_require_grad(r))
        return 0;
    PyObject *g = PyObject_CallNoArgs(grad_enabled_fn);
    if (!g)
        return -1;
    *autograd = g == Py_True;
    Py_DECREF(g);
    return 0;
}

/* Guard tree of e, built from its trace for call f; on failure the entry
 * becomes an eager one that never matches again. -1 only for errors that
 * must propagate (a BaseException that is no Exception, MemoryError). */
static int entry_guards(FunctionObject *self, entry *e, const call_frame *f, int *rc)
{
    if (!(e->input_node = PyMem_Calloc((size_t)e->r.ninputs + 1, sizeof(int))))
        return PyErr_NoMemory(), -1;
    if ((e->tree = build_tree(self->fn, f->nargs, f->site->names, &e->r, e->input_node))) {
        if (!(e->want = PyMem_Calloc((size_t)guard_tree_num_nodes(e->tree), 1)))
            return PyErr_NoMemory(), -1;
        if (!(e->wanted = PyMem_Calloc((size_t)(e->r.ninputs + e->r.nouts) + 1, sizeof(int))))
            return PyErr_NoMemory(), -1;
        for (int32_t k = 0; k < e->r.ninputs + e->r.nouts; k++) {
            int id = k < e->r.ninputs ? e->input_node[k] : e->r.outs[k - e->r.ninputs].kind == TO_SOURCE ?
                     e->r.outs[k - e->r.ninputs].node : -1;
            if (id >= 0 && !e->want[id]++)
                e->wanted[e->nwanted++] = id;
        }
        char *txt = pyext_log_on(PYEXT_LOG_GUARDS) ? guard_tree_print(e->tree) : NULL;
        if (txt)
            log_fn(PYEXT_LOG_GUARDS, self->fn, "new entry of", txt);
        free(txt);
        return 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_Exception) || PyErr_ExceptionMatches(PyExc_MemoryError))
        return -1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *msg = value ? PyObject_Str(value) : NULL;
    const char *m = msg ? PyUnicode_AsUTF8(msg) : NULL;
    snprintf(e->r.reason, sizeof e->r.reason, "guards could not be built: %s: %.300s",
             ((PyTypeObject *)type)->tp_name, m ? m : "?");
    PyErr_Clear();
    Py_XDECREF(msg);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    *rc = 1;
    return 0;
}

/* Traces call f (from its parameters, or at a resume point from its frame
 * state); mode 0 as the function's `dynamic` says, 1 static, 2 symbolic
 * only where sizes changed (dynamic=None's policy). */
static int trace_call(FunctionObject *self, const call_frame *f, tr_result *r, int mode)
{
    tr_start st = { .slots = f->loc, .nslots = f->nargs };
    if (f->site->pc)
        st = (tr_start){ .slots = f->state->slots, .nslots = f->state->nslots,
                         .stack = f->state->slots + f->state->nslots, .nstack = f->state->sp,
                         .kwnames = f->state->kwnames, .pc = f->site->pc };
    st.dyn_mode = mode == 1 || self->dynamic == 0        ? TR_DYN_OFF
                  : mode == 0 && self->dynamic == 1 ? TR_DYN_ALL : TR_DYN_AUTO;
    if (st.dyn_mode == TR_DYN_AUTO && !f->site->seen && !(f->site->seen = PyDict_New()))
        return -1;
    st.seen = f->site->seen;
    return tracer_trace_from(self->fn, &st, r);
}

/* Whether view result o of r follows from r's graph (tracer_view_spec
 * over it, with the traced inputs' strides, gives the traced geometry):
 * 1, 0, or -1 with an exception. */
static int view_from_graph(const tr_result *r, int32_t o)
{
    int64_t (*st)[SMELT_MAX_DIMS] = PyMem_Calloc((size_t)r->ninputs + 1, sizeof *st);
    if (!st)
        return PyErr_NoMemory(), -1;
    for (int32_t i = 0; i < r->graph->n; i++) {
        const smelt_node *n = &r->graph->nodes[i];
        if (n->op == SMELT_OP_INPUT && n->a.input.index < r->ninputs)
            memcpy(st[n->a.input.index], n->stride, sizeof st[0]);
    }
    PyObject *spec = tracer_view_spec(r, r->graph, o, (const int64_t(*)[SMELT_MAX_DIMS])st);
    PyMem_Free(st);
    if (!spec)
        return PyErr_Occurred() ? -1 : 0;
    int eq = PyObject_RichCompareBool(spec, r->outs[o].obj, Py_EQ);
    Py_DECREF(spec);
    return eq;
}

/* Why a trace with symbolic sizes cannot make a symbolic entry (NULL: it
 * can): it broke (perhaps on what symbols do not cover yet), or it
 * returns a view whose geometry neither follows from the graph's view
 * ops nor is a dense layout of its sizes. */
static const char *dyn_unusable(const tr_result *r, int rc)
{
    if ((rc != 0 && rc != 2) || r->dyn->failed)   /* (a partial trace stays symbolic unless sizes stopped it) */
        return r->reason;
    int8_t order[SMELT_MAX_DIMS];
    for (int32_t i = 0; i < r->nouts; i++)
        if ((r->outs[i].kind == TO_VIEW || r->outs[i].kind == TO_OUTVIEW) && !view_dense(r->outs[i].obj, order)) {
            int g = view_from_graph(r, i);
            PyErr_Clear();
            if (g != 1)
                return "the result holds a view whose geometry smelt cannot lay again for other sizes";
        }
    return NULL;
}

/* A partial trace: the instruction it stops before, and where CPython
 * would restart the frame to run it. 0, or 1 (not decodable: a break). */
static int partial_insn(FunctionObject *self, entry *e)
{
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(self->fn);
    if (tracer_insn_at(co, e->r.stop_pc, &e->insn) != 1) {
        PyErr_Clear();
        return 1;
    }
    e->resume_pc = tracer_resume_pc(co, e->r.stop_pc);
    return 0;
}

/* Traces and compiles a new entry for call f (a break entry when the
 * trace stops: partial entries hold the graph before the break). NULL
 * with an exception on error. */
/* A new entry with symbolic sizes: which graph inputs have them; the
 * symbols and their guards logged. 0 or -1. */
static int dyn_entry(FunctionObject *self, entry *e)
{
    const tr_dyn *D = e->r.dyn;
    if (!(e->dyn_in = PyMem_Calloc((size_t)e->r.ninputs + 1, sizeof(int32_t))))
        return PyErr_NoMemory(), -1;
    for (int32_t i = 0; i < e->r.graph->n && i < D->ndims; i++) {
        const smelt_node *n = &e->r.graph->nodes[i];
        int sym = 0;
        for (int d = 0; n->op == SMELT_OP_INPUT && d < n->ndim; d++)
            sym |= D->dims[i][d] >= 0;
        if (sym)
            e->dyn_in[e->ndyn_in++] = n->a.input.index;
    }
    for (int32_t o = 0; o < e->r.nouts; o++) {   /* views: their layouts, laid again per size */
        const tr_out *x = &e->r.outs[o];
        if (x->kind != TO_VIEW && x->kind != TO_OUTVIEW)
            continue;
        if (!e->view_order && !(e->view_order = PyMem_Calloc((size_t)e->r.nouts, sizeof *e->view_order)))
            return PyErr_NoMemory(), -1;
        if (view_dense(x->obj, e->view_order[o]))
            continue;
        int g = view_from_graph(&e->r, o);   /* (-1 in view_order: the geometry walked again per size) */
        if (g != 1)
            return g < 0 ? -1 : (PyErr_SetString(PyExc_SystemError, "smelt: a symbolic entry's view has no geometry"), -1);
        e->view_order[o][0] = -1;
    }
    self->ndynentries++;
    if (pyext_log_on(PYEXT_LOG_DYNAMIC)) {
        char *txt = tracer_dyn_describe(&e->r);
        if (txt)
            log_fn(PYEXT_LOG_DYNAMIC, self->fn, "symbolic sizes in", txt);
        free(txt);
    }
    return 0;
}

static entry *new_entry(FunctionObject *self, const call_frame *f)
{
    entry *e = PyMem_Calloc(1, sizeof *e);
    if (!e)
        return (entry *)PyErr_NoMemory();
    double t0 = now_ms();
    int rc = trace_call(self, f, &e->r, 0);
    const char *why = rc >= 0 && e->r.dyn ? dyn_unusable(&e->r, rc) : NULL;
    if (why && self->dynamic == 1) {   /* every size symbolic did not trace: only those that change */
        log_fn(PYEXT_LOG_DYNAMIC, self->fn, "symbolic only where sizes change for", why);
        tracer_result_clear(&e->r);
        rc = trace_call(self, f, &e->r, 2);
        why = rc >= 0 && e->r.dyn ? dyn_unusable(&e->r, rc) : NULL;
    }
    if (why) {   /* trace it again with static sizes */
        log_fn(PYEXT_LOG_DYNAMIC, self->fn, "static sizes for", why);
        tracer_result_clear(&e->r);
        rc = trace_call(self, f, &e->r, 1);
    }
    self->trace_ms = now_ms() - t0;
    if (rc < 0)
        goto fail;
    int partial = rc == 2, autograd = 0;
    uint8_t *rg = NULL;
    if (partial && (self->fullgraph || partial_insn(self, e)))
        rc = 1;
    if ((rc == 0 || rc == 2) && (rc = eager_state(&e->r, &autograd)) < 0)
        goto fail;
    if (autograd && rc == 0 && !(rg = tracer_inputs_requiring_grad(&e->r)))
        goto fail;
    if (entry_guards(self, e, f, &rc) || tracer_result_trim(&e->r)) {
        PyMem_Free(rg);
        goto fail;
    }
    if (rc == 1 || partial) {
        self->nbreaks++;
        Py_XSETREF(self->last_reason, PyUnicode_FromString(e->r.reason));
    }
    if (rc == 1) {
        e->r.stop_pc = -1;
        PyMem_Free(rg);
        return e;
    }
    pyext_state *st = pyext_state_of((PyObject *)self);
    if (pyext_log_on(PYEXT_LOG_GRAPH)) {
        char *txt = smelt_graph_print(e->r.graph);
        if (txt)
            pyext_log_write(PYEXT_LOG_GRAPH, txt);
        free(txt);
    }
    char err[512];
    smelt_compile_opts o = { .opt_level = 2, .keep_ir = pyext_log_on(PYEXT_LOG_OUTPUT_CODE) || pyext_log_on(PYEXT_LOG_ASM) ||
                                                       pyext_log_on(PYEXT_LOG_AOT) ||
                                                       pyext_debug_dir_on(),
                             .backend = self->backend[0] ? self->backend : NULL };
    opts_device(&o, &e->r);
    if (rg && e->r.dyn && dyn_entry(self, e)) {
        PyMem_Free(rg);
        goto fail;
    }
    if (rg) {   /* forward and backward */
        o.param_sizes = e->r.dyn != NULL;   /* its plans for other sizes then reuse this one's code */
        t0 = now_ms();
        char *guards = pyext_debug_dir_on() && e->tree ? guard_tree_print(e->tree) : NULL;
        pyext_ad_about about = { fn_name(self),
                                 guards, self->trace_ms };
        int arc = pyext_ad_compile(st, &e->r, rg, &o, &about, &e->ad, e->r.reason, sizeof e->r.reason);
        free(guards);
        if (arc == 0 && e->r.dyn)
            e->rg = rg;   /* each size's graph is split again for the same inputs */
        else
            PyMem_Free(rg);
        rg = NULL;
        self->compile_ms = now_ms() - t0;
        self->ngenerated += e->ad.generated;
        self->nplans_cached += e->ad.plans_cached;
        if (arc < 0)
            goto fail;
        if (arc == 1) {
            e->r.stop_pc = -1;
            self->nbreaks++;
            Py_XSETREF(self->last_reason, PyUnicode_FromString(e->r.reason));
            return e;
        }
        if (arc == 0) {
            if (pyext_log_on(PYEXT_LOG_PERF)) {
                char line[1024], f[192], b[192];
                perf_times(f, sizeof f, &e->ad.ct[0]);
                perf_times(b, sizeof b, &e->ad.ct[1]);
                snprintf(line, sizeof line, "%s: trace %.1f ms (%d nodes, %d guards), forward and backward "
                         "compile %.1f ms: split %.1f ms (%d values saved, %lld bytes; %d nodes recomputed); "
                         "forward %d kernels, %d externs: %s; backward %d kernels, %d externs: %s",
                         fn_name(self),
                         self->trace_ms, e->r.graph->n, e->r.nguards, self->compile_ms, e->ad.split_ms,
                         e->ad.nsaved, (long long)e->ad.saved_bytes, e->ad.nrecomputed, e->ad.nkernels[0],
                         e->ad.nexterns[0], f, e->ad.nkernels[1], e->ad.nexterns[1], b);
                pyext_log_write(PYEXT_LOG_PERF, line);
            }
            e->compiled = Py_NewRef(e->ad.fwd);
            pyext_compiled_set_packing(e->compiled, self->packing);
            self->ncompiles++;
            self->nbackward++;
            return e;
        }
    }
    int32_t *upd;
    if (entry_updates(e, &o, &upd))
        goto fail;
    if (e->r.dyn && !e->dyn_in && dyn_entry(self, e))
        goto fail;
    o.param_sizes = e->r.dyn != NULL;   /* its plans for other sizes then reuse this one's code */
    t0 = now_ms();
    smelt_plan *plan;
    Py_BEGIN_ALLOW_THREADS   /* pure C (the cache's log hook takes the GIL); e is not shared yet */
    plan = smelt_compile(e->r.graph, &o, err, sizeof err);
    Py_END_ALLOW_THREADS
    PyMem_Free(upd);
    self->compile_ms = now_ms() - t0;
    smelt_compile_times ct = { 0 };
    if (plan)
        smelt_plan_compile_times(plan, &ct);
    self->ngenerated += ct.generated;
    self->nplans_cached += ct.plan_cached;
    if (plan && pyext_log_on(PYEXT_LOG_PERF)) {
        char line[512];
        int n = snprintf(line, sizeof line, "%s: trace %.1f ms (%d nodes, %d guards), compile %.1f ms (%d kernels, %d externs): ",
                         fn_name(self),
                         self->trace_ms, e->r.graph->n, e->r.nguards, self->compile_ms,
                         smelt_plan_num_kernels(plan), smelt_plan_num_externs(plan));
        perf_times(line + n, sizeof line - (size_t)n, &ct);
        pyext_log_write(PYEXT_LOG_PERF, line);
    }
    if (!plan) {
        snprintf(e->r.reason, sizeof e->r.reason, strncmp(err, "backend cuda:", 13)
                 ? "compile failed (internal error, please report): %.400s" : "not compiled for CUDA: %.400s", err);
        self->nbreaks++;
        Py_XSETREF(self->last_reason, PyUnicode_FromString(e->r.reason));
        return e;
    }
    if (pyext_log_on(PYEXT_LOG_OUTPUT_CODE) && smelt_plan_code(plan, "kernels"))
        pyext_log_write(PYEXT_LOG_OUTPUT_CODE, smelt_plan_code(plan, "kernels"));
    pyext_log_device_code(plan);
    if (pyext_debug_dir_on()) {
        char *guards = e->tree ? guard_tree_print(e->tree) : NULL;
        pyext_debug_dump(fn_name(self),
                         e->r.graph, guards, plan, self->trace_ms, self->compile_ms);
        free(guards);
    }
    e->compiled = pyext_compiled_new(st, e->r.graph, plan, e->r.calls);
    if (!e->compiled)
        goto fail;
    pyext_compiled_set_packing(e->compiled, self->packing);
    self->ncompiles++;
    return e;
fail:
    entry_free(e);
    return NULL;
}

/* Drops one reference to e; the last one frees it. */
static void entry_release(entry *e)
{
    if (--e->refs == 0)
        entry_free(e);
}

/* Unlinks the entries of site s (running calls keep theirs alive). */
static void drop_site(site *s)
{
    entry *e = s->entries;
    s->entries = NULL;
    s->nentries = 0;
    Py_CLEAR(s->seen);
    while (e) {
        entry *next = e->next;
        e->dead = 1;
        e->next = NULL;
        entry_release(e);
        e = next;
    }
}

/* Drops every entry: the call's and every resume point's (a call running
 * a continuation keeps its site: sites are freed with the function). */
static void drop_entries(FunctionObject *self)
{
    drop_site(&self->top);
    for (site *s = self->resumes; s; s = s->next)
        drop_site(s);
}

static void free_sites(FunctionObject *self)
{
    drop_entries(self);
    while (self->resumes) {
        site *s = self->resumes;
        self->resumes = s->next;
        Py_XDECREF(s->names);
        PyMem_Free(s);
    }
}

/* ---------- the call ---------- */

/* One new entry at a time per function: the thread that traces and
 * compiles holds self->compiling (the compile itself runs without the
 * GIL); another thread that misses meanwhile waits with the GIL released,
 * then looks at the entries again, so a key is compiled once and the
 * entry limit holds. Returns 0 when the caller now holds the lock, 1
 * after waiting for another thread's compile, -1 when this very thread is
 * compiling (a call made while tracing: it runs eagerly). */
static int compile_begin(FunctionObject *self)
{
    unsigned long me = PyThread_get_thread_ident();
    if (self->compiler == me)
        return -1;
    if (PyThread_acquire_lock(self->compiling, NOWAIT_LOCK)) {
        self->compiler = me;
        return 0;
    }
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->compiling, WAIT_LOCK);
    Py_END_ALLOW_THREADS
    PyThread_release_lock(self->compiling);
    return 1;
}

static void compile_end(FunctionObject *self)
{
    self->compiler = 0;
    PyThread_release_lock(self->compiling);
}

/* Call f run eagerly from where its site starts. */
static PyObject *eager_from_site(FunctionObject *self, const call_frame *f)
{
    return f->site->pc ? resume_eager(self, f, f->state, f->site->pc) : run_eager(self, f);
}

/* A call that no entry of its site matched, made with the compile lock
 * held (released here before anything runs): a new entry (traced,
 * compiled, run), or, past MAX_ENTRIES, the call run eagerly. */
static PyObject *miss(FunctionObject *self, const call_frame *f)
{
    site *s = f->site;
    char why[512] = "";
    int full = s->nentries >= MAX_ENTRIES;
    if (s->entries && (pyext_log_on(PYEXT_LOG_RECOMPILES) || (full && !s->warned)) &&
        reason_of(s->entries, f, why, sizeof why)) {
        compile_end(self);
        return NULL;
    }
    if (full) {
        compile_end(self);
        if (!s->warned++) {
            Py_XSETREF(self->last_reason, PyUnicode_FromFormat("recompile limit (%d entries) reached: running "
                                                               "eagerly from now on (last: %s)", MAX_ENTRIES, why));
            if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "smelt: %U recompiled %d times%s; running it eagerly from "
                                 "now on (last: %s)", ((PyCodeObject *)self->code)->co_name, MAX_ENTRIES,
                                 s->pc ? " after a graph break" : "", why))
                return NULL;
        }
        return eager_from_site(self, f);
    }
    if (s->entries)
        log_fn(PYEXT_LOG_RECOMPILES, self->fn, "recompiling", why);
    entry *e = new_entry(self, f);
    if (e) {
        e->refs = 2;   /* the list's and this call's */
        e->next = s->entries;
        s->entries = e;
        s->nentries++;
    }
    compile_end(self);
    if (!e)
        return NULL;
    PyObject *res = NULL;
    if (!e->compiled || e->r.stop_pc >= 0) {
        if (pyext_log_on(PYEXT_LOG_GRAPH_BREAKS))
            log_fn(PYEXT_LOG_GRAPH_BREAKS, self->fn, e->compiled ? "graph break (the frame resumes after it) in"
                                                                 : "graph break (the frame runs eagerly) in", e->r.reason);
        if (self->fullgraph) {
            PyErr_Format(PyExc_RuntimeError, "smelt (fullgraph=True): %s", e->r.reason);
            entry_release(e);
            return NULL;
        }
    }
    int m = try_entry(self, e, f, &res);
    entry_release(e);
    if (m == 0)   /* its guards fail on the very call it was traced from: run eagerly */
        res = eager_from_site(self, f);
    return res;
}

/* Runs the first entry of f's site whose guards hold for call f into
 * *res: 1 (*res may be NULL with an error), 0 when none holds, -1 on
 * error. Each entry is held while it is checked and run; when a reset
 * unlinked it meanwhile, the walk starts again from the current list. */
static int find_entry(FunctionObject *self, const call_frame *f, PyObject **res)
{
    int m = 0;
    entry *e = f->site->entries;
    while (e && m == 0) {
        e->refs++;
        m = try_entry(self, e, f, res);
        entry *next = e->dead ? f->site->entries : e->next;
        entry_release(e);
        e = next;
    }
    return m;
}

/* Finds the entry of f's site whose guards hold for call f and runs it,
 * or traces a new one. */
static PyObject *dispatch(FunctionObject *self, const call_frame *f)
{
    PyObject *code = PyFunction_GET_CODE(self->fn), *res = NULL;
    if (code != self->code) {   /* fn.__code__ was replaced: every entry is stale */
        if (f->site->pc)
            return eager_from_site(self, f);
        drop_entries(self);
        Py_XSETREF(self->code, Py_NewRef(code));
    }
    for (;;) {
        int m = find_entry(self, f, &res);
        if (m == 1)
            self->nhits++;
        if (m != 0)
            return res;
        int c = compile_begin(self);
        if (c < 0)
            return eager_from_site(self, f);
        if (c == 0)
            return miss(self, f);
    }
}

/* 1 if fn has more parameters than a frame smelt binds holds: it runs
 * eagerly (last_break says why; logged once on graph_breaks). */
static int too_many_params(FunctionObject *self)
{
    int total = param_count((PyCodeObject *)PyFunction_GET_CODE(self->fn));
    if (total <= MAX_LOCALS)
        return 0;
    if (!self->last_reason) {
        self->last_reason = PyUnicode_FromFormat("%d parameters (smelt binds at most %d): run eagerly", total,
                                                 MAX_LOCALS);
        if (self->last_reason && pyext_log_on(PYEXT_LOG_GRAPH_BREAKS)) {
            const char *t = PyUnicode_AsUTF8(self->last_reason);
            if (t)
                pyext_log_write(PYEXT_LOG_GRAPH_BREAKS, t);
        }
        PyErr_Clear();
    }
    return 1;
}

static PyObject *function_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwn)
{
    FunctionObject *self = (FunctionObject *)op;
    PyObject *loc[MAX_LOCALS + MAX_CELLS], *res = NULL;
    int nargs;
    if (too_many_params(self))
        return PyObject_Vectorcall(self->fn, args, nargsf, kwn);
    if (bind(self->fn, args, nargsf, kwn, loc, &nargs))
        return NULL;
    call_frame f = { .loc = loc, .nloc = add_cells(self->fn, loc, nargs), .nargs = nargs, .site = &self->top,
                     .globals = PyFunction_GET_GLOBALS(self->fn), .closure = PyFunction_GET_CLOSURE(self->fn),
                     .builtins = ((PyFunctionObject *)self->fn)->func_builtins, .args = args, .nargsf = nargsf, .kwn = kwn };
    res = dispatch(self, &f);
    for (int i = 0; i < f.nloc; i++)
        Py_XDECREF(loc[i]);
    return res;
}

/* ---------- frames offered by the hook ---------- */

/* The CompiledFunction kept for frames of code (tracer_extra slot): one
 * made by the hook is owned here (`cf`); one made by smelt.compile is only
 * referenced weakly (`wr`), so it stays collectable. */
typedef struct code_cache {
    tracer_extra base;
    PyObject *cf, *wr;
} code_cache;

static void code_cache_free(tracer_extra *e)
{
    Py_XDECREF(((code_cache *)e)->cf);
    Py_XDECREF(((code_cache *)e)->wr);
    PyMem_Free(e);
}

/* The live CompiledFunction of a code_cache, or NULL (borrowed). */
static PyObject *cache_target(const code_cache *c)
{
    if (c->cf)
        return c->cf;
    PyObject *o = c->wr ? smelt_weakref_target(c->wr) : NULL;
    return o && o != Py_None ? o : NULL;
}

static PyObject *function_type_obj;   /* smelt._C.CompiledFunction (strong) */

/* Remembers cf as the CompiledFunction of its code object (owned when
 * `own`, else weakly), unless a live one is there already. 0, or -1 with
 * an exception. */
static int remember_for_code(PyObject *cf, int own)
{
    PyObject *code = PyFunction_GET_CODE(((FunctionObject *)cf)->fn);
    tracer_extra *x = tracer_code_extra(code);
    if (x && (x->free != code_cache_free || cache_target((code_cache *)x)))
        return 0;
    code_cache *c = PyMem_Calloc(1, sizeof *c);
    if (!c)
        return PyErr_NoMemory(), -1;
    c->base.free = code_cache_free;
    if (own)
        c->cf = Py_NewRef(cf);
    else if (!(c->wr = PyWeakref_NewRef(cf, NULL))) {
        PyMem_Free(c);
        return -1;
    }
    if (tracer_set_code_extra(code, &c->base)) {
        code_cache_free(&c->base);
        return -1;
    }
    return 0;
}

/* The CompiledFunction for the frame's code, made on first sight; NULL
 * (no error) for frames smelt leaves alone: closures (their cells belong
 * to each function object), code run with other globals than the
 * function first seen, or code whose slot holds something else. */
static FunctionObject *frame_function(const tracer_frame_view *v)
{
    tracer_extra *x = tracer_code_extra((PyObject *)v->code);
    if (x && x->free != code_cache_free)
        return NULL;
    if ((!x || !cache_target((code_cache *)x)) && v->code->co_nfreevars == 0 && function_type_obj) {
        making_for_hook = 1;
        PyObject *cf = PyObject_CallOneArg(function_type_obj, v->func);
        making_for_hook = 0;
        PyObject *ref = cf ? PyWeakref_NewRef(cf, NULL) : NULL;
        int bad = !ref || PyList_Append(hook_made, ref);
        Py_XDECREF(ref);
        if (bad || remember_for_code(cf, 1)) {
            Py_XDECREF(cf);
            PyErr_Clear();
            return NULL;
        }
        Py_DECREF(cf);
        x = tracer_code_extra((PyObject *)v->code);
    }
    FunctionObject *self = x ? (FunctionObject *)cache_target((code_cache *)x) : NULL;
    if (!self)
        return NULL;
    if (v->code->co_nfreevars || PyFunction_GET_GLOBALS(self->fn) != v->globals)
        return NULL;
    return self;
}

/* Frame v's bound parameters as new references in loc[0..n): n, or -1
 * (nothing taken) when there are more than MAX_LOCALS. */
static int frame_params(const tracer_frame_view *v, PyObject **loc)
{
    PyCodeObject *co = v->code;
    int n = co->co_argcount + co->co_kwonlyargcount + !!(co->co_flags & CO_VARARGS) +
            !!(co->co_flags & CO_VARKEYWORDS);
    if (n > MAX_LOCALS || n > v->nlocalsplus)
        return -1;
    for (int i = 0; i < n; i++)
        loc[i] = Py_XNewRef(v->localsplus[i]);
    return n;
}

/* 1 if frame v is the one resume_eager asked for: it is then set up to
 * run from the resume point (a failure leaves it to run from its start,
 * with the error: the call raises it). */
static int take_resume(const tracer_frame_view *v)
{
    if ((PyObject *)v->code != resume_req.code)
        return 0;
    const tr_fstate *st = resume_req.state;
    resume_req.code = NULL;
    tracer_frame_resume(v, resume_req.pc, st->slots, st->slots + st->nslots, st->sp);
    return 1;
}

/* Hook callback: a user frame about to run under a function smelt runs
 * eagerly. Compiled entry: its result; anything else: run the frame (from
 * its start, or from where a partial entry's continuation left it). */
static PyObject *on_frame(void *ctx, const tracer_frame_view *v)
{
    (void)ctx;
    if ((PyObject *)v->code == skip_code) {
        skip_code = NULL;
        return NULL;
    }
    if (take_resume(v))
        return NULL;
    FunctionObject *self = frame_function(v);
    PyObject *loc[MAX_LOCALS + MAX_CELLS];
    int nargs = self ? frame_params(v, loc) : -1;
    if (nargs < 0)
        return NULL;
    call_frame f = { .loc = loc, .nloc = nargs, .nargs = nargs, .site = &self->top, .globals = v->globals,
                     .builtins = v->builtins, .from_hook = 1, .view = v };
    Py_INCREF(self);
    PyObject *res = dispatch(self, &f);
    Py_DECREF(self);
    for (int i = 0; i < nargs; i++)
        Py_XDECREF(loc[i]);
    if (res == resume_mark) {   /* the frame was set up to resume: let it run */
        Py_DECREF(res);
        return NULL;
    }
    return res;
}

static const tracer_callback hook_cb = { on_frame, NULL };

/* ---------- type ---------- */

static PyObject *function_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "fn", "fullgraph", "weight_packing", "dynamic", "backend", NULL };
    PyObject *fn, *dynamic = Py_None;
    int fullgraph = 0;
    const char *wp = "auto", *backend = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|psOz", kwlist, &fn, &fullgraph, &wp, &dynamic, &backend))
        return NULL;
    if (backend && !ind_backend_named(backend))
        return PyErr_Format(PyExc_ValueError, "smelt: backend must be 'cpu' or 'spirv', not '%s'", backend);
    if (dynamic != Py_None && !PyBool_Check(dynamic))
        return PyErr_Format(PyExc_TypeError, "smelt: dynamic must be None, True or False, not %R", dynamic);
    int packing = pyext_packing_mode(wp);
    if (packing < 0)
        return PyErr_Format(PyExc_ValueError, "smelt: weight_packing must be 'auto', 'always' or 'never', not %R",
                            PyTuple_GET_SIZE(args) > 2 ? PyTuple_GET_ITEM(args, 2) : Py_None);
    const char *env = getenv("SMELT_WEIGHT_PACKING");   /* overrides the option */
    if (env && *env && pyext_packing_mode(env) >= 0)
        packing = pyext_packing_mode(env);
    if (!PyFunction_Check(fn))
        return PyErr_Format(PyExc_TypeError, "smelt: can only compile Python functions, got %s", Py_TYPE(fn)->tp_name);
    if (!grad_enabled_fn) {
        PyObject *torch = PyImport_ImportModule("torch");
        grad_enabled_fn = torch ? PyObject_GetAttrString(torch, "is_grad_enabled") : NULL;
        PyObject *tc0 = torch ? PyObject_GetAttrString(torch, "_C") : NULL;
        autocast_fn = tc0 ? PyObject_GetAttrString(tc0, "_is_any_autocast_enabled") : NULL;
        autocast_dev_fn = torch ? PyObject_GetAttrString(torch, "is_autocast_enabled") : NULL;
        increment_version_fn = tc0 ? PyObject_GetAttrString(tc0, "_increment_version") : NULL;
        scalar_tensor_fn = torch ? PyObject_GetAttrString(torch, "scalar_tensor") : NULL;
        Py_XDECREF(tc0);
        PyObject *tc = torch ? PyObject_GetAttrString(torch, "_C") : NULL;
        mode_stack_fn[0] = tc ? PyObject_GetAttrString(tc, "_len_torch_function_stack") : NULL;
        mode_stack_fn[1] = tc ? PyObject_GetAttrString(tc, "_len_torch_dispatch_stack") : NULL;
        Py_XDECREF(tc);
        hook_made = PyList_New(0);
        null_mark = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
        resume_mark = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
        Py_XDECREF(torch);
        if (!grad_enabled_fn || !autocast_fn || !autocast_dev_fn || !increment_version_fn || !scalar_tensor_fn || !hook_made || !null_mark || !resume_mark ||
            !mode_stack_fn[0] || !mode_stack_fn[1] ||
            tracer_init())
            return NULL;
        cpu_jit_start();   /* ready by the time the first trace is done */
    }
    FunctionObject *self = (FunctionObject *)tp->tp_alloc(tp, 0);
    if (!self)
        return NULL;
    self->vectorcall = function_call;
    self->fn = Py_NewRef(fn);
    if (!(self->compiling = PyThread_allocate_lock())) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->fullgraph = fullgraph;
    self->dynamic = dynamic == Py_None ? -1 : dynamic == Py_True;
    self->packing = packing;
    snprintf(self->backend, sizeof self->backend, "%s", backend ? backend : "");
    if (!fullgraph && !making_for_hook && remember_for_code((PyObject *)self, 0)) {   /* its frames under the hook find it */
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* Visits the objects a trace result owns (tp_traverse helper). */
static int result_traverse(const tr_result *r, visitproc visit, void *arg)
{
    Py_VISIT(r->keep);
    for (int32_t i = 0; i < r->nguards; i++)
        Py_VISIT(r->guards[i].obj);
    for (int32_t i = 0; i < r->nouts; i++)
        Py_VISIT(r->outs[i].obj);
    return 0;
}

static int function_traverse(PyObject *op, visitproc visit, void *arg)
{
    FunctionObject *self = (FunctionObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->fn);
    Py_VISIT(self->code);
    Py_VISIT(self->last_reason);
    for (site *s = &self->top; s; s = s == &self->top ? self->resumes : s->next) {
        Py_VISIT(s->names);
        for (entry *e = s->entries; e; e = e->next) {
            Py_VISIT(e->compiled);
            int r = result_traverse(&e->r, visit, arg);
            if (r || (r = guard_tree_traverse(e->tree, visit, arg)))
                return r;
        }
    }
    return 0;
}

static int function_clear(PyObject *op)
{
    FunctionObject *self = (FunctionObject *)op;
    Py_CLEAR(self->fn);
    Py_CLEAR(self->code);
    Py_CLEAR(self->last_reason);
    free_sites(self);
    return 0;
}

static void function_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    if (((FunctionObject *)op)->weakrefs)
        PyObject_ClearWeakRefs(op);
    function_clear(op);
    if (((FunctionObject *)op)->compiling)
        PyThread_free_lock(((FunctionObject *)op)->compiling);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyObject *function_reset(PyObject *op, PyObject *unused)
{
    (void)unused;
    drop_entries((FunctionObject *)op);
    Py_RETURN_NONE;
}

/* 1 if entry e runs a graph that computes something (a partial entry's
 * graph before a break may only pass the frame's values on). */
static int computes(const entry *e)
{
    return e->compiled && (e->r.graph->nout > 0 || e->r.nmut > 0);
}

static PyObject *function_stats(PyObject *op, PyObject *unused)
{
    FunctionObject *self = (FunctionObject *)op;
    (void)unused;
    int eager = 0, partial = 0, resumes = 0, resume_entries = 0, graphs = 0, warned = self->top.warned;
    long long arena = 0, code = 0;
    for (entry *e = self->top.entries; e; e = e->next) {
        eager += !e->compiled;
        partial += e->compiled && e->r.stop_pc >= 0;
        graphs += computes(e);
        arena += e->compiled ? pyext_compiled_arena_bytes(e->compiled) : 0;
        code += e->compiled ? pyext_compiled_code_bytes(e->compiled) : 0;
    }
    for (site *s = self->resumes; s; s = s->next, resumes++) {
        resume_entries += s->nentries;
        warned |= s->warned;
        for (entry *e = s->entries; e; e = e->next) {
            partial += e->compiled && e->r.stop_pc >= 0;
            graphs += computes(e);
            arena += e->compiled ? pyext_compiled_arena_bytes(e->compiled) : 0;
            code += e->compiled ? pyext_compiled_code_bytes(e->compiled) : 0;
        }
    }
    return Py_BuildValue("{s:i,s:i,s:l,s:l,s:l,s:O,s:d,s:d,s:l,s:l,s:O,s:i,s:i,s:i,s:i,s:L,s:L,s:l,s:l,s:l}", "entries",
                         self->top.nentries, "eager_entries", eager, "compiles", self->ncompiles, "breaks",
                         self->nbreaks, "hits", self->nhits, "last_break",
                         self->last_reason ? self->last_reason : Py_None, "trace_ms", self->trace_ms, "compile_ms",
                         self->compile_ms, "generated", self->ngenerated, "plans_from_disk", self->nplans_cached,
                         "recompile_limit_reached", warned ? Py_True : Py_False, "partial_entries", partial,
                         "resume_points", resumes, "resume_entries", resume_entries, "graphs", graphs,
                         "arena_bytes", arena, "code_bytes", code, "backward_compiles", self->nbackward,
                         "dynamic_entries", self->ndynentries, "dynamic_plans", self->ndynplans);
}

static PyObject *function_get_fn(PyObject *op, void *unused)
{
    (void)unused;
    return Py_NewRef(((FunctionObject *)op)->fn);
}

/* CompiledFunction._reset_hooked(): drops the entries of every
 * CompiledFunction the frame hook made (smelt.reset() calls it; those made
 * by smelt.compile are reset through their own reset()). */
static PyObject *function_reset_hooked(PyObject *unused, PyObject *unused2)
{
    (void)unused;
    (void)unused2;
    Py_ssize_t keep = 0;
    for (Py_ssize_t i = 0; hook_made && i < PyList_GET_SIZE(hook_made); i++) {
        PyObject *ref = PyList_GET_ITEM(hook_made, i), *cf = smelt_weakref_target(ref);
        if (cf == Py_None)
            continue;
        drop_entries((FunctionObject *)cf);
        PyList_SET_ITEM(hook_made, i, PyList_GET_ITEM(hook_made, keep));
        PyList_SET_ITEM(hook_made, keep++, ref);
    }
    if (hook_made && PyList_SetSlice(hook_made, keep, PyList_GET_SIZE(hook_made), NULL))
        return NULL;
    Py_RETURN_NONE;
}

/* CompiledFunction.of(fn): the CompiledFunction smelt keeps for fn's code
 * (made by smelt.compile or by the frame hook), or None. */
static PyObject *function_of(PyObject *unused, PyObject *fn)
{
    (void)unused;
    if (!PyFunction_Check(fn))
        return PyErr_Format(PyExc_TypeError, "of: expected a Python function, got %s", Py_TYPE(fn)->tp_name);
    tracer_extra *x = tracer_code_extra(PyFunction_GET_CODE(fn));
    PyObject *cf = x && x->free == code_cache_free ? cache_target((code_cache *)x) : NULL;
    return Py_NewRef(cf ? cf : Py_None);
}

/* profile(): the step profile of each compiled entry, newest first. */
/* The callables of the host calls of trace r, in call order. */
static PyObject *host_callables(const tr_result *r)
{
    Py_ssize_t n = r->calls ? PyList_GET_SIZE(r->calls) : 0;
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *call = PyList_GET_ITEM(r->calls, i);
        PyList_SET_ITEM(out, i, Py_NewRef(PyTuple_Check(call) ? PyTuple_GET_ITEM(call, 0) : call));
    }
    return out;
}

/* The report of trace r of fn for nargs bound parameters (rc: what
 * tracer_trace returned): whether it compiles, the reason (file:line) if
 * not, graph, guards, host calls, counts. Clears r. A dict, or NULL with
 * an exception. */
/* Whether trace r's graph compiles: 0, or 1 with the reason in r (a
 * compile that fails is an internal error: it must be reported, never
 * shown as a graph that compiles). The plan is freed again. */
static int explain_compiles(tr_result *r, long long *arena)
{
    char err[512];
    smelt_compile_opts o = { .opt_level = 2 };
    opts_device(&o, r);
    smelt_plan *plan;
    Py_BEGIN_ALLOW_THREADS
    plan = smelt_compile(r->graph, &o, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (plan) {
        *arena = smelt_plan_arena_bytes(plan);
        smelt_plan_free(plan);
        return 0;
    }
    snprintf(r->reason, sizeof r->reason, "compile failed (internal error, please report): %.400s", err);
    return 1;
}

/* What the trace does to objects from outside, replayed after its graph
 * (r's effects, with their targets' tree nodes in t): one line each. */
static PyObject *effect_lines(const tr_result *r, const guard_tree *t)
{
    PyObject *out = PyList_New(0);
    for (int32_t i = 0; out && i < r->neffects; i++) {
        const tr_effect *x = &r->effects[i];
        const guard_node *n = x->target >= 0 ? guard_tree_node(t, r->outs[x->target].node) : NULL;
        const char *src = n ? guard_node_source(n) : "?";
        PyObject *line = x->kind == EF_GLOBAL ? PyUnicode_FromFormat("G['%U'] assigned", x->name) :
                         x->kind == EF_CELL ? PyUnicode_FromFormat("closure variable %U assigned", x->name) :
                         x->kind == EF_CONTENTS ? PyUnicode_FromFormat("%s: contents changed", src) :
                         x->val < 0 ? PyUnicode_FromFormat("%s.%U deleted", src, x->name) :
                         PyUnicode_FromFormat("%s.%U assigned", src, x->name);
        if (!line || PyList_Append(out, line))
            Py_CLEAR(out);
        Py_XDECREF(line);
    }
    return out;
}

static PyObject *explain_dict(PyObject *fn, int nargs, int rc, tr_result *r)
{
    PyObject *res = NULL;
    int partial = rc == 2;   /* reported as not compiling as one graph; the graph before the break shown */
    if (partial)
        rc = 0;
    int autograd = 0;
    if (rc == 0 && (rc = eager_state(r, &autograd)) < 0) {
        tracer_result_clear(r);
        return NULL;
    }
    if (autograd && rc == 0) {   /* can it be differentiated? */
        uint8_t *rg = tracer_inputs_requiring_grad(r);
        ad_split s;
        char err[400];
        int arc = rg ? ad_split_graph(r->graph, rg, r->nmut, &s, err, sizeof err) : -2;
        PyMem_Free(rg);
        if (arc == -2) {
            tracer_result_clear(r);
            return NULL;
        }
        if (arc == 0) {
            autograd = s.ndiff > 0;   /* else it compiles as without grad */
            ad_split_free(&s);
        } else {
            snprintf(r->reason, sizeof r->reason, "autograd: %s", err);
            rc = 1;
        }
    }
    long long arena = 0;
    if (rc == 0)
        rc = explain_compiles(r, &arena);
    if (rc == 0 && partial)
        rc = 2;
    int traced = rc == 0 || rc == 2;   /* a graph: the whole call's, or the one before the break */
    int *input_node = traced ? PyMem_Calloc((size_t)r->ninputs + 1, sizeof(int)) : NULL;
    guard_tree *t = input_node ? build_tree(fn, nargs, NULL, r, input_node) : NULL;
    char *graph = traced ? smelt_graph_print(r->graph) : NULL, *guards = t ? guard_tree_print(t) : NULL;
    PyObject *calls = traced ? host_callables(r) : PyList_New(0);
    PyObject *effects = t ? effect_lines(r, t) : PyList_New(0);
    if (rc >= 0 && calls && effects && (!traced || t))
        res = Py_BuildValue("{s:O,s:O,s:O,s:s,s:s,s:s,s:O,s:O,s:i,s:i,s:i,s:i,s:L}", "compiles", rc == 0 ? Py_True : Py_False,
                            "backward", rc == 0 && autograd ? Py_True : Py_False,
                            "partial", rc == 2 ? Py_True : Py_False,
                            "reason", rc ? r->reason : NULL, "graph", graph, "guards", guards, "host_calls", calls,
                            "side_effects", effects, "nodes", traced ? (int)r->graph->n : 0, "inputs", traced ? (int)r->ninputs : 0,
                            "num_guards", traced ? (int)r->nguards : 0,
                            "inputs_updated_in_place", traced ? (int)r->nmut : 0, "arena_bytes", arena);
    Py_XDECREF(calls);
    Py_XDECREF(effects);
    free(graph);
    free(guards);
    if (t)
        guard_tree_free(t);
    PyMem_Free(input_node);
    tracer_result_clear(r);
    return res;
}

/* _explain(*args, **kwargs): what compiling fn for this call would do,
 * without running compiled code: the trace's graph (or why it stops, with
 * file:line), its guards, its host calls. A dict. */
static PyObject *function_explain(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwn)
{
    FunctionObject *self = (FunctionObject *)op;
    PyObject *loc[MAX_LOCALS + MAX_CELLS];
    int nargs;
    if (bind(self->fn, args, PyVectorcall_NARGS(nargsf), kwn, loc, &nargs))
        return NULL;
    int nloc = add_cells(self->fn, loc, nargs);
    tr_result r;
    int rc = tracer_trace(self->fn, loc, nargs, &r);
    PyObject *res = explain_dict(self->fn, nargs, rc, &r);
    for (int i = 0; i < nloc; i++)
        Py_XDECREF(loc[i]);
    return res;
}

/* ---------- explain: the callees of a frame that runs eagerly ---------- */

/* One _explain_callees run: a report per distinct (code, compiles) of the
 * frames the hook offers, and the code objects whose frames would compile
 * (their callees would be part of that graph, so they are not offered). */
typedef struct explain_run {
    PyObject *frames;     /* list of report dicts */
    PyObject *seen;       /* (code, compiles) -> report */
    PyObject *compiled;   /* set of code objects */
    PyObject *skip;       /* the top function's code: its own frame runs as is */
} explain_run;

/* 1 if a frame on the current stack runs code that would compile. */
static int inside_compiled(const explain_run *x)
{
    PyFrameObject *f = PyEval_GetFrame();
    int found = 0;
    Py_XINCREF(f);
    while (f && !found) {
        PyCodeObject *co = PyFrame_GetCode(f);
        found = PySet_Contains(x->compiled, (PyObject *)co) == 1;
        Py_DECREF(co);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_XDECREF(f);
    return found;
}

/* The report for frame v as the hook would handle it. NULL with an
 * exception on error. */
static PyObject *explain_frame(const tracer_frame_view *v)
{
    PyCodeObject *co = v->code;
    PyObject *loc[MAX_LOCALS + MAX_CELLS] = { NULL };
    int nargs = co->co_nfreevars ? -1 : frame_params(v, loc);
    if (nargs < 0)
        return Py_BuildValue("{s:O,s:s,s:s,s:s,s:[],s:[],s:i,s:i,s:i,s:i}", "compiles", Py_False, "reason",
                             co->co_nfreevars ? "a closure: the frame hook runs it as it is (its callees are offered)"
                                              : "too many arguments for the frame hook",
                             "graph", NULL, "guards", NULL, "host_calls", "side_effects", "nodes", 0, "inputs", 0,
                             "num_guards", 0,
                             "inputs_updated_in_place", 0);
    tr_result r;
    int rc = tracer_trace(v->func, loc, nargs, &r);
    PyObject *d = explain_dict(v->func, nargs, rc, &r);
    for (int i = 0; i < nargs; i++)
        Py_XDECREF(loc[i]);
    return d;
}

/* Adds report d of a frame of code co to the run (or counts one more call
 * of a report already there). 0, or -1 with an exception. */
static int explain_add(explain_run *x, PyCodeObject *co, PyObject *d)
{
    PyObject *compiles = PyDict_GetItemString(d, "compiles");
    PyObject *key = Py_BuildValue("(OO)", co, compiles), *old = key ? PyDict_GetItemWithError(x->seen, key) : NULL;
    int rc = -1;
    if (old) {
        PyObject *n = PyLong_FromLong(PyLong_AsLong(PyDict_GetItemString(old, "calls")) + 1);
        rc = n ? PyDict_SetItemString(old, "calls", n) : -1;
        Py_XDECREF(n);
    } else if (key && !PyErr_Occurred()) {
        PyObject *info = Py_BuildValue("{s:O,s:O,s:i,s:i}", "function", co->co_qualname, "file", co->co_filename,
                                       "line", co->co_firstlineno, "calls", 1);
        rc = info && PyDict_Update(d, info) == 0 && PyDict_SetItem(x->seen, key, d) == 0 &&
             PyList_Append(x->frames, d) == 0 && (compiles != Py_True || PySet_Add(x->compiled, (PyObject *)co) == 0)
             ? 0 : -1;
        Py_XDECREF(info);
    }
    Py_XDECREF(key);
    return rc;
}

/* Hook callback of _explain_callees: reports the frame, then lets it run. */
static PyObject *explain_on_frame(void *ctx, const tracer_frame_view *v)
{
    explain_run *x = ctx;
    if (take_resume(v))   /* the rest of the frame _explain_partial runs */
        return NULL;
    if ((PyObject *)v->code == x->skip) {
        x->skip = NULL;
        return NULL;
    }
    if (inside_compiled(x))
        return NULL;
    PyObject *d = explain_frame(v);
    if (!d || explain_add(x, v->code, d)) {
        Py_XDECREF(d);
        return NULL;   /* the call raises the exception */
    }
    Py_DECREF(d);
    return NULL;
}

/* _explain_callees(*args, **kwargs): runs fn eagerly under the frame hook
 * (as a call whose frame would run eagerly does) and reports, per function
 * it calls, what smelt would do with its frames: a list of _explain dicts
 * with function, file, line and calls added. Frames of functions that
 * would compile run eagerly too (no compiled code runs); their callees are
 * part of that graph and not reported. */
static PyObject *function_explain_callees(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwn)
{
    FunctionObject *self = (FunctionObject *)op;
    explain_run x = { PyList_New(0), PyDict_New(), PySet_New(NULL), PyFunction_GET_CODE(self->fn) };
    PyObject *res = NULL;
    if (x.frames && x.seen && x.compiled) {
        tracer_callback cb = { explain_on_frame, &x };
        const tracer_callback *prev = tracer_hook_enter(&cb);
        PyObject *r = PyObject_Vectorcall(self->fn, args, nargsf, kwn);
        tracer_hook_exit(prev);
        res = r ? Py_NewRef(x.frames) : NULL;
        Py_XDECREF(r);
    }
    Py_XDECREF(x.frames);
    Py_XDECREF(x.seen);
    Py_XDECREF(x.compiled);
    return res;
}

/* Appends "<label>: <profile>" for each compiled entry of site st. 0 or -1. */
static int profile_site(const site *st, PyObject *parts)
{
    int k = 0;
    for (entry *e = st->entries; e; e = e->next, k++) {
        if (!e->compiled)
            continue;
        PyObject *t = pyext_compiled_profile(e->compiled);
        PyObject *s = !t ? NULL : st->pc ? PyUnicode_FromFormat("resume at %d, entry %d: %U", st->pc, k, t)
                                         : PyUnicode_FromFormat("entry %d: %U", k, t);
        Py_XDECREF(t);
        if (!s || PyList_Append(parts, s)) {
            Py_XDECREF(s);
            return -1;
        }
        Py_DECREF(s);
    }
    return 0;
}

/* _breaks(): the graph breaks of the entries made so far, at the call
 * and at each resume point: a list of dicts {reason, resumes (the frame
 * goes on in compiled code after the instruction), at (the resume point's
 * code unit, 0 for the call)}. */
static PyObject *function_breaks(PyObject *op, PyObject *unused)
{
    (void)unused;
    FunctionObject *self = (FunctionObject *)op;
    PyObject *out = PyList_New(0);
    for (site *s = &self->top; out && s; s = s == &self->top ? self->resumes : s->next)
        for (entry *e = s->entries; out && e; e = e->next) {
            if (e->compiled && e->r.stop_pc < 0)
                continue;
            PyObject *d = Py_BuildValue("{s:s,s:O,s:i}", "reason", e->r.reason, "resumes",
                                        e->compiled ? Py_True : Py_False, "at", s->pc);
            if (!d || PyList_Append(out, d))
                Py_CLEAR(out);
            Py_XDECREF(d);
        }
    return out;
}

/* _explain_partial(*args, **kwargs): runs the call once through a fresh
 * CompiledFunction of fn (compiled around its graph breaks), with what it
 * runs eagerly around the breaks reported as _explain_callees reports a
 * frame's callees: {frames, breaks, graphs}. Nothing is kept. */
static PyObject *function_explain_partial(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwn)
{
    FunctionObject *self = (FunctionObject *)op;
    explain_run x = { PyList_New(0), PyDict_New(), PySet_New(NULL), NULL };
    PyObject *probe = x.frames && x.seen && x.compiled ? PyObject_CallOneArg(function_type_obj, self->fn) : NULL;
    PyObject *res = NULL;
    if (probe) {
        tracer_callback cb = { explain_on_frame, &x };
        const tracer_callback *prev = step_cb;
        step_cb = &cb;
        PyObject *r = PyObject_Vectorcall(probe, args, nargsf, kwn);
        step_cb = prev;
        PyObject *breaks = r ? function_breaks(probe, NULL) : NULL, *st = breaks ? function_stats(probe, NULL) : NULL;
        if (st)
            res = Py_BuildValue("{s:O,s:O,s:O}", "frames", x.frames, "breaks", breaks, "graphs",
                                PyDict_GetItemString(st, "graphs"));
        Py_XDECREF(st);
        Py_XDECREF(breaks);
        Py_XDECREF(r);
        Py_DECREF(probe);
    }
    Py_XDECREF(x.frames);
    Py_XDECREF(x.seen);
    Py_XDECREF(x.compiled);
    return res;
}

static PyObject *function_profile(PyObject *op, PyObject *unused)
{
    (void)unused;
    FunctionObject *self = (FunctionObject *)op;
    PyObject *parts = PyList_New(0);
    if (parts && profile_site(&self->top, parts))
        Py_CLEAR(parts);
    for (site *s = self->resumes; parts && s; s = s->next)
        if (profile_site(s, parts))
            Py_CLEAR(parts);
    PyObject *sep = parts ? PyUnicode_FromString("\n") : NULL;
    PyObject *r = sep ? PyUnicode_Join(sep, parts) : NULL;
    Py_XDECREF(sep);
    Py_XDECREF(parts);
    return r;
}

/* copy.copy / copy.deepcopy: the same object, as for Python functions
 * (a module holding a compiled function can be deep-copied). */
static PyObject *function_copy(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args;
    (void)nargs;
    return Py_NewRef(op);
}

static PyMethodDef function_methods[] = {
    { "__copy__", (PyCFunction)(void (*)(void))function_copy, METH_FASTCALL, "The object itself." },
    { "__deepcopy__", (PyCFunction)(void (*)(void))function_copy, METH_FASTCALL, "The object itself." },
    { "_explain", (PyCFunction)(void (*)(void))function_explain, METH_FASTCALL | METH_KEYWORDS,
      "_explain(*args, **kwargs): the trace this call would compile (graph, guards, host calls, or why it\n"
      "would run eagerly), without running compiled code. See smelt.explain." },
    { "_explain_callees", (PyCFunction)(void (*)(void))function_explain_callees, METH_FASTCALL | METH_KEYWORDS,
      "_explain_callees(*args, **kwargs): runs the function eagerly under the frame hook and reports what smelt "
      "would do with each function it calls (used by smelt.explain)." },
    { "_explain_partial", (PyCFunction)(void (*)(void))function_explain_partial, METH_FASTCALL | METH_KEYWORDS,
      "_explain_partial(*args, **kwargs): runs the call through a fresh CompiledFunction and reports its graphs, "
      "breaks and the functions run eagerly around them (used by smelt.explain)." },
    { "_breaks", function_breaks, METH_NOARGS,
      "_breaks(): the graph breaks of the entries so far (reason, whether the frame resumes after it, where)." },
    { "profile", function_profile, METH_NOARGS,
      "Step times of each compiled entry (with smelt._C.set_profiling(True))." },
    { "of", function_of, METH_O | METH_STATIC, "The CompiledFunction kept for fn's code, or None." },
    { "reset", function_reset, METH_NOARGS, "Drop every compiled entry." },
    { "_reset_hooked", function_reset_hooked, METH_NOARGS | METH_STATIC,
      "Drop the entries of every CompiledFunction the frame hook made." },
    { "stats", function_stats, METH_NOARGS, "Counters: entries, eager_entries, compiles, breaks, hits, last_break, trace_ms and compile_ms (last compile), generated (kernel functions LLVM generated), plans_from_disk (compiles read from the disk cache), recompile_limit_reached (the function now runs eagerly on calls no entry matches)." },
    { NULL, NULL, 0, NULL },
};

static PyObject *function_get_self(PyObject *op, void *unused)
{
    (void)unused;
    return Py_NewRef(op);
}

/* __name__, __qualname__, __module__ of the original function. */
static PyObject *function_get_meta(PyObject *op, void *name)
{
    return PyObject_GetAttrString(((FunctionObject *)op)->fn, (const char *)name);
}

/* A CompiledFunction stored on a class binds like the function it wraps. */
static PyObject *function_descr_get(PyObject *op, PyObject *obj, PyObject *type)
{
    (void)type;
    if (!obj || obj == Py_None)
        return Py_NewRef(op);
    return PyMethod_New(op, obj);
}

static PyGetSetDef function_getset[] = {
    { "fn", function_get_fn, NULL, "The original function.", NULL },
    { "__wrapped__", function_get_fn, NULL, "The original function.", NULL },
    { "_smelt", function_get_self, NULL, "This object (the compiled state of smelt.compile(fn)).", NULL },
    { "__name__", function_get_meta, NULL, NULL, "__name__" },
    { "__qualname__", function_get_meta, NULL, NULL, "__qualname__" },
    { "__module__", function_get_meta, NULL, NULL, "__module__" },
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
    { Py_tp_descr_get, function_descr_get },
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
    Py_XSETREF(function_type_obj, tp);   /* the hook makes CompiledFunctions for frames */
    return rc;
}
