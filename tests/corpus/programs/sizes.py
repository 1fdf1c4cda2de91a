"""0-size and 1-size tensors: empty dims through pointwise, reductions
(sum of nothing, max of nothing raises), matmul with an empty inner dim,
cat with empties, broadcasting against size-1 dims, 1-element
tensors converted to Python numbers."""
import torch
import torch.nn.functional as F

from ..base import T, call, prog

C = "sizes"


@prog(C, inputs=(T(0, 4),))
def empty_pointwise(x):
    return x * 2 + 1, x.exp()


@prog(C, inputs=(T(0, 4),))
def empty_sum_mean(x):
    return x.sum(0), x.sum(), x.mean(0), x.prod(0)


@prog(C, inputs=(T(0, 4),))
def empty_max_raises(x):
    return x.max(0)


@prog(C, inputs=(T(3, 0), T(0, 5)))
def matmul_empty_inner(a, b):
    return a @ b


@prog(C, inputs=(T(3, 4), T(0, 4)))
def cat_with_empty(a, b):
    return torch.cat([a, b, a], 0)


@prog(C, inputs=(T(1, 4), T(3, 1)))
def size_one_broadcast(a, b):
    return a + b, (a * b).sum(0)


@prog(C, inputs=(T(1,),))
def one_element_to_python(x):
    return x * 2, x.shape, x.squeeze(), x.view(())


@prog(C, inputs=(T(1, 1, 1),))
def all_size_one(x):
    return x.squeeze(), x.expand(2, 3, 4), x.sum(), x.flatten()


@prog(C, inputs=(T(0, 3),))
def softmax_empty(x):
    return F.softmax(x, -1), F.layer_norm(x, (3,))


@prog(C, inputs=(T(5, 4),), steps=[call(), call(T(0, 4)), call(T(1, 4)), call(T(5, 4))])
def batch_of_zero_then_one(x):
    return F.linear(x, torch.ones(2, 4)).relu()


@prog(C, inputs=(T(4,),))
def empty_slice(x):
    return x[2:2] * 3, x[4:], x[:0].sum()


@prog(C, inputs=(T(0,),))
def empty_argmax_raises(x):
    return x.argmax()


@prog(C, inputs=(T(2, 0, 3),))
def empty_middle_dim_reshape(x):
    return x.reshape(0, 3), x.permute(2, 0, 1).shape, x.sum(1)


@prog(C, inputs=(T(1, 8),))
def size_one_std(x):
    return x.std(0), x.var(1)
