"""Traffic totals, modelled communication time and fused buckets.

A worker's several messages in one collective add up; per-worker-step means divide by workers and
steps. A parameter server receives every worker's own message size, and sends the pulled message
once to each worker. A step takes at least its compute time, and the slowest worker's work after the
exchange (not the sum over workers) sets the pace. A bucket is fused only where all its tensors
share one codec.
"""

from __future__ import annotations

import pytest

from gcbench.envs.aggregator import Aggregator
from gcbench.envs.collectives import LocalCollective
from gcbench.envs.network import Link, collective_time, overlapped_step_s, parameter_server_comm, server_time, step_time
from gcbench.envs.traffic import CollectiveRecord, TrafficLog
from gcbench.envs.workers import CodecSpec, WorkerCodecs

LINK = Link(0.001, 1000.0)


def test_a_workers_records_in_one_collective_add_up() -> None:
    """Payload and size messages of worker 0 in collective 0 give 14 bytes."""
    log = TrafficLog()
    log.wire(0, 0, 0, "all_gather", "payload", 10)
    log.wire(0, 0, 0, "all_gather", "sizes", 4)
    log.wire(0, 1, 0, "all_gather", "payload", 10)
    (c,) = log.collectives()
    assert c.nbytes == {0: 14, 1: 10}


def test_summary_means_are_per_worker_and_step() -> None:
    """Two workers, one step, 10 bytes each: 10 bytes a worker-step."""
    log = TrafficLog()
    for w in range(2):
        log.wire(0, w, 0, "all_reduce", "payload", 10)
        log.raw(0, w, 40, 10)
    s = log.summary()
    assert s["message_bytes_per_worker_step"] == 10.0
    assert s["raw_bytes_per_worker_step"] == 40.0


def test_a_push_is_priced_on_the_workers_own_message_sizes() -> None:
    """Pushes of 100 and 300 bytes take alpha + 400 / beta, not twice the largest."""
    c = CollectiveRecord(0, 0, "push", ("payload",), {0: 100, 1: 300})
    assert collective_time(c, LINK) == pytest.approx(server_time(400.0, LINK))
    assert collective_time(c, LINK) == pytest.approx(0.001 + 0.4)


def test_the_server_sends_the_pulled_message_to_each_worker() -> None:
    """Three workers pulling 50 bytes: alpha + 150 / beta."""
    push, pull = parameter_server_comm([100, 100, 100], 50, LINK)
    assert push == pytest.approx(0.001 + 0.3)
    assert pull == pytest.approx(0.001 + 0.15)


def test_a_step_without_buckets_takes_its_compute_time() -> None:
    """No communication: the step is the compute."""
    assert overlapped_step_s(3.0, [], []) == 3.0


def test_the_slowest_workers_work_after_the_exchange_sets_the_pace() -> None:
    """max(1, 2) + 0.5 server + max(0.5, 0.25) = 3."""
    t = step_time([1.0, 2.0], 0.75, server_s=0.5, back_s=[0.5, 0.25])
    assert t.measured_s == 3.0
    assert t.total_s == 3.75


def test_a_bucket_is_fused_only_where_its_tensors_share_one_codec() -> None:
    """Tensor ``b`` casts to bfloat16, the others to float16."""
    spec = CodecSpec(name="fp16", layer_params={"b": {"to": "bfloat16"}})
    agg = Aggregator([WorkerCodecs(spec, r) for r in range(2)], LocalCollective(2))
    assert agg.fusable(["a", "c"])
    assert not agg.fusable(["a", "b"])
