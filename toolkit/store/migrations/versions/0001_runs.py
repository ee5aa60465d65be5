"""The runs table: one row per finished run, its figures and provenance.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_key", sa.String(64), nullable=False, unique=True),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("config_hash", sa.String(64), nullable=False),
        sa.Column("case_id", sa.Text, nullable=False),
        sa.Column("repeat", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("framework", sa.String(32), nullable=False),
        sa.Column("model", sa.String(64), nullable=False),
        sa.Column("precision", sa.String(32), nullable=False),
        sa.Column("variant", sa.Text, nullable=False),
        sa.Column("num_nodes", sa.Integer, nullable=False),
        sa.Column("gpus_per_node", sa.Integer, nullable=False),
        sa.Column("batch_size_per_device", sa.Integer, nullable=False),
        sa.Column("throughput_sps", sa.Float),
        sa.Column("step_time_median_s", sa.Float),
        sa.Column("peak_memory_mib", sa.Float),
        sa.Column("loss_first", sa.Float),
        sa.Column("loss_last", sa.Float),
        sa.Column("gpu_model", sa.Text),
        sa.Column("driver", sa.Text),
        sa.Column("cuda", sa.Text),
        sa.Column("nccl", sa.Text),
        sa.Column("framework_version", sa.Text),
        sa.Column("container_image", sa.Text),
        sa.Column("hosts", sa.Text),
        sa.Column("clocks", sa.Text),
        sa.Column("git_commit", sa.Text),
        sa.Column("started_s", sa.Float),
        sa.Column("results_dir", sa.Text, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("ingested_s", sa.Float, nullable=False),
    )
    op.create_index("ix_runs_case_started", "runs", ["case_id", "started_s"])
    op.create_index("ix_runs_started", "runs", ["started_s"])
    op.create_index("ix_runs_gpu_model", "runs", ["gpu_model"])


def downgrade() -> None:
    op.drop_table("runs")
