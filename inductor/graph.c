/* smelt graph IR: op table, dtype rules, builders with torch shape and type
 * inference, verifier, printer and canonical serialisation.
 *
 * One inference routine (infer_node) is the spec: the builders run it to
 * fill a node, the verifier re-runs it on every stored node and compares.
 *
 * Conventions beyond graph.h (callers of smelt_graph_add):
 *  - Reduction proto dims: bit b set for dim b (b < 16) or dim b - 32
 *    (b >= 16), i.e. `dims |= 1u << (d & 31)` for d in [-16, 15]; 0 means
 *    every dim (torch's dim=None and dim=[]). Stored normalised.
 *  - CLAMP proto dtype: the category of the Python bounds, SMELT_BOOL,
 *    SMELT_I64 or SMELT_F64 (the highest of the two); F64 bounds are read
 *    from flo/fhi, the others from ilo/ihi. The node stores its result dtype
 *    and the bounds converted to that dtype's domain.
 *  - ARANGE proto: ndim 1 and shape[0] = number of elements (the caller
 *    computes it with torch.arange's rules); any step, as torch (an integer
 *    dtype with a fractional step truncates the step, possibly to 0).
 *  - SQUEEZE of a dim whose size is not 1 (or of a 0-d tensor) is a no-op in
 *    torch: smelt_graph_add returns the source's index and adds no node.
 *  - CAT takes sources of equal rank only (torch's legacy skipping of 1-d
 *    empty tensors is rejected) and promotes their dtypes.
 *  - SCALAR nodes may only feed BINARY and TERNARY ops (not WHERE's
 *    condition) and may not be outputs; use FULL for a 0-d tensor.
 *  - The default float dtype (int / int, exp of an int, Python float scalar
 *    with an integer tensor) is float32.
 */
#include "graph.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define NODE_MAX_BYTES 256

/* ------------------------------------------------------------------ */
/* op table                                                           */

static const char *const op_names[SMELT_NOPS] = {
#define SMELT_OP(NAME, name, arity, kind) #name,
#include "ops.def"
};

static const signed char op_arities[SMELT_NOPS] = {
#define SMELT_OP(NAME, name, arity, kind) arity,
#include "ops.def"
};

static const unsigned char op_kinds[SMELT_NOPS] = {
#define SMELT_OP(NAME, name, arity, kind) SMELT_KIND_##kind,
#include "ops.def"
};

const char *smelt_op_name(smelt_op op)
{
    return (unsigned)op < SMELT_NOPS ? op_names[op] : "<bad op>";
}

int smelt_op_arity(smelt_op op)
{
    return (unsigned)op < SMELT_NOPS ? op_arities[op] : 0;
}

smelt_op_kind smelt_op_kind_of(smelt_op op)
{
    return (unsigned)op < SMELT_NOPS ? (smelt_op_kind)op_kinds[op] : SMELT_KIND_LEAF;
}

int smelt_op_from_name(const char *name)
{
    for (int i = 0; name && i < SMELT_NOPS; i++)
        if (strcmp(op_names[i], name) == 0)
            return i;
    return -1;
}

/* ------------------------------------------------------------------ */
/* dtypes                                                             */

static const char *const dtype_names[SMELT_NDTYPES] = {
    "bool", "uint8", "int8", "int16", "int32", "int64",
    "float16", "bfloat16", "float32", "float64",
};

static const unsigned char dtype_sizes[SMELT_NDTYPES] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};

const char *smelt_dtype_name(smelt_dtype dt)
{
    return (unsigned)dt < SMELT_NDTYPES ? dtype_names[dt] : "<bad dtype>";
}

size_t smelt_dtype_size(smelt_dtype dt)
{
    return (unsigned)dt < SMELT_NDTYPES ? dtype_sizes[dt] : 0;
}

int smelt_dtype_is_float(smelt_dtype dt)
{
    return dt >= SMELT_F16 && dt <= SMELT_F64;
}

int smelt_dtype_is_int(smelt_dtype dt)
{
    return dt >= SMELT_U8 && dt <= SMELT_I64;
}

/* torch.promote_types: bool < integers < floats; uint8 with int8 gives
 * int16; float16 with bfloat16 gives float32; otherwise the wider one. */
smelt_dtype smelt_dtype_promote(smelt_dtype a, smelt_dtype b)
{
    if (a == b || b == SMELT_BOOL)
        return a;
    if (a == SMELT_BOOL)
        return b;
    int fa = smelt_dtype_is_float(a), fb = smelt_dtype_is_float(b);
    if (fa != fb)
        return fa ? a : b;
    if (fa && a <= SMELT_BF16 && b <= SMELT_BF16)     /* float16 with bfloat16 */
        return SMELT_F32;
    if (!fa && (a == SMELT_U8 || b == SMELT_U8)) {
        smelt_dtype other = a == SMELT_U8 ? b : a;
        return other == SMELT_I8 ? SMELT_I16 : other;
    }
    return a > b ? a : b;
}

int64_t smelt_node_numel(const smelt_node *n)
{
    int64_t p = 1;
    for (int d = 0; d < n->ndim; d++)
        p *= n->shape[d];
    return p;
}

/* torch's checked conversion of an integer value to dtype dt: signed types
 * take [min, max]; uint8 also takes [-255, -1] (two's complement wrap);
 * float16 takes [-65504, 65504]; bool, int64 and the wider floats take any
 * int64. */
static bool int_value_fits(smelt_dtype dt, int64_t v)
{
    switch (dt) {
    case SMELT_U8: return v >= -255 && v <= 255;
    case SMELT_I8: return v >= INT8_MIN && v <= INT8_MAX;
    case SMELT_I16: return v >= INT16_MIN && v <= INT16_MAX;
    case SMELT_I32: return v >= INT32_MIN && v <= INT32_MAX;
    case SMELT_F16: return v >= -65504 && v <= 65504;
    default: return true;
    }
}

/* Float value to a float dtype: NaN and infinities always fit, finite
 * values up to the dtype's largest finite magnitude. */
static bool float_value_fits(smelt_dtype dt, double v)
{
    if (isnan(v) || isinf(v))
        return true;
    switch (dt) {
    case SMELT_F16: return fabs(v) <= 65504.0;
    case SMELT_BF16: return fabs(v) <= 3.38953138925153547590470800371487866880e38;
    case SMELT_F32: return fabs(v) <= FLT_MAX;
    default: return true;
    }
}

/* ------------------------------------------------------------------ */
/* inference context and messages                                     */

typedef struct infer_ctx {
    const smelt_graph *g;
    const smelt_node *in;       /* proto: what the caller asked for */
    smelt_node *out;            /* the node being filled */
    const smelt_node *s[SMELT_MAX_SRC];
    char *err;
    size_t errlen;
} infer_ctx;

/* Message fragments returned by value (a shape is at most 8 x 22 chars). */
typedef struct { char s[192]; } text_buf;
typedef struct { char s[224]; } value_buf;
typedef struct { char s[SMELT_MAX_SRC * 230]; } list_buf;

/* "[4, 5]" */
static text_buf fmt_shape(int ndim, const int64_t *shape)
{
    text_buf t;
    size_t k = 0;
    t.s[k++] = '[';
    t.s[k] = 0;
    for (int d = 0; d < ndim && d < SMELT_MAX_DIMS; d++)
        k += (size_t)snprintf(t.s + k, sizeof t.s - k, "%s%lld", d ? ", " : "",
                              (long long)shape[d]);
    snprintf(t.s + k, sizeof t.s - k, "]");
    return t;
}

/* "float32[4, 5]", or "Python float" for a weak scalar. */
static value_buf fmt_value(const smelt_node *n)
{
    value_buf t;
    if (n->op == SMELT_OP_SCALAR) {
        snprintf(t.s, sizeof t.s, "Python %s", n->dtype == SMELT_BOOL ? "bool"
                 : n->dtype == SMELT_I64 ? "int" : "float");
        return t;
    }
    snprintf(t.s, sizeof t.s, "%s%s", smelt_dtype_name((smelt_dtype)n->dtype),
             fmt_shape(n->ndim, n->shape).s);
    return t;
}

#define SHP(n) (fmt_shape((n)->ndim, (n)->shape).s)
#define VAL(n) (fmt_value(n).s)
#define OPS (fmt_sources(c, 0, 2).s)   /* both operands of a binary op */

/* Writes "<op>: <message>" into the context's error buffer; returns -1. */
static int fail(infer_ctx *c, const char *fmt, ...)
{
    if (!c->errlen)
        return -1;
    int k = snprintf(c->err, c->errlen, "%s: ", smelt_op_name((smelt_op)c->in->op));
    if (k >= 0 && (size_t)k < c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err + k, c->errlen - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Source values joined for messages: "float32[3, 4] and int64[5]". */
static list_buf fmt_sources(const infer_ctx *c, int from, int to)
{
    list_buf t;
    size_t k = 0;
    t.s[0] = 0;
    for (int i = from; i < to && i < SMELT_MAX_SRC; i++)
        k += (size_t)snprintf(t.s + k, sizeof t.s - k, "%s%s",
                              i == from ? "" : i + 1 == to ? " and " : ", ", VAL(c->s[i]));
    return t;
}

/* Normalises dim d against ndim (valid range [-ndim, ndim-1]) into *out. */
static int norm_dim(infer_ctx *c, int64_t d, int ndim, const smelt_node *s, int *out)
{
    if (d < -ndim || d >= ndim)
        return fail(c, "dim %lld out of range for shape %s (expected [%d, %d])",
                    (long long)d, SHP(s), -ndim, ndim - 1);
    *out = (int)(d < 0 ? d + ndim : d);
    return 0;
}

static void copy_shape(smelt_node *dst, const smelt_node *src)
{
    dst->ndim = src->ndim;
    memcpy(dst->shape, src->shape, sizeof dst->shape);
}

/* Shape given by the proto (FULL, IOTA, ARANGE, RESHAPE, EXPAND, INPUT):
 * rank within bounds, and every size >= min_size. */
static int proto_shape_ok(infer_ctx *c, int64_t min_size)
{
    const smelt_node *in = c->in;
    if (in->ndim > SMELT_MAX_DIMS)
        return fail(c, "rank %d exceeds the maximum of %d", in->ndim, SMELT_MAX_DIMS);
    for (int d = 0; d < in->ndim; d++)
        if (in->shape[d] < min_size)
            return fail(c, "invalid size %lld at dim %d of shape %s",
                        (long long)in->shape[d], d, SHP(in));
    return 0;
}

static int dtype_ok(infer_ctx *c, int dt)
{
    if (dt < 0 || dt >= SMELT_NDTYPES)
        return fail(c, "invalid dtype %d", dt);
    return 0;
}

/* ------------------------------------------------------------------ */
/* type promotion (torch.result_type)                                 */

/* torch's combine_categories(higher, lower); -1 is "undefined". */
static int combine_categories(int hi, int lo)
{
    if (hi >= 0 && smelt_dtype_is_float((smelt_dtype)hi))
        return hi;
    if (hi == SMELT_BOOL || (lo >= 0 && smelt_dtype_is_float((smelt_dtype)lo)))
        return hi < 0 ? lo : lo < 0 ? hi
               : (int)smelt_dtype_promote((smelt_dtype)hi, (smelt_dtype)lo);
    return hi >= 0 ? hi : lo;
}

static void promo_slot(int *slot, smelt_dtype dt)
{
    *slot = *slot < 0 ? (int)dt : (int)smelt_dtype_promote((smelt_dtype)*slot, dt);
}

/* torch.result_type of sources [from, to): dimensioned tensors win over
 * 0-d tensors, which win over Python scalars, except that a lower priority
 * class of a higher category (bool < int < float) still raises the result;
 * a Python float counts as the default float dtype. */
smelt_dtype smelt_result_type(const smelt_node *const *src, int n, smelt_dtype default_float)
{
    int dim = -1, zero = -1, wrapped = -1;
    for (int i = 0; i < n; i++) {
        const smelt_node *s = src[i];
        if (s->op == SMELT_OP_SCALAR)
            promo_slot(&wrapped, s->dtype == SMELT_F64 ? default_float : (smelt_dtype)s->dtype);
        else
            promo_slot(s->ndim ? &dim : &zero, (smelt_dtype)s->dtype);
    }
    return (smelt_dtype)combine_categories(dim, combine_categories(zero, wrapped));
}

static smelt_dtype result_type(const infer_ctx *c, int from, int to)
{
    return smelt_result_type(c->s + from, to - from, (smelt_dtype)c->g->default_float);
}

/* Broadcasts the shapes of sources [0, k) into c->out. */
static int broadcast(infer_ctx *c, int k)
{
    int nd = 0;
    for (int i = 0; i < k; i++)
        nd = c->s[i]->ndim > nd ? c->s[i]->ndim : nd;
    c->out->ndim = (uint8_t)nd;
    for (int d = 0; d < nd; d++) {
        int64_t size = 1;
        for (int i = 0; i < k; i++) {
            int sd = d - (nd - c->s[i]->ndim);
            int64_t v = sd < 0 ? 1 : c->s[i]->shape[sd];
            if (v != 1 && size != 1 && v != size)
                return fail(c, "shapes %s cannot broadcast", fmt_sources(c, 0, k).s);
            size = v != 1 ? v : size;
        }
        c->out->shape[d] = size;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* leaves                                                             */

static int infer_input(infer_ctx *c)
{
    const smelt_node *in = c->in;
    if (dtype_ok(c, in->dtype) || proto_shape_ok(c, 0))
        return -1;
    for (int d = 0; d < in->ndim; d++)
        if (in->stride[d] < 0)
            return fail(c, "negative stride %lld at dim %d (shape %s)",
                        (long long)in->stride[d], d, SHP(in));
    c->out->dtype = in->dtype;
    copy_shape(c->out, in);
    memcpy(c->out->stride, in->stride, sizeof in->stride[0] * in->ndim);
    c->out->a.input.index = in->a.input.index;
    return 0;
}

static int infer_scalar(infer_ctx *c)
{
    const smelt_node *in = c->in;
    if (in->ndim != 0)
        return fail(c, "a Python scalar is 0-d, got shape %s", SHP(in));
    if (in->dtype != SMELT_BOOL && in->dtype != SMELT_I64 && in->dtype != SMELT_F64)
        return fail(c, "dtype must be bool, int64 or float64 (the scalar's category), got %s",
                    smelt_dtype_name((smelt_dtype)in->dtype));
    c->out->dtype = in->dtype;
    if (in->dtype == SMELT_F64)
        c->out->a.scalar.f = in->a.scalar.f;
    else
        c->out->a.scalar.i = in->dtype == SMELT_BOOL ? in->a.scalar.i != 0 : in->a.scalar.i;
    return 0;
}

static int infer_full(infer_ctx *c)
{
    const smelt_node *in = c->in;
    smelt_dtype dt = (smelt_dtype)in->dtype;
    if (dtype_ok(c, in->dtype) || proto_shape_ok(c, 0))
        return -1;
    c->out->dtype = in->dtype;
    copy_shape(c->out, in);
    if (smelt_dtype_is_float(dt)) {
        if (!float_value_fits(dt, in->a.scalar.f))
            return fail(c, "value %g cannot be converted to %s without overflow",
                        in->a.scalar.f, smelt_dtype_name(dt));
        c->out->a.scalar.f = in->a.scalar.f;
        return 0;
    }
    if (!int_value_fits(dt, in->a.scalar.i))
        return fail(c, "value %lld cannot be converted to %s without overflow",
                    (long long)in->a.scalar.i, smelt_dtype_name(dt));
    c->out->a.scalar.i = dt == SMELT_BOOL ? in->a.scalar.i != 0 : in->a.scalar.i;
    return 0;
}

static int infer_arange(infer_ctx *c)
{
    const smelt_node *in = c->in;
    if (dtype_ok(c, in->dtype) || proto_shape_ok(c, 0))
        return -1;
    if (in->dtype == SMELT_BOOL)
        return fail(c, "dtype bool is not supported");
    if (in->ndim != 1)
        return fail(c, "shape must be 1-d (the element count), got %s", SHP(in));
    c->out->dtype = in->dtype;
    copy_shape(c->out, in);
    if (smelt_dtype_is_float((smelt_dtype)in->dtype)) {
        c->out->a.arange.fstart = in->a.arange.fstart;
        c->out->a.arange.fstep = in->a.arange.fstep;
    } else {
        c->out->a.arange.istart = in->a.arange.istart;
        c->out->a.arange.istep = in->a.arange.istep;
    }
    return 0;
}

static int infer_iota(infer_ctx *c)
{
    const smelt_node *in = c->in;
    int dim;
    if (dtype_ok(c, in->dtype) || proto_shape_ok(c, 0))
        return -1;
    if (in->dtype == SMELT_BOOL)
        return fail(c, "dtype bool is not supported");
    if (in->ndim == 0)
        return fail(c, "shape must have at least one dim, got []");
    if (norm_dim(c, in->a.axis.dim, in->ndim, in, &dim))
        return -1;
    c->out->dtype = in->dtype;
    copy_shape(c->out, in);
    c->out->a.axis.dim = dim;
    return 0;
}

/* ------------------------------------------------------------------ */
/* pointwise                                                          */

/* Stores bound k (0 = min, 1 = max) of the proto, whose category is cat,
 * in the domain of the result dtype dt; it must be representable there
 * (torch's overflow check). */
static int clamp_store(infer_ctx *c, int k, int cat, smelt_dtype dt)
{
    const smelt_attrs *a = &c->in->a;
    smelt_attrs *o = &c->out->a;
    int64_t i = k ? a->clamp.ihi : a->clamp.ilo;
    double f = cat == SMELT_F64 ? (k ? a->clamp.fhi : a->clamp.flo) : (double)i;
    bool isf = smelt_dtype_is_float(dt);
    if (isf ? !float_value_fits(dt, f) : !int_value_fits(dt, i))
        return fail(c, "%s bound %g cannot be converted to %s without overflow",
                    k ? "max" : "min", f, smelt_dtype_name(dt));
    if (isf)
        *(k ? &o->clamp.fhi : &o->clamp.flo) = f;
    else
        *(k ? &o->clamp.ihi : &o->clamp.ilo) = i;
    return 0;
}

/* CLAMP: result dtype is torch.result_type(source, bounds as Python
 * scalars); bool results are rejected as torch does. */
static int infer_clamp(infer_ctx *c)
{
    const smelt_node *in = c->in, *s = c->s[0];
    int cat = in->dtype;
    if (cat != SMELT_BOOL && cat != SMELT_I64 && cat != SMELT_F64)
        return fail(c, "bounds category must be bool, int64 or float64, got %s",
                    smelt_dtype_name((smelt_dtype)cat));
    if (!in->a.clamp.has_lo && !in->a.clamp.has_hi)
        return fail(c, "at least one of min and max must be given (source %s)", VAL(s));
    int wrapped = cat == SMELT_F64 ? c->g->default_float : cat;
    smelt_dtype dt = (smelt_dtype)combine_categories(s->ndim ? s->dtype : -1,
                         combine_categories(s->ndim ? -1 : s->dtype, wrapped));
    if (dt == SMELT_BOOL)
        return fail(c, "bool result (source %s) is not supported", VAL(s));
    c->out->dtype = (uint8_t)dt;
    c->out->a.clamp.has_lo = in->a.clamp.has_lo != 0;
    c->out->a.clamp.has_hi = in->a.clamp.has_hi != 0;
    if ((in->a.clamp.has_lo && clamp_store(c, 0, cat, dt)) ||
        (in->a.clamp.has_hi && clamp_store(c, 1, cat, dt)))
        return -1;
    return 0;
}

static int infer_unary(infer_ctx *c)
{
    const smelt_node *s = c->s[0];
    smelt_dtype dt = (smelt_dtype)s->dtype;
    copy_shape(c->out, s);
    c->out->dtype = (uint8_t)dt;
    switch ((smelt_op)c->in->op) {
    case SMELT_OP_NEG:
        if (dt == SMELT_BOOL)
            return fail(c, "bool input %s is not supported; use logical_not", VAL(s));
        return 0;
    case SMELT_OP_ABS: case SMELT_OP_RELU: case SMELT_OP_FLOOR: case SMELT_OP_CEIL:
    case SMELT_OP_ROUND: case SMELT_OP_TRUNC:
        if (dt == SMELT_BOOL)
            return fail(c, "bool input %s is not supported", VAL(s));
        return 0;
    case SMELT_OP_SIGN: case SMELT_OP_DETACH:
        return 0;
    case SMELT_OP_LOGICAL_NOT: case SMELT_OP_ISNAN: case SMELT_OP_ISINF: case SMELT_OP_SIGNBIT:
        c->out->dtype = SMELT_BOOL;
        return 0;
    case SMELT_OP_BITWISE_NOT:
        if (smelt_dtype_is_float(dt))
            return fail(c, "needs an integer or bool input, got %s", VAL(s));
        return 0;
    case SMELT_OP_CAST:
        if (dtype_ok(c, c->in->dtype))
            return -1;
        c->out->dtype = c->in->dtype;
        return 0;
    case SMELT_OP_CLAMP:
        return infer_clamp(c);
    case SMELT_OP_CHECKIDX:
        if (!smelt_dtype_is_int(dt))
            return fail(c, "needs an integer index, got %s", VAL(s));
        if (c->in->a.gather.n < 0)
            return fail(c, "negative bound %lld", (long long)c->in->a.gather.n);
        c->out->dtype = SMELT_I64;
        c->out->a.gather.n = c->in->a.gather.n;
        c->out->a.gather.wrap = c->in->a.gather.wrap != 0;
        return 0;
    default:    /* float math: integers and bool compute in the default float */
        c->out->dtype = (uint8_t)(smelt_dtype_is_float(dt) ? dt : c->g->default_float);
        return 0;
    }
}

/* Per-op dtype rule of a binary op given the promoted dtype pt. */
static int binary_dtype(infer_ctx *c, smelt_dtype pt)
{
    switch ((smelt_op)c->in->op) {
    case SMELT_OP_EQ: case SMELT_OP_NE: case SMELT_OP_LT: case SMELT_OP_LE:
    case SMELT_OP_GT: case SMELT_OP_GE: case SMELT_OP_LOGICAL_AND:
    case SMELT_OP_LOGICAL_OR: case SMELT_OP_LOGICAL_XOR:
        pt = SMELT_BOOL;
        break;
    case SMELT_OP_DIV: case SMELT_OP_ATAN2:
        pt = smelt_dtype_is_float(pt) ? pt : (smelt_dtype)c->g->default_float;
        break;
    case SMELT_OP_SUB:
        if (c->s[0]->dtype == SMELT_BOOL || c->s[1]->dtype == SMELT_BOOL)
            return fail(c, "bool operands are not supported (%s); use logical_xor", OPS);
        break;
    case SMELT_OP_POW:
        if (!smelt_dtype_is_float(pt) && c->s[1]->op == SMELT_OP_SCALAR &&
            c->s[1]->dtype == SMELT_I64 && c->s[1]->a.scalar.i < 0)
            return fail(c, "integers to negative integer powers are not allowed (%s)", OPS);
        if (pt == SMELT_BOOL && c->s[1]->op == SMELT_OP_SCALAR)
            break;      /* torch: x ** True is x, x ** False is ones */
        /* fall through */
    case SMELT_OP_FLOORDIV: case SMELT_OP_FMOD: case SMELT_OP_REMAINDER:
        if (pt == SMELT_BOOL)
            return fail(c, "bool operands are not supported (%s)", OPS);
        break;
    case SMELT_OP_BITWISE_AND: case SMELT_OP_BITWISE_OR: case SMELT_OP_BITWISE_XOR:
        if (smelt_dtype_is_float(pt))
            return fail(c, "needs integer or bool operands, got %s", OPS);
        break;
    case SMELT_OP_SHL: case SMELT_OP_SHR:
        if (!smelt_dtype_is_int(pt))
            return fail(c, "needs integer operands, got %s", OPS);
        break;
    default:
        break;
    }
    c->out->dtype = (uint8_t)pt;
    return 0;
}

static int infer_binary(infer_ctx *c)
{
    if (broadcast(c, 2))
        return -1;
    return binary_dtype(c, result_type(c, 0, 2));
}

static int infer_ternary(infer_ctx *c)
{
    const smelt_node *cond = c->s[0];
    if (cond->op == SMELT_OP_SCALAR)
        return fail(c, "condition must be a bool tensor, got a %s", VAL(cond));
    if (cond->dtype != SMELT_BOOL)
        return fail(c, "condition must be bool, got %s", VAL(cond));
    if (broadcast(c, 3))
        return -1;
    c->out->dtype = (uint8_t)result_type(c, 1, 3);
    return 0;
}

/* ------------------------------------------------------------------ */
/* reductions                                                         */

/* Decodes the proto's dims (see the file comment) into a mask of
 * normalised source dims; 0 for a 0-d source. */
static int reduce_mask(infer_ctx *c, uint32_t *mask)
{
    const smelt_node *s = c->s[0];
    uint32_t m = c->in->a.red.dims, got = 0;
    if (m == 0) {
        *mask = (1u << s->ndim) - 1;
        return 0;
    }
    for (int b = 0; b < 32; b++) {
        int d;
        if (!(m >> b & 1))
            continue;
        if (norm_dim(c, b < 16 ? b : b - 32, s->ndim ? s->ndim : 1, s, &d))
            return -1;
        if (s->ndim && (got >> d & 1))
            return fail(c, "dim %d appears multiple times in dims (shape %s)", d, SHP(s));
        got |= s->ndim ? 1u << d : 0;
    }
    *mask = got;
    return 0;
}

static int reduce_dtype(infer_ctx *c)
{
    const smelt_node *s = c->s[0];
    smelt_dtype dt = (smelt_dtype)s->dtype;
    switch ((smelt_op)c->in->op) {
    case SMELT_OP_SUM: case SMELT_OP_PROD:
        dt = smelt_dtype_is_float(dt) ? dt : SMELT_I64;
        break;
    case SMELT_OP_ARGMAX: case SMELT_OP_ARGMIN:
        if (dt == SMELT_BOOL)
            return fail(c, "bool input %s is not supported", VAL(s));
        dt = SMELT_I64;
        break;
    case SMELT_OP_ANY: case SMELT_OP_ALL:   /* torch keeps uint8 for uint8 */
        dt = dt == SMELT_U8 ? SMELT_U8 : SMELT_BOOL;
        break;
    case SMELT_OP_MEAN: case SMELT_OP_VAR: case SMELT_OP_STD:
        if (!smelt_dtype_is_float(dt))
            return fail(c, "needs a floating input, got %s", VAL(s));
        break;
    default:
        break;
    }
    c->out->dtype = (uint8_t)dt;
    return 0;
}

static int infer_reduction(infer_ctx *c)
{
    const smelt_node *s = c->s[0];
    smelt_op op = (smelt_op)c->in->op;
    uint32_t mask = 0;
    bool keep = c->in->a.red.keepdim != 0;
    bool needs_elems = op == SMELT_OP_AMAX || op == SMELT_OP_AMIN ||
                       op == SMELT_OP_ARGMAX || op == SMELT_OP_ARGMIN;
    if (reduce_mask(c, &mask) || reduce_dtype(c))
        return -1;
    int nd = 0;
    for (int d = 0; d < s->ndim; d++) {
        bool red = mask >> d & 1;
        if (red && needs_elems && s->shape[d] == 0)
            return fail(c, "cannot reduce dim %d of size 0 (shape %s)", d, SHP(s));
        if (!red || keep)
            c->out->shape[nd++] = red ? 1 : s->shape[d];
    }
    c->out->ndim = (uint8_t)nd;
    c->out->a.red.dims = mask;
    c->out->a.red.keepdim = keep;
    if (op == SMELT_OP_VAR || op == SMELT_OP_STD)
        c->out->a.red.correction = c->in->a.red.correction;
    if ((op == SMELT_OP_AMAX || op == SMELT_OP_AMIN) && c->in->a.red.first) {
        int r = __builtin_popcount(mask);
        if (mask != ((1u << r) - 1) << (s->ndim - r))
            return fail(c, "first: the reduced dims must be the trailing ones");
        c->out->a.red.first = 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* views                                                              */

static int infer_reshape(infer_ctx *c)
{
    const smelt_node *in = c->in, *s = c->s[0];
    int infer_at = -1;
    int64_t known = 1, numel = smelt_node_numel(s);
    if (proto_shape_ok(c, -1))
        return -1;
    for (int d = 0; d < in->ndim; d++) {
        if (in->shape[d] == -1 && infer_at >= 0)
            return fail(c, "only one dim can be inferred in shape %s", SHP(in));
        if (in->shape[d] == -1)
            infer_at = d;
        else if (in->shape[d] && known > INT64_MAX / in->shape[d])
            return fail(c, "shape %s has too many elements", SHP(in));
        else
            known *= in->shape[d];
    }
    copy_shape(c->out, in);
    if (infer_at >= 0) {
        if (known == 0 || numel % known)
            return fail(c, "cannot infer the -1 in shape %s for input of shape %s",
                        SHP(in), SHP(s));
        c->out->shape[infer_at] = numel / known;
        known = numel;
    }
    if (known != numel)
        return fail(c, "shape %s is invalid for input of shape %s", SHP(in), SHP(s));
    return 0;
}

static int infer_permute(infer_ctx *c)
{
    const smelt_node *s = c->s[0];
    uint32_t seen = 0;
    for (int d = 0; d < SMELT_MAX_DIMS; d++) {
        int p = 0;
        if (d >= s->ndim) {
            if (c->in->a.perm.perm[d])
                return fail(c, "perm has entries beyond the rank of shape %s", SHP(s));
            continue;
        }
        if (norm_dim(c, c->in->a.perm.perm[d], s->ndim, s, &p))
            return -1;
        if (seen >> p & 1)
            return fail(c, "dim %d repeats in the permutation of shape %s", p, SHP(s));
        seen |= 1u << p;
        c->out->a.perm.perm[d] = (int8_t)p;
        c->out->shape[d] = s->shape[p];
    }
    c->out->ndim = s->ndim;
    return 0;
}

static int infer_expand(infer_ctx *c)
{
    const smelt_node *in = c->in, *s = c->s[0];
    if (proto_shape_ok(c, -1))
        return -1;
    if (in->ndim < s->ndim)
        return fail(c, "target shape %s has fewer dims than the input shape %s",
                    SHP(in), SHP(s));
    int lead = in->ndim - s->ndim;
    copy_shape(c->out, in);
    for (int d = 0; d < in->ndim; d++) {
        int64_t t = in->shape[d], have = d < lead ? -1 : s->shape[d - lead];
        if (t == -1 && d < lead)
            return fail(c, "-1 is not allowed in new leading dim %d of shape %s", d, SHP(in));
        if (t == -1)
            t = have;
        if (d >= lead && have != t && have != 1)
            return fail(c, "shape %s cannot expand to %s (dim %d: %lld to %lld)", SHP(s),
                        SHP(in), d, (long long)have, (long long)t);
        c->out->shape[d] = t;
    }
    return 0;
}

/* Python slice semantics: negative bounds count from the end, then clamp
 * into [0, size]; end < start gives an empty slice. */
static int64_t clamp_bound(int64_t v, int64_t size)
{
    if (v < 0)
        v = v < -size ? 0 : v + size;
    return v > size ? size : v;
}

static int infer_slice(infer_ctx *c)
{
    const smelt_node *s = c->s[0];
    int dim;
    if (s->ndim == 0)
        return fail(c, "cannot slice a 0-d tensor");
    if (norm_dim(c, c->in->a.slice.dim, s->ndim, s, &dim))
        return -1;
    int64_t step = c->in->a.slice.step, size = s->shape[dim];
    if (step < 1)
        return fail(c, "step must be >= 1, got %lld (shape %s)", (long long)step, SHP(s));
    int64_t start = clamp_bound(c->in->a.slice.start, size);
    int64_t end = clamp_bound(c->in->a.slice.end, size);
    end = end < start ? start : end;
    copy_shape(c->out, s);
    c->out->shape[dim] = (end - start) / step + ((end - start) % step != 0);
    c->out->a.slice.dim = dim;
    c->out->a.slice.start = start;
    c->out->a.slice.end = end;
    c->out->a.slice.step = step;
    return 0;
}

static int infer_squeeze(infer_ctx *c)
{
    const smelt_node *s = c->s[0];
    int dim;
    if (norm_dim(c, c->in->a.axis.dim, s->ndim ? s->ndim : 1, s, &dim))
        return -1;
    if (s->ndim == 0 || s->shape[dim] != 1)
        return fail(c, "dim %d of shape %s does not have size 1", dim, SHP(s));
    c->out->ndim = (uint8_t)(s->ndim - 1);
    for (int d = 0, k = 0; d < s->ndim; d++)
        if (d != dim)
            c->out->shape[k++] = s->shape[d];
    c->out->a.axis.dim = dim;
    return 0;
}

static int infer_unsqueeze(infer_ctx *c)
{
    const smelt_node *s = c->s[0];
    int dim;
    if (s->ndim >= SMELT_MAX_DIMS)
        return fail(c, "shape %s already has the maximum rank", SHP(s));
    if (norm_dim(c, c->in->a.axis.dim, s->ndim + 1, s, &dim))
        return -1;
    c->out->ndim = (uint8_t)(s->ndim + 1);
    for (int d = 0, k = 0; d <= s->ndim; d++)
        c->out->shape[d] = d == dim ? 1 : s->shape[k++];
    c->out->a.axis.dim = dim;
    return 0;
}

static int infer_flip(infer_ctx *c)
{
    const smelt_node *s = c->s[0];
    int dim;
    if (s->ndim == 0)
        return fail(c, "cannot flip a 0-d tensor");
    if (norm_dim(c, c->in->a.axis.dim, s->ndim, s, &dim))
        return -1;
    copy_shape(c->out, s);
    c->out->a.axis.dim = dim;
    return 0;
}

static int infer_diagonal(infer_ctx *c)
{
    const smelt_node *s = c->s[0];
    int d1, d2, k = 0;
    if (norm_dim(c, c->in->a.diag.dim1, s->ndim, s, &d1) ||
        norm_dim(c, c->in->a.diag.dim2, s->ndim, s, &d2))
        return -1;
    if (d1 == d2)
        return fail(c, "dim1 and dim2 are both %d (shape %s)", d1, SHP(s));
    int64_t off = c->in->a.diag.offset, n1 = s->shape[d1], n2 = s->shape[d2];
    int64_t len = off >= 0 ? (n2 - off < n1 ? n2 - off : n1)
                           : (n1 + off < n2 ? n1 + off : n2);
    for (int d = 0; d < s->ndim; d++)
        if (d != d1 && d != d2)
            c->out->shape[k++] = s->shape[d];
    c->out->shape[k++] = len > 0 ? len : 0;
    c->out->ndim = (uint8_t)k;
    c->out->a.diag.offset = off;
    c->out->a.diag.dim1 = d1;
    c->out->a.diag.dim2 = d2;
    return 0;
}

static int infer_unfold(infer_ctx *c)
{
    const smelt_node *s = c->s[0];
    int dim;
    if (s->ndim == 0 || s->ndim >= SMELT_MAX_DIMS)
        return fail(c, "needs a source of rank 1 to %d, got shape %s", SMELT_MAX_DIMS - 1, SHP(s));
    if (norm_dim(c, c->in->a.unfold.dim, s->ndim, s, &dim))
        return -1;
    int64_t size = c->in->a.unfold.size, step = c->in->a.unfold.step, dil = c->in->a.unfold.dil;
    if (size < 1 || step < 1 || dil < 1 || size > INT32_MAX || dil > INT32_MAX)
        return fail(c, "size, step and dilation must be >= 1, got %lld, %lld, %lld", (long long)size,
                    (long long)step, (long long)dil);
    int64_t span = dil * (size - 1) + 1;
    if (span > s->shape[dim])
        return fail(c, "window of %lld (size %lld, dilation %lld) is larger than dim %d of shape %s",
                    (long long)span, (long long)size, (long long)dil, dim, SHP(s));
    copy_shape(c->out, s);
    c->out->shape[dim] = (s->shape[dim] - span) / step + 1;
    c->out->shape[s->ndim] = size;
    c->out->ndim = (uint8_t)(s->ndim + 1);
    c->out->a.unfold.dim = dim;
    c->out->a.unfold.size = size;
    c->out->a.unfold.step = step;
    c->out->a.unfold.dil = dil;
    return 0;
}

static int infer_view(infer_ctx *c)
{
    c->out->dtype = c->s[0]->dtype;
    switch ((smelt_op)c->in->op) {
    case SMELT_OP_RESHAPE: return infer_reshape(c);
    case SMELT_OP_PERMUTE: return infer_permute(c);
    case SMELT_OP_EXPAND: return infer_expand(c);
    case SMELT_OP_SLICE: return infer_slice(c);
    case SMELT_OP_SQUEEZE: return infer_squeeze(c);
    case SMELT_OP_UNSQUEEZE: return infer_unsqueeze(c);
    case SMELT_OP_FLIP: return infer_flip(c);
    case SMELT_OP_DIAGONAL: return infer_diagonal(c);
    case SMELT_OP_UNFOLD: return infer_unfold(c);
    default: return fail(c, "unknown view op");
    }
}

/* GATHER: out[i] = src[i, dim replaced by index[i]]; index's shape. */
static int infer_gather(infer_ctx *c)
{
    const smelt_node *s = c->s[0], *ix = c->s[1];
    int dim;
    if (!smelt_dtype_is_int((smelt_dtype)ix->dtype))
        return fail(c, "needs an integer index, got %s", VAL(ix));
    if (ix->ndim != s->ndim || s->ndim == 0)
        return fail(c, "index %s and source %s need the same rank, at least 1", VAL(ix), VAL(s));
    if (norm_dim(c, c->in->a.gather.dim, s->ndim, s, &dim))
        return -1;
    for (int d = 0; d < s->ndim; d++)
        if (d != dim && ix->shape[d] > s->shape[d])
            return fail(c, "index %s larger than source %s off dim %d", VAL(ix), VAL(s), dim);
    copy_shape(c->out, ix);
    c->out->dtype = s->dtype;
    c->out->a.gather.dim = dim;
    c->out->a.gather.wrap = c->in->a.gather.wrap != 0;
    c->out->a.gather.n = s->shape[dim];
    return 0;
}

/* ------------------------------------------------------------------ */
/* cat and matmul                                                     */

static int infer_cat(infer_ctx *c)
{
    const smelt_node *s0 = c->s[0];
    int n = c->in->nsrc, dim;
    if (s0->ndim == 0)
        return fail(c, "0-d tensors cannot be concatenated (%s)", fmt_sources(c, 0, n).s);
    if (norm_dim(c, c->in->a.axis.dim, s0->ndim, s0, &dim))
        return -1;
    smelt_dtype dt = (smelt_dtype)s0->dtype;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const smelt_node *s = c->s[i];
        bool same = s->ndim == s0->ndim;
        for (int d = 0; same && d < s->ndim; d++)
            same = d == dim || s->shape[d] == s0->shape[d];
        if (!same)
            return fail(c, "shapes %s differ outside dim %d", fmt_sources(c, 0, n).s, dim);
        if (s->shape[dim] > INT64_MAX - total)
            return fail(c, "result has too many elements (%s)", fmt_sources(c, 0, n).s);
        total += s->shape[dim];
        dt = smelt_dtype_promote(dt, (smelt_dtype)s->dtype);
    }
    copy_shape(c->out, s0);
    c->out->shape[dim] = total;
    c->out->dtype = (uint8_t)dt;
    c->out->a.axis.dim = dim;
    return 0;
}

static int infer_matmul(infer_ctx *c)
{
    const smelt_node *a = c->s[0], *b = c->s[1];
    if (a->ndim < 2 || b->ndim < 2)
        return fail(c, "both operands must be at least 2-d, got %s", OPS);
    if (a->dtype != b->dtype)
        return fail(c, "operands must have the same dtype, got %s", OPS);
    if (a->dtype == SMELT_BOOL)
        return fail(c, "bool operands are not supported (%s)", OPS);
    if (a->shape[a->ndim - 1] != b->shape[b->ndim - 2])
        return fail(c, "inner dims differ: %s", OPS);
    int nb = (a->ndim > b->ndim ? a->ndim : b->ndim) - 2;
    for (int d = 0; d < nb; d++) {
        int da = d - (nb - (a->ndim - 2)), db = d - (nb - (b->ndim - 2));
        int64_t va = da < 0 ? 1 : a->shape[da], vb = db < 0 ? 1 : b->shape[db];
        if (va != vb && va != 1 && vb != 1)
            return fail(c, "batch dims of %s cannot broadcast", OPS);
        c->out->shape[d] = va == 1 ? vb : va;
    }
    c->out->shape[nb] = a->shape[a->ndim - 2];
    c->out->shape[nb + 1] = b->shape[b->ndim - 1];
    c->out->ndim = (uint8_t)(nb + 2);
    c->out->dtype = a->dtype;
    return 0;
}

/* ------------------------------------------------------------------ */
/* node inference: the spec of every op                               */

/* CALL: dtype and shape come from the proto (the host inferred them). The
 * node's place in its call group is checked against the node before it:
 * out 0 starts call id = 1 + the previous call's id (0 for the first);
 * out k > 0 follows out k-1 of the same call with the same sources. */
static int infer_call(infer_ctx *c, int32_t self)
{
    const smelt_node *in = c->in;
    int32_t id = in->a.call.id, out = in->a.call.out, nout = in->a.call.nout;
    if (dtype_ok(c, in->dtype) || proto_shape_ok(c, 0))
        return -1;
    if (nout < 1 || nout > SMELT_MAX_SRC || out < 0 || out >= nout)
        return fail(c, "result %d of %d is out of range (1 to %d results)", (int)out, (int)nout,
                    SMELT_MAX_SRC);
    const smelt_node *prev = NULL;
    for (int32_t i = self - 1; i >= 0 && !prev; i--)
        if (c->g->nodes[i].op == SMELT_OP_CALL)
            prev = &c->g->nodes[i];
    if (out == 0 && (prev ? prev->a.call.id + 1 != id || prev->a.call.out != prev->a.call.nout - 1
                          : id != 0))
        return fail(c, "call %d does not follow call %d", (int)id, prev ? (int)prev->a.call.id : -1);
    if (out > 0 && (prev != &c->g->nodes[self - 1] || prev->a.call.id != id || prev->a.call.out != out - 1 ||
                    prev->a.call.nout != nout || prev->a.call.key != in->a.call.key ||
                    prev->nsrc != in->nsrc || memcmp(prev->src, in->src, sizeof(int32_t) * in->nsrc)))
        return fail(c, "result %d of call %d does not follow result %d with the same sources", (int)out,
                    (int)id, (int)out - 1);
    c->out->dtype = in->dtype;
    copy_shape(c->out, in);
    c->out->a.call.id = id;
    c->out->a.call.out = out;
    c->out->a.call.nout = nout;
    c->out->a.call.key = in->a.call.key;
    return 0;
}

/* SDPA: q, k, v (and a mask) of one rank >= 2, float32, float16 or
 * bfloat16 (the CPU's kernel: float32 only; mask bool or q's dtype); k/v/mask batch dims are q's or 1, k and v agree on S, q and k
 * on E, the mask's last two dims are L or 1 and S or 1. */
static int infer_sdpa(infer_ctx *c)
{
    const smelt_node *q = c->s[0], *k = c->s[1], *v = c->s[2], *m = c->in->nsrc == 4 ? c->s[3] : NULL;
    int nd = q->ndim;
    if (c->in->nsrc < 3 || c->in->nsrc > 4)
        return fail(c, "expects q, k, v and an optional mask, got %d sources", c->in->nsrc);
    if (nd < 2 || nd - 2 > 6 || k->ndim != nd || v->ndim != nd || (m && m->ndim != nd))
        return fail(c, "q, k, v%s must have one rank in [2, 8], got %s, %s, %s", m ? " and mask" : "",
                    SHP(q), SHP(k), SHP(v));
    if ((q->dtype != SMELT_F32 && q->dtype != SMELT_F16 && q->dtype != SMELT_BF16) || k->dtype != q->dtype ||
        v->dtype != q->dtype || (m && m->dtype != q->dtype && m->dtype != SMELT_BOOL))
        return fail(c, "float32, float16 or bfloat16 q, k, v of one dtype (and a bool mask or one of theirs) only");
    for (int d = 0; d < nd - 2; d++)
        if ((k->shape[d] != q->shape[d] && k->shape[d] != 1) || (v->shape[d] != q->shape[d] && v->shape[d] != 1) ||
            (m && m->shape[d] != q->shape[d] && m->shape[d] != 1))
            return fail(c, "batch dim %d of k, v or mask is neither q's nor 1 (q %s, k %s, v %s)", d, SHP(q),
                        SHP(k), SHP(v));
    int64_t L = q->shape[nd - 2], S = k->shape[nd - 2], E = q->shape[nd - 1];
    if (k->shape[nd - 1] != E || v->shape[nd - 2] != S || E < 1)
        return fail(c, "q %s, k %s and v %s do not agree on E and S", SHP(q), SHP(k), SHP(v));
    if (m && ((m->shape[nd - 2] != L && m->shape[nd - 2] != 1) || (m->shape[nd - 1] != S && m->shape[nd - 1] != 1)))
        return fail(c, "mask %s does not broadcast to [.., %lld, %lld]", SHP(m), (long long)L, (long long)S);
    if (!isfinite(c->in->a.sdpa.scale) || (c->in->a.sdpa.causal && m))
        return fail(c, "scale must be finite, and causal excludes a mask");
    c->out->dtype = q->dtype;
    copy_shape(c->out, q);
    c->out->shape[nd - 1] = v->shape[nd - 1];
    c->out->a.sdpa.scale = c->in->a.sdpa.scale;
    c->out->a.sdpa.causal = c->in->a.sdpa.causal != 0;
    return 0;
}

int smelt_flex_src(const smelt_node *n, int part)
{
    int parts = n->a.flex.parts, at = n->op == SMELT_OP_FLEX_BWD ? 5 : 3;
    if (!(parts & part))
        return -1;
    for (int bit = 1; bit < part; bit <<= 1)
        if (parts & bit)
            at += bit >= SMELT_FLEX_BLOCKS ? 2 : 1;
    return at;
}

/* FLEX_ARG: the proto's dtype (float32 score, int32 indices) and a 4-d shape. */
static int infer_flex_arg(infer_ctx *c)
{
    const smelt_node *in = c->in;
    int role = in->a.flex.role;
    if (role > 4 || in->ndim != 4 || proto_shape_ok(c, 0))
        return proto_shape_ok(c, 0) ? -1 : fail(c, "role %d of a 4-d stand-in, got rank %d", role, in->ndim);
    if (in->dtype != (role ? SMELT_I32 : SMELT_F32))
        return fail(c, "the score is float32, the indices int32");
    c->out->dtype = in->dtype;
    copy_shape(c->out, in);
    c->out->a.flex.role = (uint8_t)role;
    return 0;
}

/* FLEX and FLEX_BWD: q, k, v, (out, g,) the optional parts. See ops.def. */
static int infer_flex(infer_ctx *c)
{
    const smelt_node *in = c->in, *q = c->s[0], *k = c->s[1], *v = c->s[2];
    int bwd = in->op == SMELT_OP_FLEX_BWD, parts = in->a.flex.parts, want = bwd ? 5 : 3;
    for (int bit = 1; bit <= SMELT_FLEX_FULL; bit <<= 1)
        want += parts & bit ? (bit >= SMELT_FLEX_BLOCKS ? 2 : 1) : 0;
    if (in->nsrc != want || ((parts & SMELT_FLEX_FULL) && !(parts & SMELT_FLEX_BLOCKS)) ||
        ((parts & SMELT_FLEX_DSCORE_ONE) && (parts & SMELT_FLEX_DSCORE)))
        return fail(c, "parts %d need %d sources, got %d", parts, want, in->nsrc);
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || q->dtype != SMELT_F32 || k->dtype != SMELT_F32 ||
        v->dtype != SMELT_F32)
        return fail(c, "float32 4-d q, k, v only, got %s, %s, %s", SHP(q), SHP(k), SHP(v));
    int64_t B = q->shape[0], H = q->shape[1], L = q->shape[2], E = q->shape[3], S = k->shape[2];
    int64_t Hk = k->shape[1], Ev = v->shape[3];
    if (k->shape[0] != B || v->shape[0] != B || v->shape[1] != Hk || v->shape[2] != S || k->shape[3] != E ||
        E < 1 || Hk < 1 || H % Hk)
        return fail(c, "q %s, k %s, v %s do not agree", SHP(q), SHP(k), SHP(v));
    if (!isfinite(in->a.flex.scale) || in->a.flex.bq < 1 || in->a.flex.bk < 1)
        return fail(c, "scale must be finite and block sizes positive");
    int64_t og[4] = { B, H, L, Ev + 1 };
    for (int i = 3; bwd && i < 5; i++)
        if (c->s[i]->dtype != SMELT_F32 || c->s[i]->ndim != 4 || memcmp(c->s[i]->shape, og, sizeof og))
            return fail(c, "the forward's result and its gradient must be float32 [B, H, L, Ev + 1], got %s",
                        SHP(c->s[i]));
    int64_t full[4] = { B, H, L, S };
    static const int exprs[3] = { SMELT_FLEX_SCORE, SMELT_FLEX_MASK, SMELT_FLEX_DSCORE };
    for (int e = 0; e < 3; e++) {
        int at = smelt_flex_src(in, exprs[e]);
        if (at >= 0 && (c->s[at]->dtype != (e == 1 ? SMELT_BOOL : SMELT_F32) || c->s[at]->ndim != 4 ||
                        memcmp(c->s[at]->shape, full, sizeof full)))
            return fail(c, "the score function's values must be [B, H, L, S], got %s", SHP(c->s[at]));
    }
    for (int bit = SMELT_FLEX_BLOCKS; bit <= SMELT_FLEX_FULL; bit <<= 1) {
        int at = smelt_flex_src(in, bit);
        if (at < 0)
            continue;
        const smelt_node *nb = c->s[at], *ix = c->s[at + 1];
        int64_t QB = (L + in->a.flex.bq - 1) / in->a.flex.bq;
        if (nb->ndim != 3 || ix->ndim != 4 || !smelt_dtype_is_int(nb->dtype) || !smelt_dtype_is_int(ix->dtype) ||
            (nb->shape[0] != 1 && nb->shape[0] != B) || (nb->shape[1] != 1 && nb->shape[1] != H) ||
            nb->shape[2] < QB || memcmp(ix->shape, nb->shape, 3 * sizeof(int64_t)))
            return fail(c, "block tables %s and %s do not fit [B, H, %lld(, KB)]", SHP(nb), SHP(ix), (long long)QB);
    }
    c->out->dtype = SMELT_F32;
    c->out->a.flex = in->a.flex;
    c->out->a.flex.role = 0;
    if (bwd) {
        c->out->ndim = 1;
        c->out->shape[0] = B * H * (L * E + S * E + S * Ev);
    } else {
        copy_shape(c->out, q);
        c->out->shape[3] = Ev + 1;
    }
    return 0;
}

/* SDPA_BWD: q, k, v, out, g (and a mask) where q, k, v (and the mask) are
 * a valid SDPA whose result has out's and g's shape (float32 both). */
static int infer_sdpa_backward(infer_ctx *c)
{
    int n = c->in->nsrc;
    if (n < 5 || n > 6)
        return fail(c, "expects q, k, v, out, g and an optional mask, got %d sources", n);
    smelt_node proto = *c->in, fwd;
    proto.op = SMELT_OP_SDPA;
    proto.nsrc = (uint8_t)(n - 2);
    infer_ctx f = *c;
    f.in = &proto, f.out = &fwd;
    if (n == 6)
        f.s[3] = c->s[5];
    memset(&fwd, 0, sizeof fwd);
    if (infer_sdpa(&f))
        return -1;
    for (int k = 3; k < 5; k++)
        if (c->s[k]->dtype != fwd.dtype || c->s[k]->ndim != fwd.ndim ||
            memcmp(c->s[k]->shape, fwd.shape, sizeof(int64_t) * fwd.ndim) != 0)
            return fail(c, "%s %s %s does not match the attention's result %s %s", k == 3 ? "out" : "g",
                        SHP(c->s[k]), smelt_dtype_name((smelt_dtype)c->s[k]->dtype), SHP(&fwd),
                        smelt_dtype_name((smelt_dtype)fwd.dtype));
    int nd = fwd.ndim;
    int64_t batch = 1, L = fwd.shape[nd - 2], Ev = fwd.shape[nd - 1];
    int64_t S = c->s[1]->shape[nd - 2], E = c->s[0]->shape[nd - 1], per, pq, pk, pv;
    int over = 0;
    for (int d = 0; d < nd - 2; d++)
        over |= __builtin_mul_overflow(batch, fwd.shape[d], &batch);
    /* k and v may broadcast over q's batch: batch * S * E is no tensor's size yet */
    over |= __builtin_mul_overflow(L, E, &pq) | __builtin_mul_overflow(S, E, &pk) |
            __builtin_mul_overflow(S, Ev, &pv) | __builtin_add_overflow(pq, pk, &per) |
            __builtin_add_overflow(per, pv, &per) | __builtin_mul_overflow(batch, per, &per);
    if (over)
        return fail(c, "too many elements for dq, dk and dv of q %s, k %s, v %s", SHP(c->s[0]), SHP(c->s[1]),
                    SHP(c->s[2]));
    c->out->dtype = fwd.dtype;
    c->out->ndim = 1;
    c->out->shape[0] = per;
    c->out->a.sdpa = fwd.a.sdpa;
    return 0;
}

/* CONV: float32 x [N,C,*sp] and w [O,C/groups,*k] of rank nsp+2, optional
 * float32 bias [O]; attrs checked as graph.h says. */
static int infer_conv(infer_ctx *c)
{
    const smelt_node *x = c->s[0], *w = c->s[1], *b = c->in->nsrc == 3 ? c->s[2] : NULL;
    const smelt_attrs *a = &c->in->a;
    int nsp = a->conv.nsp;
    if (c->in->nsrc < 2 || c->in->nsrc > 3)
        return fail(c, "expects input, weight and an optional bias, got %d sources", c->in->nsrc);
    if (nsp < 1 || nsp > 3 || x->ndim != nsp + 2 || w->ndim != nsp + 2 || (b && b->ndim != 1))
        return fail(c, "%d spatial dims: input %s and weight %s must be %d-d%s", nsp, SHP(x), SHP(w), nsp + 2,
                    b ? ", bias 1-d" : "");
    if (x->dtype != SMELT_F32 || w->dtype != SMELT_F32 || (b && b->dtype != SMELT_F32))
        return fail(c, "float32 input, weight and bias only");
    int64_t g = a->conv.groups, O = w->shape[0];
    if (x->shape[1] < 1 || O < 1)
        return fail(c, "input %s and weight %s need at least one channel each", SHP(x), SHP(w));
    if (g < 1 || w->shape[1] * g != x->shape[1] || O % g || (b && b->shape[0] != O))
        return fail(c, "input %s, weight %s%s do not agree with groups=%lld", SHP(x), SHP(w),
                    b ? " and bias" : "", (long long)g);
    c->out->shape[0] = x->shape[0];
    c->out->shape[1] = O;
    for (int d = 0; d < 3; d++) {
        int32_t st = a->conv.stride[d], lo = a->conv.pad_lo[d], hi = a->conv.pad_hi[d], dl = a->conv.dil[d];
        if (d >= nsp) {
            if (st || lo || hi || dl)
                return fail(c, "attributes set beyond %d spatial dims", nsp);
            continue;
        }
        if (st < 1 || lo < 0 || hi < 0 || dl < 1)
            return fail(c, "stride and dilation must be >= 1 and padding >= 0");
        int64_t span = (int64_t)dl * (w->shape[d + 2] - 1) + 1, in = x->shape[d + 2] + lo + hi;
        if (w->shape[d + 2] < 1 || in < span)
            return fail(c, "kernel %s (dilation %d) is larger than the padded input %s", SHP(w), (int)dl, SHP(x));
        c->out->shape[d + 2] = (in - span) / st + 1;
        c->out->a.conv.stride[d] = st, c->out->a.conv.pad_lo[d] = lo;
        c->out->a.conv.pad_hi[d] = hi, c->out->a.conv.dil[d] = dl;
    }
    c->out->ndim = (uint8_t)(nsp + 2);
    c->out->dtype = SMELT_F32;
    c->out->a.conv.nsp = nsp;
    c->out->a.conv.groups = (int32_t)g;
    return 0;
}

/* CONV_BWD_INPUT / CONV_BWD_WEIGHT: the CONV whose missing operand has
 * the builder's shape must be valid and produce dy's shape. */
static int infer_conv_backward(infer_ctx *c)
{
    int data = c->in->op == SMELT_OP_CONV_BWD_INPUT;
    smelt_node other = { .op = SMELT_OP_INPUT, .dtype = SMELT_F32, .ndim = c->in->ndim }, fwd, proto = *c->in;
    const smelt_node *dy = c->s[data ? 0 : 1];
    memcpy(other.shape, c->in->shape, sizeof other.shape);
    proto.op = SMELT_OP_CONV;
    infer_ctx f = *c;
    f.in = &proto, f.out = &fwd;
    f.s[0] = data ? &other : c->s[0];
    f.s[1] = data ? c->s[1] : &other;
    memset(&fwd, 0, sizeof fwd);
    if (c->in->ndim > SMELT_MAX_DIMS || infer_conv(&f))
        return -1;
    if (dy->dtype != SMELT_F32 || dy->ndim != fwd.ndim ||
        memcmp(dy->shape, fwd.shape, sizeof(int64_t) * fwd.ndim) != 0)
        return fail(c, "gradient %s does not match the convolution's output %s", SHP(dy), SHP(&fwd));
    c->out->ndim = c->in->ndim;
    memcpy(c->out->shape, c->in->shape, sizeof c->out->shape);
    c->out->dtype = SMELT_F32;
    c->out->a.conv = fwd.a.conv;
    return 0;
}

static int infer_leaf(infer_ctx *c)
{
    switch ((smelt_op)c->in->op) {
    case SMELT_OP_INPUT: return infer_input(c);
    case SMELT_OP_SCALAR: return infer_scalar(c);
    case SMELT_OP_FULL: return infer_full(c);
    case SMELT_OP_ARANGE: return infer_arange(c);
    case SMELT_OP_IOTA: return infer_iota(c);
    case SMELT_OP_FLEX_ARG: return infer_flex_arg(c);
    default: return fail(c, "unknown leaf op");
    }
}

/* Checks the op, source count and source indices (each < self) of the
 * proto and resolves the sources into c->s. */
static int check_sources(infer_ctx *c, int32_t self)
{
    const smelt_node *in = c->in;
    int arity = smelt_op_arity((smelt_op)in->op);
    smelt_op_kind kind = smelt_op_kind_of((smelt_op)in->op);
    if (arity >= 0 ? in->nsrc != arity : in->nsrc < 1 || in->nsrc > SMELT_MAX_SRC)
        return fail(c, "expects %s%d sources, got %d", arity < 0 ? "1 to " : "",
                    arity < 0 ? SMELT_MAX_SRC : arity, in->nsrc);
    for (int k = 0; k < in->nsrc; k++) {
        int32_t s = in->src[k];
        if (s < 0 || s >= self)
            return fail(c, "source %%%d does not exist (node %d of %d)", (int)s, (int)self,
                        (int)c->g->n);
        c->s[k] = &c->g->nodes[s];
        c->out->src[k] = s;
        if (c->s[k]->op == SMELT_OP_SCALAR && kind != SMELT_KIND_BINARY &&
            kind != SMELT_KIND_TERNARY)
            return fail(c, "source %%%d is a Python scalar; use full() for a tensor", (int)s);
    }
    return 0;
}

/* 1 if the element count of n's shape fits in int64. */
static bool numel_fits(const smelt_node *n)
{
    int64_t p = 1;
    for (int d = 0; d < n->ndim; d++)
        if (n->shape[d] == 0)
            return true;
    for (int d = 0; d < n->ndim; d++) {
        if (p > INT64_MAX / n->shape[d])
            return false;
        p *= n->shape[d];
    }
    return true;
}

/* Fills *out (zeroed first) from proto `in` as node number `self` of g:
 * copies op and sources, computes dtype, shape, normalised attrs. Returns
 * 0, or -1 with "<op>: message" in err. */
static int infer_node(const smelt_graph *g, int32_t self, const smelt_node *in,
                      smelt_node *out, char *err, size_t errlen)
{
    infer_ctx c = {.g = g, .in = in, .out = out, .err = err, .errlen = errlen};
    memset(out, 0, sizeof *out);
    if (in->op >= SMELT_NOPS)
        return snprintf(err, errlen, "invalid op %d", in->op), -1;
    out->op = in->op;
    out->nsrc = in->nsrc;
    if (check_sources(&c, self))
        return -1;
    int rc;
    switch (smelt_op_kind_of((smelt_op)in->op)) {
    case SMELT_KIND_LEAF: rc = infer_leaf(&c); break;
    case SMELT_KIND_UNARY: rc = infer_unary(&c); break;
    case SMELT_KIND_BINARY: rc = infer_binary(&c); break;
    case SMELT_KIND_TERNARY: rc = infer_ternary(&c); break;
    case SMELT_KIND_REDUCTION: rc = infer_reduction(&c); break;
    case SMELT_KIND_VIEW: rc = infer_view(&c); break;
    case SMELT_KIND_CAT: rc = infer_cat(&c); break;
    case SMELT_KIND_GATHER: rc = infer_gather(&c); break;
    default:
        rc = in->op == SMELT_OP_CALL   ? infer_call(&c, self)
             : in->op == SMELT_OP_SDPA ? infer_sdpa(&c)
             : in->op == SMELT_OP_SDPA_BWD ? infer_sdpa_backward(&c)
             : in->op == SMELT_OP_FLEX || in->op == SMELT_OP_FLEX_BWD ? infer_flex(&c)
             : in->op == SMELT_OP_CONV ? infer_conv(&c)
             : in->op == SMELT_OP_CONV_BWD_INPUT || in->op == SMELT_OP_CONV_BWD_WEIGHT ? infer_conv_backward(&c)
                                       : infer_matmul(&c);
        break;
    }
    if (rc == 0 && !numel_fits(out))
        return fail(&c, "shape %s has too many elements", SHP(out));
    return rc;
}

/* ------------------------------------------------------------------ */
/* graph lifetime and builders                                        */

smelt_graph *smelt_graph_new(void)
{
    smelt_graph *g = calloc(1, sizeof(smelt_graph));
    if (g)
        g->default_float = SMELT_F32;
    return g;
}

void smelt_graph_free(smelt_graph *g)
{
    if (!g)
        return;
    free(g->nodes);
    free(g->outputs);
    free(g);
}

/* Grows *arr (elements of size elem) so that it holds at least need. */
static int grow(void **arr, int32_t *cap, int32_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    int32_t ncap = *cap ? *cap : 16;
    while (ncap < need)
        ncap = ncap > INT32_MAX / 2 ? INT32_MAX : ncap * 2;
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

/* Infers the proto as the next node and appends it. */
static int32_t append(smelt_graph *g, const smelt_node *proto)
{
    smelt_node node;
    if (g->n == INT32_MAX || grow((void **)&g->nodes, &g->cap, g->n + 1, sizeof node))
        return snprintf(g->err, sizeof g->err, "%s: out of memory",
                        smelt_op_name((smelt_op)proto->op)), -1;
    if (infer_node(g, g->n, proto, &node, g->err, sizeof g->err))
        return -1;
    g->nodes[g->n] = node;
    return g->n++;
}

/* torch's contiguous strides (sizes 0 count as 1); -1 on overflow. */
static int contiguous_strides(int ndim, const int64_t *shape, int64_t *stride)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        int64_t size = shape[d] > 1 ? shape[d] : 1;
        stride[d] = s;
        if (d && s > INT64_MAX / size)
            return -1;
        s *= size;
    }
    return 0;
}

int32_t smelt_graph_input(smelt_graph *g, smelt_dtype dt, int ndim,
                          const int64_t *shape, const int64_t *strides)
{
    smelt_node p;
    memset(&p, 0, sizeof p);
    p.op = SMELT_OP_INPUT;
    p.dtype = (uint8_t)dt;
    if (ndim < 0 || ndim > SMELT_MAX_DIMS || (ndim && !shape))
        return snprintf(g->err, sizeof g->err, "input: rank %d is not in [0, %d]", ndim,
                        SMELT_MAX_DIMS), -1;
    p.ndim = (uint8_t)ndim;
    if (ndim)
        memcpy(p.shape, shape, sizeof *shape * (size_t)ndim);
    if (strides && ndim)
        memcpy(p.stride, strides, sizeof *strides * (size_t)ndim);
    else if (contiguous_strides(ndim, shape, p.stride))
        return snprintf(g->err, sizeof g->err, "input: shape %s has too many elements",
                        fmt_shape(ndim, shape).s), -1;
    p.a.input.index = g->ninputs;
    int32_t id = append(g, &p);
    g->ninputs += id >= 0;
    return id;
}

int32_t smelt_graph_scalar(smelt_graph *g, smelt_dtype dt, double f, int64_t i)
{
    smelt_node p;
    memset(&p, 0, sizeof p);
    p.op = SMELT_OP_SCALAR;
    p.dtype = (uint8_t)dt;
    p.a.scalar.f = f;
    p.a.scalar.i = i;
    return append(g, &p);
}

/* A squeeze of a dim whose size is not 1, or of a 0-d tensor, leaves the
 * tensor unchanged in torch: returns the source index, or -1 if the proto
 * is not such a squeeze (including when it is invalid). */
static int32_t squeeze_noop(const smelt_graph *g, const smelt_node *p)
{
    if (p->op != SMELT_OP_SQUEEZE || p->nsrc != 1 || p->src[0] < 0 || p->src[0] >= g->n)
        return -1;
    const smelt_node *s = &g->nodes[p->src[0]];
    int nd = s->ndim ? s->ndim : 1;
    int32_t d = p->a.axis.dim < 0 ? p->a.axis.dim + nd : p->a.axis.dim;
    if (s->op == SMELT_OP_SCALAR || d < 0 || d >= nd)
        return -1;
    return s->ndim == 0 || s->shape[d] != 1 ? p->src[0] : -1;
}

int32_t smelt_graph_add(smelt_graph *g, const smelt_node *proto)
{
    if (proto->op == SMELT_OP_INPUT || proto->op == SMELT_OP_SCALAR)
        return snprintf(g->err, sizeof g->err, "%s: use smelt_graph_%s",
                        smelt_op_name((smelt_op)proto->op),
                        smelt_op_name((smelt_op)proto->op)), -1;
    int32_t same = squeeze_noop(g, proto);
    return same >= 0 ? same : append(g, proto);
}

int smelt_graph_output(smelt_graph *g, int32_t node)
{
    if (node < 0 || node >= g->n)
        return snprintf(g->err, sizeof g->err, "output: node %d does not exist (graph has %d nodes)",
                        (int)node, (int)g->n), -1;
    if (g->nodes[node].op == SMELT_OP_SCALAR)
        return snprintf(g->err, sizeof g->err,
                        "output: node %d is a Python scalar; use full() for a tensor", (int)node), -1;
    if (g->nout == INT32_MAX || grow((void **)&g->outputs, &g->outcap, g->nout + 1, sizeof(int32_t)))
        return snprintf(g->err, sizeof g->err, "output: out of memory"), -1;
    g->outputs[g->nout++] = node;
    return 0;
}

int32_t smelt_graph_call(smelt_graph *g, int32_t id, uint64_t key, int nsrc, const int32_t *src,
                         int nout, const uint8_t *dtypes, const int *ndims,
                         const int64_t (*shapes)[SMELT_MAX_DIMS])
{
    int32_t first = -1;
    if (nsrc < 0 || nsrc > SMELT_MAX_SRC || nout < 1 || nout > SMELT_MAX_SRC)
        return snprintf(g->err, sizeof g->err, "call: %d sources and %d results (1 to %d each)", nsrc,
                        nout, SMELT_MAX_SRC), -1;
    for (int k = 0; k < nout; k++) {
        smelt_node p;
        memset(&p, 0, sizeof p);
        p.op = SMELT_OP_CALL;
        p.nsrc = (uint8_t)nsrc;
        memcpy(p.src, src, sizeof(int32_t) * (size_t)nsrc);
        p.dtype = dtypes[k];
        if (ndims[k] < 0 || ndims[k] > SMELT_MAX_DIMS)
            return snprintf(g->err, sizeof g->err, "call: result %d has rank %d", k, ndims[k]), -1;
        p.ndim = (uint8_t)ndims[k];
        memcpy(p.shape, shapes[k], sizeof(int64_t) * (size_t)ndims[k]);
        p.a.call.id = id;
        p.a.call.out = k;
        p.a.call.nout = nout;
        p.a.call.key = key;
        int32_t n = append(g, &p);
        if (n < 0) {
            g->n = first >= 0 ? first : g->n;   /* never leave half a call */
            return -1;
        }
        first = k ? first : n;
    }
    return first;
}

int32_t smelt_graph_num_calls(const smelt_graph *g)
{
    for (int32_t i = g->n - 1; i >= 0; i--)
        if (g->nodes[i].op == SMELT_OP_CALL)
            return g->nodes[i].a.call.id + 1;
    return 0;
}

/* ------------------------------------------------------------------ */
/* canonical encoding                                                 */

enum attr_member { AM_NONE, AM_INPUT, AM_SCALAR, AM_ARANGE, AM_AXIS, AM_CLAMP, AM_RED,
                   AM_PERM, AM_SLICE, AM_DIAG, AM_CALL, AM_SDPA, AM_UNFOLD, AM_CONV, AM_GATHER, AM_FLEX };

/* Which member of smelt_attrs op uses (see graph.h). */
static enum attr_member attr_member_of(smelt_op op)
{
    switch (op) {
    case SMELT_OP_INPUT: return AM_INPUT;
    case SMELT_OP_SCALAR: case SMELT_OP_FULL: return AM_SCALAR;
    case SMELT_OP_ARANGE: return AM_ARANGE;
    case SMELT_OP_IOTA: case SMELT_OP_SQUEEZE: case SMELT_OP_UNSQUEEZE: case SMELT_OP_CAT:
    case SMELT_OP_FLIP:
        return AM_AXIS;
    case SMELT_OP_CLAMP: return AM_CLAMP;
    case SMELT_OP_PERMUTE: return AM_PERM;
    case SMELT_OP_SLICE: return AM_SLICE;
    case SMELT_OP_DIAGONAL: return AM_DIAG;
    case SMELT_OP_CALL: return AM_CALL;
    case SMELT_OP_SDPA: case SMELT_OP_SDPA_BWD: return AM_SDPA;
    case SMELT_OP_FLEX_ARG: case SMELT_OP_FLEX: case SMELT_OP_FLEX_BWD: return AM_FLEX;
    case SMELT_OP_UNFOLD: return AM_UNFOLD;
    case SMELT_OP_CONV: case SMELT_OP_CONV_BWD_INPUT: case SMELT_OP_CONV_BWD_WEIGHT: return AM_CONV;
    case SMELT_OP_GATHER: case SMELT_OP_CHECKIDX: return AM_GATHER;
    default:
        return smelt_op_kind_of(op) == SMELT_KIND_REDUCTION ? AM_RED : AM_NONE;
    }
}

static uint8_t *put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int k = 0; k < bytes; k++)
        *p++ = (uint8_t)(v >> (8 * k));
    return p;
}

/* IEEE bits, every NaN mapped to one quiet NaN. */
static uint64_t double_bits(double v)
{
    uint64_t u;
    if (isnan(v))
        return UINT64_C(0x7ff8000000000000);
    memcpy(&u, &v, sizeof u);
    return u;
}

#define PUT(v, n) (p = put_le(p, (uint64_t)(v), n))
#define PUTF(v) (p = put_le(p, double_bits(v), 8))

static uint8_t *encode_attrs(uint8_t *p, const smelt_node *n)
{
    const smelt_attrs *a = &n->a;
    switch (attr_member_of((smelt_op)n->op)) {
    case AM_INPUT: PUT(a->input.index, 4); break;
    case AM_SCALAR: PUTF(a->scalar.f); PUT(a->scalar.i, 8); break;
    case AM_ARANGE:
        PUTF(a->arange.fstart); PUTF(a->arange.fstep);
        PUT(a->arange.istart, 8); PUT(a->arange.istep, 8);
        break;
    case AM_AXIS: PUT(a->axis.dim, 4); break;
    case AM_CLAMP:
        PUTF(a->clamp.flo); PUTF(a->clamp.fhi); PUT(a->clamp.ilo, 8); PUT(a->clamp.ihi, 8);
        PUT(a->clamp.has_lo, 1); PUT(a->clamp.has_hi, 1);
        break;
    case AM_RED:
        PUT(a->red.dims, 4); PUT(a->red.keepdim, 1); PUT(a->red.first, 1); PUT(a->red.correction, 8);
        break;
    case AM_PERM:
        for (int d = 0; d < SMELT_MAX_DIMS; d++)
            PUT(a->perm.perm[d], 1);
        break;
    case AM_SLICE:
        PUT(a->slice.dim, 4); PUT(a->slice.start, 8); PUT(a->slice.end, 8); PUT(a->slice.step, 8);
        break;
    case AM_DIAG: PUT(a->diag.offset, 8); PUT(a->diag.dim1, 4); PUT(a->diag.dim2, 4); break;
    case AM_CALL:
        PUT(a->call.id, 4); PUT(a->call.out, 4); PUT(a->call.nout, 4); PUT(a->call.key, 8);
        break;
    case AM_SDPA: PUTF(a->sdpa.scale); PUT(a->sdpa.causal, 1); break;
    case AM_FLEX:
        PUTF(a->flex.scale); PUT(a->flex.role, 1); PUT(a->flex.parts, 1); PUT(a->flex.bq, 4); PUT(a->flex.bk, 4);
        break;
    case AM_UNFOLD:
        PUT(a->unfold.dim, 4); PUT(a->unfold.size, 8); PUT(a->unfold.step, 8); PUT(a->unfold.dil, 8);
        break;
    case AM_CONV:
        PUT(a->conv.nsp, 4); PUT(a->conv.groups, 4);
        for (int d = 0; d < 3; d++) {
            PUT(a->conv.stride[d], 4); PUT(a->conv.pad_lo[d], 4);
            PUT(a->conv.pad_hi[d], 4); PUT(a->conv.dil[d], 4);
        }
        break;
    case AM_GATHER: PUT(a->gather.dim, 4); PUT(a->gather.wrap, 1); PUT(a->gather.n, 8); break;
    case AM_NONE: break;
    }
    return p;
}

/* Encodes node n canonically into buf (NODE_MAX_BYTES); returns the size:
 * op u16, dtype u8, ndim u8, nsrc u8, src i32 x nsrc, shape i64 x ndim,
 * INPUT strides i64 x ndim, then the op's attrs member field by field. */
static size_t encode_node(const smelt_node *n, uint8_t *buf)
{
    uint8_t *p = buf;
    int nsrc = n->nsrc < SMELT_MAX_SRC ? n->nsrc : SMELT_MAX_SRC;
    int ndim = n->ndim < SMELT_MAX_DIMS ? n->ndim : SMELT_MAX_DIMS;
    PUT(n->op, 2); PUT(n->dtype, 1); PUT(n->ndim, 1); PUT(n->nsrc, 1);
    for (int k = 0; k < nsrc; k++)
        PUT(n->src[k], 4);
    for (int d = 0; d < ndim; d++)
        PUT(n->shape[d], 8);
    for (int d = 0; n->op == SMELT_OP_INPUT && d < ndim; d++)
        PUT(n->stride[d], 8);
    return (size_t)(encode_attrs(p, n) - buf);
}

#define SERIAL_MAGIC "SMG1"
#define SERIAL_VERSION 3

/* Layout: "SMG1", u32 version, u32 node count, u32 input count, u8 default
 * float dtype, nodes
 * (encode_node), u32 output count, i32 outputs. */
uint8_t *smelt_graph_serialize(const smelt_graph *g, size_t *len)
{
    size_t cap = 24 + (size_t)g->n * NODE_MAX_BYTES + (size_t)g->nout * 4;
    uint8_t *buf = malloc(cap), *p = buf;
    if (!buf)
        return NULL;
    memcpy(p, SERIAL_MAGIC, 4);
    p += 4;
    PUT(SERIAL_VERSION, 4); PUT(g->n, 4); PUT(g->ninputs, 4); PUT(g->default_float, 1);
    for (int32_t i = 0; i < g->n; i++)
        p += encode_node(&g->nodes[i], p);
    PUT(g->nout, 4);
    for (int32_t i = 0; i < g->nout; i++)
        PUT(g->outputs[i], 4);
    *len = (size_t)(p - buf);
    return buf;
}

uint64_t smelt_graph_hash(const smelt_graph *g)
{
    size_t len = 0;
    uint8_t *buf = smelt_graph_serialize(g, &len);
    uint64_t h = UINT64_C(0xcbf29ce484222325);    /* FNV-1a 64 */
    for (size_t k = 0; buf && k < len; k++)
        h = (h ^ buf[k]) * UINT64_C(0x100000001b3);
    free(buf);
    return buf ? h : 0;
}

#undef PUT
#undef PUTF

/* ------------------------------------------------------------------ */
/* verifier                                                           */

smelt_graph *smelt_graph_copy(const smelt_graph *g)
{
    smelt_graph *c = smelt_graph_new();
    if (!c)
        return NULL;
    c->nodes = realloc(c->nodes, sizeof(smelt_node) * (size_t)(g->n + 1));
    c->outputs = realloc(c->outputs, sizeof(int32_t) * (size_t)(g->nout + 1));
    if (!c->nodes || !c->outputs)
        abort();
    memcpy(c->nodes, g->nodes, sizeof(smelt_node) * (size_t)g->n);
    memcpy(c->outputs, g->outputs, sizeof(int32_t) * (size_t)g->nout);
    c->n = c->cap = g->n;
    c->nout = c->outcap = g->nout;
    c->ninputs = g->ninputs;
    c->default_float = g->default_float;
    return c;
}

smelt_node smelt_node_proto(const smelt_node *n)
{
    smelt_node p = *n;
    if (n->op == SMELT_OP_CLAMP)    /* bounds category, in the node's domain */
        p.dtype = smelt_dtype_is_float((smelt_dtype)n->dtype) ? SMELT_F64
                  : n->dtype == SMELT_BOOL ? SMELT_BOOL : SMELT_I64;
    return p;
}

/* Checks node i against its re-inferred self; *ninputs counts INPUTs. */
static int verify_node(const smelt_graph *g, int32_t i, int32_t *ninputs, char *err,
                       size_t errlen)
{
    const smelt_node *n = &g->nodes[i];
    char why[sizeof g->err];
    uint8_t a[NODE_MAX_BYTES], b[NODE_MAX_BYTES];
    smelt_node want, proto = smelt_node_proto(n);
    if (n->op >= SMELT_NOPS || n->nsrc > SMELT_MAX_SRC || n->ndim > SMELT_MAX_DIMS)
        return snprintf(err, errlen, "verify: node %d: op %d, nsrc %d or ndim %d out of range",
                        (int)i, n->op, n->nsrc, n->ndim), -1;
    if (n->op == SMELT_OP_INPUT && n->a.input.index != (*ninputs)++)
        return snprintf(err, errlen, "verify: node %d: input index %d, expected %d", (int)i,
                        (int)n->a.input.index, (int)*ninputs - 1), -1;
    for (int d = 0; n->op != SMELT_OP_INPUT && d < SMELT_MAX_DIMS; d++)
        if (n->stride[d])
            return snprintf(err, errlen, "verify: node %d (%s): non-zero stride", (int)i,
                            smelt_op_name((smelt_op)n->op)), -1;
    if (infer_node(g, i, &proto, &want, why, sizeof why))
        return snprintf(err, errlen, "verify: node %d: %s", (int)i, why), -1;
    size_t la = encode_node(n, a), lb = encode_node(&want, b);
    if (la != lb || memcmp(a, b, la) || memcmp(&n->a, &want.a, sizeof want.a))
        return snprintf(err, errlen, "verify: node %d (%s): stored %s, inference gives %s "
                        "(or attrs differ)", (int)i, smelt_op_name((smelt_op)n->op),
                        VAL(n), VAL(&want)), -1;
    return 0;
}

int smelt_graph_verify(const smelt_graph *g, char *err, size_t errlen)
{
    int32_t ninputs = 0;
    if (g->n < 0 || (g->n && !g->nodes) || g->nout < 0 || (g->nout && !g->outputs))
        return snprintf(err, errlen, "verify: corrupt node or output arrays"), -1;
    if (g->default_float >= SMELT_NDTYPES || !smelt_dtype_is_float((smelt_dtype)g->default_float))
        return snprintf(err, errlen, "verify: default float dtype %d is not a float dtype", g->default_float), -1;
    for (int32_t i = 0; i < g->n; i++) {
        if (verify_node(g, i, &ninputs, err, errlen))
            return -1;
        const smelt_node *n = &g->nodes[i];
        if (n->op == SMELT_OP_CALL && n->a.call.out < n->a.call.nout - 1 &&
            (i + 1 == g->n || g->nodes[i + 1].op != SMELT_OP_CALL || g->nodes[i + 1].a.call.out == 0))
            return snprintf(err, errlen, "verify: node %d: call %d stops after result %d of %d", (int)i,
                            (int)n->a.call.id, (int)n->a.call.out, (int)n->a.call.nout), -1;
    }
    if (ninputs != g->ninputs)
        return snprintf(err, errlen, "verify: %d input nodes, graph says %d", (int)ninputs,
                        (int)g->ninputs), -1;
    for (int32_t k = 0; k < g->nout; k++) {
        int32_t o = g->outputs[k];
        if (o < 0 || o >= g->n || g->nodes[o].op == SMELT_OP_SCALAR)
            return snprintf(err, errlen, "verify: output %d is node %d, not a tensor node",
                            (int)k, (int)o), -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* printer                                                            */

typedef struct strbuf { char *p; size_t len, cap; bool oom; } strbuf;

static void sb_printf(strbuf *b, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int k = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (k >= 0 && !b->oom && b->len + (size_t)k >= b->cap) {
        size_t ncap = (b->cap ? b->cap * 2 : 256) + (size_t)k;
        char *np = realloc(b->p, ncap);
        if (!np)
            b->oom = true;
        else {
            b->p = np;
            b->cap = ncap;
            vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap2);
        }
    }
    if (k >= 0 && !b->oom)
        b->len += (size_t)k;
    va_end(ap2);
}

/* Shortest text that reads back as v, with ".0" on integral values. */
static value_buf fmt_double(double v)
{
    value_buf t;
    if (isnan(v) || isinf(v)) {
        snprintf(t.s, sizeof t.s, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        return t;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(t.s, sizeof t.s, "%.*g", prec, v);
        if (strtod(t.s, NULL) == v)
            break;
    }
    if (!strpbrk(t.s, ".e"))
        strncat(t.s, ".0", sizeof t.s - strlen(t.s) - 1);
    return t;
}

/* A value of the node's dtype domain: float, True/False or an integer. */
static void sb_value(strbuf *b, smelt_dtype dt, double f, int64_t i)
{
    if (smelt_dtype_is_float(dt))
        sb_printf(b, "%s", fmt_double(f).s);
    else if (dt == SMELT_BOOL)
        sb_printf(b, "%s", i ? "True" : "False");
    else
        sb_printf(b, "%lld", (long long)i);
}

static void sb_dims(strbuf *b, const char *name, uint32_t mask)
{
    sb_printf(b, ", %s=[", name);
    for (int d = 0, first = 1; d < 32; d++)
        if (mask >> d & 1) {
            sb_printf(b, "%s%d", first ? "" : ", ", d);
            first = 0;
        }
    sb_printf(b, "]");
}

static void sb_ints(strbuf *b, const char *name, const int32_t *v, int n)
{
    sb_printf(b, ", %s=[", name);
    for (int d = 0; d < n; d++)
        sb_printf(b, "%s%d", d ? ", " : "", (int)v[d]);
    sb_printf(b, "]");
}

/* The attrs of node n as ", key=value" pairs. */
static void print_attrs(strbuf *b, const smelt_node *n)
{
    const smelt_attrs *a = &n->a;
    smelt_dtype dt = (smelt_dtype)n->dtype;
    switch (attr_member_of((smelt_op)n->op)) {
    case AM_INPUT:
        sb_printf(b, "index=%d, strides=%s", (int)a->input.index,
                  fmt_shape(n->ndim, n->stride).s);
        break;
    case AM_SCALAR:
        sb_printf(b, "value=");
        sb_value(b, dt, a->scalar.f, a->scalar.i);
        break;
    case AM_ARANGE:
        sb_printf(b, "start=");
        sb_value(b, dt, a->arange.fstart, a->arange.istart);
        sb_printf(b, ", step=");
        sb_value(b, dt, a->arange.fstep, a->arange.istep);
        break;
    case AM_AXIS: sb_printf(b, "%sdim=%d", n->nsrc ? ", " : "", (int)a->axis.dim); break;
    case AM_CLAMP:
        if (a->clamp.has_lo) {
            sb_printf(b, ", min=");
            sb_value(b, dt, a->clamp.flo, a->clamp.ilo);
        }
        if (a->clamp.has_hi) {
            sb_printf(b, ", max=");
            sb_value(b, dt, a->clamp.fhi, a->clamp.ihi);
        }
        break;
    case AM_RED:
        sb_dims(b, "dims", a->red.dims);
        sb_printf(b, ", keepdim=%d", a->red.keepdim);
        if (n->op == SMELT_OP_VAR || n->op == SMELT_OP_STD)
            sb_printf(b, ", correction=%lld", (long long)a->red.correction);
        if (a->red.first)
            sb_printf(b, ", first=1");
        break;
    case AM_PERM:
        sb_printf(b, ", perm=[");
        for (int d = 0; d < n->ndim; d++)
            sb_printf(b, "%s%d", d ? ", " : "", a->perm.perm[d]);
        sb_printf(b, "]");
        break;
    case AM_GATHER:
        if (n->op == SMELT_OP_GATHER)
            sb_printf(b, ", dim=%d", (int)a->gather.dim);
        sb_printf(b, ", n=%lld%s", (long long)a->gather.n, a->gather.wrap ? ", wrap" : "");
        break;
    case AM_SLICE:
        sb_printf(b, ", dim=%d, start=%lld, end=%lld, step=%lld", (int)a->slice.dim,
                  (long long)a->slice.start, (long long)a->slice.end, (long long)a->slice.step);
        break;
    case AM_DIAG:
        sb_printf(b, ", offset=%lld, dim1=%d, dim2=%d", (long long)a->diag.offset,
                  (int)a->diag.dim1, (int)a->diag.dim2);
        break;
    case AM_SDPA:
        sb_printf(b, ", scale=%s, causal=%d", fmt_double(a->sdpa.scale).s, (int)a->sdpa.causal);
        break;
    case AM_FLEX:
        if (n->op == SMELT_OP_FLEX_ARG) {
            static const char *const roles[5] = { "score", "b", "h", "q_idx", "kv_idx" };
            sb_printf(b, "%s", roles[a->flex.role < 5 ? a->flex.role : 0]);
        } else {
            sb_printf(b, ", scale=%s, parts=%d, block=%dx%d", fmt_double(a->flex.scale).s, (int)a->flex.parts,
                      (int)a->flex.bq, (int)a->flex.bk);
        }
        break;
    case AM_UNFOLD:
        sb_printf(b, ", dim=%d, size=%lld, step=%lld, dil=%lld", (int)a->unfold.dim, (long long)a->unfold.size,
                  (long long)a->unfold.step, (long long)a->unfold.dil);
        break;
    case AM_CONV:
        sb_printf(b, ", groups=%d", (int)a->conv.groups);
        sb_ints(b, "stride", a->conv.stride, a->conv.nsp);
        sb_ints(b, "pad_lo", a->conv.pad_lo, a->conv.nsp);
        sb_ints(b, "pad_hi", a->conv.pad_hi, a->conv.nsp);
        sb_ints(b, "dil", a->conv.dil, a->conv.nsp);
        break;
    case AM_CALL:
        sb_printf(b, ", call=%d, out=%d/%d, key=%016llx", (int)a->call.id, (int)a->call.out,
                  (int)a->call.nout, (unsigned long long)a->call.key);
        break;
    case AM_NONE: break;
    }
}

char *smelt_graph_print(const smelt_graph *g)
{
    strbuf b = {0};
    for (int32_t i = 0; i < g->n; i++) {
        const smelt_node *n = &g->nodes[i];
        sb_printf(&b, "%%%d = %s(", (int)i, smelt_op_name((smelt_op)n->op));
        for (int k = 0; k < n->nsrc && k < SMELT_MAX_SRC; k++)
            sb_printf(&b, "%s%%%d", k ? ", " : "", (int)n->src[k]);
        print_attrs(&b, n);
        sb_printf(&b, ") : %s%s\n", smelt_dtype_name((smelt_dtype)n->dtype), SHP(n));
    }
    sb_printf(&b, "return");
    for (int32_t k = 0; k < g->nout; k++)
        sb_printf(&b, "%s %%%d", k ? "," : "", (int)g->outputs[k]);
    sb_printf(&b, "\n");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
