"""Pure tensor functions: arithmetic, reductions, views, matmul, indexing,
math and activation functions, mixed dtypes, broadcasting."""
import math

import torch
import torch.nn.functional as F

from ..base import I, T, B, call, prog

C = "tensor"


@prog(C, inputs=(T(4, 5), T(4, 5)))
def add_mul(a, b):
    return a * b + a - b / 3


@prog(C, inputs=(T(6, 7),))
def chain_unary(x):
    return torch.tanh(torch.exp(x.clamp(-2, 2))).sqrt()


@prog(C, inputs=(T(3, 4), T(4)))
def broadcast_row(x, v):
    return (x - v) * (x + v)


@prog(C, inputs=(T(5, 1), T(1, 6)))
def outer_broadcast(a, b):
    return a * b + 1


@prog(C, inputs=(T(8, 16), T(16, 4)))
def matmul_relu(x, w):
    return torch.relu(x @ w)


@prog(C, inputs=(T(2, 3, 4), T(2, 4, 5)))
def bmm(a, b):
    return torch.bmm(a, b).sum(-1)


@prog(C, inputs=(T(7, 9),))
def softmax_last(x):
    return F.softmax(x, dim=-1)


@prog(C, inputs=(T(7, 9),))
def log_softmax_first(x):
    return torch.log_softmax(x, 0)


@prog(C, inputs=(T(4, 6),))
def reductions(x):
    return x.sum(), x.mean(1), x.amax(0), x.std(1), x.var(0, keepdim=True)


@prog(C, inputs=(T(4, 6),))
def argmax_min(x):
    return x.argmax(-1), x.argmin(0), x.max(1).values


@prog(C, inputs=(T(3, 8),))
def view_reshape(x):
    return x.view(3, 2, 4).permute(2, 0, 1).reshape(4, 6) * 2


@prog(C, inputs=(T(5, 6),))
def transpose_contig(x):
    return x.t().contiguous() + 1


@prog(C, inputs=(T(6, 8),))
def slicing(x):
    return x[1:4, ::2] * x[2:5, 1::2]


@prog(C, inputs=(T(4, 5, 6),))
def ellipsis_none(x):
    return x[..., 0] + x[:, None, 1, :].squeeze(1).sum(-1, keepdim=True)


@prog(C, inputs=(T(3, 4), T(3, 4)))
def cat_stack(a, b):
    return torch.cat([a, b], 1), torch.stack((a, b), 0)


@prog(C, inputs=(T(6, 4),))
def chunk_split(x):
    a, b, c = x.chunk(3)
    p, q = torch.split(x, [1, 3], dim=1)
    return a + b - c, p * 2, q


@prog(C, inputs=(T(4, 4),))
def where_mask(x):
    return torch.where(x > 0, x, x * 0.1)


@prog(C, inputs=(T(10,),))
def masked_fill(x):
    return x.masked_fill(x < 0, -1.0)


@prog(C, inputs=(T(8, 8),))
def gelu_silu_mish(x):
    return F.gelu(x) + F.silu(x) - F.mish(x)


@prog(C, inputs=(T(2, 5, 8), T(8), T(8)))
def layer_norm_fn(x, w, b):
    return F.layer_norm(x, (8,), w, b, 1e-5)


@prog(C, inputs=(T(3, 4, 8),))
def rms_norm_manual(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


@prog(C, inputs=(I(5, 6), I(5, 6, low=1, high=9)))
def int_ops(a, b):
    return a * b, a // b, a % b, a & b, a | 3


@prog(C, inputs=(T(4, 4), I(4, 4)))
def mixed_dtype(a, b):
    return a + b, (b * 2).float() / 3


@prog(C, inputs=(T(4, 4, dtype=torch.float64), T(4, 4)))
def float64_promote(a, b):
    return a * b


@prog(C, inputs=(B(5, 5), B(5, 5)))
def bool_logic(a, b):
    return a & ~b | (a ^ b), a.any(), b.all(1)


@prog(C, inputs=(T(6, 6),))
def comparisons(x):
    return (x > 0.5) & (x < 1.5), x.eq(x.round()), torch.isclose(x, x + 1e-9)


@prog(C, inputs=(T(9,),))
def cumsum_sort(x):
    return torch.cumsum(x, 0), torch.sort(x).values, torch.topk(x, 3).indices


@prog(C, inputs=(T(5, 7), I(5, 3, low=0, high=7)))
def gather(x, idx):
    return torch.gather(x, 1, idx)


@prog(C, inputs=(T(6, 4), I(3, low=0, high=6)))
def index_select_tensor(x, idx):
    return x[idx] + x.index_select(0, idx)


@prog(C, inputs=(T(4, 5),))
def math_constants(x):
    return x * math.pi + math.sqrt(2.0) - math.e


@prog(C, inputs=(T(3, 5),))
def clamp_variants(x):
    return x.clamp(min=0), x.clamp(max=0.5), torch.clamp(x, -0.3, 0.3)


@prog(C, inputs=(T(4, 4),))
def pow_abs_sign(x):
    return x.abs() ** 1.5, torch.sign(x), x ** 2, 2 ** x


@prog(C, inputs=(T(2, 3, 8, 8), T(4, 3, 3, 3)))
def conv_pool(x, w):
    return F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 2)


@prog(C, inputs=(T(2, 4, 6, 8), T(2, 4, 6, 8), T(2, 4, 6, 8)))
def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@prog(C, inputs=(T(5, 3),))
def new_tensors(x):
    return x + torch.ones_like(x) * 2 + torch.zeros(5, 3) + torch.arange(3.0) + torch.full((5, 1), 0.5)


@prog(C, inputs=(T(4, 8),))
def expand_repeat(x):
    return x[:, :1].expand(4, 8) + x.repeat(1, 2)[:, 3:11]


@prog(C, inputs=(T(3, 3),))
def tril_triu_diag(x):
    return torch.tril(x) - torch.triu(x, 1) + torch.diag(torch.diagonal(x))


@prog(C, inputs=(T(8, 3),))
def flip_roll(x):
    return torch.flip(x, [0]) + torch.roll(x, 2, 0)


@prog(C, inputs=(T(3, 4, 5),))
def einsum(x):
    return torch.einsum("ijk,ijk->ik", x, x)


@prog(C, inputs=(T(4, 6),), steps=[call(), call(T(4, 6, contiguous=False))])
def noncontiguous_input(x):
    return x.sin() + x.sum(0)
