/* memory.c — large-buffer allocation helpers (see memory.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "memory.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_PAGE ((uintptr_t)2 << 20)

void kern_advise_huge(void *p, size_t n)
{
#ifdef MADV_HUGEPAGE
    if (n < 2 * HUGE_PAGE)
        return;
    uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t e = ((uintptr_t)p + n) & ~(HUGE_PAGE - 1);
    if (e > a)
        (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

void *kern_alloc_temp(size_t n, int huge)
{
    size_t sz = (n + 63) / 64 * 64 + 64;
    void *p = aligned_alloc(n >= 2 * HUGE_PAGE ? HUGE_PAGE : 64, n >= 2 * HUGE_PAGE ? (sz + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE : sz);
    if (p && huge)
        kern_advise_huge(p, n);
    return p;
}
