"""What a bring-up run found: each step's checks and outcome, and the whole run as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["REGION_CHECK", "STEPS", "BringupReport", "Check", "StepResult"]

#: The steps, in order: name and title.
STEPS: tuple[tuple[str, str], ...] = (
    ("link", "link check"),
    ("identity", "magic, version, capabilities"),
    ("registers", "register walk"),
    ("memory", "device memory"),
    ("dma", "DMA loopback"),
    ("gemm", "GEMM self-test"),
    ("perf", "perf counters"),
    ("irq", "interrupts"),
)


#: The memory step's check of ``--mem-bytes`` against the device: failing it is a bad argument (exit 2).
REGION_CHECK = "tested region inside device memory"


@dataclass
class Check:
    """One comparison: what was checked, what was expected, what the device gave."""

    what: str
    expected: Any
    got: Any
    ok: bool


@dataclass
class StepResult:
    """One step: ``status`` is ``"pass"``, ``"fail"`` or ``"not run"`` (after an earlier failure)."""

    name: str
    title: str
    status: str = "not run"
    seconds: float = 0.0
    summary: str = ""
    checks: list[Check] = field(default_factory=list)
    diagnosis: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class BringupReport:
    """A whole bring-up run; :meth:`to_json` is what ``--report`` writes."""

    device: str
    transport: str
    started: str
    seed: int
    mem_bytes: int | None
    steps: list[StepResult]
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(s.status == "pass" for s in self.steps)

    @property
    def failed_step(self) -> StepResult | None:
        return next((s for s in self.steps if s.status == "fail"), None)

    def to_json(self) -> dict[str, Any]:
        failed = self.failed_step
        return {"device": self.device, "transport": self.transport, "started": self.started, "seed": self.seed,
                "mem_bytes": self.mem_bytes, "seconds": round(self.seconds, 3), "passed": self.passed,
                "failed_step": failed.name if failed else None, "steps": [asdict(s) for s in self.steps]}

