"""The event log: the one home of message text, its history and status, in SQLite or
PostgreSQL. Every table, SQL statement and migration of it lives here."""
