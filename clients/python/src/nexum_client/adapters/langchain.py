"""LangChain 1.x / LangGraph: ``NexumMiddleware`` for ``create_agent`` and ``NexumStore``, a LangGraph
``BaseStore`` over the task's facts (``pip install 'nexum-client[langchain]'``).

``NexumMiddleware`` compiles the task's context before each model call and puts its prompt block in the
system message (after the agent's own ``system_prompt``); each tool call the agent runs is recorded to
Nexum with its arguments and a summary of its result (a tool that raises is recorded, then the error goes on
to LangChain's own handling).

``NexumStore`` maps the store onto facts: ``put(namespace, key, value)`` records a fact whose subject is
``key``, whose source is ``langgraph:`` and the namespace's labels joined by ``.``, and whose text is the
value as JSON; a second ``put`` of the same key supersedes that fact (the first stays in the history).
``get``, ``search`` and ``list_namespaces`` read the current facts the task sees that a store wrote (each
call lists them: no cache); a ``search`` query keeps the facts that contain each of its words (no embeddings:
the compile ranks facts, the store only finds them), newest first. Deleting is refused: Nexum's log is
append-only (``Nexum.retract_fact`` withdraws a fact with a reason). Keys are at most 500 characters (a
fact's subject).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any

from nexum_client.adapters._common import TaskCompiler, arguments_of, missing_framework, with_context
from nexum_client.client import Nexum
from nexum_client.models import Context, Item

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain_core.messages import SystemMessage, ToolMessage
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        ListNamespacesOp,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        validate_op_namespace,
    )
    from langgraph.store.base import Item as StoreItem
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise missing_framework("langchain", error) from error

STORE_SOURCE = "langgraph:"


class NexumMiddleware(AgentMiddleware):
    """``create_agent(model, tools, middleware=[NexumMiddleware(nexum, task_id, "local")])``: every model
    call gets a fresh compile of the task's context as its system prompt; every tool call is recorded.
    ``contexts`` holds the contexts compiled, one per model call."""

    def __init__(self, nexum: Nexum, task_id: str, model: str, *, focus: str | None = None) -> None:
        super().__init__()
        self.compiler = TaskCompiler(nexum, task_id, model, focus)

    @property
    def contexts(self) -> list[Context]:
        return self.compiler.contexts

    def _with_context(self, request: ModelRequest) -> ModelRequest:
        context = self.compiler.compile()
        prompt = with_context(request.system_prompt, context)
        return request.override(system_message=SystemMessage(content=prompt))

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(self._with_context(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        return await handler(await asyncio.to_thread(self._with_context, request))

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        try:
            result = handler(request)
        except Exception as error:
            self._record(request, f"error: {error}")
            raise
        self._record(request, _tool_result_text(result))
        return result

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        try:
            result = await handler(request)
        except Exception as error:
            await asyncio.to_thread(self._record, request, f"error: {error}")
            raise
        await asyncio.to_thread(self._record, request, _tool_result_text(result))
        return result

    def _record(self, request: Any, summary: str) -> None:
        call = request.tool_call
        self.compiler.record_tool_call(call["name"], arguments_of(call.get("args")), summary)


def _tool_result_text(result: Any) -> str:
    """What the tool answered the model; a ``Command`` (the tool changed the graph's state) by its repr."""
    if isinstance(result, ToolMessage):
        return f"error: {result.text}" if result.status == "error" else result.text
    return f"{type(result).__name__}: {result!r}"


class StoreDeleteRefused(NotImplementedError):
    """A ``delete`` (or a ``put`` of ``None``) on ``NexumStore``: the log keeps every fact."""


class NexumStore(BaseStore):
    """A LangGraph ``BaseStore`` over the current facts a task sees; puts are recorded to the task."""

    def __init__(self, nexum: Nexum, task_id: str) -> None:
        self.nexum = nexum
        self.task_id = task_id

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, PutOp):
                results.append(self._put(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                raise TypeError(f"NexumStore does not know the operation {type(op).__name__}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _store_facts(self) -> list[tuple[tuple[str, ...], Item]]:
        """The current facts the task sees that the store wrote: (namespace, fact), oldest first."""
        facts = []
        for fact in self.nexum.items(task_id=self.task_id, kind="fact", current=True):
            source = fact.raw.get("source") or ""
            if source.startswith(STORE_SOURCE):
                facts.append((tuple(source[len(STORE_SOURCE) :].split(".")), fact))
        return facts

    def _find(self, namespace: tuple[str, ...], key: str) -> Item | None:
        found = None
        for fact_namespace, fact in self._store_facts():
            if fact_namespace == namespace and fact.raw.get("subject") == key:
                found = fact  # the newest current one wins
        return found

    def _get(self, op: GetOp) -> StoreItem | None:
        fact = self._find(tuple(op.namespace), op.key)
        return None if fact is None else _store_item(tuple(op.namespace), fact)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        words = (op.query or "").casefold().split()
        found = []
        for namespace, fact in self._store_facts():
            if namespace[: len(prefix)] != prefix:
                continue
            item = _store_item(namespace, fact)
            if op.filter and any(item.value.get(name) != wanted for name, wanted in op.filter.items()):
                continue
            if words and not all(word in fact.text.casefold() for word in words):
                continue
            found.append(item)
        found.reverse()  # newest first, as the in-memory store answers without a query
        return found[op.offset : op.offset + op.limit]

    def _put(self, op: PutOp) -> None:
        namespace = tuple(op.namespace)
        if op.value is None:
            raise StoreDeleteRefused(
                f"NexumStore cannot delete {'.'.join(namespace)}/{op.key}: Nexum's log is append-only. "
                "Retract the fact with a reason instead (Nexum.retract_fact), or put a new value."
            )
        text = json.dumps(dict(op.value), sort_keys=True, ensure_ascii=False, default=str)
        source = STORE_SOURCE + ".".join(namespace)
        current = self._find(namespace, op.key)
        if current is None:
            self.nexum.record_fact(text, task_id=self.task_id, subject=op.key, source=source)
        else:
            self.nexum.supersede_fact(
                current.id, text, subject=op.key, source=source, reason="a new value was put in the store"
            )

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = sorted({namespace for namespace, _ in self._store_facts()})
        for condition in op.match_conditions or ():
            path = tuple(condition.path)
            if condition.match_type == "prefix":
                namespaces = [ns for ns in namespaces if _matches(ns[: len(path)], path)]
            else:
                namespaces = [
                    ns for ns in namespaces if len(ns) >= len(path) and _matches(ns[-len(path) :], path)
                ]
        if op.max_depth is not None:
            namespaces = sorted({ns[: op.max_depth] for ns in namespaces})
        return namespaces[op.offset : op.offset + op.limit]


def _matches(labels: tuple[str, ...], path: tuple[str, ...]) -> bool:
    return len(labels) == len(path) and all(
        want in ("*", label) for label, want in zip(labels, path, strict=True)
    )


def _store_item(namespace: tuple[str, ...], fact: Item) -> SearchItem:
    """The fact as the store's item: its value is the JSON object it holds (a fact written otherwise reads as
    ``{"text": ...}``)."""
    try:
        value = json.loads(fact.text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        value = {"text": fact.text}
    recorded = datetime.fromisoformat(fact.raw["recorded_at"])
    updated = datetime.fromisoformat(fact.raw.get("updated_at") or fact.raw["recorded_at"])
    return SearchItem(namespace, str(fact.raw.get("subject") or fact.id), value, recorded, updated)
