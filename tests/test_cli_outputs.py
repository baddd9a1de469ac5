"""What a new user meets on the command line: outputs that cannot be written are refused in one line before
any work (never a traceback after it), option errors are labelled alike across commands, ``--cache-dir``
holds every data set ``gcbench data`` prepares, and docs/cli.md shows what ``--help`` shows."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.commands.options import folder_write_problem, output_dir_problem, output_file_problem

ROOT = Path(__file__).resolve().parents[1]
#: A folder nothing can be created in, even by root (permission bits do not stop root; /proc does).
NO_WRITE = Path("/proc")
needs_proc = pytest.mark.skipif(not (NO_WRITE / "self").exists(), reason="needs Linux's /proc")


def _one_line_usage(result, needle: str) -> None:
    assert result.exit_code == 2, result.output
    assert needle in result.output and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


@needs_proc
@pytest.mark.parametrize("args", [
    ["compare", "-c", "fp16", "--json", "OUT"],
    ["compare", "-c", "fp16", "--markdown", "OUT"],
    ["bench", "-c", "fp16", "--size", "1k", "-r", "1", "--mode", "eager", "--json", "OUT"],
    ["bench", "-c", "fp16", "--size", "1k", "-r", "1", "--mode", "eager", "--markdown", "OUT"],
    ["train", "--simulate", "--steps", "1", "--profile", "none", "--json", "OUT"],
    ["bench-train", "--quick", "-m", "mlp", "-c", "topk", "--json", "OUT"],
    ["bench-train", "--quick", "-m", "mlp", "-c", "topk", "--plot", "OUT"],
    ["results", "--no-readme", "--json", "OUT"],
])
def test_an_output_file_that_cannot_be_created_is_refused_before_any_work(args):
    out = str(NO_WRITE / "gcbench-out.json")
    result = CliRunner().invoke(app, [out if a == "OUT" else a for a in args])
    _one_line_usage(result, f"{out} cannot be written (No such file or directory)")
    assert result.output.startswith("usage: ")


@needs_proc
def test_an_output_folder_that_cannot_be_created_is_refused_in_one_line(tmp_path):
    out = NO_WRITE / "gcbench-out" / "deeper"
    assert output_dir_problem(out, "--out") == f"--out {out}: cannot write in {NO_WRITE} (No such file or directory)"
    _one_line_usage(CliRunner().invoke(app, ["gpu-check", "--out", str(out)]), "cannot write in /proc")
    _one_line_usage(CliRunner().invoke(app, ["reproduce", "3lc", "--scale", "micro", "--no-wandb", "--out", str(out)]),
                    "cannot write in /proc")
    _one_line_usage(CliRunner().invoke(app, ["data", "dict-de-en", "--cache-dir", str(out)]), "cannot write in /proc")


@needs_proc
def test_a_checkpoint_folder_that_cannot_be_created_is_refused_before_any_rank_starts():
    result = CliRunner().invoke(app, ["train", "--steps", "2", "--profile", "none", "--checkpoint-every", "1",
                                      "--checkpoint-dir", str(NO_WRITE / "gcbench-ck")])
    _one_line_usage(result, "CheckpointError: checkpoint folder /proc/gcbench-ck cannot be created in /proc")


def test_the_write_probe_leaves_nothing_behind_and_existing_files_as_they_were(tmp_path):
    new = tmp_path / "new.json"
    assert output_file_problem(new, "--json") is None and not new.exists()
    kept = tmp_path / "kept.json"
    kept.write_text("keep me")
    before = os.stat(kept).st_mtime_ns
    assert output_file_problem(kept, "--json") is None
    assert kept.read_text() == "keep me" and os.stat(kept).st_mtime_ns == before
    assert output_dir_problem(tmp_path / "a" / "b", "--out") is None and folder_write_problem(tmp_path) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.json"]  # no probe file or folder is left
    assert output_file_problem(Path(os.devnull), "--json") is None  # a device is written as it is


def test_option_errors_read_alike_in_every_command():
    """An option out of range is ``usage: ...`` in train as in compare and bench; a codec's own error keeps
    its type's name."""
    result = CliRunner().invoke(app, ["train", "--simulate", "--steps", "1", "--lr", "-1"])
    _one_line_usage(result, "usage: --lr must be a positive finite number")
    result = CliRunner().invoke(app, ["compare", "-r", "0"])
    _one_line_usage(result, "usage: --repeat must be between 1 and")
    result = CliRunner().invoke(app, ["train", "--simulate", "--steps", "1", "-c", "nope"])
    _one_line_usage(result, "UnknownCodecError: unknown codec 'nope'")


def test_data_cache_dir_holds_the_dictionary_pairs_too(tmp_path):
    from gcbench.data.errors import DatasetUnavailableError
    from gcbench.data.text import dictd_paths

    try:
        dictd_paths(None)
    except DatasetUnavailableError:
        pytest.skip("Debian's dict-de-en is not installed")
    result = CliRunner().invoke(app, ["data", "dict-de-en", "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    assert f"(Arrow: {tmp_path / 'cache' / 'text'}" in result.output
    assert any((tmp_path / "cache" / "text").glob("dict-de-en-*/gcbench.json"))


def test_cli_page_lists_the_scale_presets_and_marks_required_options():
    """reproduce's --scale help says the presets are "listed below": docs/cli.md must list them too."""
    from gcbench.reproductions import scale_catalogue

    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = re.search(r"^## gcbench reproduce\n(.*?)(?=^## )", page, re.M | re.S).group(1)
    missing = [f"{paper} {scale}" for paper, scale, _ in scale_catalogue() if f"- {paper} {scale}: " not in section]
    assert not missing, f"docs/cli.md's reproduce section lacks the presets {missing}"
    gpu = re.search(r"^## gcbench gpu-check\n(.*?)(?=^## )", page, re.M | re.S).group(1)
    assert "| `--out` | required |" in gpu


def test_train_says_its_step_estimate_is_the_slowest_workers():
    """The estimate sums each step's slowest worker, so it exceeds the per-worker means printed above it;
    the line says so."""
    result = CliRunner().invoke(app, ["train", "--simulate", "--steps", "2", "-c", "fp16"])
    assert result.exit_code == 0, result.output
    assert "step estimate (each step's slowest worker: measured compute+codec + modelled comm" in result.output
