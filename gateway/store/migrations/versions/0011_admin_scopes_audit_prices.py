"""administration: key scopes, expiry and rotation; the audit trail; prices stored in the database

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        # Every key made before scopes existed could call the API and read its accounts' usage: it keeps
        # exactly that (space-separated scope names).
        batch.add_column(sa.Column("scopes", sa.Text(), nullable=False, server_default="inference usage"))
        batch.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
        # The key a rotation replaced this one with (its revoked_at is then the end of the grace).
        batch.add_column(sa.Column("replaced_by", sa.String(length=32), nullable=True))
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("actor_key_id", sa.String(length=32), nullable=True),
        sa.Column("address", sa.Text(), nullable=True),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("object_kind", sa.String(length=16), nullable=False),
        sa.Column("object_id", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index(op.f("ix_audit_log_at"), "audit_log", ["at"])
    op.create_table(
        "stored_prices",
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("input_picos", sa.BigInteger(), nullable=False),
        sa.Column("output_picos", sa.BigInteger(), nullable=False),
        sa.Column("cached_input_picos", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("model", "since", name=op.f("pk_stored_prices")),
    )


def downgrade() -> None:
    op.drop_table("stored_prices")
    op.drop_index(op.f("ix_audit_log_at"), table_name="audit_log")
    op.drop_table("audit_log")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("replaced_by")
        batch.drop_column("expires_at")
        batch.drop_column("scopes")
