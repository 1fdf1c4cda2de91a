/* jit.c — the process-wide ORC LLJIT instance.
 *
 * One LLJIT for the process, created on first use, after the target code
 * is generated for (target.c). Its main dylib resolves SLEEF's vector math
 * from the libsleef the extension itself was linked with (a wheel bundles
 * it under a mangled name, so it is found by address, not by soname; see
 * sleef_path), half-precision conversions from libgcc_s.so.1 (for
 * targets without F16C) and libc/libm symbols from the process. Each compiled
 * plan adds one module under its own resource tracker, so freeing the plan
 * frees its machine code.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* dladdr */
#endif
#include "jit.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <llvm-c/Support.h>
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Object.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t jit_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t jit_mu = PTHREAD_MUTEX_INITIALIZER;
static LLVMOrcLLJITRef jit;
static char jit_err[512];
static _Atomic(cpu_jit_log_fn) jit_log;
static atomic_int warned;

static void take_error(LLVMErrorRef e)
{
    char *m = LLVMGetErrorMessage(e);
    snprintf(jit_err, sizeof jit_err, "LLVM JIT: %s", m);
    LLVMDisposeErrorMessage(m);
}

/* Half-precision conversions ("__extendhfsf2", "__truncsfhf2", ...):
 * LLVM calls them on targets without F16C (x86-64, x86-64-v2). */
static int is_half_libcall(void *ctx, LLVMOrcSymbolStringPoolEntryRef sym)
{
    (void)ctx;
    const char *s = LLVMOrcSymbolStringPoolEntryStr(sym);
    return s && !strncmp(s, "__", 2) && strstr(s, "hf") && (!strncmp(s, "__extend", 8) || !strncmp(s, "__trunc", 7));
}

/* The file of the SLEEF library this extension was linked against (its
 * DT_NEEDED, already loaded with it): in a wheel, smelt.libs/libsleef-<hash>.so,
 * which dlopen("libsleef.so.3") would miss (or answer with the system's). */
extern double Sleef_exp_u10(double);   /* any SLEEF function: its address names the file */

static const char *sleef_path(void)
{
    Dl_info info;
    if (dladdr((void *)Sleef_exp_u10, &info) && info.dli_fname && *info.dli_fname)
        return info.dli_fname;
    return "libsleef.so.3";
}

static int add_generators(LLVMOrcJITDylibRef jd, char prefix)
{
    LLVMOrcDefinitionGeneratorRef g;
    LLVMErrorRef e = LLVMOrcCreateDynamicLibrarySearchGeneratorForPath(&g, sleef_path(), prefix, NULL, NULL);
    if (e) {
        take_error(e);
        return -1;
    }
    LLVMOrcJITDylibAddGenerator(jd, g);
    e = LLVMOrcCreateDynamicLibrarySearchGeneratorForPath(&g, "libgcc_s.so.1", prefix, is_half_libcall, NULL);
    if (e)
        LLVMConsumeError(e);   /* only targets without F16C need it: their compiles fail to link */
    else
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
    /* No loop strength reduction in the code generator: on smelt's kernels
     * (explicit vectors, addresses from a few induction variables) it took
     * 40% of the object emission time (GPT-2's backward plan: 190 of 460
     * ms) and changed no measured kernel time. A process-wide LLVM option,
     * set once before any code is generated. */
    const char *args[] = { "smelt", "-disable-lsr" };
    LLVMParseCommandLineOptions(2, args, NULL);
    LLVMInitializeNativeTarget();
    LLVMInitializeNativeAsmPrinter();
    cpu_target_init();
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

void cpu_jit_set_log(cpu_jit_log_fn fn) { atomic_store(&jit_log, fn); }

int cpu_jit_ready(char *err, size_t errlen)
{
    pthread_once(&jit_once, jit_init);
    cpu_jit_log_fn log = atomic_load(&jit_log);
    if (log && cpu_target_refusal()[0] && !atomic_exchange(&warned, 1))
        log(1, cpu_target_refusal());
    if (!jit)
        snprintf(err, errlen, "%s", jit_err[0] ? jit_err : "LLVM JIT unavailable");
    return jit ? 0 : -1;
}

static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t start_thread;
static int start_state;   /* 0 never started, 1 running or done, 2 joined */

static void *start_main(void *arg)
{
    (void)arg;
    pthread_once(&jit_once, jit_init);
    return NULL;
}

static void fork_prepare(void) { cpu_jit_join(); }   /* no fork halfway through creating the JIT */

void cpu_jit_start(void)
{
    pthread_mutex_lock(&start_mu);
    if (start_state == 0 && pthread_create(&start_thread, NULL, start_main, NULL) == 0) {
        start_state = 1;
        pthread_atfork(fork_prepare, NULL, NULL);
    }
    pthread_mutex_unlock(&start_mu);
}

void cpu_jit_join(void)
{
    pthread_mutex_lock(&start_mu);
    if (start_state == 1) {
        pthread_join(start_thread, NULL);
        start_state = 2;
    }
    pthread_mutex_unlock(&start_mu);
}

/* ---------- LLVM's library code after a compile ---------- */

/* The page-aligned inner parts of libLLVM's executable, never-written
 * segments (found once through dl_iterate_phdr: the object whose loaded
 * segments hold an LLVM function). */
enum { TRIM_MAX = 4 };
static struct { uintptr_t lo, hi; } trim_ranges[TRIM_MAX];
static int ntrim;
static pthread_once_t trim_once = PTHREAD_ONCE_INIT;
static atomic_int trim_off;

static int find_llvm(struct dl_phdr_info *info, size_t size, void *want)
{
    (void)size;
    uintptr_t fn = (uintptr_t)want;
    int holds = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && fn >= lo && fn < lo + ph->p_memsz)
            holds = 1;
    }
    if (!holds)
        return 0;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < info->dlpi_phnum && ntrim < TRIM_MAX; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || (ph->p_flags & PF_W))
            continue;
        /* inner pages only: a page shared with a neighbouring segment is
         * mapped with that segment's protection */
        uintptr_t lo = (info->dlpi_addr + ph->p_vaddr + page - 1) & ~(page - 1);
        uintptr_t hi = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz) & ~(page - 1);
        if (hi > lo) {
            trim_ranges[ntrim].lo = lo;
            trim_ranges[ntrim++].hi = hi;
        }
    }
    return 1;
}

static void trim_init(void)
{
    const char *env = getenv("SMELT_TRIM_LLVM");
    if (env && env[0] == '0')
        atomic_store(&trim_off, 1);
    dl_iterate_phdr(find_llvm, (void *)(uintptr_t)&LLVMOrcCreateLLJIT);
}

void cpu_jit_trim(void)
{
    pthread_once(&trim_once, trim_init);
    if (atomic_load(&trim_off))
        return;
    /* Executable library pages are never written, so dropping them from
     * this process is invisible but for the page faults that map them
     * again (from the page cache) at the next compile. */
    for (int i = 0; i < ntrim; i++)
        madvise((void *)trim_ranges[i].lo, trim_ranges[i].hi - trim_ranges[i].lo, MADV_DONTNEED);
}

int cpu_jit_trim_bytes(size_t *total)
{
    pthread_once(&trim_once, trim_init);
    size_t n = 0;
    for (int i = 0; i < ntrim; i++)
        n += trim_ranges[i].hi - trim_ranges[i].lo;
    *total = n;
    return !atomic_load(&trim_off);
}

/* ---------- units and the kernel registry ---------- */

struct cpu_obj {
    LLVMOrcResourceTrackerRef rt;
    ind_blob *blobs;
    int nblobs;
    int refs;
};

enum { KNAME_LEN = 6 + 32 };   /* "smelt_" + 32 hex digits */

typedef struct kentry {
    char name[KNAME_LEN + 1];
    void *fn, *finish;
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

/* Kernel names start with a hash: its low bits pick the bucket. */
static unsigned name_bucket(const char *name)
{
    unsigned h = 0;
    for (int i = 6; i < 6 + 8 && name[i]; i++)
        h = h * 16 + (unsigned)(name[i] <= '9' ? name[i] - '0' : (name[i] | 32) - 'a' + 10);
    return h % KC_BUCKETS;
}

static kentry *find_entry(const char *name)
{
    for (kentry *e = kc_table[name_bucket(name)]; e; e = e->next)
        if (strcmp(e->name, name) == 0)
            return e;
    return NULL;
}

/* 1 if s is a kernel name, "smelt_" and 32 lowercase hex digits. */
static int is_kernel_name(const char *s, size_t n)
{
    if (n != KNAME_LEN || strncmp(s, "smelt_", 6))
        return 0;
    for (size_t i = 6; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* The address of symbol name in the main dylib, NULL with err. */
static void *lookup_locked(const char *name, char *err, size_t errlen)
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

/* 1 if object bin defines symbol `want`. */
static int defines(LLVMBinaryRef bin, const char *want)
{
    int found = 0;
    LLVMSymbolIteratorRef it = LLVMObjectFileCopySymbolIterator(bin);
    for (; !found && !LLVMObjectFileIsSymbolIteratorAtEnd(bin, it); LLVMMoveToNextSymbol(it)) {
        const char *name = LLVMGetSymbolName(it);
        found = name && strcmp(name, want) == 0;
    }
    LLVMDisposeSymbolIterator(it);
    return found;
}

/* Registers kernel `name` of unit o (defined in bin) unless a live unit
 * provides it. */
static int register_kernel(cpu_obj *o, LLVMBinaryRef bin, const char *name, char *err, size_t errlen)
{
    if (find_entry(name))
        return 0;
    kentry *e = calloc(1, sizeof *e);
    if (!e)
        return snprintf(err, errlen, "out of memory"), -1;
    char fin[KNAME_LEN + 16];
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(fin, sizeof fin, "%s_finish", name);
    e->obj = o;
    if (!(e->fn = lookup_locked(name, err, errlen)) ||
        (defines(bin, fin) && !(e->finish = lookup_locked(fin, err, errlen)))) {
        free(e);
        return -1;
    }
    unsigned bk = name_bucket(name);
    e->next = kc_table[bk];
    kc_table[bk] = e;
    return 0;
}

/* Registers the kernels of object b that no live unit provides to o. */
static int register_kernels(cpu_obj *o, const ind_blob *b, char *err, size_t errlen)
{
    char *msg = NULL;
    LLVMMemoryBufferRef mb = LLVMCreateMemoryBufferWithMemoryRange((const char *)b->data, b->len, "smelt", 0);
    LLVMBinaryRef bin = LLVMCreateBinary(mb, NULL, &msg);
    if (!bin) {
        snprintf(err, errlen, "not an object file: %s", msg ? msg : "?");
        LLVMDisposeMessage(msg);
        LLVMDisposeMemoryBuffer(mb);
        return -1;
    }
    int rc = 0;
    LLVMSymbolIteratorRef it = LLVMObjectFileCopySymbolIterator(bin);
    for (; !rc && !LLVMObjectFileIsSymbolIteratorAtEnd(bin, it); LLVMMoveToNextSymbol(it)) {
        const char *name = LLVMGetSymbolName(it);
        if (name && is_kernel_name(name, strlen(name)))
            rc = register_kernel(o, bin, name, err, errlen);
    }
    LLVMDisposeSymbolIterator(it);
    LLVMDisposeBinary(bin);
    LLVMDisposeMemoryBuffer(mb);
    return rc;
}

static void obj_free_locked(cpu_obj *o);

/* Keeps copies of objs in o. -1 if out of memory. */
static int keep_blobs(cpu_obj *o, const ind_blob *objs, int n)
{
    if (!(o->blobs = calloc((size_t)n + 1, sizeof *o->blobs)))
        return -1;
    for (int i = 0; i < n; i++, o->nblobs++)
        if (!(o->blobs[i].data = malloc(objs[i].len ? objs[i].len : 1)))
            return -1;
        else
            memcpy(o->blobs[i].data, objs[i].data, o->blobs[i].len = objs[i].len);
    return 0;
}

cpu_obj *cpu_jit_add_objects_locked(const ind_blob *objs, int n, char *err, size_t errlen)
{
    cpu_obj *o = calloc(1, sizeof *o);
    if (!o || keep_blobs(o, objs, n)) {
        snprintf(err, errlen, "out of memory");
        if (o)
            obj_free_locked(o);
        return NULL;
    }
    LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(jit);
    o->rt = LLVMOrcJITDylibCreateResourceTracker(jd);
    o->refs = 1;
    for (int i = 0; i < n; i++) {
        LLVMMemoryBufferRef mb = LLVMCreateMemoryBufferWithMemoryRangeCopy((const char *)objs[i].data,
                                                                          objs[i].len, "smelt");
        LLVMErrorRef e = LLVMOrcLLJITAddObjectFileWithRT(jit, o->rt, mb);
        if (e) {
            set_err(err, errlen, "", e);
            obj_free_locked(o);
            return NULL;
        }
    }
    for (int i = 0; i < n; i++)
        if (register_kernels(o, &objs[i], err, errlen)) {
            obj_free_locked(o);
            return NULL;
        }
    return o;
}

int cpu_kcache_find_locked(const char *name, void **fn, void **finish, cpu_obj **obj)
{
    kentry *e = find_entry(name);
    if (!e)
        return 0;
    *fn = e->fn, *finish = e->finish, *obj = e->obj;
    e->obj->refs++;
    return 1;
}

int cpu_obj_blobs(const cpu_obj *o, const ind_blob **blobs)
{
    *blobs = o->blobs;
    return o->nblobs;
}

/* Drops the registry entries of o, then its code. */
static void obj_free_locked(cpu_obj *o)
{
    for (int b = 0; b < KC_BUCKETS; b++)
        for (kentry **pe = &kc_table[b]; *pe;) {
            kentry *e = *pe;
            if (e->obj == o) {
                *pe = e->next;
                free(e);
            } else {
                pe = &e->next;
            }
        }
    if (o->rt) {
        LLVMErrorRef e = LLVMOrcResourceTrackerRemove(o->rt);
        if (e)
            LLVMConsumeError(e);
        LLVMOrcReleaseResourceTracker(o->rt);
    }
    for (int i = 0; i < o->nblobs; i++)
        free(o->blobs[i].data);
    free(o->blobs);
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

/* ---------- build identity ---------- */

static pthread_once_t build_once = PTHREAD_ONCE_INIT;
static char build_id[160];

static void build_id_init(void)
{
    Dl_info info;
    struct stat st;
    int n = snprintf(build_id, sizeof build_id, "built %s %s", __DATE__, __TIME__);
    if (dladdr((void *)cpu_build_id, &info) && info.dli_fname && stat(info.dli_fname, &st) == 0)
        snprintf(build_id + n, sizeof build_id - (size_t)n, " so %lld %lld.%09ld %llu", (long long)st.st_size,
                 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (unsigned long long)st.st_ino);
}

const char *cpu_build_id(void)
{
    pthread_once(&build_once, build_id_init);
    return build_id;
}
