"""Hand-written statements for the hot paths (send, ack), portable across Postgres and SQLite.

The ORM costs ~0.15–0.4 ms of CPU per query to compile on these machines, several times the
database round trip, and a send or an ack is only four or five statements. These helpers keep
the SQL plain and let Django's own field adapters (`get_db_prep_save`) and converters
(`Model.objects.raw`) handle types, so values read and written here are identical to what the
ORM would read and write. Cold paths keep using the ORM.
"""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar

from django.db import connection
from django.db.models import AutoField, BigAutoField, Model

M = TypeVar("M", bound=Model)


def lock_clause(*, no_key: bool = False) -> str:
    """Row-lock suffix: Postgres locks rows; SQLite's write transactions are exclusive."""
    if connection.vendor != "postgresql":
        return ""
    return " FOR NO KEY UPDATE" if no_key else " FOR UPDATE"


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
    with_pk = not isinstance(obj._meta.pk, AutoField | BigAutoField)
    sql, fields = _insert_sql(type(obj), with_pk)
    params = [f.get_db_prep_save(getattr(obj, f.attname), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        if not with_pk:
            obj.pk = cursor.fetchone()[0]
    obj._state.adding = False
    obj._state.db = connection.alias
    return obj


def update(obj: Model, fields: list[str]) -> None:
    """UPDATE these fields of a row already locked by the caller's transaction."""
    meta = obj._meta
    quote = connection.ops.quote_name
    model_fields = [meta.get_field(name) for name in fields]
    assignments = ", ".join(f"{quote(f.column)} = %s" for f in model_fields)
    params = [f.get_db_prep_save(getattr(obj, f.attname), connection) for f in model_fields]
    params.append(meta.pk.get_db_prep_value(obj.pk, connection))
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {quote(meta.pk.column)} = %s",
            params,
        )


def first(model: type[M], sql: str, params: list[Any]) -> M | None:
    """The first row of a raw SELECT as a model instance (deferred fields stay unloaded)."""
    for row in model.objects.raw(sql, params):
        return row
    return None


def prep(model: type[Model], field: str, value: Any) -> Any:
    """A value as the database expects it for this field (UUIDs on SQLite are hex, etc.)."""
    return model._meta.get_field(field).get_db_prep_value(value, connection)
