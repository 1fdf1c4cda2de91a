/* guards.c — the guard tree: construction, accessors (fetches) and
 * evaluation. Leaf checks are in leaves.c and tensor.c, texts in text.c. */
#include "guard_int.h"

#include <string.h>

/* ------------------------------------------------------------------ */
/* tree                                                               */

/* A new node of kind under parent (NULL for the root), registered in t.
 * Takes ownership of key and source (also on failure). NULL + exception. */
static guard_node *node_new(guard_tree *t, guard_node *parent, guard_acc kind,
                            Py_ssize_t index, PyObject *key, char *source)
{
    guard_node *n = NULL;
    if (t->nnodes == t->cnodes) {
        int cap = t->cnodes ? 2 * t->cnodes : 16;
        guard_node **nodes = PyMem_Realloc(t->nodes, sizeof *nodes * (size_t)cap);
        if (!nodes)
            goto oom;
        t->nodes = nodes;
        t->cnodes = cap;
    }
    if (parent && parent->nkids == parent->ckids) {
        int cap = parent->ckids ? 2 * parent->ckids : 4;
        guard_node **kids = PyMem_Realloc(parent->kids, sizeof *kids * (size_t)cap);
        if (!kids)
            goto oom;
        parent->kids = kids;
        parent->ckids = cap;
    }
    if (!(n = PyMem_Calloc(1, sizeof *n)))
        goto oom;
    *n = (guard_node){.tree = t, .parent = parent, .id = t->nnodes, .kind = (uint8_t)kind,
                      .index = index, .key = key, .source = source};
    t->nodes[t->nnodes++] = n;
    if (parent)
        parent->kids[parent->nkids++] = n;
    return n;
oom:
    Py_XDECREF(key);
    PyMem_Free(source);
    PyErr_NoMemory();
    return NULL;
}

static void node_free(guard_node *n)
{
    for (int i = 0; i < n->nleaves; i++) {
        Py_XDECREF(n->leaves[i].obj);
        Py_XDECREF(n->leaves[i].aux);
        guard_tensor_spec_free(n->leaves[i].ts);
    }
    Py_XDECREF(n->key);
    PyMem_Free(n->leaves);
    PyMem_Free(n->kids);
    PyMem_Free(n->source);
    PyMem_Free(n);
}

static int intern_names(guard_tree *t)
{
#define GUARD_INTERN(f) if (!(t->s_##f = PyUnicode_InternFromString(#f))) return -1;
    GUARD_NAMES(GUARD_INTERN)
#undef GUARD_INTERN
    return 0;
}

guard_tree *guard_tree_new(void)
{
    guard_tree *t = PyMem_Calloc(1, sizeof *t);
    if (!t)
        return (guard_tree *)PyErr_NoMemory();
    char *src = PyMem_Malloc(1);
    if (src)
        src[0] = '\0';
    if (!(t->index = PyDict_New()) || intern_names(t) ||
        !node_new(t, NULL, GUARD_ROOT, 0, NULL, src)) {
        guard_tree_free(t);
        return NULL;
    }
    return t;
}

void guard_tree_free(guard_tree *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->nnodes; i++)
        node_free(t->nodes[i]);
    PyMem_Free(t->nodes);
    Py_XDECREF(t->index);
#define GUARD_DROP(f) Py_XDECREF(t->s_##f);
    GUARD_NAMES(GUARD_DROP)
#undef GUARD_DROP
    PyMem_Free(t);
}

int guard_tree_traverse(const guard_tree *t, visitproc visit, void *arg)
{
    if (!t)
        return 0;
    Py_VISIT(t->index);
    for (int i = 0; i < t->nnodes; i++) {
        const guard_node *n = t->nodes[i];
        Py_VISIT(n->key);
        for (int k = 0; k < n->nleaves; k++) {
            const guard_leaf *l = &n->leaves[k];
            Py_VISIT(l->obj);
            Py_VISIT(l->aux);
            if (l->ts) {
                Py_VISIT(l->ts->type);
                Py_VISIT(l->ts->dtype);
                Py_VISIT(l->ts->device);
            }
        }
    }
    return 0;
}

guard_node *guard_root(guard_tree *t) { return t->nodes[0]; }

guard_node *guard_tree_node(const guard_tree *t, int id)
{
    return id >= 0 && id < t->nnodes ? t->nodes[id] : NULL;
}

int guard_tree_num_nodes(const guard_tree *t) { return t->nnodes; }
int guard_tree_num_checks(const guard_tree *t) { return t->nchecks; }
int guard_tree_num_locals(const guard_tree *t) { return t->nlocals; }
int guard_node_id(const guard_node *n) { return n->id; }
guard_acc guard_node_kind(const guard_node *n) { return (guard_acc)n->kind; }
const char *guard_node_source(const guard_node *n) { return n->source; }

/* ------------------------------------------------------------------ */
/* accessors                                                          */

/* The child (kind, key) of parent: the existing one, or a new one. key is
 * stolen (also on failure); it is the dedupe key and, except for LOCAL and
 * CLOSURE_CELL, what the fetch uses. `name` only feeds the source text. */
static guard_node *child(guard_tree *t, guard_node *parent, guard_acc kind,
                         Py_ssize_t index, PyObject *key, const char *name)
{
    if (!key)
        return NULL;
    guard_node *n = NULL;
    PyObject *dk = Py_BuildValue("(iiO)", parent->id, (int)kind, key);
    PyObject *found = dk ? PyDict_GetItemWithError(t->index, dk) : NULL;
    if (found) {
        n = t->nodes[PyLong_AsLong(found)];
    } else if (dk && !PyErr_Occurred()) {
        char *src = guard_source_new(parent, kind, index, key, name);
        bool keep = kind != GUARD_LOCAL && kind != GUARD_CLOSURE_CELL && kind != GUARD_TYPE;
        n = src ? node_new(t, parent, kind, index, keep ? Py_NewRef(key) : NULL, src) : NULL;
        PyObject *id = n ? PyLong_FromLong(n->id) : NULL;
        if (n && (!id || PyDict_SetItem(t->index, dk, id) < 0))
            n = NULL;   /* the node stays in t (freed with it), unreachable by dedupe */
        Py_XDECREF(id);
    }
    Py_XDECREF(dk);
    Py_DECREF(key);
    return n;
}

/* parent must be a non-root node of t (the root has no value). */
static int check_parent(guard_tree *t, guard_node *parent)
{
    if (!parent || parent->tree != t)
        PyErr_SetString(PyExc_ValueError, "guards: parent node belongs to another tree");
    else if (parent->kind == GUARD_ROOT)
        PyErr_SetString(PyExc_ValueError, "guards: the root has no value to fetch from "
                        "(use guard_local / guard_global)");
    else
        return 0;
    return -1;
}

guard_node *guard_local(guard_tree *t, int index, const char *name)
{
    if (index < 0)
        return PyErr_Format(PyExc_ValueError, "guard_local: index %d < 0", index), NULL;
    guard_node *n = child(t, t->nodes[0], GUARD_LOCAL, index, PyLong_FromLong(index), name);
    if (n && index >= t->nlocals)
        t->nlocals = index + 1;
    return n;
}

/* name (UTF-8) as an interned str; NULL + TypeError/UnicodeError. */
static PyObject *intern(const char *name)
{
    if (!name)
        return PyErr_SetString(PyExc_TypeError, "guards: NULL name"), NULL;
    return PyUnicode_InternFromString(name);
}

guard_node *guard_global(guard_tree *t, const char *name)
{
    return child(t, t->nodes[0], GUARD_GLOBAL, 0, intern(name), NULL);
}

guard_node *guard_attr(guard_tree *t, guard_node *parent, const char *name)
{
    if (check_parent(t, parent))
        return NULL;
    return child(t, parent, GUARD_ATTR, 0, intern(name), NULL);
}

guard_node *guard_item(guard_tree *t, guard_node *parent, Py_ssize_t index)
{
    if (check_parent(t, parent))
        return NULL;
    return child(t, parent, GUARD_ITEM, index, PyLong_FromSsize_t(index), NULL);
}

/* An exact str, int or bytes, or a tuple of those: a key whose equality
 * implies its type. */
static bool dict_key_ok(PyObject *key, int depth)
{
    if (PyUnicode_CheckExact(key) || PyLong_CheckExact(key) || PyBytes_CheckExact(key))
        return true;
    if (!PyTuple_CheckExact(key) || depth > 4)
        return false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(key); i++)
        if (!dict_key_ok(PyTuple_GET_ITEM(key, i), depth + 1))
            return false;
    return true;
}

guard_node *guard_dict_item(guard_tree *t, guard_node *parent, PyObject *key)
{
    if (check_parent(t, parent))
        return NULL;
    if (!key || !dict_key_ok(key, 0))
        return PyErr_Format(PyExc_TypeError, "guard_dict_item: key must be an exact str, int or bytes, or a "
                            "tuple of those, got %s", key ? Py_TYPE(key)->tp_name : "NULL"), NULL;
    return child(t, parent, GUARD_DICT_ITEM, 0, Py_NewRef(key), NULL);
}

guard_node *guard_dict_item_id(guard_tree *t, guard_node *parent, PyObject *key, const char *name)
{
    if (check_parent(t, parent))
        return NULL;
    if (!key || !name)
        return PyErr_SetString(PyExc_TypeError, "guard_dict_item_id: key and name required"), NULL;
    return child(t, parent, GUARD_DICT_ITEM, 1, Py_NewRef(key), name);
}

guard_node *guard_closure_cell(guard_tree *t, guard_node *parent, int index)
{
    if (check_parent(t, parent))
        return NULL;
    if (index < 0)
        return PyErr_Format(PyExc_ValueError, "guard_closure_cell: index %d < 0", index), NULL;
    return child(t, parent, GUARD_CLOSURE_CELL, index, PyLong_FromLong(index), NULL);
}

guard_node *guard_type(guard_tree *t, guard_node *parent)
{
    if (check_parent(t, parent))
        return NULL;
    return child(t, parent, GUARD_TYPE, 0, Py_NewRef(Py_None), NULL);
}

/* ------------------------------------------------------------------ */
/* leaves                                                             */

static bool leaf_same(const guard_leaf *a, const guard_leaf *b)
{
    if (a->kind != b->kind || a->n != b->n || a->obj != b->obj || a->aux != b->aux)
        return false;
    return !a->ts || guard_tensor_spec_equal(a->ts, b->ts);
}

static void leaf_drop(guard_leaf *l)
{
    Py_XDECREF(l->obj);
    Py_XDECREF(l->aux);
    guard_tensor_spec_free(l->ts);
}

void guard_node_fetch(guard_node *n)
{
    for (guard_node *p = n; p; p = p->parent)
        p->nbelow++;
}

int guard_leaf_push(guard_node *n, guard_leaf leaf)
{
    for (int i = 0; i < n->nleaves; i++)
        if (leaf_same(&n->leaves[i], &leaf)) {
            leaf_drop(&leaf);
            return 0;
        }
    if (n->nleaves == n->cleaves) {
        int cap = n->cleaves ? 2 * n->cleaves : 2;
        guard_leaf *ls = PyMem_Realloc(n->leaves, sizeof *ls * (size_t)cap);
        if (!ls) {
            leaf_drop(&leaf);
            PyErr_NoMemory();
            return -1;
        }
        n->leaves = ls;
        n->cleaves = cap;
    }
    n->leaves[n->nleaves++] = leaf;
    n->tree->nchecks++;
    for (guard_node *p = n; p; p = p->parent)
        p->nbelow++;
    return 0;
}

/* ------------------------------------------------------------------ */
/* evaluation                                                         */

int guard_fail(guard_ctx *c, const char *fmt, ...)
{
    if (c->reason && c->n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->reason, c->n, fmt, ap);
        va_end(ap);
    }
    return 0;
}

int guard_fail_exc(guard_ctx *c, const char *what)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *msg = value ? PyObject_Str(value) : NULL;
    const char *m = msg ? PyUnicode_AsUTF8(msg) : NULL;
    PyErr_Clear();
    guard_fail(c, "%s: %s: %s", what, ((PyTypeObject *)type)->tp_name, m ? m : "?");
    Py_XDECREF(msg);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return 0;
}

/* A fetch that raised: "<source> could not be fetched: <Type>: <msg>". */
static int fetch_raised(guard_ctx *c, const guard_node *n)
{
    char what[512];
    snprintf(what, sizeof what, "%s could not be fetched", n->source);
    return guard_fail_exc(c, what);
}

static int fetch_local(guard_ctx *c, const guard_node *n, PyObject **out)
{
    if (n->index >= c->nlocals)
        return guard_fail(c, "%s is missing: the frame has %d locals", n->source, c->nlocals);
    if (!(*out = c->locals[n->index]))
        return guard_fail(c, "%s is unbound", n->source);
    Py_INCREF(*out);
    return 1;
}

static int fetch_global(guard_ctx *c, const guard_node *n, PyObject **out)
{
    PyObject *v = PyDict_GetItemWithError(c->globals, n->key);
    if (!v && !PyErr_Occurred() && c->builtins)
        v = PyDict_GetItemWithError(c->builtins, n->key);
    if (!v)
        return PyErr_Occurred() ? fetch_raised(c, n)
                                : guard_fail(c, "%s is missing (neither a global nor a builtin)",
                                             n->source);
    *out = Py_NewRef(v);
    return 1;
}

/* tuple/list fast path of ITEM; other objects go through __getitem__. */
static int fetch_item(guard_ctx *c, const guard_node *n, PyObject *v, PyObject **out)
{
    if (!PyTuple_Check(v) && !PyList_Check(v)) {
        *out = PyObject_GetItem(v, n->key);
        return *out ? 1 : fetch_raised(c, n);
    }
    Py_ssize_t len = Py_SIZE(v), i = n->index < 0 ? n->index + len : n->index;
    if (i < 0 || i >= len)
        return guard_fail(c, "%s could not be fetched: index out of range (len %zd)", n->source,
                          len);
    *out = Py_NewRef(PyTuple_Check(v) ? PyTuple_GET_ITEM(v, i) : PyList_GET_ITEM(v, i));
    return 1;
}

static int fetch_dict_item(guard_ctx *c, const guard_node *n, PyObject *v, PyObject **out)
{
    if (n->index == 1 && !PyDict_Check(v))
        return guard_fail(c, "%s could not be fetched: not a dict", n->source);
    if (!PyDict_CheckExact(v) && n->index != 1) {
        *out = PyObject_GetItem(v, n->key);
        return *out ? 1 : fetch_raised(c, n);
    }
    PyObject *r = PyDict_GetItemWithError(v, n->key);
    if (!r)
        return PyErr_Occurred() ? fetch_raised(c, n)
                                : guard_fail(c, "%s could not be fetched: no such key", n->source);
    *out = Py_NewRef(r);
    return 1;
}

static int fetch_cell(guard_ctx *c, const guard_node *n, PyObject *v, PyObject **out)
{
    if (!PyFunction_Check(v))
        return guard_fail(c, "%s could not be fetched: %s is a %s, not a function", n->source,
                          n->source, Py_TYPE(v)->tp_name);
    PyObject *cl = PyFunction_GET_CLOSURE(v);
    if (!cl || !PyTuple_Check(cl) || n->index >= PyTuple_GET_SIZE(cl))
        return guard_fail(c, "%s could not be fetched: the function has %zd closure cells",
                          n->source, cl && PyTuple_Check(cl) ? PyTuple_GET_SIZE(cl) : 0);
    PyObject *cell = PyTuple_GET_ITEM(cl, n->index);
    if (!PyCell_Check(cell) || !(*out = PyCell_GET(cell)))
        return guard_fail(c, "%s could not be fetched: empty cell", n->source);
    Py_INCREF(*out);
    return 1;
}

/* Value of node n from its parent's value v (NULL for root children) into
 * *out (new reference): 1, 0 (failed, reason written) or -1. */
static int fetch(guard_ctx *c, const guard_node *n, PyObject *v, PyObject **out)
{
    switch ((guard_acc)n->kind) {
    case GUARD_LOCAL: return fetch_local(c, n, out);
    case GUARD_GLOBAL: return fetch_global(c, n, out);
    case GUARD_ATTR:
        *out = PyObject_GetAttr(v, n->key);
        return *out ? 1 : fetch_raised(c, n);
    case GUARD_ITEM: return fetch_item(c, n, v, out);
    case GUARD_DICT_ITEM: return fetch_dict_item(c, n, v, out);
    case GUARD_CLOSURE_CELL: return fetch_cell(c, n, v, out);
    case GUARD_TYPE:
        *out = Py_NewRef((PyObject *)Py_TYPE(v));
        return 1;
    case GUARD_ROOT: break;
    }
    PyErr_SetString(PyExc_SystemError, "guards: bad accessor kind");
    return -1;
}

PyObject *guard_node_value(guard_ctx *c, const guard_node *n)
{
    if (n->kind == GUARD_ROOT)
        return NULL;
    PyObject *pv = NULL;
    if (n->parent->kind != GUARD_ROOT && !(pv = guard_node_value(c, n->parent)))
        return NULL;
    PyObject *out = NULL;
    int r = fetch(c, n, pv, &out);
    Py_XDECREF(pv);
    return r == 1 ? out : NULL;
}

/* Leaves of n on v, then every child subtree that has leaves: 1, 0 or -1. */
static int eval_node(guard_ctx *c, const guard_node *n, PyObject *v)
{
    for (int i = 0; i < n->nleaves; i++) {
        int r = guard_leaf_check(c, n, &n->leaves[i], v);
        if (r != 1)
            return r;
    }
    for (int i = 0; i < n->nkids; i++) {
        PyObject *cv;
        if (!n->kids[i]->nbelow)
            continue;   /* nothing to check there: not even fetched */
        int r = fetch(c, n->kids[i], v, &cv);
        if (r != 1)
            return r;
        r = eval_node(c, n->kids[i], cv);
        Py_DECREF(cv);
        if (r != 1)
            return r;
    }
    return 1;
}

int guard_check(const guard_tree *t, PyObject *const *locals, int nlocals, PyObject *globals,
                PyObject *builtins, char *reason, size_t n)
{
    if (!globals || !PyDict_Check(globals) || (builtins && !PyDict_Check(builtins))) {
        PyErr_Format(PyExc_TypeError, "guard_check: globals and builtins must be dicts, got %s "
                     "and %s", globals ? Py_TYPE(globals)->tp_name : "NULL",
                     builtins ? Py_TYPE(builtins)->tp_name : "NULL");
        return -1;
    }
    if (reason && n)
        reason[0] = '\0';
    guard_ctx c = {.tree = t, .locals = locals, .nlocals = nlocals < 0 ? 0 : nlocals,
                   .globals = globals, .builtins = builtins, .reason = reason, .n = n};
    return eval_node(&c, t->nodes[0], NULL);
}
