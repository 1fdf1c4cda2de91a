"""Pointwise primitives (UNARY, BINARY, TERNARY in inductor/ops.def) vs torch.

Each test compiles one graph holding the op applied to every input layout
(0-d, 0-size, vector-width tails, 3-d/4-d, parallel-sized, transposed,
stepped, expanded) and compares each output with torch eager.
"""
import math

import pytest
import torch

from conftest import (BF16, BOOL, EVERY, F16, F32, F64, FLOATS, I16, I32, I64, I8,
                      MAIN, SMALL_INTS, U8, TINY_LAYOUTS, check, dname,
                      layouts, make_layouts, ops_of_kind, rand, torch_fn)


def torch_accepts(fn, *dtypes):
    """True if torch eager runs fn on small tensors of these dtypes."""
    try:
        fn(*[torch.ones(3, dtype=dt) for dt in dtypes])
        return True
    except (RuntimeError, TypeError, NotImplementedError):
        return False


def ids(params):
    return ["-".join(p if isinstance(p, str) else dname(p) for p in ps) for ps in params]


def apply_each(op, **attrs):
    """build fn applying `op` to every input separately."""
    return lambda g, *xs: [g.op(op, x, **attrs) for x in xs]


# ---------------------------------------------------------------- unary

UNARY = [n for n in ops_of_kind("UNARY") if n not in ("cast", "clamp", "checkidx")]   # checkidx: test_gather.py
SMALL_INT_UNARY = ["neg", "abs", "bitwise_not", "exp"]


def unary_kw(op, dtype):
    """rand() arguments giving in-domain, interesting inputs for op."""
    fl = dtype.is_floating_point
    if op in ("acos", "asin", "atanh"):
        return dict(low=-0.99, high=0.99) if fl else dict(low=-1, high=2)
    if op == "acosh":
        return dict(low=1.0, high=10) if fl else dict(low=1, high=100)
    if op in ("cosh", "sinh"):
        return dict(low=-5, high=5) if fl else dict(low=-10, high=10)
    if op == "lgamma":
        return dict(low=0.1, high=20) if fl else dict(low=1, high=30)
    if op in ("log", "log2", "log10", "sqrt", "rsqrt"):
        return dict(low=0.05, high=10) if fl else dict(low=1, high=100)
    if op == "log1p":
        return dict(low=-0.9, high=10) if fl else dict(low=0, high=100)
    if op in ("exp", "exp2", "expm1"):
        return dict(low=-5, high=5) if fl else dict(low=-10, high=10)
    if op == "reciprocal":
        return dict(nonzero=True)
    if op == "tan":
        return dict(low=-1.4, high=1.4) if fl else dict(low=-10, high=10)
    if op in ("sin", "cos"):
        return dict(low=-10, high=10)
    if op in ("floor", "ceil", "round", "trunc"):
        return dict(low=-10, high=10, quant=0.25)   # exact .5 halves for round
    if op in ("sign", "logical_not"):
        return dict(low=-2, high=2, quant=1) if fl else dict(low=-2, high=3)
    if op in ("isnan", "isinf", "signbit"):
        return dict(specials=True)
    if op == "bitwise_not":
        return dict(low=-1000, high=1000)
    return {}


UNARY_CASES = [(op, dt) for op in UNARY
               for dt in MAIN + (SMALL_INTS if op in SMALL_INT_UNARY else [])
               if torch_accepts(torch_fn(op), dt)]


@pytest.mark.parametrize("op,dtype", UNARY_CASES, ids=ids(UNARY_CASES))
def test_unary(op, dtype, gen):
    xs = make_layouts(layouts(dtype), dtype, gen, **unary_kw(op, dtype))
    check(apply_each(op), *[t for _, t in xs], names=[n for n, _ in xs])


SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5,
            2.5, -2.5, 3.5, 0.1, 1e-20, -1e-20, 88.0, -88.0, 100.0, -100.0]
SPECIAL_UNARY = [op for op in UNARY if op != "bitwise_not"] + ["clamp", "cast"]


@pytest.mark.parametrize("op", SPECIAL_UNARY)
def test_unary_special_values(op):
    """nan/inf/signed zero/halves/tiny/overflowing inputs, every float dtype
    (40 elements: a vector body and a tail)."""
    xs = [torch.tensor(SPECIALS * 2, dtype=dt) for dt in FLOATS]
    if op == "cast":   # every float -> every other float, through inf/nan/overflow
        def build(g, *ins):
            return [g.op("cast", x, dtype=to) for x, fr in zip(ins, FLOATS) for to in FLOATS if to != fr]
        check(build, *xs)
        return
    attrs = dict(min=-1.0, max=1.0) if op == "clamp" else {}
    check(apply_each(op, **attrs), *xs, names=[dname(dt) for dt in FLOATS])


def cast_kw(src, dst):
    """Source values representable in dst (float -> int out of range is UB)."""
    if src.is_floating_point:
        if dst == U8:
            return dict(low=0, high=200)
        if dst == BOOL:
            return dict(low=-2, high=2, quant=0.5)
        if dst == I8:
            return dict(low=-100, high=100)
        return dict(low=-1000, high=1000)
    return dict(low=-300, high=300)   # int -> narrower int wraps, like torch


@pytest.mark.parametrize("src", EVERY, ids=dname)
def test_cast(src, gen):
    """src -> every dtype (itself included), on a few layouts each."""
    xs, names = [], []
    for dst in EVERY:
        xs += [t for _, t in make_layouts(TINY_LAYOUTS, src, gen, **cast_kw(src, dst))]
        names += [f"to-{dname(dst)}-{n}" for n in TINY_LAYOUTS]

    def build(g, *ins):
        k = len(TINY_LAYOUTS)
        return [g.op("cast", x, dtype=EVERY[i // k]) for i, x in enumerate(ins)]
    check(build, *xs, names=names)


CLAMP_BOUNDS = {  # mode -> (float bounds, int bounds, uint8 bounds)
    "min": ({"min": -1.5}, {"min": -20}, {"min": 20}),
    "max": ({"max": 2.0}, {"max": 30}, {"max": 70}),
    "both": ({"min": -1.5, "max": 2.0}, {"min": -20, "max": 30}, {"min": 20, "max": 70}),
    "min_gt_max": ({"min": 2.0, "max": -1.0}, {"min": 30, "max": -20}, {"min": 70, "max": 20}),
}


@pytest.mark.parametrize("dtype", [dt for dt in EVERY if dt != BOOL], ids=dname)
def test_clamp(dtype, gen):
    """min only, max only, both, and min > max (result: max everywhere)."""
    pick = lambda fb, ib, ub: fb if dtype.is_floating_point else ub if dtype == U8 else ib  # noqa: E731
    modes = {m: pick(*b) for m, b in CLAMP_BOUNDS.items()}
    xs = [t for _, t in make_layouts(TINY_LAYOUTS, dtype, gen, low=-60, high=100)]
    check(lambda g, *ins: [g.op("clamp", x, **bounds) for bounds in modes.values() for x in ins],
          *xs, names=[f"{m}-{n}" for m in modes for n in TINY_LAYOUTS])


def test_clamp_float_bounds_promote_ints(gen):
    """torch.clamp(int tensor, min=0.5) is float32 (bounds promote like scalars)."""
    x = rand((13, 31), I32, gen=gen)
    check(lambda g, a: [g.op("clamp", a, min=-2.5), g.op("clamp", a, min=-2.5, max=7.5)], x)


# ---------------------------------------------------------------- binary

BINARY = ops_of_kind("BINARY")
SHIFTS = ("bitwise_left_shift", "bitwise_right_shift")
DIVISIONS = ("div", "floordiv", "fmod", "remainder")
TIES = ("eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum")
LOGICAL = ("logical_and", "logical_or", "logical_xor")
BITWISE = ("bitwise_and", "bitwise_or", "bitwise_xor")
SMALL_INT_BINARY = ("add", "mul", "floordiv", "remainder", "lt", "bitwise_xor") + SHIFTS


def binary_kw(op, dtype):
    """(rand kwargs for a, for b) giving in-domain operands for op."""
    fl = dtype.is_floating_point
    if op in DIVISIONS:
        return {}, dict(nonzero=True) if fl else dict(low=-7, high=8, nonzero=True)
    if op == "pow":
        if fl:
            return dict(low=0.1, high=3), dict(low=-2, high=2)
        return dict(low=-3, high=4), dict(low=0, high=5)
    if op in TIES:
        return (dict(quant=0.5),) * 2 if fl else (dict(low=-3, high=4),) * 2
    if op in LOGICAL:
        return (dict(low=-1, high=1, quant=1),) * 2 if fl else (dict(low=-1, high=2),) * 2
    if op in BITWISE:
        return dict(low=-1000, high=1000), dict(low=-1000, high=1000)
    if op in SHIFTS:
        return dict(low=-1000, high=1000), dict(low=0, high=torch.iinfo(dtype).bits)
    return {}, {}


def binary_scalar(op, dtype):
    """A Python scalar of dtype's category that is in-domain on either side."""
    if dtype == BOOL:
        return True
    if dtype.is_floating_point:
        return {"pow": 2.0, "logical_and": 1.5, "logical_or": 1.5, "logical_xor": 1.5}.get(
            op, 0.5 if op in TIES else 2.5)
    return {"pow": 2, **{o: 1 for o in TIES}, **{o: 6 for o in BITWISE}, **{o: 2 for o in SHIFTS}}.get(op, 3)


# Operand pairs: name -> f(mka, mkb). Broadcasting (incl. 0-d and 0-size),
# tails, parallel size, transposed / stepped / expanded / permuted operands.
PAIRS = {
    "same": lambda a, b: (a((13, 31)), b((13, 31))),
    "bcast3": lambda a, b: (a((5, 1, 7)), b((3, 7))),
    "row": lambda a, b: (a((1, 17)), b((16, 17))),
    "0d": lambda a, b: (a(()), b((4, 5))),
    "0d0d": lambda a, b: (a(()), b(())),
    "1vs33": lambda a, b: (a((1,)), b((33,))),
    "empty": lambda a, b: (a((0, 3)), b((1, 3))),
    "bcast4": lambda a, b: (a((2, 1, 4, 1)), b((3, 1, 5))),
    "67": lambda a, b: (a((67,)), b((67,))),
    "big": lambda a, b: (a((131, 67)), b((67,))),
    "T": lambda a, b: (a((31, 13)).T, b((13, 31))),
    "step_expand": lambda a, b: (a((7, 34))[:, ::2], b((1, 17)).expand(7, 17)),
    "offset_perm": lambda a, b: (a((9, 40))[1:, 1::3], b((13, 8)).T),
}
SHORT_PAIRS = ["same", "bcast3", "0d", "empty", "67", "big", "T", "step_expand"]


def make_pairs(names, dtype, ka, kb, gen):
    mka = lambda s: rand(s, dtype, gen=gen, **ka)  # noqa: E731
    mkb = lambda s: rand(s, dtype, gen=gen, **kb)  # noqa: E731
    return [PAIRS[n](mka, mkb) for n in names]


BINARY_CASES = [(op, dt) for op in BINARY
                for dt in MAIN + (SMALL_INTS if op in SMALL_INT_BINARY else [])
                if torch_accepts(torch_fn(op), dt, dt)]


@pytest.mark.parametrize("op,dtype", BINARY_CASES, ids=ids(BINARY_CASES))
def test_binary(op, dtype, gen):
    """Every pair layout, plus a Python scalar on the right and on the left."""
    names = list(PAIRS) if dtype == F32 else SHORT_PAIRS
    ka, kb = binary_kw(op, dtype)
    pairs = make_pairs(names, dtype, ka, kb, gen)
    s = binary_scalar(op, dtype)
    flat = [t for p in pairs for t in p]

    def build(g, *xs):
        outs = [g.op(op, xs[2 * i], xs[2 * i + 1]) for i in range(len(pairs))]
        a, b = xs[0], xs[1]   # the "same" pair; b is the in-domain divisor / exponent / shift
        return outs + [g.op(op, a, g.scalar(s)), g.op(op, g.scalar(s), b)]

    check(build, *flat, names=names + ["tensor_scalar", "scalar_tensor"])


SPECIAL_BINARY = [op for op in BINARY if op not in BITWISE + SHIFTS]
BIN_SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 0.1, 3.0, 1e-30, 1e30]


@pytest.mark.parametrize("op", SPECIAL_BINARY)
def test_binary_special_values(op):
    """All pairs of nan/inf/+-0/tiny/huge (169 elements), every float dtype:
    NaN propagation in maximum/minimum, x/0, fmod/remainder/floordiv edge
    cases, C99 pow/atan2 special cases, comparisons with NaN."""
    v = torch.tensor(BIN_SPECIALS, dtype=F64)
    a, b = v.repeat_interleave(len(v)), v.repeat(len(v))
    xs = [t.to(dt) for dt in FLOATS for t in (a, b)]
    check(lambda g, *ins: [g.op(op, ins[i], ins[i + 1]) for i in range(0, len(ins), 2)],
          *xs, names=[dname(dt) for dt in FLOATS])


def test_binary_floordiv_rounding():
    """floor_divide of floats matches Python's // (1.0 // 0.1 == 9, not 10)."""
    a = torch.tensor([1.0, -1.0, 1.0, 7.5, -7.5, 0.3, 5.0, -5.0] * 3, dtype=F64)
    b = torch.tensor([0.1, 0.1, -0.1, 2.5, 2.5, 0.1, 0.5, 0.5] * 3, dtype=F64)
    check(lambda g, x, y, x32, y32: [g.op("floordiv", x, y), g.op("remainder", x, y),
                                    g.op("floordiv", x32, y32), g.op("remainder", x32, y32)],
          a, b, a.float(), b.float())


INT_DIV_OPS = ["floordiv", "remainder", "fmod", "div"]


@pytest.mark.parametrize("dtype", [I8, I16, I32, I64])
def test_integer_division_signs(dtype):
    """Every sign combination of dividend and divisor, including exact multiples."""
    a = torch.arange(-12, 13, dtype=dtype).repeat_interleave(10)
    b = torch.tensor([-5, -3, -2, -1, 1, 2, 3, 4, 5, 7], dtype=dtype).repeat(25)
    check(lambda g, x, y: [g.op(op, x, y) for op in INT_DIV_OPS] +
          [g.op(op, x, g.scalar(-3)) for op in INT_DIV_OPS] +
          [g.op(op, g.scalar(-7), y) for op in INT_DIV_OPS], a, b)


@pytest.mark.parametrize("dtype", [U8, I8, I32, I64])
def test_shift_out_of_range(dtype):
    """Shift amounts < 0 or >= bit width: torch gives 0 (left) / sign fill (right)."""
    bits = torch.iinfo(dtype).bits
    amounts = [0, 1, bits - 1, bits, bits + 1, 100] + ([] if dtype == U8 else [-1, -3])
    sh = torch.tensor(amounts, dtype=dtype).repeat(5)
    lo = 0 if dtype == U8 else -100
    x = torch.arange(lo, lo + sh.numel(), dtype=I64).to(dtype)
    check(lambda g, a, s: [g.op(op, a, s) for op in SHIFTS], x, sh)


@pytest.mark.parametrize("dtype", FLOATS)
def test_pow_negative_base(dtype, gen):
    """Negative bases: integral exponents give real results, others NaN."""
    a = rand((5, 33), dtype, gen=gen, low=-3, high=3, quant=0.5, nonzero=True)
    b = rand((5, 33), dtype, gen=gen, low=-3, high=4, quant=0.5)
    check(lambda g, x, y: [g.op("pow", x, y), g.op("pow", x, g.scalar(3)),
                           g.op("pow", x, g.scalar(-2)), g.op("pow", x, g.scalar(0.5))], a, b)


# ---------------------------------------------------------------- promotion

PROMO_PAIRS = [(I32, F32), (I64, F16), (U8, I8), (BOOL, I32), (BF16, F16), (F16, F64),
               (I8, BF16), (BOOL, F64), (U8, BOOL), (I16, I64), (F32, F64), (I32, I64)]
PROMO_OPS = ["add", "sub", "mul", "div", "floordiv", "remainder", "pow", "maximum",
             "atan2", "eq", "lt", "bitwise_and", "logical_xor"]


@pytest.mark.parametrize("op", PROMO_OPS)
def test_binary_type_promotion(op, gen):
    """Mixed-dtype tensor operands, broadcast (5,1,7) with (3,7)."""
    pairs = [(a, b) for a, b in PROMO_PAIRS if torch_accepts(torch_fn(op), a, b)]
    xs = []
    for da, db in pairs:
        ka, _ = binary_kw(op, da)
        _, kb = binary_kw(op, db)
        xs += [rand((5, 1, 7), da, gen=gen, **ka), rand((3, 7), db, gen=gen, **kb)]
    check(lambda g, *ins: [g.op(op, ins[i], ins[i + 1]) for i in range(0, len(ins), 2)],
          *xs, names=ids(pairs))


SCALAR_PROMO = [  # (op, tensor dtype, Python scalar)
    ("add", I32, 2.5), ("mul", I64, -1.5), ("add", BOOL, 3), ("mul", BOOL, 2.5),
    ("add", F16, 3), ("sub", BF16, 2.5), ("add", I32, True), ("mul", F32, True),
    ("div", I32, 2), ("lt", I8, 2.5), ("floordiv", I32, 2.5), ("pow", I32, 0.5),
    ("remainder", I64, 2.5), ("maximum", U8, 2.5), ("eq", F64, 1), ("sub", U8, 3),
]


@pytest.mark.parametrize("op,dtype,s", SCALAR_PROMO,
                         ids=[f"{o}-{dname(d)}-{s!r}" for o, d, s in SCALAR_PROMO])
def test_scalar_promotion(op, dtype, s, gen):
    """Python scalars are weak: they change the category, never the width."""
    x = rand((4, 17), dtype, gen=gen, low=1, high=5, nonzero=True)
    check(lambda g, a: [g.op(op, a, g.scalar(s)), g.op(op, g.scalar(s), a)], x)


# ---------------------------------------------------------------- where

@pytest.mark.parametrize("dtype", EVERY, ids=dname)
def test_where(dtype, gen):
    """Three-way broadcasting, transposed condition, scalars on either side,
    0-d condition, 0-size operand."""
    c1, c2 = rand((5, 1, 7), BOOL, gen=gen), rand((31, 13), BOOL, gen=gen).T
    a, bcol = rand((3, 7), dtype, gen=gen), rand((3, 1), dtype, gen=gen)
    b, c0, z = rand((13, 31), dtype, gen=gen), rand((), BOOL, gen=gen), rand((5, 0, 1), dtype, gen=gen)
    s = True if dtype == BOOL else 2.5 if dtype.is_floating_point else 3

    def build(g, c1, c2, a, bcol, b, c0, z):
        return [g.op("where", c1, a, bcol),
                g.op("where", c2, b, g.scalar(s)),
                g.op("where", c2, g.scalar(s), b),
                g.op("where", c0, a, bcol),
                g.op("where", c1, z, g.scalar(s))]
    check(build, c1, c2, a, bcol, b, c0, z)


def test_where_mixed_and_scalars(gen):
    """Operand promotion (int32 with float32 -> float32), scalar pairs, and a
    condition computed in the graph (a relu via where)."""
    c = rand((4, 33), BOOL, gen=gen)
    a, b = rand((4, 33), I32, gen=gen), rand((33,), F32, gen=gen)
    x = rand((67, 5), F16, gen=gen)
    check(lambda g, c, a, b, x: [
        g.op("where", c, a, b),
        g.op("where", c, g.scalar(1.5), g.scalar(0)),
        g.op("where", c, a, g.scalar(2.5)),
        g.op("where", g.op("gt", x, g.scalar(0)), x, g.op("neg", x)),
    ], c, a, b, x)


def test_pointwise_table_covered():
    """Every UNARY/BINARY/TERNARY op of ops.def has a test above."""
    tested = {op for op, _ in UNARY_CASES} | {"cast", "clamp", "where", "checkidx"} | {op for op, _ in BINARY_CASES}
    table = set(ops_of_kind("UNARY") + ops_of_kind("BINARY") + ops_of_kind("TERNARY"))
    assert table <= tested, f"pointwise ops without a test: {sorted(table - tested)}"
