#!/usr/bin/env python3
"""smelt micro-benchmarks: eager torch vs smelt vs torch.compile (inductor), CPU.

One run prints, for each kernel below, the median time of eager torch, of the
smelt compiled graph (built directly with the smelt._C Graph API) and of
torch.compile(backend="inductor"), the time ratios, the achieved bandwidth, both
compilers' compile times and the smelt result's error against eager:

  chain      8 arithmetic pointwise ops on a 16M float32 vector (one input, one
             output): memory-bound, judged against the bandwidth ceiling
  chainmath  8 pointwise ops with sin/exp/sqrt on 16M float32: compute-bound,
             judged against eager
  softmax    softmax over the last dim of 4096x4096 float32 (amax/sub/exp/sum/div)
  layernorm  layer norm of 8192x1024 float32 with weight and bias (mean/var/rsqrt)
  sum        sum of 64M float32 to a scalar
  clone      x.clone() of 64M float32 in eager torch: the copy-bandwidth ceiling
  copy_      y.copy_(x) into a preallocated 64M float32 buffer: memory bandwidth
             alone, without allocating and page-faulting a fresh output (informative)

GB/s counts the minimal traffic: bytes of every input read once plus bytes of
every output written once, divided by the median time.  Targets: chain and sum
reach clone GB/s / 1.3 (the sum counts bytes read only); softmax and layernorm
are faster than eager.  Inductor compile times are cold (fresh cache dir) unless
--warm-inductor-cache.

Usage: python3 benchmarks/micro.py [--quick] [--json PATH] [--threads N]
                                   [--no-inductor] [--warm-inductor-cache]
                                   [--only chain,sum,...]
Exit status: 0, or 1 when a smelt result disagrees with eager (FAIL).
A smelt that cannot be imported or cannot compile is reported as
"smelt: not available: <reason>"; the eager and inductor columns still run.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parent.parent
F32 = torch.float32
BOUND_SLACK = 1.3     # bandwidth-bound kernels must reach copy GB/s / 1.3


# --------------------------------------------------------------------------
# environment

def short_reason(exc):
    """One line naming an exception: 'Type: first line of its message' (<= 160 chars)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else '(no message)'}"
    return text if len(text) <= 160 else text[:157] + "..."


def load_smelt():
    """Import smelt._C, falling back to the in-tree python/ dir (where the build puts it).

    Returns (module, None) or (None, reason); the reason is the in-tree failure
    when no installed smelt exists."""
    try:
        import smelt._C as C
        return C, None
    except Exception as exc:            # noqa: BLE001 - any import failure is reported
        first = exc
    for name in [m for m in sys.modules if m == "smelt" or m.startswith("smelt.")]:
        del sys.modules[name]
    sys.path.insert(0, str(REPO / "python"))
    try:
        import smelt._C as C
        return C, None
    except Exception as exc:            # noqa: BLE001
        not_installed = isinstance(first, ModuleNotFoundError) and first.name == "smelt"
        return None, "cannot import smelt._C: " + short_reason(exc if not_installed else first)


def cpu_name():
    """The CPU model string from /proc/cpuinfo, or platform.processor()."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# --------------------------------------------------------------------------
# timing and checking

class Timer:
    """Times several implementations of one kernel: warm-up, then the median of N calls.

    N adapts per implementation to budget_s of timed calls, clamped to
    [min_iters, max_iters].  The N calls are split into `rounds` blocks and the
    implementations take turns block by block, so a change in the load of a shared
    machine hits all of them alike.  Each block starts after a settle_s pause (the
    previous block's thread pool, OpenMP spin-wait or smelt's, goes idle) and one
    untimed call that wakes the pool.
    """

    def __init__(self, budget_s, min_iters, max_iters, warmup, settle_s, rounds=3):
        self.budget_s, self.min_iters, self.max_iters = budget_s, min_iters, max_iters
        self.warmup, self.settle_s, self.rounds = warmup, settle_s, rounds

    def iterations(self, fn):
        """Warm fn up and return how many timed calls fit the budget."""
        time.sleep(self.settle_s)
        for _ in range(self.warmup):
            fn()
        t0 = time.perf_counter()
        fn()
        est = max(time.perf_counter() - t0, 1e-7)
        return int(min(self.max_iters, max(self.min_iters, self.budget_s / est)))

    def measure(self, fns):
        """fns: {name: no-argument callable}; returns {name: {median_s, min_s, iters}}.
        Results are dropped after each call."""
        n = {k: self.iterations(fn) for k, fn in fns.items()}
        times = {k: [] for k in fns}
        for r in range(self.rounds):
            for k, fn in fns.items():
                block = n[k] // self.rounds + (r < n[k] % self.rounds)
                time.sleep(self.settle_s)
                fn()
                for _ in range(block):
                    t0 = time.perf_counter()
                    fn()
                    times[k].append(time.perf_counter() - t0)
        return {k: {"median_s": statistics.median(t), "min_s": min(t), "iters": len(t)}
                for k, t in times.items()}


def compare(got, ref, rtol, atol):
    """Compare a result with the eager reference elementwise: |got-ref| <= atol + rtol*|ref|.

    Returns {ok, max_abs_err, max_rel_err, why}; a shape or dtype mismatch or a NaN
    where the reference has none fails."""
    if not isinstance(got, torch.Tensor):
        return {"ok": False, "max_abs_err": None, "max_rel_err": None,
                "why": f"result is {type(got).__name__}, not a tensor"}
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return {"ok": False, "max_abs_err": None, "max_rel_err": None,
                "why": f"got {got.dtype}{tuple(got.shape)}, want {ref.dtype}{tuple(ref.shape)}"}
    g64, r64 = got.double(), ref.double()
    diff = (g64 - r64).abs()
    diff = torch.where(torch.isnan(g64) & torch.isnan(r64), torch.zeros_like(diff), diff)
    ok = bool((diff <= atol + rtol * r64.abs()).all()) if diff.numel() else True
    max_abs = float(diff.max()) if diff.numel() else 0.0
    max_rel = float((diff / r64.abs().clamp_min(1e-30)).max()) if diff.numel() else 0.0
    why = "" if ok else f"error above tolerance (rtol={rtol:g}, atol={atol:g})"
    return {"ok": ok, "max_abs_err": max_abs, "max_rel_err": max_rel, "why": why}


# --------------------------------------------------------------------------
# the kernels: eager function, smelt graph, traffic, tolerance, target

def eager_chain(x):
    """8 arithmetic ops: mul, add, abs, maximum, mul, sub, neg, minimum."""
    t = torch.maximum((x * 1.5 + 0.5).abs(), torch.tensor(0.25))
    return torch.minimum(-(t * 2.0 - 1.0), torch.tensor(3.0))


def graph_chain(C, x):
    g = C.Graph()
    t = g.input(F32, tuple(x.shape))
    t = g.op("add", g.op("mul", t, g.scalar(1.5)), g.scalar(0.5))
    t = g.op("maximum", g.op("abs", t), g.op("full", shape=[], value=0.25, dtype=F32))
    t = g.op("sub", g.op("mul", t, g.scalar(2.0)), g.scalar(1.0))
    t = g.op("minimum", g.op("neg", t), g.op("full", shape=[], value=3.0, dtype=F32))
    g.output(t)
    return g


def eager_chainmath(x):
    """8 pointwise ops: mul, add, sin, exp, mul, add, reciprocal, sqrt."""
    return torch.sqrt(torch.reciprocal(torch.exp(torch.sin(x * 1.5 + 0.5)) * 2.0 + 1.0))


def graph_chainmath(C, x):
    g = C.Graph()
    t = g.input(F32, tuple(x.shape))
    t = g.op("mul", t, g.scalar(1.5))
    t = g.op("add", t, g.scalar(0.5))
    t = g.op("exp", g.op("sin", t))
    t = g.op("mul", t, g.scalar(2.0))
    t = g.op("add", t, g.scalar(1.0))
    t = g.op("sqrt", g.op("reciprocal", t))
    g.output(t)
    return g


def eager_softmax(x):
    return torch.softmax(x, dim=-1)


def graph_softmax(C, x):
    g = C.Graph()
    a = g.input(F32, tuple(x.shape))
    last = x.dim() - 1
    m = g.op("amax", a, dims=[last], keepdim=True)
    e = g.op("exp", g.op("sub", a, m))
    s = g.op("sum", e, dims=[last], keepdim=True)
    g.output(g.op("div", e, s))
    return g


LN_EPS = 1e-5


def eager_layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=LN_EPS)


def graph_layernorm(C, x, w, b):
    g = C.Graph()
    a = g.input(F32, tuple(x.shape))
    gw = g.input(F32, tuple(w.shape))
    gb = g.input(F32, tuple(b.shape))
    last = x.dim() - 1
    mean = g.op("mean", a, dims=[last], keepdim=True)
    var = g.op("var", a, dims=[last], keepdim=True, correction=0)
    rstd = g.op("rsqrt", g.op("add", var, g.scalar(LN_EPS)))
    y = g.op("mul", g.op("sub", a, mean), rstd)
    g.output(g.op("add", g.op("mul", y, gw), gb))
    return g


def eager_sum(x):
    return x.sum()


def graph_sum(C, x):
    g = C.Graph()
    a = g.input(F32, tuple(x.shape))
    g.output(g.op("sum", a, dims=None))
    return g


def eager_clone(x):
    return x.clone()


def eager_copy_(x, y):
    return y.copy_(x)


def make_cases(quick):
    """The benchmark table rows; sizes shrink 4x (16x for the big vectors) with --quick."""
    n_chain = (4 if quick else 16) << 20
    sm_rows = 1024 if quick else 4096
    ln_rows = 2048 if quick else 8192
    n_sum = (16 if quick else 64) << 20
    gen = torch.Generator().manual_seed(0)
    return [
        {"name": "clone", "desc": f"x.clone(), {n_sum >> 20}M f32 (copy ceiling)",
         "inputs": lambda: (torch.randn(n_sum, generator=gen),),
         "eager": eager_clone, "graph": None, "inductor": False,
         "tol": None, "target": "ceiling"},
        {"name": "copy_", "desc": f"y.copy_(x) preallocated, {n_sum >> 20}M f32",
         "inputs": lambda: (torch.randn(n_sum, generator=gen), torch.empty(n_sum)),
         "eager": eager_copy_, "graph": None, "inductor": False, "tol": None,
         "target": "strict ceiling", "bytes": lambda inputs, out: 2 * out.nbytes},
        {"name": "chain", "desc": f"8 arith pointwise ops, {n_chain >> 20}M f32",
         "inputs": lambda: (torch.randn(n_chain, generator=gen),),
         "eager": eager_chain, "graph": graph_chain, "inductor": True,
         "tol": (1e-5, 1e-6), "target": "bandwidth"},
        {"name": "chainmath", "desc": f"8 ops incl. sin/exp/sqrt, {n_chain >> 20}M f32",
         "inputs": lambda: (torch.randn(n_chain, generator=gen),),
         "eager": eager_chainmath, "graph": graph_chainmath, "inductor": True,
         "tol": (1e-5, 1e-6), "target": "eager"},
        {"name": "softmax", "desc": f"softmax(-1), {sm_rows}x4096 f32",
         "inputs": lambda: (torch.randn(sm_rows, 4096, generator=gen),),
         "eager": eager_softmax, "graph": graph_softmax, "inductor": True,
         "tol": (1e-4, 1e-9), "target": "eager"},
        {"name": "layernorm", "desc": f"layer_norm, {ln_rows}x1024 f32, w+b",
         "inputs": lambda: (torch.randn(ln_rows, 1024, generator=gen),
                            torch.randn(1024, generator=gen),
                            torch.randn(1024, generator=gen)),
         "eager": eager_layernorm, "graph": graph_layernorm, "inductor": True,
         "tol": (1e-4, 1e-5), "target": "eager"},
        {"name": "sum", "desc": f"sum to scalar, {n_sum >> 20}M f32",
         "inputs": lambda: (torch.rand(n_sum, generator=gen) - 0.25,),
         "eager": eager_sum, "graph": graph_sum, "inductor": True,
         "tol": (1e-4, 1e-3), "target": "bandwidth"},
    ]


def traffic_bytes(inputs, out):
    """Minimal traffic: every input read once plus the output written once."""
    tensors = list(inputs) + [out]
    return sum(t.numel() * t.element_size() for t in tensors)


# --------------------------------------------------------------------------
# running one case

def run_smelt(C, reason, case, inputs, ref):
    """Build, compile and check the smelt graph of one case.

    Returns (result dict, callable to time or None); 'available' False with
    'reason' when smelt cannot run it."""
    res = {"available": False, "reason": reason}
    if C is None:
        return res, None
    try:
        g = case["graph"](C, *inputs)
        t0 = time.perf_counter()
        f = g.compile()
        res["compile_s"] = time.perf_counter() - t0
        res["num_kernels"] = getattr(f, "num_kernels", None)
        res["num_externs"] = getattr(f, "num_externs", None)
        outs = f(*inputs)
    except Exception as exc:            # noqa: BLE001 - reported in the table
        res["reason"] = short_reason(exc)
        return res, None
    res.update(available=True, reason=None)
    got = outs[0] if isinstance(outs, (list, tuple)) and len(outs) == 1 else outs
    res["check"] = compare(got, ref, *case["tol"])
    return res, f


def run_inductor(case, inputs, ref):
    """torch.compile(inductor) one case: first-call (compile) time and check.

    Returns (result dict, callable to time or None); any failure is caught and
    reported as 'reason'."""
    res = {"available": False, "reason": None}
    try:
        torch._dynamo.reset()
        cf = torch.compile(case["eager"], backend="inductor", dynamic=False, fullgraph=True)
        t0 = time.perf_counter()
        got = cf(*inputs)
        res["compile_s"] = time.perf_counter() - t0
    except Exception as exc:            # noqa: BLE001 - reported in the table
        res["reason"] = short_reason(exc)
        return res, None
    res.update(available=True)
    res["check"] = compare(got, ref, *case["tol"])
    return res, cf


def inductor_warmup():
    """Compile and run a tiny function once so that the one-time costs of a process's
    first torch.compile (imports, worker start-up) are not charged to the first case.

    Returns (seconds, None) or (None, reason)."""
    try:
        t0 = time.perf_counter()
        torch.compile(lambda x: x * 2.0 + 1.0, backend="inductor", dynamic=False)(torch.ones(8))
        return time.perf_counter() - t0, None
    except Exception as exc:            # noqa: BLE001 - reported in the header
        return None, short_reason(exc)


def run_case(case, C, smelt_reason, timer, use_inductor):
    """Eager, smelt and inductor for one case: compile and check, then time them
    in turns; returns the result record."""
    inputs = case["inputs"]()
    ref = case["eager"](*inputs)
    rec = {"name": case["name"], "desc": case["desc"], "target": case["target"],
           "shapes": [list(t.shape) for t in inputs],
           "bytes": case.get("bytes", traffic_bytes)(inputs, ref)}
    print(f"  {case['name']}:", end="", flush=True)
    fns = {"eager": case["eager"]}
    if case["graph"] is not None:
        print(" smelt compile ...", end="", flush=True)
        rec["smelt"], fns["smelt"] = run_smelt(C, smelt_reason, case, inputs, ref)
    if case["inductor"] and use_inductor:
        print(" inductor compile ...", end="", flush=True)
        rec["inductor"], fns["inductor"] = run_inductor(case, inputs, ref)
    elif case["inductor"]:
        rec["inductor"] = {"available": False, "reason": "skipped (--no-inductor)"}
    print(" timing ...", end="", flush=True)
    fns = {k: (lambda f=f: f(*inputs)) for k, f in fns.items() if f is not None}
    for key, timing in timer.measure(fns).items():
        timing["gbps"] = rec["bytes"] / timing["median_s"] / 1e9
        rec.setdefault(key, {}).update(timing)
    print(" done", flush=True)
    add_ratios(rec)
    return rec


def add_ratios(rec):
    """smelt time / eager time and smelt time / inductor time (< 1: smelt faster)."""
    s = rec.get("smelt") or {}
    for key in ("eager", "inductor"):
        other = rec.get(key) or {}
        if "median_s" in s and "median_s" in other:
            rec[f"smelt_over_{key}"] = s["median_s"] / other["median_s"]


# --------------------------------------------------------------------------
# targets

def ceilings(records):
    """Copy ceilings in GB/s: 'clone' (fresh output, the target's reference) and
    'copy_' (into a preallocated buffer: pure memory bandwidth); None if not run."""
    got = {r["target"]: r["eager"]["gbps"] for r in records
           if r["target"] in ("ceiling", "strict ceiling")}
    return {"clone": got.get("ceiling"), "copy_": got.get("strict ceiling")}


def bandwidth_met(rec, ceiling):
    """True/False: smelt GB/s >= ceiling / BOUND_SLACK; None when not measurable."""
    s = rec.get("smelt") or {}
    if not ceiling or "gbps" not in s:
        return None
    return s["gbps"] >= ceiling / BOUND_SLACK and s["check"]["ok"]


def judge_targets(records, ceil):
    """Fill rec['target_result'] = {text, met[, met_strict]} for every smelt row.

    Bandwidth rows: smelt GB/s >= clone GB/s / 1.3 (met) and >= copy_ GB/s / 1.3
    (met_strict, informational).  Eager rows: smelt median < eager median.
    A result that fails the correctness check never meets its target."""
    for rec in records:
        s = rec.get("smelt") or {}
        if rec["target"] == "bandwidth":
            reads = " (bytes read)" if rec["name"] == "sum" else ""
            rec["target_result"] = {
                "text": f"smelt GB/s{reads} >= clone GB/s / {BOUND_SLACK}",
                "met": bandwidth_met(rec, ceil["clone"]),
                "met_strict": bandwidth_met(rec, ceil["copy_"])}
        elif rec["target"] == "eager":
            met = None
            if "smelt_over_eager" in rec:
                met = rec["smelt_over_eager"] < 1.0 and s["check"]["ok"]
            rec["target_result"] = {"text": "smelt faster than eager", "met": met}


# --------------------------------------------------------------------------
# printing

def fmt(value, spec, missing="n/a"):
    return missing if value is None else format(value, spec)


def ms(r):
    return fmt(r["median_s"] * 1e3, ".2f") if r and "median_s" in r else "n/a"


def gbps(r):
    return fmt(r["gbps"], ".1f") if r and "gbps" in r else "n/a"


def status(r):
    """'ok', 'FAIL', 'n/a' for a smelt/inductor result's correctness."""
    if not r or not r.get("available"):
        return "n/a"
    return "ok" if r["check"]["ok"] else "FAIL"


def print_tables(records):
    """Table 1: times and ratios; table 2: bandwidth, compile times, correctness."""
    print()
    print("times: median ms (ratio < 1 means smelt is faster)")
    h = f"{'bench':<10} {'what':<36} {'eager':>9} {'smelt':>9} {'inductor':>9} {'smelt/eager':>12} {'smelt/ind':>10}"
    print(h)
    print("-" * len(h))
    for rec in records:
        print(f"{rec['name']:<10} {rec['desc']:<36} {ms(rec['eager']):>9} "
              f"{ms(rec.get('smelt')):>9} {ms(rec.get('inductor')):>9} "
              f"{fmt(rec.get('smelt_over_eager'), '.2f'):>12} "
              f"{fmt(rec.get('smelt_over_inductor'), '.2f'):>10}")
    print()
    print("bandwidth (GB/s = input bytes read + output bytes written / median time); "
          "smelt cc ms = g.compile() time,\nkern = smelt fused kernels; ind 1st s = inductor "
          "first call (compile); smelt err = max abs error vs eager")
    h = (f"{'bench':<10} {'MB':>7} {'eager':>7} {'smelt':>7} {'induct':>7} "
         f"{'smelt cc ms':>11} {'kern':>4} {'ind 1st s':>9} {'smelt err':>10} "
         f"{'smelt':>5} {'ind':>4}")
    print(h)
    print("-" * len(h))
    for rec in records:
        s, i = rec.get("smelt") or {}, rec.get("inductor") or {}
        err = s["check"]["max_abs_err"] if s.get("available") else None
        print(f"{rec['name']:<10} {rec['bytes'] / 1e6:>7.0f} {gbps(rec['eager']):>7} "
              f"{gbps(s):>7} {gbps(i):>7} "
              f"{fmt(s.get('compile_s') and s['compile_s'] * 1e3, '.1f'):>11} "
              f"{fmt(s.get('num_kernels'), 'd'):>4} {fmt(i.get('compile_s'), '.2f'):>9} "
              f"{fmt(err, '.1e'):>10} {status(s) if s else '-':>5} {status(i) if i else '-':>4}")


def print_notes(records):
    """Why smelt or inductor were not available (deduplicated), and loud FAIL lines."""
    reasons = {}
    for rec in records:
        for key in ("smelt", "inductor"):
            r = rec.get(key)
            if r and not r.get("available"):
                reasons.setdefault((key, r["reason"]), []).append(rec["name"])
    if reasons:
        print()
    for (key, why), names in reasons.items():
        print(f"{key}: not available: {why}  [{', '.join(names)}]")
    fails = 0
    for rec in records:
        for key in ("smelt", "inductor"):
            r = rec.get(key)
            if r and r.get("available") and not r["check"]["ok"]:
                c = r["check"]
                fails += key == "smelt"
                print(f"!!! FAIL: {key} {rec['name']}: {c['why']}; "
                      f"max abs err {fmt(c['max_abs_err'], '.3e')}, "
                      f"max rel err {fmt(c['max_rel_err'], '.3e')}")
    return fails


def verdict(met, rec):
    if met is None:
        return "n/a (smelt not run)"
    if not met and not rec["smelt"]["check"]["ok"]:
        return "MISSED (result FAILs the check)"
    return "MET" if met else "MISSED"


def print_targets(records, ceil):
    """The targets next to what smelt achieved, with MET / MISSED."""
    def bound(x):
        return f"{fmt(x, '.1f')} GB/s -> /{BOUND_SLACK} = {fmt(x and x / BOUND_SLACK, '.1f')}"
    print()
    print(f"targets  (ceilings: clone {bound(ceil['clone'])}; "
          f"copy_ preallocated {bound(ceil['copy_'])})")
    for rec in records:
        t = rec.get("target_result")
        if not t:
            continue
        if rec["target"] == "bandwidth":
            have = f"{gbps(rec.get('smelt'))} GB/s"
            extra = ("" if t["met_strict"] is None
                     else f"   [strict, vs copy_: {verdict(t['met_strict'], rec)}]")
        else:
            have = f"smelt/eager {fmt(rec.get('smelt_over_eager'), '.2f')}"
            extra = ""
        print(f"  {rec['name']:<10} {t['text']:<44} {have:<18} {verdict(t['met'], rec)}{extra}")
    print("  (clone pays for allocating and page-faulting a fresh output, as does every new"
          " tensor,\n   smelt's outputs included; copy_ into a preallocated buffer is the"
          " memory bandwidth alone)")


# --------------------------------------------------------------------------
# main

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer iterations")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--threads", type=int, help="set torch and smelt thread counts")
    p.add_argument("--no-inductor", action="store_true", help="skip torch.compile")
    p.add_argument("--warm-inductor-cache", action="store_true",
                   help="use torch's default inductor cache dir (default: a fresh one, so "
                        "inductor compile times are cold)")
    p.add_argument("--only", metavar="NAMES",
                   help="comma list of clone,copy_,chain,chainmath,softmax,layernorm,sum")
    return p.parse_args(argv)


def header(C, smelt_reason, args):
    """Print and return the machine / version / thread description."""
    meta = {"cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "smelt_threads": C.get_num_threads() if C is not None else None,
            "quick": args.quick}
    print(f"smelt micro-benchmarks{' (--quick)' if args.quick else ''}")
    print(f"cpu: {meta['cpu']} ({meta['cores']} cores); python {meta['python']}; "
          f"torch {meta['torch']}")
    print(f"threads: torch.get_num_threads() = {meta['torch_threads']}, "
          f"smelt C.get_num_threads() = {fmt(meta['smelt_threads'], 'd')}")
    if C is None:
        print(f"smelt: not available: {smelt_reason}")
    return meta


def main(argv=None):
    args = parse_args(argv)
    wall0 = time.perf_counter()
    C, smelt_reason = load_smelt()
    if args.threads:
        torch.set_num_threads(args.threads)
        if C is not None:
            C.set_num_threads(args.threads)
    meta = header(C, smelt_reason, args)
    if args.quick:
        timer = Timer(budget_s=0.25, min_iters=3, max_iters=50, warmup=1, settle_s=0.05)
    else:
        timer = Timer(budget_s=1.0, min_iters=5, max_iters=200, warmup=2, settle_s=0.2)
    if not args.no_inductor:
        cache = None if args.warm_inductor_cache else tempfile.mkdtemp(prefix="smelt-bench-")
        if cache:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        meta["inductor_cache"] = "warm (torch default dir)" if cache is None else "cold (fresh dir)"
        meta["inductor_warmup_s"], why = inductor_warmup()
        print(f"inductor: cache {meta['inductor_cache']}; process warm-up compile "
              f"(not counted) {fmt(meta['inductor_warmup_s'], '.1f')} s"
              + (f"; failed: {why}" if why else ""))
    cases = make_cases(args.quick)
    if args.only:
        wanted = set(args.only.split(","))
        if any(c["target"] == "bandwidth" for c in cases if c["name"] in wanted):
            wanted |= {"clone", "copy_"}
        cases = [c for c in cases if c["name"] in wanted]
    records = [run_case(c, C, smelt_reason, timer, not args.no_inductor) for c in cases]
    ceil = ceilings(records)
    judge_targets(records, ceil)
    print_tables(records)
    fails = print_notes(records)
    print_targets(records, ceil)
    meta["total_wall_s"] = time.perf_counter() - wall0
    print(f"\ntotal wall time {meta['total_wall_s']:.1f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "ceilings_gbps": ceil, "benchmarks": records},
                      fh, indent=2)
    if not args.no_inductor and not args.warm_inductor_cache:
        shutil.rmtree(os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
