#!/usr/bin/env python3
"""Tracer benchmarks: per-call overhead and first-call (trace + compile) time,
eager vs smelt vs torch.compile (inductor), in one run.

  call     per-call time of a compiled `x + 1` on a 16-element tensor
  layersN  first call (trace + compile, fresh compiled object) of an N-layer
           transformer-style decoder (width 64, 4 heads, sequence 16), and its
           steady-state latency

Inductor's first call is measured with a fresh cache directory per model
(each compiler's one-time process start-up is taken before timing). Usage:
  python3 benchmarks/tracer.py [--quick] [--no-inductor] [--json PATH]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import smelt  # noqa: E402


class Block(nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q = q.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Decoder(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(n)])
        self.norm = nn.LayerNorm(64)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.norm(x)


def median_time(fn, n):
    fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def bench_call(n, use_inductor):
    x = torch.randn(16)
    f = lambda a: a + 1  # noqa: E731
    sf = smelt.compile(f)
    row = {"name": "call x+1", "eager_us": median_time(lambda: f(x), n) * 1e6,
           "smelt_us": median_time(lambda: sf(x), n) * 1e6}
    if use_inductor:
        cf = torch.compile(f)
        cf(x)
        row["inductor_us"] = median_time(lambda: cf(x), n) * 1e6
    return row


def first_call_smelt(model, x):
    t = time.perf_counter()
    cm = smelt.compile(model)
    with torch.no_grad():
        y = cm(x)
    return time.perf_counter() - t, cm, y


def first_call_inductor(model, x):
    torch._dynamo.reset()
    with tempfile.TemporaryDirectory() as d:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = d
        t = time.perf_counter()
        cm = torch.compile(model)
        with torch.no_grad():
            y = cm(x)
        return time.perf_counter() - t, cm, y


def bench_layers(depths, n, use_inductor):
    rows = []
    for depth in depths:
        torch.manual_seed(0)
        model = Decoder(depth).eval()
        x = torch.randn(2, 16, 64)
        with torch.no_grad():
            ref = model(x)
            eager = median_time(lambda: model(x), n)
        t_s, cm, y = first_call_smelt(model, x)
        err = (y - ref).abs().max().item()
        with torch.no_grad():
            steady = median_time(lambda: cm(x), n)
        st = cm._smelt.stats()
        row = {"name": f"layers{depth}", "smelt_first_s": t_s, "smelt_ms": steady * 1e3,
               "eager_ms": eager * 1e3, "err": err, "compiled": st["compiles"] == 1 and not st["eager_entries"]}
        if use_inductor:
            t_i, ci, yi = first_call_inductor(model, x)
            with torch.no_grad():
                row["inductor_ms"] = median_time(lambda: ci(x), n) * 1e3
            row["inductor_first_s"] = t_i
        rows.append(row)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    use_ind = not args.no_inductor
    n = 200 if args.quick else 2000
    if use_ind:   # inductor's one-time start-up, not counted
        torch.compile(lambda a: a * 2)(torch.randn(4))
    smelt.compile(lambda a: a * 2)(torch.randn(4))   # smelt's (LLVM JIT start-up), likewise
    call = bench_call(n, use_ind)
    layers = bench_layers([1, 12] if args.quick else [1, 12, 32], 20 if args.quick else 50, use_ind)
    print(f"threads: torch {torch.get_num_threads()}, smelt {smelt._C.get_num_threads()}")
    print(f"\nper-call time, x + 1 on 16 floats (us):   eager {call['eager_us']:.2f}   smelt {call['smelt_us']:.2f}"
          + (f"   inductor {call['inductor_us']:.2f}" if use_ind else "")
          + f"   smelt/eager {call['smelt_us'] / call['eager_us']:.2f}"
          + (f"   smelt/inductor {call['smelt_us'] / call['inductor_us']:.2f}" if use_ind else ""))
    print("\nfirst call (trace + compile) and steady-state latency, decoder width 64, seq 16, batch 2")
    print(f"{'model':9} {'smelt 1st s':>11} {'ind 1st s':>10} {'ind/smelt':>9} {'eager ms':>9} {'smelt ms':>9} "
          f"{'ind ms':>8} {'smelt/eager':>11} {'max err':>9} compiled")
    for r in layers:
        ind1 = r.get("inductor_first_s")
        print(f"{r['name']:9} {r['smelt_first_s']:11.3f} {ind1 if ind1 else float('nan'):10.2f} "
              f"{(ind1 / r['smelt_first_s']) if ind1 else float('nan'):9.1f} {r['eager_ms']:9.3f} "
              f"{r['smelt_ms']:9.3f} {r.get('inductor_ms', float('nan')):8.3f} "
              f"{r['smelt_ms'] / r['eager_ms']:11.2f} {r['err']:9.1e} {r['compiled']}")
    by = {r["name"]: r for r in layers}
    if "layers32" in by:
        print(f"\n32-layer / 1-layer first call: {by['layers32']['smelt_first_s'] / by['layers1']['smelt_first_s']:.1f}x (target <= 3x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"call": call, "layers": layers}, f, indent=1)
    return 0 if all(r["compiled"] and r["err"] < 1e-3 for r in layers) else 1


if __name__ == "__main__":
    sys.exit(main())
