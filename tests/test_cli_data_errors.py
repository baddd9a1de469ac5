"""The LIBSVM cases of bad input through the real CLI: one message line, exit 2, no traceback."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gcbench.cli import app


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "no instances"),
        ("+1 1:1\n-1 2147483648:1\n", ":2: feature index 2147483648 is >= 2^31"),
    ],
)
def test_reproduce_with_a_bad_libsvm_file_is_one_line_and_exit_2(tmp_path, text, message):
    data = tmp_path / "bad.svm"
    data.write_text(text)
    result = CliRunner().invoke(
        app, ["reproduce", "sketchml", "--dataset", f"libsvm:{data}", "--out", str(tmp_path / "out"), "--no-wandb"]
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if message in line]
    assert len(lines) == 1 and lines[0].startswith("gcbench reproduce: ")
    assert "Traceback" not in result.output
