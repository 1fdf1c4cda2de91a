/* target.h — the CPU the JIT generates code for (target.c).
 *
 * The process target is the host unless SMELT_CPU (an LLVM CPU name,
 * "host" = the host's) and/or SMELT_CPU_FEATURES (LLVM feature changes,
 * "+avx2,-avx512f") ask for another one that the host can run; a request
 * the host cannot run, or that names an unknown CPU or feature, is refused
 * (cpu_target_refusal says why) and the host is used. A target for code
 * that is only read (cpu_target_for_code) skips the host check; its code
 * is never loaded. Every target has avx512fp16 removed (see target.c).
 */
#ifndef SMELT_CPU_TARGET_H
#define SMELT_CPU_TARGET_H

#include <llvm-c/TargetMachine.h>
#include <stddef.h>

typedef struct cpu_target {
    char *cpu;        /* LLVM CPU name */
    char *features;   /* feature string handed to LLVM with it */
    int vbits;        /* widest native vector: 512 (AVX-512F, 512-bit EVEX), 256 (AVX2) or 128 */
    int fma;          /* has fused multiply-add (vmath.c's exact residuals) */
} cpu_target;

/* Sets the process target (host, then the environment). Called once, by
 * jit.c, after LLVM's native target is initialised. */
void cpu_target_init(void);
/* After cpu_target_init: the process target, and why the environment's
 * request was refused ("" if it was not, or there was none). */
const cpu_target *cpu_target_process(void);
const char *cpu_target_refusal(void);
/* The target (cpu, features) resolves to, for code that is never run:
 * cpu NULL, "" or "host" starts from the host's CPU and features, which
 * `features` (NULL or "") then changes. 0, or -1 with err for an unknown
 * CPU or feature or a target below the x86-64 baseline. After init. */
int cpu_target_for_code(const char *cpu, const char *features, cpu_target *t, char *err, size_t errlen);
void cpu_target_free(cpu_target *t);
/* A new target machine for t (caller disposes), NULL on failure. */
LLVMTargetMachineRef cpu_target_machine(const cpu_target *t, int opt_level);

#endif
