"""CPU autocast in compiled code: `with torch.autocast("cpu", ...)` inside a
traced function, and a compiled function called inside an autocast region
(the state read at trace time and guarded), apply eager's AutocastCPU
rules (torch 2.13's autocast_mode.cpp): matmul/linear/conv/bmm/addmm/
baddbmm/SDPA/prelu cast their floating inputs (not float64) to the
autocast dtype, the losses and other fp32 ops to float32, cat/stack/
index_copy to the widest input; everything else runs in its inputs'
dtypes. Checked against eager autocast: every output's dtype, values
within the low-precision dtype's tolerance, error against a float64
reference no worse than eager's (opinfo_lib.half_accuracy), gradients in
the parameters' float32, training losses, one graph per region."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import opinfo_lib as L
import smelt

LOW = (torch.bfloat16, torch.float16)
TOL = {torch.bfloat16: dict(rtol=2e-2, atol=2e-2), torch.float16: dict(rtol=2e-3, atol=2e-3),
       torch.float32: dict(rtol=1e-3, atol=1e-3), torch.float64: dict(rtol=1e-7, atol=1e-7)}


def _in_region(fn, dtype):
    def f(*xs):
        with torch.autocast("cpu", dtype=dtype):
            return fn(*xs)
    return f


def _one_graph(f, *xs):
    info = smelt.explain(f, *xs)
    assert info["compiles"] and info["graphs"] == 1 and not info["breaks"], info.get("reason")


def _same(e, s, dtype=None):
    e = e if isinstance(e, tuple) else (e,)
    s = s if isinstance(s, tuple) else (s,)
    for a, b in zip(e, s):
        assert b.dtype == a.dtype, (a.dtype, b.dtype)
        assert b.shape == a.shape
        torch.testing.assert_close(b, a, **TOL[a.dtype])


def _w(*shape):
    return torch.randn(*shape)


OPS = {
    "linear": (lambda x, w, b: F.linear(x, w, b), lambda: [_w(5, 37), _w(11, 37), _w(11)]),
    "matmul_at": (lambda a, b: a @ b, lambda: [_w(5, 37), _w(37, 7)]),
    "mm_method": (lambda a, b: a.mm(b), lambda: [_w(5, 37), _w(37, 7)]),
    "bmm": (lambda a, b: torch.bmm(a, b), lambda: [_w(3, 5, 37), _w(3, 37, 7)]),
    "addmm": (lambda c, a, b: torch.addmm(c, a, b), lambda: [_w(7), _w(5, 37), _w(37, 7)]),
    "baddbmm": (lambda c, a, b: torch.baddbmm(c, a, b, alpha=0.5), lambda: [_w(3, 5, 7), _w(3, 5, 37), _w(3, 37, 7)]),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), lambda: [_w(2, 3, 9, 9), _w(4, 3, 3, 3), _w(4)]),
    "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), lambda: [_w(2, 3, 9, 16)] * 3),
    "prelu": (lambda x, w: F.prelu(x, w), lambda: [_w(5, 37), torch.rand(1)]),
    "mse_of_low": (lambda a, b: F.mse_loss(a @ b, torch.zeros(5, 7)), lambda: [_w(5, 37), _w(37, 7)]),
    "cross_entropy_of_low": (lambda x, w, t: F.cross_entropy(x @ w, t), lambda: [_w(5, 37), _w(37, 7), torch.randint(0, 7, (5,))]),
    "l1_smooth": (lambda a, b: (F.l1_loss(a @ b, a[:, :7]), F.smooth_l1_loss(a @ b, a[:, :7])), lambda: [_w(5, 37), _w(37, 7)]),
    "untouched": (lambda x: (x.softmax(-1), F.layer_norm(x, (37,)), x.sum(), x.exp(), F.gelu(x)), lambda: [_w(5, 37)]),
    "low_then_pointwise": (lambda x, w: F.gelu(F.linear(x, w)) * 2 + x[:, :11], lambda: [_w(5, 37), _w(11, 37)]),
    "cat_promote": (lambda a, b: torch.cat([a @ b, b[:5].t()[:, :5]], 1), lambda: [_w(5, 37), _w(37, 5)]),
    "float64_kept": (lambda a, b: a.double() @ b.double(), lambda: [_w(5, 37), _w(37, 7)]),
}


@pytest.mark.parametrize("dtype", LOW, ids=["bf16", "f16"])
@pytest.mark.parametrize("name", list(OPS))
def test_autocast_region_ops(name, dtype):
    fn, make = OPS[name]
    torch.manual_seed(0)
    xs = make()
    f = _in_region(fn, dtype)
    e = f(*xs)
    s = smelt.compile(f)(*xs)
    _same(e, s)
    _one_graph(f, *xs)
    ref = fn(*[x.double() if x.is_floating_point() else x for x in xs])   # no autocast: float64 throughout
    for a, b, r in zip(*[t if isinstance(t, tuple) else (t,) for t in (e, s, ref)]):
        if a.dtype in LOW:
            assert L.half_accuracy(a, b, r, a.dtype, slack=0.25) is None


def test_nested_regions_and_queries():
    x, w = torch.randn(5, 37), torch.randn(11, 37)

    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a = F.linear(x, w)
            on1, dt1 = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")
            with torch.autocast("cpu", enabled=False):
                b = F.linear(x, w)
                on2 = torch.is_autocast_enabled("cpu")
            with torch.autocast("cpu", dtype=torch.float16):
                c = x @ w.t()
                dt3 = torch.get_autocast_dtype("cpu")
            d = x @ w.t()
        on4 = torch.is_autocast_enabled("cpu")
        return a, b, c, d, x @ w.t(), on1, dt1, on2, dt3, on4

    e, s = f(x, w), smelt.compile(f)(x, w)
    assert [t.dtype for t in s[:5]] == [torch.bfloat16, torch.float32, torch.float16, torch.bfloat16, torch.float32]
    assert s[5:] == e[5:]
    _same(e[:5], s[:5])
    _one_graph(f, x, w)


def test_compiled_function_under_outer_autocast_is_guarded():
    lin = nn.Linear(37, 11)
    x = torch.randn(5, 37)

    def g(x):
        return F.relu(lin(x)) @ lin.weight, torch.is_autocast_enabled("cpu")

    cg = smelt.compile(g)
    for state in (None, torch.bfloat16, torch.float16, None, torch.bfloat16):
        if state is None:
            e, s = g(x), cg(x)
        else:
            with torch.autocast("cpu", dtype=state):
                e, s = g(x), cg(x)
                _one_graph(g, x)
        assert s[1] == e[1]
        _same(e[0], s[0])


class Block(nn.Module):
    """A pre-norm transformer block with a classification head, its forward
    in a bfloat16 autocast region."""

    def __init__(self, d=32, h=4, classes=11):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2, self.head = nn.Linear(d, 4 * d), nn.Linear(4 * d, d), nn.Linear(d, classes)

    def forward(self, x, t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            B, T, D = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(D, -1)
            q, k, v = [u.view(B, T, self.h, D // self.h).transpose(1, 2) for u in (q, k, v)]
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
            x = x + self.proj(a)
            x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
            logits = self.head(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), t.reshape(-1))
        return loss, logits


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(37, 64), nn.GELU(), nn.Linear(64, 64), nn.LayerNorm(64), nn.Linear(64, 5))

    def forward(self, x, t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.net(x)
            return F.mse_loss(y, t), y


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_training_under_autocast_matches_eager(kind):
    torch.manual_seed(0)
    if kind == "mlp":
        m, x, t = MLP(), torch.randn(9, 37), torch.randn(9, 5)
    else:
        m, x, t = Block(), torch.randn(2, 7, 32), torch.randint(0, 11, (2, 7))
    me = copy.deepcopy(m)
    _one_graph(m, x, t)
    cm = smelt.compile(m)
    oe, os_ = torch.optim.SGD(me.parameters(), lr=0.1), torch.optim.SGD(m.parameters(), lr=0.1)
    for step in range(4):
        le, ye = me(x, t)
        ls, ys = cm(x, t)
        assert ls.dtype == le.dtype == torch.float32 and ys.dtype == ye.dtype == torch.bfloat16
        torch.testing.assert_close(ls, le, rtol=1e-2, atol=1e-2)
        le.backward()
        ls.backward()
        for pe, ps in zip(me.parameters(), m.parameters()):
            assert ps.grad.dtype == pe.grad.dtype == torch.float32
            assert float((pe.grad - ps.grad).norm()) <= 0.05 * float(pe.grad.norm()) + 1e-4
        oe.step(), os_.step(), oe.zero_grad(), os_.zero_grad()
