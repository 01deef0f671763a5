"""MCP's cost per call beside REST's, in the same run (issue 29). Run by hand; not a test.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nexum_mcp_bench .venv/bin/python bench/mcp_overhead.py

Builds a project of ``BENCH_ITEMS`` items (1,000) with one running task (bench/worlds.py), resets the
database named by DATABASE_URL (use one of your own), starts gunicorn with deploy/gunicorn.conf.py on
``BENCH_PORT`` (18100; debug off) and times each operation over REST and as the MCP tool that calls it
(``tools/call`` at ``/mcp``, stateless JSON, what the SDK's client sends after its handshake), the two
alternating call by call on two kept-alive connections, ``BENCH_CALLS`` (200) times each after 20 not
counted: a progress note (``record_progress``), a task read (``get_task``), and a compile for the ``local``
card (``compile_context``, ``BENCH_COMPILES`` times, 50). It prints p50/p95 per operation and transport, the
ratio MCP/REST of the p50s and what MCP adds in milliseconds. A refused MCP call (``isError``) stops the run.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django

django.setup()

from agents import percentile, start_server, stop_server  # noqa: E402  (bench/agents.py, beside this)
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from worlds import build_world  # noqa: E402

ITEMS = int(os.environ.get("BENCH_ITEMS", 1000))
CALLS = int(os.environ.get("BENCH_CALLS", 200))
COMPILES = int(os.environ.get("BENCH_COMPILES", 50))
PORT = int(os.environ.get("BENCH_PORT", 18100))
WARMUP_CALLS = 20
PROTOCOL = "2025-11-25"


class Transport:
    """One kept-alive connection and the requests one operation makes over it."""

    def __init__(self, key: str) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.calls = 0

    def send(self, method: str, path: str, body: object | None, headers: dict[str, str]) -> dict[str, object]:
        payload = None if body is None else json.dumps(body)
        self.connection.request(method, path, payload, {**self.headers, **headers})
        response = self.connection.getresponse()
        answer = response.read()
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {answer[:300]!r}")
        return json.loads(answer)

    def rest(self, method: str, path: str, body: object | None = None) -> None:
        self.send(method, path, body, {})

    def tool(self, name: str, arguments: dict[str, object]) -> None:
        self.calls += 1
        message = {
            "jsonrpc": "2.0",
            "id": self.calls,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": PROTOCOL}
        answer = self.send("POST", "/mcp", message, headers)
        result = answer.get("result")
        if not isinstance(result, dict) or result.get("isError"):
            raise RuntimeError(f"{name}: {json.dumps(answer)[:300]}")


def timed(call: Callable[[int], None], step: int) -> float:
    started = time.perf_counter()
    call(step)
    return (time.perf_counter() - started) * 1000


def compare(
    name: str, count: int, over_rest: Callable[[int], None], over_mcp: Callable[[int], None]
) -> dict[str, object]:
    """Both transports, alternating call by call (which goes first alternates too), after a warm-up."""
    for step in range(WARMUP_CALLS):
        over_rest(step)
        over_mcp(step)
    rest: list[float] = []
    mcp: list[float] = []
    for step in range(count):
        pairs = [(rest, over_rest), (mcp, over_mcp)]
        for times, call in pairs if step % 2 == 0 else reversed(pairs):
            times.append(timed(call, step))
    return {
        "operation": name,
        "rest": (percentile(rest, 0.5), percentile(rest, 0.95)),
        "mcp": (percentile(mcp, 0.5), percentile(mcp, 0.95)),
    }


def main() -> None:
    if connection.vendor != "postgresql":
        sys.exit("bench/mcp_overhead.py needs DATABASE_URL naming a PostgreSQL database of your own")
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    world = build_world(slug="mcp", size=ITEMS)
    connection.close()
    task_id = str(world.tasks[0].id)
    print(
        f"database: {connection.settings_dict['NAME']}; {ITEMS} items, one running task; {CALLS} calls per "
        f"operation and transport ({COMPILES} compiles), alternating, after {WARMUP_CALLS}; gunicorn on "
        f"port {PORT}; load averages {' '.join(f'{v:.2f}' for v in os.getloadavg())}"
    )
    server = start_server(PORT)
    try:
        rest, mcp = Transport(world.agent_key), Transport(world.agent_key)
        task = f"/api/v1/tasks/{task_id}"
        results = [
            compare(
                "record_progress",
                CALLS,
                lambda n: rest.rest("POST", f"{task}/progress", {"text": f"rest note {n}"}),
                lambda n: mcp.tool("record_progress", {"task_id": task_id, "text": f"mcp note {n}"}),
            ),
            compare(
                "get_task",
                CALLS,
                lambda n: rest.rest("GET", task),
                lambda n: mcp.tool("get_task", {"task_id": task_id}),
            ),
            compare(
                "compile_context",
                COMPILES,
                lambda n: rest.rest("POST", f"{task}/compile", {"model": "local"}),
                lambda n: mcp.tool("compile_context", {"task_id": task_id, "model": "local"}),
            ),
        ]
    finally:
        stop_server(server)
    head = ("operation", "REST p50", "REST p95", "MCP p50", "MCP p95", "MCP/REST", "MCP adds")
    print("\n" + f"{head[0]:<16}" + " ".join(f"{name:>9}" for name in head[1:]))
    for result in results:
        (rest_p50, rest_p95), (mcp_p50, mcp_p95) = result["rest"], result["mcp"]
        print(
            f"{result['operation']:<16}{rest_p50:9.2f} {rest_p95:9.2f} {mcp_p50:9.2f} {mcp_p95:9.2f}"
            f" {mcp_p50 / rest_p50:8.2f}× {mcp_p50 - rest_p50:+8.2f} ms"
        )
    print(f"load averages after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
