"""Alembic's entry: runs the revisions on the connection `toolkit.store.db` hands over (in its
transaction, under its lock); never opens a database of its own."""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
