"""usage_monthly_user_totals: the monthly rollup per user without outcome, filled from usage_monthly_users

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MEASURES = ("requests", "estimated_requests", "prompt_tokens", "completion_tokens", "total_tokens",
            "cached_tokens", "reasoning_tokens", "cost_nanos", "unpriced_requests", "refused_requests")
KEY = ("account_id", "period", "has_user", "end_user")


def upgrade() -> None:
    op.create_table(
        "usage_monthly_user_totals",
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.Column("period", sa.DateTime(timezone=True), nullable=False),
        sa.Column("has_user", sa.Boolean(), nullable=False),
        sa.Column("end_user", sa.Text(), nullable=False),
        *(sa.Column(measure, sa.BigInteger(), nullable=False) for measure in MEASURES),
        sa.PrimaryKeyConstraint(*KEY, name=op.f("pk_usage_monthly_user_totals")),
        sqlite_with_rowid=False,
    )
    # The same months and users summed over their outcomes: usage_monthly_users is exact already
    # (its writer is the ledger's, in the rows' own transactions), so no ledger row is read again.
    sums = ", ".join(f"CAST(sum({measure}) AS BIGINT)" for measure in MEASURES)
    op.execute(f"INSERT INTO usage_monthly_user_totals ({', '.join(KEY + MEASURES)}) "
               f"SELECT {', '.join(KEY)}, {sums} FROM usage_monthly_users GROUP BY {', '.join(KEY)}")


def downgrade() -> None:
    op.drop_table("usage_monthly_user_totals")
