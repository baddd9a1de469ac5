"""``gcbench train``: a short data-parallel training run with a codec, real or simulated, and its report.

:func:`train_main` trains a small model (:mod:`gcbench.workloads.models`) on scikit-learn's bundled digits
(1,500 images for training, the last 297 held out) with SGD:

* **real** (default): ``nproc`` ranks (:func:`gcbench.envs.launch.launch`) or, when
  started under ``torchrun``, the ranks torchrun made; DDP with
  :func:`gcbench.envs.ddp_hook.gcbench_hook`. A rank that dies, raises or hangs ends the run
  with :class:`gcbench.envs.errors.WorkerFailedError` within about ``timeout_s`` seconds.
  Placement (:func:`gcbench.envs.launch.placement`): on the CPU every rank uses gloo; on CUDA, one rank per GPU uses
  NCCL (rank ``r`` on ``cuda:r``), and ranks that share one GPU (more ranks than GPUs, or a device
  named ``cuda:N``) use gloo with CUDA tensors, every rank on that GPU.
* **simulated** (``simulate=True``): ``nproc`` logical workers in this process
  (:class:`gcbench.envs.simulated.SimulatedCluster`); same batches, same aggregation code, so the
  final parameters equal the real run's for ``nproc = 2``.

Worker ``r`` of ``W`` takes, at step ``s``, the ``r``-th slice of ``batch_size`` images of the
``s``-th global batch of an epoch-wise permutation seeded by ``(seed, epoch)``
(:func:`gcbench.workloads.training.batch_indices`): batches depend only on ``(seed, step, rank)``,
so a resumed run sees what an uninterrupted one would.

Checkpoints (``checkpoint_every > 0``): every rank writes ``<dir>/step<N>/rank<r>.pt`` (model,
optimizer, the hook's per-tensor codec state and generators, traffic and losses so far; with an
adaptive policy also its choice, its accumulation buffer, Accordion's previous norms, the decisions
applied and the time objective's samples), then rank 0 points ``<dir>/latest`` at it;
``resume=True`` continues from ``latest`` bit-exactly (the time objective's later fits rest on
measured seconds, so with it only up to timing). Checkpoints are read as tensors and plain values only,
and the folder is checked before any rank starts (:mod:`gcbench.commands.train_checkpoints`).

Mixed precision (``amp=True``, real ranks): float16 autocast and a loss scaler on CUDA, the hook
handing a step whose gradients overflowed to the scaler (``non_finite="nan"``), which skips it; bfloat16
autocast on the CPU. The scaler's state travels with the checkpoints.

The report (:mod:`gcbench.commands.train_report`) keeps three kinds of numbers apart, each labelled:
bytes (counted from real payloads), *measured* seconds on this machine (compute, encode, decode, and
the localhost collectives), and *modelled* communication seconds under a cluster profile
(:mod:`gcbench.envs.network`). While the run goes on, a progress bar over its steps is shown on stderr when
that is a terminal (:mod:`gcbench.progress`; of rank 0, drawn by the launcher or by rank 0 under torchrun).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..progress import ProgressBar
from ..outputs import write_file
from ..data.digits import DIGITS_DESCRIPTION, N_TRAIN, load_digits_tensors
from ..bench.limits import RANKS_PER_CPU, max_local_ranks
from ..envs.launch import check_timeout
from ..workloads.models import MODELS, build_model
from ..workloads.training import batch_indices, params_digest
from .options import TRAIN_SEED_LIMIT, check_seed
from .train_checkpoints import check_checkpoint_dir, check_compatible, latest, load_rank, save
from .train_report import build_report, format_report, to_markdown

#: Bounds of the options: DDP buckets of at most a TB. The real ranks' is
#: :func:`~gcbench.bench.limits.max_local_ranks`, the seed's
#: :data:`~gcbench.commands.options.TRAIN_SEED_LIMIT`, the collective timeout's the launcher's
#: (:data:`gcbench.envs.launch.MAX_TIMEOUT_S`).
MAX_BUCKET_CAP_MB = 1e6
CHECKPOINT_FIELDS = ("codec", "codec_params", "error_feedback", "nproc", "batch_size", "lr", "momentum", "seed", "model",
                     "adaptive", "adaptive_every", "adaptive_warmup", "adaptive_objective", "amp")


@dataclass
class TrainConfig:
    """Every option of a training run (see :func:`train_main`)."""

    codec: str = "identity"
    codec_params: dict[str, Any] = field(default_factory=dict)
    error_feedback: bool = False
    nproc: int = 2
    steps: int = 20
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    seed: int = 0
    model: str = "mlp"
    bucket_cap_mb: float | None = None
    profile: str | None = "sketchml-cluster1"
    model_workers: int | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    resume: bool = False
    timeout_s: float = 60.0
    backend: str = "gloo"
    simulate: bool = False
    topology: str = "collective"
    pull_codec: str | None = None
    pull_params: dict[str, Any] = field(default_factory=dict)
    fault: str | None = None
    adaptive: str | None = None
    adaptive_every: int = 10
    adaptive_warmup: int = 0
    adaptive_objective: str = "size"
    overlap: bool = False
    device: str = "cpu"
    amp: bool = False

    def __post_init__(self) -> None:
        if self.nproc < 1:
            raise ValueError(f"nproc must be >= 1, got {self.nproc}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"--lr must be a positive finite number, got {self.lr}")
        if not (math.isfinite(self.momentum) and self.momentum >= 0):
            raise ValueError(f"momentum must be a finite number >= 0, got {self.momentum}")
        check_seed(self.seed, TRAIN_SEED_LIMIT)
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; known: {', '.join(MODELS)}")
        if self.bucket_cap_mb is not None and not (math.isfinite(self.bucket_cap_mb) and 0 < self.bucket_cap_mb <= MAX_BUCKET_CAP_MB):
            raise ValueError(f"--bucket-cap-mb must be a number of MB in (0, {MAX_BUCKET_CAP_MB:g}], got {self.bucket_cap_mb}")
        check_timeout(self.timeout_s, "--timeout")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        if self.batch_size < 1 or self.batch_size * self.nproc > N_TRAIN:
            raise ValueError(f"batch_size * nproc must be in 1..{N_TRAIN}, got {self.batch_size} * {self.nproc}")
        if self.checkpoint_every < 0:
            raise ValueError("checkpoint_every must be >= 0")
        if (self.checkpoint_every or self.resume) and not self.checkpoint_dir:
            raise ValueError("--checkpoint-every / --resume need --checkpoint-dir")
        if self.fault is not None:
            _parse_fault(self.fault)
        if self.pull_codec is not None and self.topology != "parameter_server":
            raise ValueError("pull_codec needs topology='parameter_server'")
        if self.adaptive_every < 1 or self.adaptive_warmup < 0:
            raise ValueError("adaptive_every >= 1 and adaptive_warmup >= 0 are required")
        if self.adaptive_objective not in ("size", "priority", "time"):
            raise ValueError(f"adaptive_objective must be size, priority or time, got {self.adaptive_objective!r}")
        if self.adaptive_objective != "size" and (self.adaptive is None or self.simulate):
            raise ValueError("adaptive_objective 'priority'/'time' needs --adaptive lgreco[+accordion] in real DDP ranks "
                             "(the simulated cluster has no measured per-bucket sync time)")
        if self.topology != "collective" and not self.simulate:
            raise ValueError(f"topology {self.topology!r} is simulated only (simulate=True); real runs use DDP collectives")
        if self.overlap and self.simulate:
            raise ValueError("--overlap (a communication thread per rank) applies to real ranks, not to the simulated cluster")
        if self.amp and self.simulate:
            raise ValueError("amp (autocast and a loss scaler) applies to real ranks, not to the simulated cluster")
        if self.simulate and self.device != "cpu":
            raise ValueError(f"the simulated cluster runs on the CPU; device {self.device!r} applies to real ranks")
        if self.backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be gloo or nccl, got {self.backend!r}")
        if self.backend == "nccl" and not self.device.startswith("cuda"):
            raise ValueError("the nccl backend needs a CUDA device (device='cuda')")


def _parse_fault(spec: str) -> tuple[str, int, int]:
    """``"kill:RANK:STEP"``, ``"hang:RANK:STEP"`` or ``"raise:RANK:STEP"`` (fault injection for tests)."""
    try:
        kind, rank, step = spec.split(":")
        if kind not in ("kill", "hang", "raise"):
            raise ValueError
        return kind, int(rank), int(step)
    except ValueError:
        raise ValueError(f"fault must be 'kill|hang|raise:RANK:STEP', got {spec!r}") from None


def _evaluate(model: torch.nn.Module, device: torch.device) -> dict[str, float]:
    data = load_digits_tensors()
    with torch.no_grad():
        x_tr, y_tr = data.x[:N_TRAIN].to(device), data.y[:N_TRAIN].to(device)
        x_te, y_te = data.x[N_TRAIN:].to(device), data.y[N_TRAIN:].to(device)
        train_loss = float(F.cross_entropy(model(x_tr), y_tr))
        test_acc = float((model(x_te).argmax(1) == y_te).float().mean())
    return {"train_loss": train_loss, "test_accuracy": test_acc}


# ---------------------------------------------------------------------------------------------------
# one rank of a real run
# ---------------------------------------------------------------------------------------------------


def _hook_state(cfg: TrainConfig, model: torch.nn.Module, **kwargs: Any) -> Any:
    """The DDP hook's state of a rank of this run (``kwargs``: traffic, progress, overlap, non_finite, ...)."""
    from ..envs.ddp_hook import GCBenchHookState

    return GCBenchHookState(
        cfg.codec, cfg.codec_params, error_feedback=cfg.error_feedback, model=model, policy=cfg.adaptive,
        adaptive_every=cfg.adaptive_every, adaptive_warmup=cfg.adaptive_warmup, adaptive_objective=cfg.adaptive_objective,
        time_calibration=min(10, max(0, cfg.adaptive_warmup + cfg.adaptive_every - 1)), **kwargs,
    )


def _check_before_launch(cfg: TrainConfig) -> None:
    """Build here what every rank builds first (model, the hook's codec and adaptive policy) and check the
    checkpoint folder, so that a bad option or checkpoint is one typed error in this process, before
    any rank starts or any file is written."""
    model = build_model(cfg.model, seed=cfg.seed)
    _hook_state(cfg, model, compile_ahead=False)
    check_checkpoint_dir(cfg, CHECKPOINT_FIELDS, model)


def _rank_main(ctx: Any, cfg: TrainConfig) -> dict[str, Any]:
    """Train on one rank of an initialised process group; return this rank's results."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ..envs.ddp_hook import gcbench_hook
    from ..envs.traffic import TrafficLog

    rank, world = ctx.rank, ctx.world_size
    if cfg.device == "cpu":
        device = torch.device("cpu")
    elif cfg.backend == "nccl" and ":" not in cfg.device:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    else:  # ranks sharing one GPU (gloo with CUDA tensors), or one rank on the GPU named
        device = torch.device(cfg.device if ":" in cfg.device else "cuda:0")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    data = load_digits_tensors()
    x, y = data.x[:N_TRAIN].to(device), data.y[:N_TRAIN].to(device)
    model = build_model(cfg.model, seed=cfg.seed).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    traffic = TrafficLog()
    # mixed precision: float16 autocast and a loss scaler on CUDA, bfloat16 autocast on the CPU (its
    # range is float32's: no scaler); a step the scaler skips reaches it through the hook as NaN (without
    # a scaler, a non-finite step raises, as it does in full precision)
    autocast = (torch.float16 if device.type == "cuda" else torch.bfloat16) if cfg.amp else None
    scaler = torch.amp.GradScaler(device.type) if autocast == torch.float16 else None
    state = _hook_state(cfg, model, traffic=traffic, progress=ctx.progress, overlap=cfg.overlap,
                        non_finite="nan" if scaler is not None else "raise")
    start, losses, resumed_from = 0, [], None
    if cfg.resume:
        folder = latest(Path(cfg.checkpoint_dir))
        if folder is not None:
            ck = load_rank(folder / f"rank{rank}.pt", map_location=device)
            check_compatible(ck["config"], cfg, CHECKPOINT_FIELDS)
            model.load_state_dict(ck["model"])
            opt.load_state_dict(ck["optimizer"])
            state.load_state_dict(ck["hook"])
            if scaler is not None:
                scaler.load_state_dict(ck["scaler"])
            traffic.extend(TrafficLog.from_dict(ck["traffic"]))
            start, losses, resumed_from = int(ck["step"]), list(ck["losses"]), int(ck["step"])
    ddp_kwargs: dict[str, Any] = {} if cfg.bucket_cap_mb is None else {"bucket_cap_mb": cfg.bucket_cap_mb}
    if device.type == "cuda":
        ddp_kwargs["device_ids"] = [device.index]
    ddp = DDP(model, **ddp_kwargs)
    ddp.register_comm_hook(state, gcbench_hook)
    fault = _parse_fault(cfg.fault) if cfg.fault else None
    for step in range(start, cfg.steps):
        ctx.progress()
        if fault is not None and fault[1] == rank and fault[2] == step:
            _inject(fault[0], rank, step)
        n_times = len(traffic.time_records)
        t0 = time.perf_counter()
        idx = batch_indices(step, rank, world, cfg.batch_size, cfg.seed).to(device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=autocast) if autocast is not None else contextlib.nullcontext():
            loss = F.cross_entropy(ddp(x[idx]), y[idx])
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)  # skips the step when the gradients are not finite
            scaler.update()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - t0
        hook_s = sum(r.seconds for r in traffic.time_records[n_times:] if r.phase in ("encode", "decode", "comm"))
        traffic.time(step, rank, "step", elapsed)
        traffic.time(step, rank, "compute", max(elapsed - hook_s, 0.0))
        losses.append(float(loss.detach()))
        if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0:
            save(cfg, rank, step + 1, model, opt, state, traffic, losses, scaler)
        ctx.step_done(step + 1)  # the progress bar's feed (rank 0's), after the step's timing
    state.close()
    return {
        "rank": rank,
        "world_size": world,
        "device": str(device),
        "losses": losses,
        "traffic": traffic.to_dict(),
        "params_digest": params_digest(model),
        "eval": _evaluate(model, device),
        "resumed_from": resumed_from,
        "parameters": sum(p.numel() for p in model.parameters()),
        "adaptive_decisions": state.decisions,
        "autocast": str(autocast).removeprefix("torch.") if autocast is not None else None,
        "loss_scale": scaler.get_scale() if scaler is not None else None,
        "skipped_steps": list(state.non_finite_steps),
    }


def _inject(kind: str, rank: int, step: int) -> None:
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "hang":
        time.sleep(10**6)
    else:
        raise RuntimeError(f"fault injected on rank {rank} at step {step}")


# ---------------------------------------------------------------------------------------------------
# simulated run
# ---------------------------------------------------------------------------------------------------


def _simulate(cfg: TrainConfig, on_step: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    from ..envs.simulated import SimulatedCluster
    from ..envs.workers import CodecSpec

    if cfg.checkpoint_every or cfg.resume or cfg.fault:
        raise ValueError("checkpoints and fault injection apply to real runs only")
    data = load_digits_tensors()
    x, y = data.x[:N_TRAIN], data.y[:N_TRAIN]
    model = build_model(cfg.model, seed=cfg.seed)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    sim = SimulatedCluster(
        model, cfg.nproc, cfg.codec, cfg.codec_params, error_feedback=cfg.error_feedback, bucket_cap_mb=cfg.bucket_cap_mb,
        topology=cfg.topology,
        # 3LC compresses the server's reply too, with its own error accumulation on the server
        pull_codec=CodecSpec(name=cfg.pull_codec, params=cfg.pull_params, error_feedback=cfg.error_feedback) if cfg.pull_codec else None,
        policy=cfg.adaptive, adaptive_every=cfg.adaptive_every, adaptive_warmup=cfg.adaptive_warmup,
    )
    losses: list[list[float]] = []
    for step in range(cfg.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        batches = [batch_indices(step, w, cfg.nproc, cfg.batch_size, cfg.seed) for w in range(cfg.nproc)]
        step_losses = sim.backward(lambda w, b=batches: F.cross_entropy(model(x[b[w]]), y[b[w]]))
        opt.step()
        losses.append(step_losses)
        sim.traffic.time(step, -1, "step", time.perf_counter() - t0)
        if on_step is not None:
            on_step(step + 1)
    ev = _evaluate(model, torch.device("cpu"))
    digest = params_digest(model)
    log = sim.traffic.to_dict()
    return [
        {
            "rank": w,
            "world_size": cfg.nproc,
            "device": "cpu",
            "losses": [row[w] for row in losses],
            "traffic": log if w == 0 else {"wire": [], "raw": [], "time": []},
            "params_digest": digest,
            "eval": ev,
            "resumed_from": None,
            "parameters": sum(p.numel() for p in model.parameters()),
            "adaptive_decisions": sim.decisions,
        }
        for w in range(cfg.nproc)
    ]


# ---------------------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------------------


def _under_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def end_torchrun_rank(simulate: bool = False) -> None:
    """End this process at once when it is a torchrun rank that finished its run (a no-op otherwise,
    or with ``simulate``): standard streams flushed, then ``os._exit(0)``, without the interpreter's
    finalization.

    Gloo's worker threads release a collective's tensors a moment after the collective completes, and
    releasing a tensor that Python has seen takes the GIL. A rank whose last collective (the results'
    ``all_gather_object``) is followed at once by the interpreter's finalization can have that release
    land while the interpreter is being torn down: the thread cannot take the GIL, exits, and the
    process aborts ("terminate called without an active exception", SIGABRT; about 1 run in 30 of a
    two-rank torchrun of a few steps here), which torchrun reports as a failed run. Everything the rank
    writes is written and closed before this is called (the process group is destroyed, the report and
    checkpoints are on disk)."""
    if simulate or not _under_torchrun():
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing left to flush
            pass
    os._exit(0)


def train_main(
    codec: str = "identity",
    nproc: int = 2,
    steps: int = 20,
    profile: str | None = "sketchml-cluster1",
    *,
    codec_params: Mapping[str, Any] | None = None,
    error_feedback: bool = False,
    batch_size: int = 32,
    lr: float = 0.05,
    momentum: float = 0.9,
    seed: int = 0,
    model: str = "mlp",
    bucket_cap_mb: float | None = None,
    model_workers: int | None = None,
    checkpoint_dir: str | None = None,
    checkpoint_every: int = 0,
    resume: bool = False,
    timeout_s: float = 60.0,
    backend: str | None = "gloo",
    simulate: bool = False,
    topology: str = "collective",
    pull_codec: str | None = None,
    pull_params: Mapping[str, Any] | None = None,
    fault: str | None = None,
    adaptive: str | None = None,
    adaptive_every: int = 10,
    adaptive_warmup: int = 0,
    adaptive_objective: str = "size",
    overlap: bool = False,
    device: str | None = "cpu",
    amp: bool = False,
    out_json: str | None = None,
    out_markdown: str | None = None,
    print_report: bool = True,
) -> dict[str, Any] | None:
    """Train the digits model with ``codec`` on ``nproc`` workers and report bytes and times.

    Args:
        codec: registry name (``gcbench codecs``); ``codec_params`` override its defaults.
        nproc: ranks to launch (at most :func:`max_local_ranks`; ignored under torchrun, which decides), or
            simulated workers.
        steps: optimizer steps.
        profile: cluster profile for the modelled communication time (None = none).
        error_feedback: wrap the codec in error feedback.
        batch_size: images per worker per step.
        lr, momentum: SGD (``lr`` positive and finite).
        seed: model initialisation, batch order and codec randomness (``0 <= seed < TRAIN_SEED_LIMIT``).
        model: ``"mlp"`` or ``"cnn"`` (:mod:`gcbench.workloads.models`).
        bucket_cap_mb: DDP bucket size, in ``(0, MAX_BUCKET_CAP_MB]`` (None = DDP's default).
        model_workers: price communication for this many workers (default: the run's).
        checkpoint_dir, checkpoint_every, resume: see the module docstring and
            :mod:`gcbench.commands.train_checkpoints` (a folder holding another run's checkpoints is
            refused unless ``resume``).
        timeout_s: collective timeout (at most the launcher's ``MAX_TIMEOUT_S``); a dead or hung rank ends the run within
            about this long.
        backend: ``"gloo"`` or ``"nccl"``; None picks from ``device`` and ``nproc`` (:func:`gcbench.envs.launch.placement`).
        simulate: run ``nproc`` logical workers in this process instead of real ranks.
        topology: ``"collective"`` (what DDP does) or, simulated only, ``"parameter_server"``.
        pull_codec, pull_params: the parameter server re-encodes its reply with this codec (error
            feedback on the server when ``error_feedback``); None = the fp32 average.
        fault: fault injection for tests: ``"kill|hang|raise:RANK:STEP"``.
        adaptive: per-layer parameters chosen during training for a laddered codec (powersgd,
            qsgd, topk, sketchml, 3lc): ``"lgreco"``, ``"accordion"`` or ``"lgreco+accordion"``
            (:func:`gcbench.envs.adaptive.make_policy`); None = uniform ``codec_params``.
        adaptive_every, adaptive_warmup: steps between decisions and before the first period.
        adaptive_objective: L-GreCo's objective in real ranks: ``size`` (bytes), ``priority``
            (bytes x (bucket + 1), Appendix A) or ``time`` (bytes x per-bucket coefficients fitted
            from measured sync time after up to 10 calibration steps, §4).
        overlap: the hook's overlap mode (each bucket's communication on a thread while backward
            goes on; the same parameters). The report's compute time (step minus the hook's
            measured seconds) is then a lower bound.
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` for the real ranks (None: cuda when available,
            else cpu; a simulation runs on the CPU). Model, data and the hook's tensors live there.
        amp: real ranks: mixed precision, float16 autocast with a loss scaler
            (``torch.amp.GradScaler``) on CUDA, where the hook runs with ``non_finite="nan"`` so that
            a step whose gradients overflowed on some rank is skipped by the scaler on every rank (the
            report lists those steps); bfloat16 autocast on the CPU, without a scaler.
        out_json: write the report here as JSON.
        out_markdown: write the report here as Markdown.
        print_report: print the text table.

    Returns:
        The report (on rank 0 under torchrun; None on the other ranks).

    Raises:
        ValueError: an option out of range or that does not fit the others (before anything runs).
        gcbench.commands.train_checkpoints.CheckpointError: the checkpoint folder or a checkpoint cannot be
            used (before any rank starts).
        gcbench.envs.errors.WorkerFailedError: a rank died, raised or hung.
    """
    from ..envs.launch import placement
    from ..workloads.devices import resolve_device

    if backend not in (None, "gloo", "nccl"):
        raise ValueError(f"unknown backend {backend!r}; valid: gloo, nccl")
    if _under_torchrun() and not simulate:
        nproc = int(os.environ["WORLD_SIZE"])  # torchrun decides
    elif not simulate and nproc > max_local_ranks():
        raise ValueError(f"--nproc must be at most {max_local_ranks()} for real ranks on this machine ({RANKS_PER_CPU} per "
                         f"CPU core), got {nproc}; --simulate takes more workers")
    device = "cpu" if simulate and device is None else resolve_device(device)
    if not simulate and not _under_torchrun():
        backend, _ = placement(device, nproc, backend)
    elif backend is None:
        backend = "nccl" if device != "cpu" and _under_torchrun() else "gloo"
    cfg = TrainConfig(
        codec=codec,
        codec_params=dict(codec_params or {}),
        error_feedback=error_feedback,
        nproc=nproc,
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        momentum=momentum,
        seed=seed,
        model=model,
        bucket_cap_mb=bucket_cap_mb,
        profile=profile,
        model_workers=model_workers,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every=checkpoint_every,
        resume=resume,
        timeout_s=timeout_s,
        backend=backend,
        simulate=simulate,
        topology=topology,
        pull_codec=pull_codec,
        pull_params=dict(pull_params or {}),
        fault=fault,
        adaptive=adaptive,
        adaptive_every=adaptive_every,
        adaptive_warmup=adaptive_warmup,
        adaptive_objective=adaptive_objective,
        overlap=overlap,
        device=device,
        amp=amp,
    )
    if cfg.profile:
        from ..envs.network import load_profile

        load_profile(cfg.profile)  # fail before launching anything
    # Build the codec(s) once here, so a bad name or parameter is one typed error in this process
    # instead of the same traceback from every rank.
    from ..compressors import families

    families.build(cfg.codec, **cfg.codec_params)
    if cfg.pull_codec:
        families.build(cfg.pull_codec, **cfg.pull_params)
    if not cfg.simulate:
        _check_before_launch(cfg)
    t0 = time.perf_counter()
    if cfg.simulate:
        with ProgressBar("train", cfg.steps) as bar:  # steps done; on stderr, on a terminal only
            results = _simulate(cfg, bar.update)
    elif _under_torchrun():
        results = _torchrun_rank(cfg)
        if results is None:
            return None
    else:
        from ..envs.launch import launch

        with ProgressBar("train", cfg.steps) as bar:  # rank 0's steps, drawn by this launcher
            results = launch(_rank_main, cfg.nproc, (cfg,), timeout_s=cfg.timeout_s, backend=cfg.backend,
                             on_steps=bar.update)
    report = build_report(cfg, results, time.perf_counter() - t0,
                          data=DIGITS_DESCRIPTION + f"; first {N_TRAIN} images train, the rest test")
    if cfg.adaptive:
        report["adaptive"] = {"policy": cfg.adaptive, "objective": cfg.adaptive_objective, "every": cfg.adaptive_every, "decisions": results[0].get("adaptive_decisions", [])}
    if print_report:
        print(format_report(report))
    if out_json:
        write_file(out_json, json.dumps(report, indent=1, default=str))
    if out_markdown:
        write_file(out_markdown, to_markdown(report))
    return report


def _torchrun_rank(cfg: TrainConfig) -> list[dict[str, Any]] | None:
    """This process is one rank of a torchrun launch: train, then gather results on rank 0."""
    import datetime

    import torch.distributed as dist

    from ..envs.launch import WorkerContext

    torch.set_num_threads(1)
    dist.init_process_group(cfg.backend, init_method="env://", timeout=datetime.timedelta(seconds=cfg.timeout_s))
    try:
        ctx = WorkerContext(dist.get_rank(), dist.get_world_size(), cfg.timeout_s)
        cfg.nproc = ctx.world_size
        with ProgressBar("train", cfg.steps) if ctx.rank == 0 else contextlib.nullcontext() as bar:  # rank 0 draws
            ctx.on_step = getattr(bar, "update", None)
            mine = _rank_main(ctx, cfg)
        gathered: list[Any] = [None] * ctx.world_size
        dist.all_gather_object(gathered, mine)
    finally:
        dist.destroy_process_group()
    return gathered if ctx.rank == 0 else None


def main(argv: list[str] | None = None) -> None:
    """``python -m gcbench.commands.train`` (e.g. under ``torchrun --nproc_per_node 2 -m gcbench.commands.train ...``).

    A thin argument parser over :func:`train_main` for launchers that run a module; the ``gcbench
    train`` command is the documented interface.
    """
    import argparse

    ap = argparse.ArgumentParser(prog="python -m gcbench.commands.train", description=main.__doc__)
    ap.add_argument("--codec", default="identity")
    ap.add_argument("--params", default="{}", help="codec parameters as JSON, e.g. '{\"ratio\": 0.01}'")
    ap.add_argument("--error-feedback", action="store_true")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--profile", default="sketchml-cluster1")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--bucket-cap-mb", type=float, default=None)
    ap.add_argument("--checkpoint-dir", default=None)
    ap.add_argument("--checkpoint-every", type=int, default=0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--timeout-s", type=float, default=60.0)
    ap.add_argument("--backend", default=None, help="gloo or nccl (default: from --device)")
    ap.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    ap.add_argument("--simulate", action="store_true")
    ap.add_argument("--amp", action="store_true", help="autocast and a loss scaler (see gcbench train --help)")
    ap.add_argument("--topology", default="collective", choices=["collective", "parameter_server"])
    ap.add_argument("--pull-codec", default=None)
    ap.add_argument("--out-json", default=None)
    ap.add_argument("--out-markdown", default=None)
    a = ap.parse_args(argv)
    try:
        params = json.loads(a.params)
    except json.JSONDecodeError as err:
        ap.error(f"--params is not JSON ({err})")
    if not isinstance(params, dict):
        ap.error("--params must be a JSON object, e.g. '{\"ratio\": 0.01}'")
    from ..compressors.errors import GCBenchError
    from ..envs.errors import WorkerFailedError

    try:
        _main_run(a, params)
    except WorkerFailedError as err:
        print(f"{ap.prog}: training failed: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    except (GCBenchError, ValueError) as err:  # bad options, codec parameters or checkpoints: usage errors
        ap.error(f"{type(err).__name__}: {err}")
    end_torchrun_rank(a.simulate)


def _main_run(a: Any, params: dict[str, Any]) -> None:
    train_main(
        a.codec, a.nproc, a.steps, a.profile or None, codec_params=params, error_feedback=a.error_feedback,
        batch_size=a.batch_size, lr=a.lr, seed=a.seed, model=a.model, bucket_cap_mb=a.bucket_cap_mb,
        checkpoint_dir=a.checkpoint_dir, checkpoint_every=a.checkpoint_every, resume=a.resume, timeout_s=a.timeout_s,
        backend=a.backend, simulate=a.simulate, topology=a.topology, device=a.device, amp=a.amp,
        pull_codec=a.pull_codec, out_json=a.out_json, out_markdown=a.out_markdown,
    )


if __name__ == "__main__":
    main()
