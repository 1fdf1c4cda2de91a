#!/usr/bin/env python3
"""smelt's CUDA back end beside eager torch and torch.compile (inductor) on
one NVIDIA GPU, in one run:

  copy       x.clone() of 256 MiB: the copy-bandwidth reference (bytes read
             plus written)
  pointwise  a chain of 4 ops (mul, add, sin, mul) on 64M float32 / bfloat16
  reduce     sum over the rows of [8192, 8192]; the full sum of 64M
  norm       softmax and layer_norm on [8192, 8192] and [32768, 1024],
             float32 and bfloat16
  sdpa       scaled_dot_product_attention, bfloat16, B=4 H=16, seq 1k..8k,
             head dim 64 and 128, causal and not: smelt against torch's
             flash, memory-efficient and cuDNN kernels (torch.nn.attention.
             sdpa_kernel), forward and backward (backward = forward+backward
             minus forward; counted as 2.5x the forward's FLOPs)
  models     GPT-2 small (12 layers, d 768) and BERT-base, bfloat16 weights,
             batch 8 x 512 tokens: inference and a training step (forward,
             loss, backward)
  cold       first-call time in a new process with empty caches (smelt's
             SMELT_CACHE_DIR, inductor's TORCHINDUCTOR_CACHE_DIR and Triton's
             TRITON_CACHE_DIR), then warm (a second process, the same
             caches), smelt against torch.compile

Timing: warm-up calls first (the compile among them), then CUDA events
around each call and the median (as many calls as fit a time budget).
Inputs that would fit in the L2 cache are rotated among several copies, so
that calls read device memory, not the cache. GB/s counts each input read
once and each output written once; "% copy" is that over the clone's GB/s.
Ratios are time ratios, smelt / other: below 1, smelt is faster. `err` is
smelt's relative error (norm) against eager ("!" above the dtype's
tolerance). A case smelt does not compile for CUDA still runs (smelt runs it
eagerly) and its row says "eager fallback" with the reason; a case that
fails is a row with the error, and the run goes on.

Usage: python3 benchmarks/cuda_bench.py [--quick] [--only GROUPS]
           [--no-inductor] [--json PATH] [--table PATH]
--quick trims sizes, layers and repeats (and inductor's training compiles)
to fit about 5 minutes. Exit status 1 when a smelt result is wrong.
"""
import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
smelt = None   # imported by main() and by a smelt child only (inductor's children never load it)

DEVICE = "cuda"   # (a test harness may point it elsewhere)
GROUPS = ("copy", "pointwise", "reduce", "norm", "sdpa", "models", "cold")
TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 5e-3}


# ---------------------------------------------------------------- timing

def import_smelt():
    """smelt (the installed package, else the in-tree one) as this module's
    global."""
    global smelt
    try:
        import smelt as m
    except ImportError:
        sys.path.insert(0, os.path.join(REPO, "python"))
        import smelt as m
    smelt = m


def l2_bytes():
    return getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20) or (50 << 20)


def input_sets(make):
    """Sets of make()'s inputs to rotate among: one when a set is twice the
    L2 cache or more, else enough to overflow it three times (8 at most)."""
    first = make()
    nbytes = sum(t.numel() * t.element_size() for t in first)
    n = 1 if nbytes >= 2 * l2_bytes() else min(8, math.ceil(3 * l2_bytes() / max(nbytes, 1)))
    return [first] + [make() for _ in range(n - 1)]


def time_ms(fn, sets, budget_s):
    """Median milliseconds of fn(*set) over the sets in turn, by CUDA
    events around each call, after warm-up calls."""
    for i in range(max(3, len(sets))):
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn(*sets[0])
    torch.cuda.synchronize()
    one = max(time.perf_counter() - t, 1e-6)
    reps = int(min(max(budget_s / one, 5), 200))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for i, (a, b) in enumerate(events):
        a.record()
        fn(*sets[i % len(sets)])
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in events)


def rel_err(out, ref):
    out, ref = first_tensor(out).double(), first_tensor(ref).double()
    n = ref.norm().item()
    return (out - ref).norm().item() / n if n else (out - ref).norm().item()


def first_tensor(obj):
    if isinstance(obj, torch.Tensor):
        return obj
    if hasattr(obj, "to_tuple"):
        obj = obj.to_tuple()
    if isinstance(obj, (tuple, list)) and obj:
        return first_tensor(obj[0])
    raise TypeError(f"no tensor in {type(obj).__name__}")


START = time.monotonic()
LIMIT = [None]   # --time-limit


def out_of_time(row, results):
    """True (and row recorded as skipped) when --time-limit has passed."""
    if LIMIT[0] is None or time.monotonic() - START < LIMIT[0]:
        return False
    row["error"] = "skipped: --time-limit reached"
    results.append(row)
    progress(row)
    return True


def short(exc):
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= 140 else text[:137] + "..."


def smelt_status(compiled):
    """'compiled', 'partial: why' or 'eager fallback: why' from the
    CompiledFunction's counters."""
    st = compiled._smelt.stats()
    why = (st["last_break"] or "").replace("\n", " ")[:120]
    if st["graphs"] and not st["eager_entries"] and not st["breaks"]:
        return "compiled"
    return f"partial: {why}" if st["graphs"] else f"eager fallback: {why}"


# ---------------------------------------------------------------- cases

class Case:
    """One row: fn on inputs from make(); work = bytes moved (GB/s); dtype
    for the tolerance."""

    def __init__(self, group, name, fn, make, work, unit, dtype):
        self.group, self.name, self.fn, self.make = group, name, fn, make
        self.work, self.unit, self.dtype = work, unit, dtype


def chain(x):
    return torch.sin(x * 1.5 + 0.5) * x


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def rand(*shape, dtype=torch.float32):
    return torch.randn(shape, device=DEVICE, dtype=dtype)


def micro_cases(groups, quick):
    n = (16 if quick else 64) << 20
    side = 4096 if quick else 8192
    rows = 8192 if quick else 32768
    f32, bf16 = torch.float32, torch.bfloat16
    out = []
    if "copy" in groups:
        m = (64 if quick else 256) << 18   # float32 elements of 64 / 256 MiB
        out.append(Case("copy", f"clone {m * 4 >> 20} MiB", torch.clone, lambda: (rand(m),), 8 * m, "GB/s", f32))
    for dt in (f32, bf16):
        es = torch.tensor([], dtype=dt).element_size()
        tag = "f32" if dt == f32 else "bf16"
        if "pointwise" in groups:
            out.append(Case("pointwise", f"chain4 {n >> 20}M {tag}", chain, lambda dt=dt: (rand(n, dtype=dt),),
                            2 * n * es, "GB/s", dt))
        if "reduce" in groups:
            out.append(Case("reduce", f"rowsum {side}x{side} {tag}", lambda x: x.sum(-1),
                            lambda dt=dt: (rand(side, side, dtype=dt),), side * side * es, "GB/s", dt))
            out.append(Case("reduce", f"sum {n >> 20}M {tag}", torch.sum, lambda dt=dt: (rand(n, dtype=dt),),
                            n * es, "GB/s", dt))
        if "norm" in groups:
            for r, c in ((side, side), (rows, 1024)):
                out.append(Case("norm", f"softmax {r}x{c} {tag}", lambda x: torch.softmax(x, -1),
                                lambda r=r, c=c, dt=dt: (rand(r, c, dtype=dt),), 2 * r * c * es, "GB/s", dt))
                out.append(Case("norm", f"layernorm {r}x{c} {tag}", layer_norm,
                                lambda r=r, c=c, dt=dt: (rand(r, c, dtype=dt), rand(c, dtype=dt), rand(c, dtype=dt)),
                                (2 * r * c + 2 * c) * es, "GB/s", dt))
    return out


def sdpa_fn(causal):
    def attn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return attn


def sdpa_cases(quick):
    """(name, causal, make, FLOPs) for B=4 H=16 bfloat16."""
    seqs = (1024, 4096) if quick else (1024, 2048, 4096, 8192)
    out = []
    for L in seqs:
        for E in (64, 128):
            for causal in (False, True):
                flops = 4 * 4 * 16 * L * L * E // (2 if causal else 1)
                out.append((f"L{L} E{E}{' causal' if causal else ''}", causal,
                            lambda L=L, E=E: tuple(rand(4, 16, L, E, dtype=torch.bfloat16) for _ in range(3)), flops))
    return out


# ---------------------------------------------------------------- running

def run_micro(case, args, results):
    """Times eager, inductor and smelt on one case; appends its row."""
    row = {"group": case.group, "case": case.name, "unit": case.unit}
    if out_of_time(row, results):
        return
    try:
        sets = input_sets(case.make)
        ref = case.fn(*sets[0])
        impls = {"eager": case.fn}
        if args.inductor and case.group != "copy":
            torch._dynamo.reset()
            impls["inductor"] = torch.compile(case.fn)
        if case.group != "copy":
            impls["smelt"] = smelt.compile(case.fn)
        for name, f in impls.items():
            try:
                t = time.perf_counter()
                out = f(*sets[0])
                torch.cuda.synchronize()
                row[f"{name}_first_s"] = time.perf_counter() - t
                row[f"{name}_err"] = rel_err(out, ref)
                del out
                row[f"{name}_ms"] = time_ms(f, sets, args.budget)
            except Exception as e:   # noqa: BLE001 - reported in the row
                row[f"{name}_error"] = short(e)
        if "smelt" in impls:
            row["smelt_status"] = smelt_status(impls["smelt"])
            row["wrong"] = row.get("smelt_err", 0.0) > TOL[case.dtype]
        ms = row.get("eager_ms" if case.group == "copy" else "smelt_ms")
        if ms:
            row["rate"] = case.work / ms / 1e6   # GB/s (smelt's; eager's for the copy)
    except Exception as e:   # noqa: BLE001
        row["error"] = short(e)
    results.append(row)
    progress(row)


def run_sdpa(args, results):
    """SDPA rows: forward and backward TFLOP/s of torch's kernels and smelt's."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION}
    for name, causal, make, flops in sdpa_cases(args.quick):
        fwd = {"group": "sdpa", "case": name + " fwd", "unit": "TFLOP/s"}
        bwd = {"group": "sdpa", "case": name + " bwd", "unit": "TFLOP/s"}
        if out_of_time(fwd, results):
            continue
        try:
            attn = sdpa_fn(causal)
            sets = input_sets(make)
            impls = {}
            for b, be in backends.items():
                def run(q, k, v, be=be):
                    with sdpa_kernel(be):
                        return attn(q, k, v)
                impls[b] = run
            compiled = smelt.compile(attn)
            impls["smelt"] = compiled
            with torch.no_grad():
                ref = impls["flash"](*sets[0])
            g = torch.randn_like(ref)
            leaves = tuple(t.detach().requires_grad_() for t in sets[0])
            ref_grads = torch.autograd.grad(impls["flash"](*leaves), leaves, g)
            for b, f in impls.items():
                time_sdpa(b, f, sets, (ref, g, ref_grads), flops, fwd, bwd, args)
            fwd["smelt_status"] = bwd["smelt_status"] = smelt_status(compiled)
            for row in (fwd, bwd):
                row["wrong"] = row.get("smelt_err", 0.0) > TOL[torch.bfloat16]
        except Exception as e:   # noqa: BLE001
            fwd["error"] = short(e)
        for row in (fwd, bwd):
            results.append(row)
            progress(row)


def time_sdpa(name, f, sets, refs, flops, fwd, bwd, args):
    """Forward (no grad) and forward+backward times of one implementation,
    its errors against refs = (flash's output, the output's gradient,
    flash's input gradients for it)."""
    ref, g, ref_grads = refs
    try:
        with torch.no_grad():
            out = f(*sets[0])
            fwd[f"{name}_err"] = rel_err(out, ref)
            fwd[f"{name}_ms"] = time_ms(f, sets, args.budget)
        fwd[f"{name}_tflops"] = flops / fwd[f"{name}_ms"] / 1e9
    except Exception as e:   # noqa: BLE001
        fwd[f"{name}_error"] = short(e)
        return
    leaves = [tuple(t.detach().requires_grad_() for t in s) for s in sets]

    def step(q, k, v):
        return torch.autograd.grad(f(q, k, v), (q, k, v), g)
    try:
        bwd[f"{name}_err"] = rel_err(torch.cat([d.flatten() for d in step(*leaves[0])]),
                                     torch.cat([d.flatten() for d in ref_grads]))
        both = time_ms(step, leaves, args.budget)
        bwd[f"{name}_ms"] = max(both - fwd[f"{name}_ms"], 1e-6)
        bwd[f"{name}_tflops"] = 2.5 * flops / bwd[f"{name}_ms"] / 1e9
    except Exception as e:   # noqa: BLE001
        bwd[f"{name}_error"] = short(e)


def gpt2(quick, layers=None):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=layers or (4 if quick else 12), n_embd=768, n_head=12, vocab_size=50257,
                     n_positions=1024, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                     attn_implementation="sdpa")
    m = GPT2LMHeadModel(cfg)
    m.loss_type = "ForCausalLM"
    return m


def bert(quick, layers=None):
    from transformers import BertConfig, BertModel
    cfg = BertConfig(num_hidden_layers=layers or (4 if quick else 12), hidden_size=768, num_attention_heads=12,
                     intermediate_size=3072, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                     attn_implementation="sdpa")
    return BertModel(cfg)


MODELS = {"gpt2": gpt2, "bert": bert}


def model_loss(name, out, ids):
    if name == "gpt2":
        return F.cross_entropy(out.logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
    return out.last_hidden_state.float().pow(2).mean()


def run_models(args, results):
    batch, seq = (4, 256) if args.quick else (8, 512)
    for name, build in MODELS.items():
        for mode in ("inference", "train"):
            row = {"group": "models", "case": f"{name} {'4' if args.quick else '12'}L {mode} {batch}x{seq}",
                   "unit": "ms"}
            if out_of_time(row, results):
                continue
            try:
                torch.manual_seed(0)
                model = build(args.quick).to(DEVICE, torch.bfloat16)
                model.train(mode == "train")
                ids = torch.randint(0, model.config.vocab_size, (batch, seq), device=DEVICE)
                impls = {"eager": model}
                if args.inductor and (mode == "inference" or not args.quick):
                    torch._dynamo.reset()
                    impls["inductor"] = torch.compile(model)
                impls["smelt"] = smelt.compile(model)
                time_model(name, mode, model, impls, ids, row, args)
                row["smelt_status"] = smelt_status(impls["smelt"])
                row["wrong"] = row.get("smelt_err", 0.0) > 3e-2
                del model, impls
            except Exception as e:   # noqa: BLE001
                row["error"] = short(e)
            torch.cuda.empty_cache()
            results.append(row)
            progress(row)


def time_model(name, mode, model, impls, ids, row, args):
    """First call, error against eager's output (or loss) and median time of
    each implementation of model (they share its weights)."""
    ref = None
    for impl, m in impls.items():
        if mode == "inference":
            def call(x, m=m):
                with torch.no_grad():
                    return m(x)
        else:
            def call(x, m=m):
                loss = model_loss(name, m(x), x)
                loss.backward()
                model.zero_grad(set_to_none=True)
                return loss
        try:
            t = time.perf_counter()
            out = call(ids)
            torch.cuda.synchronize()
            row[f"{impl}_first_s"] = time.perf_counter() - t
            val = first_tensor(out).detach()
            ref = val if ref is None else ref
            row[f"{impl}_err"] = rel_err(val, ref)
            del out, val
            row[f"{impl}_ms"] = time_ms(call, [(ids,)], args.budget)
        except Exception as e:   # noqa: BLE001
            row[f"{impl}_error"] = short(e)


CHILD = r"""
import json, sys, time, torch
sys.path.insert(0, sys.argv[3])
import cuda_bench as cb
job, compiler = sys.argv[1], sys.argv[2]
try:
    fn, inputs = cb.cold_workload(job)
    with torch.no_grad():
        fn(*inputs)                       # eager: CUDA, cuBLAS and the model are ready
        torch.cuda.synchronize()
        if compiler == "smelt":
            cb.import_smelt()
            f = cb.smelt.compile(fn)
        else:
            f = torch.compile(fn)
        t = time.perf_counter()
        f(*inputs)
        torch.cuda.synchronize()
        first = time.perf_counter() - t
    res = {"first_s": first}
    if compiler == "smelt":
        res["status"] = cb.smelt_status(f)
    print(json.dumps(res))
except Exception as e:
    print(json.dumps({"error": cb.short(e)}))
"""


def cold_workload(job):
    """(function, inputs) of a cold-start job, built the same in each child."""
    torch.manual_seed(0)
    if job == "chain":
        return chain, (rand(16 << 20),)
    model = gpt2(True).to(DEVICE, torch.bfloat16).eval()
    return model, (torch.randint(0, 50257, (4, 256), device=DEVICE),)


def run_cold(args, results):
    """First call cold (empty caches) and warm (the caches the cold run
    left), each in a new process, for smelt and inductor."""
    from smelt.bench import child_env
    compilers = ["smelt"] + (["inductor"] if args.inductor else [])
    for job in ("chain", "gpt2"):
        row = {"group": "cold", "case": "chain4 16M f32" if job == "chain" else "gpt2 4L inference 4x256",
               "unit": "s"}
        if out_of_time(row, results):
            continue
        for compiler in compilers:
            with tempfile.TemporaryDirectory(prefix="cuda-bench-") as tmp:
                env = child_env(tmp)
                env["TRITON_CACHE_DIR"] = os.path.join(tmp, "triton")
                env["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + env.get("PYTHONPATH", "")
                for warm in ("cold", "warm"):
                    limit = args.child_timeout
                    if LIMIT[0] is not None:
                        limit = max(10, min(limit, LIMIT[0] + 20 - (time.monotonic() - START)))
                    res = run_child(job, compiler, env, limit)
                    key = f"{compiler}_{warm}_s"
                    if "first_s" in res:
                        row[key] = res["first_s"]
                        if "status" in res:
                            row["smelt_status"] = res["status"]
                    else:
                        row[f"{compiler}_{warm}_error"] = res.get("error", "?")
        results.append(row)
        progress(row)


def run_child(job, compiler, env, timeout):
    try:
        r = subprocess.run([sys.executable, "-c", CHILD, job, compiler, os.path.dirname(os.path.abspath(__file__))],
                           capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    for line in reversed(r.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": f"exit {r.returncode}: {r.stderr.strip().splitlines()[-1:] or ''}"}


# ---------------------------------------------------------------- output

def fmt(v, spec=".2f"):
    return "n/a" if v is None else format(v, spec)


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def progress(row):
    if "error" in row:
        print(f"  {row['group']:<9} {row['case']:<28} ERROR {row['error']}", flush=True)
        return
    keys = [k for k in row if k.endswith(("_ms", "_s"))]
    print(f"  {row['group']:<9} {row['case']:<28} " + " ".join(f"{k}={row[k]:.4g}" for k in keys)
          + (f"  [{row['smelt_status']}]" if "smelt_status" in row else ""), flush=True)


def status_text(row):
    s = row.get("error") or row.get("smelt_error") or row.get("smelt_status", "")
    return s if len(s) <= 60 else s[:57] + "..."


def table(results, copy_gbs):
    """The text table: one block per group."""
    lines = []
    micro = [r for r in results if r["unit"] == "GB/s"]
    if micro:
        lines.append(f"{'case':<28} {'eager ms':>9} {'ind ms':>8} {'smelt ms':>9} {'smelt GB/s':>10} "
                     f"{'% copy':>6} {'s/eager':>7} {'s/ind':>6} {'err':>8}  smelt")
        for r in micro:
            pct = 100 * r["rate"] / copy_gbs if r.get("rate") and copy_gbs else None
            lines.append(f"{r['case']:<28} {fmt(r.get('eager_ms'), '.3f'):>9} {fmt(r.get('inductor_ms'), '.3f'):>8} "
                         f"{fmt(r.get('smelt_ms'), '.3f'):>9} {fmt(r.get('rate'), '.0f'):>10} {fmt(pct, '.0f'):>6} "
                         f"{ratio(r.get('smelt_ms'), r.get('eager_ms')):>7} "
                         f"{ratio(r.get('smelt_ms'), r.get('inductor_ms')):>6} "
                         f"{fmt(r.get('smelt_err'), '.1e'):>8}{'!' if r.get('wrong') else ' '} {status_text(r)}")
    sdpa = [r for r in results if r["group"] == "sdpa"]
    if sdpa:
        lines += ["", f"{'attention bf16 B4 H16':<28} {'flash':>7} {'effic':>7} {'cudnn':>7} {'smelt':>7}  "
                      f"{'s/best':>6} {'err':>8}  TFLOP/s; smelt"]
        for r in sdpa:
            best = min((r[k] for k in ("flash_ms", "efficient_ms", "cudnn_ms") if r.get(k)), default=None)
            lines.append(f"{r['case']:<28} {fmt(r.get('flash_tflops'), '.0f'):>7} "
                         f"{fmt(r.get('efficient_tflops'), '.0f'):>7} {fmt(r.get('cudnn_tflops'), '.0f'):>7} "
                         f"{fmt(r.get('smelt_tflops'), '.0f'):>7}  {ratio(r.get('smelt_ms'), best):>6} "
                         f"{fmt(r.get('smelt_err'), '.1e'):>8}{'!' if r.get('wrong') else ' '} {status_text(r)}")
    models = [r for r in results if r["group"] == "models"]
    if models:
        lines += ["", f"{'model (bf16)':<28} {'eager ms':>9} {'ind ms':>8} {'smelt ms':>9} {'s/eager':>7} "
                      f"{'s/ind':>6} {'err':>8}  smelt"]
        for r in models:
            lines.append(f"{r['case']:<28} {fmt(r.get('eager_ms')):>9} {fmt(r.get('inductor_ms')):>8} "
                         f"{fmt(r.get('smelt_ms')):>9} {ratio(r.get('smelt_ms'), r.get('eager_ms')):>7} "
                         f"{ratio(r.get('smelt_ms'), r.get('inductor_ms')):>6} "
                         f"{fmt(r.get('smelt_err'), '.1e'):>8}{'!' if r.get('wrong') else ' '} {status_text(r)}")
    cold = [r for r in results if r["group"] == "cold"]
    if cold:
        lines += ["", f"{'first call (s)':<28} {'smelt':>7} {'ind':>7} {'ind/s':>6} {'smelt w':>7} {'ind w':>7} "
                      f"{'ind/s w':>7}"]
        for r in cold:
            lines.append(f"{r['case']:<28} {fmt(r.get('smelt_cold_s')):>7} {fmt(r.get('inductor_cold_s')):>7} "
                         f"{ratio(r.get('inductor_cold_s'), r.get('smelt_cold_s')):>6} "
                         f"{fmt(r.get('smelt_warm_s')):>7} {fmt(r.get('inductor_warm_s')):>7} "
                         f"{ratio(r.get('inductor_warm_s'), r.get('smelt_warm_s')):>7}")
            errs = [f"{k[:-6]}: {v}" for k, v in r.items() if k.endswith("_error")]
            lines += [f"    {e}" for e in errs]
    return "\n".join(lines)


def header():
    p = torch.cuda.get_device_properties(0)
    ok, why = smelt._C.backend_available("cuda")
    return (f"{p.name}, {p.multi_processor_count} SMs, L2 {l2_bytes() >> 20} MiB; torch {torch.__version__}; "
            f"smelt cuda back end: {'available' if ok else 'NOT available: ' + why}")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer layers and repeats (~5 minutes)")
    p.add_argument("--only", default=",".join(GROUPS), help="groups to run: " + ",".join(GROUPS))
    p.add_argument("--no-inductor", dest="inductor", action="store_false", help="skip torch.compile")
    p.add_argument("--json", help="write every row there")
    p.add_argument("--table", help="write the final table there")
    p.add_argument("--time-limit", type=float, help="seconds: cases not started by then are skipped "
                   "(the table still prints)")
    a = p.parse_args(argv)
    a.groups = [g for g in a.only.split(",") if g]
    bad = set(a.groups) - set(GROUPS)
    if bad:
        p.error(f"unknown groups {sorted(bad)}; known: {','.join(GROUPS)}")
    a.budget = 0.15 if a.quick else 0.5
    a.child_timeout = 180 if a.quick else 600
    return a


def main(argv=None):
    args = parse_args(argv)
    LIMIT[0] = args.time_limit
    if not torch.cuda.is_available():
        print("cuda_bench: torch sees no CUDA device")
        return 1
    import_smelt()
    head = header()
    print(head, flush=True)
    results = []
    groups = set(args.groups) | ({"copy"} if {"pointwise", "reduce", "norm"} & set(args.groups) else set())
    try:
        for case in micro_cases(groups, args.quick):
            run_micro(case, args, results)
        if "sdpa" in groups:
            run_sdpa(args, results)
        if "models" in groups:
            run_models(args, results)
        if "cold" in groups:
            run_cold(args, results)
    except KeyboardInterrupt:   # (timeout -s INT): the table of what ran
        print("cuda_bench: interrupted", flush=True)
    copy = next((r.get("rate") for r in results if r["group"] == "copy"), None)
    text = table(results, copy)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": head, "quick": args.quick, "copy_gbs": copy, "rows": results}, fh, indent=1)
    if args.table:
        with open(args.table, "w") as fh:
            fh.write(head + "\n" + text + "\n")
    print("\n" + text)
    wrong = [r["case"] for r in results if r.get("wrong")]
    if wrong:
        print("!!! smelt results outside tolerance: " + ", ".join(wrong))
    return 1 if wrong else 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
