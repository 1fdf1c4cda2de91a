"""float16/bfloat16 on the CPU, the fast paths (issue 20, part 3):

- a half-precision linear (eager: one GEMM, f32 accumulation, bias added
  in f32, one rounding) runs its bfloat16 GEMM on the bfloat16 operands
  with a float32 result (no float32 copies of input and weight); float16
  keeps float32 copies, stored in the weight's own layout (a straight
  cast, not a transposing one). Values vs eager and vs a float64
  reference: odd sizes, 3-d inputs, transposed and sliced inputs, no bias.
- the same on a CPU without bf16 instructions for oneDNN
  (ONEDNN_MAX_CPU_ISA=AVX512_CORE: the matmul converts its operands to
  float32 itself) and on the AVX2 target.
- conversions float32 <-> bfloat16/float16 in generated kernels are bit
  for bit torch's, with ties, denormals, infinities, overflow and NaN, on
  the host target and on x86-64-v3 and x86-64-v4 (subprocesses).
No timing assertions: speed is shown by python -m smelt.bench.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import smelt
import smelt._C as C
from conftest import BF16, F16, F32, POINTWISE_TOL, REPO, dname, rand

HALF = [BF16, F16]


def ref64(x, w, b):
    y = x.double() @ w.double().T
    return y if b is None else y + b.double()


def check_linear(x, w, b, out):
    """out (smelt's linear) within half precision of eager and of the float64
    value: |err| <= rtol |ref| + 2 eps (|x| @ |w|^T) (any summation order in
    float32 then one rounding)."""
    want = torch.nn.functional.linear(x, w, b)
    assert out.dtype == x.dtype and out.shape == want.shape
    rtol, _ = POINTWISE_TOL[x.dtype]
    bound = x.double().abs() @ w.double().abs().T + (0 if b is None else b.double().abs())
    exact = ref64(x, w, b)
    assert ((out.double() - exact).abs() <= rtol * exact.abs() + 1e-5 * bound + 1e-6).all()
    assert ((out.double() - want.double()).abs() <= 2 * rtol * exact.abs() + 1e-5 * bound + 1e-6).all()


LINEAR_CASES = {
    "2d-odd": lambda mk: (mk((37, 61)), mk((29, 61)), mk((29,))),
    "3d": lambda mk: (mk((2, 5, 61)), mk((31, 61)), mk((31,))),
    "row": lambda mk: (mk((1, 130)), mk((67, 130)), mk((67,))),
    "no-bias": lambda mk: (mk((9, 40)), mk((24, 40)), None),
    "no-bias-big": lambda mk: (mk((37, 611)), mk((29, 611)), None),   # half result: float32 GEMM, one rounding
    "no-bias-bT": lambda mk: (mk((3, 37, 611))[:, :, ::1], mk((611, 29)).T, None),
    "x-transposed": lambda mk: (mk((61, 37)).T, mk((29, 61)), mk((29,))),
    "x-sliced": lambda mk: (mk((37, 122))[:, ::2], mk((29, 61)), mk((29,))),
    "w-transposed": lambda mk: (mk((37, 61)), mk((61, 29)).T, mk((29,))),
}


@pytest.mark.parametrize("case", list(LINEAR_CASES))
@pytest.mark.parametrize("dtype", HALF, ids=dname)
def test_linear(case, dtype, gen):
    x, w, b = LINEAR_CASES[case](lambda s: rand(s, dtype, gen=gen, low=-1, high=1))
    f = smelt.compile(lambda x, w, b: torch.nn.functional.linear(x, w, b))
    with torch.no_grad():
        out = f(x, w, b)
    check_linear(x, w, b, out)


@pytest.mark.parametrize("dtype", HALF, ids=dname)
def test_mlp_block(dtype, gen):
    """Linear-GELU-Linear-LayerNorm in half precision (the bench's MLP
    shape, small): each GEMM's output feeds the next through one rounding."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.GELU(), torch.nn.Linear(96, 40),
                            torch.nn.LayerNorm(40)).eval().to(dtype)
    x = rand((11, 48), dtype, gen=gen)
    with torch.no_grad():
        want, got = m(x), smelt.compile(m)(x)
    rtol, atol = POINTWISE_TOL[dtype]
    torch.testing.assert_close(got, want, rtol=4 * rtol, atol=4 * atol)


def linear_graph(dtype, m, k, n):
    """The graph smelt traces for a half-precision linear with a bias."""
    g = C.Graph()
    x, w, b = g.input(dtype, (m, k)), g.input(dtype, (n, k)), g.input(dtype, (n,))
    f32 = lambda v: g.op("cast", v, dtype=F32)
    y = g.op("add", g.op("matmul", f32(x), g.op("permute", f32(w), perm=[1, 0])), f32(b))
    g.output(g.op("cast", y, dtype=dtype))
    return g


def test_bf16_linear_plan_reads_bf16(gen):
    """No float32 copies: the GEMM takes the bfloat16 input and weight and
    writes float32; bias and rounding run in one kernel after it."""
    g = linear_graph(BF16, 23, 50, 19)
    f = g.compile(keep_code=True)
    text = f.code("kernels")
    assert "bfloat16 operands, float32 result" in text, text
    assert f.num_kernels == 1 and f.num_externs == 1
    x, w, b = (rand(s, BF16, gen=gen) for s in ((23, 50), (19, 50), (19,)))
    check_linear(x, w, b, f(x, w, b)[0])


def test_f16_linear_plan_casts_in_place(gen):
    """float16: the weight's float32 copy is a straight cast (the permute
    stays a view the GEMM reads transposed)."""
    g = linear_graph(F16, 23, 50, 19)
    f = g.compile(keep_code=True)
    text = f.code("kernels")
    assert "vars [v0:950 vec]\n  store buf5[v0] = cast(buf1[v0] -> float32)" in text, text
    x, w, b = (rand(s, F16, gen=gen) for s in ((23, 50), (19, 50), (19,)))
    check_linear(x, w, b, f(x, w, b)[0])


def run_py(code, **env):
    e = dict(os.environ)
    for k in ("SMELT_CPU", "SMELT_CPU_FEATURES", "ONEDNN_MAX_CPU_ISA"):
        e.pop(k, None)
    e.update(env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       env=e, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


LINEAR_SCRIPT = '''
    import torch, smelt
    torch.manual_seed(1)
    out = []
    # the second size converts its weight to float32 in two pieces (8 MB of columns at a time)
    for (M, K, N), dt, bias in [(s, dt, bias) for s in ((37, 611, 29), (37, 1100, 2000))
                                for dt, bias in ((torch.bfloat16, 1), (torch.float16, 1),
                                                 (torch.bfloat16, 0), (torch.float16, 0))]:
        x, w, b = torch.randn(M, K).to(dt), torch.randn(N, K).to(dt), torch.randn(N).to(dt)
        b = b if bias else None
        f = smelt.compile(lambda x, w, b: torch.nn.functional.linear(x, w, b))
        with torch.no_grad():
            got = f(x, w, b).double()
        b64 = b.double() if bias else torch.zeros(N, dtype=torch.float64)
        exact = x.double() @ w.double().T + b64
        bound = x.double().abs() @ w.double().abs().T + b64.abs()
        eps = 2.0 ** -8 if dt == torch.bfloat16 else 2.0 ** -11
        out.append(bool(((got - exact).abs() <= eps * exact.abs() + 1e-5 * bound).all()))
    print(out)
'''


@pytest.mark.parametrize("env", [{"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, {"SMELT_CPU": "x86-64-v3"},
                                 {"ONEDNN_MAX_CPU_ISA": "AVX2", "SMELT_CPU": "x86-64-v3"}],
                         ids=["onednn-no-bf16", "avx2-target", "avx2-both"])
def test_linear_other_isas(env):
    assert run_py(LINEAR_SCRIPT, **env).strip().splitlines()[-1] == str([True] * 8)


def special_f32():
    """float32 values whose conversion is delicate: ties to even in bf16 and
    f16, denormals of float32 and of float16, overflow, infinities, signed
    zeros, NaNs; then random values over the whole exponent range."""
    bits = [0x3f808000, 0x3f818000, 0x3f80c000, 0x3f807fff, 0x00000001, 0x80000001, 0x007fffff,
            0x00400000, 0x00008000, 0x00018000, 0x7f7fffff, 0x7f7f8000, 0xff7fffff, 0x7f800000,
            0xff800000, 0x00000000, 0x80000000, 0x7fc00000, 0xffc00000, 0x7f800001, 0x7fa00000,
            0x33800000, 0x33000000, 0x33000001, 0x387fc000, 0x38800000, 0x477fe000, 0x477ff000,
            0x477fefff, 0x47800000, 0x3f801000, 0x3f803000, 0x3f802000]
    g = torch.Generator().manual_seed(5)
    rnd = torch.randint(0, 2 ** 32, (1000,), generator=g, dtype=torch.int64)
    allb = torch.tensor(bits, dtype=torch.int64)
    allb = torch.cat([allb, rnd, allb])   # (odd length: vector tails too)
    return (allb - ((allb >= 2 ** 31).long() << 32)).to(torch.int32).view(torch.float32)


CONVERT_SCRIPT = '''
    import json, sys, torch, smelt._C as C
    sys.path.insert(0, "tests")
    from test_half_speed import special_f32
    x = special_f32()
    res = {}
    for dt in (torch.bfloat16, torch.float16):
        g = C.Graph()
        i = g.input(torch.float32, tuple(x.shape))
        h = g.op("cast", i, dtype=dt)
        g.output(h)
        g.output(g.op("cast", h, dtype=torch.float32))
        down, up = g.compile()(x)
        want = x.to(dt)
        nan = want.isnan()
        same_nan = bool((down.isnan() == nan).all())
        bits_ok = bool((down.view(torch.int16) == want.view(torch.int16))[~nan].all())
        up_want = want.to(torch.float32)
        up_ok = bool((up.view(torch.int32) == up_want.view(torch.int32))[~nan].all()) and bool((up.isnan() == nan).all())
        res[str(dt)] = [same_nan, bits_ok, up_ok]
    print(json.dumps(res))
'''


@pytest.mark.parametrize("target", [None, "x86-64-v3", "x86-64-v4"], ids=["host", "avx2", "avx512"])
def test_conversions_bit_exact(target):
    env = {"SMELT_CPU": target} if target else {}
    out = json.loads(run_py(CONVERT_SCRIPT, **env).strip().splitlines()[-1])
    assert out == {"torch.bfloat16": [True, True, True], "torch.float16": [True, True, True]}, out


ATTN_CASES = ["plain", "bool-mask", "add-mask", "causal", "strided", "gqa"]


def attn_inputs(case, dtype, gen):
    B, H, L, S, E = 2, 3, 37, 45, 24
    mk = lambda *s: rand(s, dtype, gen=gen, low=-2, high=2)
    q, k, v = mk(B, H, L, E), mk(B, H, S, E), mk(B, H, S, E + 8)
    kw = {}
    if case == "bool-mask":
        kw["attn_mask"] = rand((L, S), torch.float32, gen=gen, low=0, high=1) > 0.3
    elif case == "add-mask":
        kw["attn_mask"] = mk(B, 1, L, S)
    elif case == "causal":
        k, v, kw["is_causal"] = k[:, :, :L], v[:, :, :L], True
    elif case == "strided":   # heads split from one projection, as a transformer's
        qkv = mk(B, L, 3 * H * E)
        q, k, v = (t.view(B, L, H, E).transpose(1, 2) for t in qkv.split(H * E, dim=2))
    elif case == "gqa":
        k, v, kw["enable_gqa"] = k[:, :1], v[:, :1], True
    return q, k, v, kw


@pytest.mark.parametrize("case", ATTN_CASES)
@pytest.mark.parametrize("dtype", HALF, ids=dname)
def test_sdpa_half(case, dtype, gen):
    """Half-precision SDPA without autograd runs smelt's flash kernel (tiles
    converted to float32 as they are packed, one rounding of the output):
    within a rounding of the float64 value, and as close as eager is."""
    q, k, v, kw = attn_inputs(case, dtype, gen)
    f = smelt.compile(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw))
    with torch.no_grad():
        got = f(q, k, v)
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw)
    m = kw.get("attn_mask")
    kw64 = dict(kw, attn_mask=m.double() if m is not None and m.dtype != torch.bool else m)
    exact = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw64)
    assert got.dtype == dtype and got.shape == want.shape
    ulp = 2.0 ** -8 if dtype == BF16 else 2.0 ** -11
    err, eager_err = (got.double() - exact).abs(), (want.double() - exact).abs()
    assert (err <= ulp * exact.abs() + 1e-3 * ulp * 16).all(), err.max()
    assert err.max() <= eager_err.max() + ulp * exact.abs().max()


def test_sdpa_half_is_fused():
    """The graph has one SDPA step reading bfloat16 (no float32 copies of q,
    k, v, no [L, S] scores)."""
    g = C.Graph()
    q, k, v = (g.input(BF16, (2, 3, n, 16)) for n in (20, 30, 30))
    g.output(g.op("sdpa", q, k, v))
    f = g.compile(keep_code=True)
    assert "sdpa" in f.code("kernels") and f.num_kernels == 0, f.code("kernels")


def test_sdpa_half_with_grad_decomposes(gen):
    """With autograd the CPU decomposes half-precision attention (its kernel
    has no half-precision backward): gradients as eager's."""
    q, k, v, _ = attn_inputs("plain", BF16, gen)
    f = smelt.compile(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v))
    qs, qe = q.clone().requires_grad_(), q.clone().requires_grad_()
    f(qs, k, v).float().sum().backward()
    torch.nn.functional.scaled_dot_product_attention(qe, k, v).float().sum().backward()
    torch.testing.assert_close(qs.grad, qe.grad, rtol=5e-2, atol=5e-2)
