"""smelt.compile's call surface (python/smelt/_api.py): its arguments as
torch.compile's, what it accepts (functions, methods, partials, callable
objects, builtins, modules), CompiledModule (hooks of the top-level module,
train/eval, attributes, state_dict, deepcopy, pickle), reset().

Every compiled result is compared with eager on random inputs, and stats()
says whether a graph really ran.
"""
import copy
import functools
import inspect
import pickle
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import smelt
from smelt import _C

G = torch.Generator().manual_seed(11)


def rnd(*shape):
    return torch.randn(*shape, generator=G)


def close(got, want):
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def python_frames(fn, *args, **kwargs):
    """The Python functions that run during fn(*args, **kwargs)
    (sys.setprofile)."""
    seen = []

    def prof(frame, event, arg):
        if event == "call":
            seen.append(frame.f_code.co_qualname)
    sys.setprofile(prof)
    try:
        fn(*args, **kwargs)
    finally:
        sys.setprofile(None)
    return seen


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 5)
        self.out = nn.Linear(5, 3)

    def forward(self, x, scale=1.0):
        return self.out(F.gelu(self.lin(x))) * scale

    def decode(self, x, steps):
        """A generate-style method: calls the module itself in a loop."""
        ys = [x]
        for _ in range(steps):
            ys.append(F.pad(self(ys[-1])[..., :3], (0, 3)))
        return torch.stack(ys[1:])


def scaled_sum(a, b, alpha=1.0):
    return (a * alpha + b).tanh()


# ---------------------------------------------------------------- arguments as torch.compile's

def test_signature_is_torch_compiles():
    """Every smelt.compile parameter is one of torch.compile's, with the
    same kind and default."""
    ours = inspect.signature(smelt.compile).parameters
    theirs = inspect.signature(torch.compile).parameters
    assert list(ours) == ["model", "fullgraph", "dynamic", "backend", "mode", "options", "disable"]
    for name, p in ours.items():
        assert (p.kind, p.default) == (theirs[name].kind, theirs[name].default), name


@pytest.mark.parametrize("mode", smelt.MODES)
def test_every_mode_compiles(mode):
    cf = smelt.compile(scaled_sum, mode=mode)
    a, b = rnd(4, 7), rnd(7)
    close(cf(a, b, alpha=0.5), scaled_sum(a, b, alpha=0.5))
    assert cf._smelt.stats()["compiles"] == 1


@pytest.mark.parametrize("mode", ["fast", "DEFAULT", "", 3, "lite"])
def test_unknown_mode_lists_the_modes(mode):
    with pytest.raises(ValueError) as e:
        smelt.compile(scaled_sum, mode=mode)
    assert isinstance(e.value, RuntimeError)   # what torch.compile raises
    msg = str(e.value)
    assert repr(mode) in msg
    for m in smelt.MODES:
        assert repr(m) in msg


def test_mode_and_options_together_raise():
    with pytest.raises(RuntimeError, match="mode or options"):
        smelt.compile(scaled_sum, mode="default", options={})
    with pytest.raises(RuntimeError, match="mode or options"):
        smelt.compile(mode="max-autotune", options={"weight_packing": "auto"})   # decorator form too


def test_options():
    for value in ("auto", "always", "never"):
        cf = smelt.compile(scaled_sum, options={"weight_packing": value})
        a, b = rnd(3, 5), rnd(3, 5)
        close(cf(a, b), scaled_sum(a, b))
        assert smelt._api._live[cf].options == {"weight_packing": value}
    with pytest.raises(ValueError) as e:
        smelt.compile(scaled_sum, options={"max_autotune": True})
    assert "'max_autotune'" in str(e.value) and "'weight_packing'" in str(e.value)
    with pytest.raises(ValueError) as e:
        smelt.compile(scaled_sum, options={"weight_packing": "sometimes"})
    assert all(repr(v) in str(e.value) for v in ("auto", "always", "never", "sometimes"))
    with pytest.raises(TypeError):
        smelt.compile(scaled_sum, options=[("weight_packing", "auto")])
    assert set(smelt.OPTIONS) == {"weight_packing", "backend"}


@pytest.mark.parametrize("backend", ["inductor", "eager", "aot_eager", lambda gm, inputs: gm])
def test_other_backends_raise(backend):
    with pytest.raises(ValueError) as e:
        smelt.compile(scaled_sum, backend=backend)
    msg = str(e.value)
    assert "not supported" in msg and "'smelt'" in msg
    assert (repr(backend) if isinstance(backend, str) else "custom backend (<lambda>)") in msg


def test_backend_smelt_and_none():
    for backend in (None, "smelt"):
        cf = smelt.compile(scaled_sum, backend=backend)
        a, b = rnd(2, 3), rnd(2, 3)
        close(cf(a, b), scaled_sum(a, b))


def test_dynamic_policy():
    """dynamic=False: each new shape compiles anew; None: the second shape
    compiles one symbolic entry that serves every later one; True:
    symbolic from the first call. (tests/test_dynamic.py covers the rest.)"""
    want = {False: 3, None: 2, True: 1}
    for dynamic in (None, True, False):
        cf = smelt.compile(scaled_sum, dynamic=dynamic)
        for n in (3, 5, 3, 7):
            a, b = rnd(n, 4), rnd(n, 4)
            close(cf(a, b), scaled_sum(a, b))
        assert cf._smelt.stats()["compiles"] == want[dynamic], (dynamic, cf._smelt.stats())
    with pytest.raises(ValueError, match="dynamic"):
        smelt.compile(scaled_sum, dynamic="auto")


def test_decorator_forms():
    @smelt.compile
    def f(a):
        return a * 3 - 1

    @smelt.compile()
    def g(a):
        return a.sin()

    @smelt.compile(fullgraph=True, mode="reduce-overhead")
    def h(a):
        return a.cos() + 1

    x = rnd(5)
    for fn, ref in ((f, x * 3 - 1), (g, x.sin()), (h, x.cos() + 1)):
        close(fn(x), ref)
        assert fn._smelt.stats()["compiles"] == 1
    with pytest.raises(TypeError):
        smelt.compile()(None)
    with pytest.raises(ValueError):   # checked where the decorator is written
        smelt.compile(mode="turbo")


def test_disable_returns_the_original():
    m = Net()
    assert smelt.compile(scaled_sum, disable=True) is scaled_sum
    assert smelt.compile(m, disable=True) is m
    assert smelt.compile(disable=True)(scaled_sum) is scaled_sum
    with pytest.raises(ValueError):   # arguments are still checked
        smelt.compile(scaled_sum, disable=True, mode="bogus")


def test_fullgraph_raises_where_eager_would_run():
    def breaks(a):
        return a * float(a.sum())   # reads tensor data
    with pytest.raises(RuntimeError, match="depends on its data"):
        smelt.compile(breaks, fullgraph=True)(rnd(3))
    cf = smelt.compile(breaks)
    x = rnd(3)
    close(cf(x), breaks(x))
    st = cf._smelt.stats()
    assert st["breaks"] == 1 and st["partial_entries"] == 1, st   # compiled around the break


def test_not_callable_raises():
    with pytest.raises(TypeError):
        smelt.compile(42)
    with pytest.raises(TypeError):
        smelt.explain(42, rnd(2))


# ---------------------------------------------------------------- what it accepts

def test_bound_method():
    class Scaler:
        def __init__(self, k):
            self.k = k

        def apply(self, a, b):
            return (a + b) * self.k

    s = Scaler(2.5)
    cm = smelt.compile(s.apply)
    a, b = rnd(4, 3), rnd(3)
    close(cm(a, b), s.apply(a, b))
    assert cm.__self__ is s and cm.__name__ == "apply"
    st = cm._smelt.stats()
    assert st["compiles"] == 1 and st["eager_entries"] == 0
    assert python_frames(cm, a, b) == []


def test_bound_method_of_a_module():
    """smelt.compile(model.decode): the method compiles as one graph, its
    calls of the module inlined."""
    m = Net().eval()
    dec = smelt.compile(m.decode)
    x = rnd(2, 6)
    with torch.no_grad():
        close(dec(x, 3), m.decode(x, 3))
        close(dec(x, 3), m.decode(x, 3))
    st = dec._smelt.stats()
    assert st["compiles"] == 1 and st["eager_entries"] == 0 and st["hits"] == 1


def test_classmethod():
    class K:
        k = 4.0

        @classmethod
        def scale(cls, a):
            return a * cls.k

    cf = smelt.compile(K.scale)
    x = rnd(3)
    close(cf(x), x * 4.0)
    assert cf.__self__ is K and cf._smelt.stats()["compiles"] == 1


def test_partial_of_a_python_function():
    a0 = rnd(3, 4)
    p = smelt.compile(functools.partial(scaled_sum, a0, alpha=2.0))
    assert isinstance(p, functools.partial) and p.args == (a0,) and p.keywords == {"alpha": 2.0}
    b = rnd(3, 4)
    close(p(b), scaled_sum(a0, b, alpha=2.0))
    close(p(b, alpha=-1.0), scaled_sum(a0, b, alpha=-1.0))   # a keyword overrides the partial's
    st = p._smelt.stats()
    assert st["compiles"] == 2 and st["eager_entries"] == 0
    assert python_frames(p, b) == []


def test_partial_of_a_builtin():
    p = smelt.compile(functools.partial(torch.add, alpha=3))
    a, b = rnd(5), rnd(5)
    close(p(a, b), torch.add(a, b, alpha=3))
    st = p._smelt.stats()
    assert st["compiles"] == 1 and st["eager_entries"] == 0


def test_callable_object():
    class Affine:
        def __init__(self):
            self.w, self.b = rnd(4, 4), rnd(4)

        def __call__(self, x):
            return torch.relu(x @ self.w + self.b)

    obj = Affine()
    cf = smelt.compile(obj)
    x = rnd(3, 4)
    close(cf(x), obj(x))
    assert cf.__self__ is obj and cf._smelt.stats()["compiles"] == 1
    assert cf._smelt.stats()["eager_entries"] == 0
    obj.w = rnd(4, 4)          # a new tensor of the same shape: same entry
    close(cf(x), obj(x))
    assert cf._smelt.stats()["compiles"] == 1


@pytest.mark.parametrize("fn", [torch.sin, F.gelu, torch.Tensor.exp], ids=["sin", "gelu", "Tensor.exp"])
def test_builtin_through_the_trampoline(fn):
    cf = smelt.compile(fn)
    x = rnd(7, 3)
    close(cf(x), fn(x))
    close(cf(x), fn(x))
    st = cf._smelt.stats()
    assert st["compiles"] == 1 and st["eager_entries"] == 0 and st["hits"] == 1
    assert python_frames(cf, x) == []


def test_compiling_what_smelt_compiled_starts_from_the_original():
    cf = smelt.compile(scaled_sum)
    again = smelt.compile(cf, fullgraph=True)
    assert again is not cf and again.fn is scaled_sum
    m = Net()
    cm = smelt.compile(m)
    cm2 = smelt.compile(cm)
    assert isinstance(cm2, smelt.CompiledModule) and cm2._orig_mod is m


def test_method_decorated_in_its_class():
    class Holder:
        k = 3.0

        @smelt.compile(mode="default")
        def apply(self, a):
            return a * self.k

    h, x = Holder(), rnd(4)
    close(h.apply(x), x * 3.0)
    close(Holder.apply(h, x), x * 3.0)


# ---------------------------------------------------------------- CompiledModule: hooks

def _eager_and_compiled(cm, m, calls):
    """call(*args, **kwargs): cm's result, checked against m's (eager),
    each hook having run once per call (calls: what the hooks append)."""
    def call(*args, **kwargs):
        calls.clear()
        got = cm(*args, **kwargs)
        n = len(calls)
        close(got, m(*args, **kwargs))
        assert len(calls) == 2 * n
        return got
    return call


def test_hooks_of_the_top_level_module():
    """Forward pre-hooks and hooks of the compiled module itself, with and
    without kwargs, returning new values or None, registered after
    compiling through the original or the compiled module, and removed
    again: each result as eager's. While hooks are registered the top frame
    compiles with the hooks traced into it (hooks with side effects on
    outside objects run the top frame eagerly, the forward still
    compiled); once they are removed the first entry runs again."""
    m = Net().eval()
    cm = smelt.compile(m)
    x = rnd(4, 6)
    calls = []
    both = _eager_and_compiled(cm, m, calls)
    with torch.no_grad():
        plain = both(x)
        h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
        both(x)
        h2 = m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {**kwargs, "scale": 3.0}),
                                         with_kwargs=True)
        both(x)
        both(x, scale=0.25)
        h3 = cm.register_forward_hook(lambda mod, args, kwargs, out: out * kwargs["scale"], with_kwargs=True)
        assert h3.id in m._forward_hooks          # registered on the original
        both(x, scale=0.5)
        h4 = m.register_forward_hook(lambda mod, args, out: calls.append("after") or None)
        h5 = cm.register_forward_pre_hook(lambda mod, args: calls.append("pre") or None)
        both(x, scale=0.5)
        assert calls == ["pre", "after"] * 2      # compiled (the appends replayed), then eager
        hits = cm._smelt.stats()["hits"]
        for h in (h1, h2, h3, h4, h5):
            h.remove()
        close(both(x), plain)
    st = cm._smelt.stats()
    assert st["eager_entries"] == 0 and st["breaks"] == 0 and st["hits"] == hits + 1, st
    # the hooks (their appends replayed) and the forward are one graph: forward never ran on its own
    assert _C.CompiledFunction.of(Net.forward) is None


def test_hooks_registered_before_compiling():
    m = Net().eval()
    calls = []
    m.register_forward_pre_hook(lambda mod, args, kwargs: calls.append("pre") or ((args[0].flip(0),), kwargs),
                                with_kwargs=True)
    h = m.register_forward_hook(lambda mod, args, out: calls.append("post") or out.abs())
    cm = smelt.compile(m)
    both = _eager_and_compiled(cm, m, calls)
    x = rnd(5, 6)
    with torch.no_grad():
        for _ in range(2):
            both(x)
            assert calls == ["pre", "post"] * 2
            both(x, scale=-2.0)
        close(cm.forward(x), m(x))
        h.remove()
        both(x)
        assert calls == ["pre"] * 2
    st = cm._smelt.stats()
    assert st["breaks"] == 0 and st["eager_entries"] == 0 and st["hits"] >= 2, st
    assert _C.CompiledFunction.of(Net.forward) is None    # hooks and forward traced as one graph


def test_explain_a_module_with_hooks():
    m = Net().eval()
    m.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    with torch.no_grad():
        e = smelt.explain(smelt.compile(m), rnd(2, 6))
    assert e["compiles"] and "matmul(" in e["graph"] and e["graphs"] == 1   # the pre-hook traced in
    m.register_forward_hook(lambda mod, args, out: print("side effect") or None)
    with torch.no_grad():
        e = smelt.explain(smelt.compile(m), rnd(2, 6))
    assert not e["compiles"] and e["partial"] and "print" in e["reason"]
    assert [b["resumes"] for b in e["breaks"]] == [True]   # the call's frame resumes after the module call
    (fwd,) = [f for f in e["frames"] if f["function"] == "Net.forward"]
    assert fwd["compiles"] and "matmul(" in fwd["graph"] and e["graphs"] >= 1


# ---------------------------------------------------------------- CompiledModule: the wrapper

def test_call_and_forward_run_compiled_without_python_frames():
    m = Net().eval()
    cm = smelt.compile(m)
    x = rnd(3, 6)
    with torch.no_grad():
        close(cm(x), m(x))
        close(cm.forward(x, scale=2.0), m(x, scale=2.0))
        assert python_frames(cm, x) == []
        assert python_frames(cm.forward, x) == []
    st = cm._smelt.stats()
    assert st["compiles"] == 2 and st["eager_entries"] == 0 and st["hits"] == 2


def test_train_and_eval_are_the_originals():
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Sequential(nn.ReLU()))
    cm = smelt.compile(m)
    assert cm.eval() is cm
    assert not m.training and not cm.training and all(not s.training for s in m.modules())
    assert cm.train() is cm
    assert m.training and all(s.training for s in m.modules())
    m.eval()                       # changed on the original: seen through the wrapper
    assert not cm.training
    cm.training = True
    assert m.training
    x = rnd(3, 4)
    with torch.no_grad():
        cm.eval()
        close(cm(x), m(x))


def test_attributes_are_the_originals():
    m = Net().eval()
    cm = smelt.compile(m)
    assert cm.lin is m.lin and cm._orig_mod is m
    assert [p is q for p, q in zip(cm.parameters(), m.parameters())] == [True] * 4
    assert [n for n, _ in cm.named_parameters()] == ["_orig_mod." + n for n, _ in m.named_parameters()]
    cm.extra = 3.0
    assert m.extra == 3.0 and "extra" not in cm.__dict__
    del cm.extra
    assert not hasattr(m, "extra")
    assert len(smelt.compile(nn.Sequential(nn.ReLU(), nn.Tanh()))) == 2
    assert "lin" in dir(cm) and "_smelt" in dir(cm)
    assert repr(cm).startswith("smelt.CompiledModule(Net(")
    with pytest.raises(AttributeError):
        cm.no_such_attribute


def test_state_dict_round_trip():
    m, other = Net(), Net()
    cm = smelt.compile(m)
    assert list(cm.state_dict()) == list(m.state_dict())
    cm.load_state_dict(other.state_dict())
    assert torch.equal(m.lin.weight, other.lin.weight)
    x = rnd(2, 6)
    with torch.no_grad():
        close(cm(x), other(x))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # torch's own, importing torch._dynamo
def test_state_dict_of_a_parent_as_torch_compiles():
    """A parent holding a compiled submodule: its state_dict keys are
    torch.compile's (under `_orig_mod.`) and load back into it."""
    class Parent(nn.Module):
        def __init__(self, wrap):
            super().__init__()
            self.sub = wrap(Net())
            self.head = nn.Linear(3, 2)

        def forward(self, x):
            return self.head(self.sub(x))

    p = Parent(smelt.compile)
    assert list(p.state_dict()) == list(Parent(torch.compile).state_dict())
    fresh = Parent(smelt.compile)
    fresh.load_state_dict(p.state_dict())       # strict
    x = rnd(3, 6)
    with torch.no_grad():
        close(fresh(x), p(x))


def test_deepcopy_compiles_the_copy_independently():
    m = Net().eval()
    cm = smelt.compile(m, options={"weight_packing": "never"})
    x = rnd(4, 6)
    with torch.no_grad():
        cm(x)
        cp = copy.deepcopy(cm)
        assert isinstance(cp, smelt.CompiledModule) and cp._orig_mod is not m and cp._smelt is not cm._smelt
        assert cp._smelt_settings == cm._smelt_settings
        assert cp.lin.weight.data_ptr() != m.lin.weight.data_ptr()
        close(cp(x), m(x))
        with torch.no_grad():
            cp.lin.weight.mul_(-1)
        close(cp(x), cp._orig_mod(x))
        close(cm(x), m(x))
    assert cp._smelt.stats()["compiles"] == 1 and cm._smelt.stats()["compiles"] == 1


def test_pickle_rebuilds_a_compiled_module():
    m = Net().eval()
    cm = smelt.compile(m, fullgraph=True)
    back = pickle.loads(pickle.dumps(cm))
    assert isinstance(back, smelt.CompiledModule) and back._smelt_settings.fullgraph
    x = rnd(3, 6)
    with torch.no_grad():
        close(back(x), m(x))
    assert back._smelt.stats()["compiles"] == 1


# ---------------------------------------------------------------- reset

def test_reset_covers_every_compiled_object():
    m = Net().eval()
    x = rnd(2, 6)
    made = [(smelt.compile(m), (x,)), (smelt.compile(torch.sin), (x,)), (smelt.compile(m.decode), (x, 2)),
            (smelt.compile(functools.partial(scaled_sum, x)), (x,)), (smelt.compile(scaled_sum), (x, x))]
    with torch.no_grad():
        for c, args in made:
            c(*args)
            assert c._smelt.stats()["entries"] == 1
        smelt.reset()
        for c, args in made:
            assert c._smelt.stats()["entries"] == 0
            c(*args)
            assert c._smelt.stats()["entries"] == 1
