"""The SQLite engine: node state in one database file (one server, or several gunicorn workers on one host)."""
