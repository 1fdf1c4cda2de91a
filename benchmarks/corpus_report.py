"""How smelt runs the corpus of small programs (tests/corpus, issue 11).

    python3 benchmarks/corpus_report.py [--jobs N] [--json PATH] [--category C ...]
    python3 -m smelt.bench --corpus     (the same report)

Runs every program on eager and smelt (child processes: a crash is a
result, not the end of the run) and prints, per category and in total:
programs, compiled whole (every call ran compiled code, no graph break),
partly eager (a break, but some graph compiled: a callee, or another
entry), eager (nothing compiled), wrong answers, crashes (hangs included),
graphs compiled and graph breaks (counted by the CompiledFunction of the
program and those the frame hook made for its functions and its modules'
forwards), and graphs per break over the programs that broke. Then the
reasons frames ran eagerly, most frequent first, and every wrong answer.
Exit status 1 when any program was wrong or crashed.
"""
import argparse
import collections
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))

from corpus import driver  # noqa: E402


def reason_key(text):
    """A break reason without its place and its particulars, for counting."""
    text = re.sub(r" at \S+:\d+$", "", text or "")
    text = re.sub(r"^(host call of [^:]+: \w+).*", r"\1", text)
    text = re.sub(r"^(the traced code raises \w+).*", r"\1", text)
    text = re.sub(r"^(error while tracing: \w+).*", r"\1", text)
    return text[:140]


KINDS = [   # (kind, pattern on the reason), first match wins
    ("data-dependent (.item(), branch or count on tensor values)",
     r"depends on tensor data|\.item\(\)|tensor method (item|tolist)|a tensor has no value at trace time"),
    ("module hooks registered", r"has hooks registered|global module hooks"),
    ("autograd (inputs require grad, backward, requires_grad)",
     r"require grad|requires_grad|backward|autograd"),
    ("side effect on state from outside (global/closure/attribute/list/dict writes)",
     r"STORE_GLOBAL|STORE_ATTR|passed in from outside|closure variable|leaves attribute"),
    ("print / logging / warnings", r"builtins\.print|sys\._getframe|_warnings\.warn"),
    ("functools.partial", r"functools\.partial"),
    ("collections (OrderedDict, defaultdict, namedtuple, Counter) and set methods",
     r"collections\.|_collections|call of (add|__new__) is|namedtuple|corpus\.programs\.containers\.(Pair|Stats)"),
    ("unsupported bytecode", r"^bytecode "),
    ("unsupported tensor method/attribute", r"^tensor (method|attribute)"),
    ("host call failed at trace time (no meta kernel, bad argument)", r"^host call of"),
    ("eager raises here (bad input): smelt runs it eagerly to raise",
     r"cannot broadcast|inner dims differ|out of range|is invalid for input|cannot be cast|needs a floating|"
     r"not allowed|would change the tensor|cannot reduce|expected a sequence|the traced code raises"),
    ("nothing to compile (no tensor computed)", r"no tensor computed"),
    ("in-place update of a view, or returning an updated input",
     r"in-place update of a view|returning an input it updated"),
    ("iterators, generators, coroutines from outside", r"next\(\)|iterator|iteration over|coroutine|attribute send"),
    ("context managers (custom classes, contextlib, autocast)", r"context manager|autocast"),
    ("returning a function, method or iterator", r"^returning a (function|method|iterator)"),
    ("recursion deeper than the trace allows", r"call depth over"),
    ("other unsupported call", r"^call of|^import of"),
]


def reason_kind(text):
    for kind, pattern in KINDS:
        if re.search(pattern, text or ""):
            return kind
    return "other"


def summarise(results):
    """{category: counters} plus '*' for everything."""
    rows = collections.defaultdict(collections.Counter)
    for r in results.values():
        for key in (r["category"], "*"):
            c = rows[key]
            c["programs"] += 1
            c[r.get("mode", "eager")] += 1
            if r["status"] == "wrong":
                c["wrong"] += 1
            if r["status"] in ("crash", "hang"):
                c["crash"] += 1
            if r["status"] == "error":
                c["error"] += 1
            c["graphs"] += r.get("graphs", 0)
            c["breaks"] += r.get("breaks", 0)
            if r.get("mode") != "whole" and r.get("breaks", 0):
                c["broken_graphs"] += r.get("graphs", 0)
                c["broken_breaks"] += r.get("breaks", 0)
    return rows


def pct(a, b):
    return f"{100.0 * a / b:5.1f}%" if b else "    -"


def print_table(rows):
    head = f"{'category':16} {'progs':>5} {'whole':>6} {'%':>6} {'partial':>7} {'eager':>6} " \
           f"{'wrong':>5} {'crash':>5} {'graphs':>6} {'breaks':>6} {'graphs/break':>12}"
    print(head)
    print("-" * len(head))
    for cat in sorted(k for k in rows if k != "*") + ["*"]:
        c = rows[cat]
        gpb = f"{c['broken_graphs'] / c['broken_breaks']:.2f}" if c["broken_breaks"] else "-"
        name = "all" if cat == "*" else cat
        if cat == "*":
            print("-" * len(head))
        print(f"{name:16} {c['programs']:5} {c['whole']:6} {pct(c['whole'], c['programs']):>6} "
              f"{c['partial']:7} {c['eager']:6} {c['wrong']:5} {c['crash']:5} {c['graphs']:6} "
              f"{c['breaks']:6} {gpb:>12}")


def print_reasons(results, top):
    """Break reasons over the programs that did not compile whole (each
    program counts a reason once)."""
    counts = collections.Counter()
    example = {}
    for r in results.values():
        if r.get("mode") == "whole":
            continue
        for k in {reason_key(x) for x in r.get("reasons", [])}:
            counts[k] += 1
            example.setdefault(k, r["name"])
    kinds = collections.Counter()
    for r in results.values():
        if r.get("mode") != "whole":
            for k in {reason_kind(x) for x in r.get("reasons", [])} or {"(no break: see wrong answers)"}:
                kinds[k] += 1
    print("\nwhy programs did not compile whole, by kind (a program counts once per kind):")
    for k, n in kinds.most_common():
        print(f"  {n:4}  {k}")
    print(f"\nthe reasons themselves (top {top}):")
    for k, n in counts.most_common(top):
        print(f"  {n:4}  {k}   (e.g. {example[k]})")


def print_failures(results):
    bad = [r for r in results.values() if r["status"] not in ("ok",)]
    if not bad:
        print("\nno wrong answers, no crashes")
        return
    print(f"\nwrong answers, crashes and harness errors ({len(bad)}):")
    for r in sorted(bad, key=lambda r: r["name"]):
        print(f"  {r['status']:6} {r['name']} (step {r.get('step')}): {r['detail'][:220]}")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="corpus_report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="child processes at once (default 2)")
    ap.add_argument("--json", metavar="PATH", help="also write every program's record here")
    ap.add_argument("--category", action="append", help="only these categories")
    ap.add_argument("--top", type=int, default=25, help="break reasons listed (default 25)")
    args = ap.parse_args(argv)
    progs = driver.load_programs()
    names = [p.name for p in progs if not args.category or p.category in args.category]
    t0 = time.perf_counter()
    results = driver.run_corpus(names, jobs=args.jobs)
    rows = summarise(results)
    tot = rows["*"]
    print(f"smelt corpus: {tot['programs']} programs, {time.perf_counter() - t0:.1f} s; compiled whole "
          f"{tot['whole']} ({pct(tot['whole'], tot['programs']).strip()}), whole and right "
          f"{sum(1 for r in results.values() if r.get('mode') == 'whole' and r['status'] == 'ok')}\n")
    print_table(rows)
    print_reasons(results, args.top)
    print_failures(results)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"summary": {k: dict(v) for k, v in rows.items()}, "programs": results}, fh, indent=1)
        print(f"\nwrote {args.json}")
    return 1 if tot["wrong"] or tot["crash"] or tot["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
