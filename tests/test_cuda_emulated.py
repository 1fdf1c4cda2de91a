"""The CUDA back end's kernels, run: the CUDA C that inductor/cuda/codegen.c
writes for a plan is compiled by g++ against a SIMT emulation
(tests/cuda_sim/simt.h: blocks one after another, a block's threads as
fibers meeting at __syncthreads) and launched as the plan's launch listing
(Compiled.code("launch")) says: grid, block, slots, finish kernels,
scratch, temporaries in an arena, the error flag. The outputs are compared
with torch eager. No GPU is needed, so this checks on every machine that
the kernels compute the right values with the launch shapes the runtime
uses; the GPU's own math library and FMA contraction are not modelled.

Each graph runs twice: threads in forward order with outputs, arena,
scratch and shared memory pre-filled with one byte pattern, and in reverse
order with another. A race between barriers, a read of memory never
written or an output element never written makes the two runs differ;
bytes written outside an output, the scratch or the arena are caught by
guard bytes around each; a __syncthreads() or warp shuffle not reached by
all the threads it needs stops the run. The kernels are built with UBSan:
undefined behaviour (signed overflow, shifts and float -> int casts out of
range), which a GPU's compiler may exploit differently, fails the case.

Kernel kinds covered (checked from the generated code, not assumed):
a thread per point (every float op in float32/float64/float16/bfloat16,
every integer and bool op, broadcast, transposed, stepped and offset
inputs), a thread per short row, a block per long row (128 threads below
4096 points, 256 at and above), split full reductions (partials +
finish), integer division by zero and an index out of range (the flag).
"""
import ctypes
import glob
import math
import os
import re
import shutil
import subprocess
import tempfile
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from conftest import (BF16, BOOL, F16, F32, F64, I32, I64, I8, U8, REDUCTION_TOL, assert_close, build,
                      ops_of_kind, rand, reference, torch_fn)
from test_ops_pointwise import binary_kw, binary_scalar, torch_accepts, unary_kw

SIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda_sim")
ARCH = "sm_90"
GUARD = 4096                 # guard bytes on each side of every buffer the kernels write
TEMP_ROOM = 1 << 24          # arena bytes past the last temporary's offset
FILLS = (0xA5, 0x5A)         # output / arena / scratch / shared fill of the forward and reverse runs


# ---------------------------------------------------------------- the cases

class Case:
    """A graph to emulate: build(g, *xs) over inputs(gen) as conftest's
    check() takes them; the kernel kinds its code must contain ("point",
    "row-thread", "row-block128", "row-block256", "split"); tolerances
    {output index: (rtol, atol)} over conftest's defaults (REDUCTION_TOL
    where the graph reduces); bad(xs) -> (inputs, flag bits) for inputs
    that must make the run raise exactly those PLAN_FLAG_* bits; output
    names for messages."""

    def __init__(self, name, build_fn, inputs, kinds, tol=None, bad=None, names=None):
        self.name, self.build_fn, self.inputs, self.kinds = name, build_fn, inputs, set(kinds)
        self.tol, self.bad, self.names = tol or {}, bad, names or {}


SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5,
            2.5, -2.5, 3.5, 0.1, 1e-20, -1e-20, 88.0, -88.0, 100.0, -100.0]
POW_CONSTS = (2, 3, 0.5, -0.5, -1, -2)   # exponents the generator writes as products / sqrt
# Ops whose float result is one correctly rounded IEEE operation (in the
# compute type, then rounded to the dtype), in the kernels as in eager:
# compared bit for bit (up to the sign of zero and NaN payloads), so a
# missing or wrong rounding to float16/bfloat16 shows. (Not sqrt: eager's
# CPU sqrt is Sleef's, within 0.5001 ulp, not correctly rounded.)
EXACT = {"add", "sub", "mul", "div", "neg", "abs", "floor", "ceil", "trunc", "round", "relu", "sign",
         "reciprocal", "maximum", "minimum", "fmod", "detach", "eq", "ne", "lt", "le", "gt", "ge", "isnan",
         "isinf", "signbit", "logical_not", "logical_and", "logical_or", "logical_xor"}


def pointwise_case(dtype):
    """Every unary and binary op torch runs on dtype, on in-domain inputs
    (test_ops_pointwise's): unary on transposed inputs, binary on a stepped
    slice and a broadcast row, and with a scalar on each side; floats also
    on special values (all pairs, for binary ops), pow by constants and a
    chain of ops (float16/bfloat16: float32 between them, rounded once)."""
    uops = [op for op in ops_of_kind("UNARY") if op not in ("cast", "clamp", "checkidx")
            and torch_accepts(torch_fn(op), dtype)]
    bops = [op for op in ops_of_kind("BINARY") if torch_accepts(torch_fn(op), dtype, dtype)]
    fl = dtype.is_floating_point
    sp = torch.tensor(SPECIALS, dtype=F64)

    def inputs(gen):
        xs = [rand((31, 13), dtype, gen=gen, **unary_kw(op, dtype)).T for op in uops]
        for op in bops:
            ka, kb = binary_kw(op, dtype)
            xs += [rand((7, 34), dtype, gen=gen, **ka)[:, ::2], rand((1, 17), dtype, gen=gen, **kb)]
        if fl:
            xs += [sp.to(dtype), sp.repeat_interleave(len(sp)).to(dtype), sp.repeat(len(sp)).to(dtype),
                   rand((5, 33), dtype, gen=gen, low=-3, high=3, quant=0.5, nonzero=True)]
        return xs

    names = uops + [op for op in bops for _ in range(3)]
    names += uops + bops + ["pow"] * len(POW_CONSTS) + ["add"] if fl else []   # "add": a chain of EXACT ops

    def build_fn(g, *xs):
        outs = [g.op(op, x) for op, x in zip(uops, xs)]
        for i, op in enumerate(bops):
            a, b = xs[len(uops) + 2 * i: len(uops) + 2 * i + 2]
            s = binary_scalar(op, dtype)
            outs += [g.op(op, a, b), g.op(op, a, g.scalar(s)), g.op(op, g.scalar(s), b)]
        if fl:
            one, a, b, base = xs[-4:]
            outs += [g.op(op, one) for op in uops] + [g.op(op, a, b) for op in bops]
            outs += [g.op("pow", base, g.scalar(c)) for c in POW_CONSTS]
            t = g.op("mul", g.op("add", base, g.scalar(0.1)), g.op("sub", base, g.scalar(1 / 3)))
            outs.append(g.op("add", g.op("div", t, g.op("add", base, g.scalar(7.0))), base))
        return outs

    exact = {i: (0, 0) for i, op in enumerate(names) if op in EXACT}
    if dtype in (F16, BF16):   # the chain keeps float32 between its ops, rounded once: half_tol
        exact.pop(len(names) - 1)
    return Case(f"pointwise_{str(dtype)[6:]}", build_fn, inputs, {"point"}, tol=exact, names=dict(enumerate(names)))


def mixed_case():
    """where with a broadcast condition and mixed dtypes, f16 x f32
    promotion, a 0-d operand, clamp, casts between every kind of dtype
    (from an offset, stepped float input, from integers, bf16 and bool;
    floats in every integer type's range: out of it the cast is undefined)."""
    dts = [F32, F16, BF16, F64, I32, I64, I8, U8, BOOL]

    def inputs(gen):
        return [rand((13, 1), BOOL, gen=gen), rand((31, 13), F16, gen=gen).T, rand((13, 31), F32, gen=gen),
                rand((), F32, gen=gen), rand((9, 40), F32, gen=gen, low=0, high=120, quant=0.25)[1:, 1::3]]

    def build_fn(g, c, h, f, z, w):
        wi = g.op("cast", w, dtype=I32)
        outs = [g.op("where", c, h, f), g.op("where", c, g.scalar(1.5), h), g.op("add", h, f),
                g.op("mul", f, z), g.op("clamp", f, min=-1.0, max=2.0), g.op("clamp", wi, min=-20, max=30)]
        for src in (w, wi, g.op("cast", g.op("abs", h), dtype=BF16), g.op("gt", h, g.scalar(0.5))):
            outs += [g.op("cast", src, dtype=dt) for dt in dts]
        return outs

    return Case("mixed", build_fn, inputs, {"point"})


def rows_case(name, shape, kind, transposed=False):
    """Every reduction over the last dim of `shape` (floats; values near 1
    for prod; ties and NaN for argmax/argmin; int32; int64 whose sums wrap
    around, as torch's do; bool; float16), a softmax and a layer norm.
    transposed: inputs are transposed views (the row's points strided)."""
    def mk(gen, dt, **kw):
        return rand(shape[::-1], dt, gen=gen, **kw).T if transposed else rand(shape, dt, gen=gen, **kw)

    def inputs(gen):
        ties = mk(gen, F32, low=-2, high=2, quant=1)
        ties[0, 3] = math.nan
        return [mk(gen, F32), mk(gen, F32, low=0.998, high=1.002), ties, mk(gen, I32), mk(gen, BOOL),
                mk(gen, F16), rand(shape[-1:], F32, gen=gen), mk(gen, I64, low=-1 << 62, high=1 << 62)]

    def build_fn(g, x, near1, ties, i, b, h, w, big):
        d = dict(dims=[-1])
        outs = [g.op(op, x, **d) for op in ("sum", "mean", "amax", "amin", "var")]
        outs += [g.op("std", x, dims=[-1], correction=0, keepdim=True), g.op("prod", near1, **d)]
        outs += [g.op(op, t, **d) for op in ("argmax", "argmin") for t in (ties, x, h)]
        outs += [g.op(op, i, **d) for op in ("sum", "prod", "amax", "argmin")]
        outs += [g.op(op, b, **d) for op in ("any", "all", "sum")]
        outs += [g.op("sum", h, **d), g.op("amax", h, **d)]
        e = g.op("exp", g.op("sub", h, g.op("amax", h, dims=[-1], keepdim=True)))
        outs.append(g.op("div", e, g.op("sum", e, dims=[-1], keepdim=True)))
        mean = g.op("mean", x, dims=[-1], keepdim=True)
        rstd = g.op("rsqrt", g.op("add", g.op("var", x, dims=[-1], keepdim=True, correction=0), g.scalar(1e-5)))
        outs.append(g.op("mul", g.op("mul", g.op("sub", x, mean), rstd), w))
        return outs + [g.op("sum", big, **d), g.op("amin", big, **d)]

    n = shape[-1]   # sums: error bound of any order, on |x| < 3
    return Case(name, build_fn, inputs, {kind}, tol={0: (1e-4, 3e-6 * n), 1: (1e-4, 3e-6)})


def split_case():
    """Full reductions of 1<<20 points (float sum/amax/amin/mean, an int32
    sum, a wrapping int64 sum), per row of (3, 1<<19), and of a transposed
    1024x1024 input."""
    def inputs(gen):
        return [rand((1 << 20,), F32, gen=gen), rand((1 << 20,), I32, gen=gen),
                rand((3, 1 << 19), F32, gen=gen), rand((1024, 1024), F32, gen=gen).T,
                rand((1 << 20,), I64, gen=gen, low=-1 << 62, high=1 << 62)]

    def build_fn(g, x, i, r, t, big):
        return [g.op("sum", x), g.op("amax", x), g.op("amin", x), g.op("sum", i), g.op("mean", x),
                g.op("sum", r, dims=[1]), g.op("amax", r, dims=[1]), g.op("sum", t), g.op("sum", big)]

    sums = (1e-5, 1e-5 * (1 << 20))
    return Case("split", build_fn, inputs, {"split"}, tol={0: sums, 4: (1e-5, 1e-5), 5: sums, 7: sums})


def int_div_case():
    """Integer floordiv/remainder/fmod (torch's rounding, every sign); a
    zero divisor sets the flag's division bit."""
    def inputs(gen):
        return [rand((7, 34), I32, gen=gen)[:, ::2], rand((1, 17), I32, gen=gen, low=-7, high=8, nonzero=True),
                rand((5, 9), I64, gen=gen), rand((5, 9), I64, gen=gen, low=-7, high=8, nonzero=True)]

    def build_fn(g, a, b, c, d):
        return [g.op(op, x, y) for op in ("floordiv", "remainder", "fmod") for x, y in ((a, b), (c, d))]

    def bad(xs):
        xs = [t.clone() for t in xs]
        xs[3][2, 4] = 0
        return xs, 1

    return Case("int_div_zero", build_fn, inputs, {"point"}, bad=bad)


def gather_case():
    """gather along dim 0 of a transposed source and, wrapped, along dim 1
    of a computed one; a wrapped checkidx; an index out of range sets the
    flag's index bit."""
    def inputs(gen):
        return [torch.randn(5, 6, generator=gen).T, torch.randint(0, 6, (9, 5), generator=gen),
                torch.randint(-5, 5, (6, 4), generator=gen, dtype=I32)]

    def build_fn(g, x, i, j):
        return [g.op("gather", x, i, dim=0), g.op("gather", g.op("exp", x), j, dim=1, wrap=True),
                g.op("checkidx", j, n=5, wrap=True)]

    def bad(xs):
        xs = [t.clone() for t in xs]
        xs[1][7, 3] = 6
        return xs, 2

    return Case("gather_index", build_fn, inputs, {"point"}, bad=bad)


def empty_case():
    """Reductions over empty rows (the identity is still written) and over
    a short column."""
    def inputs(gen):
        return [torch.empty(4, 0), rand((3, 5), F32, gen=gen)]

    def build_fn(g, e, x):
        return [g.op(op, e, dims=[1]) for op in ("sum", "prod", "any", "all")] + [g.op("sum", x, dims=[0])]

    return Case("empty_rows", build_fn, inputs, {"row-thread"})


CASES = [pointwise_case(dt) for dt in (F32, F64, F16, BF16, I32, I64, BOOL)] + [
    mixed_case(),
    rows_case("rows_thread", (300, 37), "row-thread"),
    rows_case("rows_thread_T", (200, 37), "row-thread", transposed=True),
    rows_case("rows_block128", (5, 3001), "row-block128"),
    rows_case("rows_block128_T", (5, 3001), "row-block128", transposed=True),
    rows_case("rows_block256", (3, 5003), "row-block256"),
    split_case(),
    int_div_case(),
    gather_case(),
    empty_case(),
]
KINDS = {"point", "row-thread", "row-block128", "row-block256", "split"}


# ---------------------------------------------------------------- code and launches

class Plan:
    """One case compiled for ARCH: its inputs, graph outputs (shape, dtype),
    the listing's kernel steps and buffers, the kinds its kernels are."""

    def __init__(self, index, case):
        self.case, self.fn = case, f"smelt_g{index}_run"
        self.xs = case.inputs(torch.Generator().manual_seed(zlib.crc32(case.name.encode())))
        g, outs, _ = build(case.build_fn, *self.xs)
        self.outs = [(tuple(g.shape(o)), g.dtype(o)) for o in outs]
        f = g.compile(cuda_arch=ARCH)
        assert f.backend == "cuda", f"{case.name}: compiled for {f.backend}"
        self.src, self.listing = f.code("ir"), f.code("launch")
        self.steps, self.bufs = parse_listing(self.listing)
        self.entries = re.findall(r'extern "C" __global__ void (\w+)\(', self.src)
        self.kinds = {kernel_kind(self.src, st) for st in self.steps}
        temps = [off for kind, off, _ in self.bufs.values() if kind == "temp"]
        self.arena = max(temps) + TEMP_ROOM if temps else 0
        self.scratch = max([st["scratch"] for st in self.steps] + [0])


def parse_listing(text):
    """([kernel step dicts], {buf: (kind, index or offset, torch dtype)})
    from Compiled.code("launch"); a step of another kind is an error (no
    case here needs a matmul or attention)."""
    steps, bufs = [], {}
    for ln in text.splitlines():
        w = ln.split()
        if w[0] == "buf":
            bufs[int(w[1])] = (w[2], int(w[3]), getattr(torch, w[4]))
            continue
        m = re.fullmatch(r"step (\d+) kernel (k\d+) grid (\d+) block (\d+)"
                         r"(?: finish (f\d+) grid (\d+) block (\d+) scratch (\d+))? slots((?: \d+)*)", ln)
        assert m, f"launch listing line not emulated: {ln!r}"
        steps.append(dict(kernel=m[2], grid=int(m[3]), block=int(m[4]), finish=m[5],
                          fgrid=int(m[6] or 0), fblock=int(m[7] or 0), scratch=int(m[8] or 0),
                          slots=[int(s) for s in m[9].split()]))
    return steps, bufs


def kernel_kind(src, step):
    """What the code of a step's kernel is: split (has a finish), a block
    per row (threads are lanes of one row), a thread per row (has an
    accumulator) or a thread per point."""
    body = src.split(f'void {step["kernel"]}(', 1)[1].split('extern "C"', 1)[0]
    if step["finish"]:
        return "split"
    if "const long long lane = threadIdx.x;" in body:
        return f"row-block{step['block']}"
    return "row-thread" if re.search(r"\bacc\d+\b", body) else "point"


def driver(index, plan):
    """C++ for one plan: its source inside a namespace (its entry points
    renamed by #define, so the extern "C" names differ per plan) and
    `const char *smelt_g<index>_run(void **bufs, int *flag, void *scratch)`
    launching every step as cuda/runtime.c's run_kernel does."""
    ns = f"smelt_g{index}"
    out = [f"namespace {ns} {{"] + [f"#define {e} {ns}_{e}" for e in plan.entries]
    out += [f'#include "g{index}.cu"'] + [f"#undef {e}" for e in plan.entries] + ["}", ""]
    out += [f'extern "C" const char *{plan.fn}(void **b, int *flag, void *scratch)', "{",
            "    smelt_emu::first_error.clear();"]
    for st in plan.steps:
        if st["grid"] <= 0:   # run_kernel skips an empty kernel and its finish
            continue
        args = ", ".join([f"b[{s}]" for s in st["slots"]] + ["flag", "scratch"])
        n = len(st["slots"]) + 1 + (st["finish"] is not None)
        out += ["    {", f"        void *args[] = {{ {args} }};"]
        for name, grid, block in ((st["kernel"], st["grid"], st["block"]), (st["finish"], st["fgrid"], st["fblock"])):
            if name:
                out.append(f'        smelt_emu::launch("{name}", {ns}::{ns}_{name}, {grid}, {block}, args, {n});')
        out.append("    }")
    out += ["    return smelt_emu::outcome();", "}", ""]
    return "\n".join(out)


HELPERS = r"""
extern "C" void __sanitizer_set_report_path(const char *path);
extern "C" void smelt_emu_config(int reverse, int fill)
{ smelt_emu::reverse_order = reverse; smelt_emu::shared_fill = fill; }
extern "C" void smelt_emu_report_to(const char *path) { __sanitizer_set_report_path(path); }
extern "C" int smelt_emu_ub_probe0(int one) { return one + 2147483647; }   /* overflow: UBSan must say so */
extern "C" int smelt_emu_ub_probe1(int one) { return one + 2147483647; }
extern "C" void smelt_emu_f32_to_f16(const float *x, unsigned short *y, long long n)
{ for (long long i = 0; i < n; i++) y[i] = f32_to_f16(x[i]); }
extern "C" void smelt_emu_f16_to_f32(const unsigned short *x, float *y, long long n)
{ for (long long i = 0; i < n; i++) y[i] = f16_to_f32(x[i]); }
"""


def gxx(args, cwd):
    r = subprocess.run(["g++", *args], cwd=cwd, capture_output=True, text=True)
    assert r.returncode == 0, f"g++ {' '.join(args)} failed:\n{r.stderr[-6000:]}"


# The kernels are checked for undefined behaviour as C++ defines it (signed
# overflow, shifts out of range, division by zero, float -> int casts out of
# range: undefined in CUDA C++ too, so code a GPU may compile differently).
UBSAN = ["-fsanitize=undefined,float-cast-overflow"]


def compile_library(plans, work):
    """Every plan's driver in one shared library (emu.so in work): the plans
    spread over one translation unit per CPU (compiled in parallel, without
    optimisation: g++ -O1 takes twice as long and runs no faster here),
    then linked."""
    ntu = max(1, min(len(plans), os.cpu_count() or 1))
    tus = [['#include "simt.h"', HELPERS if j == 0 else ""] for j in range(ntu)]
    load = [0] * ntu
    for i, p in sorted(enumerate(plans), key=lambda ip: -len(ip[1].src)):
        with open(os.path.join(work, f"g{i}.cu"), "w") as fh:
            fh.write(p.src)
        j = load.index(min(load))
        tus[j].append(driver(i, p))
        load[j] += len(p.src)
    flags = ["-std=c++20", "-O0", *UBSAN, "-fPIC", "-w", "-DSMELT_CUDA_EMU", "-I", SIM, "-I", work]
    for j, text in enumerate(tus):
        with open(os.path.join(work, f"tu{j}.cpp"), "w") as fh:
            fh.write("\n".join(text))
    with ThreadPoolExecutor(ntu) as ex:
        list(ex.map(lambda j: gxx([*flags, "-c", f"tu{j}.cpp", "-o", f"tu{j}.o"], work), range(ntu)))
    gxx(["-shared", *UBSAN, "-o", "emu.so", *[f"tu{j}.o" for j in range(ntu)]], work)


class Emulator:
    """The compiled library (loaded from work), the plans by case name, and
    where UBSan reports (checked to work: a probe's overflow is reported)."""

    def __init__(self, plans, work):
        self.plans, self.ub_path = {p.case.name: p for p in plans}, os.path.join(work, "ubsan")
        self.lib = ctypes.CDLL(os.path.join(work, "emu.so"))
        for p in plans:
            getattr(self.lib, p.fn).restype = ctypes.c_char_p
        # UBSan sets itself up at its first report, which resets the report
        # path from UBSAN_OPTIONS (stderr): a first probe, its report
        # silenced, then a second one that must reach our file
        saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        try:
            self.lib.smelt_emu_ub_probe0(1)
        finally:
            os.dup2(saved, 2)
            os.close(saved), os.close(null)
        self.lib.smelt_emu_report_to(self.ub_path.encode())
        self.lib.smelt_emu_ub_probe1(1)
        self.lib.smelt_emu_report_to(b"stderr")
        probe = self.ub_reports()
        assert "signed integer overflow" in probe, f"UBSan does not report to {self.ub_path}: {probe!r}"

    def ub_reports(self):
        """The text UBSan reported since the last call."""
        text = ""
        for r in glob.glob(self.ub_path + ".*"):
            with open(r) as fh:
                text += fh.read()
            os.remove(r)
        return text


@pytest.fixture(scope="module")
def emu():
    """An Emulator of every case, compiled once."""
    if not shutil.which("g++"):
        pytest.fail("g++ not found: the CUDA emulation test compiles the generated kernels with g++ "
                    "(apt-get install g++)")
    plans = [Plan(i, c) for i, c in enumerate(CASES)]
    work = tempfile.mkdtemp(prefix="smelt-cuda-emu-")
    try:
        compile_library(plans, work)
        yield Emulator(plans, work)
    finally:
        shutil.rmtree(work, True)


# ---------------------------------------------------------------- running

def guarded(nbytes, fill):
    """A byte tensor of nbytes between GUARD bytes, all set to fill."""
    return torch.full((nbytes + 2 * GUARD,), fill, dtype=torch.uint8)


def check_guards(raw, fill, what):
    for part, side in ((raw[:GUARD], "before"), (raw[-GUARD:], "after")):
        bad = (part != fill).nonzero()
        assert not len(bad), f"{what}: bytes written {side} it (at guard byte {int(bad[0])})"


def quote_lines(report, src):
    """UBSan's report, each "g<i>.cu:<line>:<col>: ..." followed by that line of src."""
    lines, out = src.splitlines(), []
    for ln in report.splitlines():
        out.append(ln)
        m = re.match(r"g\d+\.cu:(\d+):", ln)
        if m and 0 < int(m[1]) <= len(lines):
            out.append("    " + lines[int(m[1]) - 1].strip())
    return "\n".join(out)


def emulate(emu, plan, xs, reverse, fill):
    """Runs plan on inputs xs: ([outputs], flag). Threads in reverse order
    if `reverse`; outputs, arena, scratch and shared memory pre-filled
    with `fill`. Fails on a UBSan report."""
    lib = emu.lib
    lib.smelt_emu_config(reverse, fill)
    ptrs = (ctypes.c_void_p * (max(plan.bufs) + 1))()
    arena, scratch, flag = guarded(plan.arena, fill), guarded(plan.scratch, fill), guarded(4, fill)
    flag[GUARD:GUARD + 4] = 0
    outs = {}
    for b, (kind, at, dt) in plan.bufs.items():
        if kind == "input":
            assert xs[at].dtype == dt, f"buf {b}: input {at} is {xs[at].dtype}, the listing says {dt}"
            ptrs[b] = xs[at].data_ptr()
        elif kind == "output":
            shape, odt = plan.outs[at]
            assert odt == dt, f"buf {b}: output {at} is {odt}, the listing says {dt}"
            outs[at] = guarded(math.prod(shape) * dt.itemsize, fill)
            ptrs[b] = outs[at].data_ptr() + GUARD
        elif kind == "temp":
            ptrs[b] = arena.data_ptr() + GUARD + at
    lib.smelt_emu_report_to(emu.ub_path.encode())
    try:
        err = getattr(lib, plan.fn)(ptrs, ctypes.c_void_p(flag.data_ptr() + GUARD),
                                    ctypes.c_void_p(scratch.data_ptr() + GUARD))
    finally:
        lib.smelt_emu_report_to(b"stderr")   # as it was (a SMELT_DEBUG build reports there)
    ub = emu.ub_reports()
    if ub:
        raise AssertionError("undefined behaviour in the kernels:\n" + quote_lines(ub[:3000], plan.src))
    assert err is None, f"emulation: {err.decode()}"
    for raw, what in [(arena, "the arena"), (scratch, "the scratch"), (flag, "the flag")] + \
            [(raw, f"output {i}") for i, raw in outs.items()]:
        check_guards(raw, fill, what)
    res = []
    for i, (shape, dt) in enumerate(plan.outs):
        assert i in outs, f"output {i} has no buffer in the listing"
        res.append(outs[i][GUARD:len(outs[i]) - GUARD].view(dt).reshape(shape).clone())
    return res, int(flag[GUARD:GUARD + 4].view(torch.int32))


def raw_bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def half_tol(ref):
    """(rtol, atol) of a pointwise output: exact, except float16/bfloat16,
    whose fused chains keep float32 intermediates and round once where eager
    rounds after every op (ARCHITECTURE.md, CPU code generation): a rounding
    of each intermediate's size apart, 2 units of roundoff relative, and 4
    of the output's largest magnitude where a sum cancels."""
    u = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}.get(ref.dtype)
    if u is None:
        return None, None
    return 2 * u, 4 * u * float(ref.float().abs().nan_to_num(0, 0, 0).max())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kernels_compute_eager_results(emu, case):
    """Both runs (forward and reverse thread order) bit-identical, flag
    clear, inputs untouched, every output matching torch eager; with the
    case's bad inputs, exactly the expected flag bits."""
    p = emu.plans[case.name]
    missing = case.kinds - p.kinds
    assert not missing, f"the code has no {missing} kernel (has {p.kinds}):\n{p.listing}"
    snap = [x.clone() for x in p.xs]
    (a, fa), (b, fb) = (emulate(emu, p, p.xs, r, fill) for r, fill in enumerate(FILLS))
    assert fa == 0 and fb == 0, f"error flag {fa}/{fb} on valid inputs"
    for i, (x, s) in enumerate(zip(p.xs, snap)):
        assert torch.equal(raw_bytes(x), raw_bytes(s)), f"input {i} was written"
    for i, (u, v) in enumerate(zip(a, b)):
        assert torch.equal(raw_bytes(u), raw_bytes(v)), \
            f"output {i}: the two runs differ (a race between barriers, a read of memory never written, " \
            f"or elements never written)"
    refs = reference(case.build_fn, *p.xs)
    refs = refs if isinstance(refs, list) else [refs]
    reduces = bool(p.kinds - {"point"})
    for i, (got, ref) in enumerate(zip(a, refs)):
        rtol, atol = case.tol.get(i, REDUCTION_TOL.get(ref.dtype, (None, None)) if reduces else (None, None))
        if rtol is None and atol is None:
            rtol, atol = half_tol(ref)
        assert_close(got, ref, rtol=rtol, atol=atol, msg=f"{case.name} output {i} {case.names.get(i, '')}")
    if case.bad:
        xs, bits = case.bad(p.xs)
        _, flag = emulate(emu, p, xs, 0, FILLS[0])
        assert flag == bits, f"error flag {flag} on the bad inputs, want {bits}"


def test_every_kernel_kind_is_covered(emu):
    seen = set().union(*(p.kinds for p in emu.plans.values()))
    assert seen == KINDS, f"kernel kinds emulated: {sorted(seen)}, want {sorted(KINDS)}"


def test_f16_conversions_round_to_nearest_even(emu):
    """simt.h's f16 conversions vs torch's (round to nearest even): every
    half to float, and to half from every half's value, each midpoint
    between neighbours (ties), a float either side of it, subnormals,
    overflow and NaN."""
    lib = emu.lib
    h = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16)
    got = torch.empty(1 << 16, dtype=F32)
    lib.smelt_emu_f16_to_f32(ctypes.c_void_p(h.data_ptr()), ctypes.c_void_p(got.data_ptr()), 1 << 16)
    want = h.view(F16).float()
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    fin = want[want.isfinite()].double().unique()
    mids = (fin[1:] + fin[:-1]) / 2
    f = torch.cat([fin, mids, torch.tensor([65504.0, 65519.99, 65520.0, 1e6, math.inf, -math.inf, 2.0 ** -25,
                                            2.0 ** -26, 3 * 2.0 ** -26, 2.0 ** -149])]).float()
    ulp = f.view(torch.int32)
    f = torch.cat([f, (ulp + 1).view(F32), (ulp - 1).view(F32), -f, torch.tensor([math.nan])])
    out = torch.empty(f.numel(), dtype=torch.int16)
    lib.smelt_emu_f32_to_f16(ctypes.c_void_p(f.data_ptr()), ctypes.c_void_p(out.data_ptr()), f.numel())
    got, want = out.view(F16), f.half()
    assert torch.equal(got.isnan(), want.isnan())
    ok = got.isnan() | (got.view(torch.int16) == want.view(torch.int16))
    assert bool(ok.all()), f"f32_to_f16({f[~ok][0].item()!r}) = {got[~ok][0].item()!r}, torch {want[~ok][0].item()!r}"
