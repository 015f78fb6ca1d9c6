"""accounts, API keys and the usage ledger

Revision ID: 0001
Revises:
Create Date: 2026-11-30

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "accounts",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_accounts"),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        sa.UniqueConstraint("digest", name="uq_api_keys_digest"),
    )
    op.create_table(
        "key_accounts",
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.ForeignKeyConstraint(["key_id"], ["api_keys.id"], name="fk_key_accounts_key_id_api_keys"),
        sa.ForeignKeyConstraint(["account_id"], ["accounts.id"], name="fk_key_accounts_account_id_accounts"),
        sa.PrimaryKeyConstraint("key_id", "account_id", name="pk_key_accounts"),
    )
    op.create_table(
        "ledger",
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("vendor", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("total_tokens", sa.Integer(), nullable=False),
        sa.Column("cached_tokens", sa.Integer(), nullable=True),
        sa.Column("reasoning_tokens", sa.Integer(), nullable=True),
        sa.Column("estimated", sa.Boolean(), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("streamed", sa.Boolean(), nullable=False),
        sa.Column("end_user", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ttft_ms", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("request_id", name="pk_ledger"),
    )
    op.create_index("ix_ledger_account_id_started_at", "ledger", ["account_id", "started_at"])
    op.create_index("ix_ledger_started_at", "ledger", ["started_at"])


def downgrade() -> None:
    op.drop_table("ledger")
    op.drop_table("key_accounts")
    op.drop_table("api_keys")
    op.drop_table("accounts")
