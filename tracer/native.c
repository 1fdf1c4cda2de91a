/* native.c — the home of convolution, pooling, Tensor.unfold and nearest
 * upsampling (rows of ops.c's table): graph ops instead of host calls, so
 * the compiler can fuse them and choose their layouts.
 *
 * native_call prepares the call as a host call (extern.c: templates, and
 * shapes.c reading and checking the arguments into sh_args, the results
 * as torch gives them) and then makes graph ops of it where it can:
 *  - conv{1,2,3}d with float32 input, weight and bias: one CONV node (an
 *    unbatched input gets a batch dim of one around it);
 *  - max and avg pooling of floating tensors, and adaptive pooling whose
 *    output sizes divide the input sizes: constant padding (-inf for max, 0
 *    for avg; ceil_mode adds on the right what the last window needs), one
 *    UNFOLD per spatial dim (window dims appended last), then amax over the
 *    window dims, or their sum divided as torch divides (the window's size
 *    within input + padding, its count of input elements when
 *    count_include_pad=False, or divisor_override);
 *  - Tensor.unfold: UNFOLD;
 *  - nearest (and nearest-exact) interpolation whose every spatial dim is
 *    an integer up- or downsampling that torch's index rule samples
 *    evenly: views (strided slices, repeat by expand + reshape), fused
 *    into whatever consumes them.
 * Everything else (other dtypes, transposed convolutions, pooling indices,
 * uneven adaptive windows) stays a host call. The graph ops must give the
 * shape torch gives; a mismatch is a bug here, and breaks the trace saying so.
 */
#include "tstate.h"

#include <math.h>
#include <string.h>

/* ---------- node builders (graph node ids; -1 on a break or error) ---------- */

static int32_t axis_op(tracer *T, smelt_op op, int32_t x, int dim)
{
    smelt_node p = { .op = op, .nsrc = 1, .src = { x } };
    p.a.axis.dim = dim;
    return x < 0 ? -1 : tr_node_add(T, &p);
}

static int32_t binary(tracer *T, smelt_op op, int32_t a, int32_t b)
{
    smelt_node p = { .op = op, .nsrc = 2, .src = { a, b } };
    return a < 0 || b < 0 ? -1 : tr_node_add(T, &p);
}

static int32_t cast(tracer *T, int32_t x, int dt)
{
    smelt_node p = { .op = SMELT_OP_CAST, .nsrc = 1, .src = { x }, .dtype = (uint8_t)dt };
    return x < 0 || T->g->nodes[x].dtype == dt ? x : tr_node_add(T, &p);
}

/* Reduction op over the dims in mask (bit d: dim d), dims dropped; first:
 * attrs.red.first (AMAX: the gradient to the first maximum). */
static int32_t reduce(tracer *T, smelt_op op, int32_t x, uint32_t mask, int first)
{
    smelt_node p = { .op = op, .nsrc = 1, .src = { x } };
    p.a.red.dims = mask;
    p.a.red.first = (uint8_t)first;
    return x < 0 ? -1 : tr_node_add(T, &p);
}

/* A weak Python-int scalar v. */
static int32_t int_scalar(tracer *T, int64_t v)
{
    int32_t id = smelt_graph_scalar(T->g, SMELT_I64, 0, v);
    return id < 0 ? tr_break(T, "%s", T->g->err) : id;
}

/* int64 arange: start + i*step for i < n. */
static int32_t arange(tracer *T, int64_t start, int64_t step, int64_t n)
{
    smelt_node p = { .op = SMELT_OP_ARANGE, .dtype = SMELT_I64, .ndim = 1, .shape = { n } };
    p.a.arange.istart = start;
    p.a.arange.istep = step;
    return tr_node_add(T, &p);
}

/* Integer x clamped to [lo, hi]; has_lo / has_hi say which bounds apply. */
static int32_t clamp(tracer *T, int32_t x, int has_lo, int64_t lo, int has_hi, int64_t hi)
{
    smelt_node p = { .op = SMELT_OP_CLAMP, .nsrc = 1, .src = { x }, .dtype = SMELT_I64 };
    p.a.clamp.ilo = lo;
    p.a.clamp.ihi = hi;
    p.a.clamp.has_lo = (uint8_t)has_lo;
    p.a.clamp.has_hi = (uint8_t)has_hi;
    return x < 0 ? -1 : tr_node_add(T, &p);
}

/* ---------- convolution ---------- */

/* conv{1,2,3}d as one CONV node: float32 (shapes.c checked that weight and
 * bias share the input's dtype), attributes within int32. -2 otherwise. */
static int32_t conv(tracer *T, const sh_args *sa, const int32_t *node)
{
    const smelt_node *x = &T->g->nodes[node[sa->x]];
    int k = sa->nsp, batched = x->ndim == k + 2;
    if (sa->transposed || x->dtype != SMELT_F32 || sa->w < 0 || sa->groups > INT32_MAX)
        return -2;
    smelt_node p = { .op = SMELT_OP_CONV, .nsrc = 2, .src = { node[sa->x], node[sa->w] } };
    if (sa->b >= 0)
        p.src[p.nsrc++] = node[sa->b];
    p.a.conv.nsp = k;
    p.a.conv.groups = (int32_t)sa->groups;
    for (int i = 0; i < k; i++) {
        if (sa->stride[i] > INT32_MAX || sa->pad_lo[i] > INT32_MAX || sa->pad_hi[i] > INT32_MAX ||
            sa->dil[i] > INT32_MAX)
            return -2;
        p.a.conv.stride[i] = (int32_t)sa->stride[i];
        p.a.conv.pad_lo[i] = (int32_t)sa->pad_lo[i];
        p.a.conv.pad_hi[i] = (int32_t)sa->pad_hi[i];
        p.a.conv.dil[i] = (int32_t)sa->dil[i];
    }
    if (!batched && (p.src[0] = axis_op(T, SMELT_OP_UNSQUEEZE, p.src[0], 0)) < 0)
        return -1;
    int32_t y = tr_node_add(T, &p);
    return batched ? y : axis_op(T, SMELT_OP_SQUEEZE, y, 0);
}

/* ---------- pooling ---------- */

/* One spatial dim of a pooling: `out` windows of `kernel` elements `dil`
 * apart, one every `stride` elements, over the input (`in` elements)
 * padded with lo elements before and hi after. */
typedef struct pool_dim {
    int64_t in, kernel, stride, dil, lo, hi, out;
} pool_dim;

static int is_adaptive(const sh_args *sa)
{
    return sa->kind == SK_ADAPTIVE_AVG || sa->kind == SK_ADAPTIVE_MAX;
}

/* The windows of spatial dim i, of input size in: adaptive pooling's are
 * in/out wide and apart (0 when out does not divide in: uneven windows);
 * the others as given, hi grown to what the last window needs (ceil_mode
 * keeps a window that runs past the padding). 1, or 0. */
static int pool_geometry(const sh_args *sa, int i, int64_t in, pool_dim *pd)
{
    pd->in = in;
    pd->out = sa->out[i];
    if (is_adaptive(sa)) {
        pd->kernel = pd->stride = in / pd->out;
        pd->dil = 1;
        pd->lo = pd->hi = 0;
        return in % pd->out == 0;
    }
    pd->kernel = sa->kernel[i];
    pd->stride = sa->stride[i];
    pd->dil = sa->dil[i];
    pd->lo = sa->pad_lo[i];
    int64_t need = (pd->out - 1) * pd->stride + pd->dil * (pd->kernel - 1) + 1 - in - pd->lo;
    pd->hi = need > sa->pad_hi[i] ? need : sa->pad_hi[i];
    return 1;
}

/* x (graph node, its k spatial dims last) padded with value and unfolded
 * along each spatial dim: [.., out_0, .., out_k-1, kernel_0, .., kernel_k-1]. */
static int32_t windows(tracer *T, int32_t x, const pool_dim *pd, int k, double value)
{
    if (x < 0)
        return -1;
    int lead = T->g->nodes[x].ndim - k;
    for (int i = 0; i < k; i++)
        if ((pd[i].lo || pd[i].hi) && (x = ops_pad_node(T, x, lead + i, pd[i].lo, pd[i].hi, value)) < 0)
            return -1;
    for (int i = 0; i < k; i++) {
        smelt_node p = { .op = SMELT_OP_UNFOLD, .nsrc = 1, .src = { x } };
        p.a.unfold.dim = lead + i;
        p.a.unfold.size = pd[i].kernel;
        p.a.unfold.step = pd[i].stride;
        p.a.unfold.dil = pd[i].dil;
        if ((x = tr_node_add(T, &p)) < 0)
            return -1;
    }
    return x;
}

/* How many elements avg pooling divides the sum of window o of dim pd by:
 * those of the input and its padding (count_pad; the extra ceil_mode
 * padding does not count), or of the input alone. */
static int64_t window_count(const pool_dim *pd, int count_pad, int64_t o)
{
    int64_t start = o * pd->stride - pd->lo, end = start + pd->kernel;
    if (count_pad)
        return (end < pd->in + pd->lo ? end : pd->in + pd->lo) - start;
    return (end < pd->in ? end : pd->in) - (start > 0 ? start : 0);
}

/* window_count over the out positions of pd as an int64 tensor of shape
 * [out] + [1] * trailing (broadcasting against the dims after it). */
static int32_t count_vector(tracer *T, const pool_dim *pd, int count_pad, int trailing)
{
    int32_t v;
    if (count_pad)   /* min(kernel, in + 2*lo - o*stride) */
        v = clamp(T, arange(T, pd->in + 2 * pd->lo, -pd->stride, pd->out), 0, 0, 1, pd->kernel);
    else             /* min(o*stride - lo + kernel, in) - max(o*stride - lo, 0) */
        v = binary(T, SMELT_OP_SUB, clamp(T, arange(T, pd->kernel - pd->lo, pd->stride, pd->out), 0, 0, 1, pd->in),
                   clamp(T, arange(T, -pd->lo, pd->stride, pd->out), 1, 0, 0, 0));
    smelt_node p = { .op = SMELT_OP_RESHAPE, .nsrc = 1, .src = { v }, .ndim = (uint8_t)(1 + trailing) };
    p.shape[0] = pd->out;
    for (int d = 1; d <= trailing; d++)
        p.shape[d] = 1;
    return v < 0 || trailing == 0 ? v : tr_node_add(T, &p);
}

/* What avg pooling divides window sums by: divisor_override, else each
 * window's count (window_count): a weak int scalar for the dims where it
 * is the same for every window, times an int64 tensor over the output's
 * spatial dims for the others. */
static int32_t avg_divisor(tracer *T, const sh_args *sa, const pool_dim *pd, int k)
{
    if (sa->has_div)
        return int_scalar(T, sa->div);
    int64_t uniform = 1;
    int32_t t = -1;
    for (int i = 0; i < k; i++) {
        int64_t c0 = window_count(&pd[i], sa->count_pad, 0);
        int same = 1;
        for (int64_t o = 1; o < pd[i].out && same; o++)
            same = window_count(&pd[i], sa->count_pad, o) == c0;
        if (same) {
            uniform *= c0;
            continue;
        }
        int32_t v = count_vector(T, &pd[i], sa->count_pad, k - 1 - i);
        if (v < 0 || (t >= 0 && (v = binary(T, SMELT_OP_MUL, t, v)) < 0))
            return -1;
        t = v;
    }
    if (t < 0)
        return int_scalar(T, uniform);
    return uniform == 1 ? t : binary(T, SMELT_OP_MUL, t, int_scalar(T, uniform));
}

/* Adaptive pooling over symbolic spatial sizes: a global pool (every
 * output size 1) as amax or mean over the spatial dims kept as ones;
 * other output sizes are refused (their windows are in / out wide). */
static int32_t global_pool(tracer *T, const sh_args *sa, int32_t x, int k)
{
    const smelt_node *xn = &T->g->nodes[x];
    int nd = xn->ndim, dt = xn->dtype;
    for (int i = 0; i < k; i++)
        if (sa->out[i] != 1)
            return dyn_fail(T, "adaptive pooling to sizes other than 1 over a symbolic spatial size");
    uint32_t mask = ((1u << k) - 1) << (nd - k);
    int max = sa->kind == SK_ADAPTIVE_MAX;
    int cd = !max && (dt == SMELT_F16 || dt == SMELT_BF16) ? SMELT_F32 : dt;
    smelt_node p = { .op = max ? SMELT_OP_AMAX : SMELT_OP_MEAN, .nsrc = 1, .src = { cast(T, x, cd) } };
    p.a.red.dims = mask;
    p.a.red.keepdim = 1;
    p.a.red.first = (uint8_t)max;
    return p.src[0] < 0 ? -1 : cast(T, tr_node_add(T, &p), dt);
}

/* Pooling of a floating tensor (values only: with indices when first is
 * set, else -2): max as amax over the windows padded with -inf; avg as
 * their sum padded with zeros (float32 for half types, as torch
 * accumulates) divided by avg_divisor. -2 for uneven adaptive windows. */
static int32_t pool(tracer *T, const sh_args *sa, const int32_t *node, int first)
{
    int32_t x = node[sa->x];
    const smelt_node *xn = &T->g->nodes[x];
    int k = sa->nsp, nd = xn->ndim, dt = xn->dtype;
    pool_dim pd[3];
    if (!smelt_dtype_is_float((smelt_dtype)dt) || (sa->indices && !first) || nd + k > SMELT_MAX_DIMS)
        return -2;
    int sym = 0;
    for (int i = 0; i < k; i++)
        sym |= dyn_dim_ex(T, x, nd - k + i) >= 0;
    if (sym && is_adaptive(sa))
        return global_pool(T, sa, x, k);
    for (int i = 0; i < k; i++)
        if (!pool_geometry(sa, i, xn->shape[nd - k + i], &pd[i]))
            return -2;
    /* a symbolic spatial size: the windows, their padding and (below) the
     * divisors must be the same formulas for every size. Without
     * ceil_mode the right padding is the given one; the windows' counts
     * are the kernel's size, except without count_include_pad where a
     * window reaches into the padding (left padding) */
    for (int i = 0; sym && i < k; i++) {
        if (dyn_dim_ex(T, x, nd - k + i) < 0)
            continue;
        if (sa->ceil)
            return dyn_fail(T, "pooling with ceil_mode over a symbolic spatial size");
        if (sa->kind == SK_AVG_POOL && !sa->count_pad && pd[i].lo > 0 && !sa->has_div)
            return dyn_fail(T, "avg pooling without count_include_pad over a padded symbolic spatial size");
    }
    uint32_t mask = ((1u << k) - 1) << nd;   /* the window dims */
    if (sa->kind == SK_MAX_POOL || sa->kind == SK_ADAPTIVE_MAX)   /* gradient to each window's first max, as eager's */
        return reduce(T, SMELT_OP_AMAX, windows(T, x, pd, k, -INFINITY), mask, 1);
    int cd = dt == SMELT_F16 || dt == SMELT_BF16 ? SMELT_F32 : dt;
    int32_t s = reduce(T, SMELT_OP_SUM, windows(T, cast(T, x, cd), pd, k, 0.0), mask, 0);
    int32_t d = s < 0 ? -1 : avg_divisor(T, sa, pd, k);
    return cast(T, binary(T, SMELT_OP_DIV, s, d), dt);
}

/* ---------- entry ---------- */

/* Tensor.unfold(dim, size >= 1, step) as UNFOLD; size 0 stays a host call. */
static int32_t unfold(tracer *T, const sh_args *sa, const int32_t *node)
{
    smelt_node p = { .op = SMELT_OP_UNFOLD, .nsrc = 1, .src = { node[sa->x] } };
    p.a.unfold.dim = sa->dim;
    p.a.unfold.size = sa->size;
    p.a.unfold.step = sa->step;
    p.a.unfold.dil = 1;
    return sa->size < 1 ? -2 : tr_node_add(T, &p);
}

/* ---------- nearest upsampling ---------- */

/* torch's source index of output index o along a dim (UpSample.h's
 * nearest_idx / nearest_neighbor_exact_idx, float scale). */
static int64_t nearest_src(int64_t o, int64_t in, int64_t out, double scale, int exact)
{
    float s = scale > 0 ? (float)(1.0 / scale) : (float)in / (float)out;
    if (!exact && out == in)
        return o;
    if (!exact && out == 2 * in)
        return o >> 1;
    int64_t i = exact ? (int64_t)floorf((float)(((double)o + 0.5) * s)) : (int64_t)floorf((float)o * s);
    return i < in - 1 ? i : in - 1;
}

/* The view form of one dim: out = in * (*rep) (every source repeated) or
 * out = (in - *start) / *step sampled (every step-th from start): 1 when
 * torch's index rule gives exactly that for every output index, else 0. */
static int nearest_form(int64_t in, int64_t out, double scale, int exact, int64_t *rep, int64_t *start,
                        int64_t *step)
{
    *rep = out >= in && out % in == 0 ? out / in : 1;
    *step = out < in && in % out == 0 ? in / out : 1;
    *start = *step > 1 ? nearest_src(0, in, out, scale, exact) : 0;
    if (out != in * *rep && in != out * *step)
        return 0;
    for (int64_t o = 0; o < out; o++)
        if (nearest_src(o, in, out, scale, exact) != (*rep > 1 ? o / *rep : *start + o * *step))
            return 0;
    return 1;
}

/* Nearest upsampling (and integer downsampling) as views when every
 * spatial dim is an integer ratio torch's rule samples evenly: a strided
 * slice per downsampled dim, then each source element repeated (unsqueeze,
 * expand, reshape) per upsampled dim; -2 otherwise (a host call). */
static int32_t nearest(tracer *T, const sh_args *sa, const int32_t *node)
{
    int32_t x = node[sa->x];
    int k = sa->nsp;
    int64_t rep[3], start[3], step[3];
    const smelt_node *xn = &T->g->nodes[x];
    if (2 + 2 * k > SMELT_MAX_DIMS)
        return -2;
    for (int i = 0; i < k; i++)
        if (!nearest_form(xn->shape[2 + i], sa->out[i], sa->scale[i], sa->exact, &rep[i], &start[i], &step[i]))
            return -2;
    for (int i = 0; i < k && x >= 0; i++)
        if (step[i] > 1) {
            smelt_node p = { .op = SMELT_OP_SLICE, .nsrc = 1, .src = { x } };
            p.a.slice.dim = 2 + i;
            p.a.slice.start = start[i];
            p.a.slice.end = start[i] + (sa->out[i] - 1) * step[i] + 1;
            p.a.slice.step = step[i];
            x = tr_node_add(T, &p);
        }
    if (x < 0)
        return -1;
    xn = &T->g->nodes[x];
    smelt_node r1 = { .op = SMELT_OP_RESHAPE, .nsrc = 1, .src = { x }, .ndim = (uint8_t)(2 + 2 * k) };
    smelt_node ex = { .op = SMELT_OP_EXPAND, .nsrc = 1, .ndim = (uint8_t)(2 + 2 * k) };
    smelt_node r2 = { .op = SMELT_OP_RESHAPE, .nsrc = 1, .ndim = xn->ndim };
    for (int d = 0; d < 2; d++)
        r1.shape[d] = ex.shape[d] = r2.shape[d] = xn->shape[d];
    for (int i = 0; i < k; i++) {
        r1.shape[2 + 2 * i] = ex.shape[2 + 2 * i] = xn->shape[2 + i];
        r1.shape[3 + 2 * i] = 1;
        ex.shape[3 + 2 * i] = rep[i];
        r2.shape[2 + i] = xn->shape[2 + i] * rep[i];
    }
    int32_t y = tr_node_add(T, &r1);
    ex.src[0] = y;
    y = y < 0 ? -1 : tr_node_add(T, &ex);
    r2.src[0] = y;
    y = y < 0 ? -1 : tr_node_add(T, &r2);
    int repeats = 0;
    for (int i = 0; i < k; i++)
        repeats |= rep[i] > 1;
    if (y >= 0 && !repeats) {
        /* slices and reshapes alone are a view of x: eager's result is a
         * new tensor */
        smelt_node c = { .op = SMELT_OP_CAST, .nsrc = 1, .src = { y }, .dtype = T->g->nodes[y].dtype };
        y = tr_node_add(T, &c);
    }
    return y;
}

/* Whether node y has result 0's dtype and shape in m. */
static int matches(const smelt_node *y, const tracer_call_meta *m)
{
    return y->dtype == m->dtypes[0] && y->ndim == m->ndims[0] &&
           !memcmp(y->shape, m->shapes[0], sizeof(int64_t) * y->ndim);
}

/* The call shape_infer accepted (sa; node[k] the graph node of slot k; m
 * the results torch gives) as graph ops: a tensor value; -2 when it takes
 * no form these express; -1 (break/error). */
static int32_t graph_ops(tracer *T, const sh_args *sa, const int32_t *node, const tracer_call_meta *m, int first)
{
    int32_t y;
    if (sa->x < 0)
        return -2;
    switch ((sh_kind)sa->kind) {
    case SK_CONV: y = conv(T, sa, node); break;
    case SK_UNFOLD: y = unfold(T, sa, node); break;
    case SK_NEAREST: y = nearest(T, sa, node); break;
    case SK_MAX_POOL: case SK_AVG_POOL: case SK_ADAPTIVE_AVG: case SK_ADAPTIVE_MAX:
        y = pool(T, sa, node, first);
        break;
    default: return -2;
    }
    if (y < 0)
        return y == -2 ? -2 : -1;
    if (!matches(&T->g->nodes[y], m))
        return tr_break(T, "internal error: %s as graph ops gives %s[%d dims], torch %s[%d dims]",
                        smelt_op_name((smelt_op)T->g->nodes[y].op), smelt_dtype_name((smelt_dtype)T->g->nodes[y].dtype),
                        T->g->nodes[y].ndim, smelt_dtype_name((smelt_dtype)m->dtypes[0]), m->ndims[0]);
    if (sa->kind != SK_CONV && sa->kind != SK_UNFOLD) {
        /* eager pools (and upsamples) a contiguous input into a contiguous
         * result, a channels-last one into a channels-last result */
        int64_t st[SMELT_MAX_DIMS];
        int k = ops_eager_strides(T, node[sa->x], st);
        if (k < 0)
            return -1;
        if (k == 1 && tr_channels_last(&T->g->nodes[node[sa->x]], st) && T->g->nodes[y].ndim == T->g->nodes[node[sa->x]].ndim)
            tr_mark_layout(T, y, 2);
        else if (ops_eager_contiguous(T, node[sa->x]) == 1)
            tr_mark_contig(T, y);
    }
    return tv_tensor(T, y);
}

int32_t native_call(tracer *T, PyObject *fn, const call_args *a, int first)
{
    ext_pending p;
    int32_t r = ext_prepare(T, fn, a, &p);
    if (r == -2)
        return tr_break(T, "%s without a tensor argument", Py_TYPE(fn)->tp_name);
    if (r < 0)
        return -1;
    r = p.sa.kind == SK_NONE ? -2 : graph_ops(T, &p.sa, p.s.node, &p.m, first);
    if (r == -2)
        r = ext_emit(T, &p, a);
    ext_release(&p);
    if (first && r >= 0 && (T->vals[r].kind == V_TUPLE || T->vals[r].kind == V_LIST))
        r = T->vals[r].n ? T->vals[r].items[0] : tr_break(T, "call returned no result");
    return r;
}
