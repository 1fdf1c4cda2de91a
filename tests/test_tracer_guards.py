"""What the guard tree adds to smelt.compile: recompile reasons that name the
source path, the guard printer (SMELT_LOGS=guards), global state (grad mode,
default dtype), parameters fetched through _modules/_parameters, shadowed
globals and builtins, and entries that own their trees (GC).

SMELT_LOGS is read when smelt._C is imported, so the logging tests run a
fresh interpreter.
"""
import gc
import json
import os
import subprocess
import sys
import textwrap
import weakref

import pytest
import torch
import torch.nn as nn

import smelt

G = torch.Generator().manual_seed(0)


def rnd(*shape):
    return torch.randn(*shape, generator=G)


def run_logged(code, channels):
    """Runs code in a fresh interpreter with SMELT_LOGS=channels; returns the
    messages logged on each channel's "smelt.<channel>" logger as a dict."""
    prologue = textwrap.dedent(f"""
        import json, logging
        import smelt
        msgs = {{}}
        class Keep(logging.Handler):
            def emit(self, record):
                msgs.setdefault(record.name.split(".", 1)[1], []).append(record.getMessage())
        for ch in {channels!r}.split(","):
            logging.getLogger("smelt." + ch).addHandler(Keep())
    """)
    epilogue = "\nprint('@@' + json.dumps(msgs))\n"
    path = os.pathsep.join([os.path.dirname(os.path.abspath(__file__))] + sys.path)
    out = subprocess.run([sys.executable, "-c", prologue + textwrap.dedent(code) + epilogue],
                         capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=path, SMELT_LOGS=channels))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.rsplit("@@", 1)[1])


RECOMPILE_SCRIPT = """
import torch, torch.nn as nn
SCALE = 2.0
def f(x):
    return x * SCALE
cf = smelt.compile(f)
cf(torch.randn(4))
SCALE = 3.0
cf(torch.randn(4))          # global changed
cf(torch.randn(5))          # shape changed

def make(k):
    def g(x):
        return x * k
    return g
cg = smelt._C.CompiledFunction(make(1.5))
cg(torch.randn(3))
cg.fn.__closure__[0].cell_contents = 2.5
cg(torch.randn(3))          # closure cell changed

m = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval()
cm = smelt.compile(m)
with torch.no_grad():
    cm(torch.randn(2, 4))
    m[0].weight = nn.Parameter(torch.randn(4, 3).t())   # new strides: the path is named
    cm(torch.randn(2, 4))

ch = smelt.compile(lambda a: a - 1)
ch(torch.randn(3))
with torch.no_grad():
    ch(torch.randn(3))      # grad mode changed
"""


def test_recompile_reasons_name_the_source_path():
    msgs = run_logged(RECOMPILE_SCRIPT, "recompiles")["recompiles"]
    assert len(msgs) == 5, msgs
    want = [
        "G['SCALE'] == 2.0 failed: got 3.0",
        "L['x'].size()[0] == 4 failed: got 5",
        "L['k'] == 1.5 failed: got 2.5",
        "L['self']._modules['0']._parameters['weight'].stride()[0] == 4 failed: got 1",
        "torch.is_grad_enabled() is True failed: got False",
    ]
    for msg, reason in zip(msgs, want):
        assert msg.startswith("recompiling ") and msg.endswith(": " + reason), (msg, reason)
    assert "f (" in msgs[0] and "g (" in msgs[2] and "Sequential.__call__ (" in msgs[3]   # the compiled call is the module's __call__


def test_guard_printer_for_a_small_module():
    code = """
    import torch, torch.nn as nn
    class Small(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)
            self.scale = 0.5
        def forward(self, x):
            return self.lin(x) * self.scale
    m = Small().eval()
    with torch.no_grad():
        smelt.compile(m)(torch.randn(4, 3))
    """
    (text,) = run_logged(code, "guards")["guards"]
    head, tree = text.split("\n", 1)
    # the compiled call is the module's __call__ (smelt's trampoline self(*args, **kwargs))
    assert head.startswith("new entry of Small.__call__ (") and "guards: " in head
    lines = [ln.strip() for ln in tree.splitlines()]
    for want in ["| torch.is_grad_enabled() is False",
                 "| torch.get_default_dtype() is torch.float32",
                 "L['self']",
                 "| type(L['self']) is Small",
                 "L['self']._modules['lin']",
                 "| type(L['self']._modules['lin']) is Linear",
                 "| L['self']._modules['lin']._forward_hooks in (None, {})",
                 "L['self']._modules['lin']._parameters['weight']",
                 "| L['args'][0] is a Tensor: dtype=torch.float32, device=cpu, requires_grad=False, "
                 "size=(4, 3), stride=(3, 1), contiguous"]:
        assert want in lines, (want, text)
    assert any(ln.startswith("| L['self']._modules['lin']._parameters['weight'] is a Parameter:")
               and "size=(2, 3)" in ln for ln in lines), text
    assert any("scale" in ln and "== 0.5" in ln for ln in lines), text
    # the tree's nesting: a child is indented below its parent
    indent = {ln.strip(): len(ln) - len(ln.lstrip()) for ln in tree.splitlines()}
    assert indent["L['self']._modules['lin']"] > indent["L['self']"]


# ---------------------------------------------------------------- globals and builtins

HELPER_SCALE = 2.0


def helper(a):
    return a * HELPER_SCALE


def calls_helper(a):
    return helper(a) + 1


def test_shadowed_global_function_recompiles():
    global helper
    cf = smelt.compile(calls_helper)
    x = rnd(3)
    torch.testing.assert_close(cf(x), x * 2 + 1)
    old = helper
    helper = lambda a: a * 10   # noqa: E731
    try:
        torch.testing.assert_close(cf(x), x * 10 + 1)
    finally:
        helper = old
    torch.testing.assert_close(cf(x), x * 2 + 1)
    st = cf._smelt.stats()
    assert st["compiles"] == 2 and st["hits"] == 1, st


def uses_builtin(a):
    return a * abs(-2)


def test_shadowed_builtin_recompiles():
    ns = {"__builtins__": __builtins__}
    exec("def f(a):\n    return a * abs(-2)\n", ns)
    cf = smelt.compile(ns["f"])
    x = rnd(3)
    torch.testing.assert_close(cf(x), x * 2)
    ns["abs"] = lambda v: 10
    torch.testing.assert_close(cf(x), x * 10)


# ---------------------------------------------------------------- global state

def test_grad_mode_is_part_of_every_entry():
    """An entry only matches in the grad mode it was traced in; entries
    whose inputs require grad compile a backward with grad and none without."""
    cf = smelt.compile(lambda a: a * 3)
    x = rnd(4)
    cf(x)
    with torch.no_grad():
        cf(x)
    cf(x)
    st = cf._smelt.stats()
    assert st["entries"] == 2 and st["hits"] == 1, st

    m = nn.Linear(4, 2)
    cm = smelt.compile(m)
    xi = rnd(3, 4)
    for _ in range(2):
        y = cm(xi)
        assert y.requires_grad
        with torch.no_grad():
            torch.testing.assert_close(cm(xi), m(xi))
    st = cm._smelt.stats()
    assert st["entries"] == 2 and st["eager_entries"] == 0 and st["hits"] == 2 and st["backward_compiles"] == 1, st


def test_default_dtype_change_recompiles():
    cf = smelt.compile(lambda a: a + 1)
    x = rnd(3)
    cf(x)
    torch.set_default_dtype(torch.float64)
    try:
        cf(x)
    finally:
        torch.set_default_dtype(torch.float32)
    cf(x)
    st = cf._smelt.stats()
    assert st["entries"] == 2 and st["hits"] == 1, st


def test_default_dtype_followed_by_factories():
    cf = smelt.compile(lambda a: a + torch.ones(3))
    x = rnd(3)
    cf(x)
    torch.set_default_dtype(torch.float64)
    try:
        assert cf(x).dtype == (x + torch.ones(3)).dtype
    finally:
        torch.set_default_dtype(torch.float32)


# ---------------------------------------------------------------- modules and parameters

class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 5)
        self.b = nn.Linear(5, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_parameters_are_fetched_through_modules_and_parameters():
    """A parameter replaced by a new one of the same shape is a graph input
    fetched along L['self']._modules[..]._parameters[..]: no recompile, and
    the new values are used."""
    m = Two().eval()
    cm = smelt.compile(m)
    x = rnd(3, 6)
    with torch.no_grad():
        torch.testing.assert_close(cm(x), m(x))
        m.a.weight = nn.Parameter(rnd(5, 6))
        m.b.bias = nn.Parameter(rnd(4))
        torch.testing.assert_close(cm(x), m(x))
        m.a.weight = nn.Parameter(rnd(5, 6).t().contiguous().t())   # same shape, new strides
        torch.testing.assert_close(cm(x), m(x))
    st = cm._smelt.stats()
    assert st["compiles"] == 2 and st["hits"] == 1, st


def test_replaced_submodule_type_recompiles():
    m = Two().eval()
    cm = smelt.compile(m)
    x = rnd(3, 6)
    with torch.no_grad():
        cm(x)
        m.b = nn.Sequential(nn.Linear(5, 4))
        torch.testing.assert_close(cm(x), m(x))
    assert cm._smelt.stats()["entries"] == 2


# ---------------------------------------------------------------- closures, code, GC

def test_closure_cells_are_guarded_by_content():
    def make(k):
        def g(a):
            return a * k
        return g

    g = make(2.0)
    cf = smelt.compile(g)
    x = rnd(3)
    torch.testing.assert_close(cf(x), x * 2)
    g.__closure__[0].cell_contents = 4.0
    torch.testing.assert_close(cf(x), x * 4)
    g.__closure__[0].cell_contents = 2.0
    torch.testing.assert_close(cf(x), x * 2)
    st = cf._smelt.stats()
    assert st["compiles"] == 2 and st["hits"] == 1, st


def test_replaced_code_drops_entries():
    def f(a):
        return a + 1

    cf = smelt.compile(f)
    x = rnd(3)
    torch.testing.assert_close(cf(x), x + 1)
    f.__code__ = (lambda a: a * 5).__code__
    torch.testing.assert_close(cf(x), x * 5)
    assert cf._smelt.stats()["entries"] == 1


def test_entries_own_their_trees_and_cycles_are_collected():
    """The tree of an entry keeps what it compares with alive; a cycle that
    runs through a tree (compiled function -> tree -> guarded global ->
    its globals -> compiled function) is collected."""
    ns = {"__builtins__": __builtins__}
    exec("def helper(a):\n    return a * 3\n"
         "def f(a):\n    return helper(a) + 1\n", ns)
    cf = smelt._C.CompiledFunction(ns["f"])
    ns["cf"] = cf
    x = rnd(3)
    torch.testing.assert_close(cf(x), x * 3 + 1)
    assert cf.stats()["compiles"] == 1
    ref = weakref.ref(cf)
    del cf, ns
    gc.collect()
    assert ref() is None


class StrKey(str):
    pass


def test_source_the_tree_cannot_express_runs_eagerly():
    """A **kwargs key that is a str subclass has no dict-item node: the entry
    runs eagerly (correctly) and never matches, so the limit bounds retracing."""
    def f(a, **kw):
        return a + kw["b"]

    cf = smelt.compile(f)
    x, b = rnd(3), rnd(3)
    for _ in range(2):
        torch.testing.assert_close(cf(x, **{StrKey("b"): b}), x + b)
    st = cf._smelt.stats()
    assert st["eager_entries"] == 2 and "guards could not be built" in st["last_break"], st
    torch.testing.assert_close(cf(x, b=b), x + b)
    assert cf._smelt.stats()["compiles"] == 1


def test_global_forward_hook_registered_after_compiling_is_seen():
    """A global module hook registered after the first call recompiles (the
    trace read the global hook dicts) and its effect shows, as in eager;
    removing it goes back to the first entry."""
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
    cm = smelt.compile(model)
    x = rnd(3, 4)
    with torch.no_grad():
        first = cm(x)
        h = nn.modules.module.register_module_forward_hook(lambda mod, i, o: o + 7)
        try:
            torch.testing.assert_close(cm(x), model(x))
            assert not torch.equal(cm(x), first)
        finally:
            h.remove()
        torch.testing.assert_close(cm(x), first)
    st = cm._smelt.stats()
    assert st["entries"] == 2 and st["hits"] >= 2, st


def test_autocast_compiles_its_own_entry_and_is_guarded():
    """Under CPU autocast the compiled function compiles an entry of its own
    with autocast's casts (same dtypes and values as eager autocast);
    outside it the first entry is used (tests/test_autocast.py has more)."""
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU()).eval()
    cm = smelt.compile(model)
    x = rnd(5, 8)
    with torch.no_grad():
        plain = cm(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, want = cm(x), model(x)
        assert got.dtype == want.dtype == torch.bfloat16
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(cm(x), plain)
    st = cm._smelt.stats()
    assert st["entries"] == 2 and st["eager_entries"] == 0, st


def test_reset_drops_entries_made_by_the_frame_hook():
    """A helper compiled through the hook (its caller breaks the graph) loses
    its entries on smelt.reset()."""
    def helper(a):
        return a * 2 + 1

    def outer(a):
        for _ in range(1):
            print(end="")   # a graph break in a loop: outer runs eagerly under the hook
        return helper(a)

    cf = smelt.compile(outer)
    x = rnd(6)
    torch.testing.assert_close(cf(x), x * 2 + 1)
    hooked = smelt._C.CompiledFunction.of(helper)
    assert hooked is not None and hooked.stats()["entries"] == 1
    smelt.reset()
    assert hooked.stats()["entries"] == 0
    torch.testing.assert_close(cf(x), x * 2 + 1)
    assert hooked.stats()["entries"] == 1
