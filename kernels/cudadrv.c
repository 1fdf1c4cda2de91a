/* cudadrv.c — see cudadrv.h. The entry points used, declared from
 * NVIDIA's driver API reference (cuda.h of CUDA 12/13: CUresult is an int
 * enum, CUDA_SUCCESS = 0; CUdevice an int; contexts, modules, functions
 * and streams opaque pointers; CUdeviceptr an unsigned 64-bit integer).
 * The symbols are the ABI names cuda.h maps its calls to without per-
 * thread default streams: cuMemcpyDtoHAsync_v2, the rest unversioned. */
#include "cudadrv.h"
#include "dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;

enum {
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
    CUDA_ERROR_STUB_LIBRARY = 34,
    CUDA_ERROR_NO_DEVICE = 100,
};

#define CU_FUNCS(X)                                                                                      \
    X(CUresult, cuInit, (unsigned))                                                                      \
    X(CUresult, cuDriverGetVersion, (int *))                                                             \
    X(CUresult, cuGetErrorString, (CUresult, const char **))                                             \
    X(CUresult, cuDeviceGetCount, (int *))                                                               \
    X(CUresult, cuDeviceGet, (CUdevice *, int))                                                          \
    X(CUresult, cuDeviceGetName, (char *, int, CUdevice))                                                \
    X(CUresult, cuDeviceGetAttribute, (int *, int, CUdevice))                                            \
    X(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                       \
    X(CUresult, cuCtxSetCurrent, (CUcontext))                                                            \
    X(CUresult, cuCtxGetCurrent, (CUcontext *))                                                          \
    X(CUresult, cuModuleLoadData, (CUmodule *, const void *))                                            \
    X(CUresult, cuModuleUnload, (CUmodule))                                                              \
    X(CUresult, cuModuleGetFunction, (CUfunction *, CUmodule, const char *))                             \
    X(CUresult, cuFuncSetAttribute, (CUfunction, int, int))                                              \
    X(CUresult, cuLaunchKernel,                                                                          \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, \
       void **))                                                                                         \
    X(CUresult, cuMemsetD32Async, (CUdeviceptr, unsigned, size_t, CUstream))                             \
    X(CUresult, cuMemcpyDtoHAsync_v2, (void *, CUdeviceptr, size_t, CUstream))                          \
    X(CUresult, cuStreamSynchronize, (CUstream))

#define MAX_DEVICES 64

static struct {
    int ok, ndev, version;
    pid_t pid;                 /* the process that initialised the driver */
    char why[256], text[256];
    CUcontext ctx[MAX_DEVICES];   /* primary contexts retained so far */
    pthread_mutex_t lock;
#define X(ret, name, params) ret(*name) params;
    CU_FUNCS(X)
#undef X
} CU = { .lock = PTHREAD_MUTEX_INITIALIZER };
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static const char *errtext(CUresult r)
{
    const char *s = NULL;
    if (CU.cuGetErrorString && CU.cuGetErrorString(r, &s) == 0 && s)
        return s;
    return "unknown CUDA error";
}

static void cu_init(void)
{
    const char *env = getenv("SMELT_LIBCUDA");
    void *h = kern_dlopen_first((const char *const[]){ env && *env ? env : "libcuda.so.1", "libcuda.so", NULL });
    if (!h) {
        kern_say(CU.why, sizeof CU.why, "libcuda.so.1 not found (no NVIDIA driver)");
        return;
    }
#define X(ret, name, params)                                                        \
    if (!(CU.name = (ret(*) params)dlsym(h, #name))) {                              \
        kern_say(CU.why, sizeof CU.why, "libcuda has no " #name);                   \
        return;                                                                     \
    }
    CU_FUNCS(X)
#undef X
    CUresult r = CU.cuInit(0);
    if (r) {
        kern_say(CU.why, sizeof CU.why, "cuInit failed: %s (%d)%s", errtext(r), r,
                 r == CUDA_ERROR_STUB_LIBRARY ? ": the stub libcuda, not a driver" :
                 r == CUDA_ERROR_NO_DEVICE ? ": no CUDA device" : "");
        return;
    }
    if ((r = CU.cuDeviceGetCount(&CU.ndev)) || CU.ndev <= 0) {
        kern_say(CU.why, sizeof CU.why, "no CUDA device (%s)", r ? errtext(r) : "count 0");
        CU.ndev = 0;
        return;
    }
    if (CU.ndev > MAX_DEVICES)
        CU.ndev = MAX_DEVICES;
    CU.cuDriverGetVersion(&CU.version);
    char name[128] = "?", arch[16] = "?";
    CUdevice d;
    if (!CU.cuDeviceGet(&d, 0))
        CU.cuDeviceGetName(name, (int)sizeof name, d);
    CU.pid = getpid();
    CU.ok = 1;
    kern_cu_arch(0, arch, sizeof arch);
    kern_say(CU.text, sizeof CU.text, "CUDA driver %d.%d, %s (%s)", CU.version / 1000, CU.version % 1000 / 10, name,
             arch);
}

int kern_cu_available(char *why, size_t n)
{
    pthread_once(&cu_once, cu_init);
    if (CU.ok && getpid() != CU.pid) {
        kern_say(why, n, "the CUDA driver was initialised before fork(): it cannot be used in the child process");
        return 0;
    }
    if (!CU.ok)
        kern_say(why, n, "%s", CU.why);
    return CU.ok;
}

int kern_cu_device_count(void) { return kern_cu_available(NULL, 0) ? CU.ndev : 0; }

const char *kern_cu_describe(void) { return kern_cu_available(NULL, 0) ? CU.text : NULL; }

int kern_cu_arch(int dev, char *buf, size_t n)
{
    CUdevice d;
    int major = 0, minor = 0;
    if (!CU.ok || dev < 0 || dev >= CU.ndev || CU.cuDeviceGet(&d, dev) ||
        CU.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d) ||
        CU.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d))
        return -1;
    snprintf(buf, n, "sm_%d%d", major, minor);
    return 0;
}

int kern_cu_enter(int dev, void **prev, char *err, size_t errlen)
{
    if (prev)
        *prev = NULL;
    if (!kern_cu_available(err, errlen))
        return -1;
    if (dev < 0 || dev >= CU.ndev)
        return kern_say(err, errlen, "no CUDA device %d", dev), -1;
    pthread_mutex_lock(&CU.lock);
    CUcontext c = CU.ctx[dev];
    CUresult r = 0;
    if (!c) {
        CUdevice d;
        if (!(r = CU.cuDeviceGet(&d, dev)) && !(r = CU.cuDevicePrimaryCtxRetain(&c, d)))
            CU.ctx[dev] = c;   /* kept for the process's life, as torch keeps it */
    }
    pthread_mutex_unlock(&CU.lock);
    if (r)
        return kern_say(err, errlen, "cuDevicePrimaryCtxRetain(%d): %s", dev, errtext(r)), -1;
    CUcontext cur = NULL;
    if (CU.cuCtxGetCurrent(&cur))
        cur = NULL;
    if (prev)
        *prev = cur;
    if (cur == c)
        return 0;
    if ((r = CU.cuCtxSetCurrent(c)))
        return kern_say(err, errlen, "cuCtxSetCurrent: %s", errtext(r)), -1;
    return 0;
}

void kern_cu_leave(void *prev)
{
    CUcontext cur = NULL;
    if (CU.ok && !CU.cuCtxGetCurrent(&cur) && cur != (CUcontext)prev)
        CU.cuCtxSetCurrent((CUcontext)prev);
}

struct kern_cu_module {
    CUmodule mod;
    int dev;
};

kern_cu_module *kern_cu_module_load(int dev, const void *cubin, size_t n, char *err, size_t errlen)
{
    (void)n;   /* a cubin is an ELF image: the driver reads its size from it */
    void *prev;
    if (kern_cu_enter(dev, &prev, err, errlen))
        return NULL;
    kern_cu_module *m = calloc(1, sizeof *m);
    CUresult r = m ? CU.cuModuleLoadData(&m->mod, cubin) : 0;
    kern_cu_leave(prev);
    if (!m)
        return kern_say(err, errlen, "out of memory"), NULL;
    if (r) {
        free(m);
        return kern_say(err, errlen, "cuModuleLoadData: %s (%d)", errtext(r), r), NULL;
    }
    m->dev = dev;
    return m;
}

void kern_cu_module_free(kern_cu_module *m)
{
    if (!m)
        return;
    /* unloaded from its own context; after fork or at driver shutdown the
     * call fails harmlessly */
    void *prev;
    if (CU.ok && getpid() == CU.pid && !kern_cu_enter(m->dev, &prev, NULL, 0)) {
        CU.cuModuleUnload(m->mod);
        kern_cu_leave(prev);
    }
    free(m);
}

void *kern_cu_function(kern_cu_module *m, const char *name, unsigned dyn_shared, char *err, size_t errlen)
{
    CUfunction f = NULL;
    CUresult r = CU.cuModuleGetFunction(&f, m->mod, name);
    if (r)
        return kern_say(err, errlen, "cuModuleGetFunction(%s): %s", name, errtext(r)), NULL;
    if (dyn_shared > 48 * 1024 &&
        (r = CU.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)dyn_shared)))
        return kern_say(err, errlen, "%s: %u bytes of shared memory: %s", name, dyn_shared, errtext(r)), NULL;
    return f;
}

int kern_cu_launch(void *fn, const unsigned grid[3], const unsigned block[3], unsigned shared, void *stream,
                   void **args, char *err, size_t errlen)
{
    CUresult r = CU.cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, stream, args,
                                   NULL);
    if (r)
        return kern_say(err, errlen, "cuLaunchKernel: %s (%d)", errtext(r), r), -1;
    return 0;
}

int kern_cu_memset32(void *ptr, uint32_t value, size_t count, void *stream, char *err, size_t errlen)
{
    CUresult r = CU.cuMemsetD32Async((CUdeviceptr)(uintptr_t)ptr, value, count, stream);
    if (r)
        return kern_say(err, errlen, "cuMemsetD32Async: %s", errtext(r)), -1;
    return 0;
}

int kern_cu_read(void *host, const void *dev, size_t n, void *stream, char *err, size_t errlen)
{
    CUresult r = CU.cuMemcpyDtoHAsync_v2(host, (CUdeviceptr)(uintptr_t)dev, n, stream);
    if (!r)
        r = CU.cuStreamSynchronize(stream);
    if (r)
        return kern_say(err, errlen, "reading the run's error flag: %s", errtext(r)), -1;
    return 0;
}
