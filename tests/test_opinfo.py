"""PyTorch's OpInfo database through smelt (tests/opinfo_lib.py says how a
sample is run and compared): every entry's first samples in float32,
float64, int64, int32, uint8, bool, float16, bfloat16 and complex64; the
function, method and in-place variants and out=; its error_inputs. Every
sample must match eager (values, dtype, shape, strides, aliasing, inputs
after the call) or raise what eager raises: an op smelt cannot do right
runs eagerly. `make opinfo` runs every sample and the reference inputs."""
import pytest
import torch

import opinfo_lib as L

OPS = L.op_db()


def _name(op):
    return op.full_name if hasattr(op, "full_name") else op.name


@pytest.mark.parametrize("op", OPS, ids=[_name(o) for o in OPS])
def test_opinfo(op):
    bad = [r for r in L.run_op(op, cap=2) if r.status in ("wrong", "crash", "error-missing", "raises")]
    assert not bad, "\n".join(f"{r.status}: {r.dtype} {r.variant} sample {r.sample}: {r.detail}" for r in bad)


def test_the_harness_sees_a_wrong_answer():
    """compare() catches each kind of difference the suite relies on."""
    x = torch.arange(6.0).reshape(2, 3)
    assert L.compare(x, x.clone(), [], []) is None
    assert "values" in L.compare(x, x + 1, [], [])
    assert "dtype" in L.compare(x, x.double(), [], [])
    assert "strides" in L.compare(x.t(), x.t().contiguous(), [], [])
    assert "aliases" in L.compare(x.view(6), x.clone().view(6), [x], [x.clone()])
    e, s = L.exact_copies([x[:, 1:]]), L.exact_copies([x[:, 1:]])
    assert e[0].storage_offset() == 1 and e[0].stride() == (3, 1)
    assert e[0].untyped_storage().data_ptr() != s[0].untyped_storage().data_ptr()
