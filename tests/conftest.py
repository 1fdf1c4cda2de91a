"""Shared helpers for the smelt backend tests.

Every test builds a graph through the internal API (smelt._C.Graph), compiles
it, runs it and compares each output with torch eager on the same inputs.

The eager side is produced by running the *same* build function against
`TorchGraph`, a tiny shim whose `op(name, *srcs, **attrs)` calls the torch
function that defines each primitive in inductor/ops.def. So a test is written
once, as `build(g, *xs) -> node(s)`, and `check(build, *tensors)` does the rest:

  - graph dtype/shape of every output == torch's (checked before compiling),
  - compiled outputs are new contiguous tensors of that dtype and shape,
  - values match within dtype-aware tolerances (NaN == NaN, inf exact),
  - the inputs were not written to.
"""
import atexit
import math
import os
import re
import shutil
import sys
import tempfile
import warnings
import zlib
from numbers import Number

# The whole session (and every subprocess it starts, which inherits the
# environment) caches compiled code in a private directory, never ~/.cache;
# set before smelt._C is imported, as the cache reads it once per process.
os.environ["SMELT_CACHE_DIR"] = tempfile.mkdtemp(prefix="smelt-test-cache-")
atexit.register(shutil.rmtree, os.environ["SMELT_CACHE_DIR"], True)
# Intel's OpenCL CPU runtime for the SPIR-V back end: the ICD file
# scripts/setup.sh writes (the Makefile sets the same).
os.environ.setdefault("OCL_ICD_VENDORS", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                      "build", "opencl-vendors"))

import pytest  # noqa: E402
import torch  # noqa: E402

try:
    import smelt._C as C
except ImportError:  # not installed: use the in-tree package (built in place)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
    import smelt._C as C  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------- dtypes

F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
I32, I64, U8, I8, I16 = torch.int32, torch.int64, torch.uint8, torch.int8, torch.int16
BOOL = torch.bool

FLOATS = [F32, F64, F16, BF16]
INTS = [I32, I64]
SMALL_INTS = [U8, I8, I16]
MAIN = FLOATS + INTS + [BOOL]          # every op is tried on these
EVERY = FLOATS + INTS + SMALL_INTS + [BOOL]


def dname(dt):
    """Short dtype name for test ids: torch.float32 -> 'float32'."""
    return str(dt).replace("torch.", "")


# ---------------------------------------------------------------- op table

def read_ops_def():
    """[(name, arity, kind)] from inductor/ops.def, in table order."""
    with open(os.path.join(REPO, "inductor", "ops.def")) as fh:
        text = fh.read()
    rows = re.findall(r"^SMELT_OP\(\s*\w+,\s*(\w+),\s*(-?\d+),\s*(\w+)\s*\)",
                      text, re.M)
    return [(name, int(arity), kind) for name, arity, kind in rows]


OPS = read_ops_def()
OP_KIND = {name: kind for name, _, kind in OPS}


def ops_of_kind(kind):
    return [name for name, _, k in OPS if k == kind]


# ---------------------------------------------------------------- inputs

@pytest.fixture
def gen(request):
    """A torch.Generator seeded from the test id (reproducible per test)."""
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def rand(shape, dtype, *, low=None, high=None, gen=None, nonzero=False,
         quant=None, zero_frac=0.0, specials=False):
    """Random tensor of `shape`/`dtype`, never all zeros.

    floats: uniform in [low, high) (default [-3, 3)), rounded to multiples of
        `quant` when given (to create exact ties and .5 halves); `nonzero`
        pushes |x| < 0.25 to +-0.5; `specials` sprinkles nan/inf/-inf.
    ints: uniform integers in [low, high) clipped to the dtype's range
        (default [-50, 50), uint8 [0, 100)); `nonzero` replaces 0 by 1.
    bool: fair coin (all True with `nonzero`).
    `zero_frac`: that fraction of elements (about) is then set to zero.
    """
    shape = tuple(shape)
    if dtype == BOOL:
        x = torch.randint(0, 2, shape, generator=gen).bool()
        if nonzero:
            x = torch.ones(shape, dtype=BOOL)
    elif dtype.is_floating_point:
        lo = -3.0 if low is None else float(low)
        hi = 3.0 if high is None else float(high)
        x = torch.rand(shape, generator=gen, dtype=F64) * (hi - lo) + lo
        if quant:
            x = torch.round(x / quant) * quant
        if nonzero:
            x = torch.where(x.abs() < 0.25, torch.full_like(x, 0.5).copysign(x), x)
        if specials:
            u = torch.rand(shape, generator=gen)
            x = torch.where(u < 0.1, math.nan, x)
            x = torch.where((u >= 0.1) & (u < 0.15), math.inf, x)
            x = torch.where((u >= 0.15) & (u < 0.2), -math.inf, x)
        x = x.to(dtype)
    else:
        info = torch.iinfo(dtype)
        lo = (0 if dtype == U8 else -50) if low is None else int(low)
        hi = (100 if dtype == U8 else 50) if high is None else int(high)
        lo, hi = max(lo, info.min), min(hi, info.max + 1)
        x = torch.randint(lo, hi, shape, generator=gen, dtype=I64)
        if nonzero:
            x[x == 0] = 1 if hi > 1 else -1
        x = x.to(dtype)
    if zero_frac:
        x[torch.rand(shape, generator=gen) < zero_frac] = 0
    if x.numel() and not x.ne(0).any():
        x.view(-1)[0] = 1
    return x


# Input layouts: name -> f(mk) where mk(shape) makes a fresh random tensor.
# Sizes: 0-d, 0-size, 1, around the vector widths (15/16/17/33, 67), primes,
# 3-d/4-d, a parallel-sized one, and non-contiguous views (transposed,
# permuted, stepped slices with offsets, stride-0 expansions).
LAYOUTS = {
    "0d": lambda mk: mk(()),
    "empty": lambda mk: mk((4, 0, 3)),
    "1": lambda mk: mk((1,)),
    "15": lambda mk: mk((15,)),
    "16": lambda mk: mk((16,)),
    "17": lambda mk: mk((17,)),
    "33": lambda mk: mk((33,)),
    "67": lambda mk: mk((67,)),
    "13x31": lambda mk: mk((13, 31)),
    "3x5x7": lambda mk: mk((3, 5, 7)),
    "2x3x4x5": lambda mk: mk((2, 3, 4, 5)),
    "big": lambda mk: mk((131, 67)),
    "T": lambda mk: mk((31, 13)).T,
    "bigT": lambda mk: mk((67, 131)).T,
    "perm": lambda mk: mk((3, 5, 7)).permute(2, 0, 1),
    "step": lambda mk: mk((7, 34))[:, ::2],
    "offset": lambda mk: mk((9, 40))[1:, 1::3],
    "expand": lambda mk: mk((1, 17)).expand(5, 17),
    "expand_mid": lambda mk: mk((3, 1, 5)).expand(3, 4, 5),
}
SHORT_LAYOUTS = ["0d", "empty", "17", "67", "13x31", "big", "T", "step", "expand"]
TINY_LAYOUTS = ["0d", "67", "big", "T", "expand"]


def layouts(dtype):
    """Layout names to run for `dtype`: all of them for float32, a short
    list (still 0-d, 0-size, tails, parallel, non-contiguous) otherwise."""
    return list(LAYOUTS) if dtype == F32 else SHORT_LAYOUTS


def make_layouts(names, dtype, gen, **kw):
    """[(name, tensor)] for the layout `names`, values from rand(**kw)."""
    mk = lambda shape: rand(shape, dtype, gen=gen, **kw)  # noqa: E731
    return [(n, LAYOUTS[n](mk)) for n in names]


def make_input(g, t):
    """Declare a graph input matching t's dtype, shape and strides."""
    return g.input(t.dtype, tuple(t.shape), strides=tuple(t.stride()))


# ---------------------------------------------------------------- eager reference

TORCH_NAME = {"floordiv": "floor_divide"}   # smelt op name -> torch function name
TORCH_FN = {"ndtr": torch.special.ndtr,     # smelt op name -> torch callable
            "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}


def torch_fn(op):
    """The torch function implementing pointwise op `op`."""
    return TORCH_FN.get(op) or getattr(torch, TORCH_NAME.get(op, op))


def _weak(a, other):
    """A Python scalar operand as torch treats it: converted to the dtype the
    pair promotes to, as a 0-d tensor (which never outranks a tensor)."""
    if isinstance(a, torch.Tensor):
        return a
    return torch.tensor(a, dtype=torch.result_type(other, a))


def _dim(d, ndim):
    """d normalised into [0, ndim) (IndexError outside [-ndim, ndim))."""
    if not -ndim <= d < ndim:
        raise IndexError(f"dim {d} out of range for {ndim}-d tensor")
    return d % ndim


def _red_dims(x, dims):
    if dims is None or x.ndim == 0:
        return list(range(x.ndim))
    dims = [_dim(d, x.ndim) for d in ([dims] if isinstance(dims, int) else dims)]
    if len(set(dims)) != len(dims):
        raise IndexError(f"repeated dim in {dims}")
    return sorted(dims)


def _flat_reduce(fn, x, dims, keepdim):
    """fn(y, -1) where y has the reduced dims moved last and flattened (so an
    index result is the flat index within the reduced dims)."""
    kept = [d for d in range(x.ndim) if d not in dims]
    inner = math.prod(x.shape[d] for d in dims)
    y = x.permute(kept + dims) if x.ndim else x
    y = y.reshape([x.shape[d] for d in kept] + [inner])
    r = fn(y, -1)
    if keepdim:
        r = r.reshape([1 if d in dims else x.shape[d] for d in range(x.ndim)])
    return r


def torch_reduce(name, x, dims=None, keepdim=False, correction=1):
    """Reduction `name` with smelt's attrs (dims: None | int | list; prod and
    argmax/argmin over several dims via _flat_reduce, since torch takes one)."""
    d = _red_dims(x, dims)
    if name in ("prod", "argmax", "argmin"):
        return _flat_reduce(getattr(torch, name), x, d, keepdim)
    if x.ndim == 0:
        d = None
    if name in ("var", "std"):
        with warnings.catch_warnings():   # "degrees of freedom <= 0": NaN, as intended
            warnings.simplefilter("ignore")
            return getattr(torch, name)(x, dim=d, keepdim=keepdim, correction=correction)
    if d is None:
        return getattr(torch, name)(x)
    return getattr(torch, name)(x, dim=d, keepdim=keepdim)


def torch_op(name, *s, **a):
    """torch eager semantics of smelt primitive `name` (the test oracle)."""
    kind = OP_KIND.get(name)
    if name == "cast":
        return s[0].to(a["dtype"])
    if name == "clamp":
        return torch.clamp(s[0], min=a.get("min"), max=a.get("max"))
    if name in ("checkidx", "gather"):   # an index out of range: IndexError
        i, n = s[-1].long(), a.get("n") if name == "checkidx" else s[0].shape[a["dim"]]
        i = torch.where(i < 0, i + n, i) if a.get("wrap") else i
        if ((i < 0) | (i >= n)).any():
            raise IndexError("index out of range")
        return i if name == "checkidx" else torch.gather(s[0], a["dim"], i)
    if kind == "UNARY":
        return torch_fn(name)(s[0])
    if kind == "BINARY":
        x, y = _weak(s[0], s[1]), _weak(s[1], s[0])
        return torch_fn(name)(x, y)
    if name == "where":
        c, x, y = s
        if isinstance(x, Number) and isinstance(y, Number):
            return torch.where(c, x, y)
        return torch.where(c, _weak(x, y), _weak(y, x))
    if kind == "REDUCTION":
        return torch_reduce(name, s[0], **a)
    return _torch_structural(name, s, a)


def _torch_structural(name, s, a):
    x = s[0] if s else None
    if name == "reshape":
        return x.reshape(a["shape"])
    if name == "permute":
        return x.permute(a["perm"])
    if name == "expand":
        return x.expand(a["shape"])
    if name == "slice":
        d = _dim(a["dim"], x.ndim)
        sl = slice(a.get("start"), a.get("end"), a.get("step", 1))
        return x[(slice(None),) * d + (sl,)]
    if name == "squeeze":
        return x.squeeze(a["dim"])
    if name == "unsqueeze":
        return x.unsqueeze(a["dim"])
    if name == "flip":
        return x.flip(a["dim"])
    if name == "diagonal":
        return torch.diagonal(x, a.get("offset", 0), a.get("dim1", 0), a.get("dim2", 1))
    if name == "unfold":
        d, size, step, dil = _dim(a["dim"], x.ndim), a["size"], a.get("step", 1), a.get("dilation", 1)
        span = dil * (size - 1) + 1
        if span > x.shape[d]:
            raise ValueError("unfold: window larger than the dim")
        # windows of span elements, then every dil-th element of each
        w = x.unfold(d, span, step)
        return w[..., ::dil]
    if name == "cat":
        return torch.cat(list(s), dim=a.get("dim", 0))
    if name == "matmul":
        if s[0].ndim < 2 or s[1].ndim < 2:
            raise ValueError("matmul: both operands must be at least 2-d")
        return torch.matmul(s[0], s[1])
    if name == "full":
        return torch.full(tuple(a["shape"]), a["value"], dtype=a.get("dtype"))
    if name == "arange":
        return torch.arange(a.get("start", 0), a["end"], a.get("step", 1), dtype=a.get("dtype"))
    if name == "iota":
        shape, dim = tuple(a["shape"]), a["dim"] % len(a["shape"])
        v = torch.arange(shape[dim], dtype=a.get("dtype", I64))
        return v.reshape([shape[dim] if i == dim else 1 for i in range(len(shape))]).expand(shape)
    raise KeyError(f"no torch reference for op {name!r}")


class TorchGraph:
    """Stands in for C.Graph when a build function is run eagerly: node ids
    are tensors, scalars are Python numbers, op() is torch_op()."""

    def scalar(self, v):
        return v

    def op(self, name, *srcs, **attrs):
        return torch_op(name, *srcs, **attrs)


def _as_list(out):
    return (list(out), False) if isinstance(out, (list, tuple)) else ([out], True)


def reference(build_fn, *tensors):
    """Eager outputs of build_fn (list if it returns several)."""
    out, single = _as_list(build_fn(TorchGraph(), *tensors))
    return out[0] if single else out


# ---------------------------------------------------------------- compiled side

def build(build_fn, *tensors):
    """(graph, output ids, single) with one input per tensor (same strides)."""
    g = C.Graph()
    ids = [make_input(g, t) for t in tensors]
    outs, single = _as_list(build_fn(g, *ids))
    g.output(*outs)
    return g, outs, single


def _call_checked(g, f, outs, tensors):
    snap = [t.clone() for t in tensors]
    res = f(*tensors)
    assert isinstance(res, list) and len(res) == len(outs), \
        f"compiled graph returned {type(res).__name__} of {len(res)}, want {len(outs)} outputs"
    for i, (r, o) in enumerate(zip(res, outs)):
        assert isinstance(r, torch.Tensor), f"output {i} is {type(r).__name__}"
        assert r.dtype == g.dtype(o) and tuple(r.shape) == tuple(g.shape(o)), \
            f"output {i}: got {r.dtype}{list(r.shape)}, graph says {g.dtype(o)}{list(g.shape(o))}"
        assert r.is_contiguous(), f"output {i} is not contiguous (strides {r.stride()})"
    for i, (t, s) in enumerate(zip(tensors, snap)):
        assert_close(t, s, rtol=0, atol=0, msg=f"input {i} was modified")
    return res


# SMELT_TEST_BACKEND=<name> (tests/test_spirv.py runs the op tables so,
# with SMELT_BACKEND set): every graph a table compiles must have run on
# that back end, not fallen back to the CPU.
TEST_BACKEND = os.environ.get("SMELT_TEST_BACKEND")


# The CUDA back end's code generation, checked without a GPU: every graph
# the op tables compile is also turned into CUDA C and compiled by NVRTC,
# for sm_90 and sm_80 in turn (one NVRTC run per graph: the CUDA C is the
# same for both; each kernel kind occurs many times in the tables), which
# must succeed. On in the main test process where NVRTC is installed (not
# in the op-table subprocesses of other targets and back ends);
# SMELT_TEST_CUDA_ARCHS="a,b" (or "") overrides.
def _cuda_archs():
    if "SMELT_TEST_CUDA_ARCHS" in os.environ:
        return [a for a in os.environ["SMELT_TEST_CUDA_ARCHS"].split(",") if a]
    if os.environ.get("SMELT_TEST_TARGET_SUBSET") or os.environ.get("SMELT_TEST_BACKEND") or not C.nvrtc_version():
        return []
    return ["sm_90", "sm_80"]


TEST_CUDA_ARCHS = _cuda_archs()
_cuda_turn = [0]


def compile_graph(g, **compile_kw):
    """g.compile(**compile_kw), checked to run on TEST_BACKEND when set, and
    compiled to CUDA C by NVRTC for the next of TEST_CUDA_ARCHS."""
    f = g.compile(**compile_kw)
    if TEST_BACKEND and not compile_kw.get("cpu") and not compile_kw.get("cpu_features"):
        assert f.backend == TEST_BACKEND, f"compiled for {f.backend}, not {TEST_BACKEND}"
    if TEST_CUDA_ARCHS:
        arch = TEST_CUDA_ARCHS[_cuda_turn[0] % len(TEST_CUDA_ARCHS)]
        _cuda_turn[0] += 1
        try:
            cu = g.compile(cuda_arch=arch)
        except RuntimeError as e:   # a step with no CUDA code (a convolution, a host call) is refused
            assert "compile: backend cuda: step" in str(e), e
        else:
            assert cu.backend == "cuda" and (cu.num_kernels == 0 or ".target " + arch in cu.code("asm"))
    return f


def run_compiled(build_fn, *tensors, **compile_kw):
    """Build, compile and run: (outputs, compiled). outputs is a tensor when
    build_fn returned one node id, else a list."""
    g, outs, single = build(build_fn, *tensors)
    f = compile_graph(g, **compile_kw)
    res = _call_checked(g, f, outs, tensors)
    return (res[0] if single else res), f


def run(build_fn, *tensors, **compile_kw):
    """Outputs of the compiled graph for build_fn on these inputs."""
    return run_compiled(build_fn, *tensors, **compile_kw)[0]


def check(build_fn, *tensors, names=None, rtol=None, atol=None, compile_kw=None):
    """Compile build_fn, run it on `tensors` and compare every output with
    torch eager. rtol/atol: None (dtype default), a number, or a list with one
    entry per output (atol entries may be tensors). Returns the Compiled."""
    refs, _ = _as_list(reference(build_fn, *tensors))
    g, outs, _ = build(build_fn, *tensors)
    names = names or [str(i) for i in range(len(outs))]
    for n, o, r in zip(names, outs, refs):  # builder inference vs torch first
        assert (g.dtype(o), tuple(g.shape(o))) == (r.dtype, tuple(r.shape)), \
            f"output {n}: graph infers {g.dtype(o)}{list(g.shape(o))}, torch gives {r.dtype}{list(r.shape)}"
    f = compile_graph(g, **(compile_kw or {}))
    res = _call_checked(g, f, outs, tensors)
    per = lambda v, i: v[i] if isinstance(v, list) else v  # noqa: E731
    for i, (n, got, r) in enumerate(zip(names, res, refs)):
        assert_close(got, r, rtol=per(rtol, i), atol=per(atol, i), msg=f"output {n}")
    return f


# ---------------------------------------------------------------- comparison

POINTWISE_TOL = {F32: (1e-5, 1e-6), F64: (1e-7, 1e-7), F16: (1e-3, 1e-3), BF16: (1.6e-2, 1.6e-2)}
REDUCTION_TOL = {F32: (1e-4, 1e-5), F64: (1e-7, 1e-7), F16: (1e-3, 1e-3), BF16: (1.6e-2, 1.6e-2)}


def assert_close(got, ref, *, rtol=None, atol=None, msg=""):
    """got == ref in dtype, shape and values. Floats: |got-ref| <= atol +
    rtol*|ref| elementwise (atol may be a tensor broadcasting to ref), NaN
    matches NaN, infinities must match exactly; defaults per dtype from
    POINTWISE_TOL. Integers and bool: exact."""
    ref = torch.as_tensor(ref)
    where = f"{msg}: " if msg else ""
    assert isinstance(got, torch.Tensor), f"{where}got {type(got).__name__}, not a tensor"
    assert got.dtype == ref.dtype, f"{where}dtype {got.dtype}, torch gives {ref.dtype}"
    assert tuple(got.shape) == tuple(ref.shape), \
        f"{where}shape {tuple(got.shape)}, torch gives {tuple(ref.shape)}"
    if not ref.is_floating_point():
        bad = got != ref
    else:
        drt, dat = POINTWISE_TOL[ref.dtype]
        rtol = drt if rtol is None else rtol
        atol = dat if atol is None else atol
        g64, r64 = got.double(), ref.double()
        both_nan = g64.isnan() & r64.isnan()
        ok = (g64 == r64) | ((g64 - r64).abs() <= atol + rtol * r64.abs()) | both_nan
        bad = ~ok
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(
            f"{where}{int(bad.sum())} of {ref.numel()} elements differ "
            f"({ref.dtype}, rtol={rtol}, atol={atol if not torch.is_tensor(atol) else 'scaled'}); "
            f"first at {list(idx)}: got {got[idx].item()!r}, torch {ref[idx].item()!r}")


# ---------------------------------------------------------------- other targets

# tests/test_targets.py runs the op tables again in a subprocess per JIT
# target (SMELT_CPU), with SMELT_TEST_TARGET_SUBSET=1: every op and layout,
# but of the dtype cases only those whose code differs most between
# instruction sets (float32; float16, converted to float32; int64, which
# AVX2 has no multiply, min or max for; bool, masks: blends on AVX2, mask
# registers on AVX-512), and one case of each multi-second reduction test.
# SMELT_TEST_TARGET="<cpu> <vector bits>" makes the session refuse to start
# unless the JIT got that target.
TARGET_DTYPES = {F32, F16, I64, BOOL}
TARGET_SLOW = {"test_long_float_sums_stay_accurate": 1, "test_huge_1d": 2}


def _in_target_subset(item):
    params = getattr(getattr(item, "callspec", None), "params", {})
    name = item.originalname or item.name
    if name in TARGET_SLOW:
        return list(params.values()) == [TARGET_SLOW[name]]
    dtypes = [v for v in params.values() if isinstance(v, torch.dtype)]
    return not dtypes or all(d in TARGET_DTYPES for d in dtypes)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("SMELT_TEST_TARGET_SUBSET") != "1":
        return
    keep = [it for it in items if _in_target_subset(it)]
    config.hook.pytest_deselected(items=[it for it in items if not _in_target_subset(it)])
    items[:] = keep


def pytest_sessionstart(session):
    want = os.environ.get("SMELT_TEST_TARGET")
    if want:
        t = C.jit_target()
        got = f"{t['cpu']} {t['vector_bits']}"
        if got != want or t["refused"]:
            raise pytest.UsageError(f"SMELT_TEST_TARGET={want}, but the JIT targets {got} {t['refused']}")


@pytest.fixture
def threads():
    """set(n) changes smelt's thread count for this test; restored after."""
    old = C.get_num_threads()
    yield C.set_num_threads
    C.set_num_threads(old)


def in_threads(work, arg_tuples, reps=1):
    """Runs work(*args) reps times in one thread per args tuple, all at once;
    raises the first exception any thread raised (assertions included)."""
    import threading
    errors = []

    def run(args):
        try:
            for _ in range(reps):
                work(*args)
        except Exception as e:   # noqa: BLE001 - re-raised below
            errors.append(e)

    ts = [threading.Thread(target=run, args=(a,)) for a in arg_tuples]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
