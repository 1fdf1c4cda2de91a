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
else:
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=6, n_embd=512, n_head=8, vocab_size=50257, use_cache=False)
    model, args = GPT2LMHeadModel(cfg).eval(), (torch.randint(0, 50257, (4, 256)),)
import smelt
fn = smelt.compile(model) if compiler == "smelt" else model
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
gc.collect()
base = status("VmRSS:")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")   # the peak (VmHWM) from here on
for _ in range(4):
    out = fn(*args)
    del out
print(json.dumps({"mb": (status("VmHWM:") - base) / 2**20}))
'''


def peak_mb(which, compiler):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    env.pop("SMELT_WEIGHT_PACKING", None)
    r = subprocess.run([sys.executable, "-c", PEAK, which, compiler], capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])["mb"]


@pytest.mark.parametrize("which", ["mlp", "gpt2"])
def test_peak_memory_within_eager(which):
    eager, compiled = peak_mb(which, "eager"), peak_mb(which, "smelt")
    assert compiled <= 1.1 * eager + 32, (which, eager, compiled)


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
