"""dx1_driver: the user-space driver of DX-1.

Imports only the standard library, numpy and the generated :mod:`regs`, so it
installs without the bring-up framework (the model transport imports that
lazily).
"""

from . import regs
from .allocator import Allocator
from .device import Block, Capabilities, Device
from .errors import (
    CommandError,
    DeviceTimeout,
    DriverError,
    NotADx1Device,
    OutOfDeviceMemory,
    QueueError,
    TransportError,
)
from .perf import Perf, PerfCounters
from .queue import CommandQueue, Completion
from .trace import Trace, TraceEvent, TraceKind
from .transport import DEVICE_SPECS, ModelTransport, Transport, open_transport

__all__ = [
    "regs", "Allocator", "Block", "Capabilities", "CommandQueue", "Completion", "Device", "Perf", "PerfCounters",
    "Trace", "TraceEvent", "TraceKind", "CommandError",
    "DeviceTimeout", "DriverError", "NotADx1Device", "OutOfDeviceMemory", "QueueError", "TransportError",
    "DEVICE_SPECS", "ModelTransport", "Transport", "open_transport",
]
