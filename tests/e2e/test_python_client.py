"""The Python client (clients/python) against a live server (pytest-django's ``live_server``, on the test
database: PostgreSQL when ``DATABASE_URL`` names it): the example agent loop drives a task to completion
through a failed gate and a retry; a POST whose answer is lost is retried and written once; errors arrive
typed; the event feed is read page by page; an agent waits for an operator's approval."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from django.conf import settings as django_settings
from nexum_client import ApprovalTimeout, BadRequest, Conflict, Forbidden, Nexum, NotFound

EXAMPLE = Path(django_settings.BASE_DIR) / "examples" / "agent_loop.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_loop", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def world(settings, tmp_path, project):
    """The project with the default model catalog, a workspace where this interpreter may run, and the
    agent's and the operator's tokens."""
    from context_app.catalog.services import DEFAULT_CATALOG, model_catalog_replace
    from tasks_app.services.tokens import agent_token_issue

    settings.NEXUM_WORKSPACE_ROOT = tmp_path / "workspace"
    settings.NEXUM_ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.NEXUM_CHECK_EXECUTABLES = [sys.executable]
    model_catalog_replace(
        project_id=str(project.id), catalog=json.loads(DEFAULT_CATALOG.read_text()), actor="operator:test"
    )
    agent = agent_token_issue(project_id=str(project.id), name="loop-agent", actor="test").key
    operator = agent_token_issue(
        project_id=str(project.id), name="loop-operator", role="operator", actor="test"
    ).key
    return {"project": project, "agent": agent, "operator": operator}


def test_the_example_agent_loop_completes_a_task_after_a_failed_gate(live_server, world):
    from tasks_app.models import Task
    from verification_app.models import CompletionRequest
    from verification_app.runner import workspace_folder

    example = load_example()
    lines: list[str] = []
    with Nexum(live_server.url, world["operator"]) as operator:
        task_id, checkout = example.plan_task(operator, workspace=workspace_folder(str(world["project"].id)))
    model = example.ScriptedModel()
    with Nexum(live_server.url, world["agent"]) as agent:
        result = example.drive_task(agent, task_id, checkout=checkout, model=model, say=lines.append)
        events = list(agent.events(limit=25))

    assert (result.outcome, result.attempts) == ("completed", 2)
    assert [completion.outcome for completion in result.completions] == ["failed", "completed"]
    assert "test_a_fresh_token_verifies" in result.completions[0].reason + str(
        result.completions[0].check_runs
    )
    # The second context carried the gate's refusal: the model read it there.
    assert "test_a_fresh_token_verifies" not in model.prompts[0]
    assert "test_a_fresh_token_verifies" in model.prompts[1]
    task = Task.objects.get(id=task_id)
    assert (task.state, task.attempt) == ("completed", 2)
    decided = CompletionRequest.objects.filter(task_id=task_id).order_by("requested_at")
    assert [row.outcome for row in decided] == ["failed", "completed"]
    assert "if now >= expiry:" in (checkout / "auth_service/tokens.py").read_text()

    # The feed, read through the client 25 at a time, is the project's log in order.
    positions = [event.position for event in events]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    types = [event.type for event in events]
    assert types.count("GateDecided") == 2 and "ToolCallRecorded" in types


class DropAnswerOnce(httpx.BaseTransport):
    """Passes requests to the server, but loses the answer of the first POST to a path ending in
    ``suffix``: the server did the work, the client never hears of it."""

    def __init__(self, suffix: str) -> None:
        self.inner = httpx.HTTPTransport()
        self.suffix = suffix
        self.keys: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == "POST" and request.url.path.endswith(self.suffix):
            self.keys.append(request.headers["Idempotency-Key"])
            if len(self.keys) == 1:
                response.read()
                response.close()
                raise httpx.ReadError("the connection dropped before the answer arrived", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


def _goal_task(client: Nexum) -> str:
    goal = client.create_goal("Ship it", tasks=[{"key": "a", "objective": "Do the thing"}])
    return goal.task("a").id


@pytest.mark.parametrize("suffix", ["/facts", "/tool-calls", "/start", "/compile"])
def test_a_post_whose_answer_was_lost_is_retried_and_written_once(live_server, world, suffix):
    from nexum.eventstore import reading
    from nexum.eventstore.models import Event

    setup = Nexum(live_server.url, world["agent"])
    task_id = _goal_task(setup)
    if suffix != "/start":
        setup.start(task_id)
    before = reading.head_position()
    transport = DropAnswerOnce(suffix)
    with Nexum(live_server.url, world["agent"], transport=transport, backoff_s=0.01) as agent:
        if suffix == "/facts":
            agent.record_fact("the spec expects 401", task_id=task_id, subject="spec")
        elif suffix == "/tool-calls":
            agent.record_tool_call(task_id, "run_tests", "1 failed", arguments={"k": "expiry"})
        elif suffix == "/start":
            assert agent.start(task_id).state == "running"
        else:
            agent.compile(task_id, "local")

    assert len(transport.keys) == 2 and transport.keys[0] == transport.keys[1]
    written = list(Event.objects.filter(position__gt=before).values_list("event_type", flat=True))
    assert len(written) == 1, written  # one event, though the server answered twice
    setup.close()


def test_a_compile_with_a_focus_ranks_by_it_and_shows_it(live_server, world):
    release = "Doing the thing means shipping it from the release branch"
    certificates = "The staging cluster rotates its certificates weekly"
    with Nexum(live_server.url, world["agent"]) as agent:
        task_id = _goal_task(agent)
        agent.start(task_id)
        agent.record_fact(release, task_id=task_id)
        agent.record_fact(certificates, task_id=task_id)
        plain = agent.compile(task_id, "quick")
        focused = agent.compile(task_id, "quick", focus="renewing the staging certificates")

    def rank(block: str, text: str) -> int:
        return block.index(text) if text in block else len(block)

    assert rank(plain.prompt_block, release) < rank(plain.prompt_block, certificates)
    assert "focus: renewing the staging certificates" in focused.prompt_block
    assert rank(focused.prompt_block, certificates) < rank(focused.prompt_block, release)


def test_the_providers_usage_is_reported_and_summed_by_the_client(live_server, world):
    with Nexum(live_server.url, world["agent"]) as agent:
        task_id = _goal_task(agent)
        agent.start(task_id)
        context = agent.compile(task_id, "quick")
        nexum = context.total_tokens
        reported = agent.report_usage(
            context.digest,
            prompt_tokens=nexum + 50,
            completion_tokens=9,
            provider="vllm",
            model="gemma",
            cost=0.01,
        )
        again = agent.report_usage(
            context.digest,
            prompt_tokens=nexum + 50,
            completion_tokens=9,
            provider="vllm",
            model="gemma",
            cost=0.01,
            idempotency_key="call-7",
        )
        with pytest.raises(BadRequest) as negative:
            agent.report_usage(context.digest, prompt_tokens=-1, completion_tokens=0, provider="p", model="m")
        with pytest.raises(NotFound):
            agent.report_usage("0" * 64, prompt_tokens=1, completion_tokens=0, provider="p", model="m")
        totals = agent.usage(task_id=task_id)
    assert reported["drift"] == pytest.approx(50 / nexum) and again["nexum_tokens"] == nexum
    assert negative.value.field == "prompt_tokens"
    assert totals["scope"] == "task" and totals["totals"]["reports"] == 2
    assert totals["totals"]["prompt_tokens"] == 2 * (nexum + 50) and totals["totals"]["cost"] == 0.02


def test_errors_arrive_typed_with_code_field_and_request_id(live_server, world):
    with Nexum(live_server.url, world["agent"]) as agent:
        task_id = _goal_task(agent)
        with pytest.raises(BadRequest) as bad:
            agent.request("POST", f"tasks/{task_id}/facts", json={"text": "x", "colour": "red"})
        assert bad.value.field == "colour" and bad.value.request_id
        with pytest.raises(Forbidden) as forbidden:
            agent.create_goal("g", tasks=[{"key": "a", "objective": "a"}], contracts={"a": {"checks": []}})
        assert (forbidden.value.code, forbidden.value.field) == ("forbidden", "contracts")
        with pytest.raises(NotFound):
            agent.task("00000000-0000-0000-0000-000000000000")


def test_an_agent_retracting_an_operators_fact_gets_forbidden_naming_trust_class(live_server, world):
    from nexum.eventstore.models import Event

    operator, agent = Nexum(live_server.url, world["operator"]), Nexum(live_server.url, world["agent"])
    with operator, agent:
        task_id = _goal_task(operator)
        rule = operator.record_fact("Deploys need a second reviewer", task_id=task_id)
        before = Event.objects.count()
        for change in (
            lambda: agent.retract_fact(rule.id, reason="not needed"),
            lambda: agent.supersede_fact(rule.id, "Deploys need no review"),
        ):
            with pytest.raises(Forbidden) as refused:
                change()
            assert (refused.value.code, refused.value.field) == ("forbidden", "trust_class")
            assert refused.value.details["trust_class"] == "repository_authored"
            assert "trust_class" in str(refused.value)
        assert Event.objects.count() == before
        own = agent.record_fact("The build takes 4 minutes", task_id=task_id)
        assert agent.retract_fact(own.id, reason="measured again").raw["status"] == "retracted"


def test_lists_are_iterated_page_by_page(live_server, world):
    with Nexum(live_server.url, world["agent"]) as agent:
        made = {_goal_task(agent) for _ in range(3)}
        assert {task.id for task in agent.tasks(limit=1)} == made
        assert [task.state for task in agent.tasks(state="pending", limit=2)] == ["pending"] * 3


def test_an_agent_waits_for_an_approval_and_reads_the_operators_answer(live_server, world):
    """A held start raises ``Conflict`` naming the approval; the agent asks before its own action and waits;
    it cannot decide (``Forbidden``); the operator's grant lets the start through."""
    contract = {"checks": [], "require_checks": False, "approval": "before_start"}
    with Nexum(live_server.url, world["operator"]) as operator:
        goal = operator.create_goal(
            "Release", tasks=[{"key": "deploy", "objective": "Deploy"}], contracts={"deploy": contract}
        )
    task_id = goal.task("deploy").id
    with Nexum(live_server.url, world["agent"]) as agent:
        with pytest.raises(Conflict) as held:
            agent.start(task_id)
        assert held.value.code == "approval_required"
        start_approval = held.value.details["approval_id"]
        asked = agent.request_approval(task_id, "deploy", reason="push build 41", arguments_digest="a" * 64)
        assert (asked.state, asked.decided, asked.attempt) == ("pending", False, 0)
        with pytest.raises(ApprovalTimeout) as waited:
            agent.wait_for_approval(asked.id, timeout_s=0)
        assert waited.value.details == {"approval_id": asked.id}
        assert [approval.id for approval in agent.approvals(task_id=task_id, state="pending")] == [
            asked.id,
            start_approval,
        ]
        with pytest.raises(Forbidden):
            agent.request(
                "POST", f"approvals/{start_approval}/decision", json={"decision": "grant", "reason": "x"}
            )
        with Nexum(live_server.url, world["operator"]) as operator:
            for approval_id in (start_approval, asked.id):
                operator.request(
                    "POST", f"approvals/{approval_id}/decision", json={"decision": "grant", "reason": "go"}
                )
        answer = agent.wait_for_approval(asked.id, timeout_s=5, poll_interval_s=0.1)
        assert answer.granted and answer.decision_reason == "go"
        assert agent.approval(start_approval).granted
        assert agent.start(task_id).state == "running"
