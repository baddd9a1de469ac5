"""``gcbench train``'s progress bar: one bar over the run's steps, fed after each step (in this process for
the simulated cluster, from rank 0's count through the launcher for real ranks), none off a terminal."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

import gcbench.commands.train as train
from gcbench.progress import ProgressBar
from gcbench.commands.train import train_main
from gcbench.envs.launch import WorkerContext

QUIET = {"print_report": False}


class FakeBar:
    made: list["FakeBar"] = []

    def __init__(self, description: str, total: int, **kw):
        self.description, self.total, self.counts = description, total, []
        self.open = False
        FakeBar.made.append(self)

    def __enter__(self):
        self.open = True
        return self

    def __exit__(self, *exc):
        self.open = False

    def update(self, completed=None, *, advance=0, description=None):
        assert self.open
        self.counts.append(completed)


@pytest.fixture
def fake_bar(monkeypatch):
    FakeBar.made = []
    monkeypatch.setattr(train, "ProgressBar", FakeBar)
    return FakeBar


def test_simulated_run_advances_one_bar_over_its_steps(fake_bar):
    report = train_main("topk", 2, 4, None, codec_params={"ratio": 0.1}, simulate=True, **QUIET)
    [bar] = fake_bar.made
    assert bar.description == "train" and bar.total == 4 and bar.counts == [1, 2, 3, 4]
    assert not bar.open and len(report["losses"]) == 4


@pytest.mark.distributed
def test_real_run_bar_is_fed_by_the_launcher_with_rank_0s_steps(fake_bar):
    train_main("fp16", 2, 6, None, **QUIET)
    [bar] = fake_bar.made  # one bar, in this process, whatever the number of ranks
    assert bar.total == 6
    assert bar.counts == sorted(bar.counts) and set(bar.counts) <= set(range(1, 7)) and bar.counts
    assert not bar.open


def test_a_drawn_bar_leaves_the_results_bit_identical(monkeypatch):
    kw = {"codec_params": {"ratio": 0.1}, "simulate": True, **QUIET}
    plain = train_main("topk", 2, 3, None, **kw)  # off a terminal: no bar drawn
    screen = io.StringIO()
    monkeypatch.setattr(train, "ProgressBar", lambda d, t: ProgressBar(
        d, t, console=Console(file=screen, force_terminal=True), min_interval_s=0.0))
    drawn = train_main("topk", 2, 3, None, **kw)
    assert "3/3" in screen.getvalue()
    assert drawn["params_digest"] == plain["params_digest"]
    assert drawn["losses"] == plain["losses"] and drawn["final"] == plain["final"]


def test_worker_context_hands_its_steps_to_on_step():
    seen: list[int] = []
    ctx = WorkerContext(0, 1, 10.0, on_step=seen.append)
    ctx.step_done(3)
    WorkerContext(0, 1, 10.0).step_done(3)  # none: nothing to call
    assert seen == [3]


def test_train_off_a_terminal_draws_no_bar(capsys):
    train_main("topk", 2, 3, None, codec_params={"ratio": 0.1}, simulate=True, **QUIET)
    assert capsys.readouterr().err == ""
