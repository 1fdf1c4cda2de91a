"""conv (the EXTERN op, kernels/conv.c) vs torch.nn.functional.conv{1,2,3}d,
and its gradients conv_backward_input / conv_backward_weight vs float64
autograd.

Covers 1-3 spatial dims, stride, asymmetric padding (torch side: F.pad then
an unpadded conv), dilation, groups (1, 2, depthwise, depthwise with a
channel multiplier), bias or none, strided and channels-last inputs,
transposed / stepped views of input, weight and bias, empty batch, channel
counts of 0, batch 1 on several threads (split along output rows), and a
pointwise epilogue reading the result.

Tolerance: the float32 summation bound for K = C/groups * prod(kernel)
terms in any order, (K + 2) * 2^-24 * conv(|x|, |w|) + |bias|, computed in
float64.
"""
import pytest
import torch
import torch.nn.functional as F
import smelt._C as C

from conftest import F32, assert_close, rand, run_compiled

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def as_list(v, nsp):
    return list(v) if isinstance(v, (list, tuple)) else [v] * nsp


def torch_conv(x, w, b, stride=1, padding=0, pad_hi=None, dilation=1, groups=1):
    """The reference in float64: x padded (lo before, hi after each spatial
    dim) and an unpadded torch convolution."""
    nsp = x.ndim - 2
    lo = as_list(padding, nsp)
    hi = lo if pad_hi is None else as_list(pad_hi, nsp)
    pads = []
    for d in reversed(range(nsp)):
        pads += [lo[d], hi[d]]
    xp = F.pad(x.double(), pads)
    return CONV[nsp](xp, w.double(), None if b is None else b.double(),
                     stride=as_list(stride, nsp), dilation=as_list(dilation, nsp), groups=groups)


def conv_tol(x, w, b, attrs):
    """atol tensor: the float32 summation error bound (module docstring)."""
    k = w.shape[1:].numel()
    bound = torch_conv(x.abs(), w.abs(), None if b is None else b.abs(), **attrs)
    return 1e-6 + (k + 2) * 2.0 ** -24 * bound


def check_conv(x, w, b=None, **attrs):
    """Compiles conv(x, w[, b]) with attrs, compares with torch; returns the
    Compiled."""
    ref = torch_conv(x, w, b, **attrs)
    srcs = (x, w) if b is None else (x, w, b)
    out, f = run_compiled(lambda g, *s: g.op("conv", *s, **attrs), *srcs)
    assert_close(out, ref.float(), rtol=0, atol=conv_tol(x, w, b, attrs).float())
    assert f.num_externs >= 1
    return f


def mk(shape, gen):
    return rand(shape, F32, low=-1, high=1, gen=gen)


# name -> (x shape, w shape, bias?, attrs)
CASES = {
    "2d-pad1": ((2, 3, 7, 9), (5, 3, 3, 3), True, dict(padding=1)),
    "2d-stride2-asym": ((3, 5, 11, 10), (17, 5, 3, 3), True,
                        dict(stride=2, padding=[1, 0], pad_hi=[2, 1])),
    "2d-dil2": ((2, 17, 9, 8), (13, 17, 3, 3), False, dict(padding=2, dilation=2)),
    "2d-groups2": ((3, 6, 8, 7), (10, 3, 3, 3), True, dict(padding=1, groups=2)),
    "2d-depthwise": ((2, 17, 9, 9), (17, 1, 3, 3), True, dict(stride=2, padding=1, groups=17)),
    "2d-dw-mult2": ((1, 16, 7, 7), (32, 1, 3, 3), False, dict(padding=1, groups=16)),
    "2d-1x1": ((5, 32, 13, 13), (64, 32, 1, 1), True, dict()),
    "2d-k-larger": ((1, 3, 2, 3), (7, 3, 5, 5), True, dict(padding=2)),
    "2d-bigpad": ((2, 5, 3, 4), (7, 5, 3, 3), True, dict(padding=[4, 3], pad_hi=[5, 2])),
    "2d-mixed": ((3, 3, 23, 19), (11, 3, 7, 5), False,
                 dict(stride=[3, 2], padding=[2, 1], pad_hi=[0, 3], dilation=[3, 2])),
    "2d-all1": ((1, 1, 5, 5), (1, 1, 1, 1), True, dict()),
    "2d-layer": ((4, 32, 16, 16), (64, 32, 3, 3), True, dict(padding=1)),
    "1d": ((3, 5, 31), (7, 5, 5), True, dict(stride=2, padding=3, pad_hi=0, dilation=2)),
    "1d-batch1": ((1, 3, 13), (4, 3, 3), False, dict()),
    "3d": ((2, 3, 5, 6, 7), (5, 3, 3, 3, 3), True, dict(padding=1)),
    "3d-groups-stride": ((1, 4, 6, 7, 8), (6, 2, 2, 2, 2), False,
                         dict(stride=2, padding=0, pad_hi=1, groups=2)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_conv(case, gen):
    xs, ws, bias, attrs = CASES[case]
    check_conv(mk(xs, gen), mk(ws, gen), mk((ws[0],), gen) if bias else None, **attrs)


# name -> f(mk) -> (x, w, b): non-contiguous operands
LAYOUTS = {
    "x-channels-last": lambda mk: (mk((2, 8, 9, 11)).contiguous(memory_format=torch.channels_last),
                                   mk((16, 8, 3, 3)), mk((16,))),
    "x-transposed": lambda mk: (mk((2, 8, 11, 9)).transpose(2, 3), mk((16, 8, 3, 3)), mk((16,))),
    "x-channel-slice": lambda mk: (mk((2, 11, 9, 9))[:, 1:9], mk((16, 8, 3, 3)), None),
    "x-stepped": lambda mk: (mk((2, 8, 18, 9))[:, :, ::2], mk((16, 8, 3, 3)), mk((16,))),
    "x-batch-inner": lambda mk: (mk((8, 9, 9, 2)).permute(3, 0, 1, 2), mk((16, 8, 3, 3)), None),
    "w-permuted": lambda mk: (mk((2, 8, 9, 9)), mk((3, 3, 8, 16)).permute(3, 2, 0, 1), mk((16,))),
    "w-channels-last": lambda mk: (mk((2, 8, 9, 9)),
                                   mk((16, 8, 3, 3)).contiguous(memory_format=torch.channels_last),
                                   None),
    "w-expanded": lambda mk: (mk((2, 8, 9, 9)), mk((16, 1, 3, 3)).expand(16, 8, 3, 3), None),
    "b-stepped": lambda mk: (mk((2, 8, 9, 9)), mk((16, 8, 3, 3)), mk((32,))[::2]),
    "b-expanded": lambda mk: (mk((2, 8, 9, 9)), mk((16, 8, 3, 3)), mk((1,)).expand(16)),
    "1d-channels-last": lambda mk: (mk((3, 9, 6)).transpose(1, 2), mk((4, 6, 3)), mk((4,))),
    "3d-channels-last": lambda mk: (
        mk((2, 3, 4, 5, 6)).contiguous(memory_format=torch.channels_last_3d),
        mk((5, 3, 3, 3, 3)), mk((5,))),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_conv_layouts(layout, gen):
    x, w, b = LAYOUTS[layout](lambda s: mk(s, gen))
    check_conv(x, w, b, padding=1)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_conv_threads(n, nthreads, threads, gen):
    """Batch ranges and output-row chunks (batch 1 inference) across the
    pool, channels-first and channels-last."""
    threads(nthreads)
    x, w, b = mk((n, 16, 12, 10), gen), mk((32, 16, 3, 3), gen), mk((32,), gen)
    check_conv(x, w, b, padding=1)
    check_conv(x.contiguous(memory_format=torch.channels_last), w, b, stride=2, padding=[2, 1],
               pad_hi=[0, 1])


def test_conv_empty_batch(gen):
    """An empty batch gives an empty result."""
    x, w, b = mk((0, 3, 7, 7), gen), mk((5, 3, 3, 3), gen), mk((5,), gen)
    out, _ = run_compiled(lambda g, *s: g.op("conv", *s, padding=1), x, w, b)
    assert out.shape == (0, 5, 7, 7)


@pytest.mark.parametrize("xs,ws", [((2, 0, 7, 7), (5, 0, 3, 3)), ((2, 3, 7, 7), (0, 3, 3, 3))])
def test_conv_no_channels_rejected(xs, ws, gen):
    """Convolutions without input or output channels are not graph ops (torch
    returns [N, 0, ..] for the first and raises for the second; the tracer
    leaves both to torch)."""
    g = C.Graph()
    x, w = g.input(torch.float32, xs), g.input(torch.float32, ws)
    with pytest.raises(ValueError, match="at least one channel"):
        g.op("conv", x, w, padding=1)


def test_conv_epilogue(gen):
    """The result feeds a pointwise op (relu(conv + 1))."""
    x, w, b = mk((2, 8, 9, 9), gen), mk((16, 8, 3, 3), gen), mk((16,), gen)
    ref = torch.relu(torch_conv(x, w, b, padding=1) + 1).float()
    out, _ = run_compiled(
        lambda g, x, w, b: g.op("relu", g.op("add", g.op("conv", x, w, b, padding=1), g.scalar(1))),
        x, w, b)
    assert_close(out, ref, rtol=0, atol=conv_tol(x, w, b, dict(padding=1)).float())


def test_conv_reuse(gen):
    """One compiled conv on new inputs (weights change between calls)."""
    x, w, b = mk((2, 8, 9, 9), gen), mk((16, 8, 3, 3), gen), mk((16,), gen)
    _, f = run_compiled(lambda g, *s: g.op("conv", *s, padding=1), x, w, b)
    for _ in range(3):
        x, w, b = mk((2, 8, 9, 9), gen), mk((16, 8, 3, 3), gen), mk((16,), gen)
        out = f(x, w, b)[0]
        assert_close(out, torch_conv(x, w, b, padding=1).float(), rtol=0,
                     atol=conv_tol(x, w, b, dict(padding=1)).float())


def test_channels_last_layouts_between_layers(gen):
    """Lowering keeps conv results and the computed inputs of convs
    channels-last; a conv result that is also a graph output is written
    row-major, a reshape of a channels-last buffer feeding a matmul is
    realised, and a pool over a channels-last buffer reads it with its own
    strides."""
    x, w1, w2 = mk((2, 3, 10, 8), gen), mk((6, 3, 3, 3), gen), mk((4, 6, 3, 3), gen)
    lw = mk((4 * 5 * 4, 7), gen)

    def build(g, x, w1, w2, lw):
        c1 = g.op("conv", x, w1, padding=1)
        r = g.op("relu", c1)
        p = g.op("amax", g.op("unfold", g.op("unfold", r, dim=2, size=2, step=2), dim=3, size=2, step=2),
                 dims=[-1, -2])
        c2 = g.op("conv", p, w2, padding=1)
        flat = g.op("reshape", c2, shape=[2, 4 * 5 * 4])
        return [c1, g.op("matmul", flat, lw), g.op("mean", c2, dims=[2, 3])]

    outs, f = run_compiled(build, x, w1, w2, lw, keep_code=True)
    xd, w1d, w2d, lwd = (t.double() for t in (x, w1, w2, lw))
    c1 = F.conv2d(xd, w1d, padding=1)
    c2 = F.conv2d(F.max_pool2d(torch.relu(c1), 2), w2d, padding=1)
    refs = [c1, c2.reshape(2, -1) @ lwd, c2.mean((2, 3))]
    for o, r in zip(outs, refs):
        assert o.is_contiguous()
        torch.testing.assert_close(o.double(), r, rtol=1e-4, atol=1e-4)
    text = f.code("kernels")
    assert "channels-last" in text        # the second conv writes channels-last


# ---------------------------------------------------------------- backward ops

def torch_conv_grads(x, w, dy, attrs):
    """(dx, dw) of torch_conv in float64 for output gradient dy."""
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    return torch.autograd.grad(torch_conv(xd, wd, None, **attrs), (xd, wd), dy.double())


def check_conv_backward(x, w, dy, **attrs):
    """conv_backward_input (dy, w -> dx) and conv_backward_weight (x, dy ->
    dw) against float64 autograd, within the float32 summation bound of the
    same computation on magnitudes."""
    refs = torch_conv_grads(x, w, dy, attrs)
    bounds = torch_conv_grads(x.abs(), w.abs(), dy.abs(), attrs)
    nsp = x.ndim - 2
    terms = (w.shape[0] // attrs.get("groups", 1) * w.shape[2:].numel(), dy.shape[0] * dy.shape[2:].numel())
    xs, ws = list(x.shape), list(w.shape)
    (dx, dw), f = run_compiled(lambda g, xn, wn, dyn: [
        g.op("conv_backward_input", dyn, wn, shape=xs, **attrs),
        g.op("conv_backward_weight", xn, dyn, shape=ws, **attrs)], x, w, dy)
    assert f.num_externs == 2 and nsp >= 1
    for got, ref, bound, k in zip((dx, dw), refs, bounds, terms):
        assert got.shape == ref.shape
        assert_close(got, ref.float(), rtol=0, atol=(1e-6 + (k + 2) * 2.0 ** -24 * bound).float())


@pytest.mark.parametrize("case", list(CASES))
def test_conv_backward_ops(case, gen):
    xs, ws, _, attrs = CASES[case]
    x, w = mk(xs, gen), mk(ws, gen)
    dy = mk(tuple(torch_conv(x, w, None, **attrs).shape), gen)
    check_conv_backward(x, w, dy, **attrs)


@pytest.mark.parametrize("layout", ["channels-last", "dy-expanded", "transposed", "batch1"])
def test_conv_backward_layouts(layout, gen):
    """Gradients read channels-last, transposed and broadcast (stride 0)
    operands; one image on several threads."""
    n = 1 if layout == "batch1" else 3
    x, w = mk((n, 8, 9, 11), gen), mk((16, 8, 3, 3), gen)
    dy = mk((n, 16, 9, 11), gen)
    if layout == "channels-last":
        x, dy = (t.contiguous(memory_format=torch.channels_last) for t in (x, dy))
    elif layout == "dy-expanded":
        dy = mk((1, 16, 1, 11), gen).expand(n, 16, 9, 11)
    elif layout == "transposed":
        x = mk((n, 8, 11, 9), gen).transpose(2, 3)
        w = mk((16, 8, 3, 3), gen).transpose(2, 3)
    check_conv_backward(x, w, dy, padding=1)


def test_conv_backward_shape_checked():
    """The given shape must be one the convolution maps onto dy's."""
    g = C.Graph()
    dy, w = g.input(torch.float32, (2, 5, 7, 7)), g.input(torch.float32, (5, 3, 3, 3))
    with pytest.raises(ValueError, match="does not match the convolution's output"):
        g.op("conv_backward_input", dy, w, shape=[2, 3, 8, 8], padding=1)
    with pytest.raises(TypeError, match="shape"):
        g.op("conv_backward_input", dy, w, padding=1)
    x = g.input(torch.float32, (2, 3, 7, 7))
    assert list(g.shape(g.op("conv_backward_weight", x, dy, shape=[5, 3, 3, 3], padding=1))) == [5, 3, 3, 3]


# ---------------------------------------------------------------- epilogue folding (inductor/fold.c)

def _bn_chain(g, c, rm, rv, bw, bb, relu=True):
    """eval BatchNorm as the tracer writes it, then ReLU."""
    sh = [-1, 1, 1]
    inv = g.op("rsqrt", g.op("add", g.op("reshape", rv, shape=sh), g.scalar(1e-5)))
    y = g.op("mul", g.op("sub", c, g.op("reshape", rm, shape=sh)), inv)
    y = g.op("add", g.op("mul", y, g.op("reshape", bw, shape=sh)), g.op("reshape", bb, shape=sh))
    return g.op("relu", y) if relu else y


def _bn_ref(c, rm, rv, bw, bb, relu=True):
    y = (c - rm[:, None, None]) * torch.rsqrt(rv[:, None, None] + 1e-5) * bw[:, None, None] + bb[:, None, None]
    return torch.relu(y) if relu else y


@pytest.mark.parametrize("bias,groups", [(True, 1), (False, 1), (True, 2)])
def test_batchnorm_and_relu_fold_into_the_conv(bias, groups, gen):
    """conv -> eval BN -> ReLU: the BN is folded into the convolution's
    weights and bias (scaled per channel in the graph), so the ReLU reads
    the conv's result directly; values match the unfolded computation."""
    x, w = mk((2, 4, 9, 7), gen), mk((6, 4 // groups, 3, 3), gen)
    b = mk((6,), gen) if bias else None
    rm, bw, bb = mk((6,), gen), mk((6,), gen), mk((6,), gen)
    rv = mk((6,), gen).abs() + 0.5
    srcs = [x, w] + ([b] if bias else []) + [rm, rv, bw, bb]

    def build(g, *s):
        c = g.op("conv", *s[:3 if bias else 2], padding=1, groups=groups)
        return _bn_chain(g, c, *s[-4:])

    out, f = run_compiled(build, *srcs, keep_code=True)
    ref = _bn_ref(torch_conv(x, w, b, padding=1, groups=groups), *(t.double() for t in (rm, rv, bw, bb)))
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-4)
    after = f.code("kernels").split("conv x")[1]       # what runs after the convolution
    assert "relu(" in after and "rsqrt" not in after and "sub(" not in after


def test_fold_keeps_values_used_elsewhere(gen):
    """The conv's result is also an output (and the chain reads a statistic
    of the conv itself): nothing is folded; values as computed."""
    x, w = mk((2, 3, 8, 8), gen), mk((5, 3, 3, 3), gen)

    def build(g, x, w):
        c = g.op("conv", x, w, padding=1)
        m = g.op("mean", c, dims=[0, 2, 3], keepdim=True)     # depends on the conv
        return [c, g.op("relu", g.op("sub", c, m))]

    outs, f = run_compiled(build, x, w)
    c = torch_conv(x, w, None, padding=1)
    torch.testing.assert_close(outs[0].double(), c, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(outs[1].double(), torch.relu(c - c.mean((0, 2, 3), keepdim=True)), rtol=1e-4, atol=1e-4)


def test_fold_reverse_sub_div_and_scalars_and_nan(gen):
    """t - x, x / s, scalar operands fold; a NaN input stays NaN through the
    ReLU, as torch.relu keeps it."""
    x, w, b, t, s = mk((1, 3, 6, 5), gen), mk((4, 3, 3, 3), gen), mk((4,), gen), mk((4, 1, 1), gen), mk((4, 1, 1), gen)
    x[0, 1, 2, 2] = float("nan")

    def build(g, x, w, b, t, s):
        c = g.op("conv", x, w, b)
        y = g.op("div", g.op("sub", t, g.op("mul", c, g.scalar(2.5))), g.op("add", s, g.scalar(3.0)))
        return g.op("relu", g.op("add", y, g.scalar(0.5)))

    out, f = run_compiled(build, x, w, b, t, s)
    c = torch_conv(x, w, b)
    ref = torch.relu((t.double() - c * 2.5) / (s.double() + 3.0) + 0.5)
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-4, equal_nan=True)
    assert out.isnan().any()
