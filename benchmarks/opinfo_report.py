"""Every OpInfo entry's samples through smelt (tests/opinfo_lib.py), in
several processes; prints the figures (op x dtype pairs matching, pairs with
native code over float32/int64/bool/float16, error inputs raising as eager)
and every failure.

    python3 benchmarks/opinfo_report.py [--cap N] [--reference] [--jobs J]
        [--noncontig] [--ops name,name] [--json FILE]

--cap 0 runs every sample (the `make opinfo` run); exit status 1 on any wrong
answer, crash or missing error."""
import argparse
import collections
import json
import multiprocessing as mp
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))


def _work(job):
    names, cap, reference, noncontig = job
    import dataclasses
    import torch
    torch.set_num_threads(1)
    import opinfo_lib as L
    db = {o.full_name if hasattr(o, "full_name") else o.name: o for o in L.op_db()}
    out = []
    for n in names:
        t0 = time.time()
        rows = [dataclasses.asdict(r) for r in L.run_op(db[n], cap=cap, reference=reference, native=True,
                                                          noncontig=noncontig)]
        for r in rows[:1]:
            r["secs"] = time.time() - t0
        out += rows
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cap", type=int, default=3)
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--noncontig", action="store_true", help="every sample made non-contiguous (SampleInput.noncontiguous)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--ops", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("-q", action="store_true", help="figures only")
    a = ap.parse_args()
    import opinfo_lib as L
    names = [o.full_name if hasattr(o, "full_name") else o.name for o in L.op_db()]
    if a.ops:
        want = set(a.ops.split(","))
        names = [n for n in names if n in want or n.split(".")[0] in want]
    cap = a.cap or None
    t0 = time.time()
    chunks = [names[i::a.jobs * 8] for i in range(a.jobs * 8)]
    with mp.get_context("spawn").Pool(a.jobs) as pool:
        rows = [r for part in pool.map(_work, [(c, cap, a.reference, a.noncontig) for c in chunks if c], chunksize=1) for r in part]
    summarise(rows, time.time() - t0, a.q)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f)
    slow = sorted(rows, key=lambda r: -r.get("secs", 0))[:5]
    print("opinfo: slowest ops: " + ", ".join(f"{r['op']} {r.get('secs', 0):.1f} s" for r in slow))
    bad = [r for r in rows if r["status"] in ("wrong", "crash", "error-missing")]
    return 1 if bad else 0


def summarise(rows, secs, quiet=False):
    samples = [r for r in rows if r["variant"] != "error"]
    errors = [r for r in rows if r["variant"] == "error" and r["status"] != "skip"]
    pairs = collections.defaultdict(list)
    for r in samples:
        if r["status"] != "skip":
            pairs[r["op"], r["dtype"]].append(r)
    ok = sum(all(r["status"] == "match" for r in v) for v in pairs.values())
    fig = {k: v for k, v in pairs.items() if k[1] in ("float32", "int64", "bool", "float16")}
    native = sum(any(r["native"] for r in v) for v in fig.values())
    compiled = sum(any(r["compiled"] for r in v) for v in fig.values())
    c = collections.Counter(r["status"] for r in samples)
    print(f"opinfo: {len(pairs)} op x dtype pairs, {ok} match ({len(samples)} runs: "
          + ", ".join(f"{v} {k}" for k, v in sorted(c.items())) + f") in {secs:.0f} s")
    print(f"opinfo: float32/int64/bool/float16: {len(fig)} pairs, {compiled} compile whole "
          f"({100 * compiled / max(1, len(fig)):.0f}%), {native} native ({100 * native / max(1, len(fig)):.0f}%)")
    ce = collections.Counter(r["status"] for r in errors)
    print(f"opinfo: error_inputs: {len(errors)} samples, {ce['error-ok']} raise as eager, "
          f"{ce['error-missing']} do not, {ce['crash']} crash")
    if quiet:
        return
    for r in rows:
        if r["status"] in ("wrong", "crash", "error-missing", "raises"):
            print(f"--- {r['status']}: {r['op']} {r['dtype']} {r['variant']} #{r['sample']}: {r['detail']}")


if __name__ == "__main__":
    sys.exit(main())
