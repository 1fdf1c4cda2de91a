/* cpu.h — the CPU back end's pieces behind ind_backend_cpu (runtime.c). */
#ifndef SMELT_CPU_CPU_H
#define SMELT_CPU_CPU_H

#include "../plan.h"
#include "../diskcache.h"

/* codegen.c: generates and loads code for every kernel, fills p->code. */
int cpu_codegen(smelt_plan *p, const smelt_compile_opts *o, char *err, size_t errlen);
void cpu_release(smelt_plan *p);
/* codegen.c, for the plan cache: the text naming everything that changes
 * the generated code under opts o (code generator version, smelt's build,
 * LLVM, the process target's CPU and features, vector width, optimisation
 * level); malloc'd, NULL with err if the JIT is unavailable. */
char *cpu_code_key(const smelt_compile_opts *o, char *err, size_t errlen);
/* The code p runs, as blobs: [0] its kernels' function names (40 bytes
 * each), then the object files of the units it holds. *blobs is malloc'd
 * (the array; the bytes belong to p). Count, or -1 if out of memory. */
int cpu_code_export(const smelt_plan *p, ind_blob **blobs);
/* Fills p->code's entry points (slots, same_as and launch fields already
 * set) from blobs[0] (the names) and the object files after it:
 * registered kernels are shared, else the objects are added as one unit.
 * 0, or -1 with err. */
int cpu_code_import(smelt_plan *p, const ind_blob *blobs, int nblobs, char *err, size_t errlen);
/* Object code bytes of the units p holds. */
int64_t cpu_code_bytes(const smelt_plan *p);

#endif
