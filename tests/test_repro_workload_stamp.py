"""The workload's stamp on a run's cells: each paper package's probe gives the same digest run after
run, whatever ran before and on how many threads, and a change in the package's own code (a model, a
schedule, an aggregation, a loss) changes it."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from gcbench.reproductions.framework.digest import DIGITS, probe_digest
from gcbench.reproductions.framework.workload_stamp import workload_stamp
from gcbench.reproductions import lgreco, sketched_sgd, sketchml, threelc
from gcbench.reproductions.lgreco import ranks as lgreco_ranks
from gcbench.reproductions.lgreco.lm import TinyLM
from gcbench.reproductions.sketched_sgd.methods import MethodConfig
from gcbench.reproductions.sketched_sgd.models import SmallResNet
from gcbench.reproductions.sketchml import glm
from gcbench.reproductions.threelc.train import TrainConfig


class Items:
    def __init__(self, *items):
        self.items = items

    def probe(self):
        return iter(self.items)


def test_the_digest_reads_labels_order_dtypes_and_every_bit():
    t = torch.tensor([1.0, 2.0])
    base = probe_digest([("a", t), ("b", 3)])
    assert len(base) == DIGITS and base == probe_digest([("a", t.clone()), ("b", 3)])
    assert probe_digest([("b", 3), ("a", t)]) != base  # order
    assert probe_digest([("A", t), ("b", 3)]) != base  # labels
    assert probe_digest([("a", t.double()), ("b", 3)]) != base  # the same values in another dtype
    assert probe_digest([("a", t.reshape(2, 1)), ("b", 3)]) != base  # another shape
    bumped = t.clone()
    bumped.view(torch.int32)[0] += 1  # one bit of one value
    assert probe_digest([("a", bumped), ("b", 3)]) != base
    assert probe_digest([("a", t.numpy()), ("b", 3)]) != base  # an array is not a tensor
    assert probe_digest([("x", {"b": 1.0, "a": [1, 2]})]) == probe_digest([("x", {"a": [1, 2], "b": 1.0})])
    assert probe_digest([("x", 0.1 + 0.2)]) != probe_digest([("x", 0.3)])  # floats exact


def test_the_probe_leaves_the_random_states_and_the_thread_count_as_it_found_them():
    def draws():
        return torch.rand(2).tolist(), np.random.rand(), random.random()

    class Draws:
        def probe(self):
            yield "draws", draws()  # the probe's own draws consume the global generators

    torch.manual_seed(5), np.random.seed(5), random.seed(5)
    expected = draws()
    torch.manual_seed(5), np.random.seed(5), random.seed(5)
    before = torch.get_num_threads()
    workload_stamp(Draws())
    assert draws() == expected and torch.get_num_threads() == before


PACKAGES = {
    "threelc": (lambda: threelc.workload(),
                # a schedule change: a constant learning rate where the cells' decays
                lambda mp: mp.setattr(TrainConfig, "lr_at", lambda self, step: self.lr)),
    "sketched_sgd/translation": (lambda: sketched_sgd.workload(),
                                 # momentum applied by the optimizer for every method, Sketched-SGD's included
                                 lambda mp: mp.setattr(MethodConfig, "optimizer_momentum", lambda self, m: m)),
    "sketched_sgd/images": (lambda: sketched_sgd.workload(),
                            # the small ResNet's pooling changed
                            lambda mp: mp.setattr(SmallResNet, "forward", _avg_pooled)),
    "lgreco/images": (lambda: lgreco.workload(),
                      # the image model initialised from another seed
                      lambda mp: mp.setattr(lgreco_ranks, "build_image_model", _reseeded)),
    "lgreco/lm": (lambda: lgreco.workload(),
                  # the language model's logits scaled
                  lambda mp: mp.setattr(TinyLM, "forward", _scaled(TinyLM.forward))),
    "sketchml": (lambda: sketchml.workload(),
                 # the losses' derivative off by a factor
                 lambda mp: mp.setattr(glm, "dloss_dmargin", _halved(glm.dloss_dmargin))),
}


def _avg_pooled(self, x):
    h = torch.relu(self.norm(self.stem(x.reshape(-1, self.in_channels, self.side, self.side))))
    h = self.blocks(h)
    return self.fc(h.mean(dim=(2, 3)) * 1.5)


def _reseeded(cfg, data):
    from gcbench.reproductions.lgreco.vision import build_image_model

    return build_image_model({**cfg, "seed": cfg["seed"] + 1}, data)


def _scaled(forward):
    return lambda self, x: forward(self, x) * 1.01


def _halved(f):
    return lambda model, margin, y: 0.5 * f(model, margin, y)


@pytest.mark.parametrize("name", list(PACKAGES))
def test_each_package_probe_is_stable_and_a_change_in_its_code_changes_it(name, monkeypatch):
    make, mutate = PACKAGES[name]
    wl = make()
    first = workload_stamp(wl)
    assert len(first) == DIGITS
    assert workload_stamp(wl) == first  # the same code: the same stamp (the cells are reused)
    mutate(monkeypatch)
    assert workload_stamp(wl) != first  # the package's code computes otherwise: every cell is new


def test_the_stamps_of_two_packages_differ():
    assert workload_stamp(threelc.workload()) != workload_stamp(sketchml.workload())
    assert workload_stamp(Items(("a", 1))) != workload_stamp(Items(("a", 2)))


def test_every_paper_has_a_probe_held_to_a_change_in_its_code():
    from gcbench.reproductions import PAPERS

    probed = {name.split("/")[0] for name in PACKAGES}  # package/what the mutation reaches
    assert probed == set(PAPERS.values())
