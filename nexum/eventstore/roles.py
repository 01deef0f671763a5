"""The least-privilege runtime role of a PostgreSQL deployment (issue 12, SPEC E4).

Two roles. The owner runs migrations (and ``rebuild_projections``, ``flush``): it owns every table and the
append-only triggers. The runtime role is what the web server and the workers connect as: it may connect,
read and append to the event log (SELECT, INSERT, the sequences; a project's append lock is an advisory
lock, which needs no privilege), read and write every other table (projections keep the read
models in the append's transaction; sessions, the admin log), and read ``django_migrations``. It holds no
UPDATE, DELETE or TRUNCATE on the log, owns nothing (so it cannot ALTER a table, drop or disable a trigger),
is neither superuser (so it cannot set ``session_replication_role``) nor able to create roles or databases,
and is not a member of the owner role. The TRUNCATE guard honours the ``nexum.event_maintenance`` flag only
for the owner (migration 0003), so setting the flag gains it nothing.

``runtime_role_statements`` is the SQL, in order; ``refusal`` says why an existing role cannot be made the
runtime role. Run again after every ``migrate``: grants are reset, then given on the tables that exist now.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

EVENT_TABLE = "nexum_event"
MIGRATIONS_TABLE = "django_migrations"
ROLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@dataclass(frozen=True)
class Statement:
    sql: str
    params: tuple[Any, ...] = ()


def quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def runtime_role_statements(
    *, role: str, database: str, schema: str, tables: Sequence[str], password: str | None = None
) -> list[Statement]:
    """The SQL that creates (if missing) and confines the runtime ``role``; ``password`` is passed as a
    parameter, never spliced into the text."""
    if not ROLE_NAME.fullmatch(role):
        raise ValueError(f"{role!r} is not a plain role name ([a-z_][a-z0-9_]*, at most 63 characters)")
    name, where = quote(role), quote(schema)
    others = [table for table in sorted(tables) if table not in (EVENT_TABLE, MIGRATIONS_TABLE)]
    statements = [
        Statement(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN"
            f" CREATE ROLE {name} LOGIN; END IF; END $$"
        ),
        Statement(
            f"ALTER ROLE {name} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"
            + (" PASSWORD %s" if password is not None else ""),
            (password,) if password is not None else (),
        ),
        Statement(f"REVOKE ALL ON ALL TABLES IN SCHEMA {where} FROM {name}"),
        Statement(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA {where} FROM {name}"),
        Statement(f"GRANT CONNECT ON DATABASE {quote(database)} TO {name}"),
        Statement(f"GRANT USAGE ON SCHEMA {where} TO {name}"),
        Statement(f"GRANT SELECT, INSERT ON TABLE {where}.{quote(EVENT_TABLE)} TO {name}"),
        Statement(f"GRANT SELECT ON TABLE {where}.{quote(MIGRATIONS_TABLE)} TO {name}"),
        Statement(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {where} TO {name}"),
    ]
    if others:
        listed = ", ".join(f"{where}.{quote(table)}" for table in others)
        statements.append(Statement(f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE {listed} TO {name}"))
    return statements


def refusal(cursor: Any, role: str) -> str | None:
    """Why ``role`` cannot serve as the runtime role (``None``: it can): it is the user running this, the
    log's owner or a member of it, a superuser, or it owns something in this database."""
    cursor.execute(
        "SELECT current_user, pg_get_userbyid(relowner) FROM pg_class WHERE oid = to_regclass(%s)",
        [EVENT_TABLE],
    )
    found = cursor.fetchone()
    if found is None:
        return f"there is no {EVENT_TABLE} table: run migrate (as the owner) first"
    current, owner = found
    if role in (current, owner):
        return f"{role} is the owner ({owner}) or the user running this command ({current})"
    cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", [role])
    existing = cursor.fetchone()
    if existing is None:
        return None
    if existing[0]:
        return f"{role} is a superuser"
    cursor.execute("SELECT pg_has_role(%s, %s, 'MEMBER')", [role, owner])
    if cursor.fetchone()[0]:
        return f"{role} is a member of the owner role {owner} and would hold its rights"
    cursor.execute(
        "WITH r AS (SELECT oid FROM pg_roles WHERE rolname = %s)"
        " SELECT relname FROM pg_class WHERE relowner = (SELECT oid FROM r)"
        " UNION ALL SELECT proname FROM pg_proc WHERE proowner = (SELECT oid FROM r)"
        " UNION ALL SELECT nspname FROM pg_namespace WHERE nspowner = (SELECT oid FROM r)"
        " ORDER BY 1 LIMIT 5",
        [role],
    )
    owned = [row[0] for row in cursor.fetchall()]
    if owned:
        return f"{role} owns {', '.join(owned)} in this database; an owner can alter them"
    return None
