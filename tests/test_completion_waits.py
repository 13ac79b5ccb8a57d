"""The completion wait's interrupt protocol (``dx1_driver.waiting.CompletionWaits``) against a scripted device:
a completion that lands between the look after a wake and the clear of every cause is found at once.

Found on the ``sim:chips=2`` board: a SEND's and a WAIT's completions close together made a wake whose look
found nothing new, then the wait cleared every cause (dropping the interrupt of the completion that landed
meanwhile) and waited out a whole interrupt-wait budget (20,000 cycles of a 1 KiB all-reduce's 700).
"""

from __future__ import annotations

from dx1_driver.errors import DeviceTimeout
from dx1_driver.waiting import CompletionWaits


class Line:
    """An interrupt line: up while any cause is set; ``wait_irq`` answers at once (the device never runs).  Its
    first wait finds a stale cause up (a completion already collected had set it after a clear)."""

    has_irq_line = True

    def __init__(self) -> None:
        self.causes = 0
        self.waits: list[bool] = []

    def wait_irq(self, timeout: float) -> bool:
        if not self.waits:
            self.causes |= ScriptedQueue.IRQ_COMPLETION
        self.waits.append(bool(self.causes))
        return bool(self.causes)


class ScriptedQueue:
    """A queue whose completions land when the script says: ``land_at_check`` lands one during that ``check``
    call (the STATUS read between a look and the clear)."""

    IRQ_COMPLETION = 1
    tile = 0

    def __init__(self, line: Line, land_at_check: int):
        self.line = line
        self.ring = 0  # completions written and not yet collected
        self.collected = 0
        self.quiet = False
        self.checks = 0
        self.land_at_check = land_at_check

    def land(self) -> None:
        self.ring += 1
        self.line.causes |= self.IRQ_COMPLETION

    @property
    def outstanding(self) -> int:
        return 1

    @property
    def irq_quiet(self) -> bool:
        return self.quiet

    def poll(self) -> int:
        got, self.ring = self.ring, 0
        self.collected += got
        if got:
            self.quiet = False
        return got

    def check(self) -> None:
        self.checks += 1
        if self.checks == self.land_at_check:
            self.land()

    def clear_irq(self, causes: int | None = None) -> None:
        self.line.causes &= ~(0xFF if causes is None else causes)
        self.quiet = True


def test_a_completion_landing_between_the_look_and_the_clear_is_found_without_a_lost_wait():
    line = Line()
    q = ScriptedQueue(line, land_at_check=2)  # check 1: the first look's; check 2: after the wake's empty look
    waits = CompletionWaits(line, lambda: [q])

    def expired() -> DeviceTimeout:
        return DeviceTimeout("no completion")

    waits.until([q], lambda: q.poll() > 0 or q.collected > 0, 1.0, expired)
    assert q.collected == 1
    assert line.waits == [True]  # the wake, then the look finds the completion: no interrupt wait in vain
