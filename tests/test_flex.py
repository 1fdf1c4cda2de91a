"""FlexAttention (torch.nn.attention.flex_attention) in smelt: torch's
flex_attention called inside compiled functions and modules, with block
masks made outside or by create_block_mask inside, and smelt's own
smelt.flex_attention / smelt.create_block_mask outside compiled code.
Forward outputs, log-sum-exp and the gradients of q, k, v (and of a learned
bias table) against an explicit float64 reference on random inputs: the
score function and mask function applied as broadcast tensor ops, masked
keys -inf, softmax, rows with no key left 0 (log-sum-exp -inf). torch's own
flex_attention is never the reference (on CPU it has no backward).

The main variants must compile into ONE graph op, printed `flex_attention(`
in the graph text: an unfused decomposition would give the same numbers, so
it is caught there, not by the values.

Tolerances: the reference is float64, smelt float32. A float32 row of at
most ~260 keys with O(1) inputs is off by ~1e-6; one key wrongly kept or
dropped moves an output row by ~p * |v|, typically ~1/S ~ 4e-3, so forward
values use 1e-4 (abs and rel): ~100x the rounding, well below a masking
error.
Gradients sum over rows (dk, dv, the bias table over L rows per entry)
and go through the softmax's Jacobian twice: 1e-3."""
import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.attention.flex_attention as torch_flex
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

import smelt

G = torch.Generator().manual_seed(11)
FWD = dict(rtol=1e-4, atol=1e-4)
GRAD = dict(rtol=1e-3, atol=1e-3)


def rnd(*shape):
    return torch.randn(*shape, generator=G)


# ---------------------------------------------------------------- the reference

def indices(B, H, L, S):
    """b, h, q_idx, kv_idx as broadcast index tensors over [B, H, L, S]."""
    return (torch.arange(B)[:, None, None, None], torch.arange(H)[None, :, None, None],
            torch.arange(L)[None, None, :, None], torch.arange(S)[None, None, None, :])


def reference(q, k, v, score_mod=None, mask_mod=None, keep=None, scale=None):
    """(out, lse) of flex attention in float64 by explicit math: q [B, Hq,
    L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev] (float64; k and v heads
    repeated Hq/Hkv times when fewer), score_mod / mask_mod applied to
    broadcast index tensors, keep a bool tensor broadcasting to [B, Hq, L,
    S] (True: attended). Rows with no key: out 0, lse -inf. Differentiable
    in q, k, v and whatever score_mod captures."""
    B, Hq, L, E = q.shape
    S = k.shape[-2]
    if k.shape[1] != Hq:
        k, v = (t.repeat_interleave(Hq // t.shape[1], 1) for t in (k, v))
    s = q @ k.transpose(-1, -2) * (1 / math.sqrt(E) if scale is None else scale)
    b, h, qi, ki = indices(B, Hq, L, S)
    if score_mod is not None:
        s = score_mod(s, b, h, qi, ki)
    allowed = torch.ones(B, Hq, L, S, dtype=torch.bool)
    if mask_mod is not None:
        allowed = allowed & mask_mod(b, h, qi, ki)
    if keep is not None:
        allowed = allowed & keep
    s = s.masked_fill(~allowed, float("-inf"))
    mx = s.detach().amax(-1, keepdim=True)
    mx = torch.where(mx == float("-inf"), 0.0, mx)
    e = torch.exp(s - mx)
    den = e.sum(-1, keepdim=True)
    out = (e / den.clamp_min(1e-300)) @ v
    lse = (den.log() + mx).squeeze(-1)
    return out, lse


def f64(*ts, grad=False):
    return [t.detach().double().requires_grad_(grad) for t in ts]


def close(got, want, tol):
    """got (float32, from smelt) == want (float64 reference) within tol."""
    assert got.dtype == torch.float32, got.dtype
    assert got.shape == want.shape, (got.shape, want.shape)
    torch.testing.assert_close(got.double(), want.detach(), **tol)


def close_grads(pairs):
    """(smelt float32 grad, float64 reference grad) pairs within GRAD."""
    for got, ref in pairs:
        assert got is not None and ref is not None
        close(got, ref, GRAD)


def fused(fn, *args, ops=1, grad=False):
    """fn (uncompiled) traces into one graph with `ops` flex_attention ops
    (grad: in grad mode, inputs requiring grad, with a backward)."""
    with torch.set_grad_enabled(grad):
        e = smelt.explain(fn, *args)
    assert e["compiles"] and not e["partial"] and e["backward"] == grad, str(e)
    assert e["graph"].count("flex_attention(") == ops, e["graph"]


# ---------------------------------------------------------------- mask and score functions

def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding(w):
    def mask(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx <= w)
    return mask


def prefix_lm(prefix):
    def mask(b, h, q_idx, kv_idx):
        return (kv_idx < prefix) | (q_idx >= kv_idx)
    return mask


def document(doc_id):
    """doc_id [L] (one packed sequence) or [B, L] (per batch row), causal."""
    if doc_id.dim() == 1:
        def mask(b, h, q_idx, kv_idx):
            return (doc_id[q_idx] == doc_id[kv_idx]) & (q_idx >= kv_idx)
    else:
        def mask(b, h, q_idx, kv_idx):
            return (doc_id[b, q_idx] == doc_id[b, kv_idx]) & (q_idx >= kv_idx)
    return mask


def band(b, h, q_idx, kv_idx):
    """A window both ways: |q - kv| <= 20 (not causal)."""
    return (q_idx - kv_idx).abs() <= 20


def head_window(b, h, q_idx, kv_idx):
    """Causal, a window that widens with the (query) head."""
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= 8 + 16 * h)


def holes(b, h, q_idx, kv_idx):
    """Causal, with every row q = 2 (mod 5) left without any key."""
    return (q_idx % 5 != 2) & (q_idx >= kv_idx)


def alibi(slopes):
    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)
    return score_mod


def softcap(score, b, h, q_idx, kv_idx):
    """tanh soft-capping at 1.5: one module-level function, reused."""
    return 1.5 * torch.tanh(score / 1.5)


def docs(lengths):
    """Document ids of sequences of these lengths packed one after another."""
    return torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))


def geometric_slopes(H):
    return torch.tensor([2.0 ** (-8.0 * (i + 1) / H) for i in range(H)])


SLOPES4, SLOPES8 = geometric_slopes(4), geometric_slopes(8)
DOC200 = docs([37, 80, 13, 70])
DOC120x2 = torch.stack([docs([50, 70]), docs([11, 29, 40, 40])])


# ---------------------------------------------------------------- the variants

class Case:
    """One variant: sizes, mask function (made into a block mask outside the
    compiled function, over dims mask_bh: (B or None, H or None)), score
    function, block size, GQA."""

    def __init__(self, B, H, L, S, E=16, Ev=None, Hkv=None, mask=None, score=None, bs=128, mask_bh=(None, None)):
        self.B, self.H, self.L, self.S, self.E, self.Ev = B, H, L, S, E, Ev or E
        self.Hkv, self.mask, self.score, self.bs, self.mask_bh = Hkv or H, mask, score, bs, mask_bh

    def inputs(self, grad=False):
        q = rnd(self.B, self.H, self.L, self.E)
        k, v = rnd(self.B, self.Hkv, self.S, self.E), rnd(self.B, self.Hkv, self.S, self.Ev)
        return [t.requires_grad_(grad) for t in (q, k, v)]

    def block_mask(self):
        if self.mask is None:
            return None
        return create_block_mask(self.mask, *self.mask_bh, self.L, self.S, device="cpu", BLOCK_SIZE=self.bs)

    def fn(self):
        score, gqa = self.score, self.Hkv != self.H

        def attend(q, k, v, bm):
            return flex_attention(q, k, v, score_mod=score, block_mask=bm, enable_gqa=gqa)
        return attend


CASES = {
    "plain": Case(2, 4, 64, 64),
    "causal": Case(2, 4, 160, 160, mask=causal),
    "sliding": Case(1, 4, 200, 200, mask=sliding(24), bs=32),
    "band": Case(2, 2, 150, 150, mask=band, bs=32),
    "prefix_lm": Case(2, 2, 129, 129, mask=prefix_lm(40), mask_bh=(2, 2)),
    "document": Case(1, 4, 200, 200, mask=document(DOC200), bs=16),
    "document_per_batch": Case(2, 2, 120, 120, mask=document(DOC120x2), bs=32, mask_bh=(2, None)),
    "alibi": Case(2, 4, 100, 100, mask=causal, score=alibi(SLOPES4)),
    "softcap": Case(2, 4, 90, 90, score=softcap),
    "gqa": Case(2, 8, 96, 96, Hkv=2, mask=head_window, score=alibi(SLOPES8), bs=32, mask_bh=(None, 8)),
    "headdim64": Case(1, 2, 70, 70, E=64, mask=causal),
    "ev_ne_e": Case(1, 2, 70, 70, E=32, Ev=48, mask=sliding(20), bs=32),
}


def check_forward(case):
    q, k, v = case.inputs()
    bm = case.block_mask()
    cf = smelt.compile(case.fn())
    with torch.no_grad():
        out = cf(q, k, v, bm)
    want, _ = reference(*f64(q, k, v), case.score, case.mask)
    close(out, want, FWD)
    st = cf._smelt.stats()
    assert st["compiles"] == 1 and st["breaks"] == 0 and st["eager_entries"] == 0, st
    fused(case.fn(), q, k, v, bm)


def check_grads(case):
    q, k, v = case.inputs(grad=True)
    bm = case.block_mask()
    w = rnd(case.B, case.H, case.L, case.Ev)
    cf = smelt.compile(case.fn())
    (cf(q, k, v, bm) * w).sum().backward()
    q64, k64, v64 = f64(q, k, v, grad=True)
    want, _ = reference(q64, k64, v64, case.score, case.mask)
    (want * w.double()).sum().backward()
    close_grads(((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)))
    assert cf._smelt.stats()["backward_compiles"] >= 1
    fused(case.fn(), q, k, v, bm, grad=True)


@pytest.mark.parametrize("name", list(CASES))
def test_forward(name):
    """Each variant's output inside a compiled function, as one flex_attention op."""
    check_forward(CASES[name])


@pytest.mark.parametrize("name", list(CASES))
def test_gradients(name):
    """Each variant's dq, dk, dv through loss.backward() on a compiled function."""
    check_grads(CASES[name])


@pytest.mark.parametrize("n", [37, 100, 129, 200])
def test_odd_lengths(n):
    """Lengths off the block size (tails of a 128 block, one more than a
    block), document-causal mask: forward and gradients."""
    case = Case(1, 2, n, n, mask=document(docs([n // 3, n - n // 3])))
    check_forward(case)
    check_grads(case)


@pytest.mark.parametrize("L,S", [(50, 130), (130, 50)])
def test_query_and_key_lengths_differ(L, S):
    """Q_LEN != KV_LEN, with ALiBi over a top-left causal mask: forward and gradients."""
    case = Case(2, 4, L, S, mask=causal, score=alibi(SLOPES4), bs=32)
    check_forward(case)
    check_grads(case)


def test_block_mask_dims_broadcast_or_given():
    """The same mask as a block mask broadcast over batch and heads (None),
    given per head, and given per batch and head: the same output."""
    q, k, v = Case(2, 4, 100, 100).inputs()
    want, _ = reference(*f64(q, k, v), mask_mod=sliding(30))
    cf = smelt.compile(lambda a, b, c, m: flex_attention(a, b, c, block_mask=m))
    for B, H in [(None, None), (None, 4), (2, 4)]:
        bm = create_block_mask(sliding(30), B, H, 100, 100, device="cpu", BLOCK_SIZE=32)
        with torch.no_grad():
            close(cf(q, k, v, bm), want, FWD)


# ---------------------------------------------------------------- log-sum-exp, fully masked rows

def test_return_lse():
    """return_lse=True: lse is the natural-log logsumexp of the modified, masked scores."""
    case = Case(2, 4, 100, 100, mask=causal, score=alibi(SLOPES4), bs=32)
    q, k, v = case.inputs()
    bm = case.block_mask()

    def f(a, b, c, m):
        return flex_attention(a, b, c, score_mod=case.score, block_mask=m, return_lse=True)

    cf = smelt.compile(f)
    with torch.no_grad():
        out, lse = cf(q, k, v, bm)
    want, want_lse = reference(*f64(q, k, v), case.score, case.mask)
    close(out, want, FWD)
    close(lse, want_lse, FWD)
    fused(f, q, k, v, bm)


def test_lse_gradient_through_the_fused_backward():
    """A loss on both the output and lse (an ALiBi score under a
    causal mask): dq, dk, dv from the fused backward, lse's gradient included."""
    case = Case(2, 4, 70, 90, mask=causal, score=alibi(SLOPES4), bs=16)
    q, k, v = case.inputs(grad=True)
    bm = case.block_mask()

    def f(a, b, c, m):
        return flex_attention(a, b, c, score_mod=case.score, block_mask=m, return_lse=True)

    go, gl = rnd(2, 4, 70, 16), rnd(2, 4, 70)
    out, lse = smelt.compile(f)(q, k, v, bm)
    ((out * go).sum() + (lse * gl).sum()).backward()
    q64, k64, v64 = f64(q, k, v, grad=True)
    want, want_lse = reference(q64, k64, v64, case.score, case.mask)
    ((want * go.double()).sum() + (want_lse * gl.double()).sum()).backward()
    close(out, want, FWD)
    close(lse, want_lse, FWD)
    for got, ref in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        close(got, ref, GRAD)
    fused(f, *(t.detach().requires_grad_() for t in (q, k, v)), bm, grad=True)


def test_rows_without_keys_are_zero_with_lse_minus_inf():
    """Rows that no key is left to: output 0, lse -inf, no gradient to them."""
    case = Case(1, 2, 45, 45, mask=holes, bs=16)
    q, k, v = case.inputs(grad=True)
    bm = case.block_mask()
    w = rnd(1, 2, 45, 16)
    cf = smelt.compile(lambda a, b, c, m: flex_attention(a, b, c, block_mask=m, return_lse=True))
    out, lse = cf(q, k, v, bm)
    (out * w).sum().backward()
    q64, k64, v64 = f64(q, k, v, grad=True)
    want, want_lse = reference(q64, k64, v64, mask_mod=holes)
    (want * w.double()).sum().backward()
    empty = torch.arange(45) % 5 == 2
    assert torch.equal(out[:, :, empty], torch.zeros_like(out[:, :, empty]))
    assert bool((lse[:, :, empty] == float("-inf")).all())
    close(out, want, FWD)
    close(lse, want_lse, FWD)
    assert torch.equal(q.grad[:, :, empty], torch.zeros_like(q.grad[:, :, empty]))
    close_grads(((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)))


# ---------------------------------------------------------------- hand-made block tables

def block_table(num, idx):
    """The blocks that kv tables list, bool [B, H, Q blocks, KV blocks]:
    row (b, h, i) has blocks idx[b, h, i, :num[b, h, i]]."""
    out = torch.zeros(idx.shape, dtype=torch.bool)
    for b, h, i in torch.cartesian_prod(*(torch.arange(n) for n in num.shape)).tolist():
        out[b, h, i, idx[b, h, i, :num[b, h, i]].long()] = True
    return out


def hand_made_block_mask():
    """A BlockMask from kv block tables (B=1, H=2, 90 x 90 in 32-blocks,
    noop mask_mod) and its dense element mask: the tables alone decide.
    Head 0: q-block 0 sees kv-block 0, q-block 1 blocks 0 and 2 (a hole,
    and a future block), q-block 2 nothing (rows with no key). Head 1:
    partial blocks 1,2 / 1 / 2 and a full block 0 in q-block 2."""
    num = torch.tensor([[[1, 2, 0], [2, 1, 1]]], dtype=torch.int32)
    idx = torch.tensor([[[[0, 1, 2], [0, 2, 1], [0, 1, 2]],
                         [[1, 2, 0], [1, 0, 2], [2, 0, 1]]]], dtype=torch.int32)
    full_num = torch.tensor([[[0, 0, 0], [0, 0, 1]]], dtype=torch.int32)
    full_idx = torch.tensor([[[[0, 1, 2]] * 3, [[0, 1, 2]] * 3]], dtype=torch.int32)
    bm = BlockMask.from_kv_blocks(num, idx, full_num, full_idx, BLOCK_SIZE=32, seq_lengths=(90, 90))
    blocks = block_table(num, idx) | block_table(full_num, full_idx)
    return bm, blocks.repeat_interleave(32, -2).repeat_interleave(32, -1)[..., :90, :90]


def test_hand_made_block_mask_from_kv_blocks():
    """BlockMask.from_kv_blocks with a noop mask_mod: whole blocks excluded,
    a q-block with none (out 0, lse -inf): forward, lse and gradients (as
    torch's fused kernels; its CPU eager path reads only mask_mod)."""
    bm, keep = hand_made_block_mask()
    q, k, v = (rnd(1, 2, 90, 16).requires_grad_() for _ in range(3))
    w = rnd(1, 2, 90, 16)

    def f(a, b, c, m):
        return flex_attention(a, b, c, block_mask=m, return_lse=True)

    cf = smelt.compile(f)
    out, lse = cf(q, k, v, bm)
    (out * w).sum().backward()
    q64, k64, v64 = f64(q, k, v, grad=True)
    want, want_lse = reference(q64, k64, v64, keep=keep)
    (want * w.double()).sum().backward()
    assert bool((lse[0, 0, 64:] == float("-inf")).all()) and not bool(out[0, 0, 64:].any())
    close(out, want, FWD)
    close(lse, want_lse, FWD)
    close_grads(((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)))
    fused(f, *(t.detach() for t in (q, k, v)), bm)


# ---------------------------------------------------------------- a learned bias table

class RelBiasAttention(nn.Module):
    """Relative position bias: score + table[h, q - kv + S - 1], the table a parameter."""

    def __init__(self, H, L, S):
        super().__init__()
        self.S = S
        self.table = nn.Parameter(torch.randn(H, L + S - 1, generator=G) * 0.5)

    def forward(self, q, k, v, bm):
        table, S = self.table, self.S

        def bias(score, b, h, q_idx, kv_idx):
            return score + table[h, q_idx - kv_idx + S - 1]
        return flex_attention(q, k, v, score_mod=bias, block_mask=bm)


def test_learned_bias_table_gradient():
    """A captured nn.Parameter bias table: output and the gradients of q, k,
    v and the table (may take a materialised path: values only)."""
    B, H, L, S = 2, 2, 70, 70
    m = RelBiasAttention(H, L, S)
    cm = smelt.compile(m)
    q, k, v = Case(B, H, L, S).inputs(grad=True)
    bm = create_block_mask(causal, None, None, L, S, device="cpu", BLOCK_SIZE=32)
    w = rnd(B, H, L, 16)
    out = cm(q, k, v, bm)
    (out * w).sum().backward()
    q64, k64, v64, t64 = f64(q, k, v, m.table, grad=True)

    def bias(score, b, h, q_idx, kv_idx):
        return score + t64[h, q_idx - kv_idx + S - 1]

    want, _ = reference(q64, k64, v64, bias, causal)
    (want * w.double()).sum().backward()
    close(out, want, FWD)
    close_grads(((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad), (m.table.grad, t64.grad)))
    assert not bool(m.table.grad[:, :S - 1].any())   # kv > q: masked, no gradient
    assert bool(m.table.grad[:, S - 1:].ne(0).all())


# ---------------------------------------------------------------- block masks made inside

def test_create_block_mask_inside_the_compiled_function():
    """create_block_mask called in the compiled function (document-causal
    over a captured doc id tensor): one graph, one flex_attention op, a
    change to the doc ids in place seen by the next call, gradients."""
    doc = docs([30, 50, 20]).clone()

    def doc_causal(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    def f(q, k, v):
        bm = create_block_mask(doc_causal, None, None, 100, 100, device="cpu", BLOCK_SIZE=32)
        return flex_attention(q, k, v, block_mask=bm)

    q, k, v = Case(1, 2, 100, 100).inputs()
    cf = smelt.compile(f)
    with torch.no_grad():
        close(cf(q, k, v), reference(*f64(q, k, v), mask_mod=doc_causal)[0], FWD)
        doc.copy_(docs([10, 45, 45]))
        close(cf(q, k, v), reference(*f64(q, k, v), mask_mod=doc_causal)[0], FWD)
    fused(f, q, k, v)
    w = rnd(1, 2, 100, 16)
    (cf(*(t.requires_grad_() for t in (q, k, v))) * w).sum().backward()
    q64, k64, v64 = f64(q, k, v, grad=True)
    (reference(q64, k64, v64, mask_mod=doc_causal)[0] * w.double()).sum().backward()
    close_grads(((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)))


# ---------------------------------------------------------------- score functions: reuse and fresh closures

def test_module_level_score_mod_reused():
    """One module-level score_mod object in two compiled functions and calls
    with new values: each right, no recompile for new values."""
    def f1(q, k, v):
        return flex_attention(q, k, v, score_mod=softcap)

    def f2(q, k, v, bm):
        return flex_attention(q, k, v, score_mod=softcap, block_mask=bm)

    c1, c2 = smelt.compile(f1), smelt.compile(f2)
    bm = create_block_mask(causal, None, None, 64, 64, device="cpu", BLOCK_SIZE=32)
    with torch.no_grad():
        for _ in range(2):
            q, k, v = Case(1, 2, 64, 64).inputs()
            close(c1(q, k, v), reference(*f64(q, k, v), softcap)[0], FWD)
            close(c2(q, k, v, bm), reference(*f64(q, k, v), softcap, causal)[0], FWD)
    assert c1._smelt.stats()["compiles"] == 1 and c2._smelt.stats()["compiles"] == 1


def test_fresh_closure_each_call_sees_new_values():
    """A score_mod closure made in each call over a tensor argument: new
    slope values give new answers (no stale constant), one compile."""
    def f(q, k, v, slopes, bm):
        def mod(score, b, h, q_idx, kv_idx):
            return score + slopes[h] * (kv_idx - q_idx)
        return flex_attention(q, k, v, score_mod=mod, block_mask=bm)

    q, k, v = Case(1, 4, 80, 80).inputs()
    bm = create_block_mask(causal, None, None, 80, 80, device="cpu", BLOCK_SIZE=32)
    cf = smelt.compile(f)
    with torch.no_grad():
        for slopes in (SLOPES4, rnd(4).abs(), torch.zeros(4) + 0.3):
            close(cf(q, k, v, slopes, bm), reference(*f64(q, k, v), alibi(slopes), causal)[0], FWD)
    assert cf._smelt.stats()["compiles"] == 1
    fused(f, q, k, v, SLOPES4, bm)


def test_captured_tensor_changed_in_place():
    """A score_mod over a tensor captured from outside the compiled
    function, changed in place between calls: the new values are used."""
    slopes = SLOPES4.clone()
    mod = alibi(slopes)
    cf = smelt.compile(lambda q, k, v: flex_attention(q, k, v, score_mod=mod))
    q, k, v = Case(2, 4, 50, 50).inputs()
    with torch.no_grad():
        close(cf(q, k, v), reference(*f64(q, k, v), alibi(SLOPES4.clone()))[0], FWD)
        slopes.mul_(-3.0)
        close(cf(q, k, v), reference(*f64(q, k, v), alibi(SLOPES4 * -3.0))[0], FWD)


# ---------------------------------------------------------------- smelt.flex_attention / smelt.create_block_mask

def test_smelt_flex_attention_outside_compiled_code():
    """smelt.flex_attention called directly: right values and lse; a second
    call of the same shapes compiles nothing."""
    case = CASES["alibi"]
    bm = case.block_mask()
    with torch.no_grad():
        for call in range(2):
            q, k, v = case.inputs()
            before = smelt.cache_info()
            out, lse = smelt.flex_attention(q, k, v, score_mod=case.score, block_mask=bm, return_lse=True)
            after = smelt.cache_info()
            want, want_lse = reference(*f64(q, k, v), case.score, case.mask)
            close(out, want, FWD)
            close(lse, want_lse, FWD)
            if call == 1:   # every compile looks up the disk cache: a hit or a miss
                assert (after["hits"], after["misses"]) == (before["hits"], before["misses"]), (before, after)


def test_smelt_flex_attention_gradients_and_gqa():
    """smelt.flex_attention with inputs requiring grad (torch has no CPU
    backward), GQA with a head-dependent mask and scale given."""
    case = CASES["gqa"]
    q, k, v = case.inputs(grad=True)
    bm = case.block_mask()
    w = rnd(case.B, case.H, case.L, case.Ev)
    out = smelt.flex_attention(q, k, v, score_mod=case.score, block_mask=bm, scale=0.4, enable_gqa=True)
    (out * w).sum().backward()
    q64, k64, v64 = f64(q, k, v, grad=True)
    want, _ = reference(q64, k64, v64, case.score, case.mask, scale=0.4)
    (want * w.double()).sum().backward()
    close(out, want, FWD)
    close_grads(((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)))


@pytest.mark.parametrize("bh", [(None, None), (2, None), (2, 3)], ids=["broadcast", "per_batch", "per_batch_head"])
def test_smelt_create_block_mask(bh, monkeypatch):
    """smelt.create_block_mask gives a torch BlockMask with the right
    blocks, usable by smelt.flex_attention and by torch's flex_attention
    (run unfused: torch.compile of it takes minutes for some masks here)."""
    monkeypatch.setattr(torch_flex, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", True)
    B, H, L, S, bs = 2, 3, 75, 110, 16
    mask = document(torch.stack([docs([25, 85]), docs([40, 35, 35])])) if bh[0] else sliding(40)
    bm = smelt.create_block_mask(mask, *bh, L, S, device="cpu", BLOCK_SIZE=bs)
    assert isinstance(bm, BlockMask)
    assert bm.shape == (bh[0] or 1, bh[1] or 1, L, S) and tuple(bm.BLOCK_SIZE) == (bs, bs)
    dense = mask(*indices(bh[0] or 1, bh[1] or 1, L, S)).expand(bh[0] or 1, bh[1] or 1, L, S)
    padded = F.pad(dense, (0, -S % bs, 0, -L % bs))
    nq, nk = padded.shape[-2] // bs, padded.shape[-1] // bs
    tiles = padded.reshape(bh[0] or 1, bh[1] or 1, nq, bs, nk, bs)
    some, every = tiles.any(5).any(3), tiles.all(5).all(3)   # padding is masked: a tail block is never full
    assert torch.equal(bm.to_dense().bool(), some)
    assert torch.equal(block_table(bm.full_kv_num_blocks, bm.full_kv_indices), every)   # as torch's
    assert torch.equal(block_table(bm.kv_num_blocks, bm.kv_indices), some & ~every)
    q, k, v = Case(B, H, L, S).inputs()
    want, _ = reference(*f64(q, k, v), mask_mod=mask)
    with torch.no_grad():
        close(smelt.flex_attention(q, k, v, block_mask=bm), want, FWD)
        close(flex_attention(q, k, v, block_mask=bm), want, FWD)


@pytest.mark.parametrize("heads", [(4, 2, False), (6, 4, True)], ids=["no_gqa", "not_a_multiple"])
def test_head_mismatch_raises_like_eager(heads):
    """Query and key heads that do not match (no GQA) or do not divide: the
    ValueError eager torch raises, compiled and through smelt.flex_attention."""
    Hq, Hkv, gqa = heads
    q, k, v = rnd(1, Hq, 16, 16), rnd(1, Hkv, 16, 16), rnd(1, Hkv, 16, 16)
    with pytest.raises(Exception) as eager:
        flex_attention(q, k, v, enable_gqa=gqa)
    assert type(eager.value) is ValueError
    cf = smelt.compile(lambda a, b, c: flex_attention(a, b, c, enable_gqa=gqa))
    for call in (cf, lambda a, b, c: smelt.flex_attention(a, b, c, enable_gqa=gqa)):
        with pytest.raises(Exception) as got:
            call(q, k, v)
        assert type(got.value) is ValueError and "heads" in str(got.value), repr(got.value)


# ---------------------------------------------------------------- training a small transformer

VOCAB, D, HEADS, T, WINDOW = 50, 32, 4, 64, 12


def causal_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= WINDOW)


class Block(nn.Module):
    """Pre-LN: x + attention(ln(x)), x + mlp(ln(x)); FlexAttention over the
    model's block mask, or explicit masked softmax over its dense mask."""

    def __init__(self, flex):
        super().__init__()
        self.flex = flex
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, mask):
        B = x.shape[0]
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        if self.flex:
            a = flex_attention(q, k, v, block_mask=mask)
        else:
            s = (q @ k.transpose(-1, -2) / math.sqrt(D // HEADS)).masked_fill(~mask, float("-inf"))
            a = s.softmax(-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, flex):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.randn(T, D) * 0.1)
        self.blocks = nn.ModuleList([Block(flex), Block(flex)])
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, VOCAB)
        self.mask = (create_block_mask(causal_window, None, None, T, T, device="cpu", BLOCK_SIZE=16) if flex
                     else causal_window(*indices(1, 1, T, T))[0, 0])

    def forward(self, tokens, targets):
        x = self.emb(tokens) + self.pos
        for blk in self.blocks:
            x = blk(x, self.mask)
        return F.cross_entropy(self.head(self.ln(x)).reshape(-1, VOCAB), targets.reshape(-1))


def train(model, batches):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for tokens, targets in batches:
        loss = model(tokens, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.fixture
def one_thread(threads):
    """torch and smelt on one thread: hundreds of tiny ops per step spend
    most of their time waking a second thread on a loaded 2-core machine
    (0.6 s alone, 10-30 s under load); the kernels' threading is covered
    by the other tests."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    threads(1)
    yield
    torch.set_num_threads(old)


def test_train_small_transformer(one_thread):
    """A 2-block pre-LN transformer with causal sliding-window FlexAttention,
    20 SGD steps compiled vs the same weights with explicit masked softmax
    attention eagerly: the same losses step by step, the same weights."""
    with torch.random.fork_rng():
        torch.manual_seed(5)
        eager, model = TinyLM(flex=False), TinyLM(flex=True)
    model.load_state_dict(copy.deepcopy(eager.state_dict()))
    # arithmetic sequences mod VOCAB (a random start and step per row): learnable
    start, step = torch.randint(0, VOCAB, (20, 2, 1), generator=G), torch.randint(1, 4, (20, 2, 1), generator=G)
    data = (start + step * torch.arange(T + 1)) % VOCAB
    batches = [(d[:, :-1], d[:, 1:]) for d in data]
    want = train(eager, batches)
    cm = smelt.compile(model)
    got = train(cm, batches)
    assert want[-1] < want[0] - 1.0, want          # it learns something
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
    assert cm._smelt.stats()["backward_compiles"] >= 1
    fused(model, *batches[0], ops=2)
