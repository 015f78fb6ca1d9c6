"""a key's lineage: the first key of its rotation chain, whose counters the chain's keys share
(api_keys.lineage), set for the keys rotated before it

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A successor takes its predecessor's lineage (or its id, when it has none): run until nothing
# changes, once per generation of the longest chain (bounded: a cycle of replacements, which no
# rotation makes, must not run forever).
GENERATIONS = 1000
INHERIT = sa.text("""
UPDATE api_keys SET lineage = (SELECT COALESCE(p.lineage, p.id) FROM api_keys p WHERE p.replaced_by = api_keys.id)
WHERE EXISTS (SELECT 1 FROM api_keys p WHERE p.replaced_by = api_keys.id
              AND (api_keys.lineage IS NULL OR api_keys.lineage <> COALESCE(p.lineage, p.id)))
""")


def upgrade() -> None:
    # Null: the key is the first of its chain (it counts under its own id).
    op.add_column("api_keys", sa.Column("lineage", sa.String(32), nullable=True))
    op.create_index("ix_api_keys_lineage", "api_keys", ["lineage"])
    connection = op.get_bind()
    for _ in range(GENERATIONS):
        if not connection.execute(INHERIT).rowcount:
            break


def downgrade() -> None:
    op.drop_index("ix_api_keys_lineage", "api_keys")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("lineage")
