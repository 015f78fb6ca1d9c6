"""ledger: the endpoint a request came through (completions or chat)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Every row before this one came through POST /v5/completions, the only endpoint there was.
    op.add_column("ledger", sa.Column("endpoint", sa.String(16), nullable=False, server_default="completions"))


def downgrade() -> None:
    op.drop_column("ledger", "endpoint")
