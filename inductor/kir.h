/* smelt kernel IR (kir): the loop-level form between lowering and codegen.
 *
 * A kernel iterates over `nvars` loop variables. Variables in `rmask` are
 * reduction variables; the rest are outer variables. Outer points are
 * independent (split across threads); for each outer point the items run in
 * order:
 *   KI_REDUCE    loop over all reduction vars accumulating `value` with op
 *                `rop`; the result is phase value number k (k-th REDUCE item)
 *   KI_STORE     loop over all reduction vars storing `value` at `ix`
 *   KI_ROWSTORE  store `value` at `ix` once (ix uses outer vars only)
 * A kernel without reduction vars has only STORE items (run once per point).
 * Expressions may read phase values of earlier REDUCE items (KE_PHASE).
 *
 * Index expressions (kix) are integer trees over loop variables, hash-consed
 * and simplified on construction using variable ranges [0, size).
 * Scalar expressions (kexpr) compute one element; `dtype` is the value's
 * smelt dtype (F16/BF16 values are computed as f32 by the backends).
 */
#ifndef SMELT_KIR_H
#define SMELT_KIR_H

#include "graph.h"

#define KIR_MAX_VARS 24

typedef enum kix_op {
    KIX_CONST,   /* c */
    KIX_VAR,     /* loop variable number c */
    KIX_ADD,     /* a + b */
    KIX_MUL,     /* a * c */
    KIX_DIV,     /* a / c, c > 0, a >= 0 */
    KIX_MOD      /* a % c, c > 0, a >= 0 */
} kix_op;

typedef struct kix {
    uint8_t op;
    int32_t a, b;
    int64_t c;
    int64_t lo, hi;        /* value range, inclusive */
} kix;

typedef enum kexpr_op {
    KE_LOAD,     /* buf[ix]: element of plan buffer `buf`, dtype = buffer dtype */
    KE_CONST,    /* f (floating dtype) or i (bool/integer) */
    KE_INDEX,    /* the integer value of index expression ix (dtype I64) */
    KE_PHASE,    /* phase value number `phase` */
    KE_OP,       /* graph op `gop` over src[0..2]; attrs from graph node `gnode`;
                    operands are converted to `cdtype` before computing */
    KE_GATHER    /* buf[ix + src[0] * i]: a load at a computed position (src[0]
                    an int64 value in range, CHECKIDX's) */
} kexpr_op;

typedef struct kexpr {
    uint8_t op;
    uint8_t dtype;         /* result dtype */
    uint8_t cdtype;        /* KE_OP: operand computation dtype */
    uint16_t gop;          /* KE_OP: smelt_op */
    int32_t src[3];
    int32_t gnode;         /* KE_OP: node holding attrs (CLAMP), or -1 */
    int32_t buf, ix, phase;
    double f;
    int64_t i;
} kexpr;

typedef enum kitem_kind { KI_REDUCE, KI_STORE, KI_ROWSTORE } kitem_kind;

typedef struct kitem {
    uint8_t kind;
    uint16_t rop;          /* KI_REDUCE: SUM PROD AMAX AMIN ARGMAX ARGMIN ANY ALL */
    uint8_t acc_dtype;     /* KI_REDUCE: accumulator / phase dtype */
    int32_t value;         /* kexpr */
    int32_t buf, ix;       /* stores: destination buffer and element index */
} kitem;

/* A kernel. ARGMAX/ARGMIN phases yield the row-major flat index over the
 * reduction vars (in var order). `split` > 1 (only for a kernel whose single
 * REDUCE item feeds only ROWSTOREs) splits reduction var `split_var` into
 * `split` chunks computed in parallel and combined in order. */
typedef struct kir_kernel {
    int nvars;
    int64_t size[KIR_MAX_VARS];
    uint32_t rmask;
    int vvar;              /* vectorised variable, or -1 */
    int split, split_var;
    kitem *items;
    int nitems;
    int nphase;
} kir_kernel;

/* The arenas a set of kernels share. */
typedef struct kir_pool {
    kix *ix; int32_t nix, cix;
    kexpr *ex; int32_t nex, cex;
    int32_t *hix, *hex;    /* open-addressing intern tables (-1 = empty) */
    int32_t chix, chex;    /* their sizes, powers of two */
} kir_pool;

#endif
