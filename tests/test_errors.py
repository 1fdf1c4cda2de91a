"""User errors become exceptions with useful messages, never crashes:
bad graph-building input -> ValueError/TypeError naming the op; wrong call
inputs -> TypeError/ValueError naming the input. After an error the graph
and the compiled function stay usable."""
import pytest
import torch

import smelt._C as C
from conftest import F32, I32, BOOL, rand

BUILD_ERRORS = (ValueError, TypeError)
CALL_ERRORS = (TypeError, ValueError)


def graph_with(*shapes, dtype=F32):
    g = C.Graph()
    return g, [g.input(dtype, s) for s in shapes]


# ------------------------------------------------------------ builder errors

BAD_BUILDS = {
    "broadcast-mismatch": (lambda g, a, b: g.op("add", a, b), [(3, 4), (5,)], "add"),
    "broadcast-mismatch-3d": (lambda g, a, b: g.op("mul", a, b), [(2, 3, 4), (3, 5)], "mul"),
    "sum-bad-dim": (lambda g, a: g.op("sum", a, dims=2), [(3, 4)], "sum"),
    "sum-bad-neg-dim": (lambda g, a: g.op("sum", a, dims=[-3]), [(3, 4)], "sum"),
    "sum-repeated-dim": (lambda g, a: g.op("sum", a, dims=[1, 1]), [(3, 4)], "sum"),
    "permute-repeat": (lambda g, a: g.op("permute", a, perm=[0, 0]), [(3, 4)], "permute"),
    "permute-short": (lambda g, a: g.op("permute", a, perm=[1, 0]), [(2, 3, 4)], "permute"),
    "permute-out-of-range": (lambda g, a: g.op("permute", a, perm=[0, 2]), [(3, 4)], "permute"),
    "reshape-numel": (lambda g, a: g.op("reshape", a, shape=[5, 3]), [(3, 4)], "reshape"),
    "reshape-two-minus-one": (lambda g, a: g.op("reshape", a, shape=[-1, -1]), [(3, 4)], "reshape"),
    "expand-non-1": (lambda g, a: g.op("expand", a, shape=[3, 8]), [(3, 4)], "expand"),
    "expand-fewer-dims": (lambda g, a: g.op("expand", a, shape=[4]), [(3, 4)], "expand"),
    "slice-step-0": (lambda g, a: g.op("slice", a, dim=0, step=0), [(3, 4)], "slice"),
    "slice-bad-dim": (lambda g, a: g.op("slice", a, dim=2, start=1), [(3, 4)], "slice"),
    "unsqueeze-bad-dim": (lambda g, a: g.op("unsqueeze", a, dim=4), [(3, 4)], "unsqueeze"),
    "diagonal-same-dims": (lambda g, a: g.op("diagonal", a, dim1=1, dim2=1), [(3, 4)], "diagonal"),
    "cat-mismatch": (lambda g, a, b: g.op("cat", a, b, dim=0), [(3, 4), (3, 5)], "cat"),
    "cat-ndim": (lambda g, a, b: g.op("cat", a, b, dim=0), [(3, 4), (4,)], "cat"),
    "cat-bad-dim": (lambda g, a, b: g.op("cat", a, b, dim=2), [(3, 4), (3, 4)], "cat"),
    "matmul-k-mismatch": (lambda g, a, b: g.op("matmul", a, b), [(3, 4), (5, 6)], "matmul"),
    "matmul-1d": (lambda g, a, b: g.op("matmul", a, b), [(4,), (4, 2)], "matmul"),
    "matmul-batch-mismatch": (lambda g, a, b: g.op("matmul", a, b), [(2, 3, 4), (3, 4, 5)], "matmul"),
    "unknown-op": (lambda g, a: g.op("frobnicate", a), [(3, 4)], "frobnicate"),
    "too-few-sources": (lambda g, a: g.op("add", a), [(3, 4)], "add"),
    "too-many-sources": (lambda g, a: g.op("neg", a, a), [(3, 4)], "neg"),
    "bad-node-id": (lambda g, a: g.op("neg", 1000), [(3, 4)], "neg"),
    "negative-node-id": (lambda g, a: g.op("neg", -1), [(3, 4)], "neg"),
    "cast-no-dtype": (lambda g, a: g.op("cast", a), [(3, 4)], "cast"),
    "full-no-shape": (lambda g: g.op("full", value=1.0), [], "full"),
    "arange-step-0": (lambda g: g.op("arange", end=5, step=0), [], "arange"),
}


@pytest.mark.parametrize("case", list(BAD_BUILDS))
def test_bad_build(case):
    fn, shapes, opname = BAD_BUILDS[case]
    g, xs = graph_with(*shapes)
    n = len(g)
    with pytest.raises(BUILD_ERRORS) as e:
        fn(g, *xs)
    assert opname in str(e.value), f"message does not name {opname!r}: {e.value}"
    assert len(g) == n, "a failed op left a node behind"
    # the graph is still usable
    y = g.op("neg", xs[0]) if xs else g.op("full", shape=[2], value=1.0)
    g.output(y)
    g.verify()


TORCH_REJECTS = {  # dtype combinations torch rejects: so must the builder
    "bitwise-float": (lambda g, a: g.op("bitwise_and", a, a), F32),
    "shift-float": (lambda g, a: g.op("bitwise_left_shift", a, a), F32),
    "bitwise-not-float": (lambda g, a: g.op("bitwise_not", a), F32),
    "mean-int": (lambda g, a: g.op("mean", a, dims=0), I32),
    "var-int": (lambda g, a: g.op("var", a), I32),
    "sub-bool": (lambda g, a: g.op("sub", a, a), BOOL),
    "neg-bool": (lambda g, a: g.op("neg", a), BOOL),
    "where-float-cond": (lambda g, a: g.op("where", a, a, a), F32),
}


@pytest.mark.parametrize("case", list(TORCH_REJECTS))
def test_bad_dtype_build(case):
    fn, dtype = TORCH_REJECTS[case]
    g, (x,) = graph_with((3, 4), dtype=dtype)
    with pytest.raises(BUILD_ERRORS):
        fn(g, x)


BAD_INPUTS = {
    "negative-size": dict(dtype=F32, shape=(3, -1)),
    "too-many-dims": dict(dtype=F32, shape=(1,) * 9),
    "strides-length": dict(dtype=F32, shape=(3, 4), strides=(4,)),
    "negative-stride": dict(dtype=F32, shape=(3, 4), strides=(-4, 1)),
    "complex-dtype": dict(dtype=torch.complex64, shape=(3,)),
    "not-a-dtype": dict(dtype="float32", shape=(3,)),
}


def test_where_mismatch():
    g = C.Graph()
    c, a, b = g.input(BOOL, (3, 4)), g.input(F32, (3, 4)), g.input(F32, (4, 3))
    with pytest.raises(BUILD_ERRORS) as e:
        g.op("where", c, a, b)
    assert "where" in str(e.value)


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_declaration(case):
    kw = BAD_INPUTS[case]
    g = C.Graph()
    with pytest.raises(BUILD_ERRORS):
        g.input(kw["dtype"], kw["shape"], strides=kw.get("strides"))


def test_bad_output_id():
    g, (x,) = graph_with((3,))
    with pytest.raises(BUILD_ERRORS):
        g.output(17)
    with pytest.raises(BUILD_ERRORS):
        g.output(-1)


def test_bad_scalar():
    g = C.Graph()
    with pytest.raises(BUILD_ERRORS):
        g.scalar("2.5")
    with pytest.raises(BUILD_ERRORS):
        g.scalar(1 + 2j)


# ------------------------------------------------------------ call errors

@pytest.fixture(scope="module")
def compiled():
    """f(a: float32[4, 5] contiguous, b: float32[5]) -> a + b"""
    g = C.Graph()
    a = g.input(F32, (4, 5))
    b = g.input(F32, (5,))
    g.output(g.op("add", a, b))
    return g.compile()


def _ok_args():
    return torch.rand(4, 5), torch.rand(5)


BAD_CALLS = {
    "too-few": lambda a, b: (a,),
    "too-many": lambda a, b: (a, b, b),
    "none": lambda a, b: (),
    "not-a-tensor": lambda a, b: (a, [1.0] * 5),
    "number": lambda a, b: (3.0, b),
    "wrong-dtype": lambda a, b: (a.double(), b),
    "wrong-dtype-int": lambda a, b: (a, b.int()),
    "wrong-shape": lambda a, b: (torch.rand(4, 6), b),
    "wrong-ndim": lambda a, b: (a.reshape(20), b),
    "wrong-strides": lambda a, b: (torch.rand(5, 4).T, b),
    "expanded-strides": lambda a, b: (torch.rand(1, 5).expand(4, 5), b),
    "meta-device": lambda a, b: (torch.empty(4, 5, device="meta"), b),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_call(case, compiled):
    a, b = _ok_args()
    args = BAD_CALLS[case](a, b)
    with pytest.raises(CALL_ERRORS) as e:
        compiled(*args)
    msg = str(e.value)
    assert msg, "empty error message"
    if case not in ("too-few", "too-many", "none"):
        assert "input" in msg.lower(), f"message does not name the input: {msg}"
    # still usable afterwards
    assert torch.allclose(compiled(a, b)[0], a + b)


def test_call_with_keyword(compiled):
    a, b = _ok_args()
    with pytest.raises(TypeError):
        compiled(a, b=b)


def test_wrong_dtype_message_names_dtypes(compiled):
    a, b = _ok_args()
    with pytest.raises(CALL_ERRORS) as e:
        compiled(a.double(), b)
    msg = str(e.value)
    assert "float32" in msg and "float64" in msg, msg


def test_wrong_shape_message_names_shapes(compiled):
    a, b = _ok_args()
    with pytest.raises(CALL_ERRORS) as e:
        compiled(torch.rand(4, 7), b)
    assert "7" in str(e.value) and "5" in str(e.value), str(e.value)


def test_error_then_compile_again():
    """A failed build does not poison later builds or compiles."""
    g = C.Graph()
    a, b = g.input(F32, (3, 4)), g.input(F32, (5,))
    with pytest.raises(BUILD_ERRORS):
        g.op("add", a, b)
    g.output(g.op("exp", a))
    f = g.compile()
    x, y = rand((3, 4), F32), rand((5,), F32)
    assert torch.allclose(f(x, y)[0], torch.exp(x))
