"""An OpenAI Agents SDK agent working a Nexum task, with the SDK's own ``ScriptedModel`` (agents.testing).

The agent's ``instructions`` are a ``NexumInstructions``: the SDK calls it before each model call, and it
compiles the task's context. ``NexumRunHooks`` records each tool call. The gate decides the task at the end.
Against ``make run``: ``.venv/bin/python examples/openai_agents_agent.py`` (no OpenAI key, no network but
Nexum).
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path

from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from framework_script import Script, example_main, file_tools
from nexum_client import Completion, Nexum
from nexum_client.adapters.openai_agents import NexumInstructions, NexumRunHooks


def scripted_model(script: Script, model_calls: int = 3) -> ScriptedModel:
    """The SDK's scripted model, each step answering from the call's system instructions by ``script``."""

    def respond(call: ModelCall) -> list:
        answers = sum(
            1 for item in call.input if isinstance(item, dict) and item.get("type") == "function_call_output"
        )
        step = script.next_step(call.system_instructions or "", answers)
        if step.answer is not None:
            return [assistant_message(step.answer)]
        return [function_call(step.tool, step.arguments, call_id=f"call-{answers + 1}")]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(model_calls)])


@dataclass
class Run:
    completion: Completion
    instructions: NexumInstructions
    script: Script
    answer: str


def run(agent: Nexum, task_id: str, *, checkout: Path, model_word: str = "local") -> Run:
    """Start the task, run the agent to its final output, ask the gate."""
    agent.start(task_id)
    script = Script()
    instructions = NexumInstructions(
        agent, task_id, model_word, base="You fix bugs in the repository you are given."
    )
    worker = Agent(
        name="fixer",
        instructions=instructions,
        tools=[function_tool(tool) for tool in file_tools(checkout)],
        model=scripted_model(script),
    )
    result = asyncio.run(
        Runner.run(
            worker,
            "Work on your task.",
            hooks=NexumRunHooks(agent, task_id),
            run_config=RunConfig(tracing_disabled=True),
        )
    )
    answer = str(result.final_output)
    return Run(agent.complete(task_id, answer), instructions, script, answer)


def main(argv: list[str] | None = None) -> int:
    return example_main(__doc__.split("\n\n")[0], run, lambda result: len(result.instructions.contexts), argv)


if __name__ == "__main__":
    sys.exit(main())
