"""SketchML's MinMaxSketch check (reproductions/sketchml/valuecheck.py, :func:`exact_check`): the keys its
grouped MinMaxSketch answers exactly against the expectation §3.3's definition gives, on made-up messages
encoded to real payload bytes, with the true buckets re-derived from the payload."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gcbench.compressors.codecs.sketchml.codec as sketchml_codec
from gcbench.compressors import Payload
from gcbench.reproductions.sketchml.messages import MessageCodec, MethodSpec
from gcbench.reproductions.sketchml.valuecheck import (META_SECTION, aligned, exact_check, exact_probability,
                                                       message_checks, rank_check, side_splits, true_buckets)

from sketchml_mutants import install_hashes, key_blind_hashes, one_hash_for_all_rows

D = 200_000
#: the guard's bound (spec.toml, t2-sketch-exact-*)
BOUND = 0.10


def _message(seed: int, kind: str = "random", n: int = 20_000) -> tuple[np.ndarray, np.ndarray]:
    """Heavy-tailed values (Student-t) on random, consecutive or strided keys; the last two with values
    rounded to 5 decimals, so that many keys share a value and splits repeat."""
    rng = np.random.default_rng(seed)
    if kind == "random":
        keys = np.sort(rng.choice(D, n, replace=False))
    elif kind == "consecutive":
        keys = np.arange(1000, 1000 + n)
    else:
        keys = np.arange(n) * 8
    values = rng.standard_t(2.0, n) * 1e-3
    return keys.astype(np.int64), (values if kind == "random" else np.round(values, 5))


def _tally(codec: MessageCodec, messages) -> list[float]:
    tot = [0.0, 0.0, 0, 0]
    for keys, values in messages:
        msg = codec.encode(keys, values)
        for i, x in enumerate(message_checks(msg.data, keys, values, *codec.decode(msg.data), codec.codec)[1]):
            tot[i] += x
    return tot


def _shortfall(codec: MessageCodec, messages) -> float:
    exact, expected, unmatched, _ = _tally(codec, messages)
    assert unmatched == 0
    return 1.0 - exact / expected


def test_exact_probability_from_the_definition():
    # one group, levels 0, 0, 1, 2 in t = 2 bins: m = 0, 0, 2, 3 smaller keys; one row: (1/2)^m
    group, level = np.zeros(4, dtype=np.int64), np.array([0, 0, 1, 2])
    assert exact_probability(group, level, 1, np.array([2.0]), 1).tolist() == pytest.approx([1, 1, 0.25, 0.125])
    # two rows: 1 - (1 - p)^2; a group of one bin answers only its smallest level; groups do not mix
    assert exact_probability(group, level, 1, np.array([2.0]), 2).tolist() == pytest.approx([1, 1, 0.4375, 0.234375])
    assert exact_probability(group, level, 1, np.array([1.0]), 2).tolist() == [1, 1, 0, 0]
    two = exact_probability(np.array([0, 1, 1]), np.array([5, 3, 4]), 2, np.array([1.0, 4.0]), 1)
    assert two.tolist() == pytest.approx([1, 1, 0.75])


def test_side_splits_find_the_values_whose_midpoints_the_payload_holds():
    values = np.array([0.5, 1.0, 1.0, 2.0, 3.0, 7.0])
    edges = np.array([0.5, 1.0, 3.0, 7.0])
    mids = 0.5 * edges[:-1] + 0.5 * edges[1:]
    got, ok, open_ = side_splits(mids, values)
    assert ok and got.tolist() == edges.tolist() and open_ == []
    got, ok, _ = side_splits(mids + 0.01, values)  # midpoints of no splits among the values
    assert not ok and len(got) == 4
    # 1.5 and its neighbour a unit above both give the midpoint 1.25 after 1.0 (half a unit rounds away):
    # the value 1.5 may be in either bucket
    values, edges = np.array([1.0, 1.2, 1.5, 1.5, 2.0, 3.0, 7.0]), np.array([1.0, 1.5, 3.0, 7.0])
    mids = 0.5 * edges[:-1] + 0.5 * edges[1:]
    twin = float(np.nextafter(1.5, 2.0))
    got, ok, open_ = side_splits(mids, np.append(values, twin))
    assert ok and got.tolist() == edges.tolist() and open_ == [(1.5, twin)]


def test_side_splits_of_float32_midpoints_find_float32_twins():
    """Float32 input: midpoints rounded to float32, and the value a float32 unit above a split gives the same one."""
    edges = np.array([1.0, 1.5, 3.0, 7.0], dtype=np.float32)
    twin = float(np.nextafter(np.float32(1.5), np.float32(2.0)))
    values = np.array([1.0, 1.2, 1.5, twin, 2.0, 3.0, 7.0], dtype=np.float32).astype(np.float64)
    mids = (0.5 * edges[:-1].astype(np.float64) + 0.5 * edges[1:]).astype(np.float32).astype(np.float64)
    got, ok, open_ = side_splits(mids, values, np.float32)
    assert ok and got.tolist() == edges.tolist() and open_ == [(1.5, twin)]
    got, ok, open_ = side_splits(mids, values[values != twin], np.float32)
    assert ok and got.tolist() == edges.tolist() and open_ == []


@pytest.mark.parametrize("kind", ["random", "consecutive"])
def test_true_buckets_are_the_codecs_own(kind):
    """With exact order statistics (deterministic splits) the codec's own bucket of every value is known:
    the re-derived one equals it, and the groups hold the payload's counts."""
    codec = MessageCodec(MethodSpec("sketchml", "sketchml", {"preset": "paper", "sketch": "exact"}), D)
    keys, values = _message(3, kind)
    payload = Payload.from_bytes(codec.encode(keys, values).data)
    tb = true_buckets(payload, values, codec.codec)
    meta = payload.sections[META_SECTION].numpy()
    q, r = codec.codec.buckets, codec.codec.groups
    own = sketchml_codec.quantile_bucketize(torch.from_numpy(values), q, negative_buckets=int(meta[0]) * q // r,
                                            sketch="exact").index.numpy()
    assert tb.reproduced and not tb.open.any() and np.array_equal(tb.index, own)
    assert np.bincount(tb.group, minlength=r).tolist() == meta[1:].tolist()
    assert tb.level.min() >= 0 and tb.level.max() < q // r


@pytest.mark.parametrize("params", [{"preset": "paper"}, {"preset": "code"}, {"preset": "paper", "rows": 4},
                                    {"preset": "paper", "columns": 0.02}])
@pytest.mark.parametrize("kind", ["random", "consecutive", "strided"])
def test_a_correct_codec_answers_as_many_keys_exactly_as_its_definition(params, kind):
    """Whatever its rows and columns and however the keys are laid out, the real hashes answer the keys
    as random ones would: well inside the bound (measured within 2.5% of the expectation)."""
    codec = MessageCodec(MethodSpec("sketchml", "sketchml", params), D)
    assert abs(_shortfall(codec, [_message(s, kind) for s in range(2)])) < 0.05


def test_float32_payloads_too():
    codec = MessageCodec(MethodSpec("sketchml", "sketchml", {"preset": "paper"}, "float32"), D)
    assert abs(_shortfall(codec, [_message(1)])) < 0.05


def test_a_broken_sketch_falls_short(monkeypatch):
    """A hash that ignores the key, one column per group, or rows sharing one hash: beyond the bound
    (the subtlest, one hash for two rows, at about 0.3), with the payload's splits still re-derived."""
    codec = MessageCodec(MethodSpec("sketchml", "sketchml", {"preset": "paper"}), D)
    messages = [_message(0)]
    assert _shortfall(codec, messages) < BOUND
    found = {}
    for name, make in (("key-blind", key_blind_hashes), ("one hash", one_hash_for_all_rows)):
        with monkeypatch.context() as m:
            install_hashes(m, make)
            found[name] = _shortfall(codec, messages)
    with monkeypatch.context() as m:
        m.setattr(sketchml_codec, "MAX_COLUMNS", 1)
        found["one column"] = _shortfall(codec, messages)
    assert all(x > BOUND for x in found.values()), found
    assert found["one hash"] > 2 * BOUND and found["key-blind"] > 0.8 and found["one column"] > 0.8, found


def _near_twins(seed: int, n: int = 6000) -> tuple[np.ndarray, np.ndarray]:
    """Values that come in near-twins: 40 distinct values, each also a unit or two in the last place
    away, so most splits fall between twins and the payload cannot tell which side a twin is on."""
    rng = np.random.default_rng(seed)
    base = rng.standard_t(1.5, 40) * 1e-3
    values = base[rng.integers(0, 40, n)] * (1 + rng.integers(-2, 3, n) * 2.0**-52)
    return np.sort(rng.choice(D, n, replace=False)).astype(np.int64), values


def test_keys_the_payload_leaves_open_are_left_out_and_the_check_still_tells(monkeypatch):
    codec = MessageCodec(MethodSpec("sketchml", "sketchml", {"preset": "paper"}), D)
    messages = [_near_twins(s) for s in range(3)]
    exact, expected, unmatched, held_out = _tally(codec, messages)
    assert unmatched == 0 and 0 < held_out < sum(len(k) for k, _ in messages)
    assert abs(1.0 - exact / expected) < BOUND
    with monkeypatch.context() as m:
        install_hashes(m, one_hash_for_all_rows)
        assert _shortfall(codec, messages) > BOUND


def test_only_the_training_cells_that_run_the_checks_are_keyed_by_them():
    """What the checks record is part of the config of SketchML's training cells alone, so a change to it
    computes those cells again and reuses every other one."""
    from types import SimpleNamespace

    from gcbench.reproductions.sketchml import workload as sketchml_workload
    from gcbench.reproductions.sketchml.valuecheck import CHECKS_VERSION

    wl = sketchml_workload()
    ctx = SimpleNamespace(options={}, preset=wl.spec.scale("smoke"), tables=["2", "3", "4", "fig8", "msg"],
                          scale="smoke", cache={})
    cells = wl.plan(ctx, {})
    keyed = {c.name for c in cells if "checks" in c.config}
    assert keyed == {c.name for c in cells if c.config.get("kind") == "train"
                     and c.config["method"]["codec"] == "sketchml"}
    assert {"train-lr-sketchml", "train-linear-row_4", "train-linear-sketchml-repeat"} <= keyed
    assert all(c.config["checks"] == CHECKS_VERSION for c in cells if c.name in keyed)
    assert len(cells) > len(keyed)


def test_both_checks_of_a_message_on_one_parse_are_the_two_checks():
    """What a training cell records (:func:`message_checks`, one parse and one alignment per message) is what
    the two checks give on their own parse and alignment, on messages with keys the driver's decode lost and
    on an empty message."""
    codec = MessageCodec(MethodSpec("sketchml", "sketchml", {"preset": "paper"}), D)
    for seed, kind in ((0, "random"), (1, "consecutive"), (2, "strided")):
        keys, values = _message(seed, kind)
        data = codec.encode(keys, values).data
        dkeys, dvals = codec.decode(data)
        for got in ((dkeys, dvals), (dkeys[::2], dvals[::2])):
            args = (data, keys, values, *got, codec.codec)
            payload, decoded = Payload.from_bytes(data), aligned(keys, *got)
            assert message_checks(*args) == (rank_check(payload, values, decoded, codec.codec),
                                             exact_check(payload, values, decoded, codec.codec))
    empty = np.zeros(0, dtype=np.int64), np.zeros(0)
    assert message_checks(data, *empty, *empty, codec.codec) == ((0.0, 0.0), (0.0, 0.0, 0, 0))
