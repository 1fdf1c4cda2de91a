/* The frame hook's CPython 3.11 part: the only place (with frame_py312.c)
 * that reads CPython's internal frame layout (Include/internal/
 * pycore_frame.h). Compiled to nothing on other versions.
 *
 * 3.11 facts used: _PyEval_Vector pushes and fills the frame, calls the
 * eval-frame function, then clears and pops the frame itself
 * (_PyEvalFrameClearAndPop), whether or not the frame ran. A frame that
 * has not run yet has prev_instr one before its first code unit; its cells
 * are made and free variables copied by its first instructions (MAKE_CELL,
 * COPY_FREE_VARS), so they are not there yet. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX >= 0x030b0000 && PY_VERSION_HEX < 0x030c0000

#define Py_BUILD_CORE
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#include "eval_frame.h"

int tracer_frame_open(struct _PyInterpreterFrame *frame, tracer_frame_view *v)
{
    PyCodeObject *code = frame->f_code;
    if (frame->owner != FRAME_OWNED_BY_THREAD || frame->f_func == NULL ||
        frame->prev_instr != _PyCode_CODE(code) - 1)
        return 0;
    v->code = code;
    v->func = (PyObject *)frame->f_func;
    v->globals = frame->f_globals;
    v->builtins = frame->f_builtins;
    v->closure = frame->f_func->func_closure;
    v->localsplus = frame->localsplus;
    v->nlocalsplus = code->co_nlocalsplus;
    v->first_free = code->co_nlocalsplus - code->co_nfreevars;
    v->raw = frame;
    return 1;
}

void tracer_frame_discard(PyThreadState *ts, struct _PyInterpreterFrame *frame)
{
    (void)ts;
    (void)frame;   /* _PyEval_Vector clears and pops it */
}

int tracer_frame_resume(const tracer_frame_view *v, int pc, PyObject *const *slots, PyObject *const *stack, int sp)
{
    _PyInterpreterFrame *frame = v->raw;
    PyCodeObject *co = v->code;
    int n = co->co_nlocalsplus;
    const char *kinds = PyBytes_AS_STRING(co->co_localspluskinds);
    PyObject **cells = PyMem_Calloc((size_t)n + 1, sizeof *cells);
    if (!cells)
        return PyErr_NoMemory(), -1;
    for (int i = 0; i < n; i++) {   /* MAKE_CELL and COPY_FREE_VARS, which will not run */
        if ((kinds[i] & CO_FAST_CELL) && !(kinds[i] & CO_FAST_FREE) && !(cells[i] = PyCell_New(slots[i]))) {
            while (i-- > 0)
                Py_XDECREF(cells[i]);
            PyMem_Free(cells);
            return -1;
        }
    }
    for (int i = 0; i < n; i++) {
        PyObject *nv = kinds[i] & CO_FAST_FREE ? Py_NewRef(PyTuple_GET_ITEM(v->closure, i - v->first_free))
                     : kinds[i] & CO_FAST_CELL ? cells[i] : Py_XNewRef(slots[i]);
        Py_XSETREF(frame->localsplus[i], nv);
    }
    for (int j = 0; j < sp; j++)
        frame->localsplus[n + j] = Py_XNewRef(stack[j]);
    PyMem_Free(cells);
    frame->stacktop = n + sp;
    frame->prev_instr = _PyCode_CODE(co) + pc - 1;
    return 0;
}

#endif
