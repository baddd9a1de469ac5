"""What a new user meets on the command line: an unknown codec parameter or codec name is one typed line in
every command that takes it, the seed ranges and value placeholders of ``--help`` are written one way,
compiled kernels on a machine without CUDA print no "No CUDA runtime" warning, ``bench-train --quick``
shows its ratios without judging the targets, and ``gcbench codecs`` ends no line in spaces."""

from __future__ import annotations

import inspect
import io
import json
import logging
import os
import re
import subprocess
import sys

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from gcbench import compressors
from gcbench.bench import train as bench_train
from gcbench.bench.quiet import CPP_EXTENSION_LOGGER, NO_CUDA_RUNTIME, NoCudaRuntimeFilter
from gcbench.cli import app
from gcbench.commands.codecs import codecs_main
from gcbench.commands.options import COMPARE_SEED_LIMIT, TRAIN_SEED_LIMIT, check_seed
from gcbench.compressors import families


def _one_line(result, needle: str, code: int = 2) -> None:
    assert result.exit_code == code, result.output
    assert needle in result.output and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


# an unknown codec parameter ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["qsgd", "ef-signsgd", "fp16", "identity", "sketchml"])
def test_an_unknown_parameter_is_a_typed_error_listing_the_valid_ones(name):
    with pytest.raises(compressors.InvalidParameterError) as caught:
        compressors.get(name, nosuchparam=1)
    message = str(caught.value)
    valid = list(inspect.signature(compressors.entry(name).load()).parameters)  # the constructor's own names
    assert message == f"{name}: unknown parameter 'nosuchparam'; valid parameters: {', '.join(valid) or 'none'}"
    compressors.get(name, **dict(compressors.entry(name).defaults))  # a valid name still builds


def test_several_unknown_parameters_are_named_together():
    with pytest.raises(compressors.InvalidParameterError, match=r"^qsgd: unknown parameters 'a', 'b'; valid parameters: levels"):
        compressors.get("qsgd", levels=3, a=1, b=2)


def test_an_exchange_method_names_its_parameters_too():
    with pytest.raises(compressors.InvalidParameterError) as caught:
        families.build("sketched-sgd", nosuchparam=1)
    assert str(caught.value).startswith("sketched-sgd: unknown parameter 'nosuchparam'; valid parameters: ratio, ")


@pytest.mark.parametrize("codec", ["qsgd", "sketched-sgd"])
def test_train_reports_an_unknown_codec_parameter_in_one_line(codec):
    result = CliRunner().invoke(app, ["train", "--simulate", "--steps", "1", "--profile", "none", "-c", codec,
                                      "-p", "nosuchparam=1"])
    _one_line(result, f"InvalidParameterError: {codec}: unknown parameter 'nosuchparam'; valid parameters: ")


# an unknown codec name ---------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["compare", "-c", "nope"],
    ["bench", "-c", "nope", "--size", "1k", "-r", "1", "--mode", "eager"],
    ["bench-train", "--quick", "-m", "mlp", "-c", "nope"],
    ["train", "--simulate", "--steps", "1", "--profile", "none", "-c", "nope"],
])
def test_an_unknown_codec_reads_alike_in_every_command(args):
    result = CliRunner().invoke(app, args)
    _one_line(result, f"UnknownCodecError: unknown codec 'nope'; known: {', '.join(compressors.names())}")


def test_several_unknown_codecs_are_named_in_one_line():
    result = CliRunner().invoke(app, ["compare", "-c", "nope", "-c", "fp16", "-c", "nada"])
    _one_line(result, "UnknownCodecError: unknown codecs 'nope', 'nada'; known: identity")


# --help: seeds and placeholders ------------------------------------------------------------------


def _option_help(command: str, option: str) -> str:
    cmd = typer.main.get_command(app).get_command(None, command)
    return next(p.help for p in cmd.params if p.name == option)


@pytest.mark.parametrize("command, limit", [("train", TRAIN_SEED_LIMIT), ("compare", COMPARE_SEED_LIMIT)])
def test_seed_ranges_are_written_one_way_in_help_and_errors(monkeypatch, command, limit):
    found = re.search(r": 0 to (2\*\*\d+ - 1)\.$", _option_help(command, "seed"))
    assert found, _option_help(command, "seed")
    assert found.group(1) == f"2**{limit.bit_length() - 1} - 1"
    assert check_seed(limit - 1, limit) == limit - 1
    if command == "compare":
        import gcbench.commands.compare

        monkeypatch.setattr(gcbench.commands.compare, "load_gradients", lambda *a: pytest.fail("no gradient"))
        args = ["compare", "-c", "identity"]
    else:
        args = ["train", "--simulate", "--steps", "1", "--profile", "none"]
    result = CliRunner().invoke(app, [*args, "--seed", str(limit)])
    _one_line(result, f"usage: --seed must be between 0 and {found.group(1)}, got {limit}")


def test_every_option_value_is_a_lowercase_placeholder(monkeypatch):
    """``<int>``, ``<path>``... in every command's plain help: no ``<int range>``, ``<list[str]>``, ``PAPER``."""
    monkeypatch.setattr(app, "rich_markup_mode", None)
    seen = set()
    for command in ("train", "compare", "bench", "bench-train", "results", "reproduce", "gpu-check", "data"):
        result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        for line in result.output.splitlines():
            option = re.match(r"^  (?:-\w, )?--[\w-]+(?: / --[\w-]+)? (\S+)(?:  |$)", line)
            if option:
                seen.add(option.group(1))
    assert {"<int>", "<float>", "<str>", "<path>"} <= seen
    assert [s for s in seen if not re.fullmatch(r"<[a-z]+>", s)] == []


@pytest.mark.parametrize("command", [[], ["train"], ["compare"], ["bench"], ["bench-train"], ["results"], ["reproduce"],
                                     ["gpu-check"], ["data"], ["codecs"]])
def test_a_flag_shows_no_value(command):
    """A flag (``--simulate / --no-simulate``, ``--help``, ``--version``) takes no value, so the rich
    help shows none beside it; typer's own ``<bool>`` read like ``--simulate true``, which is refused."""
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    flags = [line for line in result.output.splitlines() if re.search(r"--help\b|--no-[\w-]+|--version\b", line)]
    assert any("--help" in line for line in flags)
    assert [line for line in flags if "<" in line.split("  ")[0] or "<bool>" in line] == []


# torch's CUDA probe on a machine without CUDA ----------------------------------------------------


def test_no_cuda_runtime_warning_without_a_cuda_device(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch warns only where no CUDA device is available")
    env = {**os.environ, "CUDA_HOME": str(tmp_path)}  # a CUDA toolkit "found": torch's import then warns

    def stderr(module: str) -> str:
        return subprocess.run([sys.executable, "-c", f"import {module}; import torch.utils.cpp_extension"], env=env,
                              capture_output=True, text=True, timeout=180).stderr

    assert NO_CUDA_RUNTIME in stderr("torch")  # the probe warns here, so the checks below can fail
    for module in ("gcbench.bench.train", "gcbench.bench.harness"):  # what bench-train's ranks and bench import
        assert NO_CUDA_RUNTIME not in stderr(module), module


def test_only_that_warning_is_dropped():
    import torch

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord(CPP_EXTENSION_LOGGER, logging.WARNING, __file__, 1, msg, ("/x",), None)

    keep = NoCudaRuntimeFilter()
    assert keep.filter(record("Error checking compiler version for %s"))
    assert keep.filter(record(NO_CUDA_RUNTIME + ", using CUDA_HOME='%s'")) is torch.cuda.is_available()


# bench-train --quick -----------------------------------------------------------------------------


RANKS = [{"mlp|ddp (no hook)": [1.0], "mlp|gcbench identity": [3.0], "mlp|gcbench fp16": [1.0],
          "mlp|torch fp16_compress_hook": [2.0]}]


def _report(quick: bool) -> dict:
    plan = {"models": ["mlp"], "batch": {"mlp": 4}, "quick": quick}
    return {"ranks": 1, "torch": "x", "models": ["mlp"], "batch_per_rank": {"mlp": 4}, "steps": 1, "warmup": 2,
            "rounds": 1, "cap_mb": 25.0, "psgd_cap_mb": 1024.0, "quick": quick, "loadavg_after": None,
            **bench_train.summarize(RANKS, plan)}


def test_a_quick_run_shows_its_ratios_without_judging_the_targets():
    full, quick = _report(False), _report(True)
    assert full["targets_judged"] is True and {t["met"] for t in full["targets"]} == {True, False}
    assert quick["targets_judged"] is False and [t["met"] for t in quick["targets"]] == [None, None]
    assert [t["ratio"] for t in quick["targets"]] == [t["ratio"] for t in full["targets"]] == [3.0, 0.5]


@pytest.mark.parametrize("quick", [False, True])
def test_the_output_says_a_quick_run_is_not_judged(monkeypatch, tmp_path, quick):
    report = _report(quick)
    monkeypatch.setattr(bench_train, "run_bench_train", lambda **kw: report)
    out = io.StringIO()
    bench_train.bench_train_main(console=Console(file=out, width=200), json_path=tmp_path / "r.json",
                                 markdown_path=tmp_path / "r.md")
    text, md = out.getvalue(), (tmp_path / "r.md").read_text()
    saved = json.loads((tmp_path / "r.json").read_text())
    verdicts = re.findall(r"\(target <= [\d.]+\) (.+)$", text, flags=re.M)
    md_verdicts = [line.rsplit("|", 2)[1].strip() for line in md.splitlines() if line.startswith("| mlp |")]
    if quick:
        assert verdicts == md_verdicts == [bench_train.NOT_JUDGED] * 2
        assert saved["targets_judged"] is False and [t["met"] for t in saved["targets"]] == [None, None]
    else:
        assert verdicts == ["NOT met", "met"] and md_verdicts == ["no", "yes"]
        assert saved["targets_judged"] is True


# gcbench codecs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [80, 119, 120, 200])
def test_codecs_ends_no_line_in_spaces(width):
    out = io.StringIO()
    codecs_main(Console(file=out, width=width))
    lines = out.getvalue().splitlines()
    assert lines[0].strip() == "gcbench codec registry" and lines[-1].startswith(f"{len(compressors.names())} registered")
    assert [line for line in lines if line != line.rstrip()] == []
    if width >= 120:  # the table keeps its layout: every box line as wide as the border
        boxed = [line for line in lines[1:-1] if line[:1] in "┏┃┡│├└"]
        assert len({len(line) for line in boxed}) == 1
