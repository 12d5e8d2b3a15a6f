"""The embedded default's database backend (hikyaku/sqlite3/base.py)."""
