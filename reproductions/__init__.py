"""Paper reproductions (SketchML, Sketched-SGD, 3LC, L-GreCo) built on one set of codecs.

Each paper is a subpackage holding ``spec.toml`` (the paper's numbers with their sources, scale
presets, claims) and, once implemented, a ``workload()`` factory used by
:func:`gcbench.commands.reproduce.reproduce_main`. :data:`PAPERS` maps the names users type to subpackages.
"""

#: name users type -> subpackage (relative to gcbench.reproductions)
PAPERS: dict[str, str] = {
    "sketchml": "sketchml",
    "sketched-sgd": "sketched_sgd",
    "3lc": "threelc",
    "lgreco": "lgreco",
}
#: other spellings accepted for the same papers
ALIASES: dict[str, str] = {
    "sketched_sgd": "sketched-sgd",
    "sketchedsgd": "sketched-sgd",
    "threelc": "3lc",
    "l-greco": "lgreco",
    "l_greco": "lgreco",
}


def canonical_name(name: str) -> str:
    """The canonical paper name for ``name`` (case-insensitive), or raise KeyError."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in PAPERS:
        raise KeyError(f"unknown paper {name!r}; known: {', '.join(PAPERS)}")
    return key


def _raw_specs() -> list[tuple[str, dict]]:
    """``(paper, parsed spec.toml)`` for every paper, in :data:`PAPERS` order; reads the files only."""
    import sys
    from pathlib import Path

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    return [(paper, tomllib.loads((Path(__file__).parent / pkg / "spec.toml").read_text(encoding="utf-8")))
            for paper, pkg in PAPERS.items()]


def scale_catalogue() -> list[tuple[str, str, str]]:
    """``(paper, scale, one-line summary)`` for every scale preset of every paper's spec, in spec order.

    Reads the spec files only (no paper module is imported), so ``gcbench reproduce --help`` stays quick.
    A preset's summary is its ``description`` field (see :mod:`.framework.spec`)."""
    out = []
    for paper, raw in _raw_specs():
        for scale, preset in raw.get("scales", {}).items():
            summary = preset.get("description", "") if isinstance(preset, dict) else ""
            out.append((paper, scale, summary if isinstance(summary, str) else ""))
    return out


def table_catalogue() -> list[tuple[str, list[str]]]:
    """``(paper, table keys)`` for every paper: the keys of its spec's ``[tables]``, in spec order (what
    ``gcbench reproduce --table`` takes). Reads the spec files only, like :func:`scale_catalogue`."""
    return [(paper, list(raw.get("tables", {}))) for paper, raw in _raw_specs()]
