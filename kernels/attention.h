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
/* The largest tile of scores the kernels hand a hook (kern_sdpa_hook):
 * KERN_SDPA_TILE_Q query rows by KERN_SDPA_TILE_K keys, rows
 * KERN_SDPA_TILE_K floats apart. */
#define KERN_SDPA_TILE_Q 32
#define KERN_SDPA_TILE_K 64

typedef enum kern_sdpa_mask { KERN_SDPA_NO_MASK, KERN_SDPA_BOOL_MASK, KERN_SDPA_ADD_MASK } kern_sdpa_mask;

/* The dtype of q, k, v, out and an additive mask. F32 everywhere; BF16 and
 * F16 only in the forward without a hook: each element read is converted
 * to float32 as the kernel packs its tiles (no float32 copy of a whole
 * operand), everything is computed in float32 as for F32, and each output
 * element is rounded once (to nearest even), as eager's flash kernel. */
typedef enum kern_sdpa_dtype { KERN_SDPA_F32, KERN_SDPA_BF16, KERN_SDPA_F16 } kern_sdpa_dtype;

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
    kern_sdpa_dtype dtype;
} kern_sdpa_desc;

/* Flex attention's hook into the kernels (inductor/flex.c): for batch
 * entry t (row-major over bdims), query rows [i0, i0 + nq) and keys [j0,
 * j0 + nk) (nq <= KERN_SDPA_TILE_Q, nk <= KERN_SDPA_TILE_K).
 *   keep    0 when no key of the tile attends any of its rows (the tile is
 *           skipped), else 1; NULL: every tile is kept
 *   scores  the tile's scaled scores s (rows ld apart, columns past nk
 *           unused) modified in place: the score function applied, a key a
 *           row does not attend -inf
 *   grads   backward only: ds, the gradients of the modified scores (0
 *           where a key is not attended), times the derivative of the
 *           score function at the raw (scaled, unmodified) scores raw, in
 *           place; NULL: the score function is the identity
 * Called from the pool's threads at once: ctx is shared, read-only. */
typedef struct kern_sdpa_hook {
    int (*keep)(void *ctx, int64_t t, int64_t i0, int nq, int64_t j0, int nk);
    void (*scores)(void *ctx, int64_t t, int64_t i0, int nq, int64_t j0, int nk, float *s, int ld);
    void (*grads)(void *ctx, int64_t t, int64_t i0, int nq, int64_t j0, int nk, const float *raw, float *ds, int ld);
    void *ctx;
} kern_sdpa_hook;

/* What a call adds to a desc (kern_sdpa_ex, kern_sdpa_backward_ex): all
 * zero is kern_sdpa's behaviour.
 *   hook     NULL, or the score hook (the desc then has no mask and is not
 *            causal)
 *   out_row  the forward's out row stride (0: Ev; entries L * out_row apart)
 *   lse      forward: NULL, or where each row's log-sum-exp of its
 *            (modified) scores goes, -inf for a row with no key: row i of
 *            entry t at lse[(t * L + i) * lse_row]
 *   dlse     backward: NULL, or the gradient of that log-sum-exp (its
 *            share of dS is dlse P): row i of entry t at dlse[offset of t
 *            under dlse_op's batch strides + i * dlse_op.row] */
typedef struct kern_sdpa_extra {
    const kern_sdpa_hook *hook;
    int64_t out_row;
    float *lse;
    int64_t lse_row;
    const float *dlse;
    kern_sdpa_operand dlse_op;
} kern_sdpa_extra;

/* Computes out (contiguous [batch.., L, Ev]) across the thread pool; q,
 * k, v, out (and an additive mask) of d->dtype. 0, or -1 with a message
 * in err (bad sizes, a half-precision dtype with a hook). */
int kern_sdpa(const kern_sdpa_desc *d, const void *q, const void *k, const void *v,
              const void *mask, void *out, char *err, size_t errlen);
int kern_sdpa_ex(const kern_sdpa_desc *d, const kern_sdpa_extra *x, const void *q, const void *k,
                 const void *v, const void *mask, void *out, char *err, size_t errlen);

/* The gradients of kern_sdpa's out for a gradient g of it, flash-style:
 * the probabilities are recomputed block by block (from q, k, the mask and
 * each row's log-sum-exp, found in a first pass), never stored whole. o
 * is kern_sdpa's out for the same desc and operands, read with d->o's
 * strides; g with d->g's ([batch.., L, Ev] both). Writes dq [batch.., L, E],
 * dk [batch.., S, E] and dv [batch.., S, Ev], contiguous over all of q's
 * batch dims: where k or v broadcast a batch dim, the caller sums it.
 * d->dtype must be F32. 0, or -1 with a message in err. */
int kern_sdpa_backward(const kern_sdpa_desc *d, const float *q, const float *k, const float *v,
                       const void *mask, const float *o, const float *g, float *dq, float *dk, float *dv,
                       char *err, size_t errlen);
int kern_sdpa_backward_ex(const kern_sdpa_desc *d, const kern_sdpa_extra *x, const float *q, const float *k,
                          const float *v, const void *mask, const float *o, const float *g, float *dq, float *dk,
                          float *dv, char *err, size_t errlen);

#endif
