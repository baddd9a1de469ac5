"""The progress bar of long commands (gcbench/progress.py) and ``gcbench bench``'s use of it: drawn on a
terminal only, never by a thread, with the bench's total known up front and advanced between rows only."""

from __future__ import annotations

import io
import json
import threading

import pytest
from rich.console import Console

import gcbench.bench.harness as harness
from gcbench import compressors
from gcbench.bench.harness import bench_main, bench_steps, run_bench
from gcbench.progress import ProgressBar

TINY = 4096


class FakeBar:
    """Stands in for :class:`ProgressBar`: records its total, its updates and whether a row was being timed."""

    made: list["FakeBar"] = []
    timing = False  # set by the wrapped bench_codec while a row runs

    def __init__(self, description: str, total: int, **kw):
        self.description, self.total, self.completed = description, total, 0
        self.steps: list[int] = []  # the counts set by run_bench's on_step
        self.descriptions: list[str] = []
        self.entered = self.exited = False
        FakeBar.made.append(self)

    def __enter__(self):
        self.entered = True
        return self

    def __exit__(self, *exc):
        self.exited = True

    def update(self, completed=None, *, advance=0, description=None):
        assert not FakeBar.timing, "the bar was updated inside a row's timed rounds"
        if completed is not None:
            self.completed = completed
            self.steps.append(completed)
        self.completed += advance
        if description is not None:
            self.description = description
            self.descriptions.append(description)


@pytest.fixture
def fake_bar(monkeypatch):
    FakeBar.made = []
    real = harness.bench_codec

    def timed_row(*a, **k):
        FakeBar.timing = True
        try:
            return real(*a, **k)
        finally:
            FakeBar.timing = False

    monkeypatch.setattr(harness, "bench_codec", timed_row)
    monkeypatch.setattr(harness, "ProgressBar", FakeBar)
    return FakeBar


def _terminal(buf: io.StringIO) -> Console:
    return Console(file=buf, force_terminal=True, width=100)


# --- the helper ------------------------------------------------------------------------------------


def test_the_bar_draws_nothing_off_a_terminal():
    buf = io.StringIO()
    with ProgressBar("bench", 3, console=Console(file=buf)) as bar:
        assert not bar.enabled
        bar.update(advance=1, description="bench: fp16")
        bar.update(3)
    assert buf.getvalue() == ""
    assert (bar.completed, bar.description) == (3, "bench: fp16")  # it counts all the same


def test_the_bar_draws_on_a_terminal_without_a_refresh_thread():
    buf = io.StringIO()
    before = set(threading.enumerate())
    with ProgressBar("train", 4, console=_terminal(buf), min_interval_s=0.0) as bar:
        assert bar.enabled
        for _ in range(4):
            bar.update(advance=1)
            assert set(threading.enumerate()) == before  # redrawn by the caller only, never in the background
    out = buf.getvalue()
    assert "train" in out and "4/4" in out


def test_the_bar_redraws_at_most_every_interval_but_always_the_last_step_and_a_new_description():
    buf = io.StringIO()
    with ProgressBar("train", 10, console=_terminal(buf), min_interval_s=3600.0) as bar:
        drawn = len(buf.getvalue())
        for n in range(1, 9):
            bar.update(n)
        assert len(buf.getvalue()) == drawn  # throttled
        bar.update(description="train: more")
        assert "train: more" in buf.getvalue()
        bar.update(10)
        assert "10/10" in buf.getvalue()


# --- gcbench bench ---------------------------------------------------------------------------------


def test_bench_steps_are_codecs_times_modes_plus_raw_stage_and_peer_groups():
    names = ["fp16", "ef-signsgd", "countsketch", "sketchml", "powersgd"]
    modes = ("eager", "compiled", "auto")
    # 3 per codec, 3 more for ef-signsgd's inner codec, 1 per stage group (countsketch, sketchml),
    # 1 for powersgd's peers and 1 for hivemind's
    assert bench_steps(names, modes) == 5 * 3 + 3 + 2 + 1 + 1
    assert bench_steps(names, modes, stages=False, peers=False, raw_ef=False) == 5 * 3
    assert bench_steps(names, ("eager",), stages=True, peers=False, raw_ef=False) == 5 + 2
    assert bench_steps(compressors.names(), modes, stages=False, peers=False) == 3 * (
        len(compressors.names()) + sum(compressors.registry.entry(n).error_feedback for n in compressors.names()))
    assert bench_steps(["no-such-codec"], ("eager",)) == 2  # counted as a codec; run_bench refuses it


def test_bench_main_advances_one_bar_per_row_to_its_total(fake_bar):
    rows = bench_main(["fp16", "ef-signsgd", "countsketch"], size=TINY, repeat=1, warmup=0, peers=False,
                      modes=("eager",), console=Console(file=io.StringIO()))
    assert rows
    [bar] = fake_bar.made
    assert bar.entered and bar.exited and bar.description.startswith("bench")
    assert bar.total == 1 + 2 + 2 == bench_steps(["fp16", "ef-signsgd", "countsketch"], ("eager",), peers=False)
    assert bar.steps == list(range(1, bar.total + 1))  # every step, one at a time, up to the total
    assert bar.descriptions == ["bench: fp16", "bench: ef-signsgd", "bench: countsketch", "bench: countsketch stages"]


def test_a_codec_that_cannot_load_still_completes_its_steps(monkeypatch):
    real = compressors.get

    def get(name, **params):
        if name == "ef-signsgd":
            raise ImportError("being written")
        return real(name, **params)

    monkeypatch.setattr(compressors, "get", get)
    done: list[int] = []
    _, rows = run_bench(["ef-signsgd", "fp16"], size=TINY, repeat=1, warmup=0, peers=False, stages=False,
                        modes=("eager", "compiled"), on_step=done.append)
    assert any(r.name == "ef-signsgd" and r.status == "skipped" for r in rows)
    assert done[-1] == bench_steps(["ef-signsgd", "fp16"], ("eager", "compiled"), peers=False, stages=False) == 6
    assert done == sorted(done)


def test_bench_off_a_terminal_has_no_bar_in_any_output(tmp_path, capsys):
    out_json, out_md = tmp_path / "b.json", tmp_path / "b.md"
    bench_main(["fp16"], size=TINY, repeat=1, warmup=0, peers=False, stages=False, modes=("eager",),
               json_path=out_json, markdown_path=out_md)
    captured = capsys.readouterr()
    assert captured.err == ""
    for text in (captured.out, out_json.read_text(), out_md.read_text()):  # no bar, no terminal control
        assert "━" not in text and "\x1b[" not in text
    json.loads(out_json.read_text())


def test_a_bar_that_cannot_draw_stops_drawing_and_the_run_goes_on():
    """A terminal closed under a running command: the bar's errors never reach the caller."""
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), force_terminal=True)
    with ProgressBar("x", 3, console=console, min_interval_s=0.0) as bar:
        bar.update(advance=1)
        console.file.close()  # every later write raises ValueError
        bar.update(advance=1)
        bar.update(advance=1, description="y")
    assert bar.completed == 3
