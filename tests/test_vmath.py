"""The CPU back end's vector math (inductor/cpu/vmath.c) against float64.

- Every float32 function of benchmarks/ulp_sweep.py on a dense sample:
  every 1024th float32 bit pattern (2^22 inputs covering every binade of
  both signs, NaNs, infinities and denormals) plus the special values. The
  contract: at most 4 ULP wherever eager's own error is at most 4 ULP,
  elsewhere no more than eager's (per input). `make ulp` runs all 2^32.
- The same on the other instruction-set paths, in a subprocess per target
  (SMELT_CPU): x86-64-v3 (AVX2 + FMA, 8 lanes) and x86-64 (SSE2, no FMA:
  the Dekker splits instead of FMA residuals, 4 lanes).
- atan2 on special pairs and random pairs, float64 and half precision
  through the same layer, a fused chain of several functions, and the
  large-argument fallback of sin/cos/tan inside one vector.
"""
import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import smelt
from conftest import REPO
from test_targets import host_flags

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import ulp_sweep  # noqa: E402


@pytest.mark.parametrize("name", list(ulp_sweep.FUNCTIONS))
def test_float32_contract_on_dense_sample(name):
    r = ulp_sweep.sweep(name, step=1024)
    assert r["n"] >= 1 << 22
    assert r["outside"] == 0, r


TARGET_SWEEP = '''
    import json, sys, warnings
    sys.path.insert(0, "benchmarks")
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a refused SMELT_CPU would test the host instead
        import smelt, ulp_sweep
        t = smelt._C.jit_target()
    out = {"target": t}
    for name in sys.argv[1].split(","):
        out[name] = ulp_sweep.sweep(name, step=1 << 14)
    print(json.dumps(out))
'''

TARGET_FNS = ["exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf", "erfc", "ndtr", "gelu", "gelu_tanh",
              "sin", "cos", "tan", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "softplus"]


@pytest.mark.parametrize("cpu,bits,fma", [("x86-64-v3", 256, True), ("x86-64", 128, False)])
def test_other_instruction_sets(cpu, bits, fma):
    if cpu == "x86-64-v3" and not {"avx2", "fma"} <= host_flags():
        pytest.fail("the host cannot run x86-64-v3 code (these machines all can)")
    env = {k: v for k, v in os.environ.items() if k not in ("SMELT_CPU", "SMELT_CPU_FEATURES")}
    env.update(SMELT_CPU=cpu, SMELT_DISABLE_CACHE="1")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(TARGET_SWEEP), ",".join(TARGET_FNS)],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert (out["target"]["cpu"], out["target"]["vector_bits"], out["target"]["fma"]) == (cpu, bits, fma)
    bad = {n: out[n] for n in TARGET_FNS if out[n]["outside"]}
    assert not bad, bad


def compiled(fn):
    return smelt.compile(lambda *a: fn(*a))


def ulp(got, ref):
    return ulp_sweep.ulp_error(got, ref)


ATAN2_SPECIAL = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 1e-40, -1e-40, 3.0, -2.5, 1e30]


def test_atan2_specials_and_accuracy():
    v = torch.tensor(ATAN2_SPECIAL)
    y, x = torch.meshgrid(v, v, indexing="ij")
    y, x = y.reshape(-1), x.reshape(-1)
    f = compiled(torch.atan2)
    got, want = f(y, x), torch.atan2(y, x)
    special = (y == 0) | (x == 0) | y.isinf() | x.isinf() | y.isnan() | x.isnan()
    y, x, got, want = y[special], x[special], got[special], want[special]
    same = (got == want) | (got.isnan() & want.isnan())
    assert same.all(), list(zip(y[~same].tolist(), x[~same].tolist(), got[~same].tolist(), want[~same].tolist()))
    assert (torch.signbit(got) == torch.signbit(want))[~want.isnan()].all()   # signed zeros and pi
    g = torch.Generator().manual_seed(0)
    ys = torch.randn(1 << 20, generator=g) * torch.exp(torch.randn(1 << 20, generator=g) * 4)
    xs = torch.randn(1 << 20, generator=g) * torch.exp(torch.randn(1 << 20, generator=g) * 4)
    ref = torch.atan2(ys.double(), xs.double())
    es, ee = ulp(f(ys, xs), ref), ulp(torch.atan2(ys, xs), ref)
    assert (es <= ee.clamp(min=4)).all(), float(es.max())


def test_pow_float_exponent_matches_eager():
    g = torch.Generator().manual_seed(1)
    a, b = torch.rand(100003, generator=g) * 10, torch.randn(100003, generator=g) * 4
    f = compiled(torch.pow)
    ref = torch.pow(a.double(), b.double())
    assert (ulp(f(a, b), ref) <= ulp(torch.pow(a, b), ref).clamp(min=4)).all()


def test_trig_large_arguments_in_one_vector():
    """Lanes at or beyond 2^20 (and inf, NaN) take SLEEF's path with the
    rest of their vector; all lanes stay right."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4099, generator=g)
    x[::7] = torch.randn(586, generator=g) * 1e8
    x[5], x[100], x[200] = math.inf, -math.inf, math.nan
    for fn in (torch.sin, torch.cos, torch.tan):
        ref = fn(x.double())
        es, ee = ulp(compiled(fn)(x), ref), ulp(fn(x), ref)
        assert (es <= ee.clamp(min=4)).all(), (fn.__name__, float(es.max()))


def test_log1p_of_exp_fused_as_eager():
    """log1p(exp(x)) is one fused function (softplus's form) that keeps
    eager's overflow: inf where eager's float32 e^x is inf, the largest
    finite point included. In float16 the fused chain keeps e^x in float32
    (half-precision numerics: one rounding, at the store), so where eager's
    float16 e^x overflows (x > 11.09) smelt gives the float64 result rounded
    and eager inf; elsewhere they agree."""
    x = torch.tensor([88.72283172607421875, 88.72283935546875, 89.0, 1e30, math.inf, -math.inf, math.nan,
                      -0.0, 0.0, 1e-45, -87.5, -104.5, 20.0, -30.0, 0.3, -0.3, 1.0, -1.0])
    f = compiled(lambda t: torch.log1p(torch.exp(t)))
    torch.testing.assert_close(f(x), torch.log1p(torch.exp(x)), rtol=3e-7, atol=0, equal_nan=True)
    y = torch.randn(100003, generator=torch.Generator().manual_seed(7)) * 30
    ref = torch.nn.functional.softplus(y.double(), threshold=1e9)
    assert (ulp(f(y), ref) <= ulp(torch.log1p(torch.exp(y)), ref).clamp(min=4)).all()
    h = (torch.randn(4099, generator=torch.Generator().manual_seed(8)) * 10).half()
    got, eager = f(h), torch.log1p(torch.exp(h))
    over = eager.isinf() & (h > 11)
    assert over.any() and not (eager.isinf() & ~over).any()
    torch.testing.assert_close(got[~over], eager[~over], rtol=1e-3, atol=0, equal_nan=True)
    assert torch.equal(got[over], torch.log1p(torch.exp(h[over].double())).half())


FUSED = {
    "tanh*sigmoid+erf*sin-exp": lambda x: torch.tanh(x) * torch.sigmoid(x) + torch.erf(x) * torch.sin(x)
    - torch.exp(-x.abs()),
    "gelu(log1p|x|)+atan": lambda x: torch.nn.functional.gelu(torch.log1p(x.abs())) + torch.atan(x),
    "softplus-mish*cos": lambda x: torch.nn.functional.softplus(x) - torch.nn.functional.mish(x) * torch.cos(x),
}


@pytest.mark.parametrize("name", list(FUSED))
def test_fused_chain(name):
    fn = FUSED[name]
    x = torch.randn(100003, generator=torch.Generator().manual_seed(3)) * 3
    f = smelt.compile(fn)
    got, ref = f(x), fn(x.double())
    info = smelt.explain(f, x)
    assert info["graphs"] == 1 and not info["breaks"], info
    torch.testing.assert_close(got.double(), ref, rtol=2e-6, atol=1e-6)


MATH = [torch.exp, torch.expm1, torch.log1p, torch.tanh, torch.sigmoid, torch.erf, torch.erfc, torch.sin,
        torch.cos, torch.atan, torch.asinh]
# eager computes these as 0.5 (1 + erf): smelt's erfc form is the accurate one
ACCURATE = {"ndtr": (torch.special.ndtr, lambda x: 0.5 * torch.erfc(-x / math.sqrt(2))),
            "gelu": (torch.nn.functional.gelu, lambda x: x * 0.5 * torch.erfc(-x / math.sqrt(2)))}


@pytest.mark.parametrize("fn", MATH, ids=lambda f: f.__name__)
def test_float64_keeps_one_ulp(fn):
    x = torch.randn(10007, dtype=torch.float64, generator=torch.Generator().manual_seed(4)) * 3
    x = x.abs() if fn is torch.log1p else x
    torch.testing.assert_close(compiled(fn)(x), fn(x), rtol=4e-16, atol=1e-300)


@pytest.mark.parametrize("name", list(ACCURATE))
def test_float64_normal_cdf_forms(name):
    fn, ref = ACCURATE[name]
    x = torch.randn(10007, dtype=torch.float64, generator=torch.Generator().manual_seed(4)) * 4
    # x / sqrt 2 rounds differently in each: 2 a^2 ulps in the far tail
    torch.testing.assert_close(compiled(fn)(x), ref(x), rtol=1e-13, atol=1e-300)


def half_ulp_error(got, ref, dtype):
    """|got - ref| in units of dtype's last place at ref (its smallest
    normal's below that)."""
    fi = torch.finfo(dtype)
    _, e = torch.frexp(ref.abs().clamp(min=fi.tiny).float())
    return (got.double() - ref).abs() / torch.ldexp(torch.ones_like(ref), e.double().long() - fi.bits + (
        5 if dtype == torch.float16 else 8) - 1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn", MATH + [v[0] for v in ACCURATE.values()], ids=lambda f: f.__name__)
def test_half_precision_through_float32(fn, dtype):
    """Computed in float32 and rounded once: within one unit in the last
    place of the half type from the float64 value (eager's is no better)."""
    x = (torch.randn(4099, generator=torch.Generator().manual_seed(5)) * 3).to(dtype)
    x = x.abs() if fn is torch.log1p else x
    got = compiled(fn)(x)
    assert got.dtype == fn(x).dtype
    ref = {f: r for f, r in ACCURATE.values()}.get(fn, fn)(x.double())
    err = half_ulp_error(got, ref, dtype)
    assert ((err <= 1.001) | (got.double() == ref)).all(), float(err.max())   # 1.001: two roundings
