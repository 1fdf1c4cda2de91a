/* plan.c — runs a compiled plan: allocates temporaries, then runs each step
 * (generated kernels across the thread pool, matmuls on kernels/matmul,
 * host calls through the caller's callback). */
#include "plan.h"
#include "backend.h"
#include "../kernels/memory.h"
#include "../kernels/threadpool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------- the arena ---------- */

/* Calls fn(buf, step, ctx) for every plan buffer step s touches. */
static void step_bufs(const smelt_plan *p, int32_t s, void (*fn)(int32_t, int32_t, void *), void *ctx)
{
    const plan_step *st = &p->steps[s];
    if (st->kind == PS_KERNEL) {
        const plan_kernel_code *c = &p->code[st->kernel];
        for (int32_t i = 0; i < c->nslots; i++)
            fn(c->slots[i], s, ctx);
    } else if (st->kind == PS_MATMUL) {
        fn(st->a_buf, s, ctx);
        fn(st->b_buf, s, ctx);
        fn(st->c_buf, s, ctx);
    } else if (st->kind == PS_SDPA) {
        for (int k = 0; k < st->attn->nin; k++)
            fn(st->attn->buf[k], s, ctx);
        fn(st->attn->buf[PLAN_SDPA_OUT], s, ctx);
        if (st->attn->flex)
            plan_flex_bufs(p, st, s, fn, ctx);
    } else if (st->kind == PS_CONV) {
        for (int k = 0; k < st->conv->nin; k++)
            fn(st->conv->buf[k], s, ctx);
        fn(st->conv->buf[3], s, ctx);
    } else {
        for (int k = 0; k < st->call->nin; k++)
            fn(st->call->in_buf[k], s, ctx);
        for (int k = 0; k < st->call->nout; k++)
            fn(st->call->out_buf[k], s, ctx);
    }
}

typedef struct live_range { int32_t first, last; } live_range;

static void widen(int32_t buf, int32_t step, void *ctx)
{
    live_range *r = &((live_range *)ctx)[buf];
    if (r->first < 0 || step < r->first)
        r->first = step;
    if (step > r->last)
        r->last = step;
}

/* Byte offset for temporary t that no placed temporary with an overlapping
 * live range occupies: first fit above every conflicting placement. Placed
 * buffers are visited largest first, so the result packs well enough. */
static int64_t first_fit(const smelt_plan *p, const live_range *r, const int32_t *placed, int nplaced,
                         int32_t t)
{
    int64_t off = 0, need = (p->bufs[t].nbytes + 63) / 64 * 64;
    for (int again = 1; again;) {
        again = 0;
        for (int i = 0; i < nplaced; i++) {
            const plan_buf *b = &p->bufs[placed[i]];
            int64_t end = b->offset + (b->nbytes + 63) / 64 * 64;
            if (r[placed[i]].last < r[t].first || r[t].last < r[placed[i]].first)
                continue;   /* never live at the same time */
            if (off < end && b->offset < off + need) {
                off = end;
                again = 1;
            }
        }
    }
    return off;
}

static int by_size_desc(const void *x, const void *y, void *ctx)
{
    const smelt_plan *p = ctx;
    int64_t a = p->bufs[*(const int32_t *)x].nbytes, b = p->bufs[*(const int32_t *)y].nbytes;
    return a < b ? 1 : a > b ? -1 : *(const int32_t *)x - *(const int32_t *)y;
}

/* Insertion sort (the temporaries of one plan are few). */
static void sort_temps(const smelt_plan *p, int32_t *t, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && by_size_desc(&t[j - 1], &t[j], (void *)p) > 0; j--) {
            int32_t x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
}

void plan_assign_arena(smelt_plan *p)
{
    live_range *r = malloc(sizeof *r * (size_t)(p->nbufs + 1));
    int32_t *temps = malloc(sizeof *temps * (size_t)(p->nbufs + 1));
    if (!r || !temps)
        abort();
    for (int32_t i = 0; i < p->nbufs; i++)
        r[i] = (live_range){ -1, -1 };
    for (int32_t s = 0; s < p->nsteps; s++)
        step_bufs(p, s, widen, r);
    int n = 0;
    for (int32_t i = 0; i < p->nbufs; i++)
        if (p->bufs[i].kind == PB_TEMP)
            temps[n++] = i;
    sort_temps(p, temps, n);
    p->arena_bytes = 0;
    for (int i = 0; i < n; i++) {
        plan_buf *b = &p->bufs[temps[i]];
        b->offset = first_fit(p, r, temps, i, temps[i]);
        if (b->offset + b->nbytes > p->arena_bytes)
            p->arena_bytes = b->offset + b->nbytes;
    }
    free(r);
    free(temps);
}

/* The arena of temporaries: one per thread, shared by every plan that
 * runs on it (plans on one thread run one at a time; a run nested in a
 * host call finds the slot taken and allocates its own, which the slot
 * keeps if larger). It grows to the largest arena a thread needed and is
 * freed with the thread (smelt_release_thread_arena frees it sooner). */
typedef struct thread_arena {
    char *p;
    size_t cap;
    int huge;
} thread_arena;

static pthread_key_t g_arena_key;
static pthread_once_t g_arena_once = PTHREAD_ONCE_INIT;
static int g_arena_key_ok;

static void arena_slot_free(void *v)
{
    thread_arena *a = v;
    free(a->p);
    free(a);
}

static void arena_key_make(void)
{
    g_arena_key_ok = pthread_key_create(&g_arena_key, arena_slot_free) == 0;
}

static thread_arena *arena_slot(int make)
{
    pthread_once(&g_arena_once, arena_key_make);
    if (!g_arena_key_ok)
        return NULL;
    thread_arena *a = pthread_getspecific(g_arena_key);
    if (!a && make && (a = calloc(1, sizeof *a)) && pthread_setspecific(g_arena_key, a)) {
        free(a);
        a = NULL;
    }
    return a;
}

/* An arena of at least need bytes (its size in *cap), or NULL. */
static char *arena_take(size_t need, int huge, size_t *cap)
{
    thread_arena *a = arena_slot(0);
    if (a && a->p && a->cap >= need) {
        char *p = a->p;
        *cap = a->cap;
        a->p = NULL;
        if (huge && !a->huge)
            kern_advise_huge(p, a->cap);   /* collapsed in the background */
        a->huge |= huge;
        return p;
    }
    if (a && a->p) {   /* too small: replaced by a larger one */
        free(a->p);
        a->p = NULL;
    }
    *cap = need;
    return kern_alloc_temp(need, huge);
}

static void arena_give(char *p, size_t cap, int huge)
{
    thread_arena *a = arena_slot(1);
    if (!a || (a->p && a->cap >= cap)) {
        free(p);
        return;
    }
    free(a->p);
    a->p = p;
    a->cap = cap;
    a->huge = huge;
}

void smelt_release_thread_arena(void)
{
    thread_arena *a = arena_slot(0);
    if (a) {
        free(a->p);
        a->p = NULL;
        a->cap = 0;
    }
}

#define MAX_STACK_SLOTS 64

/* A matmul step; B from the step's pack when its input's stamp is known. */
static int run_matmul(const plan_step *s, void **bufs, const smelt_input_stamp *stamps,
                      char *err, size_t errlen)
{
    size_t es = smelt_dtype_size(s->mm.dtype);
    const char *a = (const char *)bufs[s->a_buf] + s->a_off * (int64_t)es;
    const char *b = (const char *)bufs[s->b_buf] + s->b_off * (int64_t)es;
    if (s->pack && stamps && stamps[s->b_input].owner) {
        kern_matmul_stamp st = { stamps[s->b_input].owner, stamps[s->b_input].version, stamps[s->b_input].always };
        return kern_matmul_packed(&s->mm, a, b, bufs[s->c_buf], s->pack, &st, err, errlen);
    }
    return kern_matmul(&s->mm, a, b, bufs[s->c_buf], err, errlen);
}

static int run_sdpa(const smelt_plan *p, const plan_step *s, void **bufs, char *err, size_t errlen)
{
    const plan_sdpa *a = s->attn;
    const void *src[PLAN_SDPA_OUT] = { NULL };
    if (a->flex)
        return plan_run_flex(p, s, bufs, err, errlen);
    int mask = a->mode ? 5 : 3;
    for (int k = 0; k < a->nin; k++) {
        size_t es = k == mask && a->d.mask_kind == KERN_SDPA_BOOL_MASK ? 1 : a->d.dtype == KERN_SDPA_F32 ? 4 : 2;
        src[k] = (const char *)bufs[a->buf[k]] + a->off[k] * (int64_t)es;
    }
    float *out = bufs[a->buf[PLAN_SDPA_OUT]];
    if (!a->mode)
        return kern_sdpa(&a->d, src[0], src[1], src[2], src[3], out, err, errlen);
    int64_t batch = 1;
    for (int i = 0; i < a->d.nb; i++)
        batch *= a->d.bdims[i];
    float *dk = out + batch * a->d.L * a->d.E, *dv = dk + batch * a->d.S * a->d.E;
    return kern_sdpa_backward(&a->d, src[0], src[1], src[2], src[5], src[3], src[4], out, dk, dv, err, errlen);
}

static int run_conv(const plan_step *s, void **bufs, char *err, size_t errlen)
{
    const plan_conv *c = s->conv;
    const float *src[3] = { NULL, NULL, NULL };
    for (int k = 0; k < c->nin; k++)
        src[k] = (const float *)bufs[c->buf[k]] + c->off[k];
    if (c->mode == 1)
        return kern_conv_backward_data(&c->d, src[0], src[1], bufs[c->buf[3]], err, errlen);
    if (c->mode == 2)
        return kern_conv_backward_weights(&c->d, src[0], src[1], bufs[c->buf[3]], err, errlen);
    return kern_conv(&c->d, src[0], src[1], src[2], bufs[c->buf[3]], err, errlen);
}

int plan_run_call(const smelt_plan *p, const plan_step *s, void **bufs, smelt_host_call_fn host, void *ctx,
                  char *err, size_t errlen)
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
        out[k].data = p->bufs[c->out_buf[k]].kind == PB_HOST ? NULL : bufs[c->out_buf[k]];
    }
    if (host(ctx, c->id, c->nin, in, c->nout, out, err, errlen))
        return -1;
    for (int k = 0; k < c->nout; k++)
        if (p->bufs[c->out_buf[k]].kind == PB_HOST) {
            if (!out[k].data)
                return snprintf(err, errlen, "host call %d gave no memory for result %d", (int)c->id, k), -1;
            bufs[c->out_buf[k]] = out[k].data;
        }
    return 0;
}

/* ---------- profiling ---------- */

static _Atomic int g_profiling;

void smelt_plan_set_profiling(int on) { atomic_store(&g_profiling, on != 0); }
int smelt_plan_profiling(void) { return atomic_load(&g_profiling); }

int64_t plan_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

void smelt_plan_profile_reset(smelt_plan *p)
{
    for (int32_t s = 0; p->step_ns && s < p->nsteps; s++)
        atomic_store(&p->step_ns[s], 0);
    atomic_store(&p->prof_runs, 0);
}

/* What step s does, in a few words. */
static void step_text(const smelt_plan *p, int32_t s, char *buf, size_t n)
{
    const plan_step *st = &p->steps[s];
    if (st->kind == PS_MATMUL) {
        const kern_matmul_desc *m = &st->mm;
        int nd = m->ndim;
        snprintf(buf, n, "matmul [..%lld,%lld]@[..%lld,%lld] %s%s", (long long)m->a_dims[nd - 2],
                 (long long)m->a_dims[nd - 1], (long long)m->b_dims[nd - 2], (long long)m->b_dims[nd - 1],
                 smelt_dtype_name(m->dtype), m->c_f32 ? "->float32" : "");
    } else if (st->kind == PS_SDPA) {
        const kern_sdpa_desc *d = &st->attn->d;
        snprintf(buf, n, "%s%s L %lld S %lld E %lld%s%s", st->attn->flex ? "flex attention" : "sdpa",
                 st->attn->mode ? " backward" : "", (long long)d->L,
                 (long long)d->S, (long long)d->E, d->causal ? " causal" : "", d->mask_kind ? " masked" : "");
    } else if (st->kind == PS_CALL) {
        snprintf(buf, n, "host call %d", (int)st->call->id);
    } else if (st->kind == PS_CONV) {
        const kern_conv_desc *d = &st->conv->d;
        static const char *const what[3] = { "conv", "conv backward input", "conv backward weight" };
        snprintf(buf, n, "%s %lld->%lld k%lld in%lld groups %lld%s", what[st->conv->mode], (long long)d->c,
                 (long long)d->o,
                 (long long)d->k[0], (long long)d->in[0], (long long)d->groups,
                 d->y_strides[1] == 1 && d->o > 1 ? " channels-last" : "");
    } else {
        const kir_kernel *k = &p->kernels[st->kernel];
        int o = snprintf(buf, n, "kernel %d [", (int)st->kernel);
        for (int v = 0; v < k->nvars && o > 0 && (size_t)o < n; v++)
            o += snprintf(buf + o, n - (size_t)o, "%s%lld%s", v ? "," : "", (long long)k->size[v],
                          k->rmask >> v & 1 ? "r" : "");
        if (o > 0 && (size_t)o < n)
            snprintf(buf + o, n - (size_t)o, "] %s", ind_backend_of(st->backend)->name);
    }
}

char *smelt_plan_profile_text(const smelt_plan *p)
{
    int32_t *order = malloc(sizeof(int32_t) * (size_t)(p->nsteps + 1));
    size_t cap = 96 * (size_t)(p->nsteps + 1) + 64;
    char *out = malloc(cap), line[128];
    if (!order || !out) {
        free(order);
        free(out);
        return NULL;
    }
    int64_t total = 0;
    for (int32_t s = 0; s < p->nsteps; s++) {
        order[s] = s;
        total += atomic_load(&p->step_ns[s]);
    }
    for (int32_t i = 1; i < p->nsteps; i++)   /* slowest first */
        for (int32_t j = i; j > 0 && atomic_load(&p->step_ns[order[j]]) > atomic_load(&p->step_ns[order[j - 1]]); j--) {
            int32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    size_t o = (size_t)snprintf(out, cap, "%lld runs, %.3f ms in steps\n", (long long)atomic_load(&p->prof_runs),
                                (double)total / 1e6);
    for (int32_t i = 0; i < p->nsteps && o < cap; i++) {
        int64_t ns = atomic_load(&p->step_ns[order[i]]);
        step_text(p, order[i], line, sizeof line);
        o += (size_t)snprintf(out + o, cap - o, "%10.3f ms %5.1f%%  %s\n", (double)ns / 1e6,
                              total ? 100.0 * (double)ns / (double)total : 0.0, line);
    }
    free(order);
    return out;
}

int smelt_plan_run(const smelt_plan *p, void *const *inputs, void *const *outputs,
                   char *err, size_t errlen)
{
    return smelt_plan_run_host(p, inputs, outputs, NULL, NULL, err, errlen);
}

int smelt_plan_run_host(const smelt_plan *p, void *const *inputs, void *const *outputs,
                        smelt_host_call_fn host, void *ctx, char *err, size_t errlen)
{
    return smelt_plan_run_stamped(p, inputs, outputs, NULL, host, ctx, err, errlen);
}

int smelt_plan_packed_inputs(const smelt_plan *p, const int32_t **which)
{
    *which = p->packed_inputs;
    return p->npacked;
}

void smelt_plan_release_packs(smelt_plan *p, int32_t input)
{
    for (int32_t k = 0; p && k < p->nsteps; k++)
        if (p->steps[k].pack && (input < 0 || p->steps[k].b_input == input))
            kern_matmul_pack_release(p->steps[k].pack);
}

/* ---------- LLVM's code pages between compiles ----------
 *
 * A compile pages in some 30 MB of LLVM's library code (jit.c
 * cpu_jit_trim), needed again only by the next compile. Dropping it costs
 * about 1 ms, and the next compile about 2 ms of page faults, so it goes at
 * once only after compiling a plan that moves TRIM_NOW_BYTES or more per
 * run (where it would add to the run's peak); otherwise the first plan run
 * TRIM_QUIET_NS after the last compile drops it. */
enum { TRIM_NOW_BYTES = 4 << 20 };
#define TRIM_QUIET_NS 200000000LL
static _Atomic(int64_t) trim_after;   /* 0: nothing to drop */

void plan_after_compile(const smelt_plan *p)
{
    int64_t bytes = p->arena_bytes;
    for (int32_t i = 0; p->graph && i < p->graph->nout; i++) {
        const smelt_node *n = &p->graph->nodes[p->graph->outputs[i]];
        bytes += smelt_node_numel(n) * (int64_t)smelt_dtype_size((smelt_dtype)n->dtype);
    }
    if (bytes >= TRIM_NOW_BYTES) {
        atomic_store(&trim_after, 0);
        cpu_jit_trim();
    } else {
        atomic_store(&trim_after, plan_now_ns() + TRIM_QUIET_NS);
    }
}

static void trim_if_quiet(void)
{
    int64_t t = atomic_load_explicit(&trim_after, memory_order_relaxed);
    if (t && plan_now_ns() >= t && atomic_compare_exchange_strong(&trim_after, &t, 0))
        cpu_jit_trim();
}

int smelt_plan_run_stamped(const smelt_plan *p, void *const *inputs, void *const *outputs,
                           const smelt_input_stamp *stamps, smelt_host_call_fn host, void *ctx,
                           char *err, size_t errlen)
{
    if (p->code_only)
        return snprintf(err, errlen, "this plan was compiled for a named cpu to read its code, not to run"), -1;
    if (p->be && p->be->device_memory)
        return snprintf(err, errlen, "this plan runs on device memory (smelt_plan_run_device)"), -1;
    trim_if_quiet();
    void **bufs = calloc((size_t)p->nbufs + 1, sizeof(void *));
    int32_t flag = 0;
    int rc = 0;
    int64_t run = atomic_fetch_add((_Atomic(int64_t) *)&p->nruns, 1);
    size_t arena_cap = 0;
    int huge = run >= KERN_HUGE_AFTER;
    char *arena = p->arena_bytes ? arena_take((size_t)p->arena_bytes, huge, &arena_cap) : NULL;
    if (p->arena_bytes && !arena) {
        free(bufs);
        snprintf(err, errlen, "out of memory allocating %lld bytes", (long long)p->arena_bytes);
        return -1;
    }
    if (!bufs) {
        free(arena);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int32_t i = 0; i < p->nbufs; i++) {
        const plan_buf *b = &p->bufs[i];
        bufs[i] = b->kind == PB_INPUT ? inputs[b->index] : b->kind == PB_OUTPUT ? outputs[b->index]
                  : b->kind == PB_TEMP ? arena + b->offset : NULL;
    }
    int prof = atomic_load(&g_profiling) && p->step_ns;
    int64_t t_prev = prof ? plan_now_ns() : 0;
    if (prof)
        atomic_fetch_add((_Atomic(int64_t) *)&p->prof_runs, 1);
    for (int32_t s = 0; s < p->nsteps && !rc; s++) {
        if (prof && s) {
            int64_t t = plan_now_ns();
            atomic_fetch_add(&p->step_ns[s - 1], t - t_prev);
            t_prev = t;
        }
        const plan_step *st = &p->steps[s];
        if (st->kind == PS_MATMUL) {
            rc = run_matmul(st, bufs, stamps, err, errlen);
            continue;
        }
        if (st->kind == PS_CALL) {
            rc = plan_run_call(p, st, bufs, host, ctx, err, errlen);
            continue;
        }
        if (st->kind == PS_SDPA) {
            rc = run_sdpa(p, st, bufs, err, errlen);
            continue;
        }
        if (st->kind == PS_CONV) {
            rc = run_conv(st, bufs, err, errlen);
            continue;
        }
        const plan_kernel_code *c = &p->code[st->kernel];
        void *small[MAX_STACK_SLOTS + 3], **kb = small;
        if (c->nslots > MAX_STACK_SLOTS && !(kb = malloc(sizeof(void *) * (size_t)(c->nslots + 3)))) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
            break;
        }
        for (int32_t i = 0; i < c->nslots; i++)
            kb[i] = bufs[c->slots[i]];
        kb[c->nslots] = &flag;
        kb[c->nslots + 1] = NULL;
        kb[c->nslots + 2] = c->params;
        rc = ind_backend_of(st->backend)->launch(p, st->kernel, kb, err, errlen);
        if (kb != small)
            free(kb);
        if (rc)
            break;
        if (flag & PLAN_FLAG_INDEX) {
            snprintf(err, errlen, "index out of range");
            rc = -2;
        } else if (flag) {
            snprintf(err, errlen, "ZeroDivisionError: integer division by zero");
            rc = -1;
        }
    }
    if (prof && p->nsteps)
        atomic_fetch_add(&p->step_ns[p->nsteps - 1], plan_now_ns() - t_prev);
    if (arena)
        arena_give(arena, arena_cap, huge);
    free(bufs);
    return rc;
}
