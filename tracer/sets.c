/* sets.c — sets and frozensets made by the traced code.
 *
 * A set built in the trace (BUILD_SET, a set comprehension, set(),
 * frozenset(), the results of set operators and methods) is a V_INST of
 * sub INST_SET: obj its type (set or frozenset), aux a real `set` private
 * to the trace holding one *key* per element, self_ a V_DICT from the
 * objects in it that hash by identity to the value each came from (-1:
 * none). Keys are
 *   - constants, and tuples of them: the object itself, guarded by value
 *     like any constant the trace uses; Python's own hashing and equality
 *     then give eager's membership, results of set algebra and iteration
 *     order (string hashes are per process, and so is every entry);
 *   - objects hashed and compared by identity (modules, classes,
 *     functions: object's own __hash__ and __eq__): the object, guarded by
 *     identity, so the pattern of same and different objects holds;
 *   - values with no trace-time object (tensors, instances and functions
 *     made in the trace): a token (marker, value id), equal only to itself
 *     (a tensor is one value id however it is reached).
 * Eager iterates a set of tensors in the order of their addresses, which
 * no trace can know: iterating (or pop()) such a set of more than one
 * element breaks. So does one whose layout came from a set read from
 * outside (its elements are guarded, not its order: `frozen` marks it). Membership, len, add/discard/remove and the algebra do
 * not depend on order. A set never leaves the trace: returning one breaks
 * (the compiled code would hand every call the same object).
 */
#include "tstate.h"

#include <string.h>

static PyObject *marker;   /* first item of every token */

int set_init(void)
{
    marker = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    return marker ? 0 : -1;
}

int set_is(tracer *T, int32_t v)
{
    return T->vals[v].kind == V_INST && T->vals[v].sub == INST_SET;
}

/* Whether type t hashes and compares its instances by identity. */
static int identity_hashed(PyTypeObject *t)
{
    return t->tp_hash == PyBaseObject_Type.tp_hash && t->tp_richcompare == PyBaseObject_Type.tp_richcompare;
}

static int is_token(PyObject *k)
{
    return PyTuple_CheckExact(k) && PyTuple_GET_SIZE(k) == 2 && PyTuple_GET_ITEM(k, 0) == marker;
}

/* Index of object o in set s's identity table, -1 when absent. */
static int table_find(tracer *T, int32_t s, PyObject *o)
{
    int32_t tab = T->vals[s].self_;
    for (int i = 0; tab >= 0 && i < T->vals[tab].n; i++)
        if (T->vals[tab].keys[i] == o)
            return i;
    return -1;
}

/* Records that object o in set s came from value v (the first one wins). */
static int table_add(tracer *T, int32_t s, PyObject *o, int32_t v)
{
    if (table_find(T, s, o) >= 0)
        return 0;
    if (T->vals[s].self_ < 0) {
        int32_t tab = tv_new(T, V_DICT);
        if (tab < 0)
            return -1;
        T->vals[s].self_ = tab;
    }
    return tv_push_item(T, T->vals[s].self_, v, o);
}

/* Copies set src's identity table into set dst's. */
static int table_merge(tracer *T, int32_t dst, int32_t src)
{
    int32_t tab = T->vals[src].self_;
    for (int i = 0; tab >= 0 && i < T->vals[tab].n; i++)
        if (table_add(T, dst, T->vals[tab].keys[i], T->vals[tab].items[i]))
            return -1;
    return 0;
}

static PyObject *raise_unhashable(tracer *T, const char *tname)
{
    tr_raise(T, PyObject_CallFunction(PyExc_TypeError, "s", tname));
    return NULL;
}

static PyObject *key_of(tracer *T, int32_t v, int32_t s);

/* The key of tuple value v: its constant value, or a plain tuple of its
 * items' keys. */
static PyObject *tuple_key(tracer *T, int32_t v, int32_t s)
{
    int all_const = 1;
    for (int i = 0; i < T->vals[v].n; i++)
        all_const &= T->vals[T->vals[v].items[i]].kind == V_OBJ;
    if (all_const)
        return tr_pyobj(T, v);
    if (T->vals[v].obj) {
        tr_break(T, "a named tuple holding tensors as a set element");
        return NULL;
    }
    PyObject *k = PyTuple_New(T->vals[v].n);
    for (int i = 0; k && i < T->vals[v].n; i++) {
        PyObject *it = key_of(T, T->vals[v].items[i], s);
        if (!it)
            Py_CLEAR(k);
        else
            PyTuple_SET_ITEM(k, i, it);
    }
    return k;
}

/* The key of object value v: identity-hashed objects themselves (guarded
 * by identity and recorded in s's table when s >= 0), others by value. */
static PyObject *obj_key(tracer *T, int32_t v, int32_t s)
{
    PyObject *o = T->vals[v].obj;
    if (identity_hashed(Py_TYPE(o)) && !tr_is_plain_const(o)) {
        if (!tr_const(T, v) || (s >= 0 && table_add(T, s, o, v)))
            return NULL;
        return Py_NewRef(o);
    }
    PyObject *k = tr_pyobj(T, v);
    if (k && PyObject_Hash(k) == -1) {
        Py_DECREF(k);
        tr_raise_error(T);
        return NULL;
    }
    return k;
}

/* The key standing for value v in a set (new reference); s >= 0: the set
 * it goes into (its identity table learns v's objects). NULL: a break, an
 * error, or TypeError raised in the trace (an unhashable value). */
static PyObject *key_of(tracer *T, int32_t v, int32_t s)
{
    tv *x = &T->vals[v];
    switch (x->kind) {
    case V_TENSOR: case V_FUNC: case V_ITER:
        return Py_BuildValue("(Oi)", marker, (int)v);
    case V_OBJ: return obj_key(T, v, s);
    case V_TUPLE: return tuple_key(T, v, s);
    case V_LIST: return raise_unhashable(T, "unhashable type: 'list'");
    case V_DICT: return raise_unhashable(T, "unhashable type: 'dict'");
    case V_INST:
        if (x->sub == INST_SET && x->obj == (PyObject *)&PySet_Type)
            return raise_unhashable(T, "unhashable type: 'set'");
        if ((x->sub == INST_PLAIN && identity_hashed((PyTypeObject *)x->obj)) || x->sub == INST_PARTIAL)
            return Py_BuildValue("(Oi)", marker, (int)v);
        break;
    default: break;
    }
    tr_break(T, "a %s as a set element", tr_kind_name(T, v));
    return NULL;
}

/* Whether key k (a tuple) holds tokens or objects of set s's table. */
static int tuple_special(tracer *T, int32_t s, PyObject *k)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(k); i++) {
        PyObject *it = PyTuple_GET_ITEM(k, i);
        if (is_token(it) || table_find(T, s, it) >= 0 || (PyTuple_CheckExact(it) && tuple_special(T, s, it)))
            return 1;
    }
    return 0;
}

/* The value an element key k of set s stands for. */
static int32_t val_of(tracer *T, int32_t s, PyObject *k)
{
    if (is_token(k))
        return (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(k, 1));
    int at = table_find(T, s, k);
    if (at >= 0)
        return T->vals[T->vals[s].self_].items[at];
    if (!PyTuple_CheckExact(k) || !tuple_special(T, s, k))
        return tv_obj(T, k, -1);
    int32_t t = tv_new(T, V_TUPLE);
    for (Py_ssize_t i = 0; t >= 0 && i < PyTuple_GET_SIZE(k); i++)
        if (tv_push_item(T, t, val_of(T, s, PyTuple_GET_ITEM(k, i)), NULL))
            return -1;
    return t;
}

/* A new set value of type `type` over real set `real` (stolen; NULL: a
 * new empty one). */
static int32_t set_wrap(tracer *T, PyObject *type, PyObject *real)
{
    if (!real && !(real = PySet_New(NULL)))
        return -1;
    int32_t s = tr_keep(T, real) ? -1 : tv_new(T, V_INST);
    Py_DECREF(real);
    if (s >= 0) {
        T->vals[s].sub = INST_SET;
        T->vals[s].obj = type;
        T->vals[s].aux = real;
        T->vals[s].pos = -1;   /* the class has no source */
    }
    return s;
}

/* Adds values items[0..n) to set s (made here). */
int set_add_values(tracer *T, int32_t s, const int32_t *items, int n)
{
    for (int i = 0; i < n; i++) {
        PyObject *k = key_of(T, items[i], s);
        int bad = !k || PySet_Add(T->vals[s].aux, k);
        Py_XDECREF(k);
        if (bad)
            return -1;
    }
    return 0;
}

int32_t set_new(tracer *T, PyObject *type, const int32_t *items, int n)
{
    int32_t s = set_wrap(T, type, NULL);
    return s < 0 || set_add_values(T, s, items, n) ? -1 : s;
}

/* ---------- operands ---------- */

/* Whether value v is a set from outside whose iteration order the guards
 * do not fix (equal sets can iterate differently), or a set made here
 * from one. */
static int order_unguarded(tracer *T, int32_t v)
{
    tv *x = &T->vals[v];
    if (set_is(T, v))
        return x->frozen;
    return x->kind == V_OBJ && PyAnySet_Check(x->obj) && x->src >= 0 && PySet_GET_SIZE(x->obj) > 1;
}

/* A Python object standing for operand v of set s's method (a set:
 * its real set; another iterable: the list of its keys; a set or
 * frozenset from outside: itself, guarded by value). New reference. */
static PyObject *operand(tracer *T, int32_t s, int32_t v)
{
    if (set_is(T, v)) {
        T->vals[s].frozen |= T->vals[v].frozen;
        return table_merge(T, s, v) ? NULL : Py_NewRef(T->vals[v].aux);
    }
    if (T->vals[v].kind == V_OBJ && PyAnySet_Check(T->vals[v].obj)) {
        PyObject *o = tr_value(T, v);
        T->vals[s].frozen |= o && order_unguarded(T, v);
        return Py_XNewRef(o);
    }
    int32_t *items;
    int n;
    if (bi_items(T, v, &items, &n))
        return NULL;
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        PyObject *k = key_of(T, items[i], s);
        if (!k)
            Py_CLEAR(l);
        else
            PyList_SET_ITEM(l, i, k);
    }
    return l;
}

/* Adds the elements of iterable value it to set s (made here, still a
 * real `set`), as set.update(it) does: the same operation on the real
 * objects, so the table ends up as eager's. */
int set_update_from(tracer *T, int32_t s, int32_t it)
{
    PyObject *o = operand(T, s, it);
    int r = o ? _PySet_Update(T->vals[s].aux, o) : -1;
    Py_XDECREF(o);
    return r;
}

/* set(iterable) / frozenset(iterable) (type) made here: the real type
 * applied to the real operand, as eager does. */
int32_t set_from(tracer *T, PyObject *type, int32_t it)
{
    int32_t s = set_wrap(T, type, NULL);
    PyObject *o = s < 0 ? NULL : operand(T, s, it);
    PyObject *r = o ? PyObject_CallOneArg(type, o) : NULL;
    Py_XDECREF(o);
    if (!r)
        return s < 0 || !o ? -1 : tr_raise_error(T);
    T->vals[s].aux = r;   /* replaces the empty set (kept alive by the trace) */
    int bad = tr_keep(T, r);
    Py_DECREF(r);
    return bad ? -1 : s;
}

/* 0 when iterating set s gives eager's order (it holds no tokens, or one
 * element at most); otherwise a break (-1). */
static int check_order(tracer *T, int32_t s, const char *what)
{
    PyObject *real = T->vals[s].aux;
    if (PySet_GET_SIZE(real) <= 1)
        return 0;
    if (T->vals[s].frozen)
        return tr_break(T, "%s a set made from a set from outside (its order is not guarded)", what);
    Py_ssize_t pos = 0;
    PyObject *k;
    Py_hash_t h;
    while (_PySet_NextEntry(real, &pos, &k, &h))
        if (is_token(k) || (PyTuple_CheckExact(k) && tuple_special(T, s, k)))
            return tr_break(T, "%s a set of tensors or objects made in the trace (eager's order follows their addresses)",
                            what);
    return 0;
}

/* The elements of set s, in its iteration order, as a new list value. */
static int32_t set_list(tracer *T, int32_t s)
{
    if (check_order(T, s, "iterating"))
        return -1;
    int32_t l = tv_new(T, V_LIST);
    Py_ssize_t pos = 0;
    PyObject *k;
    Py_hash_t h;
    while (l >= 0 && _PySet_NextEntry(T->vals[s].aux, &pos, &k, &h))
        if (tv_push_item(T, l, val_of(T, s, k), NULL))
            return -1;
    return l;
}

/* A new Python set or frozenset equal to set s, for a call evaluated at
 * trace time; NULL (a break) when it holds values with no object. */
PyObject *set_pyobj(tracer *T, int32_t s)
{
    PyObject *real = T->vals[s].aux;
    if (check_order(T, s, "a call at trace time on"))
        return NULL;
    Py_ssize_t pos = 0;
    PyObject *k;
    Py_hash_t h;
    while (_PySet_NextEntry(real, &pos, &k, &h))
        if (is_token(k) || (PyTuple_CheckExact(k) && tuple_special(T, s, k))) {
            tr_break(T, "a set of tensors has no value at trace time");
            return NULL;
        }
    if ((PyObject *)Py_TYPE(real) == T->vals[s].obj)
        return Py_NewRef(real);   /* eager's own layout (calls at trace time do not mutate it) */
    return T->vals[s].obj == (PyObject *)&PySet_Type ? PySet_New(real) : PyFrozenSet_New(real);
}

/* Whether value v is a set or frozenset (made here or from outside). */
static int any_set(tracer *T, int32_t v)
{
    return set_is(T, v) || (T->vals[v].kind == V_OBJ && PyAnySet_Check(T->vals[v].obj));
}

/* The value for result r (new reference, stolen) of a method or operator
 * of set s: a set of type `type` (with s's table), a bool, or None. */
static int32_t result(tracer *T, int32_t s, PyObject *type, PyObject *r)
{
    if (!r)
        return tr_raise_error(T);
    if (!PyAnySet_Check(r)) {
        int32_t v = tv_obj(T, r, -1);
        Py_DECREF(r);
        return v;
    }
    int32_t n = set_wrap(T, type, r);   /* a frozenset result stays one (never mutated) */
    if (n >= 0)
        T->vals[n].frozen = T->vals[s].frozen;
    return n < 0 || table_merge(T, n, s) ? -1 : n;
}

/* ---------- methods ---------- */

/* set methods: name, whether it mutates, how many arguments (-1: any). */
static const struct { const char *name; uint8_t mutates; int8_t nargs; } methods[] = {
    { "add", 1, 1 }, { "discard", 1, 1 }, { "remove", 1, 1 }, { "pop", 1, 0 }, { "clear", 1, 0 },
    { "update", 1, -1 }, { "intersection_update", 1, -1 }, { "difference_update", 1, -1 },
    { "symmetric_difference_update", 1, 1 }, { "copy", 0, 0 }, { "union", 0, -1 }, { "intersection", 0, -1 },
    { "difference", 0, -1 }, { "symmetric_difference", 0, 1 }, { "issubset", 0, 1 }, { "issuperset", 0, 1 },
    { "isdisjoint", 0, 1 },
};

static int method_index(PyObject *type, PyObject *name)
{
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (PyUnicode_CompareWithASCIIString(name, methods[i].name) == 0)
            return methods[i].mutates && type != (PyObject *)&PySet_Type ? -1 : (int)i;
    return -1;
}

/* s.name: a bound method of set s; -2 when the type has no such method. */
int32_t set_attr(tracer *T, int32_t s, PyObject *name)
{
    return method_index(T->vals[s].obj, name) < 0 ? -2 : tr_bound(T, name, s, -1);
}

/* s.remove(x) / s.discard(x). */
static int32_t remove_key(tracer *T, int32_t s, int32_t x, int must)
{
    PyObject *k = key_of(T, x, -1);
    if (!k)
        return -1;
    int r = PySet_Discard(T->vals[s].aux, k);
    if (r == 0 && must && (is_token(k) || PyTuple_CheckExact(k))) {
        Py_DECREF(k);
        return tr_break(T, "set.remove() of a missing element that has no trace-time value");
    }
    PyObject *err = r == 0 && must ? PyObject_CallOneArg(PyExc_KeyError, k) : NULL;
    Py_DECREF(k);
    if (r < 0)
        return tr_raise_error(T);
    return err ? tr_raise(T, err) : tv_obj(T, Py_None, -1);
}

/* s.pop(): the element eager's set would give. */
static int32_t pop(tracer *T, int32_t s)
{
    if (PySet_GET_SIZE(T->vals[s].aux) == 0)
        return tr_raise(T, PyObject_CallFunction(PyExc_KeyError, "s", "pop from an empty set"));
    if (check_order(T, s, "pop() of"))
        return -1;
    PyObject *k = PySet_Pop(T->vals[s].aux);
    int32_t v = k ? val_of(T, s, k) : -1;
    Py_XDECREF(k);
    return v;
}

/* The real method `name` of s's real set called with the operands of a. */
static int32_t real_method(tracer *T, int32_t s, PyObject *name, const call_args *a)
{
    PyObject *args = PyTuple_New(a->npos);
    for (int i = 0; args && i < a->npos; i++) {
        PyObject *o = operand(T, s, a->pos[i]);
        if (!o) {
            Py_CLEAR(args);
            return -1;
        }
        PyTuple_SET_ITEM(args, i, o);
    }
    PyObject *m = args ? PyObject_GetAttr(T->vals[s].aux, name) : NULL;
    PyObject *r = m ? PyObject_Call(m, args, NULL) : NULL;
    Py_XDECREF(m);
    Py_XDECREF(args);
    return result(T, s, T->vals[s].obj, r);
}

/* s.name(*a) for set value s. */
int32_t set_method(tracer *T, int32_t s, PyObject *name, const call_args *a)
{
    int i = method_index(T->vals[s].obj, name);
    if (i < 0 || a->nkw || (methods[i].nargs >= 0 && a->npos != methods[i].nargs))
        return tr_break(T, "%s.%U with these arguments", ((PyTypeObject *)T->vals[s].obj)->tp_name, name);
    const char *n = methods[i].name;
    if (!strcmp(n, "add"))
        return set_add_values(T, s, a->pos, 1) ? -1 : tv_obj(T, Py_None, -1);
    if (!strcmp(n, "discard") || !strcmp(n, "remove"))
        return remove_key(T, s, a->pos[0], n[0] == 'r');
    if (!strcmp(n, "pop"))
        return pop(T, s);
    if (!strcmp(n, "update")) {
        for (int k = 0; k < a->npos; k++)
            if (set_update_from(T, s, a->pos[k]))
                return -1;
        return tv_obj(T, Py_None, -1);
    }
    return real_method(T, s, name, a);
}

/* len / in / iter of set s (obj_special's slots); -2 for the others. */
int32_t set_special(tracer *T, int32_t s, obj_slot slot, const int32_t *args, int n)
{
    (void)n;
    if (slot == OS_LEN)
        return tv_int(T, PySet_GET_SIZE(T->vals[s].aux));
    if (slot == OS_ITER) {
        int32_t l = set_list(T, s);
        return l < 0 ? -1 : bi_iter(T, l);
    }
    if (slot != OS_CONTAINS)
        return -2;
    PyObject *k = key_of(T, args[0], -1);
    int r = k ? PySet_Contains(T->vals[s].aux, k) : -1;
    Py_XDECREF(k);
    if (r < 0)
        return T->broke || T->exc ? -1 : tr_raise_error(T);
    return tv_obj(T, r ? Py_True : Py_False, -1);
}

/* ---------- operators ---------- */

/* The Python object of set operand v and its type (borrowed). */
static PyObject *side(tracer *T, int32_t v, PyObject **type)
{
    if (set_is(T, v)) {
        *type = T->vals[v].obj;
        return T->vals[v].aux;
    }
    PyObject *o = tr_value(T, v);
    *type = o ? (PyObject *)Py_TYPE(o) : NULL;
    return o;
}

/* a op b (BINARY_OP nb: | & - ^ and their in-place forms) when a or b is
 * a set made here; -2 when neither is. An in-place op on a set made here
 * updates it. */
int32_t set_binop(tracer *T, int nb, int32_t a, int32_t b)
{
    if (!set_is(T, a) && !set_is(T, b))
        return -2;
    int base = nb >= NB_INPLACE ? nb - NB_INPLACE : nb;
    if ((base != NB_OR && base != NB_AND && base != NB_SUBTRACT && base != NB_XOR) || !any_set(T, a) || !any_set(T, b))
        return tr_break(T, "operator %d between a set and a %s", base, tr_kind_name(T, set_is(T, a) ? b : a));
    PyObject *ta, *tb, *x = side(T, a, &ta), *y = x ? side(T, b, &tb) : NULL;
    if (!y)
        return -1;
    if (nb >= NB_INPLACE && !set_is(T, a) && PySet_Check(x))
        return tr_break(T, "in-place update of a set from outside the traced code");
    int32_t keep = set_is(T, a) ? a : b, other = keep == a ? b : a;
    if (set_is(T, other) && table_merge(T, keep, other))
        return -1;
    int unordered = order_unguarded(T, a) || order_unguarded(T, b);
    if (nb >= NB_INPLACE && set_is(T, a) && ta == (PyObject *)&PySet_Type) {
        PyObject *r = base == NB_OR ? PyNumber_InPlaceOr(x, y) : base == NB_AND ? PyNumber_InPlaceAnd(x, y)
                    : base == NB_SUBTRACT ? PyNumber_InPlaceSubtract(x, y) : PyNumber_InPlaceXor(x, y);
        Py_XDECREF(r);   /* x itself */
        T->vals[a].frozen |= unordered;
        return r ? a : tr_raise_error(T);
    }
    PyObject *r = base == NB_OR ? PyNumber_Or(x, y) : base == NB_AND ? PyNumber_And(x, y)
                : base == NB_SUBTRACT ? PyNumber_Subtract(x, y) : PyNumber_Xor(x, y);
    int32_t n = result(T, keep, ta, r);
    if (n >= 0 && set_is(T, n))
        T->vals[n].frozen |= unordered;
    return n;
}

/* a cmp b for sets (==, !=, <, <=, >, >=: subset relations); -2 when
 * neither is a set made here. */
int32_t set_compare(tracer *T, int cmp, int32_t a, int32_t b)
{
    if (!set_is(T, a) && !set_is(T, b))
        return -2;
    if (!any_set(T, a) || !any_set(T, b)) {   /* a set is never equal to anything else */
        if (cmp == Py_EQ || cmp == Py_NE)
            return tv_obj(T, cmp == Py_NE ? Py_True : Py_False, -1);
        return tr_break(T, "ordering a set against a %s", tr_kind_name(T, set_is(T, a) ? b : a));
    }
    PyObject *ta, *tb, *x = side(T, a, &ta), *y = x ? side(T, b, &tb) : NULL;
    if (!y)
        return -1;
    PyObject *r = PyObject_RichCompare(x, y, cmp);
    if (!r)
        return tr_raise_error(T);
    int32_t v = tv_obj(T, r, -1);
    Py_DECREF(r);
    return v;
}

/* The values of set s's elements, in the order its private set iterates
 * them (insertion order for the same constants, as eager's set), into a
 * new PyMem array. 0 or -1. */
int set_values(tracer *T, int32_t s, int32_t **items, int *n)
{
    PyObject *real = T->vals[s].aux, *it = PyObject_GetIter(real), *k;
    Py_ssize_t len = PySet_GET_SIZE(real);
    *n = 0;
    *items = PyMem_Malloc(sizeof(int32_t) * ((size_t)len + 1));
    if (!it || !*items) {
        Py_XDECREF(it);
        return *items ? -1 : (PyErr_NoMemory(), -1);
    }
    while ((k = PyIter_Next(it))) {
        int32_t v = *n < len ? val_of(T, s, k) : -1;
        Py_DECREF(k);
        if (v < 0)
            break;
        (*items)[(*n)++] = v;
    }
    Py_DECREF(it);
    return PyErr_Occurred() || *n != len ? -1 : 0;
}
