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
/* Adds a module (ownership taken) under a new resource tracker. */
int cpu_jit_add(LLVMOrcThreadSafeModuleRef tsm, void **tracker, char *err, size_t errlen);
void *cpu_jit_lookup(const char *name, char *err, size_t errlen);
void cpu_jit_remove(void *tracker);        /* frees that module's code */

#endif
