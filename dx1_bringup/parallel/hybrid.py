"""Tensor and pipeline parallelism together: each pipeline stage a tensor-parallel group of its own.

As Megatron-LM places a model on nodes of GPUs (tensor parallelism inside a node, where the links are fast;
pipeline stages across nodes), :class:`TensorPipeline` runs stage ``s`` on its own
:class:`~..collectives.DeviceGroup` (a board of chips, ``model:chips=2``: its collectives over the board's link;
or separate devices, host-staged), every layer of the stage a :class:`~.tensor_run.TensorParallel` over that
group.  A sequence-parallel block leaves its whole output on every rank, so stage ``s + 1`` takes stage ``s``'s
output through the host (rank 0's copy) as the input of all its ranks.

The stages run on their own threads, micro-batches flowing through them in order on the ``gpipe`` or ``1f1b``
schedule (:mod:`.pipeline`); each (stage, micro-batch) pass costs its layers' critical-path device cycles (the
tensor-parallel groups' own, collectives included) and the bubble is rebuilt from them as for a plain pipeline.
"""

from __future__ import annotations

import queue
import threading
import time

import numpy as np

from ..collectives import DeviceGroup
from ..runtime.graph import Graph
from .pipeline import SCHEDULES, PipelineStats, replay
from .tensor_run import TensorParallel

__all__ = ["TensorPipeline"]

#: Seconds between a waiting stage's looks at whether another stage has failed.
_POLL = 0.05


class _Stopped(Exception):
    """A stage stopped waiting because another one failed (that one's error is the run's)."""


class TensorPipeline:
    """Stage ``s`` runs ``stages[s]`` (its layers, each a graph per rank of ``groups[s]``) on ``groups[s]``.

    Every layer maps the float32 input ``x`` to an output ``out`` of the same shape, whole on every rank.
    ``timeout`` bounds every wait of a stage for the one before it (and of stage 0 for a place in the 1F1B
    window); ``device_timeout`` is the sessions' device timeout.

    Raises
    ------
    ValueError
        Stages and groups differ in number, a stage is empty, a layer has not a graph for each rank of its
        stage's group, or the schedule is unknown.
    """

    def __init__(self, groups: list[DeviceGroup], stages: list[list[list[Graph]]], *, schedule: str = "1f1b",
                 timeout: float = 60.0, device_timeout: float = 10.0):
        if len(stages) != len(groups) or not all(stages):
            raise ValueError(f"{len(stages)} stages for {len(groups)} groups: one non-empty stage a group")
        for s, (group, layers) in enumerate(zip(groups, stages, strict=True)):
            if any(len(graphs) != group.size for graphs in layers):
                raise ValueError(f"stage {s}: every layer needs a graph for each of its group's {group.size} ranks")
        if schedule not in SCHEDULES:
            raise ValueError(f"the schedule must be one of {', '.join(SCHEDULES)}, not {schedule!r}")
        self.groups, self.schedule, self.timeout = groups, schedule, timeout
        self.layers: list[list[TensorParallel]] = [[] for _ in stages]
        try:
            for s, (group, layers) in enumerate(zip(groups, stages, strict=True)):
                for graphs in layers:
                    self.layers[s].append(TensorParallel(group, graphs, timeout=device_timeout))
        except BaseException:
            self.close()
            raise

    def run(self, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], PipelineStats]:
        """Every micro-batch of ``inputs`` through every stage: the outputs in order and the :class:`PipelineStats`
        (``cycles[stage, micro]`` the critical-path device cycles of each pass)."""
        p, m = len(self.groups), len(inputs)
        cycles = np.zeros((p, m))
        outputs: list[np.ndarray | None] = [None] * m
        hand: list[queue.Queue] = [queue.Queue() for _ in range(p)]  # hand[s]: micro-batches into stage s
        window = threading.Semaphore(p if self.schedule == "1f1b" else m)
        failed = threading.Event()
        errors: list[BaseException] = []
        flight = {"now": 0, "peak": 0}
        lock = threading.Lock()

        def wait(what: str, get) -> object:
            deadline = time.monotonic() + self.timeout
            while not failed.is_set():
                try:
                    return get(_POLL)
                except queue.Empty:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{what} waited {self.timeout} s") from None
            raise _Stopped

        def admit(timeout: float) -> None:
            if not window.acquire(timeout=timeout):
                raise queue.Empty

        def stage(s: int) -> None:
            try:
                for i in range(m):
                    if s == 0:
                        wait(f"stage 0 to admit micro-batch {i}", admit)
                        with lock:
                            flight["now"] += 1
                            flight["peak"] = max(flight["peak"], flight["now"])
                        x = inputs[i]
                    else:
                        x = wait(f"stage {s} for micro-batch {i}", lambda t: hand[s].get(timeout=t))
                    for layer in self.layers[s]:
                        outs, st = layer.run({"x": np.ascontiguousarray(x, dtype=np.float32)})
                        x = outs[0]["out"]
                        cycles[s, i] += st.cycles
                    if s < p - 1:
                        hand[s + 1].put(x)
                    else:
                        outputs[i] = x
                        with lock:
                            flight["now"] -= 1
                        window.release()
            except BaseException as e:
                errors.append(e)
                failed.set()

        started = time.perf_counter()
        threads = [threading.Thread(target=stage, args=(s,), name=f"dx1-stage{s}", daemon=True) for s in range(p)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
        causes = [e for e in errors if not isinstance(e, _Stopped)]
        if causes:
            raise causes[0]
        return ([o for o in outputs if o is not None],
                PipelineStats(self.schedule, cycles, replay(cycles, self.schedule), flight["peak"], wall))

    def close(self) -> None:
        """Close every layer's sessions."""
        for layers in self.layers:
            for layer in layers:
                layer.close()
        self.layers = [[] for _ in self.layers]

    def __enter__(self) -> TensorPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
