"""responses, response_items: stored responses of POST /v5/responses (gateway/store/responses.py)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "responses",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("previous_response_id", sa.String(64), nullable=True),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_responses"),
    )
    op.create_index("ix_responses_account_id_created_at", "responses", ["account_id", "created_at"])
    op.create_index("ix_responses_created_at", "responses", ["created_at"])
    op.create_table(
        "response_items",
        sa.Column("response_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.String(128), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["response_id"], ["responses.id"], ondelete="CASCADE",
                                name="fk_response_items_response_id_responses"),
        sa.PrimaryKeyConstraint("response_id", "kind", "position", name="pk_response_items"),
    )


def downgrade() -> None:
    op.drop_table("response_items")
    op.drop_index("ix_responses_created_at", "responses")
    op.drop_index("ix_responses_account_id_created_at", "responses")
    op.drop_table("responses")
