"""dx1_driver: the user-space driver of DX-1.

Imports only the standard library, numpy, pyserial (for ``serial:`` devices) and the
generated :mod:`regs`, never the dx1-bringup framework, so it installs and runs without it.
Backends register in :mod:`.registry`: the driver's own (``sim://``, ``serial:``, ``pcie:``),
and the framework's (``model``, ``model:FAULTS``, ``sim``) through the ``dx1_driver.backends``
entry points when the framework is installed.
"""

from . import regs
from .allocator import Allocator
from .device import Block, Capabilities, Device
from .errors import (
    BusErrorResponse,
    CommandError,
    DeviceReset,
    DeviceStuck,
    DeviceTimeout,
    DriverError,
    LinkLost,
    LinkTimeout,
    NotADx1Device,
    OutOfDeviceMemory,
    QueueError,
    ReplayRefused,
    TileFenced,
    TransportError,
)
from .observe import Call, Observer
from .perf import Perf, PerfCounters
from .queue import CommandQueue, Completion, QueueState
from .recovery import Recovery, replay_safe
from .registry import check_device, device_strings, open_transport, register_backend
from .trace import TraceEvent, TraceFifo, TraceKind
from .transport import Transport

__all__ = [
    "regs", "Allocator", "Block", "Capabilities", "CommandQueue", "Completion", "Device", "Perf", "PerfCounters",
    "TraceFifo", "TraceEvent", "TraceKind", "CommandError", "Call", "Observer", "QueueState",
    "DeviceTimeout", "DriverError", "NotADx1Device", "OutOfDeviceMemory", "QueueError", "TransportError",
    "Transport", "check_device", "device_strings", "open_transport", "register_backend", "ReplayRefused", "TileFenced",
    "Recovery", "replay_safe", "DeviceReset", "DeviceStuck", "LinkLost", "LinkTimeout", "BusErrorResponse",
]
