/* text.c — the growing string the CUDA back end writes its C in (cuda.h). */
#include "cuda.h"

#include <stdio.h>
#include <stdlib.h>

void cuda_text_vput(cuda_text *b, const char *fmt, va_list ap)
{
    for (;;) {
        va_list aq;
        va_copy(aq, ap);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, aq);
        va_end(aq);
        if (k < 0)
            abort();
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        b->cap = (b->cap + (size_t)k + 1) * 2;
        if (!(b->s = realloc(b->s, b->cap)))
            abort();
    }
}

void cuda_text_put(cuda_text *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cuda_text_vput(b, fmt, ap);
    va_end(ap);
}
