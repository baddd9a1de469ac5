"""The Sketched-SGD workload's probe (:mod:`..framework.workload_stamp`): a few steps of the package's
training functions on synthetic data, and what they computed.

* Translation (:func:`.translation.train_translation`, the BLEU cells): the tiny transformer and the
  LSTM, each with vanilla SGD, true top-k and Sketched-SGD (5 rows x 64 columns, ``P = 2``, the 1-D
  parameters sent dense), 3 steps on 2 workers, the held-out BLEU and loss after the last step, and
  the sketch measurements a Sketched-SGD run takes beside its steps (top-k recovery, the other
  hash's error share, the hash statistics).
* Images (:func:`.vision.run_images`, the CIFAR and scaling cells): the small ResNet (8 channels, one
  block) with vanilla SGD, local top-k and Sketched-SGD, 3 steps on 2 workers.

The data are synthetic, from generators seeded with :data:`SEED`: 48 sentence pairs of 4-7 words
drawn uniformly from 40 invented source words, each target word a fixed function of its source
word (so the pairs are translations of each other), 8 of them held out; and 64 + 32 images of
``1 x 8 x 8`` N(0, 1) pixels with uniform labels of 10 classes. Each run contributes its per-step
losses, its bytes (per step and in total), its held-out metrics and the digest of its parameters
where the function returns one; measured seconds are left out.
"""

from __future__ import annotations

import random
from typing import Any, Iterator

import torch

from gcbench.data.text import ParallelCorpus

from .methods import MethodConfig
from .translation import prepare_data, train_translation
from .vision import ImageData, run_images

#: Seed of the synthetic data's generators.
SEED = 20191208
#: The translation models' shapes (the smallest of the spec's scales, shrunk).
TRANSLATION_MODELS = {"transformer": {"d_model": 16, "heads": 2, "layers": 1, "ff": 32, "max_len": 12, "dropout": 0.0},
                      "lstm": {"emb": 16, "hidden": 16, "layers": 1}}
#: The image model's shape.
IMAGE_MODEL = {"channels": 8, "blocks": 1}


def sketched(dense_1d: bool) -> MethodConfig:
    """Sketched-SGD at a fixed geometry: k = d / 50, ``P = 2``, 5 rows x 64 columns."""
    return MethodConfig("sketched", "sketched", d_per_k=50, k_fraction=0.02, P=2, rows=5, columns=64, seed=0,
                        dense_1d=dense_1d)


def probe_corpus() -> ParallelCorpus:
    """The synthetic sentence pairs (see the module docstring)."""
    rng = random.Random(SEED)
    words = [f"w{i}" for i in range(40)]
    lexicon = {w: f"t{(7 * i + 3) % 40}" for i, w in enumerate(words)}
    pairs = []
    for _ in range(48):
        src = [rng.choice(words) for _ in range(rng.randint(4, 7))]
        pairs.append((" ".join(src), " ".join(lexicon[w] for w in src)))
    return ParallelCorpus(pairs, "probe", "synthetic word-for-word pairs")


def probe_images() -> ImageData:
    """The synthetic images (see the module docstring)."""
    gen = torch.Generator().manual_seed(SEED)
    x = torch.randn(96, 1, 8, 8, generator=gen)
    y = torch.randint(0, 10, (96,), generator=gen)
    return ImageData(x[:64], y[:64], x[64:], y[64:], 8, 1, {"name": "probe"})


def probe() -> Iterator[tuple[str, Any]]:
    """The probe's items (see the module docstring)."""
    data = prepare_data(probe_corpus(), None, {"held_out": 8, "min_count": 1, "max_len": 8}, seed=0)
    for kind, params in TRANSLATION_MODELS.items():
        for m in (MethodConfig("vanilla", "vanilla"), MethodConfig("topk", "true_topk", d_per_k=50, k_fraction=0.02,
                                                                   dense_1d=True), sketched(True)):
            r = train_translation(data, model_kind=kind, model_params=params, method=m, workers=2, steps=3, batch=4,
                                  lr=0.3, momentum=0.9, seed=0, eval_every=0, eval_pairs=None)
            t = r["traffic"]
            yield f"{kind}.{m.name}", {"losses": r["losses"], "bleu": r["bleu"], "test_loss": r["test_loss"], "k": r["k"],
                                       "message_bytes": t["message_bytes"], "raw_bytes": t["raw_bytes"],
                                       "bytes_by_kind": t["bytes_by_kind"], "accumulator_norms": r["accumulator_norms"],
                                       **{k: r[k] for k in ("topk_recovery", "topk_recovery_other_hash", "sketch_error_share",
                                                            "sketch_hash_statistics")}}
    images = probe_images()
    for m in (MethodConfig("vanilla", "vanilla"), MethodConfig("local_topk", "local_topk", k_fraction=0.045), sketched(False)):
        r = run_images(images, model_params=IMAGE_MODEL, method=m, workers=2, steps=3, batch=8, lr=0.1, momentum=0.9, seed=0)
        yield f"images.{m.name}", {"per_step": r["per_step"], "accuracy": r["accuracy"], "params_digest": r["params_digest"],
                                   "traffic": {k: v for k, v in r["traffic"].items() if k != "measured_s"}}
