/* attention.c — flash-style scaled dot-product attention (see attention.h).
 *
 * Work items are (batch entry, block of BQ query rows). A thread packs the
 * keys (transposed, E x S) and values (S x Ev) of a batch entry once and
 * reuses them for the entry's query blocks it runs. For each item the
 * query block is copied (pre-scaled) into scratch; then for each block of
 * BK keys, scores S = Q K^T are computed for the block, masked, and the
 * online softmax folds them in: new row max m', correction exp(m - m'),
 * P = exp(S - m'), row sum l = l * corr + sum(P), acc = acc * corr + P V.
 * The output row is acc / l. Causal items stop at the diagonal block.
 *
 * The three inner steps (scores, softmax, P V) have an AVX-512 version
 * (intrinsics, SLEEF's vector exp) and a portable scalar one, chosen once
 * per process from the CPU.
 */
#include "attention.h"
#include "threadpool.h"

#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BQ = KERN_SDPA_TILE_Q, BK = KERN_SDPA_TILE_K };

/* Per-thread scratch of one range of work items. The keys and values of
 * one batch entry are packed once (kt: E x SP, transposed; vb: SP x Ev; SP
 * = S rounded up to BK, zero padded) and reused by all its query blocks. */
typedef struct sdpa_scratch {
    float *qb;     /* BQ x E, scaled */
    float *kt;     /* E x SP */
    float *vb;     /* SP x Ev */
    float *s;      /* BQ x BK: scores, then probabilities */
    float *acc;    /* BQ x Ev */
    int64_t packed;   /* batch entry whose keys/values kt/vb hold, or -1 */
    float m[BQ], l[BQ], corr[BQ];
} sdpa_scratch;

typedef struct sdpa_isa {
    void (*scores)(const float *qb, const float *kt, int64_t ldk, float *s, int nq, int64_t E);
    void (*softmax)(sdpa_scratch *w, int nq);
    void (*pv)(const float *s, const float *vb, float *acc, const float *corr, int nq, int64_t Ev);
} sdpa_isa;

/* ---------------------------------------------------------------- scalar */

static void scores_scalar(const float *qb, const float *kt, int64_t ldk, float *s, int nq, int64_t E)
{
    for (int r = 0; r < nq; r++) {
        float row[BK] = { 0 };
        for (int64_t e = 0; e < E; e++) {
            float x = qb[r * E + e];
            for (int c = 0; c < BK; c++)
                row[c] += x * kt[e * ldk + c];
        }
        memcpy(s + r * BK, row, sizeof row);
    }
}

/* Folds block scores s (BQ x BK, masked entries -inf) into the running max
 * m and sum l; s becomes exp(s - m'), corr the factor for the old acc. A
 * row with no unmasked key so far keeps m = -inf, P = 0 and corr = 1 (and
 * l = 0 at the end: a zero row). */
static void softmax_scalar(sdpa_scratch *w, int nq)
{
    for (int r = 0; r < nq; r++) {
        float *s = w->s + r * BK, mx = -INFINITY, sum = 0;
        for (int c = 0; c < BK; c++)
            mx = s[c] > mx ? s[c] : mx;
        float mn = w->m[r] > mx ? w->m[r] : mx;
        if (mn == -INFINITY) {
            memset(s, 0, sizeof(float) * BK);
            w->corr[r] = 1;
            continue;
        }
        for (int c = 0; c < BK; c++)
            sum += (s[c] = expf(s[c] - mn));
        w->corr[r] = expf(w->m[r] - mn);
        w->l[r] = w->l[r] * w->corr[r] + sum;
        w->m[r] = mn;
    }
}

static void pv_scalar(const float *s, const float *vb, float *acc, const float *corr, int nq, int64_t Ev)
{
    for (int r = 0; r < nq; r++) {
        float *a = acc + r * Ev;
        for (int64_t e = 0; e < Ev; e++)
            a[e] *= corr[r];
        for (int c = 0; c < BK; c++) {
            float p = s[r * BK + c];
            for (int64_t e = 0; p != 0 && e < Ev; e++)
                a[e] += p * vb[c * Ev + e];
        }
    }
}

/* --------------------------------------------------------------- AVX-512 */

#pragma GCC push_options
#pragma GCC target("avx512f")

__m512 Sleef_expf16_u10avx512f(__m512);

/* Rows r and r + 1 (when two) of S = Q K^T: 8 independent FMA chains. */
static void scores_512(const float *qb, const float *kt, int64_t ldk, float *s, int nq, int64_t E)
{
    for (int r = 0; r < nq; r += 2) {
        int two = r + 1 < nq;
        const float *q0 = qb + r * E, *q1 = qb + (r + two) * E;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        for (int64_t e = 0; e < E; e++) {
            const float *k = kt + e * ldk;
            __m512 k0 = _mm512_loadu_ps(k), k1 = _mm512_loadu_ps(k + 16);
            __m512 k2 = _mm512_loadu_ps(k + 32), k3 = _mm512_loadu_ps(k + 48);
            __m512 x = _mm512_set1_ps(q0[e]), y = _mm512_set1_ps(q1[e]);
            a0 = _mm512_fmadd_ps(x, k0, a0), a1 = _mm512_fmadd_ps(x, k1, a1);
            a2 = _mm512_fmadd_ps(x, k2, a2), a3 = _mm512_fmadd_ps(x, k3, a3);
            b0 = _mm512_fmadd_ps(y, k0, b0), b1 = _mm512_fmadd_ps(y, k1, b1);
            b2 = _mm512_fmadd_ps(y, k2, b2), b3 = _mm512_fmadd_ps(y, k3, b3);
        }
        float *o = s + r * BK;
        _mm512_storeu_ps(o, a0), _mm512_storeu_ps(o + 16, a1);
        _mm512_storeu_ps(o + 32, a2), _mm512_storeu_ps(o + 48, a3);
        if (two) {
            o += BK;
            _mm512_storeu_ps(o, b0), _mm512_storeu_ps(o + 16, b1);
            _mm512_storeu_ps(o + 32, b2), _mm512_storeu_ps(o + 48, b3);
        }
    }
}

static void softmax_512(sdpa_scratch *w, int nq)
{
    for (int r = 0; r < nq; r++) {
        float *s = w->s + r * BK;
        __m512 v[4];
        for (int k = 0; k < 4; k++)
            v[k] = _mm512_loadu_ps(s + 16 * k);
        float mx = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(v[0], v[1]), _mm512_max_ps(v[2], v[3])));
        float mn = w->m[r] > mx ? w->m[r] : mx;
        if (mn == -INFINITY) {
            memset(s, 0, sizeof(float) * BK);
            w->corr[r] = 1;
            continue;
        }
        __m512 sum = _mm512_setzero_ps(), m = _mm512_set1_ps(mn);
        for (int k = 0; k < 4; k++) {
            v[k] = Sleef_expf16_u10avx512f(_mm512_sub_ps(v[k], m));
            _mm512_storeu_ps(s + 16 * k, v[k]);
            sum = _mm512_add_ps(sum, v[k]);
        }
        w->corr[r] = expf(w->m[r] - mn);
        w->l[r] = w->l[r] * w->corr[r] + _mm512_reduce_add_ps(sum);
        w->m[r] = mn;
    }
}

/* acc rows r, r + 1 over Ev in chunks of 64 columns (masked tails). */
/* acc rows r, r + 1, columns e0 .. e0 + 63 (all present): unmasked. */
static void pv_512_full(const float *sa, const float *sb, const float *vb, float *ar, float *br, float ca_,
                        float cb_, int64_t Ev, int two)
{
    __m512 ca = _mm512_set1_ps(ca_), cb = _mm512_set1_ps(cb_);
    __m512 a0 = _mm512_mul_ps(ca, _mm512_loadu_ps(ar)), a1 = _mm512_mul_ps(ca, _mm512_loadu_ps(ar + 16));
    __m512 a2 = _mm512_mul_ps(ca, _mm512_loadu_ps(ar + 32)), a3 = _mm512_mul_ps(ca, _mm512_loadu_ps(ar + 48));
    __m512 b0 = _mm512_mul_ps(cb, _mm512_loadu_ps(br)), b1 = _mm512_mul_ps(cb, _mm512_loadu_ps(br + 16));
    __m512 b2 = _mm512_mul_ps(cb, _mm512_loadu_ps(br + 32)), b3 = _mm512_mul_ps(cb, _mm512_loadu_ps(br + 48));
    for (int c = 0; c < BK; c++) {
        __m512 p = _mm512_set1_ps(sa[c]), q = _mm512_set1_ps(sb[c]);
        const float *vr = vb + c * Ev;
        __m512 x0 = _mm512_loadu_ps(vr), x1 = _mm512_loadu_ps(vr + 16);
        __m512 x2 = _mm512_loadu_ps(vr + 32), x3 = _mm512_loadu_ps(vr + 48);
        a0 = _mm512_fmadd_ps(p, x0, a0), a1 = _mm512_fmadd_ps(p, x1, a1);
        a2 = _mm512_fmadd_ps(p, x2, a2), a3 = _mm512_fmadd_ps(p, x3, a3);
        b0 = _mm512_fmadd_ps(q, x0, b0), b1 = _mm512_fmadd_ps(q, x1, b1);
        b2 = _mm512_fmadd_ps(q, x2, b2), b3 = _mm512_fmadd_ps(q, x3, b3);
    }
    _mm512_storeu_ps(ar, a0), _mm512_storeu_ps(ar + 16, a1);
    _mm512_storeu_ps(ar + 32, a2), _mm512_storeu_ps(ar + 48, a3);
    if (two) {
        _mm512_storeu_ps(br, b0), _mm512_storeu_ps(br + 16, b1);
        _mm512_storeu_ps(br + 32, b2), _mm512_storeu_ps(br + 48, b3);
    }
}

static void pv_512(const float *s, const float *vb, float *acc, const float *corr, int nq, int64_t Ev)
{
    for (int r = 0; r < nq; r += 2) {
        int two = r + 1 < nq;
        for (int64_t e0 = 0; e0 < Ev; e0 += 64) {
            if (Ev - e0 >= 64) {
                pv_512_full(s + r * BK, s + (r + two) * BK, vb + e0, acc + r * Ev + e0,
                            acc + (r + two) * Ev + e0, corr[r], corr[r + two], Ev, two);
                continue;
            }
            __mmask16 mk[4];
            __m512 a[4], b[4];
            float *ar = acc + r * Ev + e0, *br = acc + (r + two) * Ev + e0;
            __m512 ca = _mm512_set1_ps(corr[r]), cb = _mm512_set1_ps(corr[r + two]);
            for (int k = 0; k < 4; k++) {
                int64_t left = Ev - e0 - 16 * k;
                mk[k] = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
                a[k] = _mm512_mul_ps(ca, _mm512_maskz_loadu_ps(mk[k], ar + 16 * k));
                b[k] = _mm512_mul_ps(cb, _mm512_maskz_loadu_ps(mk[k], br + 16 * k));
            }
            for (int c = 0; c < BK; c++) {
                __m512 p = _mm512_set1_ps(s[r * BK + c]), q = _mm512_set1_ps(s[(r + two) * BK + c]);
                const float *vr = vb + c * Ev + e0;
                for (int k = 0; k < 4; k++) {
                    __m512 x = _mm512_maskz_loadu_ps(mk[k], vr + 16 * k);
                    a[k] = _mm512_fmadd_ps(p, x, a[k]);
                    b[k] = _mm512_fmadd_ps(q, x, b[k]);
                }
            }
            for (int k = 0; k < 4; k++) {
                _mm512_mask_storeu_ps(ar + 16 * k, mk[k], a[k]);
                if (two)
                    _mm512_mask_storeu_ps(br + 16 * k, mk[k], b[k]);
            }
        }
    }
}

#pragma GCC pop_options

static const sdpa_isa isa_scalar = { scores_scalar, softmax_scalar, pv_scalar };
static const sdpa_isa isa_512 = { scores_512, softmax_512, pv_512 };

/* KERN_SDPA_FORCE_PORTABLE=1 (tests/c/test_attention.c) picks the scalar
 * steps on any CPU. */
static const sdpa_isa *pick_isa(void)
{
#if defined(KERN_SDPA_FORCE_PORTABLE) && KERN_SDPA_FORCE_PORTABLE
    return &isa_scalar;
#else
    return __builtin_cpu_supports("avx512f") ? &isa_512 : &isa_scalar;
#endif
}

/* ------------------------------------------------------------- one item */

typedef struct sdpa_job {
    const kern_sdpa_desc *d;
    const kern_sdpa_extra *x;
    const float *q, *k, *v;
    const void *mask;
    float *out;
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

static int64_t padded_s(const kern_sdpa_desc *d) { return (d->S + BK - 1) / BK * BK; }

/* All keys and values of one batch entry packed (zero padded to SP). */
/* Rows [0, n) of x (operand o's strides, cols columns) transposed into t
 * (cols rows of ld), zeros past row n. */
static void pack_t(const float *x, const kern_sdpa_operand *o, int64_t n, int64_t cols, float *t, int64_t ld)
{
    memset(t, 0, sizeof(float) * (size_t)(cols * ld));
    for (int64_t j = 0; j < n; j++)
        for (int64_t e = 0; e < cols; e++)
            t[e * ld + j] = x[j * o->row + e * o->col];
}

static void pack_kv(const kern_sdpa_desc *d, const float *k, const float *v, sdpa_scratch *w)
{
    int64_t SP = padded_s(d);
    pack_t(k, &d->k, d->S, d->E, w->kt, SP);
    memset(w->vb + d->S * d->Ev, 0, sizeof(float) * (size_t)((SP - d->S) * d->Ev));
    for (int64_t j = 0; j < d->S; j++)
        for (int64_t e = 0; e < d->Ev; e++)
            w->vb[j * d->Ev + e] = v[j * d->v.row + e * d->v.col];
}

/* -inf for keys beyond nk, above the diagonal (causal) or masked out;
 * additive masks added. */
static void apply_mask(const kern_sdpa_desc *d, const void *mask, int64_t i0, int nq, int64_t j0, int nk,
                       float *s)
{
    for (int r = 0; r < nq; r++) {
        float *row = s + r * BK;
        int64_t i = i0 + r;
        int lim = nk;
        if (d->causal && i - j0 + 1 < lim)
            lim = i - j0 + 1 < 0 ? 0 : (int)(i - j0 + 1);
        for (int c = lim; c < BK; c++)
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
                                                    : ((const float *)mask)[at] != -INFINITY)
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

/* The hook's modification of a tile's scores, then -inf past nk (and the
 * mask's and causal's). */
static void tile_scores(const kern_sdpa_desc *d, const kern_sdpa_hook *h, const void *mask, int64_t b, int64_t i0,
                        int nq, int64_t j0, int nk, float *s)
{
    if (h)
        h->scores(h->ctx, b, i0, nq, j0, nk, s, BK);
    apply_mask(d, mask, i0, nq, j0, nk, s);
}

/* Work item t: batch entry t / nqb, query block t % nqb. */
static void run_item(const sdpa_job *J, int64_t t, sdpa_scratch *w)
{
    const kern_sdpa_desc *d = J->d;
    int64_t b = t / J->nqb, i0 = (t % J->nqb) * BQ;
    int nq = d->L - i0 < BQ ? (int)(d->L - i0) : BQ;
    const float *q = J->q + batch_offset(d, &d->q, b), *k = J->k + batch_offset(d, &d->k, b);
    const float *v = J->v + batch_offset(d, &d->v, b);
    const void *mask = NULL;
    if (d->mask_kind != KERN_SDPA_NO_MASK)
        mask = (const char *)J->mask + batch_offset(d, &d->mask, b) * (d->mask_kind == KERN_SDPA_BOOL_MASK ? 1 : 4);
    for (int r = 0; r < nq; r++) {
        for (int64_t e = 0; e < d->E; e++)
            w->qb[r * d->E + e] = q[(i0 + r) * d->q.row + e * d->q.col] * d->scale;
        w->m[r] = -INFINITY;
        w->l[r] = 0;
    }
    memset(w->acc, 0, sizeof(float) * (size_t)(nq * d->Ev));
    if (w->packed != b) {
        pack_kv(d, k, v, w);
        w->packed = b;
    }
    int64_t jend = d->causal && i0 + nq < d->S ? i0 + nq : d->S, SP = padded_s(d);
    for (int64_t j0 = 0; j0 < jend; j0 += BK) {
        int nk = jend - j0 < BK ? (int)(jend - j0) : BK;
        if (tile_skipped(d, J->x->hook, mask, b, i0, nq, j0, nk))
            continue;
        J->isa->scores(w->qb, w->kt + j0, SP, w->s, nq, d->E);
        tile_scores(d, J->x->hook, mask, b, i0, nq, j0, nk, w->s);
        J->isa->softmax(w, nq);
        J->isa->pv(w->s, w->vb + j0 * d->Ev, w->acc, w->corr, nq, d->Ev);
    }
    int64_t orow = J->x->out_row ? J->x->out_row : d->Ev;
    float *o = J->out + (b * d->L + i0) * orow;
    for (int r = 0; r < nq; r++) {
        float inv = w->l[r] == 0 ? 0 : 1 / w->l[r];   /* no key at all: 0, as torch */
        for (int64_t e = 0; e < d->Ev; e++)
            o[r * orow + e] = w->acc[r * d->Ev + e] * inv;
    }
    if (J->x->lse)
        for (int r = 0; r < nq; r++)
            J->x->lse[(b * d->L + i0 + r) * J->x->lse_row] = w->l[r] == 0 ? -INFINITY : w->m[r] + logf(w->l[r]);
}

static void sdpa_range(void *ctx, int64_t begin, int64_t end)
{
    sdpa_job *J = ctx;
    const kern_sdpa_desc *d = J->d;
    sdpa_scratch w;
    int64_t SP = padded_s(d);
    size_t n = (size_t)(BQ * d->E + d->E * SP + SP * d->Ev + BQ * BK + BQ * d->Ev);
    float *mem = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64 + 64);
    if (!mem) {
        J->failed = 1;
        return;
    }
    w.qb = mem;
    w.kt = w.qb + BQ * d->E;
    w.vb = w.kt + d->E * SP;
    w.s = w.vb + SP * d->Ev;
    w.acc = w.s + BQ * BK;
    w.packed = -1;
    for (int64_t t = begin; t < end; t++)
        run_item(J, t, &w);
    free(mem);
}

int kern_sdpa(const kern_sdpa_desc *d, const float *q, const float *k, const float *v,
              const void *mask, float *out, char *err, size_t errlen)
{
    kern_sdpa_extra none = { 0 };
    return kern_sdpa_ex(d, &none, q, k, v, mask, out, err, errlen);
}

int kern_sdpa_ex(const kern_sdpa_desc *d, const kern_sdpa_extra *x, const float *q, const float *k,
                 const float *v, const void *mask, float *out, char *err, size_t errlen)
{
    const sdpa_isa *isa = pick_isa();
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
            memset(out + r * orow, 0, sizeof(float) * (size_t)d->Ev);
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
 * Pass 1 (items: batch entry x chunk of query blocks): each row's max m
 * and 1 / l, l the sum of exp(s - m) over all its keys (the forward's
 * online softmax without P V; m = 0 and 1 / l = 0 for a row with no key,
 * whose probabilities are then 0), and D = rowsum(g o), which equals
 * rowsum(P dP). (Not one log-sum-exp m + log l: where a mask adds a large
 * finite value, -1e9, log l vanishes in m's rounding and every P of the
 * row would be 1, not the forward's 1 / n.)
 * Pass 2 (items: batch entry x chunk of key blocks): for each key block of
 * the chunk, over the query blocks that see it: S = Q K^T (Q scaled),
 * masked, P = exp(S - m) / l, dV += P^T G, dP = G V^T, dS = P (dP - D),
 * dK += dS^T Q, dQ += dS K. A key block's dK and dV are complete when its
 * query blocks are done. dQ sums over key chunks: in place when an entry
 * is one chunk (many entries), else in per-chunk partials that pass 3
 * adds up; it is scaled last.
 * The five products go through one small matrix kernel (AVX-512: 4 rows
 * x 64 columns of accumulators; A read through strides, so P^T and dS^T
 * are never transposed in memory).
 */

/* c[m][n] (+)= sum_k A(m, k) b[k][n] for m < M, n < N, k < K, A(m, k) at
 * a[m * sam + k * sak], rows of b and c ldb and ldc apart; acc: add to c,
 * else overwrite it. */
typedef void (*sdpa_mm_fn)(int M, int N, int K, const float *a, int64_t sam, int64_t sak, const float *b,
                           int64_t ldb, float *c, int64_t ldc, int acc);

typedef struct sdpa_bwd_isa {
    sdpa_mm_fn mm;
    void (*probs)(float *s, const float *m, const float *linv, int nq);   /* s = exp(s - m[row]) linv[row] */
    void (*dscore)(float *dp, const float *p, const float *D, int nq);  /* dp = p (dp - D[row]) */
} sdpa_bwd_isa;

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

static void probs_scalar(float *s, const float *m, const float *linv, int nq)
{
    for (int r = 0; r < nq; r++)
        for (int c = 0; c < BK; c++)
            s[r * BK + c] = expf(s[r * BK + c] - m[r]) * linv[r];
}

static void dscore_scalar(float *dp, const float *p, const float *D, int nq)
{
    for (int r = 0; r < nq; r++)
        for (int c = 0; c < BK; c++)
            dp[r * BK + c] = p[r * BK + c] * (dp[r * BK + c] - D[r]);
}

#pragma GCC push_options
#pragma GCC target("avx512f")

/* Rows m0 .. m0+3 (the last row repeated past M, not stored) by columns
 * n0 .. n0+63 (masked past N) at a time. */
static void mm_512(int M, int N, int K, const float *a, int64_t sam, int64_t sak, const float *b, int64_t ldb,
                   float *c, int64_t ldc, int acc)
{
    for (int n0 = 0; n0 < N; n0 += 64) {
        __mmask16 mk[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            int left = N - n0 - 16 * j;
            mk[j] = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
        }
        for (int m0 = 0; m0 < M; m0 += 4) {
            const float *ar[4];
            float *cr[4];
            __m512 r[4][4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                int m = m0 + i < M ? m0 + i : M - 1;
                ar[i] = a + m * sam;
                cr[i] = c + m * ldc + n0;
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++)
                    r[i][j] = acc ? _mm512_maskz_loadu_ps(mk[j], cr[i] + 16 * j) : _mm512_setzero_ps();
            }
            for (int k = 0; k < K; k++) {
                const float *br = b + k * ldb + n0;
                __m512 x[4];
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++)
                    x[j] = _mm512_maskz_loadu_ps(mk[j], br + 16 * j);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) {
                    __m512 y = _mm512_set1_ps(ar[i][k * sak]);
#pragma GCC unroll 4
                    for (int j = 0; j < 4; j++)
                        r[i][j] = _mm512_fmadd_ps(y, x[j], r[i][j]);
                }
            }
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                if (m0 + i < M)
#pragma GCC unroll 4
                    for (int j = 0; j < 4; j++)
                        _mm512_mask_storeu_ps(cr[i] + 16 * j, mk[j], r[i][j]);
        }
    }
}

static void probs_512(float *s, const float *m, const float *linv, int nq)
{
    for (int r = 0; r < nq; r++) {
        __m512 mx = _mm512_set1_ps(m[r]), li = _mm512_set1_ps(linv[r]);
        for (int c = 0; c < BK; c += 16) {
            __m512 e = Sleef_expf16_u10avx512f(_mm512_sub_ps(_mm512_loadu_ps(s + r * BK + c), mx));
            _mm512_storeu_ps(s + r * BK + c, _mm512_mul_ps(e, li));
        }
    }
}

static void dscore_512(float *dp, const float *p, const float *D, int nq)
{
    for (int r = 0; r < nq; r++) {
        __m512 dd = _mm512_set1_ps(D[r]);
        for (int c = 0; c < BK; c += 16) {
            float *x = dp + r * BK + c;
            _mm512_storeu_ps(x, _mm512_mul_ps(_mm512_loadu_ps(p + r * BK + c), _mm512_sub_ps(_mm512_loadu_ps(x), dd)));
        }
    }
}

#pragma GCC pop_options

static const sdpa_bwd_isa bwd_scalar = { mm_scalar, probs_scalar, dscore_scalar };
static const sdpa_bwd_isa bwd_512 = { mm_512, probs_512, dscore_512 };

typedef struct sdpa_bwd_job {
    const kern_sdpa_desc *d;
    const kern_sdpa_hook *hook;
    const float *q, *k, *v, *o, *g;
    const void *mask;
    float *dq, *dk, *dv;
    float *m, *linv, *D;   /* [nbatch, L] each */
    float *part;           /* [nbatch, nkc, L, E] when nkc > 1 */
    int64_t nqb, nkb;      /* query and key blocks per entry */
    int64_t qpc, nqc;      /* pass 1: query blocks per chunk, chunks per entry */
    int64_t kpc, nkc;      /* pass 2: key blocks per chunk, chunks per entry */
    const sdpa_isa *fwd;
    const sdpa_bwd_isa *isa;
    _Atomic int failed;
} sdpa_bwd_job;

static const void *mask_of(const kern_sdpa_desc *d, const void *mask, int64_t b)
{
    if (d->mask_kind == KERN_SDPA_NO_MASK)
        return NULL;
    return (const char *)mask + batch_offset(d, &d->mask, b) * (d->mask_kind == KERN_SDPA_BOOL_MASK ? 1 : 4);
}

/* Pass 1 on items [begin, end): entry t / nqc, its query blocks of chunk t % nqc. */
static void bwd_stats_range(void *ctx, int64_t begin, int64_t end)
{
    sdpa_bwd_job *J = ctx;
    const kern_sdpa_desc *d = J->d;
    int64_t SP = padded_s(d), E = d->E, Ev = d->Ev;
    sdpa_scratch w;
    float *mem = aligned_alloc(64, ((size_t)(BQ * E + E * SP + BQ * BK) * sizeof(float) + 63) / 64 * 64);
    if (!mem) {
        J->failed = 1;
        return;
    }
    w.qb = mem, w.kt = w.qb + BQ * E, w.s = w.kt + E * SP;
    int64_t packed = -1;
    for (int64_t t = begin; t < end; t++) {
        int64_t b = t / J->nqc, qb0 = (t % J->nqc) * J->qpc, qb1 = qb0 + J->qpc < J->nqb ? qb0 + J->qpc : J->nqb;
        const float *q = J->q + batch_offset(d, &d->q, b), *k = J->k + batch_offset(d, &d->k, b);
        const float *o = J->o + batch_offset(d, &d->o, b), *g = J->g + batch_offset(d, &d->g, b);
        const void *mask = mask_of(d, J->mask, b);
        if (packed != b) {
            pack_t(k, &d->k, d->S, E, w.kt, SP);
            packed = b;
        }
        for (int64_t i0 = qb0 * BQ; i0 < qb1 * BQ && i0 < d->L; i0 += BQ) {
            int nq = d->L - i0 < BQ ? (int)(d->L - i0) : BQ;
            for (int r = 0; r < nq; r++) {
                for (int64_t e = 0; e < E; e++)
                    w.qb[r * E + e] = q[(i0 + r) * d->q.row + e * d->q.col] * d->scale;
                w.m[r] = -INFINITY;
                w.l[r] = 0;
            }
            int64_t jend = d->causal && i0 + nq < d->S ? i0 + nq : d->S;
            for (int64_t j0 = 0; j0 < jend; j0 += BK) {
                int nk = jend - j0 < BK ? (int)(jend - j0) : BK;
                if (tile_skipped(d, J->hook, mask, b, i0, nq, j0, nk))
                    continue;
                J->fwd->scores(w.qb, w.kt + j0, SP, w.s, nq, E);
                tile_scores(d, J->hook, mask, b, i0, nq, j0, nk, w.s);
                J->fwd->softmax(&w, nq);
            }
            for (int r = 0; r < nq; r++) {
                int64_t i = i0 + r;
                double dsum = 0;
                for (int64_t e = 0; e < Ev; e++)
                    dsum += (double)g[i * d->g.row + e * d->g.col] * o[i * d->o.row + e * d->o.col];
                J->m[b * d->L + i] = w.l[r] > 0 ? w.m[r] : 0;
                J->linv[b * d->L + i] = w.l[r] > 0 ? 1 / w.l[r] : 0;
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
    const sdpa_bwd_isa *isa = J->isa;
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
            int nk = S - j0 < BK ? (int)(S - j0) : BK;
            pack_t(k + j0 * d->k.row, &d->k, nk, E, kt, BK);
            pack_t(v + j0 * d->v.row, &d->v, nk, Ev, vt, BK);
            for (int jj = 0; jj < nk; jj++)
                for (int64_t e = 0; e < E; e++)
                    kb[jj * E + e] = kt[e * BK + jj];
            memset(dk, 0, sizeof(float) * (size_t)(nk * E));
            memset(dv, 0, sizeof(float) * (size_t)(nk * Ev));
            for (int64_t i0 = d->causal ? j0 / BQ * BQ : 0; i0 < L; i0 += BQ) {
                int nq = L - i0 < BQ ? (int)(L - i0) : BQ;
                if (tile_skipped(d, h, mask, b, i0, nq, j0, nk))
                    continue;
                isa->mm(nq, BK, (int)E, qs + i0 * E, E, 1, kt, BK, s, BK, 0);
                if (h && h->grads)
                    memcpy(raw, s, sizeof(float) * (size_t)(nq * BK));
                tile_scores(d, h, mask, b, i0, nq, j0, nk, s);
                isa->probs(s, m + i0, linv + i0, nq);
                isa->mm(nk, (int)Ev, nq, s, 1, BK, gb + i0 * Ev, Ev, dv, Ev, 1);
                isa->mm(nq, BK, (int)Ev, gb + i0 * Ev, Ev, 1, vt, BK, dp, BK, 0);
                isa->dscore(dp, s, D + i0, nq);
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
    sdpa_bwd_job J = { .d = d, .hook = x->hook, .q = q, .k = k, .v = v, .o = o, .g = g, .mask = mask, .dq = dq, .dk = dk, .dv = dv,
                       .nqb = (d->L + BQ - 1) / BQ, .nkb = (d->S + BK - 1) / BK, .fwd = pick_isa() };
    J.isa = J.fwd == &isa_512 ? &bwd_512 : &bwd_scalar;
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
