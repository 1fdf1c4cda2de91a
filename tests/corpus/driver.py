"""Runs the corpus in child processes, so that a crash (a segfault, an
abort) or a hang inside smelt is reported against the program that caused
it instead of killing the caller.

`run_corpus(names=None, jobs=1)` returns {program name: result record}
(harness.run_program's record; a crashed program gets status `crash` with
the signal and the end of the child's stderr, a program that makes no
progress for `timeout` seconds gets `hang`). A child that dies is started
again after the program it died in.

    python -m corpus.driver [--jobs N] [name ...]   (from tests/): the table
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)


def load_programs(extra=()):
    """Imports every category module (and corpus.<m> for m in extra);
    returns base.PROGRAMS."""
    import importlib
    from . import base, programs  # noqa: F401 - importing registers the programs
    for m in extra:
        importlib.import_module(f"{__package__}.{m}")
    return base.PROGRAMS


def child_main(names_file, out_file, extra=""):
    """In the child: run the named programs in order, one JSON line each
    ("start" before, the result after; flushed so a crash leaves both)."""
    from . import harness
    progs = {p.name: p for p in load_programs([m for m in extra.split(",") if m])}
    with open(names_file) as fh:
        names = [n for n in fh.read().split("\n") if n]
    with open(out_file, "a") as out:
        for n in names:
            out.write(json.dumps({"start": n}) + "\n")
            out.flush()
            res = harness.run_program(progs[n])
            out.write(json.dumps(res, default=str) + "\n")
            out.flush()
    return 0


def _read(path):
    started, done = None, {}
    if os.path.exists(path):
        with open(path) as fh:
            for line in fh:
                if not line.endswith("\n"):
                    break
                rec = json.loads(line)
                if "start" in rec:
                    started = rec["start"]
                else:
                    done[rec["name"]] = rec
                    started = None
    return started, done


def _tail(path, n=2000):
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - n))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def _spawn(names, tmp, k, extra):
    names_file = os.path.join(tmp, f"names{k}.txt")
    out_file = os.path.join(tmp, f"out{k}.jsonl")
    err_file = os.path.join(tmp, f"err{k}.txt")
    with open(names_file, "w") as fh:
        fh.write("\n".join(names) + "\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([TESTS] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    err = open(err_file, "w")
    proc = subprocess.Popen([sys.executable, "-c",
                             "import sys; from corpus.driver import child_main; "
                             "sys.exit(child_main(*sys.argv[1:]))", names_file, out_file, ",".join(extra)],
                            stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=TESTS,
                            start_new_session=True)
    err.close()
    return {"proc": proc, "names": names, "out": out_file, "err": err_file, "seen": 0, "last": time.time()}


def run_corpus(names=None, jobs=1, timeout=120.0, extra=()):
    """{name: record} for the named programs (the corpus when None), in
    `jobs` children at once; extra: more modules of programs to load
    (corpus.<m>), whose programs run only when named."""
    progs = load_programs(extra)
    cat = {p.name: p.category for p in progs}
    todo = [p.name for p in progs if (p.name in names if names is not None else p.category != "selfcheck")]
    results = {}
    with tempfile.TemporaryDirectory(prefix="smelt-corpus-") as tmp:
        shards = [todo[i::jobs] for i in range(jobs)] if jobs > 1 else [todo]
        k = 0
        running = []
        for s in shards:
            if s:
                running.append(_spawn(s, tmp, k, extra))
                k += 1
        while running:
            time.sleep(0.2)
            for ch in list(running):
                started, done = _read(ch["out"])
                if len(done) != ch["seen"]:
                    ch["seen"], ch["last"] = len(done), time.time()
                rc = ch["proc"].poll()
                hung = rc is None and time.time() - ch["last"] > timeout
                if rc is None and not hung:
                    continue
                if hung:
                    os.killpg(ch["proc"].pid, signal.SIGKILL)
                    ch["proc"].wait()
                    rc = ch["proc"].returncode
                running.remove(ch)
                results.update(done)
                rest = [n for n in ch["names"] if n not in done]
                if not rest:
                    continue
                bad = started if started in rest else rest[0]
                why = "hang" if hung else "crash"
                results[bad] = {"name": bad, "category": cat[bad], "status": why, "mode": "eager",
                                "detail": (f"no progress for {timeout:.0f} s" if hung else
                                           f"child exited with {rc} ({_signame(rc)}); stderr: " + _tail(ch["err"], 1500)),
                                "graphs": 0, "breaks": 0, "reasons": [], "seconds": 0.0}
                rest = [n for n in rest if n != bad]
                if rest:
                    running.append(_spawn(rest, tmp, k, extra))
                    k += 1
    return results


def _signame(rc):
    if rc is not None and rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"
    return f"exit status {rc}"


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    res = run_corpus(a.names or None, a.jobs)
    for n, r in res.items():
        print(f"{r['status']:6} {r.get('mode', ''):8} {n}: {r.get('detail', '')[:150]} {r.get('reasons', '')}")
