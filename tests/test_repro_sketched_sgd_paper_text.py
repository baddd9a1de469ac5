"""Every paper value of the Sketched-SGD spec is printed in the source's text where its source says: Table 1's
BLEU scores in their own row and column, the compression ratios and ``k`` in the row labels, the model sizes
in the header, the CIFAR-10 comparison's best local top-k compression in its sentence. The one inferred value
(no diverged run) rests on text that is checked too. Runs only where ``$GCBENCH_PAPER_TEXTS`` names a folder
holding the text (docs/reproductions.md)."""

from __future__ import annotations

import re

import pytest

from gcbench.reproductions.sketched_sgd import load

COLUMNS = ("BLEU (transformer)", "BLEU (LSTM)")  # Table 1's number columns, in the order printed


def table1_cells(text: str, row: str) -> list[str]:
    """The number cells of Table 1's row ``row`` (footnote markers dropped); AssertionError if the text
    has no such row."""
    m = re.search(rf"^{re.escape(row)}\t(.*)$", text, re.M)
    assert m, f"Table 1 has no row {row!r}"
    return [re.sub(r"\s*<sup>\d+</sup>", "", cell).strip() for cell in m.group(1).split("\t")]


def printed_where_the_source_says(v, text: str) -> None:
    """AssertionError unless the spec value ``v`` is printed in ``text`` at its source's row and column."""
    src = v.source
    if v.unit == "BLEU":
        cells = table1_cells(text, src.row)
        cell = cells[COLUMNS.index(src.column)]
        assert cell == f"{v.value:g}", f"{v.id}: {v.value:g} not at {src.row} | {src.column}"
    elif v.table == "1" and src.column.startswith("row label (compression)"):
        table1_cells(text, src.row)
        assert re.search(rf"\b{v.value:g}x compression\b", src.row), f"{v.id}: {v.value:g}x not in {src.row!r}"
        if "LSTM" in src.column:  # a ratio the LSTM ran at: its row has an LSTM score
            lstm = table1_cells(text, src.row)[COLUMNS.index("BLEU (LSTM)")]
            assert lstm != "-", f"{v.id}: no LSTM run in {src.row!r}"
    elif v.id == "t1.k":
        table1_cells(text, src.row)
        assert f"Top-{int(v.value):,} SGD" == src.row, f"{v.id}: {int(v.value):,} not in the row label {src.row!r}"
    elif v.unit == "parameters":
        header = re.search(r"^\t(\d+M)\t(\d+M)$", text, re.M)
        assert header, "Table 1 has no model-size header"
        column = COLUMNS.index(src.column.split(":")[0])
        assert header.group(column + 1) == f"{v.value / 1e6:g}M", f"{v.id}: {v.value / 1e6:g}M not in its column"
    elif v.table == "cifar":
        assert f"The best overall compression that local top-k can achieve for many workers is {v.value:g}x." in text, v.id
    else:
        raise AssertionError(f"{v.id}: no check says where the text prints it")


def test_every_sketched_sgd_paper_value_is_in_the_paper_text(paper_text):
    spec = load()
    text = paper_text("SKETCHED-SGD")
    if text is None:
        pytest.skip("the paper's text is not here: set $GCBENCH_PAPER_TEXTS to a folder holding it")
    inferred = {v.id for v in spec.values if "(inferred" in v.source.column}
    assert inferred == {"t1.sketched.diverged"}
    # the inference's premises: a final BLEU for both ratios, comparable, after the caption's iterations
    assert "comparable BLEU scores after 60,000 iterations" in text
    for v in spec.values:
        if v.id not in inferred:
            printed_where_the_source_says(v, text)


@pytest.mark.parametrize("edit", [
    lambda text: text.replace("SGD\t26.29\t20.87", "SGD\t20.87\t26.29"),  # columns swapped
    lambda text: text.replace("26.65", "26.56"),  # a value mistyped
    lambda text: text.replace("is 2x.", "is 3x."),
    lambda text: text.replace("\t90M\t70M", "\t70M\t90M"),
])
def test_a_misplaced_or_mistyped_value_fails_the_check(paper_text, edit):
    text = paper_text("SKETCHED-SGD")
    if text is None:
        pytest.skip("the paper's text is not here: set $GCBENCH_PAPER_TEXTS to a folder holding it")
    assert edit(text) != text
    with pytest.raises(AssertionError):
        for v in load().values:
            if "(inferred" not in v.source.column:
                printed_where_the_source_says(v, edit(text))
