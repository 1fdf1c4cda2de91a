"""Accuracy sweep of smelt's float32 math against a float64 reference.

    python3 benchmarks/ulp_sweep.py                 # every one of the 2^32 inputs
    python3 benchmarks/ulp_sweep.py --step 1024     # every 1024th bit pattern
    python3 benchmarks/ulp_sweep.py --fns tanh,erf

For each function, every float32 bit pattern (or every `step`-th, which
still covers every binade of both signs) plus the special values goes
through the function compiled by smelt and through eager torch in float32;
both are measured against torch in float64 rounded to the float32 ULP of
the reference. The contract (inductor/cpu/vmath.h): smelt's error is at
most 4 ULP wherever eager's is, elsewhere no more than eager's; a NaN or
infinity where the other has a number counts as infinitely wrong. Prints a
table (max ULP of smelt and eager, inputs outside the contract, the worst
input) and exits 1 if any function breaks the contract. `make ulp` runs the
full sweep.
"""
import argparse
import math
import sys
import time

import torch

F = torch.nn.functional

# name -> function on tensors
FUNCTIONS = {
    "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1,
    "log": torch.log, "log2": torch.log2, "log10": torch.log10, "log1p": torch.log1p,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf, "erfc": torch.erfc,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan,
    "atan": torch.atan, "asin": torch.asin, "acos": torch.acos,
    "sinh": torch.sinh, "cosh": torch.cosh, "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh,
    "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu, "softplus": F.softplus, "mish": F.mish, "ndtr": torch.special.ndtr,
}


def _tanh_gelu64(x):
    v = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
    return x / (1 + torch.exp(-2 * v))


# float64 references where torch's own float64 function cancels in a tail
# (0.5 (1 + erf) and 0.5 (1 + tanh) lose everything below about -8)
REFERENCES = {
    "ndtr": lambda x: 0.5 * torch.erfc(-x / math.sqrt(2)),
    "gelu": lambda x: x * 0.5 * torch.erfc(-x / math.sqrt(2)),
    "gelu_tanh": _tanh_gelu64,
}
CHUNK = 1 << 24
SPECIALS = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-45, -1e-45, 1.1754942e-38, -1.1754942e-38,
            3.4028235e38, -3.4028235e38, 88.72283, 88.7229, 89.0, -87.33654, -103.97208, -104.0,
            1.0, -1.0, 0.5, -0.5, 2.0, 1e-7, -1e-7, 9.0, -9.0, 3.92, 1048576.0, 1e30, -1e30]


def ulp_error(y, ref):
    """|y - ref| in ULPs of ref rounded to float32 (0 where y is exactly that
    rounding, both NaN, or the same infinity; inf where one is NaN or
    infinite and the other is not)."""
    r32 = ref.float()
    _, e = torch.frexp(r32)
    ulp = torch.ldexp(torch.ones_like(ref), (e.to(torch.int64) - 24).clamp(min=-149))
    err = (y.double() - ref).abs() / ulp
    same = (y == r32) | (y.isnan() & r32.isnan())
    err = torch.where(same, torch.zeros_like(err), err)
    bad = y.isnan() != r32.isnan()
    bad |= (y.isinf() | r32.isinf()) & ~same
    return torch.where(bad, torch.full_like(err, math.inf), err)


def inputs(step, start):
    """The float32 values of bit patterns start, start + step, ... (CHUNK of them)."""
    bits = torch.arange(start, start + CHUNK * step, step, dtype=torch.int64)
    bits = bits[bits < 1 << 32]
    return ((bits + (1 << 31)) % (1 << 32) - (1 << 31)).to(torch.int32).view(torch.float32)


def chunks(step):
    """Every step-th float32 bit pattern, CHUNK at a time, then the specials."""
    if step == 1:   # every pattern: int32 -2^31 .. 2^31 - 1, one add per chunk
        base = torch.arange(CHUNK, dtype=torch.int32)
        for s in range(-(1 << 31), 1 << 31, CHUNK):
            yield (base + s).view(torch.float32)
    else:
        for s in range(0, 1 << 32, CHUNK * step):
            yield inputs(step, s)
    yield torch.tensor(SPECIALS, dtype=torch.float32)


def sweep(name, step=1):
    """{'name', 'n', 'smelt', 'eager', 'smelt_where_eager_ok', 'outside',
    'worst_x', 'first_outside'} for one function over every step-th bit
    pattern and the specials (the comparison in C: smelt._C._ulp_check)."""
    import smelt
    fn = FUNCTIONS[name]
    compiled = smelt.compile(lambda x: fn(x))
    res = {"name": name, "n": 0, "smelt": 0.0, "eager": 0.0, "smelt_where_eager_ok": 0.0, "outside": 0,
           "worst_x": None}
    for x in chunks(step):
        with torch.no_grad():
            got, eag = compiled(x).contiguous(), fn(x).contiguous()
        assert got.dtype == eag.dtype == x.dtype == torch.float32
        r = smelt._C._ulp_check(name, x.data_ptr(), got.data_ptr(), eag.data_ptr(), x.numel())
        res["n"] += x.numel()
        if r["worst"] >= 0 and (r["smelt"] > res["smelt"] or res["worst_x"] is None):
            res["smelt"], res["worst_x"] = max(r["smelt"], res["smelt"]), float(x[r["worst"]])
        res["eager"] = max(res["eager"], r["eager"])
        res["smelt_where_eager_ok"] = max(res["smelt_where_eager_ok"], r["smelt_where_eager_ok"])
        if r["outside"] and not res["outside"]:
            i = r["first_outside"]
            ref = REFERENCES.get(name, fn)(x[i:i + 1].double())
            res["first_outside"] = (float(x[i]), float(ulp_error(got[i:i + 1], ref)), float(ulp_error(eag[i:i + 1], ref)))
        res["outside"] += r["outside"]
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--step", type=int, default=1, help="every step-th bit pattern (1: all 2^32)")
    ap.add_argument("--fns", default=",".join(FUNCTIONS), help="comma-separated functions")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"float32 accuracy, {'all 2^32' if args.step == 1 else f'every {args.step}th of the 2^32'} "
          f"inputs + specials; ULP of the float64 reference rounded to float32; contract: smelt <= "
          f"max(4, eager) per input")
    print(f"{'function':<10} {'inputs':>12} {'smelt ulp':>10} {'eager ulp':>10} {'s where e<=4':>12} "
          f"{'outside':>8}  worst input   s")
    failed = 0
    for name in args.fns.split(","):
        t = time.perf_counter()
        r = sweep(name, args.step)
        failed += r["outside"] > 0
        extra = f"  first outside: {r['first_outside']}" if r["outside"] else ""
        print(f"{name:<10} {r['n']:>12} {r['smelt']:>10.3g} {r['eager']:>10.3g} "
              f"{r['smelt_where_eager_ok']:>12.3g} {r['outside']:>8}  "
              f"{r['worst_x']:<12.7g} {time.perf_counter() - t:5.1f}{extra}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
