"""The golden model: bit-exact numpy models written from the spec, the reference for every test.

* :mod:`.tile`: one tile's compute core (``TileModel``, ``check_command``, ``requantize``; the
  ``PostOpParams`` it applies are the spec's).
* :mod:`.registers`: the device's register space, device-memory host port and the state behind them
  (``RegisterSpace``, ``BusError``).
* :mod:`.device`: the whole device as the host sees it, its command processor on that register space
  (``DeviceModel``, the driver's ``model`` backend).
"""

from .device import DeviceModel
from .registers import BusError
from .tile import COMPUTE_OPCODES, MAX_SHIFT, TileModel, check_command, requantize

__all__ = ["BusError", "DeviceModel", "COMPUTE_OPCODES", "MAX_SHIFT", "TileModel", "check_command", "requantize"]
