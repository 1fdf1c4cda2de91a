/* dynamic.c — dynamic shapes in the tracer (see trace.h, tr_dyn).
 *
 * Which sizes become symbols: dyn_input, per tensor input, from the
 * trace's mode (torch.compile's policy: dynamic=True, or a size that
 * changed since the site's first trace), mark_dynamic / mark_static on
 * the tensor; parameters and buffers never. Equal sizes share a symbol
 * (torch's duck sizing; a call where they differ fails the check and
 * traces anew).
 *
 * From there every graph node's sizes are expressions (dyn_node, after
 * each node is added): elementwise ops and matmul broadcast them, views
 * move them, reductions drop them, a reshape's -1 divides them, a slice
 * clamps them. A size the op reads from a Python int (view, expand,
 * zeros, arange, a slice's bounds) takes that int's expression when the
 * int was a symbolic size (a V_SYM value: x.size(1), T // 2, ...): the
 * handler hands it over (dyn_pend_*) before adding the node. An op whose
 * sizes cannot be followed (a host call over symbolic sizes, a shape
 * written as a constant that equals a symbol's value) ends the symbolic
 * trace: the caller traces the call again with static sizes. Where the
 * trace relies on a size (a branch, two sizes meeting in one op, a size
 * used as a plain number), the fact becomes a relation on the symbols,
 * checked per call. Every symbolic size is at least 2 (0 and 1 are
 * specialised, as torch does), so broadcasting and squeezing decide the
 * same way for every value the entry accepts. */
#include "tstate.h"

#include <stdarg.h>
#include <string.h>

static void *grow_arr(void *p, int32_t *cap, int32_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    int32_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *q = PyMem_Realloc(p, elem * (size_t)c);
    if (q)
        *cap = c;
    return q;
}

void tracer_dyn_free(tr_dyn *d)
{
    if (!d)
        return;
    sym_table_clear(&d->t);
    PyMem_Free(d->dims);
    PyMem_Free(d->rels);
    PyMem_Free(d->attrs);
    PyMem_Free(d);
}

int dyn_fail(tracer *T, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (T->r->dyn)
        T->r->dyn->failed = 1;
    return tr_break(T, "dynamic shapes: %s", msg);
}

/* An expression built by sym.c, or a failure when it did not fit. */
static int32_t chk(tracer *T, int32_t e)
{
    if (e < 0 && !PyErr_Occurred())
        dyn_fail(T, "a size expression beyond what symbols express");
    return e;
}

static int64_t hint_of(tracer *T, int32_t e, int *ok)
{
    int64_t v = 0;
    *ok = sym_eval(&T->r->dyn->t, e, T->r->dyn->hint, &v) == 0;
    return v;
}

/* The relation a op b (Py_LT..Py_GE) is relied on: recorded once. */
static int add_rel(tracer *T, int op, int32_t a, int32_t b)
{
    tr_dyn *D = T->r->dyn;
    if (a < 0 || b < 0)
        return -1;
    for (int32_t i = 0; i < D->nrels; i++)
        if (D->rels[i].op == op && D->rels[i].a == a && D->rels[i].b == b)
            return 0;
    sym_rel *r = grow_arr(D->rels, &D->crels, D->nrels + 1, sizeof *r);
    if (!r)
        return PyErr_NoMemory(), -1;
    D->rels = r;
    D->rels[D->nrels++] = (sym_rel){ .op = (uint8_t)op, .a = a, .b = b };
    return 0;
}

static int32_t cst(tracer *T, int64_t c)
{
    return chk(T, sym_const(&T->r->dyn->t, c));
}

/* Size expression e is pinned to its traced value v: guarded. */
static int pin(tracer *T, int32_t e, int64_t v)
{
    int32_t c = cst(T, v);
    return c < 0 ? -1 : add_rel(T, Py_EQ, e, c);
}

/* 1 when e >= 2 for every value of its symbols (each >= 2). */
static int surely_ge2(const sym_table *t, int32_t e)
{
    int64_t lb;
    return sym_lower_bound(t, e, &lb) && lb >= 2;
}

/* ---------- the table of node sizes ---------- */

static int dims_room(tracer *T, int32_t n)
{
    tr_dyn *D = T->r->dyn;
    int32_t old = D->cdims;
    int32_t (*d)[SMELT_MAX_DIMS] = grow_arr(D->dims, &D->cdims, n, sizeof *D->dims);
    if (!d)
        return PyErr_NoMemory(), -1;
    D->dims = d;
    for (int32_t i = old; i < D->cdims; i++)
        for (int k = 0; k < SMELT_MAX_DIMS; k++)
            D->dims[i][k] = -1;
    if (D->ndims < n)
        D->ndims = n;
    return 0;
}

static tr_dyn *dyn_get(tracer *T)
{
    if (T->r->dyn)
        return T->r->dyn;
    tr_dyn *D = PyMem_Calloc(1, sizeof *D);
    if (!D)
        return (tr_dyn *)PyErr_NoMemory();
    sym_table_init(&D->t);
    D->t.var_min = 2;   /* sizes 0 and 1 are never symbols */
    T->r->dyn = D;
    if (dims_room(T, T->g->n + 1) < 0)
        return NULL;
    return D;
}

/* Expression of node id's size d (a constant one for static sizes). */
static int32_t ex(tracer *T, int32_t id, int d)
{
    tr_dyn *D = T->r->dyn;
    int32_t e = id < D->ndims ? D->dims[id][d] : -1;
    return e >= 0 ? e : cst(T, T->g->nodes[id].shape[d]);
}

/* Node id's size d is e: checked against the graph's size (the trace's
 * values); a size the traced call has as 0 or 1 is pinned there, and an
 * expression that could fall below 2 for other values is guarded >= 2. */
static int set_dim(tracer *T, int32_t id, int d, int32_t e)
{
    tr_dyn *D = T->r->dyn;
    int64_t c, want = T->g->nodes[id].shape[d];
    if (e < 0)
        return -1;
    if (sym_is_const(&D->t, e, &c)) {
        if (c != want)
            return dyn_fail(T, "internal: size %d of %s is %lld, its expression %lld", d,
                            smelt_op_name((smelt_op)T->g->nodes[id].op), (long long)want, (long long)c);
        D->dims[id][d] = -1;
        return 0;
    }
    int ok;
    int64_t v = hint_of(T, e, &ok);
    if (!ok || v != want) {
        char buf[128];
        sym_print(&D->t, e, buf, sizeof buf);
        return dyn_fail(T, "internal: size %d of %s is %lld, its expression %s gives %lld", d,
                        smelt_op_name((smelt_op)T->g->nodes[id].op), (long long)want, buf, (long long)v);
    }
    if (v < 2) {
        D->dims[id][d] = -1;
        return pin(T, e, v);
    }
    if (!surely_ge2(&D->t, e)) {
        int32_t two = cst(T, 2);
        if (two < 0 || add_rel(T, Py_GE, e, two))
            return -1;
    }
    D->dims[id][d] = e;
    return 0;
}

static int D_sym(tracer *T, int32_t id, int d)
{
    return id < T->r->dyn->ndims && T->r->dyn->dims[id][d] >= 0;
}

static int has_sym(tracer *T, int32_t id)
{
    tr_dyn *D = T->r->dyn;
    for (int d = 0; id < D->ndims && d < T->g->nodes[id].ndim; d++)
        if (D->dims[id][d] >= 0)
            return 1;
    return 0;
}

/* Two sizes an op needs equal (the graph checked their values): one
 * expression, the other guarded equal to it. */
static int32_t unify(tracer *T, int32_t a, int32_t b)
{
    if (a == b)
        return a;
    int64_t c;
    int ka = sym_is_const(&T->r->dyn->t, a, &c), kb = sym_is_const(&T->r->dyn->t, b, &c);
    int32_t keep = ka && !kb ? b : a, other = keep == a ? b : a;
    return add_rel(T, Py_EQ, keep, other) ? -1 : keep;
}

/* Broadcast sizes of srcs (right-aligned) into node id. */
static int broadcast(tracer *T, int32_t id, const int32_t *srcs, int nsrc, int lead)
{
    const smelt_node *o = &T->g->nodes[id];
    int n = o->ndim - lead;
    for (int d = 0; d < n; d++) {
        int32_t e = -1;
        for (int k = 0; k < nsrc; k++) {
            const smelt_node *s = &T->g->nodes[srcs[k]];
            int sn = s->ndim - lead, sd = d - (n - sn);
            if (sd < 0 || s->shape[sd] == 1)
                continue;
            int32_t x = ex(T, srcs[k], sd);
            if (x < 0 || (e = e < 0 ? x : unify(T, e, x)) < 0)
                return -1;
        }
        if (set_dim(T, id, d, e < 0 ? cst(T, o->shape[d]) : e))
            return -1;
    }
    return 0;
}

/* A size written into a node's attributes as a plain number, with no
 * expression handed over: refused when it equals a symbol's value (or a
 * product of two), since it may have been computed from one. */
static int baked(tracer *T, int64_t v, const char *what)
{
    tr_dyn *D = T->r->dyn;
    if (v < 2)
        return 0;
    for (int i = 0; i < D->t.nvars; i++)
        for (int j = -1; j < i; j++) {
            int64_t p = D->hint[i];
            if (j >= 0 && __builtin_mul_overflow(p, D->hint[j], &p))
                continue;
            if (p == v)
                return dyn_fail(T, "%s has a size %lld equal to a symbolic size's value, not computed from it", what,
                                (long long)v);
        }
    return 0;
}

/* The one symbolic size among host call o's sources' (src) whose value
 * is v, or -2 when none or several distinct ones are. */
static int32_t call_size_like(tracer *T, const smelt_node *o, const int32_t *src, int64_t v)
{
    int32_t found = -2;
    for (int k = 0; k < o->nsrc; k++)
        for (int d = 0; d < T->g->nodes[src[k]].ndim; d++) {
            if (T->g->nodes[src[k]].shape[d] != v || !D_sym(T, src[k], d))
                continue;
            int32_t e = ex(T, src[k], d);
            if (found != -2 && found != e)
                return -2;
            found = e;
        }
    return found;
}

static int add_attr(tracer *T, int32_t id, int field, int d, int32_t e)
{
    tr_dyn *D = T->r->dyn;
    int64_t c;
    if (e < 0 || sym_is_const(&D->t, e, &c))
        return 0;
    sym_attr *a = grow_arr(D->attrs, &D->cattrs, D->nattrs + 1, sizeof *a);
    if (!a)
        return PyErr_NoMemory(), -1;
    D->attrs = a;
    D->attrs[D->nattrs++] = (sym_attr){ .node = id, .field = (uint8_t)field, .d = (uint8_t)d, .expr = e };
    return 0;
}

static int32_t numel_ex(tracer *T, int32_t id)
{
    int32_t e = cst(T, 1);
    for (int d = 0; e >= 0 && d < T->g->nodes[id].ndim; d++)
        e = chk(T, sym_mul(&T->r->dyn->t, e, ex(T, id, d)));
    return e;
}

/* A reshape of symbolic sizes given as plain numbers (a C composite's
 * flatten): each target size that is a run of source sizes merged takes
 * their product; a source size split into several target sizes has no
 * expression to follow (the handler must hand them over). */
static int merged(tracer *T, int32_t id)
{
    const smelt_node *o = &T->g->nodes[id], *s = &T->g->nodes[o->src[0]];
    int i = 0, j = 0;
    while (j < o->ndim || i < s->ndim) {
        if (j < o->ndim && o->shape[j] == 1) {   /* 1s stand alone */
            if (set_dim(T, id, j++, cst(T, 1)))
                return -1;
            continue;
        }
        if (i < s->ndim && s->shape[i] == 1) {
            i++;
            continue;
        }
        if (j >= o->ndim || i >= s->ndim)
            return dyn_fail(T, "internal: a reshape's sizes do not group");
        int i0 = i, j0 = j;
        int64_t ps = s->shape[i++], pt = o->shape[j++];
        while (ps != pt) {
            if (ps < pt && i < s->ndim)
                ps *= s->shape[i++];
            else if (pt < ps && j < o->ndim)
                pt *= o->shape[j++];
            else
                return dyn_fail(T, "internal: a reshape's sizes do not group");
        }
        int32_t e = cst(T, 1);
        int sym = 0;
        for (int k = i0; k < i && e >= 0; k++) {
            sym |= T->r->dyn->dims[o->src[0]][k] >= 0;
            e = chk(T, sym_mul(&T->r->dyn->t, e, ex(T, o->src[0], k)));
        }
        if (e < 0)
            return -1;
        if (j - j0 == 1) {
            if (set_dim(T, id, j0, e) || add_attr(T, id, SA_SHAPE, j0, T->r->dyn->dims[id][j0]))
                return -1;
        } else if (sym) {
            return dyn_fail(T, "a reshape splits a symbolic size into sizes given as numbers");
        } else {
            for (int k = j0; k < j; k++)
                if (set_dim(T, id, k, cst(T, o->shape[k])))
                    return -1;
        }
    }
    return 0;
}

/* RESHAPE, EXPAND, FULL, IOTA, ARANGE: sizes from the pending
 * expressions (or the source's, for EXPAND's kept dims). */
static int shaped(tracer *T, int32_t id)
{
    const smelt_node *o = &T->g->nodes[id];
    int32_t src = o->nsrc ? o->src[0] : -1;
    int pend = T->dyn_pend == 1;
    if (o->op == SMELT_OP_RESHAPE && !pend && !has_sym(T, src))
        return 0;   /* all static */
    if (o->op == SMELT_OP_RESHAPE && !pend)
        return merged(T, id);
    int infer = -1;
    int32_t known = cst(T, 1);
    for (int d = 0; d < o->ndim; d++) {
        int32_t e = -1;
        if (o->op == SMELT_OP_EXPAND) {
            /* a source size that is not 1 stays: given as -1 (-2 here) it is
             * the source's; given as an expression or a number, that must
             * equal the source's (a number pins a symbolic size to it, as
             * eager raises for any other) */
            const smelt_node *s = &T->g->nodes[src];
            int sd = d - (o->ndim - s->ndim);
            int32_t pe = pend ? T->dyn_pend_ex[d] : -2;
            if (sd >= 0 && (s->shape[sd] != 1 || pe == -2)) {
                e = ex(T, src, sd);
                if (pe >= 0 && e >= 0)
                    e = unify(T, e, pe);
                else if (pe == -1 && e >= 0 && D_sym(T, src, sd))
                    e = unify(T, cst(T, o->shape[d]), e);
                if (e < 0)
                    return -1;
            } else if (pe == -2) {
                e = cst(T, o->shape[d]);
            }
        }
        if (e < 0 && pend && T->dyn_pend_ex[d] == -2) {
            infer = d;
            continue;
        }
        if (e < 0 && pend && T->dyn_pend_ex[d] >= 0)
            e = T->dyn_pend_ex[d];
        if (e < 0) {
            if (!pend && baked(T, o->shape[d], smelt_op_name((smelt_op)o->op)))
                return -1;
            e = cst(T, o->shape[d]);
        }
        if (e < 0 || set_dim(T, id, d, e) || add_attr(T, id, SA_SHAPE, d, T->r->dyn->dims[id][d]) ||
            (known = chk(T, sym_mul(&T->r->dyn->t, known, e))) < 0)
            return -1;
    }
    if (infer >= 0) {   /* a reshape's -1: what the other sizes leave of the numel */
        int32_t e = chk(T, sym_floordiv(&T->r->dyn->t, numel_ex(T, src), known));
        if (e < 0 || set_dim(T, id, infer, e) || add_attr(T, id, SA_SHAPE, infer, T->r->dyn->dims[id][infer]))
            return -1;
    }
    if (o->op == SMELT_OP_RESHAPE) {   /* the numel stays: the target's sizes must multiply to the source's */
        int32_t a = numel_ex(T, src), b = numel_ex(T, id);
        if (a < 0 || b < 0 || unify(T, a, b) < 0)
            return -1;
    }
    return 0;
}

static int sliced(tracer *T, int32_t id)
{
    const smelt_node *o = &T->g->nodes[id], *s = &T->g->nodes[o->src[0]];
    int dim = o->a.slice.dim;
    int pend = T->dyn_pend == 2;
    int32_t len = ex(T, o->src[0], dim);
    int64_t c;
    if (len < 0)
        return -1;
    for (int d = 0; d < o->ndim; d++)
        if (d != dim && set_dim(T, id, d, ex(T, o->src[0], d)))
            return -1;
    if (!pend) {
        /* plain numbers: fine over a static size; over a symbolic one only the whole of it */
        if (!sym_is_const(&T->r->dyn->t, len, &c) && (o->a.slice.start != 0 || o->a.slice.end < s->shape[dim]))
            return dyn_fail(T, "a slice [%lld:%lld] of a symbolic size without bounds computed from it",
                            (long long)o->a.slice.start, (long long)o->a.slice.end);
        if (sym_is_const(&T->r->dyn->t, len, &c))
            return set_dim(T, id, dim, cst(T, o->shape[dim]));
        if (o->a.slice.step == 1)
            return set_dim(T, id, dim, len);
    }
    /* bounds handed over are normalised into [0, len], start <= end */
    int32_t lo = pend ? T->dyn_pend_start : cst(T, 0), hi = pend ? T->dyn_pend_end : len;
    sym_table *t = &T->r->dyn->t;
    int64_t step = o->a.slice.step;
    int32_t n = lo < 0 || hi < 0 ? -1 : chk(T, sym_sub(t, hi, lo));
    if (n >= 0 && step > 1)
        n = chk(T, sym_floordiv(t, chk(T, sym_add(t, n, cst(T, step - 1))), cst(T, step)));
    if (n < 0 || (pend && (add_attr(T, id, SA_START, 0, lo) || add_attr(T, id, SA_END, 0, hi))))
        return -1;
    return set_dim(T, id, dim, n);
}

/* Sizes of new node id from its op, sources and pending expressions. */
static int infer(tracer *T, int32_t id)
{
    const smelt_node *o = &T->g->nodes[id];
    int32_t src[SMELT_MAX_SRC];
    int any = 0;
    for (int k = 0; k < o->nsrc; k++) {
        src[k] = o->src[k];
        any |= has_sym(T, src[k]);
    }
    switch (o->op) {
    case SMELT_OP_INPUT:
    case SMELT_OP_SCALAR:
        return 0;   /* inputs: dyn_input_node */
    case SMELT_OP_RESHAPE: case SMELT_OP_EXPAND: case SMELT_OP_FULL: case SMELT_OP_IOTA: case SMELT_OP_ARANGE:
        return shaped(T, id);
    case SMELT_OP_SLICE:
        return sliced(T, id);
    default:
        break;
    }
    if (o->op == SMELT_OP_CHECKIDX) {
        if (T->dyn_pend == 3 ? add_attr(T, id, SA_BOUND, 0, T->dyn_pend_start)
                             : baked(T, o->a.gather.n, "an index bound"))
            return -1;
        T->dyn_pend = 0;
    }
    if (T->dyn_pend)
        return dyn_fail(T, "internal: sizes handed to %s, which takes none", smelt_op_name((smelt_op)o->op));
    if (!any)
        return 0;
    switch (smelt_op_kind_of((smelt_op)o->op)) {
    case SMELT_KIND_UNARY: case SMELT_KIND_BINARY: case SMELT_KIND_TERNARY:
        return broadcast(T, id, src, o->nsrc, 0);
    case SMELT_KIND_REDUCTION: {
        const smelt_node *s = &T->g->nodes[src[0]];
        int k = 0;
        for (int d = 0; d < s->ndim; d++) {
            if (!(o->a.red.dims & (1u << d))) {
                if (set_dim(T, id, k++, ex(T, src[0], d)))
                    return -1;
            } else if (o->a.red.keepdim) {
                k++;
            }
        }
        return 0;
    }
    case SMELT_KIND_CAT: {
        int dim = o->a.axis.dim;
        int32_t sum = cst(T, 0);
        for (int d = 0; d < o->ndim; d++) {
            if (d == dim)
                continue;
            int32_t e = ex(T, src[0], d);
            for (int k = 1; k < o->nsrc && e >= 0; k++)
                e = unify(T, e, ex(T, src[k], d));
            if (e < 0 || set_dim(T, id, d, e))
                return -1;
        }
        for (int k = 0; k < o->nsrc && sum >= 0; k++)
            if (T->g->nodes[src[k]].ndim)   /* torch skips empty 1-d tensors; the graph has none */
                sum = chk(T, sym_add(&T->r->dyn->t, sum, ex(T, src[k], dim)));
        return sum < 0 ? -1 : set_dim(T, id, dim, sum);
    }
    default:
        break;
    }
    switch (o->op) {
    case SMELT_OP_PERMUTE:
        for (int d = 0; d < o->ndim; d++)
            if (set_dim(T, id, d, ex(T, src[0], o->a.perm.perm[d])))
                return -1;
        return 0;
    case SMELT_OP_SQUEEZE: case SMELT_OP_UNSQUEEZE: {
        int dim = o->a.axis.dim, sq = o->op == SMELT_OP_SQUEEZE;
        for (int d = 0, k = 0; d < o->ndim; d++) {
            if (!sq && d == dim)
                continue;
            if (sq && k == dim)
                k++;
            if (set_dim(T, id, d, ex(T, src[0], k++)))
                return -1;
        }
        return 0;
    }
    case SMELT_OP_FLIP: case SMELT_OP_DETACH:
        for (int d = 0; d < o->ndim; d++)
            if (set_dim(T, id, d, ex(T, src[0], d)))
                return -1;
        return 0;
    case SMELT_OP_GATHER:
        for (int d = 0; d < o->ndim; d++)
            if (set_dim(T, id, d, ex(T, src[1], d)))
                return -1;
        return 0;
    case SMELT_OP_MATMUL: {
        const smelt_node *a = &T->g->nodes[src[0]], *b = &T->g->nodes[src[1]];
        if (broadcast(T, id, src, 2, 2) ||
            unify(T, ex(T, src[0], a->ndim - 1), ex(T, src[1], b->ndim - 2)) < 0)
            return -1;
        return set_dim(T, id, o->ndim - 2, ex(T, src[0], a->ndim - 2)) ||
               set_dim(T, id, o->ndim - 1, ex(T, src[1], b->ndim - 1));
    }
    case SMELT_OP_SDPA: {
        const smelt_node *q = &T->g->nodes[src[0]], *k = &T->g->nodes[src[1]], *v = &T->g->nodes[src[2]];
        int nd = q->ndim;
        if (unify(T, ex(T, src[1], nd - 2), ex(T, src[2], nd - 2)) < 0 ||
            unify(T, ex(T, src[0], nd - 1), ex(T, src[1], nd - 1)) < 0)
            return -1;
        for (int d = 0; d < nd - 2; d++) {
            int32_t e = ex(T, src[0], d);
            for (int j = 1; j < o->nsrc && e >= 0; j++)
                if (T->g->nodes[src[j]].shape[d] != 1)
                    e = unify(T, e, ex(T, src[j], d));
            if (e < 0 || set_dim(T, id, d, e))
                return -1;
        }
        if (o->nsrc == 4) {   /* the mask's last two dims: L or 1, S or 1 */
            const smelt_node *m = &T->g->nodes[src[3]];
            if ((m->shape[nd - 2] != 1 && unify(T, ex(T, src[3], nd - 2), ex(T, src[0], nd - 2)) < 0) ||
                (m->shape[nd - 1] != 1 && unify(T, ex(T, src[3], nd - 1), ex(T, src[1], nd - 2)) < 0))
                return -1;
        }
        (void)k;
        (void)v;
        return set_dim(T, id, nd - 2, ex(T, src[0], nd - 2)) || set_dim(T, id, nd - 1, ex(T, src[2], nd - 1));
    }
    case SMELT_OP_UNFOLD: {
        /* windows of `size` every `step` along dim: count = (L - span) // step + 1 */
        const smelt_node *s = &T->g->nodes[src[0]];
        int dim = o->a.unfold.dim;
        sym_table *t = &T->r->dyn->t;
        int64_t span = o->a.unfold.dil * (o->a.unfold.size - 1) + 1;
        if (D_sym(T, src[0], dim) && (baked(T, o->a.unfold.size, "an unfold's window") ||
                                      baked(T, o->a.unfold.step, "an unfold's step")))
            return -1;
        for (int d = 0; d < s->ndim; d++) {
            int32_t e = ex(T, src[0], d);
            if (d == dim && D_sym(T, src[0], d)) {
                if (add_rel(T, Py_GE, e, cst(T, span)))
                    return -1;
                e = chk(T, sym_add(t, chk(T, sym_floordiv(t, chk(T, sym_sub(t, e, cst(T, span))),
                                                          cst(T, o->a.unfold.step))), cst(T, 1)));
            } else if (d == dim) {
                e = cst(T, o->shape[d]);
            }
            if (set_dim(T, id, d, e))
                return -1;
        }
        return set_dim(T, id, o->ndim - 1, cst(T, o->shape[o->ndim - 1]));
    }
    case SMELT_OP_DIAGONAL: {
        const smelt_node *s = &T->g->nodes[src[0]];
        int d1 = o->a.diag.dim1, d2 = o->a.diag.dim2;
        int64_t off = o->a.diag.offset;
        sym_table *t = &T->r->dyn->t;
        for (int d = 0, k = 0; d < s->ndim; d++)
            if (d != d1 && d != d2 && set_dim(T, id, k++, ex(T, src[0], d)))
                return -1;
        /* length: min(n1, n2 - off) for off >= 0, min(n1 + off, n2) below, at least 0 */
        if ((D_sym(T, src[0], d1) || D_sym(T, src[0], d2)) && baked(T, off < 0 ? -off : off, "a diagonal's offset"))
            return -1;
        int32_t n1 = ex(T, src[0], d1), n2 = ex(T, src[0], d2);
        int32_t a = off >= 0 ? n1 : chk(T, sym_add(t, n1, cst(T, off)));
        int32_t b = off >= 0 ? chk(T, sym_sub(t, n2, cst(T, off))) : n2;
        int32_t len = a < 0 || b < 0 ? -1 : chk(T, sym_max(t, chk(T, sym_min(t, a, b)), cst(T, 0)));
        return len < 0 ? -1 : set_dim(T, id, o->ndim - 1, len);
    }
    case SMELT_OP_CALL: {
        /* a host call over symbolic sizes: a result shaped like its first
         * source takes its sizes; otherwise each size equal to exactly one
         * symbolic size of the sources (at the traced values) is taken to
         * be that one (the run checks every host call's result against the
         * graph's: a wrong guess runs the frame eagerly, never a wrong
         * answer); any other size is static, or refused where it may have
         * been computed from a symbol */
        const smelt_node *s0 = &T->g->nodes[src[0]];
        int like = s0->ndim == o->ndim && !memcmp(s0->shape, o->shape, sizeof(int64_t) * (size_t)o->ndim);
        for (int d = 0; d < o->ndim; d++) {
            int32_t e = like ? ex(T, src[0], d) : call_size_like(T, o, src, o->shape[d]);
            if (e == -2 && baked(T, o->shape[d], "a host call's result"))
                return -1;
            if (e == -2)
                continue;
            if (e < 0 || set_dim(T, id, d, e) || add_attr(T, id, SA_SHAPE, d, T->r->dyn->dims[id][d]))
                return -1;
        }
        return 0;
    }
    case SMELT_OP_CONV: {
        /* batch and spatial sizes may be symbolic: out = (in + lo + hi - dil*(k-1) - 1) // stride + 1 */
        const smelt_node *x = &T->g->nodes[src[0]];
        sym_table *t = &T->r->dyn->t;
        for (int k = 1; k < o->nsrc; k++)
            if (has_sym(T, src[k]))
                return dyn_fail(T, "a convolution with symbolic weights");
        const smelt_node *w = &T->g->nodes[src[1]];
        /* the input's channels are the weights': a symbolic count is pinned there */
        if (unify(T, ex(T, src[0], 1), cst(T, x->shape[1])) < 0 || set_dim(T, id, 0, ex(T, src[0], 0)) ||
            set_dim(T, id, 1, cst(T, o->shape[1])))
            return -1;
        for (int i = 0; i < o->a.conv.nsp; i++) {
            int d = i + 2;
            if (!D_sym(T, src[0], d)) {
                if (set_dim(T, id, d, cst(T, o->shape[d])))
                    return -1;
                continue;
            }
            int64_t span = (int64_t)o->a.conv.dil[i] * (w->shape[d] - 1) + 1;
            int64_t pad = (int64_t)o->a.conv.pad_lo[i] + o->a.conv.pad_hi[i];
            int32_t in = chk(T, sym_add(t, ex(T, src[0], d), cst(T, pad - span)));
            if (in < 0 || add_rel(T, Py_GE, in, cst(T, 0)))
                return -1;
            int32_t e = chk(T, sym_add(t, chk(T, sym_floordiv(t, in, cst(T, o->a.conv.stride[i]))), cst(T, 1)));
            if (e < 0 || set_dim(T, id, d, e))
                return -1;
        }
        return 0;
    }
    default:
        return dyn_fail(T, "%s over symbolic sizes is not built yet", smelt_op_name((smelt_op)o->op));
    }
}

int dyn_node(tracer *T, int32_t id)
{
    if (!T->r->dyn) {
        T->dyn_pend = 0;
        return 0;
    }
    int rc = dims_room(T, id + 1);
    if (rc == 0)
        rc = infer(T, id);
    T->dyn_pend = 0;
    return rc;
}

/* ---------- inputs ---------- */

/* A key naming source src across traces (a tuple of its path). New ref. */
static PyObject *src_key(tracer *T, int32_t src)
{
    if (src < 0)
        return Py_NewRef(Py_None);
    const tr_src *s = &T->r->srcs[src];
    PyObject *parent = src_key(T, s->parent);
    PyObject *k = parent ? Py_BuildValue("(inOO)", (int)s->kind, s->index, s->key ? s->key : Py_None, parent) : NULL;
    Py_XDECREF(parent);
    return k;
}

/* 1 when src's path makes the tensor a module's buffer or parameter
 * (through `_buffers` / `_parameters`), or starts at a global or a
 * closure cell: those stay static. Arguments, their items and their
 * objects' attributes (a KV cache's tensors) may be dynamic. */
static int static_source(tracer *T, int32_t src)
{
    for (; src >= 0; src = T->r->srcs[src].parent) {
        const tr_src *s = &T->r->srcs[src];
        if (s->kind == SRC_GLOBAL || s->kind == SRC_CELL || s->kind == SRC_BUILTIN)
            return 1;
        if (s->kind == SRC_ATTR && s->key && PyUnicode_Check(s->key) &&
            (!PyUnicode_CompareWithASCIIString(s->key, "_buffers") ||
             !PyUnicode_CompareWithASCIIString(s->key, "_parameters")))
            return 1;
    }
    return 0;
}

/* Dims listed in tensor t's attribute name (a set of ints, as
 * torch._dynamo.mark_dynamic / mark_static leave them). */
static uint32_t marked(PyObject *t, const char *name, int nd)
{
    PyObject *s = PyObject_GetAttrString(t, name);
    uint32_t m = 0;
    if (!s) {
        PyErr_Clear();
        return 0;
    }
    PyObject *it = PyObject_GetIter(s);
    PyObject *x;
    while (it && (x = PyIter_Next(it))) {
        long d = PyLong_AsLong(x);
        if (d < 0)
            d += nd;
        if (d >= 0 && d < nd)
            m |= 1u << d;
        Py_DECREF(x);
    }
    PyErr_Clear();
    Py_XDECREF(it);
    Py_DECREF(s);
    return m;
}

int dyn_input(tracer *T, PyObject *t, int32_t src, int nd, const int64_t *shape, uint32_t *mask)
{
    *mask = 0;
    if (T->dyn_mode == TR_DYN_OFF || nd == 0)
        return 0;
    static PyObject *param_type;
    if (!param_type) {
        PyObject *nn = PyImport_ImportModule("torch.nn");
        param_type = nn ? PyObject_GetAttrString(nn, "Parameter") : NULL;
        Py_XDECREF(nn);
        if (!param_type)
            return -1;
    }
    int isp = PyObject_IsInstance(t, param_type);
    if (isp < 0)
        return -1;
    uint32_t dyn = marked(t, "_dynamo_dynamic_indices", nd), stat = marked(t, "_dynamo_static_indices", nd);
    if (isp)
        return 0;
    uint32_t m = dyn;
    if (!static_source(T, src)) {
        if (T->dyn_mode == TR_DYN_ALL) {
            m = (1u << nd) - 1;
        } else if (T->dyn_seen) {   /* automatic: the sizes that changed since the first trace */
            PyObject *key = src_key(T, src);
            if (!key)
                return -1;
            PyObject *was = PyDict_GetItemWithError(T->dyn_seen, key);
            if (!was && PyErr_Occurred()) {
                Py_DECREF(key);
                return -1;
            }
            PyObject *now = PyList_New(nd);
            for (int d = 0; now && d < nd; d++) {
                PyObject *prev = was && PyList_Check(was) && PyList_GET_SIZE(was) == nd ? PyList_GET_ITEM(was, d) : NULL;
                int changed = was && (!prev || prev == Py_None || PyLong_AsLongLong(prev) != shape[d]);
                if (changed)
                    m |= 1u << d;
                PyList_SET_ITEM(now, d, changed ? Py_NewRef(Py_None) : PyLong_FromLongLong(shape[d]));
            }
            int rc = now ? PyDict_SetItem(T->dyn_seen, key, now) : -1;
            Py_XDECREF(now);
            Py_DECREF(key);
            if (rc)
                return -1;
        }
    }
    m &= ~stat;
    for (int d = 0; d < nd; d++)
        if (shape[d] < 2)   /* 0 and 1 are specialised */
            m &= ~(1u << d);
    *mask = m;
    return 0;
}

int dyn_input_node(tracer *T, int32_t node, uint32_t mask)
{
    if (!mask && !T->r->dyn)
        return 0;
    tr_dyn *D = dyn_get(T);
    if (!D || dims_room(T, node + 1))
        return -1;
    const smelt_node *n = &T->g->nodes[node];
    int32_t input = n->a.input.index;
    for (int d = 0; d < n->ndim; d++) {
        if (!(mask & (1u << d)))
            continue;
        int k = 0;
        while (k < D->t.nvars && D->hint[k] != n->shape[d])   /* duck sizing: equal sizes, one symbol */
            k++;
        if (k == SYM_MAX_VARS)
            return dyn_fail(T, "more than %d symbolic sizes", SYM_MAX_VARS);
        if (k == D->t.nvars) {
            D->hint[k] = n->shape[d];
            D->var_input[k] = input;
            D->var_dim[k] = d;
        }
        int32_t e = chk(T, sym_var(&D->t, k));
        if (e < 0)
            return -1;
        D->dims[node][d] = e;
    }
    return 0;
}

/* ---------- symbolic ints ---------- */

/* A V_SYM for expression e with traced value v (a plain int when e is constant). */
static int32_t tv_sym(tracer *T, int32_t e, int64_t v)
{
    int64_t c;
    if (e < 0)
        return -1;
    if (sym_is_const(&T->r->dyn->t, e, &c))
        return tv_int(T, c);
    PyObject *o = PyLong_FromLongLong(v);
    if (!o || tr_keep(T, o)) {
        Py_XDECREF(o);
        return -1;
    }
    Py_DECREF(o);
    int32_t x = tv_new(T, V_SYM);
    if (x >= 0) {
        T->vals[x].node = e;
        T->vals[x].obj = o;
        T->vals[x].src = -1;
    }
    return x;
}

int32_t dyn_dim(tracer *T, int32_t node, int d)
{
    tr_dyn *D = T->r->dyn;
    int32_t e = D && node < D->ndims ? D->dims[node][d] : -1;
    int64_t v = T->g->nodes[node].shape[d];
    return e < 0 ? tv_int(T, v) : tv_sym(T, e, v);
}

int dyn_specialize(tracer *T, int32_t v)
{
    tv *x = &T->vals[v];
    if (x->kind != V_SYM)
        return 0;
    int64_t h = PyLong_AsLongLong(x->obj);
    if (pin(T, x->node, h))
        return -1;
    x->kind = V_OBJ;   /* the traced value from now on (guarded) */
    x->node = 0;
    return 0;
}

int dyn_int_ex(tracer *T, int32_t v, int64_t *val, int32_t *e)
{
    tv *x = &T->vals[v];
    *e = -1;
    if (x->kind == V_SYM) {
        *val = PyLong_AsLongLong(x->obj);
        *e = x->node;
        return 0;
    }
    return tr_int(T, v, val);
}

/* An int operand (a V_SYM or an exact int constant): its expression. */
static int int_operand(tracer *T, int32_t v, int32_t *e, int64_t *val)
{
    tv *x = &T->vals[v];
    if (x->kind == V_SYM) {
        *e = x->node;
        *val = PyLong_AsLongLong(x->obj);
        return 1;
    }
    if (x->kind != V_OBJ || !PyLong_CheckExact(x->obj))
        return 0;
    int ovf;
    *val = PyLong_AsLongLongAndOverflow(x->obj, &ovf);
    if (ovf)
        return 0;
    if (x->src >= 0 && !tr_const(T, v))   /* a constant from a source is guarded as one */
        return -1;
    *e = cst(T, *val);
    return *e < 0 ? -1 : 1;
}

int32_t dyn_binop(tracer *T, int nb, int32_t a, int32_t b)
{
    if (T->vals[a].kind != V_SYM && T->vals[b].kind != V_SYM)
        return -2;
    int base = nb >= NB_INPLACE ? nb - NB_INPLACE : nb;
    int32_t ea, eb;
    int64_t va, vb;
    int ka = int_operand(T, a, &ea, &va), kb = ka > 0 ? int_operand(T, b, &eb, &vb) : 0;
    if (ka < 0 || kb < 0)
        return -1;
    sym_table *t = &T->r->dyn->t;
    int32_t r = -1;
    int64_t v = 0;
    if (ka && kb) {
        switch (base) {
        case NB_ADD:
            if (!__builtin_add_overflow(va, vb, &v))
                r = sym_add(t, ea, eb);
            break;
        case NB_SUBTRACT:
            if (!__builtin_sub_overflow(va, vb, &v))
                r = sym_sub(t, ea, eb);
            break;
        case NB_MULTIPLY:
            if (!__builtin_mul_overflow(va, vb, &v))
                r = sym_mul(t, ea, eb);
            break;
        case NB_FLOOR_DIVIDE:
        case NB_REMAINDER:
            if (vb != 0) {
                /* the divisor's sign decides: guard it when it is symbolic */
                int32_t zero = cst(T, 0);
                if (zero < 0 || (!sym_is_const(t, eb, &v) && add_rel(T, vb > 0 ? Py_GT : Py_LT, eb, zero)))
                    return -1;
                int64_t q = va / vb, m = va % vb;
                if (m != 0 && ((m < 0) != (vb < 0))) {
                    q--;
                    m += vb;
                }
                v = base == NB_FLOOR_DIVIDE ? q : m;
                r = base == NB_FLOOR_DIVIDE ? sym_floordiv(t, ea, eb) : sym_mod(t, ea, eb);
            }
            break;
        default:
            break;
        }
    }
    if (r >= 0)
        return tv_sym(T, r, v);
    /* anything else computes with the traced values (guarded) */
    if (dyn_specialize(T, a) || dyn_specialize(T, b))
        return -1;
    return -2;
}

int32_t dyn_compare(tracer *T, int cmp, int32_t a, int32_t b)
{
    if (T->vals[a].kind != V_SYM && T->vals[b].kind != V_SYM)
        return -2;
    int32_t ea, eb;
    int64_t va, vb;
    int ka = int_operand(T, a, &ea, &va), kb = ka > 0 ? int_operand(T, b, &eb, &vb) : 0;
    if (ka < 0 || kb < 0)
        return -1;
    if (!ka || !kb) {
        if (dyn_specialize(T, a) || dyn_specialize(T, b))
            return -1;
        return -2;
    }
    int res;
    switch (cmp) {
    case Py_LT: res = va < vb; break;
    case Py_LE: res = va <= vb; break;
    case Py_EQ: res = va == vb; break;
    case Py_NE: res = va != vb; break;
    case Py_GT: res = va > vb; break;
    default: res = va >= vb; break;
    }
    int64_t c;
    int32_t diff = chk(T, sym_sub(&T->r->dyn->t, ea, eb));
    if (diff < 0)
        return -1;
    if (!sym_is_const(&T->r->dyn->t, diff, &c)) {   /* the outcome depends on the symbols: guarded */
        static const int negate[6] = { Py_GE, Py_GT, Py_NE, Py_EQ, Py_LE, Py_LT };
        if (add_rel(T, res ? cmp : negate[cmp], ea, eb))
            return -1;
    }
    return tv_obj(T, res ? Py_True : Py_False, -1);
}

int dyn_truth(tracer *T, int32_t v, int *out)
{
    tv *x = &T->vals[v];
    int64_t h = PyLong_AsLongLong(x->obj);
    *out = h != 0;
    int32_t zero = cst(T, 0);
    return zero < 0 ? -1 : add_rel(T, *out ? Py_NE : Py_EQ, x->node, zero);
}

int32_t dyn_arange_len(tracer *T, int32_t end, int64_t start, int64_t step)
{
    if (!T->r->dyn || step == 0)
        return -1;
    sym_table *t = &T->r->dyn->t;
    int32_t n = chk(T, sym_sub(t, end, cst(T, start)));
    if (n >= 0 && step != 1)
        n = chk(T, sym_floordiv(t, chk(T, sym_add(t, n, cst(T, step > 0 ? step - 1 : step + 1))), cst(T, step)));
    return n < 0 ? -1 : chk(T, sym_max(t, n, cst(T, 0)));
}

int dyn_scalar(tracer *T, int32_t id, int32_t e)
{
    return dims_room(T, id + 1) || add_attr(T, id, SA_SCALAR, 0, e);
}

int dyn_guard(tracer *T, int op, int32_t e, int64_t c)
{
    if (!T->r->dyn || e < 0)
        return 0;
    int32_t k = cst(T, c);
    return k < 0 ? -1 : add_rel(T, op, e, k);
}

int32_t dyn_dim_ex(tracer *T, int32_t node, int d)
{
    tr_dyn *D = T->r->dyn;
    return D && node >= 0 && node < D->ndims ? D->dims[node][d] : -1;
}

void dyn_pend_dims(tracer *T, int32_t node, int first, int n)
{
    tr_dyn *D = T->r->dyn;
    if (!D)
        return;
    int32_t e[SMELT_MAX_DIMS];
    for (int d = 0; d < n && d < SMELT_MAX_DIMS; d++)
        e[d] = node < D->ndims ? D->dims[node][first + d] : -1;
    dyn_pend_shape(T, e, n);
}

/* A slice bound (expression e or constant c; has: given) normalised into
 * [0, len] as Python does; a symbolic bound's sign is guarded. */
static int32_t norm_bound(tracer *T, int32_t e, int64_t c, int has, int32_t len, int is_end)
{
    sym_table *t = &T->r->dyn->t;
    if (!has)
        return is_end ? len : cst(T, 0);
    int neg = c < 0;
    if (e < 0) {
        e = cst(T, c);
    } else {
        int32_t zero = cst(T, 0);
        if (zero < 0 || add_rel(T, neg ? Py_LT : Py_GE, e, zero))
            return -1;
    }
    if (e < 0)
        return -1;
    if (neg)
        return chk(T, sym_max(t, chk(T, sym_add(t, len, e)), cst(T, 0)));
    return chk(T, sym_min(t, e, len));
}

int dyn_pend_slice_of(tracer *T, int32_t node, int d, int32_t sx, int64_t s, int has_s, int32_t ex_, int64_t e,
                      int has_e)
{
    tr_dyn *D = T->r->dyn;
    if (!D)
        return 0;
    int32_t len = ex(T, node, d);
    int64_t c;
    if (len < 0)
        return -1;
    if (sx < 0 && ex_ < 0 && sym_is_const(&D->t, len, &c))
        return 0;   /* all static */
    int32_t lo = norm_bound(T, sx, s, has_s, len, 0), hi = lo < 0 ? -1 : norm_bound(T, ex_, e, has_e, len, 1);
    if (hi >= 0)
        hi = chk(T, sym_max(&D->t, hi, lo));
    if (lo < 0 || hi < 0)
        return -1;
    dyn_pend_slice(T, lo, hi);
    return 0;
}

int dyn_pend_index(tracer *T, int32_t node, int d, int32_t ix, int64_t iv)
{
    tr_dyn *D = T->r->dyn;
    if (!D)
        return 0;
    int32_t len = ex(T, node, d);
    int64_t c;
    if (len < 0)
        return -1;
    if (ix < 0 && sym_is_const(&D->t, len, &c))
        return 0;   /* all static */
    sym_table *t = &D->t;
    int32_t zero = cst(T, 0), i = ix >= 0 ? ix : cst(T, iv);
    if (zero < 0 || i < 0 || (ix >= 0 && add_rel(T, iv < 0 ? Py_LT : Py_GE, ix, zero)))
        return -1;
    int32_t lo = iv < 0 ? chk(T, sym_add(t, len, i)) : i;
    /* in range: 0 <= lo < len */
    if (lo < 0 || (iv < 0 ? add_rel(T, Py_GE, lo, zero) : add_rel(T, Py_LT, lo, len)))
        return -1;
    int32_t hi = chk(T, sym_add(t, lo, cst(T, 1)));
    if (hi < 0)
        return -1;
    dyn_pend_slice(T, lo, hi);
    return 0;
}

void dyn_pend_bound(tracer *T, int32_t v)
{
    if (!T->r->dyn)
        return;
    T->dyn_pend = 3;   /* (a number: a constant bound) */
    T->dyn_pend_start = T->vals[v].kind == V_SYM ? T->vals[v].node : -1;
}

int32_t dyn_value(tracer *T, int32_t e, int64_t v)
{
    return e < 0 || !T->r->dyn ? tv_int(T, v) : tv_sym(T, e, v);
}

void dyn_pend_shape(tracer *T, const int32_t *ex_, int n)
{
    if (!T->r->dyn)
        return;
    T->dyn_pend = 1;
    for (int d = 0; d < n && d < SMELT_MAX_DIMS; d++)
        T->dyn_pend_ex[d] = ex_[d];
}

void dyn_pend_slice(tracer *T, int32_t start, int32_t end)
{
    if (!T->r->dyn)
        return;
    T->dyn_pend = 2;
    T->dyn_pend_start = start;
    T->dyn_pend_end = end;
}

/* ---------- per call ---------- */

int tracer_dyn_values(const tr_result *r, const int64_t (*sizes)[SMELT_MAX_DIMS], int64_t *vals, char *why,
                      size_t whylen)
{
    const tr_dyn *D = r->dyn;
    for (int k = 0; k < D->t.nvars; k++)
        vals[k] = sizes[D->var_input[k]][D->var_dim[k]];
    /* every input size that is a symbol has that symbol's value */
    for (int32_t i = 0; i < r->graph->n && i < D->ndims; i++) {
        const smelt_node *n = &r->graph->nodes[i];
        if (n->op != SMELT_OP_INPUT)
            continue;
        for (int d = 0; d < n->ndim; d++) {
            int32_t e = D->dims[i][d];
            if (e < 0)
                continue;
            int64_t k = D->t.e[e].c;
            if (sizes[n->a.input.index][d] != vals[k]) {
                snprintf(why, whylen, "input %d size %d is %lld, but s%lld is %lld (they were equal when traced)",
                         (int)n->a.input.index, d, (long long)sizes[n->a.input.index][d], (long long)k,
                         (long long)vals[k]);
                return 0;
            }
        }
    }
    for (int32_t i = 0; i < D->nrels; i++)
        if (sym_rel_check(&D->t, &D->rels[i], vals) != 1) {
            char buf[200];
            sym_rel_print(&D->t, &D->rels[i], buf, sizeof buf);
            snprintf(why, whylen, "%s failed", buf);
            return 0;
        }
    return 1;
}

smelt_graph *tracer_dyn_graph(const tr_result *r, const int64_t *vals, const int64_t (*strides)[SMELT_MAX_DIMS],
                              char *err, size_t errlen)
{
    const tr_dyn *D = r->dyn;
    const smelt_graph *g = r->graph;
    smelt_graph *h = smelt_graph_new();
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->default_float = g->default_float;
    int32_t ai = 0;   /* attrs are in node order */
    for (int32_t i = 0; i < g->n; i++) {
        const smelt_node *n = &g->nodes[i];
        int32_t id;
        if (n->op == SMELT_OP_INPUT || n->op == SMELT_OP_SCALAR) {
            int64_t shape[SMELT_MAX_DIMS], sv = n->a.scalar.i;
            for (; ai < D->nattrs && D->attrs[ai].node == i; ai++)
                if (sym_eval(&D->t, D->attrs[ai].expr, vals, &sv)) {
                    snprintf(err, errlen, "a size expression of node %d overflows", (int)i);
                    goto fail;
                }
            for (int d = 0; d < n->ndim; d++)
                if (i >= D->ndims || D->dims[i][d] < 0 || sym_eval(&D->t, D->dims[i][d], vals, &shape[d]))
                    shape[d] = n->shape[d];
            id = n->op == SMELT_OP_INPUT
                     ? smelt_graph_input(h, (smelt_dtype)n->dtype, n->ndim, shape, strides[n->a.input.index])
                     : smelt_graph_scalar(h, (smelt_dtype)n->dtype, n->a.scalar.f, sv);
        } else {
            smelt_node p = smelt_node_proto(n);
            for (; ai < D->nattrs && D->attrs[ai].node == i; ai++) {
                const sym_attr *a = &D->attrs[ai];
                int64_t v;
                if (sym_eval(&D->t, a->expr, vals, &v)) {
                    snprintf(err, errlen, "a size expression of node %d overflows", (int)i);
                    goto fail;
                }
                if (a->field == SA_SHAPE)
                    p.shape[a->d] = v;
                else if (a->field == SA_BOUND)
                    p.a.gather.n = v;
                else if (a->field == SA_SCALAR)
                    p.a.scalar.i = v, p.a.scalar.f = (double)v;
                else if (a->field == SA_START)
                    p.a.slice.start = v;
                else
                    p.a.slice.end = v;
            }
            id = smelt_graph_add(h, &p);
        }
        if (id != i) {
            snprintf(err, errlen, "node %d: %s", (int)i, h->err);
            goto fail;
        }
        for (int d = 0; d < n->ndim && i < D->ndims; d++) {
            int64_t want = n->shape[d];
            if (D->dims[i][d] >= 0 && sym_eval(&D->t, D->dims[i][d], vals, &want)) {
                snprintf(err, errlen, "a size expression of node %d overflows", (int)i);
                goto fail;
            }
            if (h->nodes[i].shape[d] != want) {
                snprintf(err, errlen, "node %d (%s) size %d: %lld, its expression %lld", (int)i,
                         smelt_op_name((smelt_op)n->op), d, (long long)h->nodes[i].shape[d], (long long)want);
                goto fail;
            }
        }
    }
    for (int32_t k = 0; k < g->nout; k++)
        if (smelt_graph_output(h, g->outputs[k])) {
            snprintf(err, errlen, "%s", h->err);
            goto fail;
        }
    return h;
fail:
    smelt_graph_free(h);
    return NULL;
}

char *tracer_dyn_describe(const tr_result *r)
{
    const tr_dyn *D = r->dyn;
    size_t cap = 256 + (size_t)(D->t.nvars + D->nrels) * 160, used = 0;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    s[0] = 0;
    for (int k = 0; k < D->t.nvars; k++)
        used += (size_t)snprintf(s + used, cap - used, "s%d = size %d of graph input %d (traced as %lld)\n", k,
                                 (int)D->var_dim[k], (int)D->var_input[k], (long long)D->hint[k]);
    for (int32_t i = 0; i < D->nrels && used < cap; i++) {
        char buf[140];
        sym_rel_print(&D->t, &D->rels[i], buf, sizeof buf);
        used += (size_t)snprintf(s + used, cap - used, "guard: %s\n", buf);
    }
    return s;
}
