/* Host calls at run time (pyext/hostcall.h): the plan executor's callback
 * runs a call's template (tracer/hostcall.h) on the plan's buffers.
 *
 * What pyext_hostcall_init caches lives in one file-level struct, not in the
 * module state: the plan executor's callback gets only its run context.
 * Tensors cross into torch through DLPack capsules (the v0.8 ABI, declared
 * below), so a host call reads and writes the plan's buffers in place; a
 * wrapped tensor must not outlive the call (the plan owns its memory). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostcall.h"
#include "module.h"
#include "../tracer/hostcall.h"

/* ------------------------------------------------------------------ */
/* DLPack v0.8 ABI                                                    */

typedef struct DLDevice { int32_t device_type, device_id; } DLDevice;
typedef struct DLDataType { uint8_t code, bits; uint16_t lanes; } DLDataType;
typedef struct DLTensor {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *);
} DLManagedTensor;

enum { DL_CPU = 1, DL_CUDA = 2, DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_BOOL = 6 };

/* One allocation per wrapped tensor: torch keeps the pointer and calls the
 * deleter when the tensor's storage dies (with or without the GIL). */
typedef struct dl_block {
    DLManagedTensor m;
    int64_t shape[SMELT_MAX_DIMS], strides[SMELT_MAX_DIMS];
} dl_block;

static const DLDataType dl_types[SMELT_NDTYPES] = {
    [SMELT_BOOL] = {DL_BOOL, 8, 1},   [SMELT_U8] = {DL_UINT, 8, 1},
    [SMELT_I8] = {DL_INT, 8, 1},      [SMELT_I16] = {DL_INT, 16, 1},
    [SMELT_I32] = {DL_INT, 32, 1},    [SMELT_I64] = {DL_INT, 64, 1},
    [SMELT_F16] = {DL_FLOAT, 16, 1},  [SMELT_BF16] = {DL_BFLOAT, 16, 1},
    [SMELT_F32] = {DL_FLOAT, 32, 1},  [SMELT_F64] = {DL_FLOAT, 64, 1},
};

/* ------------------------------------------------------------------ */
/* cached objects                                                     */

#define HC_OBJECTS(X)                                                               \
    X(tensor_type) X(from_dlpack) X(to_dlpack) X(copy_) X(clone) X(s_dtype)          \
    X(s_shape) X(s_is_neg) X(kw_memory_format) X(contiguous_format)

static struct {
#define FIELD(f) PyObject *f;
    HC_OBJECTS(FIELD)
#undef FIELD
    PyObject *dtypes[SMELT_NDTYPES];   /* torch dtype by smelt_dtype */
} hc;

void pyext_hostcall_fini(void)
{
#define CLEAR(f) Py_CLEAR(hc.f);
    HC_OBJECTS(CLEAR)
#undef CLEAR
    for (int dt = 0; dt < SMELT_NDTYPES; dt++)
        Py_CLEAR(hc.dtypes[dt]);
    tracer_calls_fini();
}

/* torch objects the run-time half needs. */
static int init_torch(PyObject *torch)
{
    PyObject *c = PyObject_GetAttrString(torch, "_C");
    if (!c)
        return -1;
    hc.from_dlpack = PyObject_GetAttrString(c, "_from_dlpack");
    hc.to_dlpack = PyObject_GetAttrString(c, "_to_dlpack");
    Py_DECREF(c);
    hc.tensor_type = PyObject_GetAttrString(torch, "Tensor");
    hc.copy_ = hc.tensor_type ? PyObject_GetAttrString(hc.tensor_type, "copy_") : NULL;
    hc.clone = hc.tensor_type ? PyObject_GetAttrString(hc.tensor_type, "clone") : NULL;
    hc.contiguous_format = PyObject_GetAttrString(torch, "contiguous_format");
    hc.kw_memory_format = Py_BuildValue("(s)", "memory_format");
    hc.s_dtype = PyUnicode_InternFromString("dtype");
    hc.s_shape = PyUnicode_InternFromString("shape");
    hc.s_is_neg = PyUnicode_InternFromString("is_neg");
    return hc.from_dlpack && hc.to_dlpack && hc.tensor_type && hc.copy_ && hc.clone && hc.contiguous_format &&
           hc.kw_memory_format && hc.s_dtype && hc.s_shape && hc.s_is_neg ? 0 : -1;
}

int pyext_hostcall_init(PyObject *module)
{
    pyext_state *st = PyModule_GetState(module);
    pyext_hostcall_fini();
    for (int dt = 0; dt < SMELT_NDTYPES; dt++)
        hc.dtypes[dt] = Py_XNewRef(st->dtypes[dt]);
    PyObject *torch = PyImport_ImportModule("torch");
    int rc = torch ? init_torch(torch) : -1;
    Py_XDECREF(torch);
    return rc ? -1 : tracer_calls_init(module);
}

/* ------------------------------------------------------------------ */
/* DLPack wrapping                                                    */

static int64_t dl_dummy;   /* data of 0-element tensors, whose pointer may be NULL */
/* The run's memory (pyext_hostcall_ctx.cuda): 1 + the CUDA device, 0 the
 * host's. Set for each call, on the plan's thread. */
static _Thread_local int hc_cuda;

static void dl_delete(DLManagedTensor *m)
{
    free(m);   /* m is the first member of its dl_block */
}

/* Capsule destructor: frees the tensor if torch never consumed it (torch
 * renames a consumed capsule and owns the tensor from then on). */
static void capsule_delete(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        m->deleter(m);
    }
}

/* Tensor ref r as a torch tensor sharing its memory (no copy); it must not
 * outlive the buffer. New reference, or NULL with an exception. */
static PyObject *wrap_ref(const smelt_tensor_ref *r)
{
    if (r->dtype >= SMELT_NDTYPES || r->ndim > SMELT_MAX_DIMS)
        return PyErr_Format(PyExc_RuntimeError, "host call: bad tensor (dtype %d, %d dims)",
                            r->dtype, r->ndim);
    dl_block *b = malloc(sizeof *b);
    if (!b)
        return PyErr_NoMemory();
    memcpy(b->shape, r->shape, sizeof b->shape);
    memcpy(b->strides, r->strides, sizeof b->strides);
    b->m.dl_tensor = (DLTensor){
        .data = r->data ? r->data : &dl_dummy,
        .device = hc_cuda ? (DLDevice){DL_CUDA, hc_cuda - 1} : (DLDevice){DL_CPU, 0},
        .ndim = r->ndim,
        .dtype = dl_types[r->dtype],
        .shape = b->shape,
        .strides = b->strides,
    };
    b->m.manager_ctx = NULL;
    b->m.deleter = dl_delete;
    PyObject *cap = PyCapsule_New(&b->m, "dltensor", capsule_delete);
    if (!cap) {
        free(b);
        return NULL;
    }
    PyObject *t = PyObject_CallOneArg(hc.from_dlpack, cap);
    Py_DECREF(cap);
    return t;
}

/* ------------------------------------------------------------------ */
/* running a call                                                     */

/* RuntimeError: result k of the call is not a tensor with out ref o's
 * dtype and shape. Returns -1. */
static _Thread_local int hc_mismatch;   /* set by result_mismatch, read by pyext_hostcall_run */

static int result_mismatch(PyObject *fn, int k, PyObject *r, const smelt_tensor_ref *o)
{
    hc_mismatch = 1;
    PyObject *name = tracer_call_name(fn), *want = tracer_int_tuple(o->shape, o->ndim);
    int tensor = PyObject_TypeCheck(r, (PyTypeObject *)hc.tensor_type);
    PyObject *dt = tensor ? PyObject_GetAttr(r, hc.s_dtype) : NULL;
    PyObject *shape = tensor ? PyObject_GetAttr(r, hc.s_shape) : NULL;
    if (name && want && !tensor)
        PyErr_Format(PyExc_RuntimeError, "host call %U: result %d is a %s, not a tensor", name,
                     k, Py_TYPE(r)->tp_name);
    else if (name && want && dt && shape)
        PyErr_Format(PyExc_RuntimeError, "host call %U: result %d has dtype %R and shape %R; "
                     "the graph expects %R and %R (the call's results must not depend on "
                     "data)", name, k, dt, shape, hc.dtypes[o->dtype], want);
    Py_XDECREF(name);
    Py_XDECREF(want);
    Py_XDECREF(dt);
    Py_XDECREF(shape);
    return -1;
}

/* Whether DLPack tensor t is on the run's device with o's dtype and shape. */
static int dl_matches(const DLTensor *t, const smelt_tensor_ref *o)
{
    const DLDataType want = dl_types[o->dtype];
    if (t->device.device_type != (hc_cuda ? DL_CUDA : DL_CPU) || (hc_cuda && t->device.device_id != hc_cuda - 1) ||
        t->dtype.code != want.code ||
        t->dtype.bits != want.bits || t->dtype.lanes != 1 || t->ndim != o->ndim)
        return 0;
    for (int d = 0; d < o->ndim; d++)
        if (t->shape[d] != o->shape[d])
            return 0;
    return 1;
}

/* Whether DLPack tensor t is laid out row-major without gaps. */
static int dl_contiguous(const DLTensor *t)
{
    int64_t want = 1;
    for (int d = t->ndim - 1; t->strides && d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != want)
            return 0;
        want *= t->shape[d];
    }
    return 1;
}

/* Tensor.copy_ of result r into out buffer o (wrapped). 0, or -1. */
static int copy_into(PyObject *r, const smelt_tensor_ref *o)
{
    PyObject *t = wrap_ref(o);
    PyObject *args[2] = {t, r};
    PyObject *x = t ? PyObject_Vectorcall(hc.copy_, args, 2, NULL) : NULL;
    Py_XDECREF(t);
    Py_XDECREF(x);
    return x ? 0 : -1;
}

/* Copies result r into contiguous out buffer o if r is a tensor with o's
 * dtype and shape: 1 when copied, 0 when r does not match (no exception),
 * -1 with an exception. Reads r's layout through one DLPack export; a
 * contiguous r without a negative bit (which DLPack drops) is copied as
 * bytes, any other through Tensor.copy_. */
static int store_result(PyObject *r, const smelt_tensor_ref *o)
{
    if (!PyObject_TypeCheck(r, (PyTypeObject *)hc.tensor_type))
        return 0;
    int neg = tracer_tensor_flag(r, hc.s_is_neg, 1);
    PyObject *cap = neg < 0 ? NULL : PyObject_CallOneArg(hc.to_dlpack, r);
    DLManagedTensor *m = cap ? PyCapsule_GetPointer(cap, "dltensor") : NULL;
    if (!m) {
        Py_XDECREF(cap);
        return -1;
    }
    const DLTensor *t = &m->dl_tensor;
    /* (device memory: always Tensor.copy_, on torch's stream) */
    int match = dl_matches(t, o), bytes = match && !neg && dl_contiguous(t) && !hc_cuda;
    size_t nbytes = smelt_dtype_size((smelt_dtype)o->dtype);
    for (int d = 0; d < o->ndim; d++)
        nbytes *= (size_t)o->shape[d];
    if (bytes && nbytes && (const char *)t->data + t->byte_offset != (const char *)o->data)
        memmove(o->data, (const char *)t->data + t->byte_offset, nbytes);   /* (not written in place) */
    Py_DECREF(cap);
    if (match && !bytes && copy_into(r, o))
        return -1;
    return match;
}

/* Whether the bytes [p, p + n) overlap the memory any in ref addresses. */
static int overlaps_input(const char *p, size_t n, const smelt_tensor_ref *in, int nin)
{
    for (int k = 0; k < nin; k++) {
        int64_t lo = 0, hi = 0, es = (int64_t)smelt_dtype_size((smelt_dtype)in[k].dtype);
        int empty = 0;
        for (int d = 0; d < in[k].ndim; d++) {
            empty |= in[k].shape[d] == 0;
            int64_t span = (in[k].shape[d] - 1) * in[k].strides[d];
            *(span < 0 ? &lo : &hi) += span;
        }
        const char *a = (const char *)in[k].data + lo * es, *b = (const char *)in[k].data + (hi + 1) * es;
        if (!empty && n && p < b && a < p + n)
            return 1;
    }
    return 0;
}

/* Hands result r's memory to the plan for out ref o (data NULL): r itself
 * when it matches o, is contiguous, has no negative bit and does not
 * overlap an input (the plan may reuse inputs' memory after the call);
 * otherwise a contiguous clone. The tensor handed over is appended to
 * keep. 1, 0 (r does not match o; no exception), or -1. */
static int adopt_result(PyObject *r, smelt_tensor_ref *o, const smelt_tensor_ref *in, int nin,
                        PyObject *keep)
{
    if (!PyObject_TypeCheck(r, (PyTypeObject *)hc.tensor_type))
        return 0;
    int neg = tracer_tensor_flag(r, hc.s_is_neg, 1);
    PyObject *t = neg < 0 ? NULL : Py_NewRef(r);
    for (int pass = 0; t && pass < 2; pass++) {
        PyObject *cap = PyObject_CallOneArg(hc.to_dlpack, t);
        DLManagedTensor *m = cap ? PyCapsule_GetPointer(cap, "dltensor") : NULL;
        if (!m) {
            Py_XDECREF(cap);
            Py_CLEAR(t);
            break;
        }
        const DLTensor *d = &m->dl_tensor;
        size_t nbytes = smelt_dtype_size((smelt_dtype)o->dtype);
        for (int k = 0; k < o->ndim; k++)
            nbytes *= (size_t)o->shape[k];
        const char *data = (const char *)d->data + d->byte_offset;
        int match = dl_matches(d, o);
        if (match && (pass || (!neg && dl_contiguous(d) && !overlaps_input(data, nbytes, in, nin)))) {
            o->data = nbytes ? (void *)data : (void *)&dl_dummy;
            Py_DECREF(cap);
            int rc = PyList_Append(keep, t);
            Py_DECREF(t);
            return rc ? -1 : 1;
        }
        Py_DECREF(cap);
        if (!match) {
            Py_DECREF(t);
            return 0;
        }
        PyObject *args[2] = {t, hc.contiguous_format};   /* pass 1: a fresh contiguous copy */
        Py_SETREF(t, PyObject_Vectorcall(hc.clone, args, 1, hc.kw_memory_format));
    }
    return -1;
}

/* Result k of a call into out ref o: copied into o's buffer, or handed
 * over (o->data NULL). 1, 0 (no match), -1. */
static int take_result(PyObject *r, smelt_tensor_ref *o, const smelt_tensor_ref *in, int nin,
                       PyObject *keep)
{
    return o->data ? store_result(r, o) : adopt_result(r, o, in, nin, keep);
}

/* Whether result r (result k) has the strides the graph modelled
 * (expected[k]: a tuple, or None when not modelled; dims of size 1 are
 * free): 1, or 0 with hc_mismatch and an exception (the meta kernel and
 * the CPU kernel lay the result out differently: the frame runs eagerly). */
static int strides_as_modelled(PyObject *fn, int k, PyObject *r, PyObject *expected)
{
    PyObject *want = expected && PyTuple_Check(expected) && k < PyTuple_GET_SIZE(expected)
                   ? PyTuple_GET_ITEM(expected, k) : NULL;
    if (!want || !PyTuple_Check(want) || !PyObject_TypeCheck(r, (PyTypeObject *)hc.tensor_type))
        return 1;
    PyObject *st = PyObject_CallMethod(r, "stride", NULL), *shape = st ? PyObject_GetAttr(r, hc.s_shape) : NULL;
    int ok = st && shape && PyTuple_Check(st) && PyTuple_Check(shape) &&   /* (torch.Size is a tuple) */
             PyTuple_GET_SIZE(st) == PyTuple_GET_SIZE(want) && PyTuple_GET_SIZE(shape) == PyTuple_GET_SIZE(want);
    for (Py_ssize_t d = 0; ok && d < PyTuple_GET_SIZE(want); d++)
        ok = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d)) <= 1 ||
             PyObject_RichCompareBool(PyTuple_GET_ITEM(st, d), PyTuple_GET_ITEM(want, d), Py_EQ) == 1;
    PyErr_Clear();
    if (!ok) {
        PyObject *name = tracer_call_name(fn);
        hc_mismatch = 1;
        PyErr_Format(PyExc_RuntimeError, "host call %U: result %d has strides %R; the graph modelled %R",
                     name ? name : Py_None, k, st ? st : Py_None, want);
        Py_XDECREF(name);
    }
    Py_XDECREF(st);
    Py_XDECREF(shape);
    return ok;
}

/* Checks the call's result res against out[0..nout) (and the modelled
 * strides, when given) and stores each result (take_result). 0, or -1
 * with an exception. */
static int store_results(PyObject *fn, PyObject *res, int nout, smelt_tensor_ref *out,
                         const smelt_tensor_ref *in, int nin, PyObject *keep, PyObject *expected)
{
    int one = PyObject_TypeCheck(res, (PyTypeObject *)hc.tensor_type);
    if (one && nout == 1) {
        if (!strides_as_modelled(fn, 0, res, expected))
            return -1;
        int rc = take_result(res, &out[0], in, nin, keep);
        return rc == 1 ? 0 : rc == 0 ? result_mismatch(fn, 0, res, &out[0]) : -1;
    }
    Py_ssize_t n = one ? 1 : PyTuple_Check(res) ? PyTuple_GET_SIZE(res)
                               : PyList_Check(res) ? PyList_GET_SIZE(res) : -1;
    if (n != nout) {
        PyObject *name = tracer_call_name(fn);
        hc_mismatch = 1;
        if (name)
            PyErr_Format(PyExc_RuntimeError, "host call %U returned %s%s, expected %d tensors",
                         name, n < 0 ? "a " : "", Py_TYPE(res)->tp_name, nout);
        Py_XDECREF(name);
        return -1;
    }
    PyObject *seq = PySequence_Tuple(res);   /* lists: items stay alive */
    int rc = seq ? 1 : -1;
    for (int k = 0; rc == 1 && k < nout; k++) {
        if (!strides_as_modelled(fn, k, PyTuple_GET_ITEM(seq, k), expected)) {
            rc = -1;
            break;
        }
        rc = take_result(PyTuple_GET_ITEM(seq, k), &out[k], in, nin, keep);
        if (rc == 0)
            rc = result_mismatch(fn, k, PyTuple_GET_ITEM(seq, k), &out[k]);
    }
    Py_XDECREF(seq);
    return rc == 1 ? 0 : -1;
}

/* Entry id of the table of calls: a new reference to its (fn, args,
 * kwargs) tuple, or NULL with an exception. */
static PyObject *call_entry(PyObject *calls, int32_t id)
{
    if (!hc.from_dlpack)
        return PyErr_Format(PyExc_RuntimeError, "smelt._C is not initialised");
    if (!calls || !PyList_Check(calls) || id < 0 || id >= PyList_GET_SIZE(calls))
        return PyErr_Format(PyExc_RuntimeError, "host call %d: not in the table of calls", id);
    PyObject *e = PyList_GET_ITEM(calls, id);
    if (!PyTuple_Check(e) || (PyTuple_GET_SIZE(e) != 3 && PyTuple_GET_SIZE(e) != 4))
        return PyErr_Format(PyExc_RuntimeError, "host call %d: expected a (fn, args, kwargs) "
                            "tuple, got %s", id, Py_TYPE(e)->tp_name);
    return Py_NewRef(e);
}

/* 1 if fn is a Python function whose `smelt_writes_out` attribute is
 * true: one lookup in its __dict__, no exception raised where it is absent
 * (every host call of every run asks). */
static int writes_out(PyObject *fn)
{
    static PyObject *name;
    if (!PyFunction_Check(fn) || !((PyFunctionObject *)fn)->func_dict)
        return 0;
    if (!name && !(name = PyUnicode_InternFromString("smelt_writes_out"))) {
        PyErr_Clear();
        return 0;
    }
    PyObject *v = PyDict_GetItemWithError(((PyFunctionObject *)fn)->func_dict, name);
    PyErr_Clear();
    return v == Py_True;
}

/* Runs entry e (fn, args, kwargs) on in[] and stores its results in out[].
 * A callable with a true `smelt_writes_out` attribute (smelt's own backward
 * host calls) also gets its results' buffers, as the slots after the
 * sources (None where a result is handed over, not copied): it may write
 * them in place and return them, saving a fresh tensor and a copy.
 * 0, or -1 with an exception. */
static int run_entry(PyObject *e, int nin, const smelt_tensor_ref *in, int nout,
                     smelt_tensor_ref *out, PyObject *keep)
{
    PyObject *ins[2 * SMELT_MAX_SRC], *fn = PyTuple_GET_ITEM(e, 0);
    if (nin < 1 || nin > SMELT_MAX_SRC || nout < 1 || nout > SMELT_MAX_SRC)
        return PyErr_Format(PyExc_RuntimeError, "host call: %d sources and %d results "
                            "(1 to %d each supported)", nin, nout, SMELT_MAX_SRC), -1;
    int n = nin + (writes_out(fn) ? nout : 0), k = 0;
    for (; k < n; k++) {
        const smelt_tensor_ref *r = k < nin ? &in[k] : &out[k - nin];
        if (!(ins[k] = k >= nin && !r->data ? Py_NewRef(Py_None) : wrap_ref(r)))
            break;
    }
    PyObject *res = k == n ? tracer_call_invoke(fn, PyTuple_GET_ITEM(e, 1), PyTuple_GET_ITEM(e, 2),
                                                ins, n) : NULL;
    int rc = res ? store_results(fn, res, nout, out, in, nin, keep,
                                 PyTuple_GET_SIZE(e) == 4 ? PyTuple_GET_ITEM(e, 3) : NULL) : -1;
    Py_XDECREF(res);
    for (int j = 0; j < k; j++)
        Py_DECREF(ins[j]);
    return rc;
}

/* Moves the pending exception into ctx->exc and describes it in err. */
static void keep_exception(pyext_hostcall_ctx *ctx, PyObject *e, int32_t id, char *err,
                           size_t errlen)
{
    char text[400];
    PyObject *v = tracer_call_exception();
    if (!v)
        v = PyObject_CallOneArg(PyExc_RuntimeError, Py_None);   /* failed without an exception */
    PyObject *name = e ? tracer_call_name(PyTuple_GET_ITEM(e, 0)) : NULL;
    const char *s = name ? PyUnicode_AsUTF8(name) : NULL;
    PyErr_Clear();
    if (v)
        tracer_call_exc_text(v, text, sizeof text);
    else
        snprintf(text, sizeof text, "out of memory");
    snprintf(err, errlen, "host call %d (%s): %s", (int)id, s ? s : "?", text);
    Py_XDECREF(name);
    if (ctx)
        Py_XSETREF(ctx->exc, v);
    else
        Py_XDECREF(v);
}

/* ctx->keep, made on first use: 0, or -1 with an exception. */
static int keep_list(pyext_hostcall_ctx *ctx)
{
    if (!ctx)
        return PyErr_Format(PyExc_RuntimeError, "host call without a context"), -1;
    return ctx->keep || (ctx->keep = PyList_New(0)) ? 0 : -1;
}

int pyext_hostcall_run(void *vctx, int32_t id, int nin, const smelt_tensor_ref *in, int nout,
                       smelt_tensor_ref *out, char *err, size_t errlen)
{
    pyext_hostcall_ctx *ctx = vctx;
    PyGILState_STATE gs = PyGILState_Ensure();
    hc_cuda = ctx ? ctx->cuda : 0;
    PyObject *e = call_entry(ctx ? ctx->calls : NULL, id);
    hc_mismatch = 0;
    int rc = e && !keep_list(ctx) ? run_entry(e, nin, in, nout, out, ctx->keep) : -1;
    if (rc == 0 && PyTuple_GET_SIZE(e) == 4) {   /* strides as modelled once: not checked again (same inputs' layout) */
        PyObject *plain = PyTuple_GetSlice(e, 0, 3);
        if (!plain || PyList_SetItem(ctx->calls, id, plain) < 0)
            PyErr_Clear();
    }
    if (rc && ctx)
        ctx->mismatch = hc_mismatch;
    if (rc)
        keep_exception(ctx, e, id, err, errlen);
    Py_XDECREF(e);
    PyGILState_Release(gs);
    return rc;
}
