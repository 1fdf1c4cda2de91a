"""Hugging Face transformers models through smelt.compile(fullgraph=True).

Small GPT-2 (GPT2LMHeadModel, use_cache=False) and BERT (BertModel) built
from configs with random weights, in eval mode under torch.no_grad(): the
whole forward is one graph (ModelOutput construction, output-capture and
config-default decorators, mask construction, sdpa attention), the result
has eager's type and fields (tuples with return_dict=False), values match
eager within 1e-4, and a second call with new data of the same shapes runs
the compiled entry. Skipped when transformers is not installed.
"""
import pytest
import torch

import smelt

transformers = pytest.importorskip("transformers")
transformers.utils.logging.set_verbosity_error()

B, S, VOCAB = 2, 16, 100
G = torch.Generator().manual_seed(3)


def gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64)
    return transformers.GPT2LMHeadModel(cfg).eval()


def bert():
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=VOCAB)
    return transformers.BertModel(cfg).eval()


MODELS = {}


def model(name):
    if name not in MODELS:
        torch.manual_seed(0)
        MODELS[name] = gpt2() if name == "gpt2" else bert()
    return MODELS[name]


def ids():
    return torch.randint(0, VOCAB, (B, S), generator=G)


def padding_mask(keep):
    m = torch.ones(B, S, dtype=torch.long)
    m[1, keep:] = 0
    return m


def same(got, ref, path="out"):
    """got equals ref: same type, same fields in the same order (the dict
    view and the attributes of a ModelOutput), tensors within 1e-4."""
    assert type(got) is type(ref), (path, type(got), type(ref))
    if isinstance(ref, torch.Tensor):
        assert got.dtype == ref.dtype and got.shape == ref.shape, path
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    elif isinstance(ref, dict):
        assert list(got.keys()) == list(ref.keys()), path
        assert list(vars(got)) == list(vars(ref)), path
        for k in vars(ref):
            same(getattr(got, k), getattr(ref, k), f"{path}.{k}")
    elif isinstance(ref, (tuple, list)):
        assert len(got) == len(ref), path
        for i, (g, r) in enumerate(zip(got, ref)):
            same(g, r, f"{path}[{i}]")
    else:
        assert got == ref, path


# (model, extra keyword arguments, keyword arguments made per call)
CASES = [
    ("gpt2", {"use_cache": False}, {}),
    ("gpt2", {"use_cache": False, "return_dict": False}, {}),
    ("gpt2", {"use_cache": False}, {"attention_mask": lambda k: padding_mask(k)}),
    ("gpt2", {"use_cache": False, "return_dict": False}, {"attention_mask": lambda k: padding_mask(k)}),
    ("bert", {}, {}),
    ("bert", {"return_dict": False}, {}),
    ("bert", {}, {"attention_mask": lambda k: padding_mask(k)}),
    ("bert", {}, {"attention_mask": lambda k: padding_mask(k),
                  "token_type_ids": lambda k: torch.randint(0, 2, (B, S), generator=G)}),
]


def case_id(c):
    return "-".join([c[0]] + [f"{k}={v}" for k, v in c[1].items()] + sorted(c[2]))


@pytest.mark.parametrize("name,kw,per_call", CASES, ids=[case_id(c) for c in CASES])
def test_model_matches_eager_and_reuses_its_entry(name, kw, per_call):
    m = model(name)
    cm = smelt.compile(m, fullgraph=True)
    with torch.no_grad():
        for call, keep in enumerate((11, 5)):   # the second call: new ids, a new padding pattern
            args = dict(kw, **{k: make(keep) for k, make in per_call.items()})
            x = ids()
            ref = m(x, **args)
            got = cm(x, **args)
            same(got, ref)
            st = cm._smelt.stats()
            assert st["compiles"] == 1 and st["eager_entries"] == 0 and st["hits"] == call, st
    if kw.get("return_dict", True):
        assert type(got).__name__ in ("CausalLMOutputWithCrossAttentions", "BaseModelOutputWithPoolingAndCrossAttentions")


def test_model_output_fields_alias_like_eager():
    m = model("gpt2")
    cm = smelt.compile(m, fullgraph=True)
    x = ids()
    with torch.no_grad():
        out = cm(x, use_cache=False)
    assert out.logits is out["logits"] and out[0] is out.logits
    assert out.loss is None and "loss" not in out and out.to_tuple() == (out.logits,)


def test_gpt2_prefill_returns_a_working_cache():
    """use_cache=True (GPT-2's default): the DynamicCache made in the
    traced code is rebuilt on return, and decoding from it gives eager's
    logits."""
    m = model("gpt2")
    cm = smelt.compile(m, fullgraph=True)
    with torch.no_grad():
        for _ in range(2):
            x, nxt = ids(), torch.randint(0, VOCAB, (B, 1), generator=G)
            ref, got = m(x), cm(x)
            same(got.logits, ref.logits)
            assert type(got.past_key_values) is type(ref.past_key_values)
            same(m(nxt, past_key_values=got.past_key_values).logits, m(nxt, past_key_values=ref.past_key_values).logits)
    st = cm._smelt.stats()
    assert st["compiles"] == 1 and st["hits"] == 1, st


def test_requested_hidden_states_compile():
    """Capturing hidden states: the forward hooks Hugging Face's output
    recorder uses are traced into the graph (same result, compiled)."""
    m = model("bert")
    cm = smelt.compile(m)
    x = ids()
    with torch.no_grad():
        ref = m(x, output_hidden_states=True)
        got = cm(x, output_hidden_states=True)
    same(got, ref)
    st = cm._smelt.stats()
    assert st["eager_entries"] == 0 and st["compiles"] == 1, st
