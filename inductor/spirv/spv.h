/* spv.h — the SPIR-V back end's pieces behind ind_backend_spirv (runtime.c). */
#ifndef SMELT_SPIRV_SPV_H
#define SMELT_SPIRV_SPV_H

#include "../plan.h"
#include "spirv.h"

/* Work-items per work-group of pointwise kernels and short-row reductions. */
#define SPV_LOCAL 64

/* codegen.c: the module of every kernel of p (entry point "k<i>" for
 * kernel i), filling p->code[i]'s slots and launch shape (nitems: work-
 * groups, grain: work-items per group). malloc'd words, count in *nwords. */
uint32_t *spv_codegen_module(smelt_plan *p, size_t *nwords);
/* Lanes per row of a reduction kernel (1: a work-item per row). */
int spv_kernel_lanes(const kir_kernel *k);
/* Points over the kernel's outer vars. */
int64_t spv_outer_points(const kir_kernel *k);

#endif
