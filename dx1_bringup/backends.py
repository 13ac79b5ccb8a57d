"""The framework's backends of the driver: the golden model and the private simulator.

The driver (:mod:`dx1_driver`) never imports the framework; the framework registers these with it
instead, through the ``dx1_driver.backends`` entry point (pyproject.toml), which calls
:func:`register`:

* ``model``: :class:`ModelTransport`, the device model in this process;
* ``model:FAULTS``: the same with broken device memory (:meth:`MemoryFaults.parse`), for example
  ``model:stuck-bit=5`` or ``model:alias-bit=12``, or stalled units (:meth:`UnitStalls.parse`),
  ``model:stall=dma0+core1``, or a window answering bus errors (:meth:`BusErrors.parse`),
  ``model:bus-error=0x1000+0x40``; ``model:tiles=T,banks=B,mem_mib=M`` (any of the three, with faults or
  not) a SoC of that many tiles, memory banks and MiB of device memory;
* ``sim``: a private simulator of the SoC (:func:`~dx1_bringup.sim.launch.start_simulator`) behind a
  :class:`~dx1_bringup.sim.launch.PrivateSimTransport` that stops it on close; ``sim:verilog=PATH`` the same
  for another Verilog file of the SoC (a mutant of ``rtl/dx1_soc.v``, built beside it);
  ``sim:tiles=T,banks=B,mem_mib=M`` (any of the three) the SoC generated with that many tiles, memory
  banks and MiB of device memory (:mod:`dx1_bringup.sim.configs`), the same device as
  ``model:tiles=T,banks=B,mem_mib=M``; any of them with ``stall=UNIT[+UNIT...]`` (``sim:stall=core1``)
  stalls those units from the start, as ``model:stall=core1`` does: unit stalls are the fault kind both
  backends inject, so both take it the same way (memory faults and bus-error windows are the model's);
  and with ``server=native`` (the default: :mod:`dx1_bringup.sim.native`, the socket served in C++) or
  ``server=cocotb`` (:mod:`dx1_bringup.sim.soc_server`, the socket served by Python under cocotb);
  ``sim:chips=N`` (with the sizes or not) a board of N chips in a ring in one simulator process, N instances
  of one Verilator model of a chip (:func:`open_sim_board`), as ``model:chips=N`` is one of golden-model chips.

:class:`ModelBar` and :func:`model_pcie_transport` serve the PCIe transport's BARs from the device
model, so the PCIe access layer is tested without a card; :func:`loopback_model_transport` puts the
device model behind the Python bridge model (:class:`~dx1_bringup.model.bridge.ModelBridge`) on a local
socket, so the serial transport is tested without a board.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dx1_driver import BusErrorResponse, register_backend
from dx1_driver.pcie import BarMapping, PcieTransport
from dx1_driver.serial_transport import SerialTransport
from dx1_driver.sim_transport import SimTransport
from dx1_driver.transport import Transport

from .faults import BusErrors, LineFaults, MemoryFaults, UnitStalls, parse_faults
from .model.board import ModelBoard
from .model.bridge import ModelBridge
from .model.device import BusError, DeviceModel
from .sim.launch import PrivateSimTransport, start_simulator
from .sim.native import SERVERS
from .spec import MAX_CHIPS, SimOp, SocConfig, stall_bit

__all__ = ["ModelTransport", "ModelBar", "model_pcie_transport", "loopback_model_transport", "open_model",
           "open_model_board", "open_sim", "open_sim_board",
           "register", "set_stalls"]


class ModelTransport(Transport):
    """A transport to the golden model of the whole device, in this process.

    Parameters
    ----------
    config:
        The device's configuration; ``None`` for the default device.
    faults:
        Breaks the model's device memory (for bring-up scripts to find); ``None`` for a working device.
    stalls:
        Units stalled from the start (:class:`UnitStalls`); ``None`` for none.
    bus_errors:
        A window of device memory answering error responses (:class:`BusErrors`); ``None`` for none.
    """

    has_irq_line = True

    def __init__(self, config: SocConfig | None = None, faults: MemoryFaults | None = None,
                 stalls: UnitStalls | None = None, bus_errors: BusErrors | None = None, *,
                 model: DeviceModel | None = None):
        self.model = model if model is not None else DeviceModel(config, faults=faults, stalls=stalls,
                                                                 bus_errors=bus_errors)
        #: The chip's board (``model:chips=N``), whose lock every access takes; None for a single chip.
        self.board = self.model.board
        #: Every chip's transport of the board, in rank order, on the transport a board was opened through
        #: (rank 0's; a group opener, ``DeviceGroup.open("model:chips=4")``, opens the others from it); else [].
        self.board_transports: list[ModelTransport] = []
        self._lock = self.board.lock if self.board is not None else threading.RLock()
        super().__init__(self.model.regmap.size, self.model.config.mem_bytes)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            with self._lock:
                return fn(*args)
        except BusError as e:
            raise BusErrorResponse(f"model bus error on {what}: {e}") from e

    def _read32(self, addr: int) -> int:
        return self._call(f"register read at 0x{addr:x}", self.model.read32, addr)

    def _write32(self, addr: int, value: int) -> None:
        self._call(f"register write at 0x{addr:x}", self.model.write32, addr, value)

    def _read_block(self, addr: int, n: int) -> bytes:
        return self._call(f"memory read at 0x{addr:x}", self.model.mem_read, addr, n)

    def _write_block(self, addr: int, data: bytes) -> None:
        self._call(f"memory write at 0x{addr:x}", self.model.mem_write, addr, data)

    def _wait_irq(self, timeout: float) -> bool:
        # The model runs commands synchronously inside the doorbell write, so only another chip of the
        # board (another rank's thread) can change anything while we wait: poll for it.
        end = time.monotonic() + timeout
        while True:
            with self._lock:
                if self.model.irq_pending():
                    return True
            if self.board is None or time.monotonic() >= end:
                if self.board is None:
                    time.sleep(timeout)
                    with self._lock:
                        return self.model.irq_pending()
                return False
            time.sleep(min(0.001, max(0.0, end - time.monotonic())))


class ModelBar(BarMapping):
    """A BAR served by the golden model: its registers (BAR0) or its device memory (BAR2).

    Parameters
    ----------
    model:
        The device model whose registers or memory the BAR shows.
    kind:
        ``"registers"`` or ``"memory"``.
    bus_errors:
        The model's exceptions that mean a bus error (default :class:`BusError`); they become
        :class:`~dx1_driver.BusErrorResponse` (a :class:`TransportError`).

    Attributes
    ----------
    accesses:
        Every access that reached the model, as ``(op, offset, length)``, so tests can
        see that a refused access never did.
    """

    def __init__(self, model: DeviceModel, kind: str, bus_errors: tuple[type[BaseException], ...] = (BusError,)):
        if kind not in ("registers", "memory"):
            raise ValueError(f"BAR kind must be 'registers' or 'memory', not {kind!r}")
        self.model = model
        self.kind = kind
        self.bus_errors = bus_errors
        self.accesses: list[tuple[str, int, int]] = []
        super().__init__(model.regmap.size if kind == "registers" else model.config.mem_bytes)

    def _call(self, op: str, offset: int, n: int, fn: Any, *args: Any) -> Any:
        self.accesses.append((op, offset, n))
        try:
            return fn(*args)
        except self.bus_errors as e:
            raise BusErrorResponse(f"bus error on {op} at BAR offset 0x{offset:x}: {e}") from e

    def _read32(self, offset: int) -> int:
        if self.kind == "registers":
            return self._call("read32", offset, 4, self.model.read32, offset)
        return int.from_bytes(self._call("read32", offset, 4, self.model.mem_read, offset, 4), "little")

    def _write32(self, offset: int, value: int) -> None:
        if self.kind == "registers":
            self._call("write32", offset, 4, self.model.write32, offset, value)
        else:
            self._call("write32", offset, 4, self.model.mem_write, offset, value.to_bytes(4, "little"))

    def _read(self, offset: int, n: int) -> bytes:
        if self.kind == "registers":
            raise ValueError("the register BAR takes only 32-bit accesses")
        return self._call("read", offset, n, self.model.mem_read, offset, n)

    def _write(self, offset: int, data: bytes) -> None:
        if self.kind == "registers":
            raise ValueError("the register BAR takes only 32-bit accesses")
        self._call("write", offset, len(data), self.model.mem_write, offset, data)


def model_pcie_transport(config: SocConfig | None = None) -> PcieTransport:
    """A :class:`~dx1_driver.pcie.PcieTransport` over BARs served by a fresh golden model."""
    model = DeviceModel(config)
    return PcieTransport("model", bars=(ModelBar(model, "registers"), ModelBar(model, "memory")))


#: The device-string keys that choose a SoC configuration, on ``model:`` and ``sim:`` alike.
SIZE_KEYS = ("tiles", "banks", "mem_mib", "vector")


def _split_sizes(device: str, text: str) -> tuple[SocConfig | None, list[str]]:
    """The SoC configuration that ``tiles=T``, ``banks=B`` and ``mem_mib=M`` items of ``text`` choose, and the
    other items.

    Returns ``None`` for the configuration when neither key is there (the default device).
    """
    sizes: dict[str, int] = {}
    rest = []
    for item in text.split(",") if text else []:
        key, sep, value = item.partition("=")
        if key not in SIZE_KEYS:
            rest.append(item)
            continue
        if key in sizes:
            raise ValueError(f"device {device!r}: {key}= is given twice; expected it once")
        try:
            sizes[key] = int(value, 10)
        except ValueError:
            raise ValueError(f"device {device!r}: {key}= must be a whole number, not {value!r}") from None
    if not sizes:
        return None, rest
    from .sim.configs import soc_config

    try:
        return soc_config(sizes.get("tiles"), sizes.get("banks"), sizes.get("mem_mib"), sizes.get("vector")), rest
    except (TypeError, ValueError) as e:
        raise ValueError(f"device {device!r}: {e}") from None


def _split_chips(device: str, items: list[str]) -> tuple[int | None, list[str]]:
    """The ``chips=N`` item of ``items`` (None when there is none) and the other items."""
    chips = [item for item in items if item.partition("=")[0] == "chips"]
    rest = [item for item in items if item.partition("=")[0] != "chips"]
    if not chips:
        return None, rest
    if len(chips) > 1:
        raise ValueError(f"device {device!r}: chips= is given twice; expected it once")
    value = chips[0].partition("=")[2]
    if not value.isdigit() or not 1 <= int(value) <= MAX_CHIPS:
        raise ValueError(f"device {device!r}: chips= must be a whole number of chips from 1 to {MAX_CHIPS}, "
                         f"not {value!r}")
    return int(value), rest


def open_model_board(device: str) -> list[ModelTransport]:
    """Open ``model:chips=N[,ITEMS]``: a fresh :class:`~dx1_bringup.model.board.ModelBoard` of N chips in a ring,
    one transport a chip in rank order (the ITEMS as :func:`open_model` takes them; faults act on chip 0).

    Raises
    ------
    ValueError
        No ``chips=N`` item, or an item :func:`open_model` refuses (the message names the device string).
    """
    if not device.startswith("model:"):
        raise ValueError(f"device {device!r}: a board of model chips is model:chips=N[,ITEMS]")
    config, rest = _split_sizes(device, device[len("model:"):])
    chips, rest = _split_chips(device, rest)
    if chips is None:
        raise ValueError(f"device {device!r}: a board of model chips needs chips=N (1 to {MAX_CHIPS})")
    try:
        kinds = parse_faults(",".join(rest), (MemoryFaults, UnitStalls, BusErrors)) if rest else {}
    except ValueError as e:
        raise ValueError(f"device {device!r}: {e}") from None
    board = ModelBoard(chips, config, faults=kinds.get(MemoryFaults), stalls=kinds.get(UnitStalls),
                       bus_errors=kinds.get(BusErrors))
    transports = [ModelTransport(model=dev) for dev in board.devices]
    transports[0].board_transports = list(transports)
    return transports


def open_model(device: str) -> ModelTransport:
    """Open ``model`` or ``model:ITEMS``: ``tiles=T``, ``banks=B``, ``mem_mib=M``, ``vector=0`` (the SoC's tiles,
    memory banks, MiB of device memory, and tiles without a vector unit, as ``sim:`` has them), ``chips=N``
    (rank 0 of a fresh board of N chips in a ring, :func:`open_model_board`) and FAULTS, comma-separated, in any
    order.

    Raises
    ------
    ValueError
        An item is neither ``tiles=``/``banks=``/``mem_mib=`` with a count the SoC takes nor a description of
        memory faults, unit stalls and a bus-error window (the message names the device string).
    """
    if device == "model":
        return ModelTransport()
    config, rest = _split_sizes(device, device[len("model:"):])
    if _split_chips(device, rest)[0] is not None:
        return open_model_board(device)[0]
    if config is not None and not rest:
        return ModelTransport(config)
    try:
        kinds = parse_faults(",".join(rest), (MemoryFaults, UnitStalls, BusErrors))
        return ModelTransport(config, faults=kinds.get(MemoryFaults), stalls=kinds.get(UnitStalls),
                              bus_errors=kinds.get(BusErrors))
    except ValueError as e:
        raise ValueError(f"device {device!r}: {e}") from None


#: What ``sim:`` takes besides the sizes, for messages.
_SIM_FORMS = ("expected sim, sim:tiles=T,banks=B,mem_mib=M,vector=V (any of them: 1 to 8 tiles, a power of two of "
              "banks from 1 to 16 and of MiB, vector 0 for tiles without a vector unit) or sim:verilog=PATH with "
              "PATH an existing Verilog file of the SoC, either with stall=UNIT[+UNIT...] or alone, and any of them "
              "with server=native (the default) or server=cocotb")


def _sim_stalls(device: str, items: list[str], tiles: int) -> UnitStalls | None:
    """The unit stalls of ``items`` (fault-string items of a ``sim:`` device string), checked against ``tiles``.

    Stalls are the one fault kind the simulated SoC and the golden model both inject (its ``stall_units``
    input); the others are the model's alone, and are refused here naming where they can be had.
    """
    if not items:
        return None
    stalls_only = all(item.partition("=")[0] == "stall" for item in items)
    try:
        kinds = parse_faults(",".join(items), (UnitStalls,) if stalls_only else (MemoryFaults, UnitStalls, BusErrors))
    except ValueError as e:
        raise ValueError(f"device {device!r}: {e if stalls_only else _SIM_FORMS}") from None
    model_only = [str(fault) for kind, fault in kinds.items() if kind is not UnitStalls]
    if model_only:
        raise ValueError(f"device {device!r}: {', '.join(model_only)} is a fault of the golden model only "
                         f"(model:{','.join(model_only)}); the simulated SoC injects stall=UNIT[+UNIT...]")
    stalls = kinds[UnitStalls]
    for unit, tile in sorted(stalls.units):
        if tile >= tiles:
            raise ValueError(f"device {device!r}: cannot stall {unit}{tile}: the device has tiles 0 to {tiles - 1}")
    return stalls


def open_sim(device: str) -> SimTransport:
    """Open ``sim``, ``sim:verilog=PATH`` or ``sim:tiles=T,banks=B,mem_mib=M`` (any of the three keys, in any
    order), each also with ``stall=UNIT[+UNIT...]``: start a private simulator of the SoC, of
    ``rtl/dx1_soc.v``, another Verilog file of it, or the SoC generated with that many tiles, memory banks
    and MiB of device memory (minutes, the first time of each), with those units stalled from the start
    (the same fault as ``model:stall=...``, through the SoC's ``stall_units`` input; :func:`set_stalls`
    changes them later).

    Raises
    ------
    ValueError
        After ``sim:`` comes something other than ``verilog=`` and the path of an existing file, ``tiles=``,
        ``banks=`` and ``mem_mib=`` with counts the SoC takes, and ``stall=`` with units of its tiles (a
        fault only the golden model injects is refused naming it).  Nothing is started then.
    """
    if _parse_sim_board(device) is not None:
        return open_sim_board(device)[0]
    verilog, config, stalls, server = _parse_sim(device)
    if config is None:
        process, port = start_simulator(verilog=verilog, server=server)
    else:
        process, port = start_simulator(tiles=config.tiles, banks=config.mem_banks, mem_mib=config.mem_bytes >> 20,
                                        vector=int(config.tile.vector), server=server)
    transport = PrivateSimTransport(process, port)
    if stalls is not None:
        try:
            set_stalls(transport, stalls.units)
        except BaseException:
            transport.close()
            raise
    return transport


def _parse_sim_board(device: str) -> tuple[int, SocConfig | None, int] | None:
    """The chip count, SoC configuration and thread count of a
    ``sim:chips=N[,tiles=T,banks=B,mem_mib=M,vector=V,threads=H]`` device string; None when it has no ``chips=``
    item.  Starts nothing.

    Raises
    ------
    ValueError
        ``chips=`` is not 2 to MAX_CHIPS, a size is one the SoC does not take, ``threads=`` is not 1 to the chip
        count, or another item is given (stalls, ``verilog=``, ``server=`` other than native: a board is generated
        and served natively).
    """
    if not device.startswith("sim:"):
        return None
    config, rest = _split_sizes(device, device[len("sim:"):])
    chips, rest = _split_chips(device, rest)
    if chips is None:
        return None
    if chips < 2:
        raise ValueError(f"device {device!r}: a board of simulated chips has chips=2 to {MAX_CHIPS} (one chip is "
                         f"sim, or sim:tiles=...)")
    threads = [item.partition("=")[2] for item in rest if item.partition("=")[0] == "threads"]
    rest = [item for item in rest if item != "server=native" and item.partition("=")[0] != "threads"]
    if len(threads) > 1 or (threads and not (threads[0].isdigit() and 1 <= int(threads[0]) <= chips)):
        raise ValueError(f"device {device!r}: threads= takes the number of threads that tick the board's chips, 1 "
                         f"to {chips}, once; not {','.join(threads)!r}")
    if rest:
        raise ValueError(f"device {device!r}: a board of simulated chips takes tiles=, banks=, mem_mib=, vector= and "
                         f"threads= besides chips=, not {','.join(rest)!r} "
                         f"(sim:chips=N[,tiles=T,banks=B,mem_mib=M,vector=V,threads=H])")
    return chips, config, int(threads[0]) if threads else 1


def open_sim_board(device: str) -> list[SimTransport]:
    """Open ``sim:chips=N[,tiles=T,banks=B,mem_mib=M,vector=V,threads=H]``: a private simulator of N chips of that
    SoC (the default link) in a ring in one simulator process (:func:`~dx1_bringup.sim.launch.open_board`; its chip
    model generated and built the first time, minutes), its chips ticked on H threads (default 1; the same cycles
    on any number), one transport a chip in rank order, rank 0's listing all in ``board_transports`` (so
    ``DeviceGroup.open("sim:chips=4")`` makes a rank of each).

    Raises
    ------
    ValueError
        As :func:`_parse_sim_board`, or no ``chips=`` item.  Nothing is started then.
    """
    from .sim.launch import open_board

    parsed = _parse_sim_board(device)
    if parsed is None:
        raise ValueError(f"device {device!r}: a board of simulated chips is sim:chips=N[,ITEMS]")
    chips, config, threads = parsed
    sizes = {} if config is None else {"tiles": config.tiles, "banks": config.mem_banks,
                                       "mem_mib": config.mem_bytes >> 20, "vector": int(config.tile.vector)}
    return open_board(chips, threads=threads, **sizes)


def _parse_sim(device: str) -> tuple[Path | None, SocConfig | None, UnitStalls | None, str | None]:
    """What a ``sim`` device string asks for: another Verilog file, a SoC configuration, unit stalls, the server.

    Raises ``ValueError`` as :func:`open_sim` does; starts nothing.
    """
    verilog, config, stalls, server = None, None, None, None
    if device != "sim":
        config, rest = _split_sizes(device, device[len("sim:"):])
        servers = [item.partition("=")[2] for item in rest if item.startswith("server=")]
        rest = [item for item in rest if not item.startswith("server=")]
        if len(servers) > 1 or (servers and servers[0] not in SERVERS):
            raise ValueError(f"device {device!r}: server= takes one of {', '.join(SERVERS)} once, not "
                             f"{','.join(servers)!r}")
        server = servers[0] if servers else None
        paths = [item for item in rest if item.startswith("verilog=")]
        faults = [item for item in rest if not item.startswith("verilog=")]
        if paths and config is not None:
            raise ValueError(f"device {device!r}: after tiles=, banks=, mem_mib= and vector= expected no verilog=, not "
                             f"{','.join(paths)!r} (sim:verilog=PATH serves a given Verilog file alone)")
        if len(paths) > 1 or (paths and not Path(paths[0][len("verilog="):]).is_file()) or (
                config is None and not paths and not faults and server is None):
            raise ValueError(f"device {device!r}: {_SIM_FORMS}")
        verilog = Path(paths[0][len("verilog="):]) if paths else None
        stalls = _sim_stalls(device, faults, (config or SocConfig()).tiles)
    return verilog, config, stalls, server


def _check_model(device: str) -> None:
    # Opening the model is the whole check: it is in this process, and at most 16 MiB of numpy memory.
    open_model(device).close()


def _check_sim(device: str) -> None:
    if _parse_sim_board(device) is None:
        _parse_sim(device)


def set_stalls(transport: Transport, units: Iterable[tuple[str, int]]) -> None:
    """Stall exactly ``units`` (``(unit, tile)`` pairs, see :mod:`dx1_bringup.spec.stall`) from now on.

    A test hook with the same meaning on both backends: the golden model's :meth:`DeviceModel.set_stalls`,
    or the simulator's ``stall_units`` input (the sim server's STALL request).

    Raises
    ------
    TypeError
        ``transport`` reaches neither the model nor a simulator.
    """
    units = frozenset(units)
    if isinstance(transport, ModelTransport):
        transport.model.set_stalls(units)
    elif isinstance(transport, SimTransport):
        mask = 0
        for unit, tile in units:
            mask |= stall_bit(unit, tile)
        transport._request(SimOp.STALL, 0, mask)
    else:
        raise TypeError(f"units can be stalled on the model or the simulator, not through {type(transport).__name__}")


def register() -> None:
    """Register ``model``, ``model:ITEMS``, ``sim`` and ``sim:ITEMS`` with the driver (the entry point)."""
    register_backend("model", open_model, "model")
    register_backend("model:", open_model, ("model:[tiles=T,banks=B,mem_mib=M,]FAULTS",
                                            "model:chips=N[,tiles=T,...]"), check=_check_model)
    register_backend("sim", open_sim, "sim")
    register_backend("sim:", open_sim, ("sim:tiles=T,banks=B,mem_mib=M", "sim:verilog=PATH",
                                        "sim:[...,]stall=UNIT[+UNIT...]", "sim:chips=N[,tiles=T,...]"),
                     check=_check_sim)


class _LoopbackTransport(SerialTransport):
    """A :class:`SerialTransport` that owns its :class:`ModelBridge` and stops it on close."""

    def __init__(self, bridge: ModelBridge, **kwargs: Any):
        self.bridge = bridge
        try:
            super().__init__(bridge.url, **kwargs)
        except BaseException:
            bridge.close()
            raise

    def _close(self) -> None:
        try:
            super()._close()
        finally:
            self.bridge.close()


def loopback_model_transport(fault_rate: float = 0.0, seed: int = 0, *, scope: str = "all",
                             config: SocConfig | None = None, **kwargs: Any) -> SerialTransport:
    """A :class:`SerialTransport` to a fresh golden model behind a :class:`ModelBridge` on 127.0.0.1.

    Parameters
    ----------
    fault_rate:
        Bit error rate of the line; bytes are also dropped and duplicated at this rate each.
    seed:
        Seed of the faults.
    scope:
        Which traffic the faults hit (see :class:`LineFaults`).
    config:
        The device's configuration; ``None`` for the default device.
    kwargs:
        Passed to :class:`SerialTransport`; the defaults here suit a local socket (short timeouts).

    Returns
    -------
    SerialTransport
        With attribute ``bridge``; closing it stops the bridge.
    """
    faults = LineFaults.uniform(fault_rate, seed=seed, scope=scope)
    model = DeviceModel(config)
    bridge = ModelBridge(model, model.config.mem_bytes, (BusError,), faults=faults, idle_timeout=0.02)
    options: dict[str, Any] = {"timeout": 0.1, "quiet": 0.04}
    options.update(kwargs)
    return _LoopbackTransport(bridge, **options)
