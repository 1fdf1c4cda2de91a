"""Compiled functions under threads and over time (issue 11): an entry
stays alive while a call runs it (a reset from another thread must not free
it under a running plan), a new key is compiled once however many threads
miss it at once, the entry limit holds, and a compiled function keeps no
user tensor and no rebound global alive."""
import gc
import threading
import time
import weakref

import torch

import smelt
from conftest import in_threads


def sin_fn(x):
    return torch.sin(x) * 2 + 1


def test_reset_while_other_threads_call():
    f = smelt.compile(sin_fn)
    stop = threading.Event()
    x = torch.randn(4096)
    want = sin_fn(x)

    def caller():
        while not stop.is_set():
            torch.testing.assert_close(f(x), want)

    def resetter():
        try:
            for i in range(200):
                f.reset() if i % 2 else smelt.reset()
                time.sleep(0.0002)
        finally:
            stop.set()

    in_threads(lambda k: resetter() if k == 0 else caller(), [(0,), (1,), (2,), (3,)])
    torch.testing.assert_close(f(x), want)


def test_one_compile_per_key_across_threads():
    f = smelt.compile(lambda x: torch.cos(x) + 3)
    barrier = threading.Barrier(4)

    def work(n):
        barrier.wait()
        x = torch.randn(n)
        torch.testing.assert_close(f(x), torch.cos(x) + 3)

    in_threads(work, [(7,)] * 4)
    st = f.stats()
    assert st["entries"] == 1 and st["compiles"] == 1, st


def test_entry_limit_holds_across_threads():
    import warnings
    f = smelt.compile(lambda x: torch.cos(x) + 4, dynamic=False)   # (each size its own entry)
    barrier = threading.Barrier(6)

    def work(k):
        barrier.wait()
        for n in range(1, 13):
            x = torch.randn(n + k)
            torch.testing.assert_close(f(x), torch.cos(x) + 4)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        in_threads(work, [(k,) for k in range(6)])
    st = f.stats()
    assert st["entries"] == 8 and st["recompile_limit_reached"], st
    assert "recompile limit" in st["last_break"]


def mm_fn(x, w):
    return torch.relu(x @ w.t()) + 1


def test_no_user_tensor_kept_alive():
    f = smelt.compile(mm_fn)
    x, w = torch.randn(8, 16), torch.randn(32, 16)
    for _ in range(3):          # the third call packs w
        f(x, w)
    rx, rw = weakref.ref(x), weakref.ref(w)
    del x, w
    gc.collect()
    assert rx() is None and rw() is None
    x2, w2 = torch.randn(8, 16), torch.randn(32, 16)   # may reuse the addresses
    torch.testing.assert_close(f(x2, w2), mm_fn(x2, w2))


GLOBAL_T = torch.randn(5)


def uses_global(x):
    return x + GLOBAL_T


def test_rebound_global_not_kept_alive():
    global GLOBAL_T
    f = smelt.compile(uses_global)
    f(torch.randn(5))
    ref = weakref.ref(GLOBAL_T)
    GLOBAL_T = torch.randn(5)
    gc.collect()
    assert ref() is None
    x = torch.randn(5)
    torch.testing.assert_close(f(x), x + GLOBAL_T)


def test_compiled_code_runs_in_a_forked_child():
    """Kernels run on torch's OpenMP team in the parent; a forked child (a
    DataLoader worker, say) must not use it (libgomp's team does not survive
    fork: eager torch itself hangs there unless, as DataLoader's workers do,
    it is set to one thread) and still computes the same result."""
    import os
    import signal
    f = smelt.compile(lambda x: (x * 2).sin().sum(1) + torch.relu(x).amax(1))
    x = torch.randn(256, 8192)
    ref = f(x)
    torch.sin(x).sum()          # eager OpenMP work in the parent too
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            torch.set_num_threads(1)   # as DataLoader's workers
            ok = torch.allclose(f(x), ref) and torch.allclose(f(x * 1), ref)
        finally:
            os._exit(0 if ok else 1)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child hung")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
