"""Training steps: eager vs smelt vs torch.compile (inductor), CPU.

One step = forward + loss + backward + AdamW step (torch's default
implementation); each compiler compiles the model and, separately, a
function that calls the optimizer's step (torch.compile's compiled-
optimizer recipe; eager calls opt.step()).
The bench models of `python -m smelt.bench` (their sizes), in training
mode with dropout off (so that every compiler computes the same thing):
MLP and CNN (BatchNorm in training mode) with a cross-entropy loss on
their output, GPT-2 with labels (the loss inside the model), BERT with a
mean-square loss on its last hidden state. Each compiler runs in its own
process, twice: with an empty compile cache (cold) and again with the
cache the first run left (warm). Reported: median step ms over the timed
steps, the ratios, the first step's time (cold / warm: compiling the
model and the optimizer step included), the largest gradient
difference from eager's after the first
step (same seed, same batch), and the peak RSS growth over the run.

Usage: python3 benchmarks/train_bench.py [--models mlp,cnn,gpt2,bert]
           [--compilers eager,smelt,inductor] [--steps 10] [--size default|quick|tiny]
           [--json PATH]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def no_dropout(model):
    import torch
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    cfg = getattr(model, "config", None)
    for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "hidden_dropout_prob", "attention_probs_dropout_prob"):
        if cfg is not None and hasattr(cfg, k):
            setattr(cfg, k, 0.0)


def workload(name, size):
    """(model, batch function, loss function) for a bench model in training mode."""
    import torch
    import torch.nn.functional as F
    from smelt import bench
    torch.manual_seed(0)
    if name == "gpt2":
        w = bench.build_gpt2(size)
        (ids,) = w.inputs
        model = w.fn
        return model, (ids,), lambda m, ids: m(input_ids=ids, labels=ids).loss
    w = {"mlp": bench.build_mlp, "cnn": bench.build_cnn, "bert": bench.build_bert}[name](size)
    model, inputs = w.fn, w.inputs
    if name == "bert":
        return model, inputs, lambda m, ids: m(input_ids=ids).last_hidden_state.pow(2).mean()
    out = model(*inputs)
    y = torch.randint(0, out.shape[-1], out.shape[:1], generator=torch.Generator().manual_seed(1))
    return model, inputs, lambda m, x: F.cross_entropy(m(x), y)


def child(args):
    import torch
    torch.manual_seed(0)
    model, inputs, loss_fn = workload(args.model, args.size)
    model.train()
    no_dropout(model)
    import smelt
    compile_ = {"smelt": smelt.compile, "inductor": torch.compile}.get(args.compiler, lambda f: f)
    fn = compile_(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def opt_step():
        opt.step()

    ostep = compile_(opt_step)   # torch.compile's compiled-optimizer recipe; eager: opt.step()
    from smelt.bench import reset_peak, vm_bytes
    reset_peak()   # the peak restarts here: building the model (and its label-count forward) not counted
    rss0 = vm_bytes("VmRSS")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(fn, *inputs)
        loss.backward()
        return loss

    t = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(fn, *inputs)
    loss.backward()
    grads = [p.grad.detach().clone() if p.grad is not None else None for p in model.parameters()]
    ostep()
    first = time.perf_counter() - t   # the first step: smelt compiles everything in it
    step()
    ostep()   # (torch.compile's optimizer step may compile again once the state exists)
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        step()
        ostep()
        times.append(time.perf_counter() - t)
    torch.save({"grads": grads, "loss": float(loss.detach())}, args.grads)
    times.sort()
    hwm = vm_bytes("VmHWM")
    res = {"median_ms": times[len(times) // 2] * 1e3, "first_ms": first * 1e3,
           "peak_mb": (hwm - rss0) / 2 ** 20 if hwm is not None and rss0 is not None else None}
    if args.compiler == "smelt":
        st = fn._smelt.stats()
        res["smelt"] = {k: st[k] for k in ("compiles", "backward_compiles", "breaks", "graphs", "last_break")}
        ost = ostep.stats()
        res["smelt"]["optimizer"] = {k: ost[k] for k in ("compiles", "hits", "last_break")}
    print("RESULT " + json.dumps(res))


def run(model, compiler, args, cache, grads):
    env = dict(os.environ, SMELT_CACHE_DIR=os.path.join(cache, "smelt"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"))
    cmd = [sys.executable, __file__, "--child", "--model", model, "--compiler", compiler, "--size", args.size,
           "--steps", str(args.steps), "--grads", grads]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (r.stderr or r.stdout)[-600:]}


def grad_err(a, b):
    """max over parameters of |g - g_eager| / max(|g_eager|, 1e-3 of the largest
    gradient of any parameter) (a conv bias before BatchNorm has a zero
    gradient up to rounding); inf where one is None and the other not."""
    import torch
    ga, gb = torch.load(a)["grads"], torch.load(b)["grads"]
    top = max((float(y.abs().max()) for y in gb if y is not None and y.numel()), default=0.0)
    err = 0.0
    for x, y in zip(ga, gb):
        if (x is None) != (y is None):
            return float("inf")
        if x is not None and x.numel():
            scale = max(float(y.abs().max()), 1e-3 * top, 1e-30)
            err = max(err, float((x.double() - y.double()).abs().max()) / scale)
    return err


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="mlp,cnn,gpt2,bert")
    p.add_argument("--compilers", default="eager,smelt,inductor")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--size", default="default")
    p.add_argument("--json")
    p.add_argument("--child", action="store_true")
    p.add_argument("--model")
    p.add_argument("--compiler")
    p.add_argument("--grads")
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    load = os.getloadavg()[0]
    records = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            rec = records[model] = {}
            for comp in args.compilers.split(","):
                cache = os.path.join(tmp, model + comp)
                gpath = os.path.join(tmp, f"{model}-{comp}.pt")
                rec[comp] = run(model, comp, args, cache, gpath)
                if comp != "eager" and "error" not in rec[comp]:
                    rec[comp]["warm_first_ms"] = run(model, comp, args, cache, gpath + ".warm").get("first_ms")
                print(f"  {model} {comp}: {rec[comp]}", file=sys.stderr)
            for comp in rec:
                if comp != "eager" and "error" not in rec[comp] and "error" not in rec.get("eager", {"error": 1}):
                    rec[comp]["grad_err"] = grad_err(os.path.join(tmp, f"{model}-{comp}.pt"),
                                                     os.path.join(tmp, f"{model}-eager.pt"))
    print(f"\ntraining step (forward + loss + backward + AdamW step, model and step compiled), median ms of {args.steps}, "
          f"size {args.size}, load {load:.2f}; grad err (after step 1): max over parameters of |g - g_eager| / "
          f"max(|g_eager|, 1e-3 of the largest gradient); peak: RSS growth over the run")
    head = f"{'model':6s} {'eager':>8s} {'smelt':>8s} {'ind':>8s} {'s/e':>6s} {'s/ind':>6s} " \
           f"{'1st smelt c/w':>17s} {'1st ind c/w':>17s} {'err s':>9s} {'err ind':>9s} {'peak MB e/s/i':>16s}"
    print(head)

    def g(rec, c, k, spec=".1f"):
        v = rec.get(c, {}).get(k)
        return format(v, spec) if isinstance(v, (int, float)) else "-"
    for model, rec in records.items():
        e, s, i = (rec.get(c, {}).get("median_ms") for c in ("eager", "smelt", "inductor"))
        se = f"{s / e:.2f}" if e and s else "-"
        si = f"{s / i:.2f}" if i and s else "-"
        print(f"{model:6s} {g(rec, 'eager', 'median_ms'):>8s} {g(rec, 'smelt', 'median_ms'):>8s} "
              f"{g(rec, 'inductor', 'median_ms'):>8s} {se:>6s} {si:>6s} "
              f"{g(rec, 'smelt', 'first_ms', '.0f') + '/' + g(rec, 'smelt', 'warm_first_ms', '.0f'):>17s} "
              f"{g(rec, 'inductor', 'first_ms', '.0f') + '/' + g(rec, 'inductor', 'warm_first_ms', '.0f'):>17s} "
              f"{g(rec, 'smelt', 'grad_err', '.1e'):>9s} {g(rec, 'inductor', 'grad_err', '.1e'):>9s} "
              f"{g(rec, 'eager', 'peak_mb', '.0f') + '/' + g(rec, 'smelt', 'peak_mb', '.0f') + '/' + g(rec, 'inductor', 'peak_mb', '.0f'):>16s}")
        st = rec.get("smelt", {}).get("smelt")
        if st:
            print(f"       smelt: {st}")
        for c, r in rec.items():
            if "error" in r:
                print(f"       {c} failed: {r['error'][-300:]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load": load, "size": args.size, "records": records}, f, indent=1)
    bad = [m for m, rec in records.items() if "smelt" in rec and
           ("error" in rec["smelt"] or rec["smelt"].get("grad_err", 0.0) > 2e-2)]
    if bad:
        print(f"smelt's training step failed or its gradients differ from eager's: {', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
