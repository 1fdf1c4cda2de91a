/* rules.c — derivative rules, one per primitive op, indexed by op in
 * RULES (adint.h: ad_rule). Each builds, on the backward graph, the
 * vector-Jacobian product of its op as torch's derivatives.yaml defines
 * it (the same formulas, so gradients match eager's to rounding: the
 * masked-fill and tie conventions included). Forward values come from
 * ad_val (recomputed or saved, backward.c decides); contributions go
 * through ad_give, which casts to the source's dtype and sums broadcast
 * dims away. An op without a row, or a form its rule does not take,
 * sends the frame to eager with the op named.
 */
#include "adint.h"

#include <math.h>
#include <string.h>

#define X(k) ad_val(A, A->g->nodes[i].src[k])
#define Y ad_val(A, i)
#define N (&A->g->nodes[i])
#define MUL(a, b) ad_op2(A, SMELT_OP_MUL, a, b)
#define DIV(a, b) ad_op2(A, SMELT_OP_DIV, a, b)
#define ADD(a, b) ad_op2(A, SMELT_OP_ADD, a, b)
#define SUB(a, b) ad_op2(A, SMELT_OP_SUB, a, b)
#define NEG(a) ad_op1(A, SMELT_OP_NEG, a)
#define KK(v) ad_k(A, v)

static int src_is_scalar(ad *A, int32_t i, int k) { return A->g->nodes[A->g->nodes[i].src[k]].op == SMELT_OP_SCALAR; }

/* ---------- unary pointwise: dy/dx as a factor of g ---------- */

static int r_neg(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, NEG(g)); return 0; }
static int r_abs(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, MUL(g, ad_op1(A, SMELT_OP_SIGN, X(0)))); return 0; }
static int r_exp(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, MUL(g, Y)); return 0; }
static int r_exp2(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, MUL(g, MUL(Y, KK(M_LN2)))); return 0; }
static int r_expm1(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, MUL(g, ADD(Y, KK(1.0)))); return 0; }
static int r_log(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, DIV(g, X(0))); return 0; }
static int r_log2(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, DIV(g, MUL(X(0), KK(M_LN2)))); return 0; }
static int r_log10(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, DIV(g, MUL(X(0), KK(M_LN10)))); return 0; }
static int r_log1p(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, DIV(g, ADD(X(0), KK(1.0)))); return 0; }
static int r_sqrt(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, DIV(g, MUL(KK(2.0), Y))); return 0; }
static int r_rsqrt(ad *A, int32_t i, int32_t g)
{
    int32_t y = Y;
    ad_give(A, i, 0, MUL(MUL(KK(-0.5), g), MUL(MUL(y, y), y)));
    return 0;
}
static int r_sin(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, MUL(g, ad_op1(A, SMELT_OP_COS, X(0)))); return 0; }
static int r_cos(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, MUL(g, NEG(ad_op1(A, SMELT_OP_SIN, X(0))))); return 0; }
static int r_tan(ad *A, int32_t i, int32_t g)
{
    int32_t y = Y;
    ad_give(A, i, 0, MUL(g, ADD(MUL(y, y), KK(1.0))));
    return 0;
}
static int r_tanh(ad *A, int32_t i, int32_t g)
{
    int32_t y = Y;
    ad_give(A, i, 0, MUL(g, SUB(KK(1.0), MUL(y, y))));
    return 0;
}
static int r_sigmoid(ad *A, int32_t i, int32_t g)
{
    int32_t y = Y;
    ad_give(A, i, 0, MUL(MUL(g, SUB(KK(1.0), y)), y));
    return 0;
}
/* e^(-s x^2) scaled: erf, erfc, ndtr */
static int32_t gauss(ad *A, int32_t x, double s, double c)
{
    return MUL(KK(c), ad_op1(A, SMELT_OP_EXP, MUL(MUL(x, x), KK(-s))));
}
static int r_erf(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, MUL(g, gauss(A, X(0), 1.0, M_2_SQRTPI))); return 0; }
static int r_erfc(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, MUL(g, gauss(A, X(0), 1.0, -M_2_SQRTPI))); return 0; }
static int r_ndtr(ad *A, int32_t i, int32_t g)
{
    ad_give(A, i, 0, MUL(g, gauss(A, X(0), 0.5, 0.5 * M_2_SQRTPI * M_SQRT1_2)));
    return 0;
}
static int r_relu(ad *A, int32_t i, int32_t g)
{
    ad_give(A, i, 0, ad_where(A, ad_op2(A, SMELT_OP_GT, Y, KK(0.0)), g, KK(0.0)));
    return 0;
}
static int r_zero(ad *A, int32_t i, int32_t g) { (void)A, (void)i, (void)g; return 0; }
static int r_reciprocal(ad *A, int32_t i, int32_t g)
{
    int32_t y = Y;
    ad_give(A, i, 0, MUL(NEG(g), MUL(y, y)));
    return 0;
}
static int r_cast(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, g); return 0; }
static int r_clamp(ad *A, int32_t i, int32_t g)
{
    int32_t x = X(0), m = -1;
    if (N->a.clamp.has_lo)
        m = ad_op2(A, SMELT_OP_GE, x, KK(N->a.clamp.flo));
    if (N->a.clamp.has_hi) {
        int32_t h = ad_op2(A, SMELT_OP_LE, x, KK(N->a.clamp.fhi));
        m = m < 0 ? h : ad_op2(A, SMELT_OP_LOGICAL_AND, m, h);
    }
    ad_give(A, i, 0, m < 0 ? g : ad_where(A, m, g, KK(0.0)));
    return 0;
}
/* 1 + s x^2 */
static int32_t one_plus_sq(ad *A, int32_t x, double s) { return ADD(MUL(MUL(x, x), KK(s)), KK(1.0)); }
static int r_acos(ad *A, int32_t i, int32_t g)
{
    ad_give(A, i, 0, MUL(g, NEG(ad_op1(A, SMELT_OP_RSQRT, one_plus_sq(A, X(0), -1.0)))));
    return 0;
}
static int r_asin(ad *A, int32_t i, int32_t g)
{
    ad_give(A, i, 0, MUL(g, ad_op1(A, SMELT_OP_RSQRT, one_plus_sq(A, X(0), -1.0))));
    return 0;
}
static int r_atan(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, DIV(g, one_plus_sq(A, X(0), 1.0))); return 0; }
static int r_acosh(ad *A, int32_t i, int32_t g)
{
    int32_t x = X(0);
    ad_give(A, i, 0, MUL(g, ad_op1(A, SMELT_OP_RSQRT, SUB(MUL(x, x), KK(1.0)))));
    return 0;
}
static int r_asinh(ad *A, int32_t i, int32_t g)
{
    ad_give(A, i, 0, MUL(g, ad_op1(A, SMELT_OP_RSQRT, one_plus_sq(A, X(0), 1.0))));
    return 0;
}
static int r_atanh(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, DIV(g, one_plus_sq(A, X(0), -1.0))); return 0; }
static int r_cosh(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, MUL(g, ad_op1(A, SMELT_OP_SINH, X(0)))); return 0; }
static int r_sinh(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, MUL(g, ad_op1(A, SMELT_OP_COSH, X(0)))); return 0; }
/* torch's gelu_backward, tanh form: 0.5 (1 + t) + 0.5 x (1 - t^2) b (1 + 3 k x^2) */
static int r_gelu_tanh(ad *A, int32_t i, int32_t g)
{
    const double b = M_SQRT2 * M_2_SQRTPI * 0.5, k = 0.044715;
    int32_t x = X(0), x2 = MUL(x, x);
    int32_t t = ad_op1(A, SMELT_OP_TANH, MUL(KK(b), ADD(x, MUL(KK(k), MUL(x2, x)))));
    int32_t left = MUL(KK(0.5), x), dl = MUL(KK(0.5), ADD(KK(1.0), t));
    int32_t dr = MUL(SUB(KK(1.0), MUL(t, t)), MUL(KK(b), ADD(KK(1.0), MUL(KK(3.0 * k), x2))));
    ad_give(A, i, 0, MUL(g, ADD(dl, MUL(left, dr))));
    return 0;
}

/* ---------- binary and ternary pointwise ---------- */

static int r_add(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, g); ad_give(A, i, 1, g); return 0; }
static int r_sub(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, g); ad_give(A, i, 1, NEG(g)); return 0; }
static int r_mul(ad *A, int32_t i, int32_t g)
{
    if (A->req[N->src[0]])
        ad_give(A, i, 0, MUL(g, X(1)));
    if (A->req[N->src[1]])
        ad_give(A, i, 1, MUL(g, X(0)));
    return 0;
}
static int r_div(ad *A, int32_t i, int32_t g)
{
    int32_t b = X(1);
    if (A->req[N->src[0]])
        ad_give(A, i, 0, DIV(g, b));
    if (A->req[N->src[1]])
        ad_give(A, i, 1, DIV(MUL(NEG(g), X(0)), MUL(b, b)));
    return 0;
}
static int r_pow(ad *A, int32_t i, int32_t g)
{
    const smelt_node *e = &A->g->nodes[N->src[1]];
    if (A->req[N->src[0]]) {
        int32_t a = X(0), c;
        if (e->op == SMELT_OP_SCALAR) {
            double v = smelt_dtype_is_float((smelt_dtype)e->dtype) ? e->a.scalar.f : (double)e->a.scalar.i;
            c = v == 0.0 ? -1 : MUL(g, MUL(KK(v), ad_op2(A, SMELT_OP_POW, a, KK(v - 1.0))));
        } else {
            int32_t b = X(1);
            c = ad_where(A, ad_op2(A, SMELT_OP_EQ, b, KK(0.0)), KK(0.0),
                         MUL(g, MUL(b, ad_op2(A, SMELT_OP_POW, a, SUB(b, KK(1.0))))));
        }
        if (c >= 0)
            ad_give(A, i, 0, c);
    }
    if (A->req[N->src[1]]) {
        int32_t y = Y, la, zero_base;
        if (src_is_scalar(A, i, 0)) {
            const smelt_node *s = &A->g->nodes[N->src[0]];
            double v = smelt_dtype_is_float((smelt_dtype)s->dtype) ? s->a.scalar.f : (double)s->a.scalar.i;
            la = KK(log(v));
            zero_base = v == 0.0 ? ad_op2(A, SMELT_OP_GE, X(1), KK(0.0)) : -2;
        } else {
            int32_t a = X(0);
            la = ad_op1(A, SMELT_OP_LOG, a);
            zero_base = ad_op2(A, SMELT_OP_LOGICAL_AND, ad_op2(A, SMELT_OP_EQ, a, KK(0.0)),
                               ad_op2(A, SMELT_OP_GE, X(1), KK(0.0)));
        }
        int32_t c = MUL(y, la);
        if (zero_base != -2)
            c = ad_where(A, zero_base, KK(0.0), c);
        ad_give(A, i, 1, MUL(g, c));
    }
    return 0;
}
/* maximum / minimum: ties split the gradient in halves (derivatives.yaml) */
static int r_maxmin(ad *A, int32_t i, int32_t g)
{
    int is_max = N->op == SMELT_OP_MAXIMUM;
    int32_t a = X(0), b = X(1);
    int32_t h = ad_where(A, ad_op2(A, SMELT_OP_EQ, a, b), DIV(g, KK(2.0)), g);
    smelt_op lose_a = is_max ? SMELT_OP_LT : SMELT_OP_GT, lose_b = is_max ? SMELT_OP_GT : SMELT_OP_LT;
    if (A->req[N->src[0]])
        ad_give(A, i, 0, ad_where(A, ad_op2(A, lose_a, a, b), KK(0.0), h));
    if (A->req[N->src[1]])
        ad_give(A, i, 1, ad_where(A, ad_op2(A, lose_b, a, b), KK(0.0), h));
    return 0;
}
static int r_fmod_rem(ad *A, int32_t i, int32_t g)
{
    ad_give(A, i, 0, g);
    if (A->req[N->src[1]]) {
        smelt_op q = N->op == SMELT_OP_FMOD ? SMELT_OP_TRUNC : SMELT_OP_FLOOR;
        int32_t d = N->op == SMELT_OP_FMOD ? ad_op1(A, q, DIV(X(0), X(1))) : ad_op2(A, SMELT_OP_FLOORDIV, X(0), X(1));
        ad_give(A, i, 1, MUL(NEG(g), d));
    }
    return 0;
}
static int r_atan2(ad *A, int32_t i, int32_t g)
{
    int32_t a = X(0), b = X(1);
    int32_t r = ad_op1(A, SMELT_OP_RECIPROCAL, ADD(MUL(a, a), MUL(b, b)));
    if (A->req[N->src[0]])
        ad_give(A, i, 0, MUL(MUL(g, b), r));
    if (A->req[N->src[1]])
        ad_give(A, i, 1, MUL(MUL(g, NEG(a)), r));
    return 0;
}
static int r_where(ad *A, int32_t i, int32_t g)
{
    int32_t c = X(0);
    if (A->req[N->src[1]])
        ad_give(A, i, 1, ad_where(A, c, g, KK(0.0)));
    if (A->req[N->src[2]])
        ad_give(A, i, 2, ad_where(A, c, KK(0.0), g));
    return 0;
}

/* ---------- reductions ---------- */

/* x (node i's shape) back to i's source shape: the reduced dims restored
 * as 1s, then broadcast */
static int32_t unreduce(ad *A, int32_t i, int32_t x)
{
    const smelt_node *s = &A->g->nodes[N->src[0]];
    int64_t keep[SMELT_MAX_DIMS];
    for (int d = 0; d < s->ndim; d++)
        keep[d] = N->a.red.dims >> d & 1 ? 1 : s->shape[d];
    x = ad_shaped(A, SMELT_OP_RESHAPE, x, s->ndim, keep);
    return ad_shaped(A, SMELT_OP_EXPAND, x, s->ndim, s->shape);
}

static double reduced_count(ad *A, int32_t i)
{
    const smelt_node *s = &A->g->nodes[N->src[0]];
    double c = 1;
    for (int d = 0; d < s->ndim; d++)
        if (N->a.red.dims >> d & 1)
            c *= (double)s->shape[d];
    return c;
}

static int r_sum(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, unreduce(A, i, g)); return 0; }
static int r_mean(ad *A, int32_t i, int32_t g)
{
    ad_give(A, i, 0, DIV(unreduce(A, i, g), KK(reduced_count(A, i))));
    return 0;
}
/* first (max pooling): the gradient goes to the first extreme in
 * row-major order over the reduced (trailing) dims: the first position
 * where the source equals the result (or is NaN), an AMIN over positions
 * in the source's dtype (a result-sized float reduction, then read once
 * per element of the source-sized gradient) */
static int32_t first_extreme(ad *A, int32_t i, int32_t g)
{
    const smelt_node *s = &A->g->nodes[N->src[0]];
    int nd = s->ndim;
    uint32_t dims = N->a.red.dims;
    int32_t pos = -1;
    double count = 1;
    for (int d = nd - 1; d >= 0; d--) {
        if (!(dims >> d & 1))
            continue;
        smelt_node io = { .op = SMELT_OP_IOTA, .dtype = s->dtype, .ndim = (uint8_t)nd };
        for (int e = 0; e < nd; e++)
            io.shape[e] = e == d ? s->shape[d] : 1;
        io.a.axis.dim = d;
        int32_t p = MUL(ad_add(A, &io), KK(count));
        pos = pos < 0 ? p : ADD(pos, p);
        count *= (double)s->shape[d];
    }
    int32_t x = X(0);
    int32_t at = ad_op2(A, SMELT_OP_LOGICAL_OR, ad_op2(A, SMELT_OP_EQ, x, unreduce(A, i, Y)),
                        ad_op1(A, SMELT_OP_ISNAN, x));
    int32_t first = ad_red(A, SMELT_OP_AMIN, ad_where(A, at, pos, KK(count)), dims, 1);
    return ad_where(A, ad_op2(A, SMELT_OP_EQ, first, pos), unreduce(A, i, g), KK(0.0));
}

/* ties share the gradient equally (amax/amin's backward) */
static int r_amaxmin(ad *A, int32_t i, int32_t g)
{
    const smelt_node *s = &A->g->nodes[N->src[0]];
    if (N->a.red.first && s->ndim > 0) {
        ad_give(A, i, 0, g < 0 ? -1 : first_extreme(A, i, g));
        return 0;
    }
    int32_t x = X(0), mask = ad_op2(A, SMELT_OP_EQ, x, unreduce(A, i, Y));
    int32_t m = ad_cast(A, mask, (smelt_dtype)s->dtype);
    int32_t cnt = ad_red(A, SMELT_OP_SUM, m, N->a.red.dims, 1);
    int32_t ge = unreduce(A, i, g);
    ad_give(A, i, 0, MUL(DIV(ge, ad_shaped(A, SMELT_OP_EXPAND, cnt, s->ndim, s->shape)), m));
    return 0;
}
/* var: 2 / (n - correction) g (x - mean); std: var's with g / (2 std) */
static int r_var_std(ad *A, int32_t i, int32_t g)
{
    const smelt_node *s = &A->g->nodes[N->src[0]];
    int32_t x = X(0);
    if (N->op == SMELT_OP_STD)
        g = DIV(g, MUL(Y, KK(2.0)));
    int32_t mean = ad_red(A, SMELT_OP_MEAN, x, N->a.red.dims, 1);
    int32_t dx = SUB(x, ad_shaped(A, SMELT_OP_EXPAND, mean, s->ndim, s->shape));
    double dof = reduced_count(A, i) - (double)N->a.red.correction;
    ad_give(A, i, 0, MUL(MUL(KK(2.0 / dof), unreduce(A, i, g)), dx));
    return 0;
}

/* ---------- views and copies ---------- */

static int r_reshape(ad *A, int32_t i, int32_t g)
{
    const smelt_node *s = &A->g->nodes[N->src[0]];
    ad_give(A, i, 0, ad_shaped(A, SMELT_OP_RESHAPE, g, s->ndim, s->shape));
    return 0;
}
static int32_t transposed(ad *A, int32_t x);

/* 1 if perm swaps the last two of nd dims and keeps the others */
static int is_last_two_swap(const int8_t *perm, int nd)
{
    if (nd < 2 || perm[nd - 2] != nd - 1 || perm[nd - 1] != nd - 2)
        return 0;
    for (int d = 0; d < nd - 2; d++)
        if (perm[d] != d)
            return 0;
    return 1;
}

/* The inverse permutation; a transposed matmul gradient (a weight used as
 * W^T: (x^T g)^T) is built as g^T x instead, so it comes out contiguous
 * and no transposing copy follows. */
static int r_permute(ad *A, int32_t i, int32_t g)
{
    int8_t inv[SMELT_MAX_DIMS] = { 0 };
    for (int d = 0; d < N->ndim; d++)
        inv[N->a.perm.perm[d]] = (int8_t)d;
    if (g >= 0 && ad_node(A, g)->op == SMELT_OP_MATMUL && is_last_two_swap(N->a.perm.perm, N->ndim)) {
        const smelt_node *m = ad_node(A, g);
        int32_t a = m->src[0], b = m->src[1];
        ad_give(A, i, 0, ad_op2(A, SMELT_OP_MATMUL, transposed(A, b), transposed(A, a)));
        return 0;
    }
    ad_give(A, i, 0, ad_permute(A, g, inv));
    return 0;
}
static int r_expand(ad *A, int32_t i, int32_t g) { ad_give(A, i, 0, g); return 0; }
static int r_flip(ad *A, int32_t i, int32_t g)
{
    smelt_node p = { .op = SMELT_OP_FLIP, .nsrc = 1, .src = { g } };
    p.a.axis.dim = N->a.axis.dim;
    ad_give(A, i, 0, g < 0 ? -1 : ad_add(A, &p));
    return 0;
}
/* zeros, g, zeros along the sliced dim (step 1) */
/* A strided slice's gradient over [start, start + len) of the source's
 * dim: g with step - 1 zeros after each element (a dim of size step
 * appended beside dim, merged into it), cut to len. Index rewrites. */
static int32_t spread(ad *A, int32_t i, int32_t g, int64_t *len)
{
    const smelt_node *s = &A->g->nodes[N->src[0]];
    int dim = N->a.slice.dim, nd = N->ndim;
    int64_t step = N->a.slice.step, count = N->shape[dim], sh[SMELT_MAX_DIMS];
    *len = count * step < s->shape[dim] - N->a.slice.start ? count * step : s->shape[dim] - N->a.slice.start;
    if (nd + 1 > SMELT_MAX_DIMS || g < 0)
        return -1;
    for (int d = 0, k = 0; d <= nd; d++)
        sh[d] = d == dim + 1 ? 1 : N->shape[k++];
    smelt_node p = { .op = SMELT_OP_CAT, .nsrc = 2 };
    p.a.axis.dim = dim + 1;
    p.src[0] = ad_shaped(A, SMELT_OP_RESHAPE, g, nd + 1, sh);
    sh[dim + 1] = step - 1;
    p.src[1] = ad_full(A, (smelt_dtype)N->dtype, nd + 1, sh, 0.0);
    if (p.src[0] < 0 || p.src[1] < 0)
        return -1;
    memcpy(sh, N->shape, sizeof sh);
    sh[dim] = count * step;
    int32_t t = ad_shaped(A, SMELT_OP_RESHAPE, ad_add(A, &p), nd, sh);
    if (t < 0 || *len == count * step)
        return t;
    smelt_node c = { .op = SMELT_OP_SLICE, .nsrc = 1, .src = { t } };
    c.a.slice.dim = dim, c.a.slice.start = 0, c.a.slice.end = *len, c.a.slice.step = 1;
    return ad_add(A, &c);
}

/* a slice: its gradient, zeros before and after (CAT: index rewrites) */
static int r_slice(ad *A, int32_t i, int32_t g)
{
    const smelt_node *s = &A->g->nodes[N->src[0]];
    int dim = N->a.slice.dim;
    int64_t len = N->a.slice.end - N->a.slice.start;
    if (N->a.slice.step != 1 && N->shape[dim] == 0)
        g = ad_full(A, (smelt_dtype)N->dtype, s->ndim, s->shape, 0.0), len = s->shape[dim];
    else if (N->a.slice.step != 1)
        g = spread(A, i, g, &len);
    if (g < 0)
        return 0;
    int64_t shape[SMELT_MAX_DIMS];
    memcpy(shape, s->shape, sizeof shape);
    smelt_node p = { .op = SMELT_OP_CAT };
    p.a.axis.dim = dim;
    int64_t lo = N->shape[dim] == 0 && N->a.slice.step != 1 ? 0 : N->a.slice.start;
    int64_t hi = s->shape[dim] - lo - len;
    if (lo > 0) {
        shape[dim] = lo;
        p.src[p.nsrc++] = ad_full(A, (smelt_dtype)N->dtype, s->ndim, shape, 0.0);
    }
    p.src[p.nsrc++] = g;
    if (hi > 0) {
        shape[dim] = hi;
        p.src[p.nsrc++] = ad_full(A, (smelt_dtype)N->dtype, s->ndim, shape, 0.0);
    }
    for (int k = 0; k < p.nsrc; k++)
        if (p.src[k] < 0)
            return 0;
    ad_give(A, i, 0, p.nsrc == 1 ? g : ad_add(A, &p));
    return 0;
}
static int r_cat(ad *A, int32_t i, int32_t g)
{
    int dim = N->a.axis.dim;
    int64_t off = 0;
    for (int k = 0; k < N->nsrc; k++) {
        int64_t sz = A->g->nodes[N->src[k]].shape[dim];
        if (A->req[N->src[k]]) {
            smelt_node p = { .op = SMELT_OP_SLICE, .nsrc = 1, .src = { g } };
            p.a.slice.dim = dim;
            p.a.slice.start = off;
            p.a.slice.end = off + sz;
            p.a.slice.step = 1;
            ad_give(A, i, k, g < 0 ? -1 : ad_add(A, &p));
        }
        off += sz;
    }
    return 0;
}
/* the last two dims swapped */
static int32_t transposed(ad *A, int32_t x)
{
    if (x < 0)
        return -1;
    int nd = ad_node(A, x)->ndim;
    int8_t perm[SMELT_MAX_DIMS] = { 0 };
    for (int d = 0; d < nd; d++)
        perm[d] = (int8_t)d;
    perm[nd - 2] = (int8_t)(nd - 1);
    perm[nd - 1] = (int8_t)(nd - 2);
    return ad_permute(A, x, perm);
}
static int r_matmul(ad *A, int32_t i, int32_t g)
{
    const smelt_node *an = &A->g->nodes[N->src[0]], *bn = &A->g->nodes[N->src[1]];
    if (A->req[N->src[0]])
        ad_give(A, i, 0, ad_op2(A, SMELT_OP_MATMUL, g, transposed(A, X(1))));
    if (A->req[N->src[1]]) {
        int32_t a = X(0), c;
        if (bn->ndim == 2 && an->ndim > 2) {   /* x [.., m, k] @ w [k, n]: one [k, rows] @ [rows, n] */
            int64_t k = an->shape[an->ndim - 1], nn = bn->shape[1];
            int32_t a2 = ad_shaped(A, SMELT_OP_RESHAPE, a, 2, (int64_t[]){ -1, k });
            int32_t g2 = ad_shaped(A, SMELT_OP_RESHAPE, g, 2, (int64_t[]){ -1, nn });
            c = ad_op2(A, SMELT_OP_MATMUL, transposed(A, a2), g2);
        } else {
            c = ad_op2(A, SMELT_OP_MATMUL, transposed(A, a), g);
        }
        ad_give(A, i, 1, c);
    }
    return 0;
}
/* torch.gather's backward is a scatter-add: here a one-hot sum over the
 * gathered entries, d[.., K, J, ..] = (index[.., K, 1, ..] == j) g, summed
 * over K (K x J elements per row: bounded) */
static int r_gather(ad *A, int32_t i, int32_t g)
{
    const smelt_node *s = &A->g->nodes[N->src[0]], *ix = &A->g->nodes[N->src[1]];
    int dim = N->a.gather.dim, nd = s->ndim;
    const smelt_node *base = ix->op == SMELT_OP_EXPAND ? &A->g->nodes[ix->src[0]] : NULL;
    int rows = dim == 0 && base && base->ndim == nd && nd >= 2;
    for (int d = 1; rows && d < nd; d++)
        rows = base->shape[d] == 1 && ix->shape[d] == s->shape[d];
    if (rows) {   /* whole rows selected (embedding, index_select): their gradients summed at the indices */
        int64_t m = ix->shape[0], cols = smelt_node_numel(N) / (m ? m : 1);
        int32_t ids = ad_shaped(A, SMELT_OP_RESHAPE, ad_val(A, ix->src[0]), 1, &m);
        if (N->a.gather.wrap)
            ids = ad_where(A, ad_op2(A, SMELT_OP_LT, ids, ad_k(A, 0.0)), ADD(ids, KK((double)s->shape[0])), ids);
        int32_t g2 = ad_shaped(A, SMELT_OP_RESHAPE, g, 2, (int64_t[]){ m, cols });
        int64_t sh[1][SMELT_MAX_DIMS] = { { s->shape[0], cols } }, p[2] = { s->shape[0], 0 };
        int32_t prior = A->grad[N->src[0]], src[3] = { g2, ids, -1 };
        if (prior >= 0 && g2 >= 0 && ad_node(A, prior)->dtype == ad_node(A, g2)->dtype) {
            /* rows added into the gradient so far (a tied embedding's lm_head product): one copy, not zeros
             * then an add pass */
            src[2] = ad_shaped(A, SMELT_OP_RESHAPE, prior, 2, sh[0]);
            p[1] = 1;
        }
        int32_t c = ad_host_call(A, AD_CALL_INDEX_ADD_ROWS, 2 + (int)p[1], src, 1, (int32_t[]){ -1 },
                                 (const int64_t(*)[SMELT_MAX_DIMS])sh, (int[]){ 2 }, 2, p);
        if (p[1])
            A->grad[N->src[0]] = ad_shaped(A, SMELT_OP_RESHAPE, c, nd, s->shape);
        else
            ad_give(A, i, 0, ad_shaped(A, SMELT_OP_RESHAPE, c, nd, s->shape));
        return 0;
    }
    for (int d = 0; d < nd; d++)
        if (d != dim && ix->shape[d] != s->shape[d])
            return 1;
    int one = ix->shape[dim] == 1;   /* one index per row (cross-entropy's label): no sum over indices */
    if (!one && (nd + 1 > SMELT_MAX_DIMS || smelt_node_numel(N) * s->shape[dim] > ((int64_t)1 << 26)))
        return 1;
    int32_t idx = X(1);
    if (N->a.gather.wrap)
        idx = ad_where(A, ad_op2(A, SMELT_OP_LT, idx, ad_k(A, 0.0)), ADD(idx, KK((double)s->shape[dim])), idx);
    if (one) {   /* where(idx == iota along dim, g, 0), both broadcast along dim */
        smelt_node io = { .op = SMELT_OP_IOTA, .dtype = SMELT_I64, .ndim = (uint8_t)nd };
        for (int d = 0; d < nd; d++)
            io.shape[d] = d == dim ? s->shape[dim] : 1;
        io.a.axis.dim = dim;
        ad_give(A, i, 0, ad_where(A, ad_op2(A, SMELT_OP_EQ, idx, ad_add(A, &io)), g, KK(0.0)));
        return 0;
    }
    smelt_node u = { .op = SMELT_OP_UNSQUEEZE, .nsrc = 1 };
    u.a.axis.dim = dim + 1;
    u.src[0] = idx;
    int32_t iu = idx < 0 ? -1 : ad_add(A, &u);
    u.src[0] = g;
    int32_t gu = g < 0 ? -1 : ad_add(A, &u);
    int64_t shape[SMELT_MAX_DIMS];   /* iota: [1, .., 1, J, 1, ..], J at dim + 1 */
    for (int d = 0; d <= nd; d++)
        shape[d] = d == dim + 1 ? s->shape[dim] : 1;
    smelt_node io = { .op = SMELT_OP_IOTA, .dtype = SMELT_I64, .ndim = (uint8_t)(nd + 1) };
    memcpy(io.shape, shape, sizeof shape);
    io.a.axis.dim = dim + 1;
    int32_t iota = ad_add(A, &io);
    int32_t hit = ad_op2(A, SMELT_OP_EQ, iu, iota);
    int32_t d = ad_where(A, hit, gu, KK(0.0));
    ad_give(A, i, 0, ad_red(A, SMELT_OP_SUM, d, 1u << dim, 0));
    return 0;
}

/* convolution: CONV_BWD_INPUT and CONV_BWD_WEIGHT (oneDNN's backward-data
 * and backward-weights primitives) for the sources that need a gradient;
 * the bias's gradient is g summed over every dim but the channels */
static int r_conv(ad *A, int32_t i, int32_t g)
{
    const smelt_node *x = &A->g->nodes[N->src[0]], *w = &A->g->nodes[N->src[1]];
    smelt_node b = { .nsrc = 2 };
    b.a.conv = N->a.conv;
    if (A->req[N->src[0]]) {
        b.op = SMELT_OP_CONV_BWD_INPUT, b.ndim = x->ndim;
        memcpy(b.shape, x->shape, sizeof b.shape);
        b.src[0] = g, b.src[1] = X(1);
        ad_give(A, i, 0, g < 0 || b.src[1] < 0 ? -1 : ad_add(A, &b));
    }
    if (A->req[N->src[1]]) {
        b.op = SMELT_OP_CONV_BWD_WEIGHT, b.ndim = w->ndim;
        memcpy(b.shape, w->shape, sizeof b.shape);
        b.src[0] = X(0), b.src[1] = g;
        ad_give(A, i, 1, g < 0 || b.src[0] < 0 ? -1 : ad_add(A, &b));
    }
    if (N->nsrc == 3 && A->req[N->src[2]])
        ad_give(A, i, 2, ad_red(A, SMELT_OP_SUM, g, ((1u << N->ndim) - 1) & ~2u, 0));
    return 0;
}

/* Tensor.unfold: overlapping windows summed back (torch's unfold_backward,
 * a host call); dilated windows have no rule */
static int r_unfold(ad *A, int32_t i, int32_t g)
{
    const smelt_node *s = &A->g->nodes[N->src[0]];
    int dim = N->a.unfold.dim, nd = s->ndim;
    int64_t size = N->a.unfold.size, count = N->shape[dim];
    if (N->a.unfold.step == size && N->a.unfold.dil == 1 && g >= 0) {
        /* windows that tile the dim (max/avg pooling with stride = kernel):
         * each element in at most one window, so the gradient is g with the
         * window dim put back beside `dim` and merged into it, zeros for an
         * uncovered tail: index rewrites that fuse */
        int8_t perm[SMELT_MAX_DIMS] = { 0 };
        for (int d = 0, k = 0; d <= nd; d++)
            perm[d] = (int8_t)(d == dim + 1 ? nd : k++);
        int64_t shape[SMELT_MAX_DIMS];
        memcpy(shape, s->shape, sizeof shape);
        shape[dim] = count * size;
        int32_t t = ad_shaped(A, SMELT_OP_RESHAPE, ad_permute(A, g, perm), nd, shape);
        if (count * size < s->shape[dim] && t >= 0) {
            smelt_node p = { .op = SMELT_OP_CAT, .nsrc = 2 };
            p.a.axis.dim = dim;
            shape[dim] = s->shape[dim] - count * size;
            p.src[0] = t;
            p.src[1] = ad_full(A, (smelt_dtype)N->dtype, nd, shape, 0.0);
            t = p.src[1] < 0 ? -1 : ad_add(A, &p);
        }
        ad_give(A, i, 0, t);
        return 0;
    }
    if (N->a.unfold.dil != 1 || s->ndim + 4 > AD_CALL_MAX_PARAMS)
        return 1;
    int64_t p[AD_CALL_MAX_PARAMS];
    int np = 0;
    p[np++] = s->ndim;
    for (int d = 0; d < s->ndim; d++)
        p[np++] = s->shape[d];
    p[np++] = N->a.unfold.dim;
    p[np++] = N->a.unfold.size;
    p[np++] = N->a.unfold.step;
    ad_give(A, i, 0, ad_host_call(A, AD_CALL_UNFOLD_BACKWARD, 1, &g, 1, (int32_t[]){ N->src[0] }, NULL, NULL, np, p));
    return 0;
}

/* Elements [at, at + numel(shape)) of the vector x as a tensor of shape. */
static int32_t vector_part(ad *A, int32_t x, int64_t at, int nd, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= shape[d];
    smelt_node p = { .op = SMELT_OP_SLICE, .nsrc = 1, .src = { x } };
    p.a.slice.dim = 0, p.a.slice.start = at, p.a.slice.end = at + n, p.a.slice.step = 1;
    return ad_shaped(A, SMELT_OP_RESHAPE, x < 0 ? -1 : ad_add(A, &p), nd, shape);
}

/* flex attention: FLEX_BWD, the flash backward with the score
 * function's derivative applied per tile (its tile kernels), dq, dk, dv in
 * one vector, dk and dv per query head (summed over the heads sharing a
 * key head); the gradient of the whole result goes in, the log-sum-exp's
 * column too. (The tracer decomposes a score function that reads a
 * tensor needing a gradient.) */
static int r_flex(ad *A, int32_t i, int32_t g)
{
    const smelt_node *n = N;
    for (int k = 3; k < n->nsrc; k++)
        if (A->req[n->src[k]])
            return 1;
    if (smelt_flex_src(n, SMELT_FLEX_SCORE) >= 0 && smelt_flex_src(n, SMELT_FLEX_DSCORE) < 0 &&
        !(n->a.flex.parts & SMELT_FLEX_DSCORE_ONE))
        return 1;   /* a score function with an op the tracer has no derivative for */
    const smelt_node *qn = &A->g->nodes[n->src[0]], *kn = &A->g->nodes[n->src[1]];
    int64_t B = qn->shape[0], H = qn->shape[1], L = qn->shape[2], E = qn->shape[3];
    int64_t Hk = kn->shape[1], S = kn->shape[2], Ev = n->shape[3] - 1;
    smelt_node b = { .op = SMELT_OP_FLEX_BWD, .nsrc = 5 };
    b.a.flex = n->a.flex;
    b.src[3] = Y;
    b.src[4] = g;
    for (int k = 0; k < n->nsrc; k++)
        if ((b.src[k < 3 ? k : k + 2] = X(k)) < 0 || b.src[3] < 0 || b.src[4] < 0)
            return 0;
    b.nsrc = (uint8_t)(n->nsrc + 2);
    int32_t all = ad_add(A, &b);
    int64_t sh[4] = { B, H, L, E };
    if (A->req[n->src[0]])
        ad_give(A, i, 0, vector_part(A, all, 0, 4, sh));
    int64_t at = B * H * L * E, part[2] = { E, Ev };
    for (int s = 1; s < 3; s++) {
        int64_t ph[5] = { B, Hk, H / Hk, S, part[s - 1] };
        if (A->req[n->src[s]]) {   /* [B, H, S, *] summed over each key head's query heads */
            int32_t x = vector_part(A, all, at, 5, ph);
            ad_give(A, i, s, ad_red(A, SMELT_OP_SUM, x, 1u << 2, 0));
        }
        at += B * H * S * part[s - 1];
    }
    return 0;
}

/* attention: SDPA_BWD, the flash-style kernel (probabilities recomputed
 * block by block from q, k, the mask and out), gives dq, dk and dv in one
 * vector; dk and dv over q's batch dims (ad_give sums where k and v
 * broadcast). */
static int r_sdpa(ad *A, int32_t i, int32_t g)
{
    int32_t q = X(0), k = X(1), v = X(2), mask = N->nsrc == 4 ? X(3) : -1;
    double scale = N->a.sdpa.scale;
    if (mask < 0 || !A->req[N->src[3]]) {
        smelt_node b = { .op = SMELT_OP_SDPA_BWD, .nsrc = (uint8_t)(N->nsrc + 2), .src = { q, k, v, Y, g, mask } };
        b.a.sdpa = N->a.sdpa;
        for (int s = 0; s < b.nsrc; s++)
            if (b.src[s] < 0)
                return 0;
        int32_t all = ad_add(A, &b);
        int nd = N->ndim;
        int64_t sh[SMELT_MAX_DIMS], at = 0;
        memcpy(sh, N->shape, sizeof sh);
        int64_t L = sh[nd - 2], Ev = sh[nd - 1], S = ad_node(A, k)->shape[nd - 2], E = ad_node(A, q)->shape[nd - 1];
        int64_t batch = 1;
        for (int d = 0; d < nd - 2; d++)
            batch *= sh[d];
        int64_t part[3][2] = { { L, E }, { S, E }, { S, Ev } };
        for (int s = 0; s < 3; s++) {
            sh[nd - 2] = part[s][0], sh[nd - 1] = part[s][1];
            if (A->req[N->src[s]])
                ad_give(A, i, s, vector_part(A, all, at, nd, sh));
            at += batch * part[s][0] * part[s][1];
        }
        return 0;
    }
    /* a mask that needs a gradient (dmask = ds): the probabilities
     * recomputed in the backward graph, then the softmax and matmul rules
     * by hand: dv = p^T g, dp = g v^T, ds = p (dp - rowsum(dp p)),
     * dq = ds k scale, dk = ds^T q scale (the score matrix materialised) */
    int32_t sc = MUL(ad_op2(A, SMELT_OP_MATMUL, q, transposed(A, k)), KK(scale));
    if (sc < 0)
        return 0;
    const smelt_node *sn = ad_node(A, sc);
    int nd = sn->ndim;
    if (N->a.sdpa.causal) {   /* key j attends query i when j <= i */
        int64_t shl[SMELT_MAX_DIMS], shs[SMELT_MAX_DIMS];
        for (int d = 0; d < nd; d++)
            shl[d] = shs[d] = 1;
        shl[nd - 2] = sn->shape[nd - 2];
        shs[nd - 1] = sn->shape[nd - 1];
        smelt_node il = { .op = SMELT_OP_IOTA, .dtype = SMELT_I64, .ndim = (uint8_t)nd }, is = il;
        memcpy(il.shape, shl, sizeof shl);
        il.a.axis.dim = nd - 2;
        memcpy(is.shape, shs, sizeof shs);
        is.a.axis.dim = nd - 1;
        int32_t keep = ad_op2(A, SMELT_OP_GE, ad_add(A, &il), ad_add(A, &is));
        sc = ad_where(A, keep, sc, KK(-INFINITY));
    }
    if (mask >= 0)
        sc = ad_node(A, mask)->dtype == SMELT_BOOL ? ad_where(A, mask, sc, KK(-INFINITY)) : ADD(sc, mask);
    uint32_t last = 1u << (nd - 1);
    int32_t e = ad_op1(A, SMELT_OP_EXP, SUB(sc, ad_red(A, SMELT_OP_AMAX, sc, last, 1)));
    int32_t p = DIV(e, ad_red(A, SMELT_OP_SUM, e, last, 1));
    if (A->req[N->src[2]])
        ad_give(A, i, 2, ad_op2(A, SMELT_OP_MATMUL, transposed(A, p), g));
    int32_t dp = ad_op2(A, SMELT_OP_MATMUL, g, transposed(A, v));
    int32_t ds = MUL(p, SUB(dp, ad_red(A, SMELT_OP_SUM, MUL(dp, p), last, 1)));
    if (A->req[N->src[0]])
        ad_give(A, i, 0, MUL(ad_op2(A, SMELT_OP_MATMUL, ds, k), KK(scale)));
    if (A->req[N->src[1]])
        ad_give(A, i, 1, MUL(ad_op2(A, SMELT_OP_MATMUL, transposed(A, ds), q), KK(scale)));
    if (mask >= 0 && A->req[N->src[3]])
        ad_give(A, i, 3, ds);
    return 0;
}

/* a host call of the forward: torch's own autograd over the call, run
 * again on the saved sources (AD_CALL_VJP). The last of its results that
 * has a gradient takes them all (the results before it are done by then:
 * their users all come after the call). */
static int r_call(ad *A, int32_t i, int32_t g)
{
    int k = N->a.call.out, nout = N->a.call.nout, nsrc = N->nsrc;
    int32_t first = i - k;
    (void)g;
    for (int j = k + 1; j < nout; j++)
        if (A->grad[first + j] >= 0)
            return 0;
    if (nsrc + nout > SMELT_MAX_SRC)
        return 1;
    int32_t src[SMELT_MAX_SRC], like[SMELT_MAX_SRC];
    for (int s = 0; s < nsrc; s++) {
        src[s] = X(s);
        like[s] = N->src[s];
    }
    for (int j = 0; j < nout; j++)
        src[nsrc + j] = A->grad[first + j] >= 0 ? A->grad[first + j] : ad_zeros_like_fwd(A, first + j);
    int64_t p[4] = { N->a.call.id, nsrc, nout, (int64_t)N->a.call.key };   /* the key: what the call does */
    int32_t c = ad_host_call(A, AD_CALL_VJP, nsrc + nout, src, nsrc, like, NULL, NULL, 4, p);
    for (int s = 0; s < nsrc; s++)
        if (A->req[N->src[s]])
            ad_give(A, i, s, c < 0 ? -1 : c + s);
    return 0;
}

static const ad_rule RULES[SMELT_NOPS] = {
    [SMELT_OP_NEG] = r_neg, [SMELT_OP_ABS] = r_abs, [SMELT_OP_EXP] = r_exp, [SMELT_OP_EXP2] = r_exp2,
    [SMELT_OP_EXPM1] = r_expm1, [SMELT_OP_LOG] = r_log, [SMELT_OP_LOG2] = r_log2, [SMELT_OP_LOG10] = r_log10,
    [SMELT_OP_LOG1P] = r_log1p, [SMELT_OP_SQRT] = r_sqrt, [SMELT_OP_RSQRT] = r_rsqrt, [SMELT_OP_SIN] = r_sin,
    [SMELT_OP_COS] = r_cos, [SMELT_OP_TAN] = r_tan, [SMELT_OP_TANH] = r_tanh, [SMELT_OP_SIGMOID] = r_sigmoid,
    [SMELT_OP_ERF] = r_erf, [SMELT_OP_ERFC] = r_erfc, [SMELT_OP_NDTR] = r_ndtr, [SMELT_OP_RELU] = r_relu,
    [SMELT_OP_FLOOR] = r_zero, [SMELT_OP_CEIL] = r_zero, [SMELT_OP_ROUND] = r_zero, [SMELT_OP_TRUNC] = r_zero,
    [SMELT_OP_SIGN] = r_zero, [SMELT_OP_FLOORDIV] = r_zero, [SMELT_OP_DETACH] = r_zero, [SMELT_OP_RECIPROCAL] = r_reciprocal,
    [SMELT_OP_CAST] = r_cast, [SMELT_OP_CLAMP] = r_clamp, [SMELT_OP_ACOS] = r_acos, [SMELT_OP_ASIN] = r_asin,
    [SMELT_OP_ATAN] = r_atan, [SMELT_OP_ACOSH] = r_acosh, [SMELT_OP_ASINH] = r_asinh, [SMELT_OP_ATANH] = r_atanh,
    [SMELT_OP_COSH] = r_cosh, [SMELT_OP_SINH] = r_sinh, [SMELT_OP_GELU_TANH] = r_gelu_tanh,
    [SMELT_OP_ADD] = r_add, [SMELT_OP_SUB] = r_sub, [SMELT_OP_MUL] = r_mul, [SMELT_OP_DIV] = r_div,
    [SMELT_OP_POW] = r_pow, [SMELT_OP_MAXIMUM] = r_maxmin, [SMELT_OP_MINIMUM] = r_maxmin,
    [SMELT_OP_FMOD] = r_fmod_rem, [SMELT_OP_REMAINDER] = r_fmod_rem, [SMELT_OP_ATAN2] = r_atan2,
    [SMELT_OP_WHERE] = r_where, [SMELT_OP_SUM] = r_sum, [SMELT_OP_MEAN] = r_mean, [SMELT_OP_AMAX] = r_amaxmin,
    [SMELT_OP_AMIN] = r_amaxmin, [SMELT_OP_VAR] = r_var_std, [SMELT_OP_STD] = r_var_std,
    [SMELT_OP_RESHAPE] = r_reshape, [SMELT_OP_SQUEEZE] = r_reshape, [SMELT_OP_UNSQUEEZE] = r_reshape,
    [SMELT_OP_PERMUTE] = r_permute, [SMELT_OP_EXPAND] = r_expand, [SMELT_OP_FLIP] = r_flip,
    [SMELT_OP_SLICE] = r_slice, [SMELT_OP_CAT] = r_cat, [SMELT_OP_MATMUL] = r_matmul,
    [SMELT_OP_GATHER] = r_gather, [SMELT_OP_CONV] = r_conv, [SMELT_OP_UNFOLD] = r_unfold,
    [SMELT_OP_SDPA] = r_sdpa, [SMELT_OP_CALL] = r_call, [SMELT_OP_FLEX] = r_flex,
};

ad_rule ad_rule_of(smelt_op op) { return op < SMELT_NOPS ? RULES[op] : NULL; }
