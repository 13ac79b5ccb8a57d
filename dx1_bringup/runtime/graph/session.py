"""Running a quantised graph on a DX-1 device: weights resident, activations planned, whole command streams.

:class:`GraphSession` lowers a :class:`~.ir.Graph` once for a device:

* every :class:`~.ir.QLinear`'s weight (as the padded ``(Kp, Np)`` B operand, ``weight.T``) and bias are
  uploaded once, into a region that stays allocated while the session is open;
* every int8 value a device operator reads or writes gets a place in one activation arena planned by
  liveness (:mod:`.memory`), in the padded row-major layout the tiling compiler reads and writes
  (``rows x padded(cols)``, the padding columns zero), so a layer's output *is* the next layer's input
  and consecutive device operators never round-trip through the host;
* consecutive device operators form a *segment*: one command stream per tile, a barrier between
  operators where the next reads what the previous wrote (SIGNAL/WAIT semaphores between tiles, a FENCE
  on one tile), driven as a whole; a :class:`~.ir.HostOp` between segments runs in numpy, with its
  inputs downloaded and its output uploaded.

:meth:`GraphSession.run` executes one forward pass and returns the outputs with :class:`RunStats`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from dx1_driver import Device, DriverError

from ...spec import Opcode, pack_command
from ..gemm import GemmStats, compile_gemm, drive
from ..operands import ACC_LANE_BYTES, padded
from .ir import Graph, HostOp, QLinear
from .memory import ArenaPlan, Lifetime, plan_arena

__all__ = ["GraphSession", "RunStats", "Segment"]

_NUMPY = {"int8": np.int8, "int32": np.int32, "float32": np.float32}


@dataclass
class Segment:
    """Operators that run together: on the device (one stream per tile) or one host operator."""

    device: bool
    ops: list[int]
    #: Per tile, the commands of the whole segment, barriers included (device segments only).
    commands: list[list[bytes]] = field(default_factory=list)
    #: Values the host writes before the segment and reads after it.
    uploads: list[str] = field(default_factory=list)
    downloads: list[str] = field(default_factory=list)
    #: Useful and issued MACs of the segment's GEMMs.
    macs: int = 0


@dataclass
class RunStats:
    """What one forward pass did on the device and between host and device."""

    device_segments: int
    host_ops: int
    commands: int
    cycles: int
    macs: int
    tiles: int
    array: int
    host_bytes_written: int
    host_bytes_read: int
    transfers: int
    wall_seconds: float
    #: Transport requests the pass made, where the transport counts them (sim, serial); else ``None``.
    round_trips: int | None = None

    @property
    def utilisation(self) -> float:
        """MACs / (cycles x array^2 x tiles) over the device segments."""
        return self.macs / (self.cycles * self.array ** 2 * self.tiles) if self.cycles else 0.0


def _round_trips(device: Device) -> int | None:
    counter = getattr(device.transport, "round_trips", None)
    if counter is None:
        stats = getattr(device.transport, "stats", None)
        counter = getattr(stats, "round_trips", None)
    return counter


class GraphSession:
    """A graph lowered for one device, its weights resident until :meth:`close`.

    Parameters
    ----------
    device:
        An open device.
    graph:
        The quantised graph; validated here.
    tiles:
        Tiles to spread each operator over (default: all).
    timeout:
        Seconds without progress before the driver's ``DeviceTimeout``.

    Raises
    ------
    ValueError
        The graph is malformed, or its weights and activations do not fit in device memory.
    """

    def __init__(self, device: Device, graph: Graph, *, tiles: int | None = None, timeout: float = 5.0):
        graph.validate()
        self.device, self.graph, self.timeout = device, graph, timeout
        caps = device.caps
        self.tiles = caps.tiles if tiles is None else tiles
        if isinstance(self.tiles, bool) or not isinstance(self.tiles, int) or not 1 <= self.tiles <= caps.tiles:
            raise ValueError(f"tiles must be an integer from 1 to {caps.tiles}, not {tiles!r}")
        self.array = caps.array
        self.segments = self._segments()
        self.arena: ArenaPlan = plan_arena(self._lifetimes(), device.allocator.alignment)
        self.weight_bytes = sum(self._weight_size(op) for op in self._device_ops())
        need = self.weight_bytes + self.arena.size
        if need > caps.mem_bytes:
            raise ValueError(f"the graph needs {need} bytes of device memory ({self.weight_bytes} of weights, "
                             f"{self.arena.size} of activations); the device has {caps.mem_bytes}")
        self._weights_base = device.alloc(max(self.weight_bytes, 1))
        try:
            self._arena_base = device.alloc(max(self.arena.size, 1))
        except BaseException:
            device.free(self._weights_base)
            raise
        self._closed = False
        self._weight_addr: dict[str, tuple[int, int | None]] = {}
        self._upload_weights()
        for seg in self.segments:
            if seg.device:
                self._lower(seg)

    # -- planning --------------------------------------------------------------------------------

    def _device_ops(self) -> list[QLinear]:
        return [op for op in self.graph.ops if isinstance(op, QLinear)]

    def _segments(self) -> list[Segment]:
        segments: list[Segment] = []
        for i, op in enumerate(self.graph.ops):
            if op.on_device and segments and segments[-1].device:
                segments[-1].ops.append(i)
            else:
                segments.append(Segment(op.on_device, [i]))
        for seg in segments:
            if not seg.device:
                continue
            written = {self.graph.ops[i].out for i in seg.ops}
            read = [name for i in seg.ops for name in self.graph.ops[i].inputs]
            seg.uploads = sorted({n for n in read if n not in written and not self._produced_on_device(n, seg)})
            later = {n for other in segments if other is not seg and other.ops[0] > seg.ops[-1] and not other.device
                     for i in other.ops for n in self.graph.ops[i].inputs}
            seg.downloads = sorted(n for n in written if n in later or n in self.graph.outputs)
        return segments

    def _produced_on_device(self, name: str, seg: Segment) -> bool:
        """Whether an earlier device segment wrote ``name`` (so it is already in the arena)."""
        for i, op in enumerate(self.graph.ops):
            if op.out == name:
                return op.on_device and i < seg.ops[0]
        return False

    def _device_values(self) -> set[str]:
        names: set[str] = set()
        for op in self._device_ops():
            names.update(op.inputs)
            names.add(op.out)
        return names

    def _value_bytes(self, name: str) -> int:
        v = self.graph.values[name]
        return v.rows * padded(v.cols, self.array) * np.dtype(_NUMPY[v.dtype]).itemsize

    def _lifetimes(self) -> list[Lifetime]:
        ops, end = self.graph.ops, len(self.graph.ops)
        out = []
        for name in sorted(self._device_values()):
            producer = next((i for i, op in enumerate(ops) if op.out == name), None)
            readers = [i for i, op in enumerate(ops) if name in op.inputs and op.on_device]
            first = producer if producer is not None and ops[producer].on_device else min(readers)
            last = end if name in self.graph.outputs else max(readers + [first])
            # An uploaded value is written before its segment's first operator runs, and a downloaded one
            # is read after its last: keep each alive over the whole segment.
            for seg in self.segments:
                if name in seg.uploads:
                    first = min(first, seg.ops[0])
                if name in seg.downloads:
                    last = max(last, seg.ops[-1])
            out.append(Lifetime(name, self._value_bytes(name), first, last))
        return out

    def _weight_size(self, op: QLinear) -> int:
        n, k = op.weight.shape
        kp, np_ = padded(k, self.array), padded(n, self.array)
        size = -(-kp * np_ // self.device.allocator.alignment) * self.device.allocator.alignment
        return size + (np_ * ACC_LANE_BYTES if op.bias is not None else 0)

    def _upload_weights(self) -> None:
        addr = self._weights_base
        for op in self._device_ops():
            n, k = op.weight.shape
            kp, np_ = padded(k, self.array), padded(n, self.array)
            b = np.zeros((kp, np_), np.int8)
            b[:k, :n] = op.weight.T
            self.device.write_mem(addr, b)
            bias_addr = None
            if op.bias is not None:
                bias_addr = addr + -(-b.nbytes // self.device.allocator.alignment) * self.device.allocator.alignment
                bias = np.zeros(np_, np.int32)
                bias[:n] = op.bias
                self.device.write_mem(bias_addr, bias)
            self._weight_addr[op.name] = (addr, bias_addr)
            addr += self._weight_size(op)

    def address(self, name: str) -> int:
        """Device-memory address of an activation value (padded row-major layout)."""
        return self._arena_base + self.arena.offsets[name]

    def _barrier(self, tiles: list[int]) -> list[list[bytes]]:
        """Per tile of ``tiles``: commands after which every tile's earlier commands have completed."""
        if len(tiles) == 1:
            return [[pack_command(Opcode.FENCE, tag=0xFFFF)]]
        count = len(tiles) - 1
        return [[pack_command(Opcode.SIGNAL, tag=0xFFFF, sem=t, count=count)]
                + [pack_command(Opcode.WAIT, tag=0xFFFF, sem=u, count=1) for u in tiles if u != t]
                for t in tiles]

    def _lower(self, seg: Segment) -> None:
        caps = self.device.caps
        if self.tiles > caps.semaphores:
            raise ValueError(f"a barrier over {self.tiles} tiles needs as many semaphores; the device has "
                             f"{caps.semaphores}")
        streams: list[list[bytes]] = [[] for _ in range(self.tiles)]
        tiles = list(range(self.tiles))
        for pos, i in enumerate(seg.ops):
            op = self.graph.ops[i]
            assert isinstance(op, QLinear)
            x = self.graph.values[op.x]
            n, k = op.weight.shape
            b_addr, bias_addr = self._weight_addr[op.name]
            plan = compile_gemm(x.rows, k, n, caps, a_addr=self.address(op.x), b_addr=b_addr,
                                c_addr=self.address(op.out), bias_addr=bias_addr, post=op.post,
                                tiles=self.tiles)
            for t, cmds in enumerate(plan.commands):
                streams[t].extend(cmds)
            seg.macs += plan.useful_macs
            if pos + 1 < len(seg.ops):
                for t, cmds in zip(tiles, self._barrier(tiles), strict=True):
                    streams[t].extend(cmds)
        seg.commands = streams

    # -- running ---------------------------------------------------------------------------------

    def _check_inputs(self, inputs: dict[str, np.ndarray]) -> None:
        missing = set(self.graph.inputs) - set(inputs)
        extra = set(inputs) - set(self.graph.inputs)
        if missing or extra:
            raise ValueError(f"inputs must be exactly {sorted(self.graph.inputs)}; missing {sorted(missing)}, "
                             f"unknown {sorted(extra)}")
        for name in self.graph.inputs:
            v, a = self.graph.values[name], inputs[name]
            if not isinstance(a, np.ndarray) or a.dtype != _NUMPY[v.dtype] or a.shape != v.shape:
                raise ValueError(f"input {name!r} must be a {v.dtype} array of shape {v.shape}, not "
                                 f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")

    def run(self, inputs: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], RunStats]:
        """One forward pass: ``inputs`` by name -> ``(outputs by name, RunStats)``.

        Raises
        ------
        ValueError
            An input is missing, unknown, or of the wrong dtype or shape.
        dx1_driver.CommandError, dx1_driver.DeviceTimeout
            The device refused a command or stopped making progress.
        """
        if self._closed:
            raise DriverError("the graph session is closed")
        self._check_inputs(inputs)
        start, trips0 = time.perf_counter(), _round_trips(self.device)
        env: dict[str, np.ndarray] = dict(inputs)
        written = read = transfers = cycles = macs = commands = 0
        used = list(range(self.tiles))
        for seg in self.segments:
            if not seg.device:
                op = self.graph.ops[seg.ops[0]]
                assert isinstance(op, HostOp)
                out = op.fn(*(env[n] for n in op.inputs))
                v = self.graph.values[op.out]
                if not isinstance(out, np.ndarray) or out.shape != v.shape or out.dtype != _NUMPY[v.dtype]:
                    raise ValueError(f"host operator {op.name} must return a {v.dtype} array of shape {v.shape}, "
                                     f"not {getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}")
                env[op.out] = out
                continue
            for name in seg.uploads:
                written += self._upload(name, env[name])
                transfers += 1
            before = {t: self.device.perf(t).read() for t in used}
            drive(self.device, seg.commands, self.timeout)
            after = {t: self.device.perf(t).read() for t in used}
            stats = GemmStats(self.array, {t: len(seg.commands[t]) for t in used}, before, after, 0, 0)
            cycles += stats.cycles
            macs += stats.macs
            commands += sum(len(c) for c in seg.commands)
            for name in seg.downloads:
                env[name] = self._download(name)
                read += env[name].nbytes
                transfers += 1
        trips1 = _round_trips(self.device)
        stats = RunStats(
            device_segments=sum(s.device for s in self.segments), host_ops=sum(not s.device for s in self.segments),
            commands=commands, cycles=cycles, macs=macs, tiles=self.tiles, array=self.array,
            host_bytes_written=written, host_bytes_read=read, transfers=transfers,
            wall_seconds=time.perf_counter() - start,
            round_trips=None if trips0 is None else trips1 - trips0)
        return {name: env[name] for name in self.graph.outputs}, stats

    def _upload(self, name: str, value: np.ndarray) -> int:
        v = self.graph.values[name]
        buf = np.zeros((v.rows, padded(v.cols, self.array)), _NUMPY[v.dtype])
        buf[:, :v.cols] = value
        self.device.write_mem(self.address(name), buf)
        return buf.nbytes

    def _download(self, name: str) -> np.ndarray:
        v = self.graph.values[name]
        full = self.device.read_array(self.address(name), (v.rows, padded(v.cols, self.array)), _NUMPY[v.dtype])
        return np.ascontiguousarray(full[:, :v.cols])

    def plan_text(self) -> str:
        """Which operator runs where, the memory plan and the commands per segment, for people to read."""
        lines = [f"graph: {len(self.graph.ops)} operators in {len(self.segments)} segments on {self.tiles} tile(s); "
                 f"weights {self.weight_bytes} B resident, activations {self.arena.size} B "
                 f"({self.arena.unshared} B without sharing)"]
        for n, seg in enumerate(self.segments):
            where = "device" if seg.device else "host  "
            names = ", ".join(self.graph.ops[i].name for i in seg.ops)
            extra = ""
            if seg.device:
                extra = (f"  [{sum(len(c) for c in seg.commands)} commands; upload {', '.join(seg.uploads) or '-'}; "
                         f"download {', '.join(seg.downloads) or '-'}]")
            lines.append(f"  {n}: {where} {names}{extra}")
        return "\n".join(lines)

    def close(self) -> None:
        """Free the weights and the arena; the session cannot run afterwards."""
        if not self._closed:
            self._closed = True
            self.device.free(self._arena_base)
            self.device.free(self._weights_base)

    def __enter__(self) -> GraphSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

