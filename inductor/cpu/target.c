/* target.c — the CPU the JIT generates code for.
 *
 * The host's CPU name and feature list come from LLVM's host detection.
 * SMELT_CPU / SMELT_CPU_FEATURES (read once, when the JIT starts) name
 * another target; it is used only if LLVM knows the CPU and every feature
 * name, it has the x86-64 baseline, and the host can run all of its
 * features. LLVM's C API cannot list the features a CPU name implies, so
 * those questions go to LLVM's inliner (ask_inliner below).
 */
#include "target.h"

#include <llvm/Config/llvm-config.h>

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Removed from every target, last (so the AVX10 levels that imply it go
 * too). LLVM 19's X86 back end commutes the operands of a masked FP16
 * compare (VCMPPH with a k-mask) without swapping its predicate (LLVM
 * issue 159723, fixed upstream by PR 160304 in September 2025): when it
 * folds a spilled operand into the compare, `b < 0` becomes `0 < b`. InstCombine narrows smelt's
 * `fcmp (fpext half b), 0` to a half compare, which with avx512fp16 is
 * such an instruction (float16 remainder added the divisor in exactly the
 * wrong lanes). smelt computes float16 in float32, so FP16 arithmetic gains
 * nothing; without the feature LLVM widens half compares to float32. */
#define NO_FP16 "-avx512fp16"

static char *triple;
static char *host_raw;          /* LLVM's host feature list, unchanged */
static char *host_lacks;        /* its "-name" items */
static cpu_target host, proc;
static char refusal[512];

/* a, b and c joined by commas (NULL or "" skipped); malloc'd. */
static char *join(const char *a, const char *b, const char *c)
{
    const char *p[3] = { a, b, c };
    size_t n = 1;
    for (int i = 0; i < 3; i++)
        n += p[i] ? strlen(p[i]) + 1 : 0;
    char *s = malloc(n);
    if (!s)
        abort();
    s[0] = 0;
    for (int i = 0; i < 3; i++)
        if (p[i] && *p[i]) {
            if (*s)
                strcat(s, ",");
            strcat(s, p[i]);
        }
    return s;
}

/* 1 if the comma-separated list fs has the item it[0..n). */
static int has_item(const char *fs, const char *it, size_t n)
{
    for (const char *s = fs; s && *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == n && !strncmp(s, it, n))
            return 1;
        s += len + (e != NULL);
    }
    return 0;
}

static int has(const char *fs, const char *it) { return has_item(fs, it, strlen(it)); }

/* 0 if each item of fs is +name or -name with a name in the host's
 * feature list (which names every feature LLVM detects), other than
 * 64bit; else -1 with err. */
static int check_features(const char *fs, char *err, size_t errlen)
{
    for (const char *s = fs; *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char item[104];
        int ok = len >= 2 && len <= 100 && (s[0] == '+' || s[0] == '-');
        if (ok) {
            snprintf(item, sizeof item, "+%.*s", (int)len - 1, s + 1);
            ok = strcmp(item, "+64bit") && (has(host_raw, item) || (item[0] = '-', has(host_raw, item)));
        }
        if (!ok)
            return snprintf(err, errlen, "'%.*s' is not +name or -name of a feature LLVM %s detects",
                            (int)(len < 64 ? len : 64), s, LLVM_VERSION_STRING), -1;
        s += len + (e != NULL);
    }
    return 0;
}

/* 0 if cpu looks like an LLVM CPU name (letters, digits, '-', '_', '.';
 * "help" would make LLVM print its CPU list), else -1 with err. */
static int check_cpu_name(const char *cpu, char *err, size_t errlen)
{
    size_t n = strlen(cpu);
    int ok = n > 0 && n < 64 && strcmp(cpu, "help");
    for (size_t i = 0; ok && i < n; i++)
        ok = (cpu[i] >= 'a' && cpu[i] <= 'z') || (cpu[i] >= '0' && cpu[i] <= '9') || cpu[i] == '-' ||
             cpu[i] == '_' || cpu[i] == '.';
    if (!ok)
        snprintf(err, errlen, "'%.64s' is not a CPU name", cpu);
    return ok ? 0 : -1;
}

/* Sets fn's target; both attributes always (an absent one would mean the
 * target machine's). */
static void set_attrs(LLVMContextRef C, LLVMValueRef fn, const char *cpu, const char *features)
{
    const char *k[2] = { "target-cpu", "target-features" }, *v[2] = { cpu, features };
    for (int i = 0; i < 2; i++)
        LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                                LLVMCreateStringAttribute(C, k[i], (unsigned)strlen(k[i]), v[i],
                                                          (unsigned)strlen(v[i])));
}

/* Does target (sub_cpu, sub_feat) have no feature that (sup_cpu,
 * sup_feat) lacks? `within` is the answer. */
typedef struct tquery {
    const char *sub_cpu, *sub_feat, *sup_cpu, *sup_feat;
    int within;
} tquery;

/* Adds function "<name><i>" with target (cpu, features) to M; its body is
 * a call of callee (if any) and a return. */
static LLVMValueRef probe_fn(LLVMModuleRef M, const char *name, int i, const char *cpu, const char *features,
                             LLVMValueRef callee)
{
    LLVMContextRef C = LLVMGetModuleContext(M);
    LLVMTypeRef fty = LLVMFunctionType(LLVMVoidTypeInContext(C), NULL, 0, 0);
    char fname[32];
    snprintf(fname, sizeof fname, "%s%d", name, i);
    LLVMValueRef f = LLVMAddFunction(M, fname, fty);
    set_attrs(C, f, cpu, features);
    LLVMBuilderRef B = LLVMCreateBuilderInContext(C);
    LLVMPositionBuilderAtEnd(B, LLVMAppendBasicBlockInContext(C, f, "entry"));
    if (callee)
        LLVMBuildCall2(B, fty, callee, NULL, 0, "");
    LLVMBuildRetVoid(B);
    LLVMDisposeBuilder(B);
    return f;
}

/* Answers q[0..n). LLVM's X86 inlining rule admits a callee into a caller
 * only when the caller's target has every feature of the callee's (tuning
 * aside), with implied features expanded, CPU defaults included. So each
 * query is a caller with the sup target calling an empty internal
 * function with the sub target; after the inliner the call is gone iff
 * the answer is yes. 0, or -1 if LLVM failed. */
static int ask_inliner(tquery *q, int n)
{
    LLVMContextRef C = LLVMContextCreate();
    LLVMModuleRef M = LLVMModuleCreateWithNameInContext("smelt-target-probe", C);
    LLVMValueRef callers[8];
    LLVMSetTarget(M, triple);
    for (int i = 0; i < n && i < 8; i++) {
        LLVMValueRef callee = probe_fn(M, "sub", i, q[i].sub_cpu, q[i].sub_feat, NULL);
        LLVMSetLinkage(callee, LLVMInternalLinkage);
        callers[i] = probe_fn(M, "sup", i, q[i].sup_cpu, q[i].sup_feat, callee);
    }
    LLVMTargetMachineRef tm = cpu_target_machine(&host, 0);
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMErrorRef e = tm && n <= 8 ? LLVMRunPasses(M, "inline", tm, po) : NULL;
    int rc = tm && n <= 8 && !e ? 0 : -1;
    if (e)
        LLVMConsumeError(e);
    for (int i = 0; !rc && i < n; i++)
        q[i].within = !LLVMIsACallInst(LLVMGetFirstInstruction(LLVMGetEntryBasicBlock(callers[i])));
    LLVMDisposePassBuilderOptions(po);
    if (tm)
        LLVMDisposeTargetMachine(tm);
    LLVMDisposeModule(M);
    LLVMContextDispose(C);
    return rc;
}

static char *dup(const char *s) { return join(s, NULL, NULL); }

/* The "-name" items of list fs, comma-separated; malloc'd. */
static char *minus_items(const char *fs)
{
    char *out = dup(fs), *o = out;
    for (const char *s = fs; *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (s[0] == '-') {
            if (o != out)
                *o++ = ',';
            memcpy(o, s, len);
            o += len;
        }
        s += len + (e != NULL);
    }
    *o = 0;
    return out;
}

/* The request (cpu, features) as LLVM's CPU name and feature string in
 * t: the host's with features appended, or a named CPU in 64-bit mode
 * (LLVM aborts on a CPU without it) with features. 0, or -1 with err. */
static int request(const char *cpu, const char *features, cpu_target *t, char *err, size_t errlen)
{
    if (features && check_features(features, err, errlen))
        return -1;
    if (!cpu || !*cpu || !strcmp(cpu, "host")) {
        t->cpu = dup(host.cpu);
        t->features = join(host_raw, features, NULL);
        return 0;
    }
    if (check_cpu_name(cpu, err, errlen))
        return -1;
    t->cpu = dup(cpu);
    t->features = join("+64bit", features, NULL);
    return 0;
}

/* 0 if LLVM knows t's CPU, else -1 with err. LLVM gives an unknown name
 * no features (and prints a line saying so), so with 64-bit mode its target
 * is within plain x86-64; so is a 32-bit CPU's. "x86-64" and "generic" are
 * within it too, and known. */
static int check_known(const cpu_target *t, char *err, size_t errlen)
{
    tquery q = { t->cpu, "+64bit", "x86-64", "", 0 };
    if (!strcmp(t->cpu, "x86-64") || !strcmp(t->cpu, "generic") || !strcmp(t->cpu, host.cpu))
        return 0;
    if (ask_inliner(&q, 1))
        return snprintf(err, errlen, "LLVM could not compare targets"), -1;
    if (q.within)
        return snprintf(err, errlen, "'%s' is not a 64-bit CPU LLVM %s knows", t->cpu, LLVM_VERSION_STRING), -1;
    return 0;
}

/* Checks request t (x86-64 baseline; with run, the host runs it: t has
 * none of the features the host's list marks absent, i.e. removing those
 * leaves t as it is; features the list does not name, such as ermsb, are
 * hints, not instructions), then removes FP16 and sets the vector width.
 * 0, or -1 with err. */
static int finish(cpu_target *t, int run, char *err, size_t errlen)
{
    if (check_known(t, err, errlen))
        return -1;
    char *fin = join(t->features, NO_FP16, NULL), *f512 = join(fin, "+avx512f", NULL);
    char *fevex = join(fin, "+evex512", NULL), *favx2 = join(fin, "+avx2", NULL), *ffma = join(fin, "+fma", NULL);
    char *host_minus = join(t->features, host_lacks, NULL);
    tquery q[6] = {
        { "x86-64", "", t->cpu, t->features, 0 },           /* the x86-64 baseline */
        { t->cpu, t->features, t->cpu, host_minus, 0 },    /* the host runs it */
        { t->cpu, f512, t->cpu, fin, 0 },                  /* AVX-512F */
        { t->cpu, fevex, t->cpu, fin, 0 },                 /* 512-bit EVEX */
        { t->cpu, favx2, t->cpu, fin, 0 },                 /* AVX2 */
        { t->cpu, ffma, t->cpu, fin, 0 },                  /* FMA */
    };
    int rc = ask_inliner(q, 6);
    if (rc)
        snprintf(err, errlen, "LLVM could not compare targets");
    else if (!q[0].within)
        rc = -1, snprintf(err, errlen, "the target lacks the x86-64 baseline");
    else if (run && !q[1].within)
        rc = -1, snprintf(err, errlen, "the host (%s) cannot run code for it", host.cpu);
    free(f512);
    free(fevex);
    free(favx2);
    free(ffma);
    free(host_minus);
    if (rc) {
        free(fin);
        return -1;
    }
    free(t->features);
    t->features = fin;
    t->vbits = q[2].within && q[3].within ? 512 : q[4].within ? 256 : 128;
    t->fma = q[5].within;
    return 0;
}

void cpu_target_free(cpu_target *t)
{
    free(t->cpu);
    free(t->features);
    t->cpu = t->features = NULL;
}

/* The host target, from LLVM's host detection. */
static void host_init(void)
{
    char *s = LLVMGetDefaultTargetTriple();
    triple = dup(s);
    LLVMDisposeMessage(s);
    s = LLVMGetHostCPUName();
    host.cpu = dup(s);
    LLVMDisposeMessage(s);
    s = LLVMGetHostCPUFeatures();
    host_raw = dup(s);
    LLVMDisposeMessage(s);
    host.features = join(host_raw, NO_FP16, NULL);
    host_lacks = minus_items(host_raw);
    host.vbits = has(host_raw, "+avx512f") && !has(host_raw, "-evex512") ? 512 : has(host_raw, "+avx2") ? 256 : 128;
    host.fma = has(host_raw, "+fma");
}

/* Records why the request (the variables set) was refused. */
static void refuse(const char *cpu, const char *fs, const char *why)
{
    char req[224] = "";
    if (cpu && *cpu)
        snprintf(req, sizeof req, "SMELT_CPU=%.64s ", cpu);
    if (fs && *fs)
        snprintf(req + strlen(req), sizeof req - strlen(req), "SMELT_CPU_FEATURES=%.128s ", fs);
    req[strlen(req) - 1] = 0;
    snprintf(refusal, sizeof refusal, "%s: %s; generating code for the host (%s) instead", req, why, host.cpu);
}

void cpu_target_init(void)
{
    host_init();
    const char *cpu = getenv("SMELT_CPU"), *fs = getenv("SMELT_CPU_FEATURES");
    char why[256];
    if ((cpu && *cpu) || (fs && *fs)) {
        if (!request(cpu, fs, &proc, why, sizeof why) && !finish(&proc, 1, why, sizeof why))
            return;
        cpu_target_free(&proc);
        refuse(cpu, fs, why);
    }
    proc = (cpu_target){ dup(host.cpu), dup(host.features), host.vbits, host.fma };
}

const cpu_target *cpu_target_process(void) { return &proc; }
const char *cpu_target_refusal(void) { return refusal; }

int cpu_target_for_code(const char *cpu, const char *features, cpu_target *t, char *err, size_t errlen)
{
    *t = (cpu_target){ 0 };
    if (request(cpu, features, t, err, errlen) || finish(t, 0, err, errlen)) {
        cpu_target_free(t);
        return -1;
    }
    return 0;
}

LLVMTargetMachineRef cpu_target_machine(const cpu_target *t, int opt_level)
{
    LLVMTargetRef target;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(triple, &target, &msg)) {
        LLVMDisposeMessage(msg);
        return NULL;
    }
    LLVMCodeGenOptLevel lvl = opt_level <= 0 ? LLVMCodeGenLevelNone
                            : opt_level == 1 ? LLVMCodeGenLevelLess
                            : opt_level == 2 ? LLVMCodeGenLevelDefault : LLVMCodeGenLevelAggressive;
    return LLVMCreateTargetMachine(target, triple, t->cpu, t->features, lvl, LLVMRelocDefault,
                                   LLVMCodeModelJITDefault);
}
