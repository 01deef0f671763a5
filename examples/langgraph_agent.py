"""A LangChain 1.x ``create_agent`` (a LangGraph graph) working a Nexum task, with a scripted chat model.

``NexumMiddleware`` compiles the task's context before each model call and makes it the system prompt;
it records each tool call. ``NexumStore`` is the graph's store: a note the agent puts there is a fact in
the task's world state. The gate decides the task at the end. Against ``make run``:
``.venv/bin/python examples/langgraph_agent.py`` (no model provider, no network but Nexum).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from framework_script import Script, example_main, file_tools
from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from nexum_client import Completion, Nexum
from nexum_client.adapters.langchain import NexumMiddleware, NexumStore
from pydantic import ConfigDict


class ScriptedChatModel(BaseChatModel):
    """A chat model that follows ``framework_script.Script``: it binds any tools and answers by the
    script, from the system message it is given and the tool answers so far."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    script: Script

    @property
    def _llm_type(self) -> str:
        return "nexum-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ):
        system = messages[0].text if messages and isinstance(messages[0], SystemMessage) else ""
        answers = sum(isinstance(message, ToolMessage) for message in messages)
        step = self.script.next_step(system, answers)
        if step.answer is not None:
            message = AIMessage(content=step.answer)
        else:
            call = {
                "name": step.tool,
                "args": step.arguments,
                "id": f"call-{answers + 1}",
                "type": "tool_call",
            }
            message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])


@dataclass
class Run:
    completion: Completion
    middleware: NexumMiddleware
    script: Script
    answer: str


def run(agent: Nexum, task_id: str, *, checkout: Path, model_word: str = "local") -> Run:
    """Start the task, run the graph to its answer, keep a note in the store, ask the gate."""
    agent.start(task_id)
    script = Script()
    middleware = NexumMiddleware(agent, task_id, model_word)
    store = NexumStore(agent, task_id)
    graph = create_agent(
        ScriptedChatModel(script=script),
        tools=list(file_tools(checkout)),
        system_prompt="You fix bugs in the repository you are given.",
        middleware=[middleware],
        store=store,
    )
    state = graph.invoke({"messages": [{"role": "user", "content": "Work on your task."}]})
    answer = state["messages"][-1].text
    store.put(("notes", "auth-service"), "expiry", {"text": "expiry is enforced with now >= expires_at"})
    return Run(agent.complete(task_id, answer), middleware, script, answer)


def main(argv: list[str] | None = None) -> int:
    return example_main(__doc__.split("\n\n")[0], run, lambda result: len(result.middleware.contexts), argv)


if __name__ == "__main__":
    sys.exit(main())
