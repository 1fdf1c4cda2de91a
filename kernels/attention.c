/* attention.c — flash-style scaled dot-product attention (see attention.h).
 *
 * Work items are (batch entry, block of BQ query rows). A thread packs the
 * keys of a batch entry once, transposed (E x S), and reuses them for the
 * entry's query blocks it runs; values are read in place (packed S x Ev
 * only when their columns are not contiguous). For each item the query
 * block is copied (pre-scaled) into scratch; then for each tile of up to
 * BK keys, scores S = Q K^T are computed for the tile, masked, and the
 * online softmax folds them in: P = exp(S - m), row sum l += sum(P), acc
 * += P V, against a reference m per row that moves up only when a tile's
 * scores pass it by more than SLACK (then l and acc are scaled by exp(m -
 * m'), m' the row's max so far), so most tiles need no correction, and P
 * stays below exp(SLACK). The output row is acc / l. Causal items stop at
 * the diagonal.
 *
 * A tile is as wide as its keys rounded up to whole vectors of VW floats
 * (S = 65: tiles of 64 and 16 keys, not two of 64), and P V sums over
 * its keys alone. Every product (the forward's Q K^T and P V, the
 * backward's five) goes through one small matrix kernel, sized by the
 * product's width: a head dim of 16 runs 8 rows of one vector at a time,
 * not 64 columns mostly masked off. The kernel and the softmax steps have
 * an AVX-512 version (intrinsics, an inline exp) and a portable scalar
 * one, chosen once per process from the CPU.
 */
#include "attention.h"
#include "half.h"
#include "threadpool.h"

#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BQ = KERN_SDPA_TILE_Q, BK = KERN_SDPA_TILE_K, VW = 16 };

#define SLACK 8.0f   /* how far scores may pass the reference max m before it moves */

static int64_t round_vw(int64_t n) { return (n + VW - 1) / VW * VW; }

/* Per-thread scratch of one range of work items. The keys of one batch
 * entry are packed once (kt: E x SP, transposed, SP = S rounded up to VW,
 * zero padded) and reused by all its query blocks; its values are read at
 * vp, rows ldv apart (v itself, or vb when packed). */
typedef struct sdpa_scratch {
    float *qb;     /* BQ x E, scaled */
    float *kt;     /* E x SP */
    float *vb;     /* S x Ev, when v's columns are strided */
    float *s;      /* BQ x BK: scores, then probabilities */
    float *acc;    /* BQ x Ev */
    const float *vp;
    int64_t ldv;
    int64_t packed;   /* batch entry whose keys (and values) are packed, or -1 */
    float m[BQ], corr[BQ];
    float l[BQ][VW];    /* row r's sum l: the sum of l[r] (VW lanes, so no step reduces a vector) */
    float qscale[BQ];   /* d->scale in every row */
} sdpa_scratch;

/* c[m][n] (+)= sum_k A(m, k) b[k][n] for m < M, n < N, k < K, A(m, k) at
 * a[m * sam + k * sak], rows of b and c ldb and ldc apart; acc: add to c,
 * else overwrite it. Reads no column of b past N. */
typedef void (*sdpa_mm_fn)(int M, int N, int K, const float *a, int64_t sam, int64_t sak, const float *b,
                           int64_t ldb, float *c, int64_t ldc, int acc);

/* The steps, each on rows of a BQ x BK tile (rows BK apart), columns up
 * to width (a multiple of VW).
 *   softmax  folds scores (masked entries -inf) into the reference m
 *            and sum l (move_max); s becomes exp(s - m), corr the factor
 *            for the old acc (1 where m stayed). A row with no unmasked
 *            key so far keeps m = -inf, P = 0 and corr = 1 (and l = 0 at
 *            the end: a zero row).
 *   probs    s = exp(s - m[row]) linv[row]
 *   dscore   dp = p (dp - D[row])
 * and scale_rows: rows r < rows of dst (ldd apart) = those of src (lds
 * apart) times f[r], cols columns. */
typedef struct sdpa_isa {
    sdpa_mm_fn mm;
    void (*softmax)(sdpa_scratch *w, int nq, int width);
    void (*scale_rows)(float *dst, int64_t ldd, const float *src, int64_t lds, int rows, int64_t cols, const float *f);
    void (*probs)(float *s, const float *m, const float *linv, int nq, int width);
    void (*dscore)(float *dp, const float *p, const float *D, int nq, int width);
} sdpa_isa;

/* ---------------------------------------------------------------- scalar */

/* Element i of an operand of dtype dt, as float32 (exact). */
static inline float elem(const void *p, int64_t i, kern_sdpa_dtype dt)
{
    if (dt == KERN_SDPA_BF16)
        return kern_bf16_to_f32(((const uint16_t *)p)[i]);
    if (dt == KERN_SDPA_F16)
        return kern_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

static size_t elem_size(kern_sdpa_dtype dt) { return dt == KERN_SDPA_F32 ? 4 : 2; }

static void mm_scalar(int M, int N, int K, const float *a, int64_t sam, int64_t sak, const float *b, int64_t ldb,
                      float *c, int64_t ldc, int acc)
{
    for (int m = 0; m < M; m++) {
        float *cr = c + m * ldc;
        if (!acc)
            memset(cr, 0, sizeof(float) * (size_t)N);
        for (int k = 0; k < K; k++) {
            float x = a[m * sam + k * sak];
            const float *br = b + k * ldb;
            for (int n = 0; n < N; n++)
                cr[n] += x * br[n];
        }
    }
}

/* Row r against a tile whose largest score is mx, where the tile passes
 * the reference m by more than SLACK or m is -inf: m moves to the row's
 * max so far, l and corr get exp(m - m') (1 from m = -inf: l and acc are
 * still 0). 0 when the row still has no key (m stays -inf, corr 1). */
static int move_max(sdpa_scratch *w, int r, float mx)
{
    float m = w->m[r], mn = m > mx ? m : mx;
    if (mn == -INFINITY)
        return 0;
    w->corr[r] = m == -INFINITY ? 1 : expf(m - mn);
    for (int c = 0; c < VW; c++)
        w->l[r][c] *= w->corr[r];
    w->m[r] = mn;
    return 1;
}

static float row_sum(const sdpa_scratch *w, int r)
{
    float sum = 0;
    for (int c = 0; c < VW; c++)
        sum += w->l[r][c];
    return sum;
}

static void softmax_scalar(sdpa_scratch *w, int nq, int width)
{
    for (int r = 0; r < nq; r++) {
        float *s = w->s + r * BK, mx = -INFINITY, sum = 0;
        for (int c = 0; c < width; c++)
            mx = s[c] > mx ? s[c] : mx;
        w->corr[r] = 1;
        if ((w->m[r] == -INFINITY || mx > w->m[r] + SLACK) && !move_max(w, r, mx)) {
            memset(s, 0, sizeof(float) * (size_t)width);
            continue;
        }
        for (int c = 0; c < width; c++)
            sum += (s[c] = expf(s[c] - w->m[r]));
        w->l[r][0] += sum;
    }
}

static void scale_rows_scalar(float *dst, int64_t ldd, const float *src, int64_t lds, int rows, int64_t cols,
                              const float *f)
{
    for (int r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[r * ldd + c] = src[r * lds + c] * f[r];
}

static void probs_scalar(float *s, const float *m, const float *linv, int nq, int width)
{
    for (int r = 0; r < nq; r++)
        for (int c = 0; c < width; c++)
            s[r * BK + c] = expf(s[r * BK + c] - m[r]) * linv[r];
}

static void dscore_scalar(float *dp, const float *p, const float *D, int nq, int width)
{
    for (int r = 0; r < nq; r++)
        for (int c = 0; c < width; c++)
            dp[r * BK + c] = p[r * BK + c] * (dp[r * BK + c] - D[r]);
}

/* --------------------------------------------------------------- AVX-512 */

#pragma GCC push_options
#pragma GCC target("avx512f")

/* exp(x) as 2^n 2^f, n = round(x log2 e), f = x log2 e - n in [-1/2,
 * 1/2] (log2 e in two parts; a near-minimax polynomial of degree 6, 0.7
 * ulp): within 2 ulp of exp for x from -87 to 10 (the softmax's range
 * ends at SLACK); 0 for x below -104 and -inf, NaN for NaN. Inline, where
 * a call to a vector math library costs as much as the polynomial. */
static inline __m512 exp_512(__m512 x)
{
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);   /* NaN passes: max returns its second operand */
    __m512 l2e = _mm512_set1_ps(1.44269502162933349609375f);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, l2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_fmadd_ps(x, _mm512_set1_ps(1.925963033500011e-8f), _mm512_fmsub_ps(x, l2e, n));
    __m512 p = _mm512_set1_ps(1.5353361959569156e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3398875016719103e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.61843691766262e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5503323674201965e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022647738456726e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931471824645996e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* One product's operands (sdpa_mm_fn's), for its register tiles. */
typedef struct mm_args {
    const float *a, *b;
    float *c;
    int64_t sam, sak, ldb, ldc;
    int K, acc;
} mm_args;

/* Rows m0 .. m0+R-1 by NV vectors of columns from n0, the last vector
 * masked by last: R x NV accumulators; per k one load of b per vector and
 * one broadcast of A per row. Inlined with constant R and NV (the
 * mm_tile_R_NV below), so its loops unroll and the accumulators stay in
 * registers. */
static inline __attribute__((always_inline)) void mm_tile(const mm_args *p, int R, int NV, int m0, int n0,
                                                          __mmask16 last)
{
    const float *ar[8];
    float *cr[8];
    __m512 acc[8][4];
    int64_t sak = p->sak, ldb = p->ldb;
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        ar[i] = p->a + (m0 + i) * p->sam;
        cr[i] = p->c + (m0 + i) * p->ldc + n0;
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            acc[i][j] = !p->acc       ? _mm512_setzero_ps()
                        : j < NV - 1 ? _mm512_loadu_ps(cr[i] + VW * j)
                                     : _mm512_maskz_loadu_ps(last, cr[i] + VW * j);
    }
    const float *b = p->b + n0;
    for (int64_t k = 0, ka = 0; k < p->K; k++, ka += sak, b += ldb) {
        __m512 x[4];
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            x[j] = j < NV - 1 ? _mm512_loadu_ps(b + VW * j) : _mm512_maskz_loadu_ps(last, b + VW * j);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            __m512 y = _mm512_set1_ps(ar[i][ka]);
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                acc[i][j] = _mm512_fmadd_ps(y, x[j], acc[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) {
            if (j < NV - 1)
                _mm512_storeu_ps(cr[i] + VW * j, acc[i][j]);
            else
                _mm512_mask_storeu_ps(cr[i] + VW * j, last, acc[i][j]);
        }
}

typedef void (*mm_tile_fn)(const mm_args *p, int m0, int n0, __mmask16 last);

#define MM_TILE(R, NV) \
    static void mm_tile_##R##_##NV(const mm_args *p, int m0, int n0, __mmask16 last) \
    { \
        mm_tile(p, R, NV, m0, n0, last); \
    }
MM_TILE(1, 1) MM_TILE(1, 2) MM_TILE(1, 3) MM_TILE(1, 4)
MM_TILE(2, 1) MM_TILE(2, 2) MM_TILE(2, 3) MM_TILE(2, 4)
MM_TILE(4, 1) MM_TILE(4, 2) MM_TILE(4, 3) MM_TILE(4, 4)
MM_TILE(8, 1) MM_TILE(8, 2)
#undef MM_TILE

/* By log2 of the rows and by vectors: up to 16 accumulators (8 rows of
 * one or two vectors, 4 of three or four), enough chains to hide the FMA
 * latency, each load of b serving as many rows. */
static const mm_tile_fn mm_tiles[4][4] = {
    { mm_tile_1_1, mm_tile_1_2, mm_tile_1_3, mm_tile_1_4 },
    { mm_tile_2_1, mm_tile_2_2, mm_tile_2_3, mm_tile_2_4 },
    { mm_tile_4_1, mm_tile_4_2, mm_tile_4_3, mm_tile_4_4 },
    { mm_tile_8_1, mm_tile_8_2, NULL, NULL },
};

/* Columns in chunks of up to 4 vectors (a masked last one); rows in the
 * largest tiles that fit, then halving ones for the rest. */
static void mm_512(int M, int N, int K, const float *a, int64_t sam, int64_t sak, const float *b, int64_t ldb,
                   float *c, int64_t ldc, int acc)
{
    mm_args p = { .a = a, .b = b, .c = c, .sam = sam, .sak = sak, .ldb = ldb, .ldc = ldc, .K = K, .acc = acc };
    for (int n0 = 0; n0 < N; n0 += 4 * VW) {
        int nv = N - n0 >= 4 * VW ? 4 : (N - n0 + VW - 1) / VW, tail = N - n0 - VW * (nv - 1);
        __mmask16 last = tail >= VW ? (__mmask16)0xffff : (__mmask16)((1u << tail) - 1);
        for (int m0 = 0, lg = nv <= 2 ? 3 : 2; m0 < M; m0 += 1 << lg) {
            while (M - m0 < 1 << lg)
                lg--;
            mm_tiles[lg][nv - 1](&p, m0, n0, last);
        }
    }
}

/* The scalar steps' rule, the tile's max found only when some score
 * passes m + SLACK (a compare per vector, no reduction). */
static void softmax_512(sdpa_scratch *w, int nq, int width)
{
    for (int r = 0; r < nq; r++) {
        float *s = w->s + r * BK;
        __m512 th = _mm512_set1_ps(w->m[r] + SLACK);
        __mmask16 over = 0;
        for (int c = 0; c < width; c += VW)
            over |= _mm512_cmp_ps_mask(_mm512_loadu_ps(s + c), th, _CMP_GT_OQ);
        w->corr[r] = 1;
        if (over || w->m[r] == -INFINITY) {
            __m512 v = _mm512_loadu_ps(s);
            for (int c = VW; c < width; c += VW)
                v = _mm512_max_ps(v, _mm512_loadu_ps(s + c));
            if (!move_max(w, r, _mm512_reduce_max_ps(v))) {
                memset(s, 0, sizeof(float) * (size_t)width);
                continue;
            }
        }
        __m512 sum = _mm512_setzero_ps(), m = _mm512_set1_ps(w->m[r]);
        for (int c = 0; c < width; c += VW) {
            __m512 e = exp_512(_mm512_sub_ps(_mm512_loadu_ps(s + c), m));
            _mm512_storeu_ps(s + c, e);
            sum = _mm512_add_ps(sum, e);
        }
        _mm512_storeu_ps(w->l[r], _mm512_add_ps(_mm512_loadu_ps(w->l[r]), sum));
    }
}

static void scale_rows_512(float *dst, int64_t ldd, const float *src, int64_t lds, int rows, int64_t cols,
                           const float *f)
{
    for (int r = 0; r < rows; r++) {
        __m512 x = _mm512_set1_ps(f[r]);
        for (int64_t c = 0; c < cols; c += VW) {
            __mmask16 k = cols - c >= VW ? (__mmask16)0xffff : (__mmask16)((1u << (cols - c)) - 1);
            _mm512_mask_storeu_ps(dst + r * ldd + c, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, src + r * lds + c), x));
        }
    }
}

static void probs_512(float *s, const float *m, const float *linv, int nq, int width)
{
    for (int r = 0; r < nq; r++) {
        __m512 mx = _mm512_set1_ps(m[r]), li = _mm512_set1_ps(linv[r]);
        for (int c = 0; c < width; c += VW) {
            __m512 e = exp_512(_mm512_sub_ps(_mm512_loadu_ps(s + r * BK + c), mx));
            _mm512_storeu_ps(s + r * BK + c, _mm512_mul_ps(e, li));
        }
    }
}

static void dscore_512(float *dp, const float *p, const float *D, int nq, int width)
{
    for (int r = 0; r < nq; r++) {
        __m512 dd = _mm512_set1_ps(D[r]);
        for (int c = 0; c < width; c += VW) {
            float *x = dp + r * BK + c;
            _mm512_storeu_ps(x, _mm512_mul_ps(_mm512_loadu_ps(p + r * BK + c), _mm512_sub_ps(_mm512_loadu_ps(x), dd)));
        }
    }
}

#pragma GCC pop_options

static const sdpa_isa isa_scalar = { mm_scalar, softmax_scalar, scale_rows_scalar, probs_scalar, dscore_scalar };
static const sdpa_isa isa_512 = { mm_512, softmax_512, scale_rows_512, probs_512, dscore_512 };

/* KERN_SDPA_FORCE_PORTABLE=1 (tests/c/test_attention.c) picks the scalar
 * steps on any CPU. */
#ifndef KERN_SDPA_FORCE_PORTABLE
#define KERN_SDPA_FORCE_PORTABLE 0
#endif
static const sdpa_isa *pick_isa(void)
{
    return !KERN_SDPA_FORCE_PORTABLE && __builtin_cpu_supports("avx512f") ? &isa_512 : &isa_scalar;
}

/* ------------------------------------------------------------- one item */

typedef struct sdpa_job {
    const kern_sdpa_desc *d;
    const kern_sdpa_extra *x;
    const void *q, *k, *v;   /* of d->dtype */
    const void *mask;
    void *out;
    int64_t nqb;           /* query blocks per batch entry */
    const sdpa_isa *isa;
    int failed;
} sdpa_job;

/* Element offset of batch entry b in operand o. */
static int64_t batch_offset(const kern_sdpa_desc *d, const kern_sdpa_operand *o, int64_t b)
{
    int64_t off = 0;
    for (int i = d->nb - 1; i >= 0; i--) {
        off += (b % d->bdims[i]) * o->bstride[i];
        b /= d->bdims[i];
    }
    return off;
}

static const void *mask_of(const kern_sdpa_desc *d, const void *mask, int64_t b)
{
    if (d->mask_kind == KERN_SDPA_NO_MASK)
        return NULL;
    return (const char *)mask + batch_offset(d, &d->mask, b) *
                                    (int64_t)(d->mask_kind == KERN_SDPA_BOOL_MASK ? 1 : elem_size(d->dtype));
}

/* Rows [0, n) of x (operand o's strides, cols columns, dtype dt)
 * transposed into t (cols rows of ld >= n) as float32, zeros past row n.
 * VW rows at a time, so that what is read and written stays in L1 for
 * wide rows. */
static void pack_t(const void *x, kern_sdpa_dtype dt, const kern_sdpa_operand *o, int64_t n, int64_t cols,
                   float *t, int64_t ld)
{
    const float *xf = x;
    for (int64_t j0 = 0; j0 < n; j0 += VW)
        for (int64_t e = 0; e < cols; e++)
            if (dt == KERN_SDPA_F32)
                for (int64_t j = j0; j < j0 + VW && j < n; j++)
                    t[e * ld + j] = xf[j * o->row + e * o->col];
            else
                for (int64_t j = j0; j < j0 + VW && j < n; j++)
                    t[e * ld + j] = elem(x, j * o->row + e * o->col, dt);
    for (int64_t e = 0; e < cols; e++)
        memset(t + e * ld + n, 0, sizeof(float) * (size_t)(ld - n));
}

/* The keys of one batch entry packed; its values read in place when they
 * are float32 with contiguous columns, else packed (as float32). */
static void pack_kv(const kern_sdpa_desc *d, const void *k, const void *v, sdpa_scratch *w)
{
    pack_t(k, d->dtype, &d->k, d->S, d->E, w->kt, round_vw(d->S));
    w->vp = v, w->ldv = d->v.row;
    if (d->v.col == 1 && d->dtype == KERN_SDPA_F32)
        return;
    for (int64_t j = 0; j < d->S; j++)
        for (int64_t e = 0; e < d->Ev; e++)
            w->vb[j * d->Ev + e] = elem(v, j * d->v.row + e * d->v.col, d->dtype);
    w->vp = w->vb, w->ldv = d->Ev;
}

/* -inf for keys from nk to width, above the diagonal (causal) or masked
 * out; additive masks added. */
static void apply_mask(const kern_sdpa_desc *d, const void *mask, int64_t i0, int nq, int64_t j0, int nk,
                       int width, float *s)
{
    for (int r = 0; r < nq; r++) {
        float *row = s + r * BK;
        int64_t i = i0 + r;
        int lim = nk;
        if (d->causal && i - j0 + 1 < lim)
            lim = i - j0 + 1 < 0 ? 0 : (int)(i - j0 + 1);
        for (int c = lim; c < width; c++)
            row[c] = -INFINITY;
        int64_t mc = d->mask.col;
        if (d->mask_kind == KERN_SDPA_BOOL_MASK) {
            const uint8_t *m = (const uint8_t *)mask + i * d->mask.row + j0 * mc;
            if (mc == 1)   /* branch-free and unit stride: vectorised */
                for (int c = 0; c < lim; c++)
                    row[c] = m[c] ? row[c] : -INFINITY;
            else
                for (int c = 0; c < lim; c++)
                    row[c] = m[c * mc] ? row[c] : -INFINITY;
        } else if (d->mask_kind == KERN_SDPA_ADD_MASK && d->dtype != KERN_SDPA_F32) {
            for (int c = 0; c < lim; c++)
                row[c] += elem(mask, i * d->mask.row + (j0 + c) * mc, d->dtype);
        } else if (d->mask_kind == KERN_SDPA_ADD_MASK) {
            const float *m = (const float *)mask + i * d->mask.row + j0 * mc;
            if (mc == 1)
                for (int c = 0; c < lim; c++)
                    row[c] += m[c];
            else
                for (int c = 0; c < lim; c++)
                    row[c] += m[c * mc];
        }
    }
}

/* Whether the mask removes every key j0 .. j0+nk of query rows i0 ..
 * i0+nq (bool false / additive -inf): the block adds nothing and is
 * skipped (explicit causal masks skip half the blocks). */
static int block_masked(const kern_sdpa_desc *d, const void *mask, int64_t i0, int nq, int64_t j0, int nk)
{
    for (int r = 0; r < nq; r++) {
        int64_t base = (i0 + r) * d->mask.row + j0 * d->mask.col;
        for (int c = 0; c < nk; c++) {
            int64_t at = base + c * d->mask.col;
            if (d->mask_kind == KERN_SDPA_BOOL_MASK ? ((const uint8_t *)mask)[at] != 0
                                                    : elem(mask, at, d->dtype) != -INFINITY)
                return 0;
        }
    }
    return 1;
}

/* Whether the tile of rows i0.. and keys j0.. of entry b adds nothing:
 * the mask removes all of it, or the hook says so. */
static int tile_skipped(const kern_sdpa_desc *d, const kern_sdpa_hook *h, const void *mask, int64_t b, int64_t i0,
                        int nq, int64_t j0, int nk)
{
    if (mask && block_masked(d, mask, i0, nq, j0, nk))
        return 1;
    return h && h->keep && !h->keep(h->ctx, b, i0, nq, j0, nk);
}

/* The hook's modification of a tile's scores, then -inf from nk to width
 * (and the mask's and causal's). */
static void tile_scores(const kern_sdpa_desc *d, const kern_sdpa_hook *h, const void *mask, int64_t b, int64_t i0,
                        int nq, int64_t j0, int nk, int width, float *s)
{
    if (h)
        h->scores(h->ctx, b, i0, nq, j0, nk, s, BK);
    if (mask || d->causal || nk < width)
        apply_mask(d, mask, i0, nq, j0, nk, width, s);
}

/* Query rows i0 .. i0+nq of an entry (at q) into w->qb, scaled; the
 * softmax state of each row reset. */
static void load_q(const kern_sdpa_desc *d, const sdpa_isa *isa, const void *q, int64_t i0, int nq,
                   sdpa_scratch *w)
{
    if (d->q.col == 1 && d->dtype == KERN_SDPA_F32)
        isa->scale_rows(w->qb, d->E, (const float *)q + i0 * d->q.row, d->q.row, nq, d->E, w->qscale);
    else
        for (int r = 0; r < nq; r++)
            for (int64_t e = 0; e < d->E; e++)
                w->qb[r * d->E + e] = elem(q, (i0 + r) * d->q.row + e * d->q.col, d->dtype) * d->scale;
    for (int r = 0; r < nq; r++)
        w->m[r] = -INFINITY;
    memset(w->l, 0, sizeof(w->l[0]) * (size_t)nq);
}

/* acc times corr, where the softmax moved some row's reference max. */
static void rescale(const sdpa_isa *isa, sdpa_scratch *w, int nq, int64_t Ev)
{
    for (int r = 0; r < nq; r++)
        if (w->corr[r] != 1) {
            isa->scale_rows(w->acc, Ev, w->acc, Ev, nq, Ev, w->corr);
            return;
        }
}

/* Work item t: batch entry t / nqb, query block t % nqb. */
static void run_item(const sdpa_job *J, int64_t t, sdpa_scratch *w)
{
    const kern_sdpa_desc *d = J->d;
    const sdpa_isa *isa = J->isa;
    int64_t b = t / J->nqb, i0 = (t % J->nqb) * BQ, E = d->E, Ev = d->Ev;
    int nq = d->L - i0 < BQ ? (int)(d->L - i0) : BQ;
    const void *mask = mask_of(d, J->mask, b);
    int64_t es = (int64_t)elem_size(d->dtype);
    load_q(d, isa, (const char *)J->q + batch_offset(d, &d->q, b) * es, i0, nq, w);
    memset(w->acc, 0, sizeof(float) * (size_t)(nq * Ev));
    if (w->packed != b) {
        pack_kv(d, (const char *)J->k + batch_offset(d, &d->k, b) * es,
                (const char *)J->v + batch_offset(d, &d->v, b) * es, w);
        w->packed = b;
    }
    int64_t jend = d->causal && i0 + nq < d->S ? i0 + nq : d->S, SP = round_vw(d->S);
    for (int64_t j0 = 0; j0 < jend; j0 += BK) {
        int nk = jend - j0 < BK ? (int)(jend - j0) : BK, width = (int)round_vw(nk);
        if (tile_skipped(d, J->x->hook, mask, b, i0, nq, j0, nk))
            continue;
        isa->mm(nq, width, (int)E, w->qb, E, 1, w->kt + j0, SP, w->s, BK, 0);
        tile_scores(d, J->x->hook, mask, b, i0, nq, j0, nk, width, w->s);
        isa->softmax(w, nq, width);
        rescale(isa, w, nq, Ev);
        isa->mm(nq, (int)Ev, nk, w->s, BK, 1, w->vp + j0 * w->ldv, w->ldv, w->acc, Ev, 1);
    }
    int64_t orow = J->x->out_row ? J->x->out_row : Ev;
    for (int r = 0; r < nq; r++) {
        float l = row_sum(w, r);
        w->corr[r] = l == 0 ? 0 : 1 / l;   /* no key at all: 0, as torch */
        if (J->x->lse)
            J->x->lse[(b * d->L + i0 + r) * J->x->lse_row] = l == 0 ? -INFINITY : w->m[r] + logf(l);
    }
    if (d->dtype == KERN_SDPA_F32) {
        isa->scale_rows((float *)J->out + (b * d->L + i0) * orow, orow, w->acc, Ev, nq, Ev, w->corr);
        return;
    }
    isa->scale_rows(w->acc, Ev, w->acc, Ev, nq, Ev, w->corr);
    uint16_t *o = (uint16_t *)J->out + (b * d->L + i0) * orow;
    for (int r = 0; r < nq; r++)
        for (int64_t e = 0; e < Ev; e++)
            o[r * orow + e] = d->dtype == KERN_SDPA_BF16 ? kern_f32_to_bf16(w->acc[r * Ev + e])
                                                          : kern_f32_to_f16(w->acc[r * Ev + e]);
}

static void sdpa_range(void *ctx, int64_t begin, int64_t end)
{
    sdpa_job *J = ctx;
    const kern_sdpa_desc *d = J->d;
    sdpa_scratch w;
    int64_t SP = round_vw(d->S), nvb = d->v.col == 1 && d->dtype == KERN_SDPA_F32 ? 0 : d->S * d->Ev;
    size_t n = (size_t)(BQ * d->E + d->E * SP + nvb + BQ * BK + BQ * d->Ev);
    float *mem = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!mem) {
        J->failed = 1;
        return;
    }
    w.qb = mem;
    w.kt = w.qb + BQ * d->E;
    w.vb = w.kt + d->E * SP;
    w.s = w.vb + nvb;
    w.acc = w.s + BQ * BK;
    w.packed = -1;
    for (int r = 0; r < BQ; r++)
        w.qscale[r] = d->scale;
    for (int64_t t = begin; t < end; t++)
        run_item(J, t, &w);
    free(mem);
}

int kern_sdpa(const kern_sdpa_desc *d, const void *q, const void *k, const void *v,
              const void *mask, void *out, char *err, size_t errlen)
{
    kern_sdpa_extra none = { 0 };
    return kern_sdpa_ex(d, &none, q, k, v, mask, out, err, errlen);
}

int kern_sdpa_ex(const kern_sdpa_desc *d, const kern_sdpa_extra *x, const void *q, const void *k,
                 const void *v, const void *mask, void *out, char *err, size_t errlen)
{
    const sdpa_isa *isa = pick_isa();
    if (d->dtype != KERN_SDPA_F32 && (d->dtype != KERN_SDPA_BF16 && d->dtype != KERN_SDPA_F16))
        return snprintf(err, errlen, "sdpa: unknown dtype %d", (int)d->dtype), -1;
    if (d->dtype != KERN_SDPA_F32 && x->hook)
        return snprintf(err, errlen, "sdpa: a score hook (flex attention) on half-precision operands"), -1;
    if (d->nb < 0 || d->nb > KERN_SDPA_MAX_BATCH || d->L < 0 || d->S < 0 || d->E < 1 || d->Ev < 0)
        return snprintf(err, errlen, "sdpa: bad sizes (L %lld, S %lld, E %lld, Ev %lld)", (long long)d->L,
                        (long long)d->S, (long long)d->E, (long long)d->Ev), -1;
    int64_t nbatch = 1;
    for (int i = 0; i < d->nb; i++)
        nbatch *= d->bdims[i];
    sdpa_job J = { .d = d, .x = x, .q = q, .k = k, .v = v, .mask = mask, .out = out,
                   .nqb = (d->L + BQ - 1) / BQ, .isa = isa };
    if (nbatch == 0 || d->L == 0)
        return 0;
    if (d->S == 0 || d->Ev == 0) {   /* no keys: zero rows, as torch */
        int64_t orow = x->out_row ? x->out_row : d->Ev;
        for (int64_t r = 0; r < nbatch * d->L; r++) {
            memset((char *)out + r * orow * (int64_t)elem_size(d->dtype), 0, elem_size(d->dtype) * (size_t)d->Ev);
            if (x->lse && d->S == 0)
                x->lse[r * x->lse_row] = -INFINITY;
        }
        if (d->S == 0)
            return 0;
    }
    int64_t per = 2 * d->S * (d->E + d->Ev) * BQ;   /* flops per item, about */
    kern_parallel_for(nbatch * J.nqb, per >= (1 << 18) ? 1 : (1 << 18) / per + 1, sdpa_range, &J);
    if (J.failed)
        return snprintf(err, errlen, "sdpa: out of memory"), -1;
    return 0;
}

/* ============================================================== backward
 *
 * Pass 1 (items: batch entry x chunk of query blocks): each row's
 * reference m (its max, or up to SLACK below it) and 1 / l, l the sum of
 * exp(s - m) over all its keys (the forward's online softmax without P V;
 * m = 0 and 1 / l = 0 for a row with no key, whose probabilities are
 * then 0), and D = rowsum(g o), which equals rowsum(P dP). (Not one
 * log-sum-exp m + log l: where a mask adds a large finite value, -1e9,
 * log l vanishes in m's rounding and every P of the row would be 1, not
 * the forward's 1 / n.)
 * Pass 2 (items: batch entry x chunk of key blocks): for each key block of
 * the chunk, over the query blocks that see it: S = Q K^T (Q scaled),
 * masked, P = exp(S - m) / l, dV += P^T G, dP = G V^T, dS = P (dP - D),
 * dK += dS^T Q, dQ += dS K. A key block's dK and dV are complete when its
 * query blocks are done. dQ sums over key chunks: in place when an entry
 * is one chunk (many entries), else in per-chunk partials that pass 3
 * adds up; it is scaled last.
 * The five products go through the forward's matrix kernel, A read
 * through strides, so P^T and dS^T are never transposed in memory.
 */

typedef struct sdpa_bwd_job {
    const kern_sdpa_desc *d;
    const kern_sdpa_hook *hook;
    const kern_sdpa_extra *x;
    const float *q, *k, *v, *o, *g;
    const void *mask;
    float *dq, *dk, *dv;
    float *m, *linv, *D;   /* [nbatch, L] each; D = rowsum(g o) - dlse */
    float *part;           /* [nbatch, nkc, L, E] when nkc > 1 */
    int64_t nqb, nkb;      /* query and key blocks per entry */
    int64_t qpc, nqc;      /* pass 1: query blocks per chunk, chunks per entry */
    int64_t kpc, nkc;      /* pass 2: key blocks per chunk, chunks per entry */
    const sdpa_isa *isa;
    _Atomic int failed;
} sdpa_bwd_job;

/* Pass 1 on items [begin, end): entry t / nqc, its query blocks of chunk t % nqc. */
static void bwd_stats_range(void *ctx, int64_t begin, int64_t end)
{
    sdpa_bwd_job *J = ctx;
    const kern_sdpa_desc *d = J->d;
    int64_t SP = round_vw(d->S), E = d->E, Ev = d->Ev;
    sdpa_scratch w;
    float *mem = aligned_alloc(64, ((size_t)(BQ * E + E * SP + BQ * BK) * sizeof(float) + 63) / 64 * 64);
    if (!mem) {
        J->failed = 1;
        return;
    }
    w.qb = mem, w.kt = w.qb + BQ * E, w.s = w.kt + E * SP;
    for (int r = 0; r < BQ; r++)
        w.qscale[r] = d->scale;
    int64_t packed = -1;
    for (int64_t t = begin; t < end; t++) {
        int64_t b = t / J->nqc, qb0 = (t % J->nqc) * J->qpc, qb1 = qb0 + J->qpc < J->nqb ? qb0 + J->qpc : J->nqb;
        const float *q = J->q + batch_offset(d, &d->q, b), *k = J->k + batch_offset(d, &d->k, b);
        const float *o = J->o + batch_offset(d, &d->o, b), *g = J->g + batch_offset(d, &d->g, b);
        const void *mask = mask_of(d, J->mask, b);
        if (packed != b) {
            pack_t(k, KERN_SDPA_F32, &d->k, d->S, E, w.kt, SP);
            packed = b;
        }
        for (int64_t i0 = qb0 * BQ; i0 < qb1 * BQ && i0 < d->L; i0 += BQ) {
            int nq = d->L - i0 < BQ ? (int)(d->L - i0) : BQ;
            load_q(d, J->isa, q, i0, nq, &w);
            int64_t jend = d->causal && i0 + nq < d->S ? i0 + nq : d->S;
            for (int64_t j0 = 0; j0 < jend; j0 += BK) {
                int nk = jend - j0 < BK ? (int)(jend - j0) : BK, width = (int)round_vw(nk);
                if (tile_skipped(d, J->hook, mask, b, i0, nq, j0, nk))
                    continue;
                J->isa->mm(nq, width, (int)E, w.qb, E, 1, w.kt + j0, SP, w.s, BK, 0);
                tile_scores(d, J->hook, mask, b, i0, nq, j0, nk, width, w.s);
                J->isa->softmax(&w, nq, width);
            }
            for (int r = 0; r < nq; r++) {
                int64_t i = i0 + r;
                double dsum = 0;
                for (int64_t e = 0; e < Ev; e++)
                    dsum += (double)g[i * d->g.row + e * d->g.col] * o[i * d->o.row + e * d->o.col];
                float l = row_sum(&w, r);
                J->m[b * d->L + i] = l > 0 ? w.m[r] : 0;
                J->linv[b * d->L + i] = l > 0 ? 1 / l : 0;
                if (J->x->dlse)   /* dS = P (dP - D) + dlse P */
                    dsum -= J->x->dlse[batch_offset(d, &J->x->dlse_op, b) + i * J->x->dlse_op.row];
                J->D[b * d->L + i] = (float)dsum;
            }
        }
    }
    free(mem);
}

/* Pass 2 on items [begin, end): entry t / nkc, its key blocks of chunk t % nkc. */
static void bwd_grad_range(void *ctx, int64_t begin, int64_t end)
{
    sdpa_bwd_job *J = ctx;
    const kern_sdpa_desc *d = J->d;
    int64_t L = d->L, S = d->S, E = d->E, Ev = d->Ev;
    size_t n = (size_t)(L * E + L * Ev + 2 * E * BK + Ev * BK + 3 * BQ * BK + BK * E + BK * Ev);
    float *mem = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!mem) {
        J->failed = 1;
        return;
    }
    float *qs = mem, *gb = qs + L * E, *kt = gb + L * Ev, *kb = kt + E * BK, *vt = kb + BK * E;
    float *s = vt + Ev * BK, *dp = s + BQ * BK, *dk = dp + BQ * BK, *dv = dk + BK * E, *raw = dv + BK * Ev;
    const kern_sdpa_hook *h = J->hook;
    const sdpa_isa *isa = J->isa;
    for (int64_t t = begin; t < end; t++) {
        int64_t b = t / J->nkc, c = t % J->nkc;
        int64_t kb0 = c * J->kpc, kb1 = kb0 + J->kpc < J->nkb ? kb0 + J->kpc : J->nkb;
        const float *q = J->q + batch_offset(d, &d->q, b), *k = J->k + batch_offset(d, &d->k, b);
        const float *v = J->v + batch_offset(d, &d->v, b), *g = J->g + batch_offset(d, &d->g, b);
        const void *mask = mask_of(d, J->mask, b);
        const float *m = J->m + b * L, *linv = J->linv + b * L, *D = J->D + b * L;
        float *dq = J->nkc == 1 ? J->dq + b * L * E : J->part + (b * J->nkc + c) * L * E;
        int64_t first = d->causal ? kb0 * BK / BQ * BQ : 0;   /* causal: earlier rows see none of these keys */
        memset(dq, 0, sizeof(float) * (size_t)(L * E));
        for (int64_t i = first; i < L; i++) {
            for (int64_t e = 0; e < E; e++)
                qs[i * E + e] = q[i * d->q.row + e * d->q.col] * d->scale;
            for (int64_t e = 0; e < Ev; e++)
                gb[i * Ev + e] = g[i * d->g.row + e * d->g.col];
        }
        for (int64_t kbk = kb0; kbk < kb1; kbk++) {
            int64_t j0 = kbk * BK;
            int nk = S - j0 < BK ? (int)(S - j0) : BK, width = (int)round_vw(nk);
            pack_t(k + j0 * d->k.row, KERN_SDPA_F32, &d->k, nk, E, kt, BK);
            pack_t(v + j0 * d->v.row, KERN_SDPA_F32, &d->v, nk, Ev, vt, BK);
            for (int jj = 0; jj < nk; jj++)
                for (int64_t e = 0; e < E; e++)
                    kb[jj * E + e] = kt[e * BK + jj];
            memset(dk, 0, sizeof(float) * (size_t)(nk * E));
            memset(dv, 0, sizeof(float) * (size_t)(nk * Ev));
            for (int64_t i0 = d->causal ? j0 / BQ * BQ : 0; i0 < L; i0 += BQ) {
                int nq = L - i0 < BQ ? (int)(L - i0) : BQ;
                if (tile_skipped(d, h, mask, b, i0, nq, j0, nk))
                    continue;
                isa->mm(nq, width, (int)E, qs + i0 * E, E, 1, kt, BK, s, BK, 0);
                if (h && h->grads)
                    memcpy(raw, s, sizeof(float) * (size_t)(nq * BK));
                tile_scores(d, h, mask, b, i0, nq, j0, nk, width, s);
                isa->probs(s, m + i0, linv + i0, nq, width);
                isa->mm(nk, (int)Ev, nq, s, 1, BK, gb + i0 * Ev, Ev, dv, Ev, 1);
                isa->mm(nq, width, (int)Ev, gb + i0 * Ev, Ev, 1, vt, BK, dp, BK, 0);
                isa->dscore(dp, s, D + i0, nq, width);
                if (h && h->grads)
                    h->grads(h->ctx, b, i0, nq, j0, nk, raw, dp, BK);
                isa->mm(nk, (int)E, nq, dp, 1, BK, qs + i0 * E, E, dk, E, 1);
                isa->mm(nq, (int)E, nk, dp, BK, 1, kb, E, dq + i0 * E, E, 1);
            }
            memcpy(J->dk + (b * S + j0) * E, dk, sizeof(float) * (size_t)(nk * E));
            memcpy(J->dv + (b * S + j0) * Ev, dv, sizeof(float) * (size_t)(nk * Ev));
        }
        if (J->nkc == 1)
            for (int64_t x = 0; x < L * E; x++)
                dq[x] *= d->scale;
    }
    free(mem);
}

/* Pass 3 on rows [begin, end) of all entries: dq = scale * sum of the partials. */
static void bwd_sum_range(void *ctx, int64_t begin, int64_t end)
{
    sdpa_bwd_job *J = ctx;
    int64_t L = J->d->L, E = J->d->E;
    for (int64_t r = begin; r < end; r++) {
        int64_t b = r / L, i = r % L;
        float *out = J->dq + r * E;
        for (int64_t e = 0; e < E; e++) {
            float x = 0;
            for (int64_t c = 0; c < J->nkc; c++)
                x += J->part[((b * J->nkc + c) * L + i) * E + e];
            out[e] = x * J->d->scale;
        }
    }
}

/* Chunks per entry so that nbatch entries make about two items per
 * thread: 1 when there are as many entries as threads. */
static int64_t chunks(int64_t nbatch, int64_t nblocks)
{
    int64_t T = kern_get_num_threads();
    if (nbatch >= T || nblocks <= 1)
        return 1;
    int64_t c = (2 * T + nbatch - 1) / nbatch;
    return c < nblocks ? c : nblocks;
}

int kern_sdpa_backward(const kern_sdpa_desc *d, const float *q, const float *k, const float *v,
                       const void *mask, const float *o, const float *g, float *dq, float *dk, float *dv,
                       char *err, size_t errlen)
{
    kern_sdpa_extra none = { 0 };
    return kern_sdpa_backward_ex(d, &none, q, k, v, mask, o, g, dq, dk, dv, err, errlen);
}

int kern_sdpa_backward_ex(const kern_sdpa_desc *d, const kern_sdpa_extra *x, const float *q, const float *k,
                          const float *v, const void *mask, const float *o, const float *g, float *dq, float *dk,
                          float *dv, char *err, size_t errlen)
{
    if (d->dtype != KERN_SDPA_F32)
        return snprintf(err, errlen, "sdpa backward: float32 only"), -1;
    if (d->nb < 0 || d->nb > KERN_SDPA_MAX_BATCH || d->L < 0 || d->S < 0 || d->E < 1 || d->Ev < 0)
        return snprintf(err, errlen, "sdpa backward: bad sizes (L %lld, S %lld, E %lld, Ev %lld)",
                        (long long)d->L, (long long)d->S, (long long)d->E, (long long)d->Ev), -1;
    int64_t nbatch = 1;
    for (int i = 0; i < d->nb; i++)
        nbatch *= d->bdims[i];
    if (nbatch == 0)
        return 0;
    if (d->L == 0 || d->S == 0 || d->Ev == 0) {   /* no query, no key or no value column: zero gradients */
        memset(dq, 0, sizeof(float) * (size_t)(nbatch * d->L * d->E));
        memset(dk, 0, sizeof(float) * (size_t)(nbatch * d->S * d->E));
        memset(dv, 0, sizeof(float) * (size_t)(nbatch * d->S * d->Ev));
        return 0;
    }
    sdpa_bwd_job J = { .d = d, .hook = x->hook, .x = x, .q = q, .k = k, .v = v, .o = o, .g = g, .mask = mask, .dq = dq, .dk = dk, .dv = dv,
                       .nqb = (d->L + BQ - 1) / BQ, .nkb = (d->S + BK - 1) / BK, .isa = pick_isa() };
    J.nqc = chunks(nbatch, J.nqb), J.qpc = (J.nqb + J.nqc - 1) / J.nqc;
    J.nkc = chunks(nbatch, J.nkb), J.kpc = (J.nkb + J.nkc - 1) / J.nkc;
    size_t rows = (size_t)(nbatch * d->L);
    J.m = malloc(sizeof(float) * 3 * rows);
    J.part = J.nkc > 1 ? malloc(sizeof(float) * rows * (size_t)(J.nkc * d->E)) : NULL;
    if (!J.m || (J.nkc > 1 && !J.part)) {
        free(J.m), free(J.part);
        return snprintf(err, errlen, "sdpa backward: out of memory"), -1;
    }
    J.linv = J.m + rows, J.D = J.linv + rows;
    kern_parallel_for(nbatch * J.nqc, 1, bwd_stats_range, &J);
    if (!J.failed)
        kern_parallel_for(nbatch * J.nkc, 1, bwd_grad_range, &J);
    if (!J.failed && J.nkc > 1)
        kern_parallel_for((int64_t)rows, 64, bwd_sum_range, &J);
    free(J.m), free(J.part);
    if (J.failed)
        return snprintf(err, errlen, "sdpa backward: out of memory"), -1;
    return 0;
}
