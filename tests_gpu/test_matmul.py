"""Matmuls on CUDA (cuBLAS) against eager: float32 with TF32 off (the
conftest turns it off for eager; smelt's cuBLAS calls never use it),
float16 and bfloat16 (smelt's error at most twice eager's against a
float64 product, plus the dtype's floor), odd and tiny sizes, transposed
operands, batched and broadcast batches, linear layers with fused
epilogues, vectors."""
import pytest
import torch
import torch.nn.functional as F

import smelt
from gpu_helpers import FLOATS, assert_close, assert_compiled, check, rand, transposed

SHAPES = [(1, 1, 1), (7, 13, 5), (127, 257, 65), (512, 1024, 768), (1, 4096, 1000), (2053, 31, 3)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("mkn", SHAPES, ids=str)
def test_matmul(mkn, dtype):
    m, k, n = mkn
    a, b = rand(m, k, dtype=dtype), rand(k, n, dtype=dtype)
    check(torch.matmul, a, b)
    check(lambda a, b: (a @ b).relu() * 2, transposed(a), transposed(b))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_batched_and_broadcast(dtype):
    check(torch.bmm, rand(6, 33, 70, dtype=dtype), rand(6, 70, 17, dtype=dtype))
    check(torch.matmul, rand(3, 4, 65, 40, dtype=dtype), rand(40, 129, dtype=dtype))     # weight broadcast
    check(torch.matmul, rand(1, 65, 40, dtype=dtype), rand(5, 40, 9, dtype=dtype))       # batch 1 broadcast
    check(torch.matmul, rand(2, 1, 65, 40, dtype=dtype), rand(1, 3, 40, 9, dtype=dtype))
    check(torch.matmul, rand(5, 65, 40, dtype=dtype).transpose(1, 2), rand(5, 65, 9, dtype=dtype))
    check(torch.matmul, rand(300, dtype=dtype), rand(300, 77, dtype=dtype))              # vector @ matrix
    check(torch.matmul, rand(4, 77, 300, dtype=dtype), rand(300, dtype=dtype))           # matrix @ vector


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_linear_with_epilogue(dtype):
    def mlp(x, w1, b1, w2):
        return F.linear(F.gelu(F.linear(x, w1, b1)), w2) + x
    check(mlp, rand(4, 129, 768, dtype=dtype), rand(1024, 768, dtype=dtype, scale=0.03), rand(1024, dtype=dtype),
          rand(768, 1024, dtype=dtype, scale=0.03))


def test_float32_is_not_tf32():
    # a product whose TF32 rounding (10-bit mantissa) would be ~1e-3 off
    a, b = rand(256, 4096), rand(4096, 256)
    out, _ = check(torch.mm, a, b)
    ref = a.double() @ b.double()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-5


def test_matmul_backward():
    def f(x, w):
        return (torch.tanh(x @ w) * w.sum(0)).sum()
    x, w = rand(65, 300).requires_grad_(), rand(300, 33).requires_grad_()
    xs, ws = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    cf = smelt.compile(f)
    cf(xs, ws).backward()
    f(x, w).backward()
    f(x64, w64).backward()
    assert_close(xs.grad, x.grad, x64.grad, what="x.grad")
    assert_close(ws.grad, w.grad, w64.grad, what="w.grad")
    assert_compiled(cf)
