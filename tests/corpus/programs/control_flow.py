"""Control flow: data-dependent branches and loops (on tensor values),
branches on shapes, dtypes and None, while loops, early returns, loops
over tensor dims, torch.cond-like patterns, recursion."""
import torch

from ..base import I, T, call, prog

C = "control_flow"


@prog(C, inputs=(T(3, 4),), steps=[call(), call(), call(), call()])
def if_on_tensor_sum(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


@prog(C, inputs=(T(3, 4),), steps=[call(), call(), call()])
def if_on_any(x):
    if (x > 2).any():
        return x.clamp(max=2)
    return x


@prog(C, inputs=(T(6,),), steps=[call(), call(), call()])
def while_on_tensor_value(x):
    n = 0
    while x.abs().max() > 0.1 and n < 20:
        x = x / 2
        n += 1
    return x, n


@prog(C, inputs=(T(3, 4),), steps=[call(), call(T(5, 4)), call(T(1, 4))])
def branch_on_shape(x):
    if x.shape[0] > 2:
        return x[:2] * 2
    return x * 3


@prog(C, inputs=(T(3, 4),), steps=[call(), call(I(3, 4)), call(T(3, 4, dtype=torch.float64))])
def branch_on_dtype(x):
    if x.dtype.is_floating_point:
        return x.exp()
    return x * 2


@prog(C, inputs=(T(3, 4), None), steps=[call(), call(T(3, 4), T(3, 4)), call(T(3, 4), None)])
def branch_on_none(x, mask):
    if mask is None:
        return x.relu()
    return x * mask


@prog(C, inputs=(T(3, 4),))
def early_return_in_loop(x):
    for i in range(5):
        x = x + i
        if i == 2:
            return x
    return -x


@prog(C, inputs=(T(4, 3),))
def loop_over_dim(x):
    acc = torch.zeros(3)
    for i in range(x.shape[0]):
        acc = acc + x[i] * (i + 1)
    return acc


@prog(C, inputs=(T(4, 3),))
def nested_loops_continue(x):
    out = []
    for i in range(3):
        for j in range(3):
            if i == j:
                continue
            out.append(x[i] * x[j])
    return torch.stack(out)


@prog(C, inputs=(T(3, 4), 3), steps=[call(), call(T(3, 4), 0)])
def recursion(x, n):
    return rec(x, n)


def rec(t, n):
    if n == 0:
        return t
    return rec(t * 0.5, n - 1) + 1


@prog(C, inputs=(T(3, 4),), steps=[call(), call(), call()])
def where_instead_of_branch(x):
    return torch.where(x.sum() > 0, x * 2, x - 1)


@prog(C, inputs=(T(3, 4),), steps=[call(), call(), call()])
def tensor_bool_in_ternary(x):
    return x * 2 if x.mean() > 0 else x * -2


@prog(C, inputs=(T(3, 4),))
def for_else(x):
    for i in range(3):
        if i > 5:
            break
    else:
        x = x + 100
    return x


@prog(C, inputs=(T(3, 4),), steps=[call(), call(), call()])
def and_or_on_tensors(x):
    y = (x.sum() > 0) and (x.max() > 1)
    return x * 2 if y else x


@prog(C, inputs=(T(3, 4),))
def match_statement(x):
    kind = ("scale", 3)
    match kind:
        case ("scale", k):
            return x * k
        case _:
            return x


@prog(C, inputs=(T(3,),), steps=[call(), call()])
def torch_cond(x):
    return torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))


@prog(C, inputs=(T(8,),), steps=[call(), call()])
def loop_count_from_tensor(x):
    n = int((x > 0).sum())
    for _ in range(n):
        x = x * 1.1
    return x
