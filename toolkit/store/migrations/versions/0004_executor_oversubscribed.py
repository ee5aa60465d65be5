"""How each run was launched (`executor`: local, slurm) and why its ranks shared their CPUs
(`oversubscribed`, NULL when they did not), so history and compare keep runs of different
executors apart and can tell a figure that measured contention.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("executor", sa.Text))
    op.add_column("runs", sa.Column("oversubscribed", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("oversubscribed")
        batch.drop_column("executor")
