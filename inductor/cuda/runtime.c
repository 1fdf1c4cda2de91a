/* runtime.c — the CUDA back end behind the backend interface (backend.h).
 *
 * Built so far: code generation (codegen.c: CUDA C from the kernel IR) and
 * its compilation by NVRTC to a cubin and PTX for an architecture, which
 * needs no GPU. `smelt_compile_opts.cuda_arch` ("sm_90") asks for that: a
 * plan to read (code("ir"): the CUDA C, code("asm"): the PTX) that refuses
 * to run, as `cpu=` plans do (the tests compile every op-table graph so,
 * for sm_90 and sm_80). Not built yet: loading cubins and launching them
 * through the driver API (libcuda), cuda tensors choosing this back end;
 * until then the back end reports itself unavailable and plans compile
 * for the CPU.
 */
#include "cuda.h"
#include "../backend.h"
#include "../../kernels/nvrtc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cuda_available(char *why, size_t n)
{
    snprintf(why, n, "launching CUDA kernels (libcuda, the driver API) is not built yet");
    return 0;
}

static char *cuda_code_key(const smelt_compile_opts *o, char *err, size_t errlen)
{
    (void)o;
    snprintf(err, errlen, "the CUDA back end has no disk cache entries yet");
    return NULL;
}

/* Code-only plans (opts cuda_arch): the CUDA C compiled by NVRTC for that
 * architecture; the text kept, nothing loaded. */
static int cuda_codegen(smelt_plan *p, const smelt_compile_opts *o, char *err, size_t errlen)
{
    if (!o || !o->cuda_arch)
        return snprintf(err, errlen, "CUDA kernels cannot be launched yet: compile with cuda_arch to read the code"), -1;
    int64_t t0 = plan_now_ns();
    p->code = calloc((size_t)p->nkernels + 1, sizeof *p->code);
    if (!p->code)
        return snprintf(err, errlen, "out of memory"), -1;
    for (int32_t k = 0; k < p->nkernels; k++)
        p->code[k].same_as = -1, p->code[k].grain = 1;
    char *src = cuda_codegen_source(p);
    p->times.codegen_ms = (double)(plan_now_ns() - t0) / 1e6;
    void *cubin = NULL;
    size_t ncubin = 0;
    char *ptx = NULL;
    int rc = p->nkernels ? kern_nvrtc_compile(src, o->cuda_arch, &cubin, &ncubin, &ptx, err, errlen) : 0;
    p->times.load_ms = (double)(plan_now_ns() - t0) / 1e6 - p->times.codegen_ms;
    p->ngenerated = p->times.generated = p->nkernels;
    free(cubin);
    p->text_ir = src;
    p->text_asm = ptx;
    p->code_only = 1;
    return rc;
}

static int cuda_launch(const smelt_plan *p, int32_t kernel, void **kb, char *err, size_t errlen)
{
    (void)p, (void)kernel, (void)kb;
    return snprintf(err, errlen, "CUDA kernels cannot be launched yet"), -1;
}

static void cuda_release(smelt_plan *p) { (void)p; }

const ind_backend ind_backend_cuda = {
    .name = "cuda",
    .id = IND_BACKEND_CUDA,
    .available = cuda_available,
    .code_key = cuda_code_key,
    .codegen = cuda_codegen,
    .launch = cuda_launch,
    .release = cuda_release,
};
