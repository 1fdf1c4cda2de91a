/* cuda.h — the CUDA back end's pieces behind ind_backend_cuda (runtime.c). */
#ifndef SMELT_CUDA_CUDA_H
#define SMELT_CUDA_CUDA_H

#include "../plan.h"

#include <stdarg.h>

/* text.c: a growing, 0-terminated string (the CUDA C being written). */
typedef struct cuda_text {
    char *s;
    size_t n, cap;
} cuda_text;
void cuda_text_vput(cuda_text *b, const char *fmt, va_list ap);
void cuda_text_put(cuda_text *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* codegen.c: the CUDA C of every kernel of p (kernel i: k<i>, a split
 * kernel also f<i>); fills each kernel's slots. malloc'd text. starts
 * (room for nkernels + 1, or NULL): where each kernel's text begins, then
 * the text's length (before them: the prelude every kernel needs). */
char *cuda_codegen_source(smelt_plan *p, size_t *starts);
/* Threads per row of a reduction kernel (1: a thread per row). */
int cuda_kernel_lanes(const kir_kernel *k);
int64_t cuda_outer_points(const kir_kernel *k);

#endif
