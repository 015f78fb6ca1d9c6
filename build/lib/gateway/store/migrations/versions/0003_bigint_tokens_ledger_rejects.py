"""ledger: token counts as BIGINT; ledger_rejects, where rows the database refused are kept

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TOKEN_COLUMNS = ("prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens", "reasoning_tokens")
NULLABLE = {"cached_tokens", "reasoning_tokens"}


def upgrade() -> None:
    with op.batch_alter_table("ledger") as batch:
        for column in TOKEN_COLUMNS:
            batch.alter_column(column, existing_type=sa.Integer(), type_=sa.BigInteger(),
                               existing_nullable=column in NULLABLE)
    op.create_table(
        "ledger_rejects",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("request_id", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("row", sa.Text(), nullable=False),
        sa.Column("rejected_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_rejects")),
    )


def downgrade() -> None:
    op.drop_table("ledger_rejects")
    with op.batch_alter_table("ledger") as batch:
        for column in TOKEN_COLUMNS:
            batch.alter_column(column, existing_type=sa.BigInteger(), type_=sa.Integer(),
                               existing_nullable=column in NULLABLE)
