"""Retention (issue 27 item 4): old stored contexts and check output are pruned to their digests, as events;
the remaining contexts replay, the pruned ones recompile to their digests and read as before; a dry run
writes nothing; the dispatcher's pass records and runs a project's policy."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from context_app.compilation import retention
from context_app.compilation.models import (
    RETENTION_DONE,
    ContextCompilation,
    PrunedContent,
    RetentionRun,
    StoredContext,
)
from context_app.compilation.services.compiles import context_compile
from context_app.compilation.services.replays import context_replay
from context_app.compilation.tasks import RETENTION
from context_app.resolution.models import BundleContent
from context_app.world.artifacts import default_store
from context_app.world.services.records import failure_record
from context_app.world.services.scopes import scope_resolve
from nexum.eventstore import projections
from nexum.eventstore.models import Event
from nexum.work.dispatch import dispatch_due
from tasks_app.services.projects import project_retention_set
from tests.integration.compile_world import build_auth_world, load_catalog
from tests.integration.test_artifact_integrity import _gated_task
from tests.integration.test_resolution import (  # noqa: F401  (http, source_roots: fixtures)
    _Routes,
    grant,
    http,
    make_task,
    register,
    resolve,
    source_roots,
    start,
)
from verification_app.models import CheckRun
from verification_app.services.completions import completion_request

pytestmark = pytest.mark.django_db

OLD = timedelta(days=40)


@pytest.fixture
def auth(project):
    return build_auth_world(project, filler=20)


def compile_for(auth, word: str = "local"):
    return context_compile(
        project_id=auth.project_id, task_id=str(auth.task.id), model_word=word, actor="test"
    ).context


def age(context: StoredContext, by: timedelta = OLD) -> None:
    """Make ``context`` and its compiles ``by`` older (as a long-running project's would be)."""
    then = timezone.now() - by
    StoredContext.objects.filter(id=context.id).update(stored_at=then)
    ContextCompilation.objects.filter(digest=context.digest).update(finished_at=then)


def two_contexts(auth) -> tuple[StoredContext, StoredContext]:
    older = compile_for(auth)
    scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))
    failure_record(scope=scope, text="second attempt: the cookie store drops the token", actor="test")
    newer = compile_for(auth)
    assert older.digest != newer.digest
    age(older)
    return older, newer


def prune_events(project_id: str) -> int:
    kinds = ("ContextPruned", "BundlePruned", "CheckOutputPruned")
    return Event.objects.filter(project_id=project_id, event_type__in=kinds).count()


def test_an_old_context_is_pruned_to_its_digest_and_still_replays_and_reads_as_before(auth, api):
    older, newer = two_contexts(auth)
    before = api.get(f"/api/v1/contexts/{older.digest}?excluded=full").json()
    project_retention_set(project_id=auth.project_id, policy={"context_days": 30}, actor="test")

    summary = retention.project_prune(project_id=auth.project_id)

    assert (summary.contexts.count, summary.bundles.count, summary.check_output.count) == (1, 0, 0)
    stored = StoredContext.objects.get(id=older.id)
    assert stored.pruned_at is not None and stored.prompt_block == "" and stored.exclusion_runs == "[]"
    assert summary.contexts.bytes_freed == len(older.prompt_block.encode()) + len(older.exclusion_runs) - 2
    assert StoredContext.objects.get(id=newer.id).pruned_at is None
    assert retention.pruned_digests(project_id=auth.project_id) == [older.digest]
    event = Event.objects.get(event_type="ContextPruned")
    assert event.stream_id == f"retention-{auth.project_id}"
    assert event.data == {
        "digest": older.digest,
        "task_id": str(auth.task.id),
        "position": older.position,
        "bytes_freed": summary.contexts.bytes_freed,
    }
    for context in (older, newer):
        assert context_replay(project_id=auth.project_id, digest=context.digest).matches
    after = api.get(f"/api/v1/contexts/{older.digest}?excluded=full").json()
    assert after.pop("pruned_at") is not None and before.pop("pruned_at") is None
    assert after == before  # recompiled at its position, verified by its digest
    diff = api.get(f"/api/v1/contexts/{older.digest}/diff/{newer.digest}")
    assert diff.status_code == 200 and diff.json()["entered"]
    page = api.get(f"/api/v1/contexts/{older.digest}/excluded?limit=5")
    assert page.json()["results"] == before["excluded"][:5]

    again = retention.project_prune(project_id=auth.project_id)
    assert again.pruned == 0 and prune_events(auth.project_id) == 1


def test_a_context_compiled_again_recently_is_kept(auth):
    context = compile_for(auth)
    age(context)
    assert compile_for(auth).digest == context.digest  # the same context, compiled today
    project_retention_set(project_id=auth.project_id, policy={"context_days": 30}, actor="test")
    assert retention.project_prune(project_id=auth.project_id).pruned == 0
    assert StoredContext.objects.get(id=context.id).pruned_at is None


def test_a_pruned_context_whose_recompile_differs_is_refused_not_shown(auth, api):
    older, _ = two_contexts(auth)
    project_retention_set(project_id=auth.project_id, policy={"context_days": 30}, actor="test")
    retention.project_prune(project_id=auth.project_id)
    StoredContext.objects.filter(id=older.id).update(prompt_tokens=older.prompt_tokens + 1, digest="f" * 64)
    answer = api.get(f"/api/v1/contexts/{'f' * 64}")
    assert answer.status_code == 409, answer.json()
    assert answer.json()["error"]["code"] == "context_not_reproducible"


def test_a_dry_run_counts_the_same_and_writes_nothing(auth):
    older, _ = two_contexts(auth)
    project_retention_set(project_id=auth.project_id, policy={"context_days": 30}, actor="test")
    live = projections.snapshot()
    dry = retention.project_prune(project_id=auth.project_id, dry_run=True)
    assert dry.contexts.count == 1 and dry.bytes_freed > 0
    assert StoredContext.objects.get(id=older.id).prompt_block == older.prompt_block
    assert prune_events(auth.project_id) == 0 and projections.snapshot() == live
    assert retention.project_prune(project_id=auth.project_id).bytes_freed == dry.bytes_freed


def test_no_policy_prunes_nothing_and_the_service_default_applies(auth, settings):
    two_contexts(auth)
    assert retention.project_prune(project_id=auth.project_id).pruned == 0
    settings.NEXUM_RETENTION_CONTEXT_DAYS = 30
    assert retention.project_prune(project_id=auth.project_id).contexts.count == 1


def test_the_pruned_list_rebuilds_from_the_log(auth):
    two_contexts(auth)
    project_retention_set(project_id=auth.project_id, policy={"context_days": 30}, actor="test")
    retention.project_prune(project_id=auth.project_id)
    live = projections.snapshot()["compilation_prunedcontent"]  # (the aged compiles' times are the test's)
    projections.rebuild()
    assert projections.snapshot()["compilation_prunedcontent"] == live and len(live) == 1
    assert PrunedContent.objects.count() == 1


def test_old_check_output_is_removed_unless_something_else_has_the_same_content(
    project, api, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.NEXUM_ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.NEXUM_WORKSPACE_ROOT = tmp_path / "workspace"
    task, item = _gated_task(project, b"3 passed, 0 failed")
    completion = completion_request(
        project_id=str(project.id), task_id=str(task.id), answer="done", actor="a"
    )
    run = CheckRun.objects.get(task_id=task.id)
    output = default_store().path_for(run.output_sha256)
    assert output.is_file() and run.output_sha256 != item.content_sha256
    CheckRun.objects.filter(id=run.id).update(recorded_at=timezone.now() - OLD)
    project_retention_set(project_id=str(project.id), policy={"check_output_days": 7}, actor="test")

    with django_capture_on_commit_callbacks(execute=True):  # the file goes once the events are committed
        summary = retention.project_prune(project_id=str(project.id))

    assert summary.check_output.count == 1 and summary.check_output.bytes_freed == run.output_bytes
    assert not output.exists() and default_store().exists(item.content_sha256)  # the artifact stays
    assert retention.pruned_digests(project_id=str(project.id), kind="check_output") == [run.output_sha256]
    shown = api.get(f"/api/v1/completions/{completion.request.id}").json()["check_runs"][0]
    assert shown["output"].startswith("[check output pruned by retention at ")
    assert (shown["output_sha256"], shown["output_bytes"]) == (run.output_sha256, run.output_bytes)
    assert retention.project_prune(project_id=str(project.id)).pruned == 0


def test_the_command_reports_what_it_prunes_and_dry_run_writes_nothing(auth, project):
    two_contexts(auth)
    project_retention_set(project_id=auth.project_id, policy={"context_days": 30}, actor="test")
    out = StringIO()
    call_command("nexum_retention", "--project", project.slug, "--dry-run", stdout=out)
    assert f"{project.slug}: would prune 1 contexts (older than 30 days" in out.getvalue()
    assert prune_events(auth.project_id) == 0
    out = StringIO()
    call_command("nexum_retention", stdout=out)
    assert f"{project.slug}: pruned 1 contexts" in out.getvalue() and prune_events(auth.project_id) == 1
    with pytest.raises(CommandError, match="no project with slug 'nope'"):
        call_command("nexum_retention", "--project", "nope")


def test_the_dispatcher_records_a_run_per_interval_and_the_worker_prunes(auth, project, settings):
    two_contexts(auth)
    assert retention.retention_runs_record() == 0  # no policy: no run
    project_retention_set(project_id=auth.project_id, policy={"context_days": 30}, actor="test")
    assert RETENTION.prepare is retention.retention_runs_record
    dispatch_due()  # records the run; in process (eager) it runs when sent
    run = RetentionRun.objects.get(project_id=project.id)
    assert run.state == RETENTION_DONE and run.pruned == 1 and run.bytes_freed > 0
    assert retention.retention_runs_record() == 0  # within NEXUM_RETENTION_INTERVAL_S
    later = timezone.now() + timedelta(seconds=settings.NEXUM_RETENTION_INTERVAL_S + 1)
    assert retention.retention_runs_record(now=later) == 1


def test_a_bundle_is_pruned_only_when_no_context_and_no_task_reads_it(project, http, api):  # noqa: F811
    load_catalog(str(project.id))
    register(project, "web", "http_json", url=f"{http}/web")
    task = make_task(project)
    grant(project, task, "web")
    start(project, task)
    bundles = []
    for text in ("deploy with the blue pipeline", "deploy with the green pipeline", "deploy by hand"):
        _Routes.documents["/web"] = [{"subject": "deploy", "text": text}]
        bundles.append(resolve(project, task).resolve.bundle_digest)
        if len(bundles) == 1:  # a context is compiled from the first bundle only
            context = context_compile(
                project_id=str(project.id), task_id=str(task.id), model_word="local", actor="test"
            ).context
    assert len(set(bundles)) == 3 and context.bundle_digest == bundles[0]
    BundleContent.objects.update(created_at=timezone.now() - OLD)
    project_retention_set(project_id=str(project.id), policy={"bundle_days": 7}, actor="test")

    summary = retention.project_prune(project_id=str(project.id))

    assert summary.bundles.count == 1 and summary.bundles.bytes_freed > 0
    assert retention.pruned_digests(project_id=str(project.id), kind="bundles") == [bundles[1]]
    gone = api.get(f"/api/v1/bundles/{bundles[1]}")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "bundle_pruned"
    for kept in (bundles[0], bundles[2]):  # read by the context's replay; the task's latest
        assert api.get(f"/api/v1/bundles/{kept}").status_code == 200
    assert context_replay(project_id=str(project.id), digest=context.digest).matches


def test_the_admin_shows_a_pruned_context_recompiled_and_says_it_was_pruned(auth, admin_client):
    older, _ = two_contexts(auth)
    project_retention_set(project_id=auth.project_id, policy={"context_days": 30}, actor="test")
    retention.project_prune(project_id=auth.project_id)
    page = admin_client.get(f"/admin/compilation/storedcontext/{older.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "pruned by retention" in text and "Make auth_spec.rb pass" in text
