"""Options shared by tests/ and testbenches/: how many seeds the randomised cocotb tests run."""

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("dx1", "dx1-mini simulation")
    group.addoption("--seeds", type=int, default=1, help="seeds per randomised cocotb test (default 1)")
    group.addoption("--seed-base", type=int, default=1, help="first seed (default 1); seeds are consecutive")


def pytest_generate_tests(metafunc):
    if "seed" in metafunc.fixturenames:
        base = metafunc.config.getoption("seed_base")
        count = metafunc.config.getoption("seeds")
        if count < 1:
            raise pytest.UsageError(f"--seeds must be at least 1, not {count}")
        metafunc.parametrize("seed", range(base, base + count), ids=lambda s: f"seed{s}")
