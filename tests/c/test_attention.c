/* Standalone tests for kernels/attention.c: kern_sdpa (forward) and
 * kern_sdpa_backward against a naive reference in double precision.
 *
 * Build (tests/test_kernels_c.py does this):
 *   gcc -std=c11 -Wall -Wextra -Werror -O1 -I. tests/c/test_attention.c \
 *       kernels/threadpool.c kernels/attention.c -lpthread -lm
 * With -DKERN_SDPA_FORCE_PORTABLE=1 (here and for attention.c) the scalar
 * steps are checked instead of the AVX-512 ones. Cases: sizes around the
 * 32-row / 64-key blocks and the 16-column vectors (head dims 16, 32, 48;
 * ViT's 65 and 197 tokens), causal with L != S, bool and additive masks
 * broadcast over batch and rows (fully masked rows included), k and v
 * broadcast over heads, transposed operands (v's columns strided too),
 * scores far apart (the softmax's reference max moves within rows), the
 * score hook (its tile contract, out_row, lse), 1 to 3 threads (fewer
 * entries than threads: key chunks with dq partials), empty dims.
 * `test_attention bench [reps]` times GPT-2 and ViT sizes instead.
 * Prints one line per failure and "N passed, M failed"; exits non-zero on
 * any failure.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/threadpool.h"
#include "tests/c/testutil.h"

static float rnd_f(void)
{
    return (float)((double)(int64_t)(rnd() % 4096 - 2048) / 1024.0);
}

typedef struct at_case {
    int64_t B, H, L, S, E, Ev;
    int causal;
    int mask;        /* 0 none, 1 bool, 2 additive */
    int mask_rows;   /* mask broadcast over rows ([.., 1, S]) */
    int mask_b;      /* mask broadcast over heads */
    int kv_bcast;    /* k and v broadcast over heads */
    int trans;       /* q, k and g stored transposed (column stride > 1) */
    int vtrans;      /* v stored transposed */
    int hook;        /* an additive mask (mask 2, not causal) given through the score hook, out rows Ev + 1
                        apart, lse checked */
    int ramp;        /* additive mask 2 (j - S + 1) (ALiBi-like): a row's scores rise by about 128 a tile of
                        keys, exp of their spread overflows: the softmax's reference max moves in every tile */
    int dead;        /* some rows fully masked */
    float dead_add;  /* what an additive mask puts there: -inf, or 0 for -inf; a large finite value
                        (-1e9, -FLT_MAX) leaves the row's scores equal: uniform probabilities */
    int threads;
    float scale;
} at_case;

/* An operand [B, H, R, C] (H broadcast when bh = 0) stored row-major or
 * transposed within each (b, h): element (b, h, r, c). */
typedef struct opnd {
    float *p;
    kern_sdpa_operand o;
    int64_t H, R, C;
} opnd;

static void make(opnd *x, const at_case *t, int64_t H, int64_t R, int64_t C, int trans)
{
    x->H = H, x->R = R, x->C = C;
    size_t n = (size_t)(t->B * H * R * C);
    x->p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        x->p[i] = rnd_f();
    x->o.bstride[0] = H * R * C;
    x->o.bstride[1] = H == 1 ? 0 : R * C;
    x->o.row = trans ? 1 : C;
    x->o.col = trans ? R : 1;
}

static double at(const opnd *x, int64_t b, int64_t h, int64_t r, int64_t c)
{
    return x->p[b * x->o.bstride[0] + (x->H == 1 ? 0 : h) * x->o.bstride[1] + r * x->o.row + c * x->o.col];
}

/* The score hook of a hook case: adds the additive mask ma ([B, mH, mL,
 * S], broadcast as in run_case) to each tile, keeps the tiles not wholly
 * -inf, and counts tiles outside kern_sdpa_hook's contract. */
typedef struct hook_ctx {
    const float *ma;
    int64_t H, mH, mL, L, S;
    _Atomic int bad;
} hook_ctx;

static const float *hook_row(const hook_ctx *c, int64_t t, int64_t i)
{
    int64_t b = t / c->H, h = t % c->H;
    return c->ma + ((b * c->mH + (c->mH == 1 ? 0 : h)) * c->mL + (c->mL == 1 ? 0 : i)) * c->S;
}

static int tile_ok(hook_ctx *c, int64_t i0, int nq, int64_t j0, int nk, int ld)
{
    int ok = nq >= 1 && nq <= KERN_SDPA_TILE_Q && nk >= 1 && nk <= KERN_SDPA_TILE_K && i0 >= 0 && j0 >= 0 &&
             i0 + nq <= c->L && j0 + nk <= c->S && ld == KERN_SDPA_TILE_K;
    if (!ok)
        c->bad++;
    return ok;
}

static int hook_keep(void *ctx, int64_t t, int64_t i0, int nq, int64_t j0, int nk)
{
    hook_ctx *c = ctx;
    if (!tile_ok(c, i0, nq, j0, nk, KERN_SDPA_TILE_K))
        return 1;
    for (int r = 0; r < nq; r++)
        for (int j = 0; j < nk; j++)
            if (hook_row(c, t, i0 + r)[j0 + j] != -INFINITY)
                return 1;
    return 0;
}

static void hook_scores(void *ctx, int64_t t, int64_t i0, int nq, int64_t j0, int nk, float *s, int ld)
{
    hook_ctx *c = ctx;
    if (!tile_ok(c, i0, nq, j0, nk, ld))
        return;
    for (int r = 0; r < nq; r++)
        for (int j = 0; j < nk; j++)
            s[r * ld + j] += hook_row(c, t, i0 + r)[j0 + j];
}

/* |got - want|, infinite where got is NaN (fmax would drop a NaN). */
static double err_of(double got, double want)
{
    double e = fabs(got - want);
    return e == e ? e : INFINITY;
}

static int run_case(const at_case *t)
{
    int before = g_fail;
    int64_t B = t->B, H = t->H, L = t->L, S = t->S, E = t->E, Ev = t->Ev, kvH = t->kv_bcast ? 1 : H;
    opnd q, k, v, g;
    make(&q, t, H, L, E, t->trans);
    make(&k, t, kvH, S, E, t->trans);
    make(&v, t, kvH, S, Ev, t->vtrans);
    make(&g, t, H, L, Ev, t->trans);
    int64_t mH = t->mask_b ? 1 : H, mL = t->mask_rows ? 1 : L;
    size_t mn = (size_t)(B * mH * mL * S);
    uint8_t *mb = calloc(mn + 1, 1);
    float *ma = calloc(mn + 1, sizeof(float));
    for (size_t i = 0; i < mn; i++) {
        mb[i] = rnd() % 4 != 0;
        ma[i] = t->ramp ? -2.0f * (float)(S - 1 - (int64_t)i % S) : rnd() % 5 == 0 ? -INFINITY : rnd_f();
    }
    if (t->dead && !t->mask_rows)   /* row 1 of each (b, h) masked whole */
        for (int64_t x = 0; x < B * mH; x++)
            for (int64_t j = 0; L > 1 && j < S; j++)
                mb[(x * mL + 1) * S + j] = 0, ma[(x * mL + 1) * S + j] = t->dead_add ? t->dead_add : -INFINITY;
    kern_sdpa_desc d = { .nb = 2, .bdims = { B, H }, .L = L, .S = S, .E = E, .Ev = Ev, .scale = t->scale,
                         .causal = t->causal, .q = q.o, .k = k.o, .v = v.o, .g = g.o };
    d.mask_kind = t->mask == 0 || t->hook ? KERN_SDPA_NO_MASK
                  : t->mask == 1           ? KERN_SDPA_BOOL_MASK
                                           : KERN_SDPA_ADD_MASK;
    d.mask.bstride[0] = mH * mL * S, d.mask.bstride[1] = mH == 1 ? 0 : mL * S;
    d.mask.row = mL == 1 ? 0 : S, d.mask.col = 1;
    const void *mask = t->mask == 1 ? (const void *)mb : (const void *)ma;
    size_t nq = (size_t)(B * H * L * E), nk = (size_t)(B * H * S * E), nv = (size_t)(B * H * S * Ev);
    int64_t orow = t->hook ? Ev + 1 : Ev;   /* the hook case's out rows, lse in the column past them */
    size_t no = (size_t)(B * H * L * orow);
    float *out = malloc(sizeof(float) * (no + 1)), *dq = malloc(sizeof(float) * (nq + 1));
    float *dk = malloc(sizeof(float) * (nk + 1)), *dv = malloc(sizeof(float) * (nv + 1));
    d.o.bstride[0] = H * L * orow, d.o.bstride[1] = L * orow, d.o.row = orow, d.o.col = 1;
    hook_ctx hc = { .ma = ma, .H = H, .mH = mH, .mL = mL, .L = L, .S = S };
    kern_sdpa_hook hook = { .keep = hook_keep, .scores = hook_scores, .ctx = &hc };
    kern_sdpa_extra x = { 0 };
    if (t->hook)
        x = (kern_sdpa_extra){ .hook = &hook, .out_row = orow, .lse = out + Ev, .lse_row = orow };
    kern_set_num_threads(t->threads);
    char err[200] = "";
    const void *m = t->mask && !t->hook ? mask : NULL;
    int rc = t->hook ? kern_sdpa_ex(&d, &x, q.p, k.p, v.p, m, out, err, sizeof err)
                     : kern_sdpa(&d, q.p, k.p, v.p, m, out, err, sizeof err);
    CHECK(rc == 0, "forward failed: %s", err);
    x.lse = NULL;
    rc = t->hook ? kern_sdpa_backward_ex(&d, &x, q.p, k.p, v.p, m, out, g.p, dq, dk, dv, err, sizeof err)
                 : kern_sdpa_backward(&d, q.p, k.p, v.p, m, out, g.p, dq, dk, dv, err, sizeof err);
    CHECK(rc == 0, "backward failed: %s", err);
    CHECK(hc.bad == 0, "%d hook calls outside the tile contract", (int)hc.bad);
    double *s = malloc(sizeof(double) * (size_t)(L * S + 1)), *dp = malloc(sizeof(double) * (size_t)(L * S + 1));
    double worst[5] = { 0 }, big[5] = { 1, 1, 1, 1, 1 };   /* out, dq, dk, dv, lse: error and magnitude */
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            for (int64_t i = 0; i < L; i++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < S; j++) {
                    double x = 0;
                    for (int64_t e = 0; e < E; e++)
                        x += at(&q, b, h, i, e) * at(&k, b, h, j, e);
                    x *= t->scale;
                    int64_t mi = ((b * mH + (mH == 1 ? 0 : h)) * mL + (mL == 1 ? 0 : i)) * S + j;
                    if ((t->causal && j > i) || (t->mask == 1 && !mb[mi]))
                        x = -INFINITY;
                    else if (t->mask == 2)   /* as the kernel adds it: in float */
                        x = (double)((float)x + ma[mi]);
                    s[i * S + j] = x;
                    mx = x > mx ? x : mx;
                }
                for (int64_t j = 0; j < S; j++)
                    sum += (s[i * S + j] = mx == -INFINITY ? 0 : exp(s[i * S + j] - mx));
                if (t->hook) {
                    double lse = mx + log(sum), got = out[((b * H + h) * L + i) * orow + Ev];
                    int same = lse == -INFINITY ? got == -INFINITY : fabs(got - lse) <= 2e-5 * fmax(1, fabs(lse));
                    worst[4] = fmax(worst[4], same ? 0 : INFINITY);
                }
                for (int64_t j = 0; j < S; j++)
                    s[i * S + j] = sum > 0 ? s[i * S + j] / sum : 0;
                double D = 0;
                for (int64_t e = 0; e < Ev; e++) {
                    double x = 0;
                    for (int64_t j = 0; j < S; j++)
                        x += s[i * S + j] * at(&v, b, h, j, e);
                    double got = out[((b * H + h) * L + i) * orow + e];
                    worst[0] = fmax(worst[0], err_of(got, x)), big[0] = fmax(big[0], fabs(x));
                }
                for (int64_t j = 0; j < S; j++) {
                    double x = 0;
                    for (int64_t e = 0; e < Ev; e++)
                        x += at(&g, b, h, i, e) * at(&v, b, h, j, e);
                    dp[i * S + j] = x;
                    D += s[i * S + j] * x;
                }
                for (int64_t j = 0; j < S; j++)
                    dp[i * S + j] = s[i * S + j] * (dp[i * S + j] - D);   /* ds */
            }
            for (int64_t i = 0; i < L; i++)
                for (int64_t e = 0; e < E; e++) {
                    double x = 0;
                    for (int64_t j = 0; j < S; j++)
                        x += dp[i * S + j] * at(&k, b, h, j, e);
                    x *= t->scale;
                    double got = dq[((b * H + h) * L + i) * E + e];
                    worst[1] = fmax(worst[1], err_of(got, x)), big[1] = fmax(big[1], fabs(x));
                }
            for (int64_t j = 0; j < S; j++) {
                for (int64_t e = 0; e < E; e++) {
                    double x = 0;
                    for (int64_t i = 0; i < L; i++)
                        x += dp[i * S + j] * at(&q, b, h, i, e);
                    x *= t->scale;
                    double got = dk[((b * H + h) * S + j) * E + e];
                    worst[2] = fmax(worst[2], err_of(got, x)), big[2] = fmax(big[2], fabs(x));
                }
                for (int64_t e = 0; e < Ev; e++) {
                    double x = 0;
                    for (int64_t i = 0; i < L; i++)
                        x += s[i * S + j] * at(&g, b, h, i, e);
                    double got = dv[((b * H + h) * S + j) * Ev + e];
                    worst[3] = fmax(worst[3], err_of(got, x)), big[3] = fmax(big[3], fabs(x));
                }
            }
        }
    static const char *names[5] = { "out", "dq", "dk", "dv", "lse" };
    for (int x = 0; x < 5; x++)
        CHECK(worst[x] <= 2e-5 * big[x] && !isnan(worst[x]), "%s: error %g (of %g)", names[x], worst[x], big[x]);
    if (g_fail != before)
        printf("  case B %lld H %lld L %lld S %lld E %lld Ev %lld causal %d mask %d rows %d mb %d kvb %d trans %d "
               "vtrans %d hook %d dead %d threads %d scale %g\n", (long long)B, (long long)H, (long long)L,
               (long long)S, (long long)E, (long long)Ev, t->causal, t->mask, t->mask_rows, t->mask_b, t->kv_bcast,
               t->trans, t->vtrans, t->hook, t->dead, t->threads, t->scale);
    free(q.p), free(k.p), free(v.p), free(g.p), free(mb), free(ma), free(out), free(dq), free(dk), free(dv);
    free(s), free(dp);
    return g_fail == before;
}

/* Best of reps forward and backward calls on 2 threads, q k v [B, H, L, E]. */
static void bench_one(int64_t B, int64_t H, int64_t L, int64_t E, int causal, int reps)
{
    at_case t = { .B = B, .H = H, .L = L, .S = L, .E = E, .Ev = E, .threads = 2 };
    opnd q, k, v, g;
    make(&q, &t, H, L, E, 0), make(&k, &t, H, L, E, 0), make(&v, &t, H, L, E, 0), make(&g, &t, H, L, E, 0);
    size_t n = (size_t)(B * H * L * E);
    float *out = malloc(n * 4), *dq = malloc(n * 4), *dk = malloc(n * 4), *dv = malloc(n * 4);
    kern_sdpa_desc d = { .nb = 2, .bdims = { B, H }, .L = L, .S = L, .E = E, .Ev = E, .scale = 1 / sqrtf((float)E),
                         .causal = causal, .q = q.o, .k = k.o, .v = v.o, .o = g.o, .g = g.o };
    char err[200];
    double best_f = 1e9, best_b = 1e9;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        kern_sdpa(&d, q.p, k.p, v.p, NULL, out, err, sizeof err);
        double t1 = now_s();
        kern_sdpa_backward(&d, q.p, k.p, v.p, NULL, out, g.p, dq, dk, dv, err, sizeof err);
        double t2 = now_s();
        best_f = fmin(best_f, t1 - t0), best_b = fmin(best_b, t2 - t1);
    }
    printf("B %lld H %lld L %lld S %lld E %lld%s: forward %.2f ms, backward %.2f ms\n", (long long)B, (long long)H,
           (long long)L, (long long)L, (long long)E, causal ? " causal" : "", best_f * 1e3, best_b * 1e3);
    free(q.p), free(k.p), free(v.p), free(g.p), free(out), free(dq), free(dk), free(dv);
}

/* GPT-2's bench sizes, then ViT / DeiT's (197 tokens, width 192). */
static void bench(int reps)
{
    kern_set_num_threads(2);
    for (int causal = 0; causal < 2; causal++)
        bench_one(4, 8, 256, 64, causal, reps);
    for (int64_t E = 16; E <= 64; E *= 2)
        bench_one(8, 192 / E, 197, E, 0, reps);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "bench") == 0) {
        bench(argc > 2 ? atoi(argv[2]) : 20);
        return 0;
    }
    static const int64_t sizes[][6] = {
        { 1, 1, 1, 1, 1, 1 }, { 2, 3, 5, 7, 8, 8 }, { 1, 2, 33, 70, 16, 24 }, { 2, 2, 64, 64, 64, 64 },
        { 1, 1, 129, 131, 17, 3 }, { 2, 1, 1, 200, 64, 80 }, { 1, 2, 97, 31, 40, 65 }, { 1, 1, 200, 150, 8, 8 },
        { 2, 3, 65, 65, 16, 16 }, { 1, 2, 197, 197, 32, 32 }, { 1, 2, 70, 81, 48, 48 }, { 2, 1, 5, 130, 16, 32 },
    };
    int n = 0;
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
        for (int causal = 0; causal < 2; causal++)
            for (int threads = 1; threads <= 3; threads += 2) {
                const int64_t *s = sizes[z];
                at_case t = { s[0], s[1], s[2], s[3], s[4], s[5], .causal = causal, .threads = threads,
                              .trans = (int)(z % 2), .vtrans = (int)(z / 2 % 2), .kv_bcast = z % 3 == 1,
                              .scale = 1.0f / sqrtf((float)s[4]) };
                n += run_case(&t);
            }
    for (int variant = 0; variant < 3; variant++) {   /* the ramp: plain, causal, through the hook */
        at_case t = { 1, 2, variant == 1 ? 150 : 100, 150, 16, 16, .mask = 2, .ramp = 1, .causal = variant == 1,
                      .hook = variant == 2, .threads = 2, .scale = 0.25f };
        n += run_case(&t);
    }
    for (int mask = 1; mask <= 2; mask++)
        for (int variant = 0; variant < 4; variant++) {
            at_case t = { 2, 3, 37, 45, 16, 9, .mask = mask, .threads = 1 + variant % 3, .scale = 0.3f,
                          .mask_rows = variant == 1, .mask_b = variant == 2, .dead = variant != 1,
                          .trans = variant == 3 };
            n += run_case(&t);
            at_case u = { 1, 1, 150, 260, 32, 32, .mask = mask, .threads = 3, .scale = 0.2f, .dead = 1,
                          .mask_b = variant % 2, .kv_bcast = variant >= 2 };
            n += run_case(&u);
            if (mask == 2) {   /* the mask through the hook */
                at_case th = t, uh = u;
                th.hook = uh.hook = 1;
                n += run_case(&th) + run_case(&uh);
            }
            if (mask == 2 && variant < 2) {   /* rows masked by a large finite value */
                u.dead_add = variant ? -FLT_MAX : -1e9f;
                n += run_case(&u);
                t.dead_add = u.dead_add;
                n += run_case(&t);
            }
        }
    static const int64_t empty[][6] = { { 0, 2, 5, 5, 4, 4 }, { 1, 2, 0, 5, 4, 4 }, { 1, 2, 5, 0, 4, 4 },
                                        { 1, 2, 5, 5, 4, 0 } };
    for (size_t z = 0; z < sizeof empty / sizeof empty[0]; z++) {
        const int64_t *s = empty[z];
        at_case t = { s[0], s[1], s[2], s[3], s[4], s[5], .threads = 2, .scale = 0.5f };
        n += run_case(&t);
    }
    char err[200] = "";
    kern_sdpa_desc bad = { .nb = 0, .L = 2, .S = 2, .E = 0, .Ev = 2 };
    CHECK(kern_sdpa_backward(&bad, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, err, sizeof err) == -1 &&
          strstr(err, "bad sizes"), "E = 0 accepted: %s", err);
    kern_threadpool_shutdown();
    printf("%d cases; %d passed, %d failed\n", n, g_pass, g_fail);
    return g_fail != 0;
}
