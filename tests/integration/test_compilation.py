"""The compile service (SPEC C1, C8, C10, C11, C12): the worked example for three model sizes, storage by
digest, replay at a past position, live overlays, idempotent workers, compaction and rebuild."""

from __future__ import annotations

import uuid

import pytest
from django.db import transaction

from context_app.catalog.services import model_overlay_set
from context_app.compilation.candidate_rows import task_items
from context_app.compilation.candidates import CANDIDATES, CandidateCache
from context_app.compilation.models import (
    CompactionFold,
    ContextCompilation,
    FoldedItem,
    StoredContext,
)
from context_app.compilation.selectors import compile_input
from context_app.compilation.selectors.contexts import compiled_result, context_diff, task_compilations
from context_app.compilation.services import compiles
from context_app.compilation.services.folds import task_compact
from context_app.compilation.services.replays import context_replay
from context_app.compilation.services.requests import context_compile_request
from context_app.compilation.tasks import compile_requested
from context_app.world.models import WorldItem
from context_app.world.services.facts import fact_record, fact_retract, fact_supersede, fact_verify
from context_app.world.services.records import (
    decision_record,
    failure_record,
    progress_record,
    tool_call_record,
)
from context_app.world.services.scopes import scope_resolve
from context_app.world.services.token_counts import item_token_counts_ensure
from nexum.adapters.tokenization import counter_for
from nexum.core.catalog.budgets import ModelBudget
from nexum.core.compilation.events import compile_stream
from nexum.core.compilation.model import BudgetTooSmall, ContextItem
from nexum.core.compilation.ranking import Query, rank_section
from nexum.core.errors import NotFound, ValidationFailed
from nexum.core.tasks.projects import HealthPinged
from nexum.eventstore import projections, reading, store
from nexum.eventstore.models import Event
from tasks_app.models import Task
from tasks_app.services.goals import goal_create
from tests.integration.compile_world import build_auth_world

pytestmark = pytest.mark.django_db

PINNED = (
    "Fix the failing authentication spec",
    "Make auth_spec.rb pass",
    "spec/auth_spec.rb",
    "Do not modify the database schema",
    "Keep the public token API unchanged",
    "bundle exec rspec spec/auth_spec.rb exits 0",
)


@pytest.fixture
def auth(project):
    return build_auth_world(project)


def compile_for(auth, word: str, **kwargs):
    return compiles.context_compile(
        project_id=auth.project_id, task_id=str(auth.task.id), model_word=word, actor="test", **kwargs
    )


def candidate_items(*, task, encoding, counter, cache=None):
    """Every candidate of ``task``, as the candidate cache (the process's unless given) serves them."""
    return list((cache or CANDIDATES).refresh(task=task, encoding=encoding, counter=counter).items)


def compiled_events(auth) -> int:
    return Event.objects.filter(event_type="ContextCompiled", project_id=auth.project_id).count()


def test_the_worked_example_for_a_small_a_standard_and_a_frontier_model(auth, settings):
    settings.NEXUM_RELEVANCE_FLOOR = 0  # the reference's example keeps its Redis fact (no word of the step)
    evidence = [
        {"kind": "code", "id": "auth.rb", "text": "def valid?\n  token.signed?\nend", "origin": "app/auth.rb"}
    ]
    outcomes = {
        word: compile_for(auth, word, extra_evidence=evidence) for word in ("quick", "local", "frontier")
    }
    for word, outcome in outcomes.items():
        context = outcome.context
        for text in PINNED:
            assert text in context.prompt_block, (word, text)
        assert context.total_tokens <= context.budget["context_tokens"]
        included = {tuple(pair) for pair in context.included}
        assert ("failure", auth.failure_id) in included
        assert ("fact", auth.redis_fact_id) in included
        assert "[verified] redis: Redis is required (source: docs/arch.md)" in context.prompt_block
        assert ("diagnostic", auth.tool_call_id) in included
        assert ("code", "request:auth.rb") in included
        assert "tool_00" in context.tools  # pinned
    small, standard, frontier = (outcomes[word].context for word in ("quick", "local", "frontier"))
    assert small.budget["context_tokens"] == 8000 and small.budget["size_class"] == "small"
    assert standard.budget["context_tokens"] == 24000
    assert frontier.budget["context_tokens"] == 48000
    assert small.excluded_count > standard.excluded_count >= frontier.excluded_count
    excluded = compiled_result(small).excluded
    assert excluded and all(record.reason for record in excluded)
    assert len(small.tools) == 6
    assert any(r.kind == "tool" and "tool budget of 6 tools is full" in r.reason for r in excluded)
    assert any(r.kind in ("fact", "progress") and r.reason.startswith("needed ") for r in excluded)
    # the event carries ids and digests, never the prompt
    event = Event.objects.filter(event_type="ContextCompiled").order_by("-position").first()
    assert "prompt_block" not in event.data and "Redis" not in str(event.data)
    assert event.data["digest"] == frontier.digest


def test_same_digest_is_stored_once_and_each_compile_is_an_event(auth):
    first = compile_for(auth, "local")
    second = compile_for(auth, "local")
    assert first.context.digest == second.context.digest
    assert StoredContext.objects.filter(digest=first.context.digest).count() == 1
    assert compiled_events(auth) == 2
    assert len(task_compilations(project_id=auth.project_id, task_id=auth.task.id)) == 2


def test_a_retried_request_id_writes_nothing(auth):
    first = compile_for(auth, "local", request_id="8f7c3a52-4b9e-4f0e-9d5d-2c6f1e0b9a11")
    again = compile_for(auth, "local", request_id="8f7c3a52-4b9e-4f0e-9d5d-2c6f1e0b9a11")
    assert again.context.digest == first.context.digest
    assert compiled_events(auth) == 1


def test_replay_at_an_older_position_yields_the_older_digest(auth):
    older = compile_for(auth, "local").context
    scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))
    failure_record(scope=scope, text="second attempt: the cookie store drops the token", actor="test")
    newer = compile_for(auth, "local").context
    assert newer.digest != older.digest and newer.position > older.position
    live = projections.snapshot()
    replay = context_replay(project_id=auth.project_id, digest=older.digest)
    assert replay.matches and replay.replayed_digest == older.digest and replay.position == older.position
    assert context_replay(project_id=auth.project_id, digest=newer.digest).matches
    assert projections.snapshot() == live  # replay wrote nothing


def test_a_context_compiled_at_a_log_wide_head_replays_to_its_digest(auth):
    """Before per-project ordering a compile recorded the whole log's head, often another project's event: its
    replay reads its own project's events up to that position, not a project place of that number."""
    older = compile_for(auth, "local").context
    foreign = store.append(
        stream_id=f"other-{uuid.uuid4()}",
        events=[HealthPinged(ping_id="elsewhere")],
        expected_version=0,
        project_id=str(uuid.uuid4()),
    )
    scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))
    failure_record(scope=scope, text="second attempt: the cookie store drops the token", actor="test")
    assert compile_for(auth, "local").context.digest != older.digest
    StoredContext.objects.filter(project_id=auth.project_id, digest=older.digest).update(
        position=foreign.positions[0]  # as a compile of before recorded it: the log's head then
    )
    assert context_replay(project_id=auth.project_id, digest=older.digest).matches


def test_a_context_stored_by_the_previous_renderer_still_replays_to_its_digest(auth, monkeypatch):
    """Later versions render origin lines; a context version 1 stored replays with version 1's renderer."""
    with monkeypatch.context() as old:
        old.setattr(compiles, "COMPILER_VERSION", 1)
        before = compile_for(auth, "frontier").context
    assert before.compiler_version == 1
    now = compile_for(auth, "frontier").context
    assert now.compiler_version == compiles.COMPILER_VERSION and now.digest != before.digest
    for context in (before, now):
        assert context_replay(project_id=auth.project_id, digest=context.digest).matches


KITCHEN = "The office kitchen is cleaned on Fridays"


def test_an_unrelated_verified_fact_is_below_relevance_while_a_relevant_unverified_one_is_included(auth):
    scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))
    seeded = fact_record(
        scope=scope, text="The authentication specs need a seeded user with a signed token", actor="test"
    )
    kitchen = fact_record(scope=scope, text=KITCHEN, actor="test")
    fact_verify(project_id=auth.project_id, fact_id=str(kitchen.id), actor="test")
    context = compile_for(auth, "frontier").context
    included = {tuple(pair) for pair in context.included}
    assert ("fact", str(seeded.id)) in included
    assert ("fact", str(kitchen.id)) not in included and "kitchen" not in context.prompt_block
    result = compiled_result(context)
    below = [record for record in result.excluded if record.reason == "below the relevance floor"]
    assert ("fact", str(kitchen.id)) in {(record.kind, record.id) for record in below}
    assert result.exclusion_summary()["by_reason"]["below_relevance"] == len(below)
    assert context.total_tokens < context.budget["context_tokens"] // 2  # room left, not filled with noise


def test_focus_changes_the_ranking_is_shown_and_replays(auth):
    scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))
    kitchen = fact_record(scope=scope, text=KITCHEN, actor="test")
    plain = compile_for(auth, "frontier").context
    focused = compile_for(auth, "frontier", focus="  checking who cleans the office kitchen  ").context
    assert ("fact", str(kitchen.id)) not in {tuple(pair) for pair in plain.included}
    assert ("fact", str(kitchen.id)) in {tuple(pair) for pair in focused.included}
    assert "focus: checking who cleans the office kitchen\n" in focused.prompt_block
    assert focused.digest != plain.digest
    recorded = Event.objects.filter(event_type="ContextCompiled", data__digest=focused.digest).get()
    assert recorded.data["focus_digest"] and "kitchen" not in str(recorded.data)  # events carry no text
    for context in (plain, focused):
        assert context_replay(project_id=auth.project_id, digest=context.digest).matches


def test_focus_must_be_text_of_bounded_length(auth):
    for focus, message in ((7, "focus must be a string"), ("x" * 2001, "focus is over 2000 characters")):
        with pytest.raises(ValidationFailed, match=message) as caught:
            compile_for(auth, "quick", focus=focus)
        assert caught.value.field == "focus"
    assert compiled_events(auth) == 0


def test_a_context_stored_by_version_3_replays_with_its_ranking_and_the_floor_setting_is_recorded(
    auth, monkeypatch, settings
):
    """Version 3 ranked verified facts first and filled the budget; the recorded floor replays too."""
    with monkeypatch.context() as old:
        old.setattr(compiles, "COMPILER_VERSION", 3)
        before = compile_for(auth, "frontier").context
    assert before.compiler_version == 3
    assert ("fact", auth.redis_fact_id) in {tuple(pair) for pair in before.included}
    now = compile_for(auth, "frontier").context
    settings.NEXUM_RELEVANCE_FLOOR = 0
    unfloored = compile_for(auth, "frontier").context
    assert len({before.digest, now.digest, unfloored.digest}) == 3
    for context in (before, now, unfloored):
        assert context_replay(project_id=auth.project_id, digest=context.digest).matches


def test_a_relevance_floor_setting_out_of_range_is_refused(auth, settings):
    settings.NEXUM_RELEVANCE_FLOOR = 1.5
    with pytest.raises(ValidationFailed, match="NEXUM_RELEVANCE_FLOOR must be a number from 0 to 1"):
        compile_for(auth, "quick")


def test_replay_uses_the_recorded_budget_after_the_overlay_changed(auth):
    older = compile_for(auth, "local").context
    model_overlay_set(project_id=auth.project_id, word="local", overlay={"context_tokens": 16000}, actor="op")
    assert context_replay(project_id=auth.project_id, digest=older.digest).matches


def test_an_overlay_lowered_between_two_compiles_reaches_the_second(auth):
    first = compile_for(auth, "local").context
    model_overlay_set(project_id=auth.project_id, word="local", overlay={"context_tokens": 12000}, actor="op")
    second = compile_for(auth, "local").context
    assert first.budget["context_tokens"] == 24000
    assert second.budget["window"] == 12000
    assert second.budget["context_tokens"] == 12000 - 6000  # reserve: max output 8192 capped at half
    assert second.total_tokens <= second.budget["context_tokens"]
    assert second.excluded_count > first.excluded_count


def test_a_redelivered_compile_message_stores_and_appends_nothing_twice(auth):
    with transaction.atomic():
        queued = context_compile_request(
            project_id=auth.project_id, task_id=str(auth.task.id), model_word="quick", actor="test"
        )
    request_id = str(queued.request_id)
    compile_requested.run(request_id)
    contexts, events = StoredContext.objects.count(), Event.objects.count()
    compile_requested.run(request_id)
    assert StoredContext.objects.count() == contexts
    assert Event.objects.count() == events
    assert reading.stream_version(compile_stream(request_id)) == 2
    row = ContextCompilation.objects.get(request_id=request_id)
    assert row.status == "done" and row.digest, row.error


def test_a_refused_queued_compile_is_recorded_as_failed(auth, monkeypatch):
    def too_small(**kwargs):
        raise BudgetTooSmall("the pinned content needs 900 tokens even when cut; 10 left", field="budget")

    monkeypatch.setattr(compiles, "compile_task", too_small)
    with transaction.atomic():  # in process (Celery eager) the request runs as soon as it is recorded
        queued = context_compile_request(
            project_id=auth.project_id, task_id=str(auth.task.id), model_word="quick", actor="test"
        )
    row = ContextCompilation.objects.get(request_id=queued.request_id)
    assert row.status == "failed" and row.error["code"] == "budget_too_small"
    assert not StoredContext.objects.exists()
    events = Event.objects.count()
    compile_requested.run(str(queued.request_id))  # redelivered: nothing more
    assert Event.objects.count() == events


def test_compaction_folds_the_oldest_progress_and_tool_calls(auth):
    model_overlay_set(
        project_id=auth.project_id, word="local", overlay={"auto_compact_tokens": 1500}, actor="op"
    )
    before = list(WorldItem.objects.filter(task_id=auth.task.id, kind__in=["progress", "tool_call"]))
    outcome = compile_for(auth, "local")
    fold = CompactionFold.objects.get(task_id=auth.task.id)
    event = Event.objects.get(event_type="ContextCompacted")
    assert event.data["folded_ids"] == fold.folded_ids and len(fold.folded_ids) >= 2
    oldest = sorted(before, key=lambda item: item.position)[: len(fold.folded_ids)]
    assert fold.folded_ids == [str(item.id) for item in oldest]
    assert auth.tool_call_id in fold.folded_ids  # the tool call is among the oldest
    # the originals stay readable; the compiler sees the summary instead
    for item_id in fold.folded_ids:
        assert WorldItem.objects.filter(id=item_id).exists()
        assert ("progress", item_id) not in {tuple(pair) for pair in outcome.context.included}
    summary = WorldItem.objects.get(id=fold.summary_id)
    assert summary.kind == "progress"
    notes = len(fold.folded_ids) - 1
    assert summary.text.startswith(f"Earlier work, folded ({notes} progress notes, 1 tool call):")
    assert summary.text.count("\n- ") == len(fold.folded_ids)  # a line of every folded entry
    assert ("progress", str(summary.id)) in {tuple(pair) for pair in outcome.context.included}
    assert FoldedItem.objects.filter(fold_id=fold.fold_id).count() == len(fold.folded_ids)
    # under the threshold now: a second compile folds nothing more
    compile_for(auth, "local")
    assert CompactionFold.objects.count() == 1
    assert context_replay(project_id=auth.project_id, digest=outcome.context.digest).matches


def test_a_summary_is_as_trusted_as_the_least_trusted_entry_it_folds(project):
    """An agent's notes folded into a summary stay agent_reported: compaction never launders trust."""
    from tests.integration.compile_world import load_catalog

    load_catalog(str(project.id))
    goal = goal_create(
        project_id=str(project.id), objective="Fix it", tasks=[{"key": "s1", "objective": "x"}], actor="t"
    )
    task = Task.objects.get(goal=goal, key="s1")
    scope = scope_resolve(project_id=str(project.id), task_id=str(task.id))
    for n in range(6):
        trust = "untrusted_retrieved" if n == 5 else "agent_reported"
        progress_record(scope=scope, text=f"note {n}: " + "tried again " * 30, trust_class=trust, actor="a")
    model_overlay_set(
        project_id=str(project.id), word="local", overlay={"auto_compact_tokens": 200}, actor="op"
    )
    compiles.context_compile(project_id=str(project.id), task_id=str(task.id), model_word="local", actor="a")
    fold = CompactionFold.objects.get(task_id=task.id)
    folded = set(WorldItem.objects.filter(id__in=fold.folded_ids).values_list("trust_class", flat=True))
    assert folded == {"agent_reported"}
    assert WorldItem.objects.get(id=fold.summary_id).trust_class == "agent_reported"


def test_compaction_off_for_the_request_folds_nothing(auth):
    model_overlay_set(
        project_id=auth.project_id, word="local", overlay={"auto_compact_tokens": 1500}, actor="op"
    )
    compile_for(auth, "local", compaction=False)
    assert not CompactionFold.objects.exists()
    model_overlay_set(
        project_id=auth.project_id,
        word="local",
        overlay={"auto_compact_tokens": 1500, "enabled": False},
        actor="op",
    )
    compile_for(auth, "local")
    assert not CompactionFold.objects.exists()


def test_a_pluggable_summarizer(auth, settings):
    settings.NEXUM_COMPACTION_SUMMARIZER = "tests.integration.test_compilation.shout"
    model_overlay_set(
        project_id=auth.project_id, word="local", overlay={"auto_compact_tokens": 1500}, actor="op"
    )
    compile_for(auth, "local")
    fold = CompactionFold.objects.get()
    assert WorldItem.objects.get(id=fold.summary_id).text.startswith("FOLDED")
    assert fold.summarizer.endswith("shout")


REFUSALS: list[int] = []


def refuse(entries, *, max_tokens, counter) -> str:
    """A summarizer that never finds a useful summary (the answer of the default one for notes too many for
    its budget), counting how often it is asked."""
    REFUSALS.append(len(entries))
    return ""


def test_a_fold_the_summarizer_refuses_leaves_an_ordinary_compile_and_is_not_tried_again(
    auth, settings, monkeypatch
):
    """The notes are over the threshold but cannot be summarized usefully: nothing is folded, the compile
    does not take the fold's path (which holds the log's append lock from the fold to its commit), and the
    next compile of the unchanged task does not ask again; a new note does."""
    settings.NEXUM_COMPACTION_SUMMARIZER = "tests.integration.test_compilation.refuse"
    model_overlay_set(
        project_id=auth.project_id, word="local", overlay={"auto_compact_tokens": 1500}, actor="op"
    )
    REFUSALS.clear()
    folding: list[str] = []
    monkeypatch.setattr(compiles, "task_compact", lambda **kwargs: folding.append(kwargs["task"].key))
    first = compile_for(auth, "local")
    assert REFUSALS and not folding and not CompactionFold.objects.exists()
    asked = len(REFUSALS)
    assert compile_for(auth, "local").context.digest == first.context.digest
    assert len(REFUSALS) == asked
    progress_record(
        scope=scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id)),
        text="one more note",
        actor="test",
    )
    compile_for(auth, "local")
    assert len(REFUSALS) > asked and not folding and not CompactionFold.objects.exists()


LONG_NOTE = (
    "Read the whole middleware chain from the request parser to the token check and wrote down every place "
    "where the expiry is parsed, compared or logged, so the fix touches one function only."
)


def just_under(task, encoding: str) -> int:
    """A compaction threshold just under the task's own progress and tool calls: a fold, with room for a
    summary."""
    counter = counter_for(encoding)
    own = CANDIDATES.refresh(task=task, encoding=encoding, counter=counter).compacted_items()
    return sum(item.token_count for item in own) - 1


def shout(entries, *, max_tokens, counter):
    return f"FOLDED {len(entries)}"


def test_diff_shows_what_entered_and_left_with_reasons(auth):
    small = compile_for(auth, "quick").context
    frontier = compile_for(auth, "frontier").context
    diff = context_diff(before_result=compiled_result(small), after_result=compiled_result(frontier))
    assert diff.entered and all(entry.reason for entry in diff.entered)
    assert any(entry.kind == "tool" for entry in diff.entered)
    back = context_diff(before_result=compiled_result(frontier), after_result=compiled_result(small))
    assert {(e.kind, e.id) for e in back.left} == {(e.kind, e.id) for e in diff.entered}
    assert all(entry.reason for entry in back.left)


def test_another_projects_task_is_not_found_and_nothing_is_written(auth, other_project):
    events = Event.objects.count()
    with pytest.raises(NotFound):
        compiles.context_compile(
            project_id=str(other_project.id), task_id=str(auth.task.id), model_word="local", actor="x"
        )
    assert Event.objects.count() == events and not StoredContext.objects.exists()


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"model_word": ""}, "model"),
        ({"model_word": "local", "overrides": {"context_tokens": 0}}, "overrides.context_tokens"),
        ({"model_word": "local", "overrides": {"windows": 3}}, "overrides.windows"),
        ({"model_word": "local", "extra_evidence": [{"kind": "poem", "text": "x"}]}, "evidence.0.kind"),
        ({"model_word": "local", "extra_evidence": [{"text": ""}]}, "evidence.0.text"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(auth, arguments, field):
    events = Event.objects.count()
    with pytest.raises(ValidationFailed) as caught:
        compiles.context_compile(
            project_id=auth.project_id, task_id=str(auth.task.id), actor="x", **arguments
        )
    assert caught.value.field == field
    assert Event.objects.count() == events and not StoredContext.objects.exists()


def test_a_word_the_catalog_lacks_is_not_found_naming_the_model(auth):
    events = Event.objects.count()
    with pytest.raises(NotFound) as caught:
        compiles.context_compile(
            project_id=auth.project_id, task_id=str(auth.task.id), model_word="gpt-unknown", actor="x"
        )
    assert (caught.value.code, caught.value.field) == ("unknown_model_word", "model")
    assert Event.objects.count() == events and not StoredContext.objects.exists()


def test_rebuild_reproduces_the_compile_history_and_keeps_the_contexts(auth):
    model_overlay_set(
        project_id=auth.project_id, word="local", overlay={"auto_compact_tokens": 1500}, actor="op"
    )
    compile_for(auth, "local")
    with transaction.atomic():
        context_compile_request(
            project_id=auth.project_id, task_id=str(auth.task.id), model_word="quick", actor="test"
        )
    live = projections.snapshot()
    contexts = list(StoredContext.objects.values_list("digest", flat=True))
    assert live["compilation_contextcompilation"] and live["compilation_compactionfold"]
    projections.rebuild()
    assert projections.snapshot() == live
    assert list(StoredContext.objects.values_list("digest", flat=True)) == contexts


def test_candidates_are_metadata_and_only_included_texts_are_loaded(auth):
    items = candidate_items(task=auth.task, encoding="cl100k_base", counter=counter_for("cl100k_base"))
    assert items and all(item.text is None for item in items)
    stored = {str(row.id): row for row in WorldItem.objects.filter(goal_id=auth.goal.id)}
    for item in items:
        assert item.token_count == stored[item.id].token_counts["cl100k_base"]
    facts = [item for item in items if item.kind == "fact"]
    assert all(item.terms == tuple(stored[item.id].terms) for item in facts)
    loaded = compile_input.item_text_loader(items[:3])
    assert loaded == {(item.kind, item.id): stored[item.id].rendered for item in items[:3]}


def test_the_in_process_candidate_list_follows_every_change_of_the_world(auth):
    """The candidate list kept in process (``CandidateCache.refresh``) is never served stale: a
    fact recorded, verified, superseded or retracted, an item folded, and a replay at an older position
    inside ``state_as_of`` all see exactly the items as they stand."""
    encoding, counter = "cl100k_base", counter_for("cl100k_base")

    def candidates():
        items = candidate_items(task=auth.task, encoding=encoding, counter=counter)
        return {item.id: item for item in items}

    scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))
    older = compile_for(auth, "local").context
    first = candidates()
    served = CANDIDATES.refresh(task=auth.task, encoding=encoding, counter=counter)
    assert CANDIDATES.refresh(task=auth.task, encoding=encoding, counter=counter) is served
    fact = fact_record(scope=scope, text="the session cookie is signed with HS256", actor="test")
    after_record = candidates()
    assert str(fact.id) in after_record and not after_record[str(fact.id)].verified
    fact_verify(project_id=auth.project_id, fact_id=str(fact.id), actor="test")
    assert candidates()[str(fact.id)].verified
    newer = fact_supersede(
        project_id=auth.project_id,
        fact_id=str(fact.id),
        text="the session cookie uses RS256",
        role="operator",
        actor="test",
    )
    after_supersede = candidates()
    assert str(fact.id) not in after_supersede and str(newer.id) in after_supersede
    fact_retract(
        project_id=auth.project_id, fact_id=str(newer.id), reason="wrong", role="operator", actor="test"
    )
    assert str(newer.id) not in candidates()
    assert candidates().keys() == first.keys()
    # A replay inside ``state_as_of`` sees the older world, and the live list is intact afterwards.
    with projections.state_as_of(older.position):
        assert candidates().keys() == first.keys()
    assert context_replay(project_id=auth.project_id, digest=older.digest).matches
    assert str(newer.id) not in candidates()
    # Folding leaves the folded items out and brings the summary in.
    summary = task_compact(
        task=auth.task, threshold=just_under(auth.task, encoding), encoding=encoding, actor="test"
    )
    assert summary is not None
    folded = set(FoldedItem.objects.filter(task_id=auth.task.id).values_list("item_id", flat=True))
    after_fold = candidates()
    assert str(summary.id) in after_fold and not {str(item_id) for item_id in folded} & after_fold.keys()
    with projections.state_as_of(older.position):
        assert candidates().keys() == first.keys()


def test_the_candidate_list_kept_up_to_date_equals_one_read_from_scratch(auth, monkeypatch, settings):
    """After every kind of change, the list brought up to date from the rows changed since its last read
    equals a list read whole and the plain query of what the task sees, for the task and for its goal;
    a sibling task's items never enter. So does the order a fold plans the task's notes in, kept from one
    read to the next."""
    encoding, counter = "cl100k_base", counter_for("cl100k_base")
    goal = goal_create(
        project_id=auth.project_id,
        objective="Ship signed tokens",
        tasks=[{"key": "code", "objective": "Sign the tokens"}, {"key": "docs", "objective": "Document it"}],
        actor="test",
    )
    task, sibling = (Task.objects.get(goal_id=goal.id, key=key) for key in ("code", "docs"))
    goal = Task.objects.get(id=goal.id)
    goal_scope = scope_resolve(project_id=auth.project_id, goal_id=str(goal.id))
    task_scope = scope_resolve(project_id=auth.project_id, task_id=str(task.id))
    sibling_scope = scope_resolve(project_id=auth.project_id, task_id=str(sibling.id))

    def read(task, cache=CANDIDATES):
        entry = cache.refresh(task=task, encoding=encoding, counter=counter)
        return entry.by_kind, entry.compacted, entry.fold_order

    def check():
        for viewer in (task, goal, sibling):
            kept = read(viewer)
            seen = {str(item_id) for item_id in task_items(viewer).values_list("id", flat=True)}
            assert {item_id for items in kept[0].values() for item_id in items} == seen
            assert read(viewer, CandidateCache()) == kept  # read whole

    check()
    fact = fact_record(scope=goal_scope, text="tokens are signed with HS256", actor="test")
    progress_record(scope=task_scope, text="read the middleware", actor="test")
    progress_record(scope=sibling_scope, text="wrote the docs", actor="test")
    check()
    fact_verify(project_id=auth.project_id, fact_id=str(fact.id), actor="test")
    check()
    newer = fact_supersede(
        project_id=auth.project_id,
        fact_id=str(fact.id),
        text="tokens are signed with RS256",
        role="operator",
        actor="test",
    )
    tool_call_record(scope=task_scope, tool="rspec", result_summary="2 failures", actor="test")
    check()
    fact_retract(
        project_id=auth.project_id, fact_id=str(newer.id), reason="wrong", role="operator", actor="test"
    )
    decision_record(scope=goal_scope, text="keep HS256", rationale="compatibility", actor="test")
    check()
    for note in ("Compared the signature with hmac.compare_digest; the old code used ==.", LONG_NOTE):
        progress_record(scope=task_scope, text=note, actor="test")
    threshold = just_under(task, encoding)
    assert task_compact(task=task, threshold=threshold, encoding=encoding, actor="test") is not None
    check()
    settings.NEXUM_ITEM_ENCODINGS = []  # recorded without a stored count: counted from its text
    uncounted = fact_record(scope=task_scope, text="the cookie store is Redis", actor="test")
    check()
    assert read(task)[0]["fact"][str(uncounted.id)].token_count == counter.count(uncounted.rendered)
    assert item_token_counts_ensure(project_id=auth.project_id, encoding=encoding) == 1
    check()


def test_a_list_read_inside_a_compile_that_failed_after_folding_is_not_kept(auth, monkeypatch):
    """A compile that folds (writing a summary and a fold) and then fails is rolled back; the candidate
    list it read inside its transaction held the summary and the fold. The next read, after more items
    were recorded, sees neither."""
    model_overlay_set(
        project_id=auth.project_id, word="local", overlay={"auto_compact_tokens": 1500}, actor="op"
    )
    compile_task = compiles.compile_task

    def compiled_then_refused(**kwargs):
        compile_task(**kwargs)  # reads the candidates: the summary in, the folded items out
        raise BudgetTooSmall("the pinned content does not fit", field="budget")

    monkeypatch.setattr(compiles, "compile_task", compiled_then_refused)
    with pytest.raises(BudgetTooSmall):
        compile_for(auth, "local")
    monkeypatch.undo()
    assert not CompactionFold.objects.exists()
    task_scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))
    for step in range(3):
        progress_record(scope=task_scope, text=f"step {step} of the fix", actor="test")
    encoding, counter = "cl100k_base", counter_for("cl100k_base")
    items = candidate_items(task=auth.task, encoding=encoding, counter=counter)
    seen = {str(item_id) for item_id in task_items(auth.task).values_list("id", flat=True)}
    assert {item.id for item in items} == seen


def test_a_list_read_inside_a_transaction_that_rolled_back_is_not_kept(auth):
    """Items recorded and read inside a transaction that then rolls back never reach a later read, whether
    the next event reuses the rolled-back position (SQLite) or takes the next one (PostgreSQL)."""
    encoding, counter = "cl100k_base", counter_for("cl100k_base")
    task_scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))
    candidate_items(task=auth.task, encoding=encoding, counter=counter)
    with pytest.raises(RuntimeError), transaction.atomic():
        phantom = progress_record(scope=task_scope, text="never happened", actor="test")
        items = candidate_items(task=auth.task, encoding=encoding, counter=counter)
        assert str(phantom.id) in {item.id for item in items}
        raise RuntimeError("rolled back")
    real = progress_record(scope=task_scope, text="happened", actor="test")
    items = {item.id for item in candidate_items(task=auth.task, encoding=encoding, counter=counter)}
    assert str(real.id) in items and str(phantom.id) not in items
    assert items == {str(item_id) for item_id in task_items(auth.task).values_list("id", flat=True)}


def test_rankings_are_kept_per_task_while_the_section_and_its_joined_items_stay(auth):
    """The candidate cache ranks a section once while its candidates, the items joined to it and the query
    stay the same, for every task it holds, and ranks again when an extra item's text changes."""
    cache, encoding, counter = CandidateCache(), "cl100k_base", counter_for("cl100k_base")
    calls = []

    def rank(items):
        calls.append(items)
        return rank_section("fact", items, query=Query(frozenset({"redis"})), verified_label=3)

    def ranked(extra_text):
        base = cache.refresh(task=auth.task, encoding=encoding, counter=counter).sections["fact"]
        extra = (ContextItem.from_text("fact", "bundle:1", extra_text, counter=counter),)
        return cache.ranked(
            task=auth.task, encoding=encoding, kind="fact", base=base, extra=extra, context=("q",), rank=rank
        )

    first = ranked("Redis is required.")
    assert ranked("Redis is required.") is first and len(calls) == 1
    assert ranked("Redis is required!") is not first and len(calls) == 2  # equal items, another text
    scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))
    progress_record(scope=scope, text="a progress note leaves the facts as they were", actor="test")
    assert ranked("Redis is required!") is not None and len(calls) == 2
    fact_record(scope=scope, text="the cookie store is Redis", actor="test")
    ranked("Redis is required!")
    assert len(calls) == 3


def test_the_cache_evicts_the_least_recently_used_tasks_by_memory(auth):
    """Sized by memory: past its budget the cache drops the least recently used tasks, one at a time, and
    keeps the rest (it is never emptied in one go); a task read again is read whole."""
    encoding, counter = "cl100k_base", counter_for("cl100k_base")
    goal = goal_create(
        project_id=auth.project_id,
        objective="Ship signed tokens",
        tasks=[{"key": f"t{n}", "objective": f"part {n}"} for n in range(6)],
        actor="test",
    )
    tasks = list(Task.objects.filter(goal_id=goal.id).exclude(id=goal.id).order_by("key"))
    probe = CandidateCache(max_bytes=10**9)
    for task in tasks:
        probe.refresh(task=task, encoding=encoding, counter=counter)
    per_task = probe.estimated_bytes() // len(tasks)
    cache = CandidateCache(max_bytes=per_task * 4)
    for task in tasks:
        cache.refresh(task=task, encoding=encoding, counter=counter)
    assert 2 <= len(cache) < len(tasks)
    assert cache.estimated_bytes() <= per_task * 4
    kept = len(cache)
    newest = cache.refresh(task=tasks[-1], encoding=encoding, counter=counter)
    assert cache.refresh(task=tasks[-1], encoding=encoding, counter=counter) is newest
    cache.refresh(task=tasks[0], encoding=encoding, counter=counter)  # evicted: read again, another evicted
    assert len(cache) == kept
    assert cache.refresh(task=tasks[-1], encoding=encoding, counter=counter) is newest
    cache.evict(task_id=str(tasks[-1].id))
    assert cache.refresh(task=tasks[-1], encoding=encoding, counter=counter) is not newest


def test_a_compile_from_kept_rankings_equals_one_from_an_empty_cache(auth, monkeypatch):
    """After notes, tool calls and a new fact, the compile served from kept candidates and rankings has the
    digest of one computed from nothing."""
    scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))
    budget = compile_for(auth, "local").context.budget
    for step in range(3):
        progress_record(scope=scope, text=f"step {step}: rotated the token", actor="test")
        tool_call_record(scope=scope, tool="rspec", result_summary=f"run {step}: 1 fail", actor="t")
        compile_for(auth, "local")
    fact_record(scope=scope, text="the cookie store is Redis", actor="test")
    compile_for(auth, "local")
    task = Task.objects.get(id=auth.task.id)

    def digest() -> str:
        result, _ = compiles.compile_task(task=task, budget=ModelBudget(**budget), encoding="cl100k_base")
        return result.digest

    kept = digest()
    monkeypatch.setattr(compile_input, "CANDIDATES", CandidateCache())
    assert digest() == kept


def test_a_new_note_is_ranked_in_front_of_the_kept_ranking_of_its_section(auth, monkeypatch):
    """An agent loop's compile ranks its new progress note in front of the kept ranking of the task's notes
    instead of ranking every note again; a new fact still ranks the facts again (its words change every
    fact's score)."""
    scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))
    compile_for(auth, "local")
    ranked: list[str] = []
    rank = compile_input.rank_section
    monkeypatch.setattr(
        compile_input, "rank_section", lambda kind, *a, **k: ranked.append(kind) or rank(kind, *a, **k)
    )
    progress_record(scope=scope, text="step 4: rotated the token again", actor="test")
    compile_for(auth, "local")
    assert "progress" not in ranked and "fact" not in ranked
    fact_record(scope=scope, text="the cookie store is Redis", actor="test")
    compile_for(auth, "local")
    assert "fact" in ranked and "progress" not in ranked
