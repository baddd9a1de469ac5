"""A Sketched-SGD cell's sketch geometry: ``P``, the columns and the compression figures the paper's
§5.3 rule gives for the cell's model (:meth:`.methods.MethodConfig.size_for`), as the workload's cells
and the probe (:mod:`.probe`) compute it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .methods import MethodConfig, overall_compression


def sketch_geometry(m: MethodConfig, d: int, dense: int = 0) -> dict[str, Any] | None:
    """Sketched-SGD's geometry for a compressed tensor of ``d`` elements beside ``dense`` uncompressed
    floats: :meth:`.methods.MethodConfig.size_for` (which sets ``m.P`` and ``m.columns``), plus
    ``columns_per_k`` and ``overall_compression`` (the paper's count, dense floats included); None for
    other kinds."""
    sz = m.size_for(d)
    if sz is None:
        return None
    return {**sz.as_dict(), "dense": int(dense), "columns_per_k": sz.columns / sz.k,
            "overall_compression": overall_compression(sz, dense),
            "rule": "paper §5.3 on the compressed parameters: 2d / (|S| + Pk + k), |S| ~ Pk, k = d // d_per_k"}


def translation_geometry(config: Mapping[str, Any], m: MethodConfig, src_vocab: int, tgt_vocab: int) -> tuple[dict[str, Any] | None, int]:
    """A translation cell's sketch geometry (:func:`sketch_geometry`; sets ``m.P`` and ``m.columns``)
    and its model's parameter count, from the cell's config and the vocabulary sizes."""
    from .models import FlatParams, build_translation_model

    probe = FlatParams(build_translation_model(config["model"], src_vocab, tgt_vocab, dict(config["model_params"]), config["seed"]),
                       dense_1d=m.dense_1d)
    d = sum(p.numel() for p in probe.parameters())
    return sketch_geometry(m, probe.flat.numel(), d - probe.flat.numel()), d
