"""Tiling compiler for int8 GEMM of any shape: the plan and each tile's command stream.

``C = A @ B`` for int8 ``A`` (M, K) and ``B`` (K, N), either requantised to int8
by the post-op (with an optional int32 bias per output column) or kept as the
int32 accumulator (bias then added, wrapping, by preloading it into the
accumulators).

Device-memory layout (written by the host, zero-padded)
--------------------------------------------------------
``Kp`` and ``Np`` round K and N up to a multiple of the array size ``n`` and of
the 8-byte bus width, so that every row start and block offset is aligned:

* A: (M, Kp) int8, row-major; B: (Kp, Np) int8, row-major;
* bias: (Np,) int32; C: (M, Np), int8 with the post-op, else int32.

Any operand may instead be a view with its own row stride (a column slice of a wider matrix, for
example one attention head), and the product may be a sum ``A_0 @ B_0 + A_1 @ B_1 + ...`` of terms
with their own reduction lengths (:class:`GemmTerm`), accumulated into the same accumulator rows before
one POSTOP: a residual connection or a concatenation along K costs no round trip and no extra pass.

Local layout
------------
The output is cut into blocks of ``mt`` rows x ``nct`` array-wide chunks, and
the reduction into steps of ``kct`` chunks (one step when the whole reduction
fits).  The scratchpad and the accumulator buffer are each split into two
halves; steps alternate between the scratchpad halves and output blocks
between the accumulator halves, so that the next step's LOADs touch no row
the current step's GEMMs, POSTOPs and STORE use and the hardware overlaps them.
Inside a half, relative to its first row:

* scratchpad: A at 0, chunk k row i at ``k*mt + i`` (GEMM's activation layout);
  B at ``kct*mt``, output chunk j at ``j*kct*n`` (``kct*n`` weight rows each);
  the int8 output at ``kct*mt + kct*n*nct``, chunk j row i at ``j*mt + i``;
* accumulator buffer: C chunk j row i at ``j*mt + i``; then one bias row per
  output chunk (post-op only).

Each tile's stream is software-pipelined: the LOADs of step s+1 come among
the GEMMs of step s (after the first few) and before its POSTOPs and STORE.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from dx1_driver import (
    Capabilities,
)

from ..perfmodel import COSTS
from ..spec import PostOpParams, ceil_div
from .commands import CommandStream
from .operands import ACC_LANE_BYTES, BUS_BYTES, padded

__all__ = ["GemmBlock", "GemmPlan", "GemmStep", "GemmTerm", "check_post", "check_tiles", "compile_gemm"]

#: Smallest block, in multiples of the array size, the planner accepts where M allows (3n plus margin;
#: 32 rows on the 8x8 array).
_MIN_ROWS = 4


def _split(total: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` (start, size) pieces of ``range(total)``, sizes differing by at most one."""
    size, extra = divmod(total, parts)
    pieces, start = [], 0
    for i in range(parts):
        length = size + (i < extra)
        pieces.append((start, length))
        start += length
    return pieces


def _candidates(total: int) -> list[int]:
    """Every distinct largest piece size ``ceil(total / p)``, from ``total`` down to 1."""
    return sorted({ceil_div(total, p) for p in range(1, total + 1)}, reverse=True)


@dataclass(frozen=True)
class GemmBlock:
    """One output block: rows ``[m0, m0 + rows)`` and columns ``[n0, n0 + cols)`` of the padded C."""

    tile: int
    m0: int
    rows: int
    n0: int
    cols: int


@dataclass(frozen=True)
class GemmTerm:
    """One product ``A @ B`` of a GEMM's sum: A (M, k) at ``a_addr``, B (k, N) at ``b_addr``.

    ``a_stride`` and ``b_stride`` are the bytes between rows (default: the padded K and N, i.e. the
    matrices are stored whole).
    """

    k: int
    a_addr: int
    b_addr: int
    a_stride: int | None = None
    b_stride: int | None = None


@dataclass(frozen=True)
class GemmStep:
    """One reduction step of a block: rows ``[k0, k0 + depth)`` of term ``term``'s padded reduction."""

    block: int
    k0: int
    depth: int
    spm_half: int
    acc_half: int
    term: int = 0
    #: The block's first step (its GEMMs overwrite) and last step (then POSTOP and STORE).
    first: bool = True
    last: bool = True


@dataclass
class GemmPlan:
    """Commands of every tile for one GEMM, and the layout they assume.

    Attributes
    ----------
    m, k, n:
        The problem; ``k_padded`` and ``n_padded`` its padded reduction and width.
    array:
        The array size the plan was made for.
    a_addr, b_addr, c_addr, bias_addr:
        Device-memory operands (``bias_addr`` is ``None`` without a bias).
    terms:
        Every product of the sum, the first one ``a_addr @ b_addr``, each with its padded K and strides.
    c_stride:
        Bytes between the rows of C.
    post:
        The requantisation, or ``None`` for an int32 result.
    mt, nct, kct:
        Largest block: rows, output chunks and reduction chunks.
    blocks, steps:
        Every output block, and per tile the reduction steps in issue order.
    commands:
        Per tile, the command stream (tags count up from 0 per tile, modulo 2**16).
    """

    m: int
    k: int
    n: int
    k_padded: int
    n_padded: int
    array: int
    a_addr: int
    b_addr: int
    c_addr: int
    bias_addr: int | None
    post: PostOpParams | None
    mt: int
    nct: int
    kct: int
    terms: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    c_stride: int = 0
    blocks: list[GemmBlock] = field(default_factory=list)
    steps: list[list[GemmStep]] = field(default_factory=list)
    commands: list[list[bytes]] = field(default_factory=list)
    load_bytes: int = 0
    store_bytes: int = 0
    array_macs: int = 0

    @property
    def c_dtype(self) -> np.dtype:
        return np.dtype(np.int8 if self.post is not None else np.int32)

    @property
    def useful_macs(self) -> int:
        return self.m * self.k * self.n


def check_post(post: PostOpParams | None) -> PostOpParams | None:
    """``post`` itself, after checking that it is a :class:`PostOpParams` or ``None``."""
    if post is not None and not isinstance(post, PostOpParams):
        raise TypeError(f"post must be a PostOpParams or None, not {post!r}")
    return post


@functools.lru_cache(maxsize=1 << 14)
def _block_cost(rows: float, chunks: float, depth: float, steps: int, n: int, tiles: int, post: bool,
                bias: bool) -> tuple[float, float]:
    """Cycles of one output block of ``rows`` x ``chunks`` array-wide chunks, and of one step's LOADs.

    Cached: the block search asks for the same sizes under many grids (a 4096^3 search, 60% of its calls).
    """
    # The tiles share one device-memory port: each other tile's DMA slows every load.
    share = 1 + COSTS.contention * (tiles - 1)
    load = share * float(COSTS.load_cycles(rows, rows * depth * n / BUS_BYTES)
                         + COSTS.load_cycles(depth * n, depth * n * chunks * n / BUS_BYTES))
    gemm = chunks * float(COSTS.gemm_period(rows, depth)) + COSTS.gemm_fill + COSTS.gemm_drain
    out_lane = 1 if post else ACC_LANE_BYTES
    finish = (int(post) * chunks * float(COSTS.postop_cycles(rows))
              + float(COSTS.store_cycles(rows, rows * chunks * n * out_lane / BUS_BYTES)))
    commands = steps * (2 + chunks) + int(bias) + (chunks + 1 if post else 1)
    return steps * max(load, gemm) + finish + commands * COSTS.dispatch_gap, load


def _size_classes(first: int, count: int, rows: int, cols: int, row_blocks: int,
                  col_blocks: int) -> dict[tuple[int, int], int]:
    """How many blocks of each size, ``(rows, cols)``, blocks ``[first, first + count)`` of the plan have.

    The plan cuts ``rows`` into ``row_blocks`` and ``cols`` into ``col_blocks`` pieces with :func:`_split`
    (the first pieces one larger) and numbers the blocks row by row; at most four sizes occur.
    """
    big_r, big_c = rows % row_blocks, cols % col_blocks
    small_r, small_c = rows // row_blocks, cols // col_blocks

    def before(x: int, r: int, c: int) -> int:
        """Blocks numbered below ``x`` in the first ``r`` block rows and the first ``c`` block columns."""
        full = x // col_blocks
        return min(full, r) * c + (min(x % col_blocks, c) if full < r else 0)

    def within(r: int, c: int) -> int:
        return before(first + count, r, c) - before(first, r, c)

    both, big_rows, big_cols = (within(big_r, big_c), within(big_r, col_blocks), within(row_blocks, big_c))
    counts = {(small_r + 1, small_c + 1): both, (small_r + 1, small_c): big_rows - both,
              (small_r, small_c + 1): big_cols - both, (small_r, small_c): count - big_rows - big_cols + both}
    return {size: n for size, n in counts.items() if n}


def _busiest_tile(rows: int, cols: int, row_blocks: int, col_blocks: int, tiles: int, g: int,
                  cost: Callable[[int, int], tuple[float, float]]) -> tuple[float, float]:
    """Cycles of the busiest tile's blocks, and the first block's un-overlapped LOADs, for a plan's block grid.

    ``cols`` is in units of ``g`` chunks; ``cost(rows, chunks)`` gives a block's cycles and its step's
    LOADs (:func:`_block_cost`).  The blocks are split over the tiles as :func:`compile_gemm` splits them;
    each tile's blocks are counted by size, so any number of blocks costs a few calls.
    """
    blocks = row_blocks * col_blocks
    costs: dict[tuple[int, int], tuple[float, float]] = {}

    def of(size: tuple[int, int]) -> tuple[float, float]:
        if size not in costs:
            costs[size] = cost(size[0], size[1] * g)
        return costs[size]

    busiest = max(sum(n * of(size)[0] for size, n in
                      _size_classes(first, count, rows, cols, row_blocks, col_blocks).items())
                  for first, count in _split(blocks, min(tiles, blocks)))
    largest = (ceil_div(rows, row_blocks), ceil_div(cols, col_blocks))
    return busiest, of(largest)[1]


def _choose_blocks(m: int, kc: int, nc: int, g: int, n: int, half_spm: int, half_acc: int, post: bool,
                   bias: bool, tiles: int) -> tuple[int, int, int]:
    """Pick (mt, nct, kct) minimising a cycle estimate of the busiest tile.

    Chunk counts are multiples of ``g`` so that every block offset is bus-aligned.
    Blocks of at least ``min(m, _MIN_ROWS * n)`` rows are preferred; only if
    none fits are smaller ones allowed.  Among them every reduction step is
    tried: a shorter step leaves room for taller and wider blocks, so each A row
    and B column is loaded fewer times (the output stays in the accumulators
    across the steps).  Per step the double-buffered LOADs (through the
    device-memory port all tiles share) overlap the GEMMs, so a step costs the
    larger of the two; a block's POSTOPs and STORE come on top; the busiest
    tile's share of the blocks sets the score.  Every cost is from
    :data:`dx1_bringup.perfmodel.COSTS`.
    """
    out_bias = int(post and bias)
    mt_choices = _candidates(m)
    for min_rows in (min(m, _MIN_ROWS * n), 1):
        best: tuple[tuple[float, int], tuple[int, int, int]] | None = None
        for kct_units in _candidates(kc // g):
            kct = kct_units * g
            steps = ceil_div(kc // g, kct_units)
            for nct_units in _candidates(nc // g):
                nct = nct_units * g
                # Largest mt that fits this (kct, nct) in half the scratchpad and half the accumulators.
                spm_room = half_spm - kct * n * nct
                acc_room = half_acc - out_bias * nct
                mt_max = min(m, max(spm_room, 0) // (kct + nct * int(post)), max(acc_room, 0) // nct)
                for mt in mt_choices:
                    if not min_rows <= mt <= mt_max:
                        continue
                    row_blocks, col_blocks = ceil_div(m, mt), ceil_div(nc // g, nct_units)
                    blocks = row_blocks * col_blocks
                    cost = functools.partial(_block_cost, depth=kc / steps, steps=steps, n=n, tiles=tiles,
                                             post=post, bias=bias)
                    busiest, load = _busiest_tile(m, nc // g, row_blocks, col_blocks, tiles, g, cost)
                    score = (load + busiest, blocks)
                    if best is None or score < best[0]:
                        best = (score, (mt, nct, kct))
        if best is not None:
            return best[1]
    raise ValueError(
        f"a GEMM block does not fit: even 1 row x {g * n} columns x {g * n} of the reduction needs "
        f"{g + g * n * g + g * int(post)} scratchpad rows and {g + out_bias * g} accumulator rows per "
        f"buffer half; the device has {half_spm} and {half_acc} (half of {2 * half_spm} and {2 * half_acc})")


def _check_terms(terms: tuple[GemmTerm, ...], m: int, np_: int,
                 arr: int) -> list[tuple[int, int, int, int, int]]:
    """Each term as (padded K, A address, A stride, B address, B stride), strides checked."""
    out = []
    for i, t in enumerate(terms):
        what = "" if i == 0 else f" of term {i}"
        if isinstance(t.k, bool) or not isinstance(t.k, int) or t.k < 1:
            raise ValueError(f"GEMM dimension k{what} must be an integer >= 1, not {t.k!r}")
        kp = padded(t.k, arr)
        a_stride = kp if t.a_stride is None else t.a_stride
        b_stride = np_ if t.b_stride is None else t.b_stride
        for name, stride, least in (("a_stride", a_stride, kp), ("b_stride", b_stride, np_)):
            if stride % BUS_BYTES or stride < least:
                raise ValueError(f"{name}{what} must be a multiple of {BUS_BYTES} of at least {least} (a row's "
                                 f"padded length), not {stride}")
        out.append((kp, t.a_addr, a_stride, t.b_addr, b_stride))
    return out


def _check_regions(caps: Capabilities, inputs: dict[str, tuple[int, int]],
                   output: tuple[str, int, int, int], bias: tuple[str, int | None, int]) -> None:
    """Every operand aligned and inside device memory; what the GEMM writes overlaps nothing it reads.

    Inputs may overlap each other (two views of one matrix); ranges are first to last byte touched.
    """
    c_name, c_addr, c_size, c_stride = output
    if c_stride % BUS_BYTES:
        raise ValueError(f"c_stride must be a multiple of {BUS_BYTES}, not {c_stride}")
    regions = dict(inputs)
    regions[c_name] = (c_addr, c_size)
    if bias[1] is not None:
        regions[bias[0]] = (bias[1], bias[2])
    for name, (addr, size) in regions.items():
        if addr < 0 or addr % BUS_BYTES:
            raise ValueError(f"{name} must be a non-negative multiple of {BUS_BYTES}, not {addr}")
        if addr + size > caps.mem_bytes:
            raise ValueError(f"{name} 0x{addr:x} + {size} bytes runs past the {caps.mem_bytes} bytes of device "
                             f"memory")
    for name, (addr, size) in regions.items():
        if name != c_name and addr < c_addr + c_size and c_addr < addr + size:
            raise ValueError(f"{name} (0x{addr:x}, {size} bytes) overlaps {c_name} (0x{c_addr:x}, "
                             f"{c_size} bytes)")


def check_tiles(tiles: int | None, caps: Capabilities, tile_ids: Sequence[int] | None = None) -> list[int]:
    """The ids of the tiles to use, sorted: all, the first ``tiles`` (a count), or exactly ``tile_ids``.

    Raises
    ------
    ValueError
        Both are given, ``tiles`` is not a count from 1 to the device's tiles, or ``tile_ids`` is not a
        non-empty list of distinct tile ids of the device.
    """
    if tiles is not None and tile_ids is not None:
        raise ValueError(f"give tiles (how many) or tile_ids (which), not both: {tiles!r} and {tile_ids!r}")
    if tile_ids is not None:
        ids = list(tile_ids) if isinstance(tile_ids, (list, tuple, range)) else None
        if (not ids or any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < caps.tiles for t in ids)
                or len(set(ids)) != len(ids)):
            raise ValueError(f"tile_ids must be a non-empty list of distinct tile ids 0 to {caps.tiles - 1}, "
                             f"not {tile_ids!r}")
        return sorted(ids)
    if tiles is None:
        return list(range(caps.tiles))
    if isinstance(tiles, bool) or not isinstance(tiles, int) or not 1 <= tiles <= caps.tiles:
        raise ValueError(f"tiles must be an integer from 1 to {caps.tiles}, not {tiles!r}")
    return list(range(tiles))


def compile_gemm(m: int, k: int, n: int, caps: Capabilities, *, a_addr: int, b_addr: int, c_addr: int,
                 bias_addr: int | None = None, post: PostOpParams | None = None,
                 tiles: int | None = None, tile_ids: Sequence[int] | None = None, a_stride: int | None = None,
                 b_stride: int | None = None, c_stride: int | None = None, more: tuple[GemmTerm, ...] = (),
                 emit_blocks: int | None = None) -> GemmPlan:
    """Plan ``C = A @ B (+ more terms) (+ bias)`` over the first ``tiles`` tiles (default: all) of a device.

    Parameters
    ----------
    m, k, n:
        Rows of A, the reduction length and columns of B (each >= 1).
    caps:
        The device's capabilities (array size, memory depths, device memory).
    a_addr, b_addr, c_addr, bias_addr:
        Device-memory addresses of the padded operands (see the module docstring).
    post:
        Requantise to int8 with these parameters; ``None``: an int32 result.
    tiles:
        How many tiles (0 .. tiles-1) share the output blocks.
    tile_ids:
        Which tiles share them, instead of ``tiles`` (for example the tiles a device has not fenced off).
    a_stride, b_stride, c_stride:
        Bytes between rows of A, B and C when they are views of wider matrices (default: padded K, N).
    more:
        Further products added into the same accumulators, each with its own A, B and K.
    emit_blocks:
        Plan the steps and emit the commands of only the first ``emit_blocks`` output blocks of each
        tile (every block is still listed): what the performance model needs of a GEMM too large to list.

    Returns
    -------
    GemmPlan

    Raises
    ------
    TypeError
        ``post`` is not a :class:`PostOpParams` or ``None``.
    ValueError
        A shape below 1, an operand that is misaligned, overlaps another or
        leaves device memory, or a device too small for even one block.
    """
    for name, value in (("m", m), ("k", k), ("n", n)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"GEMM dimension {name} must be an integer >= 1, not {value!r}")
    post = check_post(post)
    tile_ids = check_tiles(tiles, caps, tile_ids)
    tiles = len(tile_ids)
    arr = caps.array
    np_ = padded(n, arr)
    c_lane = 1 if post is not None else ACC_LANE_BYTES
    c_stride = np_ * c_lane if c_stride is None else c_stride
    terms = _check_terms((GemmTerm(k, a_addr, b_addr, a_stride, b_stride), *more), m, np_, arr)
    kp = sum(t[0] for t in terms)
    regions = {}
    for i, (tkp, ta, ta_stride, tb, tb_stride) in enumerate(terms):
        suffix = "" if i == 0 else f" (term {i})"
        regions["a_addr" + suffix] = (ta, (m - 1) * ta_stride + tkp)
        regions["b_addr" + suffix] = (tb, (tkp - 1) * tb_stride + np_)
    _check_regions(caps, regions, ("c_addr", c_addr, (m - 1) * c_stride + np_ * c_lane, c_stride),
                   ("bias_addr", bias_addr, np_ * ACC_LANE_BYTES))
    g = max(1, BUS_BYTES // arr)  # chunks per bus-aligned column step
    half_spm, half_acc = caps.spm_rows // 2, caps.acc_rows // 2
    has_bias = bias_addr is not None
    mt, nct, kct = _choose_blocks(m, min(t[0] for t in terms) // arr if len(terms) > 1 else kp // arr,
                                  np_ // arr, g, arr, half_spm, half_acc, post is not None, has_bias, tiles)
    plan = GemmPlan(m, k + sum(t.k for t in more), n, kp, np_, arr, a_addr, b_addr, c_addr, bias_addr, post, mt,
                    nct, kct, terms=terms, c_stride=c_stride)

    row_blocks = _split(m, ceil_div(m, mt))
    col_units = np_ // arr // g
    col_blocks = [(s * g * arr, c * g * arr) for s, c in _split(col_units, ceil_div(col_units, nct // g))]
    k_steps = []
    for i, (tkp, *_rest) in enumerate(terms):
        k_units = tkp // arr // g
        k_steps += [(i, s * g * arr, c * g * arr) for s, c in _split(k_units, ceil_div(k_units, kct // g))]
    order = [(m0, rows, n0, cols) for m0, rows in row_blocks for n0, cols in col_blocks]
    for slot, (first, count) in enumerate(_split(len(order), min(tiles, len(order)))):
        plan.blocks.extend(GemmBlock(tile_ids[slot], *order[i]) for i in range(first, first + count))
    # One stream per tile of the device; tiles not in use keep theirs empty.
    streams = [CommandStream(array=arr, spm_rows=caps.spm_rows, acc_rows=caps.acc_rows, mem_bytes=caps.mem_bytes,
                             tile=t, what="GEMM plan") for t in range(max(tile_ids) + 1)]
    plan.steps = [[] for _ in streams]
    blocks_before = [0] * len(streams)
    for index, block in enumerate(plan.blocks):
        acc_half = blocks_before[block.tile] % 2
        blocks_before[block.tile] += 1
        if emit_blocks is not None and blocks_before[block.tile] > emit_blocks:
            continue
        # The tile in slot s starts each block's reduction at step s (modulo the steps): tiles that run in
        # step then load other rows of B, hence other pages and memory banks, at once (the sum is the same
        # bit for bit: the accumulators add modulo 2^32).
        turn = tile_ids.index(block.tile) % len(k_steps)
        for j, (term, k0, depth) in enumerate(k_steps[turn:] + k_steps[:turn]):
            spm_half = len(plan.steps[block.tile]) % 2
            plan.steps[block.tile].append(GemmStep(index, k0, depth, spm_half, acc_half, term, j == 0,
                                                   j == len(k_steps) - 1))
    for tile, stream in enumerate(streams):
        _emit_tile(stream, plan, plan.steps[tile], half_spm, half_acc, tile_ids.index(tile) if tile in tile_ids else 0,
                   tiles)
    plan.commands = [s.commands for s in streams]
    plan.load_bytes = sum(s.load_bytes for s in streams)
    plan.store_bytes = sum(s.store_bytes for s in streams)
    plan.array_macs = sum(s.array_macs for s in streams)
    return plan


def _emit_tile(s: CommandStream, plan: GemmPlan, steps: list[GemmStep], half_spm: int, half_acc: int, slot: int,
               tiles: int) -> None:
    """The software-pipelined stream of one tile (in slot ``slot`` of ``tiles``): LOADs of step i+1 among the
    GEMMs of step i.

    Every tile loads its first step at once, before any GEMM can start, and tiles whose blocks share rows
    of A (or pages of them) would queue at the same banks burst by burst: the tile in slot s loads its
    first A from row ``s * rows // tiles`` of its block on, then the rows before it.

    The command processor dispatches in order and its tile core holds ``COSTS.core_slots`` commands, so
    LOADs placed after all of a step's GEMMs would dispatch only once all but the last few of them had
    started, leaving them half the step to load in.  Step i+1's A and B LOADs come after the first
    ``core_slots - 1`` GEMMs of step i instead: while they wait for step i-1's GEMMs (whose rows they
    overwrite) the core still holds GEMMs of step i to run.  The bias LOAD stays after all the GEMMs (a
    LOAD into the accumulators waits for the GEMM results streaming, and would hold the dispatch of the
    GEMMs behind it).
    """
    if not steps:
        return
    _emit_loads(s, plan, steps[0], half_spm, half_acc, bias_first=True,
                a_from=slot * plan.blocks[steps[0].block].rows // tiles)
    lead = COSTS.core_slots - 1
    for i, step in enumerate(steps):
        chunks = plan.blocks[step.block].cols // plan.array
        after = steps[i + 1] if i + 1 < len(steps) else None
        if after is not None and lead < chunks:
            _emit_gemms(s, plan, step, half_spm, half_acc, range(lead))
            _emit_loads(s, plan, after, half_spm, half_acc, bias=False)
            _emit_gemms(s, plan, step, half_spm, half_acc, range(lead, chunks))
            _emit_bias_load(s, plan, after, *_layout(plan, after, half_spm, half_acc)[3:])
        else:
            _emit_gemms(s, plan, step, half_spm, half_acc, range(chunks))
            if after is not None:
                _emit_loads(s, plan, after, half_spm, half_acc)
        if step.last:
            _emit_finish(s, plan, step, half_spm, half_acc)


def _layout(plan: GemmPlan, step: GemmStep, half_spm: int, half_acc: int) -> tuple[int, int, int, int, int]:
    """(A, B, output) scratchpad rows and (C, bias) accumulator rows of a step, from the module's layout."""
    block = plan.blocks[step.block]
    kct, nct = step.depth // plan.array, block.cols // plan.array
    a = step.spm_half * half_spm
    b = a + kct * block.rows
    out = b + kct * plan.array * nct
    c = step.acc_half * half_acc
    return a, b, out, c, c + nct * block.rows


def _emit_loads(s: CommandStream, plan: GemmPlan, step: GemmStep, half_spm: int, half_acc: int, *,
                bias_first: bool = False, bias: bool = True, a_from: int = 0) -> None:
    """The LOADs of one step: A and B, and (unless ``bias`` is false) the block's bias with its first step.

    A is loaded from row ``a_from`` of the block to its end, then (a second LOAD) the rows before it.

    ``bias_first`` puts the bias before A and B, for a tile's first step: the array's results have the
    accumulator's write port first, so a bias LOAD still writing when the first GEMM's results start waits
    for every GEMM after it.  A later block's first step loads it after A and B, which then need not wait
    for it while the previous block's GEMMs run (the bias LOAD itself waits for them, holding back only
    that block's STORE, which waits for its POSTOPs anyway).
    """
    block = plan.blocks[step.block]
    arr = plan.array
    kct, nct = step.depth // arr, block.cols // arr
    a, b, _out, c, bias_row = _layout(plan, step, half_spm, half_acc)
    _kp, a_addr, a_stride, b_addr, b_stride = plan.terms[step.term]
    if bias_first:
        _emit_bias_load(s, plan, step, c, bias_row)
    for first, end in ((a_from, block.rows), (0, a_from)):
        if end > first:
            s.load(mem_addr=a_addr + (block.m0 + first) * a_stride + step.k0, mem_stride=a_stride,
                   local_addr=a + first, rows=end - first, cols=kct, local_row_stride=1, local_col_stride=block.rows)
    s.load(mem_addr=b_addr + step.k0 * b_stride + block.n0, mem_stride=b_stride,
           local_addr=b, rows=step.depth, cols=nct, local_row_stride=1, local_col_stride=step.depth)
    if bias and not bias_first:
        _emit_bias_load(s, plan, step, c, bias_row)


def _emit_bias_load(s: CommandStream, plan: GemmPlan, step: GemmStep, c: int, bias_row: int) -> None:
    """The bias LOAD of a block's first step (nothing without a bias or on a later step)."""
    if plan.bias_addr is None or not step.first:
        return
    block = plan.blocks[step.block]
    nct = block.cols // plan.array
    bias_at = plan.bias_addr + block.n0 * ACC_LANE_BYTES
    if plan.post is not None:
        # One bias row per output chunk, which POSTOP adds with saturation.
        s.load(mem_addr=bias_at, mem_stride=0, local_addr=bias_row, rows=1, cols=nct,
               local_row_stride=1, local_col_stride=1, acc=True)
    else:
        # Without a post-op the bias is the accumulators' starting value: stride 0 repeats it in every row,
        # and every GEMM then accumulates onto it (wrapping, like the int32 reference).
        s.load(mem_addr=bias_at, mem_stride=0, local_addr=c, rows=block.rows, cols=nct,
               local_row_stride=1, local_col_stride=block.rows, acc=True)


def _emit_gemms(s: CommandStream, plan: GemmPlan, step: GemmStep, half_spm: int, half_acc: int,
                chunks: range) -> None:
    """The GEMMs of one step for the output chunks ``chunks`` of its block."""
    block = plan.blocks[step.block]
    kct = step.depth // plan.array
    a, b, _out, c, _bias = _layout(plan, step, half_spm, half_acc)
    accumulate = not step.first or (plan.bias_addr is not None and plan.post is None)
    for j in chunks:
        s.gemm(a_addr=a, b_addr=b + j * step.depth, c_addr=c + j * block.rows, m=block.rows, k_chunks=kct,
               accumulate=accumulate)


def _emit_finish(s: CommandStream, plan: GemmPlan, step: GemmStep, half_spm: int, half_acc: int) -> None:
    block = plan.blocks[step.block]
    arr = plan.array
    _a, _b, out, c, bias_row = _layout(plan, step, half_spm, half_acc)
    nct = block.cols // arr
    if plan.post is None:
        s.store(mem_addr=plan.c_addr + block.m0 * plan.c_stride + block.n0 * ACC_LANE_BYTES,
               mem_stride=plan.c_stride, local_addr=c, rows=block.rows, cols=nct,
               local_row_stride=1, local_col_stride=block.rows, acc=True)
        return
    for j in range(nct):
        s.postop(src_addr=c + j * block.rows, dst_addr=out + j * block.rows, rows=block.rows,
                 bias_addr=None if plan.bias_addr is None else bias_row + j, post=plan.post)
    s.store(mem_addr=plan.c_addr + block.m0 * plan.c_stride + block.n0, mem_stride=plan.c_stride,
           local_addr=out, rows=block.rows, cols=nct, local_row_stride=1, local_col_stride=block.rows)
