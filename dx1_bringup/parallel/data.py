"""Data parallelism: replicas of the models on separate devices behind one scheduler.

Each replica is an opened device with a graph session per model (weights resident) and a worker thread that
runs its queue in order.  The scheduler sends each request to the replica that would finish it first: the
performance model's predicted cycles of the requests already queued there plus this one's, on that replica
(replicas may differ: ``model`` with two tiles against ``model:tiles=1``), ties to the shorter queue.

A replica whose run raises (a device error, the driver's timeout) or that holds a request past its deadline
is fenced: it takes no more requests, and every request it held (queued or running) goes to the others.  A
result counts only from the replica the request is assigned to while that replica is not fenced, so every
request is answered exactly once, by a healthy replica, with the result one chip gives.  A fenced replica's
thread is left to its device's own deadline (a daemon, as the collectives' ranks are).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from dx1_driver import Device

from ..perfmodel import predict
from ..runtime.graph import Graph, GraphSession
from ..spec import TileConfig

__all__ = ["Request", "Replica", "DataParallel", "ServeReport", "NoReplicaLeft"]


class NoReplicaLeft(RuntimeError):
    """Every replica has been fenced: the requests still open cannot be served."""


@dataclass(frozen=True)
class Request:
    """One forward pass of model ``model`` on ``inputs``; ``id`` names it in the results."""

    id: int
    model: str
    inputs: dict[str, np.ndarray]


def _predicted(session: GraphSession) -> float:
    caps = session.device.caps
    tile = TileConfig(caps.array, caps.spm_rows, caps.acc_rows, caps.vector)
    return sum(predict(seg.commands, tile, banks=caps.mem_banks).total for seg in session.segments if seg.device)


class Replica:
    """A device with a session per model, its queue and worker thread."""

    def __init__(self, index: int, dev: Device, graphs: dict[str, Graph], *, timeout: float):
        self.index, self.dev = index, dev
        self.sessions = {name: GraphSession(dev, g, timeout=timeout) for name, g in graphs.items()}
        #: Per model, the performance model's cycles of one forward pass here.
        self.cost = {name: _predicted(s) for name, s in self.sessions.items()}
        self.fenced: str | None = None
        self.pending: dict[int, float] = {}
        self.served = 0
        self.jobs: queue.SimpleQueue[Request | None] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None

    @property
    def backlog(self) -> float:
        """Predicted cycles of the requests queued or running here."""
        return sum(self.pending.values())


@dataclass
class ServeReport:
    """Who served what: per request its replica, per replica the count, the fenced replicas and why."""

    served_by: dict[int, int] = field(default_factory=dict)
    per_replica: list[int] = field(default_factory=list)
    #: Per replica, the device CYCLES of the requests it answered, summed.
    cycles: list[int] = field(default_factory=list)
    fenced: dict[int, str] = field(default_factory=dict)
    #: Requests sent to another replica after theirs was fenced.
    moved: int = 0
    #: Results that arrived from a fenced replica and were dropped.
    dropped: int = 0
    wall_seconds: float = 0.0


class DataParallel:
    """Replicas of ``graphs`` on ``devs`` (opened devices, one replica each) behind the scheduler.

    Parameters
    ----------
    request_timeout:
        Seconds a replica may hold one request (queued time excluded) before it is fenced.
    timeout:
        The sessions' device timeout (seconds without progress before the driver's ``DeviceTimeout``).
    """

    def __init__(self, devs: Sequence[Device], graphs: dict[str, Graph], *, request_timeout: float = 10.0,
                 timeout: float = 5.0):
        if not devs:
            raise ValueError("data parallelism needs at least one replica device")
        if not graphs:
            raise ValueError("data parallelism needs at least one model graph")
        self.request_timeout = request_timeout
        self.replicas: list[Replica] = []
        try:
            for i, dev in enumerate(devs):
                self.replicas.append(Replica(i, dev, graphs, timeout=timeout))
        except BaseException:
            self.close()
            raise
        self._done: queue.SimpleQueue[tuple[int, int, object, BaseException | None]] = queue.SimpleQueue()
        self._started: dict[tuple[int, int], float] = {}
        self._lock = threading.Lock()
        for r in self.replicas:
            r.thread = threading.Thread(target=self._work, args=(r,), name=f"dx1-replica{r.index}", daemon=True)
            r.thread.start()

    def _work(self, r: Replica) -> None:
        while (req := r.jobs.get()) is not None:
            if r.fenced is not None:
                continue
            with self._lock:
                self._started[(req.id, r.index)] = time.monotonic()
            try:
                out, stats = r.sessions[req.model].run(req.inputs)
                self._done.put((req.id, r.index, (out, stats.cycles), None))
            except Exception as e:  # handed to the scheduler, which fences the replica
                self._done.put((req.id, r.index, None, e))

    def _choose(self, req: Request) -> Replica:
        healthy = [r for r in self.replicas if r.fenced is None]
        if not healthy:
            raise NoReplicaLeft("every replica is fenced: " + "; ".join(
                f"replica {r.index} ({r.dev.name}): {r.fenced}" for r in self.replicas))
        return min(healthy, key=lambda r: (r.backlog + r.cost[req.model], len(r.pending), r.index))

    def _assign(self, req: Request, assigned: dict[int, int]) -> None:
        r = self._choose(req)
        r.pending[req.id] = r.cost[req.model]
        assigned[req.id] = r.index
        r.jobs.put(req)

    def _fence(self, r: Replica, why: str, requests: dict[int, Request], assigned: dict[int, int],
               report: ServeReport) -> None:
        r.fenced = why
        report.fenced[r.index] = why
        held = list(r.pending)
        r.pending.clear()
        for rid in held:
            report.moved += 1
            self._assign(requests[rid], assigned)

    def serve(self, requests: Sequence[Request]) -> tuple[dict[int, dict[str, np.ndarray]], ServeReport]:
        """Every request answered exactly once (by id), and the :class:`ServeReport`.

        Raises
        ------
        NoReplicaLeft
            Every replica was fenced before the last request was answered.
        ValueError
            A request names a model the replicas do not hold, or two requests share an id.
        """
        by_id = {req.id: req for req in requests}
        if len(by_id) != len(requests):
            raise ValueError("every request needs an id of its own")
        unknown = sorted({req.model for req in requests} - set(self.replicas[0].sessions))
        if unknown:
            raise ValueError(f"requests name models the replicas do not hold: {unknown}")
        started = time.perf_counter()
        report = ServeReport(per_replica=[0] * len(self.replicas), cycles=[0] * len(self.replicas))
        assigned: dict[int, int] = {}
        results: dict[int, dict[str, np.ndarray]] = {}
        for req in requests:
            self._assign(req, assigned)
        while len(results) < len(by_id):
            try:
                rid, index, out, error = self._done.get(timeout=0.05)
            except queue.Empty:
                self._check_deadlines(by_id, assigned, results, report)
                continue
            r = self.replicas[index]
            if r.fenced is not None or assigned.get(rid) != index or rid in results:
                report.dropped += 1
                continue
            if error is not None:
                self._fence(r, f"{type(error).__name__}: {error}", by_id, assigned, report)
                continue
            r.pending.pop(rid, None)
            results[rid], cycles = out
            report.served_by[rid] = index
            report.per_replica[index] += 1
            report.cycles[index] += cycles
        report.wall_seconds = time.perf_counter() - started
        return results, report

    def _check_deadlines(self, by_id: dict[int, Request], assigned: dict[int, int],
                         results: dict[int, dict[str, np.ndarray]], report: ServeReport) -> None:
        now = time.monotonic()
        for rid, index in list(assigned.items()):
            if rid in results:
                continue
            r = self.replicas[index]
            with self._lock:
                began = self._started.get((rid, index))
            if r.fenced is None and began is not None and now - began > self.request_timeout:
                self._fence(r, f"request {rid} took more than {self.request_timeout} s", by_id, assigned, report)

    def close(self) -> None:
        """Stop the workers and close the sessions of the replicas that are not fenced (a fenced replica's
        device may be stuck; its sessions go with the device)."""
        for r in self.replicas:
            r.jobs.put(None)
            if r.fenced is None:
                for s in r.sessions.values():
                    s.close()

    def __enter__(self) -> DataParallel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
