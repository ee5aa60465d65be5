"""The results store: every finished run of every results directory (and of imported logs) in
one database, so that runs can be compared across directories and over time.

`db` (which database: `--store PATH|URL`, `TRAINBENCH_STORE`, else one SQLite file per user in
the XDG data directory; opening it applies the schema's migrations), `schema` (the tables, as
the newest migration leaves them), `ingest` (run rows -> the store, idempotent and safe to run
concurrently), `query` (runs back out as a DataFrame, filtered by case and provenance).
`migrations/` holds the Alembic revisions. The statistics over stored runs live in
`toolkit.analysis`; their tables and plots in `toolkit.report`.
"""
