/* hostcall.h — torch calls inside compiled graphs (CALL nodes), the
 * run-time half.
 *
 * The tracer records each host call as (fn, args, kwargs) templates with
 * Slot(k) placeholders and infers its results (tracer/hostcall.h). At run
 * time the plan hands the call's sources to pyext_hostcall_run, which
 * wraps them as torch tensors without copying (DLPack), runs the template
 * (tracer_call_invoke) and copies each result into the plan's output
 * buffer, or hands the result's memory to the plan.
 *
 * A table of calls is a Python list; entry id is the tuple (fn, args,
 * kwargs) of host call id (kwargs a dict, possibly empty).
 * Include after Python.h.
 */
#ifndef SMELT_PYEXT_HOSTCALL_H
#define SMELT_PYEXT_HOSTCALL_H

#include "../inductor/compile.h"
#include "../inductor/graph.h"

/* Module set-up: caches what the run-time callback needs and sets up the
 * trace-time half (tracer_calls_init: smelt._C.Slot). 0, or -1 with an
 * exception. pyext_hostcall_fini (module.h) drops both. */
int pyext_hostcall_init(PyObject *module);

/* Run-time context for smelt_plan_run_host: the table of calls, and the
 * exception a call raised (fetched; the caller re-raises it after the plan
 * returns). */
typedef struct pyext_hostcall_ctx {
    PyObject *calls;       /* borrowed: list of (fn, args, kwargs) */
    PyObject *exc;         /* owned: the raised exception, or NULL */
    PyObject *keep;        /* owned: list of the result tensors whose memory
                              the plan uses (out refs with data NULL), or
                              NULL; the caller drops it after the run */
    int mismatch;          /* a result's dtype, shape or count was not the
                              graph's: exc says how; the caller runs the
                              frame eagerly instead */
    int cuda;              /* 1 + the CUDA device whose memory the refs
                              are in (a cuda plan's), 0: host memory */
} pyext_hostcall_ctx;

/* smelt_host_call_fn for the plan executor: takes the GIL, wraps in[] as
 * tensors, runs calls[id] under torch.no_grad() and copies each result into
 * its out buffer, or, for an out ref with data NULL, hands the result's own
 * memory to the plan (a contiguous copy when the result is not contiguous
 * or overlaps an input), keeping the tensor in ctx->keep. On an exception:
 * -1, err filled, the exception stored in ctx->exc. */
int pyext_hostcall_run(void *ctx, int32_t id, int nin, const smelt_tensor_ref *in, int nout,
                       smelt_tensor_ref *out, char *err, size_t errlen);

#endif
