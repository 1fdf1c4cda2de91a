#!/usr/bin/env python3
"""Transcendental functions: eager vs smelt vs torch.compile (inductor), CPU.

Each function alone on 16M float32 (and a fused chain mixing them), the
best time of 15 calls of each compiler (each in its own process) at 1 and
2 threads, the ratio to smelt's own
relu on the same tensor (the memory roof: what a pointwise kernel costs
with no math at all), and each compiler's max error in ULP against float64
on a sample (every 4096th float32 bit pattern, 2^20 inputs of every
binade, plus normal(0, 3) values) where eager's own error is at most 4 ULP.
benchmarks/ulp_sweep.py checks the full contract.

Usage: python3 benchmarks/vmath_bench.py [--quick] [--threads 1,2]
                                         [--only tanh,erf] [--no-inductor]
                                         [--json PATH]
"""
import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ulp_sweep  # noqa: E402

# name -> (function, domain transform applied to the timing input)
CASES = {
    "relu": (torch.relu, None),
    "exp": (torch.exp, None), "expm1": (torch.expm1, None), "exp2": (torch.exp2, None),
    "log": (torch.log, torch.abs), "log1p": (torch.log1p, torch.abs), "log2": (torch.log2, torch.abs),
    "tanh": (torch.tanh, None), "sigmoid": (torch.sigmoid, None), "erf": (torch.erf, None),
    "erfc": (torch.erfc, None), "gelu": (F.gelu, None), "gelu_tanh": (ulp_sweep.FUNCTIONS["gelu_tanh"], None),
    "silu": (F.silu, None), "softplus": (F.softplus, None), "mish": (F.mish, None),
    "sin": (torch.sin, None), "cos": (torch.cos, None), "tan": (torch.tan, None),
    "atan": (torch.atan, None), "asin": (torch.asin, lambda x: x * 0.3), "acos": (torch.acos, lambda x: x * 0.3),
    "sinh": (torch.sinh, None), "cosh": (torch.cosh, None), "asinh": (torch.asinh, None),
    "acosh": (torch.acosh, lambda x: x.abs() + 1), "atanh": (torch.atanh, lambda x: x * 0.3),
    "chain": (lambda x: torch.tanh(x) * torch.sigmoid(x) + torch.erf(x) * torch.sin(x) - torch.exp(-x.abs()),
              None),
}
ROOF_1_3 = {"exp", "tanh", "sigmoid", "erf", "gelu", "silu"}   # target: <= 1.3x relu, else 1.8x


def sample():
    """Float32 inputs for the error columns (finite, every binade)."""
    bits = ulp_sweep.inputs(4096, 0)
    x = torch.cat([bits, torch.randn(1 << 18, generator=torch.Generator().manual_seed(0)) * 3])
    return x[torch.isfinite(x)]


def max_ulp(fn_name, got, x, eager_err):
    """Max ULP of got over the inputs where eager's error is at most 4."""
    fn = CASES[fn_name][0]
    ref = ulp_sweep.REFERENCES.get(fn_name, fn)(x.double())
    e = ulp_sweep.ulp_error(got, ref)
    keep = eager_err <= 4 if eager_err is not None else torch.ones_like(e, dtype=torch.bool)
    return float(e[keep].max()) if keep.any() else 0.0


def timed(f, x, reps):
    f(x)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f(x)
        ts.append(time.perf_counter() - t)
    return min(ts) * 1e3   # best of reps: page faults on fresh outputs make the rest noisy


def child(compiler, threads, names, quick):
    """Times names under one compiler in this (fresh) process: OpenMP's
    spinning threads of one compiler must not take the cores of another's.
    {name: (ms, max ulp where eager's is <= 4, eager's own max ulp)}."""
    torch.set_num_threads(threads)
    if compiler == "smelt":
        import smelt
        smelt._C.set_num_threads(threads)
    n = (4 if quick else 16) << 20
    reps = 5 if quick else 15
    x0 = torch.randn(n, generator=torch.Generator().manual_seed(1))
    xs = sample()
    out = {}
    for name in names:
        fn, dom = CASES[name]
        x = dom(x0) if dom else x0
        if compiler == "smelt":
            f = smelt.compile(lambda a, fn=fn: fn(a))
        elif compiler == "inductor":
            torch._dynamo.reset()
            f = torch.compile(lambda a, fn=fn: fn(a))
        else:
            f = fn
        ms = timed(f, x, reps)
        if name == "relu":   # the first timing of a process also warms it up: again, after the rest
            ms = min(ms, timed(f, x, reps))
        err = eerr = None
        if name not in ("relu", "chain"):
            ref = ulp_sweep.REFERENCES.get(name, fn)(xs.double())
            ee = ulp_sweep.ulp_error(fn(xs), ref)
            e = ulp_sweep.ulp_error(f(xs), ref)
            err, eerr = float(e[ee <= 4].max()), float(ee[torch.isfinite(ee)].max())
        out[name] = (ms, err, eerr)
    return out


def run_child(compiler, threads, names, quick):
    import subprocess
    cmd = [sys.executable, __file__, "--child", json.dumps([compiler, threads, names, quick])]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode:
        print(f"  {compiler} at {threads} thread(s) failed: {r.stderr.strip().splitlines()[-1:]}")
        return {}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="4M elements, fewer repetitions")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--only", default=None)
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(*json.loads(args.child))))
        return 0
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="smelt-vmath-ind-"))
    names = ["relu"] + [c for c in (args.only.split(",") if args.only else CASES) if c != "relu"]
    compilers = ["eager", "smelt"] + ([] if args.no_inductor else ["inductor"])
    print(f"transcendentals on {(4 if args.quick else 16)} M float32, best ms of 15, each compiler in its own "
          f"process; x relu = smelt's time / smelt's relu (target: <= 1.3 for exp, tanh, sigmoid, erf, "
          f"gelu, silu; <= 1.8 the others); ulp: max error on {sample().numel()} sample inputs, for smelt "
          f"and inductor where eager's is <= 4, for eager over all; load {os.getloadavg()[0]:.2f}")
    rows = []
    for th in [int(t) for t in args.threads.split(",")]:
        res = {c: run_child(c, th, names, args.quick) for c in compilers}
        print(f"\n{th} thread(s)")
        print(f"{'op':<10} {'eager':>8} {'smelt':>8} {'ind':>8} {'s/e':>6} {'s/ind':>6} {'x relu':>7}"
              f" {'ulp e':>7} {'ulp s':>7} {'ulp ind':>9}")

        def fmt(v, spec):
            return "-" if v is None else format(v, spec)
        relu = res.get("smelt", {}).get("relu", [None])[0]
        for name in names:
            e, s_, i = (res.get(c, {}).get(name, [None] * 3) for c in ("eager", "smelt", "inductor"))
            te, ts, ti = e[0], s_[0], i[0]
            row = {"op": name, "threads": th, "eager_ms": te, "smelt_ms": ts, "inductor_ms": ti,
                   "x_relu": ts / relu if ts and relu else None, "ulp_eager": e[2], "ulp_smelt": s_[1],
                   "ulp_inductor": i[1]}
            rows.append(row)
            print(f"{name:<10} {fmt(te, '8.2f'):>8} {fmt(ts, '8.2f'):>8} {fmt(ti, '8.2f'):>8} "
                  f"{fmt(ts / te if ts and te else None, '6.2f'):>6} {fmt(ts / ti if ts and ti else None, '6.2f'):>6} "
                  f"{fmt(row['x_relu'], '7.2f'):>7} {fmt(e[2], '7.2f'):>7} {fmt(s_[1], '7.2f'):>7} "
                  f"{fmt(i[1], '9.3g'):>9}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
