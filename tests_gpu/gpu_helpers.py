"""What the GPU tests share: inputs, the comparison with eager CUDA and a
float64 reference, and the check that a call really ran as CUDA code.

The comparison (check): the compiled function and eager run on the same
inputs; a float64 reference runs the eager function on the inputs upcast.
For a floating output, smelt's relative error against the reference
(||out - ref|| / ||ref||) must be at most `factor` times eager's plus a
floor per dtype (METHOD.md's ranges: float32 far under 1e-3, bf16 between
1e-3 and 1e-2): smelt may round differently from eager (it fuses, so it
usually rounds less), never worse by much. NaN and inf must sit where
eager's are. Other outputs must equal eager's exactly. Before the compiled
call, the caching allocator's free blocks are filled with 0xFF bytes (NaN
in every float format), so an output element smelt does not write shows.
"""
import json
import os
import subprocess
import sys

import torch

import smelt

# SMELT_GPU_TESTS_DEVICE=cpu: a dry run of the suite on the CPU, to check
# the tests themselves on a machine without a GPU (conftest then skips the
# tests marked cuda_only instead of failing everything).
DEV = torch.device(os.environ.get("SMELT_GPU_TESTS_DEVICE", "cuda"))
F32, F16, BF16, F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
FLOATS = (F32, F16, BF16)
FLOOR = {F32: 2e-6, F16: 1e-3, BF16: 8e-3, F64: 1e-12}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_gen = []


def generator():
    """The suite's random generator on DEV (made at first use: importing
    this module needs no GPU, so conftest can say why none is there)."""
    if not _gen:
        _gen.append(torch.Generator(device=DEV))
        _gen[0].manual_seed(1234)
    return _gen[0]


def rand(*shape, dtype=F32, scale=1.0, shift=0.0):
    """Normal random values (never zeros: a test on zeros hides unwritten
    outputs), drawn in float32 and rounded to dtype."""
    return (torch.randn(shape, device=DEV, generator=generator()) * scale + shift).to(dtype)


def randint(low, high, *shape, dtype=torch.int64):
    return torch.randint(low, high, shape, device=DEV, generator=generator(), dtype=dtype)


def transposed(x):
    """x's values in a column-major layout (the last two dims swapped in
    memory): same shape, not contiguous."""
    return x.transpose(-1, -2).contiguous().transpose(-1, -2)


def strided(x):
    """x's values, every other element of a twice-wider last dim."""
    y = torch.empty(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype, device=x.device)
    y[..., ::2] = x
    y[..., 1::2] = torch.nan if x.is_floating_point() else 7
    return y[..., ::2]


def poison(nbytes):
    """Leaves the allocator's free memory (a block of nbytes and smaller
    ones) full of 0xFF bytes, for the next allocations to get."""
    for n in sorted({max(int(nbytes), 512), 1 << 20, 2 << 20}):
        t = torch.empty(n, dtype=torch.uint8, device=DEV)
        t.fill_(255)
        del t


def tensors(obj):
    """The tensors in obj (a tensor, or nested tuples/lists/dicts), in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in tensors(o)]
    if hasattr(obj, "to_tuple"):   # transformers' ModelOutput
        return tensors(obj.to_tuple())
    return []


def upcast(obj):
    """obj with every floating tensor in float64 (the reference's inputs)."""
    if isinstance(obj, torch.Tensor):
        return obj.double() if obj.is_floating_point() else obj
    if isinstance(obj, (tuple, list)):
        return type(obj)(upcast(o) for o in obj)
    return obj


def clone(obj):
    """A copy of obj's tensors with the same strides (a broadcast view, with
    a stride 0, is not copied: the functions tested do not write it)."""
    if isinstance(obj, torch.Tensor):
        if 0 in obj.stride():
            return obj
        t = torch.empty_strided(obj.shape, obj.stride(), dtype=obj.dtype, device=obj.device)
        return t.copy_(obj.detach()).requires_grad_(obj.requires_grad)
    if isinstance(obj, (tuple, list)):
        return type(obj)(clone(o) for o in obj)
    return obj


def rel_err(out, ref):
    """||out - ref|| / ||ref|| in float64 over the finite elements of ref."""
    out, ref = out.double(), ref.double()
    ok = torch.isfinite(ref)
    d, r = (out - ref)[ok], ref[ok]
    if d.numel() == 0:
        return 0.0
    nr = r.norm().item()
    return d.norm().item() / nr if nr else d.norm().item()


def assert_close(out, eager, ref, factor=2.0, floor=None, what="output"):
    """out (smelt's) against eager's and the float64 reference (see the
    module docstring)."""
    assert out.device == eager.device, f"{what}: device {out.device}, eager {eager.device}"
    assert out.dtype == eager.dtype and out.shape == eager.shape, \
        f"{what}: {out.dtype}{tuple(out.shape)}, eager {eager.dtype}{tuple(eager.shape)}"
    if not out.is_floating_point() and not out.is_complex():
        assert torch.equal(out, eager), f"{what}: differs from eager at {(out != eager).nonzero()[:5].tolist()}"
        return
    for name, test in (("NaN", torch.isnan), ("inf", torch.isinf)):
        bad = test(out) != test(eager)
        assert not bad.any(), f"{what}: {name} not where eager's are, at {bad.nonzero()[:5].tolist()}"
    if ref is None:
        ref = eager
    fl = FLOOR.get(out.dtype, 1e-6) if floor is None else floor
    es, ee = rel_err(out, ref), rel_err(eager, ref)
    assert es <= factor * ee + fl, f"{what} ({out.dtype}): relative error {es:.3g} vs float64, eager's {ee:.3g}"


def stats(compiled):
    return compiled._smelt.stats()


def assert_compiled(compiled):
    """Every call of `compiled` ran as compiled graphs (on CUDA, when its
    tensors were there: a CPU plan cannot take CUDA tensors, and a graph
    the CUDA back end refuses is an eager entry with the reason)."""
    st = stats(compiled)
    assert st["graphs"] >= 1 and st["eager_entries"] == 0 and st["breaks"] == 0, \
        f"not compiled: {st['eager_entries']} eager entries, {st['breaks']} breaks, last: {st['last_break']}"


def check(fn, *args, factor=2.0, floor=None, compiled=True, compiled_fn=None, reference=True, **compile_kw):
    """Runs fn eagerly, in float64 (unless reference=False: fn holds
    float32 parameters, say) and through smelt on args; compares every
    output (assert_close). Returns (smelt's outputs, eager's)."""
    cf = compiled_fn or smelt.compile(fn, **compile_kw)
    eager = fn(*clone(args))
    floats = any(t.is_floating_point() for t in tensors(args))
    ref = fn(*upcast(clone(args))) if reference and floats else None
    poison(sum(t.numel() * t.element_size() for t in tensors(eager)))
    out = cf(*clone(args))
    outs, eags = tensors(out), tensors(eager)
    refs = tensors(ref) if ref is not None else [None] * len(eags)
    assert len(outs) == len(eags), f"{len(outs)} outputs, eager {len(eags)}"
    for k, (o, e, r) in enumerate(zip(outs, eags, refs)):
        assert_close(o, e, r if r is not None and e.is_floating_point() else None, factor, floor, f"output {k}")
    if compiled:
        assert_compiled(cf)
    return out, eager


def run_python(code, env=None, timeout=240):
    """Runs code in a fresh interpreter with the in-tree package first on
    the path; returns the CompletedProcess (text)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=timeout)


def last_json(text):
    """The last line of text that is a JSON object, parsed."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError("no JSON line in the output:\n" + text[-3000:])
