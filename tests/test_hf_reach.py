"""36 Hugging Face architectures through smelt.compile (issue 11).

Each is built offline from a small config (2 layers, width 64, vocab 128,
random weights), in eval mode under torch.no_grad(), and run on random
token ids (decoder ids for encoder-decoders, pixels for ViT, features for
Whisper):

- fullgraph=True: the forward is one graph, the result has eager's type
  and values (within 1e-4), a second call with new ids reuses the entry,
  and a call with a padding mask (models that take one) compiles once more
  and matches too;
- fullgraph=False, with the model's default use_cache: eager's values,
  whether or not smelt compiled it whole.

`python3 tests/test_hf_reach.py` prints the table (compiles whole with
fullgraph=True? matches? the break reason) instead of testing.
"""
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import smelt  # noqa: E402

transformers = pytest.importorskip("transformers")
transformers.utils.logging.set_verbosity_error()

V, B, S, S_DEC = 128, 2, 12, 7


def dims(**kw):
    """The usual decoder/encoder config names, small."""
    d = dict(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
             intermediate_size=128, max_position_embeddings=128)
    d.update(kw)
    return d


def s2s(**kw):
    d = dict(vocab_size=V, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=128)
    d.update(kw)
    return d


# name: (kind, config keyword arguments). kind: base (AutoModel on ids),
# causal (AutoModelForCausalLM), s2s (AutoModelForSeq2SeqLM), vision, audio.
ARCHS = {
    "gpt2": ("causal", dict(vocab_size=V, n_layer=2, n_embd=64, n_head=4, n_positions=128)),
    "bert": ("base", dims()),
    "roberta": ("base", dims()),
    "distilbert": ("base", dict(vocab_size=V, n_layers=2, dim=64, n_heads=4, hidden_dim=128,
                                max_position_embeddings=128)),
    "albert": ("base", dims(embedding_size=32)),
    "electra": ("base", dims(embedding_size=32)),
    "xlm-roberta": ("base", dims()),
    "deberta": ("base", dims()),
    "deberta-v2": ("base", dims()),
    "mobilebert": ("base", dims(embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32,
                                num_feedforward_networks=1)),
    "t5": ("s2s", dict(vocab_size=V, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                       num_heads=4)),
    "bart": ("s2s", s2s()),
    "mbart": ("s2s", s2s()),
    "pegasus": ("s2s", s2s()),
    "marian": ("s2s", s2s(decoder_vocab_size=V, pad_token_id=V - 1, decoder_start_token_id=V - 1)),
    "opt": ("causal", dict(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                           ffn_dim=128, max_position_embeddings=128, word_embed_proj_dim=64)),
    "bloom": ("causal", dict(vocab_size=V, hidden_size=64, n_layer=2, n_head=4)),
    "gpt_neo": ("causal", dict(vocab_size=V, hidden_size=64, num_layers=2, num_heads=4, window_size=8,
                               attention_types=[[["global", "local"], 1]], max_position_embeddings=128)),
    "gptj": ("causal", dict(vocab_size=V, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=128)),
    "gpt_neox": ("causal", dims()),
    "llama": ("causal", dims(num_key_value_heads=2)),
    "mistral": ("causal", dims(num_key_value_heads=2)),
    "mixtral": ("causal", dims(num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)),
    "qwen2": ("causal", dims(num_key_value_heads=2)),
    "qwen3": ("causal", dims(num_key_value_heads=2, head_dim=16)),
    "phi": ("causal", dims()),
    "phi3": ("causal", dims(num_key_value_heads=2, pad_token_id=0)),
    "gemma": ("causal", dims(num_key_value_heads=2, head_dim=16)),
    "gemma2": ("causal", dims(num_key_value_heads=2, head_dim=16)),
    "falcon": ("causal", dict(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4)),
    "stablelm": ("causal", dims(num_key_value_heads=2)),
    "starcoder2": ("causal", dims(num_key_value_heads=2)),
    "mpt": ("causal", dict(vocab_size=V, d_model=64, n_layers=2, n_heads=4, max_seq_len=128)),
    "codegen": ("causal", dict(vocab_size=V, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=128,
                               n_ctx=128)),
    "vit": ("vision", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                           image_size=32, patch_size=8)),
    "whisper": ("audio", s2s(num_mel_bins=16, max_source_positions=32, max_target_positions=64, pad_token_id=0,
                             bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, suppress_tokens=None,
                             begin_suppress_tokens=None)),
}

MODELS = {}


def model(name):
    if name not in MODELS:
        kind, kw = ARCHS[name]
        cfg = transformers.AutoConfig.for_model(name, **kw)
        auto = {"causal": transformers.AutoModelForCausalLM, "s2s": transformers.AutoModelForSeq2SeqLM}
        torch.manual_seed(0)
        MODELS[name] = auto.get(kind, transformers.AutoModel).from_config(cfg).eval()
    return MODELS[name]


def inputs(name, seed, mask=False, cache=False):
    """Keyword arguments of one call: new random data per seed; mask: a
    padding mask (second sequence shorter); cache: leave use_cache at the
    model's default instead of False."""
    kind = ARCHS[name][0]
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, V - 2, (B, S), generator=g)
    if kind == "vision":
        return {"pixel_values": torch.randn(B, 3, 32, 32, generator=g)}
    if kind == "audio":
        d = {"input_features": torch.randn(B, 16, 64, generator=g), "decoder_input_ids": ids[:, :S_DEC]}
    elif kind == "s2s":
        d = {"input_ids": ids, "decoder_input_ids": ids[:, :S_DEC]}
    else:
        d = {"input_ids": ids}
    if mask and kind != "audio":
        m = torch.ones(B, S, dtype=torch.long)
        m[1, S - 4:] = 0
        d["attention_mask"] = m
    if kind != "base" and not cache:
        d["use_cache"] = False
    return d


def takes_mask(name):
    return ARCHS[name][0] not in ("vision", "audio")


def same(got, ref, path="out"):
    """got equals ref: same type; tensors of equal dtype/shape within
    1e-4; ModelOutputs with the same fields; caches of the same type."""
    assert type(got) is type(ref), (path, type(got), type(ref))
    if isinstance(ref, torch.Tensor):
        assert got.dtype == ref.dtype and got.shape == ref.shape, path
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4, msg=lambda m: f"{path}: {m}")
    elif isinstance(ref, dict):
        assert list(got.keys()) == list(ref.keys()), path
        for k in ref:
            same(got[k], ref[k], f"{path}.{k}")
    elif isinstance(ref, (tuple, list)):
        assert len(got) == len(ref), path
        for i, (g, r) in enumerate(zip(got, ref)):
            same(g, r, f"{path}[{i}]")
    elif isinstance(ref, (int, float, bool, str, type(None))):
        assert got == ref, path


def run_pair(m, cm, kw):
    with torch.no_grad():
        ref = m(**kw)
        got = cm(**kw)
    same(got, ref)


@pytest.mark.parametrize("name", list(ARCHS))
def test_fullgraph_compiles_whole_and_matches_eager(name):
    m = model(name)
    cm = smelt.compile(m, fullgraph=True)
    run_pair(m, cm, inputs(name, 1))
    run_pair(m, cm, inputs(name, 2))
    st = cm._smelt.stats()
    assert st["compiles"] == 1 and st["hits"] == 1 and st["eager_entries"] == 0, st
    if takes_mask(name):
        run_pair(m, cm, inputs(name, 3, mask=True))
        assert cm._smelt.stats()["compiles"] == 2


@pytest.mark.parametrize("name", list(ARCHS))
def test_default_compile_matches_eager_with_default_cache(name):
    m = model(name)
    cm = smelt.compile(m)
    for seed in (4, 5):
        run_pair(m, cm, inputs(name, seed, mask=takes_mask(name), cache=True))
    st = cm._smelt.stats()
    assert st["compiles"] + st["eager_entries"] >= 1, st


def table():
    """(name, class, whole with fullgraph=True, matches, reason) per architecture."""
    rows = []
    for name in ARCHS:
        m = model(name)
        whole, match, why = "yes", "yes", ""
        cm = smelt.compile(m, fullgraph=True)
        try:
            run_pair(m, cm, inputs(name, 1))
        except AssertionError as e:
            match = f"NO: {str(e).splitlines()[0][:80]}"
        except Exception as e:  # noqa: BLE001 - a fullgraph refusal is the answer
            whole, match, why = "no", "-", str(e).replace("smelt (fullgraph=True): ", "")
        cm = smelt.compile(m)
        try:
            run_pair(m, cm, inputs(name, 1, mask=takes_mask(name), cache=True))
            st = cm._smelt.stats()
            default = "whole" if st["eager_entries"] == 0 else f"eager: {st['last_break']}"
        except AssertionError as e:
            default = f"WRONG: {str(e).splitlines()[0][:60]}"
        rows.append((name, type(m).__name__, whole, match, default, why))
    return rows


if __name__ == "__main__":
    import re
    print("| architecture | class | fullgraph=True: whole | matches eager | fullgraph=True: break reason "
          "| default compile (use_cache default, padding mask) |")
    print("|---|---|---|---|---|---|")
    for r in table():
        short = [re.sub(r"/\S*/(?:site-packages|lib/python3\.\d+)/", "", x) for x in r]
        print(f"| {short[0]} | {short[1]} | {short[2]} | {short[3]} | {short[5]} | {short[4]} |")
