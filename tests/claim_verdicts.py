"""A claim's statuses over variations of one measurement: the tests of a spec's claims read as the
table of verdicts they prove (the measurement that holds, the one that differs, the one a run
cannot test)."""

from __future__ import annotations

from collections.abc import Mapping

from gcbench.reproductions.framework.claims import evaluate_claim


def verdicts(spec, claim_id: str, measured: Mapping[str, float], *changes: Mapping[str, float],
             scale: str = "claims") -> list[str]:
    """The status of ``claim_id`` on ``measured``, then on ``measured`` updated by each of ``changes``."""
    claim = next(c for c in spec.claims if c.id == claim_id)
    return [evaluate_claim(claim, {**measured, **change}, spec, scale).status for change in ({}, *changes)]
