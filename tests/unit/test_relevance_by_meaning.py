"""Compiler versions 5 and 6 (issue 24): relevance by meaning, the floor, second hops, and exact replay across
processes, with the real embedder and the real cl100k_base counter, no database."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

from nexum.adapters.embedding import embedder_id, embedder_named
from nexum.adapters.tokenization import counter_for
from nexum.core.catalog.budgets import ModelBudget
from nexum.core.compilation.compiler import compile_context
from nexum.core.compilation.model import CompileInput, ContextItem, Step
from nexum.core.compilation.ranking import (
    FEEDBACK_DEPTH,
    _fed_back,
    query_of,
    query_text,
    rank_sections,
    relevance_scores,
)
from nexum.core.world.entities import entities_of
from nexum.core.world.vectors import quantize

COUNTER = counter_for("cl100k_base")
EMBEDDER = embedder_named("wordllama")
SMALL = ModelBudget("small", 8_000, 6, "low", 2_048, 32_768)
GOAL = "Keep the platform healthy"
STEP = Step("s1", "Rotate the database password without downtime", ("deploy/db.yaml",))

UNRELATED = (
    "The quarterly offsite is in Lisbon this year.",
    "Design reviews happen on Tuesday afternoons.",
    "The marketing site uses the brand's new color palette.",
    "New hires get a laptop and a welcome kit on their first day.",
    "The support team answers tickets within four hours.",
    "Expense reports are approved by the team lead.",
    "The mobile app's onboarding has three screens.",
    "Customer interviews are summarized in the research wiki.",
    "The sales dashboard shows revenue by region.",
    "Holiday schedules are posted in the team calendar.",
    "The newsletter goes out on the first Monday of the month.",
    "Office plants are watered on Wednesdays.",
)
OTHER_WORDING = "The Postgres user secret changes with zero outage for clients."
RELEVANT = (
    "Rotating the database password needs the new secret in deploy/db.yaml before the old one is dropped."
)
LINKING = "The database password is read by the pooler from PGBOUNCER_AUTH_FILE."
LINKED = "PGBOUNCER_AUTH_FILE is excluded from the marketing team's newsletter templates."
KITCHEN = "The office kitchen is cleaned on Fridays."


def fact(item_id: str, text: str, *, embedder=EMBEDDER, verified: bool = False) -> ContextItem:
    item = ContextItem.from_text("fact", item_id, text, counter=COUNTER, verified=verified)
    vector = embedder.embed([text])[0] if embedder is not None else None
    return dataclasses.replace(item, vector=vector, entities=entities_of(text))


def world(*facts: ContextItem, embedder=EMBEDDER, **overrides: object) -> CompileInput:
    unrelated = tuple(fact(f"u{n:02d}", text, embedder=embedder) for n, text in enumerate(UNRELATED))
    compile_input = CompileInput(goal=GOAL, step=STEP, facts=(*facts, *unrelated), **overrides)
    if embedder is None:
        return compile_input
    vector = embedder.embed([query_text(compile_input)])[0]
    return dataclasses.replace(compile_input, query_vector=vector, embedder=embedder_id(embedder))


def included_facts(compile_input: CompileInput, budget: ModelBudget = SMALL) -> list[str]:
    result = compile_context(compile_input, budget=budget, counter=COUNTER)
    return [item_id for kind, item_id in result.included if kind == "fact"]


def test_a_fact_sharing_no_word_with_the_step_is_included_when_it_is_nearest_by_meaning():
    with_meaning = included_facts(world(fact("other", OTHER_WORDING)))
    assert with_meaning[0] == "other"
    words_only = compile_context(
        world(fact("other", OTHER_WORDING, embedder=None), embedder=None), budget=SMALL, counter=COUNTER
    )
    [record] = [record for record in words_only.excluded if record.id == "other"]
    assert record.reason == "below the relevance floor"


def test_an_unrelated_verified_fact_is_below_relevance_while_a_relevant_unverified_one_is_included():
    result = compile_context(
        world(
            fact("relevant", RELEVANT),
            fact("office", KITCHEN, verified=True),
        ),
        budget=SMALL,
        counter=COUNTER,
    )
    included = [item_id for _, item_id in result.included]
    assert "relevant" in included and "office" not in included
    [record] = [record for record in result.excluded if record.id == "office"]
    assert record.reason == "below the relevance floor"
    assert result.exclusion_summary()["by_reason"]["below_relevance"] >= 1


def test_a_fact_sharing_a_named_entity_with_a_relevant_fact_is_a_second_hop_and_says_so_when_left_out():
    assert "linked" not in included_facts(world(fact("relevant", RELEVANT), fact("linked", LINKED)))
    hop = world(fact("relevant", RELEVANT), fact("linking", LINKING), fact("linked", LINKED))
    assert {"relevant", "linking", "linked"} <= set(included_facts(hop))
    long_linked = fact("linked", LINKED + " Archived." * 9_000)
    left_out = compile_context(
        world(fact("relevant", RELEVANT), fact("linking", LINKING), long_linked),
        budget=SMALL,
        counter=COUNTER,
    )
    [record] = [record for record in left_out.excluded if record.id == "linked"]
    assert record.reason.startswith("linked to fact linking through pgbouncer_auth_file; needed ")
    assert left_out.exclusion_summary()["by_reason"]["token_budget"] >= 1


def test_from_version_6_a_fact_naming_the_head_of_a_qualified_name_is_a_second_hop():
    qualified = "Rotating the database password restarts PgPool.reload on every node of deploy/db.yaml."
    head = "PgPool keeps its marketing newsletter templates in a separate repository."
    hop = world(fact("relevant", qualified), fact("head", head))
    assert "head" in included_facts(hop)
    assert rank_sections(hop, COUNTER).fact.links["head"] == "linked to fact relevant through pgpool"
    version_5 = compile_context(hop, budget=SMALL, counter=COUNTER, version=5)
    assert "head" not in [item_id for _, item_id in version_5.included]


def test_the_fed_back_query_is_the_steps_vector_plus_its_best_facts_exactly_and_in_any_order():
    facts = tuple(fact(f"f{n}", text) for n, text in enumerate((RELEVANT, LINKING, OTHER_WORDING, KITCHEN)))
    compile_input = world(*facts)
    query = query_of(compile_input)
    scores = relevance_scores(compile_input.facts, query)
    best = sorted(compile_input.facts, key=lambda item: (-scores[item.id], item.id))[:FEEDBACK_DEPTH]
    total = [FEEDBACK_DEPTH * component for component in signed(query.vector)]
    for item in best:
        total = [sum_ + component for sum_, component in zip(total, signed(item.vector), strict=True)]
    fed_back = _fed_back(compile_input.facts, query, scores)
    assert fed_back.vector == quantize(total) != query.vector
    assert _fed_back(compile_input.facts[::-1], query, scores) == fed_back
    assert _fed_back(compile_input.facts, query._replace(vector=b""), scores).vector == b""


def signed(vector: bytes) -> list[int]:
    return [byte - 256 if byte > 127 else byte for byte in vector]


def test_the_focus_changes_the_ranking_and_is_part_of_the_digest():
    plain = world(fact("relevant", RELEVANT), fact("kitchen", KITCHEN))
    focused = world(
        fact("relevant", RELEVANT), fact("kitchen", KITCHEN), focus="who cleans the office kitchen"
    )
    assert "kitchen" not in included_facts(plain) and "kitchen" in included_facts(focused)
    first = compile_context(focused, budget=SMALL, counter=COUNTER)
    assert compile_context(focused, budget=SMALL, counter=COUNTER).digest == first.digest
    assert compile_context(plain, budget=SMALL, counter=COUNTER).digest != first.digest


def test_the_embedder_is_part_of_the_digest():
    compiled = compile_context(world(fact("other", OTHER_WORDING)), budget=SMALL, counter=COUNTER)
    renamed = compile_context(
        dataclasses.replace(world(fact("other", OTHER_WORDING)), embedder="another@1"),
        budget=SMALL,
        counter=COUNTER,
    )
    assert compiled.canonical_form()["embedder"] == embedder_id(EMBEDDER)
    assert renamed.prompt_block == compiled.prompt_block and renamed.digest != compiled.digest


PROGRAM = """
import json, sys
sys.path.insert(0, {root!r})
from tests.unit.test_relevance_by_meaning import COUNTER, SMALL, fact, world, RELEVANT, LINKING, LINKED
from nexum.core.compilation.compiler import compile_context
result = compile_context(world(fact("r", RELEVANT), fact("linking", LINKING), fact("linked", LINKED)),
                         budget=SMALL, counter=COUNTER)
print(json.dumps([result.digest, result.prompt_block]))
"""


def test_the_same_world_and_budget_give_byte_identical_prompts_in_two_processes():
    import pathlib

    root = str(pathlib.Path(__file__).resolve().parents[2])
    here = compile_context(
        world(fact("r", RELEVANT), fact("linking", LINKING), fact("linked", LINKED)),
        budget=SMALL,
        counter=COUNTER,
    )
    outputs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", PROGRAM.format(root=root)], capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(2)
    ]
    assert outputs == [[here.digest, here.prompt_block]] * 2
