"""dx1_driver: the user-space driver of DX-1.

Imports only the standard library, numpy and the generated :mod:`regs`, so it
installs without the bring-up framework (the model transport imports that
lazily).
"""

from . import regs
from .allocator import Allocator
from .device import Block, Capabilities, Completion, Device, Queue
from .errors import (
    CommandError,
    DeviceTimeout,
    DriverError,
    NotADx1Device,
    OutOfDeviceMemory,
    QueueError,
    TransportError,
)
from .transport import DEVICE_SPECS, ModelTransport, Transport, open_transport

__all__ = [
    "regs", "Allocator", "Block", "Capabilities", "Completion", "Device", "Queue", "CommandError",
    "DeviceTimeout", "DriverError", "NotADx1Device", "OutOfDeviceMemory", "QueueError", "TransportError",
    "DEVICE_SPECS", "ModelTransport", "Transport", "open_transport",
]
