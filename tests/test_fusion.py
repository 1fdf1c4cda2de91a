"""Fused patterns built from primitives, checked against torch's own
implementations (torch.softmax, F.layer_norm, F.rms_norm, F.gelu), and the
number of generated kernels: a row-wise normalisation over the last dim is
one kernel (reductions take the pointwise prologue and epilogue), and a pure
pointwise chain is one kernel."""
import math

import pytest
import torch
import torch.nn.functional as F

from conftest import (BF16, F16, F32, F64, assert_close, check, dname, rand, run,
                      run_compiled)

# Normalisations contain reductions: 1e-4 relative in float32 (DESIGN.md §5).
NORM_TOL = {F32: (1e-4, 1e-5), F64: (1e-7, 1e-7), F16: (2e-3, 2e-3), BF16: (1.6e-2, 1.6e-2)}


def softmax(g, x, dim):
    m = g.op("amax", x, dims=dim, keepdim=True)
    e = g.op("exp", g.op("sub", x, m))
    return g.op("div", e, g.op("sum", e, dims=dim, keepdim=True))


def log_softmax(g, x, dim):
    s = g.op("sub", x, g.op("amax", x, dims=dim, keepdim=True))
    return g.op("sub", s, g.op("log", g.op("sum", g.op("exp", s), dims=dim, keepdim=True)))


def layer_norm(g, x, w, b, eps, centred_square=False):
    """(x - mean) / sqrt(var + eps) * w + b over the last dim."""
    xc = g.op("sub", x, g.op("mean", x, dims=-1, keepdim=True))
    if centred_square:
        var = g.op("mean", g.op("mul", xc, xc), dims=-1, keepdim=True)
    else:
        var = g.op("var", x, dims=-1, keepdim=True, correction=0)
    y = g.op("div", xc, g.op("sqrt", g.op("add", var, g.scalar(eps))))
    return g.op("add", g.op("mul", y, w), b)


def rms_norm(g, x, w, eps):
    ms = g.op("mean", g.op("mul", x, x), dims=-1, keepdim=True)
    return g.op("mul", g.op("mul", x, g.op("rsqrt", g.op("add", ms, g.scalar(eps)))), w)


def gelu_tanh(g, x):
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))"""
    x3 = g.op("mul", g.op("mul", x, x), x)
    inner = g.op("mul", g.op("add", x, g.op("mul", x3, g.scalar(0.044715))), g.scalar(math.sqrt(2 / math.pi)))
    return g.op("mul", g.op("mul", x, g.scalar(0.5)), g.op("add", g.op("tanh", inner), g.scalar(1.0)))


ROW_SHAPES = [(7, 67), (4, 5, 16), (257, 131), (1, 1), (3, 1024 + 17)]
ROW_DTYPES = [F32, BF16, F16]
ROW_PARAMS = [(s, d) for s in ROW_SHAPES for d in ROW_DTYPES if d == F32 or s == (7, 67)]
row_ids = [f"{'x'.join(map(str, s))}-{dname(d)}" for s, d in ROW_PARAMS]


def compare(got, ref, dtype):
    rtol, atol = NORM_TOL[dtype]
    assert_close(got, ref, rtol=rtol, atol=atol)


@pytest.mark.parametrize("shape,dtype", ROW_PARAMS, ids=row_ids)
def test_softmax_last_dim(shape, dtype, gen):
    x = rand(shape, dtype, gen=gen, low=-5, high=5)
    out, f = run_compiled(lambda g, a: softmax(g, a, -1), x)
    compare(out, torch.softmax(x, -1), dtype)
    assert f.num_kernels == 1


@pytest.mark.parametrize("shape,dtype", ROW_PARAMS, ids=row_ids)
def test_log_softmax_last_dim(shape, dtype, gen):
    x = rand(shape, dtype, gen=gen, low=-5, high=5)
    out, f = run_compiled(lambda g, a: log_softmax(g, a, -1), x)
    compare(out, torch.log_softmax(x, -1), dtype)
    assert f.num_kernels == 1


def vector_exp_calls(f):
    """Vector float32 exps in f's LLVM IR (keep_code=True, opt_level=0:
    loops not unrolled): vmath.c's inline exp rounds x log2(e) to an
    integer with one llvm.roundeven per evaluation (nothing else in a
    softmax does)."""
    import re
    return len(re.findall(r"call [^\n]*@llvm\.roundeven\.v(?:4|8|16)f32\(", f.code("ir")))


@pytest.mark.parametrize("dtype", [F32, F64], ids=dname)
@pytest.mark.parametrize("cols", [20011, 65536 + 5])
def test_softmax_long_rows_keep_exp_in_the_output(cols, dtype, gen):
    """Rows too long for the stack row cache (> 64 KB): exp(x - max) is
    kept in the softmax's own output between the sum and the scaling (as
    ATen's softmax does), so the kernel calls the vector exp once, not
    twice; values as torch's, also through smelt.compile, and with a
    second output that the cache must not disturb."""
    x = rand((5, cols), dtype, gen=gen, low=-8, high=8)
    y = rand((5, cols), dtype, gen=gen)
    outs, f = run_compiled(lambda g, a, b: [softmax(g, a, -1), g.op("mul", softmax(g, a, -1), b)], x, y,
                           keep_code=True)
    compare(outs[0], torch.softmax(x, -1), dtype)
    compare(outs[1], torch.softmax(x, -1) * y, dtype)
    if dtype == F32:
        g = run_compiled(lambda g, a: softmax(g, a, -1), x, keep_code=True, opt_level=0)[1]
        assert vector_exp_calls(g) == 1
    import smelt
    sm = smelt.compile(lambda t: torch.softmax(t, dim=-1))
    compare(sm(x), torch.softmax(x, -1), dtype)


def test_softmax_into_low_precision_output_recomputes_exp(gen):
    """A long-row softmax stored as bfloat16 cannot keep float32 exp values
    in its output: exp is computed again for the scaling (two calls)."""
    x = rand((3, 20011), F32, gen=gen, low=-8, high=8)
    out, f = run_compiled(lambda g, a: g.op("cast", softmax(g, a, -1), dtype=BF16), x, keep_code=True,
                          opt_level=0)
    assert_close(out, torch.softmax(x, -1).to(BF16), rtol=1.6e-2, atol=1e-3)
    assert vector_exp_calls(f) == 2


@pytest.mark.parametrize("shape", [(67, 7), (16, 5, 4), (1031, 3)], ids=str)
def test_softmax_dim0(shape, gen):
    x = rand(shape, F32, gen=gen, low=-5, high=5)
    outs, f = run_compiled(lambda g, a: [softmax(g, a, 0), log_softmax(g, a, 0)], x)
    compare(outs[0], torch.softmax(x, 0), F32)
    compare(outs[1], torch.log_softmax(x, 0), F32)
    assert f.num_kernels <= 3


def test_softmax_transposed_input(gen):
    """Softmax over the last dim of a transposed input (column-strided rows)."""
    x = rand((67, 33), F32, gen=gen).T
    out, f = run_compiled(lambda g, a: softmax(g, a, -1), x)
    compare(out, torch.softmax(x, -1), F32)


@pytest.mark.parametrize("centred", [False, True], ids=["var", "centred_square"])
@pytest.mark.parametrize("shape,dtype", ROW_PARAMS, ids=row_ids)
def test_layer_norm(shape, dtype, centred, gen):
    n = shape[-1]
    x = rand(shape, dtype, gen=gen, low=-2, high=3)
    w, b = rand((n,), dtype, gen=gen), rand((n,), dtype, gen=gen)
    out, f = run_compiled(lambda g, a, w, b: layer_norm(g, a, w, b, 1e-5, centred), x, w, b)
    ref = F.layer_norm(x, (n,), w, b, 1e-5)
    compare(out, ref, dtype)
    assert f.num_kernels == 1


@pytest.mark.parametrize("shape,dtype", ROW_PARAMS, ids=row_ids)
def test_rms_norm(shape, dtype, gen):
    n = shape[-1]
    x, w = rand(shape, dtype, gen=gen), rand((n,), dtype, gen=gen)
    out, f = run_compiled(lambda g, a, w: rms_norm(g, a, w, 1e-6), x, w)
    compare(out, F.rms_norm(x, (n,), w, 1e-6), dtype)
    assert f.num_kernels == 1


@pytest.mark.parametrize("dtype", [F32, BF16, F16, F64], ids=dname)
def test_gelu_tanh_chain(dtype, gen):
    x = rand((37, 129), dtype, gen=gen, low=-6, high=6)
    out, f = run_compiled(lambda g, a: gelu_tanh(g, a), x)
    rtol, atol = {F32: (1e-5, 1e-5), F64: (1e-7, 1e-7), F16: (1e-3, 1e-3), BF16: (1.6e-2, 1.6e-2)}[dtype]
    assert_close(out, F.gelu(x, approximate="tanh"), rtol=rtol, atol=atol)
    assert f.num_kernels == 1


def test_residual_layer_norm(gen):
    """h = x + r; y = LN(h): both outputs, few kernels."""
    x, r = rand((33, 96), F32, gen=gen), rand((33, 96), F32, gen=gen)
    w, b = rand((96,), F32, gen=gen), rand((96,), F32, gen=gen)

    def build(g, x, r, w, b):
        h = g.op("add", x, r)
        return [h, layer_norm(g, h, w, b, 1e-5)]
    outs, f = run_compiled(build, x, r, w, b)
    assert_close(outs[0], x + r)
    compare(outs[1], F.layer_norm(x + r, (96,), w, b, 1e-5), F32)
    assert f.num_kernels <= 2


def test_pointwise_chain_is_one_kernel(gen):
    """9 pointwise ops over broadcast inputs: one kernel."""
    x, y = rand((31, 67), F32, gen=gen), rand((67,), F32, gen=gen)

    def build(g, x, y):
        t = g.op("add", g.op("mul", x, g.scalar(2.0)), y)
        t = g.op("tanh", t)
        t = g.op("add", g.op("mul", t, t), g.scalar(1.0))
        t = g.op("div", x, g.op("sqrt", t))
        return g.op("sigmoid", g.op("maximum", t, g.op("neg", y)))
    f = check(build, x, y)
    assert f.num_kernels == 1


def test_shared_value_two_consumers(gen):
    """A value consumed by two pointwise users and a reduction; a diamond."""
    x = rand((19, 45), F32, gen=gen)

    def build(g, x):
        e = g.op("exp", x)
        a = g.op("add", e, g.scalar(1.0))
        b = g.op("mul", e, g.op("amax", e, dims=1, keepdim=True))
        d = g.op("mul", g.op("add", x, g.scalar(1.0)), g.op("sub", x, g.scalar(1.0)))
        return [a, b, g.op("add", a, b), d]
    check(build, x, rtol=1e-5, atol=1e-5)


def test_costly_value_shared_inside_one_kernel(gen):
    """A costly value used twice where both uses meet in one kernel (e^x
    (e^x + 2), as mish) is computed there once: one kernel, no temporary.
    Used by two kernels (an output and a reduction) it is stored once."""
    x = rand((37, 41), F32, gen=gen)

    def build(g, x):
        e = g.op("exp", g.op("sin", g.op("tanh", x)))
        n = g.op("mul", e, g.op("add", e, g.scalar(2.0)))
        return g.op("div", x, g.op("add", g.op("div", g.scalar(2.0), n), g.scalar(1.0)))
    f = check(build, x, rtol=1e-5, atol=1e-6)
    assert f.num_kernels == 1

    def build2(g, x):
        e = g.op("exp", g.op("sin", g.op("tanh", x)))
        return [g.op("tanh", g.op("mul", e, g.op("add", e, g.scalar(2.0)))), g.op("sum", e, dims=1)]
    f = check(build2, x, rtol=1e-5, atol=1e-5)
    assert f.num_kernels == 2   # e stored by the output's kernel (one pass, two stores), then the sum


def test_intermediate_and_final_outputs(gen):
    """Outputting a value that is also consumed (must be stored and used)."""
    x = rand((64 + 3, 17), F32, gen=gen)
    check(lambda g, a: [g.op("tanh", a), g.op("sum", g.op("tanh", a), dims=0),
                        g.op("mul", g.op("tanh", a), g.scalar(3.0))], x, rtol=1e-4, atol=1e-5)


def test_repeated_output_is_independent(gen):
    x = rand((8, 9), F32, gen=gen)
    outs = run(lambda g, a: (lambda y: [y, y])(g.op("exp", a)), x)
    assert_close(outs[0], torch.exp(x))
    assert_close(outs[1], torch.exp(x))
    assert outs[0].data_ptr() != outs[1].data_ptr()


def test_compiled_graph_reuse(gen):
    """One compiled graph called many times with fresh inputs."""
    x0 = rand((13, 31), F32, gen=gen)
    out, f = run_compiled(lambda g, a: softmax(g, a, -1), x0)
    for _ in range(5):
        x = rand((13, 31), F32, gen=gen)
        compare(f(x)[0], torch.softmax(x, -1), F32)


@pytest.mark.parametrize("vector_bits", [0, 128, 256, 512])
@pytest.mark.parametrize("opt_level", [0, 2])
def test_compile_options(vector_bits, opt_level, gen):
    """Results do not depend on vector width or optimisation level."""
    x = rand((33, 67), F32, gen=gen, low=-5, high=5)
    w = rand((67,), F32, gen=gen)
    outs, f = run_compiled(lambda g, a, w: [softmax(g, a, -1), gelu_tanh(g, a), rms_norm(g, a, w, 1e-6)],
                           x, w, vector_bits=vector_bits, opt_level=opt_level)
    compare(outs[0], torch.softmax(x, -1), F32)
    assert_close(outs[1], F.gelu(x, approximate="tanh"), rtol=1e-5, atol=1e-5)
    compare(outs[2], F.rms_norm(x, (67,), w, 1e-6), F32)


@pytest.mark.parametrize("nthreads", [1, 3])
def test_threads(nthreads, threads, gen):
    """Parallel row loops give the same results with any thread count."""
    threads(nthreads)
    x = rand((1031, 67), F32, gen=gen)
    w, b = rand((67,), F32, gen=gen), rand((67,), F32, gen=gen)
    outs = run(lambda g, a, w, b: [softmax(g, a, -1), layer_norm(g, a, w, b, 1e-5)], x, w, b)
    compare(outs[0], torch.softmax(x, -1), F32)
    compare(outs[1], F.layer_norm(x, (67,), w, b, 1e-5), F32)


def test_keep_code(gen):
    """keep_code=True keeps the LLVM IR, assembly and kernel listing."""
    x = rand((5, 7), F32, gen=gen)
    g_outs, f = run_compiled(lambda g, a: softmax(g, a, -1), x, keep_code=True)
    for what in ("ir", "asm", "kernels"):
        text = f.code(what)
        assert isinstance(text, str) and text.strip(), f"code({what!r}) is empty"


def test_per_channel_parameters_keep_the_vector_on_the_contiguous_dim(gen):
    """NCHW batch norm (eval) + relu: the per-channel loads are broadcasts
    along H*W, so the vector var is the contiguous spatial one, not C."""
    x = rand((3, 5, 9, 11), F32, gen=gen)
    mean, var, w, b = (rand((5, 1, 1), F32, gen=gen) for _ in range(4))
    var = var.abs() + 0.5

    def build(g, a, m, v, ww, bb):
        y = g.op("mul", g.op("sub", a, m), g.op("rsqrt", g.op("add", v, g.scalar(1e-5))))
        return g.op("relu", g.op("add", g.op("mul", y, ww), bb))

    out, f = run_compiled(build, x, mean, var, w, b, keep_code=True)
    compare(out, torch.relu((x - mean) * torch.rsqrt(var + 1e-5) * w + b), F32)
    head = f.code("kernels").splitlines()[0]
    assert head.rstrip().endswith("vec]") and ":99 vec" in head, head


@pytest.mark.parametrize("c", [2, 3, 0.5, -0.5, -1, -2, 3.0, 1.7])
@pytest.mark.parametrize("dtype", [F32, F64, BF16], ids=dname)
def test_pow_by_constant_exponents(c, dtype, gen):
    """x ** c for the exponents torch special-cases (products, sqrt,
    reciprocals) and a general one (SLEEF pow): values as torch's."""
    x = rand((37,), dtype, gen=gen).abs() + 0.1
    out = run(lambda g, a: g.op("pow", a, g.scalar(c)), x)
    compare(out, x ** c, dtype)
