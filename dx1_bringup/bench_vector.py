"""`make bench` section ``vector``: the vector unit's throughput on long rows, and the performance model beside it.

Each vop runs as one VECTOR command of :data:`ROWS` outer rows of :data:`COLS` steps on tile 0 of the SoC RTL
(and of the golden model, whose results must be the same bytes), and again with half the rows; the PERF
counter BUSY_VECTOR gives the cycles the unit was busy.  Elements per cycle are given per command
(``ROWS * COLS * array / BUSY_VECTOR``, fill and drain included) and in the steady state (the slope between
the two lengths, which the fill and drain cancel out of); :meth:`~dx1_bringup.perfmodel.Costs.
vector_command_cycles` is the prediction the cycles are compared with.

Then one forward pass of the encoder and the decoder block on the SoC without a vector unit (the host runs
their layer norms, softmax, transposes and activations between device segments: the plan before the unit)
and with it (one device segment), in one run: device cycles, the vector unit's share, host transfers, and
the performance model's cycles beside the measured ones.
"""

from __future__ import annotations

import numpy as np
from dx1_driver import Device, regs

from .perfmodel import COSTS
from .runtime.commands import CommandStream
from .spec import VECTOR_OPS, Opcode, VectorOp, unpack_command

__all__ = ["ROWS", "COLS", "VOPS", "BLOCK_DEVICES", "vector_command", "vector_bench", "block_bench", "print_vector",
           "print_blocks"]

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


#: The devices of the block comparison: the SoC without a vector unit (before), then with it.
BLOCK_DEVICES = ("sim:vector=0", "sim")


def block_bench(devices: tuple[str, ...] = BLOCK_DEVICES) -> dict:
    """One forward pass of the encoder and the decoder block per device: the plan's shape, device cycles, the
    vector unit's busy cycles, the performance model's cycles and whether every on-device value was exact."""
    from .workloads.decoder import run_decoder
    from .workloads.encoder import run_encoder

    blocks = {}
    for name, run in (("encoder", run_encoder), ("decoder", run_decoder)):
        result = run(list(devices), progress=lambda text: print(f"  {text} ...", flush=True))
        blocks[name] = {"float_error": result.float_error, "int_error": result.int_error, "devices": {
            device: {"device_segments": st.device_segments, "host_ops": st.host_ops, "transfers": st.transfers,
                     "commands": st.commands, "cycles": st.cycles, "vector_cycles": st.vector_cycles,
                     "vector_share": st.vector_cycles / st.cycles if st.cycles else 0.0,
                     "predicted_cycles": st.predicted_cycles,
                     "model_error": (st.predicted_cycles - st.cycles) / st.cycles if st.cycles else 0.0,
                     "exact": not result.mismatches[device]}
            for device, st in result.stats.items()}}
    return {"devices": list(devices), "blocks": blocks}


def print_blocks(report: dict) -> None:
    print("\nOne forward pass of each block, before the vector unit and with it (cycles: PERF CYCLES over the device "
          "segments; predicted: the performance model):")
    print(f"  {'block':8s} {'device':14s} {'segments':>8} {'host ops':>8} {'transfers':>9} {'cycles':>8} "
          f"{'vector':>7} {'predicted':>9} {'error':>7}  exact")
    for block, r in report["blocks"].items():
        for device, d in r["devices"].items():
            print(f"  {block:8s} {device:14s} {d['device_segments']:>8} {d['host_ops']:>8} {d['transfers']:>9} "
                  f"{d['cycles']:>8} {d['vector_share']:>7.1%} {d['predicted_cycles']:>9.0f} "
                  f"{d['model_error']:>+7.1%}  {d['exact']}")
        print(f"  {block:8s} against the float block: {r['float_error']:.2%} relative L2")
