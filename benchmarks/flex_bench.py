"""FlexAttention on the CPU: smelt vs torch.compile vs eager SDPA with an explicit mask.

torch's `flex_attention(q, k, v, score_mod=..., block_mask=...)`, float32,
B=4, H=8, head dim 64, sequence lengths 1024 and 4096, block masks of
128 x 128 made once by torch's `create_block_mask` and passed in:

  causal    mask q >= kv
  sliding   causal window of 256: q >= kv and q - kv < 256 (each query
            sees itself and the 255 keys before it)
  document  L/256 documents of random lengths (random cut points, seeded)
            packed in one sequence, a captured doc-id tensor [L]:
            doc[q] == doc[kv] and q >= kv
  alibi     score_mod score + slope[h] * (kv - q), captured slopes [H]
            (2^(-8(h+1)/H)), causal block mask

Implementations: smelt (`smelt.compile` of a function calling
flex_attention, one compiled function per row), `torch.compile` of the
same function (dynamic=False, `torch._dynamo.reset()` before each row;
torch has no flex_attention backward on the CPU: the forward+backward
column is `n/a` and its message is printed below the table), and eager
`F.scaled_dot_product_attention` with the mask materialised (bool
[1, 1, L, L]; for ALiBi an additive float bias [1, H, L, L], -inf above
the diagonal).

Reported per row: the share of blocks skipped (1 - (kv_num_blocks +
full_kv_num_blocks).sum() / all blocks), the median ms of the forward
(under no_grad) and of forward + `out.backward(g)` (q, k, v requiring
grad), smelt's ratios, the first call's seconds (cold: empty smelt and
inductor caches, in this process after a tiny compile of each compiler
that absorbs its one-time start-up, printed in the header; the first call
includes one run), the max abs error of each forward against a float64
reference (explicit math; all query rows at L <= 1024, 512 sampled rows
above) and of smelt's dq, dk, dv against eager SDPA's, and whether smelt
traced the row into one graph with one fused flex_attention op, and the
cores other processes kept busy during the row (`oth`, from /proc). Then
smelt's flex causal forward against smelt's own SDPA (`is_causal=True`,
compiled) at each length: the target is flex within 1.2x.

Timing: one warm-up call (the first call, compile included), then the
median of 5 calls at L <= 1024 and of 2 above (`--quick`: 1024 only,
3 calls); about 4 minutes on 2 quiet cores, `--quick` about 1. Exit
status 1 when a smelt result is wrong or smelt fails.

Usage: python3 benchmarks/flex_bench.py [--quick] [--lengths 1024,4096]
           [--variants causal,sliding,document,alibi] [--threads 2]
           [--json PATH]   (default benchmarks/results/flex_bench.json)
"""
import argparse
import atexit
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
B, H, E, BLOCK, WINDOW = 4, 8, 64, 128, 256
FWD_TOL, GRAD_TOL = 1e-4, 1e-3   # smelt's max abs error; grads: relative to max |g_eager|


# ---------------------------------------------------------------- variants

def make_variant(name, L):
    """(mask_mod, score_mod or None, explicit mask builder) for a variant at
    length L; the builder gives the eager SDPA attn_mask (bool or float)."""
    import torch
    q = torch.arange(L)[:, None]
    kv = torch.arange(L)[None, :]
    if name == "causal":
        def mask(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx
        return mask, None, lambda: (q >= kv)[None, None]
    if name == "sliding":
        def mask(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)
        return mask, None, lambda: ((q >= kv) & (q - kv < WINDOW))[None, None]
    if name == "document":
        doc = doc_ids(L)

        def mask(b, h, q_idx, kv_idx):
            return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)
        return mask, None, lambda: ((doc[:, None] == doc[None, :]) & (q >= kv))[None, None]
    if name == "alibi":
        slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / H) for i in range(H)])

        def mask(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx

        def score(s, b, h, q_idx, kv_idx):
            return s + slopes[h] * (kv_idx - q_idx)

        def bias():
            t = slopes[:, None, None] * (kv - q).float()
            return t.masked_fill(~(q >= kv), float("-inf"))[None]
        return mask, score, bias
    raise ValueError(name)


def doc_ids(L):
    """Document ids [L]: L // 256 documents of random lengths (seeded cut points)."""
    import torch
    n = max(L // 256, 1)
    g = torch.Generator().manual_seed(L)
    cuts = torch.sort(torch.randperm(L - 1, generator=g)[:n - 1] + 1).values
    lengths = torch.diff(torch.cat([torch.tensor([0]), cuts, torch.tensor([L])]))
    return torch.repeat_interleave(torch.arange(n), lengths)


def attend_fn(score):
    from torch.nn.attention.flex_attention import flex_attention

    def attend(q, k, v, bm):
        return flex_attention(q, k, v, score_mod=score, block_mask=bm)
    return attend


def skipped(bm):
    """Share of the BlockMask's blocks that have no kv entry (neither partial nor full)."""
    KB = -(-bm.seq_lengths[1] // bm.BLOCK_SIZE[1])
    kept = bm.kv_num_blocks.sum() + (bm.full_kv_num_blocks.sum() if bm.full_kv_num_blocks is not None else 0)
    return 1.0 - float(kept) / (bm.kv_num_blocks.numel() * KB)


def reference(q, k, v, mask, score, rows):
    """float64 flex attention of the query rows `rows` (a LongTensor) by explicit math."""
    import torch
    q64, k64, v64 = (t.detach().double() for t in (q, k, v))
    out = torch.empty(B, H, len(rows), E, dtype=torch.float64)
    qi = rows[None, None, :, None]
    ki = torch.arange(k.shape[-2])[None, None, None, :]
    for b in range(B):   # one batch element at a time: [H, r, L] float64
        bi, hi = torch.tensor(b).view(1, 1, 1, 1), torch.arange(H).view(1, H, 1, 1)
        s = q64[b:b + 1, :, rows] @ k64[b:b + 1].transpose(-1, -2) / math.sqrt(E)
        if score is not None:
            s = score(s, bi, hi, qi, ki)
        s = s.masked_fill(~mask(bi, hi, qi, ki), float("-inf"))
        out[b] = (torch.softmax(s, -1) @ v64[b:b + 1])[0]
    return out


# ---------------------------------------------------------------- timing

def timed(fn, runs):
    """(first call s, median s of `runs` further calls)."""
    t = time.perf_counter()
    fn()
    first = time.perf_counter() - t
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return first, statistics.median(ts)


def fwd_bwd(f, args, g):
    """A callable: f(*args) then out.backward(g), grads of args reset first."""
    def run():
        for a in args[:3]:
            a.grad = None
        f(*args).backward(g)
    return run


def measure(impl, f, q, k, v, extra, g, runs, rec):
    """Times f's forward (no_grad) and forward+backward into rec[impl];
    returns (forward output, (dq, dk, dv)) or None where one failed."""
    import torch
    r = rec[impl] = {}
    out = grads = None
    try:
        with torch.no_grad():
            first, med = timed(lambda: f(q, k, v, *extra), runs)
            out = f(q, k, v, *extra)
        r.update(fwd_first_s=first, fwd_ms=med * 1e3)
    except Exception as e:   # noqa: BLE001 -- a row's failure is reported, the run goes on
        r["fwd_error"] = f"{type(e).__name__}: {e}"
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))
    try:
        first, med = timed(fwd_bwd(f, (qg, kg, vg, *extra), g), runs)
        r.update(fb_first_s=first, fb_ms=med * 1e3)
        grads = (qg.grad, kg.grad, vg.grad)
    except Exception as e:   # noqa: BLE001
        r["fb_error"] = f"{type(e).__name__}: {e}"
    return out, grads


def row(name, L, runs, torch_compile):
    """Every number for one variant at one length."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import create_block_mask
    import smelt
    gen = torch.Generator().manual_seed(0)
    q, k, v, g = (torch.randn(B, H, L, E, generator=gen) for _ in range(4))
    mask, score, explicit = make_variant(name, L)
    bm = create_block_mask(mask, None, None, L, L, device="cpu", BLOCK_SIZE=BLOCK)
    rec = {"variant": name, "L": L, "runs": runs, "skipped": skipped(bm)}
    attend = attend_fn(score)
    sf = smelt.compile(attend)
    outs = {"smelt": measure("smelt", sf, q, k, v, (bm,), g, runs, rec)}
    st = sf._smelt.stats()
    rec["smelt"]["stats"] = {k_: st[k_] for k_ in ("compiles", "backward_compiles", "breaks", "eager_entries")}
    try:
        with torch.no_grad():
            rec["smelt"]["fused"] = smelt.explain(attend, q, k, v, bm)["graph"].count("flex_attention(") == 1
    except Exception as e:   # noqa: BLE001
        rec["smelt"]["fused"] = f"explain failed: {e}"
    if torch_compile:
        torch._dynamo.reset()
        tf = torch.compile(attend, dynamic=False)
        outs["torch.compile"] = measure("torch.compile", tf, q, k, v, (bm,), g, runs, rec)
    am = explicit()

    def sdpa(q, k, v, am):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=am)
    outs["sdpa"] = measure("sdpa", sdpa, q, k, v, (am,), g, runs, rec)
    del am
    check(rec, outs, q, k, v, mask, score, L)
    return rec


def check(rec, outs, q, k, v, mask, score, L):
    """Forward errors against float64 on a row sample; smelt's grads against eager SDPA's."""
    import torch
    if L <= 1024:
        rows = torch.arange(L)
    else:
        rows = torch.sort(torch.randperm(L, generator=torch.Generator().manual_seed(1))[:510]).values
        rows = torch.cat([torch.tensor([0]), rows, torch.tensor([L - 1])]).unique()
    want = reference(q, k, v, mask, score, rows)
    for impl, (out, _) in outs.items():
        if out is not None:
            rec[impl]["fwd_err"] = float((out[:, :, rows].double() - want).abs().max())
    sg, eg = outs["smelt"][1], outs["sdpa"][1]
    if sg is not None and eg is not None:
        top = max(float(t.abs().max()) for t in eg)
        rec["smelt"]["grad_err"] = max(float((a - b).abs().max()) for a, b in zip(sg, eg))
        rec["smelt"]["grad_rel"] = rec["smelt"]["grad_err"] / top


def sdpa_compare(L, runs):
    """smelt flex causal forward vs smelt's compiled SDPA is_causal forward."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import create_block_mask
    import smelt
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, L, E, generator=gen) for _ in range(3))
    mask, _, _ = make_variant("causal", L)
    bm = create_block_mask(mask, None, None, L, L, device="cpu", BLOCK_SIZE=BLOCK)
    ff = smelt.compile(attend_fn(None))
    sf = smelt.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    with torch.no_grad():
        _, t_sdpa = timed(lambda: sf(q, k, v), runs)
        _, t_flex = timed(lambda: ff(q, k, v, bm), runs)
        _, t_sdpa2 = timed(lambda: sf(q, k, v), runs)   # again: load changes hit both
    t_sdpa = min(t_sdpa, t_sdpa2)
    return {"L": L, "flex_ms": t_flex * 1e3, "sdpa_ms": t_sdpa * 1e3, "ratio": t_flex / t_sdpa}


def startup(torch_compile):
    """Seconds of a tiny first compile per compiler (its one-time start-up)."""
    import torch
    import smelt
    x = torch.randn(64)
    res = {}
    comps = [("smelt", smelt.compile)] + ([("torch.compile", torch.compile)] if torch_compile else [])
    for name, c in comps:
        f = c(lambda x: x * 2 + 1)
        t = time.perf_counter()
        f(x)
        res[name] = time.perf_counter() - t
    return res


def tree_cpu_s():
    """CPU seconds of this process and its descendants (inductor's compile
    workers and the compilers they run) from /proc, with their reaped
    children's; children that exited unreaped are not counted."""
    stats = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(pid)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))   # ppid, CPU with reaped children
    mine, grew = {os.getpid()}, True
    while grew:
        more = {p for p, (pp, _) in stats.items() if pp in mine} - mine
        mine |= more
        grew = bool(more)
    return sum(stats[p][1] for p in mine if p in stats) / os.sysconf("SC_CLK_TCK")


def cpu_now():
    """(wall s, CPU s busy on the machine, CPU s of this process tree) or None off Linux."""
    try:
        with open("/proc/stat") as f:
            t = [int(x) for x in f.readline().split()[1:9]]
    except OSError:
        return None
    busy = (sum(t) - t[3] - t[4]) / os.sysconf("SC_CLK_TCK")   # all but idle and iowait
    return time.perf_counter(), busy, tree_cpu_s()


def others_busy(c0):
    """Average cores other processes kept busy since cpu_now() gave c0."""
    c1 = cpu_now()
    if c0 is None or c1 is None or c1[0] <= c0[0]:
        return None
    return max(0.0, (c1[1] - c0[1]) - (c1[2] - c0[2])) / (c1[0] - c0[0])


# ---------------------------------------------------------------- output

def fmt(v, spec=".1f"):
    return format(v, spec) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def ratio(a, b):
    return f"{a / b:.2f}" if isinstance(a, float) and isinstance(b, float) and b else "-"


def print_table(rows, notes):
    print(f"{'':16s} {'skip':>5s} | {'forward ms':^26s} | {'forward+backward ms':^26s} | "
          f"{'smelt / other':^17s} | {'1st call s (cold)':^19s} | {'max abs err':^26s} |")
    print(f"{'L     variant':16s} {'blks':>5s} | {'smelt':>8s} {'torch.c':>8s} {'sdpa+m':>8s} | "
          f"{'smelt':>8s} {'torch.c':>8s} {'sdpa+m':>8s} | {'f/tc':>5s} {'f/sd':>5s} {'fb/sd':>5s} | "
          f"{'s fwd':>6s} {'s f+b':>6s} {'tc fwd':>6s}| {'smelt':>8s} {'tc':>8s} {'sdpa':>8s} | "
          f"{'grad s':>8s} fused  oth")
    for r in rows:
        s, t, e = r["smelt"], r.get("torch.compile", {}), r["sdpa"]
        tfb = "n/a*" if "fb_error" in t else fmt(t.get("fb_ms"))
        print(f"{r['L']:<5d} {r['variant']:10s} {r['skipped'] * 100:4.0f}% | "
              f"{fmt(s.get('fwd_ms')):>8s} {fmt(t.get('fwd_ms')):>8s} {fmt(e.get('fwd_ms')):>8s} | "
              f"{fmt(s.get('fb_ms')):>8s} {tfb:>8s} {fmt(e.get('fb_ms')):>8s} | "
              f"{ratio(s.get('fwd_ms'), t.get('fwd_ms')):>5s} {ratio(s.get('fwd_ms'), e.get('fwd_ms')):>5s} "
              f"{ratio(s.get('fb_ms'), e.get('fb_ms')):>5s} | "
              f"{fmt(s.get('fwd_first_s'), '.2f'):>6s} {fmt(s.get('fb_first_s'), '.2f'):>6s} "
              f"{fmt(t.get('fwd_first_s'), '.2f'):>6s}| "
              f"{fmt(s.get('fwd_err'), '.1e'):>8s} {fmt(t.get('fwd_err'), '.1e'):>8s} "
              f"{fmt(e.get('fwd_err'), '.1e'):>8s} | {fmt(s.get('grad_err'), '.1e'):>8s} "
              f"{'yes' if s.get('fused') is True else 'NO ':5s} {fmt(r.get('others_busy'), '.2f')}")
        for impl in ("smelt", "torch.compile", "sdpa"):
            for key in ("fwd_error", "fb_error"):
                msg = r.get(impl, {}).get(key)
                if msg:
                    notes.setdefault(f"{impl} {'forward' if key == 'fwd_error' else 'forward+backward'}: "
                                     f"{msg.splitlines()[0][:200]}", []).append(f"{r['L']} {r['variant']}")


def smelt_wrong(r):
    s = r["smelt"]
    return ("fwd_error" in s or "fb_error" in s or s.get("fwd_err", 0.0) > FWD_TOL
            or s.get("grad_rel", 0.0) > GRAD_TOL)


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="1024 only, 3 timed calls")
    p.add_argument("--lengths", default="1024,4096")
    p.add_argument("--variants", default="causal,sliding,document,alibi")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-inductor", action="store_true")
    p.add_argument("--json", default=os.path.join(HERE, "results", "flex_bench.json"), metavar="PATH")
    args = p.parse_args(argv)
    cache = tempfile.mkdtemp(prefix="flex-bench-")
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
    os.environ["SMELT_CACHE_DIR"] = os.path.join(cache, "smelt")   # cold: empty caches
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
    import torch
    import smelt
    torch.set_num_threads(args.threads)
    smelt._C.set_num_threads(args.threads)
    lengths = [1024] if args.quick else [int(x) for x in args.lengths.split(",")]
    tc = not args.no_inductor
    load = os.getloadavg()[0]
    wall = time.perf_counter()
    start = startup(tc)
    rows, cmp = [], []
    for L in lengths:
        runs = 3 if args.quick else 5 if L <= 1024 else 2
        for name in args.variants.split(","):
            c0 = cpu_now()
            rows.append(row(name, L, runs, tc))
            rows[-1]["others_busy"] = others_busy(c0)
            print(f"  {L} {name}: done ({time.perf_counter() - wall:.0f} s)", file=sys.stderr)
        c0 = cpu_now()
        cmp.append(sdpa_compare(L, runs))
        cmp[-1]["others_busy"] = others_busy(c0)
    runs = "3 calls" if args.quick else "5 calls (L <= 1024) / 2 (above)"
    print(f"\nFlexAttention, CPU float32, {args.threads} threads, B={B} H={H} head dim {E}, block {BLOCK}; "
          f"ms: median of {runs} after the first; load {load:.2f} at start, "
          f"{os.getloadavg()[0]:.2f} at end; torch {torch.__version__}")
    print("compiler start-up (a tiny first compile, before the rows): "
          + ", ".join(f"{k} {v:.2f} s" for k, v in start.items()))
    print("sliding: causal window of 256 (q >= kv, q - kv < 256); document: L/256 random-length documents, "
          "causal; alibi: score + slope[h] * (kv - q), causal")
    print("err: forward vs float64 (all rows at L <= 1024, 512 sampled above); grad s: smelt's dq/dk/dv vs "
          "eager SDPA's; sdpa+m: eager F.scaled_dot_product_attention with the explicit mask; oth: cores other "
          "processes kept busy during the row (compare only rows near 0)")
    notes = {}
    print_table(rows, notes)
    for msg, where in notes.items():
        print(f"* {msg} ({', '.join(where)})")
    print("smelt flex causal forward vs smelt SDPA is_causal=True forward (target: flex <= 1.2x):")
    for c in cmp:
        print(f"  L={c['L']}: flex {c['flex_ms']:.1f} ms, sdpa {c['sdpa_ms']:.1f} ms, {c['ratio']:.2f}x "
              f"{'met' if c['ratio'] <= 1.2 else 'MISSED'} (oth {fmt(c['others_busy'], '.2f')})")
    busy = [f"{r['L']} {r['variant']}" for r in rows if (r.get("others_busy") or 0) > 0.25]
    if busy:
        print(f"other processes kept more than a quarter of a core busy during: {', '.join(busy)} "
              "(their times are not quiet-machine figures)")
    print(f"total {time.perf_counter() - wall:.0f} s")
    bad = [f"{r['L']} {r['variant']}" for r in rows if smelt_wrong(r)]
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"meta": {"load_start": load, "load_end": os.getloadavg()[0], "threads": args.threads,
                                "torch": torch.__version__, "B": B, "H": H, "E": E, "block": BLOCK,
                                "startup_s": start},
                       "rows": rows, "smelt_flex_vs_sdpa_causal": cmp}, f, indent=1)
    if bad:
        print(f"!!! smelt failed or is wrong (fwd err > {FWD_TOL}, grad err > {GRAD_TOL} x max|g|): "
              + ", ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
