"""Python language features around tensor code: context managers (custom
classes, contextlib, torch.no_grad as decorator, autocast), nonlocal in
functions made inside, closures returned, *args/**kwargs forwarding,
unpacking, del, None results, __getattr__ fallbacks, try/else, while with
Python counters, deep recursion, copy of tensors, shape unpacking."""
import contextlib
import copy

import torch

from ..base import T, prog

C = "language"

EVENTS = []


class Recorder:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        EVENTS.append("enter " + self.name)
        return self

    def __exit__(self, *exc):
        EVENTS.append("exit " + self.name)
        return False


@contextlib.contextmanager
def scaled(k):
    EVENTS.append(f"open {k}")
    yield k
    EVENTS.append(f"close {k}")


@torch.no_grad()
def no_grad_helper(t):
    return t * 2


class Fallback:
    def __init__(self):
        self.known = 2.0

    def __getattr__(self, name):
        return 10.0


FB = Fallback()


@prog(C, inputs=(T(3, 4),), state=("EVENTS",))
def custom_context_manager(x):
    with Recorder("a"):
        y = x * 2
    return y + 1


@prog(C, inputs=(T(3, 4),), state=("EVENTS",))
def contextlib_contextmanager(x):
    with scaled(3.0) as k:
        y = x * k
    return y


@prog(C, inputs=(T(3, 4),))
def pure_context_manager_no_side_effect(x):
    with contextlib.nullcontext(5) as k:
        return x * k


@prog(C, inputs=(T(3, 4),))
def no_grad_decorated_helper(x):
    return no_grad_helper(x) + 1


@prog(C, inputs=(T(3, 4),))
def autocast_block(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ x.t()
    return y.float() + 1


@prog(C, inputs=(T(3, 4),))
def is_grad_enabled_branch(x):
    if torch.is_grad_enabled():
        return x * 2
    return x * 3


@prog(C, inputs=(T(3, 4),))
def nonlocal_in_inner_function(x):
    count = 0

    def bump(t):
        nonlocal count
        count += 1
        return t * count
    a = bump(x)
    b = bump(x)
    return a + b, count


@prog(C, inputs=(T(3, 4),))
def returns_closure(x):
    m = x.mean()

    def centre(t):
        return t - m
    return centre


@prog(C, inputs=(T(3, 4),))
def returns_none(x):
    x * 2


@prog(C, inputs=(T(3, 4),))
def kwargs_unpacking_call(x):
    opts = {"dim": 1, "keepdim": True}
    return x.sum(**opts), torch.softmax(x, **{"dim": 0})


def forward_args(fn, *args, **kwargs):
    return fn(*args, **kwargs)


@prog(C, inputs=(T(3, 4), T(3, 4)))
def star_args_forwarding(a, b):
    return forward_args(torch.add, a, b, alpha=2), forward_args(lambda *t: sum(t), a, b, a)


@prog(C, inputs=(T(2, 3, 4),))
def shape_unpacking(x):
    b, n, d = x.shape
    *lead, last = x.size()
    return x.reshape(b * n, d), lead, last


@prog(C, inputs=(T(3, 4),))
def del_local(x):
    y = x * 2
    z = y + 1
    del y
    return z


@prog(C, inputs=(T(3, 4),))
def getattr_fallback_object(x):
    return x * FB.known + FB.missing


@prog(C, inputs=(T(3, 4),))
def try_else_finally(x):
    out = [x]
    try:
        y = x + 1
    except ValueError:
        y = x - 1
    else:
        y = y * 10
    finally:
        out.append(x * 0 + 7)
    return y, out


@prog(C, inputs=(T(3, 4),))
def while_with_python_counter(x):
    i = 0
    while i < 4:
        x = x * 1.5
        i += 1
    return x, i


def deep(t, n):
    return t if n == 0 else deep(t + 1, n - 1)


@prog(C, inputs=(T(3, 4),))
def deep_recursion(x):
    return deep(x, 60)


@prog(C, inputs=(T(3, 4),))
def copy_of_tensor(x):
    y = copy.copy(x)
    z = copy.deepcopy(x)
    return y * 2, z + 1


@prog(C, inputs=(T(3, 4),))
def conditional_expression_chain(x):
    n = x.shape[0]
    k = 1 if n < 2 else 2 if n < 4 else 3
    return x * k


@prog(C, inputs=(T(3, 4),))
def global_statement_read_only(x):
    global EVENTS
    return x * (len(EVENTS) >= 0)


@prog(C, inputs=(T(3, 4),))
def lambda_default_and_sorted_key(x):
    rows = [x[i] for i in range(3)]
    order = sorted(range(3), key=lambda i: -i)
    return [rows[i] for i in order]


@prog(C, inputs=(T(3, 4),))
def string_building_loop(x):
    name = ""
    for i in range(3):
        name += str(i)
    return x * int(name), name


@prog(C, inputs=(T(3, 4),))
def assert_passes(x):
    assert x.dim() == 2, "2-d"
    assert isinstance(x, torch.Tensor)
    return x + 1


@prog(C, inputs=(T(3, 4),))
def bytes_and_tuple_hash(x):
    key = hash((1, "a"))
    return x * (key == hash((1, "a")))


@prog(C, inputs=(T(3, 4),))
def set_comprehension_and_frozenset(x):
    s = {i % 3 for i in range(10)}
    return x * len(s), frozenset(s) == frozenset({0, 1, 2})


@prog(C, inputs=(T(3, 4),))
def nested_functions_three_levels(x):
    def a(t):
        def b(u):
            def c(v):
                return v * 2
            return c(u) + 1
        return b(t) - 1
    return a(x)


@prog(C, inputs=(T(3, 4),))
def inplace_on_local_in_loop(x):
    acc = torch.zeros(3, 4)
    for i in range(3):
        acc.add_(x * i)
    acc.mul_(0.5)
    return acc


@prog(C, inputs=(T(3, 4),))
def tensor_setitem_on_local(x):
    y = x.clone()
    y[0] = 0.0
    y[:, 1] = y[:, 2] * 2
    y[1:, ::2] += 1
    return y


@prog(C, inputs=(T(3, 4),))
def torch_no_grad_as_context_in_helper(x):
    with torch.no_grad():
        y = x.exp()
    return y * 2
