"""Run under torchrun by tests/test_parallel_torchrun.py: a mismatched shape, then a rank that dies.

Every rank prints what it saw, one line each, prefixed ``rank R:``.
"""

from __future__ import annotations

import os
import sys

import numpy as np
from dx1_driver import Device

from dx1_bringup.collectives import Buffer, CollectiveMismatch, RankFailed
from dx1_bringup.parallel.distributed import ProcessRank, process_group


def main() -> int:
    with process_group(timeout=5.0) as (rank, world):
        dev = Device.open("model")
        me = ProcessRank(dev)
        count = 8 + rank  # rank 1 means a buffer of 9 elements
        buf = Buffer(rank, dev.alloc(4 * count), np.int32, (count,))
        try:
            me.all_reduce(buf)
            print(f"rank {rank}: no error on a mismatched shape", flush=True)
        except CollectiveMismatch as e:
            print(f"rank {rank}: CollectiveMismatch: {e}", flush=True)
        if rank == world - 1:
            print(f"rank {rank}: exiting without the next collective", flush=True)
            os._exit(3)
        same = Buffer(rank, buf.addr, np.int32, (8,))
        try:
            me.all_reduce(same)
            print(f"rank {rank}: no error with a dead peer", flush=True)
        except RankFailed as e:
            print(f"rank {rank}: RankFailed: {e}", flush=True)
        dev.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
