"""``gcbench bench-train``: DDP step time with gcbench's hook against torch's own hooks, same run.

On ``N`` gloo ranks (this machine's CPUs; NCCL is not used here) every configuration trains the
same model from the same seed for a few steps: DDP without a hook (its built-in all_reduce, the
reference of every ratio), torch's ``allreduce_hook``, ``fp16_compress_hook``,
``bf16_compress_hook`` and ``powerSGD_hook`` (ranks 1 and 4), and gcbench's hook with identity,
fp16, bf16, PowerSGD (same ranks, error feedback as torch's) and other codecs, each with
``overlap`` on and off (:mod:`gcbench.envs.ddp_hook`). Configurations are interleaved in rounds
(round 1: every configuration, round 2: every configuration again...) so that a change of the
machine's load hits all of them alike; the step time reported is the median over rounds and timed
steps of the slowest rank's step (forward, backward with the hook, SGD step), and every ratio
divides by the median of DDP without a hook *in the same run*.

Bucket caps: torch's ``powerSGD_hook`` chains its collectives in future callbacks and hangs on
gloo when DDP has more than one bucket (torch 2.13), so the PowerSGD rows - torch's and gcbench's -
run with one bucket (``--psgd-cap-mb``, larger than the model); every other row uses
``--cap-mb`` (DDP's default 25 MB), where overlap can matter.

Models (inputs are synthetic N(0, 1) tensors and random labels: this measures time, not accuracy):

* ``mlp``: a wide MLP ``1024 -> 4096 -> 4096 -> 1024 -> 10`` (25.2M parameters), where
  communication clearly matters on one machine's loopback;
* ``resnet18``: the CIFAR-style ResNet-18 (11.2M parameters) on 3x32x32 images.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..progress import ProgressBar
from ..outputs import replacing, write_file
from .quiet import quiet_missing_cuda_runtime

# Each rank imports this module to run :func:`_rank_main`; its first compiled kernel must not print torch's
# "No CUDA runtime is found" warning on a machine without a CUDA device.
quiet_missing_cuda_runtime()

#: Per-rank batch sizes of the default run and of ``--quick``.
BATCH = {"mlp": 32, "resnet18": 8}
QUICK_BATCH = {"mlp": 8, "resnet18": 4}
MODELS = ("mlp", "resnet18")
#: gcbench codecs of the default run beyond identity/fp16/bf16/PowerSGD (``--codec`` replaces them).
OTHER_CODECS = ("topk", "qsgd")
#: Targets (ratios of step times measured in one run): gcbench row / peer row (a gcbench peer row
#: in the same overlap mode as the row). Sketched-SGD's two rounds within 2x TopK's step.
TARGETS = (
    ("gcbench identity", "ddp (no hook)", 1.05),
    ("gcbench fp16", "torch fp16_compress_hook", 1.05),
    ("gcbench bf16", "torch bf16_compress_hook", 1.05),
    ("gcbench powersgd r1", "torch powerSGD_hook r1", 1.0),
    ("gcbench powersgd r4", "torch powerSGD_hook r4", 1.0),
    ("gcbench sketched-sgd", "gcbench topk", 2.0),
)
#: What a ``--quick`` run says in place of met / not met: its tiny models and step counts are not what the
#: targets are stated for (the default run), so its ratios are indicative only.
NOT_JUDGED = "not judged: --quick"


@dataclass(frozen=True)
class Config:
    """One row: who reduces the gradients, and how.

    Attributes:
        label: the row's name (``gcbench <codec>[ overlap]``, ``torch <hook>``, ``ddp (no hook)``).
        kind: ``"ddp"`` (no hook), ``"torch"`` (a torch hook) or ``"gcbench"``.
        name: the torch hook (``allreduce``, ``fp16``, ``bf16``, ``powersgd``) or the gcbench codec.
        params: codec parameters (gcbench) or ``{"rank": r}`` (torch's PowerSGD).
        error_feedback: gcbench's error feedback.
        overlap: gcbench's overlap mode.
        cap_mb: DDP's bucket cap.
    """

    label: str
    kind: str
    name: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    error_feedback: bool = False
    overlap: bool = False
    cap_mb: float = 25.0


def build_configs(codecs: Sequence[str] = OTHER_CODECS, *, cap_mb: float = 25.0, psgd_cap_mb: float = 1024.0,
                  psgd_ranks: Sequence[int] = (1, 4)) -> list[Config]:
    """The rows of a run: the anchors, then gcbench's codecs with overlap off and on."""
    rows = [
        Config("ddp (no hook)", "ddp", cap_mb=cap_mb),
        Config("torch allreduce_hook", "torch", "allreduce", cap_mb=cap_mb),
        Config("torch fp16_compress_hook", "torch", "fp16", cap_mb=cap_mb),
        Config("torch bf16_compress_hook", "torch", "bf16", cap_mb=cap_mb),
    ]
    rows += [Config(f"torch powerSGD_hook r{r}", "torch", "powersgd", {"rank": r}, cap_mb=psgd_cap_mb) for r in psgd_ranks]
    gc: list[tuple[str, str, dict[str, Any], bool, float]] = [
        ("identity", "identity", {}, False, cap_mb),
        ("fp16", "fp16", {}, False, cap_mb),
        ("bf16", "bf16", {}, False, cap_mb),
    ]
    gc += [(f"powersgd r{r}", "powersgd", {"rank": r}, True, psgd_cap_mb) for r in psgd_ranks]
    gc += [(c, c, {}, False, cap_mb) for c in codecs if c not in ("identity", "fp16", "bf16", "powersgd")]
    for label, name, params, ef, cap in gc:
        for overlap in (False, True):
            rows.append(Config(f"gcbench {label}{' overlap' if overlap else ''}", "gcbench", name, params, ef, overlap, cap))
    return rows


class WideMLP(nn.Module):
    """``1024 -> 4096 -> 4096 -> 1024 -> 10`` with ReLU (25.2M parameters)."""

    def __init__(self, width: int = 4096, inputs: int = 1024) -> None:
        super().__init__()
        self.inputs = inputs
        self.net = nn.Sequential(nn.Linear(inputs, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                 nn.Linear(width, inputs), nn.ReLU(), nn.Linear(inputs, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: ``(batch, inputs)``."""
        return self.net(x)


def build_model(name: str, *, quick: bool = False, seed: int = 0) -> tuple[nn.Module, tuple[int, ...]]:
    """The model ``name`` (one of :data:`MODELS`) and the shape of one input; ``quick`` shrinks it."""
    from ..workloads.models import seeded

    if name == "mlp":
        width, inputs = (256, 128) if quick else (4096, 1024)
        return seeded(lambda: WideMLP(width, inputs), seed), (inputs,)
    if name == "resnet18":
        # torchvision's resnet18 with the CIFAR stem (one definition, shared with L-GreCo's resnet scale)
        from ..reproductions.lgreco.resnet import build_resnet18

        return build_resnet18(width=8 if quick else 64, seed=seed), (3, 32, 32)
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")


def torch_bf16_hook(state, bucket):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
    """torch's own ``bf16_compress_hook``, called through a wrapper: DDP refuses to register it by
    name unless the backend is NCCL (torch 2.13), though the function itself runs on gloo. (No
    annotations: DDP checks a hook's annotations against the real types, and this module's are
    strings.)"""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return default_hooks.bf16_compress_hook(state, bucket)


def _register(ddp: Any, model: nn.Module, cfg: Config, ctx: Any) -> Any:
    """Register ``cfg``'s hook on ``ddp``; returns what must be closed afterwards (or None)."""
    if cfg.kind == "ddp":
        return None
    if cfg.kind == "torch":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

        if cfg.name == "powersgd":
            state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=int(cfg.params["rank"]),
                                       start_powerSGD_iter=2)
            ddp.register_comm_hook(state, psgd.powerSGD_hook)
        else:
            hook = {"allreduce": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
                    "bf16": torch_bf16_hook}[cfg.name]
            ddp.register_comm_hook(None, hook)
        return None
    from ..envs.ddp_hook import GCBenchHookState, gcbench_hook

    state = GCBenchHookState(cfg.name, dict(cfg.params), error_feedback=cfg.error_feedback, model=model,
                             progress=ctx.progress, overlap=cfg.overlap, verify_shared="first")
    ddp.register_comm_hook(state, gcbench_hook)
    return state


def _rank_main(ctx: Any, plan: Mapping[str, Any]) -> dict[str, list[float]]:
    """Every (round, model, config) on this rank; returns ``{"model|label": [step seconds...]}``."""
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    configs = [Config(**c) for c in plan["configs"]]
    out: dict[str, list[float]] = {}
    done = 0
    for _round in range(plan["rounds"]):
        for model_name in plan["models"]:
            batch = plan["batch"][model_name]
            for cfg in configs:
                model, shape = build_model(model_name, quick=plan["quick"], seed=0)
                gen = torch.Generator().manual_seed(1000 + ctx.rank)
                x = torch.randn((batch, *shape), generator=gen)
                y = torch.randint(0, 10, (batch,), generator=gen)
                ddp = DDP(model, bucket_cap_mb=cfg.cap_mb)
                closer = _register(ddp, model, cfg, ctx)
                opt = torch.optim.SGD(model.parameters(), lr=0.01)
                times = []
                for step in range(plan["warmup"] + plan["steps"]):
                    ctx.progress()
                    dist.barrier()  # every rank starts the step together: the time is the step's, not the wait's
                    t0 = time.perf_counter()
                    opt.zero_grad(set_to_none=True)
                    F.cross_entropy(ddp(x), y).backward()
                    opt.step()
                    if step >= plan["warmup"]:
                        times.append(time.perf_counter() - t0)
                if closer is not None:
                    closer.close()
                del ddp, model, opt
                out.setdefault(f"{model_name}|{cfg.label}", []).extend(times)
                done += 1
                if ctx.rank == 0 and plan.get("progress_file"):
                    with open(plan["progress_file"], "a", encoding="utf-8") as f:
                        f.write(f"{done}\n")
    return out


def summarize(per_rank: Sequence[Mapping[str, Sequence[float]]], plan: Mapping[str, Any]) -> dict[str, Any]:
    """Medians, ratios to DDP's all_reduce of the same model, throughput and the targets. A ``quick`` plan's
    targets are not judged (``met`` is None, ``targets_judged`` False): the targets are stated for the
    default run."""
    judged = not plan.get("quick", False)
    rows = []
    for key in per_rank[0]:
        model, label = key.split("|", 1)
        # a step ends when its slowest rank ends
        steps = [max(r[key][i] for r in per_rank) for i in range(len(per_rank[0][key]))]
        rows.append({"model": model, "label": label, "median_s": statistics.median(steps), "steps_s": steps})
    by = {(r["model"], r["label"]): r for r in rows}
    world = len(per_rank)
    for r in rows:
        ref = by[(r["model"], "ddp (no hook)")]["median_s"]
        r["x_ddp"] = r["median_s"] / ref
        r["samples_per_s"] = world * plan["batch"][r["model"]] / r["median_s"]
        if r["label"].startswith("gcbench ") and not r["label"].endswith(" overlap"):
            on = by.get((r["model"], r["label"] + " overlap"))
            if on is not None:
                r["overlap_gain"] = r["median_s"] / on["median_s"]  # > 1: overlap is faster
    targets = []
    for model in plan["models"]:
        for mine, peer, bound in TARGETS:
            for suffix in ("", " overlap"):
                other = peer + suffix if peer.startswith("gcbench ") else peer
                a, b = by.get((model, mine + suffix)), by.get((model, other))
                if a is None or b is None:
                    continue
                ratio = a["median_s"] / b["median_s"]
                targets.append({"model": model, "row": mine + suffix, "peer": other, "ratio": ratio, "target": bound,
                                "met": ratio <= bound if judged else None})
    return {"rows": rows, "targets": targets, "targets_judged": judged}


def run_bench_train(
    *,
    nproc: int = 2,
    models: Sequence[str] = MODELS,
    codecs: Sequence[str] = OTHER_CODECS,
    steps: int = 3,
    warmup: int = 3,
    rounds: int = 2,
    cap_mb: float = 25.0,
    psgd_cap_mb: float = 1024.0,
    psgd_ranks: Sequence[int] = (1, 4),
    batch: Mapping[str, int] | None = None,
    quick: bool = False,
    timeout_s: float = 300.0,
    progress: bool = True,
) -> dict[str, Any]:
    """Launch ``nproc`` gloo ranks, time every configuration, return the summary (see the module docstring)."""
    import tempfile

    from ..envs.launch import launch

    for m in models:
        if m not in MODELS:
            raise ValueError(f"unknown model {m!r}; known: {', '.join(MODELS)}")
    if steps < 1 or rounds < 1 or warmup < 2:
        raise ValueError("steps and rounds must be >= 1 and warmup >= 2 (torch's PowerSGD starts compressing at step 2)")
    configs = build_configs(codecs, cap_mb=cap_mb, psgd_cap_mb=psgd_cap_mb, psgd_ranks=psgd_ranks)
    batches = dict(QUICK_BATCH if quick else BATCH)
    batches.update(batch or {})
    with tempfile.TemporaryDirectory(prefix="gcbench-bench-train-") as tmp:
        plan = {"configs": [asdict(c) for c in configs], "models": list(models), "rounds": rounds, "steps": steps,
                "warmup": warmup, "batch": batches, "quick": quick, "progress_file": str(Path(tmp) / "progress")}
        total = rounds * len(models) * len(configs)
        result: dict[str, Any] = {}

        def work() -> None:
            try:
                result["ranks"] = launch(_rank_main, nproc, (plan,), timeout_s=timeout_s)
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
                result["error"] = err

        t0 = time.perf_counter()
        thread = threading.Thread(target=work, name="gcbench-bench-train-launch")
        thread.start()
        _watch(thread, Path(plan["progress_file"]), total, progress)
        thread.join()
        if "error" in result:
            raise result["error"]
        wall = time.perf_counter() - t0
    summary = summarize(result["ranks"], plan)
    load = _loadavg()
    return {
        "command": "gcbench bench-train", "ranks": nproc, "backend": "gloo", "threads_per_rank": 1,
        "torch": torch.__version__, "models": list(models), "batch_per_rank": {m: batches[m] for m in models},
        "steps": steps, "warmup": warmup, "rounds": rounds, "cap_mb": cap_mb, "psgd_cap_mb": psgd_cap_mb,
        "quick": quick, "wall_s": wall, "loadavg_after": load, **summary,
    }


def _loadavg() -> list[float] | None:
    try:
        import os

        return [round(v, 2) for v in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def _watch(thread: threading.Thread, progress_file: Path, total: int, show: bool) -> None:
    """A rich progress bar fed by rank 0's progress file while the ranks run."""
    if not show:
        return
    with ProgressBar("bench-train", total) as bar:
        while thread.is_alive():
            thread.join(0.5)
            try:
                n = len(progress_file.read_text(encoding="utf-8").split())
            except OSError:
                n = 0
            bar.update(n)


def met_text(target: Mapping[str, Any], met: str, not_met: str) -> str:
    """A target's verdict in words: ``met``, ``not_met``, or :data:`NOT_JUDGED` (a ``--quick`` run's)."""
    if target["met"] is None:
        return NOT_JUDGED
    return met if target["met"] else not_met


def to_markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown tables: step times per model, then the targets."""
    from ..tables import md_table

    lines = [
        f"Measured: {report['ranks']} gloo ranks, 1 thread each, torch {report['torch']}; median step (forward, backward "
        f"with the hook, SGD step) over {report['rounds']} interleaved rounds x {report['steps']} steps after "
        f"{report['warmup']} warm-up steps; load average after the run {report['loadavg_after']}. Bucket cap "
        f"{report['cap_mb']} MB, PowerSGD rows {report['psgd_cap_mb']} MB (one bucket).",
        "",
    ]
    for model in report["models"]:
        rows = [[r["label"], f"{1000 * r['median_s']:.1f}", f"{r['x_ddp']:.2f}", f"{r['samples_per_s']:.1f}",
                 f"{r['overlap_gain']:.2f}x" if "overlap_gain" in r else ""]
                for r in report["rows"] if r["model"] == model]
        lines += [f"**{model}** (batch {report['batch_per_rank'][model]} per rank)", "",
                  md_table(["configuration", "median step (ms)", "x DDP allreduce", "samples/s", "overlap gain (off/on)"],
                           rows, right=(1, 2, 3, 4)), ""]
    targets = [[t["model"], t["row"], t["peer"], f"{t['ratio']:.2f}", f"<= {t['target']:.2f}", met_text(t, "yes", "no")]
               for t in report["targets"]]
    lines.append(md_table(["model", "gcbench row", "torch row", "ratio", "target", "met"], targets, right=(3, 4)))
    return "\n".join(lines) + "\n"


def plot(report: Mapping[str, Any], path: str | Path) -> None:
    """Horizontal bars of step time as a multiple of DDP's all_reduce, one panel per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = report["models"]
    n = max(sum(1 for r in report["rows"] if r["model"] == m) for m in models)
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 0.28 * n + 1.5), squeeze=False)
    for ax, model in zip(axes[0], models):
        rows = [r for r in report["rows"] if r["model"] == model]
        colors = ["#888888" if r["label"].startswith(("ddp", "torch")) else
                  ("#1f77b4" if r["label"].endswith("overlap") else "#aec7e8") for r in rows]
        ax.barh([r["label"] for r in rows], [r["x_ddp"] for r in rows], color=colors)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.invert_yaxis()
        ax.set_xlabel("step time / DDP all_reduce (same run, measured)")
        ax.set_title(f"{model}, batch {report['batch_per_rank'][model]}/rank, {report['ranks']} gloo ranks")
        ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


def bench_train_main(
    *,
    json_path: str | Path | None = None,
    markdown_path: str | Path | None = None,
    plot_path: str | Path | None = None,
    console: Any = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Run :func:`run_bench_train`, print a table, write the requested files; returns the report."""
    from rich.console import Console

    from ..tables import print_whole, whole_table

    console = console or Console()
    report = run_bench_train(**kwargs)
    for model in report["models"]:
        title = (f"{model}: batch {report['batch_per_rank'][model]}/rank, {report['ranks']} gloo ranks "
                 f"(measured; load after run {report['loadavg_after']})")
        rows = [[r["label"], f"{1000 * r['median_s']:.1f}", f"{r['x_ddp']:.2f}", f"{r['samples_per_s']:.1f}",
                 f"{r['overlap_gain']:.2f}x" if "overlap_gain" in r else ""]
                for r in report["rows"] if r["model"] == model]
        headers = ("configuration", "median ms", "x DDP", "samples/s", "overlap gain")
        print_whole(console, lambda compact: whole_table(headers, rows, title=title, compact=compact))  # noqa: B023
    for t in report["targets"]:
        mark = met_text(t, "met", "NOT met")
        console.print(f"{t['model']}: {t['row']} / {t['peer']} = {t['ratio']:.2f} (target <= {t['target']}) {mark}", soft_wrap=True)
    if json_path is not None:
        write_file(json_path, json.dumps(report, indent=2) + "\n")
    if markdown_path is not None:
        write_file(markdown_path, to_markdown(report))
    if plot_path is not None:
        plot(report, plot_path)
    return report

