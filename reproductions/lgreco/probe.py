"""The L-GreCo workload's probe (:mod:`..framework.workload_stamp`): a few steps of the package's
training on the simulated cluster, on synthetic data, and what they computed.

* Images (:func:`.ranks.simulated_train`): the digits MLP on 2 workers with small DDP buckets,
  PowerSGD (rank 4, error feedback) and TopK (1%, error feedback) under the uniform setting, L-GreCo
  and Accordion, deciding every 2 steps after 2 warm-up steps, 6 steps: the final parameters' digest
  and the settings applied at each decision.
* Language model (:mod:`.lm`): the Transformer LM (d 16, one layer, vocabulary of 50) with PowerSGD
  (rank 4, error feedback) under L-GreCo on the simulated cluster, Adam, 6 steps of the cells'
  batches (:func:`.lm.lm_batch`): the digest, the settings applied, the held-out perplexity.

The real cells train on gloo ranks with the DDP hook; the ``sim-check`` cell of every image run holds
the simulated cluster bit-identical to them, and the probe reaches the models, the policies, the
codecs' per-layer settings and the aggregation through it. The data are synthetic, from generators
seeded with :data:`SEED`: 64 + 32 digit-shaped inputs (64 uniform [0, 1) features, uniform labels of
10 classes) and 4,000 + 600 uniform token ids.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

from gcbench.envs.workers import CodecSpec
from gcbench.workloads.training import params_digest

from .lm import LMData, build_lm, lm_batch, lm_loss, lm_perplexity
from .ranks import simulate, simulated_train
from .vision import ImageData

#: Seed of the synthetic data's generators.
SEED = 20240514
#: What the cells compute that this probe does not reach ("module.py" or "module.py:qualname"), and why:
#: a change there still needs the package's ``CODE_VERSION`` (``tests/test_repro_probe_reach.py`` holds
#: every other function the cells call in the run's own process to being reached by :func:`probe`).
UNPROBED = {
    "workload.py": "the cells' glue: launching the ranks, W&B logging and the result's assembly",
    "vision.py:load_image_data": "the data set (loading, pooling, normalising)",
    "ranks.py:rank_train": "runs in the launched gloo ranks (DDP and the hook): every image run's sim-check cell "
                           "holds its parameters to simulated_train's, the probe's, bit for bit; its language-model "
                           "path (the text, Adam, the LM's batches and loss) is the probe's through the simulated cluster",
}
#: The probed codecs (the spec's PowerSGD and TopK rows).
CODECS = {"powersgd": ({"rank": 4}, True), "topk": ({"ratio": 0.01}, True)}
#: The probed image cell's training keys.
IMAGE_CONFIG = {"model": "mlp", "seed": 0, "workers": 2, "batch": 8, "steps": 6, "every": 2, "warmup": 2, "lr": 0.1,
                "momentum": 0.9, "bucket_cap_mb": 0.01}


def probe_images() -> ImageData:
    """The synthetic digit-shaped inputs (see the module docstring)."""
    gen = torch.Generator().manual_seed(SEED)
    x = torch.rand(96, 64, generator=gen)
    y = torch.randint(0, 10, (96,), generator=gen)
    return ImageData(x[:64], y[:64], x[64:], y[64:], 10, {"name": "probe"})


def probe_text() -> LMData:
    """The synthetic token ids (see the module docstring)."""
    gen = torch.Generator().manual_seed(SEED)
    return LMData(torch.randint(0, 50, (4000,), generator=gen), torch.randint(0, 50, (600,), generator=gen), 50, name="probe")


def lm_probe(steps: int = 6) -> dict[str, Any]:
    """The language model's probe run (see the module docstring)."""
    text = probe_text()
    model = build_lm(0, vocab=text.vocab, d_model=16, layers=1, heads=2, ff=32)
    spec = CodecSpec(name="powersgd", params={"rank": 4}, error_feedback=True)

    def step_loss(step: int):
        batches = [lm_batch(text, step, w, 2, 4, 0) for w in range(2)]
        return lambda w: lm_loss(model, *batches[w])

    applied = simulate(model, spec, "lgreco", lambda m: torch.optim.Adam(m.parameters(), lr=0.003), step_loss,
                       workers=2, steps=steps, every=2, warmup=2, bucket_cap_mb=0.1,
                       layers=[n for n, p in model.named_parameters() if p.requires_grad])
    return {"digest": params_digest(model), "applied": applied, "perplexity": lm_perplexity(model, text)}


def probe() -> Iterator[tuple[str, Any]]:
    """The probe's items (see the module docstring)."""
    images = probe_images()
    for codec, (params, ef) in CODECS.items():
        cfg = {**IMAGE_CONFIG, "codec": codec, "params": params, "ef": ef}
        for method in ("uniform", "lgreco", "accordion"):
            yield f"images.{codec}.{method}", simulated_train(cfg, images, method)
    yield "lm.powersgd.lgreco", lm_probe()
