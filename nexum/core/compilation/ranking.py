"""The order in which a compile tries its items (C4, C5): the query, relevance by words and by meaning, the
relevance floor, feedback and named-entity links, and each evidence and state section ranked with its
costs."""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from operator import attrgetter
from typing import NamedTuple

from nexum.core.compilation.costs import lower_costs, verified_label_tokens
from nexum.core.compilation.exclusions import LINKED_PREFIX
from nexum.core.compilation.model import DEFAULT_RELEVANCE_FLOOR, EVIDENCE_KINDS, CompileInput, ContextItem
from nexum.core.compilation.versions import COMPILER_VERSION, FEEDBACK_FROM, MEANING_FROM, RELEVANT_FROM
from nexum.core.errors import ValidationFailed
from nexum.core.tokens import TokenCounter
from nexum.core.world.entities import entities_of, with_heads
from nexum.core.world.relevance import Document, bm25_scores, query_stems, stems_of, terms_of
from nexum.core.world.vectors import cosines, quantize

VERIFIED_BOOST = 0.1
"""A verified fact ranks as if its score were this much higher (a tie-breaker among near-equals)."""
LEXICAL_WEIGHT = 0.2
"""From version 5, an item's relevance is this share of its BM25 score (as a share of the best one) plus the
rest of its cosine with the step (negative cosines count as 0); without an embedder, BM25 alone. Chosen on
bench/context_quality.py: words still find exact names, meaning finds what is worded differently."""
TYPICAL_PRIOR = 10
"""Zero scores the typical candidate's score is taken among (``_typical_score``): a section of a few items has
no typical candidate, so its floor is a share of the best score alone."""
LINK_WEIGHT = 0.5
"""A fact let in through a named entity ranks as if its score were this share of the score of what linked
it (a relevant fact's, or the best score for an entity of the step's own inputs and focus), if that is more
than its own."""
LINK_FANOUT = 6
"""An entity named by more facts than this is too common to link through (``billing-api`` in a world of
billing facts): it would let half the world in."""
FEEDBACK_DEPTH = 3
"""From version 6, the facts' query vector is the step's plus this many of its best facts' vectors (each
counted once, the step's ``FEEDBACK_DEPTH`` times: half the new direction is the step's own). A terse step
worded one way says little by meaning; its best facts, found by its own words, say what it is about in
the world's words, which finds what is worded differently. Chosen on bench/context_quality.py: 2 let
fewer needed facts in, 5 and more drift toward the best facts' other topics."""


_by_id = attrgetter("id")
_by_kind = attrgetter("kind")
_by_position = attrgetter("position")


def _validate_kind(items: Sequence[ContextItem], *, name: str, kind: str) -> None:
    if set(map(_by_kind, items)) - {kind}:
        raise ValidationFailed(f"{name} may only hold items of kind {kind}", field=name)
    _validate_unique_ids(name, items)


def _validate_unique_ids(name: str, items: Sequence[ContextItem]) -> None:
    if len(set(map(_by_id, items))) != len(items):
        raise ValidationFailed(f"{name}: two items of one kind share an id", field=name)


class RankedSection(NamedTuple):
    """One section's candidates in the order the compiler tries them, with their ids and their costs from
    metadata (an ``array`` of integers: a large world's costs take no object each)."""

    items: tuple[ContextItem, ...]
    ids: tuple[str, ...]
    costs: Sequence[int]
    relevant: int | None = None
    """How many of ``items`` (the first ones) pass the relevance floor; ``None``: all of them."""
    links: Mapping[str, str] = {}
    """Why each relevant item that is there only through a named entity is there (``linked to fact <id>
    through <entity>``), by id: what its exclusion record says when it does not fit."""


class RankedSections(NamedTuple):
    """The evidence (``diagnostic``, ``code``) and state sections of one compile input, each ranked."""

    diagnostic: RankedSection
    code: RankedSection
    failure: RankedSection
    decision: RankedSection
    fact: RankedSection
    artifact: RankedSection
    progress: RankedSection


SECTION_FIELDS = {
    "failure": "failures",
    "decision": "decisions",
    "fact": "facts",
    "artifact": "artifacts",
    "progress": "progress",
}


class Query(NamedTuple):
    """What facts and evidence are ranked against: the query's terms (normalized from version 4), and from
    version 5 its int8 vector (empty without an embedder) and the named entities of the step's inputs and
    focus (what second hops start from)."""

    terms: frozenset[str]
    vector: bytes = b""
    entities: frozenset[str] = frozenset()


def query_of(compile_input: CompileInput, version: int = COMPILER_VERSION) -> Query:
    """The query of ``compile_input`` for renderer ``version``: before version 4 the raw words of the goal,
    the step's objective and inputs; in version 4 the normalized words of the whole step and the focus; from
    version 5 the normalized words of the goal and ``query_text``, the vector of ``query_text`` and the
    entities of the inputs and focus."""
    step = compile_input.step
    if version < RELEVANT_FROM:
        return Query(frozenset(terms_of(" ".join((compile_input.goal, step.objective, *step.inputs)))))
    if version >= MEANING_FROM:
        return Query(
            query_stems(f"{compile_input.goal}\n{query_text(compile_input)}"),
            compile_input.query_vector,
            frozenset(entities_of(*step.inputs, compile_input.focus)),
        )
    return Query(
        query_stems(
            " ".join(
                (
                    compile_input.goal,
                    compile_input.parent_objective,
                    step.objective,
                    *step.inputs,
                    *compile_input.constraints,
                    *compile_input.success_criteria,
                    compile_input.focus,
                )
            )
        )
    )


def query_text(compile_input: CompileInput) -> str:
    """The text a version-5 compile embeds for its query: the step's own words (the parent step's objective,
    the objective, inputs, constraints, success criteria) and the focus. The goal joins only a compile of the
    goal itself: its meaning is shared by every task under it, and averaged into the step's it pulls in
    everything about the project at large. (The goal's words do join the lexical query, ``query_of``: a terse
    step leans on them, and an exact word of the goal is a sharper signal than its averaged meaning.)"""
    step = compile_input.step
    parts = [compile_input.parent_objective, step.objective, *step.inputs]
    parts += [*compile_input.constraints, *compile_input.success_criteria, compile_input.focus]
    if not step.objective.strip():
        parts.insert(0, compile_input.goal)
    return "\n".join(part for part in parts if part.strip())


def rank_section(
    kind: str,
    items: tuple[ContextItem, ...],
    *,
    query: Query,
    verified_label: int,
    version: int = COMPILER_VERSION,
    floor: float = DEFAULT_RELEVANCE_FLOOR,
) -> RankedSection:
    """``items`` (all of ``kind``, ids unique) validated and ranked: evidence by relevance to ``query``
    (from version 5 only what passes ``floor``), facts by relevance (before version 4 verified first; from it
    only those above ``floor`` are relevant; from version 5 those linked through a named entity too), the
    other state kinds newest first; ties by id."""
    name = SECTION_FIELDS.get(kind, "evidence")
    _validate_kind(items, name=name, kind=kind)
    relevant = None
    links: Mapping[str, str] = {}
    if version >= MEANING_FROM and (kind in EVIDENCE_KINDS or kind == "fact"):
        ordered, relevant, links = _relevant_first(
            items, query, floor, follow_links=kind == "fact", version=version
        )
    elif kind in EVIDENCE_KINDS:
        ordered = _by_relevance(items, query.terms, version)
    elif kind == "fact" and version >= RELEVANT_FROM:
        ordered, relevant = _relevant_facts_first(items, query.terms, floor)
    elif kind == "fact":
        ordered = _facts_in_order(items, query.terms)
    else:
        ordered = _newest_first(items)
    return RankedSection(
        ordered,
        tuple(map(_by_id, ordered)),
        lower_costs(ordered, verified_label if kind == "fact" else 0),
        relevant,
        links,
    )


def evidence_by_kind(evidence: Sequence[ContextItem]) -> dict[str, tuple[ContextItem, ...]]:
    """The evidence split by kind; any other kind is refused."""
    split = {kind: tuple(item for item in evidence if item.kind == kind) for kind in EVIDENCE_KINDS}
    if sum(map(len, split.values())) != len(evidence):
        raise ValidationFailed(
            f"evidence may only hold items of kind {' or '.join(EVIDENCE_KINDS)}", field="evidence"
        )
    return split


def rank_sections(
    compile_input: CompileInput, counter: TokenCounter, version: int = COMPILER_VERSION
) -> RankedSections:
    """Every evidence and state section of ``compile_input`` ranked (``rank_section``) for ``version``."""
    query = query_of(compile_input, version)
    label = verified_label_tokens(counter)
    evidence = evidence_by_kind(compile_input.evidence)
    state = {kind: getattr(compile_input, field) for kind, field in SECTION_FIELDS.items()}
    floor = compile_input.relevance_floor
    return RankedSections(
        **{
            kind: rank_section(kind, items, query=query, verified_label=label, version=version, floor=floor)
            for kind, items in (*evidence.items(), *state.items())
        }
    )


NEWEST_FIRST_KINDS = ("failure", "decision", "artifact", "progress")
"""The sections ranked newest first by every version, with no floor (``rank_section``)."""


def newest_first_extended(section: RankedSection, added: Sequence[ContextItem]) -> RankedSection | None:
    """``rank_section`` of a newest-first section's items and ``added`` (of its kind, ids new to it), from
    ``section`` (those items ranked): the added items ranked in front of it when every one is newer than all
    of it, as an agent's new notes are; ``None`` otherwise (rank them all again). An agent loop's compile
    then does not sort the task's every note again."""
    if not added:
        return section
    if section.items and min(map(_by_position, added)) <= section.items[0].position:
        return None
    kind = section.items[0].kind if section.items else added[0].kind
    _validate_kind(added, name=SECTION_FIELDS[kind], kind=kind)
    ordered = _newest_first(added)
    return RankedSection(
        (*ordered, *section.items),
        (*map(_by_id, ordered), *section.ids),
        lower_costs(ordered, 0) + array("q", section.costs),
    )


def _newest_first(items: Iterable[ContextItem]) -> tuple[ContextItem, ...]:
    """Highest position first, equal positions by id (two stable sorts: cheaper than tuple keys)."""
    return tuple(sorted(sorted(items, key=_by_id), key=_by_position, reverse=True))


def _by_relevance(
    items: Sequence[ContextItem], query: frozenset[str], version: int
) -> tuple[ContextItem, ...]:
    """Most relevant first (BM25 over the items given), ties (and no relevance at all) by id."""
    scores = bm25_scores(query, items) if version < RELEVANT_FROM else _normalized_scores(query, items)
    ordered = sorted(items, key=_by_id)
    ordered.sort(key=lambda item: scores.get(item.id, 0.0), reverse=True)
    return tuple(ordered)


def _facts_in_order(facts: Sequence[ContextItem], query: frozenset[str]) -> tuple[ContextItem, ...]:
    """Verified first, then by relevance to goal and step (BM25 over all facts), ties by id."""
    scores = bm25_scores(query, facts)
    ordered = sorted(facts, key=_by_id)
    ordered.sort(key=lambda fact: scores.get(fact.id, 0.0), reverse=True)
    ordered.sort(key=lambda fact: not fact.verified)
    return tuple(ordered)


def _relevant_facts_first(
    facts: Sequence[ContextItem], query: frozenset[str], floor: float
) -> tuple[tuple[ContextItem, ...], int]:
    """The facts scoring at least ``floor`` times the best score (BM25 over all facts, normalized words),
    most relevant first with verified facts boosted by ``VERIFIED_BOOST``, then the others by id; and how
    many are relevant. A floor of 0 turns the floor off: every fact is relevant, those sharing no word with
    the query last (verified first among them). Ties by id."""
    scores = _normalized_scores(query, facts)
    threshold = floor * max(scores.values(), default=0.0)
    relevant = [fact for fact in facts if not floor or (fact.id in scores and scores[fact.id] >= threshold)]
    relevant.sort(key=_by_id)
    boost, tie = 1.0 + VERIFIED_BOOST, math.ulp(0.0)
    relevant.sort(
        key=lambda fact: (scores.get(fact.id, 0.0) or tie) * (boost if fact.verified else 1.0), reverse=True
    )
    chosen = {fact.id for fact in relevant}
    rest = sorted((fact for fact in facts if fact.id not in chosen), key=_by_id)
    return (*relevant, *rest), len(relevant)


def relevance_scores(items: Sequence[ContextItem], query: Query) -> dict[str, float]:
    """Version 5's relevance of each item to ``query``, by id (items scoring 0 are absent): ``LEXICAL_WEIGHT``
    times its BM25 score as a share of the best one, plus the rest times its cosine with the query's vector
    (below 0 counts as 0; an item without a vector has none). Without a query vector, the BM25 share alone."""
    lexical = _normalized_scores(query.terms, items)
    best = max(lexical.values(), default=0.0)
    if not query.vector:
        return {item_id: score / best for item_id, score in lexical.items()}
    meaning = cosines(query.vector, [item.vector or b"" for item in items])
    scores: dict[str, float] = {}
    for item, cosine in zip(items, meaning, strict=True):
        words = lexical.get(item.id, 0.0) / best if best else 0.0
        score = LEXICAL_WEIGHT * words + (1.0 - LEXICAL_WEIGHT) * max(cosine, 0.0)
        if score > 0.0:
            scores[item.id] = score
    return scores


def _relevant_first(
    items: Sequence[ContextItem],
    query: Query,
    floor: float,
    *,
    follow_links: bool,
    version: int = COMPILER_VERSION,
) -> tuple[tuple[ContextItem, ...], int, dict[str, str]]:
    """Version 5: the items scoring at least ``floor`` of the way from the typical score (``_typical_score``)
    to the best (``relevance_scores``), with,
    when ``follow_links``, the items that share a named entity with one of them or with the step's inputs
    and focus (an entity at most ``LINK_FANOUT`` items name; one hop), and every item ``given`` for this
    compile; most relevant first (a linked item
    at ``LINK_WEIGHT`` of what linked it, if that is more than its own score; a verified fact boosted by
    ``VERIFIED_BOOST``), then the others by id; how many are relevant; and why each linked one is there. A
    floor of 0 makes every item relevant. From version 6 a fact is relevant too when it passes the floor
    against the fed-back query (``_fed_back``), ranked by the higher of its two scores: feedback adds what the
    step's best facts find, it never drops what the step itself finds (a focus on something else than those
    facts keeps its own). Facts link through entity heads too. Ties by id."""
    scores = relevance_scores(items, query)
    ranked = _above_floor(items, scores, floor)
    if follow_links and version >= FEEDBACK_FROM:
        fed_back = relevance_scores(items, _fed_back(items, query, scores))
        for item_id, score in _above_floor(items, fed_back, floor).items():
            ranked[item_id] = max(score, ranked.get(item_id, 0.0))
    links: dict[str, str] = {}
    if follow_links and floor:
        links = _linked(items, ranked, query, max(scores.values(), default=0.0), version)
    boost, tie = 1.0 + VERIFIED_BOOST, math.ulp(0.0)
    relevant = sorted((item for item in items if item.id in ranked), key=_by_id)
    relevant.sort(key=lambda item: (ranked[item.id] or tie) * (boost if item.verified else 1.0), reverse=True)
    rest = sorted((item for item in items if item.id not in ranked), key=_by_id)
    return (*relevant, *rest), len(relevant), links


def _above_floor(items: Sequence[ContextItem], scores: Mapping[str, float], floor: float) -> dict[str, float]:
    """The items scoring at least ``floor`` of the way from the typical score to the best (every item for a
    floor of 0, and every ``given`` one), with their scores (0 for an unscored one)."""
    best = max(scores.values(), default=0.0)
    typical = _typical_score(items, scores)
    threshold = typical + floor * (best - typical)
    return {
        item.id: scores.get(item.id, 0.0)
        for item in items
        if not floor or item.given or (item.id in scores and scores[item.id] >= threshold)
    }


def _fed_back(items: Sequence[ContextItem], query: Query, scores: Mapping[str, float]) -> Query:
    """``query`` with its vector moved toward the vectors of the ``FEEDBACK_DEPTH`` best-scoring items
    (ties by id; items without a vector of the query's length skipped): the integer sum of the query's
    vector times ``FEEDBACK_DEPTH`` and theirs, quantized again, so the same bytes everywhere. Unchanged
    without a query vector or a scored item."""
    if not query.vector:
        return query
    dimensions = len(query.vector)
    with_vector = (item for item in items if item.id in scores and len(item.vector or b"") == dimensions)
    best = heapq.nsmallest(FEEDBACK_DEPTH, with_vector, key=lambda item: (-scores[item.id], item.id))
    if not best:
        return query
    total = [component * FEEDBACK_DEPTH for component in _signed(query.vector)]
    for item in best:
        total = [sum_ + component for sum_, component in zip(total, _signed(item.vector or b""), strict=True)]
    return query._replace(vector=quantize(total))


def _signed(vector: bytes) -> list[int]:
    """The int8 components of ``vector``."""
    return [byte - 256 if byte > 127 else byte for byte in vector]


def _typical_score(items: Sequence[ContextItem], scores: Mapping[str, float]) -> float:
    """The median score of ``items`` counted with ``TYPICAL_PRIOR`` items that score 0: in a large world the
    score of an unrelated candidate (by meaning every text scores a little), in a small one 0."""
    values = sorted([scores.get(item.id, 0.0) for item in items] + [0.0] * TYPICAL_PRIOR)
    return values[(len(values) - 1) // 2]


def _linked(
    items: Sequence[ContextItem], ranked: dict[str, float], query: Query, best: float, version: int
) -> dict[str, str]:
    """Add to ``ranked`` the items one named entity away from the ranked items or the query's entities
    (``_relevant_first``; from version 6 the heads of qualified names count as entities too), scored there;
    return why each added one is there. Deterministic: the entities are visited in sorted order and the
    first link found (the strongest) is the one recorded."""
    entities_of_item: Callable[[ContextItem], Iterable[str]] = attrgetter("entities")
    query_entities: Iterable[str] = query.entities
    if version >= FEEDBACK_FROM:
        entities_of_item = _entities_with_heads
        query_entities = with_heads(query.entities)
    named_by: dict[str, list[ContextItem]] = {}
    for item in items:
        for entity in entities_of_item(item):
            named_by.setdefault(entity, []).append(item)
    sources: dict[str, tuple[float, str]] = {entity: (best, "the step") for entity in query_entities}
    for item in items:
        score = ranked.get(item.id)
        if score is None:
            continue
        for entity in entities_of_item(item):
            if score > sources.get(entity, (-1.0, ""))[0]:
                sources[entity] = (score, f"fact {item.id}")
    found: dict[str, tuple[float, str]] = {}
    for entity in sorted(sources):
        named = named_by.get(entity, ())
        if len(named) > LINK_FANOUT:
            continue
        score, via = sources[entity]
        for item in named:
            if item.id in ranked:
                continue
            linked = max(LINK_WEIGHT * score, 0.0)
            if item.id not in found or linked > found[item.id][0]:
                found[item.id] = (linked, f"{LINKED_PREFIX} to {via} through {entity}")
    links = {}
    for item_id, (linked, why) in found.items():
        ranked[item_id] = max(linked, ranked.get(item_id, 0.0))
        links[item_id] = why
    return links


def _entities_with_heads(item: ContextItem) -> frozenset[str]:
    return _heads_memo(item.entities)


_heads_memo = lru_cache(maxsize=1 << 16)(with_heads)
"""``with_heads`` of an item's entities (a tuple), kept: a world's items are ranked again on every compile."""


def _normalized_scores(query: frozenset[str], items: Sequence[ContextItem]) -> dict[str, float]:
    """BM25 scores of the items over their normalized terms (``relevance.stems_of``): the stems the store
    computed once (the candidate cache's items carry them), made here for the items that have none."""
    if None in map(_stems, items):
        documents = [
            Document(item.id, stems_of(item.terms) if item.stems is None else item.stems) for item in items
        ]
        return bm25_scores(query, documents)
    return bm25_scores(query, items, terms_of_document=_stems)


_stems = attrgetter("stems")
