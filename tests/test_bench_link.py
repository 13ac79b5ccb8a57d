"""``dx1 bench --only link``: SENDs between two link endpoints on Amaranth's simulator, the sizes asked for."""

from __future__ import annotations

from dx1_bringup.bench_link import link_bench
from dx1_bringup.cli import main


def test_sends_of_the_sizes_asked_for_complete_within_the_link_peak():
    report = link_bench((8, 256, 1024))
    runs = report["runs"]
    assert [(r["op"], r["bytes"]) for r in runs] == [(op, b) for op in ("WRITE", "ADD") for b in (8, 256, 1024)]
    assert all(r["ok"] for r in runs)
    for op in ("WRITE", "ADD"):
        cycles = [r["cycles"] for r in runs if r["op"] == op]
        assert cycles == sorted(cycles) and len(set(cycles)) == 3
    # Nothing moves faster than the wire: 8 bytes a cycle, less the frames' headers and trailers.
    assert all(r["bytes_per_cycle"] < 8 and 0 < r["steady_share_of_peak"] < 1 for r in runs)


def test_link_sizes_are_checked(capsys):
    assert main(["bench", "--only", "link", "--link-sizes", "8,12"]) == 2
    assert "expected a comma-separated list of SEND sizes, multiples of 8 from 8 to 65536, not '8,12'" in \
        capsys.readouterr().err
