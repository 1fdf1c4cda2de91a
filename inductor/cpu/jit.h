/* jit.h — process-wide LLJIT and host target queries (jit.c). */
#ifndef SMELT_CPU_JIT_H
#define SMELT_CPU_JIT_H

#include <llvm-c/Orc.h>
#include <llvm-c/TargetMachine.h>
#include <stddef.h>

/* 0 when the JIT is up (created on first call), else -1 with err. */
int cpu_jit_ready(char *err, size_t errlen);
int cpu_host_vector_bits(void);            /* 512, 256 or 128; after ready */
const char *cpu_host_cpu(void);
const char *cpu_host_features(void);
/* A new host target machine (caller disposes), NULL on failure. */
LLVMTargetMachineRef cpu_target_machine(int opt_level);
/* Machine code is shared by every plan of the process. Each compile adds
 * relocatable objects (cpu_obj, reference counted: a plan holds one
 * reference per object whose code it runs); kernel functions are weak
 * definitions named by a hash of their content, so an object defining a
 * kernel another object already provides is harmless. The registry maps a
 * kernel's canonical key (see codegen.c) to its code and the object that
 * holds it; entries go with their object's last reference. The functions
 * named _locked run between cpu_jit_lock() and cpu_jit_unlock(). */
typedef struct cpu_obj cpu_obj;

/* A kernel's entry points and launch shape (plan_kernel_code's fields). */
typedef struct cpu_kcode {
    void *fn, *finish;
    int64_t nitems, grain, nfinish, scratch_bytes;
} cpu_kcode;

void cpu_jit_lock(void);
void cpu_jit_unlock(void);
/* Adds an object file (ownership of mb taken); one reference for the
 * caller, NULL with err on failure. */
cpu_obj *cpu_jit_add_object_locked(LLVMMemoryBufferRef mb, char *err, size_t errlen);
void *cpu_jit_lookup_locked(const char *name, char *err, size_t errlen);
/* 1 and a reference to its object in *obj if key is registered, else 0. */
int cpu_kcache_find_locked(const uint8_t *key, size_t n, uint64_t h, cpu_kcode *out, cpu_obj **obj);
/* Registers key -> c held by obj (no reference taken: the entry goes when
 * obj does). */
void cpu_kcache_insert_locked(const uint8_t *key, size_t n, uint64_t h, const cpu_kcode *c, cpu_obj *obj);
/* Drops one reference (takes the lock); the last frees the code. */
void cpu_obj_release(cpu_obj *o);

#endif
