/* builtins.c — Python builtins, operator/math/functools functions, the
 * methods of lists, tuples and dicts, and iteration, on symbolic values.
 *
 * A builtin applied to constants is evaluated now on their concrete values
 * (guarded like any constant); applied to tensors it maps to graph ops
 * (abs, pow, round, sum, operator.add, ...) or ends the trace where the
 * answer would depend on tensor data (min/max/int/float of a tensor).
 * Iterators are lazy like Python's: zip/map/filter/enumerate advance their
 * inputs one step at a time and generators resume only when asked, so side
 * effects interleave as they would in Python.
 */
#include "tstate.h"

#include <string.h>

#define MAX_ITEMS 100000

static PyObject *s_modules, *s_keys;   /* "_modules", "keys" */

static int32_t pure(tracer *T, const call_args *a, PyObject *fn);

static int32_t none(tracer *T)
{
    return tv_obj(T, Py_None, -1);
}
static int all_consts(tracer *T, const int32_t *it, int n);
static PyObject *by_obj, *finfo, *iinfo, *device;   /* builtin -> table index; torch.finfo, iinfo, device */
static PyObject *itertools_repeat;                  /* itertools.repeat */
static PyObject *itertools_fns[4];                  /* itertools.chain, islice, product, chain.from_iterable */
static PyObject *partial_type;                      /* functools.partial */
static PyObject *tuple_new, *dict_fromkeys;         /* tuple.__new__, dict.fromkeys */
static PyObject *count_elements;                    /* collections._count_elements (Counter's helper) */
static PyObject *sorted_fn;                         /* builtins.sorted */
static PyObject *getters[3];                        /* operator.itemgetter, attrgetter, methodcaller */
static PyObject *torch_queries[5];         /* torch._C._has_torch_function{,_unary,_variadic}, _is_tracing, _get_tracing_state */

/* ---------- iteration ---------- */

static int32_t new_iter(tracer *T, it_kind k, int32_t self)
{
    int32_t i = tv_new(T, V_ITER);
    if (i >= 0) {
        T->vals[i].sub = (uint8_t)k;
        T->vals[i].self_ = self;
    }
    return i;
}

/* iter(v): an iterator value (an iterator is its own iterator). */
int32_t bi_iter(tracer *T, int32_t v)
{
    tv *x = &T->vals[v];
    if (x->kind == V_ITER)
        return v;
    int32_t c = v;
    if (x->kind != V_TUPLE && x->kind != V_LIST) {
        int32_t *it;
        int n;
        if (bi_items(T, v, &it, &n) || (c = tv_tuple(T, it, n)) < 0)
            return -1;
    }
    return new_iter(T, IT_SEQ, c);
}

/* One value from each of iterator it's inputs; 0 (and it done) when any
 * is exhausted. */
static int next_each(tracer *T, int32_t it, int32_t *vals)
{
    for (int i = 0; i < T->vals[it].n; i++) {
        int r = bi_next(T, T->vals[it].items[i], &vals[i]);
        if (r <= 0) {
            T->vals[it].done = r == 0;
            return r;
        }
    }
    return 1;
}

static int next_filtered(tracer *T, int32_t it, int32_t *out)
{
    for (long k = 0; k < MAX_ITEMS; k++) {
        int32_t v, test;
        int r = bi_next(T, T->vals[it].items[0], &v), t;
        if (r <= 0) {
            T->vals[it].done = r == 0;
            return r;
        }
        call_args a = { .pos = &v, .npos = 1 };
        test = T->vals[it].self_ < 0 ? v : tr_call(T, T->vals[it].self_, &a);
        if (test < 0 || tr_truth(T, test, &t))
            return -1;
        if (t) {
            *out = v;
            return 1;
        }
    }
    return tr_break(T, "filter too long");
}

/* chain: the next item of the current iterable, moving on to the next
 * iterable (from the outer iterator self_) as each is exhausted. */
static int next_chained(tracer *T, int32_t it, int32_t *out)
{
    for (long k = 0; k < MAX_ITEMS; k++) {
        if (T->vals[it].n) {
            int r = bi_next(T, T->vals[it].items[0], out);
            if (r)
                return r;
        }
        int32_t nxt, cur;
        int r = bi_next(T, T->vals[it].self_, &nxt);
        if (r <= 0) {
            T->vals[it].done = r == 0;
            return r;
        }
        if ((cur = bi_iter(T, nxt)) < 0)
            return -1;
        if (T->vals[it].n)
            T->vals[it].items[0] = cur;
        else if (tv_push_item(T, it, cur, NULL))
            return -1;
    }
    return tr_break(T, "chain of too many iterables");
}

/* islice, as CPython steps it: stop once `stop` items were consumed,
 * consume (and drop) items up to the next index to yield, then yield one. */
static int next_sliced(tracer *T, int32_t it, int32_t *out)
{
    for (int take = 0;; take = 1) {
        tv *x = &T->vals[it];
        if (x->sl[1] >= 0 && x->pos >= x->sl[1]) {
            x->done = 1;
            return 0;
        }
        if (take || x->pos >= x->sl[0])
            break;
        for (int r; T->vals[it].pos < T->vals[it].sl[0]; T->vals[it].pos++)
            if ((r = bi_next(T, T->vals[it].items[0], out)) <= 0) {
                T->vals[it].done = r == 0;
                return r;
            }
    }
    int r = bi_next(T, T->vals[it].items[0], out);
    tv *x = &T->vals[it];
    if (r <= 0) {
        x->done = r == 0;
        return r;
    }
    x->pos++;
    x->sl[0] += x->sl[2];
    if (x->sl[1] >= 0 && x->sl[0] > x->sl[1])
        x->sl[0] = x->sl[1];
    return 1;
}

/* next(it): 1 and *out, 0 when exhausted, -1 on a break. */
int bi_next(tracer *T, int32_t it, int32_t *out)
{
    if (T->vals[it].kind != V_ITER)
        return tr_break(T, "next() of a non-iterator");
    if (T->vals[it].done)
        return 0;
    int32_t vals[64];
    int r;
    switch ((it_kind)T->vals[it].sub) {
    case IT_SEQ: {
        tv *c = &T->vals[T->vals[it].self_];
        if (T->vals[it].pos < c->n) {
            *out = c->items[T->vals[it].pos++];
            return 1;
        }
        T->vals[it].done = 1;
        return 0;
    }
    case IT_GEN:
        return tr_gen_next(T, it, out);
    case IT_ENUM:
        if ((r = next_each(T, it, vals)) <= 0)
            return r;
        vals[1] = vals[0];
        vals[0] = tv_int(T, T->vals[it].pos++);
        return (*out = vals[0] < 0 ? -1 : tv_tuple(T, vals, 2)) < 0 ? -1 : 1;
    case IT_ZIP:
        if (T->vals[it].n == 0 || (r = next_each(T, it, vals)) == 0) {
            T->vals[it].done = 1;
            return 0;
        }
        return r < 0 ? -1 : (*out = tv_tuple(T, vals, T->vals[it].n)) < 0 ? -1 : 1;
    case IT_MAP: {
        if ((r = next_each(T, it, vals)) <= 0)
            return r;
        call_args a = { .pos = vals, .npos = T->vals[it].n };
        return (*out = tr_call(T, T->vals[it].self_, &a)) < 0 ? -1 : 1;
    }
    case IT_FILTER:
        return next_filtered(T, it, out);
    case IT_CHAIN:
        return next_chained(T, it, out);
    case IT_ISLICE:
        return next_sliced(T, it, out);
    }
    return tr_break(T, "unknown iterator");
}

/* The children of a container module (Sequential, ModuleList: the
 * modules, with sources; ModuleDict: its keys), its structure guarded. */
static int module_items(tracer *T, int32_t v, int32_t l)
{
    PyObject *o = T->vals[v].obj;
    int32_t src = T->vals[v].src;
    PyObject *mods = PyObject_GetAttr(o, s_modules);
    if (!mods || !PyDict_Check(mods) || tr_add_guard(T, TG_TYPE, src, (PyObject *)Py_TYPE(o), 0)) {
        Py_XDECREF(mods);
        return PyErr_Occurred() ? -1 : tr_break(T, "iteration over module %s", Py_TYPE(o)->tp_name);
    }
    PyObject *cls_name = PyObject_GetAttrString((PyObject *)Py_TYPE(o), "__name__");
    int is_dict = cls_name && PyUnicode_CompareWithASCIIString(cls_name, "ModuleDict") == 0;
    Py_XDECREF(cls_name);
    int32_t msrc = tr_src_new(T, SRC_ATTR, src, 0, s_modules);
    int rc = tr_add_guard(T, TG_LEN, msrc, NULL, PyDict_GET_SIZE(mods));
    Py_ssize_t pos = 0;
    PyObject *k, *m;
    while (!rc && PyDict_Next(mods, &pos, &k, &m)) {
        int32_t it = is_dict ? tv_obj(T, k, -1) : tv_obj(T, m, tr_src_new(T, SRC_DICT, msrc, 0, k));
        rc = it < 0 || tv_push_item(T, l, it, NULL) ? -1 : 0;
    }
    Py_DECREF(mods);
    return rc;
}

/* The items of a Python object known at trace time (a str, a set, a
 * range, ...), each a constant. */
static int const_items(tracer *T, int32_t v, int32_t l)
{
    PyObject *o = tr_value(T, v);
    if (!o)
        return -1;
    if (PyAnySet_Check(o) && T->vals[v].src >= 0 && PySet_GET_SIZE(o) > 1)   /* guarded by its elements only */
        return tr_break(T, "iteration order of a set from outside the trace is not guarded");
    PyObject *seq = PySequence_Fast(o, "not iterable");
    if (!seq) {
        PyErr_Clear();
        return tr_break(T, "iteration over %s", Py_TYPE(o)->tp_name);
    }
    int rc = 0;
    for (Py_ssize_t i = 0; !rc && i < PySequence_Fast_GET_SIZE(seq); i++) {
        int32_t it = tv_obj(T, PySequence_Fast_GET_ITEM(seq, i), -1);
        rc = it < 0 || tv_push_item(T, l, it, NULL) ? -1 : 0;
    }
    Py_DECREF(seq);
    return rc;
}

/* The items of tensor value v: v[0], v[1], ... along its first dim
 * (static: the shape is guarded), as iterating a tensor gives them. */
static int tensor_items(tracer *T, int32_t v, int32_t **items, int *n)
{
    const smelt_node *nd = &T->g->nodes[T->vals[v].node];
    if (nd->ndim == 0)
        return tr_raise(T, PyObject_CallFunction(PyExc_TypeError, "s", "iteration over a 0-d tensor"));
    if (nd->shape[0] > 4096)
        return tr_break(T, "iteration over a tensor of %lld rows", (long long)nd->shape[0]);
    if (dyn_dim_ex(T, T->vals[v].node, 0) >= 0)
        return dyn_fail(T, "iteration over a symbolic number of rows");
    int64_t rows = nd->shape[0];
    int32_t l = tv_new(T, V_LIST);
    for (int64_t i = 0; l >= 0 && i < rows; i++) {
        int32_t k = tv_int(T, i), r = k < 0 ? -1 : tr_subscr(T, v, k);
        if (r < 0 || tv_push_item(T, l, r, NULL))
            return -1;
    }
    if (l < 0)
        return -1;
    *items = T->vals[l].items;
    *n = T->vals[l].n;
    return 0;
}

/* Items of a sequence-like value: a tuple/list's own items, a dict's keys,
 * an iterator drained to its end, a container module's children, a
 * constant's items. The pointer stays valid until that container grows. */
int bi_items(tracer *T, int32_t v, int32_t **items, int *n)
{
    tv *x = &T->vals[v];
    *items = NULL;
    *n = 0;
    if (x->kind == V_TUPLE || x->kind == V_LIST) {
        *items = x->items;
        *n = x->n;
        return 0;
    }
    if (x->kind == V_TENSOR)
        return tensor_items(T, v, items, n);
    if (x->kind == V_INST) {
        int32_t it = obj_special(T, v, OS_ITER, NULL, 0);
        if (it == -2)
            return tr_break(T, "iteration over an instance without __iter__");
        return it < 0 ? -1 : bi_items(T, it, items, n);
    }
    if (x->kind != V_DICT && x->kind != V_ITER && x->kind != V_OBJ)
        return tr_break(T, "iteration over a %s", x->kind == V_FUNC ? "function" : "non-iterable value");
    if (x->kind == V_OBJ) {
        int32_t it = tr_user_special(T, v, "__iter__", NULL, 0);
        if (it != -2)
            return it < 0 ? -1 : bi_items(T, it, items, n);
    }
    int32_t d = x->kind == V_OBJ && PyDict_CheckExact(x->obj) ? tr_dict_value(T, v) : v;
    int32_t l = d < 0 ? -1 : tv_new(T, V_LIST);
    int rc = l < 0 ? -1 : 0;
    if (!rc && T->vals[d].kind == V_DICT) {
        for (int i = 0; !rc && i < T->vals[d].n; i++)
            rc = tv_push_item(T, l, tv_obj(T, T->vals[d].keys[i], -1), NULL);
    } else if (!rc && T->vals[d].kind == V_ITER) {
        int32_t it;
        int more;
        while (!rc && (more = bi_next(T, d, &it)) != 0)
            rc = more < 0 || T->vals[l].n >= MAX_ITEMS ? (more < 0 ? -1 : tr_break(T, "iterator too long")) :
                 tv_push_item(T, l, it, NULL);
    } else if (!rc) {
        rc = tr_is_module(T->vals[d].obj) ? module_items(T, d, l) : const_items(T, d, l);
    }
    if (rc)
        return -1;
    *items = T->vals[l].items;
    *n = T->vals[l].n;
    return 0;
}

/* ---------- builtins ---------- */

typedef int32_t (*bi_fn)(tracer *T, const call_args *a, PyObject *fn);

static int32_t arg_count(tracer *T, const call_args *a, int lo, int hi, const char *name)
{
    if (a->npos < lo || a->npos > hi)
        return tr_break(T, "%s() with %d positional arguments", name, a->npos);
    return 0;
}

static int32_t kwarg(const call_args *a, const char *name)
{
    for (int k = 0; k < a->nkw; k++)
        if (PyUnicode_CompareWithASCIIString(a->kwn[k], name) == 0)
            return a->kwv[k];
    return -1;
}

static int32_t b_range(tracer *T, const call_args *a, PyObject *fn)
{
    int64_t x[3] = { 0, 0, 1 };
    (void)fn;
    if (arg_count(T, a, 1, 3, "range"))
        return -1;
    for (int i = 0; i < a->npos; i++)
        if (tr_int(T, a->pos[i], &x[a->npos == 1 ? 1 : i]))
            return -1;
    if (x[2] == 0 || (x[1] - x[0]) / x[2] > MAX_ITEMS)
        return tr_break(T, "range too long to unroll");
    int32_t l = tv_new(T, V_LIST);
    for (int64_t i = x[0]; l >= 0 && (x[2] > 0 ? i < x[1] : i > x[1]); i += x[2])
        if (tv_push_item(T, l, tv_int(T, i), NULL))
            return -1;
    return l;
}

/* zip / map / enumerate / filter: lazy iterators over iter() of each
 * input. first: the argument where the iterables start. */
static int32_t make_lazy(tracer *T, const call_args *a, it_kind k, int first)
{
    int32_t i = new_iter(T, k, first ? a->pos[0] : -1);
    for (int j = first; i >= 0 && j < a->npos; j++)
        if (tv_push_item(T, i, bi_iter(T, a->pos[j]), NULL))
            return -1;
    if (i >= 0 && T->vals[i].n > 64)
        return tr_break(T, "too many iterables");
    return i;
}

/* zip(..., strict=True): the iterables are drained into tuples first (an
 * unequal length breaks, so eager raises its ValueError), then zipped. */
static int32_t zip_strict(tracer *T, const call_args *a)
{
    int32_t tuples[64];
    int n0 = -1;
    if (a->npos > 64)
        return tr_break(T, "too many iterables");
    for (int j = 0; j < a->npos; j++) {
        int32_t *items;
        int n;
        if (bi_items(T, a->pos[j], &items, &n))
            return -1;
        if (n0 >= 0 && n != n0)
            return tr_break(T, "zip(strict=True) of iterables of different lengths");
        n0 = n;
        if ((tuples[j] = tv_tuple(T, items, n)) < 0)
            return -1;
    }
    call_args b = { .pos = tuples, .npos = a->npos };
    return make_lazy(T, &b, IT_ZIP, 0);
}

static int32_t b_zip(tracer *T, const call_args *a, PyObject *fn)
{
    int32_t strict = kwarg(a, "strict");
    int s = 0;
    (void)fn;
    if (strict >= 0 && tr_truth(T, strict, &s))
        return -1;
    return s ? zip_strict(T, a) : make_lazy(T, a, IT_ZIP, 0);
}

static int32_t b_map(tracer *T, const call_args *a, PyObject *fn)
{
    (void)fn;
    return arg_count(T, a, 2, 64, "map") ? -1 : make_lazy(T, a, IT_MAP, 1);
}

static int32_t b_filter(tracer *T, const call_args *a, PyObject *fn)
{
    (void)fn;
    if (arg_count(T, a, 2, 2, "filter"))
        return -1;
    int32_t i = make_lazy(T, a, IT_FILTER, 1);
    if (i >= 0 && T->vals[a->pos[0]].kind == V_OBJ && T->vals[a->pos[0]].obj == Py_None)
        T->vals[i].self_ = -1;
    return i;
}

static int32_t b_enumerate(tracer *T, const call_args *a, PyObject *fn)
{
    int64_t start = 0;
    int32_t sv = a->npos > 1 ? a->pos[1] : kwarg(a, "start");
    (void)fn;
    if (arg_count(T, a, 1, 2, "enumerate") || (sv >= 0 && tr_int(T, sv, &start)))
        return -1;
    call_args one = { .pos = a->pos, .npos = 1 };
    int32_t i = make_lazy(T, &one, IT_ENUM, 0);
    if (i >= 0)
        T->vals[i].pos = (int32_t)start;
    return i;
}

static int32_t b_reversed(tracer *T, const call_args *a, PyObject *fn)
{
    int32_t *it;
    int n;
    (void)fn;
    if (arg_count(T, a, 1, 1, "reversed") || bi_items(T, a->pos[0], &it, &n))
        return -1;
    int32_t l = tv_new(T, V_LIST);
    for (int i = n - 1; l >= 0 && i >= 0; i--)
        if (tv_push_item(T, l, it[i], NULL))
            return -1;
    return l < 0 ? -1 : bi_iter(T, l);
}

/* slice(stop) / slice(start, stop[, step]): a V_SLICE (None parts absent). */
static int32_t b_slice(tracer *T, const call_args *a, PyObject *fn)
{
    (void)fn;
    if (a->nkw || arg_count(T, a, 1, 3, "slice"))
        return a->nkw ? tr_break(T, "slice() with keywords") : -1;
    int32_t s = tv_new(T, V_SLICE);
    for (int i = 0; s >= 0 && i < a->npos; i++) {
        int32_t v = a->pos[i];
        int at = a->npos == 1 ? 1 : i;
        T->vals[s].sl[at] = T->vals[v].kind == V_OBJ && T->vals[v].obj == Py_None ? -1 : v;
    }
    return s;
}

static int32_t b_iter(tracer *T, const call_args *a, PyObject *fn)
{
    (void)fn;
    return arg_count(T, a, 1, 1, "iter") ? -1 : bi_iter(T, a->pos[0]);
}

static int32_t b_next(tracer *T, const call_args *a, PyObject *fn)
{
    int32_t v;
    (void)fn;
    if (arg_count(T, a, 1, 2, "next"))
        return -1;
    int r = bi_next(T, a->pos[0], &v);
    if (r < 0)
        return -1;
    if (r == 0 && a->npos == 2)
        return a->pos[1];
    return r ? v : tr_raise(T, PyObject_CallNoArgs(PyExc_StopIteration));
}

static int32_t b_len(tracer *T, const call_args *a, PyObject *fn)
{
    (void)fn;
    if (arg_count(T, a, 1, 1, "len"))
        return -1;
    int32_t v = tr_live(T, a->pos[0]);
    if (v < 0)
        return -1;
    if (v != a->pos[0])
        return tv_int(T, T->vals[v].n);
    tv *x = &T->vals[v];
    Py_ssize_t n;
    if (x->kind == V_TUPLE || x->kind == V_LIST || x->kind == V_DICT)
        return tv_int(T, x->n);
    if (x->kind == V_TENSOR) {
        const smelt_node *nd = &T->g->nodes[x->node];
        return nd->ndim ? dyn_dim(T, x->node, 0) : tr_break(T, "len() of a 0-d tensor");
    }
    if (x->kind == V_INST) {
        int32_t r = obj_special(T, a->pos[0], OS_LEN, NULL, 0);
        return r != -2 ? r : tr_break(T, "len() of an instance without __len__");
    }
    if (x->kind != V_OBJ)
        return tr_break(T, "len() of a non-sized value");
    int32_t r = tr_user_special(T, a->pos[0], "__len__", NULL, 0);
    if (r != -2)
        return r;
    x = &T->vals[a->pos[0]];
    PyObject *o = x->obj;
    int by_len = tr_is_module(o) || PyDict_Check(o);   /* structure (a dict's length guarded), not identity */
    if (by_len ? tr_add_guard(T, TG_TYPE, x->src, (PyObject *)Py_TYPE(o), 0) : !tr_value(T, a->pos[0]))
        return -1;
    if ((n = PyObject_Length(o)) < 0) {
        PyErr_Clear();
        return tr_break(T, "len() of %s raised", Py_TYPE(o)->tp_name);
    }
    if (by_len && tr_add_guard(T, TG_LEN, T->vals[a->pos[0]].src, NULL, n))
        return -1;
    return tv_int(T, n);
}

/* The Python type value v has (NULL: no such type, a break). */
static PyObject *type_of(tracer *T, int32_t v)
{
    tv *x = &T->vals[v];
    switch (x->kind) {
    case V_TENSOR: return x->obj ? x->obj : ops_tensor_type();   /* inputs keep their own type */
    case V_OBJ: return tr_add_guard(T, TG_TYPE, x->src, (PyObject *)Py_TYPE(x->obj), 0) ? NULL : (PyObject *)Py_TYPE(x->obj);
    case V_TUPLE: return !x->obj ? (PyObject *)&PyTuple_Type : obj_namedtuple_of(x->obj) ? obj_namedtuple_of(x->obj) : x->obj;
    case V_LIST: return x->obj ? x->obj : (PyObject *)&PyList_Type;   /* a module container's slice */
    case V_DICT: return (PyObject *)&PyDict_Type;
    case V_FUNC: return (PyObject *)&PyFunction_Type;
    case V_SLICE: return (PyObject *)&PySlice_Type;
    case V_ITER: if (x->sub == IT_GEN) return (PyObject *)&PyGen_Type; break;
    case V_INST: if (x->sub != INST_SUPER) return x->obj; break;
    case V_SYM: return (PyObject *)&PyLong_Type;   /* a symbolic size is an int */
    default: break;
    }
    tr_break(T, "type of a %s", x->kind == V_BOUND ? "bound method" : "special value");
    return NULL;
}

static int32_t b_isinstance(tracer *T, const call_args *a, PyObject *fn)
{
    (void)fn;
    if (arg_count(T, a, 2, 2, "isinstance"))
        return -1;
    PyObject *t = type_of(T, a->pos[0]), *cls = t ? tr_pyobj(T, a->pos[1]) : NULL;
    if (!cls)
        return -1;
    int r = PyObject_IsSubclass(t, cls);
    Py_DECREF(cls);
    if (r < 0) {
        PyErr_Clear();
        return tr_break(T, "isinstance() raised");
    }
    return tv_obj(T, r ? Py_True : Py_False, -1);
}

/* type(v) as a value: an object's type is guarded and fetched from
 * SRC_TYPE of its source; an instance's class keeps the class's source. */
int32_t bi_type_value(tracer *T, int32_t v)
{
    PyObject *t = type_of(T, v);
    if (!t)
        return -1;
    tv *x = &T->vals[v];
    int32_t src = x->kind == V_OBJ ? tr_src_new(T, SRC_TYPE, x->src, 0, NULL) : x->kind == V_INST ? x->pos : -1;
    return tv_obj(T, t, src);
}

static int32_t b_type(tracer *T, const call_args *a, PyObject *fn)
{
    if (a->npos != 1)
        return pure(T, a, fn);
    return bi_type_value(T, a->pos[0]);
}

static int32_t b_callable(tracer *T, const call_args *a, PyObject *fn)
{
    (void)fn;
    if (arg_count(T, a, 1, 1, "callable"))
        return -1;
    tv *x = &T->vals[a->pos[0]];
    if (x->kind == V_OBJ) {
        PyObject *t = type_of(T, a->pos[0]);
        return t ? tv_obj(T, PyCallable_Check(T->vals[a->pos[0]].obj) ? Py_True : Py_False, -1) : -1;
    }
    if (x->kind == V_INST) {
        PyObject *t = type_of(T, a->pos[0]);
        PyObject *call = PyUnicode_InternFromString("__call__");
        int has = t && call && _PyType_Lookup((PyTypeObject *)t, call) != NULL;
        Py_XDECREF(call);
        return t ? tv_obj(T, has ? Py_True : Py_False, -1) : -1;
    }
    return tv_obj(T, x->kind == V_FUNC || x->kind == V_BOUND ? Py_True : Py_False, -1);
}

static int32_t b_container(tracer *T, const call_args *a, PyObject *fn)
{
    int list = fn == (PyObject *)&PyList_Type;
    int32_t *it;
    int n;
    if (a->npos == 0 && a->nkw == 0)
        return tv_new(T, list ? V_LIST : V_TUPLE);
    if (arg_count(T, a, 1, 1, list ? "list" : "tuple") || bi_items(T, a->pos[0], &it, &n))
        return -1;
    int32_t c = tv_tuple(T, it, n);
    if (c >= 0 && list)
        T->vals[c].kind = V_LIST;
    return c;
}

static int32_t attr_or_missing(tracer *T, int32_t v, int32_t namev);

/* dict(m) for a mapping that is not a dict (it has keys()): its keys()
 * then m[key] for each, into d. */
static int dict_from_mapping(tracer *T, int32_t d, int32_t m, int32_t keys_fn)
{
    call_args none = { 0 };
    int32_t ks = tr_call(T, keys_fn, &none), *it;
    int n;
    if (ks < 0 || bi_items(T, ks, &it, &n))
        return -1;
    for (int i = 0; i < n; i++) {
        int32_t k = it[i];
        PyObject *key = tr_const(T, k);
        int32_t v = key ? tr_subscr(T, m, k) : -1;
        if (v < 0 || tr_dict_set(T, d, key, v))
            return -1;
    }
    return 0;
}

/* The items dict(src) starts with, into d (made here): a dict's items, a
 * mapping's (anything else with keys()), or an iterable's (key, value)
 * pairs; later keys replace earlier ones. */
static int dict_fill(tracer *T, int32_t d, int32_t src)
{
    tv *x = &T->vals[src];
    if (x->kind == V_DICT || (x->kind == V_OBJ && PyDict_CheckExact(x->obj))) {
        int32_t s = tr_dict_value(T, src);
        for (int i = 0; s >= 0 && i < T->vals[s].n; i++)
            if (tr_dict_set(T, d, T->vals[s].keys[i], T->vals[s].items[i]))
                return -1;
        return s < 0 ? -1 : 0;
    }
    if (x->kind == V_OBJ && PyDict_Check(x->obj))
        return tr_break(T, "dict() of a dict subclass");
    if (x->kind == V_INST || x->kind == V_OBJ) {
        int32_t name = tv_obj(T, s_keys, -1);
        int32_t kf = name < 0 ? -1 : attr_or_missing(T, src, name);
        if (kf != -2)
            return kf < 0 ? -1 : dict_from_mapping(T, d, src, kf);
    }
    int32_t *it;
    int n;
    if (bi_items(T, src, &it, &n))
        return -1;
    for (int i = 0; i < n; i++) {
        int32_t *kv, m;
        PyObject *key;
        if (bi_items(T, it[i], &kv, &m) || m != 2)
            return m != 2 ? tr_break(T, "dict() item of length %d", m) : -1;
        if (!(key = bi_key(T, kv[0])) || tr_dict_set(T, d, key, kv[1]))
            return -1;
    }
    return 0;
}

/* set(iterable) / frozenset(iterable): a set made here (sets.c); a
 * frozenset of constants is a constant. */
static int32_t b_set(tracer *T, const call_args *a, PyObject *fn)
{
    if (a->nkw || a->npos > 1)
        return pure(T, a, fn);   /* eager's TypeError */
    if (fn == (PyObject *)&PyFrozenSet_Type && (!a->npos || all_consts(T, a->pos, 1)) &&
        (!a->npos || T->vals[a->pos[0]].kind != V_OBJ || tr_is_plain_const(T->vals[a->pos[0]].obj) ||
         PyTuple_CheckExact(T->vals[a->pos[0]].obj) || PyAnySet_CheckExact(T->vals[a->pos[0]].obj)))
        return pure(T, a, fn);
    return a->npos ? set_from(T, fn, a->pos[0]) : set_new(T, fn, NULL, 0);
}

static int32_t b_dict(tracer *T, const call_args *a, PyObject *fn)
{
    int32_t d = tv_new(T, V_DICT);
    (void)fn;
    if (d < 0 || arg_count(T, a, 0, 1, "dict") || (a->npos && dict_fill(T, d, a->pos[0])))
        return -1;
    for (int k = 0; k < a->nkw; k++)
        if (tr_dict_set(T, d, a->kwn[k], a->kwv[k]))
            return -1;
    return d;
}

/* Whether values it[0..n) all have a trace-time value (constants, and
 * containers holding only constants). */
static int all_consts(tracer *T, const int32_t *it, int n)
{
    for (int i = 0; i < n; i++) {
        tv *x = &T->vals[it[i]];
        if (x->kind == V_TUPLE || x->kind == V_LIST || x->kind == V_DICT) {
            if (!all_consts(T, x->items, x->n))
                return 0;
        } else if (x->kind != V_OBJ && x->kind != V_SLICE) {
            return 0;
        }
    }
    return 1;
}

/* sum(iterable, start=0): of constants, Python's own sum; with tensors,
 * start + x0 + x1 + ... as graph adds. */
/* Whether value v is a set (from outside, or made here without tensors)
 * whose elements are all of `ints` (ints and bools) or anything: then an
 * answer that does not depend on the iteration order (sorted, min, max,
 * any, all; sum of ints) may be computed on the set itself. Its
 * elements are guarded, its order is not. */
static int order_free_set(tracer *T, int32_t v, int ints)
{
    tv *x = &T->vals[v];
    PyObject *o = x->kind == V_OBJ && PyAnySet_Check(x->obj) ? x->obj : set_is(T, v) ? x->aux : NULL;
    Py_ssize_t pos = 0;
    PyObject *k;
    Py_hash_t h;
    while (o && _PySet_NextEntry(o, &pos, &k, &h))
        if (!tr_is_plain_const(k) || (ints && !PyLong_Check(k)))
            return 0;
    return o != NULL;
}

/* fn(set v, *rest) computed on the set itself (order_free_set). */
static int32_t on_set(tracer *T, int32_t v, const call_args *a, PyObject *fn)
{
    PyObject *o = T->vals[v].kind == V_OBJ ? tr_value(T, v) : T->vals[v].aux;
    int32_t c = o ? tv_obj(T, o, -1) : -1;   /* its value guarded by tr_value, or made here */
    if (c < 0)
        return -1;
    int32_t pos[8] = { c };
    call_args b = *a;
    if (a->npos > 8)
        return tr_break(T, "too many arguments");
    memcpy(pos + 1, a->pos + 1, sizeof(int32_t) * (size_t)(a->npos - 1));
    b.pos = pos;
    return pure(T, &b, fn);
}

static int32_t b_sum(tracer *T, const call_args *a, PyObject *fn)
{
    int32_t *it;
    int n;
    if (a->npos >= 1 && order_free_set(T, a->pos[0], 1) && all_consts(T, a->pos + 1, a->npos - 1))
        return on_set(T, a->pos[0], a, fn);   /* integers add up the same in any order */
    if (arg_count(T, a, 1, 2, "sum") || bi_items(T, a->pos[0], &it, &n))
        return -1;
    int32_t acc = a->npos > 1 ? a->pos[1] : kwarg(a, "start");
    if (all_consts(T, it, n) && (acc < 0 || all_consts(T, &acc, 1))) {
        int32_t l = tv_tuple(T, it, n), pos[2] = { l, acc };
        call_args b = { .pos = pos, .npos = acc < 0 ? 1 : 2 };
        return l < 0 ? -1 : pure(T, &b, fn);
    }
    if (acc < 0)
        acc = tv_int(T, 0);
    for (int i = 0; acc >= 0 && i < n; i++)
        acc = tr_binop(T, NB_ADD, acc, it[i]);
    return acc;
}

/* any/all: lazily, stopping where Python stops. */
static int32_t b_any_all(tracer *T, const call_args *a, PyObject *fn)
{
    int want = strcmp(((PyCFunctionObject *)fn)->m_ml->ml_name, "any") == 0;
    if (arg_count(T, a, 1, 1, want ? "any" : "all"))
        return -1;
    if (order_free_set(T, a->pos[0], 0))
        return on_set(T, a->pos[0], a, fn);
    int32_t it = bi_iter(T, a->pos[0]), v;
    int more, t;
    while (it >= 0 && (more = bi_next(T, it, &v)) != 0) {
        if (more < 0 || tr_truth(T, v, &t))
            return -1;
        if (t == want)
            return tv_obj(T, want ? Py_True : Py_False, -1);
    }
    return it < 0 ? -1 : tv_obj(T, want ? Py_False : Py_True, -1);
}

/* ---------- ordering by keys: sorted, list.sort, min/max(key=) ---------- */

/* Items of value v copied into a new array (*out, PyMem_Free it): calls
 * made while ordering may grow the arena. */
static int items_copy(tracer *T, int32_t v, int32_t **out, int *n)
{
    int32_t *it;
    if (bi_items(T, v, &it, n))
        return -1;
    if (!(*out = PyMem_Malloc(sizeof(int32_t) * (size_t)(*n + 1))))
        return PyErr_NoMemory(), -1;
    memcpy(*out, it, sizeof(int32_t) * (size_t)*n);
    return 0;
}

/* The Python list of the sort keys of items[0..n): key(item) (key -1 or
 * None: the item), each a trace-time value. New reference, or NULL. */
static PyObject *sort_keys(tracer *T, const int32_t *items, int n, int32_t key)
{
    int by_fn = key >= 0 && !(T->vals[key].kind == V_OBJ && T->vals[key].obj == Py_None);
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        call_args b = { .pos = (int32_t *)&items[i], .npos = 1 };
        int32_t k = by_fn ? tr_call(T, key, &b) : items[i];
        PyObject *o = k < 0 ? NULL : T->vals[k].kind == V_TENSOR ? NULL : tr_pyobj(T, k);
        if (!o) {
            if (k >= 0 && T->vals[k].kind == V_TENSOR)
                tr_break(T, "ordering tensors depends on their data");
            Py_CLEAR(l);
        } else {
            PyList_SET_ITEM(l, i, o);
        }
    }
    return l;
}

/* fn(range(n), key=keys.__getitem__, **extra) for builtin fn (sorted,
 * min, max): Python's own answer over the key values, as indices. New
 * reference, or NULL (the trace raises what eager would). */
static PyObject *by_index(tracer *T, PyObject *fn, PyObject *keys, PyObject *extra)
{
    PyObject *get = PyObject_GetAttrString(keys, "__getitem__");
    PyObject *rng = get ? PyObject_CallFunction((PyObject *)&PyRange_Type, "n", PyList_GET_SIZE(keys)) : NULL;
    PyObject *args = rng ? PyTuple_Pack(1, rng) : NULL, *kw = args ? PyDict_Copy(extra) : NULL;
    PyObject *r = kw && !PyDict_SetItemString(kw, "key", get) ? PyObject_Call(fn, args, kw) : NULL;
    Py_XDECREF(get);
    Py_XDECREF(rng);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    if (!r)
        tr_raise_error(T);
    return r;
}

/* The keyword arguments of an ordering call other than key (reverse,
 * default) as a dict of their values; *key the key function (-1: none). */
static PyObject *order_kwargs(tracer *T, const call_args *a, int32_t *key)
{
    PyObject *kw = PyDict_New();
    *key = -1;
    for (int k = 0; kw && k < a->nkw; k++) {
        if (PyUnicode_CompareWithASCIIString(a->kwn[k], "key") == 0) {
            *key = a->kwv[k];
            continue;
        }
        PyObject *o = tr_pyobj(T, a->kwv[k]);
        if (!o || PyDict_SetItem(kw, a->kwn[k], o))
            Py_CLEAR(kw);
        Py_XDECREF(o);
    }
    return kw;
}

/* The items of v ordered as fn (sorted) orders them by key: a new list
 * value; in place into v (a list made here) when inplace. */
static int32_t sort_values(tracer *T, int32_t v, const call_args *a, int inplace)
{
    int32_t key, *items, l = -1;
    int n;
    PyObject *kw = order_kwargs(T, a, &key);
    if (!kw || items_copy(T, v, &items, &n)) {
        Py_XDECREF(kw);
        return -1;
    }
    PyObject *keys = sort_keys(T, items, n, key), *order = keys ? by_index(T, sorted_fn, keys, kw) : NULL;
    if (order)
        l = inplace ? v : tv_new(T, V_LIST);
    if (l >= 0 && inplace)
        T->vals[l].n = 0;
    for (Py_ssize_t i = 0; l >= 0 && order && i < PyList_GET_SIZE(order); i++)
        if (tv_push_item(T, l, items[PyLong_AsSsize_t(PyList_GET_ITEM(order, i))], NULL))
            l = -1;
    PyMem_Free(items);
    Py_XDECREF(kw);
    Py_XDECREF(keys);
    Py_XDECREF(order);
    return l < 0 ? -1 : inplace ? none(T) : l;
}

/* sorted(iterable, key=None, reverse=False). */
static int32_t b_sorted(tracer *T, const call_args *a, PyObject *fn)
{
    if (a->npos != 1)
        return pure(T, a, fn);   /* eager's TypeError */
    if (!a->nkw && order_free_set(T, a->pos[0], 0))   /* a set's elements are distinct: one order */
        return on_set(T, a->pos[0], a, fn);
    return sort_values(T, a->pos[0], a, 0);
}

/* min/max(iterable or *args, key=None[, default]): over constants,
 * Python's own; with key=, the item whose key Python picks (tensors
 * ordered by a constant key); over tensors themselves: a break (their
 * order depends on their data). */
static int32_t b_minmax(tracer *T, const call_args *a, PyObject *fn)
{
    int32_t *it = a->pos, key = -1, seq;
    int n = a->npos;
    if (n == 1 && !a->nkw && order_free_set(T, a->pos[0], 0))
        return on_set(T, a->pos[0], a, fn);
    if (n == 1 && bi_items(T, a->pos[0], &it, &n))
        return -1;
    for (int k = 0; k < a->nkw; k++)
        if (PyUnicode_CompareWithASCIIString(a->kwn[k], "key") == 0)
            key = a->kwv[k];
    if (all_consts(T, it, n) && key < 0 && all_consts(T, a->kwv, a->nkw)) {
        if ((seq = tv_tuple(T, it, n)) < 0)
            return -1;
        call_args b = { .pos = &seq, .npos = 1, .kwn = a->kwn, .kwv = a->kwv, .nkw = a->nkw };
        return pure(T, &b, fn);
    }
    int32_t *items, r = -1, dflt = kwarg(a, "default");
    if ((seq = tv_tuple(T, it, n)) < 0 || items_copy(T, seq, &items, &n))
        return -1;
    call_args rest = { .kwn = a->kwn, .kwv = a->kwv, .nkw = a->nkw };
    PyObject *kn[32];
    int32_t kv[32];
    if (dflt >= 0 && n == 0) {
        PyMem_Free(items);
        return dflt;
    }
    if (dflt >= 0) {   /* only used when empty */
        rest.nkw = 0;
        for (int k = 0; k < a->nkw && k < 32; k++)
            if (a->kwv[k] != dflt) {
                kn[rest.nkw] = a->kwn[k];
                kv[rest.nkw++] = a->kwv[k];
            }
        rest.kwn = kn;
        rest.kwv = kv;
    }
    PyObject *kw = order_kwargs(T, &rest, &key), *keys = kw ? sort_keys(T, items, n, key) : NULL;
    PyObject *at = keys ? by_index(T, fn, keys, kw) : NULL;
    if (at)
        r = items[PyLong_AsSsize_t(at)];
    PyMem_Free(items);
    Py_XDECREF(kw);
    Py_XDECREF(keys);
    Py_XDECREF(at);
    return r;
}

static int32_t b_number(tracer *T, const call_args *a, PyObject *fn)
{
    for (int i = 0; i < a->npos; i++)
        if (T->vals[a->pos[i]].kind == V_TENSOR)
            return tr_break(T, "converting a tensor to a Python %s depends on its data (.item())",
                            ((PyTypeObject *)fn)->tp_name);
    return pure(T, a, fn);
}

static int32_t b_abs_round(tracer *T, const call_args *a, PyObject *fn)
{
    int is_abs = PyCFunction_Check(fn) && !strcmp(((PyCFunctionObject *)fn)->m_ml->ml_name, "abs");
    if (a->npos == 1 && T->vals[a->pos[0]].kind == V_TENSOR)
        return ops_unary(T, is_abs ? SMELT_OP_ABS : SMELT_OP_ROUND, a->pos[0]);
    return pure(T, a, fn);
}

static int32_t b_pow(tracer *T, const call_args *a, PyObject *fn)
{
    if (a->npos == 2 && !a->nkw)
        return tr_binop(T, NB_POWER, a->pos[0], a->pos[1]);
    return pure(T, a, fn);
}

/* attr_or_missing without the exceptions the lookup raises. */
/* Guards that class value v (a type) keeps having no attribute `name`:
 * its identity, and the key's absence from each class's __dict__ along
 * its MRO (fetched from v's source). 0, or -1. */
static int class_attr_absent(tracer *T, int32_t v, PyObject *name)
{
    static PyObject *s_mro, *s_dict;
    int32_t src = T->vals[v].src;
    if (src < 0)
        return 0;
    if (!s_mro && (!(s_mro = PyUnicode_InternFromString("__mro__")) || !(s_dict = PyUnicode_InternFromString("__dict__"))))
        return -1;
    PyObject *mro = ((PyTypeObject *)T->vals[v].obj)->tp_mro;
    int32_t ms = tr_src_new(T, SRC_ATTR, src, 0, s_mro);
    if (!tr_const(T, v) || !mro || tr_keep(T, name))
        return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); i++) {
        int32_t ds = tr_src_new(T, SRC_ATTR, tr_src_new(T, SRC_ITEM, ms, i, NULL), 0, s_dict);
        if (tr_add_guard(T, TG_HAS_KEY, ds, name, 0))
            return -1;
    }
    return 0;
}

static int32_t attr_lookup(tracer *T, int32_t v, int32_t namev)
{
    PyObject *name = tr_const(T, namev);
    if (!name)
        return -1;
    if (!PyUnicode_Check(name))
        return tr_break(T, "attribute name is not a str");
    tv *x = &T->vals[v];
    int32_t ov;
    if (x->kind == V_INST)
        return obj_attr(T, v, name, 1);
    if (x->kind == V_OBJ && T->nattrw && obj_overlay_get(T, x->obj, name, &ov))
        return ov >= 0 ? ov : tr_break(T, "attribute %U was deleted by the traced code", name);
    if (x->kind == V_OBJ && tr_is_module(x->obj))
        return tr_module_attr(T, v, name, 1);
    if (x->kind == V_OBJ && !PyModule_Check(x->obj) && !PyType_Check(x->obj)) {
        /* Python code that decides the attribute (a property's getter, the
         * class's __getattr__/__getattribute__) is traced, not run here:
         * running it would do its side effects at trace time */
        static PyObject *s_ga, *s_gat;
        if ((!s_ga && !(s_ga = PyUnicode_InternFromString("__getattr__"))) ||
            (!s_gat && !(s_gat = PyUnicode_InternFromString("__getattribute__"))))
            return -1;
        PyTypeObject *tp = Py_TYPE(x->obj);
        PyObject *ca = _PyType_Lookup(tp, name), *ga = _PyType_Lookup(tp, s_ga), *gat = _PyType_Lookup(tp, s_gat);
        int python = (ca && PyObject_TypeCheck(ca, &PyProperty_Type)) || (ga && PyFunction_Check(ga));
        (void)gat;
        int has = python ? 1 : PyObject_HasAttr(x->obj, name);
        if (!has && (tr_add_guard(T, TG_TYPE, x->src, (PyObject *)Py_TYPE(x->obj), 0) || tr_guard_absent(T, v, name)))
            return -1;
        if (!has)
            return -2;
    } else if (x->kind == V_OBJ && PyType_Check(x->obj) && !PyObject_HasAttr(x->obj, name)) {
        return class_attr_absent(T, v, name) ? -1 : -2;
    } else if (x->kind != V_OBJ) {   /* tensors and containers: what their type has */
        PyObject *t = type_of(T, v);
        if (!t)
            return -1;
        if (!PyObject_HasAttr(t, name))
            return x->kind == V_TENSOR ? tr_tensor_inst_attr(T, v, name, 1) : -2;
    }
    return tr_load_attr(T, v, name);
}

/* getattr(o, name) / hasattr: -2 when the attribute is missing (its
 * absence guarded), or when looking it up raised AttributeError (a
 * __getattr__ or property of traced code). */
static int32_t attr_or_missing(tracer *T, int32_t v, int32_t namev)
{
    int32_t r = attr_lookup(T, v, namev);
    if (r == -1 && T->exc && !T->broke && PyErr_GivenExceptionMatches(T->exc, PyExc_AttributeError)) {
        Py_CLEAR(T->exc);
        return -2;
    }
    return r;
}

static int32_t b_getattr(tracer *T, const call_args *a, PyObject *fn)
{
    (void)fn;
    if (arg_count(T, a, 2, 3, "getattr"))
        return -1;
    int32_t r = attr_or_missing(T, a->pos[0], a->pos[1]);
    if (r == -2 && a->npos == 3)
        return a->pos[2];
    if (r != -2)
        return r;
    PyObject *msg = PyUnicode_FromFormat("no attribute %R", T->vals[a->pos[1]].obj);
    PyObject *e = msg ? PyObject_CallOneArg(PyExc_AttributeError, msg) : NULL;
    Py_XDECREF(msg);
    return tr_raise(T, e);
}

/* setattr(o, name, value) / delattr(o, name): STORE_ATTR / DELETE_ATTR. */
static int32_t b_setattr(tracer *T, const call_args *a, PyObject *fn)
{
    int del = !strcmp(((PyCFunctionObject *)fn)->m_ml->ml_name, "delattr");
    if (arg_count(T, a, 3 - del, 3 - del, del ? "delattr" : "setattr") || a->nkw)
        return a->nkw ? tr_break(T, "setattr() with keywords") : -1;
    PyObject *name = tr_const(T, a->pos[1]);
    if (!name)
        return -1;
    if (!PyUnicode_CheckExact(name))
        return tr_break(T, "attribute name is not a str");
    PyObject *in = Py_NewRef(name);
    PyUnicode_InternInPlace(&in);   /* the overlay and instance dicts compare by value; kept by the trace */
    int bad = tr_keep(T, in) || obj_setattr(T, a->pos[0], in, del ? -1 : a->pos[2]);
    Py_DECREF(in);
    return bad ? -1 : none(T);
}

static int32_t b_hasattr(tracer *T, const call_args *a, PyObject *fn)
{
    (void)fn;
    if (arg_count(T, a, 2, 2, "hasattr"))
        return -1;
    int32_t r = attr_or_missing(T, a->pos[0], a->pos[1]);
    if (r == -1)
        return -1;
    if (r >= 0 && T->vals[r].kind == V_OBJ &&   /* its presence: a guard on it */
        tr_add_guard(T, TG_TYPE, T->vals[r].src, (PyObject *)Py_TYPE(T->vals[r].obj), 0))
        return -1;
    return tv_obj(T, r >= 0 ? Py_True : Py_False, -1);
}

/* Whether any of values it[0..n) is an object whose attributes the trace
 * assigned (its real state is not what the trace sees). */
static int any_overlaid(tracer *T, const int32_t *it, int n)
{
    for (int i = 0; T->nattrw && i < n; i++)
        if (T->vals[it[i]].kind == V_OBJ && obj_overlaid(T, T->vals[it[i]].obj))
            return 1;
    return 0;
}

/* fn applied now to the concrete values of the arguments. */
static int32_t pure(tracer *T, const call_args *a, PyObject *fn)
{
    if (any_overlaid(T, a->pos, a->npos) || any_overlaid(T, a->kwv, a->nkw))
        return tr_break(T, "a call at trace time would see attributes the traced code assigned");
    PyObject *args = PyTuple_New(a->npos), *kw = a->nkw ? PyDict_New() : NULL, *r = NULL;
    int ok = args && (!a->nkw || kw);
    for (int i = 0; ok && i < a->npos; i++) {
        PyObject *o = set_is(T, a->pos[i]) ? set_pyobj(T, a->pos[i]) : tr_pyobj(T, a->pos[i]);
        if (!(ok = o != NULL))
            break;
        PyTuple_SET_ITEM(args, i, o);
    }
    for (int i = 0; ok && i < a->nkw; i++) {
        PyObject *o = tr_pyobj(T, a->kwv[i]);
        ok = o && !PyDict_SetItem(kw, a->kwn[i], o);
        Py_XDECREF(o);
    }
    if (ok && !(r = PyObject_Call(fn, args, kw)))
        tr_raise_error(T);   /* what the call raises on these (guarded) values, eager raises too */
    Py_XDECREF(args);
    Py_XDECREF(kw);
    if (!r)
        return -1;
    int32_t v = tv_obj(T, r, -1);
    Py_DECREF(r);
    return v;
}

int32_t bi_pure(tracer *T, const call_args *a, PyObject *fn)
{
    return pure(T, a, fn);
}

static const struct { const char *name; bi_fn fn; } builtin_table[] = {
    { "range", b_range }, { "enumerate", b_enumerate }, { "zip", b_zip }, { "map", b_map },
    { "filter", b_filter }, { "reversed", b_reversed }, { "iter", b_iter }, { "next", b_next },
    { "len", b_len }, { "isinstance", b_isinstance }, { "type", b_type }, { "callable", b_callable },
    { "tuple", b_container }, { "list", b_container }, { "dict", b_dict }, { "sum", b_sum },
    { "any", b_any_all }, { "all", b_any_all }, { "min", b_minmax }, { "max", b_minmax },
    { "int", b_number }, { "float", b_number }, { "bool", b_number }, { "abs", b_abs_round },
    { "round", b_abs_round }, { "pow", b_pow }, { "getattr", b_getattr }, { "hasattr", b_hasattr },
    { "setattr", b_setattr }, { "delattr", b_setattr },
    { "str", pure }, { "repr", pure }, { "divmod", pure }, { "issubclass", pure }, { "sorted", b_sorted },
    { "set", b_set }, { "frozenset", b_set }, { "hash", pure }, { "ord", pure }, { "chr", pure },
    { "format", pure }, { "slice", b_slice },
};

/* ---------- operator, functools, math ---------- */

/* operator.X: BINARY_OP number, compare op, or one of the special kinds. */
enum { OPK_BIN, OPK_CMP, OPK_NEG, OPK_POS, OPK_INV, OPK_NOT, OPK_TRUTH, OPK_ITEM, OPK_CONTAINS };

static const struct { const char *name; int kind, code; } operator_table[] = {
    { "add", OPK_BIN, NB_ADD }, { "sub", OPK_BIN, NB_SUBTRACT }, { "mul", OPK_BIN, NB_MULTIPLY },
    { "truediv", OPK_BIN, NB_TRUE_DIVIDE }, { "floordiv", OPK_BIN, NB_FLOOR_DIVIDE },
    { "mod", OPK_BIN, NB_REMAINDER }, { "pow", OPK_BIN, NB_POWER }, { "matmul", OPK_BIN, NB_MATRIX_MULTIPLY },
    { "and_", OPK_BIN, NB_AND }, { "or_", OPK_BIN, NB_OR }, { "xor", OPK_BIN, NB_XOR },
    { "lshift", OPK_BIN, NB_LSHIFT }, { "rshift", OPK_BIN, NB_RSHIFT },
    { "iadd", OPK_BIN, NB_INPLACE + NB_ADD }, { "isub", OPK_BIN, NB_INPLACE + NB_SUBTRACT },
    { "imul", OPK_BIN, NB_INPLACE + NB_MULTIPLY }, { "itruediv", OPK_BIN, NB_INPLACE + NB_TRUE_DIVIDE },
    { "lt", OPK_CMP, Py_LT }, { "le", OPK_CMP, Py_LE }, { "eq", OPK_CMP, Py_EQ }, { "ne", OPK_CMP, Py_NE },
    { "gt", OPK_CMP, Py_GT }, { "ge", OPK_CMP, Py_GE },
    { "neg", OPK_NEG, 0 }, { "pos", OPK_POS, 0 }, { "invert", OPK_INV, 0 }, { "inv", OPK_INV, 0 },
    { "not_", OPK_NOT, 0 }, { "truth", OPK_TRUTH, 0 }, { "getitem", OPK_ITEM, 0 }, { "contains", OPK_CONTAINS, 0 },
};

static int32_t call_operator(tracer *T, PyObject *fn, const call_args *a)
{
    const char *name = ((PyCFunctionObject *)fn)->m_ml->ml_name;
    if (all_consts(T, a->pos, a->npos))
        return pure(T, a, fn);
    for (size_t i = 0; i < sizeof operator_table / sizeof operator_table[0]; i++) {
        if (strcmp(name, operator_table[i].name))
            continue;
        int k = operator_table[i].kind, two = k == OPK_BIN || k == OPK_CMP || k == OPK_ITEM || k == OPK_CONTAINS;
        if (a->nkw || a->npos != (two ? 2 : 1))
            return tr_break(T, "operator.%s arguments", name);
        int32_t x = a->pos[0], y = two ? a->pos[1] : -1;
        int t;
        switch (k) {
        case OPK_BIN: return tr_binop(T, operator_table[i].code, x, y);
        case OPK_CMP: return tr_compare(T, operator_table[i].code, x, y);
        case OPK_ITEM: return tr_subscr(T, x, y);
        case OPK_NEG: return ops_unary(T, SMELT_OP_NEG, x);
        case OPK_POS: return x;
        case OPK_INV: return ops_unary(T, SMELT_OP_BITWISE_NOT, x);
        case OPK_NOT: case OPK_TRUTH:
            return tr_truth(T, x, &t) ? -1 : tv_obj(T, (t ^ (k == OPK_NOT)) ? Py_True : Py_False, -1);
        default: break;
        }
    }
    return tr_break(T, "operator.%s on tensors is not supported", name);
}

/* functools.reduce(fn, iterable[, initial]). */
static int32_t call_reduce(tracer *T, const call_args *a)
{
    int32_t *it;
    int n, i = 0;
    if (a->nkw || a->npos < 2 || a->npos > 3 || bi_items(T, a->pos[1], &it, &n))
        return a->nkw || a->npos < 2 || a->npos > 3 ? tr_break(T, "reduce() arguments") : -1;
    int32_t acc = a->npos == 3 ? a->pos[2] : n ? it[i++] : -1;
    if (acc < 0)
        return tr_break(T, "reduce() of an empty sequence");
    for (; acc >= 0 && i < n; i++) {
        int32_t pair[2] = { acc, it[i] };
        call_args b = { .pos = pair, .npos = 2 };
        acc = tr_call(T, a->pos[0], &b);
    }
    return acc;
}

/* A builtin method bound to an immutable constant ("a".join, (1, 2).index,
 * dtype.to_real): safe to run now. */
static int immutable_self(PyObject *self)
{
    return PyUnicode_CheckExact(self) || PyLong_CheckExact(self) || PyFloat_CheckExact(self) ||
           PyBytes_CheckExact(self) || PyTuple_CheckExact(self) || PyFrozenSet_CheckExact(self) ||
           self == Py_None || PyBool_Check(self);
}

int bi_init(void)
{
    PyObject *b = PyImport_ImportModule("builtins"), *torch = PyImport_ImportModule("torch");
    by_obj = PyDict_New();
    s_modules = PyUnicode_InternFromString("_modules");
    s_keys = PyUnicode_InternFromString("keys");
    if (!b || !torch || !by_obj || !s_modules || !s_keys || set_init())
        goto fail;
    for (size_t i = 0; i < sizeof builtin_table / sizeof builtin_table[0]; i++) {
        PyObject *f = PyObject_GetAttrString(b, builtin_table[i].name), *idx = PyLong_FromSize_t(i);
        int bad = !f || !idx || PyDict_SetItem(by_obj, f, idx);
        Py_XDECREF(f);
        Py_XDECREF(idx);
        if (bad)
            goto fail;
    }
    PyObject *it = PyImport_ImportModule("itertools");
    itertools_repeat = it ? PyObject_GetAttrString(it, "repeat") : NULL;
    static const char *itn[3] = { "chain", "islice", "product" };
    for (int i = 0; i < 3; i++)
        itertools_fns[i] = it ? PyObject_GetAttrString(it, itn[i]) : NULL;
    itertools_fns[3] = itertools_fns[0] ? PyObject_GetAttrString(itertools_fns[0], "from_iterable") : NULL;
    Py_XDECREF(it);
    PyObject *ft = PyImport_ImportModule("functools");
    partial_type = ft ? PyObject_GetAttrString(ft, "partial") : NULL;
    Py_XDECREF(ft);
    tuple_new = PyObject_GetAttrString((PyObject *)&PyTuple_Type, "__new__");
    dict_fromkeys = PyObject_GetAttrString((PyObject *)&PyDict_Type, "fromkeys");
    sorted_fn = PyObject_GetAttrString(b, "sorted");
    PyObject *op = PyImport_ImportModule("operator");
    static const char *gn[3] = { "itemgetter", "attrgetter", "methodcaller" };
    for (int i = 0; i < 3; i++)
        getters[i] = op ? PyObject_GetAttrString(op, gn[i]) : NULL;
    Py_XDECREF(op);
    PyObject *coll = PyImport_ImportModule("collections");
    count_elements = coll ? PyObject_GetAttrString(coll, "_count_elements") : NULL;
    Py_XDECREF(coll);
    if (!itertools_repeat || !itertools_fns[0] || !itertools_fns[1] || !itertools_fns[2] || !itertools_fns[3] ||
        !PyCFunction_Check(itertools_fns[3]) || !partial_type || !tuple_new || !dict_fromkeys || !PyCFunction_Check(dict_fromkeys) ||
        !count_elements || !PyCFunction_Check(count_elements) || !sorted_fn || !getters[0] || !getters[1] ||
        !getters[2])
        goto fail;
    finfo = PyObject_GetAttrString(torch, "finfo");
    device = PyObject_GetAttrString(torch, "device");
    iinfo = PyObject_GetAttrString(torch, "iinfo");
    PyObject *C = PyObject_GetAttrString(torch, "_C");
    static const char *qn[5] = { "_has_torch_function", "_has_torch_function_unary", "_has_torch_function_variadic",
                                 "_is_tracing", "_get_tracing_state" };
    for (int i = 0; C && i < 5; i++)
        torch_queries[i] = PyObject_GetAttrString(C, qn[i]);
    Py_XDECREF(C);
    PyErr_Clear();
    Py_DECREF(b);
    Py_DECREF(torch);
    return 0;
fail:
    Py_XDECREF(b);
    Py_XDECREF(torch);
    Py_CLEAR(by_obj);
    return -1;
}

/* Whether value v would make torch dispatch to __torch_function__: a
 * tensor subclass other than Parameter, or an object defining it. */
static int overrides_torch(tracer *T, int32_t v)
{
    tv *x = &T->vals[v];
    if (x->kind == V_TENSOR) {
        PyObject *t = x->obj;
        return t && t != ops_tensor_type() && strcmp(((PyTypeObject *)t)->tp_name, "Parameter");
    }
    if (x->kind == V_TUPLE || x->kind == V_LIST) {
        for (int i = 0; i < x->n; i++)
            if (overrides_torch(T, T->vals[v].items[i]))
                return 1;
        return 0;
    }
    return x->kind == V_OBJ && !PyType_Check(x->obj) && PyObject_HasAttrString((PyObject *)Py_TYPE(x->obj), "__torch_function__");
}

/* torch's dispatch queries inside torch's Python code: no overrides (or
 * a break where one would apply), not tracing. */
static int32_t torch_query(tracer *T, int which, const call_args *a)
{
    if (which == 3)
        return tv_obj(T, Py_False, -1);
    if (which == 4)
        return tv_obj(T, Py_None, -1);
    for (int i = 0; i < a->npos; i++)
        if (overrides_torch(T, a->pos[i]))
            return tr_break(T, "an argument overrides __torch_function__");
    return tv_obj(T, Py_False, -1);
}

/* itertools.chain(*iterables): lazy over iter(iterables); from_iterable
 * (outer): lazy over iter(outer) itself. */
static int32_t b_chain(tracer *T, const call_args *a, int from_iterable)
{
    if (a->nkw || (from_iterable && a->npos != 1))
        return tr_break(T, "itertools.chain arguments");
    int32_t outer = from_iterable ? a->pos[0] : tv_tuple(T, a->pos, a->npos);
    int32_t o = outer < 0 ? -1 : bi_iter(T, outer), it = o < 0 ? -1 : new_iter(T, IT_CHAIN, o);
    return it;
}

/* itertools.islice(iterable, stop) / islice(iterable, start, stop[, step]). */
static int32_t b_islice(tracer *T, const call_args *a)
{
    int64_t v[3] = { 0, -1, 1 };
    if (a->nkw || a->npos < 2 || a->npos > 4)
        return tr_break(T, "itertools.islice arguments");
    for (int i = 1; i < a->npos; i++) {
        int at = a->npos == 2 ? 1 : i - 1;
        int32_t p = a->pos[i];
        if (T->vals[p].kind == V_OBJ && T->vals[p].obj == Py_None)
            continue;
        if (tr_int(T, p, &v[at]))
            return -1;
        if (v[at] < 0 || v[at] > MAX_ITEMS || (at == 2 && v[at] == 0))
            return tr_raise(T, PyObject_CallFunction(PyExc_ValueError, "s", "bad islice() arguments"));
    }
    int32_t src = bi_iter(T, a->pos[0]), it = src < 0 ? -1 : new_iter(T, IT_ISLICE, -1);
    if (it < 0 || tv_push_item(T, it, src, NULL))
        return -1;
    T->vals[it].sl[0] = (int32_t)v[0];
    T->vals[it].sl[1] = (int32_t)v[1];
    T->vals[it].sl[2] = (int32_t)v[2];
    return it;
}

/* itertools.product(*iterables, repeat=1): its tuples (it reads its
 * inputs in full first, as CPython does), iterated. */
static int32_t b_product(tracer *T, const call_args *a)
{
    int64_t rep = 1;
    int32_t rv = kwarg(a, "repeat"), pools[64], sizes[64], idx[64];
    int np = a->npos;
    if (a->nkw > (rv >= 0) || (rv >= 0 && tr_int(T, rv, &rep)) || rep < 0 || np * rep > 64)
        return T->broke || PyErr_Occurred() ? -1 : tr_break(T, "itertools.product arguments");
    long total = 1;
    for (int i = 0; i < np; i++) {
        int32_t *it;
        int n;
        if (bi_items(T, a->pos[i], &it, &n) || (pools[i] = tv_tuple(T, it, n)) < 0)
            return -1;
        sizes[i] = n;
    }
    for (int i = np; i < np * rep; i++) {
        pools[i] = pools[i % np];
        sizes[i] = sizes[i % np];
    }
    np *= (int)rep;
    for (int i = 0; i < np && total <= MAX_ITEMS; i++)
        total *= sizes[i];
    if (total > MAX_ITEMS / (np + 1))
        return tr_break(T, "itertools.product of %ld tuples", total);
    int32_t l = tv_new(T, V_LIST), t[64];
    memset(idx, 0, sizeof idx);
    for (long k = 0; l >= 0 && k < total; k++) {
        for (int i = 0; i < np; i++)
            t[i] = T->vals[pools[i]].items[idx[i]];
        if (tv_push_item(T, l, tv_tuple(T, t, np), NULL))
            return -1;
        for (int i = np - 1; i >= 0 && ++idx[i] == sizes[i]; i--)
            idx[i] = 0;
    }
    return l < 0 ? -1 : bi_iter(T, l);
}

/* itertools.repeat(obj, times): the tuple of `times` obj (a finite
 * iterable, as torch's _ntuple helpers use it); without times: a break. */
static int32_t b_repeat(tracer *T, const call_args *a)
{
    int32_t times = a->npos > 1 ? a->pos[1] : kwarg(a, "times");
    int64_t n;
    if (a->npos < 1 || times < 0)
        return tr_break(T, "itertools.repeat without times");
    if (tr_int(T, times, &n))
        return -1;
    if (n < 0 || n > 64)
        return tr_break(T, "itertools.repeat of %lld items", (long long)n);
    int32_t items[64];
    for (int64_t i = 0; i < n; i++)
        items[i] = a->pos[0];
    return tv_tuple(T, items, (int)n);
}

/* dict.fromkeys(iterable, value=None): a dict made here. */
static int32_t b_fromkeys(tracer *T, const call_args *a)
{
    int32_t *it, d = tv_new(T, V_DICT), val = a->npos == 2 ? a->pos[1] : tv_obj(T, Py_None, -1);
    int n;
    if (a->nkw || a->npos < 1 || a->npos > 2)
        return tr_break(T, "dict.fromkeys() arguments");
    if (d < 0 || val < 0 || bi_items(T, a->pos[0], &it, &n))
        return -1;
    for (int i = 0; i < n; i++) {
        PyObject *key = bi_key(T, it[i]);
        if (!key || tr_dict_set(T, d, key, val))
            return -1;
    }
    return d;
}

/* collections._count_elements(mapping, iterable): mapping[e] =
 * mapping.get(e, 0) + 1 for each element, through the mapping's own
 * methods (a Counter made in the trace). */
static int32_t b_count_elements(tracer *T, const call_args *a)
{
    int32_t *it, zero = tv_int(T, 0), one = tv_int(T, 1);
    int n;
    PyObject *get = PyUnicode_InternFromString("get");
    int32_t getv = get && !tr_keep(T, get) && a->npos == 2 && !a->nkw ? tr_load_attr(T, a->pos[0], get) : -1;
    Py_XDECREF(get);
    if (getv < 0 || zero < 0 || one < 0 || bi_items(T, a->pos[1], &it, &n))
        return getv < 0 && a->npos != 2 ? tr_break(T, "_count_elements() arguments") : -1;
    int32_t *items = PyMem_Malloc(sizeof(int32_t) * (size_t)(n + 1));
    if (!items)
        return PyErr_NoMemory(), -1;
    memcpy(items, it, sizeof(int32_t) * (size_t)n);   /* the calls may grow the arena */
    int rc = 0;
    for (int i = 0; !rc && i < n; i++) {
        int32_t pos[2] = { items[i], zero };
        call_args b = { .pos = pos, .npos = 2 };
        int32_t c = tr_call(T, getv, &b), s = c < 0 ? -1 : tr_binop(T, NB_ADD, c, one);
        rc = s < 0 || tr_store_subscr(T, a->pos[0], items[i], s) ? -1 : 0;
    }
    PyMem_Free(items);
    return rc ? -1 : none(T);
}

/* attrgetter's lookup of dotted name `path` (a str) on value v. */
static int32_t dotted_attr(tracer *T, int32_t v, PyObject *path)
{
    PyObject *dot = PyUnicode_FromString("."), *parts = dot ? PyUnicode_Split(path, dot, -1) : NULL;
    Py_XDECREF(dot);
    for (Py_ssize_t i = 0; parts && v >= 0 && i < PyList_GET_SIZE(parts); i++) {
        PyObject *name = PyList_GET_ITEM(parts, i);
        PyUnicode_InternInPlace(&name);   /* the list still owns it */
        PyList_SET_ITEM(parts, i, name);
        v = tr_keep(T, name) ? -1 : tr_load_attr(T, v, name);
    }
    Py_XDECREF(parts);
    return parts ? v : -1;
}

/* methodcaller's call of method `name` of value obj with constant
 * arguments, from its __reduce__: (methodcaller, (name, *args)) or
 * (partial(methodcaller, name, **kwargs), args). */
static int32_t call_method_of(tracer *T, PyObject *head, PyObject *args, int32_t obj)
{
    PyObject *name = NULL, *kw = NULL;
    Py_ssize_t first = 0;
    if (PyType_Check(head) && PyTuple_GET_SIZE(args) >= 1) {
        name = PyTuple_GET_ITEM(args, 0);
        first = 1;
    } else if (Py_IS_TYPE(head, (PyTypeObject *)partial_type)) {
        PyObject *pa = PyObject_GetAttrString(head, "args");
        kw = PyObject_GetAttrString(head, "keywords");
        name = pa && PyTuple_Check(pa) && PyTuple_GET_SIZE(pa) == 1 ? PyTuple_GET_ITEM(pa, 0) : NULL;
        if (name && tr_keep(T, name))
            name = NULL;
        Py_XDECREF(pa);
    }
    int32_t pos[64], kwv[32], m = -1;
    PyObject *kwn[32];
    int nk = 0, np = (int)(PyTuple_GET_SIZE(args) - first);
    Py_ssize_t p = 0;
    PyObject *k, *v;
    if (name && PyUnicode_Check(name) && np <= 64 && (!kw || (PyDict_Check(kw) && PyDict_GET_SIZE(kw) <= 32)) &&
        !(kw && tr_keep(T, kw)))
        m = tr_load_attr(T, obj, name);
    else
        m = PyErr_Occurred() ? -1 : tr_break(T, "operator.methodcaller of this form");
    for (int i = 0; m >= 0 && i < np; i++)
        if ((pos[i] = tv_obj(T, PyTuple_GET_ITEM(args, first + i), -1)) < 0)
            m = -1;
    while (m >= 0 && kw && PyDict_Next(kw, &p, &k, &v)) {
        kwn[nk] = k;
        if ((kwv[nk++] = tv_obj(T, v, -1)) < 0)
            m = -1;
    }
    Py_XDECREF(kw);
    call_args b = { .pos = pos, .npos = np, .kwn = kwn, .kwv = kwv, .nkw = nk };
    return m < 0 ? -1 : tr_call(T, m, &b);
}

/* g(obj) for an itemgetter / attrgetter / methodcaller object g (which,
 * its index in getters): what it does, on the traced value obj. Its
 * items, names and arguments are constants read from its __reduce__. */
static int32_t call_getter(tracer *T, PyObject *g, int which, const call_args *a)
{
    if (a->npos != 1 || a->nkw)
        return tr_break(T, "%s called with %d arguments", Py_TYPE(g)->tp_name, a->npos);
    PyObject *red = PyObject_CallMethod(g, "__reduce__", NULL), *args = red ? PyTuple_GetItem(red, 1) : NULL;
    int32_t out[64], r = -1;
    Py_ssize_t n = args && PyTuple_Check(args) ? PyTuple_GET_SIZE(args) : -1;
    if (n < 0 || n > 64) {
        Py_XDECREF(red);
        PyErr_Clear();
        return tr_break(T, "%s of this form", Py_TYPE(g)->tp_name);
    }
    if (which == 2) {
        r = call_method_of(T, PyTuple_GET_ITEM(red, 0), args, a->pos[0]);
        Py_DECREF(red);
        return r;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyTuple_GET_ITEM(args, i);
        int32_t k = tv_obj(T, it, -1);
        out[i] = k < 0 ? -1 : which == 0 ? tr_subscr(T, a->pos[0], k) : dotted_attr(T, a->pos[0], it);
        if (out[i] < 0)
            break;
        r = n == 1 ? out[0] : i == n - 1 ? tv_tuple(T, out, (int)n) : 0;
    }
    Py_DECREF(red);
    return r;
}

/* A call of builtin/C callable fn; -2 when fn is none smelt knows. */
int32_t bi_call(tracer *T, PyObject *fn, const call_args *a)
{
    if (fn == itertools_repeat)
        return b_repeat(T, a);
    if (fn == itertools_fns[0] || fn == itertools_fns[1] || fn == itertools_fns[2])
        return fn == itertools_fns[0] ? b_chain(T, a, 0) : fn == itertools_fns[1] ? b_islice(T, a) : b_product(T, a);
    if (PyCFunction_Check(fn) && ((PyCFunctionObject *)fn)->m_ml == ((PyCFunctionObject *)itertools_fns[3])->m_ml)
        return b_chain(T, a, 1);
    if (fn == partial_type)
        return obj_partial_new(T, a);
    if (fn == tuple_new)
        return obj_tuple_new(T, a);
    for (int i = 0; i < 3; i++) {
        if (fn == getters[i])   /* making one: its items/names are constants */
            return all_consts(T, a->pos, a->npos) && all_consts(T, a->kwv, a->nkw) ? pure(T, a, fn) : -2;
        if (Py_IS_TYPE(fn, (PyTypeObject *)getters[i]))
            return call_getter(T, fn, i, a);
    }
    if (PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) == (PyObject *)&PyDict_Type &&
        ((PyCFunctionObject *)fn)->m_ml == ((PyCFunctionObject *)dict_fromkeys)->m_ml)
        return b_fromkeys(T, a);   /* dict.fromkeys (a new bound method at each lookup) */
    if (PyCFunction_Check(fn) && ((PyCFunctionObject *)fn)->m_ml == ((PyCFunctionObject *)count_elements)->m_ml)
        return b_count_elements(T, a);
    PyObject *idx = PyDict_GetItemWithError(by_obj, fn);
    if (idx)
        return builtin_table[PyLong_AsSsize_t(idx)].fn(T, a, fn);
    PyErr_Clear();
    for (int i = 0; i < 5; i++)
        if (fn == torch_queries[i])
            return torch_query(T, i, a);
    if (fn == finfo || fn == iinfo || fn == device || fn == ops_size_type())
        return all_consts(T, a->pos, a->npos) ? pure(T, a, fn) : -2;
    if (!PyCFunction_Check(fn))
        return -2;
    PyObject *self = PyCFunction_GET_SELF(fn);
    if (self && PyModule_Check(self)) {
        const char *mn = PyModule_GetName(self);
        if (!mn)
            return PyErr_Clear(), -2;
        if (!strcmp(mn, "_operator") || !strcmp(mn, "operator"))
            return call_operator(T, fn, a);
        if (!strcmp(mn, "_functools") && !strcmp(((PyCFunctionObject *)fn)->m_ml->ml_name, "reduce"))
            return call_reduce(T, a);
        if (!strcmp(mn, "math"))
            return all_consts(T, a->pos, a->npos) ? pure(T, a, fn)
                                                  : tr_break(T, "math.%s of a tensor depends on its data",
                                                             ((PyCFunctionObject *)fn)->m_ml->ml_name);
        return -2;
    }
    if (self && immutable_self(self))
        return pure(T, a, fn);
    return -2;
}

/* ---------- list, tuple and dict methods ---------- */

/* Key value k of a dict made here, as the object stored (borrowed, kept
 * alive by the trace): a constant (guarded as tr_const does) or a tuple of
 * constants (built by value). NULL: a break or an error. */
PyObject *bi_key(tracer *T, int32_t k)
{
    if (T->vals[k].kind != V_TUPLE)
        return tr_const(T, k);
    PyObject *o = tr_pyobj(T, k);
    if (o && tr_keep(T, o))
        Py_CLEAR(o);
    Py_XDECREF(o);   /* the keep list holds it */
    return o;
}

static int is_name(PyObject *name, const char *s)
{
    return PyUnicode_CompareWithASCIIString(name, s) == 0;
}

/* Index of the item equal to constant value k in items, -1 if none. */
static int find_const(tracer *T, const int32_t *it, int n, int32_t k, int *at)
{
    PyObject *key = tr_pyobj(T, k);
    *at = -1;
    if (!key)
        return -1;
    for (int i = 0; i < n && *at < 0; i++) {
        if (T->vals[it[i]].kind != V_OBJ) {
            Py_DECREF(key);
            return tr_break(T, "searching a sequence that holds non-constants");
        }
        PyObject *o = tr_const(T, it[i]);
        if (!o || PyObject_RichCompareBool(o, key, Py_EQ) == 1)
            *at = o ? i : *at;
        if (!o) {
            Py_DECREF(key);
            return -1;
        }
    }
    Py_DECREF(key);
    PyErr_Clear();
    return 0;
}

static int32_t seq_query(tracer *T, int32_t self, PyObject *name, const call_args *a)
{
    tv *x = &T->vals[self];
    int at, cnt = 0;
    if (a->npos != 1)
        return tr_break(T, "%U() arguments", name);
    if (is_name(name, "index")) {
        if (find_const(T, x->items, x->n, a->pos[0], &at))
            return -1;
        return at < 0 ? tr_break(T, "index(): value not found") : tv_int(T, at);
    }
    for (int i = 0; i < T->vals[self].n; i++) {   /* count */
        if (find_const(T, &T->vals[self].items[i], 1, a->pos[0], &at))
            return -1;
        cnt += at == 0;
    }
    return tv_int(T, cnt);
}

/* Method of a tuple we cannot model: run on its concrete value (tuples
 * of constants only; torch.Size.numel() and the like). */
static int32_t tuple_const_method(tracer *T, int32_t self, PyObject *name, const call_args *a)
{
    PyObject *o = tr_pyobj(T, self);
    PyObject *m = o ? PyObject_GetAttr(o, name) : NULL;
    Py_XDECREF(o);
    if (!m) {
        PyErr_Clear();
        return T->broke ? -1 : tr_break(T, "tuple method %U", name);
    }
    int32_t r = tr_keep(T, m) ? -1 : pure(T, a, m);
    Py_DECREF(m);
    return r;
}


static int32_t list_mutate(tracer *T, int32_t self, PyObject *name, const call_args *a)
{
    tv *x = &T->vals[self];
    int64_t i = -1;
    if (is_name(name, "append") && a->npos == 1)
        return tv_push_item(T, self, a->pos[0], NULL) ? -1 : none(T);
    if (is_name(name, "extend") && a->npos == 1) {
        int32_t *it;
        int n;
        if (bi_items(T, a->pos[0], &it, &n))
            return -1;
        for (int k = 0; k < n; k++)
            if (tv_push_item(T, self, a->pos[0] == self ? T->vals[self].items[k] : it[k], NULL))
                return -1;
        return none(T);
    }
    if (is_name(name, "insert") && a->npos == 2) {
        if (tr_int(T, a->pos[0], &i) || tv_push_item(T, self, a->pos[1], NULL))
            return -1;
        x = &T->vals[self];
        int64_t n = x->n - 1;
        i = i < 0 ? (i + n < 0 ? 0 : i + n) : (i > n ? n : i);
        memmove(&x->items[i + 1], &x->items[i], sizeof(int32_t) * (size_t)(n - i));
        x->items[i] = a->pos[1];
        return none(T);
    }
    if (is_name(name, "pop") && a->npos <= 1) {
        if (a->npos && tr_int(T, a->pos[0], &i))
            return -1;
        x = &T->vals[self];
        i = i < 0 ? i + x->n : i;
        if (i < 0 || i >= x->n)
            return tr_break(T, "pop from an empty list or index out of range");
        int32_t v = x->items[i];
        memmove(&x->items[i], &x->items[i + 1], sizeof(int32_t) * (size_t)(x->n - i - 1));
        x->n--;
        return v;
    }
    if (is_name(name, "remove") && a->npos == 1) {   /* the first item equal to a constant */
        int at;
        if (find_const(T, x->items, x->n, a->pos[0], &at))
            return -1;
        if (at < 0)
            return tr_break(T, "list.remove(): value not found");
        x = &T->vals[self];
        memmove(&x->items[at], &x->items[at + 1], sizeof(int32_t) * (size_t)(x->n - at - 1));
        x->n--;
        return none(T);
    }
    if (is_name(name, "reverse") && a->npos == 0) {
        for (int k = 0; k < x->n / 2; k++) {
            int32_t t = x->items[k];
            x->items[k] = x->items[x->n - 1 - k];
            x->items[x->n - 1 - k] = t;
        }
        return none(T);
    }
    if (is_name(name, "clear") && a->npos == 0) {
        x->n = 0;
        return none(T);
    }
    return tr_break(T, "list method %U is not supported", name);
}

static int32_t list_method(tracer *T, int32_t self, PyObject *name, const call_args *a)
{
    if (is_name(name, "sort") && !a->npos)
        return tr_mutable(T, self, "list.sort") ? -1 : sort_values(T, self, a, 1);
    if (a->nkw)
        return tr_break(T, "list.%U with keywords", name);
    if (is_name(name, "index") || is_name(name, "count"))
        return seq_query(T, self, name, a);
    if (is_name(name, "copy") && a->npos == 0) {
        int32_t c = tv_tuple(T, T->vals[self].items, T->vals[self].n);
        if (c >= 0)
            T->vals[c].kind = V_LIST;
        return c;
    }
    if (tr_mutable(T, self, "a list method"))
        return -1;
    return list_mutate(T, self, name, a);
}

static int32_t dict_view(tracer *T, int32_t d, int which)
{
    int32_t l = tv_new(T, V_LIST);
    for (int i = 0; l >= 0 && i < T->vals[d].n; i++) {
        int32_t k = which != 1 ? tv_obj(T, T->vals[d].keys[i], -1) : -1, pair[2] = { k, T->vals[d].items[i] };
        int32_t it = which == 0 ? k : which == 1 ? T->vals[d].items[i] : tv_tuple(T, pair, 2);
        if (tv_push_item(T, l, it, NULL))
            return -1;
    }
    return l;
}

static int dict_find(tracer *T, int32_t d, int32_t k, int *at)
{
    PyObject *key = tr_pyobj(T, k);
    *at = -1;
    if (!key)
        return -1;
    for (int i = 0; i < T->vals[d].n && *at < 0; i++)
        if (PyObject_RichCompareBool(T->vals[d].keys[i], key, Py_EQ) == 1)
            *at = i;
    Py_DECREF(key);
    PyErr_Clear();
    return 0;
}

static int32_t dict_mutate(tracer *T, int32_t d, PyObject *name, const call_args *a)
{
    int at;
    if (tr_mutable(T, d, "a dict method"))
        return -1;
    if (is_name(name, "update") && a->npos <= 1) {   /* a dict, a mapping or (key, value) pairs */
        if (a->npos && dict_fill(T, d, a->pos[0]))
            return -1;
        for (int k = 0; k < a->nkw; k++)
            if (tr_dict_set(T, d, a->kwn[k], a->kwv[k]))
                return -1;
        return none(T);
    }
    if (is_name(name, "clear") && !a->npos && !a->nkw) {
        T->vals[d].n = 0;
        return none(T);
    }
    if (is_name(name, "popitem") && !a->npos && !a->nkw) {
        tv *x = &T->vals[d];
        if (!x->n)
            return tr_raise(T, PyObject_CallFunction(PyExc_KeyError, "s", "popitem(): dictionary is empty"));
        int32_t pair[2] = { tv_obj(T, x->keys[x->n - 1], -1), x->items[x->n - 1] };
        T->vals[d].n--;
        return pair[0] < 0 ? -1 : tv_tuple(T, pair, 2);
    }
    if ((is_name(name, "pop") || is_name(name, "setdefault")) && a->npos >= 1 && a->npos <= 2) {
        if (dict_find(T, d, a->pos[0], &at))
            return -1;
        if (is_name(name, "setdefault")) {
            PyObject *key = at < 0 ? bi_key(T, a->pos[0]) : NULL;
            if (at < 0 && (!key || tv_push_item(T, d, a->npos == 2 ? a->pos[1] : none(T), key)))
                return -1;
            return at >= 0 ? T->vals[d].items[at] : T->vals[d].items[T->vals[d].n - 1];
        }
        if (at < 0 && a->npos == 2)
            return a->pos[1];
        if (at < 0) {
            PyObject *key = tr_pyobj(T, a->pos[0]), *e = key ? PyObject_CallOneArg(PyExc_KeyError, key) : NULL;
            Py_XDECREF(key);
            return key ? tr_raise(T, e) : -1;
        }
        tv *x = &T->vals[d];
        int32_t v = x->items[at];
        memmove(&x->items[at], &x->items[at + 1], sizeof(int32_t) * (size_t)(x->n - at - 1));
        memmove(&x->keys[at], &x->keys[at + 1], sizeof(PyObject *) * (size_t)(x->n - at - 1));
        x->n--;
        return v;
    }
    return tr_break(T, "dict method %U is not supported", name);
}

static int32_t dict_method(tracer *T, int32_t d, PyObject *name, const call_args *a)
{
    int at;
    if (is_name(name, "keys") || is_name(name, "values") || is_name(name, "items"))
        return a->npos ? tr_break(T, "dict.%U() arguments", name)
                       : dict_view(T, d, is_name(name, "keys") ? 0 : is_name(name, "values") ? 1 : 2);
    if (is_name(name, "get") && a->npos >= 1 && a->npos <= 2) {
        if (dict_find(T, d, a->pos[0], &at))
            return -1;
        return at >= 0 ? T->vals[d].items[at] : a->npos == 2 ? a->pos[1] : none(T);
    }
    if (is_name(name, "copy") && a->npos == 0) {
        int32_t c = tv_new(T, V_DICT);
        for (int i = 0; c >= 0 && i < T->vals[d].n; i++)
            if (tv_push_item(T, c, T->vals[d].items[i], T->vals[d].keys[i]))
                return -1;
        return c;
    }
    return dict_mutate(T, d, name, a);
}

/* self.name(*a) for a list, tuple or dict value. */
int32_t bi_method(tracer *T, int32_t self, PyObject *name, const call_args *a)
{
    switch (T->vals[self].kind) {
    case V_LIST: return list_method(T, self, name, a);
    case V_DICT: return dict_method(T, self, name, a);
    case V_TUPLE:
        if ((is_name(name, "index") || is_name(name, "count")) && !a->nkw)
            return seq_query(T, self, name, a);
        return tuple_const_method(T, self, name, a);
    case V_INST:
        if (set_is(T, self))
            return set_method(T, self, name, a);
        return tr_break(T, "method %U of this value is not supported", name);
    default:
        return tr_break(T, "method %U of this value is not supported", name);
    }
}
