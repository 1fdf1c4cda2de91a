"""smelt on the corpus of small programs (tests/corpus, issue 11).

Every program runs on eager and on smelt.compile, step by step (calls with
fresh random inputs, and changes to globals, closures, attributes, hooks,
modes between them); everything a user can observe is compared (see
tests/corpus/harness.py). The whole corpus runs in child processes, so a
crash inside smelt fails the one program that caused it. One test per
program: it fails when smelt's answer differs from eager's (`wrong`), the
process died (`crash`) or stopped making progress (`hang`). How smelt ran
each program (compiled whole, partly, or eagerly) is reported by
benchmarks/corpus_report.py, not asserted here.

The harness itself is checked below: the comparison sees each kind of
difference, and the driver reports a crash and a hang.
"""
import collections
import dataclasses
import os

import pytest
import torch

from corpus import base, driver, harness

PROGRAMS = driver.load_programs()


@pytest.fixture(scope="session")
def corpus_results():
    return driver.run_corpus(jobs=2)


def test_corpus_is_large_and_covers_every_category():
    counts = collections.Counter(p.category for p in PROGRAMS)
    assert len(PROGRAMS) >= 320, len(PROGRAMS)
    for cat in ("tensor", "containers", "globals", "tensor_attrs", "modules", "hooks", "subclasses",
                "aliasing", "generators", "partials", "exceptions", "out_args", "scalars", "breaks",
                "control_flow", "recompiles", "dtypes_devices", "numpy_sparse", "sizes", "builtins", "grad"):
        assert counts[cat] >= 5, (cat, counts[cat])


@pytest.mark.parametrize("name", [p.name for p in PROGRAMS])
def test_program_matches_eager(corpus_results, name):
    r = corpus_results[name]
    assert r["status"] == "ok", f"{r['status']} at step {r.get('step')}: {r['detail']}"


# ---------------------------------------------------------------- the harness itself

def fz(v):
    return harness.freeze(v)


def diff(a, b, tol=None):
    return harness.compare(fz(a), fz(b), tol, "out")


@dataclasses.dataclass
class DC:
    a: torch.Tensor
    b: int


NT = collections.namedtuple("NT", "x y")


def test_compare_sees_every_kind_of_difference():
    t = torch.randn(3, 4)
    assert diff(t, t.clone()) is None
    assert "elements differ" in diff(t, t + 1e-3)
    assert diff(t, t + 1e-7) is None
    assert "dtype" in diff(t, t.double())
    assert "shape" in diff(t, t.reshape(4, 3))
    assert "type" in diff((t,), [t])
    assert "type" in diff(NT(t, 1), (t, 1))
    assert "keys" in diff({"a": t, "b": 1}, {"b": 1, "a": t})
    assert "length" in diff([t, t], [t])
    assert diff(1, 1.0) is not None and diff(True, 1) is not None
    assert "requires_grad" in diff(t.requires_grad_(False), t.clone().requires_grad_(True))
    assert "cls" in diff(t, torch.nn.Parameter(t, requires_grad=False))
    assert diff(DC(t, 1), DC(t.clone(), 1)) is None and diff(DC(t, 1), DC(t, 2)) is not None
    u = t.clone()
    u.tag = 1
    assert "__dict__" in diff(t, u)
    assert diff(float("nan"), float("nan")) is None
    assert diff({1, 2}, {2, 1}) is None and diff({1, 2}, {1, 3}) is not None
    assert diff(collections.OrderedDict(a=1), {"a": 1}) is not None
    assert diff(torch.tensor([1, 2]), torch.tensor([1, 3])) is not None


def test_identity_patterns():
    x, y = torch.randn(3), torch.randn(3)
    known = [x, y]
    assert harness.identity_pattern(x, known, False) != harness.identity_pattern(x.clone(), known, False)
    assert harness.identity_pattern((x, x), known, False) == harness.identity_pattern((x, x), known, False)
    view = harness.identity_pattern(x[1:], known, True)
    assert view != harness.identity_pattern(x[1:].clone(), known, True)


def _program(fn, steps=None, state=(), alias=False):
    return base.Program(f"selfcheck.{fn.__name__}", "selfcheck", lambda: fn, (base.T(3, 4),), {},
                        steps or list(base.TWO), state, alias, None, True, False, fn.__globals__, False)


COUNT = 0


def test_run_program_finds_a_stale_global(monkeypatch):
    """A 'compiler' that caches its first answer: the second call, after a
    global changed, must be reported as wrong."""
    def times_count(x):
        return x * COUNT

    class Stale:
        def __init__(self, fn):
            self.fn, self.memo, self._smelt = fn, None, self

        def __call__(self, *a):
            self.memo = self.fn(*a) if self.memo is None else self.memo
            return self.memo

        def stats(self):
            return {"compiles": 1, "breaks": 0, "eager_entries": 0, "hits": 1, "last_break": None}

    monkeypatch.setattr(harness.smelt, "compile", lambda f, fullgraph=False: Stale(f))
    p = _program(times_count, [base.call(), base.setg("COUNT", 5), base.call()])
    r = harness.run_program(p)
    assert r["status"] == "wrong" and r["step"] == 2, r
    assert COUNT == 0   # globals put back after the program


def test_run_program_compares_printed_text_and_state():
    def prints(x):
        print("called")
        return x + 1
    r = harness.run_program(_program(prints))
    assert r["status"] == "ok" and r["mode"] in ("eager", "partial"), r


def _crash_now(x):
    os.abort()


def _hang(x):
    import time
    time.sleep(60)


def test_driver_reports_crash_and_hang_and_goes_on(tmp_path, monkeypatch):
    names = [PROGRAMS[0].name, "selfcheck_programs._crash_now", PROGRAMS[1].name, "selfcheck_programs._hang",
             PROGRAMS[2].name]
    res = driver.run_corpus(names, jobs=1, timeout=8, extra=["selfcheck_programs"])
    assert res["selfcheck_programs._crash_now"]["status"] == "crash"
    assert "SIGABRT" in res["selfcheck_programs._crash_now"]["detail"]
    assert res["selfcheck_programs._hang"]["status"] == "hang"
    for n in names[0], names[2], names[4]:
        assert res[n]["status"] in ("ok", "wrong") and "mode" in res[n], res[n]


# ---------------------------------------------------------------- the report

def _report():
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "corpus_report.py")
    spec = importlib.util.spec_from_file_location("corpus_report", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_report_counts_and_reason_kinds():
    rep = _report()
    res = {
        "a.x": {"name": "a.x", "category": "a", "status": "ok", "mode": "whole", "graphs": 1, "breaks": 0, "reasons": []},
        "a.y": {"name": "a.y", "category": "a", "status": "wrong", "mode": "whole", "graphs": 2, "breaks": 0, "reasons": []},
        "b.z": {"name": "b.z", "category": "b", "status": "ok", "mode": "partial", "graphs": 3, "breaks": 2,
                "reasons": ["call of builtins.print is not supported at f.py:3"]},
        "b.w": {"name": "b.w", "category": "b", "status": "crash", "mode": "eager", "graphs": 0, "breaks": 0, "reasons": []},
    }
    rows = rep.summarise(res)
    assert rows["*"]["programs"] == 4 and rows["*"]["whole"] == 2 and rows["*"]["wrong"] == 1
    assert rows["*"]["crash"] == 1 and rows["b"]["partial"] == 1 and rows["b"]["broken_graphs"] == 3
    assert rows["b"]["broken_breaks"] == 2 and rows["a"]["graphs"] == 3
    assert rep.reason_key("tensor method item is not supported yet at /x/y.py:12") == "tensor method item is not supported yet"
    assert rep.reason_kind("control flow depends on tensor data at f.py:1").startswith("data-dependent")
    assert rep.reason_kind("call of builtins.print is not supported").startswith("print")


def test_report_runs_one_category_and_bench_has_the_flag(tmp_path, capsys):
    from smelt import bench
    assert bench.parse_args(["--corpus"]).corpus
    rep = _report()
    out = tmp_path / "r.json"
    rc = rep.main(["--category", "sizes", "--jobs", "1", "--json", str(out)])
    text = capsys.readouterr().out
    import json
    data = json.load(open(out))
    n = sum(1 for p in PROGRAMS if p.category == "sizes")
    assert data["summary"]["*"]["programs"] == n and f"{n} programs" in text
    assert rc == (1 if any(r["status"] != "ok" for r in data["programs"].values()) else 0)
