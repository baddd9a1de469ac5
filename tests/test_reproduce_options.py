"""`gcbench reproduce`'s options: values a run cannot honour are refused in one line, before any work."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.commands.options import output_dir_problem
from gcbench.commands.reproduce import EXIT_USAGE, MAX_EPOCHS, MAX_WORKERS, reproduce_main


@pytest.mark.parametrize("kwargs, msg", [
    ({"workers": 10**20}, f"--workers must be between 1 and {MAX_WORKERS}"),
    ({"workers": 0}, "--workers must be between 1"),
    ({"table": ","}, "names no table"),
    ({"table": " , "}, "names no table"),
    ({"dataset": ""}, "--dataset is empty"),
    ({"dataset": "  "}, "--dataset is empty"),
    ({"paper": "3lc", "compute_seconds_per_step": float("inf")}, "positive finite number of seconds"),
    ({"paper": "3lc", "compute_seconds_per_step": float("nan")}, "positive finite number of seconds"),
    ({"compute_seconds_per_step": 1.0}, "--compute-seconds-per-step applies to 3lc only, not sketchml"),
    ({"paper": "lgreco", "compute_seconds_per_step": 1.0}, "applies to 3lc only, not lgreco"),
    ({"paper": "sketched-sgd", "compute_seconds_per_step": 1.0}, "applies to 3lc only, not sketched-sgd"),
    ({"epochs": 10**20}, f"--epochs must be between 1 and {MAX_EPOCHS}"),
    ({"epochs": MAX_EPOCHS + 1}, f"--epochs must be between 1 and {MAX_EPOCHS}"),
    ({"epochs": 0}, "--epochs must be between 1"),
])
def test_values_a_run_cannot_honour_are_usage_errors(tmp_path, capsys, kwargs, msg):
    paper = kwargs.pop("paper", "sketchml")
    assert reproduce_main(paper, out_dir=tmp_path / "out", progress=False, track=False, **kwargs) == EXIT_USAGE
    assert msg in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was written


def test_an_output_folder_under_a_file_is_refused(tmp_path):
    (tmp_path / "a-file").write_text("x")
    assert output_dir_problem(tmp_path / "a-file", "--out") == f"--out {tmp_path / 'a-file'} is a file, not a folder"
    assert "is a file" in output_dir_problem(tmp_path / "a-file" / "sub" / "deeper", "--out")
    assert output_dir_problem(tmp_path / "new" / "deeper", "--out") is None and output_dir_problem(None, "--out") is None
    res = CliRunner().invoke(app, ["reproduce", "sketchml", "--out", str(tmp_path / "a-file" / "sub"), "--no-wandb"])
    assert res.exit_code == 2 and "is a file, not a folder" in res.output and "Traceback" not in res.output


def test_an_output_folder_that_cannot_be_examined_is_one_line(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")  # a loop: stat raises ELOOP, not "no such file"
    out = tmp_path / "a" / "x"
    assert output_dir_problem(out, "--out") == f"--out {out}: {out} cannot be used (Too many levels of symbolic links)"
    res = CliRunner().invoke(app, ["reproduce", "sketchml", "--out", str(out), "--no-wandb"])
    assert res.exit_code == 2 and "cannot be used" in res.output and "Traceback" not in res.output


def test_the_cli_refuses_an_option_the_paper_does_not_read():
    res = CliRunner().invoke(app, ["reproduce", "sketchml", "--compute-seconds-per-step", "1", "--no-wandb"])
    assert res.exit_code == EXIT_USAGE and "applies to 3lc only" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(app, ["reproduce", "sketchml", "--epochs", str(10**20), "--no-wandb"])
    assert res.exit_code == EXIT_USAGE and "--epochs must be between" in res.output
