# amaranth: UnusedElaboratable=no
"""The vector unit's transpose buffer (``gateware/vector/transpose.py``) on Amaranth's simulator: blocks streamed in
and out under random load/read patterns and at full rate, against the golden model's TRANSPOSE."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth_run import simulate

from dx1_bringup.gateware.vector.transpose import TransposeBuffer
from dx1_bringup.model.vector import VectorUnit
from dx1_bringup.spec import Opcode, TileConfig, pack_command

pytestmark = pytest.mark.amaranth_sim


def _expected(array: int, blocks: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Random source blocks (rows 0..), and the model's TRANSPOSE of them into rows after them."""
    config = TileConfig(array=array, spm_rows=max(64, 1 << (2 * blocks * array - 1).bit_length()), acc_rows=32)
    spm = np.zeros((config.spm_rows, array), np.int8)
    spm[:blocks * array] = rng.integers(-128, 128, size=(blocks * array, array))
    unit = VectorUnit(config, spm, np.zeros((config.acc_rows, array), np.int32))
    dst = blocks * array
    unit.execute(pack_command(Opcode.TRANSPOSE, src_addr=0, dst_addr=dst, blocks=blocks, src_stride=array,
                              dst_stride=array))
    return spm[:dst].copy(), spm[dst:2 * dst].copy()


def _pack(row: np.ndarray) -> int:
    return sum((int(v) & 0xFF) << (8 * i) for i, v in enumerate(row))


def _unpack(word: int, array: int) -> list[int]:
    return [((word >> (8 * i)) & 0xFF) - (((word >> (8 * i)) & 0x80) << 1) for i in range(array)]


@pytest.mark.parametrize(("array", "load_p", "read_p"), [(2, 0.5, 0.5), (4, 0.7, 0.3), (8, 0.3, 0.8), (16, 1.0, 1.0)])
def test_blocks_against_the_model(array: int, load_p: float, read_p: float) -> None:
    """Loads and reads at random (ignored ones too: a load while not load_ready, a read without col_valid); every
    read gives the model's next destination row.  At full rate (load and read every cycle) neither ever waits
    once the first block is in."""
    rng = np.random.default_rng(array)
    blocks = 12
    src, dst = _expected(array, blocks, rng)
    dut = TransposeBuffer(array)

    async def bench(ctx) -> None:
        loaded = out = 0
        for cycle in range(40 * blocks * array):
            if out == len(dst):
                break
            load = rng.random() < load_p
            read = rng.random() < read_p
            ctx.set(dut.load, load)
            ctx.set(dut.row.as_value(), _pack(src[loaded % len(src)]))
            ctx.set(dut.read, read)
            if load_p == read_p == 1.0 and cycle >= array and loaded < len(src):
                assert ctx.get(dut.load_ready) and ctx.get(dut.col_valid), f"a wait at full rate, cycle {cycle}"
            if read and ctx.get(dut.col_valid):
                assert _unpack(ctx.get(dut.col.as_value()), array) == list(dst[out]), f"output row {out}"
                out += 1
            if load and ctx.get(dut.load_ready) and loaded < len(src):
                loaded += 1
            elif load and loaded == len(src):
                ctx.set(dut.load, 0)
            await ctx.tick()
            assert ctx.get(dut.col_valid) == (loaded // array > out // array), f"col_valid, cycle {cycle}"
        assert out == len(dst), "every block came out"

    simulate(dut, bench)


def test_transpose_refuses_a_bad_array() -> None:
    with pytest.raises(ValueError, match=r"^Transpose buffer lanes must be an integer from 1 to 16, not 2.0$"):
        TransposeBuffer(2.0)
