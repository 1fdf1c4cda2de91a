/* interp.c — symbolic interpretation of CPython 3.11, 3.12 and 3.13 bytecode.
 *
 * Entry: tracer_trace(). The loop follows the single path the traced call's
 * arguments take: a branch on a constant is decided now (and the constant
 * guarded); a branch on tensor data ends the trace. Python calls are inlined
 * into new symbolic frames (functions made in the traced code too, with
 * their closure cells); generators are frames suspended at each yield and
 * resumed by whoever iterates them; torch calls go to ops.c, builtins to
 * builtins.c. Opcodes are matched by name (tables built from the `opcode`
 * module at start-up, inline cache sizes included), so an opcode of one
 * version only is simply never seen on the other; the few places where the
 * same opcode means something different are the macros in tstate.h.
 */
#include "tstate.h"
#include "../inductor/backend.h"

#include <stdarg.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030b0000 || PY_VERSION_HEX >= 0x030e0000
#error "smelt's tracer interprets CPython 3.11 to 3.13 bytecode only"
#endif

#define MAX_DEPTH 48
#define MAX_STEPS 2000000

/* ---------- opcode tables ---------- */

static const char *op_names[] = {
#define X(n) #n,
    OPNAMES(X)
#undef X
};

uint8_t tr_op_of[256];           /* CPython opcode -> OP_* */
uint8_t tr_ncache[256];          /* inline cache entries after the opcode */
char tr_opname_all[256][40];     /* every CPython opcode's name, for break reasons */

/* CALL_INTRINSIC_1's functions smelt traces (3.12), by name as the opcode
 * module lists them; their numbers are looked up at start-up. */
#define INTRINSICS(X) X(UNARY_POSITIVE) X(LIST_TO_TUPLE)

enum {
#define X(n) IN_##n,
    INTRINSICS(X)
#undef X
    IN_UNKNOWN
};

static const char *intrinsic_names[] = {
#define X(n) "INTRINSIC_" #n,
    INTRINSICS(X)
#undef X
};

#define MAX_INTRINSIC 32
static uint8_t intrinsic_of[MAX_INTRINSIC];          /* CALL_INTRINSIC_1 argument -> IN_* */
static char intrinsic_all[MAX_INTRINSIC][40];        /* every intrinsic's name, for break reasons */

/* Interned attribute names used for sources, and the grad-mode context
 * managers `with` may enter (classes whose construction has no effect). */
static PyObject *s_forward, *s_globals, *s_modules, *s_params, *s_buffers, *s_dict, *s_self, *s_call, *s_func;
static PyObject *ctx_classes[2];                 /* torch.no_grad, torch.inference_mode */
static PyObject *device_type, *param_type, *strided;   /* torch.device, nn.Parameter, torch.strided */
/* torch._C._functorch.is_functorch_wrapped_tensor, torch._is_functional_tensor:
 * tensors of a transform (vmap's BatchedTensor, grad's wrapper) or of
 * functionalization look plain from Python but have no storage of their own */
static PyObject *wrapped_checks[2];
/* Types whose instances never change (value_stable): torch.layout,
 * torch.memory_format, torch.finfo, torch.iinfo, torch.Size; and
 * enum.Enum. */
static PyObject *value_types[5], *enum_type;

static int init_names(void)
{
    s_forward = PyUnicode_InternFromString("forward");
    s_globals = PyUnicode_InternFromString("__globals__");
    s_modules = PyUnicode_InternFromString("_modules");
    s_params = PyUnicode_InternFromString("_parameters");
    s_buffers = PyUnicode_InternFromString("_buffers");
    s_dict = PyUnicode_InternFromString("__dict__");
    s_self = PyUnicode_InternFromString("__self__");
    s_call = PyUnicode_InternFromString("__call__");
    s_func = PyUnicode_InternFromString("__func__");
    PyObject *torch = PyImport_ImportModule("torch");
    if (!torch)
        return -1;
    ctx_classes[0] = PyObject_GetAttrString(torch, "no_grad");
    ctx_classes[1] = PyObject_GetAttrString(torch, "inference_mode");
    device_type = PyObject_GetAttrString(torch, "device");
    strided = PyObject_GetAttrString(torch, "strided");
    PyObject *cf = PyObject_GetAttrString(torch, "contiguous_format");
    value_types[0] = strided ? Py_NewRef((PyObject *)Py_TYPE(strided)) : NULL;
    value_types[1] = cf ? Py_NewRef((PyObject *)Py_TYPE(cf)) : NULL;
    value_types[2] = PyObject_GetAttrString(torch, "finfo");
    value_types[3] = PyObject_GetAttrString(torch, "iinfo");
    value_types[4] = PyObject_GetAttrString(torch, "Size");   /* a tuple of ints */
    Py_XDECREF(cf);
    PyObject *en = PyImport_ImportModule("enum");
    enum_type = en ? PyObject_GetAttrString(en, "Enum") : NULL;
    Py_XDECREF(en);
    PyObject *tc = PyObject_GetAttrString(torch, "_C");
    PyObject *ft = tc ? PyObject_GetAttrString(tc, "_functorch") : NULL;
    wrapped_checks[0] = ft ? PyObject_GetAttrString(ft, "is_functorch_wrapped_tensor") : NULL;
    wrapped_checks[1] = PyObject_GetAttrString(torch, "_is_functional_tensor");
    Py_XDECREF(ft);
    Py_XDECREF(tc);
    PyObject *nn = PyImport_ImportModule("torch.nn");
    param_type = nn ? PyObject_GetAttrString(nn, "Parameter") : NULL;
    Py_XDECREF(nn);
    Py_DECREF(torch);
    return s_forward && s_globals && s_modules && s_params && s_buffers && s_dict && s_self && s_call && s_func &&
           ctx_classes[0] && ctx_classes[1] && device_type && strided && param_type && wrapped_checks[0] &&
           wrapped_checks[1] &&
           value_types[0] && value_types[1] && value_types[2] && value_types[3] && value_types[4] && enum_type ? 0 : -1;
}

/* The name of each entry of sequence seq (opcode.opname, the intrinsics'
 * descriptions) into names[0..n), "?" where there is none. */
static void read_names(PyObject *seq, char (*names)[40], Py_ssize_t n)
{
    Py_ssize_t len = seq ? PySequence_Size(seq) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = i < len ? PySequence_GetItem(seq, i) : NULL;
        const char *u = v && PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
        snprintf(names[i], sizeof names[i], "%s", u ? u : "?");
        Py_XDECREF(v);
    }
    PyErr_Clear();
}

/* op_of, ncache and tr_opname_all from the opcode module: opmap by name
 * (pseudo-opcodes, numbered from 256 in 3.12, never occur in code) and
 * _inline_cache_entries, the interpreter's own cache sizes: a list by
 * opcode in 3.11 and 3.12, a dict by name (opcodes without caches left
 * out) in 3.13. */
static int init_opcodes(PyObject *opcode)
{
    PyObject *opmap = PyObject_GetAttrString(opcode, "opmap");
    PyObject *caches = opmap ? PyObject_GetAttrString(opcode, "_inline_cache_entries") : NULL;
    if (!caches) {
        Py_XDECREF(opmap);
        return -1;
    }
    memset(tr_op_of, OP_UNKNOWN, sizeof tr_op_of);
    for (int i = 0; i < OP_UNKNOWN; i++) {
        PyObject *v = PyDict_GetItemString(opmap, op_names[i]);
        long code = v ? PyLong_AsLong(v) : -1;
        if (code >= 0 && code < 256)
            tr_op_of[code] = (uint8_t)i;
    }
    memset(tr_ncache, 0, sizeof tr_ncache);
    PyObject *name, *v;
    for (Py_ssize_t pos = 0; PyDict_Check(caches) && PyDict_Next(caches, &pos, &name, &v);) {
        PyObject *c = PyDict_GetItemWithError(opmap, name);
        long code = c ? PyLong_AsLong(c) : -1;
        if (code >= 0 && code < 256)
            tr_ncache[code] = (uint8_t)PyLong_AsLong(v);
    }
    for (Py_ssize_t i = 0; !PyDict_Check(caches) && i < 256 && i < PySequence_Size(caches); i++) {
        v = PySequence_GetItem(caches, i);
        tr_ncache[i] = v ? (uint8_t)PyLong_AsLong(v) : 0;
        Py_XDECREF(v);
    }
    PyObject *names = PyObject_GetAttrString(opcode, "opname");
    read_names(names, tr_opname_all, 256);
    Py_XDECREF(names);
    Py_DECREF(opmap);
    Py_DECREF(caches);
    return PyErr_Occurred() ? -1 : 0;
}

/* intrinsic_of / intrinsic_all from opcode._intrinsic_1_descs (3.12; 3.11
 * has no intrinsics and no attribute). */
static void init_intrinsics(PyObject *opcode)
{
    memset(intrinsic_of, IN_UNKNOWN, sizeof intrinsic_of);
    PyObject *descs = PyObject_GetAttrString(opcode, "_intrinsic_1_descs");
    read_names(descs, intrinsic_all, MAX_INTRINSIC);
    Py_XDECREF(descs);
    for (int k = 0; k < MAX_INTRINSIC; k++)
        for (int i = 0; i < IN_UNKNOWN; i++)
            if (!strcmp(intrinsic_all[k], intrinsic_names[i]))
                intrinsic_of[k] = (uint8_t)i;
}

int tracer_init(void)
{
    PyObject *opcode = PyImport_ImportModule("opcode");
    if (!opcode)
        return -1;
    int rc = init_opcodes(opcode);
    if (rc == 0)
        init_intrinsics(opcode);
    Py_DECREF(opcode);
    return rc || init_names() || bi_init() || obj_init() || flex_init() ? -1 : ops_init();
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

static int top_cur(tracer *T);

int tr_break(tracer *T, const char *fmt, ...)
{
    if (!T->broke) {
        va_list ap;
        va_start(ap, fmt);
        PyObject *s = PyUnicode_FromFormatV(fmt, ap);
        va_end(ap);
        const char *u = s ? PyUnicode_AsUTF8(s) : NULL;
        snprintf(T->r->reason, sizeof T->r->reason, "%s", u ? u : "(reason unavailable)");
        Py_XDECREF(s);
        if (!u)
            PyErr_Clear();
        T->broke = 1;
        T->break_at = top_cur(T);   /* where a partial graph could stop */
    }
    return -1;
}

/* The arena keeps one V_NULL slot before vals[0], so that vals[-1] (an
 * absent argument) reads as a harmless non-tensor instead of out of
 * bounds. */
int32_t tv_new(tracer *T, tv_kind k)
{
    tv *base = T->vals ? T->vals - 1 : NULL;
    int32_t cap = T->cvals;
    tv *nv = grow(base, &cap, T->nvals + 2, sizeof(tv));
    if (!nv)
        return PyErr_NoMemory(), -1;
    if (!base) {
        memset(nv, 0, sizeof *nv);
        nv->kind = V_NULL;
        nv->node = nv->src = nv->self_ = nv->sl[0] = nv->sl[1] = nv->sl[2] = -1;
    }
    T->cvals = cap;
    T->vals = nv + 1;
    tv *v = &T->vals[T->nvals];
    memset(v, 0, sizeof *v);
    v->kind = (uint8_t)k;
    v->src = v->self_ = -1;
    v->node = -1;
    v->sl[0] = v->sl[1] = v->sl[2] = -1;
    return T->nvals++;
}

int tv_push_item(tracer *T, int32_t c, int32_t item, PyObject *key)
{
    if (c < 0 || item < 0)
        return -1;
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

int32_t tv_int(tracer *T, int64_t i)
{
    PyObject *o = PyLong_FromLongLong(i);
    int32_t v = o ? tv_obj(T, o, -1) : -1;
    Py_XDECREF(o);
    return v;
}

static int32_t tv_bool(tracer *T, int b)
{
    return tv_obj(T, b ? Py_True : Py_False, -1);
}

/* A V_BOUND of method obj (a function, or a name) on value self. */
static int32_t tv_bound(tracer *T, PyObject *obj, int32_t self, int32_t fn_src)
{
    if (self < 0 || tr_keep(T, obj))
        return -1;
    int32_t b = tv_new(T, V_BOUND);
    if (b >= 0) {
        T->vals[b].obj = obj;
        T->vals[b].self_ = self;
        T->vals[b].src = fn_src;
    }
    return b;
}

int32_t tr_bound(tracer *T, PyObject *fn, int32_t self, int32_t fn_src)
{
    return tv_bound(T, fn, self, fn_src);
}

int32_t tr_node_add(tracer *T, const smelt_node *proto)
{
    if (T->broke)
        return -1;   /* operands of a failed step are not nodes */
    for (int k = 0; k < proto->nsrc; k++)
        if (proto->src[k] < 0 || proto->src[k] >= T->g->n)
            return tr_break(T, "%s of a non-tensor", smelt_op_name((smelt_op)proto->op));
    int32_t id = smelt_graph_add(T->g, proto);
    if (id < 0)
        return T->dyn_pend = 0, tr_break(T, "%s", T->g->err);
    if (dyn_node(T, id))
        return -1;
    uint8_t *nc = grow(T->contig, &T->ccontig, T->g->n + 1, 1);
    if (!nc)
        return PyErr_NoMemory(), -1;
    T->contig = nc;
    T->contig[id] = 0;
    if (proto->op != SMELT_OP_INPUT && T->no_grad != 1)
        T->grad_nodes++;
    return id;
}

/* The source kind/parent/index/key, shared with an existing equal one.
 * key (if any) must be a str or another hashable constant; it is kept. */
int32_t tr_src_new(tracer *T, tr_src_kind k, int32_t parent, Py_ssize_t index, PyObject *key)
{
    tr_result *r = T->r;
    if (parent < 0 && (k == SRC_ATTR || k == SRC_ITEM || k == SRC_DICT || k == SRC_TYPE))
        return -1;   /* no parent source: the value is not refetched */
    for (int32_t i = 0; i < r->nsrcs; i++) {   /* shared prefixes: one source per path */
        const tr_src *s = &r->srcs[i];
        if (s->kind == k && s->parent == parent && s->index == index &&
            (s->key == key || (s->key && key && Py_TYPE(s->key) == Py_TYPE(key) &&
                               PyObject_RichCompareBool(s->key, key, Py_EQ) == 1)))
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

int tr_add_guard(tracer *T, tr_guard_kind k, int32_t src, PyObject *obj, Py_ssize_t n)
{
    tr_result *r = T->r;
    if (src < 0)
        return 0;
    for (int32_t i = 0; i < r->nguards; i++)
        if (r->guards[i].kind == k && r->guards[i].src == src &&
            (k != TG_HAS_KEY || PyObject_RichCompareBool(r->guards[i].obj, obj, Py_EQ) == 1))
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
           !strcmp(n, "builtins") || !strcmp(n, "functools");
}

PyObject *tr_strided(void) { return strided; }

/* 1 if tensor t can be a graph input: a strided (dense) torch.Tensor or
 * nn.Parameter. A subclass would make eager's results instances of it
 * (and may override __torch_function__); sparse, quantized and other
 * layouts have no strides; a functorch or functional wrapper has no
 * storage (Dynamo's graphs of vmap, create_block_mask, run such nodes
 * eagerly). 0 with a break, -1 on error. */
static int tensor_plain(tracer *T, PyObject *t)
{
    PyTypeObject *tp = Py_TYPE(t);
    if ((PyObject *)tp != ops_tensor_type() && (PyObject *)tp != param_type)
        return tr_break(T, "tensor subclass %s (its __torch_function__ and result type are eager's)", tp->tp_name), 0;
    for (int i = 0; i < 2; i++) {
        PyObject *r = PyObject_CallOneArg(wrapped_checks[i], t);
        if (!r)
            return -1;
        int wrapped = r == Py_True;
        Py_DECREF(r);
        if (wrapped)
            return tr_break(T, "a %s tensor (no storage of its own)", i ? "functionalized" : "functorch-wrapped (vmap, grad)"), 0;
    }
    PyObject *layout = PyObject_GetAttrString(t, "layout");
    if (!layout)
        return -1;
    int ok = layout == strided;
    if (!ok)
        tr_break(T, "tensor with layout %R", layout);
    Py_DECREF(layout);
    return ok;
}

/* The Python tensor graph-input value v was made from (borrowed), or NULL
 * for a tensor made in the trace. */
PyObject *tr_tensor_obj(tracer *T, int32_t v)
{
    int32_t src = T->vals[v].src;
    for (int32_t i = 0; src >= 0 && i < T->r->nguards; i++)
        if (T->r->guards[i].kind == TG_TENSOR && T->r->guards[i].src == src)
            return T->r->guards[i].obj;
    return NULL;
}

static int32_t tensor_input(tracer *T, PyObject *t, int32_t src)
{
    PyObject *key = PyLong_FromVoidPtr(t);
    if (!key)
        return -1;
    PyObject *have = PyDict_GetItemWithError(T->tensor_of, key);
    if (have) {   /* one tensor reached through two sources: they must stay one object */
        Py_DECREF(key);
        int32_t v = (int32_t)PyLong_AsLong(have), first = T->vals[v].src;
        if (src >= 0 && first >= 0 && src != first && tr_add_guard(T, TG_SAME, src, NULL, first))
            return -1;
        return v;
    }
    if (src < 0) {
        Py_DECREF(key);
        return tr_break(T, "a tensor without a source (created outside the traced code)");
    }
    int32_t v = -1;
    PyObject *dt = NULL, *shape = NULL, *stride = NULL, *dev = NULL;
    if (tensor_plain(T, t) != 1)
        goto out;
    dt = PyObject_GetAttrString(t, "dtype");
    shape = PyObject_GetAttrString(t, "shape");
    stride = PyObject_CallMethod(t, "stride", NULL);
    dev = PyObject_GetAttrString(t, "is_cpu");
    smelt_node p = { 0 };
    if (!dt || !shape || !stride || !dev)
        goto out;
    if (dev != Py_True) {
        Py_SETREF(dev, PyObject_GetAttrString(t, "device"));
        int d = dev ? tr_device_of(dev) : -4;
        if (d == -4 || (d >= 0 ? tr_device(T, d, dev) : tr_break(T, "tensor input on device %R", dev)))
            goto out;
    } else if (tr_device(T, -1, NULL)) {
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
    uint32_t dynamic = 0;
    if (dyn_input(T, t, src, (int)nd, p.shape, &dynamic))
        goto out;
    int32_t node = smelt_graph_input(T->g, (smelt_dtype)sd, (int)nd, p.shape, p.stride);
    if (node < 0) {
        tr_break(T, "%s", T->g->err);
        goto out;
    }
    if (dyn_input_node(T, node, dynamic))
        goto out;
    uint8_t *nc = grow(T->contig, &T->ccontig, T->g->n + 1, 1);
    int32_t *ni = grow(T->r->input_src, &T->cinputs, T->r->ninputs + 1, sizeof(int32_t));
    if (!nc || !ni) {
        PyErr_NoMemory();
        goto out;
    }
    T->contig = nc;
    T->contig[node] = 0;
    T->r->input_src = ni;
    T->r->input_src[T->r->ninputs++] = src;
    v = tv_tensor(T, node);
    if (v >= 0) {
        T->vals[v].obj = (PyObject *)Py_TYPE(t);   /* its exact type (guarded with it) */
        T->vals[v].src = src;
    }
    PyObject *vid = PyLong_FromLong(v);
    if (v < 0 || !vid || PyDict_SetItem(T->tensor_of, key, vid) || tr_keep(T, t) ||
        tr_add_guard(T, TG_TENSOR, src, t, (Py_ssize_t)dynamic))
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

/* A Python float read from src as a graph input: a 0-d float64 tensor
 * the caller makes from the float at each run (its type guarded, not its
 * value), so a new value is not a new entry (an optimizer's learning rate
 * under a scheduler). One input per source. */
int tr_device_of(PyObject *o)
{
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *d = torch ? PyObject_CallMethod(torch, "device", "O", o) : NULL;
    PyObject *type = d ? PyObject_GetAttrString(d, "type") : NULL;
    PyObject *index = type ? PyObject_GetAttrString(d, "index") : NULL;
    int r = -4;
    if (index) {
        if (!PyUnicode_CompareWithASCIIString(type, "cpu")) {
            r = -1;
        } else if (PyUnicode_CompareWithASCIIString(type, "cuda")) {
            r = -3;
        } else if (index != Py_None) {
            r = (int)PyLong_AsLong(index);
        } else {   /* "cuda": the current device */
            PyObject *cu = PyObject_GetAttrString(torch, "cuda");
            PyObject *cur = cu ? PyObject_CallMethod(cu, "current_device", NULL) : NULL;
            Py_XDECREF(cu);
            r = cur ? (int)PyLong_AsLong(cur) : -4;
            Py_XDECREF(cur);
        }
        if (r == -1 && PyErr_Occurred())
            r = -4;
    }
    Py_XDECREF(index);
    Py_XDECREF(type);
    Py_XDECREF(d);
    Py_XDECREF(torch);
    return r;
}

int tr_device(tracer *T, int dev, PyObject *obj)
{
    if (T->device == dev)
        return 0;
    if (T->device != -2) {
        if (T->device >= 0 && dev >= 0)
            return tr_break(T, "tensors on two CUDA devices (%d and %d) in one graph", T->device, dev);
        return tr_break(T, "tensors on the CPU and on CUDA device %d in one graph", dev >= 0 ? dev : T->device);
    }
    if (dev >= 0 && T->nfloat_inputs)
        return tr_break(T, "a Python float read as an input of a graph on CUDA (made on the CPU each run)");
    if (dev >= 0) {
        char why[256];
        const ind_backend *be = ind_backend_named("cuda");
        if (!be || !be->available(why, sizeof why))
            return tr_break(T, "tensors on CUDA device %d, and the CUDA back end cannot run here (%s)", dev, why);
        PyObject *o = obj ? Py_NewRef(obj) : PyUnicode_FromFormat("cuda:%d", dev);
        PyObject *torch = o && !obj ? PyImport_ImportModule("torch") : NULL;
        if (torch)
            Py_SETREF(o, PyObject_CallMethod(torch, "device", "O", o));
        Py_XDECREF(torch);
        if (!o || tr_keep(T, o)) {
            Py_XDECREF(o);
            return -1;
        }
        T->device_obj = o;
        Py_DECREF(o);   /* (r->keep holds it) */
    }
    T->device = dev;
    return 0;
}

int32_t tr_float_input(tracer *T, int32_t src)
{
    if (src < 0)
        return tr_break(T, "a float input without a source");
    if (T->device >= 0)
        return tr_break(T, "a Python float read as an input of a graph on CUDA (made on the CPU each run)");
    T->nfloat_inputs++;
    for (int32_t k = 0; k < T->r->ninputs; k++)
        if (T->r->input_src[k] == src)
            for (int32_t i = 0; i < T->g->n; i++)
                if (T->g->nodes[i].op == SMELT_OP_INPUT && T->g->nodes[i].a.input.index == k)
                    return tv_tensor(T, i);
    int32_t node = smelt_graph_input(T->g, SMELT_F64, 0, NULL, NULL);
    if (node < 0)
        return tr_break(T, "%s", T->g->err);
    uint8_t *nc = grow(T->contig, &T->ccontig, T->g->n + 1, 1);
    int32_t *ni = grow(T->r->input_src, &T->cinputs, T->r->ninputs + 1, sizeof(int32_t));
    if (!nc || !ni)
        return PyErr_NoMemory(), -1;
    T->contig = nc;
    T->contig[node] = 1;
    T->r->input_src = ni;
    T->r->input_src[T->r->ninputs++] = src;
    if (tr_add_guard(T, TG_TYPE, src, (PyObject *)&PyFloat_Type, 0))
        return -1;
    return tv_tensor(T, node);
}

/* The value standing for list or dict o already (one value per object, so
 * that a mutation through one source is seen through every other), or
 * -1; a second source is guarded to hold that same object. -2 on error. */
static int32_t known_container(tracer *T, PyObject *o, int32_t src)
{
    if (!T->containers && !(T->containers = PyDict_New()))
        return -2;
    PyObject *key = PyLong_FromVoidPtr(o), *have = key ? PyDict_GetItemWithError(T->containers, key) : NULL;
    Py_XDECREF(key);
    if (!have)
        return PyErr_Occurred() ? -2 : -1;
    int32_t v = (int32_t)PyLong_AsLong(have), first = T->vals[v].src;
    if (src >= 0 && first >= 0 && src != first && tr_add_guard(T, TG_SAME, src, NULL, first))
        return -2;
    return v;
}

static int remember_container(tracer *T, PyObject *o, int32_t v)
{
    PyObject *key = PyLong_FromVoidPtr(o), *val = PyLong_FromLong(v);
    int rc = key && val && T->containers ? PyDict_SetItem(T->containers, key, val) : -1;
    Py_XDECREF(key);
    Py_XDECREF(val);
    return rc;
}

/* v, or the model of the dict from outside that v wraps once the trace
 * made one (reads then see the trace's own writes); -1 on error. */
int32_t tr_live(tracer *T, int32_t v)
{
    tv *x = &T->vals[v];
    if (v < 0 || x->kind != V_OBJ || x->src < 0 || !T->containers || !PyDict_CheckExact(x->obj))
        return v;
    int32_t k = known_container(T, x->obj, x->src);
    return k == -1 ? v : k < 0 ? -1 : k;
}

int tr_mutable(tracer *T, int32_t c, const char *what)
{
    tv *x = &T->vals[c];
    if (!x->frozen)
        return 0;
    if ((x->kind != V_LIST && x->kind != V_DICT) || x->src < 0 || x->obj)
        return tr_break(T, "%s of a %s passed in from outside", what, tr_kind_name(T, c));
    if (x->frozen == 1) {   /* first mutation: written back after the graph */
        int32_t *nd = grow(T->dirty, &T->cdirty, T->ndirty + 1, sizeof(int32_t));
        if (!nd)
            return PyErr_NoMemory(), -1;
        T->dirty = nd;
        T->dirty[T->ndirty++] = c;
        x->frozen = 2;
    }
    return 0;
}

/* Wraps object o fetched from src (-1: computed/trusted). Tensors become
 * graph inputs; tuples and lists become containers of wrapped items (their
 * length guarded). Dicts stay objects until used (tr_dict_value). */
int32_t tv_obj(tracer *T, PyObject *o, int32_t src)
{
    if (ops_is_tensor(o))
        return tensor_input(T, o, src);
    if (src >= 0 && T->containers && PyDict_CheckExact(o)) {   /* a dict the trace modelled already */
        int32_t known = known_container(T, o, src);
        if (known != -1)
            return known < 0 ? -1 : known;
    }
    int named = !PyTuple_CheckExact(o) && PyTuple_Check(o) && obj_namedtuple_class((PyObject *)Py_TYPE(o));
    if ((PyTuple_CheckExact(o) || PyList_CheckExact(o) || named) && PySequence_Size(o) <= 256) {
        int isl = PyList_CheckExact(o);
        int32_t known = isl && src >= 0 ? known_container(T, o, src) : -1;
        if (known != -1)
            return known < 0 ? -1 : known;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        if (tr_add_guard(T, TG_TYPE, src, (PyObject *)Py_TYPE(o), 0) || tr_add_guard(T, TG_LEN, src, NULL, n))
            return -1;
        int32_t c = tv_new(T, isl ? V_LIST : V_TUPLE);
        for (Py_ssize_t i = 0; c >= 0 && i < n; i++) {
            int32_t s = src >= 0 ? tr_src_new(T, SRC_ITEM, src, i, NULL) : -1;
            int32_t it = (src >= 0 && s < 0) ? -1 : tv_obj(T, PySequence_Fast_GET_ITEM(o, i), s);
            if (it < 0 || tv_push_item(T, c, it, NULL))
                return -1;
        }
        if (c >= 0) {
            T->vals[c].src = src;
            T->vals[c].frozen = 1;   /* an existing list: mutations are written back (tr_mutable) */
            if (isl && src >= 0 && remember_container(T, o, c))
                return -1;
        }
        if (c >= 0 && named) {   /* a named tuple: rebuilt by its class's _make */
            PyObject *mk = PyObject_GetAttrString((PyObject *)Py_TYPE(o), "_make");
            if (!mk || tr_keep(T, mk))
                c = -1;
            else
                T->vals[c].obj = mk;
            Py_XDECREF(mk);
        }
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

int tr_is_plain_const(PyObject *o)
{
    return is_plain_const(o);
}

static const char *kind_name(tracer *T, int32_t v)
{
    static const char *names[] = { "NULL", "tensor", "object", "tuple", "list", "dict", "method",
                                   "iterator", "slice", "function", "cell", "instance", "int" };
    return names[T->vals[v].kind];
}

const char *tr_kind_name(tracer *T, int32_t v)
{
    return kind_name(T, v);
}

/* The concrete object of V_OBJ v; records the guard that makes using its
 * value sound: equality for plain constants, identity otherwise (unless it
 * came from a trusted module such as torch). */
/* A set or frozenset of at most 256 plain constants (or tuples of them):
 * guarded by its contents. */
static int const_set(PyObject *o)
{
    if (!PyAnySet_CheckExact(o) || PySet_GET_SIZE(o) > 256)
        return 0;
    Py_ssize_t pos = 0;
    PyObject *k;
    Py_hash_t h;
    while (_PySet_NextEntry(o, &pos, &k, &h))
        if (!is_plain_const(k) && !PyBytes_CheckExact(k) && !PyTuple_CheckExact(k))
            return 0;
    return 1;
}

/* The guard that makes using object o (fetched from src) as a constant
 * sound: equality for plain constants and sets of them (a copy of a set:
 * its contents may change), value equality for torch.device (made anew
 * by many calls), identity otherwise. */
static int const_guard(tracer *T, int32_t src, PyObject *o)
{
    if (src < 0)
        return 0;
    if (is_plain_const(o) || PyBytes_CheckExact(o))
        return tr_add_guard(T, TG_EQ, src, o, 0);
    if (Py_IS_TYPE(o, (PyTypeObject *)device_type))
        return tr_add_guard(T, TG_VALUE, src, o, 0);
    if (const_set(o)) {
        PyObject *copy = PySet_CheckExact(o) ? PySet_New(o) : Py_NewRef(o);
        int rc = copy ? tr_add_guard(T, TG_EQ, src, copy, 0) : -1;
        Py_XDECREF(copy);
        return rc;
    }
    return tr_add_guard(T, TG_ID, src, o, 0);
}

PyObject *tr_const(tracer *T, int32_t v)
{
    tv *x = &T->vals[v];
    if (x->kind == V_SYM && dyn_specialize(T, v))
        return NULL;
    if (x->kind != V_OBJ) {
        tr_break(T, "expected a constant, got a %s", kind_name(T, v));
        return NULL;
    }
    if (const_guard(T, x->src, x->obj))
        return NULL;
    return x->obj;
}

/* 1 if object o's value cannot change while o stays the same object, or
 * is guarded by its contents (const_guard): what trace-time evaluation
 * of o (len, `in`, items, a call on it) may rely on. */
static int value_stable(PyObject *o)
{
    if (is_plain_const(o) || PyBytes_CheckExact(o) || PyComplex_CheckExact(o) || const_set(o) ||
        PyFrozenSet_CheckExact(o) || PyTuple_CheckExact(o) || PyRange_Check(o) || PySlice_Check(o))
        return 1;
    if (PyType_Check(o) || PyModule_Check(o) || PyFunction_Check(o) || PyCFunction_Check(o) || PyCode_Check(o) ||
        PyMethod_Check(o) || Py_IS_TYPE(o, (PyTypeObject *)device_type) || ops_dtype_of(o) >= 0)
        return 1;
    PyErr_Clear();
    for (size_t i = 0; i < sizeof value_types / sizeof value_types[0]; i++)
        if (Py_IS_TYPE(o, (PyTypeObject *)value_types[i]))
            return 1;
    int e = PyObject_IsInstance(o, enum_type);
    PyErr_Clear();
    return e == 1;
}

PyObject *tr_value(tracer *T, int32_t v)
{
    tv *x = &T->vals[v];
    PyObject *o = tr_const(T, v);
    if (o && x->src >= 0 && !value_stable(o)) {
        tr_break(T, "a %s read at trace time could change between calls", Py_TYPE(o)->tp_name);
        return NULL;
    }
    return o;
}

/* A new Python object equal to value v: a constant (guarded as tr_const
 * does), or a tuple/list/dict/slice of such built anew. NULL: a break
 * (tensors and the like have no trace-time value) or an error. */
static PyObject *item_pyobj(tracer *T, int32_t v, void *ctx)
{
    (void)ctx;
    return tr_pyobj(T, v);
}

PyObject *tr_pyobj(tracer *T, int32_t v)
{
    if (T->vals[v].kind == V_SYM && dyn_specialize(T, v))   /* a symbolic int as an object: its traced value, guarded */
        return NULL;
    tv *x = &T->vals[v];
    if (x->kind == V_OBJ) {
        PyObject *o = tr_value(T, v);
        return Py_XNewRef(o);
    }
    if (x->kind == V_SLICE) {
        PyObject *p[3] = { Py_None, Py_None, Py_None };
        for (int i = 0; i < 3; i++)
            if (T->vals[v].sl[i] >= 0 && !(p[i] = tr_const(T, T->vals[v].sl[i])))
                return NULL;
        return PySlice_New(p[0], p[1], p[2]);
    }
    if (x->kind != V_TUPLE && x->kind != V_LIST && x->kind != V_DICT) {
        tr_break(T, "a %s has no value at trace time", kind_name(T, v));
        return NULL;
    }
    return tr_build_container(T, v, item_pyobj, NULL);
}

PyObject *tr_build_container(tracer *T, int32_t v, PyObject *(*item)(tracer *, int32_t, void *), void *ctx)
{
    int n = T->vals[v].n, kind = T->vals[v].kind;
    PyObject *c = kind == V_DICT ? PyDict_New() : kind == V_LIST ? PyList_New(n) : PyTuple_New(n);
    for (int i = 0; c && i < n; i++) {
        PyObject *it = item(T, T->vals[v].items[i], ctx);
        if (!it)
            Py_CLEAR(c);
        else if (kind == V_DICT) {
            if (PyDict_SetItem(c, T->vals[v].keys[i], it))
                Py_CLEAR(c);
            Py_DECREF(it);
        } else if (kind == V_LIST)
            PyList_SET_ITEM(c, i, it);
        else
            PyTuple_SET_ITEM(c, i, it);
    }
    if (c && kind == V_TUPLE && T->vals[v].obj)   /* torch.Size, named tuples */
        Py_SETREF(c, PyObject_CallOneArg(T->vals[v].obj, c));
    return c;
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

/* A V_DICT for dict value v. A dict object becomes one whose items carry
 * their sources; its type and length are guarded, and each key's presence
 * (through a type guard on its item), so iteration order and membership
 * are sound. Such a dict belongs to the caller: it is never mutated.
 * subclass: a dict subclass is read as dict's own methods see it. */
/* Guards the keys of dict o (from src) in their order when they are all
 * exact str or int (a dict with the same keys inserted in another order
 * iterates differently), else its length. 0, or -1. */
static int dict_order_guard(tracer *T, int32_t src, PyObject *o)
{
    Py_ssize_t p = 0, i = 0;
    PyObject *k, *val, *keys = PyDict_CheckExact(o) && src >= 0 ? PyTuple_New(PyDict_GET_SIZE(o)) : NULL;
    while (keys && PyDict_Next(o, &p, &k, &val)) {
        if (!PyUnicode_CheckExact(k) && !PyLong_CheckExact(k))
            Py_CLEAR(keys);
        else
            PyTuple_SET_ITEM(keys, i++, Py_NewRef(k));
    }
    PyErr_Clear();
    int rc = keys ? tr_add_guard(T, TG_KEYS, src, keys, 0) : tr_add_guard(T, TG_LEN, src, NULL, PyDict_GET_SIZE(o));
    Py_XDECREF(keys);
    return rc;
}

static int32_t dict_snapshot(tracer *T, int32_t v, int subclass)
{
    tv *x = &T->vals[v];
    if (x->kind == V_DICT)
        return v;
    if (x->kind != V_OBJ || !(subclass ? PyDict_Check(x->obj) : PyDict_CheckExact(x->obj)))
        return tr_break(T, "expected a dict, got a %s", kind_name(T, v));
    PyObject *o = x->obj;
    int32_t src = x->src;
    int32_t known = src >= 0 && PyDict_CheckExact(o) ? known_container(T, o, src) : -1;
    if (known != -1)
        return known < 0 ? -1 : known;
    if (PyDict_GET_SIZE(o) > 256)
        return tr_break(T, "dict with %zd items is too large to trace through", PyDict_GET_SIZE(o));
    if (tr_add_guard(T, TG_TYPE, src, (PyObject *)Py_TYPE(o), 0) || dict_order_guard(T, src, o))
        return -1;
    int32_t d = tv_new(T, V_DICT);
    PyObject *k, *val;
    Py_ssize_t p = 0;
    while (d >= 0 && PyDict_Next(o, &p, &k, &val)) {
        if (!is_plain_const(k))
            return tr_break(T, "dict key of type %s", Py_TYPE(k)->tp_name);
        int32_t ks = src >= 0 ? tr_src_new(T, SRC_DICT, src, 0, k) : -1;
        if ((src >= 0 && ks < 0) || tr_keep(T, k))
            return -1;
        if (!ops_is_tensor(val) && tr_add_guard(T, TG_TYPE, ks, (PyObject *)Py_TYPE(val), 0))
            return -1;
        int32_t iv = tv_obj(T, val, ks);
        if (iv < 0 || tv_push_item(T, d, iv, k))
            return -1;
    }
    if (d >= 0) {
        T->vals[d].src = src;
        T->vals[d].frozen = 1;   /* mutations are written back (tr_mutable) */
        if (src >= 0 && PyDict_CheckExact(o) && remember_container(T, o, d))
            return -1;
    }
    return d;
}

int32_t tr_dict_value(tracer *T, int32_t v)
{
    return dict_snapshot(T, v, 0);
}

/* ---------- frames ---------- */

typedef struct tframe {
    PyObject *code, *func, *globals, *builtins, *consts, *names, *bytes;
    int32_t func_src;      /* source of func (-1: none): roots its globals' and cells' sources */
    int trusted;           /* torch-internal code: its globals are not guarded */
    int is_top;            /* the traced function's own frame */
    int32_t *locals;       /* co_nlocalsplus slots; cell variables hold V_CELL values */
    int nlocals;
    int32_t *stack;
    int sp, cap;
    PyObject *kwnames;
    int pc;                /* next instruction (a generator resumes here) */
    int cur;               /* the instruction running (its first code unit, EXTENDED_ARG included) */
    int yielded;           /* run_frame stopped at a YIELD_VALUE */
    struct tframe *back;   /* the frame that is running this one */
} tframe;

/* The instruction the top frame is running, or -1 when it is not running
 * (the trace is past its return). */
static int top_cur(tracer *T)
{
    tframe *f = T->frame;
    while (f && !f->is_top)
        f = f->back;
    return f ? f->cur : -1;
}

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

static void frame_free(tframe *f)
{
    if (!f)
        return;
    PyMem_Free(f->locals);
    PyMem_Free(f->stack);
    Py_XDECREF(f->bytes);
    PyMem_Free(f);
}

/* A new frame for code co (all slots unbound). func: the real function
 * (NULL for a V_FUNC: its free variables are then filled by the caller). */
static tframe *frame_new(PyObject *co, PyObject *func, PyObject *globals, int32_t func_src, int trusted)
{
    PyCodeObject *c = (PyCodeObject *)co;
    tframe *f = PyMem_Calloc(1, sizeof *f);
    if (!f)
        return (tframe *)PyErr_NoMemory();
    *f = (tframe){ .code = co, .func = func, .globals = globals, .builtins = PyEval_GetBuiltins(),
                   .consts = c->co_consts, .names = c->co_names, .func_src = func_src,
                   .trusted = trusted, .nlocals = c->co_nlocalsplus, .cap = c->co_stacksize + 8 };
    f->locals = PyMem_Malloc(sizeof(int32_t) * (size_t)(f->nlocals + 1));
    f->stack = PyMem_Malloc(sizeof(int32_t) * (size_t)f->cap);
    f->bytes = PyObject_GetAttrString(co, "co_code");
    if (!f->locals || !f->stack || !f->bytes) {
        frame_free(f);
        return PyErr_Occurred() ? NULL : (tframe *)PyErr_NoMemory();
    }
    for (int i = 0; i < f->nlocals; i++)
        f->locals[i] = -1;
    return f;
}

/* A callee's defaults: a real function's objects, or a V_FUNC's values. */
typedef struct fdefaults {
    PyObject *pos, *kw;    /* __defaults__ tuple, __kwdefaults__ dict (NULL: none) */
    int32_t vpos, vkw;     /* V_TUPLE / V_DICT values (-1: none) */
    int32_t fn_src;        /* source of the real function (-1: none, or torch's own code) */
} fdefaults;

/* Source of a real function's default: fn.__defaults__[k] (name NULL) or
 * fn.__kwdefaults__[name]; -1 when the function has no source. Functions
 * are guarded by identity, but their defaults can be rebound or mutated. */
static int32_t default_src(tracer *T, const fdefaults *d, int k, PyObject *name)
{
    static PyObject *s_defaults, *s_kwdefaults;
    if (d->fn_src < 0)
        return -1;
    if (!s_defaults && (!(s_defaults = PyUnicode_InternFromString("__defaults__")) ||
                        !(s_kwdefaults = PyUnicode_InternFromString("__kwdefaults__"))))
        return -1;
    int32_t p = tr_src_new(T, SRC_ATTR, d->fn_src, 0, name ? s_kwdefaults : s_defaults);
    return name ? tr_src_new(T, SRC_DICT, p, 0, name) : tr_src_new(T, SRC_ITEM, p, k, NULL);
}

/* Default of parameter i (name) among nargs positional ones: a value id,
 * -2 when there is none, -1 on error. */
static int32_t default_of(tracer *T, const fdefaults *d, int i, int nargs, PyObject *name)
{
    if (i < nargs) {
        int nd = d->pos ? (int)PyTuple_GET_SIZE(d->pos) : d->vpos >= 0 ? T->vals[d->vpos].n : 0;
        if (i < nargs - nd)
            return -2;
        int k = i - (nargs - nd);
        return d->pos ? tv_obj(T, PyTuple_GET_ITEM(d->pos, k), default_src(T, d, k, NULL)) : T->vals[d->vpos].items[k];
    }
    if (d->kw) {
        PyObject *o = PyDict_GetItemWithError(d->kw, name);
        return o ? tv_obj(T, o, default_src(T, d, 0, name)) : PyErr_Occurred() ? -1 : -2;
    }
    for (int k = 0; d->vkw >= 0 && k < T->vals[d->vkw].n; k++)
        if (PyUnicode_Compare(T->vals[d->vkw].keys[k], name) == 0)
            return T->vals[d->vkw].items[k];
    return -2;
}

/* Binds call arguments to code co's parameters into frame f's locals, as
 * CPython does: positional, keyword, *args tuple, **kwargs dict, defaults. */
static int bind_args(tracer *T, tframe *f, PyCodeObject *co, const fdefaults *d, const call_args *a)
{
    int nargs = co->co_argcount, nkwonly = co->co_kwonlyargcount;
    int has_var = !!(co->co_flags & CO_VARARGS), has_kw = !!(co->co_flags & CO_VARKEYWORDS);
    PyObject *varnames = PyObject_GetAttrString((PyObject *)co, "co_varnames");
    int rc = -1;
    if (!varnames)
        return -1;
    int npos = a->npos < nargs ? a->npos : nargs;
    for (int i = 0; i < npos; i++)
        f->locals[i] = a->pos[i];
    if (a->npos > nargs && !has_var) {
        tr_break(T, "too many positional arguments for %U", co->co_name);
        goto out;
    }
    if (has_var && (f->locals[nargs + nkwonly] = tv_tuple(T, a->pos + npos, a->npos - npos)) < 0)
        goto out;
    int32_t kwd = has_kw ? tv_new(T, V_DICT) : -1;
    for (int k = 0; k < a->nkw; k++) {
        int slot = -1;
        for (int i = co->co_posonlyargcount; i < nargs + nkwonly; i++)
            if (PyUnicode_Compare(PyTuple_GET_ITEM(varnames, i), a->kwn[k]) == 0)
                slot = i;
        if (slot >= 0 && f->locals[slot] < 0)
            f->locals[slot] = a->kwv[k];
        else if (slot < 0 && kwd >= 0) {
            if (tv_push_item(T, kwd, a->kwv[k], a->kwn[k]))
                goto out;
        } else {
            tr_break(T, "unexpected or repeated keyword argument %U for %U", a->kwn[k], co->co_name);
            goto out;
        }
    }
    if (has_kw)
        f->locals[nargs + nkwonly + has_var] = kwd;
    for (int i = 0; i < nargs + nkwonly; i++) {
        if (f->locals[i] >= 0)
            continue;
        int32_t v = default_of(T, d, i, nargs, PyTuple_GET_ITEM(varnames, i));
        if (v == -2)
            tr_break(T, "missing argument %U of %U", PyTuple_GET_ITEM(varnames, i), co->co_name);
        if (v < 0)
            goto out;
        f->locals[i] = v;
    }
    rc = 0;
out:
    Py_DECREF(varnames);
    return rc;
}

/* Runs frame f (fully, or a generator's frame: wrapped as an iterator) and
 * frees it unless a generator keeps it. */
static int32_t enter_frame(tracer *T, tframe *f)
{
    PyCodeObject *co = (PyCodeObject *)f->code;
    if (co->co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)) {
        frame_free(f);
        return tr_break(T, "coroutine %U", co->co_name);
    }
    if (co->co_flags & CO_GENERATOR) {
        int32_t it = tv_new(T, V_ITER);
        if (it < 0) {
            frame_free(f);
            return -1;
        }
        T->vals[it].sub = IT_GEN;
        T->vals[it].frame = f;
        return it;
    }
    if (T->depth >= MAX_DEPTH) {
        frame_free(f);
        return tr_break(T, "call depth over %d", MAX_DEPTH);
    }
    T->depth++;
    int32_t r = run_frame(T, f);
    T->depth--;
    frame_free(f);
    return r;
}

/* Next value of generator iterator `it`: 1 and *out, 0 when it returned
 * (it is then done; *out the returned value the first time, untouched
 * after), -1 on a break. */
int tr_gen_next(tracer *T, int32_t it, int32_t *out)
{
    tframe *f = T->vals[it].frame;
    if (T->vals[it].done || !f)
        return 0;
    if (f->back)
        return tr_break(T, "generator already executing");
    if (T->depth >= MAX_DEPTH)
        return tr_break(T, "call depth over %d", MAX_DEPTH);
    if (f->pc > 0 && push(f, tv_obj(T, Py_None, -1)))   /* the value next() sends */
        return -1;
    T->depth++;
    int32_t r = run_frame(T, f);
    T->depth--;
    if (r < 0 && T->exc && !T->broke)
        return tr_break(T, "an exception escapes a generator");
    if (r < 0)
        return -1;
    *out = r;
    if (f->yielded)
        return 1;
    T->vals[it].done = 1;
    return 0;
}

/* ---------- aliasing ---------- */

typedef struct marker {
    uint8_t *seen;
    int32_t *todo;
    int32_t n, cap;
} marker;

static int mark_push(marker *m, int32_t v)
{
    if (v < 0 || m->seen[v])
        return 0;
    int32_t *t = grow(m->todo, &m->cap, m->n + 1, sizeof(int32_t));
    if (!t)
        return PyErr_NoMemory(), -1;
    m->todo = t;
    m->todo[m->n++] = v;
    return 0;
}

static int mark_frame(marker *m, const tframe *f)
{
    for (int i = 0; i < f->nlocals; i++)
        if (mark_push(m, f->locals[i]))
            return -1;
    for (int i = 0; i < f->sp; i++)
        if (mark_push(m, f->stack[i]))
            return -1;
    return 0;
}

/* Pushes what value v holds: container items, cells' contents, closures,
 * iterators' inputs and suspended generator frames. */
static int mark_children(tracer *T, marker *m, int32_t v)
{
    tv *x = &T->vals[v];
    int rc = (x->kind != V_FUNC && mark_push(m, x->self_)) ||   /* a V_FUNC's self_ is a source */
             mark_push(m, x->sl[0]) || mark_push(m, x->sl[1]) || mark_push(m, x->sl[2]);
    for (int i = 0; !rc && x->kind != V_OBJ && i < x->n; i++)
        rc = mark_push(m, x->items[i]);
    if (!rc && x->kind == V_ITER && x->frame)
        rc = mark_frame(m, x->frame);
    return rc;
}

/* Pushes every value the trace can still reach: the running frames' and,
 * what outlives them, the values side effects will write (attributes and
 * closure cells assigned, globals, outside containers changed). */
static int mark_roots(tracer *T, marker *m)
{
    for (tframe *f = T->frame; f; f = f->back)
        if (mark_frame(m, f))
            return -1;
    for (int32_t i = 0; i < T->nattrw; i++)
        if (mark_push(m, T->attrw[i].val))
            return -1;
    for (int32_t i = 0; i < T->ncellw; i++)
        if (mark_push(m, T->cellw[i].val))
            return -1;
    for (int32_t i = 0; i < T->ndirty; i++)
        if (mark_push(m, T->dirty[i]))
            return -1;
    PyObject *k, *v;
    Py_ssize_t p = 0;
    while (T->globalw && PyDict_Next(T->globalw, &p, &k, &v))
        if (mark_push(m, (int32_t)PyLong_AsLong(v)))
            return -1;
    return 0;
}

uint8_t *tr_live_mask(tracer *T)
{
    marker m = { .seen = PyMem_Calloc((size_t)T->nvals + 1, 1) };
    int bad = !m.seen || mark_roots(T, &m);
    while (!bad && m.n > 0) {
        int32_t v = m.todo[--m.n];
        if (m.seen[v])
            continue;
        m.seen[v] = 1;
        bad = mark_children(T, &m, v);
    }
    PyMem_Free(m.todo);
    if (bad) {
        PyMem_Free(m.seen);
        return PyErr_Occurred() ? NULL : (PyErr_NoMemory(), NULL);
    }
    return m.seen;
}

/* Value x (a graph input) is about to be updated in place: allowed unless
 * its tensor requires grad while grad mode is on (eager raises for a leaf,
 * and autograd is not modelled). Records x so that the update is written
 * back after each run. 1 / 0 (a break) / -1. */
int tr_input_grad(tracer *T, int32_t node)
{
    int32_t src = T->r->input_src[T->g->nodes[node].a.input.index];
    PyObject *t = NULL;
    for (int32_t i = 0; i < T->r->nguards && !t; i++)
        if (T->r->guards[i].kind == TG_TENSOR && T->r->guards[i].src == src)
            t = T->r->guards[i].obj;
    if (!t)
        return -2;
    PyObject *rg = PyObject_GetAttrString(t, "requires_grad");
    if (!rg)
        return -1;
    int needs = rg == Py_True;
    Py_DECREF(rg);
    if (!needs || T->no_grad > 0)
        return 0;
    if (T->no_grad < 0)
        return 1;   /* torch.enable_grad() inside the trace */
    PyObject *torch = PyImport_AddModule("torch");   /* grad mode outside the trace (guarded) */
    PyObject *on = torch ? PyObject_CallMethod(torch, "is_grad_enabled", NULL) : NULL;
    if (!on)
        return -1;
    int grad = on == Py_True;
    Py_DECREF(on);
    return grad;
}

int tr_mutate_input(tracer *T, int32_t x)
{
    const smelt_node *n = &T->g->nodes[T->vals[x].node];
    int grad = tr_input_grad(T, T->vals[x].node);
    if (grad == -2)
        return tr_break(T, "in-place update of an input without its tensor"), 0;
    if (grad < 0)
        return -1;
    if (grad)
        return tr_break(T, "in-place update of an input that requires grad"), 0;
    if (T->vals[x].mut)
        return 1;
    int32_t *nm = grow(T->muts, &T->cmuts, T->nmuts + 1, sizeof(int32_t));
    if (!nm)
        return PyErr_NoMemory(), -1;
    T->muts = nm;
    T->muts[T->nmuts++] = x;
    T->vals[x].mut = n->a.input.index + 1;
    return 1;
}

/* After the return value's outputs: one more graph output per input
 * updated in place (its final value), written back by the caller. A
 * returned tensor that is such an input would have to be the caller's own
 * object: not modelled. */
static int mut_outputs(tracer *T)
{
    tr_result *r = T->r;
    if (!T->nmuts)
        return 0;
    if (!(r->mut_in = PyMem_Calloc((size_t)T->nmuts, sizeof(int32_t))) ||
        !(r->mut_out = PyMem_Calloc((size_t)T->nmuts, sizeof(int32_t))))
        return PyErr_NoMemory(), -1;
    for (int32_t i = 0; i < T->nmuts; i++) {
        tv *x = &T->vals[T->muts[i]];
        if (x->pos > 0)
            return tr_break(T, "returning an input it updated in place");
        r->mut_in[r->nmut] = x->mut - 1;
        r->mut_out[r->nmut++] = T->g->nout;
        if (smelt_graph_output(T->g, x->node))
            return tr_break(T, "%s", T->g->err);
    }
    return 0;
}

/* Whether a value other than x that the trace can still reach (running
 * frames, values side effects will write) views x's node (through a chain
 * of view ops) or shares it: then an in-place update of x must reach that
 * value too. 1 / 0, -1 on error. */
int tr_aliased(tracer *T, int32_t x)
{
    int32_t target = T->vals[x].node;
    marker m = { .seen = PyMem_Calloc((size_t)T->nvals, 1) };
    int found = m.seen ? 0 : (PyErr_NoMemory(), -1);
    if (!found)
        found = mark_roots(T, &m);
    while (!found && m.n > 0) {
        int32_t v = m.todo[--m.n];
        if (m.seen[v])
            continue;
        m.seen[v] = 1;
        if (T->vals[v].kind == V_TENSOR && v != x) {
            for (int32_t n = T->vals[v].node; !found; n = T->g->nodes[n].src[0]) {
                found = n == target;
                if (smelt_op_kind_of((smelt_op)T->g->nodes[n].op) != SMELT_KIND_VIEW)
                    break;
            }
        }
        if (!found && mark_children(T, &m, v))
            found = -1;
    }
    PyMem_Free(m.seen);
    PyMem_Free(m.todo);
    return found;
}

/* Inlines a call of Python function fn (its identity is guarded where it
 * has a source; fn_src also roots the sources of its globals and cells). */
static int32_t inline_call(tracer *T, PyObject *fn, int32_t fn_src, const call_args *a)
{
    PyObject *co = PyFunction_GET_CODE(fn);
    tframe *f = frame_new(co, fn, PyFunction_GET_GLOBALS(fn), fn_src, code_trusted(co));
    if (!f)
        return -1;
    fdefaults d = { .pos = PyFunction_GET_DEFAULTS(fn), .kw = PyFunction_GET_KW_DEFAULTS(fn), .vpos = -1, .vkw = -1,
                    .fn_src = f->trusted ? -1 : fn_src };
    if (bind_args(T, f, (PyCodeObject *)co, &d, a)) {
        frame_free(f);
        return -1;
    }
    return enter_frame(T, f);
}

int32_t tr_inline(tracer *T, PyObject *fn, int32_t fn_src, const call_args *a)
{
    return inline_call(T, fn, fn_src, a);
}

/* Calls a function made in the traced code: its free variables are the
 * closure cells it captured. */
static int32_t call_vfunc(tracer *T, int32_t fv, const call_args *a)
{
    tv *x = &T->vals[fv];
    PyCodeObject *co = (PyCodeObject *)x->obj;
    tframe *f = frame_new(x->obj, NULL, x->aux, x->self_, x->pos);
    if (!f)
        return -1;
    int first_free = co->co_nlocalsplus - co->co_nfreevars;
    for (int i = 0; i < T->vals[fv].n && first_free + i < f->nlocals; i++)
        f->locals[first_free + i] = T->vals[fv].items[i];
    fdefaults d = { .vpos = T->vals[fv].sl[0], .vkw = T->vals[fv].sl[1], .fn_src = -1 };
    if (bind_args(T, f, co, &d, a)) {
        frame_free(f);
        return -1;
    }
    return enter_frame(T, f);
}

/* Gives V_FUNC fv the part `flag` names (MAKE_FUNCTION's flags in 3.11
 * and 3.12, SET_FUNCTION_ATTRIBUTE's argument in 3.13): 1 the defaults (a
 * tuple), 2 the keyword defaults (a dict), 4 the annotations (not kept),
 * 8 the closure (a tuple of cells). 0, or -1 (break). */
static int func_set_part(tracer *T, int32_t fv, int flag, int32_t v)
{
    switch (flag) {
    case 1:
        if (T->vals[v].kind != V_TUPLE)
            return tr_break(T, "function defaults");
        T->vals[fv].sl[0] = v;
        return 0;
    case 2:
        if ((v = tr_dict_value(T, v)) < 0)
            return -1;
        T->vals[fv].sl[1] = v;
        return 0;
    case 4:
        return 0;
    case 8:
        if (T->vals[v].kind != V_TUPLE)
            return tr_break(T, "function closure");
        for (int i = 0; i < T->vals[v].n; i++)
            if (tv_push_item(T, fv, T->vals[v].items[i], NULL))
                return -1;
        return 0;
    default:
        return tr_break(T, "function attribute %d", flag);
    }
}

/* MAKE_FUNCTION: pops code and the parts `flags` says are there (3.11,
 * 3.12; 3.13 passes 0 and sets each part by SET_FUNCTION_ATTRIBUTE). */
static int32_t make_function(tracer *T, tframe *f, int flags)
{
    int32_t code = f->stack[--f->sp];
    if (T->vals[code].kind != V_OBJ || !PyCode_Check(T->vals[code].obj))
        return tr_break(T, "MAKE_FUNCTION without a code object");
    int32_t fv = tv_new(T, V_FUNC);
    if (fv < 0)
        return -1;
    tv *x = &T->vals[fv];
    x->obj = T->vals[code].obj;
    x->aux = f->globals;
    x->self_ = f->func_src;
    x->pos = f->trusted;
    x->sl[0] = x->sl[1] = -1;
    for (int flag = 8; flag >= 1; flag >>= 1)   /* pushed defaults first, closure last */
        if ((flags & flag) && func_set_part(T, fv, flag, f->stack[--f->sp]))
            return -1;
    return fv;
}

/* SET_FUNCTION_ATTRIBUTE flag (3.13): [part, function] -> [function]. */
static int set_function_attribute(tracer *T, tframe *f, int flag)
{
    int32_t fv = f->stack[--f->sp], v = f->stack[f->sp - 1];
    if (T->vals[fv].kind != V_FUNC)
        return tr_break(T, "SET_FUNCTION_ATTRIBUTE on a %s", kind_name(T, fv));
    f->stack[f->sp - 1] = fv;
    return func_set_part(T, fv, flag, v);
}

/* ---------- calls ---------- */

/* torch.nn.Module, its __call__, the per-module hook dict names, and the
 * torch.nn.modules.module namespace (global hooks). */
static PyObject *module_type, *module_call, *hook_names, *module_ns;

static int ensure_nn(void)
{
    if (module_type)
        return 0;
    PyObject *nn = PyImport_ImportModule("torch.nn"), *mm = PyImport_ImportModule("torch.nn.modules.module");
    module_type = nn ? PyObject_GetAttrString(nn, "Module") : NULL;
    module_ns = mm ? PyModule_GetDict(mm) : NULL;
    Py_XDECREF(nn);
    Py_XDECREF(mm);   /* the module stays in sys.modules */
    module_call = module_type ? _PyType_Lookup((PyTypeObject *)module_type, s_call) : NULL;
    hook_names = Py_BuildValue("(ssss)", "_forward_hooks", "_forward_pre_hooks",
                               "_backward_hooks", "_backward_pre_hooks");
    return module_type && module_call && module_ns && hook_names ? 0 : -1;
}

/* Hooks registered for every module (register_module_forward_hook, ...)
 * change what any module call does: such a call is not traced. */
static int global_hooks_empty(tracer *T)
{
    static const char *names[] = { "_global_forward_hooks", "_global_forward_pre_hooks",
                                   "_global_backward_hooks", "_global_backward_pre_hooks" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        PyObject *d = PyDict_GetItemString(module_ns, names[i]);
        if (d && PyDict_Check(d) && PyDict_GET_SIZE(d))
            return tr_break(T, "global module hooks are registered");
    }
    return 0;
}

int tr_is_module(PyObject *o)
{
    if (ensure_nn()) {
        PyErr_Clear();
        return 0;
    }
    return PyObject_IsInstance(o, module_type) == 1;
}

/* A module's forward hooks, as nn.Module.__call__ runs them: pre-hooks
 * and hooks in their dicts' order, each called with or without kwargs
 * as registered. */
#define MAX_HOOKS 16
typedef struct mod_hooks {
    int n;
    int32_t fn[MAX_HOOKS];   /* the hook functions (values with sources) */
    uint8_t kw[MAX_HOOKS];   /* registered with_kwargs */
} mod_hooks;

/* The hooks in module value mv's hook dict `name`, their ids and order
 * guarded (TG_KEYS), each hook fetched from its own source; which were
 * registered with kwargs from the dict `kwname` (each id's presence
 * guarded). 0, or -1 (a break: too many hooks; or an error). */
static int read_hooks(tracer *T, int32_t mv, const char *name, const char *kwname, mod_hooks *h)
{
    PyObject *m = T->vals[mv].obj;
    PyObject *d = PyObject_GetAttrString(m, name), *kwd = d ? PyObject_GetAttrString(m, kwname) : NULL;
    PyObject *items = kwd && PyDict_Check(d) && PyDict_Check(kwd) ? PySequence_List(d) : NULL;   /* the ids, in order */
    PyObject *ids = items ? PyList_AsTuple(items) : NULL;
    int rc = -1;
    h->n = 0;
    if (!ids) {
        if (!PyErr_Occurred())
            tr_break(T, "module %s: hook dicts that are not dicts", Py_TYPE(m)->tp_name);
        goto out;
    }
    if (PyTuple_GET_SIZE(ids) > MAX_HOOKS) {
        tr_break(T, "module %s has more than %d hooks", Py_TYPE(m)->tp_name, MAX_HOOKS);
        goto out;
    }
    PyObject *nm = PyUnicode_InternFromString(name), *kwnm = PyUnicode_InternFromString(kwname);
    int32_t ds = nm ? tr_src_new(T, SRC_ATTR, T->vals[mv].src, 0, nm) : -1;
    int32_t ks = kwnm ? tr_src_new(T, SRC_ATTR, T->vals[mv].src, 0, kwnm) : -1;
    Py_XDECREF(nm);
    Py_XDECREF(kwnm);
    if (!nm || !kwnm || tr_add_guard(T, PyTuple_GET_SIZE(ids) ? TG_KEYS : TG_EMPTY, ds, ids, 0))   /* empty: a cheap check */
        goto out;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ids); i++) {
        PyObject *id = PyTuple_GET_ITEM(ids, i), *fn = PyDict_GetItemWithError(d, id);
        int kw = PyDict_Contains(kwd, id);
        if (!fn || kw < 0 || !PyLong_CheckExact(id) || tr_keep(T, id) || tr_add_guard(T, TG_HAS_KEY, ks, id, kw))
            goto out;
        if ((h->fn[h->n] = tv_obj(T, fn, tr_src_new(T, SRC_DICT, ds, 0, id))) < 0)
            goto out;
        h->kw[h->n++] = (uint8_t)kw;
    }
    rc = 0;
out:
    Py_XDECREF(d);
    Py_XDECREF(kwd);
    Py_XDECREF(items);
    Py_XDECREF(ids);
    return rc;
}

/* Backward hooks would be installed on the module's tensors: a module with
 * any is not traced; their empty dicts are guarded to stay empty. The
 * forward pre-hooks and hooks are read into pre and post. */
static int module_hooks(tracer *T, int32_t mv, mod_hooks *pre, mod_hooks *post)
{
    if (ensure_nn())
        return -1;
    for (Py_ssize_t i = 2; i < PyTuple_GET_SIZE(hook_names); i++) {
        PyObject *name = PyTuple_GET_ITEM(hook_names, i);
        PyObject *d = PyObject_GetAttr(T->vals[mv].obj, name);
        if (!d) {
            PyErr_Clear();
            continue;
        }
        int empty = d == Py_None || (PyDict_Check(d) && PyDict_GET_SIZE(d) == 0);
        Py_DECREF(d);
        if (!empty)
            return tr_break(T, "module %s has backward hooks registered", Py_TYPE(T->vals[mv].obj)->tp_name);
        int32_t s = tr_src_new(T, SRC_ATTR, T->vals[mv].src, 0, name);
        if (tr_add_guard(T, TG_EMPTY, s, NULL, 0))
            return -1;
    }
    return read_hooks(T, mv, "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", pre) ||
           read_hooks(T, mv, "_forward_hooks", "_forward_hooks_with_kwargs", post) ? -1 : 0;
}

/* Source of attribute `name` of value v's class (roots the globals and
 * cells of a method found there); -1 when v has no source. */
static int32_t class_attr_src(tracer *T, int32_t v, PyObject *name)
{
    int32_t t = tr_src_new(T, SRC_TYPE, T->vals[v].src, 0, NULL);
    return t < 0 ? -1 : tr_src_new(T, SRC_ATTR, t, 0, name);
}

/* Function fn, found on the class of object value v at class source fs,
 * is inlined: when it is user code (not torch's), it stays that function
 * on the class (a method replaced after the first call is seen). */
static int guard_method_id(tracer *T, int32_t v, int32_t fs, PyObject *fn)
{
    if (T->vals[v].src < 0 || fs < 0 || code_trusted(PyFunction_GET_CODE(fn)))
        return 0;
    return tr_add_guard(T, TG_ID, fs, fn, 0);
}

/* Calls special method `name` of V_OBJ v when v's class defines it as a
 * Python function outside torch (a user class's own __getitem__, __len__,
 * __iter__, __contains__, ...: the method is inlined, v's type guarded).
 * -2 when its class has no such method. */
/* The special methods of the containers smelt models itself (Sequential,
 * ModuleList, ModuleDict: children by position or name, module_items /
 * module_subscr): a set of functions. */
static PyObject *std_container_methods;

static int std_container_method(PyObject *fn)
{
    if (!std_container_methods) {
        PyObject *nn = PyImport_ImportModule("torch.nn"), *set = PySet_New(NULL);
        static const char *cls[] = { "Sequential", "ModuleList", "ModuleDict" };
        static const char *meth[] = { "__getitem__", "__iter__", "__len__", "__contains__" };
        for (size_t i = 0; nn && set && i < 3; i++) {
            PyObject *c = PyObject_GetAttrString(nn, cls[i]);
            for (size_t j = 0; c && j < 4; j++) {
                PyObject *f = PyObject_GetAttrString(c, meth[j]);
                if (f && PySet_Add(set, f) < 0)
                    PyErr_Clear();
                Py_XDECREF(f);
                PyErr_Clear();
            }
            Py_XDECREF(c);
        }
        Py_XDECREF(nn);
        PyErr_Clear();
        if (!set)
            return 0;
        std_container_methods = set;
    }
    return PySet_Contains(std_container_methods, fn) == 1;
}

int32_t tr_user_special(tracer *T, int32_t v, const char *name, const int32_t *args, int n)
{
    PyObject *o = T->vals[v].obj;
    PyObject *nm = PyUnicode_InternFromString(name);
    PyObject *fn = nm ? _PyType_Lookup(Py_TYPE(o), nm) : NULL;
    /* a user class's method; torch's own only for modules other than the
     * containers smelt models (ParameterList, ParameterDict, ...) */
    int inline_it = fn && PyFunction_Check(fn) && n <= 8 &&
                    (!code_trusted(PyFunction_GET_CODE(fn)) || (tr_is_module(o) && !std_container_method(fn)));
    if (!inline_it) {
        Py_XDECREF(nm);
        return nm ? -2 : -1;
    }
    int32_t pos[9] = { v };
    memcpy(pos + 1, args, sizeof(int32_t) * (size_t)n);
    call_args a = { .pos = pos, .npos = n + 1 };
    int32_t fs = class_attr_src(T, v, nm);
    Py_DECREF(nm);
    if (tr_add_guard(T, TG_TYPE, T->vals[v].src, (PyObject *)Py_TYPE(o), 0) || tr_keep(T, fn) ||
        guard_method_id(T, v, fs, fn))
        return -1;
    return inline_call(T, fn, fs, &a);
}

/* Prepends value self to a call's positional arguments (pos: room for 64). */
static int with_self(tracer *T, int32_t self, const call_args *a, call_args *b, int32_t *pos)
{
    if (a->npos >= 63)
        return tr_break(T, "too many arguments");
    pos[0] = self;
    memcpy(pos + 1, a->pos, sizeof(int32_t) * (size_t)a->npos);
    *b = *a;
    b->pos = pos;
    b->npos = a->npos + 1;
    return 0;
}

/* forward(module, *args, **kwargs) for a V_TUPLE args and a V_DICT kw. */
static int32_t call_forward(tracer *T, PyObject *fwd, int32_t fwd_src, int32_t mv, int32_t args, int32_t kw)
{
    int32_t pos[64], kwv[32];
    PyObject *kwn[32];
    tv *t = &T->vals[args], *d = &T->vals[kw];
    if (t->n > 63 || d->n > 32)
        return tr_break(T, "too many arguments");
    pos[0] = mv;
    memcpy(pos + 1, t->items, sizeof(int32_t) * (size_t)t->n);
    for (int i = 0; i < d->n; i++) {
        if (!PyUnicode_Check(d->keys[i]))
            return tr_break(T, "keywords must be strings");
        kwn[i] = d->keys[i];
        kwv[i] = d->items[i];
    }
    call_args b = { .pos = pos, .npos = t->n + 1, .kwn = kwn, .kwv = kwv, .nkw = d->n };
    return inline_call(T, fwd, fwd_src, &b);
}

/* 1 if value v is None. */
static int is_none_value(tracer *T, int32_t v)
{
    return T->vals[v].kind == V_OBJ && T->vals[v].obj == Py_None;
}

/* The forward pre-hooks of a module call: each hook(module, args) or
 * hook(module, args, kwargs) in order; a result other than None replaces
 * args (a non-tuple is wrapped) or (args, kwargs), as nn.Module.__call__
 * does. 0, or -1. */
static int run_pre_hooks(tracer *T, int32_t mv, const mod_hooks *h, int32_t *args, int32_t *kw)
{
    for (int i = 0; i < h->n; i++) {
        int32_t pos[3] = { mv, *args, *kw };
        call_args a = { .pos = pos, .npos = h->kw[i] ? 3 : 2 };
        int32_t r = tr_call(T, h->fn[i], &a);
        if (r < 0)
            return -1;
        if (is_none_value(T, r))
            continue;
        tv *x = &T->vals[r];
        if (h->kw[i]) {
            if (x->kind != V_TUPLE || x->obj || x->n != 2 || T->vals[x->items[1]].kind != V_DICT ||
                T->vals[x->items[0]].kind != V_TUPLE)
                return tr_break(T, "a forward pre-hook with kwargs returned something other than (args, kwargs)");
            *kw = T->vals[r].items[1];
            *args = T->vals[r].items[0];
        } else {
            *args = x->kind == V_TUPLE && !x->obj ? r : tv_tuple(T, &r, 1);
            if (*args < 0)
                return -1;
        }
    }
    return 0;
}

/* The forward hooks: hook(module, args, result) or hook(module, args,
 * kwargs, result); a result other than None replaces the call's. */
static int run_post_hooks(tracer *T, int32_t mv, const mod_hooks *h, int32_t args, int32_t kw, int32_t *res)
{
    for (int i = 0; i < h->n; i++) {
        int32_t pos[4] = { mv, args, kw, *res };
        if (!h->kw[i])
            pos[2] = *res;
        call_args a = { .pos = pos, .npos = h->kw[i] ? 4 : 3 };
        int32_t r = tr_call(T, h->fn[i], &a);
        if (r < 0)
            return -1;
        if (!is_none_value(T, r))
            *res = r;
    }
    return 0;
}

/* module(*a): nn.Module.__call__, its forward hooks and pre-hooks run as
 * it runs them (inlined, each hook guarded by its id and identity). */
static int32_t call_module(tracer *T, int32_t mv, const call_args *a)
{
    int32_t inner = obj_compiled_inner(T, mv);   /* a smelt.compile'd submodule: its original's call */
    if (inner != -2)
        return inner < 0 ? -1 : call_module(T, inner, a);
    tv *m = &T->vals[mv];
    mod_hooks pre, post;
    if (tr_add_guard(T, TG_TYPE, m->src, (PyObject *)Py_TYPE(m->obj), 0) || module_hooks(T, mv, &pre, &post) ||
        global_hooks_empty(T))
        return -1;
    PyObject *inst = PyObject_GenericGetDict(T->vals[mv].obj, NULL);
    int own_forward = inst && PyDict_GetItemWithError(inst, s_forward) != NULL;
    Py_XDECREF(inst);
    if (PyErr_Occurred())
        return -1;
    PyObject *callfn = _PyType_Lookup(Py_TYPE(T->vals[mv].obj), s_call);
    if (callfn != module_call) {   /* the class's own __call__ runs (forward and hooks only if it calls them) */
        if (!callfn || !PyFunction_Check(callfn))
            return tr_break(T, "module %s has a __call__ that is not a Python function", Py_TYPE(T->vals[mv].obj)->tp_name);
        int32_t cs = class_attr_src(T, mv, s_call), pos[64];
        call_args b;
        if (tr_keep(T, callfn) || guard_method_id(T, mv, cs, callfn) || with_self(T, mv, a, &b, pos))
            return -1;
        return inline_call(T, callfn, cs, &b);
    }
    if (own_forward) {   /* m.forward = fn on the instance: what nn.Module.__call__ calls */
        if (pre.n || post.n)
            return tr_break(T, "module %s with hooks overrides forward per instance", Py_TYPE(T->vals[mv].obj)->tp_name);
        int32_t f = tr_load_attr(T, mv, s_forward);
        return f < 0 ? -1 : tr_call(T, f, a);
    }
    if (tr_add_guard(T, TG_HAS_KEY, tr_src_new(T, SRC_ATTR, T->vals[mv].src, 0, s_dict), s_forward, 0))
        return -1;   /* an instance forward assigned later must be seen */
    PyObject *fwd = _PyType_Lookup(Py_TYPE(T->vals[mv].obj), s_forward);
    if (!fwd || !PyFunction_Check(fwd))
        return tr_break(T, "forward of %s is not a Python function", Py_TYPE(T->vals[mv].obj)->tp_name);
    if (tr_keep(T, fwd))
        return -1;
    int32_t fsrc = class_attr_src(T, mv, s_forward);
    if (guard_method_id(T, mv, fsrc, fwd))
        return -1;
    if (!pre.n && !post.n) {
        int32_t pos[64];
        call_args b;
        return with_self(T, mv, a, &b, pos) ? -1 : inline_call(T, fwd, fsrc, &b);
    }
    int32_t args = tv_tuple(T, a->pos, a->npos), kw = tv_new(T, V_DICT);
    for (int i = 0; kw >= 0 && i < a->nkw; i++)
        if (tv_push_item(T, kw, a->kwv[i], a->kwn[i]))
            return -1;
    if (args < 0 || kw < 0 || run_pre_hooks(T, mv, &pre, &args, &kw))
        return -1;
    int32_t res = call_forward(T, fwd, fsrc, mv, args, kw);
    return res < 0 || run_post_hooks(T, mv, &post, args, kw, &res) ? -1 : res;
}

static int32_t call_super(tracer *T, const call_args *a);

/* A readable name for callable o ("torch.randn", "builtins.print"). */
static PyObject *callable_name(PyObject *o)
{
    int builtin = PyCFunction_Check(o);   /* torch.randn's __qualname__ names torch's internal class */
    PyObject *mod = PyObject_GetAttrString(o, "__module__");
    PyObject *qn = PyObject_GetAttrString(o, builtin ? "__name__" : "__qualname__");
    PyErr_Clear();
    PyObject *r;
    if (qn && PyUnicode_Check(qn))
        r = mod && PyUnicode_Check(mod) ? PyUnicode_FromFormat("%U.%U", mod, qn) : Py_NewRef(qn);
    else
        r = PyUnicode_FromFormat("a %s object", Py_TYPE(o)->tp_name);
    Py_XDECREF(mod);
    Py_XDECREF(qn);
    return r;
}

static int32_t call_unknown(tracer *T, PyObject *o)
{
    PyObject *n = callable_name(o);
    if (!n)
        return -1;
    tr_break(T, "call of %U is not supported", n);
    Py_DECREF(n);
    return -1;
}

/* torch.no_grad() / torch.inference_mode(): a grad-mode manager
 * (objects.c) `with` can enter. */
static int32_t grad_off_manager(tracer *T, const call_args *a)
{
    if (a->nkw || a->npos > 1)
        return tr_break(T, "grad-mode context manager arguments");
    PyObject *m = a->npos ? tr_const(T, a->pos[0]) : Py_True;
    if (!m)
        return -1;
    if (m != Py_True)
        return tr_break(T, "inference_mode(%R) is not supported", m);
    return obj_grad_manager(T, 0);
}

/* A bound method object (o.method fetched as an object): its function
 * inlined with its __self__ first. */
static int32_t call_method_obj(tracer *T, int32_t fn, const call_args *a)
{
    PyObject *m = T->vals[fn].obj, *func = PyMethod_GET_FUNCTION(m);
    int32_t self = tv_obj(T, PyMethod_GET_SELF(m), tr_src_new(T, SRC_ATTR, T->vals[fn].src, 0, s_self));
    int32_t pos[64];
    call_args b;
    if (self < 0 || with_self(T, self, a, &b, pos))
        return -1;
    int32_t r = obj_call_special_fn(T, func, -1, &b);   /* an lru_cache wrapper as a method */
    if (r != -2)
        return r;
    return PyFunction_Check(func) ? inline_call(T, func, -1, &b) : call_unknown(T, func);
}

/* torch.autograd.Function.apply, FunctionCtx and the base setup_context
 * (looked up on first use). */
static PyObject *fn_apply, *fn_ctx_type, *fn_base_setup;

static int autograd_fn_init(void)
{
    if (fn_apply)
        return 0;
    PyObject *m = PyImport_ImportModule("torch.autograd.function");
    PyObject *F = m ? PyObject_GetAttrString(m, "Function") : NULL;
    PyObject *ap = F ? PyObject_GetAttrString(F, "apply") : NULL;
    PyObject *base = m ? PyObject_GetAttrString(m, "_SingleLevelFunction") : NULL;
    fn_base_setup = base ? PyObject_GetAttrString(base, "setup_context") : NULL;
    fn_ctx_type = m ? PyObject_GetAttrString(m, "FunctionCtx") : NULL;
    fn_apply = ap && PyMethod_Check(ap) ? Py_NewRef(PyMethod_GET_FUNCTION(ap)) : NULL;
    Py_XDECREF(ap);
    Py_XDECREF(F);
    Py_XDECREF(base);
    Py_XDECREF(m);
    return fn_apply && fn_ctx_type && fn_base_setup ? 0 : -1;
}

/* Whether a custom autograd.Function's backward can matter: grad mode is
 * on, outside the trace and in it, and a graph input so far requires
 * grad. */
static int backward_matters(tracer *T)
{
    if (T->no_grad != 0)
        return 0;   /* off in the trace; turned on in it: no input may require grad */
    PyObject *ge = PyObject_CallMethod(PyImport_AddModule("torch"), "is_grad_enabled", NULL);
    int on = ge == Py_True;
    Py_XDECREF(ge);
    uint8_t *rg = on ? tracer_inputs_requiring_grad(T->r) : NULL;
    int needs = 0;
    for (int32_t k = 0; rg && !needs && k < T->r->ninputs; k++)
        needs = rg[k];
    PyMem_Free(rg);
    PyErr_Clear();
    return needs;
}

/* cls.apply(*args) of a torch.autograd.Function subclass (cls a value).
 * Where its backward can matter (backward_matters) it is a host call of
 * cls.apply: the forward plan runs it, and the backward plan's VJP host
 * call runs it again under grad, so that autograd calls cls.backward (a
 * forward a meta run cannot take breaks the trace). Elsewhere what it
 * computes is cls.forward, inlined, run with a FunctionCtx made in the
 * trace (or without one when the class defines setup_context). */
static int32_t autograd_apply(tracer *T, int32_t cls, const call_args *a)
{
    PyObject *c = T->vals[cls].obj;
    if (backward_matters(T)) {
        PyObject *ap = PyObject_GetAttrString(c, "apply");
        int32_t r = !ap ? -1 : !tr_const(T, cls) ? -1 : ext_call_unseeded(T, ap, a);   /* the class itself guarded */
        Py_XDECREF(ap);
        if (r != -2)
            return r;
    }
    PyObject *fwd = PyObject_GetAttrString(c, "forward"), *setup = PyObject_GetAttrString(c, "setup_context");
    int32_t r = -1;
    if (!fwd || !setup || !PyFunction_Check(fwd) || tr_keep(T, fwd)) {
        if (fwd && setup)
            r = tr_break(T, "autograd.Function %s without a Python forward", ((PyTypeObject *)c)->tp_name);
        goto out;
    }
    int with_ctx = PyMethod_Check(setup) ? PyMethod_GET_FUNCTION(setup) == fn_base_setup : setup == fn_base_setup;
    T->grad_sensitive = "a torch.autograd.Function (its own backward)";
    int32_t pos[65], ctxcls = tv_obj(T, fn_ctx_type, -1);
    call_args none = { 0 };
    pos[0] = with_ctx && ctxcls >= 0 ? obj_new_instance(T, ctxcls, &none) : 0;
    if (pos[0] < 0 || a->npos > 63)
        goto out;
    memcpy(pos + with_ctx, a->pos, sizeof(int32_t) * (size_t)a->npos);
    call_args b = *a;
    b.pos = pos;
    b.npos = a->npos + with_ctx;
    r = !tr_const(T, cls) ? -1 : inline_call(T, fwd, -1, &b);   /* the class itself guarded */
out:
    Py_XDECREF(fwd);
    Py_XDECREF(setup);
    return r;
}

static int32_t call_bound(tracer *T, int32_t fn, const call_args *a)
{
    tv *f = &T->vals[fn];
    int32_t self = f->self_, pos[64];
    call_args b;
    if (!PyUnicode_Check(f->obj) && !autograd_fn_init() && f->obj == fn_apply && T->vals[self].kind == V_OBJ &&
        PyType_Check(T->vals[self].obj))
        return autograd_apply(T, self, a);
    PyErr_Clear();
    if (with_self(T, self, a, &b, pos))
        return -1;
    if (PyUnicode_Check(f->obj)) {
        if (T->vals[self].kind == V_TENSOR)
            return ops_call_method(T, f->obj, &b);
        return bi_method(T, self, f->obj, a);
    }
    int32_t r = ops_call_torch(T, f->obj, &b);
    if (r == -2)
        r = obj_call_special_fn(T, f->obj, f->src, &b);
    if (r != -2)
        return r;
    if (PyFunction_Check(f->obj))
        return inline_call(T, f->obj, f->src, &b);
    r = obj_cmethod(T, f->obj, &b);
    return r != -2 ? r : call_unknown(T, f->obj);
}

static int exc_class_plain(PyObject *o);

int tr_is_module_class(PyObject *cls)
{
    if (ensure_nn()) {
        PyErr_Clear();
        return 0;
    }
    return PyType_Check(cls) && PyType_IsSubtype((PyTypeObject *)cls, (PyTypeObject *)module_type);
}

/* A module of one of torch's own classes made in the traced code with
 * constant arguments (`nn.Softmax(dim=-1)(x)`): made now, a constant of
 * the trace. One that holds parameters or buffers (random initial
 * weights, state) is not: a break. -2 for classes defined outside torch. */
static int32_t new_torch_module(tracer *T, PyObject *cls, const call_args *a)
{
    PyObject *mod = PyObject_GetAttrString(cls, "__module__");
    const char *mn = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
    int torch_cls = mn && !strncmp(mn, "torch.", 6);
    Py_XDECREF(mod);
    PyErr_Clear();
    if (!torch_cls)
        return -2;
    PyObject *torch = PyImport_AddModule("torch");   /* borrowed */
    PyObject *rng = torch ? PyObject_CallMethod(torch, "get_rng_state", NULL) : NULL;
    if (!rng)
        return -1;
    int32_t m = bi_pure(T, a, cls);
    PyObject *back = PyObject_CallMethod(torch, "set_rng_state", "O", rng);   /* initialising weights draws numbers */
    Py_DECREF(rng);
    if (!back)
        return -1;
    Py_DECREF(back);
    if (m < 0)
        return -1;
    PyObject *o = T->vals[m].obj;
    PyObject *state = PyObject_CallMethod(o, "state_dict", NULL);
    Py_ssize_t n = state ? PyObject_Length(state) : -1;
    Py_XDECREF(state);
    if (n != 0) {
        PyErr_Clear();
        return tr_break(T, "a %s module with parameters or buffers made in the traced code", ((PyTypeObject *)cls)->tp_name);
    }
    return m;
}

static int32_t call_module_slice(tracer *T, int32_t fn, const call_args *a);

/* ref() of a weakref from outside, in torch's own code (guarded by
 * identity, so a new reference makes a new entry): its referent when that
 * is a tensor the trace already reached through a source (nn.LSTM compares
 * its weights with weakrefs it refreshes whenever a weight is assigned);
 * anything else breaks. The referent is not guarded (no source reaches
 * it), which is why user code's weakrefs are not followed. */
static int32_t weakref_call(tracer *T, PyObject *ref)
{
    PyObject *o = smelt_weakref_target(ref);
    if (o == Py_None)
        return tr_break(T, "call of a dead weakref");
    PyObject *key = ops_is_tensor(o) ? PyLong_FromVoidPtr(o) : NULL;
    PyObject *have = key ? PyDict_GetItemWithError(T->tensor_of, key) : NULL;
    Py_XDECREF(key);
    if (!have)
        return PyErr_Occurred() ? -1 : tr_break(T, "call of a weakref to an object the trace has not reached");
    return (int32_t)PyLong_AsLong(have);
}

/* Calls value fn with arguments a. */
int32_t tr_call(tracer *T, int32_t fn, const call_args *a)
{
    tv *f = &T->vals[fn];
    if (f->kind == V_BOUND)
        return call_bound(T, fn, a);
    if (f->kind == V_FUNC)
        return call_vfunc(T, fn, a);
    if (f->kind == V_INST)
        return obj_call(T, fn, a);
    if (f->kind == V_LIST && f->obj)
        return call_module_slice(T, fn, a);
    if (f->kind != V_OBJ)
        return tr_break(T, "call of a %s", kind_name(T, fn));
    PyObject *o = f->obj;
    if (obj_is_build_class(o))
        return obj_build_class(T, a);
    int32_t r = obj_call_object(T, fn, a);   /* functools.partial: its parts guarded instead */
    if (r != -2)
        return r;
    /* a callable fetched from a source must stay the same object (modules
     * are guarded by type and structure instead, in call_module) */
    if (f->src >= 0 && !tr_is_module(o) && !tr_const(T, fn))
        return -1;
    if (PyWeakref_CheckRefExact(o) && a->npos == 0 && a->nkw == 0 && f->src >= 0 && T->frame && T->frame->trusted)
        return weakref_call(T, o);
    r = obj_query(T, o, a);
    if (r == -2)
        r = ops_call_torch(T, o, a);
    if (r != -2)
        return r;
    if (tr_is_module(o))
        return call_module(T, fn, a);
    if ((r = obj_call_special_fn(T, o, T->vals[fn].src, a)) != -2)
        return r;
    if (PyFunction_Check(o)) {
        if (!tr_const(T, fn))
            return -1;
        return inline_call(T, o, T->vals[fn].src, a);
    }
    if (PyMethod_Check(o))
        return call_method_obj(T, fn, a);
    if (o == (PyObject *)&PySuper_Type)
        return call_super(T, a);
    if (o == ctx_classes[0] || o == ctx_classes[1])
        return grad_off_manager(T, a);
    if (obj_is_autocast(o))
        return obj_autocast_manager(T, a);
    r = bi_call(T, o, a);
    if (r == -2 && PyExceptionClass_Check(o) && exc_class_plain(o))
        r = bi_pure(T, a, o);   /* an exception instance, for `raise` */
    if (r == -2 && PyType_Check(o) && tr_is_module_class(o))
        r = new_torch_module(T, o, a);
    if (r == -2 && PyType_Check(o))
        r = obj_new_instance(T, fn, a);
    if (r == -2)
        r = obj_cmethod(T, o, a);   /* object.__setattr__(inst, ...), dict.__setitem__(inst, ...) */
    return r != -2 ? r : call_unknown(T, o);
}

/* ---------- attributes ---------- */

/* Absence of attribute `name` of object value v, guarded as the absence
 * of that key in each dict the attribute could be added to (the
 * instance's __dict__; a module's parameters, buffers and children). */
int tr_guard_absent(tracer *T, int32_t v, PyObject *name)
{
    PyObject *o = T->vals[v].obj;
    int32_t src = T->vals[v].src;
    PyObject *names[4] = { s_dict, s_params, s_buffers, s_modules };
    for (int i = 0; i < (tr_is_module(o) ? 4 : 1); i++) {
        PyObject *d = PyObject_GetAttr(o, names[i]);
        if (!d) {
            PyErr_Clear();
            continue;
        }
        int isd = PyDict_Check(d);
        Py_DECREF(d);
        if (isd && tr_add_guard(T, TG_HAS_KEY, tr_src_new(T, SRC_ATTR, src, 0, names[i]), name, 0))
            return -1;
    }
    return 0;
}

/* An attribute set on the tensor object of graph input v (`x.tag = 1`):
 * its value, fetched from its own source. -2 when the tensor has no such
 * instance attribute (a tensor made in the trace never has one); with
 * guard_absent, that absence is guarded by the length of its __dict__. */
int32_t tr_tensor_inst_attr(tracer *T, int32_t v, PyObject *name, int guard_absent)
{
    PyObject *t = tr_tensor_obj(T, v);
    if (!t)
        return -2;
    int32_t ov;
    if (T->nattrw && obj_overlay_get(T, t, name, &ov))   /* assigned (or deleted) by the trace */
        return ov >= 0 ? ov : -2;
    PyObject *d = PyObject_GenericGetDict(t, NULL);
    if (!d) {
        PyErr_Clear();
        return -2;
    }
    PyObject *a = PyDict_Check(d) ? PyDict_GetItemWithError(d, name) : NULL;
    int32_t src = T->vals[v].src, r = -2;
    if (a)
        r = tv_obj(T, a, tr_src_new(T, SRC_ATTR, src, 0, name));
    else if (PyErr_Occurred())
        r = -1;
    else if (guard_absent && (tr_add_guard(T, TG_HAS_KEY, tr_src_new(T, SRC_ATTR, src, 0, s_dict), name, 0) ||
                              tr_add_guard(T, TG_HAS_KEY, tr_src_new(T, SRC_ATTR, tr_src_new(T, SRC_TYPE, src, 0, NULL),
                                                                     0, s_dict), name, 0)))
        r = -1;   /* nor added to its class later (torch.Tensor.extra = ...) */
    Py_DECREF(d);
    return r;
}

/* A user class's attribute ca (a function, property, static or class
 * method defined outside torch) found for object value v: it stays that
 * object on the class (identity), and no instance attribute of the same
 * name appears to shadow it (monkeypatching after the first call). */
static int guard_class_attr(tracer *T, int32_t v, PyObject *name, PyObject *ca)
{
    int sm = PyObject_TypeCheck(ca, &PyStaticMethod_Type), cm = PyObject_TypeCheck(ca, &PyClassMethod_Type);
    PyObject *fn = sm || cm ? PyObject_GetAttrString(ca, "__func__")
                 : PyObject_TypeCheck(ca, &PyProperty_Type) ? PyObject_GetAttrString(ca, "fget") : Py_XNewRef(ca);
    PyErr_Clear();
    int user = fn && PyFunction_Check(fn) && !code_trusted(PyFunction_GET_CODE(fn));
    int rc = 0;
    if (user && T->vals[v].src >= 0 && !tr_keep(T, fn)) {
        /* what reading the attribute from the class gives: the function
         * itself for functions and static methods, the property object, a
         * new bound method for a class method (its __func__ is guarded) */
        int32_t src = class_attr_src(T, v, name);
        if (cm)
            src = tr_src_new(T, SRC_ATTR, src, 0, s_func);
        PyObject *d = PyObject_GenericGetDict(T->vals[v].obj, NULL);
        int has_dict = d && PyDict_Check(d);
        Py_XDECREF(d);
        PyErr_Clear();
        rc = tr_add_guard(T, TG_ID, src, sm || cm ? fn : ca, 0) ||
             (has_dict && tr_add_guard(T, TG_HAS_KEY, tr_src_new(T, SRC_ATTR, T->vals[v].src, 0, s_dict), name, 0));
    }
    Py_XDECREF(fn);
    return rc;
}

/* A plain value set on a tensor's class (torch.Tensor.extra = 2.0):
 * read from its source, type(x).name; -2 when the class has none (or a
 * descriptor: a method or property of torch's). */
static int32_t tensor_class_value(tracer *T, int32_t v, PyObject *name)
{
    PyObject *tp = T->vals[v].obj ? T->vals[v].obj : ops_tensor_type();
    PyObject *ca = _PyType_Lookup((PyTypeObject *)tp, name);
    if (!ca || Py_TYPE(ca)->tp_descr_get)
        return -2;
    if (T->vals[v].src < 0)
        return tr_break(T, "class attribute %U of a tensor made in the traced code", name);
    return tv_obj(T, ca, tr_src_new(T, SRC_ATTR, tr_src_new(T, SRC_TYPE, T->vals[v].src, 0, NULL), 0, name));
}

/* Attribute found on the class: property getters are traced, staticmethod
 * and classmethod unwrapped, functions bound. -2: not such a descriptor. */
static int32_t class_descr(tracer *T, int32_t v, PyObject *name, PyObject *ca)
{
    if (T->vals[v].kind == V_OBJ && (PyFunction_Check(ca) || PyObject_TypeCheck(ca, &PyProperty_Type) ||
        PyObject_TypeCheck(ca, &PyStaticMethod_Type) || PyObject_TypeCheck(ca, &PyClassMethod_Type)) &&
        guard_class_attr(T, v, name, ca))
        return -1;
    if (PyObject_TypeCheck(ca, &PyProperty_Type)) {
        PyObject *get = PyObject_GetAttrString(ca, "fget");
        int32_t r = -1;
        if (get && PyFunction_Check(get) && !tr_keep(T, get)) {
            call_args a = { .pos = &v, .npos = 1 };
            r = inline_call(T, get, -1, &a);
        } else if (get) {
            r = tr_break(T, "property %U without a Python getter", name);
        }
        Py_XDECREF(get);
        return r;
    }
    if (PyFunction_Check(ca))
        return tv_bound(T, ca, v, class_attr_src(T, v, name));
    if (PyObject_TypeCheck(ca, &PyStaticMethod_Type) || PyObject_TypeCheck(ca, &PyClassMethod_Type)) {
        PyObject *fn = PyObject_GetAttrString(ca, "__func__");
        int32_t r = -1;
        if (fn && PyObject_TypeCheck(ca, &PyStaticMethod_Type))
            r = tv_obj(T, fn, -1);
        else if (fn && PyFunction_Check(fn))
            r = tv_bound(T, fn, tv_obj(T, (PyObject *)Py_TYPE(T->vals[v].obj), -1), -1);
        else if (fn)
            r = tr_break(T, "classmethod %U", name);
        Py_XDECREF(fn);
        return r;
    }
    return -2;
}

/* module.name: class data descriptors, the instance dict, class methods,
 * then parameters, buffers and submodules, as nn.Module resolves them.
 * Modules are guarded by type, their attributes by source. -2 (with the
 * absence guarded) when missing and missing_ok. */
int32_t tr_module_attr(tracer *T, int32_t mv, PyObject *name, int missing_ok)
{
    PyObject *o = T->vals[mv].obj;
    int32_t src = T->vals[mv].src;
    if (tr_add_guard(T, TG_TYPE, src, (PyObject *)Py_TYPE(o), 0))
        return -1;
    PyObject *ca = _PyType_Lookup(Py_TYPE(o), name);
    if (ca && PyObject_TypeCheck(ca, &PyProperty_Type))
        return class_descr(T, mv, name, ca);
    static const char *stores[] = { "_parameters", "_buffers", "_modules" };
    PyObject *dict = PyObject_GenericGetDict(o, NULL);
    if (!dict)
        return -1;
    PyObject *inst = PyDict_GetItemWithError(dict, name);
    if (inst) {
        Py_DECREF(dict);
        return tv_obj(T, inst, tr_src_new(T, SRC_ATTR, src, 0, name));
    }
    int32_t r = ca ? class_descr(T, mv, name, ca) : -2;
    if (r != -2) {
        Py_DECREF(dict);
        return r;
    }
    for (int i = 0; i < 3; i++) {
        PyObject *store = PyDict_GetItemString(dict, stores[i]);
        PyObject *v = store ? PyDict_GetItemWithError(store, name) : NULL;
        if (!v)
            continue;
        int32_t ssrc = tr_src_new(T, SRC_ATTR, src, 0, i == 0 ? s_params : i == 1 ? s_buffers : s_modules);
        Py_DECREF(dict);
        return tv_obj(T, v, tr_src_new(T, SRC_DICT, ssrc, 0, name));
    }
    Py_DECREF(dict);
    if (ca && !PyObject_HasAttrString(ca, "__get__"))
        return tv_obj(T, ca, tr_src_new(T, SRC_ATTR, src, 0, name));
    if (ca)
        return tr_break(T, "attribute %U of module %s (a descriptor)", name, Py_TYPE(o)->tp_name);
    if (missing_ok)
        return tr_guard_absent(T, mv, name) ? -1 : -2;
    return tr_break(T, "module %s has no attribute %U", Py_TYPE(o)->tp_name, name);
}

/* Attribute of an object known at trace time (not a module): methods of
 * Python classes are bound, properties traced; everything else is read
 * now (type guarded, the attribute fetched from its source). */
static int32_t object_attr(tracer *T, int32_t v, PyObject *name)
{
    PyObject *o = T->vals[v].obj;
    int32_t src = T->vals[v].src;
    if (PyModule_Check(o)) {
        if (!is_trusted_module(o) && tr_add_guard(T, TG_ID, src, o, 0))
            return -1;
    } else if (tr_add_guard(T, TG_TYPE, src, (PyObject *)Py_TYPE(o), 0)) {
        return -1;
    }
    if (!PyType_Check(o) && !PyModule_Check(o)) {
        PyObject *ca = _PyType_Lookup(Py_TYPE(o), name);
        PyObject *dict = ca ? PyObject_GenericGetDict(o, NULL) : NULL;
        PyErr_Clear();
        int in_inst = dict && PyDict_GetItemWithError(dict, name) != NULL;
        Py_XDECREF(dict);
        if (ca && (!in_inst || PyObject_TypeCheck(ca, &PyProperty_Type))) {
            int32_t r = class_descr(T, v, name, ca);
            if (r != -2)
                return r;
        }
    }
    PyObject *a = PyObject_GetAttr(o, name);
    if (!a && !PyModule_Check(o) && !PyType_Check(o) && PyErr_ExceptionMatches(PyExc_AttributeError))
        return tr_guard_absent(T, v, name) ? -1 : tr_raise_error(T);   /* the attribute stays missing */
    if (!a) {
        PyErr_Clear();
        return tr_break(T, "attribute %U of %s raised", name, Py_TYPE(o)->tp_name);
    }
    int32_t r;
    if (PyMethod_Check(a) && PyMethod_GET_SELF(a) == o && !tr_keep(T, PyMethod_GET_FUNCTION(a)))   /* made anew */
        r = tv_bound(T, PyMethod_GET_FUNCTION(a), v, tr_src_new(T, SRC_ATTR, tr_src_new(T, SRC_ATTR, src, 0, name), 0, s_func));
    else if (!PyModule_Check(o) && PyCFunction_Check(a) && PyCFunction_GET_SELF(a) == o)
        r = tr_const(T, v) ? tv_obj(T, a, -1) : -1;   /* likewise; it works on o itself, guarded */
    else
        r = PyErr_Occurred() ? -1 : tv_obj(T, a, tr_src_new(T, SRC_ATTR, src, 0, name));   /* torch.* too: monkeypatching */
    Py_DECREF(a);
    return r;
}

/* super().name: a method of a base class, bound to the same self. */
static int32_t super_attr(tracer *T, int32_t v, PyObject *name)
{
    PyObject *a = PyObject_GetAttr(T->vals[v].obj, name);
    if (!a) {
        PyErr_Clear();
        return tr_break(T, "super().%U raised", name);
    }
    int32_t self = T->vals[v].self_, r;
    PyObject *so = T->vals[self].obj;
    if (PyMethod_Check(a) && PyMethod_GET_SELF(a) == so)
        r = tv_bound(T, PyMethod_GET_FUNCTION(a), self, -1);
    else if (PyCFunction_Check(a) && PyCFunction_GET_SELF(a) == so && PyDict_Check(so)) {
        int32_t d = dict_snapshot(T, self, 1);   /* dict's own method on a dict subclass */
        r = d < 0 ? -1 : tv_bound(T, name, d, -1);
    } else
        r = tv_obj(T, a, -1);
    Py_DECREF(a);
    return r;
}

/* Field `name` of a named tuple value (torch.return_types.max(...).values). */
static int32_t tuple_field(tracer *T, int32_t v, PyObject *name)
{
    PyObject *idx = PyTuple_New(T->vals[v].n);
    for (int i = 0; idx && i < T->vals[v].n; i++)
        PyTuple_SET_ITEM(idx, i, PyLong_FromLong(i));
    PyObject *probe = idx ? PyObject_CallOneArg(T->vals[v].obj, idx) : NULL;
    PyObject *f = probe ? PyObject_GetAttr(probe, name) : NULL;
    Py_XDECREF(idx);
    Py_XDECREF(probe);
    PyErr_Clear();
    int32_t r = -2;
    if (f && PyLong_CheckExact(f)) {
        long i = PyLong_AsLong(f);
        r = i >= 0 && i < T->vals[v].n ? T->vals[v].items[i] : -2;
    }
    Py_XDECREF(f);
    return r;
}

int32_t tr_load_attr(tracer *T, int32_t v, PyObject *name)
{
    tv *x = &T->vals[v];
    if (x->kind != V_INST && PyUnicode_CompareWithASCIIString(name, "__class__") == 0)
        return bi_type_value(T, v);   /* type(v), guarded */
    int32_t ov;
    if (x->kind == V_OBJ && T->nattrw && obj_overlay_get(T, x->obj, name, &ov))
        return ov >= 0 ? ov : tr_break(T, "attribute %U was deleted by the traced code", name);
    if (x->kind == V_OBJ && T->nattrw && obj_overlaid(T, x->obj) && PyUnicode_CompareWithASCIIString(name, "__dict__") == 0)
        return tr_break(T, "__dict__ of an object whose attributes the traced code assigned");
    switch (x->kind) {
    case V_TENSOR: {
        int32_t r = ops_tensor_attr(T, v, name);
        if (r == -2)
            r = tr_tensor_inst_attr(T, v, name, 0);
        if (r == -2)
            r = tensor_class_value(T, v, name);
        if (r == -2 && !_PyType_Lookup((PyTypeObject *)(x->obj ? x->obj : ops_tensor_type()), name)) {
            if (PyErr_Occurred() || tr_tensor_inst_attr(T, v, name, 1) == -1)   /* its absence guarded */
                return -1;
            return tr_raise(T, PyObject_CallFunction(PyExc_AttributeError, "N",
                                                            PyUnicode_FromFormat("'Tensor' object has no attribute '%U'", name)));
        }
        if (r == -2) {   /* a data descriptor smelt does not model is no method */
            PyObject *ca = _PyType_Lookup((PyTypeObject *)(x->obj ? x->obj : ops_tensor_type()), name);
            if (ca && Py_TYPE(ca)->tp_descr_set)
                return tr_break(T, "tensor attribute %U is not supported yet", name);
        }
        return r != -2 ? r : tv_bound(T, name, v, -1);   /* a method: resolved at the call */
    }
    case V_LIST: case V_DICT:
        return tv_bound(T, name, v, -1);
    case V_TUPLE: {
        int32_t r = x->obj ? tuple_field(T, v, name) : -2;
        if (r == -2 && x->obj)
            r = obj_tuple_attr(T, v, name);   /* a named tuple's methods and class attributes */
        return r != -2 ? r : tv_bound(T, name, v, -1);
    }
    case V_OBJ:
        break;
    case V_INST:
        return obj_attr(T, v, name, 0);
    default:
        return tr_break(T, "attribute %U of a %s", name, kind_name(T, v));
    }
    if (tr_is_module(x->obj))
        return tr_module_attr(T, v, name, 0);
    if (Py_IS_TYPE(x->obj, &PySuper_Type) && x->self_ >= 0)
        return super_attr(T, v, name);
    if (PyDict_CheckExact(x->obj)) {
        int32_t d = tr_dict_value(T, v);
        return d < 0 ? -1 : tv_bound(T, name, d, -1);
    }
    return object_attr(T, v, name);
}

/* super() in a method: the class from its __class__ cell, self its first
 * argument; super(cls, self) as given. */
static int32_t call_super(tracer *T, const call_args *a)
{
    tframe *f = T->frame;
    int32_t cls = -1, self = -1;
    if (a->npos == 2) {
        cls = a->pos[0];
        self = a->pos[1];
    } else if (a->npos == 0 && f && f->nlocals > 0) {
        PyCodeObject *co = (PyCodeObject *)f->code;
        PyObject *fv = PyObject_GetAttrString(f->code, "co_freevars");
        Py_ssize_t j = -1;
        for (Py_ssize_t i = 0; fv && i < PyTuple_GET_SIZE(fv); i++)
            if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(fv, i), "__class__") == 0)
                j = i;
        Py_XDECREF(fv);
        int slot = co->co_nlocalsplus - co->co_nfreevars + (int)j;
        PyObject *clo = f->func ? PyFunction_GET_CLOSURE(f->func) : NULL;
        if (j >= 0 && f->locals[slot] >= 0 && T->vals[f->locals[slot]].kind == V_CELL)
            cls = T->vals[f->locals[slot]].self_;
        else if (j >= 0 && clo && j < PyTuple_GET_SIZE(clo) && PyCell_GET(PyTuple_GET_ITEM(clo, j)))
            cls = tv_obj(T, PyCell_GET(PyTuple_GET_ITEM(clo, j)), -1);
        self = f->locals[0];
        if (self >= 0 && T->vals[self].kind == V_CELL)
            self = T->vals[self].self_;
    }
    if (cls >= 0 && self >= 0 && T->vals[cls].kind == V_OBJ && T->vals[self].kind == V_INST)
        return obj_super(T, T->vals[cls].obj, self);
    if (cls < 0 || self < 0 || T->vals[cls].kind != V_OBJ || T->vals[self].kind != V_OBJ)
        return tr_break(T, "super() form not supported");
    PyObject *s = PyObject_CallFunctionObjArgs((PyObject *)&PySuper_Type, T->vals[cls].obj, T->vals[self].obj, NULL);
    if (!s) {
        PyErr_Clear();
        return tr_break(T, "super() raised");
    }
    int32_t r = tv_obj(T, s, -1);
    Py_DECREF(s);
    if (r >= 0)
        T->vals[r].self_ = self;
    return r;
}

/* ---------- structural pattern matching ---------- */

/* MATCH_SEQUENCE / MATCH_MAPPING: whether subject v's type has flag
 * (Py_TPFLAGS_SEQUENCE / _MAPPING), as CPython decides: tuples and lists
 * are sequences, dicts mappings; an outside object by its type (guarded);
 * a tensor, a function, an iterator neither. 1 / 0 / -1. */
static int match_kind(tracer *T, int32_t v, unsigned long flag)
{
    tv *x = &T->vals[v];
    switch (x->kind) {
    case V_TUPLE: case V_LIST: return flag == Py_TPFLAGS_SEQUENCE;
    case V_DICT: return flag == Py_TPFLAGS_MAPPING;
    case V_OBJ: {
        PyTypeObject *tp = Py_TYPE(x->obj);
        if (x->src >= 0 && tr_add_guard(T, TG_TYPE, x->src, (PyObject *)tp, 0))
            return -1;
        return PyType_HasFeature(tp, flag) ? 1 : 0;
    }
    case V_INST: return PyType_HasFeature((PyTypeObject *)x->obj, flag) ? 1 : 0;
    case V_TENSOR: return PyType_HasFeature((PyTypeObject *)(x->obj ? x->obj : ops_tensor_type()), flag) ? 1 : 0;
    default: return 0;
    }
}

/* MATCH_KEYS: a tuple of subject[k] for the constant keys in keys (a
 * tuple), or None when one is missing. */
static int32_t match_keys(tracer *T, int32_t subj, int32_t keys)
{
    if (T->vals[keys].kind != V_TUPLE)
        return tr_break(T, "MATCH_KEYS without a tuple of keys");
    int n = T->vals[keys].n;
    int32_t items[64];
    if (n > 64)
        return tr_break(T, "a mapping pattern of over 64 keys");
    for (int i = 0; i < n; i++) {
        int32_t k = T->vals[keys].items[i], in = tr_contains(T, k, subj);
        int t;
        if (in < 0 || tr_truth(T, in, &t))
            return -1;
        if (!t)
            return tv_obj(T, Py_None, -1);
        if ((items[i] = tr_subscr(T, subj, k)) < 0)
            return -1;
    }
    return tv_tuple(T, items, n);
}

/* isinstance(v, cls) in the trace: 1 / 0 / -1. */
static int traced_isinstance(tracer *T, int32_t v, int32_t cls)
{
    PyObject *fn = PyDict_GetItemString(PyEval_GetBuiltins(), "isinstance");
    call_args a = { .pos = (int32_t[]){ v, cls }, .npos = 2 };
    int32_t r = fn ? bi_call(T, fn, &a) : -1;
    int t;
    if (r == -2)
        return tr_break(T, "isinstance not traced");
    return r < 0 || tr_truth(T, r, &t) ? -1 : t;
}

/* getattr(v, name, <missing>) as the class pattern reads it (once): the
 * attribute's value, -2 when missing (AttributeError). */
static int32_t match_attr(tracer *T, int32_t v, PyObject *name)
{
    static PyObject *missing;
    PyObject *fn = PyDict_GetItemString(PyEval_GetBuiltins(), "getattr");
    if (!missing && !(missing = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type)))
        return -1;
    int32_t nv = tv_obj(T, name, -1), mv = nv < 0 ? -1 : tv_obj(T, missing, -1);
    call_args a = { .pos = (int32_t[]){ v, nv, mv }, .npos = 3 };
    int32_t r = fn && mv >= 0 ? bi_call(T, fn, &a) : -1;
    if (r == -2)
        return tr_break(T, "getattr not traced");
    return r == mv ? -2 : r;
}

/* MATCH_CLASS(count): a tuple of the subject's attributes the class
 * pattern extracts (count positional ones by cls.__match_args__, or the
 * subject itself for builtins that match themselves, then the keyword
 * attributes in names), or None when the subject is no instance of cls
 * or lacks one. */
static int32_t match_class(tracer *T, int32_t subj, int32_t cls, int32_t names, int count)
{
    PyObject *c = tr_const(T, cls), *kw = c ? tr_pyobj(T, names) : NULL;
    if (!kw)
        return -1;
    int rc = tr_keep(T, kw);   /* the names stay alive with the trace */
    Py_DECREF(kw);
    if (rc)
        return -1;
    if (!PyType_Check(c) || !PyTuple_Check(kw))
        return tr_break(T, "class pattern with a non-type");
    int inst = traced_isinstance(T, subj, cls);
    if (inst <= 0)
        return inst < 0 ? -1 : tv_obj(T, Py_None, -1);
    Py_ssize_t nk = PyTuple_GET_SIZE(kw);
    int32_t items[64];
    if (count + nk > 64)
        return tr_break(T, "a class pattern of over 64 parts");
    PyObject *ma = NULL;
    if (count) {
        if (PyType_HasFeature((PyTypeObject *)c, 1UL << 22) && count == 1) {   /* _Py_TPFLAGS_MATCH_SELF */
            items[0] = subj;
        } else {
            ma = PyObject_GetAttrString(c, "__match_args__");
            if (!ma || !PyTuple_Check(ma) || PyTuple_GET_SIZE(ma) < count) {
                Py_XDECREF(ma);
                PyErr_Clear();
                return tr_break(T, "class pattern whose positional parts eager refuses (__match_args__)");
            }
            for (int i = 0; i < count; i++) {
                PyObject *nm = PyTuple_GET_ITEM(ma, i);
                if (!PyUnicode_Check(nm) || (items[i] = match_attr(T, subj, nm)) < 0) {
                    int32_t r = items[i];
                    Py_DECREF(ma);
                    return !PyUnicode_Check(nm) ? tr_break(T, "__match_args__ of a non-string")
                                                : r == -2 ? tv_obj(T, Py_None, -1) : -1;
                }
            }
            Py_DECREF(ma);
        }
    }
    for (Py_ssize_t i = 0; i < nk; i++) {
        int32_t r = match_attr(T, subj, PyTuple_GET_ITEM(kw, i));
        if (r < 0)
            return r == -2 ? tv_obj(T, Py_None, -1) : -1;
        items[count + i] = r;
    }
    return tv_tuple(T, items, count + (int)nk);
}

/* ---------- the loop ---------- */

int tr_truth(tracer *T, int32_t v, int *out)
{
    if ((v = tr_live(T, v)) < 0)
        return -1;
    tv *x = &T->vals[v];
    switch (x->kind) {
    case V_TENSOR: return tr_break(T, "control flow depends on tensor data");
    case V_TUPLE: case V_LIST: case V_DICT: *out = x->n > 0; return 0;
    case V_FUNC: case V_BOUND: case V_ITER: case V_SLICE: *out = 1; return 0;
    case V_INST: return obj_truth(T, v, out);
    case V_SYM: return dyn_truth(T, v, out);
    case V_OBJ: {
        int32_t r = tr_user_special(T, v, "__bool__", NULL, 0);
        if (r == -2 && (r = tr_user_special(T, v, "__len__", NULL, 0)) >= 0) {
            int64_t n;
            if (tr_int(T, r, &n))
                return -1;
            *out = n != 0;
            return 0;
        }
        if (r != -2)
            return r < 0 ? -1 : tr_truth(T, r, out);
        if (tr_is_module(x->obj)) {   /* a container module is true when not empty */
            Py_ssize_t n = PyObject_HasAttrString((PyObject *)Py_TYPE(x->obj), "__len__") ? PyObject_Length(x->obj) : 1;
            if (n < 0)
                return -1;
            *out = n > 0;
            return tr_add_guard(T, TG_TYPE, x->src, (PyObject *)Py_TYPE(x->obj), 0) ||
                   tr_add_guard(T, TG_LEN, x->src, NULL, n);
        }
        if (PyDict_Check(x->obj)) {   /* a dict is true when not empty: its length guarded */
            *out = PyDict_GET_SIZE(x->obj) > 0;
            return tr_add_guard(T, TG_TYPE, x->src, (PyObject *)Py_TYPE(x->obj), 0) ||
                   tr_add_guard(T, TG_LEN, x->src, NULL, PyDict_GET_SIZE(x->obj));
        }
        PyTypeObject *tp = Py_TYPE(x->obj);
        if (!(tp->tp_as_number && tp->tp_as_number->nb_bool) && !(tp->tp_as_mapping && tp->tp_as_mapping->mp_length) &&
            !(tp->tp_as_sequence && tp->tp_as_sequence->sq_length)) {
            *out = 1;   /* an object without __bool__ or __len__ is true */
            return tr_add_guard(T, TG_TYPE, x->src, (PyObject *)tp, 0);
        }
        PyObject *o = tr_value(T, v);
        if (!o)
            return -1;
        int t = PyObject_IsTrue(o);
        if (t < 0)
            return -1;
        *out = t;
        return 0;
    }
    default: return tr_break(T, "truth value of a %s", kind_name(T, v));
    }
}

static int32_t const_binop(tracer *T, int nb, int32_t a, int32_t b)
{
    PyObject *x = tr_pyobj(T, a), *y = x ? tr_pyobj(T, b) : NULL, *r = NULL;
    if (!y) {
        Py_XDECREF(x);
        return -1;
    }
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
    default: break;
    }
    Py_DECREF(x);
    Py_DECREF(y);
    if (!r)
        return tr_raise_error(T);
    int32_t v = tv_obj(T, r, -1);
    Py_DECREF(r);
    return v;
}

/* a + b / a * n on tuples and lists: a new container; `lst += seq` on a
 * list made here extends it in place (aliases see it, as in Python). */
static int32_t seq_binop(tracer *T, int nb, int32_t a, int32_t b)
{
    int base = nb >= NB_INPLACE ? nb - NB_INPLACE : nb;
    tv *x = &T->vals[a];
    int32_t *it, n;
    if (base == NB_MULTIPLY) {
        int64_t k;
        if (tr_int(T, b, &k))
            return -1;
        int32_t c = tv_new(T, (tv_kind)T->vals[a].kind);
        for (int64_t r = 0; c >= 0 && r < k; r++)
            for (int i = 0; i < T->vals[a].n; i++)
                if (tv_push_item(T, c, T->vals[a].items[i], NULL))
                    return -1;
        return c;
    }
    if (x->kind == V_LIST && nb == NB_INPLACE + NB_ADD) {
        if (tr_mutable(T, a, "`+=`"))
            return -1;
        if (bi_items(T, b, &it, &n))
            return -1;
        for (int i = 0, cnt = n; i < cnt; i++)
            if (tv_push_item(T, a, a == b ? T->vals[a].items[i] : it[i], NULL))
                return -1;
        return a;
    }
    if (T->vals[b].kind != x->kind)
        return tr_break(T, "%s + %s", kind_name(T, a), kind_name(T, b));
    int32_t c = tv_new(T, (tv_kind)x->kind);
    for (int s = 0; s < 2; s++)
        for (int i = 0; c >= 0 && i < T->vals[s ? b : a].n; i++)
            if (tv_push_item(T, c, T->vals[s ? b : a].items[i], NULL))
                return -1;
    if (c >= 0 && T->vals[a].kind == V_TUPLE && T->vals[a].obj == ops_size_type())
        T->vals[c].obj = T->vals[a].obj;   /* torch.Size + tuple is a torch.Size */
    return c;
}

int32_t tr_binop(tracer *T, int nb, int32_t a, int32_t b)
{
    tv *x = &T->vals[a], *y = &T->vals[b];
    if (x->kind == V_TENSOR || y->kind == V_TENSOR) {
        if (nb < NB_INPLACE || x->kind != V_TENSOR)
            return ops_binary(T, nb, a, b);
        int32_t r = ops_binary(T, nb - NB_INPLACE, a, b);   /* x op= y: x's storage is updated */
        return r < 0 ? -1 : ops_inplace(T, a, r);
    }
    int base = nb >= NB_INPLACE ? nb - NB_INPLACE : nb;
    if (x->kind == V_INST || y->kind == V_INST) {
        int32_t r = obj_binop(T, nb, a, b);
        if (r != -2)
            return r;
    }
    if ((x->kind == V_TUPLE || x->kind == V_LIST) && (base == NB_ADD || base == NB_MULTIPLY))
        return seq_binop(T, nb, a, b);
    if ((y->kind == V_TUPLE || y->kind == V_LIST) && base == NB_MULTIPLY)
        return seq_binop(T, nb, b, a);
    int32_t r = dyn_binop(T, nb, a, b);
    return r != -2 ? r : const_binop(T, nb, a, b);
}

int32_t tr_compare(tracer *T, int cmp, int32_t a, int32_t b)
{
    if (T->vals[a].kind == V_TENSOR || T->vals[b].kind == V_TENSOR)
        return ops_compare(T, cmp, a, b);
    if (T->vals[a].kind == V_INST || T->vals[b].kind == V_INST) {
        int32_t r = obj_compare(T, cmp, a, b);
        if (r != -2)
            return r;
    }
    int32_t dr = dyn_compare(T, cmp, a, b);
    if (dr != -2)
        return dr;
    PyObject *x = tr_pyobj(T, a), *y = x ? tr_pyobj(T, b) : NULL;
    PyObject *r = y ? PyObject_RichCompare(x, y, cmp) : NULL;
    Py_XDECREF(x);
    Py_XDECREF(y);
    if (!r)
        return tr_raise_error(T);
    int32_t v = tv_obj(T, r, -1);
    Py_DECREF(r);
    return v;
}

static int slice_bounds(tracer *T, int32_t k, Py_ssize_t len, Py_ssize_t *start, Py_ssize_t *step, Py_ssize_t *n)
{
    PyObject *s = tr_pyobj(T, k);
    if (!s)
        return -1;
    Py_ssize_t stop;
    int r = PySlice_Unpack(s, start, &stop, step);
    Py_DECREF(s);
    if (r < 0) {
        PyErr_Clear();
        return tr_break(T, "bad slice");
    }
    *n = PySlice_AdjustIndices(len, start, &stop, *step);
    return 0;
}

/* Python index k into a sequence of n items, normalised into [0, n). */
static int seq_index(tracer *T, int32_t k, int64_t n, int64_t *i)
{
    if (tr_int(T, k, i))
        return -1;
    if (*i < 0)
        *i += n;
    if (*i >= 0 && *i < n)
        return 0;
    return tr_raise(T, PyObject_CallFunction(PyExc_IndexError, "s", "index out of range"));
}

static int32_t seq_subscr(tracer *T, int32_t c, int32_t k)
{
    tv *x = &T->vals[c];
    if (T->vals[k].kind == V_SLICE) {
        Py_ssize_t start = 0, step = 1, len = 0;
        if (slice_bounds(T, k, x->n, &start, &step, &len))
            return -1;
        int32_t r = tv_new(T, (tv_kind)T->vals[c].kind);
        for (Py_ssize_t i = 0; r >= 0 && i < len; i++)
            if (tv_push_item(T, r, T->vals[c].items[start + i * step], NULL))
                return -1;
        if (r >= 0 && T->vals[c].obj == ops_size_type())
            T->vals[r].obj = T->vals[c].obj;
        return r;
    }
    int64_t i;
    return seq_index(T, k, x->n, &i) ? -1 : x->items[i];
}

/* module[k]: a ModuleDict entry by name, a ModuleList/Sequential child by
 * index, or a list of them by slice. */
static int32_t module_subscr(tracer *T, int32_t c, int32_t k)
{
    tv *key = &T->vals[k];
    if (key->kind == V_OBJ && PyUnicode_Check(key->obj)) {
        PyObject *mods = PyObject_GetAttr(T->vals[c].obj, s_modules);
        PyObject *m = mods && PyDict_Check(mods) ? PyDict_GetItemWithError(mods, key->obj) : NULL;
        Py_XDECREF(mods);
        if (!m)
            return PyErr_Occurred() ? -1 : tr_break(T, "module has no child %R", key->obj);
        if (!tr_const(T, k))   /* the key (an attribute, say) is guarded */
            return -1;
        int32_t ms = tr_src_new(T, SRC_ATTR, T->vals[c].src, 0, s_modules);
        if (tr_add_guard(T, TG_TYPE, T->vals[c].src, (PyObject *)Py_TYPE(T->vals[c].obj), 0))
            return -1;
        return tv_obj(T, m, tr_src_new(T, SRC_DICT, ms, 0, key->obj));
    }
    int32_t *it, n;
    if (bi_items(T, c, &it, &n))
        return -1;
    int32_t l = tv_tuple(T, it, n);
    if (l < 0)
        return -1;
    T->vals[l].kind = V_LIST;
    int32_t r = seq_subscr(T, l, k);
    if (r >= 0 && T->vals[k].kind == V_SLICE)   /* eager: a container of the same type (Sequential(...)) */
        T->vals[r].obj = (PyObject *)Py_TYPE(T->vals[c].obj);
    return r;
}

/* Calls a slice of a Sequential (a V_LIST of its children with the
 * container's type in obj): each child on the previous one's result. */
static int32_t call_module_slice(tracer *T, int32_t fn, const call_args *a)
{
    static PyObject *seq_type;
    if (!seq_type) {
        PyObject *nn = PyImport_ImportModule("torch.nn");
        seq_type = nn ? PyObject_GetAttrString(nn, "Sequential") : NULL;
        Py_XDECREF(nn);
        if (!seq_type)
            return -1;
    }
    tv *f = &T->vals[fn];
    if (!PyType_IsSubtype((PyTypeObject *)f->obj, (PyTypeObject *)seq_type) || a->npos != 1 || a->nkw)
        return tr_break(T, "call of a slice of a %s", ((PyTypeObject *)f->obj)->tp_name);
    int32_t x = a->pos[0];
    for (int i = 0; x >= 0 && i < T->vals[fn].n; i++) {
        call_args b = { .pos = &x, .npos = 1 };
        x = tr_call(T, T->vals[fn].items[i], &b);
    }
    return x;
}

/* d[key] for dict value c (a V_OBJ with a source): the item with its
 * own source, or KeyError raised in the trace with the key's absence
 * guarded. A key that cannot be guarded breaks. */
static int32_t dict_item(tracer *T, int32_t c, PyObject *key)
{
    PyObject *o = T->vals[c].obj;
    int32_t src = T->vals[c].src;
    if (!(PyUnicode_CheckExact(key) || PyLong_CheckExact(key) || PyBytes_CheckExact(key)))
        return tr_break(T, "dict key of type %s", Py_TYPE(key)->tp_name);
    if (tr_add_guard(T, TG_TYPE, src, (PyObject *)Py_TYPE(o), 0))
        return -1;
    PyObject *r = PyDict_GetItemWithError(o, key);
    if (r)
        return tv_obj(T, r, tr_src_new(T, SRC_DICT, src, 0, key));
    if (PyErr_Occurred() || tr_add_guard(T, TG_HAS_KEY, src, key, 0))
        return -1;
    return tr_raise(T, PyObject_CallOneArg(PyExc_KeyError, key));
}

int32_t tr_subscr(tracer *T, int32_t c, int32_t k)
{
    if ((c = tr_live(T, c)) < 0)
        return -1;
    tv *x = &T->vals[c];
    if (x->kind == V_TENSOR)
        return ops_subscr(T, c, k);
    if (x->kind == V_TUPLE || x->kind == V_LIST)
        return seq_subscr(T, c, k);
    if (x->kind == V_INST) {
        int32_t r = obj_special(T, c, OS_GETITEM, &k, 1);
        return r != -2 ? r : tr_break(T, "subscript of an instance without __getitem__");
    }
    if (x->kind == V_DICT) {
        PyObject *key = tr_pyobj(T, k);
        if (!key)
            return -1;
        int32_t r = -2;
        for (int i = 0; r == -2 && i < x->n; i++)
            if (PyObject_RichCompareBool(x->keys[i], key, Py_EQ) == 1)
                r = x->items[i];
        PyObject *err = r == -2 ? PyObject_CallOneArg(PyExc_KeyError, key) : NULL;
        Py_DECREF(key);
        return r != -2 ? r : tr_raise(T, err);
    }
    if (x->kind != V_OBJ)
        return tr_break(T, "subscript of a %s", kind_name(T, c));
    int32_t v = tr_user_special(T, c, "__getitem__", &k, 1);
    if (v != -2)
        return v;
    if (tr_is_module(x->obj))
        return module_subscr(T, c, k);
    PyObject *key = tr_pyobj(T, k);
    if (!key)
        return -1;
    PyObject *o = x->obj;
    if (PyDict_CheckExact(o) && x->src >= 0) {   /* d[k] from its own source */
        v = dict_item(T, c, key);
        Py_DECREF(key);
        return v;
    }
    PyObject *r = tr_value(T, c) ? PyObject_GetItem(o, key) : NULL;
    Py_DECREF(key);
    if (!r)
        return tr_raise_error(T);
    v = tv_obj(T, r, -1);
    Py_DECREF(r);
    return v;
}

/* d[key] = v into a dict made here (replacing an equal key). */
static int dict_set(tracer *T, int32_t d, PyObject *key, int32_t v)
{
    tv *x = &T->vals[d];
    for (int i = 0; i < x->n; i++)
        if (PyObject_RichCompareBool(x->keys[i], key, Py_EQ) == 1) {
            x->items[i] = v;
            return 0;
        }
    return tv_push_item(T, d, v, key);
}

/* c[k] = v: tensors made here (ops_setitem), lists and dicts made here. */
static int store_subscr(tracer *T, int32_t c, int32_t k, int32_t v)
{
    tv *x = &T->vals[c];
    if (x->kind == V_TENSOR)
        return ops_setitem(T, c, k, v) < 0 ? -1 : 0;
    if (x->kind == V_INST) {
        int32_t args[2] = { k, v }, r = obj_special(T, c, OS_SETITEM, args, 2);
        return r >= 0 ? 0 : r == -2 ? tr_break(T, "item assignment to an instance without __setitem__") : -1;
    }
    if (x->kind == V_OBJ && PyDict_CheckExact(x->obj) && x->src >= 0) {   /* a dict from outside */
        if ((c = tr_dict_value(T, c)) < 0)
            return -1;
        x = &T->vals[c];
    }
    if (x->kind != V_LIST && x->kind != V_DICT)
        return tr_break(T, "item assignment to a %s", kind_name(T, c));
    if (tr_mutable(T, c, "item assignment"))
        return -1;
    x = &T->vals[c];
    if (x->kind == V_LIST) {
        int64_t i;
        if (seq_index(T, k, x->n, &i))
            return -1;
        x->items[i] = v;
        return 0;
    }
    PyObject *key = bi_key(T, k);
    return key ? dict_set(T, c, key, v) : -1;
}

/* del c[k] on a list or dict made here. */
static int delete_subscr(tracer *T, int32_t c, int32_t k)
{
    tv *x = &T->vals[c];
    if (x->kind == V_INST) {
        int32_t r = obj_special(T, c, OS_DELITEM, &k, 1);
        return r >= 0 ? 0 : r == -2 ? tr_break(T, "del of an item of an instance without __delitem__") : -1;
    }
    if (x->kind == V_OBJ && PyDict_CheckExact(x->obj) && x->src >= 0) {   /* a dict from outside */
        if ((c = tr_dict_value(T, c)) < 0)
            return -1;
        x = &T->vals[c];
    }
    if (x->kind != V_LIST && x->kind != V_DICT)
        return tr_break(T, "del of an item of a %s", kind_name(T, c));
    if (tr_mutable(T, c, "del of an item"))
        return -1;
    x = &T->vals[c];
    int at = -1;
    if (x->kind == V_LIST) {
        int64_t i;
        if (tr_int(T, k, &i))
            return -1;
        at = (int)(i < 0 ? i + x->n : i);
    } else {
        PyObject *key = tr_const(T, k);
        if (!key)
            return -1;
        for (int i = 0; i < x->n; i++)
            if (PyObject_RichCompareBool(x->keys[i], key, Py_EQ) == 1)
                at = i;
    }
    if (at < 0 || at >= x->n)
        return tr_break(T, "del of a missing item");
    for (int i = at; i + 1 < x->n; i++) {
        x->items[i] = x->items[i + 1];
        if (x->keys)
            x->keys[i] = x->keys[i + 1];
    }
    x->n--;
    return 0;
}

/* k in c: constants compared by equality, as Python does. */
static int32_t contains(tracer *T, int32_t k, int32_t c)
{
    tv *x = &T->vals[c];
    if (x->kind == V_INST) {
        int32_t r = obj_special(T, c, OS_CONTAINS, &k, 1);
        int t;
        if (r == -2)
            return tr_break(T, "`in` on an instance without __contains__");
        return r < 0 || tr_truth(T, r, &t) ? -1 : tv_bool(T, t);
    }
    if (x->kind == V_OBJ) {
        int32_t r = tr_user_special(T, c, "__contains__", &k, 1);
        int t;
        if (r != -2)
            return r < 0 || tr_truth(T, r, &t) ? -1 : tv_bool(T, t);
    }
    if (x->kind == V_OBJ && !tr_is_module(x->obj) && !PyDict_CheckExact(x->obj)) {
        PyObject *key = tr_pyobj(T, k), *o = key ? tr_value(T, c) : NULL;
        int r = o ? PySequence_Contains(o, key) : -1;
        Py_XDECREF(key);
        return r < 0 ? tr_raise_error(T) : tv_bool(T, r);
    }
    int32_t d = (x->kind == V_OBJ && PyDict_CheckExact(x->obj)) ? tr_dict_value(T, c) : c;
    int32_t *it, n;
    if (d < 0)
        return -1;
    if (T->vals[d].kind == V_DICT) {
        n = T->vals[d].n;
        it = NULL;
    } else if (bi_items(T, d, &it, &n)) {
        return -1;
    }
    PyObject *key = tr_pyobj(T, k);
    if (!key)
        return -1;
    int found = 0;
    for (int i = 0; i < n && !found; i++) {
        PyObject *o = it ? NULL : T->vals[d].keys[i];
        if (it && T->vals[it[i]].kind != V_OBJ) {
            Py_DECREF(key);
            return tr_break(T, "`in` over a sequence holding a %s", kind_name(T, it[i]));
        }
        if (it && !(o = tr_const(T, it[i]))) {
            Py_DECREF(key);
            return -1;
        }
        found = PyObject_RichCompareBool(o, key, Py_EQ) == 1;
    }
    Py_DECREF(key);
    PyErr_Clear();
    return tv_bool(T, found);
}

int tr_store_subscr(tracer *T, int32_t c, int32_t k, int32_t v)
{
    return store_subscr(T, c, k, v);
}

int tr_delete_subscr(tracer *T, int32_t c, int32_t k)
{
    return delete_subscr(T, c, k);
}

int32_t tr_contains(tracer *T, int32_t k, int32_t c)
{
    return contains(T, k, c);
}

int tr_dict_set(tracer *T, int32_t d, PyObject *key, int32_t v)
{
    return dict_set(T, d, key, v);
}

static int32_t call_ex_args(tracer *T, int32_t fn, int32_t args, int32_t kwd);

static int32_t do_call(tracer *T, tframe *f, int argc)
{
    int kw = f->kwnames ? (int)PyTuple_GET_SIZE(f->kwnames) : 0;
    int base = f->sp - argc - 2;
    if (base < 0)
        return tr_break(T, "stack underflow");
    if (kw > 32)
        return tr_break(T, "too many keyword arguments");
    int32_t *args = &f->stack[base + 2];
    int32_t fn = f->stack[base + NULL_FIRST];   /* [NULL, fn, args] (3.11, 3.12), [fn, NULL, args] (3.13) */
    int32_t pos[66];
    int npos = argc - kw;
    if (T->vals[f->stack[base + !NULL_FIRST]].kind != V_NULL) {   /* method form: [meth, self, args] */
        fn = f->stack[base];
        pos[0] = f->stack[base + 1];
        memcpy(pos + 1, args, sizeof(int32_t) * (size_t)npos);
        npos++;
    } else {
        memcpy(pos, args, sizeof(int32_t) * (size_t)npos);
    }
    PyObject *kwn[32];
    int32_t kwv[32];
    for (int i = 0; i < kw; i++) {
        kwn[i] = PyTuple_GET_ITEM(f->kwnames, i);
        kwv[i] = args[argc - kw + i];
    }
    call_args a = { .pos = pos, .npos = npos, .kwn = kwn, .kwv = kwv, .nkw = kw };
    f->kwnames = NULL;
    int32_t r = tr_call(T, fn, &a);   /* the arguments stay live (on the stack) during the call */
    f->sp = base;
    return r;
}

/* CALL_KW argc (3.13): CALL with the keyword names' tuple on top of the
 * arguments instead of in a KW_NAMES before. */
static int32_t call_kw(tracer *T, tframe *f, int argc)
{
    int32_t names = f->stack[--f->sp];   /* a constant tuple (LOAD_CONST), wrapped as V_TUPLE */
    if (T->vals[names].kind != V_TUPLE)
        return tr_break(T, "CALL_KW without a tuple of names");
    int n = T->vals[names].n;
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {   /* guarded when read from a frame state (a continuation's stack) */
        int32_t k = T->vals[names].items[i];
        PyObject *o = T->vals[k].kind == V_OBJ ? tr_const(T, k) : NULL;
        if (!o || !PyUnicode_Check(o)) {
            Py_DECREF(t);
            return T->broke || PyErr_Occurred() ? -1 : tr_break(T, "CALL_KW with a keyword name that is not a string");
        }
        PyTuple_SET_ITEM(t, i, Py_NewRef(o));
    }
    int rc = t ? tr_keep(T, t) : -1;   /* kept by the trace: f->kwnames is borrowed */
    Py_XDECREF(t);
    if (rc)
        return -1;
    f->kwnames = t;
    return do_call(T, f, argc);
}

/* CALL_FUNCTION_EX: [NULL, fn] (3.11, 3.12) or [fn, NULL] (3.13), the
 * arguments' iterable, the keywords' mapping if has_kw. */
static int32_t call_ex(tracer *T, tframe *f, int has_kw)
{
    int32_t kwd = has_kw ? f->stack[f->sp - 1] : -1;
    int32_t args = f->stack[f->sp - 1 - has_kw];
    int32_t fn = f->stack[f->sp - 2 - has_kw - !NULL_FIRST];
    int32_t r = call_ex_args(T, fn, args, kwd);   /* the arguments stay live during the call */
    f->sp -= 3 + has_kw;   /* and the NULL */
    return r;
}

static int32_t call_ex_args(tracer *T, int32_t fn, int32_t args, int32_t kwd)
{
    int32_t *items, kv[32], pos[64];
    PyObject *kn[32];
    int n;
    if (bi_items(T, args, &items, &n))
        return -1;
    if (n > 63)
        return tr_break(T, "too many arguments");
    memcpy(pos, items, sizeof(int32_t) * (size_t)n);
    int nk = 0;
    if (kwd >= 0) {
        if ((kwd = tr_dict_value(T, kwd)) < 0)
            return -1;
        tv *d = &T->vals[kwd];
        if (d->n > 32)
            return tr_break(T, "too many keyword arguments");
        for (int i = 0; i < d->n; i++) {
            if (!PyUnicode_Check(d->keys[i]))
                return tr_break(T, "keywords must be strings");
            kn[nk] = d->keys[i];
            kv[nk++] = d->items[i];
        }
    }
    call_args a = { .pos = pos, .npos = n, .kwn = kn, .kwv = kv, .nkw = nk };
    return tr_call(T, fn, &a);
}

/* STORE_GLOBAL name = v in frame f: in the traced function's own module
 * (replayed after the graph: EF_GLOBAL); later reads in the trace see it. */
static int store_global(tracer *T, tframe *f, PyObject *name, int32_t v)
{
    if (f->globals != T->globals || f->trusted)
        return tr_break(T, "assignment to a global of another module");
    if (!T->globalw && !(T->globalw = PyDict_New()))
        return -1;
    PyObject *id = PyLong_FromLong(v);
    int rc = id ? PyDict_SetItem(T->globalw, name, id) : -1;
    Py_XDECREF(id);
    return rc;
}

static int32_t load_global(tracer *T, tframe *f, PyObject *name)
{
    if (T->globalw && f->globals == T->globals) {   /* assigned by the traced code */
        PyObject *id = PyDict_GetItemWithError(T->globalw, name);
        if (id)
            return (int32_t)PyLong_AsLong(id);
        if (PyErr_Occurred())
            return -1;
    }
    PyObject *o = PyDict_GetItemWithError(f->globals, name);
    int builtin = 0;
    if (!o && !PyErr_Occurred()) {
        o = PyDict_GetItemWithError(f->builtins, name);
        builtin = 1;
    }
    if (!o)
        return PyErr_Occurred() ? -1 : tr_break(T, "name %U is not defined", name);
    int32_t src = -1;
    if (f->trusted)
        src = -1;   /* torch's own globals are trusted not to be rebound */
    else if (builtin && f->globals == T->globals)
        src = tr_src_new(T, SRC_BUILTIN, -1, 0, name);   /* a global may shadow it later */
    else if (builtin)
        src = -1;
    else if (f->globals == T->globals)
        src = tr_src_new(T, SRC_GLOBAL, -1, 0, name);
    else if (f->func_src >= 0)
        src = tr_src_new(T, SRC_DICT, tr_src_new(T, SRC_ATTR, f->func_src, 0, s_globals), 0, name);
    return tv_obj(T, o, src);
}

/* LOAD_DEREF: a cell made in the traced code, or a free variable of a
 * function defined outside it (read from its real closure). */
static int32_t load_deref(tracer *T, tframe *f, int idx)
{
    int32_t c = f->locals[idx];
    if (c >= 0 && T->vals[c].kind == V_CELL) {
        for (int32_t i = T->ncellw - 1; T->vals[c].obj && i >= 0; i--)
            if (T->cellw[i].cell == T->vals[c].obj)   /* a snapshot of a real cell the trace assigned since */
                return T->cellw[i].val;
        if (T->vals[c].self_ < 0)
            return tr_break(T, "free variable referenced before assignment");
        return T->vals[c].self_;
    }
    PyCodeObject *co = (PyCodeObject *)f->code;
    int first_free = co->co_nlocalsplus - co->co_nfreevars;
    if (idx < first_free || !f->func)
        return tr_break(T, "cell variable read before assignment");
    PyObject *clo = PyFunction_GET_CLOSURE(f->func);
    PyObject *cell = clo ? PyTuple_GET_ITEM(clo, idx - first_free) : NULL;
    for (int32_t i = T->ncellw - 1; cell && i >= 0; i--)
        if (T->cellw[i].cell == cell)   /* assigned by the traced code */
            return T->cellw[i].val;
    PyObject *o = cell ? PyCell_GET(cell) : NULL;
    if (!o)
        return tr_break(T, "empty closure cell");
    int32_t src = -1;
    if (f->is_top)
        src = tr_src_new(T, SRC_CELL, -1, idx - first_free, NULL);   /* parent -1: the traced function */
    else if (f->func_src >= 0 && !f->trusted)
        src = tr_src_new(T, SRC_CELL, f->func_src, idx - first_free, NULL);
    return tv_obj(T, o, src);
}

/* STORE_DEREF into cell idx of a function from outside the trace (the
 * traced function itself, or one reached through a source): the write
 * is kept (later reads see it; a read-only snapshot cell c made for
 * closures built here too) and replayed after the graph (EF_CELL). */
static int store_outside_cell(tracer *T, tframe *f, int idx, int32_t v, int32_t c)
{
    PyCodeObject *co = (PyCodeObject *)f->code;
    int first_free = co->co_nlocalsplus - co->co_nfreevars, k = idx - first_free;
    PyObject *clo = f->func ? PyFunction_GET_CLOSURE(f->func) : NULL;
    if (k < 0 || !clo || k >= PyTuple_GET_SIZE(clo) || f->trusted || (!f->is_top && f->func_src < 0))
        return tr_break(T, "assignment to a closure variable of a function defined outside the traced code");
    PyObject *cell = PyTuple_GET_ITEM(clo, k);
    int32_t src = -1;
    if (!f->is_top) {
        PyObject *an = PyUnicode_InternFromString("__closure__");
        int32_t cs = an ? tr_src_new(T, SRC_ATTR, f->func_src, 0, an) : -1;
        if (an && tr_keep(T, an)) {
            Py_DECREF(an);
            return -1;
        }
        Py_XDECREF(an);
        if (cs < 0 || (src = tr_src_new(T, SRC_ITEM, cs, k, NULL)) < 0)
            return -1;
    }
    struct tr_cellw *w = NULL;
    for (int32_t i = 0; i < T->ncellw && !w; i++)
        if (T->cellw[i].cell == cell)
            w = &T->cellw[i];
    if (!w) {
        struct tr_cellw *nw = PyMem_Realloc(T->cellw, sizeof *nw * (size_t)(T->ncellw + 1));
        if (!nw)
            return PyErr_NoMemory(), -1;
        T->cellw = nw;
        w = &T->cellw[T->ncellw++];
        *w = (struct tr_cellw){ .cell = cell, .name = PyTuple_GET_ITEM(co->co_localsplusnames, idx), .src = src,
                                .index = k };
    }
    w->val = v;
    if (c >= 0 && T->vals[c].kind == V_CELL)
        T->vals[c].self_ = v;
    return 0;
}

/* STORE_DEREF into a cell made here; a real closure is outside state. */
static int store_deref(tracer *T, tframe *f, int idx, int32_t v)
{
    int32_t c = f->locals[idx];
    if (c >= 0 && T->vals[c].kind == V_CELL && !T->vals[c].frozen) {
        T->vals[c].self_ = v;
        return 0;
    }
    return store_outside_cell(T, f, idx, v, c);
}

/* LOAD_CLOSURE: the cell of slot idx (a real closure's cell is read once
 * into a read-only cell). */
static int32_t load_closure(tracer *T, tframe *f, int idx)
{
    int32_t c = f->locals[idx];
    if (c >= 0 && T->vals[c].kind == V_CELL)
        return c;
    int32_t v = load_deref(T, f, idx);
    c = v < 0 ? -1 : tv_new(T, V_CELL);
    if (c >= 0) {
        PyCodeObject *co = (PyCodeObject *)f->code;
        int k = idx - (co->co_nlocalsplus - co->co_nfreevars);
        PyObject *clo = f->func ? PyFunction_GET_CLOSURE(f->func) : NULL;
        T->vals[c].self_ = v;
        T->vals[c].frozen = 1;
        /* the real cell (borrowed: its function keeps it), so reads see
         * the trace's later writes to it */
        T->vals[c].obj = clo && k >= 0 && k < PyTuple_GET_SIZE(clo) ? PyTuple_GET_ITEM(clo, k) : NULL;
        f->locals[idx] = c;
    }
    return c;
}

static int make_cell(tracer *T, tframe *f, int idx)
{
    int32_t c = tv_new(T, V_CELL);
    if (c < 0)
        return -1;
    T->vals[c].self_ = f->locals[idx];
    f->locals[idx] = c;
    return 0;
}

static int none_known(tracer *T, int32_t v);

/* The conditional jumps: whether op tests `is None` (else truth), which
 * outcome jumps, and whether the target lies back (3.11 has forward and
 * backward forms; 3.12 and 3.13 only forward ones, named without a
 * direction; 3.13's truth tests take a bool made by TO_BOOL or COMPARE_OP). */
static const struct { uint8_t op, none, when, back; } cond_jumps[] = {
    { OP_POP_JUMP_IF_FALSE, 0, 0, 0 }, { OP_POP_JUMP_IF_TRUE, 0, 1, 0 },
    { OP_POP_JUMP_IF_NONE, 1, 1, 0 }, { OP_POP_JUMP_IF_NOT_NONE, 1, 0, 0 },
    { OP_POP_JUMP_FORWARD_IF_FALSE, 0, 0, 0 }, { OP_POP_JUMP_FORWARD_IF_TRUE, 0, 1, 0 },
    { OP_POP_JUMP_FORWARD_IF_NONE, 1, 1, 0 }, { OP_POP_JUMP_FORWARD_IF_NOT_NONE, 1, 0, 0 },
    { OP_POP_JUMP_BACKWARD_IF_FALSE, 0, 0, 1 }, { OP_POP_JUMP_BACKWARD_IF_TRUE, 0, 1, 1 },
    { OP_POP_JUMP_BACKWARD_IF_NONE, 1, 1, 1 }, { OP_POP_JUMP_BACKWARD_IF_NOT_NONE, 1, 0, 1 },
};

/* POP_JUMP_*: pops the condition and, when it holds, moves *pc (the
 * instruction after the jump) by arg. 0, or -1 (break). */
static int jump_if(tracer *T, tframe *f, int op, int *pc, int arg)
{
    size_t k = 0, n = sizeof cond_jumps / sizeof cond_jumps[0];
    while (k < n && cond_jumps[k].op != op)
        k++;
    if (k == n)
        return tr_break(T, "internal: opcode %d is no conditional jump", op);
    int32_t v = f->stack[--f->sp];
    int holds;
    if (cond_jumps[k].none) {
        if (none_known(T, v))
            return -1;
        holds = T->vals[v].kind == V_OBJ && T->vals[v].obj == Py_None;
    } else if (tr_truth(T, v, &holds)) {
        return -1;
    }
    if (holds == cond_jumps[k].when)
        *pc += cond_jumps[k].back ? -arg : arg;
    return 0;
}

/* BEFORE_WITH: pushes the manager's __exit__ and what __enter__ returned
 * (objects.c: grad-mode managers, user context managers inlined). */
static int before_with(tracer *T, tframe *f)
{
    int32_t m = f->stack[--f->sp], ex, en;
    return obj_enter(T, m, &ex, &en) || push(f, ex) || push(f, en) ? -1 : 0;
}

/* UNPACK_EX: `a, *rest, b = seq`. */
static int unpack_ex(tracer *T, tframe *f, int arg)
{
    int before = arg & 0xff, after = arg >> 8;
    int32_t s = f->stack[--f->sp], *it;
    int n;
    if (bi_items(T, s, &it, &n))
        return -1;
    if (n < before + after)
        return tr_break(T, "not enough values to unpack");
    int32_t mid = tv_tuple(T, it + before, n - before - after);
    if (mid < 0)
        return -1;
    T->vals[mid].kind = V_LIST;
    for (int i = n - 1; i >= n - after; i--)
        if (push(f, it[i]))
            return -1;
    if (push(f, mid))
        return -1;
    for (int i = before - 1; i >= 0; i--)
        if (push(f, it[i]))
            return -1;
    return 0;
}

/* BUILD_SET / SET_ADD / SET_UPDATE: a set made here (sets.c). */
static int32_t build_set(tracer *T, tframe *f, int n)
{
    int32_t v = set_new(T, (PyObject *)&PySet_Type, &f->stack[f->sp - n], n);
    f->sp -= n;
    return v;
}

static int set_add(tracer *T, int32_t set, int32_t item, int update)
{
    if (!set_is(T, set))
        return tr_break(T, "set update of a set passed in from outside");
    return update ? set_update_from(T, set, item) : set_add_values(T, set, &item, 1);
}

static int32_t build_map(tracer *T, tframe *f, int op, int nk)
{
    int32_t d = tv_new(T, V_DICT);
    if (d < 0)
        return -1;
    if (op == OP_BUILD_CONST_KEY_MAP) {
        int32_t keys = f->stack[--f->sp];   /* a constant tuple, wrapped as V_TUPLE */
        if (T->vals[keys].kind != V_TUPLE || T->vals[keys].n != nk)
            return tr_break(T, "BUILD_CONST_KEY_MAP keys");
        for (int i = 0; i < nk; i++) {
            PyObject *key = bi_key(T, T->vals[keys].items[i]);
            if (!key || tv_push_item(T, d, f->stack[f->sp - nk + i], key))
                return -1;
        }
        f->sp -= nk;
        return d;
    }
    for (int i = 0; i < nk; i++) {
        PyObject *key = bi_key(T, f->stack[f->sp - 2 * nk + 2 * i]);
        if (!key || tv_push_item(T, d, f->stack[f->sp - 2 * nk + 2 * i + 1], key))
            return -1;
    }
    f->sp -= 2 * nk;
    return d;
}

static int dict_merge(tracer *T, int32_t d, int32_t src)
{
    if ((src = tr_dict_value(T, src)) < 0)
        return -1;
    for (int i = 0; i < T->vals[src].n; i++)
        if (dict_set(T, d, T->vals[src].keys[i], T->vals[src].items[i]))
            return -1;
    return 0;
}

static int list_extend(tracer *T, int32_t l, int32_t s)
{
    int32_t *it, n;
    if (bi_items(T, s, &it, &n))
        return -1;
    for (int i = 0; i < n; i++)
        if (tv_push_item(T, l, l == s ? T->vals[l].items[i] : it[i], NULL))
            return -1;
    return 0;
}

static int32_t format_value(tracer *T, tframe *f, int arg)
{
    int32_t spec = (arg & 4) ? f->stack[--f->sp] : -1;
    int32_t v = f->stack[--f->sp];
    PyObject *o = tr_pyobj(T, v), *s = spec >= 0 && o ? tr_const(T, spec) : NULL;
    if (!o || (spec >= 0 && !s)) {
        Py_XDECREF(o);
        return -1;
    }
    int conv = arg & 3;
    PyObject *c = conv == 1 ? PyObject_Str(o) : conv == 2 ? PyObject_Repr(o) : conv == 3 ? PyObject_ASCII(o) : Py_NewRef(o);
    PyObject *out = c ? PyObject_Format(c, s) : NULL;
    Py_DECREF(o);
    Py_XDECREF(c);
    if (!out)
        return -1;
    int32_t r = tv_obj(T, out, -1);
    Py_DECREF(out);
    return r;
}

static int32_t build_string(tracer *T, tframe *f, int n)
{
    PyObject *parts = PyTuple_New(n), *empty = PyUnicode_FromString("");
    for (int i = 0; parts && i < n; i++) {
        PyObject *o = tr_const(T, f->stack[f->sp - n + i]);
        if (!o) {
            Py_DECREF(parts);
            Py_XDECREF(empty);
            return -1;
        }
        PyTuple_SET_ITEM(parts, i, Py_NewRef(o));
    }
    PyObject *s = parts && empty ? PyUnicode_Join(empty, parts) : NULL;
    Py_XDECREF(parts);
    Py_XDECREF(empty);
    f->sp -= n;
    int32_t r = s ? tv_obj(T, s, -1) : -1;
    Py_XDECREF(s);
    return r;
}

/* A guard that lets `v is None` be decided: v's type (NoneType or not). */
static int none_known(tracer *T, int32_t v)
{
    tv *x = &T->vals[v];
    return x->kind == V_OBJ ? tr_add_guard(T, TG_TYPE, x->src, (PyObject *)Py_TYPE(x->obj), 0) : 0;
}

static int32_t is_op(tracer *T, int32_t a, int32_t b, int invert)
{
    tv *x = &T->vals[a], *y = &T->vals[b];
    int same;
    if (x->kind == V_OBJ && y->kind == V_OBJ) {
        int with_none = x->obj == Py_None || y->obj == Py_None;
        if (with_none ? none_known(T, a) || none_known(T, b) : !tr_const(T, a) || !tr_const(T, b))
            return -1;
        same = x->obj == y->obj;
    } else {
        same = a == b;   /* one value id per Python object */
        /* two tensors passed in, different objects now: guarded to stay so */
        if (!same && x->kind == V_TENSOR && y->kind == V_TENSOR && x->src >= 0 && y->src >= 0 &&
            tr_add_guard(T, TG_NOT_SAME, x->src, NULL, y->src))
            return -1;
    }
    return tv_bool(T, same ^ invert);
}

static int32_t unary(tracer *T, int op, int32_t a)
{
    if (T->vals[a].kind == V_TENSOR) {
        if (op == OP_UNARY_POSITIVE)
            return a;
        if (op == OP_UNARY_NOT)
            return tr_break(T, "truth value of a tensor");
        return ops_unary(T, op == OP_UNARY_NEGATIVE ? SMELT_OP_NEG : SMELT_OP_BITWISE_NOT, a);
    }
    if (op == OP_UNARY_NOT) {
        int t;
        return tr_truth(T, a, &t) ? -1 : tv_bool(T, !t);
    }
    PyObject *o = tr_const(T, a);
    if (!o)
        return -1;
    PyObject *res = op == OP_UNARY_NEGATIVE ? PyNumber_Negative(o) : op == OP_UNARY_INVERT ? PyNumber_Invert(o) : PyNumber_Positive(o);
    if (!res)
        return tr_raise_error(T);
    int32_t r = tv_obj(T, res, -1);
    Py_DECREF(res);
    return r;
}

/* Whether module m is one of the standard library's modules whose
 * attributes are functions, classes and constants that do not change
 * (their top-level package): an import of it inside traced code binds the
 * module already imported, whose attributes are taken as they are, as
 * torch's are. Modules holding state that changes between calls (os.environ,
 * sys.argv, random's generator) are not among them: their imports break,
 * and a module-level import reads them from guarded globals. */
static int stdlib_module(PyObject *m)
{
    static const char *const pure[] = { "math", "cmath", "operator", "functools", "itertools", "collections",
                                        "contextlib", "typing", "dataclasses", "numbers", "enum", "abc", "copy",
                                        "types", "string" };
    const char *n = PyModule_GetName(m);
    if (!n)
        return PyErr_Clear(), 0;
    size_t top = strcspn(n, ".");
    for (size_t i = 0; i < sizeof pure / sizeof pure[0]; i++)
        if (strlen(pure[i]) == top && !strncmp(n, pure[i], top))
            return 1;
    return 0;
}

/* IMPORT_NAME of a module torch, math, operator or functools already
 * imported (importing runs no code then); others end the trace. */
static int32_t import_name(tracer *T, tframe *f, PyObject *name)
{
    int32_t from = f->stack[--f->sp], level = f->stack[--f->sp];
    PyObject *lv = tr_const(T, level), *fl = lv ? tr_pyobj(T, from) : NULL;
    if (!fl)
        return -1;
    int plain = fl == Py_None || !PyObject_IsTrue(fl);
    Py_DECREF(fl);
    if (!PyLong_Check(lv) || PyLong_AsLong(lv) != 0)
        return tr_break(T, "relative import");
    PyObject *mods = PyImport_GetModuleDict(), *full = PyDict_GetItemWithError(mods, name);
    if (!full)
        return PyErr_Occurred() ? -1 : tr_break(T, "import of %U, not imported yet", name);
    PyObject *m = full;
    if (plain) {   /* `import a.b` binds the top package */
        Py_ssize_t dot = PyUnicode_FindChar(name, '.', 0, PyUnicode_GET_LENGTH(name), 1);
        PyObject *top = dot > 0 ? PyUnicode_Substring(name, 0, dot) : Py_NewRef(name);
        m = top ? PyDict_GetItemWithError(mods, top) : NULL;
        Py_XDECREF(top);
        if (!m)
            return PyErr_Occurred() ? -1 : tr_break(T, "import of %U", name);
    }
    if (!is_trusted_module(m) && !stdlib_module(m))
        return tr_break(T, "import of %U inside traced code", name);
    return tv_obj(T, m, -1);
}

/* Whether the BINARY_OP before pc is the `x[i] op= y` pattern on a tensor
 * view made by the BINARY_SUBSCR (3.12: or BINARY_SLICE) just before: the
 * result is written back by the store after it (SWAP 3, SWAP 2,
 * STORE_SUBSCR; for 3.12's slices SWAP 4, SWAP 3, SWAP 2, STORE_SLICE), so
 * the view itself need not be updated. */
static int subscr_update(tracer *T, const uint8_t *code, int n, int pc, int32_t a, int arg)
{
    if (arg < NB_INPLACE || T->vals[a].kind != V_TENSOR ||
        smelt_op_kind_of((smelt_op)T->g->nodes[T->vals[a].node].op) != SMELT_KIND_VIEW)
        return 0;
    int depth = pc < n && tr_op_of[code[2 * pc]] == OP_SWAP ? code[2 * pc + 1] : 0;
    for (int k = depth; k >= 2; k--, pc += 1 + tr_ncache[code[2 * pc]])
        if (pc >= n || tr_op_of[code[2 * pc]] != OP_SWAP || code[2 * pc + 1] != k)
            return 0;
    int store = pc < n ? tr_op_of[code[2 * pc]] : OP_UNKNOWN;
    return (depth == 3 && store == OP_STORE_SUBSCR) || (depth == 4 && store == OP_STORE_SLICE);
}

/* view op= y, computed as view op y as the in-place op would leave it. */
static int32_t item_binop(tracer *T, int nb, int32_t a, int32_t b)
{
    int32_t r = tr_binop(T, nb - NB_INPLACE, a, b);
    return r < 0 ? -1 : ops_inplace_value(T, a, r);
}

/* Pushes callable a and the NULL a call finds beside it, in the
 * version's order (NULL_FIRST). */
static int push_with_null(tracer *T, tframe *f, int32_t a)
{
    if (NULL_FIRST)
        return push(f, tv_new(T, V_NULL)) || push(f, a);
    return push(f, a) || push(f, tv_new(T, V_NULL));
}

/* LOAD_ATTR, and 3.11's LOAD_METHOD (method = 1): the attribute replaces
 * the object; a method load also pushes NULL beside it (what CPython does
 * for an attribute that is not a plain method: the bound value smelt
 * makes carries its self). */
static int load_attr(tracer *T, tframe *f, PyObject *name, int method)
{
    int32_t a = tr_load_attr(T, f->stack[f->sp - 1], name);
    if (a < 0)
        return -1;
    if (!method) {
        f->stack[f->sp - 1] = a;
        return 0;
    }
    f->sp--;
    return push_with_null(T, f, a);
}

/* LOAD_SUPER_ATTR (3.12): super(cls, self).name from the three values it
 * pops (the global `super`, which must be the builtin, cls, self); the
 * argument's low bit asks for a method load as LOAD_ATTR's does, the name
 * index is above the two flag bits. */
static int load_super_attr(tracer *T, tframe *f, int arg)
{
    int32_t pos[2] = { f->stack[f->sp - 2], f->stack[f->sp - 1] }, sup = f->stack[f->sp - 3];
    f->sp -= 3;
    PyObject *g = tr_const(T, sup);
    if (!g)
        return -1;
    if (g != (PyObject *)&PySuper_Type)
        return tr_break(T, "super() with the name `super` rebound");
    call_args a = { .pos = pos, .npos = 2 };
    int32_t s = call_super(T, &a);
    int32_t v = s < 0 ? -1 : tr_load_attr(T, s, PyTuple_GET_ITEM(f->names, arg >> 2));
    return (arg & 1) ? push_with_null(T, f, v) : push(f, v);
}

/* A slice of the n (2 or 3) values parts: start, stop, step (None: absent). */
static int32_t new_slice(tracer *T, const int32_t *parts, int n)
{
    int32_t s = tv_new(T, V_SLICE);
    for (int i = 0; s >= 0 && i < n; i++) {
        int32_t v = parts[i];
        T->vals[s].sl[i] = T->vals[v].kind == V_OBJ && T->vals[v].obj == Py_None ? -1 : v;
    }
    return s;
}

/* LIST_TO_TUPLE (3.11 opcode, 3.12 intrinsic) of the list `(*a,)` built. */
static int32_t list_to_tuple(tracer *T, int32_t l)
{
    if (T->vals[l].kind != V_LIST)
        return tr_break(T, "LIST_TO_TUPLE of a %s", kind_name(T, l));
    return tv_tuple(T, T->vals[l].items, T->vals[l].n);
}

/* CALL_INTRINSIC_1 (3.12): the intrinsics plain expressions use (`+x`,
 * `(*a,)`); the others (exception handling, typing, star imports) end the
 * trace. */
static int32_t intrinsic_1(tracer *T, int arg, int32_t v)
{
    switch (arg < MAX_INTRINSIC ? intrinsic_of[arg] : IN_UNKNOWN) {
    case IN_UNARY_POSITIVE:
        return unary(T, OP_UNARY_POSITIVE, v);
    case IN_LIST_TO_TUPLE:
        return list_to_tuple(T, v);
    default:
        return tr_break(T, "intrinsic %s is not supported", arg < MAX_INTRINSIC ? intrinsic_all[arg] : "?");
    }
}

/* SEND (`yield from`) with the receiver under the sent value (always None:
 * traced generators are only driven by next): the receiver's next value
 * replaces the sent one, for the YIELD_VALUE after SEND to hand out. Once
 * the receiver is exhausted its return value (a generator's, else None)
 * replaces it instead, the receiver too where the version pops it here,
 * and *pc moves on by arg. */
static int send(tracer *T, tframe *f, int *pc, int arg)
{
    int32_t recv = f->stack[f->sp - 2], v = -1;
    int r = T->vals[recv].kind == V_ITER && T->vals[recv].sub == IT_GEN ? tr_gen_next(T, recv, &v)
                                                                         : bi_next(T, recv, &v);
    if (r < 0)
        return -1;
    if (r == 0) {
        if (v < 0 && (v = tv_obj(T, Py_None, -1)) < 0)
            return -1;
        f->sp -= SEND_POPS_RECEIVER;
        *pc += arg;
    }
    f->stack[f->sp - 1] = v;
    return 0;
}

/* ---------- exceptions ---------- */

int tr_raise(tracer *T, PyObject *exc)
{
    if (!exc)
        return -1;
    PyObject *ctx = T->handled >= 0 ? T->vals[T->handled].obj : NULL;
    if (ctx && ctx != exc && PyExceptionInstance_Check(ctx))   /* implicit chaining, as CPython does */
        PyException_SetContext(exc, Py_NewRef(ctx));
    Py_XSETREF(T->exc, exc);
    return -1;
}

int tr_raise_error(tracer *T)
{
    if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_MemoryError) ||
        PyErr_ExceptionMatches(PyExc_KeyboardInterrupt) || PyErr_ExceptionMatches(PyExc_SystemExit))
        return -1;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    return v ? tr_raise(T, v) : -1;
}

/* One varint of an exception table (6 bits a byte, high to low; bit 6:
 * more bytes follow). 0, or -1 at the end of the table. */
static int read_varint(const unsigned char **p, const unsigned char *end, int *out)
{
    if (*p >= end)
        return -1;
    unsigned b = *(*p)++;
    int v = b & 63;
    while (b & 64) {
        if (*p >= end)
            return -1;
        b = *(*p)++;
        v = (v << 6) | (b & 63);
    }
    *out = v;
    return 0;
}

/* The handler covering code unit `at` in frame f's exception table: 1 with
 * its target, stack depth and whether it wants the offset pushed; 0 when
 * none covers it. */
static int find_handler(tframe *f, int at, int *target, int *depth, int *lasti)
{
    PyObject *tab = ((PyCodeObject *)f->code)->co_exceptiontable;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(tab), *end = p + PyBytes_GET_SIZE(tab);
    int start, len, tgt, dl;
    while (!read_varint(&p, end, &start) && !read_varint(&p, end, &len) && !read_varint(&p, end, &tgt) &&
           !read_varint(&p, end, &dl)) {
        if (start <= at && at < start + len) {
            *target = tgt;
            *depth = dl >> 1;
            *lasti = dl & 1;
            return 1;
        }
    }
    return 0;
}

/* Frame f's handler for T->exc raised at code unit `at`: the stack cut to
 * the handler's depth, the offset (when it wants it) and the exception
 * pushed, *pc at the handler. 0; 1 when f has none (the exception
 * propagates to its caller); -1 on a break or an error. */
static int unwind(tracer *T, tframe *f, int at, int *pc)
{
    int target, depth, lasti;
    if (!find_handler(f, at, &target, &depth, &lasti))
        return 1;
    if (depth > f->sp)
        return tr_break(T, "exception handler deeper than the stack");
    f->sp = depth;
    int32_t ev = tv_obj(T, T->exc, -1);
    if (ev < 0 || (lasti && push(f, tv_int(T, at))) || push(f, ev))
        return -1;
    Py_CLEAR(T->exc);
    *pc = target;
    return 0;
}

/* Whether exception class o is constructed without running Python code
 * (no Python __init__ or __new__): then it can be made at trace time. */
static int exc_class_plain(PyObject *o)
{
    static PyObject *init, *nw;
    if (!init && (!(init = PyUnicode_InternFromString("__init__")) || !(nw = PyUnicode_InternFromString("__new__"))))
        return PyErr_Clear(), 0;
    PyObject *i = _PyType_Lookup((PyTypeObject *)o, init), *n = _PyType_Lookup((PyTypeObject *)o, nw);
    return i && n && !PyFunction_Check(i) && !PyFunction_Check(n);
}

/* raise v [from cause] (cause -1: none; a None value: `from None`): an
 * exception class is instantiated (when its construction runs no Python
 * code), an exception instance raised as is. Returns -1. */
static int raise_value(tracer *T, int32_t v, int32_t cause)
{
    PyObject *o = T->vals[v].kind == V_OBJ ? tr_const(T, v) : NULL, *c = NULL;
    if (!o)
        return T->broke ? -1 : tr_break(T, "raise of a %s", kind_name(T, v));
    if (cause >= 0 && !(c = T->vals[cause].kind == V_OBJ ? tr_const(T, cause) : NULL))
        return T->broke ? -1 : tr_break(T, "raise ... from a %s", kind_name(T, cause));
    PyObject *inst = NULL;
    if (PyExceptionClass_Check(o)) {
        if (!exc_class_plain(o))
            return tr_break(T, "raise of %s (its construction runs Python code)", ((PyTypeObject *)o)->tp_name);
        if (!(inst = PyObject_CallNoArgs(o)))
            return tr_raise_error(T);
    } else if (PyExceptionInstance_Check(o)) {
        inst = Py_NewRef(o);
    } else {
        return tr_raise(T, PyObject_CallFunction(PyExc_TypeError, "s", "exceptions must derive from BaseException"));
    }
    if (c && (c == Py_None || PyExceptionInstance_Check(c))) {
        PyException_SetCause(inst, c == Py_None ? NULL : Py_NewRef(c));   /* also suppresses the context */
    } else if (c) {
        Py_DECREF(inst);
        return tr_break(T, "raise ... from %s", Py_TYPE(c)->tp_name);
    }
    return tr_raise(T, inst);
}

/* CHECK_EXC_MATCH: the exception under the match type(s) on top; pushes
 * whether it matches (the exception stays). */
static int check_exc_match(tracer *T, tframe *f)
{
    int32_t m = f->stack[--f->sp], e = f->stack[f->sp - 1];
    PyObject *mo = tr_pyobj(T, m);
    if (!mo)
        return -1;
    int r = T->vals[e].kind == V_OBJ && PyErr_GivenExceptionMatches(T->vals[e].obj, mo);
    Py_DECREF(mo);
    return push(f, tv_bool(T, r));
}

/* WITH_EXCEPT_START: an exception leaves a `with` block: the manager's
 * __exit__ (fourth on the stack, under lasti and the previous exception)
 * is called with (type, value, traceback) of the exception on top; what
 * it returns decides whether the exception is suppressed. */
static int with_except_start(tracer *T, tframe *f)
{
    if (f->sp < 4)
        return tr_break(T, "WITH_EXCEPT_START on a short stack");
    int32_t exit_fn = f->stack[f->sp - 4], e = f->stack[f->sp - 1];
    if (T->vals[e].kind != V_OBJ)
        return tr_break(T, "an exception that is not an object in a with block");
    PyObject *exc = T->vals[e].obj, *tb = PyException_GetTraceback(exc);
    int32_t pos[3] = { tv_obj(T, (PyObject *)Py_TYPE(exc), -1), e, tv_obj(T, tb ? tb : Py_None, -1) };
    Py_XDECREF(tb);
    if (pos[0] < 0 || pos[2] < 0)
        return -1;
    call_args a = { .pos = pos, .npos = 3 };
    return push(f, tr_call(T, exit_fn, &a));
}

/* PUSH_EXC_INFO / POP_EXCEPT: entering a handler saves the exception
 * being handled under the new one (None: none); leaving restores it. */
static int exc_info(tracer *T, tframe *f, int enter)
{
    if (!enter) {
        int32_t prev = f->stack[--f->sp];
        T->handled = T->vals[prev].kind == V_OBJ && T->vals[prev].obj == Py_None ? -1 : prev;
        return 0;
    }
    int32_t v = f->stack[--f->sp];
    if (push(f, T->handled >= 0 ? T->handled : tv_obj(T, Py_None, -1)) || push(f, v))
        return -1;
    T->handled = v;
    return 0;
}

/* RAISE_VARARGS argc: 0 re-raises the exception being handled; 1 raises
 * the value on top; 2 raises with a cause. Returns -1. */
static int raise_varargs(tracer *T, tframe *f, int argc)
{
    if (argc == 0)
        return T->handled >= 0 ? raise_value(T, T->handled, -1) : tr_break(T, "bare raise outside a handler");
    int32_t cause = argc == 2 ? f->stack[--f->sp] : -1, v = f->stack[--f->sp];
    return raise_value(T, v, cause);
}

/* Runs frame f from f->pc to its RETURN_VALUE (the returned value) or, in
 * a generator, to its next YIELD_VALUE (the yielded value, f->yielded set,
 * f->pc after it). */
/* LOAD_FAST idx: the local's value; in 3.13 also what 3.12's
 * LOAD_CLOSURE did: a cell or free variable's slot loaded to build a
 * closure gives its cell. 0, or -1 (break). */
static int load_fast(tracer *T, tframe *f, int idx)
{
    const char *kinds = PyBytes_AS_STRING(((PyCodeObject *)f->code)->co_localspluskinds);
    if (kinds[idx] & (TR_FAST_CELL | TR_FAST_FREE))
        return push(f, load_closure(T, f, idx));
    if (f->locals[idx] < 0)
        return tr_break(T, "local read before assignment");
    return push(f, f->locals[idx]);
}

/* STORE_FAST idx of the top (popped); storing NULL (a local saved
 * unbound by LOAD_FAST_AND_CLEAR) unbinds it. */
static void store_fast(tracer *T, tframe *f, int idx)
{
    int32_t v = f->stack[--f->sp];
    f->locals[idx] = T->vals[v].kind == V_NULL ? -1 : v;
}

/* TO_BOOL (3.13), and COMPARE_OP's conversion: v's truth as a bool. */
static int32_t to_bool(tracer *T, int32_t v)
{
    int t;
    return tr_truth(T, v, &t) ? -1 : tv_bool(T, t);
}

static int32_t run_frame(tracer *T, tframe *f)
{
    const uint8_t *code = (const uint8_t *)PyBytes_AS_STRING(f->bytes);
    int n = (int)(PyBytes_GET_SIZE(f->bytes) / 2);
    int pc = f->pc, ext = 0;
    tframe *caller = T->frame;
    T->frame = f;
    f->back = caller;
    f->yielded = 0;
    int32_t ret = -1;
    for (long steps = 0; steps < MAX_STEPS && !T->broke; steps++) {
        if (pc < 0 || pc >= n) {
            tr_break(T, "ran off the end of the bytecode");
            break;
        }
        if (!ext) {   /* an instruction starts */
            f->cur = pc;
            if (f->is_top && pc == T->stop_at) {
                T->stopped = 1;
                goto done;
            }
        }
        int raw = code[2 * pc], arg = code[2 * pc + 1] | ext;
        int op = tr_op_of[raw], at = pc;
        pc += 1 + tr_ncache[raw];
        ext = 0;
        int32_t r = 0;
        char loc[300];
        switch (op) {
        case OP_EXTENDED_ARG: ext = arg << 8; continue;
        case OP_CACHE: case OP_NOP: case OP_RESUME: case OP_PRECALL: case OP_COPY_FREE_VARS: continue;
        case OP_MAKE_CELL: r = make_cell(T, f, arg); break;
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
        case OP_LOAD_FAST: case OP_LOAD_FAST_CHECK: r = load_fast(T, f, arg); break;
        case OP_LOAD_FAST_LOAD_FAST:   /* 3.13: two locals, 4 bits each */
            r = load_fast(T, f, arg >> 4) || load_fast(T, f, arg & 15) ? -1 : 0;
            break;
        case OP_STORE_FAST_LOAD_FAST:   /* 3.13 */
            store_fast(T, f, arg >> 4);
            r = load_fast(T, f, arg & 15);
            break;
        case OP_STORE_FAST_STORE_FAST:   /* 3.13: the top into the first */
            store_fast(T, f, arg >> 4);
            store_fast(T, f, arg & 15);
            continue;
        case OP_LOAD_FAST_AND_CLEAR:   /* 3.12 inlined comprehensions save a local (maybe unbound) */
            r = push(f, f->locals[arg] >= 0 ? f->locals[arg] : tv_new(T, V_NULL));
            f->locals[arg] = -1;
            break;
        case OP_STORE_FAST: store_fast(T, f, arg); continue;
        case OP_DELETE_FAST: f->locals[arg] = -1; continue;
        case OP_LOAD_DEREF: r = push(f, load_deref(T, f, arg)); break;
        case OP_STORE_DEREF: r = store_deref(T, f, arg, f->stack[--f->sp]); break;
        case OP_LOAD_CLOSURE: r = push(f, load_closure(T, f, arg)); break;
        case OP_MAKE_FUNCTION: r = push(f, make_function(T, f, arg)); break;
        case OP_SET_FUNCTION_ATTRIBUTE: r = set_function_attribute(T, f, arg); break;
        case OP_LOAD_GLOBAL: {
            int32_t g = load_global(T, f, PyTuple_GET_ITEM(f->names, arg >> 1));
            r = (arg & 1) ? push_with_null(T, f, g) : push(f, g);
            break;
        }
        case OP_LOAD_ATTR: r = load_attr(T, f, PyTuple_GET_ITEM(f->names, ATTR_NAME(arg)), ATTR_METHOD(arg)); break;
        case OP_STORE_GLOBAL: r = store_global(T, f, PyTuple_GET_ITEM(f->names, arg), f->stack[--f->sp]); break;
        case OP_LOAD_METHOD: r = load_attr(T, f, PyTuple_GET_ITEM(f->names, arg), 1); break;
        case OP_LOAD_SUPER_ATTR: r = load_super_attr(T, f, arg); break;
        case OP_STORE_ATTR:   /* owner.name = value: owner on top, value under it */
            r = obj_setattr(T, f->stack[f->sp - 1], PyTuple_GET_ITEM(f->names, arg), f->stack[f->sp - 2]);
            f->sp -= 2;
            break;
        case OP_DELETE_ATTR: r = obj_setattr(T, f->stack[--f->sp], PyTuple_GET_ITEM(f->names, arg), -1); break;
        case OP_KW_NAMES: f->kwnames = PyTuple_GET_ITEM(f->consts, arg); continue;
        case OP_CALL: r = push(f, do_call(T, f, arg)); break;
        case OP_CALL_KW: r = push(f, call_kw(T, f, arg)); break;
        case OP_CALL_FUNCTION_EX: r = push(f, call_ex(T, f, arg & 1)); break;
        case OP_BINARY_OP: case OP_COMPARE_OP: {   /* operands stay live (on the stack) during the op */
            int32_t a = f->stack[f->sp - 2], b = f->stack[f->sp - 1];
            if (op == OP_COMPARE_OP && (CMP_OF(arg) < Py_LT || CMP_OF(arg) > Py_GE)) {
                r = tr_break(T, "COMPARE_OP %d", arg);
                break;
            }
            int32_t v = op == OP_BINARY_OP && subscr_update(T, code, n, pc, a, arg) ? item_binop(T, arg, a, b)
                      : op == OP_BINARY_OP ? tr_binop(T, arg, a, b) : tr_compare(T, CMP_OF(arg), a, b);
            if (v >= 0 && op == OP_COMPARE_OP && CMP_BOOL(arg))
                v = to_bool(T, v);
            f->sp -= 2;
            r = push(f, v);
            break;
        }
        case OP_IS_OP: {
            int32_t b = f->stack[--f->sp], a = f->stack[--f->sp];
            r = push(f, is_op(T, a, b, arg));
            break;
        }
        case OP_CONTAINS_OP: {
            int32_t b = f->stack[--f->sp], a = f->stack[--f->sp];
            int32_t c = contains(T, a, b);
            r = c < 0 ? -1 : push(f, arg ? tv_bool(T, T->vals[c].obj != Py_True) : c);
            break;
        }
        case OP_UNARY_NEGATIVE: case OP_UNARY_POSITIVE: case OP_UNARY_INVERT: case OP_UNARY_NOT:
            f->stack[f->sp - 1] = unary(T, op, f->stack[f->sp - 1]);
            r = f->stack[f->sp - 1] < 0 ? -1 : 0;
            break;
        case OP_TO_BOOL:   /* 3.13: before a conditional jump, `not`, and/or */
            f->stack[f->sp - 1] = to_bool(T, f->stack[f->sp - 1]);
            r = f->stack[f->sp - 1] < 0 ? -1 : 0;
            break;
        case OP_BINARY_SUBSCR: {
            int32_t k = f->stack[--f->sp], c = f->stack[--f->sp];
            r = push(f, tr_subscr(T, c, k));
            break;
        }
        case OP_BINARY_SLICE: {   /* 3.12: container[start:stop] */
            int32_t s = new_slice(T, &f->stack[f->sp - 2], 2), c = f->stack[f->sp - 3];
            f->sp -= 3;
            r = push(f, s < 0 ? -1 : tr_subscr(T, c, s));
            break;
        }
        case OP_STORE_SUBSCR:
            r = store_subscr(T, f->stack[f->sp - 2], f->stack[f->sp - 1], f->stack[f->sp - 3]);
            f->sp -= 3;
            break;
        case OP_STORE_SLICE: {    /* 3.12: container[start:stop] = value */
            int32_t s = new_slice(T, &f->stack[f->sp - 2], 2);
            r = s < 0 ? -1 : store_subscr(T, f->stack[f->sp - 3], s, f->stack[f->sp - 4]);
            f->sp -= 4;
            break;
        }
        case OP_DELETE_SUBSCR: {
            int32_t k = f->stack[--f->sp], c = f->stack[--f->sp];
            r = delete_subscr(T, c, k);
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
        case OP_LIST_TO_TUPLE: case OP_CALL_INTRINSIC_1: {
            int32_t l = f->stack[f->sp - 1];
            int32_t v = op == OP_LIST_TO_TUPLE ? list_to_tuple(T, l) : intrinsic_1(T, arg, l);
            f->stack[f->sp - 1] = v;
            r = v < 0 ? -1 : 0;
            break;
        }
        case OP_BUILD_MAP: case OP_BUILD_CONST_KEY_MAP: r = push(f, build_map(T, f, op, arg)); break;
        case OP_DICT_MERGE: case OP_DICT_UPDATE: {
            int32_t s = f->stack[--f->sp];
            r = dict_merge(T, f->stack[f->sp - arg], s);
            break;
        }
        case OP_MAP_ADD: {
            int32_t v = f->stack[--f->sp], k = f->stack[--f->sp];
            PyObject *key = tr_const(T, k);
            r = key ? dict_set(T, f->stack[f->sp - arg], key, v) : -1;
            break;
        }
        case OP_BUILD_SET: r = push(f, build_set(T, f, arg)); break;
        case OP_SET_ADD: case OP_SET_UPDATE: {
            int32_t v = f->stack[--f->sp];
            r = set_add(T, f->stack[f->sp - arg], v, op == OP_SET_UPDATE);
            break;
        }
        case OP_LIST_APPEND: {
            int32_t v = f->stack[--f->sp];
            r = tv_push_item(T, f->stack[f->sp - arg], v, NULL);
            break;
        }
        case OP_LIST_EXTEND: {
            int32_t s = f->stack[--f->sp];
            r = list_extend(T, f->stack[f->sp - arg], s);
            break;
        }
        case OP_BUILD_SLICE: {
            int32_t s = new_slice(T, &f->stack[f->sp - arg], arg);
            f->sp -= arg;
            r = push(f, s);
            break;
        }
        case OP_UNPACK_SEQUENCE: {
            int32_t s = f->stack[--f->sp], *it;
            int cnt;
            if ((r = bi_items(T, s, &it, &cnt)) < 0)
                break;
            if (cnt != arg) {
                r = tr_break(T, "unpacking %d values into %d", cnt, arg);
                break;
            }
            for (int i = cnt - 1; r >= 0 && i >= 0; i--)
                r = push(f, it[i]);
            break;
        }
        case OP_UNPACK_EX: r = unpack_ex(T, f, arg); break;
        case OP_GET_ITER: case OP_GET_YIELD_FROM_ITER:
            f->stack[f->sp - 1] = bi_iter(T, f->stack[f->sp - 1]);
            r = f->stack[f->sp - 1] < 0 ? -1 : 0;
            break;
        case OP_FOR_ITER: {
            int32_t v;
            int more = bi_next(T, f->stack[f->sp - 1], &v);
            if (more < 0)
                r = -1;
            else if (more)
                r = push(f, v);
            else {
                f->sp--;
                pc += arg + FOR_EXIT_SKIP;
            }
            break;
        }
        case OP_END_FOR: f->sp -= END_FOR_POPS; continue;
        case OP_SEND: r = send(T, f, &pc, arg); break;
        case OP_END_SEND:
            f->stack[f->sp - 2] = f->stack[f->sp - 1];
            f->sp--;
            continue;
        case OP_JUMP_FORWARD: pc += arg; continue;
        case OP_JUMP_BACKWARD: case OP_JUMP_BACKWARD_NO_INTERRUPT: pc -= arg; continue;
        case OP_POP_JUMP_IF_FALSE: case OP_POP_JUMP_IF_TRUE:
        case OP_POP_JUMP_IF_NONE: case OP_POP_JUMP_IF_NOT_NONE:
        case OP_POP_JUMP_FORWARD_IF_FALSE: case OP_POP_JUMP_FORWARD_IF_TRUE:
        case OP_POP_JUMP_FORWARD_IF_NONE: case OP_POP_JUMP_FORWARD_IF_NOT_NONE:
        case OP_POP_JUMP_BACKWARD_IF_FALSE: case OP_POP_JUMP_BACKWARD_IF_TRUE:
        case OP_POP_JUMP_BACKWARD_IF_NONE: case OP_POP_JUMP_BACKWARD_IF_NOT_NONE:
            r = jump_if(T, f, op, &pc, arg);
            break;
        case OP_JUMP_IF_FALSE_OR_POP: case OP_JUMP_IF_TRUE_OR_POP: {
            int t;
            if ((r = tr_truth(T, f->stack[f->sp - 1], &t)) < 0)
                break;
            if (t == (op == OP_JUMP_IF_TRUE_OR_POP))
                pc += arg;
            else
                f->sp--;
            continue;
        }
        case OP_FORMAT_VALUE: r = push(f, format_value(T, f, arg)); break;
        case OP_CONVERT_VALUE: r = push(f, format_value(T, f, arg & 3)); break;   /* 3.13: str/repr/ascii */
        case OP_FORMAT_SIMPLE: r = push(f, format_value(T, f, 0)); break;        /* 3.13: format(v) */
        case OP_FORMAT_WITH_SPEC: r = push(f, format_value(T, f, 4)); break;     /* 3.13: format(v, spec) */
        case OP_BUILD_STRING: r = push(f, build_string(T, f, arg)); break;
        case OP_MATCH_SEQUENCE: case OP_MATCH_MAPPING: {
            int b = match_kind(T, f->stack[f->sp - 1], op == OP_MATCH_SEQUENCE ? Py_TPFLAGS_SEQUENCE : Py_TPFLAGS_MAPPING);
            r = b < 0 ? -1 : push(f, tv_bool(T, b));
            break;
        }
        case OP_MATCH_KEYS: r = push(f, match_keys(T, f->stack[f->sp - 2], f->stack[f->sp - 1])); break;
        case OP_MATCH_CLASS: {
            int32_t names = f->stack[f->sp - 1], cls = f->stack[f->sp - 2], subj = f->stack[f->sp - 3];
            f->sp -= 3;
            r = push(f, match_class(T, subj, cls, names, arg));
            break;
        }
        case OP_GET_LEN: {
            int32_t *it;
            int cnt;
            r = bi_items(T, f->stack[f->sp - 1], &it, &cnt);
            if (r >= 0)
                r = push(f, tv_int(T, cnt));
            break;
        }
        case OP_BEFORE_WITH: r = before_with(T, f); break;
        case OP_PUSH_EXC_INFO: case OP_POP_EXCEPT: r = exc_info(T, f, op == OP_PUSH_EXC_INFO); break;
        case OP_CHECK_EXC_MATCH: r = check_exc_match(T, f); break;
        case OP_WITH_EXCEPT_START: r = with_except_start(T, f); break;
        case OP_RERAISE: r = raise_value(T, f->stack[--f->sp], -1); break;
        case OP_RAISE_VARARGS: r = raise_varargs(T, f, arg); break;
        case OP_LOAD_ASSERTION_ERROR: r = push(f, tv_obj(T, PyExc_AssertionError, -1)); break;
        case OP_LOAD_BUILD_CLASS: {
            PyObject *bc = PyDict_GetItemString(f->builtins, "__build_class__");
            r = bc ? push(f, tv_obj(T, bc, -1)) : tr_break(T, "__build_class__ not found");
            break;
        }
        case OP_IMPORT_NAME: r = push(f, import_name(T, f, PyTuple_GET_ITEM(f->names, arg))); break;
        case OP_IMPORT_FROM: r = push(f, tr_load_attr(T, f->stack[f->sp - 1], PyTuple_GET_ITEM(f->names, arg))); break;
        case OP_RETURN_GENERATOR: r = push(f, tv_obj(T, Py_None, -1)); break;   /* popped on first resume */
        case OP_YIELD_VALUE:
            f->yielded = 1;
            ret = f->stack[--f->sp];
            goto done;
        case OP_RETURN_VALUE:
            ret = f->stack[--f->sp];
            goto done;
        case OP_RETURN_CONST:
            if ((ret = tv_obj(T, PyTuple_GET_ITEM(f->consts, arg), -1)) < 0) {
                r = -1;
                break;
            }
            goto done;
        default:
            where(f, at, loc, sizeof loc);
            tr_break(T, "bytecode %s is not supported yet at %s", tr_opname_all[raw], loc);
            goto done;
        }
        if (r < 0 && T->exc && !T->broke && !PyErr_Occurred()) {
            int u = unwind(T, f, at, &pc);
            if (u == 0)
                continue;   /* at the handler */
            if (u == 1)
                goto done;  /* propagates to the caller */
        }
        if (r < 0) {
            if (!PyErr_Occurred() && T->broke && !strstr(T->r->reason, " at ")) {
                size_t len = strlen(T->r->reason);
                where(f, at, loc, sizeof loc);
                snprintf(T->r->reason + len, sizeof T->r->reason - len, " at %s", loc);
            }
            if (!T->broke && !PyErr_Occurred())
                tr_break(T, "internal: a step failed without a reason");
            goto done;
        }
    }
    if (!T->broke)
        tr_break(T, "trace too long");
done:
    f->pc = pc;
    f->back = NULL;
    T->frame = caller;
    return T->broke || PyErr_Occurred() ? -1 : ret;
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

static int build_out(tracer *T, int32_t v, int32_t slot);

/* Output plan for instance v: a TO_OBJ over its attribute and item values. */
static int inst_out(tracer *T, int32_t v, int32_t slot)
{
    int32_t *vals = NULL, first = T->r->nouts;
    int n = 0, rc = -1, set = set_is(T, v);
    PyObject *spec = NULL;
    if (set) {   /* a new set per call: set(tuple of its elements) */
        if (T->vals[v].done++)
            return tr_break(T, "returning the same set twice");
        if (set_values(T, v, &vals, &n)) {
            PyMem_Free(vals);
            return -1;
        }
        spec = Py_NewRef(T->vals[v].obj);
    } else {
        spec = obj_out_spec(T, v, &vals, &n);
    }
    if (!spec)
        return -1;
    T->r->outs[slot].kind = set ? TO_TUPLE : TO_OBJ;
    T->r->outs[slot].obj = spec;
    T->r->outs[slot].first = first;
    T->r->outs[slot].n = n;
    for (int i = 0; i < n; i++)
        if (out_new(T, TO_CONST) < 0)
            goto out;
    for (int i = 0; i < n; i++)
        if (build_out(T, vals[i], first + i))
            goto out;
    rc = 0;
out:
    PyMem_Free(vals);
    return rc;
}

/* The graph input node of input number k. */
static int32_t input_node(tracer *T, int32_t k)
{
    for (int32_t i = 0; i < T->g->n; i++)
        if (T->g->nodes[i].op == SMELT_OP_INPUT && T->g->nodes[i].a.input.index == k)
            return i;
    return -1;
}

/* Graph node `node` as an input tensor object holds it: the input number
 * whose object that node is (an INPUT node of a tensor from a source, or
 * the current value of an input updated in place), else -1. */
static int32_t input_of_node(tracer *T, int32_t node)
{
    for (int32_t i = 0; i < T->nmuts; i++)
        if (T->vals[T->muts[i]].node == node)
            return T->vals[T->muts[i]].mut - 1;
    const smelt_node *n = &T->g->nodes[node];
    return n->op == SMELT_OP_INPUT ? n->a.input.index : -1;
}

/* Counts, for the output plan of root values roots[0..n), the output
 * tensors based on each graph node (a tensor made by the graph and the
 * views of it, or two values of one node): a node with two or more gets
 * them as views of one graph output (T->sharers), as eager's share
 * memory. Inputs and their views are the caller's tensors already. */
static int count_sharers(tracer *T, const int32_t *roots, int n)
{
    PyMem_Free(T->sharers);
    PyMem_Free(T->base_out);
    T->sharers = PyMem_Calloc((size_t)T->g->n + 1, 1);
    T->base_out = PyMem_Malloc(sizeof(int32_t) * ((size_t)T->g->n + 1));
    marker m = { .seen = PyMem_Calloc((size_t)T->nvals + 1, 1) };
    int rc = T->sharers && T->base_out && m.seen ? 0 : (PyErr_NoMemory(), -1);
    for (int32_t i = 0; !rc && i < T->g->n; i++)
        T->base_out[i] = -1;
    for (int i = 0; !rc && i < n; i++)
        rc = mark_push(&m, roots[i]);
    while (!rc && m.n > 0) {
        int32_t v = m.todo[--m.n];
        if (m.seen[v])
            continue;
        m.seen[v] = 1;
        tv *x = &T->vals[v];
        if (x->kind == V_TENSOR && !x->mut && (x->src < 0 || input_of_node(T, x->node) < 0)) {
            int32_t b = tr_view_base(T->g, x->node);
            if (input_of_node(T, b) < 0 && T->sharers[b] < 2)
                T->sharers[b]++;
        }
        if (x->kind != V_TENSOR)
            rc = mark_children(T, &m, v);
    }
    PyMem_Free(m.seen);
    PyMem_Free(m.todo);
    return rc;
}

/* When graph node c is a host call's result that eager gives as a view of
 * an argument which is (a view of) graph input k: k, with the result's
 * strides and storage offset in that input's storage (relative to the
 * input's own offset) in st and *off; -1 when not; -2 on error. */
static int32_t call_view_of_input(tracer *T, int32_t c, int64_t *st, int64_t *off)
{
    if (T->g->nodes[c].op != SMELT_OP_CALL)
        return -1;
    for (int32_t j = 0; j < T->nlays; j++) {
        const struct tr_layout *l = &T->lays[j];
        if (l->node != c || l->vsrc < 0)
            continue;
        int32_t sb = tr_view_base(T->g, l->vsrc), k = input_of_node(T, sb);
        int64_t sst[SMELT_MAX_DIMS], soff = 0;
        if (k < 0 || !tr_view_geometry(T->g, sb, T->g->nodes[input_node(T, k)].stride, l->vsrc, sst, &soff))
            return -1;
        memcpy(st, l->st, sizeof l->st);
        *off = soff + l->voff;   /* the meta run's argument had offset 0 and the argument's strides */
        return k;
    }
    return -1;
}

/* 1 when strides st are node n's contiguous strides (size-1 dims free). */
static int strides_dense(const smelt_node *n, const int64_t *st)
{
    int64_t c[SMELT_MAX_DIMS];
    tr_contiguous_strides(n, c);
    for (int d = 0; d < n->ndim; d++)
        if (n->shape[d] > 1 && st[d] != c[d])
            return 0;
    return 1;
}

/* Eager's layout of graph node b into bst: 1 when it is dense but not
 * contiguous (a transposed element-wise result, a column-major LAPACK
 * result), with perm ordering b's dims from the slowest to the fastest
 * (PERMUTE of b by perm is then contiguous in eager's order); 0 with bst
 * contiguous otherwise (also when smelt does not model the layout); -1 on
 * error or a break (a layout with gaps or overlaps: empty_strided, ...). */
static int base_layout(tracer *T, int32_t b, int64_t *bst, int8_t *perm)
{
    const smelt_node *n = &T->g->nodes[b];
    int64_t es[SMELT_MAX_DIMS];
    tr_contiguous_strides(n, bst);
    int k = ops_eager_strides(T, b, es);
    if (k <= 0 || strides_dense(n, es) || smelt_node_numel(n) == 0)
        return k < 0 ? -1 : 0;
    int nd = n->ndim, np = 0, first;
    for (int d = 0; d < nd; d++)   /* size-1 dims first (where they go does not matter) */
        if (n->shape[d] <= 1)
            perm[np++] = (int8_t)d;
    first = np;
    for (int d = 0; d < nd; d++)   /* then the others by stride, largest first (stable) */
        if (n->shape[d] > 1) {
            int j = np++;
            for (; j > first && es[perm[j - 1]] < es[d]; j--)
                perm[j] = perm[j - 1];
            perm[j] = (int8_t)d;
        }
    int64_t z = 1;
    for (int i = nd - 1; i >= 0; i--) {   /* dense in that order */
        int d = perm[i];
        if (n->shape[d] > 1 && es[d] != z)
            return tr_break(T, "a result eager lays out with gaps or overlaps is returned");
        z *= n->shape[d];
    }
    memcpy(bst, es, sizeof es);
    return 1;
}

/* Output plan of tensor value v when eager returns an input tensor itself
 * (TO_INPUT: `return x`, also after in-place updates), a view of one
 * (TO_VIEW: x.view(3), x.t()[1:], with eager's strides and offset), or a
 * tensor sharing memory with another result (TO_OUTVIEW, see
 * count_sharers): 1 when it is one of those, 0 otherwise, -1 on error. */
static int alias_out(tracer *T, int32_t v, tr_out *o)
{
    tv *x = &T->vals[v];
    int32_t k = x->mut ? x->mut - 1 : x->src >= 0 ? input_of_node(T, x->node) : -1;
    if (k >= 0) {
        o->kind = TO_INPUT;
        o->index = k;
        return 1;
    }
    int32_t b = tr_view_base(T->g, x->node);
    int64_t bst[SMELT_MAX_DIMS], st[SMELT_MAX_DIMS], off = 0, boff = 0;
    if ((k = input_of_node(T, b)) >= 0) {
        if (!tr_view_geometry(T->g, b, T->g->nodes[input_node(T, k)].stride, x->node, st, &off))
            return 0;
        o->kind = TO_VIEW;
    } else if ((k = call_view_of_input(T, b, bst, &boff)) >= 0) {
        /* a host call eager answers with a view of an input (atleast_2d, aten.slice, ...) */
        if (!tr_view_geometry(T->g, b, bst, x->node, st, &off))
            return 0;
        off += boff;
        o->kind = TO_VIEW;
    } else if (k == -2) {
        return -1;
    } else {
        int shared = T->sharers && T->sharers[b] >= 2 && (b != x->node || T->base_out[b] >= 0);
        int8_t perm[SMELT_MAX_DIMS] = { 0 };
        int lay = base_layout(T, b, bst, perm);
        if (lay < 0)
            return -1;
        if (!shared && !lay && b == x->node)
            return 0;   /* a new contiguous tensor */
        for (int32_t i = x->node; i != b; i = T->g->nodes[i].src[0])
            if (T->contig[i])
                return 0;   /* eager made a new tensor on the way (a reshape that copies, pooling, ...) */
        if (!tr_view_geometry(T->g, b, bst, x->node, st, &off))
            return 0;   /* eager copies (a reshape): a tensor of its own */
        if (!shared && !lay && off == 0 && strides_dense(&T->g->nodes[x->node], st))
            return 0;   /* as a tensor of its own */
        if (T->base_out[b] < 0) {
            int32_t p = b;
            if (lay) {   /* b laid out as eager does: its dims permuted into a contiguous output */
                smelt_node pn = { .op = SMELT_OP_PERMUTE, .nsrc = 1, .src = { b } };
                memcpy(pn.a.perm.perm, perm, sizeof perm);
                if ((p = tr_node_add(T, &pn)) < 0)
                    return -1;
            }
            T->base_out[b] = T->g->nout;
            if (smelt_graph_output(T->g, p))
                return tr_break(T, "%s", T->g->err);
        }
        k = T->base_out[b];
        o->kind = TO_OUTVIEW;
    }
    o->index = k;
    o->node = x->node;
    return (o->obj = tr_view_tuple(&T->g->nodes[x->node], st, off)) ? 1 : -1;
}

/* Output plan for value v; containers get contiguous child slots. */
static int build_out(tracer *T, int32_t v, int32_t slot)
{
    tv *x = &T->vals[v];
    tr_out *o = &T->r->outs[slot];
    int alias;
    switch (x->kind) {
    case V_TENSOR:   /* one graph output per tensor value: a value returned twice is one object */
        if (x->pos <= 0 && T->stopped && x->frozen)
            return tr_break(T, "a tensor that may share memory smelt does not model is live at the break");
        if (x->pos <= 0 && (alias = alias_out(T, v, o)) != 0)
            return alias < 0 ? -1 : 0;
        o->kind = TO_TENSOR;
        if (x->pos > 0) {
            o->index = x->pos - 1;
            return 0;
        }
        if (T->stopped && ops_eager_contiguous(T, x->node) != 1)   /* the rest of the frame may look at its layout */
            return tr_break(T, "a tensor whose eager layout smelt does not model is live at the break");
        o->index = T->g->nout;
        x->pos = T->g->nout + 1;
        if (T->base_out && T->base_out[x->node] < 0)
            T->base_out[x->node] = T->g->nout;
        return smelt_graph_output(T->g, x->node) ? tr_break(T, "%s", T->g->err) : 0;
    case V_OBJ: {
        if (x->pos == 1)   /* a set or class made in the trace: a constant output would be shared by every call */
            return tr_break(T, "returning a %s built in the traced code", PyType_Check(x->obj) ? "class" : "set");
        if (x->src >= 0 && !is_plain_const(x->obj)) {   /* the object the source holds, unguarded */
            o->kind = TO_SOURCE;
            o->index = x->src;
            return 0;
        }
        PyObject *c = tr_const(T, v);
        if (!c)
            return -1;
        T->r->outs[slot].kind = TO_CONST;
        T->r->outs[slot].obj = Py_NewRef(c);
        return 0;
    }
    case V_TUPLE: case V_LIST: case V_DICT: {
        if (x->kind == V_LIST && x->obj)
            return tr_break(T, "a slice of a %s module is live at the end of the trace", ((PyTypeObject *)x->obj)->tp_name);
        if (x->frozen && x->src >= 0) {   /* an object passed in, unchanged: that very object */
            o->kind = TO_SOURCE;
            o->index = x->src;
            return 0;
        }
        if (x->kind != V_TUPLE && x->done++)   /* one mutable object in eager, two if rebuilt twice */
            return tr_break(T, "returning the same %s twice", kind_name(T, v));
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
            for (int i = 0; keys && i < n; i++)
                PyTuple_SET_ITEM(keys, i, Py_NewRef(T->vals[v].keys[i]));
            T->r->outs[slot].obj = keys;
            if (!keys)
                return -1;
        }
        for (int i = 0; i < n; i++)
            if (build_out(T, T->vals[v].items[i], first + i))
                return -1;
        return 0;
    }
    case V_INST:
        return inst_out(T, v, slot);
    case V_SYM: {   /* a symbolic size: a 0-d int64 output holding its value per call */
        smelt_node p = { .op = SMELT_OP_FULL, .dtype = SMELT_I64 };
        p.a.scalar.i = PyLong_AsLongLong(x->obj);
        p.a.scalar.f = (double)p.a.scalar.i;
        int32_t e = x->node, id = tr_node_add(T, &p);
        if (id < 0 || dyn_scalar(T, id, e))
            return -1;
        o = &T->r->outs[slot];
        o->kind = TO_INT;
        o->index = T->g->nout;
        return smelt_graph_output(T->g, id) ? tr_break(T, "%s", T->g->err) : 0;
    }
    case V_SLICE: {
        PyObject *sl = tr_pyobj(T, v);
        if (!sl)
            return -1;
        o->kind = TO_CONST;
        o->obj = sl;
        return 0;
    }
    case V_BOUND: {   /* x.method / obj.method before its call, in a frame state */
        if (!T->stopped)   /* a method returned: its lookup is not checked */
            return tr_break(T, "returning a method");
        int32_t c = out_new(T, TO_CONST);
        if (c < 0 || build_out(T, x->self_, c))
            return -1;
        o = &T->r->outs[slot];
        o->kind = TO_BOUND;
        o->obj = Py_NewRef(T->vals[v].obj);
        o->first = c;
        o->n = 1;
        return 0;
    }
    default:
        return tr_break(T, "returning a %s", kind_name(T, v));
    }
}

/* Values the side effects of the trace write (mutated outside containers,
 * attributes left changed, globals assigned) appended to roots[*n..]
 * (room: T->ndirty + T->nattrw + len(globalw)); *changed gets, per
 * attribute write, 1 when it is replayed. 0, or -1 (a break). */
static int effect_roots(tracer *T, int32_t *roots, int *n, uint8_t *changed)
{
    for (int32_t i = 0; i < T->ndirty; i++)
        roots[(*n)++] = T->dirty[i];
    for (int32_t i = 0; i < T->nattrw; i++) {
        int c = obj_write_changed(T, &T->attrw[i]);
        if (c < 0)
            return -1;
        changed[i] = (uint8_t)c;
        if (c && T->vals[T->attrw[i].owner].src < 0)
            return tr_break(T, "STORE_ATTR: the traced code leaves attribute %U of a %s object changed",
                            T->attrw[i].name, Py_TYPE(T->attrw[i].obj)->tp_name);
        if (c && T->attrw[i].val >= 0)
            roots[(*n)++] = T->attrw[i].val;
    }
    PyObject *k, *v;
    Py_ssize_t p = 0;
    while (T->globalw && PyDict_Next(T->globalw, &p, &k, &v))
        roots[(*n)++] = (int32_t)PyLong_AsLong(v);
    for (int32_t i = 0; i < T->ncellw; i++)
        roots[(*n)++] = T->cellw[i].val;
    return 0;
}

/* A new list or dict with container value c's final contents (what a
 * mutated outside container is set to), into slot. */
static int content_out(tracer *T, int32_t c, int32_t slot)
{
    int n = T->vals[c].n, kind = T->vals[c].kind;
    int32_t first = T->r->nouts;
    for (int i = 0; i < n; i++)
        if (out_new(T, TO_CONST) < 0)
            return -1;
    tr_out *o = &T->r->outs[slot];
    o->kind = kind == V_LIST ? TO_LIST : TO_DICT;
    o->first = first;
    o->n = n;
    if (kind == V_DICT) {
        PyObject *keys = PyTuple_New(n);
        for (int i = 0; keys && i < n; i++)
            PyTuple_SET_ITEM(keys, i, Py_NewRef(T->vals[c].keys[i]));
        if (!(T->r->outs[slot].obj = keys))
            return -1;
    }
    for (int i = 0; i < n; i++)
        if (build_out(T, T->vals[c].items[i], first + i))
            return -1;
    return 0;
}

/* One more effect: kind on the object of source `src` (-1: none), the
 * value of value id val (-1: none) under name. 0 or -1. */
static int effect_new(tracer *T, tr_effect_kind kind, int32_t src, int32_t val, PyObject *name, int contents)
{
    tr_result *r = T->r;
    tr_effect *ne = PyMem_Realloc(r->effects, sizeof *ne * (size_t)(r->neffects + 1));
    if (!ne)
        return PyErr_NoMemory(), -1;
    r->effects = ne;
    tr_effect *e = &r->effects[r->neffects++];
    *e = (tr_effect){ .kind = (uint8_t)kind, .target = -1, .val = -1, .name = Py_XNewRef(name) };
    if (src >= 0) {
        if ((e->target = out_new(T, TO_SOURCE)) < 0)
            return -1;
        T->r->outs[e->target].index = src;
    }
    if (val >= 0) {
        int32_t slot = out_new(T, TO_CONST);
        if (slot < 0 || (contents ? content_out(T, val, slot) : build_out(T, val, slot)))
            return -1;
        r->effects[r->neffects - 1].val = slot;
    }
    return 0;
}

/* The effects of the trace on objects from outside, in the output plan
 * (after its value or state): changed is effect_roots'. 0 or -1. */
static int emit_effects(tracer *T, const uint8_t *changed)
{
    for (int32_t i = 0; i < T->ndirty; i++)
        if (effect_new(T, EF_CONTENTS, T->vals[T->dirty[i]].src, T->dirty[i], NULL, 1))
            return -1;
    for (int32_t i = 0; i < T->nattrw; i++)
        if (changed[i] && effect_new(T, EF_ATTR, T->vals[T->attrw[i].owner].src, T->attrw[i].val, T->attrw[i].name, 0))
            return -1;
    PyObject *k, *v;
    Py_ssize_t p = 0;
    while (T->globalw && PyDict_Next(T->globalw, &p, &k, &v))
        if (effect_new(T, EF_GLOBAL, -1, (int32_t)PyLong_AsLong(v), k, 0))
            return -1;
    for (int32_t i = 0; i < T->ncellw; i++) {
        if (effect_new(T, EF_CELL, T->cellw[i].src, T->cellw[i].val, T->cellw[i].name, 0))
            return -1;
        T->r->effects[T->r->neffects - 1].index = T->cellw[i].index;
    }
    return 0;
}

/* The output plan of frame f's state for a partial trace stopped before
 * its instruction at f->pc: a tuple of its variables (unbound: TO_NULL;
 * cell variables: their contents; free variables: TO_NULL, the function's
 * cells are used) and its stack. */
static int state_out(tracer *T, tframe *f)
{
    PyCodeObject *co = (PyCodeObject *)f->code;
    int first_free = co->co_nlocalsplus - co->co_nfreevars, n = f->nlocals + f->sp;
    int32_t root = out_new(T, TO_TUPLE), first = T->r->nouts;
    for (int i = 0; root >= 0 && i < n; i++)
        if (out_new(T, TO_NULL) < 0)
            return -1;
    size_t room = (size_t)n + (size_t)T->ndirty + (size_t)T->nattrw + (size_t)T->ncellw + (T->globalw ? (size_t)PyDict_GET_SIZE(T->globalw) : 0);
    int32_t *roots = root < 0 ? NULL : PyMem_Malloc(sizeof(int32_t) * (room + 1));
    uint8_t *changed = roots ? PyMem_Calloc((size_t)T->nattrw + 1, 1) : NULL;
    int nr = n;
    if (changed) {
        memcpy(roots, f->locals, sizeof(int32_t) * (size_t)f->nlocals);
        memcpy(roots + f->nlocals, f->stack, sizeof(int32_t) * (size_t)f->sp);
    }
    int bad = !changed || effect_roots(T, roots, &nr, changed) || count_sharers(T, roots, nr);
    PyMem_Free(roots);
    if (bad) {
        PyMem_Free(changed);
        return root < 0 || PyErr_Occurred() || T->broke ? -1 : (PyErr_NoMemory(), -1);
    }
    T->r->outs[root].first = first;
    T->r->outs[root].n = n;
    for (int i = 0; i < n; i++) {
        int32_t v = i < f->nlocals ? f->locals[i] : f->stack[i - f->nlocals];
        if (i < f->nlocals && (i >= first_free || v < 0))
            continue;
        if (v >= 0 && T->vals[v].kind == V_CELL && i < f->nlocals)
            v = T->vals[v].self_;
        if (v < 0 || T->vals[v].kind == V_NULL)
            continue;
        if (build_out(T, v, first + i)) {
            PyMem_Free(changed);
            return -1;
        }
    }
    bad = emit_effects(T, changed);
    PyMem_Free(changed);
    T->r->stop_pc = f->pc;
    T->r->nslots = f->nlocals;
    T->r->nstack = f->sp;
    T->r->kwnames = Py_XNewRef(f->kwnames);
    return bad ? -1 : 0;
}

static void tracer_free(tracer *T)
{
    for (int32_t i = 0; i < T->nvals; i++) {
        PyMem_Free(T->vals[i].items);
        PyMem_Free(T->vals[i].keys);
        if (T->vals[i].kind == V_ITER)
            frame_free(T->vals[i].frame);
    }
    PyMem_Free(T->vals ? T->vals - 1 : NULL);
    PyMem_Free(T->contig);
    PyMem_Free(T->ngr);
    PyMem_Free(T->lays);
    PyMem_Free(T->st_known);
    PyMem_Free(T->st_tab);
    PyMem_Free(T->dirty);
    Py_XDECREF(T->containers);
    Py_XDECREF(T->globalw);
    PyMem_Free(T->sharers);
    PyMem_Free(T->base_out);
    PyMem_Free(T->attrw);
    PyMem_Free(T->cellw);
    PyMem_Free(T->muts);
    Py_CLEAR(T->exc);
    Py_XDECREF(T->tensor_of);
}

/* Value of top-frame argument i: the object wrapped with its source; a
 * **kwargs dict becomes a dict of wrapped values. */
static int32_t top_arg(tracer *T, PyCodeObject *co, int i, int argc, PyObject *o)
{
    int32_t s = tr_src_new(T, SRC_LOCAL, -1, i, NULL);
    if (s < 0)
        return -1;
    if (!(co->co_flags & CO_VARKEYWORDS) || i != argc - 1 || !PyDict_Check(o))
        return tv_obj(T, o, s);
    int32_t d = tv_new(T, V_DICT);
    PyObject *k, *val;
    Py_ssize_t p = 0;
    while (d >= 0 && PyDict_Next(o, &p, &k, &val)) {
        int32_t ks = tr_src_new(T, SRC_DICT, s, 0, k);
        int32_t iv = ks < 0 ? -1 : tv_obj(T, val, ks);
        if (iv < 0 || tv_push_item(T, d, iv, k))
            return -1;
    }
    return tr_add_guard(T, TG_LEN, s, NULL, PyDict_GET_SIZE(o)) ? -1 : d;
}

/* The top frame set up from st: a call's parameters (pc 0), or a frame
 * state (cell variables made V_CELLs around their contents, free
 * variables left to the function's cells, the stack). 0 or -1. */
static int top_setup(tracer *T, PyCodeObject *co, const tr_start *st, tframe *f)
{
    int argc = co->co_argcount + co->co_kwonlyargcount + !!(co->co_flags & CO_VARARGS) +
               !!(co->co_flags & CO_VARKEYWORDS);
    if (st->pc == 0) {
        if (st->nslots < argc)
            return tr_break(T, "unsupported signature");
        for (int i = 0; i < argc; i++)   /* the top frame's arguments are already laid out */
            if ((f->locals[i] = top_arg(T, co, i, argc, st->slots[i])) < 0)
                return -1;
        return 0;
    }
    int first_free = co->co_nlocalsplus - co->co_nfreevars;
    if (st->nslots != co->co_nlocalsplus || st->nstack > f->cap)
        return tr_break(T, "a frame state that does not fit the code");
    for (int i = 0; i < first_free; i++) {
        int32_t v = -1;
        if (st->slots[i] && (v = tv_obj(T, st->slots[i], tr_src_new(T, SRC_LOCAL, -1, i, NULL))) < 0)
            return -1;
        if (co->co_localspluskinds && (PyBytes_AS_STRING(co->co_localspluskinds)[i] & TR_FAST_CELL)) {
            int32_t c = tv_new(T, V_CELL);
            if (c < 0)
                return -1;
            T->vals[c].self_ = v;
            v = c;
        }
        f->locals[i] = v;
    }
    for (int j = 0; j < st->nstack; j++) {
        int32_t v = st->stack[j] ? tv_obj(T, st->stack[j], tr_src_new(T, SRC_LOCAL, -1, st->nslots + j, NULL))
                                 : tv_new(T, V_NULL);
        if (v < 0)
            return -1;
        f->stack[f->sp++] = v;
    }
    f->pc = st->pc;
    f->kwnames = st->kwnames;
    return 0;
}

/* The end of a trace that ran to the function's return (ret) or stopped
 * (T->stopped): the output plan, in-place updates. 0, or -1 (a break). */
static int trace_end(tracer *T, tframe *f, int32_t ret)
{
    if (obj_finish(T))
        return -1;
    if (T->stopped)
        return state_out(T, f) || mut_outputs(T) ? -1 : 0;
    int32_t root = out_new(T, TO_CONST);
    size_t room = 1 + (size_t)T->ndirty + (size_t)T->nattrw + (size_t)T->ncellw + (T->globalw ? (size_t)PyDict_GET_SIZE(T->globalw) : 0);
    int32_t *roots = PyMem_Malloc(sizeof(int32_t) * room);
    uint8_t *changed = roots ? PyMem_Calloc((size_t)T->nattrw + 1, 1) : NULL;
    int nr = 1, bad = !changed;
    if (changed)
        roots[0] = ret;
    bad = bad || root < 0 || effect_roots(T, roots, &nr, changed) || count_sharers(T, roots, nr) ||
          build_out(T, ret, root) || emit_effects(T, changed) || mut_outputs(T);
    if (!changed && !PyErr_Occurred())
        PyErr_NoMemory();
    PyMem_Free(roots);
    PyMem_Free(changed);
    if (bad)
        return -1;
    int aliases = T->r->neffects;
    for (int32_t i = 0; i < T->r->nouts; i++)
        aliases += T->r->outs[i].kind == TO_INPUT || T->r->outs[i].kind == TO_VIEW;
    if (T->g->nout == 0 && !aliases && !T->r->mut_in && !T->r->ninputs)   /* plain Python: left to CPython */
        return tr_break(T, "no tensor computed");
    return 0;
}

/* One trace of fn from st, stopping before the top frame's instruction
 * at stop_at (-1: never). 0 whole, 2 stopped (a partial trace), 1 break,
 * -1 error; out->break_at... the first break's top-frame instruction. */
static int trace_once(PyObject *fn, const tr_start *st, int stop_at, tr_result *out, int *break_at)
{
    memset(out, 0, sizeof *out);
    out->stop_pc = -1;
    tracer T = { .r = out, .handled = -1, .stop_at = stop_at, .break_at = -1, .dyn_mode = st->dyn_mode,
                 .dyn_seen = st->seen, .device = -2 };
    *break_at = -1;
    out->keep = PyList_New(0);
    out->graph = smelt_graph_new();
    if (out->graph)   /* Python floats and float math on integers (guarded) */
        out->graph->default_float = (uint8_t)ops_default_float();
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
    int rc = -1;
    tframe *f = NULL;
    if (co->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)) {
        tr_break(&T, "%U is a generator or coroutine function: its call makes a %s object", co->co_name,
                 co->co_flags & CO_GENERATOR ? "generator" : "coroutine");
        goto done;
    }
    if (!(f = frame_new((PyObject *)co, fn, T.globals, -1, 0)))
        goto done;
    f->is_top = 1;
    if (obj_autocast_start(&T) || top_setup(&T, co, st, f))
        goto done;
    int32_t ret = run_frame(&T, f);
    if (ret < 0 && !T.stopped && T.exc && !T.broke && !PyErr_Occurred())
        tr_break(&T, "the traced code raises %R", T.exc);
    if ((ret < 0 && !T.stopped) || T.broke || PyErr_Occurred() || trace_end(&T, f, ret))
        goto done;
    rc = T.stopped ? 2 : 0;
done:
    frame_free(f);
    if (rc < 0 && PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_MemoryError) &&
        !PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {   /* an unexpected error: a break, never a crash */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *rep = ev ? PyObject_Repr(ev) : NULL;
        const char *u = rep ? PyUnicode_AsUTF8(rep) : NULL;
        if (!T.broke)
            snprintf(out->reason, sizeof out->reason, "error while tracing: %s: %s",
                     ((PyTypeObject *)et)->tp_name, u ? u : "?");
        Py_XDECREF(rep);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        PyErr_Clear();
    }
    if (rc < 0 && !PyErr_Occurred())
        rc = 1;
    *break_at = T.break_at;
    out->device = T.device >= 0 ? T.device : -1;
    tracer_free(&T);
    return rc;
}

int tracer_trace_from(PyObject *fn, const tr_start *st, tr_result *out)
{
    int at;
    int rc = trace_once(fn, st, -1, out, &at);
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(fn);
    if (rc != 1 || at < 0 || at == st->pc || !tr_resumable(co, at) || (out->dyn && out->dyn->failed))
        return rc;   /* (symbols stopped it: the caller traces it static, whole) */
    tr_result part;   /* trace again, stopping before the instruction that broke */
    int at2, rc2 = trace_once(fn, st, at, &part, &at2);
    if (rc2 == 2) {
        memcpy(part.reason, out->reason, sizeof part.reason);
        if (part.dyn && out->dyn && out->dyn->failed)   /* symbols stopped it: the caller traces it static */
            part.dyn->failed = 1;
        tracer_result_clear(out);
        *out = part;
        return 2;
    }
    tracer_result_clear(&part);
    return rc2 < 0 ? -1 : 1;
}

int tracer_trace(PyObject *fn, PyObject *const *locals, Py_ssize_t nlocals, tr_result *out)
{
    tr_start st = { .slots = locals, .nslots = (int)nlocals };
    return tracer_trace_from(fn, &st, out);
}

uint8_t *tracer_inputs_requiring_grad(const tr_result *r)
{
    uint8_t *rg = PyMem_Calloc((size_t)r->ninputs + 1, 1);
    if (!rg)
        return (uint8_t *)PyErr_NoMemory();
    for (int32_t k = 0; k < r->ninputs; k++)
        for (int32_t i = 0; i < r->nguards; i++) {
            const tr_guard *g = &r->guards[i];
            if (g->kind != TG_TENSOR || g->src != r->input_src[k])
                continue;
            PyObject *v = PyObject_GetAttrString(g->obj, "requires_grad");
            if (!v) {
                PyMem_Free(rg);
                return NULL;
            }
            rg[k] = v == Py_True;
            Py_DECREF(v);
            break;
        }
    return rg;
}

int tracer_result_trim(tr_result *r)
{
    for (int32_t i = 0; i < r->nguards; i++)
        Py_CLEAR(r->guards[i].obj);
    PyObject *keep = PyList_New(0);
    int rc = keep ? 0 : -1;
    for (int32_t i = 0; rc == 0 && i < r->nsrcs; i++)
        if (r->srcs[i].key)
            rc = PyList_Append(keep, r->srcs[i].key);
    if (rc == 0 && r->calls)
        rc = PyList_Append(keep, r->calls);
    if (rc == 0)
        Py_XSETREF(r->keep, keep);
    else
        Py_XDECREF(keep);
    return rc;
}

void tracer_result_clear(tr_result *r)
{
    smelt_graph_free(r->graph);
    tracer_dyn_free(r->dyn);
    PyMem_Free(r->srcs);
    PyMem_Free(r->input_src);
    for (int32_t i = 0; i < r->nguards; i++)
        Py_XDECREF(r->guards[i].obj);
    PyMem_Free(r->guards);
    for (int32_t i = 0; i < r->nouts; i++)
        Py_XDECREF(r->outs[i].obj);
    PyMem_Free(r->outs);
    PyMem_Free(r->mut_in);
    PyMem_Free(r->mut_out);
    for (int32_t i = 0; i < r->neffects; i++)
        Py_XDECREF(r->effects[i].name);
    PyMem_Free(r->effects);
    Py_XDECREF(r->keep);
    Py_XDECREF(r->kwnames);
    memset(r, 0, sizeof *r);
    r->stop_pc = -1;
}
