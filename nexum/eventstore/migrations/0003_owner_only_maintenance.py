"""Only the log's owner may touch it beyond appending (PostgreSQL; issue 12, SPEC E4).

1. The TRUNCATE guard honours ``nexum.event_maintenance = 'on'`` only when the current user is the table's
   owner (or a member of the owner role): any role can set a custom setting, so the flag alone proved
   nothing. Its functions pin ``search_path`` so a caller cannot shadow what they call.
2. ``nexum_event_lock()``, a SECURITY DEFINER function owned by the owner, takes the append lock
   (``LOCK TABLE nexum_event IN EXCLUSIVE MODE``). PostgreSQL lets only roles with UPDATE, DELETE or
   TRUNCATE on a table take that lock mode; through the function the runtime role serializes its appends
   while holding none of those privileges. EXECUTE is revoked from PUBLIC; ``nexum_db_roles`` grants it to
   the runtime role.

SQLite has no roles: nothing changes there.
"""

from django.db import migrations

TRUNCATE_GUARD = """
CREATE OR REPLACE FUNCTION nexum_event_refuse_truncate() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF coalesce(current_setting('nexum.event_maintenance', true), '') = 'on'
       AND pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = TG_RELID), 'MEMBER') THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'nexum_event is append-only: TRUNCATE refused' USING ERRCODE = 'insufficient_privilege';
END;
$$;
"""

LOCK_FUNCTION = """
CREATE OR REPLACE FUNCTION nexum_event_lock() RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    LOCK TABLE {table} IN EXCLUSIVE MODE;
END;
$$;
REVOKE ALL ON FUNCTION nexum_event_lock() FROM PUBLIC;
"""

PREVIOUS_TRUNCATE_GUARD = """
CREATE OR REPLACE FUNCTION nexum_event_refuse_truncate() RETURNS trigger AS $$
BEGIN
    IF coalesce(current_setting('nexum.event_maintenance', true), '') <> 'on' THEN
        RAISE EXCEPTION 'nexum_event is append-only: TRUNCATE refused' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
DROP FUNCTION IF EXISTS nexum_event_lock();
"""


def forward(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        schema = cursor.fetchone()[0]
    table = f"{connection.ops.quote_name(schema)}.{connection.ops.quote_name('nexum_event')}"
    schema_editor.execute(TRUNCATE_GUARD, params=None)
    schema_editor.execute(LOCK_FUNCTION.format(table=table), params=None)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PREVIOUS_TRUNCATE_GUARD, params=None)


class Migration(migrations.Migration):
    dependencies = [("eventstore", "0002_append_only_triggers")]
    operations = [migrations.RunPython(forward, backward)]
