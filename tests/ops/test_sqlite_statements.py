"""The embedded default's statements: placeholders converted once per text
(hikyaku/sqlite3/base.py) read exactly as Django's conversion does, however often a text runs."""

import pytest
from django.db import connection

from tests.backends import sqlite_suite_only

pytestmark = [
    sqlite_suite_only("the conversion belongs to the SQLite backend"),
    pytest.mark.django_db,
]


def test_a_statement_run_again_binds_its_new_values_and_keeps_its_literal_percents():
    with connection.cursor() as cursor:
        for value in ("first", "second", "first"):
            cursor.execute("SELECT '%%s', %s, '100%%'", [value])
            assert cursor.fetchone() == ("%s", value, "100%")


def test_named_parameters_still_bind_by_name():
    with connection.cursor() as cursor:
        cursor.execute("SELECT %(b)s, %(a)s", {"a": 1, "b": 2})
        assert cursor.fetchone() == (2, 1)
