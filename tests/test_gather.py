"""Data-dependent reads in generated code (GATHER, CHECKIDX): gather,
index_select, take, take_along_dim, embedding, x[int tensor], nll_loss and
cross_entropy run as smelt's own kernels, agree with eager on random
inputs (odd sizes, negative indices, non-contiguous sources, every figure
dtype) and raise eager's own error for an index out of range (the run
fails, nothing is written, and the frame runs eagerly once)."""
import pytest
import torch
import torch.nn.functional as F

import smelt

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool, torch.float16, torch.bfloat16]


def rand(shape, dtype, gen):
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=gen) * 3).to(dtype)
    return torch.randint(-50, 50, shape, generator=gen).to(dtype)


def run_both(fn, *args):
    """(eager result or exception, compiled result or exception, explain)."""
    cf = smelt.compile(fn)
    outs = []
    for f in (fn, cf):
        try:
            outs.append(f(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args]))
        except Exception as e:  # noqa: BLE001 - the exception is the result compared
            outs.append(e)
    try:
        info = smelt.explain(cf, *args)
    except Exception as e:  # noqa: BLE001 - explain runs eager's error where the trace breaks
        info = e
    return outs[0], outs[1], info


def same(e, r, **tol):
    if isinstance(e, Exception):
        assert type(r) is type(e) and str(r) == str(e), (r, e)
        return
    assert not isinstance(r, Exception), r
    for a, b in zip(e if isinstance(e, tuple) else (e,), r if isinstance(r, tuple) else (r,)):
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride(), (a, b)
        torch.testing.assert_close(b, a, equal_nan=True, **tol)


def native(info):
    assert info["compiles"] and info["host_calls"] == [], info


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_family_matches_eager_and_is_native(dtype):
    g = torch.Generator().manual_seed(7)
    for shape in [(1, 1), (5, 7), (3, 13, 2), (0, 4)]:
        x = rand(shape, dtype, g)
        nd = len(shape)
        for dim in range(-nd, nd):
            n = shape[dim]
            ishape = list(shape)
            ishape[dim] = 3
            if n == 0:
                continue
            ix = torch.randint(0, n, ishape, generator=g)
            e, r, info = run_both(lambda x, i: torch.gather(x, dim, i), x, ix)
            same(e, r)
            native(info)
            sel = torch.randint(0, n, (4,), generator=g)
            e, r, info = run_both(lambda x, i: x.index_select(dim, i), x, sel)
            same(e, r)
            native(info)
            e, r, info = run_both(lambda x, i: torch.take_along_dim(x, i, dim), x, ix - n)   # negatives wrap
            same(e, r)
            native(info)
        if x.numel():
            t = torch.randint(-x.numel(), x.numel(), (2, 3), generator=g)
            e, r, info = run_both(torch.take, x, t)
            same(e, r)
            native(info)


def test_sources_that_are_views_or_computed():
    g = torch.Generator().manual_seed(1)
    base = torch.randn(9, 11, generator=g)
    ix = torch.randint(0, 9, (5, 4), generator=g)
    for x in (base.t(), base[1:8:2], base.t()[::3]):
        e, r, info = run_both(lambda x, i: torch.gather(x, 0, i[: x.shape[0] and 4, : x.shape[1]] % x.shape[0]), x, ix)
        same(e, r)
        native(info)
    e, r, info = run_both(lambda x, i: (torch.gather(x.exp() * 2, 1, i) + 1).sum(1), base, ix)
    same(e, r)
    native(info)


def test_out_of_range_raises_eagers_error():
    x = torch.randn(4, 6)
    cases = [
        (lambda x, i: torch.gather(x, 1, i), torch.tensor([[6]])),
        (lambda x, i: torch.gather(x, 1, i), torch.tensor([[-1]])),          # gather does not wrap
        (lambda x, i: x.index_select(0, i), torch.tensor([0, 4])),
        (lambda x, i: torch.take(x, i), torch.tensor([-25])),
        (lambda x, i: x[i], torch.tensor([1, -5])),
        (lambda x, i: F.embedding(i, x), torch.tensor([[0, 4]])),
    ]
    for fn, i in cases:
        e, r, info = run_both(fn, x, i)
        assert isinstance(e, Exception)
        same(e, r)
        native(info)
        ok = i.clamp(0, 3) if i.dim() == 1 else i.clamp(0, 3)
        same(*run_both(fn, x, ok)[:2])          # the same compiled frame, in range


def test_an_update_before_a_failed_gather_is_applied_once():
    """The run fails before anything reaches the inputs; the frame then runs
    eagerly, which updates x once and raises."""
    def fn(x, i):
        x.add_(1)
        return torch.gather(x, 0, i) * 2

    x = torch.zeros(5)
    cf = smelt.compile(fn)
    assert torch.equal(cf(x, torch.tensor([1, 2])), torch.tensor([2.0, 2.0]))
    assert torch.equal(x, torch.ones(5))
    with pytest.raises(RuntimeError, match="out of bounds"):
        cf(x, torch.tensor([9]))
    assert torch.equal(x, torch.full((5,), 2.0))


def test_advanced_index_with_one_int_tensor():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 5, 6, generator=g)
    fns = [lambda x, i: x[i], lambda x, i: x[:, i], lambda x, i: x[..., i] * 2, lambda x, i: x[i, ...],
           lambda x, i: x[..., i, :]]
    for i in (torch.tensor([3, -1, 0]), torch.tensor([[1, 2], [0, 3]]), torch.tensor([1, 2], dtype=torch.int32)):
        for fn in fns:
            e, r, info = run_both(fn, x, i)
            same(e, r)
            native(info)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_and_cross_entropy(reduction):
    g = torch.Generator().manual_seed(5)
    for shape in [(5,), (6, 5), (2, 5, 3, 4)]:
        x = torch.randn(shape, generator=g)
        C = shape[0] if len(shape) == 1 else shape[1]
        tshape = () if len(shape) == 1 else (shape[0],) + shape[2:]
        t = torch.randint(0, C, tshape, generator=g)
        w = torch.rand(C, generator=g)
        for fn in (lambda x, t, w: F.nll_loss(x, t, reduction=reduction),
                   lambda x, t, w: F.nll_loss(x, t, w, reduction=reduction, ignore_index=2),
                   lambda x, t, w: F.cross_entropy(x, t, reduction=reduction),
                   lambda x, t, w: F.cross_entropy(x, t, w, reduction=reduction, ignore_index=1)):
            e, r, info = run_both(fn, x, t, w)
            same(e, r)
            native(info)
    x = torch.randn(6, 5)
    e, r, _ = run_both(lambda x, t: F.cross_entropy(x, t, reduction=reduction), x, torch.full((6,), -100))
    same(e, r)                                   # every target ignored: nan mean, as eager
    e, r, _ = run_both(lambda x, t: F.nll_loss(x, t, reduction=reduction), x, torch.tensor([0, 1, 5, 0, 0, 0]))
    assert isinstance(e, Exception)
    same(e, r)


def test_slice_and_select_scatter():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 7, generator=g)
    for fn, src in [(lambda x, s: torch.slice_scatter(x, s, 1, 2, 5), torch.randn(5, 3, generator=g)),
                    (lambda x, s: torch.slice_scatter(x, s, 0), torch.randn(5, 7, generator=g)),
                    (lambda x, s: torch.select_scatter(x, s, 1, -2), torch.randn(5, generator=g))]:
        e, r, info = run_both(fn, x, src)
        same(e, r)
        native(info)
    cf = smelt.compile(lambda x, s: torch.slice_scatter(x, s, 0))
    src = torch.randn(5, 7)
    out = cf(x, src)
    out[0, 0] = 123.0                             # a new tensor, not src
    assert src[0, 0] != 123.0


def test_ldexp():
    g = torch.Generator().manual_seed(4)
    for dt in (torch.float32, torch.float16, torch.int64, torch.bool):
        x = rand((3, 5), dt, g)
        e, r, info = run_both(torch.ldexp, x, torch.randint(-4, 5, (5,), generator=g))
        same(e, r)
        native(info)
        e, r, info = run_both(torch.ldexp, x, torch.rand(5, generator=g) > 0.5)   # eager raises for float x
        same(e, r)


def test_short_scans_native_long_ones_eager():
    g = torch.Generator().manual_seed(6)
    for dt in (torch.float32, torch.float16, torch.int64, torch.bool):
        x = rand((3, 17, 2), dt, g)
        for fn in (lambda x: torch.cumsum(x, 1), lambda x: x.cumprod(-1), lambda x: torch.cumsum(x, 0, dtype=torch.float64)):
            e, r, info = run_both(fn, x)
            same(e, r)
            native(info)
    x = torch.tensor([[1.0, float("inf"), 2.0], [-float("inf"), -float("inf"), 1.0], [float("nan"), 0.0, 1.0]])
    e, r, info = run_both(lambda x: torch.logcumsumexp(x, 1), x)
    same(e, r)
    native(info)
    long = torch.randn(2, 100, generator=g)
    e, r, info = run_both(lambda x: torch.cumsum(x, 1) * 2, long)
    same(e, r)
    assert info["host_calls"] == ["torch.cumsum"]


# ---------------------------------------------------------------- the graph ops themselves

def test_graph_gather_and_checkidx_ops():
    """GATHER and CHECKIDX through the graph builder (smelt._C.Graph),
    against torch.gather: every dim, int32 and int64 indices, wrap, a
    transposed source, a gather of a computed value fused with its use; a
    direct call with an index out of range raises IndexError."""
    from conftest import C, check
    g = torch.Generator().manual_seed(9)
    x = torch.randn(6, 5, 4, generator=g)
    for dim in range(3):
        n = x.shape[dim]
        ishape = [3, 2, 4]
        ishape[dim] = 7
        ix = torch.randint(-n, n, ishape, generator=g)
        for dt in (torch.int64, torch.int32):
            i = ix.to(dt)
            check(lambda gr, x, i: [gr.op("gather", x, i, dim=dim, wrap=True),
                                    gr.op("checkidx", i, n=n, wrap=True),
                                    gr.op("gather", gr.op("exp", x), gr.op("checkidx", i, n=n, wrap=True), dim=dim)],
                  x, i)
    xt = torch.randn(5, 6, generator=g).t()
    check(lambda gr, x, i: gr.op("gather", x, i, dim=1), xt, torch.randint(0, 5, (6, 9), generator=g))
    gr = C.Graph()
    a, b = gr.input(torch.float32, (4, 3)), gr.input(torch.int64, (2, 3))
    gr.output(gr.op("gather", a, b, dim=0))
    f = gr.compile()
    ok = torch.tensor([[0, 3, 1], [2, 2, 0]])
    src = torch.randn(4, 3)
    assert torch.equal(f(src, ok)[0], torch.gather(src, 0, ok))
    with pytest.raises(IndexError, match="index out of range"):
        f(src, torch.tensor([[0, 4, 1], [2, 2, 0]]))
    with pytest.raises(IndexError, match="index out of range"):
        f(src, torch.tensor([[0, -1, 1], [2, 2, 0]]))          # no wrap: negatives are out of range
    with pytest.raises(Exception, match="integer index"):
        gr.op("gather", a, gr.input(torch.float32, (2, 3)), dim=0)
    with pytest.raises(Exception, match="larger than source"):
        gr.op("gather", a, gr.input(torch.int64, (2, 4)), dim=0)


def test_scatter_family():
    """Writes at data-dependent positions as reductions: duplicates add up
    (sums) or keep the last entry (copies, as eager's CPU kernels); index
    smaller than the input off dim; include_self; integer means round down;
    an index out of range raises eager's error; more than 64 entries along
    dim stay eager's kernel."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(4, 6, generator=g)
    xi = torch.randint(-20, 20, (4, 6), generator=g)
    ix = torch.tensor([[0, 5, 5], [1, 1, 1], [2, 0, 2]])             # duplicates, 3 of 4 rows
    src = torch.randn(3, 4, generator=g)
    srci = torch.randint(-20, 20, (3, 4), generator=g)
    cases = [(lambda x, i, s: torch.scatter_add(x, 1, i, s), x, src),
             (lambda x, i, s: x.scatter(1, i, s), x, src),
             (lambda x, i, s: x.scatter(1, i, 2.5), x, src),
             (lambda x, i, s: torch.scatter_reduce(x, 1, i, s, "amax"), x, src),
             (lambda x, i, s: torch.scatter_reduce(x, 1, i, s, "prod", include_self=False), x, src),
             (lambda x, i, s: torch.scatter_reduce(x, 1, i, s, "mean"), xi, srci),
             (lambda x, i, s: torch.scatter_reduce(x, 1, i, s, "mean", include_self=False), xi, srci),
             (lambda x, i, s: torch.scatter_reduce(x, 1, i, s, "amin"), xi, srci)]
    for fn, a, s in cases:
        e, r, info = run_both(fn, a, ix, s)
        same(e, r)
        native(info)
    k = torch.tensor([3, 0, 3, 1])
    s6 = torch.randn(4, 4, generator=g)
    for fn in (lambda x, i, s: x.index_add(1, i, s, alpha=2), lambda x, i, s: torch.index_copy(x, 1, i, s),
               lambda x, i, s: x.index_reduce(1, i, s, "amax", include_self=False)):
        e, r, info = run_both(fn, x, k, s6)
        same(e, r)
        native(info)
    e, r, info = run_both(lambda x, i, s: torch.scatter_add(x, 1, i, s), x, torch.tensor([[6]]), src)
    assert isinstance(e, Exception)
    same(e, r)
    wide = torch.randint(0, 6, (2, 70), generator=g)
    e, r, info = run_both(lambda x, i, s: torch.scatter_add(x, 0, i, s), torch.randn(6, 70), wide, torch.randn(2, 70))
    same(e, r)
    e, r, info = run_both(lambda x, i, s: torch.scatter_add(x, 1, i, s), torch.randn(2, 6), wide, torch.randn(2, 70))
    same(e, r)
    assert info["host_calls"] == ["torch.scatter_add"]


def test_mvlgamma():
    """mvlgamma as eager builds it; eager checks no domain (inf below it).
    float16: eager rounds each op of its composite, smelt keeps float32 in
    between (test_half.py checks the accuracy): within 2 ULPs."""
    g = torch.Generator().manual_seed(10)
    for dt in (torch.float32, torch.float64, torch.float16, torch.int64):
        x = (torch.rand(3, 7, generator=g) * 5 + 2.5).to(dt)
        for p in (1, 3, 5):
            e, r, info = run_both(lambda x: torch.mvlgamma(x, p) * 2, x)
            same(e, r, **(dict(rtol=2e-3, atol=1e-5) if dt == torch.float16 else {}))
            native(info)
    low = torch.tensor([3.0, 1.0, -4.0, float("nan")])
    e, r, info = run_both(lambda x: torch.mvlgamma(x, 3) * 2, low)
    same(e, r)
    native(info)


def test_digamma():
    """digamma in float64, rounded once: positive, negative (reflection),
    near poles, zeros of either sign, negative integers, inf and NaN."""
    x = torch.tensor([0.1, 1.0, 1.4616, 2.5, 7.0, 123.4, 1e6, -0.5, -1.5, -2.9999, -1e-3,
                      0.0, -0.0, -3.0, float("inf"), -float("inf"), float("nan")], dtype=torch.float64)
    for dt in (torch.float64, torch.float32, torch.float16):
        for fn in (torch.digamma, lambda x: torch.polygamma(0, x), torch.special.psi):
            e, r, info = run_both(fn, x.to(dt))
            same(e, r)
            native(info)
    e, r, info = run_both(torch.digamma, torch.tensor([1, 2, 0, -4]))
    same(e, r)
    native(info)


def test_polygamma_and_zeta():
    """trigamma in the input's float type as eager's kernel, higher orders
    through Hurwitz zeta in float64: both signs (reflection, poles at 0 and
    the negative integers), tiny and huge arguments, half precision,
    integer inputs, the method form; special.zeta of tensors and numbers."""
    x = torch.tensor([0.1, 1.0, 1.4616, 2.5, 7.0, 123.4, 1e4, -0.5, -1.5, -2.9999, -1e-3, 1e-4,
                      0.0, -3.0, -8.75, float("inf"), float("nan")], dtype=torch.float64)
    for dt in (torch.float64, torch.float32, torch.float16):
        for n in (1, 2, 3, 5):
            e, r, info = run_both(lambda t: torch.polygamma(n, t), x.to(dt))
            same(e, r)
            native(info)
    for fn in (lambda t: t.polygamma(2), lambda t: torch.special.polygamma(1, t)):
        e, r, info = run_both(fn, torch.tensor([1, 2, 5, -4]))
        same(e, r)
        native(info)
    # a pole far below the direct terms' reach: the run fails, eager computes it
    cf = smelt.compile(lambda t: torch.polygamma(2, t) + 1)
    for t in (torch.tensor([2.5, -40.25]), torch.tensor([2.5, 0.75])):
        torch.testing.assert_close(cf(t), torch.polygamma(2, t) + 1)
    g = torch.Generator().manual_seed(3)
    a = torch.rand(40, generator=g, dtype=torch.float64) * 6 + 0.5
    a[:4] = torch.tensor([1.0, 0.5, 2.0, 3.0])
    q = torch.randn(40, generator=g, dtype=torch.float64) * 4
    q[:4] = torch.tensor([-2.0, 1.0, 0.0, -2.5])
    for dt in (torch.float64, torch.float32):
        for fn in (torch.special.zeta, lambda s, t: torch.special.zeta(s, 2.5), lambda s, t: torch.special.zeta(3, t)):
            e, r, info = run_both(fn, a.to(dt), q.to(dt))
            same(e, r)
            native(info)


def test_modified_bessel_k():
    """K0/K1 and the scaled forms in float64 rounded once: the series up to
    2, the trapezoidal rule to 25, the asymptotic series beyond, at the
    branch edges, tiny and huge arguments, 0 (inf), negatives (NaN), inf
    and NaN; integer inputs."""
    x = torch.tensor([1e-9, 1e-3, 0.3, 1.0, 1.999, 2.0, 2.001, 7.5, 24.99, 25.0, 25.01, 80.0, 700.0, 1e4,
                      0.0, -0.5, float("inf"), float("nan")], dtype=torch.float64)
    fns = (torch.special.modified_bessel_k0, torch.special.modified_bessel_k1,
           torch.special.scaled_modified_bessel_k0, torch.special.scaled_modified_bessel_k1)
    for dt in (torch.float64, torch.float32):
        for fn in fns:
            e, r, info = run_both(fn, x.to(dt))
            same(e, r)
            native(info)
    for fn in fns:
        e, r, info = run_both(fn, torch.tensor([0, 1, 3, 30, -2]))
        same(e, r)
        native(info)


def test_bessel_j_and_y_float32():
    """J0/J1/Y0/Y1 of float32 in float64 rounded once: the series to 12,
    Hankel's expansion beyond; the edges, both signs (J even/odd, Y of a
    negative NaN), 0, infinities, NaN. float64 stays torch's kernel."""
    x = torch.tensor([1e-7, 0.5, 2.4048, 5.0623, 7.0, 11.99, 12.0, 12.01, 30.5, 1e4, -0.5, -7.0, -30.5,
                      0.0, -0.0, float("inf"), -float("inf"), float("nan")])
    for fn in (torch.special.bessel_j0, torch.special.bessel_j1, torch.special.bessel_y0, torch.special.bessel_y1):
        e, r, info = run_both(fn, x)
        same(e, r)
        assert torch.equal(torch.signbit(e[x == 0]), torch.signbit(r[x == 0]))
        native(info)
        e, r, info = run_both(fn, torch.tensor([0, 3, -3, 40]))
        same(e, r)
        native(info)
        e, r, info = run_both(fn, x.double())
        same(e, r)
        assert info["host_calls"]   # eager's float64 kernel


def test_erfcx_and_log_ndtr():
    """erfcx (direct to 25, the asymptotic series beyond, inf below -26.6)
    and log_ndtr (eager's two branches) in float64 rounded once."""
    x = torch.tensor([-30.0, -26.0, -5.0, -1.0001, -1.0, -0.9999, 0.0, 0.3, 3.0, 24.99, 25.0, 25.01, 100.0, 1e6,
                      1e300, float("inf"), -float("inf"), float("nan")], dtype=torch.float64)
    for dt in (torch.float64, torch.float32):
        for fn in (torch.special.erfcx, torch.special.log_ndtr):
            e, r, info = run_both(fn, x.to(dt))
            same(e, r)
            native(info)
    for fn in (torch.special.erfcx, torch.special.log_ndtr):
        e, r, info = run_both(fn, torch.tensor([0, 2, -3, 40]))
        same(e, r)
        native(info)


def test_ndtri_float32():
    """ndtri of float32 by Newton steps on log_ndtr in float64: both tails
    (down to subnormal probabilities), the middle, 0, 1, outside [0, 1],
    NaN; integers; float64 stays torch's kernel."""
    p = torch.tensor([1e-45, 1e-30, 1e-8, 0.001, 0.2, 0.49999997, 0.5, 0.50000006, 0.9, 0.999, 0.9999999,
                      0.0, 1.0, -0.1, 1.1, float("nan")])
    e, r, info = run_both(torch.special.ndtri, p)
    same(e, r)
    native(info)
    e, r, info = run_both(torch.special.ndtri, torch.tensor([0, 1, 2]))
    same(e, r)
    native(info)
    e, r, info = run_both(torch.special.ndtri, p.double())
    same(e, r)
    assert info["host_calls"]


def test_signbit_and_copysign_see_the_sign_bit():
    """-0.0 and a NaN with its sign bit set count as negative (a bit test,
    not a comparison), in every float dtype, on the vector and tail paths."""
    vals = [1.5, -2.0, 0.0, -0.0, float("inf"), -float("inf"), float("nan"), -float("nan")] * 5
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        x = torch.tensor(vals, dtype=dt)
        y = torch.tensor(vals[::-1], dtype=dt)
        for fn in (torch.signbit, lambda a: torch.copysign(a, y), lambda a: torch.copysign(torch.tensor(3.0), a)):
            e, r, info = run_both(fn, x)
            assert torch.equal(torch.signbit(e) if e.dtype != torch.bool else e,
                               torch.signbit(r) if r.dtype != torch.bool else r)
            same(e, r)
            native(info)
    for dt in (torch.int64, torch.bool):
        x = rand((7,), dt, torch.Generator().manual_seed(1))
        for fn in (torch.signbit, lambda a: torch.copysign(torch.tensor(2.0), a)):
            e, r, info = run_both(fn, x)
            same(e, r)
            native(info)


def test_ldexp_copysign_result_type_with_0d_tensors():
    h = torch.tensor([1.5, -2.0, 3.0], dtype=torch.float16)
    for fn, a, b in [(torch.ldexp, h, torch.tensor(2.0)), (torch.ldexp, torch.tensor(2.0, dtype=torch.float64), h),
                     (torch.copysign, torch.tensor(3.0), h), (torch.copysign, h, torch.tensor(-1.0, dtype=torch.float64))]:
        e, r, info = run_both(fn, a, b)
        same(e, r)


def test_more_native_composites():
    """hypot, trapezoid/trapz/cumulative_trapezoid with a constant spacing,
    linalg.vecdot, dist and block_diag against eager, without host calls."""
    g = torch.Generator().manual_seed(11)
    x, y = torch.randn(4, 7, generator=g), torch.randn(4, 7, generator=g)
    h = x.half()
    cases = [(torch.hypot, (x, y)), (torch.hypot, (h, y.half())),
             (lambda y: torch.trapezoid(y, dx=0.5), (x,)), (lambda y: torch.trapz(y, dim=0), (x,)),
             (lambda y: torch.trapezoid(y), (torch.randint(-9, 9, (3, 5), generator=g),)),
             (lambda y: torch.cumulative_trapezoid(y, dx=2.0, dim=1), (x,)),
             (lambda a, b: torch.linalg.vecdot(a, b, dim=0), (x, y)), (lambda a, b: torch.dist(a, b, 3), (x, y)),
             (lambda a, b: torch.dist(a, b, float("inf")), (h, y.half())),
             (lambda a, b, c: torch.block_diag(a, b, c), (x, torch.tensor(2.0), torch.randn(3, generator=g))),
             (lambda a, b: torch.block_diag(a, b), (torch.randint(0, 5, (2, 2), generator=g), y))]
    for fn, args in cases:
        e, r, info = run_both(fn, *args)
        same(e, r)
        native(info)


def test_advanced_index_with_several_tensors():
    """Adjacent integer tensors (broadcast together) index the flattened
    dims with one gather; non-adjacent ones stay eager's __getitem__;
    _unsafe_masked_index clamps its indices as eager does."""
    g = torch.Generator().manual_seed(12)
    x = torch.randn(4, 5, 6, generator=g)
    i = torch.tensor([[0, 3], [-1, 2]])
    j = torch.tensor([4, -5])
    k = torch.tensor([[1], [5]])
    for fn in (lambda x: x[i, j], lambda x: x[:, j, k], lambda x: x[i, j, k] + 1, lambda x: x[..., j, k],
               lambda x: torch.Tensor.__getitem__(x, (i, j))):
        e, r, info = run_both(fn, x)
        same(e, r)
        native(info)
    e, r, info = run_both(lambda x: x[i, :, k], x)
    same(e, r)
    e, r, info = run_both(lambda x: x[i, torch.tensor([5])], x)           # 5 is out of range for dim 1
    assert isinstance(e, IndexError)
    same(e, r)
    mask = torch.rand(2, 2, 6, generator=g) > 0.5
    far = torch.tensor([[9, 0], [-7, 1]])                                 # out of range where masked out
    e, r, info = run_both(lambda x, m, a: torch._unsafe_masked_index(x, m, [a, a], 0.5), x, mask, far)
    same(e, r)
    native(info)


def test_put_and_index_put():
    """put / index_put / _unsafe_masked_index_put_accumulate as writes at
    flat positions: duplicates add up when accumulating, else the last
    write wins; negatives count from the end; out of range raises eager's
    error; values broadcast over the indexed shape and the remaining dims."""
    g = torch.Generator().manual_seed(13)
    x = torch.randn(3, 4, generator=g)
    xi = torch.randint(-9, 9, (3, 4), generator=g)
    cases = [(lambda x, i, v: torch.put(x, i, v), x, torch.tensor([-1, 0, 5, 5]), torch.randn(4, generator=g)),
             (lambda x, i, v: x.put(i, v, accumulate=True), xi, torch.tensor([[1, 1], [11, -12]]), torch.randint(0, 5, (2, 2), generator=g)),
             (lambda x, i, v: torch.index_put(x, (i,), v), x, torch.tensor([2, -1, 0]), torch.randn(4, generator=g)),
             (lambda x, i, v: torch.index_put(x, (i, i), v, accumulate=True), x, torch.tensor([0, 2, 0]), torch.tensor(1.5)),
             (lambda x, i, v: torch.index_put(x, (i, i + 1), v), xi, torch.tensor([[0], [1]]), torch.randint(0, 5, (2, 1), generator=g))]
    for fn, a, i, v in cases:
        e, r, info = run_both(fn, a, i, v)
        same(e, r)
        native(info)
    e, r, info = run_both(lambda x, i, v: torch.put(x, i, v), x, torch.tensor([12]), torch.randn(1))
    assert isinstance(e, IndexError)
    same(e, r)
    mask = torch.tensor([[True], [False]])
    far = torch.tensor([1, 7])                                             # out of range where masked out
    e, r, info = run_both(lambda x, m, i, v: torch._unsafe_masked_index_put_accumulate(x, m, [i], v), x, mask, far,
                          torch.randn(2, 4, generator=g))
    same(e, r)
    native(info)


def test_addbmm_is_one_product():
    g = torch.Generator().manual_seed(14)
    for dt in (torch.float32, torch.float64, torch.int64):
        x = rand((3, 5), dt, g)
        b1, b2 = rand((4, 3, 2), dt, g), rand((4, 2, 5), dt, g)
        kw = {} if dt == torch.int64 else {"beta": 0.5, "alpha": 2.0}
        e, r, info = run_both(lambda x, b1, b2: torch.addbmm(x, b1, b2, **kw), x, b1, b2)
        same(e, r)
        native(info)


def test_tensordot_as_eager_computes_it():
    g = torch.Generator().manual_seed(15)
    a, b = torch.randn(3, 4, 5, generator=g), torch.randn(5, 4, 2, generator=g)
    for fn in (lambda a, b: torch.tensordot(a, b, dims=([1, 2], [1, 0])), lambda a, b: torch.tensordot(a, b, dims=1),
               lambda a, b: torch.tensordot(a, b.transpose(0, 2), dims=0)):
        e, r, info = run_both(fn, a, b)
        same(e, r)
        native(info)
    ai, bi = torch.randint(-5, 5, (2, 3), generator=g), torch.randint(-5, 5, (3, 4), generator=g)
    e, r, info = run_both(lambda a, b: torch.tensordot(a, b, dims=1), ai, bi)
    same(e, r)
    native(info)


def test_modified_bessel_i():
    """I0, I1 and the scaled forms against eager across the series and the
    asymptotic ranges, negative arguments (I1 odd), 0, inf and NaN."""
    x = torch.cat([torch.linspace(-40, 40, 161, dtype=torch.float64),
                   torch.tensor([0.0, 29.99, 30.01, 300.0, 700.0, float("inf"), -float("inf"), float("nan")],
                                dtype=torch.float64)])
    for dt in (torch.float64, torch.float32):
        for fn in (torch.i0, torch.special.i1, torch.special.i0e, torch.special.i1e):
            e, r, info = run_both(fn, x.to(dt))
            same(e, r)
            native(info)
    e, r, info = run_both(torch.i0, torch.linspace(-8, 8, 33).half())
    same(e, r)
    native(info)


def test_cummax_cummin():
    """Running extremes with eager's indices: the last of equal values, a
    NaN's index once one is seen; ints and bool."""
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, float("nan"), 5.0, float("nan")], [0.0, -1.0, -1.0, 4.0, 4.0, -2.0, 7.0]])
    for t in (x, x.half(), torch.tensor([[2, 2, 1, 3, 1, 1]]), torch.tensor([[False, True, False, True]])):
        for fn in (lambda t: torch.cummax(t, 1), lambda t: t.cummin(-1), lambda t: torch.cummax(t, 0).indices * 2):
            e, r, info = run_both(fn, t)
            same(tuple(e) if isinstance(e, tuple) else e, tuple(r) if isinstance(r, tuple) else r)
            assert type(e) is type(r)
            native(info)


def test_chebyshev_polynomials():
    """T, U, V, W as eager's kernel computes them: |x| == 1, the closed form
    inside (-1, 1) at high degree, the recurrence, n < 0; a degree beyond
    the unrolled recurrence outside [-1, 1] runs eagerly (same values)."""
    x = torch.tensor([-1.0, 1.0, 0.3, -0.7, 1.5, -2.0, 0.0, 0.99, 1e-10] * 3)   # (no NaN: eager's U/V/W leave r unset)
    n = torch.tensor([3, 4, 9, 12, 5, 7, 0, 30, 2, -1, 1, 2, 3, 10, 0, 24, 1, 6, 8, 9, 10, 11, 20, 2, 3, 5, 6])
    sp = torch.special
    for fn in (sp.chebyshev_polynomial_t, sp.chebyshev_polynomial_u, sp.chebyshev_polynomial_v, sp.chebyshev_polynomial_w,
               sp.shifted_chebyshev_polynomial_t, sp.shifted_chebyshev_polynomial_u,
               sp.shifted_chebyshev_polynomial_v, sp.shifted_chebyshev_polynomial_w):
        for xx in (x, x.double()):
            e, r, info = run_both(fn, xx, n)
            same(e, r)
            native(info)
        e, r, info = run_both(lambda a: fn(a, 3), x)
        same(e, r)
        e, r, info = run_both(fn, torch.tensor([1.5, 0.5]), torch.tensor([40, 40]))   # 1.5: beyond the unrolling
        same(e, r)


def test_laguerre_legendre_hermite():
    x = torch.tensor([-1.0, 1.0, 0.0, 0.3, -0.7, 1.5, -2.0, 0.99, 2.5] * 3)
    n = torch.tensor([3, 4, 9, 12, 5, 7, 0, 30, 2, -1, 1, 2, 3, 10, 0, 24, 1, 6, 8, 9, 10, 11, 20, 2, 3, 5, 6])
    sp = torch.special
    for fn, dts in ((sp.laguerre_polynomial_l, (torch.float32, torch.float64)), (sp.legendre_polynomial_p, (torch.float32, torch.float64)),
                    (sp.hermite_polynomial_h, (torch.float64,)), (sp.hermite_polynomial_he, (torch.float64,))):
        for dt in dts:
            e, r, info = run_both(fn, x.to(dt), n)
            same(e, r)
            native(info)


def test_erfinv_and_spherical_bessel_j0():
    x = torch.tensor([0.0, -0.0, 0.5, -0.9, 0.999999, -0.9999999, 1.0, -1.0, 1.5, 1e-8, float("nan")])
    for dt in (torch.float32, torch.float16):
        e, r, info = run_both(torch.erfinv, x.to(dt))
        same(e, r)
        native(info)
    y = torch.tensor([0.0, 1e-3, 0.49, 0.5, 3.0, -7.5, 100.0, float("inf"), -float("inf"), float("nan")])
    e, r, info = run_both(torch.special.spherical_bessel_j0, y)
    same(e, r)
    native(info)
    e, r, info = run_both(torch.erfinv, torch.tensor([0, 1, -1, 2]))
    same(e, r)
