"""The Slurm partition of each run (a reference is per system: GPU model or partition), and
indexes for the filters history and compare use most (driver, results directory).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("partition", sa.Text))
    op.create_index("ix_runs_driver", "runs", ["driver"])
    op.create_index("ix_runs_results_dir", "runs", ["results_dir"])


def downgrade() -> None:
    op.drop_index("ix_runs_results_dir", "runs")
    op.drop_index("ix_runs_driver", "runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("partition")
