/* backward.c — splits a traced graph into forward and backward graphs
 * (autograd.h). The derivative rules are in rules.c; this file holds the
 * sweep, the value recomputation / saving decision and the builders the
 * rules use (adint.h).
 */
#include "adint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- backward graph builders ---------- */

int32_t ad_add(ad *A, smelt_node *p)
{
    if (A->failed)
        return -1;
    int32_t id = smelt_graph_add(A->b, p);
    A->failed |= id < 0;
    return id;
}

const smelt_node *ad_node(ad *A, int32_t id) { return &A->b->nodes[id]; }

int32_t ad_op1(ad *A, smelt_op op, int32_t x)
{
    smelt_node p = { .op = op, .nsrc = 1, .src = { x } };
    return x < 0 ? -1 : ad_add(A, &p);
}

int32_t ad_op2(ad *A, smelt_op op, int32_t x, int32_t y)
{
    smelt_node p = { .op = op, .nsrc = 2, .src = { x, y } };
    return x < 0 || y < 0 ? -1 : ad_add(A, &p);
}

int32_t ad_where(ad *A, int32_t c, int32_t x, int32_t y)
{
    smelt_node p = { .op = SMELT_OP_WHERE, .nsrc = 3, .src = { c, x, y } };
    return c < 0 || x < 0 || y < 0 ? -1 : ad_add(A, &p);
}

int32_t ad_k(ad *A, double v)
{
    if (A->failed)
        return -1;
    int32_t id = smelt_graph_scalar(A->b, SMELT_F64, v, 0);
    A->failed |= id < 0;
    return id;
}

int32_t ad_cast(ad *A, int32_t x, smelt_dtype dt)
{
    if (x < 0 || ad_node(A, x)->dtype == dt)
        return x;
    smelt_node p = { .op = SMELT_OP_CAST, .dtype = (uint8_t)dt, .nsrc = 1, .src = { x } };
    return ad_add(A, &p);
}

int32_t ad_shaped(ad *A, smelt_op op, int32_t x, int ndim, const int64_t *shape)
{
    if (x < 0)
        return -1;
    const smelt_node *n = ad_node(A, x);
    if (n->ndim == ndim && !memcmp(n->shape, shape, sizeof *shape * (size_t)ndim))
        return x;
    smelt_node p = { .op = op, .nsrc = 1, .src = { x }, .ndim = (uint8_t)ndim };
    memcpy(p.shape, shape, sizeof *shape * (size_t)ndim);
    return ad_add(A, &p);
}

int32_t ad_red(ad *A, smelt_op op, int32_t x, uint32_t dims, int keepdim)
{
    smelt_node p = { .op = op, .nsrc = 1, .src = { x } };
    p.a.red.dims = dims;
    p.a.red.keepdim = (uint8_t)keepdim;
    return x < 0 ? -1 : ad_add(A, &p);
}

int32_t ad_full(ad *A, smelt_dtype dt, int ndim, const int64_t *shape, double v)
{
    smelt_node p = { .op = SMELT_OP_FULL, .dtype = (uint8_t)dt, .ndim = (uint8_t)ndim };
    memcpy(p.shape, shape, sizeof *shape * (size_t)ndim);
    if (smelt_dtype_is_float(dt))
        p.a.scalar.f = v;
    else
        p.a.scalar.i = (int64_t)v;
    return ad_add(A, &p);
}

int32_t ad_zeros_like_fwd(ad *A, int32_t i)
{
    const smelt_node *n = &A->g->nodes[i];
    return ad_full(A, (smelt_dtype)n->dtype, n->ndim, n->shape, 0.0);
}

int32_t ad_permute(ad *A, int32_t x, const int8_t *perm)
{
    smelt_node p = { .op = SMELT_OP_PERMUTE, .nsrc = 1, .src = { x } };
    memcpy(p.a.perm.perm, perm, SMELT_MAX_DIMS);
    return x < 0 ? -1 : ad_add(A, &p);
}

/* x (of a broadcast result's shape) summed down to forward node s's shape:
 * leading dims and dims where s has size 1 */
int32_t ad_sum_to(ad *A, int32_t x, int32_t s)
{
    if (x < 0)
        return -1;
    const smelt_node *t = &A->g->nodes[s], *n = ad_node(A, x);
    int lead = n->ndim - t->ndim;
    uint32_t dims = 0;
    for (int d = 0; d < n->ndim; d++)
        if (d < lead || (t->shape[d - lead] == 1 && n->shape[d] != 1))
            dims |= 1u << d;
    if (dims)
        x = ad_red(A, SMELT_OP_SUM, x, dims, 1);
    return ad_shaped(A, SMELT_OP_RESHAPE, x, t->ndim, t->shape);
}

int32_t ad_host_call(ad *A, ad_call_kind kind, int nsrc, const int32_t *src, int nout, const int32_t *like,
                     const int64_t (*shapes)[SMELT_MAX_DIMS], const int *ndims, int nparam, const int64_t *param)
{
    if (A->failed || nparam > AD_CALL_MAX_PARAMS)
        return -1;
    for (int k = 0; k < nsrc; k++)
        if (src[k] < 0)
            return -1;
    ad_call *c = realloc(A->calls, sizeof *c * ((size_t)A->ncalls + 1));
    if (!c)
        abort();
    A->calls = c;
    ad_call *me = &A->calls[A->ncalls];
    *me = (ad_call){ .kind = (uint8_t)kind, .nparam = nparam };
    memcpy(me->param, param, sizeof *param * (size_t)nparam);
    uint64_t key = 0xcbf29ce484222325ull;   /* FNV-1a over "smelt.autograd", the kind and params */
    for (const char *p = "smelt.autograd"; *p; p++)
        key = (key ^ (uint8_t)*p) * 0x100000001b3ull;
    key = (key ^ kind) * 0x100000001b3ull;
    for (int k = 0; k < nparam; k++)
        key = (key ^ (uint64_t)param[k]) * 0x100000001b3ull;
    uint8_t dt[SMELT_MAX_SRC];
    int nd[SMELT_MAX_SRC];
    int64_t sh[SMELT_MAX_SRC][SMELT_MAX_DIMS];
    for (int k = 0; k < nout; k++) {
        const smelt_node *l = like[k] >= 0 ? &A->g->nodes[like[k]] : NULL;
        dt[k] = l ? l->dtype : ad_node(A, src[0])->dtype;
        nd[k] = l ? l->ndim : ndims[k];
        memcpy(sh[k], l ? l->shape : shapes[k], sizeof sh[k]);
    }
    int32_t id = smelt_graph_call(A->b, A->ncalls, key, nsrc, src, nout, dt, nd, (const int64_t(*)[SMELT_MAX_DIMS])sh);
    A->failed |= id < 0;
    A->ncalls++;
    return id;
}

/* ---------- forward values in the backward graph ---------- */

static int saved_kind(const smelt_node *n)
{
    smelt_op_kind k = smelt_op_kind_of((smelt_op)n->op);
    return k == SMELT_KIND_EXTERN || k == SMELT_KIND_REDUCTION || k == SMELT_KIND_GATHER;
}

static int32_t new_bin(ad *A, ad_bin_kind kind, int32_t index, const smelt_node *like, const int64_t *strides)
{
    if (A->failed)
        return -1;
    ad_bin *bin = realloc(A->bin, sizeof *bin * ((size_t)A->nbin + 1));
    if (!bin)
        abort();
    A->bin = bin;
    A->bin[A->nbin++] = (ad_bin){ .kind = (uint8_t)kind, .index = index };
    int32_t id = smelt_graph_input(A->b, (smelt_dtype)like->dtype, like->ndim, like->shape, strides);
    A->failed |= id < 0;
    return id;
}

/* The value of forward node i in the backward graph: an input for forward
 * inputs and saved values, a copy (sources mapped) for the rest. */
int32_t ad_val(ad *A, int32_t i)
{
    if (A->val[i] >= 0 || A->failed)
        return A->failed ? -1 : A->val[i];
    const smelt_node *n = &A->g->nodes[i];
    int32_t id;
    if (n->op == SMELT_OP_INPUT) {
        id = new_bin(A, AD_FWD_INPUT, n->a.input.index, n, n->stride);
    } else if (n->op == SMELT_OP_SCALAR) {
        id = smelt_graph_scalar(A->b, (smelt_dtype)n->dtype, n->a.scalar.f, n->a.scalar.i);
        A->failed |= id < 0;
    } else if (saved_kind(n) && !A->tile[i]) {
        id = new_bin(A, AD_SAVED, A->g->nout + A->nsaved++, n, NULL);
        A->saved_node = realloc(A->saved_node, sizeof *A->saved_node * (size_t)A->nsaved);
        if (!A->saved_node)
            abort();
        A->saved_node[A->nsaved - 1] = i;
        A->saved_bytes += smelt_node_numel(n) * (int64_t)smelt_dtype_size((smelt_dtype)n->dtype);
    } else {
        smelt_node p = smelt_node_proto(n);
        for (int k = 0; k < n->nsrc; k++)
            if ((p.src[k] = ad_val(A, n->src[k])) < 0)
                return -1;
        id = ad_add(A, &p);
        A->nrecomputed++;
    }
    return A->val[i] = id;
}

/* ---------- the sweep ---------- */

/* Adds contribution c (in the node's dtype and broadcast shape) to the
 * gradient of forward node i's source k, if that source needs one. */
void ad_give(ad *A, int32_t i, int k, int32_t c)
{
    int32_t s = A->g->nodes[i].src[k];
    if (!A->req[s] || c < 0)
        return;
    c = ad_sum_to(A, ad_cast(A, c, (smelt_dtype)A->g->nodes[s].dtype), s);
    A->grad[s] = A->grad[s] < 0 ? c : ad_op2(A, SMELT_OP_ADD, A->grad[s], c);
}

/* b without the nodes no output reads (a rule's contribution that a later
 * rule replaced, say: an unused matmul would still run). Inputs stay (the
 * caller passes every one) and so do host calls (their ids are dense).
 * NULL with err on a builder error. */
static smelt_graph *live_part(const smelt_graph *b, char *err, size_t errlen)
{
    int32_t n = b->n;
    uint8_t *live = calloc((size_t)n + 1, 1);
    int32_t *map = malloc(sizeof *map * ((size_t)n + 1));
    smelt_graph *c = smelt_graph_new();
    if (!live || !map || !c)
        abort();
    c->default_float = b->default_float;
    for (int32_t o = 0; o < b->nout; o++)
        live[b->outputs[o]] = 1;
    for (int32_t i = n - 1; i >= 0; i--) {
        const smelt_node *nd = &b->nodes[i];
        live[i] |= nd->op == SMELT_OP_INPUT || nd->op == SMELT_OP_CALL;
        if (live[i])
            for (int k = 0; k < nd->nsrc; k++)
                live[nd->src[k]] = 1;
    }
    int ok = 1;
    for (int32_t i = 0; i < n && ok; i++) {
        const smelt_node *nd = &b->nodes[i];
        map[i] = -1;
        if (!live[i])
            continue;
        if (nd->op == SMELT_OP_INPUT) {
            map[i] = smelt_graph_input(c, (smelt_dtype)nd->dtype, nd->ndim, nd->shape, nd->stride);
        } else if (nd->op == SMELT_OP_SCALAR) {
            map[i] = smelt_graph_scalar(c, (smelt_dtype)nd->dtype, nd->a.scalar.f, nd->a.scalar.i);
        } else if (nd->op == SMELT_OP_CALL) {
            if (nd->a.call.out == 0) {
                int nout = nd->a.call.nout, nds[SMELT_MAX_SRC];
                int32_t src[SMELT_MAX_SRC];
                uint8_t dts[SMELT_MAX_SRC];
                int64_t shapes[SMELT_MAX_SRC][SMELT_MAX_DIMS];
                for (int k = 0; k < nd->nsrc; k++)
                    src[k] = map[nd->src[k]];
                for (int k = 0; k < nout; k++) {
                    dts[k] = b->nodes[i + k].dtype;
                    nds[k] = b->nodes[i + k].ndim;
                    memcpy(shapes[k], b->nodes[i + k].shape, sizeof shapes[k]);
                }
                map[i] = smelt_graph_call(c, nd->a.call.id, nd->a.call.key, nd->nsrc, src, nout, dts, nds,
                                          (const int64_t(*)[SMELT_MAX_DIMS])shapes);
            } else {
                map[i] = map[i - 1] < 0 ? -1 : map[i - 1] + 1;
            }
        } else {
            smelt_node p = smelt_node_proto(nd);
            for (int k = 0; k < nd->nsrc; k++)
                p.src[k] = map[nd->src[k]];
            map[i] = smelt_graph_add(c, &p);
        }
        ok = map[i] >= 0;
    }
    for (int32_t o = 0; o < b->nout && ok; o++)
        ok = smelt_graph_output(c, map[b->outputs[o]]) == 0;
    if (!ok) {
        snprintf(err, errlen, "compacting the backward graph: %s", c->err);
        smelt_graph_free(c);
        c = NULL;
    }
    free(live);
    free(map);
    return c;
}

int ad_split_graph(const smelt_graph *g, const uint8_t *requires_grad, int32_t nwriteback, ad_split *s, char *err,
                   size_t errlen)
{
    memset(s, 0, sizeof *s);
    ad A = { .g = g };
    int32_t n = g->n, rc = -1;
    A.val = malloc(sizeof *A.val * ((size_t)n + 1));
    A.grad = malloc(sizeof *A.grad * ((size_t)n + 1));
    A.req = calloc((size_t)n + 1, 1);
    A.tile = calloc((size_t)n + 1, 1);
    A.b = smelt_graph_new();
    if (!A.val || !A.grad || !A.req || !A.tile || !A.b)
        abort();
    for (int32_t i = 0; i < n; i++) {
        const smelt_node *nd = &g->nodes[i];
        A.tile[i] = nd->op == SMELT_OP_FLEX_ARG;
        for (int k = 0; k < nd->nsrc && nd->op != SMELT_OP_FLEX; k++)
            A.tile[i] |= A.tile[nd->src[k]];
    }
    A.b->default_float = g->default_float;
    for (int32_t i = 0; i < n; i++) {
        const smelt_node *nd = &g->nodes[i];
        A.val[i] = A.grad[i] = -1;
        if (!smelt_dtype_is_float((smelt_dtype)nd->dtype))
            continue;
        if (nd->op == SMELT_OP_INPUT)
            A.req[i] = requires_grad[nd->a.input.index] != 0;
        else
            for (int k = 0; k < nd->nsrc; k++)
                A.req[i] |= A.req[nd->src[k]];
    }
    /* the gradients flowing in: one input per differentiable output (not
     * the ones written back into inputs) */
    s->nout_user = g->nout;
    s->out_diff = calloc((size_t)g->nout + 1, 1);
    if (!s->out_diff)
        abort();
    for (int32_t o = 0; o < g->nout - nwriteback; o++) {
        int32_t i = g->outputs[o];
        if (!A.req[i])
            continue;
        s->out_diff[o] = 1;
        s->ndiff++;
        int32_t gi = new_bin(&A, AD_GRAD, o, &g->nodes[i], NULL);
        A.grad[i] = A.grad[i] < 0 ? gi : ad_op2(&A, SMELT_OP_ADD, A.grad[i], gi);
    }
    for (int32_t i = n - 1; i >= 0 && !A.failed && !A.unsupported; i--) {
        const smelt_node *nd = &g->nodes[i];
        if (A.grad[i] < 0 || nd->op == SMELT_OP_INPUT)
            continue;
        int any = 0;
        for (int k = 0; k < nd->nsrc; k++)
            any |= A.req[nd->src[k]];
        if (!any)
            continue;
        ad_rule rule = ad_rule_of((smelt_op)nd->op);
        if (!rule || rule(&A, i, A.grad[i]) > 0) {
            if (!A.unsupported)
                A.unsupported = smelt_op_name((smelt_op)nd->op);
        }
    }
    if (A.unsupported) {
        snprintf(err, errlen, "no derivative rule for %s on a path that requires grad", A.unsupported);
        rc = 1;
        goto done;
    }
    /* the gradients going out */
    for (int32_t i = 0; i < n && !A.failed; i++) {
        const smelt_node *nd = &g->nodes[i];
        if (nd->op != SMELT_OP_INPUT || !A.req[i])
            continue;
        int32_t gi = A.grad[i] >= 0 ? A.grad[i] : ad_zeros_like_fwd(&A, i);
        /* an output that is an input or a view of one must not alias it */
        if (gi >= 0 && A.b->nodes[gi].op == SMELT_OP_INPUT)
            gi = ad_op2(&A, SMELT_OP_ADD, gi, ad_k(&A, 0.0));
        if (gi < 0 || smelt_graph_output(A.b, gi)) {
            A.failed = 1;
            break;
        }
        s->grad_in = realloc(s->grad_in, sizeof *s->grad_in * ((size_t)s->ngrad_in + 1));
        if (!s->grad_in)
            abort();
        s->grad_in[s->ngrad_in++] = nd->a.input.index;
    }
    if (A.failed) {
        snprintf(err, errlen, "building the backward graph: %s", A.b->err);
        goto done;
    }
    /* which incoming gradients reach each input, through the forward
     * graph's differentiable nodes (as autograd's graph: a path through
     * floor still makes a zero gradient, no path makes None) */
    uint64_t *uses = calloc((size_t)n + 1, sizeof *uses);
    s->grad_in_uses = calloc((size_t)s->ngrad_in + 1, sizeof *s->grad_in_uses);
    if (!uses || !s->grad_in_uses)
        abort();
    for (int32_t o = 0, j = 0; o < g->nout; o++)
        if (s->out_diff[o]) {
            uses[g->outputs[o]] |= 1ull << (j < 63 ? j : 63);
            j++;
        }
    for (int32_t i = n - 1; i >= 0; i--)
        for (int k = 0; k < g->nodes[i].nsrc; k++)
            if (A.req[g->nodes[i].src[k]])
                uses[g->nodes[i].src[k]] |= uses[i];
    for (int32_t i = 0, k = 0; i < n; i++)
        if (g->nodes[i].op == SMELT_OP_INPUT && A.req[i])
            s->grad_in_uses[k++] = uses[i];
    free(uses);
    /* the forward graph: g, then the saved values as outputs */
    if (!(s->fwd = smelt_graph_copy(g)))
        abort();
    for (int32_t k = 0; k < A.nsaved; k++)
        if (smelt_graph_output(s->fwd, A.saved_node[k])) {
            snprintf(err, errlen, "the forward graph's outputs: %s", s->fwd->err);
            goto done;
        }
    if (!(s->bwd = live_part(A.b, err, errlen)))
        goto done;
    s->nsaved = A.nsaved;
    s->nbin = A.nbin;
    s->bin = A.bin;
    A.bin = NULL;
    s->ncalls = A.ncalls;
    s->calls = A.calls;
    A.calls = NULL;
    s->saved_bytes = A.saved_bytes;
    s->nrecomputed = A.nrecomputed;
    rc = 0;
done:
    if (rc)
        ad_split_free(s);
    smelt_graph_free(A.b);
    free(A.bin);
    free(A.saved_node);
    free(A.calls);
    free(A.val);
    free(A.grad);
    free(A.req);
    free(A.tile);
    return rc;
}

void ad_split_free(ad_split *s)
{
    smelt_graph_free(s->fwd);
    smelt_graph_free(s->bwd);
    free(s->bin);
    free(s->grad_in);
    free(s->grad_in_uses);
    free(s->out_diff);
    free(s->calls);
    memset(s, 0, sizeof *s);
}
