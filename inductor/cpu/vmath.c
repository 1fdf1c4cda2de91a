/* vmath.c — vector math for the CPU code generator (see vmath.h).
 *
 * float32 functions are built inline from a few pieces: Cody-Waite range
 * reduction, polynomials evaluated by Horner's rule with llvm.fmuladd
 * (fused where the target has FMA; every bound below holds either way),
 * exponent arithmetic on the bits, and selects for the special inputs. The
 * polynomial coefficients are minimax fits (Lawson's iteration on
 * Chebyshev points, scripts/fit_vmath.py), rounded to float32; each
 * polynomial's own error is below 0.2 ULP, so rounding dominates. Bounds
 * quoted are the measured maxima of benchmarks/ulp_sweep.py over all 2^32
 * float32 inputs (ARCHITECTURE.md has the table).
 *
 * Adding a function: write it from the pieces here (or call vm_sleef with
 * the fastest SLEEF variant that keeps the contract), add its case to
 * vm_unary/vm_binary, a row to tests/test_vmath.py and to the sweep.
 */
#include "vmath.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---------- building blocks ---------- */

typedef struct fx {
    vm *v;
    LLVMBuilderRef B;
    LLVMTypeRef t, et, it;   /* value type, its element (float), the same-width i32 */
    int w;
} fx;

static fx fx_of(vm *v, LLVMValueRef x)
{
    fx f = { .v = v, .B = v->B, .t = LLVMTypeOf(x) };
    f.w = LLVMGetTypeKind(f.t) == LLVMVectorTypeKind ? (int)LLVMGetVectorSize(f.t) : 1;
    f.et = f.w > 1 ? LLVMGetElementType(f.t) : f.t;
    LLVMTypeRef i32 = LLVMInt32TypeInContext(v->C);
    f.it = f.w > 1 ? LLVMVectorType(i32, (unsigned)f.w) : i32;
    return f;
}

static LLVMValueRef splat_const(fx *f, LLVMValueRef c)
{
    if (f->w == 1)
        return c;
    LLVMValueRef e[64];
    for (int i = 0; i < f->w; i++)
        e[i] = c;
    return LLVMConstVector(e, (unsigned)f->w);
}

static LLVMValueRef K(fx *f, double c) { return splat_const(f, LLVMConstReal(f->et, c)); }
static LLVMValueRef KI(fx *f, int64_t c)
{
    return splat_const(f, LLVMConstInt(LLVMInt32TypeInContext(f->v->C), (unsigned long long)c, 1));
}

static LLVMValueRef intr(fx *f, const char *name, LLVMTypeRef t, LLVMValueRef *a, int n)
{
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(f->v->M, id, &t, 1);
    LLVMTypeRef ft = LLVMIntrinsicGetType(f->v->C, id, &t, 1);
    return LLVMBuildCall2(f->B, ft, fn, a, (unsigned)n, "");
}

static LLVMValueRef add(fx *f, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFAdd(f->B, a, b, ""); }
static LLVMValueRef vsub(fx *f, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFSub(f->B, a, b, ""); }
static LLVMValueRef mul(fx *f, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFMul(f->B, a, b, ""); }
static LLVMValueRef vdiv(fx *f, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFDiv(f->B, a, b, ""); }
static LLVMValueRef neg(fx *f, LLVMValueRef a) { return LLVMBuildFNeg(f->B, a, ""); }
static LLVMValueRef sel(fx *f, LLVMValueRef c, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildSelect(f->B, c, a, b, ""); }
static LLVMValueRef cmp(fx *f, LLVMRealPredicate p, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFCmp(f->B, p, a, b, ""); }

/* a * b + c, fused where the target has FMA */
static LLVMValueRef fma3(fx *f, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c)
{
    LLVMValueRef args[3] = { a, b, c };
    return intr(f, "llvm.fmuladd", LLVMTypeOf(a), args, 3);
}

/* a * b + c rounded once where the target has FMA (error terms: the
 * residual of a product); a * b + c otherwise */
static LLVMValueRef fma_ex(fx *f, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c)
{
    if (!f->v->fma)
        return fma3(f, a, b, c);
    LLVMValueRef args[3] = { a, b, c };
    return intr(f, "llvm.fma", LLVMTypeOf(a), args, 3);
}

static LLVMValueRef un(fx *f, const char *name, LLVMValueRef a) { return intr(f, name, LLVMTypeOf(a), &a, 1); }
static LLVMValueRef bin(fx *f, const char *name, LLVMValueRef a, LLVMValueRef b)
{
    LLVMValueRef args[2] = { a, b };
    return intr(f, name, LLVMTypeOf(a), args, 2);
}
static LLVMValueRef fabs_(fx *f, LLVMValueRef a) { return un(f, "llvm.fabs", a); }
static LLVMValueRef copysign_(fx *f, LLVMValueRef mag, LLVMValueRef sgn) { return bin(f, "llvm.copysign", mag, sgn); }
static LLVMValueRef isnan_(fx *f, LLVMValueRef x) { return cmp(f, LLVMRealUNO, x, x); }
/* NaN inputs give NaN (the input, quiet) whatever r computed */
static LLVMValueRef keep_nan(fx *f, LLVMValueRef x, LLVMValueRef r) { return sel(f, isnan_(f, x), add(f, x, x), r); }

/* f's double counterpart (same width) */
static fx as_double(fx *f)
{
    fx d = *f;
    d.et = LLVMDoubleTypeInContext(f->v->C);
    d.t = f->w > 1 ? LLVMVectorType(d.et, (unsigned)f->w) : d.et;
    return d;
}

/* min(x, hi) with NaN kept: one vminps on x86 */
static LLVMValueRef clamp_hi(fx *f, LLVMValueRef x, double hi)
{
    return sel(f, cmp(f, LLVMRealOGT, x, K(f, hi)), K(f, hi), x);
}

/* c[0] + x * (c[1] + x * (... c[n-1])) */
static LLVMValueRef horner(fx *f, LLVMValueRef x, const double *c, int n)
{
    LLVMValueRef r = K(f, c[n - 1]);
    for (int i = n - 2; i >= 0; i--)
        r = fma3(f, r, x, K(f, c[i]));
    return r;
}

/* 2^n for integer n in [-126, 127] (i32 lanes) as float */
static LLVMValueRef pow2i(fx *f, LLVMValueRef n)
{
    LLVMValueRef b = LLVMBuildShl(f->B, LLVMBuildAdd(f->B, n, KI(f, 127), ""), KI(f, 23), "");
    return LLVMBuildBitCast(f->B, b, f->t, "");
}

/* ---------- exp family ---------- */

/* e^r - 1 = r + r^2 P(r) on |r| <= ln2/2 (P: 0.05 ULP) */
static const double EXP_P[] = { 4.999999404e-01, 1.666652113e-01, 4.166838899e-02, 8.368715644e-03,
                                1.381460228e-03 };
#define LOG2E 1.44269504088896341
#define LN2_HI 0.693359375           /* 9 bits: n * LN2_HI exact for |n| < 2^15 */
#define LN2_LO -2.12194440e-4

/* x (finite, clamped) = n ln2 + r: returns e^r - 1, n as float in *nf */
static LLVMValueRef exp_reduce(fx *f, LLVMValueRef x, LLVMValueRef *nf)
{
    LLVMValueRef n = un(f, "llvm.roundeven", mul(f, x, K(f, LOG2E)));
    LLVMValueRef r = fma3(f, n, K(f, -LN2_HI), x);
    r = fma3(f, n, K(f, -LN2_LO), r);
    *nf = n;
    return fma3(f, mul(f, r, r), horner(f, r, EXP_P, 5), r);
}

/* (1 + m) 2^n for n in [-151, 129] (n as float): two exact power-of-two
 * steps, so a denormal result rounds once */
static LLVMValueRef scale2(fx *f, LLVMValueRef one_plus_m, LLVMValueRef nf)
{
    LLVMValueRef n = LLVMBuildFPToSI(f->B, nf, f->it, "");
    LLVMValueRef n1 = LLVMBuildAShr(f->B, n, KI(f, 1), "");
    LLVMValueRef n2 = LLVMBuildSub(f->B, n, n1, "");
    return mul(f, mul(f, one_plus_m, pow2i(f, n1)), pow2i(f, n2));
}

/* exp: <= 1 ULP. Overflow above 88.72 to inf, 0 below -103.97, denormals
 * rounded once. */
static LLVMValueRef vm_expf(fx *f, LLVMValueRef x)
{
    LLVMValueRef xc = bin(f, "llvm.minnum", bin(f, "llvm.maxnum", x, K(f, -104.0)), K(f, 89.0));
    LLVMValueRef nf, m = exp_reduce(f, xc, &nf);
    return keep_nan(f, x, scale2(f, add(f, m, K(f, 1.0)), nf));
}

/* exp2: <= 1 ULP (r = (x - n) ln2, the reduction exact). */
static LLVMValueRef vm_exp2f(fx *f, LLVMValueRef x)
{
    LLVMValueRef xc = bin(f, "llvm.minnum", bin(f, "llvm.maxnum", x, K(f, -152.0)), K(f, 129.0));
    LLVMValueRef n = un(f, "llvm.roundeven", xc);
    LLVMValueRef r = mul(f, vsub(f, xc, n), K(f, M_LN2));
    LLVMValueRef m = fma3(f, mul(f, r, r), horner(f, r, EXP_P, 5), r);
    return keep_nan(f, x, scale2(f, add(f, m, K(f, 1.0)), n));
}

/* expm1: <= 1.5 ULP. e^x - 1 = 2^n (e^r - 1) + (2^n - 1), no cancellation
 * for n <= 24 (2^n - 1 exact); beyond, e^x - 1 rounds as e^x. */
static LLVMValueRef vm_expm1f(fx *f, LLVMValueRef x)
{
    LLVMValueRef xc = bin(f, "llvm.minnum", bin(f, "llvm.maxnum", x, K(f, -30.0)), K(f, 89.0));
    LLVMValueRef nf, m = exp_reduce(f, xc, &nf);
    LLVMValueRef ns = bin(f, "llvm.minnum", nf, K(f, 24.0));
    LLVMValueRef s = pow2i(f, LLVMBuildFPToSI(f->B, ns, f->it, ""));
    LLVMValueRef small = fma3(f, m, s, vsub(f, s, K(f, 1.0)));
    LLVMValueRef big = vsub(f, scale2(f, add(f, m, K(f, 1.0)), nf), K(f, 1.0));
    LLVMValueRef r = sel(f, cmp(f, LLVMRealOGT, nf, K(f, 24.0)), big, small);
    r = sel(f, cmp(f, LLVMRealOEQ, x, K(f, 0.0)), x, r);   /* -0 */
    return keep_nan(f, x, r);
}

/* ---------- log family ---------- */

/* log(1 + g) = g - g^2/2 + g^3 L(g) on [sqrt(1/2) - 1, sqrt(2) - 1] (0.1 ULP) */
static const double LOG_L[] = { 3.333333135e-01, -2.500081956e-01, 2.000122666e-01, -1.662335694e-01,
                                1.420175880e-01, -1.316018254e-01, 1.276157498e-01, -7.634492964e-02 };

/* log(1 + g) for g in [sqrt(1/2) - 1, sqrt(2) - 1] */
static LLVMValueRef log1p_poly(fx *f, LLVMValueRef g)
{
    LLVMValueRef z = mul(f, g, g);
    LLVMValueRef y = mul(f, mul(f, g, z), horner(f, g, LOG_L, 8));
    return add(f, g, fma3(f, z, K(f, -0.5), y));
}

/* l + e ln 2 (ln 2 in two parts: e ln2_hi exact) */
static LLVMValueRef plus_e_ln2(fx *f, LLVMValueRef ef, LLVMValueRef l)
{
    return fma3(f, ef, K(f, LN2_HI), fma3(f, ef, K(f, LN2_LO), l));
}

/* x > 0 finite = 2^e m, m in [sqrt(1/2), sqrt(2)): returns log(m), e as
 * float in *ef (denormals scaled first). Other x give garbage: callers
 * select their specials. */
static LLVMValueRef log_reduce(fx *f, LLVMValueRef x, LLVMValueRef *ef)
{
    LLVMValueRef den = cmp(f, LLVMRealOLT, x, K(f, 0x1p-126));
    LLVMValueRef xs = sel(f, den, mul(f, x, K(f, 0x1p23)), x);
    LLVMValueRef bits = LLVMBuildBitCast(f->B, xs, f->it, "");
    LLVMValueRef e = LLVMBuildSub(f->B, LLVMBuildLShr(f->B, bits, KI(f, 23), ""), KI(f, 127), "");
    e = LLVMBuildSub(f->B, e, LLVMBuildSelect(f->B, den, KI(f, 23), KI(f, 0), ""), "");
    LLVMValueRef mb = LLVMBuildOr(f->B, LLVMBuildAnd(f->B, bits, KI(f, 0x7fffff), ""), KI(f, 0x3f800000), "");
    LLVMValueRef m = LLVMBuildBitCast(f->B, mb, f->t, "");
    LLVMValueRef up = cmp(f, LLVMRealOGT, m, K(f, M_SQRT2));
    m = sel(f, up, mul(f, m, K(f, 0.5)), m);
    e = LLVMBuildAdd(f->B, e, LLVMBuildZExt(f->B, up, f->it, ""), "");
    *ef = LLVMBuildSIToFP(f->B, e, f->t, "");
    return log1p_poly(f, vsub(f, m, K(f, 1.0)));
}

/* log's specials on top of r: +inf, x < 0 NaN, +-0 -inf, NaN */
static LLVMValueRef log_specials(fx *f, LLVMValueRef x, LLVMValueRef r)
{
    r = sel(f, cmp(f, LLVMRealOEQ, x, K(f, INFINITY)), x, r);
    r = sel(f, cmp(f, LLVMRealOLT, x, K(f, 0.0)), K(f, NAN), r);
    r = sel(f, cmp(f, LLVMRealOEQ, x, K(f, 0.0)), K(f, -INFINITY), r);
    return keep_nan(f, x, r);
}

/* log: <= 1 ULP. */
static LLVMValueRef vm_logf(fx *f, LLVMValueRef x)
{
    LLVMValueRef ef, lm = log_reduce(f, x, &ef);
    return log_specials(f, x, plus_e_ln2(f, ef, lm));
}

/* log2 and log10: e log_b(2) + log(m) log_b(e), log_b(2) split in two
 * (the high part 12 bits: exact products). <= 2 ULP. */
static LLVMValueRef vm_logbf(fx *f, LLVMValueRef x, double l2_hi, double l2_lo, double le)
{
    LLVMValueRef ef, lm = log_reduce(f, x, &ef);
    LLVMValueRef r = fma3(f, ef, K(f, l2_hi), fma3(f, ef, K(f, l2_lo), mul(f, lm, K(f, le))));
    return log_specials(f, x, r);
}

/* log1p(t), or where big, log(2 u_big) (big may be NULL: never): one
 * reduction of u = 1 + t or u_big. log1p's part is log(u) t / (u - 1),
 * which cancels u's rounding error (u == 1 gives t); u = inf gives inf. */
static LLVMValueRef log1p_or_log2x(fx *f, LLVMValueRef t, LLVMValueRef u_big, LLVMValueRef big)
{
    LLVMValueRef u1 = add(f, t, K(f, 1.0));
    LLVMValueRef u = big ? sel(f, big, u_big, u1) : u1;
    LLVMValueRef ef, lm = log_reduce(f, u, &ef);
    if (big)
        ef = add(f, ef, sel(f, big, K(f, 1.0), K(f, 0.0)));
    LLVMValueRef lu = plus_e_ln2(f, ef, lm);
    LLVMValueRef r = mul(f, lu, vdiv(f, t, vsub(f, u1, K(f, 1.0))));
    r = sel(f, cmp(f, LLVMRealOEQ, u1, K(f, 1.0)), t, r);
    if (big)
        r = sel(f, big, lu, r);
    return sel(f, cmp(f, LLVMRealOEQ, u, K(f, INFINITY)), u, r);
}

/* log1p: <= 2 ULP; NaN below -1, -inf at -1. */
static LLVMValueRef vm_log1pf(fx *f, LLVMValueRef x)
{
    LLVMValueRef u = add(f, x, K(f, 1.0));
    LLVMValueRef r = log1p_or_log2x(f, x, NULL, NULL);
    r = sel(f, cmp(f, LLVMRealOLT, u, K(f, 0.0)), K(f, NAN), r);
    r = sel(f, cmp(f, LLVMRealOEQ, u, K(f, 0.0)), K(f, -INFINITY), r);
    return keep_nan(f, x, r);
}

/* log1p(e^y) (softplus): max(y, 0) + log1p(e^-|y|), no overflow, u =
 * 1 + e^-|y| in [1, 2] so log's reduction is a select: log(u) + c / u
 * with c = e^-|y| - (u - 1) (exact), 1/u to 9% by 1.5 - u/2 (c is below
 * half an ULP of u: 0.2 ULP at most). As eager's composition, inf above
 * 88.72 (where its e^y overflows). <= 2 ULP. */
#define EXPF_MAX 88.72283172607421875   /* the largest float with e^x finite */
static LLVMValueRef vm_log1p_expf(fx *f, LLVMValueRef y)
{
    LLVMValueRef e = vm_expf(f, neg(f, fabs_(f, y)));
    LLVMValueRef u = add(f, e, K(f, 1.0));
    LLVMValueRef um1 = vsub(f, u, K(f, 1.0));
    LLVMValueRef c = vsub(f, e, um1);
    LLVMValueRef up = cmp(f, LLVMRealOGT, u, K(f, M_SQRT2));
    LLVMValueRef lm = log1p_poly(f, sel(f, up, fma3(f, u, K(f, 0.5), K(f, -1.0)), um1));
    lm = fma3(f, c, fma3(f, u, K(f, -0.5), K(f, 1.5)), lm);
    LLVMValueRef l = plus_e_ln2(f, sel(f, up, K(f, 1.0), K(f, 0.0)), lm);
    LLVMValueRef r = add(f, sel(f, cmp(f, LLVMRealOGT, y, K(f, 0.0)), y, K(f, 0.0)), l);
    return sel(f, cmp(f, LLVMRealOGT, y, K(f, EXPF_MAX)), K(f, INFINITY), r);
}

/* ---------- hyperbolic ---------- */

/* tanh(a) = a + a^3 T(a^2) on [0, 0.625] (0.07 ULP) */
static const double TANH_T[] = { -3.333328068e-01, 1.333144158e-01, -5.373971537e-02, 2.063908800e-02,
                                 -5.704987328e-03 };

/* tanh: <= 2 ULP. Above 0.625: (e^2a - 1) / (e^2a + 1) from expm1 (no
 * cancellation), 1 from 9.01 on. */
static LLVMValueRef vm_tanhf(fx *f, LLVMValueRef x)
{
    LLVMValueRef a = fabs_(f, x);
    LLVMValueRef z = mul(f, a, a);
    LLVMValueRef p = fma3(f, mul(f, a, z), horner(f, z, TANH_T, 5), a);
    LLVMValueRef a2 = mul(f, bin(f, "llvm.minnum", a, K(f, 9.5)), K(f, 2.0));
    LLVMValueRef nf, m = exp_reduce(f, a2, &nf);
    LLVMValueRef s = pow2i(f, LLVMBuildFPToSI(f->B, nf, f->it, ""));   /* n <= 28 */
    LLVMValueRef em1 = fma3(f, m, s, vsub(f, s, K(f, 1.0)));
    LLVMValueRef q = vdiv(f, em1, add(f, em1, K(f, 2.0)));
    LLVMValueRef r = sel(f, cmp(f, LLVMRealOLT, a, K(f, 0.625)), p, q);
    return keep_nan(f, x, copysign_(f, r, x));
}

/* sigmoid: 1 / (1 + e^-x), <= 2 ULP (0 below -88.7 as eager's). */
static LLVMValueRef vm_sigmoidf(fx *f, LLVMValueRef x)
{
    return vdiv(f, K(f, 1.0), add(f, K(f, 1.0), vm_expf(f, neg(f, x))));
}

/* e^a / 2 for a >= 0 (NaN and +inf kept): one reduction, scaled by
 * 2^(n-1), so it overflows only where e^a / 2 does (a > 89.4). <= 1 ULP. */
static LLVMValueRef exp_half(fx *f, LLVMValueRef a)
{
    LLVMValueRef nf, m = exp_reduce(f, bin(f, "llvm.minnum", a, K(f, 90.0)), &nf);
    return keep_nan(f, a, scale2(f, add(f, m, K(f, 1.0)), vsub(f, nf, K(f, 1.0))));
}

/* sinh(a) = a + a^3 S(a^2) on [0, 1] (0.001 half-ULP) */
static const double SINH_S[] = { 1.666666716e-01, 8.333349600e-03, 1.983615948e-04, 2.816951110e-06 };

/* sinh: the odd polynomial below 1, h - 1/(4h) with h = e^a / 2 above
 * (the difference cancels by at most coth(1) = 1.31). <= 2 ULP. */
static LLVMValueRef vm_sinhf(fx *f, LLVMValueRef x)
{
    LLVMValueRef a = fabs_(f, x);
    LLVMValueRef h = exp_half(f, a);
    LLVMValueRef big = vsub(f, h, vdiv(f, K(f, 0.25), h));
    LLVMValueRef small = fma3(f, mul(f, a, mul(f, a, a)), horner(f, mul(f, a, a), SINH_S, 4), a);
    LLVMValueRef r = sel(f, cmp(f, LLVMRealOLT, a, K(f, 1.0)), small, big);
    return keep_nan(f, x, copysign_(f, r, x));
}

/* cosh: h + 1/(4h) with h = e^a / 2. <= 2 ULP. */
static LLVMValueRef vm_coshf(fx *f, LLVMValueRef x)
{
    LLVMValueRef h = exp_half(f, fabs_(f, x));
    return add(f, h, vdiv(f, K(f, 0.25), h));
}

/* asinh: log1p(a + a^2 / (1 + sqrt(1 + a^2))), log(2a) from 2^12 on (one
 * logarithm for both). <= 2 ULP. */
static LLVMValueRef vm_asinhf(fx *f, LLVMValueRef x)
{
    LLVMValueRef a = fabs_(f, x);
    LLVMValueRef big = cmp(f, LLVMRealOGE, a, K(f, 4096.0));
    LLVMValueRef as = sel(f, big, K(f, 1.0), a);
    LLVMValueRef z = mul(f, as, as);
    LLVMValueRef t = add(f, as, vdiv(f, z, add(f, K(f, 1.0), un(f, "llvm.sqrt", add(f, z, K(f, 1.0))))));
    return keep_nan(f, x, copysign_(f, log1p_or_log2x(f, t, a, big), x));
}

/* acosh: log1p(t + sqrt(2t + t^2)) with t = x - 1, log(2x) from 2^12 on;
 * NaN below 1. <= 2 ULP. */
static LLVMValueRef vm_acoshf(fx *f, LLVMValueRef x)
{
    LLVMValueRef big = cmp(f, LLVMRealOGE, x, K(f, 4096.0));
    LLVMValueRef t = vsub(f, sel(f, big, K(f, 1.0), x), K(f, 1.0));
    LLVMValueRef s = un(f, "llvm.sqrt", fma3(f, t, t, mul(f, t, K(f, 2.0))));
    LLVMValueRef r = log1p_or_log2x(f, add(f, t, s), x, big);
    r = sel(f, cmp(f, LLVMRealOLT, x, K(f, 1.0)), K(f, NAN), r);
    return keep_nan(f, x, r);
}

/* atanh: log1p(2a / (1 - a)) / 2; +-inf at +-1, NaN beyond. */
static LLVMValueRef vm_atanhf(fx *f, LLVMValueRef x)
{
    LLVMValueRef a = fabs_(f, x);
    LLVMValueRef r = mul(f, vm_log1pf(f, vdiv(f, mul(f, a, K(f, 2.0)), vsub(f, K(f, 1.0), a))), K(f, 0.5));
    r = sel(f, cmp(f, LLVMRealOGT, a, K(f, 1.0)), K(f, NAN), r);
    return keep_nan(f, x, copysign_(f, r, x));
}

/* ---------- erf ---------- */

/* erf(a) = a E(a^2) on [0, 1.25] (0.4 ULP); erfc(a) = Q(a - 2.5) on
 * [1.25, 3.92] (absolute 2e-8: 0.35 ULP of the result); erf rounds to 1
 * from 3.92 on. */
static const double ERF_E[] = { 1.128379107e+00, -3.761247993e-01, 1.128219441e-01, -2.680491656e-02,
                                5.109996069e-03, -7.426096709e-04, 6.202449003e-05 };
#define ERF_C0_HI 1.12837922573089599609375   /* float(2/sqrt(pi)) */
#define ERF_C0_LO -5.8635382e-8                 /* 2/sqrt(pi) - ERF_C0_HI */
static const double ERFC_Q[] = { 4.069344432e-04, -2.178182825e-03, 5.446586758e-03, -8.351812139e-03,
                                 8.615335450e-03, -6.108638830e-03, 2.819346730e-03, -5.621812306e-04,
                                 -2.893173369e-04, 2.735305461e-04, -5.960210910e-05, -1.977252759e-05,
                                 8.509621694e-06 };

/* erf: <= 1.5 ULP. */
static LLVMValueRef vm_erff(fx *f, LLVMValueRef x)
{
    LLVMValueRef a = fabs_(f, x);
    /* a (c0 + z E'(z)) with c0 = 2/sqrt(pi) in two parts: one part alone
     * would be 0.5 ULP off for small a */
    LLVMValueRef z = mul(f, a, a);
    LLVMValueRef t = fma3(f, horner(f, z, ERF_E + 1, 6), z, K(f, ERF_C0_LO));
    LLVMValueRef small = fma3(f, a, K(f, ERF_C0_HI), mul(f, a, t));
    LLVMValueRef s = vsub(f, clamp_hi(f, a, 3.92), K(f, 2.5));   /* exact (Sterbenz) */
    LLVMValueRef big = vsub(f, K(f, 1.0), horner(f, s, ERFC_Q, 13));
    LLVMValueRef r = sel(f, cmp(f, LLVMRealOLT, a, K(f, 1.25)), small, big);
    return copysign_(f, r, x);   /* NaN: through s */
}

/* erfc(a) = e^(-a^2) u P(u), u = 1 / (1 + a/2), on [0, 10.3] (relative
 * 0.03 ULP; evaluated in double: in float its rounding costs 1.8 ULP) */
static const double ERFC_P[] = { 2.820887566e-01, 2.822469771e-01, 2.452335060e-01, 1.852856278e-01,
                                 5.598643050e-02, 3.278565034e-02, -1.781200245e-02, -2.939465940e-01,
                                 3.843279183e-01, -1.921519190e-01, 3.595565259e-02 };

/* e u P(u) for a in [0, 10.3] (NaN kept) and e = e^(-a^2) computed by the
 * caller. The float rounding of u and of P's last steps would cost 2 ULP:
 * u is 1 / (1 + a/2) to a float quotient refined by one Newton step in
 * double, P's terms from u^2 on are summed in float on that quotient (their
 * errors shrink by u^2 and the terms they feed), the last two steps and the
 * products in double, rounded once. */
static LLVMValueRef erfc_tail(fx *f, LLVMValueRef e, LLVMValueRef a)
{
    fx d = as_double(f);
    LLVMValueRef ad = LLVMBuildFPExt(f->B, a, d.t, "");
    LLVMValueRef den = fma3(&d, ad, K(&d, 0.5), K(&d, 1.0));
    LLVMValueRef uf = vdiv(f, K(f, 1.0), fma3(f, a, K(f, 0.5), K(f, 1.0)));
    LLVMValueRef u0 = LLVMBuildFPExt(f->B, uf, d.t, "");
    LLVMValueRef u = fma3(&d, u0, fma3(&d, neg(&d, den), u0, K(&d, 1.0)), u0);
    LLVMValueRef p = LLVMBuildFPExt(f->B, horner(f, uf, ERFC_P + 2, 9), d.t, "");
    p = fma3(&d, fma3(&d, p, u, K(&d, ERFC_P[1])), u, K(&d, ERFC_P[0]));
    LLVMValueRef g = mul(&d, u, p);
    return LLVMBuildFPTrunc(f->B, mul(&d, LLVMBuildFPExt(f->B, e, d.t, ""), g), f->t, "");
}

/* erfc_tail in float32 alone: u and the products rounded in float (1.8
 * ULP more, <= 4 ULP in all): for kernels whose results are rounded to
 * half precision (vm.half_out), where 4 float32 ULPs are 2^-11 of a
 * bfloat16 ULP and 2^-8 of a float16 one. 2.5x faster than erfc_tail. */
static LLVMValueRef erfc_tail_f32(fx *f, LLVMValueRef e, LLVMValueRef a)
{
    LLVMValueRef u = vdiv(f, K(f, 1.0), fma3(f, a, K(f, 0.5), K(f, 1.0)));
    return mul(f, e, mul(f, u, horner(f, u, ERFC_P, 11)));
}

static LLVMValueRef erfc_tail_of(fx *f, LLVMValueRef e, LLVMValueRef a)
{
    return f->v->half_out ? erfc_tail_f32(f, e, a) : erfc_tail(f, e, a);
}

/* e^(-s a^2) for s = 1 or 1/2 (exact scalings) with a^2 = hi + lo exact:
 * e^(-s hi) (1 - s lo) where the target has FMA (|lo| <= half an ulp of
 * hi); otherwise Dekker's split, a_hi (12 bits) squared exactly, e^(-s lo)
 * by its Taylor series (|s lo| < 0.05). */
static LLVMValueRef exp_neg_sq(fx *f, LLVMValueRef a, double s)
{
    LLVMValueRef nf, hi, lo, m, e;
    if (f->v->fma) {
        hi = mul(f, a, a);
        lo = fma_ex(f, a, a, neg(f, hi));
        m = exp_reduce(f, mul(f, hi, K(f, -s)), &nf);
        e = scale2(f, add(f, m, K(f, 1.0)), nf);
        return fma3(f, mul(f, e, K(f, -s)), lo, e);
    }
    LLVMValueRef bits = LLVMBuildAnd(f->B, LLVMBuildBitCast(f->B, a, f->it, ""), KI(f, (int64_t)0xfffff000), "");
    LLVMValueRef ah = LLVMBuildBitCast(f->B, bits, f->t, "");
    hi = mul(f, ah, ah);
    lo = mul(f, mul(f, vsub(f, a, ah), add(f, a, ah)), K(f, s));
    static const double T[] = { 1.0, -1.0, 0.5, -1.0 / 6, 1.0 / 24 };
    m = exp_reduce(f, mul(f, hi, K(f, -s)), &nf);
    e = scale2(f, add(f, m, K(f, 1.0)), nf);
    return mul(f, e, horner(f, lo, T, 5));
}

/* erfc: <= 2 ULP; 2 at -inf, 0 from 10.06 on; 2 - erfc(-x) below 0. */
static LLVMValueRef vm_erfcf(fx *f, LLVMValueRef x)
{
    LLVMValueRef a = clamp_hi(f, fabs_(f, x), 10.3);   /* NaN kept */
    LLVMValueRef r = erfc_tail_of(f, exp_neg_sq(f, a, 1.0), a);
    return sel(f, cmp(f, LLVMRealOLT, x, K(f, 0.0)), vsub(f, K(f, 2.0), r), r);
}

/* ndtr (standard normal CDF): <= 2 ULP. For x < 0, erfc(a) / 2 with
 * a = -x / sqrt 2 and e^(-a^2) taken from x^2 / 2 directly (a's rounding
 * would cost 2a^2 half-ULPs in the tail); x >= 0: 1 - that. */
static LLVMValueRef vm_ndtrf(fx *f, LLVMValueRef x)
{
    LLVMValueRef ax = clamp_hi(f, fabs_(f, x), 14.5);   /* NaN kept */
    LLVMValueRef a = mul(f, ax, K(f, M_SQRT1_2));
    LLVMValueRef lo = mul(f, erfc_tail_of(f, exp_neg_sq(f, ax, 0.5), a), K(f, 0.5));
    return sel(f, cmp(f, LLVMRealOLT, x, K(f, 0.0)), lo, vsub(f, K(f, 1.0), lo));
}

/* GELU, tanh form: x / (1 + e^w), w = x t, t = k + k 0.044715 x^2, k =
 * -2 sqrt(2/pi); <= 3 ULP. e^w multiplies w's relative error by |w|, so
 * w is carried as w + lo with the rounding errors of x^2, t (k in two
 * parts) and x t (FMA residuals; without FMA, w is formed in double):
 * e^w (1 + lo). */
#define GT_K0_HI -1.5957691669464111328125   /* float(k) */
#define GT_K0_LO 4.534068032135963e-8        /* k - GT_K0_HI */
#define GT_C1_HI -0.07135481387376785            /* float(0.044715 k) */
#define GT_C1_LO -2.3988323966106506e-09         /* 0.044715 k - GT_C1_HI */
static LLVMValueRef gelu_tanh_core(fx *f, LLVMValueRef x)
{
    if (!f->v->fma) {   /* w formed in double instead */
        fx d = as_double(f);
        const double k = -2.0 * sqrt(2.0 / M_PI);
        LLVMValueRef xd = LLVMBuildFPExt(f->B, x, d.t, "");
        LLVMValueRef wd = mul(&d, xd, fma3(&d, mul(&d, xd, xd), K(&d, k * 0.044715), K(&d, k)));
        LLVMValueRef w = LLVMBuildFPTrunc(f->B, wd, f->t, "");
        LLVMValueRef lo = LLVMBuildFPTrunc(f->B, vsub(&d, wd, LLVMBuildFPExt(f->B, w, d.t, "")), f->t, "");
        lo = sel(f, cmp(f, LLVMRealOLT, fabs_(f, lo), K(f, INFINITY)), lo, K(f, 0.0));
        LLVMValueRef e = vm_expf(f, w);
        e = sel(f, cmp(f, LLVMRealOLT, e, K(f, INFINITY)), fma3(f, e, lo, e), e);
        return vdiv(f, x, add(f, e, K(f, 1.0)));
    }
    const double c1 = GT_C1_HI;
    LLVMValueRef x2 = mul(f, x, x);
    LLVMValueRef x2lo = fma_ex(f, x, x, neg(f, x2));
    /* t = p + k0 with p = x^2 c1 = p + plo exactly, the sum's error by
     * Fast2Sum on whichever of p, k0 is larger */
    LLVMValueRef p = mul(f, x2, K(f, c1));
    LLVMValueRef plo = fma_ex(f, x2, K(f, c1), neg(f, p));
    LLVMValueRef t = add(f, p, K(f, GT_K0_HI));
    LLVMValueRef big = cmp(f, LLVMRealOGT, fabs_(f, p), K(f, -GT_K0_HI));
    LLVMValueRef e1 = vsub(f, K(f, GT_K0_HI), vsub(f, t, p)), e2 = vsub(f, p, vsub(f, t, K(f, GT_K0_HI)));
    LLVMValueRef et = add(f, add(f, sel(f, big, e1, e2), plo),
                          fma3(f, x2lo, K(f, c1), fma3(f, x2, K(f, GT_C1_LO), K(f, GT_K0_LO))));
    LLVMValueRef w = mul(f, x, t);
    LLVMValueRef lo = fma3(f, x, et, fma_ex(f, x, t, neg(f, w)));
    lo = sel(f, cmp(f, LLVMRealOLT, fabs_(f, lo), K(f, INFINITY)), lo, K(f, 0.0));   /* w infinite */
    LLVMValueRef e = vm_expf(f, w);
    e = sel(f, cmp(f, LLVMRealOLT, e, K(f, INFINITY)), fma3(f, e, lo, e), e);
    return vdiv(f, x, add(f, e, K(f, 1.0)));
}

/* ---------- trigonometric ---------- */

/* sin(r) = r + r^3 S(r^2), cos(r) = 1 - r^2/2 + r^4 C(r^2) on [0, pi/4]
 * (0.06 ULP) */
static const double SIN_S[] = { -1.666665524e-01, 8.332160302e-03, -1.951528393e-04 };
static const double COS_C[] = { 4.166664556e-02, -1.388731645e-03, 2.443315680e-05 };
#define TRIG_MAX 1048576.0   /* |x| below: reduced in double, exact enough */

/* The fast lanes' value, or SLEEF's u10 function for every lane when any
 * lane is at or beyond TRIG_MAX (or NaN): a branch, so the common case
 * pays one compare. */
static LLVMValueRef trig_fallback(fx *f, LLVMValueRef x, LLVMValueRef fast, LLVMValueRef big, const char *fn)
{
    LLVMValueRef any = big;
    if (f->w > 1) {
        LLVMTypeRef bt = LLVMTypeOf(big);
        any = intr(f, "llvm.vector.reduce.or", bt, &big, 1);
    }
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(f->B);
    LLVMBasicBlockRef slow = LLVMAppendBasicBlockInContext(f->v->C, f->v->fn, "vm_slow");
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(f->v->C, f->v->fn, "vm_join");
    LLVMBuildCondBr(f->B, any, slow, join);
    LLVMPositionBuilderAtEnd(f->B, slow);
    LLVMValueRef s = vm_sleef(f->v, fn, "_u10", &x, 1);
    s = sel(f, big, s, fast);
    LLVMBasicBlockRef slow_end = LLVMGetInsertBlock(f->B);
    LLVMBuildBr(f->B, join);
    LLVMPositionBuilderAtEnd(f->B, join);
    LLVMValueRef phi = LLVMBuildPhi(f->B, f->t, "");
    LLVMValueRef vals[2] = { fast, s };
    LLVMBasicBlockRef from[2] = { pre, slow_end };
    LLVMAddIncoming(phi, vals, from, 2);
    return phi;
}

/* x = k pi/2 + r in double (pi/2 in two parts, the first 33 bits: k times
 * it exact below TRIG_MAX); r to float, the quadrant k as i32. */
static void trig_reduce(fx *f, LLVMValueRef x, LLVMValueRef *r, LLVMValueRef *q)
{
    fx d = as_double(f);
    LLVMTypeRef dt = d.t;
    const double hi = 1.5707963267341256, lo = 6.077100506506192e-11;   /* hi + lo = pi/2 */
    LLVMValueRef xd = LLVMBuildFPExt(f->B, x, dt, "");
    LLVMValueRef k = un(&d, "llvm.roundeven", mul(&d, xd, K(&d, 2.0 / M_PI)));
    LLVMValueRef rd = fma3(&d, k, K(&d, -hi), xd);
    rd = fma3(&d, k, K(&d, -lo), rd);
    *r = LLVMBuildFPTrunc(f->B, rd, f->t, "");
    *q = LLVMBuildFPToSI(f->B, k, f->it, "");
}

static void sincos_poly(fx *f, LLVMValueRef r, LLVMValueRef *s, LLVMValueRef *c)
{
    LLVMValueRef z = mul(f, r, r);
    *s = fma3(f, mul(f, r, z), horner(f, z, SIN_S, 3), r);
    LLVMValueRef t = fma3(f, mul(f, z, z), horner(f, z, COS_C, 3), mul(f, z, K(f, -0.5)));
    *c = add(f, K(f, 1.0), t);
}

static LLVMValueRef bit_set(fx *f, LLVMValueRef q, int bit)
{
    LLVMValueRef b = LLVMBuildAnd(f->B, q, KI(f, bit), "");
    return LLVMBuildICmp(f->B, LLVMIntNE, b, KI(f, 0), "");
}

/* sin, cos: <= 1 ULP below 2^20; beyond (and inf, NaN) SLEEF's u10. */
static LLVMValueRef vm_sincosf(fx *f, LLVMValueRef x, int want_cos)
{
    LLVMValueRef big = cmp(f, LLVMRealUGE, fabs_(f, x), K(f, TRIG_MAX));
    LLVMValueRef xs = sel(f, big, K(f, 0.0), x);
    LLVMValueRef r, q, s, c;
    trig_reduce(f, xs, &r, &q);
    sincos_poly(f, r, &s, &c);
    if (want_cos)
        q = LLVMBuildAdd(f->B, q, KI(f, 1), "");
    LLVMValueRef v = sel(f, bit_set(f, q, 1), c, s);
    v = sel(f, bit_set(f, q, 2), neg(f, v), v);
    if (!want_cos)
        v = sel(f, cmp(f, LLVMRealOEQ, x, K(f, 0.0)), x, v);   /* sin(-0) = -0 */
    return trig_fallback(f, x, v, big, want_cos ? "cos" : "sin");
}

/* tan: s / c, or -c / s in odd quadrants; <= 2 ULP below 2^20. */
static LLVMValueRef vm_tanf(fx *f, LLVMValueRef x)
{
    LLVMValueRef big = cmp(f, LLVMRealUGE, fabs_(f, x), K(f, TRIG_MAX));
    LLVMValueRef xs = sel(f, big, K(f, 0.0), x);
    LLVMValueRef r, q, s, c;
    trig_reduce(f, xs, &r, &q);
    sincos_poly(f, r, &s, &c);
    LLVMValueRef odd = bit_set(f, q, 1);
    LLVMValueRef v = vdiv(f, sel(f, odd, neg(f, c), s), sel(f, odd, s, c));
    v = sel(f, cmp(f, LLVMRealOEQ, x, K(f, 0.0)), x, v);
    return trig_fallback(f, x, v, big, "tan");
}

/* atan(t) = t + t^3 A(t^2) on [0, tan(pi/8)] (0.01 ULP) */
static const double ATAN_A[] = { -3.333331645e-01, 1.999847144e-01, -1.424352974e-01, 1.059378684e-01,
                                 -6.078150123e-02 };
#define PIO2_HI 1.57079637050628662109375    /* float(pi/2) */
#define PIO2_LO -4.37113900018624283e-8      /* pi/2 - PIO2_HI */
#define PIO4_HI 0.785398185253143310546875
#define PIO4_LO -2.18556950009312142e-8
#define PI_HI 3.1415927410125732421875
#define PI_LO -8.74227800037248566e-8

/* atan of a >= 0 (inf and NaN included) as hi + lo (hi: 0, pi/4 or pi/2
 * rounded; lo: the rest): reduced to [0, tan(pi/8)] by (a - 1) / (a + 1)
 * above tan(pi/8) and -1/a above tan(3pi/8). */
static LLVMValueRef atan_parts(fx *f, LLVMValueRef a, LLVMValueRef *lo)
{
    LLVMValueRef big = cmp(f, LLVMRealOGT, a, K(f, 2.414213562373095));
    LLVMValueRef mid = cmp(f, LLVMRealOGT, a, K(f, 0.4142135623730950));
    LLVMValueRef num = sel(f, big, K(f, -1.0), sel(f, mid, vsub(f, a, K(f, 1.0)), a));
    LLVMValueRef den = sel(f, big, a, sel(f, mid, add(f, a, K(f, 1.0)), K(f, 1.0)));
    LLVMValueRef t = vdiv(f, num, den);
    LLVMValueRef z = mul(f, t, t);
    LLVMValueRef p = fma3(f, mul(f, t, z), horner(f, z, ATAN_A, 5), t);
    LLVMValueRef bhi = sel(f, big, K(f, PIO2_HI), sel(f, mid, K(f, PIO4_HI), K(f, 0.0)));
    LLVMValueRef blo = sel(f, big, K(f, PIO2_LO), sel(f, mid, K(f, PIO4_LO), K(f, 0.0)));
    *lo = add(f, p, blo);
    return bhi;
}

static LLVMValueRef atan_pos(fx *f, LLVMValueRef a)
{
    LLVMValueRef lo, hi = atan_parts(f, a, &lo);
    return add(f, hi, lo);
}

/* atan: <= 1.5 ULP. */
static LLVMValueRef vm_atanf(fx *f, LLVMValueRef x)
{
    return keep_nan(f, x, copysign_(f, atan_pos(f, fabs_(f, x)), x));
}

/* atan2: <= 2 ULP; the signed zeros and infinities as C's atan2. */
static LLVMValueRef vm_atan2f(fx *f, LLVMValueRef y, LLVMValueRef x)
{
    LLVMValueRef ax = fabs_(f, x), ay = fabs_(f, y);
    LLVMValueRef mx = bin(f, "llvm.maxnum", ax, ay), mn = bin(f, "llvm.minnum", ax, ay);
    LLVMValueRef ratio = vdiv(f, mn, mx);
    ratio = sel(f, cmp(f, LLVMRealOEQ, mx, K(f, 0.0)), K(f, 0.0), ratio);
    ratio = sel(f, cmp(f, LLVMRealOEQ, mn, K(f, INFINITY)), K(f, 1.0), ratio);
    /* kept as hi + lo through pi/2 - a and pi - a: the hi parts subtract
     * exactly (multiples of float(pi/4)), one rounding at the end */
    LLVMValueRef lo, hi = atan_parts(f, ratio, &lo);
    LLVMValueRef sw = cmp(f, LLVMRealOGT, ay, ax);
    hi = sel(f, sw, vsub(f, K(f, PIO2_HI), hi), hi);
    lo = sel(f, sw, vsub(f, K(f, PIO2_LO), lo), lo);
    LLVMValueRef xneg = LLVMBuildICmp(f->B, LLVMIntSLT, LLVMBuildBitCast(f->B, x, f->it, ""), KI(f, 0), "");
    hi = sel(f, xneg, vsub(f, K(f, PI_HI), hi), hi);
    lo = sel(f, xneg, vsub(f, K(f, PI_LO), lo), lo);
    LLVMValueRef a = add(f, hi, lo);
    LLVMValueRef r = copysign_(f, a, y);
    return sel(f, LLVMBuildOr(f->B, isnan_(f, x), isnan_(f, y), ""), add(f, x, y), r);
}

/* asin(a) = a + a^3 B(a^2) on [0, 1/2] (0.08 ULP) */
static const double ASIN_B[] = { 1.666675210e-01, 7.495297492e-02, 4.547037557e-02, 2.417952195e-02,
                                 4.216629639e-02 };

/* asin of |x| for |x| <= 1/2, else of sqrt((1 - |x|) / 2) (asin(a) =
 * pi/2 - 2 asin(that)); *hi: which */
static LLVMValueRef asin_core(fx *f, LLVMValueRef a, LLVMValueRef *hi)
{
    *hi = cmp(f, LLVMRealOGT, a, K(f, 0.5));
    LLVMValueRef z = sel(f, *hi, mul(f, vsub(f, K(f, 1.0), a), K(f, 0.5)), mul(f, a, a));
    LLVMValueRef v = sel(f, *hi, un(f, "llvm.sqrt", z), a);
    return fma3(f, mul(f, v, z), horner(f, z, ASIN_B, 5), v);
}

/* asin: <= 2 ULP, NaN beyond +-1. */
static LLVMValueRef vm_asinf(fx *f, LLVMValueRef x)
{
    LLVMValueRef hi, q = asin_core(f, fabs_(f, x), &hi);
    LLVMValueRef big = add(f, fma3(f, q, K(f, -2.0), K(f, PIO2_HI)), K(f, PIO2_LO));
    return keep_nan(f, x, copysign_(f, sel(f, hi, big, q), x));
}

/* acos: <= 2 ULP: pi/2 - asin(x) near 0, 2q (x > 1/2), pi - 2q (x < -1/2). */
static LLVMValueRef vm_acosf(fx *f, LLVMValueRef x)
{
    LLVMValueRef hi, q = asin_core(f, fabs_(f, x), &hi);
    LLVMValueRef mid = add(f, vsub(f, K(f, PIO2_HI), copysign_(f, q, x)), K(f, PIO2_LO));
    LLVMValueRef pos = mul(f, q, K(f, 2.0));
    LLVMValueRef negv = add(f, fma3(f, q, K(f, -2.0), K(f, PI_HI)), K(f, PI_LO));
    LLVMValueRef r = sel(f, hi, sel(f, cmp(f, LLVMRealOGT, x, K(f, 0.0)), pos, negv), mid);
    return keep_nan(f, x, r);
}

/* ---------- dispatch ---------- */

LLVMValueRef vm_sleef(vm *v, const char *fn, const char *acc, LLVMValueRef *a, int n)
{
    LLVMBuilderRef B = v->B;
    LLVMTypeRef t = LLVMTypeOf(a[0]);
    int w = LLVMGetTypeKind(t) == LLVMVectorTypeKind ? (int)LLVMGetVectorSize(t) : 1;
    LLVMTypeRef et = w > 1 ? LLVMGetElementType(t) : t;
    LLVMTypeRef i32 = LLVMInt32TypeInContext(v->C);
    int dbl = LLVMGetTypeKind(et) == LLVMDoubleTypeKind;
    char name[64];
    LLVMTypeRef pt[3];
    int nat = v->vbits / (dbl ? 64 : 32);
    if (w == 1)
        snprintf(name, sizeof name, "Sleef_%s%s%s", fn, dbl ? "" : "f", acc);
    else
        snprintf(name, sizeof name, "Sleef_%s%s%d%s", fn, dbl ? "d" : "f", nat, acc);
    LLVMTypeRef nt = w == 1 ? et : LLVMVectorType(et, (unsigned)nat);
    for (int i = 0; i < n; i++)
        pt[i] = nt;
    LLVMTypeRef ft = LLVMFunctionType(nt, pt, (unsigned)n, 0);
    LLVMValueRef f = LLVMGetNamedFunction(v->M, name);
    if (!f)
        f = LLVMAddFunction(v->M, name, ft);
    if (w == 1 || nat == w)
        return LLVMBuildCall2(B, ft, f, a, (unsigned)n, "");
    LLVMValueRef out = LLVMGetUndef(t);
    for (int base = 0; base < w; base += nat) {
        LLVMValueRef part[3], idx[64];
        for (int i = 0; i < nat; i++)
            idx[i] = LLVMConstInt(i32, (unsigned long long)(base + i), 0);
        LLVMValueRef mask = LLVMConstVector(idx, (unsigned)nat);
        for (int k = 0; k < n; k++)
            part[k] = LLVMBuildShuffleVector(B, a[k], LLVMGetUndef(t), mask, "");
        LLVMValueRef r = LLVMBuildCall2(B, ft, f, part, (unsigned)n, "");
        for (int i = 0; i < nat; i++)
            out = LLVMBuildInsertElement(B, out, LLVMBuildExtractElement(B, r, LLVMConstInt(i32, (unsigned long long)i, 0), ""),
                                         LLVMConstInt(i32, (unsigned long long)(base + i), 0), "");
    }
    return out;
}

/* float64: SLEEF's 1-ULP functions (erfc: its only, 1.5 ULP) */
static LLVMValueRef unary_f64(vm *v, smelt_op op, LLVMValueRef x)
{
    static const struct { smelt_op op; const char *fn, *acc; } tab[] = {
        { SMELT_OP_EXP, "exp", "_u10" }, { SMELT_OP_EXP2, "exp2", "_u10" }, { SMELT_OP_EXPM1, "expm1", "_u10" },
        { SMELT_OP_LOG, "log", "_u10" }, { SMELT_OP_LOG2, "log2", "_u10" }, { SMELT_OP_LOG1P, "log1p", "_u10" },
        { SMELT_OP_LOG10, "log10", "_u10" }, { SMELT_OP_SIN, "sin", "_u10" }, { SMELT_OP_COS, "cos", "_u10" },
        { SMELT_OP_TAN, "tan", "_u10" }, { SMELT_OP_TANH, "tanh", "_u10" }, { SMELT_OP_ERF, "erf", "_u10" },
        { SMELT_OP_ERFC, "erfc", "_u15" }, { SMELT_OP_ACOS, "acos", "_u10" }, { SMELT_OP_ASIN, "asin", "_u10" },
        { SMELT_OP_ATAN, "atan", "_u10" }, { SMELT_OP_ACOSH, "acosh", "_u10" }, { SMELT_OP_ASINH, "asinh", "_u10" },
        { SMELT_OP_ATANH, "atanh", "_u10" }, { SMELT_OP_COSH, "cosh", "_u10" }, { SMELT_OP_SINH, "sinh", "_u10" },
        { SMELT_OP_LGAMMA, "lgamma", "_u10" },
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (tab[i].op == op)
            return vm_sleef(v, tab[i].fn, tab[i].acc, &x, 1);
    if (op == SMELT_OP_NDTR) {   /* 0.5 erfc(-x / sqrt 2) */
        fx f = fx_of(v, x);
        LLVMValueRef y = mul(&f, x, K(&f, -M_SQRT1_2));
        return mul(&f, vm_sleef(v, "erfc", "_u15", &y, 1), K(&f, 0.5));
    }
    if (op == SMELT_OP_GELU_TANH) {   /* x / (1 + e^(-2v)) */
        fx f = fx_of(v, x);
        const double k = -2.0 * sqrt(2.0 / M_PI);
        LLVMValueRef w = mul(&f, x, fma3(&f, mul(&f, x, x), K(&f, k * 0.044715), K(&f, k)));
        LLVMValueRef e = vm_sleef(v, "exp", "_u10", &w, 1);
        return vdiv(&f, x, add(&f, e, K(&f, 1.0)));
    }
    if (op == SMELT_OP_SIGMOID) {
        fx f = fx_of(v, x);
        LLVMValueRef n = neg(&f, x);
        LLVMValueRef e = vm_sleef(v, "exp", "_u10", &n, 1);
        return vdiv(&f, K(&f, 1.0), add(&f, K(&f, 1.0), e));
    }
    return NULL;
}

LLVMValueRef vm_unary(vm *v, smelt_op op, LLVMValueRef x)
{
    fx f = fx_of(v, x);
    if (LLVMGetTypeKind(f.et) != LLVMFloatTypeKind)
        return unary_f64(v, op, x);
    switch (op) {
    case SMELT_OP_EXP: return vm_expf(&f, x);
    case SMELT_OP_EXP2: return vm_exp2f(&f, x);
    case SMELT_OP_EXPM1: return vm_expm1f(&f, x);
    case SMELT_OP_LOG: return vm_logf(&f, x);
    case SMELT_OP_LOG2: return vm_logbf(&f, x, 1.0, 0.0, 1.44269504088896341);
    case SMELT_OP_LOG10: return vm_logbf(&f, x, 0.301025390625, 4.6050389811952135e-6, 0.434294481903251828);
    case SMELT_OP_LOG1P: return vm_log1pf(&f, x);
    case SMELT_OP_TANH: return vm_tanhf(&f, x);
    case SMELT_OP_SIGMOID: return vm_sigmoidf(&f, x);
    case SMELT_OP_SINH: return vm_sinhf(&f, x);
    case SMELT_OP_COSH: return vm_coshf(&f, x);
    case SMELT_OP_ASINH: return vm_asinhf(&f, x);
    case SMELT_OP_ACOSH: return vm_acoshf(&f, x);
    case SMELT_OP_ATANH: return vm_atanhf(&f, x);
    case SMELT_OP_ERF: return vm_erff(&f, x);
    case SMELT_OP_SIN: return vm_sincosf(&f, x, 0);
    case SMELT_OP_COS: return vm_sincosf(&f, x, 1);
    case SMELT_OP_TAN: return vm_tanf(&f, x);
    case SMELT_OP_ATAN: return vm_atanf(&f, x);
    case SMELT_OP_ASIN: return vm_asinf(&f, x);
    case SMELT_OP_ACOS: return vm_acosf(&f, x);
    case SMELT_OP_ERFC: return vm_erfcf(&f, x);
    case SMELT_OP_NDTR: return vm_ndtrf(&f, x);
    case SMELT_OP_GELU_TANH: return gelu_tanh_core(&f, x);
    case SMELT_OP_LGAMMA: return vm_sleef(v, "lgamma", "_u10", &x, 1);
    default: return NULL;
    }
}

LLVMValueRef vm_log1p_exp(vm *v, LLVMValueRef y)
{
    fx f = fx_of(v, y);
    if (LLVMGetTypeKind(f.et) != LLVMFloatTypeKind)
        return NULL;
    return vm_log1p_expf(&f, y);
}

LLVMValueRef vm_binary(vm *v, smelt_op op, LLVMValueRef a, LLVMValueRef b)
{
    LLVMValueRef args[2] = { a, b };
    fx f = fx_of(v, a);
    int f32 = LLVMGetTypeKind(f.et) == LLVMFloatTypeKind;
    if (op == SMELT_OP_ATAN2)
        return f32 ? vm_atan2f(&f, a, b) : vm_sleef(v, "atan2", "_u10", args, 2);
    if (op == SMELT_OP_POW)   /* no faster SLEEF pow keeps the contract */
        return vm_sleef(v, "pow", "_u10", args, 2);
    return NULL;
}
