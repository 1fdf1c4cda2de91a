"""The CPU the JIT generates code for (inductor/cpu/target.c).

- Op tables on other instruction sets: the pointwise, reduction and view
  tables run again in a subprocess per target (SMELT_CPU set, both at
  once), so AVX2 (8 lanes) and AVX-512 code are both checked against eager
  on any host that runs them, whatever the host's own target is. The
  subprocesses run a representative subset (SMELT_TEST_TARGET_SUBSET,
  tests/conftest.py): 457 of the 786 cases.
- Targets the host cannot run are refused with a warning (host code then),
  but code for them can be generated to be read: Graph.compile(cpu=...)
  never loads it. That is how the AVX-512 FP16 regression is checked here
  without FP16 hardware.
- The target is part of the disk cache key.
"""
import functools
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import smelt._C as C
from conftest import F16, F32, REPO, rand

OP_TABLES = ["tests/test_ops_pointwise.py", "tests/test_ops_reduction.py", "tests/test_ops_views.py"]


def host_flags():
    """The host's CPU flags (/proc/cpuinfo)."""
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def run_py(code, timeout=300, **env):
    """Runs code in a fresh interpreter with env added; (returncode, stdout, stderr)."""
    e = dict(os.environ)
    for k in ("SMELT_CPU", "SMELT_CPU_FEATURES"):
        e.pop(k, None)
    e.update(env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       env=e, timeout=timeout, cwd=REPO)
    return r.returncode, r.stdout, r.stderr


TARGET_SCRIPT = '''
    import json, warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        import torch, smelt._C as C
        t = C.jit_target()
        g = C.Graph()
        x = g.input(torch.float32, (1000,))
        g.output(g.op("exp", g.op("add", x, g.scalar(1.0))))
        f = g.compile(keep_code=True)
        x0 = torch.rand(1000)
        torch.testing.assert_close(f(x0)[0], torch.exp(x0 + 1))
    print(json.dumps(dict(t, asm=f.code("asm"), warnings=[str(m.message) for m in w])))
'''


def target_of(**env):
    """jit_target() of a fresh process with env, the assembly of a small
    kernel it compiled and ran (checked against eager), its warnings."""
    rc, out, err = run_py(TARGET_SCRIPT, **env)
    assert rc == 0, err
    return json.loads(out.splitlines()[-1])


def regs(asm):
    """Vector register kinds the assembly names: subset of {xmm, ymm, zmm}."""
    return set(re.findall(r"%([xyz]mm)\d+", asm))


# ---------------------------------------------------------------- choosing the target

@functools.lru_cache(maxsize=None)
def host():
    """target_of() with neither variable set."""
    return target_of()


def test_default_target_is_the_host():
    t = host()
    assert t["refused"] == "" and t["warnings"] == []
    flags = host_flags()
    assert t["vector_bits"] == (512 if "avx512f" in flags else 256 if "avx2" in flags else 128)
    assert t["features"].endswith(",-avx512fp16")
    assert ("+avx512f," in t["features"]) == ("avx512f" in flags)


def test_host_minus_features():
    """SMELT_CPU_FEATURES alone changes the host's CPU: -avx512f leaves AVX2."""
    t = target_of(SMELT_CPU_FEATURES="-avx512f")
    flags = host_flags()
    assert (t["refused"], t["warnings"], t["cpu"]) == ("", [], host()["cpu"])
    assert t["features"].endswith("-avx512f,-avx512fp16")
    assert t["vector_bits"] == (256 if "avx2" in flags else 128)
    assert "zmm" not in regs(t["asm"])


@pytest.mark.parametrize("env,why", [
    (dict(SMELT_CPU="not-a-cpu"), "is not a 64-bit CPU"),
    (dict(SMELT_CPU="x86-64-v3", SMELT_CPU_FEATURES="+no-such-feature"), "is not +name or -name"),
])
def test_bad_request_warns_and_uses_the_host(env, why):
    t = target_of(**env)
    assert why in t["refused"] and "generating code for the host" in t["refused"], t["refused"]
    assert t["warnings"] == [t["refused"]]
    assert (t["cpu"], t["features"], t["vector_bits"]) == (host()["cpu"], host()["features"], host()["vector_bits"])


def test_target_the_host_cannot_run_is_refused():
    """An instruction set the host lacks (FP16 on AMD and older Intel CPUs,
    AMD's XOP/SSE4a on Intel ones)."""
    items = host()["features"].split(",")
    lacks = [f for f in ("avx512fp16", "xop", "sse4a", "fma4") if "-" + f in items and "+" + f not in items]
    assert lacks, items   # no x86 CPU has FP16 and XOP
    t = target_of(SMELT_CPU_FEATURES="+" + lacks[0])
    assert "cannot run code for it" in t["refused"], t["refused"]
    assert t["warnings"] == [t["refused"]] and (t["cpu"], t["features"]) == (host()["cpu"], host()["features"])


@pytest.mark.parametrize("cpu,features,why", [
    ("not-a-cpu", None, "is not a 64-bit CPU"),
    ("i686", None, "is not a 64-bit CPU"),        # LLVM aborts on a 32-bit CPU in 64-bit mode
    ("help", None, "is not a CPU name"),          # LLVM would print its CPU list
    (None, "+no-such-feature", "is not +name or -name"),
    (None, "avx2", "is not +name or -name"),
    (None, "-64bit", "is not +name or -name"),    # LLVM aborts
    (None, "+help", "is not +name or -name"),
    (None, "-sse2", "lacks the x86-64 baseline"),
])
def test_unknown_or_unusable_targets_are_errors(cpu, features, why):
    """The checks SMELT_CPU goes through, on Graph.compile(cpu=...)."""
    g = C.Graph()
    g.output(g.op("neg", g.input(F32, (5,))))
    with pytest.raises(RuntimeError, match=re.escape(why)):
        g.compile(cpu=cpu, cpu_features=features)


# ---------------------------------------------------------------- code to read only

# mnemonics of AVX-512 FP16 instructions: half-precision arithmetic, compares,
# moves and the FP16 forms of the conversions (F16C's vcvtph2ps/vcvtps2ph are
# not FP16 instructions)
FP16_OP = re.compile(r"^v\w*(?:ph|sh)x?$")


def fp16_instructions(asm):
    found = set(re.findall(r"^\s+(v\w+)", asm, re.M))
    return sorted(m for m in found if FP16_OP.match(m) and m != "vcvtps2ph")


def test_fp16_pattern_finds_fp16_instructions():
    """The check below would see the miscompiled compare."""
    asm = "\tvcvtph2ps\t%ymm0, %zmm0\n\tvcmpltph\t144(%rsp), %ymm1, %k1 {%k1}\n\tvcvtps2ph\t$4, %zmm0, %ymm0\n"
    assert fp16_instructions(asm) == ["vcmpltph"]


def float16_ops(g, a, b):
    """float16 ops whose f32 code has compares InstCombine narrows to half."""
    s = g.scalar(2.5)
    return [g.op("remainder", s, b), g.op("remainder", a, b), g.op("floordiv", a, b), g.op("fmod", a, b),
            g.op("maximum", a, b), g.op("minimum", a, b), g.op("where", g.op("lt", b, g.scalar(0.0)), a, b),
            g.op("clamp", a, min=-1.0, max=1.0), g.op("sign", a), g.op("relu", b)]


@pytest.mark.parametrize("cpu", ["sapphirerapids", "graniterapids"])
def test_fp16_cpus_get_no_fp16_instructions(cpu):
    """Regression (issue 11, item 13): on AVX-512 FP16 CPUs float16
    remainder of 16+ elements was off by the divisor. InstCombine narrows
    `fcmp (fpext half b), 0` to a <16 x half> compare; with avx512fp16 that
    is VCMPPH, and LLVM 19 commutes a masked VCMPPH (folding the spilled b
    across the fmodf calls) without swapping its predicate: `b < 0` became
    `0 < b` (LLVM issue 159723). smelt computes float16 in float32 and now
    removes avx512fp16 from every target (graniterapids: AVX10.1 implies
    it), so no FP16 instruction is generated."""
    g = C.Graph()
    a, b = g.input(F16, (403,)), g.input(F16, (403,))
    g.output(*float16_ops(g, a, b))
    f = g.compile(cpu=cpu)
    ir, asm = f.code("ir"), f.code("asm")
    assert f'"target-cpu"="{cpu}"' in ir and "zmm" in regs(asm) and "vcvtph2ps" in asm
    assert fp16_instructions(asm) == []
    assert re.search(r'"target-features"="[^"]*-avx512fp16"', ir)
    with pytest.raises(RuntimeError, match="not to run"):
        f(torch.ones(403, dtype=F16), torch.ones(403, dtype=F16))


def test_code_only_compile_for_another_target():
    """cpu= / cpu_features= generate code without loading it, at the
    target's width: ymm only for x86-64-v3, zmm for x86-64-v4, xmm for the
    host without AVX2; the process target still compiles and runs."""
    g = C.Graph()
    x = g.input(F32, (1000,))
    g.output(g.op("exp", g.op("mul", x, g.scalar(3.0))))
    f = g.compile(cpu="x86-64-v3")
    assert f.num_generated == f.num_kernels == 1
    assert "ymm" in regs(f.code("asm")) and "zmm" not in regs(f.code("asm"))
    assert '"target-cpu"="x86-64-v3"' in f.code("ir")
    h = g.compile()
    x0 = torch.rand(1000)
    torch.testing.assert_close(h(x0)[0], torch.exp(x0 * 3))
    k = g.compile(cpu_features="-avx512f,-avx2")   # host CPU, 128-bit vectors
    assert regs(k.code("asm")) == {"xmm"}
    v4 = g.compile(cpu="x86-64-v4")
    assert "zmm" in regs(v4.code("asm")) and '"target-cpu"="x86-64-v4"' in v4.code("ir")
    with pytest.raises(RuntimeError, match="is not a 64-bit CPU"):
        g.compile(cpu="not-a-cpu")


# ---------------------------------------------------------------- float16 remainder values

@pytest.mark.parametrize("n", [15, 16, 17, 67, 403])
def test_float16_remainder_values(n, gen):
    """The reported case on the process target: 2.5 % y for float16 y."""
    y = rand((n,), F16, gen=gen, low=-4.5, high=4.5, nonzero=True)
    g = C.Graph()
    b = g.input(F16, (n,))
    g.output(g.op("remainder", g.scalar(2.5), b), g.op("remainder", g.op("full", shape=[n], value=2.5, dtype=F16), b))
    got = g.compile()(y)
    ref = torch.remainder(torch.full_like(y, 2.5), y)
    for r in got:
        torch.testing.assert_close(r, ref, rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------- disk cache key

CACHE_SCRIPT = '''
    import json, torch, smelt._C as C
    g = C.Graph()
    x = g.input(torch.float32, (333,))
    g.output(g.op("tanh", g.op("sub", x, g.scalar(0.25))))
    f = g.compile()
    x0 = torch.rand(333)
    torch.testing.assert_close(f(x0)[0], torch.tanh(x0 - 0.25))
    print(json.dumps(dict(C.cache_info(), cpu=C.jit_target()["cpu"])))
'''


def test_plans_of_one_target_never_load_for_another(tmp_path):
    runs = []
    for env in (dict(SMELT_CPU="x86-64-v3"), {}, dict(SMELT_CPU="x86-64-v3")):
        rc, out, err = run_py(CACHE_SCRIPT, SMELT_CACHE_DIR=str(tmp_path), **env)
        assert rc == 0, err
        runs.append(json.loads(out.splitlines()[-1]))
    if "avx2" not in host_flags():   # x86-64-v3 refused: all three are the host target
        assert [(r["hits"], r["writes"]) for r in runs] == [(0, 1), (1, 0), (1, 0)], runs
        return
    assert [(r["hits"], r["writes"]) for r in runs] == [(0, 1), (0, 1), (1, 0)], runs
    assert runs[0]["cpu"] == "x86-64-v3" and runs[1]["cpu"] != "x86-64-v3"


# ---------------------------------------------------------------- op tables per target

# (cpu, vector bits, the /proc/cpuinfo flag a host needs to run it)
TABLE_TARGETS = [("x86-64-v3", 256, "avx2"), ("x86-64-v4", 512, "avx512f")]


def test_op_tables_on_other_targets():
    """The op tables (subset) in one subprocess per target, AVX2 (8 lanes)
    and AVX-512 without FP16 (16 lanes), run at the same time (each is one
    pytest process; CI has two cores). Each subprocess's conftest checks
    that its JIT got the target (SMELT_TEST_TARGET). A target the host
    cannot run must be refused instead."""
    procs = {}
    for cpu, bits, need in TABLE_TARGETS:
        if need not in host_flags():
            t = target_of(SMELT_CPU=cpu)
            assert "cannot run code for it" in t["refused"], t["refused"]
            continue
        e = dict(os.environ, SMELT_CPU=cpu, SMELT_CPU_FEATURES="", SMELT_TEST_TARGET_SUBSET="1",
                 SMELT_TEST_TARGET=f"{cpu} {bits}")
        procs[cpu] = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *OP_TABLES],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e, cwd=REPO)
    failed = []
    try:
        for cpu, p in procs.items():
            out = p.communicate(timeout=1500)[0]
            if p.returncode != 0 or not re.search(r"\d+ passed", out) or " failed" in out:
                failed.append(f"--- {cpu} (exit {p.returncode}):\n" + "\n".join(out.splitlines()[-40:]))
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    assert not failed, "\n".join(failed)
