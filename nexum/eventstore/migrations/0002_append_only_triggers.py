"""The database itself refuses to change or remove an event (SPEC E4).

PostgreSQL: row triggers refuse UPDATE and DELETE, always; a statement trigger refuses TRUNCATE unless the
session set ``nexum.event_maintenance = 'on'`` (only the ``flush`` command does). SQLite: UPDATE is always
refused; DELETE unless the connection's ``nexum_event_maintenance()`` returns 1 (see config/dbbackends).
"""

from django.db import migrations

POSTGRES_FORWARD = """
CREATE OR REPLACE FUNCTION nexum_event_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'nexum_event is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION nexum_event_refuse_truncate() RETURNS trigger AS $$
BEGIN
    IF coalesce(current_setting('nexum.event_maintenance', true), '') <> 'on' THEN
        RAISE EXCEPTION 'nexum_event is append-only: TRUNCATE refused' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER nexum_event_no_update_or_delete BEFORE UPDATE OR DELETE ON nexum_event
    FOR EACH ROW EXECUTE FUNCTION nexum_event_refuse_change();
CREATE TRIGGER nexum_event_no_truncate BEFORE TRUNCATE ON nexum_event
    FOR EACH STATEMENT EXECUTE FUNCTION nexum_event_refuse_truncate();
"""

POSTGRES_BACKWARD = """
DROP TRIGGER IF EXISTS nexum_event_no_update_or_delete ON nexum_event;
DROP TRIGGER IF EXISTS nexum_event_no_truncate ON nexum_event;
DROP FUNCTION IF EXISTS nexum_event_refuse_change();
DROP FUNCTION IF EXISTS nexum_event_refuse_truncate();
"""

SQLITE_FORWARD = [
    """CREATE TRIGGER nexum_event_no_update BEFORE UPDATE ON nexum_event
       BEGIN SELECT RAISE(ABORT, 'nexum_event is append-only: UPDATE refused'); END""",
    """CREATE TRIGGER nexum_event_no_delete BEFORE DELETE ON nexum_event
       WHEN nexum_event_maintenance() = 0
       BEGIN SELECT RAISE(ABORT, 'nexum_event is append-only: DELETE refused'); END""",
]

SQLITE_BACKWARD = [
    "DROP TRIGGER IF EXISTS nexum_event_no_update",
    "DROP TRIGGER IF EXISTS nexum_event_no_delete",
]


def forward(apps, schema_editor):
    _run(schema_editor, [POSTGRES_FORWARD] if _is_postgres(schema_editor) else SQLITE_FORWARD)


def backward(apps, schema_editor):
    _run(schema_editor, [POSTGRES_BACKWARD] if _is_postgres(schema_editor) else SQLITE_BACKWARD)


def _is_postgres(schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor not in ("postgresql", "sqlite"):
        raise RuntimeError(f"Nexum supports PostgreSQL and SQLite, not {vendor}")
    return vendor == "postgresql"


def _run(schema_editor, statements):
    for statement in statements:
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("eventstore", "0001_initial")]
    operations = [migrations.RunPython(forward, backward)]
