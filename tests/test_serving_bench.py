"""``dx1 bench serving`` on the test-sized model: every batching mode serves the same load over HTTP."""

from __future__ import annotations

import json

from serving_lm import tiny_model

from dx1_bringup.serving.bench import LoadSpec, bench_device_clock, bench_serving, make_workload, table
from dx1_bringup.serving.engine import EngineConfig


def test_the_workload_is_seeded_and_fits_the_context():
    spec = LoadSpec(requests=20, rate=5.0, prompt_len=(4, 20), output_len=(4, 30), seed=3)
    load = make_workload(spec, ["abcdefghij" * 20], 32)
    assert load == make_workload(spec, ["abcdefghij" * 20], 32)
    assert all(len(p) + n <= 32 and 4 <= len(p) <= 20 for _, p, n in load)
    assert [at for at, *_ in load] == sorted(at for at, *_ in load)


def test_continuous_and_static_serve_the_same_tokens_and_static_wastes_more_cache(tmp_path):
    spec = LoadSpec(requests=6, rate=50.0, prompt_len=(4, 10), output_len=(4, 12), seed=1)
    results = bench_serving("model", tiny_model(), spec, EngineConfig(num_blocks=24, block_size=8, max_num_seqs=4),
                            out=tmp_path / "bench.json")
    continuous, static, compact = results
    want = sum(n for *_, n in make_workload(spec, tiny_model().calibration, 32))
    assert continuous.output_tokens == static.output_tokens == compact.output_tokens == want
    assert compact.kv_waste > continuous.kv_waste  # static reserves prompt plus max_tokens up front
    assert static.kv_waste > compact.kv_waste  # and holds ended sequences' blocks until the batch ends
    assert continuous.cycles_per_token > 0 and continuous.ttft_p50 > 0
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert [r["mode"] for r in saved["results"]] == ["continuous", "static", "static-compact"]
    assert "continuous / static:" in table(results) and "continuous / static-compact:" in table(results)


def test_the_device_clock_replay_counts_device_time_only_and_serves_every_token():
    spec = LoadSpec(requests=12, rate=2000.0, prompt_len=(4, 10), output_len=(2, 20), seed=1)
    clock = 50e6
    continuous, static, compact = bench_device_clock("model", tiny_model(), spec,
                                                     EngineConfig(num_blocks=24, block_size=8, max_num_seqs=4), clock)
    want = sum(n for *_, n in make_workload(spec, tiny_model().calibration, 32))
    for r in (continuous, static, compact):
        assert r.output_tokens == want and r.requests == 12
        busy = r.cycles_per_token * r.output_tokens / clock  # every step's device time; idle gaps come on top
        assert busy <= r.seconds * (1 + 1e-9) and len(r.ttfts) == 12
    assert continuous.steps < static.steps  # iteration-level: no step waits for a batch to drain
    # A padded batch computes every slot: more device cycles per token than the compact one, on the same steps.
    assert static.cycles_per_token > compact.cycles_per_token
    assert "ms" in table([continuous, static], ms=True).splitlines()[0]


def test_a_long_tailed_output_mix_is_seeded_cut_to_its_range_and_has_its_mean():
    spec = LoadSpec(requests=400, rate=5.0, prompt_len=(4, 8), output_len=(1, 100), seed=4, output_mean=12)
    load = make_workload(spec, ["abcdefghij" * 20], 128)
    assert load == make_workload(spec, ["abcdefghij" * 20], 128)
    lengths = [n for *_, n in load]
    assert all(1 <= n <= 100 for n in lengths) and 10 < sum(lengths) / len(lengths) < 14
    assert max(lengths) > 4 * 12  # the tail
    assert "outputs exponential of mean 12 in 1-100 characters" in spec.describe()


def test_a_bad_output_mean_is_refused(capsys):
    from dx1_bringup.cli import main

    assert main(["bench", "--only", "serving", "--serving-output-mean", "0"]) == 2
    assert "argument --serving-output-mean: must be a number > 0, not '0'" in capsys.readouterr().err


def test_a_prompt_as_long_as_the_context_is_refused(capsys):
    from dx1_bringup.cli import main

    assert main(["bench", "--only", "serving", "--serving-prompt", "8,128"]) == 2
    assert "--serving-prompt 128 leaves no room for an output in the model's context of 128" in capsys.readouterr().err


def test_the_modes_asked_for_run_alone_and_are_compared():
    spec = LoadSpec(requests=6, rate=2000.0, prompt_len=(4, 10), output_len=(2, 12), seed=2)
    results = bench_device_clock("model", tiny_model(), spec, EngineConfig(num_blocks=24, block_size=8, max_num_seqs=4),
                                 modes=("static", "continuous"))
    assert [r.mode for r in results] == ["static", "continuous"]
    text = table(results, ms=True)
    assert "continuous / static:" in text and "static-compact" not in text


def test_leaving_out_both_runs_is_refused(capsys):
    from dx1_bringup.cli import main

    assert main(["bench", "--only", "serving", "--serving-no-http", "--serving-no-clock"]) == 2
    assert "--serving-no-http and --serving-no-clock leave nothing to run" in capsys.readouterr().err
    assert main(["bench", "--only", "serving", "--serving-modes", "continuous,orca"]) == 2
    assert "expected a comma-separated list of some of continuous, static, static-compact" in capsys.readouterr().err
