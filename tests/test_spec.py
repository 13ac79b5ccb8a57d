"""The hardware/software contract in dx1_bringup.spec is self-consistent and rejects bad input loudly."""

from __future__ import annotations

import random
import re
import struct

import pytest

from dx1_bringup.spec import (
    BLOCK_ALIGN,
    BURST_HEADER,
    BURST_MAX_PAYLOAD,
    BUS_BYTES,
    CHECK_ORDER,
    COMMAND_BITS,
    COMMAND_BYTES,
    COMMANDS,
    COMPLETION,
    COMPLETION_BYTES,
    ERROR_DOCS,
    FRAME_DOCS,
    FRAME_STATUS_DOCS,
    HEADER,
    LINK_BYTE_ORDER,
    MEM_BASE,
    REG_BASE,
    REG_BYTES,
    REG_HEADER,
    REG_MAX_WORDS,
    SIM_BYTE_ORDER,
    SIM_MAX_BLOCK,
    SIM_OP_DOCS,
    SIM_REQUEST,
    SIM_STATUS_DOCS,
    UARTBONE_HEADER,
    UARTBONE_MAX_WORDS,
    BlockType,
    Command,
    ErrorCode,
    Field,
    FrameCommand,
    FrameStatus,
    Opcode,
    SimOp,
    SimStatus,
    SocConfig,
    TileConfig,
    pack_command,
    pack_completion,
    register_map,
    struct_format,
    unpack_command,
    unpack_completion,
)

ALL_COMMANDS = [pytest.param(cmd, id=op.name) for op, cmd in COMMANDS.items()]
FLAGS = HEADER[1]


def _bits(field: Field) -> set[int]:
    return set(range(field.lsb, field.lsb + field.width))


# --- command encoding -------------------------------------------------------------------------------------------


def test_every_opcode_has_a_command() -> None:
    """COMMANDS describes every opcode, each under its own key, and the header is opcode/flags/tag in that order."""
    assert set(COMMANDS) == set(Opcode)
    assert all(cmd.opcode == op for op, cmd in COMMANDS.items())
    assert [(f.name, f.lsb, f.width) for f in HEADER] == [("opcode", 0, 8), ("flags", 8, 8), ("tag", 16, 16)]
    assert COMMAND_BITS == 8 * COMMAND_BYTES == 256


@pytest.mark.parametrize("cmd", ALL_COMMANDS)
def test_command_fields_disjoint_and_fit(cmd: Command) -> None:
    """No two fields of a command (header included) share a bit, names are unique, all fit in 256 bits."""
    seen: dict[int, str] = {}
    for f in cmd.all_fields:
        assert f.width >= 1, f.name
        assert 0 <= f.lsb and f.lsb + f.width <= COMMAND_BITS, f.name
        for bit in _bits(f):
            assert bit not in seen, f"{cmd.opcode.name}: {f.name} overlaps {seen.get(bit)} at bit {bit}"
            seen[bit] = f.name
    names = [f.name for f in cmd.all_fields]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("cmd", ALL_COMMANDS)
def test_no_field_straddles_a_64_bit_word(cmd: Command) -> None:
    """Every field lies inside one 64-bit word of the command (the C header reads fields from uint64_t words)."""
    for f in cmd.all_fields:
        last = f.lsb + f.width - 1
        assert f.lsb // 64 == last // 64, f"{cmd.opcode.name}.{f.name} bits {f.lsb}..{last}"


@pytest.mark.parametrize("cmd", ALL_COMMANDS)
def test_flags_are_distinct_bits_of_the_flags_field(cmd: Command) -> None:
    """Flag names and bits are unique and every flag bit lies inside the 8-bit flags field."""
    bits = [bit for _name, bit, _doc in cmd.flags]
    names = [name for name, _bit, _doc in cmd.flags]
    assert len(bits) == len(set(bits)) and len(names) == len(set(names))
    assert all(0 <= bit < FLAGS.width for bit in bits)
    assert cmd.flag_mask == sum(1 << bit for bit in bits)


@pytest.mark.parametrize("cmd", ALL_COMMANDS)
def test_reserved_mask_is_complement_of_defined_bits(cmd: Command) -> None:
    """reserved_mask has exactly the bits outside every field, plus the flag bits no flag defines."""
    defined: set[int] = set()
    for f in cmd.all_fields:
        if f.name != "flags":
            defined |= _bits(f)
    defined |= {FLAGS.lsb + bit for _name, bit, _doc in cmd.flags}
    expected = sum(1 << b for b in range(COMMAND_BITS) if b not in defined)
    assert cmd.reserved_mask == expected
    assert cmd.reserved_mask >> COMMAND_BITS == 0


@pytest.mark.parametrize("cmd", ALL_COMMANDS)
def test_pack_unpack_round_trip(cmd: Command) -> None:
    """Random values of every field and random flag sets survive pack_command -> unpack_command unchanged."""
    rng = random.Random(int(cmd.opcode))
    for _ in range(200):
        values = {f.name: rng.getrandbits(f.width) for f in cmd.fields}
        flags = {name: bool(rng.getrandbits(1)) for name, _bit, _doc in cmd.flags}
        tag = rng.getrandbits(16)
        data = pack_command(cmd.opcode, tag=tag, flags=flags, **values)
        assert isinstance(data, bytes) and len(data) == COMMAND_BYTES
        word = int.from_bytes(data, "little")
        assert word & cmd.reserved_mask == 0
        opcode, decoded = unpack_command(data)
        assert opcode == cmd.opcode
        flag_bits = sum(1 << cmd.flag_bit(name) for name, on in flags.items() if on)
        assert decoded == {"opcode": int(cmd.opcode), "flags": flag_bits, "tag": tag, **values}
        assert unpack_command(word) == (opcode, decoded)


def test_pack_places_fields_at_their_bits() -> None:
    """A known GEMM encodes to the integer built by hand from the documented bit positions."""
    data = pack_command(Opcode.GEMM, tag=0xBEEF, flags={"accumulate": True},
                        a_addr=0x1234, b_addr=0x5678, c_addr=0x9ABC, m=7, k_chunks=3)
    expected = (0x03 | 1 << 8 | 0xBEEF << 16 | 0x1234 << 64 | 0x5678 << 80 | 0x9ABC << 96 | 7 << 112 | 3 << 128)
    assert data == expected.to_bytes(32, "little")


def test_unpack_unknown_opcode_gives_header_only() -> None:
    """An undefined opcode decodes to the header fields only, whatever else is set."""
    word = 0xEE | 0x5A << 8 | 0x1234 << 16 | 1 << 200
    assert unpack_command(word) == (0xEE, {"opcode": 0xEE, "flags": 0x5A, "tag": 0x1234})


def test_pack_raw_is_ored_in_unchecked() -> None:
    """raw sets bits no field defines, so tests can build bad commands on purpose."""
    data = pack_command(Opcode.NOP, tag=5, raw=1 << 255 | 1 << 70)
    assert int.from_bytes(data, "little") == 5 << 16 | 1 << 255 | 1 << 70


@pytest.mark.parametrize("value", [65536, -1])
def test_pack_rejects_value_out_of_range(value: int) -> None:
    """A field value that does not fit its width unsigned is a ValueError naming the field, width and value."""
    msg = f"GEMM field 'm' must fit in 16 bits unsigned, not {value}"
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        pack_command(Opcode.GEMM, m=value)


def test_pack_rejects_too_wide_tag_and_shift() -> None:
    """Header fields and narrow fields are range checked too."""
    with pytest.raises(ValueError, match=r"^POSTOP field 'tag' must fit in 16 bits unsigned, not 65536$"):
        pack_command(Opcode.POSTOP, tag=1 << 16)
    with pytest.raises(ValueError, match=r"^POSTOP field 'shift' must fit in 6 bits unsigned, not 64$"):
        pack_command(Opcode.POSTOP, shift=64)


def test_pack_rejects_unknown_field() -> None:
    """A field the opcode does not define is a ValueError listing the fields it does define."""
    msg = "SIGNAL has no field 'rows'; fields are ['count', 'flags', 'opcode', 'sem', 'tag']"
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        pack_command(Opcode.SIGNAL, rows=1)


def test_unknown_flag_is_key_error() -> None:
    """Naming a flag the opcode lacks raises KeyError, from pack_command and from Command.flag_bit."""
    with pytest.raises(KeyError, match=r"GEMM has no flag 'relu'"):
        pack_command(Opcode.GEMM, flags={"relu": True})
    with pytest.raises(KeyError, match=r"NOP has no flag 'accumulate'"):
        COMMANDS[Opcode.NOP].flag_bit("accumulate")
    with pytest.raises(KeyError, match=r"GEMM has no field 'rows'"):
        COMMANDS[Opcode.GEMM].field("rows")


def test_completion_layout_and_round_trip() -> None:
    """Completion fields are disjoint, fill 64 bits, and round-trip through pack/unpack_completion."""
    seen: set[int] = set()
    for f in COMPLETION:
        assert not _bits(f) & seen
        seen |= _bits(f)
    assert seen == set(range(8 * COMPLETION_BYTES))
    rng = random.Random(1)
    for _ in range(100):
        values = {f.name: rng.getrandbits(f.width) for f in COMPLETION}
        data = pack_completion(**values)
        assert len(data) == COMPLETION_BYTES
        assert unpack_completion(data) == values


# --- error codes ------------------------------------------------------------------------------------------------


def test_error_codes_unique_and_documented() -> None:
    """Every ErrorCode has its own value (no aliases), OK is 0, and ERROR_DOCS documents exactly the codes."""
    values = [int(v) for v in ErrorCode.__members__.values()]
    assert len(values) == len(set(values))
    assert ErrorCode.OK == 0
    assert set(ERROR_DOCS) == set(ErrorCode)
    assert all(isinstance(doc, str) and doc for doc in ERROR_DOCS.values())


def test_check_order_is_a_list_of_distinct_errors() -> None:
    """CHECK_ORDER names distinct failure codes, starting with the opcode then the reserved bits."""
    assert len(CHECK_ORDER) == len(set(CHECK_ORDER))
    assert ErrorCode.OK not in CHECK_ORDER
    assert CHECK_ORDER[:3] == (ErrorCode.BAD_OPCODE, ErrorCode.RESERVED_BITS, ErrorCode.BAD_DIMENSION)


# --- register map -----------------------------------------------------------------------------------------------

SOC_CONFIGS = [
    pytest.param(SocConfig(tiles=t, semaphores=s), id=f"tiles{t}_sems{s}")
    for t in (1, 2, 3, 4) for s in (1, 16, 100)
]


@pytest.mark.parametrize("config", SOC_CONFIGS)
def test_register_map_walk(config: SocConfig) -> None:
    """Blocks sit on BLOCK_ALIGN boundaries; walking NEXT from 0 visits each block once, in order, and ends on 0."""
    rmap = register_map(config)
    by_base = {b.base: b for b in rmap.blocks}
    assert len(by_base) == len(rmap.blocks)
    assert all(b.base % BLOCK_ALIGN == 0 for b in rmap.blocks)
    visited = []
    offset = 0
    while True:
        block = by_base[offset]
        assert block not in visited
        visited.append(block)
        assert block.reg("ID").offset == 0 and block.reg("VERSION").offset == 4 and block.reg("NEXT").offset == 8
        if block.next == 0:
            break
        assert block.next > block.base
        offset = block.next
    assert visited == list(rmap.blocks)
    assert rmap.blocks[0].base == 0


@pytest.mark.parametrize("config", SOC_CONFIGS)
def test_register_map_no_overlap(config: SocConfig) -> None:
    """Registers are 4-byte aligned, distinct, inside their block and never reach into the next block."""
    rmap = register_map(config)
    addresses: set[int] = set()
    for i, block in enumerate(rmap.blocks):
        end = rmap.blocks[i + 1].base if i + 1 < len(rmap.blocks) else rmap.size
        names = [r.name for r in block.registers]
        assert len(names) == len(set(names)), block.name
        for reg in block.registers:
            address = block.base + reg.offset
            assert address % 4 == 0
            assert block.base <= address and address + 4 <= end, f"{block.name}.{reg.name}"
            assert address not in addresses, f"{block.name}.{reg.name}"
            addresses.add(address)
            assert rmap.address(block.name, reg.name) == address


@pytest.mark.parametrize("config", SOC_CONFIGS)
def test_register_map_per_tile_blocks(config: SocConfig) -> None:
    """GLOBAL comes once, first, and LINK once, last; QUEUE, PERF and TRACE come once per tile, numbered 0..tiles-1."""
    rmap = register_map(config)
    assert rmap.blocks[0].spec.type == BlockType.GLOBAL and rmap.blocks[0].tile is None
    assert rmap.blocks[-1].spec.type == BlockType.LINK and rmap.blocks[-1].tile is None
    for kind in BlockType:
        blocks = [b for b in rmap.blocks if b.spec.type == kind]
        if kind in (BlockType.GLOBAL, BlockType.LINK):
            assert len(blocks) == 1
        else:
            assert [b.tile for b in blocks] == list(range(config.tiles))
            assert [b.name for b in blocks] == [f"{kind.name}{t}" for t in range(config.tiles)]
    sems = [r for r in rmap.block("GLOBAL").registers if r.register.name == "SEM"]
    assert len(sems) == config.semaphores
    assert [r.offset for r in sems] == [sems[0].offset + 4 * i for i in range(config.semaphores)]


def test_single_semaphore_is_still_an_array() -> None:
    """The semaphore registers form an array SEM0..SEM{n-1} for every legal semaphore count, 1 included."""
    rmap = register_map(SocConfig(semaphores=1))
    sems = [r for r in rmap.block("GLOBAL").registers if r.register.name == "SEM"]
    assert [(r.name, r.index) for r in sems] == [("SEM0", 0)]


@pytest.mark.parametrize("config", SOC_CONFIGS)
def test_register_fields_fit(config: SocConfig) -> None:
    """Register fields lie inside 32 bits, do not overlap, and reset values fit their fields."""
    for block in register_map(config).blocks:
        for placed in block.registers:
            used = 0
            for f in placed.register.fields:
                assert 0 <= f.lsb and f.lsb + f.width <= 32, f"{block.name}.{placed.name}.{f.name}"
                assert not used & f.mask
                used |= f.mask
                assert 0 <= f.reset < 1 << f.width


def test_register_map_lookup_errors() -> None:
    """Unknown block and register names raise KeyError with their name."""
    rmap = register_map()
    with pytest.raises(KeyError, match=r"no register block 'QUEUE9'"):
        rmap.block("QUEUE9")
    with pytest.raises(KeyError, match=r"block GLOBAL has no register 'HEAD'"):
        rmap.address("GLOBAL", "HEAD")


# --- generator parameters ---------------------------------------------------------------------------------------


def test_config_defaults_accepted() -> None:
    """The documented defaults and the small test tile construct, and the derived sizes follow from array."""
    tile = TileConfig(array=4, spm_rows=1024, acc_rows=256)
    assert (tile.spm_row_bytes, tile.acc_row_bytes, tile.name) == (4, 16, "a4_s1024_c256")
    assert TileConfig() == TileConfig(8, 4096, 1024)
    assert SocConfig().tile == TileConfig()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"array": 3}, "Tile array size must be a power of two from 2 to 16, not 3"),
    ({"array": 1}, "Tile array size must be a power of two from 2 to 16, not 1"),
    ({"array": 32}, "Tile array size must be a power of two from 2 to 16, not 32"),
    ({"array": 8, "spm_rows": 16}, "Tile scratchpad rows must be a power of two from 32 to 65536, not 16"),
    ({"spm_rows": 3000}, "Tile scratchpad rows must be a power of two from 32 to 65536, not 3000"),
    ({"spm_rows": 1 << 17}, "Tile scratchpad rows must be a power of two from 32 to 65536, not 131072"),
    ({"array": 16, "acc_rows": 16}, "Tile accumulator rows must be a power of two from 32 to 65536, not 16"),
])
def test_tile_config_value_errors(kwargs: dict, message: str) -> None:
    """TileConfig refuses out-of-range or non-power-of-two sizes with the exact message."""
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        TileConfig(**kwargs)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"array": True}, "Tile array size must be an integer, not True"),
    ({"array": "8"}, "Tile array size must be an integer, not '8'"),
    ({"array": 8.0}, "Tile array size must be an integer, not 8.0"),
    ({"spm_rows": False}, "Tile scratchpad rows must be an integer, not False"),
    ({"acc_rows": "1024"}, "Tile accumulator rows must be an integer, not '1024'"),
])
def test_tile_config_type_errors(kwargs: dict, message: str) -> None:
    """TileConfig refuses bools, strings and floats with a TypeError and the exact message."""
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        TileConfig(**kwargs)


@pytest.mark.parametrize(("kwargs", "exc", "message"), [
    ({"tiles": 0}, ValueError, "SoC tile count must be an integer from 1 to 8, not 0"),
    ({"tiles": 9}, ValueError, "SoC tile count must be an integer from 1 to 8, not 9"),
    ({"tiles": True}, TypeError, "SoC tile count must be an integer, not True"),
    ({"tiles": "2"}, TypeError, "SoC tile count must be an integer, not '2'"),
    ({"mem_bytes": 5000}, ValueError, "SoC device memory bytes must be a power of two from 4096 to 2147483648, "
                                      "not 5000"),
    ({"mem_bytes": 2048}, ValueError, "SoC device memory bytes must be a power of two from 4096 to 2147483648, "
                                      "not 2048"),
    ({"mem_banks": 3}, ValueError, "SoC device memory bank count must be a power of two from 1 to 16, not 3"),
    ({"mem_banks": 32}, ValueError, "SoC device memory bank count must be a power of two from 1 to 16, not 32"),
    ({"mem_bytes": 8192, "mem_banks": 4}, ValueError,
     "SoC device memory of 8192 bytes cannot hold 4 banks of at least 4096 bytes each"),
    ({"semaphores": 0}, ValueError, "SoC semaphore count must be an integer from 1 to 256, not 0"),
    ({"semaphores": 257}, ValueError, "SoC semaphore count must be an integer from 1 to 256, not 257"),
    ({"trace_depth": 100}, ValueError, "SoC trace depth must be a power of two from 16 to 4096, not 100"),
    ({"tile": 8}, TypeError, "SoC tile must be a TileConfig, not 8"),
])
def test_soc_config_errors(kwargs: dict, exc: type[Exception], message: str) -> None:
    """SocConfig refuses bad parameters with the right exception type and the exact message."""
    with pytest.raises(exc, match=f"^{re.escape(message)}$"):
        SocConfig(**kwargs)


def test_soc_config_extremes_accepted() -> None:
    """The ends of every legal range construct, and their register maps are consistent."""
    for config in (SocConfig(tiles=8, mem_bytes=1 << 31, mem_banks=16, semaphores=256, trace_depth=4096),
                   SocConfig(tiles=1, mem_bytes=4096, mem_banks=1, semaphores=1, trace_depth=16,
                             tile=TileConfig(array=2, spm_rows=8, acc_rows=4))):
        rmap = register_map(config)
        assert len(rmap.blocks) == 2 + 3 * config.tiles
        assert rmap.blocks[-1].next == 0


# --- host links ---------------------------------------------------------------------------------------------


def test_frame_commands_keep_the_bridge_decodable() -> None:
    """The gateware tells writes from reads by bit 0 and incrementing UARTBone frames by bits [1:0]."""
    writes = {FrameCommand.UARTBONE_WRITE, FrameCommand.UARTBONE_WRITE_FIXED, FrameCommand.BURST_WRITE,
              FrameCommand.REG_WRITE}
    for cmd in FrameCommand:
        assert bool(cmd & 1) == (cmd in writes), cmd.name
    uartbone = [c for c in FrameCommand if c.name.startswith("UARTBONE_")]
    assert all(c < 0x80 for c in uartbone) and all(c >= 0x80 for c in FrameCommand if c not in uartbone)
    assert [c.name for c in uartbone if (c & 1) ^ (c >> 1 & 1)] == ["UARTBONE_WRITE", "UARTBONE_READ"]
    assert set(FRAME_DOCS) == set(FrameCommand) and set(FRAME_STATUS_DOCS) == set(FrameStatus)


def test_link_layouts_are_the_documented_sizes() -> None:
    assert struct.calcsize(struct_format(LINK_BYTE_ORDER, BURST_HEADER)) == 9
    assert struct.calcsize(struct_format(LINK_BYTE_ORDER, REG_HEADER)) == 6
    assert struct.calcsize(struct_format(LINK_BYTE_ORDER, UARTBONE_HEADER)) == 6
    assert struct_format(SIM_BYTE_ORDER, SIM_REQUEST).startswith("<")
    assert struct_format(LINK_BYTE_ORDER, BURST_HEADER).startswith(">")
    # A register frame's words wait in the bridge's burst buffer, and n is one byte.
    assert REG_MAX_WORDS * 4 <= BURST_MAX_PAYLOAD and REG_MAX_WORDS < 256 and UARTBONE_MAX_WORDS < 256
    # The windows are aligned: the gateware decodes them from address bits.
    assert REG_BYTES & (REG_BYTES - 1) == 0 and REG_BASE % REG_BYTES == 0 and MEM_BASE == 1 << 31
    assert set(SIM_OP_DOCS) == set(SimOp) and set(SIM_STATUS_DOCS) == set(SimStatus)
    assert SIM_MAX_BLOCK % BUS_BYTES == 0


def test_wire_field_format_refuses_an_unknown_byte_order() -> None:
    with pytest.raises(KeyError):
        struct_format("middle", BURST_HEADER)


def test_register_field_lookup_and_pack() -> None:
    error = register_map().block("QUEUE0").reg("ERROR").register
    assert error.pack(code=7, index=0x2A) == 0x2A_0007
    assert error.field("index").extract(0x2A_0007) == 0x2A
    with pytest.raises(KeyError, match="register ERROR has no field 'cause'"):
        error.field("cause")
    with pytest.raises(ValueError, match=r"^code = 256 does not fit ERROR.code \(8 bits\)$"):
        error.pack(code=256)


def test_spec_history_ends_at_the_spec_version_and_explains_the_block_versions() -> None:
    from dx1_bringup import spec

    versions = [v for v, _ in spec.SPEC_HISTORY]
    assert versions == sorted(set(versions)) and versions[-1] == spec.SPEC_VERSION
    assert all(text for _, text in spec.SPEC_HISTORY)
    block_versions = {b.version for b in spec.BLOCKS}
    # The sentence names the block version and the spec version as they are: a change of either fails here.
    assert len(block_versions) == 1
    (block_version,) = block_versions
    text = f"every block reads {block_version >> 16}.{block_version & 0xFFFF} under spec " \
           f"{spec.SPEC_VERSION >> 16}.{spec.SPEC_VERSION & 0xFFFF}"
    assert text in spec.VERSIONS_EXPLAINED


def test_a_decoded_command_is_the_callers_own_to_change():
    from dx1_bringup.spec import Opcode, pack_command, unpack_command

    cmd = pack_command(Opcode.COPY, tag=7, src_addr=0x100, dst_addr=0x200, length=64)
    opcode, fields = unpack_command(cmd)
    fields["length"] = 0
    assert unpack_command(cmd) == (Opcode.COPY, {**fields, "length": 64})
