/* smelt matmul: C[b] = A[b] @ B[b] over broadcast batch dims.
 *
 * fp32 and bf16 (bf16 in, bf16 or f32 out, f32 accumulate) run on oneDNN's
 * matmul primitive; primitives are cached keyed by dtype, dims and strides.
 * float16 (and bf16 where oneDNN has no bf16 kernel) products of 2^18
 * multiply-adds or more run on float32 copies of the operands through
 * oneDNN's f32 GEMM, rounded once. float64, integer dtypes and smaller
 * half-precision products run on a portable blocked loop in C
 * (accumulating in f64 / int64 / f32 respectively, results cast back).
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
    smelt_dtype dtype;   /* of A and B; of C too unless c_f32 */
    int ndim;
    /* 1: dtype is F16 or BF16 and C is float32, the f32-accumulated product
     * not rounded to half precision (what a half-precision linear computes
     * before its bias and its one rounding); 0: C has dtype. */
    int c_f32, pad_;
    int64_t a_dims[SMELT_MAX_DIMS], a_strides[SMELT_MAX_DIMS];
    int64_t b_dims[SMELT_MAX_DIMS], b_strides[SMELT_MAX_DIMS];
    int64_t c_dims[SMELT_MAX_DIMS], c_strides[SMELT_MAX_DIMS];
} kern_matmul_desc;

/* 0 on success; -1 with a message in err (unsupported dtype, oneDNN error).
 * Thread-safe; M, N or K may be 0 (K == 0 writes zeros). */
int kern_matmul(const kern_matmul_desc *d, const void *a, const void *b, void *c,
                char *err, size_t errlen);

/* A packed copy of one matmul's B operand in MKL's packed sgemm format
 * (cblas_sgemm_pack, from the torch library loaded in this process; about
 * 1.7x the size of B), reused by later calls while B is unchanged. The
 * caller owns one per matmul whose B is a weight (a plan: one per such
 * step); it holds at most one copy until freed. Thread-safe: runs sharing
 * a pack read the same copy; a run that needs a new one replaces it, and
 * the old one is freed when the last run reading it is done. */
typedef struct kern_matmul_pack kern_matmul_pack;

/* What B's data is: the caller guarantees that one (owner, B pointer,
 * version) names the same contents for as long as the owner is current.
 * owner 0: unknown (nothing is packed). always: pack whatever the shape
 * and budget (weight_packing="always"); else only where packing was
 * measured to pay (at most 2 rows, B at most 16 MB) and a new copy only
 * while all live copies stay within kern_matmul_pack_budget. */
typedef struct kern_matmul_stamp {
    uint64_t owner;
    int64_t version;
    int always;
} kern_matmul_stamp;

/* The bytes all live packed copies may take (weight_packing="auto"):
 * set (bytes >= 0; -1 restores the default, 1/64 of physical memory up to
 * 64 MB), and read with the bytes live now. */
void kern_matmul_pack_budget_set(int64_t bytes);
int64_t kern_matmul_pack_budget(void);
int64_t kern_matmul_pack_live(void);

/* Frees pk's copy now (the plan's owner went away); a later run packs
 * again. */
void kern_matmul_pack_release(kern_matmul_pack *pk);

/* A new, empty pack; NULL if out of memory. */
kern_matmul_pack *kern_matmul_pack_new(void);
void kern_matmul_pack_free(kern_matmul_pack *pk);

/* kern_matmul with B read from pk's copy, packed first unless pk holds
 * one of (b, stamp, rows per piece). Used for fp32 matmuls whose B is the
 * same for every batch entry, whose A and C batch dims fold into their
 * rows and whose A, B rows or columns are contiguous (C's rows), when MKL
 * is present; everything else, and stamp NULL or unknown, runs as
 * kern_matmul (same results up to rounding order). */
int kern_matmul_packed(const kern_matmul_desc *d, const void *a, const void *b, void *c,
                       kern_matmul_pack *pk, const kern_matmul_stamp *stamp, char *err, size_t errlen);

/* Drops cached primitives (smelt.reset / teardown). */
void kern_matmul_cache_clear(void);

#endif
