"""Read models kept by projections, installed explicitly by ``config.bootstrap`` (SPEC E5, E6).

A projection owns some tables and handles some event types. Handlers change rows only through the
``ReadModelRows`` they are given, by primary key: live appends get ``OrmRows``, which writes immediately
inside the append's transaction (a reader never sees an event without its read model or the reverse); a
rebuild gets ``BufferedRows``, which keeps every row in memory and writes each table once with
``bulk_create``, so replaying the log costs one pass over it, not one query per event.

Work that is cheaper for many events at once (embedding the texts of the items recorded) is ``defer``-red by
a handler and done by the projection's ``settle`` once per batch of events applied: once per append, once per
thousand events of a rebuild.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from typing import Any, ClassVar, Protocol

from django.db import connection, models, transaction

from nexum.core.events import DomainEvent
from nexum.eventstore import replica
from nexum.eventstore.reading import StoredEvent, iter_all

Row = dict[str, Any]


class ReadModelRows(Protocol):
    """Row operations by primary key; field names are attribute names (``project_id`` for a foreign key)."""

    def insert(self, model: type[models.Model], **fields: Any) -> None: ...

    def update(self, model: type[models.Model], pk: Any, **fields: Any) -> None: ...

    def get(self, model: type[models.Model], pk: Any) -> Row | None: ...

    def delete(self, model: type[models.Model], pk: Any) -> None: ...

    def insert_many(self, model: type[models.Model], rows: Sequence[Row]) -> None:
        """Insert many rows of one table at once (a fork's thousands of items: one write, not one each)."""
        ...

    def get_many(self, model: type[models.Model], pks: Iterable[Any]) -> dict[Any, Row]:
        """The rows found among ``pks``, by primary key (one read)."""
        ...


class OrmRows:
    """Writes through the ORM at once: used for live appends."""

    transient = False

    def insert(self, model: type[models.Model], **fields: Any) -> None:
        model._base_manager.create(**fields)

    def update(self, model: type[models.Model], pk: Any, **fields: Any) -> None:
        model._base_manager.filter(pk=pk).update(**fields)

    def get(self, model: type[models.Model], pk: Any) -> Row | None:
        return model._base_manager.filter(pk=pk).values(*_attnames(model)).first()

    def delete(self, model: type[models.Model], pk: Any) -> None:
        model._base_manager.filter(pk=pk).delete()

    def insert_many(self, model: type[models.Model], rows: Sequence[Row]) -> None:
        if rows:
            write = _copy_rows if connection.vendor == "postgresql" else _insert_rows
            write(model, list(rows))

    def get_many(self, model: type[models.Model], pks: Iterable[Any]) -> dict[Any, Row]:
        found = model._base_manager.filter(pk__in=list(pks)).values(*_attnames(model))
        return {row[model._meta.pk.attname]: row for row in found}


class BufferedRows:
    """Keeps rows in memory during a rebuild and writes each table once at the end. ``transient``: the rows
    are a past state's, rolled back after use (``state_as_of``), so work a reader can redo on demand for
    the few rows it reads (embedding texts) may be skipped."""

    def __init__(self, *, transient: bool = False) -> None:
        self._tables: dict[type[models.Model], dict[Any, Row]] = {}
        self.transient = transient

    def insert(self, model: type[models.Model], **fields: Any) -> None:
        pk = fields[model._meta.pk.attname]
        table = self._tables.setdefault(model, {})
        if pk in table:
            raise ValueError(f"{model.__name__} {pk} inserted twice during rebuild")
        table[pk] = fields

    def update(self, model: type[models.Model], pk: Any, **fields: Any) -> None:
        row = self._tables.get(model, {}).get(pk)
        if row is not None:
            row.update(fields)

    def get(self, model: type[models.Model], pk: Any) -> Row | None:
        row = self._tables.get(model, {}).get(pk)
        return None if row is None else {name: row.get(name) for name in _attnames(model)}

    def delete(self, model: type[models.Model], pk: Any) -> None:
        self._tables.get(model, {}).pop(pk, None)

    def insert_many(self, model: type[models.Model], rows: Sequence[Row]) -> None:
        for row in rows:
            self.insert(model, **row)

    def get_many(self, model: type[models.Model], pks: Iterable[Any]) -> dict[Any, Row]:
        found = (self.get(model, pk) for pk in pks)
        return {row[model._meta.pk.attname]: row for row in found if row is not None}

    def flush(self, order: Sequence[type[models.Model]]) -> None:
        """Write every buffered row, table by table in ``order`` (parents first)."""
        for model in order:
            rows = list(self._tables.get(model, {}).values())
            if rows:
                write = _copy_rows if connection.vendor == "postgresql" else _insert_rows
                write(model, rows)


def _column_values(model: type[models.Model], rows: list[Row]) -> tuple[list[str], Iterator[list[Any]]]:
    fields = model._meta.concrete_fields
    columns = [connection.ops.quote_name(field.column) for field in fields]

    def values(row: Row) -> list[Any]:
        return [row[field.attname] if field.attname in row else field.get_default() for field in fields]

    return columns, (values(row) for row in rows)


def _copy_rows(model: type[models.Model], rows: list[Row]) -> None:
    """PostgreSQL: one COPY per table; JSON columns are sent as JSON text."""
    columns, values = _column_values(model, rows)
    json_columns = [
        i for i, field in enumerate(model._meta.concrete_fields) if isinstance(field, models.JSONField)
    ]
    table = connection.ops.quote_name(model._meta.db_table)
    with (
        connection.cursor() as cursor,
        cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy,
    ):
        for row in values:
            for i in json_columns:
                row[i] = json.dumps(row[i])
            copy.write_row(row)


def _insert_rows(model: type[models.Model], rows: list[Row], rows_per_statement: int = 500) -> None:
    """SQLite: multi-row INSERTs of values prepared by their fields."""
    fields = model._meta.concrete_fields
    columns, values = _column_values(model, rows)
    placeholder = "(" + ", ".join(["%s"] * len(fields)) + ")"
    prepared = [
        [field.get_db_prep_save(value, connection) for field, value in zip(fields, row, strict=True)]
        for row in values
    ]
    with connection.cursor() as cursor:
        for start in range(0, len(prepared), rows_per_statement):
            chunk = prepared[start : start + rows_per_statement]
            cursor.execute(
                f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} ({', '.join(columns)}) "
                f"VALUES {', '.join([placeholder] * len(chunk))}",
                [value for row in chunk for value in row],
            )


@cache
def _attnames(model: type[models.Model]) -> tuple[str, ...]:
    return tuple(field.attname for field in model._meta.concrete_fields)


Handler = Callable[[Any, StoredEvent, ReadModelRows], None]


def handles(event_class: type[DomainEvent]) -> Callable[[Handler], Handler]:
    """Mark a projection method as the handler of one event class (its stored events, whatever their schema
    version: they are upcast to the class when read)."""
    if (
        not (isinstance(event_class, type) and issubclass(event_class, DomainEvent))
        or not event_class.event_type
    ):
        raise TypeError(f"@handles takes a registered event class, not {event_class!r}")

    def mark(method: Handler) -> Handler:
        method.handles_event_type = event_class.event_type  # type: ignore[attr-defined]
        return method

    return mark


_DEFERRED: ContextVar[dict[Projection, list[Any]] | None] = ContextVar("projection_deferred", default=None)


class Projection:
    """Subclasses list the ``models`` they own (parents first) and mark handlers with ``@handles``."""

    models: ClassVar[Sequence[type[models.Model]]] = ()
    _handlers: ClassVar[dict[str, Handler]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._handlers = {
            method.handles_event_type: method
            for klass in reversed(cls.__mro__)
            for method in vars(klass).values()
            if hasattr(method, "handles_event_type")
        }

    def event_types(self) -> frozenset[str]:
        return frozenset(self._handlers)

    def apply(self, stored: StoredEvent, rows: ReadModelRows) -> None:
        handler = self._handlers.get(stored.event_type)
        if handler is not None:
            handler(self, stored, rows)

    def defer(self, work: Any) -> None:
        """Leave ``work`` to ``settle``, called once when the batch of events being applied is done."""
        deferred = _DEFERRED.get()
        if deferred is None:
            raise RuntimeError("Projection.defer is for handlers, called by projections.apply")
        deferred.setdefault(self, []).append(work)

    def settle(self, deferred: list[Any], rows: ReadModelRows) -> None:
        """Do the work the handlers deferred during one batch (in order), with the same ``rows``."""


_installed: tuple[Projection, ...] = ()


def install(projection_classes: Sequence[type[Projection]]) -> None:
    """The projections every append applies, in order (a parent's before its children's): handed in once per
    process by ``config.bootstrap``, since this layer imports none of the apps that define them."""
    global _installed
    _installed = tuple(cls() for cls in projection_classes)
    _dispatch.cache_clear()


def registered() -> tuple[Projection, ...]:
    if not _installed:
        raise RuntimeError("no projection is installed: config.bootstrap runs when Django is ready")
    return _installed


@cache
def _dispatch() -> dict[str, tuple[Projection, ...]]:
    table: dict[str, list[Projection]] = {}
    for projection in registered():
        for name in projection.event_types():
            table.setdefault(name, []).append(projection)
    return {name: tuple(found) for name, found in table.items()}


_LIVE_ROWS = OrmRows()


def apply(stored_events: Iterable[StoredEvent], rows: ReadModelRows = _LIVE_ROWS) -> None:
    """Apply the events through their projections, then let each settle the work it deferred."""
    dispatch = _dispatch()
    deferred: dict[Projection, list[Any]] = {}
    token = _DEFERRED.set(deferred)
    try:
        for stored in stored_events:
            for projection in dispatch.get(stored.event_type, ()):
                projection.apply(stored, rows)
    finally:
        _DEFERRED.reset(token)
    for projection, work in deferred.items():
        projection.settle(work, rows)


def rebuild(*, until: int | None = None, progress: Callable[[int], None] | None = None) -> int:
    """Clear every read model and replay the log (up to ``until``) through the projections.

    Runs in one transaction: readers see the old read models until the rebuilt ones commit. Rows are
    built in memory and written table by table. Returns the number of events replayed through a projection.
    """
    with transaction.atomic():
        _clear_read_models()
        return _replay(until=until, progress=progress)


def _replay(
    *,
    until: int | None,
    progress: Callable[[int], None] | None = None,
    transient: bool = False,
    project_id: str | None = None,
) -> int:
    """Replay the log (up to ``until``; only ``project_id``'s events when given) into empty read models; the
    number of events replayed."""
    rows = BufferedRows(transient=transient)
    replayed = 0
    batch: list[StoredEvent] = []
    # Only events some projection handles: the others cannot change a read model.
    events = iter_all(until=until, chunk_size=5000, event_types=_dispatch(), project_id=project_id)
    for stored in events:
        batch.append(stored)
        if len(batch) == 1000:
            apply(batch, rows)
            replayed += len(batch)
            if progress:
                progress(len(batch))
            batch.clear()
    apply(batch, rows)
    replayed += len(batch)
    if progress and batch:
        progress(len(batch))
    rows.flush(_read_models())
    return replayed


def _read_models() -> list[type[models.Model]]:
    return [model for projection in registered() for model in projection.models]


def _clear_read_models() -> None:
    """Empty every read model: one TRUNCATE on PostgreSQL (no CASCADE: a foreign table is an error)."""
    if connection.vendor == "postgresql":
        tables = ", ".join(connection.ops.quote_name(model._meta.db_table) for model in _read_models())
        with connection.cursor() as cursor:
            # Django's foreign keys are deferred: settle pending checks, or TRUNCATE refuses.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(f"TRUNCATE {tables}")
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
    else:
        for model in reversed(_read_models()):
            model._base_manager.all().delete()


def _shadow_read_models() -> None:
    """PostgreSQL: an empty stand-in for every read model, for this transaction only. A temporary table of
    the same name hides the live one (the session's temporary schema is searched first), so the live tables
    are neither emptied nor locked: a TRUNCATE would hold every request that reads one until the block
    ends, and deadlock with a concurrent append."""
    with connection.cursor() as cursor:
        for model in _read_models():
            table = connection.ops.quote_name(model._meta.db_table)
            cursor.execute(f"CREATE TEMPORARY TABLE {table} (LIKE {table} INCLUDING ALL) ON COMMIT DROP")


@contextmanager
def state_as_of(position: int, *, project_id: str | None = None) -> Iterator[None]:
    """Inside the block, every read model shows the state as of log ``position``; afterwards, nothing changed.
    With ``project_id``, the project's state as of its event at ``position`` (only its events are replayed:
    another project's event below ``position`` may have committed after it).

    The rebuild happens in a transaction that is always rolled back, so the live read models are untouched
    (on PostgreSQL it fills temporary stand-ins, ``_shadow_read_models``: other requests go on meanwhile).
    It happens on the primary (a hot standby cannot create a temporary table), and so do the block's reads,
    even in a request that reads from the replica (whose answer then says it was read from the primary).
    """
    replica.note_read_from(replica.PRIMARY)
    with replica.reading_from(replica.PRIMARY), transaction.atomic():
        if connection.vendor == "postgresql":
            _shadow_read_models()
        else:
            _clear_read_models()
        _replay(until=position, transient=True, project_id=project_id)
        yield
        transaction.set_rollback(True)


def snapshot() -> dict[str, list[tuple[Any, ...]]]:
    """Every read model's rows, ordered by primary key: what 'rebuilt equals live' compares."""
    tables: dict[str, list[tuple[Any, ...]]] = {}
    for projection in registered():
        for model in projection.models:
            columns = [field.attname for field in model._meta.concrete_fields]
            tables[model._meta.db_table] = list(model._base_manager.order_by("pk").values_list(*columns))
    return tables
