"""Bring-up from start to end: :func:`run_bringup` runs the steps in order and stops at the first failure."""

from __future__ import annotations

import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from dx1_driver import (
    CommandError,
    Device,
    DeviceTimeout,
    DriverError,
    QueueError,
    Transport,
    TransportError,
    open_transport,
)

from ..replay import Recorder
from ..spec import BUS_BYTES
from .diagnosis import _HINTS, _exception_diagnosis
from .report import STEPS, BringupReport, Check, StepResult
from .steps import _Run, _StepFailed

__all__ = ["run_bringup"]


def run_bringup(device: str | Transport | Device, *, seed: int | None = None, mem_bytes: int | None = None,
                timeout: float = 10.0, out: TextIO | None = None, quiet: bool = False,
                capture: str | Path | None = None) -> BringupReport:
    """Bring a device up step by step (see :mod:`dx1_bringup.bringup`), stopping at the first failure.

    Parameters
    ----------
    device:
        A device string (:func:`~dx1_driver.open_transport`; opened and closed here), an open
        transport, or an open device (reset here; its queues become unusable).
    seed:
        Seed of the random memory pattern and of the DMA and GEMM data; a random one
        (reported) when ``None``.
    mem_bytes:
        Bytes of device memory, from address 0, for the address-in-address and random
        tests (a multiple of 8); ``None``: the whole memory.  The data bus and address
        line tests always run (one word at each power of two).
    timeout:
        Seconds a queue may go without progress.
    out:
        Where the step lines go (``None``: standard output).
    quiet:
        Print nothing.
    capture:
        Write what the steps from the DMA loopback on do to the device to this capture file (a
        :class:`~dx1_bringup.replay.Recorder` wraps the device there: the memory test before writes the
        whole memory through the host, which a replay need not repeat); ``None``: no capture.

    Returns
    -------
    BringupReport
        Every step, those after a failure as ``"not run"``.

    Raises
    ------
    ValueError
        A bad argument or device string.
    """
    if mem_bytes is not None and (isinstance(mem_bytes, bool) or not isinstance(mem_bytes, int) or mem_bytes < BUS_BYTES
                                  or mem_bytes % BUS_BYTES):
        raise ValueError(f"mem_bytes must be a positive multiple of {BUS_BYTES}, not {mem_bytes!r}")
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 32)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, not {seed!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, not {timeout!r}")

    def say(text: str, end: str = "\n") -> None:
        if not quiet:
            print(text, end=end, file=out or sys.stdout, flush=True)

    steps = [StepResult(name, title) for name, title in STEPS]
    dev = device if isinstance(device, Device) else None
    transport = dev.transport if dev else device if isinstance(device, Transport) else None
    name = device if isinstance(device, str) else type(transport).__name__
    report = BringupReport(name, "", datetime.now(UTC).isoformat(timespec="seconds"), seed, mem_bytes,
                           steps)
    say(f"dx1 bringup on {name} (seed {seed}, memory test over "
        f"{'the whole memory' if mem_bytes is None else f'{mem_bytes} bytes'})")
    start = time.monotonic()
    owned = isinstance(device, str)
    run = None
    try:
        for index, step in enumerate(steps):
            say(f"  {index + 1} {step.title:<30}", end="")
            t0 = time.monotonic()
            step.status = "fail"
            try:
                if transport is None:
                    try:
                        transport = open_transport(device)
                    except TransportError as e:
                        step.checks.append(Check(f"open {device}", "a working link", str(e), False))
                        raise _StepFailed(_HINTS["link"]) from None
                if run is None:
                    run = _Run(transport, dev, seed, mem_bytes, timeout)
                report.transport = type(transport).__name__
                if capture is not None and step.name == "dma" and not isinstance(run.device, Recorder):
                    run.device = Recorder(run.dev, capture, note=f"dx1 bringup on {name} (seed {seed})")
                run.step = step
                step.summary = getattr(run, {"perf": "perf_counters"}.get(step.name, step.name))()
                step.status = "pass"
            except _StepFailed as e:
                step.diagnosis = e.diagnosis
            except (TransportError, DeviceTimeout, CommandError, QueueError, DriverError) as e:
                step.checks.append(Check(f"{type(e).__name__} during {step.title}", "no error", str(e), False))
                step.diagnosis = _exception_diagnosis(step.name, e)
            step.seconds = time.monotonic() - t0
            if step.status == "pass":
                say(f"PASS {step.seconds:8.3f} s  {step.summary}")
                continue
            say(f"FAIL {step.seconds:8.3f} s")
            bad = next(c for c in reversed(step.checks) if not c.ok)
            say(f"      check:    {bad.what}")
            say(f"      expected: {bad.expected}")
            say(f"      got:      {bad.got}")
            say(f"      probably: {step.diagnosis}")
            break
    finally:
        if run is not None and isinstance(run.device, Recorder):
            run.device.writer.close()
        if owned and transport is not None:
            (run.device if run and run.device else transport).close()
    report.seconds = time.monotonic() - start
    failed = report.failed_step
    say(f"dx1 bringup: {'PASS' if failed is None else f'FAIL at step {failed.name}'} in {report.seconds:.2f} s")
    return report

