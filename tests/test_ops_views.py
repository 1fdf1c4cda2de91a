"""View primitives (index rewrites), cat, and the leaves full/arange/iota vs
torch. A view output is materialised as a new contiguous tensor; views of
non-contiguous inputs compose their index maps (a reshape of a transposed
input needs div/mod indexing)."""
import pytest
import torch

from conftest import (BF16, BOOL, F16, F32, F64, I32, I64, I8, U8, check, dname,
                      ops_of_kind, rand, run)

VIEW_DTYPES = [F32, BF16, I64, BOOL]

# name -> (make inputs from mk(shape), build(g, *xs) -> node(s))
VIEW_CASES = {
    # reshape
    "reshape-12-3x4": (lambda mk: [mk((12,))], lambda g, x: g.op("reshape", x, shape=[3, 4])),
    "reshape-infer": (lambda mk: [mk((3, 4, 5))], lambda g, x: g.op("reshape", x, shape=[5, -1])),
    "reshape-merge": (lambda mk: [mk((2, 3, 4))], lambda g, x: g.op("reshape", x, shape=[6, 4])),
    "reshape-T-flat": (lambda mk: [mk((6, 5)).T], lambda g, x: g.op("reshape", x, shape=[30])),
    "reshape-T-7x13": (lambda mk: [mk((7, 13)).T], lambda g, x: g.op("reshape", x, shape=[7, 13])),
    "reshape-perm-4d": (lambda mk: [mk((2, 3, 4, 5)).permute(3, 1, 0, 2)],
                        lambda g, x: g.op("reshape", x, shape=[10, 3, 4])),
    "reshape-step": (lambda mk: [mk((6, 34))[:, 1::2]], lambda g, x: g.op("reshape", x, shape=[3, 2, 17])),
    "reshape-expand": (lambda mk: [mk((1, 17)).expand(4, 17)], lambda g, x: g.op("reshape", x, shape=[2, 34])),
    "reshape-0d-to-1x1": (lambda mk: [mk(())], lambda g, x: g.op("reshape", x, shape=[1, 1])),
    "reshape-1x1-to-0d": (lambda mk: [mk((1, 1))], lambda g, x: g.op("reshape", x, shape=[])),
    "reshape-empty": (lambda mk: [mk((4, 0, 3))], lambda g, x: g.op("reshape", x, shape=[0, 6])),
    "reshape-prime": (lambda mk: [mk((7,))], lambda g, x: g.op("reshape", x, shape=[1, 7, 1])),
    # permute
    "permute-3d": (lambda mk: [mk((2, 3, 4))], lambda g, x: g.op("permute", x, perm=[2, 0, 1])),
    "permute-4d": (lambda mk: [mk((2, 3, 4, 5))], lambda g, x: g.op("permute", x, perm=[3, 1, 0, 2])),
    "permute-of-T": (lambda mk: [mk((13, 31)).T], lambda g, x: g.op("permute", x, perm=[1, 0])),
    "permute-neg": (lambda mk: [mk((3, 5, 7))], lambda g, x: g.op("permute", x, perm=[-1, 0, -2])),
    # expand
    "expand-row": (lambda mk: [mk((1, 5))], lambda g, x: g.op("expand", x, shape=[4, 5])),
    "expand-col": (lambda mk: [mk((3, 1))], lambda g, x: g.op("expand", x, shape=[3, 17])),
    "expand-new-dims": (lambda mk: [mk((5,))], lambda g, x: g.op("expand", x, shape=[2, 3, 5])),
    "expand-keep": (lambda mk: [mk((3, 1, 4))], lambda g, x: g.op("expand", x, shape=[-1, 6, -1])),
    "expand-0d": (lambda mk: [mk(())], lambda g, x: g.op("expand", x, shape=[3, 3])),
    "expand-to-0": (lambda mk: [mk((1, 3))], lambda g, x: g.op("expand", x, shape=[0, 3])),
    "expand-of-expanded": (lambda mk: [mk((1, 7)).expand(3, 7)],
                           lambda g, x: g.op("expand", g.op("unsqueeze", x, dim=0), shape=[2, 3, 7])),
    # slice
    "slice-step2": (lambda mk: [mk((9, 5))], lambda g, x: g.op("slice", x, dim=0, start=1, step=2)),
    "slice-step3-d1": (lambda mk: [mk((4, 35))], lambda g, x: g.op("slice", x, dim=1, start=2, end=30, step=3)),
    "slice-neg-bounds": (lambda mk: [mk((10, 4))], lambda g, x: g.op("slice", x, dim=0, start=-7, end=-2)),
    "slice-clamped": (lambda mk: [mk((6, 4))], lambda g, x: g.op("slice", x, dim=-1, start=-100, end=100)),
    "slice-empty": (lambda mk: [mk((6, 4))], lambda g, x: g.op("slice", x, dim=0, start=5, end=2)),
    "slice-of-slice": (lambda mk: [mk((40, 3))[3::2]],
                       lambda g, x: g.op("slice", g.op("slice", x, dim=0, start=1, step=3), dim=1, end=2)),
    # squeeze / unsqueeze
    "squeeze": (lambda mk: [mk((3, 1, 5))], lambda g, x: g.op("squeeze", x, dim=1)),
    "squeeze-neg": (lambda mk: [mk((3, 1))], lambda g, x: g.op("squeeze", x, dim=-1)),
    "unsqueeze-0": (lambda mk: [mk((3, 5))], lambda g, x: g.op("unsqueeze", x, dim=0)),
    "unsqueeze-end": (lambda mk: [mk((3, 5))], lambda g, x: g.op("unsqueeze", x, dim=2)),
    "unsqueeze-neg": (lambda mk: [mk((3, 5))], lambda g, x: g.op("unsqueeze", x, dim=-2)),
    "unsqueeze-0d": (lambda mk: [mk(())], lambda g, x: g.op("unsqueeze", x, dim=0)),
    # flip (index n - 1 - i)
    "flip-0": (lambda mk: [mk((5, 3))], lambda g, x: g.op("flip", x, dim=0)),
    "flip-neg-of-slice": (lambda mk: [mk((4, 37))[:, 1::2]], lambda g, x: g.op("flip", x, dim=-1)),
    "flip-twice": (lambda mk: [mk((3, 4, 5))], lambda g, x: g.op("flip", g.op("flip", x, dim=2), dim=0)),
    # diagonal
    "diagonal": (lambda mk: [mk((4, 5))], lambda g, x: g.op("diagonal", x)),
    "diagonal-off1": (lambda mk: [mk((4, 5))], lambda g, x: g.op("diagonal", x, offset=1)),
    "diagonal-off-neg": (lambda mk: [mk((4, 5))], lambda g, x: g.op("diagonal", x, offset=-2)),
    "diagonal-off-out": (lambda mk: [mk((4, 5))], lambda g, x: g.op("diagonal", x, offset=7)),
    "diagonal-3d": (lambda mk: [mk((3, 6, 6))], lambda g, x: g.op("diagonal", x, offset=1, dim1=1, dim2=2)),
    "diagonal-3d-rev": (lambda mk: [mk((5, 3, 4))], lambda g, x: g.op("diagonal", x, offset=-1, dim1=2, dim2=0)),
    "diagonal-of-T": (lambda mk: [mk((17, 17)).T], lambda g, x: g.op("diagonal", x, offset=3)),
    # unfold (sliding windows; dim becomes the count, a window dim is appended)
    "unfold-1d": (lambda mk: [mk((11,))], lambda g, x: g.op("unfold", x, dim=0, size=3, step=2)),
    "unfold-whole": (lambda mk: [mk((4, 5))], lambda g, x: g.op("unfold", x, dim=1, size=5, step=7)),
    "unfold-size1": (lambda mk: [mk((4, 5))], lambda g, x: g.op("unfold", x, dim=0, size=1)),
    "unfold-dil": (lambda mk: [mk((3, 17, 2))], lambda g, x: g.op("unfold", x, dim=1, size=4, step=3, dilation=2)),
    "unfold-of-T": (lambda mk: [mk((13, 6)).T], lambda g, x: g.op("unfold", x, dim=-1, size=2, step=2)),
    "unfold-empty": (lambda mk: [mk((0, 7))], lambda g, x: g.op("unfold", x, dim=1, size=3)),
    "unfold-2d-windows": (lambda mk: [mk((2, 3, 9, 8))],
                          lambda g, x: g.op("unfold", g.op("unfold", x, dim=2, size=3, step=2), dim=3, size=2,
                                            step=2)),
    # chains of views, then a pointwise op
    "chain-slice-permute-reshape": (
        lambda mk: [mk((6, 10, 4))],
        lambda g, x: g.op("add", g.op("reshape", g.op("permute", g.op("slice", x, dim=1, step=2),
                                                       perm=[2, 0, 1]), shape=[4, 30]),
                          g.op("reshape", g.op("slice", x, dim=1, start=1, step=2), shape=[4, 30]))),
    "chain-T-diag-unsqueeze": (
        lambda mk: [mk((9, 7)).T, mk((7,))],
        lambda g, x, y: g.op("mul", g.op("unsqueeze", g.op("diagonal", x), dim=1),
                             g.op("expand", g.op("unsqueeze", y, dim=0), shape=[7, 7]))),
    "chain-expand-reshape": (
        lambda mk: [mk((3, 1, 5))],
        lambda g, x: g.op("add", g.op("reshape", g.op("expand", x, shape=[3, 4, 5]), shape=[12, 5]),
                          g.op("reshape", g.op("expand", x, shape=[3, 4, 5]), shape=[12, 5]))),
    "chain-two-views-one-input": (
        lambda mk: [mk((8, 8))],
        lambda g, x: g.op("add", x, g.op("permute", x, perm=[1, 0]))),
}


# float32 runs every case; the other dtypes (element widths 2, 8 and 1) one
# case per view op plus the chains (which use add/mul, valid for all four).
OTHER_DTYPE_CASES = ["reshape-T-7x13", "reshape-perm-4d", "permute-4d", "expand-keep",
                     "slice-step3-d1", "squeeze", "unsqueeze-neg", "diagonal-3d-rev", "unfold-dil"] + \
                    [c for c in VIEW_CASES if c.startswith("chain")]
VIEW_PARAMS = [(name, F32) for name in VIEW_CASES] + \
              [(name, dt) for dt in VIEW_DTYPES[1:] for name in OTHER_DTYPE_CASES]


@pytest.mark.parametrize("case,dtype", VIEW_PARAMS, ids=[f"{c}-{dname(d)}" for c, d in VIEW_PARAMS])
def test_view(case, dtype, gen):
    make, build_fn = VIEW_CASES[case]
    xs = make(lambda s: rand(s, dtype, gen=gen))
    check(build_fn, *xs)


@pytest.mark.parametrize("dtype", [F32, I8, F16], ids=dname)
def test_view_then_pointwise(dtype, gen):
    """Views feeding pointwise ops in one graph, reshape of transposed input
    next to a contiguous operand of the same shape."""
    x = rand((31, 13), dtype, gen=gen).T           # (13, 31) strides (1, 13)
    y = rand((403,), dtype, gen=gen)
    check(lambda g, x, y: [g.op("add", g.op("reshape", x, shape=[403]), y),
                           g.op("mul", x, g.op("reshape", y, shape=[13, 31])),
                           g.op("neg", g.op("slice", g.op("reshape", x, shape=[31, 13]), dim=1, step=4))],
          x, y)


def test_identity_output_is_a_copy(gen):
    """Outputting an input (or a no-op view of it) gives a new contiguous tensor."""
    x = rand((5, 7), F32, gen=gen)
    xt = rand((7, 5), F32, gen=gen).T
    outs = run(lambda g, a, b: [a, g.op("reshape", a, shape=[5, 7]), b], x, xt)
    for o, ref in zip(outs, (x, x, xt)):
        assert torch.equal(o, ref) and o.is_contiguous()
        assert o.data_ptr() != x.data_ptr() and o.data_ptr() != xt.data_ptr()


# ---------------------------------------------------------------- cat

CAT_CASES = {
    "dim0": ([(2, 3, 4), (5, 3, 4)], 0),
    "dim1": ([(2, 3, 4), (2, 1, 4), (2, 7, 4)], 1),
    "dim2": ([(2, 3, 4), (2, 3, 17)], 2),
    "dim-neg": ([(3, 5), (3, 2)], -1),
    "one-source": ([(4, 5)], 0),
    "with-empty": ([(3, 4), (0, 4), (2, 4)], 0),
    "1d-tails": ([(15,), (16,), (17,), (33,)], 0),
    "eight": ([(1, 3)] * 4 + [(2, 3)] * 4, 0),
}


@pytest.mark.parametrize("case", list(CAT_CASES))
@pytest.mark.parametrize("dtype", [F32, F64, I32, BOOL], ids=dname)
def test_cat(case, dtype, gen):
    shapes, dim = CAT_CASES[case]
    xs = [rand(s, dtype, gen=gen) for s in shapes]
    check(lambda g, *ins: g.op("cat", *ins, dim=dim), *xs)


def test_cat_of_views(gen):
    """cat of transposed / stepped / expanded inputs and of in-graph views,
    followed by a pointwise op; also mixed dtypes (torch.cat promotes)."""
    a = rand((5, 3), F32, gen=gen).T                # (3, 5)
    b = rand((3, 12), F32, gen=gen)[:, ::3]         # (3, 4)
    c = rand((3, 1), F32, gen=gen).expand(3, 6)     # (3, 6)
    d = rand((3, 2), I32, gen=gen)
    check(lambda g, a, b, c, d: [
        g.op("exp", g.op("cat", a, b, c, dim=1)),
        g.op("cat", g.op("permute", a, perm=[1, 0]), g.op("slice", g.op("permute", c, perm=[1, 0]), dim=0, end=5), dim=0),
        g.op("cat", g.op("cat", a, b, dim=1), g.op("reshape", c, shape=[3, 6]), dim=1),
        g.op("cat", a, d, dim=1),
    ], a, b, c, d)


# ---------------------------------------------------------------- leaves

FULL_CASES = [((3, 4), 2.5, None), ((3, 4), 3, None), ((5,), True, None), ((), -1.5, None),
              ((2, 0), 1.0, None), ((17,), 7, F16), ((4, 33), 2.5, I32), ((3,), 1, BOOL),
              ((2, 3), -4, U8), ((9,), 0.1, F64), ((2, 2), 3.0, BF16)]


@pytest.mark.parametrize("shape,value,dtype", FULL_CASES,
                         ids=[f"{list(s)}-{v!r}-{dname(d) if d else 'None'}" for s, v, d in FULL_CASES])
def test_full(shape, value, dtype):
    check(lambda g: [g.op("full", shape=shape, value=value, dtype=dtype)])


def test_full_in_expression(gen):
    """full fused into pointwise work with an input."""
    x = rand((6, 17), F32, gen=gen)
    check(lambda g, a: [g.op("mul", a, g.op("full", shape=[6, 17], value=0.5)),
                        g.op("add", a, g.op("full", shape=[17], value=2, dtype=F32))], x)


ARANGE_CASES = [dict(end=10), dict(end=0), dict(end=17, start=3), dict(end=-5, start=5, step=-1),
                dict(end=20, start=1, step=3), dict(end=2.5, step=0.25), dict(end=1.0, start=0.0, step=0.1),
                dict(end=10, dtype=F32), dict(end=100, dtype=I32), dict(end=67, step=1, dtype=BF16),
                dict(end=-3.0, start=3.0, step=-0.5, dtype=F64), dict(end=40, start=-40, step=7, dtype=I8)]


@pytest.mark.parametrize("attrs", ARANGE_CASES, ids=[repr(sorted(a.items())) for a in ARANGE_CASES])
def test_arange(attrs):
    check(lambda g: [g.op("arange", **attrs)])


IOTA_CASES = [((5,), 0, I64), ((3, 4), 1, I64), ((3, 4), 0, I32), ((2, 3, 4), -1, F32),
              ((2, 3, 4), 1, I64), ((4, 0), 0, I64), ((67,), 0, F16), ((3, 17), 1, U8)]


@pytest.mark.parametrize("shape,dim,dtype", IOTA_CASES,
                         ids=[f"{list(s)}-{d}-{dname(t)}" for s, d, t in IOTA_CASES])
def test_iota(shape, dim, dtype):
    check(lambda g: [g.op("iota", shape=shape, dim=dim, dtype=dtype)])


def test_iota_default_dtype_and_use(gen):
    """iota defaults to int64; combined with an input (a causal mask)."""
    x = rand((7, 7), F32, gen=gen)
    check(lambda g, a: [g.op("iota", shape=[2, 3], dim=1),
                        g.op("where", g.op("ge", g.op("iota", shape=[7, 7], dim=0),
                                           g.op("iota", shape=[7, 7], dim=1)), a, g.scalar(-1e9))], x)


def test_views_table_covered():
    """Every VIEW, CAT and non-input LEAF op of ops.def has a test here."""
    used = {c.split("-")[0] for c in VIEW_CASES} | {"cat", "full", "arange", "iota"}
    # flex_arg is a stand-in that only a flex_attention's kernel evaluates: tests/test_flex.py
    table = set(ops_of_kind("VIEW") + ops_of_kind("CAT") + ops_of_kind("LEAF")) - {"input", "scalar", "flex_arg"}
    assert table <= used, f"ops without a test: {sorted(table - used)}"
