/* adint.h — what the derivative rules (rules.c) share with the sweep
 * (backward.c). Internal to autograd/. */
#ifndef SMELT_AUTOGRAD_ADINT_H
#define SMELT_AUTOGRAD_ADINT_H

#include "autograd.h"

typedef struct ad {
    const smelt_graph *g;      /* the forward graph */
    smelt_graph *b;            /* the backward graph being built */
    int failed;                /* a builder error (in b->err) */
    const char *unsupported;   /* the first op met without a rule */
    int32_t *val;              /* forward node -> its value in b, or -1 */
    int32_t *grad;             /* forward node -> its gradient so far in b, or -1 */
    uint8_t *req;              /* forward node needs a gradient */
    uint8_t *tile;             /* forward node depends on a FLEX_ARG: always recomputed (a flex
                                  attention's score function, evaluated inside its kernel) */
    int32_t nbin;
    ad_bin *bin;
    int32_t nsaved, *saved_node;
    int64_t saved_bytes;
    int32_t nrecomputed;
    int32_t ncalls;
    ad_call *calls;
} ad;

/* A rule: adds the contributions of node i's output gradient gy (a node of
 * b, i's dtype and shape) to its sources' gradients with ad_give. Returns
 * 0, or 1 when this form of the op has no rule (the frame runs eagerly). */
typedef int (*ad_rule)(ad *A, int32_t i, int32_t gy);
ad_rule ad_rule_of(smelt_op op);

/* Builders on b. Each returns the node, or -1 once anything failed. */
int32_t ad_add(ad *A, smelt_node *p);
const smelt_node *ad_node(ad *A, int32_t id);
int32_t ad_op1(ad *A, smelt_op op, int32_t x);
int32_t ad_op2(ad *A, smelt_op op, int32_t x, int32_t y);
int32_t ad_where(ad *A, int32_t c, int32_t x, int32_t y);
int32_t ad_k(ad *A, double v);                                  /* a Python float */
int32_t ad_cast(ad *A, int32_t x, smelt_dtype dt);
int32_t ad_shaped(ad *A, smelt_op op, int32_t x, int ndim, const int64_t *shape);   /* RESHAPE / EXPAND */
int32_t ad_red(ad *A, smelt_op op, int32_t x, uint32_t dims, int keepdim);
int32_t ad_full(ad *A, smelt_dtype dt, int ndim, const int64_t *shape, double v);
int32_t ad_zeros_like_fwd(ad *A, int32_t i);
int32_t ad_permute(ad *A, int32_t x, const int8_t *perm);
int32_t ad_sum_to(ad *A, int32_t x, int32_t fwd_node);
/* A host call of kind on b over src[0..nsrc) with nout results, result k
 * like forward node like[k] (dtype, shape) or, for like[k] < 0, the dtype
 * of src[0] and shape shapes[k]; params as ad_call. The first result's
 * node (the others follow). */
int32_t ad_host_call(ad *A, ad_call_kind kind, int nsrc, const int32_t *src, int nout, const int32_t *like,
                     const int64_t (*shapes)[SMELT_MAX_DIMS], const int *ndims, int nparam, const int64_t *param);
/* forward node i's value in b */
int32_t ad_val(ad *A, int32_t i);
/* contribution c to the gradient of node i's source k */
void ad_give(ad *A, int32_t i, int k, int32_t c);

#endif
