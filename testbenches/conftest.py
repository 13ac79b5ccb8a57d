"""Every test here runs generated RTL in Verilator through cocotb; without Verilator they are skipped."""

from pathlib import Path

import pytest

from dx1_bringup.sim import verilator_missing

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    # The hook sees every item of the session, tests/ too when both folders run: mark only this folder's.
    reason = verilator_missing()
    for item in items:
        if not item.path.is_relative_to(HERE):
            continue
        item.add_marker(pytest.mark.verilator)
        # One build folder per RTL module: keep its tests on one xdist worker.  Files that test one
        # module have no `module` parameter; their folder names the group.
        module = item.callspec.params.get("module") if hasattr(item, "callspec") else None
        item.add_marker(pytest.mark.xdist_group(module or item.path.parent.name))
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def cocotb_batch(request) -> list[str]:
    """The test cases selected in this session beside this test, in order: the same test function with the
    same parameters but ``testcase``.  They run in one simulator (:func:`~dx1_bringup.sim.run_cocotb_shared`);
    the xdist groups above keep them on one worker."""
    def others(item) -> dict:
        return {k: v for k, v in item.callspec.params.items() if k != "testcase"}

    me = request.node
    return [item.callspec.params["testcase"] for item in request.session.items
            if item.path == me.path and getattr(item, "originalname", None) == me.originalname
            and "testcase" in getattr(getattr(item, "callspec", None), "params", {}) and others(item) == others(me)]
