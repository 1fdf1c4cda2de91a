"""Memory: packed weight copies under a budget (weight_packing auto /
always / never, SMELT_WEIGHT_PACKING), freed with their weight or their
compiled function; and peak resident memory of whole models under smelt
within eager's (a bound measured in a fresh process, not a timing)."""
import gc
import json
import os
import subprocess
import sys

import pytest
import torch

import smelt
from smelt import _C


def mlp(d=512, h=1024):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(d, h), torch.nn.GELU(), torch.nn.Linear(h, d)).eval()


@pytest.fixture
def default_budget():
    yield
    _C.set_pack_budget(None)


def live():
    gc.collect()
    return _C.pack_stats()["live_bytes"]


def run(model, mode, x, calls=3):
    c = smelt.compile(model, options={"weight_packing": mode})
    with torch.no_grad():
        return c, [c(x) for _ in range(calls)]


def test_modes_budget_and_equal_results(default_budget):
    m, x = mlp(), torch.randn(1, 512)
    with torch.no_grad():
        want = m(x)
    base = live()
    c, outs = run(m, "never", x)
    assert live() == base
    del c
    c, outs = run(m, "always", x, calls=1)   # "always" packs from the first call
    assert live() > base
    packed = live() - base
    for o in outs:
        torch.testing.assert_close(o, want, rtol=1e-4, atol=1e-4)
    del c, outs
    assert live() == base   # the compiled function gone, its copies are too
    _C.set_pack_budget(packed // 2)   # room for one of the two copies
    c, outs = run(m, "auto", x)
    assert base < live() <= base + packed // 2
    for o in outs:
        torch.testing.assert_close(o, want, rtol=1e-4, atol=1e-4)
    del c, outs
    _C.set_pack_budget(0)
    c, outs = run(m, "auto", x)
    assert live() == base
    c2, outs2 = run(m, "always", x)   # "always" ignores the budget
    assert live() > base
    for o in outs + outs2:
        torch.testing.assert_close(o, want, rtol=1e-4, atol=1e-4)


def test_copy_freed_with_its_weight(default_budget):
    _C.set_pack_budget(1 << 30)
    m, x = mlp(), torch.randn(1, 512)
    base = live()
    c, _ = run(m, "auto", x)
    full = live() - base
    assert full > 0
    m[0].weight = torch.nn.Parameter(torch.randn(1024, 512))   # the old weight object dies
    assert base < live() < base + full
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-4)
        m[2].weight.mul_(2)   # in place: repacked, not kept twice
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-4)
    assert live() - base <= full


def test_environment_overrides_the_option(monkeypatch, default_budget):
    m, x = mlp(), torch.randn(1, 512)
    base = live()
    monkeypatch.setenv("SMELT_WEIGHT_PACKING", "never")
    c, _ = run(m, "always", x)
    assert live() == base
    with pytest.raises(ValueError):
        smelt.compile(m, options={"weight_packing": "sometimes"})


PEAK = r'''
import gc, json, sys, torch
torch.set_grad_enabled(False)
torch.manual_seed(0)
which, compiler = sys.argv[1], sys.argv[2]
if which == "mlp":
    layers = []
    for _ in range(3):
        layers += [torch.nn.Linear(4096, 4096), torch.nn.GELU()]
    model, args = torch.nn.Sequential(*layers).eval(), (torch.randn(8, 4096),)
elif which == "llama1b":
    # about 1B float32 parameters (4 GB), built on the meta device and drawn
    # directly (HF's init is slow); the rotary tables made again on the CPU
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16, num_attention_heads=16,
                      num_key_value_heads=16, vocab_size=32000, use_cache=False)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model = model.to_empty(device="cpu").eval()
    model.model.rotary_emb = type(model.model.rotary_emb)(config=cfg)
    for p in model.parameters():
        p.normal_(0.0, 0.02)
    args = (torch.randint(0, 32000, (1, 16)),)
else:
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=6, n_embd=512, n_head=8, vocab_size=50257, use_cache=False)
    model, args = GPT2LMHeadModel(cfg).eval(), (torch.randint(0, 50257, (4, 256)),)
import smelt
fn = smelt.compile(model) if compiler == "smelt" else model
calls = 1 if which == "llama1b" else 4
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
gc.collect()
base = status("VmRSS:")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")   # the peak (VmHWM) from here on
for i in range(calls):
    out = fn(*args)
    if i == calls - 1:
        logits = (out.logits if hasattr(out, "logits") else out)[..., :64].clone()
    del out
torch.save(logits, sys.argv[3])
st = fn._smelt.stats() if compiler == "smelt" else {}
print(json.dumps({"mb": (status("VmHWM:") - base) / 2**20, "total_mb": status("VmHWM:") / 2**20,
                  "graphs": st.get("graphs", 0), "breaks": st.get("breaks", 0)}))
'''


def peak(which, compiler, out):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    env.pop("SMELT_WEIGHT_PACKING", None)
    r = subprocess.run([sys.executable, "-c", PEAK, which, compiler, str(out)], capture_output=True, text=True,
                       timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), torch.load(out)


def peak_mb(which, compiler, tmp="/tmp"):
    return peak(which, compiler, os.path.join(tmp, f"smelt-peak-{os.getpid()}-{which}-{compiler}.pt"))[0]["mb"]


@pytest.mark.parametrize("which", ["mlp", "gpt2"])
def test_peak_memory_within_eager(which, tmp_path):
    (eager, want), (compiled, got) = peak(which, "eager", tmp_path / "e.pt"), peak(which, "smelt", tmp_path / "s.pt")
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    assert compiled["graphs"] >= 1 and compiled["breaks"] == 0, compiled   # compiled whole, not eager
    assert compiled["mb"] <= 1.1 * eager["mb"] + 32, (which, eager, compiled)


def test_llama_1b_forward_fits_as_eager(tmp_path):
    # a 4 GB model: one forward under smelt peaks within 1.1x of eager's peak
    (eager, want), (compiled, got) = (peak("llama1b", "eager", tmp_path / "e.pt"),
                                      peak("llama1b", "smelt", tmp_path / "s.pt"))
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    assert compiled["graphs"] >= 1, compiled
    assert compiled["total_mb"] <= 1.1 * eager["total_mb"], (eager, compiled)


def test_auto_packs_only_where_it_pays(default_budget):
    # wide calls (many rows) run on oneDNN's plain path under "auto"
    _C.set_pack_budget(1 << 30)
    m, x = mlp(), torch.randn(64, 512)
    base = live()
    c, outs = run(m, "auto", x)
    assert live() == base
    c2, outs2 = run(m, "always", x)
    assert live() > base
    for a, b in zip(outs, outs2):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


CYCLES = r'''
import gc, json, sys, torch, smelt
torch.set_grad_enabled(False)
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
x = torch.randn(37, 19)
n, distinct = int(sys.argv[1]), sys.argv[2] == "distinct"
marks = {}
for i in range(n):
    k = i + 0.5 if distinct else 0.5   # distinct: new kernels generated every cycle
    def fn(a, k=k):
        return (a * k).relu().sum(1) + a.exp().mean()
    cf = smelt.compile(fn)
    assert torch.allclose(cf(x), fn(x))
    smelt.reset()
    del cf
    if i + 1 in (n // 5, n):
        gc.collect()
        marks[i + 1] = rss()
print(json.dumps(marks))
'''


@pytest.mark.parametrize("n,kind,bound_mb", [(1000, "same", 2), (300, "distinct", 4)])
def test_compile_reset_cycles_flat(n, kind, bound_mb):
    # every distinct kernel generated by LLVM; LLVM's code pages kept (their
    # release after a pause in compiling would make RSS depend on timing)
    env = dict(os.environ, SMELT_DISABLE_CACHE="1", SMELT_TRIM_LLVM="0")
    r = subprocess.run([sys.executable, "-c", CYCLES, str(n), kind], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    marks = json.loads(r.stdout.strip().splitlines()[-1])
    first, last = marks[str(n // 5)], marks[str(n)]
    assert last - first <= bound_mb, marks


def test_arena_and_code_bytes_reported():
    m, x = mlp(64, 256), torch.randn(32, 64)
    c = smelt.compile(m)
    with torch.no_grad():
        c(x)
        st = c._smelt.stats()
        info = smelt.explain(c, x)
    # the GELU's 32 x 256 float32 temporary at least; kernels' object code
    assert st["arena_bytes"] >= 32 * 256 * 4 and st["code_bytes"] > 0, st
    assert info["arena_bytes"] == st["arena_bytes"]
    assert "MB of temporaries" in str(info)


TRIM = r'''
import json, sys, time, torch, smelt
def llvm_mb():   # resident pages of libLLVM's executable mapping
    mb, cur = 0.0, False
    for line in open("/proc/self/smaps"):
        f = line.split()
        if "-" in f[0] and ":" not in f[0]:
            cur = "libLLVM" in line and f[1] == "r-xp"
        elif cur and f[0] == "Rss:":
            mb += int(f[1]) / 1024
    return mb
out = {}
x = torch.randn(2048, 1024)   # 8 MB out: LLVM's pages go at once
big = smelt.compile(lambda a: (a.exp() + 1).relu())
assert torch.allclose(big(x), (x.exp() + 1).relu())
out["big"] = llvm_mb()
small = smelt.compile(lambda a: a.sin() * 2)
y = torch.randn(7)
assert torch.allclose(small(y), y.sin() * 2)
out["small_now"] = llvm_mb()
time.sleep(0.3)   # compiles paused: the next run drops them
assert torch.allclose(small(y), y.sin() * 2)
out["small_later"] = llvm_mb()
print(json.dumps(out))
'''


def trim_run(**env):
    r = subprocess.run([sys.executable, "-c", TRIM], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, SMELT_DISABLE_CACHE="1", **env))
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_llvm_code_pages_given_back_after_compiling():
    on, off = trim_run(), trim_run(SMELT_TRIM_LLVM="0")
    # a compile pages in tens of MB of LLVM's code: kept with trimming off
    assert off["big"] > 8 and off["small_later"] > 8, off
    # dropped at once after a plan with large runs, and for a small plan
    # once compiles pause; the small compile paged some of it back
    assert on["big"] < 2 and on["small_later"] < 2, on
    assert on["small_now"] > on["big"] + 4, on


# ---------------------------------------------------------------- reused large outputs

def _big_fn():
    return smelt.compile(lambda x: (x * 2).exp())   # 4M floats out: 16 MB, kept for reuse


def _big_input(seed):
    return torch.randn(2048, 2048, generator=torch.Generator().manual_seed(seed))


def test_large_output_buffer_reused_when_dropped():
    """A large output nothing refers to any more is the next call's output
    (no fresh pages to fault in), with the right values."""
    f = _big_fn()
    x = _big_input(0)
    ptr = f(x).data_ptr()
    x2 = _big_input(1)
    y = f(x2)
    assert y.data_ptr() == ptr
    torch.testing.assert_close(y, (x2 * 2).exp())


@pytest.mark.parametrize("hold", ["tensor", "detached", "slice", "weakref", "saved_by_autograd", "numpy"])
def test_large_output_never_reused_while_referenced(hold):
    """Whatever still refers to an output (the tensor, a detached alias of
    its storage, a view, a weak reference, autograd's saved variables, a
    numpy array) keeps its values: the next call writes a new buffer."""
    import weakref
    f = _big_fn()
    x = _big_input(0)
    want = (x * 2).exp()
    out = f(x)
    w = torch.ones(2048, 2048, requires_grad=True)
    keep = {"tensor": lambda t: t, "detached": lambda t: t.detach(), "slice": lambda t: t[5:],
            "weakref": weakref.ref, "numpy": lambda t: t.numpy(),
            "saved_by_autograd": lambda t: (t * w).sum()}[hold](out)
    del out
    for seed in (1, 2):
        f(_big_input(seed))
    if hold == "weakref":   # dead (not reused, so freed), or alive with its own values
        got = keep()
        assert got is None or torch.equal(got, want)
    elif hold == "saved_by_autograd":
        keep.backward()   # d/dw (out * w).sum() is the saved output: the first call's
        torch.testing.assert_close(w.grad, want)
    elif hold == "numpy":
        torch.testing.assert_close(torch.from_numpy(keep), want)
    elif hold == "slice":
        torch.testing.assert_close(keep, want[5:])
    else:
        torch.testing.assert_close(keep, want)


@pytest.mark.parametrize("change", ["resize", "set_", "data", "transpose_"])
def test_large_output_changed_in_place_is_not_reused(change):
    """An output the caller resized, pointed at another storage or reshaped
    in place before dropping it is not written into: the next call gets a
    fresh buffer of the right size (no write past a shrunk storage)."""
    f = _big_fn()
    out = f(_big_input(0))
    {"resize": lambda t: t.resize_(10), "set_": lambda t: t.set_(torch.empty(3)),
     "data": lambda t: setattr(t, "data", torch.empty(5, dtype=torch.float64)),
     "transpose_": lambda t: t.t_()}[change](out)
    del out
    x = _big_input(1)
    y = f(x)
    assert y.shape == (2048, 2048) and y.is_contiguous()
    torch.testing.assert_close(y, (x * 2).exp())
