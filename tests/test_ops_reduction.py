"""Reduction primitives vs torch: single/several/all/negative dims, keepdim,
0-d and 0-size inputs, non-contiguous inputs, ties, NaN, huge 1-d and
column reductions, several thread counts.

Float tolerances follow DESIGN.md: 1e-4 relative for float32 reductions, with
sum/mean errors measured against the same reduction of |x| (the error bound of
any summation order), and prod in fp16/bf16 scaled by sqrt(n) because torch
itself accumulates those in the low precision.
"""
import math

import pytest
import torch

from conftest import (BF16, BOOL, EVERY, F16, F32, F64, I32, U8, REDUCTION_TOL,
                      assert_close, check, dname, ops_of_kind, rand, run, torch_reduce)

# (name, make input from mk(shape), dims, keepdim)
CASES = [
    ("17", lambda mk: mk((17,)), 0, False),
    ("67-all", lambda mk: mk((67,)), None, False),
    ("13x31-d1", lambda mk: mk((13, 31)), 1, False),
    ("13x31-d0-keep", lambda mk: mk((13, 31)), 0, True),
    ("13x31-neg-keep", lambda mk: mk((13, 31)), -1, True),
    ("13x31-all-keep", lambda mk: mk((13, 31)), None, True),
    ("3x5x7-02", lambda mk: mk((3, 5, 7)), [0, 2], False),
    ("3x5x7-1-keep", lambda mk: mk((3, 5, 7)), [1], True),
    ("3x5x7-neg2", lambda mk: mk((3, 5, 7)), -2, False),
    ("2x3x4x5-13-keep", lambda mk: mk((2, 3, 4, 5)), [1, 3], True),
    ("2x3x4x5-all", lambda mk: mk((2, 3, 4, 5)), [0, 1, 2, 3], False),
    ("2x3x4x5-neg", lambda mk: mk((2, 3, 4, 5)), [-1, -2], False),
    ("0d", lambda mk: mk(()), None, False),
    ("1", lambda mk: mk((1,)), 0, True),
    ("5x1-d1", lambda mk: mk((5, 1)), 1, False),
    ("big-rows", lambda mk: mk((131, 67)), 1, False),
    ("big-cols", lambda mk: mk((131, 67)), 0, False),
    ("T-d1", lambda mk: mk((31, 13)).T, 1, False),
    ("perm-01", lambda mk: mk((3, 5, 7)).permute(2, 0, 1), [0, 1], False),
    ("step-d0", lambda mk: mk((7, 34))[:, ::2], 0, False),
    ("expand-d0", lambda mk: mk((1, 17)).expand(6, 17), 0, False),
    ("expand-d1", lambda mk: mk((6, 1)).expand(6, 17), 1, True),
    ("empty-kept", lambda mk: mk((0, 5)), 1, False),
    ("empty-reduced", lambda mk: mk((4, 0)), 1, False),
    ("empty-all", lambda mk: mk((3, 0, 2)), None, True),
]
SHORT = ["17", "67-all", "13x31-d1", "13x31-d0-keep", "3x5x7-02", "2x3x4x5-13-keep", "0d",
         "big-rows", "big-cols", "T-d1", "step-d0", "expand-d0", "empty-kept", "empty-reduced"]

REDUCTIONS = [("var", 0), ("var", 1), ("std", 0), ("std", 1)]
REDUCTIONS = [(op, None) for op in ops_of_kind("REDUCTION") if op not in ("var", "std")] + REDUCTIONS


def red_attrs(op, corr, dims, keepdim):
    a = dict(dims=dims, keepdim=keepdim)
    if corr is not None:
        a["correction"] = corr
    return a


def red_kw(op, dtype):
    """rand() arguments: values near 1 for prod, exact ties for the
    selections, rare/frequent zeros for all/any."""
    if op == "prod":
        return dict(low=0.8, high=1.25) if dtype.is_floating_point else dict(low=-2, high=3, nonzero=True)
    if op in ("amax", "amin", "argmax", "argmin"):
        return dict(quant=0.5) if dtype.is_floating_point else dict(low=-3, high=4)
    if op == "all":
        return dict(nonzero=True, zero_frac=0.02)
    if op == "any":
        return dict(zero_frac=0.97)
    return {}


def torch_accepts_reduction(op, dtype):
    try:
        torch_reduce(op, torch.ones(3, 2, dtype=dtype), dims=[1])
        return True
    except (RuntimeError, TypeError):
        return False


def tolerances(op, x, dims, ref):
    """(rtol, atol) for a float reduction output."""
    rtol, atol = REDUCTION_TOL[ref.dtype]
    if op in ("sum", "mean"):
        scale = torch_reduce(op, x.double().abs(), dims=dims).reshape(ref.shape)
        return rtol, atol + rtol * scale
    if op == "prod" and ref.dtype in (F16, BF16):
        n = max(1, x.numel() // max(1, ref.numel()))
        return rtol * math.sqrt(n), atol
    return rtol, atol


RED_CASES = [(op, c, dt) for op, c in REDUCTIONS for dt in EVERY if torch_accepts_reduction(op, dt)]


@pytest.mark.parametrize("op,corr,dtype", RED_CASES,
                         ids=[f"{op}{'' if c is None else c}-{dname(dt)}" for op, c, dt in RED_CASES])
def test_reduction(op, corr, dtype, gen):
    names = [c[0] for c in CASES] if dtype == F32 else SHORT
    cases = [c for c in CASES if c[0] in names]
    kw = red_kw(op, dtype)
    xs, keep = [], []
    for name, make, dims, keepdim in cases:
        x = make(lambda s: rand(s, dtype, gen=gen, **kw))
        try:   # torch rejects e.g. amax over an empty dim: not generated
            ref = torch_reduce(op, x, **red_attrs(op, corr, dims, keepdim))
        except (RuntimeError, IndexError):
            continue
        xs.append(x)
        keep.append((name, dims, keepdim, ref))
    tol = [tolerances(op, x, d, r) if r.is_floating_point() else (None, None)
           for x, (_, d, _, r) in zip(xs, keep)]
    check(lambda g, *ins: [g.op(op, i, **red_attrs(op, corr, d, k)) for i, (_, d, k, _) in zip(ins, keep)],
          *xs, names=[k[0] for k in keep], rtol=[t[0] for t in tol], atol=[t[1] for t in tol])


@pytest.mark.parametrize("op", ["amax", "amin", "argmax", "argmin", "sum", "prod", "mean", "any", "all", "var"])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=dname)
def test_reduction_nan(op, dtype, gen):
    """NaN wins amax/amin, argmax/argmin return the first NaN's index; rows
    without NaN are unaffected. 40 columns: vector body plus tail."""
    x = rand((9, 40), dtype, gen=gen, quant=0.5)
    x[1, 3] = x[1, 30] = x[4, 39] = x[7, 0] = math.nan
    x[2, :] = math.nan
    x[5, 5] = math.inf
    check(lambda g, a: [g.op(op, a, dims=1), g.op(op, a, dims=0, keepdim=True), g.op(op, a)],
          x, names=["rows", "cols", "all"])


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", [F32, F16, I32, U8], ids=dname)
def test_argmax_ties_first_index(op, dtype):
    """Many equal extremes: the lowest index wins, also across vector lanes,
    over several dims (flat index within the reduced dims) and over all dims."""
    x = torch.tensor([[1, 5, 5, 2, 5] * 7, [0] * 35, [3, 1] * 17 + [3]], dtype=dtype)
    y = (torch.arange(4 * 6 * 5) % 3).reshape(4, 6, 5).to(dtype)
    check(lambda g, a, b: [g.op(op, a, dims=1), g.op(op, a, dims=0), g.op(op, a),
                           g.op(op, a, dims=-1, keepdim=True), g.op(op, b, dims=[0, 2]),
                           g.op(op, b, dims=[1, 2], keepdim=True), g.op(op, b)], x, y)


def test_sum_promotes_ints(gen):
    """sum/prod of bool and every int dtype give int64 (no overflow in int8)."""
    xs = [rand((7, 50), dt, gen=gen, low=100, high=128) for dt in (BOOL, U8, torch.int8, torch.int16, I32)]
    check(lambda g, *ins: [g.op(op, x, dims=1) for x in ins for op in ("sum", "prod")], *xs)


# ------------------------------------------------------------ big reductions

@pytest.mark.parametrize("nthreads", [1, 2, 4])
def test_huge_1d(nthreads, threads, gen):
    """5M elements in one 1-d tensor: sum/mean (tolerance 1e-4 of sum|x|),
    exact int sum, amax/argmax with ties spread over the whole range (first
    index must survive the merge of per-thread partials), any/all with one
    deciding element at the end."""
    threads(nthreads)
    n = 5_000_000 + 3
    x = rand((n,), F32, gen=gen, low=0, high=1)
    xi = rand((n,), I32, gen=gen, low=0, high=50)
    late = xi.clone()
    late[: n * 3 // 5].clamp_(max=48)      # the first 49 is past 60% of the range
    b = torch.zeros(n, dtype=BOOL)
    b[-1] = True
    refs = [x.double().sum().float(), x.double().mean().float()]
    outs = run(lambda g, x, xi, late, b: [
        g.op("sum", x), g.op("mean", x), g.op("sum", xi), g.op("amax", xi), g.op("argmax", xi),
        g.op("argmin", xi), g.op("any", b), g.op("all", g.op("logical_not", b)),
        g.op("argmax", late)], x, xi, late, b)
    scale = x.double().abs().sum()
    assert_close(outs[0], torch.sum(x), rtol=1e-4, atol=1e-4 * scale.item(), msg="sum")
    assert_close(outs[0], refs[0], rtol=1e-4, atol=1e-4 * scale.item(), msg="sum vs float64")
    assert_close(outs[1], torch.mean(x), rtol=1e-4, msg="mean")
    assert_close(outs[2], torch.sum(xi), msg="int sum")
    assert_close(outs[3], torch.amax(xi), msg="amax")
    assert_close(outs[4], torch.argmax(xi), msg="argmax")
    assert_close(outs[5], torch.argmin(xi), msg="argmin")
    assert_close(outs[6], torch.any(b), msg="any")
    assert_close(outs[7], torch.all(~b), msg="all")
    assert_close(outs[8], torch.argmax(late), msg="argmax in a late chunk")


@pytest.mark.parametrize("nthreads", [1, 2])
def test_columns(nthreads, threads, gen):
    """Reduce dim 0 of a (1000, 37) tensor (and a transposed (37, 1000) one
    over its rows' stride-37 layout)."""
    threads(nthreads)
    x = rand((1000, 37), F32, gen=gen)
    xt = rand((1000, 37), F32, gen=gen).T
    ops = ["sum", "mean", "amax", "argmin", "var"]
    atol = [1e-5 + 1e-4 * torch_reduce(op, x.double().abs(), dims=0).float() if op in ("sum", "mean") else None
            for op in ops]
    check(lambda g, a: [g.op(op, a, dims=0) for op in ops], x, names=ops, rtol=1e-4, atol=atol)
    check(lambda g, a: [g.op("sum", a, dims=1), g.op("amax", a, dims=0)], xt, rtol=1e-4,
          atol=[1e-5 + 1e-4 * xt.double().abs().sum(1).float(), None])


@pytest.mark.parametrize("nthreads", [1, 2])
def test_long_float_sums_stay_accurate(nthreads, threads, gen):
    """Sums over millions of positive float32 values (the worst case for a
    running sum: the partial grows, each addition rounds at its scale) are
    accumulated in blocks added with compensation: within 5e-7 relative of
    the float64 sum (torch's cascade summation: ~2e-7 here; a running sum
    per vector lane: ~2e-5, blocks without compensation: ~2e-6). A long
    row, a long column (outer-vector loops) and a mean."""
    threads(nthreads)
    x = rand((2 ** 24 + 3,), F32, gen=gen, low=0, high=1)
    c = rand((2 ** 20 + 5, 16), F32, gen=gen, low=0, high=1)
    outs = run(lambda g, x, c: [g.op("sum", x), g.op("sum", c, dims=0), g.op("mean", x)], x, c)
    for got, ref, what in ((outs[0], x.double().sum(), "row sum"), (outs[1], c.double().sum(0), "column sums"),
                           (outs[2], x.double().mean(), "mean")):
        rel = ((got.double() - ref).abs() / ref).max().item()
        assert rel < 5e-7, f"{what}: relative error {rel:.2e}"


@pytest.mark.parametrize("dtype", [F16, BF16, F64], ids=dname)
def test_long_rows_low_precision(dtype, gen):
    """10007-element rows: fp16/bf16 accumulate in float32 (torch does too),
    so the mean is as accurate as one final rounding."""
    x = rand((3, 10007), dtype, gen=gen, low=-1, high=2)
    scale = [REDUCTION_TOL[dtype][0] * x.double().abs().mean(1), None]
    check(lambda g, a: [g.op("mean", a, dims=1), g.op("amax", a, dims=1)], x,
          rtol=[REDUCTION_TOL[dtype][0], None], atol=scale)


def test_reduction_then_pointwise_epilogue(gen):
    """A reduction consumed by pointwise ops and broadcast back (keepdim)."""
    x = rand((33, 67), F32, gen=gen)
    check(lambda g, a: [g.op("sub", a, g.op("amax", a, dims=1, keepdim=True)),
                        g.op("mul", g.op("sum", g.op("exp", a), dims=0), g.scalar(0.5))], x,
          rtol=1e-4, atol=1e-4)


def test_reductions_table_covered():
    tested = {op for op, _, _ in RED_CASES}
    assert set(ops_of_kind("REDUCTION")) <= tested, \
        f"reductions without a test: {sorted(set(ops_of_kind('REDUCTION')) - tested)}"
