/* SMELT_LOGS channel mask and the bridge to Python's logging module. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <ctype.h>
#include <string.h>

#include "log.h"
#include "../inductor/compile.h"

static const char *const channel_names[PYEXT_LOG_NCHANNELS] = {
    "graph", "guards", "recompiles", "graph_breaks",
    "output_code", "asm", "cache", "perf", "aot", "dynamic", "backend", "dynamo",
};

/* Process-wide: the environment is read once per initialisation. */
static unsigned log_mask;
static PyObject *loggers[PYEXT_LOG_NCHANNELS];   /* logging.getLogger("smelt.<ch>"), lazy */

const char *pyext_log_channel_name(pyext_log_channel ch)
{
    return (unsigned)ch < PYEXT_LOG_NCHANNELS ? channel_names[ch] : "?";
}

int pyext_log_on(pyext_log_channel ch)
{
    return (unsigned)ch < PYEXT_LOG_NCHANNELS && (log_mask >> ch & 1);
}

/* The mask bits for one name of length n; 0 with a warning if unknown. */
static int name_bits(const char *name, size_t n, unsigned *bits)
{
    *bits = 0;
    if (n == 3 && strncmp(name, "all", 3) == 0) {
        *bits = (1u << PYEXT_LOG_NCHANNELS) - 1;
        return 0;
    }
    for (int c = 0; c < PYEXT_LOG_NCHANNELS; c++)
        if (strlen(channel_names[c]) == n && strncmp(name, channel_names[c], n) == 0) {
            *bits = 1u << c;
            return 0;
        }
    char bad[64];
    snprintf(bad, sizeof bad, "%.*s", (int)n, name);
    return PyErr_WarnFormat(PyExc_UserWarning, 1,
                            "SMELT_LOGS: unknown channel '%s' (known: all, graph, guards, "
                            "recompiles, graph_breaks, output_code, asm, cache, perf, aot, dynamic, backend)", bad);
}

int pyext_log_init(void)
{
    const char *spec = getenv("SMELT_LOGS");
    unsigned mask = 0, bits;
    while (spec && *spec) {
        const char *end = strchr(spec, ',');
        size_t n = end ? (size_t)(end - spec) : strlen(spec);
        const char *s = spec;
        while (n && isspace((unsigned char)*s))
            s++, n--;
        while (n && isspace((unsigned char)s[n - 1]))
            n--;
        if (n && name_bits(s, n, &bits) < 0)
            return -1;
        mask |= n ? bits : 0;
        spec = end ? end + 1 : NULL;
    }
    log_mask = mask;
    return 0;
}

void pyext_log_fini(void)
{
    for (int c = 0; c < PYEXT_LOG_NCHANNELS; c++)
        Py_CLEAR(loggers[c]);
}

/* The channel's logger, fetched once; NULL with an exception on failure. */
static PyObject *logger_for(pyext_log_channel ch)
{
    if (loggers[ch])
        return loggers[ch];
    char name[64];
    PyObject *logging = PyImport_ImportModule("logging");
    if (!logging)
        return NULL;
    snprintf(name, sizeof name, "smelt.%s", channel_names[ch]);
    loggers[ch] = PyObject_CallMethod(logging, "getLogger", "s", name);
    Py_DECREF(logging);
    return loggers[ch];
}

void pyext_log_write(pyext_log_channel ch, const char *text)
{
    if (!pyext_log_on(ch))
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *log = logger_for(ch);
    PyObject *r = log ? PyObject_CallMethod(log, "info", "ss", "%s", text) : NULL;
    if (!r)
        PyErr_WriteUnraisable(log);
    Py_XDECREF(r);
    PyErr_Restore(type, value, tb);
}

void pyext_log_device_code(const smelt_plan *plan)
{
    if (!plan || !strcmp(smelt_plan_backend(plan), "cpu"))
        return;
    const char *ir = smelt_plan_code(plan, "ir"), *as = smelt_plan_code(plan, "asm");
    if (ir && pyext_log_on(PYEXT_LOG_OUTPUT_CODE))
        pyext_log_write(PYEXT_LOG_OUTPUT_CODE, ir);
    if (as && pyext_log_on(PYEXT_LOG_ASM))
        pyext_log_write(PYEXT_LOG_ASM, as);
}
