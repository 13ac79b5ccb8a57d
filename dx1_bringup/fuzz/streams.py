"""Constrained-random command streams for both queues of a device, from a seeded generator.

Every command a queue gets stays inside that queue's areas of the :class:`~dx1_bringup.fuzz.layout.Layout`
(sources in its input area, destinations in its output area, everything in its DMA window) unless it is
an error command that must be refused; SIGNAL/WAIT pairs between the queues are placed on a common
timeline, so every WAIT waits only for a SIGNAL that comes (:func:`random_batch`).  Each command comes
with a small dict of metadata (opcode, shape, error kind, post-op flags) for functional coverage.  The
pyuvm environment (testbenches/uvm) and the differential fuzzer (:mod:`dx1_bringup.fuzz.runner`) both
draw from here; the tile-level generators are :mod:`dx1_bringup.sim.stimulus` (GEMM and POSTOP) and
:mod:`dx1_bringup.sim.vector_stimulus` (the vector unit's commands, :data:`VECTOR_SHARE` of the legal ones
on tiles that have one).
"""

from __future__ import annotations

import numpy as np

from ..model.tile import MAX_SHIFT
from ..sim.stimulus import bad_command, random_gemm, random_postop
from ..sim.vector_stimulus import bad_vector_command, random_vector_command, vector_meta
from ..spec import COMMANDS, Opcode, VectorOp, pack_command, table_rows
from .layout import Layout

__all__ = ["SHAPE_LIMITS", "VECTOR_SHARE", "VECTOR_ERROR_KIND", "ERROR_KINDS", "shape_of", "pick_work", "meta",
           "vector_command_meta",
           "random_move", "random_copy",
           "error_command", "directed_error", "random_command", "random_batch"]

SHAPE_LIMITS = {"tiny": (1, 4), "medium": (5, 40), "long": (41, 130)}
#: The share of legal random commands that go to the vector unit (on tiles that have one).
VECTOR_SHARE = 0.2


def shape_of(work: int) -> str:
    return next((name for name, (_lo, hi) in SHAPE_LIMITS.items() if work <= hi), "long")


def pick_work(r: np.random.Generator, limit: int = 130) -> int:
    lo, hi = SHAPE_LIMITS[str(r.choice(list(SHAPE_LIMITS)))]
    return int(r.integers(lo, min(hi, limit) + 1))


def meta(opcode: str, work: int | None = None, error_kind: str = "none", postop_flags: str = "n/a") -> dict:
    return {"opcode": opcode, "shape": "n/a" if work is None else shape_of(work), "error_kind": error_kind,
            "postop_flags": postop_flags}


def vector_command_meta(cmd: bytes, error_kind: str = "none") -> dict:
    """:func:`meta` of a vector-unit command, with its vector coverage (``vector_meta``) under ``"vector"``;
    a VECTOR command's shape is its steps (rows x cols)."""
    word = int.from_bytes(cmd, "little")
    opcode = Opcode(word & 0xFF)
    work = (word >> 112 & 0xFFFF) * (word >> 48 & 0xFFFF) if opcode == Opcode.VECTOR else None
    return {**meta(opcode.name, work or None, error_kind), "vector": vector_meta(cmd)}


#: How error_command's kinds map to the vector unit's refusals (:data:`~dx1_bringup.sim.vector_stimulus.
#: VECTOR_BAD_KINDS`).
_VECTOR_KINDS = {"reserved": ("reserved", "vop_reserved"), "dimension": ("dimension", "transpose_dimension"),
                 "field": ("vop", "shift", "clamp"), "spm_range": ("spm_range", "table_range", "transpose_range"),
                 "acc_range": ("acc_range",)}
#: The error_command kind of each vector refusal.
VECTOR_ERROR_KIND = {refusal: kind for kind, refusals in _VECTOR_KINDS.items() for refusal in refusals}


def random_move(r: np.random.Generator, lay: Layout, q: int, opcode: Opcode, tag: int) -> tuple[bytes, dict]:
    """A legal LOAD (from the input area) or STORE (into the output area) of random shape."""
    cfg = lay.config.tile
    acc = bool(r.integers(0, 2))
    depth, row_bytes = (cfg.acc_rows, cfg.acc_row_bytes) if acc else (cfg.spm_rows, cfg.spm_row_bytes)
    work = pick_work(r)
    cols = int(r.integers(1, min(work, 8) + 1))
    rows = max(1, work // cols)
    col_stride = int(r.integers(1, 3))
    row_stride = cols * col_stride + int(r.integers(0, 3))   # local rows never overlap inside a command
    span = (rows - 1) * row_stride + (cols - 1) * col_stride + 1
    local = int(r.integers(0, depth - span + 1))
    outer = cols * row_bytes
    mem_stride = outer + 8 * int(r.integers(0, 3))
    area, size = (lay.in_base(q), lay.in_bytes) if opcode == Opcode.LOAD else (lay.out_base(q), lay.out_bytes)
    extent = (rows - 1) * mem_stride + outer
    mem = area + 8 * int(r.integers(0, (size - extent) // 8 + 1))
    cmd = pack_command(opcode, tag=tag, flags={"acc": acc}, mem_addr=mem, mem_stride=mem_stride,
                       local_addr=local, rows=rows, cols=cols, local_row_stride=row_stride,
                       local_col_stride=col_stride)
    return cmd, meta(opcode.name, rows * cols)


def random_copy(r: np.random.Generator, lay: Layout, q: int, tag: int) -> tuple[bytes, dict]:
    beats = pick_work(r)
    length = 8 * beats
    src = lay.in_base(q) + 8 * int(r.integers(0, (lay.in_bytes - length) // 8 + 1))
    dst = lay.out_base(q) + 8 * int(r.integers(0, (lay.out_bytes - length) // 8 + 1))
    return pack_command(Opcode.COPY, tag=tag, src_addr=src, dst_addr=dst, length=length), meta("COPY", beats)


ERROR_KINDS = ("opcode", "reserved", "dimension", "field", "sem_range", "spm_range", "acc_range", "misaligned",
               "dma_window")


def error_command(r: np.random.Generator, lay: Layout, q: int, tag: int, kind: str,
                  reserved_op: Opcode | None = None) -> tuple[bytes, dict]:
    """A command the device must refuse; the model decides the code (the kind is the intent, for coverage).

    ``reserved_op``: the opcode of a "reserved" command (default: a random one).
    """
    cfg = lay.config.tile
    if kind == "opcode":
        op = int(r.integers(max(Opcode) + 1, 256))
        return pack_command(Opcode.NOP, tag=tag, raw=op), meta("BAD", error_kind=kind)
    if kind == "reserved":
        op = Opcode(int(r.choice(list(Opcode)))) if reserved_op is None else reserved_op
        mask = COMMANDS[op].reserved_mask
        bit = int(r.choice([b for b in range(256) if mask >> b & 1]))
        base = pack_command(op, tag=tag, rows=1, cols=1) if op in (Opcode.LOAD, Opcode.STORE) else (
            pack_command(op, tag=tag))
        word = int.from_bytes(base, "little") | 1 << bit
        return word.to_bytes(32, "little"), meta(op.name, error_kind=kind)
    if kind in _VECTOR_KINDS and cfg.vector and reserved_op is None and r.integers(0, 4) == 0:
        refusal = str(r.choice(_VECTOR_KINDS[kind]))
        cmd, _code = bad_vector_command(r, cfg, tag, refusal)
        return cmd, {**vector_command_meta(cmd, kind), "vector_refusal": refusal}
    if kind in ("dimension", "field", "spm_range", "acc_range") and r.integers(0, 3) < 2:
        # The tile's own checks on GEMM / POSTOP, from the shared stimulus.
        tile_kind = {"field": "shift"}.get(kind, kind)
        cmd, _code = bad_command(r, cfg, tag, tile_kind)
        op = Opcode(cmd[0])
        return cmd, meta(op.name, error_kind=kind)
    if kind in ("dimension", "field"):
        choice = int(r.integers(0, 4))
        if choice == 0:
            return pack_command(Opcode.WAIT, tag=tag, sem=0, count=0), meta("WAIT", error_kind="dimension")
        if choice == 1:
            return pack_command(Opcode.COPY, tag=tag, src_addr=lay.in_base(q), dst_addr=lay.out_base(q),
                                length=0), meta("COPY", error_kind="dimension")
        op = Opcode.LOAD if choice == 2 else Opcode.STORE
        return pack_command(op, tag=tag, mem_addr=lay.in_base(q), rows=int(r.integers(0, 2)), cols=0), \
            meta(op.name, error_kind="dimension")
    if kind == "sem_range":
        op = Opcode.SIGNAL if r.integers(0, 2) else Opcode.WAIT
        return pack_command(op, tag=tag, sem=int(r.integers(lay.config.semaphores, 256)), count=1), \
            meta(op.name, error_kind=kind)
    if kind in ("spm_range", "acc_range"):
        acc = kind == "acc_range"
        depth = cfg.acc_rows if acc else cfg.spm_rows
        op = Opcode.LOAD if r.integers(0, 2) else Opcode.STORE
        return pack_command(op, tag=tag, flags={"acc": acc}, mem_addr=lay.in_base(q), rows=2, cols=1,
                            local_addr=depth - 1, local_row_stride=1), meta(op.name, 2, kind)
    if kind == "misaligned":
        which = int(r.integers(0, 3))
        if which == 2:
            return pack_command(Opcode.COPY, tag=tag, src_addr=lay.in_base(q) + 4, dst_addr=lay.out_base(q),
                                length=16), meta("COPY", 2, kind)
        op = Opcode.LOAD if which == 0 else Opcode.STORE
        odd = int(r.integers(1, 8))
        return pack_command(op, tag=tag, mem_addr=lay.out_base(q) + odd, rows=1, cols=1), meta(op.name, 1, kind)
    if kind == "dma_window":
        # Just below the window or across its end (8 bytes in, 16 moved): the guard regions show that
        # nothing moved.
        below = bool(r.integers(0, 2))
        mem = lay.win_base(q) - 8 if below else lay.win_limit(q) - 8
        which = int(r.integers(0, 3))
        if which == 2:
            return pack_command(Opcode.COPY, tag=tag, src_addr=lay.in_base(q), dst_addr=mem, length=64), \
                meta("COPY", 8, kind)
        op = Opcode.LOAD if which == 0 else Opcode.STORE
        return pack_command(op, tag=tag, mem_addr=mem, rows=1, cols=2, local_col_stride=1), \
            meta(op.name, 2, kind)
    raise ValueError(f"unknown error kind {kind!r}")


def directed_error(r: np.random.Generator, lay: Layout, q: int, tag: int, opcode: str, status: str
                   ) -> tuple[bytes, dict]:
    """A command of ``opcode`` ("BAD": an undefined one) that fails with ``status`` (an :class:`ErrorCode` name).

    Each is the simplest command with that one thing wrong; the model still decides the code, so a
    builder that missed its error shows up as a hole in the opcode x status cross.
    """
    cfg = lay.config.tile
    if opcode == "BAD":
        return error_command(r, lay, q, tag, "opcode")
    op = Opcode[opcode]
    if status == "RESERVED_BITS":
        return error_command(r, lay, q, tag, "reserved", op)
    kind = {"BAD_DIMENSION": "dimension", "BAD_FIELD": "field", "SEM_RANGE": "sem_range", "SPM_RANGE": "spm_range",
            "ACC_RANGE": "acc_range", "MISALIGNED": "misaligned", "DMA_WINDOW": "dma_window"}[status]
    if op in (Opcode.LOAD, Opcode.STORE):
        move = {"mem_addr": lay.in_base(q), "rows": 1, "cols": 1}
        if status == "BAD_DIMENSION":
            move["cols"] = 0
        elif status in ("SPM_RANGE", "ACC_RANGE"):
            acc = status == "ACC_RANGE"
            move.update(flags={"acc": acc}, rows=2, local_row_stride=1,
                        local_addr=(cfg.acc_rows if acc else cfg.spm_rows) - 1)
        elif status == "MISALIGNED":
            move["mem_addr"] = lay.out_base(q) + 4
        else:   # DMA_WINDOW: the first row starts 8 bytes below the window
            move.update(mem_addr=lay.win_base(q) - 8, cols=2, local_col_stride=1)
        return pack_command(op, tag=tag, **move), meta(opcode, move["rows"] * move["cols"] or None, kind)
    n = cfg.array
    built = {
        ("GEMM", "BAD_DIMENSION"): dict(m=5, k_chunks=0),
        ("GEMM", "SPM_RANGE"): dict(m=4, k_chunks=1, b_addr=cfg.spm_rows - n + 1),
        ("GEMM", "ACC_RANGE"): dict(m=3, k_chunks=1, c_addr=cfg.acc_rows - 2),
        ("POSTOP", "BAD_DIMENSION"): dict(rows=0),
        ("POSTOP", "BAD_FIELD"): dict(rows=1, shift=MAX_SHIFT + 1),
        ("POSTOP", "SPM_RANGE"): dict(rows=2, dst_addr=cfg.spm_rows - 1),
        ("POSTOP", "ACC_RANGE"): dict(rows=2, src_addr=cfg.acc_rows - 1),
        ("SIGNAL", "SEM_RANGE"): dict(sem=lay.config.semaphores, count=1),
        ("WAIT", "BAD_DIMENSION"): dict(sem=0, count=0),
        ("WAIT", "SEM_RANGE"): dict(sem=lay.config.semaphores, count=1),
        ("COPY", "BAD_DIMENSION"): dict(src_addr=lay.in_base(q), dst_addr=lay.out_base(q), length=0),
        ("COPY", "MISALIGNED"): dict(src_addr=lay.in_base(q) + 4, dst_addr=lay.out_base(q), length=16),
        ("COPY", "DMA_WINDOW"): dict(src_addr=lay.in_base(q), dst_addr=lay.win_base(q) - 8, length=64),
        ("VECTOR", "BAD_DIMENSION"): dict(vop=VectorOp.MOV, rows=1, cols=0),
        ("VECTOR", "BAD_FIELD"): dict(vop=VectorOp.CLAMP, rows=1, cols=1, imm=1, imm2=0),
        ("VECTOR", "SPM_RANGE"): dict(vop=VectorOp.MOV, rows=1, cols=2, d_addr=cfg.spm_rows - 1),
        ("VECTOR", "ACC_RANGE"): dict(vop=VectorOp.MOV, rows=2, cols=1, a_addr=cfg.acc_rows - 1, a_row_stride=1,
                                      flags={"a_acc": True}),
        ("TABLE", "SPM_RANGE"): dict(src_addr=max(0, cfg.spm_rows - table_rows(n) + 1)),
        ("TRANSPOSE", "BAD_DIMENSION"): dict(blocks=0),
        ("TRANSPOSE", "SPM_RANGE"): dict(blocks=1, dst_addr=cfg.spm_rows - n + 1),
    }
    if (opcode, status) not in built:
        raise ValueError(f"no directed {opcode} command fails with {status}")
    fields = built[(opcode, status)]
    if op in (Opcode.VECTOR, Opcode.TABLE, Opcode.TRANSPOSE):
        cmd = pack_command(op, tag=tag, **fields)
        return cmd, vector_command_meta(cmd, kind)
    work = fields.get("m", fields.get("rows", fields.get("length", 0) // 8)) or None
    shaped = op in (Opcode.GEMM, Opcode.POSTOP, Opcode.COPY)
    return pack_command(op, tag=tag, **fields), meta(opcode, work if shaped else None, kind)


def random_command(r: np.random.Generator, lay: Layout, q: int, tag: int, error_rate: float) -> tuple[bytes, dict]:
    if r.random() < error_rate:
        return error_command(r, lay, q, tag, str(r.choice(ERROR_KINDS)))
    pick = r.random()
    cfg = lay.config.tile
    if cfg.vector and pick < VECTOR_SHARE:
        cmd = random_vector_command(r, cfg, tag)
        return cmd, vector_command_meta(cmd)
    pick = r.random()
    if pick < 0.25:
        cmd = random_gemm(r, cfg, tag)
        fields = int.from_bytes(cmd, "little")
        m, k = fields >> 112 & 0xFFFF, fields >> 128 & 0xFFFF
        return cmd, meta("GEMM", m * k)
    if pick < 0.42:
        cmd = random_postop(r, cfg, tag)
        word = int.from_bytes(cmd, "little")
        flags = word >> 8 & 3
        return cmd, meta("POSTOP", word >> 96 & 0xFFFF, postop_flags=("none", "relu", "bias", "relu+bias")[flags])
    if pick < 0.62:
        return random_move(r, lay, q, Opcode.LOAD, tag)
    if pick < 0.80:
        return random_move(r, lay, q, Opcode.STORE, tag)
    if pick < 0.90:
        return random_copy(r, lay, q, tag)
    op = Opcode.NOP if pick < 0.95 else Opcode.FENCE
    return pack_command(op, tag=tag), meta(op.name)


def random_batch(r: np.random.Generator, lay: Layout, length: int, error_rate: float, sync_rate: float,
                 tag_base: list[int]) -> tuple[list[list[tuple[bytes, dict]]], list[dict]]:
    """Commands for both queues, with matched SIGNAL/WAIT pairs on a common timeline.

    Each pair uses its own semaphore; its SIGNAL and its WAIT are appended at the same point of the
    timeline, so every WAIT depends only on commands at earlier points: no deadlock.
    """
    queues: list[list[tuple[bytes, dict]]] = [[], []]
    pairs: list[dict] = []
    max_len = lay.entries - 1
    while min(len(x) for x in queues) < length:
        if len(pairs) < lay.config.semaphores and r.random() < sync_rate and max(map(len, queues)) < max_len:
            producer = int(r.integers(0, 2))
            consumer = 1 - producer
            sem, count = len(pairs), int(r.integers(1, 4))
            signal = pack_command(Opcode.SIGNAL, tag=tag_base[producer] & 0xFFFF, sem=sem, count=count)
            wait = pack_command(Opcode.WAIT, tag=tag_base[consumer] & 0xFFFF, sem=sem, count=count)
            queues[producer].append((signal, meta("SIGNAL")))
            queues[consumer].append((wait, meta("WAIT")))
            tag_base[producer] += 1
            tag_base[consumer] += 1
            pairs.append({"direction": f"q{producer}->q{consumer}", "producer": producer})
            continue
        q = int(r.integers(0, 2))
        if len(queues[q]) >= max_len:
            q = 1 - q
        queues[q].append(random_command(r, lay, q, tag_base[q] & 0xFFFF, error_rate))
        tag_base[q] += 1
    return queues, pairs


