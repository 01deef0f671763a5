"""Faults with real workers, Redis and PostgreSQL (issue 13): every accepted request ends with one decision.

- The broker stops while completions and async compiles are requested, then starts again (empty: the queued
  messages are gone): every request answered 2xx is decided within 60 s, once; nothing answered 500.
- PostgreSQL stops for 5 s while a worker runs a check: the completion still ends with one decision.
- One project requests eight completions at once, capped at two in flight, then another project one: that one
  is decided while at most four of the eight are, and the eight are all decided in turn.
- The worker's whole process tree, or its process group (the check survives in its own session), or only its
  prefork pool process is SIGKILLed mid-check: one decision within 60 s of the restart, and no second copy of
  the check ever runs while any process of the first lives (the check takes an exclusive ``flock`` that its
  processes hold until the last of them dies; a copy that cannot take it at once records an overlap).
- PostgreSQL stops under a serving gunicorn (issue 23): REST answers 503 ``database_unavailable`` with
  ``Retry-After``, ``/mcp`` a JSON-RPC error; the Python client retries and, once the database is back, its
  write is made once.

Every service a test stops is a private one it started on a free port (a Redis server, a PostgreSQL cluster;
``NEXUM_TEST_POSTGRES_PORTS`` names the ports a cluster may take), removed at the end even on failure; every
wait is bounded. Runs only when CELERY_BROKER_URL is set (the private broker replaces it), like the other
worker tests; CI runs them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from nexum.eventstore.models import Event
from nexum.work.models import Work
from tasks_app.models import Task
from tasks_app.services.goals import goal_create
from tasks_app.services.lifecycle import task_start
from tests.integration.compile_world import load_catalog
from tests.integration.test_worker import ROOT, database_url_for_worker, wait_for
from verification_app.models import CheckRun, CompletionRequest
from verification_app.services.completions import completion_request
from verification_app.tasks import COMPLETION, run_completion

pytestmark = [
    pytest.mark.worker,
    pytest.mark.skipif(not django_settings.CELERY_BROKER_URL, reason="CELERY_BROKER_URL is not set"),
]

# Short leases and a quick dispatcher for the processes under test, so each fault resolves in seconds.
FAST = {
    "NEXUM_LEASE_TTL_S": "4",
    "NEXUM_LEASE_HEARTBEAT_S": "0.5",
    "NEXUM_DISPATCH_INTERVAL_S": "0.5",
    "NEXUM_DISPATCH_AFTER_S": "2",
    "NEXUM_DISPATCH_BACKOFF_MAX_S": "4",
    "NEXUM_TASK_RETRY_BACKOFF_MAX_S": "4",
}
DECIDED_WITHIN_S = 60

# A check that takes an exclusive lock its processes hold until the last of them dies (a copy that starts
# while any process of another copy lives records an overlap), then runs ``first`` seconds the first time and
# ``again`` seconds every later time.
GUARDED_CHECK = (
    "exec 9>>check.lock; "
    'if ! flock -n 9; then echo "overlap $$" >> overlaps.log; flock 9; fi; '
    "if [ -e runs.log ]; then s={again}; else s={first}; fi; "
    'echo "start $$" >> runs.log; sleep $s; echo "end $$" >> runs.log'
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Processes:
    """Processes started in sessions of their own (so a whole group can be killed), all killed at the end."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.running: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self.running[name] = process
        return process

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        process = self.running.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def stop_all(self) -> None:
        for name in reversed(list(self.running)):  # the last started first: workers before their broker
            self.stop(name)

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")


@pytest.fixture
def processes(tmp_path) -> Iterator[Processes]:
    logs = tmp_path / "logs"
    logs.mkdir()
    started = Processes(logs)
    try:
        yield started
    finally:
        started.stop_all()


class PrivateRedis:
    """A Redis server of this test on a free port, without persistence: a restart empties it."""

    def __init__(self, processes: Processes, folder: Path) -> None:
        self.processes, self.folder, self.port = processes, folder, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.folder)]  # fmt: skip
        self.processes.start("redis", argv, dict(os.environ))
        assert wait_for(self._answers, timeout=10), "the private Redis did not start"

    def stop(self) -> None:
        self.processes.stop("redis")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False


@pytest.fixture
def redis(processes, tmp_path) -> PrivateRedis:
    folder = tmp_path / "redis"
    folder.mkdir()
    server = PrivateRedis(processes, folder)
    server.start()
    return server


@pytest.fixture
def folders(workspace, settings) -> dict[str, str]:
    """The workspace and artifact store shared by this process and the processes under test."""
    return {"NEXUM_WORKSPACE_ROOT": str(workspace), "NEXUM_ARTIFACT_ROOT": str(settings.NEXUM_ARTIFACT_ROOT)}


@pytest.fixture
def sends_to(monkeypatch) -> Callable[[str], None]:
    """Route this process's completion messages to a private broker (``apply_async(connection=…)``)."""
    from config.celery import app

    def route(broker_url: str) -> None:
        send = run_completion.apply_async

        def apply_async(args=(), kwargs=None, **options):  # type: ignore[no-untyped-def]
            with app.connection_for_write(broker_url) as connection:
                return send(args=args, kwargs=kwargs, connection=connection, **options)

        monkeypatch.setattr(run_completion, "apply_async", apply_async)

    return route


def environment(database_url: str, broker_url: str, folders: dict[str, str]) -> dict[str, str]:
    return {
        **os.environ,
        **FAST,
        **folders,
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": broker_url,
        "NEXUM_CHECK_EXECUTABLES": "sh",
        "PYTHONPATH": str(ROOT),
    }


EVERY_QUEUE = tuple(django_settings.CELERY_TASK_QUEUES)


def worker_argv(pool: str = "solo", queues: tuple[str, ...] = EVERY_QUEUE) -> list[str]:
    """A worker consuming ``queues`` (every queue the tasks are routed to, unless told)."""
    return [sys.executable, "-m", "celery", "-A", "config", "worker", f"--pool={pool}", "--concurrency=1",
            "-Q", ",".join(queues), "--loglevel=INFO", "--without-gossip", "--without-mingle",
            "--without-heartbeat", "-n", f"fault-{uuid.uuid4().hex[:8]}@%h"]  # fmt: skip


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


def started_tasks(project, keys: list[str], check: str) -> list[Task]:
    goal = goal_create(
        project_id=str(project.id),
        objective="Survive faults",
        tasks=[{"key": key, "objective": f"Build {key}"} for key in keys],
        contracts={key: {"checks": [{"kind": "command", "name": "guarded", "argv": ["sh", "-c", check]}]}
                   for key in keys},
        actor="planner",
    )  # fmt: skip
    return [
        task_start(project_id=str(project.id), task_id=str(task.id), actor="agent")
        for task in Task.objects.filter(goal=goal, is_goal=False).order_by("key")
    ]


def decisions(request_id: object) -> int:
    return Event.objects.filter(event_type="GateDecided", data__request_id=str(request_id)).count()


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it, found through /proc (a check in its own session included)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                children.setdefault(int(stat[stat.rfind(")") + 2 :].split()[1]), []).append(int(entry))
    tree, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        tree.append(current)
        frontier += children.get(current, [])
    return tree


# --- (a) the broker stops while requests are accepted -------------------------------------------------------


def api_call(base: str, token: str, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


@pytest.mark.django_db(transaction=True)
def test_requests_accepted_while_the_broker_is_down_each_end_with_one_decision(
    project, folders, redis, processes
):
    from context_app.compilation.models import ContextCompilation
    from tasks_app.services.tokens import agent_token_issue

    load_catalog(str(project.id))
    tasks = started_tasks(project, [f"t{i}" for i in range(7)], "sleep 1; echo ok")
    token = agent_token_issue(project_id=str(project.id), name="faults", actor="test").key
    env = environment(database_url_for_worker(), redis.url, folders)
    port = free_port()
    processes.start("server", manage("runserver", f"127.0.0.1:{port}", "--noreload"), env)
    processes.start("worker", worker_argv(), env)
    processes.start("dispatcher", manage("nexum_dispatcher"), env)
    base = f"http://127.0.0.1:{port}/api/v1"

    def server_answers() -> bool:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(f"{base}/health", timeout=2)
            return True
        return False

    assert wait_for(server_answers, timeout=30), processes.log("server")
    answers: list[tuple[str, int, dict]] = []

    def complete(task: Task) -> None:
        answers.append(("completion", *api_call(base, token, f"/tasks/{task.id}/complete", {"answer": "ok"})))

    def compile_async(task: Task) -> None:
        body = {"model": "local", "async": True}
        answers.append(("compile", *api_call(base, token, f"/tasks/{task.id}/compile", body)))

    for task in tasks[:3]:  # the broker is up: the first check runs, the rest queue behind it
        complete(task)
    compile_async(tasks[0])
    redis.stop()  # the queued messages are lost with it
    for task in tasks[3:-1]:
        complete(task)
    compile_async(tasks[1])
    compile_async(tasks[2])
    time.sleep(3)
    redis.start()  # the same port, empty
    back = time.monotonic()
    complete(tasks[-1])  # a request once the broker is back (the server reconnects)

    assert [status for _, status, _ in answers if status not in (200, 202)] == [], answers
    completions = [body["completion"]["request_id"] for kind, _, body in answers if kind == "completion"]
    compiles = [body["request_id"] for kind, _, body in answers if kind == "compile"]

    def all_answered() -> bool:
        decided = CompletionRequest.objects.filter(id__in=completions, decided=True).count()
        done = ContextCompilation.objects.filter(request_id__in=compiles).exclude(status="queued").count()
        return decided == len(completions) and done == len(compiles)

    assert wait_for(all_answered, timeout=DECIDED_WITHIN_S), processes.log("dispatcher")
    print(f"every request answered {time.monotonic() - back:.1f} s after the broker was back")
    assert [decisions(request_id) for request_id in completions] == [1] * len(completions)
    compiled = [
        Event.objects.filter(event_type="ContextCompiled", data__request_id=request_id).count()
        for request_id in compiles
    ]
    assert compiled == [1] * len(compiles)
    assert set(CompletionRequest.objects.filter(id__in=completions).values_list("outcome", flat=True)) == {
        "completed"
    }


# --- (c) the worker killed mid-check ------------------------------------------------------------------------


@pytest.mark.parametrize("kill", ["process_tree", "process_group", "pool_process"])
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_check_decides_once_and_never_overlaps_the_check(
    project, folders, redis, processes, sends_to, kill
):
    """``process_tree``: everything below the worker dies, the check too; ``process_group``: the worker's own
    group dies (the check runs in a session of its own); both are restarted and the dispatcher sends the
    request again once the lease expires. ``pool_process``: only the prefork pool process dies; the main
    process requeues the message at once, and the lease (30 s here, so expiry cannot be what frees it) is
    taken over because its holder is provably dead. Each time the check dies with the worker process that ran
    it (bubblewrap's --die-with-parent); a takeover quicker than that death kills it first."""
    workspace = Path(folders["NEXUM_WORKSPACE_ROOT"]) / project.slug  # the project's own folder
    [task] = started_tasks(project, ["s1"], GUARDED_CHECK.format(first=60, again=1))
    env = environment(database_url_for_worker(), redis.url, folders)
    pool = "solo"
    if kill == "pool_process":
        pool, env["NEXUM_LEASE_TTL_S"] = "prefork", "30"
    worker = processes.start("worker", worker_argv(pool), env)
    processes.start("dispatcher", manage("nexum_dispatcher"), env)
    sends_to(redis.url)
    request = completion_request(
        project_id=str(project.id), task_id=str(task.id), answer="done", actor="agent"
    ).request
    assert request is not None
    runs = workspace / "runs.log"
    assert wait_for(runs.exists, timeout=30), processes.log("worker")
    lease = Work.objects.get(key=COMPLETION.key(request.id))
    assert lease.check_name == "guarded" and lease.check_pid is not None
    renewed = wait_for(lambda: Work.objects.get(key=lease.key).expires_at > lease.expires_at, timeout=30)
    assert renewed, "the heartbeat did not renew the lease"

    if kill == "pool_process":
        [pool_process] = [pid for pid in descendants(worker.pid) if _parent(pid) == worker.pid]
        os.kill(pool_process, signal.SIGKILL)
    else:
        if kill == "process_tree":
            for pid in descendants(worker.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        processes.stop("worker", signal.SIGKILL)  # its process group: the check is not in it
        processes.start("worker", worker_argv(pool), env)
    killed = time.monotonic()

    def decided() -> bool:
        return CompletionRequest.objects.get(id=request.id).decided

    within = 25 if kill == "pool_process" else DECIDED_WITHIN_S
    assert wait_for(decided, timeout=within), processes.log("worker")
    print(f"{kill}: decided {time.monotonic() - killed:.1f} s after the kill")
    assert not (workspace / "overlaps.log").exists(), (workspace / "overlaps.log").read_text()
    first, second, end = runs.read_text().splitlines()  # the first copy never ended: it was killed
    assert first.startswith("start") and second.startswith("start") and end == second.replace("start", "end")
    assert "took over" in processes.log("worker")
    assert CompletionRequest.objects.get(id=request.id).outcome == "completed"
    assert decisions(request.id) == 1
    assert CheckRun.objects.filter(request_id=request.id).count() == 1


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2 :].split()[1])


# --- (b) PostgreSQL stops while a worker runs a check -------------------------------------------------------


class PrivatePostgres:
    """A PostgreSQL cluster of this test (``pg_createcluster`` on a free port, trust auth on 127.0.0.1)."""

    def __init__(self, port: int | None = None) -> None:
        self.version = max(
            (
                v
                for v in os.listdir("/usr/lib/postgresql")
                if Path(f"/usr/lib/postgresql/{v}/bin/initdb").exists()
            ),
            key=int,
        )
        self.name = f"nexum_fault_{uuid.uuid4().hex[:8]}"
        self.port = port or free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/nexum"

    def create(self) -> None:
        subprocess.run(
            ["pg_createcluster", self.version, self.name, "--port", str(self.port), "-u", "postgres",
             "--", "--auth=trust"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        self.start()
        subprocess.run(
            ["createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "nexum"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip

    def _ctl(self, action: str, *options: str) -> None:
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, action, *options],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip

    def start(self) -> None:
        self._ctl("start")

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast")  # every connection is cut, as in an outage

    def drop(self) -> None:
        subprocess.run(
            ["pg_dropcluster", "--stop", self.version, self.name], capture_output=True, timeout=120
        )

    def query(self, sql: str, *params: object) -> list[tuple]:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="nexum") as conn:
            return conn.execute(sql, params).fetchall()


# The ports a private cluster may take (a machine's runs keep to their own ranges); any free port without it.
PRIVATE_POSTGRES_PORTS = [
    int(port) for port in os.environ.get("NEXUM_TEST_POSTGRES_PORTS", "").split(",") if port
]


def _unused(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    if os.geteuid() != 0 or not shutil.which("pg_createcluster"):
        pytest.skip("a private PostgreSQL cluster needs root and pg_createcluster (postgresql-common)")
    cluster = PrivatePostgres(port=next(filter(_unused, PRIVATE_POSTGRES_PORTS), None))
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.drop()


SETUP_AND_REQUEST = """
import json
from tasks_app.models import Task
from tasks_app.services.goals import goal_create
from tasks_app.services.lifecycle import task_start
from tasks_app.services.projects import project_create
from verification_app.services.completions import completion_request
project = project_create(slug="faults", name="Faults", actor="test")
check = {"kind": "command", "name": "slow", "argv": ["sh", "-c", %r]}
goal = goal_create(project_id=str(project.id), objective="Ship", tasks=[{"key": "s1", "objective": "Build"}],
                   contracts={"s1": {"checks": [check]}}, actor="planner")
task = Task.objects.get(goal=goal, key="s1")
task_start(project_id=str(project.id), task_id=str(task.id), actor="agent")
print(json.dumps({"request_id": str(completion_request(
    project_id=str(project.id), task_id=str(task.id), answer="done", actor="agent").request.id)}))
"""


def test_a_database_outage_while_a_check_runs_still_ends_with_one_decision(
    postgres, redis, processes, folders
):
    env = environment(postgres.url, redis.url, folders)
    migrate = subprocess.run(
        manage("migrate", "--noinput"), cwd=ROOT, env=env, capture_output=True, timeout=300
    )
    assert migrate.returncode == 0, migrate.stderr.decode()[-3000:]
    processes.start("worker", worker_argv(), env)
    processes.start("dispatcher", manage("nexum_dispatcher"), env)
    check = GUARDED_CHECK.format(first=3, again=1)
    made = subprocess.run(
        manage("shell", "-c", SETUP_AND_REQUEST % check), cwd=ROOT, env=env, capture_output=True, timeout=120
    )
    assert made.returncode == 0, made.stderr.decode()[-3000:]
    request_id = json.loads(made.stdout.decode().strip().splitlines()[-1])["request_id"]
    runs = Path(folders["NEXUM_WORKSPACE_ROOT"]) / "faults" / "runs.log"  # the project's own folder
    assert wait_for(runs.exists, timeout=30), processes.log("worker")
    postgres.stop()
    time.sleep(5)
    postgres.start()

    def decided() -> bool:
        return postgres.query("SELECT decided FROM verification_app_completionrequest WHERE id = %s",
                              request_id) == [(True,)]  # fmt: skip

    assert wait_for(decided, timeout=DECIDED_WITHIN_S), processes.log("worker")
    [(outcome,)] = postgres.query(
        "SELECT outcome FROM verification_app_completionrequest WHERE id = %s", request_id
    )
    assert outcome == "completed"
    events = dict(
        postgres.query(
            "SELECT event_type, count(*) FROM nexum_event WHERE stream_id = %s GROUP BY event_type",
            f"completion-{request_id}",
        )
    )
    assert events == {"CompletionRequested": 1, "CheckRunRecorded": 1, "GateDecided": 1}
    assert "retry: Retry in 1s: OperationalError" in processes.log("worker")  # met the outage, and retried
    assert not (Path(folders["NEXUM_WORKSPACE_ROOT"]) / "faults" / "overlaps.log").exists()


# --- (c) PostgreSQL stops under a serving gunicorn ----------------------------------------------------------

SETUP_AGENT = """
import json
from tasks_app.models import Task
from tasks_app.services.goals import goal_create
from tasks_app.services.projects import project_create
from tasks_app.services.tokens import agent_token_issue
project = project_create(slug="outage", name="Outage", actor="test")
goal = goal_create(project_id=str(project.id), objective="Ship", tasks=[{"key": "a", "objective": "Build"}],
                   actor="planner")
key = agent_token_issue(project_id=str(project.id), name="agent", actor="test").key
print(json.dumps({"key": key, "task_id": str(Task.objects.get(goal=goal, key="a").id)}))
"""


def test_a_database_outage_is_503_and_the_client_writes_once_when_it_is_back(postgres, processes, folders):
    """The server keeps persistent connections (as in production), so the outage cuts connections it holds."""
    from nexum_client import Nexum

    from tests.e2e.test_production import answers, fetch

    env = {**environment(postgres.url, "", folders), "NEXUM_DB_CONN_MAX_AGE": "60"}
    migrate = subprocess.run(
        manage("migrate", "--noinput"), cwd=ROOT, env=env, capture_output=True, timeout=300
    )
    assert migrate.returncode == 0, migrate.stderr.decode()[-3000:]
    made = subprocess.run(
        manage("shell", "-c", SETUP_AGENT), cwd=ROOT, env=env, capture_output=True, timeout=120
    )
    assert made.returncode == 0, made.stderr.decode()[-3000:]
    agent = json.loads(made.stdout.decode().strip().splitlines()[-1])
    port = free_port()
    server_env = {
        **env,
        "NEXUM_WEB_BIND": f"127.0.0.1:{port}",
        "NEXUM_WEB_WORKERS": "2",
        "NEXUM_WEB_THREADS": "2",
    }
    processes.start(
        "gunicorn", [sys.executable, "-m", "gunicorn", "-c", "deploy/gunicorn.conf.py"], server_env
    )
    base = f"http://127.0.0.1:{port}"
    assert wait_for(lambda: answers(base), timeout=60), processes.log("gunicorn")
    bearer = {"Authorization": f"Bearer {agent['key']}"}
    for _ in range(4):  # every thread of both workers holds a connection now
        assert fetch(base, "/api/v1/tasks", **bearer)[0] == 200

    postgres.stop()
    for path in ("/api/v1/tasks", f"/api/v1/tasks/{agent['task_id']}", "/api/v1/events"):
        status, headers, body = fetch(base, path, **bearer)
        assert status == 503, body[:500]
        assert headers["Content-Type"] == "application/json" and headers["Retry-After"] == "2"
        error = json.loads(body)["error"]
        assert error["code"] == "database_unavailable" and error["request_id"] == headers["X-Request-ID"]
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "list_tasks", "arguments": {}},
    }
    request = urllib.request.Request(
        base + "/mcp",
        data=json.dumps(call).encode(),
        headers={
            **bearer,
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 503 and refused.value.headers["Content-Type"] == "application/json"
    answer = json.loads(refused.value.read())
    assert answer["id"] == 1 and answer["error"]["data"]["code"] == "database_unavailable"

    waits: list[float] = []

    def wait_then_restart(seconds: float) -> None:
        """The client's pause before a retry: the first one brings the database back."""
        waits.append(seconds)
        if len(waits) == 1:
            postgres.start()
        time.sleep(seconds)

    with Nexum(base, agent["key"], retries=5, backoff_max_s=4, sleep=wait_then_restart) as client:
        fact = client.record_fact("the database came back", task_id=agent["task_id"])
    assert waits[0] == 2.0  # the server's Retry-After
    recorded = postgres.query("SELECT data->>'item_id' FROM nexum_event WHERE event_type = 'FactRecorded'")
    assert recorded == [(fact.id,)] and fact.text == "the database came back"  # written once
    assert "Traceback" not in processes.log("gunicorn")  # an outage is a warning naming its cause, not a bug


# --- (d) one project's flood of completions ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_projects_flood_of_completions_holds_its_cap_of_the_queue_and_another_projects_passes_it(
    project, other_project, folders, settings, processes, workspace
):
    """Eight one-second completions of one project, capped at two in flight, then one of another project's:
    that one is decided behind at most the two queued before it, not behind the eight."""
    settings.NEXUM_COMPLETION_IN_FLIGHT_PER_PROJECT = 2
    env = {
        **environment(database_url_for_worker(), django_settings.CELERY_BROKER_URL, folders),
        "NEXUM_COMPLETION_IN_FLIGHT_PER_PROJECT": "2",
    }
    flood = started_tasks(project, [f"f{i}" for i in range(8)], "sleep 1")
    (workspace / other_project.slug).mkdir()
    (workspace / other_project.slug / "report.txt").write_text("done\n")
    goal = goal_create(
        project_id=str(other_project.id),
        objective="Pass the flood",
        tasks=[{"key": "q", "objective": "Report"}],
        contracts={"q": {"checks": [{"kind": "file_exists", "name": "report", "path": "report.txt"}]}},
        actor="planner",
    )
    quiet = task_start(
        project_id=str(other_project.id),
        task_id=str(Task.objects.get(goal=goal, key="q").id),
        actor="agent",
    )
    processes.start("worker", worker_argv(queues=("completions", "celery")), env)
    processes.start("dispatcher", manage("nexum_dispatcher"), env)
    assert wait_for(lambda: " ready." in processes.log("worker"), timeout=60), processes.log("worker")

    flooded = [
        completion_request(project_id=str(project.id), task_id=str(t.id), answer="done", actor="agent")
        for t in flood
    ]
    assert all(result.outcome == "pending" for result in flooded)
    other = completion_request(
        project_id=str(other_project.id), task_id=str(quiet.id), answer="done", actor="agent"
    ).request
    assert other is not None
    assert wait_for(CompletionRequest.objects.filter(id=other.id, decided=True).exists, timeout=60), (
        processes.log("worker")
    )
    flood_decided = CompletionRequest.objects.filter(project_id=project.id, decided=True).count()
    assert flood_decided <= 4, f"the other project's completion waited for {flood_decided} of the flood's"
    everything = CompletionRequest.objects.filter(project_id=project.id, decided=True)
    assert wait_for(lambda: everything.count() == 8, timeout=90), processes.log("dispatcher")  # all in turn
    assert all(decisions(result.request.id) == 1 for result in flooded if result.request is not None)
