/* smelt plan internals: what lowering produces and the executor runs.
 *
 * Buffers are numbered; a kernel reads/writes them through its own slot
 * table (plan_kernel_code.slots), so kernels that differ only in which
 * buffers they touch share one compiled function.
 * Steps run in order; each step's inputs were written by earlier steps.
 */
#ifndef SMELT_PLAN_H
#define SMELT_PLAN_H

#include "compile.h"
#include "kir.h"
#include "../kernels/matmul.h"
#include "../kernels/attention.h"

#include <stdatomic.h>

/* PB_HOST: a host call's result whose memory the host provides at run time
 * (see smelt_host_call_fn); no allocation. */
typedef enum plan_buf_kind { PB_INPUT, PB_OUTPUT, PB_TEMP, PB_HOST } plan_buf_kind;

typedef struct plan_buf {
    uint8_t kind;          /* plan_buf_kind */
    uint8_t dtype;
    int32_t index;         /* PB_INPUT/PB_OUTPUT: graph input/output number */
    int64_t nbytes;        /* PB_TEMP: bytes to allocate */
    int64_t offset;        /* PB_TEMP: byte offset in the plan's arena */
} plan_buf;

typedef enum plan_step_kind { PS_KERNEL, PS_MATMUL, PS_CALL, PS_SDPA } plan_step_kind;

/* PS_SDPA: kernels/attention.c on buf[0..nin) (q, k, v, mask) at element
 * offsets off[], writing buf[4] (contiguous). */
typedef struct plan_sdpa {
    kern_sdpa_desc d;
    int nin;
    int32_t buf[5];
    int64_t off[4];
} plan_sdpa;

/* PS_CALL: host call `id`: its sources are views of plan buffers (buffer,
 * element offset, the ref's shape/strides), its results fill contiguous
 * buffers. Refs' data pointers are filled at run time. */
typedef struct plan_call {
    int32_t id;
    int nin, nout;
    int32_t in_buf[SMELT_MAX_SRC], out_buf[SMELT_MAX_SRC];
    int64_t in_off[SMELT_MAX_SRC];
    smelt_tensor_ref in[SMELT_MAX_SRC], out[SMELT_MAX_SRC];
} plan_call;

typedef struct plan_step {
    uint8_t kind;
    int32_t kernel;                        /* PS_KERNEL */
    kern_matmul_desc mm;                   /* PS_MATMUL */
    int32_t a_buf, b_buf, c_buf;
    int64_t a_off, b_off;                  /* element offsets */
    plan_call *call;                       /* PS_CALL (owned) */
    plan_sdpa *attn;                       /* PS_SDPA (owned) */
} plan_step;

/* Signature of every generated kernel: items [begin, end) of its work.
 * `bufs` is the kernel's own slot table: bufs[i] = plan buffer slots[i],
 * then the error flag, then a split kernel's partials. */
typedef void (*plan_kernel_fn)(void **bufs, int64_t begin, int64_t end);

typedef struct plan_kernel_code {
    int32_t *slots;          /* kernel slot -> plan buffer */
    int32_t nslots;
    int32_t same_as;         /* an earlier kernel with identical code, or -1 */
    plan_kernel_fn fn;       /* main body (split kernels: partial sums) */
    plan_kernel_fn finish;   /* split kernels: combine partials; else NULL */
    int64_t nitems, grain;   /* work items for fn and the minimum chunk */
    int64_t nfinish;         /* split kernels: work items of finish */
    int64_t scratch_bytes;   /* split kernels: partials buffer (bufs[nbufs+1]) */
} plan_kernel_code;

struct smelt_plan {
    smelt_graph *graph;      /* private copy (attrs are read by codegen) */
    kir_pool pool;
    kir_kernel *kernels; int32_t nkernels, ckernels;
    plan_buf *bufs; int32_t nbufs, cbufs;
    plan_step *steps; int32_t nsteps, csteps;
    int32_t nexterns, ncalls;
    /* Temporaries live in one arena: offsets packed by liveness (buffers
     * whose step ranges do not overlap share bytes), arena_bytes in all.
     * A run takes the cached arena if no other run holds it (its pages are
     * then already mapped), else allocates its own; the last one back
     * stays cached. */
    int64_t arena_bytes;
    _Atomic(void *) arena_cache;
    _Atomic(int64_t) *step_ns;   /* per step: profiled wall time (see compile.h) */
    _Atomic(int64_t) prof_runs;
    plan_kernel_code *code;  /* one per kernel, filled by the backend */
    void *backend_state;     /* backend-owned (JIT resource tracker) */
    char *text_kernels, *text_ir, *text_asm;
};

/* lower.c: fills pool, kernels, bufs and steps from p->graph.
 * 0, or -1 with err (unsupported op/dtype combination). */
int ind_lower(smelt_plan *p, char *err, size_t errlen);
/* lower.c: human-readable listing of the kernels (malloc'd). */
char *ind_kernels_print(const smelt_plan *p);

/* plan.c: packs the temporaries into the arena (after codegen: uses the
 * kernels' slot tables). */
void plan_assign_arena(smelt_plan *p);
/* plan.c: frees the cached arena. */
void plan_release_arena(smelt_plan *p);

/* cpu/codegen.c: generates and loads code for every kernel, fills p->code. */
int cpu_codegen(smelt_plan *p, const smelt_compile_opts *o, char *err, size_t errlen);
void cpu_release(smelt_plan *p);

#endif
