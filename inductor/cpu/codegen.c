/* codegen.c — kir kernels to LLVM IR (C API), optimised and JIT-compiled.
 *
 * Entry: cpu_codegen(plan). One LLVM module per plan, one function per
 * kernel with the signature void(void **bufs, i64 begin, i64 end).
 *
 * Loop structure of a kernel (see kir.h):
 *   outer-vector mode (vectorised var is an outer var): work items are
 *   (outer point without that var, tile of TILE along it); each tile runs a
 *   vector body of L lanes, then a scalar tail. Reduction loops run inside,
 *   accumulating lane-wise.
 *   inner mode (vectorised var is a reduction var): work items are outer
 *   points; each REDUCE/STORE loops over the reduction vars with the
 *   vectorised var innermost (vector body + scalar tail); vector partials are
 *   combined lane by lane at the end.
 * Values are computed in f32 for f16/bf16, i1 for bool; loads and stores
 * convert from/to the storage type. A pointwise chain of f16/bf16 ops keeps
 * its intermediates in f32 (as Inductor does): the value is rounded once,
 * where it is stored or explicitly CAST (a graph op boundary eager also
 * rounds at: a reduction's result, a .half()), never after each op, so a
 * fused chain is at least as accurate as eager's op-by-op rounding. Transcendentals come from vmath.c.
 */
#include "cpu.h"
#include "../kix.h"
#include "jit.h"
#include "vmath.h"
#include "../../kernels/threadpool.h"

#include <llvm/Config/llvm-config.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TILE_POINTWISE 2048
#define MIN_CHUNK_ELEMS 16384
#define MAX_PHASE 64

typedef struct cg {
    LLVMContextRef C;
    LLVMModuleRef M;
    LLVMBuilderRef B;
    smelt_plan *p;
    kir_pool *P;                    /* expressions: this thread's copy of p->pool
                                       (code generation interns new ones) */
    const kir_kernel *k;
    const cpu_target *tgt;          /* the CPU code is generated for */
    int L, vbits;
    LLVMValueRef fn, bufs_arg;
    LLVMValueRef *bufptr;           /* per plan buffer, lazily loaded */
    int32_t *slot_of;               /* plan buffer -> this kernel's slot, or -1 */
    int32_t nslots;
    LLVMValueRef flag;              /* i32* error flag */
    LLVMValueRef var[KIR_MAX_VARS];
    LLVMValueRef phase[MAX_PHASE];
    int phase_w[MAX_PHASE];
    LLVMValueRef *memo[2];          /* per expr, width 1 and L */
    uint32_t *memo_ep[2];
    uint32_t epoch;
    LLVMTypeRef i1, i8, i16, i32, i64, f16, f32, f64, ptr, vd;
    LLVMBasicBlockRef entry;
    LLVMValueRef split_lo, split_hi;  /* split kernels: this item's chunk */
    LLVMValueRef scratch, slot;       /* split kernels: partials, this item's slot */
    int32_t rc_expr, rc_flat;         /* row cache: expression, flat index (kix) */
    LLVMValueRef rc_buf;              /* its stack row */
    int32_t rc_obuf, rc_oix;          /* or, rows too long for the stack: the output store's buffer and index */
    int rc_ready;                     /* filled for the current row */
    /* parametric sizes (opts param_sizes): loop extents, index constants
     * and bounds are read from the kernel's parameter table (bufs[nslots +
     * 2]) instead of being constants, so kernels that differ only in
     * sizes are one function; params collects this kernel's values in the
     * order the code reads them */
    int param;
    int64_t *params;
    int32_t nparams, cparams;
    LLVMValueRef params_ptr;
} cg;

/* ---------- types and constants ---------- */

static LLVMTypeRef ctype(cg *g, smelt_dtype dt)
{
    switch (dt) {
    case SMELT_BOOL: return g->i1;
    case SMELT_U8: case SMELT_I8: return g->i8;
    case SMELT_I16: return g->i16;
    case SMELT_I32: return g->i32;
    case SMELT_I64: return g->i64;
    case SMELT_F64: return g->f64;
    default: return g->f32;
    }
}

static LLVMTypeRef stype(cg *g, smelt_dtype dt)
{
    switch (dt) {
    case SMELT_BOOL: return g->i8;
    case SMELT_F16: return g->f16;
    case SMELT_BF16: return g->i16;
    default: return ctype(g, dt);
    }
}

static LLVMTypeRef vec(LLVMTypeRef t, int w) { return w > 1 ? LLVMVectorType(t, (unsigned)w) : t; }

static int is_fp(smelt_dtype dt) { return smelt_dtype_is_float(dt); }
static int is_unsigned(smelt_dtype dt) { return dt == SMELT_U8 || dt == SMELT_BOOL; }

static LLVMValueRef splat(cg *g, LLVMValueRef s, int w)
{
    if (w == 1)
        return s;
    LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(s), (unsigned)w);
    LLVMValueRef v = LLVMBuildInsertElement(g->B, LLVMGetUndef(vt), s, LLVMConstInt(g->i32, 0, 0), "");
    LLVMValueRef zeros = LLVMConstNull(LLVMVectorType(g->i32, (unsigned)w));
    return LLVMBuildShuffleVector(g->B, v, LLVMGetUndef(vt), zeros, "");
}

static LLVMValueRef cint(cg *g, LLVMTypeRef t, int64_t v, int w)
{
    return splat(g, LLVMConstInt(t, (unsigned long long)v, 1), w);
}

/* A size-like i64 constant v: in parametric mode the next entry of the
 * kernel's parameter table, loaded at function entry; else v. */
static LLVMValueRef pconst(cg *g, int64_t v)
{
    if (!g->param)
        return LLVMConstInt(g->i64, (unsigned long long)v, 1);
    if (g->nparams == g->cparams) {
        g->cparams = g->cparams ? 2 * g->cparams : 16;
        if (!(g->params = realloc(g->params, sizeof(int64_t) * (size_t)g->cparams)))
            abort();
    }
    int32_t k = g->nparams;
    g->params[g->nparams++] = v;
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(g->B);
    LLVMPositionBuilderBefore(g->B, LLVMGetBasicBlockTerminator(g->entry));
    LLVMValueRef at = LLVMBuildGEP2(g->B, g->i64, g->params_ptr,
                                    (LLVMValueRef[]){ LLVMConstInt(g->i64, (unsigned long long)k, 0) }, 1, "");
    LLVMValueRef r = LLVMBuildLoad2(g->B, g->i64, at, "size");
    LLVMPositionBuilderAtEnd(g->B, cur);
    return r;
}

static LLVMValueRef cfp(cg *g, LLVMTypeRef t, double v, int w)
{
    return splat(g, LLVMConstReal(t, v), w);
}

/* Constant `v` (given as double and int) in the compute type of dt. */
/* A constant of dtype dt (an f16/bf16 one comes rounded: lower.c ex_const). */
static LLVMValueRef cval(cg *g, smelt_dtype dt, double f, int64_t i, int w)
{
    LLVMTypeRef t = ctype(g, dt);
    return is_fp(dt) ? cfp(g, t, f, w) : cint(g, t, dt == SMELT_BOOL ? (i != 0) : i, w);
}

/* The compute dtype operand k of op x takes: a float constant (a Python
 * number) of a wider dtype enters float16/bfloat16 arithmetic in f32,
 * unrounded, as ATen's opmath scalar does (x * 0.0174532 is one rounding). */
static smelt_dtype operand_dtype(cg *g, const kexpr *x, int k, smelt_dtype cd)
{
    smelt_op op = (smelt_op)x->gop;
    const kexpr *s = &g->P->ex[x->src[k]];
    if (op == SMELT_OP_WHERE && k == 0)
        return SMELT_BOOL;
    if ((cd == SMELT_F16 || cd == SMELT_BF16) && s->op == KE_CONST && (s->dtype == SMELT_F32 || s->dtype == SMELT_F64) &&
        (op == SMELT_OP_ADD || op == SMELT_OP_SUB || op == SMELT_OP_MUL || op == SMELT_OP_DIV))
        return SMELT_F32;
    return cd;
}

static LLVMValueRef lanes(cg *g, int w)   /* <0, 1, ..., w-1> as i64 */
{
    LLVMValueRef e[64];
    for (int i = 0; i < w; i++)
        e[i] = LLVMConstInt(g->i64, (unsigned long long)i, 0);
    return LLVMConstVector(e, (unsigned)w);
}

static LLVMValueRef call_intr(cg *g, const char *name, LLVMTypeRef t, LLVMValueRef *args, int n)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef f = LLVMGetIntrinsicDeclaration(g->M, id, &t, 1);
    LLVMTypeRef ft = LLVMIntrinsicGetType(g->C, id, &t, 1);
    return LLVMBuildCall2(g->B, ft, f, args, (unsigned)n, "");
}

/* The vector math layer (vmath.c) for this kernel's function. */
static vm vm_of(cg *g)
{
    int half_out = g->k->nitems > 0;
    for (int i = 0; i < g->k->nitems && half_out; i++) {
        const kitem *it = &g->k->items[i];
        smelt_dtype dt = it->kind == KI_REDUCE ? SMELT_F16 : g->p->bufs[it->buf].dtype;
        half_out = dt == SMELT_F16 || dt == SMELT_BF16;
    }
    vm v = { .C = g->C, .M = g->M, .B = g->B, .fn = g->fn, .vbits = g->vbits,
             .fma = g->tgt && g->tgt->fma, .half_out = half_out };
    return v;
}

/* ---------- conversions ---------- */

/* f32 (vector) -> bf16 bits (i16), round to nearest even, NaN quiet:
 * integer arithmetic, not AVX512-BF16's vcvtneps2bf16, which flushes
 * float32 denormals (inputs and results) to zero where torch's rounding
 * keeps them (bf16 has float32's exponent range: 2^-133 is a bf16 value).
 * The widening direction is a shift, as fast as any instruction. */
static LLVMValueRef f32_to_bf16(cg *g, LLVMValueRef x, int w)
{
    LLVMValueRef bits = LLVMBuildBitCast(g->B, x, vec(g->i32, w), "");
    LLVMValueRef lsb = LLVMBuildAnd(g->B, LLVMBuildLShr(g->B, bits, cint(g, g->i32, 16, w), ""),
                                    cint(g, g->i32, 1, w), "");
    LLVMValueRef r = LLVMBuildAdd(g->B, bits, LLVMBuildAdd(g->B, lsb, cint(g, g->i32, 0x7fff, w), ""), "");
    r = LLVMBuildLShr(g->B, r, cint(g, g->i32, 16, w), "");
    LLVMValueRef nan = LLVMBuildFCmp(g->B, LLVMRealUNO, x, x, "");   /* quiet, sign kept (as eager's vector path) */
    LLVMValueRef qnan = LLVMBuildOr(g->B, LLVMBuildLShr(g->B, bits, cint(g, g->i32, 16, w), ""), cint(g, g->i32, 0x40, w), "");
    r = LLVMBuildSelect(g->B, nan, qnan, r, "");
    return LLVMBuildTrunc(g->B, r, vec(g->i16, w), "");
}

static LLVMValueRef bf16_to_f32(cg *g, LLVMValueRef h, int w)
{
    LLVMValueRef x = LLVMBuildZExt(g->B, h, vec(g->i32, w), "");
    x = LLVMBuildShl(g->B, x, cint(g, g->i32, 16, w), "");
    return LLVMBuildBitCast(g->B, x, vec(g->f32, w), "");
}

/* Rounds an f32 compute value to the precision of dt (F16/BF16). */
static LLVMValueRef round_to(cg *g, LLVMValueRef x, smelt_dtype dt, int w)
{
    if (dt == SMELT_BF16)
        return bf16_to_f32(g, f32_to_bf16(g, x, w), w);
    LLVMValueRef h = LLVMBuildFPTrunc(g->B, x, vec(g->f16, w), "");
    return LLVMBuildFPExt(g->B, h, vec(g->f32, w), "");
}

/* Converts compute value v of dtype `from` to the compute type of `to`
 * with torch's conversion semantics. */
static LLVMValueRef conv(cg *g, LLVMValueRef v, smelt_dtype from, smelt_dtype to, int w)
{
    if (from == to)
        return v;
    LLVMTypeRef tt = vec(ctype(g, to), w);
    LLVMValueRef r;
    if (to == SMELT_BOOL) {
        if (is_fp(from))
            return LLVMBuildFCmp(g->B, LLVMRealUNE, v, cfp(g, ctype(g, from), 0, w), "");
        return LLVMBuildICmp(g->B, LLVMIntNE, v, cint(g, ctype(g, from), 0, w), "");
    }
    if (is_fp(from) && is_fp(to)) {
        LLVMTypeRef ft = ctype(g, from), t2 = ctype(g, to);
        r = ft == t2 ? v : ft == g->f64 ? LLVMBuildFPTrunc(g->B, v, tt, "") : LLVMBuildFPExt(g->B, v, tt, "");
    } else if (is_fp(to)) {
        r = is_unsigned(from) ? LLVMBuildUIToFP(g->B, v, tt, "") : LLVMBuildSIToFP(g->B, v, tt, "");
    } else if (is_fp(from)) {
        r = is_unsigned(to) ? LLVMBuildFPToUI(g->B, v, tt, "") : LLVMBuildFPToSI(g->B, v, tt, "");
        return r;
    } else {
        unsigned fb = LLVMGetIntTypeWidth(ctype(g, from)), tb = LLVMGetIntTypeWidth(ctype(g, to));
        if (fb == tb)
            return v;
        if (fb > tb)
            return LLVMBuildTrunc(g->B, v, tt, "");
        return is_unsigned(from) ? LLVMBuildZExt(g->B, v, tt, "") : LLVMBuildSExt(g->B, v, tt, "");
    }
    if (to == SMELT_F16 || to == SMELT_BF16)
        r = round_to(g, r, to, w);
    return r;
}

/* ---------- indexing, loads, stores ---------- */

/* x / c (rem: x % c) of a division atom k in parametric mode, c read
 * from the kernel's table so one kernel serves every divisor: a double
 * product with 1/c (computed once: LLVM hoists it with c's load), then
 * one correction step each way, exact for indices below 2^51 (the
 * product is then within one of the quotient). LLVM's division by a
 * constant would make a kernel per size. */
static LLVMValueRef ix_pdiv(cg *g, LLVMValueRef x, int64_t c, int rem)
{
    LLVMBuilderRef B = g->B;
    LLVMValueRef d = pconst(g, c);
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(B);   /* 1/c in the entry block, after c's load */
    LLVMPositionBuilderBefore(B, LLVMGetBasicBlockTerminator(g->entry));
    LLVMValueRef inv = LLVMBuildFDiv(B, LLVMConstReal(g->f64, 1.0), LLVMBuildUIToFP(B, d, g->f64, ""), "");
    LLVMPositionBuilderAtEnd(B, cur);
    LLVMValueRef q = LLVMBuildFPToUI(B, LLVMBuildFMul(B, LLVMBuildUIToFP(B, x, g->f64, ""), inv, ""), g->i64, "");
    LLVMValueRef r = LLVMBuildSub(B, x, LLVMBuildMul(B, q, d, ""), "");
    LLVMValueRef one = LLVMConstInt(g->i64, 1, 0);
    LLVMValueRef lo = LLVMBuildICmp(B, LLVMIntSLT, r, LLVMConstInt(g->i64, 0, 0), "");   /* q one too large */
    q = LLVMBuildSelect(B, lo, LLVMBuildSub(B, q, one, ""), q, "");
    r = LLVMBuildSelect(B, lo, LLVMBuildAdd(B, r, d, ""), r, "");
    LLVMValueRef hi = LLVMBuildICmp(B, LLVMIntSGE, r, d, "");                          /* one too small */
    q = LLVMBuildSelect(B, hi, LLVMBuildAdd(B, q, one, ""), q, "");
    r = LLVMBuildSelect(B, hi, LLVMBuildSub(B, r, d, ""), r, "");
    return rem ? r : q;
}

static LLVMValueRef ix_scalar(cg *g, int32_t e)
{
    const kix *k = &g->P->ix[e];
    switch (k->op) {
    case KIX_CONST: return pconst(g, k->c);
    case KIX_VAR: return g->var[k->c];
    case KIX_ADD: return LLVMBuildAdd(g->B, ix_scalar(g, k->a), ix_scalar(g, k->b), "");
    case KIX_MUL: return LLVMBuildMul(g->B, ix_scalar(g, k->a), pconst(g, k->c), "");
    case KIX_DIV:
        return g->param ? ix_pdiv(g, ix_scalar(g, k->a), k->c, 0)
                        : LLVMBuildUDiv(g->B, ix_scalar(g, k->a), LLVMConstInt(g->i64, (unsigned long long)k->c, 0), "");
    default:
        return g->param ? ix_pdiv(g, ix_scalar(g, k->a), k->c, 1)
                        : LLVMBuildURem(g->B, ix_scalar(g, k->a), LLVMConstInt(g->i64, (unsigned long long)k->c, 0), "");
    }
}

/* Index of every lane: w scalars in out[] (vvar stepped per lane). */
static void ix_lanes(cg *g, int32_t e, int w, LLVMValueRef *out)
{
    int v = g->k->vvar;
    int64_t c = w > 1 ? kix_coef(g->P, e, v) : 0;
    LLVMValueRef base = ix_scalar(g, e);
    if (c != KIX_NONAFFINE) {
        LLVMValueRef cv = w > 1 ? pconst(g, c) : NULL;
        for (int i = 0; i < w; i++)
            out[i] = i ? LLVMBuildAdd(g->B, base, g->param ? LLVMBuildMul(g->B, cv, LLVMConstInt(g->i64, (unsigned long long)i, 0), "")
                                                           : LLVMConstInt(g->i64, (unsigned long long)(c * i), 1), "")
                       : base;
        return;
    }
    LLVMValueRef v0 = g->var[v];
    for (int i = 0; i < w; i++) {
        g->var[v] = LLVMBuildAdd(g->B, v0, LLVMConstInt(g->i64, (unsigned long long)i, 0), "");
        out[i] = ix_scalar(g, e);
    }
    g->var[v] = v0;
}

static LLVMValueRef ix_vector(cg *g, int32_t e, int w)
{
    if (w == 1)
        return ix_scalar(g, e);
    int64_t c = kix_coef(g->P, e, g->k->vvar);
    if (c != KIX_NONAFFINE) {
        LLVMValueRef l = LLVMBuildMul(g->B, lanes(g, w), g->param ? splat(g, pconst(g, c), w) : cint(g, g->i64, c, w), "");
        return LLVMBuildAdd(g->B, splat(g, ix_scalar(g, e), w), l, "");
    }
    LLVMValueRef s[64], r = LLVMGetUndef(vec(g->i64, w));
    ix_lanes(g, e, w, s);
    for (int i = 0; i < w; i++)
        r = LLVMBuildInsertElement(g->B, r, s[i], LLVMConstInt(g->i32, (unsigned long long)i, 0), "");
    return r;
}

static LLVMValueRef buf_base(cg *g, int32_t b)
{
    if (!g->bufptr[b]) {
        LLVMBasicBlockRef cur = LLVMGetInsertBlock(g->B);
        LLVMPositionBuilderBefore(g->B, LLVMGetBasicBlockTerminator(g->entry));
        LLVMValueRef slot = LLVMBuildGEP2(g->B, g->ptr, g->bufs_arg,
                                          (LLVMValueRef[]){ LLVMConstInt(g->i64, (unsigned long long)g->slot_of[b], 0) }, 1, "");
        g->bufptr[b] = LLVMBuildLoad2(g->B, g->ptr, slot, "buf");
        LLVMPositionBuilderAtEnd(g->B, cur);
    }
    return g->bufptr[b];
}

static LLVMValueRef elem_ptr(cg *g, LLVMTypeRef st, int32_t b, LLVMValueRef i)
{
    return LLVMBuildGEP2(g->B, st, buf_base(g, b), &i, 1, "");
}

static LLVMValueRef load_raw(cg *g, int32_t b, LLVMTypeRef st, int32_t ix, int w)
{
    int64_t c = w > 1 ? kix_coef(g->P, ix, g->k->vvar) : 0;
    if (w == 1 || c == 0) {
        LLVMValueRef l = LLVMBuildLoad2(g->B, st, elem_ptr(g, st, b, ix_scalar(g, ix)), "");
        return splat(g, l, w);
    }
    if (c == 1) {
        LLVMValueRef l = LLVMBuildLoad2(g->B, vec(st, w), elem_ptr(g, st, b, ix_scalar(g, ix)), "");
        LLVMSetAlignment(l, (unsigned)(LLVMGetIntTypeWidth(st == g->f16 ? g->i16 : st == g->f32 ? g->i32 : st == g->f64 ? g->i64 : st) / 8));
        return l;
    }
    LLVMValueRef idx[64], r = LLVMGetUndef(vec(st, w));
    ix_lanes(g, ix, w, idx);
    for (int i = 0; i < w; i++) {
        LLVMValueRef l = LLVMBuildLoad2(g->B, st, elem_ptr(g, st, b, idx[i]), "");
        r = LLVMBuildInsertElement(g->B, r, l, LLVMConstInt(g->i32, (unsigned long long)i, 0), "");
    }
    return r;
}

/* A loaded value v of dtype dt (storage type) as computed (bool i1, half
 * precision as f32). */
static LLVMValueRef widen_loaded(cg *g, smelt_dtype dt, LLVMValueRef v, int w)
{
    switch (dt) {
    case SMELT_BOOL: return LLVMBuildICmp(g->B, LLVMIntNE, v, cint(g, g->i8, 0, w), "");
    case SMELT_F16: return LLVMBuildFPExt(g->B, v, vec(g->f32, w), "");
    case SMELT_BF16: return bf16_to_f32(g, v, w);
    default: return v;
    }
}

static LLVMValueRef load_val(cg *g, int32_t b, int32_t ix, int w)
{
    smelt_dtype dt = g->p->bufs[b].dtype;
    return widen_loaded(g, dt, load_raw(g, b, stype(g, dt), ix, w), w);
}

static LLVMValueRef emit(cg *g, int32_t e, int w);

/* KE_GATHER: lane by lane, buf[ix + value * x->i] (value checked). */
static LLVMValueRef gather_val(cg *g, const kexpr *x, int w)
{
    smelt_dtype dt = g->p->bufs[x->buf].dtype;
    LLVMTypeRef st = stype(g, dt);
    LLVMValueRef v = emit(g, x->src[0], w), base[64], r = w > 1 ? LLVMGetUndef(vec(st, w)) : NULL;
    LLVMValueRef stride = pconst(g, x->i);
    ix_lanes(g, x->ix, w, base);
    for (int i = 0; i < w; i++) {
        LLVMValueRef lane = LLVMConstInt(g->i32, (unsigned long long)i, 0);
        LLVMValueRef vi = w > 1 ? LLVMBuildExtractElement(g->B, v, lane, "") : v;
        LLVMValueRef at = LLVMBuildAdd(g->B, base[i], LLVMBuildMul(g->B, vi, stride, ""), "");
        LLVMValueRef l = LLVMBuildLoad2(g->B, st, elem_ptr(g, st, x->buf, at), "");
        r = w > 1 ? LLVMBuildInsertElement(g->B, r, l, lane, "") : l;
    }
    return widen_loaded(g, dt, r, w);
}

static void store_val(cg *g, int32_t b, int32_t ix, LLVMValueRef v, int w)
{
    smelt_dtype dt = g->p->bufs[b].dtype;
    LLVMTypeRef st = stype(g, dt);
    if (dt == SMELT_BOOL)
        v = LLVMBuildZExt(g->B, v, vec(g->i8, w), "");
    else if (dt == SMELT_F16)
        v = LLVMBuildFPTrunc(g->B, v, vec(g->f16, w), "");
    else if (dt == SMELT_BF16)
        v = f32_to_bf16(g, v, w);
    int64_t c = w > 1 ? kix_coef(g->P, ix, g->k->vvar) : 0;
    if (w == 1) {
        LLVMBuildStore(g->B, v, elem_ptr(g, st, b, ix_scalar(g, ix)));
        return;
    }
    if (c == 1) {
        LLVMValueRef s = LLVMBuildStore(g->B, v, elem_ptr(g, st, b, ix_scalar(g, ix)));
        LLVMSetAlignment(s, 1);
        return;
    }
    LLVMValueRef idx[64];
    ix_lanes(g, ix, w, idx);
    for (int i = 0; i < w; i++)
        LLVMBuildStore(g->B, LLVMBuildExtractElement(g->B, v, LLVMConstInt(g->i32, (unsigned long long)i, 0), ""),
                       elem_ptr(g, st, b, idx[i]));
}

/* ---------- pointwise ops ---------- */

static LLVMValueRef sel(cg *g, LLVMValueRef c, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildSelect(g->B, c, a, b, "");
}

static LLVMValueRef fcmp(cg *g, LLVMRealPredicate p, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildFCmp(g->B, p, a, b, "");
}

static LLVMValueRef icmp(cg *g, LLVMIntPredicate p, LLVMValueRef a, LLVMValueRef b)
{
    return LLVMBuildICmp(g->B, p, a, b, "");
}

/* ORs `bit` (PLAN_FLAG_*) into the run's flag where any lane of bad is set. */
static void set_flag(cg *g, LLVMValueRef bad, int w, int bit)
{
    LLVMValueRef any = bad;
    if (w > 1)
        any = call_intr(g, "llvm.vector.reduce.or", LLVMTypeOf(bad), &bad, 1);
    LLVMValueRef cur = LLVMBuildLoad2(g->B, g->i32, g->flag, "");
    LLVMSetVolatile(cur, 1);
    LLVMValueRef nv = LLVMBuildOr(g->B, cur, LLVMBuildMul(g->B, LLVMBuildZExt(g->B, any, g->i32, ""),
                                                            LLVMConstInt(g->i32, (unsigned long long)bit, 0), ""), "");
    LLVMValueRef s = LLVMBuildStore(g->B, nv, g->flag);
    LLVMSetVolatile(s, 1);
}

/* Integer division family with torch semantics; divisor 0 sets the flag. */
static LLVMValueRef int_div(cg *g, smelt_op op, smelt_dtype dt, LLVMValueRef a, LLVMValueRef b, int w)
{
    LLVMTypeRef t = ctype(g, dt);
    LLVMValueRef zero = cint(g, t, 0, w), one = cint(g, t, 1, w), m1 = cint(g, t, -1, w);
    LLVMValueRef bz = icmp(g, LLVMIntEQ, b, zero);
    set_flag(g, bz, w, PLAN_FLAG_ZERODIV);
    if (is_unsigned(dt)) {
        LLVMValueRef bs = sel(g, bz, one, b);
        return op == SMELT_OP_FLOORDIV ? LLVMBuildUDiv(g->B, a, bs, "") : LLVMBuildURem(g->B, a, bs, "");
    }
    LLVMValueRef bm1 = icmp(g, LLVMIntEQ, b, m1);
    LLVMValueRef bs = sel(g, LLVMBuildOr(g->B, bz, bm1, ""), one, b);
    LLVMValueRef q = LLVMBuildSDiv(g->B, a, bs, ""), r = LLVMBuildSRem(g->B, a, bs, "");
    q = sel(g, bm1, LLVMBuildNeg(g->B, a, ""), q);
    r = sel(g, bm1, zero, r);
    LLVMValueRef adj = LLVMBuildAnd(g->B, icmp(g, LLVMIntNE, r, zero),
                                    LLVMBuildXor(g->B, icmp(g, LLVMIntSLT, r, zero), icmp(g, LLVMIntSLT, b, zero), ""), "");
    if (op == SMELT_OP_FLOORDIV)
        return sel(g, adj, LLVMBuildSub(g->B, q, one, ""), q);
    if (op == SMELT_OP_REMAINDER)
        return sel(g, adj, LLVMBuildAdd(g->B, r, b, ""), r);
    return r;
}

static LLVMValueRef fp_floordiv(cg *g, LLVMValueRef a, LLVMValueRef b, int w)
{
    LLVMTypeRef t = LLVMTypeOf(a);
    LLVMTypeRef et = w > 1 ? LLVMGetElementType(t) : t;
    LLVMValueRef zero = cfp(g, et, 0, w), one = cfp(g, et, 1, w);
    LLVMValueRef mod = LLVMBuildFRem(g->B, a, b, "");
    LLVMValueRef div = LLVMBuildFDiv(g->B, LLVMBuildFSub(g->B, a, mod, ""), b, "");
    LLVMValueRef adj = LLVMBuildAnd(g->B, fcmp(g, LLVMRealONE, mod, zero),
                                    LLVMBuildXor(g->B, fcmp(g, LLVMRealOLT, b, zero), fcmp(g, LLVMRealOLT, mod, zero), ""), "");
    div = sel(g, adj, LLVMBuildFSub(g->B, div, one, ""), div);
    LLVMValueRef fl = call_intr(g, "llvm.floor", t, &div, 1);
    LLVMValueRef up = fcmp(g, LLVMRealOGT, LLVMBuildFSub(g->B, div, fl, ""), cfp(g, et, 0.5, w));
    fl = sel(g, up, LLVMBuildFAdd(g->B, fl, one, ""), fl);
    LLVMValueRef q = LLVMBuildFDiv(g->B, a, b, "");
    LLVMValueRef cs[2] = { zero, q };
    LLVMValueRef signed0 = call_intr(g, "llvm.copysign", t, cs, 2);
    LLVMValueRef r = sel(g, fcmp(g, LLVMRealUNE, div, zero), fl, signed0);
    return sel(g, fcmp(g, LLVMRealOEQ, b, zero), q, r);
}

static LLVMValueRef fp_remainder(cg *g, LLVMValueRef a, LLVMValueRef b, int w)
{
    LLVMTypeRef t = LLVMTypeOf(a);
    LLVMTypeRef et = w > 1 ? LLVMGetElementType(t) : t;
    LLVMValueRef zero = cfp(g, et, 0, w);
    LLVMValueRef mod = LLVMBuildFRem(g->B, a, b, "");
    LLVMValueRef adj = LLVMBuildAnd(g->B, fcmp(g, LLVMRealONE, mod, zero),
                                    LLVMBuildXor(g->B, fcmp(g, LLVMRealOLT, b, zero), fcmp(g, LLVMRealOLT, mod, zero), ""), "");
    return sel(g, adj, LLVMBuildFAdd(g->B, mod, b, ""), mod);
}

/* Integer power by squaring over all bits of the exponent. */
static LLVMValueRef int_pow(cg *g, smelt_dtype dt, LLVMValueRef a, LLVMValueRef b, int w)
{
    LLVMTypeRef t = ctype(g, dt);
    unsigned bits = LLVMGetIntTypeWidth(t);
    LLVMValueRef one = cint(g, t, 1, w), zero = cint(g, t, 0, w), res = one, base = a, e = b;
    for (unsigned i = 0; i < bits - (is_unsigned(dt) ? 0 : 1); i++) {
        LLVMValueRef bit = icmp(g, LLVMIntNE, LLVMBuildAnd(g->B, e, one, ""), zero);
        res = sel(g, bit, LLVMBuildMul(g->B, res, base, ""), res);
        base = LLVMBuildMul(g->B, base, base, "");
        e = LLVMBuildLShr(g->B, e, one, "");
    }
    if (is_unsigned(dt))
        return res;
    /* negative exponents: 1 -> 1, -1 -> +-1, else 0 */
    LLVMValueRef neg = icmp(g, LLVMIntSLT, b, zero);
    LLVMValueRef odd = icmp(g, LLVMIntNE, LLVMBuildAnd(g->B, b, one, ""), zero);
    LLVMValueRef m1 = cint(g, t, -1, w);
    LLVMValueRef nres = sel(g, icmp(g, LLVMIntEQ, a, one), one,
                            sel(g, icmp(g, LLVMIntEQ, a, m1), sel(g, odd, m1, one), zero));
    return sel(g, neg, nres, res);
}

static LLVMValueRef shift(cg *g, smelt_op op, smelt_dtype dt, LLVMValueRef a, LLVMValueRef b, int w)
{
    LLVMTypeRef t = ctype(g, dt);
    unsigned bits = LLVMGetIntTypeWidth(t);
    LLVMValueRef big = is_unsigned(dt) ? icmp(g, LLVMIntUGE, b, cint(g, t, bits, w))
                                       : LLVMBuildOr(g->B, icmp(g, LLVMIntSGE, b, cint(g, t, bits, w)),
                                                     icmp(g, LLVMIntSLT, b, cint(g, t, 0, w)), "");
    LLVMValueRef bs = sel(g, big, cint(g, t, 0, w), b);
    if (op == SMELT_OP_SHL)
        return sel(g, big, cint(g, t, 0, w), LLVMBuildShl(g->B, a, bs, ""));
    if (is_unsigned(dt))
        return sel(g, big, cint(g, t, 0, w), LLVMBuildLShr(g->B, a, bs, ""));
    return sel(g, big, LLVMBuildAShr(g->B, a, cint(g, t, bits - 1, w), ""), LLVMBuildAShr(g->B, a, bs, ""));
}

static LLVMValueRef maxmin(cg *g, int is_max, smelt_dtype dt, LLVMValueRef a, LLVMValueRef b)
{
    if (dt == SMELT_BOOL)
        return is_max ? LLVMBuildOr(g->B, a, b, "") : LLVMBuildAnd(g->B, a, b, "");
    if (is_fp(dt)) {
        LLVMValueRef c = fcmp(g, is_max ? LLVMRealOGT : LLVMRealOLT, a, b);
        c = LLVMBuildOr(g->B, c, fcmp(g, LLVMRealUNO, a, a), "");
        return sel(g, c, a, b);
    }
    LLVMIntPredicate p = is_unsigned(dt) ? (is_max ? LLVMIntUGT : LLVMIntULT) : (is_max ? LLVMIntSGT : LLVMIntSLT);
    return sel(g, icmp(g, p, a, b), a, b);
}

static LLVMValueRef compare(cg *g, smelt_op op, smelt_dtype dt, LLVMValueRef a, LLVMValueRef b)
{
    if (is_fp(dt)) {
        static const LLVMRealPredicate fp[] = { LLVMRealOEQ, LLVMRealUNE, LLVMRealOLT, LLVMRealOLE, LLVMRealOGT, LLVMRealOGE };
        return fcmp(g, fp[op - SMELT_OP_EQ], a, b);
    }
    static const LLVMIntPredicate sp[] = { LLVMIntEQ, LLVMIntNE, LLVMIntSLT, LLVMIntSLE, LLVMIntSGT, LLVMIntSGE };
    static const LLVMIntPredicate up[] = { LLVMIntEQ, LLVMIntNE, LLVMIntULT, LLVMIntULE, LLVMIntUGT, LLVMIntUGE };
    return icmp(g, (is_unsigned(dt) ? up : sp)[op - SMELT_OP_EQ], a, b);
}

static LLVMValueRef unary_fp(cg *g, smelt_op op, LLVMValueRef x, int w)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    LLVMTypeRef et = w > 1 ? LLVMGetElementType(t) : t;
    LLVMValueRef one = cfp(g, et, 1, w), zero = cfp(g, et, 0, w);
    vm v = vm_of(g);
    LLVMValueRef m = vm_unary(&v, op, x);
    if (m)
        return m;
    switch (op) {
    case SMELT_OP_NEG: return LLVMBuildFNeg(g->B, x, "");
    case SMELT_OP_DETACH: return x;
    case SMELT_OP_ABS: return call_intr(g, "llvm.fabs", t, &x, 1);
    case SMELT_OP_SQRT: return call_intr(g, "llvm.sqrt", t, &x, 1);
    case SMELT_OP_RSQRT: return LLVMBuildFDiv(g->B, one, call_intr(g, "llvm.sqrt", t, &x, 1), "");
    case SMELT_OP_RECIPROCAL: return LLVMBuildFDiv(g->B, one, x, "");
    case SMELT_OP_RELU: return sel(g, fcmp(g, LLVMRealOLT, x, zero), zero, x);
    case SMELT_OP_FLOOR: return call_intr(g, "llvm.floor", t, &x, 1);
    case SMELT_OP_CEIL: return call_intr(g, "llvm.ceil", t, &x, 1);
    case SMELT_OP_TRUNC: return call_intr(g, "llvm.trunc", t, &x, 1);
    case SMELT_OP_ROUND: return call_intr(g, "llvm.roundeven", t, &x, 1);
    case SMELT_OP_SIGN:
        return sel(g, fcmp(g, LLVMRealOGT, x, zero), one,
                   sel(g, fcmp(g, LLVMRealOLT, x, zero), cfp(g, et, -1, w), zero));
    case SMELT_OP_ISNAN: return fcmp(g, LLVMRealUNO, x, x);
    case SMELT_OP_ISINF: return fcmp(g, LLVMRealOEQ, call_intr(g, "llvm.fabs", t, &x, 1), cfp(g, et, INFINITY, w));
    case SMELT_OP_SIGNBIT: {   /* the bits as an integer of the same width */
        LLVMTypeRef it = et == g->f64 ? g->i64 : g->i32;
        return icmp(g, LLVMIntSLT, LLVMBuildBitCast(g->B, x, vec(it, w), ""), cint(g, it, 0, w));
    }
    default: return NULL;
    }
}

static LLVMValueRef unary_int(cg *g, smelt_op op, smelt_dtype dt, LLVMValueRef x, int w)
{
    LLVMTypeRef t = ctype(g, dt);
    LLVMValueRef zero = cint(g, t, 0, w);
    int u = is_unsigned(dt);
    switch (op) {
    case SMELT_OP_NEG: return LLVMBuildNeg(g->B, x, "");
    case SMELT_OP_DETACH: return x;
    case SMELT_OP_ABS: return u ? x : sel(g, icmp(g, LLVMIntSLT, x, zero), LLVMBuildNeg(g->B, x, ""), x);
    case SMELT_OP_RELU: return u ? x : sel(g, icmp(g, LLVMIntSLT, x, zero), zero, x);
    case SMELT_OP_FLOOR: case SMELT_OP_CEIL: case SMELT_OP_TRUNC: case SMELT_OP_ROUND: return x;
    case SMELT_OP_SIGN:
        if (dt == SMELT_BOOL)
            return x;
        return LLVMBuildSub(g->B, LLVMBuildZExt(g->B, icmp(g, u ? LLVMIntUGT : LLVMIntSGT, x, zero), LLVMTypeOf(x), ""),
                            LLVMBuildZExt(g->B, icmp(g, LLVMIntSLT, x, zero), LLVMTypeOf(x), ""), "");
    case SMELT_OP_ISNAN: case SMELT_OP_ISINF: return cint(g, g->i1, 0, w);
    case SMELT_OP_SIGNBIT: return u ? cint(g, g->i1, 0, w) : icmp(g, LLVMIntSLT, x, zero);
    case SMELT_OP_BITWISE_NOT: return LLVMBuildNot(g->B, x, "");
    default: return NULL;
    }
}

static LLVMValueRef binary_fp(cg *g, smelt_op op, LLVMValueRef a, LLVMValueRef b, int w)
{
    LLVMValueRef args[2] = { a, b };
    switch (op) {
    case SMELT_OP_ADD: return LLVMBuildFAdd(g->B, a, b, "");
    case SMELT_OP_SUB: return LLVMBuildFSub(g->B, a, b, "");
    case SMELT_OP_MUL: return LLVMBuildFMul(g->B, a, b, "");
    case SMELT_OP_DIV: return LLVMBuildFDiv(g->B, a, b, "");
    case SMELT_OP_FLOORDIV: return fp_floordiv(g, a, b, w);
    case SMELT_OP_POW: case SMELT_OP_ATAN2: {
        vm v = vm_of(g);
        return vm_binary(&v, op, args[0], args[1]);
    }
    case SMELT_OP_FMOD: return LLVMBuildFRem(g->B, a, b, "");   /* exact, libm fmod */
    case SMELT_OP_REMAINDER: return fp_remainder(g, a, b, w);
    default: return NULL;
    }
}

static LLVMValueRef binary_int(cg *g, smelt_op op, smelt_dtype dt, LLVMValueRef a, LLVMValueRef b, int w)
{
    int boolean = dt == SMELT_BOOL;
    switch (op) {
    case SMELT_OP_ADD: return boolean ? LLVMBuildOr(g->B, a, b, "") : LLVMBuildAdd(g->B, a, b, "");
    case SMELT_OP_SUB: return boolean ? LLVMBuildXor(g->B, a, b, "") : LLVMBuildSub(g->B, a, b, "");
    case SMELT_OP_MUL: return boolean ? LLVMBuildAnd(g->B, a, b, "") : LLVMBuildMul(g->B, a, b, "");
    case SMELT_OP_FLOORDIV: case SMELT_OP_FMOD: case SMELT_OP_REMAINDER: return int_div(g, op, dt, a, b, w);
    case SMELT_OP_POW: return int_pow(g, dt, a, b, w);
    case SMELT_OP_BITWISE_AND: case SMELT_OP_LOGICAL_AND: return LLVMBuildAnd(g->B, a, b, "");
    case SMELT_OP_BITWISE_OR: case SMELT_OP_LOGICAL_OR: return LLVMBuildOr(g->B, a, b, "");
    case SMELT_OP_BITWISE_XOR: case SMELT_OP_LOGICAL_XOR: return LLVMBuildXor(g->B, a, b, "");
    case SMELT_OP_SHL: case SMELT_OP_SHR: return shift(g, op, dt, a, b, w);
    default: return NULL;
    }
}

/* x clamped to the node's bounds (numbers: for f16/bf16 in f32, ATen's
 * opmath bounds; a clamped value then rounds where it is stored). */
static LLVMValueRef clamp(cg *g, const smelt_node *n, smelt_dtype dt, LLVMValueRef x, int w)
{
    smelt_dtype bd = dt == SMELT_F16 || dt == SMELT_BF16 ? SMELT_F32 : dt;
    if (n->a.clamp.has_lo) {
        LLVMValueRef lo = cval(g, bd, n->a.clamp.flo, n->a.clamp.ilo, w);
        x = is_fp(dt) ? sel(g, fcmp(g, LLVMRealOLT, x, lo), lo, x) : maxmin(g, 1, dt, x, lo);
    }
    if (n->a.clamp.has_hi) {
        LLVMValueRef hi = cval(g, bd, n->a.clamp.fhi, n->a.clamp.ihi, w);
        x = is_fp(dt) ? sel(g, fcmp(g, LLVMRealOGT, x, hi), hi, x) : maxmin(g, 0, dt, x, hi);
    }
    return x;
}

static LLVMValueRef emit(cg *g, int32_t e, int w);

/* x ** c for the constant exponents torch special-cases (2, 3, 0.5, -0.5,
 * -1, -2: products, sqrt and reciprocals, as its pow kernel computes them);
 * NULL for any other exponent. */
static LLVMValueRef pow_const(cg *g, LLVMValueRef x, double c, int w)
{
    LLVMTypeRef t = LLVMTypeOf(x);
    LLVMValueRef one = cfp(g, LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMGetElementType(t) : t, 1, w);
    if (c == 2)
        return LLVMBuildFMul(g->B, x, x, "");
    if (c == 3)
        return LLVMBuildFMul(g->B, LLVMBuildFMul(g->B, x, x, ""), x, "");
    if (c == 0.5)
        return call_intr(g, "llvm.sqrt", LLVMTypeOf(x), &x, 1);
    if (c == -0.5)
        return LLVMBuildFDiv(g->B, one, call_intr(g, "llvm.sqrt", LLVMTypeOf(x), &x, 1), "");
    if (c == -1)
        return LLVMBuildFDiv(g->B, one, x, "");
    if (c == -2)
        return LLVMBuildFDiv(g->B, one, LLVMBuildFMul(g->B, x, x, ""), "");
    return NULL;
}

static LLVMValueRef emit_op(cg *g, const kexpr *x, int w)
{
    smelt_op op = (smelt_op)x->gop;
    smelt_dtype cd = x->cdtype;
    LLVMValueRef a[3] = { NULL, NULL, NULL };
    const kexpr *s0 = x->src[0] >= 0 ? &g->P->ex[x->src[0]] : NULL;
    if (op == SMELT_OP_LOG1P && cd == SMELT_F32 && s0 && s0->op == KE_OP && s0->gop == SMELT_OP_EXP &&
        s0->cdtype == SMELT_F32 && s0->dtype == SMELT_F32) {   /* softplus: one fused function */
        const kexpr *y = &g->P->ex[s0->src[0]];
        vm v = vm_of(g);
        return vm_log1p_exp(&v, conv(g, emit(g, s0->src[0], w), y->dtype, SMELT_F32, w));
    }
    for (int k = 0; k < 3 && x->src[k] >= 0; k++) {
        const kexpr *s = &g->P->ex[x->src[k]];
        a[k] = conv(g, emit(g, x->src[k], w), s->dtype, operand_dtype(g, x, k, cd), w);
    }
    if (op == SMELT_OP_CAST)
        return conv(g, a[0], cd, x->dtype, w);
    if (op == SMELT_OP_WHERE)
        return sel(g, a[0], a[1], a[2]);
    if (op == SMELT_OP_CLAMP)
        return clamp(g, &g->p->graph->nodes[x->gnode], cd, a[0], w);
    if (op == SMELT_OP_CHECKIDX) {   /* (cd is int64) */
        const smelt_node *n = &g->p->graph->nodes[x->gnode];
        LLVMValueRef lim = g->param ? splat(g, pconst(g, n->a.gather.n), w) : cint(g, g->i64, n->a.gather.n, w);
        LLVMValueRef zero = cint(g, g->i64, 0, w), v = a[0];
        if (n->a.gather.wrap)
            v = sel(g, icmp(g, LLVMIntSLT, v, zero), LLVMBuildAdd(g->B, v, lim, ""), v);
        LLVMValueRef bad = icmp(g, LLVMIntUGE, v, lim);
        set_flag(g, bad, w, PLAN_FLAG_INDEX);
        return sel(g, bad, zero, v);
    }
    if (op == SMELT_OP_LOGICAL_NOT)
        return LLVMBuildNot(g->B, a[0], "");
    if (op >= SMELT_OP_EQ && op <= SMELT_OP_GE)
        return compare(g, op, cd, a[0], a[1]);
    if (op == SMELT_OP_MAXIMUM || op == SMELT_OP_MINIMUM)
        return maxmin(g, op == SMELT_OP_MAXIMUM, cd, a[0], a[1]);
    LLVMValueRef r = NULL;
    const kexpr *e = x->src[1] >= 0 ? &g->P->ex[x->src[1]] : NULL;
    if (op == SMELT_OP_POW && is_fp(cd) && e && e->op == KE_CONST)
        r = pow_const(g, a[0], is_fp((smelt_dtype)e->dtype) ? e->f : (double)e->i, w);
    if (r)
        ;
    else if (a[1])
        r = is_fp(cd) ? binary_fp(g, op, a[0], a[1], w) : binary_int(g, op, cd, a[0], a[1], w);
    else
        r = is_fp(cd) ? unary_fp(g, op, a[0], w) : unary_int(g, op, cd, a[0], w);
    if (!r)
        abort();   /* the builder rejects op/dtype pairs not handled above */
    return r;   /* f16/bf16: kept in f32 until a store or a CAST rounds it (see the header) */
}

/* Value of expression e at the current loop point, w lanes (w = 1 or L). */
static LLVMValueRef emit(cg *g, int32_t e, int w)
{
    int wi = w > 1;
    if (g->memo_ep[wi][e] == g->epoch)
        return g->memo[wi][e];
    const kexpr *x = &g->P->ex[e];
    LLVMValueRef r;
    if (e == g->rc_expr) {
        LLVMTypeRef t = ctype(g, x->dtype);
        LLVMValueRef at = g->rc_obuf >= 0 ? elem_ptr(g, t, g->rc_obuf, ix_scalar(g, g->rc_oix))
                                          : LLVMBuildGEP2(g->B, t, g->rc_buf, (LLVMValueRef[]){ ix_scalar(g, g->rc_flat) }, 1, "");
        if (g->rc_ready) {
            r = LLVMBuildLoad2(g->B, vec(t, w), at, "");
            LLVMSetAlignment(r, 4);
        } else {
            r = emit_op(g, x, w);
            LLVMSetAlignment(LLVMBuildStore(g->B, r, at), 4);
        }
        g->memo[wi][e] = r;
        g->memo_ep[wi][e] = g->epoch;
        return r;
    }
    switch (x->op) {
    case KE_LOAD: r = load_val(g, x->buf, x->ix, w); break;
    case KE_GATHER: r = gather_val(g, x, w); break;
    case KE_CONST:   /* parametric: an int64 constant may be a size (a symbolic scalar, a stride) */
        r = g->param && x->dtype == SMELT_I64 && (x->i >= 2 || x->i <= -2) ? splat(g, pconst(g, x->i), w)
                                                                           : cval(g, x->dtype, x->f, x->i, w);
        break;
    case KE_INDEX: r = ix_vector(g, x->ix, w); break;
    case KE_PHASE:
        r = g->phase[x->phase];
        if (g->phase_w[x->phase] == 1 && w > 1)
            r = splat(g, r, w);
        break;
    default: r = emit_op(g, x, w); break;
    }
    g->memo[wi][e] = r;
    g->memo_ep[wi][e] = g->epoch;
    return r;
}

/* ---------- loops ---------- */

typedef struct loop {
    LLVMBasicBlockRef head, body, exit, pre;
    LLVMValueRef iv;
    int64_t step;
} loop;

static LLVMValueRef loop_begin(cg *g, loop *l, LLVMValueRef start, LLVMValueRef end, int64_t step)
{
    l->pre = LLVMGetInsertBlock(g->B);
    l->head = LLVMAppendBasicBlockInContext(g->C, g->fn, "head");
    l->body = LLVMAppendBasicBlockInContext(g->C, g->fn, "body");
    l->exit = LLVMAppendBasicBlockInContext(g->C, g->fn, "exit");
    l->step = step;
    LLVMBuildBr(g->B, l->head);
    LLVMPositionBuilderAtEnd(g->B, l->head);
    l->iv = LLVMBuildPhi(g->B, g->i64, "i");
    LLVMAddIncoming(l->iv, &start, &l->pre, 1);
    LLVMValueRef next_ok = step == 1 ? icmp(g, LLVMIntSLT, l->iv, end)
                                     : icmp(g, LLVMIntSLE, LLVMBuildAdd(g->B, l->iv, LLVMConstInt(g->i64, (unsigned long long)step, 0), ""), end);
    LLVMBuildCondBr(g->B, next_ok, l->body, l->exit);
    LLVMPositionBuilderAtEnd(g->B, l->body);
    g->epoch++;
    return l->iv;
}

static void loop_end(cg *g, loop *l)
{
    LLVMValueRef nx = LLVMBuildAdd(g->B, l->iv, LLVMConstInt(g->i64, (unsigned long long)l->step, 0), "");
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(g->B);
    LLVMBuildBr(g->B, l->head);
    LLVMAddIncoming(l->iv, &nx, &cur, 1);
    LLVMPositionBuilderAtEnd(g->B, l->exit);
    g->epoch++;
}

static LLVMValueRef entry_alloca(cg *g, LLVMTypeRef t)
{
    LLVMBasicBlockRef cur = LLVMGetInsertBlock(g->B);
    LLVMPositionBuilderBefore(g->B, LLVMGetBasicBlockTerminator(g->entry));
    LLVMValueRef a = LLVMBuildAlloca(g->B, t, "acc");
    LLVMPositionBuilderAtEnd(g->B, cur);
    return a;
}

/* ---------- reductions ---------- */

typedef struct acc {
    LLVMValueRef val, idx;        /* allocas (idx: argmax/argmin only) */
    smelt_dtype dt;               /* accumulated value dtype */
    int w;
} acc;

static int is_arg(smelt_op op) { return op == SMELT_OP_ARGMAX || op == SMELT_OP_ARGMIN; }

static LLVMValueRef red_init(cg *g, smelt_op op, smelt_dtype dt, int w)
{
    int fp = is_fp(dt);
    LLVMTypeRef t = ctype(g, dt);
    int64_t imax = 0, imin = 0;
    if (!fp) {
        unsigned bits = LLVMGetIntTypeWidth(t);
        imax = bits >= 64 ? INT64_MAX : (int64_t)((1ull << (bits - 1)) - 1);
        imin = bits >= 64 ? INT64_MIN : -(int64_t)(1ull << (bits - 1));
        if (is_unsigned(dt)) {
            imax = dt == SMELT_BOOL ? 1 : 255;
            imin = 0;
        }
    }
    switch (op) {
    case SMELT_OP_PROD: case SMELT_OP_ALL: return cval(g, dt, 1, 1, w);
    case SMELT_OP_AMAX: case SMELT_OP_ARGMAX: return fp ? cfp(g, t, -INFINITY, w) : cint(g, t, imin, w);
    case SMELT_OP_AMIN: case SMELT_OP_ARGMIN: return fp ? cfp(g, t, INFINITY, w) : cint(g, t, imax, w);
    default: return cval(g, dt, 0, 0, w);
    }
}

static LLVMValueRef red_combine(cg *g, smelt_op op, smelt_dtype dt, LLVMValueRef a, LLVMValueRef v)
{
    switch (op) {
    case SMELT_OP_SUM: return is_fp(dt) ? LLVMBuildFAdd(g->B, a, v, "") : dt == SMELT_BOOL ? LLVMBuildOr(g->B, a, v, "") : LLVMBuildAdd(g->B, a, v, "");
    case SMELT_OP_PROD: return is_fp(dt) ? LLVMBuildFMul(g->B, a, v, "") : dt == SMELT_BOOL ? LLVMBuildAnd(g->B, a, v, "") : LLVMBuildMul(g->B, a, v, "");
    case SMELT_OP_AMAX: return maxmin(g, 1, dt, v, a);
    case SMELT_OP_AMIN: return maxmin(g, 0, dt, v, a);
    case SMELT_OP_ANY: return LLVMBuildOr(g->B, a, v, "");
    default: return LLVMBuildAnd(g->B, a, v, "");   /* ALL */
    }
}

/* argmax/argmin step: take (v, i) over (a, ai) when strictly better, or
 * equal (NaN equal NaN) with a smaller index. */
static void arg_combine(cg *g, smelt_op op, smelt_dtype dt, LLVMValueRef *a, LLVMValueRef *ai,
                        LLVMValueRef v, LLVMValueRef vi)
{
    LLVMValueRef better, equal;
    if (is_fp(dt)) {
        LLVMValueRef vn = fcmp(g, LLVMRealUNO, v, v), an = fcmp(g, LLVMRealUNO, *a, *a);
        better = fcmp(g, op == SMELT_OP_ARGMAX ? LLVMRealOGT : LLVMRealOLT, v, *a);
        better = LLVMBuildOr(g->B, better, LLVMBuildAnd(g->B, vn, LLVMBuildNot(g->B, an, ""), ""), "");
        equal = LLVMBuildOr(g->B, fcmp(g, LLVMRealOEQ, v, *a), LLVMBuildAnd(g->B, vn, an, ""), "");
    } else {
        int u = is_unsigned(dt);
        better = icmp(g, op == SMELT_OP_ARGMAX ? (u ? LLVMIntUGT : LLVMIntSGT) : (u ? LLVMIntULT : LLVMIntSLT), v, *a);
        equal = icmp(g, LLVMIntEQ, v, *a);
    }
    LLVMValueRef take = LLVMBuildOr(g->B, better, LLVMBuildAnd(g->B, equal, icmp(g, LLVMIntSLT, vi, *ai), ""), "");
    *a = sel(g, take, v, *a);
    *ai = sel(g, take, vi, *ai);
}

/* Flat row-major index over the reduction vars at the current point. */
static LLVMValueRef red_flat(cg *g, int w)
{
    kir_pool *P = g->P;
    int32_t f = kix_const(P, 0);
    for (int v = 0; v < g->k->nvars; v++)
        if (g->k->rmask >> v & 1)
            f = kix_add(P, kix_mul(P, f, g->k->size[v]), kix_var(P, v, g->k->size[v]));
    return ix_vector(g, f, w);
}

static void acc_init(cg *g, acc *a, const kitem *it, int w)
{
    smelt_op op = (smelt_op)it->rop;
    a->w = w;
    a->dt = is_arg(op) ? g->P->ex[it->value].dtype : (smelt_dtype)it->acc_dtype;
    if (is_arg(op) && (a->dt == SMELT_F16 || a->dt == SMELT_BF16))
        a->dt = SMELT_F32;
    a->val = entry_alloca(g, vec(ctype(g, a->dt), w));
    LLVMBuildStore(g->B, red_init(g, op, a->dt, w), a->val);
    a->idx = NULL;
    if (is_arg(op)) {
        a->idx = entry_alloca(g, vec(g->i64, w));
        LLVMBuildStore(g->B, cint(g, g->i64, INT64_MAX, w), a->idx);
    }
}

static void acc_step(cg *g, acc *a, const kitem *it, int w)
{
    smelt_op op = (smelt_op)it->rop;
    const kexpr *x = &g->P->ex[it->value];
    LLVMValueRef v = conv(g, emit(g, it->value, w), x->dtype, a->dt, w);
    if (w != a->w)
        abort();
    LLVMValueRef cur = LLVMBuildLoad2(g->B, vec(ctype(g, a->dt), w), a->val, "");
    if (is_arg(op)) {
        LLVMValueRef ci = LLVMBuildLoad2(g->B, vec(g->i64, w), a->idx, "");
        arg_combine(g, op, a->dt, &cur, &ci, v, red_flat(g, w));
        LLVMBuildStore(g->B, ci, a->idx);
    } else {
        cur = red_combine(g, op, a->dt, cur, v);
    }
    LLVMBuildStore(g->B, cur, a->val);
}

/* v's lanes [from, from + n) as an n-lane vector. */
static LLVMValueRef lanes_of(cg *g, LLVMValueRef v, int from, int n)
{
    LLVMValueRef mask[64];
    for (int i = 0; i < n; i++)
        mask[i] = LLVMConstInt(g->i32, (unsigned long long)(from + i), 0);
    return LLVMBuildShuffleVector(g->B, v, LLVMGetUndef(LLVMTypeOf(v)), LLVMConstVector(mask, (unsigned)n), "");
}

/* Folds a vector accumulator into the scalar one: halves combined
 * pairwise (log2(w) steps) for value reductions; lane by lane, in lane
 * order, for argmax/argmin (first index on ties). */
static void acc_fold(cg *g, const kitem *it, acc *vec_acc, acc *s)
{
    smelt_op op = (smelt_op)it->rop;
    LLVMTypeRef t = ctype(g, s->dt);
    LLVMValueRef vv = LLVMBuildLoad2(g->B, vec(t, vec_acc->w), vec_acc->val, "");
    LLVMValueRef vi = vec_acc->idx ? LLVMBuildLoad2(g->B, vec(g->i64, vec_acc->w), vec_acc->idx, "") : NULL;
    LLVMValueRef cur = LLVMBuildLoad2(g->B, t, s->val, "");
    LLVMValueRef ci = s->idx ? LLVMBuildLoad2(g->B, g->i64, s->idx, "") : NULL;
    if (!is_arg(op) && vec_acc->w > 1 && (vec_acc->w & (vec_acc->w - 1)) == 0) {
        for (int w = vec_acc->w / 2; w >= 1; w /= 2)
            vv = red_combine(g, op, s->dt, lanes_of(g, vv, 0, w), lanes_of(g, vv, w, w));
        cur = red_combine(g, op, s->dt, cur, LLVMBuildExtractElement(g->B, vv, LLVMConstInt(g->i32, 0, 0), ""));
        LLVMBuildStore(g->B, cur, s->val);
        return;
    }
    for (int i = 0; i < vec_acc->w; i++) {
        LLVMValueRef lane = LLVMConstInt(g->i32, (unsigned long long)i, 0);
        LLVMValueRef v = LLVMBuildExtractElement(g->B, vv, lane, "");
        if (is_arg(op))
            arg_combine(g, op, s->dt, &cur, &ci, v, LLVMBuildExtractElement(g->B, vi, lane, ""));
        else
            cur = red_combine(g, op, s->dt, cur, v);
    }
    LLVMBuildStore(g->B, cur, s->val);
    if (ci)
        LLVMBuildStore(g->B, ci, s->idx);
}

/* ---------- kernel structure ---------- */

typedef void (*body_fn)(cg *g, const kitem *it, void *ctx, int w);

static void body_reduce(cg *g, const kitem *it, void *ctx, int w);

/* Iterations per block of a blocked floating-point sum (blocked_loop). */
enum { SUM_BLOCK = 256 };

/* 1 if body accumulates a floating-point sum: its innermost reduction loop
 * is blocked, so rounding error grows with the block length plus the
 * number of blocks instead of the whole reduction length (a sum of 64M
 * float32 values: relative error ~2e-4 unblocked). */
static int blocked_sum(body_fn body, const kitem *it)
{
    return body == body_reduce && it->rop == SMELT_OP_SUM && is_fp((smelt_dtype)it->acc_dtype);
}

/* for (i = lo; i + step <= hi; i += step) { var = i; body(it, a, w) },
 * (hi - lo a multiple of step) as blocks of SUM_BLOCK iterations, each
 * summing into a fresh accumulator that is added to *a after the block
 * with Kahan compensation (once per block: no cost in the loop), the
 * compensation folded in at the end. */
static void blocked_loop(cg *g, LLVMValueRef lo, LLVMValueRef hi, int64_t step, int var, acc *a,
                         body_fn body, const kitem *it)
{
    acc blk = *a;
    LLVMTypeRef t = vec(ctype(g, a->dt), a->w);
    LLVMValueRef comp = entry_alloca(g, t);
    LLVMBuildStore(g->B, LLVMConstNull(t), comp);
    blk.val = entry_alloca(g, t);
    LLVMValueRef bs = LLVMConstInt(g->i64, (unsigned long long)(step * SUM_BLOCK), 0);
    LLVMValueRef n = LLVMBuildSub(g->B, hi, lo, "");
    LLVMValueRef nb = LLVMBuildUDiv(g->B, LLVMBuildAdd(g->B, n, LLVMBuildSub(g->B, bs, LLVMConstInt(g->i64, 1, 0), ""), ""),
                                    bs, "");
    loop ob, il;
    LLVMValueRef bi = loop_begin(g, &ob, LLVMConstInt(g->i64, 0, 0), nb, 1);
    LLVMBuildStore(g->B, red_init(g, SMELT_OP_SUM, a->dt, a->w), blk.val);
    LLVMValueRef b0 = LLVMBuildAdd(g->B, lo, LLVMBuildMul(g->B, bi, bs, ""), "");
    LLVMValueRef b1 = LLVMBuildAdd(g->B, b0, bs, "");
    b1 = sel(g, icmp(g, LLVMIntSLT, b1, hi), b1, hi);
    g->var[var] = loop_begin(g, &il, b0, b1, step);
    body(g, it, &blk, a->w);
    g->epoch++;
    loop_end(g, &il);
    LLVMValueRef cur = LLVMBuildLoad2(g->B, t, a->val, "");
    LLVMValueRef y = LLVMBuildFSub(g->B, LLVMBuildLoad2(g->B, t, blk.val, ""), LLVMBuildLoad2(g->B, t, comp, ""), "");
    LLVMValueRef sum = LLVMBuildFAdd(g->B, cur, y, "");
    LLVMBuildStore(g->B, LLVMBuildFSub(g->B, LLVMBuildFSub(g->B, sum, cur, ""), y, ""), comp);
    LLVMBuildStore(g->B, sum, a->val);
    loop_end(g, &ob);
    LLVMValueRef fixed = LLVMBuildFSub(g->B, LLVMBuildLoad2(g->B, t, a->val, ""), LLVMBuildLoad2(g->B, t, comp, ""), "");
    LLVMBuildStore(g->B, fixed, a->val);
}

/* 1 if no reduction var after v is looped over (the vectorised one of
 * inner mode aside). */
static int last_rvar(const kir_kernel *k, int v)
{
    for (int u = v + 1; u < k->nvars; u++)
        if ((k->rmask >> u & 1) && u != k->vvar)
            return 0;
    return 1;
}

/* Runs body over all reduction vars (nested loops in var order). In inner
 * mode the vectorised var is innermost: a vector loop, then a scalar tail.
 * A floating-point sum's innermost loop is blocked (blocked_loop). */
static void loop_rvars(cg *g, int w_outer, int from, body_fn body, const kitem *it, void *ctx, void *ctx_tail)
{
    const kir_kernel *k = g->k;
    int inner = k->vvar >= 0 && (k->rmask >> k->vvar & 1);
    int v = from;
    while (v < k->nvars && (!(k->rmask >> v & 1) || v == k->vvar))
        v++;
    if (v < k->nvars) {
        loop l;
        int sp = v == k->split_var && g->split_lo;
        LLVMValueRef lo = sp ? g->split_lo : LLVMConstInt(g->i64, 0, 0);
        LLVMValueRef hi = sp ? g->split_hi : pconst(g, k->size[v]);
        if (!inner && last_rvar(k, v) && blocked_sum(body, it) && k->size[v] > SUM_BLOCK) {
            blocked_loop(g, lo, hi, 1, v, ctx, body, it);
            return;
        }
        g->var[v] = loop_begin(g, &l, lo, hi, 1);
        loop_rvars(g, w_outer, v + 1, body, it, ctx, ctx_tail);
        loop_end(g, &l);
        return;
    }
    if (!inner) {
        body(g, it, ctx, w_outer);
        g->epoch++;
        return;
    }
    int sp = k->vvar == k->split_var && g->split_lo;
    LLVMValueRef lo = sp ? g->split_lo : LLVMConstInt(g->i64, 0, 0);
    LLVMValueRef hi = sp ? g->split_hi : pconst(g, k->size[k->vvar]);
    LLVMValueRef Lc = LLVMConstInt(g->i64, (unsigned long long)g->L, 0);
    LLVMValueRef n = LLVMBuildSub(g->B, hi, lo, "");
    LLVMValueRef main_end = LLVMBuildAdd(g->B, lo, LLVMBuildMul(g->B, LLVMBuildUDiv(g->B, n, Lc, ""), Lc, ""), "");
    if (blocked_sum(body, it) && k->size[k->vvar] > (int64_t)g->L * SUM_BLOCK) {
        blocked_loop(g, lo, main_end, g->L, k->vvar, ctx, body, it);
    } else {
        loop l;
        g->var[k->vvar] = loop_begin(g, &l, lo, hi, g->L);
        body(g, it, ctx, g->L);
        loop_end(g, &l);
    }
    loop t;
    g->var[k->vvar] = loop_begin(g, &t, main_end, hi, 1);
    body(g, it, ctx_tail, 1);
    loop_end(g, &t);
}

static void body_reduce(cg *g, const kitem *it, void *ctx, int w) { acc_step(g, (acc *)ctx, it, w); }

static void body_store(cg *g, const kitem *it, void *ctx, int w)
{
    (void)ctx;
    store_val(g, it->buf, it->ix, emit(g, it->value, w), w);
}

static int is_costly(const kir_pool *P, int32_t e)
{
    const kexpr *x = &P->ex[e];
    if (x->op != KE_OP)
        return 0;
    switch ((smelt_op)x->gop) {
    case SMELT_OP_EXP: case SMELT_OP_EXP2: case SMELT_OP_EXPM1: case SMELT_OP_LOG:
    case SMELT_OP_LOG2: case SMELT_OP_LOG1P: case SMELT_OP_SIN: case SMELT_OP_COS:
    case SMELT_OP_TAN: case SMELT_OP_TANH: case SMELT_OP_ERF: case SMELT_OP_POW:
    case SMELT_OP_SIGMOID: case SMELT_OP_ATAN2: case SMELT_OP_ACOS: case SMELT_OP_ASIN:
    case SMELT_OP_ATAN: case SMELT_OP_ACOSH: case SMELT_OP_ASINH: case SMELT_OP_ATANH:
    case SMELT_OP_COSH: case SMELT_OP_SINH: case SMELT_OP_LOG10: case SMELT_OP_ERFC: case SMELT_OP_NDTR: case SMELT_OP_GELU_TANH:
    case SMELT_OP_LGAMMA:
        return 1;
    default:
        for (int k = 0; k < 3; k++)
            if (x->src[k] >= 0 && is_costly(P, x->src[k]))
                return 1;
        return 0;
    }
}

static int contains(const kir_pool *P, int32_t root, int32_t e)
{
    if (root == e)
        return 1;
    const kexpr *x = &P->ex[root];
    for (int k = 0; k < 3; k++)
        if (x->src[k] >= 0 && contains(P, x->src[k], e))
            return 1;
    return 0;
}

/* 1 if expression root loads from plan buffer b. */
static int reads_buf(const kir_pool *P, int32_t root, int32_t b)
{
    const kexpr *x = &P->ex[root];
    if (x->op == KE_LOAD)
        return x->buf == b;
    if (x->op == KE_GATHER && x->buf == b)
        return 1;
    for (int k = 0; k < 3; k++)
        if (x->src[k] >= 0 && reads_buf(P, x->src[k], b))
            return 1;
    return 0;
}

/* 1 if item j of k, a later user of expression e, can hold e's row in
 * its own output (as ATen's softmax keeps exp in its result): a STORE of
 * of e's dtype (float32/64) into a buffer of that dtype, contiguous along
 * the only reduction var (the vectorised one), that no item reads and no
 * other item writes. */
static int output_can_cache(const smelt_plan *p, const kir_kernel *k, const kir_pool *P, int32_t e, int j)
{
    const kitem *it = &k->items[j];
    smelt_dtype dt = (smelt_dtype)P->ex[e].dtype;
    if (it->kind != KI_STORE || k->rmask != 1u << k->vvar || kix_coef(P, it->ix, k->vvar) != 1 ||
        (dt != SMELT_F32 && dt != SMELT_F64) || p->bufs[it->buf].dtype != dt)
        return 0;
    for (int i = 0; i < k->nitems; i++)
        if (reads_buf(P, k->items[i].value, it->buf) || (i != j && k->items[i].kind != KI_REDUCE &&
                                                          k->items[i].buf == it->buf))
            return 0;
    return P->ex[e].dtype == P->ex[it->value].dtype;
}

#define ROW_CACHE_BYTES 65536

/* Row cache (inner mode, vectorised var last): the value of a REDUCE item
 * that calls transcendentals and reappears in a later item (softmax's
 * exp(x - max)) is kept per reduction index in a stack row while its loop
 * runs, and read back by the later loops instead of recomputed. A row
 * longer than ROW_CACHE_BYTES is kept in the later item's own output
 * instead when output_can_cache allows it. */
static void plan_row_cache(cg *g)
{
    const kir_kernel *k = g->k;
    kir_pool *P = g->P;
    g->rc_expr = -1;
    if (k->vvar < 0 || !(k->rmask >> k->vvar & 1) || k->vvar != k->nvars - 1 || k->split > 1)
        return;
    int64_t rn = 1;
    for (int v = 0; v < k->nvars; v++)
        if (k->rmask >> v & 1)
            rn *= k->size[v];
    g->rc_obuf = -1;
    for (int i = 0; i < k->nitems && g->rc_expr < 0; i++) {
        int32_t e = k->items[i].value;
        if (k->items[i].kind != KI_REDUCE || !is_costly(P, e))
            continue;
        int fits = rn * (int64_t)smelt_dtype_size((smelt_dtype)P->ex[e].dtype) <= ROW_CACHE_BYTES;
        for (int j = i + 1; j < k->nitems && g->rc_expr < 0; j++)
            if (contains(P, k->items[j].value, e) && (fits || output_can_cache(g->p, k, P, e, j))) {
                g->rc_expr = e;
                if (!fits)
                    g->rc_obuf = k->items[j].buf, g->rc_oix = k->items[j].ix;
            }
    }
    if (g->rc_expr < 0 || g->rc_obuf >= 0)
        return;
    int32_t f = kix_const(P, 0);
    for (int v = 0; v < k->nvars; v++)
        if (k->rmask >> v & 1)
            f = kix_add(P, kix_mul(P, f, k->size[v]), kix_var(P, v, k->size[v]));
    g->rc_flat = f;
    LLVMTypeRef t = LLVMArrayType2(ctype(g, P->ex[g->rc_expr].dtype), (uint64_t)rn + (uint64_t)g->L);
    g->rc_buf = entry_alloca(g, t);
    LLVMSetAlignment(g->rc_buf, 64);
}

/* One outer point (w lanes of it in outer-vector mode): all items. */
static void emit_point(cg *g, int w)
{
    const kir_kernel *k = g->k;
    int inner = k->vvar >= 0 && (k->rmask >> k->vvar & 1);
    int ph = 0;
    g->epoch++;
    g->rc_ready = 0;
    for (int i = 0; i < k->nitems; i++) {
        const kitem *it = &k->items[i];
        if (it->kind == KI_ROWSTORE) {
            body_store(g, it, NULL, w);
            continue;
        }
        if (it->kind == KI_STORE) {
            loop_rvars(g, w, 0, body_store, it, NULL, NULL);
            continue;
        }
        acc s, vacc;
        acc_init(g, &s, it, w);
        if (inner)
            acc_init(g, &vacc, it, g->L);
        loop_rvars(g, w, 0, body_reduce, it, inner ? &vacc : &s, &s);
        g->rc_ready |= it->value == g->rc_expr;
        if (inner)
            acc_fold(g, it, &vacc, &s);
        if (g->scratch) {   /* split kernel: this chunk's partial, rows later */
            LLVMTypeRef at = ctype(g, s.dt);
            LLVMValueRef pv = LLVMBuildLoad2(g->B, at, s.val, "");
            LLVMBuildStore(g->B, pv, LLVMBuildGEP2(g->B, at, g->scratch, &g->slot, 1, ""));
            return;
        }
        LLVMValueRef r = LLVMBuildLoad2(g->B, s.idx ? vec(g->i64, w) : vec(ctype(g, s.dt), w), s.idx ? s.idx : s.val, "");
        if (!s.idx)
            r = conv(g, r, s.dt, (smelt_dtype)it->acc_dtype, w);
        g->phase[ph] = r;
        g->phase_w[ph++] = w;
        g->epoch++;
    }
}

static int64_t outer_items(const kir_kernel *k, int64_t tile, int64_t *ntiles)
{
    int64_t n = 1;
    *ntiles = 1;
    for (int v = 0; v < k->nvars; v++) {
        if (k->rmask >> v & 1)
            continue;
        if (v == k->vvar) {
            *ntiles = (k->size[v] + tile - 1) / tile;
            n *= *ntiles;
        } else {
            n *= k->size[v];
        }
    }
    return n;
}

/* Elements of the vectorised var per work item in outer-vector mode. */
static int64_t kernel_tile(const kir_kernel *k, int L)
{
    return k->rmask ? (int64_t)L * 4 : TILE_POINTWISE;
}

/* The launch shape of kernel k compiled with L lanes: work items, the
 * minimum chunk, and for split kernels the finish items and scratch. */
static void kernel_launch(const kir_kernel *k, int L, plan_kernel_code *code)
{
    int outer_vec = k->vvar >= 0 && !(k->rmask >> k->vvar & 1);
    int64_t tile = kernel_tile(k, L), ntiles;
    int64_t nouter = outer_items(k, tile, &ntiles);
    int64_t rn = 1;
    for (int v = 0; v < k->nvars; v++)
        if (k->rmask >> v & 1)
            rn *= k->size[v];
    int64_t per_item = (outer_vec ? tile : 1) * (rn > 0 ? rn : 1);
    code->nitems = nouter;
    code->grain = (MIN_CHUNK_ELEMS + per_item - 1) / per_item;
    code->nfinish = code->scratch_bytes = 0;
    if (k->split > 1) {
        code->nitems = nouter * k->split;
        code->grain = 1;
        code->nfinish = nouter;
        code->scratch_bytes = code->nitems * 8;
    }
}

/* Sets outer var values from item number `item`. Returns the tile number
 * (outer-vector mode) or NULL. */
static LLVMValueRef decode_item(cg *g, LLVMValueRef item, int64_t ntiles)
{
    const kir_kernel *k = g->k;
    int outer_vec = k->vvar >= 0 && !(k->rmask >> k->vvar & 1);
    LLVMValueRef rem = item, tile = NULL;
    if (outer_vec) {
        LLVMValueRef nt = pconst(g, ntiles);
        tile = LLVMBuildURem(g->B, rem, nt, "");
        rem = LLVMBuildUDiv(g->B, rem, nt, "");
    }
    for (int v = k->nvars - 1; v >= 0; v--) {
        if ((k->rmask >> v & 1) || (outer_vec && v == k->vvar))
            continue;
        LLVMValueRef sz = pconst(g, k->size[v]);
        g->var[v] = LLVMBuildURem(g->B, rem, sz, "");
        rem = LLVMBuildUDiv(g->B, rem, sz, "");
    }
    return tile;
}

static void add_str_attr(cg *g, const char *k, const char *v)
{
    LLVMAddAttributeAtIndex(g->fn, LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(g->C, k, (unsigned)strlen(k), v, (unsigned)strlen(v)));
}

/* Starts function `name` (void(void **bufs, i64 begin, i64 end)): entry
 * block for allocas and buffer loads, flag and scratch pointers. */
static void begin_fn(cg *g, const char *name)
{
    LLVMTypeRef params[3] = { g->ptr, g->i64, g->i64 };
    g->fn = LLVMAddFunction(g->M, name, LLVMFunctionType(g->vd, params, 3, 0));
    LLVMSetLinkage(g->fn, LLVMWeakODRLinkage);   /* other objects may define it too */
    char vb[16];
    snprintf(vb, sizeof vb, "%d", g->vbits);
    add_str_attr(g, "min-legal-vector-width", vb);
    add_str_attr(g, "prefer-vector-width", vb);
    add_str_attr(g, "target-cpu", g->tgt->cpu);
    add_str_attr(g, "target-features", g->tgt->features);
    g->bufs_arg = LLVMGetParam(g->fn, 0);
    g->entry = LLVMAppendBasicBlockInContext(g->C, g->fn, "entry");
    LLVMBasicBlockRef start = LLVMAppendBasicBlockInContext(g->C, g->fn, "start");
    LLVMPositionBuilderAtEnd(g->B, g->entry);
    LLVMBuildBr(g->B, start);
    LLVMPositionBuilderAtEnd(g->B, start);
    memset(g->bufptr, 0, sizeof(LLVMValueRef) * (size_t)g->p->nbufs);
    LLVMValueRef fslot = LLVMBuildGEP2(g->B, g->ptr, g->bufs_arg,
                                       (LLVMValueRef[]){ LLVMConstInt(g->i64, (unsigned long long)g->nslots, 0) }, 1, "");
    g->flag = LLVMBuildLoad2(g->B, g->ptr, fslot, "flag");
    LLVMValueRef sslot = LLVMBuildGEP2(g->B, g->ptr, g->bufs_arg,
                                       (LLVMValueRef[]){ LLVMConstInt(g->i64, (unsigned long long)g->nslots + 1, 0) }, 1, "");
    g->scratch = g->k->split > 1 ? LLVMBuildLoad2(g->B, g->ptr, sslot, "scratch") : NULL;
    g->split_lo = g->split_hi = NULL;
    g->params_ptr = NULL;
    if (g->param) {   /* in the entry block, before every size read from it */
        LLVMPositionBuilderBefore(g->B, LLVMGetBasicBlockTerminator(g->entry));
        LLVMValueRef pslot = LLVMBuildGEP2(g->B, g->ptr, g->bufs_arg,
                                           (LLVMValueRef[]){ LLVMConstInt(g->i64, (unsigned long long)g->nslots + 2, 0) }, 1, "");
        g->params_ptr = LLVMBuildLoad2(g->B, g->ptr, pslot, "params");
        LLVMPositionBuilderAtEnd(g->B, start);
    }
}

/* Split kernels: item -> (outer point, chunk); sets the chunk bounds. */
static LLVMValueRef decode_split(cg *g, LLVMValueRef item)
{
    const kir_kernel *k = g->k;
    int64_t n = k->size[k->split_var];
    int64_t c = (n + k->split - 1) / k->split;
    if (k->split_var == k->vvar)
        c = (c + 63) / 64 * 64;
    LLVMValueRef S = LLVMConstInt(g->i64, (unsigned long long)k->split, 0);
    LLVMValueRef chunk = LLVMBuildURem(g->B, item, S, "");
    LLVMValueRef cc = pconst(g, c);
    g->split_lo = LLVMBuildMul(g->B, chunk, cc, "");
    LLVMValueRef hi = LLVMBuildAdd(g->B, g->split_lo, cc, "");
    LLVMValueRef nn = pconst(g, n);
    g->split_hi = sel(g, icmp(g, LLVMIntSLT, hi, nn), hi, nn);
    g->split_lo = sel(g, icmp(g, LLVMIntSLT, g->split_lo, nn), g->split_lo, nn);
    g->slot = item;
    return LLVMBuildUDiv(g->B, item, S, "");
}

/* Split kernels: combine the partials of each outer point in chunk order,
 * then run the ROWSTOREs. */
static void emit_finish_fn(cg *g, const char *name)
{
    const kir_kernel *k = g->k;
    begin_fn(g, name);
    g->rc_expr = -1;
    LLVMValueRef scratch = g->scratch;
    g->scratch = NULL;
    loop items;
    LLVMValueRef item = loop_begin(g, &items, LLVMGetParam(g->fn, 1), LLVMGetParam(g->fn, 2), 1);
    int64_t nt;
    (void)nt;
    decode_item(g, item, 1);
    const kitem *red = NULL;
    for (int i = 0; i < k->nitems && !red; i++)
        if (k->items[i].kind == KI_REDUCE)
            red = &k->items[i];
    acc s;
    acc_init(g, &s, red, 1);
    LLVMTypeRef at = ctype(g, s.dt);
    /* float sums combine their partials in f64 */
    smelt_dtype cdt = red->rop == SMELT_OP_SUM && s.dt == SMELT_F32 ? SMELT_F64 : s.dt;
    LLVMValueRef cacc = entry_alloca(g, ctype(g, cdt));
    LLVMBuildStore(g->B, conv(g, LLVMBuildLoad2(g->B, at, s.val, ""), s.dt, cdt, 1), cacc);
    loop l;
    LLVMValueRef c = loop_begin(g, &l, LLVMConstInt(g->i64, 0, 0), LLVMConstInt(g->i64, (unsigned long long)k->split, 0), 1);
    LLVMValueRef idx = LLVMBuildAdd(g->B, LLVMBuildMul(g->B, item, LLVMConstInt(g->i64, (unsigned long long)k->split, 0), ""), c, "");
    LLVMValueRef pv = LLVMBuildLoad2(g->B, at, LLVMBuildGEP2(g->B, at, scratch, &idx, 1, ""), "");
    LLVMValueRef cur = LLVMBuildLoad2(g->B, ctype(g, cdt), cacc, "");
    LLVMBuildStore(g->B, red_combine(g, (smelt_op)red->rop, cdt, cur, conv(g, pv, s.dt, cdt, 1)), cacc);
    loop_end(g, &l);
    g->phase[0] = conv(g, LLVMBuildLoad2(g->B, ctype(g, cdt), cacc, ""), cdt, (smelt_dtype)red->acc_dtype, 1);
    g->phase_w[0] = 1;
    g->epoch++;
    for (int i = 0; i < k->nitems; i++)
        if (k->items[i].kind == KI_ROWSTORE)
            body_store(g, &k->items[i], NULL, 1);
    loop_end(g, &items);
    LLVMBuildRetVoid(g->B);
}

static void emit_kernel_fn(cg *g, const char *name)
{
    const kir_kernel *k = g->k;
    begin_fn(g, name);
    plan_row_cache(g);
    int outer_vec = k->vvar >= 0 && !(k->rmask >> k->vvar & 1);
    int64_t tile = kernel_tile(k, g->L);
    int64_t ntiles;
    outer_items(k, tile, &ntiles);
    loop items;
    LLVMValueRef item = loop_begin(g, &items, LLVMGetParam(g->fn, 1), LLVMGetParam(g->fn, 2), 1);
    if (k->split > 1)
        item = decode_split(g, item);
    LLVMValueRef t = decode_item(g, item, ntiles);
    if (!outer_vec) {
        emit_point(g, 1);
    } else {
        LLVMValueRef size = pconst(g, k->size[k->vvar]);
        LLVMValueRef vs = LLVMBuildMul(g->B, t, LLVMConstInt(g->i64, (unsigned long long)tile, 0), "");
        LLVMValueRef ve = LLVMBuildAdd(g->B, vs, LLVMConstInt(g->i64, (unsigned long long)tile, 0), "");
        ve = sel(g, icmp(g, LLVMIntSLT, ve, size), ve, size);
        loop vl;
        g->var[k->vvar] = loop_begin(g, &vl, vs, ve, g->L);
        emit_point(g, g->L);
        loop_end(g, &vl);
        LLVMValueRef cnt = LLVMBuildSub(g->B, ve, vs, "");
        LLVMValueRef Lc = LLVMConstInt(g->i64, (unsigned long long)g->L, 0);
        LLVMValueRef tail_start = LLVMBuildAdd(g->B, vs, LLVMBuildMul(g->B, LLVMBuildUDiv(g->B, cnt, Lc, ""), Lc, ""), "");
        loop tl;
        g->var[k->vvar] = loop_begin(g, &tl, tail_start, ve, 1);
        emit_point(g, 1);
        loop_end(g, &tl);
    }
    loop_end(g, &items);
    LLVMBuildRetVoid(g->B);
}

/* ---------- content addressing ---------- */

/* The canonical byte form of a kernel: its loop nest, items and expression
 * DAG with buffers renumbered by first use (each with its dtype) and shared
 * subexpressions written once and referenced after. Kernels with equal keys
 * compile to the same code; the renumbering gives the kernel's slot table. */
typedef struct kkey {
    uint8_t *b;
    size_t n, cap;
    int32_t *ex_id, *ix_id;   /* local numbering of visited expressions, 0 = not yet */
    int32_t nex_seen, nix_seen;
    int32_t *slot_of, *slots;
    int32_t nslots;
} kkey;

static void kk_put(kkey *k, const void *p, size_t n)
{
    if (k->n + n > k->cap) {
        k->cap = (k->cap + n) * 2;
        if (!(k->b = realloc(k->b, k->cap)))
            abort();
    }
    memcpy(k->b + k->n, p, n);
    k->n += n;
}

static void kk_i64(kkey *k, int64_t v) { kk_put(k, &v, sizeof v); }

static void kk_slot(kkey *k, const smelt_plan *p, int32_t buf)
{
    if (k->slot_of[buf] < 0) {
        k->slots[k->nslots] = buf;
        k->slot_of[buf] = k->nslots++;
    }
    kk_i64(k, k->slot_of[buf]);
    kk_i64(k, p->bufs[buf].dtype);
}

static void kk_ix(kkey *k, const kir_pool *P, int32_t e)
{
    if (k->ix_id[e]) {
        kk_i64(k, -k->ix_id[e]);
        return;
    }
    k->ix_id[e] = ++k->nix_seen;
    const kix *x = &P->ix[e];
    int64_t h[4] = { x->op, x->c, x->lo, x->hi };
    kk_put(k, h, sizeof h);
    if (x->a >= 0)
        kk_ix(k, P, x->a);
    if (x->b >= 0)
        kk_ix(k, P, x->b);
}

static void kk_ex(kkey *k, const smelt_plan *p, int32_t e)
{
    if (k->ex_id[e]) {
        kk_i64(k, -k->ex_id[e]);
        return;
    }
    k->ex_id[e] = ++k->nex_seen;
    const kexpr *x = &p->pool.ex[e];
    int64_t fb;
    memcpy(&fb, &x->f, sizeof fb);
    int64_t h[7] = { x->op, x->dtype, x->cdtype, x->gop, x->phase, fb, x->i };
    kk_put(k, h, sizeof h);
    if (x->gnode >= 0 && x->gop == SMELT_OP_CLAMP)   /* clamp bounds: the attrs, not the node number */
        kk_put(k, &p->graph->nodes[x->gnode].a.clamp, sizeof p->graph->nodes[x->gnode].a.clamp);
    if (x->gnode >= 0 && x->gop == SMELT_OP_CHECKIDX) {   /* the bound, not the node number */
        kk_i64(k, p->graph->nodes[x->gnode].a.gather.n);
        kk_i64(k, p->graph->nodes[x->gnode].a.gather.wrap);
    }
    if (x->op == KE_LOAD || x->op == KE_GATHER)
        kk_slot(k, p, x->buf);
    if (x->ix >= 0)
        kk_ix(k, &p->pool, x->ix);
    for (int s = 0; s < 3; s++)
        if (x->src[s] >= 0)
            kk_ex(k, p, x->src[s]);
}

/* Fills k (its arrays sized for p) with the key of kernel kn. */
static void kernel_key(kkey *k, const smelt_plan *p, const kir_kernel *kn)
{
    k->n = 0;
    k->nslots = k->nex_seen = k->nix_seen = 0;
    memset(k->ex_id, 0, sizeof(int32_t) * (size_t)p->pool.nex);
    memset(k->ix_id, 0, sizeof(int32_t) * (size_t)p->pool.nix);
    for (int32_t b = 0; b < p->nbufs; b++)
        k->slot_of[b] = -1;
    int64_t h[6] = { kn->nvars, kn->rmask, kn->vvar, kn->split, kn->split_var, kn->nitems };
    kk_put(k, h, sizeof h);
    kk_put(k, kn->size, sizeof(int64_t) * (size_t)kn->nvars);
    for (int i = 0; i < kn->nitems; i++) {
        const kitem *it = &kn->items[i];
        int64_t ih[3] = { it->kind, it->rop, it->acc_dtype };
        kk_put(k, ih, sizeof ih);
        kk_ex(k, p, it->value);
        if (it->kind != KI_REDUCE) {
            kk_slot(k, p, it->buf);
            kk_ix(k, &p->pool, it->ix);
        }
    }
}

static uint64_t key_hash(const uint8_t *b, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* ---------- module ---------- */

static void cg_init(cg *g, smelt_plan *p, LLVMContextRef C, const cpu_target *tgt, int vbits)
{
    memset(g, 0, sizeof *g);
    g->p = p;
    g->C = C;
    g->tgt = tgt;
    g->vbits = vbits;
    g->L = vbits / 32;
    g->B = LLVMCreateBuilderInContext(C);
    g->i1 = LLVMInt1TypeInContext(C);
    g->i8 = LLVMInt8TypeInContext(C);
    g->i16 = LLVMInt16TypeInContext(C);
    g->i32 = LLVMInt32TypeInContext(C);
    g->i64 = LLVMInt64TypeInContext(C);
    g->f16 = LLVMHalfTypeInContext(C);
    g->f32 = LLVMFloatTypeInContext(C);
    g->f64 = LLVMDoubleTypeInContext(C);
    g->ptr = LLVMPointerTypeInContext(C, 0);
    g->vd = LLVMVoidTypeInContext(C);
    g->bufptr = calloc((size_t)p->nbufs + 1, sizeof(LLVMValueRef));
}

/* What cg_init and code generation allocated (not the module or context). */
static void cg_free(cg *g)
{
    free(g->params);
    LLVMDisposeBuilder(g->B);
    for (int i = 0; i < 2; i++) {
        free(g->memo[i]);
        free(g->memo_ep[i]);
    }
    free(g->bufptr);
}

static void cg_alloc_memo(cg *g)
{
    for (int i = 0; i < 2; i++) {
        free(g->memo[i]);
        free(g->memo_ep[i]);
        /* room for expressions added while generating (red_flat) */
        size_t n = (size_t)g->P->nex + 1;
        g->memo[i] = calloc(n, sizeof(LLVMValueRef));
        g->memo_ep[i] = calloc(n, sizeof(uint32_t));
        if (!g->memo[i] || !g->memo_ep[i])
            abort();
    }
    g->epoch = 1;
}

static char *emit_asm(LLVMTargetMachineRef tm, LLVMModuleRef M)
{
    LLVMMemoryBufferRef mb;
    char *msg = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, M, LLVMAssemblyFile, &msg, &mb)) {
        LLVMDisposeMessage(msg);
        return NULL;
    }
    size_t n = LLVMGetBufferSize(mb);
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, LLVMGetBufferStart(mb), n);
        s[n] = 0;
    }
    LLVMDisposeMemoryBuffer(mb);
    return s;
}

static int optimise(LLVMModuleRef M, LLVMTargetMachineRef tm, int opt, char *err, size_t errlen)
{
    char pipeline[32];
    snprintf(pipeline, sizeof pipeline, "default<O%d>", opt < 0 ? 2 : opt > 3 ? 3 : opt);
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMErrorRef e = LLVMRunPasses(M, pipeline, tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (e) {
        char *m = LLVMGetErrorMessage(e);
        snprintf(err, errlen, "LLVM passes: %s", m);
        LLVMDisposeErrorMessage(m);
        return -1;
    }
    return 0;
}

/* ---------- compiling a plan ---------- */

static double now_ms(void) { return (double)plan_now_ns() / 1e6; }

#define KERNEL_CODE_VERSION 6   /* bump when the generated code changes */

/* One batch of new kernels compiled to one object in its own LLVM context
 * (batches run in parallel on the thread pool). */
typedef struct cg_job {
    smelt_plan *p;
    const cpu_target *tgt;
    int vbits, opt, keep_ir, param;
    int32_t *kernels;          /* plan kernel numbers */
    int nk;
    const char (*names)[40];   /* per plan kernel: its function's name */
    LLVMMemoryBufferRef obj;
    char *ir, *asm_text;
    int64_t cost;
    int rc;
    char err[256];
} cg_job;

/* What codegen keeps per plan (p->backend_state): the units whose code
 * the plan runs, one reference each, and each kernel's function name. */
typedef struct cg_state {
    cpu_obj **objs;
    int n, cap;
    char (*names)[40];
    int32_t nnames;
} cg_state;

static void state_hold(cg_state *st, cpu_obj *o)
{
    if (st->n == st->cap) {
        st->cap = st->cap ? 2 * st->cap : 8;
        st->objs = realloc(st->objs, sizeof(cpu_obj *) * (size_t)st->cap);
        if (!st->objs)
            abort();
    }
    st->objs[st->n++] = o;
}

/* Sets the module's target from tm. */
static void module_target(LLVMModuleRef M, LLVMTargetMachineRef tm)
{
    LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
    char *dl = LLVMCopyStringRepOfTargetData(td);
    LLVMSetDataLayout(M, dl);
    LLVMDisposeMessage(dl);
    LLVMDisposeTargetData(td);
    char *triple = LLVMGetTargetMachineTriple(tm);
    LLVMSetTarget(M, triple);
    LLVMDisposeMessage(triple);
}

/* Generates, optimises and emits the job's kernels as one object. */
static void run_job(cg_job *j)
{
    smelt_plan *p = j->p;
    LLVMContextRef C = LLVMContextCreate();
    LLVMTargetMachineRef tm = cpu_target_machine(j->tgt, j->opt);
    kir_pool pool;
    kir_pool_copy(&pool, &p->pool);
    cg g;
    cg_init(&g, p, C, j->tgt, j->vbits);
    g.P = &pool;
    g.param = j->param;
    g.M = LLVMModuleCreateWithNameInContext("smelt", C);
    int32_t *slot_of = malloc(sizeof(int32_t) * (size_t)(p->nbufs + 1));
    if (!slot_of)
        abort();
    j->rc = -1;
    if (!tm) {
        snprintf(j->err, sizeof j->err, "LLVM: no target machine for CPU %s", j->tgt->cpu);
        goto out;
    }
    module_target(g.M, tm);
    for (int t = 0; t < j->nk; t++) {
        int32_t i = j->kernels[t];
        plan_kernel_code *c = &p->code[i];
        for (int32_t b = 0; b < p->nbufs; b++)
            slot_of[b] = -1;
        for (int32_t s = 0; s < c->nslots; s++)
            slot_of[c->slots[s]] = s;
        char fname[64];
        g.k = &p->kernels[i];
        g.slot_of = slot_of;
        g.nslots = c->nslots;
        cg_alloc_memo(&g);
        g.nparams = 0;   /* (parametric: the scan pass took the values) */
        emit_kernel_fn(&g, j->names[i]);
        if (g.k->split > 1) {
            snprintf(fname, sizeof fname, "%s_finish", j->names[i]);
            emit_finish_fn(&g, fname);
        }
        if (g.param && (g.nparams != c->nparams ||
                        (g.nparams && memcmp(g.params, c->params, sizeof(int64_t) * (size_t)g.nparams)))) {
            snprintf(j->err, sizeof j->err, "internal error: parametric sizes of kernel %d differ between passes", (int)i);
            goto out;
        }
    }
    char *verr = NULL;
    if (LLVMVerifyModule(g.M, LLVMReturnStatusAction, &verr)) {
        snprintf(j->err, sizeof j->err, "internal error: invalid LLVM IR: %.200s", verr);
        LLVMDisposeMessage(verr);
        goto out;
    }
    LLVMDisposeMessage(verr);
    if (optimise(g.M, tm, j->opt, j->err, sizeof j->err))
        goto out;
    if (j->keep_ir) {
        j->ir = LLVMPrintModuleToString(g.M);
        j->asm_text = emit_asm(tm, g.M);
    }
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, g.M, LLVMObjectFile, &verr, &j->obj)) {
        snprintf(j->err, sizeof j->err, "LLVM object emission: %.200s", verr ? verr : "failed");
        LLVMDisposeMessage(verr);
        j->obj = NULL;
        goto out;
    }
    j->rc = 0;
out:
    free(slot_of);
    LLVMDisposeModule(g.M);
    if (tm)
        LLVMDisposeTargetMachine(tm);
    cg_free(&g);
    kir_pool_free(&pool);
    LLVMContextDispose(C);
}

static void run_jobs(void *ctx, int64_t begin, int64_t end)
{
    cg_job *jobs = ctx;
    for (int64_t t = begin; t < end; t++)
        run_job(&jobs[t]);
}

/* A second, independent 64-bit hash (names are 128 bits of the key). */
static uint64_t key_hash2(const uint8_t *b, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull + (h >> 29);
    return h;
}

/* Canonical keys of every kernel (with the code options appended), their
 * slot tables, names, and kernels identical to an earlier one. */
static void plan_keys(smelt_plan *p, const cpu_target *t, int vbits, int opt, uint8_t **keys, size_t *klen,
                      uint64_t *khash, char (*names)[40])
{
    kkey kk = { 0 };
    kk.slot_of = malloc(sizeof(int32_t) * (size_t)(p->nbufs + 1));
    kk.ex_id = malloc(sizeof(int32_t) * (size_t)(p->pool.nex + 1));
    kk.ix_id = malloc(sizeof(int32_t) * (size_t)(p->pool.nix + 1));
    if (!kk.slot_of || !kk.ex_id || !kk.ix_id)
        abort();
    int64_t opts[5] = { KERNEL_CODE_VERSION, vbits, opt,
                        (int64_t)key_hash2((const uint8_t *)t->cpu, strlen(t->cpu)),
                        (int64_t)key_hash2((const uint8_t *)t->features, strlen(t->features)) };
    for (int32_t i = 0; i < p->nkernels; i++) {
        plan_kernel_code *c = &p->code[i];
        if (!(c->slots = malloc(sizeof(int32_t) * (size_t)(p->nbufs + 1))))
            abort();
        kk.slots = c->slots;
        kernel_key(&kk, p, &p->kernels[i]);
        kk_put(&kk, opts, sizeof opts);
        c->nslots = kk.nslots;
        if (!(keys[i] = malloc(kk.n)))
            abort();
        memcpy(keys[i], kk.b, kk.n);
        klen[i] = kk.n;
        khash[i] = key_hash(kk.b, kk.n);
        snprintf(names[i], sizeof names[i], "smelt_%016llx%016llx", (unsigned long long)khash[i],
                 (unsigned long long)key_hash2(kk.b, kk.n));
        c->same_as = -1;
        for (int32_t j = 0; j < i && c->same_as < 0; j++)
            if (p->code[j].same_as < 0 && khash[j] == khash[i] && klen[j] == klen[i] &&
                !memcmp(keys[j], keys[i], klen[i]))
                c->same_as = j;
    }
    free(kk.b);
    free(kk.ex_id);
    free(kk.ix_id);
    free(kk.slot_of);
}

/* Kernel i's entry points from the registry (its unit held by the plan):
 * 1, or 0 if its name is not registered. Runs under the JIT lock. */
static int take_code_locked(smelt_plan *p, cg_state *st, int32_t i)
{
    void *fn, *finish;
    cpu_obj *held;
    if (!cpu_kcache_find_locked(st->names[i], &fn, &finish, &held))
        return 0;
    p->code[i].fn = (plan_kernel_fn)fn;
    p->code[i].finish = (plan_kernel_fn)finish;
    state_hold(st, held);
    return 1;
}

/* Splits the kernels still to compile (todo[0..n)) into at most nt jobs
 * of similar size (key length as the cost), largest first. */
static int make_jobs(cg_job *jobs, int nt, const int32_t *todo, int n, const size_t *klen)
{
    int nj = n < nt ? n : nt;
    for (int a = 0; a < n; a++) {
        int32_t i = todo[a];
        int best = 0;
        for (int t = 1; t < nj; t++)
            if (jobs[t].cost < jobs[best].cost)
                best = t;
        jobs[best].kernels[jobs[best].nk++] = i;
        jobs[best].cost += (int64_t)klen[i];
    }
    return nj;
}

/* Adds each job's object as a unit and takes its kernels' code (from the
 * registry: a kernel another compile registered meanwhile keeps that
 * definition). Runs under the JIT lock. */
static int load_jobs_locked(smelt_plan *p, cg_state *st, cg_job *jobs, int nj, char *err, size_t errlen)
{
    for (int t = 0; t < nj; t++) {
        ind_blob b = { (uint8_t *)LLVMGetBufferStart(jobs[t].obj), LLVMGetBufferSize(jobs[t].obj) };
        cpu_obj *o = cpu_jit_add_objects_locked(&b, 1, err, errlen);
        if (!o)
            return -1;
        state_hold(st, o);
        for (int a = 0; a < jobs[t].nk; a++)
            if (!take_code_locked(p, st, jobs[t].kernels[a]))
                return snprintf(err, errlen, "internal error: %s missing from its object",
                                st->names[jobs[t].kernels[a]]), -1;
    }
    return 0;
}

/* Concatenates the jobs' texts (which = 0: IR, 1: assembly). */
static char *join_texts(cg_job *jobs, int nj, int which)
{
    size_t n = 1;
    for (int t = 0; t < nj; t++) {
        const char *s = which ? jobs[t].asm_text : jobs[t].ir;
        n += s ? strlen(s) : 0;
    }
    char *out = malloc(n);
    if (!out)
        return NULL;
    out[0] = 0;
    for (int t = 0, o = 0; t < nj; t++) {
        const char *s = which ? jobs[t].asm_text : jobs[t].ir;
        if (s) {
            memcpy(out + o, s, strlen(s) + 1);
            o += (int)strlen(s);
        }
    }
    return out;
}

/* Vector width (at most t's) and optimisation level for opts o. */
static void code_opts(const smelt_compile_opts *o, const cpu_target *t, int *vbits, int *opt)
{
    *vbits = o && o->vector_bits > 0 && o->vector_bits <= t->vbits ? o->vector_bits : t->vbits;
    if (*vbits < 128)
        *vbits = 128;
    *opt = o ? o->opt_level : 2;
}

/* Parametric sizes for opts o (or everywhere with SMELT_PARAM_SIZES=1). */
static int param_sizes_on(const smelt_compile_opts *o)
{
    static int env = -1;
    if (env < 0) {
        const char *e = getenv("SMELT_PARAM_SIZES");
        env = e && e[0] == '1';
    }
    return env || (o && o->param_sizes);
}

char *cpu_code_key(const smelt_compile_opts *o, char *err, size_t errlen)
{
    int vbits, opt;
    if (cpu_jit_ready(err, errlen))
        return NULL;
    const cpu_target *t = cpu_target_process();
    code_opts(o, t, &vbits, &opt);
    const char *feat = t->features, *build = cpu_build_id();
    size_t n = strlen(feat) + strlen(build) + 256;
    char *k = malloc(n);
    if (!k)
        abort();
    snprintf(k, n, "smelt-code v%d %s llvm %s cpu %s vbits %d O%d%s %s", KERNEL_CODE_VERSION, build,
             LLVM_VERSION_STRING, t->cpu, vbits, opt, param_sizes_on(o) ? " param" : "", feat);
    return k;
}

/* What one compile generates code for: the target, vector width,
 * optimisation level, whether IR/assembly text is kept and whether the
 * code is loaded (not for a target that only reads code). */
typedef struct cg_opts {
    const cpu_target *tgt;
    int vbits, opt, keep_ir, load, param;
} cg_opts;

/* Generates the todo kernels with LLVM (jobs in parallel) and, with
 * co->load, loads them. */
static int generate(smelt_plan *p, cg_state *st, const cg_opts *co, const int32_t *todo, int ntodo,
                    const size_t *klen, char *err, size_t errlen)
{
    int keep_ir = co->keep_ir;
    int nt = kern_get_num_threads(), nj, rc = 0;
    nt = keep_ir ? 1 : nt < 1 ? 1 : nt > 8 ? 8 : nt;
    cg_job jobs[8];
    memset(jobs, 0, sizeof jobs);
    for (int t = 0; t < nt; t++) {
        jobs[t] = (cg_job){ .p = p, .tgt = co->tgt, .vbits = co->vbits, .opt = co->opt, .keep_ir = keep_ir,
                            .param = co->param, .names = (const char (*)[40])st->names };
        if (!(jobs[t].kernels = calloc((size_t)ntodo + 1, sizeof(int32_t))))
            abort();
    }
    double t0 = now_ms();
    nj = make_jobs(jobs, nt, todo, ntodo, klen);
    kern_parallel_for(nj, 1, run_jobs, jobs);
    for (int t = 0; t < nj && !rc; t++)
        if (jobs[t].rc)
            rc = -1, snprintf(err, errlen, "%s", jobs[t].err);
    p->times.codegen_ms = now_ms() - t0;
    t0 = now_ms();
    if (!rc && co->load) {
        cpu_jit_lock();
        rc = load_jobs_locked(p, st, jobs, nj, err, errlen);
        cpu_jit_unlock();
    }
    p->times.load_ms += now_ms() - t0;
    if (!rc && keep_ir) {
        p->text_ir = join_texts(jobs, nj, 0);
        p->text_asm = join_texts(jobs, nj, 1);
    }
    for (int t = 0; t < nt; t++) {
        if (jobs[t].obj)
            LLVMDisposeMemoryBuffer(jobs[t].obj);
        LLVMDisposeMessage(jobs[t].ir);
        free(jobs[t].asm_text);
        free(jobs[t].kernels);
    }
    return rc;
}

/* Parametric mode: each kernel's code name, the hash of its IR (which
 * reads every size from the parameter table, so kernels that differ only
 * in sizes get one name) and the code options, and its table of sizes
 * (p->code[i].params), from a pass that generates the IR and drops it.
 * A size the IR still holds as a constant (a decision made from it: a
 * blocked loop, a stack row's length) is in the text, so code is only
 * shared where it is right for both. */
static void param_scan(smelt_plan *p, const cg_opts *co, char (*names)[40])
{
    LLVMContextRef C = LLVMContextCreate();
    kir_pool pool;
    kir_pool_copy(&pool, &p->pool);
    cg g;
    cg_init(&g, p, C, co->tgt, co->vbits);
    g.P = &pool;
    g.param = 1;
    int32_t *slot_of = malloc(sizeof(int32_t) * (size_t)(p->nbufs + 1));
    if (!slot_of)
        abort();
    char opts[256];
    snprintf(opts, sizeof opts, "parametric v%d vbits %d O%d %s %s", KERNEL_CODE_VERSION, co->vbits, co->opt,
             co->tgt->cpu, co->tgt->features);
    for (int32_t i = 0; i < p->nkernels; i++) {
        plan_kernel_code *c = &p->code[i];
        if (c->same_as >= 0)
            continue;
        g.M = LLVMModuleCreateWithNameInContext("scan", C);
        for (int32_t b = 0; b < p->nbufs; b++)
            slot_of[b] = -1;
        for (int32_t k = 0; k < c->nslots; k++)
            slot_of[c->slots[k]] = k;
        g.k = &p->kernels[i];
        g.slot_of = slot_of;
        g.nslots = c->nslots;
        g.nparams = 0;
        cg_alloc_memo(&g);
        emit_kernel_fn(&g, "k");
        if (g.k->split > 1)
            emit_finish_fn(&g, "k_finish");
        uint64_t h1 = key_hash((const uint8_t *)opts, strlen(opts)), h2 = key_hash2((const uint8_t *)opts, strlen(opts));
        for (LLVMValueRef f = LLVMGetFirstFunction(g.M); f; f = LLVMGetNextFunction(f)) {
            if (LLVMIsDeclaration(f))
                continue;
            char *txt = LLVMPrintValueToString(f);
            size_t n = strlen(txt);
            h1 = h1 * 31 + key_hash((const uint8_t *)txt, n);
            h2 = h2 * 37 + key_hash2((const uint8_t *)txt, n);
            LLVMDisposeMessage(txt);
        }
        snprintf(names[i], sizeof names[i], "smelt_%016llx%016llx", (unsigned long long)h1, (unsigned long long)h2);
        c->params = malloc(sizeof(int64_t) * (size_t)(g.nparams + 1));
        if (!c->params)
            abort();
        memcpy(c->params, g.params, sizeof(int64_t) * (size_t)g.nparams);
        c->nparams = g.nparams;
        LLVMDisposeModule(g.M);
    }
    for (int32_t i = 0; i < p->nkernels; i++) {   /* identical kernels: identical sizes */
        plan_kernel_code *c = &p->code[i];
        if (c->same_as < 0)
            continue;
        const plan_kernel_code *d = &p->code[c->same_as];
        memcpy(names[i], names[c->same_as], sizeof names[i]);
        if (!(c->params = malloc(sizeof(int64_t) * (size_t)(d->nparams + 1))))
            abort();
        memcpy(c->params, d->params, sizeof(int64_t) * (size_t)d->nparams);
        c->nparams = d->nparams;
    }
    free(slot_of);
    cg_free(&g);
    kir_pool_free(&pool);
    LLVMContextDispose(C);
}

/* Kernels identical to an earlier one run its code with their own slots. */
static void copy_same(smelt_plan *p)
{
    for (int32_t i = 0; i < p->nkernels; i++)
        if (p->code[i].same_as >= 0) {
            p->code[i].fn = p->code[p->code[i].same_as].fn;
            p->code[i].finish = p->code[p->code[i].same_as].finish;
        }
}

/* A new cg_state for p with room for its kernels' names. */
static cg_state *state_new(smelt_plan *p)
{
    cg_state *st = calloc(1, sizeof *st);
    if (!st || !(st->names = calloc((size_t)p->nkernels + 1, sizeof *st->names)))
        abort();
    st->nnames = p->nkernels;
    p->backend_state = st;
    return st;
}

/* The code options of o: the process target, or with o->cpu or
 * o->cpu_features the target they name, whose code is only read (kept as
 * text, never loaded: the host may not run it); *own holds that target.
 * 0, or -1 with err. */
static int cg_opts_of(const smelt_compile_opts *o, cg_opts *co, cpu_target *own, char *err, size_t errlen)
{
    int code_only = o && (o->cpu || o->cpu_features);
    if (code_only && cpu_target_for_code(o->cpu, o->cpu_features, own, err, errlen))
        return -1;
    co->tgt = code_only ? own : cpu_target_process();
    code_opts(o, co->tgt, &co->vbits, &co->opt);
    co->keep_ir = (o && o->keep_ir) || code_only;
    co->load = !code_only;
    co->param = param_sizes_on(o);
    return 0;
}

int cpu_codegen(smelt_plan *p, const smelt_compile_opts *o, char *err, size_t errlen)
{
    cg_opts co;
    cpu_target own = { 0 };
    if (cpu_jit_ready(err, errlen) || cg_opts_of(o, &co, &own, err, errlen))
        return -1;
    int nk = p->nkernels;
    p->code_only = !co.load;
    p->code = calloc((size_t)nk + 1, sizeof(plan_kernel_code));
    uint8_t **keys = calloc((size_t)nk + 1, sizeof(uint8_t *));
    size_t *klen = calloc((size_t)nk + 1, sizeof(size_t));
    uint64_t *khash = calloc((size_t)nk + 1, sizeof(uint64_t));
    int32_t *todo = calloc((size_t)nk + 1, sizeof(int32_t)), ntodo = 0;
    if (!p->code || !keys || !klen || !khash || !todo)
        abort();
    cg_state *st = state_new(p);
    plan_keys(p, co.tgt, co.vbits, co.opt, keys, klen, khash, st->names);
    for (int32_t i = 0; i < nk; i++)
        kernel_launch(&p->kernels[i], co.vbits / 32, &p->code[i]);
    double t0 = now_ms();
    int32_t *twin = calloc((size_t)nk + 1, sizeof(int32_t));   /* parametric: an earlier kernel with its code */
    if (!twin)
        abort();
    for (int32_t i = 0; i < nk; i++)
        twin[i] = -1;
    if (co.param) {
        param_scan(p, &co, st->names);
        for (int32_t i = 0; i < nk; i++)
            for (int32_t j = 0; j < i && p->code[i].same_as < 0 && twin[i] < 0; j++)
                if (p->code[j].same_as < 0 && twin[j] < 0 && !strcmp(st->names[i], st->names[j]))
                    twin[i] = j;
    }
    /* registry hits (never when the code text is wanted: it is generated) */
    cpu_jit_lock();
    for (int32_t i = 0; i < nk; i++)
        if (p->code[i].same_as < 0 && twin[i] < 0 && (co.keep_ir || !take_code_locked(p, st, i)))
            todo[ntodo++] = i;
    cpu_jit_unlock();
    p->times.load_ms = now_ms() - t0;
    p->ngenerated = p->times.generated = ntodo;
    int rc = ntodo ? generate(p, st, &co, todo, ntodo, klen, err, errlen) : 0;
    for (int32_t i = 0; i < nk; i++)   /* one function, each kernel its own sizes */
        if (twin[i] >= 0) {
            p->code[i].fn = p->code[twin[i]].fn;
            p->code[i].finish = p->code[twin[i]].finish;
        }
    free(twin);
    copy_same(p);
    for (int32_t i = 0; i < nk; i++)
        free(keys[i]);
    free(keys);
    free(klen);
    free(khash);
    free(todo);
    cpu_target_free(&own);
    return rc;
}

int cpu_code_export(const smelt_plan *p, ind_blob **out)
{
    const cg_state *st = p->backend_state;
    int n = 1;
    for (int i = 0; i < st->n; i++) {
        const ind_blob *b;
        n += cpu_obj_blobs(st->objs[i], &b);
    }
    ind_blob *v = calloc((size_t)n, sizeof *v);
    if (!v)
        return -1;
    v[0].data = (uint8_t *)st->names;
    v[0].len = sizeof *st->names * (size_t)st->nnames;
    n = 1;
    for (int i = 0; i < st->n; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++)
            dup |= st->objs[j] == st->objs[i];
        const ind_blob *b;
        int m = dup ? 0 : cpu_obj_blobs(st->objs[i], &b);
        for (int k = 0; k < m; k++)
            v[n++] = b[k];
    }
    *out = v;
    return n;
}

/* Reads the kernel names of blob `names` into st; -1 if malformed. */
static int read_names(cg_state *st, const ind_blob *names)
{
    if (names->len != sizeof *st->names * (size_t)st->nnames)
        return -1;
    memcpy(st->names, names->data, names->len);
    for (int32_t i = 0; i < st->nnames; i++)
        if (st->names[i][39] != 0)
            return -1;
    return 0;
}

int cpu_code_import(smelt_plan *p, const ind_blob *blobs, int nblobs, char *err, size_t errlen)
{
    if (cpu_jit_ready(err, errlen))
        return -1;
    cg_state *st = state_new(p);
    const ind_blob *objs = blobs + 1;
    int nobjs = nblobs - 1;
    if (nblobs < 1 || read_names(st, &blobs[0]))
        return snprintf(err, errlen, "malformed kernel names"), -1;
    int rc = 0, added = 0;
    cpu_jit_lock();
    for (int32_t i = 0; i < p->nkernels && !rc; i++) {
        if (p->code[i].same_as >= 0 || take_code_locked(p, st, i))
            continue;
        if (!added) {   /* the first kernel no live unit provides: add the entry's objects */
            cpu_obj *o = cpu_jit_add_objects_locked(objs, nobjs, err, errlen);
            added = 1;
            if (!o) {
                rc = -1;
                break;
            }
            state_hold(st, o);
            if (take_code_locked(p, st, i))
                continue;
        }
        snprintf(err, errlen, "%s is not in the cached objects", st->names[i]);
        rc = -1;
    }
    cpu_jit_unlock();
    copy_same(p);
    return rc;
}

int64_t cpu_code_bytes(const smelt_plan *p)
{
    const cg_state *st = p->backend_state;
    int64_t n = 0;
    for (int i = 0; st && i < st->n; i++) {
        const ind_blob *b;
        int nb = cpu_obj_blobs(st->objs[i], &b);
        for (int k = 0; k < nb; k++)
            n += (int64_t)b[k].len;
    }
    return n;
}

void cpu_release(smelt_plan *p)
{
    cg_state *st = p->backend_state;
    for (int i = 0; st && i < st->n; i++)
        cpu_obj_release(st->objs[i]);
    if (st) {
        free(st->objs);
        free(st->names);
    }
    free(st);
    p->backend_state = NULL;
}
