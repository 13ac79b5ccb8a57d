"""Pipeline helpers shared by the gateware's fixed-latency units."""

from __future__ import annotations

from amaranth import Module, Signal

__all__ = ["delay_valid_ctl"]


def delay_valid_ctl(m: Module, valid, ctl, stages: int, tag: str) -> tuple[Signal, Signal]:
    """``valid`` and ``ctl`` delayed by ``stages`` cycles, through registers ``valid_{tag}{i}`` and ``ctl_{tag}{i}``.

    A fixed-latency unit (the systolic array, the post-op) carries its row-valid bit and the
    control word beside its data this way, so they leave together with the row they describe.
    """
    for stage in range(stages):
        valid_d = Signal(name=f"valid_{tag}{stage}")
        ctl_d = Signal(len(ctl), name=f"ctl_{tag}{stage}")
        m.d.sync += [valid_d.eq(valid), ctl_d.eq(ctl)]
        valid, ctl = valid_d, ctl_d
    return valid, ctl
