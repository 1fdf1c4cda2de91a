/* shapes.c — the results of common host calls from torch's own shape
 * rules, without running the op on meta tensors.
 *
 * The first Python-implemented meta kernel a process runs makes torch
 * import its Python meta registrations (0.4-2.4 s). The ops here (conv,
 * pooling, upsampling, embedding, cumsum, topk, sort, gather/scatter,
 * einsum, advanced indexing, ...) are the ones CNNs and transformers call
 * most. A handler binds the call's argument template (tensors are Slot(k)
 * objects standing for srcs[k]) to the op's parameters, checks every
 * condition under which torch would raise and computes the results.
 * Anything it does not know, and any argument torch would reject, gives 0:
 * the caller then runs the meta call, which raises torch's own message.
 */
#include "tstate.h"

#include "hostcall.h"

#include <math.h>
#include <string.h>

/* ---------- dtype sets, limits, result types ---------- */

#define DT(x) (1u << SMELT_##x)
#define M_FLOAT (DT(F16) | DT(BF16) | DT(F32) | DT(F64))
#define M_INT (DT(U8) | DT(I8) | DT(I16) | DT(I32) | DT(I64))
#define M_NUM (M_FLOAT | M_INT)
#define M_ALL (M_NUM | DT(BOOL))

/* Integers read from arguments (sizes, strides, paddings, indices) lie
 * within +-SH_BIG, or the call goes to meta: no arithmetic here overflows. */
#define SH_BIG ((int64_t)1 << 40)

#define SH_MAXP 8   /* parameters of an op */

/* Python type of a call's result: torch.Tensor, tuple, or a
 * torch.return_types named tuple. */
enum { RT_TENSOR, RT_TUPLE, RT_TOPK, RT_SORT, RT_N };

/* One call being inferred. */
typedef struct sh_call {
    PyObject *p[SH_MAXP];            /* argument of each parameter, borrowed; NULL: not given */
    PyObject *args;                  /* the positional arguments */
    int nsrc;
    const smelt_node *const *srcs;   /* Slot(k) stands for srcs[k] */
    uint32_t dts;                    /* dtypes (bit per smelt_dtype) the op takes for its data */
    tracer_call_meta *m;
    sh_args *sa;                     /* what conv, pooling and unfold handlers read (never NULL) */
} sh_call;

/* A handler: 1 with c->m filled, 0 when it does not know the form or torch
 * would reject the arguments. Never leaves a Python error set. */
typedef int (*sh_fn)(sh_call *c, int arg);


/* ---------- reading arguments ---------- */

/* o, or NULL when o is None (an optional argument left out). */
static PyObject *given(PyObject *o)
{
    return o == Py_None ? NULL : o;
}

/* The number k of Slot o (standing for srcs[k]); -1 when o is not a Slot
 * of this call. */
static int sh_slot(const sh_call *c, PyObject *o)
{
    int k = tracer_slot_index(o);
    return k < c->nsrc ? k : -1;
}

/* The node Slot o stands for; NULL when o is not a Slot of this call. */
static const smelt_node *sh_src(const sh_call *c, PyObject *o)
{
    int k = sh_slot(c, o);
    return k >= 0 ? c->srcs[k] : NULL;
}

/* Whether node x has one of the op's dtypes. */
static int dt_ok(const sh_call *c, const smelt_node *x)
{
    return x && (c->dts >> x->dtype & 1u);
}

/* Python int o (not a bool) within +-SH_BIG into *v: 1, else 0. */
static int sh_int(PyObject *o, int64_t *v)
{
    if (!o || !PyLong_Check(o) || PyBool_Check(o))
        return 0;
    int ovf;
    long long x = PyLong_AsLongLongAndOverflow(o, &ovf);
    if (ovf || (x == -1 && PyErr_Occurred()) || x < -SH_BIG || x > SH_BIG) {
        PyErr_Clear();
        return 0;
    }
    *v = x;
    return 1;
}

/* sh_int, with def when o was not given. */
static int sh_int_or(PyObject *o, int64_t def, int64_t *v)
{
    if (!o) {
        *v = def;
        return 1;
    }
    return sh_int(o, v);
}

/* Python bool o into *v (def when not given): 1, else 0. */
static int sh_bool(PyObject *o, int def, int *v)
{
    *v = o ? o == Py_True : def;
    return !o || PyBool_Check(o);
}

/* The ints of list or tuple o into v[0..max): their count, or -1 when o
 * is no such sequence. */
static int sh_seq(PyObject *o, int64_t *v, int max)
{
    if (!o || (!PyList_Check(o) && !PyTuple_Check(o)) || PySequence_Fast_GET_SIZE(o) > max)
        return -1;
    int n = (int)PySequence_Fast_GET_SIZE(o);
    for (int i = 0; i < n; i++)
        if (!sh_int(PySequence_Fast_GET_ITEM(o, i), &v[i]))
            return -1;
    return n;
}

/* An int-list parameter of k values: an int or a sequence of one stand
 * for k copies (the latter only when one is set), a sequence of k for
 * itself; def when not given. 1, or 0 for any other form. */
static int sh_ints(PyObject *o, int64_t def, int one, int64_t *v, int k)
{
    int64_t x = def;
    if (o && !sh_int(o, &x)) {
        int n = sh_seq(o, v, k);
        if (n != 1 || !one)
            return n == k;
        x = v[0];
    }
    for (int i = 0; i < k; i++)
        v[i] = x;
    return 1;
}

/* Dimension argument o (def when not given) for a tensor of ndim dims,
 * wrapped to 0..ndim-1 (a 0-d tensor takes 0 and -1): 1, else 0. */
static int sh_dim_or(PyObject *o, int64_t def, int ndim, int *d)
{
    int64_t v;
    int n = ndim > 0 ? ndim : 1;
    if (!sh_int_or(o, def, &v) || v < -n || v >= n)
        return 0;
    *d = (int)(v < 0 ? v + n : v);
    return 1;
}

/* sh_dim_or for a dimension that must be given. */
static int sh_dim(PyObject *o, int ndim, int *d)
{
    return o && sh_dim_or(o, 0, ndim, d);
}

/* Whether o is a Python number (bool, int or float): a Scalar argument. */
static int sh_scalar(PyObject *o)
{
    return o && (PyLong_Check(o) || PyFloat_Check(o));
}

/* ---------- results ---------- */

/* Appends a result of dtype dt and shape shape[0..ndim) (not a view of an
 * input). 1, or 0 when smelt cannot hold it. */
static int sh_out(sh_call *c, int dt, int ndim, const int64_t *shape)
{
    tracer_call_meta *m = c->m;
    if (ndim < 0 || ndim > SMELT_MAX_DIMS || m->nout >= SMELT_MAX_SRC)
        return 0;
    m->dtypes[m->nout] = (uint8_t)dt;
    m->ndims[m->nout] = ndim;
    for (int d = 0; d < ndim; d++)
        m->shapes[m->nout][d] = shape[d];
    m->is_view[m->nout++] = 0;
    return 1;
}

/* A result shaped like node x, of dtype dt. */
static int sh_like(sh_call *c, const smelt_node *x, int dt)
{
    return sh_out(c, dt, x->ndim, x->shape);
}

/* ---------- convolution ---------- */

/* Output size of one spatial dim of a convolution (transposed when tr),
 * or -1 where torch refuses: input and kernel sizes, stride, dilation >= 1,
 * padding >= 0, the dilated kernel inside the padded input, a positive
 * output. */
static int64_t conv_size(int tr, int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int64_t op)
{
    if (in < 1 || k < 1 || s < 1 || d < 1 || p < 0 || op < 0)
        return -1;
    int64_t out = tr ? (in - 1) * s - 2 * p + d * (k - 1) + op + 1
                     : in + 2 * p < d * (k - 1) + 1 ? -1 : (in + 2 * p - d * (k - 1) - 1) / s + 1;
    return out >= 1 ? out : -1;
}

/* The padding argument of a convolution into p[0..k): ints, or the
 * strings 'valid' (0) and 'same' (*same set; stride must then be 1).
 * 1, or 0. */
static int conv_padding(PyObject *o, int tr, int64_t *p, int k, int *same)
{
    *same = 0;
    if (!o || !PyUnicode_Check(o))
        return sh_ints(o, 0, 1, p, k);
    if (tr)
        return 0;
    *same = PyUnicode_CompareWithASCIIString(o, "same") == 0;
    for (int i = 0; i < k; i++)
        p[i] = 0;
    return *same || PyUnicode_CompareWithASCIIString(o, "valid") == 0;
}

/* Channel checks of torch's check_shape_forward: groups >= 1 dividing the
 * weight's first dim, input channels matching, bias 1-d with one value per
 * output channel, every weight dim and the input channels non-zero. */
static int conv_channels(int tr, const smelt_node *x, const smelt_node *w, const smelt_node *b, int64_t g,
                         int k, int64_t *cout)
{
    int64_t cin = x->shape[x->ndim - k - 1];
    *cout = tr ? w->shape[1] * g : w->shape[0];
    if (g < 1 || w->shape[0] < g || w->shape[0] % g || cin < 1 || smelt_node_numel(w) == 0)
        return 0;
    if (cin != (tr ? w->shape[0] : w->shape[1] * g))
        return 0;
    return !b || (b->ndim == 1 && b->shape[0] == *cout);
}

/* Records a convolution's arguments in c->sa: k spatial dims, stride s,
 * padding p (or 'same': dil*(kernel-1) in all, the odd one after, as
 * torch pads), dilation d, groups g. */
static void conv_args(sh_call *c, int k, int tr, int same, const int64_t *s, const int64_t *p, const int64_t *d,
                      int64_t g)
{
    const smelt_node *w = sh_src(c, c->p[1]);
    sh_args *sa = c->sa;
    sa->kind = SK_CONV;
    sa->nsp = (uint8_t)k;
    sa->transposed = (uint8_t)tr;
    sa->x = (int8_t)sh_slot(c, c->p[0]);
    sa->w = (int8_t)sh_slot(c, c->p[1]);
    sa->b = (int8_t)sh_slot(c, given(c->p[2]));
    sa->groups = g;
    for (int i = 0; i < k; i++) {
        int64_t total = d[i] * (w->shape[2 + i] - 1);
        sa->kernel[i] = w->shape[2 + i];
        sa->stride[i] = s[i];
        sa->dil[i] = d[i];
        sa->pad_lo[i] = same ? total / 2 : p[i];
        sa->pad_hi[i] = same ? total - total / 2 : p[i];
    }
}

/* torch.conv{1,2,3}d (arg k) and torch.conv_transpose{1,2,3}d (arg 10 + k):
 * batched or unbatched input; stride, padding (ints or 'valid'/'same'),
 * dilation, groups, output_padding (smaller than the stride everywhere or
 * than the dilation everywhere), optional bias, one dtype for all. */
static int sh_conv(sh_call *c, int arg)
{
    int k = arg % 10, tr = arg >= 10, same;
    const smelt_node *x = sh_src(c, c->p[0]), *w = sh_src(c, c->p[1]), *b = sh_src(c, given(c->p[2]));
    int64_t s[3], p[3], d[3], op[3] = { 0, 0, 0 }, g, cout, shape[SMELT_MAX_DIMS];
    if (!dt_ok(c, x) || !w || w->ndim != k + 2 || (x->ndim != k + 1 && x->ndim != k + 2) ||
        w->dtype != x->dtype || (given(c->p[2]) && (!b || b->dtype != x->dtype)))
        return 0;
    if (!sh_ints(c->p[3], 1, 1, s, k) || !conv_padding(c->p[4], tr, p, k, &same) ||
        !sh_ints(c->p[tr ? 7 : 5], 1, 1, d, k) || !sh_int_or(c->p[6], 1, &g) ||
        (tr && !sh_ints(c->p[5], 0, 1, op, k)) || !conv_channels(tr, x, w, b, g, k, &cout))
        return 0;
    int op_s = 1, op_d = 1, lead = x->ndim - k - 1;
    for (int i = 0; i < k; i++) {
        op_s &= op[i] < s[i];
        op_d &= op[i] < d[i];
        int64_t in = x->shape[lead + 1 + i];   /* 'same' pads d*(k-1) in all: the output is the input */
        shape[lead + 1 + i] = same ? (s[i] == 1 && d[i] >= 1 && in >= 1 ? in : -1)
                                   : conv_size(tr, in, w->shape[2 + i], s[i], p[i], d[i], op[i]);
        if (shape[lead + 1 + i] < 0)
            return 0;
    }
    if (tr && !op_s && !op_d)
        return 0;
    if (lead)
        shape[0] = x->shape[0];
    shape[lead] = cout;
    conv_args(c, k, tr, same, s, p, d, g);
    return sh_out(c, x->dtype, x->ndim, shape);
}

/* ---------- pooling ---------- */

/* Pooling flags in a handler's arg (with the number of spatial dims in the
 * low bits): max pooling (takes dilation), indices returned too, takes
 * divisor_override, the input no smaller than the kernel (avg_pool3d). */
enum { P_MAX = 16, P_IDX = 32, P_DIV = 64, P_KIN = 128 };

/* Output size of one spatial dim of a pooling window (torch's
 * pooling_output_shape, ceil_mode keeping the last window starting inside
 * the input or the left padding), or -1 where torch refuses: kernel,
 * stride, dilation >= 1, 0 <= padding <= kernel/2, a positive output. */
static int64_t pool_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int ceil)
{
    if (k < 1 || s < 1 || d < 1 || p < 0 || p > k / 2)
        return -1;
    int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
    int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil && (out - 1) * s >= in + p)
        out--;
    return out >= 1 ? out : -1;
}

/* Input of a k-d pooling op: k+1 or k+2 dims, all but a batch dim
 * non-zero. */
static int pool_input(const sh_call *c, const smelt_node *x, int k)
{
    if (!dt_ok(c, x) || (x->ndim != k + 1 && x->ndim != k + 2))
        return 0;
    for (int d = x->ndim - k - 1; d < x->ndim; d++)
        if (x->shape[d] < 1)
            return 0;
    return 1;
}

/* The results of a k-d pooling op over x with output sizes osz[0..k):
 * values, then int64 indices when idx; the op (kind) recorded in c->sa
 * with the input's slot and the output sizes. */
static int pool_results(sh_call *c, int kind, const smelt_node *x, int k, const int64_t *osz, int idx)
{
    c->sa->kind = (uint8_t)kind;
    c->sa->nsp = (uint8_t)k;
    c->sa->indices = idx != 0;
    c->sa->x = (int8_t)sh_slot(c, c->p[0]);
    memcpy(c->sa->out, osz, sizeof(int64_t) * (size_t)k);
    int64_t shape[SMELT_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        shape[d] = d < x->ndim - k ? x->shape[d] : osz[d - (x->ndim - k)];
    return sh_out(c, x->dtype, x->ndim, shape) && (!idx || sh_out(c, SMELT_I64, x->ndim, shape));
}

/* max_pool{1,2,3}d[_with_indices] and avg_pool{1,2,3}d (arg: k | P_*):
 * kernel_size, stride (empty, None or absent: the kernel), padding, dilation
 * (max) or count_include_pad and divisor_override (avg), ceil_mode.
 * Lists of one value stand for k copies (1-d: one value only). */
static int sh_pool(sh_call *c, int arg)
{
    int k = arg & 15, mx = arg & P_MAX, ceil = 0, cip = 1;
    const smelt_node *x = sh_src(c, c->p[0]);
    int64_t ks[3], s[3], p[3], d[3], div = 0, out[3];
    PyObject *st = c->p[2];
    int empty_st = !given(st) || ((PyList_Check(st) || PyTuple_Check(st)) && PySequence_Fast_GET_SIZE(st) == 0);
    if (!pool_input(c, x, k) || !sh_ints(c->p[1], 0, 1, ks, k) || !sh_ints(c->p[3], 0, 1, p, k))
        return 0;
    if (empty_st)
        memcpy(s, ks, sizeof s);
    else if (!sh_ints(st, 0, 1, s, k))
        return 0;
    if (mx && (!sh_ints(c->p[4], 1, 1, d, k) || !sh_bool(c->p[5], 0, &ceil)))
        return 0;
    if (!mx && (!sh_bool(c->p[4], 0, &ceil) || !sh_bool(c->p[5], 1, &cip) ||
                ((arg & P_DIV) && given(c->p[6]) && (!sh_int(c->p[6], &div) || div == 0))))
        return 0;
    for (int i = 0; i < k; i++) {
        int64_t in = x->shape[x->ndim - k + i];
        if ((out[i] = pool_size(in, ks[i], s[i], p[i], mx ? d[i] : 1, ceil)) < 0 || ((arg & P_KIN) && in < ks[i]))
            return 0;
    }
    sh_args *sa = c->sa;
    for (int i = 0; i < k; i++) {
        sa->kernel[i] = ks[i];
        sa->stride[i] = s[i];
        sa->pad_lo[i] = sa->pad_hi[i] = p[i];
        sa->dil[i] = mx ? d[i] : 1;
    }
    sa->ceil = (uint8_t)ceil;
    sa->count_pad = (uint8_t)(mx || cip);
    sa->has_div = (arg & P_DIV) && given(c->p[6]);
    sa->div = sa->has_div ? div : 0;
    return pool_results(c, mx ? SK_MAX_POOL : SK_AVG_POOL, x, k, out, arg & P_IDX);
}

/* adaptive_{avg,max}_pool{1,2,3}d (arg: k | P_IDX for max): output_size an
 * int or k ints, each >= 1. */
static int sh_adaptive(sh_call *c, int arg)
{
    int k = arg & 15;
    const smelt_node *x = sh_src(c, c->p[0]);
    int64_t out[3];
    if (!pool_input(c, x, k) || !sh_ints(c->p[1], 0, 0, out, k))
        return 0;
    for (int i = 0; i < k; i++)
        if (out[i] < 1)
            return 0;
    return pool_results(c, arg & P_IDX ? SK_ADAPTIVE_MAX : SK_ADAPTIVE_AVG, x, k, out, arg & P_IDX);
}

/* ---------- upsampling ---------- */

/* Upsampling flags in a handler's arg: the op takes align_corners; nearest
 * (recorded for native.c); nearest-exact. */
enum { U_ALIGN = 16, U_NEAR = 32, U_EXACT = 64 };

/* Output sizes out[0..k) of sizes in[0..k) scaled by the k numbers of
 * list or tuple sf: the double product, truncated (torch's
 * compute_output_size). 1, or 0. */
static int up_scaled(PyObject *sf, const int64_t *in, int k, int64_t *out)
{
    if ((!PyList_Check(sf) && !PyTuple_Check(sf)) || PySequence_Fast_GET_SIZE(sf) != k)
        return 0;
    for (int i = 0; i < k; i++) {
        PyObject *f = PySequence_Fast_GET_ITEM(sf, i);
        double v = sh_scalar(f) && !PyBool_Check(f) ? PyFloat_AsDouble(f) : NAN;
        PyErr_Clear();
        if (!(fabs(v * (double)in[i]) < (double)SH_BIG))   /* NaN too */
            return 0;
        out[i] = (int64_t)((double)in[i] * v);
    }
    return 1;
}

/* torch._C._nn.upsample_* (arg: k | U_ALIGN) as F.interpolate calls them:
 * (input, output_size, [align_corners,] scale_factors), exactly one of
 * output_size (k ints) and scale_factors (k numbers; size = the product
 * with the input size, truncated) given; input N x C x spatial with C and
 * the spatial sizes non-zero; every output size >= 1. */
static int sh_upsample(sh_call *c, int arg)
{
    int k = arg & 15, al, sp = arg & U_ALIGN ? 3 : 2;
    const smelt_node *x = sh_src(c, c->p[0]);
    PyObject *os = given(c->p[1]), *sf = given(c->p[sp]);
    int64_t shape[SMELT_MAX_DIMS];
    if (!dt_ok(c, x) || x->ndim != k + 2 || x->shape[1] < 1 || !os == !sf ||
        ((arg & U_ALIGN) && (!c->p[2] || !sh_bool(c->p[2], 0, &al))))
        return 0;
    if (os ? sh_seq(os, shape + 2, k) != k : !up_scaled(sf, x->shape + 2, k, shape + 2))
        return 0;
    for (int i = 0; i < k; i++)
        if (x->shape[2 + i] < 1 || shape[2 + i] < 1)
            return 0;
    shape[0] = x->shape[0];
    shape[1] = x->shape[1];
    if ((arg & U_NEAR) && c->sa && sh_slot(c, c->p[0]) >= 0) {
        sh_args *sa = c->sa;
        sa->kind = SK_NEAREST;
        sa->nsp = (uint8_t)k;
        sa->exact = (arg & U_EXACT) != 0;
        sa->x = (int8_t)sh_slot(c, c->p[0]);
        for (int i = 0; i < k; i++) {
            sa->out[i] = shape[2 + i];
            PyObject *f = sf ? PySequence_Fast_GET_ITEM(sf, i) : NULL;
            sa->scale[i] = f ? PyFloat_AsDouble(f) : 0.0;
        }
        PyErr_Clear();
    }
    return sh_out(c, x->dtype, x->ndim, shape);
}

/* ---------- embedding, scans, sorting ---------- */

/* torch.embedding(weight, indices, padding_idx, scale_grad_by_freq,
 * sparse): a 2-d weight, int64/int32 indices; indices.shape + [dim]. */
static int sh_embedding(sh_call *c, int arg)
{
    const smelt_node *w = sh_src(c, c->p[0]), *ix = sh_src(c, c->p[1]);
    int64_t pad, shape[SMELT_MAX_DIMS];
    int b1, b2;
    (void)arg;
    if (!dt_ok(c, w) || w->ndim != 2 || !ix || (ix->dtype != SMELT_I64 && ix->dtype != SMELT_I32) ||
        ix->ndim >= SMELT_MAX_DIMS || !sh_int_or(c->p[2], -1, &pad) || !sh_bool(c->p[3], 0, &b1) ||
        !sh_bool(c->p[4], 0, &b2))
        return 0;
    memcpy(shape, ix->shape, sizeof(int64_t) * ix->ndim);
    shape[ix->ndim] = w->shape[1];
    return sh_out(c, w->dtype, ix->ndim + 1, shape);
}

/* cumsum / cumprod(input, dim, *, dtype): integer and bool inputs sum in
 * int64 unless dtype is given (any but bool). */
static int sh_cum(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]);
    PyObject *dto = given(c->p[2]);
    int d, dt = dto ? ops_dtype_of(dto) : -1;
    (void)arg;
    if (!dt_ok(c, x) || !sh_dim(c->p[1], x->ndim, &d) || (dto && (dt < 0 || dt == SMELT_BOOL)))
        return 0;
    if (dt < 0)
        dt = smelt_dtype_is_float((smelt_dtype)x->dtype) ? x->dtype : SMELT_I64;
    return sh_like(c, x, dt);
}

/* topk(input, k, dim=-1, largest, sorted): values and int64 indices with
 * size k (0 <= k <= size) along dim; input of >= 1 dims. */
static int sh_topk(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]);
    int64_t k, shape[SMELT_MAX_DIMS];
    int d, l, s;
    (void)arg;
    if (!dt_ok(c, x) || x->ndim < 1 || !sh_int(c->p[1], &k) || !sh_dim_or(c->p[2], -1, x->ndim, &d) ||
        !sh_bool(c->p[3], 1, &l) || !sh_bool(c->p[4], 1, &s) || k < 0 || k > x->shape[d])
        return 0;
    memcpy(shape, x->shape, sizeof(int64_t) * x->ndim);
    shape[d] = k;
    return sh_out(c, x->dtype, x->ndim, shape) && sh_out(c, SMELT_I64, x->ndim, shape);
}

/* sort (arg 0: values and int64 indices) and argsort (arg 1: indices)
 * (input, dim=-1, descending, *, stable: a bool, or None for sort): input
 * of >= 1 dims. */
static int sh_sort(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]);
    int d, desc, st;
    if (!dt_ok(c, x) || x->ndim < 1 || !sh_dim_or(c->p[1], -1, x->ndim, &d) || !sh_bool(c->p[2], 0, &desc) ||
        !sh_bool(arg ? c->p[3] : given(c->p[3]), 0, &st))
        return 0;
    return (arg || sh_like(c, x, x->dtype)) && sh_like(c, x, SMELT_I64);
}

/* ---------- gather, scatter, index_* ---------- */

/* Index checks shared by gather and scatter: an int64 or int32 index with
 * x's number of dims (>= 1), no larger than lim (when given) in every dim
 * nor than x in every dim but dim. */
static int gs_index(const smelt_node *x, const smelt_node *ix, const smelt_node *lim, int dim)
{
    if (!ix || (ix->dtype != SMELT_I64 && ix->dtype != SMELT_I32) || x->ndim < 1 || ix->ndim != x->ndim ||
        (lim && lim->ndim != x->ndim))
        return 0;
    for (int d = 0; d < x->ndim; d++)
        if ((d != dim && ix->shape[d] > x->shape[d]) || (lim && ix->shape[d] > lim->shape[d]))
            return 0;
    return 1;
}

/* gather(input, dim, index, *, sparse_grad): index's shape, input's dtype. */
static int sh_gather(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]), *ix = sh_src(c, c->p[2]);
    int d, sg;
    (void)arg;
    if (!dt_ok(c, x) || !sh_dim(c->p[1], x->ndim, &d) || !gs_index(x, ix, NULL, d) || !sh_bool(c->p[3], 0, &sg))
        return 0;
    return sh_out(c, x->dtype, ix->ndim, ix->shape);
}

/* scatter (arg 0: src tensor or value) and scatter_add (arg 1: src tensor)
 * out of place, without reduce: input's shape and dtype; src of input's
 * dtype. */
static int sh_scatter(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]), *ix = sh_src(c, c->p[2]), *src = sh_src(c, c->p[3]);
    int d;
    if (!dt_ok(c, x) || !sh_dim(c->p[1], x->ndim, &d) || given(c->p[4]))
        return 0;
    if (src ? src->dtype != x->dtype : arg || !sh_scalar(c->p[3]))
        return 0;
    return gs_index(x, ix, src, d) && sh_like(c, x, x->dtype);
}

/* index_add (arg 0), index_copy (arg 1), index_fill (arg 2) out of place:
 * a 0-d or 1-d index (int64; index_add also int32); source of input's dtype
 * and rank, index.numel() along dim and input's sizes elsewhere; index_fill
 * a number. Input of >= 1 dims; its shape and dtype. */
static int sh_index_op(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]), *ix = sh_src(c, c->p[2]), *src = sh_src(c, c->p[3]);
    int d;
    if (!dt_ok(c, x) || x->ndim < 1 || !sh_dim(c->p[1], x->ndim, &d) || !ix || ix->ndim > 1 ||
        (ix->dtype != SMELT_I64 && !(arg == 0 && ix->dtype == SMELT_I32)))
        return 0;
    if (arg == 2)
        return sh_scalar(c->p[3]) && sh_like(c, x, x->dtype);
    if (!src || src->dtype != x->dtype || src->ndim != x->ndim || (c->p[4] && !sh_scalar(c->p[4])))
        return 0;
    for (int i = 0; i < x->ndim; i++)
        if (src->shape[i] != (i == d ? smelt_node_numel(ix) : x->shape[i]))
            return 0;
    return sh_like(c, x, x->dtype);
}

/* torch.index_put(input, indices, values, accumulate): indices a tuple or
 * list of index tensors (int64, int32, bool) or None, at most input's
 * rank of them; values of input's dtype; the result is input's shape and
 * dtype. Values that do not broadcast to the indexed shape (it may depend
 * on a bool mask's data) raise when the call runs, as eager raises. */
static int sh_index_put(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]), *v = sh_src(c, c->p[2]);
    PyObject *ix = c->p[1];
    int acc;
    (void)arg;
    if (!dt_ok(c, x) || !v || v->dtype != x->dtype || !ix || (!PyTuple_Check(ix) && !PyList_Check(ix)) ||
        !sh_bool(c->p[3], 0, &acc))
        return 0;
    int covered = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(ix); i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(ix, i);
        const smelt_node *t = sh_src(c, o);
        if (o != Py_None && (!t || (t->dtype != SMELT_I64 && t->dtype != SMELT_I32 && t->dtype != SMELT_BOOL)))
            return 0;
        covered += t && t->dtype == SMELT_BOOL ? t->ndim : 1;
    }
    return covered <= x->ndim && sh_like(c, x, x->dtype);
}

/* ---------- reshaping ops ---------- */

/* torch.flip (arg 0: a list of dims) and Tensor.flip (arg 1: also an int
 * or several ints): distinct dims of an input of >= 1 dims. */
static int sh_flip(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]);
    Py_ssize_t na = PyTuple_GET_SIZE(c->args);
    int64_t v[SMELT_MAX_DIMS + 1];
    int n = -1;
    if (!dt_ok(c, x) || x->ndim < 1)
        return 0;
    if (arg && na > 2) {
        PyObject *t = PyTuple_GetSlice(c->args, 1, na);
        n = t ? sh_seq(t, v, SMELT_MAX_DIMS + 1) : -1;
        Py_XDECREF(t);
        PyErr_Clear();
    } else if (arg && sh_int(c->p[1], &v[0]))
        n = 1;
    else
        n = sh_seq(c->p[1], v, SMELT_MAX_DIMS + 1);
    unsigned seen = 0;
    for (int i = 0; i < n; i++) {
        int64_t d = v[i] < 0 ? v[i] + x->ndim : v[i];
        if (d < 0 || d >= x->ndim || (seen >> d & 1u))
            return 0;
        seen |= 1u << d;
    }
    return n >= 0 && sh_like(c, x, x->dtype);
}

/* torch.dropout(input, p, train): input's shape and dtype (a new tensor). */
static int sh_dropout(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]);
    (void)arg;
    return dt_ok(c, x) && sh_scalar(c->p[1]) && sh_like(c, x, x->dtype);
}

/* torch.put(input, index, source): input's shape and dtype; an int64
 * index and a source of input's dtype, as many elements as the index
 * (the tracer's view updates; tracer/ops.c view_update). */
static int sh_put(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]), *i = sh_src(c, c->p[1]), *s = sh_src(c, c->p[2]);
    (void)arg;
    return dt_ok(c, x) && i && s && i->dtype == SMELT_I64 && s->dtype == x->dtype &&
           smelt_node_numel(i) == smelt_node_numel(s) && sh_like(c, x, x->dtype);
}

/* torch.rand_like / randn_like (input) and randint_like(input, low,
 * high), as the tracer calls them (tracer/ops.c h_random): input's shape
 * and dtype. */
static int sh_rand_like(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]);
    int64_t lo, hi;
    return dt_ok(c, x) && (!arg || (sh_int(c->p[1], &lo) && sh_int(c->p[2], &hi) && lo < hi)) &&
           sh_like(c, x, x->dtype);
}

/* Tensor.unfold(dimension, size, step): a view; dim becomes the number of
 * windows and a dim of `size` is appended. Input of >= 1 dims. */
static int sh_unfold(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]);
    int64_t size, step, shape[SMELT_MAX_DIMS];
    int d;
    (void)arg;
    if (!dt_ok(c, x) || x->ndim < 1 || !sh_dim(c->p[1], x->ndim, &d) || !sh_int(c->p[2], &size) ||
        !sh_int(c->p[3], &step) || size < 0 || size > x->shape[d] || step < 1)
        return 0;
    memcpy(shape, x->shape, sizeof(int64_t) * x->ndim);
    shape[d] = (x->shape[d] - size) / step + 1;
    shape[x->ndim] = size;
    if (!sh_out(c, x->dtype, x->ndim + 1, shape))
        return 0;
    c->m->is_view[0] = 1;
    c->sa->kind = SK_UNFOLD;
    c->sa->x = (int8_t)sh_slot(c, c->p[0]);
    c->sa->dim = d;
    c->sa->size = size;
    c->sa->step = step;
    return 1;
}

/* one_hot(input, num_classes): int64 input, num_classes >= 1 given (-1
 * reads the data); input.shape + [num_classes], int64. */
static int sh_one_hot(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]);
    int64_t n, shape[SMELT_MAX_DIMS];
    (void)arg;
    if (!x || x->dtype != SMELT_I64 || x->ndim >= SMELT_MAX_DIMS || !sh_int(c->p[1], &n) || n < 1)
        return 0;
    memcpy(shape, x->shape, sizeof(int64_t) * x->ndim);
    shape[x->ndim] = n;
    return sh_out(c, SMELT_I64, x->ndim + 1, shape);
}

/* diff(input, n=1, dim=-1) without prepend/append: n >= 0 differences
 * shorten dim by n (not below 0); input of >= 1 dims; its dtype. */
static int sh_diff(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]);
    int64_t n, shape[SMELT_MAX_DIMS];
    int d;
    (void)arg;
    if (!dt_ok(c, x) || x->ndim < 1 || !sh_int_or(c->p[1], 1, &n) || n < 0 || !sh_dim_or(c->p[2], -1, x->ndim, &d) ||
        given(c->p[3]) || given(c->p[4]))
        return 0;
    memcpy(shape, x->shape, sizeof(int64_t) * x->ndim);
    shape[d] = shape[d] > n ? shape[d] - n : 0;
    return sh_out(c, x->dtype, x->ndim, shape);
}

/* pixel_shuffle (arg 0) / pixel_unshuffle (arg 1)(input, factor r >= 1):
 * >= 3 dims; (C, H, W) -> (C/r^2, H*r, W*r) or (C*r^2, H/r, W/r), r
 * dividing what it divides. */
static int sh_pixel(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]);
    int64_t r, shape[SMELT_MAX_DIMS];
    if (!dt_ok(c, x) || x->ndim < 3 || !sh_int(c->p[1], &r) || r < 1 || r > 65536)
        return 0;
    int n = x->ndim;
    memcpy(shape, x->shape, sizeof(int64_t) * n);
    if (arg ? shape[n - 2] % r || shape[n - 1] % r : shape[n - 3] % (r * r))
        return 0;
    shape[n - 3] = arg ? shape[n - 3] * r * r : shape[n - 3] / (r * r);
    shape[n - 2] = arg ? shape[n - 2] / r : shape[n - 2] * r;
    shape[n - 1] = arg ? shape[n - 1] / r : shape[n - 1] * r;
    return sh_out(c, x->dtype, n, shape);
}

/* torch._C._nn.pad(input, pad, mode, value=None) for mode 'reflect',
 * 'replicate' and 'circular': 2, 4 or 6 pads >= 0 (last dim first) on an
 * input of pads/2 + 1 or + 2 dims whose non-batch dims are non-zero;
 * reflect pads smaller than the size. */
static int sh_pad(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]);
    PyObject *mode = c->p[2];
    int64_t pad[6], shape[SMELT_MAX_DIMS];
    int n = sh_seq(c->p[1], pad, 6), refl = 0;
    (void)arg;
    if (!x || n < 2 || n % 2 || !mode || !PyUnicode_Check(mode) || given(c->p[3]))
        return 0;
    refl = PyUnicode_CompareWithASCIIString(mode, "reflect") == 0;
    int circ = PyUnicode_CompareWithASCIIString(mode, "circular") == 0;
    if (!refl && !circ && PyUnicode_CompareWithASCIIString(mode, "replicate"))
        return 0;
    if ((x->ndim != n / 2 + 1 && x->ndim != n / 2 + 2) || (!circ && x->dtype == SMELT_BOOL))
        return 0;
    memcpy(shape, x->shape, sizeof(int64_t) * x->ndim);
    for (int d = x->ndim - n / 2 - 1; d < x->ndim; d++)
        if (shape[d] < 1)
            return 0;
    for (int i = 0; i < n / 2; i++) {
        int64_t lo = pad[2 * i], hi = pad[2 * i + 1], *s = &shape[x->ndim - 1 - i];
        if (lo < 0 || hi < 0 || (refl && (lo >= *s || hi >= *s)) || (circ && (lo > *s || hi > *s)))
            return 0;
        *s += lo + hi;
    }
    return sh_out(c, x->dtype, x->ndim, shape);
}

/* ---------- einsum ---------- */

#define E_ELL 52   /* the ellipsis among the labels 0..51 (A-Z, a-z) */

/* The parsed equation of an einsum. */
typedef struct ein {
    uint8_t lab[SMELT_MAX_SRC][SMELT_MAX_DIMS + 1];   /* per operand: labels, E_ELL for '...' */
    int nlab[SMELT_MAX_SRC];
    uint8_t out[SMELT_MAX_DIMS + 1];                   /* output labels (explicit form) */
    int nout, explicit_;
} ein;

/* Label of letter ch (A-Z 0..25, a-z 26..51), or -1. */
static int ein_label(char ch)
{
    return ch >= 'A' && ch <= 'Z' ? ch - 'A' : ch >= 'a' && ch <= 'z' ? ch - 'a' + 26 : -1;
}

/* Parses one side of the equation (the operands', or the output's when
 * nops is 0) into lab/nlab or out/nout: letters, '...' once per term,
 * spaces ignored, ',' between operands. Returns the number of terms, or
 * -1. */
static int ein_side(ein *e, const char *s, size_t len, int nops)
{
    int t = 0, ell = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t *dst = nops ? e->lab[t] : e->out;
        int *n = nops ? &e->nlab[t] : &e->nout, l = ein_label(s[i]);
        if (s[i] == ' ')
            continue;
        if (s[i] == ',' && nops && ++t < nops) {
            ell = 0;
            continue;
        }
        if (s[i] == '.' && !ell && i + 2 < len && s[i + 1] == '.' && s[i + 2] == '.') {
            l = E_ELL;
            ell = 1;
            i += 2;
        }
        if (l < 0 || *n > SMELT_MAX_DIMS)
            return -1;
        dst[(*n)++] = (uint8_t)l;
    }
    return t + 1;
}

/* Parses equation eq for nops operands. 1, or 0 where torch would refuse
 * (or the equation is longer than smelt's ranks allow). */
static int ein_parse(ein *e, const char *eq, int nops)
{
    memset(e, 0, sizeof *e);
    const char *arrow = strstr(eq, "->");
    size_t lhs = arrow ? (size_t)(arrow - eq) : strlen(eq);
    if (ein_side(e, eq, lhs, nops) != nops)
        return 0;
    e->explicit_ = arrow != NULL;
    return !arrow || ein_side(e, arrow + 2, strlen(arrow + 2), 0) == 1;
}

/* Folds size s into the broadcast size *t (1 broadcasts against any).
 * 1, or 0 when they conflict. */
static int ein_bcast(int64_t *t, int64_t s)
{
    if (s != 1 && *t != 1 && *t != s)
        return 0;
    *t = s != 1 ? s : *t;
    return 1;
}

/* Folds operand i (node xi, of its term's labels) into the label sizes,
 * counts and the nell ellipsis sizes (right-aligned); a label repeated
 * within the operand has one size. 1, or 0. */
static int ein_operand(const ein *e, int i, const smelt_node *xi, int64_t *size, int *count, int64_t *ell, int nell)
{
    int64_t own[E_ELL];
    int dim = 0, nd = xi->ndim - e->nlab[i] + 1;   /* dims under the ellipsis, if there is one */
    for (int l = 0; l < E_ELL; l++)
        own[l] = -1;
    for (int j = 0; j < e->nlab[i]; j++) {
        int l = e->lab[i][j];
        for (int r = 0; l == E_ELL && r < nd; r++)
            if (!ein_bcast(&ell[nell - nd + r], xi->shape[dim++]))
                return 0;
        if (l == E_ELL)
            continue;
        int64_t s = xi->shape[dim++];
        count[l]++;
        if ((own[l] >= 0 && own[l] != s) || (own[l] < 0 && !ein_bcast(&size[l], s)))
            return 0;
        own[l] = s;
    }
    return 1;
}

/* Sizes of the labels (size[52], all 1 on entry) and of the ellipsis dims
 * (ell[0..*nell)) over operands x[0..nops), each with as many labels as
 * dims (or at most as many with an ellipsis); count says how often each
 * label occurs in the operands' terms. 1, or 0 where torch refuses. */
static int ein_sizes(const ein *e, const smelt_node *const *x, int nops, int64_t *size, int *count, int64_t *ell,
                     int *nell)
{
    *nell = 0;
    for (int i = 0; i < nops; i++) {
        int has = memchr(e->lab[i], E_ELL, (size_t)e->nlab[i]) != NULL, nl = e->nlab[i] - has;
        if (has ? nl > x[i]->ndim : nl != x[i]->ndim)
            return 0;
        *nell = has && x[i]->ndim - nl > *nell ? x[i]->ndim - nl : *nell;
    }
    for (int j = 0; j < *nell; j++)
        ell[j] = 1;
    for (int i = 0; i < nops; i++)
        if (!ein_operand(e, i, x[i], size, count, ell, *nell))
            return 0;
    return 1;
}

/* The output shape of einsum e into shape (at most SMELT_MAX_DIMS + 1
 * dims) from the sizes ein_sizes found: in the explicit order, or the
 * ellipsis dims then the labels seen once in alphabetical order (upper
 * case first); *summed set when some label or ellipsis dim is summed
 * away. Its rank, or -1 where torch refuses (an output label twice or not
 * in the operands, '...' twice). */
static int ein_output(const ein *e, const int *count, const int64_t *size, const int64_t *ell, int nell,
                      int64_t *shape, int *summed)
{
    int n = 0, used[E_ELL] = { 0 }, ell_out = !e->explicit_;
    for (int j = 0; !e->explicit_ && j < nell; j++)
        shape[n++] = ell[j];
    for (int l = 0; !e->explicit_ && l < E_ELL && n <= SMELT_MAX_DIMS; l++)
        if (count[l] == 1 && (used[l] = 1))
            shape[n++] = size[l];
    for (int j = 0; e->explicit_ && j < e->nout && n <= SMELT_MAX_DIMS; j++) {
        int l = e->out[j];
        if (l == E_ELL ? ell_out : !count[l] || used[l])
            return -1;
        for (int r = 0; l == E_ELL && r < nell && n <= SMELT_MAX_DIMS; r++)
            shape[n++] = ell[r];
        ell_out |= l == E_ELL;
        if (l != E_ELL && (used[l] = 1))
            shape[n++] = size[l];
    }
    *summed = !ell_out && nell > 0;
    for (int l = 0; l < E_ELL; l++)
        *summed |= count[l] && !used[l];
    return n;
}

/* torch einsum (the builtin torch.functional.einsum calls) of
 * (equation, tensors) without a path: operands of one dtype (not bool).
 * A view of its operand when there is one and nothing is summed. */
static int sh_einsum(sh_call *c, int arg)
{
    PyObject *eqo = c->p[0], *ts = c->p[1];
    const smelt_node *x[SMELT_MAX_SRC];
    int nops = ts && (PyTuple_Check(ts) || PyList_Check(ts)) ? (int)PySequence_Fast_GET_SIZE(ts) : 0;
    const char *eq = eqo && PyUnicode_Check(eqo) ? PyUnicode_AsUTF8(eqo) : NULL;
    int64_t size[E_ELL], ell[SMELT_MAX_DIMS], shape[SMELT_MAX_DIMS + 1];
    int count[E_ELL] = { 0 }, nell, n, summed;
    ein e;
    (void)arg;
    PyErr_Clear();
    if (!eq || nops < 1 || nops > SMELT_MAX_SRC || given(c->p[2]) || !ein_parse(&e, eq, nops))
        return 0;
    for (int i = 0; i < nops; i++)
        if (!(x[i] = sh_src(c, PySequence_Fast_GET_ITEM(ts, i))) || !dt_ok(c, x[i]) || x[i]->dtype != x[0]->dtype)
            return 0;
    for (int l = 0; l < E_ELL; l++)
        size[l] = 1;
    if (!ein_sizes(&e, x, nops, size, count, ell, &nell) ||
        (n = ein_output(&e, count, size, ell, nell, shape, &summed)) < 0)
        return 0;
    /* integer operands narrower than int64: eager sums some dims with
     * torch.sum (-> int64), depending on the contraction path: the meta run
     * says */
    if (summed && !smelt_dtype_is_float((smelt_dtype)x[0]->dtype) && x[0]->dtype != SMELT_I64)
        return 0;
    if (!sh_out(c, x[0]->dtype, n, shape))
        return 0;
    c->m->is_view[0] = nops == 1 && !summed;
    return 1;
}

/* ---------- advanced indexing ---------- */

/* One index of x[...] after expansion: kind and, for tensors (and lists
 * of ints), its shape. */
typedef struct gi_item {
    int kind;                 /* GI_* */
    int64_t v;                /* GI_INT: the index, when known */
    int known;
    PyObject *slice;          /* GI_SLICE: the slice (borrowed) */
    int ndim;                 /* GI_TENSOR */
    int64_t shape[SMELT_MAX_DIMS];
} gi_item;

enum { GI_NONE, GI_INT, GI_SLICE, GI_ELLIPSIS, GI_TENSOR };

/* Shape of a nested list of ints (rectangular, non-empty at every level)
 * into it as an index tensor. 1, or 0 (also for bools: a mask). */
static int gi_list(PyObject *o, gi_item *it, int depth)
{
    Py_ssize_t n = PyList_GET_SIZE(o);
    if (n < 1 || depth >= SMELT_MAX_DIMS)
        return 0;
    if (depth == it->ndim)
        it->shape[it->ndim++] = n;
    else if (it->shape[depth] != n)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyList_GET_ITEM(o, i);
        int64_t v;
        if (PyList_Check(e) ? !gi_list(e, it, depth + 1) : (depth + 1 != it->ndim || !sh_int(e, &v)))
            return 0;
    }
    return 1;
}

/* Classifies index item o: None, an int or a 0-d integer tensor (torch
 * selects by its value: v is then unknown, GI_INT with known 0), a slice
 * with int/None parts and step >= 1, Ellipsis, an int64/int32 tensor of
 * >= 1 dims, a list of ints. 1, or 0 for anything else (bools and masks
 * read the data). */
static int gi_classify(const sh_call *c, PyObject *o, gi_item *it)
{
    const smelt_node *t;
    memset(it, 0, sizeof *it);
    if (o == Py_None)
        return it->kind = GI_NONE, 1;
    if (o == Py_Ellipsis)
        return it->kind = GI_ELLIPSIS, 1;
    if (sh_int(o, &it->v))
        return it->kind = GI_INT, it->known = 1, 1;
    if (PySlice_Check(o)) {
        PySliceObject *s = (PySliceObject *)o;
        int64_t v;
        it->kind = GI_SLICE;
        it->slice = o;
        return (s->start == Py_None || sh_int(s->start, &v)) && (s->stop == Py_None || sh_int(s->stop, &v)) &&
               (s->step == Py_None || (sh_int(s->step, &v) && v >= 1));
    }
    it->kind = GI_TENSOR;
    if (PyList_Check(o))
        return gi_list(o, it, 0);
    if ((t = sh_src(c, o)) && t->ndim == 0 && smelt_dtype_is_int((smelt_dtype)t->dtype) && t->dtype != SMELT_U8)
        return it->kind = GI_INT, 1;
    if (!t || (t->dtype != SMELT_I64 && t->dtype != SMELT_I32) || t->ndim < 1)
        return 0;
    it->ndim = t->ndim;
    memcpy(it->shape, t->shape, sizeof(int64_t) * t->ndim);
    return 1;
}

/* The items of index idx (a tuple's items, or idx itself; a top-level
 * list of ints is one index tensor) into it[0..*n). 1, or 0. */
static int gi_items(const sh_call *c, PyObject *idx, gi_item *it, int *n)
{
    memset(&it[0], 0, sizeof it[0]);
    if (!PyTuple_CheckExact(idx)) {
        if (PyList_Check(idx) && !gi_list(idx, &it[0], 0))
            return 0;   /* a list holding slices or lists is read as a tuple: left to meta */
        *n = 1;
        return PyList_Check(idx) ? (it[0].kind = GI_TENSOR, it[0].ndim == 1) : gi_classify(c, idx, &it[0]);
    }
    *n = (int)PyTuple_GET_SIZE(idx);
    if (*n > 2 * SMELT_MAX_DIMS)
        return 0;
    for (int i = 0; i < *n; i++)
        if (!gi_classify(c, PyTuple_GET_ITEM(idx, i), &it[i]))
            return 0;
    return 1;
}

/* Broadcasts the shapes of the tensor items into b[0..*nb). 1, or 0. */
static int gi_broadcast(const gi_item *it, int n, int64_t *b, int *nb)
{
    *nb = 0;
    for (int i = 0; i < n; i++) {
        if (it[i].kind != GI_TENSOR)
            continue;
        int m = it[i].ndim > *nb ? it[i].ndim : *nb;
        for (int d = 0; d < m; d++) {   /* right-aligned */
            int64_t s = d < it[i].ndim ? it[i].shape[it[i].ndim - 1 - d] : 1;
            int64_t *t = &b[m - 1 - d], cur = d < *nb ? b[*nb - 1 - d] : 1;
            if (cur != 1 && s != 1 && cur != s)
                return 0;
            *t = cur != 1 ? cur : s;
        }
        *nb = m;
    }
    return 1;
}

/* The dims of x after the basic part of index it[0..n), which uses `used`
 * dims of x: None adds a 1, an int removes its dim, a slice shortens it,
 * Ellipsis keeps the dims no item uses; a tensor index leaves -1. Their
 * count, or -1 where torch refuses (a known int out of range). */
static int gi_basic(const smelt_node *x, const gi_item *it, int n, int used, int64_t *dims)
{
    int nd = 0, sd = 0;
    for (int i = 0; i <= n; i++) {
        int fill = i == n ? x->ndim - sd : it[i].kind == GI_ELLIPSIS ? x->ndim - used : 0;
        for (int r = 0; r < fill; r++)
            dims[nd++] = x->shape[sd++];
        if (i == n || it[i].kind == GI_ELLIPSIS)
            continue;
        if (it[i].kind == GI_NONE)
            dims[nd++] = 1;
        else if (it[i].kind == GI_INT && it[i].known && (it[i].v < -x->shape[sd] || it[i].v >= x->shape[sd]))
            return -1;
        else if (it[i].kind == GI_SLICE) {
            Py_ssize_t st, en, step;
            if (PySlice_Unpack(it[i].slice, &st, &en, &step) < 0)
                return PyErr_Clear(), -1;
            dims[nd++] = PySlice_AdjustIndices((Py_ssize_t)x->shape[sd], &st, &en, step);
        } else if (it[i].kind == GI_TENSOR)
            dims[nd++] = -1;
        sd += it[i].kind != GI_NONE;
    }
    return nd;
}

/* The result shape of x[idx] from the basic dims (gi_basic) and the index
 * tensors' broadcast shape b[0..nb): b replaces the tensors' dims where
 * those are adjacent, and comes first otherwise. Its rank. */
static int gi_place(const int64_t *dims, int nd, const int64_t *b, int nb, int64_t *shape)
{
    int first = -1, last = -1, adjacent = 1, m = 0;
    for (int d = 0; d < nd; d++)
        if (dims[d] < 0) {
            first = first < 0 ? d : first;
            last = d;
        }
    for (int d = first; d >= 0 && d <= last; d++)   /* first < 0: no index tensor */
        adjacent &= dims[d] < 0;
    for (int d = 0; d < nd; d++) {
        if ((adjacent ? d == first : d == 0))
            for (int j = 0; j < nb; j++)
                shape[m++] = b[j];
        if (dims[d] >= 0)
            shape[m++] = dims[d];
    }
    return m;
}

/* x[idx] (torch's rules): ints and 0-d integer tensors select first,
 * slices and None apply, then the index tensors broadcast together
 * (gi_place). Without index tensors (a 0-d tensor selects) the result is
 * a view of x. */
static int sh_getitem(sh_call *c, int arg)
{
    const smelt_node *x = sh_src(c, c->p[0]);
    gi_item it[2 * SMELT_MAX_DIMS];
    int64_t dims[3 * SMELT_MAX_DIMS], b[SMELT_MAX_DIMS], shape[4 * SMELT_MAX_DIMS];
    int n, used = 0, nell = 0, ntensor = 0, unknown = 0, nd, nb = 0;
    (void)arg;
    if (!dt_ok(c, x) || !c->p[1] || !gi_items(c, c->p[1], it, &n))
        return 0;
    for (int i = 0; i < n; i++) {
        used += it[i].kind == GI_INT || it[i].kind == GI_SLICE || it[i].kind == GI_TENSOR;
        nell += it[i].kind == GI_ELLIPSIS;
        ntensor += it[i].kind == GI_TENSOR;
        unknown += it[i].kind == GI_INT && !it[i].known;
    }
    if (used > x->ndim || nell > 1 || (!ntensor && !unknown) || (nd = gi_basic(x, it, n, used, dims)) < 0 ||
        !gi_broadcast(it, n, b, &nb) || !sh_out(c, x->dtype, gi_place(dims, nd, b, nb, shape), shape))
        return 0;
    c->m->is_view[0] = !ntensor;
    return 1;
}

/* ---------- the table ---------- */

/* An op: the callables it covers, its parameters, its handler. */
typedef struct sh_op {
    const char *names;   /* keys: "torch.X", "torch._C._nn.X", "T.X" (a torch.Tensor method) */
    const char *sig;     /* parameters in order; '*' before a keyword-only one, '|' between aliases */
    sh_fn fn;
    int arg;
    uint32_t dts;        /* dtypes eager supports for the op's data tensor */
    uint8_t rt;
} sh_op;

#define CONV_SIG "input weight bias stride padding dilation groups"
#define CONVT_SIG "input weight bias stride padding output_padding groups dilation"
#define MAXP_SIG "input kernel_size stride padding dilation ceil_mode"
#define AVGP_SIG "input kernel_size stride padding ceil_mode count_include_pad divisor_override"
#define NEAR_SIG "input output_size scale_factors"
#define LIN_SIG "input output_size align_corners scale_factors"
#define NN "torch._C._nn."

static const sh_op ops[] = {
    { "torch.conv1d", CONV_SIG, sh_conv, 1, M_FLOAT | DT(I64), RT_TENSOR },
    { "torch.conv2d", CONV_SIG, sh_conv, 2, M_FLOAT | DT(I64), RT_TENSOR },
    { "torch.conv3d", CONV_SIG, sh_conv, 3, M_FLOAT | DT(I64), RT_TENSOR },
    { "torch.conv_transpose1d", CONVT_SIG, sh_conv, 11, M_FLOAT | DT(I64), RT_TENSOR },
    { "torch.conv_transpose2d", CONVT_SIG, sh_conv, 12, M_FLOAT | DT(I64), RT_TENSOR },
    { "torch.conv_transpose3d", CONVT_SIG, sh_conv, 13, M_FLOAT | DT(I64), RT_TENSOR },
    { "torch.max_pool1d", MAXP_SIG, sh_pool, 1 | P_MAX, M_FLOAT, RT_TENSOR },
    { "torch.max_pool2d", MAXP_SIG, sh_pool, 2 | P_MAX, M_NUM, RT_TENSOR },
    { "torch.max_pool3d", MAXP_SIG, sh_pool, 3 | P_MAX, M_NUM, RT_TENSOR },
    { "torch.max_pool1d_with_indices", MAXP_SIG, sh_pool, 1 | P_MAX | P_IDX, M_NUM, RT_TUPLE },
    { NN "max_pool2d_with_indices", MAXP_SIG, sh_pool, 2 | P_MAX | P_IDX, M_NUM, RT_TUPLE },
    { NN "max_pool3d_with_indices", MAXP_SIG, sh_pool, 3 | P_MAX | P_IDX, M_NUM, RT_TUPLE },
    { "torch.avg_pool1d", "input kernel_size stride padding ceil_mode count_include_pad", sh_pool, 1,
      M_FLOAT | DT(I64), RT_TENSOR },
    { NN "avg_pool2d", AVGP_SIG, sh_pool, 2 | P_DIV, M_FLOAT | DT(I64), RT_TENSOR },
    { NN "avg_pool3d", AVGP_SIG, sh_pool, 3 | P_DIV | P_KIN, DT(F32) | DT(F64) | DT(I64), RT_TENSOR },
    { "torch.adaptive_avg_pool1d", "input output_size", sh_adaptive, 1, M_FLOAT, RT_TENSOR },
    { NN "adaptive_avg_pool2d", "input output_size", sh_adaptive, 2, M_FLOAT, RT_TENSOR },
    { NN "adaptive_avg_pool3d", "input output_size", sh_adaptive, 3, M_FLOAT, RT_TENSOR },
    { "torch.adaptive_max_pool1d", "input output_size", sh_adaptive, 1 | P_IDX, M_FLOAT, RT_TUPLE },
    { NN "adaptive_max_pool2d", "input output_size", sh_adaptive, 2 | P_IDX, M_FLOAT, RT_TUPLE },
    { NN "adaptive_max_pool3d", "input output_size", sh_adaptive, 3 | P_IDX, M_FLOAT, RT_TUPLE },
    { NN "upsample_nearest1d", NEAR_SIG, sh_upsample, 1 | U_NEAR, M_FLOAT | DT(U8), RT_TENSOR },
    { NN "upsample_nearest2d", NEAR_SIG, sh_upsample, 2 | U_NEAR, M_FLOAT | DT(U8), RT_TENSOR },
    { NN "upsample_nearest3d", NEAR_SIG, sh_upsample, 3 | U_NEAR, M_FLOAT | DT(U8), RT_TENSOR },
    { NN "_upsample_nearest_exact1d", NEAR_SIG, sh_upsample, 1 | U_NEAR | U_EXACT, M_FLOAT | DT(U8), RT_TENSOR },
    { NN "_upsample_nearest_exact2d", NEAR_SIG, sh_upsample, 2 | U_NEAR | U_EXACT, M_FLOAT | DT(U8), RT_TENSOR },
    { NN "_upsample_nearest_exact3d", NEAR_SIG, sh_upsample, 3 | U_NEAR | U_EXACT, M_FLOAT | DT(U8), RT_TENSOR },
    { NN "upsample_linear1d", LIN_SIG, sh_upsample, 1 | U_ALIGN, M_FLOAT, RT_TENSOR },
    { NN "upsample_bilinear2d", LIN_SIG, sh_upsample, 2 | U_ALIGN, M_FLOAT | DT(U8), RT_TENSOR },
    { NN "upsample_bicubic2d", LIN_SIG, sh_upsample, 2 | U_ALIGN, M_FLOAT | DT(U8), RT_TENSOR },
    { NN "upsample_trilinear3d", LIN_SIG, sh_upsample, 3 | U_ALIGN, M_FLOAT, RT_TENSOR },
    { "torch.embedding", "weight indices padding_idx scale_grad_by_freq sparse", sh_embedding, 0, M_ALL, RT_TENSOR },
    { "torch.cumsum T.cumsum torch.cumprod T.cumprod", "input dim *dtype", sh_cum, 0, M_ALL, RT_TENSOR },
    { "torch.topk T.topk", "input k dim largest sorted", sh_topk, 0, M_NUM, RT_TOPK },
    { "torch.sort T.sort", "input dim descending *stable", sh_sort, 0, M_ALL, RT_SORT },
    { "torch.argsort T.argsort", "input dim descending *stable", sh_sort, 1, M_ALL, RT_TENSOR },
    { "torch.gather T.gather", "input dim index *sparse_grad", sh_gather, 0, M_ALL, RT_TENSOR },
    { "torch.scatter T.scatter", "input dim index src|value *reduce", sh_scatter, 0, M_ALL, RT_TENSOR },
    { "torch.scatter_add T.scatter_add", "input dim index src", sh_scatter, 1, M_ALL, RT_TENSOR },
    { "torch.index_add T.index_add", "input dim index source *alpha", sh_index_op, 0, M_ALL, RT_TENSOR },
    { "torch.index_copy T.index_copy", "input dim index source", sh_index_op, 1, M_ALL, RT_TENSOR },
    { "torch.index_fill T.index_fill", "input dim index value", sh_index_op, 2, M_ALL, RT_TENSOR },
    { "torch.index_put", "input indices values accumulate", sh_index_put, 0, M_ALL, RT_TENSOR },
    { "torch.flip", "input dims", sh_flip, 0, M_ALL, RT_TENSOR },
    { "torch.dropout", "input p train", sh_dropout, 0, M_FLOAT, RT_TENSOR },
    { "torch.rand_like torch.randn_like", "input", sh_rand_like, 0, M_FLOAT, RT_TENSOR },
    { "torch.put", "input index source", sh_put, 0, M_ALL, RT_TENSOR },
    { "torch.randint_like", "input low high", sh_rand_like, 1, M_NUM, RT_TENSOR },
    { "T.flip", "input dims+", sh_flip, 1, M_ALL, RT_TENSOR },
    { "T.unfold", "input dimension size step", sh_unfold, 0, M_ALL, RT_TENSOR },
    { NN "one_hot", "input num_classes", sh_one_hot, 0, DT(I64), RT_TENSOR },
    { "torch.diff T.diff", "input n dim prepend append", sh_diff, 0, M_ALL, RT_TENSOR },
    { "torch.pixel_shuffle", "input upscale_factor", sh_pixel, 0, M_ALL, RT_TENSOR },
    { "torch.pixel_unshuffle", "input downscale_factor", sh_pixel, 1, M_ALL, RT_TENSOR },
    { NN "pad", "input pad mode value", sh_pad, 0, M_ALL, RT_TENSOR },
    { "torch.einsum", "equation tensors *path", sh_einsum, 0, M_NUM, RT_TENSOR },
    { "T.__getitem__", "input indices", sh_getitem, 0, M_ALL, RT_TENSOR },
};

#define NOPS ((int)(sizeof ops / sizeof ops[0]))

static PyObject *by_key;          /* dict: key ("torch.conv2d") -> index into ops */
static PyObject *rtypes[RT_N];    /* the result types */

/* ---------- binding ---------- */

/* Index of keyword kw (UTF-8, length n) among the parameters of sig
 * (any of a parameter's '|' aliases), or -1. */
static int param_of(const char *sig, const char *kw, size_t n)
{
    int i = 0;
    for (const char *s = sig; *s; i++) {
        s += *s == '*';
        for (;;) {
            size_t len = strcspn(s, " |+");
            if (len == n && !strncmp(s, kw, n))
                return i;
            s += len;
            s += *s == '+';
            if (*s != '|')
                break;
            s++;
        }
        s += *s == ' ';
    }
    return -1;
}

/* Number of parameters of sig that may be given positionally; *varargs
 * set when the last of them takes extra positional values ('+'). */
static int positional(const char *sig, int *varargs)
{
    int n = 1;
    *varargs = 0;
    for (const char *s = sig; *s && *s != '*'; s++) {
        n += *s == ' ' && s[1] != '*';
        *varargs |= *s == '+';
        if (*s == ' ' && s[1] == '*')
            break;
    }
    return n;
}

/* Binds args (a tuple) and kwargs (a dict or NULL) to the parameters of
 * sig in c->p. 1, or 0: too many positional arguments, a keyword that
 * names no parameter or one already given. */
static int bind(sh_call *c, const char *sig, PyObject *args, PyObject *kwargs)
{
    int varargs, npos = positional(sig, &varargs);
    Py_ssize_t na = PyTuple_GET_SIZE(args);
    memset(c->p, 0, sizeof c->p);
    if (na > npos && !varargs)
        return 0;
    for (Py_ssize_t i = 0; i < na && i < npos; i++)
        c->p[i] = PyTuple_GET_ITEM(args, i);
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (kwargs && PyDict_Next(kwargs, &pos, &k, &v)) {
        Py_ssize_t n;
        const char *s = PyUnicode_Check(k) ? PyUnicode_AsUTF8AndSize(k, &n) : NULL;
        int i = s ? param_of(sig, s, (size_t)n) : -1;
        PyErr_Clear();
        if (i < 0 || i >= SH_MAXP || c->p[i] || (varargs && na > npos))
            return 0;
        c->p[i] = v;
    }
    return 1;
}

/* ---------- set-up and entry ---------- */

/* Registers the keys of ops[i] in dict d. 0, or -1 with an error. */
static int add_keys(PyObject *d, int i)
{
    char buf[96];
    for (const char *s = ops[i].names; *s;) {
        size_t n = strcspn(s, " ");
        snprintf(buf, sizeof buf, "%.*s", (int)n, s);
        PyObject *idx = PyLong_FromLong(i);
        int rc = idx ? PyDict_SetItemString(d, buf, idx) : -1;
        Py_XDECREF(idx);
        if (rc)
            return -1;
        s += n;
        s += *s == ' ';
    }
    return 0;
}

/* The result types (torch.Tensor, tuple, torch.return_types.*), once.
 * 0, or -1 with an error. */
static int rtypes_init(void)
{
    static const char *const names[RT_N] = { NULL, NULL, "topk", "sort" };
    if (rtypes[RT_N - 1])
        return 0;
    PyObject *ret = PyImport_ImportModule("torch.return_types");
    if (!ret || !ops_tensor_type()) {
        Py_XDECREF(ret);
        return -1;
    }
    if (!rtypes[RT_TENSOR])
        rtypes[RT_TENSOR] = Py_NewRef(ops_tensor_type());
    if (!rtypes[RT_TUPLE])
        rtypes[RT_TUPLE] = Py_NewRef((PyObject *)&PyTuple_Type);
    int rc = 0;
    for (int i = RT_TOPK; rc == 0 && i < RT_N; i++)
        rc = rtypes[i] || (rtypes[i] = PyObject_GetAttrString(ret, names[i])) ? 0 : -1;
    Py_DECREF(ret);
    return rc;
}

/* The result types and the key table, made once (what one failed attempt
 * made stays for the next). 0, or -1 with an error. */
static int sh_init(void)
{
    if (by_key)
        return 0;
    if (rtypes_init())
        return -1;
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < NOPS; i++)
        if (add_keys(d, i))
            Py_CLEAR(d);
    by_key = d;
    return d ? 0 : -1;
}

/* Key of callable fn: "<module>.<name>" for builtins of torch and
 * torch._C._nn, "T.<name>" for torch.Tensor's method and slot
 * descriptors. New reference, or NULL (no error set). */
static PyObject *fn_key(PyObject *fn)
{
    PyObject *r = NULL;
    if (PyCFunction_Check(fn)) {
        PyObject *mod = PyObject_GetAttrString(fn, "__module__");
        if (mod && PyUnicode_Check(mod))
            r = PyUnicode_FromFormat("%U.%s", mod, ((PyCFunctionObject *)fn)->m_ml->ml_name);
        Py_XDECREF(mod);
    } else if (Py_IS_TYPE(fn, &PyMethodDescr_Type) || Py_IS_TYPE(fn, &PyWrapperDescr_Type)) {
        PyTypeObject *tt = (PyTypeObject *)ops_tensor_type(), *dt = PyDescr_TYPE(fn);
        if (tt && (dt == tt || dt == tt->tp_base))
            r = PyUnicode_FromFormat("T.%U", PyDescr_NAME(fn));
    }
    PyErr_Clear();
    return r;
}

/* The entry of ops for fn, or NULL. */
static const sh_op *find_op(PyObject *fn)
{
    PyObject *key = fn_key(fn);
    PyObject *idx = key ? PyDict_GetItemWithError(by_key, key) : NULL;
    Py_XDECREF(key);
    PyErr_Clear();
    return idx ? &ops[PyLong_AsLong(idx)] : NULL;
}

int shape_infer(PyObject *fn, PyObject *args, PyObject *kwargs, int nsrc, const smelt_node *const *srcs,
                struct tracer_call_meta *m, PyObject **rtype, sh_args *sa)
{
    sh_args scratch;
    *rtype = NULL;
    memset(m, 0, sizeof *m);
    if (!sa)
        sa = &scratch;
    memset(sa, 0, sizeof *sa);
    sa->x = sa->w = sa->b = -1;
    if (sh_init()) {
        PyErr_Clear();
        return 0;
    }
    const sh_op *op = find_op(fn);
    sh_call c = { .args = args, .nsrc = nsrc, .srcs = srcs, .m = m, .sa = sa };
    if (!op || !args || !PyTuple_Check(args) || (kwargs && kwargs != Py_None && !PyDict_Check(kwargs)))
        return 0;
    c.dts = op->dts;
    int ok = bind(&c, op->sig, args, kwargs == Py_None ? NULL : kwargs) && op->fn(&c, op->arg);
    PyErr_Clear();
    if (!ok) {
        memset(m, 0, sizeof *m);
        sa->kind = SK_NONE;
        return 0;
    }
    *rtype = Py_NewRef(rtypes[op->rt]);
    return 1;
}
