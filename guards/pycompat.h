/* pycompat.h — CPython C API differences between 3.11, 3.12 and 3.13
 * that more than one floor (guards, tracer, pyext) meets; each names the
 * version that changed. Include after Python.h. */
#ifndef SMELT_GUARDS_PYCOMPAT_H
#define SMELT_GUARDS_PYCOMPAT_H

/* Set iteration and update without an iterator object:
 * _PySet_NextEntry(set, &pos, &key, &hash) (borrowed key; 0 at the end)
 * and _PySet_Update(set, iterable) (0 or -1). Public (cpython/
 * setobject.h) in 3.11 and 3.12; 3.13 moved both to the internal
 * pycore_setobject.h, still exported (PyAPI_FUNC, for the stdlib's
 * extension modules): declared here with the same signatures. */
#if PY_VERSION_HEX >= 0x030d0000
PyAPI_FUNC(int) _PySet_NextEntry(PyObject *set, Py_ssize_t *pos, PyObject **key, Py_hash_t *hash);
PyAPI_FUNC(int) _PySet_Update(PyObject *set, PyObject *iterable);
#endif

/* The object weak reference ref (a weakref object) refers to, borrowed,
 * or Py_None once it is dead: PyWeakref_GET_OBJECT's contract, which 3.13
 * deprecates for PyWeakref_GetRef (a strong reference). The strong
 * reference is dropped at once: a live referent is kept alive by whoever
 * else refers to it, exactly as with the borrowed result before. */
static inline PyObject *smelt_weakref_target(PyObject *ref)
{
#if PY_VERSION_HEX >= 0x030d0000
    PyObject *o = NULL;
    if (PyWeakref_GetRef(ref, &o) < 0) {
        PyErr_Clear();
        return Py_None;
    }
    if (o == NULL)
        return Py_None;
    Py_DECREF(o);
    return o;
#else
    return PyWeakref_GET_OBJECT(ref);
#endif
}

/* 1 if a weak reference to o (an instance, not a type) exists: the head
 * of its weak reference list, at tp_weaklistoffset from the object. 3.12
 * and 3.13 give classes with managed weak references (a Python subclass
 * such as torch.Tensor) a negative offset: the slot lies in the
 * pre-header, before the object, where CPython's own
 * _PyObject_GET_WEAKREFS_LISTPTR reads it with the same sum. 0 when the
 * type has no weak references at all. */
static inline int smelt_has_weakrefs(PyObject *o)
{
    Py_ssize_t off = Py_TYPE(o)->tp_weaklistoffset;
    return off != 0 && *(PyObject **)((char *)o + off) != NULL;
}

#endif
