"""The TypeScript client (clients/typescript) built with Node from its lockfile (``npm ci``, ``npm run
build``) and its ``node --test`` suite run against a live server (pytest-django's ``live_server``, on the test
database): the seed's ``compileFor`` and ``gateTaskCompletion`` flow, lost answers to a PUT and a POST written
once, typed 409 and 422 errors, the event stream resumed with Last-Event-ID. Its types are generated from the
server's OpenAPI schema; a schema that changed without them is a failure naming the command that regenerates
them. The README's examples are type-checked against the client. Skipped, saying why, only where Node or npm
is missing (.ci/run installs them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command

from tests.e2e.test_python_client import world

__all__ = ["world"]  # the fixture, used here by name

CLIENT = Path(django_settings.BASE_DIR) / "clients" / "typescript"
NODE, NPM = shutil.which("node"), shutil.which("npm")

pytestmark = pytest.mark.skipif(
    NODE is None or NPM is None,
    reason="node or npm is not installed, so the TypeScript client cannot be built: apt-get install nodejs"
    " npm (.ci/run installs them)",
)


def run(argv: list[str], *, env: dict[str, str] | None = None, timeout_s: float = 300) -> str:
    """Run a Node command in the client's folder; its output, or a failure that shows it."""
    done = subprocess.run(
        argv, cwd=CLIENT, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{output}"
    return output


@pytest.fixture(scope="module")
def built_client() -> Path:
    """``npm ci`` (the lockfile's versions; the npm cache makes it work offline) and ``npm run build``."""
    version = run([str(NODE), "--version"]).strip()
    major = int(version.removeprefix("v").split(".")[0])
    assert major >= 20, f"the TypeScript client needs Node 20 or newer (fetch, crypto), found {version}"
    run([str(NPM), "ci", "--no-audit", "--no-fund", "--prefer-offline"])
    run([str(NPM), "run", "build"])
    return CLIENT / "dist"


def test_the_client_types_are_generated_from_the_servers_schema(built_client, tmp_path):
    schema = tmp_path / "openapi.json"
    call_command("spectacular", "--format", "openapi-json", "--file", str(schema))
    generated = tmp_path / "schema.ts"
    env = {**os.environ, "NEXUM_SCHEMA": str(schema), "NEXUM_SCHEMA_TYPES": str(generated)}
    run([str(NPM), "run", "generate"], env=env)
    committed = (CLIENT / "src" / "schema.ts").read_text()
    assert types_only(generated.read_text()) == types_only(committed), (
        "clients/typescript/src/schema.ts is not the server's schema any more: run `make typescript-client`"
        " and commit the regenerated file"
    )


def test_the_readmes_typescript_examples_type_check(built_client, tmp_path):
    """The README's ``ts`` blocks, one module importing ``nexum-client`` (this checkout's source), checked by
    tsc with the client's own settings: an example that calls what the client lacks fails here."""
    readme = (CLIENT / "README.md").read_text()
    examples = re.findall(r"```ts\n(.*?)```", readme, re.S)
    assert len(examples) >= 3, "the README's TypeScript examples were not found"
    # The one name the examples leave to the reader: the model's reply.
    (tmp_path / "readme.ts").write_text("declare const modelAnswer: string;\n" + "\n".join(examples))
    (tmp_path / "package.json").write_text(json.dumps({"type": "module"}))
    tsconfig = {
        "extends": str(CLIENT / "tsconfig.json"),
        "compilerOptions": {
            "noEmit": True,
            "rootDir": "/",
            "typeRoots": [str(CLIENT / "node_modules" / "@types")],
            "paths": {"nexum-client": [str(CLIENT / "src" / "index.ts")]},
        },
        "include": [],
        "files": ["readme.ts"],
    }
    (tmp_path / "tsconfig.json").write_text(json.dumps(tsconfig))
    tsc = CLIENT / "node_modules" / ".bin" / "tsc"
    done = subprocess.run(
        [str(tsc), "-p", str(tmp_path / "tsconfig.json")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"the README's examples do not type-check:\n{done.stdout}{done.stderr}"


def types_only(generated: str) -> list[str]:
    """The generated declarations without their doc comments: the schema's integer formats and ranges,
    which those comments show, follow the database backend (int64 on SQLite, not on PostgreSQL)."""
    return re.sub(r"/\*\*.*?\*/", " ", generated, flags=re.S).split()


def test_the_node_suite_passes_against_a_live_server(built_client, live_server, world):
    from verification_app.runner import workspace_folder

    env = {
        **os.environ,
        "NEXUM_URL": live_server.url,
        "NEXUM_AGENT_TOKEN": world["agent"],
        "NEXUM_OPERATOR_TOKEN": world["operator"],
        "NEXUM_WORKSPACE": str(workspace_folder(str(world["project"].id))),
    }
    output = run([str(NODE), "--test", "--test-reporter=tap", "dist/test/"], env=env)
    summary = re.findall(r"^# (tests|pass|fail|skipped) (\d+)$", output, re.M)
    counts = {name: int(count) for name, count in summary}
    assert counts["fail"] == 0 and counts["skipped"] == 0, output
    assert counts["pass"] == counts["tests"] >= 25, output  # the live tests ran, none skipped
