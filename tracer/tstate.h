/* tstate.h — tracer internals shared by interp.c (bytecode, frames,
 * values, guards), builtins.c (Python builtins, container methods,
 * iteration) and ops.c (torch calls). Not part of any external contract. */
#ifndef SMELT_TSTATE_H
#define SMELT_TSTATE_H

#include "trace.h"
#include "hostcall.h"
#include "../guards/pycompat.h"


/* ---------- bytecode (interp.c's tables, shared with resume.c) ---------- */

/* Where one opcode differs between the versions:
 *   CMP_OF(arg)       COMPARE_OP's comparison (Py_LT..Py_GE): the whole
 *                     argument in 3.11; 3.12 keeps a cache mask in the low
 *                     4 bits; 3.13 also a flag in bit 4 (CMP_BOOL).
 *   CMP_BOOL(arg)     the comparison's result is converted to bool (3.13,
 *                     `if a < b`: no TO_BOOL follows); always 0 before.
 *   ATTR_NAME(arg), ATTR_METHOD(arg)   LOAD_ATTR's name index and method
 *                     flag: 3.12 folds LOAD_METHOD into LOAD_ATTR's low
 *                     bit (3.11: the whole argument, never a method load).
 *   FOR_EXIT_SKIP     code units skipped after an exhausted FOR_ITER's
 *                     target: 3.12 jumps onto an END_FOR that it never
 *                     runs (the iterator is popped by FOR_ITER itself);
 *                     3.13 over END_FOR and the POP_TOP after it.
 *   END_FOR_POPS      values END_FOR pops (3.12: two, it is POP_TOP
 *                     twice; 3.13: one, a POP_TOP follows it).
 *   SEND_POPS_RECEIVER  an exhausted SEND pops its receiver itself (3.11);
 *                     3.12 leaves it for the END_SEND at the target.
 *   NULL_FIRST        the order of the two values under a CALL's
 *                     arguments when the callable has no self: 3.11 and
 *                     3.12 [NULL, callable] (LOAD_GLOBAL, LOAD_ATTR and
 *                     LOAD_SUPER_ATTR with their method/NULL bit push the
 *                     NULL first, PUSH_NULL comes before the callable);
 *                     3.13 [callable, NULL] (pushed after it). A method
 *                     is [method, self] in all. CALL_FUNCTION_EX's
 *                     callable and NULL are in the same order. */
#if PY_VERSION_HEX >= 0x030d0000
#define CMP_OF(arg) ((arg) >> 5)
#define CMP_BOOL(arg) (((arg) >> 4) & 1)
#define FOR_EXIT_SKIP 2
#define END_FOR_POPS 1
#define NULL_FIRST 0
#elif PY_VERSION_HEX >= 0x030c0000
#define CMP_OF(arg) ((arg) >> 4)
#define CMP_BOOL(arg) 0
#define FOR_EXIT_SKIP 1
#define END_FOR_POPS 2
#define NULL_FIRST 1
#else
#define CMP_OF(arg) (arg)
#define CMP_BOOL(arg) 0
#define FOR_EXIT_SKIP 0
#define END_FOR_POPS 2
#define NULL_FIRST 1
#endif
#if PY_VERSION_HEX >= 0x030c0000
#define ATTR_NAME(arg) ((arg) >> 1)
#define ATTR_METHOD(arg) ((arg) & 1)
#define SEND_POPS_RECEIVER 0
#else
#define ATTR_NAME(arg) (arg)
#define ATTR_METHOD(arg) 0
#define SEND_POPS_RECEIVER 1
#endif

#define OPNAMES(X) \
    X(CACHE) X(NOP) X(RESUME) X(PRECALL) X(PUSH_NULL) X(POP_TOP) X(COPY) X(SWAP) \
    X(LOAD_CONST) X(LOAD_FAST) X(STORE_FAST) X(DELETE_FAST) X(LOAD_GLOBAL) X(LOAD_ATTR) \
    X(LOAD_METHOD) X(LOAD_DEREF) X(STORE_DEREF) X(MAKE_CELL) X(COPY_FREE_VARS) X(KW_NAMES) \
    X(CALL) X(CALL_FUNCTION_EX) X(BINARY_OP) X(COMPARE_OP) X(IS_OP) X(CONTAINS_OP) \
    X(UNARY_NEGATIVE) X(UNARY_NOT) X(UNARY_POSITIVE) X(UNARY_INVERT) X(BINARY_SUBSCR) \
    X(BUILD_TUPLE) X(BUILD_LIST) X(BUILD_MAP) X(BUILD_CONST_KEY_MAP) X(BUILD_SLICE) \
    X(LIST_APPEND) X(LIST_EXTEND) X(LIST_TO_TUPLE) X(DICT_MERGE) X(DICT_UPDATE) X(MAP_ADD) \
    X(UNPACK_SEQUENCE) X(GET_ITER) X(FOR_ITER) X(JUMP_FORWARD) X(JUMP_BACKWARD) \
    X(JUMP_BACKWARD_NO_INTERRUPT) X(POP_JUMP_FORWARD_IF_FALSE) X(POP_JUMP_FORWARD_IF_TRUE) \
    X(POP_JUMP_FORWARD_IF_NONE) X(POP_JUMP_FORWARD_IF_NOT_NONE) X(POP_JUMP_BACKWARD_IF_FALSE) \
    X(POP_JUMP_BACKWARD_IF_TRUE) X(POP_JUMP_BACKWARD_IF_NONE) X(POP_JUMP_BACKWARD_IF_NOT_NONE) \
    X(JUMP_IF_FALSE_OR_POP) X(JUMP_IF_TRUE_OR_POP) X(RETURN_VALUE) X(FORMAT_VALUE) \
    X(BUILD_STRING) X(EXTENDED_ARG) X(GET_LEN) X(LOAD_CLOSURE) X(MAKE_FUNCTION) \
    X(RETURN_GENERATOR) X(YIELD_VALUE) X(BEFORE_WITH) X(UNPACK_EX) X(STORE_SUBSCR) \
    X(DELETE_SUBSCR) X(BUILD_SET) X(SET_ADD) X(SET_UPDATE) X(IMPORT_NAME) X(IMPORT_FROM) \
    X(SEND) X(GET_YIELD_FROM_ITER) X(STORE_ATTR) X(DELETE_ATTR) X(PUSH_EXC_INFO) X(POP_EXCEPT) \
    X(CHECK_EXC_MATCH) X(RERAISE) X(RAISE_VARARGS) X(LOAD_ASSERTION_ERROR) X(STORE_GLOBAL) X(DELETE_GLOBAL) \
    X(WITH_EXCEPT_START) X(MATCH_SEQUENCE) X(MATCH_MAPPING) X(MATCH_KEYS) X(MATCH_CLASS) X(LOAD_BUILD_CLASS) \
    /* 3.12 on */ \
    X(POP_JUMP_IF_FALSE) X(POP_JUMP_IF_TRUE) X(POP_JUMP_IF_NONE) X(POP_JUMP_IF_NOT_NONE) \
    X(BINARY_SLICE) X(STORE_SLICE) X(END_FOR) X(END_SEND) X(RETURN_CONST) X(LOAD_FAST_CHECK) \
    X(LOAD_FAST_AND_CLEAR) X(LOAD_SUPER_ATTR) X(CALL_INTRINSIC_1) \
    /* 3.13 on */ \
    X(CALL_KW) X(TO_BOOL) X(LOAD_FAST_LOAD_FAST) X(STORE_FAST_LOAD_FAST) X(STORE_FAST_STORE_FAST) \
    X(FORMAT_SIMPLE) X(FORMAT_WITH_SPEC) X(CONVERT_VALUE) X(SET_FUNCTION_ATTRIBUTE)

enum {
#define X(n) OP_##n,
    OPNAMES(X)
#undef X
    OP_UNKNOWN
};

/* co_localspluskinds bits (Include/internal/pycore_code.h, the same in
 * 3.11 to 3.13): the slot holds a cell (a cell variable) / is a free
 * variable. */
#define TR_FAST_CELL 0x40
#define TR_FAST_FREE 0x80

extern uint8_t tr_op_of[256];      /* CPython opcode -> OP_* */
extern uint8_t tr_ncache[256];     /* inline cache entries after the opcode */
extern char tr_opname_all[256][40];   /* every CPython opcode's name */

/* Symbolic value kinds. Values live in the tracer's arena, by index.
 *   V_NULL    the NULL CPython pushes before some calls
 *   V_TENSOR  graph node `node`; in-place ops rebind `node`, so every alias
 *             (the same value id in locals, lists, closures) sees the update;
 *             `obj` the exact type of a graph input (NULL: torch.Tensor);
 *             pos: 1 + its graph output number once returned (0: not yet)
 *   V_OBJ     a Python object known at trace time (`obj`, borrowed from
 *             keep-alive), fetched from `src` (-1: computed or trusted);
 *             a super() object has the bound self in self_; a set made by
 *             the traced code (mutable) has pos 1
 *   V_TUPLE / V_LIST   items[0..n); a V_TUPLE with `obj` set is built as
 *             obj(tuple) on return (torch.Size, torch.return_types.max, ...)
 *   V_DICT    keys[i] -> items[i], in insertion order
 *   V_BOUND   method `obj` (a function) or a method named `obj` (str) of a
 *             tensor, list or dict, bound to value `self_`
 *   V_ITER    iterator, by `sub` (it_kind); `done` once exhausted
 *   V_SLICE   sl[0..2]: start, stop, step values (-1 = None)
 *   V_FUNC    function made by MAKE_FUNCTION in traced code: code `obj`,
 *             globals `aux`, closure cells items[0..n), sl[0] defaults tuple
 *             and sl[1] keyword-defaults dict (-1: none), self_ the source
 *             of the function whose code made it (its globals' guard root),
 *             pos 1 when that code is torch's own (globals unguarded)
 *   V_CELL    closure cell: contents self_ (-1: empty)
 *   V_INST    instance of plain Python class `obj` made in the traced code
 *             (objects.c): self_ a V_DICT of its attributes (its __dict__),
 *             sl[0] a V_DICT of its items for dict-based classes (-1: none),
 *             aux its C base type (object, dict, OrderedDict), pos the
 *             class's source (-1: none). sub (inst_kind) says what else it
 *             may be: INST_SUPER super(obj, self_) for an instance self_
 *             (attribute lookups only); INST_PARTIAL functools.partial
 *             (obj) made here: self_ the function, sl[0] a V_TUPLE of its
 *             arguments, sl[1] a V_DICT of its keywords; INST_SET a set or
 *             frozenset (obj) made here: aux its real set of keys, self_ its
 *             identity table (sets.c).
 *   V_SYM     an int that is a symbolic size (dynamic.c): expression `node`
 *             of the trace's symbols, `obj` its value in the traced call (an
 *             int, kept alive by the trace); tr_const and everything built on
 *             it use it as that constant, guarded equal (dyn_specialize) */
typedef enum tv_kind {
    V_NULL, V_TENSOR, V_OBJ, V_TUPLE, V_LIST, V_DICT, V_BOUND, V_ITER, V_SLICE, V_FUNC, V_CELL, V_INST, V_SYM
} tv_kind;

/* V_INST kinds (the value's sub). */
typedef enum inst_kind { INST_PLAIN, INST_SUPER, INST_PARTIAL, INST_SET } inst_kind;

/* V_ITER kinds.
 *   IT_SEQ     over container self_ (live: a list appended to while iterated
 *              yields the new items, as in Python), next index pos
 *   IT_GEN     a suspended generator frame (`frame`, owned by the value)
 *   IT_ZIP     items[0..n) iterators, advanced in order
 *   IT_ENUM    items[0] iterator, pos the next count
 *   IT_MAP     self_ the function, items[0..n) iterators
 *   IT_FILTER  self_ the predicate (-1: truth), items[0] iterator
 *   IT_CHAIN   self_ an iterator over the iterables, items[0] the current
 *              one's iterator (n 0: none yet)
 *   IT_ISLICE  items[0] iterator, pos how many items it gave, sl[0] the
 *              next index to yield, sl[1] the stop (-1: none), sl[2] the step */
typedef enum it_kind { IT_SEQ, IT_GEN, IT_ZIP, IT_ENUM, IT_MAP, IT_FILTER, IT_CHAIN, IT_ISLICE } it_kind;

typedef struct tv {
    uint8_t kind;
    uint8_t sub;           /* V_ITER: it_kind */
    uint8_t done;          /* V_ITER: exhausted; V_LIST, V_DICT, V_INST: part of the result */
    uint8_t frozen;        /* no in-place updates: V_TENSOR that may alias storage smelt does not
                              model; V_LIST/V_DICT wrapping an existing object; a read-only V_CELL */
    int32_t node;
    PyObject *obj;
    PyObject *aux;         /* V_FUNC: globals (borrowed) */
    void *frame;           /* V_ITER IT_GEN: the generator's frame (owned) */
    int32_t src;
    int32_t *items;
    PyObject **keys;
    int32_t n, cap;
    int32_t self_, pos;
    int32_t sl[3];
    int32_t mut;           /* V_TENSOR: 1 + the graph input it was before an in-place update */
} tv;

/* An attribute of an object from outside the trace that the traced code
 * assigned (val, -1 when deleted); owner: a value holding the object. */
struct tr_cellw {
    PyObject *cell, *name; /* borrowed (the function's closure keeps it; name: its code's) */
    int32_t val, src;      /* src: a source of the cell object itself, -1: cell `index` of the traced function */
    int32_t index;
};

struct tr_attrw {
    PyObject *obj, *name;  /* borrowed (kept alive by the trace) */
    int32_t val, owner;
};

typedef struct tracer {
    smelt_graph *g;
    tv *vals; int32_t nvals, cvals;   /* vals[-1] is a V_NULL sentinel (an absent argument) */
    tr_result *r;
    int32_t csrcs, cguards, cinputs, couts;
    PyObject *tensor_of;   /* dict: id(tensor) -> value id of its graph input */
    int32_t *muts; int32_t nmuts, cmuts;   /* values of inputs updated in place */
    uint8_t *contig;       /* per graph node: 1 when eager's value is known contiguous (made by
                              x.contiguous(), or pooling of a contiguous input: native.c), 2
                              when known channels-last (pooling or cat of channels-last inputs) */
    int32_t ccontig;
    struct tr_layout {     /* a host call result eager lays out other than contiguously
                              (LAPACK's column-major, ...) or returns as a view of an argument:
                              its meta run's strides (the run had the sources' eager strides when
                              `faithful`, else contiguous ones) and, for a view, the graph node
                              of the argument (vsrc, else -1) and the storage offset in it */
        int32_t node, vsrc;
        uint8_t faithful;
        int64_t st[SMELT_MAX_DIMS], voff;
    } *lays;
    int32_t nlays, clays;
    /* eager_strides' table (ops.c): nodes [0, st_upto) done; a node marked
     * contiguous after the fact (tr_mark_contig) moves st_upto back */
    uint8_t *st_known;
    int64_t (*st_tab)[SMELT_MAX_DIMS];
    int32_t st_upto, st_cap;
    PyObject *globals, *builtins;   /* of the top frame */
    struct tframe *frame;  /* the innermost running frame */
    int depth;
    int broke;             /* a graph break reason is set */
    struct tr_attrw *attrw;   /* attribute writes to outside objects (objects.c) */
    struct tr_cellw *cellw; int32_t ncellw;   /* writes to closure cells of functions from outside */
    int32_t nviewupd;      /* updates through shared storage so far (ops.c view_update) */
    int32_t nattrw;
    PyObject *containers;  /* dict: id(list or dict from a source) -> its value id (one value per object) */
    int32_t *dirty;        /* lists and dicts from outside the traced code mutated (replayed) */
    int32_t ndirty, cdirty;
    PyObject *globalw;     /* dict: name -> value id of globals the top frame's code assigned, or NULL */
    int no_grad;           /* grad mode set by the traced code (objects.c): 0 as outside the trace
                              (guarded), 1 off, -1 on */
    int grad_on;           /* grad was turned on in the trace: no input may require grad */
    int32_t *ngr;          /* graph nodes [ngr[2i], ngr[2i+1]) were made with grad turned off by the
                              traced code (tr_grad_mode; an open last region ends at the graph's end) */
    int32_t nngr, cngr;    /* entries of ngr used (2 per region), allocated */
    int32_t grad_nodes;    /* computing nodes made while the trace's grad mode was not turned
                              off by the traced code (objects.c grad_finish: none at all, and
                              the whole entry runs as a no_grad region) */
    const char *grad_sensitive;   /* what the trace did that the graph does not carry to a
                                     compiled backward (detach, a no_grad region, ...), or NULL:
                                     with inputs that require grad in grad mode it breaks */
    PyObject *exc;         /* the exception being raised in the trace (owned), or NULL */
    int32_t handled;       /* value of the exception being handled (except blocks), -1: none */
    uint8_t *sharers;      /* output plan, per graph node: output tensors that are it or views of it (max 2) */
    int32_t *base_out;     /* output plan, per graph node: its graph output number (-1: none yet) */
    int stop_at;           /* the top frame stops before its instruction at this code unit (-1: never) */
    int stopped;           /* it did: the trace ends with the frame's state (a partial graph) */
    int break_at;          /* the top frame's instruction running at the first break (-1: none) */
    /* dynamic shapes (dynamic.c) */
    int dyn_mode;          /* tr_dyn_mode */
    PyObject *dyn_seen;    /* TR_DYN_AUTO: tr_start's seen (borrowed) */
    int dyn_pend;          /* expressions handed over for the next node: 0 none, 1 its sizes, 2 slice
                              bounds, 3 a CHECKIDX's bound (dyn_pend_start) */
    int32_t dyn_pend_ex[SMELT_MAX_DIMS];   /* 1: per size an expression, -1 a constant, -2 a reshape's -1 */
    int32_t dyn_pend_start, dyn_pend_end;  /* 2: expressions of the bounds (-1: the attribute's constant) */
    int device;            /* where the graph's tensors are: -2 none met yet, -1 the CPU, n CUDA device n
                              (tr_device: one device per graph) */
    PyObject *device_obj;  /* CUDA: that torch.device (held by r->keep) */
    int nfloat_inputs;     /* Python floats read as inputs (tr_float_input: made on the CPU each run) */
    int ac_on, ac_dtype;   /* CPU autocast in the trace (objects.c): on, and its smelt dtype (F16/BF16);
                              starts as outside the trace (guarded), changed by `with torch.autocast` */
    int ac_host_ok;        /* in a call whose arguments autocast cast (ops.c dispatch): host calls allowed */
} tracer;

/* interp.c: a tensor on `dev` (-1 the CPU, n CUDA device n; obj its
 * torch.device, may be NULL) joins the graph: 0, or -1 with a break when
 * the graph's tensors are elsewhere or CUDA cannot run here. */
int tr_device(tracer *T, int dev, PyObject *obj);
/* interp.c: the device torch.device(o) names: -1 the CPU, n CUDA device n,
 * -3 another device; -4 on error (exception set). */
int tr_device_of(PyObject *o);

/* BINARY_OP arguments (CPython's NB_* numbering, the same in 3.11 and
 * 3.12; in-place forms are the plain ones + NB_INPLACE). */
enum {
    NB_ADD, NB_AND, NB_FLOOR_DIVIDE, NB_LSHIFT, NB_MATRIX_MULTIPLY, NB_MULTIPLY,
    NB_REMAINDER, NB_OR, NB_POWER, NB_RSHIFT, NB_SUBTRACT, NB_TRUE_DIVIDE, NB_XOR,
    NB_INPLACE
};

/* Arguments of a call: positional values, then keyword names/values. */
typedef struct call_args {
    int32_t *pos; int npos;
    PyObject **kwn; int32_t *kwv; int nkw;
} call_args;

/* interp.c: values, guards, calls (used by builtins.c and ops.c) */
int32_t tv_new(tracer *T, tv_kind k);
int32_t tv_obj(tracer *T, PyObject *o, int32_t src);     /* wraps tensors/containers too */
int32_t tv_tensor(tracer *T, int32_t node);
int32_t tr_float_input(tracer *T, int32_t src);
void tr_grad_mode(tracer *T, int st);   /* T->no_grad = st, noting where no_grad regions start and end */
extern const char tr_no_grad_region[];                    /* grad_sensitive of a no_grad region (objects.c) */           /* a float from src as a 0-d float64 input */
int32_t tv_tuple(tracer *T, const int32_t *items, int n);
int32_t tv_int(tracer *T, int64_t v);                     /* an int constant */
int tv_push_item(tracer *T, int32_t c, int32_t item, PyObject *key);
int tr_break(tracer *T, const char *fmt, ...);           /* sets the reason, returns -1 */
PyObject *tr_const(tracer *T, int32_t v);                 /* concrete object of a V_OBJ (guarded) */
/* tr_const for a use that reads the object's value (len, `in`, items, a
 * call on it at trace time): a break when that value could change while
 * the object stays the same (a mutable object whose contents are not
 * guarded). Borrowed. */
PyObject *tr_value(tracer *T, int32_t v);
PyObject *tr_tensor_obj(tracer *T, int32_t v);           /* a graph input's tensor (borrowed), or NULL */
/* V_OBJ v's class's own Python special method `name` (not torch's)
 * called with v and args[0..n) (n <= 8): its result; -2 when none. */
int32_t tr_user_special(tracer *T, int32_t v, const char *name, const int32_t *args, int n);
/* An instance attribute of graph input v's tensor object (x.tag): its
 * value, or -2 when there is none (guarded when guard_absent). */
int32_t tr_tensor_inst_attr(tracer *T, int32_t v, PyObject *name, int guard_absent);
PyObject *tr_pyobj(tracer *T, int32_t v);                 /* new ref: constants, containers of them */
/* The Python tuple/list/dict of container value v (a V_TUPLE with obj:
 * obj(tuple)), each item made by item(T, item value, ctx). New reference,
 * or NULL (the item's break or error). */
PyObject *tr_build_container(tracer *T, int32_t v, PyObject *(*item)(tracer *, int32_t, void *), void *ctx);
int tr_int(tracer *T, int32_t v, int64_t *out);           /* int constant; -1 (break) if not */
int tr_truth(tracer *T, int32_t v, int *out);
int32_t tr_call(tracer *T, int32_t fn, const call_args *a);
int32_t tr_binop(tracer *T, int nb, int32_t a, int32_t b);
int32_t tr_compare(tracer *T, int cmp, int32_t a, int32_t b);
int32_t tr_subscr(tracer *T, int32_t c, int32_t k);
int32_t tr_load_attr(tracer *T, int32_t v, PyObject *name);
int32_t tr_module_attr(tracer *T, int32_t mv, PyObject *name, int missing_ok);  /* -2: missing */
int tr_add_guard(tracer *T, tr_guard_kind k, int32_t src, PyObject *obj, Py_ssize_t n);
int32_t tr_src_new(tracer *T, tr_src_kind k, int32_t parent, Py_ssize_t index, PyObject *key);
int tr_keep(tracer *T, PyObject *o);                      /* keep o alive for the result */
int32_t tr_node_add(tracer *T, const smelt_node *proto);  /* graph node or -1 (break) */
int tr_is_module(PyObject *o);
/* Container value c is about to be mutated: 0 when allowed (one made in
 * the trace, or a list/dict from a source, whose final contents are then
 * written back after the graph runs), -1 with a break (`what` names the
 * operation) otherwise. */
int tr_mutable(tracer *T, int32_t c, const char *what);
int32_t tr_live(tracer *T, int32_t v);
int tr_is_module_class(PyObject *cls);                    /* cls is nn.Module or a subclass */
int32_t tr_dict_value(tracer *T, int32_t v);              /* a V_DICT for a dict value (guarded) */
int tr_guard_absent(tracer *T, int32_t v, PyObject *name);   /* attribute `name` of object v stays missing */
int tr_gen_next(tracer *T, int32_t it, int32_t *out);     /* generator: 1 yielded, 0 done, -1 */
int tr_aliased(tracer *T, int32_t x);
uint8_t *tr_live_mask(tracer *T);
PyObject *tr_strided(void);         /* torch.strided (borrowed) */   /* PyMem: 1 per value the trace can still reach; NULL + error */
/* x, a graph input, will be updated in place (written back after each
 * run): 1, 0 (a break: it requires grad under grad mode) or -1. */
/* Whether graph input node `node`'s tensor requires grad with grad mode on
 * in the trace: 1 / 0, -2 when its tensor is not known, -1 on error. */
int tr_input_grad(tracer *T, int32_t node);
int tr_mutate_input(tracer *T, int32_t x);   /* a live value other than x views or shares x's node */

/* dynamic.c: symbolic sizes (see trace.h tr_dyn and the file's comment) */
/* Which sizes of tensor input t (source src, nd dims of sizes shape)
 * are symbols: *mask. 0, or -1 with an error. */
int dyn_input(tracer *T, PyObject *t, int32_t src, int nd, const int64_t *shape, uint32_t *mask);
/* Graph input node's sizes in mask become symbols. 0 or -1. */
int dyn_input_node(tracer *T, int32_t node, uint32_t mask);
/* Sizes of node id (just added) as expressions; consumes what was handed
 * over. 0, or -1 (a break: the symbolic trace fails). */
int dyn_node(tracer *T, int32_t id);
/* The value of node's size d: a V_SYM when it is symbolic, else an int. */
int32_t dyn_dim(tracer *T, int32_t node, int d);
/* V_SYM v (anything else: nothing) becomes the constant it was traced as,
 * guarded. 0 or -1. */
int dyn_specialize(tracer *T, int32_t v);
/* An int value or V_SYM: its traced value and expression (-1: constant). */
int dyn_int_ex(tracer *T, int32_t v, int64_t *val, int32_t *ex);
/* Python arithmetic and comparisons with a V_SYM operand: the result
 * (a V_SYM, an int or a bool, the outcome guarded), -2 when neither
 * operand is one or the operation is not symbolic (operands then
 * specialised), -1 on a break. */
int32_t dyn_binop(tracer *T, int nb, int32_t a, int32_t b);
int32_t dyn_compare(tracer *T, int cmp, int32_t a, int32_t b);
int dyn_truth(tracer *T, int32_t v, int *out);
/* arange's length ceil((end - start) / step) for an end expression. */
int32_t dyn_arange_len(tracer *T, int32_t end, int64_t start, int64_t step);
/* Hand expressions to the next node: its sizes (per dim: expression, -1
 * constant, -2 a reshape's -1), or a slice's bounds (-1: constant). */
void dyn_pend_shape(tracer *T, const int32_t *ex, int n);
void dyn_pend_slice(tracer *T, int32_t start, int32_t end);
/* A CHECKIDX's bound: the expression of value v (an int or V_SYM). */
void dyn_pend_bound(tracer *T, int32_t v);
/* A V_SYM of expression ex with traced value v (an int when ex is -1 or
 * constant). */
int32_t dyn_value(tracer *T, int32_t ex, int64_t v);
/* Hand node's sizes [first, first + n) to the next node (a FULL/IOTA/
 * EXPAND shaped like part of node). */
void dyn_pend_dims(tracer *T, int32_t node, int first, int n);
/* SCALAR node id's int value is expression ex. 0 or -1. */
int dyn_scalar(tracer *T, int32_t id, int32_t ex);
/* x[..., i] along node's dim d (i's expression ix, -1: constant iv as
 * written, negative from the end): the one-element slice's bounds handed
 * to the SLICE node when the dim or i is symbolic, i's range guarded. */
int dyn_pend_index(tracer *T, int32_t node, int d, int32_t ix, int64_t iv);
/* A C handler's decision relied on `ex op c` (Py_LT..Py_GE; ex -1: a
 * constant, nothing to guard): guarded. 0 or -1. */
int dyn_guard(tracer *T, int op, int32_t ex, int64_t c);
/* The expression of node's size d, -1 when it is constant. */
int32_t dyn_dim_ex(tracer *T, int32_t node, int d);
/* A slice along node's dim d with bounds s / e (expressions sx / ex, -1:
 * constant; has_*: given): when the dim or a bound is symbolic, its
 * normalised bounds handed to the SLICE node. 0 or -1. */
int dyn_pend_slice_of(tracer *T, int32_t node, int d, int32_t sx, int64_t s, int has_s, int32_t ex, int64_t e,
                      int has_e);
/* A break that ends a symbolic trace (the call is traced again static). */
int dyn_fail(tracer *T, const char *fmt, ...);

/* builtins.c: Python builtins, operator/math/functools, container methods,
 * iteration */
int bi_init(void);                                         /* 0 or -1 (error set) */
int32_t bi_call(tracer *T, PyObject *fn, const call_args *a);   /* -2: not a known builtin */
int32_t bi_method(tracer *T, int32_t self, PyObject *name, const call_args *a);  /* list/dict/tuple */
int32_t bi_iter(tracer *T, int32_t v);                    /* iter(v) */
int bi_next(tracer *T, int32_t it, int32_t *out);         /* 1 value, 0 exhausted, -1 */
int bi_items(tracer *T, int32_t v, int32_t **items, int *n);   /* a sequence's items (drains iterators) */
PyObject *bi_key(tracer *T, int32_t k);   /* a dict key: a constant or a tuple of them (borrowed, kept) */

/* ops.c */
int ops_init(void);
/* Call of a torch callable (function object) or tensor method (name with
 * self in a->pos[0]). Returns a value id, -1 (break/error), or -2 when fn
 * is no torch op smelt knows (then the caller decides). */
int32_t ops_call_torch(tracer *T, PyObject *fn, const call_args *a);
int ops_default_float(void);   /* torch.get_default_dtype() as a smelt dtype */
int32_t ops_call_method(tracer *T, PyObject *name, const call_args *a);
int32_t ops_arg(const call_args *a, int i, const char *name);   /* argument i or keyword name, -1 if absent */
int32_t ops_tensor_attr(tracer *T, int32_t self, PyObject *name);  /* x.shape etc.; -2 unknown */
int32_t ops_binary(tracer *T, int nb_op, int32_t a, int32_t b);     /* BINARY_OP on tensors */
int32_t ops_compare(tracer *T, int cmp, int32_t a, int32_t b);
int32_t ops_unary(tracer *T, smelt_op op, int32_t a);
int32_t ops_subscr(tracer *T, int32_t x, int32_t index);
int32_t ops_setitem(tracer *T, int32_t x, int32_t index, int32_t value);   /* x[index] = value */
int32_t ops_inplace(tracer *T, int32_t x, int32_t r);   /* x takes r's value: x, or -1 (break) */
int32_t ops_inplace_value(tracer *T, int32_t x, int32_t r);   /* r shaped/cast as x op= would leave it */
int ops_is_tensor(PyObject *o);
PyObject *ops_tensor_type(void);          /* torch.Tensor (borrowed) */
PyObject *ops_size_type(void);            /* torch.Size (borrowed) */
int ops_dtype_of(PyObject *torch_dtype);  /* smelt_dtype, or -1 (no error set) */
/* Graph node x padded along dim with lo and hi (>= 0) elements of value
 * before and after (F.pad's constant mode). Node id, or -1 (break/error). */
int32_t ops_pad_node(tracer *T, int32_t x, int dim, int64_t lo, int64_t hi, double value);
/* 1 / 0: eager lays graph node x out contiguously / does not; -1: unknown. */
int ops_eager_contiguous(tracer *T, int32_t x);
/* Eager's strides of graph node x into out: 1 known, 0 not modelled, -1 error. */
int ops_eager_strides(tracer *T, int32_t x, int64_t *out);
/* Marks graph node x as eager-contiguous (T->contig) and drops what
 * eager_strides derived from its earlier state. */
void tr_mark_contig(tracer *T, int32_t x);
/* Marks node x's eager layout: 1 contiguous, 2 channels-last (4-d/5-d). */
void tr_mark_layout(tracer *T, int32_t x, int layout);
/* Whether strides st lay node n out channels-last (4-d/5-d, dense, not contiguous). */
int tr_channels_last(const smelt_node *n, const int64_t *st);

/* extern.c: host calls (CALL nodes running a torch op at run time; see
 * tracer/hostcall.h) */
/* Whether fn may become a host call: one of torch's own builtins (torch.*,
 * torch._C._nn / _linalg / _special / _fft functions, torch.Tensor method
 * descriptors, torch.ops OpOverload/OpOverloadPacket) that is not in place
 * (name ending in '_', __i*__), draws no random numbers, touches no global
 * state and returns tensors. Never sets a Python error. */
int ext_eligible(PyObject *fn);
/* fn(*a) as a host call; fn must be ext_eligible (or torch.Tensor.__getitem__).
 * Tensor arguments (at any depth of tuples, lists and dict values; at most
 * SMELT_MAX_SRC distinct nodes) become the call's sources, everything else
 * must be a constant (guarded). The results' dtypes and shapes come from
 * shape_infer, or a meta-tensor run for ops it does not cover. Returns a
 * tensor value, or a V_TUPLE/V_LIST of them for tuple/list results (a
 * named tuple's type in obj, as torch.return_types);
 * a result that views an input is frozen, as are the tensor arguments.
 * -2 when no argument is a tensor (nothing was recorded); -1 on a break
 * (the reason names fn) or an error. */
int32_t ext_call(tracer *T, PyObject *fn, const call_args *a);
/* ext_call whose meta run refuses ops that draw random numbers (a custom
 * autograd.Function's apply: its backward host call runs it again). */
int32_t ext_call_unseeded(tracer *T, PyObject *fn, const call_args *a);

/* The tensor sources of a host call: slot k stands for node[k]. */
typedef struct ext_srcs {
    int32_t node[SMELT_MAX_SRC];
    PyObject *slot[SMELT_MAX_SRC];   /* owned */
    int n;
} ext_srcs;

/* A host call between its two halves: templates over sources s, the
 * results m of type rtype (tracer_call_infer or shape_infer), and what
 * shape_infer read of the arguments (sa; kind SK_NONE when it did not
 * know the op). Python objects owned (ext_release). */
typedef struct ext_pending ext_pending;

/* ext_call in two halves: ext_prepare makes the templates and infers the
 * results (0; -2 when no argument is a tensor; -1 on a break or error,
 * nothing kept), ext_emit adds the CALL nodes and returns the results'
 * value (as ext_call), ext_release drops what the pending call holds
 * (after ext_prepare returned 0). */
int ext_prepare(tracer *T, PyObject *fn, const call_args *a, ext_pending *p);
int32_t ext_emit(tracer *T, ext_pending *p, const call_args *a);
void ext_release(ext_pending *p);

/* shapes.c: the results of common host calls (conv, pooling, upsampling,
 * embedding, cumsum, topk, sort, gather/scatter, einsum, advanced
 * indexing, ...) from torch's shape rules, without a meta-tensor run: the
 * first Python meta kernel a process runs costs 0.4-2.4 s of imports. */

/* What shape_infer read from the arguments of a convolution, pooling or
 * Tensor.unfold call it accepted (native.c makes graph ops of them).
 *   kind       SK_NONE for every other op
 *   x, w, b    slots (source numbers) of input, weight, bias; -1: none
 *   per spatial dim i < nsp: kernel (pooling; the weight's size for conv),
 *   stride, pad_lo/pad_hi (zeros / pooling padding before and after; a
 *   convolution's 'same' split as torch splits it), dil, out (pooling
 *   output sizes, as torch's pooling_output_shape gives them)
 *   conv: groups, transposed; pooling: indices (returned too), ceil,
 *   count_pad (count_include_pad; 1 for max), has_div / div
 *   (divisor_override); unfold: dim (normalised), size, step;
 *   nearest upsampling: out (output sizes), exact (nearest-exact), scale
 *   (the scale factors given, 0 when output_size was) */
typedef enum sh_kind { SK_NONE, SK_CONV, SK_MAX_POOL, SK_AVG_POOL, SK_ADAPTIVE_AVG, SK_ADAPTIVE_MAX, SK_UNFOLD,
                       SK_NEAREST } sh_kind;

typedef struct sh_args {
    uint8_t kind, nsp, transposed, indices, ceil, count_pad, has_div;
    int8_t x, w, b;
    int64_t kernel[3], stride[3], pad_lo[3], pad_hi[3], dil[3], out[3];
    int64_t groups, div;
    int dim;
    int64_t size, step;
    uint8_t exact;
    double scale[3];
} sh_args;

struct ext_pending {
    PyObject *fn;                  /* borrowed */
    PyObject *name, *args, *kwargs, *rtype;
    ext_srcs s;
    tracer_call_meta m;
    sh_args sa;
    int faithful;                  /* the meta run had the sources' eager strides */
    int need_layout;               /* shape rules inferred the results of sources that are
                                      not contiguous: ext_emit asks a meta run for their layout */
};

/* fn(*args, **kwargs) over a host call's argument templates (Slot(k)
 * stands for srcs[k]; kwargs a dict, None or NULL): 1 with *m filled (nout,
 * dtypes, ndims, shapes; is_view for results that view an input) and
 * *rtype the result's Python type (torch.Tensor, tuple or a
 * torch.return_types type; new reference), exactly as torch computes
 * them; 0 when fn or this argument form is not one it knows, or torch
 * would reject the arguments (the caller runs the meta call, which raises
 * torch's own message). *sa (when not NULL) is filled on 1 and has kind
 * SK_NONE on 0. Never sets a Python error. */
int shape_infer(PyObject *fn, PyObject *args, PyObject *kwargs, int nsrc, const smelt_node *const *srcs,
                tracer_call_meta *m, PyObject **rtype, sh_args *sa);

/* native.c: the home of convolution, pooling, Tensor.unfold and nearest
 * upsampling (rows of ops.c's table): fn(*a) as graph ops where it takes
 * a form they express (shape_infer read and checked the arguments; the
 * graph ops' result must have the shape torch gives): CONV for float32
 * convolutions, constant padding + UNFOLD + amax/sum for pooling of
 * floating tensors (adaptive pooling when every output size divides the
 * input size), UNFOLD for Tensor.unfold, views for nearest upsampling by
 * even integer ratios; else a host call of fn. first: only the first
 * result is wanted (the values of an adaptive max pooling without
 * indices): a tuple or list result gives its first item. A value, or -1
 * (break/error). */
int32_t native_call(tracer *T, PyObject *fn, const call_args *a, int first);

/* views.c: eager's geometry of graph node id when it is a chain of VIEW
 * nodes over node base whose eager strides are base_stride: 1 with id's
 * strides and storage offset (elements, relative to base's) filled; 0
 * when id is not such a chain or eager would copy (a reshape whose
 * strides do not allow a view). */
int tr_view_geometry(const smelt_graph *g, int32_t base, const int64_t *base_stride, int32_t id, int64_t *stride,
                     int64_t *offset);
/* The node a chain of VIEW nodes ending at id starts from (id itself if
 * it is no view). */
int32_t tr_view_base(const smelt_graph *g, int32_t id);
/* (size, stride, offset) of node n's tensor as a view with strides st at
 * offset off: what TO_VIEW and TO_OUTVIEW hold. New reference or NULL. */
PyObject *tr_view_tuple(const smelt_node *n, const int64_t *st, int64_t off);
/* Strides of in (strides s) viewed as n's shape, as ATen's computeStride:
 * 1 with out filled, 0 when no view exists (view raises, reshape copies). */
int tr_reshape_strides(const smelt_node *in, const int64_t *s, const smelt_node *n, int64_t *out);
/* Strides eager's view op n gives from its source's strides s: 1, or 0
 * for a reshape that is no view (a copy). */
int tr_view_strides(const smelt_graph *g, const smelt_node *n, const int64_t *s, int64_t *out);
/* torch's strides for a contiguous tensor of node n's shape. */
void tr_contiguous_strides(const smelt_node *n, int64_t *stride);

/* ---- objects.c and the interp.c/builtins.c entry points it uses:
 * instances of plain Python classes made in the traced code (V_INST),
 * attribute writes to outside objects, calls the tracer answers itself ---- */
int32_t tr_bound(tracer *T, PyObject *fn, int32_t self, int32_t fn_src);   /* method fn bound to self */
int32_t tr_inline(tracer *T, PyObject *fn, int32_t fn_src, const call_args *a);   /* Python function call */
int tr_dict_set(tracer *T, int32_t d, PyObject *key, int32_t v);   /* d[key] = v, d a V_DICT made here */
int tr_store_subscr(tracer *T, int32_t c, int32_t k, int32_t v);   /* c[k] = v */
int tr_delete_subscr(tracer *T, int32_t c, int32_t k);             /* del c[k] */
int32_t tr_contains(tracer *T, int32_t k, int32_t c);             /* k in c */
const char *tr_kind_name(tracer *T, int32_t v);
int tr_is_plain_const(PyObject *o);       /* None, bool, int, float, str, Ellipsis */
/* Exceptions raised in the trace: raising sets T->exc and returns -1,
 * and the frames unwind to a handler of the traced code (try/except,
 * finally), or out of the trace (a break). tr_raise steals exc (an
 * exception instance); tr_raise_error raises the Python error just set
 * by evaluating an operation on trace-time values (memory errors and
 * interrupts stay errors). */
int tr_raise(tracer *T, PyObject *exc);
int tr_raise_error(tracer *T);
int32_t bi_pure(tracer *T, const call_args *a, PyObject *fn);   /* fn called now on constants */
int32_t bi_type_value(tracer *T, int32_t v);               /* type(v), guarded */

/* Operators an instance's class implements through special methods. */
typedef enum obj_slot { OS_GETITEM, OS_SETITEM, OS_DELITEM, OS_CONTAINS, OS_LEN, OS_ITER, OS_BOOL } obj_slot;

int obj_init(void);                                        /* 0 or -1 (error set) */
int32_t obj_new_instance(tracer *T, int32_t clsv, const call_args *a);   /* -2: not a plain class */

/* flex.c: torch.nn.attention.flex_attention's flex_attention and
 * create_block_mask (ops.c's table calls these) */
int flex_init(void);
int32_t flex_attention_call(tracer *T, const call_args *a);
int32_t flex_block_mask_call(tracer *T, const call_args *a);
/* smelt._flex._call_mod(fn, *args): fn(*args) guarded by its code (-2: fn is not that function) */
int32_t flex_mod_call(tracer *T, PyObject *fn, const call_args *a);
int32_t obj_attr(tracer *T, int32_t v, PyObject *name, int missing_ok);  /* -2: missing */
int obj_setattr(tracer *T, int32_t v, PyObject *name, int32_t val);      /* val -1: del */
int obj_overlay_get(tracer *T, PyObject *o, PyObject *name, int32_t *val);
int obj_overlaid(tracer *T, PyObject *o);
int obj_finish(tracer *T);                                 /* end of trace: grad mode back? */
/* Attribute write w at the end of the trace: 1 when it leaves the
 * attribute changed (replayed after the graph), 0 when it was undone (the
 * original state guarded), -1 on error. */
int obj_write_changed(tracer *T, const struct tr_attrw *w);
int32_t obj_cmethod(tracer *T, PyObject *descr, const call_args *a);     /* -2: not modelled */
int32_t obj_special(tracer *T, int32_t v, obj_slot slot, const int32_t *args, int n);   /* -2: none */
int obj_truth(tracer *T, int32_t v, int *out);
int32_t obj_call(tracer *T, int32_t v, const call_args *a);
int32_t obj_super(tracer *T, PyObject *cls, int32_t self);
int32_t obj_query(tracer *T, PyObject *fn, const call_args *a);          /* -2: not a query */
int32_t obj_call_special_fn(tracer *T, PyObject *fn, int32_t fn_src, const call_args *a);  /* -2: not special */
/* optim.c: fn(*a) when fn is the step of a torch.optim SGD/Adam/AdamW (a[0]); -2 when not */
int32_t optim_step(tracer *T, PyObject *fn, const call_args *a);
PyObject *obj_out_spec(tracer *T, int32_t v, int32_t **vals, int *n);
/* A call of V_OBJ fn that objects.c answers itself before fn's identity
 * is guarded: a functools.partial (its function, arguments and keywords
 * are read from their own sources instead), an instance of a user class
 * with a Python __call__ (inlined, its type guarded), a grad-mode
 * manager's __exit__. -2: not such a callable. */
int32_t obj_call_object(tracer *T, int32_t fn, const call_args *a);
int obj_is_build_class(PyObject *o);
int32_t obj_build_class(tracer *T, const call_args *a);   /* a class statement's __build_class__ call */
int32_t obj_partial_new(tracer *T, const call_args *a);   /* functools.partial(...) in the trace */
/* A grad-mode manager value for `with` (torch.no_grad(): on 0;
 * torch.enable_grad(): on 1): entering sets T->no_grad, its __exit__
 * restores it. */
int32_t obj_grad_manager(tracer *T, int on);
/* CPU autocast: obj_autocast_start sets T->ac_on/ac_dtype from the state
 * outside the trace (0, -1 with an exception); obj_autocast_manager is
 * `torch.autocast(...)` (a manager `with` can enter: entering sets the
 * trace's state, its __exit__ restores it; a break for anything but the
 * CPU with float16/bfloat16); obj_is_autocast(o): o is torch.autocast. */
int obj_autocast_start(tracer *T);
int32_t obj_autocast_manager(tracer *T, const call_args *a);
int obj_is_autocast(PyObject *o);
/* BEFORE_WITH on manager value m: *ex its __exit__ (a value to call with
 * (None, None, None)), *en what __enter__ returned. 0, or -1 (break). */
int obj_enter(tracer *T, int32_t m, int32_t *ex, int32_t *en);
/* For module value mv a smelt CompiledModule (python/smelt/_api.py): its
 * original module `_orig_mod`, fetched from its source (a call of it runs
 * nn.Module.__call__ of the original). -2 when mv is no CompiledModule. */
int32_t obj_compiled_inner(tracer *T, int32_t mv);
int obj_namedtuple_class(PyObject *cls);                   /* cls is a named tuple class */
PyObject *obj_namedtuple_of(PyObject *tuple_obj);          /* a V_TUPLE's obj -> its named tuple class, or NULL */
int32_t obj_tuple_new(tracer *T, const call_args *a);      /* tuple.__new__(cls, iterable) */
int32_t obj_tuple_attr(tracer *T, int32_t v, PyObject *name);   /* a named tuple's class attribute; -2: none */
/* a op b / a cmp b when an operand is an instance value (sets made here);
 * -2 when neither is. */
int32_t obj_binop(tracer *T, int nb, int32_t a, int32_t b);
int32_t obj_compare(tracer *T, int cmp, int32_t a, int32_t b);

/* ---- sets.c: sets and frozensets made in the trace (V_INST INST_SET) ---- */
int set_init(void);                                        /* 0 or -1 (error set) */
int set_is(tracer *T, int32_t v);                          /* v is a set made here */
int32_t set_new(tracer *T, PyObject *type, const int32_t *items, int n);   /* set/frozenset of the values */
int set_add_values(tracer *T, int32_t s, const int32_t *items, int n);    /* s.add(each) */
int set_update_from(tracer *T, int32_t s, int32_t iterable);              /* s.update(iterable) */
int32_t set_from(tracer *T, PyObject *type, int32_t iterable);            /* set(it) / frozenset(it) */
int32_t set_attr(tracer *T, int32_t s, PyObject *name);   /* a bound method; -2: none */
int32_t set_method(tracer *T, int32_t s, PyObject *name, const call_args *a);
int32_t set_special(tracer *T, int32_t s, obj_slot slot, const int32_t *args, int n);   /* -2: none */
int32_t set_binop(tracer *T, int nb, int32_t a, int32_t b);     /* -2: no set made here */
int32_t set_compare(tracer *T, int cmp, int32_t a, int32_t b);  /* -2: no set made here */
PyObject *set_pyobj(tracer *T, int32_t s);   /* new ref: an equal set (a break if it holds tensors) */
int set_values(tracer *T, int32_t s, int32_t **items, int *n);   /* its elements' values (PyMem), in its order */

#endif
