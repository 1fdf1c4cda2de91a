/* nvrtc.h — NVIDIA's runtime compiler (CUDA C to PTX and cubin), opened
 * with dlopen (nvrtc.c; prototypes declared there), so every build carries
 * it and uses it where the library is present: the system's
 * (libnvrtc.so.13, .12), or the file SMELT_NVRTC names (python/smelt sets
 * it to the PyPI wheel's library, nvidia-cuda-nvrtc, when it is installed).
 * NVRTC runs on the CPU: no GPU or driver is needed to compile. */
#ifndef SMELT_KERN_NVRTC_H
#define SMELT_KERN_NVRTC_H

#include <stddef.h>

/* 1 if NVRTC loaded (once, thread-safe), else 0 with the reason in why. */
int kern_nvrtc_available(char *why, size_t n);
/* "NVRTC 13.5", or NULL if unavailable. */
const char *kern_nvrtc_version_text(void);

/* Compiles CUDA C `src` for `arch` ("sm_90"): the cubin (malloc'd, size in
 * *ncubin) and, when ptx is not NULL, the PTX text (malloc'd). 0, or -1
 * with err (NVRTC's log, truncated). */
int kern_nvrtc_compile(const char *src, const char *arch, void **cubin, size_t *ncubin, char **ptx, char *err,
                       size_t errlen);

#endif
