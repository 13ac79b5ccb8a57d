"""One vocabulary for every fault the framework injects: into device memory, onto a line, onto a bus.

A fault kind is a dataclass with a ``NAME`` and the ``KEYS`` it takes in a fault
string (``stuck-bit=5,stuck-at=0``, ``alias-bit=12``, ``line-rate=1e-4``);
:func:`parse_faults` reads one such string into one value per kind, so a device
string such as ``model:FAULTS`` and a simulator option spell faults the same
way.  Random faults draw from a :class:`FaultRng` (seeded, so a failure can be
replayed) and change data through the same operations (:func:`flip_bit` for
transient faults, :func:`force_bit` for stuck-at faults).

* :class:`MemoryFaults` (:mod:`.memory`): a data bit of the memory bus stuck at
  0 or 1, an address line stuck at 0.
* :class:`LineFaults` (:mod:`.line`): bits flipped, bytes dropped or repeated on
  a serial line.

* :class:`UnitStalls` (:mod:`.stall`): units (a tile's DMA or core) that make
  no progress, on the golden model and the simulated SoC alike.
* :class:`BusErrors` (:mod:`.bus`): a window of device memory that answers
  error responses, on the golden model.

Another kind is one more module with its dataclass and ``KEYS``, added to
:data:`FAULT_KINDS`.
"""

from .base import FaultKey, FaultRng, flip_bit, force_bit, natural, parse_faults, probability
from .bus import BusErrors
from .line import LINE_SCOPES, LineFaults
from .memory import MemoryFaults
from .stall import UnitStalls

__all__ = ["FaultKey", "FaultRng", "flip_bit", "force_bit", "natural", "probability", "parse_faults",
           "LINE_SCOPES", "LineFaults", "MemoryFaults", "UnitStalls", "BusErrors", "FAULT_KINDS"]

#: Every fault kind, for a fault string that may name any of them.
FAULT_KINDS = (MemoryFaults, LineFaults, UnitStalls, BusErrors)
