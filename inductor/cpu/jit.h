/* jit.h — the process-wide LLJIT (jit.c). */
#ifndef SMELT_CPU_JIT_H
#define SMELT_CPU_JIT_H

#include <llvm-c/Orc.h>
#include <llvm-c/TargetMachine.h>
#include <stddef.h>
#include <stdint.h>

#include "../diskcache.h"   /* ind_blob: an object file's bytes */
#include "target.h"      /* the target code is generated for */

/* 0 when the JIT is up (created on first call, after the process target:
 * cpu_target_process), else -1 with err. */
int cpu_jit_ready(char *err, size_t errlen);
/* Where the JIT's warning goes (SMELT_CPU / SMELT_CPU_FEATURES refused:
 * cpu_target_refusal): fn(1, line), once per process, from the first
 * cpu_jit_ready that finds fn set. Set by the Python extension at import;
 * NULL: nowhere. */
typedef void (*cpu_jit_log_fn)(int warning, const char *line);
void cpu_jit_set_log(cpu_jit_log_fn fn);
/* Starts creating the JIT on a background thread (once per process), so
 * that the first compile finds it made (creating it takes about 1 ms:
 * LLVM's target set-up, loading SLEEF); cpu_jit_join waits for that thread
 * (teardown). */
void cpu_jit_start(void);
void cpu_jit_join(void);
/* Machine code is shared by every plan of the process. Each compile or
 * disk cache load adds a unit of relocatable object files (cpu_obj,
 * reference counted: a plan holds one reference per unit whose code it
 * runs). Kernel functions are weak definitions named "smelt_<32 hex>", a
 * 128-bit hash of their canonical form (see codegen.c), so the name is the
 * kernel's identity; a split kernel also defines "<name>_finish". The
 * registry maps each kernel name to the unit whose definition the JIT
 * resolves it to; a unit's entries go with its last reference. When a unit
 * is added, its kernels no live unit provides are registered to it (the
 * others keep resolving to the earlier definition). The functions named
 * _locked run between cpu_jit_lock() and cpu_jit_unlock(). */
typedef struct cpu_obj cpu_obj;

void cpu_jit_lock(void);
void cpu_jit_unlock(void);
/* Adds objs[0..n) as one unit (copies kept: cpu_obj_blobs); one reference
 * for the caller, NULL with err on failure (nothing added). */
cpu_obj *cpu_jit_add_objects_locked(const ind_blob *objs, int n, char *err, size_t errlen);
/* 1 with the kernel's entry points and a reference to its unit in *obj if
 * `name` is registered, else 0. */
int cpu_kcache_find_locked(const char *name, void **fn, void **finish, cpu_obj **obj);
/* The unit's object files (valid while a reference is held). */
int cpu_obj_blobs(const cpu_obj *o, const ind_blob **blobs);
/* Drops one reference (takes the lock); the last frees the code. */
void cpu_obj_release(cpu_obj *o);

/* Drops LLVM's library code from this process's resident pages (its
 * executable segments: about 15-30 MB paged in by a first compile and only
 * used while compiling); the next compile maps them again from the page
 * cache (page faults, well under a millisecond). SMELT_TRIM_LLVM=0 turns
 * it off. cpu_jit_trim_bytes: the bytes covered, and whether it is on. */
void cpu_jit_trim(void);
int cpu_jit_trim_bytes(size_t *total);

/* Identity of this build of smelt for cache keys: the extension file's
 * size, modification time and inode, and the compile date of jit.c. */
const char *cpu_build_id(void);

#endif
