"""Reductions on CUDA against eager and a float64 reference: short rows,
long rows (over 4096, split across blocks), columns, middle dims, full
sums of 1 << 24 elements, softmax, layer_norm, an RMS norm, argmax with
ties, in float32, float16 and bfloat16."""
import pytest
import torch
import torch.nn.functional as F

from gpu_helpers import F32, FLOATS, check, rand, randint, transposed

ROWS = [(1, 1), (3, 7), (257, 31), (64, 1000), (5, 4097), (3, 10007), (2, 65537)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape", ROWS, ids=str)
def test_row_reductions(shape, dtype):
    def f(x):
        return x.sum(-1), x.mean(-1, keepdim=True), x.amax(-1), x.amin(-1), (x * x).sum(-1)
    check(f, rand(*shape, dtype=dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_column_and_middle_reductions(dtype):
    def f(x):
        return x.sum(0), x.amax(1), x.mean((0, 2)), x.sum((1, 2))
    check(f, rand(129, 67, 33, dtype=dtype))
    check(f, rand(4099, 3, 5, dtype=dtype))
    check(lambda x: x.sum(0), transposed(rand(1000, 300, dtype=dtype)))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_full_sum_of_16m_elements(dtype):
    x = rand(1 << 24, dtype=dtype, shift=0.25)
    check(lambda x: (x.sum(), x.abs().amax(), x.mean()), x)


def test_statistics():
    def f(x):
        return (x.var(-1), x.std(0, correction=0), torch.logsumexp(x, -1), x.norm(dim=-1), x[:, :24].prod(-1),
                torch.var_mean(x, dim=1))
    check(f, rand(97, 4099, scale=0.3, shift=1.0))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (128, 1000), (33, 4097), (4, 16411)], ids=str)
def test_softmax(shape, dtype):
    def f(x):
        return torch.softmax(x, -1), F.log_softmax(x, dim=-1), torch.softmax(x, 0)
    check(f, rand(*shape, dtype=dtype, scale=3.0))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape", [(1, 7), (33, 64), (1000, 768), (7, 4099)], ids=str)
def test_layer_norm(shape, dtype):
    d = shape[-1]

    def f(x, w, b):
        return F.layer_norm(x, (d,), w, b, 1e-5), F.layer_norm(x, (d,))
    check(f, rand(*shape, dtype=dtype, scale=2.0, shift=0.5), rand(d, dtype=dtype, shift=1.0), rand(d, dtype=dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_rms_norm(dtype):
    def by_hand(x, w):
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    def builtin(x, w):
        return F.rms_norm(x, (1536,), w, 1e-6)
    x, w = rand(2, 17, 1536, dtype=dtype), rand(1536, dtype=dtype, shift=1.0)
    check(by_hand, x, w)
    check(builtin, x, w)


@pytest.mark.parametrize("dtype", FLOATS + (torch.int32, torch.int64), ids=str)
def test_argmax_argmin(dtype):
    def f(x):
        return x.argmax(-1), x.argmin(0), x.argmax(), torch.max(x, dim=1)
    if dtype.is_floating_point:
        x = rand(301, 4099, dtype=dtype)
    else:   # ties everywhere: the first index wins, as in eager
        x = randint(0, 4, 301, 4099, dtype=dtype)
    check(f, x)


def test_softmax_cross_entropy_head():
    def f(logits, target):
        return F.cross_entropy(logits, target), F.cross_entropy(logits, target, reduction="none")
    check(f, rand(77, 50257, dtype=F32, scale=2.0), randint(0, 50257, 77))


def test_reduction_over_a_non_contiguous_view():
    x = rand(64, 2, 3000)
    check(lambda t: torch.softmax(t, -1).sum(0), x[:, 1, ::3])
