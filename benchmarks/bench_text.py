"""Text preparation: what the ``Dataset.map`` caches of :mod:`gcbench.data.text` save, as ratios.

A seeded synthetic parallel corpus (line-aligned ``.en`` / ``.de`` files of random words, so the
benchmark needs no data set) goes through the Sketched-SGD reproduction's ``prepare_data`` three ways
per round, interleaved, in one process:

* ``first`` - files never seen (a fresh Hugging Face cache: ``HF_HOME`` and ``HF_DATASETS_CACHE``
  point at a new folder each round, and are restored afterwards): the text builder, tokenising, ids;
* ``cached`` - the same files again: Arrow files, tokens and ids read from the caches;
* ``python`` - the per-sentence Python path the caches replaced (``Vocab`` over sentences, then
  ``Vocab.encode`` per pair), on pairs already in memory.

``track_first_over_cached`` and ``track_python_over_cached`` are medians of per-round ratios
(above 1: the cached path is faster). Run alone: ``python -m benchmarks.bench_text``.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

PAIRS = 20_000
ROUNDS = 3
PRESET = {"held_out": 500, "max_len": 16, "min_count": 2, "vocab_size": 2000}
#: The variables naming the Hugging Face caches, pointed at a new folder each round.
CACHE_ENV = ("HF_HOME", "HF_DATASETS_CACHE")


def _write_corpus(folder: Path, pairs: int = PAIRS, seed: int = 0) -> tuple[Path, Path]:
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(5000)])
    probs = 1.0 / np.arange(1, 5001)
    probs /= probs.sum()
    sides = []
    for name in ("train.en", "train.de"):
        lengths = rng.integers(5, 12, size=pairs)
        tokens = rng.choice(words, size=int(lengths.sum()), p=probs)
        lines = [" ".join(chunk) for chunk in np.split(tokens, np.cumsum(lengths)[:-1])]
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        sides.append(folder / name)
    return sides[0], sides[1]


def _python_prepare(pairs: list[tuple[str, str]], max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    from gcbench.data.text import Vocab

    src = Vocab((a for a, _ in pairs), max_size=PRESET["vocab_size"], min_count=PRESET["min_count"])
    tgt = Vocab((b for _, b in pairs), max_size=PRESET["vocab_size"], min_count=PRESET["min_count"])
    s = torch.zeros(len(pairs), max_len, dtype=torch.long)
    t = torch.zeros(len(pairs), max_len + 2, dtype=torch.long)
    for i, (a, b) in enumerate(pairs):  # the replaced per-sentence path, kept here as the baseline
        x = src.encode(a, max_len)
        y = [tgt.bos] + tgt.encode(b, max_len) + [tgt.eos]
        s[i, : len(x)] = torch.tensor(x, dtype=torch.long)
        t[i, : len(y)] = torch.tensor(y, dtype=torch.long)
    return s, t


def measure(rounds: int = ROUNDS) -> dict[str, float]:
    """Median seconds of each way and the medians of the per-round ratios."""
    from gcbench.data.text import load_wmt14
    from gcbench.reproductions.sketched_sgd.translation import prepare_data

    times: dict[str, list[float]] = {"first": [], "cached": [], "python": []}
    saved = {k: os.environ.get(k) for k in CACHE_ENV}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            src, tgt = _write_corpus(Path(tmp))
            for r in range(rounds):
                # a fresh cache: this round's "first" (HF_DATASETS_CACHE too, which wins over HF_HOME when set)
                os.environ["HF_HOME"] = str(Path(tmp) / f"hf{r}")
                os.environ["HF_DATASETS_CACHE"] = str(Path(tmp) / f"hf{r}" / "datasets")
                t0 = time.perf_counter()
                corpus = load_wmt14([str(src), str(tgt)])[0]
                prepare_data(corpus, None, PRESET, seed=0)
                times["first"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                corpus = load_wmt14([str(src), str(tgt)])[0]
                prepare_data(corpus, None, PRESET, seed=0)
                times["cached"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                _python_prepare(corpus.pairs, PRESET["max_len"])
                times["python"].append(time.perf_counter() - t0)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    out = {f"{k}_s": statistics.median(v) for k, v in times.items()}
    out["first_over_cached"] = statistics.median(f / c for f, c in zip(times["first"], times["cached"]))
    out["python_over_cached"] = statistics.median(p / c for p, c in zip(times["python"], times["cached"]))
    return out


class TextPreparation:
    """asv: ratios of text preparation with and without the Arrow / ``Dataset.map`` caches."""

    timeout = 600

    def setup_cache(self) -> dict[str, float]:
        return measure()

    def track_first_over_cached(self, result: dict[str, float]) -> float:
        return result["first_over_cached"]

    def track_python_over_cached(self, result: dict[str, float]) -> float:
        return result["python_over_cached"]


if __name__ == "__main__":
    print({k: round(v, 3) for k, v in measure().items()})
