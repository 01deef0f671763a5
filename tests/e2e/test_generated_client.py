"""A client generated from the OpenAPI schema (openapi-python-client, as a user would) drives the demo world
against a live server (issue 29): every answer parses into the generated models and says back what the
server sent; the bodies are typed (an artifact with its content, a contract of checks of several kinds, each
its own model) and the artifact's content comes back as bytes. Beside it, schema-level tests: every
operationId is the one ``OPERATION_IDS`` names, none is drf-spectacular's default, every check kind has a
schema of its own in a discriminated union, and no request body is untyped."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import pytest
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.openapi import AutoSchema

from nexum_web.api.schema import OPERATION_IDS, RoleAwareSchema
from nexum_web.api.verification import check_component
from tasks_app.services.tokens import agent_token_issue

PACKAGE = "nexum_generated_client"
CHECK_KINDS = ("artifact_matches", "callable", "command", "file_exists", "file_matches")


def schema_document() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> ModuleType:
    """The client openapi-python-client generates from this server's schema, imported."""
    pytest.importorskip("openapi_python_client")
    folder = tmp_path_factory.mktemp("generated")
    spec = folder / "openapi.json"
    spec.write_text(json.dumps(schema_document()))
    bin_folder = str(Path(sys.executable).parent)  # ruff, which the generator formats its output with
    environment = {**os.environ, "PATH": bin_folder + os.pathsep + os.environ.get("PATH", "")}
    generator = Path(bin_folder) / "openapi-python-client"
    run = subprocess.run(
        [str(generator), "generate", "--path", str(spec), "--meta", "none", "--output-path",
         str(folder / PACKAGE)],
        capture_output=True, text=True, env=environment, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Warning" not in run.stdout + run.stderr, run.stdout + run.stderr  # nothing left out
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(folder))
        for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
            del sys.modules[name]


def operation(generated: ModuleType, name: str) -> ModuleType:
    return importlib.import_module(f"{generated.__name__}.api.v1.{name}")


def _normalized(value: Any) -> Any:
    """JSON with its date-times as datetimes (the server writes ``Z``, the generated models ``+00:00``)."""
    if isinstance(value, dict):
        return {key: _normalized(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normalized(item) for item in value]
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:\d\d)", value):
        return datetime.fromisoformat(value)
    return value


def says_back(answer: Any, model: type, status: int = 200) -> Any:
    """The parsed answer: of ``model``, and saying back exactly what the server sent."""
    assert answer.status_code == status, answer.content
    parsed = answer.parsed
    assert isinstance(parsed, model), (type(parsed), answer.content)
    assert _normalized(parsed.to_dict()) == _normalized(json.loads(answer.content))
    return parsed


@pytest.mark.django_db(transaction=True)
def test_a_generated_client_round_trips_the_demo_world(live_server, demo_world, generated):
    models = importlib.import_module(f"{generated.__name__}.models")
    project_id = str(demo_world.project.id)
    agent_key = agent_token_issue(project_id=project_id, name="generated-agent", actor="test").key
    operator_key = agent_token_issue(
        project_id=project_id, name="generated-operator", role="operator", actor="test"
    ).key
    agent = generated.AuthenticatedClient(base_url=live_server.url, token=agent_key)
    operator = generated.AuthenticatedClient(base_url=live_server.url, token=operator_key)

    # Reading: the goal, its tasks, their contracts and completions, the items, the contexts.
    goals = says_back(operation(generated, "goals").sync_detailed(client=agent), models.GoalPage)
    assert [goal.id for goal in goals.results] == [demo_world.goal.id]
    goal = says_back(
        operation(generated, "goal").sync_detailed(str(demo_world.goal.id), client=agent), models.GoalDetail
    )
    assert sorted(task.key for task in goal.tasks) == sorted(demo_world.tasks)
    tasks = says_back(operation(generated, "tasks").sync_detailed(client=agent, limit=500), models.TaskPage)
    assert {task.id for task in tasks.results} >= {task.id for task in demo_world.tasks.values()}
    kinds = []
    for task in demo_world.tasks.values():
        says_back(operation(generated, "task").sync_detailed(str(task.id), client=agent), models.TaskDetail)
        says_back(
            operation(generated, "completions").sync_detailed(str(task.id), client=agent),
            models.CompletionPage,
        )
        contract = operation(generated, "contract").sync_detailed(str(task.id), client=agent)
        if contract.status_code == 404:  # a task the demo gives no contract
            continue
        sent = json.loads(contract.content)["checks"]
        parsed = says_back(contract, models.Contract).checks
        assert [type(check).__name__ for check in parsed] == [check_component(raw["kind"]) for raw in sent]
        kinds += [raw["kind"] for raw in sent]
    assert len(set(kinds)) >= 2, kinds  # the demo's contracts hold checks of several kinds
    items = says_back(operation(generated, "items").sync_detailed(client=agent, limit=500), models.ItemPage)
    assert items.results
    s3 = demo_world.tasks["s3"]
    contexts = says_back(
        operation(generated, "contexts").sync_detailed(str(s3.id), client=agent), models.CompileHistoryPage
    )
    digest = contexts.results[0].digest
    says_back(operation(generated, "context").sync_detailed(digest, client=agent), models.CompiledContext)
    says_back(operation(generated, "escalations").sync_detailed(client=agent), models.EscalationPage)

    # Writing with typed bodies: a fact, an artifact with its content (read back as bytes), a compile.
    fact = says_back(
        operation(generated, "record_fact").sync_detailed(
            str(s3.id), client=agent, body=models.FactInputRequest(text="The clock is injected")
        ),
        models.Item,
        201,
    )
    assert fact.text == "The clock is injected"
    artifact = says_back(
        operation(generated, "record_artifact").sync_detailed(
            str(s3.id),
            client=agent,
            body=models.ArtifactInputRequest(
                summary="pytest output", content_text="12 passed", media_type="text/plain"
            ),
        ),
        models.Item,
        201,
    )
    content = operation(generated, "artifact_content").sync_detailed(str(artifact.id), client=agent)
    assert content.status_code == 200 and content.content == b"12 passed"
    assert content.parsed.payload.read() == b"12 passed"
    compiled = says_back(
        operation(generated, "compile_").sync_detailed(
            str(s3.id), client=agent, body=models.CompileInputRequest(model="frontier")
        ),
        models.CompileAnswer,
    )
    assert compiled.context.digest

    # A goal whose contract holds checks of two kinds, each its own model, told apart by kind.
    contract = models.ContractSpec(
        checks=[
            models.CommandCheck(
                kind=models.CommandCheckKindEnum.COMMAND, name="tests", argv=[sys.executable, "-c", "0"]
            ),
            models.FileExistsCheck(
                kind=models.FileExistsCheckKindEnum.FILE_EXISTS, name="readme", path="README.md"
            ),
        ]
    )
    created = says_back(
        operation(generated, "create_goal").sync_detailed(
            client=operator,
            body=models.GoalCreateRequest.from_dict(
                {
                    "objective": "Ship the generated client",
                    "tasks": [{"key": "g1", "objective": "Write it"}],
                    "contracts": {"g1": contract.to_dict()},
                }
            ),
        ),
        models.GoalDetail,
        201,
    )
    [g1] = created.tasks
    registered = says_back(
        operation(generated, "contract").sync_detailed(str(g1.id), client=agent), models.Contract
    )
    assert [type(check).__name__ for check in registered.checks] == ["CommandCheck", "FileExistsCheck"]
    assert registered.checks[0].argv == [sys.executable, "-c", "0"]


def test_every_operation_id_is_named_and_none_is_drf_spectaculars_default(db):
    document = schema_document()
    named = {
        (method.upper(), path.removeprefix("/api/v1")): body["operationId"]
        for path, item in document["paths"].items()
        for method, body in item.items()
    }
    assert named == OPERATION_IDS
    assert len(set(named.values())) == len(named)
    with mock.patch.object(RoleAwareSchema, "get_operation_id", AutoSchema.get_operation_id):
        defaults = {
            body["operationId"] for item in schema_document()["paths"].values() for body in item.values()
        }
    assert "v1_tasks_start_create" in defaults  # the default naming, as drf-spectacular does it
    assert not defaults & set(named.values())
    assert not [name for name in named.values() if name.startswith("v1_")]


def test_each_check_kind_has_its_own_schema_in_a_discriminated_union(db):
    document = schema_document()
    components = document["components"]["schemas"]
    union = components["ContractSpec"]["properties"]["checks"]["items"]
    names = {kind: check_component(kind) for kind in CHECK_KINDS}
    assert union["discriminator"] == {
        "propertyName": "kind",
        "mapping": {kind: f"#/components/schemas/{name}" for kind, name in names.items()},
    }
    assert union["oneOf"] == [{"$ref": f"#/components/schemas/{names[kind]}"} for kind in CHECK_KINDS]
    assert components["CommandCheck"]["required"] == ["kind", "name", "argv"]
    assert components["Contract"]["properties"]["checks"]["items"] == union  # the answer, too
    goal = components["GoalCreateRequest"]["properties"]["contracts"]["additionalProperties"]
    assert goal == {"$ref": "#/components/schemas/ContractSpec"}
    assert not [name for name in components if re.search(r"Type\d+$", name)]


def test_no_request_body_is_untyped_and_the_artifact_content_is_documented(db):
    document = schema_document()
    components = document["components"]["schemas"]
    for path, item in document["paths"].items():
        for method, body in item.items():
            schema = body.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if schema is None:
                continue
            target = components[schema["$ref"].rsplit("/", 1)[1]] if "$ref" in schema else schema
            assert "properties" in target or "items" in target, (method, path)
            assert "anyOf" not in target and "oneOf" not in target, (method, path)  # generators give up
    artifact = components["ArtifactInputRequest"]
    assert {
        "anyOf": [{"required": ["uri"]}, {"required": ["content_base64"]}, {"required": ["content_text"]}]
    } in (artifact["allOf"])
    content = document["paths"]["/api/v1/artifacts/{item_id}/content"]["get"]["responses"]["200"]
    assert list(content["content"]) == ["application/octet-stream", "*/*"]
    assert content["content"]["application/octet-stream"]["schema"] == {"type": "string", "format": "binary"}
    assert "media_type" in content["description"]
