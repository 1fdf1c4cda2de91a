/* autograd_bridge.c — a compiled region under autograd (inputs that
 * require grad, grad mode on): the traced graph is split (autograd/) into
 * a forward plan, which also returns the values the backward reads, and a
 * backward plan; both are Compiled objects, and each call runs through
 * smelt._autograd.run, a torch.autograd.Function whose forward runs the
 * first and whose backward runs the second. So the region is one autograd
 * node: gradients reach parameters and inputs as eager's do, hooks fire,
 * and it composes with eager autograd around it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "log.h"
#include "module.h"
#include "autograd_bridge.h"
#include "debugdir.h"

#include "../autograd/autograd.h"
#include "../tracer/hostcall.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static PyObject *run_fn, *spec_fn;   /* smelt._autograd.run / Spec */
static PyObject *template_fn;        /* smelt._autograd.call_template: a backward host call's (fn, args, kwargs) */
static PyObject *vjp_fn;             /* smelt._autograd.vjp_call (AD_CALL_VJP) */

static int bridge_init(void)
{
    if (run_fn)
        return 0;
    PyObject *m = PyImport_ImportModule("smelt._autograd");
    if (!m)
        return -1;
    run_fn = PyObject_GetAttrString(m, "run");
    spec_fn = PyObject_GetAttrString(m, "Spec");
    template_fn = PyObject_GetAttrString(m, "call_template");
    vjp_fn = PyObject_GetAttrString(m, "vjp_call");
    Py_DECREF(m);
    return run_fn && spec_fn && template_fn && vjp_fn ? 0 : -1;
}


static PyObject *int_tuple(const int32_t *v, int32_t n)
{
    PyObject *t = PyTuple_New(n);
    for (int32_t k = 0; t && k < n; k++) {
        PyObject *x = PyLong_FromLong(v[k]);
        if (!x)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, k, x);
    }
    return t;
}

/* Milliseconds since t0 (CLOCK_MONOTONIC). */
static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-6;
}

static PyObject *compile_one(pyext_state *st, const smelt_graph *g, const smelt_compile_opts *o, PyObject *calls,
                             const pyext_ad_about *about, char *reason, size_t len, const char *what,
                             pyext_ad *out, int half)
{
    char err[512];
    smelt_plan *plan;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    Py_BEGIN_ALLOW_THREADS
    plan = smelt_compile(g, o, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (pyext_debug_dir_on()) {
        char name[512];
        snprintf(name, sizeof name, "%s.%s", about->name, what);
        pyext_debug_dump(name, g, about->guards, plan, half ? 0.0 : about->trace_ms, ms_since(&t0));
    }
    if (!plan) {
        snprintf(reason, len, strncmp(err, "backend cuda:", 13)
                 ? "compiling the %s graph failed (internal error, please report): %.400s"
                 : "the %s graph is not compiled for CUDA: %.400s", what, err);
        return Py_NewRef(Py_None);
    }
    smelt_compile_times ct = { 0 };
    smelt_plan_compile_times(plan, &ct);
    out->generated += ct.generated;
    out->plans_cached += ct.plan_cached;
    out->ct[half] = ct;
    out->nkernels[half] = smelt_plan_num_kernels(plan);
    out->nexterns[half] = smelt_plan_num_externs(plan);
    const char *k = smelt_plan_code(plan, "kernels");
    int ch = pyext_log_on(PYEXT_LOG_AOT) ? PYEXT_LOG_AOT : PYEXT_LOG_OUTPUT_CODE;
    if (k && pyext_log_on(ch)) {   /* the kernels of each half (SMELT_LOGS=aot or output_code) */
        char head[64];
        snprintf(head, sizeof head, "%s kernels:", what);
        pyext_log_write(ch, head);
        pyext_log_write(ch, k);
    }
    pyext_log_device_code(plan);
    return pyext_compiled_new(st, g, plan, calls);
}

/* The backward graph's table of host calls (hostcall.h): (fn, args,
 * kwargs) per call from smelt._autograd.call_template(kind, params); NULL
 * when it has none (or on error: *err). */
static PyObject *call_table(const ad_split *s, PyObject *fwd_calls, int *err)
{
    *err = 0;
    if (!s->ncalls)
        return NULL;
    PyObject *t = PyList_New(s->ncalls);
    for (int32_t k = 0; t && k < s->ncalls; k++) {
        PyObject *params = PyTuple_New(s->calls[k].nparam), *e = NULL;
        for (int j = 0; params && j < s->calls[k].nparam; j++) {
            PyObject *v = PyLong_FromLongLong(s->calls[k].param[j]);
            if (!v)
                Py_CLEAR(params);
            else
                PyTuple_SET_ITEM(params, j, v);
        }
        if (params && s->calls[k].kind == AD_CALL_VJP) {   /* (vjp_call, (fn, args, kwargs, nsrc, nout, Slots...), {}) */
            PyObject *fc = fwd_calls ? PyList_GetItem(fwd_calls, (Py_ssize_t)s->calls[k].param[0]) : NULL;
            int nsrc = (int)s->calls[k].param[1], nout = (int)s->calls[k].param[2];
            PyObject *a = fc ? PyTuple_New(5 + nsrc + nout) : NULL;
            if (a) {
                for (int j = 0; j < 3; j++)
                    PyTuple_SET_ITEM(a, j, Py_NewRef(PyTuple_GET_ITEM(fc, j)));
                PyTuple_SET_ITEM(a, 3, PyLong_FromLong(nsrc));
                PyTuple_SET_ITEM(a, 4, PyLong_FromLong(nout));
                for (int j = 0; j < nsrc + nout; j++)
                    PyTuple_SET_ITEM(a, 5 + j, tracer_slot_new(j));
                for (int j = 3; j < 5 + nsrc + nout; j++)
                    if (!PyTuple_GET_ITEM(a, j))
                        Py_CLEAR(a);
            }
            e = a ? Py_BuildValue("(OO{})", vjp_fn, a) : NULL;
            Py_XDECREF(a);
        } else if (params)
            e = PyObject_CallFunction(template_fn, "iO", (int)s->calls[k].kind, params);
        Py_XDECREF(params);
        if (!e)
            Py_CLEAR(t);
        else
            PyList_SET_ITEM(t, k, e);
    }
    *err = !t;
    return t;
}

int pyext_ad_compile(pyext_state *st, const tr_result *r, const uint8_t *rg, const smelt_compile_opts *o,
                     const pyext_ad_about *about, pyext_ad *out, char *reason, size_t len)
{
    memset(out, 0, sizeof *out);
    if (bridge_init())
        return -1;
    ad_split s;
    char err[512];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = ad_split_graph(r->graph, rg, r->nmut, &s, err, sizeof err);
    out->split_ms = ms_since(&t0);
    if (rc) {
        snprintf(reason, len, rc > 0 ? "autograd: %s" : "autograd: internal error, please report: %s", err);
        return 1;
    }
    if (!s.ndiff) {   /* nothing it computes needs a gradient (a piece that only moves tensors) */
        ad_split_free(&s);
        return 2;
    }
    if (pyext_log_on(PYEXT_LOG_AOT)) {
        char *f = smelt_graph_print(s.fwd), *b = smelt_graph_print(s.bwd);
        char head[256];
        snprintf(head, sizeof head, "joint graph split: %d saved values (%lld bytes), %d forward nodes recomputed in the backward",
                 s.nsaved, (long long)s.saved_bytes, s.nrecomputed);
        pyext_log_write(PYEXT_LOG_AOT, head);
        if (f)
            pyext_log_write(PYEXT_LOG_AOT, f);
        if (b)
            pyext_log_write(PYEXT_LOG_AOT, b);
        free(f);
        free(b);
    }
    int cerr;
    PyObject *bcalls = call_table(&s, r->calls, &cerr);
    PyObject *fwd = cerr ? NULL : compile_one(st, s.fwd, o, r->calls, about, reason, len, "forward", out, 0);
    PyObject *bwd = fwd && fwd != Py_None ? compile_one(st, s.bwd, o, bcalls, about, reason, len, "backward", out, 1) : NULL;
    Py_XDECREF(bcalls);
    PyObject *kinds = NULL, *idx = NULL, *gin = NULL, *diff = NULL, *spec = NULL, *uses = NULL;
    if (bwd && bwd != Py_None) {
        int32_t *k = PyMem_Calloc((size_t)s.nbin + 1, sizeof *k), *ix = PyMem_Calloc((size_t)s.nbin + 1, sizeof *ix);
        int32_t *d = PyMem_Calloc((size_t)s.nout_user + 1, sizeof *d);
        if (k && ix && d) {
            for (int32_t b = 0; b < s.nbin; b++) {
                k[b] = s.bin[b].kind;
                ix[b] = s.bin[b].index;
            }
            for (int32_t o2 = 0; o2 < s.nout_user; o2++)
                d[o2] = s.out_diff[o2];
            kinds = int_tuple(k, s.nbin);
            idx = int_tuple(ix, s.nbin);
            gin = int_tuple(s.grad_in, s.ngrad_in);
            diff = int_tuple(d, s.nout_user);
            uses = PyTuple_New(s.ngrad_in);
            for (int32_t q = 0; uses && q < s.ngrad_in; q++) {
                PyObject *v = PyLong_FromUnsignedLongLong(s.grad_in_uses[q]);
                if (!v)
                    Py_CLEAR(uses);
                else
                    PyTuple_SET_ITEM(uses, q, v);
            }
        } else {
            PyErr_NoMemory();
        }
        PyMem_Free(k);
        PyMem_Free(ix);
        PyMem_Free(d);
        if (kinds && idx && gin && diff && uses)
            spec = PyObject_CallFunction(spec_fn, "iOOOOOiL", (int)s.nout_user, kinds, idx, gin, uses, diff,
                                         (int)r->ninputs, (long long)s.saved_bytes);
    }
    out->saved_bytes = s.saved_bytes;
    out->nsaved = s.nsaved;
    out->nrecomputed = s.nrecomputed;
    ad_split_free(&s);
    Py_XDECREF(kinds);
    Py_XDECREF(idx);
    Py_XDECREF(gin);
    Py_XDECREF(diff);
    Py_XDECREF(uses);
    if (fwd == Py_None || bwd == Py_None) {
        Py_XDECREF(fwd);
        Py_XDECREF(bwd);
        return 1;
    }
    if (!spec) {
        Py_XDECREF(fwd);
        Py_XDECREF(bwd);
        return -1;
    }
    out->fwd = fwd;
    out->bwd = bwd;
    out->spec = spec;
    return 0;
}

void pyext_ad_clear(pyext_ad *a)
{
    Py_CLEAR(a->fwd);
    Py_CLEAR(a->bwd);
    Py_CLEAR(a->spec);
}

PyObject *pyext_ad_run(const pyext_ad *a, PyObject *const *ins, int32_t n)
{
    PyObject *small[35], **args = small;
    if (n + 3 > 35 && !(args = PyMem_Malloc(sizeof *args * ((size_t)n + 3))))
        return PyErr_NoMemory();
    args[0] = a->fwd;
    args[1] = a->bwd;
    args[2] = a->spec;
    memcpy(args + 3, ins, sizeof *args * (size_t)n);
    PyObject *r = PyObject_Vectorcall(run_fn, args, (size_t)n + 3, NULL);
    if (args != small)
        PyMem_Free(args);
    return r;
}
