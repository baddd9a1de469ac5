"""Deliberately broken SketchML codecs for mutation tests, made through the codec's public names
only: ``SketchML.decode`` (what every receiver calls) and the module's ``host_splits``.

Each ``*_decode`` function wraps the real decode and damages the values it decoded, keeping the
keys; install one with ``monkeypatch.setattr(SketchML, "decode", misaligned_decode(SketchML.decode))``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def _on_decoded_values(orig: Callable, damage: Callable[[torch.Tensor], torch.Tensor]) -> Callable:
    def decode(self, payload, **kwargs):
        out = orig(self, payload, **kwargs)
        if out.is_sparse:
            out = out.coalesce()
            return torch.sparse_coo_tensor(out.indices(), damage(out.values()), out.shape).coalesce()
        # a dense result (out= given, or a dense payload): its nonzero entries are the decoded values
        held = out != 0
        out[held] = damage(out[held])
        return out

    return decode


def misaligned_decode(orig: Callable) -> Callable:
    """The values handed back paired with the wrong keys (a fixed permutation), as if the merge of
    the groups' key lists forgot to carry the values along."""
    return _on_decoded_values(
        orig, lambda v: v[torch.randperm(v.numel(), generator=torch.Generator().manual_seed(0))]
    )


def sign_times_mean_decode(orig: Callable) -> Callable:
    """Every key answered with ``sign x mean|v|`` of the decoded values: the quantile buckets and
    the MinMaxSketch discarded."""
    return _on_decoded_values(orig, lambda v: torch.sign(v) * v.abs().mean())


def uniform_splits(neg_np, v_np, n_neg, qn, qp, *args, **kwargs):
    """A ``host_splits`` that cuts each sign's range into equal widths instead of equal masses (the
    quantile sketches skipped)."""
    return tuple(
        torch.linspace(float(mags.min()), float(mags.max()), parts + 1, dtype=torch.float64) if parts else None
        for mags, parts in ((-v_np[neg_np], qn), (v_np[~neg_np], qp))
    )


def key_blind_hashes(hash_params: Callable) -> Callable:
    """A ``hash_params`` whose rows ignore the key (multiplier 0): every key of a group lands in one
    column of each row, as if the MinMaxSketch had a single bin; the table's size is unchanged."""
    return lambda seed, rows: [(0, b) for _, b in hash_params(seed, rows)]


def one_hash_for_all_rows(hash_params: Callable) -> Callable:
    """A ``hash_params`` that gives every row the first row's hash: ``s`` rows that collide together,
    so the query's maximum over rows gains nothing over one row."""
    return lambda seed, rows: hash_params(seed, 1) * rows


def install_hashes(monkeypatch, make: Callable) -> None:
    """Replace the MinMaxSketch's ``hash_params`` by ``make(real)`` where insert and query read it."""
    import gcbench.compressors.codecs.sketchml.merge as merge
    import gcbench.compressors.codecs.sketchml.minmaxsketch as minmaxsketch

    broken = make(minmaxsketch.hash_params)
    monkeypatch.setattr(minmaxsketch, "hash_params", broken)
    monkeypatch.setattr(merge, "hash_params", broken)
