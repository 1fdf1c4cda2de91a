"""PyTorch's OpInfo database over symbolic sizes: each entry's first two
float32 samples, compiled with dynamic=True (every size a symbol) and
called with the sample, then with every tensor's sizes >= 2 grown (by 3,
then by 8: equal sizes stay equal, 1 stays 1) and fresh random values.
The grown calls must match eager on the same inputs (values, dtype,
shape, strides, aliasing) or raise what eager raises: a symbolic entry
must never serve a size its graph does not hold for (a shape computed
from a size as a number, a constant that only equalled a size)."""
import itertools
import warnings

import pytest
import torch

import opinfo_lib as L
import smelt

OPS = [o for o in L.op_db() if torch.float32 in o.supported_dtypes("cpu")]


def _grown(t, k):
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.dim() == 0:
        return t
    shape = [s + k if s >= 2 else s for s in t.shape]
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return torch.randn(shape, dtype=t.dtype)
    if t.dtype == torch.bool:
        return torch.rand(shape) > 0.5
    lo, hi = (int(t.min()), int(t.max()) + 1) if t.numel() else (0, 2)
    return torch.randint(lo, max(hi, lo + 1), shape, dtype=t.dtype)


def difference(where, src, e, e_err, s, s_err, e_in, s_in, values, strides=True):
    """What differs between eager's call (result e or exception e_err, on
    inputs e_in) and smelt's (s, s_err, s_in), or None."""
    if e_err is not None:
        if s_err is None or not isinstance(s_err, type(e_err)):
            return f"{where}: eager raises {e_err!r}, smelt {s_err!r}\n{src}"
        return None
    if s_err is not None:
        return f"{where}: raises {s_err!r}\n{src}"
    why = L.compare(e, s, e_in, s_in, values=values, strides=strides)
    return f"{where}: {why}\n{src}" if why else None


def _run(op, dtype=torch.float32, cap=2):
    bad = []
    for i, sample in enumerate(itertools.islice(L.samples(op, dtype, False), cap)):
        try:
            f, tensors, src = L.render(op.op, sample, name="f")
        except Exception:  # noqa: BLE001 - what cannot be rendered is not run
            continue
        tensors = [t.detach() if isinstance(t, torch.Tensor) else t for t in tensors]
        if L._call(f, L.exact_copies(tensors), 1)[1] is not None:
            continue
        cf = smelt.compile(f, dynamic=True)
        L._call(cf, L.exact_copies(tensors), 1)
        values = not (L.RANDOM.search(op.name) or L.UNINIT.match(op.name))
        for k in (3, 8):
            grown = [_grown(t, k) for t in tensors]
            e_in, s_in = L.exact_copies(grown), L.exact_copies(grown)
            e, e_err = L._call(f, e_in, 1)
            s, s_err = L._call(cf, s_in, 1)
            why = difference(f"sample {i} +{k}", src, e, e_err, s, s_err, e_in, s_in, values)
            if why:
                bad.append(why)
    return bad


@pytest.mark.parametrize("op", OPS, ids=[o.full_name if hasattr(o, "full_name") else o.name for o in OPS])
def test_opinfo_over_symbolic_sizes(op):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bad = _run(op)
    assert not bad, "\n".join(bad)
