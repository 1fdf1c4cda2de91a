/* dl.h — what the run-time loaders of device libraries share (dl.c). */
#ifndef SMELT_KERN_DL_H
#define SMELT_KERN_DL_H

#include <stddef.h>

/* printf into buf[0..n) when there is one (buf may be NULL). */
void kern_say(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* dlopen (RTLD_NOW | RTLD_LOCAL) of the first of names[0..] (NULL-
 * terminated) that loads; NULL if none. */
void *kern_dlopen_first(const char *const *names);

#endif
