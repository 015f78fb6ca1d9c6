"""Alembic migrations of the gateway's database; applied automatically when the gateway or its CLI
opens the database (gateway.database.prepare). docs/development.md tells how to add one."""
