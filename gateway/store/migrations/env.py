"""Alembic's entry point. The gateway runs it on its own open connection (store/database.py `upgrade`);
the `alembic` command line (e.g. `alembic revision --autogenerate -m "..."`, configured in
pyproject.toml) runs it against the configured database (GATEWAY_DATABASE_URL)."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import Connection

from gateway.store.tables import metadata


def run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        # Both databases roll DDL back with the transaction (SQLite too: gateway.database emits
        # its own BEGIN), so a failed migration leaves the schema as it was.
        transactional_ddl=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _standalone() -> None:
    from gateway.core import config
    from gateway.store import database

    engine = database.connect(config.load().database_url.get_secret_value())
    try:
        async with engine.begin() as connection:
            await connection.run_sync(run)
    finally:
        await engine.dispose()


connection = context.config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    asyncio.run(_standalone())
