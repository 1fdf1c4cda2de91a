"""The plan executor's arena: temporaries packed by liveness into one block
that later runs reuse. Runs of one plan at the same time (the GIL is
released while a plan runs) each get their own arena, and chains whose
temporaries share bytes still compute torch's values."""
import threading

import torch

import smelt._C as C


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
    errors = []

    def worker(k):
        try:
            for _ in range(20):
                torch.testing.assert_close(f(*inputs[k])[0], want[k], rtol=1e-4, atol=1e-5)
        except Exception as e:   # collected: asserted below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
