/* flex.c — torch.nn.attention.flex_attention and create_block_mask in a trace.
 *
 * flex_attention(q, k, v, score_mod, block_mask, ...) becomes one FLEX
 * node. The score function is traced once, here, over stand-ins for its
 * arguments (FLEX_ARG nodes: the score [B,H,L,S], b [B,1,1,1], h
 * [1,H,1,1], q_idx [1,1,L,1], kv_idx [1,1,1,S]), so that its body becomes
 * a broadcast pointwise expression (with gathers from the tensors it
 * captures) that the attention kernel evaluates tile by tile; the mask
 * function the same way. The expression's derivative in the score is
 * built here too (forward mode over the few ops a score function uses),
 * for the fused backward.
 *
 * What the fused form cannot take runs as the explicit decomposition —
 * scores materialised, the functions applied to real index tensors,
 * softmax, matmul — which smelt's autograd differentiates like any
 * graph: captured tensors that require grad (a learned bias table),
 * dtypes other than float32, CUDA graphs, and bodies with ops other than
 * pointwise ones, gathers and broadcasting views.
 *
 * A block mask made in the trace by create_block_mask is a
 * smelt._flex._TracedBlockMask (its mask function and sizes): the kernel
 * classifies tiles by the mask function itself. A BlockMask from outside
 * gives its block tables to the kernel (empty blocks skipped, the mask
 * applied on partial ones only).
 */
#include "tstate.h"

#include <math.h>
#include <string.h>

static PyObject *flex_module, *noop_mask_fn, *identity_fn, *traced_mask_cls;

int flex_init(void)
{
    flex_module = PyImport_ImportModule("torch.nn.attention.flex_attention");
    if (!flex_module) {   /* an older torch: nothing to map */
        PyErr_Clear();
        return 0;
    }
    noop_mask_fn = PyObject_GetAttrString(flex_module, "noop_mask");
    identity_fn = PyObject_GetAttrString(flex_module, "_identity");
    PyErr_Clear();
    return 0;
}

static PyObject *call_mod_fn;

/* smelt._flex's _TracedBlockMask and _call_mod, imported on first use
 * (smelt's Python package imports the extension first). */
static PyObject *traced_cls(void)
{
    if (!traced_mask_cls) {
        PyObject *m = PyImport_ImportModule("smelt._flex");
        traced_mask_cls = m ? PyObject_GetAttrString(m, "_TracedBlockMask") : NULL;
        call_mod_fn = m ? PyObject_GetAttrString(m, "_call_mod") : NULL;
        Py_XDECREF(m);
        PyErr_Clear();
    }
    return traced_mask_cls;
}

static int fx_none(tracer *T, int32_t v) { return v < 0 || (T->vals[v].kind == V_OBJ && T->vals[v].obj == Py_None); }

static const smelt_node *nd(tracer *T, int32_t n) { return &T->g->nodes[n]; }

/* ---------- graph nodes by id ---------- */

static int32_t g_op(tracer *T, smelt_op op, int32_t a, int32_t b, int32_t c)
{
    smelt_node p = { .op = op, .nsrc = (uint8_t)(c >= 0 ? 3 : b >= 0 ? 2 : 1), .src = { a, b, c } };
    return a < 0 || (p.nsrc > 1 && b < 0) ? -1 : tr_node_add(T, &p);
}

static int32_t g_full(tracer *T, double v)
{
    smelt_node p = { .op = SMELT_OP_FULL, .dtype = SMELT_F32, .ndim = 4, .shape = { 1, 1, 1, 1 } };
    p.a.scalar.f = v;
    return tr_node_add(T, &p);
}

static int32_t g_cast(tracer *T, int32_t x, smelt_dtype dt)
{
    if (x < 0 || nd(T, x)->dtype == dt)
        return x;
    smelt_node p = { .op = SMELT_OP_CAST, .dtype = dt, .nsrc = 1, .src = { x } };
    return tr_node_add(T, &p);
}

/* x broadcast to 4-d `shape` (leading dims added). */
static int32_t g_expand(tracer *T, int32_t x, const int64_t *shape)
{
    if (x < 0)
        return -1;
    const smelt_node *n = nd(T, x);
    if (n->ndim == 4 && !memcmp(n->shape, shape, sizeof(int64_t) * 4))
        return x;
    if (n->ndim > 4)
        return tr_break(T, "flex_attention: a score function's value of rank %d", n->ndim);
    if (n->ndim < 4) {
        smelt_node r = { .op = SMELT_OP_RESHAPE, .nsrc = 1, .src = { x }, .ndim = 4 };
        for (int d = 0; d < 4; d++)
            r.shape[d] = d < 4 - n->ndim ? 1 : n->shape[d - (4 - n->ndim)];
        if ((x = tr_node_add(T, &r)) < 0)
            return -1;
    }
    smelt_node e = { .op = SMELT_OP_EXPAND, .nsrc = 1, .src = { x }, .ndim = 4 };
    memcpy(e.shape, shape, sizeof(int64_t) * 4);
    return tr_node_add(T, &e);
}

/* A score or mask function's result (a tensor or a Python number) as a
 * node of dtype dt broadcast to [B,H,L,S]. */
static int32_t result_node(tracer *T, int32_t r, smelt_dtype dt, const int64_t *full)
{
    int32_t n;
    if (T->vals[r].kind == V_TENSOR) {
        n = T->vals[r].node;
    } else {
        PyObject *o = T->vals[r].kind == V_OBJ ? T->vals[r].obj : NULL;
        if (!o || !(PyFloat_Check(o) || PyLong_Check(o)))
            return tr_break(T, "flex_attention: a score or mask function returned a %s",
                            o ? Py_TYPE(o)->tp_name : "non-tensor");
        double v = PyFloat_AsDouble(o);
        if (v == -1 && PyErr_Occurred())
            return -1;
        n = g_full(T, v);
    }
    return g_expand(T, g_cast(T, n, dt), full);
}

/* ---------- what the fused form takes ---------- */

typedef struct flex_scan {
    int32_t first;         /* the first stand-in's node: everything the functions made is past it */
    uint8_t *dep;          /* per node past first: bit 1 depends on the score, bit 2 on an index */
    int32_t *dval;         /* per node past first: its derivative in the score (-1 zero, -2 not built) */
} flex_scan;

static uint8_t dep_of(const flex_scan *F, int32_t n) { return n >= F->first ? F->dep[n - F->first] : 0; }

/* Whether the nodes from `first` on that the fused kernel would evaluate
 * per tile are all ones it can: pointwise ops, gathers, broadcasts and
 * reshapes (advanced indexing flattens its indices for a gather and shapes
 * the result back: the round trip keeps each point's coordinates, which
 * is what the kernel needs; a score function that reshapes its index
 * arguments otherwise is not one torch's scalar-argument semantics has
 * either); and what they read from outside
 * is a single element, or the table of a gather (read at computed
 * positions along one dim, 1 along every other). Fills F->dep. */
static int fusable(tracer *T, flex_scan *F, char *why, size_t n)
{
    for (int32_t i = F->first; i < T->g->n; i++) {
        const smelt_node *x = nd(T, i);
        uint8_t d = x->op == SMELT_OP_FLEX_ARG ? (x->a.flex.role ? 2 : 1) : 0;
        for (int k = 0; k < x->nsrc; k++)
            d |= dep_of(F, x->src[k]);
        F->dep[i - F->first] = d;
        if (!d || x->op == SMELT_OP_FLEX_ARG)
            continue;
        smelt_op_kind kind = smelt_op_kind_of((smelt_op)x->op);
        int ok = kind == SMELT_KIND_UNARY || kind == SMELT_KIND_BINARY || kind == SMELT_KIND_TERNARY ||
                 kind == SMELT_KIND_GATHER || x->op == SMELT_OP_EXPAND || x->op == SMELT_OP_UNSQUEEZE ||
                 x->op == SMELT_OP_SQUEEZE || x->op == SMELT_OP_RESHAPE;
        if (!ok)
            return snprintf(why, n, "%s in a score or mask function", smelt_op_name((smelt_op)x->op)), 0;
        for (int k = 0; k < x->nsrc; k++) {
            int32_t s = x->src[k];
            if (dep_of(F, s))
                continue;
            int32_t base = s;
            while (nd(T, base)->op == SMELT_OP_EXPAND)
                base = nd(T, base)->src[0];
            const smelt_node *b = nd(T, base);
            int single = smelt_node_numel(b) == 1 && nd(T, s)->op != SMELT_OP_FLEX_ARG;
            int table = kind == SMELT_KIND_GATHER && k == 0;
            for (int dd = 0; table && dd < b->ndim; dd++)
                table = dd == x->a.gather.dim || b->shape[dd] == 1;
            if (!single && !table)
                return snprintf(why, n, "a captured tensor of shape [%lld..] read whole by a score function",
                                (long long)b->shape[0]), 0;
        }
    }
    return 1;
}

/* d(node)/d(score) for a node past F->first (-1: zero), built once. -3:
 * an op without a rule here. */
static int32_t deriv(tracer *T, flex_scan *F, int32_t i)
{
    if (!(dep_of(F, i) & 1))
        return -1;
    if (F->dval[i - F->first] != -2)
        return F->dval[i - F->first];
    const smelt_node *x = nd(T, i);
    int32_t a = x->nsrc > 0 ? x->src[0] : -1, b = x->nsrc > 1 ? x->src[1] : -1;
    int32_t da = a >= 0 ? deriv(T, F, a) : -1, db = b >= 0 ? deriv(T, F, b) : -1, r = -3;
    if (da == -3 || db == -3 || T->broke)
        return -3;
#define MUL(p, q) g_op(T, SMELT_OP_MUL, p, q, -1)
#define ADD(p, q) g_op(T, SMELT_OP_ADD, p, q, -1)
#define SUB(p, q) g_op(T, SMELT_OP_SUB, p, q, -1)
#define K(v) g_full(T, v)
    switch ((smelt_op)x->op) {
    case SMELT_OP_FLEX_ARG: r = K(1); break;
    case SMELT_OP_ADD: r = da < 0 ? db : db < 0 ? da : ADD(da, db); break;
    case SMELT_OP_SUB: r = db < 0 ? da : da < 0 ? g_op(T, SMELT_OP_NEG, db, -1, -1) : SUB(da, db); break;
    case SMELT_OP_NEG: r = g_op(T, SMELT_OP_NEG, da, -1, -1); break;
    case SMELT_OP_MUL:
        r = da < 0 ? MUL(db, a) : db < 0 ? MUL(da, b) : ADD(MUL(da, b), MUL(db, a));
        break;
    case SMELT_OP_DIV:   /* (da b - a db) / b^2 */
        r = db < 0 ? g_op(T, SMELT_OP_DIV, da, b, -1)
                   : g_op(T, SMELT_OP_DIV, SUB(da < 0 ? K(0) : MUL(da, b), MUL(db, a)), MUL(b, b), -1);
        break;
    case SMELT_OP_TANH: r = MUL(da, SUB(K(1), MUL(i, i))); break;
    case SMELT_OP_EXP: r = MUL(da, i); break;
    case SMELT_OP_EXP2: r = MUL(da, MUL(i, K(M_LN2))); break;
    case SMELT_OP_SIGMOID: r = MUL(da, MUL(i, SUB(K(1), i))); break;
    case SMELT_OP_LOG: r = g_op(T, SMELT_OP_DIV, da, a, -1); break;
    case SMELT_OP_SQRT: r = g_op(T, SMELT_OP_DIV, da, MUL(K(2), i), -1); break;
    case SMELT_OP_SIN: r = MUL(da, g_op(T, SMELT_OP_COS, a, -1, -1)); break;
    case SMELT_OP_COS: r = g_op(T, SMELT_OP_NEG, MUL(da, g_op(T, SMELT_OP_SIN, a, -1, -1)), -1, -1); break;
    case SMELT_OP_ABS: r = MUL(da, g_op(T, SMELT_OP_SIGN, a, -1, -1)); break;
    case SMELT_OP_RELU: r = g_op(T, SMELT_OP_WHERE, g_op(T, SMELT_OP_GT, a, K(0), -1), da, K(0)); break;
    case SMELT_OP_WHERE: {
        int32_t dc = deriv(T, F, x->src[2]);
        if (dc == -3 || (db < 0 && dc < 0))
            return dc == -3 ? -3 : (F->dval[i - F->first] = -1);
        r = g_op(T, SMELT_OP_WHERE, a, db < 0 ? K(0) : db, dc < 0 ? K(0) : dc);
        break;
    }
    case SMELT_OP_MAXIMUM: case SMELT_OP_MINIMUM: {
        int32_t pick = g_op(T, x->op == SMELT_OP_MAXIMUM ? SMELT_OP_GE : SMELT_OP_LE, a, b, -1);
        r = g_op(T, SMELT_OP_WHERE, pick, da < 0 ? K(0) : da, db < 0 ? K(0) : db);
        break;
    }
    case SMELT_OP_CLAMP: {
        int32_t in = K(1);
        if (x->a.clamp.has_lo)
            in = g_op(T, SMELT_OP_LOGICAL_AND, g_cast(T, in, SMELT_BOOL), g_op(T, SMELT_OP_GE, a, K(x->a.clamp.flo), -1), -1);
        if (x->a.clamp.has_hi)
            in = g_op(T, SMELT_OP_LOGICAL_AND, g_cast(T, in, SMELT_BOOL), g_op(T, SMELT_OP_LE, a, K(x->a.clamp.fhi), -1), -1);
        r = g_op(T, SMELT_OP_WHERE, g_cast(T, in, SMELT_BOOL), da, K(0));
        break;
    }
    case SMELT_OP_POW:   /* a constant exponent: b a^(b-1) da */
        if (db < 0)
            r = MUL(da, MUL(b, g_op(T, SMELT_OP_POW, a, SUB(b, K(1)), -1)));
        break;
    case SMELT_OP_CAST: r = smelt_dtype_is_float((smelt_dtype)x->dtype) ? da : -1; break;
    case SMELT_OP_DETACH: r = -1; break;
    default: break;
    }
#undef MUL
#undef ADD
#undef SUB
#undef K
    if (r == -3 || T->broke)
        return -3;
    return F->dval[i - F->first] = r;
}

/* Whether node x (from outside the functions) depends on an input that
 * requires grad (walk with a visited mark). */
static int captured_grad(tracer *T, int32_t x, uint8_t *seen)
{
    if (seen[x])
        return 0;
    seen[x] = 1;
    const smelt_node *n = nd(T, x);
    if (n->op == SMELT_OP_INPUT) {
        int g = tr_input_grad(T, x);
        PyErr_Clear();
        return g == 1;
    }
    for (int k = 0; k < n->nsrc; k++)
        if (captured_grad(T, n->src[k], seen))
            return 1;
    return 0;
}

/* ---------- the call ---------- */

typedef struct flex_call {
    int32_t q, k, v;               /* values */
    int32_t score_mod, mask_mod;   /* values, -1 none */
    int32_t tables[4];             /* nodes: kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices (-1) */
    int64_t bq, bk;
    int64_t B, H, Hk, L, S, E, Ev;
    double scale;
    int lse;
    int mask_b, mask_h;            /* a traced block mask's B / H were given */
} flex_call;

/* Stand-ins for the functions' arguments: score, b, h, q_idx, kv_idx. */
static int stand_ins(tracer *T, const flex_call *c, int32_t *vals)
{
    static const int64_t one = 1;
    for (int r = 0; r < 5; r++) {
        smelt_node p = { .op = SMELT_OP_FLEX_ARG, .dtype = r ? SMELT_I32 : SMELT_F32, .ndim = 4 };
        int64_t sh[4] = { r <= 1 ? c->B : one, r == 0 || r == 2 ? c->H : one, r == 0 || r == 3 ? c->L : one,
                          r == 0 || r == 4 ? c->S : one };
        memcpy(p.shape, sh, sizeof sh);
        p.a.flex.role = (uint8_t)r;
        int32_t n = tr_node_add(T, &p);
        if (n < 0 || (vals[r] = tv_tensor(T, n)) < 0)
            return -1;
    }
    return 0;
}

/* The index tensors of the decomposition: arange per dim, int32, as the
 * stand-ins are shaped. */
static int real_indices(tracer *T, const flex_call *c, int32_t *vals)
{
    int64_t n[4] = { c->B, c->H, c->L, c->S };
    for (int r = 1; r < 5; r++) {
        smelt_node p = { .op = SMELT_OP_IOTA, .dtype = SMELT_I32, .ndim = 4, .shape = { 1, 1, 1, 1 } };
        p.shape[r - 1] = n[r - 1];
        p.a.axis.dim = r - 1;
        int32_t id = tr_node_add(T, &p);
        if (id < 0 || (vals[r] = tv_tensor(T, id)) < 0)
            return -1;
    }
    return 0;
}

/* Calls a score or mask function. One from outside the trace is guarded
 * by its code and globals, not its identity (as Dynamo's closure match):
 * a closure made anew for each call (a block mask built per step, a
 * lambda over this batch's tensors) reuses the compiled entry, its cells
 * guarded where they are read. */
static int32_t call_fn(tracer *T, int32_t fn, const int32_t *args, int n)
{
    call_args a = { .pos = (int32_t *)args, .npos = n };
    const tv *f = &T->vals[fn];
    if (f->kind != V_OBJ || f->src < 0 || !PyFunction_Check(f->obj))
        return tr_call(T, fn, &a);
    PyObject *o = f->obj;
    static const char *parts[2] = { "__code__", "__globals__" };
    PyObject *vals[2] = { PyFunction_GET_CODE(o), PyFunction_GET_GLOBALS(o) };
    int32_t src = f->src;
    for (int k = 0; k < 2; k++) {
        PyObject *name = PyUnicode_InternFromString(parts[k]);
        int32_t s = name && !tr_keep(T, name) ? tr_src_new(T, SRC_ATTR, src, 0, name) : -1;
        Py_XDECREF(name);
        if (s < 0 || tr_add_guard(T, TG_ID, s, vals[k], 0))
            return -1;
    }
    if (tr_add_guard(T, TG_TYPE, src, (PyObject *)&PyFunction_Type, 0))
        return -1;
    return tr_inline(T, o, src, &a);
}

/* The result value: out, or (out, lse). pk: [B,H,L,Ev+1] (lse last). */
static int32_t outputs(tracer *T, const flex_call *c, int32_t out, int32_t lse)
{
    int32_t o = tv_tensor(T, out);
    if (o < 0 || !c->lse)
        return o;
    int32_t items[2] = { o, tv_tensor(T, lse) };
    return items[1] < 0 ? -1 : tv_tuple(T, items, 2);
}

static int32_t g_slice_last(tracer *T, int32_t x, int64_t start, int64_t end)
{
    smelt_node p = { .op = SMELT_OP_SLICE, .nsrc = 1, .src = { x } };
    p.a.slice.dim = 3, p.a.slice.start = start, p.a.slice.end = end, p.a.slice.step = 1;
    return tr_node_add(T, &p);
}

static int32_t g_iota(tracer *T, int nd, int dim, int64_t n)
{
    smelt_node p = { .op = SMELT_OP_IOTA, .dtype = SMELT_I64, .ndim = (uint8_t)nd };
    for (int d = 0; d < nd; d++)
        p.shape[d] = d == dim ? n : 1;
    p.a.axis.dim = dim;
    return tr_node_add(T, &p);
}

static int32_t g_view(tracer *T, smelt_op op, int32_t x, int nd, const int64_t *shape)
{
    smelt_node p = { .op = op, .nsrc = 1, .src = { x }, .ndim = (uint8_t)nd };
    memcpy(p.shape, shape, sizeof(int64_t) * (size_t)nd);
    return x < 0 ? -1 : tr_node_add(T, &p);
}

/* src (a block table: [Bm,Hm,QB] or [Bm,Hm,QB,KB]) at each query row's
 * block: [Bm,Hm,L] or [Bm,Hm,L,KB]. */
static int32_t rows_of(tracer *T, const flex_call *c, int32_t src)
{
    const smelt_node *t = nd(T, src);
    int r = t->ndim;
    int64_t sh[4] = { t->shape[0], t->shape[1], c->L, r == 4 ? t->shape[3] : 1 }, one[4] = { 1, 1, c->L, 1 };
    int32_t qb = g_op(T, SMELT_OP_FLOORDIV, g_iota(T, r, 2, c->L), g_full(T, (double)c->bq), -1);
    qb = g_cast(T, qb, SMELT_I64);
    qb = g_view(T, SMELT_OP_EXPAND, g_view(T, SMELT_OP_RESHAPE, qb, r, one), r, sh);
    smelt_node ck = { .op = SMELT_OP_CHECKIDX, .nsrc = 1, .src = { qb } };
    ck.a.gather.n = t->shape[2];
    int32_t ix = qb < 0 ? -1 : tr_node_add(T, &ck);
    smelt_node g = { .op = SMELT_OP_GATHER, .nsrc = 2, .src = { src, ix } };
    g.a.gather.dim = 2;
    return ix < 0 ? -1 : tr_node_add(T, &g);
}

/* Where a block table pair (counts, indices) lists point (b, h, i, j)'s
 * block: bool [Bm,Hm,L,S]. */
static int32_t listed(tracer *T, const flex_call *c, int t)
{
    int32_t num = rows_of(T, c, c->tables[t]), idx = rows_of(T, c, c->tables[t + 1]);
    if (num < 0 || idx < 0)
        return -1;
    const smelt_node *in = nd(T, idx);
    int64_t KB = in->shape[3], n5[5] = { in->shape[0], in->shape[1], c->L, KB, 1 }, j5[5] = { 1, 1, 1, 1, c->S };
    int64_t c4[4] = { in->shape[0], in->shape[1], c->L, 1 };
    int32_t valid = g_op(T, SMELT_OP_LT, g_iota(T, 4, 3, KB), g_view(T, SMELT_OP_RESHAPE, num, 4, c4), -1);
    int32_t kb = g_op(T, SMELT_OP_FLOORDIV, g_iota(T, 5, 4, c->S), g_full(T, (double)c->bk), -1);
    kb = g_view(T, SMELT_OP_RESHAPE, g_cast(T, kb, SMELT_I64), 5, j5);
    int32_t hit = g_op(T, SMELT_OP_EQ, g_view(T, SMELT_OP_RESHAPE, idx, 5, n5), kb, -1);
    hit = g_op(T, SMELT_OP_LOGICAL_AND, hit, g_view(T, SMELT_OP_RESHAPE, valid, 5, n5), -1);
    smelt_node any = { .op = SMELT_OP_ANY, .nsrc = 1, .src = { hit }, .a.red = { .dims = 8, .keepdim = 0 } };
    return hit < 0 ? -1 : tr_node_add(T, &any);
}

/* The decomposition: scores, the functions on real indices, masked
 * softmax (a row with nothing attended: 0, lse -inf), @ v. */
static int32_t decomposed(tracer *T, const flex_call *c)
{
    int64_t G = c->H / c->Hk, full[4] = { c->B, c->H, c->L, c->S };
    int32_t q = T->vals[c->q].node, k = T->vals[c->k].node, v = T->vals[c->v].node;
    if (G > 1) {   /* key heads repeated for their query heads */
        int32_t kv[2] = { k, v };
        for (int i = 0; i < 2; i++) {
            const smelt_node *x = nd(T, kv[i]);
            smelt_node u = { .op = SMELT_OP_RESHAPE, .nsrc = 1, .src = { kv[i] }, .ndim = 5,
                             .shape = { x->shape[0], x->shape[1], 1, x->shape[2], x->shape[3] } };
            int32_t r = tr_node_add(T, &u);
            smelt_node e = { .op = SMELT_OP_EXPAND, .nsrc = 1, .src = { r }, .ndim = 5,
                             .shape = { x->shape[0], x->shape[1], G, x->shape[2], x->shape[3] } };
            r = r < 0 ? -1 : tr_node_add(T, &e);
            smelt_node f = { .op = SMELT_OP_RESHAPE, .nsrc = 1, .src = { r }, .ndim = 4,
                             .shape = { x->shape[0], c->H, x->shape[2], x->shape[3] } };
            if (r < 0 || (kv[i] = tr_node_add(T, &f)) < 0)
                return -1;
        }
        k = kv[0], v = kv[1];
    }
    smelt_node t = { .op = SMELT_OP_PERMUTE, .nsrc = 1, .src = { k }, .a.perm.perm = { 0, 1, 3, 2 } };
    int32_t kt = tr_node_add(T, &t);
    int32_t s = g_op(T, SMELT_OP_MUL, g_op(T, SMELT_OP_MATMUL, q, kt, -1), g_full(T, c->scale), -1);
    int32_t args[5];
    if (s < 0 || (args[0] = tv_tensor(T, s)) < 0 || real_indices(T, c, args))
        return -1;
    if (c->score_mod >= 0) {
        int32_t r = call_fn(T, c->score_mod, args, 5);
        if (r < 0 || (s = result_node(T, r, SMELT_F32, full)) < 0)
            return -1;
    }
    int32_t ninf = g_full(T, -INFINITY), allowed = -1;
    if (c->mask_mod >= 0) {
        int32_t r = call_fn(T, c->mask_mod, args + 1, 4);
        if (r < 0 || (allowed = result_node(T, r, SMELT_BOOL, full)) < 0)
            return -1;
    }
    if (c->tables[0] >= 0) {   /* the tables decide: the mask on partial blocks, full ones whole */
        int32_t part = listed(T, c, 0);
        allowed = allowed < 0 ? part : g_op(T, SMELT_OP_LOGICAL_AND, part, allowed, -1);
        if (c->tables[2] >= 0)
            allowed = g_op(T, SMELT_OP_LOGICAL_OR, allowed, listed(T, c, 2), -1);
        allowed = g_expand(T, allowed, full);
    }
    if (allowed >= 0 && (s = g_op(T, SMELT_OP_WHERE, allowed, s, ninf)) < 0)
        return -1;
    smelt_node mx = { .op = SMELT_OP_AMAX, .nsrc = 1, .src = { s }, .a.red = { .dims = 8, .keepdim = 1 } };
    int32_t m = tr_node_add(T, &mx);
    int32_t none = g_op(T, SMELT_OP_EQ, m, ninf, -1);   /* nothing attended */
    int32_t m0 = g_op(T, SMELT_OP_WHERE, none, g_full(T, 0), m);
    int32_t e = g_op(T, SMELT_OP_EXP, g_op(T, SMELT_OP_SUB, s, m0, -1), -1, -1);
    smelt_node sm = { .op = SMELT_OP_SUM, .nsrc = 1, .src = { e }, .a.red = { .dims = 8, .keepdim = 1 } };
    int32_t l = e < 0 ? -1 : tr_node_add(T, &sm);
    int32_t p = g_op(T, SMELT_OP_DIV, e, g_op(T, SMELT_OP_WHERE, none, g_full(T, 1), l), -1);
    int32_t out = g_op(T, SMELT_OP_MATMUL, p, v, -1);
    if (out < 0)
        return -1;
    int32_t lse = -1;
    if (c->lse) {
        int32_t lv = g_op(T, SMELT_OP_WHERE, none, ninf, g_op(T, SMELT_OP_ADD, m0, g_op(T, SMELT_OP_LOG, l, -1, -1), -1));
        smelt_node sq = { .op = SMELT_OP_SQUEEZE, .nsrc = 1, .src = { lv }, .a.axis.dim = 3 };
        if (lv < 0 || (lse = tr_node_add(T, &sq)) < 0)
            return -1;
    }
    return outputs(T, c, out, lse);
}

/* The fused FLEX node, or -2 when the functions take a form it does not
 * (the caller decomposes; nothing the stand-ins fed is used). */
static int32_t fused(tracer *T, const flex_call *c)
{
    int64_t full[4] = { c->B, c->H, c->L, c->S };
    int32_t args[5];
    int32_t first = T->g->n;
    if ((c->score_mod >= 0 || c->mask_mod >= 0) && stand_ins(T, c, args))
        return -1;
    int32_t sc = -1, mk = -1;
    if (c->score_mod >= 0) {
        int32_t r = call_fn(T, c->score_mod, args, 5);
        if (r < 0 || (sc = result_node(T, r, SMELT_F32, full)) < 0)
            return -1;
    }
    if (c->mask_mod >= 0) {
        int32_t r = call_fn(T, c->mask_mod, args + 1, 4);
        if (r < 0 || (mk = result_node(T, r, SMELT_BOOL, full)) < 0)
            return -1;
    }
    flex_scan F = { .first = first };
    int32_t span = T->g->n - first;
    F.dep = PyMem_Calloc((size_t)span + 1, 1);
    F.dval = PyMem_Malloc(sizeof(int32_t) * ((size_t)span + 1));
    uint8_t *seen = PyMem_Calloc((size_t)T->g->n + 1, 1);
    if (!F.dep || !F.dval || !seen) {
        PyMem_Free(F.dep), PyMem_Free(F.dval), PyMem_Free(seen);
        return PyErr_NoMemory(), -1;
    }
    char why[200] = "";
    int ok = fusable(T, &F, why, sizeof why);
    int32_t roots[2] = { sc, mk };
    for (int r = 0; ok && r < 2; r++) {   /* a value from outside returned whole: not a per-point one */
        int32_t x = roots[r];
        while (x >= 0 && !dep_of(&F, x) && (nd(T, x)->op == SMELT_OP_EXPAND || nd(T, x)->op == SMELT_OP_RESHAPE ||
                                            nd(T, x)->op == SMELT_OP_CAST))
            x = nd(T, x)->src[0];
        if (x >= 0 && !dep_of(&F, x) && smelt_node_numel(nd(T, x)) != 1)
            ok = 0, snprintf(why, sizeof why, "a score or mask function returned a captured tensor");
    }
    for (int32_t i = first; ok && i < first + span; i++) {   /* what the functions read from outside */
        const smelt_node *x = nd(T, i);
        for (int kk = 0; ok && F.dep[i - first] && kk < x->nsrc; kk++)
            if (!dep_of(&F, x->src[kk]) && captured_grad(T, x->src[kk], seen))
                ok = 0, snprintf(why, sizeof why, "a captured tensor requires grad");
    }
    int32_t dsc = -1;
    if (ok && sc >= 0) {   /* the derivative in the score, for the backward */
        for (int32_t i = 0; i < span; i++)
            F.dval[i] = -2;
        int32_t d = deriv(T, &F, sc);
        if (T->broke)
            ok = 0;
        else if (d == -3)
            dsc = -3;
        else if (d >= 0 && nd(T, d)->op == SMELT_OP_FULL && nd(T, d)->a.scalar.f == 1.0)
            dsc = -4;   /* an added bias: the identity's derivative */
        else
            dsc = g_expand(T, g_cast(T, d < 0 ? g_full(T, 0) : d, SMELT_F32), full);
    }
    PyMem_Free(F.dep), PyMem_Free(F.dval), PyMem_Free(seen);
    if (T->broke)
        return -1;
    if (!ok)
        return -2;
    smelt_node p = { .op = SMELT_OP_FLEX, .nsrc = 3,
                     .src = { T->vals[c->q].node, T->vals[c->k].node, T->vals[c->v].node } };
    p.a.flex.scale = c->scale;
    p.a.flex.bq = (int32_t)c->bq, p.a.flex.bk = (int32_t)c->bk;
    p.a.flex.parts = (uint8_t)((c->mask_b ? SMELT_FLEX_MASK_B : 0) | (c->mask_h ? SMELT_FLEX_MASK_H : 0));
    if (sc >= 0)
        p.a.flex.parts |= SMELT_FLEX_SCORE, p.src[p.nsrc++] = sc;
    if (mk >= 0)
        p.a.flex.parts |= SMELT_FLEX_MASK, p.src[p.nsrc++] = mk;
    if (dsc >= 0)
        p.a.flex.parts |= SMELT_FLEX_DSCORE, p.src[p.nsrc++] = dsc;
    if (dsc == -4)
        p.a.flex.parts |= SMELT_FLEX_DSCORE_ONE;
    for (int t = 0; t < 4; t += 2)
        if (c->tables[t] >= 0) {
            p.a.flex.parts |= t ? SMELT_FLEX_FULL : SMELT_FLEX_BLOCKS;
            p.src[p.nsrc++] = c->tables[t];
            p.src[p.nsrc++] = c->tables[t + 1];
        }
    int32_t pk = tr_node_add(T, &p);
    if (pk < 0)
        return -1;
    int32_t out = g_slice_last(T, pk, 0, c->Ev), lse = -1;
    if (c->lse) {
        smelt_node sq = { .op = SMELT_OP_SQUEEZE, .nsrc = 1, .src = { g_slice_last(T, pk, c->Ev, c->Ev + 1) },
                          .a.axis.dim = 3 };
        if (sq.src[0] < 0 || (lse = tr_node_add(T, &sq)) < 0)
            return -1;
    }
    return out < 0 ? -1 : outputs(T, c, out, lse);
}

/* A BlockMask from outside the trace: its tables as graph inputs, its
 * block size and mask function; or a _TracedBlockMask: its mask function
 * (no tables). 0, or -1 (break). */
static int block_mask(tracer *T, flex_call *c, int32_t bm)
{
    PyObject *cls = traced_cls();
    int traced = T->vals[bm].kind == V_INST && cls && T->vals[bm].obj == cls;
    int32_t fn = tr_load_attr(T, bm, PyUnicode_InternFromString("mask_mod"));
    if (fn < 0)
        return -1;
    PyObject *fo = T->vals[fn].kind == V_OBJ ? T->vals[fn].obj : NULL;
    c->mask_mod = fo && fo == noop_mask_fn ? -1 : fn;
    int32_t bs = tr_load_attr(T, bm, PyUnicode_InternFromString("BLOCK_SIZE"));
    int32_t sl = bs < 0 ? -1 : tr_load_attr(T, bm, PyUnicode_InternFromString("seq_lengths"));
    if (sl < 0)
        return -1;
    PyObject *bso = tr_pyobj(T, bs), *slo = bso ? tr_pyobj(T, sl) : NULL;
    long long qlen, kvlen, bq, bk;
    int parsed = slo && PyTuple_Check(bso) && PyTuple_Check(slo) && PyArg_ParseTuple(bso, "LL", &bq, &bk) &&
                 PyArg_ParseTuple(slo, "LL", &qlen, &kvlen);
    Py_XDECREF(bso);
    Py_XDECREF(slo);
    if (!parsed) {
        PyErr_Clear();
        return tr_break(T, "flex_attention: a block mask's BLOCK_SIZE or seq_lengths");
    }
    c->bq = bq, c->bk = bk;
    if (c->bq < 1 || c->bk < 1 || c->bq > INT32_MAX || c->bk > INT32_MAX)
        return tr_break(T, "flex_attention: block size %lld x %lld", (long long)c->bq, (long long)c->bk);
    if (qlen != c->L || kvlen != c->S)   /* torch raises (or the mask is the no-op one): eagerly */
        return tr_break(T, "flex_attention: a block mask for %lld x %lld, attention %lld x %lld", qlen, kvlen,
                        (long long)c->L, (long long)c->S);
    if (traced) {   /* its B / H: the mask sorts tiles per batch entry / head (None: at 0, as torch) */
        int32_t bh = tr_load_attr(T, bm, PyUnicode_InternFromString("batch_heads"));
        PyObject *o = bh < 0 ? NULL : tr_pyobj(T, bh);
        if (!o)
            return -1;
        c->mask_b = PyTuple_Check(o) && PyTuple_GET_SIZE(o) == 2 && PyTuple_GET_ITEM(o, 0) != Py_None;
        c->mask_h = PyTuple_Check(o) && PyTuple_GET_SIZE(o) == 2 && PyTuple_GET_ITEM(o, 1) != Py_None;
        Py_DECREF(o);
        return 0;
    }
    static const char *names[4] = { "kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices" };
    for (int t = 0; t < 4; t++) {
        int32_t x = tr_load_attr(T, bm, PyUnicode_InternFromString(names[t]));
        if (x < 0)
            return -1;
        if (fx_none(T, x) && t >= 2) {
            c->tables[t] = -1;
            continue;
        }
        if (T->vals[x].kind != V_TENSOR)
            return tr_break(T, "flex_attention: block mask %s is not a tensor", names[t]);
        c->tables[t] = T->vals[x].node;
    }
    return 0;
}

int32_t flex_attention_call(tracer *T, const call_args *a)
{
    flex_call c = { .score_mod = -1, .mask_mod = -1, .tables = { -1, -1, -1, -1 }, .bq = 1, .bk = 1 };
    c.q = ops_arg(a, 0, "query"), c.k = ops_arg(a, 1, "key"), c.v = ops_arg(a, 2, "value");
    int32_t sm = ops_arg(a, 3, "score_mod"), bm = ops_arg(a, 4, "block_mask"), scale = ops_arg(a, 5, "scale");
    int32_t gqa = ops_arg(a, 6, "enable_gqa"), lse = ops_arg(a, 7, "return_lse"), aux = ops_arg(a, 9, "return_aux");
    if (c.q < 0 || c.k < 0 || c.v < 0 || T->vals[c.q].kind != V_TENSOR || T->vals[c.k].kind != V_TENSOR ||
        T->vals[c.v].kind != V_TENSOR || !fx_none(T, aux))
        return tr_break(T, "flex_attention form not supported");
    const smelt_node *qn = nd(T, T->vals[c.q].node), *kn = nd(T, T->vals[c.k].node), *vn = nd(T, T->vals[c.v].node);
    int on = 0, is_gqa = 0;
    if (!fx_none(T, lse)) {
        PyObject *o = tr_const(T, lse);
        if (!o || (on = PyObject_IsTrue(o)) < 0)
            return -1;
    }
    if (!fx_none(T, gqa)) {
        PyObject *o = tr_const(T, gqa);
        if (!o || (is_gqa = PyObject_IsTrue(o)) < 0)
            return -1;
    }
    c.lse = on;
    if (qn->ndim != 4 || kn->ndim != 4 || vn->ndim != 4 || qn->shape[0] != kn->shape[0] ||
        kn->shape[0] != vn->shape[0] || kn->shape[1] != vn->shape[1] || kn->shape[2] != vn->shape[2] ||
        qn->shape[3] != kn->shape[3] || kn->shape[1] < 1 || qn->shape[1] % kn->shape[1] ||
        (!is_gqa && qn->shape[1] != kn->shape[1]) || qn->dtype != kn->dtype || qn->dtype != vn->dtype ||
        !smelt_dtype_is_float((smelt_dtype)qn->dtype) || qn->shape[3] < 1)
        return tr_break(T, "flex_attention of these shapes or dtypes (eager raises or decides)");
    c.B = qn->shape[0], c.H = qn->shape[1], c.L = qn->shape[2], c.E = qn->shape[3];
    c.Hk = kn->shape[1], c.S = kn->shape[2], c.Ev = vn->shape[3];
    c.scale = 1.0 / sqrt((double)c.E);
    if (!fx_none(T, scale)) {
        PyObject *o = tr_const(T, scale);
        if (!o || ((c.scale = PyFloat_AsDouble(o)) == -1 && PyErr_Occurred()))
            return -1;
    }
    if (!fx_none(T, sm)) {
        PyObject *o = T->vals[sm].kind == V_OBJ ? T->vals[sm].obj : NULL;
        c.score_mod = o && o == identity_fn ? -1 : sm;
    }
    if (!fx_none(T, bm) && block_mask(T, &c, bm))
        return -1;
    if (T->r->dyn)
        return dyn_fail(T, "flex_attention");
    int32_t r = -2;
    if (qn->dtype == SMELT_F32 && T->device < 0)
        r = fused(T, &c);
    return r == -2 ? decomposed(T, &c) : r;
}

int32_t flex_mod_call(tracer *T, PyObject *fn, const call_args *a)
{
    if (!traced_cls() || fn != call_mod_fn)
        return -2;
    if (a->npos < 1 || a->nkw)
        return tr_break(T, "_call_mod(fn, *args)");
    return call_fn(T, a->pos[0], a->pos + 1, a->npos - 1);
}

int32_t flex_block_mask_call(tracer *T, const call_args *a)
{
    PyObject *cls = traced_cls();
    if (!cls)
        return tr_break(T, "create_block_mask: smelt._flex is missing");
    int32_t clsv = tv_obj(T, cls, -1);
    return clsv < 0 ? -1 : obj_new_instance(T, clsv, a);
}
