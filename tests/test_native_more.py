"""Composites that became native with the OpInfo work: scatter into a
diagonal, _chunk_cat, renorm, trapezoid with sample points, linspace of
0-d tensors and integer dtypes, Poisson NLL, the softmax and dropout
backward ops, split_with_sizes and indexing by lists and slice objects.
Each agrees with eager (values, dtype, shape, strides) and runs without a
call into torch."""
import pytest
import torch
import torch.nn.functional as F

import smelt


def run_both(fn, *args):
    e = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    cf = smelt.compile(fn)
    r = cf(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    r2 = cf(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    return e, r, r2, smelt.explain(cf, *args)


def check(fn, *args, native=True):
    e, r, r2, info = run_both(fn, *args)
    for got in (r, r2):
        es = e if isinstance(e, (tuple, list)) else (e,)
        gs = got if isinstance(got, (tuple, list)) else (got,)
        assert len(es) == len(gs)
        for a, b in zip(es, gs):
            assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride(), (a, b)
            torch.testing.assert_close(b, a, equal_nan=True)
    if native:
        assert info["compiles"] and info["host_calls"] == [], info
    return info


def rnd(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-9, 10, shape, generator=g, dtype=dtype)
    return (torch.randn(shape, generator=g) * 2).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16])
def test_diagonal_scatter(dtype):
    for shape, off, d1, d2 in [((5, 5), 0, 0, 1), ((4, 7), 2, 0, 1), ((7, 4), -3, 0, 1), ((4, 7), -2, 1, 0),
                               ((3, 4, 5), 1, 2, 0), ((2, 3, 4, 5), -1, -1, 1), ((3, 3), 5, 0, 1), ((1, 6), 0, 0, 1)]:
        x = rnd(*shape, dtype=dtype)
        n = torch.diagonal(x, off, d1, d2).shape
        src = rnd(*n, dtype=dtype, seed=1)
        check(lambda x, s: torch.diagonal_scatter(x, s, off, d1, d2), x, src)
    # a src of the wrong shape raises as eager
    x = rnd(4, 4, dtype=dtype)
    with pytest.raises(RuntimeError):
        smelt.compile(lambda x, s: torch.diagonal_scatter(x, s))(x, rnd(3, dtype=dtype))


def test_chunk_cat():
    for shapes, dim, n in [([(1, 2, 3), (1, 2, 3)], -1, 5), ([(1, 2, 129), (1, 2, 297)], -1, 5),
                           ([(4, 6, 3), (4, 5)], 1, 2), ([(7,), (3,)], 0, 2), ([(2, 9)], 1, 4)]:
        ts = [rnd(*s, seed=i) for i, s in enumerate(shapes)]
        check(lambda *t: torch._chunk_cat(list(t), dim, n), *ts)


def test_renorm():
    for dtype in (torch.float32, torch.float64, torch.float16):
        x = rnd(5, 6, 7, dtype=dtype)
        for p, dim, mx in [(2, 1, 0.5), (1, -1, 3.0), (float("inf"), 0, 1.0), (3.5, 2, 2.0), (2, 0, 1e6)]:
            check(lambda t: torch.renorm(t, p, dim, mx), x)
            check(lambda t: t.renorm(p, dim, mx) * 2, x)


def test_trapezoid_with_sample_points():
    y = rnd(4, 6)
    x1 = torch.sort(rnd(6, seed=2)).values
    xs = rnd(4, 6, seed=3)
    check(lambda y, x: torch.trapezoid(y, x), y, x1)
    check(lambda y, x: torch.trapz(y, x, dim=-1), y, xs)
    check(lambda y, x: torch.trapezoid(y, x, dim=0), y, rnd(4, seed=4))
    check(lambda y, x: torch.cumulative_trapezoid(y, x), y, x1)
    check(lambda y, x: torch.trapezoid(y, x), rnd(3, 5, dtype=torch.int64), torch.arange(5))


def test_linspace_of_tensors_and_integer_dtypes():
    s, e = torch.tensor(-2.5), torch.tensor(7.25)
    check(lambda s, e: torch.linspace(s, e, 9), s, e)
    check(lambda s, e: torch.linspace(s, 3.0, 6) * e, s, e)
    check(lambda s, e: torch.logspace(s, e, 5, base=2.0), s, e)
    check(lambda s, e: torch.linspace(s, e, 1) + 1, s, e)
    for a, b, n in [(-3, 100.7, 7), (0, 10, 4), (5.9, -5.9, 11)]:
        check(lambda t: torch.linspace(a, b, n, dtype=torch.int64) + t, torch.tensor(1))
        check(lambda t: torch.logspace(a / 10, b / 10, n, base=3, dtype=torch.int64) + t, torch.tensor(1))
    check(lambda s, e: torch.linspace(s, e, 6, dtype=torch.int32), s, e)
    # half precision runs eagerly (eager's kernel rounds its steps in half)
    c = smelt.compile(lambda t: torch.linspace(1.5, 7.1, 50, dtype=torch.float16) + t)
    t = torch.zeros((), dtype=torch.float16)
    assert torch.equal(c(t), torch.linspace(1.5, 7.1, 50, dtype=torch.float16))


def test_poisson_nll_loss():
    x, t = rnd(4, 5), rnd(4, 5, seed=1).abs() * 2
    for kw in ({}, {"log_input": False}, {"full": True}, {"log_input": False, "full": True, "eps": 1e-3},
               {"reduction": "sum"}, {"reduction": "none"}):
        check(lambda a, b: F.poisson_nll_loss(a.abs() if kw.get("log_input") is False else a, b, **kw), x, t)
    with pytest.raises(ValueError):
        smelt.compile(lambda a, b: F.poisson_nll_loss(a, b, reduction="bad"))(x, t)


def test_dropout_and_softmax_backward_ops():
    g = rnd(3, 8)
    m = rnd(3, 8, dtype=torch.bool, seed=1)
    aten = torch.ops.aten
    check(lambda g, m: aten.native_dropout_backward(g, m, 2.0), g, m)
    check(lambda g, m: aten.native_dropout_backward(g, m, 1.25), g.to(torch.float16), m)
    y = torch.softmax(rnd(3, 8, seed=2), 1)
    check(lambda g, y: aten._softmax_backward_data(g, y, 1, torch.float32), g, y)
    check(lambda g, y: aten._softmax_backward_data(g, y, 0, torch.float16), g.half(), y.half())
    with pytest.raises(RuntimeError):   # eager's CPU kernel: input_dtype must be the gradient's
        smelt.compile(lambda g, y: aten._softmax_backward_data(g, y, 0, torch.float16))(g, y)
    ly = torch.log_softmax(rnd(3, 8, seed=2), -1)
    check(lambda g, y: aten._log_softmax_backward_data(g, y, -1, torch.float32), g, ly)


def test_split_with_sizes_and_index_forms():
    x = rnd(5, 6, 7)
    sizes = torch.Size([1, 3, 1])
    check(lambda t: torch.split_with_sizes(t, sizes), x)
    check(lambda t: torch.split_with_sizes(t, [2, 4], 1), x)
    check(lambda t: torch.split_with_sizes_copy(t, [3, 4], -1), x)
    sl = slice(1, None, 2)
    check(lambda t: t.__getitem__(sl), x)
    check(lambda t: t.__getitem__((sl, 1)), x)
    check(lambda t: t[[1, 2]], x)
    check(lambda t: t[:, [0, 5, 5, -1]], x)
    check(lambda t: t[[1, -1], [2, 3]], x)
    with pytest.raises(IndexError):
        smelt.compile(lambda t: t[[9]])(x)


def test_vector_norm_with_dtype():
    x = rnd(4, 9)
    check(lambda t: torch.linalg.vector_norm(t, 3.0, 1, dtype=torch.float64), x)
    check(lambda t: torch.linalg.vector_norm(t.half(), dtype=torch.float32), x)
    with pytest.raises(RuntimeError):
        smelt.compile(lambda t: torch.linalg.vector_norm(t.double(), dtype=torch.float32))(x)


def test_half_linear_rounds_once_as_eager():
    # eager adds the bias inside its GEMM (addmm; a contiguous input is
    # flattened to it): one rounding to half precision, bit for bit
    g = torch.Generator().manual_seed(5)
    f = lambda x, w, b: F.linear(x, w, b)
    for dtype in (torch.float16, torch.bfloat16):
        w = torch.randn(7, 5, generator=g).to(dtype)
        b = (torch.randn(7, generator=g) * 5).to(dtype)
        for shape in ((5,), (4, 5), (2, 3, 5)):
            x = (torch.randn(shape, generator=g) * 3).to(dtype)
            e, r, r2, info = run_both(f, x, w, b)
            assert torch.equal(e, r) and torch.equal(e, r2)
            assert info["compiles"] and info["host_calls"] == []


def test_bool_max_min_with_dim_and_integer_logsumexp():
    # eager's max/min take bool (the first True / False); logsumexp promotes
    # integers and bools to the default float
    x = rnd(5, 6, dtype=torch.bool)
    x[1] = False
    x[2] = True
    for fn in (lambda t: torch.max(t, 1), lambda t: torch.min(t, 0, keepdim=True), lambda t: t.max(-1)):
        check(fn, x)
    check(lambda t: torch.logsumexp(t, 1), x)
    check(lambda t: torch.logsumexp(t, (0, 1)), rnd(4, 5, dtype=torch.int64))
    with pytest.raises(RuntimeError):
        smelt.compile(lambda t: torch.argmax(t))(x)   # eager raises for bool
