"""torch.device / torch.dtype as arguments and attributes, .to() with
them, torch.tensor(...) of Python numbers and lists, factory functions
with dtype/device keywords, type conversions, finfo/iinfo."""
import torch

from ..base import I, T, call, prog

C = "dtypes_devices"


@prog(C, inputs=(T(3, 4), torch.float64), steps=[call(), call(T(3, 4), torch.int32), call(T(3, 4), torch.float16)])
def dtype_argument(x, dt):
    return x.to(dt) * 2


@prog(C, inputs=(T(3, 4), torch.device("cpu")), steps=[call(), call(T(3, 4), "cpu")])
def device_argument(x, dev):
    return torch.ones(3, 4, device=dev) + x.to(dev)


@prog(C, inputs=(T(3, 4),))
def device_of_input(x):
    return torch.zeros(4, device=x.device, dtype=x.dtype) + x, x.device.type, str(x.device)


@prog(C, inputs=(T(3, 4),))
def tensor_of_python_numbers(x):
    return x + torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor(3), torch.tensor(2.5), torch.tensor(True)


@prog(C, inputs=(T(3, 4),))
def tensor_of_nested_list(x):
    return x @ torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]])


@prog(C, inputs=(T(3, 4), 2.5), steps=[call(), call(T(3, 4), -1.0)])
def tensor_of_argument(x, v):
    return x * torch.tensor(v), torch.tensor([v, v * 2])


@prog(C, inputs=(T(3, 4),))
def tensor_from_shape(x):
    return torch.tensor(x.shape), torch.tensor(x.shape[0]) * x


@prog(C, inputs=(T(3, 4),))
def tensor_with_dtype(x):
    return torch.tensor([1, 2, 3, 4], dtype=torch.float16) + x.half(), torch.tensor([1, 2], dtype=torch.int8)


@prog(C, inputs=(T(3, 4),))
def as_tensor_and_from_list(x):
    return torch.as_tensor([1.0, 2.0, 3.0, 4.0]) * x, torch.as_tensor(x) is x


@prog(C, inputs=(T(3, 4),))
def factories_with_kwargs(x):
    return (torch.ones(2, 3, dtype=torch.int64), torch.full((2,), 7, dtype=torch.float64),
            torch.arange(0, 10, 3), torch.linspace(0, 1, 5), torch.eye(3, dtype=torch.bool), torch.empty(2, 0).shape)


@prog(C, inputs=(T(3, 4),))
def like_factories(x):
    return torch.zeros_like(x, dtype=torch.int32), torch.full_like(x, 2.5), torch.ones_like(x[0]), x.new_zeros(2), x.new_full((2,), 3)


@prog(C, inputs=(I(3, 4),))
def conversions(x):
    return x.float(), x.double(), x.half(), x.bool(), x.to(torch.uint8), x.type(torch.int16), x.long()


@prog(C, inputs=(T(3, 4, low=-300, high=300),))
def float_to_int_conversions(x):
    return x.int(), x.to(torch.uint8), x.to(torch.int8), x.round().long()


@prog(C, inputs=(T(3, 4),))
def finfo_iinfo(x):
    return x.clamp(min=torch.finfo(x.dtype).tiny) * torch.finfo(torch.float16).max, torch.iinfo(torch.int8).max


@prog(C, inputs=(T(3, 4),))
def dtype_attributes(x):
    return x.dtype.is_floating_point, x.dtype.itemsize, x.dtype == torch.float32, x.is_floating_point(), torch.is_tensor(x)


@prog(C, inputs=(T(3, 4),))
def promote_types_result_type(x):
    dt = torch.promote_types(x.dtype, torch.int64)
    return x.to(dt), torch.result_type(x, 2), torch.get_default_dtype()


@prog(C, inputs=(T(3, 4, dtype=torch.bfloat16), T(3, 4, dtype=torch.float16)))
def half_types_mixed(a, b):
    return a + b, a.float() * b.float(), (a * 2).dtype


@prog(C, inputs=(T(3, 4),))
def tensor_of_tensors_list(x):
    return torch.tensor([1.0, 2.0]) + torch.stack([x.sum(), x.mean()])
