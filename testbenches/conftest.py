"""Every test here runs generated RTL in Verilator through cocotb; without Verilator they are skipped."""

import pytest

from dx1_bringup.sim import verilator_missing


def pytest_collection_modifyitems(config, items):
    reason = verilator_missing()
    for item in items:
        item.add_marker(pytest.mark.verilator)
        # One build folder per RTL module: keep its tests on one xdist worker.  Files that test one
        # module have no `module` parameter; their folder names the group.
        module = item.callspec.params.get("module") if hasattr(item, "callspec") else None
        item.add_marker(pytest.mark.xdist_group(module or item.path.parent.name))
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
