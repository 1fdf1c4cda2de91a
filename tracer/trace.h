/* trace.h — the symbolic bytecode tracer's internal contract.
 *
 * tracer_trace() interprets a function's bytecode over symbolic values built
 * from the concrete arguments of one call: tensors become graph values,
 * everything else is a Python object known at trace time. It follows the one
 * path that these arguments take (conditions on constants and shapes are
 * decided at trace time and guarded), inlines Python calls, maps torch calls
 * to graph ops, and produces: the graph, where each graph input comes from
 * (a source path), how to rebuild the return value, and the guards the trace
 * relied on. Anything it cannot handle ends the trace with a reason and the
 * file:line; the caller then runs the frame eagerly.
 */
#ifndef SMELT_TRACE_H
#define SMELT_TRACE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../inductor/graph.h"

/* A source: how to fetch a value from a frame. Sources form a tree through
 * `parent`; roots are locals, globals, builtins and closure cells. */
typedef enum tr_src_kind {
    SRC_LOCAL,     /* index: fast-local slot of the top frame */
    SRC_GLOBAL,    /* key: name in the top frame's globals */
    SRC_BUILTIN,   /* key: name in builtins */
    SRC_CELL,      /* parent: a function (-1: the traced one); index: closure cell; value = contents */
    SRC_ATTR,      /* parent.key (key: interned str) */
    SRC_ITEM,      /* parent[index] (tuple/list) */
    SRC_DICT,      /* parent[key] (dict, exact key) */
    SRC_TYPE       /* type(parent) */
} tr_src_kind;

typedef struct tr_src {
    uint8_t kind;
    int32_t parent;
    Py_ssize_t index;
    PyObject *key;         /* borrowed from the tracer's keep-alive list */
} tr_src;

/* Guards recorded while tracing. */
typedef enum tr_guard_kind {
    TG_TYPE,       /* type(src) is obj */
    TG_ID,         /* src is obj */
    TG_EQ,         /* src == obj, same type */
    TG_TENSOR,     /* tensor metadata of src matches obj (an example tensor) */
    TG_LEN,        /* len(src) == n */
    TG_EMPTY       /* src is None or an empty dict */
} tr_guard_kind;

typedef struct tr_guard {
    uint8_t kind;
    int32_t src;
    PyObject *obj;         /* strong ref */
    Py_ssize_t n;
} tr_guard;

/* How the return value is rebuilt from graph outputs. */
typedef enum tr_out_kind { TO_TENSOR, TO_CONST, TO_TUPLE, TO_LIST, TO_DICT, TO_OBJ } tr_out_kind;

typedef struct tr_out {
    uint8_t kind;
    int32_t index;         /* TO_TENSOR: graph output number */
    PyObject *obj;         /* TO_CONST value / TO_DICT keys tuple / TO_TUPLE type
                              to build (NULL: tuple) / TO_OBJ instance spec for
                              tracer_build_instance (strong) */
    int32_t first, n;      /* containers: children out[first .. first+n) */
} tr_out;

typedef struct tr_result {
    smelt_graph *graph;
    tr_src *srcs; int32_t nsrcs;
    int32_t *input_src;    /* graph input k comes from srcs[input_src[k]] */
    int32_t ninputs;
    tr_guard *guards; int32_t nguards;
    tr_out *outs; int32_t nouts;   /* outs[0] is the root */
    int32_t *mut_in, *mut_out;     /* in-place updates of inputs: after each run, graph
                                      input mut_in[i] takes the value of graph output
                                      mut_out[i] (tensor.copy_) */
    int32_t nmut;
    PyObject *keep;        /* list keeping keys and constants alive */
    PyObject *calls;       /* list of (fn, args, kwargs) by host call id, or NULL
                              (see tracer/hostcall.h); the reference is held in
                              keep, so tracer_result_clear releases it */
    char reason[512];      /* graph break: why, at file:line */
} tr_result;

/* A TO_OBJ result: an instance of a plain Python class made by the traced
 * code, rebuilt from spec (its out's obj) and vals, the tuple of its
 * children's values (the distinct values of its attributes and items),
 * without running any of the class's Python code. New reference, or NULL
 * with an error set. */
PyObject *tracer_build_instance(PyObject *spec, PyObject *vals);

/* Traces fn called with the top frame's fast locals `locals` (nlocals
 * entries, as CPython lays them out: arguments first). 0 on success; 1 on a
 * graph break (reason filled, no Python error); -1 with a Python error set. */
int tracer_trace(PyObject *fn, PyObject *const *locals, Py_ssize_t nlocals, tr_result *out);
void tracer_result_clear(tr_result *r);

/* Module-level set-up: opcode tables, torch callables. 0 or -1 (error set). */
int tracer_init(void);

#endif
