"""What a failed bring-up step probably means: the hints per step and the diagnoses of wrong data.

Internal to the package: the steps (:mod:`.steps`) and the run (:mod:`.run`) word their failures with these.
"""

from __future__ import annotations

import numpy as np
from dx1_driver import BusErrorResponse, CommandError, DeviceTimeout, QueueError, TransportError

from ..spec import BUS_BYTES

#: What to suspect when a step ends on a driver exception rather than a wrong value.
_HINTS = {
    "link": "nothing sensible comes back: check power, the cable or socket, the port name, that both ends use "
            "the same baud rate, and that the FPGA is programmed with the dx1 bitstream",
    "identity": "the device answers but is not the expected dx1: check the bitstream and its version",
    "registers": "the register space does not match the spec: check that the bitstream was generated from the "
                 "same spec as this driver (make rtl)",
    "memory": "device memory or its bus fails: check the memory controller, its clock and its pins",
    "dma": "the DMA or the command processor fails: check the DMA's AXI master and the scratchpad ports",
    "gemm": "the tile's compute core fails: check the systolic array, accumulator buffer and post-op",
    "perf": "the PERF block counts wrongly: check its counter inputs",
    "irq": "the interrupt path fails: check IRQ_STATUS/IRQ_MASK logic and the interrupt pin",
}

_WORD = BUS_BYTES  # the device-memory bus width in bytes
_WORD_BITS = 8 * _WORD


def _hex(value: int, width: int = 8) -> str:
    return f"0x{value:0{width}x}"


def _bit_list(bits: list[int]) -> str:
    return ", ".join(str(b) for b in bits)


def _data_bits_diagnosis(patterns: list[int], got: list[int]) -> str:
    """Name data bits that read stuck at 0 or 1, or that follow other bits, from walking-bit patterns."""
    stuck = {0: [], 1: []}
    other = []
    for bit in range(_WORD_BITS):
        seen = {g >> bit & 1 for g in got}
        wrong = any((p ^ g) >> bit & 1 for p, g in zip(patterns, got, strict=True))
        if not wrong:
            continue
        if len(seen) == 1:
            stuck[seen.pop()].append(bit)
        else:
            other.append(bit)
    parts = [f"data bit{'s' if len(bits) > 1 else ''} {_bit_list(bits)} stuck at {value}"
             for value, bits in stuck.items() if bits]
    if other:
        parts.append(f"data bit{'s' if len(other) > 1 else ''} {_bit_list(other)} read wrong in some patterns "
                     "(shorted to a neighbour or coupled)")
    where = ", ".join(parts)
    return (f"{where}: check the memory data lines (bit b is byte b // 8, bit b % 8 of each 64-bit word): solder, "
            "the memory chip's DQ pins, the controller's data path")


def _address_diagnosis(expected_addr: int, got_addr: int, valid: set[int] | None, marked: bool) -> str:
    """Explain a word that holds another address's value: which address bits alias."""
    if not marked or (valid is not None and got_addr not in valid):
        return (f"the word at {_hex(expected_addr)} holds neither its own value nor another tested address's: "
                "the memory or its data path corrupts values (the data bus test passed, so suspect the memory "
                "cells or refresh)")
    bits = [b for b in range(32) if (expected_addr ^ got_addr) >> b & 1]
    if len(bits) == 1:
        return (f"address bit {bits[0]} aliases: {_hex(expected_addr)} and {_hex(got_addr)} reach the same memory "
                f"(address line {bits[0]} stuck or open): check that line between controller and memory")
    return (f"address bits {_bit_list(bits)} are shorted or decoded wrongly: {_hex(expected_addr)} and "
            f"{_hex(got_addr)} reach the same memory: check those address lines")


def _bytes_diagnosis(expected: np.ndarray, got: np.ndarray) -> str:
    """Explain byte mismatches over a region: a data bit that reads stuck, or scattered errors."""
    n = len(expected) - len(expected) % _WORD
    diff = (expected[:n] ^ got[:n]).reshape(-1, _WORD)
    got_w = got[:n].reshape(-1, _WORD)
    wrong = [(lane, bit) for lane in range(_WORD) for bit in range(8) if (diff[:, lane] >> bit & 1).any()]
    if len(wrong) == 1:
        lane, bit = wrong[0]
        values = set((got_w[:, lane] >> bit & 1).tolist())
        if len(values) == 1:
            return (f"data bit {8 * lane + bit} stuck at {values.pop()}: check that memory data line "
                    f"(byte lane {lane}, bit {bit})")
        return f"data bit {8 * lane + bit} flips in some words: check that memory data line for noise or a weak cell"
    count = int((diff != 0).sum())
    return (f"{count} bytes differ over {len(wrong)} data bits: the memory loses data (timing, refresh, or "
            "bad cells); the data bus and address line tests passed")


#: Where a bus error response comes from, per step (the link itself works: the request was answered).
_BUS_ERROR_SOURCES = {
    "memory": "device memory refuses that address: the bus-error window of a model:bus-error=START+LENGTH "
              "device string, or on a board the memory controller answering errors there (its address decode, "
              "an unpopulated range, ECC)",
    "registers": "a register the spec maps refuses the access: check that the bitstream was generated from the "
                 "same spec as this driver (make rtl)",
}


def _exception_diagnosis(step: str, e: Exception) -> str:
    if isinstance(e, BusErrorResponse):
        source = _BUS_ERROR_SOURCES.get(step, "the address in the message answers errors: the bus-error window of "
                                              "a model:bus-error=START+LENGTH device string, an address past device "
                                              "memory, or a read-only or unmapped register")
        return (f"the device answered a bus error (an error response, so the link works; that address does not): "
                f"{source}")
    if isinstance(e, TransportError):
        return f"the link failed during this step after earlier steps passed: {_HINTS['link']}"
    if isinstance(e, DeviceTimeout):
        return f"a queue made no progress (the command processor or a unit hangs): {_HINTS[step]}"
    if isinstance(e, CommandError):
        return f"a command that is valid completed with an error code: {_HINTS[step]}"
    if isinstance(e, QueueError):
        return f"a queue halted on a ring error (fetch or completion write failed): {_HINTS[step]}"
    return _HINTS[step]

