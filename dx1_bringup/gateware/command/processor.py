"""The command processor of one dx1-mini queue, composed of its parts: ring, fetch, decode, hazards, dispatch,
semaphores, completion writer and watchdog."""

from __future__ import annotations

from amaranth import Module, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...spec import Opcode, SocConfig
from ..axi import AXI4Signature, join_channels
from ..layouts import HEADER_LAYOUT, command_layout
from ..stream import AXIStreamSignature
from .completion import CompletionWriter
from .decode import CommandDecoder
from .dispatch import Dispatcher
from .fetch import CommandFetch
from .hazards import HazardTracker
from .ring import ErrorLatch, RingPointers
from .semaphores import SemaphoreRequest
from .slots import SLOT_LAYOUT
from .watchdog import Watchdog

__all__ = ["CommandProcessor"]

class CommandProcessor(wiring.Component):
    """Runs one queue: fetches commands from its ring, checks them, dispatches and completes them.

    * Fetch: while enabled, not halted and HEAD != TAIL, reads the 32-byte command
      at ``ring_base + 32*HEAD`` with one 4-beat burst and advances HEAD.
    * Checks (in the spec's order) for every opcode but GEMM and POSTOP, which
      the tile core checks itself; a refused command completes with its code.
      A fetched command spends :data:`~.decode.DECODE_STAGES` cycles in registered decode
      steps (products, sums, checks, hazards) before it can be dispatched.
    * Dispatch: GEMM/POSTOP to the tile core, LOAD/STORE/COPY to the DMA, so that
      loads, compute and stores overlap.  A command waits only while it would
      write local rows an in-flight command of the other unit reads or writes, or
      read rows it writes (bounding ranges per memory); each unit runs its own
      commands in order.  FENCE and SIGNAL wait until every earlier command has
      completed; WAIT until its semaphore reaches ``count``.
    * Completion: one 8-byte entry per command at ``cq_base + 8*index`` (tag,
      status, opcode, timestamp, phase), then an IRQ_STATUS.completion pulse.
    * ``ring_reset`` (RING_LOG2 written) empties the ring: HEAD = TAIL = 0, phase 1.
      Program a ring while the queue is disabled and idle.
    * Queue errors (doorbell past the ring, tail overtaking head, RING_LOG2 out
      of 1..16, a bus error on a fetch or completion write) halt the queue with
      ERROR set until ``resume``.
    * Watchdog: while a command is in flight in the tile core or the DMA, a
      counter counts the cycles in which ``progress`` (a unit of this tile moved
      a bus beat or a local row, streamed or wrote a row) was low and no unit
      completion was taken; any of those clears it, and so does an empty
      pipeline.  When it reaches ``watchdog`` (0: off) the queue halts with
      TIMEOUT at the oldest in-flight command's index, raises ``abort_req``
      until ``abort_done`` (the SoC has drained and reset the DMA and the tile
      core), then completes every command still in flight with TIMEOUT.
      Completions the units finished meanwhile are not taken (they are lost
      with the units' state), so every command still gets exactly one.
    * ``quiesce`` starts no new fetch and no new completion write; ``axi_quiet``
      is high while neither is in progress, so the processor can then be reset
      without breaking the bus protocol (the per-tile reset).
    """

    def __init__(self, config: SocConfig):
        if not isinstance(config, SocConfig):
            raise TypeError(f"Command processor config must be a SocConfig, not {config!r}")
        self.config = config
        sem_bits = max(1, (config.semaphores - 1).bit_length())
        super().__init__({
            "axi": Out(AXI4Signature(id_width=4)),
            "tile_cmd": Out(AXIStreamSignature(256)),
            "tile_done": In(AXIStreamSignature(32)),
            "dma_cmd": Out(AXIStreamSignature(256)),
            "dma_done": In(AXIStreamSignature(8)),
            "ring_base": In(32), "ring_log2": In(5), "cq_base": In(32),
            "dma_base": In(32), "dma_limit": In(32),
            "enable": In(1), "doorbell": In(1), "doorbell_index": In(16), "resume": In(1), "ring_reset": In(1),
            "head": Out(16), "tail": Out(16), "busy": Out(1), "halted": Out(1),
            "error_code": Out(8), "error_index": Out(16),
            "irq_completion": Out(1), "irq_error": Out(1),
            "sem_values": In(data.ArrayLayout(16, config.semaphores)),
            "sem_valid": Out(1), "sem_index": Out(sem_bits), "sem_delta": Out(signed(18)), "sem_grant": In(1),
            "timestamp": In(32),
            "stall": Out(1),
            "trace_start": Out(1), "trace_end": Out(1),
            "trace_tag": Out(16), "trace_opcode": Out(8), "trace_status": Out(8),
            "trace_end_tag": Out(16), "trace_end_opcode": Out(8),
            "watchdog": In(32), "progress": In(1), "abort_req": Out(1), "abort_done": In(1),
            "quiesce": In(1), "axi_quiet": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        m.submodules.ring = ring = RingPointers()
        m.submodules.errors = errors = ErrorLatch(4)
        m.submodules.fetch = fetch = CommandFetch()
        m.submodules.decoder = decoder = CommandDecoder(cfg)
        m.submodules.hazards = hazards = HazardTracker()
        m.submodules.dispatcher = dispatcher = Dispatcher()
        m.submodules.semaphore = semaphore = SemaphoreRequest(cfg.semaphores)
        m.submodules.writer = writer = CompletionWriter()
        m.submodules.watchdog = watchdog = Watchdog()
        join_channels(m, self.axi, read=fetch.bus, write=writer.bus)
        halted, aborting = errors.halted, watchdog.aborting
        cmd = fetch.cmd
        hdr = data.View(HEADER_LAYOUT, cmd)
        sg = data.View(command_layout(Opcode.SIGNAL), cmd)

        # Ring pointers, doorbells and queue errors (in rising priority: doorbell, fetch, completion, timeout).
        m.d.comb += [
            ring.ring_log2.eq(self.ring_log2), ring.ring_reset.eq(self.ring_reset), ring.doorbell.eq(self.doorbell),
            ring.doorbell_index.eq(self.doorbell_index), ring.advance.eq(fetch.fetched),
            self.head.eq(ring.head), self.tail.eq(ring.tail),
            errors.resume.eq(self.resume), self.halted.eq(halted),
            self.error_code.eq(errors.code), self.error_index.eq(errors.index), self.irq_error.eq(errors.irq_error),
        ]
        for i, source in enumerate((ring, fetch, writer, watchdog)):
            wiring.connect(m, source.error, getattr(errors, f"report{i}"))

        # Fetch, then decode.
        m.d.comb += [
            fetch.ring_base.eq(self.ring_base), fetch.head.eq(ring.head), fetch.ring_phase.eq(ring.phase),
            fetch.start.eq(self.enable & ~halted & ring.entries_ok & (ring.head != ring.tail) & ~self.doorbell
                           & ~self.quiesce),
            fetch.taken.eq(dispatcher.dispatched),
            decoder.cmd.eq(cmd), decoder.valid.eq(fetch.valid), decoder.taken.eq(dispatcher.dispatched),
            decoder.dma_base.eq(self.dma_base), decoder.dma_limit.eq(self.dma_limit),
        ]

        # Dispatch, with the hazards against the commands in flight and the semaphores.
        slot_in = Signal(SLOT_LAYOUT)
        in_flight = Signal()
        m.d.comb += [
            slot_in.ring_index.eq(fetch.index), slot_in.phase.eq(fetch.phase), slot_in.tag.eq(hdr.tag),
            slot_in.opcode.eq(hdr.opcode), slot_in.footprint.eq(decoder.footprint),
            in_flight.eq((hazards.tile_count != 0) | (hazards.dma_count != 0) | writer.local_valid | writer.busy),
            hazards.footprint.eq(decoder.footprint), hazards.slot.eq(slot_in),
            hazards.tile_push.eq(dispatcher.tile_push), hazards.dma_push.eq(dispatcher.dma_push),
            hazards.tile_pop.eq(writer.tile_pop), hazards.dma_pop.eq(writer.dma_pop),
            dispatcher.decoded.eq(decoder.decoded), dispatcher.halted.eq(halted), dispatcher.aborting.eq(aborting),
            dispatcher.route.eq(decoder.route), dispatcher.status.eq(decoder.status), dispatcher.opcode.eq(hdr.opcode),
            dispatcher.tile_count.eq(hazards.tile_count), dispatcher.dma_count.eq(hazards.dma_count),
            dispatcher.tile_hazard.eq(hazards.tile_hazard), dispatcher.dma_hazard.eq(hazards.dma_hazard),
            dispatcher.local_valid.eq(writer.local_valid), dispatcher.in_flight.eq(in_flight),
            self.tile_cmd.tdata.eq(cmd), self.tile_cmd.tvalid.eq(dispatcher.tile_valid),
            dispatcher.tile_ready.eq(self.tile_cmd.tready),
            self.dma_cmd.tdata.eq(cmd), self.dma_cmd.tvalid.eq(dispatcher.dma_valid),
            dispatcher.dma_ready.eq(self.dma_cmd.tready),
            semaphore.signal.eq(dispatcher.sem_signal), semaphore.wait.eq(dispatcher.sem_wait),
            dispatcher.sem_done.eq(semaphore.done), semaphore.sem.eq(sg.sem), semaphore.count.eq(sg.count),
            semaphore.sem_values.eq(self.sem_values), semaphore.sem_grant.eq(self.sem_grant),
            self.sem_valid.eq(semaphore.sem_valid), self.sem_index.eq(semaphore.sem_index),
            self.sem_delta.eq(semaphore.sem_delta),
            self.stall.eq(dispatcher.stall), self.trace_start.eq(dispatcher.dispatched),
            self.trace_tag.eq(hdr.tag), self.trace_opcode.eq(hdr.opcode),
        ]

        # Completions.
        m.d.comb += [
            writer.cq_base.eq(self.cq_base), writer.timestamp.eq(self.timestamp), writer.quiesce.eq(self.quiesce),
            writer.aborting.eq(aborting), writer.flushing.eq(watchdog.flushing),
            writer.local_push.eq(dispatcher.local_push), writer.local_slot.eq(slot_in),
            writer.local_status.eq(decoder.status),
            writer.tile_pending.eq(hazards.tile_count != 0), writer.tile_oldest.eq(hazards.tile_oldest),
            writer.dma_pending.eq(hazards.dma_count != 0), writer.dma_oldest.eq(hazards.dma_oldest),
            self.irq_completion.eq(writer.irq_completion), self.trace_end.eq(writer.trace_end),
            self.trace_end_tag.eq(writer.trace_end_tag), self.trace_end_opcode.eq(writer.trace_end_opcode),
            self.trace_status.eq(writer.trace_status),
        ]
        wiring.connect(m, wiring.flipped(self.tile_done), writer.tile_done)
        wiring.connect(m, wiring.flipped(self.dma_done), writer.dma_done)

        # Watchdog.
        m.d.comb += [
            watchdog.budget.eq(self.watchdog), watchdog.progress.eq(self.progress),
            watchdog.tile_pop.eq(writer.tile_pop), watchdog.dma_pop.eq(writer.dma_pop),
            watchdog.tile_count.eq(hazards.tile_count), watchdog.dma_count.eq(hazards.dma_count),
            watchdog.head.eq(ring.head), watchdog.mask.eq(ring.mask),
            watchdog.tile_oldest.eq(hazards.tile_oldest.ring_index),
            watchdog.dma_oldest.eq(hazards.dma_oldest.ring_index),
            watchdog.abort_done.eq(self.abort_done), watchdog.writer_idle.eq(writer.idle),
            self.abort_req.eq(watchdog.abort_req),
        ]

        m.d.comb += [self.axi_quiet.eq(fetch.idle & writer.idle),
                     self.busy.eq(self.enable & ~halted & ((ring.head != ring.tail) | fetch.valid | in_flight))]
        return m
