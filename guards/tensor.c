/* tensor.c — TENSOR_MATCH: one leaf comparing a tensor's Python type,
 * dtype, device, requires_grad, sizes and strides with an example's.
 *
 * Reads per check, in order (stopping at the first mismatch): type(v) (no
 * call), v.dtype (identity with the cached dtype), v.is_cpu (or v.device ==
 * the cached device off the CPU), v.requires_grad, v.shape, then either
 * v.is_contiguous() (when the example's layout rule is "contiguous": one
 * call, no tuple) or v.stride(). Torch allocates the shape (and stride)
 * tuples; this file allocates nothing on the success path. */
#include "guard_int.h"

#include <string.h>

#define TDIMS_MAX 64   /* more dims than torch supports for most ops */

/* ------------------------------------------------------------------ */
/* building                                                           */

/* Up to TDIMS_MAX ints of tuple seq into out[*n]: 0, or -1 + exception. */
static int read_ints(PyObject *seq, const char *what, int64_t *out, int *n)
{
    if (!seq)
        return -1;
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) > TDIMS_MAX)
        return PyErr_Format(PyExc_ValueError, "guard_add_tensor_match: %s is not a tuple of at "
                            "most %d ints", what, TDIMS_MAX), -1;
    *n = (int)PyTuple_GET_SIZE(seq);
    for (int d = 0; d < *n; d++) {
        out[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, d));
        if (out[d] == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

/* 1 if attribute (or, call != 0, no-argument method) `name` of o is true,
 * 0 if false, -1 on error. */
static int truth(PyObject *o, PyObject *name, int call)
{
    PyObject *v = call ? PyObject_CallMethodNoArgs(o, name) : PyObject_GetAttr(o, name);
    int r = v ? PyObject_IsTrue(v) : -1;
    Py_XDECREF(v);
    return r;
}

/* 0 if o is a torch.Tensor, else -1 with TypeError (or another error). */
static int is_tensor(PyObject *o)
{
    if (!o)
        return PyErr_SetString(PyExc_TypeError, "guard_add_tensor_match: NULL example"), -1;
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *tensor = torch ? PyObject_GetAttrString(torch, "Tensor") : NULL;
    int r = tensor ? PyObject_IsInstance(o, tensor) : -1;
    Py_XDECREF(tensor);
    Py_XDECREF(torch);
    if (r == 0)
        PyErr_Format(PyExc_TypeError, "guard_add_tensor_match: expected a torch.Tensor, got %s",
                     Py_TYPE(o)->tp_name);
    return r == 1 ? 0 : -1;
}

/* Marks strides that follow from a dynamic size: walking the dims of size
 * >= 2 from the smallest stride up, stride[d] == stride[e] * size[e] of the
 * previous dim e whose own size or stride is dynamic becomes rel = e. */
static void assign_rels(guard_tensor_spec *s)
{
    int order[TDIMS_MAX], n = 0;
    for (int d = 0; d < s->ndim; d++) {
        if (s->dim[d].size < 2)
            continue;
        int i = n++;
        for (; i > 0; i--) {   /* insertion sort: stride ascending, ties inner dim first */
            const guard_tdim *p = &s->dim[order[i - 1]];
            if (p->stride <= s->dim[d].stride)
                break;
            order[i] = order[i - 1];
        }
        order[i] = d;
    }
    for (int i = 1; i < n; i++) {
        guard_tdim *d = &s->dim[order[i]];
        const guard_tdim *e = &s->dim[order[i - 1]];
        int64_t prod;
        if ((e->dynamic || e->rel >= 0) && !__builtin_mul_overflow(e->stride, e->size, &prod) &&
            d->stride == prod)
            d->rel = order[i - 1];
    }
}

/* Caches the C getters of the getset descriptors that type(example)
 * resolves dtype/is_cpu/requires_grad/shape to, when the type uses the
 * generic getattr (data descriptors then win over everything else, so
 * calling the getter is exactly getattr while the type is unchanged). */
static void cache_getters(const guard_tree *t, guard_tensor_spec *s)
{
    PyTypeObject *tp = s->type;
    PyObject *names[GUARD_TA_N] = {t->s_dtype, t->s_is_cpu, t->s_requires_grad, t->s_shape};
    if (tp->tp_getattro != PyObject_GenericGetAttr)
        return;
    for (int i = 0; i < GUARD_TA_N; i++) {
        PyObject *d = PyObject_GetAttr((PyObject *)tp, names[i]);
        bool ok = d && Py_IS_TYPE(d, &PyGetSetDescr_Type) &&
                  PyType_IsSubtype(tp, ((PyDescrObject *)d)->d_type);
        if (ok) {
            s->get[i] = ((PyGetSetDescrObject *)d)->d_getset->get;
            s->closure[i] = ((PyGetSetDescrObject *)d)->d_getset->closure;
        }
        Py_XDECREF(d);
        if (!ok || !s->get[i]) {
            PyErr_Clear();
            return;
        }
    }
    if (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)
        s->version = tp->tp_version_tag;
}

/* Reads everything but the sizes/strides from the example into s. */
static int read_kind(const guard_tree *t, PyObject *ex, guard_tensor_spec *s)
{
    s->type = (PyTypeObject *)Py_NewRef((PyObject *)Py_TYPE(ex));
    s->dtype = PyObject_GetAttr(ex, t->s_dtype);
    s->device = PyObject_GetAttr(ex, t->s_device);
    int cpu = truth(ex, t->s_is_cpu, 0), rg = truth(ex, t->s_requires_grad, 0);
    int contig = truth(ex, t->s_is_contiguous, 1);
    if (!s->dtype || !s->device || cpu < 0 || rg < 0 || contig < 0)
        return -1;
    s->cpu = (uint8_t)cpu;
    s->requires_grad = (uint8_t)rg;
    s->contiguous = (uint8_t)contig;
    cache_getters(t, s);
    return 0;
}

guard_tensor_spec *guard_tensor_spec_new(const guard_tree *t, PyObject *example,
                                         const uint8_t *dynamic_dims)
{
    int64_t size[TDIMS_MAX], stride[TDIMS_MAX];
    int ndim = 0, nstride = -1;
    if (is_tensor(example))
        return NULL;
    PyObject *shape = PyObject_GetAttr(example, t->s_shape);
    PyObject *strides = PyObject_CallMethodNoArgs(example, t->s_stride);
    int rc = read_ints(shape, "shape", size, &ndim);
    rc = rc ? rc : read_ints(strides, "stride()", stride, &nstride);
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    if (rc || nstride != ndim)
        return rc ? NULL : (PyErr_SetString(PyExc_ValueError, "stride() and shape differ in "
                                            "length"), NULL);
    guard_tensor_spec *s = PyMem_Calloc(1, sizeof *s + sizeof s->dim[0] * (size_t)ndim);
    if (!s)
        return (guard_tensor_spec *)PyErr_NoMemory();
    s->ndim = ndim;
    bool dynamic = false;
    for (int d = 0; d < ndim; d++) {
        uint8_t dyn = dynamic_dims && dynamic_dims[d] && size[d] >= 2;
        s->dim[d] = (guard_tdim){.size = size[d], .stride = stride[d], .rel = -1, .dynamic = dyn};
        dynamic |= dyn;
    }
    if (dynamic)
        assign_rels(s);
    if (read_kind(t, example, s)) {
        guard_tensor_spec_free(s);
        return NULL;
    }
    return s;
}

void guard_tensor_spec_free(guard_tensor_spec *s)
{
    if (!s)
        return;
    Py_XDECREF(s->type);
    Py_XDECREF(s->dtype);
    Py_XDECREF(s->device);
    PyMem_Free(s);
}

bool guard_tensor_spec_equal(const guard_tensor_spec *a, const guard_tensor_spec *b)
{
    if (!a || !b || a->type != b->type || a->dtype != b->dtype || a->cpu != b->cpu ||
        (!a->cpu && a->device != b->device) || a->requires_grad != b->requires_grad ||
        a->contiguous != b->contiguous || a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++) {
        const guard_tdim *x = &a->dim[d], *y = &b->dim[d];
        if (x->size != y->size || x->stride != y->stride || x->rel != y->rel ||
            x->dynamic != y->dynamic)
            return false;
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* checking                                                           */

/* Attribute `which` (a GUARD_TA_ index, named `name`) of tensor v, whose
 * type is s->type: through the cached getter while the type is unchanged. */
static PyObject *read_attr(const guard_tensor_spec *s, PyObject *v, int which, PyObject *name)
{
    if (s->version && s->type->tp_version_tag == s->version)
        return s->get[which](v, s->closure[which]);
    return PyObject_GetAttr(v, name);
}

/* "<source>.<what> could not be read: <exception>" (0), or -1. */
static int read_failed(guard_ctx *c, const guard_node *n, const char *what)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s.%s could not be read", n->source, what);
    return guard_fail_exc(c, buf);
}

/* "<source>.<label> == <want> failed: got <got>" (0). */
static int mismatch(guard_ctx *c, const guard_node *n, const char *label, PyObject *want,
                    PyObject *got)
{
    guard_buf b = {0};
    guard_obj_text(&b, want);
    guard_buf_printf(&b, " failed: got ");
    guard_obj_text(&b, got);
    guard_fail(c, "%s.%s == %s", n->source, label, b.s && !b.oom ? b.s : "?");
    free(b.s);
    return 0;
}

/* v.<name> is want (identity): 1, 0 or -1. label names it in reasons. */
static int attr_is(guard_ctx *c, const guard_node *n, const guard_tensor_spec *s, PyObject *v,
                   int which, PyObject *name, PyObject *want, const char *label)
{
    PyObject *got = read_attr(s, v, which, name);
    if (!got)
        return read_failed(c, n, label);
    int r = got == want ? 1 : mismatch(c, n, label, want, got);
    Py_DECREF(got);
    return r;
}

static int check_device(guard_ctx *c, const guard_node *n, const guard_tensor_spec *s,
                        PyObject *v)
{
    const guard_tree *t = c->tree;
    PyObject *flag = s->cpu ? read_attr(s, v, GUARD_TA_IS_CPU, t->s_is_cpu) : NULL;
    if (flag) {
        Py_DECREF(flag);   /* Py_True stays alive */
        if (flag == Py_True)
            return 1;
    } else if (s->cpu) {
        return read_failed(c, n, "is_cpu");
    }
    PyObject *dev = PyObject_GetAttr(v, t->s_device);
    int eq = dev ? PyObject_RichCompareBool(dev, s->device, Py_EQ) : -1;
    int r = eq == 1 ? 1 : eq == 0 ? mismatch(c, n, "device", s->device, dev)
                                  : read_failed(c, n, "device");
    Py_XDECREF(dev);
    return r;
}

/* v.shape against s (dynamic dims: >= 2); the sizes read go to size[]. */
static int check_sizes(guard_ctx *c, const guard_node *n, const guard_tensor_spec *s,
                       PyObject *v, int64_t *size)
{
    PyObject *shape = read_attr(s, v, GUARD_TA_SHAPE, c->tree->s_shape);
    if (!shape)
        return read_failed(c, n, "shape");
    int r = 1;
    if (!PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) != s->ndim) {
        r = guard_fail(c, "%s.dim() == %d failed: got %zd", n->source, s->ndim,
                       PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : (Py_ssize_t)-1);
    }
    for (int d = 0; r == 1 && d < s->ndim; d++) {
        const guard_tdim *e = &s->dim[d];
        size[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
        if (size[d] == -1 && PyErr_Occurred())
            r = read_failed(c, n, "shape");
        else if (e->dynamic ? size[d] < 2 : size[d] != e->size)
            r = e->dynamic ? guard_fail(c, "%s.size()[%d] >= 2 failed: got %lld", n->source, d,
                                        (long long)size[d])
                           : guard_fail(c, "%s.size()[%d] == %lld failed: got %lld", n->source,
                                        d, (long long)e->size, (long long)size[d]);
    }
    Py_DECREF(shape);
    return r;
}

/* Stride dim d must have given actual sizes/strides (false on overflow). */
static int64_t want_stride(const guard_tensor_spec *s, int d, const int64_t *size,
                           const int64_t *stride, bool *ok)
{
    int e = s->dim[d].rel;
    int64_t w = s->dim[d].stride;
    *ok = e < 0 || !__builtin_mul_overflow(stride[e], size[e], &w);
    return w;
}

/* Strides of dims with size >= 2 against the layout rule: 1 or 0. */
static int compare_strides(guard_ctx *c, const guard_node *n, const guard_tensor_spec *s,
                           const int64_t *size, const int64_t *stride)
{
    for (int d = 0; d < s->ndim; d++) {
        bool ok;
        int64_t w = want_stride(s, d, size, stride, &ok);
        if (size[d] >= 2 && (!ok || stride[d] != w))
            return guard_fail(c, "%s.stride()[%d] == %lld failed: got %lld", n->source, d,
                              (long long)w, (long long)stride[d]);
    }
    return 1;
}

static int check_strides(guard_ctx *c, const guard_node *n, const guard_tensor_spec *s,
                         PyObject *v, const int64_t *size)
{
    int64_t stride[TDIMS_MAX];
    PyObject *st = PyObject_CallMethodNoArgs(v, c->tree->s_stride);
    if (!st)
        return read_failed(c, n, "stride()");
    int r = PyTuple_Check(st) && PyTuple_GET_SIZE(st) == s->ndim;
    for (int d = 0; r == 1 && d < s->ndim; d++) {
        stride[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(st, d));
        r = !(stride[d] == -1 && PyErr_Occurred());
    }
    Py_DECREF(st);
    if (r != 1)
        return PyErr_Occurred() ? read_failed(c, n, "stride()")
                                : guard_fail(c, "%s.stride() is no tuple of %d ints", n->source,
                                             s->ndim);
    return compare_strides(c, n, s, size, stride);
}

/* Contiguous layout rule: v.is_contiguous(); the reason comes from stride(). */
static int check_contiguous(guard_ctx *c, const guard_node *n, const guard_tensor_spec *s,
                            PyObject *v, const int64_t *size)
{
    PyObject *r = PyObject_CallMethodNoArgs(v, c->tree->s_is_contiguous);
    if (!r)
        return read_failed(c, n, "is_contiguous()");
    Py_DECREF(r);
    if (r == Py_True)
        return 1;
    int rc = check_strides(c, n, s, v, size);
    return rc == 1 ? guard_fail(c, "%s.is_contiguous() failed", n->source) : rc;
}

int guard_tensor_check(guard_ctx *c, const guard_node *n, const guard_tensor_spec *s,
                       PyObject *v)
{
    const guard_tree *t = c->tree;
    int64_t size[TDIMS_MAX];
    if (Py_TYPE(v) != s->type)
        return guard_fail(c, "type(%s) is %s failed: got %s", n->source, s->type->tp_name,
                          Py_TYPE(v)->tp_name);
    int r = attr_is(c, n, s, v, GUARD_TA_DTYPE, t->s_dtype, s->dtype, "dtype");
    if (r == 1)
        r = check_device(c, n, s, v);
    if (r == 1)
        r = attr_is(c, n, s, v, GUARD_TA_REQUIRES_GRAD, t->s_requires_grad,
                    s->requires_grad ? Py_True : Py_False, "requires_grad");
    if (r == 1)
        r = check_sizes(c, n, s, v, size);
    if (r != 1)
        return r;
    return s->contiguous ? check_contiguous(c, n, s, v, size)
                         : check_strides(c, n, s, v, size);
}

/* ------------------------------------------------------------------ */
/* text                                                               */

static void size_text(guard_buf *b, const guard_tensor_spec *s, int d)
{
    if (s->dim[d].dynamic)
        guard_buf_printf(b, "s%d", d);
    else
        guard_buf_printf(b, "%lld", (long long)s->dim[d].size);
}

/* A stride: its number, or "<stride of e>*<size of e>" for a rel. */
static void stride_text(guard_buf *b, const guard_tensor_spec *s, int d, int depth)
{
    int e = s->dim[d].rel;
    if (e < 0 || depth > TDIMS_MAX) {
        guard_buf_printf(b, "%lld", (long long)s->dim[d].stride);
        return;
    }
    if (s->dim[e].rel >= 0 || s->dim[e].stride != 1) {
        stride_text(b, s, e, depth + 1);
        guard_buf_printf(b, "*");
    }
    size_text(b, s, e);
}

void guard_tensor_text(guard_buf *b, const guard_node *n, const guard_tensor_spec *s)
{
    guard_buf_printf(b, "%s is a %s: dtype=", n->source, s->type->tp_name);
    guard_obj_text(b, s->dtype);
    guard_buf_printf(b, ", device=");
    guard_obj_text(b, s->device);
    guard_buf_printf(b, ", requires_grad=%s, size=(", s->requires_grad ? "True" : "False");
    for (int d = 0; d < s->ndim; d++) {
        guard_buf_printf(b, d ? ", " : "");
        size_text(b, s, d);
    }
    guard_buf_printf(b, s->ndim == 1 ? ",), stride=(" : "), stride=(");
    for (int d = 0; d < s->ndim; d++) {
        guard_buf_printf(b, d ? ", " : "");
        stride_text(b, s, d, 0);
    }
    guard_buf_printf(b, s->ndim == 1 ? ",)" : ")");
    if (s->contiguous)
        guard_buf_printf(b, ", contiguous");
    for (int d = 0; d < s->ndim; d++)
        if (s->dim[d].dynamic)
            guard_buf_printf(b, ", s%d >= 2", d);
}
