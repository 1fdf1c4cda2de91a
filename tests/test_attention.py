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
