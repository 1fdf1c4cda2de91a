/* smelt._C: module definition (multi-phase init), module state, the
 * torch dtype mapping, the thread-count, disk-cache and JIT target
 * functions. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "../kernels/threadpool.h"
#include "../kernels/conv.h"
#include "../kernels/matmul.h"
#include "../inductor/diskcache.h"
#include "../inductor/backend.h"
#include "../kernels/nvrtc.h"
#include "../inductor/cpu/jit.h"
#include "hostcall.h"
#include "../tracer/hostcall.h"
#include "log.h"
#include "module.h"

static const char *const torch_dtype_names[SMELT_NDTYPES] = {
    "bool", "uint8", "int8", "int16", "int32", "int64",
    "float16", "bfloat16", "float32", "float64",
};

pyext_state *pyext_state_of(PyObject *obj)
{
    return PyType_GetModuleState(Py_TYPE(obj));
}

int pyext_dtype_from_py(pyext_state *st, PyObject *obj, const char *what)
{
    for (int dt = 0; dt < SMELT_NDTYPES; dt++)
        if (obj == st->dtypes[dt])
            return dt;
    PyErr_Format(PyExc_TypeError, "%s: unsupported dtype %R (expected one of torch.bool, "
                 "uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64)",
                 what, obj);
    return -1;
}

PyObject *pyext_dtype_to_py(pyext_state *st, smelt_dtype dt)
{
    return st->dtypes[dt];
}

/* ------------------------------------------------------------------ */
/* module functions                                                   */

static PyObject *set_num_threads(PyObject *m, PyObject *arg)
{
    (void)m;
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 1 || n > 4096)
        return PyErr_Format(PyExc_ValueError, "set_num_threads: expected 1 to 4096 threads, "
                            "got %ld", n);
    kern_set_num_threads((int)n);
    Py_RETURN_NONE;
}

static PyObject *get_num_threads(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyLong_FromLong(kern_get_num_threads());
}

/* set_profiling(on): per-step wall time of every plan run (see
 * Compiled.profile / CompiledFunction.profile). */
static PyObject *set_profiling(PyObject *m, PyObject *arg)
{
    (void)m;
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    smelt_plan_set_profiling(on);
    Py_RETURN_NONE;
}

int pyext_packing_mode(const char *name)
{
    static const char *names[] = { "auto", "always", "never" };
    for (int i = 0; name && i < 3; i++)
        if (!strcmp(name, names[i]))
            return i;
    return -1;
}

/* set_pack_budget(bytes or None): the bytes all packed weight copies may
 * take under weight_packing="auto" (None: the default). */
static PyObject *set_pack_budget(PyObject *m, PyObject *arg)
{
    (void)m;
    long long b = -1;
    if (arg != Py_None && ((b = PyLong_AsLongLong(arg)) == -1 && PyErr_Occurred()))
        return NULL;
    if (arg != Py_None && b < 0)
        return PyErr_Format(PyExc_ValueError, "set_pack_budget: bytes must be >= 0 or None, got %lld", b);
    kern_matmul_pack_budget_set(b);
    Py_RETURN_NONE;
}

/* pack_stats() -> dict: bytes of the packed weight copies alive now and
 * the budget for new ones. */
static PyObject *pack_stats(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return Py_BuildValue("{s:L,s:L}", "live_bytes", (long long)kern_matmul_pack_live(), "budget_bytes",
                         (long long)kern_matmul_pack_budget());
}

/* release_thread_arena(): frees the calling thread's arena of
 * temporaries now (smelt.reset). */
static PyObject *release_thread_arena(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    smelt_release_thread_arena();
    Py_RETURN_NONE;
}

/* cache_info() -> dict: the disk cache's counters since the process
 * started (hits, misses, writes, evictions, corrupt), what it holds now
 * (entries, bytes), whether it is on and its directory. */
static PyObject *cache_info(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    ind_dcache_stats s;
    Py_BEGIN_ALLOW_THREADS   /* scans the directory */
    ind_dcache_info(&s);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("{sLsLsLsLsLsLsLsNss}", "hits", (long long)s.hits, "misses", (long long)s.misses,
                         "writes", (long long)s.writes, "evictions", (long long)s.evictions,
                         "corrupt", (long long)s.corrupt, "entries", (long long)s.entries,
                         "bytes", (long long)s.bytes, "enabled", PyBool_FromLong(s.enabled), "dir", s.dir);
}

static PyObject *cache_clear(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    ind_dcache_clear();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* jit_target() -> dict: the target compiled code is generated for. */
static PyObject *jit_target(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    char err[512];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cpu_jit_ready(err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc)
        return PyErr_Format(PyExc_RuntimeError, "%s", err);
    const cpu_target *t = cpu_target_process();
    return Py_BuildValue("{sssssisOss}", "cpu", t->cpu, "features", t->features, "vector_bits", t->vbits,
                         "fma", t->fma ? Py_True : Py_False, "refused", cpu_target_refusal());
}

/* A line from a C component (any thread, GIL held or not): a warning
 * as a Python RuntimeWarning (never raised: an error-filtered warning is
 * reported as unraisable), else on channel ch. */
static void log_line(pyext_log_channel ch, int warning, const char *line)
{
    if ((!warning && !pyext_log_on(ch)) || !Py_IsInitialized())
        return;
    PyGILState_STATE gs = PyGILState_Ensure();
    if (warning) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (PyErr_WarnEx(PyExc_RuntimeWarning, line, 1) < 0)
            PyErr_WriteUnraisable(NULL);
        PyErr_Restore(type, value, tb);
    } else {
        pyext_log_write(ch, line);
    }
    PyGILState_Release(gs);
}

/* The log hook of the disk cache and the JIT: the "cache" channel;
 * warnings (an unsafe cache directory, a refused SMELT_CPU) as a Python
 * RuntimeWarning. */
static void cache_log(int warning, const char *line) { log_line(PYEXT_LOG_CACHE, warning, line); }

/* The back ends' log hook: the "backend" channel; warnings (a requested
 * back end that cannot run, a plan it could not take) also as a
 * RuntimeWarning. */
static void backend_log(int warning, const char *line)
{
    log_line(PYEXT_LOG_BACKEND, warning, line);
    if (warning)
        log_line(PYEXT_LOG_BACKEND, 0, line);
}

/* backend_available(name): (True, "") or (False, why). */
static PyObject *backend_available(PyObject *m, PyObject *arg)
{
    (void)m;
    const char *name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (!name)
        return PyErr_Format(PyExc_TypeError, "backend_available: expected a back end name");
    const ind_backend *be = ind_backend_named(name);
    if (!be)
        return PyErr_Format(PyExc_ValueError, "backend_available: no back end is named '%s' (known: cpu, spirv)", name);
    char why[512] = "";
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = be->available(why, sizeof why);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(Os)", ok ? Py_True : Py_False, ok ? "" : why);
}

/* nvrtc_version(): "NVRTC 13.5", or None when NVRTC is not found. */
static PyObject *nvrtc_version(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    const char *v = kern_nvrtc_version_text();
    return v ? PyUnicode_FromString(v) : Py_NewRef(Py_None);
}

static PyObject *meta_runs(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyLong_FromLong(tracer_meta_runs());
}

static PyMethodDef module_methods[] = {
    {"backend_available", backend_available, METH_O,
     "backend_available(name)\n--\n\n(True, '') if back end `name` ('cpu', 'spirv') can run code in this "
     "process, else (False, the reason)."},
    {"nvrtc_version", nvrtc_version, METH_NOARGS,
     "nvrtc_version()\n--\n\nThe NVRTC the CUDA back end compiles with ('NVRTC 13.5'), or None when none is found "
     "(the system's libnvrtc, SMELT_NVRTC, or the nvidia-cuda-nvrtc wheel)."},
    {"_meta_runs", meta_runs, METH_NOARGS,
     "_meta_runs()\n--\n\nHost calls whose results were inferred by running them on meta tensors (not by "
     "smelt's shape rules) in this process."},
    {"cache_info", cache_info, METH_NOARGS,
     "cache_info()\n--\n\nThe disk cache of compiled code: a dict with hits, misses, writes, evictions "
     "and corrupt (entries discarded) since the process started, entries and bytes on disk now, "
     "enabled and dir."},
    {"cache_clear", cache_clear, METH_NOARGS,
     "cache_clear()\n--\n\nDeletes every entry of the disk cache of compiled code."},
    {"jit_target", jit_target, METH_NOARGS,
     "jit_target()\n--\n\nThe target compiled code is generated for (read once, when the JIT starts): a "
     "dict with cpu (LLVM's CPU name), features (the feature string handed to LLVM), vector_bits "
     "(512, 256 or 128), fma (fused multiply-add: the math functions' exact residuals) and refused (why SMELT_CPU / SMELT_CPU_FEATURES were not used; '' if they "
     "were, or are unset)."},
    {"set_profiling", set_profiling, METH_O,
     "set_profiling(on)\n--\n\nWhile on, every compiled plan adds each step's wall time to its "
     "counters (Compiled.profile(), CompiledFunction.profile())."},
    {"set_pack_budget", set_pack_budget, METH_O,
     "set_pack_budget(bytes)\n--\n\nThe bytes all packed weight copies may take under "
     "weight_packing='auto' (None: the default, 1/64 of physical memory up to 64 MB)."},
    {"release_thread_arena", release_thread_arena, METH_NOARGS,
     "release_thread_arena()\n--\n\nFrees this thread's arena of temporaries (shared by every plan run on "
     "it, kept between runs)."},
    {"pack_stats", pack_stats, METH_NOARGS,
     "pack_stats()\n--\n\nA dict: live_bytes (packed weight copies alive now), budget_bytes."},
    {"_ulp_check", pyext_ulp_check, METH_VARARGS,
     "_ulp_check(name, x_ptr, smelt_ptr, eager_ptr, n)\n--\n\nbenchmarks/ulp_sweep.py's inner loop: n float32 "
     "inputs and two float32 results (contiguous, by address) against a float64 reference of function "
     "name; a dict with smelt's and eager's max ULP, smelt's max where eager's is <= 4, the inputs outside "
     "the contract (smelt > max(4, eager)), the first of them and the worst input (indices, -1: none)."},
    {"set_num_threads", set_num_threads, METH_O,
     "set_num_threads(n)\n--\n\nNumber of threads compiled kernels use (n >= 1)."},
    {"get_num_threads", get_num_threads, METH_NOARGS,
     "get_num_threads()\n--\n\nNumber of threads compiled kernels use."},
    {NULL, NULL, 0, NULL},
};

/* ------------------------------------------------------------------ */
/* module state                                                       */

#define STATE_OBJECTS(X)                                                        \
    X(tensor_type) X(empty) X(strided) X(graph_type) X(compiled_type) X(kw_dtype) \
    X(is_grad) X(set_grad)                                                    \
    X(s_data_ptr) X(s_shape) X(s_stride) X(s_dtype) X(s_is_cpu) X(s_layout) X(s_device) X(s_version)

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    pyext_state *st = PyModule_GetState(m);
    if (!st)
        return 0;
    for (int dt = 0; dt < SMELT_NDTYPES; dt++)
        Py_VISIT(st->dtypes[dt]);
#define VISIT(f) Py_VISIT(st->f);
    STATE_OBJECTS(VISIT)
#undef VISIT
    return 0;
}

static int module_clear(PyObject *m)
{
    pyext_state *st = PyModule_GetState(m);
    if (!st)
        return 0;
    for (int dt = 0; dt < SMELT_NDTYPES; dt++)
        Py_CLEAR(st->dtypes[dt]);
#define CLEAR(f) Py_CLEAR(st->f);
    STATE_OBJECTS(CLEAR)
#undef CLEAR
    return 0;
}

static void module_free(void *m)
{
    module_clear((PyObject *)m);
    ind_dcache_set_log(NULL);
    ind_backend_set_log(NULL);
    cpu_jit_set_log(NULL);
    cpu_jit_join();
    pyext_hostcall_fini();
    pyext_log_fini();
    kern_matmul_cache_clear();
    kern_conv_cache_clear();
    kern_threadpool_shutdown();
}

/* Fetches the torch objects the state keeps. */
static int state_init_torch(pyext_state *st, PyObject *torch)
{
    for (int dt = 0; dt < SMELT_NDTYPES; dt++)
        if (!(st->dtypes[dt] = PyObject_GetAttrString(torch, torch_dtype_names[dt])))
            return -1;
    st->tensor_type = PyObject_GetAttrString(torch, "Tensor");
    st->empty = PyObject_GetAttrString(torch, "empty");
    st->strided = PyObject_GetAttrString(torch, "strided");
    st->kw_dtype = Py_BuildValue("(s)", "dtype");
    PyObject *c = PyObject_GetAttrString(torch, "_C");
    st->is_grad = c ? PyObject_GetAttrString(c, "is_grad_enabled") : NULL;
    st->set_grad = c ? PyObject_GetAttrString(c, "_set_grad_enabled") : NULL;
    Py_XDECREF(c);
    if (!st->tensor_type || !st->empty || !st->strided || !st->kw_dtype || !st->is_grad ||
        !st->set_grad)
        return -1;
    if (!PyType_Check(st->tensor_type)) {
        PyErr_SetString(PyExc_ImportError, "smelt._C: torch.Tensor is not a type");
        return -1;
    }
    return 0;
}

static int state_init_names(pyext_state *st)
{
#define INTERN(f, s) if (!(st->f = PyUnicode_InternFromString(s))) return -1;
    INTERN(s_data_ptr, "data_ptr")
    INTERN(s_shape, "shape")
    INTERN(s_stride, "stride")
    INTERN(s_dtype, "dtype")
    INTERN(s_is_cpu, "is_cpu")
    INTERN(s_layout, "layout")
    INTERN(s_device, "device")
    INTERN(s_version, "_version")
#undef INTERN
    return 0;
}

/* OPS: a tuple of (name, arity, kind) for every op in inductor/ops.def. */
static int add_op_table(PyObject *m)
{
    static const char *const kinds[] = {"leaf", "unary", "binary", "ternary",
                                        "reduction", "view", "cat", "extern", "gather"};
    PyObject *ops = PyTuple_New(SMELT_NOPS);
    if (!ops)
        return -1;
    for (int op = 0; op < SMELT_NOPS; op++) {
        PyObject *row = Py_BuildValue("(sis)", smelt_op_name((smelt_op)op),
                                      smelt_op_arity((smelt_op)op),
                                      kinds[smelt_op_kind_of((smelt_op)op)]);
        if (!row) {
            Py_DECREF(ops);
            return -1;
        }
        PyTuple_SET_ITEM(ops, op, row);
    }
    if (PyModule_AddObject(m, "OPS", ops) < 0) {
        Py_DECREF(ops);
        return -1;
    }
    if (PyModule_AddIntConstant(m, "MAX_SRC", SMELT_MAX_SRC) < 0)
        return -1;
    return PyModule_AddIntConstant(m, "MAX_DIMS", SMELT_MAX_DIMS);
}

/* Thread pool sized like torch's intra-op pool. */
static int init_threads(PyObject *torch)
{
    PyObject *n = PyObject_CallMethod(torch, "get_num_threads", NULL);
    long v = n ? PyLong_AsLong(n) : -1;
    Py_XDECREF(n);
    if (v == -1 && PyErr_Occurred())
        return -1;
    kern_set_num_threads(v > 0 ? (int)v : 1);
    return 0;
}

static int module_exec(PyObject *m)
{
    pyext_state *st = PyModule_GetState(m);
    int rc = -1;
    if (pyext_log_init() < 0)
        return -1;
    ind_dcache_set_log(cache_log);
    ind_backend_set_log(backend_log);
    cpu_jit_set_log(cache_log);
    PyObject *torch = PyImport_ImportModule("torch");
    if (!torch)
        return -1;
    if (state_init_torch(st, torch) == 0 && state_init_names(st) == 0 &&
        pyext_graph_type_init(m, st) == 0 && pyext_compiled_type_init(m, st) == 0 &&
        pyext_hostcall_init(m) == 0 &&
        pyext_guard_type_init(m) == 0 &&
        add_op_table(m) == 0 && init_threads(torch) == 0 && pyext_hook_init(m) == 0 &&
        pyext_function_type_init(m) == 0)
        rc = 0;
    Py_DECREF(torch);
    return rc;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "smelt._C",
    .m_doc = "smelt compiler back end: graph IR builder and compiled plans.",
    .m_size = sizeof(pyext_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__C(void)
{
    return PyModuleDef_Init(&module_def);
}
