"""Reach, second round: out= on non-element-wise ops (cat, stack, matmul,
mm, bmm, addmm, reductions, cumsum, where, clamp; out an input or made
inside, returned, resized, of another dtype), Python attributes set,
updated and deleted on input tensors and parameters, random numbers drawn
after a manual seed inside the program (rand, randn, randint, *_like,
dropout, in loops), match statements, nonlocal counters, globals(), sets,
strided slice assignment, linspace/logspace, in-place updates of views of
inputs, dtype queries, missing attributes, local imports, suppressed
exceptions, autograd flags under no_grad, modules with their own __call__
or a replaced forward, TransformerEncoderLayer, cat of many tensors."""
import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..base import B, Fn, I, T, call, mod, prog, seta, setg

C = "reach2"

REACH_SCALE = 2.0
REACH_MODES = {"double": 2.0, "half": 0.5}


def tagged(shape, **attrs):
    """A random tensor carrying Python attributes."""
    def make(g):
        t = torch.randn(*shape, generator=g)
        for k, v in attrs.items():
            setattr(t, k, v)
        return t
    return Fn(make, f"T{shape}." + ",".join(f"{k}={v!r}" for k, v in attrs.items()))


# ---------------------------------------------------------------- out= on non-element-wise ops

@prog(C, inputs=(T(2, 5), T(3, 5), T(5, 5)), alias=True)
def cat_out_input(a, b, out):
    torch.cat([a, b], 0, out=out)
    return out


@prog(C, inputs=(T(3, 4), T(3, 4)), alias=True)
def stack_out_made_inside(a, b):
    out = torch.empty(2, 3, 4)
    r = torch.stack([a, b], dim=0, out=out)
    return r * 2, r is out


@prog(C, inputs=(T(3, 5), T(5, 7), T(3, 7)), alias=True)
def mm_out_returned(a, b, out):
    return torch.mm(a, b, out=out)


@prog(C, inputs=(T(2, 3, 4), T(2, 4, 5), T(2, 3, 5)), alias=True)
def bmm_out_is_out(a, b, out):
    r = torch.bmm(a, b, out=out)
    return r is out, out.sum(dim=(1, 2))


@prog(C, inputs=(T(5,), T(3, 4), T(4, 5), T(3, 5)), alias=True)
def addmm_out_beta_alpha(bias, a, b, out):
    torch.addmm(bias, a, b, beta=0.5, alpha=2.0, out=out)
    return out, out.mean()


@prog(C, inputs=(T(7,), T(7, 3)), alias=True)
def matmul_vector_out_made_inside(v, m):
    out = torch.zeros(3)
    torch.matmul(v, m, out=out)
    return out + 1


@prog(C, inputs=(T(5, 3), T(5, 1)), alias=True)
def sum_out_keepdim(a, out):
    r = torch.sum(a, dim=1, keepdim=True, out=out)
    return r, r is out


@prog(C, inputs=(T(6, 4), T(7,)), alias=True)
def mean_out_wrong_shape_resized(a, out):
    torch.mean(a, 0, out=out)
    return out.shape, out


@prog(C, inputs=(T(4, 3), T(0)), alias=True)
def matmul_out_empty_resized(a, out):
    r = torch.matmul(a, a.t(), out=out)
    return r.shape, r is out, out


@prog(C, inputs=(I(3, 5), I(5)), alias=True)
def amax_out_int(a, out):
    torch.amax(a, dim=0, out=out)
    return out, out.dtype


@prog(C, inputs=(T(3, 6), T(3, 6, dtype=torch.float64)), alias=True)
def cumsum_out_float64(a, out):
    torch.cumsum(a, dim=1, out=out)
    return out, out.dtype


@prog(C, inputs=(T(4, 3),), alias=True)
def sum_out_other_dtype_made_inside(a):
    out = torch.empty(3, dtype=torch.float64)
    torch.sum(a, 0, out=out)
    return out, out.dtype


@prog(C, inputs=(B(3, 5), T(3, 5), T(3, 5), T(3, 5)), alias=True)
def where_out_input(cond, a, b, out):
    torch.where(cond, a, b, out=out)
    return out


@prog(C, inputs=(T(9,), T(9,), T(9,)), alias=True)
def clamp_out_tensor_bounds(a, lo, out):
    hi = lo + 1.0
    return torch.clamp(a, min=lo, max=hi, out=out)


@prog(C, inputs=(T(3, 4), T(3, 4)), alias=True)
def mm_out_wrong_dtype_raises(a, b):
    out = torch.empty(3, 3, dtype=torch.float64)
    torch.mm(a, b.t(), out=out)
    return out


@prog(C, inputs=(T(2, 3), T(2, 3)), alias=True)
def cat_out_other_dtype_made_inside(a, b):
    out = torch.empty(2, 6, dtype=torch.float64)
    torch.cat((a, b), dim=-1, out=out)
    return out


# ---------------------------------------------------------------- attributes on tensors

def mark(t):
    t.count = getattr(t, "count", 0) + 1
    return t * t.count


@prog(C, inputs=(T(3, 4),))
def attr_counter_helper_called_twice(x):
    a = mark(x)
    b = mark(x)
    return a + b, x.count


@prog(C, inputs=(tagged((3, 5), count=4),), steps=[call(), call(tagged((3, 5), count=-1)), call(T(3, 5))])
def attr_counter_on_tagged_input(x):
    x.count = getattr(x, "count", 0) + 1
    return x * x.count


@prog(C, inputs=(tagged((2, 3), tmp=1.5),), steps=[call(), call(T(2, 3))])
def del_attr_then_hasattr(x):
    y = x * getattr(x, "tmp", 1.0)
    if hasattr(x, "tmp"):
        del x.tmp
    return y, hasattr(x, "tmp")


@prog(C, inputs=(Fn(lambda g: (lambda t: (t, t))(torch.randn(4, 2, generator=g)), "(t, t)"),))
def attr_set_through_one_alias(pair):
    a, b = pair
    a.tag = "seen"
    a.n = 3
    return b * b.n, b.tag, a is b


@prog(C, inputs=(T(3, 4),))
def attr_holds_tensor_and_string(x):
    x.scale = x.abs().amax()
    x.label = "normed"
    return x / x.scale, x.label


@prog(C, inputs=(T(5,),))
def setattr_getattr_delattr_builtins(x):
    for name, v in (("a", 1.0), ("b", 2.0), ("c", 3.0)):
        setattr(x, name, v)
    total = x * (getattr(x, "a") + getattr(x, "c"))
    delattr(x, "b")
    return total, hasattr(x, "b"), sorted(vars(x))


@prog(C, inputs=(T(4, 4),))
def missing_attr_try_except(x):
    try:
        k = x.not_there
    except AttributeError:
        k = 0.25
    x.not_there = k * 4
    return x * k, x.not_there


class ParamCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.fc.weight.count = 0

    def forward(self, x):
        self.fc.weight.count = self.fc.weight.count + 1
        return self.fc(x) * self.fc.weight.count


@mod(C, inputs=(T(2, 4),), steps=[call(), call(), call()], state=("self.fc.weight.count",))
def parameter_attr_counter():
    return ParamCounter()


class ParamTag(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.linspace(-1.0, 1.0, 6).reshape(2, 3))
        self.w.note = "init"

    def forward(self, x):
        old = self.w.note
        self.w.note = f"rows={x.shape[0]}"
        return x @ self.w, old


@mod(C, inputs=(T(5, 2),), steps=[call(), call(T(3, 2)), call()], state=("self.w.note",))
def parameter_attr_string_updated():
    return ParamTag()


# ---------------------------------------------------------------- random numbers, seeded inside

@prog(C, inputs=(T(3, 4),))
def rand_after_manual_seed(x):
    torch.manual_seed(0)
    return x + torch.rand(3, 4)


@prog(C, inputs=(T(2, 5, dtype=torch.float64),))
def randn_float64_shape_of_input(x):
    torch.manual_seed(123)
    n = torch.randn(x.shape, dtype=torch.float64)
    return x * n, n.dtype


@prog(C, inputs=(T(3, 4),))
def randint_both_forms(x):
    torch.manual_seed(7)
    a = torch.randint(10, (3, 4))
    b = torch.randint(-5, 5, (3, 4), dtype=torch.int32)
    return x + a, b, b.dtype


@prog(C, inputs=(T(4, 3), I(4, 3)))
def like_variants(x, k):
    torch.manual_seed(11)
    u = torch.rand_like(x)
    n = torch.randn_like(x, dtype=torch.float64)
    r1 = torch.randint_like(k, 10)
    r2 = torch.randint_like(x, 2, 8)
    return u + x, n, r1, r2


@prog(C, inputs=(T(6, 8),))
def dropout_training_true(x):
    torch.manual_seed(3)
    y = F.dropout(x, p=0.3, training=True)
    return y, (y == 0).sum()


@prog(C, inputs=(T(3, 5),))
def seeded_draws_in_loop(x):
    acc = torch.zeros_like(x)
    for i in range(3):
        torch.manual_seed(100 + i)
        acc = acc + torch.randn(3, 5) * (i + 1)
        acc = F.dropout(acc, 0.2, training=True)
    return acc + x


@prog(C, inputs=(T(2, 7),))
def seed_once_draw_many(x):
    torch.manual_seed(42)
    outs = []
    for _ in range(4):
        outs.append(x * torch.rand(7) + torch.randint(0, 3, (2, 7)))
    return torch.stack(outs)


class NoisyBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        torch.manual_seed(9)
        return self.drop(self.fc(x)) + torch.randn(x.shape[0], 6) * 0.1


@mod(C, inputs=(T(4, 6),))
def dropout_module_train_seeded():
    return NoisyBlock().train()


# ---------------------------------------------------------------- Python features

@prog(C, inputs=(T(3, 4), 1), steps=[call(), call(T(3, 4), 2), call(T(3, 4), 7)])
def match_int(x, n):
    match n:
        case 1:
            return x + 1
        case 2:
            return x * 2
        case _:
            return x - n


@prog(C, inputs=(T(2, 3, 4),), steps=[call(), call(T(6, 4)), call(T(5,))])
def match_shape_tuple(x):
    match tuple(x.shape):
        case (b, n, d):
            return x.sum(0) * b
        case (n, d):
            return x.t() * d
        case _:
            return x.cumsum(0)


@prog(C, inputs=(T(3, 4), "relu"), steps=[call(), call(T(3, 4), "tanh"), call(T(3, 4), "other")])
def match_string(x, how):
    match how:
        case "relu" | "gelu":
            return F.relu(x)
        case "tanh":
            return torch.tanh(x)
        case other:
            return x * len(other)


class Circle:
    def __init__(self, r):
        self.r = r


class Box:
    __match_args__ = ("w", "h")

    def __init__(self, w, h):
        self.w, self.h = w, h


@prog(C, inputs=(T(3, 4),))
def match_class_patterns(x):
    total = x * 0
    for shape in (Circle(2.0), Box(3.0, 0.5), Box(1.0, 1.0)):
        match shape:
            case Circle(r=r):
                total = total + x * r
            case Box(w, h) if w == h:
                total = total - x
            case Box(w, h):
                total = total + x * (w * h)
    return total


@prog(C, inputs=(T(4, 3),))
def nonlocal_counter_closure(x):
    calls = 0

    def step(t):
        nonlocal calls
        calls += 1
        return t.sin() + calls

    y = x
    for _ in range(3):
        y = step(y)
    return y, calls


@prog(C, inputs=(T(3, 4),), steps=[call(), setg("REACH_SCALE", -1.5), call()])
def globals_read(x):
    g = globals()
    return x * g["REACH_SCALE"] + len(g.get("REACH_MODES", {}))


@prog(C, inputs=(T(3, 4), "half"), steps=[call(), call(T(3, 4), "double")])
def globals_dict_lookup(x, mode):
    return x * globals()["REACH_MODES"][mode]


@prog(C, inputs=(T(5, 3),))
def set_returned(x):
    dims = {x.dim(), x.shape[0], x.shape[1]}
    names = {"a", "b"} | {"c"}
    return x * len(dims), dims, names


@prog(C, inputs=(T(7, 4),))
def slice_assign_step(x):
    y = x.clone()
    y[::2] = 0
    y[1::3, :] = torch.arange(4.0)
    return y


@prog(C, inputs=(T(9, 5), T(5,)))
def slice_assign_step_columns(x, v):
    y = x * 2
    y[1::3, :] = v
    y[:, ::2] = -1.0
    z = torch.zeros(11)
    z[2:9:3] = 5.0
    return y, z


@prog(C, inputs=(T(5,),))
def linspace_logspace_kwargs(x):
    a = torch.linspace(start=-1.0, end=1.0, steps=5)
    b = torch.logspace(start=0, end=2, steps=5, base=2.0, dtype=torch.float64)
    c = torch.linspace(0, 1, 5, dtype=torch.float64)
    return x * a, b, c + b


@prog(C, inputs=(T(4, 3),), alias=True)
def inplace_on_row_view_of_input(x):
    x[0].mul_(2)
    return x.sum()


@prog(C, inputs=(T(3, 5),), alias=True)
def inplace_on_column_slice_of_input(x):
    x[:, 1:].add_(1)
    return x


@prog(C, inputs=(T(2, 4),), alias=True)
def inplace_zero_on_flat_view(x):
    x.view(-1)[:3].zero_()
    return x * 2


@prog(C, inputs=(T(3, 4), I(3, 4, dtype=torch.int32)))
def dtype_queries(x, k):
    rt = torch.result_type(x, k)
    pt = torch.promote_types(torch.int32, torch.float16)
    ok = torch.can_cast(torch.float32, torch.int32), torch.can_cast(torch.int32, torch.float64)
    return (x + k).to(rt), rt, pt, ok, torch.result_type(k, 2.5)


@prog(C, inputs=(T(3, 4),))
def import_math_inside(x):
    import math
    return x * math.pi + math.sqrt(2.0), math.floor(x.shape[1] / 3)


@prog(C, inputs=(T(3, 4),))
def contextlib_suppress_keyerror(x):
    d = {"a": 2.0}
    y = x
    with contextlib.suppress(KeyError):
        y = y * d["a"]
        y = y * d["missing"]
    return y


class Swallow:
    def __init__(self):
        self.caught = None

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        self.caught = None if et is None else et.__name__
        return et is not None and issubclass(et, ValueError)


@prog(C, inputs=(T(3, 4),))
def user_cm_swallows_exception(x):
    cm = Swallow()
    y = x + 1
    with cm:
        y = y * 3
        raise ValueError("swallowed")
    return y, cm.caught


@prog(C, inputs=(T(3, 4, grad=True),))
def autograd_flags_under_no_grad(x):
    with torch.no_grad():
        y = x * 2
        flags = (x.requires_grad, x.is_leaf, x.grad_fn is None, y.requires_grad, y.grad_fn is None)
    z = x * 3
    return y, flags, z.requires_grad, z.is_leaf, z.grad_fn is None


@prog(C, inputs=(T(3, 4),))
def layout_flags_branch(x):
    y = x * 2
    if y.is_nested or x.is_sparse:
        return y * 100
    if x.is_meta or x.is_quantized:
        return -y
    return y + 1


# ---------------------------------------------------------------- modules

class CustomCall(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 5)

    def forward(self, x):
        return self.fc(x)

    def __call__(self, x):
        return self.forward(x).relu() + 1


class UsesCustomCall(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = CustomCall()

    def forward(self, x):
        return self.inner(x) * 2


@mod(C, inputs=(T(3, 5),))
def submodule_with_own_call():
    return UsesCustomCall()


class Replaced(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.lin.forward = lambda t: t * 3

    def forward(self, x):
        return self.lin(x) + 1


@mod(C, inputs=(T(2, 4),), steps=[call(), seta("lin.forward", lambda t: t - 10), call()])
def instance_forward_replaced_by_lambda():
    return Replaced()


@mod(C, inputs=(T(2, 5, 16),), tol=(1e-4, 1e-4))
def transformer_encoder_layer_eval():
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, dropout=0.0,
                                      batch_first=True).eval()


class EncoderNormFirst(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.layer = nn.TransformerEncoderLayer(12, 3, dim_feedforward=20, dropout=0.0, activation="gelu",
                                                batch_first=True, norm_first=True)

    def forward(self, x):
        return self.layer(x).mean(dim=1)


@mod(C, inputs=(T(3, 7, 12),), tol=(1e-4, 1e-4))
def transformer_encoder_norm_first_eval():
    return EncoderNormFirst().eval()


@prog(C, inputs=(T(2, 3),))
def cat_of_fourteen(x):
    parts = [x * i for i in range(14)]
    return torch.cat(parts, dim=1)


@prog(C, inputs=([T(2, 3) for _ in range(13)],))
def cat_of_thirteen_inputs(xs):
    y = torch.cat(xs, 0)
    return y.sum(0), y.shape
