"""Board bring-up: from "is anything alive" to "GEMM verified on every tile".

:func:`run_bringup` runs eight steps in order, through the driver only, and stops
at the first one that fails, saying what it saw, what it expected, what is
probably broken and what to check next:

1. ``link``: a few reads of GLOBAL.ID and MAGIC give the same answer; SCRATCH
   holds what is written (and is restored).
2. ``identity``: discovery, MAGIC, HW_VERSION and capabilities against the spec
   (tiles, array, semaphores, memories >= 1; one QUEUE, PERF and TRACE block a tile).
3. ``registers``: every discovered block where the spec places it, its ID,
   VERSION and NEXT; read-only constants read again; after the reset, every
   register with a defined reset value has it.  Nothing is written that starts
   work; write-only registers are not read.
4. ``memory``: data bus (walking ones on one word), address lines (one
   word at 0 and at every power of two of the whole memory), address-in-address
   and a seeded random pattern over the tested region.  This step overwrites
   device memory.
5. ``dma``: on every tile, LOAD into the low and high scratchpad rows and the
   accumulator buffer and STORE back, and a COPY, compared byte for byte.
6. ``gemm``: on every tile, a small GEMM with bias and requantisation and one
   with int32 output, planned by the runtime's compiler, against
   :func:`~dx1_bringup.runtime.gemm.reference_gemm` bit for bit.
7. ``perf``: the counters read in steps 5 and 6: cycles advance, MACS equals the
   MACs the GEMMs issued, BYTES_READ/WRITTEN equal the bytes the DMA moved.
8. ``irq``: on every queue a SIGNAL's completion sets IRQ_STATUS and raises the
   interrupt line, W1C clears it, a masked completion leaves the line low.
   Transports without an interrupt line (serial, PCIe without VFIO) check
   IRQ_STATUS by polling and say so.

The package: :mod:`.steps` (the eight steps), :mod:`.diagnosis` (what a failure probably means),
:mod:`.report` (the results), :mod:`.run` (:func:`run_bringup`, the steps in order) and :mod:`.cli`
(``dx1 bringup``).  The whole run is a :class:`BringupReport`, written as JSON by the command line.
``dx1 bringup --device D`` runs it.  Besides the
driver's device strings, ``model:FAULTS`` opens the golden model with broken memory
(:meth:`~dx1_bringup.faults.MemoryFaults.parse`), for example ``model:stuck-bit=5`` or
``model:alias-bit=12``.
"""

from .cli import add_parser
from .diagnosis import _address_diagnosis as _address_diagnosis
from .diagnosis import _bytes_diagnosis as _bytes_diagnosis
from .report import REGION_CHECK, STEPS, BringupReport, Check, StepResult
from .run import run_bringup

__all__ = ["REGION_CHECK", "STEPS", "BringupReport", "Check", "StepResult", "add_parser", "main", "run_bringup"]
