"""``gcbench gpu-check``: its budget, its parts run on the CPU at toy sizes, and the command without CUDA.

The parts take a device, so their machinery (child processes, time boxes, JSON, report) is checked
here on the CPU; on a GPU machine the command itself runs them on CUDA.
"""

from __future__ import annotations

import io
import json
import os

import pytest
import torch
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.commands.gpu_check import bench_part, parts
from gcbench.commands.gpu_check.asv_part import machine_name, set_commit
from gcbench.commands.gpu_check.budget import Budget
from gcbench.commands.gpu_check.report import render
from gcbench.commands.gpu_check.run import PARTS, SHARES


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_budget_grants_shares_and_skips_what_no_longer_fits():
    clock = Clock()
    b = Budget(100, reserve_s=5, clock=clock)
    assert b.grant("a", 30, 10) == 30
    clock.t = 80  # the first part ran long
    assert b.grant("b", 30, 10) == pytest.approx(15)  # 100 - 5 - 80 left
    clock.t = 90
    assert b.grant("c", 30, 10) is None and "5 s left of 100 s" in b.skip_reason(10)
    assert [d["granted_s"] for d in b.log] == [30, 15, None]
    with pytest.raises(ValueError):
        Budget(0)


def test_shares_fit_the_budget_and_name_every_part():
    assert set(SHARES) == set(PARTS)
    assert sum(share for share, _ in SHARES.values()) == pytest.approx(1.0)
    assert sum(minimum for _, minimum in SHARES.values()) < 480 / 3


def test_chosen_parts_share_the_whole_budget_in_their_proportions():
    from gcbench.commands.gpu_check.run import part_shares

    assert part_shares(list(PARTS)) == pytest.approx({p: share for p, (share, _) in SHARES.items()})
    two = part_shares(["cuda_tests", "hook"])
    assert sum(two.values()) == pytest.approx(1.0)
    assert two["cuda_tests"] / two["hook"] == pytest.approx(SHARES["cuda_tests"][0] / SHARES["hook"][0])
    assert part_shares(["bench"]) == {"bench": 1.0}


def test_a_check_of_some_parts_grants_them_their_share_of_the_whole_budget(tmp_path, monkeypatch):
    from gcbench.commands.gpu_check import run

    clock = fake_cuda_machine(monkeypatch)
    granted = {}

    def tests_part(root, out, seconds, **kw):
        granted["cuda_tests"] = seconds
        clock.t += seconds
        return {"status": "ok", "tests": 1, "files": 1, "passed": 1, "failures": 0, "errors": 0, "skipped": 0, "failed": []}

    monkeypatch.setattr(parts, "run_cuda_tests", tests_part)
    monkeypatch.setattr(parts, "run_hook", lambda device, seconds, **kw: granted.update(hook=seconds) or {"status": "ok"})
    assert run.gpu_check_main(tmp_path, 300, device="cuda", parts=["hook", "cuda_tests", "hook"]) == 0
    share = SHARES["cuda_tests"][0] / (SHARES["cuda_tests"][0] + SHARES["hook"][0])
    assert granted["cuda_tests"] == pytest.approx(share * 300)
    assert granted["hook"] == pytest.approx(300 - 5 - share * 300)  # the last part: what is left (reserve 5 s)


def test_bandwidth_counts_input_payload_and_output_bytes():
    n = 1000
    row = {"numel": n, "nbytes": n, "copy_s": 1e-6, "encode": {"median_s": 1e-6}, "decode": {"median_s": 1e-6}}
    bw = bench_part.bandwidth(row, 8 * n)
    assert bw["copy_GBps"] == pytest.approx(8 * n / 1e-6 / 1e9)
    assert bw["enc_GBps"] == pytest.approx((4 * n + n) / 1e-6 / 1e9)
    # (e+d) = 2x copy, payload a quarter of the input: 62.5% of copy_'s bandwidth
    assert bw["pct_of_copy"] == pytest.approx(62.5)
    sparse = bench_part.bandwidth({"numel": 10 * n, "pairs": n, "nbytes": 0, "copy_s": 1.0, "encode": {"median_s": 1.0}}, 80 * n)
    assert sparse["enc_GBps"] == pytest.approx(12 * n / 1e9) and sparse["total_GBps"] is None


def test_bench_part_writes_rows_with_bandwidth_and_honours_its_time(tmp_path):
    out = tmp_path / "bench.json"
    got = bench_part.run(out, device="cpu", size=4096, seconds=120, repeat=1, codecs=["identity", "bf16"])
    assert got["status"] == "ok" and got["codecs_done"] == ["identity", "bf16"], got
    doc = json.loads(out.read_text())
    ident = next(r for r in doc["rows"] if r["name"] == "identity")
    assert ident["bandwidth"]["pct_of_copy"] > 0 and doc["meta"]["device"] == "cpu"
    assert sum(r["kind"] == "baseline" for r in doc["rows"]) == 3  # one set of baselines, not one per codec
    # the eager pass, then every mode, the default (auto) included: each codec's rows once, from the
    # second pass (codecs without a kernel here, compiled or C, so one row each)
    assert doc["modes"] == {"identity": ["eager", "compiled", "auto"], "bf16": ["eager", "compiled", "auto"]}
    assert got["compiled_not_measured"] == [] and [r["name"] for r in doc["rows"]].count("identity") == 1
    # no time left: the child measures nothing and lists what it skipped
    assert bench_part.main(["--out", str(tmp_path / "none.json"), "--device", "cpu", "--seconds", "0", "--codec", "fp16"]) == 0
    none = bench_part.summarise(json.loads((tmp_path / "none.json").read_text()))
    assert none["codecs_skipped"] == ["fp16"] and none["codecs_done"] == [] and none["rows"] == 0


@pytest.mark.distributed
def test_hook_part_runs_two_ranks_and_compares_their_parameters():
    got = parts.run_hook("cpu", 120, steps=2, codecs=["topk"])
    assert got["status"] == "ok", got
    assert [r["codec"] for r in got["runs"]] == ["topk"]
    assert all(r["replicas_identical"] and r["backend"] == "gloo" and r["ranks"] == 2 for r in got["runs"])
    short = parts.run_hook("cpu", 1, codecs=["fp16"])
    assert short["status"] == "partial" and short["runs"][0]["reason"] == "budget"


def test_hook_order_puts_one_of_each_kind_first():
    names = parts.hook_codecs()
    assert names[:3] == ["fp16", "topk", "qsgd"] and "sketched-sgd" in names and len(names) == len(set(names))


def test_reproductions_part_reports_workloads_that_ignore_the_device(tmp_path, monkeypatch):
    monkeypatch.setattr(parts, "reads_device", lambda folder: folder.name != "lgreco")
    got = parts.run_reproductions("cpu", tmp_path, 3, minimum_s=0.5)  # the others: time-boxed at about a second each
    by = {r["paper"]: r for r in got["papers"]}
    assert by["lgreco"]["status"] == "not device-aware" and "ctx.options['device']" in by["lgreco"]["reason"]
    assert by["lgreco"]["scale"] == "micro" and by["3lc"]["scale"] == "micro" and by["sketchml"]["scale"] == "smoke"
    assert by["sketchml"]["status"] == "CPU by design" and "Spark" in by["sketchml"]["reason"]
    assert {by[p]["status"] for p in ("sketched-sgd", "3lc")} <= {"time-boxed", "skipped", "ok"}
    assert got["status"] == "partial" and "lgreco not device-aware" in got["reason"]


def test_reproductions_run_the_shortest_slices_first(tmp_path, monkeypatch):
    """A paper that ran longer before goes later, so what a short slice leaves of its equal share
    goes to the longer ones; papers never timed go first, in PAPERS' order."""
    started = []

    def boxed(cmd, *, seconds, log):
        started.append((cmd[cmd.index("reproduce") + 1], seconds))
        return 0

    monkeypatch.setattr(parts, "run_boxed", boxed)
    got = parts.run_reproductions("cpu", tmp_path, 300, expected_s={"sketched-sgd": 54.0, "3lc": 20.0})
    assert [p for p, _ in started] == ["lgreco", "3lc", "sketched-sgd"]  # sketchml: CPU by design
    assert [r["paper"] for r in got["papers"]][1:] == ["lgreco", "3lc", "sketched-sgd"]
    assert started[0][1] == pytest.approx(100, abs=1)  # an equal share of what is left
    started.clear()
    parts.run_reproductions("cpu", tmp_path, 300)
    assert [p for p, _ in started] == ["sketched-sgd", "3lc", "lgreco"]


def test_slice_seconds_are_the_longest_committed_time_of_each_paper(tmp_path):
    from gcbench.commands.gpu_check import committed

    def run(device, name, papers):
        folder = tmp_path / "results" / "gpu" / device / name
        folder.mkdir(parents=True)
        (folder / "gpu-check.json").write_text(json.dumps({"parts": {"reproductions": {"papers": papers}}}))

    run("h100", "1-a", [{"paper": "3lc", "status": "time-boxed", "seconds": 28.1},
                        {"paper": "sketchml", "status": "CPU by design"}])
    run("h200", "1-b", [{"paper": "3lc", "status": "ok", "seconds": 54.2}, {"paper": "lgreco", "seconds": 33.7}])
    run("h200", "2-c", [{"paper": "3lc", "status": "ok", "seconds": 50.0}])
    assert committed.slice_seconds(tmp_path) == {"3lc": 54.2, "lgreco": 33.7}
    (tmp_path / "results" / "gpu" / "h200" / "2-c" / "gpu-check.json").write_text("{")
    assert committed.slice_seconds(tmp_path) == {}  # unreadable: no order, not a crash


def test_reads_device_finds_the_option(tmp_path):
    (tmp_path / "w.py").write_text("dev = ctx.options['device']\n")
    assert parts.reads_device(tmp_path)
    (tmp_path / "w.py").write_text("dev = 'cpu'\n")
    assert not parts.reads_device(tmp_path)


def test_hook_part_stops_by_its_runs_own_length_once_warm(monkeypatch):
    """After the first (warm-up) run, the guard is twice the longest later run, not ``per_run_s``."""
    import gcbench.commands.train as train

    clock = [0.0]
    lengths = iter([10.0, 1.0, 1.0, 1.0, 1.0, 1.0])

    def fake_train(codec, nproc, steps, *a, **k):
        clock[0] += next(lengths)
        return {"replicas_identical": True, "config": {"backend": "gloo"}, "measured": {"where": "here"},
                "final": {"train_loss": 1.0}}

    monkeypatch.setattr(parts.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(train, "train_main", fake_train)
    got = parts.run_hook("cpu", 15.5, codecs=["a", "b", "c", "d", "e", "f"], per_run_s=12.0)
    # after a (10 s) no later run is known, so the guard is still 12 s: 10 + 12 > 15.5 stops b
    assert [r["status"] for r in got["runs"]] == ["ok", "skipped", "skipped", "skipped", "skipped", "skipped"]
    clock[0] = 0.0
    lengths = iter([10.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    got = parts.run_hook("cpu", 25.0, codecs=["a", "b", "c", "d", "e", "f"], per_run_s=12.0)
    # a: 10, b: 11 (10 + 12 <= 25), then the guard is 2 s: c 12, d 13, e 14, f 15 all start
    assert [r["status"] for r in got["runs"]] == ["ok"] * 6


def test_hook_part_on_cuda_adds_nccl_ranks_and_a_mixed_precision_run(monkeypatch):
    import gcbench.commands.train as train

    calls = []

    def fake_train(codec, nproc, steps, *a, **k):
        calls.append((codec, nproc, k.get("backend"), k.get("amp")))
        return {"replicas_identical": True, "config": {"backend": k.get("backend")}, "measured": {"where": "here"},
                "final": {"train_loss": 1.0}}

    monkeypatch.setattr(train, "train_main", fake_train)
    got = parts.run_hook("cuda:0", 600, codecs=["fp16"])
    assert calls == [("fp16", 2, "gloo", False), ("qsgd", 1, "nccl", False), ("powersgd", 1, "nccl", False),
                     ("topk", 2, "gloo", True)]
    assert got["status"] == "ok" and got["runs"][-1]["amp"] is True and "amp" not in got["runs"][0]

    # every codec: the NCCL and mixed-precision runs come right after one codec of each family, so a
    # budget that stops before the last codecs has still run them
    calls.clear()
    parts.run_hook("cuda:0", 600)
    lead = len([c for c in parts.hook_codecs() if c in parts.HOOK_FIRST])
    assert [c[0] for c in calls[:lead]] == list(parts.HOOK_FIRST)[:lead]
    assert calls[lead:lead + 3] == [("qsgd", 1, "nccl", False), ("powersgd", 1, "nccl", False), ("topk", 2, "gloo", True)]
    assert [c[0] for c in calls[lead + 3:]] == parts.hook_codecs()[lead:] and calls[-1][1:] == (2, "gloo", False)
    env = {"devices": [{"name": "GPU", "capability": "9.0", "memory_GiB": 80}], "nvidia_smi": {"driver_version": "1"},
           "torch": "2.11", "torch_cuda": "13.0", "nccl": "2", "triton": "3", "machine": {"cpu_model": "CPU", "cpu_count": 16},
           "cuda_available": True, "commit": {"commit": "c" * 40}}
    text = render({"environment": env, "parts": {"hook": got}, "budget_s": 1, "wall_s": 1, "exit_status": 0,
                   "budget_log": []})
    assert "| topk (--amp) | 2 |" in text


def test_asv_machine_name_and_commit_rewrite(tmp_path):
    assert machine_name("NVIDIA H100 80GB HBM3") == "cuda-nvidia-h100-80gb-hbm3"
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "aaaaaaaa-existing-py.json").write_text(json.dumps({"commit_hash": "a" * 40, "results": {}}))
    assert set_commit(tmp_path, "m", "a" * 40, "b" * 40) == ["bbbbbbbb-existing-py.json"]
    assert json.loads((folder / "bbbbbbbb-existing-py.json").read_text())["commit_hash"] == "b" * 40
    assert not (folder / "aaaaaaaa-existing-py.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the command on a machine without CUDA")
def test_command_without_cuda_records_the_environment_says_so_and_exits_0(tmp_path):
    result = CliRunner().invoke(app, ["gpu-check", "--out", str(tmp_path / "gc"), "--budget", "30"])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "gc" / "gpu-check.json").read_text())
    assert doc["environment"]["cuda_available"] is False and doc["exit_status"] == 0
    assert doc["environment"]["machine"]["cpu_model"] and doc["environment"]["torch"] == torch.__version__
    assert all(p["status"] == "skipped" and "no CUDA device" in p["reason"] for p in doc["parts"].values())
    assert "No CUDA device is available" in (tmp_path / "gc" / "gpu-check.md").read_text()


def test_command_refuses_bad_arguments(tmp_path):
    runner = CliRunner()
    assert runner.invoke(app, ["gpu-check", "--out", str(tmp_path), "--budget", "0"]).exit_code == 2
    assert runner.invoke(app, ["gpu-check", "--out", str(tmp_path), "--device", "cpu"]).exit_code == 2
    bad = runner.invoke(app, ["gpu-check", "--out", str(tmp_path), "--part", "nope"])
    assert bad.exit_code == 2 and "unknown part" in bad.output


def test_command_never_writes_over_a_run_or_under_a_file(tmp_path):
    runner = CliRunner()
    done = tmp_path / "run"
    done.mkdir()
    (done / "gpu-check.json").write_text('{"from": "an H200"}')
    res = runner.invoke(app, ["gpu-check", "--out", str(done), "--budget", "5"])
    assert res.exit_code == 2 and "already holds a gpu-check run" in res.output
    assert (done / "gpu-check.json").read_text() == '{"from": "an H200"}'
    (tmp_path / "a-file").write_text("x")
    res = runner.invoke(app, ["gpu-check", "--out", str(tmp_path / "a-file" / "sub"), "--budget", "5"])
    assert res.exit_code == 2 and "is a file, not a folder" in res.output and "Traceback" not in res.output


def test_report_renders_every_section():
    env = {"devices": [{"name": "GPU", "capability": "9.0", "memory_GiB": 80}], "nvidia_smi": {"driver_version": "1"},
           "torch": "2.11", "torch_cuda": "13.0", "nccl": "2", "triton": "3", "machine": {"cpu_model": "CPU", "cpu_count": 16},
           "cuda_available": True, "commit": {"commit": "c" * 40}}
    doc = {"environment": env, "budget_s": 480, "wall_s": 400, "exit_status": 1, "budget_log": [],
           "parts": {"cuda_tests": {"status": "failed", "tests": 3, "files": 1, "passed": 2, "failures": 1, "errors": 0,
                                    "skipped": 0, "failed": ["t::b: boom"], "timed": 3, "test_seconds": 12.5,
                                    "times": "cuda-tests-times.jsonl",
                                    "slowest": [{"test": "t::a", "outcome": "passed", "seconds": 11.25}]},
                     "bench": {"status": "ok", "met": 1, "not_met": 0},
                     "hook": {"status": "ok", "runs": [{"codec": "fp16", "ranks": 2, "status": "ok", "backend": "gloo"}]},
                     "reproductions": {"status": "partial", "papers": [{"paper": "3lc", "scale": "smoke", "status": "time-boxed"}]},
                     "asv": {"status": "ok", "machine": "cuda-gpu", "benchmarks": 2, "with_results": 2}}}
    rows = [{"name": "qsgd", "kind": "codec", "mode": "eager", "total_x_copy": 1.5, "status": "ok", "verdict": "met",
             "bandwidth": {"total_GBps": 2000.0, "pct_of_copy": 60.0}}]
    text = render(doc, rows, {"size": 1, "device": "cuda:0", "gpu": "GPU", "copy_GBps": 3000.0})
    for heading in ("CUDA-marked tests", "gcbench bench", "DDP hook", "Reproductions", "asv", "Budget decisions"):
        assert heading in text
    assert "t::b: boom" in text and "| qsgd | codec | eager |" in text
    assert "The slowest of the 3 tests timed" in text and "12.5 s in all" in text and "| t::a | passed | 11.25 |" in text


def fake_cuda_machine(monkeypatch) -> Clock:
    """gpu-check's main loop on a machine that says it has one GPU, its budget on a clock the test moves."""
    from gcbench.commands.gpu_check import environment, run

    clock = Clock()
    monkeypatch.setattr(run, "Budget", lambda total, reserve_s: Budget(total, reserve_s=reserve_s, clock=clock))
    env = {"cuda_available": True, "devices": [{"name": "Fake GPU", "capability": "9.0", "memory_GiB": 80}],
           "nvidia_smi": None, "torch": "x", "torch_cuda": "13.0", "nccl": None, "triton": None,
           "machine": {"cpu_model": "CPU", "cpu_count": 16}, "commit": {"commit": None}}
    monkeypatch.setattr(environment, "environment", lambda: env)
    return clock


def test_main_loop_grants_parts_in_order_and_skips_the_rest_when_time_runs_short(tmp_path, monkeypatch):
    """The orchestration with CUDA parts faked: the first part overruns, later parts are skipped and say so."""
    from gcbench.commands.gpu_check import asv_part, run

    clock = fake_cuda_machine(monkeypatch)
    calls = []

    def tests_part(root, out, seconds):
        calls.append(("cuda_tests", seconds))
        clock.t += 400  # ran long
        return {"status": "ok", "tests": 1, "files": 1, "passed": 1, "failures": 0, "errors": 0, "skipped": 0, "failed": []}

    def bench(out, **kw):
        calls.append(("bench", kw["seconds"]))
        clock.t += 50
        out.write_text(json.dumps({"rows": [], "meta": {}}))
        return {"status": "ok"}

    monkeypatch.setattr(parts, "run_cuda_tests", tests_part)
    monkeypatch.setattr(bench_part, "run", bench)
    def hook(*a, **k):
        calls.append(("hook",))
        clock.t += 10
        return {"status": "ok"}

    monkeypatch.setattr(parts, "run_hook", hook)
    monkeypatch.setattr(parts, "run_reproductions", lambda *a, **k: calls.append(("repro",)) or {"status": "ok"})
    monkeypatch.setattr(asv_part, "run_asv", lambda *a, **k: calls.append(("asv",)) or {"status": "ok"})
    code = run.gpu_check_main(tmp_path, 480, device="cuda")
    assert code == 0
    assert calls[0] == ("cuda_tests", pytest.approx(run.SHARES["cuda_tests"][0] * 480)) and calls[1][0] == "bench"
    doc = json.loads((tmp_path / "gpu-check.json").read_text())
    # 480 - 5 reserve - 450 used = 25 s left: the hook (minimum 15) still fits; after it 15 s, too few for the rest
    assert doc["parts"]["hook"]["status"] == "ok"
    for part in ("reproductions", "asv"):
        assert doc["parts"][part]["status"] == "skipped" and "skipped by the budget" in doc["parts"][part]["reason"]
    assert [d["granted_s"] is None for d in doc["budget_log"]] == [False, False, False, True, True]
    assert "skipped by the budget" in (tmp_path / "gpu-check.md").read_text()


def test_a_time_box_stops_the_child_and_what_it_started(tmp_path):
    import os
    import sys
    import time

    from gcbench.commands.gpu_check.boxed import run_boxed

    pid_file = tmp_path / "grandchild.pid"
    script = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    t0 = time.monotonic()
    assert run_boxed([sys.executable, "-c", script], seconds=2, log=tmp_path / "log") is None
    assert time.monotonic() - t0 < 15
    grandchild = int(pid_file.read_text())
    for _ in range(50):  # the grandchild is gone (or a zombie awaiting its reaper)
        try:
            os.kill(grandchild, 0)
            with open(f"/proc/{grandchild}/stat") as fh:
                if fh.read().split()[2] == "Z":
                    break
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the grandchild outlived the time box")
    assert run_boxed([sys.executable, "-c", "print('hi')"], seconds=30, log=tmp_path / "ok.log") == 0
    assert (tmp_path / "ok.log").read_text().strip() == "hi"


def test_commit_named_by_the_caller_wins_over_a_stale_checkout(monkeypatch):
    """A GPU machine's copy of the tree may carry a ``.git`` older than its files: the commit the
    campaign names is the one recorded, git's view kept beside it."""
    from gcbench.commands.gpu_check import environment

    monkeypatch.setenv("GCBENCH_COMMIT", "abc1234")
    got = environment.commit()
    assert got["commit"] == "abc1234" and got["source"] == "GCBENCH_COMMIT"
    monkeypatch.delenv("GCBENCH_COMMIT")
    assert environment.commit()["source"] in ("git", "unknown")


def test_repo_root_holds_the_tests_and_benchmarks():
    """The CUDA tests and asv's benchmarks are found from the package's own location."""
    from gcbench.commands.gpu_check.run import repo_root

    root = repo_root()
    assert (root / "tests").is_dir() and (root / "benchmarks").is_dir() and parts.cuda_test_files(root)


def test_committed_runs_block_quotes_each_parts_last_run(tmp_path):
    """README's GPU block: per part, the last committed run that ran it, numbers from its JSON."""
    from gcbench.commands.gpu_check import committed

    def run(name, parts_):
        folder = tmp_path / "results" / "gpu" / "h100" / name
        folder.mkdir(parents=True)
        doc = {"environment": {"devices": [{"name": "NVIDIA H100"}]}, "parts": parts_}
        (folder / "gpu-check.json").write_text(json.dumps(doc))

    not_chosen = {"status": "skipped", "reason": "not selected (--part)"}
    run("1-all", {"cuda_tests": {"status": "failed", "tests": 5, "passed": 4, "failed": ["t.py::a[cuda]: boom"]},
                  "bench": {"status": "ok", "codecs_done": ["qsgd"], "rows": 2, "met": 1, "not_met": 1},
                  "hook": {"status": "ok", "runs": [{"codec": "qsgd", "ranks": 2, "backend": "gloo", "status": "ok",
                                                     "replicas_identical": False}]}})
    run("2-tests", {"cuda_tests": {"status": "ok", "tests": 5, "passed": 5, "failed": []}, "bench": not_chosen})
    block = committed.render_readme_block(tmp_path)
    assert block.startswith("<!-- gpu:begin -->") and block.endswith("<!-- gpu:end -->") and "NVIDIA H100" in block
    assert "**CUDA tests** (`2-tests`): 5 of 5 passed" in block  # the later run
    assert "**Bench** (`1-all`): 1 codecs, 2 rows; 1 of 2 CUDA targets met" in block  # not chosen later
    assert "bit-identical in 0" in block  # a hook run whose ranks differ shows
    run("3-stopped", {"cuda_tests": {"status": "partial", "reason": "the CUDA tests ran past 9 s and were stopped",
                                     "tests": 1, "passed": 1, "failed": [], "log": "t.log"},
                      "hook": {"status": "partial", "runs": [
                          {"codec": "fp16", "ranks": 2, "backend": "gloo", "status": "ok", "replicas_identical": True},
                          {"codec": "qsgd", "ranks": 1, "status": "skipped", "reason": "budget"}]}})
    (tmp_path / "results" / "gpu" / "h100" / "3-stopped" / "t.log").write_text(
        "8 workers [2 items]\ntests/a.py::t1 \ntests/a.py::t2 \n[gw0] [ 50%] PASSED tests/a.py::t1 \n")
    block = committed.render_readme_block(tmp_path)
    assert ("**CUDA tests** (`3-stopped`): 1 of 1 passed before its time limit stopped the run (1 of 2 collected "
            "ended); not ended: `tests/a.py::t2`") in block  # read from the committed log
    assert ("**DDP hook** (`3-stopped`): 1 of 2 runs ok (2 gloo rank(s)), ranks' parameters bit-identical in 1; "
            "1 codecs and methods; not started (budget): qsgd on 1 rank(s)") in block
    (tmp_path / "results" / "gpu" / "h100" / "2-tests" / "gpu-check.json").write_text("{")
    with pytest.raises(committed.CommittedRunError):
        committed.render_readme_block(tmp_path)
    assert "No run" in committed.render_readme_block(tmp_path / "elsewhere")


def test_profile_codec_counts_what_ran_and_the_report_shows_it():
    """The bench part's profile (CPU operators here; CUDA kernels on a GPU): counts, busy and wall
    time, the top entries by time, and one report row per codec (a failed profile says why)."""
    from gcbench.commands.gpu_check.report import profile_lines

    got = bench_part.profile_codec("qsgd", 1 << 14, "cpu", top=3)
    assert got["count"] > 0 and 0 < got["busy_ms"] and got["wall_ms"] > 0 and len(got["top"]) == 3
    assert got["top"][0]["ms"] >= got["top"][1]["ms"] >= got["top"][2]["ms"]
    assert "launches" not in got  # the CPU has no launches to count
    lines = profile_lines({"qsgd": got, "bad": {"error": "RuntimeError: boom"}})
    assert lines[2].startswith("| qsgd | aten operators") and "failed: RuntimeError: boom" in lines[3]
    assert "| launches | host waits | copies to host |" in lines[0] and lines[3].count("|") == lines[0].count("|")
    cuda = {"what": "CUDA kernels", "count": 3, "busy_ms": 0.2, "wall_ms": 1.5, "launches": 3, "syncs": 1,
            "copies_to_host": 1, "top": [{"name": "k", "ms": 0.1, "share": 0.5}]}
    assert "| q | CUDA kernels | 3 | 0.2 | 1.5 | 3 | 1 | 1 | k (50%) |" in profile_lines({"q": cuda})[2]


def test_host_calls_count_launches_waits_and_copies_to_the_host():
    """A GPU profile's CPU-side CUDA calls and device events, by name: the launches, the calls that make the
    host wait (each stalls the launch queue) and the copies back to the host."""
    cpu = ["aten::add", "cudaLaunchKernel", "cuLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize",
           "cudaLaunchKernelExC", "cudaDeviceSynchronize", "cudaMemcpy"]
    device = ["triton_poi_fused_0", "Memcpy DtoH (Device -> Pageable)", "Memcpy HtoD (Pageable -> Device)"]
    assert bench_part.host_calls(cpu, device) == {"launches": 3, "syncs": 3, "copies_to_host": 1}
    assert bench_part.host_calls([], []) == {"launches": 0, "syncs": 0, "copies_to_host": 0}


@pytest.mark.slow
def test_asv_part_saves_the_small_sizes_before_trying_all(tmp_path, monkeypatch):
    """asv saves a run's results when it ends: the small sizes run (and are saved) first, so a run of
    all sizes cut short by the budget loses only its own cases. CPU cases of one benchmark here; the
    second run is cut short on purpose."""
    from gcbench.commands.gpu_check import asv_part
    from gcbench.commands.gpu_check.run import repo_root

    real, sizes = asv_part.run_boxed, []

    def cut_the_second(cmd, *, seconds, log, cwd=None, env=None):
        sizes.append(env["GCBENCH_BENCH_FULL"])
        return real(cmd, seconds=seconds, log=log, cwd=cwd, env=env) if len(sizes) == 1 else None

    monkeypatch.setattr(asv_part, "run_boxed", cut_the_second)
    got = asv_part.run_asv(repo_root(), tmp_path / "asv", 120.0, gpu="Test GPU", commit="abc1234",
                           device_types="cpu", bench="identity", full=True)
    assert sizes == ["0", "1"]
    assert got["status"] == "partial" and "small sizes' results are kept" in got["reason"]
    assert got["with_results"] > 0 and got["files"][0].startswith("abc1234-")


def test_committed_asv_results_are_copied_with_full_commits(tmp_path):
    """``gcbench results --asv-results``: each committed run's asv machine folder copied into asv's
    results folder; a short commit is written as git's full hash, under the name asv gives it; a
    commit git does not know is refused, and nothing committed copies nothing."""
    import subprocess

    from gcbench.commands.gpu_check import committed
    from gcbench.commands.results import asv_results_main

    repo = tmp_path / "repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "x"], cwd=repo, check=True, env=env)
    full = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()
    machine = repo / "results" / "gpu" / "h100" / "1-run" / "asv" / "results" / "cuda-nvidia-h100"
    machine.mkdir(parents=True)
    (machine / "machine.json").write_text('{"machine": "cuda-nvidia-h100"}')
    (machine / f"{full[:7]}-existing-py.json").write_text(json.dumps({"commit_hash": full[:7], "results": {}}))
    dest = tmp_path / "asv-results"
    out = io.StringIO()
    assert asv_results_main(repo, dest, out=out) == 0 and "1 GPU machine(s) (cuda-nvidia-h100)" in out.getvalue()
    assert sorted(p.name for p in (dest / "cuda-nvidia-h100").iterdir()) == [f"{full[:8]}-existing-py.json", "machine.json"]
    assert json.loads((dest / "cuda-nvidia-h100" / f"{full[:8]}-existing-py.json").read_text())["commit_hash"] == full
    (machine / "0000000-existing-py.json").write_text(json.dumps({"commit_hash": "0000000", "results": {}}))
    with pytest.raises(committed.CommittedRunError, match="not in the git history"):
        committed.copy_asv_results(repo, dest)
    err = io.StringIO()
    assert asv_results_main(repo, dest, err=err) == 2 and "0000000" in err.getvalue()
    assert committed.copy_asv_results(tmp_path / "elsewhere", dest) == []
    a_file = tmp_path / "results.json"
    a_file.write_text("{}")
    err = io.StringIO()
    assert asv_results_main(repo, a_file, err=err) == 2 and "is a file" in err.getvalue()
    assert a_file.read_text() == "{}"


def test_asv_results_goes_alone():
    got = CliRunner().invoke(app, ["results", "--asv-results", "x", "--check"])
    assert got.exit_code == 2 and "--asv-results goes alone" in got.output
