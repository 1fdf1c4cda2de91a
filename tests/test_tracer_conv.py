"""Convolution, pooling and Tensor.unfold reached by traced code become graph
ops (tracer/native.c) instead of host calls: conv{1,2,3}d of float32 tensors
is one CONV node; max, avg and adaptive pooling of floating tensors is
constant padding + UNFOLD views + amax / sum over the windows; Tensor.unfold
is UNFOLD.

Each case compiles with fullgraph=True, compares with eager on random inputs
(odd and prime sizes, 0-size batches, 1x1 inputs, non-contiguous and
channels-last layouts, NaNs) and checks whether torch's op still runs at run
time: smelt.explain lists the torch ops a compiled call runs as host
calls. Forms that stay host calls (other dtypes,
transposed convolutions, pooling indices, uneven adaptive windows) must
still give eager's results, and arguments eager rejects must still fail. A
fresh interpreter with SMELT_LOGS=graph shows the graphs themselves.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import smelt

G = torch.Generator().manual_seed(11)
F32, F64, F16, BF16, I64 = torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64
CL = torch.channels_last
NN = torch._C._nn
NATIVE_OPS = ("conv", "pool", "unfold", "upsample")   # names of the torch ops that must not run as host calls


def rnd(*shape, dtype=F32):
    x = torch.randn(shape, generator=G) * 2
    return x.to(dtype) if dtype.is_floating_point else (x * 5).to(dtype)


def with_nans(x, every=7):
    x = x.clone()
    x.view(-1)[::every] = float("nan")
    return x


def chlast(x):
    return x.contiguous(memory_format=CL if x.dim() == 4 else torch.channels_last_3d)


def same(got, ref, tol=None):
    assert type(got) is type(ref), (type(got), type(ref))
    if isinstance(ref, torch.Tensor):
        assert (got.dtype, got.shape) == (ref.dtype, ref.shape), (got.dtype, got.shape, ref.dtype, ref.shape)
        t = tol if tol is not None else 2e-2 if ref.dtype in (F16, BF16) else 1e-5
        torch.testing.assert_close(got, ref, rtol=t, atol=t, equal_nan=True)
    elif isinstance(ref, (tuple, list)):
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            same(g, r, tol)
    else:
        assert got == ref, (got, ref)


def check(fn, *args, native=True, tol=None):
    """fn compiled with fullgraph=True gives eager's results in one graph,
    twice (the second call hits the cache); with native set no conv, pooling
    or unfold op of torch runs at run time, else one does (a host call)."""
    with torch.no_grad():
        ref = fn(*args)
        cf = smelt.compile(fn, fullgraph=True)
        same(cf(*args), ref, tol)
        got = cf(*args)
        calls = smelt.explain(fn, *args)["host_calls"]
    same(got, ref, tol)
    st = cf._smelt.stats()
    assert st["compiles"] == 1 and st["hits"] == 1 and st["eager_entries"] == 0, st
    host = [c for c in calls if any(op in c for op in NATIVE_OPS)]
    assert (not host) if native else host, calls
    return cf


def refused(fn, *args):
    """Eager rejects fn(*args); so does the compiled function."""
    with torch.no_grad():
        with pytest.raises(Exception) as want:
            fn(*args)
        with pytest.raises(type(want.value)):
            smelt.compile(fn)(*args)


def ids(cases):
    return [str(i) for i in range(len(cases))]


# ---------------------------------------------------------------- convolution

# (op, input shape, weight shape, bias, kwargs); float32
CONV = [
    ("conv2d", (2, 3, 9, 11), (4, 3, 3, 3), True, {}),
    ("conv2d", (2, 3, 9, 11), (4, 3, 3, 3), False, dict(padding=1)),
    ("conv2d", (1, 4, 8, 13), (6, 2, 3, 2), True, dict(stride=2, padding=(1, 0), groups=2)),
    ("conv2d", (2, 3, 10, 7), (5, 3, 3, 3), True, dict(stride=(2, 1), padding=(0, 2), dilation=(2, 1))),
    ("conv2d", (2, 6, 7, 7), (6, 1, 3, 3), True, dict(padding="same", groups=6)),     # depthwise
    ("conv2d", (1, 2, 7, 6), (3, 2, 2, 4), False, dict(padding="same", dilation=3)),  # 'same', odd total padding
    ("conv2d", (2, 3, 8, 8), (4, 3, 2, 2), True, dict(padding="same")),               # even kernel: pad after
    ("conv2d", (2, 3, 5, 5), (4, 3, 5, 5), True, dict(padding="valid")),
    ("conv2d", (3, 9, 9), (4, 3, 3, 3), True, dict(stride=[2])),                      # unbatched
    ("conv2d", (0, 3, 9, 9), (4, 3, 3, 3), True, {}),                                 # empty batch
    ("conv2d", (1, 3, 1, 1), (2, 3, 1, 1), True, {}),                                 # 1x1
    ("conv2d", (2, 5, 13, 17), (7, 5, 1, 1), False, dict(stride=3)),                  # primes, 1x1 kernel
    ("conv2d", (1, 16, 17, 15), (16, 16, 3, 3), True, dict(padding=2, dilation=2)),
    ("conv2d", (1, 3, 4, 4), (2, 3, 3, 3), True, dict(padding=4)),                    # padding beyond the kernel
    ("conv1d", (2, 4, 17), (6, 4, 5), True, dict(padding=2, stride=3)),
    ("conv1d", (4, 13), (6, 2, 3), False, dict(groups=2, dilation=2)),                # unbatched
    ("conv1d", (2, 6, 8), (6, 2, 4), True, dict(groups=3, padding="same")),
    ("conv1d", (1, 1, 3), (1, 1, 3), False, {}),
    ("conv3d", (1, 2, 5, 6, 7), (3, 2, 3, 2, 3), True, dict(stride=(1, 2, 3), padding=1)),
    ("conv3d", (4, 4, 4, 4), (2, 2, 2, 2, 2), False, dict(groups=2)),                 # unbatched
    ("conv3d", (2, 3, 5, 5, 5), (4, 3, 2, 3, 2), True, dict(padding="same", dilation=(1, 2, 1))),
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("op,xs,ws,bias,kw", CONV, ids=ids(CONV))
def test_conv(op, xs, ws, bias, kw):
    fn = getattr(F, op)
    x, w, b = rnd(*xs), rnd(*ws), rnd(ws[0]) if bias else None
    check(lambda x, w, b: fn(x, w, b, **kw), x, w, b, tol=1e-4)


@pytest.mark.parametrize("layout", ["channels_last", "permuted", "sliced"])
def test_conv_layouts(layout):
    x = {"channels_last": chlast(rnd(2, 5, 11, 9)),
         "permuted": rnd(2, 11, 5, 9).permute(0, 2, 1, 3),
         "sliced": rnd(2, 10, 11, 9)[:, ::2]}[layout]
    w = chlast(rnd(6, 5, 3, 3)) if layout == "channels_last" else rnd(6, 5, 3, 3)
    check(lambda x, w, b: F.relu(F.conv2d(x, w, b, padding=1)) + 1, x, w, rnd(6), tol=1e-4)


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
def test_conv_padding_modes(mode):
    torch.manual_seed(0)
    m = nn.Conv2d(3, 4, (3, 2), padding=(1, 2), padding_mode=mode).eval()
    # reflect padding stays a host call of torch's pad; the convolution is native either way
    check(m, rnd(2, 3, 7, 6), tol=1e-4)


def test_conv_modules():
    class Convs(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv1d(3, 5, 4, stride=2, padding="valid")
            self.b = nn.Conv2d(3, 6, 3, padding="same", bias=False)
            self.c = nn.Conv3d(2, 2, (1, 3, 3), padding=(0, 1, 1), groups=2)

        def forward(self, s, x, v):
            return self.a(s).sigmoid(), self.b(x) * 2, self.c(v).sum((2, 3, 4))

    torch.manual_seed(0)
    check(Convs().eval(), rnd(2, 3, 19), rnd(1, 3, 6, 7), rnd(2, 2, 3, 5, 5), tol=1e-4)


def test_conv_same_weights_shapes_reuse_entry():
    m = nn.Conv2d(3, 4, 3, padding=1).eval()
    cm = smelt.compile(m, fullgraph=True)
    x = rnd(2, 3, 7, 7)
    with torch.no_grad():
        same(cm(x), m(x), 1e-4)
        m.weight.mul_(-2)
        same(cm(x), m(x), 1e-4)
    assert cm._smelt.stats()["compiles"] == 1


# Stay host calls: dtypes other than float32, transposed convolutions.
CONV_HOST = [
    (F.conv2d, (2, 3, 9, 9), (4, 3, 3, 3), F64, dict(padding=1)),
    (F.conv2d, (2, 3, 9, 9), (4, 3, 3, 3), BF16, dict(stride=2)),
    (F.conv1d, (2, 3, 9), (4, 3, 3), F16, {}),
    (F.conv_transpose2d, (2, 4, 5, 6), (4, 3, 3, 3), F32, dict(stride=2, padding=1, output_padding=1)),
    (F.conv_transpose1d, (3, 7), (3, 2, 2), F32, {}),
]


@pytest.mark.parametrize("fn,xs,ws,dt,kw", CONV_HOST, ids=ids(CONV_HOST))
def test_conv_host_call(fn, xs, ws, dt, kw):
    check(lambda x, w: fn(x, w, **kw) + 1, rnd(*xs, dtype=dt), rnd(*ws, dtype=dt), native=False)


CONV_BAD = [
    ((2, 3, 9, 9), (4, 2, 3, 3), {}),                          # channels
    ((2, 3, 2, 9), (4, 3, 3, 3), {}),                          # kernel larger than the input
    ((2, 3, 9, 9), (4, 3, 3, 3), dict(stride=2, padding="same")),
    ((2, 4, 9, 9), (5, 2, 3, 3), dict(groups=2)),              # 5 % 2
    ((2, 3, 0, 9), (4, 3, 1, 1), {}),                          # empty spatial dim
]


@pytest.mark.parametrize("xs,ws,kw", CONV_BAD, ids=ids(CONV_BAD))
def test_conv_refused(xs, ws, kw):
    refused(lambda x, w: F.conv2d(x, w, **kw), rnd(*xs), rnd(*ws))


# ---------------------------------------------------------------- pooling

# (function, input shape, positional args, keyword args, dtype)
POOL = [
    (F.max_pool2d, (2, 3, 9, 11), (2,), {}, F32),
    (F.max_pool2d, (2, 3, 9, 11), (3, 2, 1), dict(ceil_mode=True), F32),
    (F.max_pool2d, (3, 10, 7), ((3, 2), (2, 1), (1, 0), (2, 1), True), {}, F64),   # unbatched, dilation
    (F.max_pool2d, (1, 1, 5, 5), (2,), dict(ceil_mode=True), F32),                # ceil: last window inside
    (F.max_pool2d, (1, 1, 6, 6), (3, 3, 1), dict(ceil_mode=True), F32),          # ceil: window dropped
    (F.max_pool2d, (2, 2, 13, 13), (4, 3, 2), dict(ceil_mode=True, dilation=2), F32),
    (F.max_pool2d, (0, 2, 6, 6), (2,), {}, F32),
    (F.max_pool2d, (2, 3, 1, 1), (1,), {}, F32),
    (F.max_pool2d, (2, 3, 7, 7), (3, 2, 1), {}, BF16),
    (F.max_pool2d, (2, 3, 7, 7), (2,), {}, F16),
    (F.max_pool1d, (2, 3, 17), (3,), {}, F32),
    (F.max_pool1d, (3, 11), (2, 3, 1, 2, True), {}, F64),
    (F.max_pool3d, (1, 2, 5, 6, 7), (2, (1, 2, 2), 1), {}, F32),
    (F.max_pool3d, (2, 5, 5, 5), (3, 2, 1), dict(ceil_mode=True), F64),
    (F.avg_pool2d, (2, 3, 9, 11), (2,), {}, F32),
    (F.avg_pool2d, (2, 3, 9, 11), (3, 2, 1), {}, F32),
    (F.avg_pool2d, (2, 3, 9, 11), (3, 2, 1), dict(count_include_pad=False), F32),
    (F.avg_pool2d, (2, 3, 9, 11), (3, 2, 1), dict(ceil_mode=True), F32),
    (F.avg_pool2d, (2, 3, 9, 11), (3, 2, 1), dict(ceil_mode=True, count_include_pad=False), F32),
    (F.avg_pool2d, (2, 3, 8, 8), (3, 3), dict(ceil_mode=True), F32),             # ceil, no padding
    (F.avg_pool2d, (3, 9, 8), (3, 2, 1, True, False, 2), {}, F32),               # divisor_override
    (F.avg_pool2d, (1, 2, 5, 7), ((3, 2), (1, 3), (1, 1), True), dict(divisor_override=-3), F64),
    (F.avg_pool2d, (1, 2, 5, 7), (2,), {}, BF16),
    (F.avg_pool2d, (1, 2, 7, 5), (3, 2, 1), dict(ceil_mode=True, count_include_pad=False), F16),
    (F.avg_pool2d, (0, 2, 4, 4), (2,), {}, F32),
    (F.avg_pool2d, (1, 1, 1, 1), (1,), {}, F32),
    (F.avg_pool1d, (2, 3, 13), (3, 2, 1), dict(ceil_mode=True, count_include_pad=False), F32),
    (F.avg_pool1d, (3, 13), (4,), {}, F64),
    (F.avg_pool3d, (1, 2, 4, 5, 6), (2, 1, 1), {}, F32),
    (F.avg_pool3d, (2, 5, 7, 6), ((2, 3, 2), (2, 1, 2), 1, True, False), {}, F64),
    (F.avg_pool3d, (1, 2, 5, 5, 5), (3, 2, 1), dict(divisor_override=5), F32),
    (F.adaptive_avg_pool2d, (2, 3, 9, 12), ((3, 4),), {}, F32),
    (F.adaptive_avg_pool2d, (2, 3, 9, 12), (1,), {}, F32),
    (F.adaptive_avg_pool2d, (2, 3, 9, 12), ((None, 6),), {}, F64),
    (F.adaptive_avg_pool2d, (3, 7, 7), (7,), {}, BF16),
    (F.adaptive_avg_pool1d, (2, 3, 15), (5,), {}, F32),
    (F.adaptive_avg_pool3d, (1, 2, 4, 6, 8), ((2, 3, 1),), {}, F32),
    (F.adaptive_max_pool2d, (2, 3, 9, 12), ((3, 4),), {}, F32),
    (F.adaptive_max_pool2d, (2, 3, 9, 12), ((None, 1),), {}, F32),
    (F.adaptive_max_pool2d, (3, 8, 8), (2,), dict(return_indices=False), F16),
    (F.adaptive_max_pool1d, (2, 3, 15), (3,), {}, F64),
    (F.adaptive_max_pool3d, (1, 2, 4, 6, 8), (2,), {}, F32),
]


@pytest.mark.parametrize("fn,xs,args,kw,dt", POOL, ids=ids(POOL))
def test_pool(fn, xs, args, kw, dt):
    check(lambda x: fn(x, *args, **kw), rnd(*xs, dtype=dt))


@pytest.mark.parametrize("fn,args", [(F.max_pool2d, (3, 2, 1)), (F.adaptive_max_pool2d, (3,)),
                                     (F.avg_pool2d, (3, 2, 1))], ids=["max", "adaptive_max", "avg"])
def test_pool_nan(fn, args):
    check(lambda x: fn(x, *args), with_nans(rnd(2, 3, 9, 9)))


@pytest.mark.parametrize("layout", ["channels_last", "permuted", "strided"])
def test_pool_layouts(layout):
    x = {"channels_last": chlast(rnd(2, 5, 11, 9)),
         "permuted": rnd(2, 11, 9, 5).permute(0, 3, 1, 2),
         "strided": rnd(2, 5, 22, 9)[:, :, ::2]}[layout]
    check(lambda x: (F.max_pool2d(x, 3, 2, 1) + F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                     F.adaptive_avg_pool2d(x, 1)), x)


def test_pool_modules():
    class Pools(nn.Module):
        def __init__(self):
            super().__init__()
            self.mp = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
            self.ap = nn.AvgPool2d((2, 3), stride=(2, 1), count_include_pad=False)
            self.aa = nn.AdaptiveAvgPool2d((2, None))
            self.am = nn.AdaptiveMaxPool1d(4)

        def forward(self, x, s):
            return self.mp(x), self.ap(x), self.aa(x), self.am(s)

    check(Pools(), rnd(2, 3, 10, 9), rnd(2, 5, 12))


def test_pool_result_is_contiguous_like_eager():
    check(lambda x: (F.max_pool2d(x, 2).is_contiguous(), F.avg_pool2d(x, 3).view(2, -1)), rnd(2, 3, 9, 9))


AMAX_IDX = nn.AdaptiveMaxPool2d(3, return_indices=True)

# Stay host calls: indices, integer dtypes, uneven adaptive windows.
POOL_HOST = [
    (lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), (2, 3, 9, 9), F32),
    (lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True), (2, 3, 9, 9), F32),
    (lambda x: AMAX_IDX(x)[1] + 1, (2, 3, 9, 9), F32),
    (lambda x: F.max_pool2d(x, 2), (2, 3, 9, 9), I64),
    (lambda x: F.avg_pool2d(x, 3, 2, 1), (2, 3, 9, 9), I64),
    (lambda x: F.adaptive_avg_pool2d(x, (4, 5)), (2, 3, 9, 11), F32),
    (lambda x: F.adaptive_max_pool2d(x, 4), (2, 3, 9, 11), F32),
    (lambda x: F.adaptive_avg_pool1d(x, 4), (2, 3, 9), F64),
]


@pytest.mark.parametrize("fn,xs,dt", POOL_HOST, ids=ids(POOL_HOST))
def test_pool_host_call(fn, xs, dt):
    check(fn, rnd(*xs, dtype=dt), native=False)


POOL_BAD = [
    (lambda x: F.max_pool2d(x, 3, 1, 2), (1, 2, 7, 7)),          # padding above half the kernel
    (lambda x: F.avg_pool2d(x, 5), (1, 2, 3, 3)),                # no window
    (lambda x: F.max_pool2d(x, 2), (1, 2, 0, 4)),                # empty spatial dim
    (lambda x: F.avg_pool2d(x, 2, divisor_override=0), (1, 2, 4, 4)),
    (lambda x: F.adaptive_avg_pool2d(x, (2, 2, 2)), (1, 2, 4, 4)),
]


@pytest.mark.parametrize("fn,xs", POOL_BAD, ids=ids(POOL_BAD))
def test_pool_refused(fn, xs):
    refused(fn, rnd(*xs))


# ---------------------------------------------------------------- Tensor.unfold

UNFOLD = [
    ((7, 5), (0, 2, 1), F32),
    ((7, 5), (1, 5, 1), F32),          # one window of the whole dim
    ((2, 3, 11), (-1, 3, 4), F32),     # step larger than the window
    ((2, 3, 11), (1, 1, 1), F64),
    ((13,), (0, 4, 3), I64),
    ((4, 6), (0, 2, 2), torch.bool),
    ((3, 4, 5, 6), (2, 2, 1), BF16),
]


@pytest.mark.parametrize("xs,args,dt", UNFOLD, ids=ids(UNFOLD))
def test_unfold(xs, args, dt):
    check(lambda x: x.unfold(*args), rnd(*xs, dtype=dt))
    check(lambda x: torch.Tensor.unfold(x, *args).sum(-1), rnd(*xs, dtype=dt))


def test_unfold_non_contiguous_and_chained():
    x = rnd(9, 8).t()
    check(lambda x: x.unfold(0, 3, 2).unfold(1, 2, 2).sum((-1, -2)) + x.unfold(1, 4, 1).amax(-1).sum(), x)


def test_unfold_strides_like_eager():
    check(lambda x: (x.unfold(1, 3, 2).is_contiguous(), x.unfold(1, 1, 1).squeeze(-1).is_contiguous(), x * 2),
          rnd(4, 9))


def test_unfold_size_zero_is_a_host_call():
    check(lambda x: x.unfold(1, 0, 2) + 1, rnd(3, 5), native=False)


@pytest.mark.parametrize("args", [(1, 6, 1), (1, 2, 0), (2, 1, 1)], ids=["too_big", "step_0", "dim"])
def test_unfold_refused(args):
    refused(lambda x: x.unfold(*args), rnd(3, 5))


# ---------------------------------------------------------------- models

def conv_bn_relu_pool():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                      nn.MaxPool2d(3, 2, 1),
                      nn.Conv2d(8, 16, 3, stride=2), nn.BatchNorm2d(16), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5))
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-1, 1)
            mod.running_var.uniform_(0.5, 2)
    return m.eval()


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class TinyResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        self.layer1 = BasicBlock(8, 8, 1)
        self.layer2 = BasicBlock(8, 16, 2)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


def unbatched_conv_inplace_relu():
    torch.manual_seed(0)   # the unbatched result is a view of the CONV node; relu_ may still update it
    return nn.Sequential(nn.Conv1d(3, 4, 3), nn.ReLU(inplace=True), nn.MaxPool1d(2)).eval()


def resnet():
    torch.manual_seed(0)
    return TinyResNet().eval()


MODELS = [
    ("conv_bn_relu_pool", conv_bn_relu_pool, (2, 3, 17, 15), False),
    ("conv_bn_relu_pool_channels_last", conv_bn_relu_pool, (2, 3, 16, 16), True),
    ("basic_block", lambda: BasicBlock(6, 6, 1).eval(), (2, 6, 9, 9), False),
    ("basic_block_downsample", lambda: BasicBlock(6, 10, 2).eval(), (1, 6, 11, 10), False),
    ("unbatched_conv_inplace_relu", unbatched_conv_inplace_relu, (3, 11), False),
    ("resnet", resnet, (2, 3, 33, 31), False),
    ("resnet_channels_last", resnet, (1, 3, 32, 32), True),
]


@pytest.mark.parametrize("name,make,xs,cl", MODELS, ids=[m[0] for m in MODELS])
def test_model(name, make, xs, cl):
    x = rnd(*xs)
    check(make(), chlast(x) if cl else x, tol=1e-4)


# ---------------------------------------------------------------- the graphs

GRAPHS = """
import torch, torch.nn.functional as F
x = torch.randn(2, 3, 9, 11)
cases = {
    "conv": lambda x, w: F.conv2d(x, w, padding="same"),
    "conv_unbatched": lambda x, w: F.conv2d(x[0], w, stride=2),
    "max_pool": lambda x, w: F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
    "avg_pool": lambda x, w: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "adaptive": lambda x, w: F.adaptive_max_pool2d(x, (3, 1)),
    "unfold": lambda x, w: x.unfold(3, 4, 3),
    "conv_double": lambda x, w: F.conv2d(x.double(), w.double()),
}
graphs = {}
for name, fn in cases.items():
    msgs.clear()
    smelt.compile(fn, fullgraph=True)(x, torch.randn(4, 3, 2, 2))
    graphs[name] = msgs["graph"][0]
msgs.clear()
msgs["graphs"] = graphs
"""


def test_graphs_hold_conv_and_unfold_nodes():
    from test_tracer_guards import run_logged
    g = run_logged(GRAPHS, "graph")["graphs"]
    ops = {name: [line.split("=")[1].split("(")[0].strip() for line in text.splitlines() if " = " in line]
           for name, text in g.items()}
    assert ops["conv"] == ["input", "input", "conv"], g["conv"]
    assert "pad_lo=[0, 0], pad_hi=[1, 1]" in g["conv"], g["conv"]   # 'same' with an even kernel pads after
    assert ops["conv_unbatched"].count("conv") == 1 and "squeeze" in ops["conv_unbatched"], g["conv_unbatched"]
    for name in ("max_pool", "avg_pool", "adaptive"):
        assert ops[name].count("unfold") == 2 and "call" not in ops[name], g[name]
    assert "amax" in ops["max_pool"] and "-inf" in g["max_pool"], g["max_pool"]
    assert "sum" in ops["avg_pool"] and "div" in ops["avg_pool"], g["avg_pool"]
    assert ops["unfold"] == ["input", "input", "unfold"], g["unfold"]
    assert "call" in ops["conv_double"] and "conv" not in ops["conv_double"], g["conv_double"]


# ---------------------------------------------------------------- nearest upsampling

NEAREST = [
    ((2, 3, 5, 7), dict(scale_factor=2)),
    ((2, 3, 5, 7), dict(scale_factor=3)),
    ((2, 3, 5, 7), dict(size=(10, 21))),
    ((2, 3, 8, 6), dict(scale_factor=0.5)),
    ((2, 3, 9, 6), dict(size=(3, 2))),
    ((2, 3, 5, 7), dict(scale_factor=2, mode="nearest-exact")),
    ((2, 3, 9, 6), dict(size=(3, 2), mode="nearest-exact")),
    ((2, 3, 13), dict(scale_factor=4)),
    ((1, 2, 3, 4, 5), dict(scale_factor=2)),
    ((2, 3, 7, 7), dict(scale_factor=7)),
    ((2, 3, 6, 6), dict(scale_factor=1 / 3)),
    ((1, 1, 1, 1), dict(size=(5, 2))),
    ((0, 3, 4, 4), dict(scale_factor=2)),
]


@pytest.mark.parametrize("shape,kw", NEAREST, ids=ids(NEAREST))
def test_nearest_interpolate_is_views(shape, kw):
    """Integer up/downsampling by nearest(-exact) is views fused into the
    consumer, index for index as torch's rule picks (float scale included)."""
    x = rnd(*shape)
    check(lambda t: F.interpolate(t, **kw) * 2 + 1, x)
    if len(shape) == 4:
        check(lambda t: F.interpolate(t, **kw) - 1, chlast(x))
    check(lambda t: F.interpolate(t, **kw), (x * 10).to(torch.uint8))


@pytest.mark.parametrize("shape,kw", [((2, 3, 5, 7), dict(scale_factor=1.5)), ((2, 3, 5, 7), dict(size=(7, 9))),
                                      ((2, 3, 5, 7), dict(scale_factor=2, mode="bilinear"))])
def test_uneven_interpolate_stays_a_host_call(shape, kw):
    check(lambda t: F.interpolate(t, **kw) * 2, rnd(*shape), native=False)
