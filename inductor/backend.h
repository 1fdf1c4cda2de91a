/* backend.h — the interface every code generator implements (ggml's
 * backend interface, one struct of function pointers).
 *
 * A back end turns a lowered plan's kernels (kir.h) into code it can run,
 * hands that code to the disk cache and back, and launches one kernel at
 * a time for the executor (plan.c). Each back end lives in its own folder
 * with the same file names: codegen.c (kernel IR -> code), runtime.c (this
 * struct: loading, launching, releasing):
 *   inductor/cpu/    LLVM IR -> ORC JIT machine code, run on the thread pool
 *   inductor/spirv/  SPIR-V (OpenCL Kernel execution model), launched through
 *                    Level Zero (Intel GPUs) or OpenCL (any device that takes
 *                    SPIR-V: Intel's OpenCL CPU runtime here)
 *   inductor/cuda/   CUDA C compiled by NVRTC to a cubin, launched through
 *                    the driver API on torch's stream (device memory)
 * Host-memory back ends (cpu, spirv) run kernel steps for the host
 * executor (plan.c); their extern steps (matmul, convolution, attention,
 * host calls) run on the CPU's kernels/. A device-memory back end (cuda)
 * runs whole plans itself (run), extern steps included, and refuses at
 * compile time the steps it has no device code for (supports_step): such
 * a graph does not compile for it. Each step records its back end
 * (plan_step.backend).
 *
 * Which back end compiles a plan: smelt_compile_opts.backend, else the
 * environment's SMELT_BACKEND, else "cpu". One that is not available
 * falls back to the CPU with the reason logged once (ind_backend_select).
 */
#ifndef SMELT_BACKEND_H
#define SMELT_BACKEND_H

#include "compile.h"
#include "diskcache.h"
#include "kir.h"

/* Back end numbers as recorded in plan steps (part of the plan cache's
 * record: append only). */
typedef enum ind_backend_id { IND_BACKEND_CPU, IND_BACKEND_SPIRV, IND_BACKEND_CUDA, IND_NBACKENDS } ind_backend_id;

typedef struct ind_backend {
    const char *name;                                           /* "cpu", "spirv" */
    uint8_t id;                                                 /* ind_backend_id */
    /* 1 if the back end can run code in this process, else 0 with the
     * reason in why. Cheap after the first call; thread-safe. */
    int (*available)(char *why, size_t n);
    /* Optional (NULL: every kernel): 1 if kernel k of p can be compiled
     * for this back end; else 0 with the reason in why. A plan with an
     * unsupported kernel is compiled for the CPU instead (logged). */
    int (*supports)(const smelt_plan *p, const kir_kernel *k, char *why, size_t n);
    /* The text naming everything that changes the generated code under
     * opts o (generator version, build, toolchain, target): part of the
     * disk cache's key. malloc'd; NULL with err if unavailable. */
    char *(*code_key)(const smelt_compile_opts *o, char *err, size_t errlen);
    /* Generates code for every kernel of p (lowered) and makes it
     * runnable: fills p->code (slots, launch shape, entry points). 0, or -1
     * with err. */
    int (*codegen)(smelt_plan *p, const smelt_compile_opts *o, char *err, size_t errlen);
    /* The code p runs as blobs for the disk cache (*blobs malloc'd; the
     * bytes belong to p): their count, or -1 if out of memory. */
    int (*code_export)(const smelt_plan *p, ind_blob **blobs);
    /* Makes p (decoded from the cache: slots and launch fields set) runnable
     * from the blobs code_export gave. 0, or -1 with err. */
    int (*code_import)(smelt_plan *p, const ind_blob *blobs, int nblobs, char *err, size_t errlen);
    /* Runs kernel `kernel` of p: kb is its slot table (kb[i] = the plan
     * buffer of slot i, then the error flag's int32, a scratch slot the
     * launcher may fill, the parameter table). Called without the GIL, from
     * any thread, several at once. 0, or -1 with err (the device failed;
     * index and division errors are reported through the flag). */
    int (*launch)(const smelt_plan *p, int32_t kernel, void **kb, char *err, size_t errlen);
    /* Frees what codegen or code_import made for p (may be called on a
     * partly built plan). */
    void (*release)(smelt_plan *p);
    /* Optional: bytes of compiled code p holds (NULL: 0). */
    int64_t (*code_bytes)(const smelt_plan *p);
    /* 1: buffers live in the device's memory (see the file comment); the
     * fields below are then set. */
    int device_memory;
    /* 1 if extern step s of p can run on the device, else 0 with why. */
    int (*supports_step)(const smelt_plan *p, int32_t s, char *why, size_t n);
    /* Device arena bytes a run of p needs (smelt_plan_device_arena_bytes). */
    int64_t (*arena_bytes)(const smelt_plan *p);
    /* Runs p (smelt_plan_run_device). */
    int (*run)(const smelt_plan *p, void *const *inputs, void *const *outputs, void *arena, void *stream,
               smelt_host_call_fn host, void *ctx, char *err, size_t errlen);
    /* Optional: what a plan's run launches, to read (code "launch"),
     * made once its arena is laid out (malloc'd). */
    char *(*describe)(const smelt_plan *p);
} ind_backend;

/* The back end a step of a plan compiled by be runs on: a kernel step,
 * be's; an extern step, the CPU's unless be is a device-memory back end
 * (it runs the whole plan). */
static inline uint8_t ind_step_backend(const ind_backend *be, int is_kernel)
{
    return is_kernel || be->device_memory ? be->id : (uint8_t)IND_BACKEND_CPU;
}

extern const ind_backend ind_backend_cpu;     /* cpu/runtime.c */
extern const ind_backend ind_backend_spirv;   /* spirv/runtime.c */
extern const ind_backend ind_backend_cuda;    /* cuda/runtime.c */

/* The back end with that name or number; NULL if none. */
const ind_backend *ind_backend_named(const char *name);
const ind_backend *ind_backend_of(int id);

/* The back end a compile with opts o uses (see the file comment): never
 * NULL. An unknown name or an unavailable back end gives the CPU's, with
 * the reason logged once per name (a RuntimeWarning). *why, when not NULL, receives that reason ("" if none). */
const ind_backend *ind_backend_select(const smelt_compile_opts *o, char *why, size_t n);

/* Where back end lines go (the Python extension's "backend" log channel;
 * warning 1: a RuntimeWarning, for a requested back end that is not
 * available). NULL: nowhere. */
typedef void (*ind_backend_log_fn)(int warning, const char *line);
void ind_backend_set_log(ind_backend_log_fn fn);
void ind_backend_note(int warning, const char *line);

#endif
