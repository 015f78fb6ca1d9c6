"""ledger: how many refused requests alike a `refused` row stands for

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Null: one request, as every row before this one was.
    op.add_column("ledger", sa.Column("refusals", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("ledger", "refusals")
