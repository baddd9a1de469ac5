"""Errors reach the user as one readable message: foreign text (gloo's, a rank's) is never read as markup."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gcbench.cli import app

REPO = Path(__file__).resolve().parents[1]
GLOO_TEXT = "rank 0 raised RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Connection closed by peer [127.0.0.1]:4242"


def test_worker_failure_with_bracketed_gloo_text_is_printed_verbatim(monkeypatch):
    import gcbench.commands.train
    from gcbench.envs.errors import WorkerFailedError

    def fail(*args, **kwargs):
        raise WorkerFailedError(f"rank 1 died (killed by SIGKILL); then {GLOO_TEXT}", ranks=(1,), reason="died")

    monkeypatch.setattr(gcbench.commands.train, "train_main", fail)
    result = CliRunner().invoke(app, ["train", "--codec", "fp16", "--nproc", "2", "--steps", "2"])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537]" in result.output
    assert "rank 1 died" in result.output and "MarkupError" not in result.output


def test_usage_error_with_bracketed_text_is_printed_verbatim(monkeypatch):
    import gcbench.commands.train

    def fail(*args, **kwargs):
        raise ValueError("checkpoint [/tmp/ckpt/step-000010.pt] is truncated")

    monkeypatch.setattr(gcbench.commands.train, "train_main", fail)
    result = CliRunner().invoke(app, ["train", "--codec", "fp16", "--resume"])
    assert result.exit_code == 2, result.output
    assert "[/tmp/ckpt/step-000010.pt]" in result.output


@pytest.mark.slow
@pytest.mark.distributed
def test_sigkilled_rank_is_named_on_stderr_without_a_traceback():
    """The real command with one rank SIGKILLed at step 2: exit 1, the rank named, no traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "gcbench.cli", "train", "--codec", "powersgd", "--nproc", "2", "--steps", "40",
         "--model", "cnn", "--timeout", "20", "--profile", "none", "--fault", "kill:1:2"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )
    assert proc.returncode == 1, proc.stderr
    assert "rank 1 died" in proc.stderr and "SIGKILL" in proc.stderr
    assert "Traceback" not in proc.stderr and "MarkupError" not in proc.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workers", "0"], "--workers must be between 1 and"),
        (["--epochs", "-1"], "--epochs must be between 1 and"),
        (["--lr", "0"], "--lr must be a positive finite number"),
        (["--lr", "nan"], "--lr must be a positive finite number"),
    ],
)
def test_reproduce_refuses_overrides_it_cannot_honour(tmp_path, args, message):
    result = CliRunner().invoke(app, ["reproduce", "sketchml", "--out", str(tmp_path), "--no-wandb", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "sketchml").exists()  # refused before anything ran


def test_reproduce_out_that_is_a_file_is_a_usage_error(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x")
    result = CliRunner().invoke(app, ["reproduce", "sketchml", "--out", str(f), "--no-wandb"])
    assert result.exit_code == 2 and "is a file, not a folder" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--simulate", "--timeout", "0"], "--timeout must be a positive number"),
        (["train", "--simulate", "--timeout", "-1"], "--timeout must be a positive number"),
        (["train", "--simulate", "--json", "DIR"], "is a folder; give a file name"),
        (["train", "--simulate", "--json", "DIR/missing/out.json"], "does not exist"),
        (["bench", "--codec", "fp16", "--size", "1k", "--json", "DIR"], "is a folder; give a file name"),
        (["compare", "--codec", "fp16", "--json", "DIR"], "is a folder; give a file name"),
        (["compare", "--codec", "fp16", "--markdown", "DIR/missing/out.md"], "does not exist"),
        (["bench", "--codec", "fp16", "--size", "1k", "--markdown", "DIR/missing/out.md"], "does not exist"),
    ],
)
def test_unwritable_outputs_and_bad_timeouts_are_one_line_usage_errors(tmp_path, args, message):
    args = [a.replace("DIR", str(tmp_path)) for a in args]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--codec", "nope"], "UnknownCodecError: unknown codec 'nope'"),
        (["--codec", "topk", "--param", "ratio=7"], "InvalidParameterError"),
    ],
)
def test_train_validates_the_codec_before_spawning_ranks(args, message):
    proc = subprocess.run([sys.executable, "-m", "gcbench.cli", "train", "--nproc", "2", "--steps", "1", *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_reproduce_rejects_an_unknown_or_missing_device(capsys):
    from gcbench.workloads.devices import resolve_device
    from gcbench.commands.reproduce import EXIT_USAGE, reproduce_main

    assert resolve_device("cpu") == "cpu"
    assert resolve_device(None) in ("cpu", "cuda")
    assert reproduce_main("3lc", scale="smoke", device="tpu") == EXIT_USAGE
    assert "--device must be cpu, cuda or cuda:N" in capsys.readouterr().err
