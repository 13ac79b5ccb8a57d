"""The eight bring-up steps (see :mod:`dx1_bringup.bringup`), run through the driver only.

:class:`_Run` holds the state the steps share; each step is one of its methods, returns its summary
line and records every comparison as a :class:`~.report.Check`, failing with :class:`_StepFailed`
(what the mismatch probably means) at the first wrong one.  Internal to the package: its entry point is
:func:`~dx1_bringup.bringup.run.run_bringup`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
from dx1_driver import Device, DeviceTimeout, DriverError, NotADx1Device, Transport, regs

from ..runtime.gemm import compile_gemm
from ..runtime.operands import ACC_LANE_BYTES, pad_operand, padded, random_operands
from ..runtime.reference import reference_gemm
from ..spec import Access, BlockType, PostOpParams, SocConfig, register_map
from .diagnosis import _WORD, _WORD_BITS, _address_diagnosis, _bytes_diagnosis, _data_bits_diagnosis, _hex
from .report import REGION_CHECK, Check, StepResult

_LINK_READS = 4
_SCRATCH_PATTERNS = (0xA5A5_5A5A, 0x5A5A_A5A5, 0xFFFF_FFFF, 0x0000_0000)
_ADDR_MARK = 0xA5 << 56  # marks values of the address-line test, so a stray value names its address
_RING_LOG2 = 4
_DMA_SPM_ROWS = 16
_DMA_ACC_ROWS = 4
_GEMM_SHAPE = (16, 16, 8)
_GEMM_POST = PostOpParams(mult=147, shift=16)
_IRQ_SETTLE = 0.01  # seconds the interrupt line is watched where it must stay low


class _StepFailed(Exception):
    """A step's check failed: ``diagnosis`` says what is probably broken and what to check next."""

    def __init__(self, diagnosis: str):
        super().__init__(diagnosis)
        self.diagnosis = diagnosis



class _Run:
    """State shared by the steps of one run."""

    def __init__(self, transport: Transport, device: Device | None, seed: int, mem_bytes: int | None,
                 timeout: float):
        self.transport = transport
        self.device = device
        self.seed = seed
        self.mem_bytes = mem_bytes
        self.timeout = timeout
        self.rng = np.random.default_rng(seed)
        self.step: StepResult | None = None
        self.perf: dict[str, Any] = {}

    # -- recording --------------------------------------------------------------------------------

    def check(self, what: str, expected: Any, got: Any, diagnosis: str | Callable[[], str],
              ok: bool | None = None) -> None:
        """Record a check; on a mismatch the step fails with ``diagnosis`` (a callable is asked only then)."""
        ok = expected == got if ok is None else ok
        self.step.checks.append(Check(what, expected, got, bool(ok)))
        if not ok:
            raise _StepFailed(diagnosis() if callable(diagnosis) else diagnosis)

    @property
    def dev(self) -> Device:
        assert self.device is not None, "identity runs before every step that needs the device"
        return self.device

    # GLOBAL is the block at 0 by definition (discovery starts there), so the link step needs no discovery.
    def read_global(self, offset: int) -> int:
        return self.transport.read32(offset)

    def write_global(self, offset: int, value: int) -> None:
        self.transport.write32(offset, value)

    # -- 1. link ----------------------------------------------------------------------------------

    def link(self) -> str:
        g = regs.Global
        first = (self.read_global(g.ID), self.read_global(g.MAGIC))
        for i in range(1, _LINK_READS):
            again = (self.read_global(g.ID), self.read_global(g.MAGIC))
            self.check(f"GLOBAL.ID, MAGIC read {i + 1} equals read 1", [_hex(v) for v in first],
                       [_hex(v) for v in again],
                       "a constant register reads differently each time: the link drops or flips bits "
                       "(check the baud rate on both ends, the cable and the ground)")
        saved = self.read_global(g.SCRATCH)
        for pattern in _SCRATCH_PATTERNS:
            self.write_global(g.SCRATCH, pattern)
            self.check(f"SCRATCH after writing {_hex(pattern)}", _hex(pattern), _hex(self.read_global(g.SCRATCH)),
                       "reads work but SCRATCH does not keep what is written: host-to-device writes are lost or "
                       "garbled (check the link's transmit direction) or the register file is broken")
        self.write_global(g.SCRATCH, saved)
        return (f"{_LINK_READS} reads of ID/MAGIC agree ({_hex(first[0])}, {_hex(first[1])}), SCRATCH holds "
                f"{len(_SCRATCH_PATTERNS)} patterns")

    # -- 2. identity ------------------------------------------------------------------------------

    def identity(self) -> str:
        if self.device is None:
            try:
                # Small rings: the self-tests queue a few commands at a time, and on a slow link
                # every ring entry is a byte to clear.
                self.device = Device(self.transport, ring_log2=_RING_LOG2)
            except NotADx1Device as e:
                self.check("a dx1 device", "MAGIC 0x44583131, GLOBAL block first, spec major version "
                           f"{regs.SPEC_VERSION >> 16}", str(e), "the device answers but is not a dx1 of this spec "
                           "version: check the bitstream (and that the link is to the right board)", ok=False)
            except DriverError as e:
                self.check("discovery and capabilities", "a well-formed register block chain", str(e),
                           "the register block chain or capabilities are malformed: check the register file "
                           "generation (make rtl) against this driver", ok=False)
        else:
            self.device.reset()
        dev = self.dev
        caps = dev.caps
        self.check("MAGIC", _hex(regs.MAGIC), _hex(self.read_global(regs.Global.MAGIC)),
                   "MAGIC changed after discovery: the link or register file is unstable")
        self.check("HW_VERSION major", regs.SPEC_VERSION >> 16, caps.hw_version >> 16,
                   "the bitstream was generated from another major spec version")
        # Lower bounds: every dx1 build is at least this big, and the self-tests below rely on it.
        for name, value, low in (("tiles", caps.tiles, 1), ("array", caps.array, 1),
                                 ("semaphores", caps.semaphores, 1),
                                 ("SPM_ROWS", caps.spm_rows, max(2 * caps.array, _DMA_SPM_ROWS)),
                                 ("ACC_ROWS", caps.acc_rows, max(2 * caps.array, _DMA_ACC_ROWS)),
                                 ("MEM_BYTES", caps.mem_bytes, 4096)):
            self.check(f"CAPS {name} >= {low}", f">= {low}", value,
                       f"capability {name} reads {value}, smaller than any dx1 build: CAPS or the identity "
                       "registers are wired wrongly", ok=value >= low)
        self.check("MEM_BYTES a multiple of the bus width", 0, caps.mem_bytes % _WORD,
                   "MEM_BYTES is not a whole number of 64-bit words: the identity register is wrong")
        for kind in (regs.BlockType.QUEUE, regs.BlockType.PERF, regs.BlockType.TRACE):
            count = sum(1 for b in dev.blocks if b.type is kind)
            self.check(f"{kind.name} blocks", caps.tiles, count,
                       f"CAPS says {caps.tiles} tiles but the register space has {count} {kind.name} blocks")
        expected = regs.CONFIG
        found = {"tiles": caps.tiles, "tile": {"array": caps.array, "spm_rows": caps.spm_rows,
                                               "acc_rows": caps.acc_rows},
                 "mem_bytes": caps.mem_bytes, "semaphores": caps.semaphores}
        self.step.data.update(caps=asdict(caps), spec_default={k: v for k, v in expected.items() if k in found},
                              hw_version=f"{caps.hw_version >> 16}.{caps.hw_version & 0xFFFF}")
        differs = [k for k in found if found[k] != expected[k]]
        note = f"; differs from the spec's default build in {', '.join(differs)}" if differs else ""
        return (f"dx1 {caps.hw_version >> 16}.{caps.hw_version & 0xFFFF}: {caps.tiles} tiles of "
                f"{caps.array}x{caps.array}, SPM {caps.spm_rows} rows, ACC {caps.acc_rows} rows, "
                f"{caps.mem_bytes} bytes of memory, {caps.semaphores} semaphores{note}")

    # -- 3. registers -----------------------------------------------------------------------------

    def registers(self) -> str:
        dev = self.dev
        caps = dev.caps
        rmap = register_map(SocConfig(tiles=caps.tiles, semaphores=caps.semaphores))
        self.check("register blocks in discovery order", [(b.spec.type.name, _hex(b.base, 4)) for b in rmap.blocks],
                   [(b.type.name if b.type else _hex(b.id), _hex(b.base, 4)) for b in dev.blocks],
                   "the blocks are not where the spec places them: the register file was generated from another "
                   "spec or configuration (make rtl)")
        t = self.transport
        identity = {"MAGIC": regs.MAGIC, "HW_VERSION": caps.hw_version, "SPM_ROWS": caps.spm_rows,
                    "ACC_ROWS": caps.acc_rows, "MEM_BYTES": caps.mem_bytes}
        read = 0
        for block in rmap.blocks:
            kind = block.spec.type
            trace_empty = True
            for reg in block.registers:
                r = reg.register
                if r.access is Access.WO:
                    continue
                name = f"{block.name}.{reg.name}"
                if kind is BlockType.TRACE and reg.name.startswith("DATA") and not trace_empty:
                    continue  # reading DATA_HI would pop an event
                value = t.read32(block.base + reg.offset)
                read += 1
                expected = self._expected(kind, reg.name, r, block.spec.version, block.next, identity)
                if kind is BlockType.TRACE and reg.name == "COUNT":
                    trace_empty = value == 0
                if expected is None:
                    continue
                constant = reg.name in identity
                self.check(name, _hex(expected), _hex(value),
                           lambda n=name, e=expected, v=value, c=constant: self._register_diagnosis(n, e, v, c))
        return f"{len(rmap.blocks)} blocks where the spec puts them, {read} registers read, all as expected"

    @staticmethod
    def _expected(kind: BlockType, name: str, reg: Any, version: int, nxt: int,
                  identity: dict[str, int]) -> int | None:
        """The value a register must read after reset, or ``None`` where none is defined."""
        if name == "ID":
            return int(kind)
        if name == "VERSION":
            return version
        if name == "NEXT":
            return nxt
        if kind is BlockType.GLOBAL:
            if name in identity:
                return identity[name]
            if name.startswith("SEM"):
                return 0
            return None  # CAPS and FEATURES were checked in identity; SCRATCH and CYCLES are free
        if kind is BlockType.PERF and name == "CYCLES":
            return None
        return reg.reset

    @staticmethod
    def _register_diagnosis(name: str, expected: int, got: int, identity: bool) -> str:
        if name.endswith((".ID", ".VERSION", ".NEXT")):
            return (f"{name} is a block header constant: the register file was generated from another spec "
                    "(make rtl) or the address decoder is wrong")
        if identity:
            return (f"{name} is a read-only constant and read differently during discovery: register reads are "
                    "unstable (link or register file)")
        diff = expected ^ got
        bits = [b for b in range(32) if diff >> b & 1]
        return (f"{name} does not read its reset value (bits {bits} differ) after GLOBAL.RESET: its reset is "
                "not wired, or RESET does not reach it")

    # -- 4. memory --------------------------------------------------------------------------------

    def memory(self) -> str:
        dev = self.dev
        total = dev.caps.mem_bytes
        region = total if self.mem_bytes is None else self.mem_bytes
        self.check(REGION_CHECK, f"<= {total}", region,
                   f"asked to test {region} bytes, but the device has {total}: give a smaller --mem-bytes",
                   ok=region <= total)
        self.step.data.update(region_bytes=region, seed=self.seed)
        # The test reads everything back itself.  A transport that verifies its writes (serial) would
        # report a bad memory cell as a failed write, a link error: let this step see the memory instead.
        verify = getattr(self.transport, "verify_writes", None)
        if verify is not None:
            self.transport.verify_writes = False
        try:
            self._data_bus()
            lines = self._address_lines(total)
            self._address_in_address(region)
            self._random(region)
        finally:
            if verify is not None:
                self.transport.verify_writes = verify
        return (f"data bus ({_WORD_BITS} walking ones), {lines} address lines over {total} bytes, "
                f"address-in-address and random (seed {self.seed}) over {region} bytes")

    def _data_bus(self) -> None:
        dev = self.dev
        # Walking ones at one address: a bit that never reads 1 is stuck at 0, one that always does is
        # stuck at 1, one that follows another is shorted to it.
        patterns = [1 << b for b in range(_WORD_BITS)]
        got = []
        for p in patterns:
            dev.write_mem(0, p.to_bytes(_WORD, "little"))
            got.append(int.from_bytes(dev.read_mem(0, _WORD), "little"))
        bad = [(p, g) for p, g in zip(patterns, got, strict=True) if p != g]
        self.check("data bus: walking ones at 0x0", "every pattern reads back",
                   f"{len(bad)} of {len(patterns)} differ" + (f", first wrote {_hex(bad[0][0], 16)} read "
                                                              f"{_hex(bad[0][1], 16)}" if bad else ""),
                   lambda: _data_bits_diagnosis(patterns, got), ok=not bad)

    def _address_lines(self, total: int) -> int:
        dev = self.dev
        addrs = [0] + [1 << k for k in range(3, total.bit_length()) if 1 << k < total]
        for a in addrs:
            dev.write_mem(a, (_ADDR_MARK | a).to_bytes(_WORD, "little"))
        got = {a: int.from_bytes(dev.read_mem(a, _WORD), "little") for a in addrs}
        bad = [a for a in addrs if got[a] != _ADDR_MARK | a]
        first = bad[0] if bad else 0
        self.check("address lines: a word at 0x0 and at every power of two", "each holds its own address",
                   f"{len(bad)} of {len(addrs)} differ" + (f", first at {_hex(first)}: expected "
                                                           f"{_hex(_ADDR_MARK | first, 16)} got "
                                                           f"{_hex(got[first], 16)}" if bad else ""),
                   lambda: _address_diagnosis(first, got[first] & ~_ADDR_MARK, set(addrs),
                                              got[first] & _ADDR_MARK == _ADDR_MARK),
                   ok=not bad)
        return len(addrs) - 1

    def _address_in_address(self, region: int) -> None:
        words = region // _WORD
        expected = np.arange(words, dtype="<u8") * _WORD
        self.dev.write_mem(0, expected)
        got = self.dev.read_array(0, words, "<u8")
        bad = np.flatnonzero(got != expected)
        at, value = (int(expected[bad[0]]), int(got[bad[0]])) if len(bad) else (0, 0)

        def diagnosis() -> str:
            # A word holding another word's address was written through an aliasing address line.
            if value < region and value % _WORD == 0:
                return _address_diagnosis(at, value, None, True)
            return _bytes_diagnosis(expected.view(np.uint8), got.view(np.uint8))

        self.check(f"address-in-address over {region} bytes: every word holds its own address",
                   f"{words} words", f"{len(bad)} words differ" + (f", first at {_hex(at)}: got {_hex(value, 16)}"
                                                                 if len(bad) else ""),
                   diagnosis, ok=not len(bad))

    def _random(self, region: int) -> None:
        data = self.rng.integers(0, 256, region, dtype=np.uint8)
        self.dev.write_mem(0, data)
        got = np.frombuffer(self.dev.read_mem(0, region), np.uint8)
        bad = np.flatnonzero(got != data)
        self.check(f"random pattern (seed {self.seed}) over {region} bytes", "every byte reads back",
                   f"{len(bad)} bytes differ" + (f", first at {_hex(int(bad[0]))}: expected "
                                                 f"0x{int(data[bad[0]]):02x} got 0x{int(got[bad[0]]):02x}"
                                                 if len(bad) else ""),
                   lambda: _bytes_diagnosis(data, got), ok=not len(bad))

    # -- 5. DMA -----------------------------------------------------------------------------------

    def dma(self) -> str:
        dev = self.dev
        caps = dev.caps
        spm_row, acc_row = caps.array, caps.array * ACC_LANE_BYTES
        # (what, acc, first local row, rows): the first and the last rows of each local memory.
        moves = [("scratchpad", False, 0, _DMA_SPM_ROWS),
                 ("scratchpad", False, caps.spm_rows - _DMA_SPM_ROWS, _DMA_SPM_ROWS),
                 ("accumulator", True, 0, _DMA_ACC_ROWS),
                 ("accumulator", True, caps.acc_rows - _DMA_ACC_ROWS, _DMA_ACC_ROWS)]
        # (what, path, acc, first local row or None for COPY, bytes)
        pieces = [(f"LOAD/STORE {what} rows {local}..{local + rows - 1}", f"LOAD/STORE {what}", acc, local,
                   rows * (acc_row if acc else spm_row)) for what, acc, local, rows in moves]
        if caps.copy:
            pieces.append(("COPY", "COPY", False, None, _DMA_SPM_ROWS * spm_row))
        total = sum(n for *_, n in pieces)  # every piece is whole 8-byte words: DMA addresses stay aligned
        for tile in range(caps.tiles):
            q = dev.queue(tile)
            src, dst = dev.alloc(total), dev.alloc(total)
            try:
                # Fresh random data: a STORE that writes nothing cannot match what the memory held before.
                data = self.rng.integers(0, 256, total, dtype=np.uint8)
                dev.write_mem(src, data)
                commands = []
                offset = 0
                for tag, (_, _, acc, local, n) in enumerate(pieces):
                    if local is None:
                        commands.append(regs.copy(tag=tag, src_addr=src + offset, dst_addr=dst + offset, length=n))
                    else:
                        common = dict(mem_stride=n, local_addr=local, rows=1, cols=n // (acc_row if acc else spm_row),
                                      local_row_stride=0, local_col_stride=1, acc=acc)
                        commands += [regs.load(tag=tag, mem_addr=src + offset, **common),
                                     regs.store(tag=tag, mem_addr=dst + offset, **common)]
                    offset += n
                dev.perf(tile).clear()
                q.submit(commands, timeout=self.timeout)
                q.wait(timeout=self.timeout)
                self.perf.setdefault("dma", {})[tile] = {"perf": dev.perf(tile).read().as_dict(), "bytes_read": total,
                                                         "bytes_written": total}
                got = np.frombuffer(dev.read_mem(dst, total), np.uint8)
            finally:
                dev.free(src)
                dev.free(dst)
            offset = 0
            for what, path, _, _, n in pieces:
                want, seen = data[offset:offset + n], got[offset:offset + n]
                bad = np.flatnonzero(seen != want)
                self.check(f"tile {tile}: {what}", f"{n} bytes as sent",
                           f"{len(bad)} bytes differ" + (f", first at +{int(bad[0])}: expected "
                                                         f"0x{int(want[bad[0]]):02x} got 0x{int(seen[bad[0]]):02x}"
                                                         if len(bad) else ""),
                           f"tile {tile}'s {path} path corrupts data (memory passed step 4): check the DMA's data "
                           f"path{'' if path == 'COPY' else ' and the local memory ports'}", ok=not len(bad))
                offset += n
        return (f"{caps.tiles} tiles: LOAD/STORE of the first and last scratchpad and accumulator rows"
                f"{', COPY' if caps.copy else ''}; {2 * total * caps.tiles} bytes compared")

    # -- 6. GEMM ----------------------------------------------------------------------------------

    def gemm(self) -> str:
        dev = self.dev
        m, k, n = _GEMM_SHAPE
        self.perf["cycles_before"] = self.dev.cycles()
        for tile in range(dev.caps.tiles):
            for post in (_GEMM_POST, None):
                a, b = random_operands(self.rng, m, k, n)
                bias = self.rng.integers(-1000, 1000, n, dtype=np.int32)
                c, plan = self._gemm_on_tile(tile, a, b, bias, post)
                want = reference_gemm(a, b, bias, post)
                bad = np.argwhere(c != want)
                kind = "int8 (bias, requantise)" if post else "int32 (bias)"
                if len(bad):
                    # Fenced before the step stops, so a caller keeping the device schedules around it.
                    dev.fence(tile, f"failed bring-up's {m}x{k}x{n} {kind} GEMM self-test")
                self.check(f"tile {tile}: {m}x{k}x{n} GEMM, {kind}", "== reference_gemm",
                           f"{len(bad)} of {c.size} differ" + (
                               f", first [{bad[0][0]}, {bad[0][1]}]: expected {int(want[tuple(bad[0])])} got "
                               f"{int(c[tuple(bad[0])])}" if len(bad) else ""),
                           f"tile {tile} computes wrongly while its DMA passed step 5: check its systolic array, "
                           f"accumulator buffer{' and post-op' if post else ''}", ok=not len(bad))
        self.perf["cycles_after"] = self.dev.cycles()
        return f"{dev.caps.tiles} tiles x 2 GEMMs of {m}x{k}x{n} equal reference_gemm bit for bit"

    def _gemm_on_tile(self, tile: int, a: np.ndarray, b: np.ndarray, bias: np.ndarray,
                      post: PostOpParams | None) -> tuple[np.ndarray, Any]:
        """Run one GEMM planned for one tile on queue ``tile``; record its PERF counters."""
        dev = self.dev
        caps = dev.caps
        m, k = a.shape
        n = b.shape[1]
        kp, np_ = padded(k, caps.array), padded(n, caps.array)
        lane = 1 if post else ACC_LANE_BYTES
        a_pad, b_pad, bias_pad = pad_operand(a, (m, kp)), pad_operand(b, (kp, np_)), pad_operand(bias, (np_,))
        addrs = [dev.alloc(size) for size in (a_pad.nbytes, b_pad.nbytes, m * np_ * lane, bias_pad.nbytes)]
        try:
            for addr, data in zip(addrs, (a_pad, b_pad, None, bias_pad), strict=True):
                if data is not None:
                    dev.write_mem(addr, data)
            plan = compile_gemm(m, k, n, caps, a_addr=addrs[0], b_addr=addrs[1], c_addr=addrs[2],
                                bias_addr=addrs[3], post=post, tiles=1)
            q = dev.queue(tile)
            dev.perf(tile).clear()
            q.submit(plan.commands[0], timeout=self.timeout)
            q.wait(timeout=self.timeout)
            self.perf.setdefault("gemm", []).append({"tile": tile, "perf": dev.perf(tile).read().as_dict(),
                                                     "macs": plan.array_macs, "bytes_read": plan.load_bytes,
                                                     "bytes_written": plan.store_bytes})
            c = dev.read_array(addrs[2], (m, np_), plan.c_dtype)[:, :n]
        finally:
            for addr in addrs:
                dev.free(addr)
        return c, plan

    # -- 7. perf ----------------------------------------------------------------------------------

    def perf_counters(self) -> str:
        before, after = self.perf["cycles_before"], self.perf["cycles_after"]
        self.check("GLOBAL.CYCLES advances over the GEMMs", f"> {before}", after,
                   "the global cycle counter stands still: check its clock enable and the CYCLES_LO/HI latch",
                   ok=after > before)
        for tile, run in sorted(self.perf["dma"].items()):
            p = run["perf"]
            for name in ("bytes_read", "bytes_written"):
                counter = name.upper()
                self.check(f"tile {tile} DMA loopback: {counter}", run[name], p[counter],
                           f"tile {tile}'s {counter} does not count the DMA's bytes: check the PERF block's "
                           "byte counters")
        for run in self.perf["gemm"]:
            p, tile = run["perf"], run["tile"]
            self.check(f"tile {tile} GEMM: MACS equals the MACs issued", run["macs"], p["MACS"],
                       f"tile {tile}'s MACS does not count array_size**2 per streamed row: check its counter input")
            self.check(f"tile {tile} GEMM: CYCLES advances", "> 0", p["CYCLES"],
                       f"tile {tile}'s CYCLES stands still: check the PERF block's clock enable", ok=p["CYCLES"] > 0)
            self.check(f"tile {tile} GEMM: 0 < BUSY_COMPUTE <= CYCLES", f"1..{p['CYCLES']}", p["BUSY_COMPUTE"],
                       f"tile {tile}'s BUSY_COMPUTE is outside 1..CYCLES", ok=0 < p["BUSY_COMPUTE"] <= p["CYCLES"])
            for name in ("bytes_read", "bytes_written"):
                counter = name.upper()
                self.check(f"tile {tile} GEMM: {counter}", run[name], p[counter],
                           f"tile {tile}'s {counter} does not count the GEMM's LOAD/STORE bytes")
        self.step.data.update(dma={str(t): r for t, r in self.perf["dma"].items()}, gemm=self.perf["gemm"],
                              global_cycles=[before, after])
        return (f"cycles advance ({after - before} over the GEMMs); MACS, BYTES_READ, BYTES_WRITTEN exact on "
                f"{len(self.perf['gemm'])} GEMMs and {len(self.perf['dma'])} loopbacks")

    # -- 8. interrupts ----------------------------------------------------------------------------

    def irq(self) -> str:
        dev = self.dev
        line = self.transport.has_irq_line
        queues = [dev.queue(tile) for tile in range(dev.caps.tiles)]
        # The line is the OR of every queue's unmasked causes: clear them all before watching it.
        for q in queues:
            q.clear_irq()
        for tile, q in enumerate(queues):
            self.check(f"queue {tile}: IRQ_STATUS after clearing", 0, q.irq_status(),
                       "IRQ_STATUS does not clear on a write of 1s (W1C): check its write logic")
            if line:
                self.check(f"queue {tile}: interrupt line low with nothing pending", False,
                           self.transport.wait_irq(_IRQ_SETTLE),
                           "the interrupt line is high with IRQ_STATUS clear: check the IRQ output logic")
            before = dev.semaphore(0)
            q.submit([regs.signal(tag=0x5160, sem=0, count=1)], timeout=self.timeout)
            if line:
                self.check(f"queue {tile}: SIGNAL's completion raises the interrupt line", True,
                           self.transport.wait_irq(self.timeout),
                           "the completion did not raise the interrupt line: check IRQ_MASK/IRQ_STATUS to the pin")
            self._poll_completion(q)
            self.check(f"queue {tile}: IRQ_STATUS.completion after SIGNAL", q.IRQ_COMPLETION,
                       q.irq_status() & q.IRQ_COMPLETION,
                       "a completion was written but IRQ_STATUS.completion is not set")
            self.check(f"queue {tile}: SEM0 after SIGNAL +1", before + 1, dev.semaphore(0),
                       "SIGNAL completed without adding to the semaphore")
            q.wait(1, timeout=self.timeout)
            q.clear_irq()
            self.check(f"queue {tile}: IRQ_STATUS after W1C", 0, q.irq_status(),
                       "IRQ_STATUS does not clear on a write of 1s (W1C)")
            if line:
                self.check(f"queue {tile}: interrupt line low after clearing", False,
                           self.transport.wait_irq(_IRQ_SETTLE),
                           "the interrupt line stays high after IRQ_STATUS is cleared")
            mask = q.irq_mask()
            q.set_irq_mask(0)
            q.submit([regs.nop(tag=0x0B0B)], timeout=self.timeout)
            self._poll_completion(q)
            self.check(f"queue {tile}: IRQ_STATUS.completion with the IRQ masked", q.IRQ_COMPLETION,
                       q.irq_status() & q.IRQ_COMPLETION,
                       "IRQ_STATUS must record a completion even while IRQ_MASK hides it")
            if line:
                self.check(f"queue {tile}: interrupt line low while masked", False,
                           self.transport.wait_irq(_IRQ_SETTLE),
                           "a masked completion raised the interrupt line: IRQ_MASK is not applied")
            q.wait(1, timeout=self.timeout)
            q.set_irq_mask(mask)
            q.clear_irq()
            dev.set_semaphore(0, before)
        self.step.data["interrupt_line"] = line
        how = "the interrupt line seen by wait_irq" if line else \
            f"IRQ_STATUS by polling ({type(self.transport).__name__} has no interrupt line)"
        return f"{dev.caps.tiles} queues: completion, W1C clear and masking checked through {how}"

    def _poll_completion(self, q: Any) -> None:
        """Wait for one completion by reading the ring only, so IRQ_STATUS stays as the device set it."""
        deadline = time.monotonic() + self.timeout
        while not q.poll():
            q.check()
            if time.monotonic() > deadline:
                raise DeviceTimeout(f"queue {q.tile}: no completion within {self.timeout} s")


