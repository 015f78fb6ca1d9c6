"""limits on keys and accounts; the ledger indexed by key and time (a key's budget is summed from it)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "limits",
        sa.Column("subject", sa.String(length=8), nullable=False),
        sa.Column("subject_id", sa.String(length=64), nullable=False),
        sa.Column("rpm", sa.BigInteger(), nullable=True),
        sa.Column("tpm", sa.BigInteger(), nullable=True),
        sa.Column("concurrent", sa.BigInteger(), nullable=True),
        sa.Column("budget_tokens", sa.BigInteger(), nullable=True),
        sa.Column("budget_period", sa.String(length=8), nullable=True),
        sa.Column("models", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("subject", "subject_id", name=op.f("pk_limits")),
    )
    op.create_index(op.f("ix_ledger_key_id_started_at"), "ledger", ["key_id", "started_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_ledger_key_id_started_at"), table_name="ledger")
    op.drop_table("limits")
