"""Tensor subclasses (as inputs, made inside, returned) and
__torch_function__ overrides, nn.Parameter handling, torch function
modes."""
import torch
from torch.overrides import TorchFunctionMode

from ..base import Fn, T, call, prog

C = "subclasses"


class Tagged(torch.Tensor):
    """A subclass with no behaviour of its own."""


class Logged(torch.Tensor):
    """Counts the torch calls made on it (class attribute)."""
    calls = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        Logged.calls += 1
        return super().__torch_function__(func, types, args, kwargs or {})


class Doubling(torch.Tensor):
    """Every add on it adds twice."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.add, torch.Tensor.add, torch.Tensor.__add__):
            a, b = args[0], args[1]
            out = super().__torch_function__(func, types, (a, b), kwargs)
            return super().__torch_function__(func, types, (out, b), kwargs)
        return super().__torch_function__(func, types, args, kwargs)


class Unwrapping(torch.Tensor):
    """Results come back as plain tensors."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def sub(cls, *shape):
    return Fn(lambda g: torch.randn(*shape, generator=g).as_subclass(cls), f"{cls.__name__}{shape}")


@prog(C, inputs=(sub(Tagged, 3, 4),))
def plain_subclass_input(x):
    return x * 2 + 1


@prog(C, inputs=(sub(Tagged, 3, 4), T(3, 4)))
def subclass_mixed_with_plain(x, y):
    return x + y, y * 2


@prog(C, inputs=(T(3, 4),))
def subclass_made_inside(x):
    return (x * 2).as_subclass(Tagged) + 1


@prog(C, inputs=(sub(Logged, 3, 4),), state=("Logged.calls",))
def torch_function_counts(x):
    return torch.relu(x) + x.sum()


@prog(C, inputs=(sub(Doubling, 3, 4), T(3, 4)))
def torch_function_changes_add(x, y):
    return x + y


@prog(C, inputs=(sub(Unwrapping, 3, 4),))
def torch_function_unwraps(x):
    return x.exp() - 1


@prog(C, inputs=(sub(Tagged, 3, 4),))
def isinstance_subclass(x):
    if isinstance(x, Tagged):
        return x * 3
    return x


@prog(C, inputs=(T(3, 4),), steps=[call(), call(sub(Tagged, 3, 4)), call(T(3, 4))])
def type_changes_between_calls(x):
    return (x + 1, type(x).__name__)


@prog(C, inputs=(Fn(lambda g: torch.nn.Parameter(torch.randn(3, 4, generator=g), requires_grad=False), "Param"),))
def parameter_input(x):
    return x * 2, isinstance(x, torch.nn.Parameter)


class AddOneMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.mul:
            out = out + 1
        return out


@prog(C, inputs=(T(3, 4),))
def function_mode_inside(x):
    with AddOneMode():
        return torch.mul(x, 2)


class WithData(torch.Tensor):
    @staticmethod
    def __new__(cls, data, scale):
        t = torch.Tensor._make_subclass(cls, data)
        t.scale = scale
        return t


@prog(C, inputs=(Fn(lambda g: WithData(torch.randn(3, 4, generator=g), 2.0), "WithData"),))
def subclass_with_attribute(x):
    return x * x.scale


@prog(C, inputs=(sub(Tagged, 4, 4),))
def subclass_views(x):
    return x.t()[1:], x.view(16)
