"""Tensor.numpy() and numpy interop (from_numpy, numpy arrays as inputs
and outputs, numpy scalars), and sparse tensors as inputs (COO, CSR)."""
import numpy as np
import torch

from ..base import Fn, T, prog

C = "numpy_sparse"


def arr(*shape):
    return Fn(lambda g: torch.randn(*shape, generator=g).numpy(), f"ndarray{shape}")


def coo(*shape):
    def make(g):
        d = torch.randn(*shape, generator=g)
        d[d.abs() < 0.7] = 0
        return d.to_sparse()
    return Fn(make, f"coo{shape}")


def csr(*shape):
    def make(g):
        d = torch.randn(*shape, generator=g)
        d[d.abs() < 0.7] = 0
        return d.to_sparse_csr()
    return Fn(make, f"csr{shape}")


@prog(C, inputs=(T(3, 4),))
def tensor_numpy_returned(x):
    return (x * 2).numpy()


@prog(C, inputs=(T(3, 4),))
def numpy_math_then_back(x):
    a = x.numpy()
    return torch.from_numpy(np.tanh(a)) + x


@prog(C, inputs=(arr(3, 4),))
def ndarray_input(a):
    t = torch.from_numpy(a)
    return t * 2


@prog(C, inputs=(T(3, 4),))
def numpy_scalar_mixed(x):
    return x * np.float32(2.0) + np.int64(3), np.pi * x


@prog(C, inputs=(T(3, 4),))
def numpy_shares_memory(x):
    a = x.numpy()
    a[0, 0] = 100.0
    return x


@prog(C, inputs=(T(3, 4),))
def tensor_from_numpy_constant(x):
    return x + torch.tensor(np.arange(4, dtype=np.float32))


@prog(C, inputs=(coo(4, 5), T(5, 3)))
def sparse_coo_matmul(s, d):
    return torch.sparse.mm(s, d)


@prog(C, inputs=(coo(4, 5),))
def sparse_to_dense(s):
    return s.to_dense() * 2


@prog(C, inputs=(coo(4, 5),))
def sparse_elementwise(s):
    return (s * 3).coalesce()


@prog(C, inputs=(csr(4, 5), T(5, 2)))
def sparse_csr_matmul(s, d):
    return s @ d


@prog(C, inputs=(coo(4, 5),))
def sparse_properties(s):
    return s.is_sparse, s.shape, s._nnz() >= 0, s.coalesce().values().sum()
