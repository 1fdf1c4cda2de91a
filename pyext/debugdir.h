/* debugdir.h — SMELT_DEBUG_DIR: what each compile produced, on disk
 * (debugdir.c). */
#ifndef SMELT_PYEXT_DEBUGDIR_H
#define SMELT_PYEXT_DEBUGDIR_H

#include "../inductor/compile.h"
#include "../inductor/graph.h"

/* Whether SMELT_DEBUG_DIR is set (non-empty): compiles then keep their
 * generated code text. */
int pyext_debug_dir_on(void);

/* Writes one folder, $SMELT_DEBUG_DIR/<name>-<graph hash>[-n], with
 * graph.txt (the traced graph), guards.txt, kernels.txt (the fused
 * loop-level kernels), code.ll (LLVM IR), code.s (assembly) and
 * timings.txt (trace, lower, codegen, load, total compile, in ms); a file
 * whose text is NULL or empty is left out. A no-op when the variable is
 * unset; I/O failures are logged (SMELT_LOGS=perf) and never raised. */
void pyext_debug_dump(const char *name, const smelt_graph *g, const char *guards, const smelt_plan *plan,
                      double trace_ms, double compile_ms);

#endif
