"""The OpenAI Agents SDK: ``NexumInstructions``, a callable ``Agent(instructions=...)`` that compiles the
task's context for each model call, and ``NexumRunHooks``, which records each tool call to Nexum
(``pip install 'nexum-client[openai-agents]'``).

The SDK asks an agent for its instructions before every model call, so each call gets a fresh compile. No
``Session`` is offered: a session must ``pop_item`` and ``clear_session``, and Nexum's log is append-only;
the conversation itself is the framework's, the task's world state is Nexum's (README).
"""

from __future__ import annotations

import asyncio
from typing import Any

from nexum_client.adapters._common import (
    TaskCompiler,
    arguments_of,
    missing_framework,
    record_tool_call,
    with_context,
)
from nexum_client.client import Nexum
from nexum_client.models import Context

try:
    from agents import Agent, RunContextWrapper, RunHooks, Tool
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise missing_framework("openai-agents", error) from error


class NexumInstructions:
    """``Agent(instructions=NexumInstructions(nexum, task_id, "local", base="You fix bugs."))``: the agent's
    own instructions (``base``) followed by the compiled context. ``contexts``: one per model call."""

    def __init__(
        self, nexum: Nexum, task_id: str, model: str, *, base: str | None = None, focus: str | None = None
    ) -> None:
        self.compiler = TaskCompiler(nexum, task_id, model, focus)
        self.base = base

    @property
    def contexts(self) -> list[Context]:
        return self.compiler.contexts

    async def __call__(self, context: RunContextWrapper[Any], agent: Agent[Any]) -> str:
        compiled = await asyncio.to_thread(self.compiler.compile)
        return with_context(self.base, compiled)


class NexumRunHooks(RunHooks[Any]):
    """``Runner.run(agent, input, hooks=NexumRunHooks(nexum, task_id))``: every local tool call is recorded
    with its arguments and a summary of what the tool returned (a tool's error text, as the SDK hands it to
    the model, included)."""

    def __init__(self, nexum: Nexum, task_id: str) -> None:
        self.nexum = nexum
        self.task_id = task_id

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        arguments = arguments_of(getattr(context, "tool_arguments", None))
        name = getattr(context, "tool_name", None) or tool.name
        await asyncio.to_thread(record_tool_call, self.nexum, self.task_id, name, arguments, result)
