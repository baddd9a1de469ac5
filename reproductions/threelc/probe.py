"""The 3LC workload's probe (:mod:`..framework.workload_stamp`): four steps of :func:`.train.train`
for four methods on synthetic images, and what they computed.

The methods are one of each kind a cell trains: the 32-bit baseline (fp32 pull), 3LC at sparsity
multiplier 1.75 (its pull re-encoded by the server, the stage checks on every step), TopK with error
feedback, and two local steps (the local-SGD loop). The model is the cells' ResNet-8 at width 4 on
two simulated workers (parameter server). The images are synthetic: N(0, 1) pixels ``1 x 8 x 8``
and uniform labels of 10 classes from a generator seeded with :data:`SEED`, 64 to train on and 32 to
evaluate, the training batches augmented as the ``augment`` scales' are (random crops of the
zero-padded images, horizontal flips). Each method contributes its per-step training losses, its evaluations (held-out loss and
accuracy, bytes so far, modelled communication seconds per profile), its bytes by direction and
stage, and the digest of the workers' replica after the last step (where the method has one replica
the whole run). Measured seconds are left out.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

from gcbench.workloads.training import params_digest

from .train import MethodSpec, PreparedData, TrainConfig, train

#: Seed of the synthetic images' generator.
SEED = 20190401
#: What the cells compute that this probe does not reach ("module.py" or "module.py:qualname"), and why:
#: a change there still needs the package's ``CODE_VERSION`` (``tests/test_repro_probe_reach.py`` holds
#: every other function the cells call to being reached by :func:`probe`).
UNPROBED = {
    "workload.py": "the cells' glue: a cell's configuration into TrainConfig and MethodSpec, the data set "
                   "(loading, resizing, the training subset), W&B logging and the result's assembly",
}
#: The probed methods (see the module docstring).
METHODS = (
    MethodSpec(name="32bit", label="32-bit float", codec="identity", pull="fp32", kind="baseline"),
    MethodSpec(name="3lc-s1.75", label="3LC s=1.75", codec="3lc", params={"sparsity": 1.75}, kind="3lc"),
    MethodSpec(name="sparse-25", label="TopK 25% + EF", codec="topk", params={"ratio": 0.25}, error_feedback=True),
    MethodSpec(name="local-2", label="local SGD, H=2", codec="identity", pull="fp32", local_steps=2),
)
#: The probed training configuration's fields.
CONFIG = {"depth": 8, "width": 4, "workers": 2, "batch_per_worker": 8, "steps": 4, "lr": 0.1, "eval_every": 2,
          "stage_check_every": 1}


def probe_data() -> PreparedData:
    """The synthetic images (see the module docstring)."""
    gen = torch.Generator().manual_seed(SEED)
    x = torch.randn(96, 1, 8, 8, generator=gen)
    y = torch.randint(0, 10, (96,), generator=gen)
    return PreparedData(x[:64], y[:64], x[64:], y[64:], {"name": "probe", "description": "synthetic N(0, 1) 1x8x8"},
                        augment=True)


def probe() -> Iterator[tuple[str, Any]]:
    """The probe's items: per method, what its four steps computed (see the module docstring)."""
    data = probe_data()
    cfg = TrainConfig(**CONFIG)  # checked as a cell's is
    for method in METHODS:
        replica: list[torch.nn.Module] = []
        result = train(data, cfg, method, on_start=lambda model, _sim: replica.append(model))
        s = result["summary"]
        yield f"{method.name}.train_loss", result["train_loss"]
        yield f"{method.name}.evals", [{k: e[k] for k in ("step", "test_loss", "test_acc", "bytes", "modelled_comm_s")}
                                       for e in result["evals"]]
        yield f"{method.name}.bytes", {k: s[k] for k in ("push_bytes", "pull_bytes", "stats_bytes", "baseline_fp32_bytes",
                                                         "baseline_stats_bytes", "params", "comm_steps")}
        yield f"{method.name}.stages", {k: {"bytes": v["bytes"], "framed_per_step": v["framed_per_step"],
                                            "mismatch_count": v["mismatch_count"], "zero_fraction": v["zero_fraction"]}
                                        for k, v in result["stages"].items()}
        if replica:
            yield f"{method.name}.replica", params_digest(replica[0])
