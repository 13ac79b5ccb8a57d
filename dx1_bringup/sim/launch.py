"""Starting a private simulator process: the SoC or the whole board behind a loopback TCP socket.

The framework owns the simulator process: :func:`start_simulator` starts it, and
:class:`PrivateSimTransport` (what ``open_transport("sim")`` returns) stops it when the transport
closes.  The driver's :class:`~dx1_driver.sim_transport.SimTransport` knows only its socket.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dx1_driver import TransportError
from dx1_driver.sim_transport import SimTransport

from ..spec import SimOp

__all__ = ["PrivateSimTransport", "BoardProcess", "BoardSimTransport", "start_simulator", "start_board",
           "open_board"]

#: Seconds a simulator that answered CLOSE gets to exit; one whose link broke gets :data:`BROKEN_EXIT`.
CLEAN_EXIT = 60.0
BROKEN_EXIT = 5.0


class PrivateSimTransport(SimTransport):
    """A :class:`SimTransport` to a simulator started for it alone (:func:`start_simulator`), stopped on close.

    Parameters
    ----------
    process:
        The simulator process; this transport owns it: :meth:`close` asks the server to exit, waits for
        it (:data:`CLEAN_EXIT` seconds, :data:`BROKEN_EXIT` after a broken link) and kills it if it does not.
    port:
        The port it listens on, on 127.0.0.1.
    **kwargs:
        ``timeout`` and ``per_byte`` of :class:`SimTransport`.
    """

    def __init__(self, process: subprocess.Popen, port: int, **kwargs: float):
        self.process = process
        try:
            super().__init__("127.0.0.1", port, stop_server=True, **kwargs)
        except BaseException:
            self._stop(BROKEN_EXIT)
            raise

    def _lost_note(self) -> str:
        if self.process.poll() is None:
            return ""
        return f" (the simulator process exited with code {self.process.returncode})"

    def _stop(self, seconds: float) -> None:
        stop_process(self.process, seconds)

    def _close(self) -> None:
        try:
            super()._close()
        finally:
            self._stop(BROKEN_EXIT if self.broken else CLEAN_EXIT)


class BoardProcess:
    """The one simulator process of a board of chips (:func:`start_board`), shared by its chips' transports.

    It is stopped (as :class:`PrivateSimTransport` stops its own) once every chip's transport has closed.
    """

    def __init__(self, process: subprocess.Popen, chips: int):
        self.process = process
        self._open = chips
        self._broken = False

    def closed(self, broken: bool) -> None:
        """A chip's transport closed (``broken``: its link had failed); after the last, stop the process."""
        self._open -= 1
        self._broken = self._broken or broken
        if self._open == 0:
            stop_process(self.process, BROKEN_EXIT if self._broken else CLEAN_EXIT)


class BoardSimTransport(SimTransport):
    """Chip ``rank``'s :class:`SimTransport` to a board of chips in one simulator (``sim:chips=N``).

    ``board_transports`` (on rank 0's, as ``model:chips=N`` has it) lists every chip's, in rank order.
    """

    def __init__(self, board: BoardProcess, rank: int, port: int, **kwargs: float):
        self.board, self.rank = board, rank
        self.board_transports: list[BoardSimTransport] = []
        super().__init__("127.0.0.1", port, stop_server=True, **kwargs)

    def _lost_note(self) -> str:
        process = self.board.process
        return "" if process.poll() is None else f" (the simulator process exited with code {process.returncode})"

    def cut(self, port: int, cut: bool = True) -> None:
        """Cut (or mend) the wire leaving link ``port`` of this chip: a cut link, both ends go down."""
        self._request(SimOp.CUT, port, int(cut))

    def _close(self) -> None:
        try:
            super()._close()
        finally:
            self.board.closed(bool(self.broken))


def stop_process(process: subprocess.Popen, seconds: float) -> None:
    """Wait ``seconds`` for ``process`` to exit; kill it if it does not."""
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_ports(process: subprocess.Popen, port_file: Path, timeout: float) -> list[int]:
    """The ports ``process`` wrote to ``port_file`` once listening (space-separated, one a chip)."""
    deadline = time.monotonic() + timeout
    while not port_file.exists():
        if process.poll() is not None:
            raise TransportError(f"the simulator exited before listening:\n{process.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise TransportError(f"the simulator did not start listening within {timeout:.0f} s")
        time.sleep(0.2)
    return [int(port) for port in port_file.read_text().split()]


def start_board(chips: int, *, tiles: int | None = None, banks: int | None = None, mem_mib: int | None = None,
                vector: int | None = None, threads: int = 1,
                timeout: float = 3600.0) -> tuple[subprocess.Popen, list[int]]:
    """Start a private `dx1 sim serve --chips N --once`: a ring of ``chips`` chips of the default SoC (with
    ``tiles``, ``banks``, ``mem_mib``, ``vector`` as :func:`start_simulator` takes them) and the default link,
    in one server process, one instance of one Verilator model of a chip each
    (:func:`~dx1_bringup.sim.configs.chip_verilog`; generated and built the first time, minutes, and then shared by
    boards of every size), its chips ticked on ``threads`` threads; the process and each chip's port, in rank
    order.

    Raises
    ------
    TransportError
        The simulator exited before it listened, or did not listen within ``timeout`` seconds.
    """
    sizes = {"tiles": tiles, "banks": banks, "mem-mib": mem_mib, "vector": vector}
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        process = subprocess.Popen(
            [sys.executable, "-m", "dx1_bringup.sim.serve", "--once", "--port-file", str(port_file),
             f"--chips={chips}", f"--threads={threads}"]
            + [f"--{key}={value}" for key, value in sizes.items() if value is not None],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ports = _wait_ports(process, port_file, timeout)
    if len(ports) != chips:
        process.kill()
        process.wait()
        raise TransportError(f"the board simulator listened on {len(ports)} ports for {chips} chips")
    return process, ports


def open_board(chips: int, **sizes: int | None) -> list[BoardSimTransport]:
    """Start a board of ``chips`` chips (:func:`start_board`, ``sizes`` and threads as it takes them) and connect to
    each chip; rank 0's transport lists them all in ``board_transports``."""
    process, ports = start_board(chips, **sizes)
    board = BoardProcess(process, chips)
    transports: list[BoardSimTransport] = []
    try:
        for rank, port in enumerate(ports):
            transports.append(BoardSimTransport(board, rank, port))
    except BaseException:
        for transport in transports:
            transport.close()
        stop_process(process, BROKEN_EXIT)
        raise
    transports[0].board_transports = list(transports)
    return transports


def start_simulator(*, uart: bool = False, timeout: float = 900.0, fault_rate: float = 0.0,
                    fault_seed: int = 1, host_path: str = "backdoor",
                    verilog: str | Path | None = None, tiles: int | None = None, banks: int | None = None,
                    mem_mib: int | None = None, vector: int | None = None, clock: str = "cocotb",
                    server: str | None = None) -> tuple[subprocess.Popen, int]:
    """Start a private `dx1 sim serve --once` and return it with its port (the first run builds it: minutes).

    With ``uart``, the simulated board's UART is served (for a ``SerialTransport`` on
    ``socket://127.0.0.1:PORT``); otherwise the SoC's register and memory ports (for a ``SimTransport``).
    ``fault_rate`` and ``fault_seed`` (``uart`` only) inject line faults as ``dx1 sim serve --fault-rate``
    does.  ``host_path`` (SoC only) is how host memory blocks are served: ``"backdoor"`` straight into the
    memory array, ``"bus"`` through the AXI4 memory port (:mod:`dx1_bringup.sim.backdoor`).  ``verilog``
    (not with ``uart``) serves that Verilog file of the SoC instead of the generated one
    (``dx1 sim serve --verilog``).  ``tiles``, ``banks``, ``mem_mib`` and ``vector`` (not with ``uart`` nor
    ``verilog``) serve the default SoC with that many tiles, memory banks and MiB of device memory, and for
    ``vector`` 0 tiles without a vector unit (``dx1 sim serve --tiles T --banks B --mem-mib M --vector 0``:
    generated into
    ``build/sim/configs/`` and built there, minutes the first time).  ``clock`` (SoC only) is what drives
    its clock, as ``dx1 sim serve --clock`` takes it; ``server`` what serves it, ``"native"`` or
    ``"cocotb"`` (``None``: as ``dx1 sim serve`` chooses, :func:`~dx1_bringup.sim.serve.choose_server`).  The
    server stops when its client disconnects.

    Raises
    ------
    ValueError
        ``fault_rate`` is outside 0 to 0.5, or given without ``uart``; ``tiles``, ``banks``, ``mem_mib`` or ``vector``
        is given with ``uart`` or ``verilog``.
    TransportError
        The simulator exited before it listened, or did not listen within ``timeout`` seconds.
    """
    if fault_rate and not uart:
        raise ValueError(f"fault_rate needs uart=True (faults are injected on the serial line), not {fault_rate!r}")
    if not 0 <= fault_rate < 0.5:
        raise ValueError(f"fault_rate must be from 0 to 0.5, not {fault_rate!r}")
    sizes = {"tiles": tiles, "banks": banks, "mem-mib": mem_mib, "vector": vector}
    if any(v is not None for v in sizes.values()) and (uart or verilog is not None):
        raise ValueError("tiles, banks, mem_mib and vector configure the generated SoC; they cannot be given with "
                         "uart or verilog")
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        process = subprocess.Popen(
            [sys.executable, "-m", "dx1_bringup.sim.serve", "--once", "--port-file", str(port_file)]
            + (["--uart", f"--fault-rate={fault_rate!r}", f"--fault-seed={fault_seed}"] if uart
               else [f"--host-path={host_path}", f"--clock={clock}"])
            + ([f"--server={server}"] if server else [])
            + (["--verilog", str(verilog)] if verilog is not None else [])
            + [f"--{key}={value}" for key, value in sizes.items() if value is not None],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        return process, _wait_ports(process, port_file, timeout)[0]
