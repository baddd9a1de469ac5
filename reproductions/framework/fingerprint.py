"""A claim's definition fingerprint: a short digest of what decides its verdict, written into each claim
of a run's ``results.json`` so a committed report can tell which claims the spec has changed since.

The fingerprint covers the claim's semantic fields (:data:`FIELDS`: its id, kind, check, quantities,
tolerance and flags, the scales and tables it is evaluated at, whether it gates CI),
the paper values it rests on as the spec holds them (id, value, unit), and the fingerprints of the
guards it ``requires`` (a guard's changed tolerance changes the verdict of every claim that requires it).
Prose is left out: the claim's ``text``, ``note``, ``scale_reason`` and ``testable_reason``, and a paper
value's source and ``measure`` wording; rewording them changes no verdict, so it never asks for a run.
Nor is ``headline``: it decides only which claims ``RESULTS.md`` lists, read from the spec as it is.

:func:`claim_entries` is what a run writes as its ``claims`` list: each claim's ``as_dict()`` with its
``fingerprint`` (:data:`KEY`). :mod:`.results_table` compares a committed report's recorded fingerprints
with the current spec's.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable

from .claims import ClaimResult
from .spec import Claim, Spec

#: The key of a claim's fingerprint in a run's ``results.json`` claims.
KEY = "fingerprint"
#: Hex digits of the sha256 kept (64 bits: enough to tell a changed definition, short enough to read).
DIGITS = 16
#: The claim attributes the fingerprint covers (besides the paper values and the required guards).
FIELDS = ("id", "kind", "check", "quantities", "paper", "tolerance", "tolerance_kind", "strict", "noise",
          "testable", "requires", "scales", "meaningful_at", "gate", "scale_dependent", "tables")


def _plain(value: Any) -> Any:
    """``value`` in a plain form: tuples as lists, numbers (but flags) as the ``repr`` of their float, so
    ``1`` and ``1.0`` agree."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return repr(float(value))  # repr: exact, and the same text for inf and nan on every platform
    return str(value)


def claim_definition(claim: Claim, spec: Spec, *, _seen: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The canonical form of ``claim``'s definition that :func:`claim_fingerprint` digests."""
    out: dict[str, Any] = {name: _plain(getattr(claim, name)) for name in FIELDS}
    values = []
    for ref in claim.paper:
        try:
            v = spec.value(ref)
        except KeyError:  # a spec validated by parse_spec has every value; a hand-built one may not
            values.append({"id": ref, "value": None, "unit": None})
            continue
        values.append({"id": v.id, "value": _plain(v.value), "unit": v.unit})
    out["paper_values"] = values
    by_id = {c.id: c for c in spec.claims}
    seen = _seen | {claim.id}
    out["requires_fingerprints"] = {
        rid: (claim_fingerprint(by_id[rid], spec, _seen=seen) if rid in by_id and rid not in seen else None)
        for rid in claim.requires
    }
    return out


def claim_fingerprint(claim: Claim, spec: Spec, *, _seen: frozenset[str] = frozenset()) -> str:
    """A short sha256 (:data:`DIGITS` hex digits) of ``claim``'s canonical definition (:func:`claim_definition`)."""
    text = json.dumps(claim_definition(claim, spec, _seen=_seen), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGITS]


def spec_fingerprints(spec: Spec) -> dict[str, str]:
    """Claim id -> :func:`claim_fingerprint`, for every claim of ``spec``."""
    return {c.id: claim_fingerprint(c, spec) for c in spec.claims}


def claim_entries(results: Iterable[ClaimResult], spec: Spec) -> list[dict[str, Any]]:
    """A run's ``claims`` list for ``results.json``: each result's ``as_dict()`` with its ``fingerprint``."""
    return [{**r.as_dict(), KEY: claim_fingerprint(r.claim, spec)} for r in results]
