"""Many agents at once over REST (issue 15). Run by hand; not a test.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nexum_agents_bench .venv/bin/python bench/agents.py

Builds one goal of ``BENCH_ITEMS`` items (10,000) with 16 running tasks (bench/worlds.py: 70% of the items
shared by the goal, the rest the tasks' own), starts gunicorn with deploy/gunicorn.conf.py on a free port
(debug off, the database named by DATABASE_URL, which this resets: use a database of your own), and runs N
simulated agents for N = 1, 4, 16 (``BENCH_AGENTS``). Each agent works on its own task in a loop: a progress
note, a tool call, a compile for the ``local`` card (24,000-token budget), each a request on a kept-alive
connection. Each N runs ``BENCH_SECONDS`` (30) after ``BENCH_WARMUP`` (5) seconds not counted (every
gunicorn worker reads each task's candidates once). It prints, per N, loops per second, the compile's
p50/p95/p99, the ratios to N=1 and the load averages before and after.

The server's workers and threads are deploy/gunicorn.conf.py's defaults unless ``NEXUM_WEB_WORKERS`` and
``NEXUM_WEB_THREADS`` say otherwise. The server, the database and the clients share the machine.

``BENCH_REPLICA=1`` (issue 26): the bench makes its own primary and a streaming hot standby of it
(tests/replica_cluster.py, on ``BENCH_PRIMARY_PORT`` 5481 and ``BENCH_REPLICA_PORT`` 5482, removed at the end;
DATABASE_URL is not used), loads the world on the primary, and runs every N twice in the same run: with
every compile on the primary, then with the server given ``NEXUM_READ_DATABASE_URL`` (compiles on the
replica). Each agent sends its last write's ``Nexum-Position`` as ``Nexum-Min-Position`` on its compile
(read-your-writes); the table adds the share of compiles the replica served and the wait for it to hold the
write (the answer's ``Server-Timing: replica-wait``), p50 and p99.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from tests import replica_cluster

REPLICA = os.environ.get("BENCH_REPLICA") == "1"
PRIMARY_PORT = int(os.environ.get("BENCH_PRIMARY_PORT", 5481))
REPLICA_PORT = int(os.environ.get("BENCH_REPLICA_PORT", 5482))
DATABASE = "nexum_agents_bench"
PAIR = contextlib.ExitStack()
if REPLICA:
    if replica_cluster.missing():
        sys.exit(f"BENCH_REPLICA=1: {replica_cluster.missing()}")
    CLUSTERS = PAIR.enter_context(
        replica_cluster.streaming_pair(PRIMARY_PORT, REPLICA_PORT, slot="nexum_bench", shared_buffers="256MB")
    )
    CLUSTERS.sql(PRIMARY_PORT, f"CREATE DATABASE {DATABASE}")
    os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:{PRIMARY_PORT}/{DATABASE}"
    os.environ.pop("NEXUM_READ_DATABASE_URL", None)

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from worlds import build_world  # noqa: E402  (bench/worlds.py, beside this script)

ROOT = Path(__file__).resolve().parents[1]
AGENTS = [int(n) for n in os.environ.get("BENCH_AGENTS", "1,4,16").split(",")]
ITEMS = int(os.environ.get("BENCH_ITEMS", 10_000))
SECONDS = float(os.environ.get("BENCH_SECONDS", 30))
WARMUP = float(os.environ.get("BENCH_WARMUP", 5))
WORD = "local"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(port: int, **settings: str) -> subprocess.Popen[bytes]:
    environment = {
        **os.environ,
        **settings,
        "NEXUM_DEBUG": "0",
        "NEXUM_SECRET_KEY": "bench-agents-only-not-a-secret-0123456789abcdefghijklmnopqrstuvwxyz",
        "NEXUM_WEB_BIND": f"127.0.0.1:{port}",
        "NEXUM_SECURE_SSL_REDIRECT": "0",
        "PYTHONPATH": str(ROOT),
    }
    errors = tempfile.TemporaryFile()  # noqa: SIM115 - the server's stderr while it runs
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py")],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=errors,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            errors.seek(0)
            raise RuntimeError(f"gunicorn stopped: {errors.read().decode()[-2000:]}")
        try:
            connection_ = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection_.request("GET", "/api/v1/health")
            if connection_.getresponse().status == 200:
                connection_.close()
                return server
        except OSError:
            time.sleep(0.3)
    stop_server(server)
    raise RuntimeError("gunicorn did not answer within 60 s")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


class Agent(threading.Thread):
    """One agent: its own task and kept-alive connection; times the compiles between ``start_at`` and
    ``stop_at``."""

    def __init__(self, port: int, key: str, task_id: str, start_at: float, stop_at: float) -> None:
        super().__init__(daemon=True)
        self.port, self.task_id, self.start_at, self.stop_at = port, task_id, start_at, stop_at
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.loops = 0
        self.compiles: list[float] = []
        self.read_from: list[str] = []
        self.waits: list[float] = []
        self.error: str | None = None

    def post(
        self, client: http.client.HTTPConnection, path: str, body: dict[str, object], **headers: str
    ) -> http.client.HTTPResponse:
        client.request(
            "POST", f"/api/v1/tasks/{self.task_id}/{path}", json.dumps(body), {**self.headers, **headers}
        )
        response = client.getresponse()
        payload = response.read()
        if response.status not in (200, 201):
            raise RuntimeError(f"{path}: {response.status} {payload[:300]!r}")
        return response

    def run(self) -> None:
        client = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        step = 0
        try:
            while time.monotonic() < self.stop_at:
                step += 1
                self.post(client, "progress", {"text": f"step {step}: tried rotating the session token"})
                recorded = self.post(
                    client,
                    "tool-calls",
                    {"tool": "rspec", "result_summary": f"run {step}: 2 failures in auth_spec.rb"},
                )
                position = recorded.getheader("Nexum-Position") or "0"
                started = time.monotonic()
                compiled = self.post(client, "compile", {"model": WORD}, **{"Nexum-Min-Position": position})
                finished = time.monotonic()
                if started >= self.start_at and finished <= self.stop_at:
                    self.compiles.append((finished - started) * 1000)
                    self.loops += 1
                    self.note_replica(compiled)
        except Exception as error:  # reported by the main thread
            self.error = repr(error)
        finally:
            client.close()

    def note_replica(self, compiled: http.client.HTTPResponse) -> None:
        """Where the compile read from and how long it waited for the replica (absent without one)."""
        read_from = compiled.getheader("Nexum-Read-From")
        if read_from is not None:
            self.read_from.append(read_from)
            self.waits.append(float(compiled.getheader("Server-Timing", "").split("dur=")[-1]))


def percentile(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def load_averages() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def run_agents(port: int, key: str, task_ids: list[str], count: int) -> dict[str, float]:
    start_at = time.monotonic() + WARMUP
    stop_at = start_at + SECONDS
    agents = [Agent(port, key, task_ids[index], start_at, stop_at) for index in range(count)]
    before = load_averages()
    for agent in agents:
        agent.start()
    for agent in agents:
        agent.join(timeout=WARMUP + SECONDS + 180)
    errors = [agent.error for agent in agents if agent.error]
    if errors:
        raise RuntimeError(f"{len(errors)} agents failed, first: {errors[0]}")
    times = [ms for agent in agents for ms in agent.compiles]
    loops = sum(agent.loops for agent in agents)
    read_from = [alias for agent in agents for alias in agent.read_from]
    waits = [ms for agent in agents for ms in agent.waits]
    return {
        "on_replica": read_from.count("replica") / len(read_from) if read_from else None,
        "wait_p50": percentile(waits, 0.5) if waits else None,
        "wait_p99": percentile(waits, 0.99) if waits else None,
        "agents": count,
        "loops_per_s": loops / SECONDS,
        "p50": percentile(times, 0.5),
        "p95": percentile(times, 0.95),
        "p99": percentile(times, 0.99),
        "compiles": len(times),
        "load_before": before,
        "load_after": load_averages(),
    }


def main() -> None:
    if connection.vendor != "postgresql":
        sys.exit("bench/agents.py needs DATABASE_URL naming a PostgreSQL database of your own")
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    started = time.perf_counter()
    world = build_world(slug="agents", size=ITEMS, tasks_per_goal=max(AGENTS), own_share=0.3)
    connection.close()
    workers = os.environ.get("NEXUM_WEB_WORKERS", "default")
    threads = os.environ.get("NEXUM_WEB_THREADS", "default")
    print(
        f"database: {connection.settings_dict['NAME']}; {ITEMS} items, {len(world.tasks)} running tasks on "
        f"one goal (loaded in {time.perf_counter() - started:.0f}s); model word {WORD!r}; {SECONDS:.0f}s per "
        f"run after {WARMUP:.0f}s of warm-up; gunicorn workers {workers} × threads {threads}"
    )
    task_ids = [str(task.id) for task in world.tasks]
    if REPLICA:
        caught_up(world.project_id)
        report("all compiles on the primary", run_all(world.agent_key, task_ids))
        replica_url = f"postgres://postgres@127.0.0.1:{REPLICA_PORT}/{DATABASE}"
        report(
            "compiles on the replica", run_all(world.agent_key, task_ids, NEXUM_READ_DATABASE_URL=replica_url)
        )
    else:
        report("", run_all(world.agent_key, task_ids))


def run_all(key: str, task_ids: list[str], **settings: str) -> list[dict[str, object]]:
    port = free_port()
    server = start_server(port, **settings)
    try:
        return [run_agents(port, key, task_ids, count) for count in AGENTS]
    finally:
        stop_server(server)


def caught_up(project_id: str) -> None:
    """Waits (at most 10 minutes) until the replica has replayed the world just loaded on the primary."""
    head = CLUSTERS.sql(PRIMARY_PORT, "SELECT pg_current_wal_lsn()")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        replayed = CLUSTERS.sql(REPLICA_PORT, f"SELECT pg_last_wal_replay_lsn() >= '{head}'::pg_lsn")
        if replayed == "t":
            return
        time.sleep(0.5)
    raise RuntimeError(f"the replica did not replay the world (project {project_id}) within 10 minutes")


def report(title: str, results: list[dict[str, object]]) -> None:
    base = results[0]
    head = ("agents", "loops/s", "×N=1", "p50 ms", "p95 ms", "p99 ms", "p50×N=1")
    replica_head = ("replica", "wait p50", "wait p99") if base["on_replica"] is not None else ()
    if title:
        print(f"\n{title}")
    print("\n" + " ".join(f"{name:>8}" for name in head + replica_head) + "  load averages before → after")
    for result in results:
        loops, p50 = result["loops_per_s"], result["p50"]
        row = (
            f"{result['agents']:>8} {loops:8.2f} {loops / base['loops_per_s']:8.2f} {p50:8.1f}"
            f" {result['p95']:8.1f} {result['p99']:8.1f} {p50 / base['p50']:8.2f}"
        )
        if replica_head:
            row += f" {result['on_replica']:8.0%} {result['wait_p50']:8.1f} {result['wait_p99']:8.1f}"
        print(f"{row}  {result['load_before']} → {result['load_after']}")


if __name__ == "__main__":
    with PAIR:
        main()
