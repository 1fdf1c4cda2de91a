/* plancache.c — compiled plans on disk (see plan.h): a fresh process that
 * compiles a graph compiled before reads the launch plan and the machine
 * code instead of lowering and running LLVM.
 *
 * Entry key: "smelt-plan v<PLAN_RECORD_VERSION>", the backend's code key
 * (code generator version, smelt's build, LLVM, target CPU and features,
 * vector width, optimisation level), the sizes of the record's structs,
 * then the graph's canonical serialisation. Entry blobs:
 *   0  the plan record (below)
 *   1… the back end's code (code_export): the CPU's, the kernels' function
 *      names then the object files defining them; SPIR-V's, see
 *      spirv/runtime.c
 * Plan record (native byte order: the key pins the build and the CPU):
 *   magic "SMELTPLN"; int32 nbufs, nsteps, nkernels, nexterns, ncalls;
 *   plan_buf[nbufs]; plan_step[nsteps] (pointers zero), each followed by
 *   its plan_call / plan_sdpa / plan_conv; kir_kernel[nkernels] (items
 *   dropped); per kernel int64 nslots, same_as, nitems, grain, nfinish,
 *   scratch_bytes, nparams, then int32 slots[nslots], int64
 *   params[nparams] (parametric code's sizes).
 * A record that does not decode or whose indices are out of range is a
 * miss (the entry's checksum already catches damaged files).
 */
#include "plan.h"
#include "backend.h"
#include "diskcache.h"

#include <stdlib.h>
#include <string.h>

#define PLAN_RECORD_VERSION 8
#define PLAN_MAGIC "SMELTPLN"
#define PLAN_MAX_COUNT (1 << 24)

/* ---------- writing ---------- */

typedef struct wbuf {
    uint8_t *b;
    size_t n, cap;
} wbuf;

static void put(wbuf *w, const void *p, size_t n)
{
    if (w->n + n > w->cap) {
        w->cap = (w->cap + n) * 2;
        if (!(w->b = realloc(w->b, w->cap)))
            abort();
    }
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

static void put_i32(wbuf *w, int32_t v) { put(w, &v, sizeof v); }
static void put_i64(wbuf *w, int64_t v) { put(w, &v, sizeof v); }

static void put_steps(wbuf *w, const smelt_plan *p)
{
    for (int32_t s = 0; s < p->nsteps; s++) {
        plan_step st = p->steps[s];
        st.pack = NULL, st.call = NULL, st.attn = NULL, st.conv = NULL;
        put(w, &st, sizeof st);
        if (p->steps[s].kind == PS_CALL)
            put(w, p->steps[s].call, sizeof *st.call);
        else if (p->steps[s].kind == PS_SDPA)
            put(w, p->steps[s].attn, sizeof *st.attn);
        else if (p->steps[s].kind == PS_CONV)
            put(w, p->steps[s].conv, sizeof *st.conv);
    }
}

/* The plan record of p (see the file comment). */
static void encode(wbuf *w, const smelt_plan *p)
{
    put(w, PLAN_MAGIC, 8);
    int32_t counts[5] = { p->nbufs, p->nsteps, p->nkernels, p->nexterns, p->ncalls };
    put(w, counts, sizeof counts);
    put(w, p->bufs, sizeof *p->bufs * (size_t)p->nbufs);
    put_steps(w, p);
    for (int32_t k = 0; k < p->nkernels; k++) {
        kir_kernel kk = p->kernels[k];
        kk.items = NULL, kk.nitems = 0;
        put(w, &kk, sizeof kk);
    }
    for (int32_t k = 0; k < p->nkernels; k++) {
        const plan_kernel_code *c = &p->code[k];
        put_i64(w, c->nslots), put_i64(w, c->same_as), put_i64(w, c->nitems);
        put_i64(w, c->grain), put_i64(w, c->nfinish), put_i64(w, c->scratch_bytes);
        put_i64(w, c->nparams);
        for (int32_t i = 0; i < c->nslots; i++)
            put_i32(w, c->slots[i]);
        for (int32_t i = 0; i < c->nparams; i++)
            put_i64(w, c->params[i]);
    }
}

/* ---------- reading ---------- */

typedef struct rbuf {
    const uint8_t *b;
    size_t n, at;
    int bad;
} rbuf;

static void get(rbuf *r, void *p, size_t n)
{
    if (r->bad || n > r->n - r->at) {
        r->bad = 1;
        memset(p, 0, n);
        return;
    }
    memcpy(p, r->b + r->at, n);
    r->at += n;
}

static int64_t get_i64(rbuf *r)
{
    int64_t v;
    get(r, &v, sizeof v);
    return v;
}

/* A malloc'd copy of the next n bytes (n may be 0); NULL if short. */
static void *get_copy(rbuf *r, size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        abort();
    get(r, p, n);
    if (r->bad) {
        free(p);
        return NULL;
    }
    return p;
}

static int buf_ok(const smelt_plan *p, int32_t b) { return b >= 0 && b < p->nbufs; }

static int ref_ok(const smelt_tensor_ref *r) { return r->dtype < SMELT_NDTYPES && r->ndim <= SMELT_MAX_DIMS; }

/* 1 if every buffer index and rank of extern step st is in range. */
static int extern_ok(const smelt_plan *p, const plan_step *st)
{
    int ok = 1;
    if (st->kind == PS_MATMUL)
        ok = buf_ok(p, st->a_buf) && buf_ok(p, st->b_buf) && buf_ok(p, st->c_buf) &&
             st->b_input >= -1 && st->b_input < p->graph->ninputs && st->mm.ndim >= 2 &&
             st->mm.ndim <= SMELT_MAX_DIMS;
    else if (st->kind == PS_CALL) {
        ok = st->call->nin >= 0 && st->call->nin <= SMELT_MAX_SRC && st->call->nout >= 0 &&
             st->call->nout <= SMELT_MAX_SRC;
        for (int k = 0; ok && k < st->call->nin; k++)
            ok = buf_ok(p, st->call->in_buf[k]) && ref_ok(&st->call->in[k]);
        for (int k = 0; ok && k < st->call->nout; k++)
            ok = buf_ok(p, st->call->out_buf[k]) && ref_ok(&st->call->out[k]);
    } else if (st->kind == PS_SDPA) {
        int mode = st->attn->mode;
        int masked = st->attn->d.mask_kind != KERN_SDPA_NO_MASK;   /* a mask kind exactly when a mask source */
        ok = (mode == 0 || mode == 1) && st->attn->nin == (mode ? 5 : 3) + masked &&
             st->attn->d.mask_kind <= KERN_SDPA_ADD_MASK && buf_ok(p, st->attn->buf[PLAN_SDPA_OUT]) &&
             st->attn->d.nb >= 0 && st->attn->d.nb <= KERN_SDPA_MAX_BATCH;
        for (int k = 0; ok && k < st->attn->nin; k++)
            ok = buf_ok(p, st->attn->buf[k]);
        const plan_flex *f = &st->attn->fx;
        ok = ok && (st->attn->flex == 0 || (st->attn->flex == 1 && !masked && f->bq >= 1 && f->bk >= 1 && f->H >= 1));
        for (int k = 0; ok && st->attn->flex && k < PLAN_FLEX_NKERN; k++)
            ok = f->kern[k] >= -1 && f->kern[k] < p->nkernels;
        for (int k = 0; ok && st->attn->flex && k < 7; k++)
            ok = buf_ok(p, f->tile[k]);
        for (int k = 0; ok && st->attn->flex && k < 4; k++)
            ok = f->tab_buf[k] == -1 || buf_ok(p, f->tab_buf[k]);
    } else if (st->kind == PS_CONV) {
        ok = st->conv->nin >= 2 && st->conv->nin <= 3 && buf_ok(p, st->conv->buf[3]) &&
             st->conv->mode >= 0 && st->conv->mode <= 2 && (st->conv->mode == 0 || st->conv->nin == 2) &&
             st->conv->d.nsp >= 1 && st->conv->d.nsp <= 3;
        for (int k = 0; ok && k < st->conv->nin; k++)
            ok = buf_ok(p, st->conv->buf[k]);
    }
    return ok;
}

/* Reads the steps and their owned parts; -1 if short or out of range. */
static int get_steps(rbuf *r, smelt_plan *p)
{
    for (int32_t s = 0; s < p->nsteps; s++) {
        plan_step *st = &p->steps[s];
        get(r, st, sizeof *st);
        st->pack = NULL, st->call = NULL, st->attn = NULL, st->conv = NULL;
        if (r->bad)
            return -1;
        if (st->kind == PS_CALL && !(st->call = get_copy(r, sizeof *st->call)))
            return -1;
        if (st->kind == PS_SDPA && !(st->attn = get_copy(r, sizeof *st->attn)))
            return -1;
        if (st->kind == PS_CONV && !(st->conv = get_copy(r, sizeof *st->conv)))
            return -1;
        if (st->kind > PS_CONV || (st->kind == PS_KERNEL && (st->kernel < 0 || st->kernel >= p->nkernels)) ||
            st->backend != ind_step_backend(p->be, st->kind == PS_KERNEL) ||
            !extern_ok(p, st))
            return -1;
    }
    return 0;
}

static int get_bufs(rbuf *r, smelt_plan *p)
{
    get(r, p->bufs, sizeof *p->bufs * (size_t)p->nbufs);
    for (int32_t i = 0; i < p->nbufs && !r->bad; i++) {
        const plan_buf *b = &p->bufs[i];
        if (b->kind > PB_HOST || b->dtype >= SMELT_NDTYPES || b->nbytes < 0 ||
            (b->kind == PB_INPUT && (b->index < 0 || b->index >= p->graph->ninputs)) ||
            (b->kind == PB_OUTPUT && (b->index < 0 || b->index >= p->graph->nout)) ||
            b->inplace < 0 || b->inplace > p->graph->ninputs || (b->inplace && b->kind != PB_OUTPUT))
            return -1;
    }
    return r->bad ? -1 : 0;
}

static int get_code(rbuf *r, smelt_plan *p)
{
    for (int32_t k = 0; k < p->nkernels; k++) {
        plan_kernel_code *c = &p->code[k];
        int64_t nslots = get_i64(r);
        c->same_as = (int32_t)get_i64(r);
        c->nitems = get_i64(r), c->grain = get_i64(r);
        c->nfinish = get_i64(r), c->scratch_bytes = get_i64(r);
        int64_t nparams = get_i64(r);
        if (r->bad || nslots < 0 || nslots > p->nbufs || c->same_as < -1 || c->same_as >= k ||
            c->nitems < 0 || c->grain < 1 || c->nfinish < 0 || c->scratch_bytes < 0 || nparams < 0 ||
            nparams > PLAN_MAX_COUNT)
            return -1;
        c->nslots = (int32_t)nslots;
        if (!(c->slots = get_copy(r, sizeof(int32_t) * (size_t)nslots)))
            return -1;
        c->nparams = (int32_t)nparams;
        if (nparams && !(c->params = get_copy(r, sizeof(int64_t) * (size_t)nparams)))
            return -1;
        for (int32_t i = 0; i < c->nslots; i++)
            if (!buf_ok(p, c->slots[i]))
                return -1;
    }
    return 0;
}

/* Fills p (graph set) from record r: 0, or -1 if it does not decode. */
static int decode(rbuf *r, smelt_plan *p)
{
    char magic[8];
    int32_t counts[5];
    get(r, magic, 8);
    get(r, counts, sizeof counts);
    if (r->bad || memcmp(magic, PLAN_MAGIC, 8))
        return -1;
    for (int i = 0; i < 5; i++)
        if (counts[i] < 0 || counts[i] > PLAN_MAX_COUNT)
            return -1;
    p->nbufs = p->cbufs = counts[0], p->nsteps = p->csteps = counts[1];
    p->nkernels = p->ckernels = counts[2], p->nexterns = counts[3], p->ncalls = counts[4];
    p->bufs = calloc((size_t)p->nbufs + 1, sizeof *p->bufs);
    p->steps = calloc((size_t)p->nsteps + 1, sizeof *p->steps);
    p->kernels = calloc((size_t)p->nkernels + 1, sizeof *p->kernels);
    p->code = calloc((size_t)p->nkernels + 1, sizeof *p->code);
    if (!p->bufs || !p->steps || !p->kernels || !p->code)
        abort();
    if (get_bufs(r, p) || get_steps(r, p))
        return -1;
    get(r, p->kernels, sizeof *p->kernels * (size_t)p->nkernels);
    for (int32_t k = 0; k < p->nkernels; k++) {
        p->kernels[k].items = NULL, p->kernels[k].nitems = 0;
        if (p->kernels[k].nvars < 0 || p->kernels[k].nvars > KIR_MAX_VARS)
            return -1;
    }
    if (r->bad || get_code(r, p))
        return -1;
    return r->at == r->n ? 0 : -1;
}

/* ---------- the cache ---------- */

uint8_t *ind_plan_cache_key(const smelt_graph *g, const smelt_compile_opts *o, const ind_backend *be, size_t *len)
{
    char err[256];
    char *code = be->code_key(o, err, sizeof err);
    if (!code)
        return NULL;
    size_t glen;
    uint8_t *gser = smelt_graph_serialize(g, &glen);
    if (!gser) {
        free(code);
        return NULL;
    }
    char head[192];
    snprintf(head, sizeof head, "smelt-plan v%d sizes %zu %zu %zu %zu %zu %zu %zu|", PLAN_RECORD_VERSION,
             sizeof(plan_buf), sizeof(plan_step), sizeof(plan_call), sizeof(plan_sdpa), sizeof(plan_conv),
             sizeof(kir_kernel), sizeof(plan_kernel_code));
    wbuf w = { 0 };
    put(&w, head, strlen(head));
    put(&w, code, strlen(code));
    put(&w, "|", 1);
    for (int32_t i = 0; o && i < o->nupdate; i++) {   /* in-place updates change the plan */
        char u[48];
        int n = snprintf(u, sizeof u, "u%d:%d,", (int)o->update[2 * i], (int)o->update[2 * i + 1]);
        put(&w, u, (size_t)n);
    }
    put(&w, "|", 1);
    put(&w, gser, glen);
    free(code);
    free(gser);
    *len = w.n;
    return w.b;
}

smelt_plan *ind_plan_cache_load(const smelt_graph *g, const ind_backend *be, int device, const uint8_t *key,
                                size_t keylen)
{
    char err[256], line[320];
    ind_blob *blobs;
    int nblobs;
    if (ind_dcache_get(key, keylen, &blobs, &nblobs))
        return NULL;
    smelt_plan *p = calloc(1, sizeof *p);
    if (!p || !(p->graph = smelt_graph_copy(g)))
        abort();
    p->be = be;
    p->device = device;
    rbuf r = { blobs[0].data, blobs[0].len, 0, 0 };
    int rc = nblobs < 2 ? -1 : decode(&r, p);
    if (rc)
        snprintf(err, sizeof err, "its plan record does not decode");
    else
        rc = be->code_import(p, blobs + 1, nblobs - 1, err, sizeof err);
    ind_dcache_free(blobs, nblobs);
    if (rc) {
        snprintf(line, sizeof line, "disk cache entry not used (%s): compiling anew", err);
        ind_dcache_note(line);
        smelt_plan_free(p);
        return NULL;
    }
    p->times.plan_cached = 1;
    return p;
}

void ind_plan_cache_store(const smelt_plan *p, const uint8_t *key, size_t keylen)
{
    ind_blob *code;
    int ncode = p->be->code_export(p, &code);
    if (ncode < 1)
        return;
    wbuf w = { 0 };
    encode(&w, p);
    ind_blob *blobs = malloc(sizeof *blobs * ((size_t)ncode + 1));
    if (!blobs)
        abort();
    blobs[0] = (ind_blob){ w.b, w.n };
    memcpy(blobs + 1, code, sizeof *code * (size_t)ncode);
    ind_dcache_put(key, keylen, blobs, ncode + 1);
    free(blobs);
    free(code);
    free(w.b);
}
