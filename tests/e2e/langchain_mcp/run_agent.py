"""A LangChain 1.x ``create_agent`` whose only tools are Nexum's, loaded over Streamable HTTP by
langchain-mcp-adapters, with a scripted chat model following tests/e2e/mcp_script.py.

Run by tests/e2e/test_mcp_frameworks.py in the interpreter of .venv/langchain-mcp (langchain-mcp-adapters
needs mcp<2, the server mcp 2.x): ``run_agent.py URL TOKEN TASK_ID``. It prints one JSON object: the run's
final answer, the tool answers each model call saw, and every tool message (tool, status, text).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_mcp_adapters.client import MultiServerMCPClient
from pydantic import ConfigDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/e2e, for mcp_script

from mcp_script import McpScript


class ScriptedChatModel(BaseChatModel):
    """A chat model that binds any tools and answers by ``McpScript`` from the tool messages so far."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    script: McpScript

    @property
    def _llm_type(self) -> str:
        return "nexum-mcp-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        answers = [message.text for message in messages if isinstance(message, ToolMessage)]
        step = self.script.next_step(answers)
        if step.answer is not None:
            message = AIMessage(content=step.answer)
        else:
            call = {"name": step.tool, "args": step.arguments, "id": f"call-{len(answers) + 1}"}
            message = AIMessage(content="", tool_calls=[{**call, "type": "tool_call"}])
        return ChatResult(generations=[ChatGeneration(message=message)])


async def run(url: str, token: str, task_id: str) -> dict[str, Any]:
    client = MultiServerMCPClient(
        {
            "nexum": {
                "transport": "streamable_http",
                "url": url,
                "headers": {"Authorization": f"Bearer {token}"},
            }
        }
    )
    script = McpScript(task_id)
    graph = create_agent(ScriptedChatModel(script=script), tools=await client.get_tools())
    state = await graph.ainvoke({"messages": [{"role": "user", "content": f"Work on task {task_id}."}]})
    tool_messages = [
        {"tool": message.name, "status": message.status, "text": message.text}
        for message in state["messages"]
        if isinstance(message, ToolMessage)
    ]
    return {"answer": state["messages"][-1].text, "seen": script.seen, "tool_messages": tool_messages}


if __name__ == "__main__":
    url, token, task_id = sys.argv[1:4]
    print(json.dumps(asyncio.run(run(url, token, task_id))))
