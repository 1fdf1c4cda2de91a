/* kix.h — builders for kernel-IR index and scalar expressions (kix.c). */
#ifndef SMELT_KIX_H
#define SMELT_KIX_H

#include "kir.h"

#define KIX_NONAFFINE INT64_MIN

/* Index expressions. var sizes give ranges; a var of size 1 is const 0.
 * kix_div/kix_mod require a non-negative dividend and K >= 1. */
int32_t kix_const(kir_pool *P, int64_t c);
int32_t kix_var(kir_pool *P, int var, int64_t size);
int32_t kix_add(kir_pool *P, int32_t a, int32_t b);
int32_t kix_mul(kir_pool *P, int32_t a, int64_t c);
int32_t kix_div(kir_pool *P, int32_t a, int64_t K);
int32_t kix_mod(kir_pool *P, int32_t a, int64_t K);

/* Coefficient of `var` in e, or KIX_NONAFFINE when var occurs under a
 * division or remainder. */
int64_t kix_coef(const kir_pool *P, int32_t e, int var);
int kix_uses_var(const kir_pool *P, int32_t e, int var);

/* Scalar expressions: a blank node of the given kind (all references -1),
 * and interning (returns the id of an equal existing node if any). */
kexpr kexpr_blank(kexpr_op op, smelt_dtype dt);
int32_t kexpr_intern(kir_pool *P, kexpr e);

/* dst = an independent copy of src (its own arrays). */
void kir_pool_copy(kir_pool *dst, const kir_pool *src);
void kir_pool_free(kir_pool *P);

#endif
