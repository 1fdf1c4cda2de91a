"""The PEP 523 frame hook (tracer/eval_frame.c) through smelt._C's test
functions: _hook_install(on_frame, run_default) enters the hook on this
thread, on_frame(code, values) is called for every frame offered and its
result replaces the frame's, unless it returns run_default (the frame then
runs normally); _hook_uninstall() leaves it and returns the count offered.

The reference for every result is the same call without the hook."""
import colorsys
import gc
import importlib
import json
import os
import sys
import sysconfig
import threading
import traceback

import pytest

try:
    import smelt._C as C
except ImportError:  # not installed: use the in-tree package (built in place)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
    import smelt._C as C  # noqa: E402

RUN = object()   # on_frame's answer "run the frame normally"


class Hook:
    """with Hook(replace={code: value}) as h: ... runs the block under the
    hook; h.seen lists the codes offered (h.values their variable values,
    h.threads the thread ids). A replacement that is an exception instance
    is raised by on_frame; a callable is called with the values."""

    def __init__(self, replace=None, also=None):
        self.replace = replace or {}
        self.also = also              # called on every frame, inside on_frame
        self.seen, self.values, self.threads = [], [], []
        self.offered = None

    def __call__(self, code, values):
        self.seen.append(code)
        self.values.append(values)
        self.threads.append(threading.get_ident())
        if self.also:
            self.also()
        r = self.replace.get(code, RUN)
        if isinstance(r, BaseException):
            raise r
        return r(values) if callable(r) else r

    def __enter__(self):
        C._hook_install(self, RUN)
        return self

    def __exit__(self, *exc):
        self.offered = C._hook_uninstall()

    def names(self):
        """co_name of the offered frames of this file (not Hook's own)."""
        return [c.co_name for c in self.seen
                if c.co_filename == __file__ and c.co_qualname.split(".")[0] != "Hook"]


def slot_names(code):
    """Variable names in frame-slot order (co_localsplusnames)."""
    cells = [c for c in code.co_cellvars if c not in code.co_varnames]
    return list(code.co_varnames) + cells + list(code.co_freevars)


# ---------------------------------------------------------------- user code

def add1(x):
    return x + 1


def leaf(x):
    return x * 2


def mid(x):
    return leaf(x) + leaf(x + 1)


def top(x):
    return mid(x) + 1


def signature(a, b=2, *args, c, d=4, **kw):
    return (a, b, args, c, d, kw)


def outer(x, y):
    z = 10

    def inner(a):
        return a + x + z
    return inner


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def boom(x):
    return inner_boom(x)


def inner_boom(x):
    raise ValueError(f"bad {x}")


def ident(x):
    return x


# ---------------------------------------------------------------- results

def test_replacement_is_the_result_and_body_does_not_run():
    ran = []

    def body(x):
        ran.append(x)
        return x

    with Hook(replace={body.__code__: 42}) as h:
        r = body(1)
    assert r == 42 and ran == [] and h.names() == ["body"] and h.offered >= 1
    assert body(1) == 1 and ran == [1]


def test_run_default_gives_normal_results():
    with Hook() as h:
        got = [add1(1), top(3), signature(1, c=3), signature(1, 5, 6, 7, c=8, e=9),
               outer(1, 2)(5), fib(10)]
    assert got == [2, 15, (1, 2, (), 3, 4, {}), (1, 5, (6, 7), 8, 4, {"e": 9}), 16, 55]
    assert h.names()[:2] == ["add1", "top"]


def test_values_are_the_bound_arguments():
    with Hook() as h:
        signature(1, 5, 6, c=8, e=9)
        inner = outer(1, 2)
        inner(5)
    by_code = {}
    for code, values in zip(h.seen, h.values):
        by_code.setdefault(code.co_name, dict(zip(slot_names(code), values)))
    assert by_code["signature"] == {"a": 1, "b": 5, "c": 8, "d": 4, "args": (6,), "kw": {"e": 9}}
    # cells hold their initial value (x is an argument, z not yet assigned)
    assert by_code["outer"] == {"x": 1, "y": 2, "z": None, "inner": None}
    # free variables read through the closure's cells
    assert by_code["inner"] == {"a": 5, "x": 1, "z": 10}


def test_replacement_with_arguments_recursion():
    """Leaves of fib replaced by on_frame, the rest run normally."""
    small = lambda values: values[0] if values[0] < 2 else RUN  # noqa: E731
    with Hook(replace={fib.__code__: small}) as h:
        r = fib(12)
    assert r == 144
    assert h.names().count("fib") == 465   # every call of fib(12) offered


def wide(n):
    """A function with a big frame (many variables)."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = a8 = a9 = n
    b0 = b1 = b2 = b3 = b4 = b5 = b6 = b7 = b8 = b9 = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8
    return (b0 + b1 + b2 + b3 + b4 + b5 + b6 + b7 + b8 + b9) * 0 + a9 * 3


def deep(n):
    return wide(n) + (deep(n - 1) if n else 0)


def test_replaced_frames_at_every_depth():
    """Replaced frames at depths 0..600: some of them start a new chunk of
    the thread's frame stack, which is then freed (3.12)."""
    want = deep(600)
    with Hook(replace={wide.__code__: lambda values: values[0] * 3}) as h:
        for _ in range(3):
            assert deep(600) == want
    assert h.names().count("wide") == 3 * 601


def test_nested_calls_seen_but_not_calls_made_by_on_frame():
    active = []

    def also():
        active.append(C._hook_active())
        leaf(0)                      # a user call from inside on_frame

    with Hook(also=also) as h:
        r = top(1)
    assert r == 7
    assert h.names() == ["top", "mid", "leaf", "leaf"]
    assert active and not any(active)


def test_module_and_class_bodies_not_offered_but_their_calls_are():
    ns = {"add1": add1}
    with Hook() as h:
        exec(compile("class K:\n    v = add1(1)\nr = add1(K.v)\n", "<user>", "exec"), ns)
    assert ns["r"] == 3
    assert h.names() == ["add1", "add1"]


# ---------------------------------------------------------------- exceptions

def tb_tail(e):
    return [(f.name, f.lineno, f.line) for f in traceback.extract_tb(e.__traceback__)][1:]


def test_exceptions_in_user_code_propagate_with_traceback():
    with pytest.raises(ValueError, match="bad 3") as plain:
        boom(3)
    with Hook() as h:
        with pytest.raises(ValueError, match="bad 3") as hooked:
            boom(3)
    assert h.names() == ["boom", "inner_boom"]
    assert tb_tail(hooked.value) == tb_tail(plain.value)
    assert [n for n, _, _ in tb_tail(hooked.value)] == ["boom", "inner_boom"]


def test_exception_from_on_frame_propagates_and_body_does_not_run():
    ran = []

    def body(x):
        ran.append(x)

    def caller(x):
        return body(x)

    with Hook(replace={body.__code__: KeyError("from on_frame")}):
        with pytest.raises(KeyError, match="from on_frame") as e:
            caller(1)
    assert ran == []
    assert "caller" in [f.name for f in traceback.extract_tb(e.value.__traceback__)]
    assert caller(2) is None and ran == [2]


def test_none_from_on_frame_is_a_result():
    with Hook(replace={add1.__code__: None}):
        assert add1(1) is None


# ---------------------------------------------------------------- skipping

def _under(path, d):
    d = os.path.join(os.path.realpath(d), "")
    return os.path.realpath(path).startswith(d)


def test_torch_stdlib_smelt_frozen_code_not_offered():
    torch = pytest.importorskip("torch")
    import smelt

    def helper(x):
        return torch.relu(x) + len(json.dumps([1, 2])) + colorsys.rgb_to_hsv(0.5, 0.2, 0.1)[2]

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def forward(self, x):
            return helper(self.lin(x))

    net = Net()
    x = torch.randn(2, 4)
    want = net(x)
    with Hook() as h:
        got = net(x)
        importlib.reload(colorsys)   # import machinery: frozen + stdlib code
    assert torch.equal(got, want)
    assert h.names() == ["forward", "helper"]   # reached through torch's __call__
    torch_dir = os.path.dirname(torch.__file__)
    stdlib = sysconfig.get_paths()["stdlib"]
    for code in h.seen:
        f = code.co_filename
        assert not _under(f, torch_dir) and not f.startswith("<frozen"), f
        assert not _under(f, stdlib) or "-packages" in f, f
    for fn in (json.dumps, threading.Thread.start, torch.nn.Module._call_impl,
               torch.nn.functional.relu, smelt._configure_logging,
               importlib._bootstrap._find_and_load):   # <frozen importlib._bootstrap>
        assert C._hook_skipped(fn.__code__), fn
    for fn in (add1, Net.forward, pytest.raises):   # user code, site-packages
        assert not C._hook_skipped(fn.__code__), fn


def test_generators_and_coroutines_not_offered():
    def gen(n):
        yield from range(n)

    async def coro(x):
        return x + 1

    async def agen():
        yield 5

    def user(n):
        return sum(i * i for i in gen(n))

    def drive(aw):
        try:
            aw.send(None)
        except StopIteration as e:
            return e.value
        raise AssertionError("did not finish")

    with Hook() as h:
        r = (user(4), drive(coro(1)), drive(agen().__anext__()))
    assert r == (14, 2, 5)
    assert h.names() == ["user", "drive", "drive"]
    for code in (gen.__code__, coro.__code__, agen.__code__):
        assert C._hook_skipped(code)


def test_recursion_limit_still_raises_and_hook_survives():
    def down(n):
        return down(n + 1)

    with Hook() as h:
        with pytest.raises(RecursionError):
            down(0)
        assert fib(8) == 21
    assert h.names().count("down") > 100
    assert not C._hook_installed()


# ---------------------------------------------------------------- install / uninstall

def test_uninstall_stops_interception_and_restores_default():
    assert not C._hook_installed() and not C._hook_active()
    with Hook() as h:
        assert C._hook_installed() and C._hook_active()
        add1(1)
    assert not C._hook_installed() and not C._hook_active()
    n = len(h.seen)
    for i in range(100):
        add1(i)
    assert len(h.seen) == n and h.offered == n
    with pytest.raises(RuntimeError):
        C._hook_uninstall()


def test_nested_hooks_restore_the_outer_one():
    with Hook() as out:
        with Hook() as inn:
            add1(1)
        assert C._hook_installed()
        leaf(1)
    assert inn.names() == ["add1"] and out.names() == ["leaf"]
    assert not C._hook_installed()


def test_c_callback_declining_every_frame():
    C._hook_install(None)
    try:
        r = fib(10)
    finally:
        n = C._hook_uninstall()
    assert r == 55 and n >= 177


# ---------------------------------------------------------------- threads

def test_other_thread_without_callback_not_intercepted():
    results = []

    def work():
        results.append([add1(i) for i in range(200)])

    with Hook() as h:
        t = threading.Thread(target=work)
        t.start()
        t.join()
        add1(0)
    assert results == [[i + 1 for i in range(200)]]
    assert set(h.threads) == {threading.get_ident()}
    assert h.names() == ["add1"]


def test_threads_with_their_own_callbacks_concurrently():
    n, hooks, errors = 3000, {}, []
    barrier = threading.Barrier(2)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)

    def work(name, fn, arg, want):
        try:
            with Hook() as h:
                hooks[name] = h
                barrier.wait()
                assert all(fn(arg) == want for _ in range(n))
        except BaseException as e:   # noqa: BLE001 (reported below)
            errors.append(e)

    try:
        ts = [threading.Thread(target=work, args=("a", add1, 1, 2)),
              threading.Thread(target=work, args=("b", leaf, 3, 6))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    assert hooks["a"].names().count("add1") == n and "leaf" not in hooks["a"].names()
    assert hooks["b"].names().count("leaf") == n and "add1" not in hooks["b"].names()
    assert len(set(hooks["a"].threads)) == 1 and hooks["a"].threads[0] != hooks["b"].threads[0]
    assert not C._hook_installed()


# ---------------------------------------------------------------- leaks, co_extra

def test_no_leaks_over_many_calls():
    x, val, bad = object(), object(), object()
    code = ident.__code__

    def on_frame(c, values):
        if c is code and values[0] is x:
            return val
        if c is code and values[0] is bad:
            raise KeyError("k")
        return RUN

    def run(n):
        C._hook_install(on_frame, RUN)
        try:
            for i in range(n):
                assert ident(x) is val
                assert ident(x=i) == i
                try:
                    ident(bad)
                except KeyError:
                    pass
        finally:
            C._hook_uninstall()

    objs = (x, val, bad, ident, code, on_frame, RUN)
    run(1000)   # warm up caches
    gc.collect()
    refs = [sys.getrefcount(o) for o in objs]
    blocks = sys.getallocatedblocks()
    run(100_000)
    gc.collect()
    assert [sys.getrefcount(o) for o in objs] == refs
    assert sys.getallocatedblocks() - blocks < 1000


def test_code_extra_storage_is_released_with_the_code():
    ns = {}
    exec("def f():\n    return 1\n", ns)
    code = ns["f"].__code__
    a, b = object(), object()
    ra, rb = sys.getrefcount(a), sys.getrefcount(b)
    assert C._code_extra_get(code) is None
    C._code_extra_set(code, a)
    assert sys.getrefcount(a) == ra + 1
    assert C._code_extra_get(code) is a
    C._code_extra_set(code, b)            # replacing frees the old entry
    assert sys.getrefcount(a) == ra
    assert C._hook_skipped(code) is False  # the skip cache uses its own slot
    assert C._code_extra_get(code) is b
    del ns, code
    gc.collect()
    assert sys.getrefcount(b) == rb       # freed with the code object
