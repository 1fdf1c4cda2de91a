/* views.c — the geometry eager gives a view of a graph input: the sizes,
 * strides and storage offset of a chain of VIEW nodes, computed by the
 * rules of torch's view ops (ATen's computeStride for view/reshape), so
 * that a compiled function returning `x`, `x.view(3)` or `x.t()[1:]`
 * returns a tensor that shares x's memory exactly as eager's does. */
#include "tstate.h"

#include <string.h>

/* New strides for viewing a tensor of shape/stride `os/ost` (on dims) as
 * shape `ns` (nn dims), as ATen's computeStride: 1 with out filled, 0
 * when no strides exist (reshape then copies, view raises). */
static int reshape_strides(const int64_t *os, const int64_t *ost, int on, const int64_t *ns, int nn, int64_t *out)
{
    int64_t numel = 1;
    for (int d = 0; d < on; d++)
        numel *= os[d];
    if (numel == 0) {   /* any strides address no memory: eager's resize-like choice */
        int same = on == nn && !memcmp(os, ns, sizeof(int64_t) * (size_t)on);
        int64_t z = 1;
        for (int d = nn - 1; d >= 0; d--) {
            out[d] = same ? ost[d] : z;
            z *= ns[d] > 1 ? ns[d] : 1;
        }
        return 1;
    }
    int view_d = nn - 1;
    int64_t chunk = on ? ost[on - 1] : 1, tensor_numel = 1, view_numel = 1;
    for (int td = on - 1; td >= 0; td--) {
        tensor_numel *= os[td];
        if (td == 0 || (os[td - 1] != 1 && ost[td - 1] != tensor_numel * chunk)) {
            while (view_d >= 0 && (view_numel < tensor_numel || ns[view_d] == 1)) {
                out[view_d] = view_numel * chunk;
                view_numel *= ns[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel)
                return 0;
            if (td > 0) {
                chunk = ost[td - 1];
                tensor_numel = view_numel = 1;
            }
        }
    }
    for (; view_d >= 0; view_d--) {   /* a 0-d source viewed with size-1 dims */
        if (ns[view_d] != 1)
            return 0;
        out[view_d] = 1;
    }
    return 1;
}

/* Strides and offset of view node n over its source's s (strides) and
 * *off: 1, or 0 when eager would not view (a reshape that copies). */
static int view_step(const smelt_graph *g, const smelt_node *n, const int64_t *s, int64_t *out, int64_t *off)
{
    const smelt_node *in = &g->nodes[n->src[0]];
    switch ((smelt_op)n->op) {
    case SMELT_OP_RESHAPE: return reshape_strides(in->shape, s, in->ndim, n->shape, n->ndim, out);
    case SMELT_OP_PERMUTE:
        for (int d = 0; d < n->ndim; d++)
            out[d] = s[n->a.perm.perm[d]];
        return 1;
    case SMELT_OP_EXPAND: {
        int lead = n->ndim - in->ndim;
        for (int d = 0; d < n->ndim; d++)
            out[d] = d < lead || (in->shape[d - lead] == 1 && n->shape[d] != 1) ? 0 : s[d - lead];
        return 1;
    }
    case SMELT_OP_SLICE:
        memcpy(out, s, sizeof(int64_t) * in->ndim);
        *off += n->a.slice.start * s[n->a.slice.dim];
        out[n->a.slice.dim] *= n->a.slice.step;
        return 1;
    case SMELT_OP_SQUEEZE:
        for (int d = 0, k = 0; d < in->ndim; d++)
            if (d != n->a.axis.dim)
                out[k++] = s[d];
        return 1;
    case SMELT_OP_UNSQUEEZE:
        for (int d = 0, k = 0; d < n->ndim; d++)
            out[d] = d == n->a.axis.dim ? (k < in->ndim ? in->shape[k] * s[k] : 1) : s[k++];
        return 1;
    case SMELT_OP_DIAGONAL: {
        int64_t o = n->a.diag.offset;
        for (int d = 0, k = 0; d < in->ndim; d++)
            if (d != n->a.diag.dim1 && d != n->a.diag.dim2)
                out[k++] = s[d];
        out[n->ndim - 1] = s[n->a.diag.dim1] + s[n->a.diag.dim2];
        if (n->shape[n->ndim - 1] > 0)
            *off += o >= 0 ? o * s[n->a.diag.dim2] : -o * s[n->a.diag.dim1];
        return 1;
    }
    case SMELT_OP_UNFOLD:
        memcpy(out, s, sizeof(int64_t) * in->ndim);
        out[n->a.unfold.dim] = s[n->a.unfold.dim] * n->a.unfold.step;
        out[in->ndim] = s[n->a.unfold.dim] * n->a.unfold.dil;
        return 1;
    default:
        return 0;
    }
}

int tr_reshape_strides(const smelt_node *in, const int64_t *s, const smelt_node *n, int64_t *out)
{
    return reshape_strides(in->shape, s, in->ndim, n->shape, n->ndim, out);
}

int tr_view_strides(const smelt_graph *g, const smelt_node *n, const int64_t *s, int64_t *out)
{
    int64_t off = 0;
    return view_step(g, n, s, out, &off);
}

int tr_view_geometry(const smelt_graph *g, int32_t base, const int64_t *base_stride, int32_t id, int64_t *stride,
                     int64_t *offset)
{
    int32_t chain[64];
    int n = 0;
    for (int32_t i = id; i != base; i = g->nodes[i].src[0]) {
        if (n == 64 || i < base || smelt_op_kind_of((smelt_op)g->nodes[i].op) != SMELT_KIND_VIEW)
            return 0;
        chain[n++] = i;
    }
    int64_t s[SMELT_MAX_DIMS], t[SMELT_MAX_DIMS], off = 0;
    memcpy(s, base_stride, sizeof(int64_t) * g->nodes[base].ndim);
    while (n > 0) {
        if (!view_step(g, &g->nodes[chain[--n]], s, t, &off))
            return 0;
        memcpy(s, t, sizeof s);
    }
    memcpy(stride, s, sizeof(int64_t) * g->nodes[id].ndim);
    *offset = off;
    return 1;
}

int32_t tr_view_base(const smelt_graph *g, int32_t id)
{
    while (smelt_op_kind_of((smelt_op)g->nodes[id].op) == SMELT_KIND_VIEW)
        id = g->nodes[id].src[0];
    return id;
}

void tr_contiguous_strides(const smelt_node *n, int64_t *stride)
{
    int64_t z = 1;
    for (int d = n->ndim - 1; d >= 0; d--) {
        stride[d] = z;
        z *= n->shape[d] > 1 ? n->shape[d] : 1;
    }
}

PyObject *tr_view_tuple(const smelt_node *n, const int64_t *st, int64_t off)
{
    PyObject *size = PyTuple_New(n->ndim), *stride = PyTuple_New(n->ndim), *res = NULL;
    for (int d = 0; size && stride && d < n->ndim; d++) {
        PyTuple_SET_ITEM(size, d, PyLong_FromLongLong(n->shape[d]));
        PyTuple_SET_ITEM(stride, d, PyLong_FromLongLong(st[d]));
    }
    if (size && stride && !PyErr_Occurred())
        res = Py_BuildValue("(OOL)", size, stride, (long long)off);
    Py_XDECREF(size);
    Py_XDECREF(stride);
    return res;
}

PyObject *tracer_view_spec(const tr_result *r, const smelt_graph *g, int32_t o,
                           const int64_t (*in_strides)[SMELT_MAX_DIMS])
{
    const tr_out *x = &r->outs[o];
    if ((x->kind != TO_VIEW && x->kind != TO_OUTVIEW) || x->node < 0 || x->node >= g->n)
        return NULL;
    int32_t b = tr_view_base(g, x->node);
    int64_t bst[SMELT_MAX_DIMS], st[SMELT_MAX_DIMS], off = 0;
    const smelt_node *bn = &g->nodes[b];
    if (x->kind == TO_VIEW) {
        if (bn->op != SMELT_OP_INPUT || bn->a.input.index != x->index)
            return NULL;   /* (a host call's view of an input) */
        memcpy(bst, in_strides[x->index], sizeof bst);
    } else {
        if (x->index < 0 || x->index >= g->nout)
            return NULL;
        const smelt_node *p = &g->nodes[g->outputs[x->index]];
        if (g->outputs[x->index] == b) {
            tr_contiguous_strides(bn, bst);
        } else if (p->op == SMELT_OP_PERMUTE && p->src[0] == b) {   /* b's dims permuted into a contiguous output */
            int64_t ps[SMELT_MAX_DIMS];
            tr_contiguous_strides(p, ps);
            for (int i = 0; i < p->ndim; i++)
                bst[p->a.perm.perm[i]] = ps[i];
        } else {
            return NULL;
        }
    }
    if (!tr_view_geometry(g, b, bst, x->node, st, &off))
        return NULL;
    return tr_view_tuple(&g->nodes[x->node], st, off);
}
