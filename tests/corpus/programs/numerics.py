"""Numerical edge semantics eager defines: integer division and modulo by
zero, overflow and wrap-around, NaN/inf through reductions, comparisons,
min/max and clamp, argmax ties, rounding half to even, float to int
conversion, bool and int sums, dtype= reductions, softmax of -inf rows,
in-place ops on inputs with broadcasting and type checks."""
import math

import torch
import torch.nn.functional as F

from ..base import Fn, I, T, prog

C = "numerics"


def with_specials(*shape):
    def make(g):
        t = torch.randn(*shape, generator=g)
        t.view(-1)[0] = math.nan
        t.view(-1)[1] = math.inf
        t.view(-1)[2] = -math.inf
        return t
    return Fn(make, f"T{shape}+nan/inf")


def with_zero(*shape):
    def make(g):
        t = torch.randint(-5, 5, shape, generator=g)
        t.view(-1)[0] = 0
        t.view(-1)[1] = 3
        return t
    return Fn(make, f"I{shape} with 0")


@prog(C, inputs=(I(3, 4), with_zero(3, 4)))
def int_floordiv_by_zero(a, b):
    return a // b


@prog(C, inputs=(I(3, 4), with_zero(3, 4)))
def int_remainder_by_zero(a, b):
    return a % b


@prog(C, inputs=(T(3, 4), with_zero(3, 4)))
def float_div_by_int_zero(a, b):
    return a / b, a // b.float(), torch.fmod(a, b.float())


@prog(C, inputs=(I(3, 4, low=100, high=127, dtype=torch.int8),))
def int8_overflow_wraps(x):
    return x + x, x * 3, -x.to(torch.int8) - 10


@prog(C, inputs=(I(3, 4, low=0, high=255, dtype=torch.uint8),))
def uint8_wraps(x):
    return x + 200, x - 250, x * 2


@prog(C, inputs=(I(5, low=2 ** 30, high=2 ** 31 - 1, dtype=torch.int32),))
def int32_overflow(x):
    return x + x, x * 4


@prog(C, inputs=(with_specials(3, 4),))
def nan_inf_reductions(x):
    return x.sum(1), x.amax(1), x.amin(0), x.mean(), x.nansum(), torch.nan_to_num(x)


@prog(C, inputs=(with_specials(3, 4),))
def nan_comparisons(x):
    return x > 0, x == x, x != x, torch.isnan(x), torch.isinf(x), torch.isfinite(x)


@prog(C, inputs=(with_specials(3, 4), T(3, 4)))
def nan_min_max_elementwise(a, b):
    return torch.maximum(a, b), torch.minimum(a, b), torch.fmax(a, b), torch.fmin(a, b)


@prog(C, inputs=(with_specials(3, 4),))
def nan_clamp_relu(x):
    return x.clamp(-1, 1), F.relu(x), torch.sigmoid(x), torch.tanh(x)


@prog(C, inputs=(T(3, 4),))
def clamp_min_greater_than_max(x):
    return x.clamp(min=1.0, max=-1.0)


@prog(C, inputs=(Fn(lambda g: torch.tensor([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 1.0]]), "ties"),))
def argmax_ties_first(x):
    return x.argmax(1), x.argmin(1), x.max(1).indices, torch.topk(x, 2).values


@prog(C, inputs=(Fn(lambda g: torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999]), "halves"),))
def round_half_even(x):
    return torch.round(x), x.round(decimals=1), torch.floor(x), torch.ceil(x), torch.trunc(x)


@prog(C, inputs=(T(3, 4, low=-1e10, high=1e10),))
def float_to_int_large(x):
    return x.to(torch.int64), x.to(torch.int32), x.to(torch.int16)


@prog(C, inputs=(Fn(lambda g: torch.tensor([-2.7, -0.5, 0.5, 2.7, 255.9, 256.0, -1.0]), "mixed"),))
def float_to_uint8_and_bool(x):
    return x.to(torch.uint8), x.to(torch.bool), x.to(torch.int8)


@prog(C, inputs=(Fn(lambda g: torch.randint(0, 2, (4, 5), generator=g).bool(), "bool"), I(4, 5)))
def bool_and_int_sums(b, i):
    return b.sum(), b.sum(1), i.sum(0), i.prod(1), b.float().mean(), i.to(torch.int32).sum().dtype


@prog(C, inputs=(T(4, 5, dtype=torch.float16), I(4, 5)))
def reductions_with_dtype(h, i):
    return h.sum(dtype=torch.float32), i.sum(dtype=torch.float64), h.mean(1, dtype=torch.float32), torch.cumsum(i, 0, dtype=torch.float32)


@prog(C, inputs=(I(4, 5),))
def mean_of_int_raises(i):
    return i.mean()


@prog(C, inputs=(Fn(lambda g: torch.tensor([[0.0, -math.inf, 1.0], [-math.inf, -math.inf, -math.inf]]), "rows"),))
def softmax_minus_inf_rows(x):
    return F.softmax(x, -1), F.log_softmax(x, -1)


@prog(C, inputs=(T(3, 4),))
def log_sqrt_of_negative(x):
    return torch.log(x), torch.sqrt(x), torch.rsqrt(x), x.pow(0.5), torch.log1p(x - 1)


@prog(C, inputs=(I(3, 4, low=1, high=5),))
def int_pow_negative_exponent_raises(i):
    return i ** -1


@prog(C, inputs=(I(3, 4, low=-5, high=5),))
def int_pow_and_shift(i):
    return i ** 2, i.pow(3), i << 2, i >> 1, i.abs() ** 0


@prog(C, inputs=(T(3, 4), T(4)))
def inplace_broadcast_on_input(x, v):
    x += v
    x *= 2
    return x.sum()


@prog(C, inputs=(T(4), T(3, 4)))
def inplace_broadcast_wrong_way_raises(v, x):
    v += x
    return v


@prog(C, inputs=(I(3, 4), T(3, 4)))
def inplace_int_plus_float_raises(i, x):
    i += x
    return i


@prog(C, inputs=([T(3), T(3)],))
def augmented_assign_list_element(xs):
    xs[0] += 1
    return xs[0] * 2, xs[1]


@prog(C, inputs=(T(5, 3), I(2, low=0, high=5), T(2, 3)))
def index_put_on_input(x, idx, v):
    x[idx] = v
    return x.sum(0)


@prog(C, inputs=(T(6,), I(6, low=0, high=3)))
def index_add_scatter_add_duplicates(src, idx):
    z = torch.zeros(3)
    return z.index_add(0, idx, src), torch.zeros(3).scatter_add(0, idx, src)


@prog(C, inputs=(T(3, 4),))
def where_with_python_scalars(x):
    return torch.where(x > 0, 1.0, 0.0), torch.where(x > 0, 1, 0), torch.where(x > 0, x, 2)


@prog(C, inputs=(T(3, 4, dtype=torch.float16),))
def half_precision_large_sum(x):
    return (x * 1000).sum(), (x * 60000).exp()


@prog(C, inputs=(T(2, 4, dtype=torch.bfloat16), T(4, 3, dtype=torch.bfloat16)))
def bfloat16_matmul(a, b):
    return a @ b
