/* hostcall.h — host calls at trace time: torch calls inside compiled
 * graphs (CALL nodes), the half that belongs to the tracer.
 *
 * A torch op that smelt has no graph op for is kept in the graph as a host
 * call: the tracer records (fn, args, kwargs) where every tensor argument
 * is replaced by a Slot(k) placeholder, the call's k-th source (tensors may
 * sit at any depth of tuples, lists and dict values). At trace time the
 * call is evaluated on meta tensors (torch's device="meta") to learn the
 * results' dtypes and shapes without computing anything (tracer_call_infer;
 * shapes.c answers the common ops without torch's meta kernels), and keyed
 * by a hash stable across processes (tracer_call_key). At run time
 * pyext/hostcall.c wraps the plan's buffers as tensors and runs the same
 * template through tracer_call_invoke.
 *
 * A table of calls is a Python list; entry id is the tuple (fn, args,
 * kwargs) of host call id (kwargs a dict, possibly empty).
 * Include after Python.h.
 */
#ifndef SMELT_TRACER_HOSTCALL_H
#define SMELT_TRACER_HOSTCALL_H

#include "../inductor/graph.h"

/* Module set-up: creates smelt._C.Slot (Slot(k); .index; repr "Slot(k)")
 * in module and caches what the functions below need (torch.empty, the
 * meta device, torch's dtypes, ...). 0, or -1 with an exception. */
int tracer_calls_init(PyObject *module);
void tracer_calls_fini(void);

/* A new Slot(k); NULL with an exception. */
PyObject *tracer_slot_new(int k);

/* k when o is Slot(k), else -1 (no exception). */
int tracer_slot_index(PyObject *o);

/* "module.qualname" of callable fn, for messages and keys (the module of
 * its defining class for method descriptors). New reference, or NULL with
 * an exception. */
PyObject *tracer_call_name(PyObject *fn);

/* A 64-bit key, stable across processes for the same callable and
 * constant arguments: FNV-1a over the callable's module and qualified name
 * and repr() of args and kwargs (Slots print as Slot(k)). 0, or -1 with an
 * exception (an argument whose repr fails). */
int tracer_call_key(PyObject *fn, PyObject *args, PyObject *kwargs, uint64_t *key);

/* fn(*args, **kwargs) with every Slot(k) replaced by vals[k] (inside exact
 * tuples, lists and dict values at any depth) and grad mode off. args: a
 * tuple; kwargs: a dict or None. New reference, or NULL with an exception
 * (IndexError for a Slot(k) with k >= n). */
PyObject *tracer_call_invoke(PyObject *fn, PyObject *args, PyObject *kwargs, PyObject *const *vals, int n);

/* Result metadata of a host call. */
typedef struct tracer_call_meta {
    int nout;                                   /* 1..SMELT_MAX_SRC */
    uint8_t dtypes[SMELT_MAX_SRC];
    int ndims[SMELT_MAX_SRC];
    int64_t shapes[SMELT_MAX_SRC][SMELT_MAX_DIMS];
    uint8_t is_view[SMELT_MAX_SRC];             /* the result is a view of an input */
    uint8_t has_strides;                        /* strides[] hold the meta results' strides (a meta
                                                   run, not shape rules) */
    int64_t strides[SMELT_MAX_SRC][SMELT_MAX_DIMS];
    int8_t view_of[SMELT_MAX_SRC];              /* the source the result is a view of, or -1 */
    int64_t view_off[SMELT_MAX_SRC];            /* its storage offset in that source's storage */
} tracer_call_meta;

/* Evaluates fn(*args, **kwargs) on meta tensors with the dtypes and shapes
 * of srcs[0..nsrc), contiguous or with strides src_strides (eager's). Returns 0 with *m filled; 1 when the call
 * cannot be a host call (the meta call raised, returned something other
 * than a tensor or a tuple/list of 1..SMELT_MAX_SRC tensors, or a
 * dtype/rank smelt does not have), with the reason in msg and no exception
 * set; -1 with an exception on an internal error. */
int tracer_call_infer(PyObject *fn, PyObject *args, PyObject *kwargs, int nsrc, const smelt_node *const *srcs,
                      const int64_t (*src_strides)[SMELT_MAX_DIMS], tracer_call_meta *m, char *msg,
                      size_t msglen);

/* Meta calls tracer_call_infer has made in this process (tests check that
 * shape rules spare them). */
long tracer_meta_runs(void);

/* Shared by both halves of host calls: the pending exception, normalised
 * with its traceback attached and cleared (never NULL while one is set);
 * "Type: text" of exception value v into buf; the ints v[0..n) as a tuple
 * (new reference, or NULL with an exception); the truth of r.<name>()
 * (method) or r.<name>: 0/1, or -1 with an exception. */
PyObject *tracer_call_exception(void);
void tracer_call_exc_text(PyObject *v, char *buf, size_t len);
PyObject *tracer_int_tuple(const int64_t *v, int n);
int tracer_tensor_flag(PyObject *r, PyObject *name, int method);

#endif
