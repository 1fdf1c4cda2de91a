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
#include "../inductor/sym.h"

/* A source: how to fetch a value from a frame. Sources form a tree through
 * `parent`; roots are locals, globals, builtins and closure cells. */
typedef enum tr_src_kind {
    SRC_LOCAL,     /* index: fast-local slot of the top frame */
    SRC_GLOBAL,    /* key: name in the top frame's globals */
    SRC_BUILTIN,   /* key: name in builtins */
    SRC_CELL,      /* parent: a function (-1: the traced one); index: closure cell; value = contents */
    SRC_ATTR,      /* parent.key (key: interned str) */
    SRC_ITEM,      /* parent[index] (tuple/list) */
    SRC_DICT,      /* parent[key] (dict, exact key); index > 0: key is an object
                      hashed by identity (a tensor), fetched by source index - 1 */
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
    TG_EMPTY,      /* src is None or an empty dict */
    TG_VALUE,      /* src == obj, same exact type (torch.device) */
    TG_HAS_KEY,    /* (obj in src) == n: a key of a dict or mapping */
    TG_KEYS,       /* src is a dict whose keys, in its iteration order, are the tuple obj */
    TG_SAME,       /* src holds the object source n holds (identity) */
    TG_NOT_SAME    /* src does not hold the object source n holds */
} tr_guard_kind;

typedef struct tr_guard {
    uint8_t kind;
    int32_t src;
    PyObject *obj;         /* strong ref */
    Py_ssize_t n;
} tr_guard;

/* How the return value is rebuilt from graph outputs.
 *   TO_INPUT  the tensor object of graph input `index` itself (eager
 *             returned its argument, maybe after updating it in place)
 *   TO_VIEW   a view of graph input `index`: obj is (size, stride, offset),
 *             offset in elements from the input's own storage offset
 *   TO_SOURCE the object of source `index` itself (a list, tuple or dict
 *             passed in and returned unchanged), as the guard check
 *             fetched it: `node` is its guard tree node (set by whoever
 *             builds the tree)
 *   TO_OUTVIEW a view of graph output `index` (obj as for TO_VIEW): a
 *             tensor that shares memory with other results as in eager
 *             (y and y[0], or two values of one node)
 *   TO_NULL   no object (an unbound variable, the NULL CPython pushes
 *             before a call) in a partial trace's frame state
 *   TO_BOUND  attribute obj (a str: getattr) or method obj (a function:
 *             bound with types.MethodType) of child `first`'s object
 *   TO_INT    the Python int of graph output `index`, a 0-d int64 tensor
 *             (a symbolic size returned: its value per call) */
typedef enum tr_out_kind { TO_TENSOR, TO_CONST, TO_TUPLE, TO_LIST, TO_DICT, TO_OBJ, TO_INPUT, TO_VIEW,
                           TO_SOURCE, TO_NULL, TO_BOUND, TO_OUTVIEW, TO_INT } tr_out_kind;

typedef struct tr_out {
    uint8_t kind;
    int32_t index;         /* TO_TENSOR: graph output number; TO_INPUT/TO_VIEW: graph input number;
                              TO_SOURCE: source number */
    int32_t node;          /* TO_SOURCE: guard tree node of that source; TO_VIEW / TO_OUTVIEW: the
                              graph node the view is of (its sizes, for symbolic ones) */
    PyObject *obj;         /* TO_CONST value / TO_DICT keys tuple / TO_TUPLE type
                              to build (NULL: tuple) / TO_OBJ instance spec for
                              tracer_build_instance (strong) */
    int32_t first, n;      /* containers: children out[first .. first+n) */
} tr_out;

/* What the traced code did to objects from outside, replayed after its
 * graph runs (and before the value or the frame state is built):
 *   EF_CONTENTS  the list or dict built by slot `val` replaces the contents
 *                of the object built by slot `target` (a TO_SOURCE):
 *                list[:] = new, dict.clear(); dict.update(new)
 *   EF_ATTR      setattr(target's object, name, value of slot val), or
 *                delattr when val is -1
 *   EF_GLOBAL    the call's globals[name] = value of slot val (target -1)
 *   EF_CELL      the closure cell built by slot `target` (or, target -1,
 *                cell `index` of the called function's closure) takes
 *                the value of slot val (name: the variable's, for explain) */
typedef enum tr_effect_kind { EF_CONTENTS, EF_ATTR, EF_GLOBAL, EF_CELL } tr_effect_kind;

typedef struct tr_effect {
    uint8_t kind;
    int32_t target, val;   /* output plan slots */
    int32_t index;         /* EF_CELL with target -1 */
    PyObject *name;        /* EF_ATTR / EF_GLOBAL / EF_CELL (strong) */
} tr_effect;

/* Dynamic shapes (tracer/dynamic.c). A trace with symbols: some sizes of
 * its tensor inputs are symbols (sym.h), and every size the trace derives
 * from them is an expression of them. The graph itself is the one for the
 * sizes it was traced with (the hints); what varies is recorded beside it:
 *   dims[node][d]  the expression of graph node `node`'s size d, -1 when
 *                  constant (the node's shape says which); inputs' dims are
 *                  symbols
 *   attrs          node attributes that are expressions: a RESHAPE, EXPAND,
 *                  FULL, IOTA or ARANGE node's size d (SA_SHAPE), a SLICE's
 *                  start or end (SA_START, SA_END), an int SCALAR's value
 *                  (SA_SCALAR: a symbolic size used as a number), a
 *                  CHECKIDX's bound (SA_BOUND)
 *   rels           what the trace relied on about the symbols (a branch on
 *                  a size, two sizes that met in one op, a size used as a
 *                  plain int): checked per call with the guards
 * tracer_dyn_graph rebuilds the graph for other values of the symbols. */
typedef enum tr_dyn_mode {
    TR_DYN_OFF,    /* every size static (dynamic=False, or a retry after a failed symbolic trace) */
    TR_DYN_AUTO,   /* a size becomes a symbol when it changed since an earlier trace (the site's `seen`) */
    TR_DYN_ALL     /* every size of a tensor argument is a symbol (dynamic=True) */
} tr_dyn_mode;

typedef enum sym_attr_field { SA_SHAPE, SA_START, SA_END, SA_SCALAR, SA_BOUND } sym_attr_field;

typedef struct sym_attr {
    int32_t node;
    uint8_t field, d;
    int32_t expr;
} sym_attr;

typedef struct tr_dyn {
    sym_table t;
    int64_t hint[SYM_MAX_VARS];    /* symbol k's value in the traced call */
    int32_t var_input[SYM_MAX_VARS], var_dim[SYM_MAX_VARS];   /* where a call's value of symbol k is read */
    int32_t (*dims)[SMELT_MAX_DIMS]; int32_t ndims, cdims;
    sym_rel *rels; int32_t nrels, crels;
    sym_attr *attrs; int32_t nattrs, cattrs;
    int failed;                    /* the trace broke on something symbols do not cover yet: trace it static */
} tr_dyn;

/* A trace either follows the whole call (a whole trace: outs[0] builds
 * the return value) or stops before an instruction of the traced
 * function's own frame that it cannot trace (a partial trace: stop_pc >=
 * 0). Then outs[0] is a tuple of the frame's state there: its nslots
 * variables (co_nlocalsplus slots; a cell variable's contents, free
 * variables TO_NULL) and its nstack stack values, bottom first; the
 * caller runs that instruction eagerly and resumes the frame after it. */
typedef struct tr_result {
    smelt_graph *graph;
    tr_src *srcs; int32_t nsrcs;
    int32_t *input_src;    /* graph input k comes from srcs[input_src[k]] (a Python float
                              there, guarded by type: a 0-d float64 tensor made per run) */
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
    tr_effect *effects;    /* side effects on objects from outside, in order */
    int32_t neffects;
    int32_t stop_pc;       /* partial trace: the instruction it stopped before (-1: whole trace) */
    int grad_free;         /* inputs require grad, grad mode is on, but everything the trace
                              computed it computed with grad turned off by the traced code (an
                              optimizer step, an EMA update under no_grad): the entry runs as a
                              no_grad region, with no backward */
    int32_t nslots, nstack;   /* partial trace: the frame state's variables and stack depth */
    PyObject *kwnames;     /* partial trace: KW_NAMES pending at stop_pc (strong), or NULL */
    tr_dyn *dyn;           /* sizes that are symbols (PyMem), or NULL: every size static */
    int device;            /* the graph's tensors: -1 on the CPU, n on CUDA device n (compiled by the
                              cuda back end) */
    int autocast;          /* the trace started under CPU autocast: its enabled state and dtype are
                              guarded (guard_add_autocast_state) */
} tr_result;

/* Where a trace starts: the bound parameters of a call (pc 0), or a frame
 * state at instruction pc (a continuation after a partial trace's break:
 * slots as in tr_result, the stack, the pending KW_NAMES). NULL entries
 * are unbound variables / NULL stack entries. Borrowed. */
typedef struct tr_start {
    PyObject *const *slots;   /* pc 0: the parameters; else co_nlocalsplus variables */
    int nslots;
    PyObject *const *stack;
    int nstack;
    PyObject *kwnames;
    int pc;
    int dyn_mode;             /* tr_dyn_mode */
    PyObject *seen;           /* TR_DYN_AUTO: dict, a tensor input's source key -> its sizes when
                                 first traced (None where it has changed since); updated by the trace */
} tr_start;

/* A TO_OBJ result: an instance of a plain Python class made by the traced
 * code, rebuilt from spec (its out's obj) and vals, the tuple of its
 * children's values (the distinct values of its attributes and items),
 * without running any of the class's Python code. New reference, or NULL
 * with an error set. */
PyObject *tracer_build_instance(PyObject *spec, PyObject *vals);

/* Traces fn called with the top frame's fast locals `locals` (nlocals
 * entries, as CPython lays them out: arguments first). 0 on success (a
 * whole trace); 2 for a partial trace (a break in the top frame at an
 * instruction the frame can be resumed after: reason filled with the
 * break, stop_pc >= 0); 1 on a graph break that leaves the whole frame
 * to eager (reason filled, no Python error); -1 with a Python error set. */
int tracer_trace(PyObject *fn, PyObject *const *locals, Py_ssize_t nlocals, tr_result *out);

/* tracer_trace from st (a call's parameters, or a continuation). Sources
 * of a continuation: variable i is local i, stack entry j local
 * nslots + j, free variable k the closure cell k (as for pc 0). */
int tracer_trace_from(PyObject *fn, const tr_start *st, tr_result *out);
void tracer_result_clear(tr_result *r);

/* After the guard tree is built from r: drops what only tracing and
 * building needed (the guards' example objects, the objects kept alive
 * for the trace), so that an entry keeps no user tensor or global alive.
 * What the entry still reads (source keys, host call templates, output
 * constants) stays. 0, or -1 with an exception. */
int tracer_result_trim(tr_result *r);

/* Per graph input of r (so far), 1 if its tensor (the guarded example)
 * requires grad, 0 for a float input: PyMem_Calloc'ed (ninputs + 1
 * bytes, the caller frees), or NULL with an exception. Read before
 * tracer_result_trim. */
uint8_t *tracer_inputs_requiring_grad(const tr_result *r);

/* The (size, stride, offset) of view result o (TO_VIEW / TO_OUTVIEW) of r
 * over graph g, r's graph rebuilt for other sizes: its chain of view ops
 * walked again from its base, whose strides are in_strides[input] (a view
 * of a graph input) or those of the graph output it is laid out in
 * (contiguous, through the PERMUTE that lays it out, if any). A new
 * reference; NULL without an exception where the geometry does not follow
 * from the graph (a view a host call made). */
PyObject *tracer_view_spec(const tr_result *r, const smelt_graph *g, int32_t o,
                           const int64_t (*in_strides)[SMELT_MAX_DIMS]);

/* The graph of r (a trace with symbols) for symbol values vals: every
 * node rebuilt with its attribute expressions evaluated, graph input k
 * given sizes from its dims and strides strides[k]; each node's sizes are
 * checked against their expressions. NULL with err when these values do
 * not make a valid graph (a new trace then decides). */
smelt_graph *tracer_dyn_graph(const tr_result *r, const int64_t *vals, const int64_t (*strides)[SMELT_MAX_DIMS],
                              char *err, size_t errlen);
/* Symbol values of a call from its graph inputs' sizes (sizes[k] of input
 * k), checked: every input dim that is symbol k agrees, and the relations
 * hold. 1 with vals filled, 0 when they do not hold (why: the first that
 * failed), -1 never. */
int tracer_dyn_values(const tr_result *r, const int64_t (*sizes)[SMELT_MAX_DIMS], int64_t *vals, char *why,
                      size_t whylen);
/* The rels and symbol sources of r as text, one a line (logs). malloc'd. */
char *tracer_dyn_describe(const tr_result *r);
void tracer_dyn_free(tr_dyn *d);

/* ---------- around a partial trace's break (resume.c) ---------- */

/* One instruction of a code object: start (its first code unit, EXTENDED_ARG
 * prefixes included), at (the opcode's unit), op (the tracer's opcode
 * number), arg, next (the code unit after its inline caches). */
typedef struct tr_insn {
    int start, at, op, arg, next;
} tr_insn;

/* A frame's state: slots[0..nslots) its variables (co_nlocalsplus; cell
 * and free variables as their contents), slots[nslots .. nslots + sp) its
 * value stack, bottom first; strong references, NULL for an unbound
 * variable or a NULL stack entry; room for co_stacksize stack entries. */
typedef struct tr_fstate {
    PyObject **slots;
    int nslots, sp;
    PyObject *kwnames;     /* KW_NAMES pending for the next CALL (borrowed), or NULL */
    int pc;                /* the instruction to run next (its start) */
} tr_fstate;

/* 1 if co's frame can stop before its instruction starting at code unit
 * `at` and resume after it: an instruction starts there, no exception
 * handler covers it, no loop contains it. */
int tr_resumable(PyCodeObject *co, int at);

/* The instruction starting at code unit pc: 1 with *out, 0 none, -1 error. */
int tracer_insn_at(PyCodeObject *co, int pc, tr_insn *out);

/* Where CPython must restart fn's frame to run its instruction at pc:
 * pc itself, or the PRECALL/KW_NAMES that prepare a CALL there (CPython
 * keeps KW_NAMES's names outside the frame). */
int tracer_resume_pc(PyCodeObject *co, int pc);

/* Runs fn's instruction i (at st->pc) eagerly on frame state st: 1 done,
 * st->pc the next instruction (a jump's target); 0 when i is not a kind
 * this runs (calls, conditional jumps, operators, comparisons, subscripts,
 * attribute/item/global stores, f-string formatting, unpacking) — then
 * the real frame must run it; -1 with the exception it raised. Calls run
 * with whatever frame hook the caller has set. */
int tracer_step(PyObject *fn, const tr_insn *i, tr_fstate *st);

/* Module-level set-up: opcode tables, torch callables. 0 or -1 (error set). */
int tracer_init(void);

#endif
