"""A PydanticAI agent working a Nexum task, with PydanticAI's own ``FunctionModel`` as the scripted model.

``NexumContext.instructions`` is the agent's instructions function: PydanticAI calls it before each model
request, and it compiles the task's context. ``NexumContext.history_processor`` (a ``ProcessHistory``
capability) records each tool call and keeps the history within the budget the compile left. The gate
decides the task at the end. Against ``make run``: ``.venv/bin/python examples/pydantic_ai_agent.py`` (no
provider key, no network but Nexum).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from framework_script import Script, example_main, file_tools
from nexum_client import Completion, Nexum
from nexum_client.adapters.pydantic_ai import NexumContext
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel


def scripted_model(script: Script) -> FunctionModel:
    """A ``FunctionModel`` answering each request by ``script``, from the instructions it was given."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        answers = sum(
            isinstance(part, ToolReturnPart)
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
        )
        step = script.next_step(info.instructions or "", answers)
        if step.answer is not None:
            return ModelResponse(parts=[TextPart(step.answer)])
        return ModelResponse(
            parts=[ToolCallPart(step.tool, step.arguments, tool_call_id=f"call-{answers + 1}")]
        )

    return FunctionModel(respond)


@dataclass
class Run:
    completion: Completion
    nexum_context: NexumContext
    script: Script
    answer: str


def run(agent: Nexum, task_id: str, *, checkout: Path, model_word: str = "local") -> Run:
    """Start the task, run the agent to its output, ask the gate."""
    agent.start(task_id)
    script = Script()
    nexum_context = NexumContext(
        agent, task_id, model_word, base="You fix bugs in the repository you are given."
    )
    worker = Agent(
        scripted_model(script),
        instructions=nexum_context.instructions,
        tools=list(file_tools(checkout)),
        capabilities=[ProcessHistory(nexum_context.history_processor)],
    )
    answer = worker.run_sync("Work on your task.").output
    return Run(agent.complete(task_id, answer), nexum_context, script, answer)


def main(argv: list[str] | None = None) -> int:
    return example_main(
        __doc__.split("\n\n")[0], run, lambda result: len(result.nexum_context.contexts), argv
    )


if __name__ == "__main__":
    sys.exit(main())
