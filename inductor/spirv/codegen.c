/* codegen.c — kir kernels to SPIR-V (OpenCL Kernel execution model).
 *
 * Entry: spv_codegen_module(plan). One module per plan, one entry point
 * "k<i>" per kernel; every argument a CrossWorkgroup pointer: the kernel's
 * slots (plan buffers, typed by their storage dtype), then the run's
 * int32 error flag.
 *
 * Work decomposition (spv_kernel_shape):
 *   pointwise kernels (no reduction vars): one work-item per outer point,
 *   work-groups of SPV_LOCAL items, points past the end do nothing;
 *   reduction kernels over short rows (fewer than SMELT_SPIRV_GROUP_MIN
 *   reduction points, default 256): the same, each work-item running its
 *   row's items in order;
 *   reduction kernels over long rows: one work-group of L lanes per outer
 *   point. Lane l visits the row's points l, l + L, ...; a REDUCE item's
 *   lane partials meet in local memory (a tree of log2(L) steps between
 *   barriers) and every lane reads the result; STORE items store each lane's
 *   points (a barrier after them: later items may read what they wrote);
 *   ROWSTOREs are lane 0's.
 * A split kernel (kir.h) runs as an ordinary reduction kernel: its row's
 * work-group is the parallel split.
 * Values are computed as in cpu/codegen.c: f16/bf16 as f32, bool as
 * OpTypeBool (stored as one byte), torch's semantics for integer
 * division, shifts, powers, NaN-propagating max/min, argmax ties.
 * Transcendentals are OpenCL.std's (OpenCL's full-profile accuracy).
 * Control flow is unstructured (the Kernel model allows it); loop counters
 * and accumulators live in Function variables, so no OpPhi is needed.
 */
#include "spv.h"
#include "../kix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PHASE 64

typedef struct sg {
    spv_mod *m;
    const smelt_plan *p;
    kir_pool *P;
    const kir_kernel *k;
    spv_buf body;             /* the current function's blocks after its first label */
    spv_buf vars;             /* its Function variables (first block) */
    uint32_t *arg;            /* per plan buffer: its parameter, 0 if the kernel does not touch it */
    uint32_t flag;            /* int32 *flag */
    uint32_t var[KIR_MAX_VARS];
    uint32_t phase[MAX_PHASE];
    uint32_t *memo, *memo_ep, epoch;
    int L;                    /* lanes per row (1: a work-item per row) */
    uint32_t lane;            /* this lane (i64), L > 1 */
    uint32_t tv, tb, t8, t16, t32, t64, th, tf, td;
    uint32_t half_tmp;        /* a Function half variable (round_to), 0 until needed */
    uint32_t scratch;         /* split kernels: the partials parameter */
    uint32_t local_t[16], local_id[16];   /* this kernel's Workgroup arrays (local_array) */
    int local_w[16], nlocal;
    uint32_t split_lo, split_len;   /* split kernels' partials: this chunk of split_var (else 0) */
    uint32_t builtins[3];     /* WorkgroupId, LocalInvocationId, GlobalInvocationId variables */
    uint32_t *iface;          /* entry point interface (Input builtins) */
    int niface;
} sg;

/* Types of widths a module declares a capability for: made on first use. */
static uint32_t T8(sg *g) { return g->t8 ? g->t8 : (g->t8 = spv_t_int(g->m, 8)); }
static uint32_t T16(sg *g) { return g->t16 ? g->t16 : (g->t16 = spv_t_int(g->m, 16)); }
static uint32_t TH(sg *g) { return g->th ? g->th : (g->th = spv_t_float(g->m, 16)); }
static uint32_t TD(sg *g) { return g->td ? g->td : (g->td = spv_t_float(g->m, 64)); }

/* ---------- instructions ---------- */

static uint32_t emit_op(sg *g, uint32_t op, uint32_t t, const uint32_t *a, int n)
{
    uint32_t ops[8], id = spv_id(g->m);
    ops[0] = t, ops[1] = id;
    memcpy(ops + 2, a, (size_t)n * sizeof *a);
    spv_ins(&g->body, op, ops, (size_t)n + 2);
    spv_set_type(g->m, id, t);
    return id;
}

static uint32_t op1(sg *g, uint32_t op, uint32_t t, uint32_t a) { return emit_op(g, op, t, &a, 1); }
static uint32_t op2(sg *g, uint32_t op, uint32_t t, uint32_t a, uint32_t b)
{
    return emit_op(g, op, t, (uint32_t[]){ a, b }, 2);
}
static uint32_t ty(sg *g, uint32_t v) { return spv_type_of(g->m, v); }
/* a op b with the type of a (arithmetic). */
static uint32_t ar(sg *g, uint32_t op, uint32_t a, uint32_t b) { return op2(g, op, ty(g, a), a, b); }
/* a op b -> bool (comparisons). */
static uint32_t cmp(sg *g, uint32_t op, uint32_t a, uint32_t b) { return op2(g, op, g->tb, a, b); }
static uint32_t sel(sg *g, uint32_t c, uint32_t a, uint32_t b)
{
    return emit_op(g, SpvOpSelect, ty(g, a), (uint32_t[]){ c, a, b }, 3);
}
static uint32_t ext(sg *g, uint32_t inst, uint32_t a, uint32_t b)
{
    return emit_op(g, SpvOpExtInst, ty(g, a), (uint32_t[]){ g->m->ocl, inst, a, b }, b ? 4 : 3);
}

static void br(sg *g, uint32_t to) { spv_ins(&g->body, SpvOpBranch, &to, 1); }
static void brc(sg *g, uint32_t c, uint32_t t, uint32_t f)
{
    spv_ins(&g->body, SpvOpBranchConditional, (uint32_t[]){ c, t, f }, 3);
}

/* A Function variable of type t (declared in the first block). */
static uint32_t fvar(sg *g, uint32_t t)
{
    uint32_t id = spv_id(g->m), pt = spv_t_ptr(g->m, SpvScFunction, t);
    spv_ins(&g->vars, SpvOpVariable, (uint32_t[]){ pt, id, SpvScFunction }, 3);
    spv_set_type(g->m, id, pt);
    return id;
}
static uint32_t load(sg *g, uint32_t t, uint32_t ptr) { return op1(g, SpvOpLoad, t, ptr); }
static void store(sg *g, uint32_t ptr, uint32_t v) { spv_ins(&g->body, SpvOpStore, (uint32_t[]){ ptr, v }, 2); }

static uint32_t c64(sg *g, int64_t v) { return spv_c_int(g->m, g->t64, 64, v); }
static uint32_t c32(sg *g, int64_t v) { return spv_c_int(g->m, g->t32, 32, v); }

/* ---------- types and constants ---------- */

static int is_fp(smelt_dtype dt) { return smelt_dtype_is_float(dt); }
static int is_unsigned(smelt_dtype dt) { return dt == SMELT_U8 || dt == SMELT_BOOL; }

/* The type values of dt are computed in. */
static uint32_t ctype(sg *g, smelt_dtype dt)
{
    switch (dt) {
    case SMELT_BOOL: return g->tb;
    case SMELT_U8: case SMELT_I8: return T8(g);
    case SMELT_I16: return T16(g);
    case SMELT_I32: return g->t32;
    case SMELT_I64: return g->t64;
    case SMELT_F64: return TD(g);
    default: return g->tf;
    }
}

/* The type dt is stored as. */
static uint32_t stype(sg *g, smelt_dtype dt)
{
    switch (dt) {
    case SMELT_BOOL: return T8(g);
    case SMELT_F16: return TH(g);
    case SMELT_BF16: return T16(g);
    case SMELT_F32: return g->tf;
    default: return ctype(g, dt);
    }
}

static int int_bits(smelt_dtype dt)
{
    switch (dt) {
    case SMELT_U8: case SMELT_I8: case SMELT_BOOL: return 8;
    case SMELT_I16: return 16;
    case SMELT_I32: return 32;
    default: return 64;
    }
}

static uint32_t cfp(sg *g, uint32_t t, double v) { return spv_c_float(g->m, t, t == g->td && t ? 64 : 32, v); }
static uint32_t cint(sg *g, smelt_dtype dt, int64_t v)
{
    if (dt == SMELT_BOOL)
        return spv_c_bool(g->m, v != 0);
    return spv_c_int(g->m, ctype(g, dt), int_bits(dt), v);
}
/* Constant (f, i) in the compute type of dt. */
static uint32_t cval(sg *g, smelt_dtype dt, double f, int64_t i)
{
    return is_fp(dt) ? cfp(g, ctype(g, dt), f) : cint(g, dt, i);
}

/* ---------- conversions ---------- */

/* f32 -> bf16 bits (i16): round to nearest even, NaN quiet (as cpu/codegen.c). */
static uint32_t f32_to_bf16(sg *g, uint32_t x)
{
    uint32_t bits = op1(g, SpvOpBitcast, g->t32, x);
    uint32_t hi = ar(g, SpvOpShiftRightLogical, bits, c32(g, 16));
    uint32_t lsb = ar(g, SpvOpBitwiseAnd, hi, c32(g, 1));
    uint32_t r = ar(g, SpvOpShiftRightLogical, ar(g, SpvOpIAdd, bits, ar(g, SpvOpIAdd, lsb, c32(g, 0x7fff))), c32(g, 16));
    uint32_t nan = op1(g, SpvOpIsNan, g->tb, x);
    r = sel(g, nan, ar(g, SpvOpBitwiseOr, hi, c32(g, 0x40)), r);
    return op1(g, SpvOpUConvert, T16(g), r);
}

static uint32_t bf16_to_f32(sg *g, uint32_t h)
{
    uint32_t x = ar(g, SpvOpShiftLeftLogical, op1(g, SpvOpUConvert, g->t32, h), c32(g, 16));
    return op1(g, SpvOpBitcast, g->tf, x);
}

/* f32 rounded to half precision (nearest even), as f32: through a
 * Function variable of type half (vstore_half/vload_half: the
 * Float16Buffer capability every OpenCL device has, not Float16). */
static uint32_t round_to(sg *g, uint32_t x, smelt_dtype dt)
{
    if (dt == SMELT_BF16)
        return bf16_to_f32(g, f32_to_bf16(g, x));
    if (!g->half_tmp)
        g->half_tmp = fvar(g, TH(g));
    uint32_t zero = c64(g, 0);
    emit_op(g, SpvOpExtInst, g->tv, (uint32_t[]){ g->m->ocl, OclVstoreHalf, x, zero, g->half_tmp }, 5);
    return emit_op(g, SpvOpExtInst, g->tf, (uint32_t[]){ g->m->ocl, OclVloadHalf, zero, g->half_tmp }, 4);
}

/* Compute value v of dtype `from` in the compute type of `to` (torch's
 * conversion semantics). */
static uint32_t conv(sg *g, uint32_t v, smelt_dtype from, smelt_dtype to)
{
    if (from == to)
        return v;
    uint32_t tt = ctype(g, to), r;
    if (to == SMELT_BOOL)
        return is_fp(from) ? cmp(g, SpvOpFUnordNotEqual, v, cfp(g, ty(g, v), 0))
                           : cmp(g, SpvOpINotEqual, v, cint(g, from, 0));
    if (from == SMELT_BOOL)
        return sel(g, v, cval(g, to, 1, 1), cval(g, to, 0, 0));
    if (is_fp(from) && is_fp(to)) {
        r = ty(g, v) == tt ? v : op1(g, SpvOpFConvert, tt, v);
    } else if (is_fp(to)) {
        r = op1(g, is_unsigned(from) ? SpvOpConvertUToF : SpvOpConvertSToF, tt, v);
    } else if (is_fp(from)) {
        return op1(g, is_unsigned(to) ? SpvOpConvertFToU : SpvOpConvertFToS, tt, v);
    } else {
        int fb = int_bits(from), tb = int_bits(to);
        if (fb == tb)
            return v;
        return op1(g, fb > tb || is_unsigned(from) ? SpvOpUConvert : SpvOpSConvert, tt, v);
    }
    if (to == SMELT_F16 || to == SMELT_BF16)
        r = round_to(g, r, to);
    return r;
}

/* ---------- indexing, loads, stores ---------- */

static uint32_t ix_val(sg *g, int32_t e)
{
    const kix *k = &g->P->ix[e];
    switch (k->op) {
    case KIX_CONST: return c64(g, k->c);
    case KIX_VAR: return g->var[k->c];
    case KIX_ADD: return ar(g, SpvOpIAdd, ix_val(g, k->a), ix_val(g, k->b));
    case KIX_MUL: return ar(g, SpvOpIMul, ix_val(g, k->a), c64(g, k->c));
    case KIX_DIV: return ar(g, SpvOpUDiv, ix_val(g, k->a), c64(g, k->c));
    default: return ar(g, SpvOpUMod, ix_val(g, k->a), c64(g, k->c));
    }
}

/* Pointer to element i (i64) of plan buffer b. */
static uint32_t elem_ptr(sg *g, int32_t b, uint32_t i)
{
    uint32_t pt = spv_t_ptr(g->m, SpvScCrossWorkgroup, stype(g, g->p->bufs[b].dtype));
    return op2(g, SpvOpPtrAccessChain, pt, g->arg[b], i);
}

/* A loaded value of dtype dt as computed. */
static uint32_t widen(sg *g, smelt_dtype dt, uint32_t v)
{
    switch (dt) {
    case SMELT_BOOL: return cmp(g, SpvOpINotEqual, v, spv_c_int(g->m, T8(g), 8, 0));
    case SMELT_BF16: return bf16_to_f32(g, v);
    default: return v;
    }
}

static uint32_t load_at(sg *g, int32_t b, uint32_t i)
{
    smelt_dtype dt = g->p->bufs[b].dtype;
    if (dt == SMELT_F16)
        return emit_op(g, SpvOpExtInst, g->tf, (uint32_t[]){ g->m->ocl, OclVloadHalf, i, g->arg[b] }, 4);
    return widen(g, dt, load(g, stype(g, dt), elem_ptr(g, b, i)));
}

static void store_at(sg *g, int32_t b, uint32_t i, uint32_t v)
{
    smelt_dtype dt = g->p->bufs[b].dtype;
    if (dt == SMELT_F16) {
        emit_op(g, SpvOpExtInst, g->tv, (uint32_t[]){ g->m->ocl, OclVstoreHalf, v, i, g->arg[b] }, 5);
        return;
    }
    if (dt == SMELT_BOOL)
        v = sel(g, v, spv_c_int(g->m, T8(g), 8, 1), spv_c_int(g->m, T8(g), 8, 0));
    else if (dt == SMELT_BF16)
        v = f32_to_bf16(g, v);
    store(g, elem_ptr(g, b, i), v);
}

/* Sets `bit` (PLAN_FLAG_*) in the run's flag where bad holds. */
static void set_flag(sg *g, uint32_t bad, int bit)
{
    uint32_t yes = spv_id(g->m), done = spv_id(g->m);
    brc(g, bad, yes, done);
    spv_ins(&g->body, SpvOpLabel, &yes, 1);
    emit_op(g, SpvOpAtomicOr, g->t32, (uint32_t[]){ g->flag, c32(g, SpvScopeDevice), c32(g, 0), c32(g, bit) }, 4);
    br(g, done);
    spv_ins(&g->body, SpvOpLabel, &done, 1);
}

/* ---------- pointwise ops ---------- */

static uint32_t emit(sg *g, int32_t e);

static uint32_t int_div(sg *g, smelt_op op, smelt_dtype dt, uint32_t a, uint32_t b)
{
    uint32_t zero = cint(g, dt, 0), one = cint(g, dt, 1), m1 = cint(g, dt, -1);
    uint32_t bz = cmp(g, SpvOpIEqual, b, zero);
    set_flag(g, bz, PLAN_FLAG_ZERODIV);
    if (is_unsigned(dt)) {
        uint32_t bs = sel(g, bz, one, b);
        return ar(g, op == SMELT_OP_FLOORDIV ? SpvOpUDiv : SpvOpUMod, a, bs);
    }
    uint32_t bm1 = cmp(g, SpvOpIEqual, b, m1);
    uint32_t bs = sel(g, op2(g, SpvOpLogicalOr, g->tb, bz, bm1), one, b);
    uint32_t q = ar(g, SpvOpSDiv, a, bs), r = ar(g, SpvOpSRem, a, bs);
    q = sel(g, bm1, op1(g, SpvOpSNegate, ty(g, a), a), q);
    r = sel(g, bm1, zero, r);
    uint32_t adj = op2(g, SpvOpLogicalAnd, g->tb, cmp(g, SpvOpINotEqual, r, zero),
                       op2(g, SpvOpLogicalNotEqual, g->tb, cmp(g, SpvOpSLessThan, r, zero), cmp(g, SpvOpSLessThan, b, zero)));
    if (op == SMELT_OP_FLOORDIV)
        return sel(g, adj, ar(g, SpvOpISub, q, one), q);
    if (op == SMELT_OP_REMAINDER)
        return sel(g, adj, ar(g, SpvOpIAdd, r, b), r);
    return r;
}

static uint32_t fp_floordiv(sg *g, uint32_t a, uint32_t b)
{
    uint32_t t = ty(g, a), zero = cfp(g, t, 0), one = cfp(g, t, 1);
    uint32_t mod = ext(g, OclFmod, a, b);
    uint32_t div = ar(g, SpvOpFDiv, ar(g, SpvOpFSub, a, mod), b);
    uint32_t adj = op2(g, SpvOpLogicalAnd, g->tb, cmp(g, SpvOpFOrdNotEqual, mod, zero),
                       op2(g, SpvOpLogicalNotEqual, g->tb, cmp(g, SpvOpFOrdLessThan, b, zero),
                           cmp(g, SpvOpFOrdLessThan, mod, zero)));
    div = sel(g, adj, ar(g, SpvOpFSub, div, one), div);
    uint32_t fl = ext(g, OclFloor, div, 0);
    uint32_t up = cmp(g, SpvOpFOrdGreaterThan, ar(g, SpvOpFSub, div, fl), cfp(g, t, 0.5));
    fl = sel(g, up, ar(g, SpvOpFAdd, fl, one), fl);
    uint32_t q = ar(g, SpvOpFDiv, a, b);
    uint32_t signed0 = ext(g, OclCopysign, zero, q);
    uint32_t r = sel(g, cmp(g, SpvOpFUnordNotEqual, div, zero), fl, signed0);
    return sel(g, cmp(g, SpvOpFOrdEqual, b, zero), q, r);
}

static uint32_t fp_remainder(sg *g, uint32_t a, uint32_t b)
{
    uint32_t zero = cfp(g, ty(g, a), 0);
    uint32_t mod = ext(g, OclFmod, a, b);
    uint32_t adj = op2(g, SpvOpLogicalAnd, g->tb, cmp(g, SpvOpFOrdNotEqual, mod, zero),
                       op2(g, SpvOpLogicalNotEqual, g->tb, cmp(g, SpvOpFOrdLessThan, b, zero),
                           cmp(g, SpvOpFOrdLessThan, mod, zero)));
    return sel(g, adj, ar(g, SpvOpFAdd, mod, b), mod);
}

/* Integer power by squaring over all bits of the exponent. */
static uint32_t int_pow(sg *g, smelt_dtype dt, uint32_t a, uint32_t b)
{
    int bits = int_bits(dt);
    uint32_t one = cint(g, dt, 1), zero = cint(g, dt, 0), res = one, base = a, e = b;
    for (int i = 0; i < bits - (is_unsigned(dt) ? 0 : 1); i++) {
        uint32_t bit = cmp(g, SpvOpINotEqual, ar(g, SpvOpBitwiseAnd, e, one), zero);
        res = sel(g, bit, ar(g, SpvOpIMul, res, base), res);
        base = ar(g, SpvOpIMul, base, base);
        e = ar(g, SpvOpShiftRightLogical, e, one);
    }
    if (is_unsigned(dt))
        return res;
    uint32_t neg = cmp(g, SpvOpSLessThan, b, zero);
    uint32_t odd = cmp(g, SpvOpINotEqual, ar(g, SpvOpBitwiseAnd, b, one), zero);
    uint32_t m1 = cint(g, dt, -1);
    uint32_t nres = sel(g, cmp(g, SpvOpIEqual, a, one), one,
                        sel(g, cmp(g, SpvOpIEqual, a, m1), sel(g, odd, m1, one), zero));
    return sel(g, neg, nres, res);
}

static uint32_t shift(sg *g, smelt_op op, smelt_dtype dt, uint32_t a, uint32_t b)
{
    int bits = int_bits(dt);
    uint32_t zero = cint(g, dt, 0);
    uint32_t big = is_unsigned(dt) ? cmp(g, SpvOpUGreaterThanEqual, b, cint(g, dt, bits))
                                   : op2(g, SpvOpLogicalOr, g->tb, cmp(g, SpvOpSGreaterThanEqual, b, cint(g, dt, bits)),
                                         cmp(g, SpvOpSLessThan, b, zero));
    uint32_t bs = sel(g, big, zero, b);
    if (op == SMELT_OP_SHL)
        return sel(g, big, zero, ar(g, SpvOpShiftLeftLogical, a, bs));
    if (is_unsigned(dt))
        return sel(g, big, zero, ar(g, SpvOpShiftRightLogical, a, bs));
    return sel(g, big, ar(g, SpvOpShiftRightArithmetic, a, cint(g, dt, bits - 1)), ar(g, SpvOpShiftRightArithmetic, a, bs));
}

static uint32_t maxmin(sg *g, int is_max, smelt_dtype dt, uint32_t a, uint32_t b)
{
    if (dt == SMELT_BOOL)
        return op2(g, is_max ? SpvOpLogicalOr : SpvOpLogicalAnd, g->tb, a, b);
    if (is_fp(dt)) {
        uint32_t c = cmp(g, is_max ? SpvOpFOrdGreaterThan : SpvOpFOrdLessThan, a, b);
        c = op2(g, SpvOpLogicalOr, g->tb, c, op1(g, SpvOpIsNan, g->tb, a));
        return sel(g, c, a, b);
    }
    uint32_t op = is_unsigned(dt) ? (is_max ? SpvOpUGreaterThan : SpvOpULessThan) : (is_max ? SpvOpSGreaterThan : SpvOpSLessThan);
    return sel(g, cmp(g, op, a, b), a, b);
}

static uint32_t compare(sg *g, smelt_op op, smelt_dtype dt, uint32_t a, uint32_t b)
{
    static const uint32_t fp[] = { SpvOpFOrdEqual, SpvOpFUnordNotEqual, SpvOpFOrdLessThan, SpvOpFOrdLessThanEqual,
                                   SpvOpFOrdGreaterThan, SpvOpFOrdGreaterThanEqual };
    static const uint32_t sp[] = { SpvOpIEqual, SpvOpINotEqual, SpvOpSLessThan, SpvOpSLessThanEqual,
                                   SpvOpSGreaterThan, SpvOpSGreaterThanEqual };
    static const uint32_t up[] = { SpvOpIEqual, SpvOpINotEqual, SpvOpULessThan, SpvOpULessThanEqual,
                                   SpvOpUGreaterThan, SpvOpUGreaterThanEqual };
    int i = op - SMELT_OP_EQ;
    if (dt == SMELT_BOOL) {   /* bools compare as 0/1 */
        a = conv(g, a, SMELT_BOOL, SMELT_U8), b = conv(g, b, SMELT_BOOL, SMELT_U8);
        return cmp(g, up[i], a, b);
    }
    return cmp(g, (is_fp(dt) ? fp : is_unsigned(dt) ? up : sp)[i], a, b);
}

/* The OpenCL.std instruction computing op, or -1. */
static int ocl_unary(smelt_op op)
{
    static const struct { smelt_op op; int inst; } tab[] = {
        { SMELT_OP_EXP, OclExp }, { SMELT_OP_EXP2, OclExp2 }, { SMELT_OP_EXPM1, OclExpm1 }, { SMELT_OP_LOG, OclLog },
        { SMELT_OP_LOG2, OclLog2 }, { SMELT_OP_LOG10, OclLog10 }, { SMELT_OP_LOG1P, OclLog1p }, { SMELT_OP_SIN, OclSin },
        { SMELT_OP_COS, OclCos }, { SMELT_OP_TAN, OclTan }, { SMELT_OP_TANH, OclTanh }, { SMELT_OP_ERF, OclErf },
        { SMELT_OP_ERFC, OclErfc }, { SMELT_OP_ACOS, OclAcos }, { SMELT_OP_ASIN, OclAsin }, { SMELT_OP_ATAN, OclAtan },
        { SMELT_OP_ACOSH, OclAcosh }, { SMELT_OP_ASINH, OclAsinh }, { SMELT_OP_ATANH, OclAtanh }, { SMELT_OP_COSH, OclCosh },
        { SMELT_OP_SINH, OclSinh }, { SMELT_OP_LGAMMA, OclLgamma }, { SMELT_OP_ABS, OclFabs }, { SMELT_OP_SQRT, OclSqrt },
        { SMELT_OP_FLOOR, OclFloor }, { SMELT_OP_CEIL, OclCeil }, { SMELT_OP_TRUNC, OclTrunc }, { SMELT_OP_ROUND, OclRint },
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (tab[i].op == op)
            return tab[i].inst;
    return -1;
}

static uint32_t unary_fp(sg *g, smelt_op op, uint32_t x)
{
    uint32_t t = ty(g, x), one = cfp(g, t, 1), zero = cfp(g, t, 0);
    int inst = ocl_unary(op);
    if (inst >= 0)
        return ext(g, (uint32_t)inst, x, 0);
    switch (op) {
    case SMELT_OP_NEG: return op1(g, SpvOpFNegate, t, x);
    case SMELT_OP_DETACH: return x;
    case SMELT_OP_RSQRT: return ar(g, SpvOpFDiv, one, ext(g, OclSqrt, x, 0));
    case SMELT_OP_RECIPROCAL: return ar(g, SpvOpFDiv, one, x);
    case SMELT_OP_RELU: return sel(g, cmp(g, SpvOpFOrdLessThan, x, zero), zero, x);
    case SMELT_OP_SIGN:
        return sel(g, cmp(g, SpvOpFOrdGreaterThan, x, zero), one,
                   sel(g, cmp(g, SpvOpFOrdLessThan, x, zero), cfp(g, t, -1), zero));
    case SMELT_OP_ISNAN: return op1(g, SpvOpIsNan, g->tb, x);
    case SMELT_OP_ISINF: return op1(g, SpvOpIsInf, g->tb, x);
    case SMELT_OP_SIGNBIT: {
        uint32_t it = t == g->td && t ? g->t64 : g->t32;
        return cmp(g, SpvOpSLessThan, op1(g, SpvOpBitcast, it, x), spv_c_int(g->m, it, it == g->t64 ? 64 : 32, 0));
    }
    case SMELT_OP_SIGMOID:
        return ar(g, SpvOpFDiv, one, ar(g, SpvOpFAdd, one, ext(g, OclExp, op1(g, SpvOpFNegate, t, x), 0)));
    case SMELT_OP_NDTR:   /* 0.5 erfc(-x / sqrt 2) */
        return ar(g, SpvOpFMul, ext(g, OclErfc, ar(g, SpvOpFMul, x, cfp(g, t, -M_SQRT1_2)), 0), cfp(g, t, 0.5));
    case SMELT_OP_GELU_TANH: {   /* x / (1 + e^(-2v)), v = sqrt(2/pi) (x + 0.044715 x^3) */
        const double k = -2.0 * sqrt(2.0 / M_PI);
        uint32_t w = ar(g, SpvOpFMul, x, ar(g, SpvOpFAdd, ar(g, SpvOpFMul, ar(g, SpvOpFMul, x, x), cfp(g, t, k * 0.044715)),
                                              cfp(g, t, k)));
        return ar(g, SpvOpFDiv, x, ar(g, SpvOpFAdd, ext(g, OclExp, w, 0), one));
    }
    default: return 0;
    }
}

static uint32_t unary_int(sg *g, smelt_op op, smelt_dtype dt, uint32_t x)
{
    uint32_t zero = cint(g, dt, 0), t = ty(g, x);
    int u = is_unsigned(dt);
    if (dt == SMELT_BOOL) {
        switch (op) {
        case SMELT_OP_DETACH: case SMELT_OP_ABS: case SMELT_OP_RELU: case SMELT_OP_FLOOR: case SMELT_OP_CEIL:
        case SMELT_OP_TRUNC: case SMELT_OP_ROUND: case SMELT_OP_SIGN: return x;
        case SMELT_OP_ISNAN: case SMELT_OP_ISINF: case SMELT_OP_SIGNBIT: return spv_c_bool(g->m, 0);
        case SMELT_OP_BITWISE_NOT: case SMELT_OP_NEG: return op1(g, SpvOpLogicalNot, g->tb, x);
        default: return 0;
        }
    }
    switch (op) {
    case SMELT_OP_NEG: return op1(g, SpvOpSNegate, t, x);
    case SMELT_OP_DETACH: return x;
    case SMELT_OP_ABS: return u ? x : sel(g, cmp(g, SpvOpSLessThan, x, zero), op1(g, SpvOpSNegate, t, x), x);
    case SMELT_OP_RELU: return u ? x : sel(g, cmp(g, SpvOpSLessThan, x, zero), zero, x);
    case SMELT_OP_FLOOR: case SMELT_OP_CEIL: case SMELT_OP_TRUNC: case SMELT_OP_ROUND: return x;
    case SMELT_OP_SIGN:
        return ar(g, SpvOpISub, sel(g, cmp(g, u ? SpvOpUGreaterThan : SpvOpSGreaterThan, x, zero), cint(g, dt, 1), zero),
                  sel(g, cmp(g, SpvOpSLessThan, x, zero), cint(g, dt, 1), zero));
    case SMELT_OP_ISNAN: case SMELT_OP_ISINF: return spv_c_bool(g->m, 0);
    case SMELT_OP_SIGNBIT: return u ? spv_c_bool(g->m, 0) : cmp(g, SpvOpSLessThan, x, zero);
    case SMELT_OP_BITWISE_NOT: return op1(g, SpvOpNot, t, x);
    default: return 0;
    }
}

static uint32_t binary_fp(sg *g, smelt_op op, uint32_t a, uint32_t b)
{
    switch (op) {
    case SMELT_OP_ADD: return ar(g, SpvOpFAdd, a, b);
    case SMELT_OP_SUB: return ar(g, SpvOpFSub, a, b);
    case SMELT_OP_MUL: return ar(g, SpvOpFMul, a, b);
    case SMELT_OP_DIV: return ar(g, SpvOpFDiv, a, b);
    case SMELT_OP_FLOORDIV: return fp_floordiv(g, a, b);
    case SMELT_OP_POW: return ext(g, OclPow, a, b);
    case SMELT_OP_ATAN2: return ext(g, OclAtan2, a, b);
    case SMELT_OP_FMOD: return ext(g, OclFmod, a, b);
    case SMELT_OP_REMAINDER: return fp_remainder(g, a, b);
    default: return 0;
    }
}

static uint32_t binary_bool(sg *g, smelt_op op, uint32_t a, uint32_t b)
{
    switch (op) {
    case SMELT_OP_ADD: case SMELT_OP_BITWISE_OR: case SMELT_OP_LOGICAL_OR: return op2(g, SpvOpLogicalOr, g->tb, a, b);
    case SMELT_OP_SUB: case SMELT_OP_BITWISE_XOR: case SMELT_OP_LOGICAL_XOR: return op2(g, SpvOpLogicalNotEqual, g->tb, a, b);
    case SMELT_OP_MUL: case SMELT_OP_BITWISE_AND: case SMELT_OP_LOGICAL_AND: return op2(g, SpvOpLogicalAnd, g->tb, a, b);
    default: return 0;
    }
}

static uint32_t binary_int(sg *g, smelt_op op, smelt_dtype dt, uint32_t a, uint32_t b)
{
    if (dt == SMELT_BOOL)
        return binary_bool(g, op, a, b);
    switch (op) {
    case SMELT_OP_ADD: return ar(g, SpvOpIAdd, a, b);
    case SMELT_OP_SUB: return ar(g, SpvOpISub, a, b);
    case SMELT_OP_MUL: return ar(g, SpvOpIMul, a, b);
    case SMELT_OP_FLOORDIV: case SMELT_OP_FMOD: case SMELT_OP_REMAINDER: return int_div(g, op, dt, a, b);
    case SMELT_OP_POW: return int_pow(g, dt, a, b);
    case SMELT_OP_BITWISE_AND: case SMELT_OP_LOGICAL_AND: return ar(g, SpvOpBitwiseAnd, a, b);
    case SMELT_OP_BITWISE_OR: case SMELT_OP_LOGICAL_OR: return ar(g, SpvOpBitwiseOr, a, b);
    case SMELT_OP_BITWISE_XOR: case SMELT_OP_LOGICAL_XOR: return ar(g, SpvOpBitwiseXor, a, b);
    case SMELT_OP_SHL: case SMELT_OP_SHR: return shift(g, op, dt, a, b);
    default: return 0;
    }
}

static uint32_t clamp(sg *g, const smelt_node *n, smelt_dtype dt, uint32_t x)
{
    if (n->a.clamp.has_lo) {
        uint32_t lo = cval(g, dt, n->a.clamp.flo, n->a.clamp.ilo);
        x = is_fp(dt) ? sel(g, cmp(g, SpvOpFOrdLessThan, x, lo), lo, x) : maxmin(g, 1, dt, x, lo);
    }
    if (n->a.clamp.has_hi) {
        uint32_t hi = cval(g, dt, n->a.clamp.fhi, n->a.clamp.ihi);
        x = is_fp(dt) ? sel(g, cmp(g, SpvOpFOrdGreaterThan, x, hi), hi, x) : maxmin(g, 0, dt, x, hi);
    }
    return x;
}

/* x ** c for the exponents torch special-cases (as cpu/codegen.c); 0 for others. */
static uint32_t pow_const(sg *g, uint32_t x, double c)
{
    uint32_t one = cfp(g, ty(g, x), 1);
    if (c == 2)
        return ar(g, SpvOpFMul, x, x);
    if (c == 3)
        return ar(g, SpvOpFMul, ar(g, SpvOpFMul, x, x), x);
    if (c == 0.5)
        return ext(g, OclSqrt, x, 0);
    if (c == -0.5)
        return ar(g, SpvOpFDiv, one, ext(g, OclSqrt, x, 0));
    if (c == -1)
        return ar(g, SpvOpFDiv, one, x);
    if (c == -2)
        return ar(g, SpvOpFDiv, one, ar(g, SpvOpFMul, x, x));
    return 0;
}

static uint32_t checkidx(sg *g, const smelt_node *n, uint32_t v)
{
    uint32_t lim = c64(g, n->a.gather.n), zero = c64(g, 0);
    if (n->a.gather.wrap)
        v = sel(g, cmp(g, SpvOpSLessThan, v, zero), ar(g, SpvOpIAdd, v, lim), v);
    uint32_t bad = cmp(g, SpvOpUGreaterThanEqual, v, lim);
    set_flag(g, bad, PLAN_FLAG_INDEX);
    return sel(g, bad, zero, v);
}

static uint32_t emit_kop(sg *g, const kexpr *x)
{
    smelt_op op = (smelt_op)x->gop;
    smelt_dtype cd = x->cdtype;
    uint32_t a[3] = { 0, 0, 0 };
    for (int k = 0; k < 3 && x->src[k] >= 0; k++) {
        const kexpr *s = &g->P->ex[x->src[k]];
        smelt_dtype to = (op == SMELT_OP_WHERE && k == 0) ? SMELT_BOOL : cd;
        a[k] = conv(g, emit(g, x->src[k]), s->dtype, to);
    }
    if (op == SMELT_OP_CAST)
        return conv(g, a[0], cd, x->dtype);
    if (op == SMELT_OP_WHERE)
        return sel(g, a[0], a[1], a[2]);
    if (op == SMELT_OP_CLAMP)
        return clamp(g, &g->p->graph->nodes[x->gnode], cd, a[0]);
    if (op == SMELT_OP_CHECKIDX)
        return checkidx(g, &g->p->graph->nodes[x->gnode], a[0]);
    if (op == SMELT_OP_LOGICAL_NOT)
        return op1(g, SpvOpLogicalNot, g->tb, a[0]);
    if (op >= SMELT_OP_EQ && op <= SMELT_OP_GE)
        return compare(g, op, cd, a[0], a[1]);
    if (op == SMELT_OP_MAXIMUM || op == SMELT_OP_MINIMUM)
        return maxmin(g, op == SMELT_OP_MAXIMUM, cd, a[0], a[1]);
    uint32_t r = 0;
    const kexpr *e = x->src[1] >= 0 ? &g->P->ex[x->src[1]] : NULL;
    if (op == SMELT_OP_POW && is_fp(cd) && e && e->op == KE_CONST)
        r = pow_const(g, a[0], is_fp((smelt_dtype)e->dtype) ? e->f : (double)e->i);
    if (!r && a[1])
        r = is_fp(cd) ? binary_fp(g, op, a[0], a[1]) : binary_int(g, op, cd, a[0], a[1]);
    else if (!r)
        r = is_fp(cd) ? unary_fp(g, op, a[0]) : unary_int(g, op, cd, a[0]);
    if (!r)
        abort();   /* an op/dtype pair the lowering never makes (the CPU back end aborts on the same) */
    return r;   /* f16/bf16 kept in f32 until a store or a CAST rounds it (as the CPU back end) */
}

/* Value of expression e at the current loop point. */
static uint32_t emit(sg *g, int32_t e)
{
    if (g->memo_ep[e] == g->epoch)
        return g->memo[e];
    const kexpr *x = &g->P->ex[e];
    uint32_t r;
    switch (x->op) {
    case KE_LOAD: r = load_at(g, x->buf, ix_val(g, x->ix)); break;
    case KE_GATHER: {
        uint32_t v = emit(g, x->src[0]);
        r = load_at(g, x->buf, ar(g, SpvOpIAdd, ix_val(g, x->ix), ar(g, SpvOpIMul, v, c64(g, x->i))));
        break;
    }
    case KE_CONST: r = cval(g, x->dtype, x->f, x->i); break;
    case KE_INDEX: r = ix_val(g, x->ix); break;
    case KE_PHASE: r = g->phase[x->phase]; break;
    default: r = emit_kop(g, x); break;
    }
    g->memo[e] = r;
    g->memo_ep[e] = g->epoch;
    return r;
}

/* ---------- loops ---------- */

typedef struct loop {
    uint32_t head, exit, iv, step;
} loop;

/* for (iv = start; iv < end; iv += step): returns iv in the body block. */
static uint32_t loop_begin(sg *g, loop *l, uint32_t start, uint32_t end, uint32_t step)
{
    l->iv = fvar(g, g->t64);
    l->step = step;
    store(g, l->iv, start);
    l->head = spv_id(g->m), l->exit = spv_id(g->m);
    uint32_t body = spv_id(g->m);
    br(g, l->head);
    spv_ins(&g->body, SpvOpLabel, &l->head, 1);
    uint32_t i = load(g, g->t64, l->iv);
    brc(g, cmp(g, SpvOpSLessThan, i, end), body, l->exit);
    spv_ins(&g->body, SpvOpLabel, &body, 1);
    g->epoch++;
    return i;
}

static void loop_end(sg *g, loop *l)
{
    uint32_t i = load(g, g->t64, l->iv);
    store(g, l->iv, ar(g, SpvOpIAdd, i, l->step));
    br(g, l->head);
    spv_ins(&g->body, SpvOpLabel, &l->exit, 1);
    g->epoch++;
}

/* if (c) { ... }: returns the join label to close with if_end. */
static uint32_t if_begin(sg *g, uint32_t c)
{
    uint32_t yes = spv_id(g->m), join = spv_id(g->m);
    brc(g, c, yes, join);
    spv_ins(&g->body, SpvOpLabel, &yes, 1);
    g->epoch++;
    return join;
}

static void if_end(sg *g, uint32_t join)
{
    br(g, join);
    spv_ins(&g->body, SpvOpLabel, &join, 1);
    g->epoch++;
}

static void barrier(sg *g, int global)
{
    uint32_t sem = SpvSemSeqCst | SpvSemWorkgroupMemory | (global ? SpvSemCrossWorkgroupMemory : 0);
    spv_ins(&g->body, SpvOpControlBarrier,
            (uint32_t[]){ c32(g, SpvScopeWorkgroup), c32(g, SpvScopeWorkgroup), c32(g, sem) }, 3);
}

/* ---------- reductions ---------- */

static int is_arg(smelt_op op) { return op == SMELT_OP_ARGMAX || op == SMELT_OP_ARGMIN; }

static uint32_t red_init(sg *g, smelt_op op, smelt_dtype dt)
{
    int64_t imax = 0, imin = 0;
    if (!is_fp(dt)) {
        int bits = int_bits(dt);
        imax = bits >= 64 ? INT64_MAX : (int64_t)((1ull << (bits - 1)) - 1);
        imin = bits >= 64 ? INT64_MIN : -(int64_t)(1ull << (bits - 1));
        if (is_unsigned(dt))
            imax = dt == SMELT_BOOL ? 1 : 255, imin = 0;
    }
    switch (op) {
    case SMELT_OP_PROD: case SMELT_OP_ALL: return cval(g, dt, 1, 1);
    case SMELT_OP_AMAX: case SMELT_OP_ARGMAX: return is_fp(dt) ? cfp(g, ctype(g, dt), -INFINITY) : cint(g, dt, imin);
    case SMELT_OP_AMIN: case SMELT_OP_ARGMIN: return is_fp(dt) ? cfp(g, ctype(g, dt), INFINITY) : cint(g, dt, imax);
    default: return cval(g, dt, 0, 0);
    }
}

static uint32_t red_combine(sg *g, smelt_op op, smelt_dtype dt, uint32_t a, uint32_t v)
{
    int fp = is_fp(dt), b = dt == SMELT_BOOL;
    switch (op) {
    case SMELT_OP_SUM: return b ? op2(g, SpvOpLogicalOr, g->tb, a, v) : ar(g, fp ? SpvOpFAdd : SpvOpIAdd, a, v);
    case SMELT_OP_PROD: return b ? op2(g, SpvOpLogicalAnd, g->tb, a, v) : ar(g, fp ? SpvOpFMul : SpvOpIMul, a, v);
    case SMELT_OP_AMAX: return maxmin(g, 1, dt, v, a);
    case SMELT_OP_AMIN: return maxmin(g, 0, dt, v, a);
    case SMELT_OP_ANY: return op2(g, SpvOpLogicalOr, g->tb, a, v);
    default: return op2(g, SpvOpLogicalAnd, g->tb, a, v);   /* ALL */
    }
}

/* argmax/argmin step: take (v, vi) over (*a, *ai) when strictly better, or
 * equal (NaN equal NaN) with a smaller index. */
static void arg_combine(sg *g, smelt_op op, smelt_dtype dt, uint32_t *a, uint32_t *ai, uint32_t v, uint32_t vi)
{
    uint32_t better, equal;
    if (dt == SMELT_BOOL) {
        v = conv(g, v, SMELT_BOOL, SMELT_U8), *a = conv(g, *a, SMELT_BOOL, SMELT_U8);
        dt = SMELT_U8;
    }
    if (is_fp(dt)) {
        uint32_t vn = op1(g, SpvOpIsNan, g->tb, v), an = op1(g, SpvOpIsNan, g->tb, *a);
        better = cmp(g, op == SMELT_OP_ARGMAX ? SpvOpFOrdGreaterThan : SpvOpFOrdLessThan, v, *a);
        better = op2(g, SpvOpLogicalOr, g->tb, better, op2(g, SpvOpLogicalAnd, g->tb, vn, op1(g, SpvOpLogicalNot, g->tb, an)));
        equal = op2(g, SpvOpLogicalOr, g->tb, cmp(g, SpvOpFOrdEqual, v, *a), op2(g, SpvOpLogicalAnd, g->tb, vn, an));
    } else {
        int u = is_unsigned(dt);
        better = cmp(g, op == SMELT_OP_ARGMAX ? (u ? SpvOpUGreaterThan : SpvOpSGreaterThan) : (u ? SpvOpULessThan : SpvOpSLessThan),
                     v, *a);
        equal = cmp(g, SpvOpIEqual, v, *a);
    }
    uint32_t take = op2(g, SpvOpLogicalOr, g->tb, better,
                        op2(g, SpvOpLogicalAnd, g->tb, equal, cmp(g, SpvOpSLessThan, vi, *ai)));
    *a = sel(g, take, v, *a);
    *ai = sel(g, take, vi, *ai);
}

typedef struct acc {
    uint32_t val, idx;   /* Function variables (idx: argmax/argmin) */
    uint32_t comp;       /* floating-point sums: Kahan's compensation (a lane may add millions of terms) */
    smelt_dtype dt;
} acc;

static int red_count(const kir_kernel *k, int64_t *n)
{
    int nr = 0;
    *n = 1;
    for (int v = 0; v < k->nvars; v++)
        if (k->rmask >> v & 1)
            *n *= k->size[v], nr++;
    return nr;
}

/* Runs body(it, ctx) over this lane's points of the row: flat point r
 * from lane to the row's length step L, decoded into the reduction vars
 * (row-major in var order); *flat receives r. */
typedef void (*body_fn)(sg *g, const kitem *it, void *ctx, uint32_t flat);

static void loop_row(sg *g, body_fn body, const kitem *it, void *ctx)
{
    const kir_kernel *k = g->k;
    int64_t n;
    red_count(k, &n);
    int sv = g->split_len ? k->split_var : -1;   /* a split kernel's chunk: [split_lo, + split_len) */
    uint32_t end = c64(g, n);
    if (sv >= 0)
        end = ar(g, SpvOpIMul, c64(g, n / k->size[sv]), g->split_len);
    loop l;
    uint32_t r = loop_begin(g, &l, g->L > 1 ? g->lane : c64(g, 0), end, c64(g, g->L));
    uint32_t rem = r;
    for (int v = k->nvars - 1; v >= 0; v--) {
        if (!(k->rmask >> v & 1))
            continue;
        uint32_t size = v == sv ? g->split_len : c64(g, k->size[v]);
        g->var[v] = ar(g, SpvOpUMod, rem, size);
        if (v == sv)
            g->var[v] = ar(g, SpvOpIAdd, g->var[v], g->split_lo);
        rem = ar(g, SpvOpUDiv, rem, size);
    }
    body(g, it, ctx, r);
    loop_end(g, &l);
}

static void body_store(sg *g, const kitem *it, void *ctx, uint32_t flat)
{
    (void)ctx, (void)flat;
    store_at(g, it->buf, ix_val(g, it->ix), emit(g, it->value));
}

/* a <- a op v (v of a's dtype, flat its point for argmax/argmin). */
static void accumulate(sg *g, smelt_op op, acc *a, uint32_t v, uint32_t flat)
{
    uint32_t t = ctype(g, a->dt);
    uint32_t cur = load(g, t, a->val);
    if (is_arg(op)) {
        uint32_t ci = load(g, g->t64, a->idx);
        arg_combine(g, op, a->dt, &cur, &ci, v, flat);
        store(g, a->idx, ci);
    } else if (a->comp) {   /* t = cur + (v - c); c = (t - cur) - (v - c), 0 once infinite or NaN */
        uint32_t y = ar(g, SpvOpFSub, v, load(g, t, a->comp));
        uint32_t sum = ar(g, SpvOpFAdd, cur, y);
        uint32_t c = ar(g, SpvOpFSub, ar(g, SpvOpFSub, sum, cur), y);
        store(g, a->comp, sel(g, op1(g, SpvOpIsNan, g->tb, c), cfp(g, t, 0), c));
        cur = sum;
    } else {
        cur = red_combine(g, op, a->dt, cur, v);
    }
    store(g, a->val, cur);
}

static void body_reduce(sg *g, const kitem *it, void *ctx, uint32_t flat)
{
    acc *a = ctx;
    const kexpr *x = &g->P->ex[it->value];
    accumulate(g, (smelt_op)it->rop, a, conv(g, emit(g, it->value), x->dtype, a->dt), flat);
}

/* The kernel's Workgroup array of L values of type t (bools as bytes),
 * part w (0: values, 1: argmax indices): one per (type, part) per
 * kernel, reused by each REDUCE item (group_combine ends with a barrier). */
static uint32_t local_array(sg *g, uint32_t t, int w)
{
    uint32_t et = t == g->tb ? T8(g) : t;
    for (int i = 0; i < g->nlocal; i++)
        if (g->local_t[i] == et && g->local_w[i] == w)
            return g->local_id[i];
    uint32_t arr = spv_t_array(g->m, et, (uint32_t)g->L);
    uint32_t id = spv_global(g->m, spv_t_ptr(g->m, SpvScWorkgroup, arr), SpvScWorkgroup);
    g->local_t[g->nlocal] = et, g->local_w[g->nlocal] = w, g->local_id[g->nlocal++] = id;
    return id;
}

static uint32_t local_ptr(sg *g, uint32_t arr, uint32_t t, uint32_t i)
{
    uint32_t et = t == g->tb ? T8(g) : t;
    return emit_op(g, SpvOpAccessChain, spv_t_ptr(g->m, SpvScWorkgroup, et), (uint32_t[]){ arr, i }, 2);
}

static void local_put(sg *g, uint32_t arr, uint32_t t, uint32_t i, uint32_t v)
{
    if (t == g->tb)
        v = sel(g, v, spv_c_int(g->m, T8(g), 8, 1), spv_c_int(g->m, T8(g), 8, 0));
    store(g, local_ptr(g, arr, t, i), v);
}

static uint32_t local_get(sg *g, uint32_t arr, uint32_t t, uint32_t i)
{
    uint32_t v = load(g, t == g->tb ? T8(g) : t, local_ptr(g, arr, t, i));
    return t == g->tb ? cmp(g, SpvOpINotEqual, v, spv_c_int(g->m, T8(g), 8, 0)) : v;
}

/* Group mode: the lanes' partials in a (val, idx) combined through local
 * memory; every lane's a then holds the row's result. */
static void group_combine(sg *g, const kitem *it, acc *a)
{
    smelt_op op = (smelt_op)it->rop;
    uint32_t t = ctype(g, a->dt);
    uint32_t lv = local_array(g, t, 0), li = a->idx ? local_array(g, g->t64, 1) : 0;
    local_put(g, lv, t, g->lane, load(g, t, a->val));
    if (li)
        local_put(g, li, g->t64, g->lane, load(g, g->t64, a->idx));
    barrier(g, 0);
    for (int s = g->L / 2; s >= 1; s /= 2) {
        uint32_t join = if_begin(g, cmp(g, SpvOpSLessThan, g->lane, c64(g, s)));
        uint32_t other = ar(g, SpvOpIAdd, g->lane, c64(g, s));
        uint32_t cur = local_get(g, lv, t, g->lane), v = local_get(g, lv, t, other);
        if (li) {
            uint32_t ci = local_get(g, li, g->t64, g->lane), vi = local_get(g, li, g->t64, other);
            arg_combine(g, op, a->dt, &cur, &ci, v, vi);
            local_put(g, li, g->t64, g->lane, ci);
        } else {
            cur = red_combine(g, op, a->dt, cur, v);
        }
        local_put(g, lv, t, g->lane, cur);
        if_end(g, join);
        barrier(g, 0);
    }
    store(g, a->val, local_get(g, lv, t, c64(g, 0)));
    if (li)
        store(g, a->idx, local_get(g, li, g->t64, c64(g, 0)));
    barrier(g, 0);   /* the arrays may be used again by the next item */
}

/* A REDUCE item: its phase value. */
static uint32_t emit_reduce(sg *g, const kitem *it)
{
    smelt_op op = (smelt_op)it->rop;
    acc a;
    a.dt = is_arg(op) ? (smelt_dtype)g->P->ex[it->value].dtype : (smelt_dtype)it->acc_dtype;
    if (is_arg(op) && (a.dt == SMELT_F16 || a.dt == SMELT_BF16))
        a.dt = SMELT_F32;
    uint32_t t = ctype(g, a.dt);
    a.val = fvar(g, t);
    store(g, a.val, red_init(g, op, a.dt));
    a.idx = a.comp = 0;
    if (op == SMELT_OP_SUM && is_fp(a.dt)) {
        a.comp = fvar(g, t);
        store(g, a.comp, cfp(g, t, 0));
    }
    if (is_arg(op)) {
        a.idx = fvar(g, g->t64);
        store(g, a.idx, c64(g, INT64_MAX));
    }
    loop_row(g, body_reduce, it, &a);
    if (a.comp)   /* the compensation folded in */
        store(g, a.val, ar(g, SpvOpFSub, load(g, t, a.val), load(g, t, a.comp)));
    if (g->L > 1)
        group_combine(g, it, &a);
    g->epoch++;
    if (a.idx)
        return load(g, g->t64, a.idx);
    return conv(g, load(g, t, a.val), a.dt, (smelt_dtype)it->acc_dtype);
}

/* All items of one outer point (outer vars set). */
static void emit_point(sg *g)
{
    const kir_kernel *k = g->k;
    int ph = 0;
    g->epoch++;
    for (int i = 0; i < k->nitems; i++) {
        const kitem *it = &k->items[i];
        if (it->kind == KI_REDUCE) {
            g->phase[ph++] = emit_reduce(g, it);
            g->epoch++;
        } else if (it->kind == KI_STORE && k->rmask) {
            loop_row(g, body_store, it, NULL);
            if (g->L > 1 && i + 1 < k->nitems)
                barrier(g, 1);
        } else if (g->L > 1) {   /* a ROWSTORE: lane 0's */
            uint32_t join = if_begin(g, cmp(g, SpvOpIEqual, g->lane, c64(g, 0)));
            body_store(g, it, NULL, 0);
            if_end(g, join);
        } else {
            body_store(g, it, NULL, 0);
        }
    }
}

/* ---------- kernel functions ---------- */

/* Component 0 of built-in `which` (one variable per module: consumers
 * map built-ins by variable). */
static uint32_t builtin(sg *g, uint32_t which)
{
    uint32_t v3 = spv_t_vec(g->m, g->t64, 3);
    uint32_t *var = &g->builtins[which - SpvBuiltInWorkgroupId];
    if (!*var) {
        *var = spv_global(g->m, spv_t_ptr(g->m, SpvScInput, v3), SpvScInput);
        spv_decorate(g->m, *var, SpvDecBuiltIn, &which, 1);
        spv_decorate(g->m, *var, SpvDecConstant, NULL, 0);
    }
    g->iface[g->niface++] = *var;
    uint32_t v = load(g, v3, *var);
    return emit_op(g, SpvOpCompositeExtract, g->t64, (uint32_t[]){ v, 0 }, 2);
}

int64_t spv_outer_points(const kir_kernel *k)
{
    int64_t n = 1;
    for (int v = 0; v < k->nvars; v++)
        if (!(k->rmask >> v & 1))
            n *= k->size[v];
    return n;
}

/* Lanes per row of kernel k (1: a work-item per row). */
int spv_kernel_lanes(const kir_kernel *k)
{
    static int min_group = -1;
    if (min_group < 0) {
        const char *s = getenv("SMELT_SPIRV_GROUP_MIN");
        min_group = s && *s ? atoi(s) : 256;
    }
    int64_t n;
    if (!red_count(k, &n) || n < min_group)
        return 1;
    return n < 4096 ? 64 : 256;
}

/* Sets the outer vars from the outer point number `pt` < the number of
 * outer points (last var fastest; the outermost takes what is left). */
static void decode_outer(sg *g, uint32_t pt)
{
    const kir_kernel *k = g->k;
    int outermost = -1;
    for (int v = 0; v < k->nvars && outermost < 0; v++)
        if (!(k->rmask >> v & 1))
            outermost = v;
    uint32_t rem = pt;
    for (int v = k->nvars - 1; v >= 0; v--) {
        if (k->rmask >> v & 1)
            continue;
        if (v == outermost) {
            g->var[v] = rem;
            break;
        }
        g->var[v] = ar(g, SpvOpUMod, rem, c64(g, k->size[v]));
        rem = ar(g, SpvOpUDiv, rem, c64(g, k->size[v]));
    }
}

/* The body of kernel k's function (after its first label). */
static void emit_kernel_body(sg *g)
{
    g->L = spv_kernel_lanes(g->k);
    for (int v = 0; v < g->k->nvars; v++)
        g->var[v] = c64(g, 0);
    if (g->L > 1) {
        g->lane = builtin(g, SpvBuiltInLocalInvocationId);
        decode_outer(g, builtin(g, SpvBuiltInWorkgroupId));
        emit_point(g);
        return;
    }
    uint32_t gid = builtin(g, SpvBuiltInGlobalInvocationId);
    uint32_t join = if_begin(g, cmp(g, SpvOpSLessThan, gid, c64(g, spv_outer_points(g->k))));
    decode_outer(g, gid);
    emit_point(g);
    if_end(g, join);
}

/* ---------- split kernels ---------- */

/* The kernel's single REDUCE item. */
static const kitem *the_reduce(const kir_kernel *k)
{
    for (int i = 0; i < k->nitems; i++)
        if (k->items[i].kind == KI_REDUCE)
            return &k->items[i];
    abort();   /* (lower.c splits only kernels with one) */
}

/* The type of a split kernel's partials: its accumulator's (bools as bytes). */
static uint32_t scratch_type(sg *g)
{
    smelt_dtype dt = (smelt_dtype)the_reduce(g->k)->acc_dtype;
    return dt == SMELT_BOOL ? T8(g) : ctype(g, dt);
}

static uint32_t scratch_ptr(sg *g, uint32_t i)
{
    return op2(g, SpvOpPtrAccessChain, spv_t_ptr(g->m, SpvScCrossWorkgroup, scratch_type(g)), g->scratch, i);
}

/* Partials: work-group w reduces chunk w % split of outer point
 * w / split (split_var's range cut in split equal chunks); lane 0 writes
 * the partial to scratch[w]. */
static void emit_split_body(sg *g)
{
    const kir_kernel *k = g->k;
    g->L = spv_kernel_lanes(k) > 1 ? spv_kernel_lanes(k) : SPV_LOCAL;
    for (int v = 0; v < k->nvars; v++)
        g->var[v] = c64(g, 0);
    int64_t S = k->split, n = k->size[k->split_var], c = (n + S - 1) / S;
    g->lane = builtin(g, SpvBuiltInLocalInvocationId);
    uint32_t w = builtin(g, SpvBuiltInWorkgroupId);
    decode_outer(g, ar(g, SpvOpUDiv, w, c64(g, S)));
    uint32_t lo = ar(g, SpvOpIMul, ar(g, SpvOpUMod, w, c64(g, S)), c64(g, c));
    uint32_t hi = ar(g, SpvOpIAdd, lo, c64(g, c));
    hi = sel(g, cmp(g, SpvOpSLessThan, hi, c64(g, n)), hi, c64(g, n));
    lo = sel(g, cmp(g, SpvOpSLessThan, lo, c64(g, n)), lo, c64(g, n));
    g->split_lo = lo;
    g->split_len = ar(g, SpvOpISub, hi, lo);
    const kitem *it = the_reduce(k);
    uint32_t v = emit_reduce(g, it);
    uint32_t join = if_begin(g, cmp(g, SpvOpIEqual, g->lane, c64(g, 0)));
    if (it->acc_dtype == SMELT_BOOL)
        v = sel(g, v, spv_c_int(g->m, T8(g), 8, 1), spv_c_int(g->m, T8(g), 8, 0));
    store(g, scratch_ptr(g, w), v);
    if_end(g, join);
}

/* Finish: a work-item per outer point combines its partials in chunk
 * order (floating-point sums with Kahan compensation: no float64, which
 * some GPUs lack), then runs the ROWSTOREs. */
static void emit_finish_body(sg *g)
{
    const kir_kernel *k = g->k;
    const kitem *it = the_reduce(k);
    smelt_op op = (smelt_op)it->rop;
    smelt_dtype adt = (smelt_dtype)it->acc_dtype;
    uint32_t t = ctype(g, adt);
    g->L = 1;
    for (int v = 0; v < k->nvars; v++)
        g->var[v] = c64(g, 0);
    uint32_t gid = builtin(g, SpvBuiltInGlobalInvocationId);
    uint32_t join = if_begin(g, cmp(g, SpvOpSLessThan, gid, c64(g, spv_outer_points(k))));
    decode_outer(g, gid);
    acc a = { .val = fvar(g, t), .idx = 0, .comp = 0, .dt = adt };
    store(g, a.val, red_init(g, op, adt));
    if (op == SMELT_OP_SUM && is_fp(adt)) {
        a.comp = fvar(g, t);
        store(g, a.comp, cfp(g, t, 0));
    }
    loop l;
    uint32_t c = loop_begin(g, &l, c64(g, 0), c64(g, k->split), c64(g, 1));
    uint32_t pv = load(g, scratch_type(g), scratch_ptr(g, ar(g, SpvOpIAdd, ar(g, SpvOpIMul, gid, c64(g, k->split)), c)));
    if (adt == SMELT_BOOL)
        pv = cmp(g, SpvOpINotEqual, pv, spv_c_int(g->m, T8(g), 8, 0));
    accumulate(g, op, &a, pv, c);
    loop_end(g, &l);
    if (a.comp)
        store(g, a.val, ar(g, SpvOpFSub, load(g, t, a.val), load(g, t, a.comp)));
    decode_outer(g, gid);
    g->phase[0] = load(g, t, a.val);
    g->epoch++;
    for (int i = 0; i < k->nitems; i++)
        if (k->items[i].kind == KI_ROWSTORE)
            body_store(g, &k->items[i], NULL, 0);
    if_end(g, join);
}

static void init_types(sg *g)
{
    spv_mod *m = g->m;
    g->tv = spv_t_void(m), g->tb = spv_t_bool(m), g->t32 = spv_t_int(m, 32), g->t64 = spv_t_int(m, 64);
    g->tf = spv_t_float(m, 32);
    g->t8 = g->t16 = g->th = g->td = 0;   /* (T8 ... TD: their capabilities only when used) */
}

/* Emits kernel kn of p as entry point "k<kn>"; its slots in code. */
/* Declares entry point `name` for function fn with the built-ins it read. */
static void entry_point(sg *g, uint32_t fn, const char *name)
{
    size_t sw = strlen(name) / 4 + 1;
    uint32_t *words = calloc(2 + sw + (size_t)g->niface, sizeof *words);
    if (!words)
        abort();
    words[0] = SpvExecModelKernel, words[1] = fn;
    memcpy(words + 2, name, strlen(name));
    memcpy(words + 2 + sw, g->iface, sizeof(uint32_t) * (size_t)g->niface);
    spv_ins(&g->m->entries, SpvOpEntryPoint, words, 2 + sw + (size_t)g->niface);
    free(words);
    spv_name(g->m, fn, name);
}

/* Kernel function `name` over the current kernel's slots (then the flag,
 * then for split kernels the partials): body(g) fills it. */
static void emit_function(sg *g, const plan_kernel_code *code, const char *name, void (*body)(sg *g))
{
    const smelt_plan *p = g->p;
    int split = g->k->split > 1, np = code->nslots + 1 + split;
    uint32_t *pv = malloc(sizeof(uint32_t) * (size_t)np), *ptys = malloc(sizeof(uint32_t) * (size_t)np);
    if (!pv || !ptys)
        abort();
    for (int32_t i = 0; i < code->nslots; i++)
        ptys[i] = spv_t_ptr(g->m, SpvScCrossWorkgroup, stype(g, p->bufs[code->slots[i]].dtype));
    ptys[code->nslots] = spv_t_ptr(g->m, SpvScCrossWorkgroup, g->t32);
    if (split)
        ptys[code->nslots + 1] = spv_t_ptr(g->m, SpvScCrossWorkgroup, scratch_type(g));
    uint32_t fty = spv_t_fn(g->m, g->tv, ptys, np), fn = spv_id(g->m);
    spv_buf head = { 0 };
    spv_ins(&head, SpvOpFunction, (uint32_t[]){ g->tv, fn, 0, fty }, 4);
    memset(g->arg, 0, sizeof(uint32_t) * (size_t)p->nbufs);
    for (int i = 0; i < np; i++) {
        pv[i] = spv_id(g->m);
        spv_ins(&head, SpvOpFunctionParameter, (uint32_t[]){ ptys[i], pv[i] }, 2);
        spv_set_type(g->m, pv[i], ptys[i]);
        if (i < code->nslots)
            g->arg[code->slots[i]] = pv[i];
    }
    g->flag = pv[code->nslots];
    g->scratch = split ? pv[code->nslots + 1] : 0;
    uint32_t first = spv_id(g->m);
    spv_ins(&head, SpvOpLabel, &first, 1);
    g->body.n = g->vars.n = 0;
    g->niface = 0;
    g->half_tmp = 0;
    g->split_lo = g->split_len = 0;
    g->nlocal = 0;
    g->epoch++;
    body(g);
    spv_ins(&g->body, SpvOpReturn, NULL, 0);
    spv_ins(&g->body, SpvOpFunctionEnd, NULL, 0);
    spv_append(&g->m->funcs, &head);
    spv_append(&g->m->funcs, &g->vars);
    spv_append(&g->m->funcs, &g->body);
    free(head.w);
    entry_point(g, fn, name);
    free(pv);
    free(ptys);
}

/* Emits kernel kn of p: entry point "k<kn>" (split kernels: its partials,
 * and "f<kn>" combining them); its slots and launch shape in code. */
static void emit_kernel(sg *g, int32_t kn, plan_kernel_code *code)
{
    const smelt_plan *p = g->p;
    g->k = &p->kernels[kn];
    code->slots = malloc(sizeof(int32_t) * ((size_t)p->nbufs + 1));
    if (!code->slots)
        abort();
    code->nslots = ind_kernel_slots(p, g->k, code->slots);
    char name[24];
    snprintf(name, sizeof name, "k%d", (int)kn);
    int64_t n = spv_outer_points(g->k);
    if (g->k->split > 1) {
        emit_function(g, code, name, emit_split_body);
        name[0] = 'f';
        emit_function(g, code, name, emit_finish_body);
        code->nitems = n * g->k->split;
        code->grain = spv_kernel_lanes(g->k) > 1 ? spv_kernel_lanes(g->k) : SPV_LOCAL;
        code->nfinish = (n + SPV_LOCAL - 1) / SPV_LOCAL;
        code->scratch_bytes = code->nitems * 8;
        return;
    }
    emit_function(g, code, name, emit_kernel_body);
    code->grain = g->L > 1 ? g->L : SPV_LOCAL;
    code->nitems = g->L > 1 ? n : (n + SPV_LOCAL - 1) / SPV_LOCAL;
}

uint32_t *spv_codegen_module(smelt_plan *p, size_t *nwords)
{
    spv_mod m;
    spv_init(&m);
    sg g = { 0 };
    g.m = &m, g.p = p, g.P = &p->pool;
    g.arg = calloc((size_t)p->nbufs + 1, sizeof *g.arg);
    g.memo = calloc((size_t)p->pool.nex + 1, sizeof *g.memo);
    g.memo_ep = calloc((size_t)p->pool.nex + 1, sizeof *g.memo_ep);
    g.iface = calloc(8, sizeof *g.iface);
    if (!g.arg || !g.memo || !g.memo_ep || !g.iface)
        abort();
    init_types(&g);
    for (int32_t k = 0; k < p->nkernels; k++)
        emit_kernel(&g, k, &p->code[k]);
    uint32_t *w = spv_finish(&m, nwords);
    free(g.arg), free(g.memo), free(g.memo_ep), free(g.iface);
    free(g.body.w), free(g.vars.w);
    spv_free(&m);
    return w;
}
