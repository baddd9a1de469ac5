"""The documentation speaks to users: short README, docs pages, one README per reproduction.

Checked here, by reading the Markdown files (README.md, docs/*.md, reproductions/**/README.md):

* no words of how the project was developed (issue numbers, sessions, work rounds, git branches and
  merges, engineers, clock times, commit hashes in prose): that history belongs to CHANGELOG.md and git;
* README.md is at most 200 lines and shows the two set-up commands; at least five docs pages exist;
* every relative link resolves to a file of the repository (and a ``#anchor`` to a heading of it);
* no measured-looking number (a decimal with a unit of time, speed, ratio or share) outside a generated
  block or a code block that shows the command producing it;
* ``docs/cli.md`` documents every command and option of ``gcbench --help``, and the generated parts
  (``docs/gen_docs.py``) are current;
* every reproduction has a README with the template's sections.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAPER_PACKAGES = ("sketchml", "sketched_sgd", "threelc", "lgreco")
REQUIRED_PAGES = (
    "install.md", "cli.md", "codecs.md", "extending.md", "distributed.md", "speed.md", "architecture.md",
    "reproductions.md", "reproduction-template.md",
)
TEMPLATE_SECTIONS = ("Claims", "Setup and data", "Scales", "Measured and modelled", "Limitations", "Results")
REGENERATE = "run `.venv/bin/python docs/gen_docs.py`"


def user_docs() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += sorted((ROOT / "reproductions").glob("**/README.md"))
    return [f for f in files if f.is_file()]


def run_records() -> list[Path]:
    """The committed records of runs, written by commands (``gcbench results``, ``gcbench reproduce``,
    ``gcbench gpu-check``) or beside them: RESULTS.md, each published reproduction's report and the
    GPU runs under ``results/gpu/`` (the rest of ``results/`` is ``gcbench reproduce``'s default output
    folder, which git ignores)."""
    files = [ROOT / "RESULTS.md", *sorted((ROOT / "reproductions").glob("*/results/*/report.md"))]
    files += sorted((ROOT / "results" / "gpu").glob("**/*.md"))
    return [f for f in files if f.is_file()]


def written_by_a_command(path: Path) -> bool:
    """True for a run's record that a command writes (not a README written beside the runs)."""
    return path.name != "README.md"


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


FENCE = re.compile(r"^(`{3,}|~{3,})")


def split_blocks(text: str) -> list[tuple[str, str]]:
    """``(kind, text)`` pieces: ``"prose"``, ``"code"`` (a fenced block), ``"generated"`` (between
    ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``)."""
    pieces: list[tuple[str, str]] = []
    kind, buf, fence, gen = "prose", [], "", ""
    for line in text.splitlines():
        if kind == "prose":
            m = FENCE.match(line.strip())
            g = re.match(r"<!-- ([\w-]+):begin -->", line.strip())
            if m or g:
                pieces.append((kind, "\n".join(buf)))
                buf = [line]
                kind, fence, gen = ("code", m.group(1), "") if m else ("generated", "", g.group(1))
                continue
            buf.append(line)
        elif kind == "code":
            buf.append(line)
            if line.strip() == fence:
                pieces.append((kind, "\n".join(buf)))
                kind, buf = "prose", []
        else:
            buf.append(line)
            if line.strip() == f"<!-- {gen}:end -->":
                pieces.append((kind, "\n".join(buf)))
                kind, buf = "prose", []
    pieces.append((kind, "\n".join(buf)))
    return pieces


def prose(text: str) -> str:
    """The text outside fenced code blocks, with inline code spans removed."""
    kept = "\n".join(t for k, t in split_blocks(text) if k != "code")
    return re.sub(r"`[^`\n]*`", "", kept)


# --- no development history ----------------------------------------------------------------------

HISTORY = [
    (r"\bissues? #?\d+", "an issue number"),
    (r"(?<![\w&/)])#\d+\b", "an issue or pull-request number"),  # not C++'s `{lambda()#3}` in a kernel's name
    (r"\bsessions?\b", "a work session"),
    (r"\b(?:third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|previous|earlier|this|that|last|next) rounds? of work\b",
     "a round of work"),
    (r"\b(?:third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|previous|earlier) round\b", "a round of work"),
    (r"\bwork rounds?\b|\brounds? of (?:work|review)\b|\breview mends\b", "a round of work"),
    (r"\bon (?:the|a|this|that|my|our|its|their) (?:feature )?branch\b", "a git branch"),
    (r"\b(?:feature|git|topic) branch(?:es)?\b|\bbranch(?:es)? (?:was|were) merged\b", "a git branch"),
    (r"\bmerg(?:e|ed|ing) (?:into|from) main\b|\bmerged (?:main|tree|branch)\b|\bon main\b|\bafter (?:the )?merge\b",
     "a git merge"),
    (r"\bgit (?:checkout|switch|merge|rebase|clone) of\b", "a git operation in the project's history"),
    (r"\bengineers?\b", "the people who developed it"),
    (r"\bas before\b", "what the code replaced"),
    (r"\bwho ran\b|\bran it here\b|\bthe development machines?\b|\bthe shared (?:2|two)-core machine\b",
     "who ran what, where"),
    (r"\b\d{1,2}:\d{2}(?:\s*[-–]\s*\d{1,2}:\d{2})?\s*UTC\b", "a clock time"),
    (r"\b20\d\d-\d\d-\d\d\b", "a date of work"),
    (r"\b(?:commit|at) [0-9a-f]{7,40}\b", "a commit hash"),
]


#: What a command's record of a run states about that run, not about the project's development: the
#: date it ran and the commit it ran (its provenance).
PROVENANCE = ("a date of work", "a commit hash")


def history_hits(text: str, *, record: bool = False) -> list[str]:
    """Development words in ``text``; ``record``: a command's record of a run, whose own date and commit
    (:data:`PROVENANCE`) are allowed."""
    hits = []
    body = "\n".join(t for k, t in split_blocks(text))  # code blocks too: comments in examples count
    for pattern, what in HISTORY:
        if record and what in PROVENANCE:
            continue
        for m in re.finditer(pattern, body, re.I):
            line = body.count("\n", 0, m.start()) + 1
            hits.append(f"line {line}: {m.group(0)!r} ({what})")
    return hits


@pytest.mark.parametrize("path", user_docs() + run_records(), ids=_rel)
def test_no_development_history(path: Path) -> None:
    hits = history_hits(path.read_text(encoding="utf-8"), record=written_by_a_command(path) and path in run_records())
    assert not hits, f"{_rel(path)} speaks of how the project was developed (move it to CHANGELOG.md):\n" + "\n".join(hits)


def test_run_records_are_scanned() -> None:
    names = {_rel(p) for p in run_records()}
    assert "RESULTS.md" in names and "results/gpu/h200/README.md" in names
    assert any(n.startswith("reproductions/") and n.endswith("/report.md") for n in names)
    assert any(n.endswith("/gpu-check.md") for n in names)


def test_a_run_record_may_name_its_own_date_and_commit_but_nothing_else() -> None:
    row = "| sketchml | claim | 1 | 2 | **reproduced** | `claims` | 2026-12-05, `15491b54503a` |\nMachine `x`, commit af38e03."
    assert history_hits(row) and not history_hits(row, record=True)
    assert history_hits("fixed in issue 12, see #4, after the merge into main", record=True)


@pytest.mark.parametrize(
    "text",
    [
        "measured in issue 21", "see issue #17", "(#19)", "the sixth session's table", "a session ran it",
        "the previous round measured", "review mends", "measured on the branch", "merged into main",
        "the merged tree", "two engineers' scripts", "04:36-04:40 UTC", "re-run on 2026-11-24",
        "a fresh clone at 9084d40", "on the development machines", "a git clone of main", "the same bytes as before",
    ],
)
def test_history_patterns_catch(text: str) -> None:
    assert history_hits(text), text


@pytest.mark.parametrize(
    "text",
    [
        "Sketched-SGD's second round fetches the exact values", "the `rounds` protocol",
        "medians of interleaved rounds", "each setting branches from the warm-up", "stochastic rounding",
        "round to nearest", "a two-round protocol", "the main job", "a DDP bucket", "git log",
        "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}",
    ],
)
def test_history_patterns_spare_technical_words(text: str) -> None:
    assert not history_hits(text), history_hits(text)


# --- size and pages ------------------------------------------------------------------------------


def ci_test_command(ci: str) -> str:
    """The test command that ``.ci/run`` (its text ``ci``) defines as ``TEST_COMMAND='...'`` and ends by
    executing; AssertionError if it defines none or its last command does not execute it."""
    match = re.search(r"^TEST_COMMAND='([^']+)'$", ci, re.M)
    assert match, ".ci/run must define TEST_COMMAND='...'"
    commands = [line.strip() for line in ci.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert commands[-1] == 'exec bash -c "$TEST_COMMAND"', (
        f".ci/run must end by executing $TEST_COMMAND: {commands[-1]}"
    )
    return match.group(1)


def test_readme_is_short_and_shows_the_two_commands() -> None:
    """The README's test command is the one CI runs: ``.ci/run`` defines it and executes it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200, f"README.md has {len(text.splitlines())} lines (at most 200)"
    lines = [line.strip() for line in text.splitlines()]
    test_command = ci_test_command((ROOT / ".ci" / "run").read_text(encoding="utf-8"))
    assert test_command in lines, f"README.md must show the test command on its own line: {test_command}"
    assert "bash .ci/setup && .venv/bin/gcbench compare" in lines
    assert "<!-- results:begin -->" in lines and "<!-- results:end -->" in lines


@pytest.mark.parametrize("ci", [
    "TEST_COMMAND='pytest -q'\necho \"+ $TEST_COMMAND\"\n",  # never executed
    "TEST_COMMAND='pytest -q'\nexec bash -c \"pytest -q -k nothing\"\n",  # another command executed
    "TEST_COMMAND='pytest -q'\nexec bash -c \"$TEST_COMMAND\"\ntrue\n",  # not the last command
    "exec bash -c \"$TEST_COMMAND\"\n",  # no TEST_COMMAND defined
])
def test_a_ci_script_that_does_not_execute_its_test_command_is_refused(ci: str) -> None:
    with pytest.raises(AssertionError):
        ci_test_command(ci)
    assert ci_test_command("TEST_COMMAND='pytest -q'\n# run it\nexec bash -c \"$TEST_COMMAND\"\n") == "pytest -q"


def test_docs_pages_exist() -> None:
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert len(pages) >= 5, pages
    missing = [p for p in REQUIRED_PAGES if p not in pages]
    assert not missing, f"docs pages missing: {missing}"


# --- links ---------------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)|!\[[^\]\n]*\]\(([^)\s]+)\)")

#: produced by commands, so absent until they run: ``gcbench results`` writes RESULTS.md, and a
#: published run writes reproductions/<paper_pkg>/results/<scale>/report.md
GENERATED_TARGETS = (re.compile(r"RESULTS\.md"), re.compile(r"reproductions/\w+/results/[\w-]+/report\.md"))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = "\n".join(t for k, t in split_blocks(path.read_text(encoding="utf-8")) if k != "code")
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def broken_links(path: Path) -> list[str]:
    text = "\n".join(t for k, t in split_blocks(path.read_text(encoding="utf-8")) if k != "code")
    text = re.sub(r"`[^`\n]*`", "", text)
    bad = []
    for m in LINK.finditer(text):
        target = m.group(1) or m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = path if not file_part else (path.parent / file_part).resolve()
        if not dest.exists():
            rel = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
            if not any(p.fullmatch(rel) for p in GENERATED_TARGETS):
                bad.append(f"{target}: no such file")
            continue
        if not dest.is_relative_to(ROOT):
            bad.append(f"{target}: outside the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return bad


@pytest.mark.parametrize("path", [*user_docs(), ROOT / "CHANGELOG.md"], ids=_rel)
def test_relative_links_resolve(path: Path) -> None:
    bad = broken_links(path)
    assert not bad, f"{_rel(path)}: broken links:\n" + "\n".join(bad)


def test_link_check_catches_a_broken_link(tmp_path: Path) -> None:
    page = ROOT / "docs" / "install.md"
    text = page.read_text(encoding="utf-8")
    assert not broken_links(page)
    # a copy beside the original, so relative links mean the same
    probe = ROOT / "docs" / f".probe-{tmp_path.name}.md"
    try:
        probe.write_text(text + "\n[x](no-such-page.md) [y](codecs.md#no-such-heading)\n", encoding="utf-8")
        assert len(broken_links(probe)) == 2
    finally:
        probe.unlink()


# --- numbers -------------------------------------------------------------------------------------

MEASURED = re.compile(
    r"(?<![\w.])\d+\.\d+\s?(?:x|×|%|ms|us|µs|ns|s|min|h|GB/s|MB/s|[kMG]?B|M? ?pairs/s|M? ?el/s)(?![\w/])"
    r"|(?<![\w.])\d+(?:\.\d+)?\s?(?:ms|min|GB/s|MB/s)(?![\w/])"
    r"|\b\d+ min \d+ s\b"
)
COMPARATOR = re.compile(r"(?:<=|>=|≤|≥|<|>|at (?:least|most))\s*$")
COMMAND_LINE = re.compile(r"^\s*(?:\$ |>>> |gcbench |\.venv/bin/|python |tox |asv |bash |GCBENCH_\w+=)")


def stray_numbers(text: str) -> list[str]:
    """Measured-looking numbers neither in a generated block nor under a command in a code block."""
    bad = []
    for kind, piece in split_blocks(text):
        if kind == "generated":
            continue
        if kind == "prose":
            piece = re.sub(r"`[^`\n]*`", "", piece)
        seen_command = False
        for line in piece.splitlines():
            if kind == "code" and COMMAND_LINE.match(line):
                seen_command = True
            for m in MEASURED.finditer(line):
                if COMPARATOR.search(line[: m.start()]):
                    continue  # a threshold (a target, a bound), not a measurement
                if kind == "code" and seen_command:
                    continue
                bad.append(f"{m.group(0)!r} in: {line.strip()[:100]}")
    return bad


@pytest.mark.parametrize("path", user_docs(), ids=_rel)
def test_numbers_come_from_commands_or_generated_files(path: Path) -> None:
    bad = stray_numbers(path.read_text(encoding="utf-8"))
    assert not bad, (
        f"{_rel(path)}: numbers typed in (show the command that produces them, or generate them):\n" + "\n".join(bad)
    )


def test_number_check_catches_typed_numbers() -> None:
    assert stray_numbers("QSGD measured 3.04x copy_ here.")
    assert stray_numbers("the run took 6 min 23 s")
    assert stray_numbers("```text\n| qsgd | 0.855 ms |\n```")
    assert not stray_numbers("```text\n$ gcbench compare\n| qsgd | 0.855 ms |\n```")
    assert not stray_numbers("target: encode + decode <= 4.5x copy_")
    assert not stray_numbers("<!-- results:begin -->\n| 7.12x |\n<!-- results:end -->")


# --- generated parts -----------------------------------------------------------------------------


def gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "docs" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_docs", module)
    spec.loader.exec_module(module)
    return module


def test_cli_page_documents_every_command_and_option() -> None:
    import typer.main

    from gcbench.cli import app

    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    group = typer.main.get_command(app)
    missing = []
    top = re.search(r"^## gcbench\n(.*?)(?=^## |\Z)", page, re.M | re.S)  # gcbench's own options (--version)
    for param in group.params:
        if param.param_type_name == "option" and param.name != "help" and not param.hidden:
            missing += [f"gcbench {opt}" for opt in param.opts if not top or f"`{opt}`" not in top.group(1)]
    for name, command in group.commands.items():
        if command.hidden:
            continue
        match = re.search(rf"^## gcbench {re.escape(name)}\n(.*?)(?=^## |\Z)", page, re.M | re.S)
        if not match:
            missing.append(f"command {name}")
            continue
        for param in command.params:
            if param.param_type_name == "option" and param.name != "help":
                for opt in param.opts:
                    if f"`{opt}`" not in match.group(1):
                        missing.append(f"{name} {opt}")
    assert not missing, f"docs/cli.md lacks {missing}: {REGENERATE}"


def test_reproduce_table_help_lists_every_papers_table_keys() -> None:
    # read from the spec files here, apart from the catalogue the help is built from
    import tomllib

    import typer.main

    from gcbench.cli import app
    from gcbench.reproductions import PAPERS

    command = typer.main.get_command(app).commands["reproduce"]
    help_text = " ".join(next(p for p in command.params if p.name == "table").help.split())
    for paper, package in PAPERS.items():
        spec = tomllib.loads((ROOT / "reproductions" / package / "spec.toml").read_text(encoding="utf-8"))
        keys = ", ".join(spec["tables"])
        assert f"{paper}: {keys}" in help_text, (paper, keys, help_text)


def test_generated_parts_are_current() -> None:
    module = gen_docs()
    stale = []
    for path, (tag, body) in module.targets().items():
        text = path.read_text(encoding="utf-8")
        block = re.search(rf"<!-- {tag}:begin -->\n(.*?)<!-- {tag}:end -->", text, re.S)
        if block is None or block.group(1) != body:
            stale.append(_rel(path))
    assert not stale, f"out of date: {stale}: {REGENERATE}"


# --- one README per reproduction -----------------------------------------------------------------


@pytest.mark.parametrize("package", PAPER_PACKAGES)
def test_reproduction_readme_follows_the_template(package: str) -> None:
    path = ROOT / "reproductions" / package / "README.md"
    assert path.is_file(), f"{_rel(path)} is missing (template: docs/reproduction-template.md)"
    text = "\n".join(t for k, t in split_blocks(path.read_text(encoding="utf-8")) if k != "code")
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert [h for h in headings if h in TEMPLATE_SECTIONS] == list(TEMPLATE_SECTIONS), headings
    results = text.split("## Results", 1)[1]
    assert re.search(r"\]\(results/[\w-]+/report\.md\)", results), "Results must link the committed report"
    assert "](../../RESULTS.md)" in results, "Results must link RESULTS.md"
    template = (ROOT / "docs" / "reproduction-template.md").read_text(encoding="utf-8")
    for section in TEMPLATE_SECTIONS:
        assert f"## {section}" in template


# --- code, specs and profiles speak of the software too -----------------------------------------------

CODE_HISTORY = re.compile(
    r"\bissues? #?\d+|\bwork rounds?\b|\brounds? of (?:work|review)\b"
    # a comment that narrates a fix instead of stating what the code or the test guards
    r"|\b(?:in|of|from|by) the issue\b|\bthe issue's\b|\bpull requests?\b"
    r"|\b(?:the|an?) (?:old|previous|earlier) (?:code|implementation)\b|\bnow fixed\b|\b(?:before|after) the fix\b"
    r"|\b(?:previous|earlier|last|next|this|work|review) sessions?\b|\bengineers?\b"
    # code kept or named for what it replaced; a skip for code not written yet (which cannot fire once it is)
    r"|\bas before\b|\bold (?:\w+ ){0,3}(?:implementation|code|version|encoder|encode|decoder|decode|bytes)\b"
    r"|\breason=.{0,40}\bnot (?:written|implemented|ported) yet\b",
    re.I,
)

#: Words a test file's name must not use: the name says what it tests, not when or why it was written.
NAME_HISTORY = {"review", "reviews", "fix", "fixes", "fixed", "session", "issue", "issues", "audit", "round", "old"}


def code_history_hit(line: str) -> str | None:
    """The development words in ``line`` of code, with identifiers split into their words (``_OLD_BYTES``
    reads "OLD BYTES"); None if there are none."""
    m = CODE_HISTORY.search(line.replace("_", " "))
    return m.group(0) if m else None


def name_history_hits(names: list[str]) -> list[str]:
    """The file names among ``names`` with a word (split on ``_``) of :data:`NAME_HISTORY`."""
    return [n for n in names if NAME_HISTORY & set(Path(n).stem.lower().split("_"))]


def code_files() -> list[Path]:
    out = []
    for folder in ("compressors", "envs", "gcbench", "reproductions", "benchmarks", "tests", "docs", ".ci"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".toml", ".sh", ".txt") and path.is_file() and path.name != "test_docs.py":
                out.append(path)
    reports = sorted((ROOT / "reproductions").glob("*/results/*/report.md"))  # committed reports
    return out + reports + [ROOT / "pyproject.toml", ROOT / "tox.ini", ROOT / "setup.py"]


def test_no_development_history_in_code_comments_specs_profiles_or_reports() -> None:
    hits = []
    for path in code_files():
        for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            hit = code_history_hit(line)
            if hit:
                hits.append(f"{_rel(path)}:{i}: {hit!r}")
    assert not hits, "code, specs or profiles cite how the project was developed:\n" + "\n".join(hits)


def test_test_file_names_say_what_they_test() -> None:
    hits = name_history_hits(sorted(p.name for p in (ROOT / "tests").rglob("*.py")))
    what = "test files named after how the project was developed (name them for what they test)"
    assert not hits, f"{what}:\n" + "\n".join(hits)


@pytest.mark.parametrize("name, hit", [
    ("test_threelc_review_fixes.py", True), ("test_data_review_dictd.py", True), ("test_old_codec.py", True),
    ("test_threelc_derived_numbers.py", False), ("test_data_dictd_refusals.py", False), ("test_rounding.py", False),
    ("test_prefix_sums.py", False),
])
def test_name_history_pattern(name: str, hit: bool) -> None:
    assert bool(name_history_hits([name])) is hit


@pytest.mark.parametrize("text, hit", [
    ("# see issue 21", True), ("(issue #7)", True), ("Issues 19", True), ("the reference shape of the issue", True),
    ("# --- the cases named in the issue", True), ('"""The issue\'s case: a small payload"""', True),
    ("The old code iterated over the recorded files", True), ("a system copy the previous implementation read", True),
    ("the leak is now fixed", True), ("measured before the fix", True), ("the last session's numbers", True),
    ("the engineers' script", True), ("see the pull request", True),
    ("the second round of the protocol", False), ("tissue 3", False), ("every rank issues the same collectives", False),
    ("no collective is issued from a callback", False), ("a warm start the old codec instance keeps", False),
    ("run the command in a new session", False), ("a branch-free select", False), ("the configuration was fixed before the run", False),
    # identifiers read as their words, "as before", a case not written yet
    ("_OLD_RUN_CODE = torch.tensor([0])", True), ("def old_zero_run_encode(data):", True), ("_OLD_BYTES = [", True),
    ("def test_encode_is_identical_to_the_old_implementation():", True), ("Same bytes as before", True),
    ("True (compiled, as before there was a choice)", True),
    ('@pytest.mark.skip(reason="randomk not written yet")', True),
    ("old = limit_address_space(1 << 30)", False), ("old_codecs = [w.codec for w in workers]", False),
    ("GOLDEN_BYTES = [", False), ("the state as it was before the failed call", False),
    ("exit 3: the paper's workload is not written yet", False),
])
def test_code_history_pattern(text: str, hit: bool) -> None:
    assert bool(code_history_hit(text)) is hit
