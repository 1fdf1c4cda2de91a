"""matmul (the EXTERN op) vs torch.matmul: dtypes, 2-d and batched with
broadcast batch dims, transposed / stepped / expanded operands, K = 0, odd
sizes, and pointwise epilogues (bias + relu).

Float tolerance: dtype's rtol on |ref| plus the same factor times (|a| @ |b|),
the error bound of any summation order over K.
"""
import pytest
import torch

from conftest import (BF16, F16, F32, F64, I32, I64, POINTWISE_TOL, assert_close,
                      dname, rand, run, run_compiled)

MM_DTYPES = [F32, F64, BF16, F16, I64, I32]

# name -> (a from mk(shape), b from mk(shape))
MM_CASES = {
    "1x1x1": lambda mk: (mk((1, 1)), mk((1, 1))),
    "2d-odd": lambda mk: (mk((7, 13)), mk((13, 5))),
    "2d-tails": lambda mk: (mk((17, 33)), mk((33, 15))),
    "2d-big": lambda mk: (mk((67, 131)), mk((131, 97))),
    "K0": lambda mk: (mk((3, 0)), mk((0, 4))),
    "M0": lambda mk: (mk((0, 5)), mk((5, 4))),
    "aT": lambda mk: (mk((13, 7)).T, mk((13, 5))),
    "bT": lambda mk: (mk((7, 13)), mk((5, 13)).T),
    "both-T": lambda mk: (mk((13, 7)).T, mk((5, 13)).T),
    "stepped": lambda mk: (mk((7, 26))[:, ::2], mk((13, 10))[:, 1::2]),
    "batched": lambda mk: (mk((3, 7, 13)), mk((3, 13, 5))),
    "bcast-batch": lambda mk: (mk((2, 1, 5, 7)), mk((3, 7, 4))),
    "bcast-2d-rhs": lambda mk: (mk((4, 6, 9)), mk((9, 11))),
    "bcast-2d-lhs": lambda mk: (mk((6, 9)), mk((4, 9, 11))),
    "batched-perm": lambda mk: (mk((7, 3, 13)).permute(1, 0, 2), mk((3, 5, 13)).transpose(1, 2)),
    "expanded-batch": lambda mk: (mk((1, 7, 13)).expand(4, 7, 13), mk((4, 13, 5))),
}
SHORT = ["2d-odd", "2d-tails", "K0", "bT", "bcast-batch", "expanded-batch"]
MM_PARAMS = [(c, dt) for dt in MM_DTYPES for c in (MM_CASES if dt in (F32, BF16) else SHORT)]


def mm_tol(a, b, ref):
    """(rtol, atol) for float results: scaled by |a| @ |b|."""
    if not ref.is_floating_point():
        return None, None
    rtol, atol = POINTWISE_TOL[ref.dtype]
    bound = torch.matmul(a.double().abs(), b.double().abs())
    return rtol, atol + 4 * rtol * bound


def mm_inputs(dtype):
    return dict(low=-5, high=5) if not dtype.is_floating_point else dict(low=-1, high=1)


@pytest.mark.parametrize("case,dtype", MM_PARAMS, ids=[f"{c}-{dname(d)}" for c, d in MM_PARAMS])
def test_matmul(case, dtype, gen):
    a, b = MM_CASES[case](lambda s: rand(s, dtype, gen=gen, **mm_inputs(dtype)))
    ref = torch.matmul(a, b)
    out, f = run_compiled(lambda g, x, y: g.op("matmul", x, y), a, b)
    rtol, atol = mm_tol(a, b, ref)
    assert_close(out, ref, rtol=rtol, atol=atol)


def test_matmul_float32_is_extern(gen):
    """A float32 GEMM runs as an extern call (oneDNN), not a generated loop."""
    a, b = rand((33, 64), F32, gen=gen), rand((64, 17), F32, gen=gen)
    _, f = run_compiled(lambda g, x, y: g.op("matmul", x, y), a, b)
    assert f.num_externs == 1


@pytest.mark.parametrize("dtype", [F32, BF16, F64], ids=dname)
def test_matmul_bias_relu(dtype, gen):
    """relu(a @ w + bias): the epilogue fused or not, values as torch."""
    a, w = rand((37, 65), dtype, gen=gen, low=-1, high=1), rand((65, 29), dtype, gen=gen, low=-1, high=1)
    bias = rand((29,), dtype, gen=gen)
    out = run(lambda g, x, w, b: g.op("relu", g.op("add", g.op("matmul", x, w), b)), a, w, bias)
    ref = torch.relu(a @ w + bias)
    rtol, atol = mm_tol(a, w, ref)
    # two roundings (matmul output, then add) in low precision
    assert_close(out, ref, rtol=2 * rtol, atol=2 * atol)


def test_matmul_chain_with_views_and_reduction(gen):
    """Pointwise prologue on the operands, a view between two matmuls, a
    reduction after: attention-like softmax(q @ k^T) @ v."""
    q, k, v = (rand((2, 9, 16), F32, gen=gen) for _ in range(3))

    def build(g, q, k, v):
        s = g.op("matmul", g.op("mul", q, g.scalar(0.25)), g.op("permute", k, perm=[0, 2, 1]))
        m = g.op("amax", s, dims=-1, keepdim=True)
        e = g.op("exp", g.op("sub", s, m))
        p = g.op("div", e, g.op("sum", e, dims=-1, keepdim=True))
        return [g.op("matmul", p, v), g.op("sum", s, dims=[1, 2])]
    outs = run(build, q, k, v)
    s = (q * 0.25) @ k.transpose(1, 2)
    assert_close(outs[0], torch.softmax(s, -1) @ v, rtol=1e-4, atol=1e-5)
    assert_close(outs[1], s.sum((1, 2)), rtol=1e-4, atol=1e-4 * s.abs().sum((1, 2)))


@pytest.mark.parametrize("shapes", [((4, 8, 255, 64), (4, 8, 64, 255)), ((4, 8, 256, 256), (4, 8, 256, 64)),
                                    ((300, 64), (64, 300)), ((2, 300, 64), (2, 64, 300))],
                         ids=["bmm-255", "bmm-256", "2d-300", "b2-300"])
def test_matmul_split_across_threads(shapes, gen):
    """Big enough to be split across 2 pool threads, each piece a oneDNN
    primitive running at the same time as the other: repeated, so that a
    shared scratchpad or stream (a race) would show as wrong values."""
    import smelt._C as C
    old = C.get_num_threads()
    C.set_num_threads(2)
    try:
        for _ in range(4):
            a, b = rand(shapes[0], F32, gen=gen, low=-1, high=1), rand(shapes[1], F32, gen=gen, low=-1, high=1)
            out, _ = run_compiled(lambda g, x, y: g.op("matmul", x, y), a, b)
            rtol, atol = mm_tol(a, b, a @ b)
            assert_close(out, a @ b, rtol=rtol, atol=atol)
    finally:
        C.set_num_threads(old)


# (a shape, b shape, how b is made): wide products split by columns (N > M,
# N not a multiple of the 64-column unit), products large enough for
# oneDNN's own thread team (>= 5e7 flops), operands transposed in memory
# (a weight's w.t(), the float16 path copies them in their own order).
SPLIT_CASES = {
    "cols-odd": ((37, 301), (301, 1000), False),
    "cols-bT": ((64, 256), (700, 256), True),
    "team": ((300, 512), (512, 520), False),
    "team-bT": ((257, 384), (1031, 384), True),
    "team-batch1": ((1, 129, 512), (1, 512, 640), False),
    # one 2-d B for every batch entry: folded into one product of 4*96 rows
    "folded-bT": ((4, 96, 384), (1000, 384), True),
    "folded-cols": ((3, 5, 200), (200, 300), False),
    # float16 (and bf16 without bf16 instructions) converts B to float32 in
    # pieces of 8 MB of whole columns: several pieces and a ragged last one
    "half-pieces": ((33, 1024), (1024, 2100), False),
    "half-pieces-bT-batched": ((2, 17, 700), (2, 1500, 700), True),
}
SPLIT_PARAMS = [(c, dt) for c in SPLIT_CASES for dt in (F32, BF16, F16)]


@pytest.mark.parametrize("case,dtype", SPLIT_PARAMS, ids=[f"{c}-{dname(d)}" for c, d in SPLIT_PARAMS])
def test_matmul_column_split_and_team(case, dtype, gen):
    """The ways a large 2-d product is divided among 2 threads (rows,
    columns of C, oneDNN's own team) and half-precision operands copied to
    float32: the values of torch.matmul, twice (a cached primitive reused)."""
    import smelt._C as C
    sa, sb, bt = SPLIT_CASES[case]
    old = C.get_num_threads()
    C.set_num_threads(2)
    try:
        for _ in range(2):
            a = rand(sa, dtype, gen=gen, low=-1, high=1)
            b = rand(sb, dtype, gen=gen, low=-1, high=1)
            b = b.transpose(-1, -2) if bt else b
            ref = torch.matmul(a.double(), b.double())
            out, _ = run_compiled(lambda g, x, y: g.op("matmul", x, y), a, b)
            rtol, atol = mm_tol(a, b, ref.to(dtype))
            assert out.dtype == dtype
            assert_close(out.double(), ref, rtol=rtol, atol=atol)
    finally:
        C.set_num_threads(old)
