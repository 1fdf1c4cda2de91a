/* Test facilities for the frame hook (tracer/eval_frame.h), exposed as
 * private functions of smelt._C. Not an API: tests only.
 *
 *   _hook_install(on_frame, run_default=None)
 *       enters the hook on this thread. For each frame offered,
 *       on_frame(code, values) is called (values: a tuple with each
 *       variable's value as the body will see it, None if unbound); its
 *       result is the frame's result, unless it is run_default (the frame
 *       then runs normally). on_frame=None: a C callback that runs every
 *       frame normally (for measuring the hook's own cost).
 *   _hook_uninstall() -> number of frames offered; exits the hook entered
 *       by this thread's last _hook_install.
 *   _hook_installed() -> whether smelt's eval-frame function is set.
 *   _hook_active() -> whether this thread has a callback now.
 *   _hook_skipped(code) -> whether frames of code are never offered.
 *   _code_extra_set(code, obj|None), _code_extra_get(code) -> obj|None:
 *       co_extra storage (obj is released when the code object dies).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "module.h"
#include "../tracer/eval_frame.h"

typedef struct test_hook {
    tracer_callback cb;              /* cb.ctx points back here */
    const tracer_callback *prev;     /* for tracer_hook_exit */
    PyObject *fn;                    /* NULL: run every frame normally */
    PyObject *run_default;
    long long offered;
} test_hook;

static PyObject *frame_values(const tracer_frame_view *v)
{
    PyObject *t = PyTuple_New(v->nlocalsplus);
    for (int i = 0; t && i < v->nlocalsplus; i++) {
        PyObject *x = tracer_frame_value(v, i);
        PyTuple_SET_ITEM(t, i, Py_NewRef(x ? x : Py_None));
    }
    return t;
}

static PyObject *test_on_frame(void *ctx, const tracer_frame_view *v)
{
    test_hook *h = ctx;
    h->offered++;
    if (h->fn == NULL)
        return NULL;
    PyObject *values = frame_values(v);
    if (values == NULL)
        return NULL;
    PyObject *r = PyObject_CallFunctionObjArgs(h->fn, (PyObject *)v->code, values, NULL);
    Py_DECREF(values);
    if (r == h->run_default) {
        Py_DECREF(r);
        return NULL;
    }
    return r;
}

static PyObject *hook_install(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *fn, *run_default = Py_None;
    if (!PyArg_ParseTuple(args, "O|O:_hook_install", &fn, &run_default))
        return NULL;
    if (fn != Py_None && !PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "_hook_install: on_frame must be callable or None");
    test_hook *h = PyMem_Calloc(1, sizeof *h);
    if (h == NULL)
        return PyErr_NoMemory();
    h->cb.on_frame = test_on_frame;
    h->cb.ctx = h;
    h->fn = fn == Py_None ? NULL : Py_NewRef(fn);
    h->run_default = Py_NewRef(run_default);
    h->prev = tracer_hook_enter(&h->cb);
    Py_RETURN_NONE;
}

static PyObject *hook_uninstall(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    const tracer_callback *cb = tracer_hook_current();
    if (cb == NULL || cb->on_frame != test_on_frame)
        return PyErr_Format(PyExc_RuntimeError, "_hook_uninstall: no test hook on this thread");
    test_hook *h = cb->ctx;
    tracer_hook_exit(h->prev);
    long long offered = h->offered;
    Py_XDECREF(h->fn);
    Py_DECREF(h->run_default);
    PyMem_Free(h);
    return PyLong_FromLongLong(offered);
}

static PyObject *hook_installed(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyBool_FromLong(tracer_hook_installed());
}

static PyObject *hook_active(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyBool_FromLong(tracer_hook_current() != NULL);
}

static PyObject *hook_skipped(PyObject *m, PyObject *code)
{
    (void)m;
    if (!PyCode_Check(code))
        return PyErr_Format(PyExc_TypeError, "_hook_skipped: expected a code object");
    return PyBool_FromLong(tracer_code_skipped((PyCodeObject *)code));
}

/* ------------------------------------------------------------------ */
/* co_extra                                                           */

typedef struct test_extra {
    tracer_extra base;
    PyObject *obj;
} test_extra;

static void test_extra_free(tracer_extra *e)
{
    Py_DECREF(((test_extra *)e)->obj);
    PyMem_Free(e);
}

static PyObject *code_extra_set(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *code, *obj;
    if (!PyArg_ParseTuple(args, "O!O:_code_extra_set", &PyCode_Type, &code, &obj))
        return NULL;
    test_extra *e = NULL;
    if (obj != Py_None) {
        if (!(e = PyMem_Malloc(sizeof *e)))
            return PyErr_NoMemory();
        e->base.free = test_extra_free;
        e->obj = Py_NewRef(obj);
    }
    if (tracer_set_code_extra(code, e ? &e->base : NULL) < 0) {
        if (e)
            test_extra_free(&e->base);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *code_extra_get(PyObject *m, PyObject *code)
{
    (void)m;
    if (!PyCode_Check(code))
        return PyErr_Format(PyExc_TypeError, "_code_extra_get: expected a code object");
    tracer_extra *e = tracer_code_extra(code);
    if (e == NULL || e->free != test_extra_free)
        Py_RETURN_NONE;
    return Py_NewRef(((test_extra *)e)->obj);
}

static PyMethodDef hook_methods[] = {
    {"_hook_install", hook_install, METH_VARARGS, NULL},
    {"_hook_uninstall", hook_uninstall, METH_NOARGS, NULL},
    {"_hook_installed", hook_installed, METH_NOARGS, NULL},
    {"_hook_active", hook_active, METH_NOARGS, NULL},
    {"_hook_skipped", hook_skipped, METH_O, NULL},
    {"_code_extra_set", code_extra_set, METH_VARARGS, NULL},
    {"_code_extra_get", code_extra_get, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

int pyext_hook_init(PyObject *m)
{
    if (tracer_hook_init(m) < 0)
        return -1;
    return PyModule_AddFunctions(m, hook_methods);
}
