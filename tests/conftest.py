"""Shared fixtures: one real local Slurm cluster per test session (started on first use)."""

from tests.integration.conftest_localslurm import local_slurm  # noqa: F401
