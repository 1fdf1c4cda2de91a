/* smelt graph IR — the contract between tracer, autograd and inductor.
 *
 * A graph is a flat array of nodes in topological order: every source index
 * of node i is < i. A node is both the op and the value it produces (one
 * output per node). Node 0.. are whatever the builder added; inputs are INPUT
 * nodes numbered by attrs.input.index in the order they were added.
 *
 * Invariants (checked by smelt_graph_verify):
 *  - src[k] < own index for k < nsrc; nsrc matches the op's arity
 *    (CAT: 1..SMELT_MAX_SRC).
 *  - ndim <= SMELT_MAX_DIMS; every shape[d] >= 0.
 *  - stride[] is meaningful only for INPUT nodes (element strides, may be 0
 *    or any non-negative value); it is all zero for every other node.
 *  - dtype and shape of every non-leaf node equal what shape/type inference
 *    gives for its op, sources and attrs (the builder computes them).
 *  - attrs: only the union member named for the op's kind is meaningful; the
 *    rest of the union is zero (so serialisation and hashing are canonical).
 *  - outputs[] index existing nodes; a node may be output more than once.
 */
#ifndef SMELT_GRAPH_H
#define SMELT_GRAPH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SMELT_MAX_DIMS 8
#define SMELT_MAX_SRC 16

/* Element types. Order is part of the serialisation format: append only. */
typedef enum smelt_dtype {
    SMELT_BOOL,   /* stored as one byte, 0 or 1 */
    SMELT_U8,
    SMELT_I8,
    SMELT_I16,
    SMELT_I32,
    SMELT_I64,
    SMELT_F16,    /* IEEE half: loaded/stored as such, computed in f32 */
    SMELT_BF16,   /* bfloat16: likewise */
    SMELT_F32,
    SMELT_F64,
    SMELT_NDTYPES
} smelt_dtype;

typedef enum smelt_op {
#define SMELT_OP(NAME, name, arity, kind) SMELT_OP_##NAME,
#include "ops.def"
    SMELT_NOPS
} smelt_op;

typedef enum smelt_op_kind {
    SMELT_KIND_LEAF,
    SMELT_KIND_UNARY,
    SMELT_KIND_BINARY,
    SMELT_KIND_TERNARY,
    SMELT_KIND_REDUCTION,
    SMELT_KIND_VIEW,
    SMELT_KIND_CAT,
    SMELT_KIND_EXTERN,
    SMELT_KIND_GATHER
} smelt_op_kind;

/* Inline attributes. Which member is valid:
 *   input   INPUT          index among the graph's inputs
 *   scalar  SCALAR, FULL   value; f for floating dtypes, i for bool/integers
 *   arange  ARANGE         start + i*step (in the node dtype; f or i as above)
 *   axis    IOTA, SQUEEZE, UNSQUEEZE, CAT (dim, normalised non-negative)
 *   clamp   CLAMP          bounds in the node dtype's domain (f or i)
 *   red     reductions     dims: bitmask over source dims (never 0 unless
 *                          source is 0-d), keepdim, correction for VAR/STD;
 *                          first for AMAX/AMIN over trailing dims: the
 *                          gradient goes to the first extreme in row-major
 *                          order (max pooling's), not shared among ties
 *   perm    PERMUTE        perm[d] = source dim placed at output dim d
 *   slice   SLICE          0 <= start <= end <= size, step >= 1
 *   diag    DIAGONAL       dim1 != dim2, offset any sign
 *   call    CALL           host call number id (an index into the caller's
 *                          table of calls), which of its nout results this
 *                          node is (out), and key: a hash of what the call
 *                          does (callable and constant arguments), so that
 *                          graphs calling different things never share code.
 *                          The nout nodes of one call are consecutive, in
 *                          order out = 0..nout-1, with identical sources,
 *                          id and key; ids are 0.. in order of first use.
 *   sdpa    SDPA           scale (finite), causal (0/1: key j attends query
 *                          i when j <= i; never with a mask source)
 *   unfold  UNFOLD         dim (normalised), size >= 1, step >= 1, dil >= 1:
 *                          out[.., i, .., j] = src[.., i*step + j*dil, ..]
 *                          with i < count = (L - dil*(size-1) - 1)/step + 1
 *                          (L >= dil*(size-1) + 1 required), j < size
 *   flex    FLEX_ARG       role (0..4, see ops.def)
 *           FLEX, FLEX_BWD scale (finite), parts (which optional sources),
 *                          bq, bk: the block tables' block sizes (>= 1)
 *   conv    CONV           nsp spatial dims (1..3), groups >= 1; per spatial
 *                          dim: stride >= 1, pad_lo/pad_hi >= 0 (zeros
 *                          added before/after), dil >= 1; unused entries 0.
 *                          out = (in + lo + hi - dil*(k-1) - 1)/stride + 1,
 *                          which must be >= 1 */
/* FLEX / FLEX_BWD attrs.flex.parts bits */
enum { SMELT_FLEX_SCORE = 1, SMELT_FLEX_MASK = 2, SMELT_FLEX_DSCORE = 4, SMELT_FLEX_BLOCKS = 8,
       SMELT_FLEX_FULL = 16, SMELT_FLEX_MASK_B = 32, SMELT_FLEX_MASK_H = 64, SMELT_FLEX_DSCORE_ONE = 128 };
typedef union smelt_attrs {
    struct { int32_t index; } input;
    struct { double f; int64_t i; } scalar;
    struct { double fstart, fstep; int64_t istart, istep; } arange;
    struct { int32_t dim; } axis;
    struct { double flo, fhi; int64_t ilo, ihi; uint8_t has_lo, has_hi; } clamp;
    struct { uint32_t dims; uint8_t keepdim, first; int64_t correction; } red;
    struct { int8_t perm[SMELT_MAX_DIMS]; } perm;
    struct { int32_t dim; int64_t start, end, step; } slice;
    struct { int64_t offset; int32_t dim1, dim2; } diag;
    struct { int32_t id, out, nout; uint64_t key; } call;
    struct { double scale; uint8_t causal; } sdpa;
    struct { double scale; uint8_t role, parts; int32_t bq, bk; } flex;
    struct { int32_t dim; int64_t size, step, dil; } unfold;
    struct { int32_t nsp, groups; int32_t stride[3], pad_lo[3], pad_hi[3], dil[3]; } conv;
    struct { int32_t dim; uint8_t wrap; int64_t n; } gather;   /* GATHER, CHECKIDX */
} smelt_attrs;

typedef struct smelt_node {
    uint16_t op;            /* smelt_op */
    uint8_t dtype;          /* smelt_dtype */
    uint8_t ndim;
    uint8_t nsrc;
    uint8_t pad_[3];
    int32_t src[SMELT_MAX_SRC];
    int64_t shape[SMELT_MAX_DIMS];
    int64_t stride[SMELT_MAX_DIMS];   /* INPUT only, in elements */
    smelt_attrs a;
} smelt_node;

typedef struct smelt_graph {
    smelt_node *nodes;
    int32_t n, cap;
    int32_t *outputs;
    int32_t nout, outcap;
    int32_t ninputs;
    uint8_t default_float;  /* torch.get_default_dtype() as a smelt dtype (set
                               before adding nodes; smelt_graph_new: float32):
                               what a Python float scalar and float math on
                               integers produce */
    char err[512];          /* last builder error, NUL-terminated */
} smelt_graph;

/* The index of FLEX / FLEX_BWD node n's source for part bit `part`, -1
 * when n does not have it. */
int smelt_flex_src(const smelt_node *n, int part);

/* op table queries (generated from ops.def) */
const char *smelt_op_name(smelt_op op);
int smelt_op_arity(smelt_op op);                  /* -1 = variable */
smelt_op_kind smelt_op_kind_of(smelt_op op);
int smelt_op_from_name(const char *name);         /* -1 if unknown */

/* dtype queries */
const char *smelt_dtype_name(smelt_dtype dt);     /* "float32", "bfloat16", "bool", ... */
size_t smelt_dtype_size(smelt_dtype dt);
int smelt_dtype_is_float(smelt_dtype dt);
int smelt_dtype_is_int(smelt_dtype dt);           /* integer, not bool */
/* torch.promote_types for two dtypes */
smelt_dtype smelt_dtype_promote(smelt_dtype a, smelt_dtype b);

int64_t smelt_node_numel(const smelt_node *n);

/* torch.result_type over the given nodes: dimensioned tensors win over 0-d
 * tensors, which win over Python scalars (SCALAR nodes), except that a
 * higher category (bool < int < float) still raises the result; a Python
 * float counts as default_float (the graph's). */
smelt_dtype smelt_result_type(const smelt_node *const *src, int n, smelt_dtype default_float);

/* Lifetime. smelt_graph_new returns NULL only on allocation failure. */
smelt_graph *smelt_graph_new(void);
void smelt_graph_free(smelt_graph *g);

/* Builders. Each returns the new node's index, or -1 with a message in
 * g->err naming the op and the shapes involved (never aborts on bad input).
 *
 * smelt_graph_input: strides may be NULL (contiguous). 0-d allowed.
 * smelt_graph_scalar: a weak 0-d scalar (Python number): dtype is SMELT_BOOL,
 *   SMELT_I64 or SMELT_F64 and says only its category for promotion.
 * smelt_graph_add: every other op. The caller fills proto->op, nsrc, src[],
 *   the attrs member the op uses (dims may be negative: normalised here), and
 *   for FULL/ARANGE/IOTA/CAST also proto->dtype, for RESHAPE/EXPAND/FULL/IOTA
 *   proto->ndim and proto->shape (RESHAPE may hold one -1). The builder
 *   computes dtype (torch type promotion, Python scalars weak), shape
 *   (broadcasting), zeroes unused attrs and checks everything. */
int32_t smelt_graph_input(smelt_graph *g, smelt_dtype dt, int ndim,
                          const int64_t *shape, const int64_t *strides);
int32_t smelt_graph_scalar(smelt_graph *g, smelt_dtype dt, double f, int64_t i);
int32_t smelt_graph_add(smelt_graph *g, const smelt_node *proto);
int smelt_graph_output(smelt_graph *g, int32_t node);   /* 0 or -1 */

/* The proto smelt_graph_add rebuilds stored node n from: n itself, but
 * for CLAMP, whose proto dtype is its bounds' category. For passes that
 * copy nodes into a new graph (INPUT and SCALAR nodes have builders of
 * their own). */
smelt_node smelt_node_proto(const smelt_node *n);

/* An exact copy of g: the same nodes at the same indices, the same outputs
 * (NULL if out of memory). */
smelt_graph *smelt_graph_copy(const smelt_graph *g);

/* Adds the nout (1..SMELT_MAX_SRC) CALL nodes of host call `id` (must be
 * the number of calls already in g: ids are dense) over sources src[0..nsrc):
 * node k has dtype dtypes[k] and shape ndims[k]/shapes[k]. Returns the index
 * of the first (the others follow), or -1 with g->err. */
int32_t smelt_graph_call(smelt_graph *g, int32_t id, uint64_t key, int nsrc, const int32_t *src,
                         int nout, const uint8_t *dtypes, const int *ndims,
                         const int64_t (*shapes)[SMELT_MAX_DIMS]);
/* Number of host calls in g (1 + the largest CALL id, 0 if none). */
int32_t smelt_graph_num_calls(const smelt_graph *g);

/* 0 if the invariants above hold, else -1 with a message in err. */
int smelt_graph_verify(const smelt_graph *g, char *err, size_t errlen);

/* Human-readable listing, one node a line:
 *   %3 = add(%1, %2) : float32[4, 5]
 * Returns a malloc'd NUL-terminated string (caller frees). */
char *smelt_graph_print(const smelt_graph *g);

/* Canonical little-endian serialisation (format version first). Two graphs
 * with equal serialisations compile to the same code. Returns a malloc'd
 * buffer and its length in *len. smelt_graph_hash: 64-bit FNV-1a-style hash of
 * that serialisation, stable across processes and machines. */
uint8_t *smelt_graph_serialize(const smelt_graph *g, size_t *len);
uint64_t smelt_graph_hash(const smelt_graph *g);

#endif
