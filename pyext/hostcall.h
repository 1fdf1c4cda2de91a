/* hostcall.h — torch calls inside compiled graphs (CALL nodes).
 *
 * A torch op that smelt has no graph op for is kept in the graph as a host
 * call: the tracer records (fn, args, kwargs) where every tensor argument
 * is replaced by a Slot(k) placeholder, the call's k-th source (tensors may
 * sit at any depth of tuples, lists and dict values). At trace time the
 * call is evaluated on meta tensors (torch's device="meta") to learn the
 * results' dtypes and shapes without computing anything; at run time the
 * plan hands the call's sources to pyext_hostcall_run, which wraps them as
 * torch tensors without copying (DLPack), calls fn and copies each result
 * into the plan's output buffer.
 *
 * A table of calls is a Python list; entry id is the tuple (fn, args,
 * kwargs) of host call id (kwargs a dict, possibly empty).
 * Include after Python.h.
 */
#ifndef SMELT_PYEXT_HOSTCALL_H
#define SMELT_PYEXT_HOSTCALL_H

#include "../inductor/compile.h"
#include "../inductor/graph.h"

/* Module set-up: creates smelt._C.Slot (Slot(k); .index; repr "Slot(k)")
 * and caches what the other functions need (torch.from_dlpack, the meta
 * device, ...). 0, or -1 with an exception. */
int pyext_hostcall_init(PyObject *module);

/* A new Slot(k); NULL with an exception. */
PyObject *pyext_slot_new(int k);

/* A 64-bit key, stable across processes for the same callable and
 * constant arguments: FNV-1a over the callable's module and qualified name
 * and repr() of args and kwargs (Slots print as Slot(k)). 0, or -1 with an
 * exception (an argument whose repr fails). */
int pyext_hostcall_key(PyObject *fn, PyObject *args, PyObject *kwargs, uint64_t *key);

/* Result metadata of a host call, from running it on meta tensors with the
 * dtypes and shapes (contiguous) of srcs[0..nsrc). */
typedef struct pyext_call_meta {
    int nout;                                   /* 1..SMELT_MAX_SRC */
    uint8_t dtypes[SMELT_MAX_SRC];
    int ndims[SMELT_MAX_SRC];
    int64_t shapes[SMELT_MAX_SRC][SMELT_MAX_DIMS];
    uint8_t is_view[SMELT_MAX_SRC];             /* the result is a view of an input */
} pyext_call_meta;

/* Evaluates fn(*args, **kwargs) on meta tensors standing for srcs. Returns
 * 0 with *m filled; 1 when the call cannot be a host call (the meta call
 * raised, returned something other than a tensor or a tuple/list of 1..8
 * tensors, or a dtype/rank smelt does not have), with the reason in msg and
 * no exception set; -1 with an exception on an internal error. */
int pyext_hostcall_infer(PyObject *fn, PyObject *args, PyObject *kwargs, int nsrc,
                         const smelt_node *const *srcs, pyext_call_meta *m, char *msg, size_t msglen);

/* Run-time context for smelt_plan_run_host: the table of calls, and the
 * exception a call raised (fetched; the caller re-raises it after the plan
 * returns). */
typedef struct pyext_hostcall_ctx {
    PyObject *calls;       /* borrowed: list of (fn, args, kwargs) */
    PyObject *exc;         /* owned: the raised exception, or NULL */
    PyObject *keep;        /* owned: list of the result tensors whose memory
                              the plan uses (out refs with data NULL), or
                              NULL; the caller drops it after the run */
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
