"""Running a quantised graph on a DX-1 device: weights resident, activations planned, whole command streams.

:class:`GraphSession` lowers a :class:`~.ir.Graph` once for a device:

* every constant (weights) is uploaded once, zero-padded to whole array chunks, into a region that
  stays allocated while the session is open;
* every activation a device operator reads or writes gets a place in one arena planned by liveness
  (:mod:`.memory`), in the padded row-major layout the tiling compiler reads and writes
  (``rows x padded(cols)``, the padding columns zero), so a layer's output *is* the next layer's input
  and consecutive device operators never round-trip through the host; views address blocks of it in
  place with the value's row stride;
* consecutive device operators form a *segment*: one command stream per tile, driven as a whole.  A
  barrier (SIGNAL/WAIT semaphores between tiles, a FENCE on one tile) goes between two operators only
  where the later one reads memory an earlier one writes, or writes memory an earlier one touches, since
  the last barrier; a :class:`~.ir.HostOp` between segments runs in numpy, its inputs downloaded and its
  output uploaded;
* a :class:`~.ir.Collective` between segments hands the value's place in device memory to the session's
  ``collective`` runner (a rank of a device group, say): the value stays on the device, summed or
  gathered there in place.

:meth:`GraphSession.run` executes one forward pass and returns the outputs with :class:`RunStats`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from dx1_driver import Device, DriverError

from ...perfmodel import predict
from ...spec import Opcode, TileConfig, align_up, pack_command
from ..commands import CommandStream
from ..gemm import GemmTerm, compile_gemm
from ..gemm_run import GemmStats, drive
from ..kernels import Mem
from ..operands import padded
from ..requantize import compile_requantize
from .ir import Collective, Graph, HostOp, Op, QMatmul, Requantize, VectorKernel, View
from .memory import ArenaPlan, Lifetime, plan_arena

__all__ = ["GraphSession", "RunStats", "Segment", "CollectiveRunner"]

#: What runs a :class:`~.ir.Collective`: ``collective(op, address, shape, dtype)`` runs ``op.kind`` on the
#: value at ``address`` of this device's memory (``shape`` in its padded layout), in place.
CollectiveRunner = Callable[[Collective, int, tuple[int, int], np.dtype], None]

#: Tag of the barrier commands between operators (the tiling compiler's tags count up from 0).
BARRIER_TAG = 0xFFFF


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
    barriers: int = 0


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
    #: Cycles the vector unit was busy (PERF BUSY_VECTOR), per device segment its busiest tile's, summed.
    vector_cycles: int = 0
    #: The performance model's CYCLES of the device segments (:func:`~dx1_bringup.perfmodel.predict`), summed.
    predicted_cycles: float = 0.0
    #: Per device segment, in order, its CYCLES (``cycles`` is their sum).
    segment_cycles: list[int] = field(default_factory=list)

    @property
    def utilisation(self) -> float:
        """MACs / (cycles x array^2 x tiles) over the device segments."""
        return self.macs / (self.cycles * self.array ** 2 * self.tiles) if self.cycles else 0.0


def _round_trips(device: Device) -> int | None:
    counter = getattr(device.transport, "round_trips", None)
    if counter is None:
        counter = getattr(getattr(device.transport, "stats", None), "round_trips", None)
    return counter


class GraphSession:
    """A graph lowered for one device, its constants resident until :meth:`close`.

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
    collective:
        Runs the graph's :class:`~.ir.Collective` operators (required when it has any).

    Raises
    ------
    ValueError
        The graph is malformed, or its constants and activations do not fit in device memory.
    """

    def __init__(self, device: Device, graph: Graph, *, tiles: int | None = None, timeout: float = 5.0,
                 keep: tuple[str, ...] = (), collective: CollectiveRunner | None = None):
        graph.validate()
        self.device, self.graph, self.timeout = device, graph, timeout
        if collective is None and any(isinstance(op, Collective) for op in graph.ops):
            raise ValueError("the graph has collectives; the session needs a collective runner to run them")
        self.collective = collective
        unknown = sorted(set(keep) - set(graph.values))
        if unknown:
            raise ValueError(f"keep names values the graph does not have: {unknown}")
        self.keep = tuple(keep)
        caps = device.caps
        self.tiles = caps.tiles if tiles is None else tiles
        if isinstance(self.tiles, bool) or not isinstance(self.tiles, int) or not 1 <= self.tiles <= caps.tiles:
            raise ValueError(f"tiles must be an integer from 1 to {caps.tiles}, not {tiles!r}")
        if self._barrier_semaphores() > caps.semaphores:
            raise ValueError(f"a barrier over {self.tiles} tiles needs {self._barrier_semaphores()} semaphores; the "
                             f"device has {caps.semaphores}")
        self.array = caps.array
        self._align = device.allocator.alignment
        for op in graph.ops:
            if isinstance(op, VectorKernel):
                op.kernel.check(*op.x.shape(graph), self.array)
        self.segments = self._segments()
        self.arena: ArenaPlan = plan_arena(self._lifetimes(), self._align)
        self._const_offsets, self.weight_bytes = {}, 0
        for name in graph.consts:
            self._const_offsets[name] = self.weight_bytes
            self.weight_bytes += self._aligned(self._bytes(name))
        self._biases: dict[str, tuple[int, np.ndarray]] = {}
        for op in graph.ops:
            if isinstance(op, (QMatmul, Requantize)) and op.bias is not None:
                bias = np.zeros(padded(op.bias.shape[0], self.array), np.int32)
                bias[:op.bias.shape[0]] = op.bias
                self._biases[op.name] = (self.weight_bytes, bias)
                self.weight_bytes += self._aligned(bias.nbytes)
        self._kernel_consts: dict[str, tuple[int, object, np.ndarray]] = {}
        for op in graph.ops:
            if isinstance(op, VectorKernel) and self.on_device(op):
                consts = op.kernel.consts(*op.x.shape(graph), self.array)
                blob = consts.blob()
                self._kernel_consts[op.name] = (self.weight_bytes, consts, blob)
                self.weight_bytes += self._aligned(blob.nbytes)
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
        for name, data in graph.consts.items():
            self._write(name, data)
        for offset, bias in self._biases.values():
            device.write_mem(self._weights_base + offset, bias)
        for offset, _, blob in self._kernel_consts.values():
            device.write_mem(self._weights_base + offset, blob)
        for seg in self.segments:
            if seg.device:
                self._lower(seg)

    # -- layout ----------------------------------------------------------------------------------

    def _aligned(self, n: int) -> int:
        return align_up(n, self._align)

    def _stride(self, name: str) -> int:
        v = self.graph.values[name]
        return padded(v.cols, self.array) * np.dtype(v.numpy_dtype).itemsize

    def _bytes(self, name: str) -> int:
        """A value's size on the device; constants get whole zero rows of padding too (they may be B)."""
        v = self.graph.values[name]
        rows = padded(v.rows, self.array) if name in self.graph.consts else v.rows
        return rows * self._stride(name)

    def address(self, name: str) -> int:
        """Device-memory address of a value (padded row-major layout)."""
        if name in self._const_offsets:
            return self._weights_base + self._const_offsets[name]
        return self._arena_base + self.arena.offsets[name]

    def _view_address(self, view: View) -> int:
        v = self.graph.values[view.value]
        return self.address(view.value) + view.row0 * self._stride(view.value) + view.col0 * np.dtype(
            v.numpy_dtype).itemsize

    def _span(self, view: View) -> tuple[str, int, int, int, int, int, int]:
        """(value, first byte, end byte, row0, row end, col0, col end) of a view, for hazard checks."""
        rows, cols = view.shape(self.graph)
        base = self.address(view.value)
        return (view.value, base, base + self._bytes(view.value), view.row0, view.row0 + rows, view.col0,
                view.col0 + cols)

    # -- planning --------------------------------------------------------------------------------

    def on_device(self, op: Op) -> bool:
        """Whether ``op`` runs on the device: a GEMM always, a vector kernel where the tiles have a vector unit."""
        if isinstance(op, VectorKernel):
            return self.device.caps.vector
        return op.on_device

    def placement(self) -> list[tuple[str, str]]:
        """``(operator name, "device" | "host")`` for every operator, in order, on this session's device."""
        return [(op.name, "device" if self.on_device(op) else "host") for op in self.graph.ops]

    def _in_memory(self, op: Op) -> bool:
        """Whether ``op`` reads and writes device memory: a device operator, or a collective (in place)."""
        return self.on_device(op) or isinstance(op, Collective)

    def _device_values(self) -> set[str]:
        names: set[str] = set()
        for op in self.graph.ops:
            if self._in_memory(op):
                names.update(op.inputs)
                names.add(op.writes)
        return names - set(self.graph.consts)

    def _segments(self) -> list[Segment]:
        segments: list[Segment] = []
        for i, op in enumerate(self.graph.ops):
            if self.on_device(op) and segments and segments[-1].device:
                segments[-1].ops.append(i)
            else:
                segments.append(Segment(self.on_device(op), [i]))
        ops = self.graph.ops
        for seg in segments:
            if not self._in_memory(ops[seg.ops[0]]):
                continue
            start, end = seg.ops[0], seg.ops[-1]
            read = {n for i in seg.ops for n in ops[i].inputs} - set(self.graph.consts)
            on_device_before = {ops[i].writes for i in range(start) if self._in_memory(ops[i])}
            written_here = {ops[i].writes for i in seg.ops}
            # A value read here that no device operator wrote earlier comes from the host.  (Written here
            # too, it is read before this segment writes it only if the graph says so: validate() checks.)
            seg.uploads = sorted(n for n in read if n not in on_device_before and n not in written_here)
            seg.downloads = sorted(n for n in written_here if self._read_next_by_host(n, end))
        return segments

    def _read_next_by_host(self, name: str, end: int) -> bool:
        """Whether the host reads ``name`` (a host operator, or the graph's output) before the device writes it
        again after operator ``end``: then the segment ending there downloads it."""
        for op in self.graph.ops[end + 1:]:
            if not self._in_memory(op) and name in op.inputs:
                return True
            if self._in_memory(op) and op.writes == name:
                return False
        return name in self.graph.outputs

    def _lifetimes(self) -> list[Lifetime]:
        ops, end = self.graph.ops, len(self.graph.ops)
        out = []
        for name in sorted(self._device_values()):
            touched = [i for i, op in enumerate(ops)
                       if self._in_memory(op) and (name in op.inputs or op.writes == name)]
            first, last = min(touched), max(touched)
            if name in self.graph.outputs or name in self.keep:
                last = end
            # An uploaded value is written before its segment's first operator runs, and a downloaded one
            # is read after its last: keep each alive over the whole segment.
            for seg in self.segments:
                if name in seg.uploads:
                    first = min(first, seg.ops[0])
                if name in seg.downloads:
                    last = max(last, seg.ops[-1])
            out.append(Lifetime(name, self._bytes(name), first, last))
        return out

    def _barrier_semaphores(self) -> int:
        """Semaphores the barriers use: one a tile, two sets of them from three tiles on (see :meth:`_barrier`)."""
        return self.tiles if self.tiles <= 2 else 2 * self.tiles

    def _barrier(self, n: int) -> list[list[bytes]]:
        """Per tile: commands after which every tile's earlier commands have completed (the ``n`` th barrier).

        Each tile SIGNALs its semaphore by one for every other tile and WAITs for one unit of each other
        tile's.  From three tiles on, a tile with nothing to do between two barriers could otherwise take
        a second unit of one tile's signal, meant for a third tile, and pass the next barrier early (or
        leave that tile waiting forever): consecutive barriers alternate between two sets of semaphores,
        and a tile reaches barrier ``n + 2`` only after every tile has finished waiting at ``n``.
        """
        if self.tiles == 1:
            return [[pack_command(Opcode.FENCE, tag=BARRIER_TAG)]]
        base = 0 if self.tiles <= 2 else self.tiles * (n % 2)
        return [[pack_command(Opcode.SIGNAL, tag=BARRIER_TAG, sem=base + t, count=self.tiles - 1)]
                + [pack_command(Opcode.WAIT, tag=BARRIER_TAG, sem=base + u, count=1) for u in range(self.tiles)
                   if u != t]
                for t in range(self.tiles)]

    @staticmethod
    def _conflict(a: tuple, b: tuple) -> bool:
        """Whether two spans touch the same bytes (rectangles within one value, address ranges across values)."""
        if a[1] >= b[2] or b[1] >= a[2]:
            return False
        if a[0] != b[0]:
            return True
        return a[3] < b[4] and b[3] < a[4] and a[5] < b[6] and b[5] < a[6]

    def _lower(self, seg: Segment) -> None:
        caps = self.device.caps
        streams: list[list[bytes]] = [[] for _ in range(self.tiles)]
        pending_reads: list[tuple] = []
        pending_writes: list[tuple] = []
        for i in seg.ops:
            op = self.graph.ops[i]
            reads = [self._span(v) for term in op.terms for v in term] if isinstance(op, QMatmul) else [
                self._span(op.x)]
            write = self._span(op.out)
            hazard = (any(self._conflict(r, w) for r in reads for w in pending_writes)
                      or any(self._conflict(write, x) for x in pending_reads + pending_writes))
            if hazard:
                for t, cmds in enumerate(self._barrier(seg.barriers)):
                    streams[t].extend(cmds)
                seg.barriers += 1
                pending_reads, pending_writes = [], []
            pending_reads += reads
            pending_writes.append(write)
            if isinstance(op, VectorKernel):
                self._lower_kernel(op, streams)
                continue
            if isinstance(op, Requantize):
                self._lower_requantize(op, streams)
                continue
            (a, b), *more = op.terms
            m, k = a.shape(self.graph)
            n = b.shape(self.graph)[1]
            bias_addr = None if op.bias is None else self._weights_base + self._biases[op.name][0]
            plan = compile_gemm(
                m, k, n, caps, a_addr=self._view_address(a), b_addr=self._view_address(b),
                c_addr=self._view_address(op.out), bias_addr=bias_addr, post=op.post, tiles=self.tiles,
                a_stride=self._stride(a.value), b_stride=self._stride(b.value), c_stride=self._stride(op.out.value),
                more=tuple(GemmTerm(ta.shape(self.graph)[1], self._view_address(ta), self._view_address(tb),
                                    self._stride(ta.value), self._stride(tb.value)) for ta, tb in more))
            for t, cmds in enumerate(plan.commands):
                streams[t].extend(cmds)
        seg.commands = streams

    def _lower_requantize(self, op: Requantize, streams: list[list[bytes]]) -> None:
        caps = self.device.caps
        rows, cols = op.x.shape(self.graph)
        bias_addr = None if op.bias is None else self._weights_base + self._biases[op.name][0]
        plan = compile_requantize(rows, cols, array=self.array, spm_rows=caps.spm_rows, acc_rows=caps.acc_rows,
                                  mem_bytes=caps.mem_bytes, x_addr=self._view_address(op.x),
                                  x_stride=self._stride(op.x.value), out_addr=self._view_address(op.out),
                                  out_stride=self._stride(op.out.value), bias_addr=bias_addr, post=op.post,
                                  tiles=self.tiles, what=op.name)
        for t, cmds in enumerate(plan):
            streams[t].extend(cmds)

    def _lower_kernel(self, op: VectorKernel, streams: list[list[bytes]]) -> None:
        caps = self.device.caps
        rows, cols = op.x.shape(self.graph)
        offset, consts, _ = self._kernel_consts[op.name]
        x = Mem(self._view_address(op.x), self._stride(op.x.value))
        out = Mem(self._view_address(op.out), self._stride(op.out.value))
        for t, block in enumerate(op.kernel.split(rows, cols, self.tiles, self.array)):
            stream = CommandStream(array=self.array, spm_rows=caps.spm_rows, acc_rows=caps.acc_rows,
                                   mem_bytes=caps.mem_bytes, tile=t, what=op.name)
            op.kernel.lower(stream, x, out, block, cols, consts, self._weights_base + offset)
            streams[t].extend(stream.commands)

    # -- running ---------------------------------------------------------------------------------

    def _host(self, op: Op, env: dict[str, np.ndarray]) -> np.ndarray:
        """Run a host operator, or a vector kernel's int reference on a device without a vector unit."""
        if isinstance(op, HostOp):
            return op.fn(*(env[n] for n in op.inputs))
        assert isinstance(op, VectorKernel)
        rows, cols = op.x.shape(self.graph)
        x = env[op.x.value][op.x.row0:op.x.row0 + rows, op.x.col0:op.x.col0 + cols]
        v = self.graph.values[op.writes]
        out = env.get(op.writes, np.zeros(v.shape, v.numpy_dtype)).copy()
        orows, ocols = op.out.shape(self.graph)
        out[op.out.row0:op.out.row0 + orows, op.out.col0:op.out.col0 + ocols] = op.kernel.reference(x)
        return out

    def _check_inputs(self, inputs: dict[str, np.ndarray]) -> None:
        missing = set(self.graph.inputs) - set(inputs)
        extra = set(inputs) - set(self.graph.inputs)
        if missing or extra:
            raise ValueError(f"inputs must be exactly {sorted(self.graph.inputs)}; missing {sorted(missing)}, "
                             f"unknown {sorted(extra)}")
        for name in self.graph.inputs:
            v, a = self.graph.values[name], inputs[name]
            if not isinstance(a, np.ndarray) or a.dtype != v.numpy_dtype or a.shape != v.shape:
                raise ValueError(f"input {name!r} must be a {v.dtype} array of shape {v.shape}, not "
                                 f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")

    def run(self, inputs: dict[str, np.ndarray], *,
            keep: tuple[str, ...] = ()) -> tuple[dict[str, np.ndarray], RunStats]:
        """One forward pass: ``inputs`` by name -> ``(outputs by name, RunStats)``.

        ``keep`` names further values to return (each downloaded after the segment that writes it), for
        checking intermediate results; each must be one the session was opened to keep (its memory is then
        not shared with a later value).

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
        if set(keep) - set(self.keep):
            raise ValueError(f"run can return only the values the session keeps ({sorted(self.keep)}), not "
                             f"{sorted(set(keep) - set(self.keep))}: open it with keep=...")
        start, trips0 = time.perf_counter(), _round_trips(self.device)
        env: dict[str, np.ndarray] = dict(inputs)
        written = read = transfers = cycles = macs = commands = vector = 0
        segment_cycles: list[int] = []
        predicted = 0.0
        caps = self.device.caps
        tile = TileConfig(caps.array, caps.spm_rows, caps.acc_rows, caps.vector)
        used = list(range(self.tiles))
        for seg in self.segments:
            if not seg.device and isinstance(self.graph.ops[seg.ops[0]], Collective):
                op = self.graph.ops[seg.ops[0]]
                for name in seg.uploads:
                    written += self._write(name, env[name])
                    transfers += 1
                v = self.graph.values[op.value]
                self.collective(op, self.address(op.value), (v.rows, padded(v.cols, self.array)),
                                np.dtype(v.numpy_dtype))
                for name in sorted(set(seg.downloads) | ({op.value} & set(keep))):
                    env[name] = self._read(name)
                    read += env[name].nbytes
                    transfers += 1
                continue
            if not seg.device:
                op = self.graph.ops[seg.ops[0]]
                out = self._host(op, env)
                v = self.graph.values[op.writes]
                if not isinstance(out, np.ndarray) or out.shape != v.shape or out.dtype != v.numpy_dtype:
                    raise ValueError(f"host operator {op.name} must return a {v.dtype} array of shape {v.shape}, "
                                     f"not {getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}")
                env[op.writes] = out
                continue
            for name in seg.uploads:
                written += self._write(name, env[name])
                transfers += 1
            before = {t: self.device.perf(t).read() for t in used}
            drive(self.device, seg.commands, self.timeout)
            after = {t: self.device.perf(t).read() for t in used}
            stats = GemmStats(self.array, {t: len(seg.commands[t]) for t in used}, before, after, 0, 0)
            cycles += stats.cycles
            segment_cycles.append(stats.cycles)
            vector += max(stats.delta(t).busy_vector for t in used)
            predicted += predict([seg.commands[t] for t in used], tile, banks=caps.mem_banks).total
            macs += stats.macs
            commands += sum(len(c) for c in seg.commands)
            wanted = set(seg.downloads) | ({self.graph.ops[i].writes for i in seg.ops} & set(keep))
            for name in sorted(wanted):
                env[name] = self._read(name)
                read += env[name].nbytes
                transfers += 1
        trips1 = _round_trips(self.device)
        stats = RunStats(
            device_segments=sum(s.device for s in self.segments), host_ops=sum(not s.device for s in self.segments),
            commands=commands, cycles=cycles, macs=macs, tiles=self.tiles, array=self.array,
            host_bytes_written=written, host_bytes_read=read, transfers=transfers,
            wall_seconds=time.perf_counter() - start,
            round_trips=None if trips0 is None else trips1 - trips0, vector_cycles=vector,
            predicted_cycles=predicted, segment_cycles=segment_cycles)
        return {name: env[name] for name in (*self.graph.outputs, *keep)}, stats

    def _write(self, name: str, value: np.ndarray) -> int:
        v = self.graph.values[name]
        stride = self._stride(name)
        buf = np.zeros((self._bytes(name) // stride, stride // np.dtype(v.numpy_dtype).itemsize), v.numpy_dtype)
        buf[:v.rows, :v.cols] = value
        self.device.write_mem(self.address(name), buf)
        return buf.nbytes

    def _read(self, name: str) -> np.ndarray:
        v = self.graph.values[name]
        full = self.device.read_array(self.address(name), (v.rows, padded(v.cols, self.array)), v.numpy_dtype)
        return np.ascontiguousarray(full[:, :v.cols])

    def plan_text(self) -> str:
        """Which operator runs where, the memory plan and the commands per segment, for people to read."""
        lines = [f"graph: {len(self.graph.ops)} operators in {len(self.segments)} segments on {self.tiles} tile(s); "
                 f"weights {self.weight_bytes} B resident, activations {self.arena.size} B "
                 f"({self.arena.unshared} B without sharing)"]
        for n, seg in enumerate(self.segments):
            if seg.device:
                lines.append(f"  {n}: device  {sum(len(c) for c in seg.commands)} commands, {seg.barriers} barrier(s); "
                             f"upload {', '.join(seg.uploads) or '-'}; download {', '.join(seg.downloads) or '-'}")
                for i in seg.ops:
                    op = self.graph.ops[i]
                    if isinstance(op, VectorKernel):
                        lines.append(f"       {op.name}: {op.out} = {op.kernel.describe(str(op.x))}  [vector unit]")
                        continue
                    terms = str(op.x) if isinstance(op, Requantize) else " + ".join(f"{a} @ {b}" for a, b in op.terms)
                    extra = (" + bias" if op.bias is not None else "") + (", relu" if op.post and op.post.relu else "")
                    wrap = "requant({})" if op.post is not None else "int32({})"
                    lines.append(f"       {op.name}: {op.out} = {wrap.format(terms + extra)}")
            else:
                op = self.graph.ops[seg.ops[0]]
                if isinstance(op, Collective):
                    lines.append(f"  {n}: ranks   {op.name}: {op.kind} of {op.value} [in device memory]")
                elif isinstance(op, VectorKernel):
                    lines.append(f"  {n}: host    {op.name}: {op.out} = {op.kernel.describe(str(op.x))}  "
                                 f"[int reference: the device has no vector unit]")
                else:
                    lines.append(f"  {n}: host    {op.name}: {op.out} = {op.name}({', '.join(op.inputs)})")
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
