"""benchmarks/bench_text.py's ``first`` round starts from an empty Hugging Face cache even when the
user set ``HF_DATASETS_CACHE`` (which ``datasets`` prefers to ``HF_HOME``), and leaves the user's
cache variables as they were."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_each_round_reads_a_fresh_cache_and_the_environment_is_restored(tmp_path, monkeypatch):
    from gcbench.data import hf, text
    from gcbench.reproductions.sketched_sgd import translation  # noqa: F401 - bound to the real loader before the spy

    monkeypatch.syspath_prepend(str(ROOT))
    bench_text = importlib.import_module("benchmarks.bench_text")
    mine = tmp_path / "my-datasets-cache"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(mine))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("GCBENCH_DATA", str(tmp_path / "data"))
    seen = []
    real = text.load_wmt14

    def spy(files, **kwargs):
        seen.append(hf.hf_datasets_cache())
        return real(list(files), max_pairs=1000, **kwargs)

    monkeypatch.setattr(text, "load_wmt14", spy)
    bench_text.measure(rounds=2)
    assert len(seen) == 4 and seen[0] == seen[1] and seen[2] == seen[3] and seen[0] != seen[2]
    assert all(mine not in (p, *p.parents) for p in seen)
    assert os.environ["HF_DATASETS_CACHE"] == str(mine) and "HF_HOME" not in os.environ
