"""Sequences: queue setup, constrained-random command streams, register suites and bus errors from the spec."""

from __future__ import annotations

import cocotb
import numpy as np
from pyuvm import ConfigDB, uvm_sequence

from dx1_bringup.fuzz.layout import Layout
from dx1_bringup.fuzz.streams import (
    VECTOR_ERROR_KIND,
    directed_error,
    random_batch,
    random_command,
    vector_command_meta,
)
from dx1_bringup.model.tile import MAX_SHIFT
from dx1_bringup.sim.vector_stimulus import vector_sweep
from dx1_bringup.spec import Access, ErrorCode

from .coverage import DMA_OPCODES, LEGAL_STATUS, UNIT_STATUSES, sample_queue_error, sample_sync
from .env import bfm
from .items import DECODE, REGMAP, CmdItem, RegItem

#: QUEUEn.WATCHDOG in ``WatchdogTimeoutSeq``: cycles without progress before a held command is aborted.
WATCHDOG_CYCLES = 200


def rng() -> np.random.Generator:
    """One generator per test run, seeded from cocotb's seed."""
    try:
        return ConfigDB().get(None, "", "RNG")
    except Exception:  # noqa: BLE001 - pyuvm raises its own lookup error
        gen = np.random.default_rng(cocotb.RANDOM_SEED)
        ConfigDB().set(None, "*", "RNG", gen)
        return gen


def error_sweep(r: np.random.Generator, lay: Layout, tag_base: list[int]) -> list[list[tuple[bytes, dict]]]:
    """Every (opcode, error) pair a refused command can give, once, spread over both queues."""
    pairs = [(op, status) for op, statuses in LEGAL_STATUS.items() for status in sorted(statuses)
             if status != "OK" and status not in UNIT_STATUSES]
    queues: list[list[tuple[bytes, dict]]] = [[], []]
    for i, (opcode, status) in enumerate(pairs):
        q = i % 2
        queues[q].append(directed_error(r, lay, q, tag_base[q] & 0xFFFF, opcode, status))
        tag_base[q] += 1
    return queues


# ---- sequences -----------------------------------------------------------------------------------------------

class RegSeq(uvm_sequence):
    """Base of register sequences: ``access`` runs one RegItem and returns it (response filled in)."""

    async def access(self, addr, write=False, data=0, nbytes=4, expect_err=None, error_kind=None) -> RegItem:
        item = RegItem("reg", addr=addr, write=write, data=data, nbytes=nbytes, expect_err=expect_err,
                       error_kind=error_kind)
        await self.start_item(item)
        await self.finish_item(item)
        return item

    async def write(self, addr, data, **kw):
        return await self.access(addr, True, data, **kw)

    async def read(self, addr, **kw):
        return await self.access(addr, False, **kw)


class RegWriteSeq(RegSeq):
    """One register write that must succeed (for sequences running on the command sequencer)."""

    def __init__(self, name, addr=0, data=0):
        super().__init__(name)
        self.addr, self.data = addr, data

    async def body(self):
        await self.write(self.addr, self.data, expect_err=False)


class QueueSetupSeq(RegSeq):
    """Programs both queues' rings, completion rings and DMA windows, unmasks interrupts, enables them."""

    async def body(self):
        lay: Layout = ConfigDB().get(None, "", "LAYOUT")
        for q in range(lay.config.tiles):
            blk = f"QUEUE{q}"
            for name, value in (("CONTROL", 0), ("RING_BASE", lay.ring_base(q)), ("RING_LOG2", lay.ring_log2),
                                ("CQ_BASE", lay.cq_base(q)), ("DMA_BASE", lay.win_base(q)),
                                ("DMA_LIMIT", lay.win_limit(q)), ("IRQ_MASK", 3), ("CONTROL", 1)):
                await self.write(REGMAP.address(blk, name), value, expect_err=False)


class CmdSeq(uvm_sequence):
    async def send(self, kind, queue=0, data=b"", addr=0, meta=None) -> CmdItem:
        item = CmdItem(kind, kind=kind, queue=queue, data=data, addr=addr, meta=meta)
        await self.start_item(item)
        await self.finish_item(item)
        return item


class DataInitSeq(CmdSeq):
    """Random source data in every queue's input area."""

    async def body(self):
        lay: Layout = ConfigDB().get(None, "", "LAYOUT")
        r = rng()
        for q in range(lay.config.tiles):
            data = r.integers(0, 256, size=lay.in_bytes, dtype=np.uint8).tobytes()
            await self.send("mem", queue=q, data=data, addr=lay.in_base(q))


class StreamSeq(CmdSeq):
    """Runs on the command sequencer: sets the queues up, then batches of constrained-random commands on
    both queues, waiting for every completion between batches; reads the queue registers at the end."""

    target = "cmd"
    check_memory = True
    sweep = False       # first, a batch with every (opcode, error) pair once
    batches = 4
    length = 40
    error_rate = 0.08
    sync_rate = 0.12

    async def body(self):
        lay: Layout = ConfigDB().get(None, "", "LAYOUT")
        completions = ConfigDB().get(None, "", "COMPLETIONS")
        reg_seqr = ConfigDB().get(None, "", "REG_SEQR")
        await QueueSetupSeq("setup").start(reg_seqr)
        await DataInitSeq("data").start(self.sequencer)
        r = rng()
        tags = [0, 0x8000]
        if self.sweep:
            for q, cmds in enumerate(error_sweep(r, lay, tags)):
                for cmd, meta in cmds:
                    await self.send("cmd", queue=q, data=cmd, meta=meta)
            if lay.config.tile.vector:   # every vector coverage bin once, half on each queue
                for i, (cmd, refusal) in enumerate(vector_sweep(r, lay.config.tile, tags[0] + 0x1000)):
                    meta = vector_command_meta(cmd, "none" if refusal is None else VECTOR_ERROR_KIND[refusal])
                    await self.send("cmd", queue=i % 2, data=cmd, meta={**meta, "vector_refusal": refusal})
            for q in range(lay.config.tiles):
                await self.send("doorbell", queue=q)
            await completions.wait_idle()
        await self.random_batches(lay, completions, r, tags)
        await QueueStateSeq("state").start(reg_seqr)

    async def random_batches(self, lay: Layout, completions, r: np.random.Generator, tags: list[int]):
        for _batch in range(self.batches):
            queues, pairs = random_batch(r, lay, self.length, self.error_rate, self.sync_rate, tags)
            for q, cmds in enumerate(queues):
                for cmd, meta in cmds:
                    await self.send("cmd", queue=q, data=cmd, meta=meta)
            first = int(r.integers(0, 2))
            for pair in pairs:
                sample_sync({"direction": pair["direction"],
                             "order": "signaller_first" if pair["producer"] == first else "waiter_first"})
            for q in (first, 1 - first):
                await self.send("doorbell", queue=q)
            await completions.wait_idle()


class ErrorsMixedStreamSeq(StreamSeq):
    """Every (opcode, error) pair once, then many refused commands of every kind mixed with good ones; the
    queues must keep going."""

    sweep = True
    batches = 4
    length = 40
    error_rate = 0.4
    sync_rate = 0.1


class QueueErrorStreamSeq(StreamSeq):
    """Queue errors, each followed by a resume: a doorbell past the ring (DOORBELL_RANGE), a doorbell that
    moves the tail behind commands already published (RING_OVERFLOW) while the queue is disabled, and the
    watchdog aborting a LOAD, a STORE and a COPY on a held DMA (TIMEOUT, ``WatchdogTimeoutSeq``); then the
    usual random batches show both queues keep going.  The scoreboard checks ERROR, STATUS, HEAD and TAIL."""

    batches = 2
    length = 30
    error_rate = 0.08
    sync_rate = 0.1

    async def body(self):
        lay: Layout = ConfigDB().get(None, "", "LAYOUT")
        completions = ConfigDB().get(None, "", "COMPLETIONS")
        reg_seqr = ConfigDB().get(None, "", "REG_SEQR")
        driver_tail = ConfigDB().get(None, "", "CMD_TAIL")
        r = rng()
        await QueueSetupSeq("setup").start(reg_seqr)
        await DataInitSeq("data").start(self.sequencer)
        tags = [0x4000, 0xC000]
        for q in range(lay.config.tiles):
            blk = f"QUEUE{q}"
            # A doorbell past the last entry: the queue halts, nothing moves.
            past = int(r.integers(lay.entries, 1 << 16))
            await QueueErrorSeq("range", queue=q, doorbell=past, code="DOORBELL_RANGE").start(reg_seqr)
            # Commands published with the queue disabled, then a doorbell behind them: RING_OVERFLOW.
            await RegWriteSeq("disable", REGMAP.address(blk, "CONTROL"), 0).start(reg_seqr)
            head = driver_tail()[q]
            for _ in range(int(r.integers(2, 6))):
                cmd, meta = random_command(r, lay, q, tags[q] & 0xFFFF, 0.0)
                tags[q] += 1
                await self.send("cmd", queue=q, data=cmd, meta=meta)
            await self.send("doorbell", queue=q)
            await QueueErrorSeq("overflow", queue=q, doorbell=(head + 1) % lay.entries,
                                code="RING_OVERFLOW").start(reg_seqr)
            await completions.wait_idle()
        for i, opcode in enumerate(DMA_OPCODES):
            q = i % lay.config.tiles
            await WatchdogTimeoutSeq("timeout", queue=q, opcode=opcode, tag=tags[q] & 0xFFFF).start(self.sequencer)
            tags[q] += 1
        await self.random_batches(lay, completions, r, [tags[0] + 0x100, tags[1] + 0x100])
        await QueueStateSeq("state").start(reg_seqr)


class SyncHeavyStreamSeq(StreamSeq):
    """Short commands and many SIGNAL/WAIT pairs between the queues."""

    batches = 4
    length = 30
    error_rate = 0.05
    sync_rate = 0.35


def readable(addr: int) -> bool:
    return DECODE[addr][1].register.access is not Access.WO


def all_addresses() -> list[int]:
    return sorted(DECODE)


#: RW registers whose stored bits read back as written (masked): not self-clearing controls.
def plain_rw(addr: int) -> bool:
    block, reg = DECODE[addr]
    return reg.register.access is Access.RW and reg.register.name != "CONTROL"


class RegResetSeq(RegSeq):
    """Every readable register reads its reset value (the scoreboard's model and the spec's field resets)."""

    async def body(self):
        for addr in all_addresses():
            if not readable(addr):
                continue
            item = await self.read(addr, expect_err=False)
            block, reg = DECODE[addr]
            if plain_rw(addr) and item.rdata != reg.register.reset & reg.register.writable_mask:
                raise AssertionError(f"{block.name}.{reg.name} resets to {item.rdata:#x}, the spec says "
                                     f"{reg.register.reset:#x}")


class RegWalkSeq(RegSeq):
    """Walking ones (and all ones) through every RW/W1C register, masked by its writable bits; then reset values."""

    async def body(self):
        for addr in all_addresses():
            block, reg = DECODE[addr]
            spec = reg.register
            if spec.access not in (Access.RW, Access.W1C):
                continue
            for value in [1 << b for b in range(32)] + [0xFFFF_FFFF, 0]:
                await self.write(addr, value, expect_err=False)
                item = await self.read(addr, expect_err=False)
                if plain_rw(addr) and item.rdata != value & spec.writable_mask:
                    raise AssertionError(f"{block.name}.{reg.name}: wrote {value:#x}, read {item.rdata:#x}, "
                                         f"writable mask {spec.writable_mask:#x}")
            if spec.access is Access.RW:
                await self.write(addr, spec.reset, expect_err=False)


class RegAliasSeq(RegSeq):
    """Write one RW register, read every other register: nothing else changes (the model says what must read)."""

    async def body(self):
        addrs = [a for a in all_addresses() if readable(a)]
        for addr in all_addresses():
            if not plain_rw(addr):
                continue
            spec = DECODE[addr][1].register
            pattern = 0xA5C3_5A3C & spec.writable_mask or spec.writable_mask
            await self.write(addr, pattern, expect_err=False)
            for other in addrs:
                if other != addr:
                    await self.read(other, expect_err=False)   # the scoreboard's model says what must read
            await self.write(addr, spec.reset, expect_err=False)


class RegShuffledSeq(RegSeq):
    """Every register once, in a seeded random order: RO read, WO benign write, RW/W1C random write + read."""

    async def body(self):
        r = rng()
        order = all_addresses()
        r.shuffle(order)
        for addr in order:
            block, reg = DECODE[addr]
            spec = reg.register
            if spec.access is Access.RO:
                await self.read(addr, expect_err=False)
            elif spec.access is Access.WO:
                # Benign values: no reset, no clear, a doorbell to the current tail.
                await self.write(addr, 0, expect_err=False)
            else:
                value = int(r.integers(0, 1 << 32))
                if spec.name == "RING_LOG2":
                    value = int(r.integers(1, 17))
                await self.write(addr, value, expect_err=False)
                await self.read(addr, expect_err=False)


class BusErrorSeq(RegSeq):
    """Each bus error gets SLVERR, changes nothing, and the next good access works."""

    target = "reg"

    async def body(self):
        scratch = REGMAP.address("GLOBAL", "SCRATCH")
        magic = REGMAP.address("GLOBAL", "MAGIC")
        await self.write(scratch, 0x1234_5678, expect_err=False)
        ro = [a for a in all_addresses() if DECODE[a][1].register.access is Access.RO]
        wo = [a for a in all_addresses() if DECODE[a][1].register.access is Access.WO]
        unmapped = [b.base + b.registers[-1].offset + 4 for b in REGMAP.blocks] + [REGMAP.size, 0xFFFC, 0x8000]
        cases = []
        cases += [("unmapped", dict(addr=a, write=w)) for a in unmapped for w in (False, True)]
        # cocotbext-axi puts the unaligned address on AxADDR (with partial strobes for writes).
        cases += [("misaligned", dict(addr=scratch + off, write=False, nbytes=1)) for off in (1, 2, 3)]
        cases += [("misaligned", dict(addr=magic + 1, write=False, nbytes=2)),
                  ("misaligned", dict(addr=REGMAP.address("QUEUE1", "IRQ_STATUS") + 2, write=False, nbytes=2))]
        cases += [("misaligned", dict(addr=scratch + 1, write=True, nbytes=3)),
                  ("misaligned", dict(addr=magic + 2, write=True, nbytes=2))]
        cases += [("partial_strobe", dict(addr=scratch, write=True, nbytes=n)) for n in (1, 2, 3)]
        cases += [("partial_strobe", dict(addr=REGMAP.address(blk, name), write=True, nbytes=2))
                  for blk, name in (("QUEUE0", "IRQ_STATUS"), ("PERF0", "CONTROL"), ("GLOBAL", "RESET"))]
        cases += [("write_ro", dict(addr=a, write=True)) for a in ro]
        cases += [("read_wo", dict(addr=a, write=False)) for a in wo]
        for kind, kw in cases:
            await self.access(data=0xFFFF_FFFF, expect_err=True, error_kind=kind, **kw)
            # The device keeps serving, and the refused access changed nothing.
            item = await self.read(scratch, expect_err=False)
            assert item.rdata == 0x1234_5678, f"{kind} {kw} changed SCRATCH to {item.rdata:#x}"
            item = await self.read(magic, expect_err=False)
            assert item.rdata == 0x4458_3131, f"after {kind} {kw} MAGIC reads {item.rdata:#x}"
            if kind == "write_ro":
                await self.read(kw["addr"], expect_err=False)   # the scoreboard checks the value is unchanged


class QueueErrorSeq(RegSeq):
    """Ring ``queue``'s doorbell at ``doorbell`` (``None``: the queue has halted already), which must halt it
    with ``code``; read the queue's state (the scoreboard compares it with the model), clear the interrupt,
    resume."""

    def __init__(self, name, queue=0, doorbell=0, code="DOORBELL_RANGE"):
        super().__init__(name)
        self.queue, self.doorbell, self.code = queue, doorbell, code

    async def body(self):
        blk = f"QUEUE{self.queue}"
        if self.doorbell is not None:
            await self.write(REGMAP.address(blk, "DOORBELL"), self.doorbell, expect_err=False)
        error = await self.read(REGMAP.address(blk, "ERROR"), expect_err=False)
        status = await self.read(REGMAP.address(blk, "STATUS"), expect_err=False)
        for name in ("HEAD", "TAIL", "IRQ_STATUS"):
            await self.read(REGMAP.address(blk, name), expect_err=False)
        if error.rdata & 0xFF == ErrorCode[self.code] and status.rdata & 2:
            sample_queue_error({"code": self.code, "queue": self.queue})
        await self.write(REGMAP.address(blk, "IRQ_STATUS"), 0xFFFF_FFFF, expect_err=False)
        # Enable and resume.  STATUS is not read after this: the RTL is busy for a while with commands
        # that were pending, which the model runs at once.
        await self.write(REGMAP.address(blk, "CONTROL"), 0b11, expect_err=False)


class WatchdogTimeoutSeq(CmdSeq):
    """Runs on the command sequencer: with QUEUEn.WATCHDOG set and tile ``queue``'s DMA held (the test-only
    ``stall_units`` input, and the model stalled alike), one good ``opcode`` (LOAD, STORE or COPY) makes no
    progress; the watchdog must complete it with TIMEOUT, having done nothing of it, and halt the queue.
    Then the DMA is released, the queue resumed (``QueueErrorSeq``) and the watchdog turned off again."""

    def __init__(self, name, queue=0, opcode="LOAD", tag=0):
        super().__init__(name)
        self.queue, self.opcode, self.tag = queue, opcode, tag

    async def body(self):
        lay: Layout = ConfigDB().get(None, "", "LAYOUT")
        completions = ConfigDB().get(None, "", "COMPLETIONS")
        reg_seqr = ConfigDB().get(None, "", "REG_SEQR")
        r, q = rng(), self.queue
        watchdog = REGMAP.address(f"QUEUE{q}", "WATCHDOG")
        await RegWriteSeq("watchdog on", watchdog, WATCHDOG_CYCLES).start(reg_seqr)
        bfm().set_stalls({("dma", q)})
        while True:   # a good command of this opcode, drawn as the random streams draw them
            cmd, meta = random_command(r, lay, q, self.tag, 0.0)
            if meta["opcode"] == self.opcode:
                break
        await self.send("cmd", queue=q, data=cmd, meta=meta)
        await self.send("doorbell", queue=q)
        await completions.wait_idle()
        bfm().set_stalls(())
        await QueueErrorSeq("halted", queue=q, doorbell=None, code="TIMEOUT").start(reg_seqr)
        await RegWriteSeq("watchdog off", watchdog, 0).start(reg_seqr)


class CsrSuiteSeq(RegSeq):
    """The register suites generated from the spec, in one run: reset values, walking ones, aliasing, shuffled."""

    target = "reg"

    async def body(self):
        for seq in (RegResetSeq("reset"), RegWalkSeq("walk"), RegAliasSeq("alias"), RegShuffledSeq("shuffled")):
            await seq.start(self.sequencer)


class QueueStateSeq(RegSeq):
    """Reads every queue register at the end (HEAD, TAIL, STATUS, ERROR, IRQ_STATUS ...) against the model."""

    async def body(self):
        for block in REGMAP.blocks:
            if block.spec.type.name in ("QUEUE", "PERF") or block.name == "GLOBAL":
                for reg in block.registers:
                    addr = block.base + reg.offset
                    if readable(addr) and reg.register.name not in ("BUSY_LOAD", "BUSY_STORE", "BUSY_COMPUTE",
                                                                    "BUSY_VECTOR", "STALL_DEP", "STALL_MEM",
                                                                    "MACS_LO", "MACS_HI"):
                        await self.read(addr, expect_err=False)


__all__ = ["MAX_SHIFT", "rng", "directed_error", "error_sweep", "QueueSetupSeq", "DataInitSeq", "StreamSeq",
           "ErrorsMixedStreamSeq", "QueueErrorStreamSeq", "SyncHeavyStreamSeq", "RegWriteSeq", "RegResetSeq",
           "RegWalkSeq", "RegAliasSeq", "RegShuffledSeq", "BusErrorSeq", "QueueErrorSeq", "WatchdogTimeoutSeq",
           "CsrSuiteSeq", "QueueStateSeq", "WATCHDOG_CYCLES"]
