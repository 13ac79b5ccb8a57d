"""``dx1 bench parallel``'s device strings and parts: one chip of a board, and ``--parallel-modes``."""

from __future__ import annotations

from dx1_bringup import bench_parallel
from dx1_bringup.cli import main
from dx1_bringup.workloads.encoder import BlockSize


def test_one_chip_of_a_simulated_board_is_plain_sim_and_of_a_model_board_a_board_of_one():
    assert bench_parallel._one("sim:chips={n}") == "sim"
    assert bench_parallel._one("sim:chips={n},tiles=2,banks=2") == "sim:tiles=2,banks=2"
    assert bench_parallel._one("model:chips={n}") == "model:chips=1"
    assert bench_parallel._one("model") == "model"


def test_the_section_runs_only_the_parts_asked_for():
    report = bench_parallel.parallel_bench("model", ("dp",))
    assert {row["mode"] for row in report["rows"]} == {"dp"} and bench_parallel.correct(report)


def test_an_unknown_part_is_refused_naming_the_parts(capsys):
    assert main(["bench", "--only", "parallel", "--parallel-modes", "tp,ep"]) == 2
    assert "expected a comma-separated list of some of tp, pp, tp-pp, dp, not 'tp,ep'" in capsys.readouterr().err


def test_the_tp_block_is_a_choice_and_every_tp_degree_is_bit_identical_on_it():
    size = BlockSize(16, 64, 4, 128)
    report = bench_parallel.parallel_bench("model:chips={n}", ("tp",), tp_block=size)
    assert report["tp_block"] == str(size) and bench_parallel.correct(report)
    variants = {(row["tp"], row["variant"]) for row in report["rows"]}
    assert variants >= {(2, "sequence-parallel"), (4, "plain (all-reduce)")}


def test_a_malformed_tp_block_is_refused_saying_what_a_block_is(capsys):
    assert main(["bench", "--only", "parallel", "--parallel-tp-block", "64,512,8"]) == 2
    assert "a block is SEQ,D_MODEL,HEADS,FFN" in capsys.readouterr().err
