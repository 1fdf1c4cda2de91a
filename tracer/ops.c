/* ops.c — torch calls, tensor methods, attributes and operators, mapped to
 * graph ops while tracing.
 *
 * One table lists every supported callable by name ("torch.exp",
 * "F.softmax", "T.view" for torch.Tensor.view, which is also the method
 * `x.view`); ops_init resolves the names to objects once. A handler reads
 * its arguments by position or keyword and builds graph nodes; composite
 * functions (softmax, layer_norm, gelu, linear, ...) expand into primitives
 * that the back end fuses again.
 */
#include "tstate.h"

#include <math.h>
#include <string.h>

static PyObject *tensor_type, *by_obj, *by_name, *torch_dtypes[SMELT_NDTYPES], *size_type;

PyObject *ops_tensor_type(void) { return tensor_type; }
int ops_is_tensor(PyObject *o) { return tensor_type && PyObject_TypeCheck(o, (PyTypeObject *)tensor_type); }

int ops_dtype_of(PyObject *dt)
{
    for (int i = 0; i < SMELT_NDTYPES; i++)
        if (torch_dtypes[i] == dt)
            return i;
    return -1;
}

/* ---------- argument helpers ---------- */

/* Argument number i or keyword `name`; -1 when absent. */
static int32_t arg(const call_args *a, int i, const char *name)
{
    if (i >= 0 && i < a->npos)
        return a->pos[i];
    for (int k = 0; name && k < a->nkw; k++)
        if (PyUnicode_CompareWithASCIIString(a->kwn[k], name) == 0)
            return a->kwv[k];
    return -1;
}

static int is_none(tracer *T, int32_t v)
{
    return v < 0 || (T->vals[v].kind == V_OBJ && T->vals[v].obj == Py_None);
}

static const smelt_node *node(tracer *T, int32_t v) { return &T->g->nodes[T->vals[v].node]; }

/* Graph node for value v: a tensor, or a Python number as a weak scalar. */
static int32_t gnode(tracer *T, int32_t v)
{
    if (v < 0)
        return tr_break(T, "missing tensor argument");
    tv *x = &T->vals[v];
    if (x->kind == V_TENSOR)
        return x->node;
    if (x->kind != V_OBJ)
        return tr_break(T, "expected a tensor or number");
    PyObject *o = tr_const(T, v);
    if (!o)
        return -1;
    int32_t id = -1;
    if (PyBool_Check(o))
        id = smelt_graph_scalar(T->g, SMELT_BOOL, 0, o == Py_True);
    else if (PyLong_Check(o))
        id = smelt_graph_scalar(T->g, SMELT_I64, 0, PyLong_AsLongLong(o));
    else if (PyFloat_Check(o))
        id = smelt_graph_scalar(T->g, SMELT_F64, PyFloat_AS_DOUBLE(o), 0);
    else
        return tr_break(T, "expected a tensor or number, got %s", Py_TYPE(o)->tp_name);
    return id < 0 ? tr_break(T, "%s", T->g->err) : id;
}

static int32_t mk(tracer *T, smelt_node *p)
{
    int32_t id = tr_node_add(T, p);
    return id < 0 ? -1 : tv_tensor(T, id);
}

static int32_t op1(tracer *T, smelt_op op, int32_t x)
{
    int32_t n = gnode(T, x);
    if (n < 0)
        return -1;
    smelt_node p = { .op = op, .nsrc = 1, .src = { n } };
    return mk(T, &p);
}

static int32_t op2(tracer *T, smelt_op op, int32_t x, int32_t y)
{
    int32_t a = gnode(T, x), b = a < 0 ? -1 : gnode(T, y);
    if (b < 0)
        return -1;
    smelt_node p = { .op = op, .nsrc = 2, .src = { a, b } };
    return mk(T, &p);
}

static int32_t num(tracer *T, double v)
{
    PyObject *o = PyFloat_FromDouble(v);
    int32_t r = o ? tv_obj(T, o, -1) : -1;
    Py_XDECREF(o);
    return r;
}

static int get_int(tracer *T, int32_t v, int64_t dflt, int64_t *out)
{
    if (is_none(T, v)) {
        *out = dflt;
        return 0;
    }
    return tr_int(T, v, out);
}

static int get_bool(tracer *T, int32_t v, int dflt, int *out)
{
    if (v < 0) {
        *out = dflt;
        return 0;
    }
    PyObject *o = tr_const(T, v);
    if (!o)
        return -1;
    *out = PyObject_IsTrue(o);
    return *out < 0 ? -1 : 0;
}

static double get_float(tracer *T, int32_t v, double dflt, int *err)
{
    if (is_none(T, v))
        return dflt;
    PyObject *o = tr_const(T, v);
    double d = o ? PyFloat_AsDouble(o) : -1;
    *err = !o || PyErr_Occurred();
    return d;
}

static int norm_dim(tracer *T, int64_t d, int ndim, int *out)
{
    int n = ndim ? ndim : 1;
    *out = 0;
    if (d < -n || d >= n)
        return tr_break(T, "dim %lld out of range for %d-d tensor", (long long)d, ndim);
    *out = (int)(d < 0 ? d + n : d);
    return 0;
}

/* Integers from value v: an int, or a tuple/list/torch.Size of ints; or
 * from the positional args a->pos[from..] (x.view(2, 3)). */
static int int_list(tracer *T, const call_args *a, int from, const char *kw, int64_t *out, int *n)
{
    int32_t v = arg(a, from, kw);
    if (v < 0)
        return tr_break(T, "missing sizes");
    tv *x = &T->vals[v];
    if (x->kind == V_TUPLE || x->kind == V_LIST) {
        *n = x->n;
        for (int i = 0; i < x->n && i < SMELT_MAX_DIMS; i++)
            if (tr_int(T, x->items[i], &out[i]))
                return -1;
        return x->n > SMELT_MAX_DIMS ? tr_break(T, "too many dims") : 0;
    }
    PyObject *o = tr_const(T, v);
    if (!o)
        return -1;
    if (PyTuple_Check(o) || PyList_Check(o)) {
        *n = (int)PySequence_Size(o);
        for (int i = 0; i < *n && i < SMELT_MAX_DIMS; i++) {
            PyObject *it = PySequence_GetItem(o, i);
            out[i] = it ? PyLong_AsLongLong(it) : -1;
            Py_XDECREF(it);
        }
        return PyErr_Occurred() ? -1 : 0;
    }
    int k = 0;
    for (int i = from; i < a->npos && k < SMELT_MAX_DIMS; i++)
        if (tr_int(T, a->pos[i], &out[k++]))
            return -1;
    *n = k;
    return 0;
}

/* ---------- view helpers ---------- */

static int32_t v_permute(tracer *T, int32_t x, const int *perm)
{
    int32_t n = gnode(T, x);
    if (n < 0)
        return -1;
    smelt_node p = { .op = SMELT_OP_PERMUTE, .nsrc = 1, .src = { n } };
    for (int d = 0; d < T->g->nodes[n].ndim; d++)
        p.a.perm.perm[d] = (int8_t)perm[d];
    return mk(T, &p);
}

static int32_t v_transpose(tracer *T, int32_t x, int d0, int d1)
{
    int nd = node(T, x)->ndim, perm[SMELT_MAX_DIMS];
    if (norm_dim(T, d0, nd, &d0) || norm_dim(T, d1, nd, &d1))
        return -1;
    for (int d = 0; d < nd; d++)
        perm[d] = d;
    perm[d0] = d1;
    perm[d1] = d0;
    return nd < 2 && d0 == d1 ? x : v_permute(T, x, perm);
}

static int32_t v_reshape(tracer *T, int32_t x, const int64_t *shape, int n)
{
    smelt_node p = { .op = SMELT_OP_RESHAPE, .nsrc = 1, .src = { T->vals[x].node }, .ndim = (uint8_t)n };
    memcpy(p.shape, shape, sizeof(int64_t) * (size_t)n);
    return mk(T, &p);
}

static int32_t v_axis(tracer *T, smelt_op op, int32_t x, int dim)
{
    smelt_node p = { .op = op, .nsrc = 1, .src = { T->vals[x].node } };
    p.a.axis.dim = dim;
    return mk(T, &p);
}

static int32_t v_slice(tracer *T, int32_t x, int dim, int64_t start, int64_t end, int64_t step)
{
    smelt_node p = { .op = SMELT_OP_SLICE, .nsrc = 1, .src = { T->vals[x].node } };
    p.a.slice.dim = dim;
    p.a.slice.start = start;
    p.a.slice.end = end;
    p.a.slice.step = step;
    return mk(T, &p);
}

static int32_t red(tracer *T, smelt_op op, int32_t x, uint32_t dims, int keepdim, int64_t corr)
{
    smelt_node p = { .op = op, .nsrc = 1, .src = { T->vals[x].node } };
    p.a.red.dims = dims;
    p.a.red.keepdim = (uint8_t)keepdim;
    p.a.red.correction = corr;
    return mk(T, &p);
}

/* dims argument: None (all), an int, or a tuple/list of ints. */
static int dims_mask(tracer *T, int32_t v, int ndim, uint32_t *mask)
{
    *mask = 0;
    if (is_none(T, v)) {
        for (int d = 0; d < ndim; d++)
            *mask |= 1u << d;
        return 0;
    }
    int64_t ds[SMELT_MAX_DIMS];
    int n = 1;
    tv *x = &T->vals[v];
    if (x->kind == V_TUPLE || x->kind == V_LIST) {
        n = x->n;
        for (int i = 0; i < n && i < SMELT_MAX_DIMS; i++)
            if (tr_int(T, x->items[i], &ds[i]))
                return -1;
    } else if (tr_int(T, v, &ds[0])) {
        return -1;
    }
    for (int i = 0; i < n && i < SMELT_MAX_DIMS; i++) {
        int d;
        if (norm_dim(T, ds[i], ndim, &d))
            return -1;
        *mask |= 1u << d;
    }
    return 0;
}

/* ---------- handlers ---------- */

typedef int32_t (*op_fn)(tracer *T, const call_args *a, smelt_op op);

static int32_t h_unary(tracer *T, const call_args *a, smelt_op op) { return op1(T, op, arg(a, 0, "input")); }

static int32_t h_binary(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), y = arg(a, 1, "other");
    if (y < 0)
        y = arg(a, 1, "exponent");
    if (x < 0 || y < 0)
        return tr_break(T, "%s: missing operand", smelt_op_name(op));
    int32_t alpha = arg(a, 2, "alpha");
    if (!is_none(T, alpha) && (op == SMELT_OP_ADD || op == SMELT_OP_SUB))
        y = op2(T, SMELT_OP_MUL, y, alpha);
    if (op == SMELT_OP_DIV) {
        int32_t rm = arg(a, 2, "rounding_mode");
        PyObject *m = is_none(T, rm) ? Py_None : tr_const(T, rm);
        if (!m)
            return -1;
        if (m != Py_None && PyUnicode_CompareWithASCIIString(m, "floor") == 0)
            op = SMELT_OP_FLOORDIV;
        else if (m != Py_None) {
            int32_t q = op2(T, SMELT_OP_DIV, x, y);
            return q < 0 ? -1 : op1(T, SMELT_OP_TRUNC, q);
        }
    }
    return op2(T, op, x, y);
}

static int32_t h_reduce(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), dim = arg(a, 1, "dim"), kd = arg(a, 2, "keepdim");
    if (dim < 0)
        dim = arg(a, -1, "axis");
    if (!is_none(T, arg(a, -1, "dtype")))
        return tr_break(T, "%s with dtype=", smelt_op_name(op));
    uint32_t mask;
    int keep;
    if (T->vals[x].kind != V_TENSOR || dims_mask(T, dim, node(T, x)->ndim, &mask) || get_bool(T, kd, 0, &keep))
        return T->vals[x].kind != V_TENSOR ? tr_break(T, "reduction of a non-tensor") : -1;
    return red(T, op, x, mask, keep, 0);
}

/* torch.max / torch.min: all elements, a dim (values, indices), or two tensors. */
static int32_t h_minmax(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), d = arg(a, 1, "dim");
    int is_max = op == SMELT_OP_AMAX;
    if (d >= 0 && T->vals[d].kind == V_TENSOR)
        return op2(T, is_max ? SMELT_OP_MAXIMUM : SMELT_OP_MINIMUM, x, d);
    if (is_none(T, d))
        return h_reduce(T, a, op);
    int keep;
    uint32_t mask;
    if (dims_mask(T, d, node(T, x)->ndim, &mask) || get_bool(T, arg(a, 2, "keepdim"), 0, &keep))
        return -1;
    int32_t vals = red(T, op, x, mask, keep, 0);
    int32_t idx = vals < 0 ? -1 : red(T, is_max ? SMELT_OP_ARGMAX : SMELT_OP_ARGMIN, x, mask, keep, 0);
    int32_t items[2] = { vals, idx };
    int32_t t = idx < 0 ? -1 : tv_tuple(T, items, 2);
    PyObject *rt = t < 0 ? NULL : PyImport_ImportModule("torch.return_types");
    PyObject *ty = rt ? PyObject_GetAttrString(rt, is_max ? "max" : "min") : NULL;
    Py_XDECREF(rt);
    if (!ty || tr_keep(T, ty)) {   /* values/indices named tuple, like torch */
        Py_XDECREF(ty);
        return -1;
    }
    T->vals[t].obj = ty;
    Py_DECREF(ty);
    return t;
}

static int32_t h_var(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), dim = arg(a, 1, "dim");
    int32_t unb = arg(a, -1, "unbiased"), corr = arg(a, -1, "correction"), kd = arg(a, -1, "keepdim");
    if (dim >= 0 && T->vals[dim].kind == V_OBJ && PyBool_Check(T->vals[dim].obj)) {
        unb = dim;   /* x.var(False): the legacy unbiased flag */
        dim = -1;
    }
    if (kd < 0 && a->npos > 2)
        kd = a->pos[a->npos - 1];
    int64_t c = 1;
    int u, keep;
    uint32_t mask;
    if (get_bool(T, unb, 1, &u) || get_int(T, corr, u ? 1 : 0, &c) || get_bool(T, kd, 0, &keep) ||
        dims_mask(T, dim, node(T, x)->ndim, &mask))
        return -1;
    return red(T, op, x, mask, keep, c);
}

static int32_t h_softmax(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), dv = arg(a, 1, "dim");
    int64_t d;
    int dim;
    if (!is_none(T, arg(a, -1, "dtype")))
        return tr_break(T, "softmax with dtype=");
    if (T->vals[x].kind != V_TENSOR || tr_int(T, dv, &d) || norm_dim(T, d, node(T, x)->ndim, &dim))
        return -1;
    uint32_t m = node(T, x)->ndim ? 1u << dim : 0;
    int32_t mx = red(T, SMELT_OP_AMAX, x, m, 1, 0);
    int32_t sh = mx < 0 ? -1 : op2(T, SMELT_OP_SUB, x, mx);
    int32_t e = sh < 0 ? -1 : op1(T, SMELT_OP_EXP, sh);
    int32_t s = e < 0 ? -1 : red(T, SMELT_OP_SUM, e, m, 1, 0);
    if (s < 0)
        return -1;
    if (op == SMELT_OP_LOG)   /* log_softmax */
        return op2(T, SMELT_OP_SUB, sh, op1(T, SMELT_OP_LOG, s));
    return op2(T, SMELT_OP_DIV, e, s);
}

static int norm_shape_dims(tracer *T, const call_args *a, int32_t x, uint32_t *mask)
{
    int64_t shp[SMELT_MAX_DIMS];
    int n, nd = node(T, x)->ndim;
    if (int_list(T, a, 1, "normalized_shape", shp, &n))
        return -1;
    *mask = 0;
    for (int i = 0; i < n; i++) {
        if (n > nd || node(T, x)->shape[nd - n + i] != shp[i])
            return tr_break(T, "normalized_shape does not match the input");
        *mask |= 1u << (nd - n + i);
    }
    return 0;
}

static int32_t affine(tracer *T, int32_t y, int32_t w, int32_t b)
{
    if (y >= 0 && !is_none(T, w))
        y = op2(T, SMELT_OP_MUL, y, w);
    if (y >= 0 && !is_none(T, b))
        y = op2(T, SMELT_OP_ADD, y, b);
    return y;
}

static int32_t h_layer_norm(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int err = 0;
    uint32_t m;
    double eps = get_float(T, arg(a, 4, "eps"), 1e-5, &err);
    (void)op;
    if (err || T->vals[x].kind != V_TENSOR || norm_shape_dims(T, a, x, &m))
        return -1;
    int32_t mu = red(T, SMELT_OP_MEAN, x, m, 1, 0);
    int32_t xc = mu < 0 ? -1 : op2(T, SMELT_OP_SUB, x, mu);
    int32_t var = xc < 0 ? -1 : red(T, SMELT_OP_MEAN, op2(T, SMELT_OP_MUL, xc, xc), m, 1, 0);
    int32_t r = var < 0 ? -1 : op1(T, SMELT_OP_RSQRT, op2(T, SMELT_OP_ADD, var, num(T, eps)));
    return r < 0 ? -1 : affine(T, op2(T, SMELT_OP_MUL, xc, r), arg(a, 2, "weight"), arg(a, 3, "bias"));
}

static int32_t h_rms_norm(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int err = 0;
    uint32_t m;
    (void)op;
    if (T->vals[x].kind != V_TENSOR || norm_shape_dims(T, a, x, &m))
        return -1;
    smelt_dtype dt = node(T, x)->dtype;
    double dflt = dt == SMELT_F64 ? 2.220446049250313e-16 : dt == SMELT_F16 ? 0.0009765625
                : dt == SMELT_BF16 ? 0.0078125 : 1.1920928955078125e-07;
    double eps = get_float(T, arg(a, 3, "eps"), dflt, &err);
    if (err)
        return -1;
    int32_t ms = red(T, SMELT_OP_MEAN, op2(T, SMELT_OP_MUL, x, x), m, 1, 0);
    int32_t r = ms < 0 ? -1 : op1(T, SMELT_OP_RSQRT, op2(T, SMELT_OP_ADD, ms, num(T, eps)));
    return r < 0 ? -1 : affine(T, op2(T, SMELT_OP_MUL, x, r), arg(a, 2, "weight"), -1);
}

/* matmul with torch's 1-d rules: a 1-d operand gains a dim that is dropped
 * from the result. */
static int32_t matmul(tracer *T, int32_t x, int32_t y)
{
    if (T->vals[x].kind != V_TENSOR || T->vals[y].kind != V_TENSOR)
        return tr_break(T, "matmul of a non-tensor");
    int xd = node(T, x)->ndim, yd = node(T, y)->ndim;
    if (!xd || !yd)
        return tr_break(T, "matmul of a 0-d tensor");
    int32_t a = xd == 1 ? v_axis(T, SMELT_OP_UNSQUEEZE, x, 0) : x;
    int32_t b = yd == 1 ? v_axis(T, SMELT_OP_UNSQUEEZE, y, 1) : y;
    int32_t r = (a < 0 || b < 0) ? -1 : op2(T, SMELT_OP_MATMUL, a, b);
    if (r >= 0 && yd == 1)
        r = v_axis(T, SMELT_OP_SQUEEZE, r, node(T, r)->ndim - 1);
    if (r >= 0 && xd == 1)
        r = v_axis(T, SMELT_OP_SQUEEZE, r, node(T, r)->ndim - (yd == 1 ? 1 : 2));
    return r;
}

static int32_t h_matmul(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    return matmul(T, arg(a, 0, "input"), arg(a, 1, "other") >= 0 ? arg(a, 1, "other") : arg(a, 1, "mat2"));
}

static int32_t h_linear(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), w = arg(a, 1, "weight"), b = arg(a, 2, "bias");
    (void)op;
    if (w < 0 || T->vals[w].kind != V_TENSOR)
        return tr_break(T, "linear without a weight tensor");
    int32_t wt = node(T, w)->ndim == 2 ? v_transpose(T, w, 0, 1) : w;
    int32_t y = wt < 0 ? -1 : matmul(T, x, wt);
    return (y < 0 || is_none(T, b)) ? y : op2(T, SMELT_OP_ADD, y, b);
}

static int32_t h_gelu(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), ap = arg(a, 1, "approximate");
    PyObject *m = is_none(T, ap) ? NULL : tr_const(T, ap);
    (void)op;
    if (!is_none(T, ap) && !m)
        return -1;
    int32_t inner;
    if (m && PyUnicode_CompareWithASCIIString(m, "tanh") == 0) {
        int32_t x3 = op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_MUL, x, x), x);
        int32_t u = op2(T, SMELT_OP_ADD, x, op2(T, SMELT_OP_MUL, x3, num(T, 0.044715)));
        inner = op1(T, SMELT_OP_TANH, op2(T, SMELT_OP_MUL, u, num(T, sqrt(2.0 / M_PI))));
    } else {
        inner = op1(T, SMELT_OP_ERF, op2(T, SMELT_OP_MUL, x, num(T, M_SQRT1_2)));
    }
    if (inner < 0)
        return -1;
    int32_t half = op2(T, SMELT_OP_MUL, x, num(T, 0.5));
    return op2(T, SMELT_OP_MUL, half, op2(T, SMELT_OP_ADD, inner, num(T, 1.0)));
}

static int32_t h_silu(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    (void)op;
    return op2(T, SMELT_OP_MUL, x, op1(T, SMELT_OP_SIGMOID, x));
}

static int32_t h_dropout(tracer *T, const call_args *a, smelt_op op)
{
    int train;
    int err = 0;
    double p = get_float(T, arg(a, 1, "p"), 0.5, &err);
    (void)op;
    if (err || get_bool(T, arg(a, 2, "training"), 1, &train))
        return -1;
    if (train && p > 0)
        return tr_break(T, "dropout in training mode (random numbers) is not supported yet");
    return arg(a, 0, "input");
}

static int32_t h_identity(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    int32_t x = arg(a, 0, "input");
    return T->vals[x].kind == V_TENSOR ? x : tr_break(T, "identity of a non-tensor");
}

static int32_t h_view(tracer *T, const call_args *a, smelt_op op)
{
    int64_t shape[SMELT_MAX_DIMS];
    int n;
    int32_t x = a->pos[0];
    (void)op;
    if (T->vals[x].kind != V_TENSOR || int_list(T, a, 1, "shape", shape, &n))
        return -1;
    return v_reshape(T, x, shape, n);
}

static int32_t h_permute(tracer *T, const call_args *a, smelt_op op)
{
    int64_t d[SMELT_MAX_DIMS];
    int n, perm[SMELT_MAX_DIMS];
    int32_t x = a->pos[0];
    (void)op;
    if (int_list(T, a, 1, "dims", d, &n))
        return -1;
    if (n != node(T, x)->ndim)
        return tr_break(T, "permute: %d dims for a %d-d tensor", n, node(T, x)->ndim);
    for (int i = 0; i < n; i++)
        if (norm_dim(T, d[i], n, &perm[i]))
            return -1;
    return v_permute(T, x, perm);
}

static int32_t h_transpose(tracer *T, const call_args *a, smelt_op op)
{
    int64_t d0, d1;
    (void)op;
    if (tr_int(T, arg(a, 1, "dim0"), &d0) || tr_int(T, arg(a, 2, "dim1"), &d1))
        return -1;
    return v_transpose(T, arg(a, 0, "input"), (int)d0, (int)d1);
}

static int32_t h_t(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    int32_t x = arg(a, 0, "input");
    return node(T, x)->ndim < 2 ? x : v_transpose(T, x, 0, 1);
}

static int32_t h_unsqueeze(tracer *T, const call_args *a, smelt_op op)
{
    int64_t d;
    int dim;
    int32_t x = arg(a, 0, "input");
    (void)op;
    if (tr_int(T, arg(a, 1, "dim"), &d) || norm_dim(T, d, node(T, x)->ndim + 1, &dim))
        return -1;
    return v_axis(T, SMELT_OP_UNSQUEEZE, x, dim);
}

static int32_t h_squeeze(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), dv = arg(a, 1, "dim");
    (void)op;
    if (!is_none(T, dv)) {
        int64_t d;
        int dim;
        if (tr_int(T, dv, &d) || norm_dim(T, d, node(T, x)->ndim, &dim))
            return -1;
        return node(T, x)->shape[dim] == 1 ? v_axis(T, SMELT_OP_SQUEEZE, x, dim) : x;
    }
    for (int d = node(T, x)->ndim - 1; x >= 0 && d >= 0; d--)
        if (node(T, x)->shape[d] == 1)
            x = v_axis(T, SMELT_OP_SQUEEZE, x, d);
    return x;
}

static int32_t h_flatten(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t s, e;
    int nd = node(T, x)->ndim, st, en;
    (void)op;
    if (get_int(T, arg(a, 1, "start_dim"), 0, &s) || get_int(T, arg(a, 2, "end_dim"), -1, &e))
        return -1;
    if (!nd)
        return v_reshape(T, x, (int64_t[]){ 1 }, 1);
    if (norm_dim(T, s, nd, &st) || norm_dim(T, e, nd, &en))
        return -1;
    int64_t shape[SMELT_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < nd; d++) {
        if (d > st && d <= en)
            shape[n - 1] *= node(T, x)->shape[d];
        else
            shape[n++] = node(T, x)->shape[d];
    }
    return v_reshape(T, x, shape, n);
}

static int32_t h_expand(tracer *T, const call_args *a, smelt_op op)
{
    int64_t shape[SMELT_MAX_DIMS];
    int n;
    int32_t x = a->pos[0];
    (void)op;
    if (int_list(T, a, 1, "size", shape, &n))
        return -1;
    smelt_node p = { .op = SMELT_OP_EXPAND, .nsrc = 1, .src = { T->vals[x].node }, .ndim = (uint8_t)n };
    memcpy(p.shape, shape, sizeof(int64_t) * (size_t)n);
    return mk(T, &p);
}

static int32_t h_expand_as(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = a->pos[0], o = arg(a, 1, "other");
    (void)op;
    smelt_node p = { .op = SMELT_OP_EXPAND, .nsrc = 1, .src = { T->vals[x].node }, .ndim = node(T, o)->ndim };
    memcpy(p.shape, node(T, o)->shape, sizeof p.shape);
    return mk(T, &p);
}

static int32_t int_value(tracer *T, int64_t v)
{
    PyObject *o = PyLong_FromLongLong(v);
    int32_t r = o ? tv_obj(T, o, -1) : -1;
    Py_XDECREF(o);
    return r;
}

static int32_t shape_tuple(tracer *T, int32_t x)
{
    int32_t items[SMELT_MAX_DIMS];
    for (int d = 0; d < node(T, x)->ndim; d++)
        if ((items[d] = int_value(T, node(T, x)->shape[d])) < 0)
            return -1;
    return tv_tuple(T, items, node(T, x)->ndim);
}

static int32_t h_size(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = a->pos[0], dv = arg(a, 1, "dim");
    (void)op;
    if (is_none(T, dv))
        return shape_tuple(T, x);
    int64_t d;
    int dim;
    if (tr_int(T, dv, &d) || norm_dim(T, d, node(T, x)->ndim, &dim))
        return -1;
    return int_value(T, node(T, x)->shape[dim]);
}

static int32_t h_dim(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    return int_value(T, node(T, a->pos[0])->ndim);
}

static int32_t h_numel(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    return int_value(T, smelt_node_numel(node(T, a->pos[0])));
}

static int seq_items(tracer *T, int32_t v, int32_t **items, int *n)
{
    tv *x = &T->vals[v];
    *items = NULL;
    *n = 0;
    if (x->kind != V_TUPLE && x->kind != V_LIST)
        return tr_break(T, "expected a sequence of tensors");
    *items = x->items;
    *n = x->n;
    return 0;
}

/* cat of any number of sources: chained CAT nodes of <= SMELT_MAX_SRC. */
static int32_t cat_nodes(tracer *T, const int32_t *nodes, int n, int dim)
{
    int32_t acc = -1;
    for (int i = 0; i < n;) {
        smelt_node p = { .op = SMELT_OP_CAT };
        if (acc >= 0)
            p.src[p.nsrc++] = T->vals[acc].node;
        while (i < n && p.nsrc < SMELT_MAX_SRC)
            p.src[p.nsrc++] = nodes[i++];
        p.a.axis.dim = dim;
        if ((acc = mk(T, &p)) < 0)
            return -1;
    }
    return acc;
}

static int32_t h_cat(tracer *T, const call_args *a, smelt_op op)
{
    int32_t *items, nodes[256];
    int n;
    int64_t d;
    int dim;
    if (seq_items(T, arg(a, 0, "tensors"), &items, &n) || get_int(T, arg(a, 1, "dim"), 0, &d))
        return -1;
    if (n == 0 || n > 256)
        return tr_break(T, "cat of %d tensors", n);
    int nd = T->vals[items[0]].kind == V_TENSOR ? node(T, items[0])->ndim : 0;
    if (norm_dim(T, d, op == SMELT_OP_UNSQUEEZE ? nd + 1 : nd, &dim))
        return -1;
    for (int i = 0; i < n; i++) {
        int32_t v = items[i];
        if (T->vals[v].kind != V_TENSOR)
            return tr_break(T, "cat of a non-tensor");
        if (op == SMELT_OP_UNSQUEEZE && (v = v_axis(T, SMELT_OP_UNSQUEEZE, v, dim)) < 0)   /* stack */
            return -1;
        nodes[i] = T->vals[v].node;
    }
    return cat_nodes(T, nodes, n, dim);
}

static int32_t h_where(tracer *T, const call_args *a, smelt_op op)
{
    int32_t c = gnode(T, arg(a, 0, "condition"));
    int32_t x = c < 0 ? -1 : gnode(T, arg(a, 1, "input"));
    int32_t y = x < 0 ? -1 : gnode(T, arg(a, 2, "other"));
    (void)op;
    if (y < 0)
        return -1;
    smelt_node p = { .op = SMELT_OP_WHERE, .nsrc = 3, .src = { c, x, y } };
    return mk(T, &p);
}

static int32_t cast_to(tracer *T, int32_t x, int dt)
{
    if (node(T, x)->dtype == dt)
        return x;
    smelt_node p = { .op = SMELT_OP_CAST, .nsrc = 1, .src = { T->vals[x].node }, .dtype = (uint8_t)dt };
    return mk(T, &p);
}

static int32_t h_masked_fill(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = a->pos[0], m = arg(a, 1, "mask"), v = arg(a, 2, "value");
    if (m < 0 || v < 0 || T->vals[x].kind != V_TENSOR)
        return tr_break(T, "masked_fill arguments");
    smelt_dtype xd = node(T, x)->dtype;
    if (T->vals[v].kind == V_TENSOR) {
        if ((v = cast_to(T, v, xd)) < 0)
            return -1;
    } else {
        PyObject *o = tr_const(T, v);
        if (!o)
            return -1;
        if (PyFloat_Check(o) && !smelt_dtype_is_float(xd))
            return tr_break(T, "masked_fill of an integer tensor with a float");
    }
    call_args w = { .pos = (int32_t[]){ m, v, x }, .npos = 3 };
    return h_where(T, &w, op);
}

static int32_t clamp_to(tracer *T, int32_t x, int32_t lo, int32_t hi)
{
    int tensor_bound = (lo >= 0 && T->vals[lo].kind == V_TENSOR) || (hi >= 0 && T->vals[hi].kind == V_TENSOR);
    if (tensor_bound) {
        if (!is_none(T, lo))
            x = op2(T, SMELT_OP_MAXIMUM, x, lo);
        if (x >= 0 && !is_none(T, hi))
            x = op2(T, SMELT_OP_MINIMUM, x, hi);
        return x;
    }
    smelt_node p = { .op = SMELT_OP_CLAMP, .nsrc = 1, .src = { gnode(T, x) }, .dtype = SMELT_I64 };
    int32_t b[2] = { lo, hi };
    for (int i = 0; i < 2; i++) {
        if (is_none(T, b[i]))
            continue;
        PyObject *o = tr_const(T, b[i]);
        if (!o)
            return -1;
        int fl = PyFloat_Check(o);
        if (fl)
            p.dtype = SMELT_F64;
        double f = PyFloat_AsDouble(o);
        int64_t iv = fl ? (int64_t)f : PyLong_AsLongLong(o);
        if (PyErr_Occurred())
            return -1;
        if (i == 0) {
            p.a.clamp.has_lo = 1;
            p.a.clamp.flo = f;
            p.a.clamp.ilo = iv;
        } else {
            p.a.clamp.has_hi = 1;
            p.a.clamp.fhi = f;
            p.a.clamp.ihi = iv;
        }
    }
    if (!p.a.clamp.has_lo && !p.a.clamp.has_hi)
        return x;
    return mk(T, &p);
}

static int32_t h_clamp(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    if (op == SMELT_OP_MAXIMUM)   /* clamp_min */
        return clamp_to(T, x, arg(a, 1, "min"), -1);
    if (op == SMELT_OP_MINIMUM)   /* clamp_max */
        return clamp_to(T, x, -1, arg(a, 1, "max"));
    return clamp_to(T, x, arg(a, 1, "min"), arg(a, 2, "max"));
}


/* x.to(dtype) / x.to(device) / x.to(other) / x.float() ...: `op` carries
 * the target for the fixed-dtype methods (as SMELT_OP_* + 1000 encoding). */
static int32_t h_to(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = a->pos[0];
    if ((int)op >= 1000)
        return cast_to(T, x, (int)op - 1000);
    for (int i = 1; i < a->npos + a->nkw; i++) {
        int32_t v = i < a->npos ? a->pos[i] : a->kwv[i - a->npos];
        if (i >= a->npos && PyUnicode_CompareWithASCIIString(a->kwn[i - a->npos], "dtype") &&
            PyUnicode_CompareWithASCIIString(a->kwn[i - a->npos], "device"))
            continue;
        if (T->vals[v].kind == V_TENSOR)
            return cast_to(T, x, node(T, v)->dtype);
        PyObject *o = tr_const(T, v);
        if (!o)
            return -1;
        int dt = ops_dtype_of(o);
        if (dt >= 0) {
            x = cast_to(T, x, dt);
            continue;
        }
        PyObject *s = PyObject_Str(o);
        int cpu = s && PyUnicode_CompareWithASCIIString(s, "cpu") == 0;
        Py_XDECREF(s);
        if (!cpu)
            return tr_break(T, ".to(%R) is not supported", o);
    }
    return x;
}

static int32_t h_type_as(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    return cast_to(T, a->pos[0], node(T, arg(a, 1, "other"))->dtype);
}

static int dtype_arg(tracer *T, const call_args *a, int dflt)
{
    int32_t v = arg(a, -1, "dtype");
    if (is_none(T, v))
        return dflt;
    PyObject *o = tr_const(T, v);
    int dt = o ? ops_dtype_of(o) : -1;
    return dt < 0 ? (o ? tr_break(T, "unsupported dtype %R", o) : -1) : dt;
}

/* torch.zeros/ones/full (op: value encoded: ZEROS=ADD, ONES=MUL, FULL=CLAMP)
 * and the *_like forms (op + 100). */
static int32_t h_full(tracer *T, const call_args *a, smelt_op op)
{
    int like = (int)op >= 100;
    int kind = like ? (int)op - 100 : (int)op;
    smelt_node p = { .op = SMELT_OP_FULL };
    int32_t valv = -1;
    if (like) {
        int32_t x = arg(a, 0, "input");
        if (T->vals[x].kind != V_TENSOR)
            return tr_break(T, "*_like of a non-tensor");
        p.ndim = node(T, x)->ndim;
        memcpy(p.shape, node(T, x)->shape, sizeof p.shape);
        p.dtype = (uint8_t)node(T, x)->dtype;
        valv = kind == SMELT_OP_CLAMP ? arg(a, 1, "fill_value") : -1;
    } else {
        int n;
        int64_t shape[SMELT_MAX_DIMS];
        if (int_list(T, a, 0, "size", shape, &n))
            return -1;
        if (kind == SMELT_OP_CLAMP)   /* full(size, value): size is a sequence */
            valv = arg(a, 1, "fill_value");
        p.ndim = (uint8_t)n;
        memcpy(p.shape, shape, sizeof(int64_t) * (size_t)n);
        p.dtype = SMELT_F32;
    }
    double f = kind == SMELT_OP_MUL ? 1.0 : 0.0;
    int64_t iv = (int64_t)f;
    if (valv >= 0) {
        PyObject *o = tr_const(T, valv);
        if (!o)
            return -1;
        f = PyFloat_AsDouble(o);
        iv = PyLong_Check(o) ? PyLong_AsLongLong(o) : (int64_t)f;
        if (PyErr_Occurred())
            return -1;
        if (!like && PyLong_Check(o) && !PyBool_Check(o))
            p.dtype = SMELT_I64;
        if (!like && PyBool_Check(o))
            p.dtype = SMELT_BOOL;
    }
    int dt = dtype_arg(T, a, p.dtype);
    if (dt < 0)
        return -1;
    p.dtype = (uint8_t)dt;
    p.a.scalar.f = f;
    p.a.scalar.i = iv;
    return mk(T, &p);
}

/* Bool [R, C] mask: col - row <= k (lower) or >= k (upper). */
static int32_t tri_mask(tracer *T, int64_t R, int64_t C, int64_t k, int lower)
{
    smelt_node r = { .op = SMELT_OP_IOTA, .dtype = SMELT_I64, .ndim = 2, .shape = { R, C } };
    smelt_node c = r;
    r.a.axis.dim = 0;
    c.a.axis.dim = 1;
    int32_t ri = mk(T, &r), ci = ri < 0 ? -1 : mk(T, &c);
    int32_t diff = ci < 0 ? -1 : op2(T, SMELT_OP_SUB, ci, ri);
    return diff < 0 ? -1 : op2(T, lower ? SMELT_OP_LE : SMELT_OP_GE, diff, int_value(T, k));
}

static int32_t h_tri(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t k;
    if (T->vals[x].kind != V_TENSOR || node(T, x)->ndim < 2)
        return tr_break(T, "tril/triu of a non-tensor or < 2-d tensor");
    if (get_int(T, arg(a, 1, "diagonal"), 0, &k))
        return -1;
    const smelt_node *n = node(T, x);
    int32_t keep = tri_mask(T, n->shape[n->ndim - 2], n->shape[n->ndim - 1], k, op == SMELT_OP_LE);
    int32_t zero = keep < 0 ? -1 : int_value(T, 0);
    if (zero < 0)
        return -1;
    call_args w = { .pos = (int32_t[]){ keep, x, zero }, .npos = 3 };
    return h_where(T, &w, op);
}

static int32_t h_split(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t sz, d;
    int dim;
    if (tr_int(T, arg(a, 1, op == SMELT_OP_DIV ? "chunks" : "split_size_or_sections"), &sz) ||
        get_int(T, arg(a, 2, "dim"), 0, &d) || norm_dim(T, d, node(T, x)->ndim, &dim))
        return -1;
    int64_t len = node(T, x)->shape[dim];
    if (op == SMELT_OP_DIV)   /* chunk: sz chunks of ceil(len/sz) */
        sz = sz > 0 ? (len + sz - 1) / sz : 0;
    if (sz <= 0 || (len + sz - 1) / sz > 256)
        return tr_break(T, "split into too many pieces");
    int32_t items[256];
    int n = 0;
    for (int64_t s = 0; s < len; s += sz)
        if ((items[n++] = v_slice(T, x, dim, s, s + sz < len ? s + sz : len, 1)) < 0)
            return -1;
    return tv_tuple(T, items, n);
}

static int32_t h_sdpa(tracer *T, const call_args *a, smelt_op op)
{
    int32_t q = arg(a, 0, "query"), k = arg(a, 1, "key"), v = arg(a, 2, "value");
    int32_t mask = arg(a, 3, "attn_mask");
    int causal;
    int err = 0;
    double dp = get_float(T, arg(a, 4, "dropout_p"), 0.0, &err);
    (void)op;
    if (err || get_bool(T, arg(a, 5, "is_causal"), 0, &causal))
        return -1;
    if (dp > 0)
        return tr_break(T, "attention dropout is not supported yet");
    if (!is_none(T, arg(a, -1, "enable_gqa")) || node(T, q)->ndim < 2)
        return tr_break(T, "sdpa form not supported yet");
    int64_t E = node(T, q)->shape[node(T, q)->ndim - 1];
    double scale = get_float(T, arg(a, -1, "scale"), 1.0 / sqrt((double)E), &err);
    if (err)
        return -1;
    int nd = node(T, k)->ndim;
    int32_t s = matmul(T, q, v_transpose(T, k, nd - 2, nd - 1));
    s = s < 0 ? -1 : op2(T, SMELT_OP_MUL, s, num(T, scale));
    if (s >= 0 && (causal || !is_none(T, mask))) {
        int32_t m = mask;
        if (causal) {   /* attend where key index <= query index */
            int64_t L = node(T, q)->shape[node(T, q)->ndim - 2], S = node(T, k)->shape[nd - 2];
            m = tri_mask(T, L, S, 0, 1);
        }
        if (m < 0)
            return -1;
        if (node(T, m)->dtype == SMELT_BOOL) {
            int32_t ninf = num(T, -INFINITY);
            call_args w = { .pos = (int32_t[]){ m, s, ninf }, .npos = 3 };
            s = h_where(T, &w, op);
        } else {
            s = op2(T, SMELT_OP_ADD, s, m);
        }
    }
    if (s < 0)
        return -1;
    int32_t dimv = int_value(T, -1);
    call_args sm = { .pos = (int32_t[]){ s, dimv }, .npos = 2 };
    int32_t p = h_softmax(T, &sm, SMELT_OP_EXP);
    return p < 0 ? -1 : matmul(T, p, v);
}

/* ---------- the table ---------- */

typedef struct op_entry {
    const char *names;     /* space-separated: torch.X F.X T.X (T.X is also method X) */
    op_fn fn;
    int op;
} op_entry;

#define U(n, OP) { "torch." n " T." n, h_unary, SMELT_OP_##OP }
#define B(n, OP) { "torch." n " T." n, h_binary, SMELT_OP_##OP }
#define R(n, OP) { "torch." n " T." n, h_reduce, SMELT_OP_##OP }

static const op_entry table[] = {
    U("neg", NEG), U("negative", NEG), U("abs", ABS), U("exp", EXP), U("exp2", EXP2), U("expm1", EXPM1),
    U("log", LOG), U("log2", LOG2), U("log1p", LOG1P), U("sqrt", SQRT), U("rsqrt", RSQRT),
    U("sin", SIN), U("cos", COS), U("tan", TAN), U("tanh", TANH), U("sigmoid", SIGMOID),
    U("erf", ERF), U("relu", RELU), U("floor", FLOOR), U("ceil", CEIL), U("round", ROUND),
    U("trunc", TRUNC), U("sign", SIGN), U("reciprocal", RECIPROCAL), U("logical_not", LOGICAL_NOT),
    U("isnan", ISNAN), U("isinf", ISINF), U("bitwise_not", BITWISE_NOT),
    { "F.relu F.relu_ T.relu_", h_unary, SMELT_OP_RELU }, { "F.sigmoid", h_unary, SMELT_OP_SIGMOID },
    { "F.tanh", h_unary, SMELT_OP_TANH },
    B("add", ADD), B("sub", SUB), B("subtract", SUB), B("mul", MUL), B("multiply", MUL),
    B("div", DIV), B("divide", DIV), B("true_divide", DIV), B("floor_divide", FLOORDIV),
    B("pow", POW), B("maximum", MAXIMUM), B("minimum", MINIMUM), B("fmod", FMOD),
    B("remainder", REMAINDER), B("atan2", ATAN2), B("eq", EQ), B("ne", NE), B("lt", LT),
    B("le", LE), B("gt", GT), B("ge", GE), B("logical_and", LOGICAL_AND),
    B("logical_or", LOGICAL_OR), B("logical_xor", LOGICAL_XOR), B("bitwise_and", BITWISE_AND),
    B("bitwise_or", BITWISE_OR), B("bitwise_xor", BITWISE_XOR),
    R("sum", SUM), R("prod", PROD), R("mean", MEAN), R("amax", AMAX), R("amin", AMIN),
    R("any", ANY), R("all", ALL), R("argmax", ARGMAX), R("argmin", ARGMIN),
    { "torch.max T.max", h_minmax, SMELT_OP_AMAX }, { "torch.min T.min", h_minmax, SMELT_OP_AMIN },
    { "torch.var T.var", h_var, SMELT_OP_VAR }, { "torch.std T.std", h_var, SMELT_OP_STD },
    { "torch.softmax F.softmax T.softmax", h_softmax, SMELT_OP_EXP },
    { "torch.log_softmax F.log_softmax T.log_softmax", h_softmax, SMELT_OP_LOG },
    { "F.layer_norm torch.layer_norm", h_layer_norm, 0 },
    { "F.rms_norm", h_rms_norm, 0 },
    { "F.linear", h_linear, 0 },
    { "torch.matmul T.matmul torch.mm T.mm torch.bmm T.bmm", h_matmul, 0 },
    { "F.gelu", h_gelu, 0 }, { "F.silu", h_silu, 0 },
    { "F.dropout torch.dropout", h_dropout, 0 },
    { "T.contiguous T.clone torch.clone T.detach F.identity", h_identity, 0 },
    { "T.view T.reshape torch.reshape", h_view, 0 },
    { "T.permute torch.permute", h_permute, 0 },
    { "T.transpose torch.transpose T.swapaxes", h_transpose, 0 },
    { "T.t torch.t", h_t, 0 },
    { "T.unsqueeze torch.unsqueeze", h_unsqueeze, 0 },
    { "T.squeeze torch.squeeze", h_squeeze, 0 },
    { "T.flatten torch.flatten", h_flatten, 0 },
    { "T.expand", h_expand, 0 }, { "T.expand_as", h_expand_as, 0 },
    { "T.size", h_size, 0 }, { "T.dim", h_dim, 0 }, { "T.numel torch.numel", h_numel, 0 },
    { "torch.cat torch.concat torch.concatenate", h_cat, 0 },
    { "torch.stack", h_cat, SMELT_OP_UNSQUEEZE },
    { "torch.where T.where", h_where, 0 },
    { "T.masked_fill torch.masked_fill", h_masked_fill, 0 },
    { "torch.clamp T.clamp torch.clip T.clip", h_clamp, 0 },
    { "torch.clamp_min T.clamp_min", h_clamp, SMELT_OP_MAXIMUM },
    { "torch.clamp_max T.clamp_max", h_clamp, SMELT_OP_MINIMUM },
    { "T.to", h_to, 0 },
    { "T.float", h_to, 1000 + SMELT_F32 }, { "T.double", h_to, 1000 + SMELT_F64 },
    { "T.half", h_to, 1000 + SMELT_F16 }, { "T.bfloat16", h_to, 1000 + SMELT_BF16 },
    { "T.int", h_to, 1000 + SMELT_I32 }, { "T.long", h_to, 1000 + SMELT_I64 },
    { "T.bool", h_to, 1000 + SMELT_BOOL },
    { "T.type_as", h_type_as, 0 },
    { "torch.zeros", h_full, SMELT_OP_ADD }, { "torch.ones", h_full, SMELT_OP_MUL },
    { "torch.full", h_full, SMELT_OP_CLAMP },
    { "torch.zeros_like", h_full, 100 + SMELT_OP_ADD }, { "torch.ones_like", h_full, 100 + SMELT_OP_MUL },
    { "torch.full_like", h_full, 100 + SMELT_OP_CLAMP },
    { "torch.tril T.tril", h_tri, SMELT_OP_LE }, { "torch.triu T.triu", h_tri, SMELT_OP_GE },
    { "torch.split T.split", h_split, 0 }, { "torch.chunk T.chunk", h_split, SMELT_OP_DIV },
    { "F.scaled_dot_product_attention", h_sdpa, 0 },
};

static PyObject *resolve(PyObject *torch, PyObject *F, const char *name)
{
    PyObject *base = !strncmp(name, "torch.", 6) ? torch : !strncmp(name, "F.", 2) ? F : tensor_type;
    const char *attr = strchr(name, '.') + 1;
    PyObject *o = PyObject_GetAttrString(base, attr);
    if (!o)
        PyErr_Clear();
    return o;
}

int ops_init(void)
{
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *F = PyImport_ImportModule("torch.nn.functional");
    if (!torch || !F)
        goto fail;
    tensor_type = PyObject_GetAttrString(torch, "Tensor");
    size_type = PyObject_GetAttrString(torch, "Size");
    by_obj = PyDict_New();
    by_name = PyDict_New();
    if (!tensor_type || !size_type || !by_obj || !by_name)
        goto fail;
    static const char *dtn[SMELT_NDTYPES] = { "bool", "uint8", "int8", "int16", "int32", "int64",
                                              "float16", "bfloat16", "float32", "float64" };
    for (int i = 0; i < SMELT_NDTYPES; i++)
        if (!(torch_dtypes[i] = PyObject_GetAttrString(torch, dtn[i])))
            goto fail;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", table[i].names);
        for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
            PyObject *idx = PyLong_FromSize_t(i);
            PyObject *o = resolve(torch, F, tok);
            if (o && PyDict_SetItem(by_obj, o, idx) < 0)
                PyErr_Clear();   /* unhashable: skip */
            if (!strncmp(tok, "T.", 2) && PyDict_SetItemString(by_name, tok + 2, idx))
                goto fail;
            Py_XDECREF(o);
            Py_XDECREF(idx);
        }
    }
    Py_DECREF(torch);
    Py_DECREF(F);
    return 0;
fail:
    Py_XDECREF(torch);
    Py_XDECREF(F);
    return -1;
}

static int32_t dispatch(tracer *T, PyObject *idx, const call_args *a)
{
    const op_entry *e = &table[PyLong_AsSsize_t(idx)];
    return e->fn(T, a, (smelt_op)e->op);
}

int32_t ops_call_torch(tracer *T, PyObject *fn, const call_args *a)
{
    PyObject *idx = PyDict_GetItemWithError(by_obj, fn);
    if (!idx) {
        if (PyErr_Occurred())
            PyErr_Clear();
        return -2;
    }
    if (a->npos == 0 && a->nkw == 0)
        return tr_break(T, "torch call without arguments");
    return dispatch(T, idx, a);
}

int32_t ops_call_method(tracer *T, PyObject *name, const call_args *a)
{
    PyObject *idx = PyDict_GetItemWithError(by_name, name);
    if (!idx) {
        Py_ssize_t n = PyUnicode_GetLength(name);
        if (n > 1 && PyUnicode_ReadChar(name, n - 1) == '_') {   /* x.add_(y) on a fresh tensor */
            PyObject *base = PyUnicode_Substring(name, 0, n - 1);
            PyObject *bi = base ? PyDict_GetItemWithError(by_name, base) : NULL;
            Py_XDECREF(base);
            const smelt_node *nd = &T->g->nodes[T->vals[a->pos[0]].node];
            if (bi && nd->op != SMELT_OP_INPUT && !T->viewed[T->vals[a->pos[0]].node] &&
                smelt_op_kind_of((smelt_op)nd->op) != SMELT_KIND_VIEW)
                return tr_break(T, "in-place method %U (rebinding is not modelled yet)", name);
        }
        return tr_break(T, "tensor method %U is not supported yet", name);
    }
    return dispatch(T, idx, a);
}

int32_t ops_tensor_attr(tracer *T, int32_t self, PyObject *name)
{
    const char *s = PyUnicode_AsUTF8(name);
    if (!s)
        return -1;
    const smelt_node *n = node(T, self);
    if (!strcmp(s, "shape"))
        return shape_tuple(T, self);
    if (!strcmp(s, "ndim"))
        return int_value(T, n->ndim);
    if (!strcmp(s, "dtype"))
        return tv_obj(T, torch_dtypes[n->dtype], -1);
    if (!strcmp(s, "is_cuda"))
        return tv_obj(T, Py_False, -1);
    if (!strcmp(s, "T") || !strcmp(s, "mT")) {
        int perm[SMELT_MAX_DIMS];
        for (int d = 0; d < n->ndim; d++)
            perm[d] = s[0] == 'T' ? n->ndim - 1 - d : d;
        if (s[0] == 'm') {
            if (n->ndim < 2)
                return tr_break(T, "mT of a < 2-d tensor");
            perm[n->ndim - 1] = n->ndim - 2;
            perm[n->ndim - 2] = n->ndim - 1;
        }
        return v_permute(T, self, perm);
    }
    if (!strcmp(s, "device") || !strcmp(s, "requires_grad") || !strcmp(s, "grad") || !strcmp(s, "data"))
        return tr_break(T, "tensor attribute %s is not supported yet", s);
    return -2;
}

static const smelt_op nb_ops[] = {
    [NB_ADD] = SMELT_OP_ADD, [NB_AND] = SMELT_OP_BITWISE_AND, [NB_FLOOR_DIVIDE] = SMELT_OP_FLOORDIV,
    [NB_LSHIFT] = SMELT_OP_SHL, [NB_MATRIX_MULTIPLY] = SMELT_OP_MATMUL, [NB_MULTIPLY] = SMELT_OP_MUL,
    [NB_REMAINDER] = SMELT_OP_REMAINDER, [NB_OR] = SMELT_OP_BITWISE_OR, [NB_POWER] = SMELT_OP_POW,
    [NB_RSHIFT] = SMELT_OP_SHR, [NB_SUBTRACT] = SMELT_OP_SUB, [NB_TRUE_DIVIDE] = SMELT_OP_DIV,
    [NB_XOR] = SMELT_OP_BITWISE_XOR,
};

int32_t ops_binary(tracer *T, int nb, int32_t a, int32_t b)
{
    int base = nb >= NB_INPLACE ? nb - NB_INPLACE : nb;
    if (base < 0 || base >= NB_INPLACE)
        return tr_break(T, "binary operator %d", nb);
    if (base == NB_MATRIX_MULTIPLY)
        return matmul(T, a, b);
    return op2(T, nb_ops[base], a, b);
}

int32_t ops_compare(tracer *T, int cmp, int32_t a, int32_t b)
{
    static const smelt_op ops[] = { [Py_LT] = SMELT_OP_LT, [Py_LE] = SMELT_OP_LE, [Py_EQ] = SMELT_OP_EQ,
                                    [Py_NE] = SMELT_OP_NE, [Py_GT] = SMELT_OP_GT, [Py_GE] = SMELT_OP_GE };
    if (cmp < 0 || cmp > Py_GE)
        return tr_break(T, "comparison %d", cmp);
    return op2(T, ops[cmp], a, b);
}

int32_t ops_unary(tracer *T, smelt_op op, int32_t a) { return op1(T, op, a); }

/* x[index]: ints, slices, None and Ellipsis (a tuple of them). */
int32_t ops_subscr(tracer *T, int32_t x, int32_t index)
{
    int32_t items[16], *it = items;
    int n = 1;
    items[0] = index;
    if (T->vals[index].kind == V_TUPLE) {
        it = T->vals[index].items;
        n = T->vals[index].n;
    }
    int ell = -1;
    for (int i = 0; i < n; i++) {
        tv *k = &T->vals[it[i]];
        if (k->kind == V_TENSOR)
            return tr_break(T, "indexing with a tensor is not supported yet");
        if (k->kind == V_OBJ && k->obj == Py_Ellipsis)
            ell = i;
    }
    int d = 0;
    for (int i = 0; i < n && x >= 0; i++) {
        tv *k = &T->vals[it[i]];
        int nd = node(T, x)->ndim;
        if (i == ell) {   /* Ellipsis: skip to the dims the remaining indices take */
            int rest = 0;
            for (int j = i + 1; j < n; j++)
                if (!(T->vals[it[j]].kind == V_OBJ && T->vals[it[j]].obj == Py_None))
                    rest++;
            d = nd - rest;
            continue;
        }
        if (k->kind == V_OBJ && k->obj == Py_None) {
            x = v_axis(T, SMELT_OP_UNSQUEEZE, x, d++);
            continue;
        }
        if (d >= nd)
            return tr_break(T, "too many indices for a %d-d tensor", nd);
        if (k->kind == V_SLICE) {
            int64_t s[3] = { 0, INT64_MAX, 1 };
            for (int j = 0; j < 3; j++)
                if (k->sl[j] >= 0 && tr_int(T, k->sl[j], &s[j]))
                    return -1;
            if (s[2] <= 0)
                return tr_break(T, "slice step must be positive");
            Py_ssize_t st = (Py_ssize_t)(s[0] < -PY_SSIZE_T_MAX ? -PY_SSIZE_T_MAX : s[0]);
            Py_ssize_t en = (Py_ssize_t)(s[1] > PY_SSIZE_T_MAX ? PY_SSIZE_T_MAX : s[1]);
            PySlice_AdjustIndices(node(T, x)->shape[d], &st, &en, (Py_ssize_t)s[2]);
            if (en < st)
                en = st;
            x = v_slice(T, x, d++, st, en, s[2]);
            continue;
        }
        int64_t iv;
        if (tr_int(T, it[i], &iv))
            return -1;
        int64_t size = node(T, x)->shape[d];
        if (iv < -size || iv >= size)
            return tr_break(T, "index %lld out of range for size %lld", (long long)iv, (long long)size);
        if (iv < 0)
            iv += size;
        x = v_slice(T, x, d, iv, iv + 1, 1);
        x = x < 0 ? -1 : v_axis(T, SMELT_OP_SQUEEZE, x, d);
    }
    return x;
}
