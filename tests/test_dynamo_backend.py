"""torch.compile(model, backend="smelt") (python/smelt/_dynamo.py).

Dynamo captures the frame into an FX GraphModule; smelt compiles its
generated forward with its own tracer and op table. Checked here: the bench
models and small Hugging Face GPT-2/BERT match eager and each Dynamo graph
is one smelt graph (no break, nothing eager); training through it uses
smelt's compiled backward and matches eager training step for step; user
code Dynamo splits gives several graphs, each compiled; sizes Dynamo makes
symbolic; a node smelt cannot compile runs eagerly with its reason logged;
the name works without `import smelt` (entry point) and after it with the
entry point hidden (the registry hook); torch.compile's options reach smelt.
"""
import copy
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import smelt
from smelt import bench

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def new_graphs(before):
    return smelt._dynamo.compiled_graphs()[before:]


def stats(cfs, *keys):
    return [{k: cf.stats()[k] for k in keys} for cf in cfs]


def whole(cfs, n=1):
    """n Dynamo graphs, each compiled by smelt as one graph, none eager."""
    assert len(cfs) == n, stats(cfs, "compiles")
    for cf in cfs:
        st = cf.stats()
        assert st["compiles"] >= 1 and st["eager_entries"] == 0 and st["breaks"] == 0, st


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        return next(iter(out.values()))
    return out[0]


@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt2", "bert"])
def test_bench_models_match_eager_as_one_smelt_graph(name):
    if name in ("gpt2", "bert"):
        _transformers()
    torch.manual_seed(0)
    wl = bench.BUILDERS[name]("tiny")
    torch._dynamo.reset()
    before = len(smelt._dynamo.compiled_graphs())
    cf = torch.compile(wl.fn, backend="smelt")
    with torch.no_grad():
        got, ref = cf(*wl.inputs), wl.fn(*wl.inputs)
        again = cf(*[x.clone() for x in wl.inputs])
    assert type(got) is type(ref)
    torch.testing.assert_close(first_tensor(got), first_tensor(ref), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(first_tensor(again), first_tensor(ref), rtol=1e-4, atol=1e-4)
    cfs = new_graphs(before)
    whole(cfs)
    assert cfs[0].stats()["hits"] == 1


def _transformers():
    """The transformers module (these tests skip without it; the others run)."""
    t = pytest.importorskip("transformers")
    t.utils.logging.set_verbosity_error()
    return t


@pytest.mark.parametrize("arch", ["gpt2", "bert"])
def test_hf_models_with_attention_mask_match_eager(arch):
    transformers = _transformers()
    torch.manual_seed(0)
    if arch == "gpt2":
        cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=64)
        m = transformers.GPT2LMHeadModel(cfg).eval()
        kw = {"use_cache": False}
    else:
        cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                      intermediate_size=128, vocab_size=100)
        m = transformers.BertModel(cfg).eval()
        kw = {}
    ids = torch.randint(0, 100, (2, 13))
    mask = torch.ones(2, 13, dtype=torch.long)
    mask[1, 9:] = 0
    torch._dynamo.reset()
    before = len(smelt._dynamo.compiled_graphs())
    cm = torch.compile(m, backend="smelt")
    with torch.no_grad():
        got = cm(ids, attention_mask=mask, **kw)
        ref = m(ids, attention_mask=mask, **kw)
    assert type(got) is type(ref) and list(got.keys()) == list(ref.keys())
    for k in ref.keys():
        torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=1e-4)
    whole(new_graphs(before))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.ln, self.l2 = torch.nn.Linear(24, 48), torch.nn.LayerNorm(48), torch.nn.Linear(48, 5)

    def forward(self, x):
        return self.l2(self.ln(torch.nn.functional.gelu(self.l1(x)))).log_softmax(-1)


def test_training_uses_smelts_backward_and_matches_eager():
    torch.manual_seed(0)
    m = Block()
    ref = copy.deepcopy(m)
    torch._dynamo.reset()
    before = len(smelt._dynamo.compiled_graphs())
    cm = torch.compile(m, backend="smelt")
    opt, opt_ref = torch.optim.AdamW(m.parameters(), lr=1e-2), torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for _ in range(6):
        x, t = torch.randn(7, 24), torch.randint(0, 5, (7,))
        for model, o in ((cm, opt), (ref, opt_ref)):
            loss = torch.nn.functional.nll_loss(model(x), t)
            loss.backward()
            o.step()
            o.zero_grad()
            if model is cm:
                got_loss = loss.item()
        assert got_loss == pytest.approx(loss.item(), rel=1e-5, abs=1e-6)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    cfs = new_graphs(before)
    whole(cfs)
    assert cfs[0].stats()["backward_compiles"] == 1


def test_input_gradients_match_eager():
    def f(x, w):
        return (torch.tanh(x @ w) * x.sum(1, keepdim=True)).softmax(-1)

    x, w = torch.randn(5, 7, requires_grad=True), torch.randn(7, 7, requires_grad=True)
    xe, we = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch._dynamo.reset()
    g = torch.randn(5, 7)
    torch.compile(f, backend="smelt")(x, w).backward(g)
    f(xe, we).backward(g)
    torch.testing.assert_close(x.grad, xe.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w.grad, we.grad, rtol=1e-5, atol=1e-6)


def test_dynamo_graph_breaks_give_several_smelt_graphs():
    seen = []

    def f(x):
        y = torch.relu(x) + 1
        seen.append(y.shape)          # a side effect: Dynamo breaks the graph here
        if y.sum() > 0:               # data-dependent control flow: another break
            return y * 2
        return y - 2

    torch._dynamo.reset()
    before = len(smelt._dynamo.compiled_graphs())
    cf = torch.compile(f, backend="smelt")
    x = torch.randn(6, 5)
    torch.testing.assert_close(cf(x), f(x))
    assert len(seen) == 2
    cfs = new_graphs(before)
    assert len(cfs) >= 2
    whole(cfs, len(cfs))


def test_sizes_dynamo_makes_symbolic():
    def f(x, w):
        y = torch.nn.functional.linear(x, w).relu()
        return y.view(x.shape[0], -1).sum(1) * x.shape[0]

    torch._dynamo.reset()
    before = len(smelt._dynamo.compiled_graphs())
    cf = torch.compile(f, backend="smelt")
    w = torch.randn(8, 6)
    sizes = (3, 5, 9, 17, 33, 34, 35, 36, 37, 38, 39, 40, 41)
    for n in sizes + (1,):
        x = torch.randn(n, 6)
        torch.testing.assert_close(cf(x, w), f(x, w), rtol=1e-5, atol=1e-5)
    # Dynamo: a static graph (3), a dynamic one from the second size on, a
    # static one for size 1; smelt: the dynamic graph's int input read from
    # x, so one symbolic entry serves the 12 sizes after its first
    static, dynamic = new_graphs(before)[:2]
    st = dynamic.stats()
    assert st["entries"] <= 2 and st["dynamic_entries"] == 1 and st["eager_entries"] == 0, st
    assert st["hits"] >= len(sizes) - 3, st


def test_node_smelt_cannot_compile_runs_eagerly_in_the_graph():
    def f(x):
        return torch.fft.rfft(x).abs() * 2 + x.sum()

    torch._dynamo.reset()
    before = len(smelt._dynamo.compiled_graphs())
    x = torch.randn(6, 8)
    torch.testing.assert_close(torch.compile(f, backend="smelt")(x), f(x))
    (cf,) = new_graphs(before)
    st = cf.stats()
    assert st["breaks"] >= 1 and "complex" in st["last_break"], st


def test_options_and_mode_reach_smelt():
    torch._dynamo.reset()
    before = len(smelt._dynamo.compiled_graphs())
    m = torch.nn.Linear(6, 3)
    x = torch.randn(4, 6)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(m, backend="smelt", options={"weight_packing": "never"})(x), m(x))
    (cf,) = new_graphs(before)
    assert smelt._api._live[cf].options == {"weight_packing": "never"}
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown option 'bogus'"):
        torch.compile(m, backend="smelt", options={"bogus": 1})(x)
    torch._dynamo.reset()
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(m, backend="smelt", mode="max-autotune")(x), m(x))


def run_python(code, **env):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=300, cwd=REPO, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def test_backend_name_without_import_smelt_logs_graphs_and_breaks():
    out = run_python("""
        import sys, torch
        def f(x):
            return torch.fft.rfft(x).abs().sum(-1) + torch.tanh(x).sum(-1)
        x = torch.randn(3, 8)
        got = torch.compile(f, backend="smelt")(x)
        assert torch.allclose(got, f(x), atol=1e-5)
        print("smelt" in sys.modules, sys.modules["smelt"].__file__)
    """, SMELT_LOGS="dynamo,graph_breaks")
    loaded, path = out.stdout.split()
    assert loaded == "True" and path == os.path.join(REPO, "python", "smelt", "__init__.py")
    assert "[smelt.dynamo] graph 0:" in out.stderr, out.stderr
    assert "complex64 is not supported" in out.stderr, out.stderr


def test_import_smelt_registers_without_the_entry_point():
    out = run_python("""
        import importlib.metadata as md, sys
        real = md.entry_points
        md.entry_points = lambda **kw: real(**kw) if kw.get("group") != "torch_dynamo_backends" else \\
            md.EntryPoints(())
        import torch, smelt
        assert "torch._dynamo.backends.registry" not in sys.modules
        m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        x = torch.randn(2, 4)
        with torch.no_grad():
            assert torch.allclose(torch.compile(m, backend="smelt")(x), m(x))
        print(len(smelt._dynamo.compiled_graphs()))
    """)
    assert out.stdout.split() == ["1"]


def test_activation_checkpoint_region_compiles_inline_with_eager_gradients():
    import torch.utils.checkpoint as cp
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)

    def f(x):
        y = cp.checkpoint(lambda t: torch.tanh(lin(t)) * t, x, use_reentrant=False)
        return (y * y).sum()

    x = torch.randn(5, 8, requires_grad=True)
    xe = x.detach().clone().requires_grad_()
    torch._dynamo.reset()
    before = len(smelt._dynamo.compiled_graphs())
    got = torch.compile(f, backend="smelt")(x)
    got.backward()
    grads = [x.grad] + [p.grad.clone() for p in lin.parameters()]
    lin.zero_grad()
    ref = f(xe)
    ref.backward()
    torch.testing.assert_close(got, ref)
    for g, r in zip(grads, [xe.grad] + [p.grad for p in lin.parameters()]):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6)
    whole(new_graphs(before))


def test_no_grad_region_in_the_graph_compiles():
    inv = torch.rand(4) + 0.5

    def f(x, w):
        with torch.no_grad():   # Dynamo: torch._C._set_grad_enabled(False) ... (True) in the graph
            table = (torch.arange(x.shape[0], dtype=torch.float32)[:, None] * inv).cos()
        return ((x @ w) * table).sum()

    x, w = torch.randn(6, 3, requires_grad=True), torch.randn(3, 4, requires_grad=True)
    xe, we = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch._dynamo.reset()
    before = len(smelt._dynamo.compiled_graphs())
    torch.compile(f, backend="smelt")(x, w).backward()
    f(xe, we).backward()
    torch.testing.assert_close(x.grad, xe.grad)
    torch.testing.assert_close(w.grad, we.grad)
    assert torch.is_grad_enabled()
    whole(new_graphs(before))


def test_flex_attention_graph_runs_its_vmap_part_eagerly():
    """Dynamo's graph of flex_attention builds the block mask with vmap
    (functorch-wrapped tensors, which have no storage): those nodes run
    eagerly, never as graph inputs, and the result is eager's."""
    from torch.nn.attention.flex_attention import flex_attention

    def rel(score, b, h, q, kv):
        return score + (q - kv) * 0.1

    def f(q, k, v):
        return flex_attention(q, k, v, score_mod=rel)

    q, k, v = (torch.randn(1, 2, 64, 16) for _ in range(3))
    torch._dynamo.reset()
    before = len(smelt._dynamo.compiled_graphs())
    with warnings.catch_warnings():   # torch's "flex_attention called without torch.compile()"
        warnings.simplefilter("ignore")
        got, ref = torch.compile(f, backend="smelt")(q, k, v), f(q, k, v)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    # (in some runs Dynamo drops the frame's graph after compiling it, in
    # torch's own flex code, and runs f eagerly: then no graph is left)
    for cf in new_graphs(before):
        assert "functorch-wrapped" in cf.stats()["last_break"]


def test_functorch_wrapped_arguments_run_eagerly():
    """vmap / grad over a smelt-compiled function: the wrapped tensors have
    no storage; a new trace breaks on them, and an entry compiled for plain
    tensors (whose guards they pass) is not run on them."""
    def f(x):
        return torch.sin(x) * 2 + 1

    x = torch.randn(5, 3)
    cf = smelt.compile(f)
    torch.testing.assert_close(cf(x[0]), f(x[0]))
    torch.testing.assert_close(torch.vmap(cf)(x), f(x))
    torch.testing.assert_close(torch.func.grad(lambda t: cf(t).sum())(x[0]), 2 * torch.cos(x[0]))
    fresh = smelt.compile(f)
    torch.testing.assert_close(torch.vmap(fresh)(x), f(x))
    st = fresh._smelt.stats()
    assert st["eager_entries"] == 1 and "functorch-wrapped" in st["last_break"], st


def test_hf_gpt2_training_steps_match_eager():
    transformers = _transformers()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=64,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    m = transformers.GPT2LMHeadModel(cfg).train()
    ref = copy.deepcopy(m)
    torch._dynamo.reset()
    before = len(smelt._dynamo.compiled_graphs())
    cm = torch.compile(m, backend="smelt")
    opt, opt_ref = torch.optim.AdamW(m.parameters(), lr=1e-3), torch.optim.AdamW(ref.parameters(), lr=1e-3)
    for _ in range(3):
        ids = torch.randint(0, 100, (2, 12))
        losses = []
        for model, o in ((cm, opt), (ref, opt_ref)):
            loss = model(ids, labels=ids, use_cache=False).loss
            loss.backward()
            o.step()
            o.zero_grad()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-4)
    cfs = new_graphs(before)
    whole(cfs, len(cfs))
    assert all(cf.stats()["backward_compiles"] == 1 for cf in cfs)


def test_autocast_region_in_the_graph_compiles_with_eager_values_and_gradients():
    torch.manual_seed(0)
    lin, ln = torch.nn.Linear(16, 32), torch.nn.LayerNorm(32)

    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):   # Dynamo: _enter_autocast/_exit_autocast calls
            h = torch.relu(lin(x))
            y = ln(h)
        return (y.float() * x.sum()).sum(), h

    x = torch.randn(6, 16)
    torch._dynamo.reset()
    before = len(smelt._dynamo.compiled_graphs())
    loss, h = torch.compile(f, backend="smelt")(x)
    loss.backward()
    grads = [p.grad.clone() for p in (*lin.parameters(), *ln.parameters())]
    for p in (*lin.parameters(), *ln.parameters()):
        p.grad = None
    ref_loss, ref_h = f(x)
    ref_loss.backward()
    assert h.dtype == ref_h.dtype == torch.bfloat16
    torch.testing.assert_close(h, ref_h)
    torch.testing.assert_close(loss, ref_loss, rtol=2e-2, atol=1e-2)
    for g, p in zip(grads, (*lin.parameters(), *ln.parameters())):
        assert g.dtype == p.grad.dtype == torch.float32
        torch.testing.assert_close(g, p.grad, rtol=3e-2, atol=3e-2)
    assert not torch.is_autocast_enabled("cpu")
    whole(new_graphs(before))


def test_graph_with_more_inputs_than_a_call_takes_compiles_whole():
    """40 Linear layers: Dynamo passes 81 inputs (weights, biases, x); smelt
    takes them as one tuple and traces forward inline."""
    torch.manual_seed(0)
    m = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(40)])
    x = torch.randn(3, 8, requires_grad=True)
    xe = x.detach().clone().requires_grad_()
    torch._dynamo.reset()
    before = len(smelt._dynamo.compiled_graphs())
    cm = torch.compile(m, backend="smelt")
    got = cm(x)
    got.sum().backward()
    grads = [x.grad] + [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    ref = m(xe)
    ref.sum().backward()
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, [xe.grad] + [p.grad for p in m.parameters()]):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)
    whole(new_graphs(before))


def test_function_with_more_parameters_than_smelt_binds_runs_eagerly():
    ns = {}
    exec("def f(" + ", ".join(f"a{i}" for i in range(70)) + "):\n    return a0 * 2 + a69", ns)
    xs = [torch.randn(3) for _ in range(70)]
    cf = smelt.compile(ns["f"])
    torch.testing.assert_close(cf(*xs), ns["f"](*xs))
    assert "70 parameters" in cf._smelt.stats()["last_break"]
