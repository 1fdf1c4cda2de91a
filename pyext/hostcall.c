/* Host calls: torch calls inside compiled graphs (pyext/hostcall.h).
 *
 * What pyext_hostcall_init caches lives in one file-level struct, not in the
 * module state: the plan executor's callback gets only its run context.
 * Tensors cross into torch through DLPack capsules (the v0.8 ABI, declared
 * below), so a host call reads and writes the plan's buffers in place; a
 * wrapped tensor must not outlive the call (the plan owns its memory). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostcall.h"
#include "module.h"

/* ------------------------------------------------------------------ */
/* DLPack v0.8 ABI                                                    */

typedef struct DLDevice { int32_t device_type, device_id; } DLDevice;
typedef struct DLDataType { uint8_t code, bits; uint16_t lanes; } DLDataType;
typedef struct DLTensor {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *);
} DLManagedTensor;

enum { DL_CPU = 1, DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_BOOL = 6 };

/* One allocation per wrapped tensor: torch keeps the pointer and calls the
 * deleter when the tensor's storage dies (with or without the GIL). */
typedef struct dl_block {
    DLManagedTensor m;
    int64_t shape[SMELT_MAX_DIMS], strides[SMELT_MAX_DIMS];
} dl_block;

static const DLDataType dl_types[SMELT_NDTYPES] = {
    [SMELT_BOOL] = {DL_BOOL, 8, 1},   [SMELT_U8] = {DL_UINT, 8, 1},
    [SMELT_I8] = {DL_INT, 8, 1},      [SMELT_I16] = {DL_INT, 16, 1},
    [SMELT_I32] = {DL_INT, 32, 1},    [SMELT_I64] = {DL_INT, 64, 1},
    [SMELT_F16] = {DL_FLOAT, 16, 1},  [SMELT_BF16] = {DL_BFLOAT, 16, 1},
    [SMELT_F32] = {DL_FLOAT, 32, 1},  [SMELT_F64] = {DL_FLOAT, 64, 1},
};

/* ------------------------------------------------------------------ */
/* cached objects                                                     */

#define HC_OBJECTS(X)                                                               \
    X(slot_type) X(tensor_type) X(empty) X(from_dlpack) X(to_dlpack) X(set_grad)     \
    X(is_grad) X(copy_) X(meta) X(strided) X(kw_meta) X(empty_dict) X(empty_tuple)   \
    X(s_dtype) X(s_shape) X(s_layout) X(s_is_view) X(s_is_neg) X(s_module)           \
    X(s_qualname) X(s_name) X(s_objclass) X(clone) X(kw_memory_format) X(contiguous_format)

static struct {
#define FIELD(f) PyObject *f;
    HC_OBJECTS(FIELD)
#undef FIELD
    PyObject *dtypes[SMELT_NDTYPES];   /* torch dtype by smelt_dtype */
} hc;

/* The smelt dtype of torch dtype obj, or -1 (no exception). */
static int dtype_of(PyObject *obj)
{
    for (int dt = 0; dt < SMELT_NDTYPES; dt++)
        if (obj == hc.dtypes[dt])
            return dt;
    return -1;
}

/* getattr(o, name) as a new reference, or NULL with no exception set when
 * the attribute is missing or fails. */
static PyObject *opt_attr(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v)
        PyErr_Clear();
    return v;
}

/* ------------------------------------------------------------------ */
/* Slot                                                               */

typedef struct SlotObject {
    PyObject_HEAD
    int index;
} SlotObject;

PyObject *pyext_slot_new(int k)
{
    if (!hc.slot_type)
        return PyErr_Format(PyExc_RuntimeError, "smelt._C is not initialised");
    if (k < 0 || k >= SMELT_MAX_SRC)
        return PyErr_Format(PyExc_ValueError, "Slot: index %d out of range 0..%d", k,
                            SMELT_MAX_SRC - 1);
    PyTypeObject *tp = (PyTypeObject *)hc.slot_type;
    SlotObject *s = (SlotObject *)tp->tp_alloc(tp, 0);
    if (s)
        s->index = k;
    return (PyObject *)s;
}

static PyObject *slot_tp_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"index", NULL};
    int k;
    (void)type;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i:Slot", names, &k))
        return NULL;
    return pyext_slot_new(k);
}

static PyObject *slot_repr(SlotObject *self)
{
    return PyUnicode_FromFormat("Slot(%d)", self->index);
}

static Py_hash_t slot_hash(SlotObject *self)
{
    return (Py_hash_t)0x51075107 + self->index;
}

static PyObject *slot_richcompare(PyObject *a, PyObject *b, int op)
{
    if (!Py_IS_TYPE(b, (PyTypeObject *)hc.slot_type) || (op != Py_EQ && op != Py_NE))
        Py_RETURN_NOTIMPLEMENTED;
    int eq = ((SlotObject *)a)->index == ((SlotObject *)b)->index;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static void slot_dealloc(SlotObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyMemberDef slot_members[] = {
    {"index", T_INT, offsetof(SlotObject, index), READONLY, "which source of the call"},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot slot_slots[] = {
    {Py_tp_new, slot_tp_new},
    {Py_tp_dealloc, slot_dealloc},
    {Py_tp_repr, slot_repr},
    {Py_tp_hash, slot_hash},
    {Py_tp_richcompare, slot_richcompare},
    {Py_tp_members, slot_members},
    {Py_tp_doc, "Slot(index)\n--\n\nPlaceholder for source `index` of a host call in its "
                "argument template (Graph.call)."},
    {0, NULL},
};

static PyType_Spec slot_spec = {
    .name = "smelt._C.Slot",
    .basicsize = sizeof(SlotObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = slot_slots,
};

/* ------------------------------------------------------------------ */
/* set-up                                                             */

/* torch objects the calls need. */
static int init_torch(PyObject *torch)
{
    PyObject *c = PyObject_GetAttrString(torch, "_C");
    if (!c)
        return -1;
    hc.from_dlpack = PyObject_GetAttrString(c, "_from_dlpack");
    hc.set_grad = PyObject_GetAttrString(c, "_set_grad_enabled");
    hc.is_grad = PyObject_GetAttrString(c, "is_grad_enabled");
    hc.to_dlpack = PyObject_GetAttrString(c, "_to_dlpack");
    Py_DECREF(c);
    hc.tensor_type = PyObject_GetAttrString(torch, "Tensor");
    hc.empty = PyObject_GetAttrString(torch, "empty");
    hc.strided = PyObject_GetAttrString(torch, "strided");
    hc.copy_ = hc.tensor_type ? PyObject_GetAttrString(hc.tensor_type, "copy_") : NULL;
    hc.clone = hc.tensor_type ? PyObject_GetAttrString(hc.tensor_type, "clone") : NULL;
    hc.contiguous_format = PyObject_GetAttrString(torch, "contiguous_format");
    hc.kw_memory_format = Py_BuildValue("(s)", "memory_format");
    hc.meta = PyObject_CallMethod(torch, "device", "s", "meta");
    hc.kw_meta = Py_BuildValue("(ss)", "dtype", "device");
    hc.empty_dict = PyDict_New();
    hc.empty_tuple = PyTuple_New(0);
    if (!hc.from_dlpack || !hc.set_grad || !hc.is_grad || !hc.to_dlpack || !hc.tensor_type ||
        !hc.empty || !hc.strided || !hc.copy_ || !hc.meta || !hc.kw_meta || !hc.empty_dict ||
        !hc.empty_tuple || !hc.clone || !hc.contiguous_format || !hc.kw_memory_format)
        return -1;
    return 0;
}

static int init_names(void)
{
#define INTERN(f, s) if (!(hc.f = PyUnicode_InternFromString(s))) return -1;
    INTERN(s_dtype, "dtype")
    INTERN(s_shape, "shape")
    INTERN(s_layout, "layout")
    INTERN(s_is_view, "_is_view")
    INTERN(s_is_neg, "is_neg")
    INTERN(s_module, "__module__")
    INTERN(s_qualname, "__qualname__")
    INTERN(s_name, "__name__")
    INTERN(s_objclass, "__objclass__")
#undef INTERN
    return 0;
}

void pyext_hostcall_fini(void)
{
#define CLEAR(f) Py_CLEAR(hc.f);
    HC_OBJECTS(CLEAR)
#undef CLEAR
    for (int dt = 0; dt < SMELT_NDTYPES; dt++)
        Py_CLEAR(hc.dtypes[dt]);
}

int pyext_hostcall_init(PyObject *module)
{
    pyext_state *st = PyModule_GetState(module);
    pyext_hostcall_fini();
    for (int dt = 0; dt < SMELT_NDTYPES; dt++)
        hc.dtypes[dt] = Py_XNewRef(st->dtypes[dt]);
    PyObject *torch = PyImport_ImportModule("torch");
    int rc = torch ? init_torch(torch) : -1;
    Py_XDECREF(torch);
    if (rc || init_names())
        return -1;
    hc.slot_type = PyType_FromModuleAndSpec(module, &slot_spec, NULL);
    if (!hc.slot_type)
        return -1;
    return PyModule_AddObjectRef(module, "Slot", hc.slot_type);
}

/* ------------------------------------------------------------------ */
/* names and keys                                                     */

/* "module.qualname" of callable fn: the module of its defining class for
 * method descriptors (torch._C.TensorBase.cumsum), its type's name where
 * it has no module; the qualname (or name, or type name) after the dot.
 * New reference, or NULL with an exception. */
static PyObject *callable_name(PyObject *fn)
{
    PyObject *mod = opt_attr(fn, hc.s_module);
    if (!mod || !PyUnicode_Check(mod)) {
        PyObject *cls = opt_attr(fn, hc.s_objclass);
        Py_XSETREF(mod, cls ? opt_attr(cls, hc.s_module) : NULL);
        Py_XDECREF(cls);
    }
    if (!mod || !PyUnicode_Check(mod))
        Py_XSETREF(mod, PyUnicode_FromString(Py_TYPE(fn)->tp_name));
    PyObject *qual = opt_attr(fn, hc.s_qualname);
    if (!qual || !PyUnicode_Check(qual))
        Py_XSETREF(qual, opt_attr(fn, hc.s_name));
    if (!qual || !PyUnicode_Check(qual))
        Py_XSETREF(qual, PyType_GetQualName(Py_TYPE(fn)));
    PyObject *r = mod && qual ? PyUnicode_FromFormat("%U.%U", mod, qual) : NULL;
    Py_XDECREF(mod);
    Py_XDECREF(qual);
    return r;
}

/* Hashes the UTF-8 text of str s (a new reference, consumed; NULL after a
 * failed call) and a NUL separator into FNV-1a state h. 0, or -1. */
static int fnv_str(PyObject *s, uint64_t *h)
{
    Py_ssize_t n;
    const char *p = s ? PyUnicode_AsUTF8AndSize(s, &n) : NULL;
    for (Py_ssize_t i = 0; p && i <= n; i++) {   /* i == n: the terminating NUL */
        *h ^= (uint8_t)p[i];
        *h *= 0x100000001b3ull;
    }
    Py_XDECREF(s);
    return p ? 0 : -1;
}

int pyext_hostcall_key(PyObject *fn, PyObject *args, PyObject *kwargs, uint64_t *key)
{
    uint64_t h = 0xcbf29ce484222325ull;
    if (!hc.empty_dict) {
        PyErr_SetString(PyExc_RuntimeError, "smelt._C is not initialised");
        return -1;
    }
    args = args ? args : hc.empty_tuple;
    kwargs = kwargs && kwargs != Py_None ? kwargs : hc.empty_dict;
    if (fnv_str(callable_name(fn), &h) || fnv_str(PyObject_Repr(args), &h) ||
        fnv_str(PyObject_Repr(kwargs), &h))
        return -1;
    *key = h;
    return 0;
}

/* ------------------------------------------------------------------ */
/* argument templates                                                 */

static PyObject *subst(PyObject *o, PyObject *const *vals, int n);

/* A copy of exact tuple or list o with its items substituted; a tuple
 * holding no Slot comes back as o itself (lists are always copied, so the
 * callee never sees the template's own list). */
static PyObject *subst_seq(PyObject *o, PyObject *const *vals, int n)
{
    int tuple = PyTuple_CheckExact(o);
    Py_ssize_t len = Py_SIZE(o);
    PyObject **items = tuple ? ((PyTupleObject *)o)->ob_item : ((PyListObject *)o)->ob_item;
    PyObject *r = tuple ? NULL : PyList_New(len);
    if (!tuple && !r)
        return NULL;
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *s = subst(items[i], vals, n);
        if (!s) {
            Py_XDECREF(r);
            return NULL;
        }
        if (tuple && s != items[i] && !r) {
            if (!(r = PyTuple_New(len))) {
                Py_DECREF(s);
                return NULL;
            }
            for (Py_ssize_t j = 0; j < i; j++)
                PyTuple_SET_ITEM(r, j, Py_NewRef(items[j]));
        }
        if (!r)
            Py_DECREF(s);
        else if (tuple)
            PyTuple_SET_ITEM(r, i, s);
        else
            PyList_SET_ITEM(r, i, s);
    }
    return r ? r : Py_NewRef(o);
}

/* A copy of exact dict o with its values substituted (o itself if none is
 * a Slot or holds one). */
static PyObject *subst_dict(PyObject *o, PyObject *const *vals, int n)
{
    PyObject *r = NULL, *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(o, &pos, &k, &v)) {
        PyObject *s = subst(v, vals, n);
        int bad = !s;
        if (s && s != v && !r)
            bad = !(r = PyDict_Copy(o));
        if (!bad && r)
            bad = PyDict_SetItem(r, k, s) < 0;
        Py_XDECREF(s);
        if (bad) {
            Py_XDECREF(r);
            return NULL;
        }
    }
    return r ? r : Py_NewRef(o);
}

/* Template o with every Slot(k) replaced by vals[k], inside exact tuples,
 * lists and dict values at any depth. New reference, or NULL with an
 * exception (IndexError for a Slot(k) with k >= n). */
static PyObject *subst(PyObject *o, PyObject *const *vals, int n)
{
    if (Py_IS_TYPE(o, (PyTypeObject *)hc.slot_type)) {
        int k = ((SlotObject *)o)->index;
        if (k >= n)
            return PyErr_Format(PyExc_IndexError, "Slot(%d) out of range: the call has %d "
                                "sources", k, n);
        return Py_NewRef(vals[k]);
    }
    int seq = PyTuple_CheckExact(o) || PyList_CheckExact(o), dict = PyDict_CheckExact(o);
    if (!seq && !dict)
        return Py_NewRef(o);
    if (Py_EnterRecursiveCall(" in a host call's argument template"))
        return NULL;
    PyObject *r = seq ? subst_seq(o, vals, n) : subst_dict(o, vals, n);
    Py_LeaveRecursiveCall();
    return r;
}

/* fn(*a, **kw) (kw a dict or NULL) with grad mode off, restored after.
 * New reference, or NULL with an exception. */
static PyObject *call_no_grad(PyObject *fn, PyObject *a, PyObject *kw)
{
    PyObject *was = PyObject_CallNoArgs(hc.is_grad);
    if (!was)
        return NULL;
    int on = was == Py_True;
    Py_DECREF(was);
    if (!on)
        return PyObject_Call(fn, a, kw);
    PyObject *t = PyObject_CallOneArg(hc.set_grad, Py_False);
    if (!t)
        return NULL;
    Py_DECREF(t);
    PyObject *r = PyObject_Call(fn, a, kw), *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    if ((t = PyObject_CallOneArg(hc.set_grad, Py_True))) {
        Py_DECREF(t);
        PyErr_Restore(et, ev, etb);
        return r;
    }
    Py_XDECREF(r);   /* restoring grad mode failed: that error wins */
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(etb);
    return NULL;
}

/* fn(*args, **kwargs) with Slots replaced by vals[0..n), grad mode off.
 * args: a tuple; kwargs: a dict or None. New reference, or NULL with an
 * exception. */
static PyObject *call_template(PyObject *fn, PyObject *args, PyObject *kwargs,
                               PyObject *const *vals, int n)
{
    if (!PyTuple_Check(args) || (kwargs != Py_None && !PyDict_Check(kwargs)))
        return PyErr_Format(PyExc_TypeError, "host call: expected an args tuple and a kwargs "
                            "dict, got %s and %s", Py_TYPE(args)->tp_name,
                            Py_TYPE(kwargs)->tp_name);
    PyObject *a = subst(args, vals, n), *kw = NULL;
    if (a && kwargs != Py_None && PyDict_GET_SIZE(kwargs) && !(kw = subst(kwargs, vals, n)))
        Py_CLEAR(a);
    PyObject *r = a ? call_no_grad(fn, a, kw) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(kw);
    return r;
}

/* ------------------------------------------------------------------ */
/* messages                                                           */

/* Tuple of the ints v[0..n). New reference, or NULL with an exception. */
static PyObject *int_tuple(const int64_t *v, int n)
{
    PyObject *t = PyTuple_New(n);
    for (int d = 0; t && d < n; d++) {
        PyObject *x = PyLong_FromLongLong(v[d]);
        if (!x)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, d, x);
    }
    return t;
}

/* Writes "<name of fn>: <fmt...>" into msg (any Python error cleared).
 * Returns 1: what pyext_hostcall_infer returns for a refused call. */
static int refuse(PyObject *fn, char *msg, size_t len, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    PyObject *name = callable_name(fn);
    const char *s = name ? PyUnicode_AsUTF8(name) : NULL;
    snprintf(msg, len, "%s: %s", s ? s : "host call", text);
    Py_XDECREF(name);
    PyErr_Clear();
    return 1;
}

/* "Type: text" of exception value v into buf. */
static void exc_text(PyObject *v, char *buf, size_t len)
{
    PyObject *tn = PyType_GetName(Py_TYPE(v));
    PyErr_Clear();
    PyObject *str = PyObject_Str(v);
    const char *a = tn ? PyUnicode_AsUTF8(tn) : NULL, *b = str ? PyUnicode_AsUTF8(str) : NULL;
    snprintf(buf, len, "%s%s%s", a ? a : "exception", b && *b ? ": " : "", b ? b : "");
    Py_XDECREF(tn);
    Py_XDECREF(str);
    PyErr_Clear();
}

/* The pending exception, normalised, with its traceback attached; the
 * error indicator is cleared. Never NULL while an exception is set. */
static PyObject *take_exception(void)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (v && tb)
        PyException_SetTraceback(v, tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    return v;
}

/* truth of r.<name>() (method) or r.<name> (attribute): 0/1, or -1. */
static int tensor_flag(PyObject *r, PyObject *name, int method)
{
    PyObject *v = method ? PyObject_CallMethodNoArgs(r, name) : PyObject_GetAttr(r, name);
    int b = v ? PyObject_IsTrue(v) : -1;
    Py_XDECREF(v);
    return b;
}

/* ------------------------------------------------------------------ */
/* inference on meta tensors                                          */

/* An empty meta tensor with node n's dtype and shape. */
static PyObject *meta_tensor(const smelt_node *n)
{
    PyObject *shape = int_tuple(n->shape, n->ndim);
    PyObject *args[3] = {shape, hc.dtypes[n->dtype], hc.meta};
    PyObject *t = shape ? PyObject_Vectorcall(hc.empty, args, 1, hc.kw_meta) : NULL;
    Py_XDECREF(shape);
    return t;
}

/* Dtype and layout of result tensor t: 0 with m->dtypes[k] set; 1 with
 * msg; -1 with an exception. */
static int meta_dtype(PyObject *fn, PyObject *t, int k, pyext_call_meta *m, char *msg,
                      size_t len)
{
    PyObject *dt = PyObject_GetAttr(t, hc.s_dtype);
    PyObject *layout = dt ? PyObject_GetAttr(t, hc.s_layout) : NULL;
    int rc = !dt || !layout ? -1 : 0, sd = dt ? dtype_of(dt) : -1;
    if (rc == 0 && (layout != hc.strided || sd < 0)) {
        PyObject *r = PyObject_Repr(layout != hc.strided ? layout : dt);
        const char *s = r ? PyUnicode_AsUTF8(r) : NULL;
        rc = refuse(fn, msg, len, "result %d has %s %s, which smelt does not support", k,
                    layout != hc.strided ? "layout" : "dtype", s ? s : "?");
        Py_XDECREF(r);
    }
    if (rc == 0)
        m->dtypes[k] = (uint8_t)sd;
    Py_XDECREF(dt);
    Py_XDECREF(layout);
    return rc;
}

/* Shape of result tensor t into m: 0; 1 with msg; -1 with an exception. */
static int meta_shape(PyObject *fn, PyObject *t, int k, pyext_call_meta *m, char *msg,
                      size_t len)
{
    PyObject *shape = PyObject_GetAttr(t, hc.s_shape);
    if (!shape)
        return -1;
    int rc = 0;
    Py_ssize_t nd = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : -1;
    if (nd < 0 || nd > SMELT_MAX_DIMS)
        rc = refuse(fn, msg, len, "result %d has %zd dims, more than the maximum %d", k, nd,
                    SMELT_MAX_DIMS);
    for (Py_ssize_t d = 0; rc == 0 && d < nd; d++) {
        m->shapes[k][d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
        if (m->shapes[k][d] == -1 && PyErr_Occurred())
            rc = -1;
    }
    m->ndims[k] = (int)nd;
    Py_DECREF(shape);
    return rc;
}

/* Result k of the meta call into m: a strided tensor of a smelt dtype,
 * at most SMELT_MAX_DIMS dims; is_view when it is one of the inputs or a
 * view (t._is_view()). 0; 1 with msg; -1 with an exception. */
static int meta_one(PyObject *fn, PyObject *t, int k, PyObject *const *ins, int nsrc,
                    pyext_call_meta *m, char *msg, size_t len)
{
    if (!PyObject_TypeCheck(t, (PyTypeObject *)hc.tensor_type))
        return refuse(fn, msg, len, "result %d is a %s, not a tensor", k, Py_TYPE(t)->tp_name);
    int rc = meta_dtype(fn, t, k, m, msg, len);
    if (rc == 0)
        rc = meta_shape(fn, t, k, m, msg, len);
    int view = 0;
    for (int j = 0; j < nsrc; j++)
        view |= t == ins[j];
    if (rc == 0 && !view && (view = tensor_flag(t, hc.s_is_view, 1)) < 0)
        rc = -1;
    m->is_view[k] = view > 0;
    return rc;
}

/* The meta call's result res into m: a tensor, or a tuple/list (named
 * tuples included) of 1..SMELT_MAX_SRC tensors. 0; 1 with msg; -1. */
static int meta_results(PyObject *fn, PyObject *res, PyObject *const *ins, int nsrc,
                        pyext_call_meta *m, char *msg, size_t len)
{
    int one = PyObject_TypeCheck(res, (PyTypeObject *)hc.tensor_type);
    if (!one && !PyTuple_Check(res) && !PyList_Check(res))
        return refuse(fn, msg, len, "returned %s, not a tensor or a tuple of tensors",
                      Py_TYPE(res)->tp_name);
    PyObject *seq = one ? PyTuple_Pack(1, res) : PySequence_Tuple(res);
    if (!seq)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    int rc = 0;
    if (n < 1 || n > SMELT_MAX_SRC)
        rc = refuse(fn, msg, len, "returned %zd tensors (1 to %d supported)", n, SMELT_MAX_SRC);
    m->nout = (int)n;
    for (Py_ssize_t k = 0; rc == 0 && k < n; k++)
        rc = meta_one(fn, PyTuple_GET_ITEM(seq, k), (int)k, ins, nsrc, m, msg, len);
    Py_DECREF(seq);
    return rc;
}

/* Whether the pending exception is the call's own failure (an Exception
 * other than MemoryError) rather than an internal one. */
static int call_refused(void)
{
    return PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_MemoryError);
}

int pyext_hostcall_infer(PyObject *fn, PyObject *args, PyObject *kwargs, int nsrc,
                         const smelt_node *const *srcs, pyext_call_meta *m, char *msg,
                         size_t msglen)
{
    PyObject *ins[SMELT_MAX_SRC] = {NULL};
    memset(m, 0, sizeof *m);
    if (!hc.slot_type)
        return PyErr_SetString(PyExc_RuntimeError, "smelt._C is not initialised"), -1;
    args = args ? args : hc.empty_tuple;
    kwargs = kwargs ? kwargs : Py_None;
    if (!PyTuple_Check(args) || (kwargs != Py_None && !PyDict_Check(kwargs)))
        return PyErr_Format(PyExc_TypeError, "host call: args must be a tuple and kwargs a "
                            "dict, got %s and %s", Py_TYPE(args)->tp_name,
                            Py_TYPE(kwargs)->tp_name), -1;
    if (nsrc < 1 || nsrc > SMELT_MAX_SRC)
        return refuse(fn, msg, msglen, "%d sources (1 to %d supported)", nsrc, SMELT_MAX_SRC);
    int rc = -1, k = 0;
    while (k < nsrc && (ins[k] = meta_tensor(srcs[k])))
        k++;
    PyObject *res = k == nsrc ? call_template(fn, args, kwargs, ins, nsrc) : NULL;
    if (res) {
        rc = meta_results(fn, res, ins, nsrc, m, msg, msglen);
    } else if (k == nsrc && call_refused()) {
        char text[400];
        PyObject *v = take_exception();
        exc_text(v, text, sizeof text);
        Py_XDECREF(v);
        rc = refuse(fn, msg, msglen, "%s", text);
    }
    Py_XDECREF(res);
    for (int j = 0; j < k; j++)
        Py_DECREF(ins[j]);
    return rc;
}

/* ------------------------------------------------------------------ */
/* DLPack wrapping                                                    */

static int64_t dl_dummy;   /* data of 0-element tensors, whose pointer may be NULL */

static void dl_delete(DLManagedTensor *m)
{
    free(m);   /* m is the first member of its dl_block */
}

/* Capsule destructor: frees the tensor if torch never consumed it (torch
 * renames a consumed capsule and owns the tensor from then on). */
static void capsule_delete(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        m->deleter(m);
    }
}

/* Tensor ref r as a torch tensor sharing its memory (no copy); it must not
 * outlive the buffer. New reference, or NULL with an exception. */
static PyObject *wrap_ref(const smelt_tensor_ref *r)
{
    if (r->dtype >= SMELT_NDTYPES || r->ndim > SMELT_MAX_DIMS)
        return PyErr_Format(PyExc_RuntimeError, "host call: bad tensor (dtype %d, %d dims)",
                            r->dtype, r->ndim);
    dl_block *b = malloc(sizeof *b);
    if (!b)
        return PyErr_NoMemory();
    memcpy(b->shape, r->shape, sizeof b->shape);
    memcpy(b->strides, r->strides, sizeof b->strides);
    b->m.dl_tensor = (DLTensor){
        .data = r->data ? r->data : &dl_dummy,
        .device = {DL_CPU, 0},
        .ndim = r->ndim,
        .dtype = dl_types[r->dtype],
        .shape = b->shape,
        .strides = b->strides,
    };
    b->m.manager_ctx = NULL;
    b->m.deleter = dl_delete;
    PyObject *cap = PyCapsule_New(&b->m, "dltensor", capsule_delete);
    if (!cap) {
        free(b);
        return NULL;
    }
    PyObject *t = PyObject_CallOneArg(hc.from_dlpack, cap);
    Py_DECREF(cap);
    return t;
}

/* ------------------------------------------------------------------ */
/* running a call                                                     */

/* RuntimeError: result k of the call is not a tensor with out ref o's
 * dtype and shape. Returns -1. */
static int result_mismatch(PyObject *fn, int k, PyObject *r, const smelt_tensor_ref *o)
{
    PyObject *name = callable_name(fn), *want = int_tuple(o->shape, o->ndim);
    int tensor = PyObject_TypeCheck(r, (PyTypeObject *)hc.tensor_type);
    PyObject *dt = tensor ? PyObject_GetAttr(r, hc.s_dtype) : NULL;
    PyObject *shape = tensor ? PyObject_GetAttr(r, hc.s_shape) : NULL;
    if (name && want && !tensor)
        PyErr_Format(PyExc_RuntimeError, "host call %U: result %d is a %s, not a tensor", name,
                     k, Py_TYPE(r)->tp_name);
    else if (name && want && dt && shape)
        PyErr_Format(PyExc_RuntimeError, "host call %U: result %d has dtype %R and shape %R; "
                     "the graph expects %R and %R (the call's results must not depend on "
                     "data)", name, k, dt, shape, hc.dtypes[o->dtype], want);
    Py_XDECREF(name);
    Py_XDECREF(want);
    Py_XDECREF(dt);
    Py_XDECREF(shape);
    return -1;
}

/* Whether DLPack tensor t is a CPU tensor with o's dtype and shape. */
static int dl_matches(const DLTensor *t, const smelt_tensor_ref *o)
{
    const DLDataType want = dl_types[o->dtype];
    if (t->device.device_type != DL_CPU || t->dtype.code != want.code ||
        t->dtype.bits != want.bits || t->dtype.lanes != 1 || t->ndim != o->ndim)
        return 0;
    for (int d = 0; d < o->ndim; d++)
        if (t->shape[d] != o->shape[d])
            return 0;
    return 1;
}

/* Whether DLPack tensor t is laid out row-major without gaps. */
static int dl_contiguous(const DLTensor *t)
{
    int64_t want = 1;
    for (int d = t->ndim - 1; t->strides && d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != want)
            return 0;
        want *= t->shape[d];
    }
    return 1;
}

/* Tensor.copy_ of result r into out buffer o (wrapped). 0, or -1. */
static int copy_into(PyObject *r, const smelt_tensor_ref *o)
{
    PyObject *t = wrap_ref(o);
    PyObject *args[2] = {t, r};
    PyObject *x = t ? PyObject_Vectorcall(hc.copy_, args, 2, NULL) : NULL;
    Py_XDECREF(t);
    Py_XDECREF(x);
    return x ? 0 : -1;
}

/* Copies result r into contiguous out buffer o if r is a tensor with o's
 * dtype and shape: 1 when copied, 0 when r does not match (no exception),
 * -1 with an exception. Reads r's layout through one DLPack export; a
 * contiguous r without a negative bit (which DLPack drops) is copied as
 * bytes, any other through Tensor.copy_. */
static int store_result(PyObject *r, const smelt_tensor_ref *o)
{
    if (!PyObject_TypeCheck(r, (PyTypeObject *)hc.tensor_type))
        return 0;
    int neg = tensor_flag(r, hc.s_is_neg, 1);
    PyObject *cap = neg < 0 ? NULL : PyObject_CallOneArg(hc.to_dlpack, r);
    DLManagedTensor *m = cap ? PyCapsule_GetPointer(cap, "dltensor") : NULL;
    if (!m) {
        Py_XDECREF(cap);
        return -1;
    }
    const DLTensor *t = &m->dl_tensor;
    int match = dl_matches(t, o), bytes = match && !neg && dl_contiguous(t);
    size_t nbytes = smelt_dtype_size((smelt_dtype)o->dtype);
    for (int d = 0; d < o->ndim; d++)
        nbytes *= (size_t)o->shape[d];
    if (bytes && nbytes)
        memmove(o->data, (const char *)t->data + t->byte_offset, nbytes);
    Py_DECREF(cap);
    if (match && !bytes && copy_into(r, o))
        return -1;
    return match;
}

/* Whether the bytes [p, p + n) overlap the memory any in ref addresses. */
static int overlaps_input(const char *p, size_t n, const smelt_tensor_ref *in, int nin)
{
    for (int k = 0; k < nin; k++) {
        int64_t lo = 0, hi = 0, es = (int64_t)smelt_dtype_size((smelt_dtype)in[k].dtype);
        int empty = 0;
        for (int d = 0; d < in[k].ndim; d++) {
            empty |= in[k].shape[d] == 0;
            int64_t span = (in[k].shape[d] - 1) * in[k].strides[d];
            *(span < 0 ? &lo : &hi) += span;
        }
        const char *a = (const char *)in[k].data + lo * es, *b = (const char *)in[k].data + (hi + 1) * es;
        if (!empty && n && p < b && a < p + n)
            return 1;
    }
    return 0;
}

/* Hands result r's memory to the plan for out ref o (data NULL): r itself
 * when it matches o, is contiguous, has no negative bit and does not
 * overlap an input (the plan may reuse inputs' memory after the call);
 * otherwise a contiguous clone. The tensor handed over is appended to
 * keep. 1, 0 (r does not match o; no exception), or -1. */
static int adopt_result(PyObject *r, smelt_tensor_ref *o, const smelt_tensor_ref *in, int nin,
                        PyObject *keep)
{
    if (!PyObject_TypeCheck(r, (PyTypeObject *)hc.tensor_type))
        return 0;
    int neg = tensor_flag(r, hc.s_is_neg, 1);
    PyObject *t = neg < 0 ? NULL : Py_NewRef(r);
    for (int pass = 0; t && pass < 2; pass++) {
        PyObject *cap = PyObject_CallOneArg(hc.to_dlpack, t);
        DLManagedTensor *m = cap ? PyCapsule_GetPointer(cap, "dltensor") : NULL;
        if (!m) {
            Py_XDECREF(cap);
            Py_CLEAR(t);
            break;
        }
        const DLTensor *d = &m->dl_tensor;
        size_t nbytes = smelt_dtype_size((smelt_dtype)o->dtype);
        for (int k = 0; k < o->ndim; k++)
            nbytes *= (size_t)o->shape[k];
        const char *data = (const char *)d->data + d->byte_offset;
        int match = dl_matches(d, o);
        if (match && (pass || (!neg && dl_contiguous(d) && !overlaps_input(data, nbytes, in, nin)))) {
            o->data = nbytes ? (void *)data : (void *)&dl_dummy;
            Py_DECREF(cap);
            int rc = PyList_Append(keep, t);
            Py_DECREF(t);
            return rc ? -1 : 1;
        }
        Py_DECREF(cap);
        if (!match) {
            Py_DECREF(t);
            return 0;
        }
        PyObject *args[2] = {t, hc.contiguous_format};   /* pass 1: a fresh contiguous copy */
        Py_SETREF(t, PyObject_Vectorcall(hc.clone, args, 1, hc.kw_memory_format));
    }
    return -1;
}

/* Result k of a call into out ref o: copied into o's buffer, or handed
 * over (o->data NULL). 1, 0 (no match), -1. */
static int take_result(PyObject *r, smelt_tensor_ref *o, const smelt_tensor_ref *in, int nin,
                       PyObject *keep)
{
    return o->data ? store_result(r, o) : adopt_result(r, o, in, nin, keep);
}

/* Checks the call's result res against out[0..nout) and stores each
 * result (take_result). 0, or -1 with an exception. */
static int store_results(PyObject *fn, PyObject *res, int nout, smelt_tensor_ref *out,
                         const smelt_tensor_ref *in, int nin, PyObject *keep)
{
    int one = PyObject_TypeCheck(res, (PyTypeObject *)hc.tensor_type);
    if (one && nout == 1) {
        int rc = take_result(res, &out[0], in, nin, keep);
        return rc == 1 ? 0 : rc == 0 ? result_mismatch(fn, 0, res, &out[0]) : -1;
    }
    Py_ssize_t n = one ? 1 : PyTuple_Check(res) ? PyTuple_GET_SIZE(res)
                               : PyList_Check(res) ? PyList_GET_SIZE(res) : -1;
    if (n != nout) {
        PyObject *name = callable_name(fn);
        if (name)
            PyErr_Format(PyExc_RuntimeError, "host call %U returned %s%s, expected %d tensors",
                         name, n < 0 ? "a " : "", Py_TYPE(res)->tp_name, nout);
        Py_XDECREF(name);
        return -1;
    }
    PyObject *seq = PySequence_Tuple(res);   /* lists: items stay alive */
    int rc = seq ? 1 : -1;
    for (int k = 0; rc == 1 && k < nout; k++) {
        rc = take_result(PyTuple_GET_ITEM(seq, k), &out[k], in, nin, keep);
        if (rc == 0)
            rc = result_mismatch(fn, k, PyTuple_GET_ITEM(seq, k), &out[k]);
    }
    Py_XDECREF(seq);
    return rc == 1 ? 0 : -1;
}

/* Entry id of the table of calls: a new reference to its (fn, args,
 * kwargs) tuple, or NULL with an exception. */
static PyObject *call_entry(PyObject *calls, int32_t id)
{
    if (!hc.from_dlpack)
        return PyErr_Format(PyExc_RuntimeError, "smelt._C is not initialised");
    if (!calls || !PyList_Check(calls) || id < 0 || id >= PyList_GET_SIZE(calls))
        return PyErr_Format(PyExc_RuntimeError, "host call %d: not in the table of calls", id);
    PyObject *e = PyList_GET_ITEM(calls, id);
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 3)
        return PyErr_Format(PyExc_RuntimeError, "host call %d: expected a (fn, args, kwargs) "
                            "tuple, got %s", id, Py_TYPE(e)->tp_name);
    return Py_NewRef(e);
}

/* Runs entry e (fn, args, kwargs) on in[] and stores its results in out[].
 * 0, or -1 with an exception. */
static int run_entry(PyObject *e, int nin, const smelt_tensor_ref *in, int nout,
                     smelt_tensor_ref *out, PyObject *keep)
{
    PyObject *ins[SMELT_MAX_SRC], *fn = PyTuple_GET_ITEM(e, 0);
    if (nin < 1 || nin > SMELT_MAX_SRC || nout < 1 || nout > SMELT_MAX_SRC)
        return PyErr_Format(PyExc_RuntimeError, "host call: %d sources and %d results "
                            "(1 to %d each supported)", nin, nout, SMELT_MAX_SRC), -1;
    int k = 0;
    while (k < nin && (ins[k] = wrap_ref(&in[k])))
        k++;
    PyObject *res = k == nin ? call_template(fn, PyTuple_GET_ITEM(e, 1), PyTuple_GET_ITEM(e, 2),
                                             ins, nin) : NULL;
    int rc = res ? store_results(fn, res, nout, out, in, nin, keep) : -1;
    Py_XDECREF(res);
    for (int j = 0; j < k; j++)
        Py_DECREF(ins[j]);
    return rc;
}

/* Moves the pending exception into ctx->exc and describes it in err. */
static void keep_exception(pyext_hostcall_ctx *ctx, PyObject *e, int32_t id, char *err,
                           size_t errlen)
{
    char text[400];
    PyObject *v = take_exception();
    if (!v)
        v = PyObject_CallOneArg(PyExc_RuntimeError, Py_None);   /* failed without an exception */
    PyObject *name = e ? callable_name(PyTuple_GET_ITEM(e, 0)) : NULL;
    const char *s = name ? PyUnicode_AsUTF8(name) : NULL;
    PyErr_Clear();
    if (v)
        exc_text(v, text, sizeof text);
    else
        snprintf(text, sizeof text, "out of memory");
    snprintf(err, errlen, "host call %d (%s): %s", (int)id, s ? s : "?", text);
    Py_XDECREF(name);
    if (ctx)
        Py_XSETREF(ctx->exc, v);
    else
        Py_XDECREF(v);
}

/* ctx->keep, made on first use: 0, or -1 with an exception. */
static int keep_list(pyext_hostcall_ctx *ctx)
{
    if (!ctx)
        return PyErr_Format(PyExc_RuntimeError, "host call without a context"), -1;
    return ctx->keep || (ctx->keep = PyList_New(0)) ? 0 : -1;
}

int pyext_hostcall_run(void *vctx, int32_t id, int nin, const smelt_tensor_ref *in, int nout,
                       smelt_tensor_ref *out, char *err, size_t errlen)
{
    pyext_hostcall_ctx *ctx = vctx;
    PyGILState_STATE gs = PyGILState_Ensure();
    PyObject *e = call_entry(ctx ? ctx->calls : NULL, id);
    int rc = e && !keep_list(ctx) ? run_entry(e, nin, in, nout, out, ctx->keep) : -1;
    if (rc)
        keep_exception(ctx, e, id, err, errlen);
    Py_XDECREF(e);
    PyGILState_Release(gs);
    return rc;
}
