"""A simulated cluster: ``W`` logical workers in one process, through the real path's code.

The papers train on 4 to 50 workers; a laptop or CI machine has a few cores. :class:`SimulatedCluster`
keeps one model replica (every worker's replica is identical after each synchronous step, in the
real run as here), computes each worker's gradient on its own mini-batch in turn, and averages them
with :class:`gcbench.envs.aggregator.Aggregator` - the class the DDP hook uses - over a
:class:`~gcbench.envs.collectives.LocalCollective`. Codec state is per worker
(:class:`~gcbench.envs.workers.WorkerCodecs`, with the same per-rank seeding as the hook), so a
simulated run with ``W = 2`` gives the same parameters, bit for bit, as a real gloo run with 2
ranks and the same seed (``tests/test_envs_ddp.py`` checks it), and the same traffic records.

Topologies:

* ``"collective"`` - what the DDP hook does: each codec's protocol (all_reduce for linear codecs,
  all_gather of payload bytes for the others, a codec's own rounds). Gradients are grouped
  into buckets as DDP (default flags) does: one bucket in registration order in the first step,
  then buckets filled in reverse registration order up to ``bucket_cap_mb``, the first of them up to
  1 MiB where ``bucket_cap_mb`` is left at DDP's default (DDP's small first bucket).
* ``"parameter_server"`` - SketchML's Spark driver / 3LC's servers: every worker pushes its
  serialized payloads, the server decodes (linear codecs: sums payloads first) and averages, an
  optional ``server_step`` turns the average into what the server sends (3LC: an optimizer step
  on the server's model, then the model change), and every worker pulls it - as fp32, or encoded
  with ``pull_codec`` (3LC compresses both directions). One push and one pull per worker per step,
  all parameters together (:mod:`gcbench.envs.protocols.parameter_server`).

What is measured here (encode/decode/compute seconds on this machine) and what would be the
communication time on a real cluster (:func:`gcbench.envs.network.comm_time` of ``traffic``) are
kept apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from ..compressors.errors import InvalidParameterError
from .adaptive import make_policy, run_policy_decision
from .aggregator import NON_FINITE_MODES, Aggregator
from .collectives import LocalCollective
from .errors import UnsupportedTopologyError
from .network import TOPOLOGIES
from .protocols.parameter_server import ServerStep
from .traffic import TrafficLog
from .workers import CodecSpec, WorkerCodecs

#: DDP's default bucket size (``bucket_cap_mb=None`` -> 25 MiB; torch.nn.parallel.distributed).
DEFAULT_BUCKET_CAP_MB = 25.0
#: The cap of DDP's first rebuilt bucket when ``bucket_cap_mb`` is left at its default (torch's
#: ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``, 1 MiB; an explicit cap applies to every bucket).
DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024


def ddp_bucket_layout(sizes_bytes: Sequence[int], cap_bytes: int, first_cap_bytes: int | None = None) -> list[list[int]]:
    """DDP's bucket assignment after its first iteration: indices in reverse order, a bucket closes
    once its size reaches its cap (``compute_bucket_assignment_by_size`` in torch's reducer):
    ``first_cap_bytes`` for the first bucket (None: ``cap_bytes``), ``cap_bytes`` for the others."""
    buckets: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i in reversed(range(len(sizes_bytes))):
        current.append(i)
        size += sizes_bytes[i]
        if size >= (first_cap_bytes if first_cap_bytes is not None and not buckets else cap_bytes):
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return buckets


@contextmanager
def _threads(n: int | None) -> Iterator[None]:
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


class SimulatedCluster:
    """``world_size`` logical workers training ``model`` with ``codec``.

    Args:
        model: the (single) replica; its ``named_parameters()`` names key per-tensor state.
        world_size: number of logical workers ``W``.
        codec: a registry name, a :class:`CodecSpec`, or a factory ``f(**params)``.
        params, error_feedback, layer_params: as in :class:`gcbench.envs.ddp_hook.GCBenchHookState`
            (a CodecSpec carries its own).
        traffic: a :class:`TrafficLog` to append to (one is created when None).
        topology: ``"collective"`` or ``"parameter_server"``.
        pull_codec: the server's codec for the pull (parameter server only; None = fp32).
        server_step: ``f(average, keys) -> tensors`` the server runs before the pull (parameter
            server only; None = it sends the average). With it, each parameter's ``.grad`` after
            :meth:`backward` holds what the server sent, as the workers decoded it.
        bucket_cap_mb: DDP's ``bucket_cap_mb`` (collective topology); None is DDP's default, 25 MiB
            buckets after a first one of 1 MiB.
        verify_shared: as in the hook.
        threads: torch threads while computing (1 matches gcbench's launched ranks; None = leave).
        policy, adaptive_every, adaptive_warmup: a per-layer policy as in the hook (a string is
            built with ``rank=0``): decided before the step's first aggregation, observing worker
            0's local gradients (rank 0 decides in a real run), so ``W = 2`` here equals a real
            2-rank run.
        non_finite: as in the hook: ``"raise"``, or ``"nan"`` (a loss scaler's training): each bucket
            first exchanges a finiteness flag; where a worker's bucket holds NaN or Inf, that bucket
            and the step's later ones average to NaN, nothing else is sent, no codec state changes and
            the policy does not observe the step (:attr:`non_finite_steps` lists it).

    Usage::

        sim = SimulatedCluster(model, 4, "qsgd", {"levels": 15})
        for step in range(steps):
            opt.zero_grad()
            losses = sim.backward(lambda w: loss_fn(model(x[w]), y[w]))
            opt.step()
    """

    def __init__(
        self,
        model: torch.nn.Module,
        world_size: int,
        codec: str | CodecSpec | Callable[..., Any],
        params: Mapping[str, Any] | None = None,
        *,
        error_feedback: bool = False,
        layer_params: Mapping[str, Mapping[str, Any]] | None = None,
        topology: str = "collective",
        pull_codec: CodecSpec | None = None,
        server_step: ServerStep | None = None,
        bucket_cap_mb: float | None = None,
        verify_shared: str = "first",
        traffic: TrafficLog | None = None,
        threads: int | None = 1,
        policy: Any = None,
        adaptive_every: int = 10,
        adaptive_warmup: int = 0,
        non_finite: str = "raise",
    ) -> None:
        if topology not in TOPOLOGIES:
            raise UnsupportedTopologyError(f"topology must be one of {TOPOLOGIES}, got {topology!r}")
        if (pull_codec is not None or server_step is not None) and topology != "parameter_server":
            raise UnsupportedTopologyError("pull_codec and server_step apply to the parameter_server topology only")
        self.spec = CodecSpec.of(codec, params, error_feedback=error_feedback, layer_params=layer_params)
        if non_finite not in NON_FINITE_MODES:
            raise InvalidParameterError(f"non_finite must be one of {NON_FINITE_MODES}, got {non_finite!r}")
        self.non_finite = non_finite
        #: Steps whose gradients held NaN or Inf on some worker, with ``non_finite="nan"``.
        self.non_finite_steps: list[int] = []
        self.model = model
        self.world_size = world_size
        self.topology = topology
        self.traffic = traffic if traffic is not None else TrafficLog()
        self.workers = [WorkerCodecs(self.spec, rank=r) for r in range(world_size)]
        if pull_codec is not None:
            pull_codec.check()
        self.server = WorkerCodecs(pull_codec, rank=-1) if pull_codec is not None else None
        self.server_step = server_step
        self.aggregator = Aggregator(self.workers, LocalCollective(world_size), self.traffic, verify_shared=verify_shared)
        self.named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        cap = DEFAULT_BUCKET_CAP_MB if bucket_cap_mb is None else bucket_cap_mb
        self.bucket_cap_bytes = int(cap * 1024 * 1024)
        self.first_bucket_cap_bytes = DEFAULT_FIRST_BUCKET_BYTES if bucket_cap_mb is None else self.bucket_cap_bytes
        self.threads = threads
        self.step = 0
        if isinstance(policy, str):
            policy = make_policy(
                policy, self.spec, every=adaptive_every, warmup=adaptive_warmup, layers=[n for n, _ in self.named], rank=0
            )
        self.policy = policy
        #: ``{"step": s, "layer_params": {...}}`` for every decision applied.
        self.decisions: list[dict[str, Any]] = []

    def buckets(self, step: int) -> list[list[int]]:
        """Parameter indices of each bucket in ``step`` (DDP's layout; see the module docstring)."""
        if self.topology == "parameter_server" or step == 0:
            return [list(range(len(self.named)))]
        return ddp_bucket_layout([p.numel() * p.element_size() for _, p in self.named], self.bucket_cap_bytes,
                                 self.first_bucket_cap_bytes)

    def backward(self, closure: Callable[[int], torch.Tensor]) -> list[float]:
        """Compute every worker's gradient (``closure(w).backward()``), average them, and leave the
        average in each parameter's ``.grad``. Returns the workers' losses."""
        losses = []
        per_worker: list[list[torch.Tensor]] = []
        with _threads(self.threads):
            for w in range(self.world_size):
                t0 = time.perf_counter()
                for _, p in self.named:
                    p.grad = None
                loss = closure(w)
                loss.backward()
                grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for _, p in self.named]
                self.traffic.time(self.step, w, "compute", time.perf_counter() - t0)
                per_worker.append(grads)
                losses.append(float(loss.detach()))
            averaged: list[torch.Tensor | None] = [None] * len(self.named)
            if self.policy is not None:
                layout = {b: [self.named[i][0] for i in idx] for b, idx in enumerate(self.buckets(max(self.step - 1, 0)))}  # as the hook: the last layout seen
                new = run_policy_decision(self.policy, self.step, self.spec, self.aggregator, buckets=layout)
                if new is not None:
                    self.decisions.append({"step": self.step, "layer_params": new})
            for b, idx in enumerate(self.buckets(self.step)):
                keys = [self.named[i][0] for i in idx]
                grads = [[per_worker[w][i] for i in idx] for w in range(self.world_size)]
                if self.non_finite == "nan" and self._skips_non_finite(grads, b):
                    for i in idx:
                        averaged[i] = torch.full_like(per_worker[0][i], float("nan"))
                    continue
                if self.topology == "parameter_server":
                    out = self.aggregator.parameter_server(
                        grads, keys, step=self.step, bucket=b, pull=self.server, server_step=self.server_step
                    )
                else:
                    out = self.aggregator.aggregate(grads, keys, step=self.step, bucket=b)
                for i, t in zip(idx, out):
                    averaged[i] = t
        if self.policy is not None and self.non_finite_steps[-1:] != [self.step]:
            # rank 0's local gradients, in bucket order (as the hook sees them)
            order = [i for idx in self.buckets(self.step) for i in idx]
            self.policy.observe(self.step, {self.named[i][0]: per_worker[0][i] for i in order})
        for (_, p), g in zip(self.named, averaged):
            p.grad = g
        self.step += 1
        return losses

    def _skips_non_finite(self, grads: list[list[torch.Tensor]], bucket: int) -> bool:
        """``non_finite="nan"``: whether this bucket averages to NaN, as in the hook: some worker's
        gradients hold NaN or Inf (the flag's exchange), or an earlier bucket of the step did (no flag)."""
        flats = [torch.cat([g.reshape(-1) for g in gw]) for gw in grads]  # each worker's bucket, as DDP lays it out
        return self.aggregator.skips_step(flats, self.non_finite_steps, step=self.step, bucket=bucket)

    def state_dict(self) -> dict[str, Any]:
        """Step counter, every worker's codec state and the framing registries."""
        return {"step": self.step, "workers": [w.state_dict() for w in self.workers], "framing": self.aggregator.links.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self.step = int(state["step"])
        for w, s in zip(self.workers, state["workers"]):
            w.load_state_dict(s)
        if "framing" in state:  # header registries: the resumed run sends what an uninterrupted one would
            self.aggregator.links.load_state_dict(state["framing"])
