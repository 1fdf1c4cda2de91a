/* smelt._C.Compiled: a compiled plan callable on torch tensors.
 *
 * A call checks every input against the graph's INPUT node (a CPU strided
 * torch.Tensor of the same dtype, shape and strides; strides of size-0/1
 * dims and of empty tensors are not compared, they address nothing),
 * allocates each output with torch.empty and runs the plan without the
 * GIL. A plan with host calls (CALL nodes) runs them through
 * pyext_hostcall_run, which takes the GIL back for each call; the
 * exception a call raises reaches the caller unchanged. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "hostcall.h"
#include "log.h"
#include "module.h"
#include "../kernels/memory.h"
#include "../guards/pycompat.h"

typedef struct input_spec {
    uint8_t dtype, ndim;
    int64_t shape[SMELT_MAX_DIMS], stride[SMELT_MAX_DIMS];
} input_spec;

typedef struct CompiledObject {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    smelt_plan *plan;
    Py_ssize_t nin, nout;
    input_spec *ins;
    uint8_t *out_dtypes;
    PyObject **out_shapes;   /* tuple per output, argument of torch.empty */
    size_t *out_nbytes;
    PyObject *calls;         /* table of host calls (list), NULL if the plan has none */
    int nhost;               /* smelt_plan_num_host_calls */
    int64_t ncalls;          /* calls started (outputs get huge pages from KERN_HUGE_AFTER on) */
    int eager_only;          /* a host call's result was not what the graph inferred: trusted
                                calls (a compiled frame's) run the frame eagerly from then on */
    /* Inputs the plan keeps packed copies of (weights): for each, a weak
     * reference to the tensor last passed (a dead one never matches, so a
     * new tensor at a reused address gets a new serial) and the owner
     * serial naming it in the stamps (see smelt_input_stamp). */
    int npacked;
    const int32_t *packed;
    PyObject **held;
    uint64_t *owner;
    int packing;             /* weight_packing: PYEXT_PACK_AUTO, _ALWAYS or _NEVER */
    int32_t *inplace;        /* per output: the input it is written into (the output is that
                                tensor), -1 its own; NULL when none is */
    PyObject **spare;        /* per output: the large tensor it last returned, reused by the next
                                call when nothing else refers to it (see new_output) */
    int device;              /* a plan on CUDA device `device` (smelt_plan_device), else -1 */
    PyObject *device_obj;    /* then: that torch.device */
    PyObject *kw_device;     /* ("dtype", "device") */
} CompiledObject;

/* Outputs of at least this many bytes are kept for reuse: a fresh one
 * costs its page faults (40 ms for GPT-2's 205 MB logits, more than the
 * kernel writing them), a reused one none. */
#define REUSE_MIN_BYTES ((size_t)16 << 20)

/* Owner serials: a new one for every tensor object a packed input takes. */
static _Atomic uint64_t g_owner_serial;

/* ------------------------------------------------------------------ */
/* input checks                                                       */

static PyObject *spec_tuple(const int64_t *v, int n)
{
    PyObject *t = PyTuple_New(n);
    for (int d = 0; t && d < n; d++) {
        PyObject *x = PyLong_FromLongLong(v[d]);
        if (!x) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, d, x);
    }
    return t;
}

/* Reads a tuple of ints of length n into out; 1 if it matches n ints,
 * 0 if not, -1 on error. */
static int read_ints(PyObject *seq, int n, int64_t *out)
{
    if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != n)
        return 0;
    for (int d = 0; d < n; d++) {
        out[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, d));
        if (out[d] == -1 && PyErr_Occurred())
            return -1;
    }
    return 1;
}

static int mismatch(Py_ssize_t k, const char *what, const int64_t *want, int n, PyObject *got)
{
    PyObject *w = spec_tuple(want, n);
    if (w)
        PyErr_Format(PyExc_ValueError, "input %zd: expected %s %R, got %R", k, what, w, got);
    Py_XDECREF(w);
    return -1;
}

/* Shape and strides of tensor t against the spec. */
static int check_layout(pyext_state *st, const input_spec *sp, Py_ssize_t k, PyObject *t)
{
    int64_t got[SMELT_MAX_DIMS];
    PyObject *shape = PyObject_GetAttr(t, st->s_shape);
    int ok = shape ? read_ints(shape, sp->ndim, got) : -1;
    if (ok == 1)
        ok = memcmp(got, sp->shape, sizeof got[0] * sp->ndim) == 0;
    if (ok <= 0) {
        if (ok == 0)
            mismatch(k, "shape", sp->shape, sp->ndim, shape);
        Py_XDECREF(shape);
        return -1;
    }
    Py_DECREF(shape);
    PyObject *stride = PyObject_CallMethodNoArgs(t, st->s_stride);
    ok = stride ? read_ints(stride, sp->ndim, got) : -1;
    bool empty = false;
    for (int d = 0; d < sp->ndim; d++)
        empty |= sp->shape[d] == 0;
    for (int d = 0; ok == 1 && !empty && d < sp->ndim; d++)
        ok = sp->shape[d] <= 1 || got[d] == sp->stride[d];
    if (ok == 0)
        mismatch(k, "strides", sp->stride, sp->ndim, stride);
    Py_XDECREF(stride);
    return ok == 1 ? 0 : -1;
}

/* Argument k on the CUDA device of the plan (dev): 0, or -1 with an
 * exception. */
static int check_device(pyext_state *st, PyObject *dev, Py_ssize_t k, PyObject *t)
{
    PyObject *d = PyObject_GetAttr(t, st->s_device);
    int same = d ? PyObject_RichCompareBool(d, dev, Py_EQ) : -1;
    if (same == 0)
        PyErr_Format(PyExc_ValueError, "input %zd: expected a tensor on %R, got device %R", k, dev, d);
    Py_XDECREF(d);
    return same == 1 ? 0 : -1;
}

/* Type, device, layout and dtype of argument k (dev: the plan's CUDA
 * device, NULL: the CPU). */
static int check_kind(pyext_state *st, const input_spec *sp, Py_ssize_t k, PyObject *t, PyObject *dev)
{
    if (!PyObject_TypeCheck(t, (PyTypeObject *)st->tensor_type))
        return PyErr_Format(PyExc_TypeError, "input %zd: expected a torch.Tensor, got %s", k,
                            Py_TYPE(t)->tp_name), -1;
    PyObject *v = dev ? NULL : PyObject_GetAttr(t, st->s_is_cpu);
    int cpu = dev ? 1 : v ? PyObject_IsTrue(v) : -1;
    Py_XDECREF(v);
    if (dev && check_device(st, dev, k, t))
        return -1;
    if (cpu <= 0) {
        PyObject *dev = cpu == 0 ? PyObject_GetAttr(t, st->s_device) : NULL;
        if (dev)
            PyErr_Format(PyExc_ValueError, "input %zd: expected a cpu tensor, got device %R",
                         k, dev);
        Py_XDECREF(dev);
        return -1;
    }
    if (!(v = PyObject_GetAttr(t, st->s_layout)))
        return -1;
    int same = v == st->strided;
    if (!same)
        PyErr_Format(PyExc_ValueError, "input %zd: expected a strided tensor, got %R", k, v);
    Py_DECREF(v);
    if (!same || !(v = PyObject_GetAttr(t, st->s_dtype)))
        return -1;
    same = v == st->dtypes[sp->dtype];
    if (!same)
        PyErr_Format(PyExc_TypeError, "input %zd: expected dtype %R, got %R", k,
                     st->dtypes[sp->dtype], v);
    Py_DECREF(v);
    return same ? 0 : -1;
}

/* data_ptr() of tensor t; NULL with an exception set on error. */
static void *data_ptr(pyext_state *st, PyObject *t, int *err)
{
    PyObject *p = PyObject_CallMethodNoArgs(t, st->s_data_ptr);
    void *r = p ? PyLong_AsVoidPtr(p) : NULL;
    Py_XDECREF(p);
    *err = !p || (r == NULL && PyErr_Occurred());
    return r;
}

/* ------------------------------------------------------------------ */
/* call                                                               */

/* 1 if the tensor output k last returned (held by spare) may take this
 * call's output: nothing else refers to it (no other Python or weak
 * reference, no other C++ tensor such as autograd's saved variables or a
 * view's base, no other tensor on its storage such as a detach()) and it
 * is unchanged (dtype, shape, dense at offset 0 on a storage of at least
 * its bytes: a caller may have resized it, set_ another storage or
 * assigned .data before dropping it). 0 otherwise or on any error
 * (cleared). */
static int reusable(pyext_state *st, CompiledObject *self, Py_ssize_t k, PyObject *t)
{
    static PyObject *use_count;   /* torch._C._storage_Use_Count */
    if (Py_REFCNT(t) != 1 || smelt_has_weakrefs(t))
        return 0;
    if (!use_count) {
        PyObject *m = PyImport_ImportModule("torch._C");
        use_count = m ? PyObject_GetAttrString(m, "_storage_Use_Count") : NULL;
        Py_XDECREF(m);
    }
    PyObject *uses = use_count ? PyObject_CallMethod(t, "_use_count", NULL) : NULL;
    PyObject *stor = uses ? PyObject_CallMethod(t, "untyped_storage", NULL) : NULL;
    PyObject *cdata = stor ? PyObject_GetAttrString(stor, "_cdata") : NULL;
    PyObject *suses = cdata ? PyObject_CallOneArg(use_count, cdata) : NULL;
    PyObject *nbytes = suses ? PyObject_CallMethod(stor, "nbytes", NULL) : NULL;
    PyObject *dt = nbytes ? PyObject_GetAttr(t, st->s_dtype) : NULL;
    PyObject *shape = dt ? PyObject_GetAttr(t, st->s_shape) : NULL;
    PyObject *dense = shape ? PyObject_CallMethod(t, "is_contiguous", NULL) : NULL;
    PyObject *off = dense ? PyObject_CallMethod(t, "storage_offset", NULL) : NULL;
    /* the storage object made here holds one use of the storage */
    int ok = off && PyLong_AsLong(uses) == 1 && PyLong_AsLong(suses) <= 2 &&
             dt == st->dtypes[self->out_dtypes[k]] && dense == Py_True &&
             PyObject_RichCompareBool(shape, self->out_shapes[k], Py_EQ) == 1 && PyLong_AsLongLong(off) == 0 &&
             PyLong_AsSize_t(nbytes) >= self->out_nbytes[k];
    PyObject *held[] = { uses, stor, cdata, suses, nbytes, dt, shape, dense, off };
    for (size_t j = 0; j < sizeof held / sizeof *held; j++)
        Py_XDECREF(held[j]);
    PyErr_Clear();
    return ok;
}

/* Output tensor k and its data: the large tensor the last call returned
 * when nothing refers to it any more (autograd history dropped), else a
 * new torch.empty(shape, dtype=...), kept for reuse when large. */
static PyObject *new_output(pyext_state *st, CompiledObject *self, Py_ssize_t k, void **ptr)
{
    PyObject *t = NULL;
    int err = 0;
    if (self->device >= 0) {   /* torch's CUDA allocator: no pages to fault in, nothing kept */
        PyObject *args[3] = {self->out_shapes[k], st->dtypes[self->out_dtypes[k]], self->device_obj};
        if (!(t = PyObject_Vectorcall(st->empty, args, 1, self->kw_device)))
            return NULL;
        *ptr = data_ptr(st, t, &err);
        if (err)
            Py_CLEAR(t);
        return t;
    }
    if (self->spare && self->spare[k] && reusable(st, self, k, self->spare[k])) {
        PyObject *r = PyObject_CallMethod(self->spare[k], "detach_", NULL);
        Py_XDECREF(r);
        if (r)
            t = Py_NewRef(self->spare[k]);
        PyErr_Clear();
    }
    if (!t) {
        PyObject *args[2] = {self->out_shapes[k], st->dtypes[self->out_dtypes[k]]};
        if (!(t = PyObject_Vectorcall(st->empty, args, 1, st->kw_dtype)))
            return NULL;
        if (self->spare && self->out_nbytes[k] >= REUSE_MIN_BYTES)
            Py_XSETREF(self->spare[k], Py_NewRef(t));
    }
    *ptr = data_ptr(st, t, &err);
    if (err)
        Py_CLEAR(t);
    else if (self->ncalls > KERN_HUGE_AFTER)
        kern_advise_huge(*ptr, self->out_nbytes[k]);
    return t;
}

/* Sets torch's grad mode to `on`: the previous mode (0/1), or -1 with an
 * exception. */
static int set_grad_mode(pyext_state *st, int on)
{
    PyObject *was = PyObject_CallNoArgs(st->is_grad);
    if (!was)
        return -1;
    int prev = was == Py_True;
    Py_DECREF(was);
    PyObject *r = prev != on ? PyObject_CallOneArg(st->set_grad, on ? Py_True : Py_False) : NULL;
    if (prev != on && !r)
        return -1;
    Py_XDECREF(r);
    return prev;
}

/* What a failed plan run (rc < 0, message err) returns: an index out of
 * range (-2) in a `trusted` call (a compiled frame's) returns 1 without an
 * exception, so the frame runs eagerly this once and raises eager's own
 * error (nothing was written to the inputs: updates are written back
 * after the run); otherwise -1 with the exception. */
static int run_failed(int rc, const char *err, int trusted)
{
    if (rc == -2 && trusted) {
        if (pyext_log_on(PYEXT_LOG_GRAPH_BREAKS))
            pyext_log_write(PYEXT_LOG_GRAPH_BREAKS, "compiled graph: an index out of range: this call runs eagerly");
        return 1;
    }
    PyErr_Format(rc == -2 ? PyExc_IndexError : PyExc_RuntimeError, "%s", err);
    return -1;
}

/* A CUDA plan's run: its device arena and torch's stream. */
typedef struct device_run {
    void *arena, *stream;
} device_run;

/* Runs a plan with host calls on ptrs (inputs, then outputs) with the GIL
 * released and grad mode off (once for all its calls); a call's exception
 * is raised again as it was, except that for a `trusted` call (a compiled
 * frame's) a result the graph inferred wrongly returns 1: the caller runs
 * the frame eagerly. dr: a CUDA plan's arena and stream, else NULL. 0, 1,
 * or -1 with an exception. */
static int run_host(CompiledObject *self, void **ptrs, const smelt_input_stamp *stamps, int trusted,
                    const device_run *dr)
{
    pyext_state *st = pyext_state_of((PyObject *)self);
    char err[512];
    int grad = set_grad_mode(st, 0), rc;
    if (grad < 0)
        return -1;
    PyObject *calls = Py_NewRef(self->calls);   /* kept alive whatever the calls do */
    pyext_hostcall_ctx ctx = {calls, NULL, NULL, 0, self->device + 1};
    Py_BEGIN_ALLOW_THREADS
    if (dr)
        rc = smelt_plan_run_device(self->plan, ptrs, ptrs + self->nin, dr->arena, dr->stream, pyext_hostcall_run,
                                   &ctx, err, sizeof err);
    else
        rc = smelt_plan_run_stamped(self->plan, ptrs, ptrs + self->nin, stamps, pyext_hostcall_run,
                                    &ctx, err, sizeof err);
    Py_END_ALLOW_THREADS
    Py_DECREF(calls);
    Py_XDECREF(ctx.keep);   /* results whose memory the plan used */
    if (grad && set_grad_mode(st, 1) < 0) {
        Py_XDECREF(ctx.exc);
        return -1;
    }
    if (ctx.exc && ctx.mismatch && trusted) {
        /* the graph inferred this call's results wrongly: nothing was
         * written to the inputs yet (updates are written back after the
         * run), so the frame runs eagerly, now and from now on */
        self->eager_only = 1;
        if (pyext_log_on(PYEXT_LOG_GRAPH_BREAKS)) {
            PyObject *line = PyUnicode_FromFormat("compiled graph runs eagerly from now on: %S", ctx.exc);
            if (line && PyUnicode_AsUTF8(line))
                pyext_log_write(PYEXT_LOG_GRAPH_BREAKS, PyUnicode_AsUTF8(line));
            Py_XDECREF(line);
            PyErr_Clear();
        }
        Py_DECREF(ctx.exc);
        return 1;
    }
    if (ctx.exc) {
        PyErr_Restore(Py_NewRef(Py_TYPE(ctx.exc)), ctx.exc, PyException_GetTraceback(ctx.exc));
        return -1;
    }
    /* a device plan's steps all ran before its flag was read (in-place
     * updates included), and eager CUDA's index errors are fatal device
     * asserts: its index error is raised, never rerun eagerly */
    return rc ? run_failed(rc, err, trusted && !dr) : 0;
}

/* Weak-reference callback of the tensor last passed at a packed input
 * (capsule: the Compiled object, context: the input's index in packed):
 * the tensor is gone, so are the plan's copies of it. The reference lives
 * in self->held only, so self outlives it. */
static PyObject *weight_gone(PyObject *cap, PyObject *ref)
{
    (void)ref;
    CompiledObject *self = PyCapsule_GetPointer(cap, NULL);
    intptr_t j = (intptr_t)PyCapsule_GetContext(cap);
    if (!self)
        return NULL;
    if (j >= 0 && j < self->npacked)
        smelt_plan_release_packs(self->plan, self->packed[j]);
    Py_RETURN_NONE;
}

static PyMethodDef weight_gone_def = { "weight_gone", weight_gone, METH_O, NULL };

/* A weak reference to t calling weight_gone for packed input j. */
static PyObject *weight_ref(CompiledObject *self, int j, PyObject *t)
{
    PyObject *cap = PyCapsule_New(self, NULL, NULL);
    if (!cap || PyCapsule_SetContext(cap, (void *)(intptr_t)j)) {
        Py_XDECREF(cap);
        return NULL;
    }
    PyObject *cb = PyCFunction_New(&weight_gone_def, cap);
    Py_DECREF(cap);
    PyObject *ref = cb ? PyWeakref_NewRef(t, cb) : NULL;
    Py_XDECREF(cb);
    return ref;
}

int64_t pyext_compiled_arena_bytes(PyObject *compiled)
{
    return smelt_plan_arena_bytes(((CompiledObject *)compiled)->plan);
}

int64_t pyext_compiled_code_bytes(PyObject *compiled)
{
    return smelt_plan_code_bytes(((CompiledObject *)compiled)->plan);
}

void pyext_compiled_set_packing(PyObject *compiled, int mode)
{
    ((CompiledObject *)compiled)->packing = mode;
}

/* The stamp of packed input j (self->packed[j]), tensor t: a version
 * counter that cannot be read (inference tensors) gives owner 0 (not
 * packed). Under the GIL; clears any exception it causes. */
static smelt_input_stamp stamp_of(CompiledObject *self, int j, PyObject *t)
{
    smelt_input_stamp s = { 0, 0, self->packing == PYEXT_PACK_ALWAYS };
    PyObject *v = PyObject_GetAttr(t, pyext_state_of((PyObject *)self)->s_version);
    s.version = v && PyLong_Check(v) ? PyLong_AsLongLong(v) : -1;
    Py_XDECREF(v);
    if (s.version == -1) {
        PyErr_Clear();
        Py_CLEAR(self->held[j]);
        return s;
    }
    if (!self->held[j] || smelt_weakref_target(self->held[j]) != t) {   /* a new tensor object */
        PyObject *ref = weight_ref(self, j, t);
        if (!ref) {
            PyErr_Clear();
            Py_CLEAR(self->held[j]);
            s.owner = 0;
            return s;
        }
        Py_XSETREF(self->held[j], ref);
        self->owner[j] = atomic_fetch_add(&g_owner_serial, 1) + 1;
    }
    s.owner = self->owner[j];
    return s;
}

/* The raw CUstream torch is using on CUDA device dev (0: the legacy
 * default stream), or -1 with an exception. */
static int current_stream(int dev, void **stream)
{
    static PyObject *raw;   /* torch._C._cuda_getCurrentRawStream */
    if (!raw) {
        PyObject *m = PyImport_ImportModule("torch._C");
        raw = m ? PyObject_GetAttrString(m, "_cuda_getCurrentRawStream") : NULL;
        Py_XDECREF(m);
        if (!raw)
            return -1;
    }
    PyObject *r = PyObject_CallFunction(raw, "i", dev);
    *stream = r ? PyLong_AsVoidPtr(r) : NULL;
    Py_XDECREF(r);
    return !r || (!*stream && PyErr_Occurred()) ? -1 : 0;
}

/* A run of a CUDA plan: its arena from torch's allocator on the device
 * (ordered on torch's current stream, where the plan's work goes), the
 * plan enqueued with the GIL released. 0, 1 (run eagerly), or -1 with an
 * exception. */
static int run_device(CompiledObject *self, void **ptrs, int trusted)
{
    pyext_state *st = pyext_state_of((PyObject *)self);
    void *stream = NULL;
    if (current_stream(self->device, &stream))
        return -1;
    PyObject *n = PyLong_FromLongLong(smelt_plan_device_arena_bytes(self->plan));
    PyObject *args[3] = {n, st->dtypes[SMELT_U8], self->device_obj};
    PyObject *arena = n ? PyObject_Vectorcall(st->empty, args, 1, self->kw_device) : NULL;
    Py_XDECREF(n);
    int bad = 0;
    void *base = arena ? data_ptr(st, arena, &bad) : NULL;
    if (!arena || bad) {
        Py_XDECREF(arena);
        return -1;
    }
    char err[512];
    int rc;
    if (self->nhost) {   /* host calls: torch ops on the plan's device memory, on the same stream */
        device_run dr = { base, stream };
        rc = run_host(self, ptrs, NULL, trusted, &dr);
    } else {
        Py_BEGIN_ALLOW_THREADS
        rc = smelt_plan_run_device(self->plan, ptrs, ptrs + self->nin, base, stream, NULL, NULL, err, sizeof err);
        Py_END_ALLOW_THREADS
        rc = rc ? run_failed(rc, err, 0) : 0;   /* (see run_host: raised, never rerun eagerly) */
    }
    Py_DECREF(arena);   /* (torch's allocator reuses it in stream order) */
    return rc;
}

/* Runs the plan on ptrs (inputs, then outputs) with the GIL released,
 * stamping the packed inputs of args from the second call on (packing a
 * weight costs more than one unpacked matmul); with host calls (`host`), grad mode
 * is off (once for all its calls) and a call's exception is raised again
 * as it was (run_host). 0, 1 (run eagerly), or -1 with an exception. */
static int run_plan(CompiledObject *self, PyObject *const *args, void **ptrs, int host, int trusted)
{
    if (self->device >= 0)
        return run_device(self, ptrs, trusted);
    smelt_input_stamp small[16], *stamps = NULL;
    /* a first call does not pay for packing (unless "always") */
    if (self->npacked && self->packing != PYEXT_PACK_NEVER && (self->ncalls > 1 || self->packing == PYEXT_PACK_ALWAYS)) {
        stamps = self->nin <= 16 ? small : PyMem_Calloc((size_t)self->nin, sizeof *stamps);
        if (!stamps)
            return PyErr_NoMemory(), -1;
        for (int j = 0; j < self->npacked; j++)
            stamps[self->packed[j]] = stamp_of(self, j, args[self->packed[j]]);
    }
    int rc;
    if (host) {
        rc = run_host(self, ptrs, stamps, trusted, NULL);
    } else {
        char err[512];
        Py_BEGIN_ALLOW_THREADS
        rc = smelt_plan_run_stamped(self->plan, ptrs, ptrs + self->nin, stamps, NULL, NULL, err, sizeof err);
        Py_END_ALLOW_THREADS
        if (rc)
            rc = run_failed(rc, err, trusted);
    }
    if (stamps != small)
        PyMem_Free(stamps);
    return rc;
}

/* The bytes [*lo, *hi) an input with spec sp spans from ptr. */
static void input_span(const input_spec *sp, void *ptr, uintptr_t *lo, uintptr_t *hi)
{
    int64_t end = 1;   /* elements up to the last one, 0 when empty */
    for (int d = 0; d < sp->ndim && end; d++)
        end = sp->shape[d] ? end + (sp->shape[d] - 1) * sp->stride[d] : 0;
    *lo = (uintptr_t)ptr;
    *hi = *lo + (uintptr_t)end * smelt_dtype_size((smelt_dtype)sp->dtype);
}

/* 1 if some input apart[i] shares memory with another input. */
static int apart_overlaps(const CompiledObject *self, void **ptrs, const int32_t *apart, int32_t napart)
{
    for (int32_t i = 0; i < napart; i++) {
        uintptr_t alo, ahi, lo, hi;
        input_span(&self->ins[apart[i]], ptrs[apart[i]], &alo, &ahi);
        for (Py_ssize_t k = 0; k < self->nin; k++) {
            input_span(&self->ins[k], ptrs[k], &lo, &hi);
            if (k != apart[i] && alo < hi && lo < ahi)
                return 1;
        }
    }
    return 0;
}

/* Validates the inputs (unless `trusted`: the caller's guards already
 * checked every input's type, dtype, shape, strides and device),
 * allocates the outputs into list `outs` and runs the plan with the GIL
 * released. 0, -1 with an exception, or 1 without running when an input
 * of apart (see pyext_compiled_call_trusted) overlaps another. */
static int run(CompiledObject *self, PyObject *const *args, PyObject *outs, void **ptrs, int trusted,
               const int32_t *apart, int32_t napart)
{
    pyext_state *st = pyext_state_of((PyObject *)self);
    int bad = 0;
    for (Py_ssize_t k = 0; k < self->nin; k++) {
        if (!trusted && (check_kind(st, &self->ins[k], k, args[k], self->device_obj) ||
                         check_layout(st, &self->ins[k], k, args[k])))
            return -1;
        ptrs[k] = data_ptr(st, args[k], &bad);
        if (bad && trusted && PyErr_ExceptionMatches(PyExc_RuntimeError)) {
            PyErr_Clear();   /* a tensor without storage (a functorch wrapper) the guards took: run eagerly */
            return 1;
        }
        if (bad)
            return -1;
    }
    if ((napart && apart_overlaps(self, ptrs, apart, napart)) || (trusted && self->eager_only))
        return 1;
    self->ncalls++;   /* under the GIL */
    for (Py_ssize_t k = 0; k < self->nout; k++) {
        if (self->inplace && self->inplace[k] >= 0) {   /* written into the input it updates */
            ptrs[self->nin + k] = ptrs[self->inplace[k]];
            PyList_SET_ITEM(outs, k, Py_NewRef(args[self->inplace[k]]));
            continue;
        }
        PyObject *t = new_output(st, self, k, &ptrs[self->nin + k]);
        if (!t)
            return -1;
        PyList_SET_ITEM(outs, k, t);
    }
    return run_plan(self, args, ptrs, self->nhost != 0, trusted);
}

static PyObject *call(CompiledObject *self, PyObject *const *args, int trusted, const int32_t *apart,
                      int32_t napart)
{
    void *stack[16], **ptrs = stack;
    if (self->nin + self->nout > 16 &&
        !(ptrs = PyMem_Malloc(sizeof *ptrs * (size_t)(self->nin + self->nout))))
        return PyErr_NoMemory();
    PyObject *outs = PyList_New(self->nout);
    int rc = outs ? run(self, args, outs, ptrs, trusted, apart, napart) : -1;
    if (rc)
        Py_CLEAR(outs);
    if (rc == 1)
        outs = Py_NewRef(Py_NotImplemented);
    if (ptrs != stack)
        PyMem_Free(ptrs);
    return outs;
}

static PyObject *compiled_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames)
{
    CompiledObject *self = (CompiledObject *)obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames && PyTuple_GET_SIZE(kwnames))
        return PyErr_Format(PyExc_TypeError, "Compiled takes no keyword arguments");
    if (nargs != self->nin)
        return PyErr_Format(PyExc_TypeError, "expected %zd inputs, got %zd", self->nin, nargs);
    return call(self, args, 0, NULL, 0);
}

PyObject *pyext_compiled_call_trusted(PyObject *compiled, PyObject *const *args, const int32_t *apart,
                                      int32_t napart)
{
    return call((CompiledObject *)compiled, args, 1, apart, napart);
}

/* ------------------------------------------------------------------ */
/* attributes                                                         */

static PyObject *compiled_code(CompiledObject *self, PyObject *which)
{
    const char *w = PyUnicode_Check(which) ? PyUnicode_AsUTF8(which) : NULL;
    if (!w || (strcmp(w, "ir") && strcmp(w, "asm") && strcmp(w, "kernels") && strcmp(w, "launch"))) {
        PyErr_Clear();
        return PyErr_Format(PyExc_ValueError, "code: expected 'ir', 'asm', 'kernels' or 'launch', got %R",
                            which);
    }
    const char *text = smelt_plan_code(self->plan, w);
    if (!text)
        Py_RETURN_NONE;
    return PyUnicode_FromString(text);
}

static PyObject *get_backend(CompiledObject *self, void *unused)
{
    (void)unused;
    return PyUnicode_FromString(smelt_plan_backend(self->plan));
}

static PyObject *get_num_kernels(CompiledObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromLong(smelt_plan_num_kernels(self->plan));
}

static PyObject *get_num_externs(CompiledObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromLong(smelt_plan_num_externs(self->plan));
}

static PyObject *get_num_generated(CompiledObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromLong(smelt_plan_num_generated(self->plan));
}

static PyObject *get_num_host_calls(CompiledObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromLong(self->nhost);
}

static PyObject *compiled_repr(CompiledObject *self)
{
    return PyUnicode_FromFormat("<smelt._C.Compiled: %zd inputs, %zd outputs, %d kernels, "
                                "%d externs>", self->nin, self->nout,
                                smelt_plan_num_kernels(self->plan),
                                smelt_plan_num_externs(self->plan));
}

/* ------------------------------------------------------------------ */
/* lifetime                                                           */

static int compiled_traverse(CompiledObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    for (Py_ssize_t k = 0; self->out_shapes && k < self->nout; k++)
        Py_VISIT(self->out_shapes[k]);
    Py_VISIT(self->calls);
    Py_VISIT(self->device_obj);
    for (int j = 0; self->held && j < self->npacked; j++)
        Py_VISIT(self->held[j]);
    for (Py_ssize_t k = 0; self->spare && k < self->nout; k++)
        Py_VISIT(self->spare[k]);
    return 0;
}

static int compiled_clear(CompiledObject *self)
{
    for (Py_ssize_t k = 0; self->out_shapes && k < self->nout; k++)
        Py_CLEAR(self->out_shapes[k]);
    Py_CLEAR(self->calls);
    Py_CLEAR(self->device_obj);
    Py_CLEAR(self->kw_device);
    for (int j = 0; self->held && j < self->npacked; j++)
        Py_CLEAR(self->held[j]);
    for (Py_ssize_t k = 0; self->spare && k < self->nout; k++)
        Py_CLEAR(self->spare[k]);
    return 0;
}

static void compiled_dealloc(CompiledObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    compiled_clear(self);
    smelt_plan_free(self->plan);
    PyMem_Free(self->ins);
    PyMem_Free(self->out_dtypes);
    PyMem_Free(self->out_shapes);
    PyMem_Free(self->out_nbytes);
    PyMem_Free(self->held);
    PyMem_Free(self->owner);
    PyMem_Free(self->inplace);
    PyMem_Free(self->spare);
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* Copies the input specs and output shapes/dtypes of g into self. */
static int fill_specs(CompiledObject *self, const smelt_graph *g)
{
    self->nin = g->ninputs;
    self->nout = g->nout;
    self->ins = PyMem_Calloc((size_t)self->nin + 1, sizeof *self->ins);
    self->out_dtypes = PyMem_Calloc((size_t)self->nout + 1, 1);
    self->out_shapes = PyMem_Calloc((size_t)self->nout + 1, sizeof(PyObject *));
    self->out_nbytes = PyMem_Calloc((size_t)self->nout + 1, sizeof(size_t));
    self->spare = PyMem_Calloc((size_t)self->nout + 1, sizeof(PyObject *));
    if (!self->ins || !self->out_dtypes || !self->out_shapes || !self->out_nbytes || !self->spare)
        return PyErr_NoMemory(), -1;
    for (int32_t i = 0; i < g->n; i++) {
        const smelt_node *n = &g->nodes[i];
        if (n->op != SMELT_OP_INPUT)
            continue;
        input_spec *sp = &self->ins[n->a.input.index];
        sp->dtype = n->dtype;
        sp->ndim = n->ndim;
        memcpy(sp->shape, n->shape, sizeof sp->shape);
        memcpy(sp->stride, n->stride, sizeof sp->stride);
    }
    for (Py_ssize_t k = 0; k < self->nout; k++) {
        const smelt_node *n = &g->nodes[g->outputs[k]];
        self->out_dtypes[k] = n->dtype;
        self->out_nbytes[k] = (size_t)smelt_node_numel(n) * smelt_dtype_size(n->dtype);
        if (!(self->out_shapes[k] = spec_tuple(n->shape, n->ndim)))
            return -1;
    }
    return 0;
}

/* Keeps a copy of the table of host calls when the plan has host calls:
 * a list with an (fn, args, kwargs) tuple for each of g's calls. */
static int take_calls(CompiledObject *self, const smelt_graph *g, PyObject *calls)
{
    self->nhost = smelt_plan_num_host_calls(self->plan);
    if (!self->nhost)
        return 0;
    Py_ssize_t n = smelt_graph_num_calls(g);
    if (!calls || !PyList_Check(calls) || PyList_GET_SIZE(calls) < n)
        return PyErr_Format(PyExc_RuntimeError, "compile: the graph makes %zd host calls but "
                            "its table of calls has %zd", n,
                            calls && PyList_Check(calls) ? PyList_GET_SIZE(calls) : 0), -1;
    if (!(self->calls = PyList_GetSlice(calls, 0, n)))
        return -1;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *e = PyList_GET_ITEM(self->calls, k);
        if (!PyTuple_Check(e) || (PyTuple_GET_SIZE(e) != 3 && PyTuple_GET_SIZE(e) != 4) ||
            !PyTuple_Check(PyTuple_GET_ITEM(e, 1)) ||
            (PyTuple_GET_ITEM(e, 2) != Py_None && !PyDict_Check(PyTuple_GET_ITEM(e, 2))))
            return PyErr_Format(PyExc_RuntimeError, "compile: host call %zd is not an (fn, "
                                "args tuple, kwargs dict) tuple: %R", k, e), -1;
    }
    return 0;
}

/* The plan's packed inputs and the state stamping them (see run_plan). */
static int take_packed(CompiledObject *self)
{
    self->npacked = smelt_plan_packed_inputs(self->plan, &self->packed);
    if (!self->npacked)
        return 0;
    self->held = PyMem_Calloc((size_t)self->npacked, sizeof *self->held);
    self->owner = PyMem_Calloc((size_t)self->npacked, sizeof *self->owner);
    if (!self->held || !self->owner)
        return PyErr_NoMemory(), -1;
    return 0;
}

PyObject *pyext_compiled_new(pyext_state *st, const smelt_graph *g, smelt_plan *plan,
                             PyObject *calls)
{
    PyTypeObject *tp = (PyTypeObject *)st->compiled_type;
    CompiledObject *self = (CompiledObject *)tp->tp_alloc(tp, 0);
    if (!self) {
        smelt_plan_free(plan);
        return NULL;
    }
    self->vectorcall = compiled_vectorcall;
    self->plan = plan;
    self->device = smelt_plan_device(plan);
    if (self->device >= 0) {
        PyObject *torch = PyImport_ImportModule("torch");
        self->device_obj = torch ? PyObject_CallMethod(torch, "device", "si", "cuda", self->device) : NULL;
        self->kw_device = Py_BuildValue("(ss)", "dtype", "device");
        Py_XDECREF(torch);
        if (!self->device_obj || !self->kw_device) {
            Py_DECREF(self);
            return NULL;
        }
    }
    for (Py_ssize_t k = 0; k < g->nout && !self->inplace; k++)   /* outputs written into inputs */
        if (smelt_plan_output_inplace(plan, (int)k) >= 0) {
            if (!(self->inplace = PyMem_Malloc(sizeof(int32_t) * (size_t)g->nout))) {
                Py_DECREF(self);
                return PyErr_NoMemory();
            }
            for (Py_ssize_t o = 0; o < g->nout; o++)
                self->inplace[o] = smelt_plan_output_inplace(plan, (int)o);
        }
    if (fill_specs(self, g) || take_calls(self, g, calls) || take_packed(self)) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* profile(reset=False) -> str: step times so far, slowest first. */
static PyObject *compiled_profile(CompiledObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "reset", NULL };
    int reset = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|p", kwlist, &reset))
        return NULL;
    char *text = smelt_plan_profile_text(self->plan);
    if (!text)
        return PyErr_NoMemory();
    PyObject *r = PyUnicode_FromString(text);
    free(text);
    if (r && reset)
        smelt_plan_profile_reset(self->plan);
    return r;
}

PyObject *pyext_compiled_profile(PyObject *compiled)
{
    char *text = smelt_plan_profile_text(((CompiledObject *)compiled)->plan);
    PyObject *r = text ? PyUnicode_FromString(text) : PyErr_NoMemory();
    free(text);
    return r;
}

/* _run_guarded(*ins): a call whose inputs a compiled frame's guards
 * checked (smelt._autograd's forward): a host call whose result is not
 * what the graph inferred returns NotImplemented (the frame runs eagerly)
 * instead of raising. */
static PyObject *compiled_run_guarded(PyObject *obj, PyObject *const *args, Py_ssize_t nargs)
{
    CompiledObject *self = (CompiledObject *)obj;
    if (nargs != self->nin)
        return PyErr_Format(PyExc_TypeError, "expected %zd inputs, got %zd", self->nin, nargs);
    return call(self, args, 1, NULL, 0);
}

static PyMethodDef compiled_methods[] = {
    {"_run_guarded", (PyCFunction)(void (*)(void))compiled_run_guarded, METH_FASTCALL,
     "_run_guarded(*ins) -> list or NotImplemented\n\nA run with inputs a compiled frame's guards "
     "checked (internal): NotImplemented where the frame must run eagerly."},
    {"profile", (PyCFunction)(void (*)(void))compiled_profile, METH_VARARGS | METH_KEYWORDS,
     "profile(reset=False) -> str\n\nWall time of each step over the runs made while "
     "smelt._C.set_profiling(True) was on, slowest first."},
    {"code", (PyCFunction)compiled_code, METH_O,
     "code(which) -> str or None\n\nGenerated code: 'ir', 'asm' or 'kernels' (kept only "
     "with keep_code=True or SMELT_LOGS)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef compiled_getset[] = {
    {"num_kernels", (getter)get_num_kernels, NULL, "generated fused kernels", NULL},
    {"backend", (getter)get_backend, NULL, "the back end its kernels run on: 'cpu' or 'spirv'", NULL},
    {"num_externs", (getter)get_num_externs, NULL, "extern calls (matmul, host calls)", NULL},
    {"num_generated", (getter)get_num_generated, NULL,
     "kernel functions this compile generated with LLVM (the rest were already loaded)", NULL},
    {"num_host_calls", (getter)get_num_host_calls, NULL, "host calls (torch ops run by torch)",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef compiled_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(CompiledObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot compiled_slots[] = {
    {Py_tp_dealloc, compiled_dealloc},
    {Py_tp_traverse, compiled_traverse},
    {Py_tp_clear, compiled_clear},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_methods, compiled_methods},
    {Py_tp_getset, compiled_getset},
    {Py_tp_members, compiled_members},
    {Py_tp_repr, compiled_repr},
    {Py_tp_doc, "A compiled graph: call it with the graph's input tensors; returns a list "
                "of new contiguous output tensors."},
    {0, NULL},
};

static PyType_Spec compiled_spec = {
    .name = "smelt._C.Compiled",
    .basicsize = sizeof(CompiledObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_VECTORCALL,
    .slots = compiled_slots,
};

int pyext_compiled_type_init(PyObject *m, pyext_state *st)
{
    st->compiled_type = PyType_FromModuleAndSpec(m, &compiled_spec, NULL);
    if (!st->compiled_type)
        return -1;
    return PyModule_AddObjectRef(m, "Compiled", st->compiled_type);
}
