/* cudadrv.h — NVIDIA's driver API (libcuda.so.1), opened with dlopen
 * (cudadrv.c; prototypes declared there), so every build carries the CUDA
 * back end and turns it on where a driver and a GPU are present.
 *
 * smelt shares torch's context: each device's primary context (the one
 * the CUDA runtime, and so torch, uses), retained once and made current
 * on the calling thread before each use. Streams are torch's (a CUstream
 * read through torch at call time), so smelt's launches order with eager
 * CUDA work. */
#ifndef SMELT_KERN_CUDADRV_H
#define SMELT_KERN_CUDADRV_H

#include <stddef.h>
#include <stdint.h>

typedef struct kern_cu_module kern_cu_module;

/* 1 if libcuda loaded, cuInit succeeded and a device exists (once,
 * thread-safe), else 0 with the reason in why. */
int kern_cu_available(char *why, size_t n);
/* Devices (0 if unavailable). */
int kern_cu_device_count(void);
/* "sm_90" for device dev (compute capability 9.0) into buf; 0, or -1. */
int kern_cu_arch(int dev, char *buf, size_t n);
/* "CUDA driver 13.0, NVIDIA H100 80GB HBM3 (sm_90)" (device 0), or NULL. */
const char *kern_cu_describe(void);

/* Makes device dev's primary context current on this thread (retained
 * once per process); *prev (may be NULL) receives the context that was
 * current, for kern_cu_leave. 0, or -1 with err. */
int kern_cu_enter(int dev, void **prev, char *err, size_t errlen);
/* Makes prev (kern_cu_enter's) current again, so the thread's CUDA state
 * (torch's current device among it) is as before. */
void kern_cu_leave(void *prev);

/* A module loaded from a cubin (in device dev's primary context). NULL
 * with err (the driver's message). */
kern_cu_module *kern_cu_module_load(int dev, const void *cubin, size_t n, char *err, size_t errlen);
void kern_cu_module_free(kern_cu_module *m);
/* Entry point `name` of m (a CUfunction); NULL with err. dyn_shared: the
 * dynamic shared memory its launches ask for (> 48 KiB is opted in). */
void *kern_cu_function(kern_cu_module *m, const char *name, unsigned dyn_shared, char *err, size_t errlen);

/* Launches fn on stream (a CUstream; NULL: the legacy default stream)
 * over grid x block with args (pointers to each argument's value). The
 * caller's thread has the context current (kern_cu_enter). 0, or -1. */
int kern_cu_launch(void *fn, const unsigned grid[3], const unsigned block[3], unsigned shared, void *stream,
                   void **args, char *err, size_t errlen);
/* cuMemsetD32Async(ptr, value, count, stream). 0, or -1 with err. */
int kern_cu_memset32(void *ptr, uint32_t value, size_t count, void *stream, char *err, size_t errlen);
/* Copies n bytes from device memory to host memory on stream and waits
 * for the stream. 0, or -1 with err. */
int kern_cu_read(void *host, const void *dev, size_t n, void *stream, char *err, size_t errlen);

#endif
