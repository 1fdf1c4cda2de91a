#!/usr/bin/env python3
"""SDPA at small head dims: eager torch vs smelt, and small ViTs that spend most of their time there.

Part 1 times torch.nn.functional.scaled_dot_product_attention eagerly and
through a smelt.compile'd function that calls it, for q, k, v [B, H, L, E]
float32 (L in 65, 197, 256, 1024; E in 16, 32, 64, 128; H such that H * E
is 192, at least 3). Part 2 times timm-style vision transformers (patch 16,
width 192, MLP 768, q/k/v split off one Linear as timm does) eagerly and
through smelt.compile, eval mode under torch.no_grad(), and checks that the
outputs match (atol 1e-4). Eager and smelt calls alternate, so a load
change hits both; each number is the median of the timed calls.

--cpu times one thread's CPU time instead of wall time (--threads 1 is
implied): on a machine shared with other jobs, where wall times swing
with the load, it still compares the two fairly. --best reports the
fastest call instead of the median (less sensitive to a load that comes
and goes).

Usage: PYTHONPATH=python python3 benchmarks/sdpa_small_heads.py
           [--threads 2] [--reps 50] [--only sdpa|vit] [--causal] [--cpu] [--best]
Prints the load average first: wall times taken under load are not comparable.
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import smelt


CLOCK = time.perf_counter   # time.thread_time under --cpu
STAT = statistics.median    # min under --best


def timed(fns, reps, warmup=3):
    """Median seconds per call of each of fns, calls interleaved."""
    for _ in range(warmup):
        for f in fns:
            f()
    times = [[] for _ in fns]
    for _ in range(reps):
        for f, t in zip(fns, times):
            t0 = CLOCK()
            f()
            t.append(CLOCK() - t0)
    return [STAT(t) for t in times]


def reps_for(seconds_per_call, budget, lo, hi):
    return max(lo, min(hi, int(budget / max(seconds_per_call, 1e-6))))


def bench_sdpa(args):
    print(f"{'B':>3} {'H':>3} {'L':>5} {'E':>4}  {'torch ms':>9} {'smelt ms':>9}  {'smelt/torch':>11}  max err")
    for E in (16, 32, 64, 128):
        for L in (65, 197, 256, 1024):
            H = max(3, 192 // E)
            B = 8 if L <= 256 else 2
            q, k, v = (torch.randn(B, H, L, E) for _ in range(3))

            def attn(q, k, v):
                return F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)

            compiled = smelt.compile(attn)
            with torch.no_grad():
                ref, got = attn(q, k, v), compiled(q, k, v)
                err = (ref - got).abs().max().item()
                t0 = time.perf_counter()
                attn(q, k, v)
                n = reps_for(time.perf_counter() - t0, 1.5, 10, args.reps)
                te, ts = timed([lambda: attn(q, k, v), lambda: compiled(q, k, v)], n)
            flag = "" if err < 1e-4 else "  WRONG"
            print(f"{B:>3} {H:>3} {L:>5} {E:>4}  {te * 1e3:9.3f} {ts * 1e3:9.3f}  {ts / te:11.2f}  {err:.1e}{flag}",
                  flush=True)


class Attention(nn.Module):
    """timm's Attention (fused path): one qkv Linear, split into heads, SDPA, proj."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, heads, mlp):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim, eps=1e-6), nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """timm's VisionTransformer reduced: patch embedding, class token, position embedding, blocks, head."""

    def __init__(self, image, dim, heads, depth, mlp=768, patch=16, classes=1000):
        super().__init__()
        n = (image // patch) ** 2
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*(Block(dim, heads, mlp) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, img):
        x = self.patch(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


VITS = [   # name, image size, width, heads, depth, batch
    ("vit h16 img224 d6", 224, 192, 12, 6, 8),
    ("vit h32 img224 d6", 224, 192, 6, 6, 8),
    ("vit h16 img128 d4", 128, 192, 12, 4, 8),
    ("deit_tiny (h64 d12)", 224, 192, 3, 12, 8),
]


def bench_vit(args):
    print(f"\n{'model':<22} {'L':>4} {'eager ms':>9} {'smelt ms':>9}  {'smelt/eager':>11}  max err")
    for name, image, dim, heads, depth, batch in VITS:
        torch.manual_seed(0)
        model = ViT(image, dim, heads, depth).eval()
        img = torch.randn(batch, 3, image, image)
        compiled = smelt.compile(model)
        with torch.no_grad():
            ref, got = model(img), compiled(img)
            err = (ref - got).abs().max().item()
            t0 = time.perf_counter()
            model(img)
            n = reps_for(time.perf_counter() - t0, 4, 10, args.reps)
            te, ts = timed([lambda: model(img), lambda: compiled(img)], n)
        flag = "" if torch.allclose(ref, got, atol=1e-4) else "  MISMATCH"
        L = (image // 16) ** 2 + 1
        print(f"{name:<22} {L:>4} {te * 1e3:9.2f} {ts * 1e3:9.2f}  {ts / te:11.2f}  {err:.1e}{flag}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--only", choices=("sdpa", "vit"))
    p.add_argument("--causal", action="store_true", help="part 1 with is_causal=True")
    p.add_argument("--cpu", action="store_true", help="1 thread, its CPU time (robust to other jobs' load)")
    p.add_argument("--best", action="store_true", help="the fastest call, not the median")
    args = p.parse_args()
    global CLOCK, STAT
    if args.cpu:
        CLOCK, args.threads = time.thread_time, 1
    if args.best:
        STAT = min
    torch.set_num_threads(args.threads)
    smelt._C.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads{' (CPU time)' if args.cpu else ''}, "
          f"{'best' if args.best else 'median'} of the timed calls, load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()), file=sys.stderr)
    if args.only != "vit":
        bench_sdpa(args)
    if args.only != "sdpa":
        bench_vit(args)
    print("load average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()), file=sys.stderr)


if __name__ == "__main__":
    main()
