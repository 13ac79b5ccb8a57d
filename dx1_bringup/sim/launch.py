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

__all__ = ["PrivateSimTransport", "start_simulator"]

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
        try:
            self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _close(self) -> None:
        try:
            super()._close()
        finally:
            self._stop(BROKEN_EXIT if self.broken else CLEAN_EXIT)


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
        deadline = time.monotonic() + timeout
        while not port_file.exists():
            if process.poll() is not None:
                raise TransportError(f"the simulator exited before listening:\n{process.stderr.read()[-2000:]}")
            if time.monotonic() > deadline:
                process.kill()
                raise TransportError(f"the simulator did not start listening within {timeout:.0f} s")
            time.sleep(0.2)
        return process, int(port_file.read_text())
