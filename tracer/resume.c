/* resume.c — what a partial graph needs around its break.
 *
 * A partial trace stops before the top frame's instruction it could not
 * trace (tracer_trace: 2). At run time the prefix graph yields the frame's
 * state at that instruction (its variables and value stack); the
 * instruction then runs eagerly — executed here on that state
 * (tracer_step) when it is one of the common kinds (calls, conditional
 * jumps, operators, item and attribute stores, STORE_GLOBAL), or by
 * CPython itself on the real frame resumed at tracer_resume_pc — and the
 * rest of the frame is traced as a continuation from the instruction
 * after it, like any entry.
 *
 * A frame is resumed only outside loops and exception handlers
 * (tr_resumable): a loop would need the iterator's state, a handler the
 * frame's exception state, which a state of plain values does not carry.
 */
#include "tstate.h"

#include <string.h>

typedef tr_insn insn;

/* The code's instructions in order; *n of them (PyMem; NULL + error). */
static insn *decode(PyCodeObject *co, int *n)
{
    PyObject *bytes = PyObject_GetAttrString((PyObject *)co, "co_code");
    if (!bytes)
        return NULL;
    const uint8_t *code = (const uint8_t *)PyBytes_AS_STRING(bytes);
    int units = (int)(PyBytes_GET_SIZE(bytes) / 2), k = 0;
    insn *out = PyMem_Calloc((size_t)units + 1, sizeof *out);
    for (int pc = 0, start = 0, ext = 0; out && pc < units;) {
        int raw = code[2 * pc], arg = code[2 * pc + 1] | ext;
        if (tr_op_of[raw] == OP_EXTENDED_ARG) {
            ext = arg << 8;
            pc++;
            continue;
        }
        out[k++] = (insn){ .start = start, .at = pc, .op = tr_op_of[raw], .arg = arg, .next = pc + 1 + tr_ncache[raw] };
        pc = start = out[k - 1].next;
        ext = 0;
    }
    Py_DECREF(bytes);
    if (!out)
        return (insn *)PyErr_NoMemory();
    *n = k;
    return out;
}

/* 1 if code unit `at` lies in a range of co's exception table (a try,
 * with, or except block). */
static int in_handler_range(PyCodeObject *co, int at)
{
    PyObject *tab = co->co_exceptiontable;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(tab), *end = p + PyBytes_GET_SIZE(tab);
    while (p < end) {
        int v[4] = { 0, 0, 0, 0 };
        for (int k = 0; k < 4; k++) {   /* varints: 6 bits each, bit 6 = more follows */
            if (p >= end)
                return 1;
            unsigned b = *p++;
            v[k] = b & 63;
            while ((b & 64) && p < end) {
                b = *p++;
                v[k] = (v[k] << 6) | (b & 63);
            }
        }
        if (v[0] <= at && at < v[0] + v[1])
            return 1;
    }
    return 0;
}

/* The jump target of instruction i, or -1 when it does not jump. back is
 * set for backward jumps. */
static int jump_target(const insn *i, int *back)
{
    *back = 0;
    switch (i->op) {
    case OP_JUMP_BACKWARD: case OP_JUMP_BACKWARD_NO_INTERRUPT:
    case OP_POP_JUMP_BACKWARD_IF_FALSE: case OP_POP_JUMP_BACKWARD_IF_TRUE:
    case OP_POP_JUMP_BACKWARD_IF_NONE: case OP_POP_JUMP_BACKWARD_IF_NOT_NONE:
        *back = 1;
        return i->next - i->arg;
    default:
        return -1;
    }
}

int tr_resumable(PyCodeObject *co, int at)
{
    if (in_handler_range(co, at))
        return 0;
    int n;
    insn *ins = decode(co, &n);
    if (!ins) {
        PyErr_Clear();
        return 0;
    }
    int ok = 0;
    for (int k = 0; k < n; k++)
        ok |= ins[k].start == at;   /* an instruction starts there */
    for (int k = 0; ok && k < n; k++) {
        int back, t = jump_target(&ins[k], &back);
        if (back && t <= at && at <= ins[k].start)   /* inside a loop */
            ok = 0;
    }
    PyMem_Free(ins);
    return ok;
}

int tracer_resume_pc(PyCodeObject *co, int pc)
{
    int n;
    insn *ins = decode(co, &n);
    if (!ins) {
        PyErr_Clear();
        return pc;
    }
    int k = 0;
    while (k < n && ins[k].start != pc)
        k++;
    /* a call's arguments are complete before PRECALL (3.11) and KW_NAMES,
     * whose names CPython keeps outside the frame: restart there */
    while (k < n && k > 0 && (ins[k].op == OP_CALL || ins[k].op == OP_PRECALL) &&
           (ins[k - 1].op == OP_PRECALL || ins[k - 1].op == OP_KW_NAMES))
        pc = ins[--k].start;
    PyMem_Free(ins);
    return pc;
}

/* ---------- the instruction, run eagerly ---------- */

static PyObject *pop(tr_fstate *st)
{
    return st->slots[st->nslots + --st->sp];
}

static PyObject *peek(const tr_fstate *st, int k)   /* k = 1: the top */
{
    return st->slots[st->nslots + st->sp - k];
}

/* Pushes r (stolen): 1, or -1 when r is NULL (the instruction raised). */
static int push_result(tr_fstate *st, PyObject *r)
{
    if (!r)
        return -1;
    st->slots[st->nslots + st->sp++] = r;
    return 1;
}

/* Drops the top k stack values. */
static void drop(tr_fstate *st, int k)
{
    while (k-- > 0)
        Py_XDECREF(pop(st));
}

/* Callables that look at their caller's frame (its globals, locals, the
 * stack): run from here they would see smelt's caller instead, so the
 * frame itself runs them (tracer_step returns 0). */
static PyObject *frame_readers;

static int reads_frame(PyObject *fn)
{
    if (!frame_readers) {
        static const char *names[][2] = {
            { "builtins", "globals" }, { "builtins", "locals" }, { "builtins", "vars" }, { "builtins", "dir" },
            { "builtins", "eval" }, { "builtins", "exec" }, { "builtins", "super" }, { "builtins", "breakpoint" },
            { "builtins", "__import__" }, { "sys", "_getframe" }, { "inspect", "currentframe" },
            { "inspect", "stack" }, { "warnings", "warn" }, { "warnings", "warn_explicit" },
            { "traceback", "print_stack" }, { "traceback", "extract_stack" }, { "traceback", "format_stack" },
        };
        PyObject *set = PySet_New(NULL);
        for (size_t i = 0; set && i < sizeof names / sizeof names[0]; i++) {
            PyObject *m = PyImport_ImportModule(names[i][0]);
            PyObject *f = m ? PyObject_GetAttrString(m, names[i][1]) : NULL;
            if (f && PySet_Add(set, f) < 0)
                PyErr_Clear();
            Py_XDECREF(f);
            Py_XDECREF(m);
            PyErr_Clear();
        }
        if (!set)
            return 1;
        frame_readers = set;
    }
    int r = PySet_Contains(frame_readers, fn);
    if (r < 0)
        PyErr_Clear();
    return r != 0;
}

/* CALL argc: [method, self, args...] or, for a callable without self,
 * [NULL, callable, args...] (3.11, 3.12) / [callable, NULL, args...]
 * (3.13; tstate.h's NULL_FIRST); the last len(kwnames) arguments by
 * keyword. */
static int step_call(tr_fstate *st, int argc)
{
    int kw = st->kwnames ? (int)PyTuple_GET_SIZE(st->kwnames) : 0;
    if (st->sp < argc + 2)
        return 0;
    PyObject **base = &st->slots[st->nslots + st->sp - argc - 2];
    int method = base[!NULL_FIRST] != NULL;
    PyObject *fn = method ? base[0] : base[NULL_FIRST], **args = method ? base + 1 : base + 2;
    if (reads_frame(fn))
        return 0;
    Py_ssize_t npos = (method ? argc + 1 : argc) - kw;
    PyObject *r = PyObject_Vectorcall(fn, args, (size_t)npos, kw ? st->kwnames : NULL);
    st->kwnames = NULL;
    drop(st, argc + 2);
    return push_result(st, r);
}

/* CALL_KW argc (3.13): CALL with the keyword names' tuple on top. */
static int step_call_kw(tr_fstate *st, int argc)
{
    if (st->sp < argc + 3 || st->kwnames || !PyTuple_Check(peek(st, 1)))
        return 0;
    PyObject *names = pop(st);
    st->kwnames = names;
    int rc = step_call(st, argc);
    st->kwnames = NULL;
    Py_DECREF(names);
    return rc;
}

/* CALL_FUNCTION_EX flags: [NULL, func] (3.11, 3.12) or [func, NULL]
 * (3.13), args, kwargs if flags & 1. */
static int step_call_ex(tr_fstate *st, int flags)
{
    int k = flags & 1;
    if (st->sp < 3 + k)
        return 0;
    PyObject *kwargs = k ? peek(st, 1) : NULL, *args = peek(st, 1 + k), *fn = peek(st, 2 + k + !NULL_FIRST);
    if (reads_frame(fn))
        return 0;
    PyObject *t = PyTuple_CheckExact(args) ? Py_NewRef(args) : PySequence_Tuple(args);
    PyObject *d = !kwargs || PyDict_CheckExact(kwargs) ? Py_XNewRef(kwargs) : PyDict_New();
    if (d && kwargs && d != kwargs && PyDict_Update(d, kwargs))
        Py_CLEAR(d);
    PyObject *r = t && (d || !kwargs) ? PyObject_Call(fn, t, d) : NULL;
    Py_XDECREF(t);
    Py_XDECREF(d);
    drop(st, 3 + k);
    return push_result(st, r);
}

/* The conditional jumps: pop, test (truth or `is None`), jump forward.
 * Backward forms never reach here (they are loops). */
static int step_jump(tr_fstate *st, const insn *i)
{
    int none = i->op == OP_POP_JUMP_IF_NONE || i->op == OP_POP_JUMP_IF_NOT_NONE ||
               i->op == OP_POP_JUMP_FORWARD_IF_NONE || i->op == OP_POP_JUMP_FORWARD_IF_NOT_NONE;
    int when = i->op == OP_POP_JUMP_IF_TRUE || i->op == OP_POP_JUMP_FORWARD_IF_TRUE ||
               i->op == OP_POP_JUMP_IF_NONE || i->op == OP_POP_JUMP_FORWARD_IF_NONE;
    PyObject *v = pop(st);
    int holds = none ? v == Py_None : PyObject_IsTrue(v);
    Py_DECREF(v);
    if (holds < 0)
        return -1;
    st->pc = holds == when ? i->next + i->arg : i->next;
    return 1;
}

/* JUMP_IF_TRUE_OR_POP / JUMP_IF_FALSE_OR_POP (3.11). */
static int step_jump_or_pop(tr_fstate *st, const insn *i)
{
    int t = PyObject_IsTrue(peek(st, 1));
    if (t < 0)
        return -1;
    if (t == (i->op == OP_JUMP_IF_TRUE_OR_POP)) {
        st->pc = i->next + i->arg;
    } else {
        drop(st, 1);
        st->pc = i->next;
    }
    return 1;
}

/* BINARY_OP nb on the top two values. */
static PyObject *binary(int nb, PyObject *a, PyObject *b)
{
    static binaryfunc const plain[] = {
        [NB_ADD] = PyNumber_Add, [NB_AND] = PyNumber_And, [NB_FLOOR_DIVIDE] = PyNumber_FloorDivide,
        [NB_LSHIFT] = PyNumber_Lshift, [NB_MATRIX_MULTIPLY] = PyNumber_MatrixMultiply,
        [NB_MULTIPLY] = PyNumber_Multiply, [NB_REMAINDER] = PyNumber_Remainder, [NB_OR] = PyNumber_Or,
        [NB_RSHIFT] = PyNumber_Rshift, [NB_SUBTRACT] = PyNumber_Subtract,
        [NB_TRUE_DIVIDE] = PyNumber_TrueDivide, [NB_XOR] = PyNumber_Xor,
    };
    static binaryfunc const inplace[] = {
        [NB_ADD] = PyNumber_InPlaceAdd, [NB_AND] = PyNumber_InPlaceAnd,
        [NB_FLOOR_DIVIDE] = PyNumber_InPlaceFloorDivide, [NB_LSHIFT] = PyNumber_InPlaceLshift,
        [NB_MATRIX_MULTIPLY] = PyNumber_InPlaceMatrixMultiply, [NB_MULTIPLY] = PyNumber_InPlaceMultiply,
        [NB_REMAINDER] = PyNumber_InPlaceRemainder, [NB_OR] = PyNumber_InPlaceOr,
        [NB_RSHIFT] = PyNumber_InPlaceRshift, [NB_SUBTRACT] = PyNumber_InPlaceSubtract,
        [NB_TRUE_DIVIDE] = PyNumber_InPlaceTrueDivide, [NB_XOR] = PyNumber_InPlaceXor,
    };
    int base = nb >= NB_INPLACE ? nb - NB_INPLACE : nb;
    if (base == NB_POWER)
        return nb >= NB_INPLACE ? PyNumber_InPlacePower(a, b, Py_None) : PyNumber_Power(a, b, Py_None);
    if (base < 0 || base > NB_XOR)
        return PyErr_Format(PyExc_SystemError, "smelt: BINARY_OP %d", nb);
    return (nb >= NB_INPLACE ? inplace : plain)[base](a, b);
}

/* Two operands popped, fn's result pushed. */
static int step_two(tr_fstate *st, PyObject *(*fn)(PyObject *, PyObject *, int), int arg)
{
    PyObject *b = pop(st), *a = pop(st);
    PyObject *r = fn(a, b, arg);
    Py_DECREF(a);
    Py_DECREF(b);
    return push_result(st, r);
}

static PyObject *op_binary(PyObject *a, PyObject *b, int nb) { return binary(nb, a, b); }
static PyObject *op_compare(PyObject *a, PyObject *b, int cmp) { return PyObject_RichCompare(a, b, cmp); }

/* 3.13's COMPARE_OP with its bool flag: the comparison's truth (no
 * identity shortcut, as CPython's: PyObject_IsTrue of the result). */
static PyObject *op_compare_bool(PyObject *a, PyObject *b, int cmp)
{
    PyObject *r = PyObject_RichCompare(a, b, cmp);
    int t = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
    return t < 0 ? NULL : Py_NewRef(t ? Py_True : Py_False);
}
static PyObject *op_getitem(PyObject *a, PyObject *b, int unused) { (void)unused; return PyObject_GetItem(a, b); }

static PyObject *op_is(PyObject *a, PyObject *b, int invert)
{
    return Py_NewRef((a == b) != !!invert ? Py_True : Py_False);
}

static PyObject *op_contains(PyObject *a, PyObject *b, int invert)
{
    int r = PySequence_Contains(b, a);
    return r < 0 ? NULL : Py_NewRef((r != 0) != !!invert ? Py_True : Py_False);
}

/* FORMAT_VALUE flags: conversion (str/repr/ascii) and an optional spec. */
static int step_format(tr_fstate *st, int flags)
{
    PyObject *spec = (flags & 4) ? pop(st) : NULL, *v = pop(st);
    int conv = flags & 3;
    PyObject *c = conv == 1 ? PyObject_Str(v) : conv == 2 ? PyObject_Repr(v) : conv == 3 ? PyObject_ASCII(v)
                                                                                      : Py_NewRef(v);
    PyObject *r = c ? PyObject_Format(c, spec) : NULL;
    Py_XDECREF(c);
    Py_DECREF(v);
    Py_XDECREF(spec);
    return push_result(st, r);
}

/* UNARY_*: one operand replaced by the result. */
static int step_unary(tr_fstate *st, int op)
{
    PyObject *v = pop(st), *r;
    if (op == OP_UNARY_NOT) {
        int t = PyObject_Not(v);
        r = t < 0 ? NULL : Py_NewRef(t ? Py_True : Py_False);
    } else {
        r = op == OP_UNARY_NEGATIVE ? PyNumber_Negative(v) : op == OP_UNARY_POSITIVE ? PyNumber_Positive(v)
                                                                                 : PyNumber_Invert(v);
    }
    Py_DECREF(v);
    return push_result(st, r);
}

/* TO_BOOL (3.13): the top replaced by its truth. */
static int step_to_bool(tr_fstate *st)
{
    PyObject *v = pop(st);
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return push_result(st, t < 0 ? NULL : Py_NewRef(t ? Py_True : Py_False));
}

/* STORE_ATTR / STORE_SUBSCR / STORE_GLOBAL: the store, values popped. */
static int step_store(tr_fstate *st, const insn *i, PyObject *names, PyObject *globals)
{
    int rc;
    if (i->op == OP_STORE_GLOBAL) {
        PyObject *v = pop(st);
        rc = PyDict_SetItem(globals, PyTuple_GET_ITEM(names, i->arg), v);
        Py_DECREF(v);
    } else if (i->op == OP_STORE_ATTR) {   /* owner on top, value under it */
        PyObject *owner = pop(st), *v = pop(st);
        rc = PyObject_SetAttr(owner, PyTuple_GET_ITEM(names, i->arg), v);
        Py_DECREF(owner);
        Py_DECREF(v);
    } else {   /* STORE_SUBSCR: key on top, container, value */
        PyObject *k = pop(st), *c = pop(st), *v = pop(st);
        rc = PyObject_SetItem(c, k, v);
        Py_DECREF(k);
        Py_DECREF(c);
        Py_DECREF(v);
    }
    return rc ? -1 : 1;
}

/* UNPACK_SEQUENCE n: exactly n items, pushed last first. */
static int step_unpack(tr_fstate *st, int n)
{
    PyObject *v = pop(st), *seq = PySequence_Fast(v, "cannot unpack non-iterable object");
    Py_DECREF(v);
    if (!seq)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        Py_ssize_t got = PySequence_Fast_GET_SIZE(seq);
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, got > n ? "too many values to unpack (expected %d)"
                                               : "not enough values to unpack (expected %d, got %zd)", n, got);
        return -1;
    }
    for (Py_ssize_t k = n - 1; k >= 0; k--)
        st->slots[st->nslots + st->sp++] = Py_NewRef(PySequence_Fast_GET_ITEM(seq, k));
    Py_DECREF(seq);
    return 1;
}

/* The instruction at st->pc run on st; 1 done (st->pc after it), 0 not
 * one of these kinds, -1 raised. The stack has room (co_stacksize). */
static int step_insn(PyCodeObject *co, PyObject *globals, tr_fstate *st, const insn *i)
{
    switch (i->op) {
    case OP_CALL: return step_call(st, i->arg);
    case OP_CALL_KW: return step_call_kw(st, i->arg);
    case OP_CALL_FUNCTION_EX: return step_call_ex(st, i->arg);
    case OP_POP_JUMP_IF_FALSE: case OP_POP_JUMP_IF_TRUE: case OP_POP_JUMP_IF_NONE: case OP_POP_JUMP_IF_NOT_NONE:
    case OP_POP_JUMP_FORWARD_IF_FALSE: case OP_POP_JUMP_FORWARD_IF_TRUE:
    case OP_POP_JUMP_FORWARD_IF_NONE: case OP_POP_JUMP_FORWARD_IF_NOT_NONE:
        return step_jump(st, i);
    case OP_JUMP_IF_FALSE_OR_POP: case OP_JUMP_IF_TRUE_OR_POP: return step_jump_or_pop(st, i);
    case OP_BINARY_OP: return step_two(st, op_binary, i->arg);
    case OP_COMPARE_OP:
        if (CMP_OF(i->arg) < Py_LT || CMP_OF(i->arg) > Py_GE)
            return 0;
        return step_two(st, CMP_BOOL(i->arg) ? op_compare_bool : op_compare, CMP_OF(i->arg));
    case OP_TO_BOOL: return step_to_bool(st);
    case OP_IS_OP: return step_two(st, op_is, i->arg);
    case OP_CONTAINS_OP: return step_two(st, op_contains, i->arg);
    case OP_BINARY_SUBSCR: return step_two(st, op_getitem, 0);
    case OP_UNARY_NEGATIVE: case OP_UNARY_POSITIVE: case OP_UNARY_INVERT: case OP_UNARY_NOT:
        return step_unary(st, i->op);
    case OP_FORMAT_VALUE: return step_format(st, i->arg);
    case OP_CONVERT_VALUE: return step_format(st, i->arg & 3);   /* 3.13: str/repr/ascii */
    case OP_FORMAT_SIMPLE: return step_format(st, 0);            /* 3.13: format(v) */
    case OP_FORMAT_WITH_SPEC: return step_format(st, 4);         /* 3.13: format(v, spec) */
    case OP_STORE_ATTR: case OP_STORE_SUBSCR: case OP_STORE_GLOBAL:
        return step_store(st, i, co->co_names, globals);
    case OP_UNPACK_SEQUENCE: return step_unpack(st, i->arg);
    default: return 0;
    }
}

int tracer_insn_at(PyCodeObject *co, int pc, tr_insn *out)
{
    int n;
    insn *ins = decode(co, &n);
    if (!ins)
        return -1;
    int k = 0;
    while (k < n && ins[k].start != pc)
        k++;
    if (k < n)
        *out = ins[k];
    PyMem_Free(ins);
    return k < n;
}

int tracer_step(PyObject *fn, const tr_insn *i, tr_fstate *st)
{
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(fn);
    if (st->pc != i->start)
        return 0;
    int rc = step_insn(co, PyFunction_GET_GLOBALS(fn), st, i);
    if (rc == 1 && st->pc == i->start)
        st->pc = i->next;
    return rc;
}
