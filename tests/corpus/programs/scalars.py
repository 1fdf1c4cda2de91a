"""Python int/float/bool/complex scalars mixed with tensors: arithmetic
both ways, results that are Python numbers, scalars returned, math module,
shape arithmetic, scalar type promotion (int tensors with floats, bool
tensors with ints), division semantics, 0-d tensors."""
import math

import torch

from ..base import B, I, T, call, prog

C = "scalars"


@prog(C, inputs=(T(3, 4), 2, 0.5))
def int_and_float_args(x, n, f):
    return x * n + f, n * f, n // 2, n / 3


@prog(C, inputs=(I(3, 4), 2.5))
def int_tensor_times_float(x, f):
    return x * f, x + 1, x / 2, x // 2, x * True


@prog(C, inputs=(B(3, 4),))
def bool_tensor_arith(b):
    return b + 1, b * 2.5, b.sum(), b.float().mean()


@prog(C, inputs=(T(3, 4),))
def returns_python_numbers(x):
    return x.shape[0] * 2, float(x.shape[1]) / 3, x.dim() > 1, len(x)


@prog(C, inputs=(T(3, 4),))
def math_on_shapes(x):
    return x * math.sqrt(x.shape[-1]), math.log(x.shape[0]), math.ceil(x.numel() / 5)


@prog(C, inputs=(T(3, 4), 3), steps=[call(), call(T(3, 4), 7), call(T(3, 4), 3)])
def int_arg_specialised(x, k):
    return x.pow(k) + k


@prog(C, inputs=(T(3, 4), 1.5), steps=[call(), call(T(3, 4), -2.25), call(T(3, 4), 1e-8)])
def float_arg_changes(x, f):
    return x * f + f ** 2


@prog(C, inputs=(T(3, 4), True), steps=[call(), call(T(3, 4), False)])
def bool_arg_arith(x, b):
    return x * b + (not b)


@prog(C, inputs=(T(3, 4),))
def zero_dim_tensor_ops(x):
    s = x.sum()
    return s * 2, s + x, torch.tensor(2.0) * x, s.reshape(1)


@prog(C, inputs=(T(), T(3)))
def zero_dim_input(s, v):
    return s * v, s + 1, -s


@prog(C, inputs=(T(3, 4),))
def rsub_rdiv_rpow(x):
    return 1 - x, 2 / (x.abs() + 1), 2 ** x, 3 % (x.abs() + 1)


@prog(C, inputs=(I(3, 4, low=1, high=9),))
def int_true_division(x):
    return x / 2, x / x, 7 / x, torch.div(x, 3, rounding_mode="floor"), torch.div(x, 3, rounding_mode="trunc")


@prog(C, inputs=(I(3, 4, low=-9, high=9),))
def int_floor_mod_negative(x):
    return x // 4, x % 4, -x // 3, x.remainder(-3), x.fmod(3)


@prog(C, inputs=(T(3, 4),))
def complex_scalar(x):
    return x * (1 + 2j), torch.view_as_real(x * 1j)


@prog(C, inputs=(T(3, 4),))
def big_int_scalar(x):
    return x * 2 ** 40, (x * 1e30).sum()


@prog(C, inputs=(I(3, 4, dtype=torch.int32), 3))
def int32_with_python_int(x, k):
    return x * k, x + 2 ** 20, (x * k).dtype


@prog(C, inputs=(T(3, 4, dtype=torch.float16), 0.1))
def half_with_python_float(x, f):
    return x * f, x + 1000.5


@prog(C, inputs=(T(3, 4),))
def inf_nan_scalars(x):
    return x * float("inf"), x + float("nan"), torch.clamp(x, max=math.inf), x / 0


@prog(C, inputs=(T(3, 4),))
def scalar_comparisons(x):
    return x > 0, 0 < x, x == 1.5, x != 0


@prog(C, inputs=(T(3, 4), 2))
def builtin_min_max_abs(x, n):
    return x * max(n, 3) + min(n, 1) - abs(-n), round(2.567, 2), divmod(7, n)


@prog(C, inputs=(T(4,),))
def scalar_tensor_bool(x):
    return bool(x.numel() > 3), int(x.shape[0]) * x, x.new_tensor([1.0, 2.0, 3.0, 4.0]) * x
