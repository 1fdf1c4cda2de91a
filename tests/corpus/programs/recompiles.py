"""Changes between calls that need a new compile (or eager): shapes,
ranks, dtypes, contiguity, requires_grad, grad mode, default dtype,
argument kinds (tensor vs number vs None), keyword vs positional, number
of arguments; then back to the first kind (the old entry must still be
right)."""
import torch

from ..base import B, I, T, call, do, prog

C = "recompiles"


def _set_default(dtype):
    return do(lambda ctx: torch.set_default_dtype(dtype), f"default dtype {dtype}")


@prog(C, inputs=(T(3, 4),), steps=[call(), call(T(5, 4)), call(T(5, 7)), call(T(3, 4))])
def shape_changes(x):
    return x.softmax(-1) * x.shape[0]


@prog(C, inputs=(T(3, 4),), steps=[call(), call(T(2, 3, 4)), call(T(4)), call(T(3, 4))])
def rank_changes(x):
    return x.sum(-1) + x.ndim


@prog(C, inputs=(T(3, 4),), steps=[call(), call(T(3, 4, dtype=torch.float64)), call(I(3, 4)),
                                   call(B(3, 4)), call(T(3, 4, dtype=torch.bfloat16)), call(T(3, 4))])
def dtype_changes(x):
    return x * 2 + 1


@prog(C, inputs=(T(3, 4),), steps=[call(), call(T(3, 4, contiguous=False)), call(T(3, 4))])
def contiguity_changes(x):
    return x.view(-1) if x.is_contiguous() else x.reshape(-1) * 2


@prog(C, inputs=(T(3, 4),), steps=[call(), call(T(3, 4, grad=True)), call(T(3, 4))])
def requires_grad_changes(x):
    return (x * 2).sum(0)


@prog(C, inputs=(T(3, 4),), steps=[call(), call(T(3, 4, grad=True)), call(T(3, 4))])
def requires_grad_result_flag(x):
    y = x * 3
    return y, y.requires_grad


@prog(C, inputs=(T(3, 4, grad=True),), steps=[call(), call()])
def grad_input_in_grad_mode(x):
    return x.exp().sum()


@prog(C, inputs=(T(3, 4),), steps=[call(), _set_default(torch.float64), call(), _set_default(torch.float32), call()])
def default_dtype_changes(x):
    return x + torch.ones(4), torch.tensor(1.5).dtype, torch.arange(3.0).dtype


@prog(C, inputs=(T(3, 4), 2.0), steps=[call(), call(T(3, 4), T(4)), call(T(3, 4), None), call(T(3, 4), 2.0)])
def argument_kind_changes(x, k):
    if k is None:
        return x
    return x * k


@prog(C, inputs=(T(3, 4),), kwargs={"scale": 2.0},
      steps=[call(), call(T(3, 4), 5.0), call(T(3, 4), scale=2.0), call(T(3, 4))])
def keyword_vs_positional(x, scale=1.0):
    return x * scale


@prog(C, inputs=(T(3, 4),), steps=[call(), call(T(3, 4), T(3, 4)), call(T(3, 4), T(3, 4), T(3, 4)), call(T(3, 4))])
def varargs_count_changes(x, *rest):
    for r in rest:
        x = x + r
    return x, len(rest)


@prog(C, inputs=(T(3, 4),), kwargs={"a": 1.0},
      steps=[call(), call(T(3, 4), b=2.0), call(T(3, 4), a=1.0, b=3.0)])
def kwargs_keys_change(x, **kw):
    for k in sorted(kw):
        x = x * kw[k] + len(k)
    return x


@prog(C, inputs=(T(3, 4),), steps=[call(), call(T(3, 4)), call(T(30, 40)), call(T(300, 41))])
def growing_sizes(x):
    return (x @ x.t()).relu().mean(0)


@prog(C, inputs=(T(7,),), steps=[call(T(n)) for n in (7, 8, 9, 10, 11, 12, 13, 14, 15, 16)])
def many_shapes_cache_limit(x):
    return x.cumsum(0) * 2


@prog(C, inputs=(T(3, 4),), steps=[call(), call(T(0, 4)), call(T(1, 4)), call(T(3, 4))])
def zero_and_one_sizes(x):
    return x.sum(0), x.mean(1), x.max(1).values if x.shape[0] else x.sum(1)
