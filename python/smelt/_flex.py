"""FlexAttention through smelt.

Inside `smelt.compile`d code, torch's `flex_attention` becomes one fused
attention op whose score and mask functions are compiled into the kernel
(tracer/flex.c). `smelt.flex_attention` and `smelt.create_block_mask` are
the same calls for code that is not compiled: each compiles itself (one
compiled function, reused while its guards hold: per shape and per score
or mask function).
"""
import torch
from torch.nn.attention import flex_attention as _fa

from . import _api


class _TracedBlockMask(_fa.BlockMask):
    """What `create_block_mask` gives inside compiled code: its mask
    function and sizes, no tables (smelt's kernel classifies each tile by
    the mask function itself). Should one leave the compiled code, its
    tables are computed on first use, as create_block_mask would."""

    def __init__(self, mask_mod, B=None, H=None, Q_LEN=None, KV_LEN=None, device=None,
                 BLOCK_SIZE=_fa._DEFAULT_SPARSE_BLOCK_SIZE, _compile=False, separate_full_blocks=True,
                 compute_dq_write_order=False, dq_kv_order=True):
        if isinstance(BLOCK_SIZE, int):
            BLOCK_SIZE = (BLOCK_SIZE, BLOCK_SIZE)
        self.mask_mod = mask_mod
        self.BLOCK_SIZE = (BLOCK_SIZE[0], BLOCK_SIZE[1])
        self.seq_lengths = (Q_LEN, KV_LEN)
        self.batch_heads = (B, H)

    def __getattr__(self, name):
        if name.startswith("__") or name in ("mask_mod", "BLOCK_SIZE", "seq_lengths", "batch_heads"):
            raise AttributeError(name)
        real = create_block_mask(self.mask_mod, *self.batch_heads, *self.seq_lengths,
                                 BLOCK_SIZE=self.BLOCK_SIZE)
        self.__dict__.update(real.__dict__)
        return getattr(self, name)


def _flex_call(query, key, value, score_mod, block_mask, scale, enable_gqa, return_lse):
    return _fa.flex_attention(query, key, value, score_mod=score_mod, block_mask=block_mask, scale=scale,
                              enable_gqa=enable_gqa, return_lse=return_lse)


def _call_mod(fn, *args):
    """fn(*args); in traced code guarded by fn's code, not its identity
    (tracer/flex.c), so a mask function made anew per call (over this
    batch's document ids) does not recompile."""
    return fn(*args)


def _block_states(mask_mod, B, H, Q_LEN, KV_LEN, bq, bk):
    """Per block of bq x bk: whether mask_mod holds on some (partial) or
    every (full) point of it, int8 [B, H, Q blocks, KV blocks]. Points past
    the lengths count as masked; the functions see indices clamped to them."""
    QB, KB = -(-Q_LEN // bq), -(-KV_LEN // bk)
    qp = torch.arange(QB * bq, dtype=torch.int32)
    kp = torch.arange(KB * bk, dtype=torch.int32)
    b = torch.arange(B, dtype=torch.int32).view(B, 1, 1, 1)
    h = torch.arange(H, dtype=torch.int32).view(1, H, 1, 1)
    q = qp.clamp(max=Q_LEN - 1).view(1, 1, -1, 1)
    kv = kp.clamp(max=KV_LEN - 1).view(1, 1, 1, -1)
    m = torch.as_tensor(_call_mod(mask_mod, b, h, q, kv)).to(torch.bool)
    m = m & (qp < Q_LEN).view(1, 1, -1, 1) & (kp < KV_LEN).view(1, 1, 1, -1)
    m = m.expand(B, H, QB * bq, KB * bk).reshape(B, H, QB, bq, KB, bk)
    s = m.sum(dim=(3, 5))
    full = s == bq * bk
    partial = (s > 0) & ~full
    return partial.to(torch.int8), full.to(torch.int8)


_compiled = {}


def _get(name, fn):
    c = _compiled.get(name)
    if c is None:
        c = _compiled[name] = _api.compile(fn)
    return c


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False, kernel_options=None):
    """torch.nn.attention.flex_attention.flex_attention, compiled by smelt
    (the score function fused into the attention kernel; its backward too).
    kernel_options (Triton's) are ignored."""
    return _get("flex", _flex_call)(query, key, value, score_mod, block_mask, scale, enable_gqa, return_lse)


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device="cpu", BLOCK_SIZE=_fa._DEFAULT_SPARSE_BLOCK_SIZE,
                      _compile=False):
    """torch.nn.attention.flex_attention.create_block_mask with the mask
    evaluated per block by a compiled kernel (cached per shape and mask
    function): a torch BlockMask. Devices other than the CPU: torch's."""
    if device is not None and torch.device(device).type != "cpu":
        return _fa.create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=device, BLOCK_SIZE=BLOCK_SIZE)
    bq, bk = (BLOCK_SIZE, BLOCK_SIZE) if isinstance(BLOCK_SIZE, int) else BLOCK_SIZE
    B = 1 if B is None else B
    H = 1 if H is None else H
    partial, full = _get("blocks", _block_states)(mask_mod, B, H, Q_LEN, KV_LEN, bq, bk)
    return _fa._create_sparse_block_from_block_mask((partial, full), mask_mod, (Q_LEN, KV_LEN), bq, bk)
