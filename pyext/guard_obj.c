/* smelt._C._GuardTree: a thin Python face of guards/guards.h for tests and
 * introspection. Nodes are ints (0 = the root); every builder returns the
 * node id, every leaf method returns None. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <time.h>

#include "../guards/guards.h"
#include "module.h"

#define DYN_MAX 64

typedef struct GuardTreeObject {
    PyObject_HEAD
    guard_tree *t;
} GuardTreeObject;

/* Node of self with the id in o; NULL with ValueError/TypeError. */
static guard_node *node_arg(GuardTreeObject *self, PyObject *o)
{
    long id = PyLong_AsLong(o);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    guard_node *n = id >= INT32_MIN && id <= INT32_MAX ? guard_tree_node(self->t, (int)id) : NULL;
    if (!n)
        PyErr_Format(PyExc_ValueError, "no guard node %ld (the tree has %d)", id,
                     guard_tree_num_nodes(self->t));
    return n;
}

static PyObject *node_id(guard_node *n)
{
    return n ? PyLong_FromLong(guard_node_id(n)) : NULL;
}

static PyObject *status(int rc)
{
    return rc ? NULL : Py_NewRef(Py_None);
}

/* ------------------------------------------------------------------ */
/* accessors                                                          */

static PyObject *gt_local(GuardTreeObject *self, PyObject *args)
{
    int index;
    const char *name;
    if (!PyArg_ParseTuple(args, "is:local", &index, &name))
        return NULL;
    return node_id(guard_local(self->t, index, name));
}

static PyObject *gt_global(GuardTreeObject *self, PyObject *name)
{
    const char *s = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    if (!s)
        return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "global_: expected a str");
    return node_id(guard_global(self->t, s));
}

static PyObject *gt_attr(GuardTreeObject *self, PyObject *args)
{
    PyObject *p;
    const char *name;
    guard_node *n;
    if (!PyArg_ParseTuple(args, "Os:attr", &p, &name) || !(n = node_arg(self, p)))
        return NULL;
    return node_id(guard_attr(self->t, n, name));
}

static PyObject *gt_item(GuardTreeObject *self, PyObject *args)
{
    PyObject *p;
    Py_ssize_t i;
    guard_node *n;
    if (!PyArg_ParseTuple(args, "On:item", &p, &i) || !(n = node_arg(self, p)))
        return NULL;
    return node_id(guard_item(self->t, n, i));
}

static PyObject *gt_dict_item(GuardTreeObject *self, PyObject *args)
{
    PyObject *p, *key;
    guard_node *n;
    if (!PyArg_ParseTuple(args, "OO:dict_item", &p, &key) || !(n = node_arg(self, p)))
        return NULL;
    return node_id(guard_dict_item(self->t, n, key));
}

static PyObject *gt_closure_cell(GuardTreeObject *self, PyObject *args)
{
    PyObject *p;
    int i;
    guard_node *n;
    if (!PyArg_ParseTuple(args, "Oi:closure_cell", &p, &i) || !(n = node_arg(self, p)))
        return NULL;
    return node_id(guard_closure_cell(self->t, n, i));
}

static PyObject *gt_type_of(GuardTreeObject *self, PyObject *p)
{
    guard_node *n = node_arg(self, p);
    return n ? node_id(guard_type(self->t, n)) : NULL;
}

/* ------------------------------------------------------------------ */
/* leaves                                                             */

/* (node, obj) arguments of a leaf method. */
static guard_node *node_obj(GuardTreeObject *self, PyObject *args, const char *fmt,
                            PyObject **obj)
{
    PyObject *p;
    if (!PyArg_ParseTuple(args, fmt, &p, obj))
        return NULL;
    return node_arg(self, p);
}

static PyObject *gt_type_is(GuardTreeObject *self, PyObject *args)
{
    PyObject *type;
    guard_node *n = node_obj(self, args, "OO:type_is", &type);
    return n ? status(guard_add_type_is(n, (PyTypeObject *)type)) : NULL;
}

static PyObject *gt_id_is(GuardTreeObject *self, PyObject *args)
{
    PyObject *o;
    guard_node *n = node_obj(self, args, "OO:id_is", &o);
    return n ? status(guard_add_id_is(n, o)) : NULL;
}

static PyObject *gt_equals(GuardTreeObject *self, PyObject *args)
{
    PyObject *o;
    guard_node *n = node_obj(self, args, "OO:equals", &o);
    return n ? status(guard_add_equals(n, o)) : NULL;
}

static PyObject *gt_value_eq(GuardTreeObject *self, PyObject *args)
{
    PyObject *o;
    guard_node *n = node_obj(self, args, "OO:value_eq", &o);
    return n ? status(guard_add_value_eq(n, o)) : NULL;
}

static PyObject *gt_has_key(GuardTreeObject *self, PyObject *args)
{
    PyObject *nd, *key;
    int present;
    if (!PyArg_ParseTuple(args, "OOp:has_key", &nd, &key, &present))
        return NULL;
    PyObject *a = Py_BuildValue("(OO)", nd, key);
    PyObject *k;
    guard_node *n = a ? node_obj(self, a, "OO:has_key", &k) : NULL;
    Py_XDECREF(a);
    return n ? status(guard_add_has_key(n, key, present)) : NULL;
}

static PyObject *gt_bool_is(GuardTreeObject *self, PyObject *args)
{
    PyObject *o;
    guard_node *n = node_obj(self, args, "OO:bool_is", &o);
    int v = n ? PyObject_IsTrue(o) : -1;
    return v < 0 ? NULL : status(guard_add_bool(n, v));
}

static PyObject *gt_len_eq(GuardTreeObject *self, PyObject *args)
{
    PyObject *p;
    Py_ssize_t len;
    guard_node *n;
    if (!PyArg_ParseTuple(args, "On:len_eq", &p, &len) || !(n = node_arg(self, p)))
        return NULL;
    return status(guard_add_len_eq(n, len));
}

static PyObject *gt_dict_keys(GuardTreeObject *self, PyObject *args)
{
    PyObject *keys;
    guard_node *n = node_obj(self, args, "OO:dict_keys", &keys);
    return n ? status(guard_add_dict_keys(n, keys)) : NULL;
}

static PyObject *gt_is_none(GuardTreeObject *self, PyObject *p)
{
    guard_node *n = node_arg(self, p);
    return n ? status(guard_add_none(n, 1)) : NULL;
}

static PyObject *gt_not_none(GuardTreeObject *self, PyObject *p)
{
    guard_node *n = node_arg(self, p);
    return n ? status(guard_add_none(n, 0)) : NULL;
}

static PyObject *gt_empty_dict_or_none(GuardTreeObject *self, PyObject *p)
{
    guard_node *n = node_arg(self, p);
    return n ? status(guard_add_empty_dict_or_none(n)) : NULL;
}

/* dynamic: None or one truth value per dim of the example. */
static int dynamic_arg(PyObject *dyn, PyObject *example, uint8_t *out)
{
    if (dyn == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(dyn, "tensor_match: dynamic must be a sequence");
    PyObject *shape = seq ? PyObject_GetAttrString(example, "shape") : NULL;
    Py_ssize_t n = seq ? PySequence_Fast_GET_SIZE(seq) : 0;
    Py_ssize_t ndim = shape ? PyObject_Length(shape) : -1;
    int rc = ndim < 0 ? -1 : 0;
    if (rc == 0 && (n != ndim || n > DYN_MAX))
        rc = (PyErr_Format(PyExc_ValueError, "tensor_match: dynamic has %zd flags, the "
                           "example has %zd dims", n, ndim), -1);
    for (Py_ssize_t d = 0; rc == 0 && d < n; d++) {
        int v = PyObject_IsTrue(PySequence_Fast_GET_ITEM(seq, d));
        rc = v < 0 ? -1 : 0;
        out[d] = (uint8_t)(v > 0);
    }
    Py_XDECREF(seq);
    Py_XDECREF(shape);
    return rc;
}

static PyObject *gt_tensor_match(GuardTreeObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"node", "example", "dynamic", NULL};
    PyObject *p, *ex, *dyn = Py_None;
    uint8_t flags[DYN_MAX] = {0};
    guard_node *n;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:tensor_match", kwlist, &p, &ex, &dyn) ||
        !(n = node_arg(self, p)) || dynamic_arg(dyn, ex, flags))
        return NULL;
    return status(guard_add_tensor_match(n, ex, dyn == Py_None ? NULL : flags));
}

static PyObject *gt_global_state(GuardTreeObject *self, PyObject *unused)
{
    (void)unused;
    return status(guard_add_global_state(self->t));
}

/* ------------------------------------------------------------------ */
/* use                                                                */

/* guard_check on a locals sequence; builtins None -> this interpreter's. */
static int run_check(GuardTreeObject *self, PyObject *locals, PyObject *globals,
                     PyObject *builtins, char *reason, size_t n)
{
    PyObject *seq = PySequence_Fast(locals, "check: locals must be a list or tuple");
    if (!seq)
        return -1;
    Py_ssize_t nl = PySequence_Fast_GET_SIZE(seq);
    int rc = nl > INT32_MAX ? (PyErr_SetString(PyExc_ValueError, "too many locals"), -1)
             : guard_check(self->t, PySequence_Fast_ITEMS(seq), (int)nl, globals,
                           builtins == Py_None ? PyEval_GetBuiltins() : builtins, reason, n);
    Py_DECREF(seq);
    return rc;
}

static PyObject *gt_check(GuardTreeObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"locals", "globals", "builtins", NULL};
    PyObject *locals, *globals, *builtins = Py_None;
    char reason[512];
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:check", kwlist, &locals, &globals,
                                     &builtins))
        return NULL;
    int rc = run_check(self, locals, globals, builtins, reason, sizeof reason);
    if (rc < 0)
        return NULL;
    return rc ? Py_BuildValue("(OO)", Py_True, Py_None) : Py_BuildValue("(Os)", Py_False, reason);
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* bench(locals, globals, iterations): mean ns per guard_check in C. */
static PyObject *gt_bench(GuardTreeObject *self, PyObject *args)
{
    PyObject *locals, *globals, *seq;
    Py_ssize_t iters;
    if (!PyArg_ParseTuple(args, "OO!n:bench", &locals, &PyDict_Type, &globals, &iters))
        return NULL;
    if (!(seq = PySequence_Fast(locals, "bench: locals must be a list or tuple")))
        return NULL;
    PyObject *builtins = PyEval_GetBuiltins();
    int nl = (int)PySequence_Fast_GET_SIZE(seq), rc = 1;
    double t0 = now_ns();
    for (Py_ssize_t i = 0; rc == 1 && i < iters; i++)
        rc = guard_check(self->t, PySequence_Fast_ITEMS(seq), nl, globals, builtins, NULL, 0);
    double dt = now_ns() - t0;
    Py_DECREF(seq);
    if (rc < 0)
        return NULL;
    if (rc == 0)
        return PyErr_Format(PyExc_ValueError, "bench: the guards fail on these inputs");
    return PyFloat_FromDouble(iters > 0 ? dt / (double)iters : 0.0);
}

static PyObject *gt_source(GuardTreeObject *self, PyObject *p)
{
    guard_node *n = node_arg(self, p);
    return n ? PyUnicode_FromString(guard_node_source(n)) : NULL;
}

static PyObject *gt_str(GuardTreeObject *self)
{
    char *s = guard_tree_print(self->t);
    if (!s)
        return PyErr_NoMemory();
    PyObject *r = PyUnicode_FromString(s);
    free(s);
    return r;
}

static PyObject *gt_num_nodes(GuardTreeObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromLong(guard_tree_num_nodes(self->t));
}

static PyObject *gt_num_checks(GuardTreeObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromLong(guard_tree_num_checks(self->t));
}

/* ------------------------------------------------------------------ */
/* type                                                               */

static PyObject *gt_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    if (PyTuple_GET_SIZE(args) || (kw && PyDict_GET_SIZE(kw)))
        return PyErr_Format(PyExc_TypeError, "_GuardTree() takes no arguments");
    GuardTreeObject *self = (GuardTreeObject *)type->tp_alloc(type, 0);
    if (self && !(self->t = guard_tree_new()))
        Py_CLEAR(self);
    return (PyObject *)self;
}

static int gt_traverse(GuardTreeObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return guard_tree_traverse(self->t, visit, arg);
}

static int gt_clear(GuardTreeObject *self)
{
    guard_tree *t = self->t;
    self->t = NULL;
    guard_tree_free(t);
    return 0;
}

static void gt_dealloc(GuardTreeObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    gt_clear(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

#define VARARGS(f) (PyCFunction)(void (*)(void))(f)

static PyMethodDef gt_methods[] = {
    {"local", VARARGS(gt_local), METH_VARARGS, "local(index, name) -> node"},
    {"global_", VARARGS(gt_global), METH_O, "global_(name) -> node (globals, then builtins)"},
    {"attr", VARARGS(gt_attr), METH_VARARGS, "attr(node, name) -> node"},
    {"item", VARARGS(gt_item), METH_VARARGS, "item(node, index) -> node"},
    {"dict_item", VARARGS(gt_dict_item), METH_VARARGS, "dict_item(node, key) -> node"},
    {"closure_cell", VARARGS(gt_closure_cell), METH_VARARGS, "closure_cell(node, i) -> node"},
    {"type_of", VARARGS(gt_type_of), METH_O, "type_of(node) -> node"},
    {"type_is", VARARGS(gt_type_is), METH_VARARGS, "type_is(node, type)"},
    {"id_is", VARARGS(gt_id_is), METH_VARARGS, "id_is(node, obj)"},
    {"equals", VARARGS(gt_equals), METH_VARARGS, "equals(node, constant)"},
    {"value_eq", VARARGS(gt_value_eq), METH_VARARGS, "value_eq(node, value)"},
    {"has_key", VARARGS(gt_has_key), METH_VARARGS, "has_key(node, key, present)"},
    {"bool_is", VARARGS(gt_bool_is), METH_VARARGS, "bool_is(node, value)"},
    {"len_eq", VARARGS(gt_len_eq), METH_VARARGS, "len_eq(node, n)"},
    {"dict_keys", VARARGS(gt_dict_keys), METH_VARARGS, "dict_keys(node, keys_tuple)"},
    {"is_none", VARARGS(gt_is_none), METH_O, "is_none(node)"},
    {"not_none", VARARGS(gt_not_none), METH_O, "not_none(node)"},
    {"empty_dict_or_none", VARARGS(gt_empty_dict_or_none), METH_O, "empty_dict_or_none(node)"},
    {"tensor_match", VARARGS(gt_tensor_match), METH_VARARGS | METH_KEYWORDS,
     "tensor_match(node, example, dynamic=None)"},
    {"global_state", VARARGS(gt_global_state), METH_NOARGS, "global_state()"},
    {"check", VARARGS(gt_check), METH_VARARGS | METH_KEYWORDS,
     "check(locals, globals, builtins=None) -> (ok, reason or None)"},
    {"bench", VARARGS(gt_bench), METH_VARARGS,
     "bench(locals, globals, iterations) -> mean ns per check (timed in C)"},
    {"source", VARARGS(gt_source), METH_O, "source(node) -> str"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef gt_getset[] = {
    {"num_nodes", (getter)gt_num_nodes, NULL, "nodes, root included", NULL},
    {"num_checks", (getter)gt_num_checks, NULL, "leaf checks", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot gt_slots[] = {
    {Py_tp_new, gt_new},
    {Py_tp_dealloc, gt_dealloc},
    {Py_tp_traverse, gt_traverse},
    {Py_tp_clear, gt_clear},
    {Py_tp_methods, gt_methods},
    {Py_tp_getset, gt_getset},
    {Py_tp_str, gt_str},
    {Py_tp_doc, "_GuardTree()\n--\n\nA guard tree (guards/guards.h), for tests."},
    {0, NULL},
};

static PyType_Spec gt_spec = {
    .name = "smelt._C._GuardTree",
    .basicsize = sizeof(GuardTreeObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = gt_slots,
};

int pyext_guard_type_init(PyObject *m)
{
    PyObject *tp = PyType_FromModuleAndSpec(m, &gt_spec, NULL);
    if (!tp)
        return -1;
    int rc = PyModule_AddObjectRef(m, "_GuardTree", tp);
    Py_DECREF(tp);
    return rc;
}
