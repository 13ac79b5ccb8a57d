"""SIGNAL and WAIT: a queue's requests to the SoC's shared semaphores."""

from __future__ import annotations

from amaranth import Array, Module, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SemaphoreRequest"]


class SemaphoreRequest(wiring.Component):
    """Asks the SoC to add to semaphore ``sem``: ``count`` for a SIGNAL, ``-count`` for a WAIT.

    ``signal`` requests the add outright; ``wait`` only once the semaphore's value in ``sem_values`` is at
    least ``count``.  The request (``sem_valid``, ``sem_index``, ``sem_delta``) is granted by ``sem_grant``,
    which ``done`` passes on: the command is then complete.

    Parameters
    ----------
    semaphores:
        How many semaphores the SoC has.
    """

    def __init__(self, semaphores: int):
        if not isinstance(semaphores, int) or isinstance(semaphores, bool) or semaphores < 1:
            raise ValueError(f"Semaphore count must be a positive integer, not {semaphores!r}")
        self.semaphores = semaphores
        sem_bits = max(1, (semaphores - 1).bit_length())
        super().__init__({
            "signal": In(1), "wait": In(1), "sem": In(8), "count": In(16), "done": Out(1),
            "sem_values": In(data.ArrayLayout(16, semaphores)),
            "sem_valid": Out(1), "sem_index": Out(sem_bits), "sem_delta": Out(signed(18)), "sem_grant": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        with m.If(self.signal):
            m.d.comb += [self.sem_valid.eq(1), self.sem_delta.eq(self.count), self.done.eq(self.sem_grant)]
        with m.If(self.wait):
            sem_now = Array(self.sem_values[i] for i in range(self.semaphores))[self.sem]
            with m.If(sem_now >= self.count):
                m.d.comb += [self.sem_valid.eq(1), self.sem_delta.eq(-self.count), self.done.eq(self.sem_grant)]
        m.d.comb += self.sem_index.eq(self.sem)
        return m
