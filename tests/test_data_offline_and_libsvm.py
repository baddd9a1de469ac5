"""Small data-loader contracts: an explicit offline setting of either Hugging Face variable is never
overridden, and a libsvm mapping names a missing file with the documented DatasetUnavailableError."""

from __future__ import annotations

import pytest

from gcbench.data import hf
from gcbench.data.errors import DatasetUnavailableError
from gcbench.data.prepare import load_dataset


@pytest.mark.parametrize("datasets_offline,hub_offline,allowed", [
    (None, None, False), ("0", None, True), (None, "0", True), ("0", "0", True),
    ("0", "1", False), ("1", "0", False), ("1", None, False), ("false", "no", True),
])
def test_downloads_only_when_no_variable_says_offline(monkeypatch, datasets_offline, hub_offline, allowed):
    for name, value in zip(hf.OFFLINE_ENV, (datasets_offline, hub_offline)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert hf.downloads_allowed() is allowed


def test_a_libsvm_mapping_with_a_missing_file(tmp_path):
    with pytest.raises(DatasetUnavailableError, match="does not exist"):
        load_dataset({"name": "libsvm", "path": str(tmp_path / "nope.svm")})
    with pytest.raises(ValueError, match="needs its file"):
        load_dataset({"name": "libsvm"})


def test_a_libsvm_mapping_loads_the_file(tmp_path):
    f = tmp_path / "a.svm"
    f.write_text("1 1:0.5 3:1\n0 2:1\n")
    ds = load_dataset({"name": "libsvm", "path": str(f)})
    assert ds.summary()["rows"] == 2
