"""float16/bfloat16 accuracy on the CPU: smelt at least as accurate as eager.

Every case runs the same half-precision inputs through eager and through
smelt.compile, and the same inputs upcast to float64 through eager (the
reference). Each output's error is its relative RMS error against the
reference over the elements where the reference is finite:

    err(y) = ||y - ref||_2 / ||ref||_2

and the test asserts

    err(smelt) <= err(eager) * (1 + SLACK) + u / sqrt(n)

u is the dtype's unit roundoff (2^-11 float16, 2^-8 bfloat16), n the number
of elements compared. Why this bound: a value rounded once to the output
dtype has a relative error of at most u (RMS about u/sqrt(3)); eager rounds
once per ATen op and computes inside an op in float32 (opmath), and smelt
must do no worse: it computes in float32 and rounds at the op boundaries
eager rounds at or fewer (a fused pointwise chain keeps float32
intermediates). Two implementations that both round once differ only in the
elements whose float32 values fall on different sides of a rounding
boundary, which moves an RMS over n elements by about u/sqrt(n): the
absolute term. SLACK (10%) covers float32 accumulation in another order
(a blocked sum against ATen's cascade). An extra rounding of the same size
as the final one (a float16 intermediate where eager keeps float) makes the
error ~1.4-3x eager's and fails at the sizes used here; the statistical term
vanishes for the large representative cases. An output that is non-finite
where eager's and the reference's are finite fails too.

Cases: PyTorch's OpInfo database (tests/opinfo_lib.py: each entry's first
sample that runs in float64 too, in float16 or bfloat16 alternately, inputs
as OpInfo makes them:
random, odd sizes, some non-contiguous) and a representative list at larger
odd sizes (norms, softmax, reductions, cumulative ops, activations, losses,
matmul/linear/conv, attention, non-contiguous inputs) where accumulation
error shows, and the gradients of a subset of it (a compiled backward
against float64 autograd). Then the benchmark models (python/smelt/bench.py: MLP, CNN,
GPT-2, BERT at tiny sizes) in bfloat16: inference outputs and one training
step's gradients against the float64 model."""
import copy
import math
import warnings
import zlib

import pytest
import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

import opinfo_lib as L
import smelt

HALF = L.HALF
U = L.UNIT_ROUNDOFF
SLACK = L.HALF_SLACK


def check(name, e, s, ref, dtype, slack=SLACK):
    """Asserts smelt's output s is as accurate as eager's e against ref."""
    why = L.half_accuracy(e, s, ref, dtype, slack)
    assert why is None, f"{name} {dtype}: smelt {why}"


def up(x):
    return x.detach().double() if isinstance(x, torch.Tensor) and x.dtype in HALF else x


# ---------------------------------------------------------------- OpInfo

def _half_ops():
    out = []
    for op in L.op_db():
        sup = op.supported_dtypes("cpu")
        if L.RANDOM.search(op.name) or L.UNINIT.match(op.name) or torch.float64 not in sup:
            continue
        if any(d in sup for d in HALF):
            out.append(op)
    return out


OPS = _half_ops()


def _sample(op, dtype):
    """(fn, tensors) of op's first sample in dtype that eager runs in dtype
    and in float64 and that has a half-precision output, else None."""
    for s in L.samples(op, dtype, False):
        try:
            f, tensors, _ = L.render(op.op, s)
        except Exception:  # noqa: BLE001
            continue
        if any(t.layout != torch.strided for t in tensors):
            continue
        e, err = L._call(f, L.exact_copies(tensors), 0)
        r, rerr = L._call(f, [up(t) for t in L.exact_copies(tensors)], 0)
        if err is None and rerr is None:
            return f, tensors, e, r
        return None
    return None


@pytest.mark.parametrize("i", range(len(OPS)), ids=[o.full_name if hasattr(o, "full_name") else o.name for o in OPS])
def test_opinfo_half_accuracy(i):
    """Entry i in float16 when i is even, bfloat16 when odd (both dtypes
    over the database, half the compile time; either when the entry has
    only one)."""
    op = OPS[i]
    sup = op.supported_dtypes("cpu")
    order = HALF if i % 2 == 0 else HALF[::-1]
    for dtype in [d for d in order if d in sup][:1]:
        got = _sample(op, dtype)
        if got is None:
            continue
        f, tensors, e, r = got
        s, serr = L._call(smelt.compile(f), L.exact_copies(tensors), 0)
        assert serr is None, f"{op.name} {dtype}: smelt raises {serr!r} where eager does not"
        for a, b, rr in zip(pytree.tree_leaves(e), pytree.tree_leaves(s), pytree.tree_leaves(r)):
            if isinstance(a, torch.Tensor) and a.dtype in HALF and a.numel() and a.layout == torch.strided and \
                    isinstance(b, torch.Tensor) and b.layout == torch.strided and \
                    isinstance(rr, torch.Tensor) and rr.dtype == torch.float64 and rr.shape == a.shape:
                check(op.name, a, b, rr, dtype)


# ---------------------------------------------------------------- representative ops, larger sizes

def _t(*shape):
    return torch.randn(*shape)


CASES = {
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b), lambda: [_t(37, 1023), _t(1023), _t(1023)]),
    "layer_norm_nc": (lambda x: F.layer_norm(x.t(), (x.shape[0],)), lambda: [_t(513, 41)]),
    "rms_norm": (lambda x, w: F.rms_norm(x, (x.shape[-1],), w), lambda: [_t(37, 1023), _t(1023)]),
    "group_norm": (lambda x, w, b: F.group_norm(x, 4, w, b), lambda: [_t(3, 16, 31, 17), _t(16), _t(16)]),
    "batch_norm_eval": (lambda x, w, b, m, v: F.batch_norm(x, m, v.abs() + 0.5, w, b, training=False),
                        lambda: [_t(3, 16, 31, 17) + 0.5, _t(16), _t(16), _t(16), _t(16)]),
    "batch_norm_train": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                         lambda: [_t(3, 16, 31, 17) + 0.5, _t(16), _t(16)]),
    "softmax": (lambda x: torch.softmax(x, -1), lambda: [_t(37, 2053)]),
    "softmax_dim0": (lambda x: torch.softmax(x, 0), lambda: [_t(1031, 7)]),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), lambda: [_t(37, 2053)]),
    "softmin": (lambda x: F.softmin(x, -1), lambda: [_t(37, 1031)]),
    "sum": (lambda x: x.sum(-1), lambda: [_t(37, 2053)]),
    "sum_all": (lambda x: x.sum(), lambda: [_t(37, 2053)]),
    "mean_nc": (lambda x: x.t().mean(-1), lambda: [_t(2053, 37)]),
    "var_std": (lambda x: (x.var(-1), x.std(0)), lambda: [_t(37, 2053)]),
    "prod": (lambda x: (x * 0.01 + 1).prod(-1), lambda: [_t(37, 257)]),
    "cumsum": (lambda x: x.cumsum(-1), lambda: [_t(37, 61)]),
    "vector_norm": (lambda x: torch.linalg.vector_norm(x, dim=-1), lambda: [_t(37, 2053)]),
    "normalize": (lambda x: F.normalize(x, dim=-1), lambda: [_t(37, 2053)]),
    "gelu": (lambda x: (F.gelu(x), F.gelu(x, approximate="tanh")), lambda: [_t(37, 1031)]),
    "silu_mish": (lambda x: (F.silu(x), F.mish(x), F.hardswish(x), F.selu(x)), lambda: [_t(37, 1031)]),
    "chain": (lambda x: (x * 1.1 + 0.3).sin() * x.exp() - x.tanh(), lambda: [_t(37, 1031)]),
    "scalar_ops": (lambda x: (torch.deg2rad(x), x * 0.0174532925, x / 3.7 + 0.1, torch.sinc(x)), lambda: [_t(37, 1031)]),
    "addcmul_lerp": (lambda a, b, c: (torch.addcmul(a, b, c, value=0.3), torch.lerp(a, b, c), torch.addcdiv(a, b, c.abs() + 1)),
                     lambda: [_t(37, 1031), _t(37, 1031), _t(37, 1031)]),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t), lambda: [_t(37, 1001), torch.randint(0, 1001, (37,))]),
    "nll_loss": (lambda x, t: F.nll_loss(torch.log_softmax(x, -1), t), lambda: [_t(37, 1001), torch.randint(0, 1001, (37,))]),
    "mse_l1": (lambda a, b: (F.mse_loss(a, b), F.l1_loss(a, b), F.smooth_l1_loss(a, b)), lambda: [_t(37, 1031), _t(37, 1031)]),
    "linear": (lambda x, w, b: F.linear(x, w, b), lambda: [_t(37, 1023), _t(129, 1023), _t(129)]),
    "matmul_nc": (lambda a, b: a.t() @ b, lambda: [_t(1023, 37), _t(1023, 65)]),
    "bmm": (lambda a, b: torch.bmm(a, b), lambda: [_t(3, 37, 255), _t(3, 255, 17)]),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), lambda: [_t(2, 16, 17, 17), _t(8, 16, 3, 3), _t(8)]),
    "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), lambda: [_t(2, 3, 67, 32)] * 3),
    "sdpa_causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                    lambda: [_t(2, 3, 67, 32), _t(2, 3, 67, 32), _t(2, 3, 67, 32)]),
    "views": (lambda x: x.t()[1:, ::2].reshape(-1) * 2.5, lambda: [_t(37, 41)]),
}


@pytest.mark.parametrize("dtype", HALF, ids=["f16", "bf16"])
@pytest.mark.parametrize("name", list(CASES))
def test_representative_half_accuracy(name, dtype):
    fn, make = CASES[name]
    torch.manual_seed(zlib.crc32(name.encode()))
    ins = [t.to(dtype) if t.is_floating_point() else t for t in make()]
    ref = fn(*[up(t) for t in ins])
    e = fn(*ins)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = smelt.compile(fn)(*ins)
    for a, b, r in zip(pytree.tree_leaves(e), pytree.tree_leaves(s), pytree.tree_leaves(ref)):
        assert b.dtype == a.dtype and b.shape == a.shape
        check(name, a, b, r, dtype)


GRAD_CASES = ("layer_norm", "rms_norm", "group_norm", "softmax", "log_softmax", "gelu", "silu_mish", "linear",
              "sdpa_causal", "mse_l1", "cross_entropy", "sum", "addcmul_lerp")


@pytest.mark.parametrize("dtype", HALF, ids=["f16", "bf16"])
@pytest.mark.parametrize("name", GRAD_CASES)
def test_representative_half_gradients(name, dtype):
    """The gradients of the floating inputs (a compiled backward) against
    float64 autograd, for a random output gradient."""
    fn, make = CASES[name]
    torch.manual_seed(zlib.crc32(name.encode()))
    base = [t.to(dtype) if t.is_floating_point() else t for t in make()]
    outs = pytree.tree_leaves(fn(*base))
    gs = [torch.randn(o.shape, dtype=torch.float64) for o in outs]
    grads = []
    for mode in ("ref", "eager", "smelt"):
        ins = [(up(t) if mode == "ref" else t.detach().clone()).requires_grad_() if t.is_floating_point() else t
               for t in base]
        f = smelt.compile(fn) if mode == "smelt" else fn
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ys = pytree.tree_leaves(f(*ins))
        torch.autograd.backward(ys, [g.to(y.dtype) for g, y in zip(gs, ys)])
        grads.append([t.grad for t in ins if t.is_floating_point()])
    for r, e, s in zip(*grads):
        assert s.dtype == e.dtype == dtype
        check(name + " grad", e, s, r, dtype)


# ---------------------------------------------------------------- the bench models in bfloat16

MODELS = ("mlp", "cnn", "gpt2", "bert")


def _model(name):
    from smelt import bench
    if name in ("gpt2", "bert"):
        pytest.importorskip("transformers")
    torch.manual_seed(0)
    w = getattr(bench, "build_" + name)("tiny")
    return w.fn, w.inputs


def _out(y):
    if isinstance(y, torch.Tensor):
        return y
    return y.logits if hasattr(y, "logits") and y.logits is not None else y[0]


@pytest.mark.parametrize("name", MODELS)
def test_bench_model_bf16_inference(name):
    model, inputs = _model(name)
    ref_model = copy.deepcopy(model).double()
    model = model.to(torch.bfloat16)
    ins = [x.to(torch.bfloat16) if x.is_floating_point() else x for x in inputs]
    with torch.no_grad():
        ref = _out(ref_model(*[up(x) for x in ins]))
        e = _out(model(*ins))
        s = _out(smelt.compile(model)(*ins))
    assert s.dtype == e.dtype == torch.bfloat16
    check(name, e, s, ref, torch.bfloat16, slack=0.25)


@pytest.mark.parametrize("name", MODELS)
def test_bench_model_bf16_training_step(name):
    """One step's loss and every parameter's gradient (MLP and CNN in train
    mode: batch statistics; GPT-2 and BERT in eval mode: no dropout, whose
    noise eager and smelt would draw differently)."""
    model, inputs = _model(name)
    if name in ("mlp", "cnn"):
        model.train()
    ref_model = copy.deepcopy(model).double()
    e_model = model.to(torch.bfloat16)
    s_model = copy.deepcopy(e_model)
    ins = [x.to(torch.bfloat16) if x.is_floating_point() else x for x in inputs]
    compiled = smelt.compile(s_model)
    torch.manual_seed(1)
    proj = None

    def step(m, xs):
        nonlocal proj
        y = _out(m(*xs))
        if proj is None:
            proj = torch.randn(y.shape, dtype=torch.float64)
        loss = (y.double() * proj).sum() / y.numel()
        loss.backward()
        return loss

    lr, le, ls = step(ref_model, [up(x) for x in ins]), step(e_model, ins), step(compiled, ins)
    check(name + " loss", le.reshape(1), ls.reshape(1), lr.reshape(1), torch.bfloat16, slack=0.5)
    pe, ps, pr = list(e_model.parameters()), list(s_model.parameters()), list(ref_model.parameters())
    errs_e, errs_s = [], []
    for a, b, r in zip(pe, ps, pr):
        if r.grad is None or not r.grad.abs().sum():
            continue
        assert b.grad is not None and b.grad.dtype == torch.bfloat16
        errs_e.append(L.rel_err(a.grad, r.grad)[0])
        errs_s.append(L.rel_err(b.grad, r.grad)[0])
    me, ms = sum(errs_e) / len(errs_e), sum(errs_s) / len(errs_s)
    assert ms <= me * 1.25 + U[torch.bfloat16] / 8, f"{name}: mean gradient error smelt {ms:.3g}, eager {me:.3g}"


def _every_finite(dtype):
    """Every finite value of a 16-bit float dtype, once."""
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    return bits[torch.isfinite(bits.float())]


SQRT1_2 = math.sqrt(0.5)
# The functions whose half-precision kernels take vmath's float32-only
# erfc tail (vm.half_out): float64 references as eager computes them.
ERFC_FAMILY = {
    "ndtr": (torch.special.ndtr, lambda x: 0.5 * torch.erfc(-x * SQRT1_2)),
    "erfc": (torch.erfc, torch.erfc),
    "erf": (torch.erf, torch.erf),
    "gelu": (F.gelu, lambda x: 0.5 * x * torch.erfc(-x * SQRT1_2)),
}


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(ERFC_FAMILY))
def test_erfc_family_correctly_rounded_on_every_half_value(name, dtype):
    """ndtr, erfc, erf and GELU over every finite float16/bfloat16 input:
    a kernel whose result is half precision computes the erfc tail in
    float32 alone (4 float32 ULPs at most, 2^-8 of a float16 ULP), so every
    result must still be the float64 value correctly rounded (within half
    an ULP of the dtype, ties either way), and non-finite exactly where
    eager's is. "Within half an ULP" allows 2^-8 ULP more: an input whose
    exact result lies that close to a tie between two half values rounds
    either way from any float32 value near it (float32's own last ULP is
    2^-13 of a float16 ULP), while a wrong result is an ULP or more off."""
    f, ref_of = ERFC_FAMILY[name]
    x = _every_finite(dtype)
    with torch.no_grad():
        s = smelt.compile(lambda x: f(x))(x)
        e = f(x)
    assert s.dtype == dtype
    ref = ref_of(x.double())
    fin = torch.isfinite(e.double())
    assert torch.equal(torch.isfinite(s.double()), fin)
    r, sv = ref[fin], s.double()[fin]
    # the ULP of the correctly rounded result (the dtype's smallest
    # subnormal step below its normal range)
    fi = torch.finfo(dtype)
    mag = r.to(dtype).double().abs().clamp_min(fi.tiny)
    ulp = torch.pow(2.0, torch.floor(torch.log2(mag))) * fi.eps
    err = (sv - r).abs() / ulp
    worst = err.argmax()
    assert err.max().item() <= 0.5 + 2.0 ** -8, (
        f"{name} {dtype}: {err.max().item():.3f} ULP at x={x[fin][worst].item()!r} "
        f"(smelt {sv[worst].item()!r}, float64 {r[worst].item()!r})")
