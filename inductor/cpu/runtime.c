/* runtime.c — the CPU back end behind the backend interface (backend.h):
 * code from codegen.c (LLVM, ORC JIT), kernels run across the thread pool. */
#include "cpu.h"
#include "jit.h"
#include "../backend.h"
#include "../../kernels/threadpool.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct run_ctx {
    plan_kernel_fn fn;
    void **bufs;
} run_ctx;

static void run_range(void *ctx, int64_t begin, int64_t end)
{
    run_ctx *r = ctx;
    r->fn(r->bufs, begin, end);
}

/* The kernel's work items across the pool; a split kernel's partials in
 * a scratch block (kb[nslots + 1]), combined by its finish function. */
static int cpu_launch(const smelt_plan *p, int32_t kernel, void **kb, char *err, size_t errlen)
{
    const plan_kernel_code *c = &p->code[kernel];
    run_ctx r = { c->fn, kb };
    if (c->finish && !(kb[c->nslots + 1] = malloc((size_t)c->scratch_bytes)))
        return snprintf(err, errlen, "out of memory"), -1;
    if (c->nitems > 0)
        kern_parallel_for(c->nitems, c->grain, run_range, &r);
    if (c->finish) {
        r.fn = c->finish;
        kern_parallel_for(c->nfinish, 1, run_range, &r);
        free(kb[c->nslots + 1]);
        kb[c->nslots + 1] = NULL;
    }
    return 0;
}

static int cpu_available(char *why, size_t n) { return cpu_jit_ready(why, n) == 0; }

const ind_backend ind_backend_cpu = {
    .name = "cpu",
    .id = IND_BACKEND_CPU,
    .available = cpu_available,
    .supports = NULL,
    .code_key = cpu_code_key,
    .codegen = cpu_codegen,
    .code_export = cpu_code_export,
    .code_import = cpu_code_import,
    .launch = cpu_launch,
    .release = cpu_release,
    .code_bytes = cpu_code_bytes,
};
