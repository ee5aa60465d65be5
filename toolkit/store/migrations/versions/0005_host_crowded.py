"""Why other processes crowded a run (`host_crowded`: processes that were none of its ranks
took a saturated host's CPU time while it trained; NULL when they did not), so history and
compare can tell a figure that measured contention from the host's other load.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("host_crowded", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("host_crowded")
