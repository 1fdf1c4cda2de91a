"""PyTorch's OpInfo database (torch.testing._internal op_db) run through smelt.

Each sample of an OpInfo entry is rendered as the source of a function of its
tensors (constants are globals of that function, so the call is written as a
user would write it), compiled with smelt.compile, called twice on exact
copies of the inputs (storage, offset and strides kept) and compared with
eager on another copy:

- outputs: the same structure, Python types and values; tensors' dtype,
  shape, strides, values (dtype-aware tolerances, NaN == NaN) and aliasing
  (an output that is a view of an input in eager is a view of the same input,
  with the same offset, in smelt; one that is not, is not);
- inputs after the call (in-place variants and out=);
- errors: where eager raises, smelt raises the same exception type.

float16/bfloat16 values that differ from eager's beyond the dtype's
tolerance pass when smelt's are at least as accurate against the float64
reference (half_accuracy: a fused chain keeps float32 intermediates).

`error_inputs` must raise the type OpInfo names (and match its message).

Random ops are compared for metadata only when their values differ under
the same seed; ops that return uninitialised memory (empty*) likewise.

run_op(opinfo, dtypes, cap, variants) -> list of Result; used by
tests/test_opinfo.py (capped, in `make test`) and benchmarks/opinfo_report.py
(every sample, the figures the bench reports)."""
import itertools
import math
import re
import warnings
from dataclasses import dataclass, field

import torch
from torch.utils import _pytree as pytree

import smelt

DTYPES = (torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8,
          torch.bool, torch.float16, torch.bfloat16, torch.complex64)
# the four dtypes the native-code figure is taken over
FIGURE_DTYPES = (torch.float32, torch.int64, torch.bool, torch.float16)

RANDOM = re.compile(r"rand|bernoulli|dropout|normal|multinomial|uniform|exponential|geometric|"
                    r"cauchy|poisson|log_normal|random|rrelu")
UNINIT = re.compile(r"^(empty|new_empty|empty_like|empty_strided|empty_permuted|new_empty_strided)")

TOL = {torch.float16: (1e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2), torch.float32: (1.3e-5, 1e-5),
       torch.float64: (1e-7, 1e-7), torch.complex64: (1.3e-5, 1e-5), torch.complex128: (1e-7, 1e-7)}


@dataclass
class Result:
    op: str
    dtype: str
    variant: str
    sample: int
    status: str           # match | wrong | raises | crash | error-ok | error-missing
    detail: str = ""
    native: bool = False
    compiled: bool = False
    host: str = ""        # the host calls of the compiled graph (native runs)


# ---------------------------------------------------------------- rendering

class _Renderer:
    """Source text of a nested structure: tensors become parameters t0.., other
    leaves constants c0.. (globals of the rendered function)."""

    def __init__(self):
        self.tensors, self.consts = [], []

    def leaf(self, v):
        if isinstance(v, torch.Tensor):
            self.tensors.append(v)
            return f"t{len(self.tensors) - 1}"
        if v is None or isinstance(v, (bool, int, str)) and not isinstance(v, torch.Size):
            return repr(v)
        if isinstance(v, float) and math.isfinite(v):
            return repr(v)
        self.consts.append(v)
        return f"c{len(self.consts) - 1}"

    def render(self, v):
        if type(v) is list:
            return "[" + "".join(self.render(x) + ", " for x in v) + "]"
        if type(v) is tuple:
            return "(" + "".join(self.render(x) + ", " for x in v) + ")"
        if type(v) is dict and all(isinstance(k, str) for k in v):
            return "{" + ", ".join(f"{k!r}: {self.render(x)}" for k, x in v.items()) + "}"
        return self.leaf(v)


def render(fn, sample, name="f"):
    """(function, tensors): function(*tensors) calls fn(sample.input,
    *sample.args, **sample.kwargs)."""
    r = _Renderer()
    parts = [r.render(sample.input)] + [r.render(a) for a in sample.args]
    parts += [f"{k}={r.render(v)}" for k, v in sample.kwargs.items()]
    params = ", ".join(f"t{i}" for i in range(len(r.tensors)))
    src = f"def {name}({params}):\n    return OP({', '.join(parts)})\n"
    env = {"OP": fn, **{f"c{i}": c for i, c in enumerate(r.consts)}}
    exec(compile(src, f"<opinfo {name}>", "exec"), env)
    return env[name], r.tensors, src


def exact_copies(tensors):
    """Copies of tensors that keep offset, strides and which of them share
    storage (copied once per storage)."""
    storages, out = {}, []
    for t in tensors:
        if t.layout != torch.strided or t.device.type == "meta":
            out.append(t.clone() if t.layout != torch.strided else t)
            continue
        st = t.untyped_storage()
        key = st.data_ptr(), st.nbytes()
        if key not in storages:
            storages[key] = st.clone()
        n = torch.empty(0, dtype=t.dtype, device=t.device)
        n.set_(storages[key], t.storage_offset(), t.size(), t.stride())
        if t.is_conj():
            n = n.conj()
        if t.is_neg():
            n = n._neg_view()
        n.requires_grad_(t.requires_grad)
        out.append(n)
    return out


# ---------------------------------------------------------------- comparing

def _base_of(t, inputs):
    """Index of the input whose storage t shares, or -1."""
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
        return -1
    p = t.untyped_storage().data_ptr()
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.layout == torch.strided and \
                x.untyped_storage().data_ptr() == p and t.untyped_storage().nbytes() > 0:
            return i
    return -1


def _compare_tensor(e, s, where, values=True, strides=True):
    if type(e) is not type(s) and not (isinstance(e, torch.nn.Parameter) or isinstance(s, torch.nn.Parameter)):
        return f"{where}: type {type(s).__name__}, eager {type(e).__name__}"
    if e.dtype != s.dtype:
        return f"{where}: dtype {s.dtype}, eager {e.dtype}"
    if e.shape != s.shape:
        return f"{where}: shape {tuple(s.shape)}, eager {tuple(e.shape)}"
    if e.layout != s.layout:
        return f"{where}: layout {s.layout}, eager {e.layout}"
    if e.layout != torch.strided:
        e, s = e.to_dense(), s.to_dense()
    if strides and e.numel() > 1 and not _same_strides(e, s):
        return f"{where}: strides {s.stride()}, eager {e.stride()}"
    if e.requires_grad != s.requires_grad:
        return f"{where}: requires_grad {s.requires_grad}, eager {e.requires_grad}"
    if not values:
        return None
    e, s = e.detach().resolve_conj().resolve_neg(), s.detach().resolve_conj().resolve_neg()
    if e.dtype.is_floating_point or e.dtype.is_complex:
        rtol, atol = TOL.get(e.dtype, (1e-5, 1e-5))
        if e.dtype in _OP_TOL:   # never tighter than the defaults
            rtol, atol = max(rtol, _OP_TOL[e.dtype][0]), max(atol, _OP_TOL[e.dtype][1])
        try:
            torch.testing.assert_close(s, e, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as err:
            return f"{where}: values differ: {str(err).splitlines()[1:4]}"
    elif not torch.equal(s, e):
        return f"{where}: values differ"
    return None


def _same_strides(e, s):
    """Strides agree where they matter (dims of size 1 are free)."""
    return all(a == b for a, b, n in zip(e.stride(), s.stride(), e.shape) if n != 1)


def compare(e, s, e_inputs, s_inputs, where="out", values=True, strides=True):
    if isinstance(e, torch.Tensor) or isinstance(s, torch.Tensor):
        if not (isinstance(e, torch.Tensor) and isinstance(s, torch.Tensor)):
            return f"{where}: {type(s).__name__}, eager {type(e).__name__}"
        bad = _compare_tensor(e, s, where, values, strides)
        if bad:
            return bad
        be, bs = _base_of(e, e_inputs), _base_of(s, s_inputs)
        if be != bs:
            return f"{where}: aliases input {bs}, eager input {be}"
        if be >= 0 and e.numel() > 0 and e.storage_offset() != s.storage_offset():
            return f"{where}: view at offset {s.storage_offset()}, eager {e.storage_offset()}"
        return None
    if type(e) is not type(s):
        return f"{where}: type {type(s).__name__}, eager {type(e).__name__}"
    if isinstance(e, (list, tuple)):
        if len(e) != len(s):
            return f"{where}: {len(s)} items, eager {len(e)}"
        for i, (a, b) in enumerate(zip(e, s)):
            bad = compare(a, b, e_inputs, s_inputs, f"{where}[{i}]", values, strides)
            if bad:
                return bad
        return None
    if isinstance(e, dict):
        if list(e) != list(s):
            return f"{where}: keys {list(s)}, eager {list(e)}"
        for k in e:
            bad = compare(e[k], s[k], e_inputs, s_inputs, f"{where}[{k!r}]", values, strides)
            if bad:
                return bad
        return None
    if isinstance(e, float) and isinstance(s, float):
        if not values or e == s or (math.isnan(e) and math.isnan(s)) or math.isclose(e, s, rel_tol=1e-5, abs_tol=1e-6):
            return None
        return f"{where}: {s!r}, eager {e!r}"
    if values and e != s:
        return f"{where}: {s!r}, eager {e!r}"
    return None


# ---------------------------------------------------------------- running

def _call(fn, args, seed):
    torch.manual_seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args), None
    except Exception as err:  # noqa: BLE001 - the exception is the result compared
        return None, err


def _native(compiled, args):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            info = smelt.explain(compiled, *args)
    except Exception:  # noqa: BLE001
        return False, False, "explain fails"
    if not info["compiles"]:
        return False, False, "eager: " + str(info.get("reason"))[:200]
    return not info["host_calls"], True, ",".join(info["host_calls"])


# ---------------------------------------------------------------- half-precision accuracy

HALF = (torch.float16, torch.bfloat16)
UNIT_ROUNDOFF = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
HALF_SLACK = 0.10


def rel_err(y, ref):
    """(relative RMS error of y against ref over the elements where ref is
    finite, the number of them, whether y is non-finite at one of them)."""
    y, ref = y.detach().double(), ref.detach().double()
    m = torch.isfinite(ref)
    n = int(m.sum())
    if n == 0:
        return 0.0, 0, False
    bad = bool((~torch.isfinite(y) & m).any())
    m = m & torch.isfinite(y)
    d, r = y[m] - ref[m], ref[m]
    den = float(r.pow(2).mean().sqrt()) if r.numel() else 0.0
    num = float(d.pow(2).mean().sqrt()) if d.numel() else 0.0
    return (num / den if den > 0 else num), n, bad


def half_accuracy(e, s, ref, dtype, slack=HALF_SLACK):
    """None if s (smelt) is at least as accurate as e (eager) against ref
    (tests/test_half.py explains the bound: err(s) <= err(e) (1 + slack) +
    u / sqrt(n)), else why not."""
    ee, n, ebad = rel_err(e, ref)
    es, _, sbad = rel_err(s, ref)
    if sbad and not ebad:
        return "non-finite where eager and the float64 reference are finite"
    bound = ee * (1 + slack) + UNIT_ROUNDOFF[dtype] / math.sqrt(max(n, 1))
    if es > bound:
        return f"error vs float64 {es:.3g} > eager's {ee:.3g} (bound {bound:.3g}, n={n})"
    return None


def _upcast(x):
    return x.detach().double() if isinstance(x, torch.Tensor) and x.dtype in HALF else x


def half_more_accurate(f, tensors, e_out, s_out, seed):
    """True if every float16/bfloat16 output of s_out is at least as
    accurate as e_out's against f run on the inputs upcast to float64 (a
    fused chain keeps float32 intermediates where eager rounds each op: its
    values may differ from eager's by more than a rounding, towards the
    exact result)."""
    ref, err = _call(f, [_upcast(t) for t in exact_copies(tensors)], seed)
    if err is not None:
        return False
    le, ls, lr = pytree.tree_leaves(e_out), pytree.tree_leaves(s_out), pytree.tree_leaves(ref)
    if len(le) != len(ls) or len(le) != len(lr):
        return False
    for a, b, r in zip(le, ls, lr):
        if isinstance(a, torch.Tensor) and a.dtype in HALF:
            if a.layout != torch.strided or not isinstance(r, torch.Tensor) or r.shape != a.shape or \
                    half_accuracy(a, b, r, a.dtype):
                return False
    return True


def check_sample(op, fn, sample, dtype, variant, index, seed=1234, native=False):
    """One Result for fn (a variant of op) on sample."""
    res = Result(op.full_name if hasattr(op, "full_name") else op.name, str(dtype).replace("torch.", ""),
                 variant, index, "match")
    try:
        f, tensors, src = render(fn, sample, name=f"{res.op.replace('.', '_')}_{variant}")
    except Exception as err:  # noqa: BLE001
        res.status, res.detail = "skip", f"cannot render: {err!r}"
        return res
    values = not UNINIT.match(op.name)
    e_in = exact_copies(tensors)
    e_out, e_err = _call(f, e_in, seed)
    compiled = smelt.compile(f)
    for attempt in range(2):
        s_in = exact_copies(tensors)
        try:
            s_out, s_err = _call(compiled, s_in, seed)
        except BaseException as err:  # noqa: BLE001
            res.status, res.detail = "crash", f"{type(err).__name__}: {err}"
            return res
        if e_err is not None:
            if s_err is None:
                res.status, res.detail = "wrong", f"returns a value; eager raises {type(e_err).__name__}: {e_err}"
                return res
            if not isinstance(s_err, type(e_err)):
                res.status, res.detail = "wrong", (f"raises {type(s_err).__name__}: {s_err}; "
                                                   f"eager {type(e_err).__name__}: {e_err}")
                return res
            continue
        if s_err is not None:
            res.status, res.detail = "raises", f"{type(s_err).__name__}: {str(s_err)[:300]}"
            return res
        bad = compare(e_out, s_out, e_in, s_in, values=values)
        if bad and values and RANDOM.search(op.name):
            bad = compare(e_out, s_out, e_in, s_in, values=False)
        relaxed = bool(bad) and values and dtype in HALF and \
            compare(e_out, s_out, e_in, s_in, values=False) is None and half_more_accurate(f, tensors, e_out, s_out, seed)
        if relaxed:
            bad = None
        if bad is None:   # (an in-place variant's relaxed output is its input)
            bad = compare(e_in, s_in, [], [], where="inputs after the call", values=values and not (relaxed and variant == "inplace"))
        if bad:
            res.status, res.detail = "wrong", f"{bad}\n{src}"
            return res
    if native:
        res.native, res.compiled, res.host = _native(compiled, exact_copies(tensors))
    return res


def check_error(op, ei, index):
    """One Result for an ErrorInput: smelt raises what OpInfo says eager raises."""
    res = Result(op.full_name if hasattr(op, "full_name") else op.name, "-", "error", index, "error-ok")
    sample = ei.sample_input
    try:
        f, tensors, src = render(op.op, sample, name=f"{res.op.replace('.', '_')}_error")
    except Exception as err:  # noqa: BLE001
        res.status, res.detail = "skip", f"cannot render: {err!r}"
        return res
    e_out, e_err = _call(f, exact_copies(tensors), 0)
    if e_err is None:  # eager does not raise here either (OpInfo data for another build)
        res.status = "skip"
        return res
    compiled = smelt.compile(f)
    for attempt in range(2):
        try:
            s_out, s_err = _call(compiled, exact_copies(tensors), 0)
        except BaseException as err:  # noqa: BLE001
            res.status, res.detail = "crash", f"{type(err).__name__}: {err}"
            return res
        if s_err is None:
            res.status, res.detail = "error-missing", f"returns a value; eager raises {type(e_err).__name__}: {e_err}\n{src}"
            return res
        if not isinstance(s_err, ei.error_type) or not isinstance(s_err, type(e_err)):
            res.status, res.detail = "error-missing", (f"raises {type(s_err).__name__}: {s_err}; "
                                                       f"eager {type(e_err).__name__}: {e_err}\n{src}")
            return res
        if ei.error_regex and not re.search(ei.error_regex, str(s_err)) and re.search(ei.error_regex, str(e_err)):
            res.status, res.detail = "error-missing", f"message {str(s_err)!r}; eager {str(e_err)!r}\n{src}"
            return res
    return res


def variants(op):
    out = [("fn", op.op)]
    if op.method_variant is not None:
        out.append(("method", op.method_variant))
    if op.inplace_variant is not None:
        out.append(("inplace", op.inplace_variant))
    return out


def samples(op, dtype, reference, noncontig=False):
    try:
        gen = op.reference_inputs("cpu", dtype) if reference else op.sample_inputs("cpu", dtype)
        for s in gen:
            yield s.noncontiguous() if noncontig else s
    except Exception:  # noqa: BLE001 - some sample functions need what this build lacks
        return


def _out_sample(op, sample):
    """sample with out= set to a tensor like eager's result (None if the op
    returns no single tensor)."""
    f, tensors, _ = render(op.op, sample)
    r, err = _call(f, exact_copies(tensors), 0)
    if err is not None or not isinstance(r, torch.Tensor):
        return None
    out = torch.empty_like(r).normal_() if r.dtype.is_floating_point else torch.zeros_like(r)
    return sample.__class__(sample.input, args=sample.args, kwargs={**sample.kwargs, "out": out})


def inductor_tolerances(op):
    """The tolerances the OpInfo entry sets for PyTorch's own compiler test
    (TestInductorOpInfo.test_comprehensive toleranceOverride decorators, on
    the CPU): {dtype: (rtol, atol)}. A compiler's kernels may sum in
    another order than eager's (a 3-d convolution's thousands of products):
    where the database says how far that may go for Inductor, it holds for
    smelt too."""
    from torch.testing._internal.common_device_type import toleranceOverride
    from torch.testing._internal.opinfo.core import DecorateInfo
    found = {}
    for d in getattr(op, "decorators", ()) or ():
        if not isinstance(d, DecorateInfo) or d.cls_name != "TestInductorOpInfo" or \
                d.test_name != "test_comprehensive" or d.device_type not in (None, "cpu"):
            continue
        for dec in d.decorators:
            if isinstance(dec, toleranceOverride):
                for dtype, t in dec.d.items():
                    if d.dtypes is None or dtype in d.dtypes:
                        found[dtype] = (t.rtol, t.atol)
    return found


_OP_TOL = {}   # the op being run: inductor_tolerances(op)


def run_op(op, dtypes=DTYPES, cap=3, reference=False, errors=True, with_out=True, native=False, noncontig=False):
    results = []
    _OP_TOL.clear()
    _OP_TOL.update(inductor_tolerances(op))
    supported = op.supported_dtypes("cpu")
    for dtype in dtypes:
        if dtype not in supported:
            continue
        for i, sample in enumerate(itertools.islice(samples(op, dtype, reference, noncontig), cap)):
            for name, fn in variants(op):
                if name == "inplace" and (sample.broadcasts_input or
                                          not isinstance(sample.input, torch.Tensor)):
                    continue
                results.append(check_sample(op, fn, sample, dtype, name, i,
                                            native=native and name == "fn" and dtype in FIGURE_DTYPES))
            if with_out and op.supports_out and i == 0:
                s = _out_sample(op, sample)
                if s is not None:
                    results.append(check_sample(op, op.op, s, dtype, "out", i))
    if errors and op.error_inputs_func is not None:
        try:
            eis = list(op.error_inputs("cpu"))
        except Exception:  # noqa: BLE001
            eis = []
        for i, ei in enumerate(eis if cap is None else eis[: max(cap * 4, 12)]):
            results.append(check_error(op, ei, i))
    return results


def op_db():
    from torch.testing._internal.common_methods_invocations import op_db as db
    return db
