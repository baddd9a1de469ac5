"""Sizing Sketched-SGD by the paper's rule (Ivkin et al. 2019, §5.3): the Count Sketch and the second
round for a target compression, counted as the paper counts it."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidParameterError


@dataclass(frozen=True)
class SketchSizing:
    """Sketch and second-round sizes for a target compression, counted as the paper counts it.

    Attributes:
        d: length of the compressed gradient.
        k: coordinates applied per step.
        dense: floats sent uncompressed beside it, each way (the biases, §5.1; 0 = none).
        target: the compression asked for (the paper's count).
        P: round 2 fetches the exact values of ``P k`` candidates.
        rows, columns: the Count Sketch (``|S| = rows * columns`` floats).
        sketch_size: ``|S|``.
        paper_compression: ``2 D / (|S| + P k + k + 2 dense)`` with ``D = d + dense``: vanilla's
            upload and download (``D`` each way) over Sketched-SGD's upload (sketch + ``P k`` values
            + the dense floats) and download (``k`` values + the dense floats).
        upload_compression: ``D / (|S| + P k + dense)``: upload only (what a worker sends).
    """

    d: int
    k: int
    dense: int
    target: float
    P: int
    rows: int
    columns: int
    sketch_size: int
    paper_compression: float
    upload_compression: float

    def as_dict(self) -> dict[str, float | int]:
        """JSON-able fields."""
        return {"d": self.d, "k": self.k, "dense": self.dense, "target": self.target, "P": self.P, "rows": self.rows, "columns": self.columns,
                "sketch_size": self.sketch_size, "paper_compression": self.paper_compression,
                "upload_compression": self.upload_compression}


def paper_sizing(d: int, k: int, compression: float, rows: int = 5, dense: int = 0) -> SketchSizing:
    """Size Sketched-SGD for ``compression`` by the paper's rule (§5.3).

    The paper counts ``compression = 2 d / (|S| + P k + k)`` and sizes the sketch about as large as
    the second round (``|S| ~ P k``). With ``dense`` floats sent uncompressed each way beside the
    ``d`` compressed ones (biases, §5.1), the float budget left for the sketch and the two sparse
    transfers is ``B = 2 (d + dense) / compression - 2 dense``; this gives
    ``P = floor((B - k) / (2 k))`` (the largest ``P`` whose ``P k`` still leaves ``|S| >= P k``),
    and the sketch takes the rest of the budget: ``columns = floor((B - P k - k) / rows)``.
    ``P`` is derived from the budget, not fixed: small ``P`` is the regime the paper reports as
    diverging.

    Args:
        d: gradient length.
        k: coordinates applied per step (``1 <= k <= d``).
        compression: target compression (the paper's count, > 1).
        rows: Count Sketch rows (the paper's runs: 5).
        dense: floats sent uncompressed each way beside the compressed tensor.

    Returns:
        A :class:`SketchSizing`; its ``paper_compression`` is ``>= compression`` (rounding down).

    Raises:
        InvalidParameterError: invalid arguments, or the budget cannot hold ``|S| = P k`` with
            ``P >= 1`` (``3 k > B``: lower ``k`` or the compression).
    """
    d, k, rows, dense = int(d), int(k), int(rows), int(dense)
    if d < 1 or not (1 <= k <= d) or rows < 1 or dense < 0:
        raise InvalidParameterError(f"need d >= 1, 1 <= k <= d, rows >= 1, dense >= 0, got d={d}, k={k}, rows={rows}, dense={dense}")
    if not float(compression) > 1.0:
        raise InvalidParameterError(f"compression must be > 1, got {compression!r}")
    total = d + dense
    budget = 2.0 * total / float(compression) - 2.0 * dense
    P = int((budget - k) // (2 * k))
    if P < 1:
        raise InvalidParameterError(
            f"compression {compression} of d={d} leaves {budget:.0f} floats: not enough for a sketch and a second "
            f"round of k={k} each plus the k-value download (needs 3k = {3 * k})")
    columns = int((budget - P * k - k) // rows)
    size = rows * columns
    return SketchSizing(d=d, k=k, dense=dense, target=float(compression), P=P, rows=rows, columns=columns, sketch_size=size,
                        paper_compression=2.0 * total / (size + P * k + k + 2 * dense),
                        upload_compression=total / (size + P * k + dense))
