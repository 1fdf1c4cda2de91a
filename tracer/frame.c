/* The frame hook's CPython part: the only place that reads CPython's
 * internal frame layout (Include/internal/pycore_frame.h), for 3.11, 3.12
 * and 3.13; each version difference is one macro below.
 *
 * Facts used. A frame handed to the eval-frame function has not run: its
 * cells are made and free variables copied by its first instructions
 * (MAKE_CELL, COPY_FREE_VARS), so they are not there yet, and it is not
 * linked into the thread's frame chain, so nothing can have made a frame
 * object for it. Its instruction pointer: 3.11 and 3.12 keep prev_instr,
 * the instruction before the next one (one before the first code unit in
 * a fresh frame); 3.13 keeps instr_ptr, the next one (_PyFrame_Initialize).
 * Its code: f_code up to 3.12; 3.13's f_executable (a strong reference to
 * a code object for every frame handed to the eval-frame function,
 * _PyFrame_GetCode). Its function: 3.11's f_func, 3.12's f_funcobj.
 * Who removes a frame that is not run: in 3.11 _PyEval_Vector clears and
 * pops it after the eval-frame function returns, whether or not it ran
 * (_PyEvalFrameClearAndPop); from 3.12 on the evaluator does that when it
 * finishes (clear_thread_frame in Python/ceval.c: c_recursion_remaining
 * lowered around _PyFrame_ClearExceptCode, then the code released and
 * _PyThreadState_PopFrame), so a frame not run is cleared and popped here. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX >= 0x030b0000 && PY_VERSION_HEX < 0x030e0000

#define Py_BUILD_CORE
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#include "eval_frame.h"

#if PY_VERSION_HEX >= 0x030d0000
#define FRAME_HAS_CODE(f) PyCode_Check((f)->f_executable)
#define FRAME_CODE(f) ((PyCodeObject *)(f)->f_executable)
#define FRAME_NEXT(f) ((f)->instr_ptr)
#define FRAME_SET_NEXT(f, at) ((f)->instr_ptr = (at))
#else
#define FRAME_HAS_CODE(f) 1
#define FRAME_CODE(f) ((f)->f_code)
#define FRAME_NEXT(f) ((f)->prev_instr + 1)
#define FRAME_SET_NEXT(f, at) ((f)->prev_instr = (at) - 1)
#endif
#if PY_VERSION_HEX >= 0x030c0000
#define FRAME_FUNC(f) ((f)->f_funcobj)
#else
#define FRAME_FUNC(f) ((PyObject *)(f)->f_func)
#endif

int tracer_frame_open(struct _PyInterpreterFrame *frame, tracer_frame_view *v)
{
    if (frame->owner != FRAME_OWNED_BY_THREAD || !FRAME_HAS_CODE(frame) || FRAME_FUNC(frame) == NULL ||
        !PyFunction_Check(FRAME_FUNC(frame)))
        return 0;
    PyCodeObject *code = FRAME_CODE(frame);
    if (FRAME_NEXT(frame) != _PyCode_CODE(code))
        return 0;
    v->code = code;
    v->func = FRAME_FUNC(frame);
    v->globals = frame->f_globals;
    v->builtins = frame->f_builtins;
    v->closure = ((PyFunctionObject *)v->func)->func_closure;
    v->localsplus = frame->localsplus;
    v->nlocalsplus = code->co_nlocalsplus;
    v->first_free = code->co_nlocalsplus - code->co_nfreevars;
    v->raw = frame;
    return 1;
}

#if PY_VERSION_HEX < 0x030c0000

void tracer_frame_discard(PyThreadState *ts, struct _PyInterpreterFrame *frame)
{
    (void)ts;
    (void)frame;   /* _PyEval_Vector clears and pops it */
}

#else

/* Drops the frame's references as _PyFrame_ClearExceptCode (Python/frame.c)
 * does for a frame without a frame object, then its code, with the C
 * recursion allowance lowered while finalizers may run (as
 * clear_thread_frame does). */
static void frame_clear(PyThreadState *ts, _PyInterpreterFrame *frame)
{
    if (frame->frame_obj != NULL)
        Py_FatalError("smelt (" __FILE__ "): a frame smelt did not run has a frame object");
    ts->c_recursion_remaining--;
    for (int i = 0; i < frame->stacktop; i++)
        Py_XDECREF(frame->localsplus[i]);
    Py_XDECREF(frame->f_locals);
    Py_DECREF(frame->f_funcobj);
    Py_DECREF(FRAME_CODE(frame));
    ts->c_recursion_remaining++;
}

/* Pops the frame, which must be the top of the thread's data stack, as
 * _PyThreadState_PopFrame (Python/pystate.c) does: when it is the first in
 * its stack chunk the chunk is freed (_PyObject_VirtualFree: the arena
 * allocator that allocated it) and the previous chunk becomes current; the
 * root chunk is never popped this way (its first slot is never a frame). */
static void frame_pop(PyThreadState *ts, _PyInterpreterFrame *frame)
{
    PyObject **base = (PyObject **)frame;
    _PyStackChunk *chunk = ts->datastack_chunk;
    if (base != &chunk->data[0]) {
        ts->datastack_top = base;
        return;
    }
    _PyStackChunk *prev = chunk->previous;
    ts->datastack_top = &prev->data[prev->top];
    ts->datastack_chunk = prev;
    ts->datastack_limit = (PyObject **)((char *)prev + prev->size);
    PyObjectArenaAllocator arena;
    PyObject_GetArenaAllocator(&arena);
    arena.free(arena.ctx, chunk, chunk->size);
}

void tracer_frame_discard(PyThreadState *ts, struct _PyInterpreterFrame *frame)
{
    assert((PyObject **)frame + FRAME_CODE(frame)->co_framesize == ts->datastack_top);
    frame_clear(ts, frame);
    frame_pop(ts, frame);
}

#endif

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
    FRAME_SET_NEXT(frame, _PyCode_CODE(co) + pc);
    return 0;
}

#endif
