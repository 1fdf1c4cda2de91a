/* plan.c — runs a compiled plan: allocates temporaries, then runs each step
 * (generated kernels across the thread pool, matmuls on kernels/matmul,
 * host calls through the caller's callback). */
#include "plan.h"
#include "../kernels/memory.h"
#include "../kernels/threadpool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct run_ctx {
    plan_kernel_fn fn;
    void **bufs;
} run_ctx;

#define MAX_STACK_SLOTS 64

static void run_range(void *ctx, int64_t begin, int64_t end)
{
    run_ctx *r = ctx;
    r->fn(r->bufs, begin, end);
}

static int run_matmul(const smelt_plan *p, const plan_step *s, void **bufs, char *err, size_t errlen)
{
    size_t es = smelt_dtype_size(s->mm.dtype);
    const char *a = (const char *)bufs[s->a_buf] + s->a_off * (int64_t)es;
    const char *b = (const char *)bufs[s->b_buf] + s->b_off * (int64_t)es;
    (void)p;
    return kern_matmul(&s->mm, a, b, bufs[s->c_buf], err, errlen);
}

/* Host call step: fills the refs' data pointers and hands them to the
 * host. Without a host callback the plan cannot run. */
static int run_call(const plan_step *s, void **bufs, smelt_host_call_fn host, void *ctx, char *err,
                    size_t errlen)
{
    const plan_call *c = s->call;
    smelt_tensor_ref in[SMELT_MAX_SRC], out[SMELT_MAX_SRC];
    if (!host)
        return snprintf(err, errlen, "the plan makes host call %d and no host runs it", (int)c->id), -1;
    for (int k = 0; k < c->nin; k++) {
        in[k] = c->in[k];
        in[k].data = (char *)bufs[c->in_buf[k]] + c->in_off[k] * (int64_t)smelt_dtype_size(c->in[k].dtype);
    }
    for (int k = 0; k < c->nout; k++) {
        out[k] = c->out[k];
        out[k].data = bufs[c->out_buf[k]];
    }
    return host(ctx, c->id, c->nin, in, c->nout, out, err, errlen);
}

int smelt_plan_run(const smelt_plan *p, void *const *inputs, void *const *outputs,
                   char *err, size_t errlen)
{
    return smelt_plan_run_host(p, inputs, outputs, NULL, NULL, err, errlen);
}

int smelt_plan_run_host(const smelt_plan *p, void *const *inputs, void *const *outputs,
                        smelt_host_call_fn host, void *ctx, char *err, size_t errlen)
{
    void **bufs = calloc((size_t)p->nbufs + 1, sizeof(void *));
    int32_t flag = 0;
    int rc = 0;
    if (!bufs) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int32_t i = 0; i < p->nbufs && !rc; i++) {
        const plan_buf *b = &p->bufs[i];
        if (b->kind == PB_INPUT)
            bufs[i] = inputs[b->index];
        else if (b->kind == PB_OUTPUT)
            bufs[i] = outputs[b->index];
        else if (!(bufs[i] = kern_alloc_temp((size_t)b->nbytes))) {
            snprintf(err, errlen, "out of memory allocating %lld bytes", (long long)b->nbytes);
            rc = -1;
        }
    }
    for (int32_t s = 0; s < p->nsteps && !rc; s++) {
        const plan_step *st = &p->steps[s];
        if (st->kind == PS_MATMUL) {
            rc = run_matmul(p, st, bufs, err, errlen);
            continue;
        }
        if (st->kind == PS_CALL) {
            rc = run_call(st, bufs, host, ctx, err, errlen);
            continue;
        }
        const plan_kernel_code *c = &p->code[st->kernel];
        void *small[MAX_STACK_SLOTS + 2], **kb = small;
        if (c->nslots > MAX_STACK_SLOTS && !(kb = malloc(sizeof(void *) * (size_t)(c->nslots + 2)))) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
            break;
        }
        for (int32_t i = 0; i < c->nslots; i++)
            kb[i] = bufs[c->slots[i]];
        kb[c->nslots] = &flag;
        kb[c->nslots + 1] = NULL;
        run_ctx r = { c->fn, kb };
        if (c->finish && !(kb[c->nslots + 1] = malloc((size_t)c->scratch_bytes))) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
        }
        if (!rc && c->nitems > 0)
            kern_parallel_for(c->nitems, c->grain, run_range, &r);
        if (!rc && c->finish) {
            r.fn = c->finish;
            kern_parallel_for(c->nfinish, 1, run_range, &r);
        }
        free(kb[c->nslots + 1]);
        if (kb != small)
            free(kb);
        if (flag) {
            snprintf(err, errlen, "ZeroDivisionError: integer division by zero");
            rc = -1;
        }
    }
    for (int32_t i = 0; i < p->nbufs; i++)
        if (p->bufs[i].kind == PB_TEMP)
            free(bufs[i]);
    free(bufs);
    return rc;
}
