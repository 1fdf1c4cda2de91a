/* leaves.c — the leaf checks of the guard tree (except TENSOR_MATCH, in
 * tensor.c): their builders and their evaluation. */
#include "guard_int.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* constants                                                          */

#define CONST_MAX_DEPTH 16

static bool is_const(PyObject *v, int depth)
{
    if (v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v) ||
        PyUnicode_CheckExact(v) || PyBytes_CheckExact(v))
        return true;
    if (depth >= CONST_MAX_DEPTH)
        return false;
    if (PyAnySet_CheckExact(v)) {
        Py_ssize_t pos = 0;
        PyObject *k;
        Py_hash_t h;
        while (_PySet_NextEntry(v, &pos, &k, &h))
            if (!is_const(k, depth + 1))
                return false;
        return true;
    }
    if (!PyTuple_CheckExact(v))
        return false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); i++)
        if (!is_const(PyTuple_GET_ITEM(v, i), depth + 1))
            return false;
    return true;
}

bool guard_is_const(PyObject *v) { return is_const(v, 0); }

/* Floats: NaN equals NaN, -0.0 differs from 0.0 (they behave differently). */
static bool float_equal(double x, double y)
{
    if (isnan(x) || isnan(y))
        return isnan(x) && isnan(y);
    return x == y && signbit(x) == signbit(y);
}

/* Sets of constants a and b (same exact type): each element of a has an
 * equal element of the same type in b. An element whose equality implies
 * its type (str, bytes, None, tuples of those) is looked up by hash; a
 * number is compared with b's elements one by one (1, True and 1.0 are
 * one set element). */
static bool set_equal(PyObject *a, PyObject *b)
{
    if (PySet_GET_SIZE(a) != PySet_GET_SIZE(b))
        return false;
    Py_ssize_t pa = 0;
    PyObject *x;
    Py_hash_t h;
    while (_PySet_NextEntry(a, &pa, &x, &h)) {
        int in = PySet_Contains(b, x);
        if (in != 1) {
            PyErr_Clear();
            return false;
        }
        if (PyUnicode_CheckExact(x) || PyBytes_CheckExact(x) || x == Py_None)
            continue;
        Py_ssize_t pb = 0;
        PyObject *y;
        bool found = false;
        while (!found && _PySet_NextEntry(b, &pb, &y, &h))
            found = guard_const_equal(x, y);
        if (!found)
            return false;
    }
    return true;
}

bool guard_const_equal(PyObject *a, PyObject *b)
{
    if (Py_TYPE(a) != Py_TYPE(b))
        return false;
    if (a == b)
        return true;
    if (PyLong_CheckExact(a))
        return PyObject_RichCompareBool(a, b, Py_EQ) == 1;   /* int == int cannot raise */
    if (PyFloat_CheckExact(a))
        return float_equal(PyFloat_AS_DOUBLE(a), PyFloat_AS_DOUBLE(b));
    if (PyUnicode_CheckExact(a))
        return PyUnicode_Compare(a, b) == 0;
    if (PyBytes_CheckExact(a))
        return PyObject_RichCompareBool(a, b, Py_EQ) == 1;
    if (PyAnySet_CheckExact(a))
        return set_equal(a, b);
    if (!PyTuple_CheckExact(a) || PyTuple_GET_SIZE(a) != PyTuple_GET_SIZE(b))
        return false;   /* None and bools are singletons: equal only if identical */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(a); i++)
        if (!guard_const_equal(PyTuple_GET_ITEM(a, i), PyTuple_GET_ITEM(b, i)))
            return false;
    return true;
}

/* ------------------------------------------------------------------ */
/* builders                                                           */

/* Leaves go on value nodes; only CALL_IS (global state) sits on the root. */
static int value_node(guard_node *n, const char *what)
{
    if (n && n->kind != GUARD_ROOT)
        return 0;
    PyErr_Format(PyExc_ValueError, "%s: %s", what,
                 n ? "the root has no value (checks go on LOCAL/GLOBAL nodes and below)"
                   : "no node");
    return -1;
}

static int push_obj(guard_node *n, guard_leaf_kind kind, PyObject *obj, const char *what)
{
    if (value_node(n, what))
        return -1;
    return guard_leaf_push(n, (guard_leaf){.kind = (uint8_t)kind, .obj = Py_XNewRef(obj)});
}

int guard_add_type_is(guard_node *n, PyTypeObject *type)
{
    if (!type || !PyType_Check((PyObject *)type))
        return PyErr_SetString(PyExc_TypeError, "guard_add_type_is: expected a type"), -1;
    return push_obj(n, LEAF_TYPE_IS, (PyObject *)type, "guard_add_type_is");
}

int guard_add_id_is(guard_node *n, PyObject *obj)
{
    if (!obj)
        return PyErr_SetString(PyExc_TypeError, "guard_add_id_is: NULL object"), -1;
    if (!PyType_SUPPORTS_WEAKREFS(Py_TYPE(obj)))
        return push_obj(n, LEAF_ID_IS, obj, "guard_add_id_is");
    if (value_node(n, "guard_add_id_is"))
        return -1;
    PyObject *ref = PyWeakref_NewRef(obj, NULL);
    return ref ? guard_leaf_push(n, (guard_leaf){.kind = LEAF_ID_WEAK, .obj = ref}) : -1;
}

int guard_add_equals(guard_node *n, PyObject *value)
{
    if (!value || !guard_is_const(value))
        return PyErr_Format(PyExc_TypeError, "guard_add_equals: expected None, bool, int, "
                            "float, str, bytes or a tuple or set of those, got %s",
                            value ? Py_TYPE(value)->tp_name : "NULL"), -1;
    return push_obj(n, LEAF_EQUALS, value, "guard_add_equals");
}

int guard_add_value_eq(guard_node *n, PyObject *value)
{
    if (!value)
        return PyErr_SetString(PyExc_TypeError, "guard_add_value_eq: NULL value"), -1;
    return push_obj(n, LEAF_VALUE_EQ, value, "guard_add_value_eq");
}

int guard_add_same_as(guard_node *n, const guard_node *other)
{
    if (!other || !n || other->tree != n->tree || other->kind == GUARD_ROOT)
        return PyErr_SetString(PyExc_ValueError, "guard_add_same_as: no such node"), -1;
    if (value_node(n, "guard_add_same_as"))
        return -1;
    return guard_leaf_push(n, (guard_leaf){.kind = LEAF_SAME_AS, .n = other->id});
}

int guard_add_not_same_as(guard_node *n, const guard_node *other)
{
    if (!other || !n || other->tree != n->tree || other->kind == GUARD_ROOT)
        return PyErr_SetString(PyExc_ValueError, "guard_add_not_same_as: no such node"), -1;
    if (value_node(n, "guard_add_not_same_as"))
        return -1;
    return guard_leaf_push(n, (guard_leaf){.kind = LEAF_NOT_SAME_AS, .n = other->id});
}

int guard_add_has_key(guard_node *n, PyObject *key, int present)
{
    if (!key || !guard_is_const(key) || PyObject_Hash(key) == -1) {
        PyErr_Clear();
        return PyErr_SetString(PyExc_TypeError, "guard_add_has_key: expected a hashable constant"), -1;
    }
    if (value_node(n, "guard_add_has_key"))
        return -1;
    return guard_leaf_push(n, (guard_leaf){.kind = LEAF_HAS_KEY, .obj = Py_NewRef(key), .n = !!present});
}

int guard_add_none(guard_node *n, int is_none)
{
    return push_obj(n, is_none ? LEAF_ID_IS : LEAF_ID_NOT, Py_None, "guard_add_none");
}

int guard_add_bool(guard_node *n, int value)
{
    return push_obj(n, LEAF_ID_IS, value ? Py_True : Py_False, "guard_add_bool");
}

int guard_add_len_eq(guard_node *n, Py_ssize_t len)
{
    if (len < 0)
        return PyErr_Format(PyExc_ValueError, "guard_add_len_eq: length %zd < 0", len), -1;
    if (value_node(n, "guard_add_len_eq"))
        return -1;
    return guard_leaf_push(n, (guard_leaf){.kind = LEAF_LEN_EQ, .n = len});
}

int guard_add_dict_keys(guard_node *n, PyObject *keys)
{
    bool ok = keys && PyTuple_CheckExact(keys);
    for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(keys); i++) {
        PyObject *k = PyTuple_GET_ITEM(keys, i);
        ok = PyUnicode_CheckExact(k) || PyLong_CheckExact(k);
    }
    if (!ok)
        return PyErr_SetString(PyExc_TypeError, "guard_add_dict_keys: expected a tuple of "
                               "exact str or int keys"), -1;
    return push_obj(n, LEAF_DICT_KEYS, keys, "guard_add_dict_keys");
}

int guard_add_empty_dict_or_none(guard_node *n)
{
    return push_obj(n, LEAF_EMPTY_DICT_OR_NONE, NULL, "guard_add_empty_dict_or_none");
}

int guard_add_tensor_match(guard_node *n, PyObject *example, const uint8_t *dynamic_dims)
{
    if (value_node(n, "guard_add_tensor_match"))
        return -1;
    guard_tensor_spec *ts = guard_tensor_spec_new(n->tree, example, dynamic_dims);
    if (!ts)
        return -1;
    return guard_leaf_push(n, (guard_leaf){.kind = LEAF_TENSOR, .ts = ts});
}

/* Global state: module.attr, called (with arg when arg is set, through
 * functools.partial, so the leaf calls it without arguments), must keep
 * returning the same object; with truth set, module.attr itself must keep
 * its truth (a TRUTH_IS leaf: no call per check). The global hook dicts are
 * read at trace time when a module call is inlined: hooks registered after
 * compiling must recompile. */
static const struct {
    const char *module, *attr, *arg, *text;
    int truth;
} global_state[] = {
    {"torch", "is_grad_enabled", NULL, "torch.is_grad_enabled()", 0},
    {"torch", "get_default_dtype", NULL, "torch.get_default_dtype()", 0},
    {"torch._C", "_is_any_autocast_enabled", NULL, "torch._C._is_any_autocast_enabled()", 0},
    {"torch._C", "_len_torch_dispatch_stack", NULL, "torch._C._len_torch_dispatch_stack()", 0},
    {"torch._C", "_len_torch_function_stack", NULL, "torch._C._len_torch_function_stack()", 0},
    {"torch.nn.modules.module", "_global_forward_hooks", NULL, "bool(nn.modules.module._global_forward_hooks)", 1},
    {"torch.nn.modules.module", "_global_forward_pre_hooks", NULL,
     "bool(nn.modules.module._global_forward_pre_hooks)", 1},
    {"torch.nn.modules.module", "_global_backward_hooks", NULL, "bool(nn.modules.module._global_backward_hooks)", 1},
    {"torch.nn.modules.module", "_global_backward_pre_hooks", NULL,
     "bool(nn.modules.module._global_backward_pre_hooks)", 1},
};

/* What global_state[i]'s leaf holds (new reference): module.attr, bound
 * to arg through functools.partial when arg is set. */
static PyObject *state_reader(size_t i)
{
    PyObject *mod = PyImport_ImportModule(global_state[i].module);
    PyObject *o = mod ? PyObject_GetAttrString(mod, global_state[i].attr) : NULL;
    Py_XDECREF(mod);
    if (!o || !global_state[i].arg)
        return o;
    PyObject *ft = PyImport_ImportModule("functools");
    PyObject *partial = ft ? PyObject_GetAttrString(ft, "partial") : NULL;
    PyObject *r = partial ? PyObject_CallFunction(partial, "Os", o, global_state[i].arg) : NULL;
    Py_XDECREF(ft);
    Py_XDECREF(partial);
    Py_DECREF(o);
    return r;
}

/* bool(o) as Py_True / Py_False (new reference), dicts by size; NULL with
 * an exception. */
static PyObject *truth_of(PyObject *o)
{
    int t = PyDict_CheckExact(o) ? PyDict_GET_SIZE(o) != 0 : PyObject_IsTrue(o);
    return t < 0 ? NULL : Py_NewRef(t ? Py_True : Py_False);
}

/* The autocast state an entry traced under CPU autocast is guarded on:
 * the CPU's enabled state and dtype, CUDA's enabled state. */
static const struct {
    const char *attr, *device, *text;
} autocast_state[] = {
    {"is_autocast_enabled", "cpu", "torch.is_autocast_enabled('cpu')"},
    {"get_autocast_dtype", "cpu", "torch.get_autocast_dtype('cpu')"},
    {"is_autocast_enabled", "cuda", "torch.is_autocast_enabled('cuda')"},   /* (any device's is guarded: this one runs eagerly) */
};

int guard_add_autocast_state(guard_tree *t)
{
    PyObject *torch = PyImport_ImportModule("torch"), *ft = PyImport_ImportModule("functools");
    PyObject *partial = ft ? PyObject_GetAttrString(ft, "partial") : NULL;
    int rc = torch && partial ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < sizeof autocast_state / sizeof autocast_state[0]; i++) {
        PyObject *f = PyObject_GetAttrString(torch, autocast_state[i].attr);
        PyObject *o = f ? PyObject_CallFunction(partial, "Os", f, autocast_state[i].device) : NULL;
        PyObject *now = o ? PyObject_CallNoArgs(o) : NULL;
        Py_XDECREF(f);
        if (!now) {
            Py_XDECREF(o);
            rc = -1;
            break;
        }
        rc = guard_leaf_push(t->nodes[0], (guard_leaf){.kind = LEAF_CALL_IS, .obj = o, .aux = now,
                                                        .text = autocast_state[i].text});
    }
    Py_XDECREF(torch);
    Py_XDECREF(ft);
    Py_XDECREF(partial);
    return rc;
}

int guard_add_global_state(guard_tree *t)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sizeof global_state / sizeof global_state[0]; i++) {
        PyObject *o = state_reader(i);
        PyObject *now = !o ? NULL : global_state[i].truth ? truth_of(o) : PyObject_CallNoArgs(o);
        if (!now) {
            Py_XDECREF(o);
            return -1;
        }
        rc = guard_leaf_push(t->nodes[0], (guard_leaf){.kind = global_state[i].truth ? LEAF_TRUTH_IS : LEAF_CALL_IS,
                                                        .obj = o, .aux = now, .text = global_state[i].text});
    }
    return rc;
}

/* ------------------------------------------------------------------ */
/* checks                                                             */

/* "<leaf text> failed: got <text of got>"; returns 0. */
static int failed_obj(guard_ctx *c, const guard_node *n, const guard_leaf *l, PyObject *got)
{
    guard_buf b = {0};
    guard_leaf_text(&b, n, l);
    guard_buf_printf(&b, " failed: got ");
    guard_obj_text(&b, got);
    guard_fail(c, "%s", b.s && !b.oom ? b.s : "guard failed (out of memory for the reason)");
    free(b.s);
    return 0;
}

/* len(v) into *len: 1, 0 (failed: v has no len) or -1. */
static int length(guard_ctx *c, const guard_node *n, PyObject *v, Py_ssize_t *len)
{
    if (PyTuple_CheckExact(v) || PyList_CheckExact(v) || PyDict_CheckExact(v)) {
        *len = PyDict_CheckExact(v) ? PyDict_GET_SIZE(v) : Py_SIZE(v);
        return 1;
    }
    *len = PyObject_Length(v);
    if (*len >= 0)
        return 1;
    char what[512];
    snprintf(what, sizeof what, "len(%s)", n->source);
    return guard_fail_exc(c, what);
}

static int check_len(guard_ctx *c, const guard_node *n, const guard_leaf *l, PyObject *v)
{
    Py_ssize_t len;
    int r = length(c, n, v, &len);
    if (r != 1 || len == l->n)
        return r;
    return guard_fail(c, "len(%s) == %zd failed: got %zd", n->source, l->n, len);
}

/* Keys of dict v in iteration order against the tuple l->obj. */
static int check_dict_keys(guard_ctx *c, const guard_node *n, const guard_leaf *l, PyObject *v)
{
    PyObject *want = l->obj;
    if (!PyDict_CheckExact(v)) {   /* OrderedDict & co: their own iteration order */
        PyObject *got = PySequence_Tuple(v);
        if (!got)
            return guard_fail_exc(c, n->source);
        int ok = guard_const_equal(got, want);
        int r = ok ? 1 : failed_obj(c, n, l, got);
        Py_DECREF(got);
        return r;
    }
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *val;
    bool ok = PyDict_GET_SIZE(v) == PyTuple_GET_SIZE(want);
    while (ok && PyDict_Next(v, &pos, &k, &val))
        ok = guard_const_equal(k, PyTuple_GET_ITEM(want, i++));
    if (ok)
        return 1;
    PyObject *got = PySequence_Tuple(v);
    int r = got ? failed_obj(c, n, l, got) : guard_fail_exc(c, n->source);
    Py_XDECREF(got);
    return r;
}

/* VALUE_EQ: same exact type and ==. */
static int check_value_eq(guard_ctx *c, const guard_node *n, const guard_leaf *l, PyObject *v)
{
    if (Py_TYPE(v) != Py_TYPE(l->obj))
        return failed_obj(c, n, l, v);
    int eq = PyObject_RichCompareBool(v, l->obj, Py_EQ);
    if (eq < 0)
        return guard_fail_exc(c, n->source);
    return eq ? 1 : failed_obj(c, n, l, v);
}

/* HAS_KEY: (key in v) == n. */
static int check_has_key(guard_ctx *c, const guard_node *n, const guard_leaf *l, PyObject *v)
{
    int in = PyDict_CheckExact(v) ? PyDict_Contains(v, l->obj) : PySequence_Contains(v, l->obj);
    if (in < 0)
        return guard_fail_exc(c, n->source);
    if (in == (int)l->n)
        return 1;
    guard_buf b = {0};
    guard_leaf_text(&b, n, l);
    guard_fail(c, "%s failed", b.s && !b.oom ? b.s : "key guard");
    free(b.s);
    return 0;
}

/* SAME_AS: v is the other node's value. */
static int check_same_as(guard_ctx *c, const guard_node *n, const guard_leaf *l, PyObject *v)
{
    const guard_node *o = c->tree->nodes[l->n];
    PyObject *ov = guard_node_value(c, o);
    if (!ov)
        return PyErr_Occurred() ? -1 : 0;
    Py_DECREF(ov);
    return ov == v ? 1 : guard_fail(c, "%s is %s failed: two objects", n->source, o->source);
}

/* NOT_SAME_AS: v is not the other node's value. */
static int check_not_same_as(guard_ctx *c, const guard_node *n, const guard_leaf *l, PyObject *v)
{
    const guard_node *o = c->tree->nodes[l->n];
    PyObject *ov = guard_node_value(c, o);
    if (!ov)
        return PyErr_Occurred() ? -1 : 0;
    Py_DECREF(ov);
    return ov != v ? 1 : guard_fail(c, "%s is not %s failed: one object", n->source, o->source);
}

/* ID_WEAK: the referent is alive and is v. */
static int check_id_weak(guard_ctx *c, const guard_node *n, const guard_leaf *l, PyObject *v)
{
    PyObject *target = smelt_weakref_target(l->obj);
    if (target != Py_None && target == v)
        return 1;
    if (target == Py_None)
        return guard_fail(c, "%s is <an object that no longer exists> failed", n->source);
    return failed_obj(c, n, l, v);
}

/* CALL_IS (the call's result) and TRUTH_IS (the held object's truth). */
static int check_call(guard_ctx *c, const guard_leaf *l)
{
    PyObject *r = l->kind == LEAF_TRUTH_IS ? truth_of(l->obj) : PyObject_CallNoArgs(l->obj);
    if (!r)
        return guard_fail_exc(c, l->text);
    int ok = r == l->aux;
    if (!ok) {
        guard_buf b = {0};
        guard_obj_text(&b, l->aux);
        guard_buf_printf(&b, " failed: got ");
        guard_obj_text(&b, r);
        guard_fail(c, "%s is %s", l->text, b.s && !b.oom ? b.s : "?");
        free(b.s);
    }
    Py_DECREF(r);
    return ok;
}

int guard_leaf_check(guard_ctx *c, const guard_node *n, const guard_leaf *l, PyObject *v)
{
    switch ((guard_leaf_kind)l->kind) {
    case LEAF_TYPE_IS:
        return (PyObject *)Py_TYPE(v) == l->obj ? 1 : failed_obj(c, n, l, (PyObject *)Py_TYPE(v));
    case LEAF_ID_IS: return v == l->obj ? 1 : failed_obj(c, n, l, v);
    case LEAF_ID_NOT: return v != l->obj ? 1 : failed_obj(c, n, l, v);
    case LEAF_ID_WEAK: return check_id_weak(c, n, l, v);
    case LEAF_EQUALS: return guard_const_equal(v, l->obj) ? 1 : failed_obj(c, n, l, v);
    case LEAF_VALUE_EQ: return check_value_eq(c, n, l, v);
    case LEAF_HAS_KEY: return check_has_key(c, n, l, v);
    case LEAF_SAME_AS: return check_same_as(c, n, l, v);
    case LEAF_NOT_SAME_AS: return check_not_same_as(c, n, l, v);
    case LEAF_LEN_EQ: return check_len(c, n, l, v);
    case LEAF_DICT_KEYS:
        return PyDict_Check(v) ? check_dict_keys(c, n, l, v) : failed_obj(c, n, l, v);
    case LEAF_EMPTY_DICT_OR_NONE:
        return v == Py_None || (PyDict_Check(v) && PyDict_GET_SIZE(v) == 0)
                   ? 1 : failed_obj(c, n, l, v);
    case LEAF_TENSOR: return guard_tensor_check(c, n, l->ts, v);
    case LEAF_CALL_IS: case LEAF_TRUTH_IS: return check_call(c, l);
    }
    PyErr_SetString(PyExc_SystemError, "guards: bad leaf kind");
    return -1;
}
