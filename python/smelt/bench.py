"""smelt benchmark suite: real models and micro-kernels on CPU, eager torch vs
torch.compile (inductor) vs smelt, in one run.

Workloads (eval mode, torch.no_grad(), float32):
  mlp        Linear-GELU-Linear-GELU-Linear-LayerNorm
  cnn        conv3x3-BatchNorm-ReLU-MaxPool stages, global average pool, Linear
  gpt2       transformers GPT2LMHeadModel (random weights, use_cache=False) forward
  bert       transformers BertModel (BERT-base widths, fewer layers) forward
  mlp-bf16, gpt2-bf16, bert-bf16, mlp-fp16, gpt2-fp16, bert-fp16 (group: half)
             the same models, weights and inputs in bfloat16 / float16
             (Module.to(dtype)), checked against eager in that dtype with
             the dtype's tolerance (HALF_TOL)
  chain, chainmath, softmax, layernorm, sum
             the kernels of benchmarks/micro.py (group name: micro), here run
             through smelt.compile / torch.compile on the eager function

Every model runs under each compiler in a fresh child process with empty
caches (a new TORCHINDUCTOR_CACHE_DIR and SMELT_CACHE_DIR each), so the first
call is a cold start: it includes the compiler's one-time process start-up
(LLVM JIT, inductor) but not imports or model construction. Then warm-up calls
and the median of timed calls (steady state). For smelt and inductor a second
fresh process then reuses the cache directories the first one filled and
times only the first call (and checks it): the warm first call. Inductor runs
with its caches as torch enables them by default (FX graph cache, AOT autograd
cache, local autotune cache), all under that TORCHINDUCTOR_CACHE_DIR; the
variables that would switch a cache off are removed from the children's
environment. The micro-kernels share one child per compiler, cold and warm
(the ones after the first are marked: compiler already started). Every call's
result is compared with eager outside the timed region: the reported error is
the largest over all calls. For smelt the report says whether the model really
ran compiled (one graph, several graphs around breaks, or eagerly) and why not.
A child that fails, crashes or times out is reported as such and the suite
goes on. After the tables: the geometric means of inductor/smelt first-call
time, cold and warm, and issue 5's targets (>= 30x, cold and warm) per model.

Usage: python -m smelt.bench [--quick] [--models mlp,gpt2,micro,...]
           [--compilers eager,smelt,inductor] [--threads 2]
           [--json bench_results.json] [--png PATH] [--timeout S] [--no-warm]
       python -m smelt.bench --corpus [--corpus-jobs 2]
           (instead: benchmarks/corpus_report.py, how smelt runs the corpus
           of small programs in tests/corpus: share compiled whole, partly
           eager, wrong, crashes, graphs per break, per category)
Exit status 1 when a smelt result disagrees with eager, else 0. Running this
file as a script (python python/smelt/bench.py) works without importing smelt
in the parent, so eager and inductor still run when smelt._C cannot load.
"""
import argparse
import contextlib
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent.parent          # python/smelt/bench.py -> checkout root
COMPILERS = ("eager", "smelt", "inductor", "dynamo+smelt")   # the last: torch.compile(backend="smelt")
SIZES = ("default", "quick", "tiny")
MODEL_TOL = (1e-3, 1e-4)                  # rtol, atol of model outputs vs eager
WARM_COMPILERS = ("smelt", "inductor")    # the ones with a disk cache: a warm first call too
FIRST_CALL_TARGET = 30.0                  # issue 5: inductor / smelt first call, cold and warm
# Environment variables that switch a compiler cache off (or bound it): removed
# from the children's environment so both compilers run with their defaults.
CACHE_SWITCHES = ("TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_FX_GRAPH_CACHE_DEFAULT",
                  "TORCHINDUCTOR_AUTOGRAD_CACHE", "TORCHINDUCTOR_AUTOTUNE_LOCAL_CACHE",
                  "TORCHINDUCTOR_FORCE_DISABLE_CACHES", "TORCH_COMPILE_FORCE_DISABLE_CACHES",
                  "SMELT_DISABLE_CACHE", "SMELT_CACHE_MAX_MB")

# Timed calls per child: warm-up calls, then as many calls as fit budget_s,
# clamped to [min_iters, max_iters].
TIMING = {"default": {"warmup": 2, "budget_s": 3.0, "min_iters": 5, "max_iters": 100},
          "quick": {"warmup": 1, "budget_s": 0.6, "min_iters": 3, "max_iters": 30},
          "tiny": {"warmup": 1, "budget_s": 0.1, "min_iters": 3, "max_iters": 10}}


# --------------------------------------------------------------------------
# workloads (built in the child; each returns a Workload)

class Workload:
    """One benchmark: `fn` (module or function), its `inputs`, the tolerance
    (rtol, atol) of its outputs against eager, a description and the config
    that built it (recorded in the JSON)."""

    def __init__(self, fn, inputs, desc, config, tol=MODEL_TOL):
        self.fn, self.inputs, self.desc, self.config, self.tol = fn, inputs, desc, config, tol


def build_mlp(size):
    import torch
    import torch.nn as nn
    d, batch = {"default": (1024, 256), "quick": (256, 64), "tiny": (32, 8)}[size]
    model = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, 4 * d), nn.GELU(),
                          nn.Linear(4 * d, d), nn.LayerNorm(d)).eval()
    return Workload(model, (torch.randn(batch, d),),
                    f"MLP {d}-{4 * d}-{4 * d}-{d} GELU+LN, batch {batch}",
                    {"width": d, "batch": batch})


def conv_stage(nn, cin, cout):
    """conv3x3 (pad 1) - BatchNorm (random running stats) - ReLU - MaxPool 2."""
    bn = nn.BatchNorm2d(cout)
    bn.running_mean.normal_(0.0, 0.1)
    bn.running_var.uniform_(0.5, 1.5)
    bn.weight.data.uniform_(0.5, 1.5)
    bn.bias.data.normal_(0.0, 0.1)
    return [nn.Conv2d(cin, cout, 3, padding=1), bn, nn.ReLU(), nn.MaxPool2d(2)]


def build_cnn(size):
    import torch
    import torch.nn as nn
    batch, hw, chans = {"default": (32, 64, (32, 64, 128, 256)), "quick": (4, 32, (16, 32, 64)),
                        "tiny": (2, 16, (8, 16))}[size]
    layers, cin = [], 3
    for c in chans:
        layers += conv_stage(nn, cin, c)
        cin = c
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    model = nn.Sequential(*layers).eval()
    return Workload(model, (torch.randn(batch, 3, hw, hw),),
                    f"CNN {len(chans)}x(conv-bn-relu-pool) {'-'.join(map(str, chans))}, "
                    f"{batch}x3x{hw}x{hw}", {"batch": batch, "hw": hw, "channels": list(chans)})


def build_gpt2(size):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    layers, embd, heads, seq, batch, vocab = {
        "default": (6, 512, 8, 256, 4, 50257), "quick": (2, 256, 4, 64, 2, 50257),
        "tiny": (1, 64, 2, 16, 1, 1000)}[size]
    cfg = GPT2Config(n_layer=layers, n_embd=embd, n_head=heads, vocab_size=vocab,
                     bos_token_id=vocab - 1, eos_token_id=vocab - 1, use_cache=False)
    model = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, vocab, (batch, seq))
    return Workload(model, (ids,),
                    f"GPT-2 {layers}L d{embd} h{heads}, {batch}x{seq} tokens, vocab {vocab}",
                    {"n_layer": layers, "n_embd": embd, "n_head": heads, "seq": seq,
                     "batch": batch, "vocab": vocab,
                     "attn_implementation": model.config._attn_implementation})


def build_bert(size):
    import torch
    from transformers import BertConfig, BertModel
    layers, hidden, heads, inter, seq, batch = {
        "default": (4, 768, 12, 3072, 128, 4), "quick": (2, 256, 4, 1024, 64, 2),
        "tiny": (1, 64, 2, 128, 16, 1)}[size]
    cfg = BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                     intermediate_size=inter)
    model = BertModel(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    return Workload(model, (ids,),
                    f"BERT {layers}L d{hidden} h{heads} ff{inter}, {batch}x{seq} tokens",
                    {"layers": layers, "hidden": hidden, "heads": heads, "intermediate": inter,
                     "seq": seq, "batch": batch,
                     "attn_implementation": model.config._attn_implementation})


MICRO = ("chain", "chainmath", "softmax", "layernorm", "sum")


def load_micro():
    """benchmarks/micro.py of this checkout as a module (ImportError if absent)."""
    path = REPO / "benchmarks" / "micro.py"
    if not path.exists():
        raise ImportError(f"{path} not found (the micro-kernels live in the source checkout)")
    sys.path.insert(0, str(path.parent))
    try:
        import micro
    finally:
        sys.path.remove(str(path.parent))
    return micro


def build_micro(name, size):
    """A micro.py kernel: its eager function, inputs, tolerance and description."""
    micro = load_micro()
    case = next(c for c in micro.make_cases(size != "default") if c["name"] == name)
    return Workload(case["eager"], case["inputs"](), case["desc"],
                    {"micro_case": name, "quick_sizes": size != "default"}, case["tol"])


# Half-precision rows: suffix -> (torch dtype name, (rtol, atol) vs eager in
# that dtype). Eager and the compilers sum in different orders, so single
# roundings differ by an ulp and the differences grow through the layers
# (bfloat16 has 8 significant bits: an ulp of 1.0 is 0.0078). Eager's own
# bf16 BERT output is 0.074 from the float64 value at worst (smelt's
# 0.073, inductor's 0.046), so two correct results may differ by about
# 0.1; a wrong answer is off by far more.
HALF_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
HALF_TOL = {"bf16": (1e-1, 1e-1), "fp16": (1.5e-2, 1.5e-2)}
HALF_MODELS = ("mlp", "gpt2", "bert")


def build_half(base, tag, size):
    """Workload `base` with its module and floating inputs in the dtype of
    HALF_DTYPES[tag] (the same random weights and inputs as `base`)."""
    import torch
    dt = getattr(torch, HALF_DTYPES[tag])
    wl = BUILDERS[base](size)
    wl.fn = wl.fn.to(dt)
    wl.inputs = tuple(x.to(dt) if x.is_floating_point() else x for x in wl.inputs)
    wl.desc, wl.tol = f"{wl.desc}, {HALF_DTYPES[tag]}", HALF_TOL[tag]
    wl.config = dict(wl.config, dtype=HALF_DTYPES[tag])
    return wl


BUILDERS = {"mlp": build_mlp, "cnn": build_cnn, "gpt2": build_gpt2, "bert": build_bert}
HALF = tuple(f"{m}-{t}" for t in HALF_DTYPES for m in HALF_MODELS)
BUILDERS.update({f"{m}-{t}": (lambda size, m=m, t=t: build_half(m, t, size))
                 for t in HALF_DTYPES for m in HALF_MODELS})
BUILDERS.update({m: (lambda size, m=m: build_micro(m, size)) for m in MICRO})
MODELS = tuple(BUILDERS)
GROUPS = {"micro": MICRO, "models": ("mlp", "cnn", "gpt2", "bert"), "half": HALF, "all": MODELS}


# --------------------------------------------------------------------------
# child: workloads under one compiler, in a fresh process

def tensors_of(out):
    """The tensors of a model output in a fixed order: a tensor, a (nested)
    tuple/list, or a dict such as transformers' ModelOutput."""
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in tensors_of(o)]
    return []


class Check:
    """Running comparison of results with the eager reference: ok, the largest
    absolute and relative errors seen, how many calls were checked, and why
    the first failure failed."""

    def __init__(self, ref, tol):
        self.ref, (self.rtol, self.atol) = tensors_of(ref), tol
        self.ok, self.max_abs, self.max_rel, self.calls, self.why = True, 0.0, 0.0, 0, None

    def fail(self, why):
        self.ok = False
        self.why = self.why or why

    def add(self, out):
        self.calls += 1
        got = tensors_of(out)
        if len(got) != len(self.ref):
            return self.fail(f"{len(got)} output tensors, eager gives {len(self.ref)}")
        for i, (g, r) in enumerate(zip(got, self.ref)):
            self.compare(i, g, r)

    def compare(self, i, g, r):
        if g.shape != r.shape or g.dtype != r.dtype:
            return self.fail(f"output {i}: {g.dtype}{tuple(g.shape)}, eager {r.dtype}{tuple(r.shape)}")
        if not r.is_floating_point():
            g, r = g.double(), r.double()
        diff = (g - r).abs()
        if diff.numel() == 0:
            return
        if bool(diff.isnan().any()) and not bool((g.isnan() == r.isnan()).all()):
            return self.fail(f"output {i}: NaN where eager has none (or the reverse)")
        diff = diff.nan_to_num(0.0)
        self.max_abs = max(self.max_abs, float(diff.max()))
        self.max_rel = max(self.max_rel, float((diff / r.abs().clamp_min(1e-30)).max()))
        if not bool((diff <= self.atol + self.rtol * r.abs()).all()):
            self.fail(f"output {i}: error above tolerance (rtol={self.rtol:g}, atol={self.atol:g})")

    def result(self):
        return {"ok": self.ok, "max_abs_err": self.max_abs, "max_rel_err": self.max_rel,
                "calls_checked": self.calls, "why": self.why,
                "ref_max_abs": max((float(r.abs().max()) for r in self.ref if r.numel()),
                                   default=0.0)}


IDLE_AFTER_CHECK_S = 0.01


def time_calls(run, check, timing):
    """Warm-up calls, then timed calls (count fitted to the budget); each
    result is checked after its timer stops. The check's torch ops run on
    torch's OpenMP threads, which spin for a while after a parallel region:
    a short idle after each check lets them park, so they do not take cores
    from the next timed call (smelt's own thread pool is not OpenMP; eager's
    and inductor's calls reuse the OpenMP team). Returns the timing record."""
    t0 = time.perf_counter()
    for _ in range(timing["warmup"]):
        check.add(run())
        time.sleep(IDLE_AFTER_CHECK_S)
    per_call = max((time.perf_counter() - t0) / max(timing["warmup"], 1), 1e-6)
    n = int(min(timing["max_iters"], max(timing["min_iters"], timing["budget_s"] / per_call)))
    times = []
    for _ in range(n):
        t = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t)
        check.add(out)
        del out
        time.sleep(IDLE_AFTER_CHECK_S)
    return {"median_s": statistics.median(times), "min_s": min(times), "iters": n,
            "warmup": timing["warmup"]}


def smelt_functions():
    """Every smelt CompiledFunction alive in this process: smelt.compile's and
    the ones the frame hook made for functions an eager fallback called."""
    import smelt
    cls = smelt._C.CompiledFunction
    return [o for o in gc.get_objects() if type(o) is cls]


SMELT_CACHE_COUNTS = ("hits", "misses", "writes", "evictions", "corrupt")


def smelt_cache_delta(before):
    """smelt's disk-cache counters since `before` (a cache_info() dict), with
    the cache's directory and whether it is enabled."""
    import smelt
    now = smelt.cache_info()
    delta = {k: now[k] - before[k] for k in SMELT_CACHE_COUNTS}
    delta.update(enabled=now["enabled"], dir=now["dir"])
    return delta


def smelt_report(top, before, cache_before):
    """What smelt did for one workload: the CompiledFunctions made since
    `before` (a list of those that existed) with their counters, its disk
    cache's counters since `cache_before`, and a status: 'compiled' (the
    whole call ran as compiled graphs), 'partial' (the top level ran eagerly,
    parts of it compiled) or 'eager' (nothing compiled)."""
    old = {id(f) for f in before}
    rows = []
    for f in smelt_functions():
        if id(f) in old:
            continue
        st = dict(f.stats())
        st["name"] = getattr(f.fn, "__qualname__", repr(f.fn))
        st["top"] = f is top
        rows.append(st)
    top_st = top.stats()
    graphs = sum(r["compiles"] for r in rows)
    if top_st["compiles"] and not top_st["eager_entries"]:
        status = "compiled"
    else:
        status = "partial" if graphs else "eager"
    reasons = sorted({r["last_break"] for r in rows if r["breaks"] and r["last_break"]})
    return {"status": status, "graphs": graphs, "breaks": sum(r["breaks"] for r in rows),
            "break_reasons": reasons, "top": top_st,
            "cache": smelt_cache_delta(cache_before),
            "trace_ms": sum(r["trace_ms"] for r in rows),
            "compile_ms": sum(r["compile_ms"] for r in rows),
            "functions": sorted(rows, key=lambda r: (not r["top"], r["name"]))}


def inductor_report():
    """torch._dynamo's counters: graphs compiled, graph breaks with reasons,
    and the hits, misses and bypasses of inductor's FX graph cache and the
    AOT autograd cache."""
    from torch._dynamo.utils import counters
    breaks = dict(counters["graph_break"])
    fx, aot = counters["inductor"], counters["aot_autograd"]
    cache = {f"fxgraph_{k}": int(fx[f"fxgraph_cache_{k}"]) for k in ("hit", "miss", "bypass")}
    cache.update({f"autograd_{k}": int(aot[f"autograd_cache_{k}"]) for k in ("hit", "miss", "bypass")})
    return {"graphs": int(counters["stats"]["unique_graphs"]),
            "frames_ok": int(counters["frames"]["ok"]),
            "frames_total": int(counters["frames"]["total"]),
            "breaks": int(sum(breaks.values())),
            "break_reasons": sorted(str(k) for k in breaks),
            "cache": cache}


def inductor_cache_config():
    """Where inductor caches and which of its caches are on in this process."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    return {"dir": cache_dir(),
            "fx_graph_cache": getattr(inductor_config, "fx_graph_cache", None),
            "autograd_cache": getattr(functorch_config, "enable_autograd_cache", None),
            "autotune_local_cache": getattr(inductor_config, "autotune_local_cache", None),
            "force_disable_caches": getattr(inductor_config, "force_disable_caches", None)}


def compile_for(compiler, fn):
    """fn wrapped by the compiler (eager: fn itself) and a function returning
    the compiler's report once the calls are done. Counters and dynamo's
    caches start empty for each workload."""
    if compiler == "smelt":
        import smelt
        before, cache_before = smelt_functions(), smelt.cache_info()
        cf = smelt.compile(fn)
        return cf, lambda: smelt_report(cf._smelt, before, cache_before)
    if compiler == "inductor":
        import torch
        from torch._dynamo.utils import counters
        torch._dynamo.reset()
        counters.clear()
        return torch.compile(fn), inductor_report
    if compiler == "dynamo+smelt":
        import torch
        import smelt
        from torch._dynamo.utils import counters
        torch._dynamo.reset()
        counters.clear()
        before = len(smelt._dynamo.compiled_graphs())
        return torch.compile(fn, backend="smelt"), lambda: dynamo_smelt_report(before)
    return fn, lambda: {}


def dynamo_smelt_report(before):
    """What torch.compile(backend="smelt") did: Dynamo's graphs and breaks
    and, for the smelt graphs made since `before`, the status smelt_report
    gives ('compiled': every Dynamo graph one smelt graph, nothing eager)."""
    import smelt
    from torch._dynamo.utils import counters
    cfs = smelt._dynamo.compiled_graphs()[before:]
    sts = [cf.stats() for cf in cfs]
    whole = sts and all(st["compiles"] and not st["eager_entries"] and not st["breaks"] for st in sts)
    dyn_breaks = dict(counters["graph_break"])
    reasons = sorted({str(k) for k in dyn_breaks} | {st["last_break"] for st in sts if st["last_break"]})
    return {"status": "compiled" if whole else "partial" if any(st["compiles"] for st in sts) else "eager",
            "graphs": len(cfs), "breaks": int(sum(dyn_breaks.values())) + sum(st["breaks"] for st in sts),
            "break_reasons": reasons}


def run_workload(name, compiler, size, warm=False):
    """Builds workload `name`, times its first call under `compiler`, takes
    the eager reference, then (unless `warm`: a warm-cache run times only the
    first call) the timed calls. Returns the result dict."""
    import torch
    res = {"model": name, "compiler": compiler}
    torch.manual_seed(0)
    wl = BUILDERS[name](size)
    res.update(desc=wl.desc, config=wl.config)
    import gc
    gc.collect()
    base = vm_bytes("VmRSS:")   # the loaded model and its inputs
    with torch.no_grad():
        reset_peak()
        fn, report = compile_for(compiler, wl.fn)
        t = time.perf_counter()
        first = fn(*wl.inputs)
        res["first_call_s"] = time.perf_counter() - t
        peaks = [vm_bytes("VmHWM:")]
        check = Check(first if compiler == "eager" else wl.fn(*wl.inputs), wl.tol)
        check.add(first)
        del first
        if not warm:
            reset_peak()   # (not the eager reference the check computed)
            res.update(time_calls(lambda: fn(*wl.inputs), check, TIMING[size]))
            peaks.append(vm_bytes("VmHWM:"))
    if base is not None and None not in peaks:
        res["peak_above_model_mb"] = (max(peaks) - base) / 2**20
    res["check"] = check.result()
    res["report"] = report()
    return res


def child_main(job):
    """Runs job = {models, compiler, size, threads, warm, out}: each workload
    in turn, appending its result to job['out'] as one JSON line (so a crash
    keeps the results before it). Only the first workload's first call is in
    a fresh process; with warm, only first calls are timed."""
    import torch
    torch.set_num_threads(job["threads"])
    extra = {"torch_threads": torch.get_num_threads()}
    if job["compiler"] in ("smelt", "dynamo+smelt"):
        import smelt
        smelt._C.set_num_threads(job["threads"])
        extra["smelt_threads"] = smelt._C.get_num_threads()
    if job["compiler"] == "inductor":
        extra["inductor_caches"] = inductor_cache_config()
    for i, name in enumerate(job["models"]):
        res = run_workload(name, job["compiler"], job["size"], job.get("warm", False))
        res.update(extra, fresh_process=i == 0, peak_rss_mb=peak_rss_mb(),
                   loadavg=os.getloadavg())
        with open(job["out"], "a") as fh:
            fh.write(json.dumps(res) + "\n")


def vm_bytes(key):
    """A /proc/self/status field in bytes (VmRSS: resident now, VmHWM: the
    peak since the last reset_peak), or None."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def reset_peak():
    """Restarts VmHWM from the resident size now (Linux: clear_refs 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def peak_rss_mb():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --------------------------------------------------------------------------
# parent: one child per model and compiler (micro-kernels: one per compiler),
# and a warm one after it for smelt and inductor

def child_env(tmp):
    """The child's environment: the compiler caches under tmp (empty for a
    cold run, as the cold run left them for a warm one) with the compilers'
    default cache switches, no Hugging Face network access."""
    env = {k: v for k, v in os.environ.items() if k not in CACHE_SWITCHES}
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")
    env["SMELT_CACHE_DIR"] = os.path.join(tmp, "smelt")
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error",
               TOKENIZERS_PARALLELISM="false")
    return env


def tail(path, n=15):
    """The last n non-empty lines of a text file (for crash reports)."""
    try:
        with open(path, errors="replace") as fh:
            lines = [ln.rstrip() for ln in fh if ln.strip()]
    except OSError:
        return []
    return lines[-n:]


def run_child(models, compiler, args, caches=None, warm=False):
    """Runs the workloads `models` under `compiler` in one fresh process with
    its compiler caches under `caches` (default: a new empty folder); `warm`
    times first calls only. Returns one result dict per model; a workload the
    child did not finish (failure, crash, timeout) gets {'available': False,
    'reason'} with the end of the child's output."""
    with tempfile.TemporaryDirectory(prefix="smelt-bench-") as tmp:
        job = {"models": list(models), "compiler": compiler, "size": args.size,
               "threads": args.threads, "warm": warm, "out": os.path.join(tmp, "results.jsonl")}
        log = os.path.join(tmp, "log.txt")
        cmd = [sys.executable, str(HERE), "--child", json.dumps(job)]
        t = time.perf_counter()
        with open(log, "w") as fh:
            try:
                rc = subprocess.run(cmd, env=child_env(caches or tmp), stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL,
                                    timeout=args.timeout * len(models)).returncode
            except subprocess.TimeoutExpired:
                rc = None
        wall = time.perf_counter() - t
        done = read_results(job["out"])
        why = child_failure(rc, args.timeout * len(models), tail(log))
        return [dict(done[m], available=True, reason=None, process_wall_s=wall) if m in done else
                {"model": m, "compiler": compiler, "available": False, "process_wall_s": wall,
                 "reason": why, "log_tail": tail(log)} for m in models]


def read_results(path):
    """{model: result} from a child's JSON-lines output (empty if none)."""
    with contextlib.suppress(OSError), open(path) as fh:
        return {r["model"]: r for r in map(json.loads, fh)}
    return {}


def child_failure(rc, timeout, log_tail):
    """Why a child did not deliver a result: its exit and its last message."""
    why = (f"timed out after {timeout:g} s" if rc is None else
           f"killed by signal {-rc}" if rc < 0 else f"exited with status {rc}")
    last = next((ln for ln in reversed(log_tail) if not ln.startswith(" ")), "")
    return f"{why}: {last}" if last else why


def cache_note(res):
    """The cache counters of a result, short: 'cache 1 hit 0 miss'."""
    c = (res.get("report") or {}).get("cache")
    if not c:
        return ""
    if res["compiler"] == "smelt":
        return f", cache {c['hits']} hit {c['misses']} miss"
    return (f", fx cache {c['fxgraph_hit']} hit {c['fxgraph_miss']} miss "
            f"{c['fxgraph_bypass']} bypass")


def progress_line(res, warm=False):
    """One line per finished child (warm: a warm-cache run, first call only)."""
    head = f"  {res['model']:<10} {res['compiler'] + (' warm' if warm else ''):<14}"
    if not res.get("available"):
        return f"{head} FAILED ({res['process_wall_s']:.1f} s): {res['reason']}"
    extra = cache_note(res)
    if res["compiler"] == "smelt":
        rep = res["report"]
        extra = f"{rep['status']}, {rep['graphs']} graph(s){extra}"
    extra = f"  [{extra.lstrip(', ')}]" if extra else ""
    median = "" if warm else f"  median {res['median_s'] * 1e3:9.2f} ms"
    return (f"{head} first {res['first_call_s']:8.3f} s{median}"
            f"  err {res['check']['max_abs_err']:.1e}{'' if res['check']['ok'] else ' FAIL'}"
            f"{extra}  ({res['process_wall_s']:.1f} s)")


WARM_KEYS = ("available", "reason", "first_call_s", "check", "report", "fresh_process",
             "process_wall_s", "peak_rss_mb", "loadavg", "log_tail")


def run_group(group, compiler, args):
    """The cold child of `group` under `compiler` and, for a compiler with a
    disk cache (unless --no-warm), the warm child on the caches the cold one
    filled, for the workloads the cold one finished. Returns the cold
    results, each with 'warm' (the warm run's first call, check, report) and
    'warm_first_call_s' (None when the warm run failed) where one ran."""
    with tempfile.TemporaryDirectory(prefix="smelt-bench-caches-") as caches:
        cold = run_child(group, compiler, args, caches)
        for res in cold:
            print(progress_line(res), flush=True)
        again = [r["model"] for r in cold if r.get("available")]
        if compiler not in WARM_COMPILERS or not again or not getattr(args, "warm", True):
            return cold
        warm = {r["model"]: r for r in run_child(again, compiler, args, caches, warm=True)}
    for res in cold:
        w = warm.get(res["model"])
        if w is not None:
            print(progress_line(w, warm=True), flush=True)
            res["warm"] = {k: w[k] for k in WARM_KEYS if k in w}
            res["warm_first_call_s"] = w["first_call_s"] if w.get("available") else None
    return cold


def run_all(models, compilers, args):
    """All jobs; returns one record per model. Each model runs in its own
    fresh process per compiler (smelt and inductor: then a warm one); the
    micro-kernels share one per compiler."""
    records = {m: {"name": m, "results": {}} for m in models}
    groups = [[m] for m in models if m not in MICRO] + [[m for m in models if m in MICRO]]
    for group in filter(None, groups):
        for compiler in compilers:
            for res in run_group(group, compiler, args):
                rec = records[res["model"]]
                rec["results"][compiler] = res
                if res.get("desc"):
                    rec.update(desc=res["desc"], config=res["config"])
    for rec in records.values():
        add_ratios(rec)
    return list(records.values())


def add_ratios(rec):
    """smelt/eager and smelt/inductor of the steady-state medians (< 1: smelt
    faster); inductor/smelt of the cold and of the warm first calls (> 1:
    smelt faster) and whether each reaches FIRST_CALL_TARGET."""
    r = rec["results"]
    s = r.get("smelt") or {}
    for other in ("eager", "inductor"):
        o = r.get(other) or {}
        if s.get("available") and o.get("available"):
            rec[f"smelt_over_{other}"] = s["median_s"] / o["median_s"]
    i = r.get("inductor") or {}
    if s.get("available") and i.get("available"):
        rec["inductor_over_smelt_first"] = i["first_call_s"] / s["first_call_s"]
        rec["target_cold_met"] = rec["inductor_over_smelt_first"] >= FIRST_CALL_TARGET
    if s.get("warm_first_call_s") and i.get("warm_first_call_s"):
        rec["inductor_over_smelt_warm"] = i["warm_first_call_s"] / s["warm_first_call_s"]
        rec["target_warm_met"] = rec["inductor_over_smelt_warm"] >= FIRST_CALL_TARGET
    d = r.get("dynamo+smelt") or {}
    if s.get("available") and d.get("available"):
        rec["dynamo_smelt_over_smelt"] = d["median_s"] / s["median_s"]
        rec["dynamo_smelt_over_smelt_first"] = d["first_call_s"] / s["first_call_s"]
    for name, res in (("smelt", s), ("inductor", i)):
        if res.get("warm_first_call_s") and res.get("median_s"):
            rec[f"{name}_warm_over_steady_s"] = res["warm_first_call_s"] - res["median_s"]


# --------------------------------------------------------------------------
# printing

def fmt(value, spec, missing="n/a"):
    return missing if value is None else format(value, spec)


def field(rec, compiler, key, scale=1.0, spec=".2f"):
    """rec's result[compiler][key] * scale formatted, '-' when not run, 'n/a' when failed."""
    res = rec["results"].get(compiler)
    if res is None:
        return "-"
    return fmt(res[key] * scale if res.get("available") else None, spec)


def first_field(rec, compiler, warm=False):
    """First-call seconds, cold or (warm) with the caches the cold run
    filled; '*' marks a call in a process that had run another workload
    before (the micro-kernels after the first); '-' not run, 'n/a' failed."""
    res = rec["results"].get(compiler)
    if res is not None and res.get("available") and warm:
        res = res.get("warm")
    if res is None:
        return "-"
    if not res.get("available"):
        return "n/a"
    return format(res["first_call_s"], ".3g") + ("" if res.get("fresh_process", True) else "*")


def err_field(rec, compiler):
    res = rec["results"].get(compiler)
    if res is None:
        return "-"
    if not res.get("available"):
        return "n/a"
    c = res["check"]
    return f"{c['max_abs_err']:.1e}" + ("" if c["ok"] else "!")


def smelt_status(rec):
    """'compiled 1g', 'partial 12g 3b', 'EAGER', 'n/a', '-' for the table."""
    res = rec["results"].get("smelt")
    if res is None:
        return "-"
    if not res.get("available"):
        return "n/a"
    rep = res["report"]
    if rep["status"] == "compiled":
        return f"compiled {rep['graphs']}g"
    if rep["status"] == "partial":
        return f"partial {rep['graphs']}g {rep['breaks']}b"
    return "EAGER"


def print_table(records):
    """The results tables: steady state (ms, ratios, errors, smelt status),
    then first calls (cold and warm, inductor/smelt, issue 5's targets)."""
    print()
    print("steady state: median ms per call; ratios < 1 mean smelt is faster; err: max abs "
          "error vs eager over all calls\n(! = above tolerance); smelt: compiled Ng = N graphs, "
          "partial = eager top level with N graphs and B breaks (Nb),\nEAGER = nothing compiled")
    h = (f"{'model':<10} {'eager ms':>9} {'smelt ms':>9} {'ind ms':>9} {'s/eager':>8} {'s/ind':>6} "
         f"{'smelt err':>10} {'ind err':>9}  smelt")
    print(h)
    print("-" * len(h))
    for rec in records:
        print(f"{rec['name']:<10} {field(rec, 'eager', 'median_s', 1e3):>9} "
              f"{field(rec, 'smelt', 'median_s', 1e3):>9} {field(rec, 'inductor', 'median_s', 1e3):>9} "
              f"{fmt(rec.get('smelt_over_eager'), '.2f'):>8} {fmt(rec.get('smelt_over_inductor'), '.2f'):>6} "
              f"{err_field(rec, 'smelt'):>10} {err_field(rec, 'inductor'):>9}  {smelt_status(rec)}")
    line = half_summary(records)
    if line:
        print(line)
    print_memory(records)
    print_first_calls(records)
    print_dynamo_smelt(records)


def print_dynamo_smelt(records):
    """The dynamo+smelt table (torch.compile(backend="smelt"): Dynamo's front
    end, smelt's back end) next to smelt's own front end: steady-state ms,
    first call, the ratios to smelt and Dynamo's graphs and breaks."""
    rows = [r for r in records if "dynamo+smelt" in r["results"]]
    if not rows:
        return
    print()
    print("dynamo+smelt = torch.compile(backend=\"smelt\"): Dynamo captures, smelt compiles each FX graph;\n"
          "d+s/smelt > 1: smelt's own front end is faster; graphs/breaks: Dynamo's graphs, breaks of both")
    h = (f"{'model':<10} {'d+s ms':>9} {'smelt ms':>9} {'d+s/smelt':>9} {'d+s first s':>12} "
         f"{'smelt first s':>13} {'first d+s/s':>11} {'d+s err':>9}  graphs")
    print(h)
    print("-" * len(h))
    for rec in rows:
        res = rec["results"]["dynamo+smelt"]
        rep = res.get("report") or {}
        what = f"{rep.get('status', 'n/a')} {rep.get('graphs', 0)}g {rep.get('breaks', 0)}b" \
            if res.get("available") else "n/a"
        print(f"{rec['name']:<10} {field(rec, 'dynamo+smelt', 'median_s', 1e3):>9} "
              f"{field(rec, 'smelt', 'median_s', 1e3):>9} {fmt(rec.get('dynamo_smelt_over_smelt'), '.2f'):>9} "
              f"{first_field(rec, 'dynamo+smelt'):>12} {first_field(rec, 'smelt'):>13} "
              f"{fmt(rec.get('dynamo_smelt_over_smelt_first'), '.1f'):>11} {err_field(rec, 'dynamo+smelt'):>9}  {what}")


def half_summary(records):
    """'half precision (issue 20): smelt faster than eager on 2 of 3 bf16
    rows, than inductor on ...', or None without half-precision rows."""
    parts = []
    for tag in HALF_DTYPES:
        rows = [r for r in records if r["name"].endswith("-" + tag)]
        for other in ("eager", "inductor"):
            done = [r for r in rows if f"smelt_over_{other}" in r]
            if done:
                won = [r["name"] for r in done if r[f"smelt_over_{other}"] < 1]
                parts.append(f"{tag}: smelt faster than {other} on {len(won)} of {len(done)}")
    return "half precision: " + "; ".join(parts) if parts else None


def print_memory(records):
    """Peak resident memory above the loaded model (compile, first call,
    timed calls; each compiler in its own fresh process), MB."""
    print()
    print("memory: peak resident MB above the loaded model and its inputs (compile, first and timed "
          "calls;\nfresh process per compiler; library code paged in counts, smelt gives LLVM's back "
          "after compiling);\ns-e = smelt minus eager; s/e = smelt / eager (target: at most 1.1)")
    h = f"{'model':<10} {'eager':>8} {'smelt':>8} {'ind':>8} {'s-e':>8} {'s/e':>6}"
    print(h)
    print("-" * len(h))
    for rec in records:
        res = rec.get("results", {})
        vals = {c: res.get(c, {}).get("peak_above_model_mb") for c in ("eager", "smelt", "inductor")}
        both = vals["eager"] is not None and vals["smelt"] is not None
        diff = vals["smelt"] - vals["eager"] if both else None
        ratio = vals["smelt"] / vals["eager"] if both and vals["eager"] > 0 else None
        print(f"{rec['name']:<10} {fmt(vals['eager'], '.0f'):>8} {fmt(vals['smelt'], '.0f'):>8} "
              f"{fmt(vals['inductor'], '.0f'):>8} {fmt(diff, '+.0f'):>8} {fmt(ratio, '.2f'):>6}")


def ms_text(seconds, spec):
    """'12.3 ms' ('-' for None)."""
    return "-" if seconds is None else f"{seconds * 1e3:{spec}} ms"


def ratio_text(value, missing="-"):
    """A first-call ratio rounded down to 0.1 (so 29.97, a missed 30x target,
    does not print as 30.0); `missing` for None."""
    return missing if value is None else f"{math.floor(value * 10) / 10:.1f}"


def verdict(rec, kind):
    """'met', 'MISSED' or '-' (not measured) for target `kind` (cold|warm)."""
    met = rec.get(f"target_{kind}_met")
    return "-" if met is None else "met" if met else "MISSED"


def print_first_calls(records):
    """The first-call table: seconds cold and warm, inductor/smelt, targets."""
    print()
    print("first call, s: 1st = cold (fresh process, empty caches); warm = a second fresh process "
          "on the caches\nthe first filled (eager has none); * = the process ran other micro-kernels "
          "first (compiler started);\nind/s = inductor / smelt (> 1: smelt faster; rounded down); "
          f"target (issue 5): ind/s >= {FIRST_CALL_TARGET:g}")
    print("warm-steady = warm first call minus one steady-state call (median): what the warm start "
          "adds to\nrunning the model (trace, cache load, first-run costs; noise can make it negative)")
    h = (f"{'model':<10} {'eager 1st':>9} {'smelt 1st':>9} {'smelt warm':>10} {'ind 1st':>8} "
         f"{'ind warm':>8} {'ind/s 1st':>9} {'ind/s warm':>10} {'30x cold':>8} {'30x warm':>8} "
         f"{'s warm-steady':>13} {'ind warm-steady':>15}")
    print(h)
    print("-" * len(h))
    for rec in records:
        print(f"{rec['name']:<10} {first_field(rec, 'eager'):>9} {first_field(rec, 'smelt'):>9} "
              f"{first_field(rec, 'smelt', True):>10} {first_field(rec, 'inductor'):>8} "
              f"{first_field(rec, 'inductor', True):>8} "
              f"{ratio_text(rec.get('inductor_over_smelt_first')):>9} "
              f"{ratio_text(rec.get('inductor_over_smelt_warm')):>10} "
              f"{verdict(rec, 'cold'):>8} {verdict(rec, 'warm'):>8} "
              f"{ms_text(rec.get('smelt_warm_over_steady_s'), '.1f'):>13} "
              f"{ms_text(rec.get('inductor_warm_over_steady_s'), '.0f'):>15}")
    print()
    print("\n".join(first_call_summary(records)))


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def first_call_summary(records):
    """Lines after the tables, per group (the models, the micro-kernels): the
    geometric means of inductor/smelt first-call time, cold and warm, and
    which rows meet issue 5's targets."""
    lines = []
    for label, names in (("models", GROUPS["models"]),
                         ("micro-kernels (* rows: compiler already started)", MICRO)):
        rows = [r for r in records if r["name"] in names]
        parts = [f"{word} {ratio_text(geomean(vals))}x" for word, vals in
                 (("cold", [r["inductor_over_smelt_first"] for r in rows
                            if "inductor_over_smelt_first" in r]),
                  ("warm", [r["inductor_over_smelt_warm"] for r in rows
                            if "inductor_over_smelt_warm" in r])) if vals]
        if not parts:
            continue
        lines.append(f"first calls, {label}: inductor/smelt geomean {', '.join(parts)}")
        lines += [target_line(rows, kind) for kind in ("cold", "warm")]
    return lines or ["first calls: inductor/smelt not measured (needs smelt and inductor)"]


def target_line(rows, kind):
    """'  target cold >= 30x: met by 3 of 4 (mlp, ...); MISSED by gpt2 (21.0x)'."""
    ratio = f"inductor_over_smelt_{'first' if kind == 'cold' else 'warm'}"
    done = [r for r in rows if f"target_{kind}_met" in r]
    head = f"  target {kind} >= {FIRST_CALL_TARGET:g}x: "
    if not done:
        return head + "not measured"
    met = [r["name"] for r in done if r[f"target_{kind}_met"]]
    missed = [f"{r['name']} ({ratio_text(r[ratio])}x)" for r in done if not r[f"target_{kind}_met"]]
    return (head + f"met by {len(met)} of {len(done)}" + (f" ({', '.join(met)})" if met else "")
            + (f"; MISSED by {', '.join(missed)}" if missed else ""))


def print_notes(records):
    """Workload descriptions, failures, graph-break reasons, wrong results
    (cold or warm) and warm runs that missed their caches. Returns the number
    of smelt results that disagree with eager."""
    print()
    for rec in records:
        print(f"  {rec['name']:<10} {rec.get('desc') or ''}")
    wrong = 0
    for rec in records:
        for compiler, res in rec["results"].items():
            if not res.get("available"):
                print(f"{rec['name']}: {compiler} did not run: {res['reason']}")
                continue
            wrong += check_note(rec["name"], compiler, res)
            for why in res.get("report", {}).get("break_reasons", []):
                print(f"{rec['name']}: {compiler} graph break: {short_path(why)}")
            warm = res.get("warm")
            if warm is None:
                continue
            if not warm.get("available"):
                print(f"{rec['name']}: {compiler} warm run did not run: {warm['reason']}")
                continue
            wrong += check_note(rec["name"], compiler + " warm", warm)
            miss = warm_cache_miss(compiler, warm)
            if miss:
                print(f"{rec['name']}: {compiler} warm run did not hit its cache fully: {miss}")
    return wrong


def check_note(name, what, res):
    """Prints a '!!!' line when res's results disagree with eager; returns 1
    for a wrong smelt result, else 0."""
    if res["check"]["ok"]:
        return 0
    print(f"!!! {name}: {what} result disagrees with eager: "
          f"{res['check']['why']} (max abs err {res['check']['max_abs_err']:.3e})")
    return int(what.split()[0] in ("smelt", "dynamo+smelt"))


def warm_cache_miss(compiler, warm):
    """Why a warm run compiled instead of loading from its cache ('' when it
    only hit): smelt's disk-cache misses, inductor's FX graph cache misses
    or bypasses."""
    c = (warm.get("report") or {}).get("cache")
    if not c:
        return ""
    if compiler == "smelt":
        return "" if not c["misses"] else f"{c['misses']} miss(es), {c['hits']} hit(s)"
    if not c["fxgraph_miss"] and not c["fxgraph_bypass"]:
        return ""
    return (f"FX graph cache {c['fxgraph_miss']} miss(es), {c['fxgraph_bypass']} bypass(es), "
            f"{c['fxgraph_hit']} hit(s)")


def short_path(text):
    """text with '/.../site-packages/' and this checkout's path shortened."""
    for marker in ("site-packages/", "dist-packages/"):
        while (i := text.find(marker)) > 0:
            j = text.rfind(" ", 0, i) + 1
            text = text[:j] + "<" + marker[:-1] + ">/" + text[i + len(marker):]
    return text.replace(str(REPO) + "/", "")


# --------------------------------------------------------------------------
# chart

def write_png(records, path, subtitle=""):
    """Bar chart: steady-state time relative to eager, and first calls (cold;
    smelt and inductor also warm, hatched), both on log scales; smelt bars
    that did not run fully compiled are labelled. Returns None, or why no
    chart was written (no matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"matplotlib not available ({exc}); `make bench` installs it"
    names = [r["name"] for r in records]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(8, 1.1 * len(names)), 8))
    width = 0.27
    for k, compiler in enumerate(COMPILERS):
        rel = chart_series(records, compiler)
        xs = [i + (k - 1) * width for i in range(len(names))]
        ax1.bar(xs, rel, width, label=compiler, color=f"C{k}")
        if compiler == "smelt":
            label_smelt_bars(ax1, records, xs, rel)
    series = [(c, False) for c in COMPILERS] + [(c, True) for c in WARM_COMPILERS]
    series.sort(key=lambda cw: COMPILERS.index(cw[0]))
    width = 0.8 / len(series)
    for k, (compiler, warm) in enumerate(series):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(names))]
        ax2.bar(xs, first_series(records, compiler, warm), width, color=f"C{COMPILERS.index(compiler)}",
                hatch="//" if warm else None, label=f"{compiler} {'warm' if warm else 'cold'}")
    ax1.axhline(1.0, color="grey", linewidth=0.8)
    ax1.set_ylabel("steady-state time / eager (log)")
    ax2.set_ylabel("first call, s (log)")
    for ax in (ax1, ax2):
        ax.set_yscale("log")
        ax.set_xticks(range(len(names)), names)
        ax.legend(fontsize=8)
    started = any(not res.get("fresh_process", True) for r in records for res in r["results"].values())
    note = "; first calls after a micro-kernel's: compiler already started" if started else ""
    fig.suptitle(f"smelt vs eager vs torch.compile (inductor), CPU; no bar = did not run{note}\n"
                 + subtitle, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def chart_series(records, compiler):
    """[time / eager time] of compiler per record; NaN (no bar) where it or
    eager did not run."""
    rel = []
    for r in records:
        res, eager = r["results"].get(compiler) or {}, r["results"].get("eager") or {}
        ok = res.get("available") and eager.get("available")
        rel.append(res["median_s"] / eager["median_s"] if ok else float("nan"))
    return rel


def first_series(records, compiler, warm):
    """[first-call s] of compiler per record, cold or warm; NaN where it did not run."""
    out = []
    for r in records:
        res = r["results"].get(compiler) or {}
        if warm:
            res = (res.get("warm") or {}) if res.get("available") else {}
        out.append(res["first_call_s"] if res.get("available") else float("nan"))
    return out


def label_smelt_bars(ax, records, xs, heights):
    """Writes smelt's status above its bars where it did not compile fully."""
    for r, x, h in zip(records, xs, heights):
        label = smelt_status(r)
        if h == h and not label.startswith("compiled"):
            ax.annotate(label, (x, h), xytext=(0, 3), textcoords="offset points",
                        rotation=90, fontsize=7, ha="center", va="bottom")


# --------------------------------------------------------------------------
# main

def expand_models(spec):
    """'mlp,micro' -> ('mlp', 'chain', ...); ValueError naming an unknown name."""
    out = []
    for name in (n.strip() for n in spec.split(",") if n.strip()):
        if name not in BUILDERS and name not in GROUPS:
            raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS + tuple(GROUPS))}")
        out += [m for m in GROUPS.get(name, (name,)) if m not in out]
    return tuple(out)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m smelt.bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_const", const="quick", dest="size", default="default",
                   help="smaller shapes and fewer calls (about 4 minutes)")
    p.add_argument("--size", choices=SIZES, default="default",
                   help="shape preset; tiny is for the test suite")
    p.add_argument("--models", default="all",
                   help=f"comma list of {', '.join(MODELS)} or groups {', '.join(GROUPS)}")
    p.add_argument("--compilers", default=",".join(COMPILERS), help="comma list of eager,smelt,inductor,dynamo+smelt")
    p.add_argument("--threads", type=int, default=2, help="torch and smelt threads (default 2)")
    p.add_argument("--json", default="bench_results.json", metavar="PATH")
    p.add_argument("--png", metavar="PATH", help="bar chart (default: the JSON path with .png)")
    p.add_argument("--no-png", action="store_true", help="write no chart")
    p.add_argument("--no-warm", action="store_false", dest="warm",
                   help="skip the warm-cache first-call runs of smelt and inductor")
    p.add_argument("--timeout", type=float, default=900.0,
                   help="seconds per workload (a child running several gets the sum)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--corpus", action="store_true",
                   help="run benchmarks/corpus_report.py (the corpus of small programs) instead")
    p.add_argument("--corpus-jobs", type=int, default=2, help="child processes for --corpus (default 2)")
    args = p.parse_args(argv)
    try:
        args.models = expand_models(args.models)
    except ValueError as exc:
        p.error(str(exc))
    wanted = {c.strip() for c in args.compilers.split(",") if c.strip()}
    if not wanted or wanted - set(COMPILERS):
        p.error(f"--compilers: comma list of {', '.join(COMPILERS)}")
    args.compilers = tuple(c for c in COMPILERS if c in wanted)
    return args


def meta_info(args):
    """Machine, versions, threads and load: the context of the numbers."""
    import importlib.metadata

    import torch
    try:
        tf = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        tf = None
    load = os.getloadavg()
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": tf, "threads": args.threads,
            "size": args.size, "models": list(args.models), "compilers": list(args.compilers),
            "warm_runs": bool(args.warm), "first_call_target": FIRST_CALL_TARGET,
            "commit": git_commit(), "loadavg_start": load, "model_tolerance": MODEL_TOL,
            "timing": TIMING[args.size]}


def cpu_name():
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def git_commit():
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            return out.stdout.strip()
    return None


def print_header(meta, args):
    load = meta["loadavg_start"][0]
    print(f"smelt benchmark suite ({args.size}); cpu: {meta['cpu']} ({meta['cores']} cores); "
          f"python {meta['python']}, torch {meta['torch']}, transformers {meta['transformers']}; "
          f"{args.threads} threads; load average {load:.2f}")
    print(f"one fresh process per model and compiler ({', '.join(args.compilers)}), empty caches", end="")
    warm = [c for c in args.compilers if c in WARM_COMPILERS] if args.warm else []
    print(f"; then for {' and '.join(warm)} a second fresh process per model on the caches the "
          "first filled\n(warm first call only; the micro-kernels share one cold and one warm "
          "process per compiler)" if warm else "; no warm-cache runs")
    if load >= 0.5:
        print(f"note: the machine is busy (load {load:.2f} before the run): other processes take "
              "cores from the timed ones,\n      so timings are noisy (multi-threaded eager ops "
              "above all); rerun on a quiet machine")


def write_outputs(meta, records, args):
    """The JSON file and, unless --no-png, the chart; prints where they went."""
    with open(args.json, "w") as fh:
        json.dump({"meta": meta, "models": records}, fh, indent=1)
    print(f"\nwrote {args.json}", end="")
    if not args.no_png:
        png = args.png or str(Path(args.json).with_suffix(".png"))
        why = write_png(records, png, f"{args.size} shapes, {args.threads} threads, load average "
                        f"{meta['loadavg_start'][0]:.1f} at start, {meta['cpu']}")
        print(f"; no chart: {why}" if why else f", {png}", end="")
    print()


# --------------------------------------------------------------------------
# the corpus (issue 11)

def corpus_main(jobs):
    """benchmarks/corpus_report.py's report; its exit status (1: a wrong
    answer or a crash)."""
    import importlib.util
    path = REPO / "benchmarks" / "corpus_report.py"
    if not path.exists():
        print(f"no corpus report here ({path} is missing: an installed copy without the checkout)")
        return 2
    spec = importlib.util.spec_from_file_location("corpus_report", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main(["--jobs", str(jobs)])


def main(argv=None):
    args = parse_args(argv)
    if args.corpus:
        return corpus_main(args.corpus_jobs)
    if args.child:
        child_main(json.loads(args.child))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)                       # results are written: skip torch's teardown (seconds)
    t0 = time.perf_counter()
    meta = meta_info(args)
    print_header(meta, args)
    records = run_all(args.models, args.compilers, args)
    print_table(records)
    wrong = print_notes(records)
    meta["total_wall_s"] = time.perf_counter() - t0
    meta["loadavg_end"] = os.getloadavg()
    write_outputs(meta, records, args)
    print(f"total wall time {meta['total_wall_s']:.1f} s")
    return 1 if wrong else 0


if __name__ == "__main__":
    if sys.path and Path(sys.path[0]).resolve() == HERE.parent:
        del sys.path[0]                   # run as a script: do not shadow modules by this folder
    sys.exit(main())
