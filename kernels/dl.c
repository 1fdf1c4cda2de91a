/* dl.c — see dl.h. */
#include "dl.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>

void kern_say(char *buf, size_t n, const char *fmt, ...)
{
    if (!buf || !n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

void *kern_dlopen_first(const char *const *names)
{
    void *h = NULL;
    for (int i = 0; names[i] && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    return h;
}
