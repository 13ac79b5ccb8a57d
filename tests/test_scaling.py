"""SoCs of any tile and bank count: device strings, generated Verilog, the scaling bench's file and plot,
and (Verilator) a 4-tile SoC running a GEMM on all its tiles, bit for bit against numpy and the golden model.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from dx1_driver import Device

from dx1_bringup import bench_scaling
from dx1_bringup.cli import build_parser
from dx1_bringup.gateware import rtl_module
from dx1_bringup.runtime.gemm_run import run_gemm
from dx1_bringup.runtime.operands import gemm_problem
from dx1_bringup.runtime.reference import reference_gemm
from dx1_bringup.sim import serve, verilator_missing
from dx1_bringup.sim.configs import config_folder, soc_config, soc_verilog
from dx1_bringup.sim.launch import PrivateSimTransport, start_simulator
from dx1_bringup.spec import SocConfig

#: The CI slice: a 4-tile SoC with 2 banks (generating and building it took 8 minutes on two busy cores).
CI_TILES, CI_BANKS = 4, 2
#: Its GEMM, and the least utilisation it must reach on four tiles (measured 52.8%; one tile working at a
#: time would give under 25%).
CI_SIZE, CI_FLOOR = 128, 0.40


def test_model_takes_tiles_banks_and_memory_and_faults_beside_them():
    with Device.open("model:tiles=8,banks=8,mem_mib=4") as dev:
        assert (dev.caps.tiles, dev.caps.mem_banks, dev.caps.mem_bytes) == (8, 8, 4 << 20)
    with Device.open("model:banks=1,stuck-bit=5,tiles=3") as dev:
        assert (dev.caps.tiles, dev.caps.mem_banks, dev.caps.mem_bytes) == (3, 1, SocConfig().mem_bytes)


@pytest.mark.parametrize(("device", "message"), [
    ("model:tiles=9", "device 'model:tiles=9': SoC tile count must be an integer from 1 to 8, not 9"),
    ("model:banks=3", "device 'model:banks=3': SoC device memory bank count must be a power of two from 1 to 16, "
                      "not 3"),
    ("model:tiles=two", "device 'model:tiles=two': tiles= must be a whole number, not 'two'"),
    ("model:tiles=2,tiles=4", "device 'model:tiles=2,tiles=4': tiles= is given twice; expected it once"),
    ("sim:tiles=0", "device 'sim:tiles=0': SoC tile count must be an integer from 1 to 8, not 0"),
    ("sim:cores=4", "device 'sim:cores=4': expected sim, sim:tiles=T,banks=B,mem_mib=M,vector=V (any of them: 1 to 8 "
                    "tiles, a power of two of banks from 1 to 16 and of MiB, vector 0 for tiles without a vector "
                    "unit) or sim:verilog=PATH with PATH an existing Verilog file of the SoC, either with "
                    "stall=UNIT[+UNIT...] or alone, and any of them with server=native (the default) or "
                    "server=cocotb"),
    ("sim:tiles=4,verilog=x.v", "device 'sim:tiles=4,verilog=x.v': after tiles=, banks=, mem_mib= and vector= "
                                "expected no "
                                "verilog=, not 'verilog=x.v' (sim:verilog=PATH serves a given Verilog file alone)"),
])
def test_bad_sizes_in_device_strings_are_refused_before_anything_starts(device, message):
    with pytest.raises(ValueError) as info:
        Device.open(device)
    assert str(info.value) == message


def test_the_default_configuration_is_the_checked_in_soc():
    assert soc_verilog(soc_config()) == rtl_module("dx1_soc").path
    assert soc_config(tiles=8, banks=1, mem_mib=4) == SocConfig(tiles=8, mem_banks=1, mem_bytes=4 << 20)
    assert config_folder(soc_config(4, 2)).name == "t4-b2-m1"


def test_sim_serve_options_are_one_definition(capsys):
    """`dx1 sim serve` and `python -m dx1_bringup.sim.serve` take the same options and refuse the same way."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sim", "serve", "--help"])
    dx1_help = capsys.readouterr().out
    with pytest.raises(SystemExit):
        serve.main(["--help"])
    own_help = capsys.readouterr().out
    options = sorted(word for word in dx1_help.split() if word.startswith("--"))
    assert options == sorted(word for word in own_help.split() if word.startswith("--"))
    assert {"--tiles", "--banks", "--mem-mib", "--host-path", "--verilog", "--vector"} <= set(options)
    args = build_parser().parse_args(["sim", "serve", "--tiles", "9"])
    with pytest.raises(SystemExit):
        args.func(args)
    err = capsys.readouterr().err
    assert "--tiles/--banks/--mem-mib/--vector: SoC tile count must be an integer from 1 to 8, not 9" in err
    args = build_parser().parse_args(["sim", "serve", "--uart", "--banks", "2"])
    with pytest.raises(SystemExit):
        args.func(args)
    assert "--tiles, --banks, --mem-mib and --vector configure the generated SoC" in capsys.readouterr().err


def test_start_simulator_refuses_sizes_with_another_verilog():
    with pytest.raises(ValueError, match="cannot be given with uart or verilog"):
        start_simulator(tiles=4, verilog="x.v")


def _point(size, tiles, banks, utilisation, correct=True):
    return {"size": size, "tiles": tiles, "banks": banks, "soc_tiles": 8, "utilisation": utilisation,
            "cycles": 100, "wall_s": 1.0, "correct": correct}


def test_points_merge_by_size_tiles_and_banks_and_the_plot_shows_the_correct_ones(tmp_path):
    path = tmp_path / "scaling.json"
    built = {"soc": "t8-b1-m4", "build_and_start_s": 600.0, "built_before": False}
    bench_scaling.merge_points(path, [_point(64, 1, 1, 0.5), _point(64, 2, 1, 0.4)], [built])
    data = bench_scaling.merge_points(path, [_point(64, 2, 1, 0.45), _point(128, 1, 1, 0.9, correct=False)],
                                      [{"soc": "t8-b1-m4", "build_and_start_s": 5.0, "built_before": True}])
    assert [(p["size"], p["tiles"], p["utilisation"]) for p in data["points"]] == \
        [(64, 1, 0.5), (64, 2, 0.45), (128, 1, 0.9)]
    assert json.loads(path.read_text()) == data and data["socs"] == [built]
    rebuilt = {**built, "build_and_start_s": 700.0}
    assert bench_scaling.merge_points(path, socs=[rebuilt])["socs"] == [rebuilt]
    png = tmp_path / "scaling.png"
    bench_scaling.plot(data, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no correct points"):
        bench_scaling.plot({"points": [_point(64, 1, 1, 0.5, correct=False)]}, png)


@pytest.mark.verilator
@pytest.mark.slow
def test_a_four_tile_soc_runs_a_gemm_on_all_its_tiles():
    """The generated 4-tile, 2-bank SoC in Verilator: CAPS says so, a 128^3 GEMM on four tiles is bit-exact
    against numpy and the golden model of the same configuration, every tile works, and the aggregate
    utilisation is above the floor.  ``slow``: the first run generates and builds the SoC (about 8 minutes
    on two busy cores); later runs take well under a minute."""
    reason = verilator_missing()
    if reason:
        pytest.skip(reason)
    a, b, bias, post = gemm_problem(CI_SIZE, CI_SIZE, CI_SIZE, seed=1)
    with Device.open(f"model:tiles={CI_TILES},banks={CI_BANKS}") as model:
        expected, _ = run_gemm(model, a, b, bias, post)
    np.testing.assert_array_equal(expected, reference_gemm(a, b, bias, post))
    process, port = start_simulator(tiles=CI_TILES, banks=CI_BANKS, timeout=1800)
    with Device(PrivateSimTransport(process, port)) as dev:
        assert (dev.caps.tiles, dev.caps.mem_banks) == (CI_TILES, CI_BANKS)
        out, stats = run_gemm(dev, a, b, bias, post, timeout=600)
    np.testing.assert_array_equal(out, expected)
    assert stats.tile_ids == list(range(CI_TILES))
    assert all(stats.delta(t).macs > 0 for t in stats.tile_ids)
    assert stats.utilisation() > CI_FLOOR
