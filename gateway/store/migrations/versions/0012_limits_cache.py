"""limits: the response cache's switch per key or account

Revision ID: 0012
Revises: 0009
Create Date: 2026-12-03

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Null: the subject says nothing of the cache (it serves it whenever the gateway has one).
    with op.batch_alter_table("limits") as batch:
        batch.add_column(sa.Column("cache", sa.Boolean, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("limits") as batch:
        batch.drop_column("cache")
