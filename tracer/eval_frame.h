/* smelt tracer: the PEP 523 frame hook and per-code storage.
 *
 * A thread that runs a compiled wrapper enters the hook with a callback
 * (tracer_hook_enter .. tracer_hook_exit). While it is inside, every fresh
 * Python function frame the thread starts is offered to the callback before
 * its first instruction runs, unless the frame's code is skipped:
 *
 *   - generators, coroutines, async generators (the frame is resumed, not
 *     started, and its result is not the call's result);
 *   - code that is not a function body (module, class body, exec'd code:
 *     its variables live in a dict, not in the frame);
 *   - code from torch's package, the standard library (not site-packages),
 *     smelt's own package, and `<frozen ...>` modules.
 *
 * The callback runs with the hook disabled on its thread, so neither the
 * tracer nor the compiled code it runs is intercepted; frames the callback
 * lets run normally have their own callees offered again.
 *
 * The interpreter-wide eval-frame function is smelt's only while at least
 * one thread is inside the hook; otherwise the interpreter runs with the
 * evaluator it had before (CPython's default, whose specialised calls back
 * off while any custom one is set).
 *
 * Everything here needs the GIL. CPython 3.11 to 3.13 only (the frame
 * layout is read in frame.c).
 * Include after Python.h.
 */
#ifndef SMELT_TRACER_EVAL_FRAME_H
#define SMELT_TRACER_EVAL_FRAME_H

/* A frame about to start, as the callback sees it (all references
 * borrowed, valid during the on_frame call only).
 *
 * localsplus[0 .. nlocalsplus) are the frame's variable slots in the order
 * of code->co_localsplusnames, before the frame's first instruction:
 * arguments are bound (defaults, *args tuple, **kwargs dict included), a
 * cell variable holds its initial value (not yet a cell; NULL unless it is
 * an argument), every other local is NULL, and the free-variable slots
 * [first_free, nlocalsplus) are NULL: their cells are
 * closure[i - first_free]. tracer_frame_value reads a slot as the
 * function body will see it. */
typedef struct tracer_frame_view {
    PyCodeObject *code;
    PyObject *func;                  /* the function object being run */
    PyObject *globals, *builtins;    /* dicts */
    PyObject *closure;               /* func's tuple of cells, or NULL */
    PyObject *const *localsplus;
    int nlocalsplus;                 /* code->co_nlocalsplus */
    int first_free;                  /* nlocalsplus - code->co_nfreevars */
    struct _PyInterpreterFrame *raw; /* the frame itself (for tracer_frame_resume) */
} tracer_frame_view;

/* The value variable i (0 <= i < nlocalsplus) has when the body starts:
 * the content of the closure cell for a free variable, the slot itself
 * otherwise. Borrowed; NULL = unbound. */
PyObject *tracer_frame_value(const tracer_frame_view *v, int i);

/* Makes the fresh frame of view v start at code unit pc, in the middle of
 * its code, with variables slots[0 .. nlocalsplus) (a cell variable's
 * contents: the cell is made here; free variables are ignored: the
 * function's closure cells are used) and value stack stack[0 .. sp)
 * (sp <= co_stacksize), as if it had run up to there: on_frame then
 * returns NULL without an exception and the frame runs from pc. NULL
 * entries are unbound variables / NULL stack entries. References are
 * not stolen. The instruction at pc must start an instruction (after any
 * EXTENDED_ARG) that CPython can resume at with that stack. 0, or -1
 * with MemoryError (the frame then holds what it held). */
int tracer_frame_resume(const tracer_frame_view *v, int pc, PyObject *const *slots, PyObject *const *stack, int sp);

/* What a thread runs under. on_frame is called with the GIL held and the
 * hook disabled on this thread. It returns
 *   - a new reference: the frame's result (its body does not run);
 *   - NULL without an exception set: the frame runs normally (its callees
 *     are offered to on_frame);
 *   - NULL with an exception set: the call raises it (the body does not
 *     run).
 * It must not keep view pointers after returning. */
typedef struct tracer_callback {
    PyObject *(*on_frame)(void *ctx, const tracer_frame_view *view);
    void *ctx;
} tracer_callback;

/* Once, from module exec: code-extra indices and the skip rules (torch's
 * directory if torch is imported, sysconfig's stdlib/platstdlib minus
 * purelib/platlib, and the directory of `module`'s __file__). 0, or -1
 * with an exception. */
int tracer_hook_init(PyObject *module);

/* Makes cb this thread's callback (NULL: no callback, hook disabled on this
 * thread) and returns the previous one, to be handed to the matching
 * tracer_hook_exit. Calls nest and must be balanced, last in first out, on
 * each thread. cb must stay valid until that exit. Installs smelt's
 * eval-frame function when the first callback becomes active. */
const tracer_callback *tracer_hook_enter(const tracer_callback *cb);

/* Undoes the matching tracer_hook_enter: restores prev as this thread's
 * callback and gives the interpreter its previous eval-frame function back
 * when no thread has a callback left. */
void tracer_hook_exit(const tracer_callback *prev);

/* The next fresh frame of `code` started on this thread (inside the hook)
 * is offered to on_frame even if the skip rules would skip it (NULL:
 * none). For code that smelt itself calls to run a frame it then sets up
 * (tracer_frame_resume). */
void tracer_hook_force(PyObject *code);

/* This thread's callback (NULL outside the hook and inside on_frame). */
const tracer_callback *tracer_hook_current(void);

/* 1 if smelt's eval-frame function is the interpreter's, else 0. */
int tracer_hook_installed(void);

/* 1 if frames of code are never offered to on_frame (see above), else 0.
 * Decided once per code object, cached in its co_extra. */
int tracer_code_skipped(PyCodeObject *code);

/* Per-code storage for the tracer (its cache entries). A stored object
 * starts with a tracer_extra whose free function CPython calls when the
 * code object is deallocated, or when tracer_set_code_extra replaces it.
 * free runs with the GIL held, possibly during interpreter finalisation. */
typedef struct tracer_extra tracer_extra;
struct tracer_extra {
    void (*free)(tracer_extra *self);
};

/* What is stored for code (a code object), or NULL. */
tracer_extra *tracer_code_extra(PyObject *code);

/* Stores e (may be NULL) for code, freeing what was stored before. 0, or
 * -1 with an exception (e is then not stored and not freed). */
int tracer_set_code_extra(PyObject *code, tracer_extra *e);

/* ---- between eval_frame.c and frame.c only ---- */

/* Fills v for frame if it is a fresh frame owned by its thread (created
 * for a call, no instruction run yet) and returns 1; returns 0 otherwise. */
int tracer_frame_open(struct _PyInterpreterFrame *frame, tracer_frame_view *v);

/* Called after on_frame returned a result or raised for an opened frame,
 * in place of running it: does to the frame what the evaluator does when
 * a frame returns (3.12, 3.13: clear and pop it; 3.11: nothing, the
 * caller does). */
void tracer_frame_discard(PyThreadState *ts, struct _PyInterpreterFrame *frame);

#endif
