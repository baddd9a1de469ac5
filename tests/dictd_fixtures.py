"""Generated dict.org (dictd) dictionaries for the tests: the German-English format the translation
reproductions read (an index of headword, offset and length, and a plain or gzip body)."""

from __future__ import annotations

import gzip

import numpy as np
from gcbench.data.text import encode_dictd_number


def write_dictd(folder, entries, *, gz: bool, extra_index: list[str] = ()):
    """Write ``entries`` (``(raw entry text, anything)`` pairs) as a dictd dictionary in ``folder``: the
    body gzip-compressed (``.dict.dz``) or plain, the index with one offset listed twice and
    ``extra_index`` lines appended. Returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    body = b""
    lines = []
    for text, _ in entries:
        raw = text.encode("utf-8")
        head = text.split("\n")[0].lower()
        lines.append(f"{head}\t{encode_dictd_number(len(body))}\t{encode_dictd_number(len(raw))}")
        body += raw
    lines.insert(0, lines[0])  # an offset listed twice is read once
    lines += list(extra_index)
    (folder / "german-english.index").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if gz:
        with gzip.open(folder / "german-english.dict.dz", "wb") as fh:
            fh.write(body)
    else:
        (folder / "german-english.dict").write_bytes(body)
    return folder


def sentence_dict(folder):
    """A dictionary of 40 generated six-word German-English sentence pairs (numpy seed 0), gzip body."""
    rng = np.random.default_rng(0)
    de = ["der", "die", "das", "ein", "Haus", "Hund", "Katze", "sieht", "liebt", "heute", "morgen", "schnell", "gross", "klein"]
    en = ["the", "a", "house", "dog", "cat", "sees", "loves", "today", "tomorrow", "quickly", "big", "small", "very"]
    entries = []
    for i in range(40):
        g = " ".join(rng.choice(de, 6)).capitalize() + "."
        e = " ".join(rng.choice(en, 6)).capitalize() + "."
        entries.append((f"{g}\n {{f}}\n   {e}; alt {i}\n", None))
    return write_dictd(folder, entries, gz=True)


def sketched_sgd_context(tmp_path_factory, scale: str = "micro"):
    """The Sketched-SGD workload and a run context of its ``scale`` preset on a generated dictionary
    (tracking off): what the tests that compute and derive the workload's own cells start from."""
    from pathlib import Path
    from types import SimpleNamespace

    from gcbench.reproductions.framework.tracking import Tracker
    from gcbench.reproductions.sketched_sgd.workload import workload

    wl = workload()
    folder = sentence_dict(tmp_path_factory.mktemp("dict"))
    ctx = SimpleNamespace(spec=wl.spec, preset=wl.spec.scale(scale), options={"dataset": f"dictd:{Path(folder)}"}, cache={},
                          tables=["1"], scale=scale, tracker=Tracker(tmp_path_factory.mktemp("runs"), enabled=False),
                          progress=SimpleNamespace(advance_epoch=lambda: None))
    return wl, ctx
