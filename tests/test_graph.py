"""Graph IR builder tests: shape/dtype inference of every op kind against
torch eager on real tensors, error messages, printer, hash/serialisation,
verifier, and the Python API surface. Nothing here needs compile to work;
the Compiled input checks run only when the back end compiles."""
import itertools
import operator
import os
import subprocess
import sys

import pytest
import torch

import smelt._C as C

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = DTYPES[1:6]
FLOATS = DTYPES[6:]


def rand(shape, dtype):
    """Random values without zeros (integer division, pow stay defined)."""
    if dtype == torch.bool:
        return torch.rand(shape) < 2     # all True: no division by zero
    if dtype in INTS:
        return torch.randint(1, 5, shape, dtype=dtype)
    return (torch.rand(shape) + 0.5).to(dtype)


def torch_or_error(fn, *args, **kw):
    """fn's result, or the exception it raised."""
    try:
        return fn(*args, **kw)
    except (RuntimeError, NotImplementedError, ValueError, IndexError, TypeError) as e:
        return e


def build(fn):
    """Runs fn(g) on a fresh graph; returns (graph, node) or (graph, exception)."""
    g = C.Graph()
    try:
        return g, fn(g)
    except (ValueError, TypeError) as e:
        return g, e


def run_python(code, **env):
    """Runs code in a fresh interpreter that finds smelt and this file."""
    path = os.pathsep.join([os.path.dirname(os.path.abspath(__file__))] + sys.path)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=path, **env))
    assert out.returncode == 0, out.stderr
    return out


def check_like(g, node, ref, what):
    """Asserts node matches torch result/exception ref; returns a mismatch text."""
    if isinstance(ref, Exception):
        if not isinstance(node, Exception):
            return f"{what}: torch raised {type(ref).__name__}: {ref}, smelt gave " \
                   f"{g.dtype(node)}{list(g.shape(node))}"
        return None
    if isinstance(node, Exception):
        return f"{what}: smelt raised {node}, torch gave {ref.dtype}{list(ref.shape)}"
    g.verify()
    if g.dtype(node) != ref.dtype or g.shape(node) != tuple(ref.shape):
        return f"{what}: smelt {g.dtype(node)}{list(g.shape(node))}, " \
               f"torch {ref.dtype}{list(ref.shape)}"
    return None


# ---------------------------------------------------------------------------
# op table and dtype promotion

def test_op_table_matches_ops_def():
    names = [row[0] for row in C.OPS]
    assert len(names) == len(set(names))
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "inductor", "ops.def")) as f:
        rows = [line.split("(", 1)[1].split(")")[0].split(",")
                for line in f if line.startswith("SMELT_OP(")]
    assert [r[1].strip() for r in rows] == names
    assert [int(r[2]) for r in rows] == [row[1] for row in C.OPS]
    assert [r[3].strip().lower() for r in rows] == [row[2] for row in C.OPS]
    assert C.MAX_DIMS == 8


@pytest.mark.parametrize("a", DTYPES, ids=str)
def test_promote_types_every_pair(a):
    for b in DTYPES:
        g = C.Graph()
        x, y = g.input(a, (2,)), g.input(b, (2,))
        assert g.dtype(g.op("add", x, y)) == torch.promote_types(a, b), (a, b)
        assert g.dtype(g.op("cat", x, y)) == torch.promote_types(a, b), (a, b)
        g.verify()


# ---------------------------------------------------------------------------
# binary ops: every dtype pair, dimensioned / 0-d tensors / Python scalars

BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "div": operator.truediv, "floordiv": operator.floordiv, "pow": operator.pow,
    "remainder": operator.mod, "fmod": torch.fmod,
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
    "gt": operator.gt, "ge": operator.ge,
    "bitwise_and": operator.and_, "bitwise_or": operator.or_, "bitwise_xor": operator.xor,
    "bitwise_left_shift": operator.lshift, "bitwise_right_shift": operator.rshift,
    "maximum": torch.maximum, "minimum": torch.minimum, "atan2": torch.atan2,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor,
}
SCALARS = [True, 3, 2.5]


def operand(kind, dtype, value):
    """(builder, torch value) for a dimensioned tensor 't', 0-d tensor 'z'
    or Python scalar 's'."""
    if kind == "s":
        return (lambda g: g.scalar(value)), value
    shape = (3, 4) if kind == "t" else ()
    return (lambda g: g.input(dtype, shape)), rand(shape, dtype)


def scalar_reference(name, x, y):
    """Reference for a Python scalar operand of a torch function that takes
    tensors only (maximum, atan2, logical_*, fmod's first operand): the op's
    dtype rule applied to torch.result_type."""
    t = x if isinstance(x, torch.Tensor) else y
    dt = torch.result_type(x, y)
    if name.startswith("logical"):
        dt = torch.bool
    elif name == "atan2" and not dt.is_floating_point:
        dt = torch.float32
    elif name == "fmod" and dt == torch.bool:
        return RuntimeError("fmod of bool")
    return torch.empty(t.shape, dtype=dt)


def operand_combos():
    for a, b in itertools.product(DTYPES, DTYPES):
        yield ("t", a, None), ("t", b, None)
        yield ("t", a, None), ("z", b, None)
        yield ("z", a, None), ("t", b, None)
    for a in DTYPES:
        for v in SCALARS:
            yield ("t", a, None), ("s", None, v)
            yield ("s", None, v), ("t", a, None)
            yield ("z", a, None), ("s", None, v)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_dtype_vs_torch(name):
    bad = []
    for (ka, da, va), (kb, db, vb) in operand_combos():
        ba, xa = operand(ka, da, va)
        bb, xb = operand(kb, db, vb)
        ref = torch_or_error(BINARY[name], xa, xb)
        if isinstance(ref, TypeError) and "s" in (ka, kb):
            ref = scalar_reference(name, xa, xb)
        g, node = build(lambda g: g.op(name, ba(g), bb(g)))
        msg = check_like(g, node, ref, f"{name}({ka}:{da or va}, {kb}:{db or vb})")
        if msg:
            bad.append(msg)
    assert not bad, "\n".join(bad[:20])


def test_pow_negative_integer_scalar():
    g = C.Graph()
    x = g.input(torch.int32, (3,))
    with pytest.raises(ValueError, match="pow: integers to negative integer powers"):
        g.op("pow", x, g.scalar(-1))
    assert g.dtype(g.op("pow", x, g.scalar(-1.0))) == torch.float32
    assert g.dtype(g.op("pow", g.input(torch.float16, (3,)), g.scalar(-1))) == torch.float16


BROADCAST = [((3, 4), (4,)), ((3, 1), (1, 5)), ((2, 1, 4), (3, 1)), ((0, 3), (1, 3)),
             ((), (3,)), ((1,), (0,)), ((5, 1, 1, 2), (7, 1)), ((3, 4), (5,)),
             ((2, 3), (3, 2)), ((0,), (2,))]


@pytest.mark.parametrize("sa,sb", BROADCAST, ids=str)
def test_broadcast_shapes(sa, sb):
    ref = torch_or_error(torch.add, torch.ones(sa), torch.ones(sb))
    g, node = build(lambda g: g.op("add", g.input(torch.float32, sa),
                                   g.input(torch.float32, sb)))
    assert check_like(g, node, ref, "add") is None
    if isinstance(ref, Exception):
        assert "add: shapes" in str(node) and "cannot broadcast" in str(node)
        assert str(list(sa)) in str(node) and str(list(sb)) in str(node)


def test_broadcast_error_message_exact():
    g = C.Graph()
    with pytest.raises(ValueError) as e:
        g.op("add", g.input(torch.float32, (3, 4)), g.input(torch.float32, (5,)))
    assert str(e.value) == "add: shapes float32[3, 4] and float32[5] cannot broadcast"


# ---------------------------------------------------------------------------
# unary ops

UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "exp2": torch.exp2,
    "expm1": torch.expm1, "log": torch.log, "log2": torch.log2, "log1p": torch.log1p,
    "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos,
    "tan": torch.tan, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf,
    "acos": torch.acos, "asin": torch.asin, "atan": torch.atan, "acosh": torch.acosh, "asinh": torch.asinh,
    "atanh": torch.atanh, "cosh": torch.cosh, "sinh": torch.sinh, "log10": torch.log10, "erfc": torch.erfc,
    "lgamma": torch.lgamma, "ndtr": torch.special.ndtr,
    # GELU_TANH takes what every float math op takes (integers and bool in the default float)
    "gelu_tanh": lambda x: torch.nn.functional.gelu(
        x if x.is_floating_point() else x.to(torch.get_default_dtype()), approximate="tanh"),
    "relu": torch.relu, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round,
    "trunc": torch.trunc, "sign": torch.sign, "reciprocal": torch.reciprocal,
    "logical_not": torch.logical_not, "isnan": torch.isnan, "isinf": torch.isinf, "signbit": torch.signbit,
    "detach": torch.detach,
    "bitwise_not": torch.bitwise_not,
}


def test_every_op_has_a_test():
    covered = set(BINARY) | set(UNARY) | {
        "input", "scalar", "full", "arange", "iota", "cast", "clamp", "where",
        "sum", "prod", "amax", "amin", "argmax", "argmin", "any", "all", "mean", "var",
        "std", "reshape", "permute", "expand", "slice", "squeeze", "unsqueeze",
        "diagonal", "unfold", "flip", "cat", "matmul",
        "call",   # host calls: tests/test_hostcall.py
        "sdpa", "sdpa_backward",   # tests/test_attention.py
        "conv", "conv_backward_input", "conv_backward_weight",   # tests/test_conv.py
        "gather", "checkidx",   # tests/test_gather.py
        "flex_arg", "flex_attention", "flex_attention_backward"}   # tests/test_flex.py
    assert {row[0] for row in C.OPS} - covered == set()


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_vs_torch(name):
    bad = []
    for dt in DTYPES:
        for shape in [(3, 4), (), (0, 5)]:
            ref = torch_or_error(UNARY[name], rand(shape, dt))
            g, node = build(lambda g: g.op(name, g.input(dt, shape)))
            msg = check_like(g, node, ref, f"{name}({dt}{list(shape)})")
            if msg:
                bad.append(msg)
            if isinstance(node, Exception):
                assert str(node).startswith(name + ":"), node
    assert not bad, "\n".join(bad)


def test_unary_rejects_python_scalar():
    g = C.Graph()
    with pytest.raises(ValueError, match="exp: source %0 is a Python scalar"):
        g.op("exp", g.scalar(2.0))


@pytest.mark.parametrize("src", DTYPES, ids=str)
def test_cast(src):
    for dst in DTYPES:
        g = C.Graph()
        n = g.op("cast", g.input(src, (2, 3)), dtype=dst)
        assert g.dtype(n) == dst and g.shape(n) == (2, 3)
        g.verify()


BOUNDS = [dict(min=0), dict(max=6), dict(min=0, max=6), dict(min=0.5),
          dict(min=0, max=2.5), dict(min=True), dict(min=-1), dict(min=300),
          dict(min=-256), dict(min=1e10), dict(max=float("inf")), dict(min=-1.5),
          dict(), dict(min=None, max=None), dict(min=2 ** 40)]


@pytest.mark.parametrize("bounds", BOUNDS, ids=str)
def test_clamp_vs_torch(bounds):
    bad = []
    for dt in DTYPES:
        for shape in [(3, 4), ()]:
            ref = torch_or_error(torch.clamp, rand(shape, dt), **bounds)
            g, node = build(lambda g: g.op("clamp", g.input(dt, shape), **bounds))
            msg = check_like(g, node, ref, f"clamp({dt}, {bounds})")
            if msg:
                bad.append(msg)
    assert not bad, "\n".join(bad)


def test_clamp_printed_bounds_in_result_domain():
    g = C.Graph()
    g.op("clamp", g.input(torch.int32, (3,)), min=0.5, max=2)
    g.op("clamp", g.input(torch.int32, (3,)), min=-3)
    text = str(g)
    assert "clamp(%0, min=0.5, max=2.0) : float32[3]" in text
    assert "clamp(%2, min=-3) : int32[3]" in text


# ---------------------------------------------------------------------------
# where

def test_where_vs_torch():
    bad = []
    kinds = [("t", d, None) for d in DTYPES] + [("z", d, None) for d in DTYPES] + \
            [("s", None, v) for v in SCALARS]
    for (ka, da, va), (kb, db, vb) in itertools.product(kinds, kinds):
        if ka == kb == "s" and type(va) is not type(vb):
            continue
        ba, xa = operand(ka, da, va)
        bb, xb = operand(kb, db, vb)
        cond = torch.rand(4) > 0.5
        ref = torch_or_error(torch.where, cond, xa, xb)
        g, node = build(lambda g: g.op("where", g.input(torch.bool, (4,)), ba(g), bb(g)))
        if isinstance(ref, torch.Tensor) and ka != "t" and kb != "t":
            ref = ref.reshape(4)
        msg = check_like(g, node, ref, f"where({ka}:{da or va}, {kb}:{db or vb})")
        if msg:
            bad.append(msg)
    assert not bad, "\n".join(bad[:20])


def test_where_broadcast_three_ways():
    g = C.Graph()
    n = g.op("where", g.input(torch.bool, (3, 1, 1)), g.input(torch.float32, (4, 1)),
             g.input(torch.float64, (5,)))
    ref = torch.where(torch.rand(3, 1, 1) > 0.5, torch.rand(4, 1), torch.rand(5).double())
    assert g.shape(n) == tuple(ref.shape) and g.dtype(n) == ref.dtype


@pytest.mark.parametrize("dt", [torch.uint8, torch.int64, torch.float32], ids=str)
def test_where_needs_bool_condition(dt):
    g = C.Graph()
    x = g.input(torch.float32, (3,))
    with pytest.raises(ValueError, match=r"where: condition must be bool, got "):
        g.op("where", g.input(dt, (3,)), x, x)
    with pytest.raises(ValueError, match="where: condition must be a bool tensor"):
        g.op("where", g.scalar(True), x, x)


# ---------------------------------------------------------------------------
# reductions

def torch_reduce(name, x, dims, keepdim, correction=1):
    fn = getattr(torch, name)
    if name in ("var", "std"):
        return fn(x, dim=dims, keepdim=keepdim, correction=correction)
    if name in ("prod", "argmax", "argmin") and isinstance(dims, (list, tuple)):
        if len(dims) != 1 or x.dim() == 0:
            return None     # torch takes one int dim
        dims = dims[0]
    if name in ("prod", "any", "all") and dims is None:
        return fn(x) if not keepdim else fn(x.reshape(-1), 0, keepdim=True).reshape(
            [1] * x.dim())
    if name in ("argmax", "argmin") and dims is None:
        return fn(x, keepdim=keepdim)
    if dims is None:
        dims = ()
    return fn(x, dims, keepdim=keepdim)


REDUCTIONS = ["sum", "prod", "amax", "amin", "argmax", "argmin", "any", "all", "mean",
              "var", "std"]
DIMS = [None, 0, -1, [1], [0, 2], [-1, 0], [], [2, -1]]


@pytest.mark.filterwarnings("ignore:var\\(\\)|std\\(\\)")
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction_vs_torch(name):
    bad = []
    for dt, shape, dims, keep in itertools.product(DTYPES, [(2, 3, 4), (), (0, 3, 2)],
                                                   DIMS, [False, True]):
        if shape == () and dims not in (None, 0, -1, [], [-1]):
            continue
        if name in ("any", "all") and dims == []:
            continue    # torch reduces no dim there; smelt's dims=[] means all dims
        x = rand(shape, dt)
        ref = torch_or_error(torch_reduce, name, x, dims, keep)
        if ref is None:
            continue
        g, node = build(lambda g: g.op(name, g.input(dt, shape), dims=dims, keepdim=keep))
        msg = check_like(g, node, ref, f"{name}({dt}{list(shape)}, dims={dims}, keepdim={keep})")
        if msg:
            bad.append(msg)
        if isinstance(node, Exception):
            assert str(node).startswith(name + ":"), node
    assert not bad, "\n".join(bad[:20])


def test_argmax_several_dims_shape():
    g = C.Graph()
    n = g.op("argmax", g.input(torch.float32, (2, 3, 4)), dims=[0, 2], keepdim=True)
    assert g.shape(n) == (1, 3, 1) and g.dtype(n) == torch.int64


@pytest.mark.parametrize("dims,msg", [
    ([1, -2], "sum: dim 1 appears multiple times"),
    ([3], r"sum: dim 3 out of range for shape \[2, 3, 4\]"),
    ([-4], r"sum: dim -4 out of range for shape \[2, 3, 4\]"),
    (40, r"sum: dim 40 out of range for shape \(2, 3, 4\)"),
    ([1, 1], "sum: dim 1 appears multiple times"),
])
def test_reduction_dim_errors(dims, msg):
    g = C.Graph()
    with pytest.raises(ValueError, match=msg):
        g.op("sum", g.input(torch.float32, (2, 3, 4)), dims=dims)


def test_reduction_attrs_and_correction():
    g = C.Graph()
    x = g.input(torch.float32, (5, 6))
    v = g.op("var", x, dims=-1, correction=0, keepdim=True)
    assert "var(%0, dims=[1], keepdim=1, correction=0) : float32[5, 1]" in str(g)
    assert g.shape(v) == (5, 1)
    with pytest.raises(TypeError, match="sum: unexpected keyword argument 'correction'"):
        g.op("sum", x, correction=1)
    with pytest.raises(ValueError, match=r"mean: needs a floating input, got int32\[3\]"):
        g.op("mean", g.input(torch.int32, (3,)))
    with pytest.raises(ValueError, match=r"amax: cannot reduce dim 0 of size 0"):
        g.op("amax", g.input(torch.float32, (0, 3)), dims=0)


# ---------------------------------------------------------------------------
# views

RESHAPES = [((2, 3, 4), (6, 4)), ((2, 3, 4), (-1,)), ((2, 3, 4), (4, -1, 2)),
            ((2, 3), (3, 3)), ((2, 3), (-1, -1)), ((0, 3), (0, -1)), ((0, 3), (3, 0, 5)),
            ((), (1, 1)), ((1,), ()), ((6,), (-1, 4)), ((2, 3), (6, -2))]


@pytest.mark.parametrize("src,shape", RESHAPES, ids=str)
def test_reshape_vs_torch(src, shape):
    ref = torch_or_error(torch.reshape, torch.rand(src), shape)
    g, node = build(lambda g: g.op("reshape", g.input(torch.float16, src), shape=shape))
    if isinstance(ref, torch.Tensor):
        ref = ref.half()
    assert check_like(g, node, ref, "reshape") is None


PERMS = [((2, 3), (1, 0)), ((2, 3, 4), (2, 0, 1)), ((2, 3), (1, -2)), ((2, 3), (1, 1)),
         ((2, 3), (0,)), ((2, 3), (0, 2)), ((), ()), ((4,), (-1,))]


@pytest.mark.parametrize("src,perm", PERMS, ids=str)
def test_permute_vs_torch(src, perm):
    ref = torch_or_error(torch.permute, torch.rand(src), perm)
    g, node = build(lambda g: g.op("permute", g.input(torch.float32, src), perm=perm))
    assert check_like(g, node, ref, "permute") is None


EXPANDS = [((2, 1), (2, 5)), ((2, 1), (-1, 5)), ((3,), (4, 3)), ((2, 3), (-1, 2, 3)),
           ((2, 3), (0, -1, 3)), ((2, 1), (2, 0)), ((2, 3), (2, 4)), ((), (3, 2)),
           ((1, 1), (4, 1, 5)), ((2, 3), (3,))]


@pytest.mark.parametrize("src,shape", EXPANDS, ids=str)
def test_expand_vs_torch(src, shape):
    ref = torch_or_error(lambda: torch.rand(src).expand(shape))
    g, node = build(lambda g: g.op("expand", g.input(torch.float32, src), shape=shape))
    assert check_like(g, node, ref, "expand") is None


SLICES = [(0, None, None, 1), (0, 1, 3, 1), (1, -3, None, 2), (1, None, -1, 3),
          (0, 10, 20, 1), (0, -100, 100, 1), (1, 4, 2, 1), (-1, 0, 7, 4), (0, 2, 2, 1),
          (1, -1, None, 1), (0, 0, 4, 0), (0, None, None, -1), (2, 0, 1, 1),
          (1, 2 ** 70, None, 1), (1, -2 ** 70, 2 ** 70, 5)]


@pytest.mark.filterwarnings("ignore:Truncating the start/stop/step")
@pytest.mark.parametrize("shape", [(4, 7), (0, 5)], ids=str)
@pytest.mark.parametrize("dim,start,end,step", SLICES, ids=str)
def test_slice_vs_python(shape, dim, start, end, step):
    def ref_slice():
        x = torch.rand(shape)
        d = dim if dim >= 0 else dim + x.dim()
        if not 0 <= d < x.dim():
            raise IndexError("dim")
        return x[(slice(None),) * d + (slice(start, end, step),)]
    ref = torch_or_error(ref_slice)
    g, node = build(lambda g: g.op("slice", g.input(torch.float32, shape), dim=dim,
                                   start=start, end=end, step=step))
    assert check_like(g, node, ref, "slice") is None


def test_slice_attrs_are_normalised():
    g = C.Graph()
    g.op("slice", g.input(torch.float32, (4, 7)), dim=-1, start=-3, end=100, step=2)
    assert "slice(%0, dim=1, start=4, end=7, step=2) : float32[4, 2]" in str(g)


@pytest.mark.parametrize("src,dim", [((2, 1, 3), 1), ((2, 1, 3), -2), ((1,), 0),
                                     ((2, 3), 0), ((), 0), ((), -1), ((2, 3), 2),
                                     ((), 1)], ids=str)
def test_squeeze_vs_torch(src, dim):
    ref = torch_or_error(torch.squeeze, torch.rand(src), dim)
    g, node = build(lambda g: g.op("squeeze", g.input(torch.float32, src), dim=dim))
    assert check_like(g, node, ref, "squeeze") is None
    if isinstance(ref, torch.Tensor) and ref.shape == torch.Size(src):
        assert node == 0 and len(g) == 1     # torch no-op: the source itself


@pytest.mark.parametrize("src,dim", [((2, 3), 0), ((2, 3), 2), ((2, 3), -1), ((2, 3), -3),
                                     ((), 0), ((), -1), ((2, 3), 3), ((2, 3), -4),
                                     ((1,) * 8, 0)], ids=str)
def test_unsqueeze_vs_torch(src, dim):
    ref = torch_or_error(torch.unsqueeze, torch.rand(src), dim)
    if isinstance(ref, torch.Tensor) and ref.dim() > 8:
        ref = ValueError("rank")
    g, node = build(lambda g: g.op("unsqueeze", g.input(torch.float32, src), dim=dim))
    assert check_like(g, node, ref, "unsqueeze") is None


DIAGS = [((3, 4), 0, 0, 1), ((3, 4), 1, 0, 1), ((3, 4), -2, 0, 1), ((3, 4), 5, 0, 1),
         ((3, 4), -5, 0, 1), ((2, 3, 4), 1, -1, 0), ((2, 3, 4), -1, 2, 1), ((3, 4), 0, 0, 0),
         ((3,), 0, 0, 1), ((0, 4), 0, 0, 1), ((3, 4), 0, 1, 0)]


@pytest.mark.parametrize("src,offset,d1,d2", DIAGS, ids=str)
def test_diagonal_vs_torch(src, offset, d1, d2):
    ref = torch_or_error(torch.diagonal, torch.rand(src), offset, d1, d2)
    g, node = build(lambda g: g.op("diagonal", g.input(torch.float32, src), offset=offset,
                                   dim1=d1, dim2=d2))
    assert check_like(g, node, ref, "diagonal") is None


def test_views_keep_dtype():
    for dt in DTYPES:
        g = C.Graph()
        x = g.input(dt, (2, 1, 3))
        for n in [g.op("reshape", x, shape=(6,)), g.op("permute", x, perm=(2, 1, 0)),
                  g.op("expand", x, shape=(2, 4, 3)), g.op("slice", x, dim=2, start=1),
                  g.op("squeeze", x, dim=1), g.op("unsqueeze", x, dim=0),
                  g.op("diagonal", x, dim1=0, dim2=2)]:
            assert g.dtype(n) == dt
        g.verify()


# ---------------------------------------------------------------------------
# cat and matmul

CATS = [([(2, 3), (4, 3)], 0), ([(2, 3), (2, 5)], 1), ([(2, 3), (2, 5)], -1),
        ([(2, 3), (2, 4)], 0), ([(2, 3)], 0), ([(0, 3), (2, 3), (1, 3)], 0),
        ([(2, 3), (3,)], 0), ([(), ()], 0), ([(2, 3), (2, 3)], 2),
        ([(1, 2)] * 8, 0)]


@pytest.mark.parametrize("shapes,dim", CATS, ids=str)
def test_cat_vs_torch(shapes, dim):
    ref = torch_or_error(torch.cat, [torch.rand(s) for s in shapes], dim)
    g, node = build(lambda g: g.op("cat", *[g.input(torch.float32, s) for s in shapes],
                                   dim=dim))
    assert check_like(g, node, ref, "cat") is None


def test_cat_limits():
    g = C.Graph()
    x = g.input(torch.float32, (2,))
    with pytest.raises(TypeError, match="cat: expects 1 to 16 sources, got 17"):
        g.op("cat", *[x] * 17)
    with pytest.raises(ValueError, match=r"cat: 0-d tensors cannot be concatenated"):
        g.op("cat", g.input(torch.float32, ()))


MATMULS = [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (5, 1, 4, 6)),
           ((0, 3), (3, 0)), ((3, 0), (0, 2)), ((3, 4), (5, 6)), ((4,), (4, 5)),
           ((3, 4), (4,)), ((2, 3, 4), (3, 4, 5)), ((1, 2, 3), (7, 3, 2))]


@pytest.mark.parametrize("sa,sb", MATMULS, ids=str)
def test_matmul_shapes_vs_torch(sa, sb):
    ref = torch_or_error(torch.matmul, torch.rand(sa), torch.rand(sb))
    if len(sa) < 2 or len(sb) < 2:
        ref = ValueError("1-d")
    g, node = build(lambda g: g.op("matmul", g.input(torch.float32, sa),
                                   g.input(torch.float32, sb)))
    assert check_like(g, node, ref, "matmul") is None


def test_matmul_dtypes_vs_torch():
    bad = []
    for da, db in itertools.product(DTYPES, DTYPES):
        ref = torch_or_error(torch.matmul, rand((2, 3), da), rand((3, 4), db))
        g, node = build(lambda g: g.op("matmul", g.input(da, (2, 3)), g.input(db, (3, 4))))
        msg = check_like(g, node, ref, f"matmul({da}, {db})")
        if msg:
            bad.append(msg)
    assert not bad, "\n".join(bad)


def test_matmul_error_names_shapes():
    g = C.Graph()
    with pytest.raises(ValueError) as e:
        g.op("matmul", g.input(torch.float32, (3, 4)), g.input(torch.float32, (5, 6)))
    assert str(e.value) == "matmul: inner dims differ: float32[3, 4] and float32[5, 6]"


# ---------------------------------------------------------------------------
# leaves

FULLS = [(1.5, None), (2, None), (True, None), (2.7, torch.int64), (300, torch.uint8),
         (-1, torch.uint8), (-255, torch.uint8), (-256, torch.uint8), (255.5, torch.uint8),
         (5, torch.bool), (2.5, torch.bool), (1e10, torch.float16), (65519.0, torch.float16),
         (float("inf"), torch.float16), (float("nan"), torch.int32), (-129, torch.int8),
         (3.4e38, torch.bfloat16), (2 ** 63 - 1, torch.float16), (7, torch.float64),
         (2 ** 40, torch.int32), (-2 ** 31, torch.int32)]


@pytest.mark.parametrize("value,dtype", FULLS, ids=str)
def test_full_vs_torch(value, dtype):
    for shape in [(2, 3), (), (0,)]:
        if shape == () and dtype in (torch.float16, torch.bfloat16):
            continue    # torch skips the overflow check on one element; smelt always checks
        ref = torch_or_error(torch.full, shape, value, dtype=dtype)
        g, node = build(lambda g: g.op("full", shape=shape, value=value, dtype=dtype))
        assert check_like(g, node, ref, f"full({value}, {dtype})") is None


ARANGES = [(0, 5, 1, None), (1, 10, 3, None), (0, 5, 0.5, None), (5, 0, -1, None),
           (0, 1, 0.1, torch.float32), (0, 1, 0.1, torch.float16), (0.5, 5, 1, torch.int32),
           (0.5, 5.5, 1, torch.int64), (0, 5, 1.5, torch.int64), (0, 5, 1.5, torch.int32),
           (-0.5, 5, 1.5, torch.int16), (0, 10, 3, torch.uint8), (5, 0, 1, None),
           (0, 5, 0, None), (0, 5, 1, torch.bool), (3, 3, 1, None), (0, 5, 0.5, torch.int32),
           (-3, 7, 2, torch.float64), (0, 5, 0.5, torch.int64), (10, 0.5, -1, torch.int32)]


@pytest.mark.parametrize("start,end,step,dtype", ARANGES, ids=str)
def test_arange_vs_torch(start, end, step, dtype):
    ref = torch_or_error(torch.arange, start, end, step, dtype=dtype)
    g, node = build(lambda g: g.op("arange", start=start, end=end, step=step, dtype=dtype))
    assert check_like(g, node, ref, "arange") is None


def test_arange_defaults_and_attrs():
    g = C.Graph()
    n = g.op("arange", end=7)
    assert g.shape(n) == (7,) and g.dtype(n) == torch.int64
    g.op("arange", start=1, end=2, step=0.25)
    text = str(g)
    assert "arange(start=0, step=1) : int64[7]" in text
    assert "arange(start=1.0, step=0.25) : float32[4]" in text


def test_iota():
    g = C.Graph()
    n = g.op("iota", shape=(3, 4), dim=-1)
    assert g.shape(n) == (3, 4) and g.dtype(n) == torch.int64
    m = g.op("iota", shape=(2, 5), dim=0, dtype=torch.float16)
    assert g.dtype(m) == torch.float16
    assert "iota(dim=1) : int64[3, 4]" in str(g)
    with pytest.raises(ValueError, match="iota: dim 2 out of range"):
        g.op("iota", shape=(3, 4), dim=2)
    with pytest.raises(ValueError, match="iota: dtype bool is not supported"):
        g.op("iota", shape=(3,), dim=0, dtype=torch.bool)
    g.verify()


def test_input_and_scalar():
    g = C.Graph()
    a = g.input(torch.float32, (4, 5))
    b = g.input(torch.int8, (3, 2), strides=(0, 7))
    c = g.input(torch.float64, ())
    d = g.input(torch.float32, (2, 0, 3))
    assert (a, b, c, d) == (0, 1, 2, 3)
    assert g.shape(c) == () and g.dtype(b) == torch.int8
    assert g.dtype(g.scalar(True)) == torch.bool
    assert g.dtype(g.scalar(3)) == torch.int64
    assert g.dtype(g.scalar(2.5)) == torch.float64
    text = str(g)
    assert "%0 = input(index=0, strides=[5, 1]) : float32[4, 5]" in text
    assert "%1 = input(index=1, strides=[0, 7]) : int8[3, 2]" in text
    assert "%2 = input(index=2, strides=[]) : float64[]" in text
    assert "%3 = input(index=3, strides=[3, 3, 1]) : float32[2, 0, 3]" in text
    assert "scalar(value=True) : bool[]" in text
    assert "scalar(value=2.5) : float64[]" in text
    with pytest.raises(ValueError, match="input: negative stride"):
        g.input(torch.float32, (2,), strides=(-1,))
    with pytest.raises(ValueError, match="input: invalid size -2"):
        g.input(torch.float32, (-2,))
    with pytest.raises(ValueError, match="input: 1 strides for 2 dims"):
        g.input(torch.float32, (2, 2), strides=(1,))
    with pytest.raises(ValueError, match="more than the maximum 8"):
        g.input(torch.float32, (1,) * 9)
    with pytest.raises(TypeError, match="input: unsupported dtype"):
        g.input(torch.complex64, (2,))
    with pytest.raises(TypeError, match="scalar: value must be a bool, int or float"):
        g.scalar("x")
    with pytest.raises(ValueError, match="scalar: value .* is out of range"):
        g.scalar(2 ** 64)
    assert g.shape(g.input(torch.float32, (1,) * 8)) == (1,) * 8
    g.verify()


# ---------------------------------------------------------------------------
# Python scalar and 0-d tensor promotion, spelled out

PROMOTIONS = [
    (("t", torch.int32), ("s", 2.5), torch.float32),
    (("t", torch.bool), ("s", 3), torch.int64),
    (("t", torch.uint8), ("s", 300), torch.uint8),
    (("t", torch.float16), ("s", 2.5), torch.float16),
    (("t", torch.int32), ("z", torch.float64), torch.float64),
    (("t", torch.int8), ("z", torch.int64), torch.int8),
    (("t", torch.float16), ("z", torch.float64), torch.float16),
    (("t", torch.bool), ("z", torch.int32), torch.int32),
    (("z", torch.int32), ("s", 2.5), torch.float32),
    (("z", torch.float16), ("z", torch.bfloat16), torch.float32),
    (("s", 2), ("s", 2.5), torch.float32),
    (("s", True), ("s", 2), torch.int64),
]


@pytest.mark.parametrize("a,b,want", PROMOTIONS, ids=str)
def test_promotion_cases(a, b, want):
    g = C.Graph()

    def node(k):
        kind, v = k
        return g.scalar(v) if kind == "s" else g.input(v, (3,) if kind == "t" else ())
    n = g.op("add", node(a), node(b))
    assert g.dtype(n) == want
    xa = a[1] if a[0] == "s" else rand((3,) if a[0] == "t" else (), a[1])
    xb = b[1] if b[0] == "s" else rand((3,) if b[0] == "t" else (), b[1])
    if a[0] != "s" or b[0] != "s":
        assert torch.result_type(xa, xb) == want
    g.verify()


# ---------------------------------------------------------------------------
# Python API errors

def test_api_errors():
    g = C.Graph()
    x = g.input(torch.float32, (2, 3))
    with pytest.raises(ValueError, match="op: unknown op 'frobnicate'"):
        g.op("frobnicate", x)
    with pytest.raises(ValueError, match="op: use Graph.input"):
        g.op("input")
    with pytest.raises(TypeError, match="add: expects 2 sources, got 1"):
        g.op("add", x)
    with pytest.raises(ValueError, match=r"add: node 7 does not exist \(graph has 1 nodes\)"):
        g.op("add", x, 7)
    with pytest.raises(TypeError, match="add: node ids are ints, got float"):
        g.op("add", x, 1.0)
    with pytest.raises(TypeError, match="exp: unexpected keyword argument 'dims'"):
        g.op("exp", x, dims=1)
    with pytest.raises(TypeError, match="reshape: missing keyword argument 'shape'"):
        g.op("reshape", x)
    with pytest.raises(TypeError, match="cast: unsupported dtype"):
        g.op("cast", x, dtype="float32")
    with pytest.raises(ValueError, match=r"permute: perm has 1 entries for shape \(2, 3\)"):
        g.op("permute", x, perm=[0])
    with pytest.raises(ValueError, match="clamp: at least one of min and max"):
        g.op("clamp", x)
    with pytest.raises(ValueError, match="output: node 5 does not exist"):
        g.output(5)
    with pytest.raises(ValueError, match="output: node 1 is a Python scalar"):
        g.output(g.scalar(1))
    with pytest.raises(ValueError, match="dtype: node -1 does not exist"):
        g.dtype(-1)
    with pytest.raises(TypeError):
        C.Graph(1)
    with pytest.raises(TypeError):
        C.Compiled()
    assert len(g) == 2
    g.verify()


def test_error_messages_name_op_and_shapes():
    cases = [
        (lambda g: g.op("sub", g.input(torch.bool, (2,)), g.input(torch.int64, (2,))),
         "sub: bool operands are not supported (bool[2] and int64[2])"),
        (lambda g: g.op("neg", g.input(torch.bool, (3, 1))),
         "neg: bool input bool[3, 1] is not supported"),
        (lambda g: g.op("bitwise_and", g.input(torch.float32, (2,)), g.scalar(1)),
         "bitwise_and: needs integer or bool operands, got float32[2] and Python int"),
        (lambda g: g.op("reshape", g.input(torch.float32, (2, 3)), shape=(4, 2)),
         "reshape: shape [4, 2] is invalid for input of shape [2, 3]"),
        (lambda g: g.op("expand", g.input(torch.float32, (2, 3)), shape=(2, 4)),
         "expand: shape [2, 3] cannot expand to [2, 4]"),
        (lambda g: g.op("cat", g.input(torch.float32, (2, 3)), g.input(torch.float32, (3, 4))),
         "cat: shapes float32[2, 3] and float32[3, 4] differ outside dim 0"),
        (lambda g: g.op("matmul", g.input(torch.float32, (2, 3)), g.input(torch.float64, (3, 4))),
         "matmul: operands must have the same dtype, got float32[2, 3] and float64[3, 4]"),
        (lambda g: g.op("diagonal", g.input(torch.float32, (2, 3)), dim1=1, dim2=-1),
         "diagonal: dim1 and dim2 are both 1 (shape [2, 3])"),
        (lambda g: g.op("squeeze", g.input(torch.float32, (2, 3)), dim=5),
         "squeeze: dim 5 out of range for shape [2, 3] (expected [-2, 1])"),
    ]
    for fn, msg in cases:
        g, node = build(fn)
        assert isinstance(node, ValueError), msg
        assert msg in str(node), (str(node), msg)


# ---------------------------------------------------------------------------
# printer, serialisation, hash, verify

def sample_graph(shape=(4, 5), dtype=torch.float32, dims=(1,), op="add", strides=None,
                 scalar=2.5, out_twice=False):
    g = C.Graph()
    a = g.input(dtype, shape, strides=strides)
    s = g.scalar(scalar)
    b = g.op(op, a, s)
    r = g.op("sum", b, dims=list(dims), keepdim=True)
    g.output(b, r)
    if out_twice:
        g.output(b)
    return g


def test_printer():
    text = str(sample_graph())
    assert text == ("%0 = input(index=0, strides=[5, 1]) : float32[4, 5]\n"
                    "%1 = scalar(value=2.5) : float64[]\n"
                    "%2 = add(%0, %1) : float32[4, 5]\n"
                    "%3 = sum(%2, dims=[1], keepdim=1) : float32[4, 1]\n"
                    "return %2, %3\n")
    g = C.Graph()
    x = g.input(torch.float32, (2, 3, 4))
    g.op("permute", x, perm=[2, 0, 1])
    g.op("diagonal", x, offset=-1, dim1=2, dim2=0)
    g.op("cat", x, x, dim=-2)
    g.op("full", shape=(2,), value=float("nan"))
    g.op("full", shape=(2,), value=True)
    g.op("cast", x, dtype=torch.bfloat16)
    g.op("amax", x)
    text = str(g)
    for piece in ["permute(%0, perm=[2, 0, 1]) : float32[4, 2, 3]",
                  "diagonal(%0, offset=-1, dim1=2, dim2=0) : float32[3, 2]",
                  "cat(%0, %0, dim=1) : float32[2, 6, 4]",
                  "full(value=nan) : float32[2]", "full(value=True) : bool[2]",
                  "cast(%0) : bfloat16[2, 3, 4]",
                  "amax(%0, dims=[0, 1, 2], keepdim=0) : float32[]", "return\n"]:
        assert piece in text, (piece, text)
    assert repr(g).startswith("<smelt._C.Graph: 8 nodes, 1 inputs, 0 outputs")


def test_serialize_format_and_stability():
    g = sample_graph()
    data = g.serialize()
    assert data[:4] == b"SMG1"
    assert int.from_bytes(data[4:8], "little") == 3
    assert int.from_bytes(data[8:12], "little") == len(g)
    assert data[16] == 8   # the default float dtype: float32
    assert data == sample_graph().serialize()
    assert g.hash() == sample_graph().hash()
    assert 0 <= g.hash() < 2 ** 64
    # stable across processes
    out = run_python("import test_graph; print(test_graph.sample_graph().hash())",
                     PYTHONHASHSEED="123")
    assert int(out.stdout.split()[-1]) == g.hash()


@pytest.mark.parametrize("change", [
    dict(shape=(4, 6)), dict(dtype=torch.float64), dict(dims=(0,)), dict(op="mul"),
    dict(strides=(1, 4)), dict(scalar=3.5), dict(scalar=3), dict(out_twice=True)], ids=str)
def test_hash_changes(change):
    base = sample_graph()
    other = sample_graph(**change)
    assert other.hash() != base.hash()
    assert other.serialize() != base.serialize()


def test_default_float_dtype_is_part_of_the_graph():
    """Python floats and float math on integers follow torch's default
    dtype, read when the Graph is made; graphs made under another default
    hash differently."""
    def build():
        g = C.Graph()
        x = g.input(torch.int64, (3,))
        g.output(g.op("mul", x, g.scalar(1.5)), g.op("sqrt", x))
        return g
    base = build()
    torch.set_default_dtype(torch.float64)
    try:
        g64 = build()
        x = torch.arange(3)
        outs = g64.compile()(x)
    finally:
        torch.set_default_dtype(torch.float32)
    assert [o.dtype for o in outs] == [torch.float64, torch.float64]
    torch.testing.assert_close(outs[0], x * 1.5, check_dtype=False)
    assert g64.dtype(len(g64) - 1) == torch.float64 and base.dtype(len(base) - 1) == torch.float32
    assert g64.hash() != base.hash()


def test_hash_keepdim_and_empty():
    g1, g2 = C.Graph(), C.Graph()
    g1.op("sum", g1.input(torch.float32, (3,)), keepdim=True)
    g2.op("sum", g2.input(torch.float32, (3,)), keepdim=False)
    assert g1.hash() != g2.hash()
    assert C.Graph().hash() == C.Graph().hash()
    assert len(C.Graph().serialize()) == 21   # magic, version, counts, default float
    C.Graph().verify()


def test_equal_graphs_via_different_spellings_hash_equal():
    """Normalised attrs: dims=-1 and dims=[1] build the same node."""
    def make(dims, start, perm):
        g = C.Graph()
        x = g.input(torch.float32, (3, 4))
        g.output(g.op("sum", x, dims=dims))
        g.output(g.op("slice", x, dim=-1, start=start))
        g.output(g.op("permute", x, perm=perm))
        return g
    assert make(-1, -4, [-1, 0]).hash() == make([1], 0, [1, 0]).hash()


def test_verify_on_big_graph():
    g = C.Graph()
    x = g.input(torch.float16, (2, 3, 4), strides=(12, 1, 3))
    y = g.op("exp", x)
    z = g.op("clamp", g.input(torch.int16, (4,)), min=-2, max=3.5)
    w = g.op("where", g.op("gt", y, g.scalar(1.0)), y, g.op("cast", z, dtype=torch.float16))
    v = g.op("var", w, dims=[0, -1], correction=0)
    u = g.op("matmul", g.op("reshape", w, shape=(6, 4)), g.op("permute", w, perm=(0, 2, 1)))
    g.op("cat", g.op("expand", v, shape=(5, 3)), g.op("full", shape=(1, 3), value=2))
    g.op("argmin", u, dims=[0, 2], keepdim=True)
    g.op("diagonal", g.op("iota", shape=(4, 4), dim=1))
    g.output(u, v, w, u)
    g.verify()
    assert len(g.serialize()) > 100


# ---------------------------------------------------------------------------
# module-level functions, logging, compiled calls

def test_num_threads():
    old = C.get_num_threads()
    assert old >= 1
    try:
        C.set_num_threads(3)
        assert C.get_num_threads() == 3
    finally:
        C.set_num_threads(old)
    with pytest.raises(ValueError, match="set_num_threads"):
        C.set_num_threads(0)


def test_logs_graph_channel_and_unknown_names():
    code = ("import logging, torch, smelt._C as C\n"
            "logging.basicConfig(level=logging.INFO, format='%(name)s|%(message)s')\n"
            "g = C.Graph(); x = g.input(torch.float32, (3,)); g.output(g.op('exp', x))\n"
            "try:\n    g.compile()\nexcept RuntimeError:\n    pass\n")
    out = run_python(code, SMELT_LOGS="graph, bogus")
    assert "unknown channel 'bogus'" in out.stderr
    assert "listing of graph " in out.stderr
    assert "%1 = exp(%0) : float32[3]" in out.stderr


def compile_graph(g, **kw):
    return g.compile(**kw)


def test_compiled_call_validates_inputs():
    g = C.Graph()
    a = g.input(torch.float32, (4, 5))
    b = g.input(torch.int64, (5,), strides=(2,))
    g.output(g.op("add", a, b))
    f = compile_graph(g)
    x = torch.rand(4, 5)
    y = torch.arange(10)[::2]
    out = f(x, y)
    assert isinstance(out, list) and len(out) == 1
    torch.testing.assert_close(out[0], x + y)
    with pytest.raises(TypeError, match="expected 2 inputs, got 1"):
        f(x)
    with pytest.raises(TypeError, match="input 1: expected a torch.Tensor, got list"):
        f(x, [1])
    with pytest.raises(TypeError, match="input 0: expected dtype torch.float32, got torch.float64"):
        f(x.double(), y)
    with pytest.raises(ValueError, match=r"input 0: expected shape \(4, 5\), got torch.Size"):
        f(torch.rand(4, 6), y)
    with pytest.raises(ValueError, match=r"input 1: expected strides \(2,\), got \(1,\)"):
        f(x, torch.arange(5))
    with pytest.raises(ValueError, match="input 0: expected a cpu tensor, got device"):
        f(torch.empty(4, 5, device="meta"), y)
    with pytest.raises(TypeError, match="no keyword arguments"):
        f(x, y=y)


def test_compiled_code_and_counts():
    g = C.Graph()
    g.output(g.op("exp", g.input(torch.float32, (3,))))
    f = compile_graph(g, keep_code=True)
    assert f.num_kernels >= 0 and f.num_externs >= 0
    for which in ("ir", "asm", "kernels"):
        assert f.code(which) is None or isinstance(f.code(which), str)
    with pytest.raises(ValueError, match="code: expected 'ir', 'asm', 'kernels' or 'launch'"):
        f.code("bogus")
