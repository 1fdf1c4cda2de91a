"""Builds and runs the standalone C tests of kernels/ (tests/c/).

test_kernels.c checks the thread pool (coverage, chunking, nesting,
resizing, concurrent callers, shutdown, fork) and matmul (every dtype, odd
sizes, strided/broadcast operands, rounding, errors, the shared primitive
cache on its own and through matmul);
test_conv.c checks convolution (1-3 spatial dims, groups, stride, padding,
dilation, bias, every activation layout, thread splits, empty dims, errors,
the plan cache), on oneDNN and built again on the portable loop;
test_attention.c checks the flash attention forward and backward (blocks'
tails, causal, masks, broadcast heads, transposed operands, threads, empty
dims), on AVX-512 and built again on the scalar steps;
test_sym.c checks symbolic size expressions (canonical forms, exact
simplifications, evaluation against Python's integer semantics). All
compare with naive references and exit non-zero on any failure.
"""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = ["kernels/threadpool.c", "kernels/onednn.c", "kernels/primcache.c"]
CONV = ["tests/c/test_conv.c", *KERNELS, "kernels/conv.c"]
ATTN = ["tests/c/test_attention.c", "kernels/threadpool.c", "kernels/attention.c"]
PROGRAMS = {   # name: (sources, extra flags)
    "test_kernels": (["tests/c/test_kernels.c", *KERNELS, "kernels/matmul.c"], []),
    "test_conv": (CONV, []),
    "test_conv_portable": (CONV, ["-DKERN_CONV_FORCE_PORTABLE=1"]),
    "test_attention": (ATTN, []),
    "test_attention_portable": (ATTN, ["-DKERN_SDPA_FORCE_PORTABLE=1"]),
    "test_sym": (["tests/c/test_sym.c", "inductor/sym.c"], []),
}
CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", f"-I{ROOT}"]
LIBS = ["-ldnnl", "-lsleef", "-lpthread", "-lm"]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_kernels_c(tmp_path, name):
    exe = tmp_path / name
    sources, flags = PROGRAMS[name]
    build = subprocess.run(
        ["gcc", *CFLAGS, *flags, *(os.path.join(ROOT, s) for s in sources), *LIBS,
         "-o", str(exe)],
        capture_output=True, text=True)
    assert build.returncode == 0, "gcc failed:\n" + build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    print(run.stdout)
    assert run.returncode == 0, (f"exit {run.returncode}\n" + run.stdout[-6000:]
                                 + run.stderr[-2000:])
    assert run.stdout.rstrip().endswith(" 0 failed"), run.stdout[-2000:]
