"""F.scaled_dot_product_attention on CUDA (smelt's flash kernels), forward
and backward, against torch's math attention in float64 (the reference)
and eager's own kernels on the same inputs (the error to stay within
twice of, plus the dtype's floor): causal, boolean and additive masks,
grouped-query heads (enable_gqa), key/value batches broadcast (stride 0),
(B, L, H, E) layouts viewed as (B, H, L, E), head dims 64 and 128,
sequences 1 to 2048, query and key lengths that differ, float32, float16,
bfloat16. Boolean masks keep one key per row (a row with none is NaN in
some of torch's kernels and 0 in others)."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import smelt
from gpu_helpers import FLOATS, assert_close, assert_compiled, check, poison, rand

# B, H, Hkv, L, S, E, causal, mask ("bool", "float" or None), layout ("bhle" or "blhe")
FORWARD = [
    (2, 4, 4, 1, 1, 64, False, None, "bhle"),
    (2, 4, 4, 17, 17, 64, True, None, "blhe"),
    (1, 8, 8, 128, 128, 128, True, None, "bhle"),
    (2, 3, 3, 257, 255, 64, False, "bool", "blhe"),
    (1, 4, 4, 1, 2048, 128, False, None, "blhe"),      # one query (decoding) over a long cache
    (1, 4, 4, 1000, 1000, 64, False, "float", "bhle"),
    (1, 8, 2, 511, 511, 128, True, None, "blhe"),      # grouped-query: 4 query heads per key head
    (2, 2, 2, 2048, 2048, 64, True, None, "bhle"),
    (4, 8, 8, 333, 1024, 128, False, "bool", "blhe"),  # cross-attention
]
BACKWARD = [
    (2, 4, 4, 65, 65, 64, True, None, "blhe"),
    (1, 4, 4, 257, 300, 128, False, "bool", "bhle"),
    (1, 8, 2, 512, 512, 64, True, None, "blhe"),
    (1, 2, 2, 1024, 1024, 128, False, "float", "bhle"),
    (1, 2, 2, 2048, 2048, 64, True, None, "blhe"),
]


def ids(case):
    b, h, hkv, L, S, E, causal, mask, layout = case
    return f"b{b}h{h}kv{hkv}-L{L}S{S}E{E}{'-causal' if causal else ''}{'-' + mask if mask else ''}-{layout}"


def operands(case, dtype):
    """q, k, v (the layout's views) and the mask of a case."""
    b, h, hkv, L, S, E, causal, mask, layout = case

    def make(heads, n):
        if layout == "blhe":
            return rand(b, n, heads, E, dtype=dtype).transpose(1, 2)
        return rand(b, heads, n, E, dtype=dtype)
    q, k, v = make(h, L), make(hkv, S), make(hkv, S)
    m = None
    if mask == "bool":
        m = rand(b, 1, L, S) > 0.3
        m[..., 0] = True
    elif mask == "float":
        m = rand(1, h, L, S, dtype=dtype, scale=2.0)
    return q, k, v, m


def attention(case):
    causal, gqa = case[6], case[1] != case[2]

    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal, enable_gqa=gqa)
    return f


def reference(f, q, k, v, m):
    """f on float64 copies through torch's math kernel (leaves that require
    grad when the inputs do)."""
    args = [t.detach().double().requires_grad_(t.requires_grad) for t in (q, k, v)]
    mm = m.double() if m is not None and m.is_floating_point() else m
    with sdpa_kernel(SDPBackend.MATH):
        return f(*args, mm), args


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("case", FORWARD, ids=ids)
def test_forward(case, dtype):
    f = attention(case)
    q, k, v, m = operands(case, dtype)
    eager = f(q, k, v, m)
    ref, _ = reference(f, q, k, v, m)
    cf = smelt.compile(f)
    poison(eager.numel() * eager.element_size())
    out = cf(q, k, v, m)
    assert_close(out, eager, ref)
    assert_compiled(cf)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("case", BACKWARD, ids=ids)
def test_backward(case, dtype):
    f = attention(case)
    q, k, v, m = operands(case, dtype)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    mine = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    g = rand(*q.shape[:-1], v.shape[-1], dtype=dtype)
    eager = f(*leaves, m)
    eager.backward(g)
    ref, ref_leaves = reference(f, *leaves, m)
    ref.backward(g.double())
    cf = smelt.compile(f)
    out = cf(*mine, m)
    out.backward(g)
    assert_close(out, eager, ref)
    for name, a, e, r in zip("qkv", mine, leaves, ref_leaves):
        assert_close(a.grad, e.grad, r.grad, what=f"d{name}")
    assert_compiled(cf)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_broadcast_key_value_batch_and_scale(dtype):
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, scale=0.3)
    q = rand(3, 4, 100, 64, dtype=dtype)
    k, v = (rand(1, 4, 129, 64, dtype=dtype).expand(3, -1, -1, -1) for _ in range(2))   # batch stride 0
    eager = f(q, k, v)
    ref, _ = reference(lambda q, k, v, m: f(q, k, v), q, k, v, None)
    cf = smelt.compile(f)
    assert_close(cf(q, k, v), eager, ref)
    assert_compiled(cf)


@pytest.mark.parametrize("E", [32, 80, 256])
def test_other_head_dims_are_right_compiled_or_not(E):
    """Head dims the brief does not promise: compiled or run eagerly, the
    result must be right."""
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    q, k, v = (rand(2, 3, 77, E, dtype=torch.bfloat16) for _ in range(3))
    eager = f(q, k, v)
    ref, _ = reference(lambda q, k, v, m: f(q, k, v), q, k, v, None)
    assert_close(smelt.compile(f)(q, k, v), eager, ref)


def test_attention_inside_a_graph_with_projections():
    """Attention between fused pointwise work and matmuls (one plan)."""
    def f(x, wq, wo):
        b, n, _ = x.shape
        q = (x @ wq).view(b, n, 4, 64).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, q * 0.5, torch.tanh(q), is_causal=True)
        return a.transpose(1, 2).reshape(b, n, 256) @ wo + x
    check(f, rand(2, 300, 256, dtype=torch.bfloat16), rand(256, 256, scale=0.06, dtype=torch.bfloat16),
          rand(256, 256, scale=0.06, dtype=torch.bfloat16))
