/* vmath.h — the CPU back end's vector math layer (vmath.c).
 *
 * Every transcendental the code generator emits goes through here. float32
 * functions are inline LLVM IR (range reduction plus a polynomial fitted
 * for the function, scripts/fit_vmath.py), so they vectorise at any width
 * and schedule with the rest of a fused loop; the others call SLEEF's
 * fastest variant that keeps the accuracy contract. float64 calls SLEEF's
 * 1-ULP functions. Values are scalars or vectors of any width.
 *
 * The float32 contract (checked by benchmarks/ulp_sweep.py over all 2^32
 * inputs, and on a dense sample by tests/test_vmath.py): at most 4 ULP
 * from the float64 reference wherever eager's own error is at most 4 ULP,
 * elsewhere no worse than eager's; ±0, ±inf, NaN, denormals and the
 * overflow and underflow thresholds give eager's results. Each function's
 * own bound is written beside it in vmath.c.
 */
#ifndef SMELT_CPU_VMATH_H
#define SMELT_CPU_VMATH_H

#include <llvm-c/Core.h>

#include "../graph.h"

typedef struct vm {
    LLVMContextRef C;
    LLVMModuleRef M;
    LLVMBuilderRef B;
    LLVMValueRef fn;   /* the function being built (fallback blocks go in it) */
    int vbits;         /* native vector width in bits (SLEEF's variant) */
    int fma;           /* the target has fused multiply-add */
    int half_out;      /* every result of the kernel is rounded to float16 or
                          bfloat16: a float32 function may spend a few of its
                          last ULPs (at most 4) for speed, see vm_erfcf */
} vm;

/* op applied to x (float32 or float64, scalar or vector); NULL if op is not
 * a math function of this layer. */
LLVMValueRef vm_unary(vm *v, smelt_op op, LLVMValueRef x);
/* log1p(e^y) for float32 y (softplus, fused: no overflow below eager's
 * own at 88.72); NULL for float64 (the two functions compose there). */
LLVMValueRef vm_log1p_exp(vm *v, LLVMValueRef y);
/* pow and atan2; NULL for other ops. */
LLVMValueRef vm_binary(vm *v, smelt_op op, LLVMValueRef a, LLVMValueRef b);
/* SLEEF's fn with accuracy suffix acc ("_u10", "_u35", ...) on a value of
 * any width, split into native-width calls. */
LLVMValueRef vm_sleef(vm *v, const char *fn, const char *acc, LLVMValueRef *a, int n);

#endif
