/* runtime.c — the CUDA back end behind the backend interface (backend.h):
 * a device-memory back end that runs whole plans on an NVIDIA GPU.
 *
 * A plan's kernels become one CUDA C translation unit (codegen.c; its
 * attention steps append their own kernels, attention.c), compiled by
 * NVRTC (kernels/nvrtc.c) to a cubin for the device's architecture and
 * loaded through the driver API (kernels/cudadrv.c) in the device's
 * primary context, which torch shares. A run enqueues every step on the
 * stream torch is using (read by the caller at call time): generated
 * kernels by cuLaunchKernel, matmuls through cuBLAS (kernels/cublas.c),
 * attention through its own kernels. Temporaries, the error flag and
 * reduction scratch live in one device arena the caller allocates with
 * torch's allocator (ordered on the same stream). A run waits for the
 * stream only when one of its kernels can raise (index checks, integer
 * division): it reads the flag back.
 *
 * Launch shapes (plan_kernel_code fields, part of the plan cache record):
 * nitems = blocks, grain = threads per block; a split reduction's finish
 * runs nfinish blocks of CUDA_FINISH_BLOCK threads over scratch_bytes of
 * partials. `smelt_compile_opts.cuda_arch` ("sm_90") compiles for a named
 * architecture to read the code only (no GPU needed: the tests do it for
 * every op-table graph).
 *
 * The translation unit is compiled in chunks by NVRTC runs side by side
 * (runs of kernels; each attention step alone), one cubin and module each.
 * Disk cache blobs: a header (whether a kernel can set the error flag,
 * which chunk holds each kernel and attention step), then the cubins. The
 * code key names the generator version, NVRTC's version and the
 * architecture.
 */
#include "cuda.h"
#include "attention.h"
#include "../backend.h"
#include "../cpu/jit.h"
#include "../../kernels/cublas.h"
#include "../../kernels/cudadrv.h"
#include "../../kernels/nvrtc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDA_CODE_VERSION 2
#define CUDA_POINT_BLOCK 256    /* threads per block: a thread per point or short row */
#define CUDA_FINISH_BLOCK 128   /* threads per block of a split reduction's finish */
#define CUDA_FLAG_BYTES 256     /* the error flag's room in the arena */
#define CUDA_MAX_SDPA_LAUNCHES 8

typedef struct sdpa_code {
    cuda_launch_dim dim[CUDA_MAX_SDPA_LAUNCHES];
    void *fn[CUDA_MAX_SDPA_LAUNCHES];
    int n;
} sdpa_code;

/* The plan's code is compiled in chunks (compile_jobs of them for its
 * kernels, CUDA_MAX_CHUNKS at most in all): runs of kernels, and attention
 * steps each alone; every chunk is a cubin and a module of its own. */
#define CUDA_MAX_CHUNKS 64
#define CUDA_CHUNK_MIN_KERNELS 4

typedef struct cuda_state {
    int nchunks;
    void **cubin;            /* per chunk */
    size_t *ncubin;
    kern_cu_module **mod;
    uint8_t *kchunk;         /* per kernel: its chunk */
    uint8_t *schunk;         /* per step: an attention step's chunk */
    int flags;               /* a kernel can set the error flag: runs read it back */
    void **fn, **fin;        /* per kernel: its CUfunction and a split kernel's finish */
    sdpa_code *sdpa;         /* per step: an attention step's launches */
    int64_t scratch;         /* the largest scratch a step needs */
    uint8_t *header;         /* the disk cache header blob (cuda_export) */
} cuda_state;

static size_t align256(int64_t n) { return (size_t)(n + 255) / 256 * 256; }

/* ---------- availability ---------- */

static int cuda_available(char *why, size_t n)
{
    char w[256];
    if (!kern_nvrtc_available(w, sizeof w))
        return snprintf(why, n, "NVRTC: %s", w), 0;
    if (!kern_cu_available(w, sizeof w))
        return snprintf(why, n, "%s", w), 0;
    return 1;
}

static char *cuda_code_key(const smelt_compile_opts *o, char *err, size_t errlen)
{
    char arch[16];
    if (!cuda_available(err, errlen))
        return NULL;
    if (kern_cu_arch(o ? o->device : 0, arch, sizeof arch))
        return snprintf(err, errlen, "no CUDA device %d", o ? o->device : 0), NULL;
    char *k = malloc(256);
    if (!k)
        abort();
    snprintf(k, 256, "smelt-cuda v%d %s %s %s", CUDA_CODE_VERSION, kern_nvrtc_version_text(), arch, cpu_build_id());
    return k;
}

/* ---------- what runs on the device ---------- */

/* Every kernel kind the lowering makes runs on CUDA. */
static int cuda_supports(const smelt_plan *p, const kir_kernel *k, char *why, size_t n)
{
    (void)p, (void)k, (void)why, (void)n;
    return 1;
}

static smelt_dtype sdpa_dtype(const smelt_plan *p, const plan_step *s)
{
    return (smelt_dtype)p->bufs[s->attn->buf[0]].dtype;
}

static int cuda_supports_step(const smelt_plan *p, int32_t s, char *why, size_t n)
{
    const plan_step *st = &p->steps[s];
    char w[256];
    switch (st->kind) {
    case PS_MATMUL:
        if (!kern_cublas_supports(&st->mm, w, sizeof w))
            return snprintf(why, n, "matmul: %s", w), 0;
        if (!p->code_only && !kern_cublas_available(w, sizeof w))
            return snprintf(why, n, "matmul needs cuBLAS: %s", w), 0;
        return 1;
    case PS_SDPA:
        if (st->attn->flex)
            return snprintf(why, n, "flex attention runs on the CPU only"), 0;
        if (!cuda_sdpa_supports(&st->attn->d, sdpa_dtype(p, st), st->attn->mode, w, sizeof w))
            return snprintf(why, n, "attention: %s", w), 0;
        return 1;
    case PS_CONV:
        return snprintf(why, n, "convolutions have no CUDA kernel in smelt yet"), 0;
    default:
        return 1;
    }
}

/* ---------- code ---------- */

/* Launch shape of kernel k into its code fields (see the file comment). */
static void kernel_dims(const kir_kernel *k, plan_kernel_code *c)
{
    int64_t outer = cuda_outer_points(k);
    int lanes = cuda_kernel_lanes(k);
    c->nfinish = 0;
    c->scratch_bytes = 0;
    if (k->split > 1) {
        smelt_dtype adt = SMELT_F32;
        for (int i = 0; i < k->nitems; i++)
            if (k->items[i].kind == KI_REDUCE)
                adt = (smelt_dtype)k->items[i].acc_dtype;
        c->nitems = outer * k->split;
        c->grain = lanes;
        c->nfinish = (outer + CUDA_FINISH_BLOCK - 1) / CUDA_FINISH_BLOCK;
        c->scratch_bytes = outer * k->split * (int64_t)smelt_dtype_size(adt);
    } else if (lanes > 1) {
        c->nitems = outer;
        c->grain = lanes;
    } else {
        c->nitems = (outer + CUDA_POINT_BLOCK - 1) / CUDA_POINT_BLOCK;
        c->grain = CUDA_POINT_BLOCK;
    }
}

static void append(char **text, size_t *len, const char *s)
{
    size_t n = strlen(s);
    char *t = realloc(*text, *len + n + 1);
    if (!t)
        abort();
    memcpy(t + *len, s, n + 1);
    *text = t;
    *len += n;
}

/* The kernel whose entry points kernel k runs (its twin's, or its own). */
static int32_t entry_of(const smelt_plan *p, int32_t k)
{
    int32_t j = p->code[k].same_as;
    return j >= 0 && j < k ? j : k;
}

/* The step launch listing (code "launch"): one line per launch. */
static char *launch_text(const smelt_plan *p, const cuda_state *st)
{
    char *t = NULL, line[256];
    size_t n = 0;
    append(&t, &n, "");
    for (int32_t s = 0; s < p->nsteps; s++) {
        const plan_step *ps = &p->steps[s];
        if (ps->kind == PS_KERNEL) {
            const plan_kernel_code *c = &p->code[ps->kernel];
            snprintf(line, sizeof line, "step %d kernel k%d grid %lld block %lld", (int)s,
                     (int)entry_of(p, ps->kernel), (long long)c->nitems, (long long)c->grain);
            append(&t, &n, line);
            if (c->nfinish) {
                snprintf(line, sizeof line, " finish f%d grid %lld block %d scratch %lld", (int)entry_of(p, ps->kernel),
                         (long long)c->nfinish, CUDA_FINISH_BLOCK, (long long)c->scratch_bytes);
                append(&t, &n, line);
            }
            append(&t, &n, " slots");
            for (int32_t i = 0; i < c->nslots; i++) {
                snprintf(line, sizeof line, " %d", (int)c->slots[i]);
                append(&t, &n, line);
            }
        } else if (ps->kind == PS_MATMUL) {
            char plan[200] = "?";
            kern_cublas_plan_text(&ps->mm, plan, sizeof plan);
            snprintf(line, sizeof line, "step %d matmul cublas %s", (int)s, plan);
            append(&t, &n, line);
        } else if (ps->kind == PS_SDPA) {
            const sdpa_code *sc = &st->sdpa[s];
            snprintf(line, sizeof line, "step %d attention%s", (int)s, ps->attn->mode ? " backward" : "");
            append(&t, &n, line);
            for (int i = 0; i < sc->n; i++) {
                const cuda_launch_dim *d = &sc->dim[i];
                snprintf(line, sizeof line, " %s grid %u,%u,%u block %u shared %u", d->entry, d->grid[0], d->grid[1],
                         d->grid[2], d->block[0], d->shared);
                append(&t, &n, line);
            }
        } else {
            snprintf(line, sizeof line, "step %d (not on CUDA)", (int)s);
            append(&t, &n, line);
        }
        append(&t, &n, "\n");
    }
    for (int32_t b = 0; b < p->nbufs; b++) {
        const plan_buf *pb = &p->bufs[b];
        static const char *const kind[] = { "input", "output", "temp", "host" };
        snprintf(line, sizeof line, "buf %d %s %lld %s\n", (int)b, kind[pb->kind],
                 (long long)(pb->kind == PB_TEMP ? pb->offset : pb->index),
                 smelt_dtype_name((smelt_dtype)pb->dtype));
        append(&t, &n, line);
    }
    return t;
}

static char *cuda_describe(const smelt_plan *p) { return launch_text(p, p->backend_state); }

/* The first attention step of p with step s's descriptor, dtype and mode
 * (s itself if none before): identical steps (a model's layers) share its
 * kernels, compiled once. */
static int32_t sdpa_twin(const smelt_plan *p, int32_t s)
{
    const plan_step *ps = &p->steps[s];
    for (int32_t t = 0; t < s; t++) {
        const plan_step *pt = &p->steps[t];
        if (pt->kind == PS_SDPA && pt->attn->mode == ps->attn->mode && sdpa_dtype(p, pt) == sdpa_dtype(p, ps) &&
            !memcmp(&pt->attn->d, &ps->attn->d, sizeof ps->attn->d))
            return t;

    }
    return s;
}

/* Attention launches of every PS_SDPA step, and the scratch steps need. */
static void step_shapes(const smelt_plan *p, cuda_state *st)
{
    st->scratch = 0;
    for (int32_t k = 0; k < p->nkernels; k++)
        if (p->code[k].scratch_bytes > st->scratch)
            st->scratch = p->code[k].scratch_bytes;
    for (int32_t s = 0; s < p->nsteps; s++) {
        const plan_step *ps = &p->steps[s];
        if (ps->kind != PS_SDPA)
            continue;
        smelt_dtype dt = sdpa_dtype(p, ps);
        st->sdpa[s].n = cuda_sdpa_launches(&ps->attn->d, dt, ps->attn->mode, (int)sdpa_twin(p, s), st->sdpa[s].dim,
                                           CUDA_MAX_SDPA_LAUNCHES);
        if (st->sdpa[s].n < 0)
            abort();   /* CUDA_MAX_SDPA_LAUNCHES is above what attention.c makes (4 at most) */
        int64_t sb = cuda_sdpa_scratch_bytes(&ps->attn->d, dt, ps->attn->mode);
        if (sb > st->scratch)
            st->scratch = sb;
    }
}

static cuda_state *state_new(smelt_plan *p, int nchunks)
{
    cuda_state *st = calloc(1, sizeof *st);
    if (!st || !(st->sdpa = calloc((size_t)p->nsteps + 1, sizeof *st->sdpa)) ||
        !(st->kchunk = calloc((size_t)p->nkernels + 1, 1)) || !(st->schunk = calloc((size_t)p->nsteps + 1, 1)) ||
        !(st->cubin = calloc((size_t)nchunks + 1, sizeof *st->cubin)) ||
        !(st->ncubin = calloc((size_t)nchunks + 1, sizeof *st->ncubin)) ||
        !(st->mod = calloc((size_t)nchunks + 1, sizeof *st->mod)))
        abort();
    st->nchunks = nchunks;
    p->backend_state = st;
    return st;
}

/* Loads st's cubins on the plan's device and takes every entry point. */
static int load(smelt_plan *p, cuda_state *st, char *err, size_t errlen)
{
    for (int c = 0; c < st->nchunks; c++)
        if (st->ncubin[c] && !(st->mod[c] = kern_cu_module_load(p->device, st->cubin[c], st->ncubin[c], err, errlen)))
            return -1;
    st->fn = calloc((size_t)p->nkernels + 1, sizeof *st->fn);
    st->fin = calloc((size_t)p->nkernels + 1, sizeof *st->fin);
    if (!st->fn || !st->fin)
        return snprintf(err, errlen, "out of memory"), -1;
    char name[40];
    for (int32_t k = 0; k < p->nkernels; k++) {
        kern_cu_module *m = st->kchunk[k] < st->nchunks ? st->mod[st->kchunk[k]] : NULL;
        int32_t e = entry_of(p, k);
        if (!m)
            return snprintf(err, errlen, "kernel %d has no module", (int)k), -1;
        snprintf(name, sizeof name, "k%d", (int)e);
        if (!(st->fn[k] = kern_cu_function(m, name, 0, err, errlen)))
            return -1;
        snprintf(name, sizeof name, "f%d", (int)e);
        if (p->code[k].nfinish && !(st->fin[k] = kern_cu_function(m, name, 0, err, errlen)))
            return -1;
    }
    for (int32_t s = 0; s < p->nsteps; s++) {
        kern_cu_module *m = st->sdpa[s].n > 0 && st->schunk[s] < st->nchunks ? st->mod[st->schunk[s]] : NULL;
        if (st->sdpa[s].n > 0 && !m)
            return snprintf(err, errlen, "attention step %d has no module", (int)s), -1;
        for (int i = 0; i < st->sdpa[s].n; i++)
            if (!(st->sdpa[s].fn[i] = kern_cu_function(m, st->sdpa[s].dim[i].entry, st->sdpa[s].dim[i].shared, err,
                                                      errlen)))
                return -1;
    }
    return 0;
}

/* ---------- compiling in chunks ---------- */

typedef struct chunk_job {
    char *src;
    const char *arch;
    void *cubin;
    size_t ncubin;
    char *ptx;               /* when asked for */
    int want_ptx, rc;
    char err[1024];
} chunk_job;

typedef struct chunk_pool {
    chunk_job *jobs;
    int n;
    _Atomic int next;
} chunk_pool;

static void *chunk_worker(void *arg)
{
    chunk_pool *pool = arg;
    for (int i; (i = atomic_fetch_add(&pool->next, 1)) < pool->n;) {
        chunk_job *j = &pool->jobs[i];
        j->rc = kern_nvrtc_compile(j->src, j->arch, &j->cubin, &j->ncubin, j->want_ptx ? &j->ptx : NULL, j->err,
                                   sizeof j->err);
    }
    return NULL;
}

/* NVRTC runs side by side: SMELT_CUDA_JOBS, else 1. NVRTC 13 serialises
 * the compiles of one process (measured here: one unit alone 1.7 s, two
 * on two threads 3.5 s), so more threads only pay off with an NVRTC that
 * does not. */
static int compile_jobs(void)
{
    const char *e = getenv("SMELT_CUDA_JOBS");
    long n = e && *e ? strtol(e, NULL, 10) : 1;
    return n < 1 ? 1 : n > CUDA_MAX_CHUNKS ? CUDA_MAX_CHUNKS : (int)n;
}

/* Compiles every job, on up to `threads` threads (this one included). */
static void compile_all(chunk_job *jobs, int n, int threads)
{
    chunk_pool pool = { jobs, n, 0 };
    pthread_t t[CUDA_MAX_CHUNKS];
    int started = 0;
    for (int i = 1; i < threads && i < n; i++)
        if (!pthread_create(&t[started], NULL, chunk_worker, &pool))
            started++;
    chunk_worker(&pool);
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
}

/* Kernel k's text src[from, to) with its entry names made generic:
 * malloc'd. */
static char *kernel_shape(const char *src, size_t from, size_t to, int32_t k)
{
    char names[2][24];
    snprintf(names[0], sizeof names[0], "void k%d(", (int)k);
    snprintf(names[1], sizeof names[1], "void f%d(", (int)k);
    char *out = malloc(to - from + 1), *w = out;
    if (!out)
        abort();
    for (size_t i = from; i < to;) {
        int hit = -1;
        for (int q = 0; q < 2 && hit < 0; q++)
            if (!strncmp(src + i, names[q], strlen(names[q])))
                hit = q;
        if (hit >= 0) {
            w += sprintf(w, "void %c(", hit ? 'f' : 'k');
            i += strlen(names[hit]);
        } else {
            *w++ = src[i++];
        }
    }
    *w = 0;
    return out;
}

/* Kernels whose text is an earlier kernel's but for its names (a model's
 * repeated layers) take that kernel's entry points: same_as. */
static void kernel_twins(smelt_plan *p, const char *src, const size_t *starts)
{
    char **shape = calloc((size_t)p->nkernels + 1, sizeof *shape);
    if (!shape)
        abort();
    for (int32_t k = 0; k < p->nkernels; k++) {
        shape[k] = kernel_shape(src, starts[k], starts[k + 1], k);
        for (int32_t j = 0; j < k; j++)
            if (p->code[j].same_as < 0 && !strcmp(shape[j], shape[k])) {
                p->code[k].same_as = j;
                break;
            }
    }
    for (int32_t k = 0; k < p->nkernels; k++)
        free(shape[k]);
    free(shape);
}

static int cuda_codegen(smelt_plan *p, const smelt_compile_opts *o, char *err, size_t errlen)
{
    int64_t t0 = plan_now_ns();
    p->code = calloc((size_t)p->nkernels + 1, sizeof *p->code);
    size_t *starts = malloc(sizeof(size_t) * ((size_t)p->nkernels + 1));
    if (!p->code || !starts) {
        free(starts);
        return snprintf(err, errlen, "out of memory"), -1;
    }
    for (int32_t k = 0; k < p->nkernels; k++)
        p->code[k].same_as = -1, p->code[k].grain = 1;
    char *src = cuda_codegen_source(p, starts);
    for (int32_t k = 0; k < p->nkernels; k++)
        kernel_dims(&p->kernels[k], &p->code[k]);
    kernel_twins(p, src, starts);
    /* chunks: runs of kernels (about one per compile thread), then each
     * attention step alone (while chunks remain) */
    int jobs = compile_jobs(), ndistinct = 0;
    for (int32_t s = 0; s < p->nsteps; s++)
        ndistinct += p->steps[s].kind == PS_SDPA && sdpa_twin(p, s) == s;
    int per = (int)((p->nkernels + jobs - 1) / jobs);
    if (per < CUDA_CHUNK_MIN_KERNELS)
        per = CUDA_CHUNK_MIN_KERNELS;
    int kchunks = (int)((p->nkernels + per - 1) / per), schunks = ndistinct;
    if (kchunks + schunks > CUDA_MAX_CHUNKS)
        schunks = CUDA_MAX_CHUNKS - kchunks;
    if (ndistinct && schunks < 1)
        schunks = 1, kchunks = CUDA_MAX_CHUNKS - 1, per = (int)((p->nkernels + kchunks - 1) / kchunks);
    cuda_state *st = state_new(p, kchunks + schunks);
    chunk_job *job = calloc((size_t)st->nchunks + 1, sizeof *job);
    size_t *len = calloc((size_t)st->nchunks + 1, sizeof *len);
    if (!job || !len)
        abort();
    size_t prelude = p->nkernels ? starts[0] : strlen(src);
    for (int c = 0; c < st->nchunks; c++) {   /* every chunk starts with the prelude */
        len[c] = prelude;
        if (!(job[c].src = malloc(len[c] + 1)))
            abort();
        memcpy(job[c].src, src, len[c]);
        job[c].src[len[c]] = 0;
    }
    for (int32_t k = 0; k < p->nkernels; k++) {
        int c = (int)(k / per);
        if (p->code[k].same_as >= 0) {   /* its twin's entry points, in its twin's chunk */
            st->kchunk[k] = st->kchunk[p->code[k].same_as];
            continue;
        }
        st->kchunk[k] = (uint8_t)c;
        size_t n = starts[k + 1] - starts[k];
        if (!(job[c].src = realloc(job[c].src, len[c] + n + 1)))
            abort();
        memcpy(job[c].src + len[c], src + starts[k], n);
        len[c] += n;
        job[c].src[len[c]] = 0;
    }
    for (int32_t s = 0, j = 0; s < p->nsteps; s++)
        if (p->steps[s].kind == PS_SDPA) {
            const plan_step *ps = &p->steps[s];
            int32_t twin = sdpa_twin(p, s);
            if (twin != s) {   /* its twin's kernels, in its twin's chunk */
                st->schunk[s] = st->schunk[twin];
                continue;
            }
            int c = kchunks + j++ % schunks;
            st->schunk[s] = (uint8_t)c;
            cuda_sdpa_source(&ps->attn->d, sdpa_dtype(p, ps), ps->attn->mode, (int)s, &job[c].src, &len[c]);
        }
    free(starts);
    step_shapes(p, st);
    for (int c = 0; c < st->nchunks; c++)
        st->flags |= strstr(job[c].src, "atomicOr(flag") != NULL;
    p->times.codegen_ms = (double)(plan_now_ns() - t0) / 1e6;
    char arch[16];
    int rc = 0;
    if (o && o->cuda_arch)
        snprintf(arch, sizeof arch, "%s", o->cuda_arch);
    else if (kern_cu_arch(p->device, arch, sizeof arch))
        rc = (snprintf(err, errlen, "no CUDA device %d", p->device), -1);
    int keep = o && (o->keep_ir || o->cuda_arch);
    for (int c = 0; c < st->nchunks; c++)
        job[c].arch = arch, job[c].want_ptx = keep;
    if (!rc)
        compile_all(job, st->nchunks, jobs);
    size_t nsrc = strlen(src), nptx = 0;
    for (int c = 0; c < st->nchunks; c++) {
        if (!rc && job[c].rc)
            rc = -1, snprintf(err, errlen, "%s", job[c].err);
        st->cubin[c] = job[c].cubin;
        st->ncubin[c] = job[c].ncubin;
        nptx += job[c].ptx ? strlen(job[c].ptx) : 0;
    }
    if (keep) {   /* to read: the whole unit (kernels, then the attention steps' text) and every chunk's PTX */
        char *ptx = malloc(nptx + 1);
        if (!ptx)
            abort();
        ptx[0] = 0;
        for (int c = 0; c < st->nchunks; c++)
            if (job[c].ptx)
                strcat(ptx, job[c].ptx);
        p->text_ir = src;
        p->text_asm = ptx;
        for (int c = kchunks; c < st->nchunks; c++)   /* the attention chunks' own text, prelude left out */
            append(&p->text_ir, &nsrc, job[c].src + prelude);
    } else {
        free(src);
    }
    for (int c = 0; c < st->nchunks; c++)
        free(job[c].src), free(job[c].ptx);
    free(job);
    free(len);
    p->times.load_ms = (double)(plan_now_ns() - t0) / 1e6 - p->times.codegen_ms;
    p->ngenerated = p->times.generated = ndistinct;
    for (int32_t k = 0; k < p->nkernels; k++)
        p->ngenerated += p->code[k].same_as < 0;
    p->times.generated = p->ngenerated;
    if (o && o->cuda_arch) {   /* code to read: nothing is loaded */
        p->code_only = 1;
        return rc;
    }
    int64_t t1 = plan_now_ns();
    if (!rc)
        rc = load(p, st, err, errlen);
    if (!rc && st->nchunks) {
        size_t bytes = 0;
        for (int c = 0; c < st->nchunks; c++)
            bytes += st->ncubin[c];
        char line[300];
        snprintf(line, sizeof line, "cuda: %d kernels, %d cubins (%zu bytes) for %s: NVRTC %.1f ms on %d threads, "
                 "load %.1f ms", (int)p->ngenerated, st->nchunks, bytes, arch, p->times.load_ms, jobs,
                 (double)(plan_now_ns() - t1) / 1e6);
        ind_backend_note(0, line);
    }
    p->times.load_ms += (double)(plan_now_ns() - t1) / 1e6;
    return rc;
}

/* Blobs: [0] a header (flags, the chunk count, each kernel's chunk, each
 * step's chunk), then each chunk's cubin. */
static int cuda_export(const smelt_plan *p, ind_blob **blobs)
{
    cuda_state *st = p->backend_state;
    size_t nh = 2 + (size_t)p->nkernels + (size_t)p->nsteps;
    ind_blob *v = calloc((size_t)st->nchunks + 1, sizeof *v);
    uint8_t *h = realloc(st->header, nh);
    if (!v || !h) {
        free(v);
        return -1;
    }
    st->header = h;   /* (the blobs' bytes belong to the plan) */
    h[0] = (uint8_t)(st->flags != 0);
    h[1] = (uint8_t)st->nchunks;
    memcpy(h + 2, st->kchunk, (size_t)p->nkernels);
    memcpy(h + 2 + p->nkernels, st->schunk, (size_t)p->nsteps);
    v[0].data = h;
    v[0].len = nh;
    for (int c = 0; c < st->nchunks; c++) {
        v[1 + c].data = st->cubin[c];
        v[1 + c].len = st->ncubin[c];
    }
    *blobs = v;
    return 1 + st->nchunks;
}

static int cuda_import(smelt_plan *p, const ind_blob *blobs, int nblobs, char *err, size_t errlen)
{
    const uint8_t *h = nblobs >= 1 ? blobs[0].data : NULL;
    if (!h || blobs[0].len != 2 + (size_t)p->nkernels + (size_t)p->nsteps || h[0] > 1 || h[1] > CUDA_MAX_CHUNKS ||
        nblobs != 1 + h[1])
        return snprintf(err, errlen, "malformed CUDA blobs"), -1;
    cuda_state *st = state_new(p, h[1]);
    st->flags = h[0];
    memcpy(st->kchunk, h + 2, (size_t)p->nkernels);
    memcpy(st->schunk, h + 2 + p->nkernels, (size_t)p->nsteps);
    size_t bytes = 0;
    for (int c = 0; c < st->nchunks; c++) {
        const ind_blob *b = &blobs[1 + c];
        if (b->len < 16 || memcmp(b->data, "\177ELF", 4))
            return snprintf(err, errlen, "malformed CUDA blobs (cubin %d)", c), -1;
        if (!(st->cubin[c] = malloc(b->len)))
            return snprintf(err, errlen, "out of memory"), -1;
        memcpy(st->cubin[c], b->data, b->len);
        st->ncubin[c] = b->len;
        bytes += b->len;
    }
    step_shapes(p, st);
    int64_t t0 = plan_now_ns();
    int rc = load(p, st, err, errlen);
    if (!rc && st->nchunks) {
        char line[200];
        snprintf(line, sizeof line, "cuda: %d cubins (%zu bytes) from the disk cache, loaded in %.1f ms", st->nchunks,
                 bytes, (double)(plan_now_ns() - t0) / 1e6);
        ind_backend_note(0, line);
    }
    return rc;
}

/* ---------- running ---------- */

static int64_t cuda_arena_bytes(const smelt_plan *p)
{
    const cuda_state *st = p->backend_state;
    return (int64_t)align256(p->arena_bytes) + CUDA_FLAG_BYTES + (int64_t)align256(st ? st->scratch : 0);
}

/* Launches fn over grid x block with vals[0..n) as its arguments. */
static int launch(void *fn, int64_t grid, int64_t block, unsigned shared, void *stream, void **vals, int n, char *err,
                  size_t errlen)
{
    void *small[72], **args = n <= 72 ? small : malloc(sizeof(void *) * (size_t)n);
    if (!args)
        return snprintf(err, errlen, "out of memory"), -1;
    for (int i = 0; i < n; i++)
        args[i] = &vals[i];
    const unsigned g[3] = { (unsigned)grid, 1, 1 }, b[3] = { (unsigned)block, 1, 1 };
    int rc = kern_cu_launch(fn, g, b, shared, stream, args, err, errlen);
    if (args != small)
        free(args);
    return rc;
}

static int run_kernel(const smelt_plan *p, const cuda_state *st, int32_t k, void **bufs, void *flag, void *scratch,
                      void *stream, char *err, size_t errlen)
{
    const plan_kernel_code *c = &p->code[k];
    if (c->nitems <= 0)
        return 0;
    void *small[72], **vals = c->nslots + 2 <= 72 ? small : malloc(sizeof(void *) * ((size_t)c->nslots + 2));
    if (!vals)
        return snprintf(err, errlen, "out of memory"), -1;
    for (int32_t i = 0; i < c->nslots; i++)
        vals[i] = bufs[c->slots[i]];
    vals[c->nslots] = flag;
    vals[c->nslots + 1] = scratch;
    int n = c->nslots + 1 + (c->nfinish > 0);
    int rc = launch(st->fn[k], c->nitems, c->grain, 0, stream, vals, n, err, errlen);
    if (!rc && c->nfinish)
        rc = launch(st->fin[k], c->nfinish, CUDA_FINISH_BLOCK, 0, stream, vals, n, err, errlen);
    if (vals != small)
        free(vals);
    return rc;
}

static int run_matmul(const plan_step *s, void **bufs, void *stream, char *err, size_t errlen)
{
    size_t es = smelt_dtype_size(s->mm.dtype);
    const char *a = (const char *)bufs[s->a_buf] + s->a_off * (int64_t)es;
    const char *b = (const char *)bufs[s->b_buf] + s->b_off * (int64_t)es;
    return kern_cublas_matmul(&s->mm, a, b, bufs[s->c_buf], stream, err, errlen);
}

static int run_sdpa(const smelt_plan *p, const cuda_state *st, int32_t s, void **bufs, void *scratch, void *stream,
                    char *err, size_t errlen)
{
    const plan_step *ps = &p->steps[s];
    const plan_sdpa *a = ps->attn;
    size_t es = smelt_dtype_size(sdpa_dtype(p, ps));
    int mask = a->mode ? 5 : 3;
    void *src[PLAN_SDPA_OUT] = { NULL };
    for (int k = 0; k < a->nin; k++) {
        size_t e = k == mask && a->d.mask_kind == KERN_SDPA_BOOL_MASK ? 1 : es;
        src[k] = (char *)bufs[a->buf[k]] + a->off[k] * (int64_t)e;
    }
    char *out = bufs[a->buf[PLAN_SDPA_OUT]];
    void *vals[10];
    int n;
    if (!a->mode) {
        void *v[] = { src[0], src[1], src[2], src[3], out, scratch };
        memcpy(vals, v, sizeof v);
        n = 6;
    } else {
        int64_t batch = 1;
        for (int i = 0; i < a->d.nb; i++)
            batch *= a->d.bdims[i];
        char *dk = out + batch * a->d.L * a->d.E * (int64_t)es, *dv = dk + batch * a->d.S * a->d.E * (int64_t)es;
        void *v[] = { src[0], src[1], src[2], src[3], src[4], src[5], out, dk, dv, scratch };
        memcpy(vals, v, sizeof v);
        n = 10;
    }
    const sdpa_code *sc = &st->sdpa[s];
    for (int i = 0; i < sc->n; i++) {
        const cuda_launch_dim *d = &sc->dim[i];
        void *args[10];
        for (int j = 0; j < n; j++)
            args[j] = &vals[j];
        if (kern_cu_launch(sc->fn[i], d->grid, d->block, d->shared, stream, args, err, errlen))
            return -1;
    }
    return 0;
}

static int cuda_run(const smelt_plan *p, void *const *inputs, void *const *outputs, void *arena, void *stream,
                    smelt_host_call_fn host, void *ctx, char *err, size_t errlen)
{
    const cuda_state *st = p->backend_state;
    void *prev;
    if (kern_cu_enter(p->device, &prev, err, errlen))
        return -1;
    void **bufs = calloc((size_t)p->nbufs + 1, sizeof(void *));
    if (!bufs) {
        kern_cu_leave(prev);
        return snprintf(err, errlen, "out of memory"), -1;
    }
    char *flag = (char *)arena + align256(p->arena_bytes), *scratch = flag + CUDA_FLAG_BYTES;
    for (int32_t i = 0; i < p->nbufs; i++) {
        const plan_buf *b = &p->bufs[i];
        bufs[i] = b->kind == PB_INPUT ? inputs[b->index] : b->kind == PB_OUTPUT ? outputs[b->index]
                  : b->kind == PB_TEMP ? (char *)arena + b->offset : NULL;
    }
    int rc = st->flags ? kern_cu_memset32(flag, 0, 1, stream, err, errlen) : 0;
    for (int32_t s = 0; s < p->nsteps && !rc; s++) {
        const plan_step *ps = &p->steps[s];
        if (ps->kind == PS_KERNEL)
            rc = run_kernel(p, st, ps->kernel, bufs, flag, scratch, stream, err, errlen);
        else if (ps->kind == PS_MATMUL)
            rc = run_matmul(ps, bufs, stream, err, errlen);
        else if (ps->kind == PS_SDPA)
            rc = run_sdpa(p, st, s, bufs, scratch, stream, err, errlen);
        else if (ps->kind == PS_CALL)   /* torch ops, enqueued by the host on the same stream */
            rc = plan_run_call(p, ps, bufs, host, ctx, err, errlen);
        else
            rc = (snprintf(err, errlen, "step %d cannot run on CUDA", (int)s), -1);
    }
    free(bufs);
    int32_t f = 0;
    if (!rc && st->flags && !(rc = kern_cu_read(&f, flag, sizeof f, stream, err, errlen))) {
        if (f & PLAN_FLAG_INDEX)
            rc = -2, snprintf(err, errlen, "index out of range");
        else if (f)
            rc = -1, snprintf(err, errlen, "ZeroDivisionError: integer division by zero");
    }
    kern_cu_leave(prev);   /* (the thread's context as before: torch's current device among it) */
    return rc;
}

/* Host-memory launches do not exist for a device back end (plan.c never
 * calls this: device plans run through cuda_run). */
static int cuda_launch(const smelt_plan *p, int32_t kernel, void **kb, char *err, size_t errlen)
{
    (void)p, (void)kernel, (void)kb;
    return snprintf(err, errlen, "CUDA kernels run through smelt_plan_run_device"), -1;
}

static void cuda_release(smelt_plan *p)
{
    cuda_state *st = p->backend_state;
    if (!st)
        return;
    for (int c = 0; c < st->nchunks; c++) {
        kern_cu_module_free(st->mod[c]);
        free(st->cubin[c]);
    }
    free(st->mod);
    free(st->cubin);
    free(st->ncubin);
    free(st->kchunk);
    free(st->schunk);
    free(st->header);
    free(st->fn);
    free(st->fin);
    free(st->sdpa);
    free(st);
    p->backend_state = NULL;
}

static int64_t cuda_code_bytes(const smelt_plan *p)
{
    const cuda_state *st = p->backend_state;
    int64_t n = 0;
    for (int c = 0; st && c < st->nchunks; c++)
        n += (int64_t)st->ncubin[c];
    return n;
}

const ind_backend ind_backend_cuda = {
    .name = "cuda",
    .id = IND_BACKEND_CUDA,
    .available = cuda_available,
    .supports = cuda_supports,
    .code_key = cuda_code_key,
    .codegen = cuda_codegen,
    .code_export = cuda_export,
    .code_import = cuda_import,
    .launch = cuda_launch,
    .release = cuda_release,
    .code_bytes = cuda_code_bytes,
    .device_memory = 1,
    .supports_step = cuda_supports_step,
    .arena_bytes = cuda_arena_bytes,
    .run = cuda_run,
    .describe = cuda_describe,
};
