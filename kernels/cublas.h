/* cublas.h — matmul on NVIDIA GPUs through cuBLAS, opened with dlopen
 * (cublas.c; prototypes declared there), so every build carries it and uses
 * it where the library is present: the file SMELT_CUBLAS names (python/smelt
 * sets it to the wheel's library when torch's CUDA wheels are installed),
 * else the copy torch already loaded, else the system's (libcublas.so.13,
 * .12). The NVIDIA driver (libcuda.so.1) is needed as well: for the current
 * context and for zero-filling C when K == 0.
 *
 * Numerics, as torch's defaults: float32 is computed in full FP32 (no TF32:
 * torch.backends.cuda.matmul.allow_tf32 is False by default); float16 and
 * bfloat16 accumulate in FP32 with output in the input dtype, and cuBLAS
 * is told to keep split-K reductions in FP32 too (torch by default allows
 * reduced-precision reductions; smelt does not). */
#ifndef SMELT_KERN_CUBLAS_H
#define SMELT_KERN_CUBLAS_H

#include <stddef.h>

#include "matmul.h"

/* 1 if libcublas (and libcuda) loaded (once, thread-safe), else 0 with the
 * reason in why. */
int kern_cublas_available(char *why, size_t n);

/* 1 if cuBLAS can compute matmul d as given (dtype float32/float16/
 * bfloat16; each operand's last two dims either row- or column-contiguous
 * with a leading dimension >= the inner extent; C contiguous; batch dims
 * run as strided-batched calls, looping over the batch dims that do not
 * collapse into one stride), else 0 with why. Needs no library or GPU. */
int kern_cublas_supports(const kern_matmul_desc *d, char *why, size_t n);

/* C = A @ B on `stream` (a CUstream; NULL = the legacy default stream) in
 * the calling thread's current CUDA context (the caller made torch's
 * primary context current). a, b, c: device pointers (a, b already
 * offset). Asynchronous. 0, or -1 with err. Thread-safe. */
int kern_cublas_matmul(const kern_matmul_desc *d, const void *a, const void *b, void *c, void *stream, char *err,
                       size_t errlen);

/* "cuBLAS 13.0.2", or NULL when unavailable. Needs no GPU. */
const char *kern_cublas_version_text(void);

/* What kern_cublas_matmul would issue for d, in cuBLAS's column-major
 * names (its A is d's B: C^T = B^T A^T), one line:
 *   "gemm_strided_batched transa=.. transb=.. m=.. n=.. k=.. lda=.. ldb=..
 *    ldc=.. strideA=.. strideB=.. strideC=.. batch=.. loops=.."
 * (loops: how many such calls), "memset_zero elems=.." (K == 0) or
 * "nothing" (an empty C). 0, or -1 with the reason in buf when
 * unsupported. */
int kern_cublas_plan_text(const kern_matmul_desc *d, char *buf, size_t n);

#endif
