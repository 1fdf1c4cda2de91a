/* jit.c — the process-wide ORC LLJIT instance and the host target.
 *
 * One LLJIT for the process, created on first use. Its main dylib resolves
 * SLEEF's vector math from libsleef.so.3 and libc/libm symbols from the
 * process. Each compiled plan adds one module under its own resource
 * tracker, so freeing the plan frees its machine code.
 */
#include "jit.h"

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t jit_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t jit_mu = PTHREAD_MUTEX_INITIALIZER;
static LLVMOrcLLJITRef jit;
static char jit_err[512];
static char *host_triple, *host_cpu, *host_features;
static int host_vbits;

static void take_error(LLVMErrorRef e)
{
    char *m = LLVMGetErrorMessage(e);
    snprintf(jit_err, sizeof jit_err, "LLVM JIT: %s", m);
    LLVMDisposeErrorMessage(m);
}

static int add_generators(LLVMOrcJITDylibRef jd, char prefix)
{
    LLVMOrcDefinitionGeneratorRef g;
    LLVMErrorRef e = LLVMOrcCreateDynamicLibrarySearchGeneratorForPath(&g, "libsleef.so.3", prefix, NULL, NULL);
    if (e) {
        take_error(e);
        return -1;
    }
    LLVMOrcJITDylibAddGenerator(jd, g);
    e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&g, prefix, NULL, NULL);
    if (e) {
        take_error(e);
        return -1;
    }
    LLVMOrcJITDylibAddGenerator(jd, g);
    return 0;
}

static void jit_init(void)
{
    LLVMInitializeNativeTarget();
    LLVMInitializeNativeAsmPrinter();
    host_triple = LLVMGetDefaultTargetTriple();
    host_cpu = LLVMGetHostCPUName();
    host_features = LLVMGetHostCPUFeatures();
    host_vbits = strstr(host_features, "+avx512f") ? 512 : strstr(host_features, "+avx2") ? 256 : 128;
    LLVMOrcLLJITBuilderRef b = LLVMOrcCreateLLJITBuilder();
    LLVMOrcJITTargetMachineBuilderRef jtmb;
    LLVMErrorRef e = LLVMOrcJITTargetMachineBuilderDetectHost(&jtmb);
    if (e) {
        take_error(e);
        LLVMOrcDisposeLLJITBuilder(b);
        return;
    }
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(b, jtmb);
    e = LLVMOrcCreateLLJIT(&jit, b);
    if (e) {
        take_error(e);
        jit = NULL;
        return;
    }
    if (add_generators(LLVMOrcLLJITGetMainJITDylib(jit), LLVMOrcLLJITGetGlobalPrefix(jit))) {
        LLVMOrcDisposeLLJIT(jit);
        jit = NULL;
    }
}

int cpu_jit_ready(char *err, size_t errlen)
{
    pthread_once(&jit_once, jit_init);
    if (!jit)
        snprintf(err, errlen, "%s", jit_err[0] ? jit_err : "LLVM JIT unavailable");
    return jit ? 0 : -1;
}

int cpu_host_vector_bits(void) { return host_vbits; }

LLVMTargetMachineRef cpu_target_machine(int opt_level)
{
    LLVMTargetRef t;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(host_triple, &t, &msg)) {
        LLVMDisposeMessage(msg);
        return NULL;
    }
    LLVMCodeGenOptLevel lvl = opt_level <= 0 ? LLVMCodeGenLevelNone
                            : opt_level == 1 ? LLVMCodeGenLevelLess
                            : opt_level == 2 ? LLVMCodeGenLevelDefault : LLVMCodeGenLevelAggressive;
    return LLVMCreateTargetMachine(t, host_triple, host_cpu, host_features, lvl,
                                   LLVMRelocDefault, LLVMCodeModelJITDefault);
}

const char *cpu_host_cpu(void) { return host_cpu; }
const char *cpu_host_features(void) { return host_features; }

int cpu_jit_add(LLVMOrcThreadSafeModuleRef tsm, void **tracker, char *err, size_t errlen)
{
    pthread_mutex_lock(&jit_mu);
    LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(jit);
    LLVMOrcResourceTrackerRef rt = LLVMOrcJITDylibCreateResourceTracker(jd);
    LLVMErrorRef e = LLVMOrcLLJITAddLLVMIRModuleWithRT(jit, rt, tsm);
    pthread_mutex_unlock(&jit_mu);
    if (e) {
        char *m = LLVMGetErrorMessage(e);
        snprintf(err, errlen, "LLVM JIT: %s", m);
        LLVMDisposeErrorMessage(m);
        LLVMOrcReleaseResourceTracker(rt);
        return -1;
    }
    *tracker = rt;
    return 0;
}

void *cpu_jit_lookup(const char *name, char *err, size_t errlen)
{
    LLVMOrcExecutorAddress addr = 0;
    pthread_mutex_lock(&jit_mu);
    LLVMErrorRef e = LLVMOrcLLJITLookup(jit, &addr, name);
    pthread_mutex_unlock(&jit_mu);
    if (e) {
        char *m = LLVMGetErrorMessage(e);
        snprintf(err, errlen, "LLVM JIT lookup of %s: %s", name, m);
        LLVMDisposeErrorMessage(m);
        return NULL;
    }
    return (void *)(uintptr_t)addr;
}

void cpu_jit_remove(void *tracker)
{
    if (!tracker)
        return;
    pthread_mutex_lock(&jit_mu);
    LLVMErrorRef e = LLVMOrcResourceTrackerRemove((LLVMOrcResourceTrackerRef)tracker);
    if (e)
        LLVMConsumeError(e);
    LLVMOrcReleaseResourceTracker((LLVMOrcResourceTrackerRef)tracker);
    pthread_mutex_unlock(&jit_mu);
}
