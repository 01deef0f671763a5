"""The framework adapters (nexum_client.adapters) against a live server, each with its framework's own
package and a scripted model: a run compiles the task's context before each model call and the model
finds it where the framework puts it (the system prompt or instructions), every tool call is recorded, and
the gate completes the task. The LangGraph store maps onto facts; deleting is refused. The examples in
examples/ are the runs."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from nexum_client import Nexum

EXAMPLES = Path(django_settings.BASE_DIR) / "examples"


def load_example(name: str):
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


@pytest.fixture
def world(settings, tmp_path, project):
    """The project with the default model catalog, a workspace where this interpreter may run the gate's
    pytest, and the agent's and the operator's tokens."""
    from context_app.catalog.services import DEFAULT_CATALOG, model_catalog_replace
    from tasks_app.services.tokens import agent_token_issue

    settings.NEXUM_WORKSPACE_ROOT = tmp_path / "workspace"
    settings.NEXUM_ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.NEXUM_CHECK_EXECUTABLES = [sys.executable]
    model_catalog_replace(
        project_id=str(project.id), catalog=json.loads(DEFAULT_CATALOG.read_text()), actor="operator:test"
    )
    agent = agent_token_issue(project_id=str(project.id), name="adapter-agent", actor="test").key
    operator = agent_token_issue(
        project_id=str(project.id), name="adapter-operator", role="operator", actor="test"
    ).key
    return {"project": project, "agent": agent, "operator": operator}


@pytest.fixture
def planned(live_server, world):
    """A task planned by the operator as examples/agent_loop.py plans it: (task id, checkout)."""
    from verification_app.runner import workspace_folder

    script = load_example("framework_script")
    with Nexum(live_server.url, world["operator"]) as operator:
        return script.plan_task(operator, workspace=workspace_folder(str(world["project"].id)))


def recorded(task_id: str, event_type: str) -> list[dict]:
    from nexum.eventstore.models import Event

    rows = Event.objects.filter(event_type=event_type).order_by("position")
    return [row.data for row in rows if str(row.data.get("task_id")) == str(task_id)]


def assert_compiled_before_each_call(contexts, system_prompts, task_id) -> None:
    """One compile per model call, each call's prompt carrying the context compiled for it."""
    assert len(contexts) == len(system_prompts) == 3
    for context, prompt in zip(contexts, system_prompts, strict=True):
        assert context.prompt_block and context.prompt_block in prompt
    compiled = recorded(task_id, "ContextCompiled")
    assert [payload["digest"] for payload in compiled] == [context.digest for context in contexts]


def assert_tool_calls_recorded(task_id) -> None:
    calls = recorded(task_id, "ToolCallRecorded")
    assert [payload["tool"] for payload in calls] == ["read_file", "edit_file"]
    assert "replaced 2 lines with 2" in calls[1]["text"]


def assert_completed(task_id, completion, checkout) -> None:
    from tasks_app.models import Task

    assert completion.outcome == "completed", completion.reason
    assert Task.objects.get(id=task_id).state == "completed"
    assert "if now >= expiry:" in (checkout / "auth_service/tokens.py").read_text()


def test_langgraph_create_agent_compiles_before_each_call_and_records_tool_calls(live_server, world, planned):
    task_id, checkout = planned
    example = load_example("langgraph_agent")
    with Nexum(live_server.url, world["agent"]) as agent:
        result = example.run(agent, task_id, checkout=checkout)
    assert result.script.system_prompts[0].startswith("You fix bugs in the repository you are given.\n\n")
    assert_compiled_before_each_call(result.middleware.contexts, result.script.system_prompts, task_id)
    assert_tool_calls_recorded(task_id)
    assert_completed(task_id, result.completion, checkout)


def test_the_langgraph_store_puts_facts_reads_them_and_refuses_delete(live_server, world):
    from langgraph.store.base import InvalidNamespaceError
    from nexum_client.adapters.langchain import NexumStore, StoreDeleteRefused

    with Nexum(live_server.url, world["agent"]) as agent:
        goal = agent.create_goal("Remember things", tasks=[{"key": "a", "objective": "Keep notes"}])
        task_id = goal.task("a").id
        agent.start(task_id)
        agent.record_fact("The build takes 4 minutes", task_id=task_id, subject="build")
        store = NexumStore(agent, task_id)

        assert store.get(("prefs", "user-1"), "food") is None
        store.put(("prefs", "user-1"), "food", {"likes": "pizza"})
        store.put(("prefs", "user-2"), "food", {"likes": "soup"})
        store.put(("notes",), "deploy", {"text": "deploys need a reviewer"})
        first = store.get(("prefs", "user-1"), "food")
        assert (first.namespace, first.key, first.value) == (("prefs", "user-1"), "food", {"likes": "pizza"})

        # A second put supersedes the fact: the store reads the new value, the history keeps both.
        store.put(("prefs", "user-1"), "food", {"likes": "ramen"})
        assert store.get(("prefs", "user-1"), "food").value == {"likes": "ramen"}
        facts = {fact.raw["source"]: fact for fact in agent.items(task_id=task_id, kind="fact")}
        history = [
            fact.text for fact in agent.items(task_id=task_id, kind="fact") if fact.raw["subject"] == "food"
        ]
        assert history == ['{"likes": "pizza"}', '{"likes": "soup"}', '{"likes": "ramen"}']
        assert facts["langgraph:prefs.user-1"].raw["status"] == "current"

        assert [item.value for item in store.search(("prefs",))] == [{"likes": "ramen"}, {"likes": "soup"}]
        assert [item.key for item in store.search(("prefs",), filter={"likes": "soup"})] == ["food"]
        assert [item.value for item in store.search((), query="reviewer")] == [
            {"text": "deploys need a reviewer"}
        ]
        assert store.search(("prefs",), limit=1, offset=1)[0].namespace == ("prefs", "user-2")
        assert store.list_namespaces() == [("notes",), ("prefs", "user-1"), ("prefs", "user-2")]
        assert store.list_namespaces(prefix=("prefs",), max_depth=1) == [("prefs",)]
        # The fact recorded without the store is in the world state, not in the store's namespaces.
        assert all(item.key != "build" for item in store.search(()))

        with pytest.raises(StoreDeleteRefused, match=r"append-only.*retract_fact"):
            store.delete(("prefs", "user-1"), "food")
        assert store.get(("prefs", "user-1"), "food").value == {"likes": "ramen"}
        assert asyncio.run(store.aget(("prefs", "user-2"), "food")).value == {"likes": "soup"}
        with pytest.raises(InvalidNamespaceError):
            store.put(("bad.label",), "k", {"v": 1})


def test_an_agents_sdk_run_compiles_its_instructions_each_call_and_records_tool_calls(
    live_server, world, planned
):
    task_id, checkout = planned
    example = load_example("openai_agents_agent")
    with Nexum(live_server.url, world["agent"]) as agent:
        result = example.run(agent, task_id, checkout=checkout)
    assert result.answer == load_example("framework_script").ANSWER
    assert_compiled_before_each_call(result.instructions.contexts, result.script.system_prompts, task_id)
    assert_tool_calls_recorded(task_id)
    assert_completed(task_id, result.completion, checkout)


def test_a_pydantic_ai_run_compiles_its_instructions_each_request_and_records_tool_calls(
    live_server, world, planned
):
    task_id, checkout = planned
    example = load_example("pydantic_ai_agent")
    with Nexum(live_server.url, world["agent"]) as agent:
        result = example.run(agent, task_id, checkout=checkout)
    assert result.answer == load_example("framework_script").ANSWER
    assert_compiled_before_each_call(result.nexum_context.contexts, result.script.system_prompts, task_id)
    assert_tool_calls_recorded(task_id)
    assert result.nexum_context.dropped_messages == 0  # the whole short history fits the window
    assert_completed(task_id, result.completion, checkout)
