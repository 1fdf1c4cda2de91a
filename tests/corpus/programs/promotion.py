"""Type promotion and factory dtype inference as eager defines them: 0-d
tensors vs dimensioned ones, Python scalars vs tensors of each kind,
unsigned with signed, bool arithmetic, torch.full / arange / tensor
inferring their dtype from the values, reductions' result dtypes."""
import torch

from ..base import Fn, I, T, prog

C = "promotion"


def scalar_t(value, dtype):
    return Fn(lambda g: torch.tensor(value, dtype=dtype), f"tensor({value}, {dtype})")


@prog(C, inputs=(T(3, dtype=torch.float16), scalar_t(1.5, torch.float64)))
def half_plus_zero_dim_double(h, s):
    return h + s, s + h, h * s


@prog(C, inputs=(T(3, dtype=torch.float16), T(3, dtype=torch.float64)))
def half_plus_double_vector(h, d):
    return h + d


@prog(C, inputs=(I(3), scalar_t(2.5, torch.float32)))
def int_vector_plus_zero_dim_float(i, s):
    return i + s, i * s, i / s


@prog(C, inputs=(I(3, dtype=torch.int32), scalar_t(7, torch.int64)))
def int32_plus_zero_dim_int64(i, s):
    return i + s, (i * s).dtype


@prog(C, inputs=(I(3, low=0, high=200, dtype=torch.uint8), I(3, low=-100, high=100, dtype=torch.int8)))
def uint8_with_int8(u, s):
    return u + s, u * s, u - s


@prog(C, inputs=(Fn(lambda g: torch.tensor([True, False, True]), "bools"), Fn(lambda g: torch.tensor([True, True, False]), "bools")))
def bool_with_bool(a, b):
    return a + b, a * b, a & b, a | b, a - b if False else a ^ b


@prog(C, inputs=(Fn(lambda g: torch.tensor([True, False, True]), "bools"),))
def bool_with_python_numbers(b):
    return b + 1, b * 2.5, b + True, b.sum(), b.mean(dtype=torch.float32)


@prog(C, inputs=(T(3),))
def full_infers_dtype(x):
    return torch.full((2,), 7), torch.full((2,), 7.0), torch.full((2,), True), torch.full((2,), 7, dtype=torch.int8), x


@prog(C, inputs=(T(3),))
def arange_infers_dtype(x):
    return torch.arange(5), torch.arange(5.0), torch.arange(0, 1, 0.25), torch.arange(2, 11, 3), x


@prog(C, inputs=(T(3),))
def tensor_infers_dtype(x):
    return torch.tensor([1, 2]), torch.tensor([1, 2.0]), torch.tensor([True, False]), torch.tensor(3), torch.tensor(3.0), x


@prog(C, inputs=(I(3, 4),))
def int_reductions_dtypes(i):
    return i.max(), i.sum(0), i.amin(1), i.argmax(), i.prod(), i.cumsum(0), i.abs(), i.sign()


@prog(C, inputs=(I(3, 4, dtype=torch.int8),))
def int8_reductions_dtypes(i):
    return i.sum(), i.prod(1), i.cumsum(1), i.max()


@prog(C, inputs=(I(3, 4, low=1, high=9),))
def int_divisions(i):
    return i / i, i / 2, i // 2, i.true_divide(3), i.floor_divide(3), i.float().int()


@prog(C, inputs=(T(3, 4), I(3, 4)))
def where_dtype_mix(x, i):
    return torch.where(x > 0, i, 2.5), torch.where(x > 0, 1, 2.5), torch.where(x > 0, i, x), torch.where(x > 0, True, False)


@prog(C, inputs=(I(3, 4),))
def ones_like_and_new_with_dtype(i):
    return torch.ones_like(i, dtype=torch.float16), i.new_ones(2), i.new_tensor([1.5, 2.5]), torch.zeros_like(i) + 0.5


@prog(C, inputs=(T(3, 4), I(4)))
def float_tensor_with_int_tensor(x, i):
    return x + i, x * i, i - x, x / i.clamp(min=1)


@prog(C, inputs=(T(3, 4, dtype=torch.bfloat16), T(3, 4, dtype=torch.float16)))
def bf16_with_f16(a, b):
    return a + b, (a * b).dtype


@prog(C, inputs=(T(3, 4, dtype=torch.float16),))
def half_with_python_int_and_float(h):
    return h + 1, h * 2.5, h / 3, h ** 2


@prog(C, inputs=(I(3, 4, dtype=torch.int16), 100000))
def int16_with_big_python_int(i, k):
    return i + k, i * k


@prog(C, inputs=(T(3, 4),))
def mean_over_tuple_dims(x):
    return x.mean(dim=(0, 1)), x.sum((1, 0), keepdim=True), x.amax((0, 1)), torch.std(x, (0, 1))


@prog(C, inputs=(T(3, 4),))
def type_as_and_to_other(x):
    i = torch.ones(2, dtype=torch.int32)
    return x.type_as(i), x.to(i), i.to(x), x.to(dtype=torch.float64, copy=False)


@prog(C, inputs=(I(3, 4),))
def softmax_of_int_raises(i):
    return torch.softmax(i, -1)


@prog(C, inputs=(I(3, 4),))
def softmax_int_with_dtype(i):
    return torch.softmax(i, -1, dtype=torch.float32)
