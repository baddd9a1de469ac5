"""``gcbench bench``'s CUDA targets apply to CUDA rows only; its header and JSON name the CPU and its vector ISA."""

from __future__ import annotations

import json

import pytest
import torch

from gcbench.bench.harness import BenchRow, bench_main
from gcbench.bench.targets import GPU_TARGETS, NOT_JUDGED, STATED_NUMEL, TARGETS, target_text, verdict


def _row(name: str, **values: float) -> BenchRow:
    return BenchRow(name, "codec", **values)


@pytest.mark.parametrize(
    "name, values, cpu, cuda",
    [
        ("qsgd", {"total_x_copy": 3.0}, "met", "not met"),  # <= 4x on a CPU, <= 2x on a GPU
        ("qsgd", {"total_x_copy": 1.5}, "met", "met"),
        ("topk", {"encode_x_copy": 5.0}, "met", "not met"),  # <= 6x vs <= 4x
        ("countsketch.accumulate", {"encode_x_copy": 9.0}, "met", "met"),
        ("sketchml", {"encode_rate": 150e6}, "met", "not met"),  # >= 20M vs >= 200M pairs/s
        ("3lc", {"total_x_copy": 5.0}, "met", None),  # no CUDA target stated for 3LC with error feedback
    ],
)
def test_verdicts_use_the_target_set_of_the_rows_device(name, values, cpu, cuda):
    row = _row(name, **values)
    assert verdict(row, "cpu") == cpu and verdict(row) == cpu
    assert verdict(row, "cuda") == cuda


@pytest.mark.parametrize("device", ["cpu", "cuda"], ids=["cpu-set", "gpu-set"])  # the target sets: no device needed
def test_rows_below_the_stated_size_are_not_judged(device):
    """The targets are stated for 25M (CPU) and 64M (CUDA) elements: a smaller --size shows them, unjudged."""
    stated = STATED_NUMEL[device]
    for values in ({"total_x_copy": 1.5}, {"total_x_copy": 9.0}):  # met or not met at the stated size
        assert verdict(_row("qsgd", numel=stated - 1, **values), device) == NOT_JUDGED
        assert verdict(_row("qsgd", numel=stated, **values), device) in ("met", "not met")
    assert verdict(_row("qsgd", numel=stated, total_x_copy=9.0), device) == "not met"
    assert verdict(_row("qsgd", numel=1000), device) is None  # nothing measured: no verdict


def test_gpu_targets_are_stated_and_labelled_apart():
    assert target_text("qsgd", "cuda") == "enc+dec <= 2x copy (CUDA)" and target_text("qsgd") == TARGETS["qsgd"].text
    assert all("CUDA" in t.text or "torch" in t.text for t in GPU_TARGETS.values())
    assert target_text("3lc", "cuda") is None


def test_bench_header_and_json_record_the_cpu_model_and_isa(tmp_path, monkeypatch):
    from rich.console import Console

    # an ISA limit in force is recorded (this one changes nothing: Inductor's default target)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.setenv("TORCHINDUCTOR_CPP_MARCH", "native")

    out = tmp_path / "bench.json"
    md = tmp_path / "bench.md"
    console = Console(file=open(tmp_path / "log.txt", "w"), width=200)
    rows = bench_main(["qsgd"], size=4096, repeat=1, warmup=0, peers=False, stages=False, modes=("eager",),
                      json_path=out, markdown_path=md, console=console)
    meta = json.loads(out.read_text())
    assert meta["cpu"] and "isa_flags" in meta and meta["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert "vector ISA" in md.read_text() and "vector ISA" in (tmp_path / "log.txt").read_text()
    assert meta["isa_limits"] == {"TORCHINDUCTOR_CPP_MARCH": "native"}
    assert "limited by TORCHINDUCTOR_CPP_MARCH=native" in md.read_text()
    qsgd = next(r for r in rows if r.name == "qsgd")
    assert qsgd.target == TARGETS["qsgd"].text  # measured on the CPU: the CPU's target
