"""Dynamic shapes: many input lengths through one model, CPU.

GPT-2 (the bench model's layers and width, batch 1, inference) over 32
random lengths in 16..512 (seeded), and a small Llama decoding 64 tokens
greedily with its KV cache (HF generate), for: eager, smelt (default
dynamic=None: the second length makes the sizes symbolic), smelt
dynamic=False (every length its own entry, until the recompile limit),
torch.compile default and torch.compile dynamic=True. Each runs in its
own process with an empty compile cache. Reported: compiles, the total
time of the first call of every length (compiling included), the
steady-state ms per call, and whether every output matched eager's.
The overhead column is the first pass minus the second (what compiling
cost): the bench GPT-2's 32 calls compute for about 10 s whatever runs
them, which bounds the ratio of first-call totals.

Steady state: after the first pass, each length is called again; the
table gives the median over lengths of that second call's ms, and the
ratio of symbolic smelt's to static smelt's over the lengths static smelt
compiled (the first 8: the recompile limit runs the rest eagerly; the
symbolic entry runs a plan made for the call's sizes, so this should be
about 1.0).

Usage: python3 benchmarks/dynamic_bench.py [--lengths 32] [--json PATH]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

CONFIGS = ["eager", "smelt", "smelt-static", "inductor", "inductor-dynamic"]


def compiler(name):
    import torch
    import smelt
    return {"eager": lambda f: f,
            "smelt": lambda f: smelt.compile(f),
            "smelt-static": lambda f: smelt.compile(f, dynamic=False),
            "inductor": lambda f: torch.compile(f),
            "inductor-dynamic": lambda f: torch.compile(f, dynamic=True)}[name]


def count_compiles(name, fn):
    if name.startswith("smelt"):
        f = getattr(fn, "_smelt", None) or getattr(fn, "__func__", fn)
        st = f.stats()
        return {"compiles": st["compiles"], "dynamic_plans": st["dynamic_plans"],
                "limit": st["recompile_limit_reached"]}
    if name.startswith("inductor"):
        import torch._dynamo.utils as u
        return {"compiles": int(u.counters["stats"]["unique_graphs"])}
    return {}


def gpt2_child(args):
    import torch
    from smelt import bench
    torch.manual_seed(0)
    w = bench.build_gpt2("default")
    model = w.fn
    rng = random.Random(1)
    lengths = rng.sample(range(16, 513), args.lengths)
    batches = {T: torch.randint(0, w.config["vocab"], (1, T)) for T in lengths}
    fn = compiler(args.config)(model)
    ref = torch.load(args.ref) if args.ref and os.path.exists(args.ref) else None
    outs, first, second = {}, {}, {}
    with torch.no_grad():
        for T in lengths:
            t = time.perf_counter()
            y = fn(batches[T]).logits
            first[T] = time.perf_counter() - t
            outs[T] = y[:, -1].clone()
        for T in lengths:
            t = time.perf_counter()
            fn(batches[T])
            second[T] = time.perf_counter() - t
    ok = None
    if ref is not None:
        ok = all(torch.allclose(outs[T], ref[T], atol=2e-3, rtol=2e-3) for T in lengths)
    else:
        torch.save(outs, args.ref)
    res = {"first_total_s": sum(first.values()), "second_ms": {str(T): second[T] * 1e3 for T in lengths},
           "match": ok, **count_compiles(args.config, fn)}
    print("RESULT " + json.dumps(res))


def llama_child(args):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=8, num_key_value_heads=4,
                      intermediate_size=688, vocab_size=32000, max_position_embeddings=512)
    m = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 32000, (1, 16))
    if args.config != "eager":
        m.forward = compiler(args.config)(m.forward)
    with torch.no_grad():
        t = time.perf_counter()
        out = m.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
        first = time.perf_counter() - t
        t = time.perf_counter()
        m.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
        second = time.perf_counter() - t
    ok = None
    if args.ref and os.path.exists(args.ref):
        ok = bool(torch.equal(out, torch.load(args.ref)))
    else:
        torch.save(out, args.ref)
    res = {"first_total_s": first, "second_ms": {"64 tokens": second * 1e3}, "match": ok,
           **count_compiles(args.config, m.forward)}
    print("RESULT " + json.dumps(res))


def run(workload, config, args, tmp):
    env = dict(os.environ, SMELT_CACHE_DIR=os.path.join(tmp, workload + config, "smelt"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, workload + config, "inductor"))
    cmd = [sys.executable, __file__, "--child", workload, "--config", config, "--lengths", str(args.lengths),
           "--ref", os.path.join(tmp, workload + "-ref.pt")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (r.stderr or r.stdout)[-600:]}


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--lengths", type=int, default=32)
    p.add_argument("--workloads", default="gpt2,llama")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--json")
    p.add_argument("--child")
    p.add_argument("--config")
    p.add_argument("--ref")
    args = p.parse_args(argv)
    if args.child:
        return {"gpt2": gpt2_child, "llama": llama_child}[args.child](args)
    load = os.getloadavg()[0]
    records = {}
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for wl in args.workloads.split(","):
            rec = records[wl] = {}
            for c in args.configs.split(","):   # eager first: the reference outputs
                rec[c] = run(wl, c, args, tmp)
                print(f"  {wl} {c}: { {k: v for k, v in rec[c].items() if k != 'second_ms'} }", file=sys.stderr)
                bad += rec[c].get("match") is False
    print(f"\ndynamic shapes (load {load:.2f}): gpt2 = bench GPT-2, batch 1, {args.lengths} random lengths in 16..512; "
          f"llama = 4-layer Llama generating 64 tokens (KV cache). first: total seconds of every length's first "
          f"call; steady: median ms of the second call of each length (llama: the whole second generate); "
          f"sym/static: smelt's symbolic entry against its static entries")
    print(f"{'workload':9s} {'config':17s} {'compiles':>9s} {'first s':>8s} {'overhead s':>11s} {'steady ms':>10s} "
          f"{'x eager':>8s} {'match':>6s}")
    for wl, rec in records.items():
        eager = median(list(rec.get("eager", {}).get("second_ms", {}).values()))
        for c, r in rec.items():
            if "error" in r:
                print(f"{wl:9s} {c:17s} error: {r['error'][-200:]}")
                continue
            steady = median(list(r["second_ms"].values()))
            comp = r.get("compiles", "-")
            if r.get("dynamic_plans"):
                comp = f"{comp}+{r['dynamic_plans']}p"
            x = f"{steady / eager:.2f}" if eager and steady else "-"
            r["overhead_s"] = max(r["first_total_s"] - sum(r["second_ms"].values()) / 1e3, 0.0)
            print(f"{wl:9s} {c:17s} {str(comp):>9s} {r['first_total_s']:8.2f} {r['overhead_s']:11.2f} {steady:10.1f} "
                  f"{x:>8s} {str(r.get('match')):>6s}")
        s, st = rec.get("smelt", {}), rec.get("smelt-static", {})
        if "second_ms" in s and "second_ms" in st:
            ratios = [s["second_ms"][k] / st["second_ms"][k] for k in list(st["second_ms"])[:8] if k in s["second_ms"]]
            print(f"{wl:9s} sym/static steady ratio (median over lengths): {median(ratios):.2f}")
        ind = rec.get("inductor-dynamic", {})
        if "first_total_s" in ind and "first_total_s" in s:
            print(f"{wl:9s} first-call total: torch.compile(dynamic=True) / smelt = "
                  f"{ind['first_total_s'] / s['first_total_s']:.1f}x; overhead (first calls minus the same calls "
                  f"again): {ind['overhead_s'] / max(s['overhead_s'], 1e-3):.1f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load": load, "records": records}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) or 0)
