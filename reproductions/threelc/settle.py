"""How many steps 3LC's traffic needs to settle: the per-step reduction of one long traffic run.

The claims scale's traffic cells report the total reduction over a fixed number of steps; whether
that number of steps is enough depends on how fast the gradient statistics stop moving. This
module trains one 3LC setting (the claims scale's traffic model: ResNet-110 on 32x32 Fashion-MNIST,
4 workers and a parameter server, :func:`.train.train`) at a *constant* learning rate (a cosine
schedule over the run's own length would change the statistics at its end) and writes, after every
step, the framed bytes of the push and the pull (the TrafficLog: what the transport sent) and the
process CPU seconds of that step, so a run stopped early still leaves its measurements::

    python -m gcbench.reproductions.threelc.settle --steps 200 --sparsity 1.0 --out settle.json

:func:`.branch.settled_at` reads the result: the first step from which every window of ``window`` steps
has a reduction within ``tolerance`` of the run's last window.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gcbench.envs.traffic import TrafficLog

from .branch import settled_at, window_reductions
from .model import build_resnet
from .train import MethodSpec, TrainConfig, train


def run(steps: int, sparsity: float, out: Path, *, depth: int = 110, dataset: str = "fashion-mnist", lr: float = 0.1,
        eval_samples: int = 200, seed: int = 0) -> dict[str, Any]:
    """Train 3LC at ``sparsity`` for ``steps`` steps, writing ``out`` (JSON) after every step."""
    import torch

    from .workload import workload

    wl = workload()
    preset = wl.spec.scale("claims")
    data = wl.data(SimpleNamespace(cache={}), dataset, int(preset["image_size"]), eval_samples, False, None)
    cfg = TrainConfig(depth=depth, width=int(preset["width"]), workers=int(preset["workers"]),
                      batch_per_worker=int(preset["batch_per_worker"]), steps=steps, lr=lr, schedule="constant",
                      eval_every=steps, stage_check_every=10**9, seed=seed, profiles=tuple(wl.spec.workload["profiles"]))
    n_params = sum(p.numel() for p in build_resnet(depth, cfg.width, data.in_channels).parameters())
    rec: dict[str, Any] = {"config": {"steps": steps, "sparsity": sparsity, "depth": depth, "width": cfg.width,
                                      "workers": cfg.workers, "batch_per_worker": cfg.batch_per_worker, "lr": lr,
                                      "schedule": "constant", "dataset": data.summary, "params": n_params,
                                      "torch_threads": torch.get_num_threads()},
                           "fp32_per_step": 2 * 4 * n_params * cfg.workers, "push": [], "pull": [], "cpu_s": [], "wall_s": []}
    clock = {"cpu": time.process_time(), "wall": time.perf_counter()}

    def on_step(step: int, log: TrafficLog) -> None:
        for op in ("push", "pull"):
            rec[op].append(sum(r.nbytes for r in log.wire_records if r.step == step and r.op == op))
        now_cpu, now_wall = time.process_time(), time.perf_counter()
        rec["cpu_s"].append(now_cpu - clock["cpu"])
        rec["wall_s"].append(now_wall - clock["wall"])
        clock.update(cpu=now_cpu, wall=now_wall)
        out.write_text(json.dumps(rec))

    method = MethodSpec(f"3lc-s{sparsity:.2f}", "3LC", "3lc", {"sparsity": float(sparsity)}, kind="3lc")
    result = train(data, cfg, method, on_step=on_step)
    rec["final_test_acc"] = result["summary"]["final_test_acc"]
    out.write_text(json.dumps(rec))
    return rec


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see the module docstring."""
    ap = argparse.ArgumentParser(prog="python -m gcbench.reproductions.threelc.settle", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--sparsity", type=float, default=1.0)
    ap.add_argument("--depth", type=int, default=110)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--tolerance", type=float, default=0.15)
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # one core: the CPU seconds per step are what an idle core would take
    rec = run(a.steps, a.sparsity, a.out, depth=a.depth)
    sent = [p + q for p, q in zip(rec["push"], rec["pull"])]
    print("reduction per window:", [round(x, 1) for x in window_reductions(rec["fp32_per_step"], sent, a.window)])
    print("settled at step:", settled_at(rec["fp32_per_step"], sent, a.window, a.tolerance))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
