"""Python attributes set on tensors (inputs and intermediates): hasattr
checks, attribute values that change between calls, attributes set by the
program on its inputs (the caller sees them)."""
import torch

from ..base import Fn, T, call, prog

C = "tensor_attrs"


def tagged(tag):
    def make(g):
        t = torch.randn(3, 4, generator=g)
        t.tag = tag
        return t
    return Fn(make, f"T(3,4).tag={tag!r}")


@prog(C, inputs=(tagged(2.0),), steps=[call(), call(tagged(5.0)), call(T(3, 4))])
def hasattr_tag(x):
    if hasattr(x, "tag"):
        return x * x.tag
    return x


@prog(C, inputs=(tagged("double"),), steps=[call(), call(tagged("neg")), call(tagged("double"))])
def string_tag_dispatch(x):
    if x.tag == "double":
        return x * 2
    return -x


@prog(C, inputs=(T(3, 4),), steps=[call(), call(tagged(1.0))])
def getattr_default(x):
    return x + getattr(x, "tag", 0.5)


@prog(C, inputs=(T(3, 4),))
def set_attr_on_input(x):
    x.seen = True
    return x * 2


@prog(C, inputs=(T(3, 4),))
def set_attr_on_intermediate(x):
    y = x + 1
    y.note = "mid"
    return y, y.note


@prog(C, inputs=(tagged(3.0),))
def attr_updated_on_input(x):
    x.tag = x.tag + 1
    return x * x.tag


@prog(C, inputs=(T(3, 4),))
def name_and_requires_grad(x):
    return x * 2 if not x.requires_grad else x, x.is_leaf, x.dim(), x.ndim


@prog(C, inputs=(T(3, 4),))
def tensor_metadata_methods(x):
    return x.numel() * x, x.size(1), x.shape[-1], x.element_size(), x.is_contiguous(), x.dtype, x.device


@prog(C, inputs=(tagged([1.0, 2.0]),), steps=[call(), call(tagged([3.0]))])
def list_attr_read(x):
    return x * sum(x.tag) + len(x.tag)


@prog(C, inputs=(T(3, 4),), steps=[call(), call(tagged(0.0))])
def delattr_after_set(x):
    x.tmp = 3.0
    y = x * x.tmp
    del x.tmp
    return y, hasattr(x, "tmp")
