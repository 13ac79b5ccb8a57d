"""The ``parallel`` section of ``dx1 bench``: tensor, pipeline and data parallelism against one chip.

* Tensor parallelism on the encoder block at d_model 128 (sequence 64, 4 heads, MLP 512): TP = 1, 2, 4,
  sequence-parallel and plain Megatron-LM; device cycles per forward on the critical path, the speedup over
  the one-chip graph, and bit identity with it.
* Pipeline parallelism on 4 such blocks (sequence 32) with 8 micro-batches, p = 2 and 4 stages, 1F1B and
  GPipe: device cycles per micro-batch (the rebuilt makespan over m), the bubble beside (p-1)/(m+p-1), the
  throughput against the ideal p-fold one, and the stage imbalance; against one chip running the layers one
  at a time (the four layers' weights do not fit one chip's device memory together).
* Tensor and pipeline parallelism together: the same 4 layers in 2 stages, each stage a TP = 2 group of its
  own (2 boards of 2 chips, or 4 devices), 8 micro-batches, 1F1B and GPipe; the same measures as PP's, the
  throughput against the ideal 4-fold one.
* Data parallelism: 12 requests of the block over 1, 2 and 4 replicas: device cycles per request (the
  busiest replica's total over the requests) and the speedup.

Every group is N devices of the device string given (default ``model``, host-staged collectives); a device
string with ``{n}`` in it names a board of N chips instead (``model:chips={n}``: the collectives run over its
chip link and their SEND/WAIT cycles count), and one chip is the string at ``n = 1``.
"""

from __future__ import annotations

import functools
import time

import numpy as np
from dx1_driver import Device

from .collectives import DeviceGroup
from .parallel.data import DataParallel, Request
from .parallel.hybrid import TensorPipeline
from .parallel.pipeline import PipelineParallel, balanced_stages, bubble_formula
from .parallel.problems import block, stack
from .parallel.tensor import shard_block
from .parallel.tensor_run import TensorParallel
from .runtime.graph import GraphSession
from .workloads.encoder import BlockSize

__all__ = ["TP_SIZE", "PP_SIZE", "MODES", "parallel_bench", "print_parallel", "correct"]

#: The tensor-parallel block (d_model 128), and the pipeline's layers (the same widths, a shorter sequence).
TP_SIZE = BlockSize(64, 128, 4, 512)
PP_SIZE = BlockSize(32, 128, 4, 512)
PP_LAYERS, MICRO, REQUESTS = 4, 8, 12
#: Seconds a pipeline stage's device may go without a completion: a board of simulated chips shares one
#: simulator, so on a loaded host a stage's layer can take several seconds of wall time between completions.
DEVICE_TIMEOUT = 60.0


def _group(device: str, n: int) -> DeviceGroup:
    return DeviceGroup.open(device.format(n=n) if "{n}" in device else [device] * n)


def _one(device: str) -> str:
    """One chip of ``device``: the string at ``n = 1`` (a simulated board of one chip is plain ``sim``)."""
    if "{n}" not in device:
        return device
    name = device.format(n=1)
    if not name.startswith("sim:"):
        return name
    items = [item for item in name[len("sim:"):].split(",") if item != "chips=1"]
    return "sim:" + ",".join(items) if items else "sim"


def _tensor(device: str, size: BlockSize) -> list[dict]:
    p = block("encoder", size)
    dev = Device.open(_one(device))
    try:
        with GraphSession(dev, p.quant.graph) as session:
            session.run({"x": p.x})
            want, one = session.run({"x": p.x})
    finally:
        dev.close()
    rows = [{"mode": "tp", "tp": 1, "pp": 1, "dp": 1, "variant": "one chip", "cycles": one.cycles,
             "speedup": 1.0, "identical": True, "collectives": 0, "collective_seconds": 0.0}]
    for sp in (True, False):
        for tp in (2, 4):
            graphs = [shard_block(p.quant, size, tp, r, sequence_parallel=sp) for r in range(tp)]
            with _group(device, tp) as group, TensorParallel(group, graphs) as run:
                run.run({"x": p.x})
                outs, stats = run.run({"x": p.x})
            rows.append({"mode": "tp", "tp": tp, "pp": 1, "dp": 1,
                         "variant": "sequence-parallel" if sp else "plain (all-reduce)", "cycles": stats.cycles,
                         "speedup": one.cycles / stats.cycles,
                         "identical": all(np.array_equal(o["out"], want["out"]) for o in outs),
                         "collectives": stats.collectives, "collective_seconds": stats.collective_seconds,
                         "collective_cycles": stats.collective_cycles,
                         "imbalance": stats.imbalance})
    return rows


def _one_chip_stack(device: str, graphs: list, xs: list[np.ndarray]) -> tuple[list[np.ndarray], float]:
    """Every micro-batch through every layer on one chip, a layer's session at a time (the stack's weights do not
    fit one chip at once): the outputs and the device cycles, summed."""
    dev = Device.open(device)
    cycles = 0
    try:
        for graph in graphs:
            with GraphSession(dev, graph) as session:
                nxt = []
                for x in xs:
                    out, stats = session.run({"x": x})
                    nxt.append(out["out"])
                    cycles += stats.cycles
            xs = nxt
    finally:
        dev.close()
    return xs, cycles


@functools.cache
def _pipeline_problem(device: str) -> tuple[list, list[np.ndarray], list[np.ndarray], float]:
    """The pipeline's layers, micro-batches, one chip's outputs and its device cycles per micro-batch."""
    problems = stack("encoder", PP_SIZE, PP_LAYERS)
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((PP_SIZE.seq, PP_SIZE.model)).astype(np.float32) for _ in range(MICRO)]
    want, one = _one_chip_stack(_one(device), [p.quant.graph for p in problems], xs)
    return problems, xs, want, one / MICRO


def _pipeline(device: str) -> list[dict]:
    problems, xs, want, base = _pipeline_problem(device)
    layers = [p.quant.graph for p in problems]
    rows = [{"mode": "pp", "tp": 1, "pp": 1, "dp": 1, "variant": "one chip, layer by layer", "cycles": base,
             "speedup": 1.0, "identical": True}]
    for pp in (2, 4):
        parts = balanced_stages([1.0] * PP_LAYERS, pp)
        for schedule in ("1f1b", "gpipe"):
            with _group(device, pp) as group, PipelineParallel(
                    group, [[layers[i] for i in r] for r in parts], schedule=schedule,
                    device_timeout=DEVICE_TIMEOUT) as run:
                outs, stats = run.run(xs)
            per_micro = stats.timeline.makespan / MICRO
            rows.append({"mode": "pp", "tp": 1, "pp": pp, "dp": 1, "variant": schedule, "cycles": per_micro,
                         "speedup": base / per_micro,
                         "identical": all(np.array_equal(a, b) for a, b in zip(outs, want, strict=True)),
                         "bubble": stats.timeline.bubble, "formula": bubble_formula(pp, MICRO),
                         "efficiency": (base / per_micro) / pp, "imbalance": stats.timeline.imbalance,
                         "peak_in_flight": stats.peak_in_flight, "wall_seconds": stats.wall_seconds})
    return rows


def _tensor_pipeline(device: str) -> list[dict]:
    """TP = 2 inside each of 2 pipeline stages (4 chips: two boards of two, or four devices)."""
    problems, xs, want, base = _pipeline_problem(device)
    tp, pp = 2, 2
    parts = balanced_stages([1.0] * PP_LAYERS, pp)
    stages = [[[shard_block(problems[i].quant, PP_SIZE, tp, r) for r in range(tp)] for i in part] for part in parts]
    rows = []
    for schedule in ("1f1b", "gpipe"):
        groups = []
        try:
            for _ in range(pp):
                groups.append(_group(device, tp))
            with TensorPipeline(groups, stages, schedule=schedule, device_timeout=DEVICE_TIMEOUT) as run:
                outs, stats = run.run(xs)
        finally:
            for group in groups:
                group.close()
        per_micro = stats.timeline.makespan / MICRO
        rows.append({"mode": "tp-pp", "tp": tp, "pp": pp, "dp": 1, "variant": schedule, "cycles": per_micro,
                     "speedup": base / per_micro,
                     "identical": all(np.array_equal(a, b) for a, b in zip(outs, want, strict=True)),
                     "bubble": stats.timeline.bubble, "formula": bubble_formula(pp, MICRO),
                     "efficiency": (base / per_micro) / (tp * pp), "imbalance": stats.timeline.imbalance,
                     "peak_in_flight": stats.peak_in_flight, "wall_seconds": stats.wall_seconds})
    return rows


def _data(device: str, size: BlockSize) -> list[dict]:
    p = block("encoder", size)
    rng = np.random.default_rng(9)
    xs = [rng.standard_normal((size.seq, size.model)).astype(np.float32) for _ in range(REQUESTS)]
    rows, want, base = [], None, None
    for dp in (1, 2, 4):
        devs = [Device.open(_one(device)) for _ in range(dp)]
        try:
            with DataParallel(devs, {"encoder": p.quant.graph}) as run:
                results, report = run.serve([Request(i, "encoder", {"x": x}) for i, x in enumerate(xs)])
        finally:
            for d in devs:
                d.close()
        outs = [results[i]["out"] for i in range(REQUESTS)]
        want = outs if want is None else want
        per_request = max(report.cycles) / REQUESTS
        base = per_request if base is None else base
        rows.append({"mode": "dp", "tp": 1, "pp": 1, "dp": dp, "variant": "by predicted cycles",
                     "cycles": per_request, "speedup": base / per_request,
                     "identical": all(np.array_equal(a, b) for a, b in zip(outs, want, strict=True)),
                     "per_replica": report.per_replica, "wall_seconds": report.wall_seconds})
    return rows


#: The section's parts, in the order it runs them.
MODES = {"tp": _tensor, "pp": _pipeline, "tp-pp": _tensor_pipeline, "dp": _data}
#: The parts that run the TP block (``parallel_bench``'s ``tp_block``); the others run PP's layers.
ON_TP_BLOCK = ("tp", "dp")


def parallel_bench(device: str = "model", modes: tuple[str, ...] = tuple(MODES), *,
                   tp_block: BlockSize = TP_SIZE) -> dict:
    """The section's figures on groups of ``device`` (see the module docstring), of the parts ``modes``; TP and DP
    on the encoder block ``tp_block`` (PP's layers are :data:`PP_SIZE`'s)."""
    started = time.perf_counter()
    rows = [row for mode in modes
            for row in (MODES[mode](device, tp_block) if mode in ON_TP_BLOCK else MODES[mode](device))]
    return {"device": device, "tp_block": str(tp_block), "pp_layers": f"{PP_LAYERS} x encoder ({PP_SIZE})",
            "micro_batches": MICRO, "requests": REQUESTS, "rows": rows,
            "seconds": time.perf_counter() - started}


def correct(report: dict) -> bool:
    """Every row bit-identical to one chip."""
    return all(r["identical"] for r in report["rows"])


def print_parallel(report: dict) -> None:
    print(f"\nparallel on {report['device']}: TP on one encoder block ({report['tp_block']}); PP on "
          f"{report['pp_layers']}, {report['micro_batches']} micro-batches; DP on {report['requests']} requests of "
          f"the TP block")
    print(f"{'TP':>3} {'PP':>3} {'DP':>3} {'variant':<24} {'cycles/fwd':>11} {'speedup':>8} {'bubble':>7} "
          f"{'formula':>8} {'of ideal':>8} {'imbal.':>7}  bit-identical")
    for r in report["rows"]:
        bubble = f"{r['bubble']:7.1%} {r['formula']:8.1%}" if "bubble" in r else f"{'':7} {'':8}"
        ideal = f"{r['efficiency']:8.1%}" if "efficiency" in r else f"{r['speedup'] / (r['tp'] * r['dp']):8.1%}"
        imbalance = f"{r['imbalance']:7.1%}" if "imbalance" in r else f"{'':7}"
        print(f"{r['tp']:>3} {r['pp']:>3} {r['dp']:>3} {r['variant']:<24} {r['cycles']:>11.0f} "
              f"{r['speedup']:>7.2f}x {bubble} {ideal} {imbalance}  {'yes' if r['identical'] else 'NO'}")
    link = [r for r in report["rows"] if r.get("collective_cycles")]
    if link:
        print("  collectives' cycles in TP's: " + ", ".join(f"TP {r['tp']} {r['variant']} {r['collective_cycles']}"
                                                          for r in link))
    print("  cycles/fwd: TP the critical path's device cycles of one forward (collectives' cycles included); "
          "PP the rebuilt makespan over the micro-batches; DP the busiest replica's cycles over the requests")
