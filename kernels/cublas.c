/* cublas.c — see cublas.h. The entry points and constants used, declared
 * from NVIDIA's headers (checked against cublas_api.h of cuBLAS 13.10 and
 * 12.9, library_types.h and cuda.h of CUDA 13): their enums are 4 bytes and,
 * having no negative values, of type unsigned int in C (cublasGemmAlgo_t,
 * with -1, is int); handles, streams and contexts point to the headers'
 * opaque structs. The _v2 names are the ones cublas_v2.h maps cublasCreate
 * and friends to. From the driver (libcuda.so.1) the unsuffixed entry
 * points, whose NULL stream is the legacy default stream. */
#include "cublas.h"
#include "dl.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned int cublasStatus_t, cublasOperation_t, cudaDataType, cublasComputeType_t, cublasMath_t,
    cublasPointerMode_t, libraryPropertyType, CUresult;
typedef int cublasGemmAlgo_t;
typedef struct cublasContext *cublasHandle_t;
typedef struct CUstream_st *cudaStream_t, *CUstream;
typedef struct CUctx_st *CUcontext;
typedef unsigned long long CUdeviceptr;

enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_OP_N = 0,
    CUBLAS_OP_T = 1,
    CUDA_R_32F = 0,
    CUDA_R_16F = 2,
    CUDA_R_16BF = 14,
    CUBLAS_COMPUTE_32F = 68, /* FP32 accumulation, no TF32 unless the math mode allows it */
    CUBLAS_GEMM_DEFAULT = -1,
    CUBLAS_DEFAULT_MATH = 0, /* no TF32, no emulation */
    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,
    CUBLAS_POINTER_MODE_HOST = 0,
    MAJOR_VERSION = 0,
    MINOR_VERSION = 1,
    PATCH_LEVEL = 2,
};

#define CUBLAS_FUNCS(X)                                                                                  \
    X(cublasStatus_t, cublasCreate_v2, (cublasHandle_t *))                                               \
    X(cublasStatus_t, cublasDestroy_v2, (cublasHandle_t))                                                \
    X(cublasStatus_t, cublasSetStream_v2, (cublasHandle_t, cudaStream_t))                               \
    X(cublasStatus_t, cublasSetMathMode, (cublasHandle_t, cublasMath_t))                                 \
    X(cublasStatus_t, cublasSetPointerMode_v2, (cublasHandle_t, cublasPointerMode_t))                    \
    X(cublasStatus_t, cublasGetProperty, (libraryPropertyType, int *))                                   \
    X(cublasStatus_t, cublasGemmStridedBatchedEx,                                                        \
      (cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *, const void *,  \
       cudaDataType, int, long long, const void *, cudaDataType, int, long long, const void *, void *,   \
       cudaDataType, int, long long, int, cublasComputeType_t, cublasGemmAlgo_t))
#define CUDA_FUNCS(X)                                                                                    \
    X(CUresult, cuCtxGetCurrent, (CUcontext *))                                                          \
    X(CUresult, cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))

static struct {
    int ok;
    char why[256], text[64];
#define X(ret, name, params) ret(*name) params;
    CUBLAS_FUNCS(X)
    CUDA_FUNCS(X)
#undef X
    const char *(*cublasGetStatusString)(cublasStatus_t); /* optional (cuBLAS >= 11.4) */
    CUresult (*cuGetErrorString)(CUresult, const char **); /* optional */
} CB;
static pthread_once_t cb_once = PTHREAD_ONCE_INIT;

/* ---- Loading ------------------------------------------------------------ */

/* The file `env` names (when set; why it fails to load in err), else a
 * copy of one of names[] already in the process (torch's), else the first
 * of names[] that loads. */
static void *open_lib(const char *env, const char *const *names, char *err, size_t n)
{
    const char *path = env ? getenv(env) : NULL;
    void *h = path && *path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (path && *path && !h)
        kern_say(err, n, "%s=%s: %s", env, path, dlerror());
    for (int i = 0; names[i] && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    return h ? h : kern_dlopen_first(names);
}

/* Every CUBLAS_FUNCS and CUDA_FUNCS entry from blas and cu; 0, or -1 with
 * CB.why. */
static int load_syms(void *blas, void *cu)
{
    void *lib = blas;
    const char *what = "libcublas";
#define X(ret, name, params)                                                        \
    if (!(CB.name = (ret(*) params)dlsym(lib, #name)))                              \
        return kern_say(CB.why, sizeof CB.why, "%s has no " #name, what), -1;
    CUBLAS_FUNCS(X)
    lib = cu, what = "libcuda";
    CUDA_FUNCS(X)
#undef X
    CB.cublasGetStatusString = (const char *(*)(cublasStatus_t))dlsym(blas, "cublasGetStatusString");
    CB.cuGetErrorString = (CUresult(*)(CUresult, const char **))dlsym(cu, "cuGetErrorString");
    return 0;
}

static void cb_init(void)
{
    char err[200] = "";
    void *blas = open_lib("SMELT_CUBLAS", (const char *const[]){ "libcublas.so.13", "libcublas.so.12",
                                                                 "libcublas.so", NULL }, err, sizeof err);
    if (!blas) {
        kern_say(CB.why, sizeof CB.why, "libcublas not found (pip install nvidia-cublas, or SMELT_CUBLAS=path)%s%s",
                 *err ? "; " : "", err);
        return;
    }
    void *cu = open_lib(NULL, (const char *const[]){ "libcuda.so.1", NULL }, NULL, 0);
    if (!cu) {
        kern_say(CB.why, sizeof CB.why, "libcuda.so.1 (the NVIDIA driver) not found");
        return;
    }
    if (load_syms(blas, cu))
        return;
    static const libraryPropertyType prop[3] = { MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL };
    int v[3] = { 0, 0, 0 };
    for (int i = 0; i < 3; i++)
        if (CB.cublasGetProperty(prop[i], &v[i])) {
            kern_say(CB.why, sizeof CB.why, "cublasGetProperty failed");
            return;
        }
    if (v[0] < 11) {
        kern_say(CB.why, sizeof CB.why, "cuBLAS %d.%d is too old (11 or later needed)", v[0], v[1]);
        return;
    }
    kern_say(CB.text, sizeof CB.text, "cuBLAS %d.%d.%d", v[0], v[1], v[2]);
    CB.ok = 1;
}

int kern_cublas_available(char *why, size_t n)
{
    pthread_once(&cb_once, cb_init);
    if (!CB.ok)
        kern_say(why, n, "%s", CB.why);
    return CB.ok;
}

const char *kern_cublas_version_text(void) { return kern_cublas_available(NULL, 0) ? CB.text : NULL; }

/* ---- Planning: a matmul as cuBLAS calls ----------------------------------
 * cuBLAS is column-major. Row-major C[M,N] = A @ B is, read column-major,
 * C^T[N,M] = B^T[N,K] @ A^T[K,M]: gemm with m = N, n = M, k = K, cuBLAS's
 * A = our B and cuBLAS's B = our A. A row-contiguous operand (element
 * (i,j) at i*ld + j) is its own transpose in column-major, so it goes in
 * with OP_N; a column-contiguous one (at i + j*ld) with OP_T. */

#define CB_MAX_LOOPS (SMELT_MAX_DIMS - 2)

typedef enum cb_kind {
    CB_NOTHING, /* C is empty */
    CB_ZERO,    /* K == 0: C is zero-filled (zero_bytes of it) */
    CB_GEMM,    /* one gemm_strided_batched per index of the loop dims */
} cb_kind;

/* Every field in cuBLAS's terms (a is its A, our B); strides and loop
 * steps in elements. */
typedef struct cb_plan {
    cb_kind kind;
    size_t esize;
    int64_t zero_bytes;
    cublasOperation_t transa, transb;
    int64_t m, n, k, lda, ldb, ldc;
    int64_t stride_a, stride_b, stride_c, batch;
    int nloop;
    int64_t loop_dim[CB_MAX_LOOPS], loop_a[CB_MAX_LOOPS], loop_b[CB_MAX_LOOPS], loop_c[CB_MAX_LOOPS];
} cb_plan;

/* One batch dim of C with each operand's step along it (0 where the
 * operand is broadcast). */
typedef struct cb_dim {
    int64_t n, a, b, c;
} cb_dim;

static size_t cb_esize(smelt_dtype dt)
{
    return dt == SMELT_F32 ? 4 : dt == SMELT_F16 || dt == SMELT_BF16 ? 2 : 0;
}

static int64_t max1(int64_t x) { return x > 1 ? x : 1; }

/* How a rows x cols operand with strides (sr, sc) goes to cuBLAS: OP_N with
 * ld >= max(1, cols) when its rows are contiguous, OP_T with ld >=
 * max(1, rows) when its columns are (a size-1 dim's stride is ignored).
 * 0, or -1 when neither holds. */
static int classify(int64_t rows, int64_t cols, int64_t sr, int64_t sc, cublasOperation_t *op, int64_t *ld)
{
    if (cols == 1 || sc == 1) {
        *op = CUBLAS_OP_N, *ld = rows == 1 ? max1(cols) : sr;
        if (*ld >= max1(cols))
            return 0;
    }
    if (rows == 1 || sr == 1) {
        *op = CUBLAS_OP_T, *ld = cols == 1 ? max1(rows) : sc;
        if (*ld >= max1(rows))
            return 0;
    }
    return -1;
}

/* 1 if dims o and i (o outside i) step as one dim for every operand. */
static int collapses(const cb_dim *o, const cb_dim *i)
{
    return o->a == i->a * i->n && o->b == i->b * i->n && o->c == i->c * i->n;
}

/* Makes the run of collapsible dims with the largest product (at most
 * INT_MAX) the strided batch of p and every other dim a loop. */
static void plan_batch(cb_plan *p, const cb_dim *dim, int nd)
{
    int best = 0, best_end = 0;
    int64_t best_n = 1;
    for (int s = 0; s < nd; s++) {
        int64_t prod = dim[s].n;
        int e = s + 1;
        for (; e < nd && collapses(&dim[e - 1], &dim[e]) && prod <= INT_MAX / dim[e].n; e++)
            prod *= dim[e].n;
        if (prod > best_n && prod <= INT_MAX)
            best = s, best_end = e, best_n = prod;
    }
    p->batch = best_n;
    p->stride_a = p->stride_b = p->stride_c = 0;
    if (best_end > best)
        p->stride_a = dim[best_end - 1].b, p->stride_b = dim[best_end - 1].a, p->stride_c = dim[best_end - 1].c;
    p->nloop = 0;
    for (int i = 0; i < nd; i++) {
        if (i >= best && i < best_end)
            continue;
        p->loop_dim[p->nloop] = dim[i].n, p->loop_a[p->nloop] = dim[i].b;
        p->loop_b[p->nloop] = dim[i].a, p->loop_c[p->nloop++] = dim[i].c;
    }
}

/* B shared by every batch entry, A's and C's entries one after another:
 * the batch folds into our M (cuBLAS's n) and one plain gemm does it. */
static void plan_fold(cb_plan *p)
{
    if (p->nloop || p->batch < 2 || p->stride_a || p->transb != CUBLAS_OP_N || p->stride_b != p->n * p->ldb ||
        p->stride_c != p->n * p->ldc || p->n * p->batch > INT_MAX)
        return;
    p->n *= p->batch;
    p->batch = 1, p->stride_b = p->stride_c = 0;
}

/* d's shapes agree (see kern_matmul_desc) and C is contiguous; 0, or -1
 * with why. */
static int check_desc(const kern_matmul_desc *d, char *why, size_t n)
{
    int nd = d->ndim;
    if (nd < 2 || nd > SMELT_MAX_DIMS)
        return kern_say(why, n, "cuBLAS matmul: ndim %d", nd), -1;
    if (d->c_f32)
        return kern_say(why, n, "cuBLAS matmul: a float32 result of half-precision operands (a CPU plan's form)"), -1;
    if (d->a_dims[nd - 1] != d->b_dims[nd - 2] || d->c_dims[nd - 2] != d->a_dims[nd - 2] ||
        d->c_dims[nd - 1] != d->b_dims[nd - 1])
        return kern_say(why, n, "cuBLAS matmul: shapes do not agree"), -1;
    int64_t want = 1;
    for (int i = nd - 1; i >= 0; i--) {
        if (i < nd - 2 && (d->a_dims[i] != d->c_dims[i] && d->a_dims[i] != 1))
            return kern_say(why, n, "cuBLAS matmul: batch dim %d of A does not broadcast", i), -1;
        if (i < nd - 2 && (d->b_dims[i] != d->c_dims[i] && d->b_dims[i] != 1))
            return kern_say(why, n, "cuBLAS matmul: batch dim %d of B does not broadcast", i), -1;
        if (d->a_strides[i] < 0 || d->b_strides[i] < 0)
            return kern_say(why, n, "cuBLAS matmul: negative stride"), -1;
        if (d->c_dims[i] != 1 && d->c_strides[i] != want)
            return kern_say(why, n, "cuBLAS matmul: C is not contiguous"), -1;
        want *= d->c_dims[i];
    }
    return 0;
}

/* C's batch dims other than size 1, each operand's step along them;
 * returns how many (*total: their product). */
static int batch_dims(const kern_matmul_desc *d, cb_dim *dim, int64_t *total)
{
    int nd = 0;
    *total = 1;
    for (int i = 0; i < d->ndim - 2; i++) {
        *total *= d->c_dims[i];
        if (d->c_dims[i] == 1)
            continue;
        dim[nd++] = (cb_dim){ d->c_dims[i], d->a_dims[i] == 1 ? 0 : d->a_strides[i],
                              d->b_dims[i] == 1 ? 0 : d->b_strides[i], d->c_strides[i] };
    }
    return nd;
}

/* cuBLAS's gemm arguments for the matrix dims of d into p; 0, or -1 with
 * why. */
static int plan_matrix(const kern_matmul_desc *d, cb_plan *p, char *why, size_t n)
{
    int nd = d->ndim;
    int64_t M = d->a_dims[nd - 2], K = d->a_dims[nd - 1], N = d->b_dims[nd - 1];
    if (classify(K, N, d->b_strides[nd - 2], d->b_strides[nd - 1], &p->transa, &p->lda))
        return kern_say(why, n, "cuBLAS matmul: B is neither row- nor column-contiguous"), -1;
    if (classify(M, K, d->a_strides[nd - 2], d->a_strides[nd - 1], &p->transb, &p->ldb))
        return kern_say(why, n, "cuBLAS matmul: A is neither row- nor column-contiguous"), -1;
    p->m = N, p->n = M, p->k = K, p->ldc = max1(N);
    if (N > INT_MAX || M > INT_MAX || K > INT_MAX || p->lda > INT_MAX || p->ldb > INT_MAX)
        return kern_say(why, n, "cuBLAS matmul: a dim or stride over INT_MAX"), -1;
    return 0;
}

/* The calls that compute d (see cb_plan); 0, or -1 with why when cuBLAS
 * cannot. Pure: needs no library or GPU. */
static int plan_make(const kern_matmul_desc *d, cb_plan *p, char *why, size_t n)
{
    memset(p, 0, sizeof *p);
    p->esize = cb_esize(d->dtype);
    if (!p->esize)
        return kern_say(why, n, "cuBLAS matmul: dtype %s", smelt_dtype_name(d->dtype)), -1;
    if (check_desc(d, why, n))
        return -1;
    cb_dim dim[CB_MAX_LOOPS];
    int64_t total, M = d->c_dims[d->ndim - 2], N = d->c_dims[d->ndim - 1];
    int nd = batch_dims(d, dim, &total);
    if (!total || !M || !N)
        return p->kind = CB_NOTHING, 0;
    if (!d->a_dims[d->ndim - 1])
        return p->kind = CB_ZERO, p->zero_bytes = total * M * N * (int64_t)p->esize, 0;
    if (plan_matrix(d, p, why, n))
        return -1;
    p->kind = CB_GEMM;
    plan_batch(p, dim, nd);
    plan_fold(p);
    return 0;
}

int kern_cublas_supports(const kern_matmul_desc *d, char *why, size_t n)
{
    cb_plan p;
    return plan_make(d, &p, why, n) == 0;
}

int kern_cublas_plan_text(const kern_matmul_desc *d, char *buf, size_t n)
{
    cb_plan p;
    if (plan_make(d, &p, buf, n))
        return -1;
    int64_t calls = 1;
    for (int i = 0; i < p.nloop; i++)
        calls *= p.loop_dim[i];
    if (p.kind == CB_NOTHING)
        kern_say(buf, n, "nothing");
    else if (p.kind == CB_ZERO)
        kern_say(buf, n, "memset_zero bytes=%lld", (long long)p.zero_bytes);
    else
        kern_say(buf, n,
                 "gemm_strided_batched transa=%c transb=%c m=%lld n=%lld k=%lld lda=%lld ldb=%lld ldc=%lld "
                 "strideA=%lld strideB=%lld strideC=%lld batch=%lld loops=%lld",
                 p.transa == CUBLAS_OP_N ? 'N' : 'T', p.transb == CUBLAS_OP_N ? 'N' : 'T', (long long)p.m,
                 (long long)p.n, (long long)p.k, (long long)p.lda, (long long)p.ldb, (long long)p.ldc,
                 (long long)p.stride_a, (long long)p.stride_b, (long long)p.stride_c, (long long)p.batch,
                 (long long)calls);
    return 0;
}

/* ---- Handles --------------------------------------------------------------
 * cublasCreate is slow and binds the handle to the context current at the
 * time. Idle handles wait in one pool, tagged with their context: a call
 * takes one for the current context (or makes one), uses it alone, and
 * puts it back, so there are as many handles per context as calls ever ran
 * at once, and none is lost when a thread exits. They live until the
 * process exits (as torch's: destroying them at exit can outlive the
 * context). Using one handle on several streams in turn is correct: its
 * default workspace is shared across streams safely (cuBLAS guide,
 * "Results reproducibility": only bit-reproducibility is then lost). */

#define CB_POOL 64

static struct {
    pthread_mutex_t mu;
    int n;
    CUcontext ctx[CB_POOL];
    cublasHandle_t h[CB_POOL];
} POOL = { .mu = PTHREAD_MUTEX_INITIALIZER };

static const char *status_text(cublasStatus_t s)
{
    const char *t = CB.cublasGetStatusString ? CB.cublasGetStatusString(s) : NULL;
    return t ? t : "cuBLAS error";
}

/* A new handle for the current context with smelt's settings: default
 * math (no TF32), FP32 reductions, alpha/beta on the host. */
static cublasStatus_t handle_new(cublasHandle_t *h)
{
    cublasStatus_t s = CB.cublasCreate_v2(h);
    if (s)
        return s;
    s = CB.cublasSetMathMode(*h, CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    if (!s)
        s = CB.cublasSetPointerMode_v2(*h, CUBLAS_POINTER_MODE_HOST);
    if (s)
        CB.cublasDestroy_v2(*h);
    return s;
}

/* An idle handle for ctx, taken from the pool or made; 0, or -1 with err. */
static int handle_take(CUcontext ctx, cublasHandle_t *h, char *err, size_t errlen)
{
    pthread_mutex_lock(&POOL.mu);
    int i = POOL.n;
    while (i > 0 && POOL.ctx[i - 1] != ctx)
        i--;
    if (i > 0) {
        *h = POOL.h[i - 1];
        POOL.n--;
        POOL.ctx[i - 1] = POOL.ctx[POOL.n], POOL.h[i - 1] = POOL.h[POOL.n];
    }
    pthread_mutex_unlock(&POOL.mu);
    if (i > 0)
        return 0;
    cublasStatus_t s = handle_new(h);
    if (s)
        return kern_say(err, errlen, "cublasCreate: %s (%u)", status_text(s), s), -1;
    return 0;
}

/* Puts h (of ctx) back; destroys it when the pool is full. */
static void handle_give(CUcontext ctx, cublasHandle_t h)
{
    pthread_mutex_lock(&POOL.mu);
    int kept = POOL.n < CB_POOL;
    if (kept)
        POOL.ctx[POOL.n] = ctx, POOL.h[POOL.n++] = h;
    pthread_mutex_unlock(&POOL.mu);
    if (!kept)
        CB.cublasDestroy_v2(h);
}

/* ---- Running ------------------------------------------------------------- */

static int cu_fail(const char *what, CUresult r, char *err, size_t errlen)
{
    const char *t = NULL;
    if (!CB.cuGetErrorString || CB.cuGetErrorString(r, &t))
        t = "CUDA driver error";
    return kern_say(err, errlen, "%s: %s (%u)", what, t ? t : "CUDA driver error", r), -1;
}

static cudaDataType cb_type(smelt_dtype dt)
{
    return dt == SMELT_F16 ? CUDA_R_16F : dt == SMELT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* p's calls on handle h: one per index of the loop dims (an odometer, the
 * last dim fastest), each operand offset by that index's steps. A, B, C
 * are cuBLAS's: A is our b, B our a. 0, or -1 with err. */
static int run_gemms(const cb_plan *p, cudaDataType t, cublasHandle_t h, const char *A, const char *B, char *C,
                     char *err, size_t errlen)
{
    static const float one = 1.0f, zero = 0.0f;
    int64_t idx[CB_MAX_LOOPS] = { 0 }, oa = 0, ob = 0, oc = 0, es = (int64_t)p->esize;
    for (;;) {
        cublasStatus_t s = CB.cublasGemmStridedBatchedEx(
            h, p->transa, p->transb, (int)p->m, (int)p->n, (int)p->k, &one, A + oa * es, t, (int)p->lda,
            p->stride_a, B + ob * es, t, (int)p->ldb, p->stride_b, &zero, C + oc * es, t, (int)p->ldc, p->stride_c,
            (int)p->batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (s)
            return kern_say(err, errlen, "cublasGemmStridedBatchedEx: %s (%u)", status_text(s), s), -1;
        int i = p->nloop - 1;
        for (; i >= 0 && ++idx[i] == p->loop_dim[i]; i--) {
            idx[i] = 0;
            oa -= p->loop_a[i] * (p->loop_dim[i] - 1), ob -= p->loop_b[i] * (p->loop_dim[i] - 1);
            oc -= p->loop_c[i] * (p->loop_dim[i] - 1);
        }
        if (i < 0)
            return 0;
        oa += p->loop_a[i], ob += p->loop_b[i], oc += p->loop_c[i];
    }
}

int kern_cublas_matmul(const kern_matmul_desc *d, const void *a, const void *b, void *c, void *stream, char *err,
                       size_t errlen)
{
    cb_plan p;
    if (plan_make(d, &p, err, errlen) || !kern_cublas_available(err, errlen))
        return -1;
    if (p.kind == CB_NOTHING)
        return 0;
    CUresult r;
    if (p.kind == CB_ZERO) {
        r = CB.cuMemsetD8Async((CUdeviceptr)(uintptr_t)c, 0, (size_t)p.zero_bytes, (CUstream)stream);
        return r ? cu_fail("cuMemsetD8Async", r, err, errlen) : 0;
    }
    CUcontext ctx = NULL;
    if ((r = CB.cuCtxGetCurrent(&ctx)))
        return cu_fail("cuCtxGetCurrent", r, err, errlen);
    if (!ctx)
        return kern_say(err, errlen, "cuBLAS matmul: no current CUDA context"), -1;
    cublasHandle_t h;
    if (handle_take(ctx, &h, err, errlen))
        return -1;
    cublasStatus_t s = CB.cublasSetStream_v2(h, (cudaStream_t)stream);
    int rc = s ? kern_say(err, errlen, "cublasSetStream: %s (%u)", status_text(s), s), -1
               : run_gemms(&p, cb_type(d->dtype), h, b, a, c, err, errlen);
    handle_give(ctx, h);
    return rc;
}
