"""The SPIR-V back end (inductor/spirv/) and the backend interface
(inductor/backend.h).

Its kernels run here through Intel's OpenCL CPU runtime (scripts/setup.sh
installs it and writes the ICD file tests/conftest.py points
OCL_ICD_VENDORS at); on an Intel GPU, Level Zero launches the same
modules. Every module these tests build is checked by spirv-val
(SMELT_SPIRV_VALIDATE=1: an invalid module fails its compile).

- The op tables (pointwise, reduction, view, gather) run again in a
  subprocess with SMELT_BACKEND=spirv; conftest's SMELT_TEST_BACKEND check
  makes every graph prove it ran on the SPIR-V back end. The reduction
  table runs a second time with every reduction a work-group per row
  (SMELT_SPIRV_GROUP_MIN=1: local memory and barriers).
- Models (MLP, CNN, GPT-2, BERT from small configs) and a training step
  through smelt.compile(options={"backend": "spirv"}).
- Fallbacks: no OpenCL device, Level Zero without a driver (this
  machine): the CPU back end, the reason warned once, right answers.
- The disk cache keeps SPIR-V modules; output_code shows the disassembly.
"""
import copy
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import smelt
import smelt._C as C
from conftest import REPO, rand

OP_TABLES = ["tests/test_ops_pointwise.py", "tests/test_ops_reduction.py", "tests/test_ops_views.py",
             "tests/test_gather.py"]


@pytest.fixture(autouse=True)
def validate(monkeypatch):
    monkeypatch.setenv("SMELT_SPIRV_VALIDATE", "1")


def test_spirv_is_available_here():
    ok, why = C.backend_available("spirv")
    assert ok, f"the SPIR-V back end has no launcher ({why}): run scripts/setup.sh"
    assert C.backend_available("cpu") == (True, "")
    with pytest.raises(ValueError, match="known: cpu, spirv"):
        C.backend_available("cuda2")


def run_tables(paths, timeout=900, **env):
    e = dict(os.environ, SMELT_BACKEND="spirv", SMELT_TEST_BACKEND="spirv", SMELT_SPIRV_VALIDATE="1", **env)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", "-p", "no:cacheprovider",
                        *paths], capture_output=True, text=True, env=e, timeout=timeout, cwd=REPO)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    return r.stdout


def test_op_tables_on_spirv():
    out = run_tables(OP_TABLES)
    assert " passed" in out and "failed" not in out


def test_reductions_as_work_groups():
    """(conftest's target subset of dtypes: float32, float16, int64, bool)"""
    out = run_tables(["tests/test_ops_reduction.py"], SMELT_SPIRV_GROUP_MIN="1", SMELT_TEST_TARGET_SUBSET="1")
    assert " passed" in out


def compiled_spirv(m):
    return smelt.compile(m, options={"backend": "spirv"})


def check_on_spirv(m, *args, atol=1e-5, rtol=1e-4):
    """m compiled for the SPIR-V back end gives eager's outputs, with no
    graph break and no fallback to the CPU."""
    c = compiled_spirv(m)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # a fallback warns
        with torch.no_grad():
            got, ref = c(*args), m(*args)
    for name in ("logits", "last_hidden_state"):
        if hasattr(ref, name):
            got, ref = getattr(got, name), getattr(ref, name)
    torch.testing.assert_close(got, ref, atol=atol, rtol=rtol)
    s = c._smelt.stats()
    assert s["compiles"] >= 1 and s["breaks"] == 0, s
    return c


def test_models_on_spirv():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(37, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                              torch.nn.Linear(64, 10), torch.nn.Softmax(-1))
    check_on_spirv(mlp, torch.randn(13, 37))
    cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 5)).eval()
    check_on_spirv(cnn, torch.randn(2, 3, 17, 17))


def test_transformers_on_spirv():
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    gpt = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=300, n_positions=64,
                                     bos_token_id=0, eos_token_id=0)).eval()
    check_on_spirv(gpt, torch.randint(0, 300, (2, 19)))
    bert = BertModel(BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                vocab_size=300)).eval()
    check_on_spirv(bert, torch.randint(0, 300, (2, 19)))


def test_training_step_on_spirv():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Tanh(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 3))
    m2 = copy.deepcopy(m)
    c = compiled_spirv(m2)
    x, y = torch.randn(16, 20), torch.randint(0, 3, (16,))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for _ in range(2):
            torch.nn.functional.cross_entropy(m(x), y).backward()
            torch.nn.functional.cross_entropy(c(x), y).backward()
    for a, b in zip(m.parameters(), m2.parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4)


def test_kernel_errors_on_spirv():
    g = C.Graph()
    a, b = g.input(torch.int32, (7,)), g.input(torch.int32, (7,))
    g.output(g.op("floordiv", a, b))
    f = g.compile(backend="spirv")
    assert f.backend == "spirv"
    x = torch.arange(-3, 4, dtype=torch.int32)
    assert torch.equal(f(x * 5, torch.full((7,), 2, dtype=torch.int32))[0], torch.div(x * 5, 2, rounding_mode="floor"))
    with pytest.raises(RuntimeError, match="integer division by zero"):   # (as the CPU back end's plans)
        f(x, x)
    cf = smelt.compile(lambda t, i: t[i] * 2, options={"backend": "spirv"})
    t = torch.randn(5)
    torch.testing.assert_close(cf(t, torch.tensor([4, -5, 0])), t[torch.tensor([4, -5, 0])] * 2)
    with pytest.raises(IndexError):   # eager's exception
        cf(t, torch.tensor([1, 5]))


def test_output_code_is_the_disassembly():
    g = C.Graph()
    x = g.input(torch.float16, (5, 33))
    g.output(g.op("sum", g.op("exp", x), dims=[1]))
    f = g.compile(backend="spirv", keep_code=True)
    assert f.backend == "spirv"
    ir = f.code("ir")
    for what in ("OpEntryPoint Kernel", "OpenCL.std", "exp", "vload_half", "OpCapability Float16Buffer"):
        assert what in ir, what
    t = rand((5, 33), torch.float16)
    torch.testing.assert_close(f(t)[0], t.exp().sum(1), atol=1e-2, rtol=1e-3)
    # the CPU's code for the same graph is LLVM IR
    assert "define" in g.compile(keep_code=True).code("ir")


def test_debug_dir_has_the_disassembly(tmp_path, monkeypatch):
    monkeypatch.setenv("SMELT_DEBUG_DIR", str(tmp_path))
    f = smelt.compile(lambda x: torch.tanh(x) * 2, options={"backend": "spirv"})
    x = torch.randn(9)
    torch.testing.assert_close(f(x), torch.tanh(x) * 2)
    (folder,) = list(tmp_path.iterdir())
    text = (folder / "code.spvasm").read_text()
    assert "OpEntryPoint Kernel" in text and "tanh" in text
    assert "backend spirv" in (folder / "timings.txt").read_text()
    assert not (folder / "code.ll").exists()


def test_each_step_records_its_back_end():
    """Kernel steps run on the plan's back end, a matmul on the CPU's
    kernels/ (the profile names each step's)."""
    g = C.Graph()
    x, w = g.input(torch.float32, (8, 16)), g.input(torch.float32, (16, 4))
    g.output(g.op("exp", g.op("matmul", g.op("tanh", x), w)))
    for backend in ("spirv", "cpu"):
        f = g.compile(backend=backend)
        a, b = torch.randn(8, 16), torch.randn(16, 4)
        C.set_profiling(True)
        try:
            torch.testing.assert_close(f(a, b)[0], (a.tanh() @ b).exp())
        finally:
            C.set_profiling(False)
        lines = f.profile().splitlines()[1:]
        kernels = [ln for ln in lines if " kernel " in ln]
        assert len(kernels) == 2 and all(ln.endswith("] " + backend) for ln in kernels), lines
        assert sum("matmul" in ln for ln in lines) == 1


def test_bad_backend_names():
    with pytest.raises(ValueError, match="'cpu', 'spirv' or 'cuda'"):
        C.Graph().compile(backend="vulkan")
    with pytest.raises(ValueError):
        smelt.compile(lambda x: x + 1, options={"backend": "vulkan"})


def run_py(code, **env):
    e = dict(os.environ)
    e.pop("SMELT_BACKEND", None)
    e.update(env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e,
                       timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


FALLBACK = '''
    import warnings, torch, smelt, smelt._C as C
    print("available", C.backend_available("spirv"))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in (5, 6):   # two compiles: warned once
            f = smelt.compile(lambda x: torch.softmax(x * 2, -1), options={"backend": "spirv"})
            x = torch.randn(3, n)
            torch.testing.assert_close(f(x), torch.softmax(x * 2, -1))
        g = C.Graph()
        g.output(g.op("exp", g.input(torch.float32, (4,))))
        print("backend", g.compile(backend="spirv").backend)
    print("warnings", [str(m.message) for m in w if issubclass(m.category, RuntimeWarning)])
'''


def test_no_opencl_device_falls_back_to_the_cpu(tmp_path):
    out = run_py(FALLBACK, OCL_ICD_VENDORS=str(tmp_path), SMELT_SPIRV_LAUNCHER="opencl")
    assert "available (False, 'no launcher" in out and "OpenCL: no OpenCL platform" in out
    assert "backend cpu" in out
    warned = [l for l in out.splitlines() if l.startswith("warnings")][0]
    assert warned.count("backend spirv not available") == 1 and "compiling for the CPU" in warned


def test_level_zero_without_a_driver():
    """This machine has Level Zero's loader (Debian's libze1) and no driver:
    the launcher says so, the back end falls back cleanly."""
    out = run_py(FALLBACK, SMELT_SPIRV_LAUNCHER="level_zero")
    assert "Level Zero: " in out and "available (False" in out
    assert "zeInit" in out or "libze_loader" in out
    assert "backend cpu" in out


NO_SVM = '''
    import torch, smelt, smelt._C as C
    f = smelt.compile(lambda x, y: torch.softmax(x @ y, -1).sum(0) + y.mean(), options={"backend": "spirv"})
    for n in (5, 700):
        x, y = torch.randn(n, 300), torch.randn(300, 33)
        torch.testing.assert_close(f(x, y), torch.softmax(x @ y, -1).sum(0) + y.mean(), rtol=1e-4, atol=1e-4)
    print("breaks", f.stats()["breaks"])
'''


def test_opencl_without_shared_virtual_memory():
    """Where the device lacks fine-grained system SVM, tensors go through
    OpenCL buffers over their memory (forced here)."""
    out = run_py(NO_SVM, SMELT_OPENCL_NO_SVM="1", SMELT_LOGS="backend")
    assert "breaks 0" in out


CACHED = '''
    import torch, smelt
    f = smelt.compile(lambda x, y: (x.sin() * y).sum(-1), options={"backend": "spirv"})
    x, y = torch.randn(4, 300), torch.randn(4, 300)
    torch.testing.assert_close(f(x, y), (x.sin() * y).sum(-1))
    s = f.stats()
    print("cached", s["plans_from_disk"], "compiles", s["compiles"], "breaks", s["breaks"])
'''


def run_logged(code, **env):
    e = dict(os.environ, SMELT_LOGS="backend")
    e.pop("SMELT_BACKEND", None)
    e.update(env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e,
                       timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout + r.stderr


def test_disk_cache_keeps_spirv_modules(tmp_path):
    """The module and OpenCL's binary of it: a warm process builds nothing."""
    env = dict(SMELT_CACHE_DIR=str(tmp_path / "cache"))
    first = run_logged(CACHED, **env)
    second = run_logged(CACHED, **env)
    assert "cached 0 compiles 1 breaks 0" in first and "built by opencl" in first
    assert "cached 1 compiles 1 breaks 0" in second
    assert "from the disk cache, the driver's binary loaded" in second and "built by" not in second
    # a CPU compile of the same graph is another entry (the back end is in the key)
    third = run_py(CACHED.replace('options={"backend": "spirv"}', ""), **env)
    assert "cached 0 compiles 1 breaks 0" in third
