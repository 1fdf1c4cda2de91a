/* The frame hook, version-independent part: the per-thread callback, the
 * install refcount, the eval-frame function's control flow, skip rules and
 * co_extra storage. The frame layout is read in frame.c
 * (tracer_frame_open, tracer_frame_discard, tracer_frame_resume). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "eval_frame.h"

#if PY_VERSION_HEX < 0x030b0000 || PY_VERSION_HEX >= 0x030e0000
#error "smelt's frame hook supports CPython 3.11 to 3.13 (a new version needs its frame layout in frame.c)"
#endif

/* co_extra API: private names in 3.11, PyUnstable_ (old ones deprecated)
 * from 3.12 (3.13 keeps them; _PyInterpreterState_{Get,Set}EvalFrameFunc
 * keep their names in 3.11 to 3.13). */
#if PY_VERSION_HEX >= 0x030c0000
#define code_get_extra PyUnstable_Code_GetExtra
#define code_set_extra PyUnstable_Code_SetExtra
#define request_extra_index PyUnstable_Eval_RequestCodeExtraIndex
#else
#define code_get_extra _PyCode_GetExtra
#define code_set_extra _PyCode_SetExtra
#define request_extra_index _PyEval_RequestCodeExtraIndex
#endif

/* co_extra values at skip_index: unknown (NULL), decided. */
#define SKIP_NO ((void *)1)
#define SKIP_YES ((void *)2)

static _Thread_local const tracer_callback *tls_callback;
static _Thread_local PyObject *tls_forced;   /* code whose next fresh frame is offered whatever the skip rules */
static int n_active;                 /* callbacks entered, all threads (GIL) */
static _PyFrameEvalFunction prev_eval = _PyEval_EvalFrameDefault;
static Py_ssize_t skip_index = -1, extra_index = -1;
static PyObject *skip_rules;         /* list of (dir prefix, skip) */
static PyObject *frozen_prefix;      /* "<frozen " */

PyObject *tracer_frame_value(const tracer_frame_view *v, int i)
{
    if (i < v->first_free)
        return v->localsplus[i];
    if (v->closure == NULL)
        return NULL;
    return PyCell_GET(PyTuple_GET_ITEM(v->closure, i - v->first_free));
}

/* ------------------------------------------------------------------ */
/* the eval-frame function                                            */

/* Offers fresh frames of unskipped code to this thread's callback with
 * the callback disabled; runs everything else (and what on_frame declines)
 * with the evaluator that was installed before smelt's. */
static PyObject *eval_frame(PyThreadState *ts, struct _PyInterpreterFrame *frame, int throwflag)
{
    const tracer_callback *cb = tls_callback;
    tracer_frame_view v;
    if (cb == NULL || throwflag || !tracer_frame_open(frame, &v))
        return prev_eval(ts, frame, throwflag);
    if ((PyObject *)v.code == tls_forced)
        tls_forced = NULL;
    else if (tracer_code_skipped(v.code))
        return prev_eval(ts, frame, throwflag);
    tls_callback = NULL;
    PyObject *r = cb->on_frame(cb->ctx, &v);
    tls_callback = cb;
    if (r == NULL && !PyErr_Occurred())
        return prev_eval(ts, frame, 0);
    tracer_frame_discard(ts, frame);
    return r;
}

static void install(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction cur = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (cur != eval_frame)
        prev_eval = cur;
    _PyInterpreterState_SetEvalFrameFunc(interp, eval_frame);
}

/* Leaves the interpreter alone if someone replaced smelt's function. */
static void uninstall(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    if (_PyInterpreterState_GetEvalFrameFunc(interp) == eval_frame)
        _PyInterpreterState_SetEvalFrameFunc(interp, prev_eval);
}

const tracer_callback *tracer_hook_enter(const tracer_callback *cb)
{
    const tracer_callback *prev = tls_callback;
    if (cb != NULL && n_active++ == 0)
        install();
    tls_callback = cb;
    return prev;
}

void tracer_hook_exit(const tracer_callback *prev)
{
    if (tls_callback != NULL && --n_active == 0)
        uninstall();
    tls_callback = prev;
}

void tracer_hook_force(PyObject *code)
{
    tls_forced = code;
}

const tracer_callback *tracer_hook_current(void)
{
    return tls_callback;
}

int tracer_hook_installed(void)
{
    return _PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get()) == eval_frame;
}

/* ------------------------------------------------------------------ */
/* skip rules                                                         */

/* 1 for `<frozen ...>` and for files under a skipped directory: the
 * longest matching rule decides (so site-packages inside the stdlib
 * directory is kept, and torch inside site-packages is skipped). */
static int skipped_file(PyObject *filename)
{
    if (!PyUnicode_Check(filename))
        return 1;
    if (PyUnicode_Tailmatch(filename, frozen_prefix, 0, PY_SSIZE_T_MAX, -1) == 1)
        return 1;
    Py_ssize_t best = -1;
    int skip = 0;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(skip_rules); k++) {
        PyObject *rule = PyList_GET_ITEM(skip_rules, k);
        PyObject *prefix = PyTuple_GET_ITEM(rule, 0);
        Py_ssize_t n = PyUnicode_GET_LENGTH(prefix);
        if (n > best && PyUnicode_Tailmatch(filename, prefix, 0, PY_SSIZE_T_MAX, -1) == 1) {
            best = n;
            skip = PyTuple_GET_ITEM(rule, 1) == Py_True;
        }
    }
    return skip;
}

/* Generators and coroutines are resumed, not started, by their frames'
 * evaluations; non-function code keeps its variables in a dict. */
static int decide_skip(PyCodeObject *code)
{
    if (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR))
        return 1;
    if (!(code->co_flags & CO_OPTIMIZED))
        return 1;
    return skipped_file(code->co_filename);
}

int tracer_code_skipped(PyCodeObject *code)
{
    void *known = NULL;
    if (code_get_extra((PyObject *)code, skip_index, &known) == 0 && known != NULL)
        return known == SKIP_YES;
    int skip = decide_skip(code);
    if (code_set_extra((PyObject *)code, skip_index, skip ? SKIP_YES : SKIP_NO) < 0)
        PyErr_Clear();   /* out of memory: decided again next time */
    return skip;
}

/* Appends (dir + separator, skip) for dir and, if different, its real
 * path. dir may be NULL or None (nothing added). */
static int add_rule(PyObject *ospath, PyObject *dir, int skip)
{
    if (dir == NULL || dir == Py_None)
        return 0;
    PyObject *real = PyObject_CallMethod(ospath, "realpath", "O", dir);
    if (real == NULL)
        return -1;
    PyObject *dirs[2] = {dir, real};
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        PyObject *prefix = PyObject_CallMethod(ospath, "join", "Os", dirs[k], "");
        PyObject *rule = Py_BuildValue("(NO)", prefix, skip ? Py_True : Py_False);
        rc = rule ? PyList_Append(skip_rules, rule) : -1;
        Py_XDECREF(rule);
    }
    Py_DECREF(real);
    return rc;
}

/* Rule for the directory holding the file named by obj.__file__ (nothing
 * if obj is NULL or has none). */
static int add_package_rule(PyObject *ospath, PyObject *obj, int skip)
{
    PyObject *file = obj ? PyObject_GetAttrString(obj, "__file__") : NULL;
    if (file == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyObject *dir = PyObject_CallMethod(ospath, "dirname", "O", file);
    int rc = dir ? add_rule(ospath, dir, skip) : -1;
    Py_XDECREF(dir);
    Py_DECREF(file);
    return rc;
}

/* stdlib / platstdlib skipped; purelib and platlib kept (they may sit
 * inside the stdlib directory). */
static int add_sysconfig_rules(PyObject *ospath)
{
    static const char *const names[] = {"stdlib", "platstdlib", "purelib", "platlib"};
    PyObject *sysconfig = PyImport_ImportModule("sysconfig");
    PyObject *d = sysconfig ? PyObject_CallMethod(sysconfig, "get_paths", NULL) : NULL;
    Py_XDECREF(sysconfig);
    if (d != NULL && !PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "smelt: sysconfig.get_paths() is not a dict");
        Py_CLEAR(d);
    }
    int rc = d ? 0 : -1;
    for (int k = 0; k < 4 && rc == 0; k++)
        rc = add_rule(ospath, PyDict_GetItemString(d, names[k]), k < 2);
    Py_XDECREF(d);
    return rc;
}

/* site.getsitepackages() kept too (nothing without the site module). */
static int add_site_rules(PyObject *ospath)
{
    PyObject *site = PyImport_ImportModule("site");
    PyObject *sp = site ? PyObject_CallMethod(site, "getsitepackages", NULL) : NULL;
    Py_XDECREF(site);
    if (sp == NULL)
        PyErr_Clear();   /* python -S, or an old virtualenv's site */
    int rc = 0;
    for (Py_ssize_t k = 0; sp && PyList_Check(sp) && k < PyList_GET_SIZE(sp) && rc == 0; k++)
        rc = add_rule(ospath, PyList_GET_ITEM(sp, k), 0);
    Py_XDECREF(sp);
    return rc;
}

/* The rules: sysconfig's and site's, then torch's package (if imported)
 * and the package of `module` (smelt's) skipped. */
static int init_skip_rules(PyObject *module)
{
    PyObject *ospath = PyImport_ImportModule("os.path");
    PyObject *name = PyUnicode_FromString("torch");
    PyObject *torch = name ? PyImport_GetModule(name) : NULL;
    int rc = -1;
    if (ospath && name && !PyErr_Occurred() && add_sysconfig_rules(ospath) == 0 &&
        add_site_rules(ospath) == 0 && add_package_rule(ospath, torch, 1) == 0 &&
        add_package_rule(ospath, module, 1) == 0)
        rc = 0;
    Py_XDECREF(torch);
    Py_XDECREF(name);
    Py_XDECREF(ospath);
    return rc;
}

/* ------------------------------------------------------------------ */
/* co_extra storage                                                   */

static void extra_free(void *p)
{
    tracer_extra *e = p;
    if (e != NULL && e->free != NULL)
        e->free(e);
}

tracer_extra *tracer_code_extra(PyObject *code)
{
    void *p = NULL;
    if (code_get_extra(code, extra_index, &p) < 0) {
        PyErr_Clear();
        return NULL;
    }
    return p;
}

int tracer_set_code_extra(PyObject *code, tracer_extra *e)
{
    return code_set_extra(code, extra_index, e);
}

int tracer_hook_init(PyObject *module)
{
    if (skip_rules != NULL)
        return 0;   /* once per process */
    skip_index = request_extra_index(NULL);
    extra_index = request_extra_index(extra_free);
    if (skip_index < 0 || extra_index < 0) {
        PyErr_SetString(PyExc_RuntimeError, "smelt: no code-object extra index left");
        return -1;
    }
    if (!(frozen_prefix = PyUnicode_InternFromString("<frozen ")) ||
        !(skip_rules = PyList_New(0)) || init_skip_rules(module) < 0) {
        Py_CLEAR(skip_rules);
        return -1;
    }
    return 0;
}
