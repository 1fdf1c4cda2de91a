/* Standalone tests for kernels/conv.c (oneDNN convolution and its portable
 * fallback) against a naive direct convolution in double precision.
 *
 * Build (tests/test_kernels_c.py does this):
 *   gcc -std=c11 -Wall -Wextra -Werror -O1 -I. tests/c/test_conv.c \
 *       kernels/threadpool.c kernels/onednn.c kernels/primcache.c kernels/conv.c \
 *       -ldnnl -lpthread -lm
 * Prints one line per failure and "N passed, M failed"; exits non-zero on
 * any failure. Built with -DKERN_CONV_FORCE_PORTABLE=1 (here and for
 * conv.c) it checks the portable loop instead of oneDNN. `test_conv bench
 * [reps]` instead times the bench CNN's layers (batch 32, 3x3, pad 1,
 * channels-last and channels-first x and y).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/conv.h"
#include "kernels/threadpool.h"
#include "tests/c/testutil.h"

#if defined(KERN_CONV_FORCE_PORTABLE) && KERN_CONV_FORCE_PORTABLE
#define PORTABLE 1
#else
#define PORTABLE 0
#endif

static float rnd_f(void)
{
    return (float)((double)(int64_t)(rnd() % 4096 - 2048) / 2048.0);
}

/* Activation layouts (x and y): the order of dims in memory. */
enum {
    A_NCX,      /* contiguous [n, c, *sp] */
    A_NXC,      /* channels-last, dense */
    A_NXC_PAD,  /* channels-last with 3 unused channels per pixel (a channel slice) */
    A_ODD,      /* first spatial dim innermost, then channels, the rest, batch; every
                   stride doubled (a transposed, strided view) */
    A_CNX,      /* batch innermost-but-one: c outermost (a permuted view) */
};

/* Weight layouts. */
enum {
    W_OIX,      /* contiguous [o, c/g, *k] */
    W_XIO,      /* kernel dims outermost, o innermost (a permuted view) */
    W_STEP2,    /* contiguous with every stride doubled */
    W_BCAST,    /* stride 0 along the input channels (an expanded view) */
};

typedef struct cv_case {
    int nsp, bias, xl, yl, wl;
    int64_t n, c, o, g, in[3], k[3], st[3], lo[3], hi[3], dil[3];
    int64_t bstride;    /* 0: 1; -1: 0 (one value broadcast) */
} cv_case;

/* Strides of the nd dims listed innermost first in order, each stride
 * times step, with `pad` extra elements after the innermost dim; returns
 * the elements the storage needs. */
static int64_t order_strides(int nd, const int64_t *dims, const int *order, int64_t step,
                             int64_t pad, int64_t *st)
{
    int64_t s = step;
    for (int i = 0; i < nd; i++) {
        st[order[i]] = s;
        s *= dims[order[i]] + (i == 0 ? pad : 0);
    }
    int64_t need = 1;
    for (int i = 0; i < nd; i++)
        need += dims[i] > 0 ? (dims[i] - 1) * st[i] : 0;
    return need;
}

static int64_t act_strides(int nsp, const int64_t *dims, int lay, int64_t *st)
{
    int nd = nsp + 2, order[5], n = 0;
    switch (lay) {
    case A_NCX:
        for (int i = nd - 1; i >= 0; i--)
            order[n++] = i;
        return order_strides(nd, dims, order, 1, 0, st);
    case A_NXC:
    case A_NXC_PAD:
        order[n++] = 1;
        for (int i = nd - 1; i >= 2; i--)
            order[n++] = i;
        order[n++] = 0;
        return order_strides(nd, dims, order, 1, lay == A_NXC_PAD ? 3 : 0, st);
    case A_ODD:
        order[n++] = 2, order[n++] = 1;
        for (int i = nd - 1; i >= 3; i--)
            order[n++] = i;
        order[n++] = 0;
        return order_strides(nd, dims, order, 2, 0, st);
    default:
        for (int i = nd - 1; i >= 2; i--)
            order[n++] = i;
        order[n++] = 0, order[n++] = 1;
        return order_strides(nd, dims, order, 1, 0, st);
    }
}

static int64_t weight_strides(int nsp, const int64_t *dims, int lay, int64_t *st)
{
    int nd = nsp + 2, order[5], n = 0;
    if (lay == W_XIO) {
        order[n++] = 0, order[n++] = 1;
        for (int i = nd - 1; i >= 2; i--)
            order[n++] = i;
    } else {
        for (int i = nd - 1; i >= 0; i--)
            order[n++] = i;
    }
    int64_t need = order_strides(nd, dims, order, lay == W_STEP2 ? 2 : 1, 0, st);
    if (lay == W_BCAST)
        st[1] = 0;
    return need;
}

/* The contract's output size (the case lists sizes that give >= 1). */
static int64_t out_size(const cv_case *t, int i)
{
    return (t->in[i] + t->lo[i] + t->hi[i] - t->dil[i] * (t->k[i] - 1) - 1) / t->st[i] + 1;
}

/* A case's operands: descriptor, buffers, storage sizes. y starts as a
 * byte pattern that is checked to survive outside the view. */
typedef struct cv_bufs {
    kern_conv_desc d;
    float *x, *w, *b, *y;
    int64_t need[4];
} cv_bufs;

static void setup(const cv_case *t, cv_bufs *o)
{
    kern_conv_desc *d = &o->d;
    memset(o, 0, sizeof *o);
    d->nsp = t->nsp, d->has_bias = t->bias, d->n = t->n, d->c = t->c, d->o = t->o;
    d->groups = t->g;
    int64_t xd[5] = {t->n, t->c}, wd[5] = {t->o, t->c / t->g}, yd[5] = {t->n, t->o};
    for (int i = 0; i < t->nsp; i++) {
        d->in[i] = t->in[i], d->k[i] = t->k[i], d->stride[i] = t->st[i];
        d->pad_lo[i] = t->lo[i], d->pad_hi[i] = t->hi[i], d->dil[i] = t->dil[i];
        d->out[i] = out_size(t, i);
        xd[2 + i] = d->in[i], wd[2 + i] = d->k[i], yd[2 + i] = d->out[i];
    }
    o->need[0] = act_strides(t->nsp, xd, t->xl, d->x_strides);
    o->need[1] = weight_strides(t->nsp, wd, t->wl, d->w_strides);
    o->need[3] = act_strides(t->nsp, yd, t->yl, d->y_strides);
    d->b_stride = t->bstride < 0 ? 0 : t->bstride ? t->bstride : 1;
    o->need[2] = t->o * d->b_stride + 1;
    float **bufs[4] = {&o->x, &o->w, &o->b, &o->y};
    for (int i = 0; i < 4; i++) {
        *bufs[i] = malloc((size_t)o->need[i] * sizeof(float));
        for (int64_t j = 0; i < 3 && j < o->need[i]; j++)
            (*bufs[i])[j] = rnd_f();
    }
    memset(o->y, 0xa5, (size_t)o->need[3] * sizeof(float));
}

static void teardown(cv_bufs *o)
{
    free(o->x), free(o->w), free(o->b), free(o->y);
}

/* Offset of element (i0..i4) with strides st over nd dims. */
static int64_t off5(int nd, const int64_t *st, const int64_t *i)
{
    int64_t r = 0;
    for (int k = 0; k < nd; k++)
        r += i[k] * st[k];
    return r;
}

/* Reference value of y[n, oc, op] in double, and the sum of magnitudes. */
static double ref_elem(const cv_bufs *o, int64_t n, int64_t oc, const int64_t *op, double *mag)
{
    const kern_conv_desc *d = &o->d;
    int nd = d->nsp + 2;
    int64_t cg = d->c / d->groups, og = d->o / d->groups;
    double s = d->has_bias ? o->b[oc * d->b_stride] : 0.0;
    *mag = fabs(s);
    int64_t kk[3] = {1, 1, 1};
    for (int i = 0; i < d->nsp; i++)
        kk[i] = d->k[i];
    for (int64_t c = 0; c < cg; c++)
        for (int64_t a = 0; a < kk[0]; a++)
            for (int64_t b = 0; b < kk[1]; b++)
                for (int64_t e = 0; e < kk[2]; e++) {
                    int64_t ki[3] = {a, b, e}, xi[5] = {n, oc / og * cg + c}, wi[5] = {oc, c};
                    int inside = 1;
                    for (int i = 0; i < d->nsp; i++) {
                        xi[2 + i] = op[i] * d->stride[i] - d->pad_lo[i] + ki[i] * d->dil[i];
                        wi[2 + i] = ki[i];
                        inside &= xi[2 + i] >= 0 && xi[2 + i] < d->in[i];
                    }
                    if (!inside)
                        continue;
                    double p = (double)o->x[off5(nd, d->x_strides, xi)] *
                               (double)o->w[off5(nd, d->w_strides, wi)];
                    s += p, *mag += fabs(p);
                }
    return s;
}

/* Every y element in view against the reference; bytes outside intact. */
static int verify(const cv_bufs *o, char *why, size_t whylen)
{
    const kern_conv_desc *d = &o->d;
    int nd = d->nsp + 2, ok = 1;
    int64_t K = d->c / d->groups, out[3] = {1, 1, 1};
    for (int i = 0; i < d->nsp; i++)
        K *= d->k[i], out[i] = d->out[i];
    unsigned char *seen = calloc((size_t)o->need[3], 1);
    for (int64_t n = 0; n < d->n; n++)
        for (int64_t oc = 0; oc < d->o; oc++)
            for (int64_t a = 0; a < out[0]; a++)
                for (int64_t b = 0; b < out[1]; b++)
                    for (int64_t e = 0; e < out[2]; e++) {
                        int64_t op[3] = {a, b, e}, yi[5] = {n, oc, a, b, e};
                        double m, want = ref_elem(o, n, oc, op, &m);
                        int64_t at = off5(nd, d->y_strides, yi);
                        double got = o->y[at];
                        seen[at] = 1;
                        if (!(fabs(got - want) <= (double)(K + 2) * 0x1p-23 * m + 1e-30)) {
                            if (ok)
                                snprintf(why, whylen, "y[%lld,%lld,%lld,%lld,%lld] = %g, want %g",
                                         (long long)n, (long long)oc, (long long)a, (long long)b,
                                         (long long)e, got, want);
                            ok = 0;
                        }
                    }
    uint32_t pat;
    memset(&pat, 0xa5, sizeof pat);
    for (int64_t i = 0; i < o->need[3]; i++)
        if (!seen[i] && memcmp(&o->y[i], &pat, sizeof pat) != 0) {
            if (ok)
                snprintf(why, whylen, "element %lld outside the view was written", (long long)i);
            ok = 0;
        }
    free(seen);
    return ok;
}

static void describe(const cv_case *t, char *buf, size_t len)
{
    snprintf(buf, len, "%dd n=%lld c=%lld o=%lld g=%lld in=%lldx%lldx%lld k=%lldx%lldx%lld "
             "st=%lld lo=%lld hi=%lld dil=%lld bias=%d/%lld lay x%d y%d w%d",
             t->nsp, (long long)t->n, (long long)t->c, (long long)t->o, (long long)t->g,
             (long long)t->in[0], (long long)t->in[1], (long long)t->in[2], (long long)t->k[0],
             (long long)t->k[1], (long long)t->k[2], (long long)t->st[0], (long long)t->lo[0],
             (long long)t->hi[0], (long long)t->dil[0], t->bias, (long long)t->bstride, t->xl,
             t->yl, t->wl);
}

static void run_case(const cv_case *t)
{
    cv_bufs o;
    char err[256] = "", why[256] = "", what[320];
    setup(t, &o);
    describe(t, what, sizeof what);
    int rc = kern_conv(&o.d, o.x, o.w, o.b, o.y, err, sizeof err);
    CHECK(rc == 0, "%s: rc %d (%s)", what, rc, err);
    if (rc == 0)
        CHECK(verify(&o, why, sizeof why), "%s: %s", what, why);
    teardown(&o);
}

/* A case with the same size, stride, padding and dilation in every
 * spatial dim (sp sizes: in, in+1, in+2 so the dims differ). */
static cv_case mk(int nsp, int64_t n, int64_t c, int64_t o, int64_t g, int64_t in, int64_t k,
                  int64_t st, int64_t lo, int64_t hi, int64_t dil, int bias)
{
    cv_case t = {.nsp = nsp, .bias = bias, .n = n, .c = c, .o = o, .g = g};
    for (int i = 0; i < 3; i++) {
        t.in[i] = i < nsp ? in + i : 0, t.k[i] = i < nsp ? k : 0;
        t.st[i] = i < nsp ? st : 0, t.lo[i] = i < nsp ? lo : 0, t.hi[i] = i < nsp ? hi : 0;
        t.dil[i] = i < nsp ? dil : 0;
    }
    return t;
}

/* The shapes every layout combination runs on. */
static const cv_case *base_cases(int *count)
{
    static cv_case c[32];
    int n = 0;
    c[n++] = mk(2, 2, 3, 5, 1, 7, 3, 1, 1, 1, 1, 1);        /* 3x3 pad 1 */
    c[n++] = mk(2, 3, 5, 17, 1, 11, 3, 2, 1, 2, 1, 0);      /* stride 2, asymmetric pad */
    c[n++] = mk(2, 2, 17, 13, 1, 9, 3, 1, 2, 2, 2, 1);      /* dilation 2 */
    c[n++] = mk(2, 3, 6, 10, 2, 8, 3, 1, 1, 1, 1, 1);       /* groups 2 */
    c[n++] = mk(2, 2, 17, 17, 17, 9, 3, 2, 1, 1, 1, 1);     /* depthwise */
    c[n++] = mk(2, 1, 16, 32, 16, 7, 3, 1, 1, 1, 1, 0);     /* depthwise, multiplier 2 */
    c[n++] = mk(1, 3, 5, 7, 1, 31, 5, 2, 3, 0, 2, 1);       /* 1-d */
    c[n++] = mk(1, 1, 3, 4, 1, 13, 3, 1, 0, 0, 1, 0);       /* 1-d, batch 1 */
    c[n++] = mk(3, 2, 3, 5, 1, 5, 3, 1, 1, 1, 1, 1);        /* 3-d */
    c[n++] = mk(3, 1, 4, 6, 2, 6, 2, 2, 0, 1, 1, 0);        /* 3-d, groups, stride 2 */
    c[n++] = mk(2, 1, 1, 1, 1, 5, 1, 1, 0, 0, 1, 1);        /* all 1 */
    c[n++] = mk(2, 5, 32, 64, 1, 13, 1, 1, 0, 0, 1, 1);     /* 1x1 */
    c[n++] = mk(2, 1, 3, 7, 1, 2, 5, 1, 2, 2, 1, 1);        /* kernel larger than input */
    c[n++] = mk(2, 2, 5, 7, 1, 3, 3, 1, 4, 5, 1, 1);        /* padding larger than kernel */
    c[n++] = mk(2, 1, 7, 9, 1, 12, 3, 2, 0, 0, 1, 1);       /* unused trailing rows */
    c[n++] = mk(2, 3, 3, 11, 1, 23, 7, 3, 2, 0, 3, 0);      /* k7 stride 3 dil 3 */
    *count = n;
    return c;
}

static void test_conv_layouts(void)
{
    static const int xy[][2] = {{A_NXC, A_NXC}, {A_NCX, A_NCX}, {A_NCX, A_NXC}, {A_NXC, A_NCX},
                                {A_NXC_PAD, A_NXC}, {A_NXC, A_NXC_PAD}, {A_ODD, A_ODD},
                                {A_CNX, A_NXC}, {A_NXC, A_CNX}};
    int n;
    const cv_case *base = base_cases(&n);
    for (int i = 0; i < n; i++)
        for (size_t l = 0; l < sizeof xy / sizeof *xy; l++) {
            cv_case t = base[i];
            t.xl = xy[l][0], t.yl = xy[l][1], t.wl = (int)((i + l) % 3);
            run_case(&t);
        }
}

static void test_conv_weights_bias(void)
{
    int n;
    const cv_case *base = base_cases(&n);
    for (int i = 0; i < n; i++) {
        cv_case t = base[i];
        t.xl = t.yl = A_NXC;
        t.wl = W_BCAST;
        run_case(&t);
        t.wl = W_XIO, t.bias = 1, t.bstride = 3;
        run_case(&t);
        t.bstride = -1;
        t.xl = A_NCX, t.yl = A_NCX;
        run_case(&t);
    }
    cv_case t = mk(2, 2, 4, 6, 1, 5, 3, 1, 1, 1, 1, 1);
    t.bstride = 1;
    run_case(&t);
}

/* n, o or c of 0, and an input of size 0 made up by padding. */
static void test_conv_empty(void)
{
    cv_case z[] = {mk(2, 0, 3, 5, 1, 7, 3, 1, 1, 1, 1, 1), mk(2, 2, 3, 0, 1, 7, 3, 1, 1, 1, 1, 1),
                   mk(2, 2, 0, 5, 1, 7, 3, 1, 1, 1, 1, 1), mk(2, 2, 0, 4, 2, 7, 3, 1, 1, 1, 1, 0),
                   mk(1, 2, 3, 5, 1, 0, 2, 1, 1, 1, 1, 1), mk(3, 0, 0, 0, 1, 3, 1, 1, 0, 0, 1, 0)};
    for (size_t i = 0; i < sizeof z / sizeof *z; i++)
        for (int l = 0; l < 2; l++) {
            z[i].xl = z[i].yl = l ? A_NXC : A_NCX;
            run_case(&z[i]);
        }
    kern_conv_desc d = {.nsp = 2, .n = 0, .c = 3, .o = 5, .groups = 1, .in = {7, 7}, .k = {3, 3},
                        .out = {7, 7}, .stride = {1, 1}, .pad_lo = {1, 1}, .pad_hi = {1, 1},
                        .dil = {1, 1}};
    CHECK(kern_conv(&d, NULL, NULL, NULL, NULL, NULL, 0) == 0, "n == 0 touches nothing");
}

/* Batch 1 to 5 on 1 to 4 threads: unsplit, batch ranges (even and not),
 * output row chunks (with padding on either end, a chunk of one row). */
static void test_conv_threads(void)
{
    static const int threads[] = {1, 2, 3, 4};
    for (int t = 0; t < 4; t++) {
        kern_set_num_threads(threads[t]);
        for (int64_t n = 1; n <= 5; n++) {
            cv_case c = mk(2, n, 16, 32, 1, 9, 3, 1, 1, 1, 1, 1);
            c.xl = c.yl = A_NXC;
            run_case(&c);
            c.xl = c.yl = A_NCX;
            run_case(&c);
            c = mk(2, n, 8, 24, 1, 12, 5, 2, 3, 1, 2, 0);
            c.xl = A_NXC, c.yl = A_NXC;
            run_case(&c);
            c = mk(2, n, 8, 8, 8, 5, 3, 1, 1, 1, 1, 1);
            c.xl = c.yl = A_NXC;
            run_case(&c);
            c = mk(3, n, 5, 16, 1, 6, 3, 1, 1, 1, 1, 1);
            c.xl = A_ODD, c.yl = A_NXC;
            run_case(&c);
        }
        cv_case c = mk(2, 4 * threads[t] + 1, 8, 8, 1, 6, 3, 1, 1, 0, 1, 1);
        c.xl = c.yl = A_NXC;                   /* batch ranges of two sizes */
        run_case(&c);
        c.xl = A_NCX;
        run_case(&c);
    }
    kern_set_num_threads(2);
}

static void expect_error(const kern_conv_desc *d, const char *what)
{
    char err[256] = "";
    float buf[4096] = {0};
    int rc = kern_conv(d, buf, buf, buf, buf + 2048, err, sizeof err);
    CHECK(rc == -1 && strncmp(err, "conv: ", 6) == 0, "%s: rc %d err '%s'", what, rc, err);
}

static void test_conv_errors(void)
{
    kern_conv_desc ok = {.nsp = 2, .n = 1, .c = 4, .o = 6, .groups = 2, .in = {5, 5},
                         .k = {3, 3}, .out = {5, 5}, .stride = {1, 1}, .pad_lo = {1, 1},
                         .pad_hi = {1, 1}, .dil = {1, 1}, .x_strides = {100, 25, 5, 1},
                         .w_strides = {18, 9, 3, 1}, .y_strides = {150, 25, 5, 1}};
    float x[100], w[108], y[150];
    for (int i = 0; i < 100; i++)
        x[i] = rnd_f();
    for (int i = 0; i < 108; i++)
        w[i] = rnd_f();
    CHECK(kern_conv(&ok, x, w, NULL, y, NULL, 0) == 0, "valid descriptor, NULL err buffer");
    kern_conv_desc d = ok;
    d.nsp = 0;
    expect_error(&d, "nsp 0");
    d = ok, d.nsp = 4;
    expect_error(&d, "nsp 4");
    d = ok, d.groups = 0;
    expect_error(&d, "groups 0");
    d = ok, d.groups = 3;
    expect_error(&d, "groups do not divide");
    d = ok, d.out[1] = 4;
    expect_error(&d, "wrong output size");
    d = ok, d.stride[0] = 0;
    expect_error(&d, "stride 0");
    d = ok, d.dil[1] = 0;
    expect_error(&d, "dilation 0");
    d = ok, d.pad_lo[0] = -1, d.out[0] = 4;
    expect_error(&d, "negative padding");
    d = ok, d.x_strides[2] = -5;
    expect_error(&d, "negative stride");
    d = ok, d.y_strides[3] = 0;
    expect_error(&d, "output stride 0");
    d = ok, d.n = -1;
    expect_error(&d, "negative batch");
    d = ok, d.in[0] = 1, d.pad_lo[0] = d.pad_hi[0] = 0, d.out[0] = 1;
    expect_error(&d, "kernel larger than padded input");
}

/* More distinct shapes than the cache holds, clears, concurrent callers. */
static void *conv_thread(void *arg)
{
    _Atomic int *bad = arg;
    g_rng = (uint64_t)(uintptr_t)arg * 2654435761u + 12345;
    for (int r = 0; r < 12; r++) {
        cv_case c = mk(2, 1 + r % 3, 8, 16, r % 2 ? 2 : 1, 9 + r % 4, 3, 1, 1, 1, 1, r % 2);
        c.xl = c.yl = r % 3 ? A_NXC : A_NCX;
        int before = g_fail;
        run_case(&c);
        if (g_fail != before)
            atomic_fetch_add(bad, 1);
        if (r == 6)
            kern_conv_cache_clear();
    }
    return NULL;
}

static void test_conv_cache(void)
{
    for (int i = 1; i <= 140; i++) {
        cv_case c = mk(1, 1, 2, 3, 1, i, 2, 1, 0, 1, 1, i % 2);
        c.xl = c.yl = A_NXC;
        if (i % 29 == 0) {
            run_case(&c);
        } else {
            cv_bufs o;
            setup(&c, &o);
            CHECK(kern_conv(&o.d, o.x, o.w, o.b, o.y, NULL, 0) == 0, "cache fill %d", i);
            teardown(&o);
        }
    }
    kern_conv_cache_clear();
    kern_conv_cache_clear();
    cv_case c = mk(2, 2, 3, 5, 1, 7, 3, 1, 1, 1, 1, 1);
    run_case(&c);
    _Atomic int bad = 0;
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, conv_thread, &bad);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK(atomic_load(&bad) == 0, "concurrent convolutions");
}

/* ------------------------------------------------------------ backward */

/* Double references of dx and dw for dy = o->y, by storage offset: sums,
 * sums of the terms' magnitudes, term counts. */
typedef struct cb_ref {
    double *dx, *mx, *dw, *mw;
    int64_t *cx, *cw;
} cb_ref;

/* Scatters the terms of y[n, oc, op] into r. */
static void ref_scatter(const cv_bufs *o, int64_t n, int64_t oc, const int64_t *op, cb_ref *r)
{
    const kern_conv_desc *d = &o->d;
    int nd = d->nsp + 2;
    int64_t cg = d->c / d->groups, og = d->o / d->groups, kk[3] = {1, 1, 1};
    int64_t yi[5] = {n, oc, op[0], op[1], op[2]};
    for (int i = 0; i < d->nsp; i++)
        kk[i] = d->k[i];
    double dy = o->y[off5(nd, d->y_strides, yi)];
    for (int64_t c = 0; c < cg; c++)
        for (int64_t a = 0; a < kk[0]; a++)
            for (int64_t b = 0; b < kk[1]; b++)
                for (int64_t e = 0; e < kk[2]; e++) {
                    int64_t ki[3] = {a, b, e}, xi[5] = {n, oc / og * cg + c}, wi[5] = {oc, c, a, b, e};
                    int inside = 1;
                    for (int i = 0; i < d->nsp; i++) {
                        xi[2 + i] = op[i] * d->stride[i] - d->pad_lo[i] + ki[i] * d->dil[i];
                        inside &= xi[2 + i] >= 0 && xi[2 + i] < d->in[i];
                    }
                    if (!inside)
                        continue;
                    int64_t ax = off5(nd, d->x_strides, xi), aw = off5(nd, d->w_strides, wi);
                    double tx = dy * o->w[aw], tw = dy * o->x[ax];
                    r->dx[ax] += tx, r->mx[ax] += fabs(tx), r->cx[ax]++;
                    r->dw[aw] += tw, r->mw[aw] += fabs(tw), r->cw[aw]++;
                }
}

static void ref_backward(const cv_bufs *o, cb_ref *r)
{
    const kern_conv_desc *d = &o->d;
    size_t nx = (size_t)o->need[0], nw = (size_t)o->need[1];
    r->dx = calloc(nx, sizeof(double)), r->mx = calloc(nx, sizeof(double));
    r->dw = calloc(nw, sizeof(double)), r->mw = calloc(nw, sizeof(double));
    r->cx = calloc(nx, sizeof(int64_t)), r->cw = calloc(nw, sizeof(int64_t));
    int64_t out[3] = {1, 1, 1};
    for (int i = 0; i < d->nsp; i++)
        out[i] = d->out[i];
    for (int64_t n = 0; n < d->n; n++)
        for (int64_t oc = 0; oc < d->o; oc++)
            for (int64_t a = 0; a < out[0]; a++)
                for (int64_t b = 0; b < out[1]; b++)
                    for (int64_t e = 0; e < out[2]; e++)
                        ref_scatter(o, n, oc, (int64_t[3]){a, b, e}, r);
}

static void ref_free(cb_ref *r)
{
    free(r->dx), free(r->mx), free(r->dw), free(r->mw), free(r->cx), free(r->cw);
}

/* got against ref at every offset of the view (dims, strides st, nd dims);
 * the other elements of its storage (need) keep the 0xa5 pattern. */
static int verify_grad(int nd, const int64_t *dims, const int64_t *st, const float *got, int64_t need,
                       const double *ref, const double *mag, const int64_t *cnt, char *why, size_t len)
{
    int64_t d5[5] = {1, 1, 1, 1, 1}, i[5];
    int ok = 1;
    for (int k = 0; k < nd; k++)
        d5[k] = dims[k];
    unsigned char *seen = calloc((size_t)need + 1, 1);
    for (i[0] = 0; i[0] < d5[0]; i[0]++)
        for (i[1] = 0; i[1] < d5[1]; i[1]++)
            for (i[2] = 0; i[2] < d5[2]; i[2]++)
                for (i[3] = 0; i[3] < d5[3]; i[3]++)
                    for (i[4] = 0; i[4] < d5[4]; i[4]++) {
                        int64_t at = off5(nd, st, i);
                        seen[at] = 1;
                        if (!(fabs(got[at] - ref[at]) <= (double)(cnt[at] + 2) * 0x1p-23 * mag[at] + 1e-30)) {
                            if (ok)
                                snprintf(why, len, "[%lld,%lld,%lld,%lld,%lld] = %g, want %g", (long long)i[0],
                                         (long long)i[1], (long long)i[2], (long long)i[3], (long long)i[4],
                                         got[at], ref[at]);
                            ok = 0;
                        }
                    }
    uint32_t pat;
    memset(&pat, 0xa5, sizeof pat);
    for (int64_t k = 0; k < need; k++)
        if (!seen[k] && memcmp(&got[k], &pat, sizeof pat) != 0) {
            if (ok)
                snprintf(why, len, "element %lld outside the view was written", (long long)k);
            ok = 0;
        }
    free(seen);
    return ok;
}

/* dx and dw of a case (bias dropped, y's storage holding dy) against the
 * references. */
static void run_backward_case(const cv_case *t)
{
    cv_bufs o;
    cb_ref r;
    char err[256] = "", why[256] = "", what[320];
    setup(t, &o);
    o.d.has_bias = 0;
    for (int64_t j = 0; j < o.need[3]; j++)
        o.y[j] = rnd_f();
    describe(t, what, sizeof what);
    ref_backward(&o, &r);
    const kern_conv_desc *d = &o.d;
    int nd = d->nsp + 2;
    int64_t xd[5] = {d->n, d->c}, wd[5] = {d->o, d->c / d->groups};
    for (int i = 0; i < d->nsp; i++)
        xd[2 + i] = d->in[i], wd[2 + i] = d->k[i];
    float *dx = malloc((size_t)o.need[0] * sizeof(float)), *dw = malloc((size_t)o.need[1] * sizeof(float));
    memset(dx, 0xa5, (size_t)o.need[0] * sizeof(float));
    memset(dw, 0xa5, (size_t)o.need[1] * sizeof(float));
    int rc = kern_conv_backward_data(d, o.y, o.w, dx, err, sizeof err);
    CHECK(rc == 0, "%s: backward data rc %d (%s)", what, rc, err);
    if (rc == 0)
        CHECK(verify_grad(nd, xd, d->x_strides, dx, o.need[0], r.dx, r.mx, r.cx, why, sizeof why),
              "%s: dx%s", what, why);
    rc = kern_conv_backward_weights(d, o.x, o.y, dw, err, sizeof err);
    CHECK(rc == 0, "%s: backward weights rc %d (%s)", what, rc, err);
    if (rc == 0)
        CHECK(verify_grad(nd, wd, d->w_strides, dw, o.need[1], r.dw, r.mw, r.cw, why, sizeof why),
              "%s: dw%s", what, why);
    free(dx), free(dw);
    ref_free(&r);
    teardown(&o);
}

/* Every base shape over the activation layouts (weights: any layout but a
 * broadcast one, which no gradient can be written into), batch 1 to 5 on
 * 1 to 4 threads, empty dims. */
static void test_conv_backward(void)
{
    static const int xy[][2] = {{A_NXC, A_NXC}, {A_NCX, A_NCX}, {A_NCX, A_NXC}, {A_NXC, A_NCX},
                                {A_NXC_PAD, A_NXC}, {A_ODD, A_ODD}, {A_CNX, A_NXC}};
    int n;
    const cv_case *base = base_cases(&n);
    for (int i = 0; i < n; i++)
        for (size_t l = 0; l < sizeof xy / sizeof *xy; l++) {
            cv_case t = base[i];
            t.xl = xy[l][0], t.yl = xy[l][1], t.wl = (int)((i + l) % 3);
            run_backward_case(&t);
        }
    static const int threads[] = {1, 2, 3, 4};
    for (int k = 0; k < 4; k++) {
        kern_set_num_threads(threads[k]);
        for (int64_t b = 1; b <= 5; b++) {
            cv_case c = mk(2, b, 16, 32, 1, 9, 3, 1, 1, 1, 1, 0);
            c.xl = c.yl = b % 2 ? A_NXC : A_NCX;
            run_backward_case(&c);
            c = mk(2, b, 8, 8, 8, 6, 3, 2, 1, 0, 1, 0);
            c.xl = c.yl = A_NXC;
            run_backward_case(&c);
        }
    }
    kern_set_num_threads(2);
    cv_case z[] = {mk(2, 0, 3, 5, 1, 7, 3, 1, 1, 1, 1, 0), mk(2, 2, 3, 0, 1, 7, 3, 1, 1, 1, 1, 0),
                   mk(2, 2, 0, 5, 1, 7, 3, 1, 1, 1, 1, 0), mk(1, 2, 3, 5, 1, 0, 2, 1, 1, 1, 1, 0)};
    for (size_t i = 0; i < sizeof z / sizeof *z; i++)
        run_backward_case(&z[i]);
}

static void test_conv_backward_errors(void)
{
    kern_conv_desc d = {.nsp = 2, .n = 1, .c = 4, .o = 6, .groups = 2, .in = {5, 5},
                        .k = {3, 3}, .out = {5, 5}, .stride = {1, 1}, .pad_lo = {1, 1},
                        .pad_hi = {1, 1}, .dil = {1, 1}, .x_strides = {100, 25, 5, 1},
                        .w_strides = {18, 9, 3, 1}, .y_strides = {150, 25, 5, 1}};
    float x[100] = {0}, w[108] = {0}, y[150] = {0};
    char err[256] = "";
    d.w_strides[1] = 0;
    CHECK(kern_conv_backward_weights(&d, x, y, w, err, sizeof err) == -1 && strstr(err, "stride 0"),
          "dw with stride 0: '%s'", err);
    CHECK(kern_conv_backward_data(&d, y, w, x, err, sizeof err) == 0, "w with stride 0 is only read");
    d.w_strides[1] = 9, d.x_strides[3] = 0;
    CHECK(kern_conv_backward_data(&d, y, w, x, err, sizeof err) == -1 && strstr(err, "stride 0"),
          "dx with stride 0: '%s'", err);
    d.x_strides[3] = 1, d.has_bias = 1;
    CHECK(kern_conv_backward_data(&d, y, w, x, err, sizeof err) == -1 && strstr(err, "bias"),
          "bias: '%s'", err);
}

/* Layer l of the bench CNN (3x3, pad 1, square images), layout lay. */
static const int64_t k_bench_layers[4][3] = {{3, 32, 64}, {32, 64, 32}, {64, 128, 16}, {128, 256, 8}};

static cv_case bench_case(int l, int64_t batch, int lay, int bias)
{
    const int64_t *t = k_bench_layers[l];
    cv_case c = mk(2, batch, t[0], t[1], 1, t[2], 3, 1, 1, 1, 1, bias);
    c.in[1] = c.in[0];
    c.xl = c.yl = lay;
    return c;
}

/* Milliseconds per backward call (data and weights, best of reps) of the
 * bench CNN's layers, channels-last. */
static void bench_backward(int reps, int64_t batch)
{
    const int64_t (*layers)[3] = k_bench_layers;
    double total = 0;
    for (int l = 0; l < 4; l++) {
        cv_case c = bench_case(l, batch, A_NXC, 0);
        cv_bufs o;
        setup(&c, &o);
        float *dx = malloc((size_t)o.need[0] * sizeof(float)), *dw = malloc((size_t)o.need[1] * sizeof(float));
        double best[2] = {1e30, 1e30};
        for (int r = 0; r <= reps; r++)
            for (int m = 0; m < 2; m++) {
                double t0 = now_s();
                if (m == 0)
                    kern_conv_backward_data(&o.d, o.y, o.w, dx, NULL, 0);
                else
                    kern_conv_backward_weights(&o.d, o.x, o.y, dw, NULL, 0);
                double ms = (now_s() - t0) * 1e3;
                if (r && ms < best[m])
                    best[m] = ms;
            }
        total += best[0] + best[1];
        printf("timing: conv backward nhwc, %d threads, %lldx%lldx%lldx%lld -> %lld: data %.3f ms, "
               "weights %.3f ms\n", kern_get_num_threads(), (long long)batch, (long long)layers[l][0],
               (long long)layers[l][2], (long long)layers[l][2], (long long)layers[l][1], best[0], best[1]);
        free(dx), free(dw);
        teardown(&o);
    }
    printf("timing: backward total %.3f ms\n", total);
}

/* Milliseconds per call (best of reps after a warm-up) of the bench CNN's
 * layers, 3x3 pad 1, channels-last x and y (or channels-first). */
static void bench(int reps, int lay, int64_t batch)
{
    const int64_t (*layers)[3] = k_bench_layers;
    double total = 0;
    for (int l = 0; l < 4; l++) {
        cv_case c = bench_case(l, batch, lay, 1);
        cv_bufs o;
        setup(&c, &o);
        double best = 1e30;
        for (int r = 0; r <= reps; r++) {
            double t0 = now_s();
            kern_conv(&o.d, o.x, o.w, o.b, o.y, NULL, 0);
            double ms = (now_s() - t0) * 1e3;
            if (r && ms < best)
                best = ms;
        }
        total += best;
        printf("timing: conv %s, %d threads, %lldx%lldx%lldx%lld -> %lld, 3x3: %.3f ms "
               "(best of %d)\n",
               lay == A_NXC ? "nhwc" : "nchw", kern_get_num_threads(), (long long)batch,
               (long long)layers[l][0], (long long)layers[l][2],
               (long long)layers[l][2], (long long)layers[l][1], best, reps);
        teardown(&o);
    }
    printf("timing: total %.3f ms\n", total);
}

int main(int argc, char **argv)
{
    alarm(300);
    setvbuf(stdout, NULL, _IOLBF, 0);
    kern_set_num_threads(2);
    if (argc > 1 && strcmp(argv[1], "bench") == 0) {
        int reps = argc > 2 ? atoi(argv[2]) : 10;
        bench(reps, A_NXC, 32);
        bench_backward(reps, 32);
        bench(reps, A_NCX, 32);
        bench(reps, A_NXC, 1);
        kern_set_num_threads(1);
        bench(reps, A_NXC, 1);
        return 0;
    }
    test_conv_layouts();
    test_conv_weights_bias();
    test_conv_empty();
    test_conv_threads();
    test_conv_errors();
    test_conv_cache();
    test_conv_backward();
    test_conv_backward_errors();
    if (!PORTABLE)
        bench(2, A_NXC, 32);
    kern_threadpool_shutdown();
    kern_conv_cache_clear();
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail != 0;
}
