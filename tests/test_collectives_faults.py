"""``dx1 collectives --faults``: every fault gives every rank a typed error (or the exact result) within the
deadline, on a board of chips and on a host-staged group."""

from __future__ import annotations

import json

from dx1_bringup.cli import main
from dx1_bringup.collectives.faults import FAULTS, fault_table


def test_every_rank_of_a_board_sees_each_fault_within_the_deadline():
    rows = fault_table(["model:chips=3"], timeout=1.0)  # past the group's half-second grace for stuck ranks
    by = {(r.fault, r.rank): r for r in rows}
    assert {r.fault for r in rows} == set(FAULTS)
    for rank in range(3):
        assert by["shape", rank].outcome == "CollectiveMismatch about rank 2 at fingerprint exchange"
        assert by["dead chip", rank].outcome.startswith("CollectiveTimeout about rank ")
        assert 1.0 <= by["dead chip", rank].seconds < 3.0
        assert by["CRC within retries", rank].outcome == "exact"
        assert by["CRC past retries", rank].outcome.startswith("RankFailed about rank 0 at link barrier")
        assert by["CRC past retries", rank].outcome.endswith(": LINK_CRC")
        assert by["cut link", rank].outcome.endswith(": LINK_DOWN") and by["cut link", rank].seconds < 1.0
    assert by["frozen simulator", -1].outcome.startswith("n/a: no simulator process")


def test_the_command_prints_the_table_of_a_host_staged_group(tmp_path, capsys):
    out = tmp_path / "faults.json"
    assert main(["collectives", "--faults", "--device", "model*2", "--timeout", "0.5", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "# dx1 collectives --faults: all_reduce of 1000 int32 on model,model, deadline 0.5 s" in text
    assert "RankFailed about rank 1 at ring reduce-scatter" in text  # the dead chip: its transport closed
    rows = json.loads(out.read_text())
    cut = [r["outcome"] for r in rows if r["fault"] == "cut link"]
    assert cut == ["n/a: no chip-to-chip link (a host-staged group)"]
