/* nvrtc.c — see nvrtc.h. The entry points used, declared from NVIDIA's
 * NVRTC API reference (nvrtc.h of CUDA 12/13: nvrtcResult is an int enum,
 * NVRTC_SUCCESS = 0; nvrtcProgram an opaque pointer). */
#include "nvrtc.h"
#include "dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;

#define NVRTC_FUNCS(X)                                                                                   \
    X(nvrtcResult, nvrtcVersion, (int *, int *))                                                         \
    X(const char *, nvrtcGetErrorString, (nvrtcResult))                                                  \
    X(nvrtcResult, nvrtcCreateProgram,                                                                   \
      (nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *))       \
    X(nvrtcResult, nvrtcCompileProgram, (nvrtcProgram, int, const char *const *))                        \
    X(nvrtcResult, nvrtcGetProgramLogSize, (nvrtcProgram, size_t *))                                     \
    X(nvrtcResult, nvrtcGetProgramLog, (nvrtcProgram, char *))                                           \
    X(nvrtcResult, nvrtcGetCUBINSize, (nvrtcProgram, size_t *))                                          \
    X(nvrtcResult, nvrtcGetCUBIN, (nvrtcProgram, char *))                                                \
    X(nvrtcResult, nvrtcGetPTXSize, (nvrtcProgram, size_t *))                                            \
    X(nvrtcResult, nvrtcGetPTX, (nvrtcProgram, char *))                                                  \
    X(nvrtcResult, nvrtcDestroyProgram, (nvrtcProgram *))

static struct {
    int ok;
    char why[256], text[64];
#define X(ret, name, params) ret(*name) params;
    NVRTC_FUNCS(X)
#undef X
} NV;
static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void nv_init(void)
{
    const char *env = getenv("SMELT_NVRTC");
    void *h = kern_dlopen_first((const char *const[]){ "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
                                                        env && *env ? env : NULL, NULL });
    if (!h) {
        kern_say(NV.why, sizeof NV.why, "libnvrtc not found (pip install nvidia-cuda-nvrtc, or SMELT_NVRTC=path)");
        return;
    }
#define X(ret, name, params)                                                        \
    if (!(NV.name = (ret(*) params)dlsym(h, #name))) {                              \
        kern_say(NV.why, sizeof NV.why, "libnvrtc has no " #name);                  \
        return;                                                                     \
    }
    NVRTC_FUNCS(X)
#undef X
    int major = 0, minor = 0;
    NV.nvrtcVersion(&major, &minor);
    kern_say(NV.text, sizeof NV.text, "NVRTC %d.%d", major, minor);
    NV.ok = 1;
}

int kern_nvrtc_available(char *why, size_t n)
{
    pthread_once(&nv_once, nv_init);
    if (!NV.ok)
        kern_say(why, n, "%s", NV.why);
    return NV.ok;
}

const char *kern_nvrtc_version_text(void) { return kern_nvrtc_available(NULL, 0) ? NV.text : NULL; }

/* NVRTC's log of prog appended to err after its first line. */
static void append_log(nvrtcProgram prog, char *err, size_t errlen)
{
    size_t n = 0, at = strlen(err);
    if (NV.nvrtcGetProgramLogSize(prog, &n) || n < 2 || at + 2 >= errlen)
        return;
    char *log = malloc(n + 1);
    if (log && !NV.nvrtcGetProgramLog(prog, log)) {
        log[n] = 0;
        snprintf(err + at, errlen - at, ": %s", log);
    }
    free(log);
}

/* The bytes of one output (size and get functions); NULL if empty. */
static char *take(nvrtcProgram prog, nvrtcResult (*size)(nvrtcProgram, size_t *),
                  nvrtcResult (*get)(nvrtcProgram, char *), size_t *n)
{
    if (size(prog, n) || !*n)
        return NULL;
    char *b = malloc(*n + 1);
    if (b && get(prog, b)) {
        free(b);
        return NULL;
    }
    if (b)
        b[*n] = 0;
    return b;
}

int kern_nvrtc_compile(const char *src, const char *arch, void **cubin, size_t *ncubin, char **ptx, char *err,
                       size_t errlen)
{
    if (!kern_nvrtc_available(err, errlen))
        return -1;
    nvrtcProgram prog;
    nvrtcResult r = NV.nvrtcCreateProgram(&prog, src, "smelt.cu", 0, NULL, NULL);
    if (r)
        return kern_say(err, errlen, "nvrtcCreateProgram: %s", NV.nvrtcGetErrorString(r)), -1;
    char opt[64];
    snprintf(opt, sizeof opt, "--gpu-architecture=%s", arch);
    const char *opts[] = { opt, "--std=c++17", "-default-device", "-w" };
    r = NV.nvrtcCompileProgram(prog, 4, opts);
    int rc = 0;
    if (r) {
        kern_say(err, errlen, "nvrtcCompileProgram (%s): %s", arch, NV.nvrtcGetErrorString(r));
        append_log(prog, err, errlen);
        rc = -1;
    } else {
        size_t np;
        *cubin = take(prog, NV.nvrtcGetCUBINSize, NV.nvrtcGetCUBIN, ncubin);
        if (ptx)
            *ptx = take(prog, NV.nvrtcGetPTXSize, NV.nvrtcGetPTX, &np);
        if (!*cubin)
            rc = -1, kern_say(err, errlen, "NVRTC gave no cubin for %s", arch);
    }
    NV.nvrtcDestroyProgram(&prog);
    return rc;
}
