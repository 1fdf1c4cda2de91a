/* smelt memory helpers for large buffers. */
#ifndef SMELT_KERN_MEMORY_H
#define SMELT_KERN_MEMORY_H

#include <stddef.h>

/* Asks the OS to back the 2 MiB-aligned interior of [p, p+n) with
 * transparent huge pages before it is first touched, so a fresh multi-MB
 * output costs a few hundred page faults instead of thousands. A no-op for
 * buffers under 4 MiB or where the OS declines. Callers advise only from a
 * buffer's third use on (KERN_HUGE_AFTER): the first huge-page faults of a
 * process can make the kernel compact memory, hundreds of milliseconds for
 * a 200 MB output, which a first call should not pay. */
#define KERN_HUGE_AFTER 2
void kern_advise_huge(void *p, size_t n);
void kern_advise_huge(void *p, size_t n);

/* 64-byte aligned temporary of n bytes (2 MiB aligned when large, huge
 * pages advised when `huge`); NULL when out of memory. Release with free(). */
void *kern_alloc_temp(size_t n, int huge);

#endif
