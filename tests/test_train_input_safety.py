"""``gcbench train`` on hostile input: checkpoint folders and files, and options out of range, are refused
with one typed line before any rank starts, and nothing already on disk is changed."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.commands.train import TrainConfig, train_main
from gcbench.commands.train_checkpoints import CheckpointError
from gcbench.envs.network import list_profiles
from gcbench.workloads.models import build_model

QUIET = dict(print_report=False, timeout_s=30.0)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _blob(step: int = 1, **config) -> dict:
    """A well-formed rank checkpoint of an mlp run (the training state itself is not exercised)."""
    return {"step": step, "config": asdict(TrainConfig(**config)), "model": build_model("mlp").state_dict(),
            "optimizer": {}, "hook": {}, "traffic": {}, "losses": [0.0] * step, "scaler": None}


def _checkpoint_dir(root: Path, rank_files: dict[int, bytes] | None = None, pointer: bytes = b"step00000001") -> Path:
    """``root`` with a ``latest`` pointer and a step folder holding ``rank_files`` (default: two good ones)."""
    folder = root / "step00000001"
    folder.mkdir(parents=True)
    for rank in range(2):
        torch.save(_blob(), folder / f"rank{rank}.pt")
    for rank, data in (rank_files or {}).items():
        (folder / f"rank{rank}.pt").write_bytes(data)
    (root / "latest").write_bytes(pointer)
    return folder


class _RunsCode:
    """Unpickling this creates a folder: a stand-in for any code a crafted file could run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


# --- checkpoint folders ---------------------------------------------------------------------------------------


@pytest.mark.distributed
def test_a_folder_with_another_runs_checkpoints_needs_resume_and_is_left_as_it_was(tmp_path):
    ck = tmp_path / "ck"
    train_main("identity", 2, 2, None, checkpoint_dir=str(ck), checkpoint_every=1, **QUIET)
    before = _snapshot(ck)
    assert (ck / "latest").read_text() == "step00000002"
    with pytest.raises(CheckpointError, match="holds the checkpoints of a run; pass --resume"):
        train_main("identity", 2, 3, None, checkpoint_dir=str(ck), checkpoint_every=1, seed=1, lr=0.1, **QUIET)
    assert _snapshot(ck) == before
    # the same run continued with resume keeps writing into its folder
    resumed = train_main("identity", 2, 3, None, checkpoint_dir=str(ck), checkpoint_every=1, resume=True, **QUIET)
    assert resumed["resumed_from"] == 2 and (ck / "latest").read_text() == "step00000003"


def test_the_cli_refuses_a_folder_with_checkpoints_in_one_line(tmp_path):
    ck = tmp_path / "ck"
    _checkpoint_dir(ck)
    before = _snapshot(ck)
    result = CliRunner().invoke(app, ["train", "--steps", "3", "--profile", "none", "--checkpoint-dir", str(ck),
                                      "--checkpoint-every", "1", "--seed", "1"])
    assert result.exit_code == 2, result.output
    assert "pass --resume to continue it or choose another folder" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert _snapshot(ck) == before


def test_a_checkpoint_folder_that_is_a_file_is_refused_before_training(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("keep me")
    with pytest.raises(CheckpointError, match="is a file, not a folder"):
        train_main("identity", 2, 2, None, checkpoint_dir=str(f), checkpoint_every=1, **QUIET)
    with pytest.raises(CheckpointError, match="cannot be created"):
        train_main("identity", 2, 2, None, checkpoint_dir=str(f / "sub"), checkpoint_every=1, **QUIET)
    assert f.read_text() == "keep me"
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")  # a loop: the folder cannot be examined
    with pytest.raises(CheckpointError, match="cannot be used .Too many levels of symbolic links"):
        train_main("identity", 2, 2, None, checkpoint_dir=str(tmp_path / "a" / "ck"), checkpoint_every=1, **QUIET)


# --- reading checkpoints back ---------------------------------------------------------------------------------


def test_a_crafted_checkpoint_runs_no_code(tmp_path):
    ck, marker = tmp_path / "ck", tmp_path / "code-ran"
    bad = tmp_path / "bad.pt"
    torch.save({**_blob(), "model": _RunsCode(marker)}, bad)
    _checkpoint_dir(ck, {0: bad.read_bytes()})
    with pytest.raises(CheckpointError, match=r"rank0\.pt cannot be read: it holds objects other than tensors"):
        train_main("identity", 2, 3, None, checkpoint_dir=str(ck), resume=True, **QUIET)
    assert not marker.exists()


@pytest.mark.parametrize("pointer", [b"../../etc", b"/etc", b"", b"\xff\xfe\x00binary", b"step" + b"1" * 200, b"step00000009"])
def test_a_latest_pointer_outside_the_folder_or_unreadable_is_refused(tmp_path, pointer):
    ck = tmp_path / "ck"
    _checkpoint_dir(ck, pointer=pointer)
    with pytest.raises(CheckpointError) as err:
        train_main("identity", 2, 3, None, checkpoint_dir=str(ck), resume=True, **QUIET)
    assert str(ck / "latest") in str(err.value) and "\n" not in str(err.value)


def _truncated(tmp_path: Path) -> bytes:
    path = tmp_path / "good.pt"
    torch.save(_blob(), path)
    return path.read_bytes()[: path.stat().st_size // 2]


@pytest.mark.parametrize("content, why", [
    (b"", "truncated or damaged"),
    (b"\x00garbage" * 20, "cannot be read"),
    (None, "truncated or damaged"),  # the first half of a good file
])
def test_a_damaged_rank_file_is_one_typed_error_before_any_rank_starts(tmp_path, content, why):
    ck = tmp_path / "ck"
    _checkpoint_dir(ck, {1: _truncated(tmp_path) if content is None else content})
    # a WorkerFailedError here would mean the ranks found it
    with pytest.raises(CheckpointError, match=why) as err:
        train_main("identity", 2, 3, None, checkpoint_dir=str(ck), resume=True, **QUIET)
    assert str(ck / "step00000001" / "rank1.pt") in str(err.value) and "\n" not in str(err.value)


def test_a_missing_rank_file_or_a_foreign_file_is_refused(tmp_path):
    ck = tmp_path / "ck"
    folder = _checkpoint_dir(ck)
    torch.save({"weights": torch.zeros(3)}, folder / "rank0.pt")
    with pytest.raises(CheckpointError, match="not a gcbench train checkpoint"):
        train_main("identity", 2, 3, None, checkpoint_dir=str(ck), resume=True, **QUIET)
    (folder / "rank0.pt").unlink()
    with pytest.raises(CheckpointError, match=r"rank0\.pt is missing"):
        train_main("identity", 2, 3, None, checkpoint_dir=str(ck), resume=True, **QUIET)


def test_a_checkpoint_of_other_settings_is_refused_before_any_rank_starts(tmp_path):
    ck = tmp_path / "ck"
    _checkpoint_dir(ck, {0: b""})
    torch.save(_blob(seed=5), ck / "step00000001" / "rank0.pt")
    with pytest.raises(CheckpointError, match=r"rank0\.pt was written by a run with other settings: \{'seed': \(5, 0\)\}"):
        train_main("identity", 2, 3, None, checkpoint_dir=str(ck), resume=True, **QUIET)


def test_the_launching_process_maps_the_rank_files_instead_of_reading_them(tmp_path, monkeypatch):
    """The check before the ranks start reads the weights alone: the optimizer's and the hook's tensors
    (as large again as the model, or more) are mapped, not read, so a large model is not read twice."""
    from gcbench.commands import train_checkpoints
    from gcbench.commands.train import CHECKPOINT_FIELDS

    ck = tmp_path / "ck"
    _checkpoint_dir(ck)
    real, seen = torch.load, []
    monkeypatch.setattr(torch, "load", lambda *a, **k: seen.append(k.get("mmap")) or real(*a, **k))
    cfg = TrainConfig(nproc=2, checkpoint_dir=str(ck), resume=True)
    train_checkpoints.check_checkpoint_dir(cfg, CHECKPOINT_FIELDS, build_model("mlp"))
    assert seen == [True, True]


# --- options ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (["--model", "bogus"], "unknown model 'bogus'; known: mlp, cnn"),
    (["--codec", "topk", "--adaptive", "bogus"], "adaptive must be one of"),
    (["--bucket-cap-mb", "nan"], "--bucket-cap-mb must be a number of MB in (0, 1e+06]"),
    (["--bucket-cap-mb", "-1"], "--bucket-cap-mb must be a number of MB"),
    (["--bucket-cap-mb", "0"], "--bucket-cap-mb must be a number of MB"),
    (["--seed", str(10**20)], "--seed must be between 0 and 2**32 - 1"),
    (["--seed", str(2**62)], "--seed must be between 0 and 2**32 - 1"),
    (["--lr", "nan"], "--lr must be a positive finite number"),
    (["--lr", "inf"], "--lr must be a positive finite number"),
    (["--lr", "0"], "--lr must be a positive finite number"),
    (["--timeout", "1e18"], "--timeout must be a positive number of seconds up to 86400"),
])
@pytest.mark.parametrize("simulate", [False, True])
def test_options_out_of_range_are_one_line_usage_errors_before_any_rank_starts(monkeypatch, args, message, simulate):
    import gcbench.envs.launch

    def no_launch(*a, **k):
        raise AssertionError("ranks were launched")

    monkeypatch.setattr(gcbench.envs.launch, "launch", no_launch)
    result = CliRunner().invoke(app, ["train", "--steps", "2", "--profile", "none", *args] + (["--simulate"] if simulate else []))
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_unknown_backend_is_named_with_the_valid_ones():
    result = CliRunner().invoke(app, ["train", "--steps", "1", "--profile", "none", "--backend", "bogus"])
    assert result.exit_code == 2 and "unknown backend 'bogus'; valid: gloo, nccl" in result.output


def test_real_ranks_are_bounded_by_the_cpu_count(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    result = CliRunner().invoke(app, ["train", "--steps", "1", "--profile", "none", "--nproc", "5", "--batch-size", "1"])
    assert result.exit_code == 2 and "--nproc must be at most 4 for real ranks" in result.output
    # the simulated cluster is one process
    assert CliRunner().invoke(app, ["train", "--steps", "1", "--profile", "none", "--nproc", "5", "--batch-size", "1",
                                    "--simulate"]).exit_code == 0


def test_help_shows_fault_injection_and_the_bundled_profiles():
    import typer

    options = {p.name: p for p in typer.main.get_command(app).commands["train"].params}
    assert not options["fault"].hidden and "kill|hang|raise:RANK:STEP" in options["fault"].help
    for name in list_profiles():
        assert name in options["profile"].help


@pytest.mark.parametrize("argv, msg", [
    (["--params", "{bad"], "--params is not JSON"),
    (["--params", "[1]"], "--params must be a JSON object"),
    (["--model", "bogus", "--simulate", "--steps", "1"], "unknown model 'bogus'"),
    (["--codec", "qsgd", "--params", '{"levels": -1}', "--simulate", "--steps", "1"], "levels"),
])
def test_the_module_entry_point_reports_usage_errors_in_one_line(argv, msg, capsys):
    from gcbench.commands.train import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and msg in err and "Traceback" not in err


def _rank_that_must_not_start(ctx):  # pragma: no cover - the launch refuses before starting it
    raise AssertionError("a rank started")


@pytest.mark.parametrize("timeout", [0.0, -1.0, float("nan"), float("inf"), 86400.5])
def test_launch_refuses_a_timeout_no_collective_should_wait_before_starting_a_rank(timeout):
    from gcbench.envs.launch import MAX_TIMEOUT_S, launch

    assert MAX_TIMEOUT_S == 86400.0
    with pytest.raises(ValueError, match="timeout_s must be a positive number of seconds up to 86400"):
        launch(_rank_that_must_not_start, 2, timeout_s=timeout)

