"""Mutation tests of Sketched-SGD's gated claims, two guards on the Count Sketch: at the smallest scale (the ``micro`` preset on a generated
dictionary), a deliberately broken Count Sketch turns the gate red, and the real one leaves it green.
The sketch is broken by monkeypatching the codec in the test (never by a production flag):

* a bucket hash that ignores the coordinate (every row's ``a`` coefficient 0: one bucket per row), a
  table one column wide whatever the configuration, or the run's sketch built an eighth as wide as the
  paper's rule sized it: most estimates land beyond ``2 ||x|| / sqrt(c)`` at the configured columns
  (micro transformer, 20x, key-blind: shares 1.00 and 0.63 of the coordinates at its two steps, 7.9x
  the bound; unbroken 0.0002 and 0; micro LSTM, 40x, an eighth of the columns: 3.4x the bound). The
  measuring sketch is a copy of the run's own codec with another hash seed, so a run built narrower
  than its configuration is measured at that width. How far a narrower sketch goes past the bound
  depends on the accumulation: the micro transformer's, whose norm a few coordinates hold, an eighth
  of the columns takes to 1.2x the bound only;
* what the estimate guard need not see, and why: rows that share one hash (the median of equal rows is
  one row, whose chance to err beyond the width, 0.08 here, is under the median's bound 0.1035; on the
  micro transformer the one row misses its large coordinate and the guard sees it there), and
  signs that are all equal (the accumulation's coordinates take both signs, so a bucket's sum stays as
  small without them: share 0.0005). The hash guard, ``sketch-hashes-independent``, sees both on the
  hashes of the run's sketch and of the measuring one: rows sharing every coefficient agree at every
  coordinate (buckets and signs), and equal signs sum to ``d``; each lies at least ``sqrt(d)`` standard
  deviations from its mean (micro transformer, 6,240 compressed parameters, 62 columns: shared rows
  617, 12.3x the 50 the guard allows; equal signs 79, 1.6x; unbroken 2.7, and 8.7 on the LSTM). A
  key-blind bucket hash is the estimate guard's to see (the hash guard sees it only where two rows'
  constant buckets happen to coincide). The training claims cannot gate at these scales;
* a sketch that estimates nothing (every estimate 0) or NaN: over all coordinates an estimate of 0
  misses only the few larger than the width (at most c / 4 of d), a share under the bound; among those
  large coordinates it misses every one, and the guard reads that share too (micro transformer, 20x:
  one large coordinate per step, both missed, 9.7x the bound). Where no coordinate is larger than the
  width (micro LSTM, 40x), an estimate of nothing is within what the definition allows.
"""

from __future__ import annotations


import pytest
import torch
import gcbench.compressors.codecs.countsketch.codec as countsketch_codec
from gcbench.reproductions.framework.claims import DIFFERS, REPRODUCED, evaluate_claim
from gcbench.reproductions.sketched_sgd.methods import MethodConfig

from dictd_fixtures import sketched_sgd_context

SCALE = "micro"
CLAIM = "sketch-estimates-within-bound"
HASH_CLAIM = "sketch-hashes-independent"


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    """The workload and a run context of its micro preset on a generated dictionary (tracking off)."""
    return sketched_sgd_context(tmp_path_factory, SCALE)


def _measured(micro, model: str, method: str) -> dict:
    """The micro preset's ``t1-<model>-<method>`` cell, computed and derived by the workload itself."""
    wl, ctx = micro
    cell = next(c for c in wl.plan(ctx, {}) if c.name == f"t1-{model}-{method}")
    return wl.derive(ctx, {cell.name: wl.compute(cell, ctx)})


def _statuses(micro, model: str = "transformer", method: str = "sketched20") -> dict[str, str]:
    """Both guards' statuses on the micro preset's ``t1-<model>-<method>`` cell (:func:`_measured`)."""
    wl, _ = micro
    measured = _measured(micro, model, method)
    out = {}
    for cid in (CLAIM, HASH_CLAIM):
        claim = next(c for c in wl.spec.claims if c.id == cid)
        assert claim.gate
        out[cid] = evaluate_claim(claim, measured, wl.spec, SCALE).status
    return out


def _status(micro, model: str = "transformer", method: str = "sketched20") -> str:
    """The estimate guard's status (:func:`_statuses`)."""
    return _statuses(micro, model, method)[CLAIM]


def _key_blind(real):
    def coefficients(rows, seed):
        c = real(rows, seed).clone()
        c[:, 0] = 0  # h(i) = ((0 i + b) mod p) mod c: the same bucket for every coordinate
        return c
    return coefficients


def test_gate_mutation_sketched_sgd_sketch_estimates_within_bound(micro, monkeypatch):
    assert _status(micro) == REPRODUCED
    assert _status(micro, "lstm", "sketched40") == REPRODUCED
    with monkeypatch.context() as m:
        m.setattr(countsketch_codec, "hash_coefficients", _key_blind(countsketch_codec.hash_coefficients))
        assert _status(micro) == DIFFERS
    with monkeypatch.context() as m:
        m.setattr(countsketch_codec.CountSketchCodec, "columns_for", lambda self, numel: 1)
        assert _status(micro) == DIFFERS
    with monkeypatch.context() as m:  # the run's own sketch built an eighth as wide as the paper's rule sized it
        real = MethodConfig.sketched_params
        m.setattr(MethodConfig, "sketched_params",
                  lambda self, *a, **k: {**real(self, *a, **k), "columns": max(1, int(self.columns) // 8)})
        assert _status(micro, "lstm", "sketched40") == DIFFERS
    for name, value in (("nothing", 0.0), ("NaN", float("nan"))):
        with monkeypatch.context() as m:  # a sketch that estimates nothing (or NaN) at every coordinate
            m.setattr(countsketch_codec.CountSketch, "estimate",
                      lambda self, v=value: torch.full((self.d,), v, dtype=torch.float32, device=self.device))
            assert _status(micro) == DIFFERS, name
    # where no coordinate is larger than the width, an estimate of nothing is within what the definition
    # allows everywhere: micro's LSTM at 40x (27 columns, width 0.38 ||x||) has none in its two steps
    assert _measured(micro, "lstm", "sketched40")["t1.lstm.sketched40.sketch_large_coordinates"] == 0
    assert _status(micro) == REPRODUCED  # nothing of the breakage stays behind


def _shared_rows(real):
    def coefficients(rows, seed):
        c = real(rows, seed).clone()
        c[:] = c[0]  # every row the first row's bucket and sign hashes
        return c
    return coefficients


def _equal_signs(real):
    def coefficients(rows, seed):
        c = real(rows, seed).clone()
        c[:, 2:5], c[:, 5] = 0, 1  # the sign polynomial the constant 1: odd, so every sign +1
        return c
    return coefficients


def test_gate_mutation_sketched_sgd_sketch_hashes_independent(micro, monkeypatch):
    for model, method in (("transformer", "sketched20"), ("lstm", "sketched40")):
        assert _statuses(micro, model, method) == {CLAIM: REPRODUCED, HASH_CLAIM: REPRODUCED}
    for breakage in (_shared_rows, _equal_signs):
        with monkeypatch.context() as m:
            m.setattr(countsketch_codec, "hash_coefficients", breakage(countsketch_codec.hash_coefficients))
            # the estimate guard passes them on the LSTM (module docstring); the hash guard does not
            assert _statuses(micro, "lstm", "sketched40") == {CLAIM: REPRODUCED, HASH_CLAIM: DIFFERS}, breakage.__name__
            assert _statuses(micro)[HASH_CLAIM] == DIFFERS, breakage.__name__
    assert _statuses(micro)[HASH_CLAIM] == REPRODUCED
