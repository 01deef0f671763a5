"""Create or update the least-privilege PostgreSQL runtime role (see ``nexum.eventstore.roles``).

Run it as the owner (the role that ran ``migrate``), after every ``migrate``::

    NEXUM_APP_PASSWORD=… python manage.py nexum_db_roles --runtime-role nexum_app \
        --password-env NEXUM_APP_PASSWORD
    python manage.py nexum_db_roles --runtime-role nexum_app --print-sql   # show the SQL, change nothing
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections, transaction

from nexum.eventstore.roles import (
    EVENT_TABLE,
    MIGRATIONS_TABLE,
    ROLE_NAME,
    Statement,
    refusal,
    runtime_role_statements,
)


class Command(BaseCommand):
    help = "Create or update the least-privilege PostgreSQL role the service runs as (run as the owner)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runtime-role", required=True, help="the role's name, e.g. nexum_app")
        parser.add_argument(
            "--password-env",
            help="set the role's password from this environment variable (never from the command line)",
        )
        parser.add_argument("--print-sql", action="store_true", help="print the SQL and change nothing")
        parser.add_argument("--database", default="default", help="the database alias (default: default)")

    def handle(self, *args: Any, **options: Any) -> None:
        role: str = options["runtime_role"]
        connection = connections[options["database"]]
        if connection.vendor != "postgresql":
            raise CommandError("database roles are a PostgreSQL feature; SQLite has a single user")
        if not ROLE_NAME.fullmatch(role):
            raise CommandError(f"{role!r} is not a plain role name ([a-z_][a-z0-9_]*, at most 63 characters)")
        password = None
        if options["password_env"]:
            password = os.environ.get(options["password_env"])
            if not password:
                raise CommandError(f"the environment variable {options['password_env']} is empty or unset")
        with connection.cursor() as cursor:
            reason = refusal(cursor, role)
            if reason is not None:
                raise CommandError(f"refusing to use {role} as the runtime role: {reason}")
            cursor.execute("SELECT current_database(), current_schema()")
            database, schema = cursor.fetchone()
            tables = connection.introspection.table_names(cursor)
        statements = runtime_role_statements(
            role=role, database=database, schema=schema, tables=tables, password=password
        )
        if options["print_sql"]:
            for statement in statements:
                self.stdout.write(_printable(statement) + ";")
            return
        with transaction.atomic(using=options["database"]), connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement.sql, list(statement.params) or None)
        others = len(set(tables) - {EVENT_TABLE, MIGRATIONS_TABLE})
        self.stdout.write(
            f"runtime role {role}: SELECT, INSERT on the event log; read and write on {others} other tables;"
            f" owns nothing. Run the service with DATABASE_URL=postgres://{role}:…@host/{database}"
        )


def _printable(statement: Statement) -> str:
    return statement.sql.replace("%s", "'<password>'") if statement.params else statement.sql
