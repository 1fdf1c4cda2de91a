/* smelt convolution (see conv.h for the contract).
 *
 * oneDNN path. A "plan" (cached per normalised descriptor and thread count)
 * splits the convolution into items for smelt's thread pool: batch ranges
 * (as many as threads), or, when the batch is small and does not divide
 * evenly over the threads (batch-1 inference), (image, chunk of output rows
 * along the first spatial dim), each chunk reading the input rows its
 * windows touch, with the padding adjusted so it sees zeros exactly where
 * the whole convolution would. Every distinct piece shape ("kind") has its
 * own single-threaded oneDNN primitive; all kinds share one packed-weights
 * layout, the one the first kind chose (weights format `any`), so the
 * user's weights are reordered into it once per call by the calling thread
 * before the work is split.
 *
 * oneDNN always sees channels-last activations (its fast brgconv / jit
 * kernels; for channels-first it has only an im2col+gemm path, slower than
 * transposing, and for mixed layouts only its reference kernel). A piece
 * whose view of x or y is not dense channels-last (channels-first, a
 * channel slice, a transposed view, ...) goes through a dense copy in a
 * buffer of the running thread, one image per piece so the copy stays in
 * cache. Where oneDNN has no fast kernel even so, or is unavailable, or the
 * problem has empty dims, a portable direct loop runs instead.
 */
#include "conv.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "onednn.h"
#include "primcache.h"
#include "threadpool.h"

/* 1 runs the portable loop where oneDNN would run (tests/c build it so). */
#ifndef KERN_CONV_FORCE_PORTABLE
#define KERN_CONV_FORCE_PORTABLE 0
#endif

_Static_assert(sizeof(kern_conv_desc) == 2 * sizeof(int) + 41 * sizeof(int64_t),
               "kern_conv_desc has padding bytes (the cache compares keys bytewise)");

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* -------------------------------------------------------------- checking */

static void fmt_dims(char *buf, size_t len, int64_t a, int64_t b, const int64_t *sp, int nsp)
{
    size_t at = (size_t)snprintf(buf, len, "[%lld, %lld", (long long)a, (long long)b);
    for (int i = 0; i < nsp && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, ", %lld", (long long)sp[i]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
}

static int fail(char *err, size_t errlen, const char *msg, const kern_conv_desc *d)
{
    char x[160], w[160], y[160];
    int nsp = d->nsp >= 1 && d->nsp <= 3 ? d->nsp : 0;
    fmt_dims(x, sizeof x, d->n, d->c, d->in, nsp);
    fmt_dims(w, sizeof w, d->o, d->groups > 0 ? d->c / d->groups : d->c, d->k, nsp);
    fmt_dims(y, sizeof y, d->n, d->o, d->out, nsp);
    if (err && errlen)
        snprintf(err, errlen, "conv: %s (x %s, w %s, y %s, groups %lld)", msg, x, w, y,
                 (long long)d->groups);
    return -1;
}

/* NULL if the spatial geometry of d (nsp already checked) is valid, else
 * what is wrong. */
static const char *check_spatial(const kern_conv_desc *d)
{
    for (int i = 0; i < d->nsp; i++) {
        if (d->in[i] < 0 || d->k[i] < 1 || d->stride[i] < 1 || d->dil[i] < 1 ||
            d->pad_lo[i] < 0 || d->pad_hi[i] < 0)
            return "bad spatial size, kernel, stride, dilation or padding";
        int64_t span = d->in[i] + d->pad_lo[i] + d->pad_hi[i] - d->dil[i] * (d->k[i] - 1) - 1;
        if (span < 0 || d->out[i] != span / d->stride[i] + 1)
            return "output size does not match the input size, kernel, stride and padding";
    }
    return NULL;
}

/* 0 if d satisfies conv.h's contract with operand `out` (0 x, 1 w, 2 y)
 * written, else -1 with a message. */
static int check_desc(const kern_conv_desc *d, int out, char *err, size_t errlen)
{
    if (d->nsp < 1 || d->nsp > 3)
        return fail(err, errlen, "nsp must be 1, 2 or 3", d);
    if (d->n < 0 || d->c < 0 || d->o < 0 || d->groups < 1 || d->c % d->groups ||
        d->o % d->groups)
        return fail(err, errlen, "bad sizes (groups must divide in and out channels)", d);
    const char *msg = check_spatial(d);
    if (msg)
        return fail(err, errlen, msg, d);
    int nd = d->nsp + 2;
    for (int i = 0; i < nd; i++)
        if (d->x_strides[i] < 0 || d->w_strides[i] < 0 || d->y_strides[i] < 0)
            return fail(err, errlen, "negative stride", d);
    if (d->has_bias && d->b_stride < 0)
        return fail(err, errlen, "negative bias stride", d);
    int64_t dims[3][5] = {{d->n, d->c, d->in[0], d->in[1], d->in[2]},
                          {d->o, d->c / d->groups, d->k[0], d->k[1], d->k[2]},
                          {d->n, d->o, d->out[0], d->out[1], d->out[2]}};
    const int64_t *st = out == 0 ? d->x_strides : out == 1 ? d->w_strides : d->y_strides;
    int64_t numel = 1;
    for (int i = 0; i < nd; i++)
        numel *= dims[out][i];
    for (int i = 0; i < nd && numel; i++)
        if (dims[out][i] > 1 && st[i] == 0)
            return fail(err, errlen, "output has stride 0 in a dim of size > 1", d);
    return 0;
}

/* ------------------------------------------------------------ geometry */

/* d with 3 spatial dims (unused ones: size 1, kernel 1, stride 1, no
 * padding, stride 0 in memory), as the copy and direct loops see it. */
typedef struct cv_geo {
    int64_t n, c, o, cg, og;
    int64_t in[3], k[3], out[3], st[3], pl[3], dil[3];
    int64_t xs[5], ws[5], ys[5];
} cv_geo;

static void geo_init(cv_geo *g, const kern_conv_desc *d)
{
    memset(g, 0, sizeof *g);
    g->n = d->n, g->c = d->c, g->o = d->o;
    g->cg = d->c / d->groups, g->og = d->o / d->groups;
    for (int i = 0; i < 3; i++) {
        int u = i < d->nsp;
        g->in[i] = u ? d->in[i] : 1, g->k[i] = u ? d->k[i] : 1, g->out[i] = u ? d->out[i] : 1;
        g->st[i] = u ? d->stride[i] : 1, g->pl[i] = u ? d->pad_lo[i] : 0;
        g->dil[i] = u ? d->dil[i] : 1;
    }
    for (int i = 0; i < d->nsp + 2; i++)
        g->xs[i] = d->x_strides[i], g->ws[i] = d->w_strides[i], g->ys[i] = d->y_strides[i];
}

/* Copies the 5-d block dims (n, c, s0, s1, s2) from src to dst, element
 * strides ss and ds. Tiles of 16 positions along s2 by all channels, so a
 * channels-first side is read or written 16 elements at a time while the
 * channels-last side walks its channels. Dense channels-last strides of
 * dims are the same whichever spatial dims are the size-1 ones. */
static void copy5(const int64_t *dims, const float *src, const int64_t *ss, float *dst,
                  const int64_t *ds)
{
    enum { TILE = 16 };
    for (int64_t n = 0; n < dims[0]; n++)
        for (int64_t a = 0; a < dims[2]; a++)
            for (int64_t b = 0; b < dims[3]; b++)
                for (int64_t e0 = 0; e0 < dims[4]; e0 += TILE) {
                    int64_t ne = min64(TILE, dims[4] - e0);
                    const float *s = src + n * ss[0] + a * ss[2] + b * ss[3] + e0 * ss[4];
                    float *t = dst + n * ds[0] + a * ds[2] + b * ds[3] + e0 * ds[4];
                    for (int64_t c = 0; c < dims[1]; c++)
                        for (int64_t e = 0; e < ne; e++)
                            t[c * ds[1] + e * ds[4]] = s[c * ss[1] + e * ss[4]];
                }
}

/* Strides of the dense channels-last layout of dims (n, c, s0, s1, s2). */
static void nxc_strides(const int64_t *dims, int64_t *st)
{
    st[1] = 1;
    st[4] = dims[1];
    st[3] = st[4] * dims[4];
    st[2] = st[3] * dims[3];
    st[0] = st[2] * dims[2];
}

/* ------------------------------------------------------- portable kernel */

typedef struct cv_direct {
    cv_geo g;
    const float *x, *w, *b;
    int64_t bs;
    float *y;
} cv_direct;

/* The value at position pos of a 3-d box, for the pair (a, b) an item of
 * a portable loop stands for. */
typedef float (*box_elem_fn)(const void *ctx, int64_t a, int64_t b, const int64_t *pos);

/* Writes elem(ctx, a, b, pos) at every position pos < dims of the box at
 * base (element strides st). */
static void fill_box(float *base, const int64_t *dims, const int64_t *st, box_elem_fn elem, const void *ctx,
                     int64_t a, int64_t b)
{
    int64_t pos[3];
    for (pos[0] = 0; pos[0] < dims[0]; pos[0]++)
        for (pos[1] = 0; pos[1] < dims[1]; pos[1]++)
            for (pos[2] = 0; pos[2] < dims[2]; pos[2]++)
                base[pos[0] * st[0] + pos[1] * st[1] + pos[2] * st[2]] = elem(ctx, a, b, pos);
}

/* One output element: bias plus the window sum over the channels of its
 * group (windows may hang over the padding; those terms are skipped). */
static float direct_elem(const void *ctx, int64_t n, int64_t oc, const int64_t *op)
{
    const cv_direct *p = ctx;
    const cv_geo *g = &p->g;
    float acc = p->b ? p->b[oc * p->bs] : 0.0f;
    const float *xb = p->x + n * g->xs[0] + oc / g->og * g->cg * g->xs[1];
    const float *wb = p->w + oc * g->ws[0];
    int64_t i0 = op[0] * g->st[0] - g->pl[0], i1 = op[1] * g->st[1] - g->pl[1];
    int64_t i2 = op[2] * g->st[2] - g->pl[2];
    for (int64_t c = 0; c < g->cg; c++)
        for (int64_t a = 0; a < g->k[0]; a++) {
            int64_t ia = i0 + a * g->dil[0];
            if (ia < 0 || ia >= g->in[0])
                continue;
            for (int64_t b = 0; b < g->k[1]; b++) {
                int64_t ib = i1 + b * g->dil[1];
                if (ib < 0 || ib >= g->in[1])
                    continue;
                for (int64_t e = 0; e < g->k[2]; e++) {
                    int64_t ie = i2 + e * g->dil[2];
                    if (ie >= 0 && ie < g->in[2])
                        acc += xb[c * g->xs[1] + ia * g->xs[2] + ib * g->xs[3] + ie * g->xs[4]] *
                               wb[c * g->ws[1] + a * g->ws[2] + b * g->ws[3] + e * g->ws[4]];
                }
            }
        }
    return acc;
}

/* kern_range_fn over (image, output channel) pairs. */
static void direct_range(void *ctx, int64_t begin, int64_t end)
{
    const cv_direct *p = ctx;
    const cv_geo *g = &p->g;
    for (int64_t it = begin; it < end; it++) {
        int64_t n = it / g->o, oc = it % g->o;
        fill_box(p->y + n * g->ys[0] + oc * g->ys[1], g->out, g->ys + 2, direct_elem, p, n, oc);
    }
}

/* The portable kernel for a validated d with n, o > 0 (any c, sizes). */
static void conv_portable(const kern_conv_desc *d, const float *x, const float *w,
                          const float *bias, float *y)
{
    cv_direct p = {.x = x, .w = w, .b = d->has_bias ? bias : NULL, .bs = d->b_stride, .y = y};
    geo_init(&p.g, d);
    int64_t per = p.g.cg * p.g.k[0] * p.g.k[1] * p.g.k[2] * p.g.out[0] * p.g.out[1] * p.g.out[2];
    int64_t grain = per >= (1 << 16) ? 1 : (1 << 16) / (per + 1);
    kern_parallel_for(d->n * d->o, grain, direct_range, &p);
}

/* ------------------------------------------------------------ the plan */

/* One piece shape: n images, output rows [oh0, oh0 + oh) along the first
 * spatial dim, reading input rows [ih0, ih0 + ih) with that dim's padding
 * pad_lo / pad_hi; prim computes it (src_md / dst_md: its activations). */
typedef struct cv_kind {
    int64_t n, ih0, ih, oh0, oh, pad_lo, pad_hi;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t src_md, dst_md, scratch_md;
    size_t scratch_bytes;
} cv_kind;

/* A normalised descriptor (unused entries 0, strides of size-1 dims 0, no
 * bias stride: a strided bias is copied per call) plus what the plan
 * depends on besides. */
typedef struct cv_key {
    kern_conv_desc d;
    int32_t nthreads, pinned;
} cv_key;

/* A cache entry (kernels/primcache.h). fast 0: oneDNN has no fast kernel
 * for this key, the portable loop runs. Items: rows 0 -> item i is images
 * [i*q, i*q + q) (kind 1 for a shorter last range); rows 1 -> item i is
 * image i / nkinds, row chunk (kind) i % nkinds. x_copy / y_copy: the
 * activation goes through the running thread's dense channels-last buffer.
 * w_reorder NULL: the user's weights already are in w_md. */
typedef struct cv_plan {
    kern_primcache_entry ce;
    cv_key key;
    int fast, rows, x_copy, y_copy, nkinds;
    int64_t q, nitems;
    dnnl_memory_desc_t w_user_md, w_md, b_md, wr_scratch_md;
    size_t w_bytes, wr_scratch_bytes;
    dnnl_primitive_t w_reorder;
    cv_kind kinds[];
} cv_plan;

static const dnnl_format_tag_t k_nxc_tags[3] = {dnnl_nwc, dnnl_nhwc, dnnl_ndhwc};

/* 1 if the block dims (n, c, sp...) with strides st is dense channels-last
 * (strides of size-1 dims do not matter). */
static int dense_nxc(int nsp, const int64_t *dims, const int64_t *st)
{
    int order[5], n = 0, ok = 1;        /* innermost first */
    order[n++] = 1;
    for (int i = nsp + 1; i >= 2; i--)
        order[n++] = i;
    order[n++] = 0;
    int64_t want = 1;
    for (int i = 0; i < n; i++) {
        ok &= dims[order[i]] == 1 || st[order[i]] == want;
        want *= dims[order[i]];
    }
    return ok;
}

/* The input rows output rows [oh0, oh0 + oh) of the first spatial dim read,
 * clipped to the input, into k (with the padding making up the rest). The
 * last chunk keeps the input's trailing rows and the caller's pad_hi, so an
 * unsplit piece is the caller's whole input. */
static void kind_rows(const kern_conv_desc *d, int64_t oh0, int64_t oh, cv_kind *k)
{
    int64_t lo = oh0 * d->stride[0] - d->pad_lo[0];
    int64_t hi = (oh0 + oh - 1) * d->stride[0] - d->pad_lo[0] + d->dil[0] * (d->k[0] - 1) + 1;
    int last = oh0 + oh == d->out[0];
    k->oh0 = oh0, k->oh = oh;
    k->pad_lo = lo < 0 ? -lo : 0;
    k->pad_hi = last ? d->pad_hi[0] : hi > d->in[0] ? hi - d->in[0] : 0;
    k->ih0 = lo < 0 ? 0 : lo;
    k->ih = (last ? d->in[0] : min64(hi, d->in[0])) - k->ih0;
}

/* Splits the work of key k into items and kinds (p->kinds has room for
 * max(2, nthreads) kinds); split 0 makes one item. Row chunks are used
 * when the batch does not divide evenly over the threads and is small
 * (batch 1 inference on several threads), else batch ranges: as many as
 * threads, or (single) one image each. 0, or -1 if a piece would read no
 * input row (only padding; the caller retries another way). */
static int plan_split(cv_plan *p, const kern_conv_desc *d, int split, int single)
{
    int nt = p->key.nthreads;
    int64_t oh = d->out[0];
    p->rows = split && d->n % nt && d->n < 4 * nt && oh > 1;
    p->q = split && !p->rows ? (single ? 1 : ceil_div(d->n, nt)) : d->n;
    int64_t chunk = p->rows ? ceil_div(oh, nt) : oh;
    p->nkinds = p->rows ? (int)ceil_div(oh, chunk) : 1 + (d->n % p->q != 0);
    p->nitems = p->rows ? d->n * p->nkinds : ceil_div(d->n, p->q);
    for (int i = 0; i < p->nkinds; i++) {
        cv_kind *k = &p->kinds[i];
        k->n = p->rows ? 1 : i == 0 ? p->q : d->n % p->q;
        kind_rows(d, p->rows ? i * chunk : 0, p->rows ? min64(chunk, oh - i * chunk) : oh, k);
        if (k->ih < 1)
            return -1;
    }
    return 0;
}

/* The view of kind k of x (is_y 0) or y (1) in the caller's memory: dims
 * (n, c, rows, s1, s2) with unused trailing spatial dims of size 1. */
static void kind_view(const kern_conv_desc *d, const cv_kind *k, int is_y, int64_t *dims)
{
    dims[0] = k->n, dims[1] = is_y ? d->o : d->c, dims[2] = is_y ? k->oh : k->ih;
    for (int i = 1; i < 3; i++)
        dims[2 + i] = i < d->nsp ? (is_y ? d->out[i] : d->in[i]) : 1;
}

/* Whether x and y must go through channels-last copies: not if every
 * piece's view of them already is dense channels-last. */
static void plan_layouts(cv_plan *p, const kern_conv_desc *d)
{
    p->x_copy = p->y_copy = 0;
    for (int i = 0; i < p->nkinds; i++) {
        int64_t dims[5];
        kind_view(d, &p->kinds[i], 0, dims);
        p->x_copy |= !dense_nxc(d->nsp, dims, d->x_strides);
        kind_view(d, &p->kinds[i], 1, dims);
        p->y_copy |= !dense_nxc(d->nsp, dims, d->y_strides);
    }
}

/* The user's weights as oneDNN sees them: [O, C/g, *k], or with groups
 * [g, O/g, C/g, *k]; tag dnnl_format_tag_any gives the `any` layout. */
static dnnl_status_t weights_md(const kern_conv_desc *d, int any, dnnl_memory_desc_t *md)
{
    dnnl_dims_t dims, st;
    int nd = 0;
    if (d->groups > 1)
        dims[nd] = d->groups, st[nd++] = d->o / d->groups * d->w_strides[0];
    dims[nd] = d->o / d->groups, st[nd++] = d->w_strides[0];
    dims[nd] = d->c / d->groups, st[nd++] = d->w_strides[1];
    for (int i = 0; i < d->nsp; i++)
        dims[nd] = d->k[i], st[nd++] = d->w_strides[2 + i];
    if (any)
        return dnnl_memory_desc_init_by_tag(md, nd, dims, dnnl_f32, dnnl_format_tag_any);
    kern_onednn_fix_unit_strides(nd, dims, st);
    return dnnl_memory_desc_init_by_strides(md, nd, dims, dnnl_f32, st);
}

/* Creates kind k's primitive; wmd: the weights layout (`any` for the first
 * kind). 0, or -1 where oneDNN fails or has only a reference kernel. */
static int kind_create(const kern_conv_desc *d, cv_kind *k, const dnnl_memory_desc_t *wmd,
                       const dnnl_memory_desc_t *bmd)
{
    dnnl_dims_t sdims, ddims, st, dil, pl, ph;
    kind_view(d, k, 0, sdims);
    kind_view(d, k, 1, ddims);
    for (int i = 0; i < d->nsp; i++)
        st[i] = d->stride[i], dil[i] = d->dil[i] - 1, pl[i] = d->pad_lo[i], ph[i] = d->pad_hi[i];
    pl[0] = k->pad_lo, ph[0] = k->pad_hi;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_format_tag_t tag = k_nxc_tags[d->nsp - 1];
    if (dnnl_memory_desc_init_by_tag(&k->src_md, d->nsp + 2, sdims, dnnl_f32, tag) ||
        dnnl_memory_desc_init_by_tag(&k->dst_md, d->nsp + 2, ddims, dnnl_f32, tag) ||
        dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                   dnnl_convolution_direct, &k->src_md, wmd, bmd,
                                                   &k->dst_md, st, dil, pl, ph) ||
        !(pd = kern_onednn_pd_create(&cd)))
        return -1;
    k->prim = kern_onednn_prim_create(pd, &k->scratch_md, &k->scratch_bytes);
    dnnl_primitive_desc_destroy(pd);
    return k->prim ? 0 : -1;
}

/* The reorder from the user's weights into the first kind's layout
 * (none if they already match). 0 or -1. */
static int plan_weights(cv_plan *p, const kern_conv_desc *d)
{
    dnnl_primitive_desc_t pd;
    p->w_bytes = dnnl_memory_desc_get_size(&p->w_md);
    if (weights_md(d, 0, &p->w_user_md) != dnnl_success)
        return -1;
    if (dnnl_memory_desc_equal(&p->w_user_md, &p->w_md))
        return 0;
    if (!(pd = kern_onednn_reorder_pd_create(&p->w_user_md, &p->w_md)))
        return -1;
    p->w_reorder = kern_onednn_prim_create(pd, &p->wr_scratch_md, &p->wr_scratch_bytes);
    dnnl_primitive_desc_destroy(pd);
    return p->w_reorder ? 0 : -1;
}

static void plan_drop_prims(cv_plan *p)
{
    for (int i = 0; i < p->nkinds; i++)
        if (p->kinds[i].prim)
            dnnl_primitive_destroy(p->kinds[i].prim);
    if (p->w_reorder)
        dnnl_primitive_destroy(p->w_reorder);
    for (int i = 0; i < p->nkinds; i++)
        p->kinds[i].prim = NULL;
    p->w_reorder = NULL;
}

/* One attempt at oneDNN primitives for the plan, split or not. Pieces
 * that copy activations are one image each (so the copies stay in cache).
 * 0, or -1 with nothing kept. */
static int plan_try(cv_plan *p, int split)
{
    const kern_conv_desc *d = &p->key.d;
    const_dnnl_primitive_desc_t pd;
    dnnl_memory_desc_t wany, *bmd = NULL;
    if (plan_split(p, d, split, 0) != 0)
        return -1;
    plan_layouts(p, d);
    if ((p->x_copy || p->y_copy) && split && !p->rows && p->q > 1) {
        if (plan_split(p, d, split, 1) != 0)
            return -1;
        plan_layouts(p, d);
    }
    dnnl_dims_t o = {d->o};
    if (d->has_bias && dnnl_memory_desc_init_by_tag(bmd = &p->b_md, 1, o, dnnl_f32, dnnl_a))
        return -1;
    if (weights_md(d, 1, &wany) || kind_create(d, &p->kinds[0], &wany, bmd) ||
        dnnl_primitive_get_primitive_desc(p->kinds[0].prim, &pd)) {
        plan_drop_prims(p);
        return -1;
    }
    p->w_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    int rc = 0;
    for (int i = 1; i < p->nkinds && rc == 0; i++)
        rc = kind_create(d, &p->kinds[i], &p->w_md, bmd);
    if (rc == 0)
        rc = plan_weights(p, d);
    if (rc)
        plan_drop_prims(p);
    return rc;
}

/* Fills a new plan's primitives, trying the split (if the work is worth
 * it; on one thread that only makes one image per piece when copying)
 * before one item; p->fast stays 0 where neither works. */
static void plan_create(cv_plan *p)
{
    const kern_conv_desc *d = &p->key.d;
    double flops = 2.0 * (double)d->n * (double)d->o * (double)(d->c / d->groups);
    for (int i = 0; i < d->nsp; i++)
        flops *= (double)d->k[i] * (double)d->out[i];
    int split = flops >= 2e5;
    if (!kern_onednn_engine())
        return;
    p->fast = plan_try(p, split) == 0 || (split && plan_try(p, 0) == 0);
}

/* ------------------------------------------------------------ the cache */

/* The key of a validated d run with nthreads pool threads. */
static void make_key(const kern_conv_desc *d, int nthreads, cv_key *k)
{
    memset(k, 0, sizeof *k);
    kern_conv_desc *n = &k->d;
    n->nsp = d->nsp, n->has_bias = d->has_bias != 0;
    n->n = d->n, n->c = d->c, n->o = d->o, n->groups = d->groups;
    int64_t xd[5] = {d->n, d->c}, wd[5] = {d->o, d->c / d->groups}, yd[5] = {d->n, d->o};
    for (int i = 0; i < d->nsp; i++) {
        n->in[i] = d->in[i], n->k[i] = d->k[i], n->out[i] = d->out[i];
        n->stride[i] = d->stride[i], n->pad_lo[i] = d->pad_lo[i], n->pad_hi[i] = d->pad_hi[i];
        n->dil[i] = d->dil[i];
        xd[2 + i] = d->in[i], wd[2 + i] = d->k[i], yd[2 + i] = d->out[i];
    }
    for (int i = 0; i < d->nsp + 2; i++) {
        n->x_strides[i] = xd[i] == 1 ? 0 : d->x_strides[i];
        n->w_strides[i] = wd[i] == 1 ? 0 : d->w_strides[i];
        n->y_strides[i] = yd[i] == 1 ? 0 : d->y_strides[i];
    }
    k->nthreads = nthreads, k->pinned = kern_onednn_pins_threads();
}

/* kern_primcache create: a plan for key with room for its kinds, its
 * primitives made; NULL if out of memory. */
static void *plan_new(const void *key)
{
    const cv_key *k = key;
    int room = k->nthreads > 2 ? k->nthreads : 2;
    cv_plan *p = calloc(1, sizeof *p + (size_t)room * sizeof(cv_kind));
    if (p) {
        p->key = *k;
        plan_create(p);
    }
    return p;
}

/* kern_primcache destroy. */
static void plan_free(void *plan)
{
    plan_drop_prims(plan);
    free(plan);
}

enum { CV_SETS = 16, CV_WAYS = 8 };     /* 128 cached plans */

static kern_primcache_entry *g_slots[CV_SETS * CV_WAYS];
static kern_primcache g_cache =
    KERN_PRIMCACHE_INIT(g_slots, CV_SETS, CV_WAYS, cv_plan, key, plan_new, plan_free);

/* ------------------------------------------------------------ execution */

/* One call on a plan: operands, packed weights, the first error. */
typedef struct cv_run {
    const cv_plan *p;
    const kern_conv_desc *d;
    const float *x, *w, *b;
    float *y;
    _Atomic int failed;
    char err[256];
} cv_run;

static void run_fail(cv_run *r, const char *msg, dnnl_status_t st)
{
    if (atomic_exchange(&r->failed, 1) == 0)
        snprintf(r->err, sizeof r->err, "conv: %s%s%s", msg, st ? ": " : "",
                 st ? dnnl_status2str(st) : "");
}

/* The activation block of kind k at ptr (strides st) as a dense
 * channels-last copy in buf, or (to_user) the copy written back to ptr.
 * copy5 sees the spatial dims right-aligned (its tiles run along the
 * innermost one). */
static float *copy_nxc(const kern_conv_desc *d, const cv_kind *k, int is_y, float *ptr,
                       const int64_t *st, int to_user)
{
    int64_t v[5], dims[5] = {0, 0, 1, 1, 1}, dense[5], ust[5] = {st[0], st[1], 0, 0, 0};
    int sh = 3 - d->nsp;
    kind_view(d, k, is_y, v);
    dims[0] = v[0], dims[1] = v[1];
    for (int i = 0; i < d->nsp; i++)
        dims[2 + sh + i] = v[2 + i], ust[2 + sh + i] = st[2 + i];
    nxc_strides(dims, dense);
    float *b = kern_onednn_thread_buf(is_y ? KERN_BUF_DST : KERN_BUF_SRC,
                                      (size_t)(dims[0] * dense[0]) * sizeof(float));
    if (b && to_user)
        copy5(dims, b, dense, ptr, ust);
    else if (b)
        copy5(dims, ptr, ust, b, dense);
    return b;
}

/* Runs item it of the plan on this thread. */
static void run_item(cv_run *r, int64_t it)
{
    const cv_plan *p = r->p;
    const kern_conv_desc *d = r->d;
    const cv_kind *k = &p->kinds[p->rows ? it % p->nkinds : it * p->q + p->q > d->n];
    int64_t n0 = p->rows ? it / p->nkinds : it * p->q;
    float *x = (float *)r->x + n0 * d->x_strides[0] + k->ih0 * d->x_strides[2];
    float *y = r->y + n0 * d->y_strides[0] + k->oh0 * d->y_strides[2], *yo = y;
    size_t ybytes = dnnl_memory_desc_get_size(&k->dst_md);
    if ((p->x_copy && !(x = copy_nxc(d, k, 0, x, d->x_strides, 0))) ||
        (p->y_copy && !(yo = kern_onednn_thread_buf(KERN_BUF_DST, ybytes)))) {
        run_fail(r, "out of memory for a layout copy", dnnl_success);
        return;
    }
    int ids[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
    dnnl_memory_desc_t mds[4] = {k->src_md, p->w_md, k->dst_md, p->b_md};
    void *ptrs[4] = {x, (void *)r->w, yo, (void *)r->b};
    dnnl_status_t st = kern_onednn_execute(k->prim, 3 + d->has_bias, ids, mds, ptrs,
                                           &k->scratch_md, k->scratch_bytes);
    if (st != dnnl_success)
        run_fail(r, "oneDNN failed", st);
    else if (p->y_copy)
        copy_nxc(d, k, 1, y, d->y_strides, 1);
}

/* kern_range_fn over items; oneDNN runs single-threaded in each. */
static void run_range(void *ctx, int64_t begin, int64_t end)
{
    int saved = kern_onednn_serial_begin();
    for (int64_t it = begin; it < end && !atomic_load(&((cv_run *)ctx)->failed); it++)
        run_item(ctx, it);
    kern_onednn_serial_end(saved);
}

/* Packs the weights (and a strided bias) for the call into this thread's
 * buffer; r->w / r->b point at what the primitives read. 0 or -1. */
static int run_prepare(cv_run *r)
{
    const cv_plan *p = r->p;
    const kern_conv_desc *d = r->d;
    size_t boff = p->w_reorder ? (p->w_bytes + 63) / 64 * 64 : 0;
    int bcopy = d->has_bias && d->b_stride != 1 && d->o > 1;
    size_t bytes = boff + (size_t)d->o * sizeof(float);
    char *buf = boff || bcopy ? kern_onednn_thread_buf(KERN_BUF_WEIGHTS, bytes) : NULL;
    if ((boff || bcopy) && !buf) {
        run_fail(r, "out of memory for packed weights", dnnl_success);
        return -1;
    }
    if (bcopy) {
        float *b = (float *)(buf + boff);
        for (int64_t i = 0; i < d->o; i++)
            b[i] = r->b[i * d->b_stride];
        r->b = b;
    }
    if (!p->w_reorder)
        return 0;
    int ids[2] = {DNNL_ARG_FROM, DNNL_ARG_TO};
    dnnl_memory_desc_t mds[2] = {p->w_user_md, p->w_md};
    void *ptrs[2] = {(void *)r->w, buf};
    dnnl_status_t st = kern_onednn_execute(p->w_reorder, 2, ids, mds, ptrs, &p->wr_scratch_md,
                                           p->wr_scratch_bytes);
    r->w = (const float *)buf;
    if (st != dnnl_success)
        run_fail(r, "oneDNN weights reorder failed", st);
    return st == dnnl_success ? 0 : -1;
}

/* Runs a validated d with n, c, o > 0 and non-empty input on oneDNN:
 * 0 done, -1 error, 1 if the portable loop must run instead. */
static int conv_onednn(const kern_conv_desc *d, const float *x, const float *w,
                       const float *bias, float *y, char *err, size_t errlen)
{
    int nt = kern_get_num_threads(), saved = kern_onednn_serial_begin(), rc = 1;
    cv_key key;
    make_key(d, nt, &key);
    cv_plan *p = kern_primcache_get(&g_cache, &key);
    if (p && p->fast) {
        cv_run r = {.p = p, .d = d, .x = x, .w = w, .b = bias, .y = y};
        atomic_init(&r.failed, 0);
        if (run_prepare(&r) == 0)
            kern_parallel_for(p->nitems, ceil_div(p->nitems, nt), run_range, &r);
        rc = atomic_load(&r.failed) ? -1 : 0;
        if (rc && err && errlen)
            snprintf(err, errlen, "%s", r.err);
    }
    if (p)
        kern_primcache_release(&g_cache, p);
    kern_onednn_serial_end(saved);
    return rc;
}

/* ---------------------------------------------------------------- entries */

/* c == 0: every output is its bias (or 0). */
static void conv_fill(const kern_conv_desc *d, const float *bias, float *y)
{
    cv_geo g;
    geo_init(&g, d);
    for (int64_t n = 0; n < g.n; n++)
        for (int64_t o = 0; o < g.o; o++) {
            float v = d->has_bias ? bias[o * d->b_stride] : 0.0f;
            float *yb = y + n * g.ys[0] + o * g.ys[1];
            for (int64_t a = 0; a < g.out[0]; a++)
                for (int64_t b = 0; b < g.out[1]; b++)
                    for (int64_t e = 0; e < g.out[2]; e++)
                        yb[a * g.ys[2] + b * g.ys[3] + e * g.ys[4]] = v;
        }
}

int kern_conv(const kern_conv_desc *d, const float *x, const float *w, const float *bias, float *y,
              char *err, size_t errlen)
{
    if (check_desc(d, 2, err, errlen) != 0)
        return -1;
    if (d->n == 0 || d->o == 0)
        return 0;
    if (d->c == 0) {
        conv_fill(d, bias, y);
        return 0;
    }
    int empty = 0;
    for (int i = 0; i < d->nsp; i++)
        empty |= d->in[i] == 0;
    int rc = empty || KERN_CONV_FORCE_PORTABLE ? 1 : conv_onednn(d, x, w, bias, y, err, errlen);
    if (rc == 1)
        conv_portable(d, x, w, bias, y);
    return rc < 0 ? -1 : 0;
}

/* ------------------------------------------------------------- backward */

/* The portable backward loops. tap_src: the output position along dim i
 * whose window puts tap t on input position ip (op*st - pl + t*dil == ip),
 * or -1 if none. */
static int64_t tap_src(const cv_geo *g, int i, int64_t ip, int64_t t)
{
    int64_t v = ip + g->pl[i] - t * g->dil[i];
    if (v < 0 || v % g->st[i])
        return -1;
    v /= g->st[i];
    return v < g->out[i] ? v : -1;
}

/* data: a = dy, b = w, out = dx; weights: a = x, b = dy, out = dw. */
typedef struct cb_direct {
    cv_geo g;
    const float *a, *b;
    float *out;
} cb_direct;

/* dy . w over the output channels of input channel c's group at one
 * output position (dy) and tap (w). */
static float group_dot(const cb_direct *p, const float *dy, const float *w, int64_t c)
{
    const cv_geo *g = &p->g;
    float acc = 0.0f;
    for (int64_t oc = c / g->cg * g->og; oc < (c / g->cg + 1) * g->og; oc++)
        acc += dy[oc * g->ys[1]] * w[oc * g->ws[0]];
    return acc;
}

/* dx[n, c, ip]: every (tap, output position) pair that reads it. */
static float data_elem(const void *ctx, int64_t n, int64_t c, const int64_t *ip)
{
    const cb_direct *p = ctx;
    const cv_geo *g = &p->g;
    const float *wc = p->b + c % g->cg * g->ws[1];
    float acc = 0.0f;
    for (int64_t t0 = 0; t0 < g->k[0]; t0++) {
        int64_t o0 = tap_src(g, 0, ip[0], t0);
        for (int64_t t1 = 0; o0 >= 0 && t1 < g->k[1]; t1++) {
            int64_t o1 = tap_src(g, 1, ip[1], t1);
            for (int64_t t2 = 0; o1 >= 0 && t2 < g->k[2]; t2++) {
                int64_t o2 = tap_src(g, 2, ip[2], t2);
                if (o2 >= 0)
                    acc += group_dot(p, p->a + n * g->ys[0] + o0 * g->ys[2] + o1 * g->ys[3] + o2 * g->ys[4],
                                     wc + t0 * g->ws[2] + t1 * g->ws[3] + t2 * g->ws[4], c);
            }
        }
    }
    return acc;
}

/* kern_range_fn over (image, input channel) pairs. */
static void data_range(void *ctx, int64_t begin, int64_t end)
{
    const cb_direct *p = ctx;
    const cv_geo *g = &p->g;
    for (int64_t it = begin; it < end; it++) {
        int64_t n = it / g->c, c = it % g->c;
        fill_box(p->out + n * g->xs[0] + c * g->xs[1], g->in, g->xs + 2, data_elem, p, n, c);
    }
}

/* dw[oc, cc, t]: x under tap t times dy, over images and output positions. */
static float weights_elem(const void *ctx, int64_t oc, int64_t cc, const int64_t *t)
{
    const cb_direct *p = ctx;
    const cv_geo *g = &p->g;
    const float *xc = p->a + (oc / g->og * g->cg + cc) * g->xs[1], *dc = p->b + oc * g->ys[1];
    float acc = 0.0f;
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t o0 = 0; o0 < g->out[0]; o0++) {
            int64_t i0 = o0 * g->st[0] - g->pl[0] + t[0] * g->dil[0];
            for (int64_t o1 = 0; i0 >= 0 && i0 < g->in[0] && o1 < g->out[1]; o1++) {
                int64_t i1 = o1 * g->st[1] - g->pl[1] + t[1] * g->dil[1];
                for (int64_t o2 = 0; i1 >= 0 && i1 < g->in[1] && o2 < g->out[2]; o2++) {
                    int64_t i2 = o2 * g->st[2] - g->pl[2] + t[2] * g->dil[2];
                    if (i2 >= 0 && i2 < g->in[2])
                        acc += xc[n * g->xs[0] + i0 * g->xs[2] + i1 * g->xs[3] + i2 * g->xs[4]] *
                               dc[n * g->ys[0] + o0 * g->ys[2] + o1 * g->ys[3] + o2 * g->ys[4]];
                }
            }
        }
    return acc;
}

/* kern_range_fn over (output channel, input channel of its group) pairs. */
static void weights_range(void *ctx, int64_t begin, int64_t end)
{
    const cb_direct *p = ctx;
    const cv_geo *g = &p->g;
    for (int64_t it = begin; it < end; it++) {
        int64_t oc = it / g->cg, cc = it % g->cg;
        fill_box(p->out + oc * g->ws[0] + cc * g->ws[1], g->k, g->ws + 2, weights_elem, p, oc, cc);
    }
}

/* The portable backward (mode 1 data, 2 weights) of a validated d. */
static void backward_portable(const kern_conv_desc *d, int mode, const float *a, const float *b, float *out)
{
    cb_direct p = {.a = a, .b = b, .out = out};
    geo_init(&p.g, d);
    const cv_geo *g = &p.g;
    int64_t items = mode == 1 ? g->n * g->c : g->o * g->cg;
    int64_t per = g->og * g->k[0] * g->k[1] * g->k[2] * g->in[0] * g->in[1] * g->in[2];
    if (mode == 2)
        per = g->n * g->k[0] * g->k[1] * g->k[2] * g->out[0] * g->out[1] * g->out[2];
    int64_t grain = per >= (1 << 16) ? 1 : (1 << 16) / (per + 1);
    kern_parallel_for(items, grain, mode == 1 ? data_range : weights_range, &p);
}

/* A backward plan (mode 1: data, 2: weights). Items are batch ranges of q
 * images, one per pool thread (kind 1 for a shorter last range), or, for
 * data with activations going through copies, one image each (as the
 * forward's pieces, so the copies stay in cache). Kinds share the weights
 * layout w_md the first chose; w_reorder takes the user's weights into it
 * (data) or the weights gradient out of it into the user's layout
 * (weights: each item writes its own partial gradient, the partials are
 * summed). Kinds are cv_kinds over the whole first spatial dim. */
typedef struct cb_key {
    cv_key base;
    int32_t mode, unused;
} cb_key;

typedef struct cb_plan {
    kern_primcache_entry ce;
    cb_key key;
    int fast, x_copy, y_copy, nkinds;
    int64_t q, nitems;
    dnnl_memory_desc_t w_user_md, w_md, wr_scratch_md;
    size_t w_bytes, wr_scratch_bytes;
    dnnl_primitive_t w_reorder;
    cv_kind kinds[2];
} cb_plan;

/* Creates kind k's backward primitive (its forward, oneDNN's hint, made
 * and dropped); wmd: the weights layout (`any` for the first kind). */
static int bkind_create(const kern_conv_desc *d, int mode, cv_kind *k, const dnnl_memory_desc_t *wmd)
{
    dnnl_dims_t sdims, ddims, st, dil, pl, ph;
    kind_view(d, k, 0, sdims);
    kind_view(d, k, 1, ddims);
    for (int i = 0; i < d->nsp; i++)
        st[i] = d->stride[i], dil[i] = d->dil[i] - 1, pl[i] = d->pad_lo[i], ph[i] = d->pad_hi[i];
    dnnl_convolution_desc_t fd, bd;
    dnnl_primitive_desc_t hint = NULL, pd = NULL;
    dnnl_format_tag_t tag = k_nxc_tags[d->nsp - 1];
    dnnl_alg_kind_t alg = dnnl_convolution_direct;
    int ok = dnnl_memory_desc_init_by_tag(&k->src_md, d->nsp + 2, sdims, dnnl_f32, tag) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&k->dst_md, d->nsp + 2, ddims, dnnl_f32, tag) == dnnl_success &&
             dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, alg, &k->src_md, wmd, NULL,
                                                        &k->dst_md, st, dil, pl, ph) == dnnl_success &&
             (hint = kern_onednn_pd_create(&fd)) != NULL;
    if (ok && mode == 1)
        ok = dnnl_dilated_convolution_backward_data_desc_init(&bd, alg, &k->src_md, wmd, &k->dst_md, st, dil, pl,
                                                              ph) == dnnl_success;
    else if (ok)
        ok = dnnl_dilated_convolution_backward_weights_desc_init(&bd, alg, &k->src_md, wmd, NULL, &k->dst_md, st,
                                                                 dil, pl, ph) == dnnl_success;
    if (ok && (pd = kern_onednn_pd_create_hinted(&bd, hint)))
        k->prim = kern_onednn_prim_create(pd, &k->scratch_md, &k->scratch_bytes);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (hint)
        dnnl_primitive_desc_destroy(hint);
    return k->prim ? 0 : -1;
}

/* Items and kinds of p for q images per item. */
static void bplan_split(cb_plan *p, int64_t q)
{
    const kern_conv_desc *d = &p->key.base.d;
    p->q = q;
    p->nkinds = 1 + (d->n % q != 0);
    p->nitems = ceil_div(d->n, q);
    for (int i = 0; i < p->nkinds; i++) {
        cv_kind *k = &p->kinds[i];
        memset(k, 0, sizeof *k);
        k->n = i == 0 ? q : d->n % q;
        k->ih = d->in[0], k->oh = d->out[0], k->pad_lo = d->pad_lo[0], k->pad_hi = d->pad_hi[0];
    }
    p->x_copy = p->y_copy = 0;
    for (int i = 0; i < p->nkinds; i++) {
        int64_t dims[5];
        kind_view(d, &p->kinds[i], 0, dims);
        p->x_copy |= !dense_nxc(d->nsp, dims, d->x_strides);
        kind_view(d, &p->kinds[i], 1, dims);
        p->y_copy |= !dense_nxc(d->nsp, dims, d->y_strides);
    }
}

static void bplan_drop_prims(cb_plan *p)
{
    for (int i = 0; i < 2; i++) {
        if (p->kinds[i].prim)
            dnnl_primitive_destroy(p->kinds[i].prim);
        p->kinds[i].prim = NULL;
    }
    if (p->w_reorder)
        dnnl_primitive_destroy(p->w_reorder);
    p->w_reorder = NULL;
}

/* The primitives of a new backward plan; p->fast stays 0 where oneDNN has
 * no fast kernel. */
static void bplan_create(cb_plan *p)
{
    const kern_conv_desc *d = &p->key.base.d;
    int mode = p->key.mode;
    const_dnnl_primitive_desc_t pd;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_memory_desc_t wany;
    if (!kern_onednn_engine())
        return;
    bplan_split(p, ceil_div(d->n, p->key.base.nthreads));
    if (mode == 1 && (p->x_copy || p->y_copy) && p->q > 1)
        bplan_split(p, 1);
    int ok = weights_md(d, 1, &wany) == dnnl_success && bkind_create(d, mode, &p->kinds[0], &wany) == 0 &&
             dnnl_primitive_get_primitive_desc(p->kinds[0].prim, &pd) == dnnl_success;
    if (ok) {
        p->w_md = *dnnl_primitive_desc_query_md(pd, mode == 1 ? dnnl_query_weights_md : dnnl_query_diff_weights_md,
                                                0);
        p->w_bytes = dnnl_memory_desc_get_size(&p->w_md);
        ok = weights_md(d, 0, &p->w_user_md) == dnnl_success &&
             (p->nkinds == 1 || bkind_create(d, mode, &p->kinds[1], &p->w_md) == 0);
    }
    if (ok && !dnnl_memory_desc_equal(&p->w_user_md, &p->w_md)) {
        rpd = mode == 1 ? kern_onednn_reorder_pd_create(&p->w_user_md, &p->w_md)
                        : kern_onednn_reorder_pd_create(&p->w_md, &p->w_user_md);
        ok = rpd && (p->w_reorder = kern_onednn_prim_create(rpd, &p->wr_scratch_md, &p->wr_scratch_bytes));
    }
    if (rpd)
        dnnl_primitive_desc_destroy(rpd);
    if (!ok)
        bplan_drop_prims(p);
    p->fast = ok;
}

static void *bplan_new(const void *key)
{
    cb_plan *p = calloc(1, sizeof *p);
    if (p) {
        p->key = *(const cb_key *)key;
        bplan_create(p);
    }
    return p;
}

static void bplan_free(void *plan)
{
    bplan_drop_prims(plan);
    free(plan);
}

static kern_primcache_entry *g_bslots[CV_SETS * CV_WAYS];
static kern_primcache g_bcache =
    KERN_PRIMCACHE_INIT(g_bslots, CV_SETS, CV_WAYS, cb_plan, key, bplan_new, bplan_free);

/* One backward call: the forward's operands (x, w, y: dx, w, dy for data;
 * x, dw, dy for weights), the weights the primitives read (data) or the
 * partial gradients, part floats apart (weights). */
typedef struct cb_run {
    cv_run r;
    const cb_plan *bp;
    const float *dy;
    float *dx, *parts;
    size_t part;
} cb_run;

/* Runs item it of a backward plan on this thread. */
static void bitem(cb_run *b, int64_t it)
{
    const cb_plan *p = b->bp;
    const kern_conv_desc *d = b->r.d;
    const cv_kind *k = &p->kinds[it * p->q + p->q > d->n];
    int64_t n0 = it * p->q;
    int mode = p->key.mode;
    float *x = (mode == 1 ? b->dx : (float *)b->r.x) + n0 * d->x_strides[0], *xo = x;
    float *y = (float *)b->dy + n0 * d->y_strides[0], *yo = y;
    size_t xbytes = dnnl_memory_desc_get_size(&k->src_md);
    if ((p->y_copy && !(yo = copy_nxc(d, k, 1, y, d->y_strides, 0))) ||
        (p->x_copy && mode == 2 && !(xo = copy_nxc(d, k, 0, x, d->x_strides, 0))) ||
        (p->x_copy && mode == 1 && !(xo = kern_onednn_thread_buf(KERN_BUF_SRC, xbytes)))) {
        run_fail(&b->r, "out of memory for a layout copy", dnnl_success);
        return;
    }
    int ids[3] = {DNNL_ARG_DIFF_DST, mode == 1 ? DNNL_ARG_WEIGHTS : DNNL_ARG_DIFF_WEIGHTS,
                  mode == 1 ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC};
    dnnl_memory_desc_t mds[3] = {k->dst_md, p->w_md, k->src_md};
    void *ptrs[3] = {yo, mode == 1 ? (void *)b->r.w : b->parts + (size_t)it * b->part, xo};
    dnnl_status_t st = kern_onednn_execute(k->prim, 3, ids, mds, ptrs, &k->scratch_md, k->scratch_bytes);
    if (st != dnnl_success)
        run_fail(&b->r, "oneDNN backward failed", st);
    else if (p->x_copy && mode == 1)
        copy_nxc(d, k, 0, x, d->x_strides, 1);
}

static void brange(void *ctx, int64_t begin, int64_t end)
{
    int saved = kern_onednn_serial_begin();
    for (int64_t it = begin; it < end && !atomic_load(&((cb_run *)ctx)->r.failed); it++)
        bitem(ctx, it);
    kern_onednn_serial_end(saved);
}

/* Runs reorder prim (from -> to, descriptors as named) on this thread. */
static void run_reorder(cb_run *b, const cb_plan *p, const dnnl_memory_desc_t *from_md, const void *from,
                        const dnnl_memory_desc_t *to_md, void *to)
{
    int ids[2] = {DNNL_ARG_FROM, DNNL_ARG_TO};
    dnnl_memory_desc_t mds[2] = {*from_md, *to_md};
    void *ptrs[2] = {(void *)from, to};
    dnnl_status_t st = kern_onednn_execute(p->w_reorder, 2, ids, mds, ptrs, &p->wr_scratch_md,
                                           p->wr_scratch_bytes);
    if (st != dnnl_success)
        run_fail(&b->r, "oneDNN weights reorder failed", st);
}

/* Before the items, on the calling thread: for data, the user's weights
 * into the primitives' layout; for weights, room for the partial
 * gradients (the first of them dw itself when one item writes it in its
 * own layout). */
static void bcall_prepare(cb_run *b, float *dw)
{
    const cb_plan *p = b->bp;
    if (p->key.mode == 1 && p->w_reorder) {
        void *buf = kern_onednn_thread_buf(KERN_BUF_WEIGHTS, p->w_bytes);
        if (!buf) {
            run_fail(&b->r, "out of memory for packed weights", dnnl_success);
            return;
        }
        run_reorder(b, p, &p->w_user_md, b->r.w, &p->w_md, buf);
        b->r.w = buf;
    } else if (p->key.mode == 2) {
        b->part = (p->w_bytes / sizeof(float) + 15) / 16 * 16;
        int direct = !p->w_reorder && p->nitems == 1;
        b->parts = direct ? dw : kern_onednn_thread_buf(KERN_BUF_WEIGHTS, b->part * (size_t)p->nitems * 4);
        if (!b->parts)
            run_fail(&b->r, "out of memory for the weights gradient", dnnl_success);
    }
}

/* After the items of a weights gradient: the partials summed into the
 * first, which goes into dw in the user's layout. */
static void bcall_finish(cb_run *b, float *dw)
{
    const cb_plan *p = b->bp;
    size_t nf = p->w_bytes / sizeof(float);
    if (p->key.mode != 2 || b->parts == dw)
        return;
    for (int64_t it = 1; it < p->nitems; it++)
        for (size_t i = 0; i < nf; i++)
            b->parts[i] += b->parts[(size_t)it * b->part + i];
    if (p->w_reorder)
        run_reorder(b, p, &p->w_md, b->parts, &p->w_user_md, dw);
    else
        memcpy(dw, b->parts, p->w_bytes);
}

/* A validated d with non-empty operands on oneDNN: 0 done, -1 error, 1 if
 * the portable loop must run instead. */
static int backward_onednn(const kern_conv_desc *d, int mode, const float *x, const float *w, const float *dy,
                           float *out, char *err, size_t errlen)
{
    int nt = kern_get_num_threads(), saved = kern_onednn_serial_begin(), rc = 1;
    cb_key key;
    memset(&key, 0, sizeof key);
    make_key(d, nt, &key.base);
    key.mode = mode;
    cb_plan *p = kern_primcache_get(&g_bcache, &key);
    if (p && p->fast) {
        cb_run b = {.r = {.d = d, .x = x, .w = w}, .bp = p, .dy = dy, .dx = mode == 1 ? out : NULL};
        atomic_init(&b.r.failed, 0);
        bcall_prepare(&b, out);
        if (!atomic_load(&b.r.failed))
            kern_parallel_for(p->nitems, ceil_div(p->nitems, nt), brange, &b);
        if (!atomic_load(&b.r.failed))
            bcall_finish(&b, out);
        rc = atomic_load(&b.r.failed) ? -1 : 0;
        if (rc && err && errlen)
            snprintf(err, errlen, "%s", b.r.err);
    }
    if (p)
        kern_primcache_release(&g_bcache, p);
    kern_onednn_serial_end(saved);
    return rc;
}

/* Checks d for a backward call writing operand out; 1 when oneDNN may run
 * (no empty dim), 0 when only the portable loop can, -1 on error. */
static int backward_check(const kern_conv_desc *d, int out, char *err, size_t errlen)
{
    if (d->has_bias)
        return fail(err, errlen, "the backward takes no bias", d);
    if (check_desc(d, out, err, errlen) != 0)
        return -1;
    int empty = d->n == 0 || d->c == 0 || d->o == 0;
    for (int i = 0; i < d->nsp; i++)
        empty |= d->in[i] == 0;
    return !empty && !KERN_CONV_FORCE_PORTABLE;
}

int kern_conv_backward_data(const kern_conv_desc *d, const float *dy, const float *w, float *dx,
                            char *err, size_t errlen)
{
    int rc = backward_check(d, 0, err, errlen);
    if (rc < 0)
        return -1;
    rc = rc ? backward_onednn(d, 1, NULL, w, dy, dx, err, errlen) : 1;
    if (rc == 1)
        backward_portable(d, 1, dy, w, dx);
    return rc < 0 ? -1 : 0;
}

int kern_conv_backward_weights(const kern_conv_desc *d, const float *x, const float *dy, float *dw,
                               char *err, size_t errlen)
{
    int rc = backward_check(d, 1, err, errlen);
    if (rc < 0)
        return -1;
    rc = rc ? backward_onednn(d, 2, x, NULL, dy, dw, err, errlen) : 1;
    if (rc == 1)
        backward_portable(d, 2, x, dy, dw);
    return rc < 0 ? -1 : 0;
}

void kern_conv_cache_clear(void)
{
    kern_primcache_clear(&g_cache);
    kern_primcache_clear(&g_bcache);
}
