"""The shrinker: delta debugging (ddmin) of a capture's commands and uploads while two devices still differ.

A *candidate* keeps some of the capture's commands and uploads (its *units*) and every DMA window
setting; a submit keeps its chosen commands (a doorbell with none left goes too), every wait waits for
everything outstanding on its queue (the recorded counts no longer hold), downloads go, and WAITs left
without their SIGNAL become FENCEs (:mod:`dx1_bringup.replay.diff`).  A candidate *still fails* when
its effect (:func:`~dx1_bringup.replay.diff.run_prefix` over the memory it touches) differs between the
two devices, and a replay stopped on neither (or on one, when the capture's own failure is one that
stops).  :func:`ddmin` is Zeller's minimising delta debugging: the result fails and removing any one
of its units (at the finest granularity it reached) makes it pass, unless the test budget ran out.

After ddmin, :func:`trim_uploads` cuts each kept upload down to the memory the kept commands can reach,
kept if the candidate still fails.  :func:`shrink` writes the result as a standalone capture: the memory it
touches and every tile's local memories zeroed, the candidate's events, and the effect read back
(downloads of that memory and of the local memories); it is recorded on the first device, so replaying it
on the second reports the difference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dx1_driver import Device

from ..spec import ceil_div
from .capture import Capture, Doorbell, Download, Event, Submit, Upload, Wait
from .diff import TIMEOUT, effect_difference, effect_events, release_waits, run_prefix, tile_config, touched_regions
from .replay import record

__all__ = ["Unit", "units_of", "candidate_events", "trim_uploads", "ddmin", "ShrinkResult", "shrink"]

#: A unit: ``(event, command)``, a command of a submit event; ``(event, -1)``, an upload event.
Unit = tuple[int, int]


def units_of(events: Sequence[Event]) -> list[Unit]:
    """Every command and upload of ``events``, in order."""
    units: list[Unit] = []
    for e, event in enumerate(events):
        if isinstance(event, Upload):
            units.append((e, -1))
        elif isinstance(event, Submit):
            units += [(e, c) for c in range(len(event.commands))]
    return units


def candidate_events(events: Sequence[Event], keep: Sequence[Unit], semaphores: int, tiles: int) -> list[Event]:
    """``events`` with only the units ``keep`` (see the module docstring), ending with a wait on every queue."""
    chosen = set(keep)
    out: list[Event] = []
    pending: dict[int, bool] = {}
    for e, event in enumerate(events):
        if isinstance(event, Upload):
            if (e, -1) in chosen:
                out.append(event)
        elif isinstance(event, Submit):
            commands = tuple(cmd for c, cmd in enumerate(event.commands) if (e, c) in chosen)
            if commands:
                out.append(Submit(event.queue, commands))
                pending[event.queue] = True
        elif isinstance(event, Doorbell):
            if pending.pop(event.queue, False):
                out.append(event)
        elif isinstance(event, Wait):
            out.append(Wait(event.queue, None))
        elif not isinstance(event, Download):
            out.append(event)
    out += [Doorbell(q) for q, waiting in sorted(pending.items()) if waiting]
    return release_waits(out, semaphores) + [Wait(q, None) for q in range(tiles)]


def trim_uploads(capture: Capture, events: Sequence[Event], keep: Sequence[Unit], semaphores: int,
                 tiles: int) -> tuple[list[Event], list[Unit]]:
    """``events`` with each upload of ``keep`` cut down to the device memory the kept commands may read or
    write (an upload they touch nowhere goes), and ``keep`` numbered for the new events."""
    chosen = set(keep)
    used = touched_regions(capture, [e for e in candidate_events(events, keep, semaphores, tiles)
                                     if not isinstance(e, Upload)])
    out: list[Event] = []
    kept: list[Unit] = []
    for e, event in enumerate(events):
        if isinstance(event, Upload) and (e, -1) in chosen:
            end = event.addr + len(event.data)
            for lo, hi in used:
                a, b = max(lo, event.addr), min(hi, end)
                if a < b:
                    kept.append((len(out), -1))
                    out.append(Upload(a, event.data[a - event.addr:b - event.addr]))
            continue
        if isinstance(event, Submit):
            kept += [(len(out), c) for c in range(len(event.commands)) if (e, c) in chosen]
        out.append(event)
    return out, kept


def ddmin(units: list[Unit], fails: Callable[[list[Unit]], bool], budget: int) -> tuple[list[Unit], int]:
    """The smallest failing subset of ``units`` ddmin reaches within ``budget`` tests, and the tests it ran.

    ``fails(units)`` must hold for the whole list (not tested again here).
    """
    tests = 0
    n = 2
    while len(units) >= 2 and tests < budget:
        size = ceil_div(len(units), n)
        parts = [units[i:i + size] for i in range(0, len(units), size)]
        reduced = False
        for i, part in enumerate(parts):
            if tests >= budget:
                break
            tests += 1
            if fails(part):
                units, n, reduced = part, 2, True
                break
            if len(parts) == 2 or tests >= budget:
                continue
            rest = [u for j, p in enumerate(parts) if j != i for u in p]
            tests += 1
            if fails(rest):
                units, n, reduced = rest, max(n - 1, 2), True
                break
        if not reduced:
            if n >= len(units):
                break
            n = min(2 * n, len(units))
    return units, tests


@dataclass
class ShrinkResult:
    """What :func:`shrink` did: the capture written, sizes before and after (``upload_bytes``: of the uploads
    kept), tests run."""

    capture: Capture
    commands_before: int
    uploads_before: int
    commands_after: int
    uploads_after: int
    tests: int
    difference: str
    upload_bytes: int


def shrink(capture: Capture, devices: Sequence[Device], names: Sequence[str] = ("A", "B"), *, budget: int = 400,
           timeout: float = TIMEOUT, progress: Callable[[str], None] | None = None) -> ShrinkResult:
    """Shrink ``capture`` (see the module docstring) while it still differs between ``devices``.

    Raises
    ------
    ValueError
        Not two devices, or the capture's effects do not differ between them (nothing to shrink).
    CaptureError
        A device's configuration differs from the capture's.
    """
    if len(devices) != 2:
        raise ValueError(f"the shrinker compares two devices, not {len(devices)}")
    caps = devices[0].caps
    events = list(capture.events)

    def difference(keep: list[Unit]) -> tuple[str | None, bool]:
        chosen = candidate_events(events, keep, caps.semaphores, caps.tiles)
        regions = touched_regions(capture, chosen)
        effects = [run_prefix(capture, dev, chosen, regions, timeout=timeout) for dev in devices]
        stuck = any(e.stuck is not None for e in effects)
        return effect_difference(*effects, (names[0], names[1]), tile=tile_config(caps)), stuck

    everything = units_of(events)
    found, stops = difference(everything)
    if found is None:
        raise ValueError(f"the capture's effects do not differ between {names[0]} and {names[1]}: nothing to shrink")

    def fails(keep: list[Unit]) -> bool:
        what, stuck = difference(keep)
        ok = what is not None and stuck == stops
        if progress is not None:
            progress(f"{len(keep)} units: {'still differs' if ok else 'passes'}")
        return ok

    kept, tests = ddmin(everything, fails, budget)
    # Then the uploads: only the bytes the kept commands can reach, if that still differs.
    whole = events
    events, trimmed = trim_uploads(capture, whole, kept, caps.semaphores, caps.tiles)
    tests += 1
    if fails(trimmed):
        kept = trimmed
    else:
        events = whole
    chosen = candidate_events(events, kept, caps.semaphores, caps.tiles)
    regions = touched_regions(capture, chosen)
    devices[0].reset()
    shrunk = record(effect_events(caps, chosen, regions), devices[0], capture.ring_log2, timeout=timeout,
                    note=f"shrunk from {capture.commands} commands ({capture.note}); differs between "
                         f"{names[0]} and {names[1]}")
    final, _stuck = difference(kept)
    return ShrinkResult(shrunk, len([u for u in everything if u[1] >= 0]), len([u for u in everything if u[1] < 0]),
                        len([u for u in kept if u[1] >= 0]), len([u for u in kept if u[1] < 0]), tests,
                        final or found, sum(len(events[e].data) for e, c in kept if c < 0))
