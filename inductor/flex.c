/* flex.c — runs flex attention steps (plan_flex in plan.h): the CPU's
 * attention kernels (kernels/attention.c) with a hook that evaluates the
 * user's score and mask functions on each tile of scores.
 *
 * The functions were lowered into plan kernels over one tile
 * (KERN_SDPA_TILE_Q x KERN_SDPA_TILE_K points) whose loads of the
 * functions' arguments read small tile arrays: the scores, b, h, the
 * tile's query and key indices. The hook fills those arrays (indices past
 * the tile's end repeat the last valid one, so a captured table is never
 * read out of range on a point whose value is dropped) and calls the
 * kernel's entry on one thread: the attention kernel already runs its
 * tiles across the pool.
 *
 * Which tiles run: a dense state per block (0 empty, 1 partial, 2 full)
 * is built first, from the block tables, or without them by the mask
 * kernel over every tile (across the pool; once for all batch entries and
 * heads unless the block mask was made for them: create_block_mask's B /
 * H). A tile whose blocks are all empty is skipped, all full gets the
 * score function alone, otherwise the score function under the mask (and
 * where a tile straddles blocks of different states, each point follows
 * its own block).
 */
#include "plan.h"
#include "backend.h"
#include "../kernels/threadpool.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TQ = KERN_SDPA_TILE_Q, TK = KERN_SDPA_TILE_K };
enum { ST_EMPTY, ST_PARTIAL, ST_FULL, ST_MIXED };

typedef struct flex_run {
    const smelt_plan *p;
    const plan_flex *f;
    void **bufs;               /* the plan's buffers */
    uint8_t *state;            /* [Bm][Hm][QB][KB] block states, or NULL (no mask: all full) */
    int64_t Bm, Hm, QB, KB;    /* KB = ceil(S / bk): blocks the kernel can meet */
    int64_t bq, bk;            /* the blocks: the tables', or without them the kernel's tiles */
    int64_t L, S;
    int32_t *flag;             /* the tile kernels' error flag */
} flex_run;

/* One thread's tile arrays (64-byte aligned: the kernels' vector loads). */
typedef struct flex_tile {
    _Alignas(64) float score[TQ * TK];
    _Alignas(64) float res[TQ * TK];
    _Alignas(64) float aux[TQ * TK];
    _Alignas(64) int32_t qi[TQ];
    _Alignas(64) int32_t ki[TK];
    _Alignas(64) uint8_t mask[TQ * TK];
    int32_t b, h;
} flex_tile;

/* Each thread's tile arrays. */
static _Thread_local flex_tile tls_tile;

static int64_t table_int(const flex_run *R, int t, int64_t off)
{
    const char *base = (const char *)R->bufs[R->f->tab_buf[t]];
    int64_t at = R->f->tab_off[t] + off;
    switch (R->f->tab_dt[t]) {
    case SMELT_I32: return ((const int32_t *)base)[at];
    case SMELT_I64: return ((const int64_t *)base)[at];
    case SMELT_I16: return ((const int16_t *)base)[at];
    case SMELT_I8: return ((const int8_t *)base)[at];
    default: return ((const uint8_t *)base)[at];
    }
}

/* The dense block states from the tables: listed partial blocks 1, full
 * ones 2 (indices out of range ignored, counts clamped to the table). */
static int build_states(flex_run *R)
{
    const plan_flex *f = R->f;
    R->Bm = f->tab_shape[0], R->Hm = f->tab_shape[1], R->QB = f->tab_shape[2];
    R->bq = f->bq, R->bk = f->bk;
    R->KB = (R->S + f->bk - 1) / f->bk;
    size_t n = (size_t)(R->Bm * R->Hm * R->QB * R->KB);
    if (!(R->state = calloc(n + 1, 1)))
        return -1;
    for (int t = 0; t < 4; t += 2) {
        if (f->tab_buf[t] < 0)
            continue;
        const int64_t *sn = f->tab_st[t], *si = f->tab_st[t + 1];
        for (int64_t b = 0; b < R->Bm; b++)
            for (int64_t h = 0; h < R->Hm; h++)
                for (int64_t qb = 0; qb < R->QB; qb++) {
                    int64_t num = table_int(R, t, b * sn[0] + h * sn[1] + qb * sn[2]);
                    num = num < 0 ? 0 : num > f->tab_kb[t + 1] ? f->tab_kb[t + 1] : num;
                    uint8_t *row = R->state + ((b * R->Hm + h) * R->QB + qb) * R->KB;
                    for (int64_t x = 0; x < num; x++) {
                        int64_t kb = table_int(R, t + 1, b * si[0] + h * si[1] + qb * si[2] + x * si[3]);
                        if (kb >= 0 && kb < R->KB)
                            row[kb] = t ? ST_FULL : ST_PARTIAL;
                    }
                }
    }
    return 0;
}

static const uint8_t *state_row(const flex_run *R, int64_t t, int64_t qb)
{
    int64_t b = t / R->f->H, h = t % R->f->H;   /* (a table's Bm / Hm are 1 or B / H) */
    return R->state + (((R->Bm > 1 ? b : 0) * R->Hm + (R->Hm > 1 ? h : 0)) * R->QB + qb) * R->KB;
}

/* The tile's blocks: all of one state, or ST_MIXED. */
static int tile_state(const flex_run *R, int64_t t, int64_t i0, int nq, int64_t j0, int nk)
{
    int s = -1;
    for (int64_t qb = i0 / R->bq; qb <= (i0 + nq - 1) / R->bq; qb++) {
        const uint8_t *row = qb < R->QB ? state_row(R, t, qb) : NULL;
        for (int64_t kb = j0 / R->bk; kb <= (j0 + nk - 1) / R->bk; kb++) {
            int x = row ? row[kb] : ST_EMPTY;
            if (s >= 0 && x != s)
                return ST_MIXED;
            s = x;
        }
    }
    return s;
}

/* Runs tile kernel `which` on the arrays of w for entry t's tile at (i0,
 * j0), reading the scores from `score` and writing a float result to
 * `res` (NULL: w's own arrays; rows TK apart). A kernel reads each score
 * only at the point it writes: the two may be one array. */
static void run_kernel(const flex_run *R, int which, flex_tile *w, int64_t t, int64_t i0, int64_t j0, float *score,
                       float *res)
{
    const plan_flex *f = R->f;
    const plan_kernel_code *c = &R->p->code[f->kern[which]];
    void *small[64], **kb = c->nslots + 3 <= 64 ? small : malloc(sizeof(void *) * (size_t)(c->nslots + 3));
    if (!kb) {
        *R->flag |= PLAN_FLAG_ZERODIV << 8;   /* out of memory: reported as a failed run */
        return;
    }
    w->b = (int32_t)(t / f->H), w->h = (int32_t)(t % f->H);
    for (int r = 0; r < TQ; r++)
        w->qi[r] = (int32_t)(i0 + r < R->L ? i0 + r : R->L - 1);
    for (int k = 0; k < TK; k++)
        w->ki[k] = (int32_t)(j0 + k < R->S ? j0 + k : R->S - 1);
    void *tiles[7] = { score ? score : w->score, &w->b, &w->h, w->qi, w->ki, res ? res : w->res, w->mask };
    for (int32_t i = 0; i < c->nslots; i++) {
        int32_t b = c->slots[i];
        kb[i] = R->bufs[b];
        for (int r = 0; r < 7; r++)
            if (f->tile[r] == b)
                kb[i] = tiles[r];
    }
    kb[c->nslots] = R->flag;
    kb[c->nslots + 1] = NULL;
    kb[c->nslots + 2] = c->params;
    c->fn(kb, 0, c->nitems);
    if (kb != small)
        free(kb);
}

/* Without tables: the states of the kernel's tiles from the mask kernel,
 * rows [begin, end) of (entry, query tile) over its Bm x Hm entries. */
static void classify_range(void *ctx, int64_t begin, int64_t end)
{
    flex_run *R = ctx;
    flex_tile *w = &tls_tile;
    for (int64_t row = begin; row < end; row++) {
        int64_t e = row / R->QB, qt = row % R->QB, b = e / R->Hm, h = e % R->Hm;
        int64_t i0 = qt * TQ;
        int nq = R->L - i0 < TQ ? (int)(R->L - i0) : TQ;
        uint8_t *out = R->state + row * R->KB;
        for (int64_t kt = 0; kt < R->KB; kt++) {
            int64_t j0 = kt * TK;
            int nk = R->S - j0 < TK ? (int)(R->S - j0) : TK, any = 0, all = 1;
            run_kernel(R, PLAN_FLEX_MASK, w, b * R->f->H + h, i0, j0, NULL, NULL);
            for (int r = 0; r < nq; r++) {
                const uint8_t *m = w->mask + r * TK;
                for (int c = 0; c < nk; c++)
                    any |= m[c], all &= m[c];
            }
            out[kt] = !any ? ST_EMPTY : all ? ST_FULL : ST_PARTIAL;
        }
    }
}

static int classify(flex_run *R, int64_t B)
{
    const plan_flex *f = R->f;
    R->Bm = f->mask_b ? B : 1, R->Hm = f->mask_h ? f->H : 1;
    R->bq = TQ, R->bk = TK;
    R->QB = (R->L + TQ - 1) / TQ, R->KB = (R->S + TK - 1) / TK;
    if (!(R->state = malloc((size_t)(R->Bm * R->Hm * R->QB * R->KB) + 1)))
        return -1;
    int64_t rows = R->Bm * R->Hm * R->QB;
    kern_parallel_for(rows, rows >= 64 ? 4 : 1, classify_range, R);
    return 0;
}

static int hook_keep(void *ctx, int64_t t, int64_t i0, int nq, int64_t j0, int nk)
{
    const flex_run *R = ctx;
    return !R->state || tile_state(R, t, i0, nq, j0, nk) != ST_EMPTY;
}

/* The state (ST_*) of the point at row i, key j. */
static int point_state(const flex_run *R, int64_t t, int64_t i, int64_t j)
{
    int64_t qb = i / R->bq;
    return qb < R->QB ? state_row(R, t, qb)[j / R->bk] : ST_EMPTY;
}

static void hook_scores(void *ctx, int64_t t, int64_t i0, int nq, int64_t j0, int nk, float *s, int ld)
{
    const flex_run *R = ctx;
    const plan_flex *f = R->f;
    int has_mask = f->kern[PLAN_FLEX_PART] >= 0;
    int st = R->state ? tile_state(R, t, i0, nq, j0, nk) : ST_FULL;
    if (st == ST_PARTIAL && !has_mask)
        st = ST_FULL;   /* tables without a mask function: a listed block attends whole */
    if (st == ST_FULL && f->kern[PLAN_FLEX_SCORE] < 0)
        return;   /* the scores as they are */
    flex_tile *w = &tls_tile;
    if (st != ST_MIXED && ld == TK) {   /* in place */
        run_kernel(R, st == ST_FULL ? PLAN_FLEX_SCORE : PLAN_FLEX_PART, w, t, i0, j0, s, s);
        return;
    }
    for (int r = 0; r < nq; r++)
        memcpy(w->score + r * TK, s + r * ld, sizeof(float) * (size_t)nk);
    if (st == ST_MIXED) {   /* each point as its block says */
        if (f->kern[PLAN_FLEX_SCORE] >= 0) {
            run_kernel(R, PLAN_FLEX_SCORE, w, t, i0, j0, NULL, NULL);
            memcpy(w->aux, w->res, sizeof w->aux);
        } else {
            memcpy(w->aux, w->score, sizeof w->aux);
        }
        if (has_mask)
            run_kernel(R, PLAN_FLEX_PART, w, t, i0, j0, NULL, NULL);
        for (int r = 0; r < nq; r++)
            for (int c = 0; c < nk; c++) {
                int x = point_state(R, t, i0 + r, j0 + c);
                s[r * ld + c] = x == ST_EMPTY ? -INFINITY
                                : x == ST_FULL || !has_mask ? w->aux[r * TK + c] : w->res[r * TK + c];
            }
    } else {
        run_kernel(R, st == ST_FULL ? PLAN_FLEX_SCORE : PLAN_FLEX_PART, w, t, i0, j0, NULL, NULL);
        for (int r = 0; r < nq; r++)
            memcpy(s + r * ld, w->res + r * TK, sizeof(float) * (size_t)nk);
    }
}

static void hook_grads(void *ctx, int64_t t, int64_t i0, int nq, int64_t j0, int nk, const float *raw, float *ds,
                       int ld)
{
    const flex_run *R = ctx;
    flex_tile *w = &tls_tile;
    if (ld == TK) {
        run_kernel(R, PLAN_FLEX_DSCORE, w, t, i0, j0, (float *)raw, NULL);
    } else {
        for (int r = 0; r < nq; r++)
            memcpy(w->score + r * TK, raw + r * ld, sizeof(float) * (size_t)nk);
        run_kernel(R, PLAN_FLEX_DSCORE, w, t, i0, j0, NULL, NULL);
    }
    for (int r = 0; r < nq; r++)
        for (int c = 0; c < nk; c++) {
            float *x = &ds[r * ld + c];
            *x = *x == 0 ? 0 : *x * w->res[r * TK + c];   /* a key not attended: 0, whatever the derivative */
        }
}

int plan_run_flex(const smelt_plan *p, const plan_step *s, void **bufs, char *err, size_t errlen)
{
    const plan_sdpa *a = s->attn;
    const plan_flex *f = &a->fx;
    for (int k = 0; k < PLAN_FLEX_NKERN; k++)
        if (f->kern[k] >= 0 && !p->code[f->kern[k]].fn)
            return snprintf(err, errlen, "flex_attention: its score functions run on the CPU back end only"), -1;
    int32_t flag = 0;
    flex_run R = { .p = p, .f = f, .bufs = bufs, .L = a->d.L, .S = a->d.S, .flag = &flag };
    if ((f->tab_buf[0] >= 0 ? build_states(&R) : f->kern[PLAN_FLEX_MASK] >= 0 ? classify(&R, a->d.bdims[0]) : 0))
        return snprintf(err, errlen, "out of memory"), -1;
    kern_sdpa_hook hook = { .keep = hook_keep, .scores = hook_scores,
                            .grads = f->kern[PLAN_FLEX_DSCORE] >= 0 ? hook_grads : NULL, .ctx = &R };
    const float *src[5];
    for (int k = 0; k < a->nin; k++)
        src[k] = (const float *)bufs[a->buf[k]] + a->off[k];
    float *out = bufs[a->buf[PLAN_SDPA_OUT]];
    int rc;
    if (!a->mode) {
        kern_sdpa_extra x = { .hook = &hook, .out_row = a->d.Ev + 1, .lse = out + a->d.Ev, .lse_row = a->d.Ev + 1 };
        rc = kern_sdpa_ex(&a->d, &x, src[0], src[1], src[2], NULL, out, err, errlen);
    } else {
        kern_sdpa_extra x = { .hook = &hook, .dlse = src[4] + a->d.Ev * a->d.g.col, .dlse_op = a->d.g };
        int64_t batch = a->d.bdims[0] * a->d.bdims[1] * a->d.bdims[2];
        float *dk = out + batch * a->d.L * a->d.E, *dv = dk + batch * a->d.S * a->d.E;
        rc = kern_sdpa_backward_ex(&a->d, &x, src[0], src[1], src[2], NULL, src[3], src[4], out, dk, dv, err,
                                   errlen);
    }
    free(R.state);
    if (rc)
        return rc;
    if (flag & (PLAN_FLAG_ZERODIV << 8))
        return snprintf(err, errlen, "out of memory"), -1;
    if (flag & PLAN_FLAG_INDEX)
        return snprintf(err, errlen, "index out of range"), -2;
    if (flag)
        return snprintf(err, errlen, "ZeroDivisionError: integer division by zero"), -1;
    return 0;
}

void plan_flex_bufs(const smelt_plan *p, const plan_step *s, int32_t step, void (*fn)(int32_t, int32_t, void *),
                    void *ctx)
{
    const plan_flex *f = &s->attn->fx;
    for (int t = 0; t < 4; t++)
        if (f->tab_buf[t] >= 0)
            fn(f->tab_buf[t], step, ctx);
    for (int k = 0; k < PLAN_FLEX_NKERN; k++)
        for (int32_t i = 0; f->kern[k] >= 0 && i < p->code[f->kern[k]].nslots; i++)
            fn(p->code[f->kern[k]].slots[i], step, ctx);
}
