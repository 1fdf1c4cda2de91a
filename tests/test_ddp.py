"""A smelt-compiled module inside DistributedDataParallel (gloo, two
processes on this machine) trains to the same parameters as one process
on the combined batch: the compiled backward's parameter gradients reach
DDP's reducer hooks, which average them across the processes."""
import os
import socket
import subprocess
import sys
import textwrap

import torch

WORKER = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    import smelt
    rank, world, port, out, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    torch.set_num_threads(1)
    if world > 1:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 31), torch.nn.LayerNorm(31), torch.nn.GELU(),
                                torch.nn.Linear(31, 5))
    net = smelt.compile(model) if mode == "smelt" else model
    if world > 1:
        net = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    for step in range(6):
        x, y = torch.randn(8, 12, generator=g), torch.randint(0, 5, (8,), generator=g)
        lo, hi = (rank * 8 // world, (rank + 1) * 8 // world)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x[lo:hi]), y[lo:hi])
        loss.backward()
        opt.step()
    if mode == "smelt":
        st = net.module._smelt.stats() if world > 1 else net._smelt.stats()
        assert st["backward_compiles"] >= 1, st
    torch.save([p.detach() for p in model.parameters()], out)
    if world > 1:
        dist.destroy_process_group()
""")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _run(tmp_path, world, mode):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = _free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(world), port,
                               str(tmp_path / f"{mode}-{world}-{r}.pt"), mode], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(world)]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out.decode()[-3000:]
    return [torch.load(tmp_path / f"{mode}-{world}-{r}.pt") for r in range(world)]


def test_ddp_two_processes_match_one_process(tmp_path):
    single = _run(tmp_path, 1, "eager")[0]
    ranks = _run(tmp_path, 2, "smelt")
    for r in ranks:   # both replicas hold the same parameters, those of the combined batch
        for a, b in zip(r, single):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
