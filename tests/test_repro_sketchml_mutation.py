"""CI gate and mutation tests of SketchML's gated claims, on the smallest scale (the ``smoke`` preset's data
and training runs): the smoke reproduction runs end to end with every CI-gated claim holding, and a
deliberately broken SketchML turns each gate red.

The report, results JSON, plots and offline W&B runs of the smoke reproduction are written to
``results/sketchml/smoke/`` at the repository root, where CI keeps them as the run's artefact. The gate
test and the mutation tests are one module so that they share that run in one test process (also under
``pytest -n ... --dist loadfile``): ``sketchml_smoke_run.py`` runs it once.

The method is broken by monkeypatching the codec in the test (never by a production flag); the unbroken
runs are the smoke reproduction's own cells, each broken one a run of the same cell's configuration:

* minimal loss (``t2-minloss-*``): the decoder hands the values back paired with the wrong keys (a
  fixed permutation, as if the merge of the groups' key lists forgot to carry the values along).
  Magnitude-only damage does not turn this gate red at this scale, and the reason is worth knowing:
  SketchML's groups are sign-pure (§3.3), so its errors never flip a sign, and Adam's per-coordinate
  normalisation makes the step insensitive to magnitudes (quantile buckets replaced by uniform ones,
  and a MinMaxSketch of a tenth of the columns, both left the minimal loss within 3% of Adam's drop);
* decoded values (``t2-values-*``): the gate that does see magnitude damage. The decoder answers every
  key with ``sign x mean|v|`` of its decoded values (the quantile buckets and MinMaxSketch discarded),
  or the encoder cuts each sign's range into uniform buckets instead of quantile ones; either takes
  the pushed values' mean rank error past the bound SketchML's definition gives (smoke: 0.43 of it
  unbroken, 1.7-1.9 broken);
* MinMaxSketch's exact answers (``t2-sketch-exact-*``): the values gate's bound allows every answer at
  its group's zero side, so a broken sketch passes it. The keys answered exactly fall short of what the
  definition gives when the hash ignores the key, when each group's table has one column, or when the
  rows share one hash (smoke LR: shortfall 0.89, 0.89 and 0.31 against the bound 0.10; 0.000 unbroken);
* compression rate: not gated (at the paper's density it is the wire format's arithmetic on any data,
  the consistency check ``fig8-compression-format``), but the last test still sends every key as a raw
  4-byte integer and sees that check fail.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

import gcbench.compressors.codecs.sketchml.codec as sketchml_codec
from gcbench.reproductions.framework.claims import DIFFERS, REPRODUCED, WITHIN, evaluate_claim
from gcbench.reproductions.sketchml import workload as sketchml_workload
from gcbench.reproductions.sketchml.train import TrainConfig, train, train_test_split

from sketchml_mutants import (install_hashes, key_blind_hashes, misaligned_decode, one_hash_for_all_rows,
                              sign_times_mean_decode, uniform_splits)
from sketchml_smoke_run import OUT, smoke_cell, smoke_run

pytestmark = pytest.mark.slow
SCALE = "smoke"
_CACHE: dict[Any, Any] = {}


def _setup():
    if "wl" not in _CACHE:
        from gcbench.data.prepare import load_dataset

        wl = sketchml_workload()
        preset = wl.spec.scale(SCALE)
        ds = load_dataset(dict(preset["dataset"]))
        _CACHE["wl"] = wl
        _CACHE["split"] = train_test_split(ds.X, ds.y, wl.spec.workload["train_fraction"], int(preset["seed"]))
    return _CACHE["wl"], _CACHE["split"]


def _train(model: str, method: str) -> dict:
    """One training run of the smoke preset (as its ``train-<model>-<method>`` cell runs it)."""
    wl, split = _setup()
    w, p = wl.spec.workload, wl.spec.scale(SCALE)
    cfg = TrainConfig(model=model, method=wl.methods[method], workers=int(p["workers"]), epochs=int(p["epochs"]),
                      lr=float(p["lr"]), l2=w["l2"], batch_ratio=w["batch_ratio"], beta1=w["beta1"], beta2=w["beta2"],
                      eps=w["eps"], seed=int(p["seed"]), profile=w["profile_tables"], topology=w["topology"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train(split, cfg)
    finally:
        torch.set_num_threads(threads)


def _unbroken(model: str, method: str) -> dict:
    """The real method's run: the smoke reproduction's own ``train-<model>-<method>`` cell."""
    return smoke_cell(f"train-{model}-{method}")


def _status(claim_id: str, results: dict, gated: bool = True) -> str:
    """The claim's status on these training runs, through the workload's own derivation."""
    wl, _ = _setup()
    ctx = SimpleNamespace(options={}, preset=wl.spec.scale(SCALE), tables=["2", "fig8"], scale=SCALE)
    measured = wl.derive(ctx, results)
    claim = next(c for c in wl.spec.claims if c.id == claim_id)
    assert claim.gate == gated
    return evaluate_claim(claim, measured, wl.spec, SCALE).status


def test_sketchml_smoke_reproduction_passes_its_gated_claims():
    code, results = smoke_run()
    report = (OUT / "report.md").read_text()
    # the measured claims' table, under its own header line, with a row for every claim of the run
    assert "| claim | paper | ours | tolerance | CI | status | detail |" in report.splitlines()
    assert results["claims"], "results JSON holds no claims"
    assert not [c["id"] for c in results["claims"] if f"| **{c['id']}**" not in report]
    assert list(OUT.glob("plots/*.png")), "no plots written"
    assert code == 0, f"a CI-gated claim failed; see {OUT / 'report.md'}:\n{report}"
    # exit 0 also when a gated claim was not judged: at the CI scale every gated claim must be
    gated = {c["id"]: c["status"] for c in results["claims"] if c["gate"]}
    assert gated and not {cid: st for cid, st in gated.items() if st in ("not run", "not at this scale")}, gated
    # Consistency claims are not gated, but a broken wire format must still fail the suite.
    broken = [c["id"] for c in results["claims"] if c["kind"] == "consistency" and c["status"] == "differs"]
    assert not broken, f"consistency checks differ: {broken}"
    assert "## Headline results" in report and "## Consistency checks" in report
    # Table 3's order carries its noise: default trained twice in the run, the spread at least their gap
    m = results["measured"]
    first, again = m["t3.default.first_epoch_time_s"], m["t3.default.repeat_epoch_time_s"]
    assert "train-linear-sketchml-repeat" in results["cells"]["results"]
    assert m["t3.epoch_time_spread"] >= abs(again - first) / max(again, first)


def _minloss_mutation(monkeypatch, model: str) -> None:
    adam = _unbroken(model, "adam-double")
    ok = _status(f"t2-minloss-{model}", {f"train-{model}-adam-double": adam, f"train-{model}-sketchml": _unbroken(model, "sketchml")})
    assert ok in (REPRODUCED, WITHIN)
    monkeypatch.setattr(sketchml_codec.SketchML, "decode", misaligned_decode(sketchml_codec.SketchML.decode))
    broken = _train(model, "sketchml")
    assert _status(f"t2-minloss-{model}", {f"train-{model}-adam-double": adam, f"train-{model}-sketchml": broken}) == DIFFERS


def test_gate_mutation_sketchml_t2_minloss_lr(monkeypatch):
    _minloss_mutation(monkeypatch, "lr")


def test_gate_mutation_sketchml_t2_minloss_svm(monkeypatch):
    _minloss_mutation(monkeypatch, "svm")


def test_gate_mutation_sketchml_t2_minloss_linear(monkeypatch):
    _minloss_mutation(monkeypatch, "linear")


def _values_mutation(monkeypatch, model: str) -> None:
    claim = f"t2-values-{model}"
    assert _status(claim, {f"train-{model}-sketchml": _unbroken(model, "sketchml")}) == REPRODUCED
    with monkeypatch.context() as m:
        m.setattr(sketchml_codec.SketchML, "decode", sign_times_mean_decode(sketchml_codec.SketchML.decode))
        assert _status(claim, {f"train-{model}-sketchml": _train(model, "sketchml")}) == DIFFERS
    with monkeypatch.context() as m:
        m.setattr(sketchml_codec, "host_splits", uniform_splits)
        assert _status(claim, {f"train-{model}-sketchml": _train(model, "sketchml")}) == DIFFERS


def test_gate_mutation_sketchml_t2_values_lr(monkeypatch):
    _values_mutation(monkeypatch, "lr")


def test_gate_mutation_sketchml_t2_values_svm(monkeypatch):
    _values_mutation(monkeypatch, "svm")


def test_gate_mutation_sketchml_t2_values_linear(monkeypatch):
    _values_mutation(monkeypatch, "linear")


def _sketch_exact_mutation(monkeypatch, model: str, every_breakage: bool) -> None:
    """The gate green for the sketch, red for a key-blind hash; with ``every_breakage`` also for rows sharing
    one hash and for one column per table (the check is the same for every model, so one model runs those)."""
    claim = f"t2-sketch-exact-{model}"
    assert _status(claim, {f"train-{model}-sketchml": _unbroken(model, "sketchml")}) == REPRODUCED
    for make in (key_blind_hashes, one_hash_for_all_rows) if every_breakage else (key_blind_hashes,):
        with monkeypatch.context() as m:
            install_hashes(m, make)
            assert _status(claim, {f"train-{model}-sketchml": _train(model, "sketchml")}) == DIFFERS, make.__name__
    if every_breakage:
        with monkeypatch.context() as m:
            m.setattr(sketchml_codec, "MAX_COLUMNS", 1)  # every group's table one column wide
            assert _status(claim, {f"train-{model}-sketchml": _train(model, "sketchml")}) == DIFFERS


def test_gate_mutation_sketchml_t2_sketch_exact_lr(monkeypatch):
    _sketch_exact_mutation(monkeypatch, "lr", every_breakage=True)


def test_gate_mutation_sketchml_t2_sketch_exact_svm(monkeypatch):
    _sketch_exact_mutation(monkeypatch, "svm", every_breakage=False)


def test_gate_mutation_sketchml_t2_sketch_exact_linear(monkeypatch):
    _sketch_exact_mutation(monkeypatch, "linear", every_breakage=False)


def _raw_key_encode(keys, segments=None, widths="1234", *, workers=None):
    return keys.to(torch.int32).view(torch.uint8).clone()


def _raw_key_decode(data, n, segments=None, widths="1234", *, workers=None):
    return data.view(torch.int32).to(torch.int64)[:n]


def _on_synthetic(run: dict) -> dict:
    return {**run, "dataset": {"name": "synthetic"}}


def test_raw_keys_take_the_format_compression_rate_out_of_its_band(monkeypatch):
    """Not a gate (the rate is format arithmetic on the synthetic generator's data, the smoke preset's), but
    the consistency check fig8-compression-format guards the keys' encoding."""
    wl, _ = _setup()
    claim = next(c for c in wl.spec.claims if c.id == "fig8-compression-format")
    assert claim.kind == "consistency" and not claim.gate and claim.testable == "fig8.synthetic_data"
    ok = _status(claim.id, {"train-lr-sketchml": _on_synthetic(_unbroken("lr", "sketchml"))}, gated=False)
    assert ok in (REPRODUCED, WITHIN)
    monkeypatch.setattr(sketchml_codec, "delta_binary_encode", _raw_key_encode)
    monkeypatch.setattr(sketchml_codec, "delta_binary_decode", _raw_key_decode)
    broken = _train("lr", "sketchml")
    assert np.isclose(broken["summary"]["key_bytes_per_key"], 4.0)
    assert _status(claim.id, {"train-lr-sketchml": _on_synthetic(broken)}, gated=False) == DIFFERS
