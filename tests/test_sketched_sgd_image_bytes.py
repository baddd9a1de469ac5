"""The image sweep's ratios count the same bytes on both sides: against an all_reduce (vanilla, true top-k,
Sketched-SGD's two rounds), which the cluster records as the tensors' raw bytes, vanilla's reference is its
raw all_reduce, 4 d bytes, not its framed ``identity`` payload (header and checksum included); against
local top-k's framed payloads it is that framed payload."""

from __future__ import annotations

import pytest
from gcbench.reproductions.sketched_sgd.methods import MethodConfig
from gcbench.reproductions.sketched_sgd.vision import load_image_data, run_images, vanilla_bytes, vanilla_payload_bytes

PARAMS = {"channels": 4, "blocks": 1}


@pytest.fixture(scope="module")
def data():
    return load_image_data("digits", {"train_images": 64, "test_images": 16})


def _run(data, m: MethodConfig) -> dict:
    return run_images(data, model_params=PARAMS, method=m, workers=2, steps=3, batch=4, lr=0.05, momentum=0.9, seed=0)


def test_vanilla_against_itself_is_exactly_one(data):
    """Vanilla's all_reduce over vanilla's reference: the same bytes, so 1 after the first step (step 0
    carries a one-off check of the shared sections); a reference with the payload header reads above 1."""
    res = _run(data, MethodConfig("vanilla", "vanilla"))
    d = res["parameters"]
    assert res["vanilla_bytes_each_way"] == 4 * d < vanilla_payload_bytes(d)
    for rec in res["per_step"][1:]:
        assert rec["up"] == rec["down"] == 4 * d
        assert rec["overall_compression"] == 1.0 and rec["upload_compression"] == 1.0


def test_sketched_sgds_ratio_is_of_raw_bytes_on_both_sides(data):
    m = MethodConfig("sketched", "sketched", k_fraction=0.01, ratio=20.0, rows=5)
    m.P, m.columns = 2, 16  # a tiny model: the paper's rule leaves no room for 3k here
    res = _run(data, m)
    d = res["parameters"]
    assert res["vanilla_bytes_each_way"] == vanilla_bytes(d, m) == 4 * d
    k = max(1, -(-d // 100))
    for rec in res["per_step"][1:]:
        assert rec["up"] == 4 * (5 * 16 + 2 * k)  # the sketch's table and the P k values: raw floats
        assert rec["overall_compression"] == pytest.approx(2 * 4 * d / (rec["up"] + rec["down"]), rel=1e-12)


def test_local_topk_is_compared_with_vanillas_framed_payload(data):
    m = MethodConfig("local_topk", "local_topk", k_fraction=0.045)
    res = _run(data, m)
    d = res["parameters"]
    assert res["vanilla_bytes_each_way"] == vanilla_bytes(d, m) == vanilla_payload_bytes(d) > 4 * d
    for rec in res["per_step"]:
        assert rec["upload_compression"] == pytest.approx(vanilla_payload_bytes(d) / rec["up"], rel=1e-12)
