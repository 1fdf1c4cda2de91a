/* compile.c — the compile pipeline: copy the graph, verify, fold
 * eval-BatchNorm-like epilogues into convolutions, lower (fusion into loop-level kernels), generate
 * and load code. Each stage is one call. */
#include "plan.h"
#include "backend.h"
#include "kix.h"

#include <stdlib.h>
#include <string.h>

static double now_ms(void) { return (double)plan_now_ns() / 1e6; }

/* A pack (kernels/matmul.h) for every matmul step whose B is a weight
 * input, and the list of those inputs. -1 if out of memory. */
static int make_packs(smelt_plan *p)
{
    int32_t ninputs = p->graph->ninputs;
    uint8_t *seen = calloc((size_t)ninputs + 1, 1);
    p->packed_inputs = malloc(sizeof(int32_t) * ((size_t)ninputs + 1));
    if (!seen || !p->packed_inputs) {
        free(seen);
        return -1;
    }
    for (int32_t k = 0; k < p->nsteps; k++) {
        plan_step *s = &p->steps[k];
        if (s->kind != PS_MATMUL || s->b_input < 0)
            continue;
        if (!(s->pack = kern_matmul_pack_new())) {
            free(seen);
            return -1;
        }
        if (!seen[s->b_input]++)
            p->packed_inputs[p->npacked++] = s->b_input;
    }
    free(seen);
    return 0;
}

/* Packs (host plans), profile counters and the arena of a lowered or
 * loaded plan; frees p and returns NULL (err) if out of memory. */
static smelt_plan *finish(smelt_plan *p, char *err, size_t errlen)
{
    if ((!p->be->device_memory && make_packs(p)) || !(p->step_ns = calloc((size_t)p->nsteps + 1, sizeof *p->step_ns))) {
        smelt_plan_free(p);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    plan_assign_arena(p);
    if (p->be->describe && !p->text_launch)
        p->text_launch = p->be->describe(p);
    return p;
}

/* be, or the CPU's back end when be cannot compile one of p's kernels
 * (the reason warned: a RuntimeWarning). */
static const ind_backend *supported(const ind_backend *be, const smelt_plan *p)
{
    char why[256], line[400];
    for (int32_t s = 0; be != &ind_backend_cpu && s < p->nsteps; s++)
        if (p->steps[s].kind == PS_SDPA && p->steps[s].attn->flex) {   /* its tile kernels run inside the CPU's attention */
            snprintf(line, sizeof line, "backend %s: flex attention's score functions run on the CPU: this plan runs on the CPU",
                     be->name);
            ind_backend_note(1, line);
            return &ind_backend_cpu;
        }
    for (int32_t k = 0; be->supports && k < p->nkernels; k++)
        if (!be->supports(p, &p->kernels[k], why, sizeof why)) {
            snprintf(line, sizeof line, "backend %s: kernel %d not supported (%s): this plan runs on the CPU",
                     be->name, (int)k, why);
            ind_backend_note(1, line);
            return &ind_backend_cpu;
        }
    return be;
}

/* A device-memory back end runs every step on the device: each kernel
 * and extern step must be one it takes (there is no falling back to the
 * CPU: the buffers are in device memory). 0, or -1 with err. */
static int device_steps(const ind_backend *be, const smelt_plan *p, char *err, size_t errlen)
{
    char why[256];
    for (int32_t k = 0; be->supports && k < p->nkernels; k++)
        if (!be->supports(p, &p->kernels[k], why, sizeof why))
            return snprintf(err, errlen, "backend %s: kernel %d: %s", be->name, (int)k, why), -1;
    for (int32_t s = 0; s < p->nsteps; s++)
        if (p->steps[s].kind != PS_KERNEL && !be->supports_step(p, s, why, sizeof why))
            return snprintf(err, errlen, "backend %s: step %d: %s", be->name, (int)s, why), -1;
    return 0;
}

/* Host plans: the CPU's attention kernel takes float16/bfloat16 in its
 * forward without score functions only. 0, or -1. */
static int host_steps(const smelt_plan *p, char *err, size_t errlen)
{
    for (int32_t s = 0; s < p->nsteps; s++) {
        const plan_sdpa *a = p->steps[s].kind == PS_SDPA ? p->steps[s].attn : NULL;
        if (a && p->bufs[a->buf[0]].dtype != SMELT_F32 && (a->mode || a->flex))
            return snprintf(err, errlen, "attention %s in %s runs on CUDA only (the CPU's is float32)",
                            a->flex ? "with score functions" : "backward",
                            smelt_dtype_name((smelt_dtype)p->bufs[a->buf[0]].dtype)), -1;
    }
    return 0;
}

/* Fold, lower, generate code with be: a new plan, or NULL with err. */
static smelt_plan *build(const smelt_graph *g, const smelt_compile_opts *opts, const ind_backend *be,
                         char *err, size_t errlen)
{
    smelt_plan *p = calloc(1, sizeof *p);
    if (!p || !(p->graph = smelt_graph_copy(g))) {
        free(p);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    double t0 = now_ms();
    smelt_graph *folded = ind_fold(p->graph, err, errlen);
    if (!folded) {
        smelt_plan_free(p);
        return NULL;
    }
    if (folded != p->graph) {
        smelt_graph_free(p->graph);
        p->graph = folded;
    }
    p->be = be;   /* (what lowering asks: where externs run; set for good below) */
    int rc = ind_lower(p, opts, err, errlen);
    p->be = NULL;
    p->times.lower_ms = now_ms() - t0;
    p->device = opts ? opts->device : 0;
    p->code_only = opts && opts->cuda_arch;   /* (what supports_step may ask: code to read, no device needed) */
    if (!rc && be->device_memory)
        rc = device_steps(be, p, err, errlen);
    else if (!rc)
        rc = host_steps(p, err, errlen);
    if (!rc) {
        p->be = be->device_memory ? be : supported(be, p);
        for (int32_t s = 0; s < p->nsteps; s++)
            p->steps[s].backend = ind_step_backend(p->be, p->steps[s].kind == PS_KERNEL);
    }
    if (!rc && p->be->codegen(p, opts, err, errlen)) {   /* a device's build failed: the CPU's then */
        if (p->be->device_memory) {   /* (said as the back end's refusals are) */
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            snprintf(err, errlen, "backend %s: %s", p->be->name, why);
        }
        if (p->be == &ind_backend_cpu || p->be->device_memory || (opts && opts->cuda_arch)) {
            smelt_plan_free(p);
            return NULL;
        }
        char line[700];
        snprintf(line, sizeof line, "backend %s: code generation failed (%.500s): this plan runs on the CPU",
                 p->be->name, err);
        ind_backend_note(1, line);
        smelt_plan_free(p);
        return build(g, opts, &ind_backend_cpu, err, errlen);
    }
    if (rc) {
        smelt_plan_free(p);
        return NULL;
    }
    if (opts && opts->keep_ir)
        p->text_kernels = ind_kernels_print(p);
    return p;
}

smelt_plan *smelt_compile(const smelt_graph *g, const smelt_compile_opts *opts,
                          char *err, size_t errlen)
{
    if (smelt_graph_verify(g, err, errlen))
        return NULL;
    size_t klen = 0;
    int named_cpu = opts && (opts->cpu || opts->cpu_features), cuda_code = opts && opts->cuda_arch;
    const ind_backend *named = opts && opts->backend ? ind_backend_named(opts->backend) : NULL;
    char why[256] = "";
    if (named && named->device_memory && !cuda_code && !named_cpu && !named->available(why, sizeof why)) {
        /* its buffers are device memory: no CPU plan serves */
        snprintf(err, errlen, "backend %s: not available here (%s)", named->name, why);
        return NULL;
    }
    const ind_backend *be = cuda_code ? &ind_backend_cuda : named_cpu ? &ind_backend_cpu : ind_backend_select(opts, NULL, 0);
    smelt_compile_opts fixed;
    if (be->device_memory && opts && opts->param_sizes) {   /* CUDA kernels have their sizes as constants */
        fixed = *opts;
        fixed.param_sizes = 0;
        opts = &fixed;
    }
    int cached = !(opts && opts->keep_ir) && !named_cpu && !cuda_code;
    uint8_t *key = cached ? ind_plan_cache_key(g, opts, be, &klen) : NULL;
    double t0 = now_ms();
    smelt_plan *p = key ? ind_plan_cache_load(g, be, opts ? opts->device : 0, key, klen) : NULL;
    if (p) {
        p->times.load_ms = now_ms() - t0;
    } else if ((p = build(g, opts, be, err, errlen)) && key && p->be == be) {
        ind_plan_cache_store(p, key, klen);
    }
    free(key);
    if (p && (p = finish(p, err, errlen)) && !p->code_only)
        plan_after_compile(p);
    return p;
}

void smelt_plan_free(smelt_plan *p)
{
    if (!p)
        return;
    if (p->be)
        p->be->release(p);
    free((void *)p->step_ns);
    for (int32_t k = 0; k < p->nkernels; k++)
        free(p->kernels[k].items);
    free(p->kernels);
    free(p->bufs);
    for (int32_t k = 0; k < p->nsteps; k++) {
        free(p->steps[k].call);
        free(p->steps[k].attn);
        free(p->steps[k].conv);
        if (p->steps[k].kind == PS_MATMUL)
            kern_matmul_pack_free(p->steps[k].pack);
    }
    free(p->packed_inputs);
    free(p->steps);
    for (int32_t k = 0; p->code && k < p->nkernels; k++)
        free(p->code[k].slots), free(p->code[k].params);
    free(p->code);
    kir_pool_free(&p->pool);
    smelt_graph_free(p->graph);
    free(p->text_kernels);
    free(p->text_ir);
    free(p->text_asm);
    free(p->text_launch);
    free(p);
}

int smelt_plan_output_inplace(const smelt_plan *p, int k)
{
    for (int32_t b = 0; b < p->nbufs; b++)
        if (p->bufs[b].kind == PB_OUTPUT && p->bufs[b].index == k)
            return p->bufs[b].inplace - 1;
    return -1;
}

int smelt_plan_num_kernels(const smelt_plan *p) { return p->nkernels; }
int64_t smelt_plan_code_bytes(const smelt_plan *p) { return p->be && p->be->code_bytes ? p->be->code_bytes(p) : 0; }
const char *smelt_plan_backend(const smelt_plan *p) { return p->be ? p->be->name : "cpu"; }
int64_t smelt_plan_arena_bytes(const smelt_plan *p) { return p->arena_bytes; }
int smelt_plan_device(const smelt_plan *p) { return p->be && p->be->device_memory && !p->code_only ? p->device : -1; }
int64_t smelt_plan_device_arena_bytes(const smelt_plan *p)
{
    return p->be && p->be->device_memory ? p->be->arena_bytes(p) : 0;
}

int smelt_plan_run_device(const smelt_plan *p, void *const *inputs, void *const *outputs, void *arena, void *stream,
                          smelt_host_call_fn host, void *ctx, char *err, size_t errlen)
{
    if (!p->be || !p->be->device_memory || p->code_only)
        return snprintf(err, errlen, "this plan does not run on a device"), -1;
    return p->be->run(p, inputs, outputs, arena, stream, host, ctx, err, errlen);
}
int smelt_plan_num_externs(const smelt_plan *p) { return p->nexterns; }
int smelt_plan_num_generated(const smelt_plan *p) { return p->ngenerated; }
void smelt_plan_compile_times(const smelt_plan *p, smelt_compile_times *out) { *out = p->times; }
int smelt_plan_num_host_calls(const smelt_plan *p) { return p->ncalls; }

const char *smelt_plan_code(const smelt_plan *p, const char *which)
{
    if (!strcmp(which, "ir"))
        return p->text_ir;
    if (!strcmp(which, "asm"))
        return p->text_asm;
    if (!strcmp(which, "kernels"))
        return p->text_kernels;
    if (!strcmp(which, "launch"))
        return p->text_launch;
    return NULL;
}
