"""Device memory: banks of RAM behind several AXI4 slave ports, which is also the interconnect."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In
from amaranth.utils import bits_for, exact_log2

from ..spec import BUS_BYTES
from .axi import BURST_INCR, PAGE_BYTES, RESP_OKAY, RESP_SLVERR, AXI4Signature

__all__ = ["AxiMemory", "MAX_BANKS", "MAX_OUTSTANDING", "MAX_PORTS", "MIN_SIZE", "PAGE_BYTES", "READ_BUFFER_DEPTH"]

#: Most masters one memory serves (the host port and a command processor and a DMA for each of 8 tiles).
MAX_PORTS = 17
#: Most banks of one memory.
MAX_BANKS = 16
#: Smallest memory, in bytes (one page).
MIN_SIZE = PAGE_BYTES
#: Bursts one port may have in flight in each direction (address taken, last response not yet taken).
MAX_OUTSTANDING = 255
#: Beats of read data the memory holds for a master that is not ready (the skid buffer).  With one
#: beat always in the memory's read pipeline, three entries let a master that is ready every cycle
#: get a beat every cycle, without the master's ``rready`` reaching back into the memory port.
READ_BUFFER_DEPTH = 3


def _round_robin(m: Module, name: str, requests: list, last: Signal):
    """Pick the first requesting port after ``last``, in circular order.

    Returns ``(any, grant)``: whether any port requests, and which one is picked.  The port just
    served comes last, so every requester is picked within ``len(requests)`` turns.
    """
    n = len(requests)
    grant = Signal(len(last), name=f"{name}_grant")
    any_ = Signal(name=f"{name}_any")
    m.d.comb += any_.eq(Cat(*requests).any())
    with m.Switch(last):
        for prev in range(n):
            # The last case is the default, so that out-of-range values of ``last`` are covered.
            with (m.Case(prev) if prev < n - 1 else m.Default()):
                order = [(prev + k) % n for k in range(1, n + 1)]
                pick = Const(order[-1], len(last))
                for i in reversed(order):
                    pick = Mux(requests[i], i, pick)
                m.d.comb += grant.eq(pick)
    return any_, grant


def _in_flight(m: Module, take, done, to_bank, count: Signal, bank: Signal) -> None:
    """Count one port's bursts in flight in one direction, and the bank they go to.

    ``take`` is high when a burst's address is taken (for bank ``to_bank``), ``done`` when its last
    response is; ``count`` and ``bank`` are the registers kept.
    """
    with m.If(take):
        m.d.sync += bank.eq(to_bank)
    with m.If(take & ~done):
        m.d.sync += count.eq(count + 1)
    with m.Elif(done & ~take):
        m.d.sync += count.eq(count - 1)


class _Burst:
    """The burst one direction of a bank serves, and the start of the next from its address channel.

    ``busy`` while the burst's beats go on, ``port`` the port it serves and ``last_port`` the port
    served last (where the round-robin starts), ``addr`` the word of the current beat, ``left`` the
    beats after it, ``err`` whether it is answered SLVERR, ``id`` its AXI id.  Signals are named
    ``{d}_busy``, ``{d}_port`` and so on.
    """

    def __init__(self, d: str, ports: int, word_bits: int, id_width: int):
        port_bits = max(1, bits_for(ports - 1))
        self.busy = Signal(name=f"{d}_busy")
        self.port = Signal(port_bits, name=f"{d}_port")
        self.last_port = Signal(port_bits, init=ports - 1, name=f"{d}_last_port")
        self.addr = Signal(word_bits, name=f"{d}_addr")
        self.left = Signal(8, name=f"{d}_left")
        self.err = Signal(name=f"{d}_err")
        self.id = Signal(id_width, name=f"{d}_id")

    def take(self, m: Module, ch: str, ports: list, requests: list, beat_size: int, bad_burst) -> tuple:
        """Arbitrate address channel ``ch`` (``"aw"`` or ``"ar"``) and start the granted port's burst.

        While no burst is busy, the first requesting port in round-robin order has its address taken:
        the burst's registers load its address (as a word), length, id and whether ``bad_burst(addr,
        len, size, burst)`` refuses it.  Returns ``(take, grant)``: high in the cycle an address is
        taken, and the port granted.
        """
        any_, grant = _round_robin(m, ch, requests, self.last_port)
        names = [f"{ch}{f}" for f in ("addr", "len", "size", "burst", "id")]
        sel = Signal(sum(len(getattr(ports[0], f)) for f in names), name=f"{ch}_sel")
        with m.Switch(grant):
            for i, p in enumerate(ports):
                with (m.Case(i) if i < len(ports) - 1 else m.Default()):
                    m.d.comb += sel.eq(Cat(*(getattr(p, f) for f in names)))
        a = len(getattr(ports[0], f"{ch}addr"))
        addr, length, size, burst, id_ = sel[:a], sel[a:][:8], sel[a + 8:][:3], sel[a + 11:][:2], sel[a + 13:]
        take = Signal(name=f"{ch}_take")
        m.d.comb += take.eq(~self.busy & any_)
        with m.If(take):
            m.d.sync += [
                self.busy.eq(1), self.port.eq(grant), self.last_port.eq(grant), self.id.eq(id_),
                self.addr.eq(addr >> beat_size), self.left.eq(length),
                self.err.eq(bad_burst(addr, length, size, burst)),
            ]
        return take, grant


class _AxiSlaves(wiring.Component):
    """A component with ``ports`` AXI4 slave ports ``s0``, ``s1``, ... of one signature ``sig``.

    The base of :class:`AxiMemory` and of its banks: both keep the port count and the signature's
    widths, and hand their ports out in order through :attr:`port_list`.
    """

    def __init__(self, ports: int, sig: AXI4Signature):
        self.ports = ports
        self.data_width, self.id_width, self.addr_width = sig.data_width, sig.id_width, sig.addr_width
        super().__init__({f"s{i}": In(sig) for i in range(ports)})

    @property
    def port_list(self) -> list:
        """The slave ports, ``s0`` first."""
        return [getattr(self, f"s{i}") for i in range(self.ports)]


class _AxiBank(_AxiSlaves):
    """One bank of :class:`AxiMemory`: ``size`` bytes of RAM behind ``ports`` AXI4 slave ports.

    It serves whole bursts, one read and one write at a time, as :class:`AxiMemory` describes for
    one bank; addresses are the bank's own, from 0.
    """

    def __init__(self, size: int, ports: int, data_width: int, id_width: int, addr_width: int,
                 read_only: tuple[int, ...] = ()):
        self.size, self.read_only = size, read_only
        super().__init__(ports, AXI4Signature(addr_width=addr_width, data_width=data_width, id_width=id_width))

    def elaborate(self, platform):
        m = Module()
        ports = self.port_list
        n = self.ports
        lanes = self.data_width // 8
        beat_size = exact_log2(lanes)
        depth = self.size // lanes
        word_bits = exact_log2(depth)
        port_bits = max(1, bits_for(n - 1))

        m.submodules.mem = mem = Memory(shape=unsigned(self.data_width), depth=depth, init=[])
        self.array = mem  # for simulation backdoors (dx1_bringup.sim.amaranth_transport)
        wr = mem.write_port(granularity=8)
        rd = mem.read_port()

        def bad_burst(addr, length, size, burst):
            """The request is not a legal burst of this memory (answered SLVERR)."""
            page_words = PAGE_BYTES // lanes
            return ((size != beat_size) | (burst != BURST_INCR)
                    | ((addr >> beat_size) + length >= depth)
                    | ((addr >> beat_size)[:exact_log2(page_words)] + length >= page_words))

        # ---- writes: address, data beats, then the port's response register ---------------------
        # Read-only ports never write: they take no part in the write arbitration (their write channels stay
        # idle), so the write side's multiplexers have only the writing ports' inputs.
        writers = [p for i, p in enumerate(ports) if i not in self.read_only]
        nw = len(writers)
        w = _Burst("w", nw, word_bits, self.id_width)  # the write burst taking data
        b_valid = [Signal(name=f"b_valid_{i}") for i in range(nw)]
        b_id = [Signal(self.id_width, name=f"b_id_{i}") for i in range(nw)]
        b_resp = [Signal(2, name=f"b_resp_{i}") for i in range(nw)]
        aw_take, aw_grant = w.take(m, "aw", writers, [p.awvalid & ~b_valid[i] for i, p in enumerate(writers)],
                                   beat_size, bad_burst)

        w_beat = Signal()
        w_data = Signal(self.data_width)
        w_strb = Signal(lanes)
        for i, p in enumerate(writers):
            m.d.comb += [
                p.awready.eq(aw_take & (aw_grant == i)),
                p.wready.eq(w.busy & (w.port == i)),
                p.bvalid.eq(b_valid[i]), p.bid.eq(b_id[i]), p.bresp.eq(b_resp[i]),
            ]
            with m.If(w.port == i):
                m.d.comb += [w_beat.eq(w.busy & p.wvalid), w_data.eq(p.wdata), w_strb.eq(p.wstrb)]
            with m.If(p.bvalid & p.bready):
                m.d.sync += b_valid[i].eq(0)
        m.d.comb += [wr.addr.eq(w.addr), wr.data.eq(w_data)]
        with m.If(w_beat):
            m.d.comb += wr.en.eq(Mux(w.err, 0, w_strb))
            m.d.sync += [w.addr.eq(w.addr + 1), w.left.eq(w.left - 1)]
            with m.If(w.left == 0):
                m.d.sync += w.busy.eq(0)
                for i in range(nw):
                    with m.If(w.port == i):
                        m.d.sync += [b_valid[i].eq(1), b_id[i].eq(w.id),
                                     b_resp[i].eq(Mux(w.err, RESP_SLVERR, RESP_OKAY))]

        # ---- reads: address, one beat a cycle into the memory, then the skid buffer -------------
        beat = data.StructLayout({
            "data": unsigned(self.data_width), "id": unsigned(self.id_width), "port": unsigned(port_bits),
            "err": 1, "last": 1,
        })
        r = _Burst("r", n, word_bits, self.id_width)  # the read burst issuing beats
        ar_take, ar_grant = r.take(m, "ar", ports, [p.arvalid for p in ports], beat_size, bad_burst)

        m.submodules.r_buffer = r_buffer = SyncFIFO(width=beat.size, depth=READ_BUFFER_DEPTH)
        pending = Signal(beat)                 # the beat the memory is reading this cycle
        pending_valid = Signal()
        r_issue = Signal()
        m.d.comb += r_issue.eq(r.busy & (r_buffer.level + pending_valid < READ_BUFFER_DEPTH))
        m.d.comb += [rd.addr.eq(r.addr), rd.en.eq(r_issue & ~r.err)]
        m.d.sync += pending_valid.eq(r_issue)
        with m.If(r_issue):
            m.d.sync += [
                pending.id.eq(r.id), pending.port.eq(r.port), pending.err.eq(r.err),
                pending.last.eq(r.left == 0),
                r.addr.eq(r.addr + 1), r.left.eq(r.left - 1),
            ]
            with m.If(r.left == 0):
                m.d.sync += r.busy.eq(0)
        into = Signal(beat)
        m.d.comb += [
            into.eq(pending), into.data.eq(Mux(pending.err, 0, rd.data)),
            r_buffer.w_data.eq(into), r_buffer.w_en.eq(pending_valid),
        ]

        head = data.View(beat, r_buffer.r_data)
        r_ready = Signal()
        for i, p in enumerate(ports):
            m.d.comb += [
                p.arready.eq(ar_take & (ar_grant == i)),
                p.rvalid.eq(r_buffer.r_rdy & (head.port == i)),
                p.rdata.eq(head.data), p.rid.eq(head.id), p.rlast.eq(head.last),
                p.rresp.eq(Mux(head.err, RESP_SLVERR, RESP_OKAY)),
            ]
            with m.If(head.port == i):
                m.d.comb += r_ready.eq(p.rready)
        m.d.comb += r_buffer.r_en.eq(r_ready)
        return m


class AxiMemory(_AxiSlaves):
    """``size`` bytes of device memory in ``banks`` banks, shared by ``ports`` AXI4 slave ports ``s0``, ``s1``, ...

    Banks interleave in 4 KiB pages: byte ``a`` is in bank ``(a // 4096) % banks``.  No AXI burst
    crosses a page, so every burst is served by one bank, and each bank serves its bursts as
    described below for the whole memory, independently of the other banks: with ``banks`` banks,
    up to ``banks`` read bursts and ``banks`` write bursts are in service at once, on different
    ports, each at one beat a cycle.  (Word interleaving would spread every burst over all banks,
    so that concurrent bursts collide beat by beat and need reordering; pages keep a bank's
    service, its ordering and its deadlock argument those of one memory.)  A port's bursts in one
    direction go to one bank at a time: a burst to another bank than the port's bursts in flight
    waits (``arready``/``awready`` low) until their last response is taken, so responses keep
    AXI's order per id, and a port's write data always belongs to the one bank that took its
    address.  Each port has at most :data:`MAX_OUTSTANDING` bursts in flight in each direction.

    In each bank, reads and writes are served independently: one read burst and one write burst
    are in service at any time, each on any port.  Each direction picks the next port
    round-robin among those with a valid address (the port it served last comes last), serves
    that whole burst, then picks again, so no master is starved.  A write port is only picked while its previous write
    response has been taken.

    Bursts are INCR of 1..256 beats of the full data width (``awsize``/``arsize`` =
    log2(data_width/8)) within one 4 KiB page; the address may be unaligned, in which case beats
    start at the word it falls in (the master's first ``wstrb`` selects the bytes).  Writes honour
    ``wstrb``.  Every response carries its request's id.  A burst that starts or runs outside
    ``[0, size)``, crosses a 4 KiB page, or has another size or burst type, is answered SLVERR: a
    write changes nothing (its data beats are still taken) and gets one SLVERR response; a read
    gets SLVERR and data 0 on every beat, with ``rlast`` on the last.  Beats are counted from
    ``awlen``; ``wlast`` is not checked.

    A burst of N beats keeps its direction busy for N + 1 cycles when the master keeps up: one
    cycle to take the address, then one beat a cycle.  Read data passes through a
    :data:`READ_BUFFER_DEPTH`-entry skid buffer, so back-pressure on ``rready`` never loses a beat
    and full speed returns as soon as the master is ready again.  ``rvalid`` and ``bvalid`` come
    from registers: no master's ready reaches any master's valid.  ``awready``/``arready`` depend
    on the ``awvalid``/``arvalid`` and addresses of all ports (the bank and its arbiter);
    ``wready`` depends on no input.

    A read and a write of the same word in the same cycle read the old contents.  There is no
    ordering between a port's reads and writes beyond AXI's: wait for the write response.

    A bank's write direction is held from a burst's address to its last data beat, and its read
    direction by a burst whose beats wait in the skid buffer for a master that is not ready.  So a
    master must not send a write address whose data waits for this memory's read data: two such
    masters can each hold one direction while waiting for the other, forever.  The DMA's COPY
    sends a write burst's address only once all its data is in its FIFO (:class:`~.dma.Dma`).

    Parameters
    ----------
    size:
        Bytes of memory, a power of two, at least 4096.
    ports:
        Number of AXI4 slave ports, 1 to :data:`MAX_PORTS`.
    banks:
        Number of banks, a power of two from 1 to :data:`MAX_BANKS`, with ``size // banks`` at least
        4096 bytes.
    data_width, id_width, addr_width:
        As :class:`~.axi.AXI4Signature`; the address space must hold ``size`` bytes.
    read_only:
        Ports whose masters only read (a link port's sender): their write channels are never served
        (``awready``, ``wready`` and ``bvalid`` stay low), and the banks' write arbiters and multiplexers
        leave them out.  At least one port must write.
    """

    def __init__(self, size: int, ports: int, banks: int = 1, data_width: int = 8 * BUS_BYTES, id_width: int = 4,
                 addr_width: int = 32, read_only: tuple[int, ...] = ()):
        if not isinstance(size, int) or isinstance(size, bool) or size < MIN_SIZE or size & (size - 1):
            raise ValueError(f"Memory size must be a power of two of at least {MIN_SIZE} bytes, not {size!r}")
        if not isinstance(ports, int) or isinstance(ports, bool) or not 1 <= ports <= MAX_PORTS:
            raise ValueError(f"Memory port count must be an integer in 1..{MAX_PORTS}, not {ports!r}")
        if (not isinstance(banks, int) or isinstance(banks, bool) or not 1 <= banks <= MAX_BANKS
                or banks & (banks - 1)):
            raise ValueError(f"Memory bank count must be a power of two in 1..{MAX_BANKS}, not {banks!r}")
        if size // banks < PAGE_BYTES:
            raise ValueError(f"Memory of {size} bytes cannot hold {banks} banks of at least {PAGE_BYTES} bytes each")
        sig = AXI4Signature(addr_width=addr_width, data_width=data_width, id_width=id_width)
        if size > 1 << addr_width:
            raise ValueError(f"Memory size must fit in the {addr_width}-bit address space, not {size!r}")
        read_only = tuple(read_only)
        if (any(not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < ports for i in read_only)
                or len(set(read_only)) != len(read_only) or len(read_only) == ports):
            raise ValueError(f"Memory read-only ports must be distinct port numbers in 0..{ports - 1}, leaving "
                             f"a port that writes, not {read_only!r}")
        self.size, self.banks, self.read_only = size, banks, read_only
        super().__init__(ports, sig)

    def elaborate(self, platform):
        m = Module()
        banks = []
        self.bank_modules = []  # for simulation backdoors (dx1_bringup.sim.amaranth_transport)
        for b in range(self.banks):
            bank = _AxiBank(self.size // self.banks, self.ports, self.data_width, self.id_width, self.addr_width,
                            self.read_only)
            m.submodules[f"bank{b}"] = bank
            self.bank_modules.append(bank)
            banks.append(bank.port_list)
        if self.banks == 1:
            for p, q in zip(self.port_list, banks[0], strict=True):
                wiring.connect(m, wiring.flipped(p), q)
            return m

        page_bits = exact_log2(PAGE_BYTES)
        bank_bits = exact_log2(self.banks)

        def bank_of(addr):
            return addr[page_bits:page_bits + bank_bits]

        def local(addr):
            """The address within its bank: the bank bits taken out."""
            return Cat(addr[:page_bits], addr[page_bits + bank_bits:])

        for i, p in enumerate(self.port_list):
            qs = [bank_ports[i] for bank_ports in banks]
            writes = i not in self.read_only
            r_out = Signal(range(MAX_OUTSTANDING + 1), name=f"r_out_{i}")
            r_bank = Signal(bank_bits, name=f"r_bank_{i}")
            ar_bank = bank_of(p.araddr)
            ar_open = ((r_out == 0) | (r_bank == ar_bank)) & (r_out != MAX_OUTSTANDING)
            for b, q in enumerate(qs):
                m.d.comb += [
                    q.araddr.eq(local(p.araddr)), q.arlen.eq(p.arlen), q.arsize.eq(p.arsize),
                    q.arburst.eq(p.arburst), q.arid.eq(p.arid),
                    q.arvalid.eq(p.arvalid & ar_open & (ar_bank == b)),
                    q.rready.eq(p.rready & (r_bank == b)),
                ]
            m.d.comb += p.arready.eq(Cat(q.arready for q in qs).any())
            with m.Switch(r_bank):
                for b, q in enumerate(qs):
                    with m.Case(b):
                        m.d.comb += [p.rvalid.eq(q.rvalid), p.rdata.eq(q.rdata), p.rid.eq(q.rid),
                                     p.rresp.eq(q.rresp), p.rlast.eq(q.rlast)]
            _in_flight(m, p.arvalid & p.arready, p.rvalid & p.rready & p.rlast, ar_bank, r_out, r_bank)
            if not writes:
                continue
            w_out = Signal(range(MAX_OUTSTANDING + 1), name=f"w_out_{i}")
            w_bank = Signal(bank_bits, name=f"w_bank_{i}")
            aw_bank = bank_of(p.awaddr)
            aw_open = ((w_out == 0) | (w_bank == aw_bank)) & (w_out != MAX_OUTSTANDING)
            for b, q in enumerate(qs):
                m.d.comb += [
                    q.awaddr.eq(local(p.awaddr)), q.awlen.eq(p.awlen), q.awsize.eq(p.awsize),
                    q.awburst.eq(p.awburst), q.awid.eq(p.awid),
                    q.awvalid.eq(p.awvalid & aw_open & (aw_bank == b)),
                    q.wdata.eq(p.wdata), q.wstrb.eq(p.wstrb), q.wlast.eq(p.wlast),
                    q.wvalid.eq(p.wvalid & (w_bank == b)),
                    q.bready.eq(p.bready & (w_bank == b)),
                ]
            m.d.comb += p.awready.eq(Cat(q.awready for q in qs).any())
            with m.Switch(w_bank):
                for b, q in enumerate(qs):
                    with m.Case(b):
                        m.d.comb += [p.wready.eq(q.wready), p.bvalid.eq(q.bvalid), p.bid.eq(q.bid),
                                     p.bresp.eq(q.bresp)]
            _in_flight(m, p.awvalid & p.awready, p.bvalid & p.bready, aw_bank, w_out, w_bank)
        return m
