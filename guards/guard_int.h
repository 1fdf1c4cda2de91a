/* guard_int.h — guard tree internals shared by guards.c (tree, accessors,
 * evaluation), leaves.c (leaf checks), tensor.c (TENSOR_MATCH) and text.c
 * (source texts, descriptions, printer). Not part of any external contract. */
#ifndef SMELT_GUARD_INT_H
#define SMELT_GUARD_INT_H

#include <stdarg.h>
#include <stdbool.h>

#include "guards.h"
#include "pycompat.h"

/* A growable malloc'd string. */
typedef struct guard_buf {
    char *s;
    size_t len, cap;
    bool oom;
} guard_buf;

/* Leaf kinds; which guard_leaf fields each uses:
 *   TYPE_IS     obj: the type                 ID_IS / ID_NOT  obj: the object
 *   ID_WEAK     obj: a weak reference to the object (it must be alive and be v)
 *   EQUALS      obj: the constant             LEN_EQ          n: the length
 *   VALUE_EQ    obj: a value object (torch.device): same exact type and ==
 *   HAS_KEY     obj: a key, n: 1 if `key in v` must hold, 0 if it must not
 *   SAME_AS     n: the id of another node, whose value v must be (identity)
 *   DICT_KEYS   obj: tuple of keys            EMPTY_DICT_OR_NONE  -
 *   TENSOR      ts: the spec                  CALL_IS  obj: callable (no
 *               arguments), aux: expected result (identity), text: call text
 *   TRUTH_IS    obj: an object the tree holds (not fetched), aux: Py_True or
 *               Py_False, bool(obj) must be aux (dicts: by size, no call);
 *               text: what obj is */
typedef enum guard_leaf_kind {
    LEAF_TYPE_IS,
    LEAF_ID_IS,
    LEAF_ID_NOT,
    LEAF_ID_WEAK,
    LEAF_EQUALS,
    LEAF_VALUE_EQ,
    LEAF_HAS_KEY,
    LEAF_SAME_AS,
    LEAF_LEN_EQ,
    LEAF_DICT_KEYS,
    LEAF_EMPTY_DICT_OR_NONE,
    LEAF_TENSOR,
    LEAF_CALL_IS,
    LEAF_TRUTH_IS,
    LEAF_NOT_SAME_AS
} guard_leaf_kind;

/* One dim of a tensor spec. rel < 0: stride is the number `stride` (checked
 * when the dim's size >= 2); rel = e: stride == stride[e] * size[e]. */
typedef struct guard_tdim {
    int64_t size, stride;
    int32_t rel;
    uint8_t dynamic;   /* size only checked >= 2 */
} guard_tdim;

/* Tensor attributes TENSOR_MATCH reads through cached getters. */
enum { GUARD_TA_DTYPE, GUARD_TA_IS_CPU, GUARD_TA_REQUIRES_GRAD, GUARD_TA_SHAPE, GUARD_TA_N };

/* What TENSOR_MATCH compares (strong refs to type, dtype, device). get[]:
 * the C getters of the type's getset descriptors for the GUARD_TA_ names,
 * valid while type->tp_version_tag == version (0: none cached). */
typedef struct guard_tensor_spec {
    unsigned int version;
    getter get[GUARD_TA_N];
    void *closure[GUARD_TA_N];
    PyTypeObject *type;
    PyObject *dtype;
    PyObject *device;      /* torch.device; compared only when !cpu */
    uint8_t cpu, requires_grad;
    uint8_t contiguous;    /* layout rule == is_contiguous() (one call, no tuple) */
    uint8_t has_zero;      /* a static size is 0: strides are not compared */
    int ndim;
    guard_tdim dim[];
} guard_tensor_spec;

typedef struct guard_leaf {
    uint8_t kind;
    Py_ssize_t n;
    PyObject *obj, *aux;
    const char *text;
    guard_tensor_spec *ts;
} guard_leaf;

struct guard_node {
    guard_tree *tree;
    guard_node *parent;      /* NULL for the root */
    int id;
    int nbelow;              /* leaves in this subtree: 0 = not fetched at all */
    uint8_t kind;            /* guard_acc */
    Py_ssize_t index;        /* LOCAL, ITEM, CLOSURE_CELL */
    PyObject *key;           /* GLOBAL/ATTR: interned str; DICT_ITEM: key;
                                ITEM: the index as int (for __getitem__) */
    char *source;
    guard_leaf *leaves;
    int nleaves, cleaves;
    guard_node **kids;
    int nkids, ckids;
};

/* Interned names read from tensors by TENSOR_MATCH. */
#define GUARD_NAMES(X) \
    X(shape) X(stride) X(dtype) X(device) X(is_cpu) X(requires_grad) X(is_contiguous)

struct guard_tree {
    guard_node **nodes;
    int nnodes, cnodes;
    int nchecks, nlocals;
    PyObject *index;         /* dict: (parent id, kind, key) -> node id */
#define GUARD_NAME_FIELD(f) PyObject *s_##f;
    GUARD_NAMES(GUARD_NAME_FIELD)
#undef GUARD_NAME_FIELD
};

/* The frame a check runs against, and where a failure reason goes. */
typedef struct guard_ctx {
    const guard_tree *tree;
    PyObject *const *locals;
    int nlocals;
    PyObject *globals, *builtins;
    char *reason;
    size_t n;
} guard_ctx;

/* ---- guards.c */

/* Appends leaf (ownership of its references taken, also on failure) to n
 * unless an identical leaf is there. 0, or -1 with MemoryError. */
int guard_leaf_push(guard_node *n, guard_leaf leaf);

/* Writes a reason "fmt..." into c (if it has room) and returns 0. */
int guard_fail(guard_ctx *c, const char *fmt, ...);

/* After a Python call raised while checking: an Exception becomes a failed
 * guard "<what>: <Type>: <message>" (returns 0, exception cleared); any
 * other BaseException stays set (returns -1). */
int guard_fail_exc(guard_ctx *c, const char *what);

/* Node n's value fetched again from the frame (its whole path): a new
 * reference; NULL when a fetch failed (reason written) or with an error. */
PyObject *guard_node_value(guard_ctx *c, const guard_node *n);

/* ---- leaves.c */

/* Runs leaf l on value v of node n: 1 pass, 0 fail (reason written), -1. */
int guard_leaf_check(guard_ctx *c, const guard_node *n, const guard_leaf *l, PyObject *v);

/* 1 if a and b are equal constants (same types all the way down). */
bool guard_const_equal(PyObject *a, PyObject *b);

/* 1 if v is a constant guard_add_equals accepts. */
bool guard_is_const(PyObject *v);

/* ---- tensor.c */

/* The spec of tensor `example` (see guard_add_tensor_match). NULL with an
 * exception. */
guard_tensor_spec *guard_tensor_spec_new(const guard_tree *t, PyObject *example,
                                         const uint8_t *dynamic_dims);
void guard_tensor_spec_free(guard_tensor_spec *s);
bool guard_tensor_spec_equal(const guard_tensor_spec *a, const guard_tensor_spec *b);

/* TENSOR_MATCH of v against s on node n: 1, 0 (reason written) or -1. */
int guard_tensor_check(guard_ctx *c, const guard_node *n, const guard_tensor_spec *s,
                       PyObject *v);

/* The printer line of a TENSOR_MATCH leaf on n. */
void guard_tensor_text(guard_buf *b, const guard_node *n, const guard_tensor_spec *s);

/* ---- text.c */

void guard_buf_printf(guard_buf *b, const char *fmt, ...);
void guard_buf_vprintf(guard_buf *b, const char *fmt, va_list ap);

/* Source text of a new child of parent (PyMem_Malloc'd), NULL + exception. */
char *guard_source_new(const guard_node *parent, guard_acc kind, Py_ssize_t index,
                       PyObject *key, const char *name);

/* Short text of object o for reasons and the printer: repr for constants,
 * dtypes and devices, the name for types, "<T object at 0x...>" otherwise.
 * Never runs user code, never leaves an exception set. */
void guard_obj_text(guard_buf *b, PyObject *o);

/* The check leaf l of node n states ("type(L['x']) is Tensor"). */
void guard_leaf_text(guard_buf *b, const guard_node *n, const guard_leaf *l);

#endif
