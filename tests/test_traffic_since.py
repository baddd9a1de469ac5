"""The compression ratio from a step on (``since``): one implementation, in the traffic log, that L-GreCo reads."""

from __future__ import annotations

import math

from gcbench.envs.traffic import TrafficLog
from gcbench.reproductions.lgreco.metrics import compression_ratio, per_step_ratio, step_ratios


def _log() -> TrafficLog:
    log = TrafficLog()
    for step, (raw, sent) in enumerate([(4000, 1000), (4000, 100), (4000, 400), (4000, 0)]):
        for worker in (0, 1):
            log.raw(step, worker, raw, raw // 4)
            if sent:
                log.wire(step, worker, 0, "all_gather", "payload", sent)
    return log


def test_since_counts_only_later_steps():
    log = _log()
    assert log.raw_bytes(since=1) == 3 * 8000 and log.message_bytes(since=1) == 2 * 500
    assert log.compression_ratio(since=0) == 32000 / 3000
    assert log.compression_ratio(since=1) == 24000 / 1000
    assert log.compression_ratio(since=2) == 16000 / 800
    assert log.compression_ratio(since=3) == math.inf  # bytes to send, nothing sent
    assert math.isnan(log.compression_ratio(since=4))  # nothing recorded
    assert log.compression_ratio(since=1, worker=0) == 12000 / 500


def test_lgreco_reads_the_logs_ratio():
    run = {"traffic": _log().to_dict()}
    for since in range(5):
        a, b = compression_ratio(run, since), _log().compression_ratio(since=since)
        assert a == b or (math.isnan(a) and math.isnan(b))
    assert compression_ratio(run, 1) == 24.0  # the default counts every step; a later start drops step 0
    assert compression_ratio(run) == 32000 / 3000


def test_per_step_ratio_leaves_a_gap_where_nothing_was_sent():
    run = {"traffic": _log().to_dict()}
    assert list(step_ratios(run)) == [0, 1, 2, 3]
    got = per_step_ratio(run)
    assert got[:3] == [4.0, 40.0, 10.0] and math.isnan(got[3])
