"""The benchmark suite's machinery (python -m smelt.bench) on tiny shapes:
the JSON fields of each compiler (cold and warm first calls), finite numbers,
the tables, the first-call targets, the chart, and honest reporting of a
child that fails. No timing assertions."""
import argparse
import contextlib
import importlib.util
import io
import json
import math

import pytest

from smelt import bench

RESULT_FIELDS = ("first_call_s", "median_s", "min_s", "iters", "process_wall_s", "peak_rss_mb")
CHECK_FIELDS = ("ok", "max_abs_err", "max_rel_err", "calls_checked", "ref_max_abs")
WARM_FIELDS = ("first_call_s", "process_wall_s", "peak_rss_mb")


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One suite run (the children are fresh processes, as always): tiny MLP,
    eager and smelt (inductor's cold start takes tens of seconds, too long for
    the test suite). Returns (json, printed text)."""
    out = tmp_path_factory.mktemp("bench") / "r.json"
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        rc = bench.main(["--size", "tiny", "--models", "mlp", "--compilers", "eager,smelt",
                         "--json", str(out), "--no-png", "--timeout", "120"])
    assert rc == 0, text.getvalue()
    with open(out) as fh:
        return json.load(fh), text.getvalue()


def test_json_fields(tiny_run):
    data, _ = tiny_run
    assert data["meta"]["threads"] == 2 and data["meta"]["size"] == "tiny"
    assert finite(data["meta"]["total_wall_s"])
    (rec,) = data["models"]
    assert rec["name"] == "mlp" and rec["desc"] and set(rec["results"]) == {"eager", "smelt"}
    for compiler, res in rec["results"].items():
        assert res["available"] and res["compiler"] == compiler, res
        assert res["torch_threads"] == 2
        for key in RESULT_FIELDS:
            assert finite(res[key]) and res[key] >= 0, (compiler, key, res[key])
        assert res["iters"] >= bench.TIMING["tiny"]["min_iters"]
        for key in CHECK_FIELDS:
            assert key in res["check"], (compiler, key)
        assert res["check"]["ok"], res["check"]
        assert finite(res["check"]["max_abs_err"]) and finite(res["check"]["max_rel_err"])
        assert res["check"]["calls_checked"] == 1 + res["warmup"] + res["iters"]
    assert finite(rec["smelt_over_eager"]) and "smelt_over_inductor" not in rec
    assert "inductor_over_smelt_first" not in rec and "target_cold_met" not in rec


def test_warm_fields(tiny_run):
    """smelt (and inductor where it ran) also report a warm first call: a
    second fresh process on the caches the cold one filled, first call only,
    checked against eager. Eager has no warm run."""
    data, _ = tiny_run
    assert data["meta"]["warm_runs"] is True
    assert data["meta"]["first_call_target"] == bench.FIRST_CALL_TARGET
    (rec,) = data["models"]
    assert "warm" not in rec["results"]["eager"]
    for compiler in bench.WARM_COMPILERS:
        res = rec["results"].get(compiler)
        if res is None:
            continue
        warm = res["warm"]
        assert warm["available"] and warm["fresh_process"], warm
        for key in WARM_FIELDS:
            assert finite(warm[key]) and warm[key] > 0, (compiler, key, warm[key])
        assert res["warm_first_call_s"] == warm["first_call_s"] > 0
        assert warm["check"]["ok"] and warm["check"]["calls_checked"] == 1, warm["check"]
    assert "inductor_over_smelt_warm" not in rec and "target_warm_met" not in rec


def test_warm_smelt_hits_its_cache(tiny_run):
    """The cold smelt process writes its compiled kernels to the cache dir,
    the warm one loads them: hits, no misses, same directory."""
    data, _ = tiny_run
    res = data["models"][0]["results"]["smelt"]
    cold, warm = res["report"]["cache"], res["warm"]["report"]["cache"]
    assert cold["enabled"] and cold["misses"] >= 1 and cold["writes"] >= 1, cold
    assert warm["enabled"] and warm["hits"] >= 1 and warm["misses"] == 0, warm
    assert warm["dir"] == cold["dir"]


def test_smelt_report(tiny_run):
    """The MLP compiles as one smelt graph; the report lists the function."""
    data, _ = tiny_run
    res = data["models"][0]["results"]["smelt"]
    assert res["smelt_threads"] == 2
    rep = res["report"]
    assert rep["status"] == "compiled" and rep["graphs"] >= 1 and rep["break_reasons"] == []
    top = [f for f in rep["functions"] if f["top"]]
    assert len(top) == 1 and top[0]["compiles"] >= 1 and top[0]["hits"] >= 1
    assert finite(rep["compile_ms"]) and finite(rep["trace_ms"])


def test_printed_table(tiny_run):
    _, stdout = tiny_run
    lines = stdout.splitlines()
    steady, memory, first = [ln for ln in lines if ln.startswith("model ")]
    for col in ("eager ms", "smelt ms", "ind ms", "s/eager", "smelt err"):
        assert col in steady
    mem = lines[lines.index(memory) + 2].split()   # peak MB above the loaded model
    assert mem[0] == "mlp" and float(mem[1]) >= 0 and float(mem[2]) >= 0 and mem[3] == "n/a"
    assert float(mem[4]) == pytest.approx(float(mem[2]) - float(mem[1]), abs=1.01)
    e, sm = float(mem[1]), float(mem[2])   # smelt / eager (of the unrounded figures)
    if e >= 5:
        assert float(mem[5]) == pytest.approx(sm / e, abs=0.5 * (1 + sm / e) / e + 0.006)
    for col in ("eager 1st", "smelt 1st", "smelt warm", "ind 1st", "ind warm", "ind/s 1st",
                "ind/s warm", "30x cold", "30x warm", "s warm-steady", "ind warm-steady"):
        assert col in first
    row = next(ln for ln in lines if ln.startswith("mlp ") and "compiled" in ln)
    assert row.split()[3] == "-"          # inductor not run
    row = lines[lines.index(first) + 2].split()
    assert row[0] == "mlp" and float(row[2]) > 0 and float(row[3]) > 0 and row[4:10] == ["-"] * 6
    assert float(row[10]) < float(row[3]) * 1e3 and row[11:] == ["ms", "-"]   # smelt warm - steady
    assert "first calls: inductor/smelt not measured (needs smelt and inductor)" in lines
    assert any(ln.startswith("  mlp") and "smelt warm" in ln and "cache" in ln for ln in lines)


def fake_records():
    """Records as run_all makes them: one complete (smelt 40x faster cold,
    10x warm), one where smelt failed and inductor was not run, and a
    micro-kernel whose warm inductor run failed."""
    ok = {"available": True, "median_s": 0.01, "first_call_s": 0.5,
          "check": {"ok": True, "max_abs_err": 1e-6, "why": None}}
    warm_ok = {"available": True, "first_call_s": 0.01, "fresh_process": True, "check": ok["check"]}
    smelt = dict(ok, median_s=0.005, first_call_s=0.25, warm_first_call_s=0.01,
                 warm=dict(warm_ok, report={"cache": {"hits": 3, "misses": 0}}),
                 report={"status": "partial", "graphs": 3, "breaks": 2,
                         "break_reasons": ["call of foo is not supported"]})
    ind = dict(ok, median_s=0.02, first_call_s=10.0, warm_first_call_s=0.1,
               warm=dict(warm_ok, first_call_s=0.1, report={"cache": {
                   "fxgraph_hit": 0, "fxgraph_miss": 1, "fxgraph_bypass": 0}}),
               report={"break_reasons": []})
    micro = dict(ok, fresh_process=False, warm_first_call_s=0.002,
                 warm=dict(warm_ok, first_call_s=0.002, fresh_process=False),
                 report={"status": "compiled", "graphs": 1, "breaks": 0, "break_reasons": []})
    recs = [{"name": "gpt2", "desc": "GPT-2 tiny",
             "results": {"eager": ok, "smelt": smelt, "inductor": ind}},
            {"name": "cnn", "desc": "CNN tiny",
             "results": {"eager": ok, "smelt": {"available": False, "reason": "killed by signal 11"}}},
            {"name": "softmax", "desc": "softmax tiny",
             "results": {"smelt": micro, "inductor": dict(ok, first_call_s=1.5, warm_first_call_s=None,
                                                          warm={"available": False,
                                                                "reason": "exited with status 1"})}}]
    for r in recs:
        bench.add_ratios(r)
    return recs


def test_table_and_notes(capsys):
    recs = fake_records()
    assert recs[0]["smelt_over_eager"] == pytest.approx(0.5)
    assert recs[0]["smelt_over_inductor"] == pytest.approx(0.25)
    bench.print_table(recs)
    assert bench.print_notes(recs) == 0
    out = capsys.readouterr().out
    gpt2 = next(ln for ln in out.splitlines() if ln.startswith("gpt2 "))
    lines = out.splitlines()
    gpt2, gpt2_mem, gpt2_first = [ln.split() for ln in lines if ln.startswith("gpt2 ")]
    assert gpt2_mem == ["gpt2"] + ["n/a"] * 5   # no memory figures in these records
    assert gpt2[:6] == ["gpt2", "10.00", "5.00", "20.00", "0.50", "0.25"]
    assert gpt2[-3:] == ["partial", "3g", "2b"]
    assert gpt2_first == ["gpt2", "0.5", "0.25", "0.01", "10", "0.1", "40.0", "10.0", "met", "MISSED",
                          "5.0", "ms", "80", "ms"]    # warm first call minus a steady call
    cnn, _, cnn_first = [ln.split() for ln in lines if ln.startswith("cnn ")]
    assert cnn[2:4] == ["n/a", "-"] and cnn[-1] == "n/a"
    assert cnn_first[1:] == ["0.5", "n/a", "n/a", "-", "-", "-", "-", "-", "-", "-", "-"]
    _, _, softmax_first = [ln.split() for ln in lines if ln.startswith("softmax ")]
    assert softmax_first[1:] == ["-", "0.5*", "0.002*", "1.5", "n/a", "3.0", "-", "MISSED", "-", "-8.0", "ms",
                                 "-"]
    assert "first calls, models: inductor/smelt geomean cold 40.0x, warm 10.0x" in lines
    assert "  target cold >= 30x: met by 1 of 1 (gpt2)" in lines
    assert "  target warm >= 30x: met by 0 of 1; MISSED by gpt2 (10.0x)" in lines
    micro = "first calls, micro-kernels (* rows: compiler already started): inductor/smelt geomean"
    assert f"{micro} cold 3.0x" in lines
    assert "  target warm >= 30x: not measured" in lines
    assert "cnn: smelt did not run: killed by signal 11" in out
    assert "gpt2: smelt graph break: call of foo is not supported" in out
    assert ("gpt2: inductor warm run did not hit its cache fully: FX graph cache 1 miss(es), "
            "0 bypass(es), 0 hit(s)") in lines
    assert "softmax: inductor warm run did not run: exited with status 1" in lines
    assert not any("smelt warm run did not hit" in ln for ln in lines)


def test_first_call_targets():
    """A ratio just under the target prints below it and misses it."""
    rec = {"name": "mlp", "results": {
        "smelt": {"available": True, "median_s": 1.0, "first_call_s": 1.0, "warm_first_call_s": 1.0},
        "inductor": {"available": True, "median_s": 1.0, "first_call_s": 29.97,
                     "warm_first_call_s": 30.0}}}
    bench.add_ratios(rec)
    assert rec["target_cold_met"] is False and rec["target_warm_met"] is True
    assert bench.ratio_text(rec["inductor_over_smelt_first"]) == "29.9"
    assert bench.verdict(rec, "cold") == "MISSED" and bench.verdict(rec, "warm") == "met"
    assert "  target cold >= 30x: met by 0 of 1; MISSED by mlp (29.9x)" in bench.first_call_summary([rec])


def test_wrong_result_counted(capsys):
    recs = fake_records()
    recs[0]["results"]["smelt"]["check"] = {"ok": False, "max_abs_err": 0.7, "why": "output 0: error"}
    assert bench.print_notes(recs) == 1
    assert "!!! gpt2: smelt result disagrees with eager" in capsys.readouterr().out
    recs = fake_records()
    recs[0]["results"]["smelt"]["warm"]["check"] = {"ok": False, "max_abs_err": 0.7, "why": "output 0"}
    recs[0]["results"]["inductor"]["warm"]["check"] = {"ok": False, "max_abs_err": 0.7, "why": "x"}
    assert bench.print_notes(recs) == 1
    out = capsys.readouterr().out
    assert "!!! gpt2: smelt warm result disagrees with eager: output 0" in out
    assert "!!! gpt2: inductor warm result disagrees with eager" in out


def test_png(tmp_path):
    """With matplotlib (make bench installs it) a PNG is written; without it
    (make test does not) the reason comes back and nothing is written."""
    path = tmp_path / "chart.png"
    why = bench.write_png(fake_records(), str(path))
    if importlib.util.find_spec("matplotlib") is None:
        assert "matplotlib not available" in why and not path.exists()
    else:
        assert why is None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_failed_child_is_reported():
    """A workload whose child fails is a record with the reason, not a crash
    of the suite; the workloads the child finished before are kept."""
    args = argparse.Namespace(size="tiny", threads=2, timeout=60)
    done, failed = bench.run_child(["mlp", "no-such-model"], "eager", args)
    assert done["available"] and done["fresh_process"] and done["check"]["ok"]
    assert failed["model"] == "no-such-model" and failed["available"] is False
    assert "exited with status 1" in failed["reason"] and "KeyError" in failed["reason"]


def test_child_env_uses_default_caches(monkeypatch, tmp_path):
    """The children's caches live under the given folder, with the switches
    that would turn a cache off removed from their environment."""
    for name in bench.CACHE_SWITCHES:
        monkeypatch.setenv(name, "0")
    env = bench.child_env(str(tmp_path))
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor")
    assert env["SMELT_CACHE_DIR"] == str(tmp_path / "smelt")
    assert not set(bench.CACHE_SWITCHES) & set(env)


def test_model_selection():
    assert bench.expand_models("mlp,micro") == ("mlp",) + bench.MICRO
    assert bench.expand_models("all") == bench.MODELS
    with pytest.raises(ValueError, match="unknown model 'resnet'"):
        bench.expand_models("mlp,resnet")


def test_arguments():
    args = bench.parse_args([])
    assert (args.size, args.threads, args.compilers, args.warm) == ("default", 2, bench.COMPILERS, True)
    assert bench.parse_args(["--no-warm"]).warm is False
    assert args.models == bench.MODELS and args.json == "bench_results.json"
    args = bench.parse_args(["--quick", "--compilers", "smelt,eager"])
    assert args.size == "quick" and args.compilers == ("eager", "smelt")


def test_training_bench_tiny(tmp_path):
    """benchmarks/train_bench.py on the tiny MLP, eager and smelt: smelt
    compiles the forward, the backward and the optimizer step (no eager
    step), the gradients match eager's, the record's numbers are finite."""
    import os
    import subprocess
    import sys
    from conftest import REPO
    out = tmp_path / "t.json"
    subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "train_bench.py"), "--models", "mlp",
                    "--compilers", "eager,smelt", "--size", "tiny", "--steps", "2", "--json", str(out)],
                   check=True, capture_output=True, timeout=600)
    rec = json.loads(out.read_text())["records"]["mlp"]
    s = rec["smelt"]
    assert s["smelt"]["backward_compiles"] == 1 and s["smelt"]["breaks"] == 0, s
    assert s["smelt"]["optimizer"]["compiles"] == 1 and s["smelt"]["optimizer"]["last_break"] is None, s
    assert s["grad_err"] < 1e-4
    for k in ("median_ms", "first_ms", "warm_first_ms"):
        assert finite(s[k]) and finite(rec["eager"]["median_ms"]), (k, s)


def test_half_rows():
    """The half-precision rows: the same models in bfloat16 and float16 (the
    group 'half'), their tolerance, and one run of the tiny bf16 MLP under
    smelt checked against eager in bf16 (in this process; no timing)."""
    import torch

    import smelt
    assert bench.expand_models("half") == ("mlp-bf16", "gpt2-bf16", "bert-bf16",
                                           "mlp-fp16", "gpt2-fp16", "bert-fp16")
    assert set(bench.HALF) <= set(bench.expand_models("all"))
    wl = bench.BUILDERS["mlp-bf16"]("tiny")
    assert wl.tol == bench.HALF_TOL["bf16"] and wl.config["dtype"] == "bfloat16"
    assert all(p.dtype == torch.bfloat16 for p in wl.fn.parameters())
    assert wl.inputs[0].dtype == torch.bfloat16
    with torch.no_grad():
        check = bench.Check(wl.fn(*wl.inputs), wl.tol)
        check.add(smelt.compile(wl.fn)(*wl.inputs))
    assert check.result()["ok"], check.result()
    line = bench.half_summary([{"name": "mlp-bf16", "smelt_over_eager": 0.5, "smelt_over_inductor": 2.0}])
    assert line == ("half precision: bf16: smelt faster than eager on 1 of 1; "
                    "bf16: smelt faster than inductor on 0 of 1")
