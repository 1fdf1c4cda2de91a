/* smelt inductor: compile a graph to a runnable plan.
 *
 * smelt_compile lowers the graph to loop-level kernels, fuses, generates
 * code with the selected backend and returns a plan: the buffers, the kernel
 * calls and the extern calls (oneDNN matmul) in order. A plan is immutable
 * after compilation and may be run from several threads at once.
 */
#ifndef SMELT_COMPILE_H
#define SMELT_COMPILE_H

#include "graph.h"

typedef struct smelt_plan smelt_plan;

typedef struct smelt_compile_opts {
    int vector_bits;   /* 0 = the target's widest (512 with AVX-512, 256 AVX2, 128) */
    int opt_level;     /* LLVM -O level 0..3; -1 = default (2) */
    int keep_ir;       /* keep LLVM IR / assembly text for smelt_plan_code */
    /* NULL: code for the process target (the host, or SMELT_CPU). Either
     * set: code for that LLVM CPU name ("host": the host's) changed by
     * that feature string, to read only: IR/assembly text is kept, the
     * code is never loaded, no cache is used and the plan refuses to run
     * (the host may lack the target's instructions). */
    const char *cpu, *cpu_features;
    /* Inputs the caller updates in place after each run: graph input
     * update[2i] takes the value of graph output update[2i+1] (nupdate
     * pairs). The plan may write such an output straight into the
     * input's memory when nothing reads the old value after it is
     * written (smelt_plan_output_inplace); the caller then passes the
     * input's pointer for that output and skips its write-back. */
    const int32_t *update;
    int32_t nupdate;
    /* Kernels read their loop extents, index strides and bounds from a
     * table of sizes passed at run time instead of having them as
     * constants: kernels that differ only in sizes share one compiled
     * function (plans of a symbolic entry, made per size, then generate
     * code only for kernels whose structure is new). SMELT_PARAM_SIZES=1
     * turns it on for every compile (tests). */
    int param_sizes;
    /* The back end of the plan's kernels (backend.h): "cpu", "spirv";
     * NULL: SMELT_BACKEND, else "cpu". An unavailable one falls back to
     * the CPU (logged once). */
    const char *backend;
    /* Set ("sm_90"): CUDA C for that architecture, compiled by NVRTC, to
     * read (code "ir": the CUDA C, "asm": the PTX): never run, no cache
     * (as cpu). */
    const char *cuda_arch;
    /* The CUDA device (its number) whose memory a "cuda" plan's buffers are
     * in: its code is built for that device's architecture and loaded in
     * its primary context. */
    int device;
} smelt_compile_opts;

/* Returns NULL with a message in err on user-caused failure (unsupported
 * dtype for an op, an unknown cpu, ...). The graph must verify. opts may be
 * NULL (defaults: the process target's vector width, -O2, keep_ir off).
 * Unless keep_ir is on or a cpu is named, the plan
 * (launch steps and machine code) is looked up in, and else stored to,
 * the disk cache (diskcache.h) under the graph's canonical
 * serialisation and everything that changes the code. */
smelt_plan *smelt_compile(const smelt_graph *g, const smelt_compile_opts *opts,
                          char *err, size_t errlen);

/* Runs the plan. inputs[k] points at the first element of graph input k,
 * laid out with the shape and strides declared on that INPUT node. outputs[k]
 * points at a caller-allocated contiguous buffer with the dtype and shape of
 * graph output k. Safe to call without the GIL. Returns 0, -2 with err
 * when an index was out of range (GATHER, CHECKIDX: the outputs are not
 * meaningful), or -1 with err (e.g. integer division by zero detected, a
 * plan compiled for another cpu). */
int smelt_plan_run(const smelt_plan *p, void *const *inputs, void *const *outputs,
                   char *err, size_t errlen);

/* The graph input whose memory graph output k is written into (see
 * smelt_compile_opts.update), or -1: its own buffer. */
int smelt_plan_output_inplace(const smelt_plan *p, int k);

/* A tensor handed to or expected from the host: data points at element 0. */
typedef struct smelt_tensor_ref {
    void *data;
    uint8_t dtype;                      /* smelt_dtype */
    uint8_t ndim;
    int64_t shape[SMELT_MAX_DIMS];
    int64_t strides[SMELT_MAX_DIMS];    /* in elements */
} smelt_tensor_ref;

/* Runs host call `id` of the graph (its CALL nodes): in[0..nin) are the
 * call's sources (any strides, read-only), out[0..nout) contiguous buffers
 * the host fills with the call's results. An out ref whose data is NULL
 * asks the host for the memory instead: it sets data to a contiguous block
 * holding that result (never memory of an in ref: the plan may reuse that
 * once the call is done), valid until the plan run returns. Called on the
 * thread that runs the plan, without the GIL held, one call at a time. 0,
 * or -1 with err. */
typedef int (*smelt_host_call_fn)(void *ctx, int32_t id, int nin, const smelt_tensor_ref *in,
                                  int nout, smelt_tensor_ref *out, char *err, size_t errlen);

/* smelt_plan_run for plans with CALL steps: `call` runs them (with ctx).
 * With call NULL a CALL step fails with an error. */
int smelt_plan_run_host(const smelt_plan *p, void *const *inputs, void *const *outputs,
                        smelt_host_call_fn call, void *ctx, char *err, size_t errlen);

/* What a graph input's data is, for inputs the plan keeps packed copies
 * of (smelt_plan_packed_inputs): the caller guarantees that one (owner,
 * data pointer, version) always names the same contents (e.g. owner: a
 * serial number for the tensor object, held alive while current; version:
 * torch's version counter, bumped by every in-place write). owner 0:
 * unknown, the input is read directly. */
typedef struct smelt_input_stamp {
    uint64_t owner;
    int64_t version;
    int always;   /* pack whatever the budget (weight_packing="always") */
} smelt_input_stamp;

/* smelt_plan_run_host with stamps[k] for graph input k (only those of
 * smelt_plan_packed_inputs are read); stamps NULL: all unknown. A matmul
 * whose B is a packed input reuses its packed copy while the stamp and
 * pointer match, else packs it again. */
int smelt_plan_run_stamped(const smelt_plan *p, void *const *inputs, void *const *outputs,
                           const smelt_input_stamp *stamps, smelt_host_call_fn call, void *ctx,
                           char *err, size_t errlen);

/* The graph inputs some matmul reads as a packed copy (weights): their
 * count, and in *which their input numbers (valid as long as the plan). */
int smelt_plan_packed_inputs(const smelt_plan *p, const int32_t **which);

/* Frees the packed copies of graph input `input` (-1: of every input)
 * now; a later run packs again. Safe while runs are in flight. */
void smelt_plan_release_packs(smelt_plan *p, int32_t input);

void smelt_plan_free(smelt_plan *p);

/* Step profiling, process-wide switch (off by default): while on, every
 * plan run adds each step's wall time to the plan's counters. */
void smelt_plan_set_profiling(int on);
int smelt_plan_profiling(void);
/* The plan's step times so far, one line per step, slowest first:
 * "  12.345 ms  34.5%  5 runs  matmul [1024,512]@[512,50257] f32". A
 * malloc'd string (caller frees), NULL on allocation failure. */
char *smelt_plan_profile_text(const smelt_plan *p);
void smelt_plan_profile_reset(smelt_plan *p);

int smelt_plan_num_kernels(const smelt_plan *p);   /* generated kernels */
const char *smelt_plan_backend(const smelt_plan *p);  /* the back end of its kernels: "cpu", "spirv" */
int64_t smelt_plan_arena_bytes(const smelt_plan *p);   /* the temporaries' arena a run needs */

/* Plans of a device-memory back end (CUDA): every buffer is in the
 * device's memory, which the host never touches. smelt_plan_device: the
 * device number (-1: a host-memory plan, run by smelt_plan_run_*). */
int smelt_plan_device(const smelt_plan *p);
/* Bytes of device memory a run needs as its arena (temporaries, the error
 * flag, scratch): the caller allocates them on the device (torch's
 * allocator, so the memory is ordered on its stream). */
int64_t smelt_plan_device_arena_bytes(const smelt_plan *p);
/* Runs a device plan: inputs/outputs as smelt_plan_run's, device
 * pointers; arena: smelt_plan_device_arena_bytes of device memory (256-
 * byte aligned); stream: the CUstream to enqueue on (torch's current);
 * host, ctx: as smelt_plan_run_host's (refs of device memory: the host
 * enqueues its work on the same stream). Asynchronous unless a kernel can
 * report an error (index checks, integer division), in which case it
 * waits for the stream to read the flag. Returns as smelt_plan_run. Safe
 * without the GIL. */
int smelt_plan_run_device(const smelt_plan *p, void *const *inputs, void *const *outputs, void *arena,
                          void *stream, smelt_host_call_fn host, void *ctx, char *err, size_t errlen);
int64_t smelt_plan_code_bytes(const smelt_plan *p);    /* object code of the kernels it holds (shared ones too) */

/* Frees the calling thread's arena of temporaries (every plan run on a
 * thread shares one, as large as the largest it needed; it is kept
 * between runs and freed with the thread). */
void smelt_release_thread_arena(void);
int smelt_plan_num_externs(const smelt_plan *p);   /* matmul and host calls */
/* Kernel functions this compile generated with LLVM; kernels whose code an
 * earlier compile in the process already loaded are shared, not counted. */
int smelt_plan_num_generated(const smelt_plan *p);
int smelt_plan_num_host_calls(const smelt_plan *p); /* CALL steps (host calls) */
/* Where the compile's time went, in milliseconds: lowering (fusion into
 * kernels), code generation (LLVM IR, optimisation and machine code, wall
 * time over the parallel batches), loading (disk cache reads, JIT linking
 * and symbol lookup). */
typedef struct smelt_compile_times {
    double lower_ms, codegen_ms, load_ms;
    int generated;              /* kernel functions generated by LLVM */
    int plan_cached;            /* 1: the whole plan came from the disk cache (no lowering) */
} smelt_compile_times;
void smelt_plan_compile_times(const smelt_plan *p, smelt_compile_times *out);
/* Text of the generated code: which = "ir" (LLVM IR, optimised), "asm"
 * (assembly), "kernels" (the fused loop-level kernels). NULL if not kept. */
const char *smelt_plan_code(const smelt_plan *p, const char *which);

#endif
