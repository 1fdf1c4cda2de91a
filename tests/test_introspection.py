"""smelt.explain (what a call would compile, nothing run compiled) and
SMELT_DEBUG_DIR (one folder per compiled graph with its graph, guards,
kernels, LLVM IR, assembly and timings)."""
import io
import os
import subprocess
import sys

import torch
import torch.nn as nn

import smelt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_explain_a_module_that_compiles():
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5)).eval()
    x = torch.randn(2, 3, 8, 8)
    e = smelt.explain(m, x)               # grad mode, parameters requiring grad: with a backward
    assert e["compiles"] and e["backward"] and e["reason"] is None
    with torch.no_grad():
        e = smelt.explain(m, x)
    assert e["compiles"] and e["reason"] is None and e["graphs"] == 1 and e["frames"] == []
    assert "conv(" in e["graph"] and "matmul(" in e["graph"]
    assert "L['self']._modules['0']" in e["guards"]
    assert e["inputs"] == 5 and e["nodes"] > 5 and e["num_guards"] > 10
    assert e["host_calls"] == []
    text = str(e)
    assert text.startswith("smelt.explain: compiles as one graph") and "guards:" in text


def test_explain_reports_breaks_with_location_and_runs_nothing_compiled():
    log = io.StringIO()

    def f(x):
        log.write("1")   # a call smelt does not model: the trace stops here
        return x + 1

    e = smelt.explain(f, torch.randn(3))
    assert not e["compiles"] and e["partial"] and "test_introspection.py" in e["reason"]
    assert "1 graph around 1 graph break" in str(e)   # nothing computed before the break
    assert log.getvalue() == "1"   # run once, to see what the breaks lead to
    assert e["frames"] == [] and e["graphs"] == 1
    assert [b["resumes"] for b in e["breaks"]] == [True] and "write" in e["breaks"][0]["reason"]

    def h(x):
        for _ in range(1):
            log.write("2")   # a break in a loop: the frame runs eagerly
        return x + 1

    e = smelt.explain(h, torch.randn(3))
    assert not e["compiles"] and not e["partial"] and "runs eagerly" in str(e)
    assert log.getvalue() == "12" and e["graphs"] == 0

    def g(x):
        if x.sum() > 0:
            return x + 1
        return x - 1

    e = smelt.explain(g, torch.randn(3))
    assert not e["compiles"] and "tensor data" in e["reason"] and ":" in e["reason"]


def _scale(x):
    return x.sin() * 2           # inlined into the graph of whoever calls it


def _branchy(x):
    for _ in range(1):
        if x.sum() > 0:          # depends on tensor data, in a loop: this frame runs eagerly
            return _scale(x)
    return _scale(-x)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x)) + _scale(x)


class _Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.b1, self.b2 = _Block(), _Block()

    def forward(self, x):
        y = self.b1(x)
        for _ in range(1):
            self.log.append(float(y.detach().sum()))   # reads tensor data in a loop: runs eagerly
        return self.b2(y) + _branchy(y)


def test_explain_follows_the_callees_of_a_frame_that_runs_eagerly():
    m = _Outer()
    m.log = []
    x = torch.randn(3, 8)
    with torch.no_grad():
        e = smelt.explain(m, x)
    assert not e["compiles"] and "test_introspection.py" in e["reason"]
    # the compiled call is the module's __call__, which resumes after calling forward
    assert e["partial"] and [b["resumes"] for b in e["breaks"]] == [True]
    by_name = {f["function"]: f for f in e["frames"]}
    # the compiled call is the module's __call__: its forward is the first callee
    assert list(by_name) == ["_Outer.forward", "_Block.forward", "_branchy", "_scale"]
    assert not by_name["_Outer.forward"]["compiles"] and by_name["_Outer.forward"]["reason"] == e["reason"]
    blk, br, sc = by_name["_Block.forward"], by_name["_branchy"], by_name["_scale"]
    assert blk["compiles"] and blk["calls"] == 2 and "matmul(" in blk["graph"] and "sin(" in blk["graph"]
    assert blk["file"] == __file__ and blk["line"] == _Block.forward.__code__.co_firstlineno
    assert not br["compiles"] and "tensor data" in br["reason"] and br["calls"] == 1
    assert sc["compiles"] and sc["calls"] == 1      # called from the eager _branchy only
    assert e["graphs"] == 2
    assert len(m.log) == 1                           # the call ran once, eagerly
    assert smelt._C.CompiledFunction.of(_Block.forward) is None   # nothing compiled or kept
    text = str(e)
    assert "2 graphs around 1 graph break" in text and "the functions called around the breaks" in text
    assert f"compiles: _Block.forward ({__file__}:{blk['line']}, 2 calls)" in text
    assert "eager:    _branchy (" in text
    e = smelt.explain(m, x)                          # in grad mode, with parameters requiring grad
    blk = next(f for f in e["frames"] if f["function"] == "_Block.forward")
    assert blk["compiles"] and blk["backward"]


def test_explain_reports_closures_the_hook_runs_as_they_are():
    k = torch.randn(4)

    def inner(x):
        return x * k                 # a closure over k

    def outer(x):
        for _ in range(1):
            print("", end="")        # not traced, in a loop: outer runs eagerly
        return inner(x) + 1

    e = smelt.explain(outer, torch.randn(4))
    (fr,) = e["frames"]
    assert fr["function"].endswith("inner") and not fr["compiles"] and "closure" in fr["reason"]


def test_explain_lists_host_calls_and_updates():
    def f(x, i, acc):
        acc.add_(1)
        return torch.cumsum(x, 0) * 2 + torch.argsort(x).sum() + x.index_select(0, i).sum()

    # a scan of 100 (longer than the native short scans) and argsort run as
    # torch's kernels; index_select is generated code
    e = smelt.explain(f, torch.randn(100), torch.tensor([1, 2]), torch.zeros(100))
    assert e["compiles"]
    assert e["host_calls"] == ["torch.cumsum", "torch.argsort"]
    assert e["inputs_updated_in_place"] == 1


def test_explain_a_compiled_object_keeps_its_cache_empty():
    cf = smelt.compile(lambda x: x * 3)
    e = smelt.explain(cf, torch.randn(4))
    assert e["compiles"]
    assert cf._smelt.stats()["entries"] == 0   # nothing compiled or kept


def test_debug_dir_writes_one_folder_per_graph(tmp_path):
    code = ("import torch, smelt\n"
            "m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.LayerNorm(16)).eval()\n"
            "cm = smelt.compile(m)\n"
            "with torch.no_grad():\n"
            "    cm(torch.randn(3, 8)); cm(torch.randn(3, 8)); cm(torch.randn(5, 8))\n")
    env = dict(os.environ, SMELT_DEBUG_DIR=str(tmp_path / "dbg"))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)
    folders = sorted(os.listdir(tmp_path / "dbg"))
    assert len(folders) == 2 and all(f.startswith("Sequential.__call__-") for f in folders)   # two shapes
    d = tmp_path / "dbg" / folders[0]
    assert set(os.listdir(d)) == {"graph.txt", "guards.txt", "kernels.txt", "code.ll", "code.s", "timings.txt"}
    assert "matmul(" in (d / "graph.txt").read_text()
    assert "define" in (d / "code.ll").read_text()
    assert "ret" in (d / "code.s").read_text()
    times = dict(line.split() for line in (d / "timings.txt").read_text().splitlines())
    assert {"trace_ms", "lower_ms", "codegen_ms", "load_ms", "compile_ms"} <= set(times)
    assert float(times["codegen_ms"]) > 0 and int(times["kernels"]) >= 1
    assert oct(os.stat(d).st_mode & 0o777) == "0o700"


def test_debug_dir_and_perf_log_of_a_training_region(tmp_path):
    """A region compiled with its backward writes a forward and a backward
    folder (each half's graph, kernels and code), and SMELT_LOGS=perf says
    where both compiles' time went."""
    code = ("import torch, smelt\n"
            "m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16))\n"
            "cm = smelt.compile(m)\n"
            "cm(torch.randn(3, 8)).square().sum().backward()\n")
    env = dict(os.environ, SMELT_DEBUG_DIR=str(tmp_path / "dbg"), SMELT_LOGS="perf")
    r = subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT, capture_output=True, text=True)
    folders = sorted(os.listdir(tmp_path / "dbg"))
    fwd = [f for f in folders if f.startswith("Sequential.__call__.forward-")]
    bwd = [f for f in folders if f.startswith("Sequential.__call__.backward-")]
    assert len(fwd) == 1 and len(bwd) == 1, folders
    for f in fwd + bwd:
        d = tmp_path / "dbg" / f
        assert {"graph.txt", "guards.txt", "kernels.txt", "code.ll", "code.s", "timings.txt"} <= set(os.listdir(d))
        assert "define" in (d / "code.ll").read_text()
    assert "matmul(" in (tmp_path / "dbg" / bwd[0] / "graph.txt").read_text()
    line = [x for x in r.stderr.splitlines() if "forward and backward compile" in x]
    assert len(line) == 1 and "saved" in line[0] and "backward" in line[0].split("split")[1], r.stderr
