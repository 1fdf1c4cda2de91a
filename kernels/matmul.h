/* smelt matmul: C[b] = A[b] @ B[b] over broadcast batch dims.
 *
 * fp32 and bf16 (bf16 in, bf16 out, f32 accumulate) run on oneDNN's matmul
 * primitive; primitives are cached keyed by dtype, dims and strides.
 * float64, float16 and integer dtypes run on a portable blocked loop in C
 * (accumulating in f64 / f32 / int64 respectively, results cast back).
 */
#ifndef SMELT_KERN_MATMUL_H
#define SMELT_KERN_MATMUL_H

#include <stddef.h>
#include <stdint.h>
#include "../inductor/graph.h"

/* ndim in [2, SMELT_MAX_DIMS]; all three tensors have the same ndim (the
 * caller left-pads with size-1 dims). a: [.., M, K], b: [.., K, N],
 * c: [.., M, N]; a and b batch dims are equal or 1 and c's are their
 * broadcast. Strides are in elements, any non-negative values (transposed
 * and stride-0 broadcast operands are used in place, never copied by the
 * caller). c is written in full. */
typedef struct kern_matmul_desc {
    smelt_dtype dtype;
    int ndim;
    int64_t a_dims[SMELT_MAX_DIMS], a_strides[SMELT_MAX_DIMS];
    int64_t b_dims[SMELT_MAX_DIMS], b_strides[SMELT_MAX_DIMS];
    int64_t c_dims[SMELT_MAX_DIMS], c_strides[SMELT_MAX_DIMS];
} kern_matmul_desc;

/* 0 on success; -1 with a message in err (unsupported dtype, oneDNN error).
 * Thread-safe; M, N or K may be 0 (K == 0 writes zeros). */
int kern_matmul(const kern_matmul_desc *d, const void *a, const void *b, void *c,
                char *err, size_t errlen);

/* Drops cached primitives (smelt.reset / teardown). */
void kern_matmul_cache_clear(void);

#endif
