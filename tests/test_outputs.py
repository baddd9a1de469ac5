"""Result files are written whole or not at all (gcbench.outputs): a failed write keeps the old file."""

from __future__ import annotations

import errno
import os
import resource
import stat
import subprocess
import sys

import pytest

from gcbench.outputs import OutputWriteError, replacing, write_file

OLD = '{"earlier": "' + "x" * 20000 + '"}\n'


def _leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_write_replaces_the_whole_file(tmp_path):
    target = tmp_path / "r.json"
    target.write_text(OLD)
    write_file(target, "new\n")
    assert target.read_text() == "new\n" and _leftovers(tmp_path) == []


def test_a_failed_write_keeps_the_old_file_and_says_so(tmp_path):
    target = tmp_path / "r.json"
    target.write_text(OLD)
    with pytest.raises(OutputWriteError) as info:
        with replacing(target) as tmp:
            tmp.write_text("half")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert info.value.kept and info.value.errno == errno.ENOSPC
    assert "r.json" in str(info.value) and "unchanged" in str(info.value)
    assert target.read_text() == OLD and _leftovers(tmp_path) == []


def test_an_error_that_is_not_a_write_error_passes_through_and_keeps_the_old_file(tmp_path):
    target = tmp_path / "r.md"
    target.write_text(OLD)
    with pytest.raises(KeyError):
        with replacing(target):
            raise KeyError("x")
    assert target.read_text() == OLD and _leftovers(tmp_path) == []


def test_the_new_file_keeps_the_suffix_while_written_and_the_old_permission_bits(tmp_path):
    target = tmp_path / "plot.png"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    with replacing(target) as tmp:
        assert tmp.suffix == ".png" and tmp.parent == tmp_path and tmp != target
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new" and stat.S_IMODE(os.stat(target).st_mode) == 0o640


def test_a_link_is_followed_and_stays_a_link(tmp_path):
    (tmp_path / "real.json").write_text(OLD)
    (tmp_path / "link.json").symlink_to("real.json")
    write_file(tmp_path / "link.json", "new")
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "real.json").read_text() == "new"


def test_a_device_is_written_in_place():
    write_file(os.devnull, "anything")  # cannot be replaced; written as it is
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_a_file_whose_folder_takes_no_new_file_is_written_in_place_and_says_so_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    target.write_text(OLD)
    real_open = os.open

    def no_new_file(path, flags, *a):  # the folder refuses new files; the target itself stays writable
        if flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, *a)

    monkeypatch.setattr(os, "open", no_new_file)
    write_file(target, "new")
    assert target.read_text() == "new"
    with pytest.raises(OutputWriteError) as info:
        with replacing(target) as out:
            assert out == target
            raise OSError(errno.ENOSPC, "No space left on device")
    assert not info.value.kept and "may be incomplete" in str(info.value)


def test_a_missing_folder_is_a_typed_error(tmp_path):
    with pytest.raises(OutputWriteError) as info:
        write_file(tmp_path / "no" / "r.json", "x")
    assert info.value.kept


def _limit_file_size():  # 2 KiB: every write past it fails with EFBIG (Python ignores SIGXFSZ)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))


@pytest.mark.parametrize("argv", [
    ["compare", "-c", "topk", "-r", "1", "--steps", "0", "--json"],
    ["bench", "-c", "topk", "--size", "1K", "-r", "1", "--warmup", "0", "--no-peers", "--no-stages", "--mode", "eager", "--json"],
])
def test_a_command_whose_result_does_not_fit_keeps_the_old_file(tmp_path, argv):
    target = tmp_path / "r.json"
    target.write_text(OLD)  # written before the limit: 20 KB, past what the command may write
    done = subprocess.run([sys.executable, "-m", "gcbench.cli", *argv, str(target)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, preexec_fn=_limit_file_size)
    assert done.returncode == 1, done.stderr
    assert "OutputWriteError" in done.stderr and "unchanged" in done.stderr and "Traceback" not in done.stderr
    assert target.read_text() == OLD and _leftovers(tmp_path) == []
