/* guards.h — the guard tree: the checks that decide whether a compiled
 * artifact may be reused for a new call of its frame.
 *
 * A tree of accessor nodes. The root stands for the frame (its fast locals,
 * globals and builtins); every other node fetches one value from its
 * parent's value (a local, a global, an attribute, an item, a closure cell,
 * a type) and carries leaf checks on that value. A path built twice is one
 * node, so a shared prefix (`L['self'].layers`) is fetched once per check.
 *
 * guard_check() walks the tree depth first: at each node the leaves run in
 * the order they were added, then the children in the order they were
 * built; the first failure stops the walk. A subtree without leaves is not
 * fetched at all (a path checks nothing by itself). A fetch that raises (missing
 * attribute, IndexError, ...) or a leaf whose reads raise is a failed guard
 * with a reason, never an error; only a broken call (bad globals) or a
 * BaseException that is no Exception (KeyboardInterrupt) is an error.
 *
 * Every node has a source text in torch.compile's notation: `L['x']`,
 * `G['torch'].float32`, `L['self'].layers[0].weight`, `L['d']['k']`,
 * `L['fn'].__closure__[0].cell_contents`, `type(L['x'])`. Reasons and the
 * printer use it.
 *
 * Lifetime and ownership: the tree owns strong references to every object a
 * leaf compares with (types, constants, identities, dtypes, devices), so an
 * identity check can never be fooled by a recycled address. The owner of a
 * tree inside a GC-tracked object must call guard_tree_traverse from its
 * tp_traverse and guard_tree_free from its tp_clear.
 *
 * Threading: every function needs the GIL. guard_check does not modify the
 * tree. Builder functions return NULL / -1 with a Python exception set on
 * failure (MemoryError, TypeError, ValueError); they never abort on user
 * input.
 */
#ifndef SMELT_GUARDS_H
#define SMELT_GUARDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>

typedef struct guard_tree guard_tree;
typedef struct guard_node guard_node;

/* How a node's value is fetched from its parent's value. */
typedef enum guard_acc {
    GUARD_ROOT,          /* the frame; has no value; parent of LOCAL and GLOBAL */
    GUARD_LOCAL,         /* locals[index]; unbound (NULL) or missing fails */
    GUARD_GLOBAL,        /* globals[key], else builtins[key]; missing fails */
    GUARD_ATTR,          /* getattr(parent, key), key an interned str */
    GUARD_ITEM,          /* parent[index]: tuple/list directly (negative counts
                            from the end), any other object through __getitem__ */
    GUARD_DICT_ITEM,     /* parent[key], key an exact str or int; exact dicts
                            are read directly, others through __getitem__;
                            index 1: an identity-hashed key, any dict read
                            directly (guard_dict_item_id) */
    GUARD_CLOSURE_CELL,  /* parent.__closure__[index].cell_contents; parent
                            must be a Python function, the cell non-empty */
    GUARD_TYPE           /* type(parent) */
} guard_acc;

/* ---------------------------------------------------------------- tree */

/* A new tree holding only the root. NULL with MemoryError. */
guard_tree *guard_tree_new(void);

/* Frees t and releases every reference it holds. NULL is a no-op. */
void guard_tree_free(guard_tree *t);

/* Visits every Python object t references (tp_traverse helper). */
int guard_tree_traverse(const guard_tree *t, visitproc visit, void *arg);

/* The root node (id 0): attach GLOBAL_STATE here (guard_add_global_state). */
guard_node *guard_root(guard_tree *t);

/* Node by id (0 = root, then creation order); NULL when id is out of range. */
guard_node *guard_tree_node(const guard_tree *t, int id);

int guard_tree_num_nodes(const guard_tree *t);   /* root included */
int guard_tree_num_checks(const guard_tree *t);  /* leaves in all nodes */

/* Smallest nlocals guard_check accepts without failing on a missing local
 * (1 + the largest LOCAL index built). */
int guard_tree_num_locals(const guard_tree *t);

int guard_node_id(const guard_node *n);
guard_acc guard_node_kind(const guard_node *n);
const char *guard_node_source(const guard_node *n);   /* owned by the tree */

/* ---------------------------------------------------------------- accessors
 *
 * Each returns the child of `parent` reached by one fetch, creating it on
 * first use: building the same (parent, kind, key) twice returns the same
 * node. `parent` must belong to t. NULL with an exception on failure. */

/* Fast local `index` (>= 0) of the frame; `name` is used for the source
 * text only (`L['name']`) and is taken from the first build. */
guard_node *guard_local(guard_tree *t, int index, const char *name);

/* Global `name` (UTF-8), looked up in globals, then in builtins. Also the
 * right accessor for a builtin: a global defined later that shadows it is
 * then found first and fails the identity check. */
guard_node *guard_global(guard_tree *t, const char *name);

/* Attribute `name` (UTF-8) of parent's value (plain getattr). For
 * nn.Module children and parameters a path through `_modules` /
 * `_parameters` / `_buffers` (ATTR then DICT_ITEM) avoids Module.__getattr__,
 * which raises and catches an AttributeError on every access. */
guard_node *guard_attr(guard_tree *t, guard_node *parent, const char *name);

/* parent[index]; any index (negative counts from the end of a tuple/list). */
guard_node *guard_item(guard_tree *t, guard_node *parent, Py_ssize_t index);

/* parent[key]; key must be an exact str, int or bytes, or a tuple of
 * those (TypeError otherwise). */
guard_node *guard_dict_item(guard_tree *t, guard_node *parent, PyObject *key);

/* parent[key] for a key hashed by identity (a tensor: an optimizer's
 * state is keyed by its parameters): read with the dict's own lookup
 * whatever dict subclass parent is (a defaultdict's __missing__ never
 * runs), a missing key fails. The tree keeps key alive; `name` (the key's
 * own source) stands for it in the source text. */
guard_node *guard_dict_item_id(guard_tree *t, guard_node *parent, PyObject *key, const char *name);

/* Contents of closure cell `index` (>= 0) of the function parent. */
guard_node *guard_closure_cell(guard_tree *t, guard_node *parent, int index);

/* type(parent's value). */
guard_node *guard_type(guard_tree *t, guard_node *parent);

/* ---------------------------------------------------------------- leaves
 *
 * Each adds a check on node n's value (not on the root unless said so).
 * 0 on success, -1 with an exception. Adding a leaf identical to one the
 * node already has (same kind, same object by identity, same number) is a
 * no-op. */

/* type(v) is type (exact; a subclass fails). */
int guard_add_type_is(guard_node *n, PyTypeObject *type);

/* v is obj (identity). An object that supports weak references is held
 * weakly: the check fails once it is gone (an address reused by a new
 * object never matches), and the tree does not keep it alive. */
int guard_add_id_is(guard_node *n, PyObject *obj);

/* v == value with the same type all the way down: value is None, a bool,
 * an exact int, float, str or bytes, or a tuple, set or frozenset of those
 * (TypeError otherwise). 1, True and 1.0 are three different values; floats
 * compare by value except that NaN equals NaN and -0.0 differs from 0.0.
 * A set is compared by its contents: pass a copy, not the live set. */
int guard_add_equals(guard_node *n, PyObject *value);

/* type(v) is type(value) and v == value: for immutable value objects whose
 * == is C code without side effects (torch.device). */
int guard_add_value_eq(guard_node *n, PyObject *value);

/* v is the object node other holds (a tensor reached through two paths
 * when traced: aliasing is part of what was compiled). other must belong
 * to n's tree. */
int guard_add_same_as(guard_node *n, const guard_node *other);
/* NOT_SAME_AS: the node's value is not other's value (other: any non-root node of the tree). */
int guard_add_not_same_as(guard_node *n, const guard_node *other);

/* (key in v) is present: a dict's keys (dict subclasses and other
 * mappings through `in`). key: a constant guard_add_equals accepts,
 * hashable. */
int guard_add_has_key(guard_node *n, PyObject *key, int present);

/* v is None (is_none != 0) or v is not None (is_none == 0). */
int guard_add_none(guard_node *n, int is_none);

/* v is True (value != 0) or v is False (value == 0): e.g. module.training. */
int guard_add_bool(guard_node *n, int value);

/* len(v) == len; tuple/list/dict read directly, other objects via len(). */
int guard_add_len_eq(guard_node *n, Py_ssize_t len);

/* v is a dict whose keys, in iteration order, equal the tuple `keys`
 * (each an exact str or int; TypeError otherwise). */
int guard_add_dict_keys(guard_node *n, PyObject *keys);

/* v is None or an empty dict (dict subclasses count): nn.Module hook dicts. */
int guard_add_empty_dict_or_none(guard_node *n);

/* v is a tensor like `example`: the same exact Python type, dtype, device
 * (type and index), requires_grad, ndim, sizes and strides, all read from
 * the example now. dynamic_dims (NULL: none) has one flag per dim of the
 * example: a flagged dim's size is only checked to be >= 2, and a stride
 * that the example derives from a dynamic size (stride[d] == stride[e] *
 * size[e] along the memory order) is checked as that relation instead of a
 * number. A flagged dim whose example size is 0 or 1 stays static (sizes 0
 * and 1 are always specialised). Strides of dims of size 1, and all strides
 * of a tensor with a static size 0, are not compared: they address no
 * memory. TypeError if example is no tensor. */
int guard_add_tensor_match(guard_node *n, PyObject *example, const uint8_t *dynamic_dims);

/* Global state, on the root: torch.is_grad_enabled() and
 * torch.get_default_dtype() must return what they return now. */
int guard_add_global_state(guard_tree *t);
/* The CPU autocast state (enabled, dtype) as leaves on the root: for an
 * entry traced under CPU autocast. 0, -1 with an exception. */
int guard_add_autocast_state(guard_tree *t);

/* Makes every check fetch node n's value even if nothing checks it (so
 * that guard_check_values can hand it out): a fetch that fails then fails
 * the check, as a missing value would. */
void guard_node_fetch(guard_node *n);

/* ---------------------------------------------------------------- use */

/* Runs every check of t against a frame: `locals` are its fast locals
 * (nlocals >= 0 entries, NULL entries are unbound), `globals` a dict,
 * `builtins` a dict or NULL (then a global that is not in globals is
 * missing). Returns 1 when every check passes; 0 when one fails, with a
 * one-line reason naming the source path written to reason[0..n) (e.g.
 * `L['x'].size()[1] == 16 failed: got 17`; reason may be NULL when n is 0);
 * -1 with a Python exception (TypeError for non-dict globals/builtins,
 * or a BaseException that is no Exception raised by a fetch). A local index
 * >= nlocals is a failure, not an error. Allocates nothing of its own on
 * the success path. */
int guard_check(const guard_tree *t, PyObject *const *locals, int nlocals, PyObject *globals,
                PyObject *builtins, char *reason, size_t n);

/* The tree as text for SMELT_LOGS=guards: one line per node (its source)
 * and one per check, indented by depth. malloc'd (caller frees with free());
 * NULL when out of memory. */
char *guard_tree_print(const guard_tree *t);

/* ---------------------------------------------------------------- export
 * (guards/export.c) What the tree's owner needs besides a yes/no: the
 * values the check fetched (the compiled code's inputs), so that what runs
 * is exactly what was checked, fetched once. */

/* guard_check that hands out values: the same checks in the same order
 * with the same result, but no reason (run guard_check for it after a
 * failure). want (NULL: nothing wanted) and vals have one entry per node
 * (guard_tree_num_nodes); vals must be all NULL on entry. Returns 1 with
 * vals[id] = the value of node id (new reference) for every wanted node
 * that has checks at or below it (the walk fetches exactly those; others
 * stay NULL); 0 (a check failed) or -1 (error, as guard_check) with vals
 * all NULL again. */
int guard_check_values(const guard_tree *t, PyObject *const *locals, int nlocals,
                       PyObject *globals, PyObject *builtins, const uint8_t *want,
                       PyObject **vals);

#endif
