"""Export and import across installations and databases (issue 27): a project built on SQLite is exported,
imported into an empty PostgreSQL database and exported from there into an empty SQLite one. At each stop the
chain verifies, every stored context replays to its digest and the read models as of the exported head
equal the source's. Each installation is its own process (``manage.py`` under its own DATABASE_URL and data
folder), as on two machines."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
POSTGRES = os.environ.get("NEXUM_TEST_POSTGRES_ADMIN", "postgres://postgres@127.0.0.1:5432/postgres")
pytestmark = pytest.mark.postgres


def _postgres_reachable() -> bool:
    try:
        psycopg.connect(POSTGRES, connect_timeout=3).close()
    except psycopg.OperationalError:
        return False
    return True


@pytest.fixture
def empty_postgres() -> Iterator[str]:
    """A new PostgreSQL database (unique name), dropped afterwards."""
    if not _postgres_reachable():
        pytest.skip(f"no PostgreSQL at {POSTGRES}")
    name = f"nexum_test_portable_{secrets.token_hex(4)}"
    with psycopg.connect(POSTGRES, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield POSTGRES.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Installation:
    """One installation: a database and a data folder (the artifact store), run by subprocess."""

    def __init__(self, data_dir: Path, database_url: str | None) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "NEXUM_DATA_DIR": str(data_dir), "NEXUM_EMBEDDER": "none"}
        self.env.pop("DATABASE_URL", None)
        if database_url is not None:
            self.env["DATABASE_URL"] = database_url

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=300
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{args} exited {done.returncode}: {done.stderr[-3000:]}")
        return done

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("manage.py", *args, check=check)

    def snapshot(self, slug: str, until: int | None = None) -> dict:
        args = ["tests/e2e/portable_world.py", "snapshot", slug] + ([str(until)] if until else [])
        return json.loads(self.run(*args).stdout)


def _pruning_the_artifact(export: str) -> str:
    """The export as an installation whose retention pruned the artifact would write it: a pruned line with
    its digest instead of its bytes. An import accepts it (nothing to store)."""
    lines = [json.loads(line) for line in export.splitlines()]
    artifacts = [index for index, line in enumerate(lines) if line.get("kind") == "artifact"]
    assert len(artifacts) == 1
    lines[artifacts[0]] = {"kind": "pruned", "blob": "artifact", "digest": lines[artifacts[0]]["digest"]}
    return "\n".join(json.dumps(line) for line in lines) + "\n"


def _arrive(installation: Installation, export: Path, source: dict, *, revoked: int) -> None:
    installation.manage("migrate", "-v0")
    imported = installation.manage("nexum_import", str(export)).stdout
    assert f"{revoked} tokens revoked" in imported
    installation.manage("nexum_verify_log")
    here = installation.snapshot("acme", until=source["head"][0])
    assert here["replays"] and all(here["replays"].values())
    assert here["replays"] == source["replays"]
    assert here["tables"] == source["tables"]


def test_sqlite_to_postgres_and_back(tmp_path: Path, empty_postgres: str) -> None:
    origin = Installation(tmp_path / "origin", None)
    origin.manage("migrate", "-v0")
    origin.run("tests/e2e/portable_world.py", "build", "acme")
    source = origin.snapshot("acme")
    assert len(source["replays"]) >= 2 and all(source["replays"].values())
    first = tmp_path / "acme.nexum.jsonl"
    first.write_text(_pruning_the_artifact(origin.manage("nexum_export", "acme").stdout))

    postgres = Installation(tmp_path / "postgres", empty_postgres)
    _arrive(postgres, first, source, revoked=1)
    second = tmp_path / "acme-from-postgres.nexum.jsonl"
    second.write_text(postgres.manage("nexum_export", "acme").stdout)
    assert '"blob":"artifact"' in second.read_text()  # PostgreSQL never had it: exported as pruned again

    back = Installation(tmp_path / "back", None)
    # The token was revoked on arrival at PostgreSQL: that revocation travels on in the log.
    _arrive(back, second, source, revoked=0)
