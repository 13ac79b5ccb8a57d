"""The register file of dx1-mini: an AXI4-Lite slave decoded into every register of the spec's map.

Nothing here names an offset: the decoder, the constants and the hardware
interface are all built from :func:`~dx1_bringup.spec.register_map`.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..spec import (
    LINK_PORTS,
    MAGIC,
    REG_BYTES,
    SPEC_VERSION,
    Access,
    PlacedBlock,
    PlacedRegister,
    Register,
    SocConfig,
    register_map,
)
from .axi import RESP_OKAY, RESP_SLVERR, AXI4LiteSignature

__all__ = ["RegisterFile", "ADDR_WIDTH", "HEADER_NAMES", "identity_values", "defined_mask", "port_signature",
           "field_bits", "field_word"]

#: Address bits of the register space's AXI4-Lite port.
ADDR_WIDTH = exact_log2(REG_BYTES)
#: The header registers every block starts with; the register file answers them itself.
HEADER_NAMES = ("ID", "VERSION", "NEXT")
#: The features FEATURES always announces; ``vector`` follows the tile config (``TileConfig.vector``).
FEATURES_IMPLEMENTED = ("postop", "copy", "trace")


def defined_mask(register: Register) -> int:
    """Bits of ``register`` that mean something: its fields, or all 32 bits when it has none."""
    return sum(f.mask for f in register.fields) if register.fields else 0xFFFF_FFFF


def field_bits(value: Value, register: Register, name: str) -> Value:
    """The bits of field ``name`` of ``register`` in ``value`` (a register value, or a port's write data)."""
    f = register.field(name)
    return value[f.lsb:f.lsb + f.width]


def field_word(register: Register, **values: Value | int) -> Value:
    """A 32-bit value of ``register`` with the named fields set from ``values`` and every other bit 0.

    Raises
    ------
    ValueError
        A value wider than its field.
    """
    placed = sorted(((register.field(name), Value.cast(v)) for name, v in values.items()), key=lambda p: p[0].lsb)
    pieces, at = [], 0
    for f, v in placed:
        if len(v) > f.width:
            raise ValueError(f"a {len(v)}-bit value does not fit {register.name}.{f.name} ({f.width} bits)")
        pieces += [Const(0, f.lsb - at), v, Const(0, f.width - len(v))]
        at = f.lsb + f.width
    return Cat(*pieces, Const(0, 32 - at))


def identity_values(config: SocConfig) -> dict[str, int]:
    """The GLOBAL registers that are constants of ``config``, by register name.

    CHIP_ID is one only on a chip without a link (rank 0 of 1); with one, the board sets it.
    """
    glob = {r.name: r for r in register_map(config).block("GLOBAL").spec.registers}
    chip = {} if config.link is not None else {"CHIP_ID": glob["CHIP_ID"].pack(rank=0, chips=1)}
    return {
        **chip,
        "MAGIC": MAGIC,
        "HW_VERSION": SPEC_VERSION,
        "CAPS": glob["CAPS"].pack(tiles=config.tiles, array=config.tile.array, mem_banks=config.mem_banks,
                                     semaphores=config.semaphores,
                                     link_ports=0 if config.link is None else LINK_PORTS),
        "SPM_ROWS": config.tile.spm_rows,
        "ACC_ROWS": config.tile.acc_rows,
        "MEM_BYTES": config.mem_bytes,
        "FEATURES": glob["FEATURES"].pack(**dict.fromkeys(FEATURES_IMPLEMENTED, 1), vector=int(config.tile.vector),
                                          link=int(config.link is not None)),
    }


def _or_all(values):
    """The OR of ``values`` as a balanced tree."""
    values = list(values)
    while len(values) > 1:
        values = [values[i] | values[i + 1] if i + 1 < len(values) else values[i] for i in range(0, len(values), 2)]
    return values[0]


def port_signature(access: Access) -> wiring.Signature:
    """The hardware side of one register of type ``access`` (Out: driven by the register file)."""
    return wiring.Signature({
        Access.RW: {"value": Out(32), "write": Out(1), "wdata": Out(32), "set": In(1), "set_value": In(32)},
        Access.RO: {"value": In(32), "read": Out(1)},
        Access.WO: {"write": Out(1), "wdata": Out(32)},
        Access.W1C: {"value": Out(32), "set": In(32), "clear": In(1)},
    }[access])


class RegisterFile(wiring.Component):
    """Serves the register space of ``register_map(config)`` on the AXI4-Lite slave port ``bus``.

    Every placed register that is not a constant gets one member, named
    ``f"{block.name}_{register.name}"`` (``GLOBAL_SCRATCH``, ``QUEUE0_DOORBELL``,
    ``GLOBAL_SEM3``), whose shape depends on its access type (Out: driven by the
    register file):

    * RW: ``value`` (the stored bits), ``write`` (a one-cycle pulse when the host
      writes it) with ``wdata`` (the word written, all 32 bits, valid with
      ``write``), and ``set``/``set_value`` (hardware overwrites the stored
      value).  Only the register's field bits are stored (all 32 without
      fields); it resets to the spec's reset.  A host write and a hardware
      ``set`` in the same cycle: the host write wins.  ``value`` shows a write
      from the cycle after ``write``.
    * RO: ``value`` (hardware supplies it; bits outside the register's fields
      read 0) and ``read``, a one-cycle pulse in the cycle ``value`` is sampled
      for a host read (for read side effects: latching a high word, popping an
      event).  A change made on ``read`` is seen by the next read.
    * WO: ``write`` and ``wdata`` as for RW; nothing is stored.
    * W1C: ``value`` (the current bits) and ``set``: hardware sets bits, OR-ed
      in every cycle.  A host write clears the bits written as 1; a bit set and
      cleared in the same cycle stays set.  ``clear`` (a soft reset) clears
      every bit, ahead of both.

    The block headers (ID, VERSION, NEXT) and the GLOBAL identity registers
    (:func:`identity_values`) are constants and get no member.

    The bus answers SLVERR (and nothing happens) for an unmapped or misaligned
    address, a write whose strobes are not all set, a write to an RO register
    and a read of a WO register; an SLVERR read returns 0.  AW and W are taken
    in either order or together; one write and one read are handled at a time,
    independently (a read and a write in the same cycle: the read sees the
    value before the write).  Valid signals come from registers only.

    Parameters
    ----------
    config:
        The device whose register map is served.
    """

    def __init__(self, config: SocConfig):
        if not isinstance(config, SocConfig):
            raise TypeError(f"Register file config must be a SocConfig, not {config!r}")
        self.config = config
        self.regmap = register_map(config)
        if self.regmap.size > 1 << ADDR_WIDTH:
            raise ValueError(f"the register space ({self.regmap.size:#x} bytes) does not fit {ADDR_WIDTH} "
                             "address bits")
        identity = identity_values(config)
        #: (block, register, constant value or None, member name or None) for every placed register.
        self.registers: list[tuple[PlacedBlock, PlacedRegister, int | None, str | None]] = []
        members = {"bus": In(AXI4LiteSignature(addr_width=ADDR_WIDTH))}
        for block in self.regmap.blocks:
            header = {"ID": int(block.spec.type), "VERSION": block.spec.version, "NEXT": block.next}
            for placed in block.registers:
                if placed.name in header:
                    const = header[placed.name]
                elif block.spec.type.name == "GLOBAL" and placed.name in identity:
                    const = identity[placed.name]
                else:
                    const = None
                name = None if const is not None else f"{block.name}_{placed.name}"
                if const is not None and placed.register.access != Access.RO:
                    raise ValueError(f"{block.name}.{placed.name} is a constant but not read-only")
                if name is not None:
                    members[name] = Out(port_signature(placed.register.access))
                self.registers.append((block, placed, const, name))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        bus = self.bus

        # ---- write channel: AW and W latched independently, then one write cycle ------------------
        aw_full = Signal()
        aw_addr = Signal(ADDR_WIDTH)
        w_full = Signal()
        w_data = Signal(32)
        w_strb = Signal(4)
        m.d.comb += [bus.awready.eq(~aw_full), bus.wready.eq(~w_full)]
        with m.If(bus.awvalid & ~aw_full):
            m.d.sync += [aw_full.eq(1), aw_addr.eq(bus.awaddr)]
        with m.If(bus.wvalid & ~w_full):
            m.d.sync += [w_full.eq(1), w_data.eq(bus.wdata), w_strb.eq(bus.wstrb)]

        do_write = Signal()   # the cycle a latched write takes effect
        wr_hit = Signal()     # aw_addr is a writable register
        m.d.comb += do_write.eq(aw_full & w_full & ~bus.bvalid)
        wr_ok = Signal()
        m.d.comb += wr_ok.eq(wr_hit & (w_strb == 0b1111))
        with m.If(do_write):
            m.d.sync += [aw_full.eq(0), w_full.eq(0), bus.bvalid.eq(1),
                         bus.bresp.eq(Mux(wr_ok, RESP_OKAY, RESP_SLVERR))]
        with m.If(bus.bvalid & bus.bready):
            m.d.sync += bus.bvalid.eq(0)
        writing = Signal()    # a good write in this cycle; the decode below says to which register
        m.d.comb += writing.eq(do_write & wr_ok)

        # ---- read channel: AR latched, then one decode cycle into the registered response ----------
        ar_full = Signal()
        ar_addr = Signal(ADDR_WIDTH)
        m.d.comb += bus.arready.eq(~ar_full)
        with m.If(bus.arvalid & ~ar_full):
            m.d.sync += [ar_full.eq(1), ar_addr.eq(bus.araddr)]
        do_read = Signal()
        m.d.comb += do_read.eq(ar_full & ~bus.rvalid)
        rd_hit = Signal()
        rd_data = Signal(32)
        with m.If(do_read):
            m.d.sync += [ar_full.eq(0), bus.rvalid.eq(1), bus.rdata.eq(Mux(rd_hit, rd_data, 0)),
                         bus.rresp.eq(Mux(rd_hit, RESP_OKAY, RESP_SLVERR))]
        with m.If(bus.rvalid & bus.rready):
            m.d.sync += bus.rvalid.eq(0)

        # ---- decode: one comparator per placed register, from the spec; AND-OR read mux -----------
        wr_sel: dict[str, Signal] = {}
        rd_sel: dict[str, Signal] = {}
        wr_hits, rd_terms = [], []
        for block, placed, const, name in self.registers:
            addr = block.base + placed.offset
            access = placed.register.access
            if const is not None:
                value = Const(const, 32)
            elif access == Access.RO:
                value = getattr(self, name).value & defined_mask(placed.register)
            elif access in (Access.RW, Access.W1C):
                value = getattr(self, name).value
            else:
                value = None  # WO: a read is an error
            if value is not None:
                sel = Signal(name=f"{name or block.name + '_' + placed.name}_rsel")
                m.d.comb += sel.eq(ar_addr == addr)
                rd_terms.append((sel, value))
                if access == Access.RO and const is None:
                    rd_sel[name] = sel
            if const is None and access != Access.RO:
                wr_sel[name] = Signal(name=f"{name}_wsel")
                m.d.comb += wr_sel[name].eq(aw_addr == addr)
                wr_hits.append(wr_sel[name])
        m.d.comb += [
            wr_hit.eq(Cat(wr_hits).any()),
            rd_hit.eq(Cat(sel for sel, _ in rd_terms).any()),
            rd_data.eq(_or_all(Mux(sel, value, 0) for sel, value in rd_terms)),
        ]

        # ---- the registers and their hardware side ------------------------------------------------
        for _block, placed, _const, name in self.registers:
            if name is None:
                continue
            reg = placed.register
            port = getattr(self, name)
            mask = reg.writable_mask
            if reg.access == Access.RO:
                m.d.comb += port.read.eq(do_read & rd_sel[name])
                continue
            write = Signal(name=f"{name}_write")
            m.d.comb += write.eq(writing & wr_sel[name])
            if reg.access in (Access.RW, Access.WO):
                m.d.comb += [port.write.eq(write), port.wdata.eq(w_data)]
            if reg.access == Access.RW:
                stored = Signal(32, init=reg.reset & mask, name=f"{name}_reg")
                m.d.comb += port.value.eq(stored)
                with m.If(write):
                    m.d.sync += stored.eq(w_data & mask)
                with m.Elif(port.set):
                    m.d.sync += stored.eq(port.set_value & mask)
            elif reg.access == Access.W1C:
                stored = Signal(32, init=reg.reset & mask, name=f"{name}_reg")
                m.d.comb += port.value.eq(stored)
                cleared = Mux(write, w_data, 0)
                m.d.sync += stored.eq(Mux(port.clear, 0, ((stored & ~cleared) | port.set) & mask))
        return m
