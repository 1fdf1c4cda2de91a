"""The plan executor's arena: temporaries packed by liveness into one block
that later runs reuse. Runs of one plan at the same time (the GIL is
released while a plan runs) each get their own arena, and chains whose
temporaries share bytes still compute torch's values."""
import torch

import smelt._C as C
from conftest import in_threads


def chain_graph(shape, n):
    """x -> n matmuls with a pointwise op between them: every intermediate
    is a temporary; non-adjacent ones can share arena bytes."""
    g = C.Graph()
    x = g.input(torch.float32, shape)
    w = g.input(torch.float32, (shape[-1], shape[-1]))
    v = x
    for i in range(n):
        v = g.op("matmul", v, w)
        v = g.op("tanh", g.op("mul", v, g.scalar(0.5 + i / 10)))
    g.output(v)
    return g


def chain_ref(x, w, n):
    v = x
    for i in range(n):
        v = torch.tanh((v @ w) * (0.5 + i / 10))
    return v


def test_temporaries_sharing_bytes_keep_values():
    x, w = torch.randn(37, 65), torch.randn(65, 65) / 8
    f = chain_graph((37, 65), 6).compile()
    for _ in range(3):   # the second and third runs reuse the cached arena
        torch.testing.assert_close(f(x, w)[0], chain_ref(x, w, 6), rtol=1e-4, atol=1e-5)


def test_concurrent_runs_of_one_plan():
    f = chain_graph((129, 64), 5).compile()
    inputs = [(torch.randn(129, 64), torch.randn(64, 64) / 8) for _ in range(4)]
    want = [chain_ref(x, w, 5) for x, w in inputs]
    in_threads(lambda k: torch.testing.assert_close(f(*inputs[k])[0], want[k], rtol=1e-4, atol=1e-5),
               [(k,) for k in range(4)], reps=20)


def test_host_results_that_view_their_inputs_are_copied():
    """A host call's result memory is used in place unless it views an
    input: here narrow() views a temporary whose arena bytes a later
    temporary reuses, and t() is not contiguous; both must keep values."""
    g = C.Graph()
    x = g.input(torch.float32, (6, 5))
    y = g.input(torch.float32, (6, 5))
    t = g.op("mul", x, g.scalar(2.0))                      # temporary
    (r,) = g.call(torch.narrow, [t], (C.Slot(0), 0, 1, 3))  # a view of it
    (tt,) = g.call(torch.t, [t], (C.Slot(0),))             # not contiguous
    w = g.input(torch.float32, (5, 5))
    u = g.op("matmul", y, w)                               # a temporary in t's bytes
    g.output(g.op("add", r, g.op("slice", u, dim=0, start=0, end=3)), tt)
    f = g.compile()
    xs, ys, ws = torch.randn(6, 5), torch.randn(6, 5), torch.randn(5, 5)
    for _ in range(3):
        a, b = f(xs, ys, ws)
        torch.testing.assert_close(a, (xs * 2)[1:4] + (ys @ ws)[:3])
        torch.testing.assert_close(b, (xs * 2).t())


def test_step_profile():
    """With profiling on, each step's time is counted; the text names the
    matmul and the kernels, slowest first, and resets on request."""
    f = chain_graph((64, 32), 2).compile()
    x, w = torch.randn(64, 32), torch.randn(32, 32)
    C.set_profiling(True)
    try:
        for _ in range(3):
            f(x, w)
    finally:
        C.set_profiling(False)
    f(x, w)   # not counted
    text = f.profile(reset=True)
    head, *lines = text.splitlines()
    assert head.startswith("3 runs, ")
    assert len(lines) == 4 and sum("matmul [..64,32]@[..32,32] float32" in ln for ln in lines) == 2
    ms = [float(ln.split()[0]) for ln in lines]
    assert ms == sorted(ms, reverse=True) and ms[0] > 0
    assert f.profile().startswith("0 runs, ")


def test_identical_kernels_share_code_across_compiles(gen):
    """A second compile of the same graph generates no code (the process-wide
    kernel registry), keep_code=True generates it again, and each plan keeps
    working after the others are freed."""
    import gc

    import random
    c = 0.25 + random.random()   # a constant no earlier compile (or the disk cache) has seen

    def build():
        g = C.Graph()
        x = g.input(torch.float32, (37, 19))
        g.output(g.op("exp", g.op("add", x, g.scalar(c))), g.op("amax", g.op("mul", x, g.scalar(c)), dims=[1]))
        return g

    x = torch.randn(37, 19, generator=gen)
    ref = [torch.exp(x + c), (x * c).amax(1)]
    f1 = build().compile()
    f2 = build().compile()
    f3 = build().compile(keep_code=True)
    assert f1.num_kernels == 2 and f1.num_generated == 2
    assert f2.num_generated == 0
    assert f3.num_generated == 2 and "define" in f3.code("ir")
    del f1
    gc.collect()
    for f in (f2, f3):
        for o, r in zip(f(x), ref):
            torch.testing.assert_close(o, r)
    del f2
    gc.collect()
    for o, r in zip(f3(x), ref):
        torch.testing.assert_close(o, r)
