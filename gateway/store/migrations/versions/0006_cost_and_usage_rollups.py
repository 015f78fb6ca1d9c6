"""ledger.cost_nanos (existing rows stay unpriced); usage rollups per hour, day and month, filled from the ledger

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MEASURES = ("requests", "estimated_requests", "prompt_tokens", "completion_tokens", "total_tokens",
            "cached_tokens", "reasoning_tokens", "cost_nanos", "unpriced_requests", "refused_requests")
# table -> (grain, the dimensions it keeps besides account and period)
ROLLUPS = {
    "usage_monthly": ("month", ("model", "key_id", "outcome")),
    "usage_monthly_users": ("month", ("outcome", "user")),
    "usage_daily_models": ("day", ("model",)),
    "usage_daily_keys": ("day", ("key_id",)),
    "usage_daily": ("day", ("model", "key_id", "outcome")),
    "usage_daily_users": ("day", ("outcome", "user")),
    "usage_hourly_models": ("hour", ("model",)),
    "usage_hourly": ("hour", ("model", "key_id", "outcome")),
    "usage_hourly_users": ("hour", ("model", "key_id", "outcome", "user")),
}

COLUMNS = {"model": ("model",), "key_id": ("key_id",), "outcome": ("outcome",), "user": ("has_user", "end_user")}
TYPES = {"model": sa.Text(), "key_id": sa.String(32), "outcome": sa.String(32), "has_user": sa.Boolean(),
         "end_user": sa.Text()}
FROM_LEDGER = {"model": "model", "key_id": "key_id", "outcome": "outcome", "has_user": "end_user IS NOT NULL",
               "end_user": "coalesce(end_user, '')"}


def upgrade() -> None:
    # Rows written before prices existed keep no cost: unpriced, never 0.
    op.add_column("ledger", sa.Column("cost_nanos", sa.BigInteger(), nullable=True))
    dialect = op.get_bind().dialect.name
    for name, (grain, kept) in ROLLUPS.items():
        columns = [column for dimension in kept for column in COLUMNS[dimension]]
        op.create_table(
            name,
            sa.Column("account_id", sa.String(64), nullable=False),
            sa.Column("period", sa.DateTime(timezone=True), nullable=False),
            *(sa.Column(column, TYPES[column], nullable=False) for column in columns),
            *(sa.Column(measure, sa.BigInteger(), nullable=False) for measure in MEASURES),
            sa.PrimaryKeyConstraint("account_id", "period", *columns, name=op.f(f"pk_{name}")),
            sqlite_with_rowid=False,
        )
        op.execute(_backfill(name, grain, columns, dialect))


def _backfill(table: str, grain: str, columns: list[str], dialect: str) -> str:
    """The ledger's existing rows summed into `table` (every one unpriced; a limit's refusals,
    outcome `refused`, reached no vendor and cost nothing)."""
    if dialect == "postgresql":
        period = f"date_trunc('{grain}', started_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
    else:  # SQLite keeps UTC datetimes as "YYYY-MM-DD HH:MM:SS.ffffff"
        kept, rest = {"hour": (13, ":00:00.000000"), "day": (10, " 00:00:00.000000"),
                      "month": (7, "-01 00:00:00.000000")}[grain]
        period = f"substr(started_at, 1, {kept}) || '{rest}'"
    keys = ["account_id", period, *(FROM_LEDGER[column] for column in columns)]
    served = "CASE WHEN outcome = 'refused' THEN 0 ELSE 1 END"
    sums = [f"sum({served})", "sum(CASE WHEN estimated THEN 1 ELSE 0 END)", "sum(prompt_tokens)",
            "sum(completion_tokens)", "sum(total_tokens)", "coalesce(sum(cached_tokens), 0)",
            "coalesce(sum(reasoning_tokens), 0)", "0", f"sum({served})",
            "sum(CASE WHEN outcome = 'refused' THEN 1 ELSE 0 END)"]
    return (f"INSERT INTO {table} ({', '.join(['account_id', 'period', *columns, *MEASURES])}) "
            f"SELECT {', '.join(keys + sums)} FROM ledger GROUP BY {', '.join(keys)}")


def downgrade() -> None:
    for name in ROLLUPS:
        op.drop_table(name)
    with op.batch_alter_table("ledger") as batch:
        batch.drop_column("cost_nanos")
