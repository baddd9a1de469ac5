"""The Sketched-SGD workload's probe (:mod:`..framework.workload_stamp`): a few steps of the package's
training functions on synthetic data, through the same sizing and checks as the cells, and what they
computed.

* Translation (:func:`.translation.train_translation`, the BLEU cells): the tiny transformer and the
  LSTM, each with vanilla SGD, true top-k and Sketched-SGD sized for 20x by the cells' rule
  (:func:`.geometry.translation_geometry`: k = d / 50, ``P`` and the columns from the paper's §5.3
  count; 5 rows; the 1-D parameters sent dense), 3 steps on 2 workers, the held-out BLEU and loss
  after the last step, the sketch measurements a Sketched-SGD run takes beside its steps (top-k
  recovery, the other hash's error share, the hash statistics), and for the sketched runs the
  selection check of the ``selection-`` cells (:class:`.selectcheck.SelectionRecorder`: every step
  against Algorithm 2; its steps' counts, deviations and ``violated``, which line 4's carry across steps
  also sets; the carry's own deviations, :attr:`~.selectcheck.SelectionRecorder.carry`, are recorded by
  the ``selection-`` cells only, under the workload's ``SELECTION_CHECKS_VERSION``).
* Images (:func:`.vision.run_images`, the CIFAR and scaling cells): the small ResNet (8 channels, one
  block) with vanilla SGD, local top-k and Sketched-SGD sized for 20x (:func:`.geometry.sketch_geometry`),
  3 steps on 2 workers, and the steady-state figures the cells derive (:func:`.vision.steady`).

The data are synthetic, from generators seeded with :data:`SEED`: 48 sentence pairs of 4-7 words
drawn uniformly from 40 invented source words, each target word a fixed function of its source
word (so the pairs are translations of each other), 8 of them held out; and 64 + 32 images of
``1 x 8 x 8`` N(0, 1) pixels with uniform labels of 10 classes. Measured seconds are left out.
"""

from __future__ import annotations

import random
from typing import Any, Iterator

import torch

from gcbench.data.text import ParallelCorpus

from .geometry import sketch_geometry, translation_geometry
from .methods import MethodConfig
from .models import build_image_model
from .selectcheck import SelectionRecorder
from .translation import prepare_data, train_translation
from .vision import ImageData, run_images, steady

#: What the cells compute that this probe does not reach ("module.py" or "module.py:qualname"), and why:
#: a change there still needs the package's ``CODE_VERSION`` (``tests/test_repro_probe_reach.py`` holds
#: every other function the cells call in the run's own process to being reached by :func:`probe`).
UNPROBED = {
    "workload.py": "the cells' glue: a cell's configuration into a method, W&B logging and the result's assembly",
    "translation.py:load_corpus": "the sentence pairs (dictd, WMT14 files)",
    "translation.py:check_corpus_name": "the same",
    "vision.py:load_image_data": "the images (loading, subsampling, pooling)",
    "vision.py:ddp_rank_main": "runs in the launched DDP ranks of the real-DDP cell, which holds them to the "
                               "simulated run (run_images, the probe's) bit for bit",
}
#: Seed of the synthetic data's generators.
SEED = 20191208
#: The translation models' shapes (the micro scale's).
TRANSLATION_MODELS = {"transformer": {"d_model": 16, "heads": 2, "layers": 1, "ff": 32, "max_len": 12, "dropout": 0.0},
                      "lstm": {"emb": 16, "hidden": 16, "layers": 1}}
#: The image model's shape.
IMAGE_MODEL = {"channels": 8, "blocks": 1}
#: Parameters per applied coordinate of the sparse translation methods (k = d // D_PER_K).
D_PER_K = 50


def translation_methods() -> list[MethodConfig]:
    """Vanilla, true top-k and Sketched-SGD for 20x, as the spec's translation methods are built
    (:meth:`.settings.SketchedSGDSettings.method`), each through its JSON form as a cell's config holds it."""
    methods = [MethodConfig("vanilla", "vanilla"),
               MethodConfig("topk", "true_topk", k_fraction=1.0 / D_PER_K, d_per_k=D_PER_K, rows=5, dense_1d=True),
               MethodConfig("sketched20", "sketched", k_fraction=1.0 / D_PER_K, d_per_k=D_PER_K, rows=5, ratio=20.0,
                            dense_1d=True)]
    return [MethodConfig.from_config(m.as_config()) for m in methods]


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


def _translation_items(data: Any, kind: str, params: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for m in translation_methods():
        geometry, d = translation_geometry({"model": kind, "model_params": params, "seed": 0}, m, len(data.src_vocab),
                                           len(data.tgt_vocab))
        held: list[SelectionRecorder] = []

        def observe(run: Any) -> Any:
            held.append(SelectionRecorder(run))
            return held[0].after_backward

        r = train_translation(data, model_kind=kind, model_params=params, method=m, workers=2, steps=3, batch=4, lr=0.3,
                              momentum=0.9, seed=0, eval_every=0, eval_pairs=None,
                              observe=observe if m.kind == "sketched" else None)
        t = r["traffic"]
        yield f"{kind}.{m.name}", {
            "geometry": geometry, "parameters": d, "losses": r["losses"], "bleu": r["bleu"], "test_loss": r["test_loss"],
            "k": r["k"], "message_bytes": t["message_bytes"], "raw_bytes": t["raw_bytes"], "bytes_by_kind": t["bytes_by_kind"],
            "accumulator_norms": r["accumulator_norms"],
            **{k: r[k] for k in ("topk_recovery", "topk_recovery_other_hash", "sketch_error_share", "sketch_large_errors",
                                  "sketch_hash_statistics")},
            "selection": held[0].steps if held else None}


def probe() -> Iterator[tuple[str, Any]]:
    """The probe's items (see the module docstring)."""
    data = prepare_data(probe_corpus(), None, {"held_out": 8, "min_count": 1, "max_len": 8}, seed=0)
    for kind, params in TRANSLATION_MODELS.items():
        yield from _translation_items(data, kind, params)
    images = probe_images()
    d = sum(p.numel() for p in build_image_model(images.side, {"in_channels": images.channels, **IMAGE_MODEL}, 0).parameters())
    for m in (MethodConfig("vanilla", "vanilla"), MethodConfig("local_topk", "local_topk", k_fraction=0.045),
              MethodConfig("sketched", "sketched", k_fraction=0.01, rows=5, ratio=20.0)):
        geometry = sketch_geometry(m, d)
        r = run_images(images, model_params=IMAGE_MODEL, method=m, workers=2, steps=3, batch=8, lr=0.1, momentum=0.9, seed=0)
        yield f"images.{m.name}", {"geometry": geometry, "per_step": r["per_step"], "accuracy": r["accuracy"],
                                   "params_digest": r["params_digest"],
                                   "steady": {k: steady(r["per_step"], k) for k in ("overall_compression", "up", "down")},
                                   "traffic": {k: v for k, v in r["traffic"].items() if k != "measured_s"}}
