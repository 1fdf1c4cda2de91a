/* export.c — guard_check_values: the check that also hands the tree's owner
 * the values it fetched (the compiled code's inputs), so they are neither
 * fetched twice nor re-validated: what runs is exactly what was checked.
 *
 * The walk and the accessors repeat guards.c's (same order, same fast
 * paths and fallbacks, same treatment of exceptions) without writing
 * failure reasons; the leaves are guards.c's own (guard_leaf_check). A
 * change to an accessor or to the walk in guards.c must be mirrored here
 * (or guards.c's walk could take the capture array and this file go). */
#include "guard_int.h"

/* A check with capture: where wanted values go. */
typedef struct walk {
    guard_ctx c;              /* reason NULL: failures are not described */
    const uint8_t *want;
    PyObject **vals;
} walk;

/* tuple/list directly (negative counts from the end), else __getitem__. */
static PyObject *item(const guard_node *n, PyObject *v)
{
    if (!PyTuple_Check(v) && !PyList_Check(v))
        return PyObject_GetItem(v, n->key);
    Py_ssize_t len = Py_SIZE(v), i = n->index < 0 ? n->index + len : n->index;
    if (i < 0 || i >= len)
        return NULL;
    return Py_NewRef(PyTuple_Check(v) ? PyTuple_GET_ITEM(v, i) : PyList_GET_ITEM(v, i));
}

static PyObject *cell_contents(const guard_node *n, PyObject *v)
{
    PyObject *cl = PyFunction_Check(v) ? PyFunction_GET_CLOSURE(v) : NULL;
    if (!cl || !PyTuple_Check(cl) || n->index >= PyTuple_GET_SIZE(cl))
        return NULL;
    PyObject *cell = PyTuple_GET_ITEM(cl, n->index);
    return PyCell_Check(cell) ? Py_XNewRef(PyCell_GET(cell)) : NULL;
}

/* Value of non-root node n from its parent's value v (NULL under the
 * root): a new reference, or NULL with or without an exception. */
static PyObject *fetch_value(const guard_ctx *c, const guard_node *n, PyObject *v)
{
    PyObject *r;
    switch ((guard_acc)n->kind) {
    case GUARD_LOCAL: return n->index < c->nlocals ? Py_XNewRef(c->locals[n->index]) : NULL;
    case GUARD_GLOBAL:
        r = PyDict_GetItemWithError(c->globals, n->key);
        if (!r && !PyErr_Occurred() && c->builtins)
            r = PyDict_GetItemWithError(c->builtins, n->key);
        return Py_XNewRef(r);
    case GUARD_ATTR: return PyObject_GetAttr(v, n->key);
    case GUARD_ITEM: return item(n, v);
    case GUARD_DICT_ITEM:
        if (n->index == 1 && !PyDict_Check(v))
            return NULL;
        if (!PyDict_CheckExact(v) && n->index != 1)
            return PyObject_GetItem(v, n->key);
        return Py_XNewRef(PyDict_GetItemWithError(v, n->key));
    case GUARD_CLOSURE_CELL: return cell_contents(n, v);
    case GUARD_TYPE: return Py_NewRef((PyObject *)Py_TYPE(v));
    case GUARD_ROOT: break;
    }
    PyErr_SetString(PyExc_SystemError, "guards: bad accessor kind");
    return NULL;
}

/* Leaves of n on v, then every child subtree that has leaves, keeping the
 * wanted values of subtrees that passed: 1, 0 or -1. */
static int walk_node(walk *w, const guard_node *n, PyObject *v)
{
    for (int i = 0; i < n->nleaves; i++) {
        int r = guard_leaf_check(&w->c, n, &n->leaves[i], v);
        if (r != 1)
            return r;
    }
    for (int i = 0; i < n->nkids; i++) {
        const guard_node *k = n->kids[i];
        if (!k->nbelow)
            continue;
        PyObject *kv = fetch_value(&w->c, k, v);
        if (!kv)
            return PyErr_Occurred() ? guard_fail_exc(&w->c, k->source) : 0;
        int r = walk_node(w, k, kv);
        if (r == 1 && w->want && w->want[k->id])
            w->vals[k->id] = kv;
        else
            Py_DECREF(kv);
        if (r != 1)
            return r;
    }
    return 1;
}

int guard_check_values(const guard_tree *t, PyObject *const *locals, int nlocals,
                       PyObject *globals, PyObject *builtins, const uint8_t *want,
                       PyObject **vals)
{
    if (!globals || !PyDict_Check(globals) || (builtins && !PyDict_Check(builtins)))
        return PyErr_SetString(PyExc_TypeError, "guard_check_values: globals and builtins "
                               "must be dicts"), -1;
    walk w = {.c = {.tree = t, .locals = locals, .nlocals = nlocals < 0 ? 0 : nlocals,
                    .globals = globals, .builtins = builtins},
              .want = want, .vals = vals};
    int r = walk_node(&w, t->nodes[0], NULL);
    for (int i = 0; r != 1 && want && i < t->nnodes; i++)
        if (want[i])
            Py_CLEAR(vals[i]);
    return r;
}
