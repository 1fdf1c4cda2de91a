/* lower.c — graph IR to loop-level kernels (kir), with fusion.
 *
 * Entry: ind_lower(plan, opts). Contract: on success the plan holds buffers, the
 * kernels and the ordered steps (kernel runs and matmul calls) computing
 * every graph output into its output buffer.
 *
 * Which nodes are materialised ("realized") into buffers:
 *   inputs; outputs; CAT and MATMUL results; pointwise values with several
 *   consumers unless cheap to recompute; reductions with several consumers
 *   or that cannot fuse into their consumer's kernel.
 * Everything else is inlined: a realized node's kernel evaluates its value
 * at each output index by walking producers — views rewrite the index,
 * pointwise ops combine operand values, and a single-consumer reduction
 * becomes a REDUCE phase of the consumer's kernel when the consumer's loop
 * nest can host it (softmax, layer norm: one kernel each). A fusion that
 * fails realizes that reduction and lowering restarts.
 */
#include "plan.h"
#include "backend.h"
#include "kix.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHEAP_COST 8
#define MAX_PHASES 32

typedef struct phase_key {
    int32_t node, nk, result;
    int32_t kept[SMELT_MAX_DIMS];
} phase_key;

typedef struct lowering {
    smelt_plan *p;
    const smelt_graph *g;
    uint8_t *realized;
    int32_t *buf_of;       /* node -> buffer, -1 */
    int32_t *nuse;
    uint8_t *chlast;       /* node's temporary is stored channels-last */
    uint8_t *tile;         /* node depends on a FLEX_ARG: only ever computed in a flex tile kernel */
    int host_externs;      /* matmuls run on the CPU (kernels/matmul.c): they may take half-precision
                              operands with a float32 result (half_matmul) */
    const int32_t *flex_tile;   /* while one is built: its tile buffers (plan_flex.tile), else NULL */
    char *err;
    size_t errlen;
} lowering;

typedef struct kb {
    lowering *L;
    kir_kernel k;
    int32_t citems;
    int nr;
    int rvar[KIR_MAX_VARS];
    phase_key keys[MAX_PHASES];
    int nkeys;
    int32_t fail_node;     /* reduction to realize before retrying, or -1 */
    int error;             /* user-facing error already in L->err */
} kb;

static int32_t access(kb *b, int32_t node, const int32_t *idx);

/* ---------- small helpers ---------- */

static void contiguous_strides(int ndim, const int64_t *shape, int64_t *st)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= shape[d] > 1 ? shape[d] : 1;
    }
}

static smelt_dtype result_type(const smelt_graph *g, int n, const int32_t *src)
{
    const smelt_node *s[SMELT_MAX_SRC];
    for (int i = 0; i < n; i++)
        s[i] = &g->nodes[src[i]];
    return smelt_result_type(s, n, (smelt_dtype)g->default_float);
}

/* v rounded to float16/bfloat16 (through float32, as c10::Half and
 * c10::BFloat16 convert a double), round to nearest even; v itself for
 * other dtypes. */
static double half_value(double v, smelt_dtype dt)
{
    if ((dt != SMELT_F16 && dt != SMELT_BF16) || isnan(v))
        return v;
    float f = (float)v;
    if (dt == SMELT_BF16) {
        uint32_t u;
        memcpy(&u, &f, 4);
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        memcpy(&f, &u, 4);
        return f;
    }
    float a = fabsf(f);
    if (a >= 65520.0f)   /* past the midpoint above 65504: infinity */
        return copysign(INFINITY, f);
    if (a == 0)
        return f;
    int e;
    frexpf(a, &e);
    int q = e - 11 < -24 ? -24 : e - 11;   /* the spacing of float16 values near a: 2^q */
    return copysign(ldexpf(nearbyintf(ldexpf(a, -q)), q), f);
}

/* A constant of dtype dt: a float16/bfloat16 one holds its rounded value
 * (a tensor of that dtype), as every back end computes it in f32. */
static int32_t ex_const(kir_pool *P, smelt_dtype dt, double f, int64_t i)
{
    kexpr e = kexpr_blank(KE_CONST, dt);
    if (smelt_dtype_is_float(dt))
        e.f = half_value(f, dt);
    else
        e.i = i;
    return kexpr_intern(P, e);
}

static int32_t ex_op(kir_pool *P, smelt_op op, smelt_dtype dt, smelt_dtype cdt,
                     int32_t a, int32_t b, int32_t c)
{
    kexpr e = kexpr_blank(KE_OP, dt);
    e.gop = (uint16_t)op;
    e.cdtype = (uint8_t)cdt;
    e.src[0] = a;
    e.src[1] = b;
    e.src[2] = c;
    return kexpr_intern(P, e);
}

static int32_t ex_cast(kir_pool *P, int32_t a, smelt_dtype to)
{
    smelt_dtype from = P->ex[a].dtype;
    if (from == to)
        return a;
    return ex_op(P, SMELT_OP_CAST, to, from, a, -1, -1);
}

/* A count of elements (a mean's divisor) as a value of dtype dt: the
 * integer as an index expression, cast, so that code with parametric
 * sizes reads it from its table of sizes (a constant otherwise). */
static int32_t ex_count(kir_pool *P, int64_t n, smelt_dtype dt)
{
    kexpr e = kexpr_blank(KE_INDEX, SMELT_I64);
    e.ix = kix_const(P, n);
    return ex_cast(P, kexpr_intern(P, e), dt);
}

static int32_t new_var(kb *b, int64_t size)
{
    if (size == 1)
        return kix_const(&b->L->p->pool, 0);
    if (b->k.nvars == KIR_MAX_VARS)
        return -1;
    b->k.size[b->k.nvars] = size;
    return kix_var(&b->L->p->pool, b->k.nvars++, size);
}

static void add_item(kb *b, kitem it)
{
    if (b->k.nitems == b->citems) {
        b->citems = b->citems ? b->citems * 2 : 8;
        b->k.items = realloc(b->k.items, (size_t)b->citems * sizeof(kitem));
        if (!b->k.items)
            abort();
    }
    b->k.items[b->k.nitems++] = it;
}

static int uses_rvar(kb *b, int32_t ix)
{
    for (int i = 0; i < b->nr; i++)
        if (kix_uses_var(&b->L->p->pool, ix, b->rvar[i]))
            return 1;
    return 0;
}

/* Channels-last strides of shape n: dim 1 innermost, then the last dim
 * back to dim 2, then dim 0. */
static void chlast_strides(const smelt_node *n, int64_t *st)
{
    int64_t acc = 1;
    st[1] = acc;
    acc *= n->shape[1];
    for (int d = n->ndim - 1; d >= 2; d--) {
        st[d] = acc;
        acc *= n->shape[d];
    }
    st[0] = acc;
}

/* Strides of node n's value stored in plan buffer buf (not an input). */
static void buffer_strides(const smelt_plan *p, int32_t buf, const smelt_node *n, int64_t *st)
{
    if (p->bufs[buf].chlast)
        chlast_strides(n, st);
    else
        contiguous_strides(n->ndim, n->shape, st);
}

/* Element index of a contiguous/strided buffer at idx. */
static int32_t buf_index(kir_pool *P, int ndim, const int64_t *st, const int32_t *idx)
{
    int32_t acc = kix_const(P, 0);
    for (int d = 0; d < ndim; d++)
        acc = kix_add(P, acc, kix_mul(P, idx[d], st[d]));
    return acc;
}

/* ---------- views ---------- */

/* Index of RESHAPE's source: row-major linearise, then delinearise. */
static void reshape_index(kir_pool *P, const smelt_node *n, const smelt_node *s,
                          const int32_t *idx, int32_t *out)
{
    int64_t st[SMELT_MAX_DIMS], sst[SMELT_MAX_DIMS];
    contiguous_strides(n->ndim, n->shape, st);
    contiguous_strides(s->ndim, s->shape, sst);
    int32_t lin = buf_index(P, n->ndim, st, idx);
    for (int d = 0; d < s->ndim; d++) {
        int32_t q = kix_div(P, lin, sst[d]);
        out[d] = s->shape[d] > 1 ? kix_mod(P, q, s->shape[d]) : kix_const(P, 0);
    }
}

/* Maps an index over view node n to an index over its source. */
static void view_index(kir_pool *P, const smelt_graph *g, const smelt_node *n,
                       const int32_t *idx, int32_t *out)
{
    const smelt_node *s = &g->nodes[n->src[0]];
    int off = n->ndim - s->ndim;
    switch ((smelt_op)n->op) {
    case SMELT_OP_RESHAPE:
        reshape_index(P, n, s, idx, out);
        return;
    case SMELT_OP_PERMUTE:
        for (int d = 0; d < n->ndim; d++)
            out[n->a.perm.perm[d]] = idx[d];
        return;
    case SMELT_OP_EXPAND:
        for (int d = 0; d < s->ndim; d++)
            out[d] = s->shape[d] == 1 ? kix_const(P, 0) : idx[d + off];
        return;
    case SMELT_OP_SLICE:
        memcpy(out, idx, sizeof(int32_t) * (size_t)n->ndim);
        out[n->a.slice.dim] = kix_add(P, kix_mul(P, idx[n->a.slice.dim], n->a.slice.step),
                                      kix_const(P, n->a.slice.start));
        return;
    case SMELT_OP_SQUEEZE:
        if (s->ndim == n->ndim) {
            memcpy(out, idx, sizeof(int32_t) * (size_t)n->ndim);
            return;
        }
        for (int d = 0, j = 0; d < s->ndim; d++)
            out[d] = d == n->a.axis.dim ? kix_const(P, 0) : idx[j++];
        return;
    case SMELT_OP_UNSQUEEZE:
        for (int d = 0, j = 0; d < n->ndim; d++)
            if (d != n->a.axis.dim)
                out[j++] = idx[d];
        return;
    case SMELT_OP_FLIP:
        memcpy(out, idx, sizeof(int32_t) * (size_t)n->ndim);
        out[n->a.axis.dim] = kix_add(P, kix_mul(P, idx[n->a.axis.dim], -1), kix_const(P, n->shape[n->a.axis.dim] - 1));
        return;
    case SMELT_OP_UNFOLD: {
        int dim = n->a.unfold.dim;
        memcpy(out, idx, sizeof(int32_t) * (size_t)s->ndim);
        out[dim] = kix_add(P, kix_mul(P, idx[dim], n->a.unfold.step),
                           kix_mul(P, idx[n->ndim - 1], n->a.unfold.dil));
        return;
    }
    case SMELT_OP_DIAGONAL: {
        int64_t o = n->a.diag.offset;
        int d1 = n->a.diag.dim1, d2 = n->a.diag.dim2;
        int32_t i = idx[n->ndim - 1];
        for (int d = 0, j = 0; d < s->ndim; d++)
            if (d != d1 && d != d2)
                out[d] = idx[j++];
        out[d1] = kix_add(P, i, kix_const(P, o < 0 ? -o : 0));
        out[d2] = kix_add(P, i, kix_const(P, o > 0 ? o : 0));
        return;
    }
    default:
        abort();   /* not a view: callers dispatch on the op kind */
    }
}

/* The unrealized CAST from float16/bfloat16 to float32 under node's views
 * (node itself, or what its chain of unrealized views starts from), or -1. */
static int32_t half_cast_under(const lowering *L, int32_t node)
{
    const smelt_graph *g = L->g;
    while (!L->realized[node] && smelt_op_kind_of((smelt_op)g->nodes[node].op) == SMELT_KIND_VIEW)
        node = g->nodes[node].src[0];
    const smelt_node *n = &g->nodes[node];
    if (L->realized[node] || n->op != SMELT_OP_CAST || n->dtype != SMELT_F32)
        return -1;
    int sd = g->nodes[n->src[0]].dtype;
    return sd == SMELT_F16 || sd == SMELT_BF16 ? node : -1;
}

static int strided_ex(lowering *L, int32_t node, int through_cast, int32_t *buf, int64_t *off, int64_t *st);

/* Strided form of node (a realized buffer seen through views): buffer,
 * element offset and strides. 0 if not expressible without a copy. */
static int strided_of(lowering *L, int32_t node, int32_t *buf, int64_t *off, int64_t *st)
{
    return strided_ex(L, node, 0, buf, off, st);
}

/* strided_of; through_cast: an unrealized half-to-float32 CAST in the view
 * chain (half_cast_under) passes too: the result is then the strided form
 * of the half-precision values the float32 ones are cast from. */
static int strided_ex(lowering *L, int32_t node, int through_cast, int32_t *buf, int64_t *off, int64_t *st)
{
    const smelt_node *n = &L->g->nodes[node];
    if (through_cast && half_cast_under(L, node) == node)
        return strided_ex(L, n->src[0], 0, buf, off, st);
    if (L->realized[node]) {
        *buf = L->buf_of[node];
        *off = 0;
        if (n->op == SMELT_OP_INPUT)
            memcpy(st, n->stride, sizeof(int64_t) * (size_t)n->ndim);
        else if (L->chlast[node])
            chlast_strides(n, st);
        else
            contiguous_strides(n->ndim, n->shape, st);
        return 1;
    }
    if (smelt_op_kind_of((smelt_op)n->op) != SMELT_KIND_VIEW)
        return 0;
    const smelt_node *s = &L->g->nodes[n->src[0]];
    int64_t ss[SMELT_MAX_DIMS];
    if (!strided_ex(L, n->src[0], through_cast, buf, off, ss))
        return 0;
    int k = n->ndim - s->ndim;
    switch ((smelt_op)n->op) {
    case SMELT_OP_PERMUTE:
        for (int d = 0; d < n->ndim; d++)
            st[d] = ss[n->a.perm.perm[d]];
        return 1;
    case SMELT_OP_EXPAND:
        for (int d = 0; d < n->ndim; d++)
            st[d] = (d < k || s->shape[d - k] == 1) ? 0 : ss[d - k];
        return 1;
    case SMELT_OP_UNFOLD:
        memcpy(st, ss, sizeof(int64_t) * (size_t)s->ndim);
        st[n->a.unfold.dim] = ss[n->a.unfold.dim] * n->a.unfold.step;
        st[s->ndim] = ss[n->a.unfold.dim] * n->a.unfold.dil;
        return 1;
    case SMELT_OP_SLICE:
        memcpy(st, ss, sizeof(int64_t) * (size_t)n->ndim);
        *off += n->a.slice.start * ss[n->a.slice.dim];
        st[n->a.slice.dim] *= n->a.slice.step;
        return 1;
    case SMELT_OP_SQUEEZE:
        for (int d = 0, j = 0; d < s->ndim; d++)
            if (s->ndim == n->ndim || d != n->a.axis.dim)
                st[j++] = ss[d];
        return 1;
    case SMELT_OP_UNSQUEEZE:
        for (int d = 0, j = 0; d < n->ndim; d++)
            st[d] = d == n->a.axis.dim ? 0 : ss[j++];
        return 1;
    case SMELT_OP_RESHAPE: {
        /* only reshapes of a row-major-contiguous source keep strides */
        int64_t cs[SMELT_MAX_DIMS];
        contiguous_strides(s->ndim, s->shape, cs);
        for (int d = 0; d < s->ndim; d++)
            if (s->shape[d] > 1 && ss[d] != cs[d])
                return 0;
        contiguous_strides(n->ndim, n->shape, st);
        return 1;
    }
    default:
        return 0;
    }
}

/* ---------- reductions as phases ---------- */

static smelt_dtype acc_dtype(smelt_op rop, smelt_dtype src)
{
    switch (rop) {
    case SMELT_OP_ANY: case SMELT_OP_ALL: return SMELT_BOOL;
    case SMELT_OP_ARGMAX: case SMELT_OP_ARGMIN: return SMELT_I64;
    case SMELT_OP_AMAX: case SMELT_OP_AMIN:
        return (src == SMELT_F16 || src == SMELT_BF16) ? SMELT_F32 : src;
    default:
        if (smelt_dtype_is_float(src))
            return src == SMELT_F64 ? SMELT_F64 : SMELT_F32;
        return SMELT_I64;
    }
}

/* The reduction rop of the single element `value` (a reduction whose
 * reduced dims all have size 1): a pointwise expression, never a phase. A
 * REDUCE item loops over every reduction var of the kernel, so a phase that
 * claimed none would be repeated over the vars a later reduction claims. */
static int32_t single_element(kb *b, smelt_op rop, int32_t value, smelt_dtype acc)
{
    kir_pool *P = &b->L->p->pool;
    if (rop == SMELT_OP_ARGMAX || rop == SMELT_OP_ARGMIN)
        return ex_const(P, SMELT_I64, 0, 0);
    return ex_cast(P, value, acc);   /* sum, prod, amax, amin; any/all: value != 0 */
}

/* A REDUCE phase accumulating value with rop (single: the reduction has one
 * element and claimed no vars; see single_element). */
static int32_t add_phase(kb *b, smelt_op rop, int32_t value, smelt_dtype acc, int single)
{
    if (single)
        return single_element(b, rop, value, acc);
    kitem it = { .kind = KI_REDUCE, .rop = (uint16_t)rop, .acc_dtype = (uint8_t)acc,
                 .value = value, .buf = -1, .ix = -1 };
    add_item(b, it);
    kexpr e = kexpr_blank(KE_PHASE, acc);
    e.phase = b->k.nphase++;
    return kexpr_intern(&b->L->p->pool, e);
}

/* Chooses or creates the reduction vars for a reduction whose kept-dim
 * index uses `refd` (bitmask of vars), whose reduced dims have `rnumel`
 * elements and whose result has `outnumel`. 0 when the kernel's loop nest
 * cannot host it, or would recompute it: new inner reduction vars under a
 * kernel with more elements than the result (an index rewrite such as
 * pooling's i / 2 reads each result several times), which is computed once
 * in its own kernel instead. */
static int claim_rvars(kb *b, uint32_t refd, int64_t rnumel, int64_t outnumel, int nred, const int64_t *rsz)
{
    if (b->nr) {
        int64_t have = 1;
        for (int i = 0; i < b->nr; i++)
            have *= b->k.size[b->rvar[i]];
        return have == rnumel;
    }
    int64_t unref = 1;
    int nun = 0;
    for (int v = 0; v < b->k.nvars; v++)
        if (!(refd >> v & 1)) {
            unref *= b->k.size[v];
            nun++;
        }
    if (nun) {
        if (unref != rnumel)
            return 0;
        for (int v = 0; v < b->k.nvars; v++)
            if (!(refd >> v & 1)) {
                b->rvar[b->nr++] = v;
                b->k.rmask |= 1u << v;
            }
        return 1;
    }
    int64_t numel = 1;
    for (int v = 0; v < b->k.nvars; v++)
        numel *= b->k.size[v];
    if (numel > outnumel && rnumel > 1)
        return 0;
    for (int i = 0; i < nred; i++) {
        if (rsz[i] == 1)
            continue;
        if (b->k.nvars == KIR_MAX_VARS)
            return 0;
        b->rvar[b->nr++] = b->k.nvars;
        b->k.rmask |= 1u << b->k.nvars;
        b->k.size[b->k.nvars++] = rsz[i];
    }
    return 1;
}

static uint32_t vars_of(kb *b, const int32_t *ix, int n)
{
    uint32_t m = 0;
    for (int i = 0; i < n; i++)
        for (int v = 0; v < b->k.nvars; v++)
            if (kix_uses_var(&b->L->p->pool, ix[i], v))
                m |= 1u << v;
    return m;
}

/* Source index of reduction r: kept dims from `kept`, reduced dims from the
 * row-major delinearisation of the flat index over the kernel's rvars. */
static void reduction_src_index(kb *b, const smelt_node *s, uint32_t dims,
                                const int32_t *kept, int32_t *out)
{
    kir_pool *P = &b->L->p->pool;
    int32_t flat = kix_const(P, 0);
    for (int i = 0; i < b->nr; i++)
        flat = kix_add(P, kix_mul(P, flat, b->k.size[b->rvar[i]]),
                       kix_var(P, b->rvar[i], b->k.size[b->rvar[i]]));
    int64_t rest = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
        if (!(dims >> d & 1)) {
            out[d] = kept[d];
            continue;
        }
        out[d] = kix_mod(P, kix_div(P, flat, rest), s->shape[d] > 0 ? s->shape[d] : 1);
        rest *= s->shape[d] > 1 ? s->shape[d] : 1;
    }
}

/* Value of reduction node r (not realized) at output index idx, as phases of
 * the kernel under construction. -1 with b->fail_node = r when it cannot
 * fuse here. */
static int32_t reduction_value(kb *b, int32_t node, const int32_t *idx)
{
    lowering *L = b->L;
    kir_pool *P = &L->p->pool;
    const smelt_node *r = &L->g->nodes[node];
    const smelt_node *s = &L->g->nodes[r->src[0]];
    uint32_t dims = r->a.red.dims;
    int32_t kept[SMELT_MAX_DIMS];
    int64_t rsz[SMELT_MAX_DIMS], rnumel = 1;
    int nred = 0;
    for (int d = 0, j = 0; d < s->ndim; d++) {
        if (dims >> d & 1) {
            rsz[nred++] = s->shape[d];
            rnumel *= s->shape[d];
            kept[d] = kix_const(P, 0);
            j += r->a.red.keepdim;
        } else {
            kept[d] = idx[j++];
        }
    }
    for (int i = 0; i < b->nkeys; i++)
        if (b->keys[i].node == node && !memcmp(b->keys[i].kept, kept, sizeof(int32_t) * (size_t)s->ndim))
            return b->keys[i].result;
    int single = rnumel == 1;   /* pointwise: claims no vars, may use any */
    for (int d = 0; d < s->ndim && !single; d++)
        if (uses_rvar(b, kept[d]))
            goto fail;
    if (b->nkeys == MAX_PHASES || (!single && !claim_rvars(b, vars_of(b, kept, s->ndim), rnumel, smelt_node_numel(r), nred, rsz)))
        goto fail;
    if (rnumel == 0 && (r->op == SMELT_OP_AMAX || r->op == SMELT_OP_AMIN ||
                        r->op == SMELT_OP_ARGMAX || r->op == SMELT_OP_ARGMIN)) {
        snprintf(L->err, L->errlen, "%s: cannot reduce over a zero-size dimension",
                 smelt_op_name((smelt_op)r->op));
        b->error = 1;
        return -1;
    }
    int32_t sidx[SMELT_MAX_DIMS];
    if (single)
        memcpy(sidx, kept, sizeof(int32_t) * (size_t)s->ndim);
    else
        reduction_src_index(b, s, dims, kept, sidx);
    int32_t v = access(b, r->src[0], sidx);
    if (v < 0)
        return -1;
    int32_t res = -1;
    smelt_op op = (smelt_op)r->op;
    smelt_dtype acc = acc_dtype(op, s->dtype);
    if (op == SMELT_OP_MEAN || op == SMELT_OP_VAR || op == SMELT_OP_STD) {
        int32_t sum = add_phase(b, SMELT_OP_SUM, v, acc, single);
        int32_t n = ex_count(P, rnumel, acc);
        res = ex_op(P, SMELT_OP_DIV, acc, acc, sum, n, -1);
        if (op != SMELT_OP_MEAN) {
            int32_t xc = ex_op(P, SMELT_OP_SUB, acc, acc, v, res, -1);
            int32_t sq = ex_op(P, SMELT_OP_MUL, acc, acc, xc, xc, -1);
            int32_t m2 = add_phase(b, SMELT_OP_SUM, sq, acc, single);
            int64_t den = rnumel - r->a.red.correction;
            res = ex_op(P, SMELT_OP_DIV, acc, acc, m2, ex_count(P, den > 0 ? den : 0, acc), -1);
            if (op == SMELT_OP_STD)
                res = ex_op(P, SMELT_OP_SQRT, acc, acc, res, -1, -1);
        }
    } else {
        res = add_phase(b, op, v, acc, single);
    }
    res = ex_cast(P, res, r->dtype);
    phase_key *k = &b->keys[b->nkeys++];
    k->node = node;
    k->nk = s->ndim;
    k->result = res;
    memcpy(k->kept, kept, sizeof(int32_t) * (size_t)s->ndim);
    return res;
fail:
    b->fail_node = node;
    return -1;
}

/* ---------- the expression walk ---------- */

static smelt_dtype compute_dtype(const smelt_graph *g, const smelt_node *n)
{
    switch ((smelt_op)n->op) {
    case SMELT_OP_EQ: case SMELT_OP_NE: case SMELT_OP_LT:
    case SMELT_OP_LE: case SMELT_OP_GT: case SMELT_OP_GE:
        return result_type(g, 2, n->src);
    case SMELT_OP_WHERE:
        return n->dtype;
    case SMELT_OP_LOGICAL_AND: case SMELT_OP_LOGICAL_OR: case SMELT_OP_LOGICAL_XOR:
    case SMELT_OP_LOGICAL_NOT:
        return SMELT_BOOL;
    case SMELT_OP_ISNAN: case SMELT_OP_ISINF: case SMELT_OP_SIGNBIT: case SMELT_OP_CAST:
        return g->nodes[n->src[0]].dtype;
    default:
        return n->dtype;
    }
}

/* A FLEX_ARG's value in a flex tile kernel: a load from its tile buffer
 * (idx[2], idx[3]: the tile's row and key). */
static int32_t flex_arg_value(kb *b, const smelt_node *n, const int32_t *idx)
{
    kir_pool *P = &b->L->p->pool;
    int role = n->a.flex.role;
    if (!b->L->flex_tile) {
        snprintf(b->L->err, b->L->errlen, "flex_attention: a score function's value used outside the attention");
        b->error = 1;
        return -1;
    }
    /* (modulo the tile: a reshape of the arguments can send a point the
     * kernel drops anyway beyond it; the tile arrays are never overrun) */
    int32_t i = kix_mod(P, idx[2], KERN_SDPA_TILE_Q), j = kix_mod(P, idx[3], KERN_SDPA_TILE_K);
    kexpr e = kexpr_blank(KE_LOAD, n->dtype);
    e.buf = b->L->flex_tile[role];
    e.ix = role == 0 ? kix_add(P, kix_mul(P, i, KERN_SDPA_TILE_K), j) : role == 3 ? i : role == 4 ? j : kix_const(P, 0);
    return kexpr_intern(P, e);
}

static int32_t leaf_value(kb *b, const smelt_node *n, const int32_t *idx)
{
    kir_pool *P = &b->L->p->pool;
    smelt_dtype dt = n->dtype;
    if (n->op == SMELT_OP_FLEX_ARG)
        return flex_arg_value(b, n, idx);
    if (n->op == SMELT_OP_SCALAR || n->op == SMELT_OP_FULL)
        return ex_const(P, dt, n->a.scalar.f, n->a.scalar.i);
    kexpr e = kexpr_blank(KE_INDEX, SMELT_I64);
    e.ix = n->op == SMELT_OP_IOTA ? idx[n->a.axis.dim] : idx[0];
    int32_t i = kexpr_intern(P, e);
    if (n->op == SMELT_OP_IOTA)
        return ex_cast(P, i, dt);
    smelt_dtype w = smelt_dtype_is_float(dt) ? SMELT_F64 : SMELT_I64;
    int32_t start = ex_const(P, w, n->a.arange.fstart, n->a.arange.istart);
    int32_t step = ex_const(P, w, n->a.arange.fstep, n->a.arange.istep);
    int32_t v = ex_op(P, SMELT_OP_MUL, w, w, ex_cast(P, i, w), step, -1);
    return ex_cast(P, ex_op(P, SMELT_OP_ADD, w, w, start, v, -1), dt);
}

static int32_t pointwise_value(kb *b, int32_t node, const int32_t *idx)
{
    const smelt_graph *g = b->L->g;
    const smelt_node *n = &g->nodes[node];
    int32_t v[3] = { -1, -1, -1 };
    for (int k = 0; k < n->nsrc; k++) {
        const smelt_node *s = &g->nodes[n->src[k]];
        int32_t sidx[SMELT_MAX_DIMS];
        int off = n->ndim - s->ndim;
        for (int d = 0; d < s->ndim; d++)
            sidx[d] = s->shape[d] == 1 ? kix_const(&b->L->p->pool, 0) : idx[d + off];
        v[k] = access(b, n->src[k], sidx);
        if (v[k] < 0)
            return -1;
    }
    kexpr e = kexpr_blank(KE_OP, n->dtype);
    e.gop = n->op;
    e.cdtype = (uint8_t)compute_dtype(g, n);
    e.gnode = n->op == SMELT_OP_CLAMP || n->op == SMELT_OP_CHECKIDX ? node : -1;
    memcpy(e.src, v, sizeof v);
    return kexpr_intern(&b->L->p->pool, e);
}

/* GATHER's value at idx: its source (a strided view of a buffer, see
 * realize_extern_sources) read at idx with the gather dim's coordinate the
 * checked index value. */
static int32_t gather_value(kb *b, int32_t node, const int32_t *idx)
{
    lowering *L = b->L;
    kir_pool *P = &L->p->pool;
    const smelt_node *n = &L->g->nodes[node], *s = &L->g->nodes[n->src[0]];
    int32_t buf, sidx[SMELT_MAX_DIMS];
    int64_t off, st[SMELT_MAX_DIMS];
    int32_t iv = access(b, n->src[1], idx);
    if (iv < 0)
        return -1;
    if (!strided_of(L, n->src[0], &buf, &off, st)) {
        b->fail_node = n->src[0];   /* realized, then built again */
        return -1;
    }
    kexpr c = kexpr_blank(KE_OP, SMELT_I64);
    c.gop = SMELT_OP_CHECKIDX;
    c.gnode = node;
    c.src[0] = iv;
    for (int d = 0; d < s->ndim; d++)
        sidx[d] = d == n->a.gather.dim ? kix_const(P, 0) : idx[d];
    kexpr e = kexpr_blank(KE_GATHER, s->dtype);
    e.buf = buf;
    e.ix = kix_add(P, buf_index(P, s->ndim, st, sidx), kix_const(P, off));
    e.src[0] = kexpr_intern(P, c);
    e.i = st[n->a.gather.dim];
    return kexpr_intern(P, e);
}

/* Scalar expression for node at index idx (one kix per dim of node). */
static int32_t access(kb *b, int32_t node, const int32_t *idx)
{
    lowering *L = b->L;
    const smelt_node *n = &L->g->nodes[node];
    if (L->realized[node]) {
        int64_t st[SMELT_MAX_DIMS];
        int32_t buf, ix;
        int64_t off;
        strided_of(L, node, &buf, &off, st);
        ix = buf_index(&L->p->pool, n->ndim, st, idx);
        kexpr e = kexpr_blank(KE_LOAD, n->dtype);
        e.buf = buf;
        e.ix = ix;
        return kexpr_intern(&L->p->pool, e);
    }
    switch (smelt_op_kind_of((smelt_op)n->op)) {
    case SMELT_KIND_LEAF:
        return leaf_value(b, n, idx);
    case SMELT_KIND_VIEW: {
        int32_t sidx[SMELT_MAX_DIMS];
        view_index(&L->p->pool, L->g, n, idx, sidx);
        return access(b, n->src[0], sidx);
    }
    case SMELT_KIND_REDUCTION:
        return reduction_value(b, node, idx);
    case SMELT_KIND_GATHER:
        return gather_value(b, node, idx);
    default:
        return pointwise_value(b, node, idx);
    }
}

/* ---------- realization ---------- */

static int node_cost(lowering *L, int32_t node, int depth)
{
    const smelt_node *n = &L->g->nodes[node];
    if (L->realized[node] || depth > 16)
        return 1;
    int c = 0;
    switch (smelt_op_kind_of((smelt_op)n->op)) {
    case SMELT_KIND_LEAF: return 0;
    case SMELT_KIND_VIEW: break;
    case SMELT_KIND_REDUCTION: return 2;   /* a phase of the same kernel */
    case SMELT_KIND_GATHER: return 2 + node_cost(L, n->src[1], depth + 1);
    default:
        switch ((smelt_op)n->op) {
        case SMELT_OP_EXP: case SMELT_OP_LOG: case SMELT_OP_SIN: case SMELT_OP_COS:
        case SMELT_OP_TAN: case SMELT_OP_TANH: case SMELT_OP_ERF: case SMELT_OP_POW:
        case SMELT_OP_SIGMOID: case SMELT_OP_ATAN2: case SMELT_OP_EXPM1: case SMELT_OP_LOG1P:
        case SMELT_OP_EXP2: case SMELT_OP_LOG2: case SMELT_OP_ACOS: case SMELT_OP_ASIN:
        case SMELT_OP_ATAN: case SMELT_OP_ACOSH: case SMELT_OP_ASINH: case SMELT_OP_ATANH:
        case SMELT_OP_COSH: case SMELT_OP_SINH: case SMELT_OP_LOG10: case SMELT_OP_ERFC: case SMELT_OP_NDTR: case SMELT_OP_GELU_TANH:
        case SMELT_OP_LGAMMA: c = 3; break;
        default: c = 1;
        }
    }
    for (int k = 0; k < n->nsrc; k++)
        c += node_cost(L, n->src[k], depth + 1);
    return c;
}

/* 1 if node's value, as its kernel would compute it, folds in a
 * reduction phase (a softmax's row sum): such a value stays in its
 * consumer's kernel. */
static int reaches_reduction(lowering *L, int32_t node, int depth)
{
    const smelt_node *n = &L->g->nodes[node];
    smelt_op_kind k = smelt_op_kind_of((smelt_op)n->op);
    if (L->realized[node] || k == SMELT_KIND_LEAF || depth > 16)
        return depth > 16;
    if (k == SMELT_KIND_REDUCTION)
        return 1;
    for (int i = 0; i < n->nsrc; i++)
        if (reaches_reduction(L, n->src[i], depth + 1))
            return 1;
    return 0;
}

/* The largest buffer node's kernel expression would read (realized
 * nodes, and what unrealized reductions and views read); INT64_MAX past
 * the depth limit. */
static int64_t largest_read(lowering *L, int32_t node, int depth)
{
    const smelt_node *n = &L->g->nodes[node];
    smelt_op_kind k = smelt_op_kind_of((smelt_op)n->op);
    if (depth > 16)
        return INT64_MAX;
    if (L->realized[node])
        return smelt_node_numel(n);
    if (k == SMELT_KIND_LEAF)
        return 0;
    int64_t m = 0;
    for (int i = 0; i < n->nsrc; i++) {
        int64_t r = largest_read(L, n->src[i], depth + 1);
        m = r > m ? r : m;
    }
    return m;
}

/* Realization decisions (see the file comment). A value with several uses
 * that reads only buffers 64 times smaller than itself (a one-hot gradient
 * built from per-row labels) is recomputed where used: storing it would
 * cost more memory traffic than its arithmetic. */
static void decide_realized(lowering *L)
{
    const smelt_graph *g = L->g;
    for (int32_t i = 0; i < g->n; i++) {
        const smelt_node *n = &g->nodes[i];
        smelt_op_kind k = smelt_op_kind_of((smelt_op)n->op);
        if (n->op == SMELT_OP_INPUT || k == SMELT_KIND_CAT || k == SMELT_KIND_EXTERN)
            L->realized[i] = 1;
        else if (k == SMELT_KIND_REDUCTION && L->nuse[i] > 1)
            L->realized[i] = 1;
        else if ((k == SMELT_KIND_UNARY || k == SMELT_KIND_BINARY || k == SMELT_KIND_TERNARY ||
                  k == SMELT_KIND_GATHER) &&
                 L->nuse[i] > 1 && node_cost(L, i, 0) > CHEAP_COST &&
                 largest_read(L, i, 0) > smelt_node_numel(n) / 64)
            L->realized[i] = 1;
    }
    /* A costly value broadcast into a larger kernel (an optimizer's bias
     * correction, pow of a 0-d step count) would be recomputed for every
     * element there: computed once, in its own small kernel. */
    for (int32_t i = 0; i < g->n; i++) {
        const smelt_node *n = &g->nodes[i];
        for (int k = 0; k < n->nsrc; k++) {
            int32_t s = n->src[k];
            const smelt_node *sn = &g->nodes[s];
            smelt_op_kind sk = smelt_op_kind_of((smelt_op)sn->op);
            if (!L->realized[s] && (sk == SMELT_KIND_UNARY || sk == SMELT_KIND_BINARY || sk == SMELT_KIND_TERNARY) &&
                smelt_node_numel(sn) * 64 <= smelt_node_numel(n) && node_cost(L, s, 0) >= 5 &&
                !reaches_reduction(L, s, 0))
                L->realized[s] = 1;
        }
    }
    for (int32_t o = 0; o < g->nout; o++)
        L->realized[g->outputs[o]] = 1;
}

static int is_conv_op(uint16_t op)
{
    return op == SMELT_OP_CONV || op == SMELT_OP_CONV_BWD_INPUT || op == SMELT_OP_CONV_BWD_WEIGHT;
}

static int is_elementwise(const smelt_node *n)
{
    smelt_op_kind k = smelt_op_kind_of((smelt_op)n->op);
    return k == SMELT_KIND_UNARY || k == SMELT_KIND_BINARY || k == SMELT_KIND_TERNARY;
}

static int same_shape(const smelt_node *a, const smelt_node *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    return 1;
}

/* A costly elementwise value with several uses is computed once, not
 * stored, when every use meets in one realized node through same-shape
 * elementwise nodes: that node's kernel reads it at one index, and kernel
 * expressions are hash-consed and memoised, so it is evaluated once per
 * element there (mish's e^x used twice in e^x (e^x + 2)). Reverse order:
 * a node's consumers are final before it is looked at. */
static void unrealize_shared(lowering *L)
{
    const smelt_graph *g = L->g;
    int32_t n = g->n, *root = malloc(((size_t)n + 1) * sizeof *root), *first = calloc((size_t)n + 2, sizeof *first);
    uint8_t *out = calloc((size_t)n + 1, 1);
    int32_t nedge = 0;
    for (int32_t i = 0; i < n; i++)
        nedge += g->nodes[i].nsrc;
    int32_t *user = malloc(((size_t)nedge + 1) * sizeof *user);
    if (!root || !first || !out || !user)
        abort();
    for (int32_t i = 0; i < n; i++)   /* users of node i: user[first[i] .. first[i + 1]) */
        for (int k = 0; k < g->nodes[i].nsrc; k++)
            first[g->nodes[i].src[k] + 1]++;
    for (int32_t i = 0; i < n; i++)
        first[i + 1] += first[i];
    int32_t *fill = calloc((size_t)n + 1, sizeof *fill);
    if (!fill)
        abort();
    for (int32_t i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i].nsrc; k++) {
            int32_t s = g->nodes[i].src[k];
            user[first[s] + fill[s]++] = i;
        }
    for (int32_t o = 0; o < g->nout; o++)
        out[g->outputs[o]] = 1;
    for (int32_t i = n - 1; i >= 0; i--) {
        const smelt_node *ni = &g->nodes[i];
        int32_t r = -2;
        for (int32_t u = first[i]; u < first[i + 1] && r != -1; u++) {
            int32_t j = user[u];
            int32_t rj = is_elementwise(&g->nodes[j]) && same_shape(&g->nodes[j], ni) ? (L->realized[j] ? j : root[j]) : -1;
            r = rj < 0 || (r != -2 && r != rj) ? -1 : rj;
        }
        if (r >= 0 && L->realized[i] && !out[i] && is_elementwise(ni) && L->nuse[i] > 1)
            L->realized[i] = 0;
        root[i] = L->realized[i] ? i : (r >= 0 ? r : -1);
    }
    free(fill);
    free(user);
    free(out);
    free(first);
    free(root);
}

/* Whether matmul node i reads its operands as bfloat16 (the buffers the
 * float32 casts of half_cast_under read) and writes its float32 result,
 * the casts never stored: on the CPU, both operands such casts, each a
 * strided view once the bfloat16 value under it is. The product is the
 * same (exact products, f32 accumulation); oneDNN multiplies bf16 at twice
 * the f32 rate where the CPU has bf16 instructions, and no cast copies are
 * made. float16 keeps its casts (vectorised kernels, stored in the
 * source's layout): oneDNN here has no float16 matmul, and the matmul's
 * own conversion (mm_half_via_f32) is scalar. */
static int half_matmul(lowering *L, int32_t i)
{
    const smelt_graph *g = L->g;
    const smelt_node *n = &g->nodes[i];
    if (!L->host_externs || n->op != SMELT_OP_MATMUL || n->dtype != SMELT_F32)
        return 0;
    int32_t c0 = half_cast_under(L, n->src[0]), c1 = half_cast_under(L, n->src[1]);
    if (c0 < 0 || c1 < 0 || g->nodes[g->nodes[c0].src[0]].dtype != SMELT_BF16 ||
        g->nodes[g->nodes[c1].src[0]].dtype != SMELT_BF16)
        return 0;
    for (int k = 0; k < 2; k++) {
        int32_t h = g->nodes[k ? c1 : c0].src[0], buf;
        int64_t off, st[SMELT_MAX_DIMS];
        uint8_t was = L->realized[h];
        L->realized[h] = 1;   /* (as it will be: would the views then be strided?) */
        int ok = strided_ex(L, n->src[k], 1, &buf, &off, st);
        L->realized[h] = was;
        if (!ok)
            return 0;
    }
    return 1;
}

/* A matmul source x that is no strided view of a buffer: the float32 cast
 * of a half-precision value under views (the casts of a half-precision
 * linear: permute(cast(weight))) is stored in its own layout, a straight
 * copy (a transposing one took 64 ms for a 4096x1024 weight), where the
 * views over it are then strided; anything else is stored itself. */
static void realize_matmul_source(lowering *L, int32_t x)
{
    int32_t c = half_cast_under(L, x), buf;
    int64_t off, st[SMELT_MAX_DIMS];
    if (c >= 0 && c != x) {
        L->realized[c] = 1;
        if (strided_of(L, x, &buf, &off, st))
            return;
        L->realized[c] = 0;
    }
    L->realized[x] = 1;
}

/* Sources of library calls, and what GATHER reads from, that are not a
 * strided view of a buffer are realized (after the layouts are chosen: a
 * reshape of a channels-last buffer is not a view). A half_matmul's
 * operands realize the half-precision values under their casts instead. */
static void realize_extern_sources(lowering *L)
{
    const smelt_graph *g = L->g;
    for (int32_t i = 0; i < g->n; i++) {
        const smelt_node *n = &g->nodes[i];
        if (half_matmul(L, i)) {
            for (int k = 0; k < 2; k++) {
                int32_t h = g->nodes[half_cast_under(L, n->src[k])].src[0], buf;
                int64_t off, st[SMELT_MAX_DIMS];
                if (!strided_of(L, h, &buf, &off, st))
                    L->realized[h] = 1;
            }
            continue;
        }
        if (n->op != SMELT_OP_MATMUL && n->op != SMELT_OP_CALL && n->op != SMELT_OP_SDPA && n->op != SMELT_OP_SDPA_BWD &&
            !is_conv_op(n->op) && n->op != SMELT_OP_GATHER && n->op != SMELT_OP_FLEX && n->op != SMELT_OP_FLEX_BWD)
            continue;
        for (int k = 0; k < (n->op == SMELT_OP_GATHER ? 1 : n->nsrc); k++) {
            int32_t buf;
            int64_t off, st[SMELT_MAX_DIMS];
            if (L->tile[n->src[k]])
                continue;   /* a score function's value: evaluated per tile */
            if (strided_of(L, n->src[k], &buf, &off, st))
                continue;
            if (n->op == SMELT_OP_MATMUL)
                realize_matmul_source(L, n->src[k]);
            else
                L->realized[n->src[k]] = 1;
        }
    }
}

/* Which temporaries are stored channels-last: the activations convolutions
 * and their gradients read and write (oneDNN's fast kernels read and write
 * channels-last activations): results of CONV and CONV_BWD_INPUT, computed
 * x and dy sources, unless they are graph outputs (row-major output
 * buffers). Host-call and matmul results stay row-major. */
static void decide_chlast(lowering *L)
{
    const smelt_graph *g = L->g;
    uint8_t *is_out = calloc((size_t)g->n + 1, 1);
    if (!is_out)
        abort();
    for (int32_t o = 0; o < g->nout; o++)
        is_out[g->outputs[o]] = 1;
    for (int32_t i = 0; i < g->n; i++) {
        const smelt_node *n = &g->nodes[i];
        if (!is_conv_op(n->op))
            continue;
        L->chlast[i] = !is_out[i] && n->op != SMELT_OP_CONV_BWD_WEIGHT;
        /* the activation sources: x or dy first, then dy for the weights' gradient */
        for (int k = 0; k < (n->op == SMELT_OP_CONV_BWD_WEIGHT ? 2 : 1); k++) {
            int32_t x = n->src[k];
            smelt_op xo = (smelt_op)g->nodes[x].op;
            smelt_op_kind xk = smelt_op_kind_of(xo);
            /* realized already, or will be (not a view of a buffer) */
            if (!is_out[x] && (xk != SMELT_KIND_EXTERN || (is_conv_op(xo) && xo != SMELT_OP_CONV_BWD_WEIGHT)) &&
                xk != SMELT_KIND_LEAF && (L->realized[x] || xk != SMELT_KIND_VIEW))
                L->chlast[x] = 1;
        }
    }
    free(is_out);
}

/* ---------- plan building ---------- */

static int32_t add_buf(smelt_plan *p, plan_buf b)
{
    if (p->nbufs == p->cbufs) {
        p->cbufs = p->cbufs ? p->cbufs * 2 : 16;
        p->bufs = realloc(p->bufs, (size_t)p->cbufs * sizeof(plan_buf));
        if (!p->bufs)
            abort();
    }
    p->bufs[p->nbufs] = b;
    return p->nbufs++;
}

static void add_step(smelt_plan *p, plan_step s)
{
    if (p->nsteps == p->csteps) {
        p->csteps = p->csteps ? p->csteps * 2 : 16;
        p->steps = realloc(p->steps, (size_t)p->csteps * sizeof(plan_step));
        if (!p->steps)
            abort();
    }
    p->steps[p->nsteps++] = s;
}

/* Adds b's kernel to the plan (a step running it too, unless it is a
 * flex tile kernel, which only its flex step runs). */
static void add_kernel_as(smelt_plan *p, kb *b, int step)
{
    if (p->nkernels == p->ckernels) {
        p->ckernels = p->ckernels ? p->ckernels * 2 : 16;
        p->kernels = realloc(p->kernels, (size_t)p->ckernels * sizeof(kir_kernel));
        if (!p->kernels)
            abort();
    }
    p->kernels[p->nkernels] = b->k;
    if (step)
        add_step(p, (plan_step){ .kind = PS_KERNEL, .kernel = p->nkernels });
    p->nkernels++;
}

static void add_kernel(smelt_plan *p, kb *b) { add_kernel_as(p, b, 1); }

/* Adds `wt` per access of expression e (and below) with unit stride in
 * var v, for every var. `seen` marks visited expressions. */
static void count_unit(const kir_pool *P, int32_t e, uint8_t *seen, int nvars, int64_t wt, int64_t *n)
{
    if (e < 0 || seen[e])
        return;
    seen[e] = 1;
    const kexpr *x = &P->ex[e];
    if (x->op == KE_LOAD)
        for (int v = 0; v < nvars; v++) {   /* unit stride, or invariant: a broadcast */
            int64_t c = kix_coef(P, x->ix, v);
            n[v] += wt * (c == 1 || c == 0);
        }
    for (int k = 0; k < 3; k++)
        count_unit(P, x->src[k], seen, nvars, wt, n);
}

/* Picks the vectorised var: the one with unit stride in the most executed
 * accesses (an access inside a reduction loop runs once per reduced
 * element, a row store once; stores count double; a load that does not
 * depend on the var counts as well, it is one broadcast); ties go to the
 * later var. So per-channel parameters of an NCHW tensor do not pull the
 * vector onto the channel dim. */
static void choose_vvar(smelt_plan *p, kir_kernel *k)
{
    int64_t n[KIR_MAX_VARS] = { 0 }, rn = 1;
    for (int v = 0; v < k->nvars; v++)
        if (k->rmask >> v & 1)
            rn *= k->size[v] > 0 ? k->size[v] : 1;
    uint8_t *seen = malloc((size_t)p->pool.nex + 1);
    if (!seen)
        abort();
    for (int i = 0; i < k->nitems; i++) {
        int64_t wt = k->items[i].kind == KI_ROWSTORE ? 1 : rn;
        memset(seen, 0, (size_t)p->pool.nex + 1);
        count_unit(&p->pool, k->items[i].value, seen, k->nvars, wt, n);
        for (int v = 0; v < k->nvars && k->items[i].ix >= 0; v++)
            n[v] += 2 * wt * (kix_coef(&p->pool, k->items[i].ix, v) == 1);
    }
    free(seen);
    k->vvar = -1;
    int64_t best = -1;
    for (int v = 0; v < k->nvars; v++)
        if (n[v] >= best) {
            best = n[v];
            k->vvar = v;
        }
}

/* Splits a small-output, long reduction (a full sum) into chunks reduced in
 * parallel: inner-vector kernels with one REDUCE item (not argmax/argmin)
 * feeding only ROWSTOREs. The chunk count depends only on sizes, so results
 * do not depend on the thread count. */
static void choose_split(kir_kernel *k)
{
    if (!k->rmask || k->vvar < 0 || !(k->rmask >> k->vvar & 1))
        return;
    int64_t outer = 1, rn = 1;
    int nred = 0;
    for (int i = 0; i < k->nitems; i++) {
        const kitem *it = &k->items[i];
        if (it->kind == KI_STORE || (it->kind == KI_REDUCE && (it->rop == SMELT_OP_ARGMAX || it->rop == SMELT_OP_ARGMIN)))
            return;
        nred += it->kind == KI_REDUCE;
    }
    for (int v = 0; v < k->nvars; v++) {
        if (k->rmask >> v & 1)
            rn *= k->size[v];
        else
            outer *= k->size[v];
    }
    if (nred != 1 || outer >= 16 || rn < 65536)
        return;
    int sv = k->vvar;
    for (int v = 0; v < k->nvars; v++)
        if ((k->rmask >> v & 1) && v != k->vvar) {
            sv = v;
            break;
        }
    /* chunks of >= 8192 elements: short per-lane sums, partials combined in
     * f64 (see the CPU backend), so long float sums stay accurate */
    int64_t S = rn / 8192 < 4096 ? rn / 8192 : 4096;
    int64_t lim = sv == k->vvar ? k->size[sv] / 64 : k->size[sv];
    if (S > lim)
        S = lim;
    if (S >= 2) {
        k->split = (int)S;
        k->split_var = sv;
    }
}

static void kb_init(kb *b, lowering *L)
{
    memset(b, 0, sizeof *b);
    b->L = L;
    b->k.vvar = -1;
    b->k.split_var = -1;
    b->k.split = 1;
    b->fail_node = -1;
}

/* Loop vars for node's dims: dims of size 1 get index 0; a dim with
 * merge[d] set shares one var with the next dim of size > 1 (row-major).
 * var_dim[v] = first dim of var v. */
static void make_dim_vars(kb *b, const smelt_node *n, const uint8_t *merge, int32_t *idx, int *var_dim)
{
    kir_pool *P = &b->L->p->pool;
    for (int d = 0; d < n->ndim;) {
        if (n->shape[d] == 1) {
            idx[d++] = kix_const(P, 0);
            continue;
        }
        int grp[SMELT_MAX_DIMS], ng = 0;
        int64_t total = 1;
        for (int e = d; e < n->ndim; e++) {
            if (n->shape[e] == 1) {
                idx[e] = kix_const(P, 0);
                continue;
            }
            grp[ng++] = e;
            total *= n->shape[e];
            if (!merge[e])
                break;
        }
        var_dim[b->k.nvars] = d;
        int32_t u = new_var(b, total);
        int64_t inner = 1;
        for (int i = ng - 1; i >= 0; i--) {
            idx[grp[i]] = kix_mod(P, kix_div(P, u, inner), n->shape[grp[i]]);
            inner *= n->shape[grp[i]];
        }
        d = grp[ng - 1] + 1;
    }
}

/* Collects every index expression the kernel evaluates. */
static void collect_ix(const kir_pool *P, int32_t e, uint8_t *seen, int32_t *out, int *n, int cap)
{
    if (e < 0 || seen[e])
        return;
    seen[e] = 1;
    const kexpr *x = &P->ex[e];
    if ((x->op == KE_LOAD || x->op == KE_INDEX || x->op == KE_GATHER) && *n < cap)
        out[(*n)++] = x->ix;
    for (int k = 0; k < 3; k++)
        collect_ix(P, x->src[k], seen, out, n, cap);
}

/* Marks in merge[] the adjacent dim vars (both outer or both reduction,
 * among the first nv vars) that every access walks as one row-major run.
 * Returns the number of merges found. */
static int find_merges(lowering *L, const kir_kernel *k, int nv, const int *var_dim, uint8_t *merge)
{
    enum { CAP = 512 };
    int32_t ix[CAP];
    int n = 0, found = 0;
    const kir_pool *P = &L->p->pool;
    uint8_t *seen = calloc((size_t)P->nex + 1, 1);
    if (!seen)
        abort();
    for (int i = 0; i < k->nitems; i++) {
        collect_ix(P, k->items[i].value, seen, ix, &n, CAP);
        if (k->items[i].ix >= 0 && n < CAP)
            ix[n++] = k->items[i].ix;
    }
    free(seen);
    if (n == CAP)
        return 0;
    for (int v = 0; v + 1 < nv; v++) {
        if ((k->rmask >> v & 1) != (k->rmask >> (v + 1) & 1))
            continue;
        int ok = 1;
        for (int i = 0; i < n && ok; i++) {
            int64_t a = kix_coef(P, ix[i], v), c = kix_coef(P, ix[i], v + 1);
            ok = a != KIX_NONAFFINE && c != KIX_NONAFFINE && a == c * k->size[v + 1];
        }
        if (ok) {
            merge[var_dim[v]] = 1;
            found++;
        }
    }
    return found;
}

/* Kernel storing node's value (computed when compute_root, else read from
 * its buffer if realized) over its shape into buffer dst at contiguous
 * index, plus dst_off along cat_dim. Returns 0, 1 when a reduction must be
 * realized first, -1 on error. Contiguous runs of dims become one loop var:
 * the kernel is built once, the runs found, and built again merged. */
static int emit_store_kernel(lowering *L, int32_t node, int compute_root, int32_t dst,
                             int cat_dim, int64_t dst_off, const smelt_node *dst_node)
{
    const smelt_node *n = &L->g->nodes[node];
    kir_pool *P = &L->p->pool;
    uint8_t merge[SMELT_MAX_DIMS] = { 0 };
    if (smelt_node_numel(n) == 0)
        return 0;   /* nothing to write */
    for (int pass = 0;; pass++) {
        kb b;
        kb_init(&b, L);
        int32_t idx[SMELT_MAX_DIMS], didx[SMELT_MAX_DIMS];
        int var_dim[KIR_MAX_VARS];
        make_dim_vars(&b, n, merge, idx, var_dim);
        int nv = b.k.nvars;
        int root_realized = L->realized[node];
        if (compute_root && n->op != SMELT_OP_INPUT)
            L->realized[node] = 0;
        int32_t v = access(&b, node, idx);
        L->realized[node] = (uint8_t)root_realized;
        if (v < 0) {
            free(b.k.items);
            if (b.error)
                return -1;
            if (b.fail_node >= 0) {
                L->realized[b.fail_node] = 1;
                return 1;
            }
            snprintf(L->err, L->errlen, "%s: too many loop dimensions", smelt_op_name((smelt_op)n->op));
            return -1;
        }
        int64_t st[SMELT_MAX_DIMS];
        buffer_strides(L->p, dst, dst_node, st);
        memcpy(didx, idx, sizeof idx);
        if (cat_dim >= 0)
            didx[cat_dim] = kix_add(P, idx[cat_dim], kix_const(P, dst_off));
        int32_t ix = buf_index(P, dst_node->ndim, st, didx);
        kitem it = { .kind = uses_rvar(&b, ix) || !b.nr ? KI_STORE : KI_ROWSTORE,
                     .value = ex_cast(P, v, dst_node->dtype), .buf = dst, .ix = ix };
        add_item(&b, it);
        if (pass == 0 && find_merges(L, &b.k, nv, var_dim, merge)) {
            free(b.k.items);
            continue;
        }
        choose_vvar(L->p, &b.k);
        choose_split(&b.k);
        add_kernel(L->p, &b);
        return 0;
    }
}

/* The graph input whose view B is, when it is one and the same for every
 * batch entry of an fp32 matmul m (B's dims and strides filled):
 * the plan may keep it packed (plan_step.b_input). Else -1. */
static int32_t weight_input(const smelt_plan *p, int32_t buf, const kern_matmul_desc *m)
{
    if (p->bufs[buf].kind != PB_INPUT || m->dtype != SMELT_F32)
        return -1;
    for (int d = 0; d < m->ndim - 2; d++)
        if (m->b_dims[d] != 1 && m->b_strides[d] != 0)
            return -1;
    return p->bufs[buf].index;
}

static int emit_matmul(lowering *L, int32_t node)
{
    const smelt_node *n = &L->g->nodes[node];
    plan_step s = { .kind = PS_MATMUL, .c_buf = L->buf_of[node] };
    kern_matmul_desc *m = &s.mm;
    int half = half_matmul(L, node);
    m->dtype = half ? (smelt_dtype)L->g->nodes[L->g->nodes[half_cast_under(L, n->src[0])].src[0]].dtype
                    : (smelt_dtype)n->dtype;
    m->c_f32 = half;
    m->ndim = n->ndim;
    int64_t cs[SMELT_MAX_DIMS];
    contiguous_strides(n->ndim, n->shape, cs);
    for (int d = 0; d < n->ndim; d++) {
        m->c_dims[d] = n->shape[d];
        m->c_strides[d] = cs[d];
    }
    for (int k = 0; k < 2; k++) {
        const smelt_node *a = &L->g->nodes[n->src[k]];
        int64_t st[SMELT_MAX_DIMS], *dims = k ? m->b_dims : m->a_dims;
        int64_t *str = k ? m->b_strides : m->a_strides;
        int32_t buf;
        int64_t off;
        if (!strided_ex(L, n->src[k], half, &buf, &off, st))
            abort();
        int pad = n->ndim - a->ndim;
        for (int d = 0; d < n->ndim; d++) {
            dims[d] = d < pad ? 1 : a->shape[d - pad];
            str[d] = d < pad ? 0 : st[d - pad];
        }
        if (k) {
            s.b_buf = buf;
            s.b_off = off;
            s.b_input = weight_input(L->p, buf, m);
        } else {
            s.a_buf = buf;
            s.a_off = off;
        }
    }
    add_step(L->p, s);
    L->p->nexterns++;
    return 0;
}

/* The PS_CALL step of the host call whose first result is `node`: sources
 * as strided views of their buffers, results into the buffers of the
 * call's nout consecutive nodes. */
static int emit_call(lowering *L, int32_t node)
{
    const smelt_node *n = &L->g->nodes[node];
    plan_call *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    c->id = n->a.call.id;
    c->nin = n->nsrc;
    c->nout = n->a.call.nout;
    for (int k = 0; k < c->nin; k++) {
        const smelt_node *a = &L->g->nodes[n->src[k]];
        if (!strided_of(L, n->src[k], &c->in_buf[k], &c->in_off[k], c->in[k].strides))
            abort();
        c->in[k].dtype = a->dtype;
        c->in[k].ndim = a->ndim;
        memcpy(c->in[k].shape, a->shape, sizeof(int64_t) * a->ndim);
    }
    for (int k = 0; k < c->nout; k++) {
        const smelt_node *o = &L->g->nodes[node + k];
        c->out_buf[k] = L->buf_of[node + k];
        c->out[k].dtype = o->dtype;
        c->out[k].ndim = o->ndim;
        memcpy(c->out[k].shape, o->shape, sizeof(int64_t) * o->ndim);
        contiguous_strides(o->ndim, o->shape, c->out[k].strides);
    }
    add_step(L->p, (plan_step){ .kind = PS_CALL, .call = c });
    L->p->nexterns++;
    L->p->ncalls++;
    return 0;
}

/* Operand k of an SDPA node as the kernel sees it: batch strides (0 where
 * it broadcasts), row and column strides; its buffer and offset. */
static void sdpa_operand(lowering *L, int32_t node, int k, plan_sdpa *a, kern_sdpa_operand *o)
{
    const smelt_node *n = &L->g->nodes[L->g->nodes[node].src[k]];
    int64_t st[SMELT_MAX_DIMS];
    if (!strided_of(L, L->g->nodes[node].src[k], &a->buf[k], &a->off[k], st))
        abort();
    int nd = n->ndim;
    for (int d = 0; d < nd - 2; d++)
        o->bstride[d] = n->shape[d] == 1 ? 0 : st[d];
    o->row = n->shape[nd - 2] == 1 ? 0 : st[nd - 2];
    o->col = n->shape[nd - 1] == 1 ? 0 : st[nd - 1];
}

static int emit_sdpa(lowering *L, int32_t node)
{
    const smelt_node *n = &L->g->nodes[node], *q = &L->g->nodes[n->src[0]];
    const smelt_node *k = &L->g->nodes[n->src[1]], *v = &L->g->nodes[n->src[2]];
    plan_sdpa *a = calloc(1, sizeof *a);
    if (!a)
        abort();
    int nd = q->ndim;
    kern_sdpa_desc *d = &a->d;
    d->nb = nd - 2;
    for (int i = 0; i < nd - 2; i++)
        d->bdims[i] = q->shape[i];
    d->L = q->shape[nd - 2], d->S = k->shape[nd - 2], d->E = q->shape[nd - 1], d->Ev = v->shape[nd - 1];
    d->scale = (float)n->a.sdpa.scale;
    d->causal = n->a.sdpa.causal;
    d->dtype = q->dtype == SMELT_BF16 ? KERN_SDPA_BF16 : q->dtype == SMELT_F16 ? KERN_SDPA_F16 : KERN_SDPA_F32;
    a->nin = n->nsrc;
    a->mode = n->op == SMELT_OP_SDPA_BWD;
    kern_sdpa_operand *fwd[4] = { &d->q, &d->k, &d->v, &d->mask };
    kern_sdpa_operand *bwd[6] = { &d->q, &d->k, &d->v, &d->o, &d->g, &d->mask };
    for (int i = 0; i < n->nsrc; i++)
        sdpa_operand(L, node, i, a, (a->mode ? bwd : fwd)[i]);
    int mask = a->mode ? 5 : 3;
    d->mask_kind = n->nsrc <= mask ? KERN_SDPA_NO_MASK
                   : L->g->nodes[n->src[mask]].dtype == SMELT_BOOL ? KERN_SDPA_BOOL_MASK : KERN_SDPA_ADD_MASK;
    a->buf[PLAN_SDPA_OUT] = L->buf_of[node];
    add_step(L->p, (plan_step){ .kind = PS_SDPA, .attn = a });
    L->p->nexterns++;
    return 0;
}

/* A flex tile kernel (see plan_flex): over rows i < KERN_SDPA_TILE_Q and
 * keys j < KERN_SDPA_TILE_K, the value of node `score` (-1: the score
 * tile itself), or with node `mask` (bool) where(mask, score, -inf), or
 * with score -2 the mask alone; stored into tile[5] (float32), or tile[6]
 * (bool) for the mask alone. Its number in *kernel; 0, 1 (a reduction was
 * realized: lower again), -1. */
static int flex_tile_kernel(lowering *L, const int32_t *tile, int32_t score, int32_t mask, int32_t *kernel)
{
    kir_pool *P = &L->p->pool;
    kb b;
    kb_init(&b, L);
    int32_t vi = new_var(&b, KERN_SDPA_TILE_Q), vj = new_var(&b, KERN_SDPA_TILE_K);
    int32_t idx[4] = { kix_const(P, 0), kix_const(P, 0), vi, vj };
    L->flex_tile = tile;
    int32_t v = -1, m = mask >= 0 ? access(&b, mask, idx) : -1;
    if (score >= 0) {
        v = access(&b, score, idx);
    } else if (score == -1) {
        kexpr e = kexpr_blank(KE_LOAD, SMELT_F32);
        e.buf = tile[0];
        e.ix = kix_add(P, kix_mul(P, vi, KERN_SDPA_TILE_K), vj);
        v = kexpr_intern(P, e);
    }
    L->flex_tile = NULL;
    if ((mask >= 0 && m < 0) || (score != -2 && v < 0)) {
        free(b.k.items);
        if (b.error)
            return -1;
        if (b.fail_node >= 0) {
            L->realized[b.fail_node] = 1;
            return 1;
        }
        snprintf(L->err, L->errlen, "flex_attention: a score function lowers to no tile kernel");
        return -1;
    }
    int32_t value;
    if (score == -2)
        value = ex_cast(P, m, SMELT_BOOL);
    else if (m >= 0)
        value = ex_op(P, SMELT_OP_WHERE, SMELT_F32, SMELT_F32, ex_cast(P, m, SMELT_BOOL), ex_cast(P, v, SMELT_F32),
                      ex_const(P, SMELT_F32, -INFINITY, 0));
    else
        value = ex_cast(P, v, SMELT_F32);
    kitem it = { .kind = KI_STORE, .value = value, .buf = tile[score == -2 ? 6 : 5],
                 .ix = kix_add(P, kix_mul(P, vi, KERN_SDPA_TILE_K), vj) };
    add_item(&b, it);
    choose_vvar(L->p, &b.k);
    add_kernel_as(L->p, &b, 0);
    *kernel = L->p->nkernels - 1;
    return 0;
}

/* A FLEX or FLEX_BWD node as a PS_SDPA step with its tile kernels (see
 * plan_flex). */
static int emit_flex(lowering *L, int32_t node)
{
    const smelt_node *n = &L->g->nodes[node], *q = &L->g->nodes[n->src[0]];
    const smelt_node *k = &L->g->nodes[n->src[1]], *v = &L->g->nodes[n->src[2]];
    plan_sdpa *a = calloc(1, sizeof *a);
    if (!a)
        abort();
    int bwd = n->op == SMELT_OP_FLEX_BWD;
    int64_t B = q->shape[0], H = q->shape[1], Hk = k->shape[1], G = H / Hk;
    kern_sdpa_desc *d = &a->d;
    d->nb = 3;
    d->bdims[0] = B, d->bdims[1] = Hk, d->bdims[2] = G;
    d->L = q->shape[2], d->S = k->shape[2], d->E = q->shape[3], d->Ev = v->shape[3];
    d->scale = (float)n->a.flex.scale;
    a->nin = bwd ? 5 : 3;
    a->mode = bwd;
    a->flex = 1;
    kern_sdpa_operand *ops[5] = { &d->q, &d->k, &d->v, &d->o, &d->g };
    for (int i = 0; i < a->nin; i++) {
        const smelt_node *s = &L->g->nodes[n->src[i]];
        int64_t st[SMELT_MAX_DIMS];
        if (!strided_of(L, n->src[i], &a->buf[i], &a->off[i], st))
            abort();
        for (int dd = 0; dd < 4; dd++)
            st[dd] = s->shape[dd] == 1 ? 0 : st[dd];
        kern_sdpa_operand *o = ops[i];
        o->bstride[0] = st[0];
        if (i == 1 || i == 2)   /* a key head serves G query heads */
            o->bstride[1] = st[1], o->bstride[2] = 0;
        else
            o->bstride[1] = st[1] * G, o->bstride[2] = st[1];
        o->row = st[2], o->col = st[3];
    }
    a->buf[PLAN_SDPA_OUT] = L->buf_of[node];
    plan_flex *f = &a->fx;
    f->H = H, f->bq = n->a.flex.bq, f->bk = n->a.flex.bk;
    f->mask_b = (n->a.flex.parts & SMELT_FLEX_MASK_B) != 0, f->mask_h = (n->a.flex.parts & SMELT_FLEX_MASK_H) != 0;
    for (int r = 0; r < 7; r++)
        f->tile[r] = add_buf(L->p, (plan_buf){ .kind = PB_HOST,
                                                .dtype = r == 0 || r == 5 ? SMELT_F32 : r == 6 ? SMELT_BOOL : SMELT_I32 });
    for (int i = 0; i < PLAN_FLEX_NKERN; i++)
        f->kern[i] = -1;
    int sm = smelt_flex_src(n, SMELT_FLEX_SCORE), mm = smelt_flex_src(n, SMELT_FLEX_MASK);
    int dm = smelt_flex_src(n, SMELT_FLEX_DSCORE), tb = smelt_flex_src(n, SMELT_FLEX_BLOCKS);
    int32_t score = sm >= 0 ? n->src[sm] : -1, mask = mm >= 0 ? n->src[mm] : -1;
    int r = 0;
    if (score >= 0)
        r = flex_tile_kernel(L, f->tile, score, -1, &f->kern[PLAN_FLEX_SCORE]);
    if (!r && mask >= 0)
        r = flex_tile_kernel(L, f->tile, score, mask, &f->kern[PLAN_FLEX_PART]);
    if (!r && mask >= 0 && tb < 0)
        r = flex_tile_kernel(L, f->tile, -2, mask, &f->kern[PLAN_FLEX_MASK]);
    if (!r && bwd && dm >= 0)
        r = flex_tile_kernel(L, f->tile, n->src[dm], -1, &f->kern[PLAN_FLEX_DSCORE]);
    for (int t = 0; t < 4; t++)
        f->tab_buf[t] = -1;
    for (int t = 0; !r && t < 4; t++) {
        int at = smelt_flex_src(n, t < 2 ? SMELT_FLEX_BLOCKS : SMELT_FLEX_FULL);
        if (at < 0)
            continue;
        const smelt_node *tn = &L->g->nodes[n->src[at + t % 2]];
        if (!strided_of(L, n->src[at + t % 2], &f->tab_buf[t], &f->tab_off[t], f->tab_st[t]))
            abort();
        f->tab_dt[t] = tn->dtype;
        for (int dd = 0; dd < tn->ndim; dd++)
            f->tab_st[t][dd] = tn->shape[dd] == 1 ? 0 : f->tab_st[t][dd];
        for (int dd = 0; t == 0 && dd < 3; dd++)
            f->tab_shape[dd] = tn->shape[dd];
        f->tab_kb[t] = tn->shape[tn->ndim - 1];
    }
    if (r) {
        free(a);
        return r;
    }
    add_step(L->p, (plan_step){ .kind = PS_SDPA, .attn = a });
    L->p->nexterns++;
    return 0;
}

/* A CONV, CONV_BWD_INPUT or CONV_BWD_WEIGHT node as a PS_CONV step: the
 * forward's geometry, x, w and y being the node's sources and result in
 * the order its mode names them. */
static int emit_conv(lowering *L, int32_t node)
{
    const smelt_node *n = &L->g->nodes[node];
    plan_conv *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    kern_conv_desc *d = &c->d;
    c->mode = n->op == SMELT_OP_CONV ? 0 : n->op == SMELT_OP_CONV_BWD_INPUT ? 1 : 2;
    /* the role (0 x, 1 w, 2 y) of source 0, source 1 and the result */
    static const int roles[3][3] = { { 0, 1, 2 }, { 2, 1, 0 }, { 0, 2, 1 } };
    const int *role = roles[c->mode];
    const smelt_node *xwy[3];
    int64_t *strides[3] = { d->x_strides, d->w_strides, d->y_strides };
    int64_t bst[SMELT_MAX_DIMS];
    c->nin = n->nsrc;
    for (int k = 0; k < n->nsrc; k++) {
        if (!strided_of(L, n->src[k], &c->buf[k], &c->off[k], k < 2 ? strides[role[k]] : bst))
            abort();
        if (k < 2)
            xwy[role[k]] = &L->g->nodes[n->src[k]];
    }
    c->buf[3] = L->buf_of[node];
    buffer_strides(L->p, c->buf[3], n, strides[role[2]]);
    xwy[role[2]] = n;
    const smelt_node *x = xwy[0], *w = xwy[1], *y = xwy[2];
    d->nsp = n->a.conv.nsp;
    d->has_bias = n->nsrc == 3;
    d->b_stride = d->has_bias ? bst[0] : 0;
    d->n = x->shape[0], d->c = x->shape[1], d->o = w->shape[0], d->groups = n->a.conv.groups;
    for (int i = 0; i < d->nsp; i++) {
        d->in[i] = x->shape[i + 2], d->k[i] = w->shape[i + 2], d->out[i] = y->shape[i + 2];
        d->stride[i] = n->a.conv.stride[i], d->dil[i] = n->a.conv.dil[i];
        d->pad_lo[i] = n->a.conv.pad_lo[i], d->pad_hi[i] = n->a.conv.pad_hi[i];
    }
    add_step(L->p, (plan_step){ .kind = PS_CONV, .conv = c });
    L->p->nexterns++;
    return 0;
}

static int emit_node(lowering *L, int32_t i)
{
    const smelt_node *n = &L->g->nodes[i];
    if (is_conv_op(n->op))
        return emit_conv(L, i);
    if (n->op == SMELT_OP_MATMUL)
        return emit_matmul(L, i);
    if (n->op == SMELT_OP_CALL)
        return n->a.call.out ? 0 : emit_call(L, i);   /* one step per call */
    if (n->op == SMELT_OP_SDPA || n->op == SMELT_OP_SDPA_BWD)
        return emit_sdpa(L, i);
    if (n->op == SMELT_OP_FLEX || n->op == SMELT_OP_FLEX_BWD)
        return emit_flex(L, i);
    if (n->op != SMELT_OP_CAT)
        return emit_store_kernel(L, i, 1, L->buf_of[i], -1, 0, n);
    int64_t off = 0;
    for (int k = 0; k < n->nsrc; k++) {
        const smelt_node *s = &L->g->nodes[n->src[k]];
        int r = emit_store_kernel(L, n->src[k], 0, L->buf_of[i], n->a.axis.dim, off, n);
        if (r)
            return r;
        off += s->shape[n->a.axis.dim];
    }
    return 0;
}

static void reset_plan(smelt_plan *p)
{
    for (int32_t k = 0; k < p->nkernels; k++)
        free(p->kernels[k].items);
    for (int32_t k = 0; k < p->nsteps; k++) {
        free(p->steps[k].call);
        free(p->steps[k].attn);
        free(p->steps[k].conv);
    }
    p->nkernels = p->nbufs = p->nsteps = p->nexterns = p->ncalls = 0;
}

/* One attempt: buffers for realized nodes, then kernels in topological
 * order. Returns 0, 1 (a reduction was newly realized: retry) or -1. */
static int lower_once(lowering *L)
{
    const smelt_graph *g = L->g;
    smelt_plan *p = L->p;
    reset_plan(p);
    for (int32_t i = 0; i < g->n; i++)
        L->buf_of[i] = -1;
    for (int32_t i = 0; i < g->n; i++)
        if (g->nodes[i].op == SMELT_OP_INPUT)
            L->buf_of[i] = add_buf(p, (plan_buf){ .kind = PB_INPUT, .dtype = g->nodes[i].dtype,
                                                   .index = g->nodes[i].a.input.index });
    int32_t *outbuf = malloc(sizeof(int32_t) * (size_t)(g->nout + 1));
    if (!outbuf)
        abort();
    for (int32_t o = 0; o < g->nout; o++) {
        int32_t nd = g->outputs[o];
        outbuf[o] = add_buf(p, (plan_buf){ .kind = PB_OUTPUT, .dtype = g->nodes[nd].dtype, .index = o });
        if (L->buf_of[nd] < 0)
            L->buf_of[nd] = outbuf[o];
    }
    for (int32_t i = 0; i < g->n; i++)
        if (L->realized[i] && L->buf_of[i] < 0)
            L->buf_of[i] = add_buf(p, (plan_buf){ .kind = g->nodes[i].op == SMELT_OP_CALL ? PB_HOST : PB_TEMP,
                                                   .dtype = g->nodes[i].dtype, .chlast = L->chlast[i],
                                                   .nbytes = smelt_node_numel(&g->nodes[i]) *
                                                             (int64_t)smelt_dtype_size(g->nodes[i].dtype) });
    int r = 0;
    for (int32_t i = 0; i < g->n && !r; i++)
        if (L->realized[i] && g->nodes[i].op != SMELT_OP_INPUT)
            r = emit_node(L, i);
    for (int32_t o = 0; o < g->nout && !r; o++) {
        int32_t nd = g->outputs[o];
        if (L->buf_of[nd] != outbuf[o])
            r = emit_store_kernel(L, nd, 0, outbuf[o], -1, 0, &g->nodes[nd]);
    }
    free(outbuf);
    return r;
}

/* ---------- after lowering: pointwise kernels fused, updates in place ---------- */

/* Expressions visited by one walk: seen[e] == gen (a new walk: gen + 1). */
typedef struct xwalk {
    int32_t *seen, gen;
} xwalk;

/* 1 if e is no expression or this walk visited it already; else marks it. */
static int visited(xwalk *w, int32_t e)
{
    if (e < 0 || w->seen[e] == w->gen)
        return 1;
    w->seen[e] = w->gen;
    return 0;
}

/* Buffers marked read / written by a set of steps: rd[b] == id (and
 * wr[b] == id) for the set with stamp `id`, so a new set costs nothing to
 * clear; w: the expression walks (shared by the sets of one pass). */
typedef struct bufset {
    int32_t *rd, *wr, id;
    xwalk *w;
} bufset;

static void expr_reads(const kir_pool *P, int32_t e, bufset *bs)
{
    if (visited(bs->w, e))
        return;
    const kexpr *x = &P->ex[e];
    if (x->op == KE_LOAD || x->op == KE_GATHER)
        bs->rd[x->buf] = bs->id;
    for (int k = 0; k < 3; k++)
        expr_reads(P, x->src[k], bs);
}

/* Marks what step s reads and writes in the set bs->id. */
static void step_touch(const smelt_plan *p, const plan_step *s, bufset *bs)
{
    switch ((plan_step_kind)s->kind) {
    case PS_KERNEL: {
        const kir_kernel *k = &p->kernels[s->kernel];
        bs->w->gen++;
        for (int i = 0; i < k->nitems; i++) {
            expr_reads(&p->pool, k->items[i].value, bs);
            if (k->items[i].kind != KI_REDUCE)
                bs->wr[k->items[i].buf] = bs->id;
        }
        break;
    }
    case PS_MATMUL:
        bs->rd[s->a_buf] = bs->rd[s->b_buf] = bs->id;
        bs->wr[s->c_buf] = bs->id;
        break;
    case PS_CALL:
        for (int i = 0; i < s->call->nin; i++)
            bs->rd[s->call->in_buf[i]] = bs->id;
        for (int i = 0; i < s->call->nout; i++)
            bs->wr[s->call->out_buf[i]] = bs->id;
        break;
    case PS_SDPA:
        for (int i = 0; i < s->attn->nin; i++)
            bs->rd[s->attn->buf[i]] = bs->id;
        bs->wr[s->attn->buf[PLAN_SDPA_OUT]] = bs->id;
        if (s->attn->flex) {   /* its tables and what its tile kernels read */
            const plan_flex *f = &s->attn->fx;
            for (int t = 0; t < 4; t++)
                if (f->tab_buf[t] >= 0)
                    bs->rd[f->tab_buf[t]] = bs->id;
            for (int t = 0; t < PLAN_FLEX_NKERN; t++) {
                const kir_kernel *k = f->kern[t] >= 0 ? &p->kernels[f->kern[t]] : NULL;
                bs->w->gen++;
                for (int i = 0; k && i < k->nitems; i++)
                    expr_reads(&p->pool, k->items[i].value, bs);
            }
        }
        break;
    case PS_CONV:
        for (int i = 0; i < s->conv->nin; i++)
            bs->rd[s->conv->buf[i]] = bs->id;
        bs->wr[s->conv->buf[3]] = bs->id;
        break;
    }
}

/* 1 if every read of buffer buf in e is a load at index ix (no gather). */
static int reads_only_at(const kir_pool *P, int32_t e, int32_t buf, int32_t ix, xwalk *w)
{
    if (visited(w, e))
        return 1;
    const kexpr *x = &P->ex[e];
    if ((x->op == KE_LOAD || x->op == KE_GATHER) && x->buf == buf && (x->op == KE_GATHER || x->ix != ix))
        return 0;
    for (int k = 0; k < 3; k++)
        if (!reads_only_at(P, x->src[k], buf, ix, w))
            return 0;
    return 1;
}

/* 1 if e reads a buffer the set bs->id writes. */
static int reads_written(const kir_pool *P, int32_t e, bufset *bs)
{
    if (visited(bs->w, e))
        return 0;
    const kexpr *x = &P->ex[e];
    if ((x->op == KE_LOAD || x->op == KE_GATHER) && bs->wr[x->buf] == bs->id)
        return 1;
    for (int k = 0; k < 3; k++)
        if (reads_written(P, x->src[k], bs))
            return 1;
    return 0;
}

/* A kernel that stores one value per point and nothing else. */
static int pure_pointwise(const kir_kernel *k)
{
    if (k->rmask || k->split > 1 || !k->nitems)
        return 0;
    for (int i = 0; i < k->nitems; i++)
        if (k->items[i].kind != KI_STORE)
            return 0;
    return 1;
}

static void bufset_init(bufset *bs, const smelt_plan *p, xwalk *w)
{
    bs->rd = calloc((size_t)p->nbufs + 1, sizeof(int32_t));
    bs->wr = calloc((size_t)p->nbufs + 1, sizeof(int32_t));
    if (!bs->rd || !bs->wr)
        abort();
    bs->id = 0;
    bs->w = w;
}

static void bufset_free(bufset *bs)
{
    free(bs->rd);
    free(bs->wr);
}

static void xwalk_init(xwalk *w, const smelt_plan *p)
{
    if (!(w->seen = calloc((size_t)p->pool.nex + 1, sizeof(int32_t))))
        abort();
    w->gen = 0;
}

#define FUSE_WINDOW 48   /* steps looked back over */
#define FUSE_MAX_STORES 8

/* Pointwise kernels over the same loop nest run as one kernel when the
 * first can move down to the second: nothing between them touches what it
 * writes or writes what it reads, and the second reads what the first
 * wrote only at the point it is computing. Each point then runs the
 * stores in their old order, so every element is read from cache instead
 * of memory once per kernel (an optimizer's moment updates and parameter
 * update become one pass). */
static void fuse_pointwise(smelt_plan *p)
{
    uint8_t *dead = calloc((size_t)p->nsteps + 1, 1);
    if (!dead)
        abort();
    xwalk w;
    xwalk_init(&w, p);
    bufset mid, a;   /* the steps between (not moved), the candidate */
    bufset_init(&mid, p, &w);
    bufset_init(&a, p, &w);
    for (int32_t bi = 0; bi < p->nsteps; bi++) {
        plan_step *sb = &p->steps[bi];
        if (sb->kind != PS_KERNEL || !pure_pointwise(&p->kernels[sb->kernel]))
            continue;
        kir_kernel *kb_ = &p->kernels[sb->kernel];
        mid.id++;
        for (int32_t ai = bi - 1; ai >= 0 && ai >= bi - FUSE_WINDOW; ai--) {
            if (dead[ai])
                continue;
            plan_step *sa = &p->steps[ai];
            kir_kernel *ka = sa->kind == PS_KERNEL ? &p->kernels[sa->kernel] : NULL;
            int ok = ka && pure_pointwise(ka) && ka->nvars == kb_->nvars &&
                     !memcmp(ka->size, kb_->size, sizeof(int64_t) * (size_t)ka->nvars) &&
                     ka->nitems + kb_->nitems <= FUSE_MAX_STORES;
            if (ok) {
                a.id++;
                step_touch(p, sa, &a);
                /* what a writes: untouched between; what a reads: not written between */
                for (int i = 0; ok && i < ka->nitems; i++)
                    ok = mid.rd[ka->items[i].buf] != mid.id && mid.wr[ka->items[i].buf] != mid.id;
                for (int i = 0; ok && i < ka->nitems; i++) {
                    w.gen++;
                    ok = !reads_written(&p->pool, ka->items[i].value, &mid);
                }
                for (int i = 0; ok && i < kb_->nitems; i++)   /* b writes nothing a reads or writes */
                    ok = a.rd[kb_->items[i].buf] != a.id && a.wr[kb_->items[i].buf] != a.id;
                for (int j = 0; ok && j < ka->nitems; j++)   /* b reads a's results at their points */
                    for (int i = 0; ok && i < kb_->nitems; i++) {
                        w.gen++;
                        ok = reads_only_at(&p->pool, kb_->items[i].value, ka->items[j].buf, ka->items[j].ix, &w);
                    }
            }
            if (!ok) {
                step_touch(p, sa, &mid);
                continue;
            }
            kitem *items = malloc(sizeof(kitem) * (size_t)(ka->nitems + kb_->nitems));
            if (!items)
                abort();
            memcpy(items, ka->items, sizeof(kitem) * (size_t)ka->nitems);
            memcpy(items + ka->nitems, kb_->items, sizeof(kitem) * (size_t)kb_->nitems);
            free(kb_->items);
            kb_->items = items;
            kb_->nitems += ka->nitems;
            free(ka->items);
            ka->items = NULL;
            ka->nitems = 0;
            dead[ai] = 1;
        }
        if (kb_->nitems > 1)
            choose_vvar(p, kb_);
    }
    /* drop the emptied kernels and their steps */
    int32_t *knew = malloc(sizeof(int32_t) * ((size_t)p->nkernels + 1)), nk = 0, ns = 0;
    if (!knew)
        abort();
    for (int32_t k = 0; k < p->nkernels; k++) {
        knew[k] = -1;
        if (p->kernels[k].nitems)
            p->kernels[knew[k] = nk++] = p->kernels[k];
    }
    for (int32_t i = 0; i < p->nsteps; i++) {
        if (dead[i])
            continue;
        plan_step st = p->steps[i];
        if (st.kind == PS_KERNEL)
            st.kernel = knew[st.kernel];
        for (int t = 0; st.kind == PS_SDPA && st.attn->flex && t < PLAN_FLEX_NKERN; t++)
            if (st.attn->fx.kern[t] >= 0)
                st.attn->fx.kern[t] = knew[st.attn->fx.kern[t]];
        p->steps[ns++] = st;
    }
    p->nkernels = nk;
    p->nsteps = ns;
    free(knew);
    free(dead);
    bufset_free(&a);
    bufset_free(&mid);
    free(w.seen);
}

/* 1 if expression e can fail a run (an index check, integer division). */
static int expr_may_fail(const kir_pool *P, int32_t e, xwalk *w)
{
    if (visited(w, e))
        return 0;
    const kexpr *x = &P->ex[e];
    if (x->op == KE_GATHER || (x->op == KE_OP && (x->gop == SMELT_OP_CHECKIDX ||
        ((x->gop == SMELT_OP_FLOORDIV || x->gop == SMELT_OP_REMAINDER || x->gop == SMELT_OP_FMOD) &&
         !smelt_dtype_is_float((smelt_dtype)x->cdtype)))))
        return 1;
    for (int k = 0; k < 3; k++)
        if (expr_may_fail(P, x->src[k], w))
            return 1;
    return 0;
}

/* 1 if a run of p can fail or ask to run eagerly after some steps ran
 * (host calls, index checks, integer division): its inputs must then be
 * as they were, so nothing is updated in place. */
static int plan_may_fail(const smelt_plan *p, xwalk *w)
{
    for (int32_t s = 0; s < p->nsteps; s++) {
        const plan_step *st = &p->steps[s];
        if (st->kind == PS_CALL || (st->kind == PS_SDPA && st->attn->flex))
            return 1;   /* (a flex step's functions check their indices) */
        if (st->kind != PS_KERNEL)
            continue;
        const kir_kernel *k = &p->kernels[st->kernel];
        w->gen++;
        for (int i = 0; i < k->nitems; i++)
            if (expr_may_fail(&p->pool, k->items[i].value, w))
                return 1;
    }
    return 0;
}

/* The opts' in-place updates (input j takes output k): output k is written
 * into input j's memory when it is stored by one pointwise kernel at the
 * same layout, that kernel reads the input only at the point it writes
 * (and not in a later store of the point), and no later step reads the
 * input. */
static void place_updates(smelt_plan *p, const int32_t *upd, int32_t nupd)
{
    const smelt_graph *g = p->graph;
    int32_t nb = p->nbufs;
    xwalk w;
    xwalk_init(&w, p);
    bufset bs;
    bufset_init(&bs, p, &w);
    if (!nupd || plan_may_fail(p, &w)) {
        bufset_free(&bs);
        free(w.seen);
        return;
    }
    /* per buffer: the last step reading it, the steps writing it (one kept) */
    int32_t *last_rd = malloc(sizeof(int32_t) * ((size_t)nb + 1)), *writer = malloc(sizeof(int32_t) * ((size_t)nb + 1));
    int32_t *nwriters = calloc((size_t)nb + 1, sizeof(int32_t)), *in_buf = malloc(sizeof(int32_t) * ((size_t)g->ninputs + 1));
    int32_t *out_buf = malloc(sizeof(int32_t) * ((size_t)g->nout + 1)), *in_node = malloc(sizeof(int32_t) * ((size_t)g->ninputs + 1));
    if (!last_rd || !writer || !nwriters || !in_buf || !out_buf || !in_node)
        abort();
    for (int32_t b = 0; b < nb; b++)
        last_rd[b] = writer[b] = -1;
    for (int32_t s = 0; s < p->nsteps; s++) {
        bs.id++;
        step_touch(p, &p->steps[s], &bs);
        for (int32_t b = 0; b < nb; b++) {
            if (bs.rd[b] == bs.id)
                last_rd[b] = s;
            if (bs.wr[b] == bs.id) {
                writer[b] = s;
                nwriters[b]++;
            }
        }
    }
    for (int32_t i = 0; i < g->ninputs; i++)
        in_buf[i] = in_node[i] = -1;
    for (int32_t o = 0; o < g->nout; o++)
        out_buf[o] = -1;
    for (int32_t b = 0; b < nb; b++) {
        if (p->bufs[b].kind == PB_INPUT && p->bufs[b].index >= 0 && p->bufs[b].index < g->ninputs)
            in_buf[p->bufs[b].index] = b;
        if (p->bufs[b].kind == PB_OUTPUT && p->bufs[b].index >= 0 && p->bufs[b].index < g->nout)
            out_buf[p->bufs[b].index] = b;
    }
    for (int32_t i = 0; i < g->n; i++)
        if (g->nodes[i].op == SMELT_OP_INPUT && g->nodes[i].a.input.index < g->ninputs)
            in_node[g->nodes[i].a.input.index] = i;
    for (int32_t u = 0; u < nupd; u++) {
        int32_t j = upd[2 * u], k = upd[2 * u + 1];
        if (j < 0 || j >= g->ninputs || k < 0 || k >= g->nout)
            continue;
        int32_t bi = in_buf[j], bo = out_buf[k], in = in_node[j];
        if (bi < 0 || bo < 0 || in < 0 || p->bufs[bo].inplace || nwriters[bo] != 1)
            continue;
        int32_t ws = writer[bo];
        const smelt_node *ni = &g->nodes[in], *no = &g->nodes[g->outputs[k]];
        int64_t st[SMELT_MAX_DIMS];
        contiguous_strides(no->ndim, no->shape, st);
        int ok = ni->dtype == no->dtype && ni->ndim == no->ndim && p->bufs[bo].dtype == ni->dtype &&
                 last_rd[bi] <= ws && p->steps[ws].kind == PS_KERNEL &&
                 pure_pointwise(&p->kernels[p->steps[ws].kernel]);
        for (int d = 0; ok && d < ni->ndim; d++)
            ok = ni->shape[d] == no->shape[d] && (ni->shape[d] == 1 || ni->stride[d] == st[d]);
        for (int32_t o = 0; ok && o < g->nout; o++)   /* its own buffer */
            ok = o == k || g->outputs[o] != g->outputs[k];
        const kir_kernel *kk = ok ? &p->kernels[p->steps[ws].kernel] : NULL;
        int wi = -1;
        for (int i = 0; ok && i < kk->nitems; i++)
            if (kk->items[i].buf == bo)
                ok = wi < 0 ? (wi = i, 1) : 0;
        for (int i = 0; ok && i < kk->nitems; i++) {
            w.gen++;
            if (i > wi) {   /* a later store of the point must not read the old value */
                bs.id++;
                expr_reads(&p->pool, kk->items[i].value, &bs);
                ok = bs.rd[bi] != bs.id;
            } else {
                ok = reads_only_at(&p->pool, kk->items[i].value, bi, kk->items[wi].ix, &w);
            }
        }
        if (ok && wi >= 0)
            p->bufs[bo].inplace = j + 1;
    }
    free(last_rd);
    free(writer);
    free(nwriters);
    free(in_buf);
    free(out_buf);
    free(in_node);
    bufset_free(&bs);
    free(w.seen);
}

int ind_lower(smelt_plan *p, const smelt_compile_opts *o, char *err, size_t errlen)
{
    const smelt_graph *g = p->graph;
    lowering L = { .p = p, .g = g, .err = err, .errlen = errlen };
    L.realized = calloc((size_t)g->n + 1, 1);
    L.buf_of = calloc((size_t)g->n + 1, sizeof(int32_t));
    L.nuse = calloc((size_t)g->n + 1, sizeof(int32_t));
    L.chlast = calloc((size_t)g->n + 1, 1);
    L.tile = calloc((size_t)g->n + 1, 1);
    L.host_externs = !p->be || !p->be->device_memory;
    if (!L.realized || !L.buf_of || !L.nuse || !L.chlast || !L.tile)
        abort();
    for (int32_t i = 0; i < g->n; i++) {
        const smelt_node *n = &g->nodes[i];
        L.tile[i] = n->op == SMELT_OP_FLEX_ARG;
        for (int k = 0; k < n->nsrc && n->op != SMELT_OP_FLEX && n->op != SMELT_OP_FLEX_BWD; k++)
            L.tile[i] |= L.tile[n->src[k]];
    }
    /* a flex node's function values are evaluated per tile even where they
     * are constants (a derivative of 1): never a [B,H,L,S] buffer */
    for (int32_t i = 0; i < g->n; i++) {
        const smelt_node *n = &g->nodes[i];
        static const int parts[3] = { SMELT_FLEX_SCORE, SMELT_FLEX_MASK, SMELT_FLEX_DSCORE };
        for (int k = 0; (n->op == SMELT_OP_FLEX || n->op == SMELT_OP_FLEX_BWD) && k < 3; k++)
            for (int32_t at = smelt_flex_src(n, parts[k]), x = at < 0 ? -1 : n->src[at]; x >= 0;) {
                L.tile[x] = 1;
                smelt_op_kind kind = smelt_op_kind_of((smelt_op)g->nodes[x].op);
                x = kind == SMELT_KIND_VIEW || kind == SMELT_KIND_UNARY ? g->nodes[x].src[0] : -1;
            }
    }
    for (int32_t i = 0; i < g->n; i++)
        for (int k = 0; k < g->nodes[i].nsrc; k++)
            L.nuse[g->nodes[i].src[k]]++;
    for (int32_t i = 0; i < g->n; i++)
        L.buf_of[i] = -1;
    decide_realized(&L);
    unrealize_shared(&L);
    decide_chlast(&L);
    realize_extern_sources(&L);
    int r = 0;
    for (int32_t i = 0; i < g->n && !r; i++)
        if (L.tile[i] && L.realized[i])
            r = -1, snprintf(err, errlen, "flex_attention: a score function's value is needed outside the attention");
    if (!r)
        while ((r = lower_once(&L)) == 1)
            ;
    if (r == 0) {
        fuse_pointwise(p);
        place_updates(p, o ? o->update : NULL, o ? o->nupdate : 0);
    }
    free(L.chlast);
    free(L.tile);
    free(L.realized);
    free(L.buf_of);
    free(L.nuse);
    return r;
}
