"""Mutation test of Sketched-SGD's gated claim: at the smallest scale (the ``micro`` preset on a generated
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
* what the guard does not see, and why: rows that share one hash (the median of equal rows is one row,
  whose chance to err beyond the width, 0.08 here, is under the median's bound 0.1035), and signs
  that are all equal (the accumulation's coordinates take both signs, so a bucket's sum stays as small
  without them: share 0.0005). The training claims cannot gate at these scales; those breakages show
  in the top-k recovery plots.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import gcbench.compressors.codecs.countsketch.codec as countsketch_codec
from gcbench.reproductions.framework.claims import DIFFERS, REPRODUCED, evaluate_claim
from gcbench.reproductions.sketched_sgd.methods import MethodConfig
from gcbench.reproductions.sketched_sgd.translation import load_corpus, prepare_data, train_translation
from gcbench.reproductions.sketched_sgd.workload import derive_translation, translation_geometry, workload

from dictd_fixtures import sentence_dict

SCALE = "micro"
CLAIM = "sketch-estimates-within-bound"


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    """The workload, the micro preset's translation settings and its data (a generated dictionary)."""
    wl = workload()
    folder = sentence_dict(tmp_path_factory.mktemp("dict"))
    ctx = SimpleNamespace(preset=wl.spec.scale(SCALE), options={"dataset": f"dictd:{Path(folder)}"})
    tr = wl.translation_preset(ctx)
    keys = {k: tr[k] for k in ("dataset", "min_words", "max_words", "held_out", "vocab_size", "min_count", "max_len") if k in tr}
    corpus, test = load_corpus(keys["dataset"], keys)
    return wl, tr, prepare_data(corpus, test, keys, 0)


def _status(micro, model: str = "transformer", method: str = "sketched20") -> str:
    """The guard's status on one micro training run of ``method``, as its ``t1-<model>-<method>`` cell runs
    it, through the workload's own derivation."""
    wl, tr, data = micro
    m = wl.method(method, model, tr.get("uncompressed_biases"))
    cal, _ = translation_geometry({"model": model, "model_params": dict(tr[model]), "seed": 0}, m,
                                  len(data.src_vocab), len(data.tgt_vocab))
    res = train_translation(data, model_kind=model, model_params=tr[model], method=m, workers=int(tr["workers"]),
                            steps=int(tr["steps"]), batch=int(tr["batch"]), lr=float(tr["lr"][model]),
                            momentum=float(tr["momentum"]), seed=0, eval_every=int(tr["eval_every"]),
                            eval_pairs=int(tr["eval_pairs"]), threads=1)
    res["calibration"] = cal
    claim = next(c for c in wl.spec.claims if c.id == CLAIM)
    assert claim.gate
    return evaluate_claim(claim, derive_translation({f"t1-{model}-{method}": res}), wl.spec, SCALE).status


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
    assert _status(micro) == REPRODUCED  # nothing of the breakage stays behind
