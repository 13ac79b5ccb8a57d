"""`make bench` section ``vector``: the vector unit's throughput on long rows, and the performance model beside it.

Each vop runs as one VECTOR command of :data:`ROWS` outer rows of :data:`COLS` steps on tile 0 of the SoC RTL
(and of the golden model, whose results must be the same bytes), and again with half the rows; the PERF
counter BUSY_VECTOR gives the cycles the unit was busy.  Elements per cycle are given per command
(``ROWS * COLS * array / BUSY_VECTOR``, fill and drain included) and in the steady state (the slope between
the two lengths, which the fill and drain cancel out of); :meth:`~dx1_bringup.perfmodel.Costs.
vector_command_cycles` is the prediction the cycles are compared with.
"""

from __future__ import annotations

import numpy as np
from dx1_driver import Device, regs

from .perfmodel import COSTS
from .runtime.commands import CommandStream
from .spec import VECTOR_OPS, Opcode, VectorOp, unpack_command

__all__ = ["ROWS", "COLS", "VOPS", "vector_command", "vector_bench", "print_vector"]

#: Outer rows and steps per outer row of each measured command: 1024 steps.
ROWS, COLS = 8, 128
#: The vops measured: a copy, a binary op on int32 lanes, a requantising product, a table lookup, a row
#: sum, and the divider.
VOPS = (VectorOp.MOV, VectorOp.ADD, VectorOp.MUL, VectorOp.LUT, VectorOp.RSUM, VectorOp.RECIP)


def vector_command(vop: VectorOp, tag: int, rows: int = ROWS, cols: int = COLS) -> bytes:
    """A VECTOR command of ``vop`` over ``rows`` x ``cols`` accumulator rows into the scratchpad (B a broadcast row)."""
    spec = VECTOR_OPS[vop]
    fields = dict(vop=int(vop), shift=0 if spec.max_shift is None else min(spec.max_shift, 8), cols=cols,
                  a_addr=0, b_addr=0, d_addr=0, rows=rows, a_row_stride=cols, b_row_stride=0, b_col_stride=0,
                  d_row_stride=1 if spec.kind == "reduce" else cols, imm=0, imm2=0)
    return regs.vector(tag=tag, a_acc=True, b_acc=spec.uses_b, d_acc=False, **fields)


def _run(dev: Device, vop: VectorOp, tag: int, acc_addr: int, out_addr: int, rows: int = ROWS) -> tuple[int, bytes]:
    """Load the accumulator rows, run ``vop`` over ``rows`` outer rows of them, store the scratchpad rows it
    wrote: (busy cycles, bytes)."""
    n, steps = dev.caps.array, ROWS * COLS
    stream = CommandStream(array=n, spm_rows=dev.caps.spm_rows, acc_rows=dev.caps.acc_rows,
                           mem_bytes=dev.caps.mem_bytes, what="vector bench")
    stream.load(mem_addr=acc_addr, mem_stride=COLS * 4 * n, local_addr=0, rows=ROWS, cols=COLS, local_row_stride=COLS,
                local_col_stride=1, acc=True)
    stream.store(mem_addr=out_addr, mem_stride=COLS * n, local_addr=0, rows=ROWS, cols=COLS, local_row_stride=COLS,
                 local_col_stride=1)
    load, store = stream.commands
    perf = dev.perf(0)
    before = perf.read()
    q = dev.queue(0)
    q.submit([load, vector_command(vop, tag, rows), store])
    done = q.wait(3, timeout=600)
    if any(c.status for c in done):
        raise RuntimeError(f"{vop.name}: completions {[(c.tag, c.status) for c in done]} on {dev.name}")
    busy = perf.read().since(before).busy_vector
    return busy, dev.read_mem(out_addr, steps * n)


def vector_bench(devices: tuple[str, ...] = ("sim", "model")) -> dict:
    """Per vop: busy cycles on each device, elements per cycle, the performance model's prediction and error,
    and whether every device left the same scratchpad bytes."""
    rng = np.random.default_rng(1)
    opened = [Device.open(d) for d in devices]
    try:
        array = opened[0].caps.array
        acc = rng.integers(-(1 << 20), 1 << 20, size=(ROWS * COLS, array)).astype(np.int32)
        places = []
        for dev in opened:
            places.append((dev.alloc(acc.nbytes), dev.alloc(ROWS * COLS * array)))
            dev.write_mem(places[-1][0], acc)
        runs = []
        for tag, vop in enumerate(VOPS):
            measured = {name: _run(dev, vop, tag, *place)
                        for name, dev, place in zip(devices, opened, places, strict=True)}
            busy = measured[devices[0]][0]
            half = _run(opened[0], vop, tag, *places[0], rows=ROWS // 2)[0]
            _, fields = unpack_command(vector_command(vop, tag))
            predicted = COSTS.vector_command_cycles({**fields, "opcode": Opcode.VECTOR}, array)
            elements = ROWS * COLS * array
            runs.append({"vop": vop.name, "steps": ROWS * COLS, "elements": elements,
                         "busy_cycles": {name: m[0] for name, m in measured.items()},
                         "elements_per_cycle": elements / busy,
                         "steady_elements_per_cycle": (elements / 2) / (busy - half),
                         "predicted": predicted, "model_error": (predicted - busy) / busy,
                         "same_bytes": len({m[1] for m in measured.values()}) == 1})
            print(f"  {vop.name:6s} {runs[-1]['elements_per_cycle']:6.2f} elements/cycle on {devices[0]} "
                  f"({busy} cycles; steady state {runs[-1]['steady_elements_per_cycle']:.2f}), predicted {predicted}",
                  flush=True)
    finally:
        for dev in opened:
            dev.close()
    return {"devices": list(devices), "rows": ROWS, "cols": COLS, "array": array, "runs": runs}


def print_vector(report: dict) -> None:
    first = report["devices"][0]
    print(f"\nThe vector unit on long rows ({report['rows']} x {report['cols']} steps of {report['array']} lanes, "
          f"BUSY_VECTOR on {first}; the performance model beside it):")
    print(f"  {'vop':6s} {'cycles':>8} {'elements/cycle':>14} {'steady state':>12} {'predicted':>9} {'error':>7}  "
          f"same bytes on {', '.join(report['devices'])}")
    for r in report["runs"]:
        print(f"  {r['vop']:6s} {r['busy_cycles'][first]:>8} {r['elements_per_cycle']:>14.2f} "
              f"{r['steady_elements_per_cycle']:>12.2f} {r['predicted']:>9} {r['model_error']:>+7.1%}  "
              f"{r['same_bytes']}")
