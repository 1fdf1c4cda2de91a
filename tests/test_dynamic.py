"""Dynamic shapes: one compiled entry serves every value of a size.

Each function is compiled with dynamic=True (sizes of tensor arguments
are symbols from the first call) and called with many sizes, 0, 1, primes
and sizes that do and do not fill a vector among them; every result is
compared with eager's, and the compile count shows that one symbolic entry
served the sizes >= 2 (0 and 1 are specialised, as torch does: at most one
entry each). Then the policy (dynamic=None / True / False, mark_dynamic,
mark_static), the guards on symbols (branches on sizes, sizes that met in
one op, duck-sized inputs that stop being equal), the recompile limit, the
dynamic log channel, and Hugging Face GPT-2 / BERT over many lengths, the
CNN over many batch sizes and a Llama decoding with its KV cache.
"""
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import smelt

SIZES = [5, 2, 3, 8, 16, 17, 31, 64, 0, 1]   # (5 first: no other size of the cases is 5)
NONEMPTY = [s for s in SIZES if s]


def rnd(*shape, gen=None):
    return torch.randn(*shape, generator=gen)


def check(fn, make, sizes=SIZES, max_compiles=3, dynamic=True, atol=1e-5):
    """fn compiled (dynamic) against eager over sizes; make(T) gives the args."""
    torch.manual_seed(0)
    cf = smelt.compile(fn, dynamic=dynamic)
    for T in sizes:
        args = make(T)
        want = fn(*args)
        got = cf(*args)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (T, g.shape, w.shape)
            torch.testing.assert_close(g, w, atol=atol, rtol=1e-5, msg=f"size {T}")
    st = cf.stats()
    assert st["compiles"] <= max_compiles, st
    assert st["dynamic_entries"] >= 1, st
    return st


W8 = torch.randn(8, 8)
B8 = torch.randn(8)


CASES = {
    "pointwise_broadcast": (lambda x, b: (torch.relu(x * 2 + b).sigmoid() - x.exp() / 3, x.tanh().abs() + b),
                            lambda T: (rnd(3, T, 8), rnd(8))),
    "reductions": (lambda x: (x.sum(1), x.amax(-1), x.mean(1, keepdim=True), x.argmax(1), x.std(-1),
                              (x > 0).any(1)),
                   lambda T: (rnd(3, T, 8),)),
    "softmax_layer_norm": (lambda x: (x.softmax(1), x.log_softmax(-1), F.layer_norm(x, (8,), W8[0], B8)),
                           lambda T: (rnd(3, T, 8),)),
    "matmul": (lambda x, y: (x @ W8, x.transpose(1, 2) @ y, torch.bmm(x, y.transpose(1, 2))),
               lambda T: (rnd(3, T, 8), rnd(3, T, 8))),
    "views": (lambda x: (x.view(x.size(0), -1) * 2, x.reshape(-1, 8) + 1, x.permute(2, 0, 1).contiguous(),
                         x.unsqueeze(1).expand(3, 2, x.shape[1], 8) * 1, x.flatten(0, 1) - 1,
                         x.transpose(0, 1).reshape(x.shape[1], 24)),
              lambda T: (rnd(3, T, 8),)),
    "size_arithmetic": (lambda x: (x.view(3, x.size(1), 2, 4).sum(-1), x[:, : x.size(1) // 2] * 1,
                                   x + x.shape[1], x.new_zeros(x.shape) + x, torch.zeros(x.shape[0], x.shape[1], 1) + x),
                        lambda T: (rnd(3, T, 8),)),
    "slicing": (lambda x: (x[:, 1:] * 1, x[:, -2:] + 0, x[:, 0] * 2, x[:, -1] + 1, x[:, ::2] * 3, x[:, :-1] - 1,
                           x[..., 2:5] * 1),
                lambda T: (rnd(3, T, 8),)),
    "cat": (lambda x, y: (torch.cat([x, y * 2], 1), torch.cat([x, x], 0), torch.stack([x, y], 0).sum(0)),
            lambda T: (rnd(3, T, 8), rnd(3, T, 8))),
    "arange_masks": (lambda x: (x + torch.arange(x.shape[1]).view(1, -1, 1),
                                (x @ x.transpose(1, 2)).masked_fill(
                                    torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1), -1e9).softmax(-1),
                                torch.full((x.shape[1], x.shape[1]), 2.0).tril() @ x[0]),
                     lambda T: (rnd(3, T, 8),)),
    "sdpa": (lambda q, k, v: (F.scaled_dot_product_attention(q, k, v, is_causal=True),
                              F.scaled_dot_product_attention(q, k, v)),
             lambda T: (rnd(2, 4, T, 16), rnd(2, 4, T, 16), rnd(2, 4, T, 16))),
}


# Sizes eager rejects (argmax of nothing, x[:, 0] of nothing) are left out;
# a softmax over an empty dim is a graph break of its own (the entry for
# size 0 is a partial one and its continuation: one compile more).
# x[:, : T // 2] makes a size T // 2, symbolic only while it is >= 2: T = 2
# and 3 share one more entry, where it is 1.
SIZES_OF = {"reductions": NONEMPTY, "slicing": NONEMPTY}
MAX_OF = {"softmax_layer_norm": 4, "arange_masks": 4, "size_arithmetic": 4}


CONV = torch.nn.Conv2d(3, 8, 3, padding=1).requires_grad_(False)   # (inference: a backward is static)
CONV2 = torch.nn.Conv2d(8, 4, 3, stride=2).requires_grad_(False)

CASES.update({
    "pad": (lambda x: (F.pad(x, (1, 2)), F.pad(x, (2, 1), mode="replicate"), F.pad(x, (-1, 1)),
                       F.pad(x.unsqueeze(0), (1, 1), mode="reflect"), F.pad(x.unsqueeze(0), (2, 2), mode="circular")),
            lambda T: (rnd(3, T),)),
    "unfold_diagonal_flip": (lambda x: (x.unfold(1, 3, 2) * 1, torch.diagonal(x @ x.transpose(0, 1), 1) + 0,
                                        torch.diagonal(x[:, :4].t() @ x[:, :4], -1) * 1, x.flip(1) * 2),
                             lambda T: (rnd(4, T),)),
    "conv_spatial": (lambda x: (CONV2(torch.relu(CONV(x))),), lambda T: (rnd(2, 3, T, T + 3),)),
})
GN = torch.nn.GroupNorm(2, 4)
CASES.update({
    "group_norm_roll_index_fill": (lambda x: (GN(x), torch.roll(x, 2, 2), torch.roll(x, -1, 2) * 2,
                                              x.index_fill(2, torch.tensor([0, 2]), -1.0)),
                                   lambda T: (rnd(2, 4, T),)),
    "norms_and_losses": (lambda x, t: (F.normalize(x, dim=0), F.cross_entropy(x, t), x.norm(dim=1),
                                       F.mse_loss(x, x.flip(0)), torch.logsumexp(x, 0)),
                         lambda T: (rnd(T, 6), torch.randint(0, 6, (T,)))),
    "gather_scatter": (lambda x, i: (x.index_select(0, i) * 2, torch.gather(x, 1, i[:, None].expand(-1, 4) % 4),
                                     x[i] + 1, torch.zeros(5, 4).index_add(0, i % 5, x), x.cumsum(0), x.sort(0).values),
                       lambda T: (rnd(T, 4), torch.randint(0, T, (T,)))),
})
SIZES_OF.update({"unfold_diagonal_flip": [s for s in NONEMPTY if s >= 3], "pad": [s for s in NONEMPTY if s >= 3],
                 "conv_spatial": [9, 4, 12, 17, 33], "group_norm_roll_index_fill": [s for s in NONEMPTY if s >= 3],
                 "gather_scatter": NONEMPTY, "norms_and_losses": NONEMPTY})


@pytest.mark.parametrize("name", sorted(CASES))
def test_ops_over_symbolic_sizes(name):
    fn, make = CASES[name]
    check(fn, make, sizes=SIZES_OF.get(name, SIZES), max_compiles=MAX_OF.get(name, 3))


POOL_NET = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1), torch.nn.Conv2d(8, 8, 3),
    torch.nn.AvgPool2d(2), torch.nn.Conv2d(8, 8, 1), torch.nn.AvgPool2d(3, 1, 1), torch.nn.AdaptiveAvgPool2d(1),
    torch.nn.Flatten(), torch.nn.Linear(8, 4)).eval()


def test_pooling_over_symbolic_spatial_sizes():
    """Max, avg (padded, count_include_pad) and global adaptive pooling over
    symbolic image sizes: one symbolic entry for the sizes whose every
    intermediate is >= 2; each result as eager's."""
    def f(x):
        return (POOL_NET(x), F.adaptive_max_pool2d(x, 1), F.max_pool1d(x[:, 0], 2),
                F.avg_pool2d(x, 2, divisor_override=3), F.adaptive_avg_pool2d(x.half(), 1))

    cf = smelt.compile(f)
    with torch.no_grad():
        for H, W in [(16, 16), (20, 24), (33, 17), (64, 40), (31, 31), (23, 50)]:
            x = rnd(2, 3, H, W)
            for g, w in zip(cf(x), f(x)):
                torch.testing.assert_close(g, w, atol=1e-3 if w.dtype == torch.half else 1e-5, rtol=1e-5,
                                           msg=f"size {H}x{W}")
    st = cf.stats()
    assert st["compiles"] == 2 and st["dynamic_entries"] == 1 and st["dynamic_plans"] == 4, st


def test_pooling_symbols_do_not_cover_stays_right():
    """ceil_mode, count_include_pad=False over padding and adaptive pooling
    to sizes other than 1 take their windows or divisors from the size:
    they trace static (never one size's windows for another)."""
    for g in (lambda x: F.max_pool2d(torch.relu(x), 2, ceil_mode=True) * 2,
              lambda x: F.adaptive_avg_pool2d(x, 2).flatten(1) + 1,
              lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False) - 1):
        cf = smelt.compile(g, dynamic=True)
        with torch.no_grad():
            for T in [9, 12, 17, 20]:
                x = rnd(2, 3, T, T + 3)
                torch.testing.assert_close(cf(x), g(x), atol=1e-5, rtol=1e-5, msg=f"size {T}")
        assert cf.stats()["dynamic_entries"] == 0


def test_batch_norm_training_statistics_over_batch_sizes():
    bn = torch.nn.BatchNorm1d(6).train()
    ref = torch.nn.BatchNorm1d(6).train()
    cf = smelt.compile(bn, dynamic=True)
    with torch.no_grad():
        for B in [5, 9, 3, 17]:
            x = rnd(B, 6)
            torch.testing.assert_close(cf(x), ref(x), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(bn.running_var, ref.running_var, atol=1e-6, rtol=1e-6)
            torch.testing.assert_close(bn.running_mean, ref.running_mean, atol=1e-6, rtol=1e-6)


def test_embedding_and_positions():
    emb, pos = torch.nn.Embedding(50, 16), torch.nn.Embedding(128, 16)

    def f(ids):
        return emb(ids) + pos(torch.arange(ids.shape[1])).unsqueeze(0)

    with torch.no_grad():
        check(f, lambda T: (torch.randint(0, 50, (2, T)),), sizes=[3, 4, 7, 16, 33, 1, 2])


def test_integer_dtypes_and_sizes_in_graph():
    def f(x, y):
        return (x * 3 + y) // 2, (x % 5).to(torch.float32).mean(-1), torch.where(x > y, x, y)

    check(f, lambda T: (torch.randint(-50, 50, (T, 6)), torch.randint(-50, 50, (T, 6))))


def test_results_laid_out_as_eager_over_sizes():
    """Results that are views, or laid out as eager lays out an op on a
    transposed input, keep eager's strides for every size."""
    def f(x):
        return x.exp() + x.sum(0, keepdim=True), x.transpose(0, 1), (x * 2).t()

    cf = smelt.compile(f)
    for T in [5, 6, 7, 9, 12]:
        x = rnd(8, T).t()
        for g, w in zip(cf(x), f(x)):
            torch.testing.assert_close(g, w)
            assert g.shape == w.shape and g.stride() == w.stride(), (T, g.stride(), w.stride())
    assert cf.stats()["compiles"] == 2 and cf.stats()["dynamic_plans"] == 3, cf.stats()


def test_non_contiguous_and_transposed_inputs():
    def f(x):
        return (x.exp() + x.sum(0, keepdim=True)).contiguous()

    check(f, lambda T: (rnd(8, T).t(),))
    check(f, lambda T: (rnd(T, 16)[:, ::2],))
    check(f, lambda T: (rnd(3, T, 16)[1],))


def test_policy_default_makes_the_second_size_symbolic():
    def f(x):
        return (x * 2).sum(-1)

    cf = smelt.compile(f)
    for T in [8, 9, 10, 11, 40, 64, 9]:
        x = rnd(3, T)
        torch.testing.assert_close(cf(x), f(x))
    st = cf.stats()
    assert st["compiles"] == 2 and st["dynamic_entries"] == 1 and st["dynamic_plans"] >= 4, st


def test_dynamic_true_falls_back_to_the_sizes_that_change():
    """dynamic=True makes every size a symbol; where that does not trace
    (chunks of a symbolic feature dim, a constant equal to a symbol's
    value), the sizes that change are symbolic and the rest static."""
    def f(x):
        a, b = x.chunk(2, -1)
        return a * b.sigmoid() + torch.linspace(0, 1, 4)

    cf = smelt.compile(f, dynamic=True)
    for T in [5, 3, 8, 17, 31, 64]:
        x = rnd(T, 8)
        torch.testing.assert_close(cf(x), f(x))
    st = cf.stats()
    assert st["compiles"] == 2 and st["dynamic_entries"] == 1 and st["dynamic_plans"] == 4, st


def test_policy_false_never_symbolic_and_true_from_the_start():
    def f(x):
        return x.sin() * 2

    cf = smelt.compile(f, dynamic=False)
    for T in [4, 5, 6]:
        x = rnd(T)
        torch.testing.assert_close(cf(x), f(x))
    assert cf.stats()["compiles"] == 3 and cf.stats()["dynamic_entries"] == 0
    ct = smelt.compile(f, dynamic=True)
    for T in [4, 5, 6]:
        x = rnd(T)
        torch.testing.assert_close(ct(x), f(x))
    assert ct.stats()["compiles"] == 1 and ct.stats()["dynamic_entries"] == 1


@pytest.mark.parametrize("marker", ["smelt", "dynamo"])
def test_mark_dynamic_and_mark_static(marker):
    def f(x):
        return x.cos() + 1

    def mark_dyn(t, d):
        if marker == "smelt":
            smelt.mark_dynamic(t, d)
        else:
            import torch._dynamo
            torch._dynamo.mark_dynamic(t, d)

    cf = smelt.compile(f)   # dynamic=None: a marked size is a symbol from the first call
    for T in [5, 6, 7]:
        x = rnd(T, 3)
        mark_dyn(x, 0)
        torch.testing.assert_close(cf(x), f(x))
    assert cf.stats()["compiles"] == 1, cf.stats()
    cs = smelt.compile(f, dynamic=True)   # a static mark wins over dynamic=True
    for T in [5, 6, 7]:
        x = rnd(3, T)
        smelt.mark_static(x, 1)
        torch.testing.assert_close(cs(x), f(x))
    assert cs.stats()["compiles"] == 3, cs.stats()
    with pytest.raises(IndexError):
        smelt.mark_dynamic(rnd(3), 2)


def test_branch_on_a_size_is_guarded():
    def f(x):
        if x.shape[1] > 8:
            return x * 2
        return x - 1

    cf = smelt.compile(f, dynamic=True)
    for T in [4, 12, 5, 13, 8, 9]:
        x = rnd(2, T)
        torch.testing.assert_close(cf(x), f(x))
    assert cf.stats()["compiles"] == 2, cf.stats()


def test_sizes_that_met_are_guarded_equal():
    def f(a, b):
        return a.sum() + b.sum(), a * 2

    cf = smelt.compile(f, dynamic=True)
    for n, m in [(5, 5), (7, 7), (5, 7), (9, 11), (6, 6)]:   # equal sizes share a symbol until they differ
        a, b = rnd(n), rnd(m)
        for g, w in zip(cf(a, b), f(a, b)):
            torch.testing.assert_close(g, w)
    assert cf.stats()["compiles"] == 2, cf.stats()


def test_what_symbols_do_not_cover_compiles_static():
    def f(x):
        return sum(row * i for i, row in enumerate(x))   # iterating over rows: as many as the size

    cf = smelt.compile(f)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for T in range(2, 13):
            x = rnd(T, 3)
            torch.testing.assert_close(cf(x), f(x))
    st = cf.stats()
    assert st["compiles"] == 8 and st["recompile_limit_reached"] and st["dynamic_entries"] == 0, st
    assert any("recompiled 8 times" in str(x.message) for x in w)


def test_size_returned_as_an_int():
    def f(x):
        return x.sum(), x.shape[0] * x.shape[1] + 1

    cf = smelt.compile(f)
    for T in [3, 4, 5, 9]:
        x = rnd(2, T)
        got, want = cf(x), f(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] and type(got[1]) is int
    assert cf.stats()["compiles"] == 2 and cf.stats()["dynamic_entries"] == 1


def test_plans_for_new_sizes_reuse_the_code():
    """A symbolic entry's kernels read their sizes from a table: a new
    size makes a plan without generating code."""
    def f(x, w):
        h = torch.relu(x @ w) * 2
        return h.sum(-1), (x * 3).softmax(1), x.exp().mean(1), x.var(1), x[:, 1:] - x[:, :-1]

    cf = smelt.compile(f)
    w = rnd(16, 8)
    for T in [8, 9]:
        x = rnd(3, T, 16)
        for g, e in zip(cf(x, w), f(x, w)):
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    generated = cf.stats()["generated"]
    for T in [10, 33, 64, 100, 3, 7]:
        x = rnd(3, T, 16)
        for g, e in zip(cf(x, w), f(x, w)):
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    st = cf.stats()
    assert st["dynamic_plans"] == 6 and st["generated"] == generated, st


def test_warm_process_generates_no_code(tmp_path):
    """The plans of a symbolic entry and their code go to the disk cache:
    a second process, even at sizes the first never saw, generates no
    kernel."""
    code = ("import sys, torch, smelt\n"
            "f = smelt.compile(lambda x, w: (torch.relu(x @ w) * 2).softmax(-1) + x.mean(1, keepdim=True))\n"
            "w = torch.randn(16, 16)\n"
            "for T in map(int, sys.argv[1:]):\n"
            "    x = torch.randn(3, T, 16)\n"
            "    torch.testing.assert_close(f(x, w), (torch.relu(x @ w) * 2).softmax(-1) + x.mean(1, keepdim=True))\n"
            "s = f.stats()\n"
            "print('STATS', s['compiles'], s['dynamic_plans'], s['generated'])\n")
    env = {**os.environ, "SMELT_CACHE_DIR": str(tmp_path)}
    runs = []
    for sizes in (["8", "9", "10"], ["8", "9", "11", "40"]):
        r = subprocess.run([sys.executable, "-c", code, *sizes], capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr
        runs.append([int(v) for v in r.stdout.split("STATS")[1].split()])
    assert runs[0][0] == 2 and runs[0][2] > 0, runs
    assert runs[1][0] == 2 and runs[1][1] == 2 and runs[1][2] == 0, runs


def test_parametric_code_passes_the_op_tests():
    """SMELT_PARAM_SIZES=1 compiles every plan with parametric sizes: the
    pointwise, reduction, view, fusion and gather tests pass with it."""
    files = ["tests/test_ops_pointwise.py", "tests/test_ops_reduction.py", "tests/test_ops_views.py",
             "tests/test_fusion.py", "tests/test_gather.py"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", *files], cwd=root,
                       capture_output=True, text=True, timeout=1500,
                       env={**os.environ, "SMELT_PARAM_SIZES": "1",
                            "SMELT_CACHE_DIR": os.path.join(os.environ.get("TMPDIR", "/tmp"), f"smelt-param-{os.getpid()}")})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "failed" not in r.stdout, r.stdout[-2000:]


def test_dynamic_log_channel():
    code = ("import torch, smelt\n"
            "f = smelt.compile(lambda x: (x * 2)[:, : x.shape[1] // 2].sum(1))\n"
            "for T in (6, 8, 10):\n"
            "    f(torch.randn(3, T))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "SMELT_LOGS": "dynamic"})
    assert r.returncode == 0, r.stderr
    assert "symbolic sizes in" in r.stderr and "s0 = size 1 of graph input 0" in r.stderr, r.stderr
    assert "a plan for sizes (s0=10)" in r.stderr, r.stderr


def _hf_lengths(model, lengths, make):
    cm = smelt.compile(model)
    with torch.no_grad():
        for T in lengths:
            args = make(T)
            want = model(**args).last_hidden_state
            got = cm(**args).last_hidden_state
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4, msg=f"length {T}")
    return cm._smelt.stats()


def test_gpt2_every_length_two_compiles():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=256)
    m = transformers.GPT2Model(cfg).eval()
    st = _hf_lengths(m, range(1, 257), lambda T: {"input_ids": torch.randint(0, 64, (2, T))})
    assert st["compiles"] <= 2 and st["dynamic_entries"] == 1 and not st["recompile_limit_reached"], st


def test_bert_every_length_two_compiles():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                                  vocab_size=64, max_position_embeddings=256)
    m = transformers.BertModel(cfg).eval()
    st = _hf_lengths(m, range(1, 257), lambda T: {"input_ids": torch.randint(0, 64, (2, T)),
                                                 "attention_mask": torch.ones(2, T, dtype=torch.long)})
    assert st["compiles"] <= 2 and st["dynamic_entries"] == 1 and not st["recompile_limit_reached"], st


def test_cnn_every_batch_size_two_compiles():
    from smelt import bench
    w = bench.build_cnn("quick")
    m = w.fn.eval()
    cm = smelt.compile(m)
    with torch.no_grad():
        for B in range(1, 34):
            x = torch.randn(B, *w.inputs[0].shape[1:])
            torch.testing.assert_close(cm(x), m(x), atol=1e-4, rtol=1e-4, msg=f"batch {B}")
    st = cm._smelt.stats()
    assert st["compiles"] <= 2 and st["dynamic_entries"] == 1, st


def test_llama_greedy_decoding_with_kv_cache():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=128, vocab_size=100, max_position_embeddings=256)
    m = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 100, (1, 7))
    with torch.no_grad():
        want = m.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
        m.forward = smelt.compile(m.forward)
        got = m.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
    assert torch.equal(got, want)
    st = m.forward.__func__.stats()
    assert st["compiles"] <= 3 and not st["recompile_limit_reached"], st


class TinyLM(torch.nn.Module):
    """Embedding, one causal self-attention block and a head: sizes (B, T)."""
    def __init__(self, vocab=50, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.emb, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(128, d)
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.ln, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab)

    def forward(self, ids, labels):
        B, T = ids.shape
        h = self.emb(ids) + self.pos(torch.arange(T))
        q, k, v = self.qkv(self.ln(h)).split(h.shape[-1], -1)
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, -1)
        logits = self.head(torch.tanh(h + self.out(a)))
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))


def _grads_close(m, ref, what):
    for (n, a), b in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=f"{n} at {what}")


def test_training_over_lengths_one_symbolic_entry():
    """Forward and backward over many lengths: the second length makes the
    sizes symbolic, and every later one splits its own graph for the
    backward without tracing or generating code again."""
    import copy
    torch.manual_seed(0)
    ref = TinyLM()
    m = copy.deepcopy(ref)
    cm = smelt.compile(m)
    generated = None
    for i, T in enumerate([6, 9, 3, 17, 31, 64, 4, 8, 13]):   # (2 specialises: T - 1 = 1)
        ids = torch.randint(0, 50, (3, T))
        for model in (ref, cm):
            model.zero_grad() if model is ref else m.zero_grad()
        want, got = ref(ids, ids), cm(ids, ids)
        want.backward()
        got.backward()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        _grads_close(m, ref, f"length {T}")
        if i == 1:
            generated = cm._smelt.stats()["generated"]
    st = cm._smelt.stats()
    assert st["compiles"] == 2 and st["dynamic_entries"] == 1 and st["dynamic_plans"] >= 6, st
    assert st["backward_compiles"] == 2 and st["generated"] == generated, st


def test_gradients_of_symbolic_inputs():
    """An input with a symbolic size that requires grad gets eager's gradient."""
    def f(x, w):
        return (torch.softmax(x @ w, -1) * x[..., :4]).sum(1).pow(2).mean()

    cf = smelt.compile(f)
    w = torch.randn(8, 4, requires_grad=True)
    for T in [4, 7, 2, 16, 33]:
        x = torch.randn(2, T, 8, requires_grad=True)
        x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        cf(x, w).backward()
        f(x2, w2).backward()
        torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-6, msg=f"length {T}")
        torch.testing.assert_close(w.grad, w2.grad, rtol=1e-5, atol=1e-6, msg=f"length {T}")
        w.grad = None
    st = cf.stats()
    assert st["compiles"] == 2 and st["dynamic_entries"] == 1 and st["dynamic_plans"] == 3, st


def test_hugging_face_training_over_lengths_stops_compiling():
    """GPT-2 trained with labels over many lengths (its loss warns through
    logging: graph breaks, the frames resume): the pieces around the
    breaks stay symbolic, so lengths after the first few compile nothing."""
    transformers = pytest.importorskip("transformers")
    import copy
    from smelt.bench import smelt_functions
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=64, n_positions=128,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    ref = transformers.GPT2LMHeadModel(cfg).train()
    m = copy.deepcopy(ref)
    cm = smelt.compile(m)
    compiles = []
    for T in [7, 9, 13, 31, 64, 5, 40, 22, 100]:
        ids = torch.randint(0, 64, (2, T))
        ref.zero_grad()
        m.zero_grad()
        want, got = ref(input_ids=ids, labels=ids).loss, cm(input_ids=ids, labels=ids).loss
        want.backward()
        got.backward()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        _grads_close(m, ref, f"length {T}")
        compiles.append(sum(f.stats()["compiles"] for f in smelt_functions()))
    assert compiles[-1] == compiles[3], compiles
    assert sum(f.stats()["backward_compiles"] for f in smelt_functions()) >= 1


def test_graph_break_pieces_stay_symbolic():
    """A frame that breaks (reads a tensor's data) and resumes: the piece
    before the break and the resumed rest each stay one symbolic entry."""
    def f(x, w):
        h = torch.relu(x @ w) + x.shape[1]
        if h.sum() > -1e30:   # a data read: a break, the frame resumes after it
            h = h * 2
        T = h.shape[1]
        return h / T, torch.arange(T) * 2 + T

    cf = smelt.compile(f)
    w = rnd(8, 8)
    for T in [3, 5, 2, 16, 17, 40, 9]:
        x = rnd(2, T, 8)
        for g, e in zip(cf(x, w), f(x, w)):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5, msg=f"length {T}")
    st = cf.stats()
    assert st["partial_entries"] >= 1 and st["dynamic_entries"] >= 1 and st["compiles"] <= 4, st
    assert not st["recompile_limit_reached"], st


def test_host_call_result_sizes_are_guessed_and_checked():
    """A host call (bucketize) whose result is shaped like its second
    source takes that source's symbolic size; a result whose size only
    happened to equal a symbol's value (topk's k) is checked per call, and
    a wrong guess runs eagerly: never a wrong answer."""
    bounds = torch.linspace(-2, 2, 9)

    def f(b, x):
        return torch.bucketize(x, b) * 2 + 1, torch.topk(x, 4, dim=-1).values * 2

    cf = smelt.compile(f, dynamic=True)
    for T in [4, 6, 11, 4, 33]:
        x = rnd(3, T)
        for g, e in zip(cf(bounds, x), f(bounds, x)):
            torch.testing.assert_close(g, e, msg=f"length {T}")
    assert cf.stats()["dynamic_entries"] >= 1


def test_host_call_mismatch_under_autograd_runs_eagerly():
    """Under autograd a host call whose result is not what the symbolic
    graph inferred (max pooling with indices and ceil_mode: its sizes are
    guessed from the sources; mode: its result's strides) runs the frame
    eagerly, as without grad: never an error eager does not raise."""
    def pool(x):
        return F.max_pool2d(x, (3, 2), stride=(2, 1), ceil_mode=True, return_indices=True)[0].sum()

    def mode(x):
        return torch.mode(x, 1).values.sum()

    for fn, shapes in ((pool, [(1, 2, 5, 7), (1, 5, 8, 10), (1, 10, 13, 15)]), (mode, [(5, 5), (8, 8), (13, 13)])):
        cf = smelt.compile(fn, dynamic=True)
        for s in shapes:
            x = rnd(*s)
            a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
            got, want = cf(a), fn(b)
            got.backward()
            want.backward()
            torch.testing.assert_close(got, want)
            torch.testing.assert_close(a.grad, b.grad)


def test_safe_softmax_gradient_of_a_row_of_minus_inf():
    """aten._safe_softmax over a row that is all -inf: zeros, and a zero
    gradient (not NaN) through the compiled backward."""
    def f(x):
        return torch.ops.aten._safe_softmax.default(x, 1)

    x = rnd(4, 6)
    x[1] = float("-inf")
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    w = rnd(4, 6)
    (smelt.compile(f)(a) * w).sum().backward()
    (f(b) * w).sum().backward()
    torch.testing.assert_close(a.grad, b.grad)
    assert not a.grad.isnan().any()


def test_view_results_at_an_offset_over_sizes():
    """Results that are views at an offset (the last row of a computed
    tensor, a slice of an input) keep eager's sizes, strides, offset and
    aliasing for every size: their view ops are walked again per size."""
    w = rnd(8, 8)

    def f(x):
        y = torch.tanh(x @ w)
        return y[:, -1], y[:, 1:], x[:, 2:], x.transpose(1, 2)[..., 1:-1], y

    cf = smelt.compile(f)
    for T in [3, 5, 9, 17, 33, 7, 4, 12, 20, 40]:
        x = rnd(2, T, 8)
        got, want = cf(x), f(x)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e, msg=f"length {T}")
            assert g.stride() == e.stride() and g.storage_offset() == e.storage_offset(), T
        assert got[2].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert got[0].untyped_storage().data_ptr() == got[4].untyped_storage().data_ptr()   # views of one y
    st = cf.stats()
    assert st["compiles"] == 2 and st["dynamic_entries"] == 1 and st["dynamic_plans"] == 8, st


def test_slice_scatter_over_the_whole_input_gives_it_a_zero_gradient():
    """slice_scatter whose slice is all of the input: the result is src,
    and the input's gradient is zeros as in eager (not None, which an
    optimizer would treat as no gradient)."""
    def f(x, s):
        return torch.slice_scatter(x, s, 0, 0, 20) * 2

    x, s = rnd(20, 3), rnd(20, 3)
    a = [x.clone().requires_grad_(), s.clone().requires_grad_()]
    b = [x.clone().requires_grad_(), s.clone().requires_grad_()]
    cf = smelt.compile(f)
    cf(*a).sum().backward()
    f(*b).sum().backward()
    for p, q in zip(a, b):
        assert p.grad is not None
        torch.testing.assert_close(p.grad, q.grad)
    st = cf.stats()
    assert st["breaks"] == 0 and st["backward_compiles"] == 1, st   # compiled, not run eagerly
