"""Hand-written statements for the hot paths (send, ack), portable across Postgres and SQLite.

The ORM costs ~0.15–0.4 ms of CPU per query to compile on these machines, several times the
database round trip, and a send or an ack is only four or five statements. These helpers keep
the SQL plain and let Django's own field adapters (`get_db_prep_save`) and converters
(`Model.objects.raw`) handle types, so values read and written here are identical to what the
ORM would read and write. Cold paths keep using the ORM.
"""

from __future__ import annotations

import re
import sys
import threading
from functools import cache
from typing import Any, TypeVar

import orjson
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import AutoField, BigAutoField, Field, JSONField, Model
from django.db.models.base import DEFERRED, ModelState
from django.db.models.fields.related_descriptors import (
    ForeignKeyDeferredAttribute,
    ForwardManyToOneDescriptor,
)
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init

M = TypeVar("M", bound=Model)


def lock_clause(*, no_key: bool = False) -> str:
    """Row-lock suffix: Postgres locks rows; SQLite's write transactions are exclusive."""
    if connection.vendor != "postgresql":
        return ""
    return " FOR NO KEY UPDATE" if no_key else " FOR UPDATE"


# The cursor this thread keeps for its Postgres connection (`one`).
_held = threading.local()


def one(sql: str, params: list[Any]) -> tuple | None:
    """Run one statement; its first row, or None.

    On Postgres it runs on a cursor this thread keeps for as long as its connection lives:
    Django's cursor per statement (a new psycopg cursor, three wrappers) costs about a
    quarter of the statement's CPU in the web process (docs/MEASUREMENTS.md, "Where a send's
    CPU goes"). Errors are Django's, as from its cursor. Whenever Django must see the
    statement — queries logged (DEBUG, a test counting them), an execute wrapper installed —
    or on SQLite, it takes Django's cursor."""
    return _run(sql, params, all_rows=False)


def many(sql: str, params: list[Any]) -> list[tuple]:
    """Run one statement as `one` does; all its rows."""
    return _run(sql, params, all_rows=True)


def _run(sql: str, params: list[Any], *, all_rows: bool) -> Any:
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor != "postgresql" or db.queries_logged or db.execute_wrappers:
        with db.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if all_rows else cursor.fetchone()
    # What Django's `cursor()` and `execute()` do before running a statement.
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    db.validate_no_broken_transaction()
    raw = db.connection
    cursor = getattr(_held, "cursor", None)
    with db.wrap_database_errors:
        if cursor is None or cursor.connection is not raw or cursor.closed:
            cursor = _held.cursor = db.create_cursor()
            _compiled_timestamps(db, cursor)
        # psycopg keeps what it learnt about the parameters' types when a cursor runs the same
        # string object again; a statement's text is built anew per call, so one copy is kept
        # per text (bounded: values are always parameters).
        cursor.execute(sys.intern(sql), params)
        return cursor.fetchall() if all_rows else cursor.fetchone()


def _compiled_timestamps(db: Any, cursor: Any) -> None:
    """Let `cursor` read timestamps with psycopg's compiled loader. Django registers its own,
    a subclass of psycopg's pure-Python one that sets Django's time zone on each value: about
    4 µs of CPU a timestamp, and a page of 100 tasks holds a few hundred (docs/MEASUREMENTS.md,
    "Reading rows: timestamps and JSON"). When Django's zone and the session's are both UTC,
    the compiled loader builds the very same values (with the same `datetime.timezone.utc`);
    otherwise Django's stays."""
    from datetime import UTC

    import psycopg
    from psycopg.pq import Format

    if db.timezone is not UTC or db.connection.info.parameter_status("TimeZone") != "UTC":
        return
    oid = psycopg.adapters.types["timestamptz"].oid
    cursor.adapters.register_loader(oid, psycopg.adapters.get_loader(oid, Format.TEXT))


@cache
def _insert_sql(model: type[Model], with_pk: bool) -> tuple[str, tuple]:
    meta = model._meta
    fields = tuple(f for f in meta.concrete_fields if with_pk or not f.primary_key)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({placeholders})"
    if not with_pk:
        sql += f" RETURNING {quote(meta.pk.column)}"
    return sql, fields


def insert(obj: M) -> M:
    """INSERT one unsaved instance; an auto primary key is read back with RETURNING."""
    return Insert(obj).run()


def save_params(obj: Model, fields: Any) -> list[Any]:
    """The values of `fields` of `obj` as the database takes them (`get_db_prep_save`), the
    connection looked up once rather than once per value (every `connection.x` is a lookup
    of this thread's connection)."""
    db = connections[DEFAULT_DB_ALIAS]
    return [f.get_db_prep_save(getattr(obj, f.attname), db) for f in fields]


class Insert:
    """One unsaved instance's INSERT with its values adapted now, to run later (`run`). A
    write transaction adapts its rows before it begins: on SQLite it holds the database's
    only write lock, and adapting values field by field was about a sixth of a send's time
    under it (docs/ARCHITECTURE.md, "SQLite writers"). The instance must not change in
    between."""

    __slots__ = ("obj", "sql", "params", "with_pk")

    def __init__(self, obj: Model) -> None:
        self.obj = obj
        self.with_pk = not isinstance(obj._meta.pk, AutoField | BigAutoField)
        self.sql, fields = _insert_sql(type(obj), self.with_pk)
        self.params = save_params(obj, fields)

    def run(self) -> Any:
        obj = self.obj
        with connection.cursor() as cursor:
            cursor.execute(self.sql, self.params)
            if not self.with_pk:
                obj.pk = cursor.fetchone()[0]
        obj._state.adding = False
        obj._state.db = DEFAULT_DB_ALIAS
        return obj


def insert_select(obj: Model, *, source: str) -> tuple[str, list[Any]]:
    """`INSERT INTO <table> (<columns>) SELECT <values> FROM <source>` for one unsaved
    instance (an auto primary key is left to the database): the building block of a
    data-modifying CTE that inserts only when `source` yields a row."""
    with_pk = not isinstance(obj._meta.pk, AutoField | BigAutoField)
    _, fields = _insert_sql(type(obj), with_pk)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    values = ", ".join(["%s"] * len(fields))
    params = save_params(obj, fields)
    return (
        f"INSERT INTO {quote(obj._meta.db_table)} ({columns}) SELECT {values} FROM {source}",
        params,
    )


@cache
def _reader(model: type[Model], fields: tuple[str, ...]):
    """Per-column converters for `fields` of `model`, computed once (RawQuerySet would
    introspect the cursor and look them up again on every call)."""
    meta = model._meta
    order = [f.name for f in meta.concrete_fields]
    if [order.index(name) for name in fields] != sorted(order.index(name) for name in fields):
        # Model.from_db (build) maps a partial row onto the concrete fields in model order.
        raise ValueError(f"{model.__name__} fields must be in model order: {fields}")
    columns = []
    for name in fields:
        field = meta.get_field(name)
        expression = field.get_col(meta.db_table)
        converters = connection.ops.get_db_converters(expression) + field.get_db_converters(
            connection
        )
        columns.append(([_faster(field, c) for c in converters], expression))
    attnames = [meta.get_field(name).attname for name in fields]
    return attnames, columns


# 19 digits in a row: maybe an integer beyond 64 bits, which orjson would read as a float.
_LONG_NUMBER = re.compile(r"[0-9]{19}")


def _faster(field: Field, converter: Any) -> Any:
    """`converter`, or for a JSONField's own one (no custom decoder), the same decoding by
    orjson, several times faster than `json` (docs/MEASUREMENTS.md, "Reading rows: timestamps
    and JSON"). What orjson would read otherwise than `json` — text holding a long run of
    digits, which may be an integer beyond 64 bits — and what it refuses (a number beyond a
    float's range, text that is not JSON) go to Django's converter, so every value comes out
    as Django would give it."""
    if (
        not isinstance(field, JSONField)
        or field.decoder is not None
        or getattr(converter, "__func__", None) is not JSONField.from_db_value
    ):
        return converter

    def from_db_value(value: Any, expression: Any, connection: Any) -> Any:
        if isinstance(value, str) and not _LONG_NUMBER.search(value):
            try:
                return orjson.loads(value)
            except orjson.JSONDecodeError:
                pass
        return converter(value, expression, connection)

    return from_db_value


def convert(model: type[Model], fields: tuple[str, ...], values: tuple) -> dict[str, Any]:
    """Database values of `fields` (in order) as Python values, by attname."""
    attnames, columns = _reader(model, fields)
    out = {}
    for attname, (converters, expression), value in zip(attnames, columns, values, strict=False):
        for converter in converters:
            value = converter(value, expression, connection)
        out[attname] = value
    return out


@cache
def _plain_attributes(model: type[Model], fields: tuple[str, ...]) -> bool:
    """Whether setting each of `fields` on a new instance of `model` only stores its value
    (the class attribute is Django's plain DeferredAttribute, or the foreign key's, which
    also forgets a cached related object a new instance does not have)."""
    meta = model._meta
    for name in fields:
        descriptor = model.__dict__.get(meta.get_field(name).attname)
        if type(descriptor) not in (DeferredAttribute, ForeignKeyDeferredAttribute):
            return False
    return True


def build(model: type[M], fields: tuple[str, ...], values: tuple) -> M:
    """A model instance from a row holding exactly `fields`; other fields stay deferred.

    The instance is what `Model.from_db` builds, without running `Model.__init__` (half the
    cost of building a task, docs/MEASUREMENTS.md, Streams): its values go straight into the
    instance's dict, which is all `__init__` does with them for plain fields. A model with
    init signal receivers or a field with a descriptor of its own takes `from_db`."""
    converted = convert(model, fields, values)
    if (
        not _plain_attributes(model, fields)
        or pre_init.has_listeners(model)
        or post_init.has_listeners(model)
    ):
        # The one database's alias, not `connection.alias`: on an event loop every attribute
        # of `connection` is a context-local lookup (messaging.stream reads rows there).
        return model.from_db(DEFAULT_DB_ALIAS, list(converted), list(converted.values()))
    state = ModelState()
    state.adding = False
    state.db = DEFAULT_DB_ALIAS
    obj = model.__new__(model)
    converted["_state"] = state
    obj.__dict__ = converted
    return obj


# One concrete field of a model, as `new` fills it: name, attname, and for a foreign key the
# related model and the attname of the key it holds (else None, None).
_Slot = tuple[str, str, type[Model] | None, str | None, Field]


@cache
def _new_plan(model: type[Model]) -> tuple[tuple[_Slot, ...], frozenset[str]] | None:
    """How `new` fills an instance of `model`, or None when `model(**values)` does more than
    store values: a field without a column, a descriptor of its own, a relation other than a
    plain foreign key."""
    meta = model._meta
    if list(meta.fields) != list(meta.concrete_fields):
        return None
    slots: list[_Slot] = []
    for field in meta.concrete_fields:
        if field.generated:
            return None
        descriptor = type(model.__dict__.get(field.attname))
        if not field.is_relation:
            if descriptor is not DeferredAttribute:
                return None
            slots.append((field.name, field.attname, None, None, field))
            continue
        related = field.related_fields
        if (
            not field.many_to_one
            or descriptor is not ForeignKeyDeferredAttribute
            or type(model.__dict__.get(field.name)) is not ForwardManyToOneDescriptor
            or len(related) != 1
        ):
            return None
        remote = field.remote_field.model._meta.concrete_model
        slots.append((field.name, field.attname, remote, related[0][1].attname, field))
    names = frozenset(n for slot in slots for n in slot[:2])
    return tuple(slots), names


def new(model: type[M], **values: Any) -> M:
    """A new, unsaved instance: what `model(**values)` builds, without running
    `Model.__init__` (a send builds two, docs/MEASUREMENTS.md, "Where a send's CPU goes").

    A field's value, or a related instance under the relation's name (the key is taken from
    it and the instance cached, as its descriptor would), or the field's default, goes
    straight into the instance's dict. Anything `__init__` would do more — init signal
    receivers, database routers, a related instance of another database or not saved, a
    property or unknown name among `values`, a model with fields `_new_plan` does not
    fill — is left to `model(**values)`."""
    planned = _new_plan(model)
    if (
        planned is None
        or not planned[1].issuperset(values)
        or pre_init.has_listeners(model)
        or post_init.has_listeners(model)
        or settings.DATABASE_ROUTERS
    ):
        return model(**values)
    state = ModelState()
    filled: dict[str, Any] = {"_state": state}
    cached: dict[str, Any] = {}
    for name, attname, remote, key, field in planned[0]:
        if remote is not None and name in values:
            related = values[name]
            if related is None:
                filled[attname] = None
            elif (
                attname in values
                or not isinstance(related, remote)
                or related._state.db != DEFAULT_DB_ALIAS
            ):
                return model(**values)
            else:
                filled[attname] = getattr(related, key)
                state.db = DEFAULT_DB_ALIAS
            cached[name] = related
        elif attname in values:
            value = values[attname]
            if value is DEFERRED:
                return model(**values)
            filled[attname] = value
        else:
            filled[attname] = field.get_default()
    if cached:
        state.fields_cache = cached
    obj = model.__new__(model)
    obj.__dict__ = filled
    return obj


def first(model: type[M], fields: tuple[str, ...], sql: str, params: list[Any]) -> M | None:
    """The first row of a SELECT of exactly `fields` (in that order) as an instance."""
    row = one(sql, params)
    return build(model, fields, row) if row is not None else None


@cache
def select_list(model: type[Model], fields: tuple[str, ...]) -> str:
    """`fields` as table-qualified columns, safe in joins (Postgres and SQLite quote names
    alike, so one string serves both)."""
    return columns(connection.ops.quote_name(model._meta.db_table), model, fields)


@cache
def columns(alias: str, model: type[Model], fields: tuple[str, ...]) -> str:
    """`fields` as columns of `model`'s table under the name `alias` in the statement (an
    alias, for a table joined twice: a task's sender and recipient)."""
    quote = connection.ops.quote_name
    return ", ".join(f"{alias}.{quote(model._meta.get_field(f).column)}" for f in fields)


def build_joined(
    model: type[M],
    fields: tuple[str, ...],
    values: tuple | list,
    joined: tuple[tuple[str, type[Model], tuple[str, ...]], ...],
) -> M:
    """An instance of `model` from a row that holds `fields`, then, for each (relation,
    related model, its fields) of `joined` in order, the related row of a LEFT JOIN, set on
    the relation (None when the row's first value, its key, is NULL)."""
    end = len(fields)
    obj = build(model, fields, values[:end])
    for name, related, related_fields in joined:
        start, end = end, end + len(related_fields)
        part = values[start:end]
        setattr(obj, name, build(related, related_fields, part) if part[0] is not None else None)
    return obj


def prep(model: type[Model], field: str, value: Any) -> Any:
    """A value as the database expects it for this field (UUIDs on SQLite are hex, etc.)."""
    return model._meta.get_field(field).get_db_prep_value(value, connection)
