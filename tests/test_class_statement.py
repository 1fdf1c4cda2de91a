"""Class statements inside compiled code (LOAD_BUILD_CLASS): the class is
built once, at trace time, from the body's code when its bases are plain
and what its functions close over is constant; anything else runs eagerly.
torch.masked's reductions define such a class on every call."""
import pytest
import torch

import smelt


def whole(fn, *args):
    info = smelt.explain(smelt.compile(fn), *args)
    return info["compiles"] and not info["host_calls"]


def test_local_class_instances_and_methods():
    def f(x):
        scale = 3.0

        def helper(t):
            return t * scale

        class Box:
            k = 2

            def __init__(self, t):
                self.t = t

            def value(self):
                return helper(self.t) + self.k

        return Box(x).value()

    x = torch.randn(5, 3)
    c = smelt.compile(f)
    for _ in range(2):
        torch.testing.assert_close(c(x), f(x))
    assert whole(f, x)


def test_returned_class_is_new_per_call_as_in_eager():
    def f(x):
        class Local:
            pass
        return x + 1, Local

    c = smelt.compile(f)
    x = torch.randn(3)
    (a, k1), (b, k2) = c(x), c(x)
    torch.testing.assert_close(a, x + 1)
    assert k1 is not k2 and k1.__name__ == "Local"


def test_init_subclass_side_effect_runs_every_call():
    seen = []

    class Base:
        def __init_subclass__(cls):
            seen.append(cls.__name__)

    def f(x):
        class Child(Base):
            pass
        return x * 2

    c = smelt.compile(f)
    x = torch.randn(4)
    for _ in range(3):
        torch.testing.assert_close(c(x), x * 2)
    assert seen == ["Child"] * 3


def test_metaclass_keyword_runs_eagerly():
    made = []

    class Meta(type):
        def __new__(mcls, name, bases, ns):
            made.append(name)
            return super().__new__(mcls, name, bases, ns)

    def f(x):
        class K(metaclass=Meta):
            pass
        return x - 1

    c = smelt.compile(f)
    x = torch.randn(2)
    torch.testing.assert_close(c(x), x - 1)
    torch.testing.assert_close(c(x), x - 1)
    assert made == ["K", "K"]


def test_closed_over_variable_reassigned_after_the_class():
    def f(x):
        w = 2.0

        class K:
            def get(self):
                return w

        w = 5.0   # the method must see 5.0, as in eager
        return x * K().get()

    c = smelt.compile(f)
    x = torch.randn(3)
    for _ in range(2):
        torch.testing.assert_close(c(x), x * 5.0)


def test_class_body_over_a_tensor_runs_eagerly():
    def f(x):
        t = x.sum()

        class K:
            def get(self):
                return t

        return K().get() + 1

    c = smelt.compile(f)
    x = torch.randn(3)
    for _ in range(2):
        torch.testing.assert_close(c(x), x.sum() + 1)


@pytest.mark.parametrize("op,kw", [(torch.masked.sum, {"dim": 1}), (torch.masked.amax, {"dim": 0}),
                                   (torch.masked.softmax, {"dim": 1}), (torch.masked.var, {"dim": 1}),
                                   (torch.masked.logsumexp, {"dim": 0}), (torch.masked.normalize, {"ord": 2.0, "dim": 1})])
def test_masked_ops_native(op, kw):
    x = torch.randn(6, 7)
    m = torch.rand(6, 7) > 0.4
    m[0] = False   # a row with nothing in it
    fn = lambda x, m: op(x, mask=m, **kw)
    c = smelt.compile(fn)
    for _ in range(2):
        torch.testing.assert_close(c(x, m), fn(x, m), equal_nan=True)
    assert whole(fn, x, m)
