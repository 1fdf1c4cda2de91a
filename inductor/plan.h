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
#include "../kernels/conv.h"

#include <stdatomic.h>

/* PB_HOST: a host call's result whose memory the host provides at run time
 * (see smelt_host_call_fn); no allocation. */
typedef enum plan_buf_kind { PB_INPUT, PB_OUTPUT, PB_TEMP, PB_HOST } plan_buf_kind;

/* chlast: a PB_TEMP of rank >= 3 stored channels-last (dim 1 innermost,
 * then the last dim, ..., dim 0 outermost), as oneDNN's convolutions read
 * and write activations; every other buffer is row-major. */
typedef struct plan_buf {
    uint8_t kind;          /* plan_buf_kind */
    uint8_t dtype;
    uint8_t chlast;
    int32_t index;         /* PB_INPUT/PB_OUTPUT: graph input/output number */
    int64_t nbytes;        /* PB_TEMP: bytes to allocate */
    int64_t offset;        /* PB_TEMP: byte offset in the plan's arena */
    int32_t inplace;       /* PB_OUTPUT: 1 + the graph input it is written into (an update
                              written in place: the caller passes that input's memory for it),
                              0: its own memory */
} plan_buf;

typedef enum plan_step_kind { PS_KERNEL, PS_MATMUL, PS_CALL, PS_SDPA, PS_CONV } plan_step_kind;

/* PS_CONV: kernels/conv.c on buf[0..nin) at element offsets off[],
 * writing buf[3] (strides in d, the forward's geometry). mode 0: the
 * convolution (x, w, bias -> y); 1: its input gradient (dy, w -> dx); 2:
 * its weights gradient (x, dy -> dw). */
typedef struct plan_conv {
    kern_conv_desc d;
    int nin, mode;
    int32_t buf[4];
    int64_t off[3];
} plan_conv;

/* PS_SDPA: kernels/attention.c on buf[0..nin) at element offsets off[],
 * writing buf[PLAN_SDPA_OUT] (contiguous). mode 0: the attention (q, k, v,
 * mask -> out); 1: its gradients (q, k, v, out, g, mask -> dq, dk, dv one
 * after the other, SDPA_BWD's vector). */
#define PLAN_SDPA_OUT 6

/* A PS_SDPA step of a FLEX or FLEX_BWD node (inductor/flex.c runs it):
 * kern_sdpa_ex over batch dims (B, Hkv, Hq / Hkv), entry t being batch t /
 * H, query head t % H, with a hook that evaluates the score and mask
 * functions on tiles of KERN_SDPA_TILE_Q x KERN_SDPA_TILE_K scores
 * through plan kernels that are never steps (vars: row, key):
 *   kern[PLAN_FLEX_SCORE]   the score function (tiles of full blocks)
 *   kern[PLAN_FLEX_PART]    the score function where the mask holds, else -inf
 *   kern[PLAN_FLEX_MASK]    the mask alone, as bool (no block tables: tiles
 *                           are classified by it)
 *   kern[PLAN_FLEX_DSCORE]  the score function's derivative (backward)
 * (-1: none). Their loads of FLEX_ARGs read tile buffers tile[role] (PB_HOST
 * buffers the hook points at its own arrays: the score tile, then b, h
 * (one int32 each), the tile's query indices, its key indices, int32),
 * and they store into tile[5] (float32) or tile[6] (bool), element (i, j)
 * at i * KERN_SDPA_TILE_K + j. Block tables: kv_num_blocks, kv_indices,
 * full_kv_num_blocks, full_kv_indices (tab_buf -1: absent) of blocks bq x
 * bk, strides tab_st (0 where a dim is 1). */
enum { PLAN_FLEX_SCORE, PLAN_FLEX_PART, PLAN_FLEX_MASK, PLAN_FLEX_DSCORE, PLAN_FLEX_NKERN };
typedef struct plan_flex {
    int32_t kern[PLAN_FLEX_NKERN];
    int32_t tile[7];
    int32_t tab_buf[4];
    uint8_t tab_dt[4];
    int64_t tab_off[4];
    int64_t tab_st[4][4];
    int64_t tab_shape[3];      /* Bm, Hm, QB (kv_num_blocks') */
    int64_t tab_kb[4];         /* the index tables' last dims */
    int32_t bq, bk;
    int64_t H;
    uint8_t mask_b, mask_h;    /* no tables: tiles classified per batch entry / per head (else at 0) */
} plan_flex;

typedef struct plan_sdpa {
    kern_sdpa_desc d;
    int nin, mode;
    int32_t buf[PLAN_SDPA_OUT + 1];
    int64_t off[PLAN_SDPA_OUT];
    int flex;              /* a FLEX / FLEX_BWD step: fx holds the rest */
    plan_flex fx;
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

/* PS_MATMUL with b_input >= 0: B is a view of graph input b_input (a
 * weight), the same for every batch entry; B is then read from `pack`, a
 * copy in MKL's packed format (kernels/matmul.h) made by the first run and reused while the
 * input's stamp (smelt_plan_run_stamped) and pointer stay the same. The
 * copy (about 1.7x the size of B) lives as long as the plan. */
typedef struct plan_step {
    uint8_t kind;
    uint8_t backend;                       /* ind_backend_id it runs on (backend.h): a kernel step,
                                              the plan's; extern steps, the CPU */
    int32_t kernel;                        /* PS_KERNEL */
    kern_matmul_desc mm;                   /* PS_MATMUL */
    int32_t a_buf, b_buf, c_buf;
    int64_t a_off, b_off;                  /* element offsets */
    int32_t b_input;                       /* PS_MATMUL: see above; -1 if none */
    kern_matmul_pack *pack;                /* PS_MATMUL with b_input >= 0 (owned; NULL: none) */
    plan_call *call;                       /* PS_CALL (owned) */
    plan_sdpa *attn;                       /* PS_SDPA (owned) */
    plan_conv *conv;                       /* PS_CONV (owned) */
} plan_step;

/* Bits of a run's error flag, set by generated kernels. */
#define PLAN_FLAG_ZERODIV 1   /* integer division by zero: the run fails (-1) */
#define PLAN_FLAG_INDEX 2     /* an index out of range (CHECKIDX, GATHER): the run fails (-2) */

/* Signature of every generated kernel: items [begin, end) of its work.
 * `bufs` is the kernel's own slot table: bufs[i] = plan buffer slots[i],
 * then the error flag, then a split kernel's partials, then the table of
 * sizes parametric code reads. */
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
    int64_t *params;         /* parametric code (opts param_sizes): its sizes, bufs[nslots+2]; else NULL */
    int32_t nparams;
} plan_kernel_code;

struct smelt_plan {
    smelt_graph *graph;      /* private copy (attrs are read by codegen) */
    kir_pool pool;
    kir_kernel *kernels; int32_t nkernels, ckernels;
    plan_buf *bufs; int32_t nbufs, cbufs;
    plan_step *steps; int32_t nsteps, csteps;
    int32_t nexterns, ncalls;
    int32_t *packed_inputs;  /* distinct b_input of the steps with a pack */
    int32_t npacked;
    int32_t ngenerated;      /* kernel functions generated by this compile */
    int code_only;           /* compiled for a cpu named in the opts: text only, never runs */
    smelt_compile_times times;
    /* Temporaries live in one arena: offsets packed by liveness (buffers
     * whose step ranges do not overlap share bytes), arena_bytes in all; a
     * run takes its thread's arena (plan.c arena_take). */
    int64_t arena_bytes;
    _Atomic(int64_t) nruns;      /* runs started (huge pages from KERN_HUGE_AFTER on) */
    _Atomic(int64_t) *step_ns;   /* per step: profiled wall time (see compile.h) */
    _Atomic(int64_t) prof_runs;
    plan_kernel_code *code;  /* one per kernel, filled by the backend */
    const struct ind_backend *be;   /* the back end of its kernels (backend.h) */
    void *backend_state;     /* backend-owned (CPU: JIT resource tracker) */
    char *text_kernels, *text_ir, *text_asm;
    char *text_launch;       /* device back ends: each step's launches, one line each (code "launch") */
    int device;              /* device-memory back ends: the device it runs on (opts device) */
};

/* fold.c: g with each convolution's per-channel affine epilogue (eval
 * BatchNorm) folded into its weights and bias (a new graph; g itself when
 * there is nothing to fold; NULL with err). */
smelt_graph *ind_fold(smelt_graph *g, char *err, size_t errlen);

/* lower.c: fills pool, kernels, bufs and steps from p->graph (o: its
 * in-place updates, may be NULL). 0, or -1 with err (unsupported
 * op/dtype combination). */
int ind_lower(smelt_plan *p, const smelt_compile_opts *o, char *err, size_t errlen);
/* lower.c: human-readable listing of the kernels (malloc'd). */
char *ind_kernels_print(const smelt_plan *p);

/* kslots.c: the plan buffers kernel k reads or writes, in first-use
 * order (loads and gathers in each item's expression DAG, then its
 * store), into slots (room for p->nbufs); their count. */
int32_t ind_kernel_slots(const smelt_plan *p, const kir_kernel *k, int32_t *slots);

/* plan.c: host call step s on bufs (the plan's buffer pointers; a result
 * the host hands memory for is stored back into bufs): fills the refs'
 * data pointers and calls host; without one the plan cannot run. 0, or -1
 * with err. */
int plan_run_call(const smelt_plan *p, const plan_step *s, void **bufs, smelt_host_call_fn host, void *ctx,
                  char *err, size_t errlen);

/* flex.c: runs a flex step on the plan's buffers (its tile kernels' error
 * flag its own). 0, -1 with err, -2 when a score function's index check failed. */
int plan_run_flex(const smelt_plan *p, const plan_step *s, void **bufs, char *err, size_t errlen);
/* flex.c: calls fn(buf, step, ctx) for each buffer a flex step reads
 * besides q, k, v (out, g): its tables and what its tile kernels load. */
void plan_flex_bufs(const smelt_plan *p, const plan_step *s, int32_t step, void (*fn)(int32_t, int32_t, void *),
                    void *ctx);

/* plan.c: packs the temporaries into the arena (after codegen: uses the
 * kernels' slot tables). */
void plan_assign_arena(smelt_plan *p);
/* plan.c: CLOCK_MONOTONIC in nanoseconds (profiles, compile timings). */
int64_t plan_now_ns(void);

/* plancache.c: compiled plans in the disk cache (format in plancache.c).
 * The key of g's plan compiled with o by back end be (malloc'd, length in
 * *len; NULL if the backend is unavailable). */
uint8_t *ind_plan_cache_key(const smelt_graph *g, const smelt_compile_opts *o, const struct ind_backend *be,
                            size_t *len);
/* The plan stored under key, ready but for packs, profile counters and
 * arena (compile.c finishes it); NULL on a miss or an entry that does not
 * load (logged on the cache channel). */
smelt_plan *ind_plan_cache_load(const smelt_graph *g, const struct ind_backend *be, int device,
                                const uint8_t *key, size_t keylen);
/* Stores p (compiled from the graph key names) under key. */
void ind_plan_cache_store(const smelt_plan *p, const uint8_t *key, size_t keylen);

/* cpu/jit.c: gives back the resident pages of LLVM's library code after a
 * compile or cache load (jit.h). */
void cpu_jit_trim(void);
/* plan.c: after a compile or cache load of p: LLVM's library code pages go
 * now when p's runs are large (their peak would stack on them), else once
 * compiles have paused (checked when a plan runs). */
void plan_after_compile(const smelt_plan *p);

#endif
