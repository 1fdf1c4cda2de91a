"""Pooling after pooling (and a reduction beside a single-element
reduction) vs eager: every pair of pooling forms, 1-d, 2-d and 3-d, traced
with fullgraph=True into one graph.

A pool is padding + UNFOLD views + a reduction over the window dims; a
kernel 1 pool (avg_pool2d(x, 1), an identity adaptive pool) reduces over
windows of one element. Lowering once made that reduction a REDUCE phase
that claimed no loop variables, so when the pool below it claimed its
window variables, the outer phase was repeated over them
(avg_pool2d(max_pool2d(x, 2), 1) gave 4x the max). The pairs below are
generated from a list of forms covering kernel 1, stride != kernel,
padding, dilation, ceil_mode, count_include_pad, divisor_override and
adaptive pools (identity, global, even and uneven windows), on contiguous,
channels-last and non-contiguous inputs.
"""
import itertools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import smelt

G = torch.Generator().manual_seed(5)


def pools(nd):
    """[(name, fn)] pooling forms for nd spatial dims; fn(x) pools x."""
    mp = getattr(F, f"max_pool{nd}d")
    ap = getattr(F, f"avg_pool{nd}d")
    aap = getattr(F, f"adaptive_avg_pool{nd}d")
    amp = getattr(F, f"adaptive_max_pool{nd}d")
    sp = lambda x: tuple(x.shape[-nd:])  # noqa: E731
    return [
        ("max2", lambda x: mp(x, 2)),
        ("max1", lambda x: mp(x, 1)),
        ("max3s2p1", lambda x: mp(x, 3, 2, 1)),
        ("max2s1d2ceil", lambda x: mp(x, 2, 1, 0, 2, ceil_mode=True)),
        ("max3s2ceil", lambda x: mp(x, 3, 2, ceil_mode=True)),
        ("avg1", lambda x: ap(x, 1)),
        ("avg2", lambda x: ap(x, 2)),
        ("avg3s2p1nopad", lambda x: ap(x, 3, 2, 1, count_include_pad=False)),
        ("avg2ceil", lambda x: ap(x, 2, ceil_mode=True)),
        ("avg3s1p1div5", lambda x: ap(x, 3, 1, 1, divisor_override=5) if nd > 1 else ap(x, 3, 1, 1) / 5),
        ("aavg_id", lambda x: aap(x, sp(x))),
        ("aavg1", lambda x: aap(x, 1)),
        ("aavg_half", lambda x: aap(x, tuple(max(s // 2, 1) for s in sp(x)))),
        ("aavg_uneven", lambda x: aap(x, tuple(s - 1 if s > 2 else s for s in sp(x)))),
        ("amax_id", lambda x: amp(x, sp(x))),
        ("amax1", lambda x: amp(x, 1)),
    ]


SIZES = {1: (2, 3, 14), 2: (2, 3, 13, 12), 3: (1, 2, 7, 8, 6)}


def make(nd, layout, dtype=torch.float32):
    shape = SIZES[nd]
    if layout == "contiguous":
        x = torch.randn(shape, generator=G)
    elif layout == "channels_last":
        x = torch.randn(shape, generator=G).contiguous(
            memory_format={2: torch.channels_last, 3: torch.channels_last_3d}.get(nd, torch.contiguous_format))
    elif layout == "permuted":   # channels innermost through a permute
        x = torch.randn((shape[0],) + shape[2:] + (shape[1],), generator=G).movedim(-1, 1)
    else:                        # strided: every other element of the last dim
        x = torch.randn(shape[:-1] + (2 * shape[-1],), generator=G)[..., ::2]
    return x.to(dtype)


def check(fn, x):
    """fn compiled whole gives eager's result twice; where eager raises
    (a window larger than a pooled 1x1 input) the compiled call raises the
    same exception type."""
    with torch.no_grad():
        try:
            ref = fn(x)
        except Exception as e:   # noqa: BLE001 - compared below
            with pytest.raises(type(e)):
                smelt.compile(fn)(x)
            return
        cf = smelt.compile(fn, fullgraph=True)
        got = cf(x)
        again = cf(x)
    for g in (got, again):
        assert (type(g), g.dtype, g.shape) == (type(ref), ref.dtype, ref.shape)
        torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-5, equal_nan=True)
    st = cf._smelt.stats()
    assert st["compiles"] == 1 and st["eager_entries"] == 0, st


def pair_cases():
    cases = []
    for nd in (1, 2, 3):
        forms = pools(nd)
        for (n1, f1), (n2, f2) in itertools.product(forms, forms):
            if nd != 2 and not (n1 in ("max2", "avg1", "aavg_id", "max3s2p1") or n2 in ("avg1", "aavg_id", "max1")):
                continue   # 1-d and 3-d: every form before or after the identity-like ones
            cases.append(pytest.param(nd, f1, f2, id=f"{nd}d-{n1}-{n2}"))
    return cases


@pytest.mark.parametrize("nd,first,second", pair_cases())
def test_pool_after_pool(nd, first, second):
    check(lambda x: second(first(x)), make(nd, "contiguous"))


LAYOUT_PAIRS = [("max2", "avg1"), ("max3s2p1", "aavg_id"), ("avg2", "amax_id"), ("max2s1d2ceil", "avg3s2p1nopad"),
                ("aavg_half", "aavg1"), ("avg3s1p1div5", "max3s2ceil")]


@pytest.mark.parametrize("layout", ["channels_last", "permuted", "strided"])
@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("names", LAYOUT_PAIRS, ids=["-".join(p) for p in LAYOUT_PAIRS])
def test_pool_after_pool_layouts(names, nd, layout):
    forms = dict(pools(nd))
    check(lambda x: forms[names[1]](forms[names[0]](x)), make(nd, layout))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_pool_after_pool_dtypes(dtype):
    x = make(2, "contiguous", dtype)
    with torch.no_grad():
        ref = F.avg_pool2d(F.max_pool2d(x, 2), 1)
        got = smelt.compile(lambda x: F.avg_pool2d(F.max_pool2d(x, 2), 1), fullgraph=True)(x)
    assert got.dtype == ref.dtype
    torch.testing.assert_close(got, ref)


def test_issue_example():
    x = torch.arange(32.).reshape(2, 1, 4, 4)
    got = smelt.compile(lambda x: F.avg_pool2d(F.max_pool2d(x, 2), 1), fullgraph=True)(x)
    assert got.tolist() == [[[[5, 7], [13, 15]]], [[[21, 23], [29, 31]]]]


class AlexNetTail(nn.Module):
    """conv -> ReLU -> max pool -> identity adaptive avg pool -> flatten ->
    linear: the end of torchvision's AlexNet and VGG feature stacks."""

    def __init__(self, pool_out):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(3, 2)
        self.avg = nn.AdaptiveAvgPool2d(pool_out)
        self.fc = nn.Linear(8 * pool_out * pool_out, 5)

    def forward(self, x):
        x = self.avg(self.pool(torch.relu(self.conv(x))))
        return self.fc(torch.flatten(x, 1))


@pytest.mark.parametrize("pool_out", [6, 3, 1])
def test_alexnet_like_tail(pool_out):
    m = AlexNetTail(pool_out).eval()
    check(m, torch.randn(2, 3, 13, 13, generator=G))


def test_reduction_beside_single_element_reduction():
    """A sum over a size-1 dim and an amax over a longer one in one kernel."""
    a, b = torch.randn(4, 1, generator=G), torch.randn(4, 5, generator=G)
    check(lambda a: a.sum(-1) + b.amax(-1) + a.mean(-1) * b.sum(-1) + a.amin(-1) - a.prod(-1), a)
    check(lambda a: a.argmax(-1) + b.argmin(-1), a)
    check(lambda a: a.any(-1) | b.all(-1), (a > 0).float())
