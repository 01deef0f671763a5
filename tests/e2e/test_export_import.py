"""Export and import across installations and databases (issue 27): a project built on SQLite is exported,
imported into an empty PostgreSQL database and exported from there into an empty SQLite one. At each stop the
chain verifies, every stored context replays to its digest and the read models as of the exported head
equal the source's. Each installation is its own process (``manage.py`` under its own DATABASE_URL and data
folder), as on two machines."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.installations import Installation, new_postgres_database

pytestmark = pytest.mark.postgres


@pytest.fixture
def empty_postgres() -> Iterator[str]:
    with new_postgres_database("portable") as url:
        yield url


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
    exported = origin.manage("nexum_export", "acme").stdout
    assert json.loads(exported.splitlines()[0])["pruned"] == 1  # the context retention pruned, kept as a row
    first.write_text(_pruning_the_artifact(exported))

    postgres = Installation(tmp_path / "postgres", empty_postgres)
    _arrive(postgres, first, source, revoked=1)
    second = tmp_path / "acme-from-postgres.nexum.jsonl"
    second.write_text(postgres.manage("nexum_export", "acme").stdout)
    assert '"blob":"artifact"' in second.read_text()  # PostgreSQL never had it: exported as pruned again

    back = Installation(tmp_path / "back", None)
    # The token was revoked on arrival at PostgreSQL: that revocation travels on in the log.
    _arrive(back, second, source, revoked=0)
