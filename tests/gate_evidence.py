"""Evidence, recorded while the suite runs, that each gate mutation test turns its gated claim red.

The naming convention (``tests/test_gate_mutation_meta.py``) shows that every gated claim *has* a
mutation test; it cannot show that the test does what its name says: a body that passes, or that
judges another claim, would satisfy it. So every claim evaluation of the test run is logged
(:class:`ClaimLog`, installed by ``conftest.py``: each :class:`~gcbench.reproductions.framework.claims.ClaimResult`
built, with its claim and status), and a ``test_gate_mutation_<paper>_<claim>`` passes only where
:func:`missing_evidence` finds nothing missing:

* its own call evaluated the claim as *differs* at least once (the gate red for the broken method);
* the test run evaluated it as *reproduced* or *within tolerance* by the end of the test (the gate green
  for the real method, wherever the test computed that run: a module fixture, or its own call).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gcbench.reproductions.framework.claims import DIFFERS, REPRODUCED, WITHIN, ClaimResult
from gcbench.reproductions.framework.spec import mutation_test_name

PREFIX = "test_gate_mutation_"
GREEN = (REPRODUCED, WITHIN)


def gated_claim_by_test_name(specs: Mapping[str, object]) -> dict[str, str]:
    """Mutation-test name -> the id of the gated claim it must turn red (``specs``: paper package -> spec)."""
    return {mutation_test_name(package, c.id): c.id
            for package, spec in specs.items() for c in spec.claims if c.gate}  # type: ignore[attr-defined]


def load_specs() -> dict[str, object]:
    """Every paper's spec, by package."""
    from gcbench.reproductions import PAPERS
    from gcbench.reproductions.framework.spec import load_spec

    root = Path(__file__).resolve().parents[1] / "reproductions"
    return {pkg: load_spec(root / pkg / "spec.toml") for pkg in PAPERS.values()}


@dataclass
class ClaimLog:
    """``(claim id, status)`` of every claim result built since :meth:`install`, in order."""

    events: list[tuple[str, str]] = field(default_factory=list)
    _original: object = None

    def install(self) -> None:
        """Log each :class:`ClaimResult` as it is built (its dataclass ``__init__`` wrapped, behaviour unchanged)."""
        if self._original is not None:
            return
        original = ClaimResult.__init__
        events = self.events

        def init(result: ClaimResult, *args: object, **kwargs: object) -> None:
            original(result, *args, **kwargs)
            events.append((result.claim.id, result.status))

        self._original = original
        ClaimResult.__init__ = init  # type: ignore[method-assign]

    def uninstall(self) -> None:
        """Restore the dataclass's own ``__init__``."""
        if self._original is not None:
            ClaimResult.__init__ = self._original  # type: ignore[method-assign]
            self._original = None


def missing_evidence(test_name: str, claim_id: str | None, during: Iterable[tuple[str, str]],
                     run_so_far: Iterable[tuple[str, str]]) -> str | None:
    """What the mutation test ``test_name`` failed to show, or None when it showed both sides.

    Args:
        test_name: the test function's name (without parameters).
        claim_id: the gated claim its name stands for (None: its name matches no gated claim, which the
            naming check reports; nothing is asked of it here).
        during: the ``(claim id, status)`` evaluations of the test's own call.
        run_so_far: every evaluation of the test run up to the end of the test (``during`` included).
    """
    if claim_id is None:
        return None
    red = any(cid == claim_id and status == DIFFERS for cid, status in during)
    green = any(cid == claim_id and status in GREEN for cid, status in run_so_far)
    lacks = ([] if red else [f"never evaluated {claim_id!r} as {DIFFERS!r} with the method broken"]) + \
            ([] if green else [f"no evaluation of {claim_id!r} as {REPRODUCED!r} or {WITHIN!r} (the real method) in this run"])
    return f"{test_name}: " + "; ".join(lacks) if lacks else None
