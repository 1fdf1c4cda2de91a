/* autograd_bridge.h — compiled regions under autograd (autograd_bridge.c). */
#ifndef SMELT_PYEXT_AUTOGRAD_BRIDGE_H
#define SMELT_PYEXT_AUTOGRAD_BRIDGE_H

#include "../inductor/compile.h"
#include "../tracer/trace.h"

typedef struct pyext_ad {
    PyObject *fwd, *bwd;   /* smelt._C.Compiled: forward (+ saved values), backward */
    PyObject *spec;        /* smelt._autograd's description of how the two connect */
    int64_t saved_bytes;
    int32_t nsaved, nrecomputed;
    int32_t generated, plans_cached;   /* of both compiles: kernel functions LLVM generated,
                                          plans read from the disk cache */
    double split_ms;                   /* SMELT_LOGS=perf: building the joint graph and splitting it */
    smelt_compile_times ct[2];         /* forward, backward */
    int32_t nkernels[2], nexterns[2];
} pyext_ad;

/* What SMELT_DEBUG_DIR is told about a region: the function's name, its
 * guards (text or NULL) and its trace time. */
typedef struct pyext_ad_about {
    const char *name, *guards;
    double trace_ms;
} pyext_ad_about;

/* Splits r's graph for inputs rg and compiles both halves into *out (with
 * SMELT_DEBUG_DIR set, each half's graph and code go to a folder named
 * "<name>.forward" / "<name>.backward"). 0 on success; 1 when the region
 * cannot be differentiated here (reason set: it runs eagerly); 2 when no
 * output it computes needs a gradient (compile it as without grad); -1
 * with an exception. */
int pyext_ad_compile(pyext_state *st, const tr_result *r, const uint8_t *rg, const smelt_compile_opts *o,
                     const pyext_ad_about *about, pyext_ad *out, char *reason, size_t len);
void pyext_ad_clear(pyext_ad *a);

/* The region's outputs (a list, as Compiled's call) for graph inputs ins,
 * recorded by autograd as one node. */
PyObject *pyext_ad_run(const pyext_ad *a, PyObject *const *ins, int32_t n);

#endif
