"""Data-dependent reads on CUDA (smelt's gather kernels): gather,
index_select, take, take_along_dim, embedding, x[int tensor],
cross_entropy / nll_loss, against eager, each float dtype and int64, with
negative indices where torch wraps them and non-contiguous sources.

An index out of range is NOT tried in this process: eager CUDA reports it
by a device-side assert, which leaves the process's CUDA context unusable
(every later CUDA call fails), and smelt runs a frame whose index check
failed eagerly (as on the CPU), which reaches that assert. One test runs
it in a child process and checks that the call raises there rather than
returning a result.
"""
import pytest
import torch
import torch.nn.functional as F

from gpu_helpers import BF16, F16, F32, check, rand, randint, run_python

DTYPES = (F32, F16, BF16, torch.int64)


def source(shape, dtype):
    return rand(*shape, dtype=dtype) if dtype.is_floating_point else randint(-99, 99, *shape, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_family(dtype):
    x = source((37, 4099), dtype)

    def f(x, i, j, t):
        return (torch.gather(x, 1, i), x.index_select(0, j), torch.take_along_dim(x, i, 1),
                torch.take(x, t), x[j - 37], x[:, j] * 2)   # (take and x[...] wrap negatives)
    i = randint(0, 4099, 37, 5)
    j = randint(0, 37, 11)
    t = randint(-x.numel(), x.numel(), 3, 7)
    check(f, x, i, j, t)
    check(f, source((4099, 37), dtype).t(), i, j, t)


@pytest.mark.parametrize("dtype", (F32, F16, BF16), ids=str)
def test_embedding(dtype):
    w = rand(50257, 129, dtype=dtype)

    def f(ids, w):
        return F.embedding(ids, w) * 2 + 1
    check(f, randint(0, 50257, 4, 67), w)
    check(f, randint(0, 50257, 1, 1, dtype=torch.int32), w)


def test_nll_loss_and_cross_entropy_with_ignored_targets():
    logits = rand(333, 1000, scale=2.0)
    target = randint(0, 1000, 333)
    target[::7] = -100

    def f(x, t):
        return F.cross_entropy(x, t), F.nll_loss(F.log_softmax(x, -1), t, reduction="sum")
    check(f, logits, target)


def test_gather_then_reduce_fused():
    def f(x, i):
        return (torch.gather(x.exp() * 2, 1, i) + 1).sum(1)
    check(f, rand(1000, 513), randint(0, 513, 1000, 9))


@pytest.mark.cuda_only
def test_index_out_of_range_raises_in_a_child_process():
    code = """
import torch, smelt
def f(x, i):
    return torch.gather(x, 1, i) * 2
cf = smelt.compile(f)
x = torch.randn(4, 6, device="cuda")
ok = cf(x, torch.tensor([[1], [2], [0], [5]], device="cuda"))
assert torch.equal(ok, f(x, torch.tensor([[1], [2], [0], [5]], device="cuda")))
print("READY", flush=True)
try:
    r = cf(x, torch.tensor([[1], [6], [0], [5]], device="cuda"))
    torch.cuda.synchronize()
    print("RESULT", r.tolist(), flush=True)
except Exception as e:
    print("RAISED", type(e).__name__, str(e)[:300].replace("\\n", " "), flush=True)
"""
    r = run_python(code)
    assert "READY" in r.stdout, f"the child failed before the test:\n{r.stdout}\n{r.stderr[-2000:]}"
    assert "RESULT" not in r.stdout, f"an out-of-range gather returned a result:\n{r.stdout}\n{r.stderr[-2000:]}"
    assert "RAISED" in r.stdout or r.returncode != 0, r.stdout + r.stderr[-2000:]
