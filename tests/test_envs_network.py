"""The alpha-beta network model, the cluster profiles and the traffic log (hand-computed cases)."""

from __future__ import annotations

import math

import pytest
from gcbench.envs.errors import ProfileError
from gcbench.envs.network import (
    Link,
    all_gather_time,
    comm_time,
    link_bytes,
    list_profiles,
    load_profile,
    ring_all_reduce_time,
    server_time,
)
from gcbench.envs.traffic import TrafficLog, WireRecord

GBE = Link.from_gbps(1.0, 100.0)  # 1 Gbps = 1.25e8 bytes/s, alpha = 1e-4 s


def test_link_units():
    assert GBE.bandwidth_Bps == 1.25e8 and GBE.latency_s == pytest.approx(1e-4)


def test_ring_all_reduce_hand_computed():
    # W = 4, n = 1 MB: 2*3*1e-4 + 2*(3/4)*1e6/1.25e8 = 6e-4 + 0.012
    assert ring_all_reduce_time(1e6, 4, GBE) == pytest.approx(0.0126)
    # W = 2: 2*1e-4 + 1e6/1.25e8 = 2e-4 + 0.008
    assert ring_all_reduce_time(1e6, 2, GBE) == pytest.approx(0.0082)
    assert ring_all_reduce_time(1e6, 1, GBE) == 0.0


def test_all_gather_hand_computed():
    # W = 4, each worker 1 MB: 3*1e-4 + 3*1e6/1.25e8 = 3e-4 + 0.024
    assert all_gather_time(1e6, 4, GBE) == pytest.approx(0.0243)
    assert all_gather_time(1e6, 1, GBE) == 0.0


def test_parameter_server_hand_computed():
    # 4 workers push 1 MB each through the server's link: 1e-4 + 4e6/1.25e8
    assert server_time(4e6, GBE) == pytest.approx(0.0321)


def test_bytes_on_each_link():
    assert link_bytes("all_reduce", 1000, 4) == pytest.approx(1500)  # 2 (W-1)/W n
    assert link_bytes("all_gather", 1000, 4) == 3000  # (W-1) n
    assert link_bytes("push", 1000, 4) == 1000 and link_bytes("pull", 1000, 4) == 0
    assert link_bytes("all_reduce", 1000, 1) == 0


def _log() -> TrafficLog:
    log = TrafficLog()
    for w in range(2):
        log.raw(0, w, 4000, 1000)
        log.wire(0, w, 0, "all_gather", "sizes", 16)
        log.wire(0, w, 1, "all_gather", "payload", 500 if w == 0 else 400, padding=0 if w == 0 else 100)
        log.wire(0, w, 2, "all_reduce", "payload", 1000)
        log.raw(1, w, 4000, 1000)
        log.wire(1, w, 0, "all_reduce", "payload", 1000)
    return log


def test_comm_time_sums_the_collectives_of_each_step():
    log = _log()
    m = comm_time(log, load_profile("sketchml-cluster1"))
    link = load_profile("sketchml-cluster1").link
    step0 = all_gather_time(16, 2, link) + all_gather_time(500, 2, link) + ring_all_reduce_time(1000, 2, link)
    assert m.per_step_s == pytest.approx((step0, ring_all_reduce_time(1000, 2, link)))
    assert m.kind == "modelled" and m.profile == "sketchml-cluster1" and m.workers == 2
    # extrapolated to the profile's 10 workers
    m10 = comm_time(log, "sketchml-cluster1", workers=10)
    assert m10.per_step_s[1] == pytest.approx(ring_all_reduce_time(1000, 10, link))
    assert m10.by_op_s["all_gather"] == pytest.approx(all_gather_time(16, 10, link) + all_gather_time(500, 10, link))


def test_traffic_log_totals_and_ratio():
    log = _log()
    assert log.message_bytes() == 2 * (16 + 1000 + 1000) + 500 + 400
    assert log.padding_bytes() == 100 and log.padding_bytes(worker=0) == 0
    assert log.raw_bytes() == 16000
    assert log.compression_ratio(worker=0) == pytest.approx(8000 / (16 + 500 + 1000 + 1000))
    assert log.compression_ratio(step=7) != log.compression_ratio(step=7)  # nan: nothing recorded
    cols = log.collectives(0)
    assert [(c.seq, c.op, c.nbytes) for c in cols] == [
        (0, "all_gather", {0: 16, 1: 16}),
        (1, "all_gather", {0: 500, 1: 400}),
        (2, "all_reduce", {0: 1000, 1: 1000}),
    ]
    rows = log.per_step()
    assert rows[0]["bytes_by_kind"] == {"sizes": 16, "payload": 1500} and rows[0]["collectives"] == 3
    assert TrafficLog.from_dict(log.to_dict()).to_dict() == log.to_dict()
    with pytest.raises(ValueError):
        WireRecord(0, 0, 0, "telepathy", "payload", 1)
    with pytest.raises(ValueError):
        WireRecord(0, 0, 0, "push", "payload", 10, padding=11)


def test_bundled_profiles_cite_their_numbers():
    names = list_profiles()
    assert {"sketchml-cluster1", "sketchml-cluster2-10", "sketchml-cluster2-50", "lgreco-single-node",
            "lgreco-multi-node", "wan-geo", "iot"} <= set(names)
    for name in names:
        p = load_profile(name)
        for field in ("workers", "bandwidth_gbps", "latency_us"):
            src = p.sources[field]
            assert "assumption" in src or "§" in src, (name, field, src)
    # the paper numbers themselves
    c1 = load_profile("sketchml-cluster1")
    assert (c1.workers, c1.link.bandwidth_Bps, c1.topology) == (10, 1e9 / 8, "parameter_server")
    assert load_profile("sketchml-cluster2-50").workers == 50
    assert load_profile("sketchml-cluster2-10").extra["shared"] is True
    single = load_profile("lgreco-single-node")
    assert single.workers == 8 and single.extra["bandwidth_range_gbps"] == [13.0, 16.0]
    multi = load_profile("lgreco-multi-node")
    assert (multi.workers, multi.link.bandwidth_Bps) == (16, 10e9 / 8)
    # latencies are nowhere in the papers: every one is labelled an assumption
    assert all("assumption" in load_profile(n).sources["latency_us"] for n in names)


def test_bad_profiles_are_refused(tmp_path):
    with pytest.raises(ProfileError, match="no profile"):
        load_profile("no-such-cluster")
    bad = tmp_path / "bad.toml"
    bad.write_text('workers = 4\ntopology = "mesh"\nbandwidth_gbps = 1\nlatency_us = 1\n[sources]\nworkers="x"\nbandwidth_gbps="x"\nlatency_us="x"\n')
    with pytest.raises(ProfileError, match="topology"):
        load_profile(bad)
    bad.write_text('workers = 4\ntopology = "collective"\nbandwidth_gbps = 0\nlatency_us = 1\n[sources]\nworkers="x"\nbandwidth_gbps="x"\nlatency_us="x"\n')
    with pytest.raises(ProfileError, match="bandwidth"):
        load_profile(bad)
    bad.write_text('workers = 4\ntopology = "collective"\nbandwidth_gbps = 1\nlatency_us = 1\n')
    with pytest.raises(ProfileError, match="sources"):
        load_profile(bad)
    assert math.isfinite(load_profile("iot").link.latency_s)
