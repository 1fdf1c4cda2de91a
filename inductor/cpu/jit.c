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

/* ---------- objects and the kernel registry ---------- */

struct cpu_obj {
    LLVMOrcResourceTrackerRef rt;
    int refs;
};

typedef struct kentry {
    uint8_t *key;
    size_t n;
    uint64_t h;
    cpu_kcode code;
    cpu_obj *obj;
    struct kentry *next;
} kentry;

enum { KC_BUCKETS = 4096 };
static kentry *kc_table[KC_BUCKETS];

void cpu_jit_lock(void) { pthread_mutex_lock(&jit_mu); }
void cpu_jit_unlock(void) { pthread_mutex_unlock(&jit_mu); }

static void set_err(char *err, size_t errlen, const char *what, LLVMErrorRef e)
{
    char *m = LLVMGetErrorMessage(e);
    snprintf(err, errlen, "LLVM JIT%s: %s", what, m);
    LLVMDisposeErrorMessage(m);
}

cpu_obj *cpu_jit_add_object_locked(LLVMMemoryBufferRef mb, char *err, size_t errlen)
{
    cpu_obj *o = calloc(1, sizeof *o);
    if (!o) {
        LLVMDisposeMemoryBuffer(mb);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(jit);
    o->rt = LLVMOrcJITDylibCreateResourceTracker(jd);
    LLVMErrorRef e = LLVMOrcLLJITAddObjectFileWithRT(jit, o->rt, mb);
    if (e) {
        set_err(err, errlen, "", e);
        LLVMOrcReleaseResourceTracker(o->rt);
        free(o);
        return NULL;
    }
    o->refs = 1;
    return o;
}

void *cpu_jit_lookup_locked(const char *name, char *err, size_t errlen)
{
    LLVMOrcExecutorAddress addr = 0;
    LLVMErrorRef e = LLVMOrcLLJITLookup(jit, &addr, name);
    if (e) {
        char what[160];
        snprintf(what, sizeof what, " lookup of %s", name);
        set_err(err, errlen, what, e);
        return NULL;
    }
    return (void *)(uintptr_t)addr;
}

int cpu_kcache_find_locked(const uint8_t *key, size_t n, uint64_t h, cpu_kcode *out, cpu_obj **obj)
{
    for (kentry *e = kc_table[h % KC_BUCKETS]; e; e = e->next)
        if (e->h == h && e->n == n && memcmp(e->key, key, n) == 0) {
            *out = e->code;
            *obj = e->obj;
            e->obj->refs++;
            return 1;
        }
    return 0;
}

void cpu_kcache_insert_locked(const uint8_t *key, size_t n, uint64_t h, const cpu_kcode *c, cpu_obj *obj)
{
    kentry *e = calloc(1, sizeof *e);
    if (!e || !(e->key = malloc(n ? n : 1))) {
        free(e);
        return;   /* not shared: the plan still holds its object */
    }
    memcpy(e->key, key, n);
    e->n = n, e->h = h, e->code = *c, e->obj = obj;
    e->next = kc_table[h % KC_BUCKETS];
    kc_table[h % KC_BUCKETS] = e;
}

/* Drops the registry entries of o, then its code. */
static void obj_free_locked(cpu_obj *o)
{
    for (int b = 0; b < KC_BUCKETS; b++)
        for (kentry **pe = &kc_table[b]; *pe;) {
            kentry *e = *pe;
            if (e->obj == o) {
                *pe = e->next;
                free(e->key);
                free(e);
            } else {
                pe = &e->next;
            }
        }
    LLVMErrorRef e = LLVMOrcResourceTrackerRemove(o->rt);
    if (e)
        LLVMConsumeError(e);
    LLVMOrcReleaseResourceTracker(o->rt);
    free(o);
}

void cpu_obj_release(cpu_obj *o)
{
    if (!o)
        return;
    pthread_mutex_lock(&jit_mu);
    if (--o->refs == 0)
        obj_free_locked(o);
    pthread_mutex_unlock(&jit_mu);
}
