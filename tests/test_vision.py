"""The patterns that kept torchvision / timm classifiers from compiling whole
(benchmarks/vision_reach.py runs the models themselves where torchvision is
installed), each as a small hand-written module compiled with
fullgraph=True and compared with eager:

- a convolution + eval BatchNorm followed by ReLU6 / Hardsigmoid /
  Hardswish / Hardtanh (MobileNetV2/V3, LeViT): folding the BatchNorm into
  the convolution copied the clamp with the wrong proto and failed;
- torch._C._log_api_usage_once (torchvision's StochasticDepth, used by
  EfficientNet, ConvNeXt, Swin, MaxViT): a traced no-op;
- an in-place update of a view whose base nothing else reaches (GhostNet's
  `out[:, :oup]` then `x += shortcut`);
- Tensor.view after ops whose eager layout smelt now models (layer_norm and
  softmax results, permuted activations through element-wise ops, roll,
  item assignment, cat): Swin, LeViT, MobileViT;
- item assignment with a tensor index (t[perm] = v, t[mask] = v) as a host
  call of torch.index_put.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import smelt

G = torch.Generator().manual_seed(17)


def rnd(*shape):
    return torch.randn(shape, generator=G)


def randomize_bn(m):
    for b in m.modules():
        if isinstance(b, nn.BatchNorm2d):
            b.running_mean.normal_(generator=G)
            b.running_var.uniform_(0.5, 2.0, generator=G)
            b.weight.data.normal_(generator=G)
            b.bias.data.normal_(generator=G)
    return m


def check_whole(m, *args, tol=1e-5):
    """m compiles as one graph (fullgraph=True) and matches eager twice."""
    with torch.no_grad():
        ref = m(*[a.clone() for a in args])
        cm = smelt.compile(m, fullgraph=True)
        for _ in range(2):
            got = cm(*[a.clone() for a in args])
            assert type(got) is type(ref)
            torch.testing.assert_close(got, ref, rtol=tol, atol=tol, equal_nan=True)
    return cm


def check_eager_semantics(fn, *args):
    """fn through smelt (compiled or not) gives eager's result and leaves
    its arguments as eager leaves them."""
    ea, ca = [a.clone() for a in args], [a.clone() for a in args]
    ref = fn(*ea)
    got = smelt.compile(fn)(*ca)
    torch.testing.assert_close(got, ref)
    for c, e in zip(ca, ea):
        assert torch.equal(c, e)


# ---------------------------------------------------------------- conv epilogues

@pytest.mark.parametrize("act", [nn.ReLU6(), nn.Hardsigmoid(), nn.Hardswish(), nn.Hardtanh(-2.0, 3.0), nn.ReLU()],
                         ids=["relu6", "hardsigmoid", "hardswish", "hardtanh", "relu"])
def test_conv_bn_clamp_epilogue(act):
    m = randomize_bn(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), act,
                                   nn.Conv2d(8, 4, 1, bias=False), nn.BatchNorm2d(4), act)).eval()
    check_whole(m, rnd(2, 3, 9, 9))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: expand (1x1) - depthwise (3x3) - project, ReLU6,
    residual."""

    def __init__(self, c, e):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(c, c * e, 1, bias=False), nn.BatchNorm2d(c * e), nn.ReLU6(inplace=True),
            nn.Conv2d(c * e, c * e, 3, padding=1, groups=c * e, bias=False), nn.BatchNorm2d(c * e),
            nn.ReLU6(inplace=True),
            nn.Conv2d(c * e, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.block(x)


class SqueezeExcite(nn.Module):
    """MobileNetV3's SE with Hardsigmoid, then Hardswish."""

    def __init__(self, c):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.Hardswish())
        self.fc1, self.fc2 = nn.Conv2d(c, c // 2, 1), nn.Conv2d(c // 2, c, 1)

    def forward(self, x):
        x = self.conv(x)
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))


@pytest.mark.parametrize("make", [lambda: InvertedResidual(4, 3), lambda: SqueezeExcite(6)],
                         ids=["mobilenet_v2_block", "mobilenet_v3_se"])
def test_mobilenet_blocks(make):
    m = randomize_bn(make()).eval()
    check_whole(m, rnd(2, m.block[0].in_channels if hasattr(m, "block") else 6, 11, 11))


# ---------------------------------------------------------------- api usage logging

class StochasticDepthLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        torch._C._log_api_usage_once("torchvision.ops.stochastic_depth")
        return x + self.lin(x)


def test_log_api_usage_once_is_a_noop():
    check_whole(StochasticDepthLike().eval(), rnd(3, 6))


# ---------------------------------------------------------------- in-place update of a view

class GhostModule(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.cout = cout
        init = (cout + 1) // 2
        self.primary = nn.Sequential(nn.Conv2d(cin, init, 1, bias=False), nn.BatchNorm2d(init), nn.ReLU())
        self.cheap = nn.Sequential(nn.Conv2d(init, init, 3, padding=1, groups=init, bias=False),
                                   nn.BatchNorm2d(init), nn.ReLU())

    def forward(self, x):
        x1 = self.primary(x)
        x2 = self.cheap(x1)
        out = torch.cat([x1, x2], dim=1)
        return out[:, :self.cout, :, :]


class GhostBottleneck(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ghost1, self.ghost2 = GhostModule(c, 2 * c), GhostModule(2 * c, c)

    def forward(self, x):
        shortcut = x
        x = self.ghost2(self.ghost1(x))
        x += shortcut
        return x


def test_ghostnet_inplace_add_to_a_view():
    check_whole(randomize_bn(GhostBottleneck(5)).eval(), rnd(2, 5, 7, 7))


def view_update_base_dead(a):
    out = torch.cat([a, a * 2], dim=1)
    y = out[:, 1:4]
    del out
    y += 1
    y.mul_(3)
    return y


def view_update_base_live(a):
    out = torch.cat([a, a * 2], dim=1)
    y = out[:, 1:4]
    y += 1
    return out, y            # eager: out sees the update


def view_update_alias_live(a):
    out = torch.cat([a, a * 2], dim=1)
    y, z = out[:, 1:4], out[:, 2:]
    y += 1
    return y, z              # eager: z sees it


def view_update_of_input(a):
    a[:, :2] += 1            # x[idx] += v: the region written back into the input
    return a * 2


def view_update_expand(a):
    b = a[:1].expand(3, -1)
    b += 1                   # eager raises (several elements share memory)
    return b


@pytest.mark.parametrize("fn,compiled", [(view_update_base_dead, True), (view_update_base_live, True),
                                         (view_update_alias_live, True), (view_update_of_input, True)],
                         ids=["base_dead", "base_live", "alias_live", "input_view"])
def test_view_update_aliasing(fn, compiled):
    a = rnd(3, 4)
    check_eager_semantics(fn, a)
    cf = smelt.compile(fn)
    cf(a.clone())
    st = cf._smelt.stats()
    assert (st["breaks"] == 0) == compiled, st   # not compiled whole: eager or partial


def test_view_update_through_expand_raises_like_eager():
    a = rnd(3, 4)
    with pytest.raises(RuntimeError):
        view_update_expand(a.clone())
    with pytest.raises(RuntimeError):
        smelt.compile(view_update_expand)(a.clone())


# ---------------------------------------------------------------- views after modelled layouts

class WindowPartition(nn.Module):
    """Swin: patch embedding permuted to channels-last, layer norm, roll,
    window partition by view, an attention mask built by item assignment."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Conv2d(3, 8, 2, stride=2)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        x = self.norm(self.embed(x).permute(0, 2, 3, 1))
        B, H, W, C = x.shape
        x = torch.roll(x, shifts=(-1, -1), dims=(1, 2))
        x = x.view(B, H // 2, 2, W // 2, 2, C).permute(0, 1, 3, 2, 4, 5).reshape(-1, 4, C)
        mask = x.new_zeros((H, W))
        count = 0
        for h in (slice(0, -2), slice(-2, -1), slice(-1, None)):
            for w in (slice(0, -2), slice(-2, -1), slice(-1, None)):
                mask[h, w] = count
                count += 1
        mask = mask.view(H // 2, 2, W // 2, 2).permute(0, 2, 1, 3).reshape(-1, 4)
        attn = F.softmax(x @ x.transpose(1, 2) + mask[:, None, :].repeat(B, 1, 1), dim=-1)
        return attn.view(B, -1, 16).sum(-1)


class PatchUnfold(nn.Module):
    """MobileViT: reshape/transpose into patches, transformer-ish ops,
    .contiguous().view back."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(4)

    def forward(self, x):
        B, C, H, W = x.shape
        x = x.reshape(B * C * 2, H // 2, 2, W // 2).transpose(1, 2)
        x = x.reshape(B, C, 4, -1).transpose(1, 3).reshape(B * 4, -1, C)
        x = self.norm(x)
        x = x.contiguous().view(B, 4, -1, C)
        return x.transpose(1, 3).reshape(B, C, H, W)


class LevitSubsample(nn.Module):
    """LeViT: attention output transposed and reshaped, a residual add,
    then viewed back to an image."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(6, 18)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, 2, 3).permute(2, 0, 3, 1, 4).unbind(0)
        a = ((q @ k.transpose(-2, -1)).softmax(-1) @ v).transpose(1, 2).reshape(B, N, C)
        x = x + a
        return x.view(B, 4, 4, C)[:, ::2, ::2].reshape(B, -1, C)


@pytest.mark.parametrize("make,shape", [(WindowPartition, (2, 3, 8, 8)), (PatchUnfold, (2, 4, 6, 8)),
                                        (LevitSubsample, (2, 16, 6))], ids=["swin", "mobilevit", "levit"])
def test_views_after_modelled_layouts(make, shape):
    check_whole(make().eval(), rnd(*shape))


def test_clone_keeps_layout():
    def f(a):
        return (a.t().clone().is_contiguous(), (a.t() + 1).is_contiguous(),
                F.layer_norm(a.t(), (3,)).is_contiguous(), a + 1)
    cf = smelt.compile(f, fullgraph=True)
    a = rnd(3, 5)
    assert cf(a)[:3] == f(a)[:3] == (False, False, True)


def test_view_of_elementwise_result_follows_tensoriterator():
    def f(a, b):
        return (a.t() * b).view(-1)   # a.t()'s layout wins: eager raises
    check_eager_raises = pytest.raises(RuntimeError)
    with check_eager_raises:
        f(rnd(3, 5), rnd(5, 3))
    with pytest.raises(RuntimeError):
        smelt.compile(f)(rnd(3, 5), rnd(5, 3))

    def g(a, b):
        return (b * a.t()).view(-1)   # b (contiguous) first: a view
    a, b = rnd(3, 5), rnd(5, 3)
    torch.testing.assert_close(smelt.compile(g, fullgraph=True)(a, b), g(a, b))


# ---------------------------------------------------------------- item assignment with tensors

def put_perm(x, p):
    t = x * 1
    t[p] = t[p.flip(0)] * 2
    return t


def put_mask(x):
    t = x.clone()
    t[t > 0] = 0.5
    return t


def put_mask_tensor(x):
    t = x.clone()
    t[x[:, 0] > 0] = torch.arange(4.0)   # rows where the first column is positive
    return t


def put_pair(x):
    t = x.clone()
    t[torch.tensor([0, 1, 1]), torch.tensor([2, 3, 0])] = -1
    return t


def put_trailing_slices(x, p):
    t = x.clone()
    t[p, ...] = t[p, :] + 10
    t[[4, 0], :] = 0
    return t


def put_input(x, p):
    x[p] = 3.0
    return x.sum()


def put_int_cast(x):
    t = (x * 10).long()
    t[t > 0] = 2.7                         # a number: cast to int64 as eager
    t[torch.tensor([True, False, True, False, False])] = torch.tensor([1, -3, 0, 8])
    return t


@pytest.mark.parametrize("fn,nargs", [(put_perm, 2), (put_mask, 1), (put_mask_tensor, 1), (put_pair, 1),
                                      (put_trailing_slices, 2), (put_input, 2), (put_int_cast, 1)],
                         ids=["perm", "mask", "mask_tensor", "pair", "trailing", "input", "int_cast"])
def test_setitem_with_tensor_index(fn, nargs):
    args = (rnd(5, 4), torch.tensor([3, 0, 4]))[:nargs]
    check_eager_semantics(fn, *args)
    cf = smelt.compile(fn, fullgraph=True)
    cf(*[a.clone() for a in args])


def set_bad_shape(x):
    t = x.clone()
    t[torch.tensor([0, 1])] = torch.ones(3)   # does not broadcast to [2, 4]
    return t


def set_bad_dtype(x):
    t = x.clone()
    t[t > 0] = torch.ones(20, dtype=torch.float64)   # index_put takes no other dtype: eager raises
    return t


def set_bad_index(x):
    t = x.clone()
    t[torch.tensor([0, 9])] = 1.0   # out of range
    return t


@pytest.mark.parametrize("fn", [set_bad_shape, set_bad_dtype, set_bad_index], ids=["shape", "dtype", "index"])
def test_setitem_with_tensor_index_bad_values_raise_like_eager(fn):
    with pytest.raises(Exception) as want:
        fn(rnd(5, 4))
    with pytest.raises(type(want.value)):
        smelt.compile(fn)(rnd(5, 4))


def test_setitem_mixed_index_breaks_cleanly():
    def f(x, p):
        t = x.clone()
        t[:, p] = 7.0            # a leading slice: runs eagerly
        t[0, p] = 1.0
        return t
    check_eager_semantics(f, rnd(5, 4), torch.tensor([1, 2]))


# ---------------------------------------------------------------- MultiheadAttention's fast path

def mha_args(shared, E=8, H=2, L=5, S=5, B=2):
    q = rnd(B, L, E)
    k = q if shared else rnd(B, S, E)
    v = q if shared else rnd(B, S, E)
    return q, k, v, E, H, rnd(3 * E, E), rnd(3 * E), rnd(E, E), rnd(E)


@pytest.mark.parametrize("shared", [True, False], ids=["self", "cross"])
def test_native_mha_without_weights_is_graph_ops(shared):
    """torch._native_multi_head_attention (nn.MultiheadAttention's eval fast
    path, taken by torchvision's ViT) as projections + attention; its
    second result is None as eager's."""
    q, k, v, E, H, w, b, pw, pb = mha_args(shared)

    def f(q, k, v, w, b, pw, pb):
        out, weights = torch._native_multi_head_attention(q, k, v, E, H, w, b, pw, pb, None, False)
        return out, weights is None
    with torch.no_grad():
        ref = f(q, k, v, w, b, pw, pb)
        got = smelt.compile(f, fullgraph=True)(q, k, v, w, b, pw, pb)
    assert got[1] is True and ref[1] is True
    torch.testing.assert_close(got[0], ref[0], rtol=1e-5, atol=1e-5)


def test_native_mha_with_weights_is_a_host_call():
    q, k, v, E, H, w, b, pw, pb = mha_args(False)

    def f(q, k, v, w, b, pw, pb):
        return torch._native_multi_head_attention(q, k, v, E, H, w, b, pw, pb, None, True)
    with torch.no_grad():
        ref = f(q, k, v, w, b, pw, pb)
        got = smelt.compile(f, fullgraph=True)(q, k, v, w, b, pw, pb)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)


def test_native_mha_shape_mismatch_raises_like_eager():
    q, k, v, E, H, w, b, pw, pb = mha_args(False)
    k = v = rnd(2, 7, E)

    def f(q, k, v):
        return torch._native_multi_head_attention(q, k, v, E, H, w, b, pw, pb, None, False)[0]
    with pytest.raises(RuntimeError):
        f(q, k, v)
    with pytest.raises(RuntimeError):
        smelt.compile(f)(q, k, v)
