"""The benchmark suite's machinery (python -m smelt.bench) on tiny shapes:
the JSON fields of each compiler, finite numbers, the table, the chart, and
honest reporting of a child that fails. No timing assertions."""
import argparse
import contextlib
import io
import json
import math

import pytest

from smelt import bench

RESULT_FIELDS = ("first_call_s", "median_s", "min_s", "iters", "process_wall_s", "peak_rss_mb")
CHECK_FIELDS = ("ok", "max_abs_err", "max_rel_err", "calls_checked", "ref_max_abs")


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
    header = next(ln for ln in lines if ln.startswith("model "))
    for col in ("eager ms", "smelt ms", "ind ms", "s/eager", "smelt 1st", "smelt err"):
        assert col in header
    row = next(ln for ln in lines if ln.startswith("mlp ") and "compiled" in ln)
    assert row.split()[3] == "-"          # inductor not run


def fake_records():
    """Two records as run_all makes them: one complete, one where smelt
    failed and inductor was not run."""
    ok = {"available": True, "median_s": 0.01, "first_call_s": 0.5,
          "check": {"ok": True, "max_abs_err": 1e-6, "why": None}}
    smelt = dict(ok, median_s=0.005, report={"status": "partial", "graphs": 3, "breaks": 2,
                                             "break_reasons": ["call of foo is not supported"]})
    recs = [{"name": "gpt2", "desc": "GPT-2 tiny",
             "results": {"eager": ok, "smelt": smelt,
                         "inductor": dict(ok, median_s=0.02, report={"break_reasons": []})}},
            {"name": "cnn", "desc": "CNN tiny",
             "results": {"eager": ok, "smelt": {"available": False, "reason": "killed by signal 11"}}}]
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
    assert gpt2.split()[:6] == ["gpt2", "10.00", "5.00", "20.00", "0.50", "0.25"]
    assert gpt2.endswith("partial 3g 2b")
    cnn = next(ln for ln in out.splitlines() if ln.startswith("cnn "))
    assert cnn.split()[2:4] == ["n/a", "-"] and cnn.endswith("n/a")
    assert "cnn: smelt did not run: killed by signal 11" in out
    assert "gpt2: smelt graph break: call of foo is not supported" in out


def test_wrong_result_counted(capsys):
    recs = fake_records()
    recs[0]["results"]["smelt"]["check"] = {"ok": False, "max_abs_err": 0.7, "why": "output 0: error"}
    assert bench.print_notes(recs) == 1
    assert "!!! gpt2: smelt result disagrees with eager" in capsys.readouterr().out


def test_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "chart.png"
    assert bench.write_png(fake_records(), str(path)) is None
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_failed_child_is_reported():
    """A workload whose child fails is a record with the reason, not a crash
    of the suite; the workloads the child finished before are kept."""
    args = argparse.Namespace(size="tiny", threads=2, timeout=60)
    done, failed = bench.run_child(["mlp", "no-such-model"], "eager", args)
    assert done["available"] and done["fresh_process"] and done["check"]["ok"]
    assert failed["model"] == "no-such-model" and failed["available"] is False
    assert "exited with status 1" in failed["reason"] and "KeyError" in failed["reason"]


def test_model_selection():
    assert bench.expand_models("mlp,micro") == ("mlp",) + bench.MICRO
    assert bench.expand_models("all") == bench.MODELS
    with pytest.raises(ValueError, match="unknown model 'resnet'"):
        bench.expand_models("mlp,resnet")


def test_arguments():
    args = bench.parse_args([])
    assert (args.size, args.threads, args.compilers) == ("default", 2, bench.COMPILERS)
    assert args.models == bench.MODELS and args.json == "bench_results.json"
    args = bench.parse_args(["--quick", "--compilers", "smelt,eager"])
    assert args.size == "quick" and args.compilers == ("eager", "smelt")
