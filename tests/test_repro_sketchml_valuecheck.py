"""SketchML's decoded-value check (reproductions/sketchml/valuecheck.py): the rank error of decoded values
against the bound the method's definition gives, on made-up messages encoded to real payload bytes."""

from __future__ import annotations

import numpy as np
import pytest

import gcbench.compressors.codecs.sketchml.codec as sketchml_codec
from gcbench.reproductions.sketchml.messages import MessageCodec, MethodSpec
from gcbench.reproductions.sketchml.valuecheck import mean_rank_bound, message_checks, rank_errors, sketch_rank_error

from sketchml_mutants import sign_times_mean_decode, uniform_splits

D = 200_000


def _message(seed: int = 0, n: int = 20_000) -> tuple[np.ndarray, np.ndarray]:
    """A heavy-tailed sparse gradient (signs about even, magnitudes Student-t), as a trained GLM's."""
    rng = np.random.default_rng(seed)
    keys = np.sort(rng.choice(D, n, replace=False)).astype(np.int64)
    return keys, rng.standard_t(2.0, n) * 1e-3


def _share(codec: MessageCodec, keys: np.ndarray, values: np.ndarray) -> float:
    msg = codec.encode(keys, values)
    (err, allowed), _ = message_checks(msg.data, keys, values, *codec.decode(msg.data), codec.codec)
    return err / allowed


def test_rank_errors_count_the_true_values_between_and_ignore_ties():
    true = np.array([1.0, 2.0, 3.0, 4.0, 4.0])
    assert rank_errors(true, true).tolist() == [0, 0, 0, 0, 0]
    # 1 -> 4: 2 and 3 lie between (2 of 5); 4 -> 1: the same; 3 -> 2.5: none between
    assert rank_errors(true, np.array([4.0, 2.0, 2.5, 1.0, 4.0])).tolist() == pytest.approx([0.4, 0, 0, 0.4, 0])


def _naive_rank_errors(true: np.ndarray, decoded: np.ndarray) -> np.ndarray:
    """The definition, value by value: the true values strictly between each true value and its decoded one."""
    lo, hi = np.minimum(true, decoded), np.maximum(true, decoded)
    return ((true[None, :] > lo[:, None]) & (true[None, :] < hi[:, None])).sum(axis=1) / max(len(true), 1)


@pytest.mark.parametrize("seed", range(6))
def test_rank_errors_follow_the_definition_with_ties_and_signed_zeros(seed):
    rng = np.random.default_rng(seed)
    for n in (0, 1, 2, 3, 17, 400):
        true = rng.integers(-4, 5, n).astype(float) if seed % 2 else rng.standard_normal(n)
        if n:
            true[rng.integers(0, n, max(1, n // 8))] = -0.0  # equal to 0.0
        decoded = np.where(rng.random(n) < 0.5, true, rng.integers(-4, 5, n) * 0.5)  # few distinct values
        for t in (true, true.astype(np.float32)):
            assert np.array_equal(rank_errors(t, decoded), _naive_rank_errors(t.astype(float), decoded))


def test_bound_from_the_definition():
    # even signs, 4 groups each: (1/2)^2 / 4 x 2 = 1/8 of the message per group pair, halved, with half a bucket
    assert mean_rank_bound((500, 500), (4, 4), 256, 8, 0.0) == pytest.approx(0.125 * (1 + 8 / 256) / 2)
    assert mean_rank_bound((0, 1000), (0, 8), 256, 8, 0.01) == pytest.approx(1 / 8 * (1 + 8 / 256) / 2 + 0.01)
    assert 0.0 < sketch_rank_error("quantiles", 128) < 0.02 and sketch_rank_error("exact", 128) == 0.0
    # the paper preset with evenly split signs: about 0.079 of the message
    assert mean_rank_bound((1, 1), (4, 4), 256, 8, sketch_rank_error("quantiles", 128)) == pytest.approx(0.079, abs=0.001)


@pytest.mark.parametrize("params", [{"preset": "paper"}, {"preset": "paper", "columns": 0.02}, {"preset": "paper", "rows": 4}])
def test_a_correct_codec_stays_within_its_bound(params):
    """Whatever its columns and rows (a tenth of the columns collides most keys), the codec keeps each value
    in its group: within the bound."""
    codec = MessageCodec(MethodSpec("sketchml", "sketchml", params), D)
    for seed in range(3):
        assert _share(codec, *_message(seed)) < 1.0


def test_sign_times_mean_and_uniform_buckets_exceed_the_bound(monkeypatch):
    codec = MessageCodec(MethodSpec("sketchml", "sketchml", {"preset": "paper"}), D)
    keys, values = _message(1)
    assert _share(codec, keys, values) < 1.0
    with monkeypatch.context() as m:
        m.setattr(sketchml_codec.SketchML, "decode", sign_times_mean_decode(sketchml_codec.SketchML.decode))
        assert _share(codec, keys, values) > 1.0

    with monkeypatch.context() as m:
        m.setattr(sketchml_codec, "host_splits", uniform_splits)
        assert _share(codec, keys, values) > 1.0
