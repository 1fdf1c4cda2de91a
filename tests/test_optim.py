"""Compiled optimizer steps (tracer/optim.c) and entries that update their
inputs in place (no_grad regions over parameters, write-backs fused into
the plan), against eager on the same seeds."""
import pytest
import torch

import smelt


def _model(seed=0, frozen_bias=True):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(33, 65), torch.nn.GELU(), torch.nn.Linear(65, 7))
    if frozen_bias:
        m[2].bias.requires_grad_(False)   # never has a gradient
    return m


class _NoEagerStep:
    """Makes torch's own update functions raise: a compiled step must not
    reach them (a step that ran eagerly would compute the same numbers)."""

    def __enter__(self):
        import torch.optim.adam as adam_mod
        import torch.optim.sgd as sgd_mod
        self.saved = [(adam_mod, "adam", adam_mod.adam), (sgd_mod, "sgd", sgd_mod.sgd)]

        def boom(*a, **k):
            raise AssertionError("the optimizer step ran eagerly")
        for mod, name, _ in self.saved:
            setattr(mod, name, boom)
        return self

    def __exit__(self, *exc):
        for mod, name, fn in self.saved:
            setattr(mod, name, fn)


def _train(make_opt, steps=8, compiled=True, seed=0, set_to_none=None, eager_ok=False):
    m = _model(seed)
    opt = make_opt(m)

    def step():
        opt.step()

    f = smelt.compile(step) if compiled else step
    g = torch.Generator().manual_seed(seed + 1)
    xs = [torch.randn(17, 33, generator=g) for _ in range(steps)]
    states = []
    for i in range(steps):
        opt.zero_grad(set_to_none=(i % 2 == 0) if set_to_none is None else set_to_none)
        m(xs[i]).square().mean().backward()
        if compiled and not eager_ok:
            with _NoEagerStep():
                f()
        else:
            f()
        states.append([p.detach().clone() for p in m.parameters()])
    return m, opt, f, states


OPTIMIZERS = {
    "sgd": lambda m: torch.optim.SGD(m.parameters(), lr=1e-2),
    "sgd_momentum_wd": lambda m: torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.9, weight_decay=0.01),
    "sgd_nesterov": lambda m: torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.9, nesterov=True),
    "sgd_momentum_maximize": lambda m: torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.8, maximize=True),
    "adam": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2),
    "adam_l2": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2, weight_decay=0.1),
    "adam_amsgrad_maximize": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2, amsgrad=True, maximize=True),
    "adamw": lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2),
    "adamw_foreach_betas": lambda m: torch.optim.AdamW(m.parameters(), lr=3e-3, foreach=True, betas=(0.8, 0.95),
                                                       eps=1e-6, weight_decay=0.05),
    "adamw_groups": lambda m: torch.optim.AdamW([{"params": m[0].parameters(), "lr": 1e-3},
                                                 {"params": m[2].parameters(), "weight_decay": 0.0}], lr=1e-2),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_step_matches_eager(name):
    """Every step compiled (the first creates the state while tracing, as
    torch's would), equal to eager's, the optimizer state too."""
    m1, o1, _, s1 = _train(OPTIMIZERS[name], compiled=False)
    m2, o2, f, s2 = _train(OPTIMIZERS[name], compiled=True)
    for step, (a, b) in enumerate(zip(s1, s2)):
        for pa, pb in zip(a, b):
            torch.testing.assert_close(pb, pa, rtol=1e-6, atol=1e-7, msg=f"{name}: step {step}")
    for p1, p2 in zip(m1.parameters(), m2.parameters()):   # the optimizer state too
        st1, st2 = o1.state.get(p1, {}), o2.state.get(p2, {})
        assert st1.keys() == st2.keys()
        for k in st1:
            if isinstance(st1[k], torch.Tensor):
                torch.testing.assert_close(st2[k], st1[k], rtol=1e-6, atol=1e-7)
    st = f.stats()
    assert st["compiles"] == 1 and st["breaks"] == 0 and st["partial_entries"] == 0, st


def test_step_is_traced_not_eager():
    _, _, f, _ = _train(OPTIMIZERS["adamw"], steps=4)
    ex = smelt.explain(f)
    assert ex["compiles"] and not ex["backward"] and not ex["breaks"], ex
    assert ex["inputs_updated_in_place"] == 12   # 4 parameters with gradients x (param, 2 moments, step)
    assert f.stats()["hits"] >= 3


def test_sgd_with_dampening_runs_eagerly_and_matches():
    """Its first step sets the momentum buffer to the gradient itself, not
    a dampened one: not compiled."""
    mk = lambda m: torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.8, dampening=0.5)
    _, _, _, s1 = _train(mk, compiled=False)
    _, _, f, s2 = _train(mk, compiled=True, eager_ok=True)
    for a, b in zip(s1[-1], s2[-1]):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)
    assert f.stats()["breaks"] >= 1   # the step's call runs eagerly


def test_parameter_updated_in_place_and_version_moves():
    m = _model(1)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    f = smelt.compile(lambda: opt.step())
    w = m[0].weight
    row = w[3]   # a view taken before: sees the update, as in eager
    for i in range(3):
        opt.zero_grad()
        m(torch.randn(5, 33)).sum().backward()
        before, ptr, ver = row.clone(), w.data_ptr(), w._version
        f()
        assert w.data_ptr() == ptr
        assert w._version > ver
        assert not torch.equal(row, before)
        assert w.requires_grad and w.is_leaf and w.grad_fn is None


def test_zero_grad_keep_and_none_never_recompile():
    for set_to_none in (True, False):
        _, _, f, _ = _train(OPTIMIZERS["adam"], steps=10, set_to_none=set_to_none)
        assert f.stats()["compiles"] == 1


def test_gradient_appears_later_recompiles_correctly():
    """A parameter whose .grad is None in one step and set in the next."""
    def run(compiled):
        m = _model(2, frozen_bias=False)
        opt = torch.optim.Adam(m.parameters(), lr=1e-2)
        f = smelt.compile(lambda: opt.step()) if compiled else opt.step
        g = torch.Generator().manual_seed(5)
        for i in range(6):
            opt.zero_grad(set_to_none=True)
            h = m[1](m[0](torch.randn(4, 33, generator=g)))
            loss = h.square().mean() if i < 3 else m[2](h).square().mean()
            loss.backward()
            f()
        return [p.detach().clone() for p in m.parameters()]
    for a, b in zip(run(False), run(True)):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_learning_rate_schedule_never_recompiles(kind):
    """A float learning rate is an input of the graph: a scheduler's new
    rate every step reuses the entry and is honoured."""
    def run(compiled):
        m = _model(3)
        opt = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) if kind == "sgd"
               else torch.optim.AdamW(m.parameters(), lr=0.01))
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=12)
        f = smelt.compile(lambda: opt.step()) if compiled else opt.step
        for i in range(12):
            opt.zero_grad()
            m(torch.full((3, 33), 0.1 * (i + 1))).sum().backward()
            f()
            sched.step()
        return [p.detach().clone() for p in m.parameters()], f
    (p1, _), (p2, f) = run(False), run(True)
    for a, b in zip(p1, p2):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)
    assert f.stats()["compiles"] == 1, f.stats()


def test_step_hooks_run_eagerly_and_fire():
    m = _model(4)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    calls = []
    opt.register_step_post_hook(lambda o, a, k: calls.append(1))
    f = smelt.compile(lambda: opt.step())
    for _ in range(3):
        opt.zero_grad()
        m(torch.randn(2, 33)).sum().backward()
        f()
    assert len(calls) == 3


def test_closure_runs_eagerly():
    m = _model(5)
    opt = torch.optim.SGD(m.parameters(), lr=1e-2)
    x = torch.randn(4, 33)

    def closure():
        opt.zero_grad()
        loss = m(x).square().mean()
        loss.backward()
        return loss

    f = smelt.compile(lambda: opt.step(closure))
    losses = [f().item() for _ in range(3)]
    assert losses[2] < losses[0]


def test_whole_training_step_in_one_compiled_function():
    def run(compiled):
        m = _model(6)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)

        def train_step(x):
            opt.zero_grad(set_to_none=True)
            loss = m(x).square().mean()
            loss.backward()
            opt.step()
            return loss

        f = smelt.compile(train_step) if compiled else train_step
        g = torch.Generator().manual_seed(9)
        losses = [f(torch.randn(8, 33, generator=g)).item() for _ in range(6)]
        return losses, [p.detach().clone() for p in m.parameters()]
    (l1, p1), (l2, p2) = run(False), run(True)
    assert l2 == pytest.approx(l1, rel=1e-5)
    for a, b in zip(p1, p2):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_double_parameters_and_odd_shapes():
    torch.manual_seed(7)
    ps = [torch.nn.Parameter(torch.randn(s, dtype=torch.float64)) for s in [(1,), (3, 5), (0, 4), (2, 3, 7), ()]]
    qs = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    o1, o2 = torch.optim.AdamW(ps, lr=1e-2), torch.optim.AdamW(qs, lr=1e-2)
    f = smelt.compile(lambda: o2.step())
    for i in range(5):
        for a, b in zip(ps, qs):
            g = torch.randn_like(a)
            a.grad, b.grad = g.clone(), g.clone()
        o1.step()
        f()
    for a, b in zip(ps, qs):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)


def test_noncontiguous_parameter():
    base1 = torch.randn(6, 4)
    base2 = base1.clone()
    p1 = torch.nn.Parameter(base1.t())   # a transposed leaf: not written in place by the plan
    p2 = torch.nn.Parameter(base2.t())
    o1, o2 = torch.optim.Adam([p1], lr=0.1), torch.optim.Adam([p2], lr=0.1)
    f = smelt.compile(lambda: o2.step())
    for i in range(4):
        g = torch.randn(4, 6)
        p1.grad, p2.grad = g.clone(), g.clone()
        o1.step()
        f()
    torch.testing.assert_close(p2, p1, rtol=1e-6, atol=1e-7)
    assert p2.stride() == (1, 4)


# ---------- entries that only update inputs in place ----------

def test_no_grad_region_over_parameters_compiles_and_matches():
    """An EMA of parameters under no_grad: every value computed with grad
    off, so the entry runs as a no_grad region (no break, no backward)."""
    torch.manual_seed(8)
    params = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(7))]
    ema = [p.detach().clone() * 0.5 for p in params]
    ema2 = [e.clone() for e in ema]

    def update(ema, params, decay):
        with torch.no_grad():
            for e, p in zip(ema, params):
                e.mul_(decay).add_(p, alpha=1 - decay)
            return ema[0] * 2

    f = smelt.compile(update)
    for _ in range(3):
        r1 = update(ema, params, 0.9)
        r2 = f(ema2, params, 0.9)
        torch.testing.assert_close(r2, r1)
        assert not r2.requires_grad
        for a, b in zip(ema, ema2):
            torch.testing.assert_close(b, a)
    st = f.stats()
    assert st["breaks"] == 0 and st["compiles"] == 1, st


def test_update_in_place_with_result_that_is_not_the_input():
    def f(x):
        y = x * 2 + 1
        x.copy_(y)
        return y   # a new tensor in eager, not x

    x1 = torch.randn(9)
    x2 = x1.clone()
    cf = smelt.compile(f)
    for _ in range(2):
        y1, y2 = f(x1), cf(x2)
        torch.testing.assert_close(y2, y1)
        torch.testing.assert_close(x2, x1)
        assert y2.data_ptr() != x2.data_ptr()
        y2.zero_()   # does not touch x
        assert torch.equal(x2, x1)


def test_update_reads_old_value_after_update():
    def f(x, y):
        old = x.sum()
        x.mul_(y)
        z = x + old
        y.add_(x[0])
        return z

    a1, b1 = torch.randn(11), torch.randn(11)
    a2, b2 = a1.clone(), b1.clone()
    cf = smelt.compile(f)
    for _ in range(3):
        torch.testing.assert_close(cf(a2, b2), f(a1, b1))
        torch.testing.assert_close(a2, a1)
        torch.testing.assert_close(b2, b1)


def test_update_of_input_aliasing_another_input_runs_eagerly():
    def f(x, y):
        x.add_(1)
        return y * 2

    base = torch.zeros(8)
    cf = smelt.compile(f)
    a, b = torch.zeros(8), torch.zeros(8)
    cf(a, b)   # compiled on distinct inputs
    out = cf(base, base)   # now y is x: must see the update, as eager
    torch.testing.assert_close(out, torch.full((8,), 2.0))


def test_several_results_fused_kernels():
    def f(a, b, c):
        s = a + b
        t = s * c
        return s, t, (t - a).exp(), s.sum()

    a, b, c = torch.randn(4, 37), torch.randn(4, 37), torch.randn(37)
    for r, e in zip(smelt.compile(f)(a, b, c), f(a, b, c)):
        torch.testing.assert_close(r, e)


def test_compile_of_the_bound_step_method():
    """smelt.compile(opt.step), as torch.compile(opt.step) is used."""
    def run(compiled):
        m = _model(11)
        opt = torch.optim.Adam(m.parameters(), lr=1e-2, weight_decay=0.01)
        step = smelt.compile(opt.step) if compiled else opt.step
        g = torch.Generator().manual_seed(3)
        for _ in range(5):
            opt.zero_grad()
            m(torch.randn(6, 33, generator=g)).square().mean().backward()
            assert step() is None
        return [p.detach().clone() for p in m.parameters()], step
    (p1, _), (p2, step) = run(False), run(True)
    for a, b in zip(p1, p2):   # L2 decay: eager's add(alpha=) is one fused multiply-add, smelt's two roundings,
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)   # which Adam's normalisation magnifies near 0
    st = step._smelt.stats() if hasattr(step, "_smelt") else step.__func__.stats()
    assert st["compiles"] == 1 and st["hits"] >= 4, st
