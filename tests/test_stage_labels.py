"""Profiler labels on codec stages: in every trace a profiler records, and no profiler scope without one."""

from __future__ import annotations

import torch
from gcbench.compressors.kernels.labels import stage_label
from torch.profiler import ProfilerActivity, profile, record_function

from gcbench import compressors


def _sparse_gradient(n: int = 2000) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, generator=g) * 1e-2
    return torch.where(torch.rand(n, generator=g) < 0.3, x, torch.zeros(()))


def test_a_label_opens_a_profiler_scope_only_while_a_profiler_records() -> None:
    assert not isinstance(stage_label("gcbench/test"), record_function)
    with profile(activities=[ProfilerActivity.CPU]):
        assert isinstance(stage_label("gcbench/test"), record_function)
    assert not isinstance(stage_label("gcbench/test"), record_function)


def test_sketchml_stages_are_labelled_in_a_recorded_trace() -> None:
    codec = compressors.get("sketchml")
    x = _sparse_gradient()
    codec.encode(x, key="w")  # first call outside the trace
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        payload = codec.encode(x, key="w")
        codec.decode(payload)
    names = {e.key for e in prof.key_averages()}
    for stage in ("sketchml/group", "sketchml/minmax_insert", "sketchml/delta_binary_encode",
                  "sketchml/delta_binary_decode", "sketchml/merge_query"):
        labelled = sorted(n for n in names if n.startswith("sketchml/"))
        assert stage in names, f"{stage} missing from the trace: {labelled}"

