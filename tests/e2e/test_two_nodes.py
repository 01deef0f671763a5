"""Two Nexum nodes on one PostgreSQL database (issue 26 item 4): two gunicorn servers
(deploy/gunicorn.conf.py, debug off, one worker each, so each node has one candidate cache) and two Celery
workers, each consuming every queue, on one database and one broker.

- Freshness: rounds alternating the nodes, each compiling on both first (so both caches are warm): a fact
  recorded through one node is in the very next compile served by the other, and a fact retracted through one
  is out of it. Candidate caches are per process and brought up to date by the goal's marks in the database.
- Decided once: completions and queued compiles requested through both nodes at the same time (the same
  task's completion on both, the same compile ``Idempotency-Key`` on both, and compiles of their own), each
  message published once more (a redelivery the other worker may take): every accepted request has exactly
  one decision event (``GateDecided``, ``ContextCompiled``), every task one decision.

PostgreSQL only (on SQLite two processes do not serve one database); needs CELERY_BROKER_URL, as the other
worker tests. Ports from ``NEXUM_TEST_NODE_PORTS`` (default 18900-18949); every process stopped at the end.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import socket
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from django.conf import settings as django_settings

from context_app.compilation.models import ContextCompilation
from context_app.compilation.tasks import COMPILE
from nexum.adapters.workspaces import project_workspace
from nexum.eventstore.models import Event
from nexum.work.dispatch import send
from tasks_app.models import Task
from tasks_app.services.goals import goal_create
from tasks_app.services.lifecycle import task_start
from tests.integration.compile_world import load_catalog
from tests.integration.test_faults import EVERY_QUEUE, FAST, Processes, folders, processes, worker_argv
from tests.integration.test_worker import ROOT, database_url_for_worker, wait_for
from verification_app.models import CompletionRequest
from verification_app.tasks import COMPLETION

__all__ = ["folders", "processes"]  # the fixtures, used here by name

pytestmark = [
    pytest.mark.worker,
    pytest.mark.skipif(not django_settings.CELERY_BROKER_URL, reason="CELERY_BROKER_URL is not set"),
    pytest.mark.skipif(
        "postgresql" not in django_settings.DATABASES["default"]["ENGINE"],
        reason="two nodes on one database need PostgreSQL (set DATABASE_URL): SQLite is one process's file",
    ),
]

PORTS = os.environ.get("NEXUM_TEST_NODE_PORTS", "18900-18949")
ROUNDS = 6
TASKS = 4
OWN_COMPILES_PER_NODE = 3
DECIDED_WITHIN_S = 60


def free_port_in_range(taken: set[int]) -> int:
    """A port of ``PORTS`` no one listens on (and not ``taken``)."""
    first, last = (int(bound) for bound in PORTS.split("-"))
    for port in range(first, last + 1):
        if port in taken:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS} (NEXUM_TEST_NODE_PORTS)")


def call(
    base_url: str, method: str, path: str, token: str, body: dict[str, Any] | None = None, **headers: str
) -> tuple[int, dict[str, Any]]:
    """One JSON request as the TLS-terminating proxy forwards it; the status and the decoded answer."""
    host, port = base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request(
            method,
            f"/api/v1{path}",
            body=None if body is None else json.dumps(body),
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "X-Forwarded-Proto": "https",
                **headers,
            },
        )
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


def answers(base_url: str) -> bool:
    try:
        return call(base_url, "GET", "/health", "")[0] == 200
    except OSError:
        return False


@dataclass
class Nodes:
    a: str
    b: str
    agent: str
    operator: str


@pytest.fixture
def nodes(project, folders, processes: Processes) -> Iterator[Nodes]:
    """Two gunicorn nodes and two workers on the test database and the test broker."""
    from tasks_app.services.tokens import agent_token_issue

    load_catalog(str(project.id))
    env = {
        **os.environ,
        **FAST,
        **folders,
        "DATABASE_URL": database_url_for_worker(),
        "CELERY_BROKER_URL": django_settings.CELERY_BROKER_URL,
        "NEXUM_DEBUG": "false",
        "NEXUM_SECRET_KEY": secrets.token_urlsafe(50),
        "NEXUM_RELEVANCE_FLOOR": "0",  # every fact is a candidate the compile keeps: inclusion is the signal
        "NEXUM_WEB_WORKERS": "1",  # one process, one candidate cache per node
        "NEXUM_WEB_THREADS": "4",
        "PYTHONPATH": str(ROOT),
    }
    for worker in ("worker-a", "worker-b"):
        processes.start(worker, worker_argv(queues=EVERY_QUEUE), env)
    urls = []
    taken: set[int] = set()
    for name in ("node-a", "node-b"):
        port = free_port_in_range(taken)
        taken.add(port)
        argv = [sys.executable, "-m", "gunicorn", "-c", "deploy/gunicorn.conf.py"]
        processes.start(name, argv, {**env, "NEXUM_WEB_BIND": f"127.0.0.1:{port}"})
        urls.append(f"http://127.0.0.1:{port}")
    for name, url in zip(("node-a", "node-b"), urls, strict=True):
        exited = processes.running[name].poll
        assert wait_for(lambda url=url, exited=exited: answers(url) or exited() is not None, 60)
        assert exited() is None, processes.log(name)
    agent = agent_token_issue(project_id=str(project.id), name="agent", actor="test").key
    operator = agent_token_issue(project_id=str(project.id), name="ops", role="operator", actor="test").key
    yield Nodes(urls[0], urls[1], agent, operator)


def started_tasks(project, count: int) -> list[Task]:
    """``count`` running tasks whose contract passes once ``report.md`` is in the workspace."""
    goal = goal_create(
        project_id=str(project.id),
        objective="Ship the release report",
        tasks=[{"key": f"t{index}", "objective": f"Write report part {index}"} for index in range(count)],
        contracts={
            f"t{index}": {"checks": [{"kind": "file_exists", "name": "report", "path": "report.md"}]}
            for index in range(count)
        },
        actor="planner",
    )
    return [
        task_start(project_id=str(project.id), task_id=str(task.id), actor="agent")
        for task in Task.objects.filter(goal=goal, is_goal=False).order_by("key")
    ]


def compiled_ids(base_url: str, token: str, task_id: str) -> set[str]:
    status, body = call(base_url, "POST", f"/tasks/{task_id}/compile", token, {"model": "frontier"})
    assert status == 200, body
    return {item["id"] for item in body["context"]["included"] if item["kind"] == "fact"}


@pytest.mark.django_db(transaction=True)
def test_a_write_through_one_node_is_in_the_next_compile_on_the_other(nodes, project):
    (task,) = started_tasks(project, 1)
    task_id = str(task.id)
    recorded: list[str] = []
    for round_number in range(ROUNDS):
        writer, reader = (nodes.a, nodes.b) if round_number % 2 == 0 else (nodes.b, nodes.a)
        assert compiled_ids(writer, nodes.agent, task_id) == set(recorded)  # both caches warm
        assert compiled_ids(reader, nodes.agent, task_id) == set(recorded)
        status, fact = call(
            writer, "POST", f"/tasks/{task_id}/facts", nodes.agent, {"text": f"Release note {round_number}"}
        )
        assert status == 201, fact
        recorded.append(fact["id"])
        assert compiled_ids(reader, nodes.agent, task_id) == set(recorded), f"round {round_number}: stale"
        if round_number % 3 == 2:  # a removal as well: retracted through the reader, gone on the writer
            status, body = call(
                reader, "POST", f"/facts/{recorded[0]}/retract", nodes.agent, {"reason": "superseded"}
            )
            assert status == 200, body
            recorded.pop(0)
            assert compiled_ids(writer, nodes.agent, task_id) == set(recorded), f"round {round_number}"


def concurrently(requests: list[tuple[str, str, str, dict[str, Any], dict[str, str]]], token: str) -> list:
    """Every request at once, each on a thread of its own; the answers in the requests' order."""
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        futures = [
            pool.submit(call, base, method, path, token, body, **headers)
            for base, method, path, body, headers in requests
        ]
        return [future.result(timeout=120) for future in futures]


@pytest.mark.django_db(transaction=True)
def test_requests_through_both_nodes_at_once_are_each_decided_once(nodes, project):
    workspace = project_workspace(project.slug)
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "report.md").write_text("# Report\n")
    tasks = [str(task.id) for task in started_tasks(project, TASKS)]
    requests: list[tuple[str, str, str, dict[str, Any], dict[str, str]]] = []
    for task_id in tasks:
        key = {"Idempotency-Key": f"compile-{task_id}"}
        for node in (nodes.a, nodes.b):
            requests.append((node, "POST", f"/tasks/{task_id}/complete", {"answer": "done"}, {}))
            requests.append(
                (node, "POST", f"/tasks/{task_id}/compile", {"model": "quick", "async": True}, key)
            )
    for node in (nodes.a, nodes.b):
        for _ in range(OWN_COMPILES_PER_NODE):
            requests.append(
                (node, "POST", f"/tasks/{tasks[0]}/compile", {"model": "quick", "async": True}, {})
            )
    answered = concurrently(requests, nodes.agent)

    completions: dict[str, set[str]] = {task_id: set() for task_id in tasks}
    named_pending: dict[str, set[str]] = {task_id: set() for task_id in tasks}
    keyed: dict[str, set[str]] = {}
    own: list[str] = []
    for (_, _, path, _, headers), (status, answer) in zip(requests, answered, strict=True):
        task_id = path.split("/")[2]
        if path.endswith("/complete"):
            if status == 202:
                completions[task_id].add(answer["completion"]["request_id"])
            else:  # the other node's request for the task came first
                assert status == 409, answer
                assert answer["error"]["code"] in ("completion_pending", "concurrency_conflict"), answer
                if answer["error"]["code"] == "completion_pending":
                    named_pending[task_id].add(answer["error"]["details"]["request_id"])
        else:
            assert status == 202, answer
            if "Idempotency-Key" in headers:
                keyed.setdefault(headers["Idempotency-Key"], set()).add(answer["request_id"])
            else:
                own.append(answer["request_id"])
    # One completion per task, whichever node took it; one compile per Idempotency-Key across both nodes.
    assert all(len(ids) == 1 for ids in completions.values()), completions
    assert all(named_pending[task_id] <= completions[task_id] for task_id in tasks), named_pending
    assert len(keyed) == TASKS and all(len(ids) == 1 for ids in keyed.values()), keyed
    completion_ids = [request_id for ids in completions.values() for request_id in ids]
    compile_ids = [request_id for ids in keyed.values() for request_id in ids] + own
    assert len(set(compile_ids)) == TASKS + 2 * OWN_COMPILES_PER_NODE

    for request_id in completion_ids:  # a redelivery of each: the other worker may take it
        assert send(COMPLETION, request_id)
    for request_id in compile_ids:
        assert send(COMPILE, request_id)

    def all_decided() -> bool:
        decided = CompletionRequest.objects.filter(id__in=completion_ids, decided=True).count()
        done = ContextCompilation.objects.filter(request_id__in=compile_ids).exclude(status="queued").count()
        return decided == len(completion_ids) and done == len(compile_ids)

    assert wait_for(all_decided, DECIDED_WITHIN_S), f"not every request was decided in {DECIDED_WITHIN_S} s"
    assert wait_for(broker_drained, DECIDED_WITHIN_S), "the redeliveries were not all consumed"
    gate = Counter(
        Event.objects.filter(event_type="GateDecided", project_id=project.id).values_list(
            "data__request_id", flat=True
        )
    )
    assert gate == dict.fromkeys(completion_ids, 1)
    compiled = Counter(
        Event.objects.filter(event_type="ContextCompiled", project_id=project.id).values_list(
            "data__request_id", flat=True
        )
    )
    assert {request_id: compiled[request_id] for request_id in compile_ids} == dict.fromkeys(compile_ids, 1)
    assert not Event.objects.filter(event_type="ContextCompileFailed", project_id=project.id).exists()
    assert set(CompletionRequest.objects.filter(id__in=completion_ids).values_list("outcome", flat=True)) == {
        "completed"
    }


def broker_drained() -> bool:
    """No message waiting in any queue and none delivered and not yet acknowledged."""
    from config.celery import app

    with app.connection_for_write() as connection:
        client = connection.default_channel.client
        waiting = sum(client.llen(queue) for queue in EVERY_QUEUE)
        return waiting == 0 and client.hlen("unacked") == 0
