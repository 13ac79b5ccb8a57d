"""The fault vocabulary: one parser of fault strings, seeded faults that replay, memory and line faults."""

from __future__ import annotations

import numpy as np
import pytest

from dx1_bringup.faults import (
    FAULT_KINDS,
    BusErrors,
    FaultRng,
    LineFaults,
    MemoryFaults,
    flip_bit,
    force_bit,
    parse_faults,
)


def test_one_string_names_faults_of_several_kinds() -> None:
    faults = parse_faults("stuck-bit=5,stuck-at=0,line-rate=1e-4,line-seed=3,line-scope=bursts", FAULT_KINDS)
    assert faults[MemoryFaults] == MemoryFaults(stuck_bit=5, stuck_value=0)
    line = faults[LineFaults]
    assert (line.bit_error_rate, line.drop_rate, line.dup_rate, line.seed, line.scope) == (1e-4, 1e-4, 1e-4, 3,
                                                                                           "bursts")
    assert parse_faults("alias-bit=12", FAULT_KINDS) == {MemoryFaults: MemoryFaults(alias_bit=12)}


@pytest.mark.parametrize("text, kinds, message", [
    ("bits=3", (MemoryFaults,), "memory fault 'bits=3' is not KEY=N with KEY one of stuck-bit, stuck-at, alias-bit"),
    ("line-rate=1e-4", (MemoryFaults,), "memory fault 'line-rate=1e-4' is not KEY=N with KEY one of stuck-bit, "
                                        "stuck-at, alias-bit"),
    ("stuck-bit=x", FAULT_KINDS, "memory or line or stall or bus fault 'stuck-bit=x' is not KEY=VALUE with KEY one of "
                                 "stuck-bit, stuck-at, alias-bit, line-rate, line-seed, line-scope, stall, bus-error"),
    ("line-rate=0.5", FAULT_KINDS, "memory or line or stall or bus fault 'line-rate=0.5' is not KEY=VALUE with KEY "
                                   "one of stuck-bit, stuck-at, alias-bit, line-rate, line-seed, line-scope, stall, "
                                   "bus-error"),
    ("line-seed=1,line-seed=2", FAULT_KINDS, "memory or line or stall or bus fault 'line-seed' is given twice"),
    ("stall=dma0+gpu1", FAULT_KINDS, "memory or line or stall or bus fault 'stall=dma0+gpu1' is not KEY=VALUE with "
                                     "KEY one of stuck-bit, stuck-at, alias-bit, line-rate, line-seed, line-scope, "
                                     "stall, bus-error"),
    ("stuck-bit=64", FAULT_KINDS, "stuck_bit must be a data bit 0 to 63, not 64"),
])
def test_bad_fault_strings_say_what_was_expected(text, kinds, message) -> None:
    with pytest.raises(ValueError) as info:
        parse_faults(text, kinds)
    assert str(info.value) == message


def test_memory_faults_print_as_they_parse() -> None:
    for text in ("stuck-bit=5", "stuck-bit=9,stuck-at=0", "alias-bit=12", "stuck-bit=1,stuck-at=1,alias-bit=3"):
        faults = MemoryFaults.parse(text)
        assert MemoryFaults.parse(str(faults)) == faults
    assert str(MemoryFaults.parse("alias-bit=12,stuck-bit=5")) == "stuck-bit=5,stuck-at=1,alias-bit=12"


def test_memory_faults_act_on_reads_and_writes() -> None:
    mem = bytearray(64)
    MemoryFaults(alias_bit=4).write(mem, 0x10, b"\x07")
    assert mem[0x00] == 7 and mem[0x10] == 0, "address line 4 stuck at 0: 0x10 lands on 0x00"
    stuck = MemoryFaults(stuck_bit=9)  # byte lane 1, bit 1
    assert stuck.read(mem, 8, 8) == bytes([0, 2, 0, 0, 0, 0, 0, 0])
    with pytest.raises(ValueError, match="^alias_bit 20 is not an address line of a device memory of 4096 bytes$"):
        MemoryFaults(alias_bit=20).check_size(4096)


def test_line_faults_replay_from_their_seed() -> None:
    data = bytes(range(256)) * 40
    runs = [LineFaults.uniform(0.01, seed=7).apply(data) for _ in range(2)]
    assert runs[0] == runs[1] != data
    other = LineFaults.uniform(0.01, seed=8)
    assert other.apply(data) != runs[0]
    assert other.flipped and other.dropped and other.duplicated
    assert LineFaults().apply(data) == data and not LineFaults().active


def test_bit_operations() -> None:
    assert flip_bit(0b1010, 0) == 0b1011 and flip_bit(0b1010, 3) == 0b0010
    data = np.array([0, 0xFF, 0, 0xFF], np.uint8)
    force_bit(data, 2, 1, np.array([True, False, True, False]))
    force_bit(data, 0, 0, np.array([False, True, False, False]))
    assert data.tolist() == [4, 0xFE, 4, 0xFF]
    a, b = FaultRng(1), FaultRng(1)
    draws = [a.bit(8) for _ in range(200)]
    assert set(draws) == set(range(8)) and draws == [b.bit(8) for _ in range(200)]


def test_bus_error_rows_agree_with_testing_every_row() -> None:
    """``BusErrors.hits_rows``' one interval test gives what testing each row with ``hits`` gives."""
    rng = np.random.default_rng(7)
    seen = set()
    for _ in range(3000):
        window = BusErrors((int(rng.integers(0, 512)), int(rng.integers(1, 64))))
        addr, stride, rows, length = (int(rng.integers(0, 512)), int(rng.integers(0, 96)), int(rng.integers(0, 9)),
                                      int(rng.integers(0, 80)))
        every_row = any(window.hits(addr + r * stride, length) for r in range(rows))
        assert window.hits_rows(addr, stride, rows, length) == every_row, (window, addr, stride, rows, length)
        seen.add(every_row)
    assert seen == {False, True}
    # Rows that step over the window touch nothing, although the span from the first to the last row covers it.
    assert not BusErrors((0x100, 0x10)).hits_rows(0xC0, 0x80, 2, 0x40)
    assert BusErrors((0x100, 0x10)).hits_rows(0xC0, 0x80, 2, 0x41)
