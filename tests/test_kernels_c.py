"""Builds and runs the standalone C tests of kernels/ (tests/c/test_kernels.c).

The program checks the thread pool (coverage, chunking, nesting, resizing,
concurrent callers, shutdown, fork) and matmul (every dtype, odd sizes,
strided/broadcast operands, rounding, errors, the primitive cache) against
naive references, and exits non-zero on any failure.
"""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ["tests/c/test_kernels.c", "kernels/threadpool.c", "kernels/matmul.c"]
CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", f"-I{ROOT}"]
LIBS = ["-ldnnl", "-lpthread", "-lm"]


def test_kernels_c(tmp_path):
    exe = tmp_path / "test_kernels"
    build = subprocess.run(
        ["gcc", *CFLAGS, *(os.path.join(ROOT, s) for s in SOURCES), *LIBS, "-o", str(exe)],
        capture_output=True, text=True)
    assert build.returncode == 0, "gcc failed:\n" + build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    print(run.stdout)
    assert run.returncode == 0, (f"exit {run.returncode}\n" + run.stdout[-6000:]
                                 + run.stderr[-2000:])
    assert run.stdout.rstrip().endswith(" 0 failed"), run.stdout[-2000:]
