"""Shared by tests/ and testbenches/: how many seeds the randomised cocotb tests run, and xdist's groups."""

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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Give every test with an ``xdist_group`` mark its group as a node id suffix, under ``--dist loadgroup``.

    That suffix is how pytest-xdist's scheduler keeps a group on one worker (one shared simulator, one
    build folder).  pytest-xdist 3.8 writes it into ``item._nodeid``, which pytest 9 no longer reads (its
    node ids live in ``item._id``), so without this every group is silently spread over the workers.
    """
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import coerce_node_id

    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")
