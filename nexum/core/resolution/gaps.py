"""The gaps a bundle leaves, as escalations for a human: required questions unanswered or answered only by
stale items (R7), conflicts that touch the plan (R5), sources down for a high-risk step (R11).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nexum.core.resolution.conflicts import conflict_touches_plan
from nexum.core.resolution.gathering import Gathered
from nexum.core.resolution.model import (
    ESCALATE_CONFLICT,
    ESCALATE_DENIED,
    ESCALATE_STALE_ONLY,
    ESCALATE_UNANSWERED,
    ESCALATE_UNREACHABLE,
    LABEL_AGENT_WRITABLE,
    STOP_ANSWERED,
    ConflictGroup,
    EscalationSpec,
    ItemKey,
    QuestionStatus,
    RequiredQuestion,
    RetrievedItem,
    SourceError,
    item_key,
)
from nexum.core.resolution.packing import Packed
from nexum.core.resolution.subjects import subject_matches
from nexum.core.trust import TrustClass


def answers_questions(item: RetrievedItem) -> bool:
    """Whether an item may answer a required question (R4a): not what the agent says (``agent_reported``),
    not anything from a source the agent can write. The executing agent never unlocks its own plan gate."""
    return item.trust_class != TrustClass.agent_reported and LABEL_AGENT_WRITABLE not in item.labels


def question_gaps(
    questions: Sequence[RequiredQuestion],
    packed: Packed,
    candidates: Mapping[ItemKey, RetrievedItem],
    risk: str,
    gathered: Gathered,
) -> tuple[list[QuestionStatus], list[EscalationSpec]]:
    """Each required question's status (R7) and the gaps that escalate: only stale answers for a high-risk
    step, or no answer (cut by the budget, a source unreachable or denied, or none retrieved). What the agent
    wrote or can write never answers (R4a, ``answers_questions``): such an item on the subject is kept and
    informs, but the question stays unanswered, so it never closes an escalation or opens the plan gate."""
    denials, errors = gathered.denials, gathered.errors
    statuses: list[QuestionStatus] = []
    escalations: list[EscalationSpec] = []
    denied_sources = tuple(sorted({d.source for d in denials}))
    error_sources = tuple(sorted({e.source for e in errors}))
    for question in questions:

        def on_subject(item: RetrievedItem, question: RequiredQuestion = question) -> bool:
            return any(subject_matches(item.subject, s) for s in question.subjects)

        speaking = [item for item in packed.selected if on_subject(item)]
        answering = [item for item in speaking if answers_questions(item)]
        informing = [item for item in speaking if not answers_questions(item)]
        digests = tuple(item.digest for item in answering)
        subjects_text = ", ".join(question.subjects)
        if answering and risk == "high" and all(item.stale for item in answering):
            statuses.append(
                QuestionStatus(question.question, question.subjects, ESCALATE_STALE_ONLY, digests)
            )
            escalations.append(
                EscalationSpec(
                    kind=ESCALATE_STALE_ONLY,
                    missing=f"a fresh answer to: {question.question}",
                    reason="a high-risk step cannot rest only on stale items: "
                    + "; ".join(sorted({f"{i.source}:{i.locator}: {i.stale_reason}" for i in answering})),
                    subjects=question.subjects,
                    sources=tuple(sorted({i.source for i in answering})),
                    item_digests=digests,
                )
            )
            continue
        if answering:
            conflicted = any(item.conflict_group for item in answering)
            status = ESCALATE_CONFLICT if conflicted else STOP_ANSWERED
            statuses.append(QuestionStatus(question.question, question.subjects, status, digests))
            continue
        statuses.append(QuestionStatus(question.question, question.subjects, ESCALATE_UNANSWERED, ()))
        cut = [
            left
            for left in packed.left_out
            if on_subject(candidates[item_key(left)]) and answers_questions(candidates[item_key(left)])
        ]
        if cut:
            kind, why, involved = ESCALATE_UNANSWERED, "the answering items did not fit the budget", ()
        elif informing:
            kind, involved = ESCALATE_UNANSWERED, tuple(sorted({i.source for i in informing}))
            classes = ", ".join(sorted({i.trust_class.name for i in informing}))
            why = (
                f"only {classes} content the executing agent wrote or can write speaks to {subjects_text}: "
                "it informs, and never answers a required question"
            )
        elif errors:
            kind = ESCALATE_UNREACHABLE
            why = "; ".join(f"source {e.source!r} unavailable ({e.kind}): {e.reason}" for e in errors)
            involved = error_sources
        elif denials:
            kind = ESCALATE_DENIED
            why = "; ".join(f"{d.source}: {d.reason}" for d in denials)
            involved = denied_sources
        else:
            kind = ESCALATE_UNANSWERED
            why = f"no authorized source returned an item on {subjects_text}"
            involved = ()
        escalations.append(
            EscalationSpec(
                kind=kind,
                missing=f"an answer to: {question.question}",
                reason=why,
                subjects=question.subjects,
                sources=involved,
                item_digests=tuple(left.digest for left in cut) or tuple(i.digest for i in informing),
            )
        )
    return statuses, escalations


def conflict_gaps(
    groups: Sequence[ConflictGroup],
    step_inputs: Sequence[str],
    success_criteria: Sequence[str],
    questions: Sequence[RequiredQuestion],
) -> list[EscalationSpec]:
    """Conflicts that touch the plan are surfaced, never settled by recency (R5)."""
    return [
        EscalationSpec(
            kind=ESCALATE_CONFLICT,
            missing=f"which claim about {group.subject!r} holds",
            reason=f"{len(group.members)} items from "
            + ", ".join(sorted({f"{m.source}:{m.locator}" for m in group.members}))
            + " make different claims on a subject the plan depends on",
            subjects=(group.subject,),
            sources=tuple(sorted({m.source for m in group.members})),
            item_digests=tuple(m.digest for m in group.members),
            conflict_group=group.group_id,
        )
        for group in groups
        if conflict_touches_plan(group, step_inputs, success_criteria, questions)
    ]


def unreachable_gaps(errors: Sequence[SourceError]) -> list[EscalationSpec]:
    """For a high-risk step, every source that could not answer is a gap of its own (R11)."""
    return [
        EscalationSpec(
            kind=ESCALATE_UNREACHABLE,
            missing=f"content from source {error.source!r}",
            reason=f"source unavailable ({error.kind}): {error.reason}; a high-risk step needs every "
            "declared source",
            sources=(error.source,),
        )
        for error in errors
    ]
