/* autograd.h — the compiled backward: a traced forward graph split into a
 * forward graph that also returns the values the backward needs, and a
 * backward graph that maps output gradients to input gradients.
 *
 * Derivative rules (rules.c) are one function per primitive op, in a table
 * indexed by op; backward.c runs them over the graph in reverse order
 * (reverse-mode accumulation, broadcasting undone by sums) and decides
 * what the forward saves: graph inputs are kept by the caller (autograd's
 * saved tensors), outputs of matmuls, reductions, gathers and host calls
 * are saved as extra forward outputs, and pointwise and view chains the
 * rules read are recomputed inside the backward graph, where they fuse
 * into the gradient kernels (AOTAutograd's default partition).
 *
 * The backward graph's inputs are listed in bin[]: each is a forward input
 * it reads (kept by the caller), a saved forward value (a forward output
 * number at or past nout_user: contiguous), or the gradient of a forward
 * output (contiguous). Its outputs: one gradient per forward input that
 * requires grad (grad_in), of that input's dtype and shape.
 */
#ifndef SMELT_AUTOGRAD_H
#define SMELT_AUTOGRAD_H

#include <stddef.h>
#include <stdint.h>

#include "../inductor/graph.h"

typedef enum { AD_FWD_INPUT, AD_SAVED, AD_GRAD } ad_bin_kind;

typedef struct ad_bin {
    uint8_t kind;          /* ad_bin_kind */
    int32_t index;         /* forward input number; forward output number (AD_SAVED, AD_GRAD) */
} ad_bin;

/* Host calls the backward graph makes into torch (CALL node id k:
 * calls[k]); smelt._autograd.call_template(kind, params) gives each its
 * (fn, args, kwargs). */
typedef enum {
    AD_CALL_INDEX_ADD_ROWS,  /* (g [M, D], ids [M][, base [n, D]]) -> [n, D]: g's rows summed at ids
                                into zeros, or into a copy of base (embedding's backward); params: n,
                                whether base is given */
    AD_CALL_UNFOLD_BACKWARD, /* (g) -> grad of Tensor.unfold's input: params ndim, shape[ndim], dim,
                                size, step */
    AD_CALL_VJP              /* (the forward host call's sources, then a gradient per result) -> a
                                gradient per source, from torch's autograd over the call run again;
                                params: the forward call's id, its source and result counts, its key */
} ad_call_kind;

#define AD_CALL_MAX_PARAMS 16

typedef struct ad_call {
    uint8_t kind;          /* ad_call_kind */
    int nparam;
    int64_t param[AD_CALL_MAX_PARAMS];
} ad_call;

typedef struct ad_split {
    smelt_graph *fwd;      /* the forward graph, saved values appended to its outputs */
    smelt_graph *bwd;      /* the backward graph */
    int32_t nout_user;     /* the forward's own outputs (saved ones follow) */
    int32_t nsaved;        /* forward outputs nout_user .. nout_user + nsaved - 1 */
    int32_t nbin;
    ad_bin *bin;           /* backward input k */
    int32_t ngrad_in, *grad_in;      /* backward output k: the gradient of forward input grad_in[k] */
    uint64_t *grad_in_uses;          /* per backward output: bit j set when it depends on the j-th
                                        AD_GRAD input (in bin order; j >= 63 all share bit 63). An
                                        output none of whose gradients flowed in is None, as eager's */
    uint8_t *out_diff;     /* per forward output (nout_user): it has a gradient (float, depends on an
                              input that requires grad, not written back into an input) */
    int32_t ndiff;         /* how many do: 0 when the region needs no backward */
    int32_t ncalls;
    ad_call *calls;        /* the backward graph's host calls, by id */
    int64_t saved_bytes;   /* the saved values' bytes (forward inputs not counted) */
    int32_t nrecomputed;   /* forward nodes the backward graph computes again */
} ad_split;

/* Splits g for inputs with requires_grad[k] != 0 (k over g's inputs); its
 * last nwriteback outputs are written back into inputs (running
 * statistics) and carry no gradient. 0 on success; 1 when some op on a
 * differentiable path has no rule (the reason in err: the caller runs
 * eagerly); -1 on an internal error (err). */
int ad_split_graph(const smelt_graph *g, const uint8_t *requires_grad, int32_t nwriteback, ad_split *s, char *err,
                   size_t errlen);
void ad_split_free(ad_split *s);

#endif
