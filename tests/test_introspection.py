"""smelt.explain (what a call would compile, nothing run compiled) and
SMELT_DEBUG_DIR (one folder per compiled graph with its graph, guards,
kernels, LLVM IR, assembly and timings)."""
import os
import subprocess
import sys

import torch
import torch.nn as nn

import smelt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_explain_a_module_that_compiles():
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5)).eval()
    e = smelt.explain(m, torch.randn(2, 3, 8, 8))
    assert e["compiles"] and e["reason"] is None
    assert "conv(" in e["graph"] and "matmul(" in e["graph"]
    assert "L['self']._modules['0']" in e["guards"]
    assert e["inputs"] == 5 and e["nodes"] > 5 and e["num_guards"] > 10
    assert e["host_calls"] == []
    text = str(e)
    assert text.startswith("smelt.explain: compiles as one graph") and "guards:" in text


def test_explain_reports_breaks_with_location_and_runs_nothing_compiled():
    calls = []

    def f(x):
        calls.append(1)   # a side effect smelt does not model: the trace stops here
        return x + 1

    e = smelt.explain(f, torch.randn(3))
    assert not e["compiles"] and "test_introspection.py" in e["reason"]
    assert "runs eagerly" in str(e)
    assert calls == []    # explaining does not run the function

    def g(x):
        if x.sum() > 0:
            return x + 1
        return x - 1

    e = smelt.explain(g, torch.randn(3))
    assert not e["compiles"] and "tensor data" in e["reason"] and ":" in e["reason"]


def test_explain_lists_host_calls_and_updates():
    def f(x, i, acc):
        acc.add_(1)
        return torch.cumsum(x, 0) * 2 + x.index_select(0, i).sum()

    e = smelt.explain(f, torch.randn(5), torch.tensor([1, 2]), torch.zeros(5))
    assert e["compiles"]
    assert e["host_calls"] == ["torch.cumsum", "TensorBase.index_select"]
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
    assert len(folders) == 2 and all(f.startswith("Sequential.forward-") for f in folders)   # two shapes
    d = tmp_path / "dbg" / folders[0]
    assert set(os.listdir(d)) == {"graph.txt", "guards.txt", "kernels.txt", "code.ll", "code.s", "timings.txt"}
    assert "matmul(" in (d / "graph.txt").read_text()
    assert "define" in (d / "code.ll").read_text()
    assert "ret" in (d / "code.s").read_text()
    times = dict(line.split() for line in (d / "timings.txt").read_text().splitlines())
    assert {"trace_ms", "lower_ms", "codegen_ms", "load_ms", "compile_ms"} <= set(times)
    assert float(times["codegen_ms"]) > 0 and int(times["kernels"]) >= 1
    assert oct(os.stat(d).st_mode & 0o777) == "0o700"
