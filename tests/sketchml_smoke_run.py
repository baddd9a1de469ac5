"""The SketchML smoke reproduction, run once per test process: the CI gate's run and the unbroken training
runs the mutation tests set beside broken ones (both in ``test_repro_sketchml_mutation.py``) are the same
cells, so the suite trains them once.

The run writes to ``results/sketchml/smoke/`` at the repository root, where CI keeps it as the run's
artefact. It must run with the real codec: the first caller runs it, so a test calls :func:`smoke_run`
before it patches anything, and the run refuses to start while a mutant of ``sketchml_mutants`` (or any
other replacement of the names they patch) is installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import gcbench.compressors.codecs.sketchml.codec as sketchml_codec
import gcbench.compressors.codecs.sketchml.merge as sketchml_merge
import gcbench.compressors.codecs.sketchml.minmaxsketch as sketchml_minmaxsketch

RESULTS = Path(__file__).resolve().parents[1] / "results"
OUT = RESULTS / "sketchml" / "smoke"

#: The names the mutants replace, as they are before any test runs.
_REAL = {
    (sketchml_codec.SketchML, "decode"): sketchml_codec.SketchML.decode,
    (sketchml_codec, "host_splits"): sketchml_codec.host_splits,
    (sketchml_codec, "delta_binary_encode"): sketchml_codec.delta_binary_encode,
    (sketchml_codec, "delta_binary_decode"): sketchml_codec.delta_binary_decode,
    (sketchml_codec, "MAX_COLUMNS"): sketchml_codec.MAX_COLUMNS,
    (sketchml_minmaxsketch, "hash_params"): sketchml_minmaxsketch.hash_params,
    (sketchml_merge, "hash_params"): sketchml_merge.hash_params,
}
_RUN: dict[str, Any] = {}


def smoke_run() -> tuple[int, dict]:
    """``(exit code, results JSON)`` of ``reproduce_main("sketchml", scale="smoke")``, computed on the first call
    (every cell computed, none resumed; W&B offline, its default)."""
    if not _RUN:
        patched = [name for (owner, name), real in _REAL.items() if getattr(owner, name) is not real]
        assert not patched, f"the smoke reproduction must run with the real codec; patched: {patched}"
        from gcbench.commands.reproduce import reproduce_main

        with pytest.MonkeyPatch.context() as m:
            m.delenv("WANDB_MODE", raising=False)  # offline by default: no account, no network
            _RUN["code"] = reproduce_main("sketchml", scale="smoke", out_dir=RESULTS, resume=False, progress=False)
        _RUN["results"] = json.loads((OUT / "results.json").read_text())
    return _RUN["code"], _RUN["results"]


def smoke_cell(name: str) -> dict:
    """One cell's result in the smoke run (e.g. ``train-lr-sketchml``), as the workload's derivation reads it."""
    return smoke_run()[1]["cells"]["results"][name]
