"""Aliasing: returning an input (alone, in a container, twice), views of
inputs, in-place ops on inputs and on views of inputs, the same tensor
passed twice, overlapping views, in-place ops on intermediates that alias
each other. These programs declare `alias`: which results are the input
objects, and which share an input's storage, must match eager."""
import torch
import torch.nn.functional as F

from ..base import Fn, T, mod, prog

C = "aliasing"


def same_twice(*shape):
    def make(g):
        t = torch.randn(*shape, generator=g)
        return t
    return Fn(make, "same")


def pair_same(*shape):
    """A tuple holding one tensor twice (deep copies keep that)."""
    def make(g):
        t = torch.randn(*shape, generator=g)
        return (t, t)
    return Fn(make, "(t, t)")


def base_and_view(*shape):
    def make(g):
        t = torch.randn(*shape, generator=g)
        return (t, t[1:])
    return Fn(make, "(t, t[1:])")


@prog(C, inputs=(T(3, 4),), alias=True)
def return_input(x):
    return x


@prog(C, inputs=(T(3, 4),), alias=True)
def return_input_and_result(x):
    return x, x + 1


@prog(C, inputs=(T(3, 4), T(3, 4)), alias=True)
def return_inputs_swapped(a, b):
    return b, a


@prog(C, inputs=(T(3, 4),), alias=True)
def return_same_result_twice(x):
    y = x * 2
    return y, y


@prog(C, inputs=(T(3, 4),), alias=True)
def return_input_in_dict(x):
    return {"orig": x, "new": x.exp()}


@prog(C, inputs=(T(3, 4),), alias=True)
def return_view_of_input(x):
    return x.view(12)


@prog(C, inputs=(T(3, 4),), alias=True)
def return_transpose_of_input(x):
    return x.t()


@prog(C, inputs=(T(4, 4),), alias=True)
def return_slice_of_input(x):
    return x[1:3], x[:, 0]


@prog(C, inputs=(T(4, 4),), alias=True)
def return_view_and_math(x):
    return x.unsqueeze(0), x.sum()


@prog(C, inputs=(T(3, 4),), alias=True)
def inplace_on_input(x):
    x.mul_(2)
    return x.sum()


@prog(C, inputs=(T(3, 4),), alias=True)
def inplace_on_input_returned(x):
    x.add_(1)
    return x


@prog(C, inputs=(T(3, 4),), alias=True)
def inplace_on_input_view(x):
    x[0].mul_(10)
    return x + 1


@prog(C, inputs=(T(4, 4),), alias=True)
def setitem_on_input(x):
    x[1:3, 0] = 0.5
    return x.sum(0)


@prog(C, inputs=(T(3, 4), T(3, 4)), alias=True)
def copy_into_input(dst, src):
    dst.copy_(src * 2)
    return dst.mean()


@prog(C, inputs=(T(3, 4),), alias=True)
def inplace_relu_on_input(x):
    F.relu(x, inplace=True)
    return x * 2


@prog(C, inputs=(pair_same(3, 4),), alias=True)
def same_tensor_twice_in_tuple(pair):
    a, b = pair
    a.add_(1)
    return a + b


@prog(C, inputs=(pair_same(3, 4),), alias=True)
def same_tensor_twice_read_only(pair):
    a, b = pair
    return a * b


@prog(C, inputs=(base_and_view(4, 3),), alias=True)
def base_and_view_inputs_mutated(bv):
    base, view = bv
    view.mul_(2)
    return base.sum(0), view.sum(0)


@prog(C, inputs=(base_and_view(4, 3),), alias=True)
def base_mutated_view_read(bv):
    base, view = bv
    base.add_(1)
    return view * 3


@prog(C, inputs=(T(3, 4),), alias=True)
def intermediate_view_mutated(x):
    y = x * 1
    v = y[0]
    v.add_(5)
    return y


@prog(C, inputs=(T(3, 4),), alias=True)
def intermediate_mutated_after_use(x):
    y = x + 0
    z = y * 2
    y.add_(1)
    return z, y


@prog(C, inputs=(T(6,),), alias=True)
def input_view_chain_mutated(x):
    v = x.view(2, 3)[1]
    v.zero_()
    return x


@prog(C, inputs=(T(3, 4),), alias=True)
def detach_shares_storage(x):
    return x.detach(), x.data


@prog(C, inputs=(T(3, 4),), alias=True)
def contiguous_of_contiguous_is_self(x):
    return x.contiguous(), x.reshape(3, 4), x.view_as(x)


@prog(C, inputs=(T(3, 4),), alias=True)
def to_same_dtype_is_self(x):
    return x.to(torch.float32), x.float(), x.type(torch.float32)


@prog(C, inputs=(T(3, 4),), alias=True)
def clone_is_not_self(x):
    return x.clone(), x.to(torch.float32, copy=True)


@prog(C, inputs=(T(3, 4), T(3, 4)), alias=True)
def conditional_return_of_input(a, b):
    if a.shape[0] > 2:
        return a
    return b


@prog(C, inputs=([T(3), T(3)],), alias=True)
def list_input_returned_as_is(xs):
    return xs


@prog(C, inputs=(T(3, 4),), alias=True)
def input_in_list_returned(x):
    return [x, x]


@prog(C, inputs=(T(5,),), alias=True)
def unbind_views(x):
    a, b, c, d, e = x.unbind(0)
    return a, e


class ReturnsParam(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 4))
        self.register_buffer("b", torch.randn(4))

    def forward(self, x):
        return self.w, self.b, x * self.w


@mod(C, inputs=(T(3, 4),), alias=True)
def module_returns_its_parameter_and_buffer():
    return ReturnsParam()


@prog(C, inputs=(T(1, 4),), alias=True)
def expand_of_input_returned(x):
    return x.expand(3, 4), x.T, x.mT


@prog(C, inputs=(Fn(lambda g: torch.randn(1, 4, generator=g).expand(3, 4), "expanded"),), alias=True)
def inplace_on_expanded_input_raises(x):
    x.add_(1)
    return x.sum()


@prog(C, inputs=(T(3, 4),), alias=True)
def inplace_then_return_view(x):
    x.mul_(2)
    return x[0]


@prog(C, inputs=(Fn(lambda g: torch.randn(5, 4, generator=g)[1:4], "offset view"),), alias=True)
def inplace_on_offset_view_input(x):
    x.sub_(1)
    return x * 2
