"""Compiles on a real streaming replica, with read-your-writes (issue 26 item 3).

A private PostgreSQL primary on 5471 and a hot standby on 5472 made from it with ``pg_basebackup`` (a
replication slot, WAL streamed), both in a temporary folder removed at the end; the shared server is not
touched. A Nexum server runs on them (``DATABASE_URL`` the primary, ``NEXUM_READ_DATABASE_URL`` the
replica), driven over HTTP as an agent drives it:

* a fact recorded on the primary is in the next compile, served from the replica, when the compile sends
  back the write's ``Nexum-Position``;
* with the replica's replay paused, a compile with the token waits its bound and reads from the primary
  (the fact is there), while one without a token reads the replica's older world (the fact is not: the
  replica really serves the read);
* with the replica stopped, compiles fall back to the primary;
* reads (GET) are served from the replica as well, with the same token: a fact, a diff (a replay's
  recompile runs on the primary, where its temporary read models can be made, and matches);
* a queued compile's worker reads from the replica once it has replayed the request (so every write its
  caller made before), and from the primary when the replica stays behind;
* a read and a compile that fail on the replica once it was chosen (held behind a lock the standby replays,
  past its statement timeout) are read again on the primary.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests import replica_cluster
from tests.integration.test_faults import EVERY_QUEUE
from tests.integration.test_worker import wait_for
from tests.replica_cluster import Clusters

ROOT = Path(__file__).resolve().parents[2]
PRIMARY_PORT = 5471
REPLICA_PORT = 5472
SERVER_PORT = 18950
DATABASE = "nexum_replica_test"
SLOT = "nexum_test_replica"
WAIT_MS = 5000
STATEMENT_TIMEOUT_MS = 1000
PRIMARY_DSN = f"host=127.0.0.1 port={PRIMARY_PORT} dbname={DATABASE} user=postgres"

if replica_cluster.missing():
    pytestmark = pytest.mark.skip(reason=replica_cluster.missing())


@pytest.fixture(scope="module")
def clusters() -> Iterator[Clusters]:
    if replica_cluster.port_taken(SERVER_PORT):
        pytest.fail(f"port {SERVER_PORT} is taken: the replica test's server needs it free")
    with replica_cluster.streaming_pair(PRIMARY_PORT, REPLICA_PORT, slot=SLOT) as made:
        yield made


def database_url(port: int) -> str:
    return f"postgres://postgres@127.0.0.1:{port}/{DATABASE}"


def server_env(data_dir: Path) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("NEXUM_", "DJANGO_")) and name not in ("DATABASE_URL", "CELERY_BROKER_URL")
    }
    env.update(
        DATABASE_URL=database_url(PRIMARY_PORT),
        NEXUM_READ_DATABASE_URL=database_url(REPLICA_PORT),
        NEXUM_REPLICA_WAIT_MS=str(WAIT_MS),
        NEXUM_REPLICA_STATEMENT_TIMEOUT_MS=str(STATEMENT_TIMEOUT_MS),
        NEXUM_DATA_DIR=str(data_dir),
        CELERY_BROKER_URL="redis://127.0.0.1:6379/5",
        PYTHONPATH=str(ROOT),
    )
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout.strip()


@dataclass
class Answer:
    status: int
    headers: Any
    body: dict[str, Any]


class Caller:
    def __init__(self, key: str) -> None:
        self.key = key

    def post(self, path: str, body: dict[str, Any], **headers: str) -> Answer:
        return self.call("POST", path, json.dumps(body), headers)

    def get(self, path: str, **headers: str) -> Answer:
        return self.call("GET", path, None, headers)

    def call(self, method: str, path: str, body: str | None, headers: dict[str, str]) -> Answer:
        connection = http.client.HTTPConnection("127.0.0.1", SERVER_PORT, timeout=60)
        try:
            connection.request(
                method,
                path,
                body=body,
                headers={
                    "Authorization": f"Bearer {self.key}",
                    "Content-Type": "application/json",
                    **headers,
                },
            )
            response = connection.getresponse()
            return Answer(response.status, response.headers, json.loads(response.read() or b"{}"))
        finally:
            connection.close()


def answers() -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", SERVER_PORT, timeout=5)
        connection.request("GET", "/api/v1/health")
        connection.getresponse().read()
    except OSError:
        return False
    return True


@dataclass
class Deployment:
    clusters: Clusters
    operator: Caller
    agent: Caller
    log: Path
    worker_log: Path


@pytest.fixture(scope="module")
def deployment(clusters: Clusters) -> Iterator[Deployment]:
    clusters.sql(PRIMARY_PORT, f"CREATE DATABASE {DATABASE}")
    data_dir = clusters.folder / "nexum"
    data_dir.mkdir()
    env = server_env(data_dir)
    manage(env, "migrate", "--noinput")
    manage(env, "nexum_project", "create", "acme", "--name", "Acme")
    operator = Caller(manage(env, "nexum_token", "issue", "acme", "planner", "--role", "operator"))
    agent = Caller(manage(env, "nexum_token", "issue", "acme", "coder", "--role", "agent"))
    log = data_dir / "server.log"
    worker_log = data_dir / "worker.log"
    processes = []
    try:
        processes.append(started([sys.executable, "manage.py", "runserver", f"127.0.0.1:{SERVER_PORT}",
                                  "--noreload"], env, log))  # fmt: skip
        processes.append(started([sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo",
                                  "--concurrency=1", "-Q", ",".join(EVERY_QUEUE), "--loglevel=INFO",
                                  "--without-gossip", "--without-mingle", "--without-heartbeat",
                                  "-n", "replica-test@%h"], env, worker_log))  # fmt: skip
        server = processes[0]
        assert wait_for(lambda: answers() or server.poll() is not None), log.read_text()
        assert server.poll() is None, log.read_text()
        yield Deployment(clusters, operator, agent, log, worker_log)
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=60)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)


def started(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:
        return subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )


@pytest.fixture(scope="module")
def task_id(deployment: Deployment) -> str:
    goal = deployment.operator.post(
        "/api/v1/goals",
        {"objective": "Ship the cache", "tasks": [{"key": "cache", "objective": "Add a cache"}]},
    )
    assert goal.status == 201, goal.body
    task = goal.body["tasks"][0]["id"]
    assert deployment.agent.post(f"/api/v1/tasks/{task}/start", {}).status == 200
    return task


def record_fact(deployment: Deployment, task: str, text: str) -> int:
    return int(recorded_fact(deployment, task, text).headers["Nexum-Position"])


def recorded_fact(deployment: Deployment, task: str, text: str) -> Answer:
    recorded = deployment.agent.post(f"/api/v1/tasks/{task}/facts", {"text": text})
    assert recorded.status == 201, (recorded.body, deployment.log.read_text()[-5000:])
    return recorded


@contextlib.contextmanager
def replay_paused(clusters: Clusters) -> Iterator[None]:
    """The replica stops replaying WAL (it keeps receiving it): it serves an older world meanwhile."""
    clusters.sql(REPLICA_PORT, "SELECT pg_wal_replay_pause()")
    try:
        yield
    finally:
        clusters.sql(REPLICA_PORT, "SELECT pg_wal_replay_resume()")


def compile_prompt(deployment: Deployment, task: str, **headers: str) -> tuple[str, str]:
    """The compiled prompt block and where it was read from (``Nexum-Read-From``)."""
    compiled = deployment.agent.post(f"/api/v1/tasks/{task}/compile", {"model": "quick"}, **headers)
    assert compiled.status == 200, (compiled.body, deployment.log.read_text()[-5000:])
    return compiled.body["context"]["prompt_block"], compiled.headers["Nexum-Read-From"]


def test_a_fact_just_recorded_is_in_the_next_compile_served_from_the_replica(deployment, task_id):
    position = record_fact(deployment, task_id, "The cache is Redis 7.2 on port 6380")
    compiled = deployment.agent.post(
        f"/api/v1/tasks/{task_id}/compile", {"model": "quick"}, **{"Nexum-Min-Position": str(position)}
    )
    assert (compiled.status, compiled.headers["Nexum-Read-From"]) == (200, "replica"), compiled.body
    assert "The cache is Redis 7.2 on port 6380" in compiled.body["context"]["prompt_block"]
    assert 0 <= replica_wait_ms(compiled) < WAIT_MS


def replica_wait_ms(answer: Answer) -> float:
    name, duration = answer.headers["Server-Timing"].split(";dur=")
    assert name == "replica-wait"
    return float(duration)


def test_a_replica_behind_the_token_is_waited_for_then_the_primary_answers(deployment, task_id):
    with replay_paused(deployment.clusters):
        position = record_fact(deployment, task_id, "The cache evicts by LRU with a 10 minute TTL")
        token = {"Nexum-Min-Position": str(position)}
        compiled = deployment.agent.post(f"/api/v1/tasks/{task_id}/compile", {"model": "quick"}, **token)
        assert (compiled.status, compiled.headers["Nexum-Read-From"]) == (200, "primary"), compiled.body
        assert "The cache evicts by LRU with a 10 minute TTL" in compiled.body["context"]["prompt_block"]
        assert WAIT_MS <= replica_wait_ms(compiled) < WAIT_MS + 2000  # the whole bound, then the primary
        # Without the token the replica answers, from the world it has replayed: the fact is not in it yet.
        stale, read_from = compile_prompt(deployment, task_id)
        assert read_from == "replica"
        assert "The cache evicts by LRU with a 10 minute TTL" not in stale
    prompt, read_from = compile_prompt(deployment, task_id, **{"Nexum-Min-Position": str(position)})
    assert read_from == "replica"
    assert "The cache evicts by LRU with a 10 minute TTL" in prompt


def test_with_the_replica_stopped_compiles_fall_back_to_the_primary(deployment, task_id):
    clusters = deployment.clusters
    clusters.stop(clusters.replica)
    try:
        position = record_fact(deployment, task_id, "The cache warms from the nightly export")
        for headers in ({"Nexum-Min-Position": str(position)}, {}):
            prompt, read_from = compile_prompt(deployment, task_id, **headers)
            assert read_from == "primary"
            assert "The cache warms from the nightly export" in prompt
    finally:
        clusters.start(clusters.replica)
    prompt, read_from = compile_prompt(deployment, task_id, **{"Nexum-Min-Position": str(position)})
    assert read_from == "replica"  # back once it has caught up from its slot
    assert "The cache warms from the nightly export" in prompt


def test_reads_are_served_from_the_replica_with_the_same_token(deployment, task_id):
    with replay_paused(deployment.clusters):
        recorded = recorded_fact(deployment, task_id, "The cache key is tenant:path")
        fact = f"/api/v1/facts/{recorded.body['id']}"
        token = {"Nexum-Min-Position": recorded.headers["Nexum-Position"]}
        read = deployment.agent.get(fact, **token)
        assert (read.status, read.headers["Nexum-Read-From"]) == (200, "primary")
        assert read.body["fact"]["text"] == "The cache key is tenant:path"
        stale = deployment.agent.get(fact)  # the replica answers from its older world: no such fact yet
        assert (stale.status, stale.headers["Nexum-Read-From"]) == (404, "replica")
        # A feed cursor the primary gave is no 404 on a replica behind it: no events yet, the cursor kept.
        position = token["Nexum-Min-Position"]
        feed = deployment.agent.get(f"/api/v1/events?cursor={position}")
        assert (feed.status, feed.headers["Nexum-Read-From"]) == (200, "replica"), feed.body
        assert feed.body["results"] == []
    read = deployment.agent.get(fact, **token)
    assert (read.status, read.headers["Nexum-Read-From"]) == (200, "replica")
    assert read.body["fact"]["text"] == "The cache key is tenant:path"


def test_a_diff_is_served_from_the_replica_and_a_replay_recompiles_on_the_primary(deployment, task_id):
    first = deployment.agent.post(f"/api/v1/tasks/{task_id}/compile", {"model": "quick"})
    recorded = recorded_fact(deployment, task_id, "The cache is flushed on deploy")
    second = deployment.agent.post(
        f"/api/v1/tasks/{task_id}/compile",
        {"model": "quick"},
        **{"Nexum-Min-Position": recorded.headers["Nexum-Position"]},
    )
    assert first.status == second.status == 200, (first.body, second.body)
    earlier, later = first.body["context"]["digest"], second.body["context"]["digest"]
    token = {"Nexum-Min-Position": second.headers["Nexum-Position"]}
    # The stored context is read from the replica; its recompile rebuilds the read models as of the
    # context's position in temporary tables, which only the primary can create: the answer says so.
    replayed = deployment.agent.get(f"/api/v1/contexts/{earlier}/replay", **token)
    assert (replayed.status, replayed.headers["Nexum-Read-From"]) == (200, "primary"), replayed.body
    assert replayed.body["matches"] is True and replayed.body["replayed_digest"] == earlier
    diff = deployment.agent.get(f"/api/v1/contexts/{earlier}/diff/{later}", **token)
    assert (diff.status, diff.headers["Nexum-Read-From"]) == (200, "replica"), diff.body
    assert {"kind": "fact", "id": recorded.body["id"], "reason": None} in diff.body["entered"]


def queued_compile_prompt(deployment: Deployment, task: str) -> str:
    """A queued compile (``async``) answered by the worker; its prompt block."""
    queued = deployment.agent.post(f"/api/v1/tasks/{task}/compile", {"model": "quick", "async": True})
    assert queued.status == 202, queued.body
    url, token = queued.body["url"], {"Nexum-Min-Position": queued.headers["Nexum-Position"]}
    answered: dict[str, Any] = {}

    def done() -> bool:
        answered.update(deployment.agent.get(url, **token).body)
        return answered["status"] != "queued"

    assert wait_for(done, timeout=120), deployment.worker_log.read_text()[-5000:]
    assert answered["status"] == "done", answered
    return answered["context"]["prompt_block"]


def test_a_queued_compile_reads_from_the_replica_once_it_holds_the_request(deployment, task_id):
    record_fact(deployment, task_id, "The cache is sharded by tenant")
    prompt = queued_compile_prompt(deployment, task_id)
    assert "The cache is sharded by tenant" in prompt
    assert "reading from the primary" not in deployment.worker_log.read_text()

    with replay_paused(deployment.clusters):
        record_fact(deployment, task_id, "The cache shards rebalance nightly")
        prompt = queued_compile_prompt(deployment, task_id)  # the worker waits its bound, then the primary
    assert "The cache shards rebalance nightly" in prompt
    assert "reading from the primary" in deployment.worker_log.read_text()


@contextlib.contextmanager
def held_on_the_replica_only(clusters: Clusters, table: str) -> Iterator[None]:
    """The standby holds an ACCESS EXCLUSIVE lock on ``table`` that the primary no longer does: taken on the
    primary, replayed, then replay paused before the commit that releases it is replayed. A read of the
    table on the replica waits on it, as behind a migration's lock; on the primary it does not."""
    with psycopg.connect(PRIMARY_DSN, autocommit=True) as primary, primary.transaction():
        primary.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        with psycopg.connect(PRIMARY_DSN, autocommit=True) as other:
            other.execute("SELECT txid_current()")  # a commit after it flushes the lock's WAL record
        held = (
            "SELECT count(*) FROM pg_locks WHERE mode = 'AccessExclusiveLock'"
            f" AND relation = '{table}'::regclass"
        )
        assert wait_for(lambda: clusters.sql(REPLICA_PORT, held, DATABASE) == "1", timeout=30)
        clusters.sql(REPLICA_PORT, "SELECT pg_wal_replay_pause()")
        paused = "SELECT pg_get_wal_replay_pause_state()"
        assert wait_for(lambda: clusters.sql(REPLICA_PORT, paused) == "paused", timeout=30)
    try:
        yield
    finally:
        clusters.sql(REPLICA_PORT, "SELECT pg_wal_replay_resume()")


def test_a_read_that_fails_on_the_replica_is_read_again_on_the_primary(deployment, task_id):
    recorded = recorded_fact(deployment, task_id, "The cache tolerates a lost node")
    fact = f"/api/v1/facts/{recorded.body['id']}"
    token = {"Nexum-Min-Position": recorded.headers["Nexum-Position"]}
    assert deployment.agent.get(fact, **token).headers["Nexum-Read-From"] == "replica"
    with held_on_the_replica_only(deployment.clusters, "context_app_worlditem"):
        # Chosen (its head is far enough), the replica then holds the read past its statement timeout.
        read = deployment.agent.get(fact, **token)
        assert (read.status, read.headers["Nexum-Read-From"]) == (200, "primary"), read.body
        assert read.body["fact"]["text"] == "The cache tolerates a lost node"
        prompt, read_from = compile_prompt(deployment, task_id, **token)
        assert read_from == "primary"
        assert "The cache tolerates a lost node" in prompt
    log = deployment.log.read_text()
    assert "Read on the replica failed, reading from the primary" in log
    assert "canceling statement due to statement timeout" in log
    assert "Internal Server Error" not in log
    read = deployment.agent.get(fact, **token)
    assert (read.status, read.headers["Nexum-Read-From"]) == (200, "replica")
