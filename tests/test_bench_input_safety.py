"""Hostile option values of ``gcbench bench``, ``bench-train``, ``compare`` and the fuzz run fail at
once, before any allocation or rank, with one line naming the option and exit status 2."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import gcbench.bench.harness
import gcbench.bench.limits
import gcbench.bench.train
import gcbench.commands.compare
import gcbench.commands.fuzz
from gcbench.bench.inputs import MAX_MATRIX_NUMEL, matrix_shape, parse_size
from gcbench.bench.limits import (
    MAX_BATCH_SIZE,
    MAX_BENCH_SIZE,
    check_bench_size,
    check_bench_train,
    max_local_ranks,
)
from gcbench.cli import app
from gcbench.commands.options import COMPARE_SEED_LIMIT, check_seed, same_output_problem

BENCH = ["bench", "-c", "identity", "--no-peers", "--no-stages", "--no-raw-ef", "--mode", "eager"]
BENCH_TRAIN = ["bench-train", "--quick", "-m", "mlp", "-c", "topk"]


class Reached(AssertionError):
    """The command went past its option checks."""


def _never(*args, **kwargs):
    raise Reached("the command went on to allocate or launch")


def _one_line_usage(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert not isinstance(result.exception, Reached), "the check came after the work started"
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], result.output


# bench --size ------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", ["10000000000000000000000", "1e18", "1e400", ".", "9" * 400, str(MAX_BENCH_SIZE + 1)])
def test_bench_size_out_of_range_or_malformed_is_one_line(monkeypatch, size):
    monkeypatch.setattr(gcbench.bench.harness, "run_bench", _never)
    _one_line_usage(CliRunner().invoke(app, [*BENCH, "--size", size]), "--size")


def test_bench_size_beyond_the_machine_memory_is_refused(monkeypatch):
    monkeypatch.setattr(gcbench.bench.harness, "run_bench", _never)
    monkeypatch.setattr(gcbench.bench.limits, "machine_memory_bytes", lambda: 4 << 30)
    _one_line_usage(CliRunner().invoke(app, [*BENCH, "--size", "2G"]), "--size", "GiB")


def test_bench_main_checks_the_size_before_allocating(monkeypatch):
    monkeypatch.setattr(gcbench.bench.harness, "make_dense_input", _never)
    with pytest.raises(ValueError, match="--size"):
        gcbench.bench.harness.bench_main(["identity"], size="1e22", peers=False, stages=False, raw_ef=False)


def test_check_bench_size_fits_the_given_memory():
    assert check_bench_size(1000, "cpu", memory_bytes=1 << 30) == 1000
    with pytest.raises(ValueError, match="--size"):
        check_bench_size(100_000_000, "cpu", memory_bytes=1 << 30)


def test_a_cuda_size_is_checked_against_that_devices_total_memory(monkeypatch):
    import torch

    asked = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: asked.append(device) or (1 << 28, 8 << 30))
    assert gcbench.bench.limits.device_memory_bytes("cuda:1") == 8 << 30 and asked == ["cuda:1"]
    assert check_bench_size(64 << 20, "cuda:1") == 64 << 20  # the gpu-check size: 1.5 GiB of buffers
    with pytest.raises(ValueError, match="--size 536870912 needs about 12.0 GiB .* but cuda:1 has 8.0 GiB"):
        check_bench_size(512 << 20, "cuda:1")

    def no_driver(device):
        raise RuntimeError("Found no NVIDIA driver on your system")

    monkeypatch.setattr(torch.cuda, "mem_get_info", no_driver)
    assert gcbench.bench.limits.device_memory_bytes("cuda") is None  # unknown: only the 2**31 bound applies
    assert check_bench_size(512 << 20, "cuda") == 512 << 20


@pytest.mark.parametrize("text, match", [(".", "not a size"), ("1e400", "finite"), ("1" * 400, "finite")])
def test_parse_size_rejects_unparsable_and_infinite_sizes(text, match):
    with pytest.raises(ValueError, match=match):
        parse_size(text)


def test_matrix_shape_is_bounded():
    assert matrix_shape(12) == (3, 4) and matrix_shape(7) == (1, 7) and matrix_shape(25_000_000) == (5000, 5000)
    for numel in (0, MAX_MATRIX_NUMEL + 1, 10**22):
        with pytest.raises(ValueError, match="matrix_shape"):
            matrix_shape(numel)


@pytest.mark.parametrize("command", [BENCH + ["--size", "1k"], ["compare", "-c", "identity"]])
def test_bench_and_compare_refuse_devices_other_than_cpu_and_cuda(monkeypatch, command):
    monkeypatch.setattr(gcbench.bench.harness, "run_bench", _never)
    monkeypatch.setattr(gcbench.commands.compare, "load_gradients", _never)
    _one_line_usage(CliRunner().invoke(app, [*command, "--device", "meta"]), "--device must be cpu, cuda or cuda:N")


def test_run_bench_checks_the_device_before_allocating(monkeypatch):
    monkeypatch.setattr(gcbench.bench.harness, "make_dense_input", _never)
    with pytest.raises(ValueError, match="--device must be cpu, cuda or cuda:N"):
        gcbench.bench.harness.run_bench(["identity"], size=16, device="meta", peers=False, stages=False)


# bench-train -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, option",
    [
        (["--batch-size", "1000000000"], "--batch-size"),
        (["--cap-mb", "1e308"], "--cap-mb"),
        (["--psgd-cap-mb", "nan"], "--psgd-cap-mb"),
        (["--timeout", "1e18"], "--timeout"),
        (["--timeout", "0"], "--timeout"),
        (["--timeout", "86401"], "--timeout"),  # the launcher's bound, the same as train's
    ],
)
def test_bench_train_bounds_its_numbers_before_spawning(monkeypatch, args, option):
    monkeypatch.setattr(gcbench.bench.train, "bench_train_main", _never)
    _one_line_usage(CliRunner().invoke(app, [*BENCH_TRAIN, *args]), option)


def test_bench_train_refuses_a_batch_the_ranks_cannot_hold(monkeypatch):
    monkeypatch.setattr(gcbench.bench.train, "bench_train_main", _never)
    monkeypatch.setattr(gcbench.bench.limits, "machine_memory_bytes", lambda: 1 << 30)
    _one_line_usage(CliRunner().invoke(app, [*BENCH_TRAIN, "--batch-size", "500000"]), "--batch-size", "GiB")


def test_bench_train_caps_its_ranks_and_names_nproc_for_the_default_batch(monkeypatch):
    """Ranks beyond 4 per CPU core are refused at once (1000 of them had started launching); a memory
    refusal at the default batch names --nproc, the option the user gave, not --batch-size."""
    monkeypatch.setattr(gcbench.bench.train, "bench_train_main", _never)
    _one_line_usage(CliRunner().invoke(app, [*BENCH_TRAIN, "--nproc", str(max_local_ranks() + 1)]), "--nproc")
    monkeypatch.setattr(gcbench.bench.limits, "machine_memory_bytes", lambda: 1 << 20)
    _one_line_usage(CliRunner().invoke(app, [*BENCH_TRAIN, "--nproc", "2"]), "--nproc", "GiB")


def test_check_bench_train_caps_the_batch_whatever_the_memory():
    with pytest.raises(ValueError, match="--batch-size must be between 1 and"):
        check_bench_train(models=["mlp"], batch=MAX_BATCH_SIZE + 1, quick=True, nproc=1, cap_mb=25.0,
                          psgd_cap_mb=1024.0, timeout=300.0, memory_bytes=1 << 62)


def test_check_bench_train_accepts_the_defaults():
    for quick in (True, False):
        check_bench_train(models=["mlp", "resnet18"], batch=None, quick=quick, nproc=2, cap_mb=25.0,
                          psgd_cap_mb=1024.0, timeout=300.0, memory_bytes=16 << 30)


# compare --seed ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", ["100000000000000000000", str(2**63), "-1"])
def test_compare_seed_out_of_range_is_one_line(monkeypatch, seed):
    monkeypatch.setattr(gcbench.commands.compare, "load_gradients", _never)
    _one_line_usage(CliRunner().invoke(app, ["compare", "-c", "identity", "--seed", seed]), "--seed")


def test_compare_main_checks_the_seed(monkeypatch):
    from rich.console import Console

    monkeypatch.setattr(gcbench.commands.compare, "load_gradients", _never)
    quiet = Console(file=open("/dev/null", "w"))  # noqa: SIM115
    code = gcbench.commands.compare.compare_main(
        ["identity"], repeat=1, sparse=False, seed=2**64, steps=0, device="cpu", json_path=None,
        markdown_path=None, strict=False, console=quiet, err_console=quiet,
    )
    assert code == 2


def test_check_seed_range():
    assert check_seed(0, COMPARE_SEED_LIMIT) == 0 and check_seed(2**63 - 1, COMPARE_SEED_LIMIT) == 2**63 - 1
    for bad in (-1, 2**63):
        with pytest.raises(ValueError, match="--seed"):
            check_seed(bad, COMPARE_SEED_LIMIT)


# one file for two outputs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["compare", "-c", "identity", "--json", "X", "--markdown", "X"],
        [*BENCH, "--size", "1k", "--json", "X", "--markdown", "X"],
        [*BENCH_TRAIN, "--json", "X", "--plot", "X"],
    ],
)
def test_two_outputs_to_one_file_are_refused_and_the_file_kept(monkeypatch, tmp_path, command):
    monkeypatch.setattr(gcbench.bench.harness, "run_bench", _never)
    monkeypatch.setattr(gcbench.bench.train, "bench_train_main", _never)
    monkeypatch.setattr(gcbench.commands.compare, "load_gradients", _never)
    target = tmp_path / "out.txt"
    target.write_text("kept")
    monkeypatch.chdir(tmp_path)
    spellings = iter([str(target), "./out.txt"])  # one file, named absolute then relative
    args = [next(spellings) if a == "X" else a for a in command]
    _one_line_usage(CliRunner().invoke(app, args), "give each output its own file")
    assert target.read_text() == "kept"


def test_same_output_problem_follows_links(tmp_path):
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    assert same_output_problem((tmp_path / "a.json", "--json"), (tmp_path / "a.md", "--markdown")) is None
    assert same_output_problem((None, "--json"), (None, "--markdown")) is None
    assert "--markdown" in same_output_problem((tmp_path / "real.json", "--json"), (tmp_path / "link.json", "--markdown"))


# python -m gcbench.commands.fuzz -----------------------------------------------------------------


@pytest.mark.parametrize(
    "args, option",
    [
        (["--memory-gib", "nan"], "--memory-gib"),
        (["--memory-gib", "inf"], "--memory-gib"),
        (["--memory-gib", "0"], "--memory-gib"),
        (["--memory-gib", "-1"], "--memory-gib"),
        (["--memory-gib", "1e300"], "--memory-gib"),
        (["--cases", "-1"], "--cases"),
        (["--cases", "0"], "--cases"),
        (["--max-numel", "0"], "--max-numel"),
    ],
)
def test_fuzz_options_are_checked_first(monkeypatch, capsys, args, option):
    # Neither the corpus nor the address-space limit is reached: a bad limit would cap this process.
    monkeypatch.setattr(gcbench.commands.fuzz, "corpus", _never)
    monkeypatch.setattr(gcbench.commands.fuzz, "limit_address_space", _never)
    assert gcbench.commands.fuzz.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"usage: {option}"), err


# bench and compare rounds and steps ----------------------------------------------------------------


@pytest.mark.parametrize(
    "command, option",
    [
        (BENCH + ["--size", "1k", "--repeat", "0"], "--repeat must be between 1 and 1000"),
        (BENCH + ["--size", "1k", "--repeat", str(10**12)], "--repeat must be between 1 and 1000"),
        (BENCH + ["--size", "1k", "--warmup", "-1"], "--warmup must be between 0 and 1000"),
        (BENCH + ["--size", "1k", "--warmup", "1001"], "--warmup must be between 0 and 1000"),
        (BENCH + ["--size", "1k", "--density", "2"], "--density must be in (0, 1]"),
        (BENCH + ["--size", "1k", "--mode", "fast"], "--mode must be"),
        (["compare", "-c", "identity", "--repeat", "0"], "--repeat must be between 1 and 1000"),
        (["compare", "-c", "identity", "--repeat", str(10**12)], "--repeat must be between 1 and 1000"),
        (["compare", "-c", "identity", "--steps", "-1"], "--steps must be between 0 and 10000"),
        (["compare", "-c", "identity", "--steps", str(10**20)], "--steps must be between 0 and 10000"),
    ],
)
def test_bench_and_compare_bound_their_rounds_and_steps_with_one_usage_line(monkeypatch, command, option):
    monkeypatch.setattr(gcbench.bench.harness, "make_dense_input", _never)
    monkeypatch.setattr(gcbench.commands.compare, "load_gradients", _never)
    result = CliRunner().invoke(app, command)
    _one_line_usage(result, option)
    assert result.output.startswith("usage:"), result.output  # bench labels them as compare does


def test_the_bounds_themselves_are_accepted():
    from gcbench.bench.limits import MAX_COMPARE_STEPS, MAX_REPEAT, MAX_WARMUP, check_count, check_rounds

    check_rounds(MAX_REPEAT, MAX_WARMUP)
    check_rounds(1, 0)
    assert check_count(MAX_COMPARE_STEPS, "--steps", 0, MAX_COMPARE_STEPS) == MAX_COMPARE_STEPS


def test_bench_train_runs_a_repeated_codec_or_model_once(monkeypatch):
    """``-c topk -c topk`` had built two rows of one label, whose step times merged into one row with
    twice the samples; ``-m mlp -m mlp`` ran the model twice."""
    seen = {}

    def record(**kw):
        seen.update(kw)

    monkeypatch.setattr(gcbench.bench.train, "bench_train_main", record)
    result = CliRunner().invoke(app, ["bench-train", "--quick", "-m", "mlp", "-m", "mlp", "-c", "topk", "-c", "qsgd", "-c", "topk"])
    assert result.exit_code == 0, result.output
    assert seen["models"] == ["mlp"] and seen["codecs"] == ["topk", "qsgd"]
