"""The CUDA back end without a GPU: code generation (inductor/cuda/codegen.c,
attention.c), NVRTC (kernels/nvrtc.c), the launch shapes and steps a plan
would run (inductor/cuda/runtime.c), what is refused, and how a machine
without a driver behaves. In the main test run every graph the op tables
compile is also turned into CUDA C and compiled by NVRTC for sm_90 or
sm_80 in turn (conftest's compile_graph), so a code generation error fails
those tables; tests/test_cuda_emulated.py runs generated kernels on the CPU.
Launching on a GPU (kernels/cudadrv.c) is tested on a GPU machine only:
tests_gpu/ through scripts/gpu-check.sh.
"""
import os
import subprocess
import sys

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


def test_without_a_driver_cuda_is_not_available():
    ok, why = C.backend_available("cuda")
    assert not ok and "libcuda" in why, why
    g = softmax_graph()
    with pytest.raises(RuntimeError, match="backend cuda: not available here"):   # no CPU plan serves device memory
        g.compile(backend="cuda")
    with pytest.raises(ValueError, match="sm_90"):
        g.compile(cuda_arch="ampere")


def test_smelt_backend_does_not_choose_cuda_for_cpu_tensors():
    """A device-memory back end is chosen by where the tensors are, never by
    SMELT_BACKEND (its plans read device pointers)."""
    code = ("import smelt, smelt._C as C, torch, warnings\n"
            "g = C.Graph(); x = g.input(torch.float32, (5,)); g.output(g.op('exp', x))\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always'); f = g.compile()\n"
            "print(f.backend); print([str(m.message) for m in w])\n")
    env = dict(os.environ, SMELT_BACKEND="cuda", SMELT_DISABLE_CACHE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "cpu"
    assert "not chosen by SMELT_BACKEND" in out.stdout


def launch_lines(f):
    return [ln.split() for ln in f.code("launch").splitlines() if ln.startswith("step")]


def test_launch_shapes():
    f = softmax_graph().compile(cuda_arch="sm_90")
    steps = launch_lines(f)
    assert steps and all(s[2] == "kernel" for s in steps)
    blocks = {int(s[s.index("block") + 1]) for s in steps}
    grids = {int(s[s.index("grid") + 1]) for s in steps}
    assert blocks <= {128, 256} and 7 in grids   # a block per row of 3000: 128 threads
    g = C.Graph()
    x = g.input(torch.float32, (1000, 3))
    g.output(g.op("add", x, x))
    (s,) = launch_lines(g.compile(cuda_arch="sm_80"))
    assert s[s.index("grid") + 1] == "12" and s[s.index("block") + 1] == "256"   # 3000 points, 256 a block
    g = C.Graph()
    x = g.input(torch.float32, (1 << 20,))
    g.output(g.op("sum", x, dims=[0]))
    (s,) = launch_lines(g.compile(cuda_arch="sm_80"))
    assert "finish" in s and int(s[s.index("scratch") + 1]) >= 4 * int(s[s.index("grid") + 1])


def test_matmul_runs_through_cublas():
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        g = C.Graph()
        a, b = g.input(dt, (3, 5, 7)), g.input(dt, (7, 4))
        g.output(g.op("relu", g.op("matmul", a, b)))
        f = g.compile(cuda_arch="sm_90")
        kinds = [s[2] for s in launch_lines(f)]
        assert kinds == ["matmul", "kernel"], f.code("launch")
        mm = [s for s in launch_lines(f) if s[2] == "matmul"][0]
        assert "cublas" in mm and any(w.startswith("gemm") for w in mm), mm
    g = C.Graph()   # transposed operand: a leading dimension, no copy
    a = g.input(torch.float32, (6, 5), strides=(1, 6))
    b = g.input(torch.float32, (5, 4))
    g.output(g.op("matmul", a, b))
    mm = launch_lines(g.compile(cuda_arch="sm_90"))[0]
    assert "transb=T" in mm or "transb=t" in " ".join(mm).lower(), mm


def test_steps_without_cuda_code_are_refused():
    """A convolution has no CUDA kernel yet: the graph is not compiled for
    CUDA (a compiled frame on CUDA runs eagerly, the reason logged)."""
    g = C.Graph()
    x, w = g.input(torch.float32, (1, 3, 9, 9)), g.input(torch.float32, (4, 3, 3, 3))
    g.output(g.op("conv", x, w, padding=1))
    with pytest.raises(RuntimeError, match="backend cuda: step 0: convolutions"):
        g.compile(cuda_arch="sm_90")


def sdpa_graph(dt, causal=False, mask=None):
    g = C.Graph()
    q, k, v = (g.input(dt, (2, 3, 17, 64)) for _ in range(3))
    ins = [q, k, v] + ([g.input(mask, (1, 3, 17, 17))] if mask is not None else [])
    g.output(g.op("sdpa", *ins, scale=0.125, causal=causal))
    return g


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16, torch.float32])
def test_attention_kernels_compile(dt):
    for causal, mask in ((False, None), (True, None), (False, torch.bool), (False, dt)):
        f = sdpa_graph(dt, causal, mask).compile(cuda_arch="sm_90" if causal else "sm_80")
        (s,) = launch_lines(f)
        assert s[2] == "attention" and any(w.startswith("s0_") for w in s), s
        assert ".entry s0_" in f.code("asm")


def test_identical_attention_steps_share_their_kernels():
    """A model's layers repeat one attention: compiled once, launched per step."""
    g = C.Graph()
    q, k, v = (g.input(torch.float16, (2, 4, 33, 64)) for _ in range(3))
    o1 = g.op("sdpa", q, k, v, scale=0.125, causal=True)
    o2 = g.op("sdpa", o1, k, v, scale=0.125, causal=True)
    o3 = g.op("sdpa", q, k, v, scale=0.25, causal=True)   # another scale: kernels of its own
    g.output(o2, o3)
    f = g.compile(cuda_arch="sm_90")
    entries = [[w for w in s if w.startswith("s") and w[1:2].isdigit()][0] for s in launch_lines(f)]
    assert entries == ["s0_fwd", "s0_fwd", "s2_fwd"], f.code("launch")
    assert ".entry s0_fwd" in f.code("asm") and ".entry s1_fwd" not in f.code("asm")


@pytest.mark.parametrize("dt", [torch.float16, torch.bfloat16])
def test_half_attention_graph_also_runs_on_the_cpu(dt):
    """The CPU's attention kernel reads half-precision q, k, v too (tiles
    converted as packed, the output rounded once)."""
    q, k, v = (rand((2, 3, 17, 64), dt) for _ in range(3))
    (got,) = sdpa_graph(dt).compile()(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), scale=0.125)
    eager = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.125)
    assert got.dtype == dt
    assert (got.double() - ref).abs().max() <= 1.1 * (eager.double() - ref).abs().max() + 1e-3


def test_a_cuda_tensor_made_in_traced_code_runs_as_eager_does():
    """Here torch has no CUDA: the graph breaks and eager's own exception
    reaches the caller."""
    import smelt

    def f(x):
        return x + torch.ones(3, device="cuda")

    x = rand((3,), torch.float32)
    with pytest.raises(Exception) as eager:
        f(x)
    with pytest.raises(type(eager.value)):
        smelt.compile(f)(x)


def test_device_attributes_in_a_cpu_graph():
    import smelt

    def f(x):
        y = x * 2
        return y + 1 if (y.device.type == "cpu" and not y.is_cuda and y.is_cpu) else y - 1

    x = rand((4,), torch.float32)
    assert torch.equal(smelt.compile(f)(x), f(x))
