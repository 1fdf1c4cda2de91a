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

static PyObject *tensor_type, *by_obj, *by_name, *torch_dtypes[SMELT_NDTYPES], *size_type, *cpu_device;
static PyObject *cumsum_fn;   /* torch.cumsum: the host call of a cumulative sum built here */
static PyObject *put_fn;            /* torch.put (view updates) */
static PyObject *manual_seed_fn, *seed_call_fn, *default_generator;   /* torch.manual_seed, its host call */
static PyObject *rand_like_fn[3];   /* torch.rand_like, randn_like, randint_like (host calls) */
static PyObject *getitem_fn, *nn_pad, *dropout_fn;   /* torch.Tensor.__getitem__, torch._C._nn.pad,
                                                         smelt._autograd.dropout_noise (host calls) */
static PyObject *index_put_fn;                        /* torch.index_put (host call) */

PyObject *ops_tensor_type(void) { return tensor_type; }
PyObject *ops_size_type(void) { return size_type; }
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

int32_t ops_arg(const call_args *a, int i, const char *name) { return arg(a, i, name); }

static int32_t as_host_call(tracer *T, PyObject *fn, const call_args *a);
static int32_t is_tensor(tracer *T, int32_t v) { return v >= 0 && T->vals[v].kind == V_TENSOR; }

static int is_none(tracer *T, int32_t v)
{
    return v < 0 || (T->vals[v].kind == V_OBJ && T->vals[v].obj == Py_None);
}

/* The graph node of tensor value v; for anything else (an absent
 * argument, a non-tensor) a zero-dim placeholder, with a break recorded. */
static const smelt_node *node(tracer *T, int32_t v)
{
    static const smelt_node none = { .op = SMELT_OP_SCALAR };
    if (v < 0 || T->vals[v].kind != V_TENSOR) {
        tr_break(T, v < 0 ? "a tensor argument is missing" : "expected a tensor, got a %s",
                 v < 0 ? "" : T->vals[v].kind == V_OBJ ? Py_TYPE(T->vals[v].obj)->tp_name : "container");
        return &none;
    }
    return &T->g->nodes[T->vals[v].node];
}

/* Graph node for value v: a tensor, or a Python number as a weak scalar. */
static int32_t gnode(tracer *T, int32_t v)
{
    if (v < 0)
        return tr_break(T, "missing tensor argument");
    tv *x = &T->vals[v];
    if (x->kind == V_TENSOR)
        return x->node;
    if (x->kind == V_SYM) {   /* a symbolic size as a number: its value per call */
        int32_t id = smelt_graph_scalar(T->g, SMELT_I64, 0, PyLong_AsLongLong(x->obj));
        return id < 0 ? tr_break(T, "%s", T->g->err) : dyn_scalar(T, id, x->node) ? -1 : id;
    }
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

/* A computed constant: wraps new reference o (NULL: error set). */
static int32_t wrap_new(tracer *T, PyObject *o)
{
    int32_t r = o ? tv_obj(T, o, -1) : -1;
    Py_XDECREF(o);
    return r;
}

static int32_t num(tracer *T, double v) { return wrap_new(T, PyFloat_FromDouble(v)); }

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

/* int_list keeping symbolic sizes: ex[i] the expression of item i when it
 * is one (its traced value in out[i]), else -1; handed to the next node
 * (dyn_pend_shape) when any is. minus1: a -1 item is a reshape's -1. */
static int int_list_ex(tracer *T, const call_args *a, int from, const char *kw, int64_t *out, int *n, int minus1)
{
    int32_t ex[SMELT_MAX_DIMS], v = arg(a, from, kw);
    int k = 0;
    for (int i = 0; i < SMELT_MAX_DIMS; i++)
        ex[i] = -1;
    if (v >= 0 && (T->vals[v].kind == V_TUPLE || T->vals[v].kind == V_LIST)) {
        tv *x = &T->vals[v];
        if (x->n > SMELT_MAX_DIMS)
            return tr_break(T, "too many dims");
        for (int i = 0; i < x->n; i++)
            if (dyn_int_ex(T, T->vals[v].items[i], &out[i], &ex[i]))
                return -1;
        k = T->vals[v].n;
    } else if (v >= 0 && (T->vals[v].kind == V_SYM ||
                          (T->vals[v].kind == V_OBJ && PyLong_Check(T->vals[v].obj)))) {   /* x.view(2, T, 3) */
        for (int i = from; i < a->npos && k < SMELT_MAX_DIMS; i++, k++)
            if (dyn_int_ex(T, a->pos[i], &out[k], &ex[k]))
                return -1;
    } else {
        if (int_list(T, a, from, kw, out, n))
            return -1;
        k = *n;
    }
    *n = k;
    for (int i = 0; i < k; i++)
        if (minus1 && ex[i] < 0 && out[i] == -1)
            ex[i] = -2;
    dyn_pend_shape(T, ex, k);   /* (also when all are numbers: they are the caller's constants) */
    return 0;
}

/* The next node's first n sizes are those of graph node `of` (their
 * expressions handed over: a composite reshaping back to an input's
 * shape), the rest numbers. */
static void pend_like(tracer *T, int32_t of, int n, int total)
{
    int32_t ex[SMELT_MAX_DIMS];
    for (int d = 0; d < total && d < SMELT_MAX_DIMS; d++)
        ex[d] = d < n ? dyn_dim_ex(T, of, d) : -1;
    dyn_pend_shape(T, ex, total);
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
    if (x < 0 || T->vals[x].kind != V_TENSOR)
        return x < 0 ? -1 : tr_break(T, "reshape of a non-tensor");
    smelt_node p = { .op = SMELT_OP_RESHAPE, .nsrc = 1, .src = { T->vals[x].node }, .ndim = (uint8_t)n };
    memcpy(p.shape, shape, sizeof(int64_t) * (size_t)n);
    return mk(T, &p);
}

static int32_t v_axis(tracer *T, smelt_op op, int32_t x, int dim)
{
    if (x < 0 || T->vals[x].kind != V_TENSOR)
        return x < 0 ? -1 : tr_break(T, "%s of a non-tensor", smelt_op_name(op));
    smelt_node p = { .op = op, .nsrc = 1, .src = { T->vals[x].node } };
    p.a.axis.dim = dim;
    return mk(T, &p);
}

static int32_t v_slice(tracer *T, int32_t x, int dim, int64_t start, int64_t end, int64_t step)
{
    if (x < 0 || T->vals[x].kind != V_TENSOR)
        return x < 0 ? -1 : tr_break(T, "slice of a non-tensor");
    smelt_node p = { .op = SMELT_OP_SLICE, .nsrc = 1, .src = { T->vals[x].node } };
    p.a.slice.dim = dim;
    p.a.slice.start = start;
    p.a.slice.end = end;
    p.a.slice.step = step;
    return mk(T, &p);
}

static int32_t red(tracer *T, smelt_op op, int32_t x, uint32_t dims, int keepdim, int64_t corr)
{
    if (x < 0 || T->vals[x].kind != V_TENSOR)
        return x < 0 ? -1 : tr_break(T, "%s of a non-tensor", smelt_op_name(op));
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
        if (*mask & (1u << d))
            return tr_break(T, "dim %d appears more than once in the dims (eager raises)", d);
        *mask |= 1u << d;
    }
    return 0;
}

/* ---------- handlers ---------- */

static int32_t cast_to(tracer *T, int32_t x, int dt);
static int32_t fresh_contiguous(tracer *T, int32_t x, int32_t r);
static int eager_channels_last(tracer *T, int32_t x);
static int32_t copy_of(tracer *T, int32_t x);

typedef int32_t (*op_fn)(tracer *T, const call_args *a, smelt_op op);

static int default_float(void);

/* torch.round(x, decimals=d) as ATen computes it: nearbyint(x * 10^d) /
 * 10^d, or nearbyint(x / 10^-d) * 10^-d for negative d, 10^|d| a constant
 * of x's floating dtype. */
static int32_t round_decimals(tracer *T, int32_t x, int64_t d)
{
    if (d == 0)
        return op1(T, SMELT_OP_ROUND, x);
    if (!smelt_dtype_is_float((smelt_dtype)node(T, x)->dtype))
        return tr_break(T, "round(decimals=) of an integer tensor (eager raises)");
    double p = 1.0;
    for (int64_t i = 0; i < (d < 0 ? -d : d) && i < 400; i++)
        p *= 10.0;
    int32_t k = num(T, p);
    return d > 0 ? op2(T, SMELT_OP_DIV, op1(T, SMELT_OP_ROUND, op2(T, SMELT_OP_MUL, x, k)), k)
                 : op2(T, SMELT_OP_MUL, op1(T, SMELT_OP_ROUND, op2(T, SMELT_OP_DIV, x, k)), k);
}

/* An element-wise function of one tensor: arguments other than the input
 * (and out=, handled by the table) are not ignored: round's decimals is
 * modelled, anything else breaks. */
static int32_t h_unary(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), extra = a->npos > 1 ? a->pos[1] : -1;
    if (extra >= 0 && T->vals[extra].kind == V_OBJ && PyBool_Check(T->vals[extra].obj))
        extra = -1;   /* F.relu(x, inplace): the table's in-place column */
    for (int k = 0; k < a->nkw && extra < 0; k++)
        if (PyUnicode_CompareWithASCIIString(a->kwn[k], "input") && PyUnicode_CompareWithASCIIString(a->kwn[k], "out") &&
            PyUnicode_CompareWithASCIIString(a->kwn[k], "inplace"))
            extra = a->kwv[k];
    if (extra >= 0 && op == SMELT_OP_ROUND && a->npos + a->nkw - (arg(a, -1, "out") >= 0) == 2) {
        int64_t d;
        return tr_int(T, arg(a, 1, "decimals"), &d) ? -1 : round_decimals(T, x, d);
    }
    if (extra >= 0)
        return tr_break(T, "%s with arguments other than its input", smelt_op_name(op));
    return op1(T, op, x);
}

/* torch.div(x, y, rounding_mode='trunc'): trunc(x / y) for floating
 * results; for integers the quotient rounded toward zero in the integer
 * type: floor division, plus one where it is inexact and the signs differ
 * (division by zero raises as floor division does). Bools: a break (eager
 * raises). */
static int32_t div_trunc(tracer *T, int32_t x, int32_t y)
{
    int32_t a = gnode(T, x), b = a < 0 ? -1 : gnode(T, y);
    if (b < 0)
        return -1;
    const smelt_node *s[2] = { &T->g->nodes[a], &T->g->nodes[b] };
    smelt_dtype dt = smelt_result_type(s, 2, (smelt_dtype)T->g->default_float);
    if (smelt_dtype_is_float(dt))
        return op1(T, SMELT_OP_TRUNC, op2(T, SMELT_OP_DIV, x, y));
    if (dt == SMELT_BOOL)
        return tr_break(T, "div with rounding_mode='trunc' of bools (eager raises)");
    int32_t zero = wrap_new(T, PyLong_FromLong(0));
    int32_t q = zero < 0 ? -1 : op2(T, SMELT_OP_FLOORDIV, x, y);
    int32_t neg = q < 0 ? -1 : op2(T, SMELT_OP_NE, op2(T, SMELT_OP_LT, x, zero), op2(T, SMELT_OP_LT, y, zero));
    int32_t inexact = neg < 0 ? -1 : op2(T, SMELT_OP_NE, op2(T, SMELT_OP_REMAINDER, x, y), zero);
    return inexact < 0 ? -1 : op2(T, SMELT_OP_ADD, q, op2(T, SMELT_OP_LOGICAL_AND, neg, inexact));
}

static int32_t h_binary(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), y = arg(a, 1, "other");
    if (y < 0)
        y = arg(a, 1, "exponent");
    if (x < 0 || y < 0)
        return tr_break(T, "%s: missing operand", smelt_op_name(op));
    /* which operands torch's overloads let be Python numbers */
    int tx = T->vals[x].kind == V_TENSOR, ty = T->vals[y].kind == V_TENSOR, ok;
    switch (op) {
    case SMELT_OP_MAXIMUM: case SMELT_OP_MINIMUM: case SMELT_OP_ATAN2: case SMELT_OP_LOGICAL_AND:
    case SMELT_OP_LOGICAL_OR: case SMELT_OP_LOGICAL_XOR:
        ok = tx && ty;
        break;
    case SMELT_OP_FMOD: case SMELT_OP_EQ: case SMELT_OP_NE: case SMELT_OP_LT: case SMELT_OP_LE:
    case SMELT_OP_GT: case SMELT_OP_GE:
        ok = tx;
        break;
    case SMELT_OP_POW: case SMELT_OP_REMAINDER: case SMELT_OP_BITWISE_AND: case SMELT_OP_BITWISE_OR:
    case SMELT_OP_BITWISE_XOR:
        ok = tx || ty;
        break;
    default:
        ok = 1;
    }
    if (!ok)
        return tr_break(T, "%s of a %s and a %s (eager raises)", smelt_op_name(op), tr_kind_name(T, x),
                        tr_kind_name(T, y));
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
        else if (m != Py_None && PyUnicode_CompareWithASCIIString(m, "trunc") == 0)
            return div_trunc(T, x, y);
        else if (m != Py_None)
            return tr_break(T, "div with rounding_mode=%R (eager raises)", m);
    }
    return op2(T, op, x, y);
}

static int dtype_arg(tracer *T, const call_args *a, int dflt);

static int32_t h_reduce(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), dim = arg(a, 1, "dim"), kd = arg(a, 2, "keepdim");
    if (dim < 0)
        dim = arg(a, -1, "axis");
    int dt = -1;
    if (!is_none(T, arg(a, -1, "dtype"))) {   /* sum/mean/prod(dtype=): the input cast first, as eager */
        dt = op == SMELT_OP_SUM || op == SMELT_OP_MEAN || op == SMELT_OP_PROD ? dtype_arg(T, a, -1) : -1;
        if (dt < 0 || T->vals[x].kind != V_TENSOR)
            return T->broke ? -1 : tr_break(T, "%s with dtype=", smelt_op_name(op));
        x = cast_to(T, x, dt);
    }
    uint32_t mask;
    int keep;
    if (x < 0 || T->vals[x].kind != V_TENSOR || dims_mask(T, dim, node(T, x)->ndim, &mask) || get_bool(T, kd, 0, &keep))
        return x >= 0 && T->vals[x].kind != V_TENSOR ? tr_break(T, "reduction of a non-tensor") : -1;
    int32_t r = red(T, op, x, mask, keep, 0);
    return dt >= 0 && r >= 0 ? cast_to(T, r, dt) : r;   /* in dtype= (integers too: no int64) */
}

/* The tuple (a, b) typed as torch.return_types.<name> (values/indices,
 * min/max: the named tuple torch returns). */
static int32_t named_pair(tracer *T, int32_t a, int32_t b, const char *name)
{
    int32_t items[2] = { a, b };
    int32_t t = tv_tuple(T, items, 2);
    PyObject *rt = t < 0 ? NULL : PyImport_ImportModule("torch.return_types");
    PyObject *ty = rt ? PyObject_GetAttrString(rt, name) : NULL;
    Py_XDECREF(rt);
    if (!ty || tr_keep(T, ty)) {
        Py_XDECREF(ty);
        return -1;
    }
    T->vals[t].obj = ty;
    Py_DECREF(ty);
    return t;
}

/* torch.max / torch.min: all elements, a dim (values, indices), or two tensors. */
static int32_t h_minmax(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), d = arg(a, 1, "dim");
    int is_max = op == SMELT_OP_AMAX;
    if (x < 0 || T->vals[x].kind != V_TENSOR)
        return tr_break(T, "max/min of a non-tensor (eager raises)");
    if (d >= 0 && T->vals[d].kind == V_TENSOR)
        return op2(T, is_max ? SMELT_OP_MAXIMUM : SMELT_OP_MINIMUM, x, d);
    if (is_none(T, d))
        return h_reduce(T, a, op);
    int keep;
    uint32_t mask;
    if (dims_mask(T, d, node(T, x)->ndim, &mask) || get_bool(T, arg(a, 2, "keepdim"), 0, &keep))
        return -1;
    int32_t vals = red(T, op, x, mask, keep, 0);
    /* bool: the index of the first True (False) as of its uint8 values
     * (eager's max/min take bool; argmax/argmin raise) */
    int32_t xi = node(T, x)->dtype == SMELT_BOOL ? cast_to(T, x, SMELT_U8) : x;
    int32_t idx = vals < 0 || xi < 0 ? -1 : red(T, is_max ? SMELT_OP_ARGMAX : SMELT_OP_ARGMIN, xi, mask, keep, 0);
    return idx < 0 ? -1 : named_pair(T, vals, idx, is_max ? "max" : "min");
}

/* The arguments of var/std (and var_mean/std_mean) as torch takes them:
 * (input, dim, *, correction, keepdim), the legacy unbiased flag
 * (x.var(False), (input, dim, unbiased, keepdim)). 0, or -1 on a break or
 * error. */
static int var_args(tracer *T, const call_args *a, uint32_t *mask, int *keep, int64_t *corr)
{
    int32_t x = arg(a, 0, "input"), dim = arg(a, 1, "dim");
    int32_t unb = arg(a, -1, "unbiased"), corr_v = arg(a, -1, "correction"), kd = arg(a, -1, "keepdim");
    if (x < 0 || T->vals[x].kind != V_TENSOR)
        return tr_break(T, "var of a non-tensor");
    if (dim >= 0 && T->vals[dim].kind == V_OBJ && PyBool_Check(T->vals[dim].obj)) {
        unb = dim;   /* x.var(False): the legacy unbiased flag */
        dim = -1;
    }
    if (unb < 0 && a->npos > 2)   /* (input, dim, unbiased, keepdim) */
        unb = a->pos[2];
    if (kd < 0 && a->npos > 3)
        kd = a->pos[3];
    int u;
    *corr = 1;
    return get_bool(T, unb, 1, &u) || get_int(T, corr_v, u ? 1 : 0, corr) || get_bool(T, kd, 0, keep) ||
           dims_mask(T, dim, node(T, x)->ndim, mask) ? -1 : 0;
}

static int32_t h_var(tracer *T, const call_args *a, smelt_op op)
{
    uint32_t mask;
    int keep;
    int64_t c;
    return var_args(T, a, &mask, &keep, &c) ? -1 : red(T, op, arg(a, 0, "input"), mask, keep, c);
}

/* The dtype= argument of softmax-like calls (keyword, or positional after
 * dim when it is a torch.dtype: torch.softmax(x, 1, torch.float64)): its
 * dtype number in *dt, -1 when absent; -1 returned on an error. */
static int softmax_dtype(tracer *T, const call_args *a, int *dt)
{
    int32_t d = arg(a, -1, "dtype");
    for (int i = 2; d < 0 && i < a->npos && i < 4; i++)
        if (T->vals[a->pos[i]].kind == V_OBJ && ops_dtype_of(T->vals[a->pos[i]].obj) >= 0)
            d = a->pos[i];
    *dt = -1;
    if (is_none(T, d))
        return 0;
    PyObject *o = tr_const(T, d);
    if (!o)
        return -1;
    if ((*dt = ops_dtype_of(o)) < 0)
        return tr_break(T, "softmax with dtype=%R", o);
    return 0;
}

/* softmax / log_softmax (op LOG) over dim: x cast to dtype= first when
 * given (as eager); integer and bool inputs are a break (eager raises). */
static int32_t h_softmax(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), dv = arg(a, 1, "dim");
    int64_t d;
    int dim, cdt;
    if (x < 0 || T->vals[x].kind != V_TENSOR)
        return tr_break(T, "softmax of a non-tensor");
    if (softmax_dtype(T, a, &cdt) || (cdt >= 0 && (x = cast_to(T, x, cdt)) < 0))
        return -1;
    if (!smelt_dtype_is_float((smelt_dtype)node(T, x)->dtype))
        return tr_break(T, "softmax of a %s tensor (eager raises)", smelt_dtype_name((smelt_dtype)node(T, x)->dtype));
    if (tr_int(T, dv, &d) || norm_dim(T, d, node(T, x)->ndim, &dim))
        return -1;
    uint32_t m = node(T, x)->ndim ? 1u << dim : 0;
    /* float16/bfloat16 in float32, rounded once (ATen's vectorised softmax
     * converts each row to float, its sum is never rounded) */
    int dt = node(T, x)->dtype, x0 = x;
    if ((dt == SMELT_F16 || dt == SMELT_BF16) && (x = cast_to(T, x, SMELT_F32)) < 0)
        return -1;
    /* the shift by the row maximum changes no value's gradient (softmax is
     * shift-invariant): detached, so a compiled backward is softmax's own
     * formula, not also amax's (three more passes over a 50257-wide row) */
    int32_t mx = op1(T, SMELT_OP_DETACH, red(T, SMELT_OP_AMAX, x, m, 1, 0));
    int32_t sh = mx < 0 ? -1 : op2(T, SMELT_OP_SUB, x, mx);
    int32_t e = sh < 0 ? -1 : op1(T, SMELT_OP_EXP, sh);
    int32_t s = e < 0 ? -1 : red(T, SMELT_OP_SUM, e, m, 1, 0);
    if (s < 0)
        return -1;
    int32_t r;
    if (op == SMELT_OP_LOG)   /* log_softmax */
        r = op2(T, SMELT_OP_SUB, sh, op1(T, SMELT_OP_LOG, s));
    else if (x != x0)
        r = op2(T, SMELT_OP_DIV, e, s);   /* f16/bf16: the quotient rounded once */
    else   /* as ATen's softmax: times 1/sum, no divide per element */
        r = op2(T, SMELT_OP_MUL, e, op1(T, SMELT_OP_RECIPROCAL, s));
    if (r >= 0 && x != x0)
        r = cast_to(T, r, dt);
    return fresh_contiguous(T, x0, r);   /* eager's softmax result is contiguous */
}

static int norm_shape_dims(tracer *T, const call_args *a, int32_t x, uint32_t *mask)
{
    int64_t shp[SMELT_MAX_DIMS];
    int n, nd = node(T, x)->ndim;
    if (int_list(T, a, 1, "normalized_shape", shp, &n))
        return -1;
    if (n == 0)
        return tr_break(T, "an empty normalized_shape (eager raises)");
    *mask = 0;
    for (int i = 0; i < n; i++) {
        if (n > nd || node(T, x)->shape[nd - n + i] != shp[i])
            return tr_break(T, "normalized_shape does not match the input");
        if (dyn_guard(T, Py_EQ, dyn_dim_ex(T, T->vals[x].node, nd - n + i), shp[i]))   /* (given as numbers) */
            return -1;
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

/* F.layer_norm as ATen's CPU kernel computes it: in float32 for
 * float16/bfloat16 inputs (rounded once at the end), mean and biased
 * variance over the normalized dims, rstd = 1/sqrt(var + eps). ATen's
 * moments (Welford, lanes combined by weights) multiply the square of a
 * partial mean by a zero weight, so a row whose mean squared overflows
 * gets NaN statistics: var + mean*mean*0 reproduces that (it adds 0
 * otherwise). */
static int32_t h_layer_norm(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x0 = arg(a, 0, "input");
    int err = 0;
    uint32_t m;
    double eps = get_float(T, arg(a, 4, "eps"), 1e-5, &err);
    (void)op;
    if (err || T->vals[x0].kind != V_TENSOR || norm_shape_dims(T, a, x0, &m))
        return -1;
    int dt = node(T, x0)->dtype;
    int32_t x = cast_to(T, x0, dt == SMELT_F16 || dt == SMELT_BF16 ? SMELT_F32 : dt);
    int32_t mu = red(T, SMELT_OP_MEAN, x, m, 1, 0);
    int32_t xc = mu < 0 ? -1 : op2(T, SMELT_OP_SUB, x, mu);
    int32_t var = xc < 0 ? -1 : red(T, SMELT_OP_MEAN, op2(T, SMELT_OP_MUL, xc, xc), m, 1, 0);
    var = var < 0 ? -1 : op2(T, SMELT_OP_ADD, var, op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_MUL, mu, mu), num(T, 0.0)));
    int32_t r = var < 0 ? -1 : op1(T, SMELT_OP_RSQRT, op2(T, SMELT_OP_ADD, var, num(T, eps)));
    int32_t y = r < 0 ? -1 : affine(T, op2(T, SMELT_OP_MUL, xc, r), arg(a, 2, "weight"), arg(a, 3, "bias"));
    return fresh_contiguous(T, x0, y < 0 ? -1 : cast_to(T, y, dt));   /* eager's result is contiguous */
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
    /* the default eps is that of the computation dtype (float32 for
     * float16/bfloat16, as ATen's opmath) */
    double dflt = dt == SMELT_F64 ? 2.220446049250313e-16 : 1.1920928955078125e-07;
    double eps = get_float(T, arg(a, 3, "eps"), dflt, &err);
    if (err)
        return -1;
    /* eager: x in float32 times rsqrt(mean(x^2) + eps), times a weight of
     * x's dtype also in float32, rounded once to x's dtype */
    int half = dt == SMELT_F16 || dt == SMELT_BF16;
    int32_t w = arg(a, 2, "weight");
    int wsame = !is_none(T, w) && T->vals[w].kind == V_TENSOR && node(T, w)->dtype == dt;
    int32_t xf = half ? cast_to(T, x, SMELT_F32) : x;
    int32_t ms = xf < 0 ? -1 : red(T, SMELT_OP_MEAN, op2(T, SMELT_OP_MUL, xf, xf), m, 1, 0);
    int32_t r = ms < 0 ? -1 : op1(T, SMELT_OP_RSQRT, op2(T, SMELT_OP_ADD, ms, num(T, eps)));
    int32_t y = r < 0 ? -1 : op2(T, SMELT_OP_MUL, xf, r);
    if (y >= 0 && half && wsame)
        return cast_to(T, op2(T, SMELT_OP_MUL, y, cast_to(T, w, SMELT_F32)), dt);
    if (y >= 0 && half)
        y = cast_to(T, y, dt);
    return y < 0 ? -1 : affine(T, y, w, -1);
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
    int dt = node(T, w)->dtype;
    if ((dt == SMELT_F16 || dt == SMELT_BF16) && is_tensor(T, x) && is_tensor(T, b) && node(T, x)->dtype == dt &&
        node(T, b)->dtype == dt && (node(T, x)->ndim <= 2 || ops_eager_contiguous(T, T->vals[x].node) == 1)) {
        /* eager adds the bias inside its GEMM (addmm, flattened for a
         * contiguous input): one rounding to half precision, so here in
         * float32 rounded once */
        int32_t wf = cast_to(T, w, SMELT_F32);
        int32_t wt = node(T, wf)->ndim == 2 ? v_transpose(T, wf, 0, 1) : wf;
        int32_t y = wt < 0 ? -1 : matmul(T, cast_to(T, x, SMELT_F32), wt);
        return y < 0 ? -1 : cast_to(T, op2(T, SMELT_OP_ADD, y, cast_to(T, b, SMELT_F32)), dt);
    }
    int32_t wt = node(T, w)->ndim == 2 ? v_transpose(T, w, 0, 1) : w;
    int32_t y = wt < 0 ? -1 : matmul(T, x, wt);
    return (y < 0 || is_none(T, b)) ? y : op2(T, SMELT_OP_ADD, y, b);
}

/* Whether eager's gelu(approximate='none') of tensor value x runs on
 * oneDNN's gelu_erf (ATen takes it for contiguous float32 and bfloat16
 * tensors of more than one element while torch.backends.mkldnn is
 * enabled): it computes x * (1 + erf(x/sqrt2)) * 0.5 in float32, so it
 * overflows above FLT_MAX/2, and it gives NaN at +inf. */
static int gelu_onednn(tracer *T, int32_t x)
{
    const smelt_node *n = node(T, x);
    if ((n->dtype != SMELT_F32 && n->dtype != SMELT_BF16) || smelt_node_numel(n) <= 1)
        return 0;
    PyObject *C = PyImport_ImportModule("torch._C");
    PyObject *on = C ? PyObject_CallMethod(C, "_get_mkldnn_enabled", NULL) : NULL;
    Py_XDECREF(C);
    if (!on) {   /* no such query: assume the default (enabled) */
        PyErr_Clear();
        on = Py_NewRef(Py_True);
    }
    int r = on == Py_True && ops_eager_contiguous(T, T->vals[x].node) != 0;
    Py_DECREF(on);
    return r;
}

/* F.gelu: x * Phi(x), computed in float32 for float16/bfloat16 (as
 * eager: one rounding at the end). Eager's 0.5 x (1 + erf(x / sqrt2))
 * cancels for negative x: the NDTR op keeps full precision there.
 * approximate='tanh': 0.5 x (1 + tanh(v)), v = sqrt(2/pi) (x + 0.044715
 * x^3), is the GELU_TANH op (x / (1 + e^(-2v)): no cancellation).
 * Where eager runs oneDNN's form (gelu_onednn) the product is ordered as
 * there (it overflows above FLT_MAX/2) and +inf gives NaN (x - x is NaN
 * only at +-inf). */
static int32_t h_gelu(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x0 = arg(a, 0, "input"), ap = arg(a, 1, "approximate");
    PyObject *m = is_none(T, ap) ? NULL : tr_const(T, ap);
    (void)op;
    if ((!is_none(T, ap) && !m) || T->vals[x0].kind != V_TENSOR)
        return T->vals[x0].kind != V_TENSOR ? tr_break(T, "gelu of a non-tensor") : -1;
    if (m && (!PyUnicode_Check(m) || (PyUnicode_CompareWithASCIIString(m, "tanh") &&
                                      PyUnicode_CompareWithASCIIString(m, "none"))))
        return tr_break(T, "gelu with approximate=%R (eager raises)", m);
    int dt = node(T, x0)->dtype;
    int32_t x = cast_to(T, x0, dt == SMELT_F16 || dt == SMELT_BF16 ? SMELT_F32 : dt), y;
    if (m && PyUnicode_CompareWithASCIIString(m, "tanh") == 0) {
        y = op1(T, SMELT_OP_GELU_TANH, x);
    } else {
        int32_t c = op1(T, SMELT_OP_NDTR, x);
        if (gelu_onednn(T, x0))   /* (x (1 + erf)) / 2 as there: x 2 ndtr(x), halved (inf above FLT_MAX/2) */
            y = op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_MUL, x, op2(T, SMELT_OP_ADD, op2(T, SMELT_OP_MUL, c, num(T, 2.0)),
                                                                  op2(T, SMELT_OP_SUB, x, x))), num(T, 0.5));
        else
            y = op2(T, SMELT_OP_MUL, x, c);
    }
    return y < 0 ? -1 : cast_to(T, y, dt);
}

/* F.silu: x / (1 + e^-x), as eager computes it (x sigmoid(x) would
 * round a denormal sigmoid below -87 before the product) */
static int32_t h_silu(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    (void)op;
    return op2(T, SMELT_OP_DIV, x, op2(T, SMELT_OP_ADD, op1(T, SMELT_OP_EXP, op1(T, SMELT_OP_NEG, x)), num(T, 1.0)));
}

static int32_t h_dropout(tracer *T, const call_args *a, smelt_op op)
{
    int train;
    int err = 0;
    double p = get_float(T, arg(a, 1, "p"), 0.5, &err);
    if (err || get_bool(T, arg(a, 2, "training"), 1, &train))
        return -1;
    if (!train || p == 0)
        return arg(a, 0, "input");
    if (op)   /* channel-wise and alpha variants: other random numbers */
        return tr_break(T, "this dropout variant in training mode is not supported yet");
    /* the noise is drawn at run time by a host call, in program order with
     * the graph's other host calls, as at::dropout draws it (so a seeded run
     * draws the same numbers as eager); x times the noise is a graph op, so
     * a compiled backward multiplies by the same noise */
    int32_t x = arg(a, 0, "input");
    if (!dropout_fn || x < 0)
        return tr_break(T, "dropout in training mode without smelt's dropout noise");
    if (T->vals[x].kind != V_TENSOR || smelt_node_numel(&T->g->nodes[T->vals[x].node]) == 0)
        return x;   /* eager returns its input */
    call_args d = { .pos = (int32_t[]){ x, num(T, p) }, .npos = 2 };
    int32_t noise = ext_call(T, dropout_fn, &d);
    return noise < 0 ? -1 : op2(T, SMELT_OP_MUL, x, op1(T, SMELT_OP_DETACH, noise));
}

/* torch._C._log_api_usage_once(name): API-usage telemetry, nothing the
 * compiled program must reproduce: None. */
static int32_t h_none(tracer *T, const call_args *a, smelt_op op)
{
    (void)a;
    (void)op;
    return tv_obj(T, Py_None, -1);
}

static int32_t h_tensor(tracer *T, const call_args *a, smelt_op op);
static int device_cpu(tracer *T, const call_args *a);
static int device_arg(tracer *T, const call_args *a, int like);

static int32_t h_identity(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    int32_t x = arg(a, 0, "input");
    return T->vals[x].kind == V_TENSOR ? x : tr_break(T, "identity of a non-tensor");
}

/* A new tensor object sharing x's memory (detach, .data): a view of x
 * with x's own shape. */
static int32_t alias_of(tracer *T, int32_t x)
{
    if (T->vals[x].kind != V_TENSOR)
        return tr_break(T, "detach of a non-tensor");
    T->grad_sensitive = "detach() / .data";
    smelt_node p = { .op = SMELT_OP_RESHAPE, .nsrc = 1, .src = { T->vals[x].node }, .ndim = node(T, x)->ndim };
    memcpy(p.shape, node(T, x)->shape, sizeof p.shape);
    return mk(T, &p);
}

static int32_t h_detach(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    return alias_of(T, arg(a, 0, "input"));
}

/* torch.as_tensor(data, dtype=None, device=None): a tensor itself (cast
 * when dtype asks: then a new tensor), anything else as torch.tensor. */
static int32_t h_as_tensor(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "data");
    if (x < 0 || T->vals[x].kind != V_TENSOR)
        return h_tensor(T, a, op);
    if (device_arg(T, a, 1))
        return -1;
    int dt = dtype_arg(T, a, node(T, x)->dtype);
    return dt < 0 ? -1 : cast_to(T, x, dt);
}

/* x.type(dtype): x itself for its own dtype, else a cast; x.type() (a
 * type name string) is not modelled. */
static int32_t h_type(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), d = arg(a, 1, "dtype");
    (void)op;
    PyObject *o = d >= 0 ? tr_const(T, d) : NULL;
    int dt = o ? ops_dtype_of(o) : -1;
    if (dt < 0)
        return o || d < 0 ? tr_break(T, "Tensor.type() without a dtype") : -1;
    return cast_to(T, x, dt);
}

static int32_t view_or_copy(tracer *T, int32_t x, int32_t y, int is_view);

/* x.view(shape) (op 1) / x.reshape(shape) (op 0): see view_or_copy. */
static int32_t h_view(tracer *T, const call_args *a, smelt_op op)
{
    int64_t shape[SMELT_MAX_DIMS];
    int n;
    int32_t x = arg(a, 0, "input");
    if (T->vals[x].kind != V_TENSOR || int_list_ex(T, a, 1, "shape", shape, &n, 1))
        return -1;
    return view_or_copy(T, x, v_reshape(T, x, shape, n), op == 1);
}

static int32_t h_permute(tracer *T, const call_args *a, smelt_op op)
{
    int64_t d[SMELT_MAX_DIMS];
    int n, perm[SMELT_MAX_DIMS];
    int32_t x = arg(a, 0, "input");
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
    if (node(T, x)->ndim > 2)
        return tr_break(T, "t() of a %d-d tensor (eager raises)", node(T, x)->ndim);
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

/* Dims from value v: an int, or a tuple/list of ints (normalised for an
 * nd-dim tensor; a repeat is a break: eager raises). 0 or -1. */
static int dims_of(tracer *T, int32_t v, int nd, int *out, int *n)
{
    tv *x = &T->vals[v];
    int single = x->kind != V_TUPLE && x->kind != V_LIST;
    uint32_t seen = 0;
    *n = single ? 1 : x->n;
    if (*n > SMELT_MAX_DIMS)
        return tr_break(T, "too many dims");
    for (int i = 0; i < *n; i++) {
        int64_t d;
        if (tr_int(T, single ? v : x->items[i], &d) || norm_dim(T, d, nd, &out[i]))
            return -1;
        if (seen >> out[i] & 1)
            return tr_break(T, "repeated dim (eager raises)");
        seen |= 1u << out[i];
    }
    return 0;
}

static int32_t h_squeeze(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), dv = arg(a, 1, "dim");
    (void)op;
    if (!is_none(T, dv)) {   /* a dim or a sequence of them: those of size 1, last first */
        int dims[SMELT_MAX_DIMS], n;
        uint32_t m = 0;
        if (dims_of(T, dv, node(T, x)->ndim, dims, &n))
            return -1;
        for (int i = 0; i < n; i++)
            m |= 1u << dims[i];
        for (int d = node(T, x)->ndim - 1; x >= 0 && d >= 0; d--)
            if ((m >> d & 1) && node(T, x)->shape[d] == 1)
                x = v_axis(T, SMELT_OP_SQUEEZE, x, d);
        return x;
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
    int32_t x = arg(a, 0, "input");
    (void)op;
    if (int_list_ex(T, a, 1, "size", shape, &n, 1))   /* (a -1: the source's size) */
        return -1;
    smelt_node p = { .op = SMELT_OP_EXPAND, .nsrc = 1, .src = { T->vals[x].node }, .ndim = (uint8_t)n };
    memcpy(p.shape, shape, sizeof(int64_t) * (size_t)n);
    return mk(T, &p);
}

static int32_t h_expand_as(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), o = arg(a, 1, "other");
    (void)op;
    smelt_node p = { .op = SMELT_OP_EXPAND, .nsrc = 1, .src = { T->vals[x].node }, .ndim = node(T, o)->ndim };
    memcpy(p.shape, node(T, o)->shape, sizeof p.shape);
    dyn_pend_dims(T, T->vals[o].node, 0, p.ndim);
    return mk(T, &p);
}

static int32_t int_value(tracer *T, int64_t v) { return wrap_new(T, PyLong_FromLongLong(v)); }

static int32_t shape_tuple(tracer *T, int32_t x)
{
    int32_t items[SMELT_MAX_DIMS];
    for (int d = 0; d < node(T, x)->ndim; d++)
        if ((items[d] = dyn_dim(T, T->vals[x].node, d)) < 0)
            return -1;
    int32_t t = tv_tuple(T, items, node(T, x)->ndim);
    if (t >= 0)
        T->vals[t].obj = size_type;   /* a torch.Size */
    return t;
}

static int32_t h_size(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), dv = arg(a, 1, "dim");
    (void)op;
    if (is_none(T, dv))
        return shape_tuple(T, x);
    int64_t d;
    int dim;
    if (tr_int(T, dv, &d) || norm_dim(T, d, node(T, x)->ndim, &dim))
        return -1;
    return dyn_dim(T, T->vals[x].node, dim);
}

static int32_t h_dim(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    return int_value(T, node(T, arg(a, 0, "input"))->ndim);
}

static int32_t h_numel(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    int32_t x = arg(a, 0, "input"), n = T->vals[x].node;
    if (!T->r->dyn)
        return int_value(T, smelt_node_numel(node(T, x)));
    int32_t v = int_value(T, 1);
    for (int d = 0; v >= 0 && d < T->g->nodes[n].ndim; d++) {
        int32_t s = dyn_dim(T, n, d);
        v = s < 0 ? -1 : tr_binop(T, NB_MULTIPLY, v, s);
    }
    return v;
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

static int32_t cast_to(tracer *T, int32_t x, int dt);

/* torch.cat skips 1-d tensors of size 0 (a legacy rule for empty
 * accumulators) when others are not such; they still take part in type
 * promotion. kept[0..*nk) the tensors that stay; *dt the dtype of all
 * (-1: nothing skipped). */
static void cat_legacy_empty(tracer *T, const int32_t *items, int n, int32_t *kept, int *nk, int *dt)
{
    const smelt_node *all[256];
    *nk = 0;
    *dt = -1;
    for (int i = 0; i < n; i++) {
        if (T->vals[items[i]].kind != V_TENSOR)
            return;
        all[i] = node(T, items[i]);
        if (all[i]->ndim != 1 || all[i]->shape[0] != 0)
            kept[(*nk)++] = items[i];
    }
    if (*nk > 0 && *nk < n)
        *dt = smelt_result_type(all, n, (smelt_dtype)T->g->default_float);
}

static int32_t h_cat(tracer *T, const call_args *a, smelt_op op)
{
    int32_t *items, nodes[256] = { 0 }, kept[256];
    int n, nk, dt = -1;
    int64_t d;
    int dim;
    if (seq_items(T, arg(a, 0, "tensors"), &items, &n) || get_int(T, arg(a, 1, "dim"), 0, &d))
        return -1;
    if (n == 0 || n > 256)
        return tr_break(T, "cat of %d tensors", n);
    if (op != SMELT_OP_UNSQUEEZE)
        cat_legacy_empty(T, items, n, kept, &nk, &dt);
    if (dt >= 0) {
        items = kept;
        n = nk;
    }
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
    int32_t r = cat_nodes(T, nodes, n, dim);
    r = r >= 0 && dt >= 0 ? cast_to(T, r, dt) : r;
    int cl = 1;   /* eager: channels-last when every input is, else contiguous */
    for (int i = 0; i < n && cl == 1; i++)
        cl = eager_channels_last(T, items[i]);
    if (cl == 1 && r >= 0 && T->vals[r].kind == V_TENSOR)
        tr_mark_layout(T, T->vals[r].node, 2);   /* channels-last in, channels-last out */
    return cl == 0 ? fresh_contiguous(T, -1, r) : r;
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

/* x.where(condition, y): torch.where(condition, x, y). */
static int32_t h_where_method(tracer *T, const call_args *a, smelt_op op)
{
    int32_t c = arg(a, 1, "condition"), y = arg(a, 2, "other");
    if (c < 0 || y < 0)
        return tr_break(T, "Tensor.where arguments");
    call_args w = { .pos = (int32_t[]){ c, arg(a, 0, "input"), y }, .npos = 3 };
    return h_where(T, &w, op);
}

static int32_t cast_to(tracer *T, int32_t x, int dt)
{
    if (x < 0 || T->vals[x].kind != V_TENSOR)
        return x < 0 ? -1 : tr_break(T, "cast of a non-tensor");
    if (node(T, x)->dtype == dt)
        return x;
    smelt_node p = { .op = SMELT_OP_CAST, .nsrc = 1, .src = { T->vals[x].node }, .dtype = (uint8_t)dt };
    return mk(T, &p);
}

/* The range of integer dtype dt. */
static void smelt_dtype_int_range(smelt_dtype dt, int64_t *lo, int64_t *hi)
{
    switch (dt) {
    case SMELT_U8: *lo = 0; *hi = 255; break;
    case SMELT_I8: *lo = -128; *hi = 127; break;
    case SMELT_I16: *lo = -32768; *hi = 32767; break;
    case SMELT_I32: *lo = INT32_MIN; *hi = INT32_MAX; break;
    default: *lo = INT64_MIN; *hi = INT64_MAX; break;
    }
}

/* masked_fill: where(mask, value, input) in input's dtype; eager raises for
 * a mask that is not bool, a value tensor that is not 0-d and an integer
 * value out of input's range (those break: eager raises there). */
static int32_t h_masked_fill(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), m = arg(a, 1, "mask"), v = arg(a, 2, "value");
    if (m < 0 || v < 0 || T->vals[x].kind != V_TENSOR || T->vals[m].kind != V_TENSOR)
        return tr_break(T, "masked_fill arguments");
    smelt_dtype xd = node(T, x)->dtype;
    if (node(T, m)->dtype != SMELT_BOOL)
        return tr_break(T, "masked_fill with a mask that is not bool (eager raises)");
    if (T->vals[v].kind == V_TENSOR) {
        if (node(T, v)->ndim != 0)
            return tr_break(T, "masked_fill with a value tensor that is not 0-d (eager raises)");
        if ((v = cast_to(T, v, xd)) < 0)
            return -1;
    } else {
        PyObject *o = tr_const(T, v);
        if (!o)
            return -1;
        if (!PyLong_Check(o) && !PyFloat_Check(o))
            return tr_break(T, "masked_fill with a value that is not a number");
        if (PyFloat_Check(o) && !smelt_dtype_is_float(xd))
            return tr_break(T, "masked_fill of an integer tensor with a float");
        if (PyLong_Check(o) && !PyBool_Check(o) && xd != SMELT_BOOL && !smelt_dtype_is_float(xd)) {
            int of = 0;
            long long iv = PyLong_AsLongLongAndOverflow(o, &of);
            int64_t lo, hi;
            smelt_dtype_int_range(xd, &lo, &hi);
            if (of || iv < lo || iv > hi)
                return tr_break(T, "masked_fill value out of the tensor's range (eager raises)");
        }
    }
    call_args w = { .pos = (int32_t[]){ m, v, x }, .npos = 3 };
    int32_t r = h_where(T, &w, op);
    return r < 0 ? -1 : cast_to(T, r, xd);
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
    if (x < 0 || T->vals[x].kind != V_TENSOR)
        return tr_break(T, "clamp of a non-tensor (eager raises)");
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
    int32_t x = arg(a, 0, "input"), mf = arg(a, -1, "memory_format");
    if (!is_none(T, mf)) {   /* only the default layout rule (preserve_format) is modelled */
        PyObject *o = tr_const(T, mf), *s = o ? PyObject_Str(o) : NULL;
        int keep = s && PyUnicode_CompareWithASCIIString(s, "torch.preserve_format") == 0;
        Py_XDECREF(s);
        if (!keep)
            return o ? tr_break(T, ".to(memory_format=%R) is not supported", o) : -1;
    }
    if ((int)op >= 1000)
        return cast_to(T, x, (int)op - 1000);
    int32_t in = x, cp = -1;
    int nbools = 0;   /* positional (non_blocking, copy) after the target */
    for (int i = 1; i < a->npos + a->nkw; i++) {
        int32_t v = i < a->npos ? a->pos[i] : a->kwv[i - a->npos];
        if (i >= a->npos && !PyUnicode_CompareWithASCIIString(a->kwn[i - a->npos], "copy")) {
            cp = v;
            continue;
        }
        if (i >= a->npos && PyUnicode_CompareWithASCIIString(a->kwn[i - a->npos], "dtype") &&
            PyUnicode_CompareWithASCIIString(a->kwn[i - a->npos], "device"))
            continue;   /* memory_format: checked above; non_blocking: nothing to do on the CPU */
        if (T->vals[v].kind == V_TENSOR) {
            x = cast_to(T, x, node(T, v)->dtype);
            continue;
        }
        PyObject *o = tr_const(T, v);
        if (!o)
            return -1;
        if (i > 1 && i < a->npos && PyBool_Check(o)) {
            if (++nbools == 2)
                cp = v;
            continue;
        }
        int dt = ops_dtype_of(o);
        if (dt >= 0) {
            x = cast_to(T, x, dt);
            continue;
        }
        int dev = tr_device_of(o);   /* the graph's own device: nothing to do; another: a copy */
        if (dev == -4)
            PyErr_Clear();
        if (dev < -1 || dev != (T->device >= 0 ? T->device : -1))
            return tr_break(T, ".to(%R) is not supported", o);
    }
    int copy = 0;
    if (cp >= 0 && get_bool(T, cp, 0, &copy))
        return -1;
    return copy && x == in ? copy_of(T, x) : x;   /* copy=True: a new tensor even when nothing changes */
}

static int32_t h_type_as(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    return cast_to(T, arg(a, 0, "input"), node(T, arg(a, 1, "other"))->dtype);
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

static int default_float(void);

int ops_default_float(void) { return default_float(); }

static int default_float(void)
{
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *dt = torch ? PyObject_CallMethod(torch, "get_default_dtype", NULL) : NULL;
    int r = dt ? ops_dtype_of(dt) : -1;
    Py_XDECREF(dt);
    Py_XDECREF(torch);
    PyErr_Clear();
    return r < 0 ? SMELT_F32 : r;
}

/* torch.zeros/ones/full (op: value encoded: ZEROS=ADD, ONES=MUL, FULL=CLAMP)
 * and the *_like forms (op + 100). */
static int device_arg(tracer *T, const call_args *a, int like);

static int32_t h_full(tracer *T, const call_args *a, smelt_op op)
{
    int like = (int)op >= 100;
    if (device_arg(T, a, like))
        return -1;
    int kind = like ? (int)op - 100 : (int)op;
    smelt_node p = { .op = SMELT_OP_FULL };
    int32_t valv = -1, likev = -1;
    if (like) {
        int32_t x = arg(a, 0, "input");
        if (T->vals[x].kind != V_TENSOR)
            return tr_break(T, "*_like of a non-tensor");
        p.ndim = node(T, x)->ndim;
        memcpy(p.shape, node(T, x)->shape, sizeof p.shape);
        p.dtype = (uint8_t)node(T, x)->dtype;
        valv = kind == SMELT_OP_CLAMP ? arg(a, 1, "fill_value") : -1;
        likev = x;
    } else {
        int n;
        int64_t shape[SMELT_MAX_DIMS];
        if (int_list_ex(T, a, 0, "size", shape, &n, 0))
            return -1;
        if (kind == SMELT_OP_CLAMP)   /* full(size, value): size is a sequence */
            valv = arg(a, 1, "fill_value");
        p.ndim = (uint8_t)n;
        memcpy(p.shape, shape, sizeof(int64_t) * (size_t)n);
        p.dtype = (uint8_t)default_float();   /* guarded with the global state */
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
    if (likev >= 0)
        dyn_pend_dims(T, T->vals[likev].node, 0, p.ndim);
    return mk(T, &p);
}

/* Bool [R, C] mask: col - row <= k (lower) or >= k (upper). */
static int32_t tri_mask_ex(tracer *T, int64_t R, int64_t C, int64_t k, int lower, int32_t rex, int32_t cex)
{
    smelt_node r = { .op = SMELT_OP_IOTA, .dtype = SMELT_I64, .ndim = 2, .shape = { R, C } };
    smelt_node c = r;
    r.a.axis.dim = 0;
    c.a.axis.dim = 1;
    int32_t ex[2] = { rex, cex };
    if (rex >= 0 || cex >= 0)
        dyn_pend_shape(T, ex, 2);
    int32_t ri = mk(T, &r);
    if (ri >= 0 && (rex >= 0 || cex >= 0))
        dyn_pend_shape(T, ex, 2);
    int32_t ci = ri < 0 ? -1 : mk(T, &c);
    int32_t diff = ci < 0 ? -1 : op2(T, SMELT_OP_SUB, ci, ri);
    return diff < 0 ? -1 : op2(T, lower ? SMELT_OP_LE : SMELT_OP_GE, diff, int_value(T, k));
}

static int32_t tri_mask(tracer *T, int64_t R, int64_t C, int64_t k, int lower)
{
    return tri_mask_ex(T, R, C, k, lower, -1, -1);
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
    int is_bool = n->dtype == SMELT_BOOL;   /* read before tri_mask adds nodes (and may move them) */
    int32_t xn = T->vals[x].node;
    int32_t keep = tri_mask_ex(T, n->shape[n->ndim - 2], n->shape[n->ndim - 1], k, op == SMELT_OP_LE,
                               dyn_dim_ex(T, xn, n->ndim - 2), dyn_dim_ex(T, xn, n->ndim - 1));
    int32_t zero = keep < 0 ? -1 : is_bool ? tv_obj(T, Py_False, -1) : int_value(T, 0);
    if (zero < 0)
        return -1;
    call_args w = { .pos = (int32_t[]){ keep, x, zero }, .npos = 3 };
    return h_where(T, &w, op);
}

/* split(size or sizes, dim) / chunk(chunks, dim) (op DIV): slices. */
static int32_t h_split(tracer *T, const call_args *a, smelt_op op)
{
    int sizes_only = op == SMELT_OP_SUB;   /* split_with_sizes */
    int32_t x = arg(a, 0, "input"),
            sv = arg(a, 1, op == SMELT_OP_DIV ? "chunks" : sizes_only ? "split_sizes" : "split_size_or_sections");
    int64_t sz = 0, d, sizes[256];
    int dim, n = 0;
    if (sv < 0 || T->vals[x].kind != V_TENSOR || get_int(T, arg(a, 2, "dim"), 0, &d) ||
        norm_dim(T, d, node(T, x)->ndim, &dim))
        return sv < 0 || T->vals[x].kind != V_TENSOR ? tr_break(T, "split arguments") : -1;
    int64_t len = node(T, x)->shape[dim];
    tv *s = &T->vals[sv];
    PyObject *so = s->kind == V_OBJ && PyTuple_Check(s->obj) ? tr_const(T, sv) : NULL;   /* a torch.Size */
    if (s->kind == V_OBJ && PyTuple_Check(s->obj) && !so)
        return -1;
    if (s->kind == V_TUPLE || s->kind == V_LIST || so) {   /* explicit sections */
        int cnt = so ? (int)PyTuple_GET_SIZE(so) : T->vals[sv].n;
        if (op == SMELT_OP_DIV || cnt > 256)
            return tr_break(T, "split sections");
        int64_t total = 0;
        for (int i = 0; i < cnt; i++) {
            if (so ? (sizes[n] = PyLong_AsLongLong(PyTuple_GET_ITEM(so, i))) == -1 && PyErr_Occurred()
                   : tr_int(T, T->vals[sv].items[i], &sizes[n]))
                return -1;
            total += sizes[n++];
        }
        if (total != len)
            return tr_break(T, "split sections do not sum to the dim size");
    } else {
        if (sizes_only)
            return tr_break(T, "split_with_sizes without a list of sizes (eager raises)");
        if (tr_int(T, sv, &sz))
            return -1;
        if (op == SMELT_OP_DIV)   /* chunk: sz chunks of ceil(len/sz) */
            sz = sz > 0 ? (len + sz - 1) / sz : 0;
        if (sz <= 0 || (len + sz - 1) / sz > 256)
            return tr_break(T, "split into too many pieces");
        for (int64_t at = 0; at < len; at += sz)
            sizes[n++] = at + sz < len ? sz : len - at;
        if (len == 0 && op != SMELT_OP_DIV)
            sizes[n++] = 0;
    }
    int32_t items[256];
    for (int i = 0, at = 0; i < n; at += (int)sizes[i++])
        if ((items[i] = v_slice(T, x, dim, at, at + sizes[i], 1)) < 0)
            return -1;
    return tv_tuple(T, items, n);
}

static int32_t where3(tracer *T, int32_t c, int32_t x, int32_t y);

/* Whether a gradient could flow through what the trace computes now:
 * grad mode on (turned on in the trace, or not turned off in it and on
 * outside it, which the guards check). */
static int sdpa_grad_possible(tracer *T)
{
    if (T->no_grad != 0)
        return T->no_grad < 0;
    PyObject *on = PyObject_CallMethod(PyImport_AddModule("torch"), "is_grad_enabled", NULL);
    int r = on != Py_False;   /* (unknown: as if on) */
    Py_XDECREF(on);
    PyErr_Clear();
    return r;
}

/* The SDPA graph op (flash kernel) for float32 q, k, v of one rank and an
 * optional bool/float32 mask broadcastable to [.., L, S] (padded to that
 * rank with leading 1s); -2 when the form is not one it takes (then the
 * caller decomposes into matmul + softmax + matmul). */
static int32_t sdpa_fused(tracer *T, int32_t q, int32_t k, int32_t v, int32_t mask, double scale, int causal)
{
    if (T->vals[q].kind != V_TENSOR || T->vals[k].kind != V_TENSOR || T->vals[v].kind != V_TENSOR ||
        (mask >= 0 && T->vals[mask].kind != V_TENSOR))
        return -2;
    const smelt_node *qn = node(T, q), *kn = node(T, k), *vn = node(T, v);
    int nd = qn->ndim;
    /* float16/bfloat16: on CUDA (its attention kernels take them), on the
     * CPU without autograd (its kernel takes them in the forward only) */
    int half = qn->dtype == SMELT_F16 || qn->dtype == SMELT_BF16;
    int dt_ok = qn->dtype == SMELT_F32 || (half && (T->device >= 0 || !sdpa_grad_possible(T)));
    if (!dt_ok || kn->dtype != qn->dtype || vn->dtype != qn->dtype || kn->ndim != nd ||
        vn->ndim != nd || nd < 2 || nd > 8 || (mask >= 0 && causal))
        return -2;
    for (int d = 0; d < nd - 2; d++)
        if ((kn->shape[d] != qn->shape[d] && kn->shape[d] != 1) || (vn->shape[d] != qn->shape[d] && vn->shape[d] != 1))
            return -2;
    int32_t m = -1;
    if (mask >= 0) {
        const smelt_node *mn = node(T, mask);
        if ((mn->dtype != SMELT_BOOL && mn->dtype != qn->dtype) || mn->ndim > nd)
            return -2;
        int64_t shape[SMELT_MAX_DIMS], want[2] = { qn->shape[nd - 2], kn->shape[nd - 2] };
        int pad = nd - mn->ndim;
        for (int d = 0; d < nd; d++) {
            shape[d] = d < pad ? 1 : mn->shape[d - pad];
            int64_t full = d < nd - 2 ? qn->shape[d] : want[d - (nd - 2)];
            if (shape[d] != full && shape[d] != 1)
                return -2;
        }
        if ((m = pad ? v_reshape(T, mask, shape, nd) : T->vals[mask].node) < 0)
            return -1;
        if (pad)
            m = T->vals[m].node;
    }
    smelt_node p = { .op = SMELT_OP_SDPA, .nsrc = (uint8_t)(m >= 0 ? 4 : 3),
                     .src = { T->vals[q].node, T->vals[k].node, T->vals[v].node, m } };
    p.a.sdpa.scale = scale;
    p.a.sdpa.causal = (uint8_t)(causal != 0);
    return mk(T, &p);
}

static int32_t sdpa_core(tracer *T, int32_t q, int32_t k, int32_t v, int32_t mask, double scale, int causal,
                         smelt_op op);

/* x [.., H, R, C] as [.., H/g, g, R, C] (g > 1), or with g == 0 as
 * [.., H, 1, R, C]: views, no copies. */
static int32_t split_heads(tracer *T, int32_t x, int64_t g)
{
    const smelt_node *n = node(T, x);
    int nd = n->ndim;
    int64_t shape[SMELT_MAX_DIMS];
    if (nd + 1 > SMELT_MAX_DIMS)
        return tr_break(T, "grouped-query attention of rank %d", nd);
    for (int d = 0, o = 0; d < nd; d++) {
        if (d == nd - 3) {
            shape[o++] = g ? n->shape[d] / g : n->shape[d];
            shape[o++] = g ? g : 1;
        } else {
            shape[o++] = n->shape[d];
        }
    }
    return v_reshape(T, x, shape, nd + 1);
}

/* Grouped-query attention (enable_gqa with fewer key/value heads than
 * query heads, torch's repeat_interleave rule): query heads split into
 * [kv heads, group], keys and values broadcast over the group, so the
 * attention runs on views; the result is merged back. -2: not this form. */
static int32_t sdpa_gqa(tracer *T, int32_t q, int32_t k, int32_t v, int32_t mask, double scale, int causal,
                        smelt_op op)
{
    const smelt_node *qn = node(T, q), *kn = node(T, k), *vn = node(T, v);
    int nd = qn->ndim;
    if (nd < 3 || kn->ndim != nd || vn->ndim != nd)
        return -2;
    int64_t Hq = qn->shape[nd - 3], Hk = kn->shape[nd - 3];
    if (Hk == Hq || Hk < 1 || vn->shape[nd - 3] != Hk || Hq % Hk)
        return -2;
    int64_t g = Hq / Hk, out[SMELT_MAX_DIMS];
    int32_t m = -1;
    if (!is_none(T, mask)) {   /* [.., Hq or 1, L, S] (left-padded to q's rank) */
        const smelt_node *mn = node(T, mask);
        if (T->vals[mask].kind != V_TENSOR || mn->ndim > nd)
            return -2;
        int64_t shape[SMELT_MAX_DIMS];
        int pad = nd - mn->ndim;
        for (int d = 0; d < nd; d++)
            shape[d] = d < pad ? 1 : mn->shape[d - pad];
        if (shape[nd - 3] != Hq && shape[nd - 3] != 1)
            return -2;
        m = pad ? v_reshape(T, mask, shape, nd) : mask;
        m = m < 0 ? -1 : split_heads(T, m, shape[nd - 3] == 1 ? 0 : g);
        if (m < 0)
            return -1;
    }
    int32_t qs = split_heads(T, q, g), ks = qs < 0 ? -1 : split_heads(T, k, 0);
    int32_t vs = ks < 0 ? -1 : split_heads(T, v, 0);
    int32_t r = vs < 0 ? -1 : sdpa_core(T, qs, ks, vs, m >= 0 ? m : mask, scale, causal, op);
    if (r < 0)
        return -1;
    memcpy(out, node(T, r)->shape, sizeof(int64_t) * (size_t)(nd - 3));
    out[nd - 3] = Hq;
    out[nd - 2] = qn->shape[nd - 2];
    out[nd - 1] = vn->shape[nd - 1];
    return v_reshape(T, r, out, nd);
}

static PyObject *native_mha_fn;   /* torch._native_multi_head_attention (host call) */

static int same_shape(const smelt_node *a, const smelt_node *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * a->ndim);
}

/* x @ w.T + b with w [N, K], b [N] (b may be absent: -1). */
static int32_t linear(tracer *T, int32_t x, int32_t w, int32_t b)
{
    int32_t y = matmul(T, x, v_transpose(T, w, 0, 1));
    return y < 0 || b < 0 ? y : op2(T, SMELT_OP_ADD, y, b);
}

/* Rows [i*D, (i+1)*D) of w (a weight [3D, ..] or bias [3D]). */
static int32_t third(tracer *T, int32_t w, int i, int64_t D)
{
    return w < 0 ? -1 : v_slice(T, w, 0, i * D, (i + 1) * D, 1);
}

/* x [B, L, D] as [B, H, L, D/H]. */
static int32_t heads(tracer *T, int32_t x, int64_t H)
{
    const smelt_node *n = node(T, x);
    int64_t shape[4] = { n->shape[0], n->shape[1], H, n->shape[2] / H };
    int32_t r = v_reshape(T, x, shape, 4);
    return r < 0 ? -1 : v_permute(T, r, (int[]){ 0, 2, 1, 3 });
}

/* torch._native_multi_head_attention, nn.MultiheadAttention's inference
 * fast path, as graph ops when it returns no weights and takes no mask:
 * the in-projection (one for a shared query/key/value, else a third of
 * the packed weight each), attention per head scaled by 1/sqrt(D/H), the
 * out-projection; (out, None) as torch returns it. Other forms (and
 * query/key/value of different shapes, which torch rejects) run as a host
 * call: both results are tensors then, or torch raises. */
static int32_t h_native_mha(tracer *T, const call_args *a, smelt_op op)
{
    int32_t q = arg(a, 0, "query"), k = arg(a, 1, "key"), v = arg(a, 2, "value");
    int32_t w = arg(a, 5, "qkv_weight"), b = arg(a, 6, "qkv_bias"), pw = arg(a, 7, "proj_weight");
    int32_t pb = arg(a, 8, "proj_bias");
    int64_t D, H;
    int need;
    (void)op;
    if (tr_int(T, arg(a, 3, "embed_dim"), &D) || tr_int(T, arg(a, 4, "num_head"), &H) ||
        get_bool(T, arg(a, 10, "need_weights"), 1, &need))
        return -1;
    int tensors = T->vals[q].kind == V_TENSOR && T->vals[k].kind == V_TENSOR && T->vals[v].kind == V_TENSOR &&
                  T->vals[w].kind == V_TENSOR && T->vals[pw].kind == V_TENSOR;
    if (need || !is_none(T, arg(a, 9, "mask")) || !tensors || H < 1 || D % H || node(T, q)->ndim != 3 ||
        !same_shape(node(T, q), node(T, k)) || !same_shape(node(T, q), node(T, v)) || node(T, q)->shape[2] != D ||
        !native_mha_fn)
        return native_mha_fn ? ext_call(T, native_mha_fn, a) : tr_break(T, "_native_multi_head_attention form");
    b = is_none(T, b) ? -1 : b;
    pb = is_none(T, pb) ? -1 : pb;
    int32_t qp, kp, vp;
    if (T->vals[q].node == T->vals[k].node && T->vals[k].node == T->vals[v].node) {
        int32_t qkv = linear(T, q, w, b);
        qp = qkv < 0 ? -1 : v_slice(T, qkv, 2, 0, D, 1);
        kp = qkv < 0 ? -1 : v_slice(T, qkv, 2, D, 2 * D, 1);
        vp = qkv < 0 ? -1 : v_slice(T, qkv, 2, 2 * D, 3 * D, 1);
    } else {
        qp = linear(T, q, third(T, w, 0, D), b < 0 ? -1 : third(T, b, 0, D));
        kp = linear(T, k, third(T, w, 1, D), b < 0 ? -1 : third(T, b, 1, D));
        vp = linear(T, v, third(T, w, 2, D), b < 0 ? -1 : third(T, b, 2, D));
    }
    if (qp < 0 || kp < 0 || vp < 0)
        return -1;
    int32_t o = sdpa_core(T, heads(T, qp, H), heads(T, kp, H), heads(T, vp, H), -1, 1.0 / sqrt((double)(D / H)), 0, 0);
    o = o < 0 ? -1 : v_permute(T, o, (int[]){ 0, 2, 1, 3 });
    const smelt_node *qn = o < 0 ? NULL : node(T, q);
    o = o < 0 ? -1 : v_reshape(T, o, (int64_t[]){ qn->shape[0], qn->shape[1], D }, 3);
    o = o < 0 ? -1 : linear(T, o, pw, pb);
    int32_t items[2] = { o, tv_obj(T, Py_None, -1) };
    return o < 0 || items[1] < 0 ? -1 : tv_tuple(T, items, 2);
}

/* flex attention (tracer/flex.c): op 0 flex_attention, 1 create_block_mask */
static int32_t h_flex(tracer *T, const call_args *a, smelt_op op)
{
    return op ? flex_block_mask_call(T, a) : flex_attention_call(T, a);
}

static int32_t h_sdpa(tracer *T, const call_args *a, smelt_op op)
{
    int32_t q = arg(a, 0, "query"), k = arg(a, 1, "key"), v = arg(a, 2, "value");
    int32_t mask = arg(a, 3, "attn_mask");
    int causal, gqa;
    int err = 0;
    double dp = get_float(T, arg(a, 4, "dropout_p"), 0.0, &err);
    if (err || get_bool(T, arg(a, 5, "is_causal"), 0, &causal) || get_bool(T, arg(a, -1, "enable_gqa"), 0, &gqa))
        return -1;
    if (dp > 0)
        return tr_break(T, "attention dropout is not supported yet");
    if (T->vals[q].kind != V_TENSOR || T->vals[k].kind != V_TENSOR || T->vals[v].kind != V_TENSOR ||
        node(T, q)->ndim < 2)
        return tr_break(T, "sdpa form not supported yet");
    int64_t E = node(T, q)->shape[node(T, q)->ndim - 1];
    double scale = get_float(T, arg(a, -1, "scale"), 1.0 / sqrt((double)E), &err);
    if (err)
        return -1;
    if (gqa) {
        int32_t r = sdpa_gqa(T, q, k, v, mask, scale, causal, op);
        if (r != -2)
            return r;
    }
    return sdpa_core(T, q, k, v, mask, scale, causal, op);
}

/* Attention over q, k, v as given: the SDPA op when it takes the form,
 * else matmul + softmax + matmul. */
static int32_t sdpa_core(tracer *T, int32_t q, int32_t k, int32_t v, int32_t mask, double scale, int causal,
                         smelt_op op)
{
    int32_t fused = sdpa_fused(T, q, k, v, is_none(T, mask) ? -1 : mask, scale, causal);
    if (fused != -2)
        return fused;
    /* float16/bfloat16 in float32, rounded once (ATen's CPU flash attention
     * accumulates scores, softmax and output in float) */
    int dt = node(T, q)->dtype;
    if ((dt == SMELT_F16 || dt == SMELT_BF16) && node(T, k)->dtype == dt && node(T, v)->dtype == dt) {
        int32_t mf = !is_none(T, mask) && T->vals[mask].kind == V_TENSOR && node(T, mask)->dtype == dt
                   ? cast_to(T, mask, SMELT_F32) : mask;
        int32_t r = sdpa_core(T, cast_to(T, q, SMELT_F32), cast_to(T, k, SMELT_F32), cast_to(T, v, SMELT_F32),
                              mf, scale, causal, op);
        return r < 0 ? r : cast_to(T, r, dt);
    }
    int nd = node(T, k)->ndim;
    int32_t s = matmul(T, q, v_transpose(T, k, nd - 2, nd - 1));
    s = s < 0 ? -1 : op2(T, SMELT_OP_MUL, s, num(T, scale));
    if (s >= 0 && (causal || !is_none(T, mask))) {
        int32_t m = mask;
        if (causal) {   /* attend where key index <= query index */
            int64_t L = node(T, q)->shape[node(T, q)->ndim - 2], S = node(T, k)->shape[nd - 2];
            m = tri_mask_ex(T, L, S, 0, 1, dyn_dim_ex(T, T->vals[q].node, node(T, q)->ndim - 2),
                            dyn_dim_ex(T, T->vals[k].node, nd - 2));
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
    if (p >= 0 && (causal || !is_none(T, mask))) {   /* rows with no key left: 0, as torch */
        int32_t none = red(T, SMELT_OP_ALL, op2(T, SMELT_OP_EQ, s, num(T, -INFINITY)),
                           1u << (node(T, s)->ndim - 1), 1, 0);
        p = none < 0 ? -1 : where3(T, none, num(T, 0.0), p);
    }
    return p < 0 ? -1 : matmul(T, p, v);
}

/* ---------- in-place updates, copies, layout ---------- */

/* torch.can_cast for an in-place result: never float -> integer or
 * anything -> bool. */
static int can_cast(smelt_dtype from, smelt_dtype to)
{
    if (smelt_dtype_is_float(from) && !smelt_dtype_is_float(to))
        return 0;
    return !(from != SMELT_BOOL && to == SMELT_BOOL);
}

/* The base of view value x: the node its chain of view ops starts from;
 * -1 when the chain passes an expand or unfold (an update through it would
 * write one element twice: eager raises) or is longer than 64. */
static int32_t view_base(tracer *T, int32_t x)
{
    int32_t n = T->vals[x].node;
    for (int i = 0; i < 64; i++) {
        const smelt_node *p = &T->g->nodes[n];
        if (smelt_op_kind_of((smelt_op)p->op) != SMELT_KIND_VIEW)
            return n;
        if (p->op == SMELT_OP_EXPAND || p->op == SMELT_OP_UNFOLD)
            return -1;
        n = p->src[0];
    }
    return -1;
}

/* Whether a value the running frames reach, other than x, shares storage
 * with node b (b itself, or a chain of views down to it): tr_aliased asks
 * it of a stand-in value holding b while x is hidden from its walk (a
 * Python None for the moment). 1 / 0, -1 on error. */
static int storage_shared(tracer *T, int32_t x, int32_t b)
{
    int32_t s = tv_tensor(T, b);
    if (s < 0)
        return -1;
    tv saved = T->vals[x];
    T->vals[x].kind = V_OBJ;
    T->vals[x].obj = Py_None;
    int r = tr_aliased(T, s);
    T->vals[x] = saved;
    return r;
}

/* Value x may be updated in place: a tensor made in the graph or a graph
 * input (written back after each run) that no other live value views or
 * shares, and that may not alias storage smelt does not model. A view
 * (x = out[:, :4]) may be updated when nothing else live reaches its base:
 * then x alone sees the update, and rebinding x is eager's result (1);
 * otherwise (a view of an input, or of a base still in use) the update
 * goes through view_update (2). 1 / 2 / 0 (a break) / -1. */
static int mutable_value(tracer *T, int32_t x)
{
    const smelt_node *n = node(T, x);
    if (T->vals[x].frozen)
        return tr_break(T, "in-place update of a tensor that may alias storage smelt does not see"), 0;
    if (smelt_op_kind_of((smelt_op)n->op) == SMELT_KIND_VIEW) {
        int32_t b = view_base(T, x);
        if (b >= 0 && T->g->nodes[b].op != SMELT_OP_INPUT) {
            int a = storage_shared(T, x, b);
            if (a <= 0)
                return a < 0 ? -1 : 1;   /* x alone reaches its base: rebinding x is eager's result */
        }
        return 2;   /* the base and what else holds it see the update: view_update */
    }
    int a = tr_aliased(T, x);
    if (a)
        return a < 0 ? -1 : 2;   /* live views of x see the update: view_update rebinds them */
    if (n->op != SMELT_OP_INPUT)
        return 1;
    return tr_mutate_input(T, x);   /* written back after each run */
}

static int32_t cast_to(tracer *T, int32_t x, int dt);

/* r as the value an in-place op on x leaves in x: x's shape, cast to x's
 * dtype as torch casts in-place results (never float -> int). */
int32_t ops_inplace_value(tracer *T, int32_t x, int32_t r)
{
    if (T->vals[x].kind != V_TENSOR || T->vals[r].kind != V_TENSOR)
        return tr_break(T, "in-place op on a non-tensor");
    const smelt_node *xn = node(T, x), *rn = node(T, r);
    if (rn->ndim != xn->ndim || memcmp(rn->shape, xn->shape, sizeof(int64_t) * xn->ndim))
        return tr_break(T, "in-place op would change the tensor's shape");
    if (!can_cast((smelt_dtype)rn->dtype, (smelt_dtype)xn->dtype))
        return tr_break(T, "in-place result %s cannot be cast to %s", smelt_dtype_name((smelt_dtype)rn->dtype),
                        smelt_dtype_name((smelt_dtype)xn->dtype));
    return cast_to(T, r, xn->dtype);
}

/* r, the value an in-place update leaves in x, with x's layout where
 * that is known contiguous (an update never moves eager's storage). */
static int32_t keep_layout(tracer *T, int32_t x, int32_t r)
{
    if (r < 0 || ops_eager_contiguous(T, T->vals[x].node) != 1 || ops_eager_contiguous(T, T->vals[r].node) == 1)
        return r;
    return fresh_contiguous(T, x, copy_of(T, r));
}

static int strides_contiguous(const smelt_node *n, const int64_t *stride);

/* Eager's strides of every node of the graph so far (known[i]: modelled). */
typedef struct stride_table {
    uint8_t *known;
    int64_t (*st)[SMELT_MAX_DIMS];
} stride_table;

static int eager_strides(tracer *T, int32_t id, int64_t *out);

/* A copy of eager_strides' table (its own: the caller adds nodes while it
 * reads it). */
static int strides_all(tracer *T, stride_table *t)
{
    int32_t n = T->g->n;
    int64_t one[SMELT_MAX_DIMS];
    t->known = PyMem_Calloc((size_t)n + 1, 1);
    t->st = PyMem_Calloc((size_t)n + 1, sizeof *t->st);
    if (!t->known || !t->st)
        return PyErr_NoMemory(), -1;
    if (n > 0 && eager_strides(T, n - 1, one) < 0)
        return -1;
    memcpy(t->known, T->st_known, (size_t)n);
    memcpy(t->st, T->st_tab, sizeof *t->st * (size_t)n);
    return 0;
}

static void strides_free(stride_table *t)
{
    PyMem_Free(t->known);
    PyMem_Free(t->st);
}

/* The views from node n down to the tensor whose memory they show, in
 * eager: its node into *b, the view nodes into chain (chain[0] = n, at
 * most 64). A reshape eager could not make as a view (a copy: reshape or
 * flatten of such strides) or a node known to be a fresh tensor ends the
 * chain: that copy is eager's base. 0; 1 when the chain passes an expand
 * or unfold (writing through it: eager raises); 2 when it is not known:
 * a reshape of strides smelt does not model (walked as a view) or more
 * than 64 views. *why says which. */
static int view_chain(tracer *T, const stride_table *t, int32_t n, int32_t *b, int32_t *chain, int *nc,
                      const char **why)
{
    int rc = 0;
    *nc = 0;
    *why = NULL;
    for (;;) {
        smelt_node p = T->g->nodes[n];
        if (smelt_op_kind_of((smelt_op)p.op) != SMELT_KIND_VIEW || T->contig[n])
            break;
        if ((p.op == SMELT_OP_EXPAND || p.op == SMELT_OP_UNFOLD) && !rc) {
            rc = 1;
            *why = "in-place update through an expand or unfold view";
        }
        if (p.op == SMELT_OP_RESHAPE) {
            int64_t vst[SMELT_MAX_DIMS];
            if (!t->known[p.src[0]]) {
                rc = 2;
                *why = "in-place update of a reshape of a tensor whose eager strides smelt does not model";
            } else if (!tr_reshape_strides(&T->g->nodes[p.src[0]], t->st[p.src[0]], &p, vst)) {
                break;   /* eager copied: n is the base */
            }
        }
        if (*nc == 64) {
            *why = "in-place update through more than 64 views";
            rc = 2;
            break;
        }
        chain[(*nc)++] = n;
        n = p.src[0];
    }
    *b = n;
    return rc;
}

/* View node n applied to tensor value v instead of its source. */
static int32_t replay_view(tracer *T, int32_t n, int32_t v)
{
    if (v < 0)
        return -1;
    smelt_node p = T->g->nodes[n];
    p.src[0] = T->vals[v].node;
    p.dtype = node(T, v)->dtype;
    return mk(T, &p);
}

/* x takes the value r, and so does the memory it shares with other
 * values. x's base (view_chain) becomes torch.put of r into its elements
 * at the flat positions x views (an int64 iota of the base's shape viewed
 * as x is) when x is a view, r itself when x is the base; every value
 * holding the base, a view on the way to x or any other view of the base
 * is rebound to the same view of the new base, and an input base is
 * written back after each run. x, or -1. */
/* Updates through shared storage one trace may make: each costs a host
 * call and a few kernels, so a loop of thousands (x[i] += x[i - 1]) would
 * take seconds to compile where eager takes none. */
#define MAX_VIEW_UPDATES 128

static int32_t view_update(tracer *T, int32_t x, int32_t r)
{
    int32_t chain[65], oc[64], b = -1, ob, *others = NULL;
    uint8_t *live = NULL;
    int nc = 0, onc, no = 0;
    const char *why;
    stride_table tab = { NULL, NULL };
    int32_t res = -1;
    if (++T->nviewupd > MAX_VIEW_UPDATES)
        return tr_break(T, "more than %d in-place updates through views in one trace (compile time)", MAX_VIEW_UPDATES);
    if (strides_all(T, &tab))
        goto done;
    if (view_chain(T, &tab, T->vals[x].node, &b, chain, &nc, &why)) {
        tr_break(T, "%s", why);
        goto done;
    }

    chain[nc] = b;
    int32_t holder = -1, nold = T->nvals;
    if (!(others = PyMem_Malloc(sizeof(int32_t) * 2 * ((size_t)nold + 1)))) {
        PyErr_NoMemory();
        goto done;
    }
    if (!(live = tr_live_mask(T)))
        goto done;
    for (int32_t v = 0; v < nold; v++) {
        if (T->vals[v].kind != V_TENSOR)
            continue;
        int32_t n = T->vals[v].node;
        int on_chain = 0, other = 0;
        for (int k = 0; k <= nc && !on_chain; k++)
            on_chain = n == chain[k];
        if (!on_chain && live[v]) {   /* dead values (earlier replays) are left alone */
            int rc = view_chain(T, &tab, n, &ob, oc, &onc, &why);
            other = ob == b && onc > 0;   /* another view of the base: it sees the update */
            if (other && rc == 2) {
                tr_break(T, "%s", why);
                goto done;
            }
        }
        if (!on_chain && !other)
            continue;
        if (T->vals[v].frozen) {
            tr_break(T, "in-place update of a tensor that may alias storage smelt does not see");
            goto done;
        }
        if (other)
            others[no++] = v;
        else if (n == b && (holder < 0 || (T->vals[v].src >= 0 && T->vals[holder].src < 0)))
            holder = v;
    }
    if (T->g->nodes[b].op == SMELT_OP_INPUT) {
        int m = holder < 0 ? tr_break(T, "in-place update of a view of an input without its value") : tr_mutate_input(T, holder);
        if (m <= 0)
            goto done;
    }
    if (holder < 0 && (holder = tv_tensor(T, b)) < 0)
        goto done;
    int32_t nb = r;
    if (nc > 0) {
        /* the new base (a host call's result) is modelled contiguous:
         * eager's base keeps its own layout, so it must be contiguous */
        int bc = tab.known[b] && strides_contiguous(&T->g->nodes[b], tab.st[b]);
        if (!bc) {
            tr_break(T, "in-place update of a view of a tensor eager may not hold contiguous");
            goto done;
        }
        smelt_node bn = T->g->nodes[b];
        int64_t numel = smelt_node_numel(&bn), xn = smelt_node_numel(node(T, x));
        smelt_node io = { .op = SMELT_OP_IOTA, .dtype = SMELT_I64, .ndim = 1, .shape = { numel } };
        int32_t iv = v_reshape(T, mk(T, &io), bn.shape, bn.ndim);
        for (int k = nc - 1; k >= 0; k--)
            iv = replay_view(T, chain[k], iv);
        int32_t fi = v_reshape(T, iv, &xn, 1), fr = v_reshape(T, r, &xn, 1);
        if (fi < 0 || fr < 0)
            goto done;
        if (!put_fn) {
            tr_break(T, "in-place update of a view without torch.put");
            goto done;
        }
        /* the new base: a tensor of its own (not a view), so that values
         * viewing it stay views of the input it is written back to */
        call_args c = { .pos = (int32_t[]){ holder, fi, fr }, .npos = 3 };
        if ((nb = ext_call(T, put_fn, &c)) < 0) {
            if (nb == -2)
                tr_break(T, "torch.put is not a host call");
            goto done;
        }
    }
    /* rebind: holders of level k of x's chain, then the other views */
    int32_t cur = nb, newnode[65];
    newnode[nc] = T->vals[nb].node;
    for (int k = nc - 1; k >= 0; k--) {
        if ((cur = replay_view(T, chain[k], cur)) < 0)
            goto done;
        newnode[k] = T->vals[cur].node;
    }
    int32_t *onode = others + nold + 1;   /* the other views' new nodes (applied after every walk) */
    for (int i = 0; i < no; i++) {
        view_chain(T, &tab, T->vals[others[i]].node, &ob, oc, &onc, &why);
        int32_t o = nb;
        for (int k = onc - 1; k >= 0 && o >= 0; k--)
            o = replay_view(T, oc[k], o);
        if (o < 0)
            goto done;
        onode[i] = T->vals[o].node;
    }
    for (int32_t v = 0; v < nold; v++)
        for (int k = 0; T->vals[v].kind == V_TENSOR && k <= nc; k++)
            if (T->vals[v].node == chain[k]) {
                T->vals[v].node = newnode[k];
                break;
            }
    for (int i = 0; i < no; i++)
        T->vals[others[i]].node = onode[i];
    res = x;
done:
    strides_free(&tab);
    PyMem_Free(others);
    PyMem_Free(live);
    return res;
}

/* After an in-place update whose new value is r: m from mutable_value (1:
 * rebind x; 2: view_update). */
static int32_t settle(tracer *T, int32_t x, int32_t r, int m)
{
    if (m == 2)
        return view_update(T, x, r);
    T->vals[x].node = T->vals[r].node;
    return x;
}

/* x takes the value r (x.add_(y), F.relu(x, inplace=True)): x's node is
 * rebound, so every alias of x sees it. */
int32_t ops_inplace(tracer *T, int32_t x, int32_t r)
{
    if (T->vals[x].kind == V_TENSOR && T->vals[r].kind == V_TENSOR && T->vals[r].node == T->vals[x].node)
        return x;
    int m;
    if ((r = keep_layout(T, x, ops_inplace_value(T, x, r))) < 0 || (m = mutable_value(T, x)) <= 0)
        return -1;
    return settle(T, x, r, m);
}

/* A new tensor equal to x with storage of its own (clone). */
static int32_t copy_of(tracer *T, int32_t x)
{
    if (T->vals[x].kind != V_TENSOR)
        return tr_break(T, "copy of a non-tensor");
    smelt_node p = { .op = SMELT_OP_CAST, .nsrc = 1, .src = { T->vals[x].node }, .dtype = node(T, x)->dtype };
    return mk(T, &p);
}

static int strides_contiguous(const smelt_node *n, const int64_t *stride)
{
    int64_t z = 1;
    if (!smelt_node_numel(n))
        return 1;
    for (int d = n->ndim - 1; d >= 0; d--) {
        if (n->shape[d] == 1)
            continue;
        if (stride[d] != z)
            return 0;
        z *= n->shape[d];
    }
    return 1;
}

/* Strides of operand s as TensorIterator sees it within n's shape: right
 * aligned, 0 for dims it broadcasts. */
static void operand_strides(const smelt_node *n, const smelt_node *s, const int64_t *sst, int64_t *out)
{
    int lead = n->ndim - s->ndim;
    for (int d = 0; d < n->ndim; d++)
        out[d] = d < lead || (s->shape[d - lead] == 1 && n->shape[d] != 1) ? 0 : sst[d - lead];
}

/* TensorIterator's order of dims a and b (a before b in perm, fastest
 * first): 1 when they should swap, -1 when not, 0 when no operand says.
 * The first operand whose strides differ at a and b decides; broadcast
 * dims (stride 0) are skipped; equal strides put the smaller dim first. */
static int dims_swap(const smelt_node *n, int nop, int64_t (*ost)[SMELT_MAX_DIMS], int a, int b)
{
    for (int k = 0; k < nop; k++) {
        int64_t sa = ost[k][a], sb = ost[k][b];
        if (sa == 0 || sb == 0)
            continue;
        if (sa != sb)
            return sa < sb ? -1 : 1;
        if (n->shape[a] > n->shape[b])
            return 1;
    }
    return 0;
}

/* Strides eager's element-wise op n gives its result (TensorIterator): the
 * dims sorted by the operands' strides (insertion sort from the fastest,
 * ambiguous comparisons passed over), the result dense in that order. */
static void pointwise_strides(const smelt_graph *g, const smelt_node *n, int64_t (*st)[SMELT_MAX_DIMS], int64_t *out)
{
    int64_t ost[SMELT_MAX_SRC][SMELT_MAX_DIMS];
    int perm[SMELT_MAX_DIMS], nop = 0;
    for (int k = 0; k < n->nsrc; k++)
        if (g->nodes[n->src[k]].ndim)
            operand_strides(n, &g->nodes[n->src[k]], st[n->src[k]], ost[nop++]);
    for (int d = 0; d < n->ndim; d++)
        perm[d] = n->ndim - 1 - d;
    for (int i = 1; i < n->ndim; i++)
        for (int b = i, a = i - 1; a >= 0; a--) {
            int c = dims_swap(n, nop, ost, perm[a], perm[b]);
            if (c < 0)
                break;
            if (c > 0) {
                int t = perm[a];
                perm[a] = perm[b];
                perm[b] = t;
                b = a;
            }
        }
    int64_t z = 1;
    for (int d = 0; d < n->ndim; d++) {
        out[perm[d]] = z;
        z *= n->shape[perm[d]] > 1 ? n->shape[perm[d]] : 1;
    }
}

/* Eager strides of node i given those of earlier nodes (known[j]: 1 when
 * strides[j] is known): inputs' own; views' from their source's; element-
 * wise ops' as TensorIterator lays them out; reductions, matmul and host
 * call results are contiguous, and so are nodes marked contiguous (made by
 * x.contiguous(), or the result of a composite whose eager op returns a
 * contiguous tensor) and anything else over contiguous operands; the
 * rest (a convolution of a channels-last input, ...) is not modelled. */
static int node_strides(tracer *T, int32_t i, const uint8_t *known, int64_t (*st)[SMELT_MAX_DIMS])
{
    const smelt_graph *g = T->g;
    const uint8_t *contig = T->contig;
    const smelt_node *n = &g->nodes[i];
    smelt_op_kind k = smelt_op_kind_of((smelt_op)n->op);
    int all = 1, allknown = 1;
    for (int s = 0; s < n->nsrc; s++) {
        const smelt_node *in = &g->nodes[n->src[s]];
        allknown &= in->ndim == 0 || known[n->src[s]];
        all &= in->ndim == 0 || (known[n->src[s]] && strides_contiguous(in, st[n->src[s]]));
    }
    if (n->op == SMELT_OP_INPUT) {
        memcpy(st[i], n->stride, sizeof st[i]);
        return 1;
    }
    if (contig[i] == 2 && (n->ndim == 4 || n->ndim == 5)) {   /* channels-last (dim 1 innermost) */
        int64_t z = 1;
        st[i][1] = z;
        z *= n->shape[1] > 1 ? n->shape[1] : 1;
        for (int d = n->ndim - 1; d >= 2; d--) {
            st[i][d] = z;
            z *= n->shape[d] > 1 ? n->shape[d] : 1;
        }
        st[i][0] = z;
        return 1;
    }
    if (contig[i]) {
        tr_contiguous_strides(n, st[i]);
        return 1;
    }
    if (n->op == SMELT_OP_FLIP) {   /* (wrapped in a copy) laid out as its source, densely */
        if (!known[n->src[0]])
            return 0;
        pointwise_strides(g, n, st, st[i]);
        return 1;
    }
    if (k == SMELT_KIND_VIEW)
        return known[n->src[0]] && tr_view_strides(g, n, st[n->src[0]], st[i]);
    if (k == SMELT_KIND_UNARY || k == SMELT_KIND_BINARY || k == SMELT_KIND_TERNARY) {
        if (!allknown)
            return 0;
        pointwise_strides(g, n, st, st[i]);
        return 1;
    }
    for (int32_t j = 0; n->op == SMELT_OP_CALL && j < T->nlays; j++)
        if (T->lays[j].node == i) {   /* a host call's own layout (its meta run's) */
            if (!all && !T->lays[j].faithful)
                return 0;
            memcpy(st[i], T->lays[j].st, sizeof st[i]);
            return 1;
        }
    if (!all && k != SMELT_KIND_REDUCTION && (k != SMELT_KIND_EXTERN || n->op == SMELT_OP_CONV))
        return 0;
    tr_contiguous_strides(n, st[i]);
    return 1;
}

/* The strides eager gives node id's value, into out: 1 when known, 0 when
 * smelt does not model them, -1 out of memory (error set). */
static int eager_strides(tracer *T, int32_t id, int64_t *out)
{
    int32_t n = id + 1;
    if (T->st_upto > T->g->n)   /* the graph lost nodes (a failed call): start again */
        T->st_upto = 0;
    if (n > T->st_cap) {   /* the table is kept across calls: each node is done once */
        int32_t cap = T->st_cap ? T->st_cap : 256;
        while (cap < n)
            cap *= 2;
        uint8_t *k = PyMem_Realloc(T->st_known, (size_t)cap);
        if (k)
            T->st_known = k;
        int64_t (*s)[SMELT_MAX_DIMS] = k ? PyMem_Realloc(T->st_tab, sizeof *s * (size_t)cap) : NULL;
        if (!s)
            return PyErr_NoMemory(), -1;
        T->st_tab = s;
        T->st_cap = cap;
    }
    for (int32_t i = T->st_upto; i < n; i++) {
        memset(T->st_tab[i], 0, sizeof T->st_tab[i]);
        T->st_known[i] = (uint8_t)node_strides(T, i, T->st_known, T->st_tab);
    }
    if (n > T->st_upto)
        T->st_upto = n;
    memcpy(out, T->st_tab[id], sizeof T->st_tab[id]);
    return T->st_known[id];
}

void tr_mark_layout(tracer *T, int32_t node, int layout)
{
    T->contig[node] = (uint8_t)layout;
    if (T->st_upto > node)
        T->st_upto = node;
}

void tr_mark_contig(tracer *T, int32_t node)
{
    tr_mark_layout(T, node, 1);
}

int ops_eager_strides(tracer *T, int32_t id, int64_t *out)
{
    return eager_strides(T, id, out);
}

int ops_eager_contiguous(tracer *T, int32_t id)
{
    int64_t st[SMELT_MAX_DIMS];
    int r = eager_strides(T, id, st);
    return r == 1 ? strides_contiguous(&T->g->nodes[id], st) : -1;
}

/* Whether node n with eager strides st is laid out channels-last (4-d or
 * 5-d, dense, channels innermost) and not contiguous: the memory format
 * eager's cat and pad keep. */
static int channels_last(const smelt_node *n, const int64_t *st)
{
    int64_t cl[SMELT_MAX_DIMS], z = 1;
    if ((n->ndim != 4 && n->ndim != 5) || strides_contiguous(n, st))
        return 0;
    cl[1] = z;
    z *= n->shape[1] > 1 ? n->shape[1] : 1;
    for (int d = n->ndim - 1; d >= 2; d--) {
        cl[d] = z;
        z *= n->shape[d] > 1 ? n->shape[d] : 1;
    }
    cl[0] = z;
    for (int d = 0; d < n->ndim; d++)
        if (n->shape[d] > 1 && st[d] != cl[d])
            return 0;
    return 1;
}

int tr_channels_last(const smelt_node *n, const int64_t *st)
{
    return channels_last(n, st);
}

/* 1 when tensor value x is channels-last in eager (channels_last), 0 when
 * not, -1 when its strides are not modelled or on an error. */
static int eager_channels_last(tracer *T, int32_t x)
{
    int64_t st[SMELT_MAX_DIMS];
    int k = eager_strides(T, T->vals[x].node, st);
    return k == 1 ? channels_last(node(T, x), st) : -1;
}

/* r, the result of a composite over x whose eager op returns a new
 * contiguous tensor (layer_norm, softmax, roll, ...): a node of its own (a
 * copy where the composite gave x's own node back) marked contiguous. */
static int32_t fresh_contiguous(tracer *T, int32_t x, int32_t r)
{
    if (r >= 0 && x >= 0 && T->vals[r].kind == V_TENSOR && T->vals[x].kind == V_TENSOR &&
        T->vals[r].node == T->vals[x].node)
        r = copy_of(T, r);
    if (r >= 0 && T->vals[r].kind == V_TENSOR)
        tr_mark_contig(T, T->vals[r].node);
    return r;
}

/* Tensor value y = x reshaped (RESHAPE node) as Tensor.view (is_view) or
 * reshape gives it: a view where eager's strides of x allow one; else view
 * raises (a break: eager raises its RuntimeError) and reshape copies into
 * a contiguous tensor. y, or -1. */
static int32_t view_or_copy(tracer *T, int32_t x, int32_t y, int is_view)
{
    int64_t st[SMELT_MAX_DIMS], vst[SMELT_MAX_DIMS];
    if (y < 0)
        return -1;
    int k = eager_strides(T, T->vals[x].node, st);
    if (k < 0)
        return -1;
    const smelt_node *xn = &T->g->nodes[T->vals[x].node], *yn = &T->g->nodes[T->vals[y].node];
    if (k == 1 && tr_reshape_strides(xn, st, yn, vst))
        return y;
    if (is_view)
        return tr_break(T, k ? "view of a tensor whose strides allow no view (eager raises; use reshape)"
                             : "view of a tensor whose eager strides smelt does not model");
    if (k == 1)
        tr_mark_contig(T, T->vals[y].node);   /* reshape copies */
    return y;
}

/* 1 / 0: tensor value x is / is not contiguous in eager; -1: unknown. */
static int contiguity(tracer *T, int32_t x)
{
    return ops_eager_contiguous(T, T->vals[x].node);
}

static int32_t h_is_contiguous(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    if (a->npos > 1 || a->nkw)
        return tr_break(T, "is_contiguous(memory_format=...) is not supported");
    int c = contiguity(T, arg(a, 0, "input"));
    return c < 0 ? tr_break(T, "is_contiguous of a tensor whose eager layout smelt does not model")
                 : tv_obj(T, c ? Py_True : Py_False, -1);
}

/* x.contiguous(): x itself when eager would return it; a copy when eager
 * copies; when smelt cannot tell, x with both values frozen (in-place
 * updates of either could not be modelled). */
static int32_t h_contiguous(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    (void)op;
    int c = contiguity(T, x);
    if (c == 1)
        return x;
    int32_t y = c == 0 ? copy_of(T, x) : -1;
    if (y >= 0)
        tr_mark_contig(T, T->vals[y].node);
    if (c == 0)
        return y;
    if ((y = tv_tensor(T, T->vals[x].node)) >= 0)
        T->vals[x].frozen = T->vals[y].frozen = 1;
    return y;
}

static int32_t h_clone(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    return copy_of(T, arg(a, 0, "input"));
}

/* x.zero_() / x.fill_(v) (op: FULL value source) / x.copy_(src): the new
 * value; the dispatcher writes it into x. */
static int32_t h_fill(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), v = op == SMELT_OP_FULL ? arg(a, 1, "value") : -1;
    if (T->vals[x].kind != V_TENSOR)
        return tr_break(T, "fill of a non-tensor");
    if (v >= 0 && T->vals[v].kind == V_TENSOR) {
        smelt_node p = { .op = SMELT_OP_EXPAND, .nsrc = 1, .src = { T->vals[v].node }, .ndim = node(T, x)->ndim };
        memcpy(p.shape, node(T, x)->shape, sizeof p.shape);
        return mk(T, &p);
    }
    PyObject *o = v >= 0 ? tr_const(T, v) : NULL;
    if (v >= 0 && !o)
        return -1;
    smelt_node p = { .op = SMELT_OP_FULL, .ndim = node(T, x)->ndim, .dtype = node(T, x)->dtype };
    memcpy(p.shape, node(T, x)->shape, sizeof p.shape);
    p.a.scalar.f = o ? PyFloat_AsDouble(o) : 0.0;
    p.a.scalar.i = o && PyLong_Check(o) ? PyLong_AsLongLong(o) : (int64_t)p.a.scalar.f;
    if (PyErr_Occurred())
        return -1;
    return mk(T, &p);
}

static int32_t h_copy(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), s = arg(a, 1, "src");
    (void)op;
    if (s < 0 || T->vals[s].kind != V_TENSOR)
        return tr_break(T, "copy_ from a non-tensor");
    smelt_node p = { .op = SMELT_OP_EXPAND, .nsrc = 1, .src = { T->vals[s].node }, .ndim = node(T, x)->ndim };
    memcpy(p.shape, node(T, x)->shape, sizeof p.shape);
    int32_t e = mk(T, &p);
    return e < 0 ? -1 : node(T, e)->dtype == node(T, x)->dtype ? copy_of(T, e) : cast_to(T, e, node(T, x)->dtype);
}


/* ---------- view forms eager returns as views of their input ---------- */

/* conj / resolve_conj / resolve_neg / conj_physical / positive / real of
 * a real tensor: the tensor itself (positive of bool raises). */
static int32_t h_self(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    if (x < 0 || T->vals[x].kind != V_TENSOR || (a->npos + a->nkw) != 1)
        return tr_break(T, "identity op arguments");
    if (op == SMELT_OP_NEG && node(T, x)->dtype == SMELT_BOOL)
        return tr_break(T, "positive of a bool tensor (eager raises)");
    return x;
}

/* The tensors of a call's arguments: one tensor, varargs of them, or one
 * tuple/list of them, into items (at most max); *one: a single tensor was
 * passed (not in a sequence). Count, or -1 after a break. */
static int tensor_args(tracer *T, const call_args *a, int32_t *items, int max, int *one)
{
    int n = a->npos;
    const int32_t *v = a->pos;
    *one = 0;
    if (a->nkw)
        return tr_break(T, "keyword arguments");
    if (n == 1 && (T->vals[v[0]].kind == V_TUPLE || T->vals[v[0]].kind == V_LIST)) {
        n = T->vals[v[0]].n;
        v = T->vals[v[0]].items;
    } else {
        *one = n == 1;
    }
    if (n > max)
        return tr_break(T, "too many tensors");
    for (int i = 0; i < n; i++) {
        if (T->vals[v[i]].kind != V_TENSOR)
            return tr_break(T, "expected tensors");
        items[i] = v[i];
    }
    return n;
}

/* atleast_1d / 2d / 3d (op = the rank): views with leading (and for 3d,
 * trailing) dims of size 1 added, as eager. */
static int32_t h_atleast(tracer *T, const call_args *a, smelt_op op)
{
    int32_t items[64];
    int one, n = tensor_args(T, a, items, 64, &one), want = (int)op;
    if (n < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        const smelt_node *x = node(T, items[i]);
        int64_t shape[SMELT_MAX_DIMS];
        int nd = x->ndim;
        if (nd >= want)
            continue;
        if (nd == 0)
            for (int d = 0; d < want; d++)
                shape[d] = 1;
        else if (want == 2)   /* (N) -> (1, N) */
            shape[0] = 1, shape[1] = x->shape[0];
        else if (nd == 1)     /* (N) -> (1, N, 1) */
            shape[0] = 1, shape[1] = x->shape[0], shape[2] = 1;
        else                  /* (M, N) -> (M, N, 1) */
            shape[0] = x->shape[0], shape[1] = x->shape[1], shape[2] = 1;
        if ((items[i] = v_reshape(T, items[i], shape, want)) < 0)
            return -1;
    }
    return one ? items[0] : tv_tuple(T, items, n);
}

/* broadcast_tensors: each expanded to the common shape. */
static int32_t h_broadcast_tensors(tracer *T, const call_args *a, smelt_op op)
{
    int32_t items[64];
    int one, n = tensor_args(T, a, items, 64, &one), nd = 0;
    int64_t shape[SMELT_MAX_DIMS];
    (void)op;
    if (n < 0)
        return -1;
    for (int i = 0; i < n; i++)
        nd = node(T, items[i])->ndim > nd ? node(T, items[i])->ndim : nd;
    for (int d = 0; d < nd; d++)
        shape[d] = 1;
    for (int i = 0; i < n; i++) {
        const smelt_node *x = node(T, items[i]);
        for (int d = 0; d < x->ndim; d++) {
            int64_t s = x->shape[d], *o = &shape[nd - x->ndim + d];
            if (s != 1 && *o != 1 && s != *o)
                return tr_break(T, "broadcast_tensors of shapes that do not broadcast (eager raises)");
            if (s != 1)
                *o = s;
        }
    }
    for (int i = 0; i < n; i++) {
        smelt_node p = { .op = SMELT_OP_EXPAND, .nsrc = 1, .src = { T->vals[items[i]].node }, .ndim = (uint8_t)nd };
        memcpy(p.shape, shape, sizeof shape);
        if ((items[i] = mk(T, &p)) < 0)
            return -1;
    }
    return tv_tuple(T, items, n);
}

/* meshgrid(*tensors, indexing='ij'|'xy'): 1-d (or 0-d) tensors viewed and
 * expanded to the grid. */
static int32_t h_meshgrid(tracer *T, const call_args *a, smelt_op op)
{
    int32_t items[SMELT_MAX_DIMS], iv = arg(a, -1, "indexing");
    call_args b = *a;
    int one, n;
    (void)op;
    b.nkw = 0;
    for (int k = 0; k < a->nkw; k++)
        if (PyUnicode_CompareWithASCIIString(a->kwn[k], "indexing"))
            return tr_break(T, "meshgrid keyword arguments");
    if ((n = tensor_args(T, &b, items, SMELT_MAX_DIMS, &one)) < 0)
        return -1;
    PyObject *ix = is_none(T, iv) ? NULL : tr_const(T, iv);
    if (!is_none(T, iv) && !ix)
        return -1;
    int xy = ix && PyUnicode_Check(ix) && !PyUnicode_CompareWithASCIIString(ix, "xy");
    if (ix && !xy && (!PyUnicode_Check(ix) || PyUnicode_CompareWithASCIIString(ix, "ij")))
        return tr_break(T, "meshgrid indexing=%R (eager raises)", ix);
    if (n == 0)
        return tr_break(T, "meshgrid of no tensors (eager raises)");
    int64_t grid[SMELT_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        const smelt_node *x = node(T, items[i]);
        if (x->ndim > 1 || x->dtype != node(T, items[0])->dtype)
            return tr_break(T, "meshgrid of tensors that are not 1-d or of one dtype (eager raises)");
        grid[i] = x->ndim ? x->shape[0] : 1;
    }
    if (xy && n >= 2) {   /* the first two dims swapped */
        int64_t t = grid[0];
        grid[0] = grid[1];
        grid[1] = t;
    }
    for (int i = 0; i < n; i++) {
        int pos = xy && n >= 2 && i < 2 ? 1 - i : i;
        int64_t shape[SMELT_MAX_DIMS];
        for (int d = 0; d < n; d++)
            shape[d] = d == pos ? grid[d] : 1;
        int32_t r = v_reshape(T, items[i], shape, n);
        smelt_node p = { .op = SMELT_OP_EXPAND, .nsrc = 1, .ndim = (uint8_t)n };
        if (r < 0)
            return -1;
        p.src[0] = T->vals[r].node;
        memcpy(p.shape, grid, sizeof grid);
        if ((items[i] = mk(T, &p)) < 0)
            return -1;
    }
    return tv_tuple(T, items, n);
}

/* tensor_split (op 0) and hsplit / vsplit / dsplit (op 1 / 2 / 3): views
 * of x along a dim, by a number of sections or by indices. */
static int32_t h_tensor_split(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), sv = arg(a, 1, "indices_or_sections");
    if (sv < 0)
        sv = arg(a, 1, "sections") >= 0 ? arg(a, 1, "sections") : arg(a, 1, "indices");
    if (x < 0 || sv < 0 || T->vals[x].kind != V_TENSOR)
        return tr_break(T, "tensor_split arguments");
    int nd = node(T, x)->ndim, dim;
    int64_t d = 0;
    if (op == 0 && get_int(T, arg(a, 2, "dim"), 0, &d))
        return -1;
    if (op == 1)
        d = nd == 1 ? 0 : 1;
    else if (op == 2)
        d = 0;
    else if (op == 3)
        d = 2;
    if ((op == 1 && nd < 1) || (op == 2 && nd < 2) || (op == 3 && nd < 3) || (op == 0 && nd < 1))
        return tr_break(T, "split of a tensor with too few dims (eager raises)");
    if (norm_dim(T, d, nd, &dim))
        return -1;
    int64_t len = node(T, x)->shape[dim], bounds[257];
    int n = 0;
    tv *s = &T->vals[sv];
    if (s->kind == V_TUPLE || s->kind == V_LIST) {
        if (s->n > 255)
            return tr_break(T, "split into too many pieces");
        bounds[n++] = 0;
        for (int i = 0; i < s->n; i++) {
            int64_t b;
            if (tr_int(T, s->items[i], &b))
                return -1;
            bounds[n++] = b;
        }
        bounds[n++] = len;
    } else {
        int64_t k;
        if (T->vals[sv].kind == V_TENSOR || tr_int(T, sv, &k))
            return T->vals[sv].kind == V_TENSOR ? tr_break(T, "tensor_split by a tensor") : -1;
        if (k <= 0 || k > 256 || (op && len % k))
            return tr_break(T, "split into %lld sections (eager raises)", (long long)k);
        bounds[n++] = 0;
        for (int64_t i = 0, at = 0; i < k; i++) {   /* the first len % k get one more */
            at += len / k + (i < len % k);
            bounds[n++] = at;
        }
    }
    int32_t items[256];
    for (int i = 0; i + 1 < n; i++) {
        int64_t lo = bounds[i] < 0 ? bounds[i] + len : bounds[i], hi = bounds[i + 1] < 0 ? bounds[i + 1] + len : bounds[i + 1];
        lo = lo < 0 ? 0 : lo > len ? len : lo;
        hi = hi < lo ? lo : hi > len ? len : hi;
        if ((items[i] = v_slice(T, x, dim, lo, hi, 1)) < 0)
            return -1;
    }
    return tv_tuple(T, items, n - 1);
}

/* ravel: reshape(-1) (a view where eager's strides allow one). */
static int32_t h_ravel(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    (void)op;
    if (x < 0 || T->vals[x].kind != V_TENSOR)
        return tr_break(T, "ravel of a non-tensor");
    int64_t n = smelt_node_numel(node(T, x));
    if (ops_eager_contiguous(T, T->vals[x].node) != 1)   /* eager: contiguous().view(-1) */
        x = fresh_contiguous(T, -1, copy_of(T, x));
    return x < 0 ? -1 : view_or_copy(T, x, v_reshape(T, x, &n, 1), 0);
}

/* as_strided and its kin address the storage beneath a tensor (offsets are
 * absolute, elements outside the view reachable); a graph value has no
 * such storage: eager runs them. */
static int32_t h_storage(tracer *T, const call_args *a, smelt_op op)
{
    (void)a;
    (void)op;
    return tr_break(T, "as_strided addresses the tensor's storage");
}

/* cartesian_prod of one tensor: that tensor. */
static int32_t h_cartesian_prod(tracer *T, const call_args *a, smelt_op op)
{
    int32_t items[64];
    int one, n = tensor_args(T, a, items, 64, &one);
    (void)op;
    if (n < 0)
        return -1;
    if (n != 1 || node(T, items[0])->ndim != 1)
        return tr_break(T, "cartesian_prod of several tensors");
    return items[0];
}

/* ---------- more pointwise math ---------- */

/* square: x * x (pow(x, 2) in eager: bool squares to int64). */
static int32_t h_square(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    (void)op;
    if (x >= 0 && T->vals[x].kind == V_TENSOR && node(T, x)->dtype == SMELT_BOOL)
        x = cast_to(T, x, SMELT_I64);
    return op2(T, SMELT_OP_MUL, x, x);
}

static int32_t up32(tracer *T, int32_t v);
static int32_t down_to(tracer *T, int32_t r, int32_t x);

/* lerp as eager computes it: start + w*(end-start) for |w| < 0.5, else
 * end - (end-start)*(1-w). */
static int32_t h_lerp(tracer *T, const call_args *a, smelt_op op)
{
    int32_t s = arg(a, 0, "input"), e = arg(a, 1, "end"), w = arg(a, 2, "weight");
    (void)op;
    if (s < 0 || e < 0 || w < 0 || T->vals[s].kind != V_TENSOR)
        return tr_break(T, "lerp arguments");
    int32_t s0 = s;   /* half precision: in float32, rounded once (as eager's kernel) */
    s = up32(T, s), e = up32(T, e), w = up32(T, w);
    int32_t d = op2(T, SMELT_OP_SUB, e, s);
    int32_t lo = op2(T, SMELT_OP_ADD, s, op2(T, SMELT_OP_MUL, w, d));
    int32_t hi = op2(T, SMELT_OP_SUB, e, op2(T, SMELT_OP_MUL, d, op2(T, SMELT_OP_SUB, num(T, 1.0), w)));
    if (hi < 0)
        return -1;
    if (T->vals[w].kind != V_TENSOR) {
        int err = 0;
        double wv = get_float(T, w, 0, &err);
        return err ? -1 : down_to(T, fabs(wv) < 0.5 ? lo : hi, s0);
    }
    call_args c = { .pos = (int32_t[]){ op2(T, SMELT_OP_LT, op1(T, SMELT_OP_ABS, w), num(T, 0.5)), lo, hi }, .npos = 3 };
    return c.pos[0] < 0 ? -1 : down_to(T, h_where(T, &c, op), s0);
}

/* v as float32 when it is a half-precision tensor (eager computes those
 * ops in float32 and rounds once). */
static int32_t up32(tracer *T, int32_t v)
{
    if (v < 0 || T->vals[v].kind != V_TENSOR)
        return v;
    int dt = node(T, v)->dtype;
    return dt == SMELT_F16 || dt == SMELT_BF16 ? cast_to(T, v, SMELT_F32) : v;
}

/* Result r of an op computed in float32 for input x: rounded to x's
 * half-precision dtype. */
static int32_t down_to(tracer *T, int32_t r, int32_t x)
{
    if (r < 0 || T->vals[x].kind != V_TENSOR || T->vals[r].kind != V_TENSOR)
        return r;
    int dt = node(T, x)->dtype;
    return (dt == SMELT_F16 || dt == SMELT_BF16) && node(T, r)->dtype == SMELT_F32 ? cast_to(T, r, dt) : r;
}

/* addcmul / addcdiv (op MUL / DIV): input + value * t1 op t2. */
static int32_t h_addc(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), t1 = arg(a, 1, "tensor1"), t2 = arg(a, 2, "tensor2"), v = arg(a, 3, "value");
    if (t1 < 0 || t2 < 0 || T->vals[x].kind != V_TENSOR)
        return tr_break(T, "addcmul/addcdiv arguments");
    int32_t x0 = x;
    x = up32(T, x), t1 = up32(T, t1), t2 = up32(T, t2);
    if (!is_none(T, v))
        t1 = op2(T, SMELT_OP_MUL, v, t1);
    return down_to(T, op2(T, SMELT_OP_ADD, x, op2(T, op, t1, t2)), x0);
}

static int32_t h_outer(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), y = arg(a, 1, "vec2");
    (void)op;
    if (x < 0 || y < 0 || T->vals[x].kind != V_TENSOR || T->vals[y].kind != V_TENSOR || node(T, x)->ndim != 1)
        return tr_break(T, "outer of non-vectors");
    return op2(T, SMELT_OP_MUL, v_axis(T, SMELT_OP_UNSQUEEZE, x, 1), y);
}

/* addmm / baddbmm: beta * input + alpha * (m1 @ m2), as eager: integer
 * results scale by alpha and beta truncated to integers; half-precision
 * ones compute the product and the sum in float32 and round once (eager's
 * kernel accumulates in float32 and rounds the final value). */
static int32_t h_addmm(tracer *T, const call_args *a, smelt_op op)
{
    int mv = (int)op == 1;   /* addmv(input, mat, vec) */
    int32_t x = arg(a, 0, "input"), m1 = arg(a, 1, mv ? "mat" : "mat1"), m2 = arg(a, 2, mv ? "vec" : "mat2");
    int err = 0;
    if (m1 < 0)
        m1 = arg(a, 1, "batch1"), m2 = arg(a, 2, "batch2");
    double beta = get_float(T, arg(a, -1, "beta"), 1.0, &err), alpha = err ? 0 : get_float(T, arg(a, -1, "alpha"), 1.0, &err);
    if (err || m1 < 0 || m2 < 0)
        return err ? -1 : tr_break(T, "addmm arguments");
    if (T->vals[m1].kind != V_TENSOR || T->vals[m2].kind != V_TENSOR || T->vals[x].kind != V_TENSOR)
        return tr_break(T, "addmm of a non-tensor");
    int dt = node(T, m1)->dtype;
    if (dt != node(T, m2)->dtype || dt != node(T, x)->dtype || dt == SMELT_BOOL)
        return tr_break(T, "addmm of mixed dtypes");
    if (mv && (node(T, m1)->ndim != 2 || node(T, m2)->ndim != 1))
        return tr_break(T, "addmv of other shapes (eager raises)");
    int isfloat = smelt_dtype_is_float((smelt_dtype)dt);
    if (!isfloat)
        alpha = trunc(alpha), beta = trunc(beta);
    m1 = up32(T, m1), m2 = up32(T, m2);
    int32_t x0 = x;
    x = up32(T, x);
    int32_t p = m1 < 0 || m2 < 0 || x < 0 ? -1 : matmul(T, m1, m2);
    int32_t av = isfloat ? num(T, alpha) : wrap_new(T, PyLong_FromDouble(alpha));
    int32_t bv = isfloat ? num(T, beta) : wrap_new(T, PyLong_FromDouble(beta));
    if (p >= 0 && alpha != 1.0)
        p = op2(T, SMELT_OP_MUL, p, av);
    if (p >= 0 && beta != 0.0)
        p = op2(T, SMELT_OP_ADD, p, beta == 1.0 ? x : op2(T, SMELT_OP_MUL, x, bv));
    p = down_to(T, p, x0);
    /* eager's result is a new contiguous tensor, whatever input's layout */
    return p < 0 ? -1 : fresh_contiguous(T, -1, p);
}

/* ---------- more reductions ---------- */

static int32_t h_logsumexp(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    uint32_t m;
    int keep;
    (void)op;
    if (T->vals[x].kind != V_TENSOR || dims_mask(T, arg(a, 1, "dim"), node(T, x)->ndim, &m) ||
        get_bool(T, arg(a, 2, "keepdim"), 0, &keep))
        return T->vals[x].kind != V_TENSOR ? tr_break(T, "logsumexp of a non-tensor") : -1;
    if (!smelt_dtype_is_float((smelt_dtype)node(T, x)->dtype) && (x = cast_to(T, x, default_float())) < 0)
        return -1;   /* integers and bools: in the default float, as eager */
    int32_t mx = op1(T, SMELT_OP_DETACH, red(T, SMELT_OP_AMAX, x, m, 1, 0));   /* infinite maxima shift by 0, as
                                                                            eager; shift-invariant: detached */
    call_args w = { .pos = (int32_t[]){ op1(T, SMELT_OP_ISINF, mx), num(T, 0.0), mx }, .npos = 3 };
    int32_t sh = mx < 0 ? -1 : h_where(T, &w, op);
    int32_t s = sh < 0 ? -1 : red(T, SMELT_OP_SUM, op1(T, SMELT_OP_EXP, op2(T, SMELT_OP_SUB, x, sh)), m, keep, 0);
    if (s >= 0 && !keep)
        sh = v_reshape(T, sh, node(T, s)->shape, node(T, s)->ndim);
    return s < 0 || sh < 0 ? -1 : op2(T, SMELT_OP_ADD, op1(T, SMELT_OP_LOG, s), sh);
}

/* Vector p-norm over dims: p in {2 (or "fro"), 1, inf, -inf, other > 0}. */
static int32_t pnorm_of(tracer *T, int32_t x, double p, uint32_t m, int keep);

/* Half-precision inputs: computed in float32 and rounded once, as eager's
 * kernel accumulates (their squares and powers overflow float16). */
static int32_t pnorm(tracer *T, int32_t x, double p, uint32_t m, int keep)
{
    int dt = T->vals[x].kind == V_TENSOR ? node(T, x)->dtype : -1;
    if (dt != SMELT_F16 && dt != SMELT_BF16)
        return pnorm_of(T, x, p, m, keep);
    int32_t r = pnorm_of(T, cast_to(T, x, SMELT_F32), p, m, keep);
    return r < 0 ? -1 : cast_to(T, r, dt);
}

static int32_t pnorm_of(tracer *T, int32_t x, double p, uint32_t m, int keep)
{
    int32_t ax = op1(T, SMELT_OP_ABS, x);
    if (p == 2.0)
        return op1(T, SMELT_OP_SQRT, red(T, SMELT_OP_SUM, op2(T, SMELT_OP_MUL, x, x), m, keep, 0));
    if (p == 1.0)
        return red(T, SMELT_OP_SUM, ax, m, keep, 0);
    if (isinf(p))
        return red(T, p > 0 ? SMELT_OP_AMAX : SMELT_OP_AMIN, ax, m, keep, 0);
    if (p <= 0)
        return tr_break(T, "norm with p=%d", (int)p);
    int32_t s = red(T, SMELT_OP_SUM, op2(T, SMELT_OP_POW, ax, num(T, p)), m, keep, 0);
    return op2(T, SMELT_OP_POW, s, num(T, 1.0 / p));
}

/* torch.norm / Tensor.norm / linalg.vector_norm (op MEAN: the latter's
 * argument order: ord, dim, keepdim). */
static int32_t h_norm(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), pv = arg(a, 1, op == SMELT_OP_MEAN ? "ord" : "p");
    uint32_t m;
    int keep, err = 0;
    if (T->vals[x].kind != V_TENSOR)
        return tr_break(T, "norm of a non-tensor");
    int xdt = node(T, x)->dtype, dt = dtype_arg(T, a, xdt);
    if (dt < 0)
        return -1;
    if (dt != xdt) {   /* eager casts to a wider floating dtype first (and raises for a narrower one) */
        if (!smelt_dtype_is_float((smelt_dtype)xdt) || !smelt_dtype_is_float((smelt_dtype)dt) ||
            (int)smelt_dtype_promote((smelt_dtype)xdt, (smelt_dtype)dt) != dt)
            return tr_break(T, "norm with dtype=%s of %s", smelt_dtype_name((smelt_dtype)dt), smelt_dtype_name((smelt_dtype)xdt));
        if ((x = cast_to(T, x, dt)) < 0)
            return -1;
    }
    PyObject *po = is_none(T, pv) ? NULL : tr_const(T, pv);
    if (!is_none(T, pv) && !po)
        return -1;
    double p = !po || PyUnicode_Check(po) ? 2.0 : PyFloat_AsDouble(po);
    if (po && PyUnicode_Check(po) && PyUnicode_CompareWithASCIIString(po, "fro"))
        return tr_break(T, "norm p=%R", po);
    err = PyErr_Occurred() != NULL;
    if (err || dims_mask(T, arg(a, 2, "dim"), node(T, x)->ndim, &m) || get_bool(T, arg(a, 3, "keepdim"), 0, &keep))
        return -1;
    return pnorm(T, x, p, m, keep);
}

/* ---------- more shape ops ---------- */

static int32_t h_view_as(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), o = arg(a, 1, "other");
    if (o < 0 || T->vals[o].kind != V_TENSOR)
        return tr_break(T, "view_as of a non-tensor");
    dyn_pend_dims(T, T->vals[o].node, 0, node(T, o)->ndim);   /* (other's sizes: the numels guarded equal) */
    return view_or_copy(T, x, v_reshape(T, x, node(T, o)->shape, node(T, o)->ndim), op == 1);
}

static int32_t h_unflatten(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t d, sizes[SMELT_MAX_DIMS], shape[SMELT_MAX_DIMS];
    int dim, n, nd = node(T, x)->ndim, k = 0;
    (void)op;
    if (tr_int(T, arg(a, 1, "dim"), &d) || norm_dim(T, d, nd, &dim) || int_list(T, a, 2, "sizes", sizes, &n))
        return -1;
    if (nd - 1 + n > SMELT_MAX_DIMS)
        return tr_break(T, "unflatten to too many dims");
    int32_t ex[SMELT_MAX_DIMS];   /* (symbolic sizes: x's stay, the numbers given are numbers, a -1 inferred) */
    for (int i = 0; i < nd; i++)
        if (i == dim)
            for (int j = 0; j < n; j++) {
                ex[k] = sizes[j] == -1 ? -2 : -1;
                shape[k++] = sizes[j];
            }
        else {
            ex[k] = dyn_dim_ex(T, T->vals[x].node, i);
            shape[k++] = node(T, x)->shape[i];
        }
    dyn_pend_shape(T, ex, k);
    return v_reshape(T, x, shape, k);
}

static int32_t select_at(tracer *T, int32_t x, int dim, int64_t i)
{
    int32_t s = v_slice(T, x, dim, i, i + 1, 1);
    return s < 0 ? -1 : v_axis(T, SMELT_OP_SQUEEZE, s, dim);
}

static int32_t h_select(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t d, i;
    int dim;
    (void)op;
    if (tr_int(T, arg(a, 1, "dim"), &d) || norm_dim(T, d, node(T, x)->ndim, &dim) || tr_int(T, arg(a, 2, "index"), &i))
        return -1;
    int64_t size = node(T, x)->shape[dim];
    if (i < -size || i >= size)
        return tr_break(T, "select index %lld out of range", (long long)i);
    return select_at(T, x, dim, i < 0 ? i + size : i);
}

static int32_t h_narrow(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t d, s, len;
    int dim;
    (void)op;
    if (tr_int(T, arg(a, 1, "dim"), &d) || norm_dim(T, d, node(T, x)->ndim, &dim) ||
        tr_int(T, arg(a, 2, "start"), &s) || tr_int(T, arg(a, 3, "length"), &len))
        return -1;
    int64_t size = node(T, x)->shape[dim];
    if (s < 0)
        s += size;
    if (s < 0 || len < 0 || s + len > size)
        return tr_break(T, "narrow out of range");
    return v_slice(T, x, dim, s, s + len, 1);
}

static int32_t h_unbind(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), items[256];
    int64_t d;
    int dim;
    (void)op;
    if (node(T, x)->ndim == 0)
        return tr_break(T, "unbind of a 0-d tensor (eager raises)");
    if (get_int(T, arg(a, 1, "dim"), 0, &d) || norm_dim(T, d, node(T, x)->ndim, &dim))
        return -1;
    int64_t n = node(T, x)->shape[dim];
    if (n > 256)
        return tr_break(T, "unbind into %lld tensors", (long long)n);
    for (int64_t i = 0; i < n; i++)
        if ((items[i] = select_at(T, x, dim, i)) < 0)
            return -1;
    return tv_tuple(T, items, (int)n);
}

/* x.repeat(r0, r1, ...): [1, s0, 1, s1, ...] expanded to [r0, s0, ...] and
 * merged. */
/* r, the result of an op eager returns as a new tensor, made of x by
 * views only (roll by 0, repeat by ones): a copy, so that it shares no
 * storage with x as eager's does not. */
static int32_t fresh_of(tracer *T, int32_t x, int32_t r)
{
    if (r < 0 || x < 0 || T->vals[r].kind != V_TENSOR || T->vals[x].kind != V_TENSOR ||
        tr_view_base(T->g, T->vals[r].node) != tr_view_base(T->g, T->vals[x].node))
        return r;
    return fresh_contiguous(T, -1, copy_of(T, r));
}

static int32_t h_repeat(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t r[SMELT_MAX_DIMS], in[SMELT_MAX_DIMS], out[SMELT_MAX_DIMS];
    int n, nd = node(T, x)->ndim;
    (void)op;
    if (int_list(T, a, 1, "repeats", r, &n))
        return -1;
    if (n < nd || 2 * n > SMELT_MAX_DIMS)
        return tr_break(T, "repeat with %d sizes of a %d-d tensor", n, nd);
    smelt_node e = { .op = SMELT_OP_EXPAND, .nsrc = 1, .ndim = (uint8_t)(2 * n) };
    for (int i = 0; i < n; i++) {
        int64_t s = i < n - nd ? 1 : node(T, x)->shape[i - (n - nd)];
        in[2 * i] = 1;
        in[2 * i + 1] = s;
        e.shape[2 * i] = r[i];
        e.shape[2 * i + 1] = s;
        out[i] = r[i] * s;
    }
    int32_t y = v_reshape(T, x, in, 2 * n);
    if (y < 0)
        return -1;
    e.src[0] = T->vals[y].node;
    y = mk(T, &e);
    return y < 0 ? -1 : fresh_of(T, x, v_reshape(T, y, out, n));
}

static int32_t h_diagonal(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t off, d1, d2;
    int dim1, dim2;
    (void)op;
    if (get_int(T, arg(a, 1, "offset"), 0, &off) || get_int(T, arg(a, 2, "dim1"), 0, &d1) ||
        get_int(T, arg(a, 3, "dim2"), 1, &d2) || norm_dim(T, d1, node(T, x)->ndim, &dim1) ||
        norm_dim(T, d2, node(T, x)->ndim, &dim2))
        return -1;
    smelt_node p = { .op = SMELT_OP_DIAGONAL, .nsrc = 1, .src = { T->vals[x].node } };
    p.a.diag.offset = off;
    p.a.diag.dim1 = dim1;
    p.a.diag.dim2 = dim2;
    return mk(T, &p);
}

static int32_t slice_rel(tracer *T, int32_t x, int dim, int64_t s, int64_t e, int noend);

/* roll by k along dim: cat(x[-k:], x[:-k]) (a symbolic dim and a shift
 * the caller gave as a number, not one computed from the size (computed):
 * guarded longer than |k|, for which these bounds are the shift mod its
 * size). */
static int32_t roll1(tracer *T, int32_t x, int64_t k, int dim, int computed)
{
    int64_t n = node(T, x)->shape[dim];
    int32_t len = dyn_dim_ex(T, T->vals[x].node, dim);
    if (len >= 0 && !computed && k && k > -n && k < n) {
        if (dyn_guard(T, Py_GT, len, k < 0 ? -k : k))
            return -1;
        int32_t hi = slice_rel(T, x, dim, -k, 0, 1), lo = hi < 0 ? -1 : slice_rel(T, x, dim, 0, -k, 0);
        if (lo < 0)
            return -1;
        int32_t nodes[2] = { T->vals[hi].node, T->vals[lo].node };
        return cat_nodes(T, nodes, 2, dim);
    }
    k = n ? ((k % n) + n) % n : 0;
    if (!k)
        return x;
    int32_t hi = v_slice(T, x, dim, n - k, n, 1), lo = hi < 0 ? -1 : v_slice(T, x, dim, 0, n - k, 1);
    if (lo < 0)
        return -1;
    int32_t nodes[2] = { T->vals[hi].node, T->vals[lo].node };
    return cat_nodes(T, nodes, 2, dim);
}

static int32_t h_roll(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), dv = arg(a, 2, "dims");
    int64_t k[SMELT_MAX_DIMS], d[SMELT_MAX_DIMS];
    int nk, ndv = 0;   /* op 1: shifts computed from the sizes (fftshift) */
    call_args ka = { .pos = (int32_t[]){ arg(a, 1, "shifts") }, .npos = 1 };
    call_args da = { .pos = &dv, .npos = 1 };
    if (ka.pos[0] < 0 || int_list(T, &ka, 0, NULL, k, &nk) || (!is_none(T, dv) && int_list(T, &da, 0, NULL, d, &ndv)))
        return -1;
    if (node(T, x)->ndim == 0 && ndv > 0)
        return tr_break(T, "roll of a 0-d tensor along a dim (eager raises)");
    if (is_none(T, dv)) {   /* over the flattened tensor */
        const smelt_node *n = node(T, x);
        int64_t flat = smelt_node_numel(n), shape[SMELT_MAX_DIMS];
        memcpy(shape, n->shape, sizeof shape);
        int nd = n->ndim;
        int32_t f = nk == 1 ? v_reshape(T, x, &flat, 1) : tr_break(T, "roll without dims takes one shift");
        f = f < 0 ? -1 : roll1(T, f, k[0], 0, op == 1);
        return f < 0 ? -1 : fresh_of(T, x, v_reshape(T, f, shape, nd));
    }
    if (nk != ndv)
        return tr_break(T, "roll: shifts and dims differ in length");
    for (int i = 0; x >= 0 && i < nk; i++) {
        int dim;
        if (norm_dim(T, d[i], node(T, x)->ndim, &dim))
            return -1;
        x = roll1(T, x, k[i], dim, op == 1);
    }
    return fresh_contiguous(T, arg(a, 0, "input"), fresh_of(T, arg(a, 0, "input"), x));   /* eager's roll: a new contiguous tensor */
}

/* movedim(x, source, destination) (ints or sequences of them): source
 * dims placed at destination, the others in order. */
static int32_t h_movedim(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int src[SMELT_MAX_DIMS], dst[SMELT_MAX_DIMS], ns, nd_, nd = node(T, x)->ndim, perm[SMELT_MAX_DIMS];
    (void)op;
    if (dims_of(T, arg(a, 1, "source"), nd, src, &ns) || dims_of(T, arg(a, 2, "destination"), nd, dst, &nd_))
        return -1;
    if (ns != nd_)
        return tr_break(T, "movedim source and destination lengths differ (eager raises)");
    uint32_t used = 0, placed = 0;
    for (int i = 0; i < ns; i++) {
        perm[dst[i]] = src[i];
        used |= 1u << src[i];
        placed |= 1u << dst[i];
    }
    for (int i = 0, j = 0; i < nd; i++) {   /* the other dims in order */
        if (placed >> i & 1)
            continue;
        while (used >> j & 1)
            j++;
        perm[i] = j++;
    }
    return v_permute(T, x, perm);
}

static int32_t h_broadcast_to(tracer *T, const call_args *a, smelt_op op)
{
    call_args b = *a;
    (void)op;
    return h_expand(T, &b, op);
}

/* ---------- creation ---------- */

/* The device= argument, if any, must name the CPU (the only device the
 * graph runs on). */
/* The keywords of a tensor factory smelt does not model: requires_grad
 * (a leaf that requires grad: autograd), pin_memory, a layout other than
 * strided and an explicit generator each break. 0 or -1. */
static int factory_kwargs(tracer *T, const call_args *a)
{
    int rg = 0, pin = 0;
    int32_t l = arg(a, -1, "layout"), g = arg(a, -1, "generator");
    if (get_bool(T, arg(a, -1, "requires_grad"), 0, &rg) || get_bool(T, arg(a, -1, "pin_memory"), 0, &pin))
        return -1;
    if (rg)
        return tr_break(T, "a tensor created with requires_grad=True (autograd through compiled code is not built yet)");
    if (pin)
        return tr_break(T, "a tensor created with pin_memory=True");
    if (!is_none(T, g))
        return tr_break(T, "an explicit generator= (its state is not modelled)");
    if (!is_none(T, l)) {
        PyObject *o = tr_const(T, l), *s = o ? PyObject_Str(o) : NULL;
        int strided = s && PyUnicode_CompareWithASCIIString(s, "torch.strided") == 0;
        Py_XDECREF(s);
        if (!o || PyErr_Occurred())
            return -1;
        if (!strided)
            return tr_break(T, "a tensor created with layout %R", o);
    }
    return 0;
}

/* The device= argument of a tensor factory: none (the CPU) or the CPU in
 * a graph on the CPU, the graph's CUDA device in one on CUDA (tr_device);
 * anything else breaks. */
static int device_arg(tracer *T, const call_args *a, int like)
{
    int32_t d = arg(a, -1, "device");
    if (factory_kwargs(T, a))
        return -1;
    if (is_none(T, d))   /* the CPU; for *_like, new_* and as_tensor forms the template's: the graph's */
        return like ? 0 : tr_device(T, -1, NULL);
    PyObject *o = tr_const(T, d);
    if (!o)
        return -1;
    int dev = tr_device_of(o);
    if (dev == -4) {
        PyErr_Clear();
        return tr_break(T, "tensor created on device %R", o);
    }
    return dev == -3 ? tr_break(T, "tensor created on device %R", o) : tr_device(T, dev, NULL);
}

static int device_cpu(tracer *T, const call_args *a) { return device_arg(T, a, 0); }

static int32_t h_arange(tracer *T, const call_args *a, smelt_op op)
{
    /* torch.arange(end), (start, end[, step]), end= / start= / step= keywords */
    int32_t sv = -1, ev = -1, pv = arg(a, 2, "step");
    int np = a->npos < 3 ? a->npos : 3, isf = 0;
    (void)op;
    if (np >= 2 || (np == 1 && arg(a, -1, "end") >= 0))
        sv = arg(a, 0, "start"), ev = arg(a, 1, "end");
    else
        ev = np == 1 ? a->pos[0] : arg(a, -1, "end"), sv = arg(a, -1, "start");
    if (ev < 0 || device_cpu(T, a))
        return ev < 0 ? tr_break(T, "arange without an end") : -1;
    int32_t vals[3] = { sv, ev, pv }, end_ex = -1;
    double v[3] = { 0.0, 0.0, 1.0 };
    if (T->vals[ev].kind == V_SYM) {   /* arange(T): its length is an expression */
        int64_t e;
        if (dyn_int_ex(T, ev, &e, &end_ex))
            return -1;
        v[1] = (double)e;
        vals[1] = -1;
    }
    for (int i = 0; i < 3; i++) {
        if (is_none(T, vals[i]))
            continue;
        PyObject *o = tr_const(T, vals[i]);
        if (!o)
            return -1;
        if (!PyLong_Check(o) && !PyFloat_Check(o))
            return tr_break(T, "arange of %s", Py_TYPE(o)->tp_name);
        isf |= PyFloat_Check(o);
        v[i] = PyFloat_AsDouble(o);
    }
    double start = v[0], end = v[1], step = v[2];
    int dt = dtype_arg(T, a, isf ? default_float() : SMELT_I64);
    if (dt < 0 || PyErr_Occurred())
        return -1;
    if (!smelt_dtype_is_float((smelt_dtype)dt)) {
        /* eager's size: int64 from the bounds cast to int64, other
         * integer dtypes from the bounds as given */
        if (start != floor(start) || step != floor(step))
            return tr_break(T, "integer arange with fractional bounds");
        if (dt == SMELT_I64)
            end = trunc(end);
    }
    if (step == 0 || !isfinite(start) || !isfinite(end) || (end - start) * step < 0)
        return tr_break(T, "arange with a bad step or bounds (eager raises)");
    double len = ceil((end - start) / step);
    if (len > 1e9)
        return tr_break(T, "arange of %g elements", len);
    smelt_node p = { .op = SMELT_OP_ARANGE, .dtype = (uint8_t)dt, .ndim = 1, .shape = { len > 0 ? (int64_t)len : 0 } };
    if (end_ex >= 0) {
        if (isf || start != floor(start) || step != floor(step))
            return dyn_fail(T, "a float arange up to a symbolic size");
        int32_t n = dyn_arange_len(T, end_ex, (int64_t)start, (int64_t)step);
        if (n < 0)
            return -1;
        dyn_pend_shape(T, &n, 1);
    } else {
        int32_t n = -1;   /* bounds given as numbers: a constant length */
        dyn_pend_shape(T, &n, 1);
    }
    p.a.arange.fstart = start;
    p.a.arange.fstep = step;
    p.a.arange.istart = (int64_t)start;
    p.a.arange.istep = (int64_t)step;
    return mk(T, &p);
}

static int32_t full_of(tracer *T, PyObject *o, int dt, const int64_t *shape, int nd);

/* A Python number argument (a tensor or anything else breaks). */
static int number_arg(tracer *T, int32_t v, double dflt, double *out)
{
    if (v < 0) {
        *out = dflt;
        return 0;
    }
    PyObject *o = T->vals[v].kind == V_OBJ ? tr_const(T, v) : NULL;
    if (!o)
        return T->vals[v].kind == V_OBJ ? -1 : tr_break(T, "linspace/logspace of a %s", tr_kind_name(T, v));
    if (!PyLong_Check(o) && !PyFloat_Check(o))
        return tr_break(T, "linspace/logspace of a %s", Py_TYPE(o)->tp_name);
    *out = PyFloat_AsDouble(o);
    return PyErr_Occurred() ? -1 : 0;
}

/* torch.linspace(start, end, steps) (op 0) and torch.logspace(start, end,
 * steps, base) (op 1) of a floating dtype, as ATen's kernel computes
 * them: step = (end - start) / (steps - 1) in the result's dtype, the
 * first half start + step * i, the second end - step * (steps - 1 - i)
 * (logspace: base to that power). */
static int32_t h_linspace(tracer *T, const call_args *a, smelt_op op)
{
    double s = 0, e = 0, base;
    int64_t steps;
    int32_t sv = arg(a, 0, "start"), ev = arg(a, 1, "end");
    int ts = sv >= 0 && is_tensor(T, sv), te = ev >= 0 && is_tensor(T, ev);
    if ((!ts && number_arg(T, sv, 0, &s)) || (!te && number_arg(T, ev, 0, &e)) ||
        tr_int(T, arg(a, 2, "steps"), &steps) || number_arg(T, arg(a, 3, "base"), 10.0, &base) || device_cpu(T, a))
        return -1;
    int dt = dtype_arg(T, a, default_float());
    if (dt < 0)
        return -1;
    int isf = smelt_dtype_is_float((smelt_dtype)dt);
    if (dt == SMELT_F16 || dt == SMELT_BF16)   /* eager's vector kernel rounds its steps in half precision */
        return tr_break(T, "half-precision linspace/logspace (eager's rounding is not modelled)");
    if (steps < 0 || dt == SMELT_BOOL || (ts && node(T, sv)->ndim) || (te && node(T, ev)->ndim))
        return tr_break(T, steps < 0 ? "linspace with negative steps (eager raises)"
                                     : dt == SMELT_BOOL ? "bool linspace/logspace" : "linspace of a tensor with dims (eager raises)");
    /* eager converts start and end to the result's type; an integer
     * result steps in float64 */
    int cdt = isf ? dt : SMELT_F64;
    if (!isf) {
        s = trunc(s);
        e = trunc(e);
    } else if (dt != SMELT_F64) {
        s = (double)(float)s;
        e = (double)(float)e;
    }
    int32_t S = ts ? cast_to(T, cast_to(T, sv, dt), cdt) : num(T, s), E = te ? cast_to(T, cast_to(T, ev, dt), cdt) : num(T, e);
    if (S < 0 || E < 0)
        return -1;
    if (steps <= 1) {
        int32_t r;
        if (ts) {
            r = v_reshape(T, S, (int64_t[]){ steps }, 1);
            r = r < 0 || !op ? r : op2(T, SMELT_OP_POW, num(T, base), r);
            return r < 0 ? -1 : fresh_contiguous(T, -1, copy_of(T, cast_to(T, r, dt)));
        }
        PyObject *v = PyFloat_FromDouble(op ? pow(base, s) : s);
        r = v ? full_of(T, v, dt, (int64_t[]){ steps }, 1) : -1;
        Py_XDECREF(v);
        return r;
    }
    int32_t stepv;
    if (ts || te) {
        stepv = op2(T, SMELT_OP_DIV, op2(T, SMELT_OP_SUB, E, S),
                    num(T, (double)(steps - 1)));
    } else {
        double step = (e - s) / (double)(steps - 1);
        if (dt == SMELT_F32)
            step = (double)(((float)e - (float)s) / (float)(steps - 1));
        stepv = num(T, step);
    }
    smelt_node io = { .op = SMELT_OP_IOTA, .dtype = SMELT_I64, .ndim = 1, .shape = { steps } };
    int32_t i = stepv < 0 ? -1 : mk(T, &io), fi = i < 0 ? -1 : cast_to(T, i, cdt);
    int32_t lo = fi < 0 ? -1 : op2(T, SMELT_OP_ADD, op2(T, SMELT_OP_MUL, fi, stepv), S);
    int32_t back = lo < 0 ? -1 : op2(T, SMELT_OP_SUB, num(T, (double)(steps - 1)), fi);
    int32_t hi = back < 0 ? -1 : op2(T, SMELT_OP_SUB, E, op2(T, SMELT_OP_MUL, back, stepv));
    int32_t c = hi < 0 ? -1 : op2(T, SMELT_OP_LT, i, int_value(T, steps / 2));
    int32_t r = c < 0 ? -1 : where3(T, c, lo, hi);
    if (r >= 0 && op)
        r = op2(T, SMELT_OP_POW, num(T, base), r);
    return r < 0 ? -1 : fresh_contiguous(T, -1, cast_to(T, r, dt));
}

static int32_t h_eye(tracer *T, const call_args *a, smelt_op op)
{
    int64_t n, m;
    (void)op;
    if (tr_int(T, arg(a, 0, "n"), &n) || get_int(T, arg(a, 1, "m"), n, &m) || device_cpu(T, a))
        return -1;
    int dt = dtype_arg(T, a, SMELT_F32);
    if (dt < 0)
        return -1;
    int32_t mask = tri_mask(T, n, m, 0, 1), up = mask < 0 ? -1 : tri_mask(T, n, m, 0, 0);
    int32_t eq = up < 0 ? -1 : op2(T, SMELT_OP_LOGICAL_AND, mask, up);
    return eq < 0 ? -1 : cast_to(T, eq, dt);
}

/* A FULL node of shape/dtype holding Python number o. */
static int32_t full_of(tracer *T, PyObject *o, int dt, const int64_t *shape, int nd)
{
    smelt_node p = { .op = SMELT_OP_FULL, .dtype = (uint8_t)dt, .ndim = (uint8_t)nd };
    memcpy(p.shape, shape, sizeof(int64_t) * (size_t)nd);
    double f = p.a.scalar.f = PyFloat_AsDouble(o);
    p.a.scalar.i = PyLong_Check(o) ? PyLong_AsLongLong(o) : fabs(f) < 0x1p63 ? (int64_t)f : 0;   /* inf, NaN: 0 */
    return PyErr_Occurred() ? -1 : mk(T, &p);
}

/* scalar_tensor(s, *, dtype=None, layout, device, pin_memory): a 0-d
 * tensor of the number s (the default float unless dtype= says). */
static int32_t h_scalar_tensor(tracer *T, const call_args *a, smelt_op op)
{
    int32_t v = arg(a, 0, "s");
    (void)op;
    PyObject *o = v < 0 || T->vals[v].kind != V_OBJ ? NULL : tr_const(T, v);
    if (!o || !(PyLong_Check(o) || PyFloat_Check(o)) || device_cpu(T, a))
        return T->broke || PyErr_Occurred() ? -1 : tr_break(T, "scalar_tensor of a non-number");
    int dt = dtype_arg(T, a, default_float());
    return dt < 0 ? -1 : fresh_contiguous(T, -1, full_of(T, o, dt, NULL, 0));
}

/* torch.rand / randn / randint (op 0, 1, 2) and their *_like forms (op +
 * 100): a host call of torch.rand_like / randn_like / randint_like on a
 * contiguous stand-in of the result's shape and dtype. Eager's rand(size)
 * fills a new contiguous tensor from the global generator exactly as
 * rand_like of a contiguous tensor does, and host calls run at run time in
 * program order, so the compiled program draws eager's numbers (given the
 * same seed). A *_like of a tensor eager would not hold contiguous (the
 * numbers follow its memory order), an explicit generator,
 * requires_grad=True or another memory format breaks. */
static int32_t h_random(tracer *T, const call_args *a, smelt_op op)
{
    int like = (int)op >= 100, kind = like ? (int)op - 100 : (int)op, nd = 0, dt;
    int64_t shape[SMELT_MAX_DIMS], lo = 0, hi = 0;
    int32_t x = like ? arg(a, 0, "input") : -1, first = 0;
    if (device_arg(T, a, like))
        return -1;
    if (!rand_like_fn[kind])
        return tr_break(T, "torch random factory without its *_like form");
    if (like) {
        if (x < 0 || T->vals[x].kind != V_TENSOR)
            return tr_break(T, "random *_like of a non-tensor");
        int c = ops_eager_contiguous(T, T->vals[x].node);
        if (c < 0 && PyErr_Occurred())
            return -1;
        int32_t mf = arg(a, -1, "memory_format");
        if (c != 1 || !is_none(T, mf))
            return tr_break(T, "random *_like of a tensor eager may not hold contiguous, or with memory_format");
        nd = node(T, x)->ndim;
        memcpy(shape, node(T, x)->shape, sizeof(int64_t) * (size_t)nd);
        dt = dtype_arg(T, a, node(T, x)->dtype);
        first = 1;
    } else if (kind < 2) {
        if (int_list(T, a, 0, "size", shape, &nd))
            return -1;
        dt = dtype_arg(T, a, default_float());
    } else {   /* randint(high, size), randint(low, high, size); size may be a keyword */
        int32_t sz = arg(a, -1, "size");
        if (sz < 0 && a->npos >= 2)
            sz = a->pos[a->npos - 1];
        if (sz < 0)
            return tr_break(T, "randint without a size");
        if (T->vals[sz].kind != V_TUPLE && T->vals[sz].kind != V_LIST)   /* randint(0, 5, 3): eager raises */
            return tr_break(T, "randint with a size that is not a tuple or list");
        call_args b = { .pos = &sz, .npos = 1 };
        if (int_list(T, &b, 0, "size", shape, &nd))
            return -1;
        dt = dtype_arg(T, a, SMELT_I64);
    }
    if (dt < 0)
        return -1;
    if (kind == 2) {   /* low and high: the ints before the size (after the input) */
        int nint = a->npos - first - (!like && arg(a, -1, "size") < 0 ? 1 : 0);
        int32_t lv = nint >= 2 ? a->pos[first] : arg(a, -1, "low");
        int32_t hv = nint >= 2 ? a->pos[first + 1] : nint == 1 ? a->pos[first] : arg(a, -1, "high");
        if (hv < 0 || (lv >= 0 && tr_int(T, lv, &lo)) || tr_int(T, hv, &hi))
            return hv < 0 ? tr_break(T, "randint without high") : -1;
    }
    PyObject *zero = PyLong_FromLong(0);
    int32_t src = zero ? full_of(T, zero, dt, shape, nd) : -1;
    Py_XDECREF(zero);
    if (src < 0)
        return -1;
    call_args c = { .pos = (int32_t[]){ src, tv_int(T, lo), tv_int(T, hi) }, .npos = kind == 2 ? 3 : 1 };
    int32_t r = ext_call(T, rand_like_fn[kind], &c);
    return r == -2 ? tr_break(T, "random factory is not a host call") : r;
}

/* The host call torch.manual_seed becomes: seed_call(stand_in, seed)
 * seeds the generators as eager's call does when run (a CPU stand-in)
 * and does nothing in the tracer's meta run; either way it returns an
 * empty tensor like its stand-in (the CALL node's result, unused). */
static PyObject *seed_call(PyObject *self, PyObject *args)
{
    PyObject *t, *seed;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO:seed_call", &t, &seed))
        return NULL;
    PyObject *meta = PyObject_GetAttrString(t, "is_meta");
    if (!meta)
        return NULL;
    int is_meta = meta == Py_True;
    Py_DECREF(meta);
    if (!is_meta) {
        PyObject *g = PyObject_CallOneArg(manual_seed_fn, seed);
        if (!g)
            return NULL;
        Py_DECREF(g);
    }
    return PyObject_CallMethod(t, "new_empty", "((i))", 0);
}

static PyMethodDef seed_call_def = { "smelt_manual_seed", seed_call, METH_VARARGS, NULL };

/* torch.manual_seed(seed): a host call run in program order with the
 * graph's random draws (seed_call), so what follows draws eager's
 * numbers; the value is torch's default generator, as eager's. */
static int32_t h_manual_seed(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    int64_t s;
    int32_t sv = arg(a, 0, "seed");
    if (!seed_call_fn || !default_generator || sv < 0 || a->npos + a->nkw != 1)
        return tr_break(T, "torch.manual_seed form not supported");
    if (tr_int(T, sv, &s))
        return -1;
    PyObject *zero = PyLong_FromLong(0);
    int32_t src = zero ? full_of(T, zero, SMELT_F32, (int64_t[]){ 0 }, 1) : -1;
    Py_XDECREF(zero);
    if (src < 0)
        return -1;
    call_args c = { .pos = (int32_t[]){ src, tv_int(T, s) }, .npos = 2 };
    int32_t r = ext_call(T, seed_call_fn, &c);
    if (r < 0)
        return r == -2 ? tr_break(T, "torch.manual_seed is not a host call") : -1;
    return tv_obj(T, default_generator, -1);
}

/* Flattens nested lists of numbers into items (at most 256), their shape
 * into shape/nd and the widest kind into *kind (0 bool, 1 int, 2 float). */
static int flatten_numbers(tracer *T, PyObject *o, int depth, PyObject **items, int *n, int64_t *shape, int *nd, int *kind)
{
    if (PyBool_Check(o) || PyLong_Check(o) || PyFloat_Check(o)) {
        if (*n >= 256)
            return tr_break(T, "torch.tensor of over 256 numbers");
        *kind = PyFloat_Check(o) ? 2 : PyBool_Check(o) ? (*kind > 0 ? *kind : 0) : (*kind > 1 ? 2 : 1);
        items[(*n)++] = o;
        if (depth != *nd && *nd >= 0)
            return tr_break(T, "torch.tensor of a ragged list");
        *nd = depth;
        return 0;
    }
    if (!PyList_Check(o) && !PyTuple_Check(o))
        return tr_break(T, "torch.tensor of %s", Py_TYPE(o)->tp_name);
    Py_ssize_t len = PySequence_Fast_GET_SIZE(o);
    if (depth >= SMELT_MAX_DIMS || (shape[depth] >= 0 && shape[depth] != len))
        return tr_break(T, "torch.tensor of a ragged list");
    shape[depth] = len;
    for (Py_ssize_t i = 0; i < len; i++)
        if (flatten_numbers(T, PySequence_Fast_GET_ITEM(o, i), depth + 1, items, n, shape, nd, kind))
            return -1;
    if (len == 0 && *nd < 0)
        *nd = depth + 1;
    return 0;
}

/* torch.tensor(data): numbers as FULL nodes, joined by CAT. */
static int32_t h_tensor(tracer *T, const call_args *a, smelt_op op)
{
    int32_t dv = arg(a, 0, "data");
    PyObject *items[256], *o = dv >= 0 ? tr_pyobj(T, dv) : NULL;
    int64_t shape[SMELT_MAX_DIMS];
    int n = 0, nd = -1, kind = 0;
    (void)op;
    for (int i = 0; i < SMELT_MAX_DIMS; i++)
        shape[i] = -1;
    if (!o || device_cpu(T, a) || flatten_numbers(T, o, 0, items, &n, shape, &nd, &kind)) {
        Py_XDECREF(o);
        return -1;
    }
    int dt = dtype_arg(T, a, kind == 2 ? default_float() : kind == 1 ? SMELT_I64 : SMELT_BOOL);
    int32_t nodes[256], r = -1;
    for (int i = 0; dt >= 0 && i < n; i++) {
        int32_t f = full_of(T, items[i], dt, (int64_t[]){ 1 }, nd ? 1 : 0);
        if (f < 0)
            break;
        nodes[i] = T->vals[f].node;
        r = i == n - 1 ? 0 : r;
    }
    if (dt >= 0 && n == 0)
        r = full_of(T, Py_False, dt, (int64_t[]){ 0 }, 1);
    else if (r == 0)
        r = nd == 0 ? tv_tensor(T, nodes[0]) : cat_nodes(T, nodes, n, 0);
    Py_DECREF(o);
    return r < 0 || nd <= 1 ? r : v_reshape(T, r, shape, nd);
}

/* x.new_zeros / new_ones / new_full / new_empty (op: ADD / MUL / CLAMP /
 * SUB): x's dtype unless dtype= is given; empty is zeros. */
static int32_t h_new_full(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t shape[SMELT_MAX_DIMS];
    int n;
    if (device_arg(T, a, 1) || int_list_ex(T, a, 1, "size", shape, &n, 0))
        return -1;
    int dt = dtype_arg(T, a, node(T, x)->dtype);
    int32_t fv = op == SMELT_OP_CLAMP ? arg(a, 2, "fill_value") : -1;
    if (dt < 0 || (op == SMELT_OP_CLAMP && fv < 0))
        return dt < 0 ? -1 : tr_break(T, "new_full without a value");
    PyObject *o = fv >= 0 ? Py_XNewRef(tr_const(T, fv)) : PyLong_FromLong(op == SMELT_OP_MUL);
    int32_t r = o ? full_of(T, o, dt, shape, n) : -1;
    Py_XDECREF(o);
    return r;
}



static int32_t h_is_floating_point(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    return tv_obj(T, smelt_dtype_is_float(node(T, arg(a, 0, "input"))->dtype) ? Py_True : Py_False, -1);
}

/* torch.result_type(tensor or number, tensor or number): what the
 * promotion rules give for these dtypes and ranks (a dimensioned tensor
 * outranks a 0-d one outranks a number), answered at trace time by
 * torch.result_type on empty stand-ins of the same dtypes and ranks. */
static int32_t h_result_type(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    if (a->npos != 2 || a->nkw)
        return tr_break(T, "torch.result_type arguments");
    static PyObject *empty_fn, *result_type_fn;
    if (!empty_fn) {
        PyObject *torch = PyImport_ImportModule("torch");
        empty_fn = torch ? PyObject_GetAttrString(torch, "empty") : NULL;
        result_type_fn = torch ? PyObject_GetAttrString(torch, "result_type") : NULL;
        Py_XDECREF(torch);
        if (!empty_fn || !result_type_fn)
            return -1;
    }
    PyObject *args[2] = { NULL, NULL }, *r = NULL;
    for (int i = 0; i < 2; i++) {
        int32_t v = a->pos[i];
        if (T->vals[v].kind == V_TENSOR) {
            const smelt_node *n = node(T, v);
            PyObject *kw = Py_BuildValue("{s:O}", "dtype", torch_dtypes[n->dtype]);
            PyObject *shape = n->ndim ? Py_BuildValue("((i))", 0) : Py_BuildValue("(())");
            args[i] = kw && shape ? PyObject_Call(empty_fn, shape, kw) : NULL;
            Py_XDECREF(kw);
            Py_XDECREF(shape);
        } else {
            args[i] = Py_XNewRef(tr_const(T, v));
        }
        if (!args[i])
            goto out;
    }
    if (!(r = PyObject_CallFunctionObjArgs(result_type_fn, args[0], args[1], NULL)))
        tr_raise_error(T);
out:
    Py_XDECREF(args[0]);
    Py_XDECREF(args[1]);
    if (!r)
        return -1;
    int32_t v = tv_obj(T, r, -1);
    Py_DECREF(r);
    return v;
}

/* torch.promote_types, torch.can_cast: functions of dtypes, answered now. */
static int32_t dtype_query(tracer *T, PyObject *fn, const call_args *a, int first)
{
    (void)first;
    return bi_pure(T, a, fn);
}

static int32_t h_element_size(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    return int_value(T, (int64_t)smelt_dtype_size((smelt_dtype)node(T, arg(a, 0, "input"))->dtype));
}

/* ---------- activations ---------- */

static int32_t where3(tracer *T, int32_t c, int32_t x, int32_t y)
{
    call_args w = { .pos = (int32_t[]){ c, x, y }, .npos = 3 };
    return c < 0 || x < 0 || y < 0 ? -1 : h_where(T, &w, 0);
}

static double farg(tracer *T, const call_args *a, int i, const char *name, double dflt, int *err)
{
    return *err ? 0 : get_float(T, arg(a, i, name), dflt, err);
}

/* leaky_relu / elu / celu / selu (op: the variant as MUL / EXP / EXPM1 / ABS). */
static int32_t h_relu_family(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int err = 0;
    int32_t pos = op2(T, SMELT_OP_GT, x, num(T, 0.0)), neg;
    if (op == SMELT_OP_MUL) {   /* leaky_relu */
        neg = op2(T, SMELT_OP_MUL, x, num(T, farg(T, a, 1, "negative_slope", 0.01, &err)));
        return err ? -1 : where3(T, pos, x, neg);
    }
    double alpha = op == SMELT_OP_ABS ? 1.6732632423543772848170429916717 : farg(T, a, 1, "alpha", 1.0, &err);
    if (err)
        return -1;
    int32_t arg_x = op == SMELT_OP_EXPM1 ? op2(T, SMELT_OP_DIV, x, num(T, alpha)) : x;   /* celu: x / alpha */
    neg = op2(T, SMELT_OP_MUL, op1(T, SMELT_OP_EXPM1, arg_x), num(T, alpha));
    int32_t y = where3(T, pos, x, neg);
    return op == SMELT_OP_ABS ? op2(T, SMELT_OP_MUL, y, num(T, 1.0507009873554804934193349852946)) : y;
}

/* softplus: log1p(exp(beta x)) / beta, x itself above threshold / beta. */
static int32_t softplus(tracer *T, int32_t x, double beta, double threshold)
{
    int32_t bx = beta == 1.0 ? x : op2(T, SMELT_OP_MUL, x, num(T, beta));
    int32_t sp = op1(T, SMELT_OP_LOG1P, op1(T, SMELT_OP_EXP, bx));
    if (beta != 1.0)
        sp = op2(T, SMELT_OP_DIV, sp, num(T, beta));
    return where3(T, op2(T, SMELT_OP_GT, bx, num(T, threshold)), x, sp);
}

static int32_t h_softplus(tracer *T, const call_args *a, smelt_op op)
{
    int err = 0;
    double beta = farg(T, a, 1, "beta", 1.0, &err), th = farg(T, a, 2, "threshold", 20.0, &err);
    (void)op;
    return err ? -1 : softplus(T, arg(a, 0, "input"), beta, th);
}

/* clamp(x, lo, hi) with bounds in x's domain (an integer tensor clamps to
 * the truncated bounds and stays integral, as eager's hardtanh does). */
static int32_t clamp_num(tracer *T, int32_t x, double lo, double hi)
{
    int is_int = x >= 0 && T->vals[x].kind == V_TENSOR && !smelt_dtype_is_float(node(T, x)->dtype);
    int32_t l = is_int ? int_value(T, (int64_t)lo) : num(T, lo), h = is_int ? int_value(T, (int64_t)hi) : num(T, hi);
    return l < 0 || h < 0 ? -1 : clamp_to(T, x, l, h);
}

/* hardtanh / relu6 (op CLAMP / RELU). */
static int32_t h_hardtanh(tracer *T, const call_args *a, smelt_op op)
{
    int err = 0;
    double lo = op == SMELT_OP_RELU ? 0.0 : farg(T, a, 1, "min_val", -1.0, &err);
    double hi = op == SMELT_OP_RELU ? 6.0 : farg(T, a, 2, "max_val", 1.0, &err);
    if (!err && lo > hi)
        return tr_break(T, "hardtanh with min_val > max_val (eager raises)");
    return err ? -1 : clamp_num(T, arg(a, 0, "input"), lo, hi);
}

/* hardsigmoid / hardswish (op SIGMOID / MUL): clamp(x + 3, 0, 6) / 6 (times x).
 * The clamp's gradient flows only strictly inside (-3, 3), as eager's
 * hardsigmoid/hardswish_backward (the clamp's own would include the ends:
 * hardswish's gradient -0.5 at -3, 1.5 at 3, where eager's is 0 and 1). */
static int32_t h_hard(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int32_t s = op2(T, SMELT_OP_ADD, x, num(T, 3.0)), c = clamp_num(T, s, 0.0, 6.0);
    int32_t in = op2(T, SMELT_OP_LOGICAL_AND, op2(T, SMELT_OP_GT, x, num(T, -3.0)), op2(T, SMELT_OP_LT, x, num(T, 3.0)));
    int32_t cg = in < 0 || c < 0 ? -1 : where3(T, in, s, op1(T, SMELT_OP_DETACH, c));
    int32_t h = cg < 0 ? -1 : op2(T, SMELT_OP_DIV, cg, num(T, 6.0));
    return op == SMELT_OP_MUL ? op2(T, SMELT_OP_MUL, x, h) : h;
}

/* F.mish: x tanh(log1p(e^x)) = x n / (n + 2) with n = e^x (e^x + 2) (the
 * same value: one exp and a division instead of exp, log1p and tanh; no
 * cancellation), x itself above 20 (tanh of the softplus is 1 there);
 * float16/bfloat16 computed in float32 and rounded once, as eager. */
static int32_t h_mish(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x0 = arg(a, 0, "input");
    (void)op;
    if (T->vals[x0].kind != V_TENSOR)
        return tr_break(T, "mish of a non-tensor");
    int dt = node(T, x0)->dtype;
    int32_t x = cast_to(T, x0, dt == SMELT_F16 || dt == SMELT_BF16 ? SMELT_F32 : dt);
    /* n and the rest in float64 (from float32 e^x: its error alone, ~1 ULP,
     * reaches the result), rounded once; float16/bfloat16 inputs included */
    int wide = dt != SMELT_F64;
    int32_t e, ed;
    if (wide) {   /* below -80, e^x = e^(x + 64) e^-64 (x + 64 exact): float32 e^x would be denormal */
        int32_t low = op2(T, SMELT_OP_LT, x, num(T, -80.0)), b = cast_to(T, low, SMELT_F64);
        e = op1(T, SMELT_OP_EXP, where3(T, low, op2(T, SMELT_OP_ADD, x, num(T, 64.0)), x));
        ed = op2(T, SMELT_OP_MUL, cast_to(T, e, SMELT_F64),
                 op2(T, SMELT_OP_ADD, op2(T, SMELT_OP_MUL, b, num(T, exp(-64.0))), op2(T, SMELT_OP_SUB, num(T, 1.0), b)));
    } else {
        e = ed = op1(T, SMELT_OP_EXP, x);
    }
    int32_t xd = wide ? cast_to(T, x, SMELT_F64) : x;
    int32_t n = op2(T, SMELT_OP_MUL, ed, op2(T, SMELT_OP_ADD, ed, num(T, 2.0)));
    /* n / (n + 2) as 1 / (1 + 2/n): n used once, so it fuses (0 at n = 0) */
    int32_t y = op2(T, SMELT_OP_DIV, xd, op2(T, SMELT_OP_ADD, op2(T, SMELT_OP_DIV, num(T, 2.0), n), num(T, 1.0)));
    y = wide ? cast_to(T, y, node(T, x)->dtype) : y;
    y = where3(T, op2(T, SMELT_OP_GT, x, num(T, 20.0)), x, y);
    return y < 0 ? -1 : cast_to(T, y, dt);
}

/* logsigmoid: min(x, 0) - log1p(exp(-|x|)); half precision in float32,
 * rounded once (eager's kernel). */
static int32_t logsigmoid(tracer *T, int32_t x)
{
    int dt = is_tensor(T, x) ? node(T, x)->dtype : -1;
    int half = dt == SMELT_F16 || dt == SMELT_BF16;
    if (half)
        x = cast_to(T, x, SMELT_F32);
    int32_t m = op2(T, SMELT_OP_MINIMUM, x, num(T, 0.0));
    int32_t r = op2(T, SMELT_OP_SUB, m, op1(T, SMELT_OP_LOG1P, op1(T, SMELT_OP_EXP, op1(T, SMELT_OP_NEG, op1(T, SMELT_OP_ABS, x)))));
    return half ? cast_to(T, r, dt) : r;
}

static int32_t h_logsigmoid(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    return logsigmoid(T, arg(a, 0, "input"));
}

/* softsign / tanhshrink (op DIV / SUB). */
static int32_t h_shrinkish(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    if (op == SMELT_OP_SUB)
        return op2(T, SMELT_OP_SUB, x, op1(T, SMELT_OP_TANH, x));
    return op2(T, SMELT_OP_DIV, x, op2(T, SMELT_OP_ADD, op1(T, SMELT_OP_ABS, x), num(T, 1.0)));
}

/* hardshrink / softshrink (op ABS / SUB). */
static int32_t h_shrink(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int err = 0;
    double l = farg(T, a, 1, "lambd", 0.5, &err);
    if (err)
        return -1;
    if (op != SMELT_OP_ABS && !(l >= 0))
        return tr_break(T, "softshrink with a negative lambda (eager raises)");
    int32_t zero = num(T, 0.0);
    if (op == SMELT_OP_ABS)   /* hardshrink: 0 inside [-l, l] */
        return where3(T, op2(T, SMELT_OP_LOGICAL_AND, op2(T, SMELT_OP_GE, x, num(T, -l)), op2(T, SMELT_OP_LE, x, num(T, l))),
                      zero, x);
    int32_t inside = op2(T, SMELT_OP_MUL, x, zero);   /* x * 0: NaN stays NaN, -0.0 as eager */
    int32_t below = where3(T, op2(T, SMELT_OP_LT, x, num(T, -l)), op2(T, SMELT_OP_ADD, x, num(T, l)), inside);
    return where3(T, op2(T, SMELT_OP_GT, x, num(T, l)), op2(T, SMELT_OP_SUB, x, num(T, l)), below);
}

/* threshold: value where x <= threshold (NaN stays NaN, as in eager). */
static int32_t h_threshold(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), v = arg(a, 2, "value");
    int err = 0;
    double th = farg(T, a, 1, "threshold", 0.0, &err);
    (void)op;
    if (err || v < 0)
        return err ? -1 : tr_break(T, "threshold without a value");
    return where3(T, op2(T, SMELT_OP_LE, x, num(T, th)), v, x);
}

/* F.softmin(x, dim, dtype=): softmax(-x.to(dtype)) (eager casts first). */
static int32_t h_softmin(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int cdt;
    (void)op;
    if (x < 0 || T->vals[x].kind != V_TENSOR || arg(a, 1, "dim") < 0)
        return tr_break(T, "softmin of a non-tensor or without dim");
    if (node(T, x)->dtype == SMELT_BOOL)
        return tr_break(T, "softmin of a bool tensor (eager raises)");
    /* eager: (-input).softmax(dim, dtype=dtype): negated in input's dtype */
    int32_t n = op1(T, SMELT_OP_NEG, x);
    if (n < 0 || softmax_dtype(T, a, &cdt) || (cdt >= 0 && (n = cast_to(T, n, cdt)) < 0))
        return -1;
    if (!smelt_dtype_is_float((smelt_dtype)node(T, n)->dtype))
        return tr_break(T, "softmin of a %s tensor (eager raises)", smelt_dtype_name((smelt_dtype)node(T, n)->dtype));
    call_args b = { .pos = (int32_t[]){ n, arg(a, 1, "dim") }, .npos = 2 };
    return n < 0 ? -1 : h_softmax(T, &b, SMELT_OP_EXP);
}

static int32_t h_glu(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t d;
    int dim;
    (void)op;
    if (T->vals[x].kind != V_TENSOR || get_int(T, arg(a, 1, "dim"), -1, &d) || norm_dim(T, d, node(T, x)->ndim, &dim))
        return T->vals[x].kind != V_TENSOR ? tr_break(T, "glu of a non-tensor") : -1;
    int64_t n = node(T, x)->shape[dim];
    if (n % 2)
        return tr_break(T, "glu over an odd size");
    int32_t h = v_slice(T, x, dim, 0, n / 2, 1), g = h < 0 ? -1 : v_slice(T, x, dim, n / 2, n, 1);
    return g < 0 ? -1 : op2(T, SMELT_OP_MUL, h, op1(T, SMELT_OP_SIGMOID, g));
}

/* A per-channel parameter (shape [C]) shaped to broadcast over dim 1 of an
 * nd-dim input. */
static int32_t channel_param(tracer *T, int32_t w, int nd)
{
    if (is_none(T, w) || T->vals[w].kind != V_TENSOR || nd < 2 || node(T, w)->ndim != 1)
        return w;
    int64_t shape[SMELT_MAX_DIMS];
    shape[0] = node(T, w)->shape[0];
    for (int d = 1; d < nd - 1; d++)
        shape[d] = 1;
    return v_reshape(T, w, shape, nd - 1);
}

static int32_t h_prelu(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), w = arg(a, 1, "weight");
    (void)op;
    if (T->vals[x].kind != V_TENSOR || w < 0 || T->vals[w].kind != V_TENSOR)
        return tr_break(T, "prelu arguments");
    if (node(T, x)->ndim == 0 || (node(T, x)->ndim < 2 && smelt_node_numel(node(T, w)) != 1))
        return tr_break(T, "prelu of a 0-d input or a channel weight for an input without channels (eager raises)");
    if (smelt_node_numel(node(T, w)) != 1 && node(T, w)->ndim != 1)
        return tr_break(T, "prelu with a weight that is not 1-d");
    int32_t ws = smelt_node_numel(node(T, w)) == 1 ? w : channel_param(T, w, node(T, x)->ndim);
    return where3(T, op2(T, SMELT_OP_GT, x, num(T, 0.0)), x, op2(T, SMELT_OP_MUL, ws, x));
}

/* ---------- normalisation, losses ---------- */

static int32_t h_group_norm(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t g;
    int err = 0;
    double eps = farg(T, a, 4, "eps", 1e-5, &err);
    (void)op;
    if (err || T->vals[x].kind != V_TENSOR || tr_int(T, arg(a, 1, "num_groups"), &g))
        return T->vals[x].kind != V_TENSOR ? tr_break(T, "group_norm of a non-tensor") : -1;
    const smelt_node *n = node(T, x);
    int nd = n->ndim;
    if (nd < 2 || g <= 0 || n->shape[1] % g)
        return tr_break(T, "group_norm: channels not divisible by groups");
    if (dyn_guard(T, Py_EQ, dyn_dim_ex(T, T->vals[x].node, 1), n->shape[1]))   /* (channels: divisible as traced) */
        return -1;
    int64_t shape[SMELT_MAX_DIMS], grouped[3] = { n->shape[0], g, smelt_node_numel(n) / (n->shape[0] ? n->shape[0] * g : 1) };
    memcpy(shape, n->shape, sizeof shape);
    int32_t x0 = x, gex[3] = { dyn_dim_ex(T, T->vals[x].node, 0), -1, -2 };
    x = up32(T, x);
    if (x >= 0)   /* (symbolic sizes: [n, groups, the rest], and back to x's) */
        dyn_pend_shape(T, gex, 3);
    int32_t xg = x < 0 ? -1 : v_reshape(T, x, grouped, 3);
    int32_t mu = xg < 0 ? -1 : red(T, SMELT_OP_MEAN, xg, 4, 1, 0);
    int32_t xc = mu < 0 ? -1 : op2(T, SMELT_OP_SUB, xg, mu);
    int32_t var = xc < 0 ? -1 : red(T, SMELT_OP_MEAN, op2(T, SMELT_OP_MUL, xc, xc), 4, 1, 0);
    int32_t y = var < 0 ? -1 : op2(T, SMELT_OP_MUL, xc, op1(T, SMELT_OP_RSQRT, op2(T, SMELT_OP_ADD, var, num(T, eps))));
    if (y >= 0)
        dyn_pend_dims(T, T->vals[x0].node, 0, nd);
    y = y < 0 ? -1 : v_reshape(T, y, shape, nd);
    y = y < 0 ? -1 : affine(T, y, up32(T, channel_param(T, arg(a, 2, "weight"), nd)),
                            up32(T, channel_param(T, arg(a, 3, "bias"), nd)));
    return down_to(T, y, x0);
}

/* A running statistic updated in place as torch's batch_norm does:
 * stat = (1 - m) * stat + m * batch (batch: [1, C, 1..] -> [C]). */
static int32_t running_update(tracer *T, int32_t stat, int32_t batch, double m)
{
    int64_t c = node(T, stat)->shape[0];
    int32_t b = v_reshape(T, batch, &c, 1);
    int32_t u = b < 0 ? -1 : op2(T, SMELT_OP_ADD, op2(T, SMELT_OP_MUL, up32(T, stat), num(T, 1.0 - m)),
                                 op2(T, SMELT_OP_MUL, b, num(T, m)));
    return u < 0 ? -1 : ops_inplace(T, stat, cast_to(T, u, node(T, stat)->dtype));
}

/* batch_norm in training mode: normalised by the batch's mean and biased
 * variance over every dim but 1; running statistics, when given, updated
 * in place with momentum m (the variance unbiased), written back to the
 * module's buffers after each run. */
static int32_t batch_norm_train(tracer *T, const call_args *a, int32_t x, int32_t rm, int32_t rv, double m,
                                double eps)
{
    const smelt_node *xn = node(T, x);
    int nd = xn->ndim;
    int stats = !is_none(T, rm) && !is_none(T, rv);
    if (nd < 2 || xn->shape[1] < 1)
        return tr_break(T, "batch_norm of a %d-d input", nd);
    int64_t n = smelt_node_numel(xn) / xn->shape[1];
    if (n <= 1)
        return tr_break(T, "batch_norm in training mode with one value per channel (eager raises)");
    for (int d = 0; d < nd; d++)   /* the running variance's n / (n - 1) is a number: its sizes pinned */
        if (d != 1 && dyn_guard(T, Py_EQ, dyn_dim_ex(T, T->vals[x].node, d), xn->shape[d]))
            return -1;
    if (stats && (T->vals[rm].kind != V_TENSOR || T->vals[rv].kind != V_TENSOR || node(T, rm)->ndim != 1 ||
                  node(T, rv)->ndim != 1 || node(T, rm)->dtype != xn->dtype || node(T, rv)->dtype != xn->dtype))
        return tr_break(T, "batch_norm running statistics of another dtype or shape than the input's channels");
    uint32_t dims = ((1u << nd) - 1) & ~2u;
    int32_t x0 = x;
    x = up32(T, x);   /* half precision: in float32, rounded once */
    int32_t mean = x < 0 ? -1 : red(T, SMELT_OP_MEAN, x, dims, 1, 0);
    int32_t xc = mean < 0 ? -1 : op2(T, SMELT_OP_SUB, x, mean);
    int32_t var = xc < 0 ? -1 : red(T, SMELT_OP_MEAN, op2(T, SMELT_OP_MUL, xc, xc), dims, 1, 0);
    int32_t y = var < 0 ? -1 : op2(T, SMELT_OP_MUL, xc, op1(T, SMELT_OP_RSQRT, op2(T, SMELT_OP_ADD, var, num(T, eps))));
    y = y < 0 ? -1 : affine(T, y, up32(T, channel_param(T, arg(a, 3, "weight"), nd)),
                            up32(T, channel_param(T, arg(a, 4, "bias"), nd)));
    y = down_to(T, y, x0);
    if (y < 0 || !stats)
        return y;
    int32_t unbiased = op2(T, SMELT_OP_MUL, var, num(T, (double)n / (double)(n - 1)));
    if (unbiased < 0 || running_update(T, rm, mean, m) < 0 || running_update(T, rv, unbiased, m) < 0)
        return -1;
    return y;
}

/* batch_norm with running statistics (eval), or batch statistics
 * (training; see batch_norm_train). */
static int32_t h_batch_norm(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), rm = arg(a, 1, "running_mean"), rv = arg(a, 2, "running_var");
    int train, err = 0;
    double eps = farg(T, a, 7, "eps", 1e-5, &err), mom = farg(T, a, 6, "momentum", 0.1, &err);
    (void)op;
    if (err || get_bool(T, arg(a, 5, "training"), 0, &train))
        return -1;
    if (T->vals[x].kind != V_TENSOR)
        return tr_break(T, "batch_norm of a non-tensor");
    int hdt = node(T, x)->dtype;
    if ((hdt == SMELT_F16 || hdt == SMELT_BF16) && ops_eager_contiguous(T, T->vals[x].node) != 1)
        return tr_break(T, "half-precision batch_norm of a non-contiguous input (eager rounds otherwise)");
    if (train || is_none(T, rm) || is_none(T, rv))
        return batch_norm_train(T, a, x, train ? rm : -1, train ? rv : -1, mom, eps);
    int nd = node(T, x)->ndim;
    int32_t xf = up32(T, x);
    int32_t inv = op1(T, SMELT_OP_RSQRT, op2(T, SMELT_OP_ADD, up32(T, channel_param(T, rv, nd)), num(T, eps)));
    int32_t y = op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_SUB, xf, up32(T, channel_param(T, rm, nd))), inv);
    y = y < 0 ? -1 : affine(T, y, up32(T, channel_param(T, arg(a, 3, "weight"), nd)),
                            up32(T, channel_param(T, arg(a, 4, "bias"), nd)));
    return down_to(T, y, x);
}

static int32_t h_normalize(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int err = 0;
    double p = farg(T, a, 1, "p", 2.0, &err), eps = farg(T, a, 3, "eps", 1e-12, &err);
    uint32_t m;
    (void)op;
    int32_t dv = arg(a, 2, "dim");
    if (err || T->vals[x].kind != V_TENSOR)
        return err ? -1 : tr_break(T, "normalize of a non-tensor");
    if (dv < 0 && (dv = int_value(T, 1)) < 0)
        return -1;
    if (dims_mask(T, dv, node(T, x)->ndim, &m))
        return -1;
    int32_t nrm = pnorm(T, x, p, m, 1);
    return op2(T, SMELT_OP_DIV, x, clamp_to(T, nrm, num(T, eps), -1));
}

/* reduction='mean' | 'sum' | 'none' applied to loss values l. */
static int32_t reduce_loss_by(tracer *T, int32_t rv, int32_t l);

static int32_t reduce_loss(tracer *T, const call_args *a, int pos, int32_t l)
{
    int32_t rv = arg(a, pos, "reduction");
    if (!is_none(T, arg(a, pos - 2, "size_average")) || !is_none(T, arg(a, pos - 1, "reduce")))
        return tr_break(T, "legacy size_average/reduce arguments");
    return reduce_loss_by(T, rv, l);
}

/* Loss values l reduced as reduction value rv (-1: absent) says. */
static int32_t reduce_loss_by(tracer *T, int32_t rv, int32_t l)
{
    PyObject *r = is_none(T, rv) ? NULL : tr_const(T, rv);
    if (!is_none(T, rv) && !r)
        return -1;
    if (r && (!PyUnicode_Check(r) || (PyUnicode_CompareWithASCIIString(r, "none") &&
                                      PyUnicode_CompareWithASCIIString(r, "mean") &&
                                      PyUnicode_CompareWithASCIIString(r, "sum"))))
        return tr_break(T, "loss with reduction=%R (eager raises)", r);
    if (l < 0 || (r && !PyUnicode_CompareWithASCIIString(r, "none")))
        return l;
    uint32_t all = (1u << node(T, l)->ndim) - 1;
    return red(T, r && !PyUnicode_CompareWithASCIIString(r, "sum") ? SMELT_OP_SUM : SMELT_OP_MEAN, l, all, 0, 0);
}

/* F.poisson_nll_loss(input, target, log_input=True, full=False,
 * size_average=None, eps=1e-8, reduce=None, reduction='mean'): exp(x) - t x
 * (log_input) or x - t log(x + eps), plus Stirling's term t log t - t +
 * log(2 pi t) / 2 where t > 1 (full), reduced. */
static int32_t c_poisson_nll(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input"), t = arg(a, 1, "target");
    int li = 1, full = 0, err = 0;
    (void)op;
    if (!is_tensor(T, x) || !is_tensor(T, t) || get_bool(T, arg(a, 2, "log_input"), 1, &li) ||
        get_bool(T, arg(a, 3, "full"), 0, &full))
        return T->broke ? -1 : as_host_call(T, fn, a);
    double eps = farg(T, a, 5, "eps", 1e-8, &err);
    if (err)
        return -1;
    if (!is_none(T, arg(a, 4, "size_average")) || !is_none(T, arg(a, 6, "reduce")))
        return as_host_call(T, fn, a);
    int32_t l = li ? op2(T, SMELT_OP_SUB, op1(T, SMELT_OP_EXP, x), op2(T, SMELT_OP_MUL, t, x))
                   : op2(T, SMELT_OP_SUB, x, op2(T, SMELT_OP_MUL, t, op1(T, SMELT_OP_LOG, op2(T, SMELT_OP_ADD, x, num(T, eps)))));
    if (full) {
        int32_t st = op2(T, SMELT_OP_SUB, op2(T, SMELT_OP_MUL, t, op1(T, SMELT_OP_LOG, t)), t);
        st = op2(T, SMELT_OP_ADD, st, op2(T, SMELT_OP_MUL, num(T, 0.5),
                                          op1(T, SMELT_OP_LOG, op2(T, SMELT_OP_MUL, num(T, 2 * 3.14159265358979323846), t))));
        l = op2(T, SMELT_OP_ADD, l, where3(T, op2(T, SMELT_OP_LE, t, num(T, 1.0)), num(T, 0.0), st));
    }
    return reduce_loss_by(T, arg(a, 7, "reduction"), l);
}

/* aten.native_dropout_backward(grad_output, mask, scale): grad *
 * (mask as grad's dtype * scale). */
static int32_t c_dropout_backward(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t g = arg(a, 0, "grad_output"), m = arg(a, 1, "mask");
    int err = 0;
    (void)op;
    if (!is_tensor(T, g) || !is_tensor(T, m))
        return T->broke ? -1 : as_host_call(T, fn, a);
    double sc = farg(T, a, 2, "scale", 1.0, &err);
    if (err)
        return -1;
    int32_t r = op2(T, SMELT_OP_MUL, g, op2(T, SMELT_OP_MUL, cast_to(T, m, node(T, g)->dtype), num(T, sc)));
    return fresh_contiguous(T, -1, r);
}

/* aten._softmax_backward_data(grad_output, output, dim, input_dtype) and
 * _log_softmax_backward_data (op 1): y (g - sum(g y)) or g - exp(y)
 * sum(g) along dim, in float32 for half precision; input_dtype must be
 * the gradient's (else torch's kernel, which raises on the CPU). */
static int32_t c_softmax_backward(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t g = arg(a, 0, "grad_output"), y = arg(a, 1, "output");
    int64_t d;
    if (!is_tensor(T, g) || !is_tensor(T, y) || tr_int(T, arg(a, 2, "dim"), &d))
        return T->broke ? -1 : as_host_call(T, fn, a);
    int32_t dv = arg(a, 3, "input_dtype");
    PyObject *dto = dv >= 0 ? tr_const(T, dv) : NULL;
    int idt = dto ? ops_dtype_of(dto) : -1;
    int gdt = node(T, g)->dtype, nd = node(T, g)->ndim;
    if (idt < 0 || !smelt_dtype_is_float((smelt_dtype)gdt) || node(T, y)->dtype != gdt ||
        node(T, y)->ndim != nd || (nd ? d < -nd || d >= nd : d < -1 || d > 0))
        return T->broke ? -1 : as_host_call(T, fn, a);
    if (idt != gdt)   /* (eager's CPU kernel raises) */
        return as_host_call(T, fn, a);
    int cdt = gdt == SMELT_F64 ? SMELT_F64 : SMELT_F32;
    uint32_t m = nd ? 1u << (d < 0 ? d + nd : d) : 0;
    int32_t gc = cast_to(T, g, cdt), yc = cast_to(T, y, cdt), r;
    if (op)
        r = op2(T, SMELT_OP_SUB, gc, op2(T, SMELT_OP_MUL, op1(T, SMELT_OP_EXP, yc), red(T, SMELT_OP_SUM, gc, m, 1, 0)));
    else
        r = op2(T, SMELT_OP_MUL, yc, op2(T, SMELT_OP_SUB, gc, red(T, SMELT_OP_SUM, op2(T, SMELT_OP_MUL, gc, yc), m, 1, 0)));
    return fresh_contiguous(T, -1, cast_to(T, r, idt));
}

/* mse_loss / l1_loss / smooth_l1_loss (op MUL / ABS / SUB). */
static int32_t h_loss(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), y = arg(a, 1, "target");
    int err = 0;
    if (!is_none(T, arg(a, -1, "weight")))
        return tr_break(T, "loss with weight=");
    int32_t d = op2(T, SMELT_OP_SUB, x, y), l;
    if (op == SMELT_OP_MUL)
        l = op2(T, SMELT_OP_MUL, d, d);
    else if (op == SMELT_OP_ABS)
        l = op1(T, SMELT_OP_ABS, d);
    else {
        double beta = farg(T, a, 5, "beta", 1.0, &err);
        int32_t ad = op1(T, SMELT_OP_ABS, d);
        if (err)
            return -1;
        if (beta == 0.0)
            l = ad;
        else
            l = where3(T, op2(T, SMELT_OP_LT, ad, num(T, beta)),
                       op2(T, SMELT_OP_DIV, op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_MUL, ad, ad), num(T, 0.5)), num(T, beta)),
                       op2(T, SMELT_OP_SUB, ad, num(T, 0.5 * beta)));
    }
    return reduce_loss(T, a, 4, l);
}

/* binary_cross_entropy_with_logits, as eager: (1 - t) * x - logsigmoid(x). */
static int32_t h_bce_logits(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), t = arg(a, 1, "target");
    (void)op;
    if (!is_none(T, arg(a, 2, "weight")) || !is_none(T, arg(a, 6, "pos_weight")))
        return tr_break(T, "binary_cross_entropy_with_logits with weights");
    int32_t l = op2(T, SMELT_OP_SUB, op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_SUB, num(T, 1.0), t), x), logsigmoid(T, x));
    return reduce_loss(T, a, 5, l);
}

static int32_t h_cosine_similarity(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "x1"), y = arg(a, 1, "x2");
    int64_t d;
    int err = 0, dim;
    double eps = farg(T, a, 3, "eps", 1e-8, &err);
    (void)op;
    if (err || x < 0 || y < 0 || T->vals[x].kind != V_TENSOR || T->vals[y].kind != V_TENSOR)
        return err ? -1 : tr_break(T, "cosine_similarity arguments");
    int nd = node(T, x)->ndim;
    if (node(T, y)->ndim != nd)
        return tr_break(T, "cosine_similarity of tensors with different ranks");
    if (get_int(T, arg(a, 2, "dim"), 1, &d) || norm_dim(T, d, nd, &dim))
        return -1;
    /* eager broadcasts the two first: the norms are over the common shape */
    call_args bb = { .pos = (int32_t[]){ x, y }, .npos = 2 };
    int32_t both = h_broadcast_tensors(T, &bb, 0);
    if (both < 0)
        return -1;
    x = T->vals[both].items[0], y = T->vals[both].items[1];
    int32_t nx = clamp_to(T, pnorm(T, x, 2.0, 1u << dim, 1), num(T, eps), -1);
    int32_t ny = clamp_to(T, pnorm(T, y, 2.0, 1u << dim, 1), num(T, eps), -1);
    int32_t p = op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_DIV, x, nx), op2(T, SMELT_OP_DIV, y, ny));
    return p < 0 ? -1 : red(T, SMELT_OP_SUM, p, 1u << dim, 0, 0);
}

/* F.pad with static pads: constant (FULL blocks), replicate (the edge
 * slice expanded), circular (slices from the other end) and reflect (the
 * slice next to the edge, flipped), joined by CAT; negative pads crop.
 * mode: 0 constant, 1 replicate, 2 circular, 3 reflect; other modes and
 * forms are a host call of torch._C._nn.pad. */

/* The w-wide block padded before (side 0) or after (side 1) x along dim. */
/* A slice [s, e) of x along dim whose bounds are written from the dim's
 * ends (negative: from its end; noend: to the end): their expressions
 * handed to the SLICE node when the dim is symbolic. */
static int32_t slice_rel(tracer *T, int32_t x, int dim, int64_t s, int64_t e, int noend)
{
    int64_t n = node(T, x)->shape[dim];
    if (dyn_pend_slice_of(T, T->vals[x].node, dim, -1, s, 1, -1, e, !noend))
        return -1;
    int64_t a = s < 0 ? n + s : s, b = noend ? n : e < 0 ? n + e : e;
    return v_slice(T, x, dim, a, b, 1);
}

static int32_t pad_block(tracer *T, int32_t x, int dim, int64_t w, int side, int mode, PyObject *value)
{
    int64_t n = node(T, x)->shape[dim];
    if (mode == 2) {
        if (w > n)
            return tr_break(T, "circular pad wider than the dim");
        if (dyn_guard(T, Py_GE, dyn_dim_ex(T, T->vals[x].node, dim), w))
            return -1;
        return side ? slice_rel(T, x, dim, 0, w, 0) : slice_rel(T, x, dim, -w, 0, 1);
    }
    if (mode == 3) {   /* reflect: the w elements next to the edge, mirrored */
        if (w >= n)
            return tr_break(T, "reflect pad as wide as the dim");
        if (dyn_guard(T, Py_GT, dyn_dim_ex(T, T->vals[x].node, dim), w))
            return -1;
        int32_t s = side ? slice_rel(T, x, dim, -1 - w, -1, 0) : slice_rel(T, x, dim, 1, w + 1, 0);
        if (s < 0 || w <= 1)
            return s;
        smelt_node f = { .op = SMELT_OP_FLIP, .nsrc = 1, .src = { T->vals[s].node } };
        f.a.axis.dim = dim;
        return mk(T, &f);
    }
    smelt_node p = { .op = mode ? SMELT_OP_EXPAND : SMELT_OP_FULL, .nsrc = (uint8_t)mode, .ndim = node(T, x)->ndim };
    memcpy(p.shape, node(T, x)->shape, sizeof p.shape);
    p.shape[dim] = w;
    int32_t ex[SMELT_MAX_DIMS];   /* x's sizes but the padded one */
    for (int d = 0; d < p.ndim; d++)
        ex[d] = d == dim ? -1 : dyn_dim_ex(T, T->vals[x].node, d);
    if (mode == 0) {
        dyn_pend_shape(T, ex, p.ndim);
        return full_of(T, value, node(T, x)->dtype, p.shape, p.ndim);
    }
    int32_t edge = n ? slice_rel(T, x, dim, side ? -1 : 0, side ? 0 : 1, side) : tr_break(T, "replicate pad of an empty dim");
    if (edge < 0)
        return -1;
    p.src[0] = T->vals[edge].node;
    dyn_pend_shape(T, ex, p.ndim);
    return mk(T, &p);
}

static int32_t pad_dim(tracer *T, int32_t x, int dim, int64_t lo, int64_t hi, int mode, PyObject *value)
{
    int64_t n = node(T, x)->shape[dim];
    if (lo < 0 || hi < 0) {
        int64_t s = lo < 0 ? -lo : 0, e = hi < 0 ? n + hi : n;
        if (e < s)
            return tr_break(T, "pad crops more than the dim size");
        if (dyn_guard(T, Py_GE, dyn_dim_ex(T, T->vals[x].node, dim), s + (hi < 0 ? -hi : 0)) ||
            (x = slice_rel(T, x, dim, s, hi < 0 ? hi : 0, hi >= 0)) < 0)
            return -1;
    }
    int32_t parts[3];
    int np = 0;
    if (lo > 0 && (parts[np++] = pad_block(T, x, dim, lo, 0, mode, value)) < 0)
        return -1;
    parts[np++] = x;
    if (hi > 0 && (parts[np++] = pad_block(T, x, dim, hi, 1, mode, value)) < 0)
        return -1;
    if (np == 1)
        return x;
    for (int i = 0; i < np; i++)
        parts[i] = T->vals[parts[i]].node;
    return cat_nodes(T, parts, np, dim);
}

int32_t ops_pad_node(tracer *T, int32_t x, int dim, int64_t lo, int64_t hi, double value)
{
    PyObject *v = PyFloat_FromDouble(value);
    int32_t r = v ? tv_tensor(T, x) : -1;
    if (r >= 0)
        r = pad_dim(T, r, dim, lo, hi, 0, v);
    Py_XDECREF(v);
    return r < 0 ? -1 : T->vals[r].node;
}

/* Whether torch accepts replicate (mode 1) / circular (mode 2) / reflect
 * (mode 3) padding of x by pads[0..n): k = n/2 padded dims in 1..3 of a
 * (k+1)- or (k+2)-d non-bool tensor, non-negative pads (replicate: negative
 * ones crop, leaving at least one element), circular ones at most the dim
 * size, reflect ones less than it. Anything else goes to torch's own pad. */
static int native_pad_ok(const smelt_node *x, const int64_t *pads, int n, int mode)
{
    int k = n / 2;
    if (n % 2 || k < 1 || k > 3 || (x->ndim != k + 1 && x->ndim != k + 2) || x->dtype == SMELT_BOOL)
        return 0;
    for (int i = 0; i < n; i++) {
        int64_t size = x->shape[x->ndim - 1 - i / 2];
        if ((pads[i] < 0 && mode != 1) || (mode == 2 && pads[i] > size) || (mode == 3 && pads[i] >= size))
            return 0;
        if (mode == 1 && i % 2 && size + (pads[i - 1] < 0 ? pads[i - 1] : 0) + (pads[i] < 0 ? pads[i] : 0) < 1)
            return 0;
    }
    return 1;
}

static int32_t h_pad(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), mv = arg(a, 2, "mode"), vv = arg(a, 3, "value");
    int64_t pads[2 * SMELT_MAX_DIMS];
    int n;
    (void)op;
    call_args pa = { .pos = (int32_t[]){ arg(a, 1, "pad") }, .npos = 1 };
    if (T->vals[x].kind != V_TENSOR || pa.pos[0] < 0)
        return tr_break(T, "pad arguments");
    PyObject *m = is_none(T, mv) ? NULL : tr_const(T, mv), *value = is_none(T, vv) ? NULL : tr_const(T, vv);
    if ((!is_none(T, mv) && !m) || (!is_none(T, vv) && !value) || int_list(T, &pa, 0, NULL, pads, &n))
        return -1;
    int mode = !m || !PyUnicode_CompareWithASCIIString(m, "constant") ? 0 : !PyUnicode_CompareWithASCIIString(m, "replicate") ? 1
             : !PyUnicode_CompareWithASCIIString(m, "circular") ? 2 : !PyUnicode_CompareWithASCIIString(m, "reflect") ? 3 : -1;
    if (mode > 0 && !native_pad_ok(node(T, x), pads, n, mode))
        mode = -1;   /* torch's own pad decides (and raises what eager raises) */
    if (mode < 0 || n % 2 || n / 2 > node(T, x)->ndim)   /* reflect, ...: torch's own pad at run time */
        return nn_pad ? ext_call(T, nn_pad, a) : tr_break(T, "pad mode %R is not supported", m ? m : Py_None);
    PyObject *zero = PyLong_FromLong(0);
    int32_t x0 = x;
    int cl = eager_channels_last(T, x0);
    for (int i = 0; x >= 0 && i < n / 2; i++)
        x = pad_dim(T, x, node(T, x)->ndim - 1 - i, pads[2 * i], pads[2 * i + 1], mode, value ? value : zero);
    Py_XDECREF(zero);
    if (x >= 0 && smelt_op_kind_of((smelt_op)node(T, x)->op) == SMELT_KIND_VIEW)
        x = copy_of(T, x);   /* only cropped: still a new tensor, as eager's */
    if (cl < 0 && x >= 0 && T->vals[x].node == T->vals[x0].node)
        x = copy_of(T, x);   /* a new tensor, as eager's, of unknown layout */
    return cl == 0 ? fresh_contiguous(T, x0, x) : x;   /* eager keeps channels-last, else contiguous */
}

/* ---------- pooling ---------- */

static PyObject *adaptive_max_fn[4];   /* [k]: torch's adaptive_max_pool{k}d builtin (values, indices) */

/* output_size of an adaptive pooling of the nd-d tensor of sizes shape,
 * None entries taking the input's sizes (F._list_with_default): the value
 * to pass to torch's builtin; -2 for a form the Python function must
 * decide (it raises for too many sizes), -1 on a break. */
static int32_t adaptive_sizes(tracer *T, int32_t os, const int64_t *shape, int nd)
{
    if (T->vals[os].kind == V_OBJ)
        return PyLong_Check(T->vals[os].obj) && !PyBool_Check(T->vals[os].obj) ? os : -2;
    int n = T->vals[os].n;
    if ((T->vals[os].kind != V_TUPLE && T->vals[os].kind != V_LIST) || n >= nd)
        return -2;
    int32_t items[SMELT_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        int32_t it = T->vals[os].items[i];
        PyObject *o = T->vals[it].kind == V_OBJ ? tr_const(T, it) : NULL;
        if (!o)
            return T->broke || PyErr_Occurred() ? -1 : -2;
        if (o != Py_None && (!PyLong_Check(o) || PyBool_Check(o)))
            return -2;
        if ((items[i] = o == Py_None ? int_value(T, shape[nd - n + i]) : it) < 0)
            return -1;
    }
    return tv_tuple(T, items, n);
}

/* F.adaptive_max_pool{1,2,3}d (op: the spatial dims) without
 * return_indices: the values of torch's adaptive_max_pool{op}d (which
 * computes indices too), as graph ops where native.c can make them. -2
 * (the Python function runs) with indices or an unusual output_size. */
static int32_t h_adaptive_max(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), os = arg(a, 1, "output_size");
    int ri;
    if (x < 0 || os < 0 || T->vals[x].kind != V_TENSOR || !adaptive_max_fn[op])
        return -2;
    if (get_bool(T, arg(a, 2, "return_indices"), 0, &ri))
        return -1;
    int64_t shape[SMELT_MAX_DIMS];
    int nd = node(T, x)->ndim;
    memcpy(shape, node(T, x)->shape, sizeof shape);
    int32_t sizes = ri ? -2 : adaptive_sizes(T, os, shape, nd);
    if (sizes < 0)
        return sizes;
    call_args b = { .pos = (int32_t[]){ x, sizes }, .npos = 2 };
    return native_call(T, adaptive_max_fn[op], &b, 1);
}

/* ---------- the table ---------- */

/* In-place behaviour of an entry: IP_NO, IP_ALWAYS (the result is
 * written into argument 0: torch.relu_, x.fill_), or IPOS(k): when the
 * `inplace` argument (position k) is true. */
#define IP_NO 0
#define IP_ALWAYS 100
#define IPOS(k) ((k) + 1)

/* out= behaviour: OUT_NO (a call with out= breaks: the frame runs
 * eagerly), OUT_CAST (element-wise: the result, computed in the inputs'
 * dtype, is cast into out, which must have the result's shape). */
#define OUT_NO 0
#define OUT_CAST 1

/* A handler that needs the callable itself (it may make a host call of
 * it): native.c's native_call. */
typedef int32_t (*call_fn)(tracer *T, PyObject *fn, const call_args *a, int first);

/* A handler that may make a host call of the callable, with its row's op
 * (VROW). */
typedef int32_t (*vcall_fn)(tracer *T, PyObject *fn, const call_args *a, int op);


/* ---------- element-wise composites (OpInfo's pointwise ops) ---------- */

/* x as a floating tensor: integers and bool in the default float. */
static int32_t to_float(tracer *T, int32_t x)
{
    if (x < 0 || T->vals[x].kind != V_TENSOR)
        return x < 0 ? -1 : tr_break(T, "expected a tensor");
    return smelt_dtype_is_float((smelt_dtype)node(T, x)->dtype) ? x : cast_to(T, x, default_float());
}


/* Unary composites of one tensor and no other argument (op selects):
 * deg2rad, rad2deg, sgn, isfinite, isposinf, isneginf, isreal, sinc,
 * angle, special.ndtr, special.entr. */
enum { C_DEG2RAD, C_RAD2DEG, C_SGN, C_ISFINITE, C_ISPOSINF, C_ISNEGINF, C_ISREAL, C_SINC, C_ANGLE,
       C_NDTR, C_ENTR };

static int32_t h_unary_composite(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    if (!is_tensor(T, x) || a->npos + a->nkw != 1)
        return tr_break(T, "element-wise composite arguments");
    smelt_dtype dt = node(T, x)->dtype;
    int fl = smelt_dtype_is_float(dt);
    switch ((int)op) {
    case C_DEG2RAD: case C_RAD2DEG: {
        int32_t f = to_float(T, x);
        return op2(T, SMELT_OP_MUL, f, num(T, (int)op == C_DEG2RAD ? M_PI / 180.0 : 180.0 / M_PI));
    }
    case C_SGN:
        return op1(T, SMELT_OP_SIGN, x);
    case C_ISFINITE: case C_ISPOSINF: case C_ISNEGINF: case C_ISREAL: {
        if (!fl || (int)op == C_ISREAL) {   /* all finite, none infinite, all real */
            smelt_node p = { .op = SMELT_OP_FULL, .ndim = node(T, x)->ndim, .dtype = SMELT_BOOL };
            memcpy(p.shape, node(T, x)->shape, sizeof p.shape);
            p.a.scalar.i = (int)op == C_ISFINITE || (int)op == C_ISREAL;
            p.a.scalar.f = (double)p.a.scalar.i;
            return mk(T, &p);
        }
        if ((int)op == C_ISFINITE)
            return op1(T, SMELT_OP_LOGICAL_NOT, op2(T, SMELT_OP_LOGICAL_OR, op1(T, SMELT_OP_ISNAN, x), op1(T, SMELT_OP_ISINF, x)));
        return op2(T, SMELT_OP_EQ, x, num(T, (int)op == C_ISPOSINF ? INFINITY : -INFINITY));
    }
    case C_SINC: {   /* sin(pi x) / (pi x), 1 at 0 */
        int32_t f = to_float(T, x), px = op2(T, SMELT_OP_MUL, f, num(T, M_PI));
        return where3(T, op2(T, SMELT_OP_EQ, f, num(T, 0.0)), num(T, 1.0), op2(T, SMELT_OP_DIV, op1(T, SMELT_OP_SIN, px), px));
    }
    case C_ANGLE: {   /* real: pi below 0, else 0; NaN stays */
        int32_t f = to_float(T, x);
        int32_t r = where3(T, op2(T, SMELT_OP_LT, f, num(T, 0.0)), num(T, M_PI), num(T, 0.0));
        return where3(T, op1(T, SMELT_OP_ISNAN, f), f, cast_to(T, r, node(T, f)->dtype));
    }
    case C_NDTR:   /* 0.5 * erfc(-x / sqrt 2) */
        return op1(T, SMELT_OP_NDTR, to_float(T, x));
    case C_ENTR: {   /* -x log x for x > 0, 0 at 0, -inf below, NaN stays */
        int32_t f = to_float(T, x);
        int32_t pos = op1(T, SMELT_OP_NEG, op2(T, SMELT_OP_MUL, f, op1(T, SMELT_OP_LOG, f)));
        int32_t r = where3(T, op2(T, SMELT_OP_EQ, f, num(T, 0.0)), num(T, 0.0),
                           where3(T, op2(T, SMELT_OP_LT, f, num(T, 0.0)), num(T, -INFINITY), pos));
        return where3(T, op1(T, SMELT_OP_ISNAN, f), f, r);
    }
    }
    return tr_break(T, "unknown composite");
}

/* nan_to_num(x, nan=0.0, posinf=None, neginf=None): integers and bool are
 * copied; floats get the dtype's largest and lowest values for infinities
 * without a replacement. */
static int32_t h_nan_to_num(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int err = 0;
    (void)op;
    if (!is_tensor(T, x))
        return tr_break(T, "nan_to_num of a non-tensor");
    smelt_dtype dt = node(T, x)->dtype;
    if (!smelt_dtype_is_float(dt))
        return fresh_contiguous(T, -1, copy_of(T, x));
    double big = dt == SMELT_F16 ? 65504.0 : dt == SMELT_BF16 ? 3.3895313892515355e38 : dt == SMELT_F32 ? 3.4028234663852886e38
               : 1.7976931348623157e308;
    double nanv = farg(T, a, 1, "nan", 0.0, &err);
    double pinf = farg(T, a, 2, "posinf", big, &err), ninf = farg(T, a, 3, "neginf", -big, &err);
    if (err)
        return -1;
    int32_t r = where3(T, op2(T, SMELT_OP_EQ, x, num(T, INFINITY)), num(T, pinf),
                       where3(T, op2(T, SMELT_OP_EQ, x, num(T, -INFINITY)), num(T, ninf), x));
    r = where3(T, op1(T, SMELT_OP_ISNAN, x), num(T, nanv), r);
    return r < 0 ? -1 : cast_to(T, r, dt);
}

/* Binary composites of two tensors (op selects): heaviside, fmax, fmin,
 * float_power, xlogy, special.xlog1py, ldexp (x * 2.0 ** e, as eager),
 * copysign (|x| with y's sign bit, NaNs' included). */
enum { C_HEAVISIDE, C_FMAX, C_FMIN, C_FLOAT_POWER, C_XLOGY, C_XLOG1PY, C_LDEXP, C_COPYSIGN };

static int32_t h_binary_composite(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), y = arg(a, 1, "other");
    if (y < 0)
        y = arg(a, 1, (int)op == C_HEAVISIDE ? "values" : "exponent");
    if (x < 0 || y < 0 || a->npos + a->nkw != 2)
        return tr_break(T, "element-wise composite arguments");
    if (!is_tensor(T, x) || (!is_tensor(T, y) && (int)op != C_FLOAT_POWER && (int)op != C_XLOGY && (int)op != C_XLOG1PY))
        return tr_break(T, "element-wise composite of a non-tensor");
    switch ((int)op) {
    case C_COPYSIGN: {   /* in the result type, a float (integers: the default float) */
        const smelt_node *both[2] = { node(T, x), node(T, y) };
        int rt = smelt_result_type(both, 2, (smelt_dtype)default_float());
        rt = smelt_dtype_is_float((smelt_dtype)rt) ? rt : default_float();
        int32_t m = op1(T, SMELT_OP_ABS, cast_to(T, x, rt));
        return where3(T, op1(T, SMELT_OP_SIGNBIT, y), op1(T, SMELT_OP_NEG, m), m);
    }
    case C_LDEXP: {   /* in the result type, a float (integers: the default float), half in float32 */
        int dx = node(T, x)->dtype, dy = node(T, y)->dtype;
        if (dy == SMELT_BOOL && smelt_dtype_is_float((smelt_dtype)dx))
            return tr_break(T, "ldexp of a float by bool exponents (eager raises)");
        const smelt_node *both[2] = { node(T, x), node(T, y) };
        int rt = smelt_result_type(both, 2, (smelt_dtype)default_float());
        rt = smelt_dtype_is_float((smelt_dtype)rt) ? rt : default_float();
        int ct = rt == SMELT_F16 || rt == SMELT_BF16 ? SMELT_F32 : rt;
        int32_t p = op2(T, SMELT_OP_POW, num(T, 2.0), cast_to(T, y, ct));
        return cast_to(T, op2(T, SMELT_OP_MUL, cast_to(T, x, ct), p), rt);
    }
    case C_HEAVISIDE:
        if (node(T, x)->dtype != node(T, y)->dtype)
            return tr_break(T, "heaviside of different dtypes (eager raises)");
        return cast_to(T, where3(T, op2(T, SMELT_OP_EQ, x, num(T, 0.0)), y,
                                 cast_to(T, op2(T, SMELT_OP_GT, x, num(T, 0.0)), node(T, x)->dtype)), node(T, x)->dtype);
    case C_FMAX: case C_FMIN: {   /* NaN only where both are */
        smelt_op m = (int)op == C_FMAX ? SMELT_OP_MAXIMUM : SMELT_OP_MINIMUM;
        int32_t r = op2(T, m, x, y);
        if (r < 0 || !smelt_dtype_is_float((smelt_dtype)node(T, r)->dtype))
            return r;
        return where3(T, op1(T, SMELT_OP_ISNAN, x), cast_to(T, y, node(T, r)->dtype),
                      where3(T, op1(T, SMELT_OP_ISNAN, y), cast_to(T, x, node(T, r)->dtype), r));
    }
    case C_FLOAT_POWER: {   /* in float64 */
        int32_t xf = cast_to(T, x, SMELT_F64);
        int32_t yf = is_tensor(T, y) ? cast_to(T, y, SMELT_F64) : y;
        return op2(T, SMELT_OP_POW, xf, yf);
    }
    case C_XLOGY: case C_XLOG1PY: {   /* NaN where y is; 0 where x is 0; else x log(y) */
        if (!is_tensor(T, y))
            return tr_break(T, "xlogy of a number");
        const smelt_node *s[2] = { node(T, x), node(T, y) };
        smelt_dtype dt = smelt_result_type(s, 2, (smelt_dtype)T->g->default_float);
        if (!smelt_dtype_is_float(dt))
            dt = (smelt_dtype)default_float();
        int32_t xf = cast_to(T, x, dt), yf = cast_to(T, y, dt);
        int32_t l = op1(T, (int)op == C_XLOGY ? SMELT_OP_LOG : SMELT_OP_LOG1P, yf);
        int32_t r = where3(T, op2(T, SMELT_OP_EQ, xf, num(T, 0.0)), num(T, 0.0), op2(T, SMELT_OP_MUL, xf, l));
        return where3(T, op1(T, SMELT_OP_ISNAN, yf), yf, cast_to(T, r, dt));
    }
    }
    return tr_break(T, "unknown composite");
}

/* logit(x, eps=None): log(x / (1 - x)), x clamped to [eps, 1 - eps]. */
static int32_t h_logit(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), ev = arg(a, 1, "eps");
    int err = 0;
    (void)op;
    if (!is_tensor(T, x))
        return tr_break(T, "logit of a non-tensor");
    int32_t f = to_float(T, x);
    if (!is_none(T, ev)) {
        double eps = get_float(T, ev, 0.0, &err);
        if (err)
            return -1;
        f = clamp_to(T, f, num(T, eps), num(T, 1.0 - eps));
    }
    return op1(T, SMELT_OP_LOG, op2(T, SMELT_OP_DIV, f, op2(T, SMELT_OP_SUB, num(T, 1.0), f)));
}

/* rsub(x, other, alpha=1): other - alpha * x. */
static int32_t h_rsub(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), y = arg(a, 1, "other"), al = arg(a, 2, "alpha");
    (void)op;
    if (!is_tensor(T, x) || y < 0)
        return tr_break(T, "rsub arguments");
    if (node(T, x)->dtype == SMELT_BOOL)
        return tr_break(T, "rsub of bool (eager raises)");
    if (!is_none(T, al))
        x = op2(T, SMELT_OP_MUL, x, al);
    return op2(T, SMELT_OP_SUB, y, x);
}

/* x.__radd__(y) etc.: the binary op with its operands swapped. */
static int32_t h_reflected(tracer *T, const call_args *a, smelt_op op)
{
    if (a->npos != 2 || a->nkw)
        return tr_break(T, "reflected operator arguments");
    call_args b = { .pos = (int32_t[]){ a->pos[1], a->pos[0] }, .npos = 2 };
    if (T->vals[a->pos[0]].kind != V_TENSOR)
        return tr_break(T, "reflected operator of a non-tensor (eager raises)");
    return h_binary(T, &b, op);
}

/* count_nonzero(x, dim=None): the number of nonzero elements (int64). */
static int32_t h_count_nonzero(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    uint32_t m;
    (void)op;
    if (!is_tensor(T, x) || dims_mask(T, arg(a, 1, "dim"), node(T, x)->ndim, &m))
        return is_tensor(T, x) ? -1 : tr_break(T, "count_nonzero of a non-tensor");
    return red(T, SMELT_OP_SUM, cast_to(T, op2(T, SMELT_OP_NE, x, num(T, 0.0)), SMELT_I64), m, 0, 0);
}

/* nansum(x, dim=None, keepdim=False): NaNs count as 0. */
static int32_t h_nansum(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    (void)op;
    if (!is_tensor(T, x) || !is_none(T, arg(a, -1, "dtype")))
        return tr_break(T, "nansum arguments");
    int32_t z = smelt_dtype_is_float((smelt_dtype)node(T, x)->dtype)
              ? where3(T, op1(T, SMELT_OP_ISNAN, x), num(T, 0.0), x) : x;
    call_args b = *a;
    int32_t pos[8];
    for (int i = 0; i < a->npos && i < 8; i++)
        pos[i] = i ? a->pos[i] : z;
    if (a->npos)
        b.pos = pos;
    else
        return tr_break(T, "nansum without a positional input");
    return z < 0 ? -1 : h_reduce(T, &b, SMELT_OP_SUM);
}

/* aminmax(x, *, dim=None, keepdim=False): (min, max). */
static int32_t h_aminmax(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    uint32_t m;
    int keep;
    (void)op;
    if (!is_tensor(T, x) || a->npos != 1 || dims_mask(T, arg(a, -1, "dim"), node(T, x)->ndim, &m) ||
        get_bool(T, arg(a, -1, "keepdim"), 0, &keep))
        return is_tensor(T, x) && a->npos == 1 ? -1 : tr_break(T, "aminmax arguments");
    if (smelt_node_numel(node(T, x)) == 0)
        return tr_break(T, "aminmax of an empty tensor (eager raises)");
    int32_t lo = red(T, SMELT_OP_AMIN, x, m, keep, 0), hi = lo < 0 ? -1 : red(T, SMELT_OP_AMAX, x, m, keep, 0);
    return hi < 0 ? -1 : named_pair(T, lo, hi, "aminmax");
}

/* torch.fill(x, value): a new tensor like x filled with value (cast). */
static int32_t h_fill_new(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), v = arg(a, 1, "value");
    (void)op;
    if (!is_tensor(T, x) || v < 0)
        return tr_break(T, "fill arguments");
    if (is_tensor(T, v) && node(T, v)->ndim != 0)
        return tr_break(T, "fill with a value tensor that is not 0-d (eager raises)");
    int32_t r = h_fill(T, a, SMELT_OP_FULL);
    r = r < 0 ? -1 : cast_to(T, r, node(T, x)->dtype);
    return r < 0 ? -1 : fresh_contiguous(T, -1, copy_of(T, r));
}

/* hstack / vstack / dstack / column_stack (op 1 / 2 / 3 / 0): cat of the
 * tensors made at least 1-d / 2-d / 3-d (column_stack: 0/1-d as columns). */
static int32_t h_stack_like(tracer *T, const call_args *a, smelt_op op)
{
    int32_t items[64];
    int one, n = tensor_args(T, a, items, 64, &one), want = (int)op, dim;
    if (n <= 0 || one)
        return n < 0 ? -1 : tr_break(T, "stack of no tensors or of a single tensor (eager raises)");
    for (int i = 0; i < n; i++) {
        const smelt_node *x = node(T, items[i]);
        int64_t shape[3];
        if (want == 0) {   /* column_stack */
            if (x->ndim > 1)
                continue;
            shape[0] = x->ndim ? x->shape[0] : 1, shape[1] = 1;
            items[i] = v_reshape(T, items[i], shape, 2);
        } else if (x->ndim < want) {
            call_args b = { .pos = &items[i], .npos = 1 };
            items[i] = h_atleast(T, &b, (smelt_op)want);
        }
        if (items[i] < 0)
            return -1;
    }
    dim = want == 0 ? 1 : want == 1 ? (node(T, items[0])->ndim == 1 ? 0 : 1) : want == 2 ? 0 : 2;
    int32_t l = tv_tuple(T, items, n);
    call_args c = { .pos = (int32_t[]){ l, int_value(T, dim) }, .npos = 2 };
    return l < 0 || c.pos[1] < 0 ? -1 : h_cat(T, &c, 0);
}

/* tile(x, dims): repeat with dims padded by leading 1s (and x's dims by
 * leading 1s when dims is longer). */
static int32_t h_tile(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t r[SMELT_MAX_DIMS], full[SMELT_MAX_DIMS];
    int n;
    (void)op;
    if (!is_tensor(T, x) || int_list(T, a, 1, "dims", r, &n))
        return is_tensor(T, x) ? -1 : tr_break(T, "tile of a non-tensor");
    int nd = node(T, x)->ndim, m = n > nd ? n : nd;
    for (int i = 0; i < m; i++)
        full[i] = i < m - n ? 1 : r[i - (m - n)];
    int32_t l = wrap_new(T, tracer_int_tuple(full, m));
    call_args b = { .pos = (int32_t[]){ x, l }, .npos = 2 };
    return l < 0 ? -1 : h_repeat(T, &b, 0);
}

/* The copy forms of view ops (t_copy, permute_copy, ...): the view, then
 * a new contiguous tensor of it. */
static const op_fn copy_forms[];

static int32_t h_split(tracer *T, const call_args *a, smelt_op op);

/* split_with_sizes(input, split_sizes, dim=0): split by a list of sizes. */
static int32_t h_split_sizes(tracer *T, const call_args *a, smelt_op op)
{
    (void)op;
    return h_split(T, a, SMELT_OP_SUB);
}

static int32_t h_copy_form(tracer *T, const call_args *a, smelt_op op)
{
    int32_t v = copy_forms[(int)op](T, a, (smelt_op)0);
    if (v < 0)
        return -1;
    if (T->vals[v].kind == V_TUPLE) {   /* unbind_copy */
        int32_t items[256];
        int n = T->vals[v].n < 256 ? T->vals[v].n : 256;
        for (int i = 0; i < n; i++)
            if ((items[i] = fresh_contiguous(T, -1, copy_of(T, T->vals[v].items[i]))) < 0)
                return -1;
        return tv_tuple(T, items, n);
    }
    return T->vals[v].kind == V_TENSOR ? fresh_contiguous(T, -1, copy_of(T, v)) : tr_break(T, "copy form of a non-tensor");
}


/* ---------- more composites: views, shuffles, small reductions ---------- */

/* linalg.diagonal(A, *, offset=0, dim1=-2, dim2=-1): a view. */
static int32_t h_linalg_diagonal(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "A");
    if (x < 0)
        x = arg(a, 0, "input");
    int32_t d1 = arg(a, -1, "dim1"), d2 = arg(a, -1, "dim2");
    call_args b = { .pos = (int32_t[]){ x, arg(a, -1, "offset") >= 0 ? arg(a, -1, "offset") : int_value(T, 0),
                                        d1 >= 0 ? d1 : int_value(T, -2), d2 >= 0 ? d2 : int_value(T, -1) }, .npos = 4 };
    if (x < 0 || a->npos > 1 || !is_tensor(T, x))
        return tr_break(T, "linalg.diagonal arguments");
    return h_diagonal(T, &b, op);
}

/* aten.slice(x, dim=0, start=None, end=None, step=1): a view, bounds
 * clamped as Python slicing does. */
static int32_t h_aten_slice(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "self");
    int64_t d, st, en, step;
    int dim;
    (void)op;
    if (x < 0)
        x = arg(a, 0, "input");
    if (!is_tensor(T, x) || get_int(T, arg(a, 1, "dim"), 0, &d) || norm_dim(T, d, node(T, x)->ndim, &dim))
        return is_tensor(T, x) ? -1 : tr_break(T, "slice of a non-tensor");
    int64_t n = node(T, x)->shape[dim];
    if (get_int(T, arg(a, 2, "start"), 0, &st) || get_int(T, arg(a, 3, "end"), INT64_MAX, &en) ||
        get_int(T, arg(a, 4, "step"), 1, &step))
        return -1;
    if (step <= 0)
        return tr_break(T, "slice step must be positive (eager raises)");
    st = st < 0 ? st + n : st;
    en = en < 0 ? en + n : en;
    st = st < 0 ? 0 : st > n ? n : st;
    en = en < st ? st : en > n ? n : en;
    return v_slice(T, x, dim, st, en, step);
}

/* pixel_shuffle (op 0), pixel_unshuffle (1), channel_shuffle (2): a
 * reshape, a permutation and a reshape into a new contiguous tensor. */
static int32_t h_shuffle(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t r;
    if (!is_tensor(T, x) || tr_int(T, arg(a, 1, op == 2 ? "groups" : op == 1 ? "downscale_factor" : "upscale_factor"), &r))
        return is_tensor(T, x) ? -1 : tr_break(T, "shuffle of a non-tensor");
    const smelt_node *n = node(T, x);
    int nd = n->ndim, lead = nd - 3;
    int64_t s1[SMELT_MAX_DIMS + 3], out[SMELT_MAX_DIMS];
    int perm[SMELT_MAX_DIMS + 3], k = 0;
    if (r <= 0)
        return tr_break(T, "shuffle factor must be positive (eager raises)");
    if ((int)op == 2) {   /* (N, C, *) -> (N, g, C/g, *) -> swap 1, 2 -> (N, C, *) */
        if (nd < 3 || n->shape[1] % r || nd + 1 > SMELT_MAX_DIMS)
            return tr_break(T, "channel_shuffle shape (eager raises)");
        s1[0] = n->shape[0], s1[1] = r, s1[2] = n->shape[1] / r;
        for (int d = 2; d < nd; d++)
            s1[d + 1] = n->shape[d];
        for (int d = 0; d < nd + 1; d++)
            perm[d] = d == 1 ? 2 : d == 2 ? 1 : d;
        k = nd + 1;
    } else {
        if (nd < 3 || lead + 5 > SMELT_MAX_DIMS)
            return tr_break(T, "pixel shuffle shape (eager raises)");
        int64_t c = n->shape[lead], h = n->shape[lead + 1], w = n->shape[lead + 2];
        for (int d = 0; d < lead; d++)
            s1[d] = n->shape[d], perm[d] = d;
        if ((int)op == 0) {   /* (*, C r r, H, W) -> (*, C, r, r, H, W) -> (*, C, H, r, W, r) */
            if (c % (r * r))
                return tr_break(T, "pixel_shuffle channels (eager raises)");
            s1[lead] = c / (r * r), s1[lead + 1] = r, s1[lead + 2] = r, s1[lead + 3] = h, s1[lead + 4] = w;
            int p[5] = { 0, 3, 1, 4, 2 };
            for (int i = 0; i < 5; i++)
                perm[lead + i] = lead + p[i];
        } else {              /* (*, C, H r, W r) -> (*, C, H, r, W, r) -> (*, C, r, r, H, W) */
            if (h % r || w % r)
                return tr_break(T, "pixel_unshuffle size (eager raises)");
            s1[lead] = c, s1[lead + 1] = h / r, s1[lead + 2] = r, s1[lead + 3] = w / r, s1[lead + 4] = r;
            int p[5] = { 0, 2, 4, 1, 3 };
            for (int i = 0; i < 5; i++)
                perm[lead + i] = lead + p[i];
        }
        k = lead + 5;
    }
    if (k > SMELT_MAX_DIMS)
        return tr_break(T, "shuffle of too many dims");
    int32_t v = v_reshape(T, x, s1, k);
    smelt_node p = { .op = SMELT_OP_PERMUTE, .nsrc = 1 };
    if (v < 0)
        return -1;
    p.src[0] = T->vals[v].node;
    for (int d = 0; d < k; d++)
        p.a.perm.perm[d] = (int8_t)perm[d];
    if ((v = mk(T, &p)) < 0)
        return -1;
    int m = 0;
    if ((int)op == 2) {
        memcpy(out, n->shape, sizeof out);
        m = nd;
    } else {
        const smelt_node *q = node(T, v);
        for (int d = 0; d < lead; d++)
            out[m++] = q->shape[d];
        if ((int)op == 0)
            out[m++] = q->shape[lead], out[m++] = q->shape[lead + 1] * r, out[m++] = q->shape[lead + 3] * r;
        else
            out[m++] = q->shape[lead] * r * r, out[m++] = q->shape[lead + 3], out[m++] = q->shape[lead + 4];
    }
    return v_reshape(T, fresh_contiguous(T, -1, copy_of(T, v)), out, m);   /* eager: a new contiguous tensor */
}

/* fft.fftshift (op 0) / fft.ifftshift (1): roll by half of each dim. */
static int32_t h_fftshift(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), dv = arg(a, 1, "dim");
    int64_t dims[SMELT_MAX_DIMS], sh[SMELT_MAX_DIMS];
    int n = 0;
    if (!is_tensor(T, x))
        return tr_break(T, "fftshift of a non-tensor");
    int nd = node(T, x)->ndim;
    if (is_none(T, dv)) {
        for (int d = 0; d < nd; d++)
            dims[n++] = d;
    } else {
        call_args da = { .pos = &dv, .npos = 1 };
        if (int_list(T, &da, 0, NULL, dims, &n))
            return -1;
    }
    for (int i = 0; i < n; i++) {
        int d;
        if (norm_dim(T, dims[i], nd, &d))
            return -1;
        int64_t len = node(T, x)->shape[d];
        dims[i] = d;
        sh[i] = (int)op == 0 ? len / 2 : (len + 1) / 2;
    }
    if (n == 0)
        return fresh_contiguous(T, -1, copy_of(T, x));
    int32_t s = wrap_new(T, tracer_int_tuple(sh, n)), dl = wrap_new(T, tracer_int_tuple(dims, n));
    call_args b = { .pos = (int32_t[]){ x, s, dl }, .npos = 3 };
    return s < 0 || dl < 0 ? -1 : h_roll(T, &b, 1);
}

/* flip(x, dims) / fliplr (op 1) / flipupd (op 2): FLIP nodes wrapped in a
 * copy (eager's flip is a new tensor laid out as its input). */
static int32_t h_flip(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t dims[SMELT_MAX_DIMS];
    int n = 0;
    if (!is_tensor(T, x))
        return tr_break(T, "flip of a non-tensor");
    int nd = node(T, x)->ndim;
    if ((int)op == 1 || (int)op == 2) {
        if (nd < ((int)op == 1 ? 2 : 1) || a->npos + a->nkw != 1)
            return tr_break(T, "fliplr/flipud of too few dims (eager raises)");
        dims[n++] = (int)op == 1 ? 1 : 0;
    } else if (a->npos > 2) {   /* x.flip(0, 1) */
        call_args b = { .pos = a->pos + 1, .npos = a->npos - 1 };
        for (int i = 0; i < b.npos && i < SMELT_MAX_DIMS; i++)
            if (tr_int(T, b.pos[i], &dims[n++]))
                return -1;
    } else if (int_list(T, a, 1, "dims", dims, &n)) {
        return -1;
    }
    uint32_t seen = 0;
    for (int i = 0; i < n; i++) {
        int d;
        if (norm_dim(T, dims[i], nd, &d))
            return -1;
        if (seen & (1u << d))
            return tr_break(T, "flip dims repeat (eager raises)");
        seen |= 1u << d;
        if (node(T, x)->shape[d] <= 1)
            continue;
        smelt_node p = { .op = SMELT_OP_FLIP, .nsrc = 1, .src = { T->vals[x].node } };
        p.a.axis.dim = d;
        if ((x = mk(T, &p)) < 0)
            return -1;
    }
    return copy_of(T, x);
}

/* rot90(x, k=1, dims=(0, 1)): flips and a transpose, as eager builds it
 * (k = 1: flip dims[1], then transpose: a transposed view of the copy). */
static int32_t h_rot90(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t k, dims[SMELT_MAX_DIMS] = { 0, 1 };
    int n = 2, d0, d1;
    (void)op;
    if (!is_tensor(T, x) || get_int(T, arg(a, 1, "k"), 1, &k) || (!is_none(T, arg(a, 2, "dims")) && int_list(T, a, 2, "dims", dims, &n)))
        return is_tensor(T, x) ? -1 : tr_break(T, "rot90 of a non-tensor");
    int nd = node(T, x)->ndim;
    if (n != 2 || nd < 2 || norm_dim(T, dims[0], nd, &d0) || norm_dim(T, dims[1], nd, &d1) || d0 == d1)
        return T->broke ? -1 : tr_break(T, "rot90 dims (eager raises)");
    k = ((k % 4) + 4) % 4;
    int32_t fd[2];
    call_args f = { .pos = fd, .npos = 2 };
    if (k == 0)
        return fresh_contiguous(T, -1, copy_of(T, x));   /* eager: x.clone(contiguous) */
    fd[0] = x;
    fd[1] = wrap_new(T, Py_BuildValue(k == 2 ? "(ii)" : "(i)", k == 1 ? d1 : d0, d1));
    int32_t r = fd[1] < 0 ? -1 : h_flip(T, &f, 0);
    return r < 0 || k == 2 ? r : v_transpose(T, r, d0, d1);
}

/* frac: x - trunc(x) (floats). */
static int32_t h_frac(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    (void)op;
    if (!is_tensor(T, x) || a->npos + a->nkw != 1 || !smelt_dtype_is_float((smelt_dtype)node(T, x)->dtype))
        return tr_break(T, "frac of a non-float (eager raises)");
    return op2(T, SMELT_OP_SUB, x, op1(T, SMELT_OP_TRUNC, x));
}

/* logaddexp (op 0) / logaddexp2 (1): max + log1p(exp(-|a - b|)), a where
 * both are the same infinity. */
static int32_t h_logaddexp(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), y = arg(a, 1, "other");
    if (!is_tensor(T, x) || !is_tensor(T, y) || a->npos + a->nkw != 2)
        return tr_break(T, "logaddexp arguments");
    const smelt_node *s[2] = { node(T, x), node(T, y) };
    smelt_dtype dt = smelt_result_type(s, 2, (smelt_dtype)T->g->default_float);
    if (!smelt_dtype_is_float(dt))
        return tr_break(T, "logaddexp of integers");
    x = cast_to(T, x, dt), y = cast_to(T, y, dt);
    int32_t m = op2(T, SMELT_OP_MAXIMUM, x, y), d = op1(T, SMELT_OP_NEG, op1(T, SMELT_OP_ABS, op2(T, SMELT_OP_SUB, x, y)));
    int32_t r = (int)op == 0 ? op2(T, SMELT_OP_ADD, m, op1(T, SMELT_OP_LOG1P, op1(T, SMELT_OP_EXP, d)))
              : op2(T, SMELT_OP_ADD, m, op2(T, SMELT_OP_MUL, op1(T, SMELT_OP_LOG1P, op1(T, SMELT_OP_EXP2, d)), num(T, 1.0 / M_LN2)));
    return where3(T, op2(T, SMELT_OP_LOGICAL_AND, op1(T, SMELT_OP_ISINF, x), op2(T, SMELT_OP_EQ, x, y)), x, r);
}

/* dot / vdot / inner of 1-d tensors and mv: matmul (one dtype). */
static int32_t h_dot(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), y = arg(a, 1, (int)op == 1 ? "vec" : "other");
    if (y < 0)
        y = arg(a, 1, "tensor");
    if (!is_tensor(T, x) || !is_tensor(T, y) || a->npos + a->nkw != 2)
        return tr_break(T, "dot arguments");
    const smelt_node *p = node(T, x), *q = node(T, y);
    if (p->dtype != q->dtype || p->dtype == SMELT_BOOL || q->ndim != 1 || p->ndim != ((int)op == 1 ? 2 : 1) ||
        p->shape[p->ndim - 1] != q->shape[0])
        return tr_break(T, "dot of other shapes or dtypes (eager raises or another rule)");
    return matmul(T, x, y);
}

/* trace of a 2-d tensor: the sum of its diagonal (integers: int64). */
static int32_t h_trace(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    (void)op;
    if (!is_tensor(T, x) || node(T, x)->ndim != 2 || a->npos + a->nkw != 1)
        return tr_break(T, "trace of a tensor that is not 2-d (eager raises)");
    smelt_node p = { .op = SMELT_OP_DIAGONAL, .nsrc = 1, .src = { T->vals[x].node } };
    p.a.diag.dim1 = 0;
    p.a.diag.dim2 = 1;
    int32_t d = mk(T, &p);
    return d < 0 ? -1 : red(T, SMELT_OP_SUM, d, 1, 0, 0);
}

/* nanmean(x, dim=None, keepdim=False): the mean of the non-NaN values. */
static int32_t h_nanmean(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    uint32_t m;
    int keep;
    (void)op;
    if (!is_tensor(T, x) || !smelt_dtype_is_float((smelt_dtype)node(T, x)->dtype) || !is_none(T, arg(a, -1, "dtype")) ||
        dims_mask(T, arg(a, 1, "dim"), node(T, x)->ndim, &m) || get_bool(T, arg(a, 2, "keepdim"), 0, &keep))
        return T->broke ? -1 : tr_break(T, "nanmean arguments");
    int32_t isn = op1(T, SMELT_OP_ISNAN, x);
    int32_t s = red(T, SMELT_OP_SUM, where3(T, isn, num(T, 0.0), x), m, keep, 0);
    int32_t c = red(T, SMELT_OP_SUM, cast_to(T, op1(T, SMELT_OP_LOGICAL_NOT, isn), node(T, x)->dtype), m, keep, 0);
    return op2(T, SMELT_OP_DIV, s, c);
}

/* margin_ranking_loss(x1, x2, y, margin=0, reduction='mean'). */
static int32_t h_margin_ranking(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x1 = arg(a, 0, "input1"), x2 = arg(a, 1, "input2"), y = arg(a, 2, "target");
    int err = 0;
    (void)op;
    double margin = farg(T, a, 3, "margin", 0.0, &err);
    if (err || !is_tensor(T, x1) || !is_tensor(T, x2) || !is_tensor(T, y))
        return err ? -1 : tr_break(T, "margin_ranking_loss arguments");
    int32_t l = op2(T, SMELT_OP_ADD, op2(T, SMELT_OP_MUL, op1(T, SMELT_OP_NEG, y), op2(T, SMELT_OP_SUB, x1, x2)), num(T, margin));
    return reduce_loss(T, a, 6, clamp_to(T, l, num(T, 0.0), -1));
}

/* torch.constant_pad_nd(input, pad, value=0): F.pad's constant mode. */
static int32_t h_constant_pad_nd(tracer *T, const call_args *a, smelt_op op)
{
    int32_t v = arg(a, 2, "value");
    call_args b = { .pos = (int32_t[]){ arg(a, 0, "input"), arg(a, 1, "pad"), -1, v }, .npos = v >= 0 ? 4 : 2 };
    if (b.pos[0] < 0 || b.pos[1] < 0 || a->npos + a->nkw > 3)
        return tr_break(T, "constant_pad_nd arguments");
    if (v >= 0 && (b.pos[2] = wrap_new(T, PyUnicode_FromString("constant"))) < 0)
        return -1;
    return h_pad(T, &b, op);
}


/* var_mean / std_mean (op VAR / STD): (var or std, mean) over the same
 * dims, arguments as torch.var takes them. */
static int32_t h_var_mean(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    uint32_t mask;
    int keep;
    int64_t c;
    if (var_args(T, a, &mask, &keep, &c))
        return -1;
    int32_t items[2] = { red(T, op, x, mask, keep, c), -1 };
    items[1] = items[0] < 0 ? -1 : red(T, SMELT_OP_MEAN, x, mask, keep, 0);
    return items[1] < 0 ? -1 : tv_tuple(T, items, 2);
}

/* diag (op 0), diagflat (1), diag_embed (2): a 1-d input's values on a
 * diagonal of a square matrix (where the column index minus the row index
 * is the offset); diag of a 2-d input is a copy of its diagonal. */
static int32_t h_diag(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t k;
    if (!is_tensor(T, x) || get_int(T, arg(a, 1, (int)op == 0 ? "diagonal" : "offset"), 0, &k))
        return is_tensor(T, x) ? -1 : tr_break(T, "diag of a non-tensor");
    if ((int)op == 2 && (!is_none(T, arg(a, 2, "dim1")) || !is_none(T, arg(a, 3, "dim2"))))
        return tr_break(T, "diag_embed with dims");
    const smelt_node *n = node(T, x);
    if ((int)op == 0 && n->ndim == 2) {
        call_args b = { .pos = (int32_t[]){ x, int_value(T, k) }, .npos = 2 };
        int32_t d = b.pos[1] < 0 ? -1 : h_diagonal(T, &b, 0);
        return d < 0 ? -1 : fresh_contiguous(T, -1, copy_of(T, d));
    }
    if ((int)op == 1 && n->ndim != 1) {   /* diagflat: of the flattened input */
        int64_t f = smelt_node_numel(n);
        x = v_reshape(T, x, &f, 1);
        if (x < 0)
            return -1;
        n = node(T, x);
    }
    if (((int)op != 2 && n->ndim != 1) || ((int)op == 2 && n->ndim < 1) || n->ndim + 1 > SMELT_MAX_DIMS)
        return tr_break(T, "diag of a tensor of %d dims (eager raises)", n->ndim);
    int nd = n->ndim;
    int64_t len = n->shape[nd - 1], m = len + (k < 0 ? -k : k);
    /* value at (.., i, j): x padded to m along its last dim, at i (k >= 0)
     * or j (k < 0); kept where j - i == k */
    int32_t xp = x;
    if (m != len) {
        int64_t pads[2] = { 0, m - len };
        int32_t pv = wrap_new(T, tracer_int_tuple(pads, 2));
        call_args pa = { .pos = (int32_t[]){ x, pv }, .npos = 2 };
        if (pv < 0 || (xp = h_pad(T, &pa, 0)) < 0)
            return -1;
    }
    int64_t shape[SMELT_MAX_DIMS];
    memcpy(shape, n->shape, sizeof(int64_t) * (size_t)nd);
    shape[nd - 1] = m;
    shape[nd] = m;
    int32_t v = v_axis(T, SMELT_OP_UNSQUEEZE, xp, k >= 0 ? nd : nd - 1);
    smelt_node e = { .op = SMELT_OP_EXPAND, .nsrc = 1, .ndim = (uint8_t)(nd + 1) };
    if (v < 0)
        return -1;
    e.src[0] = T->vals[v].node;
    memcpy(e.shape, shape, sizeof shape);
    int32_t ve = mk(T, &e);
    smelt_node ri = { .op = SMELT_OP_IOTA, .ndim = 2, .dtype = SMELT_I64, .shape = { m, m } }, ci = ri;
    ri.a.axis.dim = 0;
    ci.a.axis.dim = 1;
    int32_t r = mk(T, &ri), c = mk(T, &ci);
    int32_t cond = op2(T, SMELT_OP_EQ, op2(T, SMELT_OP_SUB, c, r), wrap_new(T, PyLong_FromLongLong(k)));
    smelt_node z = { .op = SMELT_OP_FULL, .ndim = (uint8_t)(nd + 1), .dtype = n->dtype };
    memcpy(z.shape, shape, sizeof shape);
    int32_t zero = mk(T, &z);
    return cond < 0 || zero < 0 || ve < 0 ? -1 : where3(T, cond, ve, zero);
}

/* sum_to_size(x, *size): x summed over the dims size broadcasts (x itself
 * when the sizes match). */
static int32_t h_sum_to_size(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input");
    int64_t size[SMELT_MAX_DIMS];
    int n;
    (void)op;
    if (!is_tensor(T, x))
        return tr_break(T, "sum_to_size of a non-tensor");
    if (a->npos > 2) {
        for (n = 0; n < a->npos - 1 && n < SMELT_MAX_DIMS; n++)
            if (tr_int(T, a->pos[n + 1], &size[n]))
                return -1;
    } else if (int_list(T, a, 1, "size", size, &n)) {
        return -1;
    }
    const smelt_node *s = node(T, x);
    int nd = s->ndim, lead = nd - n;
    if (lead < 0)
        return tr_break(T, "sum_to_size to more dims (eager raises)");
    uint32_t mask = 0;
    if (n == 0) {   /* eager: the sum of every element (integers and bool: int64) */
        if (nd)
            return red(T, SMELT_OP_SUM, x, (1u << nd) - 1, 0, 0);
        return fresh_contiguous(T, -1, smelt_dtype_is_float(s->dtype) || s->dtype == SMELT_I64 ? copy_of(T, x)
                                                                                             : cast_to(T, x, SMELT_I64));
    }
    for (int d = 0; d < nd; d++) {
        if (d < lead)
            mask |= 1u << d;
        else if (size[d - lead] == 1 && s->shape[d] != 1)
            mask |= 1u << d;
        else if (size[d - lead] != s->shape[d])
            return tr_break(T, "sum_to_size of a shape that does not broadcast (eager raises)");
    }
    if (!mask)   /* eager: x itself */
        return x;
    int32_t r = red(T, SMELT_OP_SUM, x, mask, 1, 0);
    return r < 0 ? -1 : v_reshape(T, r, size, n);
}

/* repeat_interleave(x, repeats: int, dim=None): each element repeated. */
static int32_t h_repeat_interleave(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), rv = arg(a, 1, "repeats"), dv = arg(a, 2, "dim");
    int64_t r, d;
    int dim;
    (void)op;
    if (!is_tensor(T, x) || rv < 0 || T->vals[rv].kind == V_TENSOR || !is_none(T, arg(a, -1, "output_size")))
        return tr_break(T, "repeat_interleave by a tensor");
    if (tr_int(T, rv, &r))
        return -1;
    if (r < 0)
        return tr_break(T, "repeat_interleave by a negative count (eager raises)");
    if (is_none(T, dv)) {
        int64_t f = smelt_node_numel(node(T, x));
        x = v_reshape(T, x, &f, 1);
        d = 0;
    } else if (tr_int(T, dv, &d)) {
        return -1;
    }
    if (x < 0 || node(T, x)->ndim + 1 > SMELT_MAX_DIMS || norm_dim(T, d, node(T, x)->ndim, &dim))
        return T->broke ? -1 : tr_break(T, "repeat_interleave dims");
    const smelt_node *s = node(T, x);
    int64_t shape[SMELT_MAX_DIMS], out[SMELT_MAX_DIMS];
    int nd = s->ndim;
    for (int i = 0, j = 0; i <= nd; i++)
        shape[i] = i == dim + 1 ? r : s->shape[j++];
    for (int i = 0; i < nd; i++)
        out[i] = i == dim ? s->shape[i] * r : s->shape[i];
    int32_t u = v_axis(T, SMELT_OP_UNSQUEEZE, x, dim + 1);
    smelt_node e = { .op = SMELT_OP_EXPAND, .nsrc = 1, .ndim = (uint8_t)(nd + 1) };
    if (u < 0)
        return -1;
    e.src[0] = T->vals[u].node;
    memcpy(e.shape, shape, sizeof shape);
    int32_t v = mk(T, &e);
    return v < 0 ? -1 : v_reshape(T, fresh_contiguous(T, -1, copy_of(T, v)), out, nd);
}

/* kron(a, b) of tensors of one rank: a's and b's dims interleaved and
 * multiplied, then merged pairwise. */
static int32_t h_kron(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), y = arg(a, 1, "other");
    (void)op;
    if (!is_tensor(T, x) || !is_tensor(T, y) || node(T, x)->ndim != node(T, y)->ndim || node(T, x)->ndim > 4 ||
        node(T, x)->ndim == 0 || a->npos + a->nkw != 2)
        return tr_break(T, "kron of tensors of different ranks");
    const smelt_node *p = node(T, x), *q = node(T, y);
    int nd = p->ndim;
    int64_t sa[SMELT_MAX_DIMS], sb[SMELT_MAX_DIMS], out[SMELT_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        sa[2 * d] = p->shape[d], sa[2 * d + 1] = 1;
        sb[2 * d] = 1, sb[2 * d + 1] = q->shape[d];
        out[d] = p->shape[d] * q->shape[d];
    }
    int32_t m = op2(T, SMELT_OP_MUL, v_reshape(T, x, sa, 2 * nd), v_reshape(T, y, sb, 2 * nd));
    if (m >= 0 && node(T, m)->dtype == SMELT_BOOL)
        return tr_break(T, "kron of bool");
    return m < 0 ? -1 : v_reshape(T, m, out, nd);
}

/* isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False), as ATen: equal,
 * or |a - b| finite and within atol + |rtol * b| (bool in the default
 * float); NaNs equal when equal_nan. One dtype; tolerances >= 0. */
static int32_t h_isclose(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), y = arg(a, 1, "other");
    int err = 0, en = 0;
    (void)op;
    double rtol = farg(T, a, 2, "rtol", 1e-5, &err), atol = farg(T, a, 3, "atol", 1e-8, &err);
    if (err || get_bool(T, arg(a, 4, "equal_nan"), 0, &en))
        return -1;
    if (!is_tensor(T, x) || !is_tensor(T, y) || node(T, x)->dtype != node(T, y)->dtype || rtol < 0 || atol < 0)
        return tr_break(T, "isclose arguments (eager raises)");
    int fl = smelt_dtype_is_float((smelt_dtype)node(T, x)->dtype);
    int32_t close = op2(T, SMELT_OP_EQ, x, y);
    if (en && fl)
        close = op2(T, SMELT_OP_LOGICAL_OR, close, op2(T, SMELT_OP_LOGICAL_AND, op1(T, SMELT_OP_ISNAN, x), op1(T, SMELT_OP_ISNAN, y)));
    if (rtol == 0 && atol == 0)
        return close;
    int32_t cx = node(T, x)->dtype == SMELT_BOOL ? cast_to(T, x, default_float()) : x;
    int32_t cy = node(T, y)->dtype == SMELT_BOOL ? cast_to(T, y, default_float()) : y;
    int32_t allowed = op2(T, SMELT_OP_ADD, op1(T, SMELT_OP_ABS, op2(T, SMELT_OP_MUL, cy, num(T, rtol))), num(T, atol));
    int32_t actual = op1(T, SMELT_OP_ABS, op2(T, SMELT_OP_SUB, cx, cy));
    int32_t fin = T->vals[actual].kind == V_TENSOR && smelt_dtype_is_float((smelt_dtype)node(T, actual)->dtype)
                ? op1(T, SMELT_OP_LOGICAL_NOT, op2(T, SMELT_OP_LOGICAL_OR, op1(T, SMELT_OP_ISNAN, actual), op1(T, SMELT_OP_ISINF, actual)))
                : -1;
    int32_t within = op2(T, SMELT_OP_LE, actual, allowed);
    if (fin >= 0)
        within = op2(T, SMELT_OP_LOGICAL_AND, fin, within);
    return op2(T, SMELT_OP_LOGICAL_OR, close, within);
}

/* pairwise_distance(x1, x2, p=2, eps=1e-6, keepdim=False): the p-norm of
 * x1 - x2 + eps over the last dim. */
static int32_t h_pairwise_distance(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "x1"), y = arg(a, 1, "x2");
    int err = 0, keep = 0;
    (void)op;
    double p = farg(T, a, 2, "p", 2.0, &err), eps = farg(T, a, 3, "eps", 1e-6, &err);
    if (err || get_bool(T, arg(a, 4, "keepdim"), 0, &keep))
        return -1;
    if (!is_tensor(T, x) || !is_tensor(T, y) || !smelt_dtype_is_float((smelt_dtype)node(T, x)->dtype) || !(p > 0))
        return tr_break(T, "pairwise_distance arguments");
    int32_t d = op2(T, SMELT_OP_ADD, op2(T, SMELT_OP_SUB, x, y), num(T, eps));
    if (d < 0)
        return -1;
    int nd = node(T, d)->ndim;
    if (nd == 0)
        return tr_break(T, "pairwise_distance of 0-d tensors");
    int32_t r = pnorm(T, d, p, 1u << (nd - 1), keep);
    return r < 0 ? -1 : fresh_contiguous(T, -1, r);
}

/* Embedding and margin losses (op selects): element-wise loss values,
 * then reduction= (argument position rpos). */
enum { L_COSINE_EMBEDDING, L_HINGE_EMBEDDING, L_SOFT_MARGIN, L_HUBER };

static int32_t h_loss2(tracer *T, const call_args *a, smelt_op op)
{
    int err = 0, rpos;
    int32_t l = -1, p0 = arg(a, 0, "input"), p1 = arg(a, 1, "target");
    if ((int)op != L_COSINE_EMBEDDING && is_tensor(T, p0) && is_tensor(T, p1) &&
        (node(T, p0)->ndim != node(T, p1)->ndim ||
         memcmp(node(T, p0)->shape, node(T, p1)->shape, sizeof(int64_t) * node(T, p0)->ndim)))
        return tr_break(T, "loss of an input and a target of different sizes (eager warns)");
    switch ((int)op) {
    case L_COSINE_EMBEDDING: {   /* ATen: EPSILON 1e-12 on the squared magnitudes */
        int32_t x1 = arg(a, 0, "input1"), x2 = arg(a, 1, "input2"), y = arg(a, 2, "target");
        double margin = farg(T, a, 3, "margin", 0.0, &err);
        if (err || !is_tensor(T, x1) || !is_tensor(T, x2) || !is_tensor(T, y) || node(T, x1)->ndim < 1 ||
            node(T, x1)->ndim > 2 || node(T, x1)->ndim != node(T, x2)->ndim)
            return err ? -1 : tr_break(T, "cosine_embedding_loss arguments");
        uint32_t m = 1u << (node(T, x1)->ndim - 1);
        int32_t ps = red(T, SMELT_OP_SUM, op2(T, SMELT_OP_MUL, x1, x2), m, 0, 0);
        int32_t m1 = op2(T, SMELT_OP_ADD, red(T, SMELT_OP_SUM, op2(T, SMELT_OP_MUL, x1, x1), m, 0, 0), num(T, 1e-12));
        int32_t m2 = op2(T, SMELT_OP_ADD, red(T, SMELT_OP_SUM, op2(T, SMELT_OP_MUL, x2, x2), m, 0, 0), num(T, 1e-12));
        int32_t cos = op2(T, SMELT_OP_DIV, ps, op1(T, SMELT_OP_SQRT, op2(T, SMELT_OP_MUL, m1, m2)));
        int32_t pos = where3(T, op2(T, SMELT_OP_EQ, y, num(T, 1.0)), op2(T, SMELT_OP_SUB, num(T, 1.0), cos), num(T, 0.0));
        int32_t neg = where3(T, op2(T, SMELT_OP_EQ, y, num(T, -1.0)),
                             clamp_to(T, op2(T, SMELT_OP_SUB, cos, num(T, margin)), num(T, 0.0), -1), num(T, 0.0));
        l = op2(T, SMELT_OP_ADD, pos, neg);
        rpos = 6;
        break;
    }
    case L_HINGE_EMBEDDING: {
        int32_t x = arg(a, 0, "input"), y = arg(a, 1, "target");
        double margin = farg(T, a, 2, "margin", 1.0, &err);
        if (err || !is_tensor(T, x) || !is_tensor(T, y))
            return err ? -1 : tr_break(T, "hinge_embedding_loss arguments");
        int32_t mc = clamp_to(T, op2(T, SMELT_OP_SUB, num(T, margin), x), num(T, 0.0), -1);
        l = op2(T, SMELT_OP_ADD, where3(T, op2(T, SMELT_OP_NE, y, num(T, 1.0)), mc, num(T, 0.0)),
                where3(T, op2(T, SMELT_OP_NE, y, num(T, -1.0)), x, num(T, 0.0)));
        rpos = 5;
        break;
    }
    case L_SOFT_MARGIN: {
        int32_t x = arg(a, 0, "input"), y = arg(a, 1, "target");
        if (!is_tensor(T, x) || !is_tensor(T, y))
            return tr_break(T, "soft_margin_loss arguments");
        l = op1(T, SMELT_OP_LOG1P, op1(T, SMELT_OP_EXP, op2(T, SMELT_OP_MUL, op1(T, SMELT_OP_NEG, x), y)));
        rpos = 4;
        break;
    }
    case L_HUBER: {
        int32_t x = arg(a, 0, "input"), y = arg(a, 1, "target");
        if (!is_tensor(T, x) || !is_tensor(T, y) || !is_none(T, arg(a, -1, "weight")))
            return tr_break(T, "huber_loss arguments");
        double delta = farg(T, a, 3, "delta", 1.0, &err);
        if (err)
            return -1;
        if (!(delta > 0))
            return tr_break(T, "huber_loss with a non-positive delta (eager raises)");
        int32_t z = op1(T, SMELT_OP_ABS, op2(T, SMELT_OP_SUB, up32(T, x), up32(T, y)));
        l = where3(T, op2(T, SMELT_OP_LT, z, num(T, delta)), op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_MUL, z, z), num(T, 0.5)),
                   op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_SUB, z, num(T, 0.5 * delta)), num(T, delta)));
        l = down_to(T, l, x);   /* half precision: in float32, rounded once */
        /* reduction is F.huber_loss's third argument */
        int32_t rv = arg(a, 2, "reduction");
        call_args b = { .pos = (int32_t[]){ -1, -1, -1, -1, -1, rv }, .npos = rv >= 0 ? 6 : 0 };
        return l < 0 ? -1 : reduce_loss(T, &b, 5, l);
    }
    default:
        return tr_break(T, "unknown loss");
    }
    return l < 0 ? -1 : reduce_loss(T, a, rpos, l);
}

/* ---------- indexing: gather, index_select, take, embedding ---------- */

/* The op as a host call (what eager's kernel gives, its errors included):
 * for the cases the native forms below leave to torch. */
static int32_t as_host_call(tracer *T, PyObject *fn, const call_args *a)
{
    int32_t r = ext_call(T, fn, a);
    return r != -2 ? r : tr_break(T, "%s is not a host call", Py_TYPE(fn)->tp_name);
}

/* CHECKIDX of index value ix against n (wrap: negatives from the end). */
static int32_t checked_index(tracer *T, int32_t ix, int64_t n, int wrap)
{
    int32_t in = ix < 0 ? -1 : gnode(T, ix);
    if (in < 0)
        return -1;
    smelt_node p = { .op = SMELT_OP_CHECKIDX, .nsrc = 1, .src = { in } };
    p.a.gather.n = n;
    p.a.gather.wrap = (uint8_t)wrap;
    return mk(T, &p);
}

/* x broadcast to shape (n dims) without a copy: an EXPAND view. */
static int32_t expand_to(tracer *T, int32_t x, const int64_t *shape, int n)
{
    if (x < 0)
        return -1;
    const smelt_node *xn = node(T, x);
    if (xn->ndim == n && !memcmp(xn->shape, shape, sizeof(int64_t) * (size_t)n))
        return x;
    smelt_node p = { .op = SMELT_OP_EXPAND, .nsrc = 1, .src = { T->vals[x].node }, .ndim = (uint8_t)n };
    memcpy(p.shape, shape, sizeof(int64_t) * (size_t)n);
    return mk(T, &p);
}

/* expand_to with the sizes' expressions ex (-1: a number; NULL: none). */
static int32_t expand_to_ex(tracer *T, int32_t x, const int64_t *shape, const int32_t *ex, int n)
{
    if (x < 0)
        return -1;
    const smelt_node *xn = node(T, x);
    if (xn->ndim == n && !memcmp(xn->shape, shape, sizeof(int64_t) * (size_t)n))
        return x;
    if (ex)
        dyn_pend_shape(T, ex, n);
    return expand_to(T, x, shape, n);
}

/* The expression of value v (a V_SYM), or -1. */
static int32_t ex_of(tracer *T, int32_t v)
{
    return v >= 0 && T->vals[v].kind == V_SYM ? T->vals[v].node : -1;
}

/* GATHER of x along dim d at index ix (an integer tensor of x's rank,
 * >= 1): a new contiguous tensor. An index out of range (negatives
 * counting from the end when wrap) fails the run: the frame runs eagerly
 * and raises eager's error. */
static int32_t gather_at(tracer *T, int32_t x, int32_t ix, int d, int wrap)
{
    int32_t a = x < 0 ? -1 : gnode(T, x), b = a < 0 || ix < 0 ? -1 : gnode(T, ix);
    if (b < 0)
        return -1;
    smelt_node p = { .op = SMELT_OP_GATHER, .nsrc = 2, .src = { a, b } };
    p.a.gather.dim = d;
    p.a.gather.wrap = (uint8_t)wrap;
    return fresh_contiguous(T, -1, mk(T, &p));
}

/* x (>= 1-d) at the positions of 1-d index ix along dim d: x's shape with
 * dim d of ix's length (index_select, embedding, x[ix]). */
static int32_t select_rows(tracer *T, int32_t x, int32_t ix, int d, int wrap)
{
    const smelt_node *xn = node(T, x);
    int nd = xn->ndim;
    int64_t one[SMELT_MAX_DIMS], shape[SMELT_MAX_DIMS], k = node(T, ix)->ndim ? node(T, ix)->shape[0] : 1;
    int32_t ex[SMELT_MAX_DIMS], xnode = T->vals[x].node, inode = T->vals[ix].node;
    for (int i = 0; i < nd; i++) {
        one[i] = i == d ? k : 1;
        shape[i] = i == d ? k : xn->shape[i];
        ex[i] = i == d ? (node(T, ix)->ndim ? dyn_dim_ex(T, inode, 0) : -1) : dyn_dim_ex(T, xnode, i);
    }
    return gather_at(T, x, expand_to_ex(T, v_reshape(T, ix, one, nd), shape, ex, nd), d, wrap);
}

static int is_index_tensor(tracer *T, int32_t v, int int32_ok)
{
    if (!is_tensor(T, v))
        return 0;
    int dt = node(T, v)->dtype;
    return dt == SMELT_I64 || (int32_ok && dt == SMELT_I32);
}

/* nll_loss over log-probabilities x ([C], [N, C] or [N, C, d...]) of the
 * int64 class indices t (x's shape without C), per-class weight w (or -1),
 * reduction 0 none / 1 mean / 2 sum, ignore_index ig: -x[t] * w[t] where t
 * is not ig (0 there); the mean divides by the weights summed over those.
 * Half precision without reduction computes in float32, rounded once (its
 * sums are left to eager's kernel, which rounds as it goes). A target out of range
 * fails the run (the GATHER's check): eager raises. -2 for shapes and
 * dtypes left to the host call. */
static int32_t nll_of(tracer *T, int32_t x, int32_t t, int32_t w, int64_t red_mode, int64_t ig)
{
    const smelt_node *xn = node(T, x), *tn = node(T, t);
    int nd = xn->ndim, cd = nd == 1 ? 0 : 1, xdt = xn->dtype;
    if (!smelt_dtype_is_float((smelt_dtype)xdt) || tn->dtype != SMELT_I64 || nd < 1 || tn->ndim != nd - 1 ||
        red_mode < 0 || red_mode > 2 || xn->shape[cd] == 0)
        return -2;
    for (int i = 0, j = 0; i < nd; i++)
        if (i != cd && xn->shape[i] != tn->shape[j++])
            return -2;
    if (w >= 0 && (!is_tensor(T, w) || node(T, w)->ndim != 1 || node(T, w)->shape[0] != xn->shape[cd] ||
                   node(T, w)->dtype != xdt))
        return -2;
    int half = xdt == SMELT_F16 || xdt == SMELT_BF16;
    if (half && red_mode)
        return -2;   /* eager's half-precision sums round as they go */
    int64_t ishape[SMELT_MAX_DIMS], m = smelt_node_numel(tn), tshape[SMELT_MAX_DIMS];
    memcpy(tshape, tn->shape, sizeof tshape);
    int tnd = tn->ndim;   /* (xn, tn move as nodes are added: not read below) */
    if (half) {
        x = cast_to(T, x, SMELT_F32);
        w = w >= 0 ? cast_to(T, w, SMELT_F32) : -1;
    }
    for (int i = 0, j = 0; i < nd; i++)
        ishape[i] = i == cd ? 1 : tshape[j++];
    int32_t valid = op2(T, SMELT_OP_NE, t, int_value(T, ig));
    int32_t ts = where3(T, valid, t, int_value(T, 0));
    int32_t picked = gather_at(T, x, v_reshape(T, ts, ishape, nd), cd, 0);
    picked = v_reshape(T, picked, tshape, tnd);
    int32_t loss = op1(T, SMELT_OP_NEG, picked), wt = -1;
    if (w >= 0) {
        wt = v_reshape(T, gather_at(T, w, v_reshape(T, ts, &m, 1), 0, 0), tshape, tnd);
        loss = op2(T, SMELT_OP_MUL, loss, wt);
    }
    loss = where3(T, valid, loss, num(T, 0.0));
    if (loss < 0)
        return -1;
    uint32_t all = tnd ? (1u << tnd) - 1 : 0;
    int32_t r = loss;
    if (red_mode == 2) {
        r = red(T, SMELT_OP_SUM, loss, all, 0, 0);
    } else if (red_mode == 1) {
        int32_t den = wt >= 0 ? where3(T, valid, wt, num(T, 0.0)) : cast_to(T, valid, SMELT_F32);
        if (!half && wt < 0)
            den = cast_to(T, valid, xdt);
        r = op2(T, SMELT_OP_DIV, red(T, SMELT_OP_SUM, loss, all, 0, 0), red(T, SMELT_OP_SUM, den, all, 0, 0));
    }
    if (half && r >= 0)
        r = cast_to(T, r, xdt);
    return fresh_contiguous(T, -1, r);
}

/* torch._C._nn.nll_loss_nd(input, target, weight, reduction, ignore_index)
 * and cross_entropy_loss(input, target, weight, reduction, ignore_index,
 * label_smoothing) (first positional args as F.* passes them): class-index
 * targets natively (cross entropy: log_softmax over the class dim, then
 * nll; label smoothing and probability targets are host calls). */
static int32_t nll_call(tracer *T, PyObject *fn, const call_args *a, int ce)
{
    int32_t x = arg(a, 0, "self"), t = arg(a, 1, "target"), w = arg(a, 2, "weight");
    int64_t rm = 1, ig = -100;
    int err = 0;
    if (!is_tensor(T, x) || !is_tensor(T, t) || (!is_none(T, arg(a, 3, "reduction")) && tr_int(T, arg(a, 3, "reduction"), &rm)) ||
        (!is_none(T, arg(a, 4, "ignore_index")) && tr_int(T, arg(a, 4, "ignore_index"), &ig)))
        return T->broke ? -1 : as_host_call(T, fn, a);
    double ls = ce ? farg(T, a, 5, "label_smoothing", 0.0, &err) : 0.0;
    if (err)
        return -1;
    if (ls != 0.0 || !smelt_dtype_is_float((smelt_dtype)node(T, x)->dtype) || node(T, x)->ndim < 1)
        return as_host_call(T, fn, a);
    int32_t lp = x;
    if (ce) {
        int32_t dv = int_value(T, node(T, x)->ndim == 1 ? 0 : 1);
        call_args b = { .pos = (int32_t[]){ x, dv }, .npos = 2 };
        if (dv < 0 || (lp = h_softmax(T, &b, SMELT_OP_LOG)) < 0)
            return -1;
    }
    int32_t r = nll_of(T, lp, t, is_none(T, w) ? -1 : w, rm, ig);
    return r != -2 ? r : as_host_call(T, fn, a);
}

static int32_t scatter_region(tracer *T, PyObject *fn, const call_args *a, int sel);
static int32_t c_diagonal_scatter(tracer *T, PyObject *fn, const call_args *a, int op);
static int32_t c_unsafe_masked_index(tracer *T, PyObject *fn, const call_args *a, int op);
static int32_t put_call(tracer *T, PyObject *fn, const call_args *a, int op);

/* ---------- more native composites: diff, addr, isin, index_fill, ... ---------- */

/* diff(input, n=1, dim=-1, prepend=None, append=None): prepend and append
 * (tensors of input's rank) joined along dim, then n times the difference
 * of neighbours (bool: not-equal, as eager). */
static int32_t c_diff(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input"), pre = arg(a, 3, "prepend"), app = arg(a, 4, "append");
    int64_t n = 1, d = -1;
    (void)op;
    if (!is_tensor(T, x) || get_int(T, arg(a, 1, "n"), 1, &n) || get_int(T, arg(a, 2, "dim"), -1, &d))
        return T->broke ? -1 : as_host_call(T, fn, a);
    int nd = node(T, x)->ndim;
    if (n < 1 || nd < 1 || d < -nd || d >= nd || (!is_none(T, pre) && (!is_tensor(T, pre) || node(T, pre)->ndim != nd)) ||
        (!is_none(T, app) && (!is_tensor(T, app) || node(T, app)->ndim != nd)))
        return as_host_call(T, fn, a);
    int dim = (int)(d < 0 ? d + nd : d);
    int32_t parts[3], np = 0;
    for (int k = 0; k < 3; k++) {
        int32_t v = k == 0 ? pre : k == 1 ? x : app;
        if (k != 1 && is_none(T, v))
            continue;
        if (node(T, v)->dtype != node(T, x)->dtype)
            return as_host_call(T, fn, a);
        for (int i = 0; i < nd; i++)
            if (i != dim && node(T, v)->shape[i] != node(T, x)->shape[i])
                return as_host_call(T, fn, a);   /* eager raises */
        parts[np++] = T->vals[v].node;
    }
    int32_t y = np > 1 ? cat_nodes(T, parts, np, dim) : x;
    int isbool = node(T, x)->dtype == SMELT_BOOL;
    for (int64_t k = 0; k < n && y >= 0; k++) {
        int64_t len = node(T, y)->shape[dim];
        if (len == 0)
            break;
        int32_t yn = T->vals[y].node;   /* y[1:] - y[:-1] (their bounds symbolic along a symbolic dim) */
        if (dyn_pend_slice_of(T, yn, dim, -1, 1, 1, -1, 0, 0))
            return -1;
        int32_t hi = v_slice(T, y, dim, 1, len, 1);
        if (hi < 0 || dyn_pend_slice_of(T, yn, dim, -1, 0, 0, -1, -1, 1))
            return -1;
        int32_t lo = v_slice(T, y, dim, 0, len - 1, 1);
        y = op2(T, isbool ? SMELT_OP_NE : SMELT_OP_SUB, hi, lo);
    }
    if (y >= 0 && T->vals[y].node == T->vals[x].node)
        y = copy_of(T, y);
    return y;
}

/* addr(input, vec1, vec2, *, beta=1, alpha=1): beta * input + alpha *
 * outer(vec1, vec2) (bool: or/and; beta 0: input's values ignored). */
static int32_t c_addr(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t m = arg(a, 0, "input"), v1 = arg(a, 1, "vec1"), v2 = arg(a, 2, "vec2");
    int32_t bv = arg(a, 3, "beta"), av = arg(a, 4, "alpha");
    (void)op;
    if (!is_tensor(T, m) || !is_tensor(T, v1) || !is_tensor(T, v2) || node(T, v1)->ndim != 1 || node(T, v2)->ndim != 1 ||
        (!is_none(T, bv) && T->vals[bv].kind != V_OBJ) || (!is_none(T, av) && T->vals[av].kind != V_OBJ))
        return as_host_call(T, fn, a);
    PyObject *bo = is_none(T, bv) ? NULL : tr_const(T, bv), *ao = is_none(T, av) ? NULL : tr_const(T, av);
    if ((!is_none(T, bv) && !bo) || (!is_none(T, av) && !ao))
        return -1;
    if ((bo && !PyLong_Check(bo) && !PyFloat_Check(bo)) || (ao && !PyLong_Check(ao) && !PyFloat_Check(ao)))
        return as_host_call(T, fn, a);
    int rt = smelt_dtype_promote(smelt_dtype_promote((smelt_dtype)node(T, m)->dtype, (smelt_dtype)node(T, v1)->dtype),
                                 (smelt_dtype)node(T, v2)->dtype);
    int isf = smelt_dtype_is_float((smelt_dtype)rt);
    if ((!isf && ((bo && PyFloat_Check(bo)) || (ao && PyFloat_Check(ao)))))
        return as_host_call(T, fn, a);   /* eager raises */
    int64_t shape[2] = { node(T, v1)->shape[0], node(T, v2)->shape[0] };
    const smelt_node *mn = node(T, m);
    for (int i = 0; i < mn->ndim; i++)
        if (mn->ndim > 2 || (mn->shape[i] != 1 && mn->shape[i] != shape[i + 2 - mn->ndim]))
            return as_host_call(T, fn, a);   /* eager raises */
    double beta = bo ? PyFloat_AsDouble(bo) : 1.0, alpha = ao ? PyFloat_AsDouble(ao) : 1.0;
    if ((rt == SMELT_F16 || rt == SMELT_BF16) && (alpha != 1 || (beta != 1 && beta != 0)))
        return as_host_call(T, fn, a);   /* eager rounds alpha and beta to half first */
    int ct = rt;   /* half: each product and sum rounded, as eager's kernel */
    int64_t col[2] = { shape[0], 1 }, row[2] = { 1, shape[1] };
    int32_t c1 = v_reshape(T, cast_to(T, v1, ct), col, 2), c2 = v_reshape(T, cast_to(T, v2, ct), row, 2);
    int32_t r;
    if (rt == SMELT_BOOL) {
        r = alpha != 0 ? op2(T, SMELT_OP_LOGICAL_AND, c1, c2) : -1;
        if (beta != 0)
            r = r < 0 ? m : op2(T, SMELT_OP_LOGICAL_OR, m, r);
        if (r < 0)
            r = full_of(T, Py_False, SMELT_BOOL, shape, 2);
        else
            r = expand_to(T, r, shape, 2);
        return fresh_contiguous(T, m, r);
    }
    int32_t o = op2(T, SMELT_OP_MUL, c1, c2);
    if (alpha != 1)
        o = op2(T, SMELT_OP_MUL, o, ao && PyLong_Check(ao) ? int_value(T, (int64_t)alpha) : num(T, alpha));
    if (beta != 0) {
        int32_t mm = cast_to(T, m, ct);
        if (beta != 1)
            mm = op2(T, SMELT_OP_MUL, mm, bo && PyLong_Check(bo) ? int_value(T, (int64_t)beta) : num(T, beta));
        o = op2(T, SMELT_OP_ADD, mm, o);
    }
    r = cast_to(T, o, rt);
    return r < 0 ? -1 : fresh_contiguous(T, m, r);
}

/* isin(elements, test_elements, *, assume_unique=False, invert=False) of
 * two tensors: any element of test_elements equal (as torch.eq) to each
 * element; a reduction over the test elements (at most 4096 of them:
 * larger sets are eager's sort-based kernel). */
static int32_t c_isin(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t e = arg(a, 0, "elements"), t = arg(a, 1, "test_elements");
    int inv = 0, uq = 0;
    (void)op;
    if (!is_tensor(T, e) || !is_tensor(T, t) || get_bool(T, arg(a, 2, "assume_unique"), 0, &uq) ||
        get_bool(T, arg(a, 3, "invert"), 0, &inv))
        return T->broke ? -1 : as_host_call(T, fn, a);
    const smelt_node *en = node(T, e);
    int64_t k = smelt_node_numel(node(T, t)), shape[SMELT_MAX_DIMS];
    int nd = en->ndim;
    if (k > 4096 || nd + 1 > SMELT_MAX_DIMS || node(T, e)->dtype == SMELT_BOOL || node(T, t)->dtype == SMELT_BOOL)
        return as_host_call(T, fn, a);
    memcpy(shape, en->shape, sizeof(int64_t) * (size_t)nd);
    shape[nd] = 1;
    int32_t eq = op2(T, SMELT_OP_EQ, v_reshape(T, e, shape, nd + 1), v_reshape(T, t, &k, 1));
    int32_t r = red(T, SMELT_OP_ANY, eq, 1u << nd, 0, 0);
    if (inv)
        r = op1(T, SMELT_OP_LOGICAL_NOT, r);
    return fresh_contiguous(T, -1, r);
}

/* index_fill(input, dim, index, value): where any checked index (CHECKIDX,
 * negatives from the end) names the position along dim, value (cast to
 * input's dtype), else input. */
static int32_t c_index_fill(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input"), ix = arg(a, 2, "index"), v = arg(a, 3, "value");
    int64_t d;
    (void)op;
    if (!is_tensor(T, x) || !is_index_tensor(T, ix, 0) || node(T, ix)->ndim > 1 || tr_int(T, arg(a, 1, "dim"), &d))
        return T->broke ? -1 : as_host_call(T, fn, a);
    const smelt_node *xn = node(T, x);
    int nd = xn->ndim, dim;
    if (nd < 1 || d < -nd || d >= nd || (is_tensor(T, v) && node(T, v)->ndim != 0) ||
        (!is_tensor(T, v) && !(T->vals[v].kind == V_OBJ && (PyLong_Check(T->vals[v].obj) || PyFloat_Check(T->vals[v].obj)))))
        return as_host_call(T, fn, a);
    dim = (int)(d < 0 ? d + nd : d);
    int64_t k = smelt_node_numel(node(T, ix)), shape[SMELT_MAX_DIMS + 1], size = xn->shape[dim];
    int xdt = xn->dtype;   /* (xn moves as nodes are added) */
    for (int i = 0; i <= nd; i++)
        shape[i] = i == dim ? size : 1;
    int32_t xnode = T->vals[x].node, flat = v_reshape(T, ix, &k, 1), sizev = dyn_dim(T, xnode, dim);
    if (flat < 0 || sizev < 0)
        return -1;
    dyn_pend_bound(T, sizev);   /* (a symbolic dim: the bound and the positions are its size) */
    int32_t ck = checked_index(T, flat, size, 1);
    smelt_node io = { .op = SMELT_OP_IOTA, .dtype = SMELT_I64, .ndim = (uint8_t)(nd + 1) };
    memcpy(io.shape, shape, sizeof shape);
    io.shape[nd] = 1;
    io.a.axis.dim = dim;
    int32_t ex[SMELT_MAX_DIMS + 1];
    for (int i = 0; i <= nd && i < SMELT_MAX_DIMS; i++)
        ex[i] = i == dim ? dyn_dim_ex(T, xnode, dim) : -1;
    if (ck >= 0)
        dyn_pend_shape(T, ex, nd + 1);
    int32_t pos = ck < 0 ? -1 : mk(T, &io);
    int32_t eq = op2(T, SMELT_OP_EQ, pos, ck);   /* [.., n at dim, .., k] */
    int32_t hit = red(T, SMELT_OP_ANY, eq, 1u << nd, 0, 0);
    int32_t r = where3(T, hit, v, x);
    return r < 0 ? -1 : cast_to(T, r, xdt);
}

/* aten._safe_softmax(x, dim, dtype=None): softmax, 0 on rows that are all
 * -inf. */
static int32_t c_safe_softmax(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "self"), dv = arg(a, 1, "dim");
    int64_t d;
    (void)op;
    if (!is_tensor(T, x) || !smelt_dtype_is_float((smelt_dtype)node(T, x)->dtype) || !is_none(T, arg(a, 2, "dtype")) ||
        tr_int(T, dv, &d) || node(T, x)->ndim < 1 || d < -node(T, x)->ndim || d >= node(T, x)->ndim)
        return T->broke ? -1 : as_host_call(T, fn, a);
    /* rows that are all -inf softmax a row of zeros instead (then 0): no
     * NaN reaches the values or, through the softmax, their gradient */
    int dim = (int)(d < 0 ? d + node(T, x)->ndim : d);
    int32_t dead = red(T, SMELT_OP_ALL, op2(T, SMELT_OP_EQ, x, num(T, -INFINITY)), 1u << dim, 1, 0);
    int32_t xs = where3(T, dead, num(T, 0.0), x);
    xs = xs < 0 ? -1 : cast_to(T, xs, node(T, x)->dtype);
    call_args b = { .pos = (int32_t[]){ xs, dv }, .npos = 2 };
    int32_t sm = xs < 0 ? -1 : h_softmax(T, &b, SMELT_OP_EXP);
    int32_t r = sm < 0 ? -1 : where3(T, dead, num(T, 0.0), sm);
    return r < 0 ? -1 : fresh_contiguous(T, -1, cast_to(T, r, node(T, x)->dtype));
}

/* unfold_copy(input, dimension, size, step): Tensor.unfold's view, copied. */
static int32_t c_unfold_copy(tracer *T, PyObject *fn, const call_args *a, int op)
{
    PyObject *m = PyObject_GetAttrString(tensor_type, "unfold");
    int32_t v = m ? native_call(T, m, a, 0) : -1;
    Py_XDECREF(m);
    (void)fn;
    (void)op;
    if (v < 0 || T->vals[v].kind != V_TENSOR)
        return v < 0 ? -1 : tr_break(T, "unfold of a non-tensor");
    return fresh_contiguous(T, -1, copy_of(T, v));
}


/* Scans of at most SHORT_NATIVE_MAX elements along dim (cumsum, cumprod:
 * op SUM / PROD; logcumsumexp: op EXP) as a reduction over a triangular
 * mask: out[.., i, ..] = reduce over j <= i of x[.., j, ..] (O(n^2) work,
 * fused; longer scans are eager's kernel). Integers and bool scan in int64
 * (dtype= casts first); a contiguous input (eager's result is then
 * contiguous), else a host call. */
#define SHORT_NATIVE_MAX 64

static int32_t scan_call(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input");
    int64_t d;
    if (!is_tensor(T, x) || tr_int(T, arg(a, 1, "dim"), &d))
        return T->broke ? -1 : as_host_call(T, fn, a);
    int dt = op == SMELT_OP_EXP ? -2 : dtype_arg(T, a, -2);
    if (dt == -1)
        return -1;
    const smelt_node *xn = node(T, x);
    int nd = xn->ndim, n0 = nd ? nd : 1;
    if (d < -n0 || d >= n0 || nd + 1 > SMELT_MAX_DIMS)
        return as_host_call(T, fn, a);
    int dim = nd ? (int)(d < 0 ? d + nd : d) : 0;
    int64_t n = nd ? xn->shape[dim] : 1, st[SMELT_MAX_DIMS];
    int k = eager_strides(T, T->vals[x].node, st);
    if (k < 0)
        return -1;
    if (n > SHORT_NATIVE_MAX || !k || !strides_contiguous(xn, st) ||
        (op == SMELT_OP_EXP && !smelt_dtype_is_float((smelt_dtype)xn->dtype)))
        return as_host_call(T, fn, a);
    int32_t xnode = T->vals[x].node, ne = nd ? dyn_dim_ex(T, xnode, dim) : -1;
    if (ne >= 0)   /* a symbolic length: eager's kernel serves every length, the composite 64 at most */
        return as_host_call(T, fn, a);
    int64_t shape[SMELT_MAX_DIMS], mshape[SMELT_MAX_DIMS];
    int32_t she[SMELT_MAX_DIMS], mse[SMELT_MAX_DIMS];
    for (int i = 0; i <= nd; i++) {   /* [.., i: n, j: n, ..] */
        shape[i] = i == dim || i == dim + 1 ? n : xn->shape[i < dim ? i : i - 1];
        mshape[i] = i == dim || i == dim + 1 ? n : 1;
        she[i] = i == dim || i == dim + 1 ? ne : dyn_dim_ex(T, xnode, i < dim ? i : i - 1);
        mse[i] = i == dim || i == dim + 1 ? ne : -1;
    }
    int odt = xn->dtype, ext = op == SMELT_OP_AMAX || op == SMELT_OP_AMIN;
    if (ext && nd == 0)
        return as_host_call(T, fn, a);
    if (dt >= 0)   /* (xn moves as nodes are added: not read below) */
        x = cast_to(T, x, dt);
    else if (!smelt_dtype_is_float((smelt_dtype)xn->dtype))
        x = cast_to(T, x, SMELT_I64);
    if (x < 0)
        return -1;
    if (nd == 0)   /* a 0-d scan is the value itself, a new tensor */
        return fresh_contiguous(T, -1, copy_of(T, x));
    int32_t xj = expand_to_ex(T, v_axis(T, SMELT_OP_UNSQUEEZE, x, dim), shape, she, nd + 1);
    smelt_node pi = { .op = SMELT_OP_IOTA, .dtype = SMELT_I64, .ndim = (uint8_t)(nd + 1) }, pj;
    memcpy(pi.shape, mshape, sizeof mshape);
    pj = pi;
    pi.a.axis.dim = dim;
    pj.a.axis.dim = dim + 1;
    dyn_pend_shape(T, mse, nd + 1);
    int32_t iv = mk(T, &pi);
    dyn_pend_shape(T, mse, nd + 1);
    int32_t jv0 = iv < 0 ? -1 : mk(T, &pj);
    int32_t mask = jv0 < 0 ? -1 : op2(T, SMELT_OP_GE, iv, jv0);
    uint32_t rd = 1u << (dim + 1);
    int32_t r;
    if (op == SMELT_OP_EXP) {   /* log(sum exp(x - m)) + m, m the running max; inf as eager */
        int32_t m = red(T, SMELT_OP_AMAX, where3(T, mask, xj, num(T, -INFINITY)), rd, 1, 0);
        int32_t s = red(T, SMELT_OP_SUM, where3(T, mask, op1(T, SMELT_OP_EXP, op2(T, SMELT_OP_SUB, xj, m)), num(T, 0.0)), rd, 1, 0);
        r = op2(T, SMELT_OP_ADD, m, op1(T, SMELT_OP_LOG, s));
        r = where3(T, op1(T, SMELT_OP_ISINF, m), m, r);
        r = v_axis(T, SMELT_OP_SQUEEZE, r, dim + 1);
    } else if (ext) {   /* cummax / cummin: the running extreme and its last index (a NaN's once seen) */
        int mx = op == SMELT_OP_AMAX, fl = smelt_dtype_is_float((smelt_dtype)node(T, x)->dtype);
        int32_t id = fl ? num(T, mx ? -INFINITY : INFINITY) : int_value(T, mx ? INT64_MIN : INT64_MAX);
        int32_t m = red(T, op, where3(T, mask, xj, id), rd, 1, 0), jv = jv0;
        int32_t hit = op2(T, SMELT_OP_LOGICAL_AND, mask, op2(T, SMELT_OP_EQ, xj, m));
        int32_t idx = red(T, SMELT_OP_AMAX, where3(T, hit, jv, int_value(T, -1)), rd, 0, 0);
        if (fl) {
            int32_t nan = op2(T, SMELT_OP_LOGICAL_AND, mask, op1(T, SMELT_OP_ISNAN, xj));
            int32_t ni = red(T, SMELT_OP_AMAX, where3(T, nan, jv, int_value(T, -1)), rd, 0, 0);
            idx = where3(T, op2(T, SMELT_OP_GE, ni, int_value(T, 0)), ni, idx);
        }
        int32_t vals = cast_to(T, v_axis(T, SMELT_OP_SQUEEZE, m, dim + 1), odt);
        if (vals < 0 || idx < 0)
            return -1;
        return named_pair(T, fresh_contiguous(T, -1, vals), fresh_contiguous(T, -1, idx), mx ? "cummax" : "cummin");
    } else {
        r = red(T, op, where3(T, mask, xj, int_value(T, op == SMELT_OP_PROD)), rd, 0, 0);
    }
    return r < 0 ? -1 : fresh_contiguous(T, -1, cast_to(T, r, node(T, x)->dtype));
}


/* ---------- writes at data-dependent positions: scatter, index_add, ... ---------- */

/* Scatter-style ops write x's positions along dim from K entries of an
 * index (K at most SHORT_NATIVE_MAX): out[.., j, ..] combines the entries
 * k whose checked index (CHECKIDX, no wrap) is j. Built as reductions over
 * a k axis inserted after dim: mask[.., j, k, ..] = (index[.., k, ..] ==
 * j), so the write is a fused reduction (O(n K) per row) instead of a
 * sequential loop. Duplicates: sums add up, copies keep the last entry (as
 * eager's CPU kernels). */
enum { SC_SUM, SC_PROD, SC_MEAN, SC_AMAX, SC_AMIN, SC_COPY, SC_VALUE };

typedef struct scatter_args {
    int32_t x, ci, src;    /* ci: checked index [.., 1, K, ..]; src: [.., 1, K, ..] (or a scalar value) */
    int32_t srcf;          /* SC_COPY: the source laid out with K along dim (x's shape off dim) */
    int dim, nd;
    int64_t n, K;
} scatter_args;

static int scatter_reduce_op(PyObject *r)
{
    static const char *const names[] = { "sum", "prod", "mean", "amax", "amin" };
    for (int i = 0; r && PyUnicode_Check(r) && i < 5; i++)
        if (!PyUnicode_CompareWithASCIIString(r, names[i]))
            return i;
    return -1;
}

/* The combined value of the writes (kind SC_*) with x where an entry
 * writes (include_self: x takes part in the reduction), x elsewhere, in
 * x's dtype: a new contiguous tensor. */
static int32_t scatter_combine(tracer *T, const scatter_args *s, int kind, int include_self, int32_t value)
{
    int nd = s->nd, dim = s->dim, xdt = node(T, s->x)->dtype;
    int64_t ishape[SMELT_MAX_DIMS];
    for (int i = 0; i <= nd; i++)
        ishape[i] = i == dim ? s->n : 1;
    smelt_node io = { .op = SMELT_OP_IOTA, .dtype = SMELT_I64, .ndim = (uint8_t)(nd + 1) };
    memcpy(io.shape, ishape, sizeof ishape);
    io.a.axis.dim = dim;
    int32_t mask = op2(T, SMELT_OP_EQ, mk(T, &io), s->ci);
    uint32_t kd = 1u << (dim + 1);
    int32_t hits = red(T, SMELT_OP_ANY, mask, kd, 0, 0), v = -1, x = s->x;
    int fl = smelt_dtype_is_float((smelt_dtype)xdt);
    switch (kind) {
    case SC_VALUE:
        v = value;
        break;
    case SC_COPY: {   /* the last entry that writes here */
        smelt_node ko = io;
        ko.shape[dim] = 1;
        ko.shape[dim + 1] = s->K;
        ko.a.axis.dim = dim + 1;
        int32_t last = red(T, SMELT_OP_AMAX, where3(T, mask, mk(T, &ko), int_value(T, -1)), kd, 0, 0);
        int64_t xs[SMELT_MAX_DIMS];   /* (the mask of a 1-d index broadcasts off dim) */
        memcpy(xs, node(T, x)->shape, sizeof xs);
        v = gather_at(T, s->srcf, expand_to(T, where3(T, hits, last, int_value(T, 0)), xs, nd), dim, 0);
        break;
    }
    case SC_SUM: case SC_MEAN:
        v = red(T, SMELT_OP_SUM, where3(T, mask, s->src, int_value(T, 0)), kd, 0, 0);
        if (include_self)
            v = op2(T, SMELT_OP_ADD, cast_to(T, x, node(T, v)->dtype), v);
        if (kind == SC_MEAN) {
            int32_t c = red(T, SMELT_OP_SUM, mask, kd, 0, 0);
            if (include_self)
                c = op2(T, SMELT_OP_ADD, c, int_value(T, 1));
            v = op2(T, fl ? SMELT_OP_DIV : SMELT_OP_FLOORDIV, v, where3(T, hits, c, int_value(T, 1)));
        }
        break;
    case SC_PROD:
        v = red(T, SMELT_OP_PROD, where3(T, mask, s->src, int_value(T, 1)), kd, 0, 0);
        if (include_self)
            v = op2(T, SMELT_OP_MUL, cast_to(T, x, node(T, v)->dtype), v);
        break;
    default: {   /* amax / amin: the identity is the other end of the range */
        int mx = kind == SC_AMAX;
        int32_t id = fl ? num(T, mx ? -INFINITY : INFINITY) : int_value(T, mx ? INT64_MIN : INT64_MAX);
        int32_t sv = fl ? s->src : cast_to(T, s->src, SMELT_I64);   /* (the identity fits int64 only) */
        v = red(T, mx ? SMELT_OP_AMAX : SMELT_OP_AMIN, where3(T, mask, sv, id), kd, 0, 0);
        if (include_self)
            v = op2(T, mx ? SMELT_OP_MAXIMUM : SMELT_OP_MINIMUM, x, v);
    }
    }
    int32_t r = where3(T, hits, v, x);
    return r < 0 ? -1 : fresh_contiguous(T, x, cast_to(T, r, xdt));
}

/* Checks shared by the scatter forms: x a contiguous (eager's strides)
 * tensor of 1..7 dims in a dtype the kind computes, dim in range. 0 ok,
 * 1 leave it to torch, -1 error. */
static int scatter_x_ok(tracer *T, int32_t x, int32_t dv, int kind, int *dim)
{
    int64_t d, st[SMELT_MAX_DIMS];
    if (!is_tensor(T, x) || tr_int(T, dv, &d))
        return T->broke ? -1 : 1;
    const smelt_node *xn = node(T, x);
    int nd = xn->ndim, dt = xn->dtype;
    if (nd < 1 || nd + 1 > SMELT_MAX_DIMS || d < -nd || d >= nd ||
        (dt == SMELT_BOOL && kind != SC_COPY && kind != SC_VALUE) ||
        ((dt == SMELT_F16 || dt == SMELT_BF16) && kind != SC_COPY && kind != SC_VALUE && kind != SC_AMAX && kind != SC_AMIN))
        return 1;   /* (eager's half sums round as they go) */
    *dim = (int)(d < 0 ? d + nd : d);
    int k = eager_strides(T, T->vals[x].node, st);
    return k < 0 ? -1 : !k || !strides_contiguous(xn, st);
}

/* scatter(input, dim, index, src | value, *, reduce=None) (op SC_COPY),
 * scatter_add(input, dim, index, src) (SC_SUM) and scatter_reduce(input,
 * dim, index, src, reduce, *, include_self=True) (op -1: reduce names it):
 * index and src of input's rank, index no larger than src, nor than input
 * off dim; entries of input's positions the index does not cover are
 * padded (index -1, which no position has). */
static int32_t scatter_call(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input"), ix = arg(a, 2, "index"), src = arg(a, 3, "src");
    int kind = op, self = 1, dim;
    if (src < 0)
        src = arg(a, 3, "value");
    if (op < 0) {
        PyObject *r = T->vals[arg(a, 4, "reduce")].kind == V_OBJ ? tr_const(T, arg(a, 4, "reduce")) : NULL;
        if ((kind = scatter_reduce_op(r)) < 0 || get_bool(T, arg(a, 5, "include_self"), 1, &self))
            return T->broke ? -1 : as_host_call(T, fn, a);
    } else if (!is_none(T, arg(a, 4, "reduce"))) {
        return as_host_call(T, fn, a);
    }
    if (op == SC_COPY && !is_tensor(T, src))
        kind = SC_VALUE;
    int ok = scatter_x_ok(T, x, arg(a, 1, "dim"), kind, &dim);
    if (ok)
        return ok < 0 ? -1 : as_host_call(T, fn, a);
    const smelt_node *xn = node(T, x);
    int nd = xn->ndim;
    if (!is_index_tensor(T, ix, 0) || node(T, ix)->ndim != nd ||
        (kind != SC_VALUE && (node(T, src)->ndim != nd || node(T, src)->dtype != xn->dtype)) ||
        (kind == SC_VALUE && !(T->vals[src].kind == V_OBJ && (PyLong_Check(T->vals[src].obj) || PyFloat_Check(T->vals[src].obj)))))
        return as_host_call(T, fn, a);
    int64_t xs[SMELT_MAX_DIMS], is[SMELT_MAX_DIMS], K = node(T, ix)->shape[dim], n = xn->shape[dim];
    memcpy(xs, xn->shape, sizeof xs);
    memcpy(is, node(T, ix)->shape, sizeof is);
    for (int i = 0; i < nd; i++)
        if ((i != dim && is[i] > xs[i]) || (kind != SC_VALUE && is[i] > node(T, src)->shape[i]))
            return as_host_call(T, fn, a);   /* eager raises */
    if (K > SHORT_NATIVE_MAX)
        return as_host_call(T, fn, a);
    if (K == 0 || !smelt_node_numel(node(T, ix)))
        return fresh_contiguous(T, -1, copy_of(T, x));
    scatter_args s = { .x = x, .dim = dim, .nd = nd, .n = n, .K = K, .srcf = -1 };
    PyObject *m1 = PyLong_FromLong(-1), *z = PyLong_FromLong(0);
    int32_t ci = checked_index(T, ix, n, 0), sv = kind == SC_VALUE ? -1 : src;
    for (int i = 0; i < nd && sv >= 0; i++)   /* src cut to the index's extent */
        if (node(T, sv)->shape[i] != is[i])
            sv = v_slice(T, sv, i, 0, is[i], 1);
    for (int i = 0; i < nd && ci >= 0; i++)   /* both padded to x's extent off dim */
        if (i != dim && is[i] < xs[i]) {
            ci = pad_dim(T, ci, i, 0, xs[i] - is[i], 0, m1);
            if (sv >= 0)
                sv = pad_dim(T, sv, i, 0, xs[i] - is[i], 0, z);
        }
    Py_XDECREF(m1);
    Py_XDECREF(z);
    s.ci = v_axis(T, SMELT_OP_UNSQUEEZE, ci, dim);
    s.src = sv < 0 ? -1 : v_axis(T, SMELT_OP_UNSQUEEZE, sv, dim);
    s.srcf = sv;
    if (s.ci < 0 || (kind != SC_VALUE && s.src < 0))
        return -1;
    return scatter_combine(T, &s, kind, self, kind == SC_VALUE ? src : -1);
}

/* x written along dim at the K positions of ck (a 1-d checked int64
 * index) from src (x's shape with K along dim): scatter_combine with the
 * index broadcast off dim. */
static int32_t index_write(tracer *T, int32_t x, int dim, int32_t ck, int32_t src, int kind, int self)
{
    if (ck < 0 || src < 0)
        return -1;
    int nd = node(T, x)->ndim;
    int64_t K = smelt_node_numel(node(T, ck)), kshape[SMELT_MAX_DIMS];
    for (int i = 0; i <= nd; i++)
        kshape[i] = i == dim + 1 ? K : 1;
    scatter_args s = { .x = x, .dim = dim, .nd = nd, .n = node(T, x)->shape[dim], .K = K, .srcf = src };
    s.ci = v_reshape(T, ck, kshape, nd + 1);
    s.src = v_axis(T, SMELT_OP_UNSQUEEZE, src, dim);
    if (s.ci < 0 || s.src < 0)
        return -1;
    return scatter_combine(T, &s, kind, self, -1);
}

/* index_add(input, dim, index, source, *, alpha=1) (op SC_SUM),
 * index_copy(input, dim, index, source) (SC_COPY) and index_reduce(input,
 * dim, index, source, reduce, *, include_self=True) (op -1): a 1-d index
 * of K entries, source of input's shape with K along dim. */
static int32_t index_write_call(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input"), ix = arg(a, 2, "index"), src = arg(a, 3, "source"), av = arg(a, -1, "alpha");
    int kind = op, self = 1, dim;
    if (op < 0) {
        PyObject *r = T->vals[arg(a, 4, "reduce")].kind == V_OBJ ? tr_const(T, arg(a, 4, "reduce")) : NULL;
        if ((kind = scatter_reduce_op(r)) < 0 || kind == SC_SUM || get_bool(T, arg(a, 5, "include_self"), 1, &self))
            return T->broke ? -1 : as_host_call(T, fn, a);
    }
    int ok = scatter_x_ok(T, x, arg(a, 1, "dim"), kind, &dim);
    if (ok)
        return ok < 0 ? -1 : as_host_call(T, fn, a);
    const smelt_node *xn = node(T, x);
    int nd = xn->ndim;
    if (!is_index_tensor(T, ix, 1) || node(T, ix)->ndim > 1 || !is_tensor(T, src) || node(T, src)->ndim != nd ||
        node(T, src)->dtype != xn->dtype || (!is_none(T, av) && (T->vals[av].kind != V_OBJ || !PyLong_Check(T->vals[av].obj))))
        return as_host_call(T, fn, a);
    int64_t K = smelt_node_numel(node(T, ix)), n = xn->shape[dim], alpha = 1;
    for (int i = 0; i < nd; i++)
        if (node(T, src)->shape[i] != (i == dim ? K : xn->shape[i]))
            return as_host_call(T, fn, a);   /* eager raises */
    if (K > SHORT_NATIVE_MAX || (!is_none(T, av) && tr_int(T, av, &alpha)))
        return T->broke ? -1 : as_host_call(T, fn, a);
    if (K == 0)
        return fresh_contiguous(T, -1, copy_of(T, x));
    return index_write(T, x, dim, checked_index(T, v_reshape(T, ix, &K, 1), n, 0),
                       alpha == 1 ? src : op2(T, SMELT_OP_MUL, src, int_value(T, alpha)), kind, self);
}


/* mvlgamma(input, p) / special.multigammaln: as eager builds it, the sum
 * of lgamma(x + [-(p-1)/2, .., 0]) over the added last dim plus p(p-1)/4
 * log(pi) (integers in the default float; eager checks no domain: inf
 * there). */
static int32_t c_mvlgamma(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input");
    int64_t p;
    (void)op;
    if (!is_tensor(T, x) || tr_int(T, arg(a, 1, "p"), &p))
        return T->broke ? -1 : as_host_call(T, fn, a);
    const smelt_node *xn = node(T, x);
    int nd = xn->ndim, dt = smelt_dtype_is_float((smelt_dtype)xn->dtype) ? xn->dtype : default_float();
    if (p < 1 || p > 64 || nd + 1 > SMELT_MAX_DIMS)
        return as_host_call(T, fn, a);
    int64_t shape[SMELT_MAX_DIMS];
    memcpy(shape, xn->shape, sizeof shape);
    shape[nd] = 1;
    smelt_node ar = { .op = SMELT_OP_ARANGE, .dtype = (uint8_t)dt, .ndim = 1, .shape = { p } };
    ar.a.arange.fstart = -0.5 * (double)(p - 1);
    ar.a.arange.fstep = 0.5;
    int32_t xf = cast_to(T, x, dt);
    int32_t args = op2(T, SMELT_OP_ADD, mk(T, &ar), v_reshape(T, xf, shape, nd + 1));
    int32_t s = red(T, SMELT_OP_SUM, op1(T, SMELT_OP_LGAMMA, args), 1u << nd, 0, 0);
    int32_t r = op2(T, SMELT_OP_ADD, s, num(T, (double)(p * (p - 1)) * log(3.14159265358979323846) * 0.25));
    return r < 0 ? -1 : fresh_contiguous(T, -1, r);
}

/* The float dtype a special function of tensor x gives: x's, or the
 * default float for integers and bools. */
static int special_dtype(tracer *T, int32_t x)
{
    int dt = node(T, x)->dtype;
    return smelt_dtype_is_float((smelt_dtype)dt) ? dt : default_float();
}

/* digamma (psi) of x, computed in float64 and rounded once to x's float
 * dtype (integers: the default float): 1 - x and pi / tan(pi r) (r the
 * fractional part) below 0, six steps of the recurrence psi(z) = psi(z +
 * 1) - 1/z, then the asymptotic series to w^-10 at w = z + 6 (error below
 * 1e-11); 0 gives -inf (-0: inf) and negative integers NaN, as eager. */
static int32_t digamma_of(tracer *T, int32_t x)
{
    int dt = special_dtype(T, x);
    const double pi = 3.14159265358979323846;
    int32_t y = cast_to(T, x, SMELT_F64);
    int32_t neg = op2(T, SMELT_OP_LT, y, num(T, 0.0)), ty = op1(T, SMELT_OP_TRUNC, y);
    int32_t refl = op2(T, SMELT_OP_DIV, num(T, pi), op1(T, SMELT_OP_TAN, op2(T, SMELT_OP_MUL, num(T, pi), op2(T, SMELT_OP_SUB, y, ty))));
    int32_t z = where3(T, neg, op2(T, SMELT_OP_SUB, num(T, 1.0), y), y), s = -1;
    for (int k = 0; k < 6; k++) {
        int32_t t = op1(T, SMELT_OP_RECIPROCAL, k ? op2(T, SMELT_OP_ADD, z, num(T, (double)k)) : z);
        s = s < 0 ? t : op2(T, SMELT_OP_ADD, s, t);
    }
    int32_t w = op2(T, SMELT_OP_ADD, z, num(T, 6.0)), iw = op1(T, SMELT_OP_RECIPROCAL, w);
    int32_t iw2 = op2(T, SMELT_OP_MUL, iw, iw);
    static const double c[] = { 1.0 / 132, 1.0 / 240, 1.0 / 252, 1.0 / 120, 1.0 / 12 };
    int32_t h = op2(T, SMELT_OP_MUL, iw2, num(T, c[0]));
    for (int k = 1; k < 5; k++)   /* c[k] - iw2 * h */
        h = op2(T, SMELT_OP_SUB, num(T, c[k]), h), h = k < 4 ? op2(T, SMELT_OP_MUL, iw2, h) : h;
    int32_t ser = op2(T, SMELT_OP_SUB, op2(T, SMELT_OP_SUB, op1(T, SMELT_OP_LOG, w), op2(T, SMELT_OP_MUL, iw, num(T, 0.5))),
                      op2(T, SMELT_OP_MUL, iw2, h));
    int32_t psi = op2(T, SMELT_OP_SUB, ser, s);
    int32_t r = where3(T, neg, op2(T, SMELT_OP_SUB, psi, refl), psi);
    int32_t nint = op2(T, SMELT_OP_LOGICAL_AND, neg, op2(T, SMELT_OP_EQ, y, ty));
    int32_t zero = where3(T, op2(T, SMELT_OP_LT, op1(T, SMELT_OP_RECIPROCAL, y), num(T, 0.0)), num(T, INFINITY), num(T, -INFINITY));
    r = where3(T, op2(T, SMELT_OP_EQ, y, num(T, 0.0)), zero, where3(T, nint, num(T, NAN), r));
    return cast_to(T, r, dt);
}

/* Value r, its elements computed where no element of bool value `fail`
 * holds; one that does fails the run (a CHECKIDX of it against [0, 1)) and
 * the frame runs eagerly. */
static int32_t unless_fails(tracer *T, int32_t r, int32_t fail)
{
    int32_t ck = checked_index(T, cast_to(T, fail, SMELT_I64), 1, 0);
    return where3(T, op2(T, SMELT_OP_EQ, ck, int_value(T, 0)), r, r);   /* (the check computed with r) */
}

/* trigamma of x in float type dt (x cast to it), as eager's kernel computes
 * it there: the reflection -pi^2 / sin^2(pi x) below 0.5, six steps of the
 * recurrence, the asymptotic series at x + 6. */
static int32_t trigamma_of(tracer *T, int32_t x, int dt)
{
    int f32 = dt != SMELT_F64;
    float pf = 3.14159265358979323846f;
    double pi = f32 ? (double)pf : 3.14159265358979323846, pi2 = f32 ? (double)(pf * pf) : pi * pi;
    int32_t y = cast_to(T, x, dt);
    int32_t low = op2(T, SMELT_OP_LT, y, num(T, 0.5));
    int32_t sp = op1(T, SMELT_OP_SIN, op2(T, SMELT_OP_MUL, num(T, pi), y));
    int32_t refl = op2(T, SMELT_OP_DIV, num(T, pi2), op2(T, SMELT_OP_MUL, sp, sp));
    int32_t z = where3(T, low, op2(T, SMELT_OP_SUB, num(T, 1.0), y), y);
    int32_t r = where3(T, low, op1(T, SMELT_OP_NEG, refl), num(T, 0.0));
    for (int k = 0; k < 6; k++) {
        r = op2(T, SMELT_OP_ADD, r, op2(T, SMELT_OP_DIV, num(T, 1.0), op2(T, SMELT_OP_MUL, z, z)));
        z = op2(T, SMELT_OP_ADD, z, num(T, 1.0));
    }
    int32_t ixx = op2(T, SMELT_OP_DIV, num(T, 1.0), op2(T, SMELT_OP_MUL, z, z));
    int32_t h = op2(T, SMELT_OP_SUB, num(T, 1.0 / 30), op2(T, SMELT_OP_MUL, ixx, num(T, 1.0 / 42)));
    h = op2(T, SMELT_OP_SUB, num(T, 1.0 / 6), op2(T, SMELT_OP_MUL, ixx, h));
    int32_t ser = op2(T, SMELT_OP_ADD, op2(T, SMELT_OP_ADD, num(T, 1.0), op2(T, SMELT_OP_DIV, num(T, 1.0), op2(T, SMELT_OP_MUL, num(T, 2.0), z))),
                      op2(T, SMELT_OP_MUL, ixx, h));
    r = op2(T, SMELT_OP_ADD, r, op2(T, SMELT_OP_DIV, ser, z));
    return where3(T, low, op1(T, SMELT_OP_NEG, r), r);
}

#define ZETA_TERMS 18   /* direct terms before the Euler-Maclaurin tail */

/* Hurwitz zeta(x, q) of float64 values, eager's Cephes-derived algorithm
 * with a fixed number of direct terms: sum (q + k)^-x for k <= ZETA_TERMS,
 * then the Euler-Maclaurin tail at w = q + ZETA_TERMS, its terms added until
 * one falls below 2^-53 of the sum (as eager stops). Eager's direct sum
 * stops at w > 9 instead, the same value to rounding; a q below 9 -
 * ZETA_TERMS (tail inaccurate) fails the run, and eager computes it. x == 1
 * gives inf, x < 1 NaN, q <= 0 an integer inf, else a fractional x NaN. */
static int32_t zeta_of(tracer *T, int32_t x, int32_t q)
{
    static const double A[] = { 12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
                                7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
                                -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18 };
    const double machep = 1.11022302462515654042E-16;
    int32_t nx = op1(T, SMELT_OP_NEG, x), s = -1;
    for (int k = 0; k < ZETA_TERMS; k++) {
        int32_t b = op2(T, SMELT_OP_POW, k ? op2(T, SMELT_OP_ADD, q, num(T, (double)k)) : q, nx);
        s = s < 0 ? b : op2(T, SMELT_OP_ADD, s, b);
    }
    int32_t w = op2(T, SMELT_OP_ADD, q, num(T, (double)ZETA_TERMS)), b = op2(T, SMELT_OP_POW, w, nx);
    s = op2(T, SMELT_OP_ADD, s, b);   /* w's own term, as eager's sum ends */
    s = op2(T, SMELT_OP_ADD, s, op2(T, SMELT_OP_DIV, op2(T, SMELT_OP_MUL, b, w), op2(T, SMELT_OP_SUB, x, num(T, 1.0))));
    s = op2(T, SMELT_OP_SUB, s, op2(T, SMELT_OP_MUL, num(T, 0.5), b));
    int32_t av = -1, live = -1;
    for (int i = 0; i < 12 && s >= 0; i++) {
        int32_t xk = i ? op2(T, SMELT_OP_ADD, x, num(T, (double)(2 * i))) : x;
        av = av < 0 ? xk : op2(T, SMELT_OP_MUL, av, xk);
        b = op2(T, SMELT_OP_DIV, b, w);
        int32_t t = op2(T, SMELT_OP_DIV, op2(T, SMELT_OP_MUL, av, b), num(T, A[i]));
        int32_t ns = op2(T, SMELT_OP_ADD, s, t);
        s = live < 0 ? ns : where3(T, live, ns, s);
        int32_t more = op2(T, SMELT_OP_GE, op1(T, SMELT_OP_ABS, op2(T, SMELT_OP_DIV, t, ns)), num(T, machep));
        live = live < 0 ? more : op2(T, SMELT_OP_LOGICAL_AND, live, more);
        av = op2(T, SMELT_OP_MUL, av, op2(T, SMELT_OP_ADD, x, num(T, (double)(2 * i + 1))));
        b = op2(T, SMELT_OP_DIV, b, w);
    }
    int32_t qle = op2(T, SMELT_OP_LE, q, num(T, 0.0));
    int32_t qint = op2(T, SMELT_OP_LOGICAL_AND, qle, op2(T, SMELT_OP_EQ, q, op1(T, SMELT_OP_FLOOR, q)));
    int32_t xfrac = op2(T, SMELT_OP_LOGICAL_AND, qle, op2(T, SMELT_OP_NE, x, op1(T, SMELT_OP_FLOOR, x)));
    int32_t r = where3(T, qint, num(T, INFINITY), where3(T, xfrac, num(T, NAN), s));
    r = where3(T, op2(T, SMELT_OP_EQ, x, num(T, 1.0)), num(T, INFINITY),
               where3(T, op2(T, SMELT_OP_LT, x, num(T, 1.0)), num(T, NAN), r));
    int32_t far = op2(T, SMELT_OP_LOGICAL_AND, op2(T, SMELT_OP_LT, q, num(T, 9.0 - ZETA_TERMS)),
                      op2(T, SMELT_OP_LOGICAL_AND, op2(T, SMELT_OP_GT, x, num(T, 1.0)),
                          op1(T, SMELT_OP_LOGICAL_NOT, op2(T, SMELT_OP_LOGICAL_OR, qint, xfrac))));
    return unless_fails(T, r, far);
}

/* polygamma(n, x) of float type dt: digamma (n 0), trigamma (n 1, in x's
 * float type; half precision through float32), else (-1)^(n+1) n! zeta(n +
 * 1, x), zeta in float64 (float32's accumulation type) rounded to dt, n!
 * as exp(lgamma(n + 1)) in dt, as eager multiplies. */
static int32_t polygamma_of(tracer *T, int64_t n, int32_t x)
{
    int dt = special_dtype(T, x);
    if (n == 0)
        return digamma_of(T, x);
    if (n == 1)
        return dt == SMELT_F64 ? trigamma_of(T, x, dt) : cast_to(T, trigamma_of(T, x, SMELT_F32), dt);
    double fact = dt == SMELT_F64 ? exp(lgamma((double)n + 1)) : (double)expf(lgammaf((float)n + 1.0f));
    if (dt == SMELT_F16 || dt == SMELT_BF16)   /* eager's Half: each factor rounded to it */
        fact = (double)(float)fact;
    int acc = dt == SMELT_F64 || dt == SMELT_F32 ? SMELT_F64 : SMELT_F32;
    PyObject *no = PyFloat_FromDouble((double)(n + 1));
    int32_t nv = no && !tr_keep(T, no) ? full_of(T, no, acc, NULL, 0) : -1;
    Py_XDECREF(no);
    int32_t z = nv < 0 ? -1 : zeta_of(T, nv, cast_to(T, x, acc));
    z = cast_to(T, z, dt);
    return op2(T, SMELT_OP_MUL, num(T, (n % 2) ? fact : -fact), z);
}

/* digamma(input) (op 0), polygamma(n, input) (op 1) and Tensor.polygamma(n)
 * (op 2). */
static int32_t c_digamma(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, op == 1 ? 1 : 0, op == 2 ? "self" : "input");
    int64_t n = 0;
    if (!is_tensor(T, x) || (op && tr_int(T, arg(a, op == 1 ? 0 : 1, "n"), &n)))
        return T->broke ? -1 : as_host_call(T, fn, a);
    if (n < 0 || n > 30)   /* eager raises for n < 0 */
        return as_host_call(T, fn, a);
    return op ? polygamma_of(T, n, x) : digamma_of(T, x);
}

/* special.zeta(input, other): Hurwitz zeta in float64 (float32's
 * accumulation type; float64 itself) rounded to the result's float type;
 * half precision through float32 as eager. Numbers are weak scalars. */
static int32_t c_zeta(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input"), q = arg(a, 1, "other");
    (void)op;
    if (x < 0 || q < 0 || (!is_tensor(T, x) && !is_tensor(T, q)))
        return T->broke ? -1 : as_host_call(T, fn, a);
    const smelt_node *ops_[2];
    int k = 0;
    if (is_tensor(T, x))
        ops_[k++] = node(T, x);
    if (is_tensor(T, q))
        ops_[k++] = node(T, q);
    int rt = smelt_result_type(ops_, k, (smelt_dtype)default_float());
    if (!smelt_dtype_is_float((smelt_dtype)rt))
        rt = default_float();
    int acc = rt == SMELT_F64 || rt == SMELT_F32 ? SMELT_F64 : SMELT_F32;
    int32_t v[2] = { x, q };
    for (int i = 0; i < 2; i++) {   /* a number: a 0-d tensor of the accumulation type */
        PyObject *c = is_tensor(T, v[i]) ? NULL : tr_const(T, v[i]);
        if (!is_tensor(T, v[i]) && (!c || (!PyLong_Check(c) && !PyFloat_Check(c))))
            return c ? as_host_call(T, fn, a) : -1;
        v[i] = c ? full_of(T, c, acc, NULL, 0) : cast_to(T, v[i], acc);
        if (v[i] < 0)
            return -1;
    }
    int32_t xf = v[0], qf = v[1];
    return cast_to(T, zeta_of(T, xf, qf), rt);
}

/* hypot(input, other) of float tensors below float64: sqrt(x^2 + y^2) in
 * float64 (no overflow, one rounding); float64 is torch's kernel. */
static int32_t c_hypot(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input"), y = arg(a, 1, "other");
    (void)op;
    if (!is_tensor(T, x) || !is_tensor(T, y))
        return as_host_call(T, fn, a);
    const smelt_node *both[2] = { node(T, x), node(T, y) };
    int rt = smelt_result_type(both, 2, (smelt_dtype)default_float());
    if (!smelt_dtype_is_float((smelt_dtype)rt) || rt == SMELT_F64)
        return as_host_call(T, fn, a);
    int32_t xf = cast_to(T, x, SMELT_F64), yf = cast_to(T, y, SMELT_F64);
    int32_t s = op2(T, SMELT_OP_ADD, op2(T, SMELT_OP_MUL, xf, xf), op2(T, SMELT_OP_MUL, yf, yf));
    return cast_to(T, op1(T, SMELT_OP_SQRT, s), rt);
}

/* trapezoid(y, x=None, *, dx=None, dim=-1) / trapz(y, *, dx=1, dim=-1)
 * (op 0) and cumulative_trapezoid (op 1) with a constant spacing: (sum -
 * (first + last) / 2) * dx, as eager; the cumulative form is the short
 * scan of (y[1:] + y[:-1]) * dx / 2. A tensor x is torch's kernel. */
static int32_t c_trapezoid(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t y = arg(a, 0, "y"), xv = arg(a, 1, "x");
    int64_t d = -1;
    int err = 0;
    if (y < 0)
        y = arg(a, 0, "input");
    if (!is_tensor(T, y) || (!is_none(T, xv) && !is_tensor(T, xv)) || get_int(T, arg(a, -1, "dim"), -1, &d))
        return T->broke ? -1 : as_host_call(T, fn, a);
    double dx = is_none(T, xv) ? farg(T, a, -1, "dx", 1.0, &err) : 1.0;
    if (err)
        return -1;
    const smelt_node *yn = node(T, y);
    int nd = yn->ndim;
    if (nd < 1 || d < -nd || d >= nd || yn->dtype == SMELT_BOOL)
        return as_host_call(T, fn, a);
    int dim = (int)(d < 0 ? d + nd : d);
    int64_t n = yn->shape[dim];
    if (n == 0 || (op && n - 1 > SHORT_NATIVE_MAX))
        return as_host_call(T, fn, a);
    int32_t r;
    if (!is_none(T, xv)) {   /* sample points x: dx = x[1:] - x[:-1], ((left + right) * dx) summed / 2 */
        const smelt_node *xn = node(T, xv);
        int64_t shape[SMELT_MAX_DIMS];
        if (xn->dtype == SMELT_BOOL || xn->ndim > nd || (xn->ndim == 1 ? xn->shape[0] != n : xn->ndim < 1))
            return as_host_call(T, fn, a);   /* eager raises, or shapes it broadcasts oddly */
        for (int i = 0; i < nd; i++)
            shape[i] = xn->ndim == 1 ? (i == dim ? n : 1) : i < nd - xn->ndim ? 1 : xn->shape[i - (nd - xn->ndim)];
        if (shape[dim] != n)
            return as_host_call(T, fn, a);
        int32_t xr = v_reshape(T, xv, shape, nd);
        int32_t dxv = op2(T, SMELT_OP_SUB, v_slice(T, xr, dim, 1, n, 1), v_slice(T, xr, dim, 0, n - 1, 1));
        int32_t lr = op2(T, SMELT_OP_ADD, v_slice(T, y, dim, 0, n - 1, 1), v_slice(T, y, dim, 1, n, 1));
        int32_t prod = op2(T, SMELT_OP_MUL, lr, dxv);
        if (!op)
            return fresh_contiguous(T, -1, op2(T, SMELT_OP_DIV, red(T, SMELT_OP_SUM, prod, 1u << dim, 0, 0), num(T, 2.0)));
        int32_t part = fresh_contiguous(T, -1, prod), dimv = int_value(T, dim);
        call_args b = { .pos = (int32_t[]){ part, dimv }, .npos = 2 };
        int32_t c = part < 0 || dimv < 0 ? -1 : scan_call(T, cumsum_fn, &b, SMELT_OP_SUM);
        return c < 0 ? c : fresh_contiguous(T, -1, op2(T, SMELT_OP_DIV, c, num(T, 2.0)));
    }
    if (!op) {
        int32_t ends = op2(T, SMELT_OP_ADD, v_axis(T, SMELT_OP_SQUEEZE, v_slice(T, y, dim, 0, 1, 1), dim),
                           v_axis(T, SMELT_OP_SQUEEZE, v_slice(T, y, dim, n - 1, n, 1), dim));
        r = op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_SUB, red(T, SMELT_OP_SUM, y, 1u << dim, 0, 0),
                                     op2(T, SMELT_OP_MUL, ends, num(T, 0.5))), num(T, dx));
        return r < 0 ? -1 : fresh_contiguous(T, -1, r);
    }
    int32_t pair = op2(T, SMELT_OP_ADD, v_slice(T, y, dim, 0, n - 1, 1), v_slice(T, y, dim, 1, n, 1));
    int32_t part = fresh_contiguous(T, -1, op2(T, SMELT_OP_MUL, num(T, dx / 2.0), pair));
    int32_t dimv = int_value(T, dim);
    call_args b = { .pos = (int32_t[]){ part, dimv }, .npos = 2 };
    return part < 0 || dimv < 0 ? -1 : scan_call(T, cumsum_fn, &b, SMELT_OP_SUM);
}

/* _chunk_cat(tensors, dim, num_chunks): each tensor padded with zeros
 * along dim to num_chunks chunks of ceil(size / num_chunks), viewed as
 * [.., num_chunks, rest], and joined along the last dim. Tensors of one
 * dtype with the same dims before dim; anything else is torch's kernel. */
static int32_t c_chunk_cat(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t l = arg(a, 0, "tensors");
    int64_t d, nc;
    (void)op;
    if (l < 0 || (T->vals[l].kind != V_LIST && T->vals[l].kind != V_TUPLE) || T->vals[l].n < 1 || T->vals[l].n > 64 ||
        tr_int(T, arg(a, 1, "dim"), &d) || tr_int(T, arg(a, 2, "num_chunks"), &nc))
        return T->broke ? -1 : as_host_call(T, fn, a);
    int n = T->vals[l].n, dim = -1, dt = -1;
    int32_t parts[64];
    const smelt_node *first = NULL;
    for (int i = 0; i < n; i++) {
        int32_t t = T->vals[l].items[i];
        if (!is_tensor(T, t))
            return as_host_call(T, fn, a);
        const smelt_node *tn = node(T, t);
        int nd = tn->ndim;
        if (nd < 1 || d < -nd || d >= nd || nc < 1)
            return as_host_call(T, fn, a);
        int di = (int)(d < 0 ? d + nd : d);
        if (i == 0) {
            dim = di;
            dt = tn->dtype;
            first = tn;
        }
        if (di != dim || tn->dtype != dt || dim + 2 > SMELT_MAX_DIMS || smelt_node_numel(tn) == 0)
            return as_host_call(T, fn, a);
        for (int k = 0; k < dim; k++)
            if (tn->shape[k] != first->shape[k])
                return as_host_call(T, fn, a);   /* eager raises */
        for (int k = dim; k < nd; k++)   /* (the chunks' sizes are computed from these: static) */
            if (dyn_guard(T, Py_EQ, dyn_dim_ex(T, T->vals[t].node, k), tn->shape[k]))
                return -1;
        int64_t sz = tn->shape[dim], ch = (sz + nc - 1) / nc, rest = 1;
        int32_t p = ch * nc > sz ? pad_dim(T, t, dim, 0, ch * nc - sz, 0, Py_False) : t;
        if (p < 0)
            return -1;
        const smelt_node *pn = node(T, p);
        for (int k = dim; k < pn->ndim; k++)
            rest *= pn->shape[k];
        int64_t shape[SMELT_MAX_DIMS];
        memcpy(shape, pn->shape, sizeof(int64_t) * (size_t)dim);
        shape[dim] = nc;
        shape[dim + 1] = rest / nc;
        int32_t r = v_reshape(T, p, shape, dim + 2);
        if (r < 0 || (parts[i] = gnode(T, r)) < 0)
            return -1;
        first = node(T, T->vals[l].items[0]);
    }
    int32_t r = n == 1 ? copy_of(T, tv_tensor(T, parts[0])) : cat_nodes(T, parts, n, dim + 1);
    return fresh_contiguous(T, -1, r);
}

/* renorm(input, p, dim, maxnorm) of a float tensor: each slice along dim
 * scaled by maxnorm / (norm + 1e-7) where its p-norm (over the other dims,
 * in float32 for half precision) exceeds maxnorm, as eager's kernel. */
static int32_t c_renorm(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input");
    int64_t d;
    int err = 0;
    (void)op;
    if (!is_tensor(T, x) || tr_int(T, arg(a, 2, "dim"), &d))
        return T->broke ? -1 : as_host_call(T, fn, a);
    double p = farg(T, a, 1, "p", 2.0, &err), mx = farg(T, a, 3, "maxnorm", 0.0, &err);
    if (err)
        return -1;
    const smelt_node *xn = node(T, x);
    int nd = xn->ndim, dt = xn->dtype;
    if (!smelt_dtype_is_float((smelt_dtype)dt) || nd < 1 || d < -nd || d >= nd || !(p > 0) || mx < 0 || isnan(p))
        return as_host_call(T, fn, a);   /* eager raises */
    int dim = (int)(d < 0 ? d + nd : d);
    uint32_t m = ((1u << nd) - 1) & ~(1u << dim);
    int32_t nrm = pnorm_of(T, dt == SMELT_F64 ? x : cast_to(T, x, SMELT_F32), p, m, 1);
    int32_t f = where3(T, op2(T, SMELT_OP_GT, nrm, num(T, mx)),
                       op2(T, SMELT_OP_DIV, num(T, mx), op2(T, SMELT_OP_ADD, nrm, num(T, 1e-7))), num(T, 1.0));
    return fresh_contiguous(T, -1, op2(T, SMELT_OP_MUL, x, cast_to(T, f, dt)));
}

/* linalg.vecdot(x, y, *, dim=-1) of float tensors of one dtype: the
 * product summed over dim (x's conjugate: real here). */
static int32_t c_vecdot(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "x"), y = arg(a, 1, "y");
    int64_t d = -1;
    (void)op;
    if (!is_tensor(T, x) || !is_tensor(T, y) || get_int(T, arg(a, -1, "dim"), -1, &d))
        return T->broke ? -1 : as_host_call(T, fn, a);
    int dt = node(T, x)->dtype;
    if (!smelt_dtype_is_float((smelt_dtype)dt) || node(T, y)->dtype != dt)
        return as_host_call(T, fn, a);
    int32_t p = op2(T, SMELT_OP_MUL, x, y);
    if (p < 0)
        return -1;
    int nd = node(T, p)->ndim;
    if (nd < 1 || d < -nd || d >= nd)
        return as_host_call(T, fn, a);
    return fresh_contiguous(T, -1, red(T, SMELT_OP_SUM, p, 1u << (d < 0 ? d + nd : d), 0, 0));
}

/* dist(input, other, p=2) of float tensors: the p-norm of the difference. */
static int32_t c_dist(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input"), y = arg(a, 1, "other");
    int err = 0;
    (void)op;
    if (!is_tensor(T, x) || !is_tensor(T, y) || node(T, x)->dtype != node(T, y)->dtype ||
        !smelt_dtype_is_float((smelt_dtype)node(T, x)->dtype))
        return as_host_call(T, fn, a);
    double p = farg(T, a, 2, "p", 2.0, &err);
    if (err)
        return -1;
    int32_t dif = op2(T, SMELT_OP_SUB, x, y);
    if (dif < 0)
        return -1;
    int nd = node(T, dif)->ndim;
    return fresh_contiguous(T, -1, pnorm(T, dif, p, nd ? (1u << nd) - 1 : 0, 0));
}

/* block_diag(*tensors) of 0-d to 2-d tensors: each its own rows and
 * columns, zeros elsewhere (FULL blocks joined by CAT), in the promoted
 * dtype. */
static int32_t c_block_diag(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int n = a->npos, rt = -1;
    int64_t rows[64], cols[64], tc = 0;
    (void)op;
    if (n < 1 || n > 64 || a->nkw)
        return as_host_call(T, fn, a);
    for (int i = 0; i < n; i++) {
        int32_t t = a->pos[i];
        if (!is_tensor(T, t) || node(T, t)->ndim > 2)
            return as_host_call(T, fn, a);
        const smelt_node *tn = node(T, t);
        rows[i] = tn->ndim == 2 ? tn->shape[0] : 1;
        cols[i] = tn->ndim == 2 ? tn->shape[1] : tn->ndim == 1 ? tn->shape[0] : 1;
        tc += cols[i];
        rt = rt < 0 ? tn->dtype : smelt_dtype_promote((smelt_dtype)rt, (smelt_dtype)tn->dtype);
    }
    int32_t rowsv[64], nr = 0;
    int64_t before = 0;
    PyObject *zero = PyLong_FromLong(0);
    for (int i = 0; i < n && zero; i++) {
        int64_t shp[2] = { rows[i], cols[i] };
        int32_t parts[3], np = 0, blk = v_reshape(T, cast_to(T, a->pos[i], rt), shp, 2);
        int64_t zb[2] = { rows[i], before }, za[2] = { rows[i], tc - before - cols[i] };
        if (before && (parts[np++] = full_of(T, zero, rt, zb, 2)) < 0)
            break;
        parts[np++] = blk;
        if (za[1] && (parts[np++] = full_of(T, zero, rt, za, 2)) < 0)
            break;
        before += cols[i];
        for (int k = 0; k < np; k++)
            parts[k] = parts[k] < 0 ? -1 : T->vals[parts[k]].node;
        if (parts[np - 1] < 0 || blk < 0)
            break;
        rowsv[nr++] = np > 1 ? T->vals[cat_nodes(T, parts, np, 1)].node : parts[0];
    }
    Py_XDECREF(zero);
    if (nr != n)
        return -1;
    int32_t r = nr > 1 ? cat_nodes(T, rowsv, nr, 0) : tv_tensor(T, rowsv[0]);
    if (r >= 0 && nr == 1 && T->vals[r].node == T->vals[a->pos[0]].node)
        r = copy_of(T, r);
    return r < 0 ? -1 : fresh_contiguous(T, -1, r);
}

/* addbmm(input, batch1, batch2, *, beta=1, alpha=1): addmm of batch1's
 * batches side by side ([n, b*k]) and batch2's stacked ([b*k, p]): the sum
 * over batches as one product; half precision (eager rounds per batch)
 * is torch's kernel. */
static int32_t c_addbmm(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t b1 = arg(a, 1, "batch1"), b2 = arg(a, 2, "batch2");
    (void)op;
    if (!is_tensor(T, b1) || !is_tensor(T, b2) || node(T, b1)->ndim != 3 || node(T, b2)->ndim != 3 ||
        node(T, b1)->shape[0] != node(T, b2)->shape[0] || node(T, b1)->shape[2] != node(T, b2)->shape[1] ||
        node(T, b1)->dtype == SMELT_F16 || node(T, b1)->dtype == SMELT_BF16 || node(T, b1)->dtype == SMELT_BOOL)
        return as_host_call(T, fn, a);
    const smelt_node *n1 = node(T, b1), *n2 = node(T, b2);
    int64_t s1[2] = { n1->shape[1], n1->shape[0] * n1->shape[2] }, s2[2] = { n2->shape[0] * n2->shape[1], n2->shape[2] };
    int perm[3] = { 1, 0, 2 };
    int32_t m1 = v_reshape(T, v_permute(T, b1, perm), s1, 2), m2 = v_reshape(T, b2, s2, 2);
    if (m1 < 0 || m2 < 0)
        return -1;
    int32_t x = arg(a, 0, "input"), pos[3] = { x, m1, m2 };
    call_args b = { .pos = pos, .npos = 3, .kwn = a->kwn, .kwv = a->kwv, .nkw = a->nkw };
    if (x < 0 || a->npos != 3 || !is_tensor(T, x))
        return as_host_call(T, fn, a);
    for (int k = 0; k < a->nkw; k++)   /* (input given by keyword: the host call) */
        if (PyUnicode_CompareWithASCIIString(a->kwn[k], "beta") && PyUnicode_CompareWithASCIIString(a->kwn[k], "alpha"))
            return as_host_call(T, fn, a);
    return h_addmm(T, &b, (smelt_op)0);
}

/* _VF.tensordot(a, b, dims_a, dims_b) (torch.tensordot's last step), as
 * eager computes it: a's free dims then the contracted ones, b's
 * contracted dims then its free ones, one [M, K] x [K, N] product,
 * reshaped to a's free sizes then b's. */
static int32_t c_tensordot(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "self"), y = arg(a, 1, "other");
    int64_t da[SMELT_MAX_DIMS], db[SMELT_MAX_DIMS];
    int na = 0, nbd = 0;
    (void)op;
    if (!is_tensor(T, x) || !is_tensor(T, y) || a->npos != 4 || a->nkw || node(T, x)->dtype != node(T, y)->dtype ||
        node(T, x)->dtype == SMELT_BOOL || int_list(T, a, 2, "dims_self", da, &na) || int_list(T, a, 3, "dims_other", db, &nbd))
        return T->broke ? -1 : as_host_call(T, fn, a);
    const smelt_node *xn = node(T, x), *yn = node(T, y);
    int ndx = xn->ndim, ndy = yn->ndim, px[SMELT_MAX_DIMS], py[SMELT_MAX_DIMS], nx = 0, ny = 0;
    uint32_t cx = 0, cy = 0;
    int64_t K = 1, M = 1, N = 1, out[2 * SMELT_MAX_DIMS];
    int no = 0;
    if (na != nbd)
        return as_host_call(T, fn, a);
    for (int i = 0; i < na; i++) {
        int64_t p = da[i] < 0 ? da[i] + ndx : da[i], q = db[i] < 0 ? db[i] + ndy : db[i];
        if (p < 0 || p >= ndx || q < 0 || q >= ndy || (cx >> p & 1) || (cy >> q & 1) || xn->shape[p] != yn->shape[q])
            return as_host_call(T, fn, a);   /* eager raises (or broadcasts a size 1: its kernel) */
        cx |= 1u << p;
        cy |= 1u << q;
    }
    for (int i = 0; i < ndx; i++)
        if (!(cx >> i & 1))
            px[nx++] = i, M *= xn->shape[i], out[no++] = xn->shape[i];
    for (int i = 0; i < na; i++)
        px[nx++] = (int)(da[i] < 0 ? da[i] + ndx : da[i]), K *= xn->shape[px[nx - 1]];
    for (int i = 0; i < na; i++)
        py[ny++] = (int)(db[i] < 0 ? db[i] + ndy : db[i]);
    for (int i = 0; i < ndy; i++)
        if (!(cy >> i & 1))
            py[ny++] = i, N *= yn->shape[i], out[no++] = yn->shape[i];
    if (no > SMELT_MAX_DIMS)
        return as_host_call(T, fn, a);
    int64_t s1[2] = { M, K }, s2[2] = { K, N };
    int32_t m1 = v_reshape(T, ndx ? v_permute(T, x, px) : x, s1, 2), m2 = v_reshape(T, ndy ? v_permute(T, y, py) : y, s2, 2);
    int32_t r = m1 < 0 || m2 < 0 ? -1 : matmul(T, m1, m2);
    return r < 0 ? -1 : fresh_contiguous(T, -1, v_reshape(T, r, out, no));
}

/* Horner's rule: c[0] + y (c[1] + y (... c[n - 1])), the c constants. */
static int32_t horner(tracer *T, int32_t y, const double *c, int n)
{
    int32_t s = num(T, c[n - 1]);
    for (int k = n - 2; k >= 0 && s >= 0; k--)
        s = op2(T, SMELT_OP_ADD, op2(T, SMELT_OP_MUL, s, y), num(T, c[k]));
    return s;
}

/* Modified Bessel functions of the first kind, I0 and I1 (op bit 0: the
 * order) and their exponentially scaled forms (op bit 1: times e^-|x|), in
 * float64, rounded once to x's float dtype (integers: the default float):
 * the power series sum (x^2/4)^k / (k! (k+nu)!) (x/2)^nu, 64 terms, for
 * |x| <= 30 (positive terms: no cancellation), the asymptotic series
 * e^|x| / sqrt(2 pi |x|) sum (-1)^k a_k(nu) / |x|^k, 14 terms, beyond;
 * I1 odd. Half-precision scaled forms are torch's kernel. */
static int32_t c_bessel_i(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input");
    int nu = op & 1, scaled = op >> 1 & 1;
    if (!is_tensor(T, x))
        return as_host_call(T, fn, a);
    int dt = special_dtype(T, x);
    if (scaled && (dt == SMELT_F16 || dt == SMELT_BF16))
        return as_host_call(T, fn, a);   /* eager's scaled forms round in half precision as they go */
    int32_t xf = cast_to(T, x, SMELT_F64), ax = op1(T, SMELT_OP_ABS, xf);
    int32_t y = op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_MUL, ax, ax), num(T, 0.25));
    enum { NS = 64, NA = 14 };
    double c[NS];
    c[0] = 1.0;   /* 1 / (k! (k + nu)!) */
    for (int k = 1; k < NS; k++)
        c[k] = c[k - 1] / ((double)k * (double)(k + nu));
    int32_t s = horner(T, y, c, NS);
    if (nu)
        s = op2(T, SMELT_OP_MUL, s, op2(T, SMELT_OP_MUL, ax, num(T, 0.5)));
    if (scaled)
        s = op2(T, SMELT_OP_MUL, s, op1(T, SMELT_OP_EXP, op1(T, SMELT_OP_NEG, ax)));
    double d[NA], mu = 4.0 * nu * nu;   /* (-1)^k a_k(nu) */
    d[0] = 1.0;
    for (int k = 1; k < NA; k++)
        d[k] = -d[k - 1] * (mu - (double)(2 * k - 1) * (double)(2 * k - 1)) / (8.0 * (double)k);
    int32_t as = horner(T, op1(T, SMELT_OP_RECIPROCAL, ax), d, NA);
    as = op2(T, SMELT_OP_MUL, as, op1(T, SMELT_OP_RSQRT, op2(T, SMELT_OP_MUL, ax, num(T, 2.0 * 3.14159265358979323846))));
    if (!scaled)
        as = op2(T, SMELT_OP_MUL, as, op1(T, SMELT_OP_EXP, ax));
    int32_t r = where3(T, op2(T, SMELT_OP_LE, ax, num(T, 30.0)), s, as);
    if (nu)   /* odd */
        r = where3(T, op2(T, SMELT_OP_LT, xf, num(T, 0.0)), op1(T, SMELT_OP_NEG, r), r);
    return r < 0 ? -1 : cast_to(T, r, dt);
}

/* special.modified_bessel_k0/k1 (op & 1: the order) and the scaled forms
 * (op & 2: times exp(x)) of float32/float64 (integers: the default float),
 * in float64 rounded once: up to 2 the power series (I_nu's with the
 * logarithm and digamma terms), up to 25 the trapezoidal rule on K_nu(x) =
 * int_0^inf exp(-x cosh t) cosh(nu t) dt (33 nodes, step 1/8, spectrally
 * accurate), beyond that the asymptotic series (30 terms); all below 2e-15
 * relative against eager's float64. 0 gives inf, negatives NaN. */
static int32_t c_bessel_k(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input");
    int nu = op & 1, scaled = op >> 1 & 1;
    if (!is_tensor(T, x))
        return as_host_call(T, fn, a);
    int dt = special_dtype(T, x);
    if (dt != SMELT_F32 && dt != SMELT_F64)
        return as_host_call(T, fn, a);   /* half precision: eager's kernel */
    enum { NS = 26, NT = 33, NA = 30 };
    const double g = 0.57721566490153286061, h = 0.125, pi = 3.14159265358979323846;
    int32_t xf = cast_to(T, x, SMELT_F64);
    /* the power series at min(x, 2) */
    int32_t xs = op2(T, SMELT_OP_MINIMUM, xf, num(T, 2.0)), y = op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_MUL, xs, xs), num(T, 0.25));
    double ci[NS], cd[NS], fk = 1.0, psi1 = -g, psi2 = 1.0 - g;   /* fk: 1 / (k! (k + nu)!) */
    for (int k = 0; k < NS; k++) {
        ci[k] = fk;
        cd[k] = nu ? fk * (psi1 + psi2) : fk * psi1;
        fk /= (double)(k + 1) * (double)(k + 1 + nu);
        psi1 += 1.0 / (k + 1);
        psi2 += 1.0 / (k + 2);
    }
    int32_t lg = op1(T, SMELT_OP_LOG, op2(T, SMELT_OP_MUL, xs, num(T, 0.5)));
    int32_t iv = horner(T, y, ci, NS), dv = horner(T, y, cd, NS), small;
    if (nu) {
        int32_t half = op2(T, SMELT_OP_MUL, xs, num(T, 0.5));
        small = op2(T, SMELT_OP_ADD, op1(T, SMELT_OP_RECIPROCAL, xs), op2(T, SMELT_OP_MUL, lg, op2(T, SMELT_OP_MUL, half, iv)));
        small = op2(T, SMELT_OP_SUB, small, op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_MUL, xs, num(T, 0.25)), dv));
    } else {
        small = op2(T, SMELT_OP_SUB, dv, op2(T, SMELT_OP_MUL, lg, iv));
    }
    if (scaled)
        small = op2(T, SMELT_OP_MUL, small, op1(T, SMELT_OP_EXP, xs));
    /* the trapezoidal rule at max(x, 2) */
    int32_t xt = op2(T, SMELT_OP_MAXIMUM, xf, num(T, 2.0)), trap = -1;
    for (int k = 0; k < NT; k++) {
        double t = k * h, c = cosh(t), w = (k ? 1.0 : 0.5) * h * cosh(nu * t);
        int32_t e = op1(T, SMELT_OP_EXP, op2(T, SMELT_OP_MUL, xt, num(T, scaled ? 1.0 - c : -c)));
        e = op2(T, SMELT_OP_MUL, e, num(T, w));
        trap = trap < 0 ? e : op2(T, SMELT_OP_ADD, trap, e);
    }
    /* the asymptotic series at max(x, 25) */
    int32_t xa = op2(T, SMELT_OP_MAXIMUM, xf, num(T, 25.0));
    double ca[NA], mu = 4.0 * nu * nu;
    ca[0] = 1.0;
    for (int k = 1; k < NA; k++)
        ca[k] = ca[k - 1] * (mu - (double)(2 * k - 1) * (double)(2 * k - 1)) / (double)k;
    int32_t asym = horner(T, op1(T, SMELT_OP_RECIPROCAL, op2(T, SMELT_OP_MUL, xa, num(T, 8.0))), ca, NA);
    asym = op2(T, SMELT_OP_MUL, asym, op1(T, SMELT_OP_SQRT, op2(T, SMELT_OP_DIV, num(T, pi / 2), xa)));
    if (!scaled)
        asym = op2(T, SMELT_OP_MUL, asym, op1(T, SMELT_OP_EXP, op1(T, SMELT_OP_NEG, xa)));
    int32_t r = where3(T, op2(T, SMELT_OP_LE, xf, num(T, 2.0)), small,
                       where3(T, op2(T, SMELT_OP_LE, xf, num(T, 25.0)), trap, asym));
    r = where3(T, op2(T, SMELT_OP_EQ, xf, num(T, 0.0)), num(T, INFINITY),
               where3(T, op2(T, SMELT_OP_LT, xf, num(T, 0.0)), num(T, NAN), r));
    return r < 0 ? -1 : cast_to(T, r, dt);
}

/* special.bessel_j0/j1/y0/y1 (op 0..3) of float32 results (integers: the
 * default float when it is float32), in float64 rounded once: up to |x| 12
 * the power series (Y with its logarithm and digamma terms, 40 terms),
 * beyond Hankel's asymptotic expansion (P and Q to 10 terms each); within
 * 1e-10 of the true values. Eager's float64 kernel is off by up to 3.5e-7
 * between 5 and 8 (its float32 results are within tolerance of the true
 * values), so a float64 result stays torch's kernel. As eager: J even/odd,
 * Y of a negative NaN and of 0 -inf, infinities NaN. */
static int32_t c_bessel_jy(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input");
    int nu = op & 1, isy = op >> 1;
    if (!is_tensor(T, x))
        return as_host_call(T, fn, a);
    int dt = special_dtype(T, x);
    if (dt != SMELT_F32)
        return as_host_call(T, fn, a);
    enum { NS = 40, NH = 20 };
    const double g = 0.57721566490153286061, pi = 3.14159265358979323846;
    int32_t xf = cast_to(T, x, SMELT_F64), ax = op1(T, SMELT_OP_ABS, xf);
    int32_t xs = op2(T, SMELT_OP_MINIMUM, ax, num(T, 12.0));
    int32_t y = op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_MUL, xs, xs), num(T, -0.25));
    double cj[NS], cd[NS], fk = 1.0, p1 = -g, p2 = 1.0 - g, hk = 0.0;   /* fk: 1 / (k! (k + nu)!) */
    for (int k = 0; k < NS; k++) {
        cj[k] = fk;
        cd[k] = nu ? fk * (p1 + p2) : fk * hk;
        fk /= (double)(k + 1) * (double)(k + 1 + nu);
        p1 += 1.0 / (k + 1);
        p2 += 1.0 / (k + 2);
        hk += 1.0 / (k + 1);
    }
    int32_t half = op2(T, SMELT_OP_MUL, xs, num(T, 0.5)), jv = horner(T, y, cj, NS), small;
    if (nu)
        jv = op2(T, SMELT_OP_MUL, jv, half);
    if (!isy) {
        small = jv;
    } else {
        int32_t lg = op1(T, SMELT_OP_LOG, half), dv = horner(T, y, cd, NS);
        if (nu) {   /* -2/(pi x) + (2/pi) ln(x/2) J1 - (1/pi) (x/2) sum */
            small = op2(T, SMELT_OP_ADD, op2(T, SMELT_OP_DIV, num(T, -2.0 / pi), xs),
                        op2(T, SMELT_OP_MUL, num(T, 2.0 / pi), op2(T, SMELT_OP_MUL, lg, jv)));
            small = op2(T, SMELT_OP_SUB, small, op2(T, SMELT_OP_MUL, num(T, 1.0 / pi), op2(T, SMELT_OP_MUL, half, dv)));
        } else {    /* (2/pi) ((ln(x/2) + g) J0 - sum H_k (-x^2/4)^k / k!^2) */
            small = op2(T, SMELT_OP_MUL, num(T, 2.0 / pi),
                        op2(T, SMELT_OP_SUB, op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_ADD, lg, num(T, g)), jv), dv));
        }
    }
    /* Hankel at max(|x|, 12): P, Q in 1/x */
    int32_t xa = op2(T, SMELT_OP_MAXIMUM, ax, num(T, 12.0)), iz = op1(T, SMELT_OP_RECIPROCAL, xa);
    int32_t iz2 = op2(T, SMELT_OP_MUL, iz, iz);
    double cp[NH / 2], cq[NH / 2], ak = 1.0, mu = 4.0 * nu * nu;
    for (int k = 0; k < NH; k++) {
        double sgn = (k / 2) % 2 ? -1.0 : 1.0;
        if (k % 2 == 0)
            cp[k / 2] = sgn * ak;
        else
            cq[k / 2] = sgn * ak;
        ak *= (mu - (double)(2 * k + 1) * (double)(2 * k + 1)) / ((double)(k + 1) * 8.0);
    }
    int32_t P = horner(T, iz2, cp, NH / 2), Q = op2(T, SMELT_OP_MUL, horner(T, iz2, cq, NH / 2), iz);
    int32_t chi = op2(T, SMELT_OP_SUB, xa, num(T, (nu / 2.0 + 0.25) * pi));
    int32_t c = op1(T, SMELT_OP_COS, chi), sn = op1(T, SMELT_OP_SIN, chi);
    int32_t amp = op1(T, SMELT_OP_SQRT, op2(T, SMELT_OP_MUL, iz, num(T, 2.0 / pi)));
    int32_t big = isy ? op2(T, SMELT_OP_ADD, op2(T, SMELT_OP_MUL, P, sn), op2(T, SMELT_OP_MUL, Q, c))
                      : op2(T, SMELT_OP_SUB, op2(T, SMELT_OP_MUL, P, c), op2(T, SMELT_OP_MUL, Q, sn));
    big = op2(T, SMELT_OP_MUL, amp, big);
    int32_t r = where3(T, op2(T, SMELT_OP_LE, ax, num(T, 12.0)), small, big);
    if (!isy && nu)   /* J1 is odd (and keeps -0's sign) */
        r = where3(T, op2(T, SMELT_OP_LT, xf, num(T, 0.0)), op1(T, SMELT_OP_NEG, r),
                   where3(T, op2(T, SMELT_OP_EQ, xf, num(T, 0.0)), xf, r));
    if (isy)
        r = where3(T, op2(T, SMELT_OP_EQ, xf, num(T, 0.0)), num(T, -INFINITY),
                   where3(T, op2(T, SMELT_OP_LT, xf, num(T, 0.0)), num(T, NAN), r));
    r = where3(T, op2(T, SMELT_OP_EQ, ax, num(T, INFINITY)), num(T, NAN), r);
    return r < 0 ? -1 : cast_to(T, r, dt);
}

/* erfcx of float64 value x: exp(x^2) erfc(x) up to 25 (no cancellation:
 * erfc is relative-accurate there; overflow below -26.6 gives inf as
 * eager), beyond the asymptotic series 1/(x sqrt(pi)) sum (-1)^k
 * (2k-1)!! / (2x^2)^k (12 terms); within 1e-13 relative. */
static int32_t erfcx_f64(tracer *T, int32_t x)
{
    int32_t xs = op2(T, SMELT_OP_MINIMUM, x, num(T, 25.0));
    int32_t direct = op2(T, SMELT_OP_MUL, op1(T, SMELT_OP_EXP, op2(T, SMELT_OP_MUL, xs, xs)), op1(T, SMELT_OP_ERFC, xs));
    int32_t xa = op2(T, SMELT_OP_MAXIMUM, x, num(T, 25.0));
    int32_t z = op1(T, SMELT_OP_RECIPROCAL, op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_MUL, xa, xa), num(T, 2.0)));
    double c[12];
    c[0] = 1.0;
    for (int k = 1; k < 12; k++)
        c[k] = -c[k - 1] * (double)(2 * k - 1);
    int32_t asym = op2(T, SMELT_OP_DIV, horner(T, z, c, 12), op2(T, SMELT_OP_MUL, xa, num(T, 1.7724538509055160273)));
    return where3(T, op2(T, SMELT_OP_LE, x, num(T, 25.0)), direct, asym);
}

/* log_ndtr of float64 value x, as eager: log(erfcx(-x/sqrt2) / 2) - x^2/2
 * below -1, else log1p(-erfc(x / sqrt2) / 2). */
static int32_t log_ndtr_f64(tracer *T, int32_t xf)
{
    const double rs2 = 0.70710678118654752440;
    int32_t t = op2(T, SMELT_OP_MUL, xf, num(T, rs2));
    int32_t lo = op2(T, SMELT_OP_SUB, op1(T, SMELT_OP_LOG, op2(T, SMELT_OP_MUL, erfcx_f64(T, op1(T, SMELT_OP_NEG, t)), num(T, 0.5))),
                     op2(T, SMELT_OP_MUL, t, t));
    int32_t hi = op1(T, SMELT_OP_LOG1P, op2(T, SMELT_OP_MUL, op1(T, SMELT_OP_ERFC, t), num(T, -0.5)));
    return where3(T, op2(T, SMELT_OP_LT, xf, num(T, -1.0)), lo, hi);
}

/* special.ndtri of float32 results (integers: the default float), in
 * float64 rounded once: for q = min(p, 1 - p) the x <= 0 with ndtr(x) = q,
 * from Abramowitz and Stegun's 26.2.23 start (error < 5e-4) by three Newton
 * steps on log_ndtr(x) - log q (log space: no underflow in the tails),
 * negated for p > 1/2; 0 and 1 give -inf and inf, outside [0, 1] NaN.
 * float64 is torch's kernel. */
static int32_t c_ndtri(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input");
    (void)op;
    if (!is_tensor(T, x))
        return as_host_call(T, fn, a);
    int dt = special_dtype(T, x);
    if (dt != SMELT_F32)
        return as_host_call(T, fn, a);
    int32_t p = cast_to(T, x, SMELT_F64), one = num(T, 1.0);
    int32_t upper = op2(T, SMELT_OP_GT, p, num(T, 0.5));
    int32_t q = where3(T, upper, op2(T, SMELT_OP_SUB, one, p), p);
    q = op2(T, SMELT_OP_MINIMUM, op2(T, SMELT_OP_MAXIMUM, q, num(T, 1e-300)), num(T, 0.5));   /* in range for the steps */
    int32_t lq = op1(T, SMELT_OP_LOG, q), t = op1(T, SMELT_OP_SQRT, op2(T, SMELT_OP_MUL, lq, num(T, -2.0)));
    static const double cn[] = { 2.515517, 0.802853, 0.010328 }, cd[] = { 1.0, 1.432788, 0.189269, 0.001308 };
    int32_t g = op2(T, SMELT_OP_SUB, op2(T, SMELT_OP_DIV, horner(T, t, cn, 3), horner(T, t, cd, 4)), t);
    for (int k = 0; k < 3; k++) {   /* g -= (log_ndtr(g) - log q) / (pdf(g) / ndtr(g)) */
        int32_t ln = log_ndtr_f64(T, g);
        int32_t dl = op1(T, SMELT_OP_EXP, op2(T, SMELT_OP_SUB, op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_MUL, g, g), num(T, -0.5)), ln));
        dl = op2(T, SMELT_OP_MUL, dl, num(T, 0.39894228040143267794));
        g = op2(T, SMELT_OP_SUB, g, op2(T, SMELT_OP_DIV, op2(T, SMELT_OP_SUB, ln, lq), dl));
    }
    int32_t r = where3(T, upper, op1(T, SMELT_OP_NEG, g), g);
    r = where3(T, op2(T, SMELT_OP_EQ, p, num(T, 0.5)), num(T, 0.0), r);
    r = where3(T, op2(T, SMELT_OP_EQ, p, num(T, 0.0)), num(T, -INFINITY),
               where3(T, op2(T, SMELT_OP_EQ, p, one), num(T, INFINITY), r));
    r = where3(T, op2(T, SMELT_OP_LOGICAL_OR, op2(T, SMELT_OP_LT, p, num(T, 0.0)), op2(T, SMELT_OP_GT, p, one)),
               num(T, NAN), r);
    return r < 0 ? -1 : cast_to(T, r, dt);
}

/* special.erfcx (op 0) and special.log_ndtr (op 1) in float64, rounded
 * once to the result's float type (integers: the default float); log_ndtr
 * as eager: log(erfcx(-x/sqrt2) / 2) - x^2/2 below -1, else log1p(-erfc(x /
 * sqrt2) / 2). */
static int32_t c_erfcx(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input");
    if (!is_tensor(T, x))
        return as_host_call(T, fn, a);
    int dt = special_dtype(T, x);
    if (dt != SMELT_F32 && dt != SMELT_F64)
        return as_host_call(T, fn, a);
    int32_t xf = cast_to(T, x, SMELT_F64);
    int32_t r = op ? log_ndtr_f64(T, xf) : erfcx_f64(T, xf);
    return r < 0 ? -1 : cast_to(T, r, dt);
}

#define CHEB_UNROLL 24

/* The operands of a polynomial of x at degree n (special.chebyshev_*,
 * hermite_*, laguerre_*, legendre_*): x in the result's float type (*rt),
 * n as int64 (a number truncated) and in that float type. 0, -2 when the
 * call is left to torch's kernel (half precision, which eager's kernel
 * lacks; non-contiguous operands: the long chains' layout is not
 * modelled), -1 on error. */
static int poly_operands(tracer *T, const call_args *a, int32_t *xf, int32_t *n, int32_t *nf, int *rtp)
{
    int32_t x = arg(a, 0, "input"), nv = arg(a, 1, "n");
    if (x < 0)
        x = arg(a, 0, "x");
    if (!is_tensor(T, x) || nv < 0 || (!is_tensor(T, nv) && !(T->vals[nv].kind == V_OBJ && PyNumber_Check(T->vals[nv].obj))))
        return -2;
    const smelt_node *both[2] = { node(T, x), is_tensor(T, nv) ? node(T, nv) : node(T, x) };
    int rt = smelt_result_type(both, 2, (smelt_dtype)default_float());
    rt = smelt_dtype_is_float((smelt_dtype)rt) ? rt : default_float();
    if (rt != SMELT_F32 && rt != SMELT_F64)
        return -2;
    for (int k = 0; k < 2; k++) {
        int32_t v = k ? nv : x;
        int64_t st[SMELT_MAX_DIMS];
        int known = is_tensor(T, v) ? eager_strides(T, T->vals[v].node, st) : 1;
        if (known < 0)
            return -1;
        if (is_tensor(T, v) && (!known || !strides_contiguous(node(T, v), st)))
            return -2;
    }
    *xf = cast_to(T, x, rt);
    *n = is_tensor(T, nv) ? cast_to(T, nv, SMELT_I64) : -1;
    if (*n < 0) {   /* a number: its truncation */
        double d = PyFloat_AsDouble(T->vals[nv].obj);
        if (PyErr_Occurred())
            return -1;
        *n = int_value(T, (int64_t)d);
    }
    *nf = cast_to(T, *n, rt);
    *rtp = rt;
    return *xf < 0 || *nf < 0 ? -1 : 0;
}

/* r_n of a recurrence given r_0 = 1, r_1 = q1 and its steps r[2..CHEB_UNROLL]
 * (built by the caller), selected by the degree n; a degree beyond the
 * unrolling where `deep` holds fails the run (CHECKIDX: eager runs it). */
static int32_t poly_select(tracer *T, int32_t n, const int32_t *r, int32_t deep)
{
    int32_t sel = where3(T, op2(T, SMELT_OP_EQ, n, int_value(T, 1)), r[1], r[0]);
    for (int k = 2; k <= CHEB_UNROLL && sel >= 0; k++)
        sel = where3(T, op2(T, SMELT_OP_EQ, n, int_value(T, k)), r[k], sel);
    int32_t big = op2(T, SMELT_OP_LOGICAL_AND, op2(T, SMELT_OP_GT, n, int_value(T, CHEB_UNROLL)), deep);
    return unless_fails(T, sel, big);
}

/* Chebyshev polynomials T, U, V, W (op & 3) of x at integer degree n (a
 * tensor or number, truncated as eager casts it), and the shifted ones (op
 * & 4: of y = 2x - 1), computed as eager's kernels do in the result's
 * float type: the values at the ends (|x| == 1; shifted: x == 1 or 0), the
 * closed form for |y| < 1 above a degree (T: 6, U/V/W: 8; shifted: 6, W 4),
 * else the recurrence r_k = 2y r_(k-1) - r_(k-2) from 1 and q1 (y, 2y, 2y -
 * 1, 2y + 1), unrolled to CHEB_UNROLL; a larger degree needing the
 * recurrence fails the run (a CHECKIDX of it: the frame runs eagerly). n <
 * 0 gives 0. */
static int32_t c_chebyshev(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t xf, n, nf;
    int rt, rc = poly_operands(T, a, &xf, &n, &nf, &rt);
    if (rc)
        return rc == -2 ? as_host_call(T, fn, a) : -1;
    int sh = op >> 2 & 1;
    op &= 3;
    int32_t one = num(T, 1.0);
    int32_t y = sh ? op2(T, SMELT_OP_SUB, op2(T, SMELT_OP_ADD, xf, xf), one) : xf;
    int32_t ay = op1(T, SMELT_OP_ABS, y), x2 = op2(T, SMELT_OP_ADD, y, y);
    int32_t pos = sh ? op2(T, SMELT_OP_EQ, xf, one) : op2(T, SMELT_OP_GT, xf, num(T, 0.0));
    int32_t unit = sh ? op2(T, SMELT_OP_LOGICAL_OR, pos, op2(T, SMELT_OP_EQ, xf, num(T, 0.0))) : op2(T, SMELT_OP_EQ, ay, one);
    int32_t even = op2(T, SMELT_OP_EQ, op2(T, SMELT_OP_REMAINDER, n, int_value(T, 2)), int_value(T, 0));
    int32_t ac = op1(T, SMELT_OP_ACOS, y), np1 = op2(T, SMELT_OP_ADD, nf, one), n2p1 = op2(T, SMELT_OP_ADD, op2(T, SMELT_OP_ADD, nf, nf), one);
    int32_t atone, closed, q1;
    static const int thr_of[2][4] = { { 6, 8, 8, 8 }, { 6, 6, 6, 4 } };
    int thr = thr_of[sh][op];
    switch (op) {
    case 0:
        atone = where3(T, op2(T, SMELT_OP_LOGICAL_OR, pos, even), one, num(T, -1.0));
        closed = op1(T, SMELT_OP_COS, op2(T, SMELT_OP_MUL, nf, ac));
        q1 = y;
        break;
    case 1: {
        atone = where3(T, op2(T, SMELT_OP_LOGICAL_OR, pos, even), np1, op1(T, SMELT_OP_NEG, np1));
        int32_t s = op1(T, SMELT_OP_SIN, ac), ang = op2(T, SMELT_OP_MUL, np1, ac);
        closed = where3(T, op2(T, SMELT_OP_NE, s, num(T, 0.0)), op2(T, SMELT_OP_DIV, op1(T, SMELT_OP_SIN, ang), s),
                        op2(T, SMELT_OP_DIV, op2(T, SMELT_OP_MUL, np1, op1(T, SMELT_OP_COS, ang)), y));
        q1 = x2;
        break;
    }
    case 2: {
        int32_t alt = where3(T, even, n2p1, op1(T, SMELT_OP_NEG, n2p1));
        atone = where3(T, pos, one, alt);
        int32_t half = op2(T, SMELT_OP_DIV, ac, num(T, 2.0));
        int32_t c = op1(T, SMELT_OP_COS, op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_ADD, nf, num(T, 0.5)), ac));
        closed = where3(T, op2(T, SMELT_OP_NE, op1(T, SMELT_OP_SIN, half), one), op2(T, SMELT_OP_DIV, c, op1(T, SMELT_OP_COS, half)), alt);
        q1 = op2(T, SMELT_OP_SUB, x2, one);
        break;
    }
    default: {
        int32_t alt = where3(T, even, one, num(T, -1.0));
        atone = where3(T, pos, n2p1, alt);
        int32_t half = op2(T, SMELT_OP_DIV, ac, num(T, 2.0));
        int32_t sn = op1(T, SMELT_OP_SIN, op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_ADD, nf, num(T, 0.5)), ac));
        closed = where3(T, op2(T, SMELT_OP_NE, op1(T, SMELT_OP_COS, half), one), op2(T, SMELT_OP_DIV, sn, op1(T, SMELT_OP_SIN, half)),
                        sh ? alt : where3(T, pos, n2p1, alt));
        q1 = op2(T, SMELT_OP_ADD, x2, one);
    }
    }
    int32_t rs[CHEB_UNROLL + 1] = { one, q1 };
    for (int k = 2; k <= CHEB_UNROLL; k++)
        rs[k] = op2(T, SMELT_OP_SUB, op2(T, SMELT_OP_MUL, x2, rs[k - 1]), rs[k - 2]);
    int32_t inside = op2(T, SMELT_OP_LOGICAL_AND, op2(T, SMELT_OP_GT, n, int_value(T, thr)), op2(T, SMELT_OP_LT, ay, one));
    int32_t r = poly_select(T, n, rs, op1(T, SMELT_OP_LOGICAL_NOT, op2(T, SMELT_OP_LOGICAL_OR, inside, unit)));
    r = where3(T, inside, closed, r);
    r = where3(T, unit, atone, r);
    r = where3(T, op2(T, SMELT_OP_LT, n, int_value(T, 0)), num(T, 0.0), r);
    return r < 0 ? -1 : cast_to(T, r, rt);
}

/* Hermite H and He (float64 only), Laguerre L and Legendre P (op 0..3)
 * at degree n as eager's kernels compute them: their three-term recurrences unrolled to
 * CHEB_UNROLL (a deeper one fails the run: eager runs it; eager's Hermite
 * gives NaN beyond 128 in float32 anyway), L 1 at x == 0, P +-1 at |x| ==
 * 1, 0 for n < 0. */
static int32_t c_polynomial(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t xf, n, nf;
    int rt, rc = poly_operands(T, a, &xf, &n, &nf, &rt);
    if (rc)
        return rc == -2 ? as_host_call(T, fn, a) : -1;
    if (op < 2 && rt != SMELT_F64)   /* float32 Hermite cancels: eager's rounding (contracted or not) cannot be matched */
        return as_host_call(T, fn, a);
    int32_t one = num(T, 1.0), x2 = op2(T, SMELT_OP_ADD, xf, xf), rs[CHEB_UNROLL + 1];
    rs[0] = one;
    rs[1] = op == 0 ? x2 : op == 2 ? op2(T, SMELT_OP_SUB, one, xf) : xf;
    for (int m = 2; m <= CHEB_UNROLL; m++) {   /* step k of eager's loop */
        int32_t p = rs[m - 2], q = rs[m - 1];
        double k = op == 0 ? 2.0 * (m - 1) : (double)(m - 1);
        int32_t kp = op2(T, SMELT_OP_MUL, num(T, k), p);
        switch (op) {
        case 0: rs[m] = op2(T, SMELT_OP_SUB, op2(T, SMELT_OP_MUL, x2, q), kp); break;
        case 1: rs[m] = op2(T, SMELT_OP_SUB, op2(T, SMELT_OP_MUL, xf, q), kp); break;
        case 2:
            rs[m] = op2(T, SMELT_OP_DIV, op2(T, SMELT_OP_SUB, op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_ADD, num(T, k + k),
                                                                                     op2(T, SMELT_OP_SUB, one, xf)), q), kp),
                        num(T, k + 1));
            break;
        default:
            rs[m] = op2(T, SMELT_OP_DIV, op2(T, SMELT_OP_SUB, op2(T, SMELT_OP_MUL, op2(T, SMELT_OP_MUL, num(T, k + k + 1), xf), q), kp),
                        num(T, k + 1));
        }
    }
    int32_t special = op == 2 ? op2(T, SMELT_OP_EQ, op1(T, SMELT_OP_ABS, xf), num(T, 0.0))
                    : op == 3 ? op2(T, SMELT_OP_EQ, op1(T, SMELT_OP_ABS, xf), one) : -1;
    int32_t r = poly_select(T, n, rs, special >= 0 ? op1(T, SMELT_OP_LOGICAL_NOT, special) : op2(T, SMELT_OP_EQ, n, n));
    if (op == 2)
        r = where3(T, special, one, r);
    if (op == 3) {
        int32_t even = op2(T, SMELT_OP_EQ, op2(T, SMELT_OP_REMAINDER, n, int_value(T, 2)), int_value(T, 0));
        r = where3(T, special, where3(T, op2(T, SMELT_OP_LOGICAL_OR, op2(T, SMELT_OP_GT, xf, num(T, 0.0)), even), one, num(T, -1.0)), r);
    }
    r = where3(T, op2(T, SMELT_OP_LT, n, int_value(T, 0)), num(T, 0.0), r);
    return r < 0 ? -1 : cast_to(T, r, rt);
}

/* special.spherical_bessel_j0 (op 0): sin(x) / x (0 at +-inf; the Taylor
 * series to x^12 below 0.5) and erfinv (op 1: a closed-form start refined
 * by three Newton steps on erf, to double precision) of x below float64,
 * computed in float64 and rounded once (integers: the default float);
 * float64 is torch's kernel. */
static int32_t c_special_f64(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input");
    if (!is_tensor(T, x))
        return as_host_call(T, fn, a);
    int dt = special_dtype(T, x);
    if (dt == SMELT_F64)
        return as_host_call(T, fn, a);
    int32_t y = cast_to(T, x, SMELT_F64), one = num(T, 1.0), r;
    if (op == 0) {
        int32_t y2 = op2(T, SMELT_OP_MUL, y, y);
        static const double c[] = { 1.0 / 6227020800.0, -1.0 / 39916800.0, 1.0 / 362880.0, -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0 };
        int32_t h = num(T, c[0]);
        for (int k = 1; k < 6; k++)
            h = op2(T, SMELT_OP_ADD, num(T, c[k]), op2(T, SMELT_OP_MUL, y2, h));
        int32_t ser = op2(T, SMELT_OP_ADD, one, op2(T, SMELT_OP_MUL, y2, h));
        r = where3(T, op2(T, SMELT_OP_LT, op1(T, SMELT_OP_ABS, y), num(T, 0.5)), ser,
                   op2(T, SMELT_OP_DIV, op1(T, SMELT_OP_SIN, y), y));
        r = where3(T, op1(T, SMELT_OP_ISINF, y), num(T, 0.0), r);
    } else {
        const double pa = 0.147, pi = 3.14159265358979323846;
        int32_t l = op1(T, SMELT_OP_LOG, op2(T, SMELT_OP_SUB, one, op2(T, SMELT_OP_MUL, y, y)));   /* ln(1 - x^2) */
        int32_t b = op2(T, SMELT_OP_ADD, num(T, 2.0 / (pi * pa)), op2(T, SMELT_OP_MUL, l, num(T, 0.5)));
        int32_t in = op2(T, SMELT_OP_SUB, op2(T, SMELT_OP_MUL, b, b), op2(T, SMELT_OP_DIV, l, num(T, pa)));
        int32_t g = op1(T, SMELT_OP_SQRT, op2(T, SMELT_OP_SUB, op1(T, SMELT_OP_SQRT, in), b));
        g = where3(T, op2(T, SMELT_OP_LT, y, num(T, 0.0)), op1(T, SMELT_OP_NEG, g), g);
        for (int k = 0; k < 3; k++) {   /* g -= (erf(g) - x) / (2/sqrt(pi) e^(-g^2)) */
            int32_t d = op2(T, SMELT_OP_MUL, num(T, 2.0 / sqrt(pi)), op1(T, SMELT_OP_EXP, op1(T, SMELT_OP_NEG, op2(T, SMELT_OP_MUL, g, g))));
            g = op2(T, SMELT_OP_SUB, g, op2(T, SMELT_OP_DIV, op2(T, SMELT_OP_SUB, op1(T, SMELT_OP_ERF, g), y), d));
        }
        int32_t ay = op1(T, SMELT_OP_ABS, y);
        r = where3(T, op2(T, SMELT_OP_EQ, ay, one), op2(T, SMELT_OP_MUL, y, num(T, INFINITY)), g);
        r = where3(T, op2(T, SMELT_OP_EQ, y, num(T, 0.0)), y, r);
        r = where3(T, op2(T, SMELT_OP_GT, ay, one), num(T, NAN), r);
    }
    return r < 0 ? -1 : cast_to(T, r, dt);
}

/* gather(input, dim, index, *, sparse_grad=False) */
static int32_t c_gather(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input"), ix = arg(a, 2, "index");
    int64_t d;
    int dim, sg = 0;
    (void)op;
    if (!is_tensor(T, x) || !is_index_tensor(T, ix, 0) || node(T, x)->ndim < 1 ||
        node(T, ix)->ndim != node(T, x)->ndim || tr_int(T, arg(a, 1, "dim"), &d) ||
        d < -node(T, x)->ndim || d >= node(T, x)->ndim || get_bool(T, arg(a, 3, "sparse_grad"), 0, &sg) || sg)
        return T->broke ? -1 : as_host_call(T, fn, a);
    dim = (int)(d < 0 ? d + node(T, x)->ndim : d);
    for (int i = 0; i < node(T, x)->ndim; i++)
        if (i != dim && node(T, ix)->shape[i] > node(T, x)->shape[i])
            return as_host_call(T, fn, a);   /* eager raises */
    return gather_at(T, x, ix, dim, 0);
}

/* index_select(input, dim, index): a 1-d (or 0-d) int64/int32 index. */
static int32_t c_index_select(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input"), ix = arg(a, 2, "index");
    int64_t d;
    (void)op;
    if (!is_tensor(T, x) || !is_index_tensor(T, ix, 1) || node(T, x)->ndim < 1 || node(T, ix)->ndim > 1 ||
        tr_int(T, arg(a, 1, "dim"), &d) || d < -node(T, x)->ndim || d >= node(T, x)->ndim)
        return T->broke ? -1 : as_host_call(T, fn, a);
    return select_rows(T, x, ix, (int)(d < 0 ? d + node(T, x)->ndim : d), 0);
}

/* take(input, index): input flattened, read at index (negatives from the
 * end); index's shape. */
static int32_t c_take(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input"), ix = arg(a, 1, "index");
    (void)op;
    if (!is_tensor(T, x) || !is_index_tensor(T, ix, 0))
        return as_host_call(T, fn, a);
    const smelt_node *in = node(T, ix);
    int64_t n = smelt_node_numel(node(T, x)), m = smelt_node_numel(in), shape[SMELT_MAX_DIMS];
    int nd = in->ndim;
    memcpy(shape, in->shape, sizeof shape);
    int32_t r = gather_at(T, v_reshape(T, x, &n, 1), v_reshape(T, ix, &m, 1), 0, 1);
    return r < 0 ? -1 : fresh_contiguous(T, -1, v_reshape(T, r, shape, nd));
}

/* take_along_dim(input, indices, dim=None): without dim, take of the
 * flattened input at the flattened indices; with it, input and indices
 * broadcast to each other off dim, then gathered (negatives from the end). */
static int32_t c_take_along_dim(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input"), ix = arg(a, 1, "indices"), dv = arg(a, 2, "dim");
    int64_t d;
    (void)op;
    if (!is_tensor(T, x) || !is_index_tensor(T, ix, 0))
        return as_host_call(T, fn, a);
    if (is_none(T, dv)) {
        int64_t n = smelt_node_numel(node(T, x)), m = smelt_node_numel(node(T, ix));
        return gather_at(T, v_reshape(T, x, &n, 1), v_reshape(T, ix, &m, 1), 0, 1);
    }
    const smelt_node *xn = node(T, x), *in = node(T, ix);
    int nd = xn->ndim;
    if (tr_int(T, dv, &d))
        return -1;
    if (nd < 1 || in->ndim != nd || d < -nd || d >= nd)
        return as_host_call(T, fn, a);
    int dim = (int)(d < 0 ? d + nd : d);
    int64_t xs[SMELT_MAX_DIMS], is[SMELT_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        int64_t p = xn->shape[i], q = in->shape[i];
        if (i != dim && p != q && p != 1 && q != 1)
            return as_host_call(T, fn, a);   /* eager raises */
        int64_t b = p == 1 ? q : p;
        xs[i] = i == dim ? p : b;
        is[i] = i == dim ? q : b;
    }
    return gather_at(T, expand_to(T, x, xs, nd), expand_to(T, ix, is, nd), dim, 1);
}

/* torch.embedding(weight, indices, padding_idx, scale_grad_by_freq,
 * sparse): rows of the 2-d weight; indices' shape plus the row. The rows
 * of padding_idx are DETACHed (no gradient reaches that row, as eager's
 * backward); scale_grad_by_freq and sparse change only the backward, which
 * the graph does not carry. */
static int32_t c_embedding(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t w = arg(a, 0, "weight"), ix = arg(a, 1, "indices");
    (void)op;
    if (!is_tensor(T, w) || !is_index_tensor(T, ix, 1) || node(T, w)->ndim != 2)
        return as_host_call(T, fn, a);
    const smelt_node *in = node(T, ix);
    int64_t m = smelt_node_numel(in), shape[SMELT_MAX_DIMS];
    int nd = in->ndim;
    if (nd + 1 > SMELT_MAX_DIMS)
        return as_host_call(T, fn, a);
    memcpy(shape, in->shape, sizeof(int64_t) * (size_t)nd);
    shape[nd] = node(T, w)->shape[1];
    int32_t r = select_rows(T, w, v_reshape(T, ix, &m, 1), 0, 0);
    int64_t pad = -1;
    int flag = 0;
    for (int k = 3; k < 5 && k < a->npos; k++) {   /* scale_grad_by_freq, sparse */
        if (tr_truth(T, a->pos[k], &flag))
            return -1;
        if (flag)
            T->grad_sensitive = "embedding(scale_grad_by_freq=True or sparse=True)";
    }
    if (a->npos > 2 && !is_none(T, a->pos[2]) && tr_int(T, a->pos[2], &pad))
        return -1;
    if (r >= 0 && pad >= 0) {
        int64_t one[2] = { m, 1 };
        int32_t at = op2(T, SMELT_OP_EQ, v_reshape(T, ix, one, 2), int_value(T, pad));
        r = where3(T, at, op1(T, SMELT_OP_DETACH, r), r);
    }
    if (r >= 0)
        pend_like(T, T->vals[ix].node, nd, nd + 1);
    return r < 0 ? -1 : fresh_contiguous(T, -1, v_reshape(T, r, shape, nd + 1));
}

/* linalg.cross(a, b, dim=-1) (and torch.cross with a dim): components
 * from slices of the size-3 dim. */
static int32_t h_cross(tracer *T, const call_args *a, smelt_op op)
{
    int32_t x = arg(a, 0, "input"), y = arg(a, 1, "other"), dv = arg(a, 2, "dim");
    int64_t d;
    int dim;
    if (!is_tensor(T, x) || !is_tensor(T, y) || ((int)op == 1 && is_none(T, dv)))
        return tr_break(T, "cross arguments (torch.cross without dim warns)");
    if (get_int(T, dv, -1, &d))
        return -1;
    const smelt_node *p = node(T, x), *q = node(T, y);
    if (p->ndim != q->ndim || p->dtype != q->dtype || p->dtype == SMELT_BOOL || norm_dim(T, d, p->ndim, &dim))
        return T->broke ? -1 : tr_break(T, "cross of other ranks or dtypes (eager raises)");
    if (p->shape[dim] != 3 || q->shape[dim] != 3)
        return tr_break(T, "cross over a dim not of size 3 (eager raises)");
    int32_t xs[3], ys[3], c[3];
    for (int i = 0; i < 3; i++)
        if ((xs[i] = v_slice(T, x, dim, i, i + 1, 1)) < 0 || (ys[i] = v_slice(T, y, dim, i, i + 1, 1)) < 0)
            return -1;
    for (int i = 0; i < 3; i++) {
        int j = (i + 1) % 3, k = (i + 2) % 3;
        if ((c[i] = op2(T, SMELT_OP_SUB, op2(T, SMELT_OP_MUL, xs[j], ys[k]), op2(T, SMELT_OP_MUL, xs[k], ys[j]))) < 0)
            return -1;
    }
    int32_t l = tv_tuple(T, c, 3);
    call_args cc = { .pos = (int32_t[]){ l, int_value(T, dim) }, .npos = 2 };
    return l < 0 || cc.pos[1] < 0 ? -1 : fresh_contiguous(T, -1, h_cat(T, &cc, 0));
}

static const op_fn copy_forms[] = { h_t, h_transpose, h_permute, h_expand, h_unsqueeze, h_squeeze, h_diagonal,
                                    h_view, h_narrow, h_unbind, h_select, h_self, h_detach, h_split,
                                    h_split_sizes };

typedef struct op_entry {
    const char *names;     /* space-separated: torch.X F.X T.X (T.X is also method X) */
    op_fn fn;              /* the handler, or NULL when call is set */
    int op;                /* handler's variant (an smelt_op or an encoding it documents) */
    int ip;                /* in-place behaviour */
    int out;               /* out= behaviour */
    call_fn call;          /* the handler taking the callable (fn NULL), or NULL */
    vcall_fn vcall;        /* the handler taking the callable and op (fn, call NULL), or NULL */
} op_entry;

/* A row with the common columns: no out=, no callable-taking handler. */
#define ROW(names, fn, op, ip) { names, fn, op, ip, OUT_NO, NULL, NULL }
/* A row whose handler takes the callable too (for a host call of it in the
 * cases it leaves to torch's kernel). */
#define VROW(names, fn, op) { names, NULL, op, IP_NO, OUT_NO, NULL, fn }
/* Rows whose home is native.c (graph ops where they take a form that
 * expresses them, else a host call). */
#define NATIVE(names) { names, NULL, 0, IP_NO, OUT_NO, native_call, NULL }

#define U(n, OP) { "torch." n " T." n, h_unary, SMELT_OP_##OP, IP_NO, OUT_CAST, NULL, NULL }
#define B(n, OP) { "torch." n " T." n, h_binary, SMELT_OP_##OP, IP_NO, OUT_CAST, NULL, NULL }
#define R(n, OP) { "torch." n " T." n, h_reduce, SMELT_OP_##OP, IP_NO, OUT_NO, NULL, NULL }

static const op_entry table[] = {
    U("neg", NEG), U("negative", NEG), U("abs", ABS), U("exp", EXP), U("exp2", EXP2), U("expm1", EXPM1),
    U("log", LOG), U("log2", LOG2), U("log1p", LOG1P), U("sqrt", SQRT), U("rsqrt", RSQRT),
    U("sin", SIN), U("cos", COS), U("tan", TAN), U("tanh", TANH), U("sigmoid", SIGMOID),
    U("erf", ERF), U("relu", RELU), U("floor", FLOOR), U("ceil", CEIL), U("round", ROUND),
    U("trunc", TRUNC), U("sign", SIGN), U("reciprocal", RECIPROCAL), U("logical_not", LOGICAL_NOT),
    U("isnan", ISNAN), U("isinf", ISINF), U("bitwise_not", BITWISE_NOT),
    U("acos", ACOS), U("asin", ASIN), U("atan", ATAN), U("acosh", ACOSH), U("asinh", ASINH), U("atanh", ATANH), U("cosh", COSH), U("sinh", SINH), U("log10", LOG10), U("erfc", ERFC), U("lgamma", LGAMMA),
    U("arccos", ACOS), U("arcsin", ASIN), U("arctan", ATAN), U("arccosh", ACOSH), U("arcsinh", ASINH),
    U("arctanh", ATANH),
    ROW("torch.special.erfc", h_unary, SMELT_OP_ERFC, IP_NO), ROW("torch.special.gammaln", h_unary, SMELT_OP_LGAMMA, IP_NO),
    ROW("F.relu", h_unary, SMELT_OP_RELU, IPOS(1)), ROW("F.relu_ torch.relu_", h_unary, SMELT_OP_RELU, IP_ALWAYS),
    ROW("F.sigmoid", h_unary, SMELT_OP_SIGMOID, IP_NO), ROW("F.tanh", h_unary, SMELT_OP_TANH, IP_NO),
    B("add", ADD), B("sub", SUB), B("subtract", SUB), B("mul", MUL), B("multiply", MUL),
    B("div", DIV), B("divide", DIV), B("true_divide", DIV), B("floor_divide", FLOORDIV),
    B("pow", POW), B("maximum", MAXIMUM), B("minimum", MINIMUM), B("fmod", FMOD),
    B("remainder", REMAINDER), B("atan2", ATAN2), B("eq", EQ), B("ne", NE), B("lt", LT),
    B("le", LE), B("gt", GT), B("ge", GE), B("logical_and", LOGICAL_AND),
    B("logical_or", LOGICAL_OR), B("logical_xor", LOGICAL_XOR), B("bitwise_and", BITWISE_AND),
    B("bitwise_or", BITWISE_OR), B("bitwise_xor", BITWISE_XOR),
    R("sum", SUM), R("prod", PROD), R("mean", MEAN), R("amax", AMAX), R("amin", AMIN),
    R("any", ANY), R("all", ALL), R("argmax", ARGMAX), R("argmin", ARGMIN),
    ROW("torch.max T.max", h_minmax, SMELT_OP_AMAX, IP_NO), ROW("torch.min T.min", h_minmax, SMELT_OP_AMIN, IP_NO),
    ROW("torch.var T.var", h_var, SMELT_OP_VAR, IP_NO), ROW("torch.std T.std", h_var, SMELT_OP_STD, IP_NO),
    ROW("torch.logsumexp T.logsumexp", h_logsumexp, 0, IP_NO),
    ROW("torch.norm T.norm", h_norm, 0, IP_NO), ROW("torch.linalg.vector_norm", h_norm, SMELT_OP_MEAN, IP_NO),
    ROW("torch.softmax F.softmax T.softmax", h_softmax, SMELT_OP_EXP, IP_NO),
    ROW("torch.log_softmax F.log_softmax T.log_softmax", h_softmax, SMELT_OP_LOG, IP_NO),
    ROW("F.softmin", h_softmin, 0, IP_NO),
    ROW("F.layer_norm torch.layer_norm", h_layer_norm, 0, IP_NO),
    ROW("F.rms_norm", h_rms_norm, 0, IP_NO),
    ROW("F.group_norm torch.group_norm", h_group_norm, 0, IP_NO),
    ROW("F.batch_norm", h_batch_norm, 0, IP_NO),
    ROW("F.normalize", h_normalize, 0, IP_NO),
    ROW("F.linear", h_linear, 0, IP_NO),
    ROW("torch.matmul T.matmul torch.mm T.mm torch.bmm T.bmm", h_matmul, 0, IP_NO),
    ROW("torch.addmm T.addmm torch.baddbmm T.baddbmm", h_addmm, 0, IP_NO),
    ROW("torch.outer T.outer torch.ger T.ger", h_outer, 0, IP_NO),
    ROW("F.gelu", h_gelu, 0, IP_NO), ROW("F.silu", h_silu, 0, IPOS(1)),
    ROW("torch._C._nn.silu", h_silu, 0, IP_NO), ROW("torch._C._nn.mish", h_mish, 0, IP_NO),
    ROW("F.leaky_relu", h_relu_family, SMELT_OP_MUL, IPOS(2)), ROW("F.elu", h_relu_family, SMELT_OP_EXP, IPOS(2)),
    ROW("F.celu", h_relu_family, SMELT_OP_EXPM1, IPOS(2)), ROW("F.selu torch.selu", h_relu_family, SMELT_OP_ABS, IPOS(1)),
    ROW("F.softplus", h_softplus, 0, IP_NO), ROW("F.hardtanh", h_hardtanh, SMELT_OP_CLAMP, IPOS(3)),
    ROW("F.relu6", h_hardtanh, SMELT_OP_RELU, IPOS(1)), ROW("F.hardsigmoid", h_hard, SMELT_OP_SIGMOID, IPOS(1)),
    ROW("F.hardswish", h_hard, SMELT_OP_MUL, IPOS(1)), ROW("F.mish", h_mish, 0, IPOS(1)),
    ROW("F.logsigmoid", h_logsigmoid, 0, IP_NO), ROW("F.softsign", h_shrinkish, SMELT_OP_DIV, IP_NO),
    ROW("F.tanhshrink", h_shrinkish, SMELT_OP_SUB, IP_NO),
    ROW("F.hardshrink torch.hardshrink T.hardshrink", h_shrink, SMELT_OP_ABS, IP_NO),
    ROW("F.softshrink", h_shrink, SMELT_OP_SUB, IP_NO), ROW("F.threshold", h_threshold, 0, IPOS(3)),
    ROW("F.glu", h_glu, 0, IP_NO), ROW("F.prelu torch.prelu", h_prelu, 0, IP_NO),
    ROW("F.dropout torch.dropout", h_dropout, 0, IPOS(3)),
    ROW("F.dropout1d F.dropout2d F.dropout3d F.alpha_dropout F.feature_alpha_dropout", h_dropout, 1, IPOS(3)),
    ROW("F.mse_loss", h_loss, SMELT_OP_MUL, IP_NO), ROW("F.l1_loss", h_loss, SMELT_OP_ABS, IP_NO),
    ROW("F.smooth_l1_loss", h_loss, SMELT_OP_SUB, IP_NO),
    ROW("F.binary_cross_entropy_with_logits", h_bce_logits, 0, IP_NO),
    ROW("F.cosine_similarity torch.cosine_similarity", h_cosine_similarity, 0, IP_NO),
    ROW("T.contiguous", h_contiguous, 0, IP_NO), ROW("T.is_contiguous", h_is_contiguous, 0, IP_NO),
    ROW("T.clone torch.clone", h_clone, 0, IP_NO), ROW("T.detach torch.detach", h_detach, 0, IP_NO),
    ROW("T.zero_ torch.zero_", h_fill, 0, IP_ALWAYS), ROW("torch.scalar_tensor", h_scalar_tensor, 0, IP_NO), ROW("T.fill_", h_fill, SMELT_OP_FULL, IP_ALWAYS),
    ROW("T.copy_", h_copy, 0, IP_ALWAYS),
    ROW("torch.square T.square", h_square, 0, IP_NO), ROW("torch.lerp T.lerp", h_lerp, 0, IP_NO),
    ROW("torch.addcmul T.addcmul", h_addc, SMELT_OP_MUL, IP_NO), ROW("torch.addcdiv T.addcdiv", h_addc, SMELT_OP_DIV, IP_NO),
    ROW("T.view", h_view, 1, IP_NO), ROW("T.reshape torch.reshape", h_view, 0, IP_NO),
    ROW("T.view_as", h_view_as, 1, IP_NO), ROW("T.reshape_as", h_view_as, 0, IP_NO),
    ROW("T.unflatten torch.unflatten", h_unflatten, 0, IP_NO),
    ROW("T.permute torch.permute", h_permute, 0, IP_NO),
    ROW("T.transpose torch.transpose T.swapaxes torch.swapaxes T.swapdims torch.swapdims", h_transpose, 0, IP_NO),
    ROW("T.t torch.t", h_t, 0, IP_NO),
    ROW("T.movedim torch.movedim T.moveaxis torch.moveaxis", h_movedim, 0, IP_NO),
    ROW("T.unsqueeze torch.unsqueeze", h_unsqueeze, 0, IP_NO),
    ROW("T.squeeze torch.squeeze", h_squeeze, 0, IP_NO),
    ROW("T.flatten torch.flatten", h_flatten, 0, IP_NO),
    ROW("T.expand", h_expand, 0, IP_NO), ROW("T.expand_as", h_expand_as, 0, IP_NO),
    ROW("T.broadcast_to torch.broadcast_to", h_broadcast_to, 0, IP_NO),
    ROW("T.repeat", h_repeat, 0, IP_NO),
    ROW("T.select torch.select", h_select, 0, IP_NO), ROW("T.narrow torch.narrow", h_narrow, 0, IP_NO),
    ROW("T.unbind torch.unbind", h_unbind, 0, IP_NO),
    ROW("T.diagonal torch.diagonal", h_diagonal, 0, IP_NO),
    ROW("T.roll torch.roll", h_roll, 0, IP_NO),
    ROW("torch.linalg.diagonal", h_linalg_diagonal, 0, IP_NO),
    ROW("torch.ops.aten.slice.Tensor torch.ops.aten.slice", h_aten_slice, 0, IP_NO),
    ROW("torch.pixel_shuffle F.pixel_shuffle", h_shuffle, 0, IP_NO),
    ROW("torch.pixel_unshuffle F.pixel_unshuffle", h_shuffle, 1, IP_NO),
    ROW("torch.channel_shuffle F.channel_shuffle torch.native_channel_shuffle", h_shuffle, 2, IP_NO),
    ROW("torch.fft.fftshift", h_fftshift, 0, IP_NO), ROW("torch.fft.ifftshift", h_fftshift, 1, IP_NO),
    ROW("torch.frac T.frac", h_frac, 0, IP_NO),
    ROW("torch.flip T.flip", h_flip, 0, IP_NO), ROW("torch.fliplr T.fliplr", h_flip, 1, IP_NO),
    ROW("torch.flipud T.flipud", h_flip, 2, IP_NO), ROW("torch.rot90 T.rot90", h_rot90, 0, IP_NO),
    ROW("torch.logaddexp T.logaddexp", h_logaddexp, 0, IP_NO), ROW("torch.logaddexp2 T.logaddexp2", h_logaddexp, 1, IP_NO),
    ROW("torch.dot T.dot torch.vdot T.vdot torch.inner T.inner", h_dot, 0, IP_NO),
    ROW("torch.mv T.mv", h_dot, 1, IP_NO),
    ROW("torch.trace T.trace", h_trace, 0, IP_NO),
    ROW("torch.nanmean T.nanmean", h_nanmean, 0, IP_NO),
    ROW("F.margin_ranking_loss", h_margin_ranking, 0, IP_NO),
    ROW("torch.constant_pad_nd", h_constant_pad_nd, 0, IP_NO),
    ROW("torch.var_mean", h_var_mean, SMELT_OP_VAR, IP_NO), ROW("torch.std_mean", h_var_mean, SMELT_OP_STD, IP_NO),
    ROW("torch.diag T.diag", h_diag, 0, IP_NO), ROW("torch.diagflat T.diagflat", h_diag, 1, IP_NO),
    ROW("torch.diag_embed T.diag_embed", h_diag, 2, IP_NO),
    ROW("T.sum_to_size", h_sum_to_size, 0, IP_NO),
    ROW("torch.repeat_interleave T.repeat_interleave", h_repeat_interleave, 0, IP_NO),
    ROW("torch.kron T.kron", h_kron, 0, IP_NO),
    VROW("torch.gather T.gather", c_gather, 0),
    VROW("torch.index_select T.index_select", c_index_select, 0),
    VROW("torch.take T.take", c_take, 0),
    VROW("torch.take_along_dim T.take_along_dim", c_take_along_dim, 0),
    VROW("torch.embedding", c_embedding, 0),
    VROW("torch._unsafe_masked_index", c_unsafe_masked_index, 0), VROW("torch.addbmm T.addbmm", c_addbmm, 0),
    VROW("torch._C._VariableFunctions.tensordot", c_tensordot, 0),
    VROW("torch.i0 T.i0 torch.special.i0 torch.special.modified_bessel_i0", c_bessel_i, 0),
    VROW("torch.special.i1 torch.special.modified_bessel_i1", c_bessel_i, 1),
    VROW("torch.special.i0e", c_bessel_i, 2), VROW("torch.special.i1e", c_bessel_i, 3),
    VROW("torch.special.modified_bessel_k0", c_bessel_k, 0), VROW("torch.special.modified_bessel_k1", c_bessel_k, 1),
    VROW("torch.special.scaled_modified_bessel_k0", c_bessel_k, 2),
    VROW("torch.special.scaled_modified_bessel_k1", c_bessel_k, 3),
    VROW("torch.special.erfcx", c_erfcx, 0), VROW("torch.special.log_ndtr", c_erfcx, 1),
    VROW("torch.special.ndtri", c_ndtri, 0),
    VROW("torch.special.bessel_j0", c_bessel_jy, 0), VROW("torch.special.bessel_j1", c_bessel_jy, 1),
    VROW("torch.special.bessel_y0", c_bessel_jy, 2), VROW("torch.special.bessel_y1", c_bessel_jy, 3),
    VROW("torch.special.spherical_bessel_j0", c_special_f64, 0),
    VROW("torch.erfinv T.erfinv torch.special.erfinv", c_special_f64, 1),
    VROW("torch.special.chebyshev_polynomial_t", c_chebyshev, 0), VROW("torch.special.chebyshev_polynomial_u", c_chebyshev, 1),
    VROW("torch.special.chebyshev_polynomial_v", c_chebyshev, 2), VROW("torch.special.chebyshev_polynomial_w", c_chebyshev, 3),
    VROW("torch.special.shifted_chebyshev_polynomial_t", c_chebyshev, 4),
    VROW("torch.special.shifted_chebyshev_polynomial_u", c_chebyshev, 5),
    VROW("torch.special.shifted_chebyshev_polynomial_v", c_chebyshev, 6),
    VROW("torch.special.shifted_chebyshev_polynomial_w", c_chebyshev, 7),
    VROW("torch.special.hermite_polynomial_h", c_polynomial, 0), VROW("torch.special.hermite_polynomial_he", c_polynomial, 1),
    VROW("torch.special.laguerre_polynomial_l", c_polynomial, 2), VROW("torch.special.legendre_polynomial_p", c_polynomial, 3),
    VROW("torch.put T.put", put_call, 0), VROW("torch.index_put T.index_put", put_call, 1),
    VROW("torch._unsafe_masked_index_put_accumulate", put_call, 2),
    VROW("torch.hypot T.hypot", c_hypot, 0), VROW("torch.trapezoid torch.trapz", c_trapezoid, 0),
    VROW("torch.cumulative_trapezoid", c_trapezoid, 1), VROW("torch.linalg.vecdot", c_vecdot, 0),
    VROW("torch.dist T.dist", c_dist, 0), VROW("torch.block_diag", c_block_diag, 0),
    VROW("torch.diagonal_scatter", c_diagonal_scatter, 0), VROW("torch.renorm T.renorm", c_renorm, 0),
    VROW("torch._chunk_cat", c_chunk_cat, 0), VROW("F.poisson_nll_loss", c_poisson_nll, 0),
    VROW("torch.ops.aten.native_dropout_backward torch.ops.aten.native_dropout_backward.default", c_dropout_backward, 0),
    VROW("torch.ops.aten._softmax_backward_data torch.ops.aten._softmax_backward_data.default", c_softmax_backward, 0),
    VROW("torch.ops.aten._log_softmax_backward_data torch.ops.aten._log_softmax_backward_data.default", c_softmax_backward, 1),
    VROW("torch.digamma T.digamma torch.special.digamma torch.special.psi", c_digamma, 0),
    VROW("torch.polygamma torch.special.polygamma", c_digamma, 1), VROW("T.polygamma", c_digamma, 2),
    VROW("torch.special.zeta", c_zeta, 0),
    VROW("torch.mvlgamma T.mvlgamma torch.special.multigammaln", c_mvlgamma, 0),
    VROW("torch.scatter T.scatter", scatter_call, SC_COPY), VROW("torch.scatter_add T.scatter_add", scatter_call, SC_SUM),
    VROW("torch.scatter_reduce T.scatter_reduce", scatter_call, -1),
    VROW("torch.index_add T.index_add", index_write_call, SC_SUM), VROW("torch.index_copy T.index_copy", index_write_call, SC_COPY),
    VROW("torch.index_reduce T.index_reduce", index_write_call, -1),
    VROW("torch.diff T.diff", c_diff, 0),
    VROW("torch.addr T.addr", c_addr, 0),
    VROW("torch.isin", c_isin, 0),
    VROW("torch.index_fill T.index_fill", c_index_fill, 0),
    VROW("torch.unfold_copy", c_unfold_copy, 0),
    VROW("torch.cumsum T.cumsum", scan_call, SMELT_OP_SUM),
    VROW("torch.cummax T.cummax", scan_call, SMELT_OP_AMAX), VROW("torch.cummin T.cummin", scan_call, SMELT_OP_AMIN),
    VROW("torch.cumprod T.cumprod", scan_call, SMELT_OP_PROD),
    VROW("torch.logcumsumexp T.logcumsumexp", scan_call, SMELT_OP_EXP),
    VROW("torch.ops.aten._safe_softmax.default torch.ops.aten._safe_softmax", c_safe_softmax, 0),
    VROW("torch.slice_scatter T.slice_scatter", scatter_region, 0),
    VROW("torch.select_scatter T.select_scatter", scatter_region, 1),
    VROW("torch._C._nn.nll_loss_nd", nll_call, 0),
    VROW("torch._C._nn.cross_entropy_loss", nll_call, 1),
    ROW("torch.addmv T.addmv", h_addmm, 1, IP_NO),
    ROW("torch.isclose T.isclose", h_isclose, 0, IP_NO),
    ROW("F.pairwise_distance torch.pairwise_distance", h_pairwise_distance, 0, IP_NO),
    ROW("F.cosine_embedding_loss", h_loss2, L_COSINE_EMBEDDING, IP_NO),
    ROW("F.hinge_embedding_loss", h_loss2, L_HINGE_EMBEDDING, IP_NO),
    ROW("F.soft_margin_loss", h_loss2, L_SOFT_MARGIN, IP_NO),
    ROW("F.huber_loss", h_loss2, L_HUBER, IP_NO),
    ROW("torch.linalg.cross", h_cross, 0, IP_NO), ROW("torch.cross T.cross", h_cross, 1, IP_NO),
    ROW("torch.deg2rad T.deg2rad", h_unary_composite, C_DEG2RAD, IP_NO),
    ROW("torch.rad2deg T.rad2deg", h_unary_composite, C_RAD2DEG, IP_NO),
    ROW("torch.sgn T.sgn", h_unary_composite, C_SGN, IP_NO),
    ROW("torch.isfinite T.isfinite", h_unary_composite, C_ISFINITE, IP_NO),
    ROW("torch.isposinf T.isposinf", h_unary_composite, C_ISPOSINF, IP_NO),
    ROW("torch.isneginf T.isneginf", h_unary_composite, C_ISNEGINF, IP_NO),
    ROW("torch.isreal T.isreal", h_unary_composite, C_ISREAL, IP_NO),
    ROW("torch.sinc T.sinc torch.special.sinc", h_unary_composite, C_SINC, IP_NO),
    ROW("torch.angle T.angle", h_unary_composite, C_ANGLE, IP_NO),
    ROW("torch.special.ndtr", h_unary_composite, C_NDTR, IP_NO),
    ROW("torch.special.entr", h_unary_composite, C_ENTR, IP_NO),
    ROW("torch.nan_to_num T.nan_to_num", h_nan_to_num, 0, IP_NO),
    ROW("torch.heaviside T.heaviside", h_binary_composite, C_HEAVISIDE, IP_NO),
    ROW("torch.fmax T.fmax", h_binary_composite, C_FMAX, IP_NO),
    ROW("torch.ldexp T.ldexp", h_binary_composite, C_LDEXP, IP_NO),
    ROW("torch.copysign T.copysign", h_binary_composite, C_COPYSIGN, IP_NO), U("signbit", SIGNBIT),
    ROW("torch.fmin T.fmin", h_binary_composite, C_FMIN, IP_NO),
    ROW("torch.float_power T.float_power", h_binary_composite, C_FLOAT_POWER, IP_NO),
    ROW("torch.xlogy T.xlogy torch.special.xlogy", h_binary_composite, C_XLOGY, IP_NO),
    ROW("torch.special.xlog1py", h_binary_composite, C_XLOG1PY, IP_NO),
    ROW("torch.logit T.logit torch.special.logit", h_logit, 0, IP_NO),
    ROW("torch.rsub", h_rsub, 0, IP_NO),
    ROW("T.__radd__", h_reflected, SMELT_OP_ADD, IP_NO), ROW("T.__rmul__", h_reflected, SMELT_OP_MUL, IP_NO),
    ROW("T.__rsub__", h_reflected, SMELT_OP_SUB, IP_NO), ROW("T.__rtruediv__ T.__rdiv__", h_reflected, SMELT_OP_DIV, IP_NO),
    ROW("T.__rfloordiv__", h_reflected, SMELT_OP_FLOORDIV, IP_NO), ROW("T.__rpow__", h_reflected, SMELT_OP_POW, IP_NO),
    ROW("T.__rmod__", h_reflected, SMELT_OP_REMAINDER, IP_NO), ROW("T.__rand__", h_reflected, SMELT_OP_BITWISE_AND, IP_NO),
    ROW("T.__ror__", h_reflected, SMELT_OP_BITWISE_OR, IP_NO), ROW("T.__rxor__", h_reflected, SMELT_OP_BITWISE_XOR, IP_NO),
    ROW("torch.count_nonzero T.count_nonzero", h_count_nonzero, 0, IP_NO),
    ROW("torch.nansum T.nansum", h_nansum, 0, IP_NO),
    ROW("torch.aminmax T.aminmax", h_aminmax, 0, IP_NO),
    ROW("torch.fill", h_fill_new, 0, IP_NO),
    ROW("torch.hstack", h_stack_like, 1, IP_NO), ROW("torch.vstack torch.row_stack", h_stack_like, 2, IP_NO),
    ROW("torch.dstack", h_stack_like, 3, IP_NO), ROW("torch.column_stack", h_stack_like, 0, IP_NO),
    ROW("torch.tile T.tile", h_tile, 0, IP_NO),
    ROW("torch.t_copy", h_copy_form, 0, IP_NO), ROW("torch.transpose_copy", h_copy_form, 1, IP_NO),
    ROW("torch.permute_copy", h_copy_form, 2, IP_NO), ROW("torch.expand_copy", h_copy_form, 3, IP_NO),
    ROW("torch.unsqueeze_copy", h_copy_form, 4, IP_NO), ROW("torch.squeeze_copy", h_copy_form, 5, IP_NO),
    ROW("torch.diagonal_copy", h_copy_form, 6, IP_NO), ROW("torch.view_copy", h_copy_form, 7, IP_NO),
    ROW("torch.narrow_copy T.narrow_copy", h_copy_form, 8, IP_NO), ROW("torch.unbind_copy", h_copy_form, 9, IP_NO),
    ROW("torch.select_copy", h_copy_form, 10, IP_NO), ROW("torch.alias_copy", h_copy_form, 11, IP_NO),
    ROW("torch.detach_copy", h_copy_form, 12, IP_NO), ROW("torch.split_copy", h_copy_form, 13, IP_NO),
    ROW("torch.split_with_sizes_copy", h_copy_form, 14, IP_NO),
    ROW("torch.split_with_sizes T.split_with_sizes", h_split, SMELT_OP_SUB, IP_NO),

    ROW("torch.as_strided T.as_strided torch.as_strided_copy torch.as_strided_scatter T.as_strided_scatter",
        h_storage, 0, IP_NO),
    ROW("torch.conj T.conj torch.resolve_conj T.resolve_conj torch.resolve_neg T.resolve_neg "
        "torch.conj_physical T.conj_physical torch.real", h_self, 0, IP_NO),
    ROW("torch.positive T.positive", h_self, SMELT_OP_NEG, IP_NO),
    ROW("torch.atleast_1d", h_atleast, 1, IP_NO), ROW("torch.atleast_2d", h_atleast, 2, IP_NO),
    ROW("torch.atleast_3d", h_atleast, 3, IP_NO),
    ROW("torch.broadcast_tensors", h_broadcast_tensors, 0, IP_NO),
    ROW("torch.meshgrid", h_meshgrid, 0, IP_NO),
    ROW("torch.tensor_split T.tensor_split", h_tensor_split, 0, IP_NO),
    ROW("torch.hsplit T.hsplit", h_tensor_split, 1, IP_NO), ROW("torch.vsplit T.vsplit", h_tensor_split, 2, IP_NO),
    ROW("torch.dsplit T.dsplit", h_tensor_split, 3, IP_NO),
    ROW("torch.unsafe_split T.unsafe_split", h_split, 0, IP_NO),
    ROW("torch.unsafe_chunk T.unsafe_chunk", h_split, SMELT_OP_DIV, IP_NO),
    ROW("torch.ravel T.ravel", h_ravel, 0, IP_NO),
    ROW("torch.cartesian_prod", h_cartesian_prod, 0, IP_NO),
    ROW("T.size", h_size, 0, IP_NO), ROW("T.dim T.ndimension", h_dim, 0, IP_NO),
    ROW("T.numel torch.numel T.nelement", h_numel, 0, IP_NO),
    ROW("T.is_floating_point torch.is_floating_point", h_is_floating_point, 0, IP_NO),
    ROW("torch.result_type", h_result_type, 0, IP_NO),
    { "torch.promote_types torch.can_cast", NULL, 0, IP_NO, OUT_NO, dtype_query, NULL },
    ROW("T.element_size", h_element_size, 0, IP_NO),
    ROW("torch.cat torch.concat torch.concatenate", h_cat, 0, IP_NO),
    ROW("torch.stack", h_cat, SMELT_OP_UNSQUEEZE, IP_NO),
    ROW("torch.where", h_where, 0, IP_NO), ROW("T.where", h_where_method, 0, IP_NO),
    ROW("T.masked_fill torch.masked_fill", h_masked_fill, 0, IP_NO),
    ROW("torch.clamp T.clamp torch.clip T.clip", h_clamp, 0, IP_NO),
    ROW("torch.clamp_min T.clamp_min", h_clamp, SMELT_OP_MAXIMUM, IP_NO),
    ROW("torch.clamp_max T.clamp_max", h_clamp, SMELT_OP_MINIMUM, IP_NO),
    ROW("T.to", h_to, 0, IP_NO),
    ROW("T.float", h_to, 1000 + SMELT_F32, IP_NO), ROW("T.double", h_to, 1000 + SMELT_F64, IP_NO),
    ROW("T.half", h_to, 1000 + SMELT_F16, IP_NO), ROW("T.bfloat16", h_to, 1000 + SMELT_BF16, IP_NO),
    ROW("T.int", h_to, 1000 + SMELT_I32, IP_NO), ROW("T.long", h_to, 1000 + SMELT_I64, IP_NO),
    ROW("T.bool", h_to, 1000 + SMELT_BOOL, IP_NO),
    ROW("T.byte", h_to, 1000 + SMELT_U8, IP_NO), ROW("T.char", h_to, 1000 + SMELT_I8, IP_NO),
    ROW("T.short", h_to, 1000 + SMELT_I16, IP_NO),
    ROW("T.type_as", h_type_as, 0, IP_NO),
    ROW("torch.zeros", h_full, SMELT_OP_ADD, IP_NO), ROW("torch.ones", h_full, SMELT_OP_MUL, IP_NO),
    ROW("torch.full", h_full, SMELT_OP_CLAMP, IP_NO), ROW("torch.empty", h_full, SMELT_OP_ADD, IP_NO),
    ROW("torch.zeros_like", h_full, 100 + SMELT_OP_ADD, IP_NO), ROW("torch.ones_like", h_full, 100 + SMELT_OP_MUL, IP_NO),
    ROW("torch.full_like", h_full, 100 + SMELT_OP_CLAMP, IP_NO), ROW("torch.empty_like", h_full, 100 + SMELT_OP_ADD, IP_NO),
    ROW("T.new_zeros", h_new_full, SMELT_OP_ADD, IP_NO), ROW("T.new_ones", h_new_full, SMELT_OP_MUL, IP_NO),
    ROW("T.new_full", h_new_full, SMELT_OP_CLAMP, IP_NO), ROW("T.new_empty", h_new_full, SMELT_OP_SUB, IP_NO),
    ROW("torch.manual_seed", h_manual_seed, 0, IP_NO),
    ROW("torch.linspace", h_linspace, 0, IP_NO), ROW("torch.logspace", h_linspace, 1, IP_NO),
    ROW("torch.rand", h_random, 0, IP_NO), ROW("torch.randn", h_random, 1, IP_NO),
    ROW("torch.randint", h_random, 2, IP_NO), ROW("torch.rand_like", h_random, 100, IP_NO),
    ROW("torch.randn_like", h_random, 101, IP_NO), ROW("torch.randint_like", h_random, 102, IP_NO),
    ROW("torch.arange", h_arange, 0, IP_NO), ROW("torch.eye", h_eye, 0, IP_NO), ROW("torch.tensor", h_tensor, 0, IP_NO),
    ROW("torch.as_tensor", h_as_tensor, 0, IP_NO), ROW("T.type", h_type, 0, IP_NO),
    ROW("torch.tril T.tril", h_tri, SMELT_OP_LE, IP_NO), ROW("torch.triu T.triu", h_tri, SMELT_OP_GE, IP_NO),
    ROW("torch.split T.split", h_split, 0, IP_NO), ROW("torch.chunk T.chunk", h_split, SMELT_OP_DIV, IP_NO),
    ROW("F.scaled_dot_product_attention", h_sdpa, 0, IP_NO),
    ROW("torch.nn.attention.flex_attention.flex_attention", h_flex, 0, IP_NO),
    ROW("torch.nn.attention.flex_attention.create_block_mask", h_flex, 1, IP_NO),
    ROW("torch._native_multi_head_attention", h_native_mha, 0, IP_NO),
    ROW("F.pad", h_pad, 0, IP_NO), ROW("T.cpu", h_identity, 0, IP_NO),
    ROW("torch._C._log_api_usage_once", h_none, 0, IP_NO),
    ROW("F.adaptive_max_pool1d", h_adaptive_max, 1, IP_NO), ROW("F.adaptive_max_pool2d", h_adaptive_max, 2, IP_NO),
    ROW("F.adaptive_max_pool3d", h_adaptive_max, 3, IP_NO),
    NATIVE("torch.conv1d torch.conv2d torch.conv3d torch.conv_transpose1d torch.conv_transpose2d "
           "torch.conv_transpose3d"),
    NATIVE("torch.max_pool1d torch.max_pool2d torch.max_pool3d torch.max_pool1d_with_indices "
           "torch._C._nn.max_pool2d_with_indices torch._C._nn.max_pool3d_with_indices"),
    NATIVE("torch.avg_pool1d torch._C._nn.avg_pool2d torch._C._nn.avg_pool3d"),
    NATIVE("torch.adaptive_avg_pool1d torch._C._nn.adaptive_avg_pool2d torch._C._nn.adaptive_avg_pool3d "
           "torch.adaptive_max_pool1d torch._C._nn.adaptive_max_pool2d torch._C._nn.adaptive_max_pool3d"),
    NATIVE("torch._C._nn.upsample_nearest1d torch._C._nn.upsample_nearest2d torch._C._nn.upsample_nearest3d "
           "torch._C._nn._upsample_nearest_exact1d torch._C._nn._upsample_nearest_exact2d "
           "torch._C._nn._upsample_nearest_exact3d"),
    NATIVE("T.unfold"),
};

static PyObject *resolve(PyObject *torch, PyObject *F, const char *name)
{
    PyObject *base = !strncmp(name, "torch.", 6) ? torch : !strncmp(name, "F.", 2) ? F : tensor_type;
    char path[128];
    snprintf(path, sizeof path, "%s", strchr(name, '.') + 1);
    PyObject *o = Py_NewRef(base);
    for (char *part = path, *dot; o && part; part = dot ? dot + 1 : NULL) {   /* torch.linalg.vector_norm */
        if ((dot = strchr(part, '.')))
            *dot = 0;
        Py_SETREF(o, PyObject_GetAttrString(o, part));
    }
    if (!o)
        PyErr_Clear();
    return o;
}

static int ac_init(PyObject *torch, PyObject *F);

int ops_init(void)
{
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *F = PyImport_ImportModule("torch.nn.functional");
    if (!torch || !F)
        goto fail;
    tensor_type = PyObject_GetAttrString(torch, "Tensor");
    size_type = PyObject_GetAttrString(torch, "Size");
    cumsum_fn = PyObject_GetAttrString(torch, "cumsum");
    cpu_device = PyObject_CallMethod(torch, "device", "s", "cpu");
    by_obj = PyDict_New();
    by_name = PyDict_New();
    if (!tensor_type || !size_type || !cpu_device || !by_obj || !by_name)
        goto fail;
    getitem_fn = PyObject_GetAttrString(tensor_type, "__getitem__");
    if (ac_init(torch, F))
        goto fail;
    nn_pad = resolve(torch, F, "torch._C._nn.pad");
    PyObject *ag = PyImport_ImportModule("smelt._autograd");
    dropout_fn = ag ? PyObject_GetAttrString(ag, "dropout_noise") : NULL;
    Py_XDECREF(ag);
    PyErr_Clear();
    put_fn = resolve(torch, F, "torch.put");
    manual_seed_fn = PyObject_GetAttrString(torch, "manual_seed");
    default_generator = PyObject_GetAttrString(torch, "default_generator");
    seed_call_fn = PyCFunction_New(&seed_call_def, NULL);
    PyErr_Clear();
    rand_like_fn[0] = resolve(torch, F, "torch.rand_like");
    rand_like_fn[1] = resolve(torch, F, "torch.randn_like");
    rand_like_fn[2] = resolve(torch, F, "torch.randint_like");
    index_put_fn = resolve(torch, F, "torch.index_put");
    native_mha_fn = resolve(torch, F, "torch._native_multi_head_attention");
    adaptive_max_fn[1] = resolve(torch, F, "torch.adaptive_max_pool1d");
    adaptive_max_fn[2] = resolve(torch, F, "torch._C._nn.adaptive_max_pool2d");
    adaptive_max_fn[3] = resolve(torch, F, "torch._C._nn.adaptive_max_pool3d");
    if (!getitem_fn)
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

/* Runs entry e's handler: e->fn, or e->call / e->vcall with the callable
 * fn (for a method, fn NULL: torch.Tensor's attribute `name`). */
static int32_t run_entry(tracer *T, const op_entry *e, PyObject *fn, PyObject *name, const call_args *a)
{
    if (e->fn)
        return e->fn(T, a, (smelt_op)e->op);
    PyObject *m = fn ? Py_NewRef(fn) : PyObject_GetAttr(tensor_type, name);
    int32_t r = !m ? -1 : e->call ? e->call(T, m, a, 0) : e->vcall(T, m, a, e->op);
    Py_XDECREF(m);
    return r;
}

/* Whether tensor value v is (or, for a list or tuple, holds) the tensor
 * whose node is n. */
static int holds_node(tracer *T, int32_t v, int32_t n, int exact_ok)
{
    if (v < 0)
        return 0;
    const tv *t = &T->vals[v];
    int32_t b = tr_view_base(T->g, n);
    if (t->kind == V_TENSOR)   /* the same storage (through views): eager raises or reads written memory */
        return (t->node != n || !exact_ok) && tr_view_base(T->g, t->node) == b;
    if (t->kind == V_LIST || t->kind == V_TUPLE)
        for (int32_t i = 0; i < t->n; i++)
            if (holds_node(T, t->items[i], n, exact_ok))
                return 1;
    return 0;
}

/* Call a without its out= o (b, over the caller's kwn/kwv of 32): 0, or
 * a break when o is also one of the call's tensors or there are too many
 * keywords. */
typedef struct out_args {
    call_args b;
    PyObject *kwn[32];
    int32_t kwv[32];
} out_args;

static int strip_out(tracer *T, const call_args *a, int32_t o, out_args *s)
{
    int32_t on = T->vals[o].node;
    s->b = (call_args){ a->pos, a->npos, s->kwn, s->kwv, 0 };
    if (a->nkw > 32)
        return tr_break(T, "out= with too many keywords");
    for (int k = 0; k < a->nkw; k++) {
        if (PyUnicode_CompareWithASCIIString(a->kwn[k], "out") == 0)
            continue;
        if (holds_node(T, a->kwv[k], on, 0))
            return tr_break(T, "out= that is also an argument of the call");
        s->kwn[s->b.nkw] = a->kwn[k];
        s->kwv[s->b.nkw++] = a->kwv[k];
    }
    for (int k = 0; k < a->npos; k++)
        if (holds_node(T, a->pos[k], on, 0))
            return tr_break(T, "out= that is also an argument of the call");
    return 0;
}

/* How eager treats out= of another dtype than the op's result, by the
 * op's bare name: 1 the op computes in out's dtype (as with dtype=: sum,
 * mean, prod, nansum, cumsum, cumprod), 2 the result is cast into out
 * (cat, stack), 0 anything else (eager raises). */
static int out_dtype_rule(const char *name)
{
    static const char *const in_dtype[] = { "sum", "mean", "prod", "nansum", "cumsum", "cumprod" };
    static const char *const cast[] = { "cat", "concat", "concatenate", "stack" };
    for (size_t i = 0; i < sizeof in_dtype / sizeof in_dtype[0]; i++)
        if (!strcmp(name, in_dtype[i]))
            return 1;
    for (size_t i = 0; i < sizeof cast / sizeof cast[0]; i++)
        if (!strcmp(name, cast[i]))
            return 2;
    return 0;
}

/* The bare name of a table entry's first callable ("torch.sum T.sum":
 * "sum") into buf. */
static const char *entry_name(const char *names, char *buf, size_t len)
{
    size_t n = strcspn(names, " ");
    const char *dot = memchr(names, '.', n);
    const char *s = dot ? dot + 1 : names;
    size_t k = (size_t)(names + n - s);
    snprintf(buf, len, "%.*s", (int)(k < len ? k : len - 1), s);
    return buf;
}

/* For an op that computes in out's dtype (out_dtype_rule 1): s gets the
 * keyword dtype=out's dtype unless the call names one. 0 or -1. */
static int out_dtype_kw(tracer *T, out_args *s, int32_t o)
{
    static PyObject *kw_dtype;
    for (int k = 0; k < s->b.nkw; k++)
        if (PyUnicode_CompareWithASCIIString(s->b.kwn[k], "dtype") == 0)
            return 0;
    if (!kw_dtype && !(kw_dtype = PyUnicode_InternFromString("dtype")))
        return -1;
    if (s->b.nkw >= 32)
        return tr_break(T, "out= with too many keywords");
    int32_t d = tv_obj(T, torch_dtypes[node(T, o)->dtype], -1);
    if (d < 0)
        return -1;
    s->kwn[s->b.nkw] = kw_dtype;
    s->kwv[s->b.nkw++] = d;
    return 0;
}

/* Result r of a call with out= o written into o: o must have r's shape
 * (eager resizes it otherwise) and, unless cast (element-wise rows, which
 * cast into o as eager does), r's dtype (reductions and GEMMs compute in
 * o's dtype or raise). o is the result. */
static int32_t write_out(tracer *T, int32_t o, int32_t r, int cast)
{
    if (r < 0 || T->vals[r].kind != V_TENSOR)
        return r < 0 ? r : tr_break(T, "out= of a call without a tensor result");
    const smelt_node *on = node(T, o), *rn = node(T, r);
    if (!cast && on->dtype != rn->dtype)
        return tr_break(T, "out= of another dtype than the result");
    if (on->ndim != rn->ndim || memcmp(on->shape, rn->shape, sizeof(int64_t) * rn->ndim))
        return tr_break(T, "out= of another shape than the result (eager resizes it)");
    return ops_inplace(T, o, r);
}

/* fn(..., out=o) for entry e. OUT_CAST (element-wise) rows: the result
 * cast into o. Any other row: the call without out=, written into o when
 * o has the result's shape and dtype and is none of the call's tensors
 * (eager's values are then the functional call's); anything else is a
 * break, so eager runs it. */
static int32_t out_call(tracer *T, const op_entry *e, PyObject *fn, PyObject *name, const call_args *a, int32_t o)
{
    if (T->vals[o].kind != V_TENSOR)
        return tr_break(T, "out= that is not a tensor");
    if (e->out == OUT_CAST) {   /* element-wise: out may be an argument itself, not overlap one otherwise */
        for (int k = 0; k < a->npos + a->nkw; k++) {
            int32_t v = k < a->npos ? a->pos[k] : a->kwv[k - a->npos];
            if (v != o && holds_node(T, v, T->vals[o].node, 1))
                return tr_break(T, "out= overlapping an argument of the call");
        }
        return write_out(T, o, e->fn(T, a, (smelt_op)e->op), 1);
    }
    out_args s;
    char bare[64];
    int rule = out_dtype_rule(entry_name(e->names, bare, sizeof bare));
    if (strip_out(T, a, o, &s) || (rule == 1 && out_dtype_kw(T, &s, o)))
        return -1;
    return write_out(T, o, run_entry(T, e, fn, name, &s.b), rule == 2);
}

/* Runs table entry idx for callable fn (a torch function) or method
 * `name` (fn NULL); writes the result into argument 0 when the call is in
 * place (inplace: a method named x.op_; or the entry says so). */
/* ---------- CPU autocast ---------- */

/* What CPU autocast does to a call's floating-point tensors (ATen's
 * autocast_mode.cpp, AutocastCPU, torch 2.13): AC_LOWER casts them to the
 * autocast dtype, AC_FP32 to float32, AC_PROMOTE to the widest of them,
 * AC_PAD is F.pad (float32 in the reflect/replicate modes). float64
 * tensors are never cast. Calls of anything else run in their inputs'
 * dtypes, as eager's. */
enum { AC_NONE, AC_LOWER, AC_FP32, AC_PROMOTE, AC_PAD };

static const struct { const char *names; int policy; } ac_table[] = {
    { "F.linear torch.matmul T.matmul torch.mm T.mm torch.bmm T.bmm torch.addmm T.addmm torch.baddbmm "
      "T.baddbmm torch.addbmm T.addbmm torch.linalg.vecdot F.prelu torch.prelu F.scaled_dot_product_attention "
      "torch._native_multi_head_attention torch.conv1d torch.conv2d torch.conv3d torch.conv_transpose1d "
      "torch.conv_transpose2d torch.conv_transpose3d torch.conv_tbc torch.convolution T.__matmul__ T.__rmatmul__", AC_LOWER },
    { "torch.prod T.prod torch.cdist torch.trace T.trace F.mse_loss F.l1_loss F.smooth_l1_loss F.huber_loss "
      "F.binary_cross_entropy_with_logits F.binary_cross_entropy F.margin_ranking_loss F.cosine_embedding_loss "
      "F.hinge_embedding_loss F.soft_margin_loss F.poisson_nll_loss F.kl_div F.triplet_margin_loss "
      "F.multi_margin_loss F.multilabel_margin_loss torch._C._nn.nll_loss_nd torch._C._nn.nll_loss "
      "torch._C._nn.nll_loss2d torch._C._nn.cross_entropy_loss torch._C._nn.avg_pool3d "
      "torch._C._nn.adaptive_avg_pool3d torch.max_pool3d torch._C._nn.max_pool3d_with_indices F.grid_sample "
      "torch.quantile T.quantile torch.nanquantile T.nanquantile torch.inverse T.inverse torch.pinverse "
      "T.pinverse torch.cholesky T.cholesky", AC_FP32 },
    { "torch.cat torch.concat torch.concatenate torch.stack torch.index_copy T.index_copy", AC_PROMOTE },
    { "F.pad torch._C._nn.pad", AC_PAD },
};

static PyObject *ac_by_obj, *ac_by_name;   /* callable / Tensor method name -> policy */

static int ac_init(PyObject *torch, PyObject *F)
{
    ac_by_obj = PyDict_New();
    ac_by_name = PyDict_New();
    for (size_t i = 0; ac_by_obj && ac_by_name && i < sizeof ac_table / sizeof ac_table[0]; i++) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", ac_table[i].names);
        PyObject *pol = PyLong_FromLong(ac_table[i].policy);
        for (char *tok = strtok(buf, " "); pol && tok; tok = strtok(NULL, " ")) {
            PyObject *o = resolve(torch, F, tok);
            if (o && PyDict_SetItem(ac_by_obj, o, pol))
                PyErr_Clear();
            if (!strncmp(tok, "T.", 2) && PyDict_SetItemString(ac_by_name, tok + 2, pol))
                PyErr_Clear();
            Py_XDECREF(o);
        }
        Py_XDECREF(pol);
    }
    return ac_by_obj && ac_by_name ? 0 : -1;
}

/* The autocast policy of a call of fn (or of Tensor method `name`). */
static int ac_policy(PyObject *fn, PyObject *name)
{
    PyObject *p = fn ? PyDict_GetItemWithError(ac_by_obj, fn) : PyDict_GetItemWithError(ac_by_name, name);
    if (!p)
        PyErr_Clear();
    return p ? (int)PyLong_AsLong(p) : AC_NONE;
}

/* Whether v is a tensor autocast casts (floating, not float64). */
static int ac_eligible(tracer *T, int32_t v)
{
    if (v < 0 || T->vals[v].kind != V_TENSOR)
        return 0;
    int dt = node(T, v)->dtype;
    return smelt_dtype_is_float((smelt_dtype)dt) && dt != SMELT_F64;
}

/* The dtype policy pol casts a's eligible tensors to (-1: none). */
static int ac_target(tracer *T, int pol, const call_args *a)
{
    if (pol == AC_LOWER)
        return T->ac_dtype;
    if (pol == AC_FP32)
        return SMELT_F32;
    if (pol == AC_PAD) {
        int32_t m = arg(a, 2, "mode");
        PyObject *o = m >= 0 ? tr_const(T, m) : NULL;
        return o && PyUnicode_Check(o) && (PyUnicode_CompareWithASCIIString(o, "reflect") == 0 ||
                                           PyUnicode_CompareWithASCIIString(o, "replicate") == 0) ? SMELT_F32 : -1;
    }
    int widest = -1;   /* AC_PROMOTE: float16 < bfloat16 < float32 as promotion (mixed halves: float32) */
    for (int k = 0; k < a->npos + a->nkw; k++) {
        int32_t v = k < a->npos ? a->pos[k] : a->kwv[k - a->npos];
        if (!ac_eligible(T, v))
            continue;
        int dt = node(T, v)->dtype;
        widest = widest < 0 || widest == dt ? dt : SMELT_F32;
    }
    return widest;
}

/* a as CPU autocast passes it to fn (or method `name`) in the trace's
 * state: *out = a, or b with the eligible tensors cast (pos/kwv are
 * the caller's arrays of SMELT_AC_MAXARGS). 0, -1 on a break. */
#define SMELT_AC_MAXARGS 16
static int ac_args(tracer *T, PyObject *fn, PyObject *name, const call_args *a, call_args *b, int32_t *pos,
                   int32_t *kwv, const call_args **out)
{
    *out = a;
    if (!T->ac_on || T->device >= 0)   /* CPU autocast casts CPU tensors only */
        return 0;
    int pol = ac_policy(fn, name), to = pol ? ac_target(T, pol, a) : -1;
    if (to < 0)
        return T->broke ? -1 : 0;
    if (a->npos > SMELT_AC_MAXARGS || a->nkw > SMELT_AC_MAXARGS)
        return tr_break(T, "a call with more than %d arguments under autocast", SMELT_AC_MAXARGS);
    *b = *a;
    b->pos = pos;
    b->kwv = kwv;
    for (int k = 0; k < a->npos + a->nkw; k++) {
        int32_t v = k < a->npos ? a->pos[k] : a->kwv[k - a->npos];
        if (ac_eligible(T, v) && (v = cast_to(T, v, to)) < 0)
            return -1;
        if (k < a->npos)
            pos[k] = v;
        else
            kwv[k - a->npos] = v;
    }
    *out = b;
    return 0;
}

static int32_t dispatch_cast(tracer *T, const op_entry *e, PyObject *fn, PyObject *name, const call_args *a, int inplace);

static int32_t dispatch(tracer *T, PyObject *idx, PyObject *fn, PyObject *name, const call_args *a0, int inplace)
{
    const op_entry *e = &table[PyLong_AsSsize_t(idx)];
    call_args b;
    int32_t bpos[SMELT_AC_MAXARGS], bkwv[SMELT_AC_MAXARGS];
    const call_args *a;
    if (ac_args(T, fn, name, a0, &b, bpos, bkwv, &a))
        return -1;
    int host_ok = T->ac_host_ok;
    T->ac_host_ok |= a != a0;   /* its arguments cast: a host call of it is what eager's autocast runs */
    int32_t r = dispatch_cast(T, e, fn, name, a, inplace);
    T->ac_host_ok = host_ok;
    return r;
}

/* dispatch with the arguments as autocast casts them. */
static int32_t dispatch_cast(tracer *T, const op_entry *e, PyObject *fn, PyObject *name, const call_args *a, int inplace)
{
    int32_t o = arg(a, -1, "out");
    if (!is_none(T, o))
        return out_call(T, e, fn, name, a, o);
    int32_t r = run_entry(T, e, fn, name, a);
    if (r < 0)
        return r;
    int ip = inplace || e->ip == IP_ALWAYS;
    if (!ip && e->ip != IP_NO && get_bool(T, arg(a, e->ip - 1, "inplace"), 0, &ip))
        return -1;
    int32_t self = arg(a, 0, "input");
    return ip ? (self < 0 ? tr_break(T, "in-place call without a tensor") : ops_inplace(T, self, r)) : r;
}

/* A torch op smelt has no handler for: a host call when fn is one of
 * torch's builtins (after the builtins builtins.c knows, such as torch's
 * dispatch queries); -2 otherwise. */
static int32_t host_call(tracer *T, PyObject *fn, const call_args *a)
{
    if (!ext_eligible(fn))
        return -2;
    int32_t o = arg(a, -1, "out");
    if (!is_none(T, o)) {   /* the call without out=, written into out */
        out_args s;
        if (T->vals[o].kind != V_TENSOR)
            return tr_break(T, "out= that is not a tensor");
        PyObject *nm = PyObject_GetAttrString(fn, "__name__");
        const char *bare = nm && PyUnicode_Check(nm) ? PyUnicode_AsUTF8(nm) : NULL;
        int rule = bare ? out_dtype_rule(bare) : 0;
        Py_XDECREF(nm);
        PyErr_Clear();
        if (strip_out(T, a, o, &s) || (rule == 1 && out_dtype_kw(T, &s, o)))
            return -1;
        int32_t r = bi_call(T, fn, &s.b);
        return write_out(T, o, r != -2 ? r : ext_call(T, fn, &s.b), rule == 2);
    }
    int32_t r = bi_call(T, fn, a);
    return r != -2 ? r : ext_call(T, fn, a);
}

/* The function torch's lazy "disable dynamo" wrapper fn wraps
 * (torch._disable_dynamo: importing torch._dynamo rebinds torch.manual_seed
 * to one), borrowed, or NULL. It behaves as the function it wraps. */
static PyObject *disable_wrapped(PyObject *fn)
{
    if (!PyFunction_Check(fn))
        return NULL;
    PyObject *file = ((PyCodeObject *)PyFunction_GET_CODE(fn))->co_filename;
    const char *s = file ? PyUnicode_AsUTF8(file) : NULL;
    size_t n = s ? strlen(s) : 0;
    if (!s || n < 17 || strcmp(s + n - 17, "torch/_compile.py"))
        return PyErr_Clear(), NULL;
    PyObject *d = ((PyFunctionObject *)fn)->func_dict;
    return d ? PyDict_GetItemString(d, "__wrapped__") : NULL;
}

int32_t ops_call_torch(tracer *T, PyObject *fn, const call_args *a)
{
    T->dyn_pend = 0;
    if (fn == getitem_fn && a->npos == 2 && !a->nkw && T->vals[a->pos[0]].kind == V_TENSOR)
        return ops_subscr(T, a->pos[0], a->pos[1]);   /* torch.Tensor.__getitem__(x, index): x[index] */
    int32_t fr = flex_mod_call(T, fn, a);
    if (fr != -2)
        return fr;
    PyObject *idx = PyDict_GetItemWithError(by_obj, fn);
    PyObject *w = idx ? NULL : disable_wrapped(fn);
    if (!idx && w)
        idx = PyDict_GetItemWithError(by_obj, w);
    if (!idx) {
        if (PyErr_Occurred())
            PyErr_Clear();
        return host_call(T, fn, a);
    }
    if (a->npos == 0 && a->nkw == 0)
        return tr_break(T, "torch call without arguments");
    return dispatch(T, idx, fn, NULL, a, 0);
}

/* x.name(...) as a host call of torch.Tensor.name when that is one of
 * torch's builtins (ext_eligible); -2 when it is not. */
static int32_t method_host_call(tracer *T, PyObject *name, const call_args *a)
{
    PyObject *fn = PyObject_GetAttr(tensor_type, name);
    int32_t r = fn && ext_eligible(fn) ? ext_call(T, fn, a) : -2;
    if (!fn)
        PyErr_Clear();
    Py_XDECREF(fn);
    return r;
}

/* x.op_(...): op's result written into x (ops_inplace: only tensors made
 * in the graph that nothing else aliases), for an op with a handler or a
 * host call. -2 when name is no such in-place form. */
static int32_t inplace_method(tracer *T, PyObject *name, const call_args *a)
{
    /* in-place methods that change the tensor's metadata (shape, strides,
     * storage), not its values. The view-making ones on a tensor object made
     * in the trace make that object the view of what it held (so its
     * storage is still shared as eager shares it); on a tensor passed in
     * (the caller would see its new strides) and for the others, a break */
    static const char *const viewing[] = { "t_", "transpose_", "swapaxes_", "swapdims_", "squeeze_", "unsqueeze_" };
    static const char *const metadata[] = { "as_strided_", "resize_", "resize_as_", "set_", "detach_",
                                            "share_memory_", "rename_", "refine_names_", "align_to_" };
    Py_ssize_t n = PyUnicode_GetLength(name);
    if (n < 2 || PyUnicode_ReadChar(name, n - 1) != '_' || PyUnicode_ReadChar(name, n - 2) == '_')
        return -2;
    for (size_t i = 0; i < sizeof metadata / sizeof metadata[0]; i++)
        if (PyUnicode_CompareWithASCIIString(name, metadata[i]) == 0)
            return tr_break(T, "tensor method %U changes the tensor's metadata in place", name);
    for (size_t i = 0; i < sizeof viewing / sizeof viewing[0]; i++) {
        if (PyUnicode_CompareWithASCIIString(name, viewing[i]))
            continue;
        int32_t self = a->npos > 0 ? a->pos[0] : -1;
        if (self < 0 || T->vals[self].kind != V_TENSOR || T->vals[self].src >= 0 || T->vals[self].frozen)
            return tr_break(T, "tensor method %U on a tensor passed in (its strides change)", name);
        PyObject *base = PyUnicode_Substring(name, 0, n - 1);
        PyObject *bi = base ? PyDict_GetItemWithError(by_name, base) : NULL;
        int32_t r = bi ? dispatch(T, bi, NULL, base, a, 0) : -1;
        Py_XDECREF(base);
        if (r < 0 || T->vals[r].kind != V_TENSOR)
            return r < 0 ? (PyErr_Occurred() || T->broke ? -1 : tr_break(T, "tensor method %U", name))
                         : tr_break(T, "tensor method %U of a non-tensor", name);
        T->vals[self].node = T->vals[r].node;   /* the same object, now that view */
        return self;
    }
    PyObject *base = PyUnicode_Substring(name, 0, n - 1);
    PyObject *bi = base ? PyDict_GetItemWithError(by_name, base) : NULL;
    int32_t r = bi ? dispatch(T, bi, NULL, base, a, 1) : !base || PyErr_Occurred() ? -1 : method_host_call(T, base, a);
    if (!bi && r >= 0)
        r = ops_inplace(T, a->pos[0], r);
    Py_XDECREF(base);
    return r;
}

/* x.name(...) (self in a->pos[0]); x.op_(...) is op written into x; other
 * methods of torch.Tensor that are torch builtins are host calls. */
int32_t ops_call_method(tracer *T, PyObject *name, const call_args *a)
{
    T->dyn_pend = 0;
    if (arg(a, -1, "out") >= 0)
        return tr_break(T, "tensor method %U with out= (eager raises)", name);
    if (a->npos == 2 && !a->nkw && PyUnicode_CompareWithASCIIString(name, "__getitem__") == 0 &&
        T->vals[a->pos[0]].kind == V_TENSOR)
        return ops_subscr(T, a->pos[0], a->pos[1]);   /* x.__getitem__(index): x[index] */
    PyObject *idx = PyDict_GetItemWithError(by_name, name);
    if (idx)
        return dispatch(T, idx, NULL, name, a, 0);
    int32_t r = PyErr_Occurred() ? -1 : inplace_method(T, name, a);
    if (r == -2)
        r = method_host_call(T, name, a);
    return r != -2 ? r : tr_break(T, "tensor method %U is not supported yet", name);
}

/* The caller's tensor object value v is, when v is a tensor passed in
 * (its TG_TENSOR guard's example), else NULL (borrowed). */
static PyObject *input_object(tracer *T, int32_t v)
{
    int32_t src = T->vals[v].src;
    for (int32_t i = 0; src >= 0 && i < T->r->nguards; i++)
        if (T->r->guards[i].kind == TG_TENSOR && T->r->guards[i].src == src)
            return T->r->guards[i].obj;
    return NULL;
}

/* x.requires_grad, x.is_leaf, x.grad_fn, x.grad. A compiled graph never
 * runs where autograd would record it (inputs that require grad under grad
 * mode run eagerly; grad mode turned on inside over such inputs breaks), so
 * a tensor the trace computes needs no grad, is a leaf and has no grad_fn
 * or grad. A tensor passed in has its requires_grad guarded; what else it
 * carries is only known when it needs no grad. */
static int32_t autograd_attr(tracer *T, int32_t self, const char *s)
{
    PyObject *t = input_object(T, self);
    int needs = 0;
    if (t) {
        PyObject *rg = PyObject_GetAttrString(t, "requires_grad");
        if (!rg)
            return -1;
        needs = rg == Py_True;
        Py_DECREF(rg);
        if (!strcmp(s, "grad") || (needs && strcmp(s, "requires_grad")))
            return tr_break(T, "tensor attribute %s of a tensor passed in", s);
    } else {
        T->grad_sensitive = "autograd attributes of a computed tensor";
    }
    if (!strcmp(s, "requires_grad"))
        return tv_obj(T, needs ? Py_True : Py_False, -1);
    if (!strcmp(s, "is_leaf"))
        return tv_obj(T, Py_True, -1);
    return tv_obj(T, Py_None, -1);
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
    /* every graph tensor is a dense, strided, non-quantized CPU tensor */
    static const char *const false_flags[] = { "is_nested", "is_sparse", "is_sparse_csr", "is_meta",
                                               "is_quantized", "is_mkldnn", "is_mps", "is_xpu", "is_xla", "is_ipu",
                                               "is_hpu", "is_mtia", "is_maia", "is_vulkan" };
    for (size_t i = 0; i < sizeof false_flags / sizeof false_flags[0]; i++)
        if (!strcmp(s, false_flags[i]))
            return tv_obj(T, Py_False, -1);
    if (!strcmp(s, "T") || !strcmp(s, "mT") || !strcmp(s, "H") || !strcmp(s, "mH")) {   /* (real: H is T) */
        int perm[SMELT_MAX_DIMS];
        if (s[0] == 'H' && n->ndim != 2)
            return tr_break(T, "H of a tensor that is not 2-d (eager raises)");
        for (int d = 0; d < n->ndim; d++)
            perm[d] = s[0] != 'm' ? n->ndim - 1 - d : d;
        if (s[0] == 'm') {
            if (n->ndim < 2)
                return tr_break(T, "%s of a < 2-d tensor", s);
            perm[n->ndim - 1] = n->ndim - 2;
            perm[n->ndim - 2] = n->ndim - 1;
        }
        return v_permute(T, self, perm);
    }
    if (!strcmp(s, "device"))   /* every graph tensor is on the graph's device */
        return tv_obj(T, T->device >= 0 ? T->device_obj : cpu_device, -1);
    if (!strcmp(s, "is_cpu"))
        return tv_obj(T, T->device >= 0 ? Py_False : Py_True, -1);
    if (!strcmp(s, "is_cuda"))
        return tv_obj(T, T->device >= 0 ? Py_True : Py_False, -1);
    if (!strcmp(s, "itemsize"))
        return int_value(T, (int64_t)smelt_dtype_size((smelt_dtype)n->dtype));
    if (!strcmp(s, "nbytes"))
        return int_value(T, (int64_t)smelt_dtype_size((smelt_dtype)n->dtype) * smelt_node_numel(n));
    if (!strcmp(s, "layout") && tr_strided())
        return tv_obj(T, tr_strided(), -1);
    if (!strcmp(s, "data"))   /* a new tensor object on the same memory */
        return alias_of(T, self);
    if (!strcmp(s, "requires_grad") || !strcmp(s, "grad") || !strcmp(s, "grad_fn") ||
        !strcmp(s, "is_leaf"))
        return autograd_attr(T, self, s);
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
    if (base == NB_MATRIX_MULTIPLY && T->ac_on && T->device < 0) {   /* a @ b under CPU autocast */
        if (ac_eligible(T, a) && (a = cast_to(T, a, T->ac_dtype)) < 0)
            return -1;
        if (ac_eligible(T, b) && (b = cast_to(T, b, T->ac_dtype)) < 0)
            return -1;
    }
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

/* x[index] with tensors or lists in the index (advanced indexing: a
 * gather): a host call of torch.Tensor.__getitem__. A boolean mask gives a
 * data-dependent shape: the meta run fails and the trace breaks. */
static int32_t index_host_call(tracer *T, int32_t x, int32_t index)
{
    call_args b = { .pos = (int32_t[]){ x, index }, .npos = 2 };
    int32_t r = ext_call(T, getitem_fn, &b);
    return r != -2 ? r : tr_break(T, "indexing of a non-tensor");
}

/* The flat position of the indexed dims [d0, d0 + m) of a tensor of sizes
 * xs for the m integer index tensors it[] (>= 1-d): each checked against
 * its dim (CHECKIDX, negatives from the end; clamp: first clamped into
 * [-n, n)), all broadcast to one shape B (nb dims, into B), flat = sum of
 * index_q times the sizes after it; *N the product of the indexed sizes.
 * An int64 tensor of shape B, -2 when the indices do not broadcast (eager
 * raises), -1 on error. */
static int32_t flat_index(tracer *T, const int64_t *xs, const int32_t *xe, int d0, const int32_t *it, int m, int clamp,
                          int64_t *B, int32_t *Be, int *nbp, int64_t *Np, int32_t *Nv)
{
    int nb = 0;
    for (int q = 0; q < m; q++) {   /* B: the indices broadcast */
        const smelt_node *in = node(T, it[q]);
        for (int i = 0; i < in->ndim; i++) {
            int bi = i + (nb > in->ndim ? nb - in->ndim : 0);
            if (in->ndim > nb) {
                memmove(B + (in->ndim - nb), B, sizeof(int64_t) * (size_t)nb);
                memmove(Be + (in->ndim - nb), Be, sizeof(int32_t) * (size_t)nb);
                for (int z = 0; z < in->ndim - nb; z++)
                    B[z] = 1, Be[z] = -1;
                nb = in->ndim;
                bi = i;
            }
            int64_t v = in->shape[i];
            if (B[bi] != v && B[bi] != 1 && v != 1)
                return -2;   /* eager raises */
            if (B[bi] == 1 && v != 1)
                Be[bi] = dyn_dim_ex(T, T->vals[it[q]].node, i);
            B[bi] = B[bi] == 1 ? v : B[bi];
        }
    }
    int64_t N = 1;
    int32_t flat = -1, nv = int_value(T, 1);
    for (int q = m - 1; q >= 0 && nv >= 0; q--) {   /* flat = sum of index_q * (the sizes after it) */
        int64_t size = xs[d0 + q], one[SMELT_MAX_DIMS];
        int32_t sizev = dyn_value(T, xe ? xe[d0 + q] : -1, size);
        const smelt_node *in = node(T, it[q]);
        for (int i = 0; i < nb; i++)
            one[i] = i < nb - in->ndim ? 1 : in->shape[i - (nb - in->ndim)];
        int32_t iq = expand_to_ex(T, v_reshape(T, it[q], one, nb), B, Be, nb);
        if (sizev < 0)
            return -1;
        if (clamp) {
            int32_t lo = tr_binop(T, NB_SUBTRACT, int_value(T, 0), sizev);
            int32_t hi = lo < 0 ? -1 : tr_binop(T, NB_SUBTRACT, sizev, int_value(T, 1));
            iq = hi < 0 ? -1 : op2(T, SMELT_OP_MINIMUM, op2(T, SMELT_OP_MAXIMUM, iq, lo), hi);
        }
        dyn_pend_bound(T, sizev);
        int32_t v = iq < 0 ? -1 : checked_index(T, iq, size, 1);
        if (v < 0)
            return -1;
        if (N != 1)
            v = op2(T, SMELT_OP_MUL, v, nv);
        flat = flat < 0 ? v : op2(T, SMELT_OP_ADD, flat, v);
        N *= size;
        nv = tr_binop(T, NB_MULTIPLY, nv, sizev);
    }
    if (nv < 0)
        return -1;
    *nbp = nb;
    *Np = N;
    *Nv = nv;
    return flat;
}

/* x[..., i0, i1, .., ...]: adjacent int64/int32 tensors (>= 1-d, broadcast
 * to one shape B) among full-range slices and at most one Ellipsis, x laid
 * out contiguously: the indexed dims flattened into one and read by a
 * GATHER at the flat position (each index checked, negatives from the
 * end; clamp: first clamped into [-n, n), as _unsafe_masked_index does);
 * the indexed dims replaced by B, eager's result then being contiguous.
 * -2 for any other index. */
static int32_t index_gather(tracer *T, int32_t x, const int32_t *it, int n, int clamp)
{
    int t0 = -1, m = 0, ell = -1;
    for (int i = 0; i < n; i++) {
        tv *k = &T->vals[it[i]];
        if (k->kind == V_TENSOR && is_index_tensor(T, it[i], 1) && node(T, it[i])->ndim >= 1) {
            if (t0 >= 0 && i != t0 + m)
                return -2;   /* not adjacent: eager puts B first */
            t0 = t0 < 0 ? i : t0;
            m++;
        } else if (k->kind == V_OBJ && k->obj == Py_Ellipsis && ell < 0) {
            ell = i;
        } else if (!(k->kind == V_SLICE && k->sl[0] < 0 && k->sl[1] < 0 && k->sl[2] < 0)) {
            return -2;   /* (a 0-d index is eager's integer index: a view) */
        }
    }
    const smelt_node *xn = node(T, x);
    int nd = xn->ndim;
    if (t0 < 0 || n - (ell >= 0) > nd)
        return -2;
    int d0 = ell >= 0 && ell < t0 ? nd - (n - t0) : t0;   /* the dims after the Ellipsis are the last ones */
    int64_t st[SMELT_MAX_DIMS], B[SMELT_MAX_DIMS], xs[SMELT_MAX_DIMS];
    int k = eager_strides(T, T->vals[x].node, st), nb = 0;
    if (k < 0)
        return -1;
    if (!k || !strides_contiguous(xn, st))
        return -2;
    memcpy(xs, xn->shape, sizeof xs);
    int32_t xe[SMELT_MAX_DIMS], Be[SMELT_MAX_DIMS], Nv, rse[SMELT_MAX_DIMS], she[SMELT_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        xe[d] = dyn_dim_ex(T, T->vals[x].node, d);
    int64_t N, nb1, rs[SMELT_MAX_DIMS], shape[SMELT_MAX_DIMS];
    int32_t flat = flat_index(T, xs, xe, d0, it + t0, m, clamp, B, Be, &nb, &N, &Nv);
    if (flat < 0)
        return flat;
    if (nd - m + nb > SMELT_MAX_DIMS)
        return -2;
    nb1 = smelt_node_numel(node(T, flat));
    int r = 0, nr = 0;
    for (int i = 0; i < d0; i++) {
        rse[nr] = she[r] = xe[i];
        rs[nr++] = shape[r++] = xs[i];
    }
    rse[nr] = ex_of(T, Nv);
    rs[nr++] = N;
    for (int i = 0; i < nb; i++) {
        she[r] = Be[i];
        shape[r++] = B[i];
    }
    for (int i = d0 + m; i < nd; i++) {
        rse[nr] = she[r] = xe[i];
        rs[nr++] = shape[r++] = xs[i];
    }
    dyn_pend_shape(T, rse, nr);
    int32_t xr = v_reshape(T, x, rs, nr);
    int32_t g = select_rows(T, xr, v_reshape(T, flat, &nb1, 1), d0, 0);
    if (g >= 0)
        dyn_pend_shape(T, she, r);
    return g < 0 ? -1 : fresh_contiguous(T, -1, v_reshape(T, g, shape, r));
}

/* _unsafe_masked_index(self, mask, indices, fill): self at the indices
 * (clamped into range first, as eager) where mask holds, fill elsewhere. */
static int32_t c_unsafe_masked_index(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "self"), mask = arg(a, 1, "mask"), il = arg(a, 2, "indices"), fill = arg(a, 3, "fill");
    (void)op;
    if (!is_tensor(T, x) || !is_tensor(T, mask) || node(T, mask)->dtype != SMELT_BOOL || il < 0 ||
        (T->vals[il].kind != V_LIST && T->vals[il].kind != V_TUPLE) || fill < 0 || T->vals[il].n > 16)
        return as_host_call(T, fn, a);
    int32_t items[16];
    int n = T->vals[il].n;
    memcpy(items, T->vals[il].items, sizeof(int32_t) * (size_t)n);
    int32_t r = index_gather(T, x, items, n, 1);
    if (r == -2)
        return as_host_call(T, fn, a);
    return r < 0 ? -1 : fresh_contiguous(T, -1, where3(T, mask, r, fill));
}

/* put(input, index, source, accumulate=False) (op 0), index_put(input,
 * indices, values, accumulate=False) (op 1) and
 * _unsafe_masked_index_put_accumulate(input, mask, indices, values) (op 2):
 * writes at the flat positions of the indexed leading dims (put: of the
 * whole tensor; negatives from the end, checked; the masked form clamps
 * its indices and writes 0 where mask is false), at most SHORT_NATIVE_MAX
 * of them, as index_write along dim 0 of input viewed as [N, rest]: sums
 * when accumulating, else the last write (as eager's CPU kernel). */
static int32_t put_call(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input"), il = arg(a, op == 2 ? 2 : 1, op ? "indices" : "index");
    int32_t v = arg(a, op == 2 ? 3 : 2, op ? "values" : "source"), mask = op == 2 ? arg(a, 1, "mask") : -1;
    int acc = op == 2, xdt;
    if (x < 0)
        x = arg(a, 0, "self");
    if (!is_tensor(T, x) || !is_tensor(T, v) || (op < 2 && get_bool(T, arg(a, 3, "accumulate"), 0, &acc)))
        return T->broke ? -1 : as_host_call(T, fn, a);
    const smelt_node *xn = node(T, x);
    int nd = xn->ndim, m = 1;
    int64_t st[SMELT_MAX_DIMS], xs[SMELT_MAX_DIMS], B[SMELT_MAX_DIMS], N, orig[SMELT_MAX_DIMS];
    int ond = nd;
    xdt = xn->dtype;
    memcpy(xs, xn->shape, sizeof xs);
    memcpy(orig, xn->shape, sizeof orig);
    int k = eager_strides(T, T->vals[x].node, st);
    if (k < 0)
        return -1;
    if (!k || !strides_contiguous(xn, st) || node(T, v)->dtype != xdt || (acc && (xdt == SMELT_BOOL || xdt == SMELT_F16 || xdt == SMELT_BF16)) ||
        (op == 2 && (!is_tensor(T, mask) || node(T, mask)->dtype != SMELT_BOOL)))
        return as_host_call(T, fn, a);
    int32_t items[SMELT_MAX_DIMS];
    if (op == 0) {   /* put: the tensor flattened */
        if (!is_index_tensor(T, il, 0))
            return as_host_call(T, fn, a);
        int64_t numel = smelt_node_numel(xn);
        items[0] = il;
        if ((x = v_reshape(T, x, &numel, 1)) < 0)
            return -1;
        xs[0] = numel;
        nd = 1;
    } else {
        if (il < 0 || (T->vals[il].kind != V_LIST && T->vals[il].kind != V_TUPLE) || (m = T->vals[il].n) < 1 || m > nd)
            return as_host_call(T, fn, a);
        for (int q = 0; q < m; q++)
            if (!is_index_tensor(T, (items[q] = T->vals[il].items[q]), 1) || node(T, items[q])->ndim < 1)
                return as_host_call(T, fn, a);
    }
    if (op == 0 && smelt_node_numel(node(T, items[0])) != smelt_node_numel(node(T, v)))
        return as_host_call(T, fn, a);   /* eager raises */
    int nb = 0;
    int32_t Be[SMELT_MAX_DIMS], Nv;
    int32_t flat = flat_index(T, xs, NULL, 0, items, m, op == 2, B, Be, &nb, &N, &Nv);
    if (flat < 0)
        return flat == -2 ? as_host_call(T, fn, a) : -1;
    int64_t K = smelt_node_numel(node(T, flat)), vs[SMELT_MAX_DIMS], rs[SMELT_MAX_DIMS];
    if (K > SHORT_NATIVE_MAX || nb + nd - m > SMELT_MAX_DIMS)
        return as_host_call(T, fn, a);
    int nv = 0, nr = 0;
    for (int i = 0; i < nb; i++)
        vs[nv++] = B[i];
    rs[nr++] = N;
    for (int i = m; i < nd; i++)
        vs[nv++] = rs[nr++] = xs[i];
    if (op == 0) {
        v = v_reshape(T, v, &K, 1);
    } else {   /* values broadcast to B + the remaining dims */
        const smelt_node *vn = node(T, v);
        if (vn->ndim > nv)
            return as_host_call(T, fn, a);
        for (int i = 0; i < vn->ndim; i++) {
            int64_t want = vs[nv - vn->ndim + i];
            if (vn->shape[i] != want && vn->shape[i] != 1)
                return as_host_call(T, fn, a);   /* eager raises */
        }
        int64_t one[SMELT_MAX_DIMS];
        for (int i = 0; i < nv; i++)
            one[i] = i < nv - vn->ndim ? 1 : vn->shape[i - (nv - vn->ndim)];
        v = expand_to(T, v_reshape(T, v, one, nv), vs, nv);
        if (op == 2)
            v = where3(T, mask, v, int_value(T, 0));
        int64_t kr[SMELT_MAX_DIMS];
        kr[0] = K;
        for (int i = m; i < nd; i++)
            kr[1 + i - m] = xs[i];
        v = v_reshape(T, v, kr, 1 + nd - m);
    }
    int32_t r = index_write(T, v_reshape(T, x, rs, nr), 0, v_reshape(T, flat, &K, 1), v, acc ? SC_SUM : SC_COPY, 1);
    return r < 0 ? -1 : fresh_contiguous(T, -1, cast_to(T, v_reshape(T, r, orig, ond), xdt));
}

/* x[index]: ints, slices, None and Ellipsis (a tuple of them); adjacent
 * integer tensors among full slices (index_gather); other tensors, lists
 * of ints and bools through index_host_call. */
/* A list of int constants (no bools; at most 256) used as an index: the
 * int64 tensor eager makes of it; -2 for any other list. */
static int32_t int_list_index(tracer *T, int32_t l)
{
    int32_t nodes[256];
    int n = T->vals[l].n;
    if (n < 1 || n > 256)
        return -2;
    for (int i = 0; i < n; i++) {
        int32_t v = T->vals[l].items[i];
        if (T->vals[v].kind != V_OBJ || !PyLong_CheckExact(T->vals[v].obj))
            return -2;
    }
    for (int i = 0; i < n; i++) {
        PyObject *o = tr_const(T, T->vals[l].items[i]);
        int32_t f = o ? full_of(T, o, SMELT_I64, (int64_t[]){ 1 }, 1) : -1;
        if (f < 0)
            return -1;
        nodes[i] = T->vals[f].node;
    }
    return n == 1 ? tv_tensor(T, nodes[0]) : cat_nodes(T, nodes, n, 0);
}

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
    int32_t conv[16];
    for (int i = 0; i < n && n <= 16; i++) {   /* a list of ints indexes as an int64 tensor */
        int32_t t = T->vals[it[i]].kind == V_LIST ? int_list_index(T, it[i]) : -2;
        if (t == -1)
            return -1;
        if (t >= 0) {
            if (it != conv) {
                memcpy(conv, it, sizeof(int32_t) * (size_t)n);
                it = conv;
            }
            conv[i] = t;
        }
    }
    for (int i = 0; i < n; i++) {
        tv *k = &T->vals[it[i]];
        if (k->kind == V_TENSOR && T->vals[x].kind == V_TENSOR) {
            int32_t r = index_gather(T, x, it, n, 0);
            if (r != -2)
                return r;
        }
        if (k->kind == V_TENSOR || k->kind == V_LIST || (k->kind == V_OBJ && PyBool_Check(k->obj)))
            return index_host_call(T, x, index);   /* x[True] adds a dim: not the int 1 */
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
        PyObject *so = k->kind == V_OBJ && PySlice_Check(k->obj) ? tr_const(T, it[i]) : NULL;
        if (k->kind == V_OBJ && PySlice_Check(k->obj) && !so)
            return -1;
        if (k->kind == V_SLICE || so) {   /* x[a:b:c], or a slice object */
            int64_t s[3] = { 0, INT64_MAX, 1 };
            int32_t sx[3] = { -1, -1, -1 };
            for (int j = 0; j < 3 && !so; j++)
                if (k->sl[j] >= 0 && !is_none(T, k->sl[j]) &&
                    (j == 2 ? tr_int(T, k->sl[j], &s[j]) : dyn_int_ex(T, k->sl[j], &s[j], &sx[j])))
                    return -1;
            PyObject *parts[3] = { so ? ((PySliceObject *)so)->start : NULL, so ? ((PySliceObject *)so)->stop : NULL,
                                   so ? ((PySliceObject *)so)->step : NULL };
            for (int j = 0; j < 3 && so; j++)
                if (parts[j] != Py_None) {
                    if (!PyLong_Check(parts[j]))
                        return tr_break(T, "a slice of %s", Py_TYPE(parts[j])->tp_name);
                    s[j] = PyLong_AsLongLong(parts[j]);
                    if (s[j] == -1 && PyErr_Occurred())
                        return -1;
                }
            if (s[2] <= 0)
                return tr_break(T, "slice step must be positive");
            Py_ssize_t st = (Py_ssize_t)(s[0] < -PY_SSIZE_T_MAX ? -PY_SSIZE_T_MAX : s[0]);
            Py_ssize_t en = (Py_ssize_t)(s[1] > PY_SSIZE_T_MAX ? PY_SSIZE_T_MAX : s[1]);
            PySlice_AdjustIndices(node(T, x)->shape[d], &st, &en, (Py_ssize_t)s[2]);
            if (en < st)
                en = st;
            if (dyn_pend_slice_of(T, T->vals[x].node, d, sx[0], s[0], !so ? k->sl[0] >= 0 && !is_none(T, k->sl[0])
                                                                           : parts[0] != Py_None,
                                  sx[1], s[1], !so ? k->sl[1] >= 0 && !is_none(T, k->sl[1]) : parts[1] != Py_None))
                return -1;
            x = v_slice(T, x, d++, st, en, s[2]);
            continue;
        }
        int64_t iv;
        int32_t ix;
        if (dyn_int_ex(T, it[i], &iv, &ix))
            return -1;
        int64_t size = node(T, x)->shape[d];
        if (iv < -size || iv >= size)
            return tr_break(T, "index %lld out of range for size %lld", (long long)iv, (long long)size);
        if (dyn_pend_index(T, T->vals[x].node, d, ix, iv))
            return -1;
        if (iv < 0)
            iv += size;
        x = v_slice(T, x, d, iv, iv + 1, 1);
        x = x < 0 ? -1 : v_axis(T, SMELT_OP_SQUEEZE, x, d);
    }
    return x;
}


/* x with region [st, en) along each dim replaced by val (region-shaped):
 * slices of x around the region joined by CAT, dim by dim. */
static int32_t splice(tracer *T, int32_t x, int32_t val, const int64_t *st, const int64_t *en, int d)
{
    if (x < 0)   /* (a slice that failed: over a symbolic size, say) */
        return -1;
    int nd = node(T, x)->ndim;
    while (d < nd && st[d] == 0 && en[d] == node(T, x)->shape[d])
        d++;
    if (d == nd)
        return val;
    int64_t size = node(T, x)->shape[d];
    int32_t mid = splice(T, v_slice(T, x, d, st[d], en[d], 1), val, st, en, d + 1), parts[3];
    int n = 0;
    if (mid < 0)
        return -1;
    if (st[d] > 0 && (parts[n++] = v_slice(T, x, d, 0, st[d], 1)) < 0)
        return -1;
    parts[n++] = mid;
    if (en[d] < size && (parts[n++] = v_slice(T, x, d, en[d], size, 1)) < 0)
        return -1;
    for (int i = 0; i < n; i++)
        parts[i] = T->vals[parts[i]].node;
    return cat_nodes(T, parts, n, d);
}

/* slice_scatter(input, src, dim=0, start=None, end=None, step=1) (op 0)
 * and select_scatter(input, src, dim, index) (op 1): input with the slice
 * (a step of 1) or the index along dim replaced by src (its shape, input's
 * dtype), joined by CAT; a contiguous input (eager clones it, keeping its
 * layout), else a host call. */
static int32_t scatter_region(tracer *T, PyObject *fn, const call_args *a, int sel)
{
    int32_t x = arg(a, 0, "input"), src = arg(a, 1, "src");
    int64_t d = 0, st[SMELT_MAX_DIMS], en[SMELT_MAX_DIMS], xs[SMELT_MAX_DIMS];
    if (!is_tensor(T, x) || !is_tensor(T, src) || node(T, x)->ndim < 1 || node(T, src)->dtype != node(T, x)->dtype)
        return as_host_call(T, fn, a);
    const smelt_node *xn = node(T, x);
    int nd = xn->ndim, dim;
    if (get_int(T, arg(a, 2, "dim"), 0, &d))
        return -1;
    if (d < -nd || d >= nd)
        return as_host_call(T, fn, a);
    dim = (int)(d < 0 ? d + nd : d);
    for (int i = 0; i < nd; i++) {
        st[i] = 0;
        en[i] = xs[i] = xn->shape[i];
    }
    int64_t size = xn->shape[dim];
    if (sel) {
        int64_t ix;
        if (tr_int(T, arg(a, 3, "index"), &ix))
            return -1;
        if (ix < -size || ix >= size)
            return as_host_call(T, fn, a);   /* eager raises */
        st[dim] = ix < 0 ? ix + size : ix;
        en[dim] = st[dim] + 1;
    } else {
        int64_t s0, e0, step;
        if (get_int(T, arg(a, 3, "start"), 0, &s0) || get_int(T, arg(a, 4, "end"), INT64_MAX, &e0) ||
            get_int(T, arg(a, 5, "step"), 1, &step))
            return -1;
        if (step != 1)
            return as_host_call(T, fn, a);
        Py_ssize_t ps = (Py_ssize_t)(s0 < -PY_SSIZE_T_MAX ? -PY_SSIZE_T_MAX : s0);
        Py_ssize_t pe = (Py_ssize_t)(e0 > PY_SSIZE_T_MAX ? PY_SSIZE_T_MAX : e0);
        PySlice_AdjustIndices(size, &ps, &pe, 1);
        st[dim] = ps;
        en[dim] = pe < ps ? ps : pe;
        /* bounds given as numbers over a symbolic size: for this size only */
        if ((s0 != 0 || e0 != INT64_MAX) && dyn_guard(T, Py_EQ, dyn_dim_ex(T, T->vals[x].node, dim), size))
            return -1;
    }
    xs[dim] = en[dim] - st[dim];
    const smelt_node *sn = node(T, src);
    int want = sel ? nd - 1 : nd;
    for (int i = 0, j = 0; i < nd; i++) {
        if (sel && i == dim)
            continue;
        if (sn->ndim != want || sn->shape[j++] != xs[i])
            return as_host_call(T, fn, a);   /* eager raises */
    }
    if (ops_eager_contiguous(T, T->vals[x].node) != 1)   /* (eager clones it keeping its layout) */
        return T->broke ? -1 : as_host_call(T, fn, a);
    int32_t v = sel ? v_reshape(T, src, xs, nd) : src, r = v < 0 ? -1 : splice(T, x, v, st, en, 0);
    if (r >= 0 && r == v) {   /* src is the whole of it: eager's result is still a new tensor, and input's
                                 gradient zeros (not None): a where that always takes src */
        smelt_node t = { .op = SMELT_OP_FULL, .dtype = SMELT_BOOL, .ndim = 0 };   /* a 0-d True */
        t.a.scalar.f = 1.0;
        t.a.scalar.i = 1;
        int32_t yes = mk(T, &t);
        r = yes < 0 ? -1 : where3(T, yes, v, x);
    }
    return fresh_contiguous(T, x, r);
}

/* An int64 ARANGE 0..n-1 shaped as an nd-dim tensor along dim (1
 * elsewhere). */
static int32_t iota_along(tracer *T, int64_t n, int dim, int nd)
{
    smelt_node ar = { .op = SMELT_OP_ARANGE, .dtype = SMELT_I64, .ndim = 1, .shape = { n } };
    ar.a.arange.istart = 0;
    ar.a.arange.istep = 1;
    ar.a.arange.fstart = 0;
    ar.a.arange.fstep = 1;
    int64_t shape[SMELT_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        shape[i] = i == dim ? n : 1;
    int32_t r = mk(T, &ar);
    return r < 0 ? -1 : v_reshape(T, r, shape, nd);
}

/* diagonal_scatter(input, src, offset=0, dim1=0, dim2=1): input with the
 * diagonal replaced by src (input's dtype, the diagonal's shape): a where
 * over the positions with j - i == offset, src padded along its diagonal
 * axis to the row (or column) count and laid out as input's dims. A
 * contiguous input (eager clones it, keeping its layout), else a host call. */
static int32_t c_diagonal_scatter(tracer *T, PyObject *fn, const call_args *a, int op)
{
    int32_t x = arg(a, 0, "input"), src = arg(a, 1, "src");
    int64_t off = 0, d1 = 0, d2 = 1;
    (void)op;
    if (!is_tensor(T, x) || !is_tensor(T, src) || node(T, src)->dtype != node(T, x)->dtype ||
        get_int(T, arg(a, 2, "offset"), 0, &off) || get_int(T, arg(a, 3, "dim1"), 0, &d1) ||
        get_int(T, arg(a, 4, "dim2"), 1, &d2))
        return T->broke ? -1 : as_host_call(T, fn, a);
    const smelt_node *xn = node(T, x);
    int nd = xn->ndim;
    if (nd < 2 || d1 < -nd || d1 >= nd || d2 < -nd || d2 >= nd)
        return as_host_call(T, fn, a);   /* eager raises */
    int i1 = (int)(d1 < 0 ? d1 + nd : d1), i2 = (int)(d2 < 0 ? d2 + nd : d2);
    if (i1 == i2)
        return as_host_call(T, fn, a);
    int64_t n1 = xn->shape[i1], n2 = xn->shape[i2];
    int64_t len = off >= 0 ? (n1 < n2 - off ? n1 : n2 - off) : (n1 + off < n2 ? n1 + off : n2);
    if (len < 0)
        len = 0;
    const smelt_node *sn = node(T, src);
    if (sn->ndim != nd - 1 || sn->shape[nd - 2] != len)
        return as_host_call(T, fn, a);   /* eager raises */
    int perm[SMELT_MAX_DIMS], nb = 0;
    for (int i = 0; i < nd; i++)
        if (i != i1 && i != i2 && sn->shape[nb++] != xn->shape[i])
            return as_host_call(T, fn, a);
    if (ops_eager_contiguous(T, T->vals[x].node) != 1)   /* (eager clones it keeping its layout) */
        return T->broke ? -1 : as_host_call(T, fn, a);
    /* src[..., k] sits at (i, j) = (k, k + off) (off >= 0: k is the row)
     * or (k - off, k): pad k's axis to that dim's size */
    int kdim = off >= 0 ? i1 : i2, odim = off >= 0 ? i2 : i1;
    int64_t kn = xn->shape[kdim];
    int32_t s = src;
    if (kn > len && (s = pad_dim(T, s, nd - 2, 0, kn - len, 0, Py_False)) < 0)
        return -1;
    if ((s = v_axis(T, SMELT_OP_UNSQUEEZE, s, nd - 1)) < 0)
        return -1;
    for (int i = 0, b = 0; i < nd; i++)
        perm[i] = i == kdim ? nd - 2 : i == odim ? nd - 1 : b++;
    if ((s = v_permute(T, s, perm)) < 0)
        return -1;
    int32_t ii = iota_along(T, n1, i1, nd), jj = iota_along(T, n2, i2, nd);
    int32_t on = op2(T, SMELT_OP_EQ, op2(T, SMELT_OP_SUB, jj, ii), int_value(T, off));
    return fresh_contiguous(T, x, where3(T, on, s, x));
}

/* The region index selects: [st, en) per dim of an nd-dim tensor x, and
 * which dims an int index removes from x[index]'s shape. 0, 2 (a slice
 * with a step: no region), or -1 (a break). */
static int index_region(tracer *T, int32_t x, int32_t index, int64_t *st, int64_t *en, uint8_t *dropped)
{
    int32_t *it = &index, n = 1;
    const smelt_node *xn = node(T, x);
    if (T->vals[index].kind == V_TUPLE) {
        it = T->vals[index].items;
        n = T->vals[index].n;
    }
    for (int d = 0; d < xn->ndim; d++) {
        st[d] = 0;
        en[d] = xn->shape[d];
        dropped[d] = 0;
    }
    int d = 0, seen_ell = 0;
    for (int i = 0; i < n; i++) {
        tv *k = &T->vals[it[i]];
        if (k->kind == V_OBJ && k->obj == Py_Ellipsis && !seen_ell) {
            seen_ell = 1;
            d = xn->ndim - (n - 1 - i);
            continue;
        }
        if (d >= xn->ndim || k->kind == V_TENSOR || (k->kind == V_OBJ && (k->obj == Py_None || PyBool_Check(k->obj))))
            return tr_break(T, "item assignment with this index is not supported");
        if (k->kind == V_SLICE) {
            PyObject *s = tr_pyobj(T, it[i]);
            Py_ssize_t a, b, step;
            if (!s || PySlice_Unpack(s, &a, &b, &step) < 0) {
                Py_XDECREF(s);
                return PyErr_Occurred() ? (PyErr_Clear(), tr_break(T, "bad slice")) : -1;
            }
            Py_DECREF(s);
            if (step != 1)
                return 2;   /* not a region: ops_setitem assigns through the view */
            PySlice_AdjustIndices(xn->shape[d], &a, &b, step);
            st[d] = a;
            en[d] = b > a ? b : a;
            d++;
            continue;
        }
        int64_t iv;
        if (tr_int(T, it[i], &iv))
            return -1;
        if (iv < -xn->shape[d] || iv >= xn->shape[d])
            return tr_break(T, "index %lld out of range", (long long)iv);
        st[d] = iv < 0 ? iv + xn->shape[d] : iv;
        en[d] = st[d] + 1;
        dropped[d++] = 1;
    }
    return 0;
}

/* Whether slice value v is the full slice `:`. */
static int full_slice(tracer *T, int32_t v)
{
    tv *k = &T->vals[v];
    return k->kind == V_SLICE && is_none(T, k->sl[0]) && is_none(T, k->sl[1]) && is_none(T, k->sl[2]);
}

/* Index item v as an index_put index: a tensor of integers or bools, or
 * a list of them made one (h_tensor); -1 after a break otherwise. */
static int32_t put_index(tracer *T, int32_t v)
{
    if (T->vals[v].kind == V_LIST) {
        call_args b = { .pos = &v, .npos = 1 };
        v = h_tensor(T, &b, 0);
    }
    if (v < 0 || T->vals[v].kind != V_TENSOR)
        return v < 0 ? -1 : tr_break(T, "item assignment with this index is not supported");
    smelt_dtype dt = (smelt_dtype)node(T, v)->dtype;
    if (dt != SMELT_I64 && dt != SMELT_I32 && dt != SMELT_BOOL)
        return tr_break(T, "item assignment with a %s index (eager raises or warns)", smelt_dtype_name(dt));
    return v;
}

/* x[index] = ... with tensors or lists in index (advanced indexing) as the
 * indices tuple of torch.index_put: the index tensors in order, full
 * slices and Ellipsis after the last of them dropped (index_put leaves
 * the remaining dims whole). -2 when index holds no tensor or list; a
 * break for the forms this does not express (ints, partial or leading
 * slices, None, bools beside tensors). */
static int32_t put_indices(tracer *T, int32_t x, int32_t index)
{
    int32_t *it = &index, n = 1, items[SMELT_MAX_DIMS];
    if (T->vals[index].kind == V_TUPLE) {
        it = T->vals[index].items;
        n = T->vals[index].n;
    }
    int last = -1, covered = 0, k = 0;
    for (int i = 0; i < n; i++)
        if (T->vals[it[i]].kind == V_TENSOR || T->vals[it[i]].kind == V_LIST)
            last = i;
    if (last < 0)
        return -2;
    for (int i = 0; i < n; i++) {
        tv *v = &T->vals[it[i]];
        if (i > last && (full_slice(T, it[i]) || (v->kind == V_OBJ && v->obj == Py_Ellipsis)))
            continue;
        if (v->kind != V_TENSOR && v->kind != V_LIST)
            return tr_break(T, "item assignment mixing tensor indices with this index is not supported");
        int32_t r = k < SMELT_MAX_DIMS ? put_index(T, it[i]) : tr_break(T, "too many indices");
        if (r < 0)
            return -1;
        covered += node(T, r)->dtype == SMELT_BOOL ? node(T, r)->ndim : 1;
        items[k++] = r;
    }
    if (covered > node(T, x)->ndim)
        return tr_break(T, "too many indices for a %d-d tensor (eager raises)", node(T, x)->ndim);
    return tv_tuple(T, items, k);
}

/* x[index] = value with advanced indexing: torch.index_put(x, indices,
 * value) as a host call (a number as a 0-d tensor of x's dtype), x
 * rebound to its result. */
static int32_t setitem_put(tracer *T, int32_t x, int32_t indices, int32_t value, int m)
{
    int dt = node(T, x)->dtype;
    int32_t v;
    if (T->vals[value].kind == V_TENSOR) {
        v = value;   /* of another dtype: index_put raises, as eager */
    } else {
        PyObject *o = tr_const(T, value);
        if (o && !PyLong_Check(o) && !PyFloat_Check(o))
            return tr_break(T, "item assignment of a %s", Py_TYPE(o)->tp_name);
        v = o ? full_of(T, o, dt, (int64_t[]){ 0 }, 0) : -1;
    }
    if (v < 0 || !index_put_fn)
        return v < 0 ? -1 : tr_break(T, "item assignment without torch.index_put");
    call_args b = { .pos = (int32_t[]){ x, indices, v }, .npos = 3 };
    int32_t r = keep_layout(T, x, ext_call(T, index_put_fn, &b));
    if (r < 0)
        return r == -2 ? tr_break(T, "torch.index_put is not a host call") : -1;
    return settle(T, x, r, m);
}

/* Value (a tensor or a number) broadcast to the shape of tensor value v and
 * cast to its dtype, as item assignment writes it. */
static int32_t assigned_value(tracer *T, int32_t v, int32_t value)
{
    const smelt_node *vn = node(T, v);
    int64_t shape[SMELT_MAX_DIMS];
    int nd = vn->ndim;
    smelt_dtype dt = (smelt_dtype)vn->dtype;
    memcpy(shape, vn->shape, sizeof(int64_t) * (size_t)nd);
    if (T->vals[value].kind == V_TENSOR) {
        smelt_node p = { .op = SMELT_OP_EXPAND, .nsrc = 1, .src = { T->vals[value].node }, .ndim = (uint8_t)nd };
        memcpy(p.shape, shape, sizeof(int64_t) * (size_t)nd);
        return cast_to(T, mk(T, &p), dt);
    }
    PyObject *o = tr_const(T, value);
    if (o && !PyLong_Check(o) && !PyFloat_Check(o))
        return tr_break(T, "item assignment of a %s", Py_TYPE(o)->tp_name);
    return o ? full_of(T, o, dt, shape, nd) : -1;
}

/* x[index] = value for a basic index that selects no region (slices with
 * steps): the view x[index] takes the value, through view_update. */
static int32_t setitem_view(tracer *T, int32_t x, int32_t index, int32_t value)
{
    int32_t v = ops_subscr(T, x, index);
    if (v < 0 || T->vals[v].kind != V_TENSOR)
        return v < 0 ? -1 : tr_break(T, "item assignment through a non-tensor");
    if (!smelt_node_numel(node(T, v)))
        return x;   /* an empty selection: nothing changes */
    int32_t r = assigned_value(T, v, value);
    return r < 0 || view_update(T, v, r) < 0 ? -1 : x;
}

/* x[index] = value on a tensor made in the graph (ints, slices with step
 * 1, Ellipsis): value broadcast to the region and cast to x's dtype, x
 * rebound to the spliced result; with tensors or lists in index, a host
 * call of torch.index_put (setitem_put). */
int32_t ops_setitem(tracer *T, int32_t x, int32_t index, int32_t value)
{
    int64_t st[SMELT_MAX_DIMS], en[SMELT_MAX_DIMS], sub[SMELT_MAX_DIMS], reg[SMELT_MAX_DIMS];
    uint8_t dropped[SMELT_MAX_DIMS];
    int m = mutable_value(T, x);
    if (m <= 0)
        return -1;
    int32_t pi = put_indices(T, x, index);
    if (pi != -2)
        return pi < 0 ? -1 : setitem_put(T, x, pi, value, m);
    int rg = index_region(T, x, index, st, en, dropped);
    if (rg)
        return rg < 0 ? -1 : setitem_view(T, x, index, value);
    const smelt_node *xn = node(T, x);
    int nd = xn->ndim, ns = 0;
    smelt_dtype dt = (smelt_dtype)xn->dtype;
    for (int d = 0; d < nd; d++) {
        reg[d] = en[d] - st[d];
        if (!dropped[d])
            sub[ns++] = reg[d];
        if (!reg[d])
            return x;   /* an empty region: nothing changes */
    }
    int32_t v;
    if (T->vals[value].kind == V_TENSOR) {
        smelt_node p = { .op = SMELT_OP_EXPAND, .nsrc = 1, .src = { T->vals[value].node }, .ndim = (uint8_t)ns };
        memcpy(p.shape, sub, sizeof(int64_t) * (size_t)ns);
        v = cast_to(T, mk(T, &p), dt);
        v = v < 0 ? -1 : v_reshape(T, v, reg, nd);
    } else {
        PyObject *o = tr_const(T, value);
        if (o && !PyLong_Check(o) && !PyFloat_Check(o))
            return tr_break(T, "item assignment of a %s", Py_TYPE(o)->tp_name);
        v = o ? full_of(T, o, dt, reg, nd) : -1;
    }
    int32_t r = v < 0 ? -1 : keep_layout(T, x, splice(T, x, v, st, en, 0));
    if (r < 0)
        return -1;
    return settle(T, x, r, m);
}
