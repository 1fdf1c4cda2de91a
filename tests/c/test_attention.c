/* Standalone tests for kernels/attention.c: kern_sdpa (forward) and
 * kern_sdpa_backward against a naive reference in double precision.
 *
 * Build (tests/test_kernels_c.py does this):
 *   gcc -std=c11 -Wall -Wextra -Werror -O1 -I. tests/c/test_attention.c \
 *       kernels/threadpool.c kernels/attention.c -lsleef -lpthread -lm
 * With -DKERN_SDPA_FORCE_PORTABLE=1 (here and for attention.c) the scalar
 * steps are checked instead of the AVX-512 ones. Cases: sizes around the
 * 32-row / 64-key blocks, causal with L != S, bool and additive masks
 * broadcast over batch and rows (fully masked rows included), k and v
 * broadcast over heads, transposed operands, 1 to 3 threads (fewer
 * entries than threads: key chunks with dq partials), empty dims.
 * `test_attention bench [reps]` times GPT-2 bench sizes instead.
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

static int run_case(const at_case *t)
{
    int before = g_fail;
    int64_t B = t->B, H = t->H, L = t->L, S = t->S, E = t->E, Ev = t->Ev, kvH = t->kv_bcast ? 1 : H;
    opnd q, k, v, g;
    make(&q, t, H, L, E, t->trans);
    make(&k, t, kvH, S, E, t->trans);
    make(&v, t, kvH, S, Ev, 0);
    make(&g, t, H, L, Ev, t->trans);
    int64_t mH = t->mask_b ? 1 : H, mL = t->mask_rows ? 1 : L;
    size_t mn = (size_t)(B * mH * mL * S);
    uint8_t *mb = calloc(mn + 1, 1);
    float *ma = calloc(mn + 1, sizeof(float));
    for (size_t i = 0; i < mn; i++) {
        mb[i] = rnd() % 4 != 0;
        ma[i] = rnd() % 5 == 0 ? -INFINITY : rnd_f();
    }
    if (t->dead && !t->mask_rows)   /* row 1 of each (b, h) masked whole */
        for (int64_t x = 0; x < B * mH; x++)
            for (int64_t j = 0; L > 1 && j < S; j++)
                mb[(x * mL + 1) * S + j] = 0, ma[(x * mL + 1) * S + j] = t->dead_add ? t->dead_add : -INFINITY;
    kern_sdpa_desc d = { .nb = 2, .bdims = { B, H }, .L = L, .S = S, .E = E, .Ev = Ev, .scale = t->scale,
                         .causal = t->causal, .q = q.o, .k = k.o, .v = v.o, .g = g.o };
    d.mask_kind = t->mask == 0 ? KERN_SDPA_NO_MASK : t->mask == 1 ? KERN_SDPA_BOOL_MASK : KERN_SDPA_ADD_MASK;
    d.mask.bstride[0] = mH * mL * S, d.mask.bstride[1] = mH == 1 ? 0 : mL * S;
    d.mask.row = mL == 1 ? 0 : S, d.mask.col = 1;
    const void *mask = t->mask == 1 ? (const void *)mb : (const void *)ma;
    size_t nq = (size_t)(B * H * L * E), nk = (size_t)(B * H * S * E), nv = (size_t)(B * H * S * Ev);
    size_t no = (size_t)(B * H * L * Ev);
    float *out = malloc(sizeof(float) * (no + 1)), *dq = malloc(sizeof(float) * (nq + 1));
    float *dk = malloc(sizeof(float) * (nk + 1)), *dv = malloc(sizeof(float) * (nv + 1));
    d.o.bstride[0] = H * L * Ev, d.o.bstride[1] = L * Ev, d.o.row = Ev, d.o.col = 1;
    kern_set_num_threads(t->threads);
    char err[200] = "";
    int rc = kern_sdpa(&d, q.p, k.p, v.p, t->mask ? mask : NULL, out, err, sizeof err);
    CHECK(rc == 0, "forward failed: %s", err);
    rc = kern_sdpa_backward(&d, q.p, k.p, v.p, t->mask ? mask : NULL, out, g.p, dq, dk, dv, err, sizeof err);
    CHECK(rc == 0, "backward failed: %s", err);
    double *s = malloc(sizeof(double) * (size_t)(L * S + 1)), *dp = malloc(sizeof(double) * (size_t)(L * S + 1));
    double worst[4] = { 0 }, big[4] = { 1, 1, 1, 1 };   /* out, dq, dk, dv: error and magnitude */
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
                for (int64_t j = 0; j < S; j++)
                    s[i * S + j] = sum > 0 ? s[i * S + j] / sum : 0;
                double D = 0;
                for (int64_t e = 0; e < Ev; e++) {
                    double x = 0;
                    for (int64_t j = 0; j < S; j++)
                        x += s[i * S + j] * at(&v, b, h, j, e);
                    double got = out[((b * H + h) * L + i) * Ev + e];
                    worst[0] = fmax(worst[0], fabs(got - x)), big[0] = fmax(big[0], fabs(x));
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
                    worst[1] = fmax(worst[1], fabs(got - x)), big[1] = fmax(big[1], fabs(x));
                }
            for (int64_t j = 0; j < S; j++) {
                for (int64_t e = 0; e < E; e++) {
                    double x = 0;
                    for (int64_t i = 0; i < L; i++)
                        x += dp[i * S + j] * at(&q, b, h, i, e);
                    x *= t->scale;
                    double got = dk[((b * H + h) * S + j) * E + e];
                    worst[2] = fmax(worst[2], fabs(got - x)), big[2] = fmax(big[2], fabs(x));
                }
                for (int64_t e = 0; e < Ev; e++) {
                    double x = 0;
                    for (int64_t i = 0; i < L; i++)
                        x += s[i * S + j] * at(&g, b, h, i, e);
                    double got = dv[((b * H + h) * S + j) * Ev + e];
                    worst[3] = fmax(worst[3], fabs(got - x)), big[3] = fmax(big[3], fabs(x));
                }
            }
        }
    static const char *names[4] = { "out", "dq", "dk", "dv" };
    for (int x = 0; x < 4; x++)
        CHECK(worst[x] <= 2e-5 * big[x] && !isnan(worst[x]), "%s: error %g (of %g)", names[x], worst[x], big[x]);
    if (g_fail != before)
        printf("  case B %lld H %lld L %lld S %lld E %lld Ev %lld causal %d mask %d rows %d mb %d kvb %d trans %d "
               "dead %d threads %d\n", (long long)B, (long long)H, (long long)L, (long long)S, (long long)E,
               (long long)Ev, t->causal, t->mask, t->mask_rows, t->mask_b, t->kv_bcast, t->trans, t->dead,
               t->threads);
    free(q.p), free(k.p), free(v.p), free(g.p), free(mb), free(ma), free(out), free(dq), free(dk), free(dv);
    free(s), free(dp);
    return g_fail == before;
}

static void bench(int reps)
{
    at_case t = { .B = 4, .H = 8, .L = 256, .S = 256, .E = 64, .Ev = 64, .scale = 0.125f, .threads = 2 };
    opnd q, k, v, g;
    make(&q, &t, 8, 256, 64, 0), make(&k, &t, 8, 256, 64, 0), make(&v, &t, 8, 256, 64, 0);
    make(&g, &t, 8, 256, 64, 0);
    size_t n = (size_t)(4 * 8 * 256 * 64);
    float *out = malloc(n * 4), *dq = malloc(n * 4), *dk = malloc(n * 4), *dv = malloc(n * 4);
    kern_set_num_threads(2);
    char err[200];
    for (int causal = 0; causal < 2; causal++) {
        kern_sdpa_desc d = { .nb = 2, .bdims = { 4, 8 }, .L = 256, .S = 256, .E = 64, .Ev = 64, .scale = 0.125f,
                             .causal = causal, .q = q.o, .k = k.o, .v = v.o, .o = g.o, .g = g.o };
        double best_f = 1e9, best_b = 1e9;
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            kern_sdpa(&d, q.p, k.p, v.p, NULL, out, err, sizeof err);
            double t1 = now_s();
            kern_sdpa_backward(&d, q.p, k.p, v.p, NULL, out, g.p, dq, dk, dv, err, sizeof err);
            double t2 = now_s();
            best_f = fmin(best_f, t1 - t0), best_b = fmin(best_b, t2 - t1);
        }
        printf("B 4 H 8 L 256 S 256 E 64%s: forward %.2f ms, backward %.2f ms\n", causal ? " causal" : "",
               best_f * 1e3, best_b * 1e3);
    }
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
    };
    int n = 0;
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
        for (int causal = 0; causal < 2; causal++)
            for (int threads = 1; threads <= 3; threads += 2) {
                const int64_t *s = sizes[z];
                at_case t = { s[0], s[1], s[2], s[3], s[4], s[5], .causal = causal, .threads = threads,
                              .trans = (int)(z % 2), .kv_bcast = z % 3 == 1, .scale = 1.0f / sqrtf((float)s[4]) };
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
