/* Standalone tests for kernels/threadpool.c, kernels/primcache.c and
 * kernels/matmul.c.
 *
 * Build (tests/test_kernels_c.py does this):
 *   gcc -std=c11 -Wall -Wextra -Werror -O1 -I. tests/c/test_kernels.c \
 *       kernels/threadpool.c kernels/onednn.c kernels/primcache.c kernels/matmul.c \
 *       -ldnnl -lpthread -lm
 * Prints one line per failure, a timing line, and "N passed, M failed";
 * exits non-zero on any failure (or after a 300 s alarm if something hangs).
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/matmul.h"
#include "kernels/primcache.h"
#include "kernels/threadpool.h"
#include "tests/c/testutil.h"

/* ============================================================ thread pool */

#define MAX_IDS 8

/* Records what one kern_parallel_for call did. */
typedef struct cover {
    _Atomic int *hits;          /* per index */
    _Atomic int chunks;
    _Atomic int64_t min_chunk;
    pthread_mutex_t mu;
    pthread_t ids[MAX_IDS];
    int nids;
} cover;

static void cover_note_thread(cover *c)
{
    pthread_t me = pthread_self();
    pthread_mutex_lock(&c->mu);
    int known = 0;
    for (int i = 0; i < c->nids; i++)
        known |= pthread_equal(c->ids[i], me) != 0;
    if (!known && c->nids < MAX_IDS)
        c->ids[c->nids++] = me;
    pthread_mutex_unlock(&c->mu);
}

static void cover_fn(void *ctx, int64_t begin, int64_t end)
{
    cover *c = ctx;
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&c->hits[i], 1);
    atomic_fetch_add(&c->chunks, 1);
    int64_t len = end - begin, m = atomic_load(&c->min_chunk);
    while (len < m && !atomic_compare_exchange_weak(&c->min_chunk, &m, len))
        ;
    cover_note_thread(c);
}

/* Runs kern_parallel_for(n, grain) and checks the contract: every index
 * once, at most `threads` chunks of >= grain items (one chunk if n <= grain),
 * at most `threads` distinct threads. Returns 1 if all held. */
static int check_cover(int64_t n, int64_t grain, int threads)
{
    cover c = {.mu = PTHREAD_MUTEX_INITIALIZER};
    c.hits = calloc((size_t)(n > 0 ? n : 1), sizeof *c.hits);
    atomic_init(&c.chunks, 0);
    atomic_init(&c.min_chunk, INT64_MAX);
    kern_parallel_for(n, grain, cover_fn, &c);
    int ok = 1;
    for (int64_t i = 0; i < n; i++)
        ok &= atomic_load(&c.hits[i]) == 1;
    int64_t g = grain < 1 ? 1 : grain;
    int ch = atomic_load(&c.chunks);
    if (n <= 0)
        ok &= ch == 0;
    else if (n <= g)
        ok &= ch == 1;
    else
        ok &= ch >= 1 && ch <= threads && (ch == 1 || atomic_load(&c.min_chunk) >= g);
    ok &= c.nids <= threads;
    free(c.hits);
    return ok;
}

static void test_pool_coverage(void)
{
    static const int threads[] = {1, 2, 3, 4, 7, 2};
    static const int64_t ns[] = {0, 1, 2, 3, 5, 17, 100, 1000, 4097};
    static const int64_t grains[] = {-3, 0, 1, 2, 3, 7, 64, 5000};
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
        kern_set_num_threads(threads[t]);
        CHECK(kern_get_num_threads() == threads[t], "get_num_threads %d", kern_get_num_threads());
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
            for (size_t g = 0; g < sizeof grains / sizeof *grains; g++)
                CHECK(check_cover(ns[i], grains[g], threads[t]),
                      "coverage n=%lld grain=%lld threads=%d", (long long)ns[i],
                      (long long)grains[g], threads[t]);
    }
}

/* Each chunk waits (up to 5 s) until `want` chunks have started: passes only
 * if that many threads really run at once. */
typedef struct barrier_ctx {
    _Atomic int started, timed_out;
    int want;
} barrier_ctx;

static void barrier_fn(void *ctx, int64_t begin, int64_t end)
{
    barrier_ctx *b = ctx;
    (void)begin, (void)end;
    atomic_fetch_add(&b->started, 1);
    double t0 = now_s();
    while (atomic_load(&b->started) < b->want)
        if (now_s() - t0 > 5.0) {
            atomic_store(&b->timed_out, 1);
            return;
        }
}

static int check_parallel(int threads)
{
    barrier_ctx b = {.want = threads};
    kern_parallel_for(1000, 1, barrier_fn, &b);
    return !atomic_load(&b.timed_out) && atomic_load(&b.started) == threads;
}

static void test_pool_resize(void)
{
    static const int seq[] = {2, 4, 1, 3, 2, 1, 2};
    for (size_t i = 0; i < sizeof seq / sizeof *seq; i++) {
        kern_set_num_threads(seq[i]);
        CHECK(check_parallel(seq[i]), "%d threads run concurrently", seq[i]);
        CHECK(check_cover(10000, 1, seq[i]), "coverage after resize to %d", seq[i]);
    }
    kern_set_num_threads(0);
    CHECK(kern_get_num_threads() == 1, "set_num_threads(0) clamps to 1");
}

/* Nested calls: the inner call runs inline on the outer chunk's thread. */
typedef struct nest_ctx {
    _Atomic int *hits;      /* outer index * 37 + inner index */
    _Atomic int foreign;    /* inner chunks that ran on another thread */
    pthread_t outer_id[64];
} nest_ctx;

typedef struct inner_ctx {
    nest_ctx *nc;
    int64_t outer;
} inner_ctx;

static void inner_fn(void *ctx, int64_t begin, int64_t end)
{
    inner_ctx *ic = ctx;
    if (!pthread_equal(ic->nc->outer_id[ic->outer], pthread_self()))
        atomic_fetch_add(&ic->nc->foreign, 1);
    for (int64_t i = begin; i < end; i++)
        atomic_fetch_add(&ic->nc->hits[ic->outer * 37 + i], 1);
}

static void outer_fn(void *ctx, int64_t begin, int64_t end)
{
    nest_ctx *nc = ctx;
    for (int64_t o = begin; o < end; o++) {
        nc->outer_id[o] = pthread_self();
        inner_ctx ic = {nc, o};
        kern_parallel_for(37, 1, inner_fn, &ic);
    }
}

static void test_pool_nested(void)
{
    kern_set_num_threads(3);
    nest_ctx nc;
    memset(&nc, 0, sizeof nc);
    nc.hits = calloc(64 * 37, sizeof *nc.hits);
    kern_parallel_for(64, 1, outer_fn, &nc);
    int ok = 1;
    for (int i = 0; i < 64 * 37; i++)
        ok &= atomic_load(&nc.hits[i]) == 1;
    CHECK(ok, "nested coverage");
    CHECK(atomic_load(&nc.foreign) == 0, "nested calls run inline");
    free(nc.hits);
}

static void *concurrent_caller(void *arg)
{
    _Atomic int *bad = arg;
    for (int r = 0; r < 200; r++)
        if (!check_cover(257 + r, 3, 4))
            atomic_fetch_add(bad, 1);
    return NULL;
}

static void test_pool_concurrent_callers(void)
{
    kern_set_num_threads(4);
    _Atomic int bad = 0;
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&th[i], NULL, concurrent_caller, &bad);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    CHECK(atomic_load(&bad) == 0, "concurrent callers: %d bad calls", atomic_load(&bad));
}

static void test_pool_shutdown_and_fork(void)
{
    kern_set_num_threads(2);
    CHECK(check_parallel(2), "pool running before shutdown");
    kern_threadpool_shutdown();
    kern_threadpool_shutdown();
    CHECK(check_parallel(2), "pool restarts lazily after shutdown");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0)
        _exit(check_parallel(2) && check_cover(5000, 1, 2) ? 0 : 1);
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0, "pool works in a forked child");
    CHECK(check_parallel(2), "pool still works in the parent after fork");
}

static void nop_fn(void *ctx, int64_t begin, int64_t end)
{
    (void)ctx, (void)begin, (void)end;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Median microseconds per kern_parallel_for(n, 1, fn) call over reps calls,
 * sleeping idle_us before each; b, if given, is reset before each call. */
static double median_us(int64_t n, kern_range_fn fn, barrier_ctx *b, int reps, int idle_us)
{
    double *t = malloc((size_t)reps * sizeof *t);
    for (int i = 0; i < reps; i++) {
        if (idle_us)
            nanosleep(&(struct timespec){0, idle_us * 1000L}, NULL);
        if (b)
            *b = (barrier_ctx){.want = 2};
        double t0 = now_s();
        kern_parallel_for(n, 1, fn, b);
        t[i] = (now_s() - t0) * 1e6;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    double m = t[reps / 2];
    free(t);
    return m;
}

/* Prints the per-call cost of kern_parallel_for with 2 threads: a no-op fn
 * (the caller may run both chunks itself), a fn that makes both threads take
 * part (a full hand-off and join; also after the worker fell asleep), and
 * the inline path. */
static void time_pool(void)
{
    kern_set_num_threads(2);
    barrier_ctx b;
    double pooled = median_us(2, nop_fn, NULL, 20000, 0);
    double both = median_us(2, barrier_fn, &b, 20000, 0);
    double cold = median_us(2, barrier_fn, &b, 200, 2000);
    double inl = median_us(1, nop_fn, NULL, 20000, 0);
    printf("timing (median): kern_parallel_for, 2 threads: %.2f us/call no-op, %.2f us/call "
           "with both threads taking part (%.1f us after 2 ms idle: worker asleep); "
           "inline %.3f us/call\n", pooled, both, cold, inl);
}

/* ================================================================= matmul */

/* Independent reference conversions (arithmetic, not bit tricks). */
static double half_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static uint16_t half_bits(double v)     /* round to nearest even */
{
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    v = fabs(v);
    if (isnan(v))
        return 0x7e00;
    int e;
    frexp(v, &e);                       /* v = f * 2^e, f in [0.5, 1) */
    int q = e - 1 < -14 ? -24 : e - 11; /* quantum exponent */
    double r = nearbyint(ldexp(v, -q));
    v = ldexp(r, q);
    if (v >= 65520.0 || isinf(v))
        return sign | 0x7c00;
    if (v < ldexp(1, -14))
        return sign | (uint16_t)r;
    frexp(v, &e);
    return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)(ldexp(v, 11 - e) - 1024);
}

static double bf16_value(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t bf16_bits_of(float f)  /* truncation; inputs are chosen exact */
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

static const size_t k_size[SMELT_NDTYPES] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
static const char *const k_name[SMELT_NDTYPES] = {
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
    "float32", "float64"};

static int is_float(smelt_dtype dt)
{
    return dt >= SMELT_F16;
}

static double get_f(smelt_dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case SMELT_F16: return half_value(((const uint16_t *)p)[i]);
    case SMELT_BF16: return bf16_value(((const uint16_t *)p)[i]);
    case SMELT_F32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}

static int64_t get_i(smelt_dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case SMELT_U8: return ((const uint8_t *)p)[i];
    case SMELT_I8: return ((const int8_t *)p)[i];
    case SMELT_I16: return ((const int16_t *)p)[i];
    case SMELT_I32: return ((const int32_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}

/* A random value of dt at p[i]: floats in [-1, 1) with few mantissa bits
 * for f16/bf16 (exact), integers over the type's whole range for 8/16-bit
 * (so sums wrap) and small otherwise. */
static void set_random(smelt_dtype dt, void *p, int64_t i)
{
    double f = (double)(int64_t)(rnd() % 2048 - 1024) / 1024.0;
    int64_t v = (int64_t)(rnd() % 2001) - 1000;
    switch (dt) {
    case SMELT_F16: ((uint16_t *)p)[i] = half_bits(f); break;
    case SMELT_BF16: ((uint16_t *)p)[i] = bf16_bits_of((float)((int)(f * 128) / 128.0)); break;
    case SMELT_F32: ((float *)p)[i] = (float)f; break;
    case SMELT_F64: ((double *)p)[i] = f; break;
    case SMELT_U8: ((uint8_t *)p)[i] = (uint8_t)rnd(); break;
    case SMELT_I8: ((int8_t *)p)[i] = (int8_t)(uint8_t)rnd(); break;
    case SMELT_I16: ((int16_t *)p)[i] = (int16_t)(uint16_t)rnd(); break;
    case SMELT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((int64_t *)p)[i] = v; break;
    }
}

/* Operand layouts: the order of dims in memory plus modifiers. */
enum {
    L_CONTIG = 0,       /* row-major */
    L_TRANS = 1,        /* last two dims swapped in memory */
    L_BATCH_IN = 2,     /* batch dims innermost, then columns, then rows */
    L_KIND = 3,
    L_PAD = 4,          /* row stride padded by 3 */
    L_STEP2 = 8,        /* every stride doubled */
    L_BCAST0 = 16,      /* batch dims of size > 1 get stride 0 */
    L_ROW0 = 32,        /* second-to-last dim stride 0 */
    L_COL0 = 64,        /* last dim stride 0 */
};

/* Strides for dims in layout lay; returns the elements the storage needs. */
static int64_t make_strides(int nd, const int64_t *dims, int lay, int64_t *st)
{
    int order[SMELT_MAX_DIMS], n = 0;   /* innermost first */
    int kind = lay & L_KIND;
    if (kind == L_BATCH_IN)
        for (int i = nd - 3; i >= 0; i--)
            order[n++] = i;
    order[n++] = kind == L_TRANS ? nd - 2 : nd - 1;
    order[n++] = kind == L_TRANS ? nd - 1 : nd - 2;
    if (kind != L_BATCH_IN)
        for (int i = nd - 3; i >= 0; i--)
            order[n++] = i;
    int64_t s = lay & L_STEP2 ? 2 : 1;
    for (int i = 0; i < nd; i++) {
        st[order[i]] = s;
        s *= dims[order[i]] + ((lay & L_PAD) && order[i] == nd - 1 ? 3 : 0);
    }
    for (int i = 0; i < nd - 2; i++)
        if ((lay & L_BCAST0) && dims[i] > 1)
            st[i] = 0;
    if (lay & L_ROW0)
        st[nd - 2] = 0;
    if (lay & L_COL0)
        st[nd - 1] = 0;
    int64_t need = 1;
    for (int i = 0; i < nd; i++) {
        if (dims[i] == 0)
            return 1;
        need += (dims[i] - 1) * st[i];
    }
    return need;
}

typedef struct mm_case {
    smelt_dtype dt;
    int nd;
    int64_t ab[SMELT_MAX_DIMS], bb[SMELT_MAX_DIMS];    /* batch dims of a and b */
    int64_t M, K, N;
    int la, lb, lc;
} mm_case;

/* Offset of element (batch index bi over cb, row r, col q) in an operand. */
static int64_t elem_off(int nd, const int64_t *dims, const int64_t *st, const int64_t *cb,
                        int64_t bi, int64_t r, int64_t q)
{
    int64_t off = r * st[nd - 2] + q * st[nd - 1];
    for (int d = nd - 3; d >= 0; d--) {
        int64_t i = bi % cb[d];
        bi /= cb[d];
        off += (dims[d] == 1 ? 0 : i) * st[d];
    }
    return off;
}

/* Compares c[bi, i, j] with the reference dot product. */
static int check_elem(const mm_case *t, const kern_matmul_desc *d, const void *a,
                      const void *b, const void *c, int64_t bi, int64_t i, int64_t j)
{
    int nd = t->nd;
    double sum = 0, mag = 0;
    uint64_t isum = 0;
    for (int64_t k = 0; k < t->K; k++) {
        int64_t ao = elem_off(nd, d->a_dims, d->a_strides, d->c_dims, bi, i, k);
        int64_t bo = elem_off(nd, d->b_dims, d->b_strides, d->c_dims, bi, k, j);
        if (is_float(t->dt)) {
            double x = get_f(t->dt, a, ao), y = get_f(t->dt, b, bo);
            sum += x * y, mag += fabs(x * y);
        } else {
            isum += (uint64_t)get_i(t->dt, a, ao) * (uint64_t)get_i(t->dt, b, bo);
        }
    }
    int64_t co = elem_off(nd, d->c_dims, d->c_strides, d->c_dims, bi, i, j);
    if (!is_float(t->dt)) {
        uint64_t mask = k_size[t->dt] == 8 ? ~0ull : (1ull << (8 * k_size[t->dt])) - 1;
        return ((uint64_t)get_i(t->dt, c, co) & mask) == (isum & mask);
    }
    /* accumulation error bound (K + 2 roundings of the accumulator type)
     * plus the final rounding of f16/bf16 outputs */
    double tol = (double)(t->K + 2) * (t->dt == SMELT_F64 ? 0x1p-53 : 0x1p-24)
               + (t->dt == SMELT_F16 ? 0x1p-11 : t->dt == SMELT_BF16 ? 0x1p-8 : 0);
    double got = get_f(t->dt, c, co);
    return fabs(got - sum) <= tol * mag + 1e-30;
}

/* Fills desc and the three operands of t (random a, b; c all 0xa5). */
static void setup_case(const mm_case *t, kern_matmul_desc *d, void **buf, int64_t *need)
{
    int nd = t->nd;
    memset(d, 0, sizeof *d);
    d->dtype = t->dt, d->ndim = nd;
    for (int i = 0; i < nd - 2; i++) {
        d->a_dims[i] = t->ab[i], d->b_dims[i] = t->bb[i];
        d->c_dims[i] = t->ab[i] == 1 ? t->bb[i] : t->ab[i];
    }
    d->a_dims[nd - 2] = d->c_dims[nd - 2] = t->M;
    d->a_dims[nd - 1] = d->b_dims[nd - 2] = t->K;
    d->b_dims[nd - 1] = d->c_dims[nd - 1] = t->N;
    need[0] = make_strides(nd, d->a_dims, t->la, d->a_strides);
    need[1] = make_strides(nd, d->b_dims, t->lb, d->b_strides);
    need[2] = make_strides(nd, d->c_dims, t->lc, d->c_strides);
    for (int o = 0; o < 3; o++) {
        buf[o] = malloc((size_t)need[o] * k_size[t->dt]);
        for (int64_t i = 0; o < 2 && i < need[o]; i++)
            set_random(t->dt, buf[o], i);
    }
    memset(buf[2], 0xa5, (size_t)need[2] * k_size[t->dt]);
}

/* Checks every element of c in view, and that bytes outside it are intact. */
static int verify_case(const mm_case *t, const kern_matmul_desc *d, void **buf, int64_t cneed)
{
    int nd = t->nd, ok = 1;
    size_t es = k_size[t->dt];
    int64_t nb = 1;
    for (int i = 0; i < nd - 2; i++)
        nb *= d->c_dims[i];
    unsigned char *seen = calloc((size_t)cneed, 1);
    for (int64_t bi = 0; bi < nb; bi++)
        for (int64_t i = 0; i < t->M; i++)
            for (int64_t j = 0; j < t->N; j++) {
                ok &= check_elem(t, d, buf[0], buf[1], buf[2], bi, i, j);
                seen[elem_off(nd, d->c_dims, d->c_strides, d->c_dims, bi, i, j)] = 1;
            }
    for (int64_t e = 0; e < cneed; e++)
        for (size_t k = 0; !seen[e] && k < es; k++)
            ok &= ((unsigned char *)buf[2])[(size_t)e * es + k] == 0xa5;
    free(seen);
    return ok;
}

static void run_case(const mm_case *t, const char *what)
{
    kern_matmul_desc d;
    void *buf[3];
    int64_t need[3];
    char err[256] = "";
    setup_case(t, &d, buf, need);
    int rc = kern_matmul(&d, buf[0], buf[1], buf[2], err, sizeof err);
    CHECK(rc == 0, "%s %s M=%lld K=%lld N=%lld: rc %d (%s)", what, k_name[t->dt],
          (long long)t->M, (long long)t->K, (long long)t->N, rc, err);
    if (rc == 0)
        CHECK(verify_case(t, &d, buf, need[2]), "%s %s M=%lld K=%lld N=%lld lay %d/%d/%d: wrong",
              what, k_name[t->dt], (long long)t->M, (long long)t->K, (long long)t->N,
              t->la, t->lb, t->lc);
    for (int o = 0; o < 3; o++)
        free(buf[o]);
}

static const smelt_dtype k_dtypes[] = {SMELT_F32, SMELT_BF16, SMELT_F64, SMELT_F16, SMELT_U8,
                                       SMELT_I8, SMELT_I16, SMELT_I32, SMELT_I64};
#define NDT (sizeof k_dtypes / sizeof *k_dtypes)

static void test_mm_sizes(void)
{
    static const int64_t sz[] = {1, 7, 17, 33};
    for (size_t t = 0; t < NDT; t++)
        for (int m = 0; m < 4; m++)
            for (int k = 0; k < 4; k++)
                for (int n = 0; n < 4; n++) {
                    mm_case c = {.dt = k_dtypes[t], .nd = 2, .M = sz[m], .K = sz[k], .N = sz[n]};
                    run_case(&c, "2d");
                }
}

static void test_mm_empty_and_big(void)
{
    static const int64_t mkn[][3] = {{4, 0, 5}, {0, 3, 5}, {4, 3, 0}, {1, 0, 1},
                                     {67, 300, 270}, {3, 1000, 2}};
    for (size_t t = 0; t < NDT; t++)
        for (size_t i = 0; i < sizeof mkn / sizeof *mkn; i++) {
            mm_case c = {.dt = k_dtypes[t], .nd = 2, .M = mkn[i][0], .K = mkn[i][1],
                         .N = mkn[i][2], .lc = L_PAD};
            run_case(&c, "empty/big");
        }
    mm_case z = {.dt = SMELT_F32, .nd = 3, .ab = {0}, .bb = {1}, .M = 4, .K = 5, .N = 6};
    run_case(&z, "zero batch");
}

static void test_mm_layouts(void)
{
    static const int lays[][3] = {
        {L_TRANS, 0, 0}, {0, L_TRANS, 0}, {L_TRANS, L_TRANS, L_TRANS}, {0, 0, L_TRANS},
        {L_PAD, L_PAD, L_PAD}, {L_STEP2, 0, 0}, {0, L_STEP2, L_STEP2},
        {L_ROW0, 0, 0}, {0, L_COL0, 0}, {L_TRANS | L_STEP2, L_TRANS | L_PAD, L_STEP2},
    };
    for (size_t t = 0; t < NDT; t++)
        for (size_t l = 0; l < sizeof lays / sizeof *lays; l++) {
            mm_case c = {.dt = k_dtypes[t], .nd = 2, .M = 17, .K = 33, .N = 7,
                         .la = lays[l][0], .lb = lays[l][1], .lc = lays[l][2]};
            run_case(&c, "layout");
            c.M = 40, c.K = 130, c.N = 33;
            run_case(&c, "layout");
        }
}

static void test_mm_batch(void)
{
    static const mm_case shapes[] = {
        {.nd = 3, .ab = {3}, .bb = {3}, .M = 7, .K = 17, .N = 5},
        {.nd = 3, .ab = {3}, .bb = {1}, .M = 7, .K = 17, .N = 5},
        {.nd = 3, .ab = {1}, .bb = {4}, .M = 1, .K = 9, .N = 33},
        {.nd = 3, .ab = {3}, .bb = {3}, .M = 7, .K = 17, .N = 5, .lb = L_BCAST0},
        {.nd = 3, .ab = {3}, .bb = {3}, .M = 7, .K = 17, .N = 5, .la = L_BCAST0 | L_TRANS},
        {.nd = 3, .ab = {3}, .bb = {3}, .M = 7, .K = 17, .N = 5, .la = L_BATCH_IN,
         .lb = L_TRANS, .lc = L_BATCH_IN},
        {.nd = 4, .ab = {2, 1}, .bb = {1, 3}, .M = 8, .K = 4, .N = 5},
        {.nd = 4, .ab = {2, 3}, .bb = {2, 1}, .M = 33, .K = 7, .N = 17, .la = L_PAD,
         .lb = L_TRANS, .lc = L_BATCH_IN},
        {.nd = 5, .ab = {2, 1, 3}, .bb = {1, 2, 3}, .M = 3, .K = 2, .N = 4, .lb = L_STEP2},
    };
    for (size_t t = 0; t < NDT; t++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            mm_case c = shapes[s];
            c.dt = k_dtypes[t];
            run_case(&c, "batch");
        }
}

/* Every half bit pattern survives a * 1 exactly; a + b rounds to even. */
static void test_mm_half_rounding(void)
{
    kern_matmul_desc d = {.dtype = SMELT_F16, .ndim = 2, .a_dims = {1, 2}, .a_strides = {2, 1},
                          .b_dims = {2, 1}, .b_strides = {1, 1}, .c_dims = {1, 1},
                          .c_strides = {1, 1}};
    char err[256];
    int exact = 1, rounded = 1;
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t a[2] = {(uint16_t)h, 0}, b[2] = {0x3c00, 0}, c = 0;
        kern_matmul(&d, a, b, &c, err, sizeof err);
        double v = half_value((uint16_t)h);
        exact &= isnan(v) ? isnan(half_value(c)) : c == h || (v == 0 && half_value(c) == 0);
        a[1] = (uint16_t)(rnd() & 0xffff), b[1] = 0x3c00;
        kern_matmul(&d, a, b, &c, err, sizeof err);
        double s = (double)(float)(v + half_value(a[1]));
        rounded &= isnan(s) ? isnan(half_value(c)) : c == half_bits(s) || (s == 0 && half_value(c) == 0);
    }
    CHECK(exact, "float16 values pass through exactly");
    CHECK(rounded, "float16 sums round to nearest even");
}

/* v rounded to `bits` significant bits, to nearest even (normal range). */
static double round_sig(double v, int bits)
{
    int e;
    if (v == 0 || !isfinite(v))
        return v;
    frexp(v, &e);
    return ldexp(nearbyint(ldexp(v, bits - e)), e - bits);
}

/* bf16 a + b (1x2 @ 2x1 with ones) rounds to nearest even, with a
 * contiguous (oneDNN where the CPU has bf16 instructions) and with a column
 * stride of 2 (always the portable kernel). */
static void test_mm_bf16_rounding(void)
{
    for (int step = 1; step <= 2; step++) {
        kern_matmul_desc d = {.dtype = SMELT_BF16, .ndim = 2, .a_dims = {1, 2},
                              .a_strides = {2 * step, step}, .b_dims = {2, 1},
                              .b_strides = {1, 1}, .c_dims = {1, 1}, .c_strides = {1, 1}};
        int ok = 1;
        for (int r = 0; r < 20000; r++) {
            uint16_t a[4], b[2] = {0x3f80, 0x3f80}, c = 0;
            for (int i = 0; i < 4; i++)     /* sign, exponent 120..135, any mantissa */
                a[i] = (uint16_t)((rnd() & 0x8000) | (120 + rnd() % 16) << 7 | (rnd() & 0x7f));
            kern_matmul(&d, a, b, &c, NULL, 0);
            double s = round_sig((float)(bf16_value(a[0]) + bf16_value(a[step])), 8);
            ok &= bf16_value(c) == s;
        }
        CHECK(ok, "bfloat16 sums round to nearest even (%s)", step == 1 ? "contiguous" : "strided");
    }
}

static void test_mm_nan(void)
{
    static const smelt_dtype dts[] = {SMELT_F32, SMELT_F64, SMELT_F16};
    for (int t = 0; t < 3; t++) {
        mm_case c = {.dt = dts[t], .nd = 2, .M = 5, .K = 9, .N = 6, .la = L_STEP2};
        kern_matmul_desc d;
        void *buf[3];
        int64_t need[3];
        char err[256];
        setup_case(&c, &d, buf, need);
        if (dts[t] == SMELT_F32)
            ((float *)buf[0])[0] = NAN;
        else if (dts[t] == SMELT_F64)
            ((double *)buf[0])[0] = NAN;
        else
            ((uint16_t *)buf[0])[0] = 0x7e00;
        kern_matmul(&d, buf[0], buf[1], buf[2], err, sizeof err);
        int ok = 1;
        for (int64_t j = 0; j < c.N; j++)
            ok &= isnan(get_f(c.dt, buf[2], j * d.c_strides[1]));
        CHECK(ok, "NaN propagates through %s matmul", k_name[c.dt]);
        for (int o = 0; o < 3; o++)
            free(buf[o]);
    }
}

static void expect_error(kern_matmul_desc *d, const char *what)
{
    char err[256] = "";
    float a[64] = {0}, b[64] = {0}, c[64] = {0};
    int rc = kern_matmul(d, a, b, c, err, sizeof err);
    CHECK(rc == -1 && strncmp(err, "matmul: ", 8) == 0, "%s: rc %d err '%s'", what, rc, err);
}

static void test_mm_errors(void)
{
    kern_matmul_desc ok = {.dtype = SMELT_F32, .ndim = 2, .a_dims = {2, 3}, .a_strides = {3, 1},
                           .b_dims = {3, 4}, .b_strides = {4, 1}, .c_dims = {2, 4},
                           .c_strides = {4, 1}};
    kern_matmul_desc d = ok;
    d.b_dims[0] = 5;
    expect_error(&d, "inner dims differ");
    d = ok, d.c_dims[1] = 5;
    expect_error(&d, "output shape wrong");
    d = ok, d.ndim = 1;
    expect_error(&d, "ndim 1");
    d = ok, d.ndim = SMELT_MAX_DIMS + 1;
    expect_error(&d, "ndim too large");
    d = ok, d.dtype = SMELT_BOOL;
    expect_error(&d, "bool");
    d = ok, d.dtype = (smelt_dtype)99;
    expect_error(&d, "bad dtype");
    d = ok, d.a_strides[0] = -1;
    expect_error(&d, "negative stride");
    d = ok, d.c_strides[0] = 0;
    expect_error(&d, "output stride 0");
    kern_matmul_desc e = {.dtype = SMELT_F32, .ndim = 3, .a_dims = {2, 2, 3},
                          .a_strides = {6, 3, 1}, .b_dims = {3, 3, 4}, .b_strides = {12, 4, 1},
                          .c_dims = {3, 2, 4}, .c_strides = {8, 4, 1}};
    expect_error(&e, "batch dims do not broadcast");
    CHECK(kern_matmul(&ok, (float[6]){0}, (float[12]){0}, (float[8]){0}, NULL, 0) == 0,
          "NULL err buffer is fine on success");
}

/* A primcache entry keyed by one integer; key 0 fails to be created. */
typedef struct pc_entry {
    kern_primcache_entry ce;
    int64_t key;
} pc_entry;

static int g_pc_made, g_pc_live;

static void *pc_create(const void *key)
{
    int64_t k = *(const int64_t *)key;
    pc_entry *e = k ? calloc(1, sizeof *e) : NULL;
    if (e) {
        e->key = k;
        g_pc_made++, g_pc_live++;
    }
    return e;
}

static void pc_destroy(void *e)
{
    g_pc_live--;
    free(e);
}

static pc_entry *pc_get(kern_primcache *c, int64_t k)
{
    return kern_primcache_get(c, &k);
}

/* pc_get then release; the entry (or NULL). */
static pc_entry *pc_touch(kern_primcache *c, int64_t k)
{
    pc_entry *e = pc_get(c, k);
    if (e)
        kern_primcache_release(c, e);
    return e;
}

/* The shared primitive cache on its own (one set of two ways): hits, LRU
 * eviction, references held across eviction and clear, failed creation. */
static void test_primcache(void)
{
    static kern_primcache_entry *slots[2];
    static kern_primcache c = KERN_PRIMCACHE_INIT(slots, 1, 2, pc_entry, key, pc_create,
                                                  pc_destroy);
    pc_entry *e1 = pc_touch(&c, 1);
    CHECK(e1 && e1->key == 1 && pc_touch(&c, 1) == e1 && g_pc_made == 1, "primcache hit");
    pc_touch(&c, 2);
    pc_touch(&c, 1);
    pc_touch(&c, 3);                         /* evicts 2, the least recently used */
    CHECK(g_pc_made == 3 && g_pc_live == 2, "primcache eviction: made %d live %d", g_pc_made,
          g_pc_live);
    CHECK(pc_touch(&c, 1) == e1 && g_pc_made == 3, "primcache keeps the recent entry");
    pc_touch(&c, 2);
    CHECK(g_pc_made == 4 && g_pc_live == 2, "primcache re-creates the evicted entry");
    pc_entry *held = pc_get(&c, 4);
    pc_touch(&c, 5);
    pc_touch(&c, 6);                         /* 4 is evicted while held */
    CHECK(held && held->key == 4 && g_pc_live == 3, "primcache: held entry outlives eviction");
    kern_primcache_release(&c, held);
    CHECK(g_pc_live == 2, "primcache: last release destroys");
    held = pc_get(&c, 7);
    kern_primcache_clear(&c);
    CHECK(g_pc_live == 1 && held && held->key == 7, "primcache clear keeps held entries");
    kern_primcache_release(&c, held);
    CHECK(g_pc_live == 0, "primcache clear: live %d", g_pc_live);
    CHECK(pc_get(&c, 0) == NULL && g_pc_live == 0, "primcache: failed create gives NULL");
    kern_primcache_clear(&c);
}

/* More distinct shapes than the cache holds, a clear, then reuse. */
static void test_mm_cache(void)
{
    for (int m = 1; m <= 300; m++) {
        mm_case c = {.dt = m % 2 ? SMELT_F32 : SMELT_BF16, .nd = 2, .M = m, .K = 3, .N = 2};
        if (m % 37 == 0)
            run_case(&c, "cache fill");
        else {
            kern_matmul_desc d;
            void *buf[3];
            int64_t need[3];
            setup_case(&c, &d, buf, need);
            CHECK(kern_matmul(&d, buf[0], buf[1], buf[2], NULL, 0) == 0, "cache fill m=%d", m);
            for (int o = 0; o < 3; o++)
                free(buf[o]);
        }
    }
    kern_matmul_cache_clear();
    kern_matmul_cache_clear();
    mm_case c = {.dt = SMELT_F32, .nd = 2, .M = 17, .K = 33, .N = 7};
    run_case(&c, "after cache clear");
}

static void *mm_thread(void *arg)
{
    _Atomic int *bad = arg;
    for (int r = 0; r < 20; r++) {
        mm_case c = {.dt = r % 3 ? SMELT_F32 : SMELT_F64, .nd = 3, .ab = {2}, .bb = {1},
                     .M = 9 + r % 3, .K = 16, .N = 12};
        int before = g_fail;
        run_case(&c, "concurrent");
        if (g_fail != before)
            atomic_fetch_add(bad, 1);
        if (r == 10)
            kern_matmul_cache_clear();
    }
    return NULL;
}

static void test_mm_threads(void)
{
    static const int counts[] = {1, 2, 3};
    for (int i = 0; i < 3; i++) {
        kern_set_num_threads(counts[i]);
        mm_case c = {.dt = SMELT_F32, .nd = 2, .M = 65, .K = 70, .N = 300};
        run_case(&c, "threads");
        c.dt = SMELT_F64;
        run_case(&c, "threads");
    }
    kern_set_num_threads(2);
    _Atomic int bad = 0;
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, mm_thread, &bad);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK(atomic_load(&bad) == 0, "concurrent matmuls");
}

static void time_matmul(void)
{
    float a[16 * 16], b[16 * 16], c[16 * 16];
    for (int i = 0; i < 256; i++)
        a[i] = b[i] = (float)(i % 7);
    kern_matmul_desc d = {.dtype = SMELT_F32, .ndim = 2, .a_dims = {16, 16},
                          .a_strides = {16, 1}, .b_dims = {16, 16}, .b_strides = {16, 1},
                          .c_dims = {16, 16}, .c_strides = {16, 1}};
    kern_matmul(&d, a, b, c, NULL, 0);
    int reps = 2000;
    double t0 = now_s();
    for (int i = 0; i < reps; i++)
        kern_matmul(&d, a, b, c, NULL, 0);
    printf("timing: kern_matmul f32 16x16x16 (oneDNN, cached) %.2f us/call\n",
           (now_s() - t0) / reps * 1e6);
}

int main(void)
{
    alarm(300);
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_pool_coverage();
    test_pool_resize();
    test_pool_nested();
    test_pool_concurrent_callers();
    test_pool_shutdown_and_fork();
    time_pool();
    kern_set_num_threads(2);
    test_mm_sizes();
    test_mm_empty_and_big();
    test_mm_layouts();
    test_mm_batch();
    test_mm_half_rounding();
    test_mm_bf16_rounding();
    test_mm_nan();
    test_mm_errors();
    test_primcache();
    test_mm_cache();
    test_mm_threads();
    time_matmul();
    kern_threadpool_shutdown();
    kern_matmul_cache_clear();
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail != 0;
}
