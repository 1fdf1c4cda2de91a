/* runtime.c — the SPIR-V back end behind the backend interface
 * (backend.h): one module per plan (codegen.c), built and launched by
 * Level Zero where a Level Zero GPU is present (kernels/levelzero.c),
 * else by OpenCL on any device that takes SPIR-V (kernels/opencl.c:
 * Intel's OpenCL CPU runtime on these machines, host memory passed as
 * fine-grained system SVM).
 *
 * Environment:
 *   SMELT_SPIRV_LAUNCHER=opencl|level_zero  force one launcher
 *   SMELT_SPIRV_VALIDATE=1                   run spirv-val on every module
 *                                            built; an invalid one fails the
 *                                            compile (tests)
 *   SMELT_SPIRV_DUMP=dir                     write every module built there
 *   SMELT_SPIRV_GROUP_MIN=n                  reduction rows of n points or
 *                                            more use a work-group per row
 *                                            (codegen.c; default 256)
 * Disk cache blobs: [0] the module's words, [1] OpenCL's binary of the
 * built program (empty with Level Zero), so a warm process skips the
 * driver's compile (the code key names the device and driver version; a
 * binary the driver refuses is rebuilt from the words). The plan record
 * (slots, launch shape) is the plan cache's.
 */
#include "spv.h"
#include "../backend.h"
#include "../../kernels/levelzero.h"
#include "../../kernels/opencl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPV_CODE_VERSION 1

typedef struct spv_state {
    uint32_t *words;
    size_t nwords;
    int ze;                  /* launcher: 1 Level Zero, 0 OpenCL */
    kern_cl_program *clp;
    kern_ze_module *zem;
    void **kern;             /* per kernel: kern_cl_kernel * or kern_ze_kernel * */
    void **fin;              /* per split kernel: its finish ("f<i>"), else NULL */
    size_t *extent;          /* per plan buffer: bytes a kernel may touch (SIZE_MAX: unknown) */
    pid_t pid;               /* the process that built it (device contexts do not survive fork) */
    void *bin;               /* OpenCL: the driver's binary of the program (disk cache blob 1), or NULL */
    size_t nbin;
} spv_state;

/* ---------- launcher ---------- */

static pthread_once_t pick_once = PTHREAD_ONCE_INIT;
static int use_ze, any_launcher;
static char no_launcher[512];

static void pick(void)
{
    const char *want = getenv("SMELT_SPIRV_LAUNCHER");
    char why_ze[240] = "", why_cl[240] = "";
    int ze = (!want || !*want || !strcmp(want, "level_zero")) && kern_ze_available(why_ze, sizeof why_ze);
    int cl = !ze && (!want || !*want || !strcmp(want, "opencl")) && kern_cl_available(why_cl, sizeof why_cl);
    use_ze = ze;
    any_launcher = ze || cl;
    if (!any_launcher)
        snprintf(no_launcher, sizeof no_launcher, "no launcher: Level Zero: %s; OpenCL: %s",
                 why_ze[0] ? why_ze : "not tried", why_cl[0] ? why_cl : "not tried");
}

static int spv_available(char *why, size_t n)
{
    pthread_once(&pick_once, pick);
    if (!any_launcher)
        snprintf(why, n, "%s", no_launcher);
    return any_launcher;
}

/* "opencl: <device>" or "level_zero: <device>". */
static const char *device_text(void)
{
    static _Thread_local char text[320];
    pthread_once(&pick_once, pick);
    const char *d = use_ze ? kern_ze_device_text() : kern_cl_device_text();
    snprintf(text, sizeof text, "%s: %s", use_ze ? "level_zero" : "opencl", d ? d : "?");
    return text;
}

/* ---------- checking and showing modules ---------- */

/* Writes words to a new temporary file; its path in path (n bytes). 0 or -1. */
static int write_temp(const uint32_t *w, size_t nw, char *path, size_t n)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(path, n, "%s/smelt-spv-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    size_t want = nw * 4;
    ssize_t got = write(fd, w, want);
    close(fd);
    if (got != (ssize_t)want) {
        unlink(path);
        return -1;
    }
    return 0;
}

/* Output of `tool args path` (malloc'd, NULL if it cannot run); *rc its status. */
static char *run_tool(const char *cmd, const char *path, int *rc)
{
    char line[1200];
    snprintf(line, sizeof line, "%s '%s' 2>&1", cmd, path);
    FILE *f = popen(line, "r");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *out = malloc(cap);
    size_t got;
    while (out && (got = fread(out + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap && !(out = realloc(out, cap *= 2)))
            break;
    }
    *rc = pclose(f);
    if (out)
        out[n] = 0;
    return out;
}

/* SMELT_SPIRV_DUMP=dir: the module written to dir/<pid>-<n>.spv. */
static void dump(const uint32_t *w, size_t nw)
{
    static _Atomic int counter;
    const char *dir = getenv("SMELT_SPIRV_DUMP");
    if (!dir || !*dir)
        return;
    char path[600];
    snprintf(path, sizeof path, "%s/%d-%d.spv", dir, (int)getpid(), counter++);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(w, 4, nw, f);
        fclose(f);
    }
}

/* SMELT_SPIRV_VALIDATE: spirv-val's verdict on the module: 0, or -1 with err. */
static int validate(const uint32_t *w, size_t nw, char *err, size_t errlen)
{
    const char *v = getenv("SMELT_SPIRV_VALIDATE");
    if (!v || !*v || !strcmp(v, "0"))
        return 0;
    char path[512];
    int rc = -1;
    if (write_temp(w, nw, path, sizeof path))
        return snprintf(err, errlen, "SMELT_SPIRV_VALIDATE: cannot write a temporary file"), -1;
    char *out = run_tool("spirv-val --target-env opencl2.2", path, &rc);
    if (rc) {
        snprintf(err, errlen, "spirv-val rejects the module (%s): %.400s", path, out ? out : "did not run");
    } else {
        unlink(path);
    }
    free(out);
    return rc ? -1 : 0;
}

/* The disassembly (spirv-dis), or a line saying why not. malloc'd. */
static char *disassemble(const uint32_t *w, size_t nw)
{
    char path[512];
    int rc = -1;
    char *out = write_temp(w, nw, path, sizeof path) ? NULL : run_tool("spirv-dis --no-color --raw-id", path, &rc);
    if (out || path[0])
        unlink(path);
    if (out && rc == 0)
        return out;
    free(out);
    char *s = malloc(200);
    if (s)
        snprintf(s, 200, "; SPIR-V module of %zu words (spirv-dis, from Debian's spirv-tools, shows its text)\n", nw);
    return s;
}

/* ---------- loading ---------- */

/* Bytes a kernel may touch of each plan buffer (the non-SVM OpenCL path
 * wraps each in a buffer of that size). */
static void extents(const smelt_plan *p, size_t *ext)
{
    for (int32_t b = 0; b < p->nbufs; b++) {
        const plan_buf *pb = &p->bufs[b];
        size_t es = (size_t)smelt_dtype_size((smelt_dtype)pb->dtype);
        ext[b] = SIZE_MAX;
        if (pb->kind == PB_TEMP) {
            ext[b] = (size_t)pb->nbytes;
        } else if (pb->kind == PB_OUTPUT) {
            ext[b] = (size_t)smelt_node_numel(&p->graph->nodes[p->graph->outputs[pb->index]]) * es;
        } else if (pb->kind == PB_INPUT) {
            for (int32_t i = 0; i < p->graph->n; i++) {
                const smelt_node *n = &p->graph->nodes[i];
                if (n->op != SMELT_OP_INPUT || n->a.input.index != pb->index)
                    continue;
                int64_t last = 0, numel = smelt_node_numel(n);
                for (int d = 0; d < n->ndim; d++)
                    last += (n->shape[d] - 1) * (n->stride[d] < 0 ? -n->stride[d] : n->stride[d]);
                ext[b] = numel ? (size_t)(last + 1) * es : 0;
            }
        }
    }
}

/* Entry point "<c><k>" of st's module, or NULL with err. */
static void *entry(spv_state *st, char c, int32_t k, char *err, size_t errlen)
{
    char name[24];
    snprintf(name, sizeof name, "%c%d", c, (int)k);
    return st->ze ? (void *)kern_ze_kernel_new(st->zem, name, err, errlen)
                  : (void *)kern_cl_kernel_new(st->clp, name, err, errlen);
}

static void entry_free(const spv_state *st, void *k)
{
    if (k)
        st->ze ? kern_ze_kernel_free(k) : kern_cl_kernel_free(k);
}

/* Builds st's module for its launcher and takes every kernel's entry point. */
static int load(smelt_plan *p, spv_state *st, char *err, size_t errlen)
{
    if (!p->nkernels)   /* nothing to build (a plan of views and externs) */
        return 0;
    pthread_once(&pick_once, pick);
    st->ze = use_ze;
    if (!any_launcher)
        return snprintf(err, errlen, "%s", no_launcher), -1;
    if (!st->ze && st->bin && !(st->clp = kern_cl_program_from_binary(st->bin, st->nbin, err, errlen))) {
        free(st->bin);   /* (a binary the driver no longer takes: built from the module again) */
        st->bin = NULL;
    }
    if (!st->clp && !st->zem) {
        dump(st->words, st->nwords);
        if (validate(st->words, st->nwords, err, errlen))
            return -1;
        size_t nb = st->nwords * 4;
        if (st->ze ? !(st->zem = kern_ze_module_new(st->words, nb, err, errlen))
                   : !(st->clp = kern_cl_program_new(st->words, nb, err, errlen)))
            return -1;
        if (!st->ze)
            st->bin = kern_cl_program_binary(st->clp, &st->nbin);
    }
    st->kern = calloc((size_t)p->nkernels + 1, sizeof *st->kern);
    st->fin = calloc((size_t)p->nkernels + 1, sizeof *st->fin);
    st->extent = malloc(sizeof(size_t) * ((size_t)p->nbufs + 1));
    if (!st->kern || !st->fin || !st->extent)
        return snprintf(err, errlen, "out of memory"), -1;
    extents(p, st->extent);
    for (int32_t k = 0; k < p->nkernels; k++) {
        p->code[k].same_as = -1;
        if (!(st->kern[k] = entry(st, 'k', k, err, errlen)) ||
            (p->code[k].nfinish && !(st->fin[k] = entry(st, 'f', k, err, errlen))))
            return -1;
    }
    return 0;
}

static spv_state *state_new(smelt_plan *p)
{
    spv_state *st = calloc(1, sizeof *st);
    if (!st)
        abort();
    st->pid = getpid();
    p->backend_state = st;
    return st;
}

static int spv_codegen(smelt_plan *p, const smelt_compile_opts *o, char *err, size_t errlen)
{
    int64_t t0 = plan_now_ns();
    spv_state *st = state_new(p);
    p->code = calloc((size_t)p->nkernels + 1, sizeof *p->code);
    if (!p->code)
        return snprintf(err, errlen, "out of memory"), -1;
    for (int32_t k = 0; k < p->nkernels; k++)
        p->code[k].same_as = -1;
    if (p->nkernels && !(st->words = spv_codegen_module(p, &st->nwords)))
        return snprintf(err, errlen, "out of memory"), -1;
    p->ngenerated = p->times.generated = p->nkernels;
    if (o && o->keep_ir && p->nkernels)
        p->text_ir = disassemble(st->words, st->nwords);
    int64_t t1 = plan_now_ns();
    p->times.codegen_ms = (double)(t1 - t0) / 1e6;
    int rc = load(p, st, err, errlen);
    p->times.load_ms = (double)(plan_now_ns() - t1) / 1e6;
    if (!rc && p->nkernels) {
        char line[400];
        snprintf(line, sizeof line, "spirv: %d kernels, %zu words, built by %s in %.1f ms", (int)p->nkernels,
                 st->nwords, device_text(), p->times.load_ms);
        ind_backend_note(0, line);
    }
    return rc;
}

static char *spv_code_key(const smelt_compile_opts *o, char *err, size_t errlen)
{
    (void)o;
    if (!spv_available(err, errlen))
        return NULL;
    const char *s = getenv("SMELT_SPIRV_GROUP_MIN");
    char *k = malloc(512);
    if (!k)
        abort();
    snprintf(k, 512, "smelt-spirv v%d group_min %s %s", SPV_CODE_VERSION, s && *s ? s : "-", device_text());
    return k;
}

static int spv_export(const smelt_plan *p, ind_blob **blobs)
{
    const spv_state *st = p->backend_state;
    ind_blob *v = calloc(2, sizeof *v);
    if (!v)
        return -1;
    v[0].data = (uint8_t *)st->words;
    v[0].len = st->nwords * 4;
    v[1].data = st->bin;
    v[1].len = st->bin ? st->nbin : 0;
    *blobs = v;
    return 2;
}

static int spv_import(smelt_plan *p, const ind_blob *blobs, int nblobs, char *err, size_t errlen)
{
    spv_state *st = state_new(p);
    if (nblobs == 2 && !blobs[0].len && !p->nkernels)
        return 0;
    if (nblobs != 2 || blobs[0].len < 20 || blobs[0].len % 4)
        return snprintf(err, errlen, "malformed SPIR-V blob"), -1;
    if (!(st->words = malloc(blobs[0].len)))
        return snprintf(err, errlen, "out of memory"), -1;
    memcpy(st->words, blobs[0].data, blobs[0].len);
    if (blobs[1].len && (st->bin = malloc(blobs[1].len))) {
        memcpy(st->bin, blobs[1].data, blobs[1].len);
        st->nbin = blobs[1].len;
    }
    st->nwords = blobs[0].len / 4;
    if (st->words[0] != 0x07230203u)
        return snprintf(err, errlen, "not a SPIR-V module"), -1;
    int64_t t0 = plan_now_ns();
    int had_bin = st->bin != NULL, rc = load(p, st, err, errlen);
    if (!rc) {
        char line[200];
        snprintf(line, sizeof line, "spirv: %d kernels from the disk cache, %s in %.1f ms", (int)p->nkernels,
                 had_bin && st->bin ? "the driver's binary loaded" : "the module built again",
                 (double)(plan_now_ns() - t0) / 1e6);
        ind_backend_note(0, line);
    }
    return rc;
}

/* Runs one entry point over n work-groups of `local` items: args kb[0..nargs). */
static int run(const spv_state *st, void *k, const plan_kernel_code *c, void **kb, int nargs, int64_t n, int64_t local,
               char *err, size_t errlen)
{
    if (st->ze)
        return kern_ze_launch(k, nargs, kb, n, local, err, errlen);
    size_t small[66], *nbytes = c->nslots < 64 ? small : malloc(sizeof(size_t) * ((size_t)c->nslots + 2));
    if (!nbytes)
        return snprintf(err, errlen, "out of memory"), -1;
    for (int32_t i = 0; i < c->nslots; i++)
        nbytes[i] = st->extent[c->slots[i]];
    nbytes[c->nslots] = sizeof(int32_t);
    nbytes[c->nslots + 1] = (size_t)c->scratch_bytes;
    int rc = kern_cl_launch(k, nargs, kb, nbytes, n, local, err, errlen);
    if (nbytes != small)
        free(nbytes);
    return rc;
}

/* A kernel; a split one's partials into a scratch block (kb[nslots + 1]),
 * then its finish. */
static int spv_launch(const smelt_plan *p, int32_t kernel, void **kb, char *err, size_t errlen)
{
    const spv_state *st = p->backend_state;
    const plan_kernel_code *c = &p->code[kernel];
    if (c->nitems <= 0)
        return 0;
    if (getpid() != st->pid)
        return snprintf(err, errlen, "SPIR-V kernels compiled before fork() cannot run in the child process "
                                     "(its OpenCL/Level Zero context does not survive fork)"), -1;
    if (!c->nfinish)
        return run(st, st->kern[kernel], c, kb, c->nslots + 1, c->nitems, c->grain, err, errlen);
    void *scratch = st->ze ? kern_ze_alloc_shared((size_t)c->scratch_bytes, err, errlen) : malloc((size_t)c->scratch_bytes);
    if (!scratch)
        return st->ze ? -1 : (snprintf(err, errlen, "out of memory"), -1);
    kb[c->nslots + 1] = scratch;
    int rc = run(st, st->kern[kernel], c, kb, c->nslots + 2, c->nitems, c->grain, err, errlen);
    if (!rc)
        rc = run(st, st->fin[kernel], c, kb, c->nslots + 2, c->nfinish, SPV_LOCAL, err, errlen);
    st->ze ? kern_ze_free(scratch) : free(scratch);
    kb[c->nslots + 1] = NULL;
    return rc;
}

static void spv_release(smelt_plan *p)
{
    spv_state *st = p->backend_state;
    if (!st)
        return;
    for (int32_t k = 0; st->kern && k < p->nkernels; k++) {
        entry_free(st, st->kern[k]);
        entry_free(st, st->fin ? st->fin[k] : NULL);
    }
    free(st->fin);
    if (st->clp)
        kern_cl_program_free(st->clp);
    if (st->zem)
        kern_ze_module_free(st->zem);
    free(st->kern);
    free(st->extent);
    free(st->words);
    free(st->bin);
    free(st);
    p->backend_state = NULL;
}

static int64_t spv_code_bytes(const smelt_plan *p)
{
    const spv_state *st = p->backend_state;
    return st ? (int64_t)st->nwords * 4 : 0;
}

/* 1 if kernel k touches float64 (a buffer, a value, an accumulator). */
static int uses_f64(const smelt_plan *p, const kir_kernel *k)
{
    for (int i = 0; i < k->nitems; i++) {
        const kitem *it = &k->items[i];
        if ((it->kind == KI_REDUCE && it->acc_dtype == SMELT_F64) ||
            (it->kind != KI_REDUCE && p->bufs[it->buf].dtype == SMELT_F64))
            return 1;
    }
    for (int32_t e = 0; e < p->pool.nex; e++) {   /* (any expression of the plan: a superset) */
        const kexpr *x = &p->pool.ex[e];
        if (x->dtype == SMELT_F64 || (x->op == KE_OP && x->cdtype == SMELT_F64))
            return 1;
    }
    return 0;
}

/* Every kernel kind the lowering makes, but float64 on a device without
 * it (some Intel GPUs). */
static int spv_supports(const smelt_plan *p, const kir_kernel *k, char *why, size_t n)
{
    pthread_once(&pick_once, pick);
    int fp64 = use_ze ? kern_ze_fp64() : kern_cl_fp64();
    if (!fp64 && uses_f64(p, k))
        return snprintf(why, n, "float64 on a device without float64"), 0;
    return 1;
}

const ind_backend ind_backend_spirv = {
    .name = "spirv",
    .id = IND_BACKEND_SPIRV,
    .available = spv_available,
    .supports = spv_supports,
    .code_key = spv_code_key,
    .codegen = spv_codegen,
    .code_export = spv_export,
    .code_import = spv_import,
    .launch = spv_launch,
    .release = spv_release,
    .code_bytes = spv_code_bytes,
};
