"""Nexum as it runs in production: ``check --deploy`` reports nothing with debug off, a real gunicorn (the
repository's config, DEBUG off, HTTPS behind a proxy) serves the static files through WhiteNoise and the API
docs with no other host, the HTTP edge answers in the error shape, and ``deploy/serve.sh`` (``make serve``)
refuses to start without its environment and otherwise runs the web server, a Celery worker pool per queue
and the dispatcher."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from email.message import Message
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from nexum.eventstore.models import Event
from tests.conftest import BWRAP_MISSING
from tests.integration.test_worker import database_url_for_worker, wait_for

ROOT = Path(__file__).resolve().parents[2]
METRICS_TOKEN = "metrics-" + "m" * 24
# What a deployment must set; everything else keeps its production default.
REQUIRED = ("DATABASE_URL", "CELERY_BROKER_URL", "NEXUM_SECRET_KEY")


def production_env(data_dir: Path, **overrides: str) -> dict[str, str]:
    """This process's environment without Nexum's and the tests' settings, debug off, a strong secret key."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("NEXUM_", "DJANGO_")) and name not in REQUIRED
    }
    env.update(
        NEXUM_DEBUG="false",
        NEXUM_SECRET_KEY=secrets.token_urlsafe(50),
        NEXUM_DATA_DIR=str(data_dir),
        PYTHONPATH=str(ROOT),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    env.update(overrides)
    return env


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def fetch(
    base_url: str, path: str, method: str = "GET", *, https: bool = True, **headers: str
) -> tuple[int, Message, bytes]:
    """One request; ``https``: as the TLS-terminating proxy forwards it (``X-Forwarded-Proto: https``)."""
    address = urlsplit(base_url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    try:
        connection.request(
            method, path, headers={**({"X-Forwarded-Proto": "https"} if https else {}), **headers}
        )
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def answers(base_url: str) -> bool:
    try:
        fetch(base_url, "/api/v1/health")
    except OSError:
        return False
    return True


def assert_error(status: int, headers: Message, body: bytes, expected_status: int, code: str) -> dict:
    assert status == expected_status, body[:500]
    assert headers["Content-Type"] == "application/json"
    error = json.loads(body)["error"]
    assert set(error) == {"code", "message", "field", "details", "request_id"}
    assert error["request_id"] == headers["X-Request-ID"]
    assert error["code"] == code
    return error


def stop_group(process: subprocess.Popen[Any]) -> int:
    """Stop a process started in its own session, then anything of its group still running."""
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


# --- settings -----------------------------------------------------------------------------------------------


@pytest.mark.skipif(
    BWRAP_MISSING,
    reason="production needs bubblewrap: without it check --deploy rightly warns (nexum.W001) that command"
    " checks cannot run; apt-get install bubblewrap (CI installs it)",
)
def test_check_deploy_reports_nothing_with_production_settings(tmp_path):
    result = manage(production_env(tmp_path), "check", "--deploy", "--fail-level", "DEBUG")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "System check identified no issues (0 silenced)."
    assert result.stderr == ""


def test_production_settings_refuse_to_start_without_a_secret_key(tmp_path):
    env = production_env(tmp_path)
    del env["NEXUM_SECRET_KEY"]
    result = manage(env, "check")
    assert result.returncode != 0
    assert "NEXUM_SECRET_KEY must be set when NEXUM_DEBUG is off" in result.stderr


# --- a real gunicorn ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def static_root(tmp_path_factory) -> Path:
    """``collectstatic`` with the production storage (compressed, content-hashed names)."""
    root = tmp_path_factory.mktemp("static")
    env = production_env(tmp_path_factory.mktemp("data"), NEXUM_STATIC_ROOT=str(root))
    result = manage(env, "collectstatic", "--noinput", "--verbosity", "0")
    assert result.returncode == 0, result.stderr
    return root


@contextlib.contextmanager
def running_gunicorn(data_dir: Path, **settings: str) -> Iterator[str]:
    """gunicorn with deploy/gunicorn.conf.py on the test database, debug off, as ``make serve`` starts it;
    yields its base URL and stops its whole process group after."""
    port = free_port()
    env = production_env(
        data_dir, DATABASE_URL=database_url_for_worker(), NEXUM_WEB_BIND=f"127.0.0.1:{port}", **settings
    )
    log = data_dir / "gunicorn.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "deploy/gunicorn.conf.py"],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(lambda: answers(base_url) or process.poll() is not None), log.read_text()
        assert process.poll() is None, log.read_text()
        yield base_url
    finally:
        stop_group(process)


@pytest.fixture(scope="module")
def production_server(django_db_setup, static_root, tmp_path_factory) -> Iterator[str]:
    """The production server of ``make serve``: one worker of four threads."""
    data_dir = tmp_path_factory.mktemp("server")
    with running_gunicorn(
        data_dir, NEXUM_STATIC_ROOT=str(static_root), NEXUM_WEB_WORKERS="1", NEXUM_WEB_THREADS="4"
    ) as base_url:
        yield base_url


def stylesheets(html: bytes) -> list[str]:
    return re.findall(r'<link rel="stylesheet"[^>]*href="([^"]+)"', html.decode())


def test_admin_static_files_are_served_by_whitenoise_with_debug_off(production_server):
    status, _, page = fetch(production_server, "/admin/login/")
    assert status == 200
    css = stylesheets(page)
    assert css and all(re.fullmatch(r"/static/admin/css/[\w/-]+\.[0-9a-f]{12}\.css", url) for url in css), css
    for url in css:
        status, headers, _ = fetch(production_server, url, **{"Accept-Encoding": "gzip"})
        assert status == 200, url
        assert headers["Content-Type"].startswith("text/css")
        assert headers["Content-Encoding"] == "gzip"
        assert "immutable" in headers["Cache-Control"]  # a content-hashed name never changes
    status, _, _ = fetch(production_server, "/static/admin/css/no-such-file.css")
    assert status == 404


def test_plain_http_is_redirected_to_https_but_health_is_not(production_server):
    status, headers, _ = fetch(production_server, "/api/v1/events", https=False)
    assert status == 301
    assert headers["Location"].startswith("https://")
    status, _, body = fetch(production_server, "/api/v1/health", https=False)
    assert status == 200, body
    status, headers, _ = fetch(production_server, "/api/v1/health")
    assert status == 200
    assert headers["Strict-Transport-Security"].startswith("max-age=")


@pytest.mark.parametrize("path", ["/api/docs/", "/api/redoc/"])
def test_the_docs_pages_load_only_this_servers_static_files(production_server, path):
    status, headers, page = fetch(production_server, path)
    assert status == 200
    # and nothing their scripts would add as they run (Redoc's logo) is fetched either
    assert headers["Content-Security-Policy"].startswith("default-src 'self'; ")
    references = re.findall(r'(?:src|href|spec-url)="([^"]*)"', page.decode())
    assert references
    assert not re.findall(r"https?://|[\"'(]//", page.decode()), "a URL of another host"
    for url in references:
        assert url.startswith(("/static/drf_spectacular_sidecar/", "/api/schema/")), url
        assert fetch(production_server, url)[0] == 200, url


def test_the_edge_answers_json_through_the_real_server(production_server):
    assert_error(*fetch(production_server, "/api/v1/nope"), 404, "not_found")
    assert_error(*fetch(production_server, "/api/nope", "POST"), 404, "not_found")
    status, headers, body = fetch(production_server, "/api/v1/events", "TRACE")
    assert_error(status, headers, body, 405, "method_not_allowed")
    assert headers["Allow"] == "GET, HEAD, OPTIONS"


@pytest.mark.django_db(transaction=True)
def test_a_body_over_the_limit_is_refused_before_the_server_reads_it(production_server, project):
    """The request declares a gigabyte and sends a few bytes: the answer comes without the rest."""
    from tasks_app.services.tokens import agent_token_issue

    key = agent_token_issue(project_id=str(project.id), name="big-sender", actor="test").key
    before = Event.objects.count()
    address = urlsplit(production_server)
    head = (
        "POST /api/v1/goals HTTP/1.1\r\n"
        f"Host: {address.netloc}\r\n"
        "X-Forwarded-Proto: https\r\n"
        f"Authorization: Bearer {key}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {10**9}\r\n\r\n"
        '{"objective": "'
    )
    with socket.create_connection((address.hostname, address.port), timeout=20) as connection:
        connection.sendall(head.encode())
        response = http.client.HTTPResponse(connection)
        response.begin()
        body = response.read(int(response.headers["Content-Length"]))
    error = assert_error(response.status, response.headers, body, 413, "too_large")
    assert error["details"] == {"size": 10**9, "max_bytes": settings.DATA_UPLOAD_MAX_MEMORY_SIZE}
    assert Event.objects.count() == before


# --- the docs in a browser with no network ------------------------------------------------------------------


@pytest.fixture
def offline_page(browser, production_server) -> Iterator[tuple[Any, list[str]]]:
    """A page that reaches this server only: every other request is aborted and recorded."""
    context = browser.new_context(extra_http_headers={"X-Forwarded-Proto": "https"})
    context.set_default_timeout(30_000)
    left_the_server: list[str] = []
    server = urlsplit(production_server).netloc

    def this_server_only(route: Any) -> None:
        if urlsplit(route.request.url).netloc == server:
            route.continue_()
        else:
            left_the_server.append(route.request.url)
            route.abort()

    context.route("**/*", this_server_only)
    yield context.new_page(), left_the_server
    context.close()


def schema_operations(base_url: str) -> list[tuple[str, str]]:
    _, _, body = fetch(base_url, "/api/schema/", Accept="application/vnd.oai.openapi+json")
    return [(method, path) for path, item in json.loads(body)["paths"].items() for method in item]


def test_swagger_ui_renders_every_operation_with_no_network(offline_page, production_server):
    page, left_the_server = offline_page
    page.goto(f"{production_server}/api/docs/")
    page.wait_for_selector(".opblock-summary")
    assert page.locator(".opblock").count() == len(schema_operations(production_server))
    assert page.locator(".opblock-summary-path", has_text="/api/v1/events").first.is_visible()
    assert page.get_by_role("button", name=re.compile("Authorize")).is_visible()  # the bearer scheme
    assert left_the_server == []


def test_redoc_renders_the_operations_with_no_network(offline_page, production_server):
    page, left_the_server = offline_page
    page.goto(f"{production_server}/api/redoc/")
    page.wait_for_selector("h1:has-text('Nexum API')")
    assert page.locator("[data-section-id^='tag/']").count() > 0
    assert page.get_by_text("AUTHORIZATIONS:").first.is_visible()  # the bearer scheme, on an operation
    assert page.get_by_text("bearerToken").first.is_visible()
    assert left_the_server == []


# --- make serve ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("given", [(), ("DATABASE_URL",), ("DATABASE_URL", "CELERY_BROKER_URL")])
def test_make_serve_fails_fast_naming_what_is_missing(tmp_path, given):
    env = production_env(tmp_path, **dict.fromkeys(given, "set"))
    del env["NEXUM_SECRET_KEY"]
    result = subprocess.run(
        ["make", "--no-print-directory", "serve"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    missing = [name for name in REQUIRED if name not in given]
    assert f"serve: set {' '.join(missing)} first" in result.stderr


@pytest.mark.parametrize(
    ("name", "value"),
    [("NEXUM_WORKER_CONCURRENCY", "0"), ("NEXUM_WEBHOOK_WORKER_CONCURRENCY", "four")],
)
def test_make_serve_refuses_a_worker_pool_size_that_is_not_a_number_of_processes(tmp_path, name, value):
    env = production_env(tmp_path, **dict.fromkeys(REQUIRED, "set"), **{name: value})
    result = subprocess.run(
        ["deploy/serve.sh", "--check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert f'serve: {name} must be a whole number of processes (1 or more), not "{value}"' in result.stderr


@pytest.mark.worker
@pytest.mark.skipif(not settings.CELERY_BROKER_URL, reason="CELERY_BROKER_URL is not set")
@pytest.mark.django_db(transaction=True)
def test_serve_runs_the_web_server_a_pool_per_queue_and_the_dispatcher_and_stops_them_together(
    static_root, tmp_path
):
    from nexum.eventstore.tasks import record_health_ping

    port = free_port()
    env = production_env(
        tmp_path,
        DATABASE_URL=database_url_for_worker(),
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        NEXUM_STATIC_ROOT=str(static_root),
        NEXUM_WEB_BIND=f"127.0.0.1:{port}",
        NEXUM_WEB_WORKERS="1",
        NEXUM_WORKER_CONCURRENCY="1",
        NEXUM_COMPILE_WORKER_CONCURRENCY="1",
        NEXUM_WEBHOOK_WORKER_CONCURRENCY="1",
        NEXUM_METRICS_TOKEN=METRICS_TOKEN,
    )
    (tmp_path / "prometheus").mkdir()
    (tmp_path / "prometheus" / "counter_1.db").write_bytes(b"")  # a previous run's: serve empties the folder
    base_url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            ["deploy/serve.sh"],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        assert wait_for(lambda: answers(base_url) or process.poll() is not None, 180), log.read_text()
        status, _, body = fetch(base_url, "/api/v1/health")
        assert status == 200, body
        assert json.loads(body)["broker"] == {"ok": True, "mode": "broker", "transport": "redis"}

        ping_id = str(uuid.uuid4())
        record_health_ping.delay(ping_id)  # the default queue, which serve's worker consumes

        def pinged() -> bool:
            return Event.objects.filter(event_type="HealthPinged", data__ping_id=ping_id).exists()

        assert wait_for(pinged, 90), log.read_text()
        # The processes keep their metrics' counts in one folder of the data folder, which a scrape sums.
        status, _, body = fetch(base_url, "/metrics", Authorization=f"Bearer {METRICS_TOKEN}")
        assert status == 200, body[:500]
        answered = {
            sample.labels["route"]
            for family in text_string_to_metric_families(body.decode())
            for sample in family.samples
            if sample.name == "nexum_http_request_duration_seconds_count"
        }
        assert "/api/v1/health" in answered, answered
        kept = {path.name.split("_")[0] for path in (tmp_path / "prometheus").iterdir()}
        assert kept == {"histogram"}, kept
    finally:
        exit_code = stop_group(process)
    assert exit_code == 0, log.read_text()
    output = log.read_text()
    assert "Shutting down: Master" in output  # gunicorn stopped
    assert output.count("Warm shutdown") == 3  # and so did each worker pool
    # A pool per queue, and every queue the tasks are routed to is consumed by one of them.
    for pool in ("completions", "compiles", "webhooks"):
        assert f"{pool}@" in output, output
    for queue in settings.CELERY_TASK_QUEUES:
        assert re.search(rf"\.> {queue} +exchange=", output), f"no worker pool consumes {queue!r}:\n{output}"
    assert "dispatcher started" in output and "dispatcher stopped" in output
    assert "did not stop within" not in output  # nothing had to be killed


STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('ignoring SIGTERM', flush=True); time.sleep(600)"
)


def test_serve_kills_what_outlives_the_stop_grace_and_names_it(tmp_path):
    """deploy/serve.sh's supervisor (deploy/supervise.bash) with a process that ignores SIGTERM beside one
    that stops on it: after NEXUM_STOP_GRACE_S the first is killed and named, and serve says it failed."""
    script = (
        f'source deploy/supervise.bash; start "stubborn one" {sys.executable} -c "{STUBBORN}";'
        " start sleeper sleep 600; supervise"
    )
    log = tmp_path / "supervise.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            ["bash", "-c", script],
            cwd=ROOT,
            env={**os.environ, "NEXUM_STOP_GRACE_S": "1.5"},
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        assert wait_for(lambda: "ignoring SIGTERM" in log.read_text(), 30), log.read_text()
    finally:
        started = time.monotonic()
        exit_code = stop_group(process)
    took = time.monotonic() - started
    output = log.read_text()
    assert exit_code == 1, output
    assert 1.5 <= took < 30, output
    killed = re.findall(r"serve: the (.+) \(pid (\d+)\) did not stop within 1.5 s of SIGTERM: killed", output)
    assert [name for name, _ in killed] == ["stubborn one"], output
    with pytest.raises(ProcessLookupError):
        os.kill(int(killed[0][1]), 0)
