"""Golden model of the whole dx1-mini device as the host sees it (the driver's ``model`` backend)."""

from .device import BusError, DeviceModel

__all__ = ["BusError", "DeviceModel"]
