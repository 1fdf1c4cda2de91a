"""Traced torch calls whose results once differed from eager (issue 11):
out= arguments, integer division with rounding_mode, Tensor.view of
strides that allow no view, softmax of integers and its dtype= argument,
layer_norm and gelu at the edges of the float range, f16/bf16 composites.

Each case runs fn eagerly and through smelt.compile and compares the value
(dtype, shape, NaN positions), the result's type, the state of tensors
updated in place, or the exception type when eager raises.
"""
import math
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import smelt

G = torch.Generator().manual_seed(3)
F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]


def same(got, ref, tol=None):
    assert type(got) is type(ref), (type(got), type(ref))
    if isinstance(ref, torch.Tensor):
        assert (got.dtype, got.shape) == (ref.dtype, ref.shape), (got.dtype, got.shape, ref.dtype, ref.shape)
        t = tol if tol is not None else (1e-2 if ref.dtype in (F16, BF16) else 1e-5)
        torch.testing.assert_close(got, ref, rtol=t, atol=t, equal_nan=True)
    elif isinstance(ref, (tuple, list)):
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            same(g, r, tol)
    else:
        assert got == ref, (got, ref)


def check(fn, *args, compiled=True, tol=None):
    """fn through smelt gives eager's result (or raises eager's exception
    type) on fresh clones of args, twice, and leaves the args as eager
    does; with compiled set, it ran as one compiled graph (no eager entry)."""
    def clones():
        return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    ea = clones()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = fn(*ea)
    except Exception as e:   # noqa: BLE001 - compared below
        with pytest.raises(type(e)):
            smelt.compile(fn)(*clones())
        return None
    cf = smelt.compile(fn)
    for _ in range(2):
        ca = clones()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = cf(*ca)
        same(got, ref, tol)
        for c, e in zip(ca, ea):
            if isinstance(e, torch.Tensor):
                same(c, e, tol)
    st = cf._smelt.stats()
    if compiled:
        assert st["eager_entries"] == 0 and st["compiles"] == 1, st
    return cf


def rnd(*shape, dtype=F32):
    x = torch.randn(shape, generator=G) * 3
    return x.to(dtype) if dtype.is_floating_point else x.round().to(dtype)


# ---------------------------------------------------------------- out=

def test_out_written_and_compiled():
    def f(x, out):
        torch.add(x, 1, out=out)
        return out * 2
    check(f, rnd(3, 4), torch.zeros(3, 4))


def test_out_returned_is_out_itself():
    def f(x, out):
        r = torch.mul(x, x, out=out)
        return r is out, r
    check(f, rnd(5), torch.zeros(5), compiled=False)   # returning an updated input runs eagerly


def test_out_made_in_the_graph():
    def f(x):
        o = torch.empty(2, 3)
        torch.sub(x, 0.5, out=o)
        torch.exp(o, out=o)
        return o
    check(f, rnd(2, 3))


@pytest.mark.parametrize("odt", [F64, F16, torch.int64])
def test_out_casts_to_its_dtype(odt):
    def f(x, y, out):
        torch.add(x, y, out=out)
        return out + 0
    check(f, rnd(4, dtype=torch.int32), rnd(4, dtype=torch.int32), torch.zeros(4, dtype=odt))


def test_out_that_cannot_hold_the_result_raises():
    def f(x, out):
        torch.div(x, 2, out=out)   # float result into an int64 out
        return out
    check(f, rnd(4), torch.zeros(4, dtype=torch.int64))


@pytest.mark.parametrize("oshape", [(2,), (0,), (3, 4)])
def test_out_of_another_shape_is_resized_as_eager(oshape):
    def f(x, out):
        torch.add(x, 1, out=out)
        return out.shape, out.sum()
    check(f, rnd(3, 4) if oshape != (3, 4) else rnd(4), torch.zeros(oshape), compiled=False)


def test_out_on_ops_without_out_support_runs_eagerly():
    def f(x, out):
        torch.sum(x, 0, out=out)
        return out + 1
    check(f, rnd(3, 4, dtype=torch.int32), torch.zeros(4), compiled=False)


def test_out_on_a_method_raises_like_eager():
    check(lambda x, o: x.add(1, out=o), rnd(3), torch.zeros(3))


def test_out_aliasing_an_input():
    def f(x):
        y = x * 1
        torch.add(y, y, out=y)
        return y
    check(f, rnd(6))


# Non-element-wise ops with out=: the functional call written into out
# when out has the result's shape and dtype; anything else (eager resizes,
# computes in out's dtype, or raises) runs eagerly or raises as eager.
OUT_OPS = {
    "cat": (lambda a, b, o: torch.cat([a, b], 0, out=o), (3, 4), (2, 4), (5, 4)),
    "cat_dim1": (lambda a, b, o: torch.cat((a, b), dim=1, out=o), (3, 4), (3, 2), (3, 6)),
    "stack": (lambda a, b, o: torch.stack([a, b], out=o), (3, 4), (3, 4), (2, 3, 4)),
    "clamp": (lambda a, b, o: torch.clamp(a, -1, 1, out=o), (3, 4), (1,), (3, 4)),
    "matmul": (lambda a, b, o: torch.matmul(a, b, out=o), (3, 5), (5, 4), (3, 4)),
    "mm": (lambda a, b, o: torch.mm(a, b, out=o), (7, 5), (5, 2), (7, 2)),
    "bmm": (lambda a, b, o: torch.bmm(a, b, out=o), (2, 3, 5), (2, 5, 4), (2, 3, 4)),
    "sum": (lambda a, b, o: torch.sum(a, 1, out=o), (3, 4), (1,), (3,)),
    "mean_keepdim": (lambda a, b, o: torch.mean(a, 0, keepdim=True, out=o), (3, 4), (1,), (1, 4)),
    "amax": (lambda a, b, o: torch.amax(a, 1, out=o), (3, 4), (1,), (3,)),
    "cumsum": (lambda a, b, o: torch.cumsum(a, 0, out=o), (3, 4), (1,), (3, 4)),
    "where": (lambda a, b, o: torch.where(a > 0, a, b, out=o), (3, 4), (3, 4), (3, 4)),
    "baddbmm": (lambda a, b, o: torch.addmm(b, a, a.t(), out=o), (3, 4), (3, 3), (3, 3)),
}


@pytest.mark.parametrize("name", list(OUT_OPS))
def test_out_of_other_ops_compiles(name):
    op, sa, sb, so = OUT_OPS[name]

    def f(a, b, o):
        r = op(a, b, o)
        return r is o, o * 2, r.shape

    cf = check(f, rnd(*sa), rnd(*sb), torch.zeros(so))
    assert cf._smelt.stats()["breaks"] == 0, cf._smelt.stats()


@pytest.mark.parametrize("name", ["cat", "matmul", "sum", "cumsum"])
@pytest.mark.parametrize("bad", ["shape", "dtype", "empty"])
def test_out_of_other_ops_mismatched(name, bad):
    op, sa, sb, so = OUT_OPS[name]
    o = {"shape": torch.zeros(tuple(d + 1 for d in so)), "dtype": torch.zeros(so, dtype=F64),
         "empty": torch.empty(0)}[bad]

    def f(a, b, o):
        op(a, b, o)
        return o + 1

    check(f, rnd(*sa), rnd(*sb), o, compiled=False)


def test_out_that_is_an_argument_of_cat():
    def f(a, b):
        o = a * 1
        return torch.cat([o, b], out=o)
    check(f, rnd(3), rnd(2), compiled=False)


# ---------------------------------------------------------------- div rounding

@pytest.mark.parametrize("mode", ["trunc", "floor"])
@pytest.mark.parametrize("dt", INTS + [F32, F64, F16, BF16], ids=str)
def test_div_rounding_dtypes(mode, dt):
    a = torch.tensor([7, -7, 5, -5, 0, 9, -9, 100, -128 if dt != torch.uint8 else 200, 1]).to(dt)
    b = torch.tensor([2, 2, -3, -3, 4, 3, -4, 7, 3, -1 if dt != torch.uint8 else 1]).to(dt)
    check(lambda a, b: torch.div(a, b, rounding_mode=mode), a, b)
    check(lambda a: torch.div(a, 3, rounding_mode=mode), a)
    check(lambda a: torch.div(a, -2.5, rounding_mode=mode), a)
    check(lambda b: torch.div(17, b, rounding_mode=mode), b)
    check(lambda a, b: a.div(b, rounding_mode=mode), a, b)


@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_div_rounding_broadcast_and_random(mode):
    a = torch.randint(-1000, 1000, (7, 5), generator=G)
    b = torch.randint(1, 50, (5,), generator=G) * torch.tensor([1, -1, 1, -1, 1])
    check(lambda a, b: torch.div(a, b, rounding_mode=mode), a, b)
    check(lambda a, b: torch.div(a.t(), b[:, None], rounding_mode=mode), a, b)


@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_div_rounding_errors(mode):
    check(lambda a, b: torch.div(a, b, rounding_mode=mode), torch.tensor([5, 3]), torch.tensor([1, 0]))
    check(lambda a: torch.div(a, a, rounding_mode=mode), torch.tensor([True, False]))
    check(lambda a: torch.div(a, 2, rounding_mode="up"), torch.tensor([5, 3]))


# ---------------------------------------------------------------- view

VIEWS = [
    ("t-flat", lambda x: x.t().view(-1)),                  # eager raises
    ("t-split", lambda x: x.t().view(6, 2, 5)),            # splits a dim: a view
    ("t-merge-ok", lambda x: x.t().view(12, 5, 1)),
    ("perm-merge", lambda x: x.view(3, 4, 5).permute(1, 0, 2).view(12, 5)),   # raises
    ("perm-merge-inner", lambda x: x.view(3, 4, 5).permute(1, 0, 2).view(4, 15)),
    ("step", lambda x: x[:, ::2].view(-1)),                # raises
    ("step-split", lambda x: x[:, ::2].view(12, 5, 1)),
    ("slice-rows", lambda x: x[2:5].view(-1)),             # contiguous rows: a view
    ("expand", lambda x: x[:1].expand(4, 10).view(-1)),    # raises
    ("expand-split", lambda x: x[:1].expand(4, 10).view(4, 2, 5)),
    ("view-as", lambda x: x.t().view_as(torch.empty(60))),
    ("reshape-copies", lambda x: x.t().reshape(-1) * (2 if x.t().reshape(-1).is_contiguous() else 3)),
    ("reshape-copy-view", lambda x: x.t().reshape(-1).view(6, 10)),
    ("unsqueeze", lambda x: x.t()[:, None].view(10, 12)),
    ("size1-dims", lambda x: x[:1].t().view(-1)),
]


@pytest.mark.parametrize("name,fn", VIEWS, ids=[v[0] for v in VIEWS])
def test_view_strides(name, fn):
    x = rnd(12, 10)
    check(fn, x, compiled=name not in ("t-flat", "perm-merge", "step", "expand"))


def test_view_of_non_viewable_input_raises():
    check(lambda x: x.view(-1), rnd(5, 4).t())
    check(lambda x: x.view(4, 5), rnd(5, 4).t())   # viewable: [4,5] strides (1,4)... same shape


# ---------------------------------------------------------------- softmax

@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax, torch.softmax, torch.log_softmax, F.softmin],
                         ids=["softmax", "log_softmax", "torch.softmax", "torch.log_softmax", "softmin"])
def test_softmax_of_integers_raises(fn):
    check(lambda x: fn(x, 1), torch.randint(0, 5, (3, 4), generator=G))
    check(lambda x: fn(x, 1), torch.ones(3, 4, dtype=torch.bool))


@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax, F.softmin], ids=["softmax", "log_softmax", "softmin"])
@pytest.mark.parametrize("xdt,dt", [(F32, F32), (F16, F32), (BF16, F32), (F32, F64), (torch.int64, F32),
                                    (F32, F16)], ids=str)
def test_softmax_dtype_argument(fn, xdt, dt):
    check(lambda x: fn(x, dim=-1, dtype=dt), rnd(5, 7, dtype=xdt))


def test_softmax_dtype_positional():
    check(lambda x: torch.softmax(x, 1, torch.float64), rnd(3, 4))
    check(lambda x: torch.log_softmax(x, 0, dtype=torch.float64), rnd(3, 4, dtype=torch.int64))
    check(lambda x: x.softmax(-1, dtype=torch.float64), rnd(3, 4))


class Gemma2Like(nn.Module):
    """Attention weights softmaxed in float32 and cast back (Gemma2, Bloom)."""

    def forward(self, q, k):
        w = q @ k.transpose(-1, -2)
        return F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)


def test_softmax_dtype_in_a_model_compiles_whole():
    q, k = rnd(2, 5, 8, dtype=BF16), rnd(2, 6, 8, dtype=BF16)
    check(Gemma2Like(), q, k)
    smelt.compile(Gemma2Like(), fullgraph=True)(q, k)


# ---------------------------------------------------------------- layer_norm

LN_ROWS = [
    [1e38, 1e38, -1e38, 0],
    [1e20, 1e20, 1e20, 1e20],
    [2e19, 2e19, -2e19, 0],
    [1e19, 1e19, -1e19, 0],
    [math.inf, 1, 2, 3],
    [math.nan, 1, 2, 3],
    [1.0, 2.0, 3.0, 4.0],
]


# Not matched: rows whose values span more than FLT_MAX ([3e38, -3e38, 1, 0]):
# eager's Welford update overflows and gives NaN where smelt gives zeros.
@pytest.mark.parametrize("row", LN_ROWS, ids=[str(i) for i in range(len(LN_ROWS))])
def test_layer_norm_extremes(row):
    x = torch.tensor([row])
    ref = F.layer_norm(x, (4,))
    got = smelt.compile(lambda x: F.layer_norm(x, (4,)), fullgraph=True)(x)
    assert torch.equal(got.isnan(), ref.isnan()), (got, ref)
    torch.testing.assert_close(got, ref, equal_nan=True, rtol=1e-4, atol=1e-4)


def test_layer_norm_issue_example_is_nan():
    x = torch.tensor([1e38, 1e38, -1e38, 0])
    got = smelt.compile(lambda x: F.layer_norm(x, (4,)), fullgraph=True)(x)
    assert got.isnan().all(), got


@pytest.mark.parametrize("dt", [F16, BF16, F64])
def test_layer_norm_half_types_in_float32(dt):
    x = (rnd(6, 33) * 1000).to(dt)
    w, b = rnd(33, dtype=dt), rnd(33, dtype=dt)
    check(lambda x: F.layer_norm(x, (33,), w, b), x, tol=2e-2 if dt != F64 else None)
    check(lambda x: F.layer_norm(x, (33,)), torch.tensor([[60000., 60000., -60000., 0.] * 8 + [1.]], dtype=dt))


# ---------------------------------------------------------------- gelu

GELU_SPECIALS = [math.inf, -math.inf, math.nan, 1e4, -1e4, 3.0, -3.0, 0.0, -0.0, 1e-30, 1.7e38, 3e38, 2e-45]


@pytest.mark.parametrize("approx", ["none", "tanh"])
@pytest.mark.parametrize("dt", [F32, F64, F16, BF16], ids=str)
def test_gelu_specials(approx, dt):
    x = torch.tensor(GELU_SPECIALS, dtype=F64).to(dt)
    check(lambda x: F.gelu(x, approximate=approx), x)
    check(lambda x: F.gelu(x, approximate=approx), x[:1])                     # one element: ATen's kernel
    check(lambda x: F.gelu(x, approximate=approx), x.repeat(3).view(3, -1).t())   # strided: ATen's kernel
    check(lambda x: F.gelu(x, approximate=approx), rnd(7, 9, dtype=dt))


def test_gelu_issue_example():
    x = torch.tensor([math.inf, 1.0])
    got = smelt.compile(lambda x: F.gelu(x), fullgraph=True)(x)
    assert math.isnan(got[0]) and got[0].isnan() == F.gelu(x)[0].isnan()


@pytest.mark.parametrize("name", ["sum", "mean_keepdim", "cumsum", "cat", "cat_dim1", "stack"])
@pytest.mark.parametrize("odt", [F64, F16])
def test_out_of_another_dtype_as_eager(name, odt):
    """Reductions and scans compute in out's dtype (as with dtype=); cat and
    stack cast their result into it; compiled as one graph."""
    op, sa, sb, so = OUT_OPS[name]

    def f(a, b, o):
        r = op(a, b, o)
        return r is o, o * 2

    cf = check(f, rnd(*sa), rnd(*sb), torch.zeros(so, dtype=odt), tol=1e-2 if odt == F16 else None)
    assert cf._smelt.stats()["breaks"] == 0, cf._smelt.stats()


@pytest.mark.parametrize("name", ["amax", "where", "clamp", "mm", "matmul"])
def test_out_of_another_dtype_raises_as_eager(name):
    op, sa, sb, so = OUT_OPS[name]

    def f(a, b, o):
        op(a, b, o)
        return o

    check(f, rnd(*sa), rnd(*sb), torch.zeros(so, dtype=F64), compiled=False)


def test_out_int_of_float_sum_and_cat():
    check(lambda a, o: torch.sum(a, 1, out=o) * 1, rnd(3, 4), torch.zeros(3, dtype=torch.int64))
    check(lambda a, o: torch.cat([a, a], out=o), rnd(3, 4), torch.zeros(6, 4, dtype=torch.int64), compiled=False)


@pytest.mark.parametrize("case", ["mm_view_of_arg", "mm_out_t", "sum_into_own_row", "cat_overlap",
                                  "add_row_overlap", "mul_transposed", "add_shifted", "add_same"])
def test_out_overlapping_an_argument_as_eager(case):
    """out= sharing memory with an argument through another view: eager
    raises or computes on the memory it writes; smelt runs it eagerly."""
    fn, args = {
        "mm_view_of_arg": (lambda a: torch.matmul(a, a, out=a.view(9).view(3, 3)), (torch.arange(9.0).view(3, 3),)),
        "mm_out_t": (lambda a, o: torch.matmul(a, o.t(), out=o), (rnd(3, 3), rnd(3, 3))),
        "sum_into_own_row": (lambda o: torch.sum(o, 0, keepdim=True, out=o[:1]), (torch.arange(6.0).view(2, 3),)),
        "cat_overlap": (lambda a, o: torch.cat([a, o[:1]], out=o), (torch.ones(1, 3), torch.zeros(2, 3))),
        "add_row_overlap": (lambda a, o: torch.add(a, o[0], out=o), (torch.ones(2, 3), torch.zeros(2, 3))),
        "mul_transposed": (lambda a, o: torch.mul(o.t(), a, out=o), (torch.ones(3, 3), torch.arange(9.0).view(3, 3))),
        "add_shifted": (lambda a: torch.add(a[1:], 1, out=a[:-1]), (torch.arange(5.0),)),
        "add_same": (lambda y: torch.add(y, y, out=y), (torch.arange(5.0),)),
    }[case]
    check(fn, *args, compiled=case == "add_same")
