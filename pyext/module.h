/* smelt._C internals shared by the pyext files: the module state and the
 * torch <-> smelt conversions. Include after Python.h. */
#ifndef SMELT_PYEXT_MODULE_H
#define SMELT_PYEXT_MODULE_H

#include "../inductor/compile.h"
#include "../inductor/graph.h"

/* Per-module state: every Python object smelt._C keeps, owned references
 * fetched once in module exec (torch is imported there). */
typedef struct pyext_state {
    PyObject *dtypes[SMELT_NDTYPES];   /* torch.bool, torch.uint8, ... by smelt_dtype */
    PyObject *tensor_type;             /* torch.Tensor */
    PyObject *empty;                   /* torch.empty */
    PyObject *strided;                 /* torch.strided */
    PyObject *graph_type;              /* smelt._C.Graph */
    PyObject *compiled_type;           /* smelt._C.Compiled */
    PyObject *kw_dtype;                /* ("dtype",): kwnames for torch.empty */
    PyObject *is_grad, *set_grad;      /* torch._C.is_grad_enabled, _set_grad_enabled */
    /* interned attribute names */
    PyObject *s_data_ptr, *s_shape, *s_stride, *s_dtype, *s_is_cpu, *s_layout, *s_device, *s_version;
} pyext_state;

/* State of the module that defined obj's type (Graph or Compiled). */
pyext_state *pyext_state_of(PyObject *obj);

/* torch.dtype -> smelt_dtype; -1 with TypeError naming `what` otherwise. */
int pyext_dtype_from_py(pyext_state *st, PyObject *obj, const char *what);

/* smelt_dtype -> torch.dtype (borrowed). */
PyObject *pyext_dtype_to_py(pyext_state *st, smelt_dtype dt);

/* Create the heap types and add them to module m (0, or -1 with an
 * exception). */
int pyext_graph_type_init(PyObject *m, pyext_state *st);
int pyext_compiled_type_init(PyObject *m, pyext_state *st);
int pyext_guard_type_init(PyObject *m);   /* smelt._C._GuardTree */
int pyext_function_type_init(PyObject *m);   /* smelt._C.CompiledFunction */
int pyext_hook_init(PyObject *m);   /* frame hook + its test functions */

/* A new Compiled object running plan (ownership taken, also on failure)
 * with the inputs and outputs of g. calls: the table of host calls
 * (pyext/hostcall.h: a list of (fn, args, kwargs) by call id), or NULL
 * when g has none; required (at least smelt_graph_num_calls(g) entries)
 * when it has. The Compiled object keeps its own copy of the list. NULL
 * with an exception on failure. */
PyObject *pyext_compiled_new(pyext_state *st, const smelt_graph *g, smelt_plan *plan,
                             PyObject *calls);

/* weight_packing modes: "auto" (packed copies within the budget, from the
 * second call), "always" (from the first call, whatever the budget),
 * "never". */
enum { PYEXT_PACK_AUTO, PYEXT_PACK_ALWAYS, PYEXT_PACK_NEVER };

/* The mode a name gives ("auto", "always", "never"), or -1. */
int pyext_packing_mode(const char *name);

/* Bytes of Compiled `compiled`'s arena of temporaries. */
int64_t pyext_compiled_arena_bytes(PyObject *compiled);
int64_t pyext_compiled_code_bytes(PyObject *compiled);   /* its plan's object code */

/* Sets Compiled `compiled`'s weight_packing mode. */
void pyext_compiled_set_packing(PyObject *compiled, int mode);

/* Releases what pyext_hostcall_init cached (module free). */
void pyext_hostcall_fini(void);

/* Runs Compiled `compiled` on exactly its number of inputs without
 * re-validating them: for callers whose guards already checked each input
 * is a CPU tensor with the declared dtype, shape and strides. Inputs
 * apart[0..napart) (ones the plan updates in place) must not share memory
 * with any other input: if one does, nothing runs and the result is
 * Py_NotImplemented. Returns the list of outputs, or NULL with an
 * exception. */
PyObject *pyext_compiled_call_trusted(PyObject *compiled, PyObject *const *args, const int32_t *apart,
                                      int32_t napart);

/* Compiled.profile() of a Compiled object (a new str, or NULL). */
PyObject *pyext_compiled_profile(PyObject *compiled);

/* ulpcheck.c: _C._ulp_check (the accuracy sweep's inner loop) */
PyObject *pyext_ulp_check(PyObject *m, PyObject *args);

#endif
