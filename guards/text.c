/* text.c — texts of the guard tree: source paths of nodes, short texts of
 * objects, the statement of each check, and the tree printer. Only the
 * source paths are built on the success path (once, at build time). */
#include "guard_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* buffer                                                             */

void guard_buf_vprintf(guard_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int k = b->oom ? -1 : vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0,
                                    fmt, ap2);
    va_end(ap2);
    if (k < 0 || b->oom)
        return;
    if (!b->s || b->len + (size_t)k >= b->cap) {
        size_t cap = (b->cap ? 2 * b->cap : 256) + (size_t)k;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
        vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    }
    b->len += (size_t)k;
}

void guard_buf_printf(guard_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    guard_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ */
/* sources                                                            */

/* UTF-8 of a str (or "?" when it has none; clears the error). */
static const char *utf8(PyObject *s)
{
    const char *u = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : NULL;
    if (!u)
        PyErr_Clear();
    return u ? u : "?";
}

char *guard_source_new(const guard_node *parent, guard_acc kind, Py_ssize_t index,
                       PyObject *key, const char *name)
{
    guard_buf b = {0};
    const char *p = parent->source;
    PyObject *repr = kind == GUARD_DICT_ITEM && !name ? PyObject_Repr(key) : NULL;
    switch (kind) {
    case GUARD_LOCAL: guard_buf_printf(&b, "L['%s']", name ? name : "?"); break;
    case GUARD_GLOBAL: guard_buf_printf(&b, "G['%s']", utf8(key)); break;
    case GUARD_ATTR: guard_buf_printf(&b, "%s.%s", p, utf8(key)); break;
    case GUARD_ITEM: guard_buf_printf(&b, "%s[%zd]", p, index); break;
    case GUARD_DICT_ITEM: guard_buf_printf(&b, "%s[%s]", p, name ? name : utf8(repr)); break;
    case GUARD_CLOSURE_CELL:
        guard_buf_printf(&b, "%s.__closure__[%zd].cell_contents", p, index);
        break;
    case GUARD_TYPE: guard_buf_printf(&b, "type(%s)", p); break;
    case GUARD_ROOT: break;
    }
    Py_XDECREF(repr);
    char *s = b.oom || !b.s ? NULL : PyMem_Malloc(b.len + 1);
    if (s)
        memcpy(s, b.s, b.len + 1);
    else
        PyErr_NoMemory();
    free(b.s);
    return s;
}

/* ------------------------------------------------------------------ */
/* objects                                                            */

#define TEXT_MAX 80

/* str(o) or repr(o) appended, cut to TEXT_MAX characters; errors cleared. */
static void append_str(guard_buf *b, PyObject *o, int use_repr)
{
    PyObject *s = use_repr ? PyObject_Repr(o) : PyObject_Str(o);
    const char *u = utf8(s);
    size_t len = strlen(u);
    guard_buf_printf(b, "%.*s%s", (int)(len > TEXT_MAX ? TEXT_MAX : len), u,
                     len > TEXT_MAX ? "..." : "");
    Py_XDECREF(s);
}

void guard_obj_text(guard_buf *b, PyObject *o)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);   /* keep a pending error out of the way */
    const char *tn = o ? Py_TYPE(o)->tp_name : "";
    if (!o)
        guard_buf_printf(b, "NULL");
    else if (PyType_Check(o))
        guard_buf_printf(b, "%s", ((PyTypeObject *)o)->tp_name);
    else if (guard_is_const(o))
        append_str(b, o, 1);
    else if (!strcmp(tn, "torch.dtype") || !strcmp(tn, "torch.device"))
        append_str(b, o, 0);
    else if (PyModule_Check(o))
        guard_buf_printf(b, "<module '%s'>", PyModule_GetName(o) ? PyModule_GetName(o) : "?");
    else if (PyCFunction_Check(o))
        guard_buf_printf(b, "<built-in function %s>", ((PyCFunctionObject *)o)->m_ml->ml_name);
    else if (PyFunction_Check(o))
        guard_buf_printf(b, "<function %s>", utf8(((PyFunctionObject *)o)->func_qualname));
    else
        guard_buf_printf(b, "<%s object at %p>", tn, (void *)o);
    PyErr_Restore(type, value, tb);
}

/* ------------------------------------------------------------------ */
/* checks                                                             */

void guard_leaf_text(guard_buf *b, const guard_node *n, const guard_leaf *l)
{
    const char *s = n->source;
    switch ((guard_leaf_kind)l->kind) {
    case LEAF_TYPE_IS: guard_buf_printf(b, "type(%s) is ", s); break;
    case LEAF_ID_IS: guard_buf_printf(b, "%s is ", s); break;
    case LEAF_ID_NOT: guard_buf_printf(b, "%s is not ", s); break;
    case LEAF_ID_WEAK:
        guard_buf_printf(b, "%s is ", s);
        guard_obj_text(b, smelt_weakref_target(l->obj));
        return;
    case LEAF_EQUALS: case LEAF_VALUE_EQ: guard_buf_printf(b, "%s == ", s); break;
    case LEAF_SAME_AS: guard_buf_printf(b, "%s is %s", s, n->tree->nodes[l->n]->source); return;
    case LEAF_NOT_SAME_AS: guard_buf_printf(b, "%s is not %s", s, n->tree->nodes[l->n]->source); return;
    case LEAF_HAS_KEY:
        guard_obj_text(b, l->obj);
        guard_buf_printf(b, " %s %s", l->n ? "in" : "not in", s);
        return;
    case LEAF_LEN_EQ: guard_buf_printf(b, "len(%s) == %zd", s, l->n); return;
    case LEAF_DICT_KEYS: guard_buf_printf(b, "tuple(%s.keys()) == ", s); break;
    case LEAF_EMPTY_DICT_OR_NONE: guard_buf_printf(b, "%s in (None, {})", s); return;
    case LEAF_TENSOR: guard_tensor_text(b, n, l->ts); return;
    case LEAF_CALL_IS: case LEAF_TRUTH_IS:
        guard_buf_printf(b, "%s is ", l->text);
        guard_obj_text(b, l->aux);
        return;
    }
    guard_obj_text(b, l->obj);
}

/* ------------------------------------------------------------------ */
/* printer                                                            */

static void print_node(guard_buf *b, const guard_node *n, int depth)
{
    if (n->kind != GUARD_ROOT)
        guard_buf_printf(b, "%*s%s\n", 2 * depth, "", n->source);
    for (int i = 0; i < n->nleaves; i++) {
        guard_buf_printf(b, "%*s| ", 2 * depth + 2, "");
        guard_leaf_text(b, n, &n->leaves[i]);
        guard_buf_printf(b, "\n");
    }
    for (int i = 0; i < n->nkids; i++)
        print_node(b, n->kids[i], depth + 1);
}

char *guard_tree_print(const guard_tree *t)
{
    guard_buf b = {0};
    guard_buf_printf(&b, "guards: %d checks on %d values\n", t->nchecks, t->nnodes - 1);
    print_node(&b, t->nodes[0], 0);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
