"""Python builtins and language features around tensors: isinstance,
callable, type(), getattr/setattr on plain objects, sorted/reversed,
min/max over lists, enumerate/zip with start, string methods and
f-strings, slicing objects, walrus, comprehension scoping, global
functions stored in lists, classes instantiated inside, class methods,
__call__ objects, properties, inheritance."""
import math
import operator

import torch

from ..base import T, prog

C = "builtins"


class Affine:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __call__(self, t):
        return t * self.a + self.b


class WithProperty:
    def __init__(self, k):
        self._k = k

    @property
    def k(self):
        return self._k * 2


class Shape:
    def __init__(self, t):
        self.t = t

    def __len__(self):
        return self.t.shape[0]

    def __getitem__(self, i):
        return self.t[i]

    def __iter__(self):
        return iter([self.t[0], self.t[-1]])

    def __contains__(self, v):
        return v == "yes"

    def __bool__(self):
        return False


AFF = Affine(2.0, 1.0)


@prog(C, inputs=(T(3, 4),))
def isinstance_checks(x):
    return x * 2 if isinstance(x, torch.Tensor) and not isinstance(x, (list, int)) else x


@prog(C, inputs=(T(3, 4),))
def callable_object(x):
    return AFF(x)


@prog(C, inputs=(T(3, 4),))
def object_created_inside(x):
    f = Affine(3.0, -1.0)
    return f(x), f.a


@prog(C, inputs=(T(3, 4),))
def property_on_object(x):
    return x * WithProperty(1.5).k


@prog(C, inputs=(T(3, 4),))
def dunder_len_getitem(x):
    s = Shape(x)
    return s[1] * len(s)


@prog(C, inputs=(T(3, 4),))
def dunder_iter(x):
    return [t * 2 for t in Shape(x)]


@prog(C, inputs=(T(3, 4),))
def dunder_contains(x):
    return x * ("yes" in Shape(x)) + ("no" in Shape(x))


@prog(C, inputs=(T(3, 4),))
def dunder_bool(x):
    return x if Shape(x) else -x


@prog(C, inputs=(T(3, 4),))
def type_name_and_callable(x):
    return x * len(type(x).__name__), callable(torch.sin), type(x) is torch.Tensor


@prog(C, inputs=(T(3, 4),))
def getattr_setattr_plain_object(x):
    o = Affine(1.0, 0.0)
    setattr(o, "a", 4.0)
    return getattr(o, "a") * x, hasattr(o, "zz")


@prog(C, inputs=(T(3, 4),))
def sorted_reversed_min_max(x):
    ks = sorted([3, 1, 2], reverse=True)
    return x * ks[0] + min(ks) - max(ks), list(reversed(ks))


@prog(C, inputs=(T(4, 3),))
def max_over_tensor_list(x):
    return max([x[0].sum(), x[1].sum()], key=lambda t: 0), min(x.shape)


@prog(C, inputs=(T(3, 4),))
def enumerate_start_zip_strict(x):
    return [x[i - 5] * i for i, _ in enumerate(range(3), start=5)]


@prog(C, inputs=(T(3, 4),))
def fstring_and_str_methods(x):
    name = f"layer_{x.shape[0]}".upper().replace("_", "-")
    return x * len(name), name, "-".join(["a", "b"]), name.startswith("LAYER")


@prog(C, inputs=(T(3, 4),))
def slice_objects(x):
    s = slice(1, None)
    return x[s], x[:, slice(0, 4, 2)]


@prog(C, inputs=(T(3, 4),))
def walrus(x):
    if (n := x.shape[0]) > 2:
        return x * n
    return x


@prog(C, inputs=(T(3, 4),))
def functions_in_list(x):
    fs = [torch.sin, torch.cos, lambda t: t * 3]
    return [f(x) for f in fs]


@prog(C, inputs=(T(3, 4),))
def math_module_functions(x):
    return x * math.cos(0.5) + math.floor(2.7) + math.log2(8) + math.fsum([0.1, 0.2]), math.isclose(1.0, 1.0)


@prog(C, inputs=(T(3, 4),))
def operator_module(x):
    return operator.add(x, 1), operator.mul(x, x), operator.getitem(x, 0), operator.truediv(x, 2)


@prog(C, inputs=(T(3, 4),))
def all_any_builtins(x):
    return x * all([True, 1, "a"]) + any([0, ""]), all(d > 0 for d in x.shape)


@prog(C, inputs=(T(3, 4),))
def tuple_compare_and_in(x):
    return x * ((1, 2) < (1, 3)) + (3 in (1, 2, 3)), x.shape == (3, 4), x.shape == torch.Size([3, 4])


@prog(C, inputs=(T(3, 4),))
def chained_comparison(x):
    n = x.shape[1]
    return x * (1 < n <= 4)


@prog(C, inputs=(T(3, 4),))
def class_defined_inside(x):
    class Local:
        k = 2.0
    return x * Local.k


@prog(C, inputs=(T(3, 4),))
def int_float_str_conversions(x):
    return x * int("3") + float("0.5"), str(2) + "x", bool(0), int(3.9), int(-3.9)


@prog(C, inputs=(T(3, 4),))
def dict_get_on_kwargs_style(x):
    opts = dict(scale=2.0)
    return x * opts.get("scale", 1.0) + opts.get("shift", 0.0)


@prog(C, inputs=(T(3, 4),))
def super_in_plain_class(x):
    class A:
        def f(self, t):
            return t + 1

    class Bc(A):
        def f(self, t):
            return super().f(t) * 2
    return Bc().f(x)


@prog(C, inputs=(T(3, 4),))
def torch_size_ops(x):
    s = x.shape
    return torch.Size([s[0] * 2, s[1]]), s.numel(), list(s), s[1:], x.view(s[::-1]).shape


@prog(C, inputs=(T(3, 4),))
def string_format_percent(x):
    return "%d rows, %.1f" % (x.shape[0], 2.5), x + 1


@prog(C, inputs=(T(3, 4),))
def range_object_ops(x):
    r = range(1, 10, 3)
    return x * len(r) + r[1] + (4 in r), list(r[::-1])


@prog(C, inputs=(T(3, 4),))
def nested_function_default_from_outer(x):
    k = x.shape[0]

    def inner(t, m=k):
        return t * m
    return inner(x)
