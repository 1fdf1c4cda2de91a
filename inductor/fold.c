/* fold.c — graph rewrites before lowering (called by smelt_compile on its
 * private copy of the graph).
 *
 * A convolution followed by a chain of per-output-channel affine ops (x*s,
 * x/s, x+t, x-t, t-x with s, t of shape [C] / [C,1,..] / scalars that do
 * not depend on the convolution: eval BatchNorm is (x - mean) * rsqrt(var +
 * eps) * weight + bias) becomes one convolution with weights w * S and bias
 * b * S + T, S and T computed in the graph from the chain's operands (a
 * few [C]-sized ops and one pass over the weights per call), so what
 * follows (ReLU, pooling) reads the convolution's result directly. Only
 * when every intermediate value has that one use and is not an output.
 * (A ReLU is not made a oneDNN post-op: oneDNN's ReLU turns NaN into 0,
 * torch.relu keeps it.)
 * The graph is rebuilt in order without the replaced nodes; everything else
 * is kept as it was (host calls included). Rounding differs from eager's
 * by the reassociation (products of the weights and S are rounded once).
 */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

#define MAX_CHAIN 16

typedef struct fold_op {
    uint8_t op;     /* ADD SUB MUL DIV */
    uint8_t rev;    /* SUB: t - x (the chain value is the second source) */
    int32_t v;      /* the other operand (old node id) */
} fold_op;

typedef struct fold {
    int32_t conv, end;   /* the convolution and the node it replaces */
    int nops;
    fold_op ops[MAX_CHAIN];
} fold;

typedef struct folder {
    const smelt_graph *g;
    int32_t *uses, *cons;     /* per node: uses (outputs count), last consumer */
    uint8_t *seen;            /* depends_on scratch */
    int32_t *stack;
} folder;

/* Whether node v depends on node c (reaches it through sources). */
static int depends_on(folder *F, int32_t v, int32_t c)
{
    int32_t n = 0;
    int found = 0;
    memset(F->seen, 0, (size_t)F->g->n);
    F->stack[n++] = v;
    while (n && !found) {
        int32_t x = F->stack[--n];
        if (x == c) {
            found = 1;
            break;
        }
        if (x < c || F->seen[x])
            continue;
        F->seen[x] = 1;
        const smelt_node *nd = &F->g->nodes[x];
        for (int k = 0; k < nd->nsrc; k++)
            F->stack[n++] = nd->src[k];
    }
    return found;
}

/* Whether v is constant per output channel of convolution c: a Python
 * scalar, or a float32 tensor whose dims (right-aligned to c's) are 1 but
 * for dim 1, which is 1 or c's channel count; and independent of c. */
static int per_channel(folder *F, int32_t v, int32_t c)
{
    const smelt_node *vn = &F->g->nodes[v], *cn = &F->g->nodes[c];
    if (vn->op != SMELT_OP_SCALAR) {
        if (vn->dtype != SMELT_F32 || vn->ndim > cn->ndim)
            return 0;
        for (int d = 0; d < vn->ndim; d++) {
            int cd = d + cn->ndim - vn->ndim;
            if (vn->shape[d] != 1 && !(cd == 1 && vn->shape[d] == cn->shape[1]))
                return 0;
        }
    }
    return !depends_on(F, v, c);
}

static int same_shape(const smelt_node *a, const smelt_node *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * a->ndim);
}

/* The affine chain after convolution c into *f; 1 if there is one to fold. */
static int find_chain(folder *F, int32_t c, fold *f)
{
    const smelt_graph *g = F->g;
    memset(f, 0, sizeof *f);
    f->conv = f->end = c;
    for (int32_t cur = c; F->uses[cur] == 1 && f->nops < MAX_CHAIN;) {
        int32_t u = F->cons[cur];
        const smelt_node *un = &g->nodes[u];
        if (un->dtype != SMELT_F32 || !same_shape(un, &g->nodes[c]))
            break;
        if ((un->op != SMELT_OP_ADD && un->op != SMELT_OP_SUB && un->op != SMELT_OP_MUL && un->op != SMELT_OP_DIV) ||
            un->src[0] == un->src[1])
            break;
        int rev = un->src[1] == cur;
        int32_t v = un->src[rev ? 0 : 1];
        if ((rev && un->op == SMELT_OP_DIV) || !per_channel(F, v, c))
            break;
        f->ops[f->nops++] = (fold_op){ .op = (uint8_t)un->op, .rev = (uint8_t)rev, .v = v };
        f->end = cur = u;
    }
    return f->end != c;
}

/* ---------- rebuilding ---------- */

typedef struct builder {
    smelt_graph *g;
    int failed;
} builder;

static int32_t add(builder *b, smelt_node *p)
{
    int32_t id = b->failed ? -1 : smelt_graph_add(b->g, p);
    b->failed |= id < 0;
    return id;
}

static int32_t op2(builder *b, smelt_op op, int32_t x, int32_t y)
{
    smelt_node p = { .op = op, .nsrc = 2, .src = { x, y } };
    return add(b, &p);
}

static int32_t full(builder *b, int64_t n, double v)
{
    smelt_node p = { .op = SMELT_OP_FULL, .dtype = SMELT_F32, .ndim = 1, .shape = { n } };
    p.a.scalar.f = v;
    return add(b, &p);
}

static int32_t reshape(builder *b, int32_t x, int ndim, const int64_t *shape)
{
    smelt_node p = { .op = SMELT_OP_RESHAPE, .nsrc = 1, .src = { x }, .ndim = (uint8_t)ndim };
    memcpy(p.shape, shape, sizeof(int64_t) * (size_t)ndim);
    return add(b, &p);
}

/* Operand v (new id) as a vector broadcasting over [O]: scalars as they
 * are, tensors reshaped to [O] or [1]. */
static int32_t as_vector(builder *b, int32_t v, int64_t O)
{
    const smelt_node *n = &b->g->nodes[v];
    if (n->op == SMELT_OP_SCALAR)
        return v;
    int64_t len = smelt_node_numel(n) == O ? O : 1;
    return reshape(b, v, 1, &len);
}

/* Emits fold f (sources mapped through map) and returns the new
 * convolution. */
static int32_t emit_fold(builder *b, const smelt_graph *g, const fold *f, const int32_t *map)
{
    const smelt_node *c = &g->nodes[f->conv];
    smelt_node p = *c;
    for (int k = 0; k < c->nsrc; k++)
        p.src[k] = map[c->src[k]];
    {
        int64_t O = c->shape[1];
        int32_t S = full(b, O, 1.0), T = full(b, O, 0.0);
        for (int i = 0; i < f->nops && !b->failed; i++) {
            const fold_op *o = &f->ops[i];
            int32_t v = as_vector(b, map[o->v], O);
            if (o->op == SMELT_OP_ADD) {
                T = op2(b, SMELT_OP_ADD, T, v);
            } else if (o->op == SMELT_OP_SUB && !o->rev) {
                T = op2(b, SMELT_OP_SUB, T, v);
            } else if (o->op == SMELT_OP_SUB) {   /* v - x */
                smelt_node neg = { .op = SMELT_OP_NEG, .nsrc = 1, .src = { S } };
                S = add(b, &neg);
                T = op2(b, SMELT_OP_SUB, v, T);
            } else {
                S = op2(b, (smelt_op)o->op, S, v);
                T = op2(b, (smelt_op)o->op, T, v);
            }
        }
        const smelt_node *w = &g->nodes[c->src[1]];
        int64_t ws[SMELT_MAX_DIMS];
        ws[0] = O;
        for (int d = 1; d < w->ndim; d++)
            ws[d] = 1;
        p.src[1] = op2(b, SMELT_OP_MUL, map[c->src[1]], reshape(b, S, w->ndim, ws));
        p.src[2] = c->nsrc == 3 ? op2(b, SMELT_OP_ADD, op2(b, SMELT_OP_MUL, map[c->src[2]], S), T) : T;
        p.nsrc = 3;
    }
    return add(b, &p);
}

/* Copies node i of g (sources mapped) into b. */
static int32_t copy_node(builder *b, const smelt_graph *g, int32_t i, const int32_t *map)
{
    const smelt_node *n = &g->nodes[i];
    if (n->op == SMELT_OP_INPUT) {
        int32_t id = smelt_graph_input(b->g, (smelt_dtype)n->dtype, n->ndim, n->shape, n->stride);
        b->failed |= id < 0;
        return id;
    }
    if (n->op == SMELT_OP_SCALAR) {
        int32_t id = smelt_graph_scalar(b->g, (smelt_dtype)n->dtype, n->a.scalar.f, n->a.scalar.i);
        b->failed |= id < 0;
        return id;
    }
    smelt_node p = smelt_node_proto(n);   /* a CLAMP's proto differs from the node */
    for (int k = 0; k < n->nsrc; k++)
        p.src[k] = map[n->src[k]];
    return add(b, &p);
}

/* Finds the folds of g into fs (at most one per convolution); their count. */
static int find_folds(const smelt_graph *g, fold *fs, uint8_t *skip)
{
    folder F = { .g = g };
    F.uses = calloc((size_t)g->n + 1, sizeof(int32_t));
    F.cons = calloc((size_t)g->n + 1, sizeof(int32_t));
    F.seen = calloc((size_t)g->n + 1, 1);
    F.stack = malloc(sizeof(int32_t) * ((size_t)g->n * SMELT_MAX_SRC + 1));
    if (!F.uses || !F.cons || !F.seen || !F.stack)
        abort();
    for (int32_t i = 0; i < g->n; i++)
        for (int k = 0; k < g->nodes[i].nsrc; k++) {
            F.uses[g->nodes[i].src[k]]++;
            F.cons[g->nodes[i].src[k]] = i;
        }
    for (int32_t o = 0; o < g->nout; o++)
        F.uses[g->outputs[o]] += 2;   /* an output is never folded away */
    int nf = 0;
    for (int32_t i = 0; i < g->n; i++)
        if (g->nodes[i].op == SMELT_OP_CONV && find_chain(&F, i, &fs[nf])) {
            for (int32_t x = fs[nf].conv; x != fs[nf].end; x = F.cons[x])
                skip[x] = 1;
            nf++;
        }
    free(F.uses);
    free(F.cons);
    free(F.seen);
    free(F.stack);
    return nf;
}

smelt_graph *ind_fold(smelt_graph *g, char *err, size_t errlen)
{
    int nconv = 0;
    for (int32_t i = 0; i < g->n; i++)
        nconv += g->nodes[i].op == SMELT_OP_CONV;
    if (!nconv)
        return g;
    fold *fs = calloc((size_t)nconv, sizeof(fold));
    uint8_t *skip = calloc((size_t)g->n + 1, 1);
    int32_t *map = malloc(sizeof(int32_t) * ((size_t)g->n + 1)), *end_of = malloc(sizeof(int32_t) * ((size_t)g->n + 1));
    if (!fs || !skip || !map || !end_of)
        abort();
    int nf = find_folds(g, fs, skip);
    smelt_graph *out = g;
    if (nf) {
        builder b = { .g = smelt_graph_new() };
        if (!b.g)
            abort();
        b.g->default_float = g->default_float;
        for (int32_t i = 0; i < g->n; i++)
            end_of[i] = -1, map[i] = -1;
        for (int k = 0; k < nf; k++)
            end_of[fs[k].end] = k;
        for (int32_t i = 0; i < g->n && !b.failed; i++)
            if (end_of[i] >= 0)
                map[i] = emit_fold(&b, g, &fs[end_of[i]], map);
            else if (!skip[i])
                map[i] = copy_node(&b, g, i, map);
        for (int32_t o = 0; o < g->nout && !b.failed; o++)
            b.failed |= smelt_graph_output(b.g, map[g->outputs[o]]) != 0;
        if (b.failed) {
            snprintf(err, errlen, "internal error: folding a convolution's epilogue: %s", b.g->err);
            smelt_graph_free(b.g);
            out = NULL;
        } else {
            out = b.g;
        }
    }
    free(fs);
    free(skip);
    free(map);
    free(end_of);
    return out;
}
