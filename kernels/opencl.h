/* smelt's OpenCL launcher for SPIR-V kernels (the SPIR-V back end's runtime).
 *
 * Modules are SPIR-V in the OpenCL Kernel execution model (Physical64
 * addressing, one OpEntryPoint Kernel per kernel, every kernel argument a
 * CrossWorkgroup pointer). libOpenCL is opened with dlopen on first use, so
 * smelt neither links nor needs it; without it (or without a device that
 * takes SPIR-V) kern_cl_available says why and nothing else works.
 *
 * One device per process: the first device of any platform whose
 * CL_DEVICE_IL_VERSION names SPIR-V, with one context and one in-order
 * queue, made once and kept until exit.
 *
 * Host memory reaches kernels in one of two ways, chosen once:
 *  - the device has fine-grained system SVM: host pointers are passed as
 *    they are (clSetKernelArgSVMPointer), nothing is copied;
 *  - otherwise (or with SMELT_OPENCL_NO_SVM=1 in the environment, read at
 *    initialisation, to test this path): each argument is wrapped in a
 *    CL_MEM_USE_HOST_PTR buffer for the launch and mapped back afterwards,
 *    so the results are in host memory when kern_cl_launch returns.
 *
 * Errors are a status (NULL / -1 / 0) plus a message written to the
 * caller's buffer, never an abort.
 */
#ifndef SMELT_KERN_OPENCL_H
#define SMELT_KERN_OPENCL_H

#include <stddef.h>
#include <stdint.h>

typedef struct kern_cl_program kern_cl_program;
typedef struct kern_cl_kernel kern_cl_kernel;

/* 1 if an OpenCL device that takes SPIR-V is present, else 0 with the
 * reason in why (n bytes, may be NULL/0): "libOpenCL.so.1 not found", "no
 * OpenCL platform", "no device takes SPIR-V", ... The first call opens
 * libOpenCL and makes the context and queue (thread-safe, once); later
 * calls only read the result. */
int kern_cl_available(char *why, size_t n);

/* "<platform>: <device> (<how host memory is passed>)", e.g.
 * "Intel(R) OpenCL: AMD EPYC (fine-grained system SVM)", for logs; NULL if
 * unavailable. Static storage, valid until exit. */
const char *kern_cl_device_text(void);

/* 1 if the device computes float64 (CL_DEVICE_DOUBLE_FP_CONFIG non-zero). */
int kern_cl_fp64(void);

/* A program built from the SPIR-V binary spirv[0..nbytes) for the device;
 * NULL with err (the failing call, its error code and the build log,
 * truncated to errlen) on failure. spirv is not kept. Thread-safe. */
kern_cl_program *kern_cl_program_new(const void *spirv, size_t nbytes, char *err, size_t errlen);
void kern_cl_program_free(kern_cl_program *p);
/* The device's binary of a built program (malloc'd, size in *nbytes;
 * NULL if the driver gives none), and a program built from such a binary
 * (the same driver and device only: callers key it by
 * kern_cl_device_text, which names both). NULL with err. */
void *kern_cl_program_binary(const kern_cl_program *p, size_t *nbytes);
kern_cl_program *kern_cl_program_from_binary(const void *bin, size_t nbytes, char *err, size_t errlen);

/* The kernel named name in p; NULL with err. Free kernels before their
 * program (the same rule as Level Zero's modules). */
kern_cl_kernel *kern_cl_kernel_new(kern_cl_program *p, const char *name, char *err, size_t errlen);
void kern_cl_kernel_free(kern_cl_kernel *k);

/* Runs k once over a 1-D range of groups work-groups of local work-items
 * (global size groups * local) with argument i the host pointer args[i],
 * to memory of nbytes[i] bytes, and waits for it. nargs must equal the
 * kernel's argument count; args[i] == NULL passes a NULL pointer.
 * nbytes is read only on the buffer path, where:
 *  - nbytes[i] == 0 (an argument the kernel does not touch) passes a
 *    1-byte dummy buffer;
 *  - arguments with the same pointer share one buffer (in-place kernels);
 *    arguments whose memory partly overlaps are refused (-1): OpenCL
 *    leaves such buffers undefined;
 *  - every argument is copied back to host memory after the kernel (free
 *    on a zero-copy device such as a CPU), so two concurrent launches must
 *    not share memory that either one writes.
 * groups == 0 does nothing and returns 0; local must be >= 1.
 * Safe to call from several threads at once, on the same kernel too.
 * 0, or -1 with err (the OpenCL call that failed and its error code). */
int kern_cl_launch(kern_cl_kernel *k, int nargs, void *const *args, const size_t *nbytes,
                   int64_t groups, int64_t local, char *err, size_t errlen);

#endif
