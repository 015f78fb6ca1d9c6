"""usage_{hourly,daily,monthly}_endpoints: the rollups per endpoint (completions or chat), with
model and outcome, filled from the ledger's rows

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GRAINS = {"usage_hourly_endpoints": "hour", "usage_daily_endpoints": "day", "usage_monthly_endpoints": "month"}
KEPT = ("model", "outcome", "endpoint")
MEASURES = ("requests", "estimated_requests", "prompt_tokens", "completion_tokens", "total_tokens",
            "cached_tokens", "reasoning_tokens", "cost_nanos", "unpriced_requests", "refused_requests",
            "cache_hits", "saved_nanos")
TYPES = {"model": sa.Text(), "outcome": sa.String(32), "endpoint": sa.String(16)}
# The ledger's rows as the writer sums them (store/rollups.py measures): a refused row reached no
# vendor and stands for `refusals` refusals; a row without a cost that reached a vendor is unpriced.
FROM_LEDGER = (
    "sum(CASE WHEN outcome = 'refused' THEN 0 ELSE 1 END)",
    "sum(CASE WHEN estimated THEN 1 ELSE 0 END)",
    "sum(prompt_tokens)", "sum(completion_tokens)", "sum(total_tokens)",
    "coalesce(sum(cached_tokens), 0)", "coalesce(sum(reasoning_tokens), 0)", "coalesce(sum(cost_nanos), 0)",
    "sum(CASE WHEN cost_nanos IS NULL AND outcome <> 'refused' THEN 1 ELSE 0 END)",
    "sum(CASE WHEN outcome = 'refused' THEN coalesce(refusals, 1) ELSE 0 END)",
    "sum(CASE WHEN outcome = 'cache_hit' THEN 1 ELSE 0 END)",
    "coalesce(sum(saved_nanos), 0)",
)


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for table, grain in GRAINS.items():
        op.create_table(
            table,
            sa.Column("account_id", sa.String(64), nullable=False),
            sa.Column("period", sa.DateTime(timezone=True), nullable=False),
            *(sa.Column(column, TYPES[column], nullable=False) for column in KEPT),
            *(sa.Column(measure, sa.BigInteger(), nullable=False) for measure in MEASURES),
            sa.PrimaryKeyConstraint("account_id", "period", *KEPT, name=op.f(f"pk_{table}")),
            sqlite_with_rowid=False,
        )
        # The hours from the ledger, the days and months from the hours.
        hourly = grain == "hour"
        time = "started_at" if hourly else "period"
        keys = ["account_id", _period(time, grain, dialect), *KEPT]
        sums = FROM_LEDGER if hourly else tuple(f"sum({measure})" for measure in MEASURES)
        order = f" ORDER BY {keys[1]}" if dialect == "postgresql" else ""  # a period's rows on few pages
        op.execute(f"INSERT INTO {table} (account_id, period, {', '.join(KEPT)}, {', '.join(MEASURES)}) "
                   f"SELECT {', '.join(keys)}, {', '.join(f'CAST({s} AS BIGINT)' for s in sums)} "
                   f"FROM {'ledger' if hourly else 'usage_hourly_endpoints'} GROUP BY {', '.join(keys)}{order}")


def _period(column: str, grain: str, dialect: str) -> str:
    """SQL for the start of the UTC hour, day or month of a timestamp column."""
    if dialect == "postgresql":
        return f"date_trunc('{grain}', {column} AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
    # SQLite keeps UTC datetimes as "YYYY-MM-DD HH:MM:SS.ffffff"
    kept, rest = {"hour": (13, ":00:00.000000"), "day": (10, " 00:00:00.000000"),
                  "month": (7, "-01 00:00:00.000000")}[grain]
    return f"substr({column}, 1, {kept}) || '{rest}'"


def downgrade() -> None:
    for table in GRAINS:
        op.drop_table(table)
