"""The fused attention op (sdpa: a flash-style float32 kernel with an online
softmax) against torch's scaled_dot_product_attention: odd sizes and tails
around the 32-row / 64-key blocks, causal with L != S, boolean and additive
masks broadcast over batch, heads and rows, strided (transposed) and
expanded operands, fully masked rows (zeros, as torch), 0-size dims; and
through smelt.compile, where F.scaled_dot_product_attention on float32
becomes this op."""
import math

import pytest
import torch
import torch.nn.functional as F

import smelt
import smelt._C as C

G = torch.Generator().manual_seed(3)


def rnd(*shape):
    return torch.randn(*shape, generator=G)


def graph_sdpa(q, k, v, mask=None, **kw):
    g = C.Graph()
    ts = [q, k, v] + ([mask] if mask is not None else [])
    ins = [g.input(t.dtype, tuple(t.shape), strides=tuple(t.stride())) for t in ts]
    g.output(g.op("sdpa", *ins, **kw))
    f = g.compile(keep_code=True)
    assert "sdpa" in f.code("kernels")
    return f(*ts)[0]


def close(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    torch.testing.assert_close(got.nan_to_num(0.0), want.nan_to_num(0.0), rtol=1e-5, atol=2e-6)


SIZES = [(1, 1, 1, 1, 1, 1), (2, 3, 5, 7, 8, 8), (1, 2, 33, 70, 16, 24), (2, 2, 64, 64, 64, 64),
         (1, 1, 129, 131, 17, 3), (2, 1, 1, 200, 64, 80), (1, 2, 97, 31, 40, 65)]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_matches_torch(size, causal):
    B, H, L, S, E, Ev = size
    q, k, v = rnd(B, H, L, E), rnd(B, H, S, E), rnd(B, H, S, Ev)
    close(graph_sdpa(q, k, v, causal=causal), F.scaled_dot_product_attention(q, k, v, is_causal=causal))


@pytest.mark.parametrize("mshape", [(2, 1, 37, 45), (1, 3, 1, 45), (37, 45), (2, 3, 37, 1)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masks_broadcast(mshape, kind):
    q, k, v = rnd(2, 3, 37, 16), rnd(2, 3, 45, 16), rnd(2, 3, 45, 9)
    mask = (torch.rand(*mshape, generator=G) > 0.3) if kind == "bool" else rnd(*mshape)
    full = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
    close(graph_sdpa(q, k, v, full, scale=0.3), want)


def test_fully_masked_rows_are_zero_like_torch():
    q, k, v = rnd(1, 2, 6, 8), rnd(1, 2, 70, 8), rnd(1, 2, 70, 8)
    mask = torch.rand(1, 2, 6, 70, generator=G) > 0.5
    mask[0, 1, 2] = False          # a row with no key at all
    mask[0, 0, 4, :64] = False     # a row whose only keys are in the second block
    close(graph_sdpa(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    add = torch.zeros(1, 2, 6, 70)
    add[0, 1, 3] = float("-inf")
    close(graph_sdpa(q, k, v, add), F.scaled_dot_product_attention(q, k, v, attn_mask=add))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fully_masked_rows_through_compile(dtype):
    """float32 takes the fused op, float64 the decomposition: both give
    torch's zero rows where no key is left."""
    q, k, v = (rnd(1, 2, 6, 8).to(dtype) for _ in range(3))
    mask = torch.rand(6, 6, generator=G) > 0.4
    mask[2] = False
    cf = smelt.compile(lambda a, b, c, m: F.scaled_dot_product_attention(a, b, c, attn_mask=m))
    with torch.no_grad():
        close(cf(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_strided_and_expanded_operands():
    q = rnd(2, 40, 4, 32).transpose(1, 2)                 # [B, H, L, E] with strides of [B, L, H, E]
    k = rnd(2, 50, 1, 32).transpose(1, 2).expand(2, 4, 50, 32)   # one head shared: stride 0
    v = rnd(2, 4, 32, 50).transpose(2, 3)
    close(graph_sdpa(q, k, v), F.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize("shape", [(0, 2, 5, 7, 8, 8), (2, 2, 0, 7, 8, 8), (1, 2, 5, 0, 8, 8),
                                   (1, 2, 5, 7, 8, 0)], ids=lambda s: "x".join(map(str, s)))
def test_empty_dims(shape):
    B, H, L, S, E, Ev = shape
    q, k, v = rnd(B, H, L, E), rnd(B, H, S, E), rnd(B, H, S, Ev)
    close(graph_sdpa(q, k, v), F.scaled_dot_product_attention(q, k, v))


def test_graph_errors():
    g = C.Graph()
    q = g.input(torch.float32, (2, 3, 4))
    k = g.input(torch.float32, (2, 5, 4))
    v = g.input(torch.float64, (2, 5, 4))
    with pytest.raises(ValueError, match="float32"):
        g.op("sdpa", q, k, v)
    k2 = g.input(torch.float32, (2, 5, 3))
    with pytest.raises(ValueError, match="agree"):
        g.op("sdpa", q, k2, g.input(torch.float32, (2, 5, 4)))


def graph_sdpa_backward(q, k, v, g, mask=None, **kw):
    """dq, dk, dv from the sdpa_backward op (out from the sdpa op of the
    same graph), dk and dv over q's batch dims."""
    gr = C.Graph()
    ts = [q, k, v] + ([mask] if mask is not None else [])
    ins = [gr.input(t.dtype, tuple(t.shape), strides=tuple(t.stride())) for t in ts]
    gin = gr.input(g.dtype, tuple(g.shape), strides=tuple(g.stride()))
    out = gr.op("sdpa", *ins, **kw)
    gr.output(gr.op("sdpa_backward", *ins[:3], out, gin, *ins[3:], **kw))
    f = gr.compile(keep_code=True)
    assert "sdpa backward" in f.code("kernels")
    (vec,) = f(*ts, g)
    batch = tuple(q.shape[:-2])
    L, E, S, Ev = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    parts, at = [], 0
    for shape in (batch + (L, E), batch + (S, E), batch + (S, Ev)):
        n = math.prod(shape)
        parts.append(vec[at:at + n].reshape(shape))
        at += n
    assert at == vec.numel()
    return parts


def torch_grads(q, k, v, g, mask=None, **kw):
    """Gradients by torch's autograd in float64 through the math form,
    dk and dv expanded to q's batch dims (unsummed), as the op gives them."""
    batch = tuple(q.shape[:-2])
    xs = [q.double().requires_grad_(), k.double().expand(batch + k.shape[-2:]).detach().requires_grad_(),
          v.double().expand(batch + v.shape[-2:]).detach().requires_grad_()]
    m = mask if mask is None or mask.dtype == torch.bool else mask.double()
    scale = kw.get("scale")
    s = xs[0] @ xs[1].transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if kw.get("causal"):
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).tril().logical_not(), float("-inf"))
    if m is not None:
        s = s.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else s + m
    mx = s.detach().amax(-1, keepdim=True) if s.shape[-1] else s.new_zeros(s.shape[:-1] + (1,))
    e = torch.exp(s - torch.where(mx == float("-inf"), 0.0, mx))
    p = e / e.sum(-1, keepdim=True).clamp_min(1e-300)   # rows with no key: zeros, as torch's kernels
    (p @ xs[2]).backward(g.double())
    return [x.grad.float() for x in xs]


def close_grad(got, want):
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("size", SIZES + [(2, 3, 200, 150, 8, 8)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_backward_matches_torch(size, causal):
    """The flash-style backward op's dq, dk, dv against float64 autograd:
    tails around the blocks, causal with L != S, more rows than keys."""
    B, H, L, S, E, Ev = size
    q, k, v, g = rnd(B, H, L, E), rnd(B, H, S, E), rnd(B, H, S, Ev), rnd(B, H, L, Ev)
    for got, want in zip(graph_sdpa_backward(q, k, v, g, causal=causal), torch_grads(q, k, v, g, causal=causal)):
        close_grad(got, want)


@pytest.mark.parametrize("mshape", [(2, 1, 37, 45), (1, 3, 1, 45), (37, 45), (2, 3, 37, 1)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_backward_masks(mshape, kind):
    """Broadcast bool and additive masks, with rows that no key is left to
    (zero gradients there, as torch's zero rows)."""
    q, k, v, g = rnd(2, 3, 37, 16), rnd(2, 3, 45, 16), rnd(2, 3, 45, 9), rnd(2, 3, 37, 9)
    mask = (torch.rand(*mshape, generator=G) > 0.3) if kind == "bool" else rnd(*mshape)
    if mshape[-2] != 1:
        mask[..., 3, :] = False if kind == "bool" else float("-inf")
    full = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    for got, want in zip(graph_sdpa_backward(q, k, v, g, full, scale=0.3), torch_grads(q, k, v, g, full, scale=0.3)):
        close_grad(got, want)


def test_sdpa_backward_strided_and_shared_heads():
    """Transposed q and g, keys and values shared by all heads (stride 0):
    dk and dv come per head, for the caller to sum."""
    q = rnd(2, 40, 4, 32).transpose(1, 2)
    k = rnd(2, 70, 1, 32).transpose(1, 2).expand(2, 4, 70, 32)
    v = rnd(2, 4, 24, 70).transpose(2, 3)
    g = rnd(2, 40, 4, 24).transpose(1, 2)
    for got, want in zip(graph_sdpa_backward(q, k, v, g), torch_grads(q, k, v, g)):
        close_grad(got, want)


@pytest.mark.parametrize("shape", [(0, 2, 5, 7, 8, 8), (2, 2, 0, 7, 8, 8), (1, 2, 5, 0, 8, 8),
                                   (1, 2, 5, 7, 8, 0)], ids=lambda s: "x".join(map(str, s)))
def test_sdpa_backward_empty_dims(shape):
    B, H, L, S, E, Ev = shape
    q, k, v, g = rnd(B, H, L, E), rnd(B, H, S, E), rnd(B, H, S, Ev), rnd(B, H, L, Ev)
    for got, want in zip(graph_sdpa_backward(q, k, v, g), torch_grads(q, k, v, g)):
        close_grad(got, want)


def test_sdpa_backward_graph_errors():
    g = C.Graph()
    q, k, v = g.input(torch.float32, (2, 3, 4)), g.input(torch.float32, (2, 5, 4)), g.input(torch.float32, (2, 5, 6))
    out = g.op("sdpa", q, k, v)
    assert g.op("sdpa_backward", q, k, v, out, out) >= 0
    with pytest.raises(ValueError, match="does not match"):
        g.op("sdpa_backward", q, k, v, out, g.input(torch.float32, (2, 3, 5)))
    with pytest.raises(ValueError, match="float32"):
        g.op("sdpa_backward", q, k, v, out, g.input(torch.float64, (2, 3, 6)))
    with pytest.raises(ValueError, match="sources"):
        g.op("sdpa_backward", q, k, v, out)


class Attn(torch.nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.h = heads
        self.qkv = torch.nn.Linear(d, 3 * d)

    def forward(self, x, mask=None, causal=False):
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, -1)
        q, k, v = (t.view(B, T, self.h, D // self.h).transpose(1, 2) for t in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal).transpose(1, 2)


@pytest.mark.parametrize("form", ["causal", "bool2d", "float4d", "none"])
def test_compiled_module_uses_the_fused_op(form):
    m = Attn().eval()
    x = rnd(3, 21, 32)
    mask = {"bool2d": torch.rand(21, 21, generator=G) > 0.2, "float4d": rnd(3, 1, 21, 21)}.get(form)
    cm = smelt.compile(m)
    with torch.no_grad():
        want = m(x, mask, form == "causal")
        got = cm(x, mask, form == "causal")
    close(got.contiguous(), want.contiguous())
    st = cm._smelt.stats()
    assert st["compiles"] == 1 and st["eager_entries"] == 0, st


def test_float64_attention_still_decomposes():
    q, k, v = (rnd(2, 3, 9, 8).double() for _ in range(3))
    cf = smelt.compile(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True))
    torch.testing.assert_close(cf(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert math.isfinite(cf._smelt.stats()["compile_ms"])


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_explicit_causal_mask_skips_blocks_and_keeps_values(kind):
    """A lower-triangular mask given explicitly (as Hugging Face builds it):
    key blocks that the mask removes entirely are skipped; values as torch."""
    q, k, v = rnd(2, 3, 150, 16), rnd(2, 3, 150, 16), rnd(2, 3, 150, 8)
    keep = torch.ones(150, 150, dtype=torch.bool).tril()
    mask = keep if kind == "bool" else torch.zeros(150, 150).masked_fill(~keep, float("-inf"))
    full = mask.expand(2, 1, 150, 150)
    close(graph_sdpa(q, k, v, full), F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


@pytest.mark.parametrize("form", ["none", "causal", "mask-heads", "mask-bcast", "same-heads", "float64"])
def test_grouped_query_attention(form):
    """enable_gqa=True: 8 query heads over 2 key/value heads (torch's
    repeat_interleave rule) compiles as one graph on views of q, k, v."""
    dt = torch.float64 if form == "float64" else torch.float32
    hk = 8 if form == "same-heads" else 2
    q = rnd(3, 8, 13, 16).to(dt)
    k, v = rnd(3, hk, 19, 16).to(dt), rnd(3, hk, 19, 12).to(dt)
    mask = {"mask-heads": torch.rand(3, 8, 13, 19, generator=G) > 0.3,
            "mask-bcast": rnd(13, 19)}.get(form)
    causal = form == "causal"
    if causal:
        k, v = k[:, :, :13], v[:, :, :13]

    def f(a, b, c, m):
        return F.scaled_dot_product_attention(a, b, c, attn_mask=m, is_causal=causal, enable_gqa=True)

    cf = smelt.compile(f, fullgraph=True)
    want = f(q, k, v, mask)
    got = cf(q, k, v, mask)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert cf._smelt.stats()["compiles"] == 1
