/* smelt's Level Zero launcher for SPIR-V kernels on Intel GPUs (the SPIR-V
 * back end's runtime next to opencl.h, with the same shape).
 *
 * Modules are SPIR-V in the OpenCL Kernel execution model (Physical64
 * addressing, one OpEntryPoint Kernel per kernel, every kernel argument a
 * CrossWorkgroup pointer). libze_loader is opened with dlopen on first use;
 * without it, a driver or a GPU, kern_ze_available says why and every
 * other function fails with "Level Zero unavailable: <reason>".
 *
 * One device per process: the first GPU of the first driver that has one,
 * with one context and one synchronous immediate command list, made once
 * and kept until exit. Launches share that list and are serialised by
 * one lock; each returns when its kernel has finished.
 *
 * Kernel arguments are pointers the device reaches: smelt's plans pass
 * host memory (torch's CPU tensors, their arena, the error flag), so the
 * device is taken only when it reaches system allocations
 * (sharedSystemAllocCapabilities non-zero); else Level Zero is
 * unavailable, with that reason. (torch's xpu tensors live in SYCL's own
 * context: not usable here.) Errors are a status (NULL / -1 / 0) plus a message written to
 * the caller's buffer, never an abort.
 */
#ifndef SMELT_KERN_LEVELZERO_H
#define SMELT_KERN_LEVELZERO_H

#include <stddef.h>
#include <stdint.h>

typedef struct kern_ze_module kern_ze_module;
typedef struct kern_ze_kernel kern_ze_kernel;

/* 1 if a Level Zero GPU is present, else 0 with the reason in why (n
 * bytes, may be NULL/0): "libze_loader not found", "zeInit failed:
 * 0x78000001 (no Level Zero driver)", "no Level Zero GPU device", ...
 * The first call does the work (thread-safe, once); later calls only read
 * the result. */
int kern_ze_available(char *why, size_t n);

/* "<device name> (Level Zero <major>.<minor>)" for logs; NULL if
 * unavailable. Static storage, valid until exit. */
const char *kern_ze_device_text(void);

/* 1 if the device computes float64 (module properties' fp64flags). */
int kern_ze_fp64(void);

/* A module built from the SPIR-V binary spirv[0..nbytes) for the device;
 * NULL with err (the error code and the build log, truncated to errlen)
 * on failure. spirv is not kept. Thread-safe. */
kern_ze_module *kern_ze_module_new(const void *spirv, size_t nbytes, char *err, size_t errlen);
/* Frees m; its kernels must have been freed first. */
void kern_ze_module_free(kern_ze_module *m);

/* The kernel named name in m; NULL with err. */
kern_ze_kernel *kern_ze_kernel_new(kern_ze_module *m, const char *name, char *err, size_t errlen);
void kern_ze_kernel_free(kern_ze_kernel *k);

/* Runs k once over groups work-groups of local work-items (1-D; groups
 * and local must fit in uint32, local >= 1 and within the device's group
 * size limit) with argument i the USM pointer args[i], and waits for it.
 * nargs must equal the kernel's argument count. groups == 0 does nothing
 * and returns 0. Thread-safe. 0, or -1 with err. */
int kern_ze_launch(kern_ze_kernel *k, int nargs, void *const *args, int64_t groups, int64_t local,
                   char *err, size_t errlen);

/* nbytes (> 0) of shared USM memory (zeMemAllocShared, 64-byte aligned),
 * usable by host and device; NULL with err. Free with kern_ze_free. */
void *kern_ze_alloc_shared(size_t nbytes, char *err, size_t errlen);
/* Frees a kern_ze_alloc_shared allocation; NULL is a no-op. */
void kern_ze_free(void *p);

#endif
