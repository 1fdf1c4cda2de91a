/* smelt matmul (see matmul.h for the contract).
 *
 * fp32 (and bf16 on CPUs with bf16 instructions) go to oneDNN's matmul
 * primitive when it has an optimised implementation for the operands'
 * layout; the primitive (or the fact that oneDNN only has its slow reference
 * kernel for that layout) is cached per (dtype, dims, strides, thread
 * count). Everything else runs on the portable kernel below: operands are
 * packed tile by tile into the accumulation type (f32 for f32/f16/bf16, f64
 * for f64, wrapping uint64 for integers) and multiplied by a small
 * register-blocked vector kernel, tiles spread over the smelt thread pool.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "matmul.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "half.h"
#include "onednn.h"
#include "primcache.h"
#include "threadpool.h"

/* ------------------------------------------------------------------ dtypes */

static const unsigned char k_esize[SMELT_NDTYPES] = {
    [SMELT_BOOL] = 1, [SMELT_U8] = 1, [SMELT_I8] = 1, [SMELT_I16] = 2,
    [SMELT_I32] = 4, [SMELT_I64] = 8, [SMELT_F16] = 2, [SMELT_BF16] = 2,
    [SMELT_F32] = 4, [SMELT_F64] = 8,
};

/* -------------------------------------------------------------- checking */

static void fmt_dims(char *buf, size_t len, const int64_t *dims, int nd)
{
    size_t at = 0;
    at += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < nd && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
}

static int fail(char *err, size_t errlen, const char *msg, const kern_matmul_desc *d)
{
    char a[160], b[160], c[160];
    fmt_dims(a, sizeof a, d->a_dims, d->ndim);
    fmt_dims(b, sizeof b, d->b_dims, d->ndim);
    fmt_dims(c, sizeof c, d->c_dims, d->ndim);
    if (err && errlen)
        snprintf(err, errlen, "matmul: %s (a %s, b %s, c %s)", msg, a, b, c);
    return -1;
}

/* 0 if d satisfies matmul.h's contract, else -1 with a message. */
static int check_desc(const kern_matmul_desc *d, char *err, size_t errlen)
{
    if (d->ndim < 2 || d->ndim > SMELT_MAX_DIMS) {
        if (err && errlen)
            snprintf(err, errlen, "matmul: ndim %d is outside [2, %d]", d->ndim, SMELT_MAX_DIMS);
        return -1;
    }
    if ((unsigned)d->dtype >= SMELT_NDTYPES || d->dtype == SMELT_BOOL)
        return fail(err, errlen, "unsupported dtype (bool or unknown)", d);
    if (d->c_f32 && d->dtype != SMELT_F16 && d->dtype != SMELT_BF16)
        return fail(err, errlen, "a float32 result of operands other than float16/bfloat16", d);
    int nd = d->ndim;
    for (int i = 0; i < nd; i++)
        if (d->a_dims[i] < 0 || d->b_dims[i] < 0 || d->c_dims[i] < 0 ||
            d->a_strides[i] < 0 || d->b_strides[i] < 0 || d->c_strides[i] < 0)
            return fail(err, errlen, "negative size or stride", d);
    if (d->a_dims[nd - 1] != d->b_dims[nd - 2] || d->c_dims[nd - 2] != d->a_dims[nd - 2] ||
        d->c_dims[nd - 1] != d->b_dims[nd - 1])
        return fail(err, errlen, "matrix sizes do not match", d);
    for (int i = 0; i < nd - 2; i++) {
        int64_t x = d->a_dims[i], y = d->b_dims[i];
        if ((x != y && x != 1 && y != 1) || d->c_dims[i] != (x == 1 ? y : x))
            return fail(err, errlen, "batch dims do not broadcast", d);
    }
    for (int i = 0; i < nd; i++)
        if (d->c_dims[i] > 1 && d->c_strides[i] == 0)
            return fail(err, errlen, "output has stride 0 in a dim of size > 1", d);
    return 0;
}

/* -------------------------------------------------------- portable kernel */

enum {
    MM_MB = 32,             /* rows of C per tile */
    MM_NC = 256,            /* columns of C per tile */
    MM_KC = 128,            /* depth packed at once */
    MM_PAD = 16,            /* packed rows of B/C padded to this many elements */
    MM_GRAIN_MACS = 1 << 16 /* multiply-adds worth waking a thread for */
};

typedef enum mm_acc { MM_ACC_F32, MM_ACC_F64, MM_ACC_U64 } mm_acc;

/* A matmul as the portable kernel sees it: batch dims flattened to one
 * index with per-operand strides (0 where an operand is broadcast), tiles
 * numbered batch-major, then row tile, then column tile. */
typedef struct mm_plan {
    smelt_dtype dt, cdt;     /* of A and B; of C */
    mm_acc acc;
    size_t esz, cesz, accsz;
    int nbd;
    int64_t bdim[SMELT_MAX_DIMS], bsa[SMELT_MAX_DIMS], bsb[SMELT_MAX_DIMS], bsc[SMELT_MAX_DIMS];
    int64_t M, N, K, am, ak, bk, bn, cm, cn;
    int64_t mtiles, ntiles;
    size_t ap_off, bp_off, acc_off, bufsz;   /* per-thread scratch layout */
    const char *a, *b;
    char *c;
    _Atomic int oom;
} mm_plan;

#define MM_PACK(T, ACC, CONV)                                                  \
    do {                                                                       \
        const T *s = src;                                                      \
        ACC *o = dst;                                                          \
        for (int64_t r = 0; r < nr; r++) {                                     \
            for (int64_t c = 0; c < nc; c++)                                   \
                o[r * ld + c] = (ACC)CONV(s[r * rs + c * cs]);                 \
            for (int64_t c = nc; c < ld; c++)                                  \
                o[r * ld + c] = 0;                                             \
        }                                                                      \
    } while (0)

/* Copies the nr x nc block at src (element strides rs, cs) into dst as the
 * accumulation type, rows ld apart, zero-filling columns [nc, ld). */
static void mm_pack(smelt_dtype dt, const void *src, int64_t nr, int64_t nc,
                    int64_t rs, int64_t cs, void *dst, int64_t ld)
{
    switch (dt) {
    case SMELT_F32: MM_PACK(float, float, ); break;
    case SMELT_F16: MM_PACK(uint16_t, float, kern_f16_to_f32); break;
    case SMELT_BF16: MM_PACK(uint16_t, float, kern_bf16_to_f32); break;
    case SMELT_F64: MM_PACK(double, double, ); break;
    case SMELT_U8: MM_PACK(uint8_t, uint64_t, ); break;
    case SMELT_I8: MM_PACK(int8_t, uint64_t, (int64_t)); break;
    case SMELT_I16: MM_PACK(int16_t, uint64_t, (int64_t)); break;
    case SMELT_I32: MM_PACK(int32_t, uint64_t, (int64_t)); break;
    case SMELT_I64: MM_PACK(int64_t, uint64_t, (int64_t)); break;
    default: break;
    }
}

#define MM_STORE(T, ACC, CONV)                                                 \
    do {                                                                       \
        const ACC *s = src;                                                    \
        T *o = dst;                                                            \
        for (int64_t r = 0; r < nr; r++)                                       \
            for (int64_t c = 0; c < nc; c++)                                   \
                o[r * rs + c * cs] = (T)CONV(s[r * ld + c]);                   \
    } while (0)

/* Writes the nr x nc accumulator block (rows ld apart) to dst (element
 * strides rs, cs), rounding to nearest even / wrapping like torch. */
static void mm_store(smelt_dtype dt, const void *src, int64_t nr, int64_t nc, int64_t ld,
                     void *dst, int64_t rs, int64_t cs)
{
    switch (dt) {
    case SMELT_F32: MM_STORE(float, float, ); break;
    case SMELT_F16: MM_STORE(uint16_t, float, kern_f32_to_f16); break;
    case SMELT_BF16: MM_STORE(uint16_t, float, kern_f32_to_bf16); break;
    case SMELT_F64: MM_STORE(double, double, ); break;
    case SMELT_U8: MM_STORE(uint8_t, uint64_t, ); break;
    case SMELT_I8: MM_STORE(int8_t, uint64_t, ); break;
    case SMELT_I16: MM_STORE(int16_t, uint64_t, ); break;
    case SMELT_I32: MM_STORE(int32_t, uint64_t, ); break;
    case SMELT_I64: MM_STORE(int64_t, uint64_t, ); break;
    default: break;
    }
}

/* Generic vectors of 64 bytes: one zmm, two ymm or four xmm registers. */
typedef float mm_vf __attribute__((vector_size(64)));
typedef double mm_vd __attribute__((vector_size(64)));
typedef uint64_t mm_vu __attribute__((vector_size(64)));

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define MM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MM_CLONES
#endif

#define MM_LOAD(v, p) memcpy(&(v), (p), sizeof(v))

/* acc[rows][nbp] += ap[rows][kb] * bp[kb][nbp]; nbp is a multiple of the
 * vector width. Four rows of one vector column stay in registers over k. */
#define MM_GEMM(SFX, ACC, VEC)                                                 \
    MM_CLONES static void mm_gemm_##SFX(int64_t rows, int64_t kb, int64_t nbp, \
                                        const void *ap_, const void *bp_, void *acc_) \
    {                                                                          \
        const int64_t w = (int64_t)(sizeof(VEC) / sizeof(ACC));                \
        const ACC *ap = ap_, *bp = bp_;                                        \
        ACC *acc = acc_;                                                       \
        for (int64_t j = 0; j < nbp; j += w) {                                 \
            int64_t i = 0;                                                     \
            for (; i + 4 <= rows; i += 4) {                                    \
                const ACC *a0 = ap + i * kb, *a1 = a0 + kb, *a2 = a1 + kb, *a3 = a2 + kb; \
                ACC *c = acc + i * nbp + j;                                    \
                VEC c0, c1, c2, c3, b;                                         \
                MM_LOAD(c0, c); MM_LOAD(c1, c + nbp);                          \
                MM_LOAD(c2, c + 2 * nbp); MM_LOAD(c3, c + 3 * nbp);            \
                for (int64_t k = 0; k < kb; k++) {                             \
                    MM_LOAD(b, bp + k * nbp + j);                              \
                    c0 += a0[k] * b; c1 += a1[k] * b;                          \
                    c2 += a2[k] * b; c3 += a3[k] * b;                          \
                }                                                              \
                memcpy(c, &c0, sizeof c0); memcpy(c + nbp, &c1, sizeof c1);    \
                memcpy(c + 2 * nbp, &c2, sizeof c2); memcpy(c + 3 * nbp, &c3, sizeof c3); \
            }                                                                  \
            for (; i < rows; i++) {                                            \
                const ACC *a0 = ap + i * kb;                                   \
                ACC *c = acc + i * nbp + j;                                    \
                VEC c0, b;                                                     \
                MM_LOAD(c0, c);                                                \
                for (int64_t k = 0; k < kb; k++) {                             \
                    MM_LOAD(b, bp + k * nbp + j);                              \
                    c0 += a0[k] * b;                                           \
                }                                                              \
                memcpy(c, &c0, sizeof c0);                                     \
            }                                                                  \
        }                                                                      \
    }

MM_GEMM(f32, float, mm_vf)
MM_GEMM(f64, double, mm_vd)
MM_GEMM(u64, uint64_t, mm_vu)

static void mm_gemm(mm_acc acc, int64_t rows, int64_t kb, int64_t nbp,
                    const void *ap, const void *bp, void *c)
{
    if (acc == MM_ACC_F32)
        mm_gemm_f32(rows, kb, nbp, ap, bp, c);
    else if (acc == MM_ACC_F64)
        mm_gemm_f64(rows, kb, nbp, ap, bp, c);
    else
        mm_gemm_u64(rows, kb, nbp, ap, bp, c);
}

static int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }
static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Element offsets of batch bi in a, b and c. */
static void mm_batch_offsets(const mm_plan *p, int64_t bi, int64_t off[3])
{
    off[0] = off[1] = off[2] = 0;
    for (int d = p->nbd - 1; d >= 0; d--) {
        int64_t i = bi % p->bdim[d];
        bi /= p->bdim[d];
        off[0] += i * p->bsa[d];
        off[1] += i * p->bsb[d];
        off[2] += i * p->bsc[d];
    }
}

/* Computes tile t (see mm_plan) using the scratch buffer buf. */
static void mm_tile(const mm_plan *p, int64_t t, char *buf)
{
    int64_t per_batch = p->mtiles * p->ntiles, off[3];
    mm_batch_offsets(p, t / per_batch, off);
    int64_t i0 = (t % per_batch) / p->ntiles * MM_MB, j0 = t % p->ntiles * MM_NC;
    int64_t rows = min64(MM_MB, p->M - i0), cols = min64(MM_NC, p->N - j0);
    int64_t nbp = round_up(cols, MM_PAD);
    void *ap = buf + p->ap_off, *bp = buf + p->bp_off, *acc = buf + p->acc_off;
    memset(acc, 0, (size_t)(rows * nbp) * p->accsz);
    for (int64_t k0 = 0; k0 < p->K; k0 += MM_KC) {
        int64_t kb = min64(MM_KC, p->K - k0);
        mm_pack(p->dt, p->a + (size_t)(off[0] + i0 * p->am + k0 * p->ak) * p->esz,
                rows, kb, p->am, p->ak, ap, kb);
        mm_pack(p->dt, p->b + (size_t)(off[1] + k0 * p->bk + j0 * p->bn) * p->esz,
                kb, cols, p->bk, p->bn, bp, nbp);
        mm_gemm(p->acc, rows, kb, nbp, ap, bp, acc);
    }
    mm_store(p->cdt, acc, rows, cols, nbp,
             p->c + (size_t)(off[2] + i0 * p->cm + j0 * p->cn) * p->cesz, p->cm, p->cn);
}

/* kern_range_fn over tiles; scratch is allocated once per chunk. */
static void mm_range(void *ctx, int64_t begin, int64_t end)
{
    mm_plan *p = ctx;
    char *buf = aligned_alloc(64, p->bufsz);
    if (!buf) {
        atomic_store(&p->oom, 1);
        return;
    }
    for (int64_t t = begin; t < end; t++)
        mm_tile(p, t, buf);
    free(buf);
}

/* Fills the portable kernel's view of a validated d with M, N, K > 0. */
static void mm_plan_init(mm_plan *p, const kern_matmul_desc *d)
{
    int nd = d->ndim;
    p->dt = d->dtype;
    p->acc = d->dtype == SMELT_F64 ? MM_ACC_F64
             : (d->dtype == SMELT_F32 || d->dtype == SMELT_F16 || d->dtype == SMELT_BF16)
                 ? MM_ACC_F32 : MM_ACC_U64;
    p->esz = k_esize[d->dtype];
    p->cdt = d->c_f32 ? SMELT_F32 : d->dtype;
    p->cesz = k_esize[p->cdt];
    p->accsz = p->acc == MM_ACC_F32 ? 4 : 8;
    p->nbd = nd - 2;
    for (int i = 0; i < nd - 2; i++) {
        p->bdim[i] = d->c_dims[i];
        p->bsa[i] = d->a_dims[i] == 1 ? 0 : d->a_strides[i];
        p->bsb[i] = d->b_dims[i] == 1 ? 0 : d->b_strides[i];
        p->bsc[i] = d->c_strides[i];
    }
    p->M = d->c_dims[nd - 2], p->N = d->c_dims[nd - 1], p->K = d->a_dims[nd - 1];
    p->am = d->a_strides[nd - 2], p->ak = d->a_strides[nd - 1];
    p->bk = d->b_strides[nd - 2], p->bn = d->b_strides[nd - 1];
    p->cm = d->c_strides[nd - 2], p->cn = d->c_strides[nd - 1];
    p->mtiles = (p->M + MM_MB - 1) / MM_MB;
    p->ntiles = (p->N + MM_NC - 1) / MM_NC;
    int64_t rows = min64(p->M, MM_MB), kb = min64(p->K, MM_KC);
    int64_t nbp = round_up(min64(p->N, MM_NC), MM_PAD);
    p->ap_off = 0;
    p->bp_off = (size_t)round_up(rows * kb * (int64_t)p->accsz, 64);
    p->acc_off = p->bp_off + (size_t)round_up(kb * nbp * (int64_t)p->accsz, 64);
    p->bufsz = p->acc_off + (size_t)round_up(rows * nbp * (int64_t)p->accsz, 64);
    atomic_init(&p->oom, 0);
}

/* The portable kernel for a validated d with M, N, K and batch > 0. */
static int mm_portable(const kern_matmul_desc *d, const void *a, const void *b, void *c,
                       int64_t nbatch, char *err, size_t errlen)
{
    mm_plan p;
    mm_plan_init(&p, d);
    p.a = a, p.b = b, p.c = c;
    int64_t tile_macs = min64(p.M, MM_MB) * min64(p.N, MM_NC) * p.K;
    int64_t grain = tile_macs >= MM_GRAIN_MACS ? 1 : MM_GRAIN_MACS / tile_macs;
    kern_parallel_for(nbatch * p.mtiles * p.ntiles, grain, mm_range, &p);
    if (atomic_load(&p.oom)) {
        if (err && errlen)
            snprintf(err, errlen, "matmul: out of memory for %zu bytes of scratch", p.bufsz);
        return -1;
    }
    return 0;
}

/* K == 0: every element of c is a sum of nothing. */
static void mm_zero(const kern_matmul_desc *d, void *c, int64_t nrows)
{
    mm_plan p;
    mm_plan_init(&p, d);
    for (int64_t r = 0; r < nrows; r++) {
        int64_t off[3];
        mm_batch_offsets(&p, r / p.M, off);
        char *row = (char *)c + (size_t)(off[2] + r % p.M * p.cm) * p.cesz;
        for (int64_t j = 0; j < p.N; j++)
            memset(row + (size_t)(j * p.cn) * p.cesz, 0, p.cesz);
    }
}

/* ----------------------------------------------------------------- oneDNN */

/* Operands as given to oneDNN: v[0..5] = a dims, a strides, b dims, b
 * strides, c dims, c strides, zero beyond ndim (keys compare bytewise). */
typedef struct mm_key {
    int32_t dtype, ndim, nthreads, c_f32;
    int64_t v[6][SMELT_MAX_DIMS];
} mm_key;

/* A cache entry (kernels/primcache.h). prim NULL: oneDNN has only its
 * reference kernel (or nothing) for this key, so the portable kernel runs
 * instead. */
typedef struct mm_entry {
    kern_primcache_entry ce;
    mm_key key;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t scratch_md;   /* user scratchpad (see mm_dnnl_exec) */
    size_t scratch_bytes;
} mm_entry;

/* Canonical oneDNN operands for a validated d: a stride-0 batch dim becomes
 * a size-1 dim (oneDNN's broadcast), size-1 dims get dense strides. */
static void mm_make_key(const kern_matmul_desc *d, int nthreads, mm_key *k)
{
    const int64_t *src[6] = {d->a_dims, d->a_strides, d->b_dims, d->b_strides,
                             d->c_dims, d->c_strides};
    int nd = d->ndim;
    memset(k, 0, sizeof *k);
    k->dtype = d->dtype, k->ndim = nd, k->nthreads = nthreads, k->c_f32 = d->c_f32;
    for (int i = 0; i < 6; i++)
        memcpy(k->v[i], src[i], (size_t)nd * sizeof(int64_t));
    for (int o = 0; o < 4; o += 2)
        for (int i = 0; i < nd - 2; i++)
            if (k->v[o + 1][i] == 0)
                k->v[o][i] = 1;
    for (int o = 0; o < 6; o += 2)
        kern_onednn_fix_unit_strides(nd, k->v[o], k->v[o + 1]);
}

static dnnl_status_t mm_key_mds(const mm_key *k, dnnl_memory_desc_t md[3])
{
    dnnl_data_type_t dt = k->dtype == SMELT_BF16 ? dnnl_bf16 : dnnl_f32;
    dnnl_status_t st = dnnl_success;
    for (int o = 0; o < 3 && st == dnnl_success; o++)
        st = dnnl_memory_desc_init_by_strides(&md[o], k->ndim, k->v[2 * o], o == 2 && k->c_f32 ? dnnl_f32 : dt,
                                              k->v[2 * o + 1]);
    return st;
}

/* oneDNN's primitive for e->key into e->prim (with its scratchpad's
 * descriptor), or NULL where it has only a reference kernel (slower than
 * the portable one) or fails. */
static void mm_create_prim(mm_entry *e)
{
    dnnl_memory_desc_t md[3];
    dnnl_matmul_desc_t mmd;
    dnnl_primitive_desc_t pd = NULL;
    e->prim = NULL;
    if (mm_key_mds(&e->key, md) != dnnl_success ||
        dnnl_matmul_desc_init(&mmd, &md[0], &md[1], NULL, &md[2]) != dnnl_success ||
        !(pd = kern_onednn_pd_create(&mmd)))
        return;
    e->prim = kern_onednn_prim_create(pd, &e->scratch_md, &e->scratch_bytes);
    dnnl_primitive_desc_destroy(pd);
}

/* kern_primcache create: an entry for key with its primitive (if any);
 * NULL if out of memory. */
static void *mm_entry_new(const void *key)
{
    mm_entry *e = calloc(1, sizeof *e);
    if (e) {
        e->key = *(const mm_key *)key;
        mm_create_prim(e);
    }
    return e;
}

/* kern_primcache destroy. */
static void mm_entry_free(void *entry)
{
    mm_entry *e = entry;
    if (e->prim)
        dnnl_primitive_destroy(e->prim);
    free(e);
}

enum { MM_SETS = 32, MM_WAYS = 8 };     /* 256 cached primitives */

static kern_primcache_entry *g_slots[MM_SETS * MM_WAYS];
static kern_primcache g_cache =
    KERN_PRIMCACHE_INIT(g_slots, MM_SETS, MM_WAYS, mm_entry, key, mm_entry_new, mm_entry_free);

static int mm_dnnl_exec(const mm_entry *e, const void *a, const void *b, void *c,
                        char *err, size_t errlen)
{
    static const int ids[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
    dnnl_memory_desc_t md[3];
    void *ptr[3] = {(void *)a, (void *)b, c};
    dnnl_status_t st = mm_key_mds(&e->key, md);
    if (st == dnnl_success)
        st = kern_onednn_execute(e->prim, 3, ids, md, ptr, &e->scratch_md, e->scratch_bytes);
    if (st == dnnl_success)
        return 0;
    if (err && errlen)
        snprintf(err, errlen, "matmul: oneDNN failed: %s", dnnl_status2str(st));
    return -1;
}

#define MM_DECLINED 1

/* Runs a validated fp32/bf16 d with M, N, K > 0 on oneDNN with nt OpenMP
 * threads (1: smelt's pool splits the work, see mm_onednn; the primitives
 * of each count cached apart): 0 done, -1 error, MM_DECLINED if oneDNN has
 * no fast kernel for the dtype or layout (or is unavailable) and the
 * portable kernel should run. */
static int mm_onednn_threads(const kern_matmul_desc *d, const void *a, const void *b, void *c, int nt,
                             char *err, size_t errlen)
{
    int saved = kern_onednn_threads_begin(nt);
    mm_key k;
    mm_make_key(d, nt > 1 ? nt : kern_onednn_pins_threads(), &k);
    mm_entry *e = kern_primcache_get(&g_cache, &k);
    int rc = MM_DECLINED;
    if (e && e->prim)
        rc = mm_dnnl_exec(e, a, b, c, err, errlen);
    if (e)
        kern_primcache_release(&g_cache, e);
    kern_onednn_serial_end(saved);
    return rc;
}

static int mm_onednn_one(const kern_matmul_desc *d, const void *a, const void *b, void *c,
                         char *err, size_t errlen)
{
    return mm_onednn_threads(d, a, b, c, 1, err, errlen);
}

/* Columns of C a thread's piece of a column split is a multiple of. */
#define MM_COL_UNIT 64

/* A piece of a matmul: rows (or batch entries) [begin, end) along dim s,
 * or columns of C in units of MM_COL_UNIT when s is the last dim. */
typedef struct mm_split {
    const kern_matmul_desc *d;
    const char *a, *b;
    char *c;
    int s, rc, declined;
    size_t es, ces;          /* element bytes of A and B; of C */
    char err[256];
} mm_split;

static void mm_split_range(void *ctx, int64_t begin, int64_t end)
{
    mm_split *m = ctx;
    kern_matmul_desc p = *m->d;
    int s = m->s, nd = p.ndim;
    const char *a = m->a, *b = m->b;
    if (s == nd - 1) {                 /* columns, in units of MM_COL_UNIT */
        begin *= MM_COL_UNIT;
        end = end * MM_COL_UNIT < p.c_dims[s] ? end * MM_COL_UNIT : p.c_dims[s];
    }
    char *c = m->c + (size_t)(begin * p.c_strides[s]) * m->ces;
    p.c_dims[s] = end - begin;
    if (s != nd - 1 && (p.a_dims[s] != 1 || s == nd - 2)) {
        a += (size_t)(begin * p.a_strides[s]) * m->es;
        p.a_dims[s] = end - begin;
    }
    if (s != nd - 2 && p.b_dims[s] != 1) {
        b += (size_t)(begin * p.b_strides[s]) * m->es;
        p.b_dims[s] = end - begin;
    }
    char err[256];
    int rc = mm_onednn_one(&p, a, b, c, err, sizeof err);
    if (rc == MM_DECLINED)
        m->declined = 1;
    else if (rc) {
        m->rc = rc;
        snprintf(m->err, sizeof m->err, "%s", err);
    }
}

/* Floating-point operations from which a product that is not split along
 * a batch dim runs on oneDNN's own OpenMP team of nt threads: oneDNN
 * blocks a large GEMM across its threads better than whole row or column
 * pieces do (its B reorder is shared; bf16 256x4096x4096 on 2 threads:
 * 9.2 ms vs 9.9 split, eager 9.3; float32 18.2 vs 20.0), and at this size
 * the team's spin after the call is lost in the noise. */
#define MM_TEAM_FLOPS 5e7

/* oneDNN runs each call single-threaded: its OpenMP team would otherwise
 * spin against smelt's own thread pool (milliseconds lost per call on a
 * busy machine). The work is split across smelt's pool instead, along the
 * outermost batch dim when it is large enough, else along the longer of
 * the rows and the columns of C: each thread then streams its own part of
 * the larger operand and all of the smaller one (a row split of a weight-
 * bound product - 256 rows against a 4096x4096 weight - had every thread
 * read the whole weight: 2x the memory traffic). */
static int mm_fold(const kern_matmul_desc *d, kern_matmul_desc *f);

static int mm_onednn(const kern_matmul_desc *d, const void *a, const void *b, void *c,
                     char *err, size_t errlen)
{
    if (!kern_onednn_engine() || (d->dtype == SMELT_BF16 && !kern_onednn_native_bf16()))
        return MM_DECLINED;
    /* one B for every batch entry (a linear layer on [batch, seq, in]): one
     * 2-d product over all the rows, not a product per batch entry each
     * reading all of B */
    kern_matmul_desc folded;
    if (d->ndim > 2 && mm_fold(d, &folded) == 0)
        d = &folded;
    int nd = d->ndim, nt = kern_get_num_threads();
    double flops = 2.0 * (double)d->c_dims[nd - 2] * (double)d->c_dims[nd - 1] * (double)d->a_dims[nd - 1];
    for (int i = 0; i < nd - 2; i++)
        flops *= (double)d->c_dims[i];
    int s = (nd > 2 && d->c_dims[0] >= nt) ? 0 : nd - 2;
    int64_t M = d->c_dims[nd - 2], N = d->c_dims[nd - 1];
    if (nt > 1 && s == nd - 2 && flops >= MM_TEAM_FLOPS && kern_onednn_pins_threads())
        return mm_onednn_threads(d, a, b, c, nt, err, errlen);
    if (s == nd - 2 && N > M && N >= 2 * MM_COL_UNIT)
        s = nd - 1;
    if (nt <= 1 || flops < 2e5 || d->c_dims[s] < 2)
        return mm_onednn_one(d, a, b, c, err, errlen);
    mm_split m = { .d = d, .a = a, .b = b, .c = c, .s = s, .es = d->dtype == SMELT_F32 ? 4 : 2,
                   .ces = d->dtype == SMELT_F32 || d->c_f32 ? 4 : 2 };
    int64_t n = s == nd - 1 ? (N + MM_COL_UNIT - 1) / MM_COL_UNIT : d->c_dims[s];
    kern_parallel_for(n, (n + nt - 1) / nt, mm_split_range, &m);
    if (m.rc) {
        snprintf(err, errlen, "%s", m.err);
        return -1;
    }
    return m.declined ? MM_DECLINED : 0;
}

/* ------------------------------------------------------------ packed B */

/* MKL's packed sgemm, as the torch library in this process exports it
 * (cblas_sgemm_pack / cblas_sgemm_compute, LP64); absent without torch. */
typedef struct mm_mkl {
    size_t (*get_size)(int id, int m, int n, int k);
    void (*pack)(int layout, int id, int trans, int m, int n, int k, float alpha, const float *src,
                 int ld, float *dest);
    void (*compute)(int layout, int transa, int transb, int m, int n, int k, const float *a, int lda,
                    const float *b, int ldb, float beta, float *c, int ldc);
    int (*set_local)(int nt);        /* MKL threads of this thread; returns the previous */
    void (*sgemm)(const char *ta, const char *tb, const int *m, const int *n, const int *k, const float *alpha,
                  const float *a, const int *lda, const float *b, const int *ldb, const float *beta, float *c,
                  const int *ldc);     /* Fortran sgemm_ (column-major), or NULL */
} mm_mkl;

enum { MKL_ROW_MAJOR = 101, MKL_NO_TRANS = 111, MKL_TRANS = 112, MKL_PACKED = 151, MKL_B = 162 };

static mm_mkl g_mkl;
static pthread_once_t g_mkl_once = PTHREAD_ONCE_INIT;

static void mm_mkl_init(void)
{
    void *h = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);
    mm_mkl m;
    if (!h)
        return;
    *(void **)&m.get_size = dlsym(h, "cblas_sgemm_pack_get_size");
    *(void **)&m.pack = dlsym(h, "cblas_sgemm_pack");
    *(void **)&m.compute = dlsym(h, "cblas_sgemm_compute");
    *(void **)&m.set_local = dlsym(h, "MKL_Set_Num_Threads_Local");
    *(void **)&m.sgemm = dlsym(h, "sgemm_");
    if (m.get_size && m.pack && m.compute && m.set_local)
        g_mkl = m;
}

/* MKL's packed sgemm, or NULL where this process has none. */
static const mm_mkl *mm_mkl_api(void)
{
    pthread_once(&g_mkl_once, mm_mkl_init);
    return g_mkl.compute ? &g_mkl : NULL;
}

/* One packed copy of B for pieces of m rows, and what it was packed from
 * (src pointer, stamp, B's K, N and strides). Immutable once made; refs
 * counts the slot's reference and one per run using it. */
typedef struct mm_packed {
    int refs;
    const void *src;
    kern_matmul_stamp stamp;
    int64_t m, kn[4];
    int64_t bytes;
    float *data;
} mm_packed;

/* Bytes of the live packed copies, and the budget for new ones (-1: the
 * default, computed on first use). */
static _Atomic int64_t g_pack_live;
static _Atomic int64_t g_pack_budget = -1;

#define MM_PACK_BUDGET_CAP (64ll << 20)
#define MM_PACK_AUTO_ROWS 2
#define MM_PACK_AUTO_BYTES (16ll << 20)

void kern_matmul_pack_budget_set(int64_t bytes)
{
    atomic_store(&g_pack_budget, bytes < 0 ? -1 : bytes);
}

int64_t kern_matmul_pack_budget(void)
{
    int64_t b = atomic_load(&g_pack_budget);
    if (b >= 0)
        return b;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    b = pages > 0 && psz > 0 ? (int64_t)pages * psz / 64 : 0;
    return b < MM_PACK_BUDGET_CAP ? b : MM_PACK_BUDGET_CAP;
}

int64_t kern_matmul_pack_live(void)
{
    return atomic_load(&g_pack_live);
}

struct kern_matmul_pack {
    pthread_mutex_t mu;            /* guards cur and every refs */
    mm_packed *cur;                /* the latest copy, or NULL */
};

kern_matmul_pack *kern_matmul_pack_new(void)
{
    kern_matmul_pack *pk = calloc(1, sizeof *pk);
    if (pk && pthread_mutex_init(&pk->mu, NULL) != 0) {
        free(pk);
        pk = NULL;
    }
    return pk;
}

static void mm_packed_drop(mm_packed *q)
{
    if (q && --q->refs == 0) {
        atomic_fetch_sub(&g_pack_live, q->bytes);
        free(q->data);
        free(q);
    }
}

void kern_matmul_pack_release(kern_matmul_pack *pk)
{
    if (!pk)
        return;
    pthread_mutex_lock(&pk->mu);
    mm_packed_drop(pk->cur);
    pk->cur = NULL;
    pthread_mutex_unlock(&pk->mu);
}

void kern_matmul_pack_free(kern_matmul_pack *pk)
{
    if (!pk)
        return;
    mm_packed_drop(pk->cur);
    pthread_mutex_destroy(&pk->mu);
    free(pk);
}

/* MKL's operand: 1 if a row-major r x c matrix with strides (rs, cs) is
 * one (transposed or not) with its leading dimension in *ld, else 0. */
static int mm_mkl_operand(int64_t r, int64_t c, int64_t rs, int64_t cs, int *trans, int *ld)
{
    if (r > INT32_MAX / 2 || c > INT32_MAX / 2)
        return 0;
    if (cs == 1 && rs >= (c > 1 ? c : 1) && rs <= INT32_MAX)
        return *trans = MKL_NO_TRANS, *ld = (int)rs, 1;
    if (rs == 1 && cs >= (r > 1 ? r : 1) && cs <= INT32_MAX)
        return *trans = MKL_TRANS, *ld = (int)cs, 1;
    return 0;
}

/* A new copy of B (K x N at b, strides kn[2..3]) packed for pieces of m
 * rows, or NULL (out of memory, a layout MKL does not take, or - unless
 * always - live copies plus this one, less `freed` bytes about to go,
 * over the budget). */
static mm_packed *mm_packed_make(const mm_mkl *mk, const void *b, const int64_t kn[4], int64_t m, int always,
                                 int64_t freed)
{
    int trans, ld;
    if (!mm_mkl_operand(kn[0], kn[1], kn[2], kn[3], &trans, &ld))
        return NULL;
    size_t bytes = mk->get_size(MKL_B, (int)m, (int)kn[1], (int)kn[0]);
    size_t rounded = (bytes + 63) / 64 * 64;
    if (!always && atomic_load(&g_pack_live) - freed + (int64_t)rounded > kern_matmul_pack_budget())
        return NULL;
    mm_packed *q = calloc(1, sizeof *q);
    if (!q || !(q->data = aligned_alloc(64, rounded))) {
        free(q);
        return NULL;
    }
    q->bytes = (int64_t)rounded;
    atomic_fetch_add(&g_pack_live, q->bytes);
    int saved = mk->set_local(1);
    mk->pack(MKL_ROW_MAJOR, MKL_B, trans, (int)m, (int)kn[1], (int)kn[0], 1.0f, b, ld, q->data);
    mk->set_local(saved);
    q->m = m;
    memcpy(q->kn, kn, sizeof q->kn);
    return q;
}

static int mm_packed_matches(const mm_packed *q, const void *b, const int64_t kn[4],
                             const kern_matmul_stamp *stamp, int64_t m)
{
    return q && q->src == b && q->stamp.owner == stamp->owner && q->m == m &&
           q->stamp.version == stamp->version && !memcmp(q->kn, kn, sizeof q->kn);
}

/* pk's copy of b for pieces of m rows, packed now unless the current one
 * matches (b, stamp, m); a reference for the caller, or NULL (fall back). */
static mm_packed *mm_pack_get(kern_matmul_pack *pk, const mm_mkl *mk, const void *b, const int64_t kn[4],
                              const kern_matmul_stamp *stamp, int64_t m)
{
    pthread_mutex_lock(&pk->mu);
    mm_packed *q = pk->cur;
    if (!mm_packed_matches(q, b, kn, stamp, m)) {
        int64_t stale = pk->cur && pk->cur->refs == 1 ? pk->cur->bytes : 0;
        if ((q = mm_packed_make(mk, b, kn, m, stamp->always, stale)))
            q->src = b, q->stamp = *stamp, q->refs = 1;
        mm_packed_drop(pk->cur);     /* freed now unless a run still reads it */
        pk->cur = q;
    }
    if (q)
        q->refs++;
    pthread_mutex_unlock(&pk->mu);
    return q;
}

static void mm_pack_put(kern_matmul_pack *pk, mm_packed *q)
{
    pthread_mutex_lock(&pk->mu);
    mm_packed_drop(q);
    pthread_mutex_unlock(&pk->mu);
}

/* d as one 2-d matmul [R, K] @ [K, N] -> [R, N] in f: B the same for
 * every batch entry, A's and C's batch dims folding into their rows.
 * 0, or -1 where d does not fold. */
static int mm_fold(const kern_matmul_desc *d, kern_matmul_desc *f)
{
    int nd = d->ndim;
    int64_t rows = d->c_dims[nd - 2];
    for (int i = nd - 3; i >= 0; i--) {
        if (d->b_dims[i] != 1 && d->b_strides[i] != 0)
            return -1;
        if (d->c_dims[i] == 1)
            continue;
        if (d->a_dims[i] != d->c_dims[i] || d->a_strides[i] != rows * d->a_strides[nd - 2] ||
            d->c_strides[i] != rows * d->c_strides[nd - 2])
            return -1;
        rows *= d->c_dims[i];
    }
    memset(f, 0, sizeof *f);
    f->dtype = d->dtype, f->ndim = 2, f->c_f32 = d->c_f32;
    f->a_dims[0] = f->c_dims[0] = rows;
    f->a_dims[1] = f->b_dims[0] = d->a_dims[nd - 1];
    f->b_dims[1] = f->c_dims[1] = d->c_dims[nd - 1];
    f->a_strides[0] = d->a_strides[nd - 2], f->a_strides[1] = d->a_strides[nd - 1];
    f->b_strides[0] = d->b_strides[nd - 2], f->b_strides[1] = d->b_strides[nd - 1];
    f->c_strides[0] = d->c_strides[nd - 2], f->c_strides[1] = d->c_strides[nd - 1];
    return 0;
}


/* A row split of a folded matmul on a packed B (see kern_matmul_packed):
 * pieces of q->m rows on MKL, then the leftover rows as a plain matmul. */
typedef struct mm_psplit {
    const kern_matmul_desc *f;
    const mm_mkl *mk;
    const char *a, *b;
    char *c;
    const mm_packed *q;
    int64_t npieces;
    int transa, lda;
    _Atomic int rc;
    char err[256];
} mm_psplit;

static void mm_psplit_range(void *ctx, int64_t begin, int64_t end)
{
    mm_psplit *m = ctx;
    const kern_matmul_desc *f = m->f;
    int64_t M = m->q->m, N = f->c_dims[1], K = f->a_dims[1];
    for (int64_t i = begin; i < end; i++) {
        int64_t r0 = i * M;
        const float *a = (const float *)m->a + r0 * f->a_strides[0];
        float *c = (float *)m->c + r0 * f->c_strides[0];
        if (i < m->npieces) {
            int saved = m->mk->set_local(1);
            m->mk->compute(MKL_ROW_MAJOR, m->transa, MKL_PACKED, (int)M, (int)N, (int)K, a, m->lda,
                           m->q->data, (int)N, 0.0f, c, (int)f->c_strides[0]);
            m->mk->set_local(saved);
            continue;
        }
        kern_matmul_desc p = *f;     /* the rows left over */
        char err[256];
        p.a_dims[0] = p.c_dims[0] = f->c_dims[0] - r0;
        int zero = 0;
        if (kern_matmul(&p, a, m->b, c, err, sizeof err) &&
            atomic_compare_exchange_strong(&m->rc, &zero, -1))
            snprintf(m->err, sizeof m->err, "%s", err);
    }
}

int kern_matmul_packed(const kern_matmul_desc *d, const void *a, const void *b, void *c,
                       kern_matmul_pack *pk, const kern_matmul_stamp *stamp, char *err, size_t errlen)
{
    kern_matmul_desc f;
    const mm_mkl *mk = NULL;
    int ta, lda, tc, ldc;
    if (!pk || !stamp || !stamp->owner || d->dtype != SMELT_F32 || check_desc(d, err, errlen) != 0 ||
        mm_fold(d, &f) != 0 || f.c_dims[0] == 0 || f.c_dims[1] == 0 || f.a_dims[1] == 0 ||
        !(mk = mm_mkl_api()) ||
        !mm_mkl_operand(f.a_dims[0], f.a_dims[1], f.a_strides[0], f.a_strides[1], &ta, &lda) ||
        !mm_mkl_operand(f.c_dims[0], f.c_dims[1], f.c_strides[0], f.c_strides[1], &tc, &ldc) ||
        tc != MKL_NO_TRANS)
        return kern_matmul(d, a, b, c, err, errlen);
    int64_t R = f.c_dims[0], nt = kern_get_num_threads();
    /* "auto" packs where measured to pay: GEMV-like calls (rows <= 2) on a
     * weight that stays in cache (up to 16 MB). Wider calls and larger
     * weights ran as fast or faster on oneDNN's plain path (MLP batch
     * 256: 65 ms plain vs 77 packed; 1024x1024 at 1 row: 0.35 ms plain vs
     * 0.18 packed) */
    if (!stamp->always && (R > MM_PACK_AUTO_ROWS || f.b_dims[0] * f.b_dims[1] * 4 > MM_PACK_AUTO_BYTES))
        return kern_matmul(d, a, b, c, err, errlen);
    double flops = 2.0 * (double)R * (double)f.c_dims[1] * (double)f.a_dims[1];
    int64_t pieces = (nt <= 1 || flops < 2e5) ? 1 : nt < R ? nt : R;
    int64_t kn[4] = {f.b_dims[0], f.b_dims[1], f.b_strides[0], f.b_strides[1]};
    mm_psplit m = { .f = &f, .mk = mk, .a = a, .b = b, .c = c, .npieces = pieces,
                    .transa = ta, .lda = lda };
    if (!(m.q = mm_pack_get(pk, mk, b, kn, stamp, R / pieces)))
        return kern_matmul(d, a, b, c, err, errlen);
    atomic_init(&m.rc, 0);
    kern_parallel_for(pieces + (R % pieces != 0), 1, mm_psplit_range, &m);
    mm_pack_put(pk, (mm_packed *)m.q);
    if (atomic_load(&m.rc) && err && errlen)
        snprintf(err, errlen, "%s", m.err);
    return atomic_load(&m.rc) ? -1 : 0;
}

/* ---------------------------------------------------------------- entries */

/* A 2-D float32 product whose A is column-major (a transposed view: a
 * weight's gradient g^T x over a long M, GPT-2's tied 50257-row embedding)
 * on MKL's sgemm when this process has it: oneDNN's matmul with a
 * transposed source over such an M took twice eager's time (700 vs 330
 * ms). C row-major = A B is, column-major, C^T = B^T A^T. 1 if not taken. */
static int mm_mkl_colmajor_a(const kern_matmul_desc *d, const void *a, const void *b, void *c)
{
    int nd = d->ndim;
    for (int i = 0; i < nd - 2; i++)
        if (d->c_dims[i] != 1)
            return 1;
    int64_t M = d->c_dims[nd - 2], N = d->c_dims[nd - 1], K = d->a_dims[nd - 1];
    int64_t lda = d->a_strides[nd - 1], ldc = d->c_strides[nd - 2];
    int b_rows = d->b_strides[nd - 1] == 1 || N == 1, b_cols = d->b_strides[nd - 2] == 1 || K == 1;
    int64_t ldb = b_rows ? d->b_strides[nd - 2] : d->b_strides[nd - 1];
    if (d->dtype != SMELT_F32 || d->a_strides[nd - 2] != 1 || M < 2 || lda < M || d->c_strides[nd - 1] != 1 ||
        ldc < N || (!b_rows && !b_cols) || ldb < (b_rows ? N : K) || (double)M * (double)N * (double)K < 1e8 ||
        M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX || ldc > INT32_MAX)
        return 1;
    const mm_mkl *mk = mm_mkl_api();
    if (!mk || !mk->sgemm)
        return 1;
    int m = (int)N, n = (int)M, k = (int)K, la = (int)ldb, lb = (int)lda, lc = (int)ldc;
    float one = 1.0f, zero = 0.0f;
    int prev = mk->set_local(kern_get_num_threads());
    mk->sgemm(b_rows ? "N" : "T", "T", &m, &n, &k, &one, b, &la, a, &lb, &zero, c, &lc);
    mk->set_local(prev);
    return 0;
}

/* A float32 copy of the F16/BF16 tensor x (dims, element strides), dense
 * in x's own order of its last two dims: a transposed matrix (stride 1
 * along dim nd-2) is copied transposed, so that the source is read
 * along its rows (reading across them - a weight's w.t() - was 6 ns an
 * element). The copy's element strides are stored in os. Rows converted in
 * parallel on smelt's pool. NULL when out of memory. */
typedef struct mm_dense {
    smelt_dtype dt;
    const uint16_t *h;
    float *o;
    int nd, outer;               /* outer: the matrix dim that is not the copy's inner one */
    const int64_t *dims, *strides;
    int64_t last, ls;            /* the inner dim of the copy: its size, x's stride */
} mm_dense;

static void mm_dense_rows(void *ctx, int64_t begin, int64_t end)
{
    const mm_dense *m = ctx;
    int nd = m->nd;
    for (int64_t r = begin; r < end; r++) {
        /* r over the copy's outer dims: x's batch dims, then the matrix
         * dim that is not inner */
        int64_t off = 0, q = r;
        off += (q % m->dims[m->outer]) * m->strides[m->outer];
        q /= m->dims[m->outer];
        for (int i = nd - 3; i >= 0; i--) {
            off += (q % m->dims[i]) * m->strides[i];
            q /= m->dims[i];
        }
        float *row = m->o + r * m->last;
        const uint16_t *src = m->h + off;
        if (m->dt == SMELT_BF16)
            for (int64_t j = 0; j < m->last; j++)
                row[j] = kern_bf16_to_f32(src[j * m->ls]);
        else
            for (int64_t j = 0; j < m->last; j++)
                row[j] = kern_f16_to_f32(src[j * m->ls]);
    }
}

static float *mm_dense_f32(smelt_dtype dt, const void *x, int nd, const int64_t *dims, const int64_t *strides,
                           int64_t *os, float *into)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= dims[i];
    float *o = into ? into : malloc((size_t)(n ? n : 1) * sizeof *o);
    if (!o)
        return NULL;
    int swap = strides[nd - 2] == 1 && strides[nd - 1] != 1 && dims[nd - 2] > 1 && dims[nd - 1] > 1;
    int in = swap ? nd - 2 : nd - 1, outer = swap ? nd - 1 : nd - 2;
    mm_dense m = { .dt = dt, .h = x, .o = o, .nd = nd, .outer = outer, .dims = dims, .strides = strides,
                   .last = dims[in], .ls = strides[in] };
    os[in] = 1, os[outer] = dims[in];
    int64_t sz = dims[nd - 2] * dims[nd - 1];
    for (int i = nd - 3; i >= 0; i--)
        os[i] = sz, sz *= dims[i];
    int64_t rows = m.last ? n / m.last : 0;
    if (rows)
        kern_parallel_for(rows, m.last * rows < (1 << 16) ? rows : 64, mm_dense_rows, &m);
    return o;
}

/* The dense row-major float32 x (dims) rounded into the F16/BF16 tensor
 * c (same dims, element strides cs), to nearest even. */
static void mm_round_into(smelt_dtype dt, const float *x, int nd, const int64_t *dims, void *c, const int64_t *cs)
{
    int64_t n = 1, idx[SMELT_MAX_DIMS] = { 0 }, last = dims[nd - 1], ls = cs[nd - 1];
    uint16_t *h = c;
    for (int i = 0; i < nd; i++)
        n *= dims[i];
    for (int64_t r = 0; last && r < n / last; r++) {
        int64_t off = 0;
        for (int i = 0; i < nd - 1; i++)
            off += idx[i] * cs[i];
        const float *row = x + r * last;
        for (int64_t j = 0; j < last; j++)
            h[off + j * ls] = dt == SMELT_BF16 ? kern_f32_to_bf16(row[j]) : kern_f32_to_f16(row[j]);
        for (int i = nd - 2; i >= 0 && ++idx[i] == dims[i]; i--)
            idx[i] = 0;
    }
}

/* Bytes of float32 copy of B converted at once by mm_half_via_f32. */
#define MM_HALF_CHUNK_BYTES (8 << 20)

/* A float16/bfloat16 product oneDNN declined (float16 - oneDNN here has
 * none -, or bfloat16 on a CPU without bf16 instructions): A and B
 * converted to dense float32 copies (exact), the float32 product (oneDNN),
 * then, unless c_f32, each element rounded once: the portable kernel's
 * values (f32 accumulation, one rounding) in another summation order.
 * B (and C's float32 values) go in pieces of whole columns of at most
 * MM_HALF_CHUNK_BYTES, one buffer reused: a 4096x4096 float16 weight needs
 * 8 MB at a time, not a 64 MB copy per call (and its page faults). */
static int mm_half_via_f32(const kern_matmul_desc *d, const void *a, const void *b, void *c,
                           char *err, size_t errlen)
{
    kern_matmul_desc f = *d;
    int nd = d->ndim;
    int64_t N = d->c_dims[nd - 1], bcols = 1, ccols = 1;   /* elements per column of B, of C */
    for (int i = 0; i < nd - 1; i++)
        bcols *= d->b_dims[i], ccols *= d->c_dims[i];
    int64_t w = MM_HALF_CHUNK_BYTES / (4 * (bcols > 0 ? bcols : 1)) / MM_COL_UNIT * MM_COL_UNIT;
    w = w < MM_COL_UNIT ? MM_COL_UNIT : w > N ? N : w;
    float *fa = mm_dense_f32(d->dtype, a, nd, d->a_dims, d->a_strides, f.a_strides, NULL);
    float *fb = fa ? malloc((size_t)(bcols * w) * sizeof *fb) : NULL;
    float *fc = fb && !d->c_f32 ? malloc((size_t)(ccols * w) * sizeof *fc) : NULL;
    int rc = -1;
    if (fb && (d->c_f32 || fc)) {
        rc = 0;
        f.dtype = SMELT_F32, f.c_f32 = 0;
        for (int64_t j0 = 0; j0 < N && rc == 0; j0 += w) {
            int64_t cw = N - j0 < w ? N - j0 : w;
            int64_t bd[SMELT_MAX_DIMS], cd[SMELT_MAX_DIMS];
            memcpy(bd, d->b_dims, sizeof bd);
            memcpy(cd, d->c_dims, sizeof cd);
            bd[nd - 1] = cw, cd[nd - 1] = cw;
            mm_dense_f32(d->dtype, (const uint16_t *)b + j0 * d->b_strides[nd - 1], nd, bd, d->b_strides,
                         f.b_strides, fb);
            f.b_dims[nd - 1] = cw, f.c_dims[nd - 1] = cw;
            void *cp;
            if (fc) {
                int64_t sc = 1;
                for (int i = nd - 1; i >= 0; i--) {
                    f.c_strides[i] = sc;
                    sc *= cd[i];
                }
                cp = fc;
            } else {
                cp = (float *)c + j0 * d->c_strides[nd - 1];
            }
            rc = kern_matmul(&f, fa, fb, cp, err, errlen);
            if (rc == 0 && fc)
                mm_round_into(d->dtype, fc, nd, cd, (uint16_t *)c + j0 * d->c_strides[nd - 1], d->c_strides);
        }
    } else if (err && errlen) {
        snprintf(err, errlen, "matmul: out of memory for float32 copies of half-precision operands");
    }
    free(fa);
    free(fb);
    free(fc);
    return rc;
}

/* Multiply-adds from which a half-precision product oneDNN declined runs
 * on float32 copies (oneDNN's f32 GEMM) rather than the portable kernel. */
#define MM_VIA_F32_MACS (1 << 18)

int kern_matmul(const kern_matmul_desc *d, const void *a, const void *b, void *c,
                char *err, size_t errlen)
{
    if (check_desc(d, err, errlen) != 0)
        return -1;
    int nd = d->ndim;
    int64_t nbatch = 1, M = d->c_dims[nd - 2], N = d->c_dims[nd - 1], K = d->a_dims[nd - 1];
    for (int i = 0; i < nd - 2; i++)
        nbatch *= d->c_dims[i];
    if (nbatch == 0 || M == 0 || N == 0)
        return 0;
    if (K == 0) {
        mm_zero(d, c, nbatch * M);
        return 0;
    }
    if (d->dtype == SMELT_F32 && mm_mkl_colmajor_a(d, a, b, c) == 0)
        return 0;
    if (d->dtype == SMELT_F32 || d->dtype == SMELT_BF16) {
        int rc = mm_onednn(d, a, b, c, err, errlen);
        if (rc != MM_DECLINED)
            return rc;
    }
    if (d->c_f32 || ((d->dtype == SMELT_F16 || d->dtype == SMELT_BF16) && kern_onednn_engine() &&
                     (double)nbatch * (double)M * (double)N * (double)K >= MM_VIA_F32_MACS))
        return mm_half_via_f32(d, a, b, c, err, errlen);
    return mm_portable(d, a, b, c, nbatch, err, errlen);
}

void kern_matmul_cache_clear(void)
{
    kern_primcache_clear(&g_cache);
}
