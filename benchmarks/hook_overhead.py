"""The DDP hook's fixed cost per step on a small model (target: "hook step <= 1.10x torch's hooks").

``gcbench bench-train`` judges the hook on a 25.2M-parameter MLP and ResNet-18, where a bucket's
bytes dominate; on a small model the per-bucket Python and the checks dominate instead. This runs
a 265,482-parameter MLP (``256 -> 512 -> 256 -> 10``, synthetic batches of 32, one bucket) on
``world`` gloo ranks of this machine, one torch thread each, with four hooks registered on four
identical DDP models: torch's ``allreduce_hook`` and ``fp16_compress_hook``, and gcbench's hook
with the identity and fp16 codecs at default options. Steps (forward, backward, SGD) are timed in
interleaved rounds of 20 steps after a barrier, the order reversed every other round; rank 0 prints
each model's median step and the ratios gcbench identity / torch allreduce and gcbench fp16 / torch
fp16: the median of the rounds' ratios (each round times both hooks back to back, so the ratio of a
pair is free of the machine's drift between rounds) and the ratio of the medians.

Run: ``python -m benchmarks.hook_overhead [world] [rounds]`` (defaults 2 and 30; about a minute).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

WIDTH, INPUTS, BATCH, STEPS = 512, 256, 32, 20


def _rank(rank: int, world: int, rounds: int, port: int) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from gcbench.envs.ddp_hook import GCBenchHookState, gcbench_hook

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(INPUTS, WIDTH), nn.ReLU(), nn.Linear(WIDTH, INPUTS), nn.ReLU(), nn.Linear(INPUTS, 10))

    gen = torch.Generator().manual_seed(rank)
    x, y = torch.randn(BATCH, INPUTS, generator=gen), torch.randint(0, 10, (BATCH,), generator=gen)
    runs = {}
    for name in ("torch allreduce_hook", "gcbench identity", "torch fp16_compress_hook", "gcbench fp16"):
        m = model()
        ddp = nn.parallel.DistributedDataParallel(m)
        if name == "torch allreduce_hook":
            ddp.register_comm_hook(None, default_hooks.allreduce_hook)
        elif name == "torch fp16_compress_hook":
            ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        else:
            ddp.register_comm_hook(GCBenchHookState(name.split()[1], {}, model=m), gcbench_hook)
        runs[name] = (ddp, torch.optim.SGD(m.parameters(), lr=0.01))

    def step(ddp: nn.Module, opt: torch.optim.Optimizer) -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    for ddp, opt in runs.values():
        for _ in range(5):  # DDP rebuilds its buckets after the first step
            step(ddp, opt)
    times: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs)
    for r in range(rounds):
        for name in order if r % 2 == 0 else order[::-1]:  # alternate the order: drift cancels in pairs
            ddp, opt = runs[name]
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(STEPS):
                step(ddp, opt)
            times[name].append((time.perf_counter() - t0) / STEPS)
    if rank == 0:
        med = {name: statistics.median(v) for name, v in times.items()}
        params = sum(p.numel() for p in model().parameters())
        print(f"{params:,} parameters, {world} gloo rank(s), {rounds} rounds of {STEPS} steps; median step:")
        for name, s in med.items():
            print(f"  {name:26s} {s * 1e6:9.1f} us")
        for ours, theirs in (("gcbench identity", "torch allreduce_hook"), ("gcbench fp16", "torch fp16_compress_hook")):
            paired = statistics.median(a / b for a, b in zip(times[ours], times[theirs]))
            print(f"{ours} / {theirs} = {paired:.3f} (median of the rounds' ratios; of the medians: "
                  f"{med[ours] / med[theirs]:.3f})")
    dist.destroy_process_group()


def main(world: int = 2, rounds: int = 30) -> None:
    """Spawn ``world`` ranks and print rank 0's table (see the module docstring)."""
    import torch.multiprocessing as mp

    port = 29500 + os.getpid() % 1000
    mp.spawn(_rank, args=(world, rounds, port), nprocs=world)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
