"""the response cache: its switch per key or account (limits.cache), and what hits saved
(ledger.saved_nanos; cache_hits and saved_nanos in every rollup)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# The rollups of 0006 and 0008 (tables.ROLLUPS): no row before this one was a cache hit, so their
# new measures start at 0.
ROLLUPS = ("usage_monthly", "usage_monthly_user_totals", "usage_monthly_users", "usage_daily_models",
           "usage_daily_keys", "usage_daily", "usage_daily_users", "usage_hourly_models", "usage_hourly",
           "usage_hourly_users")
MEASURES = ("cache_hits", "saved_nanos")


def upgrade() -> None:
    # Null: the subject says nothing of the cache (it serves it whenever the gateway has one).
    op.add_column("limits", sa.Column("cache", sa.Boolean(), nullable=True))
    op.add_column("ledger", sa.Column("saved_nanos", sa.BigInteger(), nullable=True))
    for table in ROLLUPS:
        for measure in MEASURES:
            op.add_column(table, sa.Column(measure, sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    for table in ROLLUPS:
        with op.batch_alter_table(table) as batch:
            for measure in MEASURES:
                batch.drop_column(measure)
    with op.batch_alter_table("ledger") as batch:
        batch.drop_column("saved_nanos")
    with op.batch_alter_table("limits") as batch:
        batch.drop_column("cache")
