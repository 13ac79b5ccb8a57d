"""The clocked simulation top (dx1_bringup.sim.clocked_top) written from the SoC's Verilog."""

from __future__ import annotations

import re

import pytest

from dx1_bringup.gateware import rtl_module
from dx1_bringup.sim.clocked_top import REGISTERED_INPUTS, clocked_top_name, soc_ports, write_clocked_top

SOC = rtl_module("dx1_soc")


def test_every_port_of_the_soc_is_found_with_its_width():
    ports = soc_ports(SOC.path.read_text(), SOC.name)
    names = [n for _, _, n in ports]
    assert len(names) == len(set(names))
    assert ("input", "", "clk") in ports and ("input", "", "rst") in ports and ("output", "", "irq") in ports
    assert any(n == "stall_units" and w.startswith("[") for _, w, n in ports)
    assert {d for d, _, _ in ports} == {"input", "output"}


def test_the_wrapper_drives_the_clock_and_registers_reset_and_stalls(tmp_path):
    out = tmp_path / "top.v"
    name = write_clocked_top(SOC.path, SOC.name, out, 10)
    text = out.read_text()
    assert name == clocked_top_name(SOC.name)
    header = re.search(rf"module {name}\(([^;]*)\);", text).group(1)
    outside = [p.strip() for p in header.split(",")]
    assert "clk" not in outside and len(outside) == len(soc_ports(SOC.path.read_text(), SOC.name)) - 1
    assert "always #5 clk = ~clk;" in text
    for signal in REGISTERED_INPUTS:
        assert f"always @(posedge clk) {signal}_q <= {signal};" in text and f".{signal}({signal}_q)" in text
    assert ".clk(clk)" in text and ".irq(irq)" in text
    stamp = out.stat().st_mtime_ns
    write_clocked_top(SOC.path, SOC.name, out, 10)
    assert out.stat().st_mtime_ns == stamp  # unchanged text is not rewritten (no rebuild)


def test_tied_inputs_are_constants_inside_the_wrapper_not_ports(tmp_path):
    out = tmp_path / "native.v"
    tied = {"mem__awaddr": 0, "mem__awvalid": 0, "mem__bready": 1}
    write_clocked_top(SOC.path, SOC.name, out, None, ("rst",), "native", tied)
    text = out.read_text()
    header = re.search(r"module native\(([^;]*)\);", text).group(1)
    assert not set(tied) & {p.strip() for p in header.split(",")}
    assert ".mem__awaddr(32'd0)" in text and ".mem__awvalid(1'd0)" in text and ".mem__bready(1'd1)" in text
    assert "clk" in header and "input mem__arvalid;" in text  # the clock stays an input; untied ports stay ports
    with pytest.raises(ValueError, match="irq, rst cannot be tied"):
        write_clocked_top(SOC.path, SOC.name, out, None, ("rst",), "native", {"rst": 0, "irq": 0})


def test_bad_inputs_say_what_was_wrong(tmp_path):
    with pytest.raises(ValueError, match="no module 'nope'"):
        soc_ports(SOC.path.read_text(), "nope")
    with pytest.raises(ValueError, match="ports b of its header"):
        soc_ports("module m(a, b);\n  input clk;\n  input a;\nendmodule\n".replace("(a, b)", "(clk, a, b)"), "m")
    with pytest.raises(ValueError, match="no clk input"):
        soc_ports("module m(a);\n  input a;\nendmodule\n", "m")
    with pytest.raises(ValueError, match="even number"):
        write_clocked_top(SOC.path, SOC.name, tmp_path / "t.v", 7)


def test_the_clocked_top_refuses_the_bus_host_path():
    from dx1_bringup.sim.serve import serve

    with pytest.raises(ValueError, match="backdoor only"):
        serve(clock="verilator", host_path="bus")
