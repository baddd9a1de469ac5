"""Cells: cached as JSON, written atomically, resumed without recomputation, invalidated by config changes."""

from __future__ import annotations

import json
import math

import pytest

from gcbench.reproductions.framework.cells import Cell, CellStore, run_cells, sanitize, write_json_atomic


class Counter:
    def __init__(self, fail_on: str | None = None):
        self.calls: list[str] = []
        self.fail_on = fail_on

    def __call__(self, cell: Cell) -> dict:
        if cell.name == self.fail_on:
            raise KeyboardInterrupt("simulated interruption")
        self.calls.append(cell.name)
        return {"value": cell.config["x"] * 2, "curve": [1.0, 0.5], "never": math.inf}


def cells(n: int = 4) -> list[Cell]:
    return [Cell(f"c{i}", {"x": i, "nested": {"k": [i, "a"]}}) for i in range(n)]


def test_resume_does_not_recompute_a_cached_cell(tmp_path):
    store = CellStore(tmp_path / "cells")
    first = Counter()
    run_cells(cells()[:1], first, store)  # c0 pre-cached
    assert first.calls == ["c0"]
    second = Counter()
    out = run_cells(cells(), second, store)
    assert second.calls == ["c1", "c2", "c3"]
    assert out["c0"].cached and not out["c1"].cached
    assert out["c0"].result == out["c0"].result | {"value": 0}
    # a resumed result reads back exactly what a fresh one returns (inf survives as "inf")
    assert out["c0"].result["never"] == "inf" == out["c2"].result["never"]


def test_interrupted_run_keeps_finished_cells(tmp_path):
    store = CellStore(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run_cells(cells(), Counter(fail_on="c2"), store)
    assert sorted(p.name.split("-")[0] for p in tmp_path.glob("*.json")) == ["c0", "c1"]
    assert not list(tmp_path.glob(".*tmp"))  # no half-written file left behind
    again = Counter()
    run_cells(cells(), again, store)
    assert again.calls == ["c2", "c3"]


def test_resume_false_recomputes(tmp_path):
    store = CellStore(tmp_path)
    run_cells(cells(2), Counter(), store)
    again = Counter()
    run_cells(cells(2), again, store, resume=False)
    assert again.calls == ["c0", "c1"]


def test_changed_config_is_a_new_cell(tmp_path):
    store = CellStore(tmp_path)
    run_cells([Cell("a", {"x": 1})], Counter(), store)
    again = Counter()
    run_cells([Cell("a", {"x": 2})], again, store)
    assert again.calls == ["a"]
    assert Cell("a", {"x": 1}).key != Cell("a", {"x": 2}).key
    assert Cell("a", {"x": 1, "y": 2}).key == Cell("a", {"y": 2, "x": 1}).key  # key order does not matter


@pytest.mark.parametrize("garbage", ["{not json", json.dumps({"format": 1, "name": "a", "config": {"x": 9}, "result": {}}),
                                     json.dumps({"format": 99, "name": "a", "config": {"x": 1}, "result": {}}), ""])
def test_unreadable_or_mismatched_cache_is_recomputed(tmp_path, garbage):
    store = CellStore(tmp_path)
    cell = Cell("a", {"x": 1})
    store.path(cell).parent.mkdir(parents=True, exist_ok=True)
    store.path(cell).write_text(garbage)
    assert store.load(cell) is None
    again = Counter()
    run_cells([cell], again, store)
    assert again.calls == ["a"]
    assert store.load(cell)["value"] == 2


def test_duplicate_cell_names_are_refused(tmp_path):
    with pytest.raises(ValueError, match="two cells are named"):
        run_cells([Cell("a", {"x": 1}), Cell("a", {"x": 2})], Counter(), CellStore(tmp_path))


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    p = tmp_path / "r.json"
    write_json_atomic(p, {"ok": 1})

    class Bad:
        pass

    with pytest.raises(TypeError):
        write_json_atomic(p, {"bad": Bad()})
    assert json.loads(p.read_text()) == {"ok": 1}
    assert [q.name for q in tmp_path.iterdir()] == ["r.json"]


def test_sanitize():
    assert sanitize({"a": [math.inf, -math.inf, 1.0], "b": (math.nan,)}) == {"a": ["inf", "-inf", 1.0], "b": ["nan"]}


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["result"].__setitem__("value", 0.9999),          # a result edited to another valid JSON
        lambda d: d["result"].__setitem__("total_bytes", 1234),     # a field added
        lambda d: d.pop("digest"),                                   # the digest removed
        lambda d: d.__setitem__("digest", "0" * 64),                 # a digest of something else
    ],
)
def test_tampered_cell_is_recomputed_and_reported(tmp_path, edit):
    store = CellStore(tmp_path / "cells")
    run_cells(cells(2), Counter(), store)
    path = store.path(cells(2)[1])
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    fresh = CellStore(tmp_path / "cells")
    counter = Counter()
    out = run_cells(cells(2), counter, fresh)
    assert counter.calls == ["c1"]  # only the tampered cell is recomputed
    assert out["c1"].result["value"] == 2 and not out["c1"].cached
    assert fresh.rejected == [("c1", "content does not match its digest")]
    assert CellStore(tmp_path / "cells").load(cells(2)[1]) == out["c1"].result  # rewritten, trusted again



def test_a_reused_cell_carries_the_seconds_and_commit_its_file_recorded(tmp_path):
    from gcbench.reproductions.framework.cells import provenance, provenance_text

    store = CellStore(tmp_path, commit="c" * 40)
    first = run_cells(cells(2), Counter(), store)
    assert all(o.commit == "c" * 40 and o.compute_s == o.elapsed_s >= 0 for o in first.values())
    # a file written before cells recorded how they were made: no time, no commit
    old = store.path(cells(2)[1])
    data = json.loads(old.read_text())
    del data["elapsed_s"], data["commit"]
    old.write_text(json.dumps(data))
    again = run_cells(cells(2), Counter(), CellStore(tmp_path, commit="d" * 40))
    assert all(o.cached and o.elapsed_s == 0.0 for o in again.values())
    assert again["c0"].compute_s == first["c0"].compute_s and again["c0"].commit == "c" * 40
    assert (again["c1"].compute_s, again["c1"].commit) == (None, None)
    made = provenance(again.values())
    assert made == {"compute_s": first["c0"].compute_s, "unrecorded": 1, "commits": {"c" * 40: 1, "unrecorded": 1}}
    text = provenance_text(made)
    assert "(1 cell(s) without a recorded time)" in text and "`cccccccccccc` (1 cell)" in text
    assert "no recorded commit (1 cell)" in text


def test_a_stamped_store_reads_back_only_cells_saved_under_its_stamp(tmp_path):
    run_cells(cells(2), Counter(), CellStore(tmp_path))  # saved without a stamp
    one = CellStore(tmp_path, stamp={"codecs": "1111"})
    first = Counter()
    run_cells(cells(2), first, one)
    assert first.calls == ["c0", "c1"]  # an unstamped file is another cell's
    again = Counter()
    out = run_cells(cells(2), again, CellStore(tmp_path, stamp={"codecs": "1111"}))
    assert again.calls == [] and out["c1"].cached
    other = Counter()
    run_cells(cells(2), other, CellStore(tmp_path, stamp={"codecs": "2222"}))
    assert other.calls == ["c0", "c1"]  # another stamp: computed again, nothing rejected
    assert len(list(tmp_path.glob("c0-*.json"))) == 3
    saved = json.loads(CellStore(tmp_path, stamp={"codecs": "1111"}).path(cells(2)[0]).read_text())
    assert saved["stamp"] == {"codecs": "1111"}


def test_a_stamped_cell_whose_stamp_was_edited_is_not_trusted(tmp_path):
    store = CellStore(tmp_path, stamp={"codecs": "1111"})
    run_cells(cells(1), Counter(), store)
    path = store.path(cells(1)[0])
    data = json.loads(path.read_text())
    data["stamp"] = {"codecs": "2222"}  # a file moved to another stamp by hand, under the name of the first
    path.write_text(json.dumps(data))
    assert CellStore(tmp_path, stamp={"codecs": "1111"}).load(cells(1)[0]) is None
    renamed = CellStore(tmp_path, stamp={"codecs": "2222"})
    path.rename(renamed.path(cells(1)[0]))
    assert renamed.load(cells(1)[0]) is None and renamed.rejected == [("c0", "content does not match its digest")]
