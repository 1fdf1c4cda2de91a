"""Compiled backward (autograd/, pyext/autograd_bridge.c): regions whose
inputs require grad compile a forward and a backward plan and run as one
autograd node.

- Gradients of every op with a derivative rule against eager's (float64
  tight, float32 within rounding; broadcasting, non-contiguous inputs).
- Training loops (SGD, AdamW) of an MLP with GELU and LayerNorm and a
  cross-entropy loss: losses and parameters equal to eager's at every step,
  no recompiles across steps.
- Autograd semantics: accumulation, retain_graph, autograd.grad, hooks,
  parameters with requires_grad off, no_grad switching, double backward,
  and regions the graph cannot carry (detach, no_grad inside) run eagerly.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import smelt


def grads_of(fn, inputs, seed_grad=None):
    """(outputs, grads of inputs that require grad) for fn, eager or compiled."""
    xs = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    out = fn(*xs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    gs = seed_grad if seed_grad is not None else [torch.randn_like(o, generator=torch.Generator().manual_seed(7))
                                                   if o.is_floating_point() else None for o in outs]
    pairs = [(o, g) for o, g in zip(outs, gs) if g is not None and o.requires_grad]
    torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
    return outs, [x.grad for x in xs if x.requires_grad], gs


def compare(fn, *inputs, rtol=None, atol=None):
    cf = smelt.compile(fn)
    ref_out, ref_g, gs = grads_of(fn, inputs)
    out, g, _ = grads_of(cf, inputs, gs)
    st = cf._smelt.stats()
    assert st["backward_compiles"] == 1 and st["breaks"] == 0, st
    for a, b in zip(out, ref_out):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol, equal_nan=True)
    for a, b in zip(g, ref_g):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol, equal_nan=True)
    return cf


def rnd(*shape, dtype=torch.float32, seed=0, positive=False, grad=True):
    x = torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))
    if positive:
        x = x.abs() + 0.5
    return x.requires_grad_(grad)


UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1,
    "log": (torch.log, True), "log2": (torch.log2, True), "log10": (torch.log10, True),
    "log1p": (torch.log1p, True), "sqrt": (torch.sqrt, True), "rsqrt": (torch.rsqrt, True),
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "erf": torch.erf, "erfc": torch.erfc, "relu": torch.relu, "floor": torch.floor, "sign": torch.sign,
    "reciprocal": (torch.reciprocal, True), "atan": torch.atan, "asinh": torch.asinh,
    "acosh": (lambda x: torch.acosh(x + 1), True), "sinh": torch.sinh, "cosh": torch.cosh,
    "asin": lambda x: torch.asin(x * 0.3), "acos": lambda x: torch.acos(x * 0.3),
    "atanh": lambda x: torch.atanh(x * 0.3),
    "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "softplus": F.softplus, "mish": F.mish, "clamp": lambda x: x.clamp(-0.5, 0.7),
    "relu6": F.relu6, "leaky_relu": F.leaky_relu, "elu": F.elu, "hardtanh": F.hardtanh,
    "ndtr": torch.special.ndtr, "square": torch.square, "pow3": lambda x: x ** 3,
    "pow_half": (lambda x: x ** 0.5, True), "cast_roundtrip": lambda x: x.double().float() * 2,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_gradients(name, dtype):
    fn, positive = UNARY[name] if isinstance(UNARY[name], tuple) else (UNARY[name], False)
    x = rnd(37, 11, dtype=dtype, positive=positive)
    tol = {} if dtype == torch.float64 else dict(rtol=2e-5, atol=2e-6)
    compare(lambda t: fn(t) * 1.5, x, **tol)


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "pow": lambda a, b: torch.pow(a.abs() + 0.5, b), "maximum": torch.maximum, "minimum": torch.minimum,
    "atan2": torch.atan2, "fmod": lambda a, b: torch.fmod(a, b.abs() + 0.5),
    "remainder": lambda a, b: torch.remainder(a, b.abs() + 0.5),
    "where": lambda a, b: torch.where(a > b, a * 2, b - 1),
    "hypot-ish": lambda a, b: (a * a + b * b).sqrt(),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_gradients_broadcast(name, dtype):
    fn = BINARY[name]
    a, b = rnd(13, 7, dtype=dtype, seed=1), rnd(7, dtype=dtype, seed=2)
    tol = {} if dtype == torch.float64 else dict(rtol=2e-5, atol=2e-6)
    compare(fn, a, b, **tol)
    compare(fn, rnd(7, 13, dtype=dtype, seed=3).detach().t().requires_grad_(), rnd(1, 7, dtype=dtype, seed=4), **tol)


def test_maximum_ties_split_the_gradient():
    a = torch.tensor([1.0, 2.0, 3.0, 2.0], requires_grad=True)
    b = torch.tensor([1.0, 1.0, 3.0, 5.0], requires_grad=True)
    compare(torch.maximum, a, b)
    compare(torch.minimum, a, b)


def test_only_some_inputs_require_grad():
    a, b = rnd(5, 6, seed=1), rnd(5, 6, seed=2, grad=False)
    compare(lambda x, y: (x * y).sin() + y, a, b)
    compare(lambda x, y: (x * y).sin() + y, a.detach(), b.detach().requires_grad_())


REDUCTIONS = {
    "sum": lambda x: x.sum(), "sum1": lambda x: x.sum(1), "sum0k": lambda x: x.sum(0, keepdim=True),
    "mean": lambda x: x.mean(-1), "amax": lambda x: x.amax(1), "amin": lambda x: x.amin(0),
    "max_ties": lambda x: x.round().amax(1) + x.sum() * 0, "var": lambda x: x.var(1),
    "var0": lambda x: x.var(0, correction=0), "std": lambda x: x.std(1),
    "softmax": lambda x: torch.softmax(x, -1), "log_softmax": lambda x: torch.log_softmax(x, 0),
    "logsumexp": lambda x: torch.logsumexp(x, 1), "norm": lambda x: x.norm(dim=1),
    "layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reduction_gradients(name, dtype):
    x = rnd(6, 29, dtype=dtype, seed=5) * 2
    x = x.detach().requires_grad_()
    tol = {} if dtype == torch.float64 else dict(rtol=3e-5, atol=3e-6)
    compare(REDUCTIONS[name], x, **tol)


VIEWS = {
    "reshape": lambda x: x.reshape(3, -1) * 2, "t": lambda x: x.t() * torch.arange(6.0),
    "permute": lambda x: x.reshape(2, 3, 10).permute(2, 0, 1).exp(), "expand": lambda x: x[:1].expand(4, 10) * x[:4],
    "slice": lambda x: x[1:4, 2:7].tanh(), "slice_step": lambda x: x[:, ::1].sin(),
    "slice_step2": lambda x: x[:, ::2].sin() * x[:, 1::2],   # GPT-J's rotate_every_two
    "slice_step3_tail": lambda x: x[1:6:3, 2:9:4].exp(), "slice_step_one": lambda x: x[:, 3:4:5] * 2,
    "slice_step_empty": lambda x: x[:, 4:4:2].sum() + x.sin(),
    "unsqueeze": lambda x: x.unsqueeze(1).squeeze(1) ** 2, "flip": lambda x: x.flip(0) * x,
    "cat": lambda x: torch.cat([x, x.sin(), x[:2]], 0), "stack": lambda x: torch.stack([x, x * 2], 1),
    "chunk": lambda x: x.chunk(2, 1)[0] * x.chunk(2, 1)[1],
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_and_copy_gradients(name):
    compare(VIEWS[name], rnd(6, 10, dtype=torch.float64, seed=6))


@pytest.mark.parametrize("shapes", [((5, 7), (7, 3)), ((2, 5, 7), (7, 3)), ((2, 5, 7), (2, 7, 3)),
                                    ((1, 5, 7), (4, 7, 3)), ((4, 1, 5, 7), (3, 7, 2))])
def test_matmul_gradients(shapes):
    a, b = rnd(*shapes[0], dtype=torch.float64, seed=1), rnd(*shapes[1], dtype=torch.float64, seed=2)
    compare(torch.matmul, a, b)


def test_linear_and_cross_entropy_gradients():
    x, w, b = rnd(9, 13, seed=1), rnd(5, 13, seed=2), rnd(5, seed=3)
    y = torch.tensor([0, 4, 2, 1, 3, 3, 0, 1, 4])
    compare(lambda x, w, b: F.cross_entropy(F.linear(x, w, b), y), x, w, b, rtol=2e-5, atol=2e-6)
    compare(lambda x, w, b: F.nll_loss(F.log_softmax(F.linear(x, w, b), 1), y, reduction="sum"), x, w, b,
            rtol=2e-5, atol=2e-6)
    compare(lambda x: x.gather(1, torch.tensor([[0, 1, 1], [2, 2, 0]])).sum(), rnd(2, 4, seed=4))


def test_mse_and_friends():
    x, t = rnd(8, 3, seed=1), rnd(8, 3, seed=2, grad=False)
    compare(lambda a: F.mse_loss(a, t), x)
    compare(lambda a: F.l1_loss(a, t) + F.smooth_l1_loss(a, t), x)
    compare(lambda a: F.binary_cross_entropy_with_logits(a, t.sigmoid()), x)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.ln, self.l2 = torch.nn.Linear(16, 48), torch.nn.LayerNorm(48), torch.nn.Linear(48, 5)

    def forward(self, x, y):
        return F.cross_entropy(self.l2(self.ln(F.gelu(self.l1(x)))), y)


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_training_loop_matches_eager(opt):
    torch.manual_seed(0)
    ref = MLP()
    model = MLP()
    model.load_state_dict(ref.state_dict())
    make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
            "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2)}[opt]
    o_ref, o = make(ref.parameters()), make(model.parameters())
    step = smelt.compile(model)
    g = torch.Generator().manual_seed(1)
    for i in range(20):
        x, y = torch.randn(32, 16, generator=g), torch.randint(0, 5, (32,), generator=g)
        for m, opt_, fn in ((ref, o_ref, ref), (model, o, step)):
            opt_.zero_grad(set_to_none=i % 2 == 0)
            loss = fn(x, y)
            loss.backward()
            opt_.step()
            if m is ref:
                ref_loss = loss.detach()
            else:
                torch.testing.assert_close(loss.detach(), ref_loss, rtol=1e-5, atol=1e-6)
        for (n, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=n)
    st = step._smelt.stats()
    assert st["compiles"] == 1 and st["backward_compiles"] == 1 and st["breaks"] == 0, st


def test_switching_train_eval_and_no_grad_costs_one_entry_each():
    torch.manual_seed(0)
    m = MLP()
    cm = smelt.compile(m)
    x, y = torch.randn(4, 16), torch.tensor([0, 1, 2, 3])
    for _ in range(3):
        cm(x, y).backward()
        with torch.no_grad():
            out = cm(x, y)
        assert not out.requires_grad
        torch.testing.assert_close(out, m(x, y))
    st = cm._smelt.stats()
    assert st["compiles"] == 2 and st["backward_compiles"] == 1, st


def test_accumulation_retain_graph_and_autograd_grad():
    w = rnd(6, 4, dtype=torch.float64, seed=1)
    f = smelt.compile(lambda x, w: (x @ w).tanh().sum())
    x = torch.randn(3, 6, dtype=torch.float64)
    loss = f(x, w)
    loss.backward(retain_graph=True)
    g1 = w.grad.clone()
    loss.backward()
    torch.testing.assert_close(w.grad, 2 * g1)
    f(x, w).backward()
    torch.testing.assert_close(w.grad, 3 * g1)
    (gw,) = torch.autograd.grad(f(x, w), [w])
    torch.testing.assert_close(gw, g1)
    wr = w.detach().clone().requires_grad_()
    (x @ wr).tanh().sum().backward()
    torch.testing.assert_close(g1, wr.grad)


def test_hooks_fire_and_outside_autograd_composes():
    w = rnd(5, 5, seed=1)
    seen = []
    w.register_hook(lambda g: seen.append(g.clone()))
    f = smelt.compile(lambda x, w: torch.relu(x @ w))
    x = rnd(3, 5, seed=2)
    y = f(x * 2, w)           # eager op before, compiled region, eager ops after
    (y.exp().sum()).backward()
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch.relu((xr * 2) @ wr).exp().sum().backward()
    assert len(seen) == 1
    torch.testing.assert_close(seen[0], wr.grad)
    torch.testing.assert_close(x.grad, xr.grad)


def test_parameter_with_requires_grad_off():
    torch.manual_seed(0)
    m = MLP()
    m.l1.weight.requires_grad_(False)
    cm = smelt.compile(m)
    x, y = torch.randn(4, 16), torch.tensor([0, 1, 2, 3])
    cm(x, y).backward()
    assert m.l1.weight.grad is None and m.l1.bias.grad is not None
    g = m.l1.bias.grad.clone()
    m.zero_grad()
    m(x, y).backward()
    torch.testing.assert_close(g, m.l1.bias.grad)


def test_double_backward_raises_as_a_once_differentiable_op():
    f = smelt.compile(lambda x: (x * x).sin().sum())
    x = rnd(4, dtype=torch.float64)
    (g,) = torch.autograd.grad(f(x), [x], create_graph=True)
    with pytest.raises(RuntimeError):
        g.sum().backward()


@pytest.mark.parametrize("case", ["detach", "no_grad", "data"])
def test_what_the_graph_cannot_carry_runs_eagerly(case):
    def fn(x, w):
        h = x @ w
        if case == "detach":
            h = h * h.detach()
        elif case == "data":
            h = h + h.data
        else:
            with torch.no_grad():
                s = h.sum()
            h = h * s
        return h.sum()
    f = smelt.compile(fn)
    x, w = rnd(3, 4, seed=1), rnd(4, 4, seed=2)
    _, g, _ = grads_of(f, [x, w])
    _, ref, _ = grads_of(fn, [x, w])
    for a, b in zip(g, ref):
        torch.testing.assert_close(a, b)
    st = f._smelt.stats()
    assert st["backward_compiles"] == 0 and st["breaks"] >= 1, st


_INV = torch.arange(1.0, 5.0)


@torch.no_grad()
def _table_decorated(pos):
    return (pos[:, None] * _INV).cos()


@pytest.mark.parametrize("form", ["with", "decorator", "set_grad_enabled"])
def test_no_grad_region_over_values_that_need_no_gradient_compiles(form):
    """A no_grad region whose values come from no input that requires grad
    (a rotary table from positions and a buffer, as Llama-style models
    make) is carried: the region compiles with its backward, the table does
    not require grad, gradients match eager's."""
    inv = _INV
    table_decorated = _table_decorated

    def table(pos):
        if form == "with":
            with torch.no_grad():
                return (pos[:, None] * inv).cos()
        if form == "decorator":
            return table_decorated(pos)
        torch.set_grad_enabled(False)
        t = (pos[:, None] * inv).cos()
        torch.set_grad_enabled(True)
        return t

    def fn(x, w):
        t = table(torch.arange(x.shape[0], dtype=torch.float32))
        return (x @ w) * t, t

    f = smelt.compile(fn)
    x, w = rnd(6, 3, seed=1), rnd(3, 4, seed=2)
    got = [t.detach().clone().requires_grad_() for t in (x, w)]
    y, t = f(*got)
    assert not t.requires_grad and y.requires_grad
    y.backward(torch.ones_like(y))
    ref = [t.detach().clone().requires_grad_() for t in (x, w)]
    fn(*ref)[0].backward(torch.ones_like(y))
    for a, b in zip(got, ref):
        torch.testing.assert_close(a.grad, b.grad)
    st = f._smelt.stats()
    assert st["backward_compiles"] == 1 and st["breaks"] == 0, st


def test_no_grad_region_over_values_that_need_a_gradient_runs_eagerly():
    """A no_grad region reading a value that requires grad (a constant scale
    in eager) is not carried: eager's gradients, the reason given."""
    def fn(x):
        with torch.no_grad():
            s = x.abs().amax()
        return (x / s).square().sum()
    f = smelt.compile(fn)
    _, g, _ = grads_of(f, [rnd(5, 3)])
    _, ref, _ = grads_of(fn, [rnd(5, 3)])
    torch.testing.assert_close(g[0], ref[0])
    st = f._smelt.stats()
    assert st["backward_compiles"] == 0 and "no_grad region" in str(st["last_break"]), st


class _RoundSTE(torch.autograd.Function):
    """round() forward, a straight-through backward (scaled, so that a
    backward taken from round's own derivative, zero, would show)."""
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, g):
        return g * ctx.k, None


class _Gelu(torch.autograd.Function):   # Bloom's form: saved input, a hand-written derivative
    @staticmethod
    def forward(x):
        return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        t = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
        return g * (0.5 * x * ((1 - t * t) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + t))


def test_custom_autograd_functions_train_compiled():
    """A torch.autograd.Function on a path that needs a gradient is a host
    call: the region still compiles with its backward, and the gradient is
    the Function's own backward (a straight-through estimator's, not
    round's zero), as eager's; without grad its forward is inlined."""
    def fn(x, w):
        h = _Gelu.apply(x @ w)
        return (_RoundSTE.apply(h, 3.0) * h).sum()

    f = compare(fn, rnd(5, 4, seed=1), rnd(4, 6, seed=2), rtol=1e-5, atol=1e-6)
    assert f._smelt.stats()["breaks"] == 0
    g = smelt.compile(fn)
    with torch.no_grad():
        torch.testing.assert_close(g(rnd(5, 4, grad=False), rnd(4, 6, grad=False)),
                                   fn(rnd(5, 4, grad=False), rnd(4, 6, grad=False)))
    assert g._smelt.stats()["breaks"] == 0


class _AddOneInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.add_(1)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


def test_custom_autograd_function_writing_its_input_runs_eagerly():
    """A Function that writes into its argument cannot be a host call (the
    meta run sees the argument's version change): that part runs eagerly,
    with eager's values and gradients."""
    def fn(w):
        h = w * 2
        y = _AddOneInPlace.apply(h)
        return (h * 3 + y).sum(), h

    f = smelt.compile(fn)
    w = rnd(4, seed=3)
    a, ha = f(w)
    a.backward()
    ga, w.grad = w.grad.clone(), None
    b, hb = fn(w)
    b.backward()
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(ha, hb)
    torch.testing.assert_close(ga, w.grad)
    assert "in place" in str(f._smelt.stats()["last_break"])


class _NoisyMask(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        m = (torch.rand_like(x) > 0.5).float()
        ctx.save_for_backward(m)
        return x * m

    @staticmethod
    def backward(ctx, g):
        (m,) = ctx.saved_tensors
        return g * m


def test_custom_autograd_function_drawing_random_numbers_runs_eagerly():
    """A Function whose forward draws random numbers is not a host call
    (its backward host call would run it again and draw another mask): the
    probe refuses it, that part runs eagerly, and a seeded run matches
    eager's values and gradients."""
    def fn(w):
        return (_NoisyMask.apply(w * 2) * 3).sum()

    f = smelt.compile(fn)
    w = rnd(256, seed=4)
    torch.manual_seed(1)
    a = f(w)
    a.backward()
    ga, w.grad = w.grad.clone(), None
    torch.manual_seed(1)
    b = fn(w)
    b.backward()
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(ga, w.grad)
    assert "random" in str(f._smelt.stats()["last_break"])


def test_explain_says_a_backward_compiles():
    f = smelt.compile(lambda x: (x.sin() * 2).sum())
    assert smelt.explain(f, rnd(4))["backward"] is True
    assert smelt.explain(f, rnd(4, grad=False))["backward"] is False


def test_embedding_padding_row_gets_no_gradient():
    w = rnd(10, 4, seed=1)
    ids = torch.tensor([[1, 0, 3, 3], [0, 9, 1, 2]])
    for pad in (0, 3, None):
        compare(lambda w: (F.embedding(ids, w, padding_idx=pad) * torch.arange(32.0).reshape(2, 4, 4)).sum(), w)
    compare(lambda w: w[torch.tensor([2, 2, 7])].sin().sum(), w)
    compare(lambda w: w.index_select(0, torch.tensor([0, 5, 5, 1])).exp().sum(), w)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mask", [None, "bool", "float"])
def test_attention_gradients(causal, mask):
    q, k, v = rnd(2, 3, 7, 8, seed=1), rnd(2, 3, 5 if not causal else 7, 8, seed=2), rnd(2, 3, 5 if not causal else 7, 6, seed=3)
    m = None
    if mask == "bool":
        m = torch.rand(7, k.shape[2], generator=torch.Generator().manual_seed(4)) > 0.3
        m[:, 0] = True
    elif mask == "float":
        m = torch.randn(7, k.shape[2], generator=torch.Generator().manual_seed(4))
    if causal and m is not None:
        return   # torch refuses a mask with is_causal
    compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal), q, k, v,
            rtol=1e-4, atol=1e-5)


def backward_profile(monkeypatch, fn, *inputs, **tol):
    """compare(fn, *inputs) with the backward plan's profile returned."""
    plans = []
    import smelt._autograd as A
    fwd_of = A._Region.forward
    monkeypatch.setattr(A._Region, "forward",
                        staticmethod(lambda ctx, fwd, bwd, *a: plans.append(bwd) or fwd_of(ctx, fwd, bwd, *a)))
    smelt._C.set_profiling(True)
    try:
        compare(fn, *inputs, **tol)
    finally:
        smelt._C.set_profiling(False)
    assert plans
    return plans[0].profile()


ATTN_GRAD_CASES = {   # name: (B, H, L, S, E, Ev, form)
    "tails": (2, 3, 33, 70, 17, 24, "causal"),
    "one_row": (1, 2, 1, 65, 16, 16, "none"),
    "long": (1, 2, 130, 129, 32, 8, "bool"),
    "float_mask": (2, 2, 40, 40, 16, 16, "float"),
    "shared_heads": (2, 4, 37, 37, 16, 16, "gqa"),
}


@pytest.mark.parametrize("case", list(ATTN_GRAD_CASES))
def test_attention_gradients_run_on_the_flash_backward(case, monkeypatch):
    """dq, dk, dv of float32 attention come from the flash-style backward
    step (no score matrix in the backward plan): tails around the blocks,
    one query row, masks, keys and values expanded over heads from
    transposed projections."""
    B, H, L, S, E, Ev, form = ATTN_GRAD_CASES[case]
    g = torch.Generator().manual_seed(4)
    q = rnd(B, L, H, E, seed=1).transpose(1, 2).detach().requires_grad_()
    kh = 1 if form == "gqa" else H
    k, v = rnd(B, kh, S, E, seed=2), rnd(B, kh, S, Ev, seed=3)
    m = {"bool": torch.rand(L, S, generator=g) > 0.3, "float": torch.randn(B, 1, L, S, generator=g)}.get(form)
    if form == "bool":
        m[:, 0] = True

    def fn(q, k, v):
        if form == "gqa":
            k, v = k.expand(B, H, S, E), v.expand(B, H, S, Ev)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=form == "causal").sin()

    prof = backward_profile(monkeypatch, fn, q, k, v, rtol=1e-4, atol=1e-5)
    assert "sdpa backward" in prof, prof
    assert f"[..{L},{S}]" not in prof and f"[..{L},{Ev}]@[..{Ev},{S}]" not in prof, prof


def test_attention_rows_masked_by_finite_values():
    """Rows whose every key is masked by a large finite value (-1e9,
    finfo.min: BERT-style masks) attend uniformly in float32, and their
    gradients are those of that forward: the math form's (softmax then
    matmuls, as torch's math backend computes them). Torch's fused CPU
    backward recomputes such rows from one log-sum-exp, in which log(l)
    vanishes next to -1e9, and gives every key probability 1 there."""
    g = torch.Generator().manual_seed(4)
    q, k, v = rnd(2, 2, 40, 16, seed=1), rnd(2, 2, 70, 16, seed=2), rnd(2, 2, 70, 16, seed=3)
    m = torch.randn(2, 1, 40, 70, generator=g)
    m[:, :, 2] = -1e9
    m[:, :, 5] = torch.finfo(torch.float32).min

    def math(q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) / 4 + m, -1) @ v

    cf = smelt.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=m))
    ref_out, ref_g, gs = grads_of(math, [q, k, v])
    out, got, _ = grads_of(cf, [q, k, v], gs)
    torch.testing.assert_close(out[0], ref_out[0], rtol=1e-4, atol=1e-5)
    for a, b in zip(got, ref_g):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert cf._smelt.stats()["backward_compiles"] == 1


def test_attention_mask_that_needs_a_gradient(monkeypatch):
    """An additive mask that requires grad gets eager's gradient (through
    the decomposed backward, which the flash step does not give)."""
    q, k, v, m = rnd(2, 2, 9, 8, seed=1), rnd(2, 2, 11, 8, seed=2), rnd(2, 2, 11, 8, seed=3), rnd(2, 1, 9, 11, seed=4)
    prof = backward_profile(monkeypatch, lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                            q, k, v, m, rtol=1e-4, atol=1e-5)
    assert "sdpa backward" not in prof


@pytest.mark.parametrize("groups,stride,padding", [(1, 1, 1), (2, 2, 0), (4, 1, 2)])
def test_convolution_and_pooling_gradients(groups, stride, padding):
    x, w, b = rnd(2, 4, 9, 11, seed=1), rnd(8, 4 // groups, 3, 3, seed=2), rnd(8, seed=3)
    compare(lambda x, w, b: F.max_pool2d(torch.relu(F.conv2d(x, w, b, stride, padding, 1, groups)), 2), x, w, b,
            rtol=1e-4, atol=1e-5)
    compare(lambda x: F.avg_pool2d(x, 3, 2) * 2, x)


@pytest.mark.parametrize("pool", ["2d", "2d_pad_stride", "2d_overlapping", "1d", "3d", "adaptive"])
def test_max_pooling_gradient_goes_to_the_first_maximum(pool):
    """Windows with tied maxima (small integers) give the whole gradient to
    the first maximum in the window, as eager's max pooling does (amax
    shares it among ties)."""
    g = torch.Generator().manual_seed(5)
    fn, shape = {
        "2d": (lambda x: F.max_pool2d(x, 2), (2, 3, 8, 10)),
        "2d_pad_stride": (lambda x: F.max_pool2d(x, 3, 2, padding=1), (2, 3, 9, 8)),
        "2d_overlapping": (lambda x: F.max_pool2d(x, 3, 1), (1, 2, 7, 6)),
        "1d": (lambda x: F.max_pool1d(x, 3), (2, 4, 13)),
        "3d": (lambda x: F.max_pool3d(x, 2), (1, 2, 4, 6, 4)),
        "adaptive": (lambda x: F.adaptive_max_pool2d(x, (3, 2)), (2, 3, 7, 6)),
    }[pool]
    x = torch.randint(0, 3, shape, generator=g).float().requires_grad_()
    compare(lambda x: fn(x) * 1.5, x)


CONV_GRAD_CASES = {   # name: (conv fn, x shape, w shape, kwargs)
    "2d": (F.conv2d, (2, 4, 9, 11), (6, 4, 3, 3), dict(padding=1)),
    "2d_stride_dil": (F.conv2d, (3, 5, 13, 10), (7, 5, 3, 2), dict(stride=(2, 3), dilation=(2, 1), padding=(1, 0))),
    "2d_same_even_kernel": (F.conv2d, (2, 3, 8, 7), (4, 3, 4, 2), dict(padding="same")),   # asymmetric padding
    "2d_groups": (F.conv2d, (2, 6, 7, 7), (9, 2, 3, 3), dict(groups=3, stride=2)),
    "2d_depthwise": (F.conv2d, (2, 8, 10, 9), (8, 1, 3, 3), dict(groups=8, padding=1)),
    "2d_1x1": (F.conv2d, (1, 17, 5, 5), (3, 17, 1, 1), {}),
    "1d": (F.conv1d, (3, 4, 31), (5, 4, 5), dict(stride=2, padding=3)),
    "3d": (F.conv3d, (2, 3, 5, 6, 7), (4, 3, 3, 2, 3), dict(padding=1)),
}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("case", list(CONV_GRAD_CASES))
def test_convolution_gradients_run_on_conv_backward_steps(case, bias, monkeypatch):
    """dx, dw and the bias gradient of every form of convolution match
    eager's, computed by the backward plan's own convolution steps (oneDNN's
    backward primitives), not host calls into torch."""
    conv, xs, ws, kw = CONV_GRAD_CASES[case]
    x, w = rnd(*xs, seed=1), rnd(*ws, seed=2)
    b = rnd(ws[0], seed=3) if bias else None
    if bias:
        prof = backward_profile(monkeypatch, lambda x, w, b: conv(x, w, b, **kw).tanh(), x, w, b, rtol=1e-4, atol=1e-5)
    else:
        prof = backward_profile(monkeypatch, lambda x, w: conv(x, w, None, **kw).tanh(), x, w, rtol=1e-4, atol=1e-5)
    assert "host call" not in prof
    assert "conv backward input" in prof and "conv backward weight" in prof, prof


@pytest.mark.parametrize("which", ["x", "w", "xw_channels_last"])
def test_convolution_gradients_for_some_inputs(which):
    """Only the gradients needed are computed (a first layer's input, frozen
    weights), and channels-last inputs give eager's gradients."""
    x, w, b = rnd(2, 3, 9, 9, seed=1), rnd(5, 3, 3, 3, seed=2), rnd(5, seed=3)
    if which == "x":
        w.requires_grad_(False)
        b.requires_grad_(False)
    elif which == "w":
        x.requires_grad_(False)
    else:
        x = x.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
    compare(lambda x, w, b: F.relu(F.conv2d(x, w, b, padding=1)).square(), x, w, b, rtol=1e-4, atol=1e-5)


def test_cnn_with_batchnorm_trains_like_eager():
    from smelt import bench
    torch.manual_seed(0)
    w = bench.build_cnn("tiny")
    ref = w.fn.train()
    (x,) = w.inputs
    import copy
    m = copy.deepcopy(ref)
    cm = smelt.compile(m)
    y = torch.randint(0, 10, (x.shape[0],), generator=torch.Generator().manual_seed(1))
    o_ref, o = torch.optim.SGD(ref.parameters(), lr=0.05), torch.optim.SGD(m.parameters(), lr=0.05)
    for _ in range(5):
        for model, opt, fn in ((ref, o_ref, ref), (m, o, cm)):
            opt.zero_grad()
            F.cross_entropy(fn(x), y).backward()
            opt.step()
        for a, b in zip(list(m.parameters()) + list(m.buffers()), list(ref.parameters()) + list(ref.buffers())):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    st = cm._smelt.stats()
    assert st["backward_compiles"] == 1 and st["breaks"] == 0, st


def hf_model(kind):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=97, n_positions=32,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return transformers.GPT2LMHeadModel(cfg)
    if kind == "bert":
        cfg = transformers.BertConfig(num_hidden_layers=2, num_attention_heads=4, hidden_size=32,
                                      intermediate_size=64, vocab_size=97, max_position_embeddings=32,
                                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return transformers.BertForMaskedLM(cfg)
    cfg = transformers.LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   hidden_size=32, intermediate_size=64, vocab_size=97,
                                   max_position_embeddings=32)
    return transformers.LlamaForCausalLM(cfg)


def _twin(ref):
    """(compiled copy of ref, the copy, AdamW over ref, AdamW over the copy)."""
    import copy
    m = copy.deepcopy(ref)
    return smelt.compile(m), m, torch.optim.AdamW(ref.parameters(), lr=1e-3), torch.optim.AdamW(m.parameters(), lr=1e-3)


@pytest.mark.parametrize("kind", ["gpt2", "bert", "llama"])
def test_hugging_face_training_steps_match_eager(kind):
    from smelt.bench import smelt_functions
    ref = hf_model(kind).train()
    cm, m, o_ref, o = _twin(ref)
    g = torch.Generator().manual_seed(2)
    for step in range(4):
        ids = torch.randint(0, 97, (2, 12), generator=g)
        ids[0, 3] = 0   # BERT's padding row: no gradient
        losses = []
        for model, opt, fn in ((ref, o_ref, ref), (m, o, cm)):
            opt.zero_grad()
            loss = fn(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
        for (n, a), b in zip(m.named_parameters(), ref.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=n)
    assert sum(f.stats()["backward_compiles"] for f in smelt_functions()) >= 1


def test_parameters_no_gradient_reaches_keep_none():
    """A parameter used only by an output the loss ignores gets None, as in
    eager (an optimizer then skips it), not zeros."""
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.a(x), self.b(x).tanh()
    torch.manual_seed(0)
    m = Two()
    cm = smelt.compile(m)
    x = torch.randn(5, 4)
    cm(x)[0].sum().backward()
    assert m.b.weight.grad is None and m.b.bias.grad is None and m.a.weight.grad is not None
    cm(x)[1].sum().backward()
    assert m.b.weight.grad is not None


@pytest.mark.parametrize("name", ["cumsum", "interpolate", "topk", "two_results", "einsum", "conv_transpose"])
def test_host_calls_get_gradients_from_torch(name):
    """A torch op smelt runs as a host call inside the graph: its gradient
    is torch's own, for the call run again in the backward plan."""
    fns = {
        "cumsum": lambda x: torch.cumsum(x * 2, 1).sin(),
        "interpolate": lambda x: F.interpolate(x.reshape(1, 2, 5, 70).exp(), scale_factor=1.5, mode="bilinear"),
        "topk": lambda x: torch.topk(x.tanh(), 3, dim=1).values * 2,
        "two_results": lambda x: torch.sort(x * 3, dim=1)[0] - torch.cummax(x, 1)[0],
        "einsum": lambda x: torch.einsum("ij,kj->ik", x, x.sin()),
        "conv_transpose": lambda x: F.conv_transpose1d(x.reshape(1, 10, 70), torch.ones(10, 3, 4, dtype=x.dtype)),
    }
    x = rnd(10, 70, dtype=torch.float64, seed=9)   # scans of 70 entries: host calls
    cf = compare(fns[name], x)
    e = smelt.explain(cf, x)
    assert e["backward"] and e["host_calls"], e["host_calls"]


@pytest.mark.parametrize("p", [0.3, 1.0])
def test_dropout_in_training_matches_seeded_eager(p):
    """Dropout draws its noise from torch's generator as eager does, and the
    compiled backward multiplies by that same noise (a rerun would draw a
    new one)."""
    def run(compiled):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(p), torch.nn.GELU(),
                                torch.nn.Linear(32, 4), torch.nn.Dropout(0.5))
        f = smelt.compile(m) if compiled else m
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        torch.manual_seed(1)
        outs = []
        for _ in range(3):
            opt.zero_grad()
            out = f(torch.randn(8, 16))
            out.square().sum().backward()
            opt.step()
            outs.append((out.detach(), [q.grad.clone() for q in m.parameters()]))
        after = torch.rand(3)   # the generator advanced as far as eager's
        return outs, after, f
    ref, ra, _ = run(False)
    got, ga, f = run(True)
    assert f._smelt.stats()["backward_compiles"] >= 1
    torch.testing.assert_close(ga, ra)
    for (o1, g1), (o2, g2) in zip(ref, got):   # the same noise: differences are rounding only
        torch.testing.assert_close(o2, o1, rtol=1e-5, atol=1e-5)
        for a, b in zip(g1, g2):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5 * float(a.abs().max()))


def test_warm_process_compiles_no_backward_kernel(tmp_path):
    """Forward and backward plans of a training step (and the compiled
    optimizer step) go into the disk cache: a second process with the same
    cache generates no kernel."""
    import json
    import os
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent("""
        import json, torch, smelt
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(10, 24), torch.nn.GELU(), torch.nn.LayerNorm(24),
                                torch.nn.Linear(24, 3))
        f = smelt.compile(m)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        step = smelt.compile(opt.step)
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(f(torch.randn(5, 10)), torch.tensor([0, 1, 2, 1, 0])).backward()
            step()
        a, b = f._smelt.stats(), step.__func__.stats()
        print(json.dumps([a["backward_compiles"], a["generated"], a["plans_from_disk"],
                          b["compiles"], b["generated"], b["plans_from_disk"]]))
    """)
    env = dict(os.environ, SMELT_CACHE_DIR=str(tmp_path / "cache"))
    runs = [json.loads(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                      timeout=300, check=True).stdout.strip().splitlines()[-1]) for _ in range(2)]
    cold, warm = runs
    assert cold[0] == 1 and cold[1] > 0 and cold[4] > 0, cold
    assert warm[0] == 1 and warm[1] == 0 and warm[2] == 2, warm   # forward and backward plans from disk
    assert warm[3] == 1 and warm[4] == 0 and warm[5] == 1, warm   # the optimizer step's plan from disk


def _family(name):
    T = pytest.importorskip("transformers")
    v = dict(vocab_size=97)
    return {
        "mistral": lambda: T.MistralForCausalLM(T.MistralConfig(
            num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=64, sliding_window=5, **v)),
        "qwen2": lambda: T.Qwen2ForCausalLM(T.Qwen2Config(
            num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=64, **v)),
        "gemma": lambda: T.GemmaForCausalLM(T.GemmaConfig(
            num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=1,
            head_dim=8, max_position_embeddings=64, **v)),
        "phi": lambda: T.PhiForCausalLM(T.PhiConfig(
            num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
            max_position_embeddings=64, resid_pdrop=0, embd_pdrop=0, attention_dropout=0, **v)),
        "gptj": lambda: T.GPTJForCausalLM(T.GPTJConfig(
            n_layer=2, n_embd=32, n_head=4, rotary_dim=4, n_positions=64, resid_pdrop=0, embd_pdrop=0,
            attn_pdrop=0, **v)),
        "bloom": lambda: T.BloomForCausalLM(T.BloomConfig(
            n_layer=2, hidden_size=32, n_head=4, hidden_dropout=0, attention_dropout=0, **v)),
        "gpt_neo": lambda: T.GPTNeoForCausalLM(T.GPTNeoConfig(
            num_layers=2, hidden_size=32, num_heads=4, attention_types=[[["global", "local"], 1]],
            max_position_embeddings=64, window_size=4, embed_dropout=0, attention_dropout=0, resid_dropout=0, **v)),
        "t5": lambda: T.T5ForConditionalGeneration(T.T5Config(
            num_layers=2, num_decoder_layers=2, d_model=32, d_ff=64, num_heads=4, d_kv=8, dropout_rate=0,
            decoder_start_token_id=0, **v)),
        "bart": lambda: T.BartForConditionalGeneration(T.BartConfig(
            encoder_layers=2, decoder_layers=2, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
            encoder_attention_heads=4, decoder_attention_heads=4, max_position_embeddings=64, dropout=0,
            attention_dropout=0, **v)),
        "mixtral": lambda: T.MixtralForCausalLM(T.MixtralConfig(
            num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64, **v)),
        "deberta_v2": lambda: T.DebertaV2ForMaskedLM(T.DebertaV2Config(
            num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
            max_position_embeddings=64, hidden_dropout_prob=0, attention_probs_dropout_prob=0,
            relative_attention=True, pos_att_type=["p2c", "c2p"], **v)),
        "gpt_bigcode": lambda: T.GPTBigCodeForCausalLM(T.GPTBigCodeConfig(
            n_layer=2, n_embd=32, n_head=4, n_positions=64, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0,
            multi_query=True, **v)),
    }[name]()


@pytest.mark.parametrize("name", ["mistral", "qwen2", "gemma", "phi", "gptj", "bloom", "gpt_neo", "t5", "bart",
                                  "mixtral", "deberta_v2", "gpt_bigcode"])
def test_hugging_face_families_train_compiled(name):
    """More families, each trained 3 AdamW steps with the model compiled:
    the loss and every gradient equal eager's on the same parameters (the
    compiled copy is reset to eager's after each step: an update of a
    near-zero gradient entry may differ by the learning rate), the forward
    and backward compiled, nothing run eagerly. Rotary tables under
    @torch.no_grad() (Mistral, Qwen2, Gemma, Phi), GPT-J's strided slices,
    Bloom's custom autograd.Function, sliding-window and local masks,
    encoder-decoders, mixture-of-experts routing, DeBERTa's relative
    attention, multi-query attention."""
    torch.manual_seed(0)
    ref = _family(name).train()
    cm, m, o_ref, o = _twin(ref)
    g = torch.Generator().manual_seed(2)
    for step in range(3):
        ids = torch.randint(3, 97, (2, 12), generator=g)
        labels = torch.randint(3, 97, (2, 7), generator=g) if name in ("t5", "bart") else ids
        losses = []
        for opt, fn in ((o_ref, ref), (o, cm)):
            opt.zero_grad()
            loss = fn(input_ids=ids, labels=labels).loss
            loss.backward()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
        top = max(float(p.grad.abs().max()) for p in ref.parameters() if p.grad is not None)
        for (n, a), b in zip(m.named_parameters(), ref.parameters()):
            assert (a.grad is None) == (b.grad is None), n
            if a.grad is not None:
                torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-5 * top, msg=n)
        o_ref.step()
        o.step()
        with torch.no_grad():
            for a, b in zip(m.parameters(), ref.parameters()):
                a.copy_(b)
    st = cm._smelt.stats()
    assert st["backward_compiles"] >= 1 and st["breaks"] == 0 and st["eager_entries"] == 0, st
