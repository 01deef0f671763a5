"""The MCP prompt ``task_context`` and the resources listed: what a host puts before a model call without the
model calling a tool.

``task_context(task_id, model, focus?)`` compiles the task's context for the model word (the same
``POST /tasks/{id}/compile`` the ``compile_context`` tool calls, so the compile is recorded as any other) and
returns its prompt block as the prompt's one user message; the description names the compiled context, whose
whole record (exclusions, included items) is the resource ``nexum://contexts/{digest}``.

``resources/list`` lists the project's tasks (``nexum://tasks/{id}``), a page at a time with the API's
cursor; the templates name the other resources a client reads by id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import mcp_types as types

from nexum_web.mcp.calls import ApiAnswer, Caller, api_call

TASK_CONTEXT = types.Prompt(
    name="task_context",
    title="Compiled context of a task",
    description="The task's context compiled for one model call under the model word's budget (facts, "
    "decisions, failures, progress, tools, each labelled by trust), as a user message. Compiling is "
    "recorded, as a compile_context call is.",
    arguments=[
        types.PromptArgument(name="task_id", description="the task's id", required=True),
        types.PromptArgument(
            name="model", description="a catalog word: model word, alias or tier word", required=True
        ),
        types.PromptArgument(
            name="focus", description="what you are working on now: ranks the facts", required=False
        ),
    ],
)
_ARGUMENTS = {argument.name: bool(argument.required) for argument in TASK_CONTEXT.arguments or []}
RESOURCES_PAGE = 100


class PromptRefused(Exception):
    """A prompt request that cannot be answered: the argument at fault and why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def task_context(
    caller: Caller, name: str, arguments: Mapping[str, str] | None
) -> types.GetPromptResult | ApiAnswer:
    """The prompt ``name`` with ``arguments``: the compiled context as messages, or the API's refusal."""
    if name != TASK_CONTEXT.name:
        raise PromptRefused("name", f"unknown prompt name: {name} (the prompt is {TASK_CONTEXT.name})")
    values = dict(arguments or {})
    for argument in values:
        if argument not in _ARGUMENTS:
            raise PromptRefused(argument, f"unknown argument {argument} (accepted: {', '.join(_ARGUMENTS)})")
    for argument, required in _ARGUMENTS.items():
        if required and not values.get(argument):
            raise PromptRefused(argument, f"{argument} is required")
    task_id = values.pop("task_id")
    body = {key: value for key, value in values.items() if value}
    answer = api_call(caller, "POST", f"/api/v1/tasks/{quote(task_id, safe='')}/compile", body=body)
    if not answer.ok:
        return answer
    context = answer.body["context"]
    budget = context["budget"]["context_tokens"]
    return types.GetPromptResult(
        description=f"Context {context['digest']} of task {task_id} for {context['model']}: "
        f"{context['total_tokens']} of {budget} tokens; the whole record is nexum://contexts/"
        f"{context['digest']}",
        messages=[
            types.PromptMessage(
                role="user", content=types.TextContent(type="text", text=context["prompt_block"])
            )
        ],
    )


def task_resources(caller: Caller, cursor: str | None) -> types.ListResourcesResult | ApiAnswer:
    """One page of the project's tasks as resources, the API's next cursor as the next page's."""
    query: dict[str, Any] = {"limit": RESOURCES_PAGE, "cursor": cursor}
    answer = api_call(caller, "GET", "/api/v1/tasks", query=query)
    if not answer.ok:
        return answer
    return types.ListResourcesResult(
        resources=[
            types.Resource(
                uri=f"nexum://tasks/{task['id']}",
                name=f"task {task['key']}" if task.get("key") else f"task {task['id']}",
                title=task["objective"],
                description=f"{task['state']}, attempt {task['attempt']}, goal {task['goal_id']}",
                mime_type="application/json",
            )
            for task in answer.body["results"]
        ],
        next_cursor=answer.body.get("next_cursor"),
    )
