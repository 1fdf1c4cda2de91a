/* spirv.c — the SPIR-V module writer (spirv.h). */
#include "spirv.h"

#include <stdlib.h>
#include <string.h>

#define SPV_MAGIC 0x07230203u
#define SPV_VERSION 0x00010200u    /* SPIR-V 1.2: OpenCL 2.2's, taken by Level Zero and OpenCL 2.1+ */
#define SPV_GENERATOR 0u           /* no registered generator number */

static void grow(spv_buf *b, size_t n)
{
    if (b->n + n <= b->cap)
        return;
    b->cap = (b->cap + n) * 2;
    if (!(b->w = realloc(b->w, b->cap * sizeof *b->w)))
        abort();
}

void spv_ins(spv_buf *b, uint32_t op, const uint32_t *ops, size_t n)
{
    grow(b, n + 1);
    b->w[b->n++] = (uint32_t)(n + 1) << 16 | op;
    memcpy(b->w + b->n, ops, n * sizeof *ops);
    b->n += n;
}

void spv_append(spv_buf *dst, const spv_buf *src)
{
    grow(dst, src->n);
    if (src->n)
        memcpy(dst->w + dst->n, src->w, src->n * sizeof *src->w);
    dst->n += src->n;
}

void spv_ins_str(spv_buf *b, uint32_t op, const uint32_t *ops, size_t n, const char *s)
{
    size_t len = strlen(s), sw = len / 4 + 1;
    grow(b, n + sw + 1);
    b->w[b->n++] = (uint32_t)(n + sw + 1) << 16 | op;
    memcpy(b->w + b->n, ops, n * sizeof *ops);
    b->n += n;
    memset(b->w + b->n, 0, sw * 4);
    memcpy(b->w + b->n, s, len);
    b->n += sw;
}

void spv_init(spv_mod *m)
{
    memset(m, 0, sizeof *m);
    m->next_id = 1;
    m->in.cap = 256;
    m->in.keys = malloc(m->in.cap * sizeof *m->in.keys);
    m->in.ids = calloc(m->in.cap, sizeof *m->in.ids);
    if (!m->in.keys || !m->in.ids)
        abort();
    uint32_t caps[] = { SpvCapAddresses, SpvCapKernel, SpvCapInt64 };
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
        spv_ins(&m->caps, SpvOpCapability, &caps[i], 1);
    m->ocl = spv_id(m);
    spv_ins_str(&m->ext, SpvOpExtInstImport, &m->ocl, 1, "OpenCL.std");
    spv_ins(&m->memmodel, SpvOpMemoryModel, (uint32_t[]){ 2, 2 }, 2);   /* Physical64, OpenCL */
}

void spv_free(spv_mod *m)
{
    spv_buf *bs[] = { &m->caps, &m->ext, &m->memmodel, &m->entries, &m->modes, &m->names,
                      &m->decos, &m->globals, &m->funcs, &m->in.pool };
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        free(bs[i]->w);
    free(m->in.keys);
    free(m->in.ids);
    free(m->ty);
    memset(m, 0, sizeof *m);
}

uint32_t spv_id(spv_mod *m) { return m->next_id++; }

void spv_set_type(spv_mod *m, uint32_t id, uint32_t t)
{
    if (id >= m->tycap) {
        size_t cap = (id + 1) * 2;
        if (!(m->ty = realloc(m->ty, cap * sizeof *m->ty)))
            abort();
        memset(m->ty + m->tycap, 0, (cap - m->tycap) * sizeof *m->ty);
        m->tycap = cap;
    }
    m->ty[id] = t;
}

uint32_t spv_type_of(const spv_mod *m, uint32_t id) { return id < m->tycap ? m->ty[id] : 0; }

/* ---------- interning ---------- */

static uint64_t hash_words(const uint32_t *w, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ w[i]) * 1099511628211ull;
    return h;
}

static void rehash(spv_intern *in)
{
    size_t cap = in->cap * 2;
    uint32_t *keys = malloc(cap * sizeof *keys), *ids = calloc(cap, sizeof *ids);
    if (!keys || !ids)
        abort();
    for (size_t i = 0; i < in->cap; i++) {
        if (!in->ids[i])
            continue;
        const uint32_t *k = in->pool.w + in->keys[i];
        size_t j = hash_words(k, k[0] + 1) & (cap - 1);
        while (ids[j])
            j = (j + 1) & (cap - 1);
        keys[j] = in->keys[i], ids[j] = in->ids[i];
    }
    free(in->keys), free(in->ids);
    in->keys = keys, in->ids = ids, in->cap = cap;
}

/* The id of the type/constant instruction (op, operands ops[0..n)) with
 * its result id written at operand position `at` (0: no result type before
 * it; 1: after a result type); emitted into globals on first use. */
static uint32_t intern(spv_mod *m, uint32_t op, const uint32_t *ops, size_t n, size_t at)
{
    spv_intern *in = &m->in;
    uint32_t small[2][20], *key = small[0], *full = small[1];
    if (n + 2 > 20 && (!(key = malloc((n + 2) * sizeof *key)) || !(full = malloc((n + 2) * sizeof *full))))
        abort();
    key[0] = (uint32_t)n + 1, key[1] = op;
    memcpy(key + 2, ops, n * sizeof *ops);
    size_t j = hash_words(key, n + 2) & (in->cap - 1);
    for (; in->ids[j]; j = (j + 1) & (in->cap - 1)) {
        const uint32_t *k = in->pool.w + in->keys[j];
        if (k[0] == key[0] && !memcmp(k + 1, key + 1, (n + 1) * sizeof *key)) {
            if (key != small[0])
                free(key), free(full);
            return in->ids[j];
        }
    }
    uint32_t id = spv_id(m);
    memcpy(full, ops, at * sizeof *ops);
    full[at] = id;
    memcpy(full + at + 1, ops + at, (n - at) * sizeof *ops);
    spv_ins(&m->globals, op, full, n + 1);
    in->keys[j] = (uint32_t)in->pool.n;
    grow(&in->pool, n + 2);
    memcpy(in->pool.w + in->pool.n, key, (n + 2) * sizeof *key);
    in->pool.n += n + 2;
    in->ids[j] = id;
    if (at == 1)
        spv_set_type(m, id, ops[0]);
    if (key != small[0])
        free(key), free(full);
    if (++in->n * 2 > in->cap)
        rehash(in);
    return id;
}

/* ---------- types and constants ---------- */

uint32_t spv_t_void(spv_mod *m) { return intern(m, SpvOpTypeVoid, NULL, 0, 0); }
uint32_t spv_t_bool(spv_mod *m) { return intern(m, SpvOpTypeBool, NULL, 0, 0); }

uint32_t spv_t_int(spv_mod *m, int bits)
{
    if (bits == 16)
        m->used_caps |= 4;
    if (bits == 8)
        m->used_caps |= 8;
    return intern(m, SpvOpTypeInt, (uint32_t[]){ (uint32_t)bits, 0 }, 2, 0);
}

uint32_t spv_t_float(spv_mod *m, int bits)
{
    if (bits == 16)
        m->used_caps |= 1;
    if (bits == 64)
        m->used_caps |= 2;
    return intern(m, SpvOpTypeFloat, (uint32_t[]){ (uint32_t)bits }, 1, 0);
}

uint32_t spv_t_vec(spv_mod *m, uint32_t elem, int n)
{
    return intern(m, SpvOpTypeVector, (uint32_t[]){ elem, (uint32_t)n }, 2, 0);
}

uint32_t spv_t_ptr(spv_mod *m, uint32_t storage, uint32_t elem)
{
    return intern(m, SpvOpTypePointer, (uint32_t[]){ storage, elem }, 2, 0);
}

uint32_t spv_t_array(spv_mod *m, uint32_t elem, uint32_t len)
{
    uint32_t c = spv_c_int(m, spv_t_int(m, 32), 32, len);
    return intern(m, SpvOpTypeArray, (uint32_t[]){ elem, c }, 2, 0);
}

uint32_t spv_t_fn(spv_mod *m, uint32_t ret, const uint32_t *params, int n)
{
    uint32_t *ops = malloc(((size_t)n + 1) * sizeof *ops);
    if (!ops)
        abort();
    ops[0] = ret;
    memcpy(ops + 1, params, (size_t)n * sizeof *params);
    uint32_t id = intern(m, SpvOpTypeFunction, ops, (size_t)n + 1, 0);
    free(ops);
    return id;
}

uint32_t spv_c_int(spv_mod *m, uint32_t t, int bits, int64_t v)
{
    uint64_t u = (uint64_t)v;
    if (bits < 64)
        u &= (1ull << bits) - 1;
    if (bits == 64)
        return intern(m, SpvOpConstant, (uint32_t[]){ t, (uint32_t)u, (uint32_t)(u >> 32) }, 3, 1);
    return intern(m, SpvOpConstant, (uint32_t[]){ t, (uint32_t)u }, 2, 1);
}

uint32_t spv_c_float(spv_mod *m, uint32_t t, int bits, double v)
{
    if (bits == 64) {
        uint64_t u;
        memcpy(&u, &v, 8);
        return intern(m, SpvOpConstant, (uint32_t[]){ t, (uint32_t)u, (uint32_t)(u >> 32) }, 3, 1);
    }
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return intern(m, SpvOpConstant, (uint32_t[]){ t, u }, 2, 1);
}

uint32_t spv_c_bool(spv_mod *m, int v)
{
    return intern(m, v ? SpvOpConstantTrue : SpvOpConstantFalse, (uint32_t[]){ spv_t_bool(m) }, 1, 1);
}

uint32_t spv_global(spv_mod *m, uint32_t ptr, uint32_t sc)
{
    uint32_t id = spv_id(m);
    spv_ins(&m->globals, SpvOpVariable, (uint32_t[]){ ptr, id, sc }, 3);
    return id;
}

void spv_decorate(spv_mod *m, uint32_t target, uint32_t dec, const uint32_t *lits, int n)
{
    uint32_t ops[8] = { target, dec };
    memcpy(ops + 2, lits, (size_t)n * sizeof *lits);
    spv_ins(&m->decos, SpvOpDecorate, ops, (size_t)n + 2);
}

void spv_name(spv_mod *m, uint32_t target, const char *name)
{
    spv_ins_str(&m->names, SpvOpName, &target, 1, name);
}

uint32_t *spv_finish(spv_mod *m, size_t *n)
{
    static const uint32_t extra[] = { SpvCapFloat16Buffer, SpvCapFloat64, SpvCapInt16, SpvCapInt8 };
    for (int i = 0; i < 4; i++)
        if (m->used_caps >> i & 1)
            spv_ins(&m->caps, SpvOpCapability, &extra[i], 1);
    const spv_buf *bs[] = { &m->caps, &m->ext, &m->memmodel, &m->entries, &m->modes, &m->names,
                            &m->decos, &m->globals, &m->funcs };
    size_t total = 5;
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        total += bs[i]->n;
    uint32_t *w = malloc(total * sizeof *w);
    if (!w)
        return NULL;
    uint32_t head[5] = { SPV_MAGIC, SPV_VERSION, SPV_GENERATOR, m->next_id, 0 };
    memcpy(w, head, sizeof head);
    size_t at = 5;
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) {
        if (bs[i]->n)
            memcpy(w + at, bs[i]->w, bs[i]->n * sizeof *w);
        at += bs[i]->n;
    }
    *n = total;
    return w;
}
