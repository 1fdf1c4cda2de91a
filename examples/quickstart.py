"""smelt quickstart: softmax through the internal graph API.

Builds softmax over the last dim (amax, sub, exp, sum, div) as a smelt graph,
compiles it, checks it against torch.softmax on a random 1000x1000 float32
tensor and times both. Exits non-zero if the results differ.
"""
import sys
import time

import torch

import smelt
from smelt import _C as C


def softmax_graph(shape):
    """x -> exp(x - amax(x)) / sum(exp(x - amax(x))) over the last dim."""
    g = C.Graph()
    x = g.input(torch.float32, shape)
    last = len(shape) - 1
    m = g.op("amax", x, dims=last, keepdim=True)
    e = g.op("exp", g.op("sub", x, m))
    s = g.op("sum", e, dims=last, keepdim=True)
    g.output(g.op("div", e, s))
    return g


def best_ms(fn, runs=10):
    """Best wall time of fn() over runs calls, after one warm-up, in ms."""
    fn()
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main():
    torch.manual_seed(0)
    x = torch.randn(1000, 1000) * 4
    g = softmax_graph(tuple(x.shape))
    print(f"smelt {smelt.__version__}: graph of {len(g)} nodes")
    t = time.perf_counter()
    try:
        f = g.compile()
    except RuntimeError as e:
        sys.exit(f"compile failed: {e}")
    compile_ms = (time.perf_counter() - t) * 1e3
    (out,) = f(x)
    ref = torch.softmax(x, dim=-1)
    err = (out - ref).abs().max().item()
    ok = torch.allclose(out, ref, rtol=1e-5, atol=1e-6)
    print(f"max abs error vs torch.softmax: {err:.3g}  {'OK' if ok else 'MISMATCH'}")
    smelt_ms = best_ms(lambda: f(x))
    torch_ms = best_ms(lambda: torch.softmax(x, dim=-1))
    print(f"compile {compile_ms:.1f} ms; {f.num_kernels} kernel(s), {f.num_externs} extern call(s)")
    print(f"run: smelt {smelt_ms:.3f} ms, torch {torch_ms:.3f} ms "
          f"({torch_ms / smelt_ms:.2f}x) with {torch.get_num_threads()} thread(s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
