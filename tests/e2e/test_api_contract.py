"""Schema = server (issue 16): schemathesis runs every check it has against a live server, from the schema
at /api/schema/, on the demo world, and finds nothing. It is part of ``make test`` (so of CI); ``make
contract`` runs it alone.

The run is fixed and bounded: every check, a fixed seed, ``EXAMPLES`` examples per operation in the fuzzing
phase (positive and negative cases, with data taken from earlier answers and refined from their errors),
two workers, and a hard limit of ``TIME_LIMIT_S``: about 2,300 requests in 3 minutes on a busy 2-core
machine. An agent token calls every operation; the operations the schema marks ``x-nexum-role: operator``
get an operator token. The SSE stream (``/events/stream``) is bounded by the server's
``NEXUM_EVENT_STREAM_MAX_S``, 0 here: each stream request sends what is there and closes.

Past the 404: a path parameter takes one of the demo world's ids (goals, tasks and keys, facts, items,
contexts and bundles, escalations, compile and completion requests, catalog words, tools, a webhook)
``REAL_ID_PROBABILITY`` of the time and what the schema allows otherwise, and a compile's ``model`` takes a
catalog word as often. So the operations run their logic (compiles, completions with their checks, resolves,
overrides, cancels), not only the lookup.

What the configuration states about this API, each for a reason (no check is switched off for the API as a
whole):
- ``positive_data_acceptance``: a well-formed request is done (2xx) or refused for the token, the project or
  the current state (401, 403, 404, 409), and 422 only where the operation declares it (well formed but
  refused by policy, SPEC I3); never 400.
- ``positive_data_acceptance`` is off for the bodies whose validity lies between members or in the project's
  state, which a schema cannot say (``VALIDITY_BEYOND_SCHEMA``): a goal's plan (``depends_on``/``parent``
  name other tasks' keys, no cycle, ``contracts`` keyed by them), a source's ``config`` (its members depend on
  the ``kind``), a model catalog (aliases and tier words name other words, overlays keep theirs), a contract
  (check names unique, patterns RE2 accepts, ``argv`` within its total size) and a tool scope (the pinned
  tools among the allowed). Every other check runs on them.
- ``allow-x00 = false``: the server refuses NUL in every string, everywhere (no database stores it; README),
  a rule of the whole API that the schema does not repeat on each string.
- The coverage phase is off: boundary and negative values of every member are thousands more requests (the
  run would take twice as long); the API tests send those bad inputs (tests/api/test_api_contract.py).
- The stateful phase is off: the schema declares no links to follow; the world's ids stand in for them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.test import Client, override_settings
from rest_framework.test import APIClient

from nexum_web.webhooks.services import webhook_register
from tasks_app.services.tokens import agent_token_issue

pytestmark = pytest.mark.django_db(transaction=True)

SEED = 20261201
EXAMPLES = 30
TIME_LIMIT_S = 600  # the run takes about 3 minutes on a busy 2-core machine

CONFIG = """
seed = {seed}
workers = 2
continue-on-failure = true
request-timeout = 30
headers = {{ Authorization = "Bearer {agent}" }}

[generation]
max-examples = {examples}
allow-x00 = false

[phases.examples]
enabled = true

[phases.coverage]
enabled = false

[phases.fuzzing]
enabled = true
extra-data-sources = {{ responses = true }}
error-feedback = {{ enabled = true }}

[phases.stateful]
enabled = false

[checks]
enabled = true

[checks.positive_data_acceptance]
expected-statuses = {accepted}

[parameters]
{bindings}

{dictionaries}

[[operations]]
include-by = "/x-nexum-role == operator"
headers = {{ Authorization = "Bearer {operator}" }}

[[operations]]
include-name = {refusing_by_policy}
checks = {{ positive_data_acceptance = {{ expected-statuses = {accepted_or_refused} }} }}

[[operations]]
include-name = {validity_beyond_schema}
checks = {{ positive_data_acceptance = {{ enabled = false }} }}
"""
# The answers to a well-formed request: done, or refused for the token, the project or the current state.
ACCEPTED = ["2xx", "401", "403", "404", "409"]
VALIDITY_BEYOND_SCHEMA = [
    "POST /api/v1/goals",
    "POST /api/v1/sources",
    "PUT /api/v1/models/catalog",
    "PUT /api/v1/tasks/{task_id}/contract",
    "PUT /api/v1/goals/{scope_id}/tools",
    "PUT /api/v1/tasks/{scope_id}/tools",
]
REAL_ID_PROBABILITY = 0.8
# Body members that name something of the world, and the path parameter whose ids they take.
BODY_NAMES = {"body.model": "word"}


def world_ids(operator_key: str) -> dict[str, list[str]]:
    """The ids of the demo world, per path parameter, as the API lists them to an operator."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {operator_key}")

    def results(path: str) -> list[dict]:
        return client.get(path, {"limit": 500}).json()["results"]

    goals = [goal["id"] for goal in results("/api/v1/goals")]
    tasks = results("/api/v1/tasks")
    items = results("/api/v1/items")
    escalations = results("/api/v1/escalations")
    contexts = [row for task in tasks for row in results(f"/api/v1/tasks/{task['id']}/contexts")]
    completions = [row for task in tasks for row in results(f"/api/v1/tasks/{task['id']}/completions")]
    return {
        "task_id": [task["id"] for task in tasks],
        "scope_id": goals + [task["id"] for task in tasks],
        "goal_id": goals,
        "key": sorted({task["key"] for task in tasks}),
        "fact_id": [item["id"] for item in items if item["kind"] == "fact"],
        "item_id": [item["id"] for item in items],
        "digest": [row["digest"] for row in contexts] + [row["bundle_digest"] for row in escalations],
        "other": [row["digest"] for row in contexts],
        "escalation_id": [row["id"] for row in escalations],
        "request_id": [row["request_id"] for row in contexts + completions],
        "word": [word["word"] for word in client.get("/api/v1/models").json()["words"]],
        "name": [tool["name"] for tool in results("/api/v1/tools")],
        "webhook_id": [hook["id"] for hook in results("/api/v1/webhooks")],
    }


def config_text(*, schema: dict, agent: str, operator: str) -> str:
    """The run's configuration: the world's ids as dictionaries, 422 accepted where the schema declares it."""
    ids = {name: values for name, values in world_ids(operator).items() if values}
    bindings = [*((f"path.{name}", name) for name in ids), *BODY_NAMES.items()]
    refusing = [
        f"{method.upper()} {path}"
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if "422" in operation["responses"]
    ]
    return CONFIG.format(
        seed=SEED,
        examples=EXAMPLES,
        agent=agent,
        operator=operator,
        accepted=json.dumps(ACCEPTED),
        refusing_by_policy=json.dumps(refusing),
        accepted_or_refused=json.dumps([*ACCEPTED, "422"]),
        validity_beyond_schema=json.dumps(VALIDITY_BEYOND_SCHEMA),
        bindings="\n".join(
            f'"{key}" = {{ dictionary = "{name}", probability = {REAL_ID_PROBABILITY} }}'
            for key, name in bindings
        ),
        dictionaries="\n".join(
            f"[dictionaries.{name}]\nvalues = {json.dumps(values)}" for name, values in ids.items()
        ),
    )


def test_schemathesis_finds_no_failure_of_any_check(live_server, demo_world, settings, tmp_path: Path):
    settings.NEXUM_EVENT_STREAM_MAX_S = 0
    project_id = str(demo_world.project.id)
    agent = agent_token_issue(project_id=project_id, name="schemathesis-agent", actor="test").key
    operator = agent_token_issue(
        project_id=project_id, name="schemathesis-operator", role="operator", actor="test"
    ).key
    with override_settings(NEXUM_SOURCE_HTTP_ALLOW=["127.0.0.1:9"]):  # a webhook to read; none is sent
        webhook_register(project_id=project_id, url="http://127.0.0.1:9/hook", actor="test")
    served = Client().get("/api/schema/?format=json").content  # read once: generating it takes seconds
    schema = tmp_path / "schema.json"
    schema.write_bytes(served)
    config = tmp_path / "schemathesis.toml"
    config.write_text(config_text(schema=json.loads(served), agent=agent, operator=operator))
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "--config-file",
        str(config),
        "run",
        str(schema),
        "--url",
        live_server.url,
        "--no-color",
    ]
    started = time.monotonic()
    try:
        run = subprocess.run(
            command, capture_output=True, text=True, timeout=TIME_LIMIT_S, cwd=tmp_path, check=False
        )
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"schemathesis ran over {TIME_LIMIT_S} s:\n{str(expired.stdout or '')[-20000:]}")
    elapsed = time.monotonic() - started
    report = run.stdout + run.stderr
    print(report[-3000:], f"\nschemathesis ran {elapsed:.0f} s")
    assert run.returncode == 0, report[-20000:]
