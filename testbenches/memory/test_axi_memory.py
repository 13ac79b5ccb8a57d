"""The shared device memory: every port at once against a bytearray model, errors, fairness and speed.

Every test runs on one bank (``dx1_axi_memory``) and on four banks (``dx1_axi_memory_b4``).

One cocotbext-axi ``AxiMaster`` drives each slave port ``s0``, ``s1``, ...  Error bursts that a
well-behaved master never makes (a burst running off the end of memory) are driven straight onto
the master's channels, with the master's own bookkeeping told to expect the response, so its
checks (response id, ``rlast`` placement) still apply.  That part uses cocotbext-axi's internals
(``AxiWriteRespCmd``/``AxiReadRespCmd``, ``tag_context_manager``), as of version 0.1.28.
"""

from __future__ import annotations

import logging
import random

import cocotb
import pytest
from cocotb.triggers import Event, RisingEdge, with_timeout
from cocotbext.axi import AxiBurstType, AxiBus, AxiMaster, AxiProt, AxiResp
from cocotbext.axi.axi_master import AxiReadRespCmd, AxiWriteRespCmd

from dx1_bringup.sim import run_cocotb_shared
from dx1_bringup.sim.harness import CLOCK_NS, Harness, seed_note, set_pauses

MODULES = ("dx1_axi_memory", "dx1_axi_memory_b4")

# test_axi_memory_parameters builds components that refuse their parameters and are never elaborated;
# Amaranth warns about them whenever they are collected, which may be during a later test.
pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


class MemoryTB(Harness):
    """Clock, reset and one AXI master per port around a ``dx1_axi_memory`` module.

    Parameters
    ----------
    dut:
        The cocotb handle of the memory.
    rng:
        With a generator, every channel of every master gets random pauses (idle cycles on
        AW/W/AR, back-pressure on B/R); without, the masters run flat out.
    pause:
        Probability of a pause in any cycle.
    """

    def __init__(self, dut, rng: random.Random | None = None, pause: float = 0.25):
        from dx1_bringup.gateware import rtl_module

        super().__init__(dut)
        mem = rtl_module(dut._name).build()
        self.size, self.ports, self.banks = mem.size, mem.ports, mem.banks
        self.lanes = mem.data_width // 8
        self.masters = [AxiMaster(AxiBus.from_prefix(dut, f"s{i}_"), dut.clk, dut.rst) for i in range(self.ports)]
        for m in self.masters:
            m.write_if.log.setLevel(logging.WARNING)
            m.read_if.log.setLevel(logging.WARNING)
            if rng is not None:
                set_pauses((m.write_if.aw_channel, m.write_if.w_channel, m.write_if.b_channel,
                            m.read_if.ar_channel, m.read_if.r_channel), rng, pause)

    async def fill(self, model: bytearray, rng: random.Random) -> None:
        """Write random bytes over the whole memory (4 KiB bursts spread over the ports) and the model."""
        model[:] = rng.randbytes(self.size)
        page = 4096

        async def writer(port: int):
            for addr in range(port * page, self.size, self.ports * page):
                resp = await self.masters[port].write(addr, model[addr:addr + page])
                assert resp.resp == AxiResp.OKAY, f"filling {addr:#x} gave {resp.resp!r}"

        tasks = [cocotb.start_soon(writer(p)) for p in range(self.ports)]
        for t in tasks:
            await t

    async def check_all(self, model: bytearray, what: str) -> None:
        """Read the whole memory back through port 0 and compare it with the model."""
        got = (await self.masters[0].read(0, self.size)).data
        assert len(got) == self.size, f"{what}: reading the whole memory returned {len(got)} bytes"
        if got != bytes(model):
            first = next(i for i in range(self.size) if got[i] != model[i])
            bad = sum(a != b for a, b in zip(got, model, strict=True))
            raise AssertionError(f"{what}: {bad} bytes of memory differ from the model ({seed_note()}); first at "
                                 f"{first:#x}: RTL {got[first]:#04x}, model {model[first]:#04x}")

    # ---- raw bursts (ones cocotbext-axi would split or refuse) ---------------------------------
    async def raw_write(self, port: int, addr: int, words: list[int], awid: int, *, size: int | None = None,
                        burst: int = AxiBurstType.INCR, strb: int | None = None) -> AxiResp:
        """One AW of ``len(words)`` beats and its W beats, as given; returns the B response."""
        w = self.masters[port].write_if
        size = (self.lanes - 1).bit_length() if size is None else size
        event = Event()
        w.in_flight_operations += 1
        w._idle.clear()
        w.active_id[awid] += 1
        w.tag_context_manager.start_cmd(awid, AxiWriteRespCmd(addr, len(words) * self.lanes, size, len(words),
                                                              AxiProt.NONSECURE, [1], event))
        aw = w.aw_channel._transaction_obj()
        aw.awid, aw.awaddr, aw.awlen, aw.awsize, aw.awburst = awid, addr, len(words) - 1, size, int(burst)
        await w.aw_channel.send(aw)
        for k, word in enumerate(words):
            beat = w.w_channel._transaction_obj()
            beat.wdata, beat.wstrb, beat.wlast = word, w.strb_mask if strb is None else strb, k == len(words) - 1
            await w.w_channel.send(beat)
        await event.wait()
        return event.data.resp

    async def raw_read(self, port: int, addr: int, beats: int, arid: int, *, size: int | None = None,
                       burst: int = AxiBurstType.INCR) -> tuple[AxiResp, bytes]:
        """One AR of ``beats`` beats (``addr`` aligned to the bus); returns the response and the data."""
        r = self.masters[port].read_if
        size = (self.lanes - 1).bit_length() if size is None else size
        assert addr % self.lanes == 0
        event = Event()
        r.in_flight_operations += 1
        r._idle.clear()
        r.active_id[arid] += 1
        # The master unpacks 2**size bytes a beat; ask for full beats so every data bit is seen.
        r.tag_context_manager.start_cmd(arid, AxiReadRespCmd(addr, beats * self.lanes, (self.lanes - 1).bit_length(),
                                                             beats, AxiProt.NONSECURE, [beats], event))
        ar = r.ar_channel._transaction_obj()
        ar.arid, ar.araddr, ar.arlen, ar.arsize, ar.arburst = arid, addr, beats - 1, size, int(burst)
        await r.ar_channel.send(ar)
        await event.wait()
        return event.data.resp, event.data.data


def random_span(rng: random.Random, lo: int, hi: int) -> tuple[int, int]:
    """A random (address, length) inside [lo, hi): short, medium or long, any alignment."""
    limit = rng.choice((8, 64, 600, 2048, 4500))
    length = rng.randint(1, min(limit, hi - lo))
    return rng.randint(lo, hi - length), length


async def setup(dut, *, backpressure: bool) -> tuple[MemoryTB, random.Random]:
    rng = random.Random(cocotb.RANDOM_SEED)
    tb = MemoryTB(dut, random.Random(rng.random()) if backpressure else None)
    await tb.reset()
    return tb, rng


@cocotb.test()
async def random_traffic(dut):
    """All ports at once, random pauses everywhere: own-region writes and reads plus shared reads."""
    tb, rng = await setup(dut, backpressure=True)
    model = bytearray(tb.size)
    await tb.fill(model, rng)
    region = tb.size // (tb.ports + 1)      # region 0 is shared and read-only; port i owns region i + 1
    start = tb.cycle

    async def own(port: int, prng: random.Random):
        master = tb.masters[port]
        lo, hi = (port + 1) * region, (port + 2) * region
        for op in range(40):
            addr, length = random_span(prng, lo, hi)
            data = prng.randbytes(length)
            resp = await master.write(addr, data, awid=prng.randrange(16))
            assert resp.resp == AxiResp.OKAY, f"port {port} write {addr:#x}+{length} gave {resp.resp!r} ({seed_note()})"
            model[addr:addr + length] = data
            # Read back a span around and across what was written.
            raddr = max(lo, addr - prng.randrange(0, 40))
            rlen = min(hi, addr + length + prng.randrange(0, 40)) - raddr
            got = await master.read(raddr, rlen, arid=prng.randrange(16))
            assert got.resp == AxiResp.OKAY, f"port {port} read {raddr:#x}+{rlen} gave {got.resp!r} ({seed_note()})"
            assert got.data == bytes(model[raddr:raddr + rlen]), (
                f"port {port} op {op}: read {raddr:#x}+{rlen} after writing {addr:#x}+{length} differs from "
                f"the model ({seed_note()})")

    async def shared(port: int, prng: random.Random):
        master = tb.masters[port]
        for op in range(25):
            addr, length = random_span(prng, 0, region)
            got = await master.read(addr, length, arid=prng.randrange(16))
            assert got.resp == AxiResp.OKAY and got.data == bytes(model[addr:addr + length]), (
                f"port {port} shared read {op} at {addr:#x}+{length} differs from the model ({seed_note()})")

    tasks = []
    for p in range(tb.ports):
        tasks.append(cocotb.start_soon(own(p, random.Random(rng.random()))))
        tasks.append(cocotb.start_soon(shared(p, random.Random(rng.random()))))

    async def join():
        for t in tasks:
            await t

    await with_timeout(join(), 2_000_000 * CLOCK_NS, "ns")
    dut._log.info("random traffic took %d cycles", tb.cycle - start)
    await tb.check_all(model, "after random traffic")


@cocotb.test()
async def errors_then_good(dut):
    """Out-of-range, overrunning, narrow and non-INCR bursts get SLVERR, change nothing, and service goes on."""
    tb, rng = await setup(dut, backpressure=True)
    model = bytearray(tb.size)
    await tb.fill(model, rng)
    lanes, end = tb.lanes, tb.size
    m = tb.masters
    junk = [rng.getrandbits(8 * lanes) for _ in range(256)]

    bad_writes = [  # (port, what, coroutine factory)
        ("at size", lambda p: m[p].write(end, b"\xa5" * 16, awid=3)),
        ("far out", lambda p: m[p].write(0x8000_0000 + 8, b"\x5a" * 40, awid=5)),
        ("last byte of the address space", lambda p: m[p].write((1 << 32) - 8, b"\x11" * 8, awid=1)),
        ("narrow", lambda p: m[p].write(0x100, b"\x77" * 32, awid=7, size=2)),
        ("FIXED", lambda p: m[p].write(0x200, b"\x66" * 32, awid=2, burst=AxiBurstType.FIXED)),
        ("WRAP", lambda p: m[p].write(0x300, b"\x55" * 32, awid=9, burst=AxiBurstType.WRAP)),
    ]
    for i, (what, make) in enumerate(bad_writes):
        port = i % tb.ports
        resp = await make(port)
        assert resp.resp == AxiResp.SLVERR, f"write {what} on port {port} gave {resp.resp!r} ({seed_note()})"
        good = rng.randbytes(24)
        resp = await m[port].write(0x1000 + 64 * i + 3, good)
        assert resp.resp == AxiResp.OKAY, f"the write after {what} gave {resp.resp!r}"
        model[0x1000 + 64 * i + 3:0x1000 + 64 * i + 27] = good

    # Bursts that start inside and run past the end; the in-range beats must not be written either.
    for i, (start_words, beats) in enumerate([(1, 2), (4, 8), (200, 256), (1, 256)]):
        port = i % tb.ports
        addr = end - start_words * lanes
        resp = await tb.raw_write(port, addr, junk[:beats], awid=i + 4)
        assert resp == AxiResp.SLVERR, f"write of {beats} beats from {addr:#x} gave {resp!r} ({seed_note()})"
        resp, data = await tb.raw_read(port, addr, beats, arid=i + 8)
        assert resp == AxiResp.SLVERR, f"read of {beats} beats from {addr:#x} gave {resp!r} ({seed_note()})"
        assert data == bytes(beats * lanes), f"an overrunning read returned data other than 0 ({seed_note()})"
    # Bursts crossing a 4 KiB page inside memory (AXI forbids them) get SLVERR and write nothing.
    for i, (before, beats) in enumerate([(1, 2), (3, 16), (100, 256)]):
        port = i % tb.ports
        addr = 0x2000 - before * lanes
        resp = await tb.raw_write(port, addr, junk[:beats], awid=i + 1)
        assert resp == AxiResp.SLVERR, f"write of {beats} beats across the page at 0x2000 gave {resp!r} ({seed_note()})"
        resp, data = await tb.raw_read(port, addr, beats, arid=i + 2)
        assert resp == AxiResp.SLVERR and data == bytes(beats * lanes), (
            f"read of {beats} beats across the page at 0x2000 gave {resp!r} or data other than 0 ({seed_note()})")
    # The largest legal burst ending exactly at the end is fine.
    resp = await tb.raw_write(0, end - 256 * lanes, junk, awid=15)
    assert resp == AxiResp.OKAY, f"a 256-beat write ending at the end of memory gave {resp!r}"
    for k, word in enumerate(junk):
        model[end - (256 - k) * lanes:end - (255 - k) * lanes] = word.to_bytes(lanes, "little")
    resp, data = await tb.raw_read(1 % tb.ports, end - 256 * lanes, 256, arid=14)
    assert resp == AxiResp.OKAY and data == bytes(model[end - 256 * lanes:]), "the 256-beat read at the end failed"

    bad_reads = [
        ("at size", lambda p: m[p].read(end, 16, arid=3)),
        ("far out", lambda p: m[p].read(0xFFFF_0000, 64, arid=6)),
        ("narrow", lambda p: m[p].read(0x100, 32, arid=1, size=2)),
        ("FIXED", lambda p: m[p].read(0x200, 32, arid=2, burst=AxiBurstType.FIXED)),
        ("WRAP", lambda p: m[p].read(0x300, 32, arid=4, burst=AxiBurstType.WRAP)),
    ]
    for i, (what, make) in enumerate(bad_reads):
        port = i % tb.ports
        got = await make(port)
        assert got.resp == AxiResp.SLVERR, f"read {what} on port {port} gave {got.resp!r} ({seed_note()})"
        assert not any(got.data), f"read {what} on port {port} returned data other than 0 ({seed_note()})"
        got = await m[port].read(0x2000 + 8 * i, 100)
        assert got.resp == AxiResp.OKAY and got.data == bytes(model[0x2000 + 8 * i:0x2000 + 8 * i + 100]), (
            f"the read after {what} on port {port} failed ({seed_note()})")

    # Errors on every port at once, mixed with good traffic on the others.
    async def mixed(port: int):
        for k in range(6):
            if (k + port) % 2:
                got = await m[port].read(end + 64 * k, 64, arid=k)
                assert got.resp == AxiResp.SLVERR and not any(got.data)
            else:
                resp = await m[port].write(end + 64 * k, b"\xee" * 64, awid=k)
                assert resp.resp == AxiResp.SLVERR

    tasks = [cocotb.start_soon(mixed(p)) for p in range(tb.ports)]
    for t in tasks:
        await t
    await tb.check_all(model, "after the bad bursts")


async def timed(tb: MemoryTB, coro) -> tuple[float, object]:
    await RisingEdge(tb.dut.clk)
    start = tb.cycle
    result = await coro
    return tb.cycle - start, result


@cocotb.test()
async def throughput(dut):
    """256-beat bursts take about 256 cycles, each direction, alone and with the other direction busy."""
    tb, rng = await setup(dut, backpressure=False)
    lanes = tb.lanes
    length = 256 * lanes
    limit = 256 + 16
    data = rng.randbytes(length)
    m = tb.masters

    cycles, resp = await timed(tb, m[0].write(0x1000, data, awid=1))
    assert resp.resp == AxiResp.OKAY
    dut._log.info("256-beat write: %d cycles", cycles)
    assert cycles <= limit, f"a 256-beat write took {cycles} cycles, more than {limit}"

    cycles, got = await timed(tb, m[0].read(0x1000, length, arid=2))
    assert got.resp == AxiResp.OKAY and got.data == data
    dut._log.info("256-beat read: %d cycles", cycles)
    assert cycles <= limit, f"a 256-beat read took {cycles} cycles, more than {limit}"

    # A read on one port and a write on another at the same time: neither slows the other.
    other = 1 % tb.ports
    data2 = rng.randbytes(length)
    await RisingEdge(dut.clk)
    start = tb.cycle
    finished = {}

    async def run(name, coro):
        result = await coro
        finished[name] = tb.cycle - start
        return result

    rt = cocotb.start_soon(run("read", m[0].read(0x1000, length, arid=3)))
    wt = cocotb.start_soon(run("write", m[other].write(0x3000, data2, awid=4)))
    got, resp = await rt, await wt
    assert got.data == data and resp.resp == AxiResp.OKAY
    dut._log.info("256-beat read and write at once: read %d cycles, write %d cycles", finished["read"],
                  finished["write"])
    for name, cycles in finished.items():
        assert cycles <= limit, f"the 256-beat {name} beside the other direction took {cycles} cycles"

    # Eight 256-beat reads back to back on one port: at most a few cycles between bursts.
    cycles, got = await timed(tb, m[0].read(0x2000, 8 * length, arid=5))
    assert got.resp == AxiResp.OKAY and len(got.data) == 8 * length
    dut._log.info("8 x 256-beat reads back to back: %d cycles", cycles)
    assert cycles <= 8 * 256 + 8 * 4 + 16, f"8 back-to-back 256-beat reads took {cycles} cycles"


@cocotb.test()
async def banked_throughput(dut):
    """Bursts to different banks on different ports are served at once, each at one beat a cycle."""
    tb, rng = await setup(dut, backpressure=False)
    length = 256 * tb.lanes
    limit = 256 + 16
    m = tb.masters
    data = rng.randbytes(length)
    # Ports 0 and 1 read pages 0 and 1 while port 2 writes page 2, then again with the pages rotated.
    for turn in range(3):
        pages = [(turn + k) % 3 for k in range(3)]
        await RisingEdge(dut.clk)
        start = tb.cycle
        finished = {}

        async def run(name, coro, start=start, finished=finished):
            result = await coro
            finished[name] = tb.cycle - start
            return result

        tasks = [cocotb.start_soon(run(f"read on port {p % tb.ports}", m[p % tb.ports].read(0x1000 * pages[p], length,
                                                                                             arid=p)))
                 for p in range(2)]
        tasks.append(cocotb.start_soon(run(f"write on port {2 % tb.ports}",
                                           m[2 % tb.ports].write(0x1000 * pages[2], data, awid=2))))
        for t in tasks:
            await t
        total = tb.cycle - start
        dut._log.info("banks %d, pages %s: %s, all %d cycles", tb.banks, pages, finished, total)
        # One bank serves the two reads one after the other; separate banks serve them at once.
        bound = limit if tb.banks >= 3 else 2 * limit
        assert total <= bound, (f"two 256-beat reads and a write to pages {pages} took {total} cycles with "
                                f"{tb.banks} banks, more than {bound}")
        if tb.banks == 1:
            assert total > 2 * 256, f"two 256-beat reads from one bank took only {total} cycles, less than 512"


@cocotb.test()
async def fairness(dut):
    """Every port asking all the time: bursts are served round-robin, each port in turn."""
    tb, rng = await setup(dut, backpressure=False)
    lanes = tb.lanes
    order = {"read": [], "write": []}
    bursts = 6

    async def reader(port: int):
        events = [tb.masters[port].init_read(0x4000 * port, 64 * lanes, arid=port) for _ in range(bursts)]
        for ev in events:
            await ev.wait()
            order["read"].append(port)

    async def writer(port: int):
        events = [tb.masters[port].init_write(0x4000 * port + 0x1000, bytes(64 * lanes), awid=port)
                  for _ in range(bursts)]
        for ev in events:
            await ev.wait()
            order["write"].append(port)

    tasks = [cocotb.start_soon(f(p)) for p in range(tb.ports) for f in (reader, writer)]
    for t in tasks:
        await t
    for kind, seen in order.items():
        dut._log.info("%s completion order: %s", kind, seen)
        counts = [0] * tb.ports
        for port in seen:
            counts[port] += 1
            assert max(counts) - min(counts) <= 1, f"{kind} bursts were not served round-robin: {seen}"


@pytest.mark.parametrize("testcase", ["random_traffic", "errors_then_good", "throughput", "banked_throughput",
                                      "fairness"])
@pytest.mark.parametrize("module", MODULES)
def test_axi_memory(module, testcase, seed, cocotb_batch):
    run_cocotb_shared(module, "memory.test_axi_memory", testcase, batch=cocotb_batch, seed=seed, quiet=True)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"size": 2048, "ports": 2}, "Memory size must be a power of two of at least 4096 bytes, not 2048"),
    ({"size": 65536 + 4096, "ports": 2}, "Memory size must be a power of two"),
    ({"size": 65536.0, "ports": 2}, "Memory size must be"),
    ({"size": 65536, "ports": 0}, "Memory port count must be an integer in 1..17, not 0"),
    ({"size": 65536, "ports": 18}, "Memory port count must be an integer in 1..17, not 18"),
    ({"size": 65536, "ports": 2, "banks": 3}, "Memory bank count must be a power of two in 1..16, not 3"),
    ({"size": 65536, "ports": 2, "banks": 32}, "Memory bank count must be a power of two in 1..16, not 32"),
    ({"size": 8192, "ports": 2, "banks": 4}, "Memory of 8192 bytes cannot hold 4 banks of at least 4096 bytes each"),
    ({"size": 65536, "ports": True}, "Memory port count must be"),
    ({"size": 1 << 13, "ports": 1, "addr_width": 12}, "Memory size must fit in the 12-bit address space"),
    ({"size": 65536, "ports": 2, "data_width": 48}, "AXI4 data width must be one of"),
])
def test_axi_memory_parameters(kwargs, message):
    from dx1_bringup.gateware.memory import AxiMemory

    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        AxiMemory(**kwargs)


@pytest.mark.parametrize(("ports", "banks"), [(1, 1), (2, 2), (8, 1), (17, 8)])
@pytest.mark.parametrize("data_width", [32, 64, 256])
def test_axi_memory_elaborates(ports, banks, data_width):
    """Other sizes than the generated ones convert to Verilog (1 port has a 1-bit port index, 8 a full one)."""
    from amaranth.back import rtlil

    from dx1_bringup.gateware.memory import AxiMemory

    mem = AxiMemory(4096 * banks, ports, banks=banks, data_width=data_width, id_width=2)
    assert [name for name in mem.signature.members] == [f"s{i}" for i in range(ports)]
    rtlil.convert(mem, name="mem")
