/* tstate.h — tracer internals shared by interp.c (bytecode) and ops.c
 * (torch calls). Not part of any external contract. */
#ifndef SMELT_TSTATE_H
#define SMELT_TSTATE_H

#include "trace.h"

/* Symbolic value kinds. Values live in the tracer's arena, by index.
 *   V_NULL    the NULL CPython pushes before some calls
 *   V_TENSOR  graph node `node`
 *   V_OBJ     a Python object known at trace time (`obj`, borrowed from
 *             keep-alive), fetched from `src` (-1: computed or trusted)
 *   V_TUPLE / V_LIST   items[0..n); a V_TUPLE with `obj` set is built as
 *             obj(tuple) on return (torch.return_types.max, ...)
 *   V_DICT    keys[i] -> items[i]
 *   V_BOUND   method `obj` (a function) or tensor method named `obj` (str)
 *             bound to value `self_`
 *   V_ITER    iterator over container value `self_`, next index `pos`
 *   V_SLICE   sl[0..2]: start, stop, step values (-1 = None) */
typedef enum tv_kind { V_NULL, V_TENSOR, V_OBJ, V_TUPLE, V_LIST, V_DICT, V_BOUND, V_ITER, V_SLICE } tv_kind;

typedef struct tv {
    uint8_t kind;
    int32_t node;
    PyObject *obj;
    int32_t src;
    int32_t *items;
    PyObject **keys;
    int32_t n, cap;
    int32_t self_, pos;
    int32_t sl[3];
} tv;

typedef struct tracer {
    smelt_graph *g;
    tv *vals; int32_t nvals, cvals;
    tr_result *r;
    int32_t csrcs, cguards, cinputs, couts;
    PyObject *tensor_of;   /* dict: id(tensor) -> value id of its graph input */
    uint8_t *viewed;       /* per graph node: a view of it exists */
    int32_t cviewed;
    PyObject *globals, *builtins;   /* of the top frame */
    int depth;
    int broke;             /* a graph break reason is set */
} tracer;

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

/* interp.c helpers used by ops.c */
int32_t tv_new(tracer *T, tv_kind k);
int32_t tv_obj(tracer *T, PyObject *o, int32_t src);     /* wraps tensors/containers too */
int32_t tv_tensor(tracer *T, int32_t node);
int32_t tv_tuple(tracer *T, const int32_t *items, int n);
int tr_break(tracer *T, const char *fmt, ...);           /* sets the reason, returns -1 */
PyObject *tr_const(tracer *T, int32_t v);                 /* concrete object of a V_OBJ (guarded) */
int tr_int(tracer *T, int32_t v, int64_t *out);           /* int constant; -1 (break) if not */
int32_t tr_call(tracer *T, int32_t fn, const call_args *a);
int tr_keep(tracer *T, PyObject *o);                      /* keep o alive for the result */
int32_t tr_node_add(tracer *T, const smelt_node *proto);  /* graph node or -1 (break) */

/* ops.c */
int ops_init(void);
/* Call of a torch callable (function object) or tensor method (name with
 * self in a->pos[0]). Returns a value id, -1 (break/error), or -2 when fn
 * is no torch op smelt knows (then the caller decides). */
int32_t ops_call_torch(tracer *T, PyObject *fn, const call_args *a);
int32_t ops_call_method(tracer *T, PyObject *name, const call_args *a);
int32_t ops_tensor_attr(tracer *T, int32_t self, PyObject *name);  /* x.shape etc.; -2 unknown */
int32_t ops_binary(tracer *T, int nb_op, int32_t a, int32_t b);     /* BINARY_OP on tensors */
int32_t ops_compare(tracer *T, int cmp, int32_t a, int32_t b);
int32_t ops_unary(tracer *T, smelt_op op, int32_t a);
int32_t ops_subscr(tracer *T, int32_t x, int32_t index);
int ops_is_tensor(PyObject *o);
PyObject *ops_tensor_type(void);          /* torch.Tensor (borrowed) */
int ops_dtype_of(PyObject *torch_dtype);  /* smelt_dtype, or -1 (no error set) */

#endif
