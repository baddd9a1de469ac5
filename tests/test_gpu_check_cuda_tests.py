"""``gcbench gpu-check``'s CUDA tests part: the test files it runs, the counts it reads from a run (JUnit XML,
the verbose log, each test's seconds), and a run its time box stopped, resumed with the tests it had not ended.

Like ``test_gpu_check.py``, everything here runs on the CPU: the part's pytest runs are faked or run on toy
test files.
"""

from __future__ import annotations

import json
import os

import pytest
from test_gpu_check import fake_cuda_machine

from gcbench.commands.gpu_check import parts


def test_cuda_test_files_and_junit_counts(tmp_path):
    from pathlib import Path

    files = parts.cuda_test_files(Path(__file__).resolve().parents[1])
    assert any(f.name == "test_train_device.py" for f in files) and all(f.name.startswith("test_") for f in files)
    xml = tmp_path / "j.xml"
    xml.write_text('<testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
                   '<testcase classname="t" name="a"/><testcase classname="t" name="b"><failure message="boom&#10;more"/></testcase>'
                   '<testcase classname="t" name="c"><skipped/></testcase></testsuite></testsuites>')
    got = parts.junit_counts(xml)
    assert got["passed"] == 1 and got["failures"] == 1 and got["failed"] == ["t::b: boom"]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_test_times_plugin_writes_one_line_per_test_as_it_ends(tmp_path, workers):
    """Each test's outcome and seconds, setup to teardown, once per test also under pytest-xdist (its
    workers' reports reach the controller, which alone writes)."""
    import subprocess
    import sys

    from gcbench.commands.gpu_check import test_times

    if workers:
        pytest.importorskip("xdist")
    (tmp_path / "test_t.py").write_text(
        "import time, pytest\n"
        "@pytest.fixture\ndef slow():\n    time.sleep(0.3)\n    yield\n    time.sleep(0.3)\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('setup')\n"
        "def test_ok(slow): pass\n"
        "def test_bad(): assert False\n"
        "def test_skip(): pytest.skip('no')\n"
        "def test_err(broken): pass\n")
    times = tmp_path / "times.jsonl"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", test_times.__name__, *workers,
                    "test_t.py"], cwd=tmp_path, env={**os.environ, test_times.ENV: str(times)}, capture_output=True,
                   timeout=120, check=False)
    lines = [json.loads(x) for x in times.read_text().splitlines()]
    by = {e["test"].split("::")[1]: e for e in lines}
    assert len(lines) == 4 and {k: e["outcome"] for k, e in by.items()} == {
        "test_ok": "passed", "test_bad": "failed", "test_skip": "skipped", "test_err": "error"}
    assert by["test_ok"]["seconds"] >= 0.55  # the fixture's setup and teardown count
    got = test_times.read_times(times, top=2)
    assert got["timed"] == 4 and [e["test"] for e in got["slowest"]][0].endswith("test_ok") and len(got["slowest"]) == 2
    assert "seconds" not in got  # merged into the part's result, which has its own wall seconds
    times.write_text(times.read_text() + '{"test": "cut')  # a line the time box cut
    assert test_times.read_times(times)["timed"] == 4 and test_times.read_times(tmp_path / "none") == {}


def test_verbose_counts_read_a_stopped_run(tmp_path):
    log = tmp_path / "log"
    log.write_text("tests/a.py::t1 PASSED  [ 10%]\ntests/a.py::t2[cuda] FAILED  [ 20%]\ntests/b.py::t3 SKIPPED (x)\nnoise\n")
    got = parts.verbose_counts(log)
    assert (got["tests"], got["passed"], got["failures"], got["skipped"]) == (3, 1, 1, 1)
    assert got["failed"] == ["tests/a.py::t2[cuda]"]
    log.write_text("[gw0] [ 25%] PASSED tests/a.py::t1 \n[gw1] [ 50%] FAILED tests/a.py::t2[cuda] \n"
                   "[gw1] [ 75%] SKIPPED tests/b.py::t3 \nnoise\n")  # pytest-xdist's workers
    got = parts.verbose_counts(log)
    assert (got["tests"], got["passed"], got["failures"], got["skipped"]) == (3, 1, 1, 1)
    assert got["failed"] == ["tests/a.py::t2[cuda]"]
    assert "collected" not in got and got["not_ended"] == []


def test_verbose_counts_name_the_tests_a_stopped_run_left_running(tmp_path):
    """A run stopped by its time limit: the collected count and the tests that started without an outcome."""
    log = tmp_path / "log"
    log.write_text("8 workers [4 items]\n\ntests/a.py::t1 \ntests/a.py::t2[x-y] \n[gw0] [ 25%] PASSED tests/a.py::t1 \n"
                   "tests/b.py::t3 \n")
    got = parts.verbose_counts(log)
    assert (got["collected"], got["tests"], got["not_ended"]) == (4, 1, ["tests/a.py::t2[x-y]", "tests/b.py::t3"])
    log.write_text("collected 2 items\n\ntests/a.py::t1 PASSED  [ 50%]\ntests/a.py::t2 ")  # one process, cut mid-test
    got = parts.verbose_counts(log)
    assert (got["collected"], got["tests"], got["not_ended"]) == (2, 1, ["tests/a.py::t2"])


def test_cuda_test_files_start_the_process_spawning_tests_first():
    from pathlib import Path

    names = [f.name for f in parts.cuda_test_files(Path(__file__).resolve().parents[1])]
    slow = [n for n in names if n in parts.SLOW_TEST_FILES]
    assert slow and names[:len(slow)] == slow and names[len(slow):] == sorted(names[len(slow):])


def _stopped_run(tmp_path, monkeypatch):
    """``run_cuda_tests`` stopped by its time box after 3 of 4 tests ended (one failed), then a second
    call that must name the 3 ended tests in ``--deselect`` and runs the fourth to the end."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    calls = []

    def boxed(cmd, seconds, log, **kw):
        calls.append(cmd)
        if len(calls) == 1:
            log.write_text("8 workers [4 items]\n\ntests/a.py::t1 \ntests/a.py::t2[x-y] \ntests/b.py::t3 \n"
                           "[gw0] [ 25%] PASSED tests/a.py::t1 \n[gw1] [ 50%] FAILED tests/a.py::t2[x-y] \n"
                           "[gw1] [ 75%] SKIPPED tests/b.py::t3 \ntests/b.py::t4 \n")
            return None  # stopped
        xml = next(a.split("=", 1)[1] for a in cmd if a.startswith("--junitxml="))
        Path(xml).write_text('<testsuite tests="1" failures="0" errors="0" skipped="0"><testcase classname="b" name="t4"/>'
                             '</testsuite>')
        log.write_text("[gw0] [100%] PASSED tests/b.py::t4 \n")
        return 0

    monkeypatch.setattr(parts, "run_boxed", boxed)
    first = parts.run_cuda_tests(root, tmp_path, 10)
    return root, first, calls


def test_a_stopped_cuda_test_run_resumes_with_the_tests_it_did_not_end(tmp_path, monkeypatch):
    root, first, calls = _stopped_run(tmp_path, monkeypatch)
    assert first["status"] == "failed" and first["not_ended"] == ["tests/b.py::t4"]
    assert first["ended"] == ["tests/a.py::t1", "tests/a.py::t2[x-y]", "tests/b.py::t3"]
    done = parts.resume_cuda_tests(root, tmp_path, 20, first)
    assert [a for a in calls[1] if a.startswith("--deselect")] == [f"--deselect={t}" for t in first["ended"]]
    assert (tmp_path / "cuda-tests-resumed.log").is_file() and (tmp_path / "cuda-tests.log").is_file()
    assert (done["tests"], done["passed"], done["failures"], done["skipped"]) == (4, 2, 1, 1)
    assert done["status"] == "failed" and done["failed"] == ["tests/a.py::t2[x-y]"] and "not_ended" not in done
    assert done["resumed"]["tests"] == 1 and "ran after the other parts" in done["reason"]


@pytest.mark.parametrize("second, status", [
    ({"status": "ok", "tests": 2, "passed": 2, "failures": 0, "errors": 0, "skipped": 0, "failed": [], "seconds": 9}, "ok"),
    ({"status": "failed", "tests": 2, "passed": 1, "failures": 1, "errors": 0, "skipped": 0, "failed": ["t::x: boom"]}, "failed"),
    ({"status": "partial", "tests": 1, "passed": 1, "failures": 0, "errors": 0, "skipped": 0, "failed": [],
      "ended": ["t::y"], "not_ended": ["t::z"], "seconds": 30}, "partial"),
    ({"status": "skipped", "reason": "no test files"}, "partial"),  # nothing ran again: the first run's result stays
])
def test_merge_test_runs_counts_both_runs(second, status):
    first = {"status": "partial", "tests": 48, "passed": 48, "failures": 0, "errors": 0, "skipped": 0, "failed": [],
             "ended": ["t::a"], "not_ended": ["t::y", "t::z"], "collected": 50, "seconds": 115,
             "reason": "the CUDA tests ran past 115 s and were stopped; counts are of the tests that ended"}
    got = parts.merge_test_runs(first, second)
    assert got["status"] == status and got["resumed"]["status"] == second["status"]
    if "tests" in second:
        assert got["tests"] == 48 + second["tests"] and got["passed"] == 48 + second["passed"]
    if status == "ok":
        assert "not_ended" not in got and got["tests"] == got["collected"]
    if status == "partial" and "tests" in second:
        assert got["not_ended"] == ["t::z"] and "ran past" in got["reason"]


def test_main_loop_resumes_a_stopped_cuda_test_part_with_the_time_left(tmp_path, monkeypatch):
    from gcbench.commands.gpu_check import run

    clock = fake_cuda_machine(monkeypatch)
    seen = []

    def tests_part(root, out, seconds, *, deselect=(), name="cuda-tests"):
        seen.append((list(deselect), round(seconds)))
        clock.t += seconds
        if not deselect:
            return {"status": "partial", "tests": 1, "passed": 1, "failures": 0, "errors": 0, "skipped": 0, "failed": [],
                    "ended": ["t::a"], "not_ended": ["t::b"], "files": 1, "seconds": seconds,
                    "reason": f"the CUDA tests ran past {seconds:.0f} s and were stopped; counts are of the tests that ended"}
        return {"status": "ok", "tests": 1, "passed": 1, "failures": 0, "errors": 0, "skipped": 0, "failed": [], "seconds": 5}

    monkeypatch.setattr(parts, "run_cuda_tests", tests_part)
    monkeypatch.setattr(parts, "run_hook", lambda *a, **k: {"status": "ok"})
    monkeypatch.setattr(parts, "run_reproductions", lambda *a, **k: {"status": "ok"})
    code = run.gpu_check_main(tmp_path, 480, device="cuda", parts=["cuda_tests", "hook", "reproductions"])
    doc = json.loads((tmp_path / "gpu-check.json").read_text())
    assert code == 0 and doc["parts"]["cuda_tests"]["status"] == "ok" and doc["parts"]["cuda_tests"]["tests"] == 2
    assert seen[0][0] == [] and seen[1][0] == ["t::a"]  # the second run leaves out what the first ended
    assert doc["budget_log"][-1]["part"] == "cuda_tests (resumed)" and doc["budget_log"][-1]["granted_s"] > 0
    assert "ran after the other parts" in doc["parts"]["cuda_tests"]["reason"]
    assert "2 run in 1 file(s): 2 passed" in (tmp_path / "gpu-check.md").read_text()


def test_a_resumed_cuda_test_run_that_crashes_fails_the_part_and_the_exit_status(tmp_path, monkeypatch):
    from gcbench.commands.gpu_check import run

    clock = fake_cuda_machine(monkeypatch)

    def tests_part(root, out, seconds, *, deselect=(), name="cuda-tests"):
        clock.t += seconds
        if deselect:
            raise OSError("pytest could not start")
        return {"status": "partial", "tests": 1, "passed": 1, "failures": 0, "errors": 0, "skipped": 0, "failed": [],
                "ended": ["t::a"], "not_ended": ["t::b"], "files": 1, "seconds": seconds, "reason": "stopped"}

    monkeypatch.setattr(parts, "run_cuda_tests", tests_part)
    monkeypatch.setattr(parts, "run_hook", lambda *a, **k: {"status": "ok"})
    code = run.gpu_check_main(tmp_path, 480, device="cuda", parts=["cuda_tests", "hook"])
    doc = json.loads((tmp_path / "gpu-check.json").read_text())
    assert doc["parts"]["cuda_tests"]["resumed"]["status"] == "failed"
    assert code == 1 and doc["failed_parts"] == ["cuda_tests"]


def test_a_committed_resumed_test_part_is_not_read_again_from_its_first_log(tmp_path):
    from gcbench.commands.gpu_check.committed import part_line, with_log_counts

    (tmp_path / "cuda-tests.log").write_text("8 workers [2 items]\n\ntests/a.py::t1 \ntests/a.py::t2 \n"
                                            "[gw0] [ 50%] PASSED tests/a.py::t1 \n")
    stopped = {"status": "partial", "tests": 1, "passed": 1, "failures": 0, "errors": 0, "skipped": 0, "failed": [],
               "log": "cuda-tests.log", "reason": "the CUDA tests ran past 9 s and were stopped; counts are of the tests that ended"}
    assert with_log_counts(tmp_path, "cuda_tests", stopped)["not_ended"] == ["tests/a.py::t2"]
    resumed = {**stopped, "status": "ok", "tests": 2, "passed": 2, "resumed": {"status": "ok", "tests": 1},
               "reason": "the first run was stopped after 9 s; the 1 tests it had not ended ran after the other parts (3 s)"}
    got = with_log_counts(tmp_path, "cuda_tests", resumed)
    assert "not_ended" not in got and part_line("cuda_tests", got) == "2 of 2 passed"
