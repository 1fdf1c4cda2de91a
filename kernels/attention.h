/* smelt attention: out = softmax(q @ k^T * scale + mask) @ v, float32, as
 * a flash-style kernel: blocks of query rows against blocks of keys with an
 * online softmax (running row max and sum, accumulator rescaled), so the
 * [L, S] score matrix is never written out.
 *
 * Shapes (all strides in elements, any values, stride 0 = broadcast):
 *   q [batch.., L, E], k [batch.., S, E], v [batch.., S, Ev],
 *   mask [batch.., L, S] (optional), out [batch.., L, Ev] contiguous.
 * batch.. are nb dims (0..6) of sizes bdims; each operand gives its own
 * strides for them (0 where it broadcasts).
 * causal: key j attends query i only when j <= i (torch's is_causal).
 * A row whose every key is masked (or S = 0) gives zeros, as torch does.
 */
#ifndef SMELT_KERN_ATTENTION_H
#define SMELT_KERN_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#define KERN_SDPA_MAX_BATCH 6

typedef enum kern_sdpa_mask { KERN_SDPA_NO_MASK, KERN_SDPA_BOOL_MASK, KERN_SDPA_ADD_MASK } kern_sdpa_mask;

/* One operand: batch strides, then the row and column strides. */
typedef struct kern_sdpa_operand {
    int64_t bstride[KERN_SDPA_MAX_BATCH];
    int64_t row, col;
} kern_sdpa_operand;

typedef struct kern_sdpa_desc {
    int nb;
    int64_t bdims[KERN_SDPA_MAX_BATCH];
    int64_t L, S, E, Ev;
    float scale;
    int causal;
    kern_sdpa_mask mask_kind;   /* bool: 1 = attend; add: float32 added to the scores */
    kern_sdpa_operand q, k, v, mask;
    kern_sdpa_operand o, g;     /* kern_sdpa_backward only: out and its gradient */
} kern_sdpa_desc;

/* Computes out (contiguous [batch.., L, Ev]) across the thread pool.
 * 0, or -1 with a message in err (bad sizes). */
int kern_sdpa(const kern_sdpa_desc *d, const float *q, const float *k, const float *v,
              const void *mask, float *out, char *err, size_t errlen);

/* The gradients of kern_sdpa's out for a gradient g of it, flash-style:
 * the probabilities are recomputed block by block (from q, k, the mask and
 * each row's log-sum-exp, found in a first pass), never stored whole. o
 * is kern_sdpa's out for the same desc and operands, read with d->o's
 * strides; g with d->g's ([batch.., L, Ev] both). Writes dq [batch.., L, E],
 * dk [batch.., S, E] and dv [batch.., S, Ev], contiguous over all of q's
 * batch dims: where k or v broadcast a batch dim, the caller sums it.
 * 0, or -1 with a message in err. */
int kern_sdpa_backward(const kern_sdpa_desc *d, const float *q, const float *k, const float *v,
                       const void *mask, const float *o, const float *g, float *dq, float *dk, float *dv,
                       char *err, size_t errlen);

#endif
