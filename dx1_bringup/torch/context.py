"""Which DX-1 device the PyTorch integration runs on: ``with dx1_bringup.torch.device("sim"): ...``.

Inside the context every ``dx1::qlinear`` call and every subgraph the ``"dx1"`` torch.compile backend sends
to DX-1 runs on that device; outside any context they run on a process-wide golden model (``"model"``),
opened on first use.  Contexts nest; a device string opened by the context is closed when it ends.
"""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Iterator

from dx1_driver import Device

__all__ = ["device", "current_device", "DEFAULT_DEVICE"]

#: The device used outside any :func:`device` context.
DEFAULT_DEVICE = "model"

_stack: list[Device] = []
_default: Device | None = None


@contextlib.contextmanager
def device(device: str | Device = DEFAULT_DEVICE) -> Iterator[Device]:
    """Run DX-1 work inside the block on ``device``: a device string (opened here) or an open :class:`Device`."""
    if isinstance(device, Device):
        opened = None
        dev = device
    elif isinstance(device, str):
        opened = dev = Device.open(device)
    else:
        raise TypeError(f"device must be a device string or a dx1_driver.Device, not {type(device).__name__}")
    _stack.append(dev)
    try:
        yield dev
    finally:
        _stack.pop()
        if opened is not None:
            _forget(opened)
            opened.close()


def current_device() -> Device:
    """The innermost context's device, else the process-wide default model (opened on first use)."""
    global _default
    if _stack:
        return _stack[-1]
    if _default is None:
        _default = Device.open(DEFAULT_DEVICE)
        atexit.register(_default.close)
    return _default


#: Callbacks run when a device opened by a context closes (sessions holding its memory drop it).
_on_close: list = []


def _forget(dev: Device) -> None:
    for callback in _on_close:
        callback(dev)
