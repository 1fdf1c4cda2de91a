"""functools.partial: called inside, wrapping torch ops, as a module's
activation, passed as an argument, nested partials, partial of a method,
functools.wraps/lru_cache/reduce."""
import functools
import operator

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..base import Fn, T, call, do, mod, prog

C = "partials"

leaky = functools.partial(F.leaky_relu, negative_slope=0.3)
sum_last = functools.partial(torch.sum, dim=-1)
ACT = functools.partial(F.gelu, approximate="tanh")


def affine(x, a, b=0.0):
    return x * a + b


@prog(C, inputs=(T(3, 4),))
def partial_of_torch_op(x):
    return leaky(x) + sum_last(x, keepdim=True)


@prog(C, inputs=(T(3, 4),))
def partial_made_inside(x):
    f = functools.partial(affine, a=2.0)
    return f(x, b=1.0)


@prog(C, inputs=(T(3, 4),))
def partial_positional(x):
    f = functools.partial(affine, x)
    return f(3.0), f(0.5, 2.0)


@prog(C, inputs=(T(3, 4),))
def nested_partial(x):
    f = functools.partial(functools.partial(affine, a=2.0), b=-1.0)
    return f(x)


@prog(C, inputs=(T(3, 4),))
def partial_attributes(x):
    return x * len(leaky.keywords), leaky.func is F.leaky_relu


@prog(C, inputs=(T(3, 4), Fn(lambda g: functools.partial(torch.clamp, min=-0.5), "partial(clamp)")),
      steps=[call(), call(T(3, 4), Fn(lambda g: functools.partial(torch.clamp, max=0.1), "partial(clamp max)"))])
def partial_as_argument(x, f):
    return f(x)


class ActModule(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = act

    def forward(self, x):
        return self.act(self.fc(x))


@mod(C, inputs=(T(3, 4),))
def partial_as_module_activation():
    return ActModule(ACT)


@mod(C, inputs=(T(3, 4),), steps=[call(), call()])
def partial_swapped_on_module():
    return ActModule(functools.partial(F.softmax, dim=-1))


def _swap(ctx):
    ctx.subject.act = functools.partial(F.softmax, dim=0)


@mod(C, inputs=(T(3, 4),), steps=[call(), do(_swap), call()])
def partial_replaced_between_calls():
    return ActModule(functools.partial(F.softmax, dim=-1))


@prog(C, inputs=(T(3, 4),))
def reduce_operator(x):
    return functools.reduce(operator.add, [x, x * 2, x * 3]), functools.reduce(operator.mul, [1, 2, 3])


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        return fn(*a, **k) + 1
    return wrapper


@logged
def decorated(t):
    return t * 2


@prog(C, inputs=(T(3, 4),))
def wraps_decorator(x):
    return decorated(x), decorated.__name__


@functools.lru_cache(maxsize=None)
def cached_factor(n):
    return n * 1.5


@prog(C, inputs=(T(3, 4),))
def lru_cache_helper(x):
    return x * cached_factor(2)


class Scaler:
    def __init__(self, k):
        self.k = k

    def apply(self, t, bias=0.0):
        return t * self.k + bias


SC = Scaler(3.0)


@prog(C, inputs=(T(3, 4),))
def partial_of_bound_method(x):
    f = functools.partial(SC.apply, bias=1.0)
    return f(x)


@prog(C, inputs=(T(3, 4),))
def partialmethod_on_class(x):
    class K:
        def scale(self, t, k):
            return t * k
        double = functools.partialmethod(scale, k=2.0)
    return K().double(x)


@prog(C, inputs=(T(3, 4),))
def operator_itemgetter_attrgetter(x):
    get = operator.itemgetter(0, 2)
    shape = operator.attrgetter("shape")
    a, b = get([x, x * 2, x * 3])
    return a + b, shape(x)


@prog(C, inputs=(T(3, 4),))
def operator_methodcaller(x):
    return operator.methodcaller("sum", 1)(x), operator.neg(x), operator.matmul(x, x.t())
