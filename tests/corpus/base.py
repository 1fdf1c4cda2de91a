"""The corpus's vocabulary: how a program is declared.

A program is a callable (a function, or a factory returning an nn.Module),
an input specification and a list of steps. The harness (harness.py) runs
every call step on eager and on smelt.compile of the same subject, each on
its own deep copy of the step's inputs, and compares everything a user
could observe.

    @prog("globals", inputs=(T(4, 5),), steps=[call(), do(setg("SCALE", 3.0)), call()])
    def scale_by_global(x):
        return x * SCALE

    @mod("modules", inputs=(T(2, 8),))
    def linear_relu():
        return nn.Sequential(nn.Linear(8, 8), nn.ReLU())

Input specs (built fresh for each call step from a torch.Generator seeded by
the program's name and the step number): T(...) a random tensor (never all
zeros), I(...) random integers, B(...) random booleans, Fn(f) anything f(g)
builds, lists / tuples / dicts of specs, and plain constants.
"""
import dataclasses
import math

import torch

PROGRAMS = []          # every Program, in declaration order


@dataclasses.dataclass
class Program:
    name: str                  # "<category module>.<function>"
    category: str
    build: object              # () -> the subject: a function or an nn.Module
    inputs: tuple              # argument specs
    kwargs: dict               # keyword argument specs
    steps: list                # Call / Do, in order
    state: tuple               # observable state: global names, "self.attr", "cell:name"
    alias: bool                # compare storage sharing of outputs with inputs
    tol: tuple                 # (rtol, atol) for floating results, or None
    grad: object               # grad mode for calls: True, False, "keep" (as the steps left it);
                               # default: on for functions, off for modules
    fullgraph: bool            # smelt.compile(..., fullgraph=True)
    module_globals: dict       # the defining module's globals
    is_module: bool
    note: str = ""


# ---------------------------------------------------------------- specs

class Spec:
    """An input built per call step from a generator."""

    def __init__(self, make, text):
        self.make, self.text = make, text

    def __call__(self, g):
        return self.make(g)

    def __repr__(self):
        return self.text


def _not_all_zero(t):
    if t.numel() and not t.ne(0).any():
        t.view(-1)[0] = 1
    return t


def T(*shape, dtype=torch.float32, low=None, high=None, grad=False, contiguous=True):
    """A random floating tensor: normal values, or uniform in [low, high).
    contiguous=False gives the transpose of a tensor of the reversed shape."""
    def make(g):
        s = shape if contiguous else tuple(reversed(shape))
        if low is None:
            t = torch.randn(s, generator=g, dtype=torch.float64)
        else:
            t = torch.rand(s, generator=g, dtype=torch.float64) * (high - low) + low
        t = _not_all_zero(t.to(dtype))
        if not contiguous:
            t = t.permute(*reversed(range(t.ndim)))
        return t.requires_grad_(grad) if grad else t
    return Spec(make, f"T{shape}")


def I(*shape, low=-20, high=20, dtype=torch.int64):  # noqa: E743 - short on purpose
    """Random integers in [low, high)."""
    return Spec(lambda g: _not_all_zero(torch.randint(low, high, shape, generator=g).to(dtype)), f"I{shape}")


def B(*shape):
    """Random booleans."""
    return Spec(lambda g: _not_all_zero(torch.randint(0, 2, shape, generator=g).bool()), f"B{shape}")


def Fn(make, text="Fn"):
    """Whatever make(g) builds."""
    return Spec(make, text)


def build(spec, g):
    """The value of an input spec (recursively through containers)."""
    if isinstance(spec, Spec):
        return spec(g)
    if isinstance(spec, list):
        return [build(s, g) for s in spec]
    if isinstance(spec, tuple):
        items = [build(s, g) for s in spec]
        return type(spec)(*items) if hasattr(spec, "_fields") else tuple(items)
    if isinstance(spec, dict):
        return {k: build(v, g) for k, v in spec.items()}
    return spec


# ---------------------------------------------------------------- steps

@dataclasses.dataclass
class Call:
    inputs: tuple = None       # None: the program's inputs
    kwargs: dict = None


@dataclasses.dataclass
class Do:
    act: object                # act(ctx): changes the world both sides see
    text: str = ""


def call(*inputs, **kwargs):
    """A call step; with arguments, these input specs instead of the program's."""
    return Call(inputs if inputs else None, kwargs if kwargs else None)


def do(act, text=""):
    return Do(act, text or getattr(act, "__name__", "do"))


def setg(name, value):
    """A step that rebinds the program's module global `name`."""
    def act(ctx):
        ctx.g[name] = value
    return Do(act, f"{name} = {value!r}")


def seta(obj_path, value):
    """A step that sets an attribute of the subject: seta("fc.scale", 2)."""
    def act(ctx):
        *path, last = obj_path.split(".")
        o = ctx.subject
        for p in path:
            o = getattr(o, p)
        setattr(o, last, value)
    return Do(act, f"{obj_path} = {value!r}")


TWO = [Call(), Call()]


class Ctx:
    """What a Do step sees: the subject and its module's globals."""

    def __init__(self, subject, g):
        self.subject, self.g = subject, g


# ---------------------------------------------------------------- declaring

def _register(fn, category, is_module, inputs, kwargs, steps, state, alias, tol, grad, fullgraph, note):
    g = fn.__globals__
    name = f"{g['__name__'].rsplit('.', 1)[-1]}.{fn.__name__}"
    if any(p.name == name for p in PROGRAMS):
        raise ValueError(f"corpus program {name} declared twice")
    build_ = fn if is_module else (lambda f=fn: f)
    PROGRAMS.append(Program(name, category, build_, tuple(inputs), dict(kwargs or {}),
                            list(steps or TWO), tuple(state), alias, tol,
                            (not is_module) if grad is None else grad if grad == "keep" else bool(grad), fullgraph,
                            g, is_module, note))
    return fn


def prog(category, inputs=(), kwargs=None, steps=None, state=(), alias=False, tol=None,
         grad=None, fullgraph=False, note=""):
    """Declares the decorated function as a program (it is the subject)."""
    def deco(fn):
        return _register(fn, category, False, inputs, kwargs, steps, state, alias, tol, grad, fullgraph, note)
    return deco


def mod(category, inputs=(), kwargs=None, steps=None, state=(), alias=False, tol=None,
        grad=None, fullgraph=False, note=""):
    """Declares the decorated zero-argument factory: the module it returns
    is the subject (built once; eager and compiled share it)."""
    def deco(fn):
        return _register(fn, category, True, inputs, kwargs, steps, state, alias, tol, grad, fullgraph, note)
    return deco


def close(a, b, rtol=1e-6):
    return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=rtol, abs_tol=1e-9)
