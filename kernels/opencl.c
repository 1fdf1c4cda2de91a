/* smelt's OpenCL launcher for SPIR-V kernels (see opencl.h for the contract). */
#include "opencl.h"
#include "dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- The subset of the OpenCL API used here ------------------------------
 * Declared here (smelt does not need the OpenCL headers): types and values
 * mirror Khronos' CL/cl_platform.h and CL/cl.h (OpenCL-Headers), functions
 * are those of the OpenCL 3.0 API specification, chapters 4 (platforms,
 * devices, contexts), 5.1 (command queues), 5.2 (buffers, mapping), 5.5 (unmapping,
 * releasing), 5.8 (programs, clCreateProgramWithIL: OpenCL 2.1), 5.9 (kernels,
 * clSetKernelArgSVMPointer: OpenCL 2.0), 5.10 (clEnqueueNDRangeKernel) and
 * 5.11 (events); checked (values, and each function pointer type against
 * its prototype) with Khronos OpenCL-Headers of 2026-08. CL_API_CALL and
 * CL_CALLBACK are empty on Linux. */
typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_ulong;
typedef cl_uint cl_bool;
typedef cl_ulong cl_bitfield; /* cl_device_type, cl_mem_flags, cl_map_flags, cl_device_svm_capabilities */
typedef struct _cl_platform_id *cl_platform_id;
typedef struct _cl_device_id *cl_device_id;
typedef struct _cl_context *cl_context;
typedef struct _cl_command_queue *cl_command_queue;
typedef struct _cl_program *cl_program;
typedef struct _cl_kernel *cl_kernel;
typedef struct _cl_mem *cl_mem;
typedef struct _cl_event *cl_event;

#define CL_SUCCESS 0
#define CL_OUT_OF_HOST_MEMORY (-6)
#define CL_TRUE 1
#define CL_PLATFORM_NAME 0x0902            /* cl_platform_info */
#define CL_DEVICE_TYPE_ALL 0xFFFFFFFF      /* cl_device_type */
#define CL_DEVICE_NAME 0x102B              /* cl_device_info */
#define CL_DEVICE_SVM_CAPABILITIES 0x1053  /* cl_device_info */
#define CL_DEVICE_IL_VERSION 0x105B        /* cl_device_info */
#define CL_DEVICE_DOUBLE_FP_CONFIG 0x1032  /* cl_device_info: 0 without float64 */
#define CL_DEVICE_SVM_FINE_GRAIN_SYSTEM (1 << 2)
#define CL_CONTEXT_PLATFORM 0x1084         /* cl_context_properties */
#define CL_MEM_READ_WRITE (1 << 0)         /* cl_mem_flags */
#define CL_MEM_USE_HOST_PTR (1 << 3)
#define CL_MAP_READ (1 << 0)               /* cl_map_flags */
#define CL_PROGRAM_BUILD_LOG 0x1183        /* cl_program_build_info */
#define CL_PROGRAM_BINARY_SIZES 0x1165     /* cl_program_info */
#define CL_PROGRAM_BINARIES 0x1166
#define CL_DRIVER_VERSION 0x102D           /* cl_device_info */
#define CL_KERNEL_NUM_ARGS 0x1191          /* cl_kernel_info */

/* Return type, name, parameters of each entry point smelt resolves. */
#define CL_FUNCS(X)                                                                               \
    X(cl_int, clGetPlatformIDs, (cl_uint, cl_platform_id *, cl_uint *))                            \
    X(cl_int, clGetPlatformInfo, (cl_platform_id, cl_uint, size_t, void *, size_t *))              \
    X(cl_int, clGetDeviceIDs, (cl_platform_id, cl_bitfield, cl_uint, cl_device_id *, cl_uint *))   \
    X(cl_int, clGetDeviceInfo, (cl_device_id, cl_uint, size_t, void *, size_t *))                  \
    X(cl_context, clCreateContext,                                                                 \
      (const intptr_t *, cl_uint, const cl_device_id *,                                            \
       void (*)(const char *, const void *, size_t, void *), void *, cl_int *))                    \
    X(cl_command_queue, clCreateCommandQueueWithProperties,                                        \
      (cl_context, cl_device_id, const cl_ulong *, cl_int *))                                      \
    X(cl_program, clCreateProgramWithIL, (cl_context, const void *, size_t, cl_int *))             \
    X(cl_int, clBuildProgram,                                                                      \
      (cl_program, cl_uint, const cl_device_id *, const char *, void (*)(cl_program, void *),      \
       void *))                                                                                    \
    X(cl_program, clCreateProgramWithBinary,                                                       \
      (cl_context, cl_uint, const cl_device_id *, const size_t *, const unsigned char **, cl_int *, cl_int *)) \
    X(cl_int, clGetProgramInfo, (cl_program, cl_uint, size_t, void *, size_t *))                   \
    X(cl_int, clGetProgramBuildInfo, (cl_program, cl_device_id, cl_uint, size_t, void *, size_t *)) \
    X(cl_int, clReleaseProgram, (cl_program))                                                      \
    X(cl_kernel, clCreateKernel, (cl_program, const char *, cl_int *))                             \
    X(cl_int, clGetKernelInfo, (cl_kernel, cl_uint, size_t, void *, size_t *))                     \
    X(cl_int, clReleaseKernel, (cl_kernel))                                                        \
    X(cl_int, clSetKernelArg, (cl_kernel, cl_uint, size_t, const void *))                          \
    X(cl_int, clSetKernelArgSVMPointer, (cl_kernel, cl_uint, const void *))                        \
    X(cl_mem, clCreateBuffer, (cl_context, cl_bitfield, size_t, void *, cl_int *))                 \
    X(cl_int, clReleaseMemObject, (cl_mem))                                                        \
    X(cl_int, clEnqueueNDRangeKernel,                                                              \
      (cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *, const size_t *,      \
       cl_uint, const cl_event *, cl_event *))                                                     \
    X(void *, clEnqueueMapBuffer,                                                                  \
      (cl_command_queue, cl_mem, cl_bool, cl_bitfield, size_t, size_t, cl_uint, const cl_event *, \
       cl_event *, cl_int *))                                                                      \
    X(cl_int, clEnqueueUnmapMemObject,                                                             \
      (cl_command_queue, cl_mem, void *, cl_uint, const cl_event *, cl_event *))                   \
    X(cl_int, clWaitForEvents, (cl_uint, const cl_event *))                                        \
    X(cl_int, clReleaseEvent, (cl_event))

/* The names of the error codes a launcher is likely to meet (cl.h). */
#define CL_ERRORS(X)                                                                          \
    X(-1, DEVICE_NOT_FOUND) X(-2, DEVICE_NOT_AVAILABLE) X(-3, COMPILER_NOT_AVAILABLE)          \
    X(-4, MEM_OBJECT_ALLOCATION_FAILURE) X(-5, OUT_OF_RESOURCES) X(-6, OUT_OF_HOST_MEMORY)    \
    X(-11, BUILD_PROGRAM_FAILURE) X(-12, MAP_FAILURE)                                         \
    X(-14, EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) X(-30, INVALID_VALUE)                   \
    X(-37, INVALID_HOST_PTR) X(-38, INVALID_MEM_OBJECT) X(-42, INVALID_BINARY)                \
    X(-44, INVALID_PROGRAM) X(-45, INVALID_PROGRAM_EXECUTABLE) X(-46, INVALID_KERNEL_NAME)    \
    X(-47, INVALID_KERNEL_DEFINITION) X(-48, INVALID_KERNEL) X(-49, INVALID_ARG_INDEX)        \
    X(-50, INVALID_ARG_VALUE) X(-51, INVALID_ARG_SIZE) X(-52, INVALID_KERNEL_ARGS)            \
    X(-54, INVALID_WORK_GROUP_SIZE) X(-55, INVALID_WORK_ITEM_SIZE) X(-59, INVALID_OPERATION)  \
    X(-61, INVALID_BUFFER_SIZE) X(-63, INVALID_GLOBAL_WORK_SIZE) X(-1001, PLATFORM_NOT_FOUND_KHR)

/* ---- The process's device, made once ------------------------------------ */

/* ok: the fields below it are usable; else why says what is missing.
 * svm: host pointers are passed as they are (fine-grained system SVM and
 * SMELT_OPENCL_NO_SVM unset); else the buffer path, with dummy the 1-byte
 * buffer passed for 0-byte arguments. Written only by cl_init. */
static struct {
    int ok;
    char why[192];
    char text[600];
#define X(ret, name, params) ret(*name) params;
    CL_FUNCS(X)
#undef X
    cl_platform_id plat;
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue queue;
    cl_mem dummy;
    int svm;
    int fp64;   /* the device computes float64 */
} CL;
static pthread_once_t cl_once = PTHREAD_ONCE_INIT;

struct kern_cl_program {
    cl_program prog;
};

/* mu serialises set-arg + enqueue: a cl_kernel's arguments are shared
 * state, and an enqueue uses the values set when it is made (clSetKernelArg,
 * spec 5.9.2), so waiting for the kernel needs no lock. */
struct kern_cl_kernel {
    cl_kernel kern;
    cl_uint nargs;
    pthread_mutex_t mu;
    char name[64];
};

static const char *cl_err_name(cl_int e)
{
    switch (e) {
#define X(v, name) case v: return "CL_" #name;
        CL_ERRORS(X)
#undef X
    default:
        return "unknown";
    }
}

/* "<call> failed: <code> (<name>)" into err, after prefix. */
static void cl_fail(char *err, size_t errlen, const char *prefix, const char *call, cl_int e)
{
    kern_say(err, errlen, "%s%s failed: %d (%s)", prefix, call, (int)e, cl_err_name(e));
}

/* Opens libOpenCL and resolves CL_FUNCS; 0, or -1 with CL.why. */
static int cl_open(void)
{
    void *h = kern_dlopen_first((const char *const[]){ "libOpenCL.so.1", "libOpenCL.so", NULL });
    if (!h) {
        kern_say(CL.why, sizeof CL.why, "libOpenCL.so.1 not found");
        return -1;
    }
#define X(ret, name, params)                                                                   \
    if (!(CL.name = (ret(*) params)dlsym(h, #name))) {                                         \
        kern_say(CL.why, sizeof CL.why, "libOpenCL has no " #name " (an OpenCL 2.1 loader is needed)"); \
        return -1;                                                                             \
    }
    CL_FUNCS(X)
#undef X
    return 0;
}

/* 1 if dev lists SPIR-V among its intermediate languages. */
static int cl_takes_spirv(cl_device_id dev)
{
    char il[1024] = "";
    if (CL.clGetDeviceInfo(dev, CL_DEVICE_IL_VERSION, sizeof il - 1, il, NULL) != CL_SUCCESS)
        return 0;
    return strstr(il, "SPIR-V") != NULL;
}

/* The first device of plat that takes SPIR-V, into CL.plat/CL.dev; 0 or -1. */
static int cl_pick_in(cl_platform_id plat)
{
    cl_device_id devs[16];
    cl_uint nd = 0;
    if (CL.clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 16, devs, &nd) != CL_SUCCESS)
        return -1;
    for (cl_uint i = 0; i < nd && i < 16; i++)
        if (cl_takes_spirv(devs[i])) {
            CL.plat = plat;
            CL.dev = devs[i];
            return 0;
        }
    return -1;
}

/* Picks the first device of any platform that takes SPIR-V; 0 or -1 with CL.why. */
static int cl_pick_device(void)
{
    cl_platform_id plats[16];
    cl_uint np = 0;
    cl_int e = CL.clGetPlatformIDs(16, plats, &np);
    if (e != CL_SUCCESS || np == 0) {
        kern_say(CL.why, sizeof CL.why, "no OpenCL platform (clGetPlatformIDs: %d)", (int)e);
        return -1;
    }
    for (cl_uint i = 0; i < np && i < 16; i++)
        if (cl_pick_in(plats[i]) == 0)
            return 0;
    kern_say(CL.why, sizeof CL.why, "no device takes SPIR-V (%u OpenCL platform%s)", np, np == 1 ? "" : "s");
    return -1;
}

/* The context, the in-order queue and the dummy buffer; 0 or -1 with CL.why. */
static int cl_make_context(void)
{
    intptr_t props[] = {CL_CONTEXT_PLATFORM, (intptr_t)CL.plat, 0};
    cl_int e = CL_SUCCESS;
    CL.ctx = CL.clCreateContext(props, 1, &CL.dev, NULL, NULL, &e);
    if (!CL.ctx || e != CL_SUCCESS)
        return cl_fail(CL.why, sizeof CL.why, "", "clCreateContext", e), -1;
    CL.queue = CL.clCreateCommandQueueWithProperties(CL.ctx, CL.dev, NULL, &e);
    if (!CL.queue || e != CL_SUCCESS)
        return cl_fail(CL.why, sizeof CL.why, "", "clCreateCommandQueueWithProperties", e), -1;
    CL.dummy = CL.clCreateBuffer(CL.ctx, CL_MEM_READ_WRITE, 1, NULL, &e);
    if (!CL.dummy || e != CL_SUCCESS)
        return cl_fail(CL.why, sizeof CL.why, "", "clCreateBuffer", e), -1;
    return 0;
}

/* Chooses how host memory is passed and writes CL.text. */
static void cl_describe(void)
{
    char plat[256] = "?", dev[256] = "?", drv[128] = "?";
    cl_bitfield caps = 0;
    CL.clGetPlatformInfo(CL.plat, CL_PLATFORM_NAME, sizeof plat - 1, plat, NULL);
    CL.clGetDeviceInfo(CL.dev, CL_DEVICE_NAME, sizeof dev - 1, dev, NULL);
    CL.clGetDeviceInfo(CL.dev, CL_DRIVER_VERSION, sizeof drv - 1, drv, NULL);
    if (CL.clGetDeviceInfo(CL.dev, CL_DEVICE_SVM_CAPABILITIES, sizeof caps, &caps, NULL) != CL_SUCCESS)
        caps = 0;
    const char *off = getenv("SMELT_OPENCL_NO_SVM");
    int no_svm = off && *off && strcmp(off, "0") != 0;
    CL.svm = (caps & CL_DEVICE_SVM_FINE_GRAIN_SYSTEM) && !no_svm;
    cl_bitfield fp64 = 0;
    if (CL.clGetDeviceInfo(CL.dev, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp64, &fp64, NULL) != CL_SUCCESS)
        fp64 = 0;
    CL.fp64 = fp64 != 0;
    const char *how = CL.svm ? "fine-grained system SVM"
                      : no_svm ? "host buffers: SMELT_OPENCL_NO_SVM"
                               : "host buffers: no system SVM";
    kern_say(CL.text, sizeof CL.text, "%s: %s, driver %s (%s)", plat, dev, drv, how);
}

static void cl_init(void)
{
    if (cl_open() || cl_pick_device() || cl_make_context())
        return;
    cl_describe();
    CL.ok = 1;
}

int kern_cl_available(char *why, size_t n)
{
    pthread_once(&cl_once, cl_init);
    if (!CL.ok)
        kern_say(why, n, "%s", CL.why);
    return CL.ok;
}

int kern_cl_fp64(void)
{
    return kern_cl_available(NULL, 0) && CL.fp64;
}

const char *kern_cl_device_text(void)
{
    return kern_cl_available(NULL, 0) ? CL.text : NULL;
}

/* 1 if available, else 0 with "OpenCL unavailable: <reason>" in err. */
static int cl_ready(char *err, size_t errlen)
{
    if (kern_cl_available(NULL, 0))
        return 1;
    kern_say(err, errlen, "OpenCL unavailable: %s", CL.why);
    return 0;
}

/* Appends prog's build log (whitespace-trimmed) to err. */
static void cl_append_log(cl_program prog, char *err, size_t errlen)
{
    size_t len = 0, used = err ? strlen(err) : 0;
    if (!err || used + 1 >= errlen)
        return;
    if (CL.clGetProgramBuildInfo(prog, CL.dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &len) != CL_SUCCESS || len < 2)
        return;
    char *log = malloc(len + 1);
    if (!log)
        return;
    if (CL.clGetProgramBuildInfo(prog, CL.dev, CL_PROGRAM_BUILD_LOG, len, log, NULL) == CL_SUCCESS) {
        log[len] = 0;
        while (len && (log[len - 1] == '\n' || log[len - 1] == ' ' || log[len - 1] == '\0'))
            log[--len] = 0;
        kern_say(err + used, errlen - used, "; build log:\n%s", log);
    }
    free(log);
}

/* Builds prog (made from IL or a binary) for the device: a program, or
 * NULL with err (the build log) and prog released. */
static kern_cl_program *cl_build(cl_program prog, char *err, size_t errlen)
{
    /* float32 division and sqrt correctly rounded, as the CPU computes them (GPUs default to 2.5 ULP) */
    cl_int e = CL.clBuildProgram(prog, 1, &CL.dev, "-cl-fp32-correctly-rounded-divide-sqrt", NULL, NULL);
    kern_cl_program *p = e == CL_SUCCESS ? malloc(sizeof *p) : NULL;
    if (!p) {
        if (e == CL_SUCCESS)
            kern_say(err, errlen, "out of memory");
        else
            cl_fail(err, errlen, "", "clBuildProgram", e), cl_append_log(prog, err, errlen);
        CL.clReleaseProgram(prog);
        return NULL;
    }
    p->prog = prog;
    return p;
}

kern_cl_program *kern_cl_program_new(const void *spirv, size_t nbytes, char *err, size_t errlen)
{
    if (!cl_ready(err, errlen))
        return NULL;
    if (!spirv || !nbytes)
        return kern_say(err, errlen, "kern_cl_program_new: empty module"), NULL;
    cl_int e = CL_SUCCESS;
    cl_program prog = CL.clCreateProgramWithIL(CL.ctx, spirv, nbytes, &e);
    if (!prog || e != CL_SUCCESS)
        return cl_fail(err, errlen, "", "clCreateProgramWithIL", e), NULL;
    return cl_build(prog, err, errlen);
}

kern_cl_program *kern_cl_program_from_binary(const void *bin, size_t nbytes, char *err, size_t errlen)
{
    if (!cl_ready(err, errlen))
        return NULL;
    if (!bin || !nbytes)
        return kern_say(err, errlen, "kern_cl_program_from_binary: empty binary"), NULL;
    cl_int e = CL_SUCCESS, status = CL_SUCCESS;
    const unsigned char *b = bin;
    cl_program prog = CL.clCreateProgramWithBinary(CL.ctx, 1, &CL.dev, &nbytes, &b, &status, &e);
    if (!prog || e != CL_SUCCESS || status != CL_SUCCESS) {
        if (prog)
            CL.clReleaseProgram(prog);
        return cl_fail(err, errlen, "", "clCreateProgramWithBinary", e != CL_SUCCESS ? e : status), NULL;
    }
    return cl_build(prog, err, errlen);
}

void *kern_cl_program_binary(const kern_cl_program *p, size_t *nbytes)
{
    size_t n = 0;
    if (!p || CL.clGetProgramInfo(p->prog, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL) != CL_SUCCESS || !n)
        return NULL;
    unsigned char *b = malloc(n);
    if (b && CL.clGetProgramInfo(p->prog, CL_PROGRAM_BINARIES, sizeof b, &b, NULL) != CL_SUCCESS) {
        free(b);
        return NULL;
    }
    *nbytes = n;
    return b;
}

void kern_cl_program_free(kern_cl_program *p)
{
    if (!p)
        return;
    CL.clReleaseProgram(p->prog);
    free(p);
}

kern_cl_kernel *kern_cl_kernel_new(kern_cl_program *p, const char *name, char *err, size_t errlen)
{
    if (!cl_ready(err, errlen))
        return NULL;
    if (!p || !name)
        return kern_say(err, errlen, "kern_cl_kernel_new: no program or no name"), NULL;
    kern_cl_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return kern_say(err, errlen, "out of memory"), NULL;
    snprintf(k->name, sizeof k->name, "%s", name);
    cl_int e = CL_SUCCESS;
    k->kern = CL.clCreateKernel(p->prog, name, &e);
    if (!k->kern || e != CL_SUCCESS) {
        kern_say(err, errlen, "kernel %s: clCreateKernel failed: %d (%s)", name, (int)e, cl_err_name(e));
        free(k);
        return NULL;
    }
    e = CL.clGetKernelInfo(k->kern, CL_KERNEL_NUM_ARGS, sizeof k->nargs, &k->nargs, NULL);
    if (e != CL_SUCCESS || pthread_mutex_init(&k->mu, NULL) != 0) {
        kern_say(err, errlen, "kernel %s: clGetKernelInfo or pthread_mutex_init failed: %d", name, (int)e);
        CL.clReleaseKernel(k->kern);
        free(k);
        return NULL;
    }
    return k;
}

void kern_cl_kernel_free(kern_cl_kernel *k)
{
    if (!k)
        return;
    CL.clReleaseKernel(k->kern);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

/* ---- Launching ----------------------------------------------------------- */

/* One argument on the buffer path: mem is NULL for a NULL pointer, the
 * dummy for 0 bytes, else a CL_MEM_USE_HOST_PTR buffer of bytes bytes over
 * the argument, owned (made, read back and released) by the first
 * argument with that pointer and shared by the later ones. */
typedef struct cl_argbuf {
    cl_mem mem;
    size_t bytes;
    int owner;
} cl_argbuf;

/* Sets argument i to the host pointer p (SVM path) or to the buffer b
 * (buffer path; b == NULL: a NULL pointer). *call names the failing call. */
static cl_int cl_set_arg(kern_cl_kernel *k, cl_uint i, void *p, cl_mem b, const char **call)
{
    if (CL.svm && p) {
        *call = "clSetKernelArgSVMPointer";
        return CL.clSetKernelArgSVMPointer(k->kern, i, p);
    }
    *call = "clSetKernelArg";
    return CL.clSetKernelArg(k->kern, i, sizeof(cl_mem), b ? &b : NULL);
}

/* Sets the arguments and enqueues k over global/local, under k's lock; the
 * launch's event in *ev. b: the buffer path's buffers, or NULL. */
static cl_int cl_enqueue(kern_cl_kernel *k, int nargs, void *const *args, const cl_argbuf *b,
                         size_t global, size_t local, cl_event *ev, const char **call)
{
    cl_int e = CL_SUCCESS;
    pthread_mutex_lock(&k->mu);
    for (int i = 0; i < nargs && e == CL_SUCCESS; i++)
        e = cl_set_arg(k, (cl_uint)i, args[i], b ? b[i].mem : NULL, call);
    if (e == CL_SUCCESS) {
        *call = "clEnqueueNDRangeKernel";
        e = CL.clEnqueueNDRangeKernel(CL.queue, k->kern, 1, NULL, &global, &local, 0, NULL, ev);
    }
    pthread_mutex_unlock(&k->mu);
    return e;
}

/* Waits for ev and releases it. */
static cl_int cl_wait(cl_event ev)
{
    cl_int e = CL.clWaitForEvents(1, &ev);
    CL.clReleaseEvent(ev);
    return e;
}

/* 0 if every two arguments' memory is disjoint or starts at the same
 * pointer (those share one buffer), else -1 with err: OpenCL leaves
 * buffers over partly overlapping host memory undefined. */
static int cl_check_overlap(int nargs, void *const *args, const size_t *nbytes, char *err, size_t errlen)
{
    for (int i = 0; i < nargs; i++)
        for (int j = i + 1; j < nargs; j++) {
            uintptr_t a = (uintptr_t)args[i], b = (uintptr_t)args[j];
            if (!a || !b || !nbytes[i] || !nbytes[j] || a == b)
                continue;
            if (a < b + nbytes[j] && b < a + nbytes[i])
                return kern_say(err, errlen, "arguments %d and %d partly overlap (not supported without system SVM)",
                           i, j), -1;
        }
    return 0;
}

/* The buffer for argument i (see cl_argbuf), sized for the largest
 * argument with its pointer; an earlier argument's if it has the pointer. */
static cl_int cl_make_buffer(int i, int nargs, void *const *args, const size_t *nbytes, cl_argbuf *b)
{
    b[i] = (cl_argbuf){.mem = args[i] && !nbytes[i] ? CL.dummy : NULL};
    if (!args[i] || !nbytes[i])
        return CL_SUCCESS;
    for (int j = 0; j < i; j++)
        if (args[j] == args[i] && b[j].owner) {
            b[i] = (cl_argbuf){b[j].mem, b[j].bytes, 0};
            return CL_SUCCESS;
        }
    b[i].bytes = nbytes[i];
    for (int j = i + 1; j < nargs; j++)
        if (args[j] == args[i] && nbytes[j] > b[i].bytes)
            b[i].bytes = nbytes[j];
    cl_int e = CL_SUCCESS;
    b[i].mem = CL.clCreateBuffer(CL.ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, b[i].bytes, args[i], &e);
    b[i].owner = b[i].mem != NULL;
    return e != CL_SUCCESS ? e : b[i].mem ? CL_SUCCESS : -1;
}

static void cl_release_buffers(int nargs, const cl_argbuf *b)
{
    for (int i = 0; i < nargs; i++)
        if (b[i].owner)
            CL.clReleaseMemObject(b[i].mem);
}

/* Maps each owned buffer for reading and unmaps it, so the kernel's
 * results are in the host memory under it (copied there if the runtime
 * mapped elsewhere), then waits for the unmaps. */
static cl_int cl_read_back(int nargs, void *const *args, const cl_argbuf *b, const char **call)
{
    cl_event last = NULL;
    cl_int e = CL_SUCCESS;
    for (int i = 0; i < nargs && e == CL_SUCCESS; i++) {
        if (!b[i].owner)
            continue;
        *call = "clEnqueueMapBuffer";
        void *p = CL.clEnqueueMapBuffer(CL.queue, b[i].mem, CL_TRUE, CL_MAP_READ, 0, b[i].bytes, 0, NULL, NULL, &e);
        if (e == CL_SUCCESS && !p)
            e = -1;
        if (e != CL_SUCCESS)
            break;
        if (p != args[i])
            memcpy(args[i], p, b[i].bytes);
        if (last)
            CL.clReleaseEvent(last), last = NULL;
        *call = "clEnqueueUnmapMemObject";
        e = CL.clEnqueueUnmapMemObject(CL.queue, b[i].mem, p, 0, NULL, &last);
    }
    if (last) {
        cl_int w = cl_wait(last);
        if (e == CL_SUCCESS && w != CL_SUCCESS)
            *call = "clWaitForEvents (unmap)", e = w;
    }
    return e;
}

/* The buffer path of kern_cl_launch (arguments checked by cl_check_overlap). */
static cl_int cl_launch_buffers(kern_cl_kernel *k, int nargs, void *const *args, const size_t *nbytes,
                                size_t global, size_t local, const char **call)
{
    cl_argbuf *b = calloc((size_t)nargs + 1, sizeof *b);
    cl_event ev = NULL;
    cl_int e = b ? CL_SUCCESS : CL_OUT_OF_HOST_MEMORY;
    *call = b ? "clCreateBuffer" : "calloc";
    for (int i = 0; i < nargs && e == CL_SUCCESS; i++)
        e = cl_make_buffer(i, nargs, args, nbytes, b);
    if (e == CL_SUCCESS)
        e = cl_enqueue(k, nargs, args, b, global, local, &ev, call);
    if (e == CL_SUCCESS && (e = cl_wait(ev)) != CL_SUCCESS)
        *call = "clWaitForEvents";
    if (e == CL_SUCCESS)
        e = cl_read_back(nargs, args, b, call);
    if (b)
        cl_release_buffers(nargs, b);
    free(b);
    return e;
}

/* The SVM path of kern_cl_launch. */
static cl_int cl_launch_svm(kern_cl_kernel *k, int nargs, void *const *args, size_t global, size_t local,
                            const char **call)
{
    cl_event ev = NULL;
    cl_int e = cl_enqueue(k, nargs, args, NULL, global, local, &ev, call);
    if (e == CL_SUCCESS && (e = cl_wait(ev)) != CL_SUCCESS)
        *call = "clWaitForEvents";
    return e;
}

int kern_cl_launch(kern_cl_kernel *k, int nargs, void *const *args, const size_t *nbytes,
                   int64_t groups, int64_t local, char *err, size_t errlen)
{
    if (groups == 0)
        return 0;
    if (!k || groups < 0 || local < 1 || (uint64_t)groups > SIZE_MAX / (uint64_t)local)
        return kern_say(err, errlen, "kern_cl_launch: bad range (%lld groups of %lld)", (long long)groups,
                   (long long)local), -1;
    if (nargs != (int)k->nargs)
        return kern_say(err, errlen, "kernel %s: %d arguments given, it takes %u", k->name, nargs,
                   (unsigned)k->nargs), -1;
    if (nargs > 0 && (!args || (!CL.svm && !nbytes)))
        return kern_say(err, errlen, "kernel %s: args or nbytes is NULL", k->name), -1;
    if (!CL.svm && cl_check_overlap(nargs, args, nbytes, err, errlen))
        return -1;
    const char *call = "?";
    size_t global = (size_t)groups * (size_t)local, lsz = (size_t)local;
    cl_int e = CL.svm ? cl_launch_svm(k, nargs, args, global, lsz, &call)
                      : cl_launch_buffers(k, nargs, args, nbytes, global, lsz, &call);
    if (e == CL_SUCCESS)
        return 0;
    kern_say(err, errlen, "kernel %s: %s failed: %d (%s)", k->name, call, (int)e, cl_err_name(e));
    return -1;
}
