"""How many vision classifiers smelt compiles whole, and whether their logits
match eager.

    python3 benchmarks/vision_reach.py [--batch 1] [--only name,name] [--timeout 900] [--compile-first]

Needs torchvision and timm (a venv beside the pinned torch works, since smelt
links no torch: PYTHONPATH=<worktree>/python <venv>/bin/python ...). Each
model is built with random weights (seeded), put in eval mode and run under
torch.no_grad() at its default image size, first eagerly, then through
smelt.compile(model, fullgraph=True) twice (the second call hits the cache).
Every model runs in its own child process (a crash or a hang is one row).

The table: name, status (ok: one graph, logits match; MISMATCH: compiled but
wrong; BREAK: fullgraph=True raised a graph break; ERROR: another exception;
CRASH/TIMEOUT: the child died), the max abs error over max |logit|, max
|logit| itself (see calibrate: zero-initialised weights made random, BatchNorm
statistics from one batch, so that the logits say something), the first two calls' seconds
(trace, compile, run), the number of host calls in the graph, and the
reason for anything not ok.
"""
import argparse
import json
import os
import subprocess
import sys
import time

# (name, library, builder name, image size)
MODELS = [
    ("alexnet", "tv", "alexnet", 224),
    ("vgg11", "tv", "vgg11", 224),
    ("vgg11_bn", "tv", "vgg11_bn", 224),
    ("resnet18", "tv", "resnet18", 224),
    ("resnet50", "tv", "resnet50", 224),
    ("resnext50_32x4d", "tv", "resnext50_32x4d", 224),
    ("wide_resnet50_2", "tv", "wide_resnet50_2", 224),
    ("densenet121", "tv", "densenet121", 224),
    ("squeezenet1_0", "tv", "squeezenet1_0", 224),
    ("mobilenet_v2", "tv", "mobilenet_v2", 224),
    ("mobilenet_v3_small", "tv", "mobilenet_v3_small", 224),
    ("mobilenet_v3_large", "tv", "mobilenet_v3_large", 224),
    ("shufflenet_v2_x1_0", "tv", "shufflenet_v2_x1_0", 224),
    ("mnasnet0_5", "tv", "mnasnet0_5", 224),
    ("efficientnet_b0", "tv", "efficientnet_b0", 224),
    ("regnet_x_400mf", "tv", "regnet_x_400mf", 224),
    ("regnet_y_400mf", "tv", "regnet_y_400mf", 224),
    ("convnext_tiny", "tv", "convnext_tiny", 224),
    ("vit_b_16", "tv", "vit_b_16", 224),
    ("swin_t", "tv", "swin_t", 224),
    ("maxvit_t", "tv", "maxvit_t", 224),
    ("googlenet", "tv", "googlenet", 224),
    ("inception_v3", "tv", "inception_v3", 299),
    ("ghostnet_100", "timm", "ghostnet_100", 224),
    ("levit_128s", "timm", "levit_128s", 224),
    ("resnet18d", "timm", "resnet18d", 224),
    ("mobilevit_xxs", "timm", "mobilevit_xxs", 256),
    ("deit_tiny_patch16_224", "timm", "deit_tiny_patch16_224", 224),
]
TOL = 1e-3   # max abs error relative to the largest |logit|


def build(lib, name):
    import torch
    torch.manual_seed(0)
    if lib == "tv":
        import torchvision.models as tvm
        kw = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
        return getattr(tvm, name)(weights=None, **kw)
    import timm
    return timm.create_model(name, pretrained=False)


def calibrate(model, size):
    """model in eval mode with logits worth comparing: weights initialised
    to zero (ViT's head) made random, and BatchNorm running statistics set
    to those of one batch of random images (with the default statistics,
    activations of a randomly initialised deep net fade and the logits are
    about the last bias)."""
    import torch
    g = torch.Generator().manual_seed(2)
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and not p.any():
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
        if bns:
            saved = [m.momentum for m in bns]
            for m in bns:
                m.momentum = 1.0
            model.train()(torch.randn(4, 3, size, size, generator=g))
            for m, mom in zip(bns, saved):
                m.momentum = mom
    return model.eval()


def run_one(name, lib, builder, size, batch, compile_first=False):
    """Runs one model in this process (eagerly first, unless compile_first:
    then the compiled model's first call is the model's first eval call);
    returns the row as a dict."""
    import torch
    import smelt
    row = {"name": name}
    model = calibrate(build(lib, builder), size)
    x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = None if compile_first else model(x)
        cm = smelt.compile(model, fullgraph=True)
        t0 = time.perf_counter()
        try:
            got = cm(x)
            got = cm(x)
        except Exception as e:   # noqa: BLE001 - reported in the table
            msg = str(e).strip().splitlines()
            row["status"] = "BREAK" if "graph break" in str(e).lower() or "fullgraph" in str(e).lower() else "ERROR"
            row["why"] = f"{type(e).__name__}: {msg[0] if msg else ''}"[:300]
            return row
        row["compile_s"] = time.perf_counter() - t0
        ref = model(x) if compile_first else ref
    st = cm._smelt.stats()
    with torch.no_grad():
        row["hostcalls"] = len(smelt.explain(model, x)["host_calls"])
    if type(got) is not type(ref) or got.shape != ref.shape or got.dtype != ref.dtype:
        row["status"], row["why"] = "MISMATCH", f"got {type(got).__name__} {getattr(got, 'shape', '')}"
        return row
    err = float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    row["err"], row["scale"] = err, float(ref.abs().max())
    row["status"] = "ok" if err <= TOL and st.get("eager_entries", 0) == 0 else "MISMATCH"
    if row["status"] != "ok":
        row["why"] = f"relative error {err:.2e}; stats {st}"
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--only", default="")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--child", default="")
    ap.add_argument("--compile-first", action="store_true", help="call the compiled model before the eager one")
    a = ap.parse_args()
    if a.child:
        m = next(m for m in MODELS if m[0] == a.child)
        print("ROW " + json.dumps(run_one(*m, a.batch, a.compile_first)), flush=True)
        return
    only = set(filter(None, a.only.split(",")))
    rows = []
    print(f"{'model':<24} {'status':<9} {'rel err':>9} {'max|ref|':>9} {'first s':>7} {'host':>4}  why")
    for m in MODELS:
        if only and m[0] not in only:
            continue
        t0 = time.time()
        try:
            p = subprocess.run([sys.executable, __file__, "--child", m[0], "--batch", str(a.batch)] +
                               (["--compile-first"] if a.compile_first else []),
                               capture_output=True, text=True, timeout=a.timeout, env=os.environ)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("ROW ")]
            if line:
                row = json.loads(line[-1][4:])
            else:
                tail = (p.stderr.strip().splitlines() or ["?"])[-1]
                row = {"name": m[0], "status": "CRASH", "why": f"rc {p.returncode}: {tail}"[:300]}
        except subprocess.TimeoutExpired:
            row = {"name": m[0], "status": "TIMEOUT", "why": f"> {a.timeout} s"}
        row["wall_s"] = time.time() - t0
        rows.append(row)
        print(f"{row['name']:<24} {row['status']:<9} {row.get('err', float('nan')):9.1e} "
              f"{row.get('scale', float('nan')):9.2e} {row.get('compile_s', float('nan')):7.1f} "
              f"{str(row.get('hostcalls', '')):>4}  {row.get('why', '')}", flush=True)
    ok = sum(r["status"] == "ok" for r in rows)
    print(f"\n{ok} of {len(rows)} compile whole with fullgraph=True and match eager (tolerance {TOL} of max |logit|)")


if __name__ == "__main__":
    main()
