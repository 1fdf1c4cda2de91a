"""The GPU suite (tests_gpu/): smelt's CUDA back end against eager CUDA.

Not collected by CI (`pytest tests`); run on a machine with an NVIDIA GPU,
through scripts/gpu-check.sh on the lent one. Every test FAILS (never
skips) when torch sees no CUDA device or smelt's CUDA back end cannot run
(smelt._C.backend_available("cuda") says why): on the machine this suite
is for, that is a broken set-up, not a reason to pass.

SMELT_GPU_TESTS_DEVICE=cpu is a dry run on the CPU (gpu_helpers.DEV),
for checking the tests themselves where there is no GPU: tests marked
cuda_only are skipped then, and what the CPU back end does differently
shows as failures.

Files run cheapest and most basic first (ORDER), so that `-x` stops at the
most basic failure. The disk cache is a private directory for the session
and every subprocess it starts.
"""
import atexit
import os
import shutil
import sys
import tempfile

os.environ["SMELT_CACHE_DIR"] = tempfile.mkdtemp(prefix="smelt-gpu-cache-")
atexit.register(shutil.rmtree, os.environ["SMELT_CACHE_DIR"], True)

import pytest  # noqa: E402
import torch  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
try:
    import smelt
except ImportError:   # not installed: the in-tree package
    sys.path.insert(0, os.path.join(REPO, "python"))
    import smelt  # noqa: E402

ORDER = ("test_pointwise", "test_reductions", "test_indexing", "test_matmul", "test_runtime",
         "test_attention", "test_models")


DRY_RUN = os.environ.get("SMELT_GPU_TESTS_DEVICE", "cuda") == "cpu"


def _unavailable():
    """Why this machine cannot run the suite, or None."""
    if DRY_RUN:
        return None
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device (torch.version.cuda={torch.version.cuda})"
    ok, why = smelt._C.backend_available("cuda")
    if not ok:
        return f"smelt's CUDA back end cannot run here: {why}"
    return None


UNAVAILABLE = _unavailable()


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda_only: needs a CUDA device even in a dry run on the CPU")


def pytest_report_header(config):
    if DRY_RUN:
        return ["smelt GPU suite: DRY RUN on the CPU (SMELT_GPU_TESTS_DEVICE=cpu): proves nothing about CUDA"]
    if UNAVAILABLE:
        return [f"smelt GPU suite: NOT RUNNABLE: {UNAVAILABLE}"]
    p = torch.cuda.get_device_properties(0)
    return [f"smelt GPU suite: {p.name}, sm_{p.major}{p.minor}, {p.total_memory / 2**30:.0f} GiB, "
            f"torch {torch.__version__}, NVRTC {smelt._C.nvrtc_version()}"]


def pytest_collection_modifyitems(config, items):
    def rank(item):
        name = item.module.__name__.rpartition(".")[2] if item.module else ""
        return ORDER.index(name) if name in ORDER else len(ORDER)
    items.sort(key=rank)   # (stable: a file's tests keep their order)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if DRY_RUN and item.get_closest_marker("cuda_only"):
        pytest.skip("dry run on the CPU")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    if UNAVAILABLE:   # (in the call, not the setup: a failure, not an error)
        pytest.fail(UNAVAILABLE, pytrace=False)


@pytest.fixture(autouse=True)
def _fresh_state():
    """Every test runs without TF32 (eager's float32 matmuls exact, as
    smelt's) and leaves no pending device work and no compiled entries
    behind."""
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield
    if not UNAVAILABLE and not DRY_RUN:
        torch.cuda.synchronize()
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    smelt.reset()
