/* interp.c — symbolic interpretation of CPython 3.11 bytecode.
 *
 * Entry: tracer_trace(). The loop follows the single path the traced call's
 * arguments take: a branch on a constant is decided now (and the constant
 * guarded); a branch on tensor data ends the trace. Python calls are inlined
 * into new symbolic frames; torch calls go to ops.c. Opcodes are matched by
 * name (tables built from the `opcode` module at start-up), so a new
 * CPython minor version adds cases instead of renumbering.
 */
#include "tstate.h"

#include <stdarg.h>
#include <string.h>

#define MAX_DEPTH 48
#define MAX_STEPS 2000000

/* ---------- opcode tables ---------- */

#define OPNAMES(X) \
    X(CACHE) X(NOP) X(RESUME) X(PRECALL) X(PUSH_NULL) X(POP_TOP) X(COPY) X(SWAP) \
    X(LOAD_CONST) X(LOAD_FAST) X(STORE_FAST) X(DELETE_FAST) X(LOAD_GLOBAL) X(LOAD_ATTR) \
    X(LOAD_METHOD) X(LOAD_DEREF) X(STORE_DEREF) X(MAKE_CELL) X(COPY_FREE_VARS) X(KW_NAMES) \
    X(CALL) X(CALL_FUNCTION_EX) X(BINARY_OP) X(COMPARE_OP) X(IS_OP) X(CONTAINS_OP) \
    X(UNARY_NEGATIVE) X(UNARY_NOT) X(UNARY_POSITIVE) X(UNARY_INVERT) X(BINARY_SUBSCR) \
    X(BUILD_TUPLE) X(BUILD_LIST) X(BUILD_MAP) X(BUILD_CONST_KEY_MAP) X(BUILD_SLICE) \
    X(LIST_APPEND) X(LIST_EXTEND) X(LIST_TO_TUPLE) X(DICT_MERGE) X(DICT_UPDATE) X(MAP_ADD) \
    X(UNPACK_SEQUENCE) X(GET_ITER) X(FOR_ITER) X(JUMP_FORWARD) X(JUMP_BACKWARD) \
    X(JUMP_BACKWARD_NO_INTERRUPT) X(POP_JUMP_FORWARD_IF_FALSE) X(POP_JUMP_FORWARD_IF_TRUE) \
    X(POP_JUMP_FORWARD_IF_NONE) X(POP_JUMP_FORWARD_IF_NOT_NONE) X(POP_JUMP_BACKWARD_IF_FALSE) \
    X(POP_JUMP_BACKWARD_IF_TRUE) X(POP_JUMP_BACKWARD_IF_NONE) X(POP_JUMP_BACKWARD_IF_NOT_NONE) \
    X(JUMP_IF_FALSE_OR_POP) X(JUMP_IF_TRUE_OR_POP) X(RETURN_VALUE) X(FORMAT_VALUE) \
    X(BUILD_STRING) X(EXTENDED_ARG) X(GET_LEN)

enum {
#define X(n) OP_##n,
    OPNAMES(X)
#undef X
    OP_UNKNOWN
};

static const char *op_names[] = {
#define X(n) #n,
    OPNAMES(X)
#undef X
};

static uint8_t op_of[256];       /* CPython opcode -> OP_* */
static uint8_t ncache[256];      /* inline cache entries after the opcode */

int tracer_init(void)
{
    PyObject *opcode = PyImport_ImportModule("opcode");
    if (!opcode)
        return -1;
    PyObject *opmap = PyObject_GetAttrString(opcode, "opmap");
    PyObject *caches = PyObject_GetAttrString(opcode, "_inline_cache_entries");
    int rc = -1;
    if (!opmap || !caches)
        goto out;
    memset(op_of, OP_UNKNOWN, sizeof op_of);
    for (int i = 0; i < OP_UNKNOWN; i++) {
        PyObject *v = PyDict_GetItemString(opmap, op_names[i]);
        if (v)
            op_of[PyLong_AsLong(v) & 255] = (uint8_t)i;
    }
    for (Py_ssize_t i = 0; i < 256 && i < PySequence_Size(caches); i++) {
        PyObject *v = PySequence_GetItem(caches, i);
        ncache[i] = v ? (uint8_t)PyLong_AsLong(v) : 0;
        Py_XDECREF(v);
    }
    rc = ops_init();
out:
    Py_XDECREF(opmap);
    Py_XDECREF(caches);
    Py_DECREF(opcode);
    return rc;
}

/* ---------- arenas ---------- */

static void *grow(void *p, int32_t *cap, int32_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    int32_t nc = *cap ? *cap * 2 : 64;
    while (nc < need)
        nc *= 2;
    void *q = PyMem_Realloc(p, (size_t)nc * elem);
    if (q)
        *cap = nc;
    return q;
}

int tr_keep(tracer *T, PyObject *o)
{
    return PyList_Append(T->r->keep, o);
}

int tr_break(tracer *T, const char *fmt, ...)
{
    if (!T->broke) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(T->r->reason, sizeof T->r->reason, fmt, ap);
        va_end(ap);
        T->broke = 1;
    }
    return -1;
}

int32_t tv_new(tracer *T, tv_kind k)
{
    tv *nv = grow(T->vals, &T->cvals, T->nvals + 1, sizeof(tv));
    if (!nv)
        return PyErr_NoMemory(), -1;
    T->vals = nv;
    tv *v = &T->vals[T->nvals];
    memset(v, 0, sizeof *v);
    v->kind = (uint8_t)k;
    v->src = v->self_ = -1;
    v->node = -1;
    v->sl[0] = v->sl[1] = v->sl[2] = -1;
    return T->nvals++;
}

static int tv_push_item(tracer *T, int32_t c, int32_t item, PyObject *key)
{
    tv *v = &T->vals[c];
    int32_t cap = v->cap;
    int32_t *it = grow(v->items, &cap, v->n + 1, sizeof(int32_t));
    if (!it)
        return PyErr_NoMemory(), -1;
    v->items = it;
    if (v->kind == V_DICT) {
        int32_t kc = v->cap;
        PyObject **ks = grow(v->keys, &kc, v->n + 1, sizeof(PyObject *));
        if (!ks)
            return PyErr_NoMemory(), -1;
        v->keys = ks;
        ks[v->n] = key;
    }
    v->cap = cap;
    v->items[v->n++] = item;
    return 0;
}

int32_t tv_tuple(tracer *T, const int32_t *items, int n)
{
    int32_t t = tv_new(T, V_TUPLE);
    for (int i = 0; t >= 0 && i < n; i++)
        if (tv_push_item(T, t, items[i], NULL))
            return -1;
    return t;
}

int32_t tv_tensor(tracer *T, int32_t node)
{
    int32_t v = tv_new(T, V_TENSOR);
    if (v >= 0)
        T->vals[v].node = node;
    return v;
}

int32_t tr_node_add(tracer *T, const smelt_node *proto)
{
    int32_t id = smelt_graph_add(T->g, proto);
    if (id < 0)
        return tr_break(T, "%s", T->g->err);
    uint8_t *nv = grow(T->viewed, &T->cviewed, T->g->n + 1, 1);
    if (!nv)
        return PyErr_NoMemory(), -1;
    T->viewed = nv;
    T->viewed[id] = 0;
    if (smelt_op_kind_of((smelt_op)T->g->nodes[id].op) == SMELT_KIND_VIEW)
        T->viewed[T->g->nodes[id].src[0]] = 1;
    return id;
}

static int32_t src_new(tracer *T, tr_src_kind k, int32_t parent, Py_ssize_t index, PyObject *key)
{
    tr_result *r = T->r;
    for (int32_t i = 0; i < r->nsrcs; i++) {   /* shared prefixes: one source per path */
        const tr_src *s = &r->srcs[i];
        if (s->kind == k && s->parent == parent && s->index == index &&
            (s->key == key || (s->key && key && PyObject_RichCompareBool(s->key, key, Py_EQ) == 1)))
            return i;
    }
    tr_src *ns = grow(r->srcs, &T->csrcs, r->nsrcs + 1, sizeof(tr_src));
    if (!ns)
        return PyErr_NoMemory(), -1;
    r->srcs = ns;
    if (key && tr_keep(T, key))
        return -1;
    r->srcs[r->nsrcs] = (tr_src){ .kind = (uint8_t)k, .parent = parent, .index = index, .key = key };
    return r->nsrcs++;
}

static int add_guard(tracer *T, tr_guard_kind k, int32_t src, PyObject *obj, Py_ssize_t n)
{
    tr_result *r = T->r;
    if (src < 0)
        return 0;
    for (int32_t i = 0; i < r->nguards; i++)
        if (r->guards[i].kind == k && r->guards[i].src == src)
            return 0;
    tr_guard *ng = grow(r->guards, &T->cguards, r->nguards + 1, sizeof(tr_guard));
    if (!ng)
        return PyErr_NoMemory(), -1;
    r->guards = ng;
    Py_XINCREF(obj);
    r->guards[r->nguards++] = (tr_guard){ .kind = (uint8_t)k, .src = src, .obj = obj, .n = n };
    return 0;
}

/* ---------- values from objects ---------- */

static int is_trusted_module(PyObject *o)
{
    if (!PyModule_Check(o))
        return 0;
    const char *n = PyModule_GetName(o);
    if (!n) {
        PyErr_Clear();
        return 0;
    }
    return !strncmp(n, "torch", 5) || !strcmp(n, "math") || !strcmp(n, "operator") ||
           !strcmp(n, "builtins");
}

static int32_t tensor_input(tracer *T, PyObject *t, int32_t src)
{
    PyObject *key = PyLong_FromVoidPtr(t);
    if (!key)
        return -1;
    PyObject *have = PyDict_GetItemWithError(T->tensor_of, key);
    if (have) {
        Py_DECREF(key);
        return (int32_t)PyLong_AsLong(have);
    }
    if (src < 0) {
        Py_DECREF(key);
        return tr_break(T, "a tensor without a source (created outside the traced code)");
    }
    int32_t v = -1;
    PyObject *dt = PyObject_GetAttrString(t, "dtype"), *shape = PyObject_GetAttrString(t, "shape");
    PyObject *stride = PyObject_CallMethod(t, "stride", NULL);
    PyObject *dev = PyObject_GetAttrString(t, "is_cpu");
    smelt_node p = { 0 };
    if (!dt || !shape || !stride || !dev)
        goto out;
    if (dev != Py_True) {
        tr_break(T, "tensor input on a non-CPU device");
        goto out;
    }
    int sd = ops_dtype_of(dt);
    if (sd < 0) {
        PyErr_Clear();
        tr_break(T, "tensor dtype %R is not supported", dt);
        goto out;
    }
    Py_ssize_t nd = PyTuple_Size(shape);
    if (nd > SMELT_MAX_DIMS) {
        tr_break(T, "tensor with %zd dims", nd);
        goto out;
    }
    for (Py_ssize_t d = 0; d < nd; d++) {
        p.shape[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
        p.stride[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride, d));
    }
    int32_t node = smelt_graph_input(T->g, (smelt_dtype)sd, (int)nd, p.shape, p.stride);
    if (node < 0) {
        tr_break(T, "%s", T->g->err);
        goto out;
    }
    uint8_t *nv = grow(T->viewed, &T->cviewed, T->g->n + 1, 1);
    int32_t *ni = grow(T->r->input_src, &T->cinputs, T->r->ninputs + 1, sizeof(int32_t));
    if (!nv || !ni) {
        PyErr_NoMemory();
        goto out;
    }
    T->viewed = nv;
    T->viewed[node] = 0;
    T->r->input_src = ni;
    T->r->input_src[T->r->ninputs++] = src;
    v = tv_tensor(T, node);
    PyObject *vid = PyLong_FromLong(v);
    if (v < 0 || !vid || PyDict_SetItem(T->tensor_of, key, vid) || tr_keep(T, t) ||
        add_guard(T, TG_TENSOR, src, t, 0))
        v = -1;
    Py_XDECREF(vid);
out:
    Py_DECREF(key);
    Py_XDECREF(dt);
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    Py_XDECREF(dev);
    return v;
}

/* Wraps object o fetched from src (-1: computed/trusted). Tensors become
 * graph inputs; tuples and lists become containers of wrapped items (their
 * length guarded). */
int32_t tv_obj(tracer *T, PyObject *o, int32_t src)
{
    if (ops_is_tensor(o))
        return tensor_input(T, o, src);
    if ((PyTuple_CheckExact(o) || PyList_CheckExact(o)) && PySequence_Size(o) <= 256) {
        int isl = PyList_CheckExact(o);
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        if (add_guard(T, TG_TYPE, src, (PyObject *)Py_TYPE(o), 0) || add_guard(T, TG_LEN, src, NULL, n))
            return -1;
        int32_t c = tv_new(T, isl ? V_LIST : V_TUPLE);
        for (Py_ssize_t i = 0; c >= 0 && i < n; i++) {
            int32_t s = src >= 0 ? src_new(T, SRC_ITEM, src, i, NULL) : -1;
            int32_t it = (src >= 0 && s < 0) ? -1 : tv_obj(T, PySequence_Fast_GET_ITEM(o, i), s);
            if (it < 0 || tv_push_item(T, c, it, NULL))
                return -1;
        }
        if (c >= 0)
            T->vals[c].src = src;
        return c;
    }
    if (tr_keep(T, o))
        return -1;
    int32_t v = tv_new(T, V_OBJ);
    if (v >= 0) {
        T->vals[v].obj = o;
        T->vals[v].src = src;
    }
    return v;
}

static int is_plain_const(PyObject *o)
{
    return o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) ||
           PyUnicode_CheckExact(o) || o == Py_Ellipsis;
}

/* The concrete object of V_OBJ v; records the guard that makes using its
 * value sound: equality for plain constants, identity otherwise (unless it
 * came from a trusted module such as torch). */
PyObject *tr_const(tracer *T, int32_t v)
{
    tv *x = &T->vals[v];
    if (x->kind != V_OBJ) {
        tr_break(T, "expected a constant, got a %s", x->kind == V_TENSOR ? "tensor" : "container");
        return NULL;
    }
    if (x->src >= 0 && add_guard(T, is_plain_const(x->obj) ? TG_EQ : TG_ID, x->src, x->obj, 0))
        return NULL;
    return x->obj;
}

int tr_int(tracer *T, int32_t v, int64_t *out)
{
    PyObject *o = tr_const(T, v);
    if (!o)
        return -1;
    if (!PyLong_Check(o))
        return tr_break(T, "expected an int, got %s", Py_TYPE(o)->tp_name);
    *out = PyLong_AsLongLong(o);
    return PyErr_Occurred() ? -1 : 0;
}

/* ---------- frames ---------- */

typedef struct tframe {
    PyObject *code, *func, *globals, *builtins, *consts, *names, *bytes;
    int32_t func_src;
    int trusted;           /* torch-internal code: its globals are not guarded */
    int is_top;            /* the traced function's own frame */
    int32_t *locals;
    int nlocals;
    int32_t *stack;
    int sp, cap;
    PyObject *kwnames;
} tframe;

static int push(tframe *f, int32_t v)
{
    if (v < 0)
        return -1;
    if (f->sp == f->cap)
        return -1;
    f->stack[f->sp++] = v;
    return 0;
}

static int where(tframe *f, int off, char *buf, size_t n)
{
    PyCodeObject *co = (PyCodeObject *)f->code;
    int line = PyCode_Addr2Line(co, off * 2);
    const char *file = PyUnicode_AsUTF8(co->co_filename);
    if (!file) {
        PyErr_Clear();
        file = "?";
    }
    return snprintf(buf, n, "%s:%d", file, line);
}

static int32_t run_frame(tracer *T, tframe *f);

static int code_trusted(PyObject *code)
{
    PyObject *fn = ((PyCodeObject *)code)->co_filename;
    const char *s = PyUnicode_AsUTF8(fn);
    if (!s) {
        PyErr_Clear();
        return 0;
    }
    return strstr(s, "/torch/") != NULL;
}

/* Binds call arguments to fn's parameters into a new frame's locals. */
static int bind_args(tracer *T, tframe *f, PyObject *fn, const call_args *a)
{
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(fn);
    int nargs = co->co_argcount, nkwonly = co->co_kwonlyargcount;
    int has_var = !!(co->co_flags & CO_VARARGS), has_kw = !!(co->co_flags & CO_VARKEYWORDS);
    PyObject *varnames = PyObject_GetAttrString((PyObject *)co, "co_varnames");
    if (!varnames)
        return -1;
    int npos = a->npos < nargs ? a->npos : nargs;
    for (int i = 0; i < npos; i++)
        f->locals[i] = a->pos[i];
    if (a->npos > nargs && !has_var) {
        Py_DECREF(varnames);
        return tr_break(T, "too many positional arguments for %U", co->co_name);
    }
    if (has_var) {
        int32_t t = tv_tuple(T, a->pos + npos, a->npos - npos);
        f->locals[nargs + nkwonly] = t;
    }
    int32_t kwd = has_kw ? tv_new(T, V_DICT) : -1;
    for (int k = 0; k < a->nkw; k++) {
        int slot = -1;
        for (int i = 0; i < nargs + nkwonly; i++)
            if (PyUnicode_Compare(PyTuple_GET_ITEM(varnames, i), a->kwn[k]) == 0)
                slot = i;
        if (slot >= 0 && slot >= co->co_posonlyargcount)
            f->locals[slot] = a->kwv[k];
        else if (kwd >= 0)
            tv_push_item(T, kwd, a->kwv[k], a->kwn[k]);
        else {
            Py_DECREF(varnames);
            return tr_break(T, "unexpected keyword argument %U for %U", a->kwn[k], co->co_name);
        }
    }
    if (has_kw)
        f->locals[nargs + nkwonly + has_var] = kwd;
    PyObject *defs = PyFunction_GET_DEFAULTS(fn), *kwdefs = PyFunction_GET_KW_DEFAULTS(fn);
    Py_ssize_t nd = defs ? PyTuple_GET_SIZE(defs) : 0;
    for (int i = 0; i < nargs + nkwonly; i++) {
        if (f->locals[i] >= 0)
            continue;
        PyObject *d = NULL;
        if (i < nargs && i >= nargs - nd)
            d = PyTuple_GET_ITEM(defs, i - (nargs - nd));
        else if (i >= nargs && kwdefs)
            d = PyDict_GetItem(kwdefs, PyTuple_GET_ITEM(varnames, i));
        if (!d) {
            Py_DECREF(varnames);
            return tr_break(T, "missing argument %U of %U", PyTuple_GET_ITEM(varnames, i), co->co_name);
        }
        f->locals[i] = tv_obj(T, d, -1);   /* defaults: part of the function, guarded by its identity */
    }
    Py_DECREF(varnames);
    return 0;
}

/* Inlines a call of Python function fn (its identity is guarded where it
 * has a source). */
static int32_t inline_call(tracer *T, PyObject *fn, int32_t fn_src, const call_args *a)
{
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(fn);
    if (T->depth >= MAX_DEPTH)
        return tr_break(T, "call depth over %d", MAX_DEPTH);
    if (co->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR))
        return tr_break(T, "generator/coroutine %U", co->co_name);
    int nl = co->co_nlocalsplus;
    int cap = co->co_stacksize + 8;
    tframe f = { .code = (PyObject *)co, .func = fn, .func_src = fn_src,
                 .globals = PyFunction_GET_GLOBALS(fn), .consts = co->co_consts, .names = co->co_names };
    f.trusted = code_trusted((PyObject *)co);
    f.builtins = PyEval_GetBuiltins();
    f.locals = PyMem_Malloc(sizeof(int32_t) * (size_t)(nl + 1));
    f.stack = PyMem_Malloc(sizeof(int32_t) * (size_t)cap);
    f.cap = cap;
    f.bytes = PyObject_GetAttrString((PyObject *)co, "co_code");
    int32_t r = -1;
    if (!f.locals || !f.stack || !f.bytes)
        goto out;
    for (int i = 0; i < nl; i++)
        f.locals[i] = -1;
    if (bind_args(T, &f, fn, a))
        goto out;
    T->depth++;
    r = run_frame(T, &f);
    T->depth--;
out:
    PyMem_Free(f.locals);
    PyMem_Free(f.stack);
    Py_XDECREF(f.bytes);
    return r;
}

/* ---------- calls ---------- */

static PyObject *module_type, *hook_names;   /* torch.nn.Module, hook dict names */

static int ensure_nn(void)
{
    if (module_type)
        return 0;
    PyObject *nn = PyImport_ImportModule("torch.nn");
    module_type = nn ? PyObject_GetAttrString(nn, "Module") : NULL;
    Py_XDECREF(nn);
    hook_names = Py_BuildValue("(ssss)", "_forward_hooks", "_forward_pre_hooks",
                               "_backward_hooks", "_backward_pre_hooks");
    return module_type && hook_names ? 0 : -1;
}

static int is_module(PyObject *o)
{
    if (ensure_nn()) {
        PyErr_Clear();
        return 0;
    }
    return PyObject_IsInstance(o, module_type) == 1;
}

/* Registered hooks would change what the module computes: a module with
 * hooks is not traced; empty hook dicts are guarded to stay empty. */
static int module_hooks_empty(tracer *T, int32_t mv)
{
    if (ensure_nn())
        return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(hook_names); i++) {
        PyObject *name = PyTuple_GET_ITEM(hook_names, i);
        PyObject *d = PyObject_GetAttr(T->vals[mv].obj, name);
        if (!d) {
            PyErr_Clear();
            continue;
        }
        int empty = d == Py_None || (PyDict_Check(d) && PyDict_GET_SIZE(d) == 0);
        Py_DECREF(d);
        if (!empty)
            return tr_break(T, "module %s has hooks registered", Py_TYPE(T->vals[mv].obj)->tp_name);
        int32_t src = T->vals[mv].src;
        int32_t s = src >= 0 ? src_new(T, SRC_ATTR, src, 0, name) : -1;
        if (add_guard(T, TG_EMPTY, s, NULL, 0))
            return -1;
    }
    return 0;
}

static int32_t call_builtin(tracer *T, PyObject *fn, const call_args *a);

static int32_t call_module(tracer *T, int32_t mv, const call_args *a)
{
    tv *m = &T->vals[mv];
    if (add_guard(T, TG_TYPE, m->src, (PyObject *)Py_TYPE(m->obj), 0) || module_hooks_empty(T, mv))
        return -1;
    PyObject *fwd = PyObject_GetAttrString((PyObject *)Py_TYPE(T->vals[mv].obj), "forward");
    if (!fwd)
        return -1;
    if (!PyFunction_Check(fwd)) {
        Py_DECREF(fwd);
        return tr_break(T, "module forward is not a Python function");
    }
    int32_t pos[64];
    if (a->npos >= 63) {
        Py_DECREF(fwd);
        return tr_break(T, "too many arguments");
    }
    pos[0] = mv;
    memcpy(pos + 1, a->pos, sizeof(int32_t) * (size_t)a->npos);
    call_args b = *a;
    b.pos = pos;
    b.npos = a->npos + 1;
    int32_t r = tr_keep(T, fwd) ? -1 : inline_call(T, fwd, -1, &b);
    Py_DECREF(fwd);
    return r;
}

/* lst.append(x) / lst.extend(seq) on a list built in the traced code. */
static int32_t list_method(tracer *T, int32_t lst, PyObject *name, const call_args *a)
{
    if (T->vals[lst].src >= 0)
        return tr_break(T, "mutating a list passed in from outside");
    if (!PyUnicode_CompareWithASCIIString(name, "append") && a->npos == 1) {
        if (tv_push_item(T, lst, a->pos[0], NULL))
            return -1;
        return tv_obj(T, Py_None, -1);
    }
    return tr_break(T, "list method %U is not supported yet", name);
}

/* Calls value fn with arguments a. */
int32_t tr_call(tracer *T, int32_t fn, const call_args *a)
{
    tv *f = &T->vals[fn];
    if (f->kind == V_BOUND) {
        int32_t pos[64];
        if (a->npos >= 63)
            return tr_break(T, "too many arguments");
        pos[0] = f->self_;
        memcpy(pos + 1, a->pos, sizeof(int32_t) * (size_t)a->npos);
        call_args b = *a;
        b.pos = pos;
        b.npos = a->npos + 1;
        if (PyUnicode_Check(f->obj) && T->vals[f->self_].kind == V_LIST)
            return list_method(T, f->self_, f->obj, a);
        if (PyUnicode_Check(f->obj))
            return ops_call_method(T, f->obj, &b);
        int32_t r = ops_call_torch(T, f->obj, &b);
        if (r != -2)
            return r;
        if (PyFunction_Check(f->obj))
            return inline_call(T, f->obj, -1, &b);
        return tr_break(T, "call of bound %s", Py_TYPE(f->obj)->tp_name);
    }
    if (f->kind != V_OBJ)
        return tr_break(T, "call of a non-callable value");
    PyObject *o = f->obj;
    int32_t r = ops_call_torch(T, o, a);
    if (r != -2)
        return r;
    if (is_module(o))
        return call_module(T, fn, a);
    if (PyFunction_Check(o)) {
        if (!tr_const(T, fn))
            return -1;
        return inline_call(T, o, T->vals[fn].src, a);
    }
    return call_builtin(T, o, a);
}

/* ---------- builtins ---------- */

static int32_t seq_of(tracer *T, int32_t v, int32_t **items, int *n);

static int32_t list_of_ints(tracer *T, int64_t start, int64_t stop, int64_t step)
{
    int32_t l = tv_new(T, V_LIST);
    for (int64_t i = start; l >= 0 && (step > 0 ? i < stop : i > stop); i += step) {
        PyObject *o = PyLong_FromLongLong(i);
        int32_t v = o ? tv_obj(T, o, -1) : -1;
        Py_XDECREF(o);
        if (v < 0 || tv_push_item(T, l, v, NULL))
            return -1;
    }
    return l;
}

static int32_t b_range(tracer *T, const call_args *a)
{
    int64_t x[3] = { 0, 0, 1 };
    if (a->npos < 1 || a->npos > 3)
        return tr_break(T, "range with %d arguments", a->npos);
    for (int i = 0; i < a->npos; i++)
        if (tr_int(T, a->pos[i], &x[a->npos == 1 ? 1 : i]))
            return -1;
    if (x[2] == 0 || (x[1] - x[0]) / x[2] > 100000)
        return tr_break(T, "range too long to unroll");
    return list_of_ints(T, x[0], x[1], x[2]);
}

static int32_t b_enumerate_zip(tracer *T, const call_args *a, int zip)
{
    int32_t *it[8];
    int n[8], len = 1 << 30;
    int k = zip ? a->npos : 1;
    if (k < 1 || k > 8 || (!zip && a->npos != 1))
        return tr_break(T, zip ? "zip of %d iterables" : "enumerate with start", k);
    for (int i = 0; i < k; i++) {
        if (seq_of(T, a->pos[i], &it[i], &n[i]))
            return -1;
        len = n[i] < len ? n[i] : len;
    }
    int32_t l = tv_new(T, V_LIST);
    for (int j = 0; l >= 0 && j < len; j++) {
        int32_t t[9];
        int m = 0;
        if (!zip) {
            PyObject *o = PyLong_FromLong(j);
            t[m++] = o ? tv_obj(T, o, -1) : -1;
            Py_XDECREF(o);
        }
        for (int i = 0; i < k; i++)
            t[m++] = it[i][j];
        int32_t tup = tv_tuple(T, t, m);
        if (tup < 0 || tv_push_item(T, l, tup, NULL))
            return -1;
    }
    return l;
}

static int32_t b_len(tracer *T, const call_args *a)
{
    if (a->npos != 1)
        return tr_break(T, "len arguments");
    tv *x = &T->vals[a->pos[0]];
    Py_ssize_t n;
    if (x->kind == V_TUPLE || x->kind == V_LIST || x->kind == V_DICT) {
        n = x->n;
    } else if (x->kind == V_TENSOR) {
        const smelt_node *nd = &T->g->nodes[x->node];
        if (!nd->ndim)
            return tr_break(T, "len() of a 0-d tensor");
        n = nd->shape[0];
    } else {
        PyObject *o = tr_const(T, a->pos[0]);
        if (!o)
            return -1;
        if (is_module(o))   /* ModuleList/Sequential length follows their structure */
            add_guard(T, TG_LEN, x->src, NULL, PyObject_Length(o));
        n = PyObject_Length(o);
        if (n < 0)
            return -1;
    }
    PyObject *o = PyLong_FromSsize_t(n);
    int32_t v = o ? tv_obj(T, o, -1) : -1;
    Py_XDECREF(o);
    return v;
}

/* Builtins callable on constants: evaluated now on the concrete values. */
static int32_t call_on_consts(tracer *T, PyObject *fn, const call_args *a)
{
    PyObject *args = PyTuple_New(a->npos), *kw = a->nkw ? PyDict_New() : NULL;
    if (!args || (a->nkw && !kw))
        goto fail;
    for (int i = 0; i < a->npos; i++) {
        PyObject *o = tr_const(T, a->pos[i]);
        if (!o)
            goto fail;
        Py_INCREF(o);
        PyTuple_SET_ITEM(args, i, o);
    }
    for (int i = 0; i < a->nkw; i++) {
        PyObject *o = tr_const(T, a->kwv[i]);
        if (!o || PyDict_SetItem(kw, a->kwn[i], o))
            goto fail;
    }
    PyObject *r = PyObject_Call(fn, args, kw);
    Py_DECREF(args);
    Py_XDECREF(kw);
    if (!r) {
        PyErr_Clear();
        return tr_break(T, "%s(...) raised at trace time", Py_TYPE(fn)->tp_name);
    }
    int32_t v = tv_obj(T, r, -1);
    Py_DECREF(r);
    return v;
fail:
    Py_XDECREF(args);
    Py_XDECREF(kw);
    return -1;
}

static int32_t b_isinstance(tracer *T, const call_args *a)
{
    if (a->npos != 2)
        return tr_break(T, "isinstance arguments");
    tv *x = &T->vals[a->pos[0]];
    PyObject *cls = tr_const(T, a->pos[1]);
    if (!cls)
        return -1;
    int r;
    if (x->kind == V_TENSOR) {
        r = PyObject_IsSubclass(ops_tensor_type(), cls);
    } else if (x->kind == V_OBJ) {
        if (add_guard(T, TG_TYPE, x->src, (PyObject *)Py_TYPE(x->obj), 0))
            return -1;
        r = PyObject_IsInstance(x->obj, cls);
    } else {
        PyObject *t = (PyObject *)(x->kind == V_LIST ? &PyList_Type : x->kind == V_DICT ? &PyDict_Type : &PyTuple_Type);
        r = PyObject_IsSubclass(t, cls);
    }
    if (r < 0)
        return -1;
    return tv_obj(T, r ? Py_True : Py_False, -1);
}

static int32_t b_container(tracer *T, const call_args *a, int list)
{
    int32_t *it;
    int n;
    if (a->npos == 0)
        return tv_new(T, list ? V_LIST : V_TUPLE);
    if (a->npos != 1 || seq_of(T, a->pos[0], &it, &n))
        return a->npos != 1 ? tr_break(T, "tuple/list arguments") : -1;
    int32_t c = tv_new(T, list ? V_LIST : V_TUPLE);
    for (int i = 0; c >= 0 && i < n; i++)
        if (tv_push_item(T, c, it[i], NULL))
            return -1;
    return c;
}

static int32_t call_builtin(tracer *T, PyObject *fn, const call_args *a)
{
    PyObject *b = T->builtins;
    if (fn == PyDict_GetItemString(b, "range"))
        return b_range(T, a);
    if (fn == PyDict_GetItemString(b, "enumerate"))
        return b_enumerate_zip(T, a, 0);
    if (fn == PyDict_GetItemString(b, "zip"))
        return b_enumerate_zip(T, a, 1);
    if (fn == PyDict_GetItemString(b, "len"))
        return b_len(T, a);
    if (fn == PyDict_GetItemString(b, "isinstance"))
        return b_isinstance(T, a);
    if (fn == PyDict_GetItemString(b, "tuple"))
        return b_container(T, a, 0);
    if (fn == PyDict_GetItemString(b, "list"))
        return b_container(T, a, 1);
    static const char *pure[] = { "int", "float", "bool", "abs", "min", "max", "str", "round",
                                  "getattr", "hasattr", "divmod", NULL };
    for (int i = 0; pure[i]; i++)
        if (fn == PyDict_GetItemString(b, pure[i])) {
            for (int k = 0; k < a->npos; k++)
                if (T->vals[a->pos[k]].kind != V_OBJ)
                    return tr_break(T, "%s() of a non-constant", pure[i]);
            return call_on_consts(T, fn, a);
        }
    PyObject *self = PyCFunction_Check(fn) ? PyCFunction_GET_SELF(fn) : NULL;
    if (self && PyModule_Check(self)) {   /* math.*, operator.* on constants */
        const char *mn = PyModule_GetName(self);
        if (mn && (!strcmp(mn, "math") || !strcmp(mn, "_operator") || !strcmp(mn, "operator")))
            return call_on_consts(T, fn, a);
        PyErr_Clear();
    }
    return tr_break(T, "call of %s is not supported", Py_TYPE(fn)->tp_name);
}

/* Items of a sequence-like value (tuple, list, dict keys, ModuleList). */
static int32_t seq_of(tracer *T, int32_t v, int32_t **items, int *n)
{
    tv *x = &T->vals[v];
    if (x->kind == V_TUPLE || x->kind == V_LIST) {
        *items = x->items;
        *n = x->n;
        return 0;
    }
    if (x->kind == V_DICT) {
        int32_t l = tv_new(T, V_LIST);
        for (int i = 0; l >= 0 && i < T->vals[v].n; i++) {
            int32_t k = tv_obj(T, T->vals[v].keys[i], -1);
            if (k < 0 || tv_push_item(T, l, k, NULL))
                return -1;
        }
        if (l < 0)
            return -1;
        *items = T->vals[l].items;
        *n = T->vals[l].n;
        return 0;
    }
    if (x->kind != V_OBJ)
        return tr_break(T, "iteration over a tensor");
    PyObject *o = x->obj;
    int32_t src = x->src;
    if (is_module(o)) {   /* Sequential, ModuleList, ModuleDict: their children */
        PyObject *mods = PyObject_GetAttrString(o, "_modules");
        if (!mods || add_guard(T, TG_TYPE, src, (PyObject *)Py_TYPE(o), 0)) {
            Py_XDECREF(mods);
            return -1;
        }
        PyObject *cls_name = PyObject_GetAttrString((PyObject *)Py_TYPE(o), "__name__");
        int is_dict = cls_name && PyUnicode_CompareWithASCIIString(cls_name, "ModuleDict") == 0;
        Py_XDECREF(cls_name);
        int32_t msrc = src >= 0 ? src_new(T, SRC_ATTR, src, 0, PyUnicode_InternFromString("_modules")) : -1;
        add_guard(T, TG_LEN, msrc, NULL, PyDict_GET_SIZE(mods));
        int32_t l = tv_new(T, V_LIST);
        Py_ssize_t pos = 0;
        PyObject *k, *m;
        while (l >= 0 && PyDict_Next(mods, &pos, &k, &m)) {
            int32_t it = is_dict ? tv_obj(T, k, -1) : tv_obj(T, m, msrc >= 0 ? src_new(T, SRC_DICT, msrc, 0, k) : -1);
            if (it < 0 || tv_push_item(T, l, it, NULL)) {
                Py_DECREF(mods);
                return -1;
            }
        }
        Py_DECREF(mods);
        if (l < 0)
            return -1;
        *items = T->vals[l].items;
        *n = T->vals[l].n;
        return 0;
    }
    if (!tr_const(T, v))
        return -1;
    PyObject *seq = PySequence_Fast(o, "not iterable");
    if (!seq) {
        PyErr_Clear();
        return tr_break(T, "iteration over %s", Py_TYPE(o)->tp_name);
    }
    int32_t l = tv_new(T, V_LIST);
    for (Py_ssize_t i = 0; l >= 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
        int32_t it = tv_obj(T, PySequence_Fast_GET_ITEM(seq, i), -1);
        if (it < 0 || tv_push_item(T, l, it, NULL)) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    if (l < 0)
        return -1;
    *items = T->vals[l].items;
    *n = T->vals[l].n;
    return 0;
}

/* ---------- attributes ---------- */

static int32_t module_attr(tracer *T, int32_t mv, PyObject *name)
{
    tv *m = &T->vals[mv];
    PyObject *o = m->obj;
    int32_t src = m->src;
    if (add_guard(T, TG_TYPE, src, (PyObject *)Py_TYPE(o), 0))
        return -1;
    static const char *stores[] = { "_parameters", "_buffers", "_modules" };
    PyObject *dict = PyObject_GenericGetDict(o, NULL);
    if (!dict)
        return -1;
    PyObject *inst = PyDict_GetItemWithError(dict, name);
    if (inst) {
        Py_DECREF(dict);
        return tv_obj(T, inst, src >= 0 ? src_new(T, SRC_ATTR, src, 0, name) : -1);
    }
    PyObject *cls_attr = _PyType_Lookup(Py_TYPE(o), name);
    if (cls_attr && PyFunction_Check(cls_attr)) {
        Py_DECREF(dict);
        int32_t b = tv_new(T, V_BOUND);
        if (b >= 0 && !tr_keep(T, cls_attr)) {
            T->vals[b].obj = cls_attr;
            T->vals[b].self_ = mv;
        }
        return b;
    }
    for (int i = 0; i < 3; i++) {
        PyObject *store = PyDict_GetItemString(dict, stores[i]);
        PyObject *v = store ? PyDict_GetItemWithError(store, name) : NULL;
        if (!v)
            continue;
        int32_t ssrc = src >= 0 ? src_new(T, SRC_ATTR, src, 0, PyUnicode_InternFromString(stores[i])) : -1;
        Py_DECREF(dict);
        return tv_obj(T, v, ssrc >= 0 ? src_new(T, SRC_DICT, ssrc, 0, name) : -1);
    }
    Py_DECREF(dict);
    if (cls_attr && !PyObject_HasAttrString(cls_attr, "__get__")) {
        return tv_obj(T, cls_attr, src >= 0 ? src_new(T, SRC_ATTR, src, 0, name) : -1);
    }
    return tr_break(T, "attribute %U of module %s (property or missing)", name, Py_TYPE(o)->tp_name);
}

static int32_t load_attr(tracer *T, int32_t v, PyObject *name, int method)
{
    tv *x = &T->vals[v];
    if (x->kind == V_TENSOR) {
        int32_t r = ops_tensor_attr(T, v, name);
        if (r != -2)
            return r;
        int32_t b = tv_new(T, V_BOUND);   /* a method: resolved at the call */
        if (b >= 0) {
            T->vals[b].obj = name;
            T->vals[b].self_ = v;
            if (tr_keep(T, name))
                return -1;
        }
        (void)method;
        return b;
    }
    if (x->kind == V_LIST) {   /* a list method, resolved at the call */
        int32_t b = tv_new(T, V_BOUND);
        if (b >= 0 && !tr_keep(T, name)) {
            T->vals[b].obj = name;
            T->vals[b].self_ = v;
        }
        return b;
    }
    if (x->kind != V_OBJ)
        return tr_break(T, "attribute %U of a container", name);
    if (is_module(x->obj))
        return module_attr(T, v, name);
    PyObject *o = x->obj;
    int32_t src = x->src;
    if (PyModule_Check(o)) {
        if (!is_trusted_module(o) && add_guard(T, TG_ID, src, o, 0))
            return -1;
    } else if (add_guard(T, TG_TYPE, src, (PyObject *)Py_TYPE(o), 0)) {
        return -1;
    }
    PyObject *a = PyObject_GetAttr(o, name);
    if (!a) {
        PyErr_Clear();
        return tr_break(T, "attribute %U of %s raised", name, Py_TYPE(o)->tp_name);
    }
    int trusted = PyModule_Check(o) && is_trusted_module(o);
    int32_t r = tv_obj(T, a, (src >= 0 && !trusted) ? src_new(T, SRC_ATTR, src, 0, name) : -1);
    Py_DECREF(a);
    return r;
}

/* ---------- the loop ---------- */

static int truth(tracer *T, int32_t v, int *out)
{
    tv *x = &T->vals[v];
    switch (x->kind) {
    case V_TENSOR: return tr_break(T, "control flow depends on tensor data");
    case V_TUPLE: case V_LIST: case V_DICT: *out = x->n > 0; return 0;
    case V_OBJ: {
        PyObject *o = tr_const(T, v);
        if (!o)
            return -1;
        int r = PyObject_IsTrue(o);
        if (r < 0)
            return -1;
        *out = r;
        return 0;
    }
    default: return tr_break(T, "truth value of an unsupported value");
    }
}

static int32_t const_binop(tracer *T, int nb, int32_t a, int32_t b)
{
    PyObject *x = tr_const(T, a), *y = x ? tr_const(T, b) : NULL;
    if (!y)
        return -1;
    PyObject *r;
    switch (nb >= NB_INPLACE ? nb - NB_INPLACE : nb) {
    case NB_ADD: r = PyNumber_Add(x, y); break;
    case NB_SUBTRACT: r = PyNumber_Subtract(x, y); break;
    case NB_MULTIPLY: r = PyNumber_Multiply(x, y); break;
    case NB_TRUE_DIVIDE: r = PyNumber_TrueDivide(x, y); break;
    case NB_FLOOR_DIVIDE: r = PyNumber_FloorDivide(x, y); break;
    case NB_REMAINDER: r = PyNumber_Remainder(x, y); break;
    case NB_POWER: r = PyNumber_Power(x, y, Py_None); break;
    case NB_AND: r = PyNumber_And(x, y); break;
    case NB_OR: r = PyNumber_Or(x, y); break;
    case NB_XOR: r = PyNumber_Xor(x, y); break;
    case NB_LSHIFT: r = PyNumber_Lshift(x, y); break;
    case NB_RSHIFT: r = PyNumber_Rshift(x, y); break;
    default: return tr_break(T, "binary op %d on constants", nb);
    }
    if (!r) {
        PyErr_Clear();
        return tr_break(T, "binary op %d on constants raised", nb);
    }
    int32_t v = tv_obj(T, r, -1);
    Py_DECREF(r);
    return v;
}

static int32_t binop(tracer *T, int nb, int32_t a, int32_t b)
{
    tv *x = &T->vals[a], *y = &T->vals[b];
    if (x->kind == V_TENSOR || y->kind == V_TENSOR) {
        if (nb >= NB_INPLACE && x->kind == V_TENSOR) {
            const smelt_node *n = &T->g->nodes[x->node];
            if (n->op == SMELT_OP_INPUT || T->viewed[x->node] ||
                smelt_op_kind_of((smelt_op)n->op) == SMELT_KIND_VIEW)
                return tr_break(T, "in-place update of an input or a viewed tensor");
        }
        return ops_binary(T, nb, a, b);
    }
    if ((x->kind == V_TUPLE || x->kind == V_LIST) && (nb == NB_ADD || nb == NB_INPLACE + NB_ADD) && y->kind == x->kind) {
        int32_t c = tv_new(T, (tv_kind)x->kind);
        for (int i = 0; c >= 0 && i < T->vals[a].n; i++)
            tv_push_item(T, c, T->vals[a].items[i], NULL);
        for (int i = 0; c >= 0 && i < T->vals[b].n; i++)
            tv_push_item(T, c, T->vals[b].items[i], NULL);
        return c;
    }
    return const_binop(T, nb, a, b);
}

static int32_t compare(tracer *T, int cmp, int32_t a, int32_t b)
{
    if (T->vals[a].kind == V_TENSOR || T->vals[b].kind == V_TENSOR)
        return ops_compare(T, cmp, a, b);
    PyObject *x = tr_const(T, a), *y = x ? tr_const(T, b) : NULL;
    if (!y)
        return -1;
    PyObject *r = PyObject_RichCompare(x, y, cmp);
    if (!r) {
        PyErr_Clear();
        return tr_break(T, "comparison of constants raised");
    }
    int32_t v = tv_obj(T, r, -1);
    Py_DECREF(r);
    return v;
}

static int32_t subscr(tracer *T, int32_t c, int32_t k)
{
    tv *x = &T->vals[c];
    if (x->kind == V_TENSOR)
        return ops_subscr(T, c, k);
    if (x->kind == V_TUPLE || x->kind == V_LIST) {
        if (T->vals[k].kind == V_SLICE) {
            int64_t s[3] = { 0, PY_SSIZE_T_MAX, 1 };
            for (int i = 0; i < 3; i++)
                if (T->vals[k].sl[i] >= 0) {
                    PyObject *o = tr_const(T, T->vals[k].sl[i]);
                    if (!o)
                        return -1;
                    if (o != Py_None)
                        s[i] = PyLong_AsLongLong(o);
                }
            Py_ssize_t start, stop, step, len;
            start = s[0];
            stop = s[1];
            step = s[2];
            len = PySlice_AdjustIndices(x->n, &start, &stop, step);
            int32_t r = tv_new(T, (tv_kind)T->vals[c].kind);
            for (Py_ssize_t i = 0; r >= 0 && i < len; i++)
                tv_push_item(T, r, T->vals[c].items[start + i * step], NULL);
            return r;
        }
        int64_t i;
        if (tr_int(T, k, &i))
            return -1;
        if (i < 0)
            i += x->n;
        if (i < 0 || i >= x->n)
            return tr_break(T, "index out of range");
        return x->items[i];
    }
    if (x->kind == V_DICT) {
        PyObject *key = tr_const(T, k);
        if (!key)
            return -1;
        for (int i = 0; i < x->n; i++)
            if (PyObject_RichCompareBool(x->keys[i], key, Py_EQ) == 1)
                return x->items[i];
        return tr_break(T, "dict key not found");
    }
    if (x->kind == V_OBJ && is_module(x->obj)) {
        int32_t *it;
        int n;
        int64_t i;
        if (seq_of(T, c, &it, &n) || tr_int(T, k, &i))
            return -1;
        if (i < 0)
            i += n;
        if (i < 0 || i >= n)
            return tr_break(T, "module index out of range");
        return it[i];
    }
    PyObject *o = tr_const(T, c), *key = o ? tr_const(T, k) : NULL;
    if (!key)
        return -1;
    PyObject *r = PyObject_GetItem(o, key);
    if (!r) {
        PyErr_Clear();
        return tr_break(T, "subscript of %s raised", Py_TYPE(o)->tp_name);
    }
    int32_t v = tv_obj(T, r, -1);
    Py_DECREF(r);
    return v;
}

static int32_t do_call(tracer *T, tframe *f, int argc)
{
    int kw = f->kwnames ? (int)PyTuple_GET_SIZE(f->kwnames) : 0;
    int base = f->sp - argc - 2;
    if (base < 0)
        return tr_break(T, "stack underflow");
    int32_t *args = &f->stack[base + 2];
    int32_t fn = f->stack[base + 1];
    int32_t pos[66];
    int npos = argc - kw;
    if (T->vals[f->stack[base]].kind != V_NULL) {   /* method form: [meth, self, args] */
        fn = f->stack[base];
        pos[0] = f->stack[base + 1];
        memcpy(pos + 1, args, sizeof(int32_t) * (size_t)npos);
        npos++;
    } else {
        memcpy(pos, args, sizeof(int32_t) * (size_t)npos);
    }
    PyObject *kwn[32];
    for (int i = 0; i < kw && i < 32; i++)
        kwn[i] = PyTuple_GET_ITEM(f->kwnames, i);
    call_args a = { .pos = pos, .npos = npos, .kwn = kwn, .kwv = args + argc - kw, .nkw = kw };
    f->kwnames = NULL;
    f->sp = base;
    return tr_call(T, fn, &a);
}

static int32_t call_ex(tracer *T, tframe *f, int has_kw)
{
    int32_t kwd = has_kw ? f->stack[--f->sp] : -1;
    int32_t args = f->stack[--f->sp];
    int32_t fn = f->stack[--f->sp];
    f->sp--;   /* the NULL */
    int32_t *items, kv[32], pos[64];
    PyObject *kn[32];
    int n;
    if (seq_of(T, args, &items, &n))
        return -1;
    if (n > 63)
        return tr_break(T, "too many arguments");
    memcpy(pos, items, sizeof(int32_t) * (size_t)n);
    int nk = 0;
    if (kwd >= 0) {
        tv *d = &T->vals[kwd];
        if (d->kind != V_DICT || d->n > 32)
            return tr_break(T, "**kwargs of a non-dict");
        for (int i = 0; i < d->n; i++) {
            kn[nk] = d->keys[i];
            kv[nk++] = d->items[i];
        }
    }
    call_args a = { .pos = pos, .npos = n, .kwn = kn, .kwv = kv, .nkw = nk };
    return tr_call(T, fn, &a);
}

static int32_t load_global(tracer *T, tframe *f, PyObject *name)
{
    PyObject *o = PyDict_GetItemWithError(f->globals, name);
    int builtin = 0;
    if (!o && !PyErr_Occurred()) {
        o = PyDict_GetItemWithError(f->builtins, name);
        builtin = 1;
    }
    if (!o)
        return PyErr_Occurred() ? -1 : tr_break(T, "name %U is not defined", name);
    int32_t src = -1;
    if (!f->trusted && !builtin && f->globals == T->globals)
        src = src_new(T, SRC_GLOBAL, -1, 0, name);
    else if (!f->trusted && builtin)
        src = -1;   /* builtins are trusted not to be rebound */
    else if (!f->trusted && f->func_src >= 0) {
        int32_t g = src_new(T, SRC_ATTR, f->func_src, 0, PyUnicode_InternFromString("__globals__"));
        src = g >= 0 ? src_new(T, SRC_DICT, g, 0, name) : -1;
    }
    return tv_obj(T, o, src);
}

static int32_t load_deref(tracer *T, tframe *f, int idx)
{
    PyCodeObject *co = (PyCodeObject *)f->code;
    int nfree = co->co_nfreevars;   /* 3.11 and 3.12 */
    int first_free = co->co_nlocalsplus - nfree;
    if (idx < first_free) {
        if (f->locals[idx] < 0)
            return tr_break(T, "cell variable read before assignment");
        return f->locals[idx];
    }
    PyObject *clo = PyFunction_GET_CLOSURE(f->func);
    PyObject *cell = clo ? PyTuple_GET_ITEM(clo, idx - first_free) : NULL;
    PyObject *o = cell ? PyCell_GET(cell) : NULL;
    if (!o)
        return tr_break(T, "empty closure cell");
    int32_t src = -1;
    if (f->is_top)
        src = src_new(T, SRC_CELL, -1, idx - first_free, NULL);   /* parent -1: the traced function */
    else if (f->func_src >= 0 && !f->trusted)
        src = src_new(T, SRC_CELL, f->func_src, idx - first_free, NULL);
    return tv_obj(T, o, src);
}

static int jump_if(tracer *T, tframe *f, int op, int *pc, int target)
{
    int32_t v = f->stack[--f->sp];
    int take;
    if (op == OP_POP_JUMP_FORWARD_IF_NONE || op == OP_POP_JUMP_FORWARD_IF_NOT_NONE ||
        op == OP_POP_JUMP_BACKWARD_IF_NONE || op == OP_POP_JUMP_BACKWARD_IF_NOT_NONE) {
        tv *x = &T->vals[v];
        int is_none = x->kind == V_OBJ && x->obj == Py_None;
        if (x->kind == V_OBJ && !tr_const(T, v))
            return -1;
        take = (op == OP_POP_JUMP_FORWARD_IF_NONE || op == OP_POP_JUMP_BACKWARD_IF_NONE) ? is_none : !is_none;
    } else {
        int t;
        if (truth(T, v, &t))
            return -1;
        take = (op == OP_POP_JUMP_FORWARD_IF_TRUE || op == OP_POP_JUMP_BACKWARD_IF_TRUE) ? t : !t;
    }
    if (take)
        *pc = target;
    return 0;
}

/* Runs frame f to its RETURN_VALUE; returns the returned value. */
static int32_t run_frame(tracer *T, tframe *f)
{
    const uint8_t *code = (const uint8_t *)PyBytes_AS_STRING(f->bytes);
    int n = (int)(PyBytes_GET_SIZE(f->bytes) / 2);
    int pc = 0, ext = 0;
    for (long steps = 0; steps < MAX_STEPS && !T->broke; steps++) {
        if (pc < 0 || pc >= n)
            return tr_break(T, "ran off the end of the bytecode");
        int raw = code[2 * pc], arg = code[2 * pc + 1] | ext;
        int op = op_of[raw], at = pc;
        pc += 1 + ncache[raw];
        ext = 0;
        int32_t r = 0;
        char loc[300];
        switch (op) {
        case OP_EXTENDED_ARG: ext = arg << 8; continue;
        case OP_CACHE: case OP_NOP: case OP_RESUME: case OP_PRECALL: case OP_MAKE_CELL:
        case OP_COPY_FREE_VARS: continue;
        case OP_PUSH_NULL: r = push(f, tv_new(T, V_NULL)); break;
        case OP_POP_TOP: f->sp--; continue;
        case OP_COPY: r = push(f, f->stack[f->sp - arg]); break;
        case OP_SWAP: {
            int32_t t = f->stack[f->sp - 1];
            f->stack[f->sp - 1] = f->stack[f->sp - arg];
            f->stack[f->sp - arg] = t;
            continue;
        }
        case OP_LOAD_CONST: r = push(f, tv_obj(T, PyTuple_GET_ITEM(f->consts, arg), -1)); break;
        case OP_LOAD_FAST:
            if (f->locals[arg] < 0)
                return tr_break(T, "local read before assignment");
            r = push(f, f->locals[arg]);
            break;
        case OP_STORE_FAST: case OP_STORE_DEREF: f->locals[arg] = f->stack[--f->sp]; continue;
        case OP_DELETE_FAST: f->locals[arg] = -1; continue;
        case OP_LOAD_DEREF: r = push(f, load_deref(T, f, arg)); break;
        case OP_LOAD_GLOBAL:
            if ((arg & 1) && push(f, tv_new(T, V_NULL)))
                return -1;
            r = push(f, load_global(T, f, PyTuple_GET_ITEM(f->names, arg >> 1)));
            break;
        case OP_LOAD_ATTR:
            f->stack[f->sp - 1] = load_attr(T, f->stack[f->sp - 1], PyTuple_GET_ITEM(f->names, arg), 0);
            r = f->stack[f->sp - 1] < 0 ? -1 : 0;
            break;
        case OP_LOAD_METHOD: {
            int32_t a = load_attr(T, f->stack[f->sp - 1], PyTuple_GET_ITEM(f->names, arg), 1);
            f->stack[f->sp - 1] = tv_new(T, V_NULL);
            r = push(f, a);
            break;
        }
        case OP_KW_NAMES: f->kwnames = PyTuple_GET_ITEM(f->consts, arg); continue;
        case OP_CALL: r = push(f, do_call(T, f, arg)); break;
        case OP_CALL_FUNCTION_EX: r = push(f, call_ex(T, f, arg & 1)); break;
        case OP_BINARY_OP: {
            int32_t b = f->stack[--f->sp], a = f->stack[--f->sp];
            r = push(f, binop(T, arg, a, b));
            break;
        }
        case OP_COMPARE_OP: {
            int32_t b = f->stack[--f->sp], a = f->stack[--f->sp];
            r = push(f, compare(T, arg, a, b));
            break;
        }
        case OP_IS_OP: {
            int32_t b = f->stack[--f->sp], a = f->stack[--f->sp];
            tv *x = &T->vals[a], *y = &T->vals[b];
            int same;
            if (x->kind == V_OBJ && y->kind == V_OBJ) {
                if (!tr_const(T, a) || !tr_const(T, b))
                    return -1;
                same = x->obj == y->obj;
            } else {
                same = a == b;
                if (x->kind == V_OBJ || y->kind == V_OBJ)
                    same = 0;   /* a tensor/container is never a constant */
            }
            r = push(f, tv_obj(T, (same ^ arg) ? Py_True : Py_False, -1));
            break;
        }
        case OP_CONTAINS_OP: {
            int32_t b = f->stack[--f->sp], a = f->stack[--f->sp];
            int32_t *it;
            int cnt, found = 0;
            PyObject *key = tr_const(T, a);
            if (!key)
                return -1;
            if (T->vals[b].kind == V_DICT) {
                for (int i = 0; i < T->vals[b].n; i++)
                    found |= PyObject_RichCompareBool(T->vals[b].keys[i], key, Py_EQ) == 1;
            } else {
                if (seq_of(T, b, &it, &cnt))
                    return -1;
                for (int i = 0; i < cnt; i++)
                    if (T->vals[it[i]].kind == V_OBJ)
                        found |= PyObject_RichCompareBool(T->vals[it[i]].obj, key, Py_EQ) == 1;
            }
            r = push(f, tv_obj(T, (found ^ arg) ? Py_True : Py_False, -1));
            break;
        }
        case OP_UNARY_NEGATIVE: case OP_UNARY_POSITIVE: case OP_UNARY_INVERT: case OP_UNARY_NOT: {
            int32_t a = f->stack[--f->sp];
            if (T->vals[a].kind == V_TENSOR) {
                if (op == OP_UNARY_POSITIVE) {
                    r = push(f, a);
                    break;
                }
                if (op == OP_UNARY_NOT)
                    return tr_break(T, "truth value of a tensor");
                r = push(f, ops_unary(T, op == OP_UNARY_NEGATIVE ? SMELT_OP_NEG : SMELT_OP_BITWISE_NOT, a));
                break;
            }
            if (op == OP_UNARY_NOT) {
                int t;
                if (truth(T, a, &t))
                    return -1;
                r = push(f, tv_obj(T, t ? Py_False : Py_True, -1));
                break;
            }
            PyObject *o = tr_const(T, a);
            if (!o)
                return -1;
            PyObject *res = op == OP_UNARY_NEGATIVE ? PyNumber_Negative(o) : op == OP_UNARY_INVERT ? PyNumber_Invert(o) : PyNumber_Positive(o);
            if (!res) {
                PyErr_Clear();
                return tr_break(T, "unary op on a constant raised");
            }
            r = push(f, tv_obj(T, res, -1));
            Py_DECREF(res);
            break;
        }
        case OP_BINARY_SUBSCR: {
            int32_t k = f->stack[--f->sp], c = f->stack[--f->sp];
            r = push(f, subscr(T, c, k));
            break;
        }
        case OP_BUILD_TUPLE: case OP_BUILD_LIST: {
            int32_t c = tv_tuple(T, &f->stack[f->sp - arg], arg);
            if (c >= 0 && op == OP_BUILD_LIST)
                T->vals[c].kind = V_LIST;
            f->sp -= arg;
            r = push(f, c);
            break;
        }
        case OP_LIST_TO_TUPLE: {
            int32_t l = f->stack[f->sp - 1];
            int32_t t = tv_tuple(T, T->vals[l].items, T->vals[l].n);
            f->stack[f->sp - 1] = t;
            r = t < 0 ? -1 : 0;
            break;
        }
        case OP_BUILD_MAP: case OP_BUILD_CONST_KEY_MAP: {
            int32_t d = tv_new(T, V_DICT);
            int nk = arg;
            if (op == OP_BUILD_CONST_KEY_MAP) {
                int32_t keys = f->stack[--f->sp];   /* a constant tuple, wrapped as V_TUPLE */
                if (T->vals[keys].kind != V_TUPLE || T->vals[keys].n != nk)
                    return tr_break(T, "BUILD_CONST_KEY_MAP keys");
                for (int i = 0; d >= 0 && i < nk; i++) {
                    PyObject *key = tr_const(T, T->vals[keys].items[i]);
                    if (!key || tv_push_item(T, d, f->stack[f->sp - nk + i], key))
                        return -1;
                }
                f->sp -= nk;
            } else {
                for (int i = 0; d >= 0 && i < nk; i++) {
                    PyObject *key = tr_const(T, f->stack[f->sp - 2 * nk + 2 * i]);
                    if (!key || tv_push_item(T, d, f->stack[f->sp - 2 * nk + 2 * i + 1], key))
                        return -1;
                }
                f->sp -= 2 * nk;
            }
            r = push(f, d);
            break;
        }
        case OP_DICT_MERGE: case OP_DICT_UPDATE: {
            int32_t src = f->stack[--f->sp], d = f->stack[f->sp - arg];
            if (T->vals[src].kind != V_DICT || T->vals[d].kind != V_DICT)
                return tr_break(T, "dict merge of a non-dict");
            for (int i = 0; i < T->vals[src].n; i++)
                if (tv_push_item(T, d, T->vals[src].items[i], T->vals[src].keys[i]))
                    return -1;
            continue;
        }
        case OP_MAP_ADD: {
            int32_t v = f->stack[--f->sp], k = f->stack[--f->sp];
            PyObject *key = tr_const(T, k);
            if (!key || tv_push_item(T, f->stack[f->sp - arg], v, key))
                return -1;
            continue;
        }
        case OP_LIST_APPEND: r = tv_push_item(T, f->stack[f->sp - 1 - arg], f->stack[f->sp - 1], NULL); f->sp--; break;
        case OP_LIST_EXTEND: {
            int32_t s = f->stack[--f->sp], *it;
            int cnt;
            if (seq_of(T, s, &it, &cnt))
                return -1;
            int32_t l = f->stack[f->sp - arg];
            for (int i = 0; i < cnt; i++)
                if (tv_push_item(T, l, it[i], NULL))
                    return -1;
            continue;
        }
        case OP_BUILD_SLICE: {
            int32_t s = tv_new(T, V_SLICE);
            if (s < 0)
                return -1;
            for (int i = arg - 1; i >= 0; i--) {
                int32_t v = f->stack[--f->sp];
                T->vals[s].sl[i] = (T->vals[v].kind == V_OBJ && T->vals[v].obj == Py_None) ? -1 : v;
            }
            r = push(f, s);
            break;
        }
        case OP_UNPACK_SEQUENCE: {
            int32_t s = f->stack[--f->sp], *it;
            int cnt;
            if (seq_of(T, s, &it, &cnt))
                return -1;
            if (cnt != arg)
                return tr_break(T, "unpacking %d values into %d", cnt, arg);
            for (int i = cnt - 1; i >= 0; i--)
                if (push(f, it[i]))
                    return -1;
            continue;
        }
        case OP_GET_ITER: {
            int32_t s = f->stack[f->sp - 1], *it;
            int cnt;
            if (seq_of(T, s, &it, &cnt))
                return -1;
            int32_t l = tv_tuple(T, it, cnt), i = tv_new(T, V_ITER);
            if (l < 0 || i < 0)
                return -1;
            T->vals[i].self_ = l;
            f->stack[f->sp - 1] = i;
            continue;
        }
        case OP_FOR_ITER: {
            tv *i = &T->vals[f->stack[f->sp - 1]];
            if (i->kind != V_ITER)
                return tr_break(T, "FOR_ITER over a non-iterator");
            if (i->pos >= T->vals[i->self_].n) {
                f->sp--;
                pc += arg;
                continue;
            }
            r = push(f, T->vals[i->self_].items[i->pos++]);
            break;
        }
        case OP_JUMP_FORWARD: pc += arg; continue;
        case OP_JUMP_BACKWARD: case OP_JUMP_BACKWARD_NO_INTERRUPT: pc -= arg; continue;
        case OP_POP_JUMP_FORWARD_IF_FALSE: case OP_POP_JUMP_FORWARD_IF_TRUE:
        case OP_POP_JUMP_FORWARD_IF_NONE: case OP_POP_JUMP_FORWARD_IF_NOT_NONE:
            r = jump_if(T, f, op, &pc, pc + arg);
            break;
        case OP_POP_JUMP_BACKWARD_IF_FALSE: case OP_POP_JUMP_BACKWARD_IF_TRUE:
        case OP_POP_JUMP_BACKWARD_IF_NONE: case OP_POP_JUMP_BACKWARD_IF_NOT_NONE:
            r = jump_if(T, f, op, &pc, pc - arg);
            break;
        case OP_JUMP_IF_FALSE_OR_POP: case OP_JUMP_IF_TRUE_OR_POP: {
            int t;
            if (truth(T, f->stack[f->sp - 1], &t))
                return -1;
            if (t == (op == OP_JUMP_IF_TRUE_OR_POP))
                pc += arg;
            else
                f->sp--;
            continue;
        }
        case OP_FORMAT_VALUE: {
            int32_t spec = (arg & 4) ? f->stack[--f->sp] : -1;
            int32_t v = f->stack[--f->sp];
            PyObject *o = tr_const(T, v), *s = spec >= 0 ? tr_const(T, spec) : NULL;
            if (!o || (spec >= 0 && !s))
                return -1;
            PyObject *conv = (arg & 3) == 1 ? PyObject_Str(o) : (arg & 3) == 2 ? PyObject_Repr(o) : (arg & 3) == 3 ? PyObject_ASCII(o) : (Py_INCREF(o), o);
            PyObject *out = conv ? PyObject_Format(conv, s) : NULL;
            Py_XDECREF(conv);
            if (!out)
                return -1;
            r = push(f, tv_obj(T, out, -1));
            Py_DECREF(out);
            break;
        }
        case OP_BUILD_STRING: {
            PyObject *parts = PyTuple_New(arg), *empty = PyUnicode_FromString("");
            for (int i = 0; parts && i < arg; i++) {
                PyObject *o = tr_const(T, f->stack[f->sp - arg + i]);
                if (!o)
                    return -1;
                Py_INCREF(o);
                PyTuple_SET_ITEM(parts, i, o);
            }
            PyObject *s = parts && empty ? PyUnicode_Join(empty, parts) : NULL;
            Py_XDECREF(parts);
            Py_XDECREF(empty);
            if (!s)
                return -1;
            f->sp -= arg;
            r = push(f, tv_obj(T, s, -1));
            Py_DECREF(s);
            break;
        }
        case OP_GET_LEN: {
            call_args a = { .pos = &f->stack[f->sp - 1], .npos = 1 };
            r = push(f, b_len(T, &a));
            break;
        }
        case OP_RETURN_VALUE: return f->stack[--f->sp];
        default:
            where(f, at, loc, sizeof loc);
            return tr_break(T, "bytecode %s is not supported yet at %s",
                            raw < 256 && op != OP_UNKNOWN ? op_names[op] : "(unknown)", loc);
        }
        if (r < 0) {
            if (!PyErr_Occurred() && T->broke && !strstr(T->r->reason, " at ")) {
                size_t len = strlen(T->r->reason);
                where(f, at, loc, sizeof loc);
                snprintf(T->r->reason + len, sizeof T->r->reason - len, " at %s", loc);
            }
            return -1;
        }
    }
    return tr_break(T, "trace too long");
}

/* ---------- result ---------- */

static int32_t out_new(tracer *T, tr_out_kind k)
{
    tr_out *no = grow(T->r->outs, &T->couts, T->r->nouts + 1, sizeof(tr_out));
    if (!no)
        return PyErr_NoMemory(), -1;
    T->r->outs = no;
    no[T->r->nouts] = (tr_out){ .kind = (uint8_t)k, .index = -1, .first = -1 };
    return T->r->nouts++;
}

/* Output plan for value v; containers get contiguous child slots. */
static int build_out(tracer *T, int32_t v, int32_t slot)
{
    tv *x = &T->vals[v];
    tr_out *o = &T->r->outs[slot];
    switch (x->kind) {
    case V_TENSOR:
        o->kind = TO_TENSOR;
        o->index = T->g->nout;
        return smelt_graph_output(T->g, x->node) ? tr_break(T, "%s", T->g->err) : 0;
    case V_OBJ: {
        PyObject *c = tr_const(T, v);
        if (!c)
            return -1;
        Py_INCREF(c);
        T->r->outs[slot].kind = TO_CONST;
        T->r->outs[slot].obj = c;
        return 0;
    }
    case V_TUPLE: case V_LIST: case V_DICT: {
        int n = x->n;
        int32_t first = T->r->nouts;
        for (int i = 0; i < n; i++)
            if (out_new(T, TO_CONST) < 0)
                return -1;
        o = &T->r->outs[slot];
        o->kind = x->kind == V_TUPLE ? TO_TUPLE : x->kind == V_LIST ? TO_LIST : TO_DICT;
        o->first = first;
        o->n = n;
        if (x->kind == V_TUPLE && x->obj)
            o->obj = Py_NewRef(x->obj);
        if (x->kind == V_DICT) {
            PyObject *keys = PyTuple_New(n);
            for (int i = 0; keys && i < n; i++) {
                Py_INCREF(T->vals[v].keys[i]);
                PyTuple_SET_ITEM(keys, i, T->vals[v].keys[i]);
            }
            T->r->outs[slot].obj = keys;
            if (!keys)
                return -1;
        }
        for (int i = 0; i < n; i++)
            if (build_out(T, T->vals[v].items[i], first + i))
                return -1;
        return 0;
    }
    default:
        return tr_break(T, "returning an unsupported value");
    }
}

static void tracer_free(tracer *T)
{
    for (int32_t i = 0; i < T->nvals; i++) {
        PyMem_Free(T->vals[i].items);
        PyMem_Free(T->vals[i].keys);
    }
    PyMem_Free(T->vals);
    PyMem_Free(T->viewed);
    Py_XDECREF(T->tensor_of);
}

int tracer_trace(PyObject *fn, PyObject *const *locals, Py_ssize_t nlocals, tr_result *out)
{
    memset(out, 0, sizeof *out);
    tracer T = { .r = out };
    out->keep = PyList_New(0);
    out->graph = smelt_graph_new();
    T.g = out->graph;
    T.tensor_of = PyDict_New();
    if (!out->keep || !out->graph || !T.tensor_of) {
        tracer_free(&T);
        PyErr_NoMemory();
        return -1;
    }
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(fn);
    T.globals = PyFunction_GET_GLOBALS(fn);
    T.builtins = PyEval_GetBuiltins();
    int argc = co->co_argcount + co->co_kwonlyargcount + !!(co->co_flags & CO_VARARGS) +
               !!(co->co_flags & CO_VARKEYWORDS);
    int32_t pos[64];
    int rc = -1;
    if (argc > 64 || nlocals < argc) {
        tr_break(&T, "unsupported signature");
        goto done;
    }
    for (int i = 0; i < argc; i++) {
        int32_t s = src_new(&T, SRC_LOCAL, -1, i, NULL);
        int32_t v = s < 0 ? -1 : tv_obj(&T, locals[i], s);
        if (v < 0)
            goto done;
        if (T.vals[v].kind == V_OBJ && (co->co_flags & CO_VARKEYWORDS) && i == argc - 1 &&
            PyDict_Check(locals[i])) {   /* **kwargs: a dict of wrapped values */
            int32_t d = tv_new(&T, V_DICT);
            PyObject *k, *val;
            Py_ssize_t p = 0;
            while (d >= 0 && PyDict_Next(locals[i], &p, &k, &val)) {
                int32_t ks = src_new(&T, SRC_DICT, s, 0, k);
                int32_t iv = ks < 0 ? -1 : tv_obj(&T, val, ks);
                if (iv < 0 || tv_push_item(&T, d, iv, k))
                    goto done;
            }
            add_guard(&T, TG_LEN, s, NULL, PyDict_GET_SIZE(locals[i]));
            v = d;
        }
        pos[i] = v;
    }
    /* bind as positional: the top frame's locals are already laid out */
    {
        int nlp = co->co_nlocalsplus;
        tframe f = { .code = (PyObject *)co, .func = fn, .func_src = -1, .globals = T.globals,
                     .builtins = T.builtins, .consts = co->co_consts, .names = co->co_names };
        f.trusted = 0;
        f.is_top = 1;
        f.locals = PyMem_Malloc(sizeof(int32_t) * (size_t)(nlp + 1));
        f.cap = co->co_stacksize + 8;
        f.stack = PyMem_Malloc(sizeof(int32_t) * (size_t)f.cap);
        f.bytes = PyObject_GetAttrString((PyObject *)co, "co_code");
        int32_t ret = -1;
        if (f.locals && f.stack && f.bytes) {
            for (int i = 0; i < nlp; i++)
                f.locals[i] = i < argc ? pos[i] : -1;
            ret = run_frame(&T, &f);
        }
        PyMem_Free(f.locals);
        PyMem_Free(f.stack);
        Py_XDECREF(f.bytes);
        if (ret < 0)
            goto done;
        int32_t root = out_new(&T, TO_CONST);
        if (root < 0 || build_out(&T, ret, root))
            goto done;
        if (T.g->nout == 0) {
            tr_break(&T, "no tensor computed");
            goto done;
        }
    }
    rc = 0;
done:
    if (rc && !PyErr_Occurred() && T.broke)
        rc = 1;
    else if (rc && !PyErr_Occurred())
        rc = 1;
    tracer_free(&T);
    return rc;
}

void tracer_result_clear(tr_result *r)
{
    smelt_graph_free(r->graph);
    PyMem_Free(r->srcs);
    PyMem_Free(r->input_src);
    for (int32_t i = 0; i < r->nguards; i++)
        Py_XDECREF(r->guards[i].obj);
    PyMem_Free(r->guards);
    for (int32_t i = 0; i < r->nouts; i++)
        Py_XDECREF(r->outs[i].obj);
    PyMem_Free(r->outs);
    Py_XDECREF(r->keep);
    memset(r, 0, sizeof *r);
}
