from __future__ import annotations

import os
import shutil

import pytest

# Command checks run inside bubblewrap, as in production; CI installs it (.ci/run). On a machine without it
# the gate's tests run their command checks unsandboxed (NEXUM_SANDBOX=none, said at the end of the run)
# and the tests of the sandbox itself are skipped, each saying why.
BWRAP_MISSING = shutil.which("bwrap") is None
NEEDS_BWRAP = pytest.mark.skipif(
    BWRAP_MISSING,
    reason="bubblewrap (bwrap) is not installed, so the sandbox's guarantees cannot be shown here:"
    " apt-get install bubblewrap (CI installs it)",
)


def pytest_configure(config: pytest.Config) -> None:
    from django.conf import settings

    # An SSE stream a test opens (the schema tests do, with any ?timeout=) sends what is there and closes;
    # a test that needs a stream held open raises this with the settings fixture.
    settings.NEXUM_EVENT_STREAM_MAX_S = 0
    # A run killed while it held the SQLite test database leaves its write-ahead log and shared memory
    # behind; the new database (created afresh) would read them as its own and fail with "disk I/O error".
    test_database = settings.DATABASES["default"].get("TEST", {}).get("NAME")
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3") and test_database:
        for leftover in (f"{test_database}-wal", f"{test_database}-shm"):
            if os.path.exists(leftover):
                os.remove(leftover)
    if BWRAP_MISSING:
        os.environ["NEXUM_SANDBOX"] = "none"  # for the workers that tests start
        settings.NEXUM_SANDBOX = "none"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if BWRAP_MISSING:
        terminalreporter.write_sep(
            "-", "bwrap not found: command checks ran unsandboxed and the sandbox's tests were skipped"
        )


@pytest.fixture(autouse=True)
def celery_eager_unless_worker_test(request: pytest.FixtureRequest):
    """Tasks run in process by default; tests marked ``worker`` talk to a real worker on the broker."""
    from config.celery import app

    eager = request.node.get_closest_marker("worker") is None
    previous = app.conf.task_always_eager
    app.conf.task_always_eager = eager or previous
    yield
    app.conf.task_always_eager = previous


@pytest.fixture
def workspace(tmp_path, settings):
    """A workspace and an artifact store of the test's own, where command checks may run ``sh``."""
    root = tmp_path / "workspace"
    root.mkdir()
    settings.NEXUM_WORKSPACE_ROOT = root
    settings.NEXUM_ARTIFACT_ROOT = tmp_path / "artifacts"
    settings.NEXUM_CHECK_EXECUTABLES = ["sh"]
    return root


@pytest.fixture
def project(db):
    from tasks_app.services.projects import project_create

    return project_create(slug="acme", name="Acme", actor="test")


@pytest.fixture
def other_project(db):
    from tasks_app.services.projects import project_create

    return project_create(slug="globex", name="Globex", actor="test")


def _client_for(project, name: str, role: str = "agent"):
    from rest_framework.test import APIClient

    from tasks_app.services.tokens import agent_token_issue

    issued = agent_token_issue(project_id=str(project.id), name=name, role=role, actor="test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.key}")
    return client


@pytest.fixture
def api(project):
    """An API client authenticated as an agent of ``project``."""
    return _client_for(project, "agent-1")


@pytest.fixture
def operator_api(project):
    """An API client authenticated as an operator of ``project``: it may write policy (contracts, sources,
    grants, catalog, overlays, tools, questions, escalation resolutions, plan-gate overrides, unblock,
    cancel)."""
    return _client_for(project, "operator-1", role="operator")


@pytest.fixture
def other_api(other_project):
    """An API client authenticated as an agent of another project."""
    return _client_for(other_project, "intruder")


@pytest.fixture
def other_operator_api(other_project):
    """An API client authenticated as an operator of another project."""
    return _client_for(other_project, "intruding-operator", role="operator")
