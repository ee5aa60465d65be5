"""The store's tables as the newest migration leaves them (SQLAlchemy Core).

`runs` holds one row per finished run: the case's figures (the `parsers.rows.RunRow` columns
the comparisons use) and its provenance (`toolkit.results.provenance.FIELDS`). `run_key` is the
run's identity (see `toolkit.store.ingest.run_key`); its unique index is what makes ingest
idempotent. Changing a table here means adding a migration in `migrations/versions/` that
makes the same change (a test compares the two).
"""

from __future__ import annotations

from sqlalchemy import Column, Float, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

runs = Table(
    "runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_key", String(64), nullable=False, unique=True),
    Column("origin", String(16), nullable=False),  # trainbench | imported
    Column("config_hash", String(64), nullable=False),
    Column("case_id", Text, nullable=False),
    Column("repeat", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("framework", String(32), nullable=False),
    Column("model", String(64), nullable=False),
    Column("precision", String(32), nullable=False),
    Column("variant", Text, nullable=False),
    Column("num_nodes", Integer, nullable=False),
    Column("gpus_per_node", Integer, nullable=False),
    Column("batch_size_per_device", Integer, nullable=False),
    Column("throughput_sps", Float),
    Column("step_time_median_s", Float),
    Column("peak_memory_mib", Float),
    Column("loss_first", Float),
    Column("loss_last", Float),
    Column("gpu_model", Text),
    Column("driver", Text),
    Column("cuda", Text),
    Column("nccl", Text),
    Column("framework_version", Text),
    Column("container_image", Text),
    Column("hosts", Text),
    Column("clocks", Text),
    Column("git_commit", Text),
    Column("started_s", Float),  # run start (meta.json), epoch s; foreign logs: ingest time
    Column("results_dir", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("ingested_s", Float, nullable=False),
    Column("partition", Text),
    Column("site", Text),
    Column("executor", Text),  # local | slurm (status.json); NULL for foreign logs
    Column("oversubscribed", Text),  # why the ranks shared their CPUs; NULL when they did not
    Column("host_crowded", Text),  # why other processes crowded the run; NULL when they did not
    Index("ix_runs_case_started", "case_id", "started_s"),
    Index("ix_runs_started", "started_s"),
    Index("ix_runs_gpu_model", "gpu_model"),
    Index("ix_runs_driver", "driver"),
    Index("ix_runs_results_dir", "results_dir"),
)

#: Columns a `--where KEY=VALUE` may name (`gpu` is short for gpu_model).
FILTER_COLUMNS = ("case_id", "config_hash", "framework", "model", "precision", "variant",
                  "num_nodes", "gpus_per_node", "batch_size_per_device", "status", "origin",
                  "gpu_model", "driver", "cuda", "nccl", "framework_version", "container_image",
                  "hosts", "clocks", "git_commit", "partition", "site", "results_dir",
                  "executor")
ALIASES = {"gpu": "gpu_model", "case": "case_id", "commit": "git_commit", "image":
           "container_image"}
