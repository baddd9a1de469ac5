"""Re-checking committed reports, reusing cached cells, and reading a training's last window.

A committed report's stored ``"nan"`` is re-checked as not measured, and claims of tables the run did
not select stay not run; a setting added to a scale since the run counts as a change. A cached cell
file is reused only for the very cell it was written for: another name or config is recomputed
(a file of another name is stale, not a tampered one). A loss curve with negative window means has
no fall.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from gcbench.reproductions.framework.cells import Cell, CellStore
from gcbench.reproductions.framework.claims import NOT_RUN
from gcbench.reproductions.framework.results_table import preset_changes, recheck
from gcbench.reproductions.framework.settling import window_fall
from gcbench.reproductions.framework.spec import Spec, parse_spec

SOURCE = {"paper": "P", "table": "T", "row": "r", "column": "c"}


def make_spec(smoke: dict[str, Any] | None = None) -> Spec:
    """A spec with one ``near`` claim in table 1 and one in table 2."""
    raw = {
        "schema": 2,
        "paper": {"id": "p", "title": "P", "citation": "c", "source": "s"},
        "scales": {"smoke": smoke or {}, "full": {}},
        "tables": {"1": {"title": "T1"}, "2": {"title": "T2"}},
        "values": [{"id": "rate", "value": 7.24, "table": "1", "source": SOURCE}],
        "claims": [
            {"id": f"c{t}", "kind": "result", "check": "near", "quantities": [f"q{t}"], "paper": ["rate"],
             "tolerance": 0.1, "gate": False, "scale_dependent": False, "tables": [t], "text": f"c{t}"}
            for t in ("1", "2")
        ],
    }
    return parse_spec(raw, Path("mem.toml"))


def test_a_stored_nan_is_rechecked_as_not_measured() -> None:
    """Reports store NaN as the string ``"nan"``."""
    data = {"scale": "smoke", "measured": {"q1": "nan", "q2": 7.24}}
    assert recheck(make_spec(), data) == {"c1": NOT_RUN, "c2": "reproduced"}


def test_a_recheck_keeps_the_tables_the_run_selected() -> None:
    """A claim of a table the run did not select is not run, even where its quantity is known."""
    data = {"scale": "smoke", "tables": ["1"], "measured": {"q1": 7.24, "q2": 7.24}}
    assert recheck(make_spec(), data) == {"c1": "reproduced", "c2": NOT_RUN}


def test_a_setting_added_since_the_run_is_a_change() -> None:
    """The run's preset lacks ``epochs``, which the scale now sets."""
    assert preset_changes(make_spec({"epochs": 2}), {"scale": "smoke", "preset": {}}) == ["epochs"]


def _saved(tmp_path: Path, cell: Cell) -> CellStore:
    store = CellStore(tmp_path)
    store.save(cell, {"x": 1.0}, elapsed_s=0.5)
    return store


def test_a_cell_file_of_another_config_is_not_reused(tmp_path: Path) -> None:
    """The file written for epochs=1, found under the name of the epochs=2 cell, is recomputed."""
    one, two = Cell("train", {"epochs": 1}), Cell("train", {"epochs": 2})
    store = _saved(tmp_path, one)
    shutil.copy(store.path(one), store.path(two))
    assert json.loads(store.path(two).read_text())["config"] == {"epochs": 1}
    assert store.load(two) is None
    assert store.load(one) == {"x": 1.0}


def test_a_cell_file_of_another_name_is_not_reused(tmp_path: Path) -> None:
    """The file of cell ``a``, found under cell ``b``'s path, is recomputed as stale, not reported as tampered with."""
    a, b = Cell("a", {"epochs": 1}), Cell("b", {"epochs": 1})
    store = _saved(tmp_path, a)
    shutil.copy(store.path(a), store.path(b))
    assert store.load(b) is None
    assert store.rejected == []


def test_negative_loss_windows_have_no_fall() -> None:
    """A loss (cross entropy) is positive: negative window means give None."""
    curve = [-1.0 - 0.01 * i for i in range(40)]
    assert window_fall([curve]) is None
