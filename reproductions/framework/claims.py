"""Evaluate a spec's claims against measured quantities.

Statuses, one per claim:

* ``reproduced``: the claim holds as the paper states it (a value equal to the paper's at its printed
  precision or inside its printed range; a relation or ordering that holds strictly; a one-sided
  bound that holds);
* ``within tolerance``: a value within the claim's tolerance of the paper's, or an ordering that holds
  once differences smaller than the tolerance count as ties;
* ``differs``: outside the tolerance, or the relation does not hold; for a gated claim, also a quantity
  measured as NaN, even where another of its quantities was not measured (the method's own failure,
  which must turn its gate red);
* ``not at this scale``: the run's scale cannot test the claim (the claim declares ``meaningful_at``
  with a ``scale_reason``, e.g. a final accuracy that needs a whole training run, whether or not the
  run measured its quantities; or, with the quantities measured, an ``order`` whose adjacent quantities differ by no more than the run's own
  spread of that measurement, its ``noise``, and none stands reversed by more than it (that one
  *differs*; a spread of 0 means the measurement is exact, and the values decide as they stand), or a
  ``ratio_within`` whose measured ratio lies within that spread of the tolerance's edge, or a claim
  whose ``testable`` flag the run measured as 0);
  the measured numbers are shown as information, with the reason and what the check would have said,
  and the report counts these claims apart from ``differs``;
* ``not run``: a quantity the claim needs was not measured in this run at a scale that could test it
  (its table was not selected, or the claim is restricted to other scales).

A claim with ``requires`` (guards its statement includes, e.g. "at equal error budget") keeps its own
verdict only where those guards hold: *differs* where one differs, *not run* or *not at this scale*
where one is; a claim whose own check differs differs whatever its guards say (:func:`with_preconditions`).

Only a gated claim (``gate = true``, a ``result`` or a ``guard`` claim, never a consistency check) that ``differs`` fails a run
(:func:`gate_failures`); :func:`gate_verdict` words the gate's outcome for every place that shows it. :func:`falsifying_measurement` builds, for any claim, a measurement outside its
tolerance: the test suite feeds it to every gated claim to show that the gate can fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, Sequence

from .cells import unsanitize_float
from .spec import Claim, Spec

REPRODUCED = "reproduced"
WITHIN = "within tolerance"
DIFFERS = "differs"
NOT_AT_SCALE = "not at this scale"
NOT_RUN = "not run"
STATUSES = (REPRODUCED, WITHIN, DIFFERS, NOT_AT_SCALE, NOT_RUN)


@dataclass(frozen=True)
class ClaimResult:
    """The outcome of one claim."""

    claim: Claim
    status: str
    paper: str
    ours: str
    detail: str
    measured: Mapping[str, float | None] = field(default_factory=dict)
    #: Why the run cannot test the claim, where the status is *not at this scale*: the claim's
    #: ``scale_reason``, or its ``testable_reason`` where the measured flag decided.
    reason: str = ""
    #: Where the status is *not at this scale*: what the run measured and what its check would have
    #: said (the detail is the reason, then this in parentheses).
    said: str = ""

    @property
    def gate_failed(self) -> bool:
        """True when this claim gates CI and differs."""
        return self.claim.gate and self.status == DIFFERS

    def as_dict(self) -> dict:
        """JSON-ready form."""
        return {
            "id": self.claim.id,
            "text": self.claim.text,
            "kind": self.claim.kind,
            "check": self.claim.check,
            "headline": self.claim.headline,
            "status": self.status,
            "paper": self.paper,
            "ours": self.ours,
            "tolerance": self.claim.tolerance_text(),
            "gate": self.claim.gate,
            "scale_dependent": self.claim.scale_dependent,
            "meaningful_at": list(self.claim.meaningful_at) if self.claim.meaningful_at is not None else None,
            "detail": self.detail,
            **({"reason": self.reason} if self.reason else {}),
            "note": self.claim.note,
            "measured": {k: _json_num(v) for k, v in self.measured.items()},
        }


def _json_num(v: float | None) -> float | str | None:
    if v is None:
        return None
    if math.isinf(v) or math.isnan(v):
        return str(v)
    return v


def fmt_num(x: float | str | None) -> str:
    """Four significant digits, thousands kept whole; ``—`` for missing and ``∞`` for infinity.

    Also takes the strings ``"inf"``, ``"-inf"`` and ``"nan"`` that stored cells hold for
    non-finite numbers (strict JSON has none)."""
    if x is None:
        return "—"
    x = unsanitize_float(x)
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if math.isnan(x):
        return "nan"
    if x != 0 and abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def exact_band(printed: float, allowed: float) -> float:
    """How far ours may lie from the paper's number and still be *reproduced*: the paper's printed
    precision (``printed``), but never wider than a declared tolerance (``allowed`` > 0), which would
    otherwise be overruled: "about 20%" printed as 0.2 is half a unit wide (0.05), a tolerance of 0.02
    narrower."""
    return min(printed, allowed) if allowed > 0 else printed


def printed_half_unit(x: float) -> float:
    """Half a unit in the last digit of the paper's number as the spec stores it, a float (``7.24`` ->
    0.005, ``1041`` -> 0.5): the digits of its shortest ``repr``, so a trailing zero the paper printed
    is not seen (``0.50`` -> 0.05) and a number whose ``repr`` is in e-notation (``1e-05``) gets 5e-5 of
    its magnitude."""
    text = repr(float(x))
    if "e" in text or "E" in text:
        return abs(x) * 5e-5
    if text.endswith(".0"):
        return 0.5
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10.0 ** (-decimals)


def paper_text(claim: Claim, spec: Spec) -> str:
    """The paper values a claim rests on, as the report shows them (``"SketchML 7.24 %; Adam 1041 s"``)."""
    parts = []
    for ref in claim.paper:
        v = spec.value(ref)
        parts.append(f"{v.source.column} {v.display()}{(' ' + v.unit) if v.unit else ''}")
    return "; ".join(parts) if parts else "—"


def _ours_text(quantities: Sequence[str], measured: Mapping[str, float | None], labels: Mapping[str, str]) -> str:
    return "; ".join(f"{labels.get(q, q)} {fmt_num(measured.get(q))}" for q in quantities)


def evaluate_claim(
    claim: Claim,
    measured: Mapping[str, float | None],
    spec: Spec,
    scale: str,
    *,
    labels: Mapping[str, str] | None = None,
) -> ClaimResult:
    """Evaluate one claim (see the module docstring for the statuses).

    Args:
        claim: the claim.
        measured: quantity name -> measured number (missing or None = not measured in this run;
            ``math.inf`` is a legal value, e.g. "never converged").
        spec: the spec (for the paper values the claim rests on).
        scale: the scale that ran.
        labels: short display names for quantities in the "ours" column.
    """
    result = _evaluate_measured(claim, measured, spec, scale, labels=labels or {})
    if claim.meaningful_at is None or scale in claim.meaningful_at:
        if not claim.testable:
            return result
        flag = measured.get(claim.testable)
        outside = claim.scales is not None and scale not in claim.scales  # not evaluated at this scale at all
        if result.status == NOT_RUN and (flag != 0.0 or outside):  # a run that measured it cannot test the claim says so
            return result
        return _testable(claim, result, flag)
    # Outside its meaningful scales the reason holds whether or not this run measured the claim.
    where = "scale(s) " + ", ".join(claim.meaningful_at) if claim.meaningful_at else "no scale of this package"
    said = (f"not measured at this scale: {result.detail}" if result.status == NOT_RUN
            else f"at this scale the check would say {result.status}: {result.detail}")
    return not_at_scale(result, claim.scale_reason, f"meaningful at {where}; {said}")


def not_at_scale(
    result: ClaimResult, reason: str, said: str, measured: Mapping[str, float | None] | None = None
) -> ClaimResult:
    """``result``'s claim *not at this scale* for ``reason``, with ``said`` (what the run measured and what
    the check would have said) and ``measured`` (default ``result``'s); the detail is ``reason (said)``."""
    return ClaimResult(result.claim, NOT_AT_SCALE, result.paper, result.ours, f"{reason} ({said})",
                       result.measured if measured is None else measured, reason, said)


def _testable(claim: Claim, result: ClaimResult, flag: float | None) -> ClaimResult:
    """A claim with a ``testable`` flag: ``result`` where the run measured it as 1, *not at this scale*
    where 0, *not run* where the run has no flag."""
    got = {**result.measured, claim.testable: flag}
    if flag is None or math.isnan(flag):
        return ClaimResult(claim, NOT_RUN, result.paper, result.ours,
                           f"not measured in this run: {claim.testable} (whether the run can test the claim)", got)
    if flag not in (0.0, 1.0):
        raise ValueError(f"claim {claim.id!r}: its testable flag {claim.testable!r} must be 0 or 1, got {flag!r}")
    if flag == 1.0:
        return replace(result, measured=got)
    return not_at_scale(result, claim.untestable_reason,
                        f"{claim.testable} = 0; the check would say {result.status}: {result.detail}", got)


def _noise_value(claim: Claim, got: Mapping[str, float | None], noise: float | None,
                 paper: str, ours: str) -> tuple[dict[str, float | None], ClaimResult | None]:
    """The claim's measured quantities with its noise added, and the result where the noise decides
    alone: *not run* without it (missing or NaN)."""
    got = {**got, claim.noise: noise}
    if noise is None or math.isnan(noise):
        return got, ClaimResult(claim, NOT_RUN, paper, ours, f"not measured in this run: {claim.noise} (the claim's noise)", got)
    return got, None


def relative_gap(a: float, b: float) -> float:
    """``|b - a|`` as a share of the larger magnitude (0 for two zeros): how far apart two measurements
    are, the unit of a claim's ``noise``."""
    if a == b:
        return 0.0
    if math.isinf(a) or math.isinf(b):  # a finite and an infinite value, or two opposite infinities
        return 1.0
    top = max(abs(a), abs(b))
    return abs(b - a) / top


def order_pair_tolerated(claim: Claim, a: float, b: float) -> bool:
    """Whether ``a`` before ``b`` in an ``order`` claim holds within the claim's tolerance (``a`` at most
    ``b`` plus the tolerance, relative to ``b`` or absolute); never where ``a`` is infinite (e.g. two runs
    that never converged: no order can be established)."""
    if math.isinf(a):
        return False
    if claim.tolerance_kind == "relative":
        return a <= b * (1.0 + claim.tolerance) if b >= 0 else a <= b * (1.0 - claim.tolerance)
    return a <= b + claim.tolerance


def _order_within_noise(claim: Claim, status: str, paper: str, ours: str, detail: str,
                        got: Mapping[str, float | None], vals: Sequence[float], noise: float | None) -> ClaimResult:
    """An ``order`` claim with ``noise`` (the run's relative spread of the measurement): *differs* where
    two quantities, adjacent or not, stand in the reverse of the claimed order by more than the spread
    and beyond the claim's tolerance; else ``status`` (the order's verdict) where every adjacent pair is
    farther apart than the spread, or the spread is 0 (the measurement is exact: a tie is a tie); else
    *not at this scale* (the run cannot tell the order). *Not run* without the spread (missing or NaN).
    An infinite spread (the run measured too little to bound it, e.g. too few epochs for an interval)
    holds every order: *not at this scale*."""
    got, missing = _noise_value(claim, got, noise, paper, ours)
    if missing is not None:
        return missing
    names = claim.quantities
    reversed_pairs = [(relative_gap(vals[i], vals[j]), i, j) for i in range(len(vals)) for j in range(i + 1, len(vals))
                      if vals[i] > vals[j] and (claim.strict or not order_pair_tolerated(claim, vals[i], vals[j]))]
    worst = max(reversed_pairs, default=None)
    if worst is not None and worst[0] > noise:
        gap, i, j = worst
        return ClaimResult(claim, DIFFERS, paper, ours, f"{detail}; {names[j]} is below {names[i]} by {gap:.2%}, beyond "
                                                        f"this run's spread of {noise:.2%} ({claim.noise})", got)
    gap = min(relative_gap(a, b) for a, b in zip(vals, vals[1:]))
    if noise == 0.0:
        return ClaimResult(claim, status, paper, ours, f"{detail}; this run's spread is 0 ({claim.noise}): the measured "
                                                       "values decide as they stand", got)
    if gap > noise:
        return ClaimResult(claim, status, paper, ours, f"{detail}; closest pair {gap:.2%} apart, beyond this run's "
                                                       f"spread of {noise:.2%} ({claim.noise})", got)
    return not_at_scale(ClaimResult(claim, status, paper, ours, detail, got), claim.scale_reason,
                        f"the closest pair is {gap:.2%} apart, within this run's spread of {noise:.2%}, {claim.noise}; "
                        f"the check would say {status}: {detail}")


def _ratio_within_noise(claim: Claim, status: str, paper: str, ours: str, detail: str,
                        got: Mapping[str, float | None], r: float, noise: float | None) -> ClaimResult:
    """A ``ratio_within`` claim with ``noise``: the verdict (``status``) only where the measured
    ``|q0 / q1 - 1|`` lies farther than the run's relative spread of the measurement from the
    tolerance, on either side; *not at this scale* where the spread reaches across it (the run cannot
    tell whether the two are within the tolerance); *not run* without the spread (missing or NaN). A
    ratio that is undefined (a zero denominator or an infinite value) *differs* before the spread is
    read, whether or not the run measured it."""
    got, missing = _noise_value(claim, got, noise, paper, ours)
    if missing is not None:
        return missing
    margin = abs(abs(r) - claim.tolerance)
    if margin > noise:
        return ClaimResult(claim, status, paper, ours, f"{detail}; {margin:.2%} from the tolerance, beyond this run's "
                                                       f"spread of {noise:.2%} ({claim.noise})", got)
    return not_at_scale(ClaimResult(claim, status, paper, ours, detail, got), claim.scale_reason,
                        f"{abs(r):.2%} is {margin:.2%} from the tolerance of {claim.tolerance:.2%}, within this run's "
                        f"spread of {noise:.2%}, {claim.noise}; the check would say {status}: {detail}")


def _evaluate_measured(
    claim: Claim, measured: Mapping[str, float | None], spec: Spec, scale: str, *, labels: Mapping[str, str]
) -> ClaimResult:
    """The check itself, whatever the run's scale (see :func:`evaluate_claim`)."""
    paper = paper_text(claim, spec)
    got = {q: measured.get(q) for q in claim.quantities}
    ours = _ours_text(claim.quantities, measured, labels)
    if claim.scales is not None and scale not in claim.scales:
        return ClaimResult(claim, NOT_RUN, paper, "—", f"evaluated only at scale(s) {', '.join(claim.scales)}", got)
    missing = [q for q, v in got.items() if v is None or (isinstance(v, float) and math.isnan(v))]
    nan = [q for q in missing if got[q] is not None]
    if nan and claim.gate:
        # a gated check whose method produced NaN (a diverged loss, an undefined share) has failed, whatever
        # else the run left unmeasured: were NaN "not measured" here, a method broken into NaN would turn
        # its gate grey instead of red
        unmeasured = [q for q in missing if got[q] is None]
        rest = f"; not measured in this run: {', '.join(unmeasured)}" if unmeasured else ""
        return ClaimResult(claim, DIFFERS, paper, ours, f"measured NaN: {', '.join(nan)}{rest}", got)
    if missing:
        return ClaimResult(claim, NOT_RUN, paper, ours, f"not measured in this run: {', '.join(missing)}", got)
    vals = [float(got[q]) for q in claim.quantities]  # type: ignore[arg-type]

    if claim.check == "near":
        pv = spec.value(claim.paper[0])
        x = vals[0]
        if isinstance(pv.value, tuple):
            lo, hi = pv.value
            dist = 0.0 if lo <= x <= hi else min(abs(x - lo), abs(x - hi))
            ref = lo if x < lo else hi
            exact = dist == 0.0
        else:
            ref = pv.value
            dist = abs(x - ref)
            exact = False
        allowed = claim.allowed(ref)
        if not isinstance(pv.value, tuple):  # the paper's printed precision, never wider than a declared tolerance
            exact = dist <= exact_band(printed_half_unit(ref), allowed)
        if exact:
            status = REPRODUCED
        elif dist <= allowed:
            status = WITHIN
        else:
            status = DIFFERS
        share = f" ({dist / abs(ref) * 100:.1f}% of {fmt_num(ref)})" if ref else ""  # no share of a zero
        detail = f"|ours − paper| = {fmt_num(dist)}{share}; allowed {fmt_num(allowed)}"
        return ClaimResult(claim, status, paper, ours, detail, got)

    if claim.check == "ratio_within":
        num, den = vals
        n0, n1 = (labels.get(q, q) for q in claim.quantities)
        if claim.tolerance_kind == "absolute":  # |q0 - q1| <= tolerance: no ratio is formed
            diff = abs(num - den)
            if math.isnan(diff):  # two infinities of one sign
                return ClaimResult(claim, DIFFERS, paper, ours, "difference undefined (two infinite values)", got)
            detail = f"|{n0} − {n1}| = {fmt_num(diff)}; allowed {fmt_num(claim.tolerance)}"
            return ClaimResult(claim, REPRODUCED if diff <= claim.tolerance else DIFFERS, paper, ours, detail, got)
        if den == 0 or math.isinf(den) or math.isinf(num):
            return ClaimResult(claim, DIFFERS, paper, ours, "ratio undefined (zero denominator or infinite value)", got)
        r = num / den - 1.0
        holds = abs(r) <= claim.tolerance
        detail = f"{n0} / {n1} − 1 = {r * 100:+.2f}%"
        if claim.noise:
            return _ratio_within_noise(claim, REPRODUCED if holds else DIFFERS, paper, ours, detail, got, r,
                                       measured.get(claim.noise))
        return ClaimResult(claim, REPRODUCED if holds else DIFFERS, paper, ours, detail, got)

    if claim.check == "ratio_near":
        num, den = vals
        pnum, pden = (float(spec.value(ref).value) for ref in claim.paper)  # type: ignore[arg-type]
        ref = pnum / pden
        if den == 0 or math.isinf(den) or math.isinf(num):
            return ClaimResult(claim, DIFFERS, paper, ours, "ratio undefined (zero denominator or infinite value)", got)
        x = num / den
        dist = abs(x - ref)
        allowed = claim.allowed(ref)
        # The paper's ratio is derived from two printed numbers: "exact" means equal at the precision of
        # the ratio those numbers allow (half a unit of each, propagated to first order).
        printed = abs(ref) * (printed_half_unit(pnum) / abs(pnum) + printed_half_unit(pden) / abs(pden)) if pnum else 0.0
        status = REPRODUCED if dist <= exact_band(printed, allowed) else WITHIN if dist <= allowed else DIFFERS
        detail = (f"ours {fmt_num(x)}x vs paper {fmt_num(ref)}x ({fmt_num(pnum)} / {fmt_num(pden)}); "
                  f"|ours − paper| = {fmt_num(dist)}, allowed {fmt_num(allowed)}")
        return ClaimResult(claim, status, paper, ours, detail, got)

    if claim.check == "order":
        names = [labels.get(q, q) for q in claim.quantities]
        ascending = all(a < b for a, b in zip(vals, vals[1:]))
        # every pair, not only neighbours: steps each within the tolerance can add up past it
        loose = all(order_pair_tolerated(claim, vals[i], vals[j]) for i in range(len(vals)) for j in range(i + 1, len(vals)))
        ranked = sorted(zip(vals, names), key=lambda t: t[0])
        order = ranked[0][1] + "".join(f" {'=' if v == w else '<'} {n}" for (w, _), (v, n) in zip(ranked, ranked[1:]))
        status = REPRODUCED if ascending else WITHIN if loose and not claim.strict else DIFFERS
        tie_note = "; ties differ (strict order)" if claim.strict and not ascending else ""
        detail = f"measured order: {order}{tie_note}"
        if claim.noise:
            return _order_within_noise(claim, status, paper, ours, detail, got, vals, measured.get(claim.noise))
        return ClaimResult(claim, status, paper, ours, detail, got)

    if claim.check == "at_most":
        x = vals[0]
        bound = claim.tolerance
        holds = x <= bound
        detail = f"{labels.get(claim.quantities[0], claim.quantities[0])} = {fmt_num(x)}; bound {fmt_num(bound)} (one-sided)"
        return ClaimResult(claim, REPRODUCED if holds else DIFFERS, paper, ours, detail, got)

    raise ValueError(f"unknown claim check {claim.check!r}")  # pragma: no cover - spec validation rejects it


def evaluate_claims(
    spec: Spec,
    measured: Mapping[str, float | None],
    scale: str,
    *,
    tables: Iterable[str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[ClaimResult]:
    """Evaluate every claim of ``spec``; claims of tables outside ``tables`` (when given) are "not run",
    unless the scale cannot test them anyway ("not at this scale", for its reason).
    A claim with ``requires`` then takes its guards' outcomes into its own (:func:`with_preconditions`)."""
    selected = set(tables) if tables is not None else None
    out = []
    for claim in spec.claims:
        meaningful_here = claim.meaningful_at is None or scale in claim.meaningful_at
        if selected is not None and not selected.intersection(claim.tables) and meaningful_here:
            out.append(ClaimResult(claim, NOT_RUN, paper_text(claim, spec), "—",
                                   f"table(s) {', '.join(claim.tables)} not selected in this run"))
            continue
        out.append(evaluate_claim(claim, measured, spec, scale, labels=labels))
    by_id = {r.claim.id: r for r in out}
    return [with_preconditions(r, [by_id[rid] for rid in r.claim.requires]) for r in out]


def with_preconditions(result: ClaimResult, required: Sequence[ClaimResult]) -> ClaimResult:
    """``result`` of a claim whose statement includes the guards ``required`` checked (its ``requires``):
    its own verdict where every guard holds; *differs* where one differs; *not run* where one was not
    run; *not at this scale*, with that guard's reason, where one cannot be tested. A claim that is
    itself *not run* or *not at this scale* keeps its status, and one whose own check differs differs
    whatever its guards say (the statement includes the check)."""
    if not required or result.status in (NOT_RUN, NOT_AT_SCALE):
        return result
    measured = {**result.measured}
    for r in required:
        measured.update(r.measured)
    for status in (DIFFERS, NOT_RUN, NOT_AT_SCALE):  # the first that applies decides
        r = next((g for g in required if g.status == status), None)
        if r is None:
            continue
        if status == DIFFERS:
            detail = f"{result.detail}; but its precondition {r.claim.id} differs: {r.detail}"
            return ClaimResult(result.claim, DIFFERS, result.paper, result.ours, detail, measured)
        if result.status == DIFFERS:
            detail = f"{result.detail}; its precondition {r.claim.id} is {status} here: {r.detail}"
            return ClaimResult(result.claim, DIFFERS, result.paper, result.ours, detail, measured)
        if status == NOT_RUN:
            detail = (f"its precondition {r.claim.id} was not run: {r.detail} "
                      f"(the check alone would say {result.status}: {result.detail})")
            return ClaimResult(result.claim, NOT_RUN, result.paper, result.ours, detail, measured)
        return not_at_scale(result, f"its precondition {r.claim.id} cannot be tested here: {r.reason}",
                            f"the check alone would say {result.status}: {result.detail}", measured)
    held = ", ".join(r.claim.id for r in required)
    return replace(result, detail=f"{result.detail}; precondition {held} holds", measured=measured)


def gate_failures(results: Iterable[ClaimResult]) -> list[ClaimResult]:
    """The gated claims that differ (a non-empty list fails the run)."""
    return [r for r in results if r.gate_failed]


@dataclass(frozen=True)
class GateVerdict:
    """The CI gate's outcome for one run: ``state`` is ``"FAILED"`` (a gated claim differs), ``"passed"``
    (every gated claim the run judged holds), ``"not judged"`` (the paper has gated claims, but this run
    measured none of them, e.g. a scale without their codec) or ``"none"`` (the paper gates nothing)."""

    state: str
    failed: tuple[str, ...] = ()
    judged: int = 0
    gated: int = 0

    @property
    def detail(self) -> str:
        """What the state rests on, in words."""
        if self.state == "FAILED":
            return ", ".join(self.failed)
        if self.state == "none":
            return "no gated claim"
        if self.state == "not judged":
            return ("the gated claim was not measured in this run" if self.gated == 1
                    else f"none of the {self.gated} gated claims was measured in this run")
        if self.judged < self.gated:
            return f"{self.judged} of {self.gated} gated claims measured in this run, none differs"
        return "no gated claim differs"

    def line(self) -> str:
        """One plain line, e.g. ``CI gate: passed (no gated claim differs)``."""
        return f"CI gate: {self.state} ({self.detail})"

    def cell(self) -> str:
        """A results-table cell, e.g. ``FAILED: a, b`` or ``passed``."""
        if self.state == "FAILED":
            return f"FAILED: {self.detail}"
        if self.state == "passed" and self.judged == self.gated:
            return "passed"
        return f"{self.state} ({self.detail})"


def gate_verdict(claims: Iterable[tuple[str, bool, str]]) -> GateVerdict:
    """The gate's outcome from ``(claim id, gated, status)`` of every claim of a run. A gated claim that
    was not run, or that the scale cannot test, is not judged: it neither fails nor passes the gate."""
    gated = [(cid, status) for cid, gate, status in claims if gate]
    failed = tuple(cid for cid, status in gated if status == DIFFERS)
    judged = sum(status not in (NOT_RUN, NOT_AT_SCALE) for _, status in gated)
    state = ("FAILED" if failed else "none" if not gated else "not judged" if not judged else "passed")
    return GateVerdict(state, failed, judged, len(gated))


def gate_verdict_of(results: Iterable[ClaimResult]) -> GateVerdict:
    """:func:`gate_verdict` of evaluated claims."""
    return gate_verdict((r.claim.id, r.claim.gate, r.status) for r in results)


def falsifying_measurement(claim: Claim, spec: Spec) -> dict[str, float]:
    """Measured quantities that lie outside ``claim``'s tolerance, so its check must say ``differs``.

    Used to show that a gated claim can fail: a check that still passes on these numbers would be a
    gate that tests nothing.
    """
    q = claim.quantities
    tol = claim.tolerance
    if claim.check == "near":
        pv = spec.value(claim.paper[0]).value
        hi = pv[1] if isinstance(pv, tuple) else pv
        miss = 2.0 * tol * abs(hi) + abs(hi) + 1.0 if claim.tolerance_kind == "relative" else 2.0 * tol + abs(hi) + 1.0
        return {q[0]: hi + miss}
    if claim.check == "ratio_within":
        off = 2.0 * tol + 1.0 if claim.tolerance_kind == "relative" else 2.0 * tol + 1.0
        return {q[0]: 1.0 + off, q[1]: 1.0}
    if claim.check == "ratio_near":
        pnum, pden = (float(spec.value(ref).value) for ref in claim.paper)  # type: ignore[arg-type]
        ref = pnum / pden
        miss = (2.0 * tol + 1.0) * abs(ref) if claim.tolerance_kind == "relative" else 2.0 * tol + 1.0
        return {q[0]: ref + miss, q[1]: 1.0}
    if claim.check == "order":
        # Strictly descending with gaps far beyond any tolerance.
        step = 10.0 * (1.0 + tol)
        return {name: step ** (len(q) - i) + 100.0 * tol for i, name in enumerate(q)}
    if claim.check == "at_most":
        return {q[0]: tol + 1.0 + abs(tol)}
    raise ValueError(f"unknown claim check {claim.check!r}")  # pragma: no cover
