"""The CUDA back end's code generation (inductor/cuda/codegen.c) and NVRTC
(kernels/nvrtc.c), which need no GPU. In the main test run every graph the
op tables (pointwise, reduction, views, gather) compile is also turned
into CUDA C and compiled by NVRTC for sm_90 or sm_80 in turn (conftest's
compile_graph), so a code generation error fails those tables; here: that
NVRTC is there to do it, and what the code looks like.
Launching on a GPU is not built yet: the back end reports itself
unavailable and `Graph.compile(backend="cuda")` compiles for the CPU.
"""
import os

import pytest
import torch

import smelt  # noqa: F401  (finds NVRTC from PyPI: SMELT_NVRTC)
import smelt._C as C
from conftest import rand


def test_the_op_tables_are_compiled_by_nvrtc():
    from conftest import TEST_CUDA_ARCHS
    assert C.nvrtc_version(), "NVRTC not found: scripts/setup.sh installs nvidia-cuda-nvrtc"
    if "SMELT_TEST_CUDA_ARCHS" not in os.environ:
        assert TEST_CUDA_ARCHS == ["sm_90", "sm_80"]


def softmax_graph():
    g = C.Graph()
    x = g.input(torch.float16, (7, 3000))
    e = g.op("exp", g.op("sub", x, g.op("amax", x, dims=[1], keepdim=True)))
    g.output(g.op("div", e, g.op("sum", e, dims=[1], keepdim=True)), g.op("argmax", x, dims=[1]))
    return g


def test_code_is_cuda_c_and_ptx():
    f = softmax_graph().compile(cuda_arch="sm_90")
    assert f.backend == "cuda"
    src, ptx = f.code("ir"), f.code("asm")
    assert 'extern "C" __global__ void k0(' in src and "__syncthreads();" in src and "__shared__" in src
    assert ".target sm_90" in ptx and ".entry k0" in ptx
    with pytest.raises(RuntimeError):   # read, never run
        f(rand((7, 3000), torch.float16))


def test_split_reduction_has_a_finish_kernel():
    g = C.Graph()
    x = g.input(torch.float32, (1 << 20,))
    g.output(g.op("sum", x, dims=[0]))
    f = g.compile(cuda_arch="sm_80")
    assert 'void k0(' in f.code("ir") and 'void f0(' in f.code("ir") and ".entry f0" in f.code("asm")


def test_cuda_is_not_available_yet():
    ok, why = C.backend_available("cuda")
    assert not ok and "not built yet" in why
    g = softmax_graph()
    with pytest.warns(RuntimeWarning, match="backend cuda not available"):
        f = g.compile(backend="cuda")
    assert f.backend == "cpu"
    with pytest.raises(ValueError, match="sm_90"):
        g.compile(cuda_arch="ampere")
