"""out= arguments: the result written into a given tensor (an input, a
tensor made inside), the out tensor returned, resized, of another dtype."""
import torch

from ..base import I, T, prog

C = "out_args"


@prog(C, inputs=(T(3, 4), T(3, 4), T(3, 4)), alias=True)
def add_out_input(a, b, out):
    torch.add(a, b, out=out)
    return out


@prog(C, inputs=(T(3, 4), T(3, 4)), alias=True)
def out_made_inside(a, b):
    out = torch.empty(3, 4)
    torch.mul(a, b, out=out)
    return out * 2


@prog(C, inputs=(T(3, 4), T(4, 5), T(3, 5)), alias=True)
def matmul_out(a, b, out):
    r = torch.matmul(a, b, out=out)
    return r, r is out


@prog(C, inputs=(T(3, 4), T(0)), alias=True)
def out_resized(a, out):
    torch.exp(a, out=out)
    return out.shape, out


@prog(C, inputs=(T(3, 4), T(3, 4, dtype=torch.float64)), alias=True)
def out_other_dtype(a, out):
    torch.sin(a, out=out)
    return out


@prog(C, inputs=(T(3, 4), I(3, 4)), alias=True)
def out_int_dtype_error(a, out):
    torch.sin(a, out=out)
    return out


@prog(C, inputs=(T(5, 4), T(4)), alias=True)
def sum_out(a, out):
    torch.sum(a, 0, out=out)
    return out + 1


@prog(C, inputs=(T(3, 4), T(3, 4), T(3, 4)), alias=True)
def cat_out_views(a, b, out):
    torch.cat([a[:, :2], b[:, 2:]], 1, out=out)
    return out.sum()


@prog(C, inputs=(T(3, 4),), alias=True)
def out_is_input_itself(a):
    torch.neg(a, out=a)
    return a


@prog(C, inputs=(T(6,), T(6,)), alias=True)
def clamp_out(a, out):
    return torch.clamp(a, -0.5, 0.5, out=out)
