/* codegen.c — kir kernels to CUDA C (one translation unit per plan),
 * compiled by NVRTC (kernels/nvrtc.c).
 *
 * Entry: cuda_codegen_source(plan). Kernel i is `extern "C" __global__ void
 * k<i>(...)` over the kernel's slots (typed pointers, first-use order),
 * then the run's int error flag; a split kernel also takes its partials
 * and has a finish `f<i>`. The work decomposition is the SPIR-V back
 * end's (spirv/codegen.c): a thread per outer point for pointwise kernels
 * and short rows, a block per row (shared-memory tree between
 * __syncthreads) for long rows, split reductions as partials + finish.
 * Values as the CPU back end computes them: f16/bf16 as float (f16
 * through PTX cvt, round to nearest even; bf16 by bit operations), bool
 * stored as a byte, torch's integer division, shifts and powers,
 * NaN-propagating max/min, first-index argmax ties, CUDA's math library
 * for transcendentals. Each value is a named local (v<n>); loop bounds
 * scope them, so values are reused only in the scope that made them.
 */
#include "cuda.h"
#include "../kix.h"

#include <math.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PHASE 64

typedef cuda_text sb;


typedef struct cg {
    sb out;
    const smelt_plan *p;
    const kir_pool *P;
    const kir_kernel *k;
    int nv;                     /* values named so far */
    int *memo, *memo_ep, epoch;
    int *arg;                   /* plan buffer -> its parameter number, -1 */
    char var[KIR_MAX_VARS][24]; /* loop vars as C expressions (names) */
    int phase[MAX_PHASE];
    int L;
    int ind;                    /* indentation */
    int split_chunk;            /* split partials: split_var runs over [lo, lo + len) */
} cg;

static int is_fp(smelt_dtype dt) { return smelt_dtype_is_float(dt); }
static int is_unsigned(smelt_dtype dt) { return dt == SMELT_U8 || dt == SMELT_BOOL; }

/* C type values of dt are computed in / stored as. */
static const char *ctype(smelt_dtype dt)
{
    static const char *const t[] = { "bool", "unsigned char", "signed char", "short", "int", "long long",
                                     "float", "float", "float", "double" };
    return t[dt];
}

static const char *stype(smelt_dtype dt)
{
    if (dt == SMELT_BOOL)
        return "unsigned char";
    if (dt == SMELT_F16 || dt == SMELT_BF16)
        return "unsigned short";
    return ctype(dt);
}

static void line(cg *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(cg *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cuda_text_put(&g->out, "%*s", 4 * g->ind, "");
    cuda_text_vput(&g->out, fmt, ap);
    cuda_text_put(&g->out, "\n");
    va_end(ap);
}

/* A new value of C type t = expr; its number. */
static int val(cg *g, const char *t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int val(cg *g, const char *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int v = g->nv++;
    cuda_text_put(&g->out, "%*s%s v%d = ", 4 * g->ind, "", t, v);
    cuda_text_vput(&g->out, fmt, ap);
    cuda_text_put(&g->out, ";\n");
    va_end(ap);
    return v;
}

static void open_block(cg *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void open_block(cg *g, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    line(g, "%s {", buf);
    g->ind++;
    g->epoch++;
}

static void close_block(cg *g)
{
    g->ind--;
    line(g, "}");
    g->epoch++;
}

/* ---------- constants, conversions ---------- */

/* Constant (f, i) of dt as a C literal in buf. */
static const char *lit(char *buf, size_t n, smelt_dtype dt, double f, int64_t i)
{
    if (dt == SMELT_BOOL)
        snprintf(buf, n, "%s", i ? "true" : "false");
    else if (!is_fp(dt))
        snprintf(buf, n, "((%s)%lldLL)", ctype(dt), (long long)i);
    else if (isnan(f))
        snprintf(buf, n, "__int_as_float(0x7fc00000)");
    else if (isinf(f))
        snprintf(buf, n, "%s__int_as_float(0x7f800000)", f < 0 ? "-" : "");
    else if (dt == SMELT_F64)
        snprintf(buf, n, "%.17g", f);
    else
        snprintf(buf, n, "%.9ef", (double)(float)f);
    if (is_fp(dt) && dt == SMELT_F64 && isinf(f))
        snprintf(buf, n, "(double)%s__int_as_float(0x7f800000)", f < 0 ? "-" : "");
    else if (is_fp(dt) && dt == SMELT_F64 && isnan(f))
        snprintf(buf, n, "(double)__int_as_float(0x7fc00000)");
    return buf;
}

/* v (dtype from) rounded to the precision of to (F16/BF16) as float. */
static int round_to(cg *g, int v, smelt_dtype to)
{
    if (to == SMELT_BF16)
        return val(g, "float", "bf16_to_f32(f32_to_bf16(v%d))", v);
    return val(g, "float", "f16_to_f32(f32_to_f16(v%d))", v);
}

/* Value v of dtype from in the compute type of to (torch's semantics). */
static int conv(cg *g, int v, smelt_dtype from, smelt_dtype to)
{
    if (from == to)
        return v;
    if (to == SMELT_BOOL)
        return val(g, "bool", "v%d != 0", v);
    int r = val(g, ctype(to), "(%s)v%d", ctype(to), v);
    return to == SMELT_F16 || to == SMELT_BF16 ? round_to(g, r, to) : r;
}

/* ---------- indexing, loads, stores ---------- */

/* Index expression e as C text appended to b. */
static void ix_text(cg *g, int32_t e, sb *b)
{
    const kix *k = &g->P->ix[e];
    switch (k->op) {
    case KIX_CONST: cuda_text_put(b, "%lldLL", (long long)k->c); return;
    case KIX_VAR: cuda_text_put(b, "%s", g->var[k->c]); return;
    case KIX_ADD:
        cuda_text_put(b, "(");
        ix_text(g, k->a, b);
        cuda_text_put(b, " + ");
        ix_text(g, k->b, b);
        cuda_text_put(b, ")");
        return;
    default:
        cuda_text_put(b, "(");
        ix_text(g, k->a, b);
        cuda_text_put(b, " %s %lldLL)", k->op == KIX_MUL ? "*" : k->op == KIX_DIV ? "/" : "%", (long long)k->c);
        return;
    }
}

static int ix_val(cg *g, int32_t e)
{
    sb t = { 0 };
    ix_text(g, e, &t);
    int v = g->nv++;
    line(g, "long long v%d = %s;", v, t.s);
    free(t.s);
    return v;
}

static int load_at(cg *g, int32_t b, int i)
{
    smelt_dtype dt = g->p->bufs[b].dtype;
    int a = g->arg[b];
    switch (dt) {
    case SMELT_BOOL: return val(g, "bool", "a%d[v%d] != 0", a, i);
    case SMELT_F16: return val(g, "float", "f16_to_f32(a%d[v%d])", a, i);
    case SMELT_BF16: return val(g, "float", "bf16_to_f32(a%d[v%d])", a, i);
    default: return val(g, ctype(dt), "a%d[v%d]", a, i);
    }
}

static void store_at(cg *g, int32_t b, int i, int v)
{
    smelt_dtype dt = g->p->bufs[b].dtype;
    int a = g->arg[b];
    const char *f = dt == SMELT_F16 ? "f32_to_f16" : dt == SMELT_BF16 ? "f32_to_bf16" : dt == SMELT_BOOL ? "(unsigned char)" : "";
    line(g, "a%d[v%d] = %s(v%d);", a, i, f, v);
}

/* ---------- pointwise ops ---------- */

static int emit(cg *g, int32_t e);

static const char *math_fn(smelt_op op)
{
    switch (op) {
    case SMELT_OP_EXP: return "exp";
    case SMELT_OP_EXP2: return "exp2";
    case SMELT_OP_EXPM1: return "expm1";
    case SMELT_OP_LOG: return "log";
    case SMELT_OP_LOG2: return "log2";
    case SMELT_OP_LOG10: return "log10";
    case SMELT_OP_LOG1P: return "log1p";
    case SMELT_OP_SIN: return "sin";
    case SMELT_OP_COS: return "cos";
    case SMELT_OP_TAN: return "tan";
    case SMELT_OP_TANH: return "tanh";
    case SMELT_OP_ERF: return "erf";
    case SMELT_OP_ERFC: return "erfc";
    case SMELT_OP_ACOS: return "acos";
    case SMELT_OP_ASIN: return "asin";
    case SMELT_OP_ATAN: return "atan";
    case SMELT_OP_ACOSH: return "acosh";
    case SMELT_OP_ASINH: return "asinh";
    case SMELT_OP_ATANH: return "atanh";
    case SMELT_OP_COSH: return "cosh";
    case SMELT_OP_SINH: return "sinh";
    case SMELT_OP_LGAMMA: return "lgamma";
    case SMELT_OP_ABS: return "fabs";
    case SMELT_OP_SQRT: return "sqrt";
    case SMELT_OP_FLOOR: return "floor";
    case SMELT_OP_CEIL: return "ceil";
    case SMELT_OP_TRUNC: return "trunc";
    case SMELT_OP_ROUND: return "rint";
    default: return NULL;
    }
}

static int unary_fp(cg *g, smelt_op op, const char *t, int x)
{
    const char *fn = math_fn(op);
    if (fn)
        return val(g, t, "%s(v%d)", fn, x);
    switch (op) {
    case SMELT_OP_NEG: return val(g, t, "-v%d", x);
    case SMELT_OP_DETACH: return x;
    case SMELT_OP_RSQRT: return val(g, t, "(%s)1 / sqrt(v%d)", t, x);
    case SMELT_OP_RECIPROCAL: return val(g, t, "(%s)1 / v%d", t, x);
    case SMELT_OP_RELU: return val(g, t, "v%d < 0 ? (%s)0 : v%d", x, t, x);
    case SMELT_OP_SIGN: return val(g, t, "v%d > 0 ? (%s)1 : v%d < 0 ? (%s)-1 : (%s)0", x, t, x, t, t);
    case SMELT_OP_ISNAN: return val(g, "bool", "isnan(v%d)", x);
    case SMELT_OP_ISINF: return val(g, "bool", "isinf(v%d)", x);
    case SMELT_OP_SIGNBIT: return val(g, "bool", "signbit(v%d) != 0", x);
    case SMELT_OP_SIGMOID: return val(g, t, "(%s)1 / ((%s)1 + exp(-v%d))", t, t, x);
    case SMELT_OP_NDTR: return val(g, t, "erfc(v%d * (%s)%.17g) * (%s)0.5", x, t, -M_SQRT1_2, t);
    case SMELT_OP_GELU_TANH: {
        const double k = -2.0 * sqrt(2.0 / M_PI);
        return val(g, t, "v%d / (exp(v%d * (v%d * v%d * (%s)%.17g + (%s)%.17g)) + (%s)1)", x, x, x, x, t, k * 0.044715,
                   t, k, t);
    }
    default: return -1;
    }
}

static int unary_int(cg *g, smelt_op op, smelt_dtype dt, int x)
{
    const char *t = ctype(dt);
    int u = is_unsigned(dt);
    if (dt == SMELT_BOOL) {
        switch (op) {
        case SMELT_OP_DETACH: case SMELT_OP_ABS: case SMELT_OP_RELU: case SMELT_OP_FLOOR: case SMELT_OP_CEIL:
        case SMELT_OP_TRUNC: case SMELT_OP_ROUND: case SMELT_OP_SIGN: return x;
        case SMELT_OP_ISNAN: case SMELT_OP_ISINF: case SMELT_OP_SIGNBIT: return val(g, "bool", "false");
        case SMELT_OP_BITWISE_NOT: case SMELT_OP_NEG: return val(g, "bool", "!v%d", x);
        default: return -1;
        }
    }
    switch (op) {
    case SMELT_OP_NEG: return val(g, t, "(%s)(0ULL - (unsigned long long)v%d)", t, x);
    case SMELT_OP_DETACH: case SMELT_OP_FLOOR: case SMELT_OP_CEIL: case SMELT_OP_TRUNC: case SMELT_OP_ROUND: return x;
    case SMELT_OP_ABS: return u ? x : val(g, t, "v%d < 0 ? (%s)(0ULL - (unsigned long long)v%d) : v%d", x, t, x, x);
    case SMELT_OP_RELU: return u ? x : val(g, t, "v%d < 0 ? (%s)0 : v%d", x, t, x);
    case SMELT_OP_SIGN: return val(g, t, "(%s)((v%d > 0) - (v%d < 0))", t, x, x);
    case SMELT_OP_ISNAN: case SMELT_OP_ISINF: return val(g, "bool", "false");
    case SMELT_OP_SIGNBIT: return val(g, "bool", u ? "false && v%d" : "v%d < 0", x);
    case SMELT_OP_BITWISE_NOT: return val(g, t, "(%s)~v%d", t, x);
    default: return -1;
    }
}

/* Integer division family with torch semantics; divisor 0 sets the flag. */
static int int_div(cg *g, smelt_op op, smelt_dtype dt, int a, int b)
{
    const char *t = ctype(dt);
    line(g, "if (v%d == 0) atomicOr(flag, %d);", b, PLAN_FLAG_ZERODIV);
    int bs = val(g, t, "v%d == 0 ? (%s)1 : v%d", b, t, b);
    if (is_unsigned(dt))
        return val(g, t, "(%s)(v%d %s v%d)", t, a, op == SMELT_OP_FLOORDIV ? "/" : "%", bs);
    int m1 = val(g, "bool", "v%d == -1", bs);
    int q = val(g, t, "v%d ? (%s)(0ULL - (unsigned long long)v%d) : (%s)(v%d / v%d)", m1, t, a, t, a, bs);
    int r = val(g, t, "v%d ? (%s)0 : (%s)(v%d %% v%d)", m1, t, t, a, bs);
    int adj = val(g, "bool", "v%d != 0 && ((v%d < 0) != (v%d < 0))", r, r, b);
    if (op == SMELT_OP_FLOORDIV)
        return val(g, t, "v%d ? (%s)(v%d - 1) : v%d", adj, t, q, q);
    if (op == SMELT_OP_REMAINDER)
        return val(g, t, "v%d ? (%s)(v%d + v%d) : v%d", adj, t, r, b, r);
    return r;
}

static int fp_floordiv(cg *g, const char *t, int a, int b)
{
    int mod = val(g, t, "fmod(v%d, v%d)", a, b);
    int div = val(g, t, "(v%d - v%d) / v%d", a, mod, b);
    int adj = val(g, "bool", "v%d != 0 && ((v%d < 0) != (v%d < 0))", mod, b, mod);
    div = val(g, t, "v%d ? v%d - (%s)1 : v%d", adj, div, t, div);
    int fl = val(g, t, "floor(v%d)", div);
    fl = val(g, t, "v%d - v%d > (%s)0.5 ? v%d + (%s)1 : v%d", div, fl, t, fl, t, fl);
    int q = val(g, t, "v%d / v%d", a, b);
    int r = val(g, t, "v%d != 0 || isnan(v%d) ? v%d : copysign((%s)0, v%d)", div, div, fl, t, q);
    return val(g, t, "v%d == 0 ? v%d : v%d", b, q, r);
}

static int binary_fp(cg *g, smelt_op op, const char *t, int a, int b)
{
    switch (op) {
    case SMELT_OP_ADD: return val(g, t, "v%d + v%d", a, b);
    case SMELT_OP_SUB: return val(g, t, "v%d - v%d", a, b);
    case SMELT_OP_MUL: return val(g, t, "v%d * v%d", a, b);
    case SMELT_OP_DIV: return val(g, t, "v%d / v%d", a, b);
    case SMELT_OP_FLOORDIV: return fp_floordiv(g, t, a, b);
    case SMELT_OP_POW: return val(g, t, "pow(v%d, v%d)", a, b);
    case SMELT_OP_ATAN2: return val(g, t, "atan2(v%d, v%d)", a, b);
    case SMELT_OP_FMOD: return val(g, t, "fmod(v%d, v%d)", a, b);
    case SMELT_OP_REMAINDER: {
        int mod = val(g, t, "fmod(v%d, v%d)", a, b);
        return val(g, t, "v%d != 0 && ((v%d < 0) != (v%d < 0)) ? v%d + v%d : v%d", mod, b, mod, mod, b, mod);
    }
    default: return -1;
    }
}

static int int_pow(cg *g, smelt_dtype dt, int a, int b)
{
    const char *t = ctype(dt);
    int bits = smelt_dtype_size(dt) * 8;
    int res = val(g, t, "(%s)1", t), base = val(g, t, "v%d", a), e = val(g, t, "v%d", b);
    /* (products in unsigned arithmetic: they wrap as torch's do, where a
     * signed overflow would be undefined) */
    line(g, "for (int i = 0; i < %d; i++) { if (v%d & 1) v%d = (%s)((unsigned long long)v%d * (unsigned long long)v%d); "
            "v%d = (%s)((unsigned long long)v%d * (unsigned long long)v%d); v%d = (%s)((unsigned long long)v%d >> 1); }",
         bits - (is_unsigned(dt) ? 0 : 1), e, res, t, res, base, base, t, base, base, e, t, e);
    if (is_unsigned(dt))
        return res;
    return val(g, t, "v%d < 0 ? (v%d == 1 ? (%s)1 : v%d == -1 ? ((v%d & 1) ? (%s)-1 : (%s)1) : (%s)0) : v%d", b, a, t, a,
               b, t, t, t, res);
}

static int binary_int(cg *g, smelt_op op, smelt_dtype dt, int a, int b)
{
    const char *t = ctype(dt);
    if (dt == SMELT_BOOL) {
        switch (op) {
        case SMELT_OP_ADD: case SMELT_OP_BITWISE_OR: case SMELT_OP_LOGICAL_OR: return val(g, t, "v%d || v%d", a, b);
        case SMELT_OP_SUB: case SMELT_OP_BITWISE_XOR: case SMELT_OP_LOGICAL_XOR: return val(g, t, "v%d != v%d", a, b);
        case SMELT_OP_MUL: case SMELT_OP_BITWISE_AND: case SMELT_OP_LOGICAL_AND: return val(g, t, "v%d && v%d", a, b);
        default: return -1;
        }
    }
    int bits = smelt_dtype_size(dt) * 8;
    switch (op) {
    case SMELT_OP_ADD: return val(g, t, "(%s)((unsigned long long)v%d + (unsigned long long)v%d)", t, a, b);
    case SMELT_OP_SUB: return val(g, t, "(%s)((unsigned long long)v%d - (unsigned long long)v%d)", t, a, b);
    case SMELT_OP_MUL: return val(g, t, "(%s)((unsigned long long)v%d * (unsigned long long)v%d)", t, a, b);
    case SMELT_OP_FLOORDIV: case SMELT_OP_FMOD: case SMELT_OP_REMAINDER: return int_div(g, op, dt, a, b);
    case SMELT_OP_POW: return int_pow(g, dt, a, b);
    case SMELT_OP_BITWISE_AND: case SMELT_OP_LOGICAL_AND: return val(g, t, "(%s)(v%d & v%d)", t, a, b);
    case SMELT_OP_BITWISE_OR: case SMELT_OP_LOGICAL_OR: return val(g, t, "(%s)(v%d | v%d)", t, a, b);
    case SMELT_OP_BITWISE_XOR: case SMELT_OP_LOGICAL_XOR: return val(g, t, "(%s)(v%d ^ v%d)", t, a, b);
    case SMELT_OP_SHL:
        return val(g, t, "(v%d >= %d || v%d < 0) ? (%s)0 : (%s)((unsigned long long)v%d << v%d)", b, bits, b, t, t, a, b);
    case SMELT_OP_SHR:
        if (is_unsigned(dt))
            return val(g, t, "v%d >= %d ? (%s)0 : (%s)(v%d >> v%d)", b, bits, t, t, a, b);
        return val(g, t, "(v%d >= %d || v%d < 0) ? (%s)(v%d >> %d) : (%s)(v%d >> v%d)", b, bits, b, t, a, bits - 1, t, a, b);
    default: return -1;
    }
}

static int maxmin(cg *g, int is_max, smelt_dtype dt, int a, int b)
{
    if (dt == SMELT_BOOL)
        return val(g, "bool", is_max ? "v%d || v%d" : "v%d && v%d", a, b);
    if (is_fp(dt))
        return val(g, ctype(dt), "(v%d %s v%d || isnan(v%d)) ? v%d : v%d", a, is_max ? ">" : "<", b, a, a, b);
    return val(g, ctype(dt), "v%d %s v%d ? v%d : v%d", a, is_max ? ">" : "<", b, a, b);
}

static int emit_kop(cg *g, const kexpr *x)
{
    smelt_op op = (smelt_op)x->gop;
    smelt_dtype cd = x->cdtype;
    int a[3] = { -1, -1, -1 };
    char buf[96];
    for (int k = 0; k < 3 && x->src[k] >= 0; k++) {
        const kexpr *s = &g->P->ex[x->src[k]];
        smelt_dtype to = (op == SMELT_OP_WHERE && k == 0) ? SMELT_BOOL : cd;
        a[k] = conv(g, emit(g, x->src[k]), s->dtype, to);
    }
    const char *t = ctype(cd);
    if (op == SMELT_OP_CAST)
        return conv(g, a[0], cd, x->dtype);
    if (op == SMELT_OP_WHERE)
        return val(g, t, "v%d ? v%d : v%d", a[0], a[1], a[2]);
    if (op == SMELT_OP_CLAMP) {
        const smelt_node *n = &g->p->graph->nodes[x->gnode];
        int v = a[0];
        if (n->a.clamp.has_lo) {
            int lo = val(g, t, "%s", lit(buf, sizeof buf, cd, n->a.clamp.flo, n->a.clamp.ilo));
            v = is_fp(cd) ? val(g, t, "v%d < v%d ? v%d : v%d", v, lo, lo, v) : maxmin(g, 1, cd, v, lo);
        }
        if (n->a.clamp.has_hi) {
            int hi = val(g, t, "%s", lit(buf, sizeof buf, cd, n->a.clamp.fhi, n->a.clamp.ihi));
            v = is_fp(cd) ? val(g, t, "v%d > v%d ? v%d : v%d", v, hi, hi, v) : maxmin(g, 0, cd, v, hi);
        }
        return v;
    }
    if (op == SMELT_OP_CHECKIDX) {
        const smelt_node *n = &g->p->graph->nodes[x->gnode];
        int v = a[0];
        if (n->a.gather.wrap)
            v = val(g, "long long", "v%d < 0 ? v%d + %lldLL : v%d", v, v, (long long)n->a.gather.n, v);
        int bad = val(g, "bool", "(unsigned long long)v%d >= %lldULL", v, (long long)n->a.gather.n);
        line(g, "if (v%d) atomicOr(flag, %d);", bad, PLAN_FLAG_INDEX);
        return val(g, "long long", "v%d ? 0LL : v%d", bad, v);
    }
    if (op == SMELT_OP_LOGICAL_NOT)
        return val(g, "bool", "!v%d", a[0]);
    if (op >= SMELT_OP_EQ && op <= SMELT_OP_GE) {
        static const char *const cmp[] = { "==", "!=", "<", "<=", ">", ">=" };
        return val(g, "bool", "v%d %s v%d", a[0], cmp[op - SMELT_OP_EQ], a[1]);
    }
    if (op == SMELT_OP_MAXIMUM || op == SMELT_OP_MINIMUM)
        return maxmin(g, op == SMELT_OP_MAXIMUM, cd, a[0], a[1]);
    int r = -1;
    const kexpr *e = x->src[1] >= 0 ? &g->P->ex[x->src[1]] : NULL;
    if (op == SMELT_OP_POW && is_fp(cd) && e && e->op == KE_CONST) {
        double c = is_fp((smelt_dtype)e->dtype) ? e->f : (double)e->i;
        r = c == 2 ? val(g, t, "v%d * v%d", a[0], a[0]) : c == 3 ? val(g, t, "v%d * v%d * v%d", a[0], a[0], a[0])
            : c == 0.5 ? val(g, t, "sqrt(v%d)", a[0]) : c == -0.5 ? val(g, t, "(%s)1 / sqrt(v%d)", t, a[0])
            : c == -1 ? val(g, t, "(%s)1 / v%d", t, a[0]) : c == -2 ? val(g, t, "(%s)1 / (v%d * v%d)", t, a[0], a[0]) : -1;
    }
    if (r < 0 && a[1] >= 0)
        r = is_fp(cd) ? binary_fp(g, op, t, a[0], a[1]) : binary_int(g, op, cd, a[0], a[1]);
    else if (r < 0)
        r = is_fp(cd) ? unary_fp(g, op, t, a[0]) : unary_int(g, op, cd, a[0]);
    if (r < 0)
        abort();   /* an op/dtype pair the lowering never makes */
    return r;   /* f16/bf16 kept in f32 until a store or a CAST rounds it (as the CPU back end) */
}

static int emit(cg *g, int32_t e)
{
    if (g->memo_ep[e] == g->epoch)
        return g->memo[e];
    const kexpr *x = &g->P->ex[e];
    char buf[96];
    int r;
    switch (x->op) {
    case KE_LOAD: r = load_at(g, x->buf, ix_val(g, x->ix)); break;
    case KE_GATHER: {
        int v = emit(g, x->src[0]), base = ix_val(g, x->ix);
        r = load_at(g, x->buf, val(g, "long long", "v%d + v%d * %lldLL", base, v, (long long)x->i));
        break;
    }
    case KE_CONST: r = val(g, ctype(x->dtype), "%s", lit(buf, sizeof buf, x->dtype, x->f, x->i)); break;
    case KE_INDEX: r = ix_val(g, x->ix); break;
    case KE_PHASE: r = g->phase[x->phase]; break;
    default: r = emit_kop(g, x); break;
    }
    g->memo[e] = r;
    g->memo_ep[e] = g->epoch;
    return r;
}

/* ---------- reductions ---------- */

static int is_arg(smelt_op op) { return op == SMELT_OP_ARGMAX || op == SMELT_OP_ARGMIN; }

static const char *red_init(char *buf, size_t n, smelt_op op, smelt_dtype dt)
{
    int64_t imax = 0, imin = 0;
    if (!is_fp(dt)) {
        int bits = smelt_dtype_size(dt) * 8;
        imax = bits >= 64 ? INT64_MAX : (int64_t)((1ull << (bits - 1)) - 1);
        imin = bits >= 64 ? INT64_MIN + 1 : -(int64_t)(1ull << (bits - 1));
        if (bits >= 64 && (op == SMELT_OP_AMAX || op == SMELT_OP_ARGMAX))
            return snprintf(buf, n, "(-9223372036854775807LL - 1)"), buf;
        if (is_unsigned(dt))
            imax = dt == SMELT_BOOL ? 1 : 255, imin = 0;
    }
    switch (op) {
    case SMELT_OP_PROD: case SMELT_OP_ALL: return lit(buf, n, dt, 1, 1);
    case SMELT_OP_AMAX: case SMELT_OP_ARGMAX: return lit(buf, n, dt, -INFINITY, imin);
    case SMELT_OP_AMIN: case SMELT_OP_ARGMIN: return lit(buf, n, dt, INFINITY, imax);
    default: return lit(buf, n, dt, 0, 0);
    }
}

/* acc (and acci) updated with (v, vi): names of C lvalues / values. */
static void combine(cg *g, smelt_op op, smelt_dtype dt, const char *acc, const char *acci, const char *v,
                    const char *vi)
{
    const char *t = ctype(dt);
    if (is_arg(op)) {
        const char *gt = op == SMELT_OP_ARGMAX ? ">" : "<";
        if (is_fp(dt))
            line(g, "if (%s %s %s || (isnan(%s) && !isnan(%s)) || ((%s == %s || (isnan(%s) && isnan(%s))) && %s < %s)) "
                    "{ %s = %s; %s = %s; }",
                 v, gt, acc, v, acc, v, acc, v, acc, vi, acci, acc, v, acci, vi);
        else
            line(g, "if (%s %s %s || (%s == %s && %s < %s)) { %s = %s; %s = %s; }", v, gt, acc, v, acc, vi, acci, acc, v,
                 acci, vi);
        return;
    }
    switch (op) {
    case SMELT_OP_SUM:
    case SMELT_OP_PROD: {
        const char *o = op == SMELT_OP_SUM ? "+" : "*";
        if (dt == SMELT_BOOL)
            line(g, "%s = %s %s %s;", acc, acc, op == SMELT_OP_SUM ? "||" : "&&", v);
        else if (is_fp(dt))
            line(g, "%s = (%s)(%s %s %s);", acc, t, acc, o, v);
        else   /* integers wrap (unsigned arithmetic: a signed overflow is undefined) */
            line(g, "%s = (%s)((unsigned long long)%s %s (unsigned long long)%s);", acc, t, acc, o, v);
        break;
    }
    case SMELT_OP_AMAX:
    case SMELT_OP_AMIN: {
        const char *c = op == SMELT_OP_AMAX ? ">" : "<";
        if (dt == SMELT_BOOL)
            line(g, "%s = %s %s %s;", acc, acc, op == SMELT_OP_AMAX ? "||" : "&&", v);
        else if (is_fp(dt))
            line(g, "if (%s %s %s || isnan(%s)) %s = %s;", v, c, acc, v, acc, v);
        else
            line(g, "if (%s %s %s) %s = %s;", v, c, acc, acc, v);
        break;
    }
    case SMELT_OP_ANY: line(g, "%s = %s || %s;", acc, acc, v); break;
    default: line(g, "%s = %s && %s;", acc, acc, v); break;
    }
}

/* Loop over this thread's points of the row (lanes strided), decoding the
 * reduction vars; body between the returned brace and close_block. The
 * flat index is the C variable r<depth>. */
static void row_begin(cg *g, const char *flat)
{
    const kir_kernel *k = g->k;
    int64_t n = 1;
    for (int v = 0; v < k->nvars; v++)
        if (k->rmask >> v & 1)
            n *= k->size[v];
    if (g->split_chunk)
        open_block(g, "for (long long %s = lane; %s < %lldLL * len; %s += %d)", flat, flat,
                   (long long)(n / k->size[k->split_var]), flat, g->L);
    else
        open_block(g, "for (long long %s = %s; %s < %lldLL; %s += %d)", flat, g->L > 1 ? "lane" : "0LL", flat,
                   (long long)n, flat, g->L);
    int narrow = !g->split_chunk && n <= (int64_t)UINT32_MAX;   /* as decode_outer */
    line(g, narrow ? "unsigned rem_ = (unsigned)%s;" : "long long rem_ = %s;", flat);
    for (int v = k->nvars - 1; v >= 0; v--) {
        if (!(k->rmask >> v & 1))
            continue;
        int sp = g->split_chunk && v == k->split_var;
        snprintf(g->var[v], sizeof g->var[v], "x%d", v);
        if (sp)
            line(g, "long long x%d = lo + rem_ %% len; rem_ /= len;", v);
        else if (narrow && k->size[v] > 0)
            line(g, "long long x%d = (long long)(rem_ %% %lluu); rem_ /= %lluu;", v, (unsigned long long)k->size[v],
                 (unsigned long long)k->size[v]);
        else if (k->size[v] > 0)
            line(g, "long long x%d = rem_ %% %lldLL; rem_ /= %lldLL;", v, (long long)k->size[v], (long long)k->size[v]);
        else   /* an empty row: the loop never runs */
            line(g, "long long x%d = 0;", v);
    }
}

/* The index partner bi_ of a shuffle step (arg reductions; else 0). */
static void shfl_index(cg *g, int arg, const char *acci)
{
    if (arg)
        line(g, "long long bi_ = __shfl_xor_sync(0xffffffffu, %s, o_);", acci);
    else
        line(g, "long long bi_ = 0;");
}

/* A REDUCE item: its phase value's number. */
static int emit_reduce(cg *g, const kitem *it, int item)
{
    smelt_op op = (smelt_op)it->rop;
    smelt_dtype dt = is_arg(op) ? (smelt_dtype)g->P->ex[it->value].dtype : (smelt_dtype)it->acc_dtype;
    if (is_arg(op) && (dt == SMELT_F16 || dt == SMELT_BF16))
        dt = SMELT_F32;
    const char *t = ctype(dt);
    char acc[24], acci[24], comp[24], init[96], flat[24];
    snprintf(acc, sizeof acc, "acc%d", item), snprintf(acci, sizeof acci, "acci%d", item);
    snprintf(comp, sizeof comp, "comp%d", item), snprintf(flat, sizeof flat, "r%d", item);
    int kahan = op == SMELT_OP_SUM && is_fp(dt);
    line(g, "%s %s = %s; long long %s = 9223372036854775807LL; %s %s = 0;", t, acc,
         red_init(init, sizeof init, op, dt), acci, kahan ? t : "int", comp);
    row_begin(g, flat);
    const kexpr *x = &g->P->ex[it->value];
    int v = conv(g, emit(g, it->value), x->dtype, dt);
    char vs[24];
    snprintf(vs, sizeof vs, "v%d", v);
    if (kahan) {   /* Kahan: a thread may add millions of terms */
        line(g, "{ %s y_ = %s - %s; %s s_ = %s + y_; %s c_ = (s_ - %s) - y_; %s = isnan(c_) ? (%s)0 : c_; %s = s_; }", t, vs,
             comp, t, acc, t, acc, comp, t, acc);
    } else {
        combine(g, op, dt, acc, acci, vs, flat);
    }
    close_block(g);
    if (kahan)
        line(g, "%s -= %s;", acc, comp);
    if (g->L > 1) {   /* the block's partials: warp shuffles, then the warps' results through shared memory */
        int nw = g->L / 32, arg = is_arg(op);
        const char *st = dt == SMELT_BOOL ? "bool" : t;
        open_block(g, "for (int o_ = 16; o_ > 0; o_ >>= 1)");
        line(g, "%s b_ = (%s)__shfl_xor_sync(0xffffffffu, %s, o_);", t, t, acc);
        shfl_index(g, arg, acci);
        combine(g, op, dt, acc, acci, "b_", "bi_");
        close_block(g);
        line(g, "__shared__ %s sv%d[%d]; __shared__ long long si%d[%d];", st, item, nw, item, nw);
        line(g, "if ((lane & 31) == 0) { sv%d[lane >> 5] = %s; si%d[lane >> 5] = %s; }", item, acc, item, acci);
        line(g, "__syncthreads();");
        open_block(g, "if (lane < 32)");
        line(g, "%s = lane < %d ? (%s)sv%d[lane] : %s; %s = lane < %d ? si%d[lane] : 9223372036854775807LL;", acc, nw, t,
             item, red_init(init, sizeof init, op, dt), acci, nw, item);
        open_block(g, "for (int o_ = %d; o_ > 0; o_ >>= 1)", nw / 2);
        line(g, "%s b_ = (%s)__shfl_xor_sync(0xffffffffu, %s, o_);", t, t, acc);
        shfl_index(g, arg, acci);
        combine(g, op, dt, acc, acci, "b_", "bi_");
        close_block(g);
        line(g, "if (lane == 0) { sv%d[0] = %s; si%d[0] = %s; }", item, acc, item, acci);
        close_block(g);
        line(g, "__syncthreads();");
        line(g, "%s = sv%d[0]; %s = si%d[0]; __syncthreads();", acc, item, acci, item);
    }
    g->epoch++;
    if (is_arg(op))
        return val(g, "long long", "%s", acci);
    return conv(g, val(g, t, "%s", acc), dt, (smelt_dtype)it->acc_dtype);
}

static void emit_point(cg *g)
{
    const kir_kernel *k = g->k;
    int ph = 0;
    g->epoch++;
    for (int i = 0; i < k->nitems; i++) {
        const kitem *it = &k->items[i];
        if (it->kind == KI_REDUCE) {
            g->phase[ph++] = emit_reduce(g, it, i);
        } else if (it->kind == KI_STORE && k->rmask) {
            char flat[24];
            snprintf(flat, sizeof flat, "r%d", i);
            row_begin(g, flat);
            store_at(g, it->buf, ix_val(g, it->ix), emit(g, it->value));
            close_block(g);
            if (g->L > 1 && i + 1 < k->nitems)
                line(g, "__syncthreads();");
        } else {
            if (g->L > 1)
                open_block(g, "if (lane == 0)");
            store_at(g, it->buf, ix_val(g, it->ix), emit(g, it->value));
            if (g->L > 1)
                close_block(g);
        }
    }
}

/* ---------- kernels ---------- */

int64_t cuda_outer_points(const kir_kernel *k)
{
    int64_t n = 1;
    for (int v = 0; v < k->nvars; v++)
        if (!(k->rmask >> v & 1))
            n *= k->size[v];
    return n;
}

int cuda_kernel_lanes(const kir_kernel *k)
{
    int64_t n = 1;
    int nr = 0;
    for (int v = 0; v < k->nvars; v++)
        if (k->rmask >> v & 1)
            n *= k->size[v], nr++;
    if (!nr || (n < 256 && k->split <= 1))
        return 1;
    return n < 4096 ? 128 : 256;
}

/* Outer vars from the C expression `pt` (last var fastest). */
static void decode_outer(cg *g, const char *pt)
{
    const kir_kernel *k = g->k;
    /* 32-bit division where the points fit (64-bit division by a constant
     * costs several times more on the GPU) */
    int narrow = cuda_outer_points(k) <= (int64_t)UINT32_MAX;
    line(g, narrow ? "unsigned o_ = (unsigned)(%s);" : "long long o_ = %s;", pt);
    for (int v = k->nvars - 1; v >= 0; v--) {
        if (k->rmask >> v & 1)
            continue;
        snprintf(g->var[v], sizeof g->var[v], "y%d", v);
        if (narrow)
            line(g, "long long y%d = (long long)(o_ %% %lluu); o_ /= %lluu;", v, (unsigned long long)k->size[v],
                 (unsigned long long)k->size[v]);
        else
            line(g, "long long y%d = o_ %% %lldLL; o_ /= %lldLL;", v, (long long)k->size[v], (long long)k->size[v]);
    }
}

static void signature(cg *g, char c, int32_t kn, const plan_kernel_code *code)
{
    const smelt_plan *p = g->p;
    cuda_text_put(&g->out, "extern \"C\" __global__ void %c%d(", c, (int)kn);
    for (int32_t i = 0; i < code->nslots; i++) {
        cuda_text_put(&g->out, "%s *__restrict__ a%d, ", stype((smelt_dtype)p->bufs[code->slots[i]].dtype), (int)i);
        g->arg[code->slots[i]] = (int)i;
    }
    cuda_text_put(&g->out, "int *flag");
    if (g->k->split > 1) {
        smelt_dtype adt = SMELT_F32;
        for (int i = 0; i < g->k->nitems; i++)
            if (g->k->items[i].kind == KI_REDUCE)
                adt = (smelt_dtype)g->k->items[i].acc_dtype;
        cuda_text_put(&g->out, ", %s *scratch", adt == SMELT_BOOL ? "unsigned char" : ctype(adt));
    }
    cuda_text_put(&g->out, ")\n{\n");
    g->ind = 1;
    g->epoch++;   /* (values named per function: kernels alike but for their buffers read alike) */
    g->nv = 0;
}

static void emit_main(cg *g, int32_t kn, const plan_kernel_code *code)
{
    const kir_kernel *k = g->k;
    signature(g, 'k', kn, code);
    g->L = cuda_kernel_lanes(k);
    if (g->L > 1) {
        line(g, "const long long lane = threadIdx.x;");
        decode_outer(g, "(long long)blockIdx.x");
    } else {
        line(g, "const long long gid = (long long)blockIdx.x * blockDim.x + threadIdx.x;");
        line(g, "if (gid >= %lldLL) return;", (long long)cuda_outer_points(k));
        decode_outer(g, "gid");
    }
    emit_point(g);
    cuda_text_put(&g->out, "}\n\n");
}

/* Split kernels: partials (a block per outer point and chunk) and finish. */
static void emit_split(cg *g, int32_t kn, const plan_kernel_code *code)
{
    const kir_kernel *k = g->k;
    const kitem *it = NULL;
    int item = 0;
    for (int i = 0; i < k->nitems; i++)
        if (k->items[i].kind == KI_REDUCE)
            it = &k->items[i], item = i;
    int64_t S = k->split, n = k->size[k->split_var], c = (n + S - 1) / S;
    signature(g, 'k', kn, code);
    g->L = cuda_kernel_lanes(k);
    line(g, "const long long lane = threadIdx.x, w = blockIdx.x;");
    char wdiv[64];
    snprintf(wdiv, sizeof wdiv, "w / %lldLL", (long long)S);
    decode_outer(g, wdiv);
    line(g, "long long lo = (w %% %lldLL) * %lldLL; long long hi = lo + %lldLL < %lldLL ? lo + %lldLL : %lldLL;",
         (long long)S, (long long)c, (long long)c, (long long)n, (long long)c, (long long)n);
    line(g, "if (lo > %lldLL) lo = %lldLL; long long len = hi - lo;", (long long)n, (long long)n);
    (void)item;
    g->split_chunk = 1;
    int v = emit_reduce(g, it, item);
    g->split_chunk = 0;
    line(g, "if (lane == 0) scratch[w] = v%d;", v);
    cuda_text_put(&g->out, "}\n\n");
    /* finish */
    signature(g, 'f', kn, code);
    g->L = 1;
    smelt_op op = (smelt_op)it->rop;
    smelt_dtype adt = (smelt_dtype)it->acc_dtype;
    char init[96];
    line(g, "const long long gid = (long long)blockIdx.x * blockDim.x + threadIdx.x;");
    line(g, "if (gid >= %lldLL) return;", (long long)cuda_outer_points(k));
    decode_outer(g, "gid");
    line(g, "%s acc = %s; %s comp = 0; long long acci = 0;", ctype(adt), red_init(init, sizeof init, op, adt),
         ctype(adt));
    open_block(g, "for (long long c = 0; c < %lldLL; c++)", (long long)S);
    line(g, "%s p_ = scratch[gid * %lldLL + c];", ctype(adt), (long long)S);
    if (op == SMELT_OP_SUM && is_fp(adt))
        line(g, "%s y_ = p_ - comp; %s s_ = acc + y_; %s c_ = (s_ - acc) - y_; comp = isnan(c_) ? (%s)0 : c_; acc = s_;",
             ctype(adt), ctype(adt), ctype(adt), ctype(adt));
    else
        combine(g, op, adt, "acc", "acci", "p_", "c");
    close_block(g);
    if (op == SMELT_OP_SUM && is_fp(adt))
        line(g, "acc -= comp;");
    g->phase[0] = val(g, ctype(adt), "acc");
    for (int i = 0; i < k->nitems; i++)
        if (k->items[i].kind == KI_ROWSTORE)
            store_at(g, k->items[i].buf, ix_val(g, k->items[i].ix), emit(g, k->items[i].value));
    cuda_text_put(&g->out, "}\n\n");
}

static const char PRELUDE[] =
    "/* smelt: CUDA C generated from the kernel IR (inductor/cuda/codegen.c) */\n"
    "#ifndef SMELT_CUDA_EMU /* (a CPU emulation of the kernels defines these itself: tests/cuda_sim) */\n"
    "static __device__ __forceinline__ float f16_to_f32(unsigned short h)\n"
    "{ float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }\n"
    "static __device__ __forceinline__ unsigned short f32_to_f16(float f)\n"
    "{ unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
    "#endif\n"
    "static __device__ __forceinline__ float bf16_to_f32(unsigned short h) { return __int_as_float((int)h << 16); }\n"
    "static __device__ __forceinline__ unsigned short f32_to_bf16(float f)\n"
    "{ unsigned int b = (unsigned int)__float_as_int(f);\n"
    "  if (isnan(f)) return (unsigned short)((b >> 16) | 0x40);\n"
    "  return (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16); }\n\n";

char *cuda_codegen_source(smelt_plan *p, size_t *starts)
{
    cg g = { 0 };
    g.p = p, g.P = &p->pool;
    g.arg = malloc(sizeof(int) * ((size_t)p->nbufs + 1));
    g.memo = calloc((size_t)p->pool.nex + 1, sizeof *g.memo);
    g.memo_ep = calloc((size_t)p->pool.nex + 1, sizeof *g.memo_ep);
    if (!g.arg || !g.memo || !g.memo_ep)
        abort();
    cuda_text_put(&g.out, "%s", PRELUDE);
    for (int32_t kn = 0; kn < p->nkernels; kn++) {
        g.k = &p->kernels[kn];
        plan_kernel_code *code = &p->code[kn];
        if (!code->slots) {
            if (!(code->slots = malloc(sizeof(int32_t) * ((size_t)p->nbufs + 1))))
                abort();
            code->nslots = ind_kernel_slots(p, g.k, code->slots);
        }
        if (starts)
            starts[kn] = g.out.n;
        for (int v = 0; v < g.k->nvars; v++)
            snprintf(g.var[v], sizeof g.var[v], "0LL");
        if (g.k->split > 1)
            emit_split(&g, kn, code);
        else
            emit_main(&g, kn, code);
    }
    if (starts)
        starts[p->nkernels] = g.out.n;
    free(g.arg), free(g.memo), free(g.memo_ep);
    return g.out.s;
}
