"""Run by the export/import and backup tests under a given DATABASE_URL (a separate process per database):

python tests/e2e/portable_world.py build SLUG      a project with a world, tokens, an artifact, compiles
                                                    (the first pruned by retention), a usage report
                                                    and a granted approval
python tests/e2e/portable_world.py snapshot SLUG   JSON: the project's read models as of its head, and
                                                    whether each stored context replays to its digest
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from datetime import timedelta  # noqa: E402

from django.core.serializers.json import DjangoJSONEncoder  # noqa: E402
from django.utils import timezone  # noqa: E402

from context_app.compilation import retention  # noqa: E402
from context_app.compilation.models import StoredContext  # noqa: E402
from context_app.compilation.services.compiles import context_compile  # noqa: E402
from context_app.compilation.services.replays import context_replay  # noqa: E402
from context_app.compilation.services.usage import context_usage_report  # noqa: E402
from context_app.world.services.facts import fact_record  # noqa: E402
from context_app.world.services.records import artifact_record  # noqa: E402
from context_app.world.services.scopes import scope_resolve  # noqa: E402
from nexum.eventstore import projections, reading  # noqa: E402
from tasks_app import selectors  # noqa: E402
from tasks_app.services.projects import project_create, project_retention_set  # noqa: E402
from tasks_app.services.tokens import agent_token_issue  # noqa: E402
from tests.integration.compile_world import build_auth_world  # noqa: E402
from verification_app.services.approvals import approval_decide, approval_request  # noqa: E402


def build(slug: str) -> None:
    project = project_create(slug=slug, name=slug.title(), actor="test")
    auth = build_auth_world(project, filler=4, tools=3)
    agent_token_issue(project_id=auth.project_id, name="agent-1", role="agent", actor="test")
    scope = scope_resolve(project_id=auth.project_id, task_id=str(auth.task.id))
    artifact_record(
        scope=scope,
        uri="artifact://log/1",
        summary="the failing run's log",
        content=b"line 48: invalid token\n",
        actor="test",
    )
    for word in ("local", "local"):
        context_compile(project_id=auth.project_id, task_id=str(auth.task.id), model_word=word, actor="t")
    project_retention_set(
        project_id=auth.project_id,
        policy={"context_days": 1, "bundle_days": None, "check_output_days": None},
        actor="test",
    )
    two_days_on = timezone.now() + timedelta(days=2)
    assert retention.project_prune(project_id=auth.project_id, now=two_days_on).contexts.count == 1
    fact_record(scope=scope, text="The token check reads the clock", subject="auth", actor="test")
    last = context_compile(
        project_id=auth.project_id, task_id=str(auth.task.id), model_word="local", actor="t"
    )
    context_usage_report(
        project_id=auth.project_id,
        digest=last.context.digest,
        prompt_tokens=last.context.total_tokens + 12,
        completion_tokens=40,
        provider="vllm",
        model="gemma",
        cost=0.25,
        actor="agent:agent-1",
    )
    approval = approval_request(
        project_id=auth.project_id,
        task_id=str(auth.task.id),
        action="deploy",
        arguments_digest="0" * 64,
        reason="deploys to staging",
        actor="agent:agent-1",
    )
    approval_decide(
        project_id=auth.project_id,
        approval_id=str(approval.id),
        decision="grant",
        reason="staging is free",
        actor="human:ops",
    )


def snapshot(slug: str, until: str = "") -> None:
    """``until``: a log position (default: the project's head), so that the events an import adds after the
    exported log (its token revocations) are left out."""
    project = selectors.project_by_slug(slug=slug)
    project_id = str(project.id)
    head = reading.project_head(project_id)
    position = int(until) if until else head[0]
    replays = {
        digest: context_replay(project_id=project_id, digest=digest).matches
        for digest in StoredContext.objects.filter(project_id=project_id).values_list("digest", flat=True)
    }
    with projections.state_as_of(position, project_id=project_id):
        tables = projections.snapshot()
    print(
        json.dumps(
            {"head": head, "replays": replays, "tables": tables}, cls=DjangoJSONEncoder, sort_keys=True
        )
    )


if __name__ == "__main__":
    {"build": build, "snapshot": snapshot}[sys.argv[1]](*sys.argv[2:])
