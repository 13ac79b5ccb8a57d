"""Collectives over a group of DX-1 devices, host-staged: every chunk passes through host memory.

A :class:`DeviceGroup` holds one opened device per rank; every rank's buffers are in its own device memory.
The collectives (all_reduce, reduce_scatter, all_gather, broadcast, reduce, send/recv, barrier) run as a
chunked, pipelined ``ring`` or ``direct`` (gather to the host, reduce in rank order, scatter), on int32
(wrapping sums) and int8 (sums requantised as the POSTOP does).  Before any data moves the ranks compare
fingerprints (:class:`CollectiveMismatch`); every wait has a deadline (:class:`CollectiveTimeout`); a failing
device fails every rank (:class:`RankFailed`).  The chip-to-chip link comes later, behind the same calls.
"""

from .buffer import DTYPES, Buffer, segment
from .errors import CollectiveError, CollectiveMismatch, CollectiveRefused, CollectiveTimeout, GroupClosed, RankFailed
from .group import DEFAULT_CHUNK_BYTES, DEFAULT_TIMEOUT, DeviceGroup
from .rank import ALGORITHMS, Rank
from .reduction import REDOPS

__all__ = ["DeviceGroup", "Rank", "Buffer", "DTYPES", "REDOPS", "ALGORITHMS", "DEFAULT_TIMEOUT",
           "DEFAULT_CHUNK_BYTES", "segment", "CollectiveError", "CollectiveMismatch", "CollectiveRefused",
           "CollectiveTimeout", "RankFailed", "GroupClosed"]
