/* ulpcheck.c — _C._ulp_check: the accuracy sweep's inner loop
 * (benchmarks/ulp_sweep.py), in C so that all 2^32 float32 inputs take
 * seconds per function rather than minutes.
 *
 * For n float32 inputs x and two float32 results (smelt's and eager's),
 * each against a float64 reference computed here with libm: the error in
 * ULPs of the reference rounded to float32 (0 where a result is exactly
 * that rounding, both are NaN, or the same infinity; infinite where one is
 * NaN or infinite and the other is not). The contract per input: smelt's
 * error at most max(4, eager's).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "module.h"
#include "../kernels/threadpool.h"

#include <math.h>
#include <string.h>

typedef double (*ref_fn)(double);

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu_d(double x) { return x / (1.0 + exp(-x)); }
static double softplus_d(double x) { return x > 20.0 ? x : log1p(exp(x)); }   /* torch: beta 1, threshold 20 */
static double mish_d(double x) { return x * tanh(log1p(exp(x))); }
static double ndtr_d(double x) { return 0.5 * erfc(-x * M_SQRT1_2); }
static double gelu_d(double x) { return x * ndtr_d(x); }
static double gelu_tanh_d(double x)
{
    double v = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * v));
}

static const struct { const char *name; ref_fn fn; } REFS[] = {
    { "exp", exp }, { "exp2", exp2 }, { "expm1", expm1 }, { "log", log }, { "log2", log2 },
    { "log10", log10 }, { "log1p", log1p }, { "tanh", tanh }, { "sigmoid", sigmoid_d }, { "erf", erf },
    { "erfc", erfc }, { "sin", sin }, { "cos", cos }, { "tan", tan }, { "atan", atan }, { "asin", asin },
    { "acos", acos }, { "sinh", sinh }, { "cosh", cosh }, { "asinh", asinh }, { "acosh", acosh },
    { "atanh", atanh }, { "gelu", gelu_d }, { "gelu_tanh", gelu_tanh_d }, { "silu", silu_d },
    { "softplus", softplus_d }, { "mish", mish_d }, { "ndtr", ndtr_d },
};

static double ulp_err(float y, double ref)
{
    float r32 = (float)ref;
    if (isnan(ref) || isnan(y))
        return isnan(ref) && isnan(y) ? 0.0 : INFINITY;
    if (y == r32)
        return 0.0;
    if (isinf(y) || isinf(r32))
        return INFINITY;
    int e = r32 == 0.0f ? -149 : ilogbf(r32) - 23;
    return fabs((double)y - ref) / ldexp(1.0, e < -149 ? -149 : e);
}

enum { BLOCKS = 256 };

typedef struct {
    double smax, emax, sok;        /* smelt's max; eager's max (finite); smelt's max where eager <= 4 */
    int64_t outside, first, worst;
} part;

typedef struct {
    ref_fn fn;
    const float *x, *got, *eag;
    int64_t n;
    part p[BLOCKS];
} job;

static void run_block(void *ctx, int64_t b0, int64_t b1)
{
    job *j = ctx;
    for (int64_t b = b0; b < b1; b++) {
        part *p = &j->p[b];
        *p = (part){ 0, 0, 0, 0, -1, -1 };
        int64_t lo = j->n * b / BLOCKS, hi = j->n * (b + 1) / BLOCKS;
        for (int64_t i = lo; i < hi; i++) {
            double ref = j->fn((double)j->x[i]);
            double es = ulp_err(j->got[i], ref), ee = ulp_err(j->eag[i], ref);
            if (es > p->smax || p->worst < 0) {
                p->smax = es > p->smax ? es : p->smax;
                p->worst = i;
            }
            if (isfinite(ee) && ee > p->emax)
                p->emax = ee;
            if (ee <= 4.0 && es > p->sok)
                p->sok = es;
            if (es > (ee > 4.0 ? ee : 4.0)) {
                if (!p->outside)
                    p->first = i;
                p->outside++;
            }
        }
    }
}

PyObject *pyext_ulp_check(PyObject *m, PyObject *args)
{
    (void)m;
    const char *name;
    unsigned long long px, pg, pe;
    long long n;
    if (!PyArg_ParseTuple(args, "sKKKL", &name, &px, &pg, &pe, &n))
        return NULL;
    job *j = PyMem_Calloc(1, sizeof *j);
    if (!j)
        return PyErr_NoMemory();
    for (size_t i = 0; i < sizeof REFS / sizeof REFS[0]; i++)
        if (!strcmp(REFS[i].name, name))
            j->fn = REFS[i].fn;
    if (!j->fn || n < 0) {
        PyMem_Free(j);
        return PyErr_Format(PyExc_ValueError, "_ulp_check: no float64 reference for %s (or n < 0)", name);
    }
    *j = (job){ .fn = j->fn, .x = (const float *)(uintptr_t)px, .got = (const float *)(uintptr_t)pg,
                .eag = (const float *)(uintptr_t)pe, .n = n };
    Py_BEGIN_ALLOW_THREADS
    kern_parallel_for(BLOCKS, 1, run_block, j);
    Py_END_ALLOW_THREADS
    part t = { 0, 0, 0, 0, -1, -1 };
    for (int b = 0; b < BLOCKS; b++) {
        const part *p = &j->p[b];
        if (p->worst >= 0 && (p->smax > t.smax || t.worst < 0)) {
            t.smax = p->smax > t.smax ? p->smax : t.smax;
            t.worst = p->worst;
        }
        t.emax = p->emax > t.emax ? p->emax : t.emax;
        t.sok = p->sok > t.sok ? p->sok : t.sok;
        if (p->outside && t.first < 0)
            t.first = p->first;
        t.outside += p->outside;
    }
    PyMem_Free(j);
    return Py_BuildValue("{sdsdsdsLsLsL}", "smelt", t.smax, "eager", t.emax, "smelt_where_eager_ok", t.sok,
                         "outside", (long long)t.outside, "first_outside", (long long)t.first,
                         "worst", (long long)t.worst);
}
