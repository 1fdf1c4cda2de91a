"""smelt.compile on functions and modules vs eager Python.

Each case runs eagerly and compiled on random inputs and compares values and
output structure, and checks a graph really was compiled (no eager entry).
Recompile, soundness and fallback behaviour is tested below the corpus.
"""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import smelt

G = torch.Generator().manual_seed(0)


def rnd(*shape):
    return torch.randn(*shape, generator=G)


SCALE = 0.5
FLAGS = {"relu": True}


def helper(a, b=2.0):
    return a * b + 1


def loop_range(a):
    acc = a
    for i in range(3):
        acc = acc + a * i
    return acc


def fn_cases():
    """(name, function, args) triples."""
    x, y, v, w = rnd(4, 5), rnd(4, 5), rnd(5), rnd(5, 3)
    c = [
        ("add", lambda a, b: a + b, (x, y)),
        ("scalar_ops", lambda a: (a * 2 - 1) / 3 + 0.5, (x,)),
        ("rsub", lambda a: 1 - a, (x,)),
        ("rdiv", lambda a: 2 / (a.abs() + 1), (x,)),
        ("pow", lambda a: a ** 2 + a.abs() ** 0.5, (x,)),
        ("neg", lambda a: -a, (x,)),
        ("broadcast", lambda a, b: a * b, (x, v)),
        ("matmul_op", lambda a, b: a @ b, (x, w)),
        ("matmul_vec", lambda a, b: a @ b, (x, v)),
        ("torch_fns", lambda a: torch.exp(torch.sin(a)) + torch.tanh(a), (x,)),
        ("methods", lambda a: a.exp().log1p().sqrt(), (x,)),
        ("sigmoid_relu", lambda a: torch.sigmoid(a) * F.relu(a), (x,)),
        ("gelu", lambda a: F.gelu(a), (x,)),
        ("gelu_tanh", lambda a: F.gelu(a, approximate="tanh"), (x,)),
        ("silu", lambda a: F.silu(a), (x,)),
        ("softmax", lambda a: F.softmax(a, dim=-1), (x,)),
        ("softmax0", lambda a: torch.softmax(a, 0), (x,)),
        ("log_softmax", lambda a: a.log_softmax(-1), (x,)),
        ("layer_norm", lambda a: F.layer_norm(a, (5,)), (x,)),
        ("sum_dim", lambda a: a.sum(dim=1, keepdim=True), (x,)),
        ("sum_all", lambda a: a.sum(), (x,)),
        ("mean_var", lambda a: (a.mean(-1), a.var(-1), a.std(0, unbiased=False)), (x,)),
        ("max_dim", lambda a: a.max(dim=1), (x,)),
        ("max_all", lambda a: torch.max(a), (x,)),
        ("amax_argmax", lambda a: (a.amax(0), a.argmax(-1)), (x,)),
        ("maximum", lambda a, b: torch.maximum(a, b), (x, y)),
        ("compare", lambda a, b: (a > b, a <= 0.5, a == b), (x, y)),
        ("where", lambda a, b: torch.where(a > 0, a, b), (x, y)),
        ("masked_fill", lambda a: a.masked_fill(a < 0, 0.0), (x,)),
        ("clamp", lambda a: a.clamp(-0.5, 0.5) + a.clamp(min=0), (x,)),
        ("view", lambda a: a.view(20) * 2, (x,)),
        ("reshape_neg", lambda a: a.reshape(2, -1), (x,)),
        ("permute", lambda a: a.reshape(2, 2, 5).permute(2, 0, 1) + 1, (x,)),
        ("transpose", lambda a: a.transpose(0, 1).exp(), (x,)),
        ("t_and_T", lambda a: a.t() + a.T, (x,)),
        ("unsqueeze", lambda a: a.unsqueeze(0).unsqueeze(-1) * 2, (x,)),
        ("squeeze", lambda a: a.reshape(1, 4, 1, 5).squeeze() + 0, (x,)),
        ("flatten", lambda a: a.reshape(2, 2, 5).flatten(1), (x,)),
        ("expand", lambda a: a.reshape(4, 1, 5).expand(4, 3, 5) * 1, (x,)),
        ("index_int", lambda a: a[1] + a[-1], (x,)),
        ("index_slice", lambda a: a[1:3, ::2] * 2, (x,)),
        ("index_none_ellipsis", lambda a: a[None, ..., 1:] + 0, (x,)),
        ("cat", lambda a, b: torch.cat([a, b], dim=1), (x, y)),
        ("cat_many", lambda a: torch.cat([a, a * 2, a * 3], 0), (x,)),
        ("stack", lambda a, b: torch.stack((a, b), dim=0), (x, y)),
        ("split", lambda a: a.split(2, dim=0), (x,)),
        ("chunk", lambda a: torch.chunk(a, 2, dim=1), (x,)),
        ("to_dtype", lambda a: a.to(torch.float64) * 2, (x,)),
        ("half", lambda a: a.half().float(), (x,)),
        ("zeros_like", lambda a: a + torch.zeros_like(a) + torch.ones_like(a), (x,)),
        ("full", lambda a: a + torch.full((4, 5), 2.0), (x,)),
        ("tril", lambda a: torch.tril(a) + a.triu(1), (x,)),
        ("shape_math", lambda a: a * (a.shape[0] * a.size(1)), (x,)),
        ("size_dim", lambda a: a.reshape(a.size(0), -1, 1).sum(a.dim() - 1), (x,)),
        ("helper", lambda a: helper(a) + helper(a, b=3.0), (x,)),
        ("global_const", lambda a: a * SCALE, (x,)),
        ("global_dict", lambda a: F.relu(a) if FLAGS["relu"] else a, (x,)),
        ("if_shape", lambda a: a * 2 if a.shape[0] > 2 else a, (x,)),
        ("loop_range", loop_range, (x,)),
        ("tuple_return", lambda a, b: (a + b, (a - b, a * b)), (x, y)),
        ("list_return", lambda a: [a, a + 1], (x,)),
        ("dict_return", lambda a: {"y": a * 2, "n": 3}, (x,)),
        ("const_return", lambda a: (a + 1, None, "ok"), (x,)),
        ("math_fn", lambda a: a * math.sqrt(2.0) + math.pi, (x,)),
        ("fstring_isinstance", lambda a: a + len(f"{a.shape[0]}") if isinstance(a, torch.Tensor) else a, (x,)),
        ("kwargs", lambda a, *, k=2: a * k, (x,)),
        ("int_ops", lambda a: (a // 3, a % 3, a & 5, a << 1), (torch.randint(-9, 9, (4, 5), generator=G),)),
        ("bool_ops", lambda a: ~a | (a & a), (torch.rand(4, 5, generator=G) > 0.5,)),
        ("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v), (rnd(2, 3, 6, 8), rnd(2, 3, 7, 8), rnd(2, 3, 7, 8))),
        ("sdpa_causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), (rnd(2, 6, 8), rnd(2, 6, 8), rnd(2, 6, 8))),
        ("transposed_input", lambda a: a.exp() + 1, (rnd(5, 4).T,)),
        ("sliced_input", lambda a: a * 2, (rnd(6, 10)[:, ::3],)),
        ("zero_size", lambda a: a + 1, (rnd(0, 3),)),
        ("bf16", lambda a: (a * 2).sum(-1), (rnd(4, 5).bfloat16(),)),
    ]
    return c


def unpack_loop(a, b):
    out = []
    for i, (p, q) in enumerate(zip([a, b], [b, a])):
        out.append(p * q + i)
    return out[0] - out[1]


def varargs(*xs, scale=1.0):
    acc = 0
    for x in xs:
        acc = acc + x * scale
    return acc


def kwonly(a, **kw):
    return a * kw["m"] + kw["b"]


def closure_maker(k):
    def f(a):
        return a * k
    return f


EXTRA = [
    ("unpack_loop", unpack_loop, (rnd(3, 4), rnd(3, 4)), {}),
    ("varargs", varargs, (rnd(3), rnd(3), rnd(3)), {"scale": 2.0}),
    ("kwonly", kwonly, (rnd(3),), {"m": 2.0, "b": 1.0}),
    ("closure", closure_maker(3.0), (rnd(3),), {}),
]


def check(got, ref):
    """got equals ref: same types and structure (dict key order too),
    tensors close with equal dtype and shape."""
    assert type(got) is type(ref), (type(got), type(ref))
    if isinstance(ref, torch.Tensor):
        assert got.dtype == ref.dtype and got.shape == ref.shape, (got.dtype, got.shape, ref.dtype, ref.shape)
        tol = 1e-2 if ref.dtype in (torch.float16, torch.bfloat16) else 1e-5
        torch.testing.assert_close(got, ref, rtol=tol, atol=tol, equal_nan=True)
    elif isinstance(ref, (tuple, list)):
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            check(g, r)
    elif isinstance(ref, dict):
        assert list(got.keys()) == list(ref.keys())
        for k in ref:
            check(got[k], ref[k])
    else:
        assert got == ref


@pytest.mark.parametrize("name,fn,args", fn_cases(), ids=[c[0] for c in fn_cases()])
def test_function(name, fn, args):
    ref = fn(*args)
    cf = smelt.compile(fn)
    got = cf(*args)
    check(got, ref)
    st = cf._smelt.stats()
    assert st["compiles"] == 1 and st["eager_entries"] == 0, st
    check(cf(*args), ref)   # second call hits the cache
    assert cf._smelt.stats()["hits"] == 1


@pytest.mark.parametrize("name,fn,args,kw", EXTRA, ids=[c[0] for c in EXTRA])
def test_function_calling_conventions(name, fn, args, kw):
    ref = fn(*args, **kw)
    cf = smelt.compile(fn)
    check(cf(*args, **kw), ref)
    assert cf._smelt.stats()["compiles"] == 1, cf._smelt.stats()


# ---------------------------------------------------------------- modules

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Dropout(0.1), nn.Linear(32, 8), nn.Tanh())

    def forward(self, x):
        return self.net(x)


class Block(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q = q.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, D // self.heads).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(n)])
        self.norm = nn.RMSNorm(32)
        self.head = nn.Linear(32, 11, bias=False)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(self.norm(x))


class Flags(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0
        self.use_relu = True
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        y = self.lin(x) * self.scale
        return F.relu(y) if self.use_relu else y


@pytest.mark.parametrize("cls,shape", [(MLP, (5, 16)), (Block, (2, 7, 32)), (Decoder, (2, 9, 32)), (Flags, (3, 6))],
                         ids=["mlp", "block", "decoder", "flags"])
def test_module(cls, shape):
    m = cls().eval()
    x = rnd(*shape)
    cm = smelt.compile(m)
    with torch.no_grad():
        ref = m(x)
        check(cm(x), ref)
    st = cm._smelt.stats()
    assert st["compiles"] == 1 and st["eager_entries"] == 0, st


def test_module_wrapper_behaves_like_original():
    m = MLP()
    cm = smelt.compile(m)
    assert [p is q for p, q in zip(cm.parameters(), m.parameters())] == [True] * 4
    assert cm.state_dict().keys() == m.state_dict().keys()
    cm.eval()
    assert not m.training and not cm.training
    assert cm.net is m.net
    assert "MLP" in repr(cm)


def test_identical_layers_share_one_graph_shape():
    """Parameters are graph inputs: a model with new weights of the same
    shapes reuses the compiled entry (no recompile)."""
    a, b = Decoder().eval(), Decoder().eval()
    cf = smelt._C.CompiledFunction(Decoder.forward)
    x = rnd(2, 5, 32)
    with torch.no_grad():
        check(cf(a, x), a(x))
        check(cf(b, x), b(x))
    assert cf.stats()["compiles"] == 1 and cf.stats()["hits"] == 1


def test_optimizer_step_does_not_recompile():
    m = MLP().eval()
    cm = smelt.compile(m)
    x = rnd(4, 16)
    with torch.no_grad():
        cm(x)
        for p in m.parameters():
            p.add_(0.1)   # in-place update, like an optimizer step
        check(cm(x), m(x))
    assert cm._smelt.stats()["compiles"] == 1


# ---------------------------------------------------------------- recompiles and soundness

def test_new_shape_and_dtype_recompile_once():
    cf = smelt.compile(lambda a: a * 2 + 1)
    for shape, dt in [((3, 4), torch.float32), ((3, 4), torch.float32), ((5, 4), torch.float32), ((5, 4), torch.float64)]:
        x = torch.randn(*shape, dtype=dt, generator=G)
        check(cf(x), x * 2 + 1)
    st = cf._smelt.stats()
    assert st["compiles"] == 3 and st["hits"] == 1, st


def test_non_contiguous_input_recompiles():
    cf = smelt.compile(lambda a: a.exp())
    x = rnd(4, 6)
    check(cf(x), x.exp())
    check(cf(x.T), x.T.exp())
    assert cf._smelt.stats()["compiles"] == 2


def test_changed_global_changes_result():
    global SCALE
    cf = smelt.compile(lambda a: a * SCALE)
    x = rnd(3)
    check(cf(x), x * 0.5)
    SCALE = 3.0
    try:
        check(cf(x), x * 3.0)
    finally:
        SCALE = 0.5
    assert cf._smelt.stats()["compiles"] == 2


def test_changed_module_attribute_and_flag():
    m = Flags().eval()
    cm = smelt.compile(m)
    x = rnd(3, 6)
    with torch.no_grad():
        check(cm(x), m(x))
        m.scale = 5.0
        check(cm(x), m(x))
        m.use_relu = False
        check(cm(x), m(x))
    assert cm._smelt.stats()["compiles"] == 3


def test_changed_closure_cell():
    k = 2.0

    def f(a):
        return a * k

    cf = smelt.compile(f)
    x = rnd(3)
    check(cf(x), x * 2.0)
    k = 4.0
    check(cf(x), x * 4.0)


def test_module_training_flag_guarded():
    m = MLP()
    cm = smelt.compile(m)
    x = rnd(2, 16)
    with torch.no_grad():
        m.eval()
        check(cm(x), m(x))
        m.train()   # a new entry: dropout draws random numbers now
        torch.manual_seed(3)
        y = cm(x)
        torch.manual_seed(3)
        check(y, m(x))
        m.eval()
        check(cm(x), m(x))
    st = cm._smelt.stats()
    assert st["entries"] == 2 and st["compiles"] == 2 and st["hits"] == 1, st


def test_recompile_limit_falls_back_to_eager():
    cf = smelt.compile(lambda a: a + 1, dynamic=False)   # (each size its own entry)
    with pytest.warns(RuntimeWarning, match="recompiled"):
        for n in range(1, 12):
            x = rnd(n)
            check(cf(x), x + 1)
    assert cf._smelt.stats()["entries"] == 8


# ---------------------------------------------------------------- fallback

def data_dependent(a):
    if a.sum() > 0:
        return a * 2
    return a * 3


def uses_print(a):
    print("hello", end="")
    return a + 1


@pytest.mark.parametrize("fn", [data_dependent, uses_print])
def test_unsupported_breaks_the_graph(fn, capsys):
    x, x2 = rnd(3, 4), None
    x2 = x.clone()
    ref = fn(x2)
    cf = smelt.compile(fn)
    got = cf(x)
    check(got, ref)
    st = cf._smelt.stats()
    assert st["breaks"] >= 1 and st["last_break"], st


def test_fullgraph_raises_with_reason():
    cf = smelt.compile(data_dependent, fullgraph=True)
    with pytest.raises(RuntimeError, match="tensor data"):
        cf(rnd(3))


def test_grad_mode_inputs_run_eagerly_with_grad():
    m = nn.Linear(4, 2)
    cm = smelt.compile(m)
    x = rnd(3, 4)
    y = cm(x)
    y.sum().backward()
    assert m.weight.grad is not None


def test_disable_env(monkeypatch):
    monkeypatch.setenv("SMELT_DISABLE", "1")
    f = lambda a: a + 1   # noqa: E731
    assert smelt.compile(f) is f


def test_reset_drops_entries():
    cf = smelt.compile(lambda a: a - 1)
    cf(rnd(2))
    smelt.reset()
    assert cf._smelt.stats()["entries"] == 0
    check(cf(torch.ones(2)), torch.zeros(2))


def test_bad_arguments_raise():
    cf = smelt.compile(lambda a, b: a + b)
    with pytest.raises(TypeError):
        cf(rnd(2))
    with pytest.raises(TypeError):
        smelt.compile(42)


def test_compiled_function_keeps_identity_and_binds_as_method():
    def scale(a):
        """doc"""
        return a * 2

    cf = smelt.compile(scale)
    assert cf.__name__ == "scale" and cf.__wrapped__ is scale and cf._smelt is cf

    class Holder:
        k = 3.0

        @smelt.compile
        def apply(self, a):
            return a * self.k

    x = rnd(4)
    h = Holder()
    check(h.apply(x), x * 3.0)
    check(Holder.apply(h, x), x * 3.0)


# ---------------------------------------------------------------- frames under the hook

def _heavy(a, b):
    return torch.softmax(a @ b, dim=-1) * 2


def _breaks_then_calls(a, b):
    for _ in range(1):
        print("", end="")   # a graph break in a loop: this frame runs eagerly
    return _heavy(a, b) + 1


def test_functions_called_from_an_eager_frame_are_compiled():
    a, b = rnd(8, 16), rnd(16, 8)
    cf = smelt.compile(_breaks_then_calls)
    for _ in range(3):
        check(cf(a, b), _breaks_then_calls(a, b))
    assert cf._smelt.stats()["eager_entries"] == 1
    inner = smelt._C.CompiledFunction.of(_heavy)
    assert inner is not None
    st = inner.stats()
    assert st["compiles"] == 1 and st["eager_entries"] == 0 and st["hits"] >= 2, st


class _PrintingModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = MLP()

    def forward(self, x):
        for _ in range(1):
            print("", end="")   # breaks the outer forward in a loop: it runs eagerly
        return self.inner(x) * 2


def test_submodule_of_an_eager_forward_is_compiled():
    m = _PrintingModel().eval()
    cm = smelt.compile(m)
    x = rnd(3, 16)
    with torch.no_grad():
        for _ in range(2):
            check(cm(x), m(x))
    inner = smelt._C.CompiledFunction.of(MLP.forward)
    assert inner is not None and inner.stats()["compiles"] >= 1


def test_closures_called_from_an_eager_frame_run_normally():
    k = 3.0

    def scaled(a):
        return a * k

    def outer(a):
        print("", end="")
        return scaled(a)

    cf = smelt.compile(outer)
    x = rnd(4)
    check(cf(x), x * 3.0)
    k = 5.0
    check(cf(x), x * 5.0)
    assert smelt._C.CompiledFunction.of(scaled) is None   # closures are left alone


def test_hook_is_off_after_the_call():
    cf = smelt.compile(_breaks_then_calls)
    cf(rnd(2, 16), rnd(16, 2))
    assert not smelt._C._hook_installed()
