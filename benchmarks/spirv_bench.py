"""The SPIR-V back end on this machine's CPU (Intel's OpenCL CPU runtime)
beside the LLVM back end and eager, on the micro-kernels of
benchmarks/micro.py: not to win (the OpenCL CPU runtime is not where the
SPIR-V back end is meant to run) but to show its overheads.

Columns: eager, smelt on the CPU back end and on the SPIR-V back end, per
call (median ms), the SPIR-V/CPU ratio, and each back end's first call
(trace + compile; for SPIR-V, the OpenCL driver's build of the module).
Then the per-call overhead of a one-element x + 1 (one kernel launch) on
each back end, in microseconds.

Usage: python benchmarks/spirv_bench.py [--quick] [--json PATH]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("OCL_ICD_VENDORS", os.path.join(os.path.dirname(HERE), "build", "opencl-vendors"))

import micro  # noqa: E402
import smelt  # noqa: E402
import smelt._C as C  # noqa: E402


def median_ms(fn, args, reps):
    fn(*args)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn(*args)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def first_call_ms(fn, args):
    t = time.perf_counter()
    out = fn(*args)
    return (time.perf_counter() - t) * 1e3, out


def row(case, reps):
    args = case["inputs"]()
    eager = case["eager"]
    res = {"name": case["name"], "desc": case["desc"]}
    with torch.no_grad():
        ref = eager(*args)
        res["eager_ms"] = median_ms(eager, args, reps)
        for backend in ("cpu", "spirv"):
            f = smelt.compile(eager, options={"backend": backend})
            res[f"{backend}_first_ms"], out = first_call_ms(f, args)
            torch.testing.assert_close(out, ref, rtol=case["tol"][0], atol=max(case["tol"][1], 1e-5))
            res[f"{backend}_ms"] = median_ms(f, args, reps)
    res["spirv_over_cpu"] = res["spirv_ms"] / res["cpu_ms"]
    return res


def launch_us(backend, reps=2000):
    f = smelt.compile(lambda x: x + 1, options={"backend": backend})
    x = torch.ones(1)
    f(x)
    t = time.perf_counter()
    for _ in range(reps):
        f(x)
    return (time.perf_counter() - t) / reps * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="4x smaller sizes, fewer repetitions")
    p.add_argument("--json", help="write the results there")
    a = p.parse_args()
    ok, why = C.backend_available("spirv")
    if not ok:
        print(f"spirv_bench: the SPIR-V back end is not available here: {why}")
        return 1
    reps = 5 if a.quick else 15
    print(f"load average {os.getloadavg()[0]:.2f}; torch threads {torch.get_num_threads()}")
    print(f"{'kernel':<10} {'eager ms':>9} {'cpu ms':>9} {'spirv ms':>9} {'spirv/cpu':>9} "
          f"{'cpu 1st ms':>10} {'spirv 1st ms':>12}  what")
    rows = []
    for case in micro.make_cases(a.quick):
        if case["graph"] is None:   # (copy ceilings: nothing to compile)
            continue
        r = row(case, reps)
        rows.append(r)
        print(f"{r['name']:<10} {r['eager_ms']:>9.2f} {r['cpu_ms']:>9.2f} {r['spirv_ms']:>9.2f} "
              f"{r['spirv_over_cpu']:>9.2f} {r['cpu_first_ms']:>10.1f} {r['spirv_first_ms']:>12.1f}  {r['desc']}")
    launch = {b: launch_us(b) for b in ("cpu", "spirv")}
    eager_us = launch_us_eager()
    print(f"x + 1 on 1 element, per call: eager {eager_us:.2f} us, cpu {launch['cpu']:.2f} us, "
          f"spirv {launch['spirv']:.2f} us (+{launch['spirv'] - launch['cpu']:.2f} us per kernel launch)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"rows": rows, "launch_us": launch, "eager_launch_us": eager_us}, fh, indent=1)
    return 0


def launch_us_eager(reps=2000):
    x = torch.ones(1)
    t = time.perf_counter()
    for _ in range(reps):
        x + 1
    return (time.perf_counter() - t) / reps * 1e6


if __name__ == "__main__":
    sys.exit(main())
