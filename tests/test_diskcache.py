"""The disk cache of compiled code (inductor/diskcache.c): hits across
processes, damaged entries discarded and rebuilt, unsafe directories refused,
concurrent writers, LRU eviction at the size bound, bad size bounds,
stale temporary files, clearing.

Most tests run small compiles in fresh processes (the cache reads its
environment once per process), each with its own cache directory; the
damaged-entry tests run in this process, on the session's private cache
directory (tests/conftest.py).
"""
import gc
import json
import os
import pathlib
import stat
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import smelt
import smelt._C as C
from conftest import REPO

SESSION_DIR = os.environ["SMELT_CACHE_DIR"]

# A subprocess: compiles graph(c, multi) for each c in CS, runs it on fixed
# random inputs, checks it against eager, and prints one JSON line.
SCRIPT = textwrap.dedent('''
    import json, os, sys, time, torch, smelt, smelt._C as C

    def graph(c, multi):
        """exp(x + c) (one kernel); multi: also a row amax and a column sum
        (three kernels, compiled as several objects)."""
        g = C.Graph()
        x, y = g.input(torch.float32, (37, 19)), g.input(torch.float32, (19,))
        a = g.op("exp", g.op("add", x, g.scalar(c)))
        if multi:
            g.output(a, g.op("amax", a, dims=[1]), g.op("sum", g.op("mul", x, y), dims=[0]))
        else:
            g.output(a)
        return g

    def eager(c, multi, x, y):
        a = torch.exp(x + c)
        return [a, a.amax(1), (x * y).sum(0)] if multi else [a]

    gen = torch.Generator().manual_seed(7)
    x, y = torch.randn(37, 19, generator=gen), torch.randn(19, generator=gen)
    barrier = os.environ.get("BARRIER")
    while barrier and not os.path.exists(barrier):
        time.sleep(0.005)
    gens, outs = [], []
    for c in json.loads(os.environ["CS"]):
        f = graph(c, os.environ.get("MULTI") == "1").compile()
        o = f(x, y)
        for got, ref in zip(o, eager(c, os.environ.get("MULTI") == "1", x, y)):
            torch.testing.assert_close(got, ref)
        gens.append(f.num_generated)
        outs.append([t.tolist() for t in o])
        del f
    print(json.dumps({"gen": gens, "out": outs, "info": smelt.cache_info()}))
''')


def run(cache_dir, cs, multi=False, **env):
    """Runs SCRIPT for the constants cs with SMELT_CACHE_DIR=cache_dir (None:
    unset); returns (its JSON, its stderr)."""
    e = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), CS=json.dumps(cs),
             MULTI="1" if multi else "0", **env)
    e.pop("SMELT_CACHE_DIR")
    if cache_dir is not None:
        e["SMELT_CACHE_DIR"] = str(cache_dir)
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=e, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def entries(d):
    return sorted(n for n in os.listdir(d) if n.endswith(".entry"))


def test_second_process_loads_instead_of_compiling(tmp_path):
    d = tmp_path / "cache"
    first, _ = run(d, [0.25], multi=True)
    assert first["gen"][0] >= 1
    assert first["info"]["misses"] == 1 and first["info"]["writes"] == 1 and first["info"]["hits"] == 0
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    (name,) = entries(d)
    assert stat.S_IMODE(os.stat(d / name).st_mode) == 0o600
    second, err = run(d, [0.25], multi=True, SMELT_LOGS="cache")
    assert second["info"]["hits"] == 1 and second["info"]["writes"] == 0
    assert second["gen"] == [0]                     # nothing generated: code loaded
    assert second["out"] == first["out"]            # bit-identical results
    assert "disk cache hit " + name[:32] in err
    assert second["info"]["entries"] == 1 and second["info"]["enabled"] and second["info"]["dir"] == str(d)


# ------------------------------------------------------------ whole plans of a model

# A subprocess: smelt.compile(fullgraph=True) of a function whose plan has
# every kind of step (a convolution with eval BatchNorm folded into it,
# pooling, attention, a linear layer with a packed weight, a host call,
# a split reduction, two kernels with identical code, an in-place update
# of an input), run three times (the packed weight is used from the second
# call), checked against eager; prints outputs and smelt's counters.
MODEL_SCRIPT = textwrap.dedent('''
    import json, torch, smelt
    import torch.nn as nn, torch.nn.functional as F
    torch.manual_seed(3)
    conv, bn, lin = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Linear(31, 29)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1); bn.running_var.uniform_(0.5, 2); bn.weight.uniform_(0.5, 2)
    bn.eval()

    def f(img, q, k, v, x, y, buf):
        p = F.max_pool2d(torch.relu(bn(conv(img))), 2)
        s = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = lin(x)
        c = torch.cumsum(x, dim=1)
        t = (y * y).sum()
        buf.add_(0.5)
        return p, s, h, c, t, x.exp() + 1, (x + y[:13, :31]).exp() + 1

    gen = torch.Generator().manual_seed(11)
    def r(*shape):
        return torch.randn(*shape, generator=gen)
    args = [r(2, 3, 17, 19), r(2, 4, 13, 8), r(2, 4, 13, 8), r(2, 4, 13, 8), r(13, 31), r(257, 263), r(5)]
    cf = smelt.compile(f, fullgraph=True)
    outs = []
    with torch.no_grad():
        buf_ref = args[6].clone()
        for _ in range(3):
            got = cf(*args)
            ref = f(*args[:6], buf_ref)
            for g_, r_ in zip(got, ref):
                torch.testing.assert_close(g_, r_, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(args[6], buf_ref)
            outs.append([t.flatten().tolist() for t in got])
    st = cf._smelt.stats()
    print(json.dumps({"out": outs, "stats": {k: st[k] for k in ("compiles", "breaks", "generated",
                      "plans_from_disk")}, "info": smelt.cache_info()}))
''')


def run_model(cache_dir, **env):
    e = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), SMELT_CACHE_DIR=str(cache_dir), **env)
    r = subprocess.run([sys.executable, "-c", MODEL_SCRIPT], capture_output=True, text=True, env=e, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def test_second_process_loads_the_whole_plan(tmp_path):
    """The second process reads the launch plan and the machine code of
    the model's graph: no lowering, no LLVM, the same results bit for bit."""
    d = tmp_path / "cache"
    first, err1 = run_model(d, SMELT_LOGS="perf")
    assert first["stats"]["compiles"] == 1 and first["stats"]["breaks"] == 0
    assert first["stats"]["generated"] >= 5 and first["stats"]["plans_from_disk"] == 0
    assert "codegen" in err1 and "from the disk cache" not in err1
    assert len(entries(d)) == 1
    second, err2 = run_model(d, SMELT_LOGS="perf")
    assert second["stats"] == dict(first["stats"], generated=0, plans_from_disk=1)
    assert "plan and code from the disk cache" in err2 and "codegen" not in err2
    assert second["info"]["hits"] == 1 and second["info"]["writes"] == 0
    assert second["out"] == first["out"]


def test_plan_cache_shares_code_with_live_plans():
    """Plans read from disk share kernels with plans alive in the process
    (and the other way round); freeing either side leaves the other's code
    in place."""
    def graphs(c):
        g1, g2 = C.Graph(), C.Graph()
        x1, x2 = g1.input(torch.float32, (29, 31)), g2.input(torch.float32, (29, 31))
        shared1 = g1.op("exp", g1.op("mul", x1, g1.scalar(c)))
        shared2 = g2.op("exp", g2.op("mul", x2, g2.scalar(c)))
        g1.output(shared1, g1.op("sum", shared1, dims=[1]))          # the same first kernel,
        g2.output(shared2, g2.op("neg", g2.op("sum", shared2, dims=[0])))   # its own second one
        return g1, g2

    def check(f, red):
        e = torch.exp(x * 1.375)
        got = f(x)
        torch.testing.assert_close(got[0], e)
        torch.testing.assert_close(got[1], red(e))

    x = torch.randn(29, 31)
    ref1, ref2 = lambda e: e.sum(1), lambda e: -e.sum(0)
    g1, g2 = graphs(1.375)
    a = g1.compile()                      # new: code generated, plan stored
    assert a.num_generated == a.num_kernels == 2
    b = g2.compile()
    assert b.num_generated == 1           # the first kernel is a's
    del a
    gc.collect()                          # b keeps the code it shares with a
    check(b, ref2)
    a = g1.compile()                      # from disk, next to b's live code
    assert a.num_generated == 0
    check(a, ref1)
    del b
    gc.collect()
    check(a, ref1)
    b = g2.compile()                      # from disk again: its own kernel's object added anew
    assert b.num_generated == 0
    del a
    gc.collect()
    check(b, ref2)
    a = g1.compile()
    del b
    gc.collect()
    check(a, ref1)


def test_fork_right_after_the_first_compile():
    """The JIT is created on a background thread at the first
    smelt.compile; a fork at that moment waits for it, and the child
    compiles and runs."""
    script = textwrap.dedent('''
        import os, sys, torch, smelt
        f = smelt.compile(lambda x: torch.tanh(x) * 3)
        pid = os.fork()
        if pid == 0:
            x = torch.randn(37)
            ok = torch.allclose(f(x), torch.tanh(x) * 3, rtol=1e-5, atol=1e-6)
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        x = torch.randn(11)
        assert torch.allclose(f(x), torch.tanh(x) * 3, rtol=1e-5, atol=1e-6)
        print(os.waitstatus_to_exitcode(status))
    ''')
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "python")))
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stderr


def test_compiles_in_threads_at_once():
    """Compiling releases the GIL: threads compiling at once (new code, code
    shared through the registry, plans read from disk by later rounds) all
    get torch's values."""
    from conftest import in_threads

    def work(k):
        c = 0.375 + k / 16                   # each thread its own constant: its own kernels
        f = smelt.compile(lambda x: torch.tanh(x * c).sum(1) + torch.sin(x).amax(1) * k)
        x = torch.randn(29, 301)
        torch.testing.assert_close(f(x), torch.tanh(x * c).sum(1) + torch.sin(x).amax(1) * k,
                                   rtol=1e-5, atol=1e-5)

    before = smelt.cache_info()
    in_threads(work, [(k,) for k in range(4)], reps=3)
    after = smelt.cache_info()
    assert after["writes"] - before["writes"] >= 4 and after["hits"] - before["hits"] >= 4


# ------------------------------------------------------------ damaged entries (in this process)

def _graph(c):
    g = C.Graph()
    x = g.input(torch.float32, (23, 17))
    g.output(g.op("tanh", g.op("mul", x, g.scalar(c))))
    return g


def _compile_new_entry(c):
    """Compiles _graph(c) (a graph no other test compiles), frees it (so the
    next compile must look on disk) and returns its new entry's path."""
    before = set(entries(SESSION_DIR))
    f = _graph(c).compile()
    assert f.num_generated == 1
    del f
    gc.collect()
    (new,) = set(entries(SESSION_DIR)) - before
    return os.path.join(SESSION_DIR, new)


def _damage(path, how):
    data = bytearray(open(path, "rb").read())
    if how == "flip":            # payload bytes
        for i in range(len(data) // 2, len(data) // 2 + 8):
            data[i] ^= 0x5A
    elif how == "truncate":
        data = data[:len(data) // 2]
    elif how == "header":        # shorter than a header
        data = data[:10]
    elif how == "empty":
        data = b""
    elif how == "version":       # another format version
        data[8] ^= 0x7F
    elif how == "trailing":
        data += b"\0" * 16
    os.unlink(path)              # a new file, as a crashed or buggy writer would leave
    with open(path, "wb") as fh:
        fh.write(bytes(data))
    os.chmod(path, 0o600)


@pytest.mark.parametrize("how", ["flip", "truncate", "header", "empty", "version", "trailing"])
def test_damaged_entry_is_discarded_and_rebuilt(how):
    c = 1.0 + ["flip", "truncate", "header", "empty", "version", "trailing"].index(how) / 8
    path = _compile_new_entry(c)
    good = open(path, "rb").read()
    _damage(path, how)
    x = torch.randn(23, 17)
    before = smelt.cache_info()
    f = _graph(c).compile()
    after = smelt.cache_info()
    assert f.num_generated == 1                         # rebuilt, not loaded
    assert after["corrupt"] == before["corrupt"] + 1
    assert after["hits"] == before["hits"] and after["writes"] == before["writes"] + 1
    torch.testing.assert_close(f(x)[0], torch.tanh(x * c))
    assert open(path, "rb").read() == good              # rewritten whole
    del f
    gc.collect()
    f = _graph(c).compile()                             # and now loaded from disk
    assert f.num_generated == 0 and smelt.cache_info()["hits"] == after["hits"] + 1
    torch.testing.assert_close(f(x)[0], torch.tanh(x * c))


M64 = (1 << 64) - 1
P1, P2, P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _mix(acc, v):
    return _rotl((acc + v * P2) & M64, 31) * P1 & M64


def _dc_hash(b, seed=0):
    """diskcache.c's dc_hash, to write entries whose checksum is right."""
    a = [(seed + P1 + P2) & M64, (seed + P2) & M64, seed, (seed - P1) & M64]
    u64 = lambda i: int.from_bytes(b[i:i + 8], "little")
    i = 0
    while i + 32 <= len(b):
        a = [_mix(a[k], u64(i + 8 * k)) for k in range(4)]
        i += 32
    h = (_rotl(a[0], 1) + _rotl(a[1], 7) + _rotl(a[2], 12) + _rotl(a[3], 18) + len(b)) & M64
    while i + 8 <= len(b):
        h = (_rotl(h ^ _mix(0, u64(i)), 27) * P1 + P3) & M64
        i += 8
    while i < len(b):
        h = _rotl(h ^ (b[i] * P3 & M64), 11) * P1 & M64
        i += 1
    h ^= h >> 33
    h = h * P2 & M64
    h ^= h >> 29
    h = h * P3 & M64
    return h ^ (h >> 32)


def _read_entry(path):
    data = open(path, "rb").read()
    nblobs, keylen = int.from_bytes(data[12:16], "little"), int.from_bytes(data[24:32], "little")
    at = 40 + keylen
    lens = [int.from_bytes(data[at + 8 * i:at + 8 * i + 8], "little") for i in range(nblobs)]
    at += 8 * nblobs
    blobs = []
    for n in lens:
        blobs.append(data[at:at + n])
        at += n
    return data[:40], data[40:40 + keylen], blobs


def _write_entry(path, head, key, blobs):
    body = key + b"".join(len(b).to_bytes(8, "little") for b in blobs) + b"".join(blobs)
    head = bytearray(head)
    head[12:16] = len(blobs).to_bytes(4, "little")
    head[16:24] = (40 + len(body)).to_bytes(8, "little")
    head[32:40] = _dc_hash(body).to_bytes(8, "little")
    os.unlink(path)
    with open(path, "wb") as fh:
        fh.write(bytes(head) + body)
    os.chmod(path, 0o600)


def test_entry_checksum_matches_dc_hash():
    head, key, blobs = _read_entry(_compile_new_entry(3.25))
    body = key + b"".join(len(b).to_bytes(8, "little") for b in blobs) + b"".join(blobs)
    assert int.from_bytes(head[32:40], "little") == _dc_hash(body)


@pytest.mark.parametrize("how", ["counts", "short-record", "extra-name", "names", "no-objects", "junk-object"])
def test_plan_that_does_not_load_falls_back_to_compiling(how):
    """An entry whose checksum is right but whose plan record, kernel names
    or objects are wrong is not used: the graph compiles anew (LLVM runs),
    computes the right values, and the entry is rewritten whole."""
    c = 4.0 + ["counts", "short-record", "extra-name", "names", "no-objects", "junk-object"].index(how) / 8
    path = _compile_new_entry(c)
    good = open(path, "rb").read()
    head, key, blobs = _read_entry(path)
    rec = bytearray(blobs[0])
    if how == "counts":                  # nbufs far beyond the record
        rec[8:12] = (1 << 20).to_bytes(4, "little")
    elif how == "short-record":
        rec = rec[:-4]
    elif how == "extra-name":            # a name for a kernel the plan does not have
        blobs[1] = blobs[1] + bytes(40)
    elif how == "names":
        blobs[1] = blobs[1][:-1] + b"x"  # a name without its terminating zero
    blobs[0] = bytes(rec)
    if how == "no-objects":
        blobs = blobs[:2]
    elif how == "junk-object":
        blobs = blobs[:2] + [b"\x7fELF" + bytes(200)]
    _write_entry(path, head, key, blobs)
    before = smelt.cache_info()
    f = _graph(c).compile()
    after = smelt.cache_info()
    assert after["hits"] == before["hits"] + 1           # the entry was read ...
    assert f.num_generated == 1                          # ... and not used
    x = torch.randn(23, 17)
    torch.testing.assert_close(f(x)[0], torch.tanh(x * c))
    assert open(path, "rb").read() == good               # rewritten whole


def test_symlinked_entry_is_not_followed(tmp_path):
    c = 2.5
    path = _compile_new_entry(c)
    outside = tmp_path / "valid-entry"
    os.rename(path, outside)                 # a valid entry, reachable only through a link
    os.symlink(outside, path)
    before = smelt.cache_info()
    f = _graph(c).compile()
    after = smelt.cache_info()
    assert f.num_generated == 1 and after["hits"] == before["hits"]
    assert after["corrupt"] == before["corrupt"] + 1
    assert not os.path.islink(path) and os.path.isfile(path)   # link replaced by a real entry
    assert outside.exists()
    x = torch.randn(23, 17)
    torch.testing.assert_close(f(x)[0], torch.tanh(x * c))


# ------------------------------------------------------------ unsafe directories

@pytest.fixture(scope="module")
def valid_entry(tmp_path_factory):
    """(name, bytes) of a valid entry for SCRIPT's graph(0.75)."""
    d = tmp_path_factory.mktemp("src") / "cache"
    run(d, [0.75])
    (name,) = entries(d)
    return name, (d / name).read_bytes()


def _plant(d, entry):
    d.mkdir(exist_ok=True)
    (d / entry[0]).write_bytes(entry[1])
    os.chmod(d / entry[0], 0o600)


@pytest.mark.parametrize("how", ["0777", "symlink", "other-owner"])
def test_unsafe_directory_turns_the_cache_off(tmp_path, valid_entry, how):
    """The directory holds a valid entry for the graph; an unsafe directory
    must not be read from (no hit) nor written to, with one warning."""
    real = tmp_path / "cache"
    _plant(real, valid_entry)
    d = real
    if how == "0777":
        os.chmod(real, int(how, 8))
    elif how == "symlink":
        os.chmod(real, 0o700)
        d = tmp_path / "link"
        os.symlink(real, d)
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to give the directory to another user")
        os.chmod(real, 0o700)
        os.chown(real, 65534, 65534)
    res, err = run(d, [0.75, 0.75])
    info = res["info"]
    assert not info["enabled"] and info["hits"] == 0 and info["writes"] == 0
    assert res["gen"] == [1, 1]                     # compiled in memory, results checked in SCRIPT
    assert err.count("smelt disk cache off") == 1 and "RuntimeWarning" in err
    assert {"0777": "writable by group or others (mode 0777)",
            "symlink": "symbolic link", "other-owner": "owned by uid 65534"}[how] in err
    assert os.listdir(real) == [valid_entry[0]]


# ------------------------------------------------------------ concurrency, size, clearing

def test_concurrent_writers_leave_one_whole_entry(tmp_path):
    d, barrier = tmp_path / "cache", tmp_path / "go"
    e = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), CS="[0.125]", MULTI="1",
             SMELT_CACHE_DIR=str(d), BARRIER=str(barrier))
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=e) for _ in range(2)]
    barrier.touch()              # both start compiling at once
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert results[0]["out"] == results[1]["out"]
    assert len(entries(d)) == 1 and not [n for n in os.listdir(d) if n.startswith("tmp-")]
    third, _ = run(d, [0.125], multi=True)
    assert third["gen"] == [0] and third["info"]["corrupt"] == 0 and third["out"] == results[0]["out"]


def test_lru_eviction_at_the_size_bound(tmp_path):
    """With room for a few entries, compiling many graphs evicts the least
    recently used; graph 0, used again after every other compile, stays."""
    d = tmp_path / "cache"
    one, _ = run(d, [0.0])
    size = one["info"]["bytes"]
    bound_mb = 4.5 * size / 2 ** 20          # room for 4 entries
    cs = [x for i in range(1, 10) for x in (float(i), 0.0)]
    res, _ = run(d, cs, SMELT_CACHE_MAX_MB=repr(bound_mb))
    info = res["info"]
    assert info["bytes"] <= bound_mb * 2 ** 20 and info["entries"] <= 4
    assert info["evictions"] >= 9 + 1 - 4
    assert res["gen"][1::2] == [0] * 9       # graph 0 was always loaded
    again, _ = run(d, [0.0, 9.0, 1.0], SMELT_CACHE_MAX_MB=repr(bound_mb))
    assert again["gen"] == [0, 0, 1]         # recent ones kept, graph 1 evicted long ago


def test_eviction_leaves_room(tmp_path):
    """Eviction frees a quarter of the bound, so the writes after it do not
    each rescan a directory left just under the bound."""
    d = tmp_path / "cache"
    one, _ = run(d, [0.0])
    size = one["info"]["bytes"]
    bound_mb = 4.5 * size / 2 ** 20          # room for 4 entries
    res, _ = run(d, [1.0, 2.0, 3.0, 4.0], SMELT_CACHE_MAX_MB=repr(bound_mb))
    info = res["info"]
    assert info["entries"] == 3 and info["bytes"] <= 0.75 * bound_mb * 2 ** 20
    assert info["evictions"] == 2


def test_clear_cache(tmp_path):
    d = tmp_path / "cache"
    run(d, [0.5, 1.5])
    assert len(entries(d)) == 2
    (d / "notes.txt").write_text("not the cache's")
    _plant_tmp(d, "tmp-77-0-1", 3600)
    _plant_tmp(d, "tmp-78-0-1", 10)     # a write in progress: never deleted
    script = "import smelt; smelt.clear_cache(); print(smelt.cache_info()['entries'])"
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), SMELT_CACHE_DIR=str(d)))
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stderr
    assert sorted(os.listdir(d)) == ["notes.txt", "tmp-78-0-1"]


# ------------------------------------------------------------ location

def test_default_location_and_disabling(tmp_path):
    xdg = tmp_path / "xdg"
    res, _ = run(None, [0.5], XDG_CACHE_HOME=str(xdg))
    assert res["info"]["dir"] == str(xdg / "smelt") and res["info"]["writes"] == 1
    assert stat.S_IMODE(os.stat(xdg / "smelt").st_mode) == 0o700
    res, err = run("", [0.5], XDG_CACHE_HOME=str(xdg))
    assert not res["info"]["enabled"] and res["info"]["hits"] == 0 and res["gen"] == [1]
    assert "smelt disk cache off" not in err      # switched off on purpose: no warning
    res, _ = run(None, [0.5], XDG_CACHE_HOME=str(xdg), SMELT_DISABLE_CACHE="1")
    assert not res["info"]["enabled"] and res["info"]["hits"] == 0


def test_cache_info_in_this_process():
    info = smelt.cache_info()
    assert info["enabled"] and info["dir"] == SESSION_DIR
    assert set(info) == {"hits", "misses", "writes", "evictions", "corrupt", "entries", "bytes",
                         "enabled", "dir"}
    assert info["entries"] == len(entries(SESSION_DIR))


# ------------------------------------------------------------ bad size bounds, stale temporary files

@pytest.mark.parametrize("value", ["12x", "", "-5", "0", "nan", "inf"])
def test_bad_size_bound_warns_once_and_uses_the_default(tmp_path, value):
    """A SMELT_CACHE_MAX_MB that is not a positive number gets one
    RuntimeWarning naming the variable and the value; the default bound
    (1024 MB) is used, so nothing is evicted (a bound <= 0 taken as given
    would evict every entry)."""
    d = tmp_path / "cache"
    res, err = run(d, [0.5, 1.5], SMELT_CACHE_MAX_MB=value, PYTHONWARNINGS="always")
    info = res["info"]
    assert info["writes"] == 2 and info["entries"] == 2 and info["evictions"] == 0
    assert err.count("SMELT_CACHE_MAX_MB") == 1 and "RuntimeWarning" in err, err
    assert f"SMELT_CACHE_MAX_MB={value or repr('')} is not a positive number" in err
    assert "1024 MB" in err


def test_good_size_bound_does_not_warn(tmp_path):
    res, err = run(tmp_path / "cache", [0.5], SMELT_CACHE_MAX_MB="0.75", PYTHONWARNINGS="always")
    assert res["info"]["writes"] == 1 and "SMELT_CACHE_MAX_MB" not in err


def _plant_tmp(d, name, age_s):
    path = d / name
    path.write_bytes(b"half of an entry")
    when = time.time() - age_s
    os.utime(path, (when, when))
    return path


def test_stale_temporary_files_are_deleted_when_the_cache_opens(tmp_path):
    """Temporary files left by a process killed mid-write (older than 10
    minutes) are deleted by the next process that opens the cache, even
    one that only reads; younger ones may be another process's write in
    progress and stay."""
    d = tmp_path / "cache"
    first, _ = run(d, [0.75])
    stale = [_plant_tmp(d, "tmp-4242-0-123", 3600), _plant_tmp(d, "tmp-4243-7-9", 11 * 60)]
    young = [_plant_tmp(d, "tmp-4244-1-456", 0), _plant_tmp(d, "tmp-4245-2-789", 5 * 60)]
    other = _plant_tmp(d, "notes.txt", 3600)          # not the cache's: never touched
    res, err = run(d, [0.75], SMELT_LOGS="cache")
    assert res["info"]["hits"] == 1 and res["info"]["writes"] == 0 and res["gen"] == [0]
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in young) and other.exists()
    assert "deleted 2 stale temporary files" in err
    assert res["info"]["entries"] == 1 and res["out"] == first["out"]


def test_stale_temporary_files_are_deleted_after_a_write():
    """In a running process (the cache opened long ago): a scan of the
    directory (a process's first write, then every 256 writes or when the
    size estimate passes the bound; cache_info) deletes stale temporary
    files, keeps young ones. Writes in between do not scan: a write costs
    the same whatever the number of entries."""
    d = pathlib.Path(SESSION_DIR)
    stale = _plant_tmp(d, "tmp-5151-0-1", 2 * 3600)
    young = _plant_tmp(d, "tmp-5152-0-2", 30)
    try:
        _compile_new_entry(8.125)
        smelt.cache_info()
        assert not stale.exists() and young.exists()
    finally:
        young.unlink(missing_ok=True)
