"""How compiled CUDA code lives with torch: the stream it runs on (torch's
current one, also a non-default stream, ordered with eager work there),
many calls queued without a synchronisation, outputs that stay valid, the
Graph API with backend="cuda", what a user sees (SMELT_DEBUG_DIR,
SMELT_LOGS=backend / output_code, smelt.explain), the disk cache across
processes, graphs CUDA cannot run (run eagerly, right, reason given),
random ops, tensors of two devices, the same function on CPU and CUDA."""
import glob
import json
import os

import pytest
import torch
import torch.nn.functional as F

import smelt
import smelt._C as C
from gpu_helpers import DEV, assert_close, assert_compiled, check, last_json, rand, run_python

cuda_only = pytest.mark.cuda_only


def softmax_chain(x):
    return torch.softmax(x * 2.0, -1) + torch.tanh(x)


@cuda_only
def test_runs_on_the_current_non_default_stream():
    """Eager work on stream s writes x after a long spin; the compiled call
    and the eager op after it, also on s, must see x written and leave y
    before z reads it. On any other stream the call would read NaN."""
    cf = smelt.compile(softmax_chain)
    src = rand(2048, 4099)
    cf(src)                                   # compiled outside the stream
    x = torch.full_like(src, float("nan"))
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(100_000_000)        # ~50 ms of work queued on s first
        x.copy_(src)
        y = cf(x)
        z = y * 3.0
    s.synchronize()
    assert_close(z, softmax_chain(src) * 3.0, None, factor=4.0)
    assert_compiled(cf)


@cuda_only
def test_compiled_on_a_side_stream_then_used_on_the_default_one():
    s = torch.cuda.Stream()
    x = rand(1000, 1000)
    with torch.cuda.stream(s):
        cf = smelt.compile(softmax_chain)
        y = cf(x)                             # first call (the compile) on s
    torch.cuda.current_stream().wait_stream(s)
    assert_close(cf(x), softmax_chain(x), None, factor=4.0)
    assert_close(y, softmax_chain(x), None, factor=4.0)


def test_many_calls_queued_without_a_synchronisation():
    def step(t):
        return torch.tanh(t * 1.01) + 0.1 * t.mean(-1, keepdim=True)
    cf = smelt.compile(step)
    x = rand(512, 777)
    a, b = x, x
    for _ in range(100):
        a, b = cf(a), step(b)
    assert_close(a, b, None, factor=1.0, floor=1e-4)
    assert_compiled(cf)


def test_outputs_stay_valid_across_calls():
    cf = smelt.compile(softmax_chain)
    xs = [rand(300, 301) for _ in range(4)]
    outs = [cf(x) for x in xs]
    for x, o in zip(xs, outs):
        assert_close(o, softmax_chain(x), None, factor=4.0)
    assert outs[0].data_ptr() != outs[1].data_ptr()


@cuda_only
def test_graph_api_compiles_for_cuda():
    g = C.Graph()
    x = g.input(torch.float32, (1000, 1000))
    m = g.op("amax", x, dims=1, keepdim=True)
    e = g.op("exp", g.op("sub", x, m))
    g.output(g.op("div", e, g.op("sum", e, dims=1, keepdim=True)))
    f = g.compile(backend="cuda", device=0, keep_code=True)
    assert f.backend == "cuda"
    assert '__global__' in f.code("ir") and ".entry" in f.code("asm") and "kernel" in f.code("launch")
    t = rand(1000, 1000)
    (y,) = f(t)
    assert y.device == t.device
    assert_close(y, torch.softmax(t, -1), torch.softmax(t.double(), -1))


@cuda_only
def test_debug_dir_and_explain_say_cuda(tmp_path, monkeypatch):
    monkeypatch.setenv("SMELT_DEBUG_DIR", str(tmp_path))
    cf = smelt.compile(softmax_chain)
    x = rand(64, 333)
    check(softmax_chain, x, compiled_fn=cf)
    timings = glob.glob(str(tmp_path / "*" / "timings.txt"))
    assert timings, os.listdir(tmp_path)
    text = open(timings[0]).read()
    assert "backend cuda" in text, text
    code = glob.glob(str(tmp_path / "*" / "code.cu"))
    assert code and "__global__" in open(code[0]).read()
    info = smelt.explain(cf, x)
    assert info["compiles"] and not info["host_calls"], str(info)


SCRIPT = """
import json, sys, torch, smelt
def f(x, w):
    return torch.softmax(x @ w, -1) * 2 + x.mean()
torch.manual_seed(0)
x = torch.randn(64, 128, device="cuda")
w = torch.randn(128, 128, device="cuda")
cf = smelt.compile(f)
y = cf(x, w)
ok = torch.allclose(y, f(x, w), rtol=1e-4, atol=1e-5)
print(json.dumps({"cache": smelt.cache_info(), "stats": cf._smelt.stats(), "ok": ok,
                  "y": y[:2, :4].tolist()}))
"""


@cuda_only
def test_second_process_gets_the_plan_from_the_disk_cache(tmp_path):
    env = {"SMELT_CACHE_DIR": str(tmp_path), "SMELT_LOGS": "backend,cache"}
    runs = [run_python(SCRIPT, env) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    first, second = (last_json(r.stdout) for r in runs)
    assert first["ok"] and second["ok"], (first, second)
    assert first["cache"]["writes"] >= 1 and first["stats"]["plans_from_disk"] == 0, first
    assert "cubin for sm_" in runs[0].stderr, runs[0].stderr[-3000:]
    assert second["cache"]["hits"] >= 1 and second["stats"]["plans_from_disk"] >= 1, second
    assert second["stats"]["compiles"] >= 1 and second["stats"]["eager_entries"] == 0, second
    assert "from the disk cache" in runs[1].stderr, runs[1].stderr[-3000:]
    assert first["y"] == second["y"]


@cuda_only
def test_logs_show_cuda_c_and_the_backend():
    r = run_python(SCRIPT, {"SMELT_LOGS": "output_code,backend,perf", "SMELT_DISABLE_CACHE": "1"})
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert last_json(r.stdout)["ok"]
    assert '__global__' in r.stderr and 'extern "C"' in r.stderr, r.stderr[-3000:]
    assert "[smelt.backend] cuda:" in r.stderr, r.stderr[-3000:]


def test_a_graph_cuda_cannot_run_runs_eagerly_with_the_reason():
    conv = torch.nn.Conv2d(3, 8, 3, padding=1).to(DEV)

    def f(x):
        return torch.relu(conv(x)).mean((2, 3)) + torch.cumsum(x.flatten(1), 1)[:, -1:]
    x = rand(2, 3, 17, 17)
    cf = smelt.compile(f)
    with torch.no_grad():
        check(f, x, compiled_fn=cf, compiled=False, reference=False)
        st = cf._smelt.stats()
    if DEV.type == "cuda":
        assert st["eager_entries"] >= 1 and "CUDA" in (st["last_break"] or ""), st


def test_dropout_draws_eagers_numbers():
    def f(x):
        return F.dropout(x, 0.3, training=True) * 2 + 1
    x = rand(1000, 1001)
    cf = smelt.compile(f)
    torch.manual_seed(7)
    e, e_next = f(x), torch.rand(5, device=DEV)
    torch.manual_seed(7)
    s, s_next = cf(x), torch.rand(5, device=DEV)
    assert torch.equal(s, e), "dropout's mask differs from eager's for the same seed"
    assert torch.equal(s_next, e_next), "the generator moved on differently from eager"


@cuda_only
def test_a_cpu_scalar_tensor_with_cuda_tensors():
    def f(x, s):
        return x * s + 1
    check(f, rand(100), torch.tensor(2.5), compiled=False)


@cuda_only
def test_the_same_function_on_cpu_and_cuda():
    cf = smelt.compile(softmax_chain)
    x = rand(77, 1000)
    check(softmax_chain, x, compiled_fn=cf)
    check(softmax_chain, x.cpu(), compiled_fn=cf)
    check(softmax_chain, x, compiled_fn=cf)
    assert cf._smelt.stats()["entries"] >= 2


@cuda_only
def test_input_on_the_wrong_device_for_a_graph_api_plan():
    g = C.Graph()
    x = g.input(torch.float32, (10,))
    g.output(g.op("exp", x))
    f = g.compile(backend="cuda", device=0)
    with pytest.raises((ValueError, RuntimeError)):
        f(torch.randn(10))


def test_stats_json_serialisable():
    cf = smelt.compile(softmax_chain)
    cf(rand(8, 8))
    json.dumps(cf._smelt.stats())
