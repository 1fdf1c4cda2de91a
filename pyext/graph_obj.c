/* smelt._C.Graph: builds a smelt_graph from Python (the internal API in
 * README.md), prints, hashes, serialises and compiles it. Host calls
 * (Graph.call) are kept in the Graph's own table of calls, handed to the
 * Compiled object at compile time. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "hostcall.h"
#include "log.h"
#include "../tracer/hostcall.h"
#include "module.h"
#include "../inductor/backend.h"

typedef struct GraphObject {
    PyObject_HEAD
    smelt_graph *g;
    PyObject *calls;   /* list of (fn, args, kwargs) by host call id */
} GraphObject;

/* ------------------------------------------------------------------ */
/* argument conversion                                                */

/* o.__index__() as long long with its overflow sign; -1 with a TypeError
 * naming op/key (`what` says what else is accepted) when o is no int. */
static int index_value(PyObject *o, const char *op, const char *key, const char *what,
                       long long *r, int *overflow)
{
    if (!PyIndex_Check(o))
        return PyErr_Format(PyExc_TypeError, "%s: %s must be an int%s, got %s", op, key, what,
                            Py_TYPE(o)->tp_name), -1;
    PyObject *v = PyNumber_Index(o);
    *overflow = 0;
    *r = v ? PyLong_AsLongLongAndOverflow(v, overflow) : -1;
    Py_XDECREF(v);
    return (!v || (*r == -1 && PyErr_Occurred())) ? -1 : 0;
}

/* Python int (or __index__) -> int64; ValueError naming op/key on overflow. */
static int int_arg(PyObject *o, const char *op, const char *key, int64_t *out)
{
    long long r;
    int overflow;
    if (index_value(o, op, key, "", &r, &overflow))
        return -1;
    if (overflow)
        return PyErr_Format(PyExc_ValueError, "%s: %s %R is out of range", op, key, o), -1;
    *out = r;
    return 0;
}

/* Like int_arg, saturating to the int64 range (slice bounds); None -> dflt. */
static int bound_arg(PyObject *o, const char *op, const char *key, int64_t dflt, int64_t *out)
{
    long long r;
    int overflow;
    if (!o || o == Py_None) {
        *out = dflt;
        return 0;
    }
    if (index_value(o, op, key, " or None", &r, &overflow))
        return -1;
    *out = overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : r;
    return 0;
}

/* An int that must fit in [lo, hi] (dims stored as int32 / int8). */
static int small_int_arg(PyObject *o, const char *op, const char *key, int64_t lo, int64_t hi,
                         int64_t *out)
{
    if (int_arg(o, op, key, out))
        return -1;
    if (*out < lo || *out > hi)
        return PyErr_Format(PyExc_ValueError, "%s: %s %lld is out of range", op, key,
                            (long long)*out), -1;
    return 0;
}

/* A sequence of at most SMELT_MAX_DIMS ints (a single int counts as one). */
static int shape_arg(PyObject *o, const char *op, const char *key, int *ndim, int64_t *shape)
{
    if (PyIndex_Check(o)) {
        *ndim = 1;
        return int_arg(o, op, key, shape);
    }
    PyObject *seq = PySequence_Fast(o, "");
    if (!seq)
        return PyErr_Format(PyExc_TypeError, "%s: %s must be a sequence of ints, got %s", op,
                            key, Py_TYPE(o)->tp_name), -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int rc = 0;
    if (n > SMELT_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s: %s has %zd dims, more than the maximum %d", op, key,
                     n, SMELT_MAX_DIMS);
        rc = -1;
    }
    for (Py_ssize_t d = 0; rc == 0 && d < n; d++)
        rc = int_arg(PySequence_Fast_GET_ITEM(seq, d), op, key, &shape[d]);
    Py_DECREF(seq);
    *ndim = (int)n;
    return rc;
}

/* Python bool/int/float -> category (SMELT_BOOL/I64/F64) and value. */
static int number_arg(PyObject *o, const char *op, const char *key, smelt_dtype *cat,
                      double *f, int64_t *i)
{
    *f = 0;
    *i = 0;
    if (PyBool_Check(o)) {
        *cat = SMELT_BOOL;
        *i = o == Py_True;
        return 0;
    }
    if (PyLong_Check(o)) {
        *cat = SMELT_I64;
        return int_arg(o, op, key, i);
    }
    if (PyFloat_Check(o)) {
        *cat = SMELT_F64;
        *f = PyFloat_AS_DOUBLE(o);
        return 0;
    }
    return PyErr_Format(PyExc_TypeError, "%s: %s must be a bool, int or float, got %s", op,
                        key, Py_TYPE(o)->tp_name), -1;
}

/* A node id of graph g. */
static int node_arg(const smelt_graph *g, PyObject *o, const char *op, int32_t *out)
{
    int64_t v;
    if (PyBool_Check(o) || !PyLong_Check(o))
        return PyErr_Format(PyExc_TypeError, "%s: node ids are ints, got %s", op,
                            Py_TYPE(o)->tp_name), -1;
    if (int_arg(o, op, "node", &v))
        return -1;
    if (v < 0 || v >= g->n)
        return PyErr_Format(PyExc_ValueError, "%s: node %lld does not exist (graph has %d nodes)",
                            op, (long long)v, (int)g->n), -1;
    *out = (int32_t)v;
    return 0;
}

/* Borrowed values of the allowed keyword arguments, by position in names
 * (NULL-terminated); TypeError on any other keyword. */
static int take_kwargs(PyObject *kw, const char *op, const char *const *names, PyObject **vals)
{
    Py_ssize_t pos = 0;
    PyObject *key, *val;
    for (int k = 0; names[k]; k++)
        vals[k] = NULL;
    while (kw && PyDict_Next(kw, &pos, &key, &val)) {
        const char *ks = PyUnicode_AsUTF8(key);
        int k = 0;
        if (!ks)
            return -1;
        while (names[k] && strcmp(names[k], ks) != 0)
            k++;
        if (!names[k])
            return PyErr_Format(PyExc_TypeError, "%s: unexpected keyword argument '%s'", op,
                                ks), -1;
        vals[k] = val;
    }
    return 0;
}

static int require(PyObject *v, const char *op, const char *key)
{
    if (v)
        return 0;
    return PyErr_Format(PyExc_TypeError, "%s: missing keyword argument '%s'", op, key), -1;
}

/* ------------------------------------------------------------------ */
/* op attributes from keyword arguments                               */

typedef struct op_call {
    pyext_state *st;
    const smelt_graph *g;
    const char *name;
    smelt_node *p;
    PyObject *kw;
} op_call;

/* The shape of the proto's first source, for messages. */
static PyObject *src_shape_repr(op_call *c)
{
    const smelt_node *n = &c->g->nodes[c->p->src[0]];
    PyObject *t = PyTuple_New(n->ndim);
    for (int d = 0; t && d < n->ndim; d++)
        PyTuple_SET_ITEM(t, d, PyLong_FromLongLong(n->shape[d]));
    return t;
}

/* Sets bit (d & 31) of the proto dims for one reduction dim d. */
static int add_red_dim(op_call *c, PyObject *o)
{
    int64_t d;
    if (int_arg(o, c->name, "dims", &d))
        return -1;
    if (d < -16 || d > 15) {
        PyObject *shape = src_shape_repr(c);
        if (shape)
            PyErr_Format(PyExc_ValueError, "%s: dim %lld out of range for shape %R", c->name,
                         (long long)d, shape);
        Py_XDECREF(shape);
        return -1;
    }
    uint32_t bit = 1u << (d & 31);
    if (c->p->a.red.dims & bit)
        return PyErr_Format(PyExc_ValueError, "%s: dim %lld appears multiple times in dims",
                            c->name, (long long)d), -1;
    c->p->a.red.dims |= bit;
    return 0;
}

/* dims=None | int | sequence of ints into the proto's dims bits. */
static int red_dims_arg(op_call *c, PyObject *v)
{
    if (!v || v == Py_None)
        return 0;
    if (PyIndex_Check(v))
        return add_red_dim(c, v);
    PyObject *seq = PySequence_Fast(v, "");
    if (!seq)
        return PyErr_Format(PyExc_TypeError, "%s: dims must be None, an int or a list of "
                            "ints, got %s", c->name, Py_TYPE(v)->tp_name), -1;
    int rc = 0;
    for (Py_ssize_t k = 0; rc == 0 && k < PySequence_Fast_GET_SIZE(seq); k++)
        rc = add_red_dim(c, PySequence_Fast_GET_ITEM(seq, k));
    Py_DECREF(seq);
    return rc;
}

static int attrs_reduction(op_call *c)
{
    static const char *const names[] = {"dims", "keepdim", "correction", NULL};
    bool varstd = c->p->op == SMELT_OP_VAR || c->p->op == SMELT_OP_STD;
    PyObject *v[3];
    int64_t corr = 1;
    if (take_kwargs(c->kw, c->name, names, v))
        return -1;
    if (v[2] && !varstd)
        return PyErr_Format(PyExc_TypeError, "%s: unexpected keyword argument 'correction'",
                            c->name), -1;
    int keep = v[1] ? PyObject_IsTrue(v[1]) : 0;
    if (red_dims_arg(c, v[0]) || keep < 0 ||
        (v[2] && int_arg(v[2], c->name, "correction", &corr)))
        return -1;
    c->p->a.red.keepdim = (uint8_t)keep;
    c->p->a.red.correction = varstd ? corr : 0;
    return 0;
}

static int attrs_cast(op_call *c)
{
    static const char *const names[] = {"dtype", NULL};
    PyObject *v[1];
    if (take_kwargs(c->kw, c->name, names, v) || require(v[0], c->name, "dtype"))
        return -1;
    int dt = pyext_dtype_from_py(c->st, v[0], c->name);
    c->p->dtype = (uint8_t)dt;
    return dt < 0 ? -1 : 0;
}

/* min/max bounds; proto dtype = their highest category (see graph.c). */
static int attrs_clamp(op_call *c)
{
    static const char *const names[] = {"min", "max", NULL};
    PyObject *v[2];
    smelt_dtype cat[2] = {SMELT_BOOL, SMELT_BOOL};
    double f[2] = {0, 0};
    int64_t i[2] = {0, 0};
    if (take_kwargs(c->kw, c->name, names, v))
        return -1;
    for (int k = 0; k < 2; k++)
        if (v[k] && v[k] != Py_None && number_arg(v[k], c->name, names[k], &cat[k], &f[k], &i[k]))
            return -1;
    smelt_node *p = c->p;
    p->a.clamp.has_lo = v[0] && v[0] != Py_None;
    p->a.clamp.has_hi = v[1] && v[1] != Py_None;
    p->dtype = (uint8_t)(cat[0] > cat[1] ? cat[0] : cat[1]);   /* BOOL < I64 < F64 */
    p->a.clamp.flo = cat[0] == SMELT_F64 ? f[0] : (double)i[0];
    p->a.clamp.fhi = cat[1] == SMELT_F64 ? f[1] : (double)i[1];
    p->a.clamp.ilo = i[0];
    p->a.clamp.ihi = i[1];
    return 0;
}

static int attrs_shape(op_call *c)
{
    static const char *const names[] = {"shape", NULL};
    PyObject *v[1];
    int nd;
    if (take_kwargs(c->kw, c->name, names, v) || require(v[0], c->name, "shape") ||
        shape_arg(v[0], c->name, "shape", &nd, c->p->shape))
        return -1;
    c->p->ndim = (uint8_t)nd;
    return 0;
}

static int attrs_permute(op_call *c)
{
    static const char *const names[] = {"perm", NULL};
    PyObject *v[1];
    int64_t perm[SMELT_MAX_DIMS];
    int nd;
    if (take_kwargs(c->kw, c->name, names, v) || require(v[0], c->name, "perm") ||
        shape_arg(v[0], c->name, "perm", &nd, perm))
        return -1;
    const smelt_node *s = &c->g->nodes[c->p->src[0]];
    if (nd != s->ndim) {
        PyObject *shape = src_shape_repr(c);
        if (shape)
            PyErr_Format(PyExc_ValueError, "%s: perm has %d entries for shape %R", c->name, nd,
                         shape);
        Py_XDECREF(shape);
        return -1;
    }
    for (int d = 0; d < nd; d++) {
        if (perm[d] < -SMELT_MAX_DIMS || perm[d] >= SMELT_MAX_DIMS)
            return PyErr_Format(PyExc_ValueError, "%s: dim %lld is out of range", c->name,
                                (long long)perm[d]), -1;
        c->p->a.perm.perm[d] = (int8_t)perm[d];
    }
    return 0;
}

static int attrs_slice(op_call *c)
{
    static const char *const names[] = {"dim", "start", "end", "step", NULL};
    PyObject *v[4];
    int64_t dim;
    smelt_node *p = c->p;
    if (take_kwargs(c->kw, c->name, names, v) || require(v[0], c->name, "dim") ||
        small_int_arg(v[0], c->name, "dim", INT32_MIN, INT32_MAX, &dim) ||
        bound_arg(v[1], c->name, "start", 0, &p->a.slice.start) ||
        bound_arg(v[2], c->name, "end", INT64_MAX, &p->a.slice.end) ||
        bound_arg(v[3], c->name, "step", 1, &p->a.slice.step))
        return -1;
    p->a.slice.dim = (int32_t)dim;
    return 0;
}

/* squeeze/unsqueeze (dim required), cat (dim=0). */
static int attrs_axis(op_call *c)
{
    static const char *const names[] = {"dim", NULL};
    PyObject *v[1];
    int64_t dim = 0;
    if (take_kwargs(c->kw, c->name, names, v) ||
        (c->p->op != SMELT_OP_CAT && require(v[0], c->name, "dim")) ||
        (v[0] && small_int_arg(v[0], c->name, "dim", INT32_MIN, INT32_MAX, &dim)))
        return -1;
    c->p->a.axis.dim = (int32_t)dim;
    return 0;
}

static int attrs_diagonal(op_call *c)
{
    static const char *const names[] = {"offset", "dim1", "dim2", NULL};
    PyObject *v[3];
    int64_t off = 0, d1 = 0, d2 = 1;
    if (take_kwargs(c->kw, c->name, names, v) ||
        (v[0] && int_arg(v[0], c->name, "offset", &off)) ||
        (v[1] && small_int_arg(v[1], c->name, "dim1", INT32_MIN, INT32_MAX, &d1)) ||
        (v[2] && small_int_arg(v[2], c->name, "dim2", INT32_MIN, INT32_MAX, &d2)))
        return -1;
    c->p->a.diag.offset = off;
    c->p->a.diag.dim1 = (int32_t)d1;
    c->p->a.diag.dim2 = (int32_t)d2;
    return 0;
}

/* torch's checked conversion of a float value to an integer dtype. */
static bool double_fits_int(smelt_dtype dt, double f)
{
    static const double hi[SMELT_NDTYPES] = {0, 255, 127, 32767, 2147483647.0,
                                             9223372036854775808.0};
    if (isnan(f))
        return false;
    if (dt == SMELT_U8)
        return f <= 255 && f >= -255;
    if (dt == SMELT_I64)
        return f >= -hi[dt] && f < hi[dt];
    return f >= -hi[dt] - 1 && f <= hi[dt];
}

/* The value of a Python number for FULL of dtype dt, in the attr field
 * the node uses. */
static int full_value(op_call *c, PyObject *value, smelt_dtype cat, double f, int64_t i)
{
    smelt_node *p = c->p;
    smelt_dtype dt = (smelt_dtype)p->dtype;
    if (smelt_dtype_is_float(dt)) {
        p->a.scalar.f = cat == SMELT_F64 ? f : (double)i;
    } else if (dt == SMELT_BOOL) {
        p->a.scalar.i = cat == SMELT_F64 ? f != 0 : i != 0;
    } else if (cat == SMELT_F64) {
        if (!double_fits_int(dt, f))
            return PyErr_Format(PyExc_ValueError, "%s: value %R cannot be converted to %s "
                                "without overflow", c->name, value, smelt_dtype_name(dt)), -1;
        p->a.scalar.i = (int64_t)f;
    } else {
        p->a.scalar.i = i;
    }
    return 0;
}

/* dtype=None -> the default for the category: bool, int64, float32. */
static int dtype_or_default(op_call *c, PyObject *v, smelt_dtype cat)
{
    int dt = v && v != Py_None ? pyext_dtype_from_py(c->st, v, c->name)
             : cat == SMELT_F64 ? SMELT_F32 : (int)cat;
    c->p->dtype = (uint8_t)dt;
    return dt < 0 ? -1 : 0;
}

static int attrs_full(op_call *c)
{
    static const char *const names[] = {"shape", "value", "dtype", NULL};
    PyObject *v[3];
    smelt_dtype cat;
    double f;
    int64_t i;
    int nd;
    if (take_kwargs(c->kw, c->name, names, v) || require(v[0], c->name, "shape") ||
        require(v[1], c->name, "value") || shape_arg(v[0], c->name, "shape", &nd, c->p->shape) ||
        number_arg(v[1], c->name, "value", &cat, &f, &i) || dtype_or_default(c, v[2], cat))
        return -1;
    c->p->ndim = (uint8_t)nd;
    return full_value(c, v[1], cat, f, i);
}

/* torch.arange's element count: int64 computes on truncated integers,
 * other dtypes on the doubles given. -1 with ValueError on bad bounds. */
static int64_t arange_count(op_call *c, const double v[3], bool i64)
{
    double start = i64 ? trunc(v[0]) : v[0], end = i64 ? trunc(v[1]) : v[1];
    double step = i64 ? trunc(v[2]) : v[2];
    if (step == 0 || isnan(step))
        return PyErr_Format(PyExc_ValueError, "%s: step must be nonzero", c->name), -1;
    if (isnan(start) || isnan(end) || (step > 0 && end < start) || (step < 0 && end > start))
        return PyErr_Format(PyExc_ValueError, "%s: upper bound and lower bound inconsistent "
                            "with step sign", c->name), -1;
    double n = ceil((end - start) / step);
    if (!(n >= 0 && n < 9.2e18))
        return PyErr_Format(PyExc_ValueError, "%s: invalid element count", c->name), -1;
    return (int64_t)n;
}

static int attrs_arange(op_call *c)
{
    static const char *const names[] = {"end", "start", "step", "dtype", NULL};
    static const char *const keys[] = {"start", "end", "step"};
    PyObject *v[4], *arg[3];
    smelt_dtype cat[3];
    double f[3], d[3];
    int64_t i[3];
    if (take_kwargs(c->kw, c->name, names, v) || require(v[0], c->name, "end"))
        return -1;
    arg[0] = v[1], arg[1] = v[0], arg[2] = v[2];
    smelt_dtype top = SMELT_I64;
    for (int k = 0; k < 3; k++) {
        if (!arg[k]) {
            cat[k] = SMELT_I64, f[k] = 0, i[k] = k == 2;
        } else if (number_arg(arg[k], c->name, keys[k], &cat[k], &f[k], &i[k])) {
            return -1;
        }
        d[k] = cat[k] == SMELT_F64 ? f[k] : (double)i[k];
        top = cat[k] == SMELT_F64 ? SMELT_F64 : top;
    }
    if (dtype_or_default(c, v[3], top))
        return -1;
    smelt_dtype dt = (smelt_dtype)c->p->dtype;
    for (int k = 0; k < 3 && !smelt_dtype_is_float(dt); k++)
        if (!(fabs(d[k]) < 9.2e18))
            return PyErr_Format(PyExc_ValueError, "%s: %s %R does not fit %s", c->name, keys[k],
                                arg[k], smelt_dtype_name(dt)), -1;
    int64_t n = arange_count(c, d, dt == SMELT_I64);
    if (n < 0)
        return -1;
    c->p->ndim = 1;
    c->p->shape[0] = n;
    c->p->a.arange.fstart = d[0];
    c->p->a.arange.fstep = d[2];
    c->p->a.arange.istart = cat[0] == SMELT_F64 ? (int64_t)trunc(d[0]) : i[0];
    c->p->a.arange.istep = cat[2] == SMELT_F64 ? (int64_t)trunc(d[2]) : i[2];
    return 0;
}

static int attrs_iota(op_call *c)
{
    static const char *const names[] = {"shape", "dim", "dtype", NULL};
    PyObject *v[3];
    int64_t dim;
    int nd;
    if (take_kwargs(c->kw, c->name, names, v) || require(v[0], c->name, "shape") ||
        require(v[1], c->name, "dim") || shape_arg(v[0], c->name, "shape", &nd, c->p->shape) ||
        small_int_arg(v[1], c->name, "dim", INT32_MIN, INT32_MAX, &dim) ||
        dtype_or_default(c, v[2] ? v[2] : c->st->dtypes[SMELT_I64], SMELT_I64))
        return -1;
    c->p->ndim = (uint8_t)nd;
    c->p->a.axis.dim = (int32_t)dim;
    return 0;
}

/* sdpa: scale (a number; default 1/sqrt(E)), causal (default False). */
static int attrs_sdpa(op_call *c)
{
    static const char *const names[] = {"scale", "causal", NULL};
    PyObject *v[2];
    if (take_kwargs(c->kw, c->name, names, v))
        return -1;
    const smelt_node *q = &c->g->nodes[c->p->src[0]];
    double scale = q->ndim ? 1.0 / sqrt((double)(q->shape[q->ndim - 1] ? q->shape[q->ndim - 1] : 1)) : 1.0;
    if (v[0] && v[0] != Py_None && (scale = PyFloat_AsDouble(v[0])) == -1.0 && PyErr_Occurred())
        return -1;
    int causal = v[1] ? PyObject_IsTrue(v[1]) : 0;
    if (causal < 0)
        return -1;
    c->p->a.sdpa.scale = scale;
    c->p->a.sdpa.causal = (uint8_t)causal;
    return 0;
}

/* unfold: dim, size, step (default 1), dilation (default 1). */
static int attrs_unfold(op_call *c)
{
    static const char *const names[] = {"dim", "size", "step", "dilation", NULL};
    PyObject *v[4];
    int64_t dim, size, step = 1, dil = 1;
    if (take_kwargs(c->kw, c->name, names, v) || require(v[0], c->name, "dim") ||
        require(v[1], c->name, "size") || small_int_arg(v[0], c->name, "dim", INT32_MIN, INT32_MAX, &dim) ||
        int_arg(v[1], c->name, "size", &size) || (v[2] && int_arg(v[2], c->name, "step", &step)) ||
        (v[3] && int_arg(v[3], c->name, "dilation", &dil)))
        return -1;
    c->p->a.unfold.dim = (int32_t)dim;
    c->p->a.unfold.size = size;
    c->p->a.unfold.step = step;
    c->p->a.unfold.dil = dil;
    return 0;
}

/* One conv attribute: an int for every spatial dim or a list of nsp ints. */
static int conv_ints(op_call *c, PyObject *v, const char *key, int nsp, int64_t dflt, int32_t *out)
{
    int64_t vals[SMELT_MAX_DIMS];
    int n = 0;
    if (!v) {
        for (int d = 0; d < nsp; d++)
            out[d] = (int32_t)dflt;
        return 0;
    }
    if (shape_arg(v, c->name, key, &n, vals))
        return -1;
    if (n != 1 && n != nsp)
        return PyErr_Format(PyExc_ValueError, "%s: %s needs 1 or %d values, got %d", c->name, key, nsp, n), -1;
    for (int d = 0; d < nsp; d++) {
        int64_t x = vals[n == 1 ? 0 : d];
        if (x < INT32_MIN || x > INT32_MAX)
            return PyErr_Format(PyExc_ValueError, "%s: %s value %lld is out of range", c->name, key,
                                (long long)x), -1;
        out[d] = (int32_t)x;
    }
    return 0;
}

/* conv: stride, padding (both sides), pad_hi (after; default padding),
 * dilation, groups; spatial dims from the input's rank. The backward ops
 * also take the result's shape (required), which gives their rank. */
static int attrs_conv(op_call *c)
{
    static const char *const names[] = {"stride", "padding", "pad_hi", "dilation", "groups", "shape", NULL};
    PyObject *v[6];
    int64_t groups = 1;
    int nd = c->g->nodes[c->p->src[0]].ndim, bwd = c->p->op != SMELT_OP_CONV;
    if (take_kwargs(c->kw, c->name, names, v))
        return -1;
    if (v[5] && !bwd)
        return PyErr_Format(PyExc_TypeError, "%s: unexpected keyword argument 'shape'", c->name), -1;
    if (bwd && (require(v[5], c->name, "shape") || shape_arg(v[5], c->name, "shape", &nd, c->p->shape)))
        return -1;
    c->p->ndim = (uint8_t)nd;
    int nsp = nd - 2;
    if (nsp < 1 || nsp > 3)
        return PyErr_Format(PyExc_ValueError, "%s: the input must be 3-d to 5-d", c->name), -1;
    c->p->a.conv.nsp = nsp;
    if (conv_ints(c, v[0], "stride", nsp, 1, c->p->a.conv.stride) ||
        conv_ints(c, v[1], "padding", nsp, 0, c->p->a.conv.pad_lo) ||
        conv_ints(c, v[2] ? v[2] : v[1], "pad_hi", nsp, 0, c->p->a.conv.pad_hi) ||
        conv_ints(c, v[3], "dilation", nsp, 1, c->p->a.conv.dil) ||
        (v[4] && small_int_arg(v[4], c->name, "groups", 1, INT32_MAX, &groups)))
        return -1;
    c->p->a.conv.groups = (int32_t)groups;
    return 0;
}

/* gather: dim, wrap (default False); checkidx: n, wrap. */
static int attrs_gather(op_call *c)
{
    static const char *const names[] = {"dim", "n", "wrap", NULL};
    PyObject *v[3];
    int64_t dim = 0, n = 0;
    int g = c->p->op == SMELT_OP_GATHER;
    if (take_kwargs(c->kw, c->name, names, v) || require(g ? v[0] : v[1], c->name, g ? "dim" : "n") ||
        (v[0] && small_int_arg(v[0], c->name, "dim", INT32_MIN, INT32_MAX, &dim)) ||
        (v[1] && int_arg(v[1], c->name, "n", &n)))
        return -1;
    int wrap = v[2] ? PyObject_IsTrue(v[2]) : 0;
    if (wrap < 0)
        return -1;
    c->p->a.gather.dim = (int32_t)dim;
    c->p->a.gather.n = n;
    c->p->a.gather.wrap = (uint8_t)wrap;
    return 0;
}

static int attrs_none(op_call *c)
{
    static const char *const names[] = {NULL};
    return take_kwargs(c->kw, c->name, names, NULL);
}

/* Fills the proto's attrs (and dtype/shape where the op takes them). */
static int op_attrs(op_call *c)
{
    smelt_op op = (smelt_op)c->p->op;
    switch (op) {
    case SMELT_OP_CAST: return attrs_cast(c);
    case SMELT_OP_CLAMP: return attrs_clamp(c);
    case SMELT_OP_RESHAPE: case SMELT_OP_EXPAND: return attrs_shape(c);
    case SMELT_OP_PERMUTE: return attrs_permute(c);
    case SMELT_OP_SLICE: return attrs_slice(c);
    case SMELT_OP_SQUEEZE: case SMELT_OP_UNSQUEEZE: case SMELT_OP_CAT: case SMELT_OP_FLIP: return attrs_axis(c);
    case SMELT_OP_DIAGONAL: return attrs_diagonal(c);
    case SMELT_OP_FULL: return attrs_full(c);
    case SMELT_OP_ARANGE: return attrs_arange(c);
    case SMELT_OP_IOTA: return attrs_iota(c);
    case SMELT_OP_SDPA: case SMELT_OP_SDPA_BWD: return attrs_sdpa(c);
    case SMELT_OP_UNFOLD: return attrs_unfold(c);
    case SMELT_OP_CONV: case SMELT_OP_CONV_BWD_INPUT: case SMELT_OP_CONV_BWD_WEIGHT: return attrs_conv(c);
    case SMELT_OP_GATHER: case SMELT_OP_CHECKIDX: return attrs_gather(c);
    default:
        if (smelt_op_kind_of(op) == SMELT_KIND_REDUCTION)
            return attrs_reduction(c);
        return attrs_none(c);
    }
}

/* ------------------------------------------------------------------ */
/* methods                                                            */

static PyObject *builder_result(GraphObject *self, int32_t id)
{
    if (id < 0)
        return PyErr_Format(PyExc_ValueError, "%s", self->g->err);
    return PyLong_FromLong(id);
}

static PyObject *graph_op(GraphObject *self, PyObject *args, PyObject *kw)
{
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (nargs < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(args, 0)))
        return PyErr_Format(PyExc_TypeError, "op: the first argument must be an op name");
    const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 0));
    if (!name)
        return NULL;
    int op = smelt_op_from_name(name);
    if (op < 0)
        return PyErr_Format(PyExc_ValueError, "op: unknown op '%s'", name);
    if (op == SMELT_OP_INPUT || op == SMELT_OP_SCALAR)
        return PyErr_Format(PyExc_ValueError, "op: use Graph.%s() for '%s' nodes", name, name);
    int arity = smelt_op_arity((smelt_op)op);
    if (arity >= 0 ? nargs - 1 != arity : nargs - 1 < 1 || nargs - 1 > SMELT_MAX_SRC)
        return PyErr_Format(PyExc_TypeError, "%s: expects %s%d sources, got %zd", name,
                            arity < 0 ? "1 to " : "", arity < 0 ? SMELT_MAX_SRC : arity,
                            nargs - 1);
    smelt_node p;
    memset(&p, 0, sizeof p);
    p.op = (uint16_t)op;
    p.nsrc = (uint8_t)(nargs - 1);
    for (Py_ssize_t k = 1; k < nargs; k++)
        if (node_arg(self->g, PyTuple_GET_ITEM(args, k), name, &p.src[k - 1]))
            return NULL;
    op_call c = {pyext_state_of((PyObject *)self), self->g, name, &p, kw};
    if (op_attrs(&c))
        return NULL;
    return builder_result(self, smelt_graph_add(self->g, &p));
}

/* srcs: a sequence of 1..SMELT_MAX_SRC node ids into src; *n their count. */
static int call_srcs(const smelt_graph *g, PyObject *srcs, int32_t *src, int *n)
{
    PyObject *seq = PySequence_Fast(srcs, "");
    if (!seq)
        return PyErr_Format(PyExc_TypeError, "call: srcs must be a list of node ids, got %s",
                            Py_TYPE(srcs)->tp_name), -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    int rc = 0;
    if (len < 1 || len > SMELT_MAX_SRC) {
        PyErr_Format(PyExc_ValueError, "call: expects 1 to %d sources, got %zd", SMELT_MAX_SRC,
                     len);
        rc = -1;
    }
    for (Py_ssize_t k = 0; rc == 0 && k < len; k++)
        rc = node_arg(g, PySequence_Fast_GET_ITEM(seq, k), "call", &src[k]);
    Py_DECREF(seq);
    *n = (int)len;
    return rc;
}

/* Appends host call (fn, args, kwargs) with sources src[0..nsrc) and
 * result metadata m as CALL nodes; the list of their ids. */
static PyObject *add_call(GraphObject *self, PyObject *entry, int nsrc, const int32_t *src,
                          const tracer_call_meta *m, uint64_t key)
{
    Py_ssize_t id = PyList_GET_SIZE(self->calls);
    if (PyList_Append(self->calls, entry))
        return NULL;
    int32_t first = smelt_graph_call(self->g, (int32_t)id, key, nsrc, src, m->nout, m->dtypes,
                                     m->ndims, (const int64_t(*)[SMELT_MAX_DIMS])m->shapes);
    if (first < 0) {
        PyList_SetSlice(self->calls, id, id + 1, NULL);
        return PyErr_Format(PyExc_ValueError, "%s", self->g->err);
    }
    PyObject *ids = PyList_New(m->nout);
    for (int k = 0; ids && k < m->nout; k++) {
        PyObject *v = PyLong_FromLong(first + k);
        if (!v)
            Py_CLEAR(ids);
        else
            PyList_SET_ITEM(ids, k, v);
    }
    return ids;
}

static PyObject *graph_call(GraphObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"fn", "srcs", "args", "kwargs", NULL};
    PyObject *fn, *srcs, *cargs = NULL, *ckw = Py_None;
    int32_t src[SMELT_MAX_SRC];
    int nsrc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O!O:call", names, &fn, &srcs, &PyTuple_Type,
                                     &cargs, &ckw))
        return NULL;
    if (!PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "call: fn must be callable, got %s",
                            Py_TYPE(fn)->tp_name);
    if (ckw != Py_None && !PyDict_Check(ckw))
        return PyErr_Format(PyExc_TypeError, "call: kwargs must be a dict or None, got %s",
                            Py_TYPE(ckw)->tp_name);
    if (call_srcs(self->g, srcs, src, &nsrc))
        return NULL;
    const smelt_node *nodes[SMELT_MAX_SRC];
    for (int k = 0; k < nsrc; k++)
        nodes[k] = &self->g->nodes[src[k]];
    PyObject *entry = Py_BuildValue("(ONN)", fn, cargs ? Py_NewRef(cargs) : PyTuple_New(0),
                                    ckw == Py_None ? PyDict_New() : PyDict_Copy(ckw));
    if (!entry)
        return NULL;
    tracer_call_meta m;
    char msg[512];
    uint64_t key;
    PyObject *r = NULL;
    int rc = tracer_call_infer(fn, PyTuple_GET_ITEM(entry, 1), PyTuple_GET_ITEM(entry, 2),
                                  nsrc, nodes, NULL, &m, msg, sizeof msg);
    if (rc == 1)
        PyErr_Format(PyExc_ValueError, "call: %s", msg);
    else if (rc == 0 && tracer_call_key(fn, PyTuple_GET_ITEM(entry, 1),
                                           PyTuple_GET_ITEM(entry, 2), &key) == 0)
        r = add_call(self, entry, nsrc, src, &m, key);
    Py_DECREF(entry);
    return r;
}

static PyObject *graph_input(GraphObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"dtype", "shape", "strides", NULL};
    PyObject *dto, *shapeo, *strideo = Py_None;
    int64_t shape[SMELT_MAX_DIMS], strides[SMELT_MAX_DIMS];
    int nd, nds = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:input", names, &dto, &shapeo, &strideo))
        return NULL;
    int dt = pyext_dtype_from_py(pyext_state_of((PyObject *)self), dto, "input");
    if (dt < 0 || shape_arg(shapeo, "input", "shape", &nd, shape) ||
        (strideo != Py_None && shape_arg(strideo, "input", "strides", &nds, strides)))
        return NULL;
    if (strideo != Py_None && nds != nd)
        return PyErr_Format(PyExc_ValueError, "input: %d strides for %d dims", nds, nd);
    return builder_result(self, smelt_graph_input(self->g, (smelt_dtype)dt, nd, shape,
                                                  strideo != Py_None ? strides : NULL));
}

static PyObject *graph_scalar(GraphObject *self, PyObject *value)
{
    smelt_dtype cat;
    double f;
    int64_t i;
    if (number_arg(value, "scalar", "value", &cat, &f, &i))
        return NULL;
    return builder_result(self, smelt_graph_scalar(self->g, cat, f, i));
}

static PyObject *graph_output(GraphObject *self, PyObject *args)
{
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(args); k++) {
        int32_t id;
        if (node_arg(self->g, PyTuple_GET_ITEM(args, k), "output", &id))
            return NULL;
        if (smelt_graph_output(self->g, id))
            return PyErr_Format(PyExc_ValueError, "%s", self->g->err);
    }
    Py_RETURN_NONE;
}

static PyObject *graph_dtype(GraphObject *self, PyObject *arg)
{
    int32_t id;
    if (node_arg(self->g, arg, "dtype", &id))
        return NULL;
    PyObject *dt = pyext_dtype_to_py(pyext_state_of((PyObject *)self),
                                     (smelt_dtype)self->g->nodes[id].dtype);
    return Py_NewRef(dt);
}

static PyObject *graph_shape(GraphObject *self, PyObject *arg)
{
    int32_t id;
    if (node_arg(self->g, arg, "shape", &id))
        return NULL;
    const smelt_node *n = &self->g->nodes[id];
    PyObject *t = PyTuple_New(n->ndim);
    for (int d = 0; t && d < n->ndim; d++) {
        PyObject *v = PyLong_FromLongLong(n->shape[d]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, d, v);
    }
    return t;
}

static PyObject *graph_hash(GraphObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong(smelt_graph_hash(self->g));
}

static PyObject *graph_serialize(GraphObject *self, PyObject *unused)
{
    (void)unused;
    size_t len = 0;
    uint8_t *buf = smelt_graph_serialize(self->g, &len);
    if (!buf)
        return PyErr_NoMemory();
    PyObject *r = PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)len);
    free(buf);
    return r;
}

static PyObject *graph_verify(GraphObject *self, PyObject *unused)
{
    (void)unused;
    char err[512];
    if (smelt_graph_verify(self->g, err, sizeof err))
        return PyErr_Format(PyExc_RuntimeError, "%s", err);
    Py_RETURN_NONE;
}

static PyObject *graph_str(GraphObject *self)
{
    char *text = smelt_graph_print(self->g);
    if (!text)
        return PyErr_NoMemory();
    PyObject *r = PyUnicode_FromString(text);
    free(text);
    return r;
}

static PyObject *graph_repr(GraphObject *self)
{
    return PyUnicode_FromFormat("<smelt._C.Graph: %d nodes, %d inputs, %d outputs>",
                                (int)self->g->n, (int)self->g->ninputs, (int)self->g->nout);
}

static Py_ssize_t graph_len(GraphObject *self)
{
    return self->g->n;
}

/* Logs "<what> of graph <hash>:\n<text>" on channel ch. */
static void log_text(pyext_log_channel ch, const char *what, uint64_t hash, const char *text)
{
    char head[96];
    snprintf(head, sizeof head, "%s of graph %016llx:\n", what, (unsigned long long)hash);
    PyObject *msg = PyUnicode_FromFormat("%s%s", head, text);
    if (msg)
        pyext_log_write(ch, PyUnicode_AsUTF8(msg));
    Py_XDECREF(msg);
    PyErr_Clear();
}

/* Logs the plan's code text `which` on channel ch, if kept. */
static void log_code(const smelt_plan *plan, pyext_log_channel ch, const char *which,
                     uint64_t hash)
{
    const char *code = smelt_plan_code(plan, which);
    if (code && pyext_log_on(ch))
        log_text(ch, which, hash, code);
}

static void log_graph(GraphObject *self, uint64_t hash)
{
    char *printed = smelt_graph_print(self->g);
    if (printed)
        log_text(PYEXT_LOG_GRAPH, "listing", hash, printed);
    free(printed);
}

static PyObject *graph_compile(GraphObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"vector_bits", "opt_level", "keep_code", "cpu", "cpu_features", "backend", "cuda_arch",
                            "device", NULL};
    int vector_bits = 0, opt_level = 2, keep = 0, device = 0;
    const char *cpu = NULL, *cpu_features = NULL, *backend = NULL, *cuda_arch = NULL;
    char err[4096];
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|iip$zzzzi:compile", names, &vector_bits, &opt_level,
                                     &keep, &cpu, &cpu_features, &backend, &cuda_arch, &device))
        return NULL;
    if (backend && !ind_backend_named(backend))
        return PyErr_Format(PyExc_ValueError, "compile: backend must be 'cpu', 'spirv' or 'cuda', not '%s'", backend);
    if (device < 0)
        return PyErr_Format(PyExc_ValueError, "compile: device must be a CUDA device number, not %d", device);
    if (cuda_arch && (strncmp(cuda_arch, "sm_", 3) || strlen(cuda_arch) > 8))
        return PyErr_Format(PyExc_ValueError, "compile: cuda_arch must name an architecture such as 'sm_90', not '%s'",
                            cuda_arch);
    bool any_log = pyext_log_on(PYEXT_LOG_GRAPH) || pyext_log_on(PYEXT_LOG_OUTPUT_CODE) ||
                   pyext_log_on(PYEXT_LOG_ASM);
    uint64_t hash = any_log ? smelt_graph_hash(self->g) : 0;
    if (pyext_log_on(PYEXT_LOG_GRAPH))
        log_graph(self, hash);
    if (smelt_graph_verify(self->g, err, sizeof err))
        return PyErr_Format(PyExc_RuntimeError, "compile: %s", err);
    smelt_compile_opts opts = {
        .vector_bits = vector_bits,
        .opt_level = opt_level,
        .keep_ir = keep || pyext_log_on(PYEXT_LOG_OUTPUT_CODE) || pyext_log_on(PYEXT_LOG_ASM),
        .cpu = cpu,
        .cpu_features = cpu_features,
        .backend = backend,
        .cuda_arch = cuda_arch,
        .device = device,
    };
    smelt_plan *plan = smelt_compile(self->g, &opts, err, sizeof err);
    if (!plan)
        return PyErr_Format(PyExc_RuntimeError, "compile: %s", err);
    log_code(plan, PYEXT_LOG_OUTPUT_CODE, "kernels", hash);
    log_code(plan, PYEXT_LOG_OUTPUT_CODE, "ir", hash);
    log_code(plan, PYEXT_LOG_ASM, "asm", hash);
    return pyext_compiled_new(pyext_state_of((PyObject *)self), self->g, plan, self->calls);
}

/* ------------------------------------------------------------------ */
/* type                                                               */

/* The graph's default float dtype: torch.get_default_dtype() now. */
static int set_default_float(GraphObject *self)
{
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *dt = torch ? PyObject_CallMethod(torch, "get_default_dtype", NULL) : NULL;
    int d = dt ? pyext_dtype_from_py(pyext_state_of((PyObject *)self), dt, "default dtype") : -1;
    Py_XDECREF(dt);
    Py_XDECREF(torch);
    if (d < 0)
        return -1;
    self->g->default_float = (uint8_t)d;
    return 0;
}

static PyObject *graph_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw)))
        return PyErr_Format(PyExc_TypeError, "Graph() takes no arguments");
    GraphObject *self = (GraphObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->g = smelt_graph_new();
    self->calls = PyList_New(0);
    if (!self->g || !self->calls) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    if (set_default_float(self) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int graph_traverse(GraphObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->calls);
    return 0;
}

static int graph_clear(GraphObject *self)
{
    Py_CLEAR(self->calls);
    return 0;
}

static void graph_dealloc(GraphObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    graph_clear(self);
    smelt_graph_free(self->g);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyMethodDef graph_methods[] = {
    {"input", (PyCFunction)(void (*)(void))graph_input, METH_VARARGS | METH_KEYWORDS,
     "input(dtype, shape, strides=None) -> node id\n\nA graph input; strides in elements."},
    {"scalar", (PyCFunction)graph_scalar, METH_O,
     "scalar(value) -> node id\n\nA weak Python scalar (bool, int or float)."},
    {"op", (PyCFunction)(void (*)(void))graph_op, METH_VARARGS | METH_KEYWORDS,
     "op(name, *sources, **attrs) -> node id\n\nAn op from inductor/ops.def."},
    {"call", (PyCFunction)(void (*)(void))graph_call, METH_VARARGS | METH_KEYWORDS,
     "call(fn, srcs, args=(), kwargs=None) -> list of node ids\n\nA host call: at run time "
     "torch runs fn(*args, **kwargs) with each Slot(k) in args/kwargs (at any depth of "
     "tuples, lists and dict values) replaced by the tensor of node srcs[k] (1 to 8 "
     "sources). One node per result (a tensor, or a tuple/list of 1 to 8 tensors), "
     "dtypes and shapes inferred by calling fn on meta tensors; ValueError when that "
     "fails (no meta kernel, data-dependent shapes, unsupported results)."},
    {"output", (PyCFunction)graph_output, METH_VARARGS,
     "output(*nodes)\n\nAppends graph outputs (a node may repeat)."},
    {"dtype", (PyCFunction)graph_dtype, METH_O, "dtype(node) -> torch.dtype"},
    {"shape", (PyCFunction)graph_shape, METH_O, "shape(node) -> tuple"},
    {"hash", (PyCFunction)graph_hash, METH_NOARGS,
     "hash() -> int\n\n64-bit hash of the canonical serialisation."},
    {"serialize", (PyCFunction)graph_serialize, METH_NOARGS,
     "serialize() -> bytes\n\nCanonical little-endian serialisation."},
    {"verify", (PyCFunction)graph_verify, METH_NOARGS,
     "verify()\n\nChecks the IR invariants; RuntimeError if broken."},
    {"compile", (PyCFunction)(void (*)(void))graph_compile, METH_VARARGS | METH_KEYWORDS,
     "compile(vector_bits=0, opt_level=2, keep_code=False, *, cpu=None, cpu_features=None) -> Compiled\n\n"
     "cpu / cpu_features (an LLVM CPU name, 'host' for the host's, and LLVM feature changes such as "
     "'+avx2,-avx512f'): generate code for that target to read with code('ir'/'asm') only; the "
     "Compiled refuses to run (the host may lack its instructions). RuntimeError for an unknown CPU "
     "or feature."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot graph_slots[] = {
    {Py_tp_new, graph_new},
    {Py_tp_dealloc, graph_dealloc},
    {Py_tp_traverse, graph_traverse},
    {Py_tp_clear, graph_clear},
    {Py_tp_methods, graph_methods},
    {Py_tp_str, graph_str},
    {Py_tp_repr, graph_repr},
    {Py_sq_length, graph_len},
    {Py_tp_doc, "Graph()\n--\n\nA smelt graph IR under construction: input(), scalar(), "
                "op(), output(), then compile(). call(fn, srcs, args, kwargs) adds a host "
                "call: a torch op smelt has no graph op for, run by torch on the real "
                "tensors when the compiled plan reaches it (args/kwargs hold smelt._C.Slot(k) "
                "for source k)."},
    {0, NULL},
};

static PyType_Spec graph_spec = {
    .name = "smelt._C.Graph",
    .basicsize = sizeof(GraphObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = graph_slots,
};

int pyext_graph_type_init(PyObject *m, pyext_state *st)
{
    st->graph_type = PyType_FromModuleAndSpec(m, &graph_spec, NULL);
    if (!st->graph_type)
        return -1;
    return PyModule_AddObjectRef(m, "Graph", st->graph_type);
}
