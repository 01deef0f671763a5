"""The context resolver (SPEC R1–R8, R11): ``resolve_bundle`` runs the resolver's phases, each in a module
of its own, over plain values; no I/O.

How a service uses it:

1. ``authorization.plan_retrievals(grant, sources, now=…, requested=…)`` says which (source, scopes) may be
   called and which requests are denied (each ``Denial`` is recorded as an event by the service; R2).
2. The service calls only ``plan.calls`` and wraps each outcome in a ``SourceResult`` (items, or the error
   of a source that is down; R11).
3. ``resolve_bundle(...)`` applies trust (R3, R4), staleness (R6), conflicts (R5), the budget and the stopping
   rules (R7) and returns the ``Bundle`` (R8), named by its content digest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from nexum.core.digests import digest_of
from nexum.core.errors import ValidationFailed
from nexum.core.resolution.authorization import plan_retrievals
from nexum.core.resolution.conflicts import mark_conflicts
from nexum.core.resolution.gaps import conflict_gaps, question_gaps, unreachable_gaps
from nexum.core.resolution.gathering import Gathered, gather
from nexum.core.resolution.model import (
    ESCALATE_CONFLICT,
    RISKS,
    STOP_ANSWERED,
    STOP_BUDGET_SPENT,
    STOP_DENIED,
    STOP_EXHAUSTED,
    STOP_UNREACHABLE,
    Bundle,
    GrantedScopes,
    RequiredQuestion,
    ResolveBudget,
    RetrievalPlan,
    SourceResult,
    SourceSpec,
    require_aware,
)
from nexum.core.resolution.packing import Packed, pack, selection_order


def resolve_bundle(
    *,
    grant: GrantedScopes | None,
    sources: Sequence[SourceSpec],
    results: Sequence[SourceResult],
    questions: Sequence[RequiredQuestion],
    budget: ResolveBudget,
    risk: str,
    now: datetime,
    count_tokens: Callable[[str], int],
    signing_key: bytes | str | None = None,
    requested: Mapping[str, Sequence[str]] | None = None,
    step_inputs: Sequence[str] = (),
    success_criteria: Sequence[str] = (),
) -> Bundle:
    """Assemble the bundle from results already fetched. Deterministic: the order of sources, results and
    items does not change the bundle or its digest.

    Results from a source the plan did not allow are discarded and recorded as denials; a planned source
    without a result counts as unreachable. Items answering required questions are selected first, then items
    on the plan's subjects, then the rest; fresh before stale, higher trust first. Members of a conflict group
    are taken together when they fit. The budget is never exceeded; what does not fit is listed with why.

    The phases: gather the candidates (``gather``), group the conflicts (``mark_conflicts``), order
    (``selection_order``) and pack them (``pack``), find the gaps (``question_gaps``, ``conflict_gaps``,
    ``unreachable_gaps``), and say why the resolver stopped (``_stop_reason``).
    """
    require_aware(now, "now")
    if risk not in RISKS:
        raise ValidationFailed(f"risk must be one of {', '.join(RISKS)}", field="risk")
    questions = tuple(questions)
    plan = plan_retrievals(grant, sources, now=now, requested=requested)
    gathered = gather(plan, {spec.name: spec for spec in sources}, results, signing_key, now)
    candidates, groups = mark_conflicts(gathered.candidates)
    ordered = selection_order(candidates, questions, tuple(step_inputs) + tuple(success_criteria))
    packed = pack(ordered, budget, count_tokens)
    statuses, gaps = question_gaps(questions, packed, candidates, risk, gathered)
    gaps += conflict_gaps(groups, step_inputs, success_criteria, questions)
    if risk == "high":  # a source that is down matters on its own for a high-risk step (R11)
        gaps += unreachable_gaps(gathered.errors)

    answered = all(status.status in (STOP_ANSWERED, ESCALATE_CONFLICT) for status in statuses)
    escalations = sorted({e.key: e for e in gaps}.values(), key=lambda e: (e.kind, e.missing, e.key))
    errors, denials = gathered.errors, gathered.denials
    incomplete_reasons = [
        f"source {e.source!r} unavailable ({e.kind}): {e.reason}"
        for e in sorted(errors, key=lambda e: (e.source, e.kind, e.reason))
    ]
    incomplete_reasons += [f"{e.kind}: {e.missing} — {e.reason}" for e in escalations]
    bundle = Bundle(
        items=packed.selected,
        left_out_by_budget=packed.left_out,
        denials=tuple(sorted(set(denials), key=lambda d: (d.source, d.code, d.scopes, d.reason))),
        source_errors=tuple(sorted(set(errors), key=lambda e: (e.source, e.kind, e.reason))),
        conflict_groups=groups,
        questions=tuple(statuses),
        escalations=tuple(escalations),
        stop_reason=_stop_reason(questions, answered, packed, gathered, plan),
        complete=not errors and not escalations and answered,
        incomplete_reasons=tuple(incomplete_reasons),
        risk=risk,
        tokens_used=packed.tokens_used,
    )
    return replace(bundle, digest=digest_of(bundle.content()))


def _stop_reason(
    questions: Sequence[RequiredQuestion],
    answered: bool,
    packed: Packed,
    gathered: Gathered,
    plan: RetrievalPlan,
) -> str:
    """Why the resolver stopped (R7): the questions answered, the budget spent, a source unreachable or
    denied, or the sources exhausted."""
    if questions and answered:
        return STOP_ANSWERED
    if packed.left_out:
        return STOP_BUDGET_SPENT
    if gathered.errors:
        return STOP_UNREACHABLE
    if gathered.denials and (questions or not plan.calls):
        return STOP_DENIED
    if questions:
        return STOP_EXHAUSTED
    return STOP_ANSWERED  # nothing was required and everything retrieved was considered
