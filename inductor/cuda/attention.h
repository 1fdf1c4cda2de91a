/* attention.h — smelt's flash attention for NVIDIA GPUs, as CUDA C text
 * for the CUDA back end's translation unit (attention.c).
 *
 * A step is one kern_sdpa_desc (kernels/attention.h: same semantics)
 * in element type float32, float16 or bfloat16, forward (mode 0) or
 * backward (mode 1). Its sizes, strides, scale, causal flag and mask kind
 * are constants of its kernels; the text needs the CUDA back end's
 * prelude (f16_to_f32 .. f32_to_bf16) before it.
 *
 * Entry points (all of a mode take the same parameters; T is float, or
 * unsigned short holding f16 / bf16 bits):
 *   forward  (const T *q, const T *k, const T *v, const void *mask, T *out, float *scratch)
 *   backward (const T *q, const T *k, const T *v, const T *o, const T *g, const void *mask,
 *             T *dq, T *dk, T *dv, float *scratch)
 * out [batch.., L, Ev], dq [batch.., L, E], dk [batch.., S, E], dv
 * [batch.., S, Ev] contiguous over q's batch dims (kern_sdpa_backward's
 * layout: where k or v broadcast, the caller sums). mask: bool bytes (1 =
 * attend) or values added to the scores, in T (float for f32), read with
 * d->mask's strides. The scratch is cuda_sdpa_scratch_bytes, needs no
 * initialisation and must not be shared by launches running at once.
 */
#ifndef SMELT_CUDA_ATTENTION_H
#define SMELT_CUDA_ATTENTION_H

#include "../../kernels/attention.h"
#include "../graph.h"

#include <stddef.h>
#include <stdint.h>

/* One launch: entry point, grid and block, dynamic shared memory bytes
 * (above 48 KiB the launcher must first raise the function's
 * CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to it), args: the
 * parameter list (the mode). */
typedef struct cuda_launch_dim {
    char entry[32];
    unsigned grid[3], block[3], shared;
    int args;
} cuda_launch_dim;

/* 1 if the CUDA attention kernels take desc d in dtype dt (SMELT_F32,
 * SMELT_F16, SMELT_BF16), mode 0 forward, 1 backward; else 0 with why. */
int cuda_sdpa_supports(const kern_sdpa_desc *d, smelt_dtype dt, int mode, char *why, size_t n);
/* Appends to *text (malloc'd, grown with realloc; *len its length, kept
 * 0-terminated) the CUDA C of the kernels of attention step `step`
 * (extern "C" __global__ s<step>_...) and, the first time in a text, the
 * kernel templates they instantiate. d must be supported. */
void cuda_sdpa_source(const kern_sdpa_desc *d, smelt_dtype dt, int mode, int step, char **text, size_t *len);
/* The launches of the step, in order, into out (at most max): their
 * count (0: nothing to compute), or -1 if max is too small (4 is enough). */
int cuda_sdpa_launches(const kern_sdpa_desc *d, smelt_dtype dt, int mode, int step, cuda_launch_dim *out, int max);
/* Bytes of device scratch the step needs (the backward: m, 1 / l and
 * D = rowsum(dO O) per row, dQ's float accumulator); 0 if none. */
int64_t cuda_sdpa_scratch_bytes(const kern_sdpa_desc *d, smelt_dtype dt, int mode);

#endif
