/* objects.c — Python objects beyond tensors and containers, while tracing.
 *
 * Instances of plain Python classes created by the traced code (dataclasses,
 * Hugging Face's ModelOutput, small records) are V_INST values: their
 * attributes (`__dict__`) and, for dict-based classes, their items are
 * symbolic dicts; the class's Python methods (__init__, __setattr__,
 * __getitem__, properties, ...) are inlined, the C methods of object, dict
 * and OrderedDict they reach are modelled on those dicts, and a returned
 * instance is rebuilt from its final state (tracer_build_instance).
 *
 * Attribute writes to objects that exist outside the trace go to an
 * overlay that reads see; by the end of the trace every such attribute must
 * be back to its original object (a context-variable set and reset), since
 * the compiled code does not replay the writes; otherwise the trace breaks.
 *
 * Also here: the queries a compiler answers itself (torch.compiler.
 * is_compiling() is True while smelt traces; grad mode, the default dtype
 * and CPU autocast are constants guarded by the guard tree), functions
 * marked as trace-time constants (torch._dynamo.assume_constant_result's
 * marker) and functools.lru_cache wrappers (the wrapped function is traced).
 */
#include "tstate.h"

#include <string.h>

/* Special method names, interned once. */
enum { SN_INIT, SN_NEW, SN_SETATTR, SN_DELATTR, SN_GETATTR, SN_GETATTRIBUTE, SN_DICT, SN_CLASS, SN_GETITEM,
       SN_SETITEM, SN_DELITEM, SN_CONTAINS, SN_LEN, SN_ITER, SN_BOOL, SN_CALL, SN_SLOTS, SN_WRAPPED,
       SN_MARKED, SN_OBJCLASS, SN_NAME, SN_FGET, SN_FSET, SN_FDEL, SN_FUNC, SN_UPDATE, SN_MISSING, SN_COPY,
       SN_FACTORY, SN_FIELDS, SN_MAKE, SN_API, SN_N };
static const char *sn_text[SN_N] = {
    "__init__", "__new__", "__setattr__", "__delattr__", "__getattr__", "__getattribute__", "__dict__",
    "__class__", "__getitem__", "__setitem__", "__delitem__", "__contains__", "__len__", "__iter__",
    "__bool__", "__call__", "__slots__", "__wrapped__", "_dynamo_marked_constant", "__objclass__", "__name__",
    "fget", "fset", "fdel", "__func__", "update", "__missing__", "copy", "default_factory", "_fields", "_make",
    "smelt._api",
};
static PyObject *sn[SN_N];
static PyObject *odict_type, *ddict_type, *lru_type, *module_base, *abc_meta, *partial_type;
static PyObject *copy_fns[2], *copy_dispatch;   /* copy.copy, copy.deepcopy; copyreg.dispatch_table */
static PyObject *grad_mgr, *grad_exit;           /* markers: a grad-mode manager, its __exit__ */
static PyObject *ac_mgr, *ac_exit;               /* markers: a CPU autocast manager, its __exit__ */
static PyObject *ac_enabled_fn, *ac_dtype_fn;    /* torch.is_autocast_enabled, torch.get_autocast_dtype */
static void ac_set(tracer *T, int code);
static int ac_outside_dtype(tracer *T);
static PyObject *autocast_type, *grad_enabled_fn;   /* torch.autocast, torch.is_grad_enabled */
static destructor py_class_dealloc;   /* tp_dealloc of classes made by a class statement */
static PyObject *build_class_fn, *function_meta;   /* builtins.__build_class__, torch.autograd.function.FunctionMeta */

/* What the tracer answers itself, by callable. */
typedef enum query_kind { Q_TRUE, Q_FALSE, Q_GRAD, Q_DTYPE, Q_AUTOCAST, Q_AUTOCAST_DTYPE, Q_SIGNATURE, Q_ENABLE_GRAD, Q_SET_GRAD,
                          Q_RAW_SET_GRAD, Q_ENTER_AUTOCAST, Q_EXIT_AUTOCAST,
                          Q_DISPATCH } query_kind;
static PyObject *queries;   /* dict: callable -> query_kind */

static int add_query(PyObject *root, const char *path, query_kind k)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    PyObject *o = Py_NewRef(root);
    for (char *part = buf, *dot; o && part; part = dot ? dot + 1 : NULL) {
        if ((dot = strchr(part, '.')))
            *dot = 0;
        Py_SETREF(o, PyObject_GetAttrString(o, part));
    }
    PyObject *kv = PyLong_FromLong(k);
    int rc = !o || !kv ? (PyErr_Clear(), 0) : PyDict_SetItem(queries, o, kv);
    Py_XDECREF(o);
    Py_XDECREF(kv);
    return rc;
}

int obj_init(void)
{
    for (int i = 0; i < SN_N; i++)
        if (!(sn[i] = PyUnicode_InternFromString(sn_text[i])))
            return -1;
    PyObject *coll = PyImport_ImportModule("collections"), *ft = PyImport_ImportModule("functools");
    PyObject *torch = PyImport_ImportModule("torch"), *nn = PyImport_ImportModule("torch.nn");
    PyObject *insp = PyImport_ImportModule("inspect");
    PyObject *abc = PyImport_ImportModule("abc");
    PyObject *cp = PyImport_ImportModule("copy"), *creg = PyImport_ImportModule("copyreg");
    copy_fns[0] = cp ? PyObject_GetAttrString(cp, "copy") : NULL;
    copy_fns[1] = cp ? PyObject_GetAttrString(cp, "deepcopy") : NULL;
    copy_dispatch = creg ? PyObject_GetAttrString(creg, "dispatch_table") : NULL;
    Py_XDECREF(cp);
    Py_XDECREF(creg);
    grad_mgr = PyUnicode_InternFromString("<smelt: grad-mode context manager>");
    grad_exit = PyUnicode_InternFromString("<smelt: grad-mode manager exit>");
    autocast_type = torch ? PyObject_GetAttrString(torch, "autocast") : NULL;
    ac_mgr = PyUnicode_InternFromString("<smelt: autocast manager>");
    ac_exit = PyUnicode_InternFromString("<smelt: autocast manager exit>");
    ac_enabled_fn = torch ? PyObject_GetAttrString(torch, "is_autocast_enabled") : NULL;
    ac_dtype_fn = torch ? PyObject_GetAttrString(torch, "get_autocast_dtype") : NULL;
    grad_enabled_fn = torch ? PyObject_GetAttrString(torch, "is_grad_enabled") : NULL;
    abc_meta = abc ? PyObject_GetAttrString(abc, "ABCMeta") : NULL;
    Py_XDECREF(abc);
    odict_type = coll ? PyObject_GetAttrString(coll, "OrderedDict") : NULL;
    ddict_type = coll ? PyObject_GetAttrString(coll, "defaultdict") : NULL;
    lru_type = ft ? PyObject_GetAttrString(ft, "_lru_cache_wrapper") : NULL;
    partial_type = ft ? PyObject_GetAttrString(ft, "partial") : NULL;
    module_base = nn ? PyObject_GetAttrString(nn, "Module") : NULL;
    PyObject *af = PyImport_ImportModule("torch.autograd.function");
    function_meta = af ? PyObject_GetAttrString(af, "FunctionMeta") : NULL;
    Py_XDECREF(af);
    build_class_fn = PyDict_GetItemString(PyEval_GetBuiltins(), "__build_class__");
    queries = PyDict_New();
    PyObject *probe = PyObject_CallFunction((PyObject *)&PyType_Type, "s()N", "_smelt_probe", PyDict_New());
    if (probe)
        py_class_dealloc = ((PyTypeObject *)probe)->tp_dealloc;
    Py_XDECREF(probe);
    static const struct { const char *path; query_kind k; } qs[] = {
        { "compiler.is_compiling", Q_TRUE }, { "compiler.is_dynamo_compiling", Q_TRUE },
        { "_utils.is_compiling", Q_TRUE }, { "compiler.is_exporting", Q_FALSE },
        { "jit.is_scripting", Q_FALSE }, { "jit.is_tracing", Q_FALSE },
        { "is_grad_enabled", Q_GRAD }, { "get_default_dtype", Q_DTYPE },
        { "is_autocast_enabled", Q_AUTOCAST }, { "get_autocast_dtype", Q_AUTOCAST_DTYPE }, { "enable_grad", Q_ENABLE_GRAD }, { "set_grad_enabled", Q_SET_GRAD },
        { "_C._len_torch_dispatch_stack", Q_DISPATCH },
        { "_C._set_grad_enabled", Q_RAW_SET_GRAD },   /* what Dynamo's graphs call for no_grad regions */
        { "amp.autocast_mode._enter_autocast", Q_ENTER_AUTOCAST },   /* ... and for autocast regions */
        { "amp.autocast_mode._exit_autocast", Q_EXIT_AUTOCAST },
    };
    int rc = grad_mgr && grad_exit && autocast_type && ac_mgr && ac_exit && ac_enabled_fn && ac_dtype_fn && grad_enabled_fn && copy_fns[0] && copy_fns[1] && copy_dispatch && odict_type && ddict_type && lru_type && partial_type && module_base && abc_meta && queries && torch && probe && function_meta && build_class_fn ? 0 : -1;
    for (size_t i = 0; !rc && i < sizeof qs / sizeof qs[0]; i++)
        rc = add_query(torch, qs[i].path, qs[i].k);
    rc = rc || !insp ? -1 : add_query(insp, "signature", Q_SIGNATURE);
    Py_XDECREF(insp);
    Py_XDECREF(coll);
    Py_XDECREF(ft);
    Py_XDECREF(torch);
    Py_XDECREF(nn);
    return rc;
}

/* ---------- classes ---------- */

/* Attribute `name` defined by type t itself (not its bases): borrowed, or
 * NULL (error set when the lookup failed). 3.12 keeps the dict of static
 * builtin types outside tp_dict. */
static PyObject *own_attr(PyTypeObject *t, PyObject *name)
{
#if PY_VERSION_HEX >= 0x030c0000
    PyObject *d = PyType_GetDict(t);
#else
    PyObject *d = Py_XNewRef(t->tp_dict);
#endif
    PyObject *r = d ? PyDict_GetItemWithError(d, name) : NULL;
    Py_XDECREF(d);   /* the type keeps its dict, and the item, alive */
    return r;
}

/* The C base whose instance layout a plain Python class keeps (object,
 * dict, OrderedDict or defaultdict), or NULL when cls is not one smelt
 * models: its metaclass must be `type` (or ABCMeta, with no abstract
 * methods left), it must have an instance dict and no non-empty __slots__,
 * no Python __new__ or __getattribute__, no other C base (nor a heap type
 * made in C) in its MRO, and not be an nn.Module (a Python __getattribute__
 * is inlined). OrderedDict and defaultdict themselves are their own bases. */
static PyTypeObject *plain_base(PyObject *cls)
{
    if (cls == odict_type || cls == ddict_type)
        return (PyTypeObject *)cls;
    if (!PyType_Check(cls) || !(Py_IS_TYPE(cls, &PyType_Type) || Py_IS_TYPE(cls, (PyTypeObject *)abc_meta)))
        return NULL;
    PyTypeObject *t = (PyTypeObject *)cls, *b = t;
    if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE) || (t->tp_flags & Py_TPFLAGS_IS_ABSTRACT) || !t->tp_dictoffset ||
        PyType_IsSubtype(t, (PyTypeObject *)module_base))
        return NULL;
    while (b && (b->tp_flags & Py_TPFLAGS_HEAPTYPE))
        b = b->tp_base;
    if (b != &PyBaseObject_Type && b != &PyDict_Type && b != (PyTypeObject *)odict_type &&
        b != (PyTypeObject *)ddict_type)
        return NULL;
    PyObject *mro = t->tp_mro;
    for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *m = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        int heap = !!(m->tp_flags & Py_TPFLAGS_HEAPTYPE);
        PyObject *slots = heap ? own_attr(m, sn[SN_SLOTS]) : NULL;   /* `__slots__ = ()` adds nothing */
        if ((slots && !(PyTuple_Check(slots) && PyTuple_GET_SIZE(slots) == 0)) || (!heap && !PyType_IsSubtype(b, m)) ||
            (heap && m->tp_dealloc != py_class_dealloc))   /* a heap type from C: its own layout */
            return NULL;
    }
    PyObject *ga = _PyType_Lookup(t, sn[SN_GETATTRIBUTE]);
    if (PyErr_Occurred() || _PyType_Lookup(t, sn[SN_NEW]) != _PyType_Lookup(b, sn[SN_NEW]) ||
        (ga != _PyType_Lookup(b, sn[SN_GETATTRIBUTE]) && !PyFunction_Check(ga))) {
        PyErr_Clear();
        return NULL;
    }
    return b;
}

/* Source of attribute `name` of instance v's class (-1: the class has none). */
static int32_t cls_attr_src(tracer *T, int32_t v, PyObject *name)
{
    int32_t cs = T->vals[v].pos;
    return cs < 0 ? -1 : tr_src_new(T, SRC_ATTR, cs, 0, name);
}

/* Source of attribute `name` of the object fetched from src (-1: none). */
static int32_t sub_src(tracer *T, int32_t src, int name)
{
    return src < 0 ? -1 : tr_src_new(T, SRC_ATTR, src, 0, sn[name]);
}

/* Value v as an instance of a plain class (not a super() proxy, a
 * partial or a set); -1 (break) otherwise. */
static int real_inst(tracer *T, int32_t v, const char *what)
{
    static const char *kinds[] = { "an instance", "a super() object", "a functools.partial made in the trace",
                                   "a set made in the trace" };
    if (T->vals[v].kind == V_INST && T->vals[v].sub == INST_PLAIN)
        return 0;
    return tr_break(T, "%s of %s", what, kinds[T->vals[v].sub < 4 ? T->vals[v].sub : 0]);
}

static int32_t call_method(tracer *T, PyObject *fn, int32_t fn_src, const int32_t *pos, int n)
{
    call_args a = { .pos = (int32_t *)pos, .npos = n };
    return tr_inline(T, fn, fn_src, &a);
}

/* A new instance of class cls (C base `base`, the class fetched from
 * source cls_src) with no attributes and no items; its __init__ not run. */
static int32_t inst_alloc(tracer *T, PyObject *cls, PyTypeObject *base, int32_t cls_src)
{
    int32_t v = tv_new(T, V_INST), attrs = tv_new(T, V_DICT), items = base == &PyBaseObject_Type ? -1 : tv_new(T, V_DICT);
    if (v < 0 || attrs < 0 || (base != &PyBaseObject_Type && items < 0) || tr_keep(T, cls))
        return -1;
    tv *x = &T->vals[v];
    x->obj = cls;
    x->aux = (PyObject *)base;
    x->self_ = attrs;
    x->sl[0] = items;
    x->pos = cls_src;
    return v;
}

static int32_t namedtuple_new(tracer *T, int32_t clsv, const call_args *a);

/* cls(*a) for a plain Python class (value clsv, already guarded): a new
 * instance, its Python __init__ inlined; a named tuple class: its __new__
 * inlined. -2 when cls is neither. */
int32_t obj_new_instance(tracer *T, int32_t clsv, const call_args *a)
{
    PyObject *cls = T->vals[clsv].obj;
    PyTypeObject *base = plain_base(cls);
    if (!base)
        return obj_namedtuple_class(cls) ? namedtuple_new(T, clsv, a) : -2;
    int32_t v = inst_alloc(T, cls, base, T->vals[clsv].src);
    if (v < 0)
        return -1;
    PyObject *init = _PyType_Lookup((PyTypeObject *)cls, sn[SN_INIT]);
    int32_t pos[64], r;
    if (a->npos > 62)
        return tr_break(T, "too many arguments");
    pos[0] = v;
    memcpy(pos + 1, a->pos, sizeof(int32_t) * (size_t)a->npos);
    call_args b = { .pos = pos, .npos = a->npos + 1, .kwn = a->kwn, .kwv = a->kwv, .nkw = a->nkw };
    r = init && PyFunction_Check(init) ? tr_inline(T, init, cls_attr_src(T, v, sn[SN_INIT]), &b)
                                       : obj_cmethod(T, init, &b);
    if (r < 0)
        return -1;
    if (T->vals[r].kind != V_OBJ || T->vals[r].obj != Py_None)
        return tr_break(T, "__init__ of %s returned a value", ((PyTypeObject *)cls)->tp_name);
    return v;
}

/* ---------- functools.partial ---------- */

/* func(*args, *a->pos, **{**kw, **a's keywords}): a call of a partial's
 * parts (args a V_TUPLE, kw a V_DICT). */
static int32_t partial_apply(tracer *T, int32_t func, int32_t args, int32_t kw, const call_args *a)
{
    int32_t pos[64], kwv[32];
    PyObject *kwn[32];
    int np = T->vals[args].n, nk = 0;
    if (np + a->npos > 64 || T->vals[kw].n + a->nkw > 32)
        return tr_break(T, "too many arguments to a functools.partial");
    memcpy(pos, T->vals[args].items, sizeof(int32_t) * (size_t)np);
    memcpy(pos + np, a->pos, sizeof(int32_t) * (size_t)a->npos);
    for (int i = 0; i < T->vals[kw].n; i++) {
        if (!PyUnicode_Check(T->vals[kw].keys[i]))
            return tr_break(T, "keywords must be strings");
        kwn[nk] = T->vals[kw].keys[i];
        kwv[nk++] = T->vals[kw].items[i];
    }
    for (int k = 0; k < a->nkw; k++) {   /* the call's keywords replace the partial's */
        int at = 0;
        while (at < nk && PyUnicode_Compare(kwn[at], a->kwn[k]) != 0)
            at++;
        kwn[at] = a->kwn[k];
        kwv[at] = a->kwv[k];
        nk += at == nk;
    }
    call_args b = { .pos = pos, .npos = np + a->npos, .kwn = kwn, .kwv = kwv, .nkw = nk };
    return tr_call(T, func, &b);
}

/* p.name of partial object attribute `name` of outside partial value pv,
 * fetched from its own source. */
static int32_t partial_part(tracer *T, int32_t pv, const char *name)
{
    PyObject *o = PyObject_GetAttrString(T->vals[pv].obj, name), *nm = o ? PyUnicode_InternFromString(name) : NULL;
    int32_t src = nm && T->vals[pv].src >= 0 ? tr_src_new(T, SRC_ATTR, T->vals[pv].src, 0, nm) : -1;
    int32_t v = nm && !tr_keep(T, nm) ? tv_obj(T, o, src) : -1;
    Py_XDECREF(o);
    Py_XDECREF(nm);
    return v;
}

/* A call of functools.partial object pv from outside the trace: its type
 * guarded, its function, arguments and keywords read from their sources
 * (each guarded as it is used), so a partial rebuilt with the same parts
 * reuses the entry and one whose keywords change does not. */
static int32_t call_outside_partial(tracer *T, int32_t pv, const call_args *a)
{
    if (tr_add_guard(T, TG_TYPE, T->vals[pv].src, partial_type, 0))
        return -1;
    int32_t func = partial_part(T, pv, "func"), args = func < 0 ? -1 : partial_part(T, pv, "args");
    int32_t kw = args < 0 ? -1 : partial_part(T, pv, "keywords");
    if (kw < 0 || (kw = tr_dict_value(T, kw)) < 0)
        return -1;
    if (T->vals[args].kind != V_TUPLE)
        return tr_break(T, "a functools.partial with too many arguments");
    return partial_apply(T, func, args, kw, a);
}

static int torch_code(PyObject *fn);

/* o(*a) for an object from outside whose class (not a module's, not
 * torch's) has a Python __call__: inlined with o first, o's type guarded
 * (its attributes are read from their sources). -2 when o is not such an
 * object. */
static int32_t call_user_object(tracer *T, int32_t fn, const call_args *a)
{
    PyObject *o = T->vals[fn].obj;
    PyObject *c = PyType_Check(o) || PyFunction_Check(o) || PyMethod_Check(o) || PyCFunction_Check(o)
                ? NULL : _PyType_Lookup(Py_TYPE(o), sn[SN_CALL]);
    if (!c || !PyFunction_Check(c) || torch_code(c) || tr_is_module(o))
        return -2;
    int32_t pos[64], src = T->vals[fn].src;
    if (a->npos > 62)
        return tr_break(T, "too many arguments");
    if (tr_add_guard(T, TG_TYPE, src, (PyObject *)Py_TYPE(o), 0) || tr_keep(T, c))
        return -1;
    pos[0] = fn;
    memcpy(pos + 1, a->pos, sizeof(int32_t) * (size_t)a->npos);
    call_args b = { .pos = pos, .npos = a->npos + 1, .kwn = a->kwn, .kwv = a->kwv, .nkw = a->nkw };
    int32_t cs = sub_src(T, tr_src_new(T, SRC_TYPE, src, 0, NULL), SN_CALL);
    return tr_add_guard(T, TG_ID, cs, c, 0) ? -1 : tr_inline(T, c, cs, &b);   /* a class's method can be replaced */
}

/* ---------- class statements ---------- */

static PyObject *vfunc_object(tracer *T, int32_t fv, int depth);

/* The real object a function built for a class body holds for value v: a
 * constant (guarded), a tuple of constants, or a function made in the trace
 * (built for real too). NULL with a break for anything else. */
static PyObject *closed_object(tracer *T, int32_t v, int depth)
{
    tv *x = &T->vals[v];
    if (x->kind == V_FUNC)
        return vfunc_object(T, v, depth + 1);
    if (x->kind == V_OBJ || x->kind == V_TUPLE) {
        PyObject *o = x->kind == V_OBJ ? Py_XNewRef(tr_const(T, v)) : tr_pyobj(T, v);
        return o;
    }
    tr_break(T, "a class body's functions close over a %s made in the trace", tr_kind_name(T, v));
    return NULL;
}

/* A real function for V_FUNC fv: its code, globals and defaults, and new
 * cells holding what the trace's cells hold now; those cells become
 * read-only for the rest of the trace (a later assignment breaks), so the
 * copies never disagree with them. */
static PyObject *vfunc_object(tracer *T, int32_t fv, int depth)
{
    if (depth > 8) {
        tr_break(T, "functions nested too deep for a class body");
        return NULL;
    }
    tv *x = &T->vals[fv];
    PyCodeObject *co = (PyCodeObject *)x->obj;
    PyObject *fn = PyFunction_NewWithQualName(x->obj, x->aux, co->co_qualname);
    PyObject *d = fn && x->sl[0] >= 0 ? tr_pyobj(T, x->sl[0]) : NULL;
    if (!fn || (x->sl[0] >= 0 && (!d || PyFunction_SetDefaults(fn, d)))) {
        Py_XDECREF(d);
        Py_XDECREF(fn);
        return NULL;
    }
    Py_XDECREF(d);
    d = x->sl[1] >= 0 ? tr_pyobj(T, x->sl[1]) : NULL;
    if (x->sl[1] >= 0 && (!d || PyFunction_SetKwDefaults(fn, d))) {
        Py_XDECREF(d);
        Py_DECREF(fn);
        return NULL;
    }
    Py_XDECREF(d);
    int n = T->vals[fv].n;
    PyObject *clo = n ? PyTuple_New(n) : NULL;
    for (int i = 0; i < n && clo; i++) {
        int32_t c = T->vals[fv].items[i];
        if (T->vals[c].kind != V_CELL) {
            tr_break(T, "a closure that is not made of cells");
            Py_CLEAR(clo);
            break;
        }
        T->vals[c].frozen = 1;
        int32_t in = T->vals[c].self_;
        PyObject *o = in >= 0 ? closed_object(T, in, depth) : NULL;
        PyObject *cell = in >= 0 && !o ? NULL : PyCell_New(o);
        Py_XDECREF(o);
        if (!cell)
            Py_CLEAR(clo);
        else
            PyTuple_SET_ITEM(clo, i, cell);
    }
    if (n && (!clo || PyFunction_SetClosure(fn, clo)))
        Py_CLEAR(fn);
    Py_XDECREF(clo);
    return fn;
}

/* Whether class statements may subclass base: made by type (or torch's
 * autograd.Function metaclass), and no class in its MRO but object defines
 * __init_subclass__ (whose effects a class built once would not repeat). */
static int subclassable(PyObject *base)
{
    if (!PyType_Check(base) || (!Py_IS_TYPE(base, &PyType_Type) && Py_TYPE(base) != (PyTypeObject *)function_meta))
        return 0;
    PyObject *mro = ((PyTypeObject *)base)->tp_mro;
    static PyObject *s_init_subclass;
    if (!s_init_subclass && !(s_init_subclass = PyUnicode_InternFromString("__init_subclass__")))
        return PyErr_Clear(), 0;
    for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *t = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (t == &PyBaseObject_Type)
            continue;
        PyObject *own = own_attr(t, s_init_subclass);
        if (own || PyErr_Occurred())
            return PyErr_Clear(), 0;
    }
    return mro != NULL;
}

int obj_is_build_class(PyObject *o)
{
    return o == build_class_fn;
}

/* builtins.__build_class__(body, name, *bases) of a class statement in the
 * traced code: the class is built once, at trace time, by running its body
 * for real (a function built from the body's V_FUNC), when its bases are
 * plain classes and its functions close over constants and functions made
 * here. Every call of the compiled code sees that one class; returning it
 * breaks (eager makes a new one per call). */
int32_t obj_build_class(tracer *T, const call_args *a)
{
    if (a->nkw || a->npos < 2 || T->vals[a->pos[0]].kind != V_FUNC)
        return tr_break(T, "a class statement with keywords (metaclass=...)");
    PyObject *args = PyTuple_New(a->npos);
    for (int i = 1; args && i < a->npos; i++) {
        PyObject *o = tr_const(T, a->pos[i]);
        if (!o || (i > 1 && !subclassable(o))) {
            Py_CLEAR(args);
            if (o)
                tr_break(T, "a class statement with a base smelt does not model (%R)", o);
            break;
        }
        PyTuple_SET_ITEM(args, i, Py_NewRef(o));
    }
    PyObject *body = args ? vfunc_object(T, a->pos[0], 0) : NULL;
    if (!body) {
        Py_XDECREF(args);
        return -1;
    }
    PyTuple_SET_ITEM(args, 0, body);
    PyObject *cls = PyObject_Call(build_class_fn, args, NULL);
    Py_DECREF(args);
    if (!cls) {
        PyErr_Clear();
        return tr_break(T, "a class statement raised while built at trace time");
    }
    int bad = tr_keep(T, cls);
    Py_DECREF(cls);
    int32_t v = bad ? -1 : tv_obj(T, cls, -1);
    if (v >= 0)
        T->vals[v].pos = 1;   /* made here: not returned */
    return v;
}

int32_t obj_call_object(tracer *T, int32_t fn, const call_args *a)
{
    if (T->vals[fn].kind == V_OBJ && Py_IS_TYPE(T->vals[fn].obj, (PyTypeObject *)partial_type))
        return call_outside_partial(T, fn, a);
    if (T->vals[fn].kind == V_OBJ && T->vals[fn].obj == grad_exit) {   /* a grad-mode manager's __exit__ */
        tr_grad_mode(T, T->vals[fn].pos);
        return tv_obj(T, Py_None, -1);
    }
    if (T->vals[fn].kind == V_OBJ && T->vals[fn].obj == ac_exit) {   /* an autocast manager's __exit__ */
        ac_set(T, T->vals[fn].pos);
        return tv_obj(T, Py_None, -1);
    }
    return T->vals[fn].kind == V_OBJ ? call_user_object(T, fn, a) : -2;
}

/* Whether value v can be called (a value made here, or a callable object). */
static int callable_value(tracer *T, int32_t v)
{
    tv *x = &T->vals[v];
    if (x->kind == V_OBJ)
        return PyCallable_Check(x->obj);
    return x->kind == V_FUNC || x->kind == V_BOUND ||
           (x->kind == V_INST && (x->sub == INST_PARTIAL ||
                                  (x->sub == INST_PLAIN && _PyType_Lookup((PyTypeObject *)x->obj, sn[SN_CALL]))));
}

/* functools.partial(func, *args, **keywords) made in the trace; a partial
 * made here as func is flattened into it, as CPython does. */
int32_t obj_partial_new(tracer *T, const call_args *a)
{
    if (a->npos < 1)
        return tr_break(T, "functools.partial() without a function");
    int32_t func = a->pos[0];
    if (!callable_value(T, func))
        return tr_raise(T, PyObject_CallFunction(PyExc_TypeError, "s", "the first argument must be callable"));
    int inner = T->vals[func].kind == V_INST && T->vals[func].sub == INST_PARTIAL;
    int32_t p = tv_new(T, V_INST), args = tv_new(T, V_TUPLE), kw = tv_new(T, V_DICT);
    if (p < 0 || args < 0 || kw < 0)
        return -1;
    for (int i = 0; inner && i < T->vals[T->vals[func].sl[0]].n; i++)
        if (tv_push_item(T, args, T->vals[T->vals[func].sl[0]].items[i], NULL))
            return -1;
    for (int i = 1; i < a->npos; i++)
        if (tv_push_item(T, args, a->pos[i], NULL))
            return -1;
    int32_t ikw = inner ? T->vals[func].sl[1] : -1;
    for (int i = 0; ikw >= 0 && i < T->vals[ikw].n; i++)
        if (tr_dict_set(T, kw, T->vals[ikw].keys[i], T->vals[ikw].items[i]))
            return -1;
    for (int k = 0; k < a->nkw; k++)
        if (tr_dict_set(T, kw, a->kwn[k], a->kwv[k]))
            return -1;
    tv *x = &T->vals[p];
    x->sub = INST_PARTIAL;
    x->obj = partial_type;
    x->self_ = inner ? T->vals[func].self_ : func;
    x->sl[0] = args;
    x->sl[1] = kw;
    x->pos = -1;   /* the class has no source */
    return p;
}

/* p.func / p.args / p.keywords of a partial made here. */
static int32_t partial_attr(tracer *T, int32_t p, PyObject *name)
{
    tv *x = &T->vals[p];
    int32_t f = x->self_;
    if (T->vals[f].kind == V_OBJ && Py_IS_TYPE(T->vals[f].obj, (PyTypeObject *)partial_type))
        return tr_break(T, "attribute %U of a functools.partial of a partial", name);   /* CPython may flatten it */
    if (PyUnicode_CompareWithASCIIString(name, "func") == 0)
        return f;
    if (PyUnicode_CompareWithASCIIString(name, "args") == 0)
        return x->sl[0];
    if (PyUnicode_CompareWithASCIIString(name, "keywords") == 0)
        return x->sl[1];
    return tr_break(T, "attribute %U of a functools.partial made in the trace", name);
}

/* a op b and a cmp b with an instance operand: sets made here. */
int32_t obj_binop(tracer *T, int nb, int32_t a, int32_t b)
{
    return set_binop(T, nb, a, b);
}

int32_t obj_compare(tracer *T, int cmp, int32_t a, int32_t b)
{
    return set_compare(T, cmp, a, b);
}

/* ---------- named tuples ---------- */

/* Whether cls is a named tuple class (collections.namedtuple or
 * typing.NamedTuple): a Python subclass of tuple with _fields and the
 * classmethod _make. */
int obj_namedtuple_class(PyObject *cls)
{
    if (!PyType_Check(cls) || !(((PyTypeObject *)cls)->tp_flags & Py_TPFLAGS_HEAPTYPE) ||
        !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type))
        return 0;
    PyObject *f = _PyType_Lookup((PyTypeObject *)cls, sn[SN_FIELDS]), *mk = _PyType_Lookup((PyTypeObject *)cls, sn[SN_MAKE]);
    return f && PyTuple_Check(f) && mk && PyObject_TypeCheck(mk, &PyClassMethod_Type);
}

/* cls(*a) for a named tuple class value clsv: its Python __new__ inlined
 * (it ends in tuple.__new__, obj_tuple_new). */
static int32_t namedtuple_new(tracer *T, int32_t clsv, const call_args *a)
{
    PyObject *cls = T->vals[clsv].obj, *nw = _PyType_Lookup((PyTypeObject *)cls, sn[SN_NEW]);
    PyObject *fn = nw && PyObject_TypeCheck(nw, &PyStaticMethod_Type) ? PyObject_GetAttr(nw, sn[SN_FUNC]) : NULL;
    int32_t r;
    if (!fn || !PyFunction_Check(fn) || tr_keep(T, fn))
        r = PyErr_Occurred() ? -1 : tr_break(T, "named tuple %s without a Python __new__", ((PyTypeObject *)cls)->tp_name);
    else {
        int32_t pos[64];
        if (a->npos > 62) {
            Py_DECREF(fn);
            return tr_break(T, "too many arguments");
        }
        pos[0] = clsv;
        memcpy(pos + 1, a->pos, sizeof(int32_t) * (size_t)a->npos);
        call_args b = { .pos = pos, .npos = a->npos + 1, .kwn = a->kwn, .kwv = a->kwv, .nkw = a->nkw };
        int32_t ns = sub_src(T, T->vals[clsv].src, SN_NEW);
        r = tr_add_guard(T, TG_ID, ns, fn, 0) ? -1 : tr_inline(T, fn, ns, &b);
    }
    Py_XDECREF(fn);
    return r;
}

/* tuple.__new__(cls[, iterable]) for tuple or a named tuple class: a
 * tuple value; a named tuple's carries cls._make, which rebuilds it from
 * a plain tuple (on return, or when a trace-time value is needed). */
int32_t obj_tuple_new(tracer *T, const call_args *a)
{
    if (a->nkw || a->npos < 1 || a->npos > 2)
        return tr_break(T, "tuple.__new__ arguments");
    PyObject *cls = tr_const(T, a->pos[0]);
    if (!cls)
        return -1;
    int32_t *items = NULL;
    int n = 0;
    if (cls != (PyObject *)&PyTuple_Type && !obj_namedtuple_class(cls))
        return tr_break(T, "tuple.__new__ of %R", cls);
    if (a->npos == 2 && bi_items(T, a->pos[1], &items, &n))
        return -1;
    int32_t t = tv_tuple(T, items, n);
    if (t < 0 || cls == (PyObject *)&PyTuple_Type)
        return t;
    PyObject *mk = PyObject_GetAttr(cls, sn[SN_MAKE]);
    if (!mk || tr_keep(T, mk)) {
        Py_XDECREF(mk);
        return -1;
    }
    T->vals[t].obj = mk;
    Py_DECREF(mk);
    return t;
}

/* The class of a named tuple value's obj (cls._make), or NULL. */
PyObject *obj_namedtuple_of(PyObject *tuple_obj)
{
    return tuple_obj && PyMethod_Check(tuple_obj) && obj_namedtuple_class(PyMethod_GET_SELF(tuple_obj))
               ? PyMethod_GET_SELF(tuple_obj) : NULL;
}

/* Attribute `name` of named tuple value v found on its class (fields are
 * read by the caller): methods bound to v, class methods to the class,
 * properties traced, other class attributes read. -2 when v is no named
 * tuple or its class has no such attribute. */
int32_t obj_tuple_attr(tracer *T, int32_t v, PyObject *name)
{
    PyObject *cls = obj_namedtuple_of(T->vals[v].obj);
    PyObject *ca = cls ? _PyType_Lookup((PyTypeObject *)cls, name) : NULL;
    if (!ca)
        return -2;
    if (PyFunction_Check(ca))
        return tr_bound(T, ca, v, -1);
    if (PyObject_TypeCheck(ca, &PyClassMethod_Type) || PyObject_TypeCheck(ca, &PyStaticMethod_Type)) {
        PyObject *fn = PyObject_GetAttr(ca, sn[SN_FUNC]);
        int32_t c = fn && PyObject_TypeCheck(ca, &PyClassMethod_Type) ? tv_obj(T, cls, -1) : -2;
        int32_t r = !fn || tr_keep(T, fn) || c == -1 ? -1 : c == -2 ? tv_obj(T, fn, -1) : tr_bound(T, fn, c, -1);
        Py_XDECREF(fn);
        return r;
    }
    if (PyObject_TypeCheck(ca, &PyProperty_Type)) {
        PyObject *get = PyObject_GetAttr(ca, sn[SN_FGET]);
        int32_t r = get && PyFunction_Check(get) && !tr_keep(T, get) ? call_method(T, get, -1, &v, 1)
                  : get ? tr_break(T, "property %U without a Python getter", name) : -1;
        Py_XDECREF(get);
        return r;
    }
    if (Py_TYPE(ca)->tp_descr_get)
        return tr_break(T, "attribute %U of a named tuple is a %s descriptor", name, Py_TYPE(ca)->tp_name);
    return tv_obj(T, ca, -1);
}

/* ---------- attribute lookup ---------- */

static int is_name(PyObject *a, int which)
{
    return a == sn[which] || PyUnicode_Compare(a, sn[which]) == 0;
}

/* Index of key `name` in dict value d, -1 when absent. */
static int dict_index(tracer *T, int32_t d, PyObject *name)
{
    tv *x = &T->vals[d];
    for (int i = 0; i < x->n; i++)
        if (x->keys[i] == name || PyObject_RichCompareBool(x->keys[i], name, Py_EQ) == 1)
            return i;
    PyErr_Clear();
    return -1;
}


/* What class attribute ca (found for `name` on instance self's class, or a
 * base class for super()) gives when read through self: functions bound,
 * static and class methods unwrapped, the C methods of object/dict bound
 * (modelled when called), properties traced; other descriptors break;
 * plain values are read from the class. src: what getattr(class, name)
 * is fetched from (-1: none); it roots the functions' globals. */
static int32_t class_value(tracer *T, int32_t self, PyObject *name, PyObject *ca, int32_t src)
{
    if (PyFunction_Check(ca))
        return tr_bound(T, ca, self, src);
    if (PyObject_TypeCheck(ca, &PyProperty_Type)) {
        PyObject *get = PyObject_GetAttr(ca, sn[SN_FGET]);
        int32_t r = get && PyFunction_Check(get) && !tr_keep(T, get) ? call_method(T, get, sub_src(T, src, SN_FGET), &self, 1)
                  : get ? tr_break(T, "property %U without a Python getter", name) : -1;
        Py_XDECREF(get);
        return r;
    }
    if (PyObject_TypeCheck(ca, &PyStaticMethod_Type) || PyObject_TypeCheck(ca, &PyClassMethod_Type)) {
        PyObject *fn = PyObject_GetAttr(ca, sn[SN_FUNC]);
        int32_t r = -1;
        if (fn && PyObject_TypeCheck(ca, &PyStaticMethod_Type))
            r = tv_obj(T, fn, src);   /* getattr(class, name) is the function itself */
        else if (fn && PyFunction_Check(fn) && !tr_keep(T, fn))
            r = tr_bound(T, fn, tv_obj(T, T->vals[self].obj, T->vals[self].pos), sub_src(T, src, SN_FUNC));
        else if (fn)
            r = tr_break(T, "classmethod %U", name);
        Py_XDECREF(fn);
        return r;
    }
    if (PyObject_TypeCheck(ca, &PyMethodDescr_Type) || PyObject_TypeCheck(ca, &PyWrapperDescr_Type))
        return tr_bound(T, ca, self, -1);
    if (Py_TYPE(ca)->tp_descr_get)
        return tr_break(T, "attribute %U is a %s descriptor", name, Py_TYPE(ca)->tp_name);
    return tv_obj(T, ca, src);
}

/* super().name for a super() proxy sp over an instance: the first class
 * after sp's class in the instance's MRO that defines name. */
static int32_t super_inst_attr(tracer *T, int32_t sp, PyObject *name)
{
    int32_t self = T->vals[sp].self_;
    PyObject *mro = ((PyTypeObject *)T->vals[self].obj)->tp_mro, *start = T->vals[sp].obj;
    Py_ssize_t i = 0, n = PyTuple_GET_SIZE(mro);
    while (i < n && PyTuple_GET_ITEM(mro, i) != start)
        i++;
    for (i++; i < n; i++) {
        PyObject *ca = own_attr((PyTypeObject *)PyTuple_GET_ITEM(mro, i), name);
        if (ca)
            return class_value(T, self, name, ca, -1);
        if (PyErr_Occurred())
            return -1;
    }
    return tr_break(T, "super().%U: no such attribute", name);
}

/* Attribute `name` of instance v as object.__getattribute__ finds it:
 * data descriptors, the instance dict, class attributes. -2 when missing. */
static int32_t generic_getattr(tracer *T, int32_t v, PyObject *name)
{
    tv *x = &T->vals[v];
    PyTypeObject *cls = (PyTypeObject *)x->obj;
    if (is_name(name, SN_DICT))
        return x->self_;
    if (is_name(name, SN_CLASS))
        return tv_obj(T, (PyObject *)cls, x->pos);
    PyObject *ca = _PyType_Lookup(cls, name);
    if (ca && Py_TYPE(ca)->tp_descr_set && !PyObject_TypeCheck(ca, &PyProperty_Type))
        return tr_break(T, "attribute %U of %s is a %s descriptor", name, cls->tp_name, Py_TYPE(ca)->tp_name);
    int at = ca && PyObject_TypeCheck(ca, &PyProperty_Type) ? -1 : dict_index(T, x->self_, name);
    if (at >= 0)
        return T->vals[T->vals[v].self_].items[at];
    return ca ? class_value(T, v, name, ca, cls_attr_src(T, v, name)) : -2;
}

/* Raises AttributeError for attribute `name` missing on instance v. */
static int32_t raise_missing(tracer *T, int32_t v, PyObject *name)
{
    PyObject *msg = PyUnicode_FromFormat("'%s' object has no attribute '%U'", ((PyTypeObject *)T->vals[v].obj)->tp_name, name);
    PyObject *e = msg ? PyObject_CallOneArg(PyExc_AttributeError, msg) : NULL;
    Py_XDECREF(msg);
    if (e && PyObject_SetAttrString(e, "name", name))
        Py_CLEAR(e);
    return tr_raise(T, e);
}

/* v.name through the class's Python __getattribute__ (inlined), then its
 * __getattr__ when that raises AttributeError, as type slots do. */
static int32_t python_getattribute(tracer *T, int32_t v, PyObject *gat, PyObject *name, int missing_ok)
{
    int32_t pos[2] = { v, tv_obj(T, name, -1) };
    if (pos[1] < 0)
        return -1;
    int32_t gs = cls_attr_src(T, v, sn[SN_GETATTRIBUTE]);
    int32_t r = tr_add_guard(T, TG_ID, gs, gat, 0) ? -1 : call_method(T, gat, gs, pos, 2);
    PyObject *ga = _PyType_Lookup((PyTypeObject *)T->vals[v].obj, sn[SN_GETATTR]);
    if (r >= 0 || !T->exc || T->broke || !PyErr_GivenExceptionMatches(T->exc, PyExc_AttributeError))
        return r;
    if (ga && PyFunction_Check(ga)) {
        Py_CLEAR(T->exc);
        return call_method(T, ga, cls_attr_src(T, v, sn[SN_GETATTR]), pos, 2);
    }
    if (missing_ok)
        Py_CLEAR(T->exc);
    return missing_ok ? -2 : -1;
}

/* Attribute `name` of instance value v: object.__getattribute__'s lookup,
 * then the class's Python __getattr__. -2 when missing and missing_ok
 * (otherwise AttributeError is raised in the trace). */
int32_t obj_attr(tracer *T, int32_t v, PyObject *name, int missing_ok)
{
    int32_t r;
    switch ((inst_kind)T->vals[v].sub) {
    case INST_SUPER: return super_inst_attr(T, v, name);
    case INST_PARTIAL: return partial_attr(T, v, name);
    case INST_SET:
        r = set_attr(T, v, name);
        return r != -2 || missing_ok ? r : raise_missing(T, v, name);
    case INST_PLAIN: break;
    }
    if (T->vals[v].aux == ddict_type && is_name(name, SN_FACTORY))
        return T->vals[v].sl[1] >= 0 ? T->vals[v].sl[1] : tv_obj(T, Py_None, -1);
    PyObject *gat = _PyType_Lookup((PyTypeObject *)T->vals[v].obj, sn[SN_GETATTRIBUTE]);
    if (gat && PyFunction_Check(gat))
        return python_getattribute(T, v, gat, name, missing_ok);
    r = generic_getattr(T, v, name);
    if (r != -2)
        return r;
    PyObject *ga = _PyType_Lookup((PyTypeObject *)T->vals[v].obj, sn[SN_GETATTR]);
    if (ga && PyFunction_Check(ga)) {
        int32_t pos[2] = { v, tv_obj(T, name, -1) };
        return pos[1] < 0 ? -1 : call_method(T, ga, cls_attr_src(T, v, sn[SN_GETATTR]), pos, 2);
    }
    return missing_ok ? -2 : raise_missing(T, v, name);
}

/* ---------- attribute writes ---------- */

/* object.__setattr__(v, name, val) on an instance (val -1: __delattr__):
 * a property's setter/deleter is traced, other data descriptors break,
 * anything else updates the instance dict. */
static int inst_set_generic(tracer *T, int32_t v, PyObject *name, int32_t val)
{
    PyTypeObject *cls = (PyTypeObject *)T->vals[v].obj;
    PyObject *ca = _PyType_Lookup(cls, name);
    if (ca && PyObject_TypeCheck(ca, &PyProperty_Type)) {
        PyObject *f = PyObject_GetAttr(ca, sn[val < 0 ? SN_FDEL : SN_FSET]);
        int32_t pos[2] = { v, val };
        int32_t fs = sub_src(T, cls_attr_src(T, v, name), val < 0 ? SN_FDEL : SN_FSET);
        int32_t r = f && PyFunction_Check(f) && !tr_keep(T, f) ? call_method(T, f, fs, pos, val < 0 ? 1 : 2)
                  : f ? tr_break(T, "property %U cannot be set", name) : -1;
        Py_XDECREF(f);
        return r < 0 ? -1 : 0;
    }
    if (ca && Py_TYPE(ca)->tp_descr_set)
        return tr_break(T, "STORE_ATTR: attribute %U of %s is a %s descriptor", name, cls->tp_name, Py_TYPE(ca)->tp_name);
    if (!cls->tp_dictoffset)
        return tr_break(T, "STORE_ATTR: %s instances have no attribute dict", cls->tp_name);
    int32_t d = T->vals[v].self_;
    if (val >= 0)
        return tr_dict_set(T, d, name, val);
    int at = dict_index(T, d, name);
    if (at < 0)
        return tr_break(T, "del of a missing attribute %U", name);
    tv *x = &T->vals[d];
    memmove(&x->items[at], &x->items[at + 1], sizeof(int32_t) * (size_t)(x->n - at - 1));
    memmove(&x->keys[at], &x->keys[at + 1], sizeof(PyObject *) * (size_t)(x->n - at - 1));
    x->n--;
    return 0;
}

/* v.name = val (val -1: del v.name) on an instance: the class's Python
 * __setattr__/__delattr__ when it has one, else object's. */
static int inst_setattr(tracer *T, int32_t v, PyObject *name, int32_t val)
{
    if (real_inst(T, v, "attribute assignment"))
        return -1;
    PyTypeObject *cls = (PyTypeObject *)T->vals[v].obj;
    int which = val < 0 ? SN_DELATTR : SN_SETATTR;
    PyObject *sa = _PyType_Lookup(cls, sn[which]);
    if (!sa || sa == _PyType_Lookup(&PyBaseObject_Type, sn[which]))
        return inst_set_generic(T, v, name, val);
    if (!PyFunction_Check(sa))
        return tr_break(T, "STORE_ATTR: %s.%U is not a Python function", cls->tp_name, sn[which]);
    int32_t pos[3] = { v, tv_obj(T, name, -1), val };
    if (pos[1] < 0)
        return -1;
    return call_method(T, sa, cls_attr_src(T, v, sn[which]), pos, val < 0 ? 2 : 3) < 0 ? -1 : 0;
}

/* The overlay entry for attribute `name` of object o, or NULL. */
static struct tr_attrw *overlay_find(tracer *T, PyObject *o, PyObject *name)
{
    for (int32_t i = T->nattrw - 1; i >= 0; i--)
        if (T->attrw[i].obj == o && PyUnicode_Compare(T->attrw[i].name, name) == 0)
            return &T->attrw[i];
    return NULL;
}

/* o.name = val (val -1: del) on an object from outside the trace (value
 * v): recorded in the overlay. Only for objects with a source whose type
 * keeps object's __setattr__ and has no data descriptor for name. */
/* 1 if v.name = val on module value v is an ordinary instance attribute
 * write: nn.Module's own __setattr__/__delattr__, name not among its
 * parameters, buffers or children, and a value that nn.Module.__setattr__
 * stores in __dict__ as is (not a tensor or module). */
static int plain_module_attr(tracer *T, int32_t v, PyObject *name, int32_t val, int which)
{
    PyObject *o = T->vals[v].obj;
    if (_PyType_Lookup(Py_TYPE(o), sn[which]) != _PyType_Lookup((PyTypeObject *)module_base, sn[which]))
        return 0;
    if (val >= 0 && (T->vals[val].kind == V_TENSOR || (T->vals[val].kind == V_OBJ && tr_is_module(T->vals[val].obj))))
        return 0;
    static const char *stores[] = { "_parameters", "_buffers", "_modules" };
    for (int i = 0; i < 3; i++) {
        PyObject *d = PyObject_GetAttrString(o, stores[i]);
        int in = d && PyDict_Check(d) ? PyDict_Contains(d, name) : 1;
        Py_XDECREF(d);
        PyErr_Clear();
        if (in)
            return 0;
    }
    return 1;
}

static int overlay_put(tracer *T, int32_t v, PyObject *o, PyObject *name, int32_t val);

static int overlay_set(tracer *T, int32_t v, PyObject *name, int32_t val)
{
    PyObject *o = T->vals[v].obj;
    PyTypeObject *t = Py_TYPE(o);
    int which = val < 0 ? SN_DELATTR : SN_SETATTR;
    PyObject *ca = _PyType_Lookup(t, name);
    int module = tr_is_module(o);
    if ((module && !plain_module_attr(T, v, name, val, which)) || PyType_Check(o) || PyModule_Check(o) ||
        T->vals[v].src < 0 || !t->tp_dictoffset ||
        (!module && _PyType_Lookup(t, sn[which]) != _PyType_Lookup(&PyBaseObject_Type, sn[which])) ||
        (ca && Py_TYPE(ca)->tp_descr_set))
        return tr_break(T, "STORE_ATTR: assignment to attribute %U of a %s object", name, t->tp_name);
    if (tr_add_guard(T, TG_TYPE, T->vals[v].src, (PyObject *)t, 0))
        return -1;
    return overlay_put(T, v, o, name, val);
}

/* t.name = val (val -1: del) on a tensor from outside the trace (an input,
 * a parameter: a value with a source): a name torch.Tensor does not define
 * lives in the tensor's instance dict, so the write goes to the overlay
 * like any outside object's and is replayed after the graph. A tensor made
 * in the trace, or a name of Tensor's own (data, grad, requires_grad,
 * a method), breaks. */
static int tensor_setattr(tracer *T, int32_t v, PyObject *name, int32_t val)
{
    PyObject *o = T->vals[v].src >= 0 ? tr_tensor_obj(T, v) : NULL;
    int which = val < 0 ? SN_DELATTR : SN_SETATTR;
    if (!o)
        return tr_break(T, "STORE_ATTR: assignment to attribute %U of a tensor made in the traced code", name);
    PyTypeObject *t = Py_TYPE(o);   /* a graph input: torch.Tensor or nn.Parameter (tensor_plain) */
    if (_PyType_Lookup(t, name) ||
        _PyType_Lookup(t, sn[which]) != _PyType_Lookup(&PyBaseObject_Type, sn[which]))
        return tr_break(T, "STORE_ATTR: assignment to attribute %U of a tensor", name);
    if (val < 0) {   /* del of an attribute the tensor does not have raises */
        int32_t cur;
        if (!obj_overlay_get(T, o, name, &cur)) {
            PyObject *d = PyObject_GenericGetDict(o, NULL);
            int has = d && PyDict_Check(d) ? PyDict_Contains(d, name) : -1;
            Py_XDECREF(d);
            if (has < 0)
                return -1;
            cur = has ? 0 : -1;
        }
        if (cur < 0)
            return tr_break(T, "del of a missing tensor attribute %U", name);
    }
    return overlay_put(T, v, o, name, val);
}

/* Records o.name = val (o: the object of value v, -1 val: del) in the
 * overlay. */
static int overlay_put(tracer *T, int32_t v, PyObject *o, PyObject *name, int32_t val)
{
    struct tr_attrw *w = overlay_find(T, o, name);
    if (!w) {
        struct tr_attrw *nw = PyMem_Realloc(T->attrw, sizeof *nw * (size_t)(T->nattrw + 1));
        if (!nw)
            return PyErr_NoMemory(), -1;
        T->attrw = nw;
        w = &T->attrw[T->nattrw++];
        w->obj = o;
        w->name = name;
        w->owner = v;
        if (tr_keep(T, name))
            return -1;
    }
    w->val = val;
    return 0;
}

/* STORE_ATTR / DELETE_ATTR: v.name = val (val -1: del v.name). */
int obj_setattr(tracer *T, int32_t v, PyObject *name, int32_t val)
{
    switch (T->vals[v].kind) {
    case V_INST: return inst_setattr(T, v, name, val);
    case V_OBJ: return overlay_set(T, v, name, val);
    case V_TENSOR: return tensor_setattr(T, v, name, val);
    default: return tr_break(T, "STORE_ATTR: assignment to attribute %U of a %s", name, tr_kind_name(T, v));
    }
}

/* Attribute `name` of outside object o as the trace has left it: 1 and
 * *val (-1: deleted) when the trace assigned it, 0 when it did not. */
int obj_overlay_get(tracer *T, PyObject *o, PyObject *name, int32_t *val)
{
    struct tr_attrw *w = T->nattrw ? overlay_find(T, o, name) : NULL;
    if (w)
        *val = w->val;
    return w != NULL;
}

/* Whether the trace assigned any attribute of object o. */
int obj_overlaid(tracer *T, PyObject *o)
{
    for (int32_t i = 0; i < T->nattrw; i++)
        if (T->attrw[i].obj == o)
            return 1;
    return 0;
}

/* End of the trace: every attribute assigned on an outside object must
 * hold its original object again (then it is guarded to keep holding it,
 * so the net effect stays nothing); anything else would be a side effect
 * the compiled code does not replay. 0, or -1 (break). */
static int grad_finish(tracer *T);

int obj_write_changed(tracer *T, const struct tr_attrw *w)
{
    PyObject *d = PyObject_GenericGetDict(w->obj, NULL);
    PyObject *orig = d ? PyDict_GetItemWithError(d, w->name) : NULL;
    Py_XDECREF(d);
    if (PyErr_Occurred())
        return -1;
    int same = w->val < 0 ? !orig : orig && T->vals[w->val].kind == V_OBJ && T->vals[w->val].obj == orig;
    if (!same)
        return 1;
    int32_t s = tr_src_new(T, SRC_ATTR, T->vals[w->owner].src, 0, w->name);
    if (orig ? tr_add_guard(T, tr_is_plain_const(orig) ? TG_EQ : TG_ID, s, orig, 0) : tr_guard_absent(T, w->owner, w->name))
        return -1;
    return 0;
}

int obj_finish(tracer *T)
{
    return grad_finish(T);
}

/* ---------- C methods of object, dict and OrderedDict on instances ---------- */

/* inst[key] through dict.__getitem__: a missing key goes to the class's
 * Python __missing__, or a defaultdict's default factory (its result
 * stored under key), as dict does; otherwise KeyError is raised. */
static int32_t items_getitem(tracer *T, int32_t self, int32_t key)
{
    int32_t items = T->vals[self].sl[0], in = tr_contains(T, key, items);
    if (in < 0)
        return -1;
    if (T->vals[in].obj == Py_True)
        return tr_subscr(T, items, key);
    PyObject *m = _PyType_Lookup((PyTypeObject *)T->vals[self].obj, sn[SN_MISSING]);
    if (m && PyFunction_Check(m)) {
        int32_t pos[2] = { self, key };
        int32_t ms = cls_attr_src(T, self, sn[SN_MISSING]);
        return tr_add_guard(T, TG_ID, ms, m, 0) ? -1 : call_method(T, m, ms, pos, 2);
    }
    int32_t fac = T->vals[self].sl[1];
    if (T->vals[self].aux != ddict_type || fac < 0 || (T->vals[fac].kind == V_OBJ && T->vals[fac].obj == Py_None))
        return tr_subscr(T, items, key);   /* KeyError */
    call_args none = { 0 };
    int32_t v = tr_call(T, fac, &none);
    return v < 0 || tr_store_subscr(T, items, key, v) ? -1 : v;
}

/* defaultdict.__init__(self, default_factory=None, *args, **kwargs). */
static int32_t ddict_init(tracer *T, int32_t self, const call_args *a)
{
    int32_t fac = a->npos ? a->pos[0] : -1;
    if (fac >= 0 && !(T->vals[fac].kind == V_OBJ && T->vals[fac].obj == Py_None) && !callable_value(T, fac))
        return tr_raise(T, PyObject_CallFunction(PyExc_TypeError, "s", "first argument must be callable or None"));
    T->vals[self].sl[1] = fac;
    call_args rest = { .pos = a->pos + (a->npos > 0), .npos = a->npos - (a->npos > 0), .kwn = a->kwn, .kwv = a->kwv,
                       .nkw = a->nkw };
    return rest.npos || rest.nkw ? bi_method(T, T->vals[self].sl[0], sn[SN_UPDATE], &rest) : tv_obj(T, Py_None, -1);
}

/* d.popitem() (the last item; an OrderedDict's first with last=False) or
 * d.move_to_end(key, last=True) on dict value items. */
static int32_t items_reorder(tracer *T, int32_t items, int pop, const call_args *a)
{
    tv *x = &T->vals[items];
    int last = 1, at = x->n - 1;
    if (a->npos > (pop ? 1 : 2))
        return tr_break(T, "%s arguments", pop ? "popitem()" : "move_to_end()");
    if (a->npos > (pop ? 0 : 1) && tr_truth(T, a->pos[pop ? 0 : 1], &last))
        return -1;
    if (!pop) {
        PyObject *key = tr_const(T, a->pos[0]);
        for (at = 0; key && at < T->vals[items].n && PyObject_RichCompareBool(T->vals[items].keys[at], key, Py_EQ) != 1; at++)
            ;
        if (!key || PyErr_Occurred())
            return -1;
        if (at == T->vals[items].n)
            return tr_raise(T, PyObject_CallOneArg(PyExc_KeyError, key));
    } else if (x->n == 0) {
        return tr_raise(T, PyObject_CallFunction(PyExc_KeyError, "s", "dictionary is empty"));
    } else if (!last) {
        at = 0;
    }
    x = &T->vals[items];
    PyObject *k = x->keys[at];
    int32_t v = x->items[at];
    memmove(&x->items[at], &x->items[at + 1], sizeof(int32_t) * (size_t)(x->n - at - 1));
    memmove(&x->keys[at], &x->keys[at + 1], sizeof(PyObject *) * (size_t)(x->n - at - 1));
    x->n--;
    if (pop) {
        int32_t pair[2] = { tv_obj(T, k, -1), v };
        return pair[0] < 0 ? -1 : tv_tuple(T, pair, 2);
    }
    if (!last) {
        memmove(&x->items[1], &x->items[0], sizeof(int32_t) * (size_t)x->n);
        memmove(&x->keys[1], &x->keys[0], sizeof(PyObject *) * (size_t)x->n);
        x->items[0] = v;
        x->keys[0] = k;
        x->n++;
        return tv_obj(T, Py_None, -1);
    }
    return tv_push_item(T, items, v, k) ? -1 : tv_obj(T, Py_None, -1);
}

/* d.copy() of a dict-based instance: a dict for dict's own copy; a new
 * OrderedDict or defaultdict (same factory) for those exact classes. */
static int32_t items_copy(tracer *T, int32_t self, PyObject *oc)
{
    int32_t items = T->vals[self].sl[0];
    call_args none = { 0 };
    if (oc == (PyObject *)&PyDict_Type)
        return bi_method(T, items, sn[SN_COPY], &none);
    if (T->vals[self].obj != oc)
        return tr_break(T, "copy() of a %s subclass", ((PyTypeObject *)oc)->tp_name);
    int32_t c = inst_alloc(T, oc, (PyTypeObject *)oc, T->vals[self].pos);
    for (int i = 0; c >= 0 && i < T->vals[items].n; i++)
        if (tv_push_item(T, T->vals[c].sl[0], T->vals[items].items[i], T->vals[items].keys[i]))
            return -1;
    if (c >= 0)
        T->vals[c].sl[1] = T->vals[self].sl[1];
    return c;
}

/* dict/OrderedDict/defaultdict method `name` (its C implementation, of
 * class oc) on the items of instance self, with arguments a (self
 * excluded). */
static int32_t items_method(tracer *T, int32_t self, PyObject *name, const call_args *a, PyObject *oc)
{
    int32_t items = T->vals[self].sl[0];
    const char *s = PyUnicode_AsUTF8(name);
    if (!s)
        return -1;
    if (oc == ddict_type && !strcmp(s, "__init__"))
        return ddict_init(T, self, a);
    int n = a->npos;
    if ((!strcmp(s, "popitem") || !strcmp(s, "move_to_end")) && a->nkw == 1 && n <= 1 &&
        PyUnicode_CompareWithASCIIString(a->kwn[0], "last") == 0) {   /* last= given by name */
        int32_t pos[2] = { n ? a->pos[0] : -1, a->kwv[0] };
        call_args b = { .pos = n ? pos : pos + 1, .npos = n + 1 };
        return items_method(T, self, name, &b, oc);
    }
    if (a->nkw && strcmp(s, "update") && strcmp(s, "__init__"))
        return tr_break(T, "dict.%s with keywords", s);
    if (!strcmp(s, "__setitem__") && n == 2)
        return tr_store_subscr(T, items, a->pos[0], a->pos[1]) ? -1 : tv_obj(T, Py_None, -1);
    if (!strcmp(s, "__delitem__") && n == 1)
        return tr_delete_subscr(T, items, a->pos[0]) ? -1 : tv_obj(T, Py_None, -1);
    if (!strcmp(s, "__getitem__") && n == 1)
        return items_getitem(T, self, a->pos[0]);
    if (!strcmp(s, "__contains__") && n == 1)
        return tr_contains(T, a->pos[0], items);
    if (!strcmp(s, "__len__") && n == 0)
        return tv_int(T, T->vals[items].n);
    if (!strcmp(s, "__iter__") && n == 0)
        return bi_iter(T, items);
    if (!strcmp(s, "__init__") && !n && !a->nkw)
        return tv_obj(T, Py_None, -1);
    if (!strcmp(s, "__init__"))   /* dict.__init__(self, ...) is self.update(...) */
        return bi_method(T, items, sn[SN_UPDATE], a);
    if (!strcmp(s, "copy") && n == 0)
        return items_copy(T, self, oc);
    if ((!strcmp(s, "popitem") && (!n || oc == odict_type)) || (!strcmp(s, "move_to_end") && oc == odict_type && n >= 1))
        return items_reorder(T, items, s[0] == 'p', a);
    static const char *plain[] = { "keys", "values", "items", "get", "pop", "setdefault", "update", "clear" };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (!strcmp(s, plain[i]))
            return bi_method(T, items, name, a);
    return tr_break(T, "dict method %s on an instance", s);
}

/* object's own slots on an instance: __setattr__, __delattr__,
 * __getattribute__, __init__ (no arguments). */
static int32_t object_method(tracer *T, int32_t self, PyObject *name, const call_args *a)
{
    PyObject *an = a->npos >= 1 && T->vals[a->pos[0]].kind == V_OBJ ? T->vals[a->pos[0]].obj : NULL;
    if (a->nkw || (!is_name(name, SN_INIT) && (!an || !PyUnicode_Check(an))))
        return tr_break(T, "object.%U arguments", name);
    if (is_name(name, SN_INIT))
        return a->npos ? tr_break(T, "object.__init__ with arguments") : tv_obj(T, Py_None, -1);
    if (is_name(name, SN_SETATTR) && a->npos == 2)
        return inst_set_generic(T, self, an, a->pos[1]) ? -1 : tv_obj(T, Py_None, -1);
    if (is_name(name, SN_DELATTR) && a->npos == 1)
        return inst_set_generic(T, self, an, -1) ? -1 : tv_obj(T, Py_None, -1);
    if (is_name(name, SN_GETATTRIBUTE) && a->npos == 1) {
        int32_t r = generic_getattr(T, self, an);
        return r != -2 ? r : raise_missing(T, self, an);
    }
    return tr_break(T, "object.%U on an instance", name);
}

/* descr(self, *args) where descr is a method or slot wrapper of object,
 * dict or OrderedDict (its __objclass__) and self (a->pos[0]) an instance
 * whose class derives from it. -2 when descr is no such method. */
int32_t obj_cmethod(tracer *T, PyObject *descr, const call_args *a)
{
    if (!descr || a->npos < 1 || T->vals[a->pos[0]].kind != V_INST)
        return -2;
    int32_t self = a->pos[0];
    if (real_inst(T, self, "a method call"))
        return -1;
    PyObject *oc = PyObject_GetAttr(descr, sn[SN_OBJCLASS]), *name = oc ? PyObject_GetAttr(descr, sn[SN_NAME]) : NULL;
    PyErr_Clear();
    int32_t r = -2;
    call_args rest = { .pos = a->pos + 1, .npos = a->npos - 1, .kwn = a->kwn, .kwv = a->kwv, .nkw = a->nkw };
    if (!name || !PyUnicode_Check(name) || !PyType_Check(oc) ||
        !PyType_IsSubtype((PyTypeObject *)T->vals[self].obj, (PyTypeObject *)oc))
        r = -2;
    else if (oc == (PyObject *)&PyBaseObject_Type)
        r = object_method(T, self, name, &rest);
    else if ((oc == (PyObject *)&PyDict_Type || oc == odict_type || oc == ddict_type) && T->vals[self].sl[0] >= 0)
        r = items_method(T, self, name, &rest, oc);
    else
        r = tr_break(T, "%R on a %s instance", descr, ((PyTypeObject *)T->vals[self].obj)->tp_name);
    Py_XDECREF(oc);
    Py_XDECREF(name);
    return r;
}

/* ---------- special methods (operators on instances) ---------- */

static const int slot_names[] = { [OS_GETITEM] = SN_GETITEM, [OS_SETITEM] = SN_SETITEM, [OS_DELITEM] = SN_DELITEM,
                                  [OS_CONTAINS] = SN_CONTAINS, [OS_LEN] = SN_LEN, [OS_ITER] = SN_ITER,
                                  [OS_BOOL] = SN_BOOL };

/* The special method `slot` of instance v's class applied to v and
 * args[0..n): a Python method inlined, a C method of object/dict modelled.
 * -2 when the class has none. */
int32_t obj_special(tracer *T, int32_t v, obj_slot slot, const int32_t *args, int n)
{
    if (T->vals[v].kind == V_INST && T->vals[v].sub == INST_SET)
        return set_special(T, v, slot, args, n);
    if (T->vals[v].kind == V_INST && T->vals[v].sub == INST_PARTIAL)
        return -2;
    if (real_inst(T, v, "an operator"))
        return -1;
    PyObject *name = sn[slot_names[slot]];
    PyObject *m = _PyType_Lookup((PyTypeObject *)T->vals[v].obj, name);
    if (!m)
        return -2;
    int32_t pos[4] = { v, n > 0 ? args[0] : -1, n > 1 ? args[1] : -1, -1 };
    call_args a = { .pos = pos, .npos = n + 1 };
    if (PyFunction_Check(m))
        return tr_inline(T, m, cls_attr_src(T, v, name), &a);
    int32_t r = obj_cmethod(T, m, &a);
    return r != -2 ? r : tr_break(T, "%s.%U is not supported", ((PyTypeObject *)T->vals[v].obj)->tp_name, name);
}

/* truth(v) for an instance: __bool__, else __len__ != 0, else True. */
int obj_truth(tracer *T, int32_t v, int *out)
{
    int32_t r = obj_special(T, v, OS_BOOL, NULL, 0);
    if (r == -2) {
        r = obj_special(T, v, OS_LEN, NULL, 0);
        if (r == -2) {
            *out = 1;
            return 0;
        }
        int64_t n;
        if (r < 0 || tr_int(T, r, &n))
            return -1;
        *out = n != 0;
        return 0;
    }
    if (r < 0)
        return -1;
    if (T->vals[r].kind != V_OBJ || !PyBool_Check(T->vals[r].obj))
        return tr_raise(T, PyObject_CallFunction(PyExc_TypeError, "s", "__bool__ should return bool"));
    *out = T->vals[r].obj == Py_True;
    return 0;
}

/* v(*a) for an instance whose class has a Python __call__. */
int32_t obj_call(tracer *T, int32_t v, const call_args *a)
{
    if (T->vals[v].sub == INST_PARTIAL)
        return partial_apply(T, T->vals[v].self_, T->vals[v].sl[0], T->vals[v].sl[1], a);
    if (real_inst(T, v, "a call"))
        return -1;
    PyObject *m = _PyType_Lookup((PyTypeObject *)T->vals[v].obj, sn[SN_CALL]);
    if (!m || !PyFunction_Check(m))
        return tr_break(T, "call of a %s instance", ((PyTypeObject *)T->vals[v].obj)->tp_name);
    int32_t pos[64];
    if (a->npos > 62)
        return tr_break(T, "too many arguments");
    pos[0] = v;
    memcpy(pos + 1, a->pos, sizeof(int32_t) * (size_t)a->npos);
    call_args b = { .pos = pos, .npos = a->npos + 1, .kwn = a->kwn, .kwv = a->kwv, .nkw = a->nkw };
    return tr_inline(T, m, cls_attr_src(T, v, sn[SN_CALL]), &b);
}

/* super(cls, self) over instance value self: a proxy whose attribute
 * lookups start after cls in self's MRO. */
int32_t obj_super(tracer *T, PyObject *cls, int32_t self)
{
    if (real_inst(T, self, "super()"))
        return -1;
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)T->vals[self].obj, (PyTypeObject *)cls))
        return tr_break(T, "super(type, obj): obj is not an instance of type");
    int32_t p = tv_new(T, V_INST);
    if (p >= 0) {
        T->vals[p].sub = INST_SUPER;
        T->vals[p].obj = cls;
        T->vals[p].self_ = self;
    }
    return p;
}

/* ---------- calls the tracer answers itself ---------- */

/* The device type string the only argument (device_type=) of an
 * autocast query names (new reference), or NULL after a break. */
static PyObject *device_type_of(tracer *T, const call_args *a, const char *what)
{
    int kw = a->npos == 0 && a->nkw == 1 && PyUnicode_CompareWithASCIIString(a->kwn[0], "device_type") == 0;
    PyObject *dev = (a->npos == 1 && !a->nkw) || kw ? tr_pyobj(T, kw ? a->kwv[0] : a->pos[0]) : NULL;
    if (!dev) {
        if (!T->broke)
            tr_break(T, "%s without a device type", what);
        return NULL;
    }
    PyObject *s = PyUnicode_Check(dev) ? Py_NewRef(dev) : PyObject_GetAttrString(dev, "type");
    Py_DECREF(dev);
    if (!s || !PyUnicode_Check(s)) {
        Py_XDECREF(s);
        PyErr_Clear();
        tr_break(T, "%s of an unknown device", what);
        return NULL;
    }
    return s;
}

/* torch.is_autocast_enabled(device) / torch.get_autocast_dtype(device)
 * (dtype 1): the CPU's as the trace has it (outside state guarded, `with
 * torch.autocast` regions in the trace), or without arguments (the legacy
 * CUDA state, guarded as global state). Other devices break. */
static int32_t autocast_query(tracer *T, PyObject *fn, const call_args *a, int dtype)
{
    if (a->npos == 0 && a->nkw == 0 && !dtype) {
        PyObject *r = PyObject_CallNoArgs(fn);
        int32_t v = r ? tv_obj(T, r, -1) : -1;
        Py_XDECREF(r);
        return v;
    }
    PyObject *s = device_type_of(T, a, dtype ? "torch.get_autocast_dtype()" : "torch.is_autocast_enabled()");
    if (!s)
        return -1;
    int cpu = PyUnicode_CompareWithASCIIString(s, "cpu") == 0;
    Py_DECREF(s);
    if (!cpu)
        return tr_break(T, "autocast state of a non-CPU device is not guarded");
    if (!dtype)
        return tv_obj(T, T->ac_on ? Py_True : Py_False, -1);
    int d = T->ac_on ? T->ac_dtype : ac_outside_dtype(T);
    if (d != SMELT_F16 && d != SMELT_BF16)
        return d == -2 ? -1 : tr_break(T, "torch.get_autocast_dtype('cpu') is neither float16 nor bfloat16");
    PyObject *r = PyObject_GetAttrString(PyImport_AddModule("torch"), d == SMELT_F16 ? "float16" : "bfloat16");
    int32_t v = r ? tv_obj(T, r, -1) : -1;
    Py_XDECREF(r);
    return v;
}

/* The CPU autocast dtype outside the trace as a smelt dtype (-1 another,
 * -2 with an exception), from now on guarded with the enabled state
 * (tr_result.autocast). */
static int ac_outside_dtype(tracer *T)
{
    PyObject *cpu = PyUnicode_FromString("cpu"), *d = cpu ? PyObject_CallOneArg(ac_dtype_fn, cpu) : NULL;
    Py_XDECREF(cpu);
    if (!d)
        return -2;
    int r = ops_dtype_of(d);
    Py_DECREF(d);
    T->r->autocast = 1;
    return r;
}

int obj_is_autocast(PyObject *o) { return o == autocast_type; }

/* The CPU autocast state outside the trace: T->ac_on, T->ac_dtype (-1
 * when not float16/bfloat16). 0, -1 with an exception or after a break
 * (on with another dtype: not modelled). */
int obj_autocast_start(tracer *T)
{
    PyObject *cpu = PyUnicode_FromString("cpu");
    PyObject *on = cpu ? PyObject_CallOneArg(ac_enabled_fn, cpu) : NULL;
    PyObject *dt = cpu ? PyObject_CallOneArg(ac_dtype_fn, cpu) : NULL;
    Py_XDECREF(cpu);
    int rc = on && dt ? 0 : -1;
    T->ac_on = on == Py_True;
    T->ac_dtype = dt ? ops_dtype_of(dt) : -1;
    Py_XDECREF(on);
    Py_XDECREF(dt);
    if (T->ac_on)
        T->r->autocast = 1;
    if (rc == 0 && T->ac_on && T->ac_dtype != SMELT_F16 && T->ac_dtype != SMELT_BF16)
        return tr_break(T, "CPU autocast to a dtype other than float16/bfloat16");
    return rc;
}

/* A constant argument of torch.autocast(...): positional i or keyword
 * name, dflt when absent (borrowed; NULL: a break). */
static PyObject *ac_arg(tracer *T, const call_args *a, int i, const char *name, PyObject *dflt)
{
    int32_t v = ops_arg(a, i, name);
    return v < 0 ? dflt : tr_const(T, v);
}

/* torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)
 * in the trace: a manager value (pos: the state it sets, 0 off or 1 + the
 * smelt dtype; sl[0] -2 until entered). */
int32_t obj_autocast_manager(tracer *T, const call_args *a)
{
    PyObject *dev = ac_arg(T, a, 0, "device_type", NULL), *dt = ac_arg(T, a, 1, "dtype", Py_None);
    PyObject *en = ac_arg(T, a, 2, "enabled", Py_True), *ce = ac_arg(T, a, 3, "cache_enabled", Py_None);
    if (!dev || !dt || !en || !ce || a->npos + a->nkw > 4)
        return T->broke ? -1 : tr_break(T, "torch.autocast() arguments");
    if (!PyUnicode_Check(dev) || PyUnicode_CompareWithASCIIString(dev, "cpu") != 0)
        return tr_break(T, "torch.autocast(%R): only the CPU's autocast is compiled", dev);
    if (!PyBool_Check(en) || (ce != Py_None && !PyBool_Check(ce)))
        return tr_break(T, "torch.autocast() with a non-bool enabled/cache_enabled");
    int sd = dt == Py_None ? ac_outside_dtype(T) : ops_dtype_of(dt);   /* None: the CPU's autocast dtype (guarded) */
    if (sd == -2)
        return -1;
    if (en == Py_True && sd != SMELT_F16 && sd != SMELT_BF16)
        return tr_break(T, "CPU autocast to %R (eager warns and disables it)", dt);
    int32_t m = tv_obj(T, ac_mgr, -1);
    if (m >= 0) {
        T->vals[m].pos = en == Py_True ? 1 + sd : 0;
        T->vals[m].sl[0] = -2;
    }
    return m;
}

static int ac_code(tracer *T);

/* torch.amp.autocast_mode._enter_autocast(*args) (enter 1: a manager made
 * as torch.autocast(*args) makes it, entered, returned) and
 * _exit_autocast(manager) (the state before its entry restored): the
 * calls Dynamo's graphs make for a `with torch.autocast(...)` region. */
static int32_t autocast_unmanaged(tracer *T, const call_args *a, int enter)
{
    if (enter) {
        int32_t m = obj_autocast_manager(T, a);
        if (m < 0)
            return m;
        int saved = ac_code(T);
        T->vals[m].sl[0] = saved;
        ac_set(T, T->vals[m].pos);
        return m;
    }
    tv *x = a->npos == 1 && !a->nkw ? &T->vals[a->pos[0]] : NULL;
    if (!x || x->kind != V_OBJ || x->obj != ac_mgr || x->sl[0] == -2)
        return tr_break(T, "_exit_autocast() of something other than an entered autocast manager");
    ac_set(T, x->sl[0]);
    return tv_obj(T, Py_None, -1);
}

/* The trace's autocast state as a manager's code (0 off, 1 + dtype). */
static int ac_code(tracer *T) { return T->ac_on ? 1 + T->ac_dtype : 0; }

static void ac_set(tracer *T, int code)
{
    T->ac_on = code > 0;
    if (code > 0)
        T->ac_dtype = code - 1;
}

/* inspect.signature(f) of a function or bound method known at trace time:
 * computed now (a signature depends only on the function, guarded). */
static int32_t signature_query(tracer *T, PyObject *fn, const call_args *a)
{
    if (a->npos != 1 || a->nkw)
        return tr_break(T, "inspect.signature() arguments");
    tv *x = &T->vals[a->pos[0]];
    PyObject *target = NULL;
    if (x->kind == V_OBJ)
        target = Py_XNewRef(tr_const(T, a->pos[0]));
    else if (x->kind == V_BOUND && PyFunction_Check(x->obj))
        target = PyMethod_New(x->obj, Py_None);   /* self plays no part in the signature */
    else
        return tr_break(T, "inspect.signature() of a %s", tr_kind_name(T, a->pos[0]));
    PyObject *r = target ? PyObject_CallOneArg(fn, target) : NULL;
    Py_XDECREF(target);
    if (!r) {
        PyErr_Clear();
        return T->broke ? -1 : tr_break(T, "inspect.signature() raised");
    }
    int32_t v = tv_obj(T, r, -1);
    Py_DECREF(r);
    return v;
}

/* ---------- compiled submodules ---------- */

int32_t obj_compiled_inner(tracer *T, int32_t mv)
{
    static PyObject *cm_type, *s_orig, *s_modules;
    if (!cm_type) {
        PyObject *api = PyImport_GetModule(sn[SN_API]);   /* imported with smelt itself */
        cm_type = api ? PyObject_GetAttrString(api, "CompiledModule") : NULL;
        s_orig = PyUnicode_InternFromString("_orig_mod");
        s_modules = PyUnicode_InternFromString("_modules");
        Py_XDECREF(api);
        if (!cm_type || !s_orig || !s_modules) {
            PyErr_Clear();
            Py_CLEAR(cm_type);
            return -2;
        }
    }
    PyObject *o = T->vals[mv].obj;
    if (!Py_IS_TYPE(o, (PyTypeObject *)cm_type))
        return -2;
    int32_t src = T->vals[mv].src, ms = tr_src_new(T, SRC_ATTR, src, 0, s_modules);
    PyObject *mods = PyObject_GetAttr(o, s_modules), *orig = mods && PyDict_Check(mods) ? PyDict_GetItemWithError(mods, s_orig) : NULL;
    int32_t r = orig && tr_is_module(orig) && !tr_add_guard(T, TG_TYPE, src, cm_type, 0)
              ? tv_obj(T, orig, tr_src_new(T, SRC_DICT, ms, 0, s_orig)) : -1;
    Py_XDECREF(mods);
    return r >= 0 || PyErr_Occurred() ? r : tr_break(T, "a CompiledModule without its original module");
}

/* ---------- grad mode and context managers ---------- */

/* The trace's grad state for grad mode `on` (T->no_grad's encoding): 0
 * when it is the mode outside the trace (guarded by every entry). */
static int grad_state(tracer *T, int on)
{
    PyObject *r = PyObject_CallNoArgs(grad_enabled_fn);
    int outer = r == Py_True;
    Py_XDECREF(r);
    if (!r)
        return -2;
    if (on && !outer)
        T->grad_on = 1;
    return on == outer ? 0 : on ? -1 : 1;
}

int32_t obj_grad_manager(tracer *T, int on)
{
    int32_t m = tv_obj(T, grad_mgr, -1);
    if (m >= 0) {
        T->vals[m].pos = on ? -1 : 1;
        T->vals[m].sl[0] = -2;   /* not applied yet (set_grad_enabled applies it when called) */
    }
    return m;
}

/* torch.set_grad_enabled(mode): the mode changes at the call (as in eager);
 * the manager it returns restores the mode before it on __exit__.
 * torch._C._set_grad_enabled(mode) (raw) changes it the same and returns
 * None. */
static int32_t set_grad_enabled(tracer *T, const call_args *a, int raw)
{
    int on;
    int32_t mode = a->npos == 1 && !a->nkw ? a->pos[0] : a->nkw == 1 && !a->npos ? a->kwv[0] : -1;
    if (mode < 0)
        return tr_break(T, "torch.set_grad_enabled() arguments");
    if (T->vals[mode].kind != V_OBJ || !PyBool_Check(T->vals[mode].obj))
        return tr_break(T, "torch.set_grad_enabled() of a non-bool");
    if (tr_truth(T, mode, &on))
        return -1;
    int saved = T->no_grad, st = grad_state(T, on);
    int32_t m = st == -2 ? -1 : tv_obj(T, grad_mgr, -1);
    if (m < 0)
        return -1;
    tr_grad_mode(T, st);
    T->vals[m].pos = st;
    T->vals[m].sl[0] = saved;
    return raw ? tv_obj(T, Py_None, -1) : m;
}

/* Whether function fn is torch's own code (its context managers change
 * global state smelt does not model). */
static int torch_code(PyObject *fn)
{
    const char *f = PyUnicode_AsUTF8(((PyCodeObject *)PyFunction_GET_CODE(fn))->co_filename);
    if (!f)
        PyErr_Clear();
    return !f || strstr(f, "/torch/") != NULL;
}

/* `with m:` for an instance of a class with Python __enter__ and __exit__
 * (not torch's: autocast and the like change state smelt does not model):
 * __enter__ inlined, __exit__ bound for the exit call. */
static int user_enter(tracer *T, int32_t m, int32_t *ex, int32_t *en)
{
    tv *x = &T->vals[m];
    PyTypeObject *cls = x->kind == V_INST && x->sub == INST_PLAIN ? (PyTypeObject *)x->obj
                      : x->kind == V_OBJ ? Py_TYPE(x->obj) : NULL;
    PyObject *ne = PyUnicode_InternFromString("__enter__"), *nx = PyUnicode_InternFromString("__exit__");
    PyObject *fe = cls && ne ? _PyType_Lookup(cls, ne) : NULL, *fx = cls && nx ? _PyType_Lookup(cls, nx) : NULL;
    int ok = fe && fx && PyFunction_Check(fe) && PyFunction_Check(fx) && !torch_code(fe) && !torch_code(fx) &&
             !PyType_IsSubtype(cls, (PyTypeObject *)autocast_type) && !tr_keep(T, ne) && !tr_keep(T, nx);
    Py_XDECREF(ne);
    Py_XDECREF(nx);
    if (!ok)
        return PyErr_Occurred() ? -1 : tr_break(T, "context manager %s is not supported",
                                                cls ? cls->tp_name : tr_kind_name(T, m));
    int32_t src = x->kind == V_OBJ ? x->src : -1, ts = tr_src_new(T, SRC_TYPE, src, 0, NULL);
    int32_t se = x->kind == V_INST ? cls_attr_src(T, m, ne) : tr_src_new(T, SRC_ATTR, ts, 0, ne);
    int32_t sx = x->kind == V_INST ? cls_attr_src(T, m, nx) : tr_src_new(T, SRC_ATTR, ts, 0, nx);
    if (x->kind == V_OBJ && tr_add_guard(T, TG_TYPE, src, (PyObject *)cls, 0))
        return -1;
    if (tr_add_guard(T, TG_ID, se, fe, 0) || tr_add_guard(T, TG_ID, sx, fx, 0))   /* methods can be replaced */
        return -1;
    *en = call_method(T, fe, se, &m, 1);
    *ex = *en < 0 ? -1 : tr_bound(T, fx, m, sx);
    return *ex < 0 ? -1 : 0;
}

int obj_enter(tracer *T, int32_t m, int32_t *ex, int32_t *en)
{
    tv *x = &T->vals[m];
    if (x->kind == V_OBJ && x->obj == ac_mgr) {   /* torch.autocast: the state set, __exit__ restores it */
        if (x->sl[0] != -2)
            return tr_break(T, "an autocast manager entered twice");
        int saved = ac_code(T);
        x->sl[0] = saved;
        ac_set(T, x->pos);
        *ex = tv_obj(T, ac_exit, -1);
        *en = m;
        if (*ex < 0)
            return -1;
        T->vals[*ex].pos = saved;
        return 0;
    }
    if (!(x->kind == V_OBJ && x->obj == grad_mgr))
        return user_enter(T, m, ex, en);
    int saved = x->sl[0] != -2 ? x->sl[0] : T->no_grad;
    if (x->sl[0] == -2) {   /* no_grad() / enable_grad(): set on entry */
        int st = grad_state(T, x->pos < 0);
        if (st == -2)
            return -1;
        tr_grad_mode(T, st);
    }
    *ex = tv_obj(T, grad_exit, -1);
    *en = tv_obj(T, Py_None, -1);
    if (*ex < 0 || *en < 0)
        return -1;
    T->vals[*ex].pos = saved;
    return 0;
}

const char tr_no_grad_region[] = "a no_grad region";

void tr_grad_mode(tracer *T, int st)
{
    int was = T->no_grad == 1, now = st == 1;
    T->no_grad = st;
    if (was == now)
        return;
    if (T->nngr + 2 > T->cngr) {
        int32_t c = T->cngr ? 2 * T->cngr : 8, *p = PyMem_Realloc(T->ngr, sizeof(int32_t) * (size_t)c);
        if (!p) {   /* regions unknown: the trace treats every node as made in one */
            T->grad_sensitive = tr_no_grad_region;
            return;
        }
        T->ngr = p;
        T->cngr = c;
    }
    if (now)
        T->ngr[T->nngr++] = T->g->n, T->ngr[T->nngr++] = -1;
    else if (T->nngr)
        T->ngr[T->nngr - 1] = T->g->n;
}

/* Per graph node, 1 if it depends on a graph input whose tensor requires
 * grad; NULL with an exception, *any = whether one does. */
static uint8_t *nodes_requiring_grad(tracer *T, int *any)
{
    uint8_t *req = PyMem_Calloc((size_t)T->g->n + 1, 1), *in = tracer_inputs_requiring_grad(T->r);
    *any = 0;
    if (!req || !in) {
        PyMem_Free(req);
        PyMem_Free(in);
        return req ? NULL : (uint8_t *)PyErr_NoMemory();
    }
    for (int32_t i = 0; i < T->g->n; i++) {
        const smelt_node *n = &T->g->nodes[i];
        if (n->op == SMELT_OP_INPUT)
            req[i] = n->a.input.index < T->r->ninputs && in[n->a.input.index];
        for (int k = 0; k < n->nsrc; k++)
            req[i] |= req[n->src[k]];
        *any |= req[i];
    }
    PyMem_Free(in);
    return req;
}

/* The grad state checks at the end of a trace: the mode is as it was (a
 * set_grad_enabled() left in place would be a side effect), and, where
 * inputs require grad in grad mode: grad was not turned on in the trace
 * (the results would require grad), nothing the graph does not carry to a
 * compiled backward was done (grad_sensitive), and no node made under a
 * no_grad region depends on an input that requires grad (eager's result
 * would not require grad: a no_grad region over values that need none,
 * the rotary tables of Llama-style models, is carried). When every
 * computing node was made under no_grad (an optimizer step), the entry
 * runs as a no_grad region. */
static int grad_finish(tracer *T)
{
    if (T->no_grad != 0)
        return tr_break(T, "the traced code leaves grad mode changed");
    if (!T->grad_on && !T->grad_sensitive && !T->nngr)
        return 0;
    int any;
    uint8_t *req = nodes_requiring_grad(T, &any);
    if (!req)
        return -1;
    int rc = 0, outer = 0;
    if (!any)
        goto out;
    if (T->grad_on) {   /* whatever the caller's mode: the results would require grad */
        rc = tr_break(T, "grad mode turned on inside the trace over inputs that require grad");
        goto out;
    }
    PyObject *g = PyObject_CallNoArgs(grad_enabled_fn);
    outer = g == Py_True;
    Py_XDECREF(g);
    PyErr_Clear();
    if (!outer)
        goto out;
    if (!T->grad_nodes && T->nngr) {
        T->r->grad_free = 1;   /* nothing computed with grad on: the entry runs under no_grad */
        goto out;
    }
    if (T->grad_sensitive) {
        rc = tr_break(T, "%s over inputs that require grad (not carried to a compiled backward yet)", T->grad_sensitive);
        goto out;
    }
    for (int32_t r = 0; r < T->nngr; r += 2) {
        int32_t end = T->ngr[r + 1] < 0 ? T->g->n : T->ngr[r + 1];
        for (int32_t i = T->ngr[r]; i < end; i++) {
            const smelt_node *n = &T->g->nodes[i];
            int from_grad = 0;
            for (int k = 0; k < n->nsrc; k++)
                from_grad |= req[n->src[k]];
            if (from_grad) {
                rc = tr_break(T, "a no_grad region computing from inputs that require grad (%s; not carried to a "
                              "compiled backward yet)", smelt_op_name((smelt_op)n->op));
                goto out;
            }
        }
    }
out:
    PyMem_Free(req);
    return rc;
}

/* fn(*a) when fn is a query the compiler answers (is_compiling, grad
 * mode, ...); -2 when it is not one. */
int32_t obj_query(tracer *T, PyObject *fn, const call_args *a)
{
    PyObject *k = PyDict_GetItemWithError(queries, fn);
    if (!k) {
        PyErr_Clear();
        return -2;
    }
    query_kind q = (query_kind)PyLong_AsLong(k);
    if (q == Q_AUTOCAST || q == Q_AUTOCAST_DTYPE)
        return autocast_query(T, fn, a, q == Q_AUTOCAST_DTYPE);
    if (q == Q_SIGNATURE)
        return signature_query(T, fn, a);
    if (q == Q_ENABLE_GRAD)
        return a->npos || a->nkw ? tr_break(T, "torch.enable_grad() arguments") : obj_grad_manager(T, 1);
    if (q == Q_ENTER_AUTOCAST || q == Q_EXIT_AUTOCAST)
        return autocast_unmanaged(T, a, q == Q_ENTER_AUTOCAST);
    if (q == Q_SET_GRAD || q == Q_RAW_SET_GRAD)
        return set_grad_enabled(T, a, q == Q_RAW_SET_GRAD);
    if (a->npos || a->nkw)
        return tr_break(T, "arguments to a compile-time query");
    if (q == Q_TRUE || q == Q_FALSE)
        return tv_obj(T, q == Q_TRUE ? Py_True : Py_False, -1);
    if (q == Q_GRAD && T->no_grad != 0)
        return tv_obj(T, T->no_grad > 0 ? Py_False : Py_True, -1);
    PyObject *r = PyObject_CallNoArgs(fn);   /* grad mode, default dtype, dispatch modes: guarded by the guard tree */
    int32_t v = r ? tv_obj(T, r, -1) : -1;
    Py_XDECREF(r);
    return v;
}

/* A function marked as a trace-time constant (setattr(fn,
 * "_dynamo_marked_constant", True), as torch._dynamo.assume_constant_result
 * does; under functools.lru_cache the marker is on the wrapped function)
 * is called now; an lru_cache wrapper of a Python function is traced
 * through it (fn_src: where fn is fetched from, -1: nowhere). -2 when fn
 * is neither. */
static int32_t copy_call(tracer *T, int deep, const call_args *a);

int32_t obj_call_special_fn(tracer *T, PyObject *fn, int32_t fn_src, const call_args *a)
{
    PyObject *target = fn;
    int32_t r = PyFunction_Check(fn) ? optim_step(T, fn, a) : -2;
    if (r != -2)
        return r;
    if (fn == copy_fns[0] || fn == copy_fns[1])
        return copy_call(T, fn == copy_fns[1], a);
    if (Py_IS_TYPE(fn, (PyTypeObject *)lru_type)) {
        target = PyObject_GetAttr(fn, sn[SN_WRAPPED]);
        if (!target || tr_keep(T, target)) {
            Py_XDECREF(target);
            PyErr_Clear();
            return tr_break(T, "lru_cache wrapper without __wrapped__");
        }
        Py_DECREF(target);   /* kept alive by the result's keep list */
    } else if (!PyFunction_Check(fn)) {
        return -2;
    }
    PyObject *d = PyFunction_Check(target) ? ((PyFunctionObject *)target)->func_dict : NULL;
    PyObject *mark = d ? PyDict_GetItemWithError(d, sn[SN_MARKED]) : NULL;
    if (mark && PyObject_IsTrue(mark) == 1)
        return bi_pure(T, a, fn);
    if (PyErr_Occurred())
        return -1;
    if (target == fn)
        return -2;
    if (!PyFunction_Check(target))
        return tr_break(T, "lru_cache wrapper of a builtin");
    int32_t ws = fn_src < 0 ? -1 : tr_src_new(T, SRC_ATTR, fn_src, 0, sn[SN_WRAPPED]);
    return tr_inline(T, target, ws, a);
}

/* ---------- copy.copy / copy.deepcopy ---------- */

/* What one copy call has copied already (deepcopy's memo): values made
 * here by value id, objects from outside by identity. */
#define MAX_MEMO 256
typedef struct cmemo {
    int n;
    int32_t from[MAX_MEMO], to[MAX_MEMO];
    PyObject *obj[MAX_MEMO];
} cmemo;

static int32_t memo_get(const cmemo *m, int32_t v, PyObject *o)
{
    for (int i = 0; i < m->n; i++)
        if (o ? m->obj[i] == o : m->from[i] == v)
            return m->to[i];
    return -1;
}

static int memo_put(tracer *T, cmemo *m, int32_t v, PyObject *o, int32_t to)
{
    if (m->n == MAX_MEMO)
        return tr_break(T, "copy of more than %d objects", MAX_MEMO);
    m->from[m->n] = v;
    m->obj[m->n] = o;
    m->to[m->n++] = to;
    return 0;
}

/* Objects copy and deepcopy return as they are (copy's atomic types). */
static int copy_atomic(PyObject *o)
{
    return tr_is_plain_const(o) || PyBytes_CheckExact(o) || PyComplex_CheckExact(o) || PyType_Check(o) ||
           PyFunction_Check(o) || PyCFunction_Check(o) || PyCode_Check(o) || PyRange_Check(o) ||
           o == Py_NotImplemented || PyObject_TypeCheck(o, &PyProperty_Type) || ops_dtype_of(o) >= 0 ||
           (PyErr_Clear(), 0);
}

/* Whether copying an instance of class t is copy's default protocol:
 * object.__reduce_ex__ (a new object of t, its __dict__ copied in), with
 * no __copy__/__deepcopy__, reduce or state hooks and no copyreg entry. */
static int default_copy_protocol(PyTypeObject *t)
{
    static const char *hooks[] = { "__copy__", "__deepcopy__", "__reduce_ex__", "__reduce__", "__getstate__",
                                   "__setstate__", "__getnewargs__", "__getnewargs_ex__" };
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
        PyObject *nm = PyUnicode_InternFromString(hooks[i]);
        int same = nm && _PyType_Lookup(t, nm) == _PyType_Lookup(&PyBaseObject_Type, nm);
        Py_XDECREF(nm);
        if (!same)
            return 0;
    }
    int reg = PyDict_Check(copy_dispatch) ? PyDict_Contains(copy_dispatch, (PyObject *)t) : 1;
    PyErr_Clear();
    return reg == 0;
}

static int32_t copy_value(tracer *T, int32_t v, int deep, cmemo *m);

/* Whether graph input v's tensor object has Python attributes (which a
 * copy would copy too): 1, or 0 with that emptiness guarded, or -1. */
static int tensor_has_attrs(tracer *T, int32_t v)
{
    PyObject *d = PyObject_GenericGetDict(tr_tensor_obj(T, v), NULL);
    Py_ssize_t n = d && PyDict_Check(d) ? PyDict_GET_SIZE(d) : 0;
    Py_XDECREF(d);
    PyErr_Clear();
    int32_t s = tr_src_new(T, SRC_ATTR, T->vals[v].src, 0, sn[SN_DICT]);
    return n ? 1 : tr_add_guard(T, TG_LEN, s, NULL, 0);
}

/* The items of container value v copied (deep) or not into a new value
 * of v's kind; a tuple whose items all copy to themselves is v itself. */
static int32_t copy_container(tracer *T, int32_t v, int deep, cmemo *m)
{
    tv_kind k = (tv_kind)T->vals[v].kind;
    if (k == V_TUPLE && !deep)
        return v;
    int32_t c = tv_new(T, k);
    if (c < 0 || (k != V_TUPLE && memo_put(T, m, v, NULL, c)))
        return -1;
    int same = 1;
    for (int i = 0; i < T->vals[v].n; i++) {
        int32_t it = T->vals[v].items[i], ci = deep ? copy_value(T, it, 1, m) : it;
        if (ci < 0 || tv_push_item(T, c, ci, k == V_DICT ? T->vals[v].keys[i] : NULL))
            return -1;
        same &= ci == it;
    }
    T->vals[c].obj = T->vals[v].obj;   /* a named tuple stays one */
    return k == V_TUPLE && same ? v : c;
}

/* Fills new instance c's attributes (and items) from instance v's, copied
 * or not. */
static int copy_inst_state(tracer *T, int32_t v, int32_t c, int deep, cmemo *m)
{
    for (int part = 0; part < 2; part++) {
        int32_t from = part ? T->vals[v].sl[0] : T->vals[v].self_, to = part ? T->vals[c].sl[0] : T->vals[c].self_;
        for (int i = 0; from >= 0 && i < T->vals[from].n; i++) {
            int32_t it = T->vals[from].items[i], ci = deep ? copy_value(T, it, 1, m) : it;
            if (ci < 0 || tv_push_item(T, to, ci, T->vals[from].keys[i]))
                return -1;
        }
    }
    T->vals[c].sl[1] = T->vals[v].sl[1];   /* a defaultdict's factory (a type or function: atomic) */
    return 0;
}

/* A copy of instance value v made here: a new instance of its class with
 * its state (plain classes under copy's default protocol, and exact
 * OrderedDict / defaultdict). */
static int32_t copy_inst(tracer *T, int32_t v, int deep, cmemo *m)
{
    tv *x = &T->vals[v];
    if (x->sub != INST_PLAIN)
        return x->sub == INST_SET && !deep ? set_from(T, x->obj, v)
                                           : tr_break(T, "copy of %s", x->sub == INST_SET ? "a set holding values"
                                                                                           : "a partial or super()");
    PyObject *cls = x->obj;
    int exact_dict = cls == odict_type || cls == ddict_type;
    if (!exact_dict && (x->aux != (PyObject *)&PyBaseObject_Type || !default_copy_protocol((PyTypeObject *)cls)))
        return tr_break(T, "copy of a %s instance (its own copy protocol)", ((PyTypeObject *)cls)->tp_name);
    int32_t c = inst_alloc(T, cls, (PyTypeObject *)x->aux, x->pos);
    return c < 0 || memo_put(T, m, v, NULL, c) || copy_inst_state(T, v, c, deep, m) ? -1 : c;
}

/* A copy of plain object o from outside (value v, fetched from its
 * source): a new instance made here whose attributes are o's __dict__
 * items, each read from its own source (guarded as it is used; the
 * dict's keys and their order are guarded), copied or not. */
static int32_t copy_outside_inst(tracer *T, int32_t v, int deep, cmemo *m)
{
    PyObject *o = T->vals[v].obj;
    PyTypeObject *t = Py_TYPE(o), *base = plain_base((PyObject *)t);
    int32_t src = T->vals[v].src;
    if (base != &PyBaseObject_Type || !default_copy_protocol(t) || (T->nattrw && obj_overlaid(T, o)))
        return tr_break(T, "copy of a %s object", t->tp_name);
    PyObject *d = PyObject_GenericGetDict(o, NULL), *keys = d ? PyDict_Keys(d) : NULL, *kt = keys ? PyList_AsTuple(keys) : NULL;
    Py_XDECREF(keys);
    int32_t dsrc = src >= 0 ? tr_src_new(T, SRC_ATTR, src, 0, sn[SN_DICT]) : -1;
    int32_t c = kt && PyTuple_GET_SIZE(kt) <= 256 ? inst_alloc(T, (PyObject *)t, base, tr_src_new(T, SRC_TYPE, src, 0, NULL)) : -1;
    if (c < 0 || tr_add_guard(T, TG_TYPE, src, (PyObject *)t, 0) || tr_add_guard(T, TG_KEYS, dsrc, kt, 0) ||
        memo_put(T, m, v, o, c))
        c = -1;
    for (Py_ssize_t i = 0; c >= 0 && i < PyTuple_GET_SIZE(kt); i++) {
        PyObject *k = PyTuple_GET_ITEM(kt, i);
        int32_t it = PyUnicode_CheckExact(k) && !tr_keep(T, k) ? tv_obj(T, PyDict_GetItem(d, k), tr_src_new(T, SRC_DICT, dsrc, 0, k)) : -1;
        int32_t ci = it < 0 ? -1 : deep ? copy_value(T, it, 1, m) : it;
        if (ci < 0 || tr_dict_set(T, T->vals[c].self_, k, ci))
            c = PyErr_Occurred() || T->broke ? -1 : tr_break(T, "copy of an object with a non-str attribute name");
    }
    Py_XDECREF(d);
    Py_XDECREF(kt);
    return c;
}

/* A copy of object value v (from outside, or a constant). */
static int32_t copy_object(tracer *T, int32_t v, int deep, cmemo *m)
{
    PyObject *o = T->vals[v].obj;
    if (copy_atomic(o))
        return v;
    int32_t c = memo_get(m, -1, o);
    if (c >= 0)
        return c;
    if (PyDict_CheckExact(o)) {
        int32_t d = tr_dict_value(T, v);
        return d < 0 ? -1 : copy_container(T, d, deep, m);
    }
    if (PyAnySet_CheckExact(o))
        return set_from(T, (PyObject *)Py_TYPE(o), v);   /* its elements are constants (or it breaks) */
    if (PyTuple_CheckExact(o) || PyFrozenSet_CheckExact(o))
        return tr_value(T, v) ? v : -1;
    if (tr_is_module(o) || ops_is_tensor(o))
        return tr_break(T, "copy of a %s inside the traced code", Py_TYPE(o)->tp_name);
    return copy_outside_inst(T, v, deep, m);
}

/* copy.copy (deep 0) / copy.deepcopy (deep 1) of value v, as the copy
 * module does it for the values the trace holds: tensors cloned (deep)
 * or viewed (shallow: the copy shares the storage), containers and
 * instances rebuilt, atomic objects returned as they are. */
static int32_t copy_value(tracer *T, int32_t v, int deep, cmemo *m)
{
    tv *x = &T->vals[v];
    int32_t c = x->kind != V_OBJ ? memo_get(m, v, NULL) : -1;
    if (c >= 0)
        return c;
    switch (x->kind) {
    case V_OBJ: return copy_object(T, v, deep, m);
    case V_FUNC: return v;
    case V_TUPLE: case V_LIST: case V_DICT: return copy_container(T, v, deep, m);
    case V_INST: return copy_inst(T, v, deep, m);
    case V_TENSOR: {
        PyObject *t = tr_tensor_obj(T, v), *rg = t ? PyObject_GetAttrString(t, "requires_grad") : NULL;
        int plain = !t || (Py_TYPE(t) == (PyTypeObject *)ops_tensor_type() && rg == Py_False);
        Py_XDECREF(rg);
        if (!plain)
            return PyErr_Occurred() ? -1 : tr_break(T, "copy of a Parameter or a tensor that requires grad");
        int has = t ? tensor_has_attrs(T, v) : 0;
        if (has)
            return has < 0 ? -1 : tr_break(T, "copy of a tensor with Python attributes");
        PyObject *name = PyUnicode_InternFromString(deep ? "clone" : "__getitem__");
        int32_t pos[2] = { v, tv_obj(T, Py_Ellipsis, -1) };
        call_args a = { .pos = pos, .npos = deep ? 1 : 2 };
        c = !name || tr_keep(T, name) || pos[1] < 0 ? -1 : deep ? ops_call_method(T, name, &a) : tr_subscr(T, v, pos[1]);
        Py_XDECREF(name);
        return c < 0 || memo_put(T, m, v, NULL, c) ? -1 : c;
    }
    default:
        return tr_break(T, "copy of a %s", tr_kind_name(T, v));
    }
}

/* copy.copy(x) / copy.deepcopy(x[, memo=None]) called in the trace. */
static int32_t copy_call(tracer *T, int deep, const call_args *a)
{
    int32_t memo = a->npos > 1 ? a->pos[1] : a->nkw == 1 ? a->kwv[0] : -1;
    if (a->npos < 1 || a->npos + a->nkw > 1 + deep ||
        (memo >= 0 && !(T->vals[memo].kind == V_OBJ && T->vals[memo].obj == Py_None)))
        return tr_break(T, "copy.%s with a memo or other arguments", deep ? "deepcopy" : "copy");
    cmemo *m = PyMem_Calloc(1, sizeof *m);
    if (!m)
        return PyErr_NoMemory(), -1;
    int32_t r = copy_value(T, a->pos[0], deep, m);
    PyMem_Free(m);
    return r;
}

/* ---------- results ---------- */

/* The output plan's description of instance v: (class, C base, attribute
 * names, item keys, where) with `where` the child index of each attribute
 * then each item; the children (*vals, *n) are their distinct values, so a
 * value that is both an attribute and an item (ModelOutput's fields) is
 * one object, as in eager. NULL on a break or an error. */
PyObject *obj_out_spec(tracer *T, int32_t v, int32_t **vals, int *n)
{
    if (real_inst(T, v, "returning"))
        return NULL;
    tv *x = &T->vals[v];
    if (x->done) {   /* one object in eager: two rebuilt ones would not be `is` each other */
        tr_break(T, "returning the same %s instance twice", ((PyTypeObject *)x->obj)->tp_name);
        return NULL;
    }
    x->done = 1;
    int32_t at = x->self_, it = x->sl[0];
    if (x->aux == ddict_type) {   /* the factory is rebuilt as an attribute (a member, set last) */
        int32_t fac = x->sl[1] >= 0 ? x->sl[1] : tv_obj(T, Py_None, -1);
        if (fac < 0 || tr_dict_set(T, at, sn[SN_FACTORY], fac))
            return NULL;
        x = &T->vals[v];
    }
    int na = T->vals[at].n, ni = it >= 0 ? T->vals[it].n : 0, nc = 0;
    PyObject *an = PyTuple_New(na), *ik = PyTuple_New(ni), *where = PyTuple_New(na + ni);
    int32_t *all = PyMem_Malloc(sizeof(int32_t) * (size_t)(na + ni + 1));
    int ok = an && ik && where && all;
    for (int i = 0; ok && i < na + ni; i++) {
        PyObject *key = i < na ? T->vals[at].keys[i] : T->vals[it].keys[i - na];
        int32_t val = i < na ? T->vals[at].items[i] : T->vals[it].items[i - na];
        int k = 0;
        while (k < nc && all[k] != val)
            k++;
        if (k == nc)
            all[nc++] = val;
        PyObject *idx = PyLong_FromLong(k);
        ok = idx != NULL;
        if (ok)
            PyTuple_SET_ITEM(where, i, idx);
        PyTuple_SET_ITEM(i < na ? an : ik, i < na ? i : i - na, Py_NewRef(key));
    }
    PyObject *spec = ok ? PyTuple_Pack(5, x->obj, x->aux, an, ik, where) : NULL;
    Py_XDECREF(an);
    Py_XDECREF(ik);
    Py_XDECREF(where);
    if (!spec) {
        PyMem_Free(all);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    *vals = all;
    *n = nc;
    return spec;
}

PyObject *tracer_build_instance(PyObject *spec, PyObject *vals)
{
    PyTypeObject *cls = (PyTypeObject *)PyTuple_GET_ITEM(spec, 0), *base = (PyTypeObject *)PyTuple_GET_ITEM(spec, 1);
    PyObject *an = PyTuple_GET_ITEM(spec, 2), *ik = PyTuple_GET_ITEM(spec, 3), *where = PyTuple_GET_ITEM(spec, 4);
    Py_ssize_t na = PyTuple_GET_SIZE(an), ni = PyTuple_GET_SIZE(ik);
    PyObject *empty = PyTuple_New(0);
    PyObject *o = empty ? cls->tp_new(cls, empty, NULL) : NULL;
    Py_XDECREF(empty);
    PyObject *d = o && cls->tp_dictoffset ? PyObject_GenericGetDict(o, NULL) : NULL;
    int bad = !o || (cls->tp_dictoffset && !d);
    for (Py_ssize_t i = 0; !bad && i < na + ni; i++) {
        PyObject *val = PyTuple_GET_ITEM(vals, PyLong_AsSsize_t(PyTuple_GET_ITEM(where, i)));
        int member = i == na - 1 && base == (PyTypeObject *)ddict_type;   /* default_factory */
        bad = member ? PyObject_SetAttr(o, PyTuple_GET_ITEM(an, i), val)
            : i < na ? PyDict_SetItem(d, PyTuple_GET_ITEM(an, i), val)
                     : base->tp_as_mapping->mp_ass_subscript(o, PyTuple_GET_ITEM(ik, i - na), val);
    }
    Py_XDECREF(d);
    if (bad)
        Py_CLEAR(o);
    return o;
}
