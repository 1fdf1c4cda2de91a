/* Host calls at trace time (tracer/hostcall.h): Slot placeholders, call
 * keys, argument templates run with Slots replaced, and results inferred on
 * meta tensors. What tracer_calls_init caches lives in one file-level
 * struct: the run-time half (pyext/hostcall.c) calls tracer_call_invoke
 * from the plan executor's callback, which gets only its run context. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "hostcall.h"

/* ------------------------------------------------------------------ */
/* cached objects                                                     */

#define TC_OBJECTS(X)                                                               \
    X(slot_type) X(tensor_type) X(empty) X(empty_strided) X(set_grad) X(is_grad) X(meta) X(strided)  \
    X(kw_meta) X(empty_dict) X(empty_tuple) X(s_dtype) X(s_shape) X(s_layout)        \
    X(s_is_view) X(s_module) X(s_qualname) X(s_name) X(s_objclass)

static struct {
#define FIELD(f) PyObject *f;
    TC_OBJECTS(FIELD)
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

PyObject *tracer_slot_new(int k)
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

int tracer_slot_index(PyObject *o)
{
    return hc.slot_type && o && Py_IS_TYPE(o, (PyTypeObject *)hc.slot_type) ? ((SlotObject *)o)->index : -1;
}

static PyObject *slot_tp_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *names[] = {"index", NULL};
    int k;
    (void)type;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i:Slot", names, &k))
        return NULL;
    return tracer_slot_new(k);
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

/* torch objects the calls need: entry points, the meta device, dtypes by
 * smelt dtype. */
static int init_torch(PyObject *torch)
{
    static const char *dtn[SMELT_NDTYPES] = { "bool", "uint8", "int8", "int16", "int32", "int64",
                                              "float16", "bfloat16", "float32", "float64" };
    PyObject *c = PyObject_GetAttrString(torch, "_C");
    if (!c)
        return -1;
    hc.set_grad = PyObject_GetAttrString(c, "_set_grad_enabled");
    hc.is_grad = PyObject_GetAttrString(c, "is_grad_enabled");
    Py_DECREF(c);
    hc.tensor_type = PyObject_GetAttrString(torch, "Tensor");
    hc.empty = PyObject_GetAttrString(torch, "empty");
    hc.empty_strided = PyObject_GetAttrString(torch, "empty_strided");
    hc.strided = PyObject_GetAttrString(torch, "strided");
    hc.meta = PyObject_CallMethod(torch, "device", "s", "meta");
    hc.kw_meta = Py_BuildValue("(ss)", "dtype", "device");
    hc.empty_dict = PyDict_New();
    hc.empty_tuple = PyTuple_New(0);
    for (int dt = 0; dt < SMELT_NDTYPES; dt++)
        if (!(hc.dtypes[dt] = PyObject_GetAttrString(torch, dtn[dt])))
            return -1;
    if (!hc.set_grad || !hc.is_grad || !hc.tensor_type || !hc.empty || !hc.empty_strided || !hc.strided || !hc.meta || !hc.kw_meta ||
        !hc.empty_dict || !hc.empty_tuple)
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
    INTERN(s_module, "__module__")
    INTERN(s_qualname, "__qualname__")
    INTERN(s_name, "__name__")
    INTERN(s_objclass, "__objclass__")
#undef INTERN
    return 0;
}

void tracer_calls_fini(void)
{
#define CLEAR(f) Py_CLEAR(hc.f);
    TC_OBJECTS(CLEAR)
#undef CLEAR
    for (int dt = 0; dt < SMELT_NDTYPES; dt++)
        Py_CLEAR(hc.dtypes[dt]);
}

int tracer_calls_init(PyObject *module)
{
    tracer_calls_fini();
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

/* The module of fn's defining class for method descriptors
 * (torch._C.TensorBase.cumsum), its type's name where it has no module;
 * the qualname (or name, or type name) after the dot. */
PyObject *tracer_call_name(PyObject *fn)
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

int tracer_call_key(PyObject *fn, PyObject *args, PyObject *kwargs, uint64_t *key)
{
    uint64_t h = 0xcbf29ce484222325ull;
    if (!hc.empty_dict) {
        PyErr_SetString(PyExc_RuntimeError, "smelt._C is not initialised");
        return -1;
    }
    args = args ? args : hc.empty_tuple;
    kwargs = kwargs && kwargs != Py_None ? kwargs : hc.empty_dict;
    if (fnv_str(tracer_call_name(fn), &h) || fnv_str(PyObject_Repr(args), &h) ||
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

PyObject *tracer_call_invoke(PyObject *fn, PyObject *args, PyObject *kwargs, PyObject *const *vals, int n)
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

PyObject *tracer_int_tuple(const int64_t *v, int n)
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
 * Returns 1: what tracer_call_infer returns for a refused call. */
static int refuse(PyObject *fn, char *msg, size_t len, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    PyObject *name = tracer_call_name(fn);
    const char *s = name ? PyUnicode_AsUTF8(name) : NULL;
    snprintf(msg, len, "%s: %s", s ? s : "host call", text);
    Py_XDECREF(name);
    PyErr_Clear();
    return 1;
}

void tracer_call_exc_text(PyObject *v, char *buf, size_t len)
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

PyObject *tracer_call_exception(void)
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

int tracer_tensor_flag(PyObject *r, PyObject *name, int method)
{
    PyObject *v = method ? PyObject_CallMethodNoArgs(r, name) : PyObject_GetAttr(r, name);
    int b = v ? PyObject_IsTrue(v) : -1;
    Py_XDECREF(v);
    return b;
}

/* ------------------------------------------------------------------ */
/* inference on meta tensors                                          */

/* An empty meta tensor with node n's dtype and shape, contiguous or with
 * strides st (eager's, when known). */
static PyObject *meta_tensor(const smelt_node *n, const int64_t *st)
{
    PyObject *shape = tracer_int_tuple(n->shape, n->ndim);
    PyObject *stride = st && shape ? tracer_int_tuple(st, n->ndim) : NULL;
    PyObject *t = NULL;
    if (st && stride) {
        PyObject *args[4] = {shape, stride, hc.dtypes[n->dtype], hc.meta};
        t = PyObject_Vectorcall(hc.empty_strided, args, 2, hc.kw_meta);
    } else if (!st && shape) {
        PyObject *args[3] = {shape, hc.dtypes[n->dtype], hc.meta};
        t = PyObject_Vectorcall(hc.empty, args, 1, hc.kw_meta);
    }
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    return t;
}

/* Dtype and layout of result tensor t: 0 with m->dtypes[k] set; 1 with
 * msg; -1 with an exception. */
static int meta_dtype(PyObject *fn, PyObject *t, int k, tracer_call_meta *m, char *msg,
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
static int meta_shape(PyObject *fn, PyObject *t, int k, tracer_call_meta *m, char *msg,
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
    PyObject *st = rc == 0 ? PyObject_CallMethod(t, "stride", NULL) : NULL;
    if (rc == 0 && !st)
        return -1;
    for (Py_ssize_t d = 0; rc == 0 && d < nd; d++) {
        PyObject *v = PyTuple_Check(st) && PyTuple_GET_SIZE(st) == nd ? PyTuple_GET_ITEM(st, d) : NULL;
        m->strides[k][d] = v ? PyLong_AsLongLong(v) : 0;
        if (!v || (m->strides[k][d] == -1 && PyErr_Occurred()))
            rc = -1;
    }
    Py_XDECREF(st);
    if (rc < 0) {   /* unreadable strides: not known, not an error */
        PyErr_Clear();
        m->has_strides = 2;
        rc = 0;
    }
    return rc;
}

/* Result k of the meta call into m: a strided tensor of a smelt dtype,
 * at most SMELT_MAX_DIMS dims; is_view when it is one of the inputs or a
 * view (t._is_view()). 0; 1 with msg; -1 with an exception. */
static int meta_one(PyObject *fn, PyObject *t, int k, PyObject *const *ins, int nsrc,
                    tracer_call_meta *m, char *msg, size_t len)
{
    if (!PyObject_TypeCheck(t, (PyTypeObject *)hc.tensor_type))
        return refuse(fn, msg, len, "result %d is a %s, not a tensor", k, Py_TYPE(t)->tp_name);
    int rc = meta_dtype(fn, t, k, m, msg, len);
    if (rc == 0)
        rc = meta_shape(fn, t, k, m, msg, len);
    int view = 0;
    m->view_of[k] = -1;
    for (int j = 0; j < nsrc; j++)
        if (t == ins[j])
            view = 1, m->view_of[k] = (int8_t)j;
    if (rc == 0 && !view && (view = tracer_tensor_flag(t, hc.s_is_view, 1)) < 0)
        rc = -1;
    if (rc == 0 && view > 0 && m->view_of[k] < 0) {   /* which input: the view's base */
        PyObject *base = PyObject_GetAttrString(t, "_base");
        for (int j = 0; base && j < nsrc; j++)
            if (base == ins[j])
                m->view_of[k] = (int8_t)j;
        Py_XDECREF(base);
        PyErr_Clear();
    }
    if (rc == 0 && m->view_of[k] >= 0) {
        PyObject *off = PyObject_CallMethod(t, "storage_offset", NULL);
        m->view_off[k] = off ? PyLong_AsLongLong(off) : -1;
        Py_XDECREF(off);
        if (m->view_off[k] < 0)
            PyErr_Clear(), m->view_of[k] = -1;
    }
    m->is_view[k] = view > 0;
    return rc;
}

/* The meta call's result res into m: a tensor, or a tuple/list (named
 * tuples included) of 1..SMELT_MAX_SRC tensors. 0; 1 with msg; -1. */
static int meta_results(PyObject *fn, PyObject *res, PyObject *const *ins, int nsrc,
                        tracer_call_meta *m, char *msg, size_t len)
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

static long meta_runs;

/* t._version, or -1 with an error. */
static long long tensor_version(PyObject *t)
{
    PyObject *v = PyObject_GetAttrString(t, "_version");
    long long r = v ? PyLong_AsLongLong(v) : -1;
    Py_XDECREF(v);
    return r;
}

long tracer_meta_runs(void)
{
    return meta_runs;
}

int tracer_call_infer(PyObject *fn, PyObject *args, PyObject *kwargs, int nsrc,
                         const smelt_node *const *srcs, const int64_t (*src_strides)[SMELT_MAX_DIMS],
                         tracer_call_meta *m, char *msg, size_t msglen)
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
    long long version[SMELT_MAX_SRC];
    while (k < nsrc && (ins[k] = meta_tensor(srcs[k], src_strides ? src_strides[k] : NULL)) &&
           (version[k] = tensor_version(ins[k])) >= 0)
        k++;
    if (k < nsrc && ins[k])
        Py_CLEAR(ins[k]);
    meta_runs += k == nsrc;
    PyObject *res = k == nsrc ? tracer_call_invoke(fn, args, kwargs, ins, nsrc) : NULL;
    int wrote = -1;
    for (int j = 0; res && wrote < 0 && j < nsrc; j++) {
        long long v = tensor_version(ins[j]);
        if (v < 0)
            Py_CLEAR(res);
        else if (v != version[j])
            wrote = j;
    }
    if (res && wrote >= 0) {   /* a Python function (a custom autograd.Function) that writes into an argument */
        rc = refuse(fn, msg, msglen, "writes into its tensor argument %d in place", wrote);
    } else if (res) {
        rc = meta_results(fn, res, ins, nsrc, m, msg, msglen);
        m->has_strides = rc == 0 && m->has_strides == 0;
    } else if (k == nsrc && call_refused()) {
        char text[400];
        PyObject *v = tracer_call_exception();
        tracer_call_exc_text(v, text, sizeof text);
        Py_XDECREF(v);
        rc = refuse(fn, msg, msglen, "%s", text);
    }
    Py_XDECREF(res);
    for (int j = 0; j < k; j++)
        Py_DECREF(ins[j]);
    return rc;
}
