"""limits.budget_usd: budgets in US dollars (nano-dollars, as the ledger's cost_nanos)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("limits", sa.Column("budget_usd", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("limits") as batch:
        batch.drop_column("budget_usd")
