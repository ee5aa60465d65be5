"""Shared fixtures: one real local Slurm cluster per test session (started on first use), and
the `--regen-golden` flag that rewrites the golden files under tests/data/golden/."""

from __future__ import annotations

import pytest

from tests.integration.conftest_localslurm import local_slurm  # noqa: F401


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--regen-golden", action="store_true", default=False,
                     help="rewrite tests/data/golden/* from the code (review the diff!)")


@pytest.fixture
def regen_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--regen-golden"))
