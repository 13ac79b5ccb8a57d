"""One step of a batch of sequences on a DX-1 device, with the KV cache in device memory in blocks.

:class:`ModelRunner` uploads the int8 weights once and keeps a pool of ``num_blocks`` KV blocks in device
memory.  Per layer, the keys of every block form one region (block after block, ``block_size x width`` int8
rows each, one row per token position, heads side by side), and the values another, so block ``b``'s keys
of layer ``l`` are at ``pool + (2 l num_blocks + b) block_size width`` and blocks with consecutive ids are
consecutive rows.  A step computes, for every scheduled sequence, ``count`` new tokens from position
``start``; each sequence's queries are one column block of ``Q^T``, padded to whole chunks.  Every matrix
product runs on the device; on a device with a vector unit (``caps.vector``) so do the layer norms, the
transpositions, the softmax (:mod:`..runtime.kernels`) and the residual adds (:mod:`.residual`), the same
integer math as :mod:`.quant_model`'s reference: the int8 residual stream stays in device memory as the left
half of ``[x | A]`` and ``[x2 | M]`` (the output projection and the MLP write beside it), and a step's only
transfers are the embeddings in and the logits out.  Per layer:

1. ``h = LN1(x)``; the queries, the keys and the values of the whole batch are one GEMM each, and each
   sequence's rows of ``Q`` are transposed into its columns of ``Q^T`` (without a vector unit the host
   writes ``h^T`` and ``Q^T = Wq h^T`` is the GEMM); then COPY commands move each sequence's new key and
   value rows into their slots in its blocks (one COPY per run of positions in physically consecutive blocks);
2. attention reads the keys through the block table: per sequence, head and run of consecutive blocks of its
   table, ``S^T_run = K_run Q^T`` writes those blocks' rows of the scores;
3. each head's ``S^T`` transposed into the sequence's ``S`` (heads side by side), whose rows are rows
   ``start ..`` of the causal softmax over the context (one resident mask serves every sequence); then
   ``O_h = sum_run P_run V_run`` is one GEMM per sequence and head whose terms are the runs of its table
   (accumulated before one POSTOP);
4. the output projection, ``x2 = x + A``, ``h2 = LN2(x2)``, the MLP and ``x = x2 + M`` over the whole batch.

Without a vector unit the host runs the kernels' int references instead (same result, more transfers).
Swapping (:meth:`ModelRunner.swap_out`, :meth:`ModelRunner.swap_in`) moves whole blocks between the pool and
``num_host_blocks`` blocks of host memory (a numpy array), one read or write per layer and keys or values of
each run of consecutive blocks.
Each phase is one set of command streams driven to completion (dealt round-robin over the tiles, or a
batch-wide one spread over them), so every write of a phase lands before the next phase reads it.  A block
copy (copy-on-write) is COPY commands on the device before the step.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass

import numpy as np
from dx1_driver import Device

from ..runtime.commands import CommandStream
from ..runtime.gemm import GemmTerm, compile_gemm
from ..runtime.gemm_run import drive
from ..runtime.kernels import Consts, Kernel, Mem, Softmax, Transpose
from ..runtime.operands import ACC_LANE_BYTES, pad_operand, padded
from ..spec import Opcode, PostOpParams, align_up, ceil_div, pack_command
from .quant_model import QuantCharLM, causal_probs
from .scheduler import ScheduledSeq

__all__ = ["ModelRunner", "StepStats"]

#: Tag of the runner's COPY commands (the tiling compiler's tags count up from 0 in each GEMM).
COPY_TAG = 0xFFFE


@dataclass
class StepStats:
    """What the runner has done: steps, GEMMs, vector kernels, commands, tokens computed, blocks copied
    (copy-on-write), blocks swapped out to and in from host memory, host transfers (each ``write_mem`` or read
    of device memory) and the device cycles its
    phases took (per phase the slowest tile's CYCLES increase: device time, whatever the host)."""

    steps: int = 0
    copies: int = 0
    cycles: int = 0
    gemms: int = 0
    kernels: int = 0
    commands: int = 0
    tokens: int = 0
    transfers: int = 0
    swapped_out: int = 0
    swapped_in: int = 0


class _Phase:
    """GEMMs that may run in any order: their command streams, dealt over the tiles."""

    def __init__(self, runner: ModelRunner):
        self.runner = runner
        self.streams: list[list[bytes]] = [[] for _ in range(runner.tiles)]
        self.next = 0

    def gemm(self, m: int, k: int, n: int, a: int, b: int, c: int, *, a_stride: int, b_stride: int, c_stride: int,
             post: PostOpParams | None, bias: int | None = None, more: tuple[GemmTerm, ...] = (),
             spread: bool = False) -> None:
        r = self.runner
        tile_ids = list(range(r.tiles)) if spread else [self.next % r.tiles]
        self.next += not spread
        plan = compile_gemm(m, k, n, r.dev.caps, a_addr=a, b_addr=b, c_addr=c, bias_addr=bias, post=post,
                            tile_ids=tile_ids, a_stride=a_stride, b_stride=b_stride, c_stride=c_stride, more=more)
        for t, cmds in enumerate(plan.commands):
            self.streams[t].extend(cmds)
        r.stats.gemms += 1
        r.stats.commands += sum(len(c) for c in plan.commands)

    def kernel(self, kernel: Kernel, x: Mem, out: Mem, rows: tuple[int, int], cols: int, *,
               spread: bool = False) -> None:
        """A vector kernel over input rows ``rows = (first, count)`` of ``cols`` columns, on the next tile in
        turn or (``spread``) cut over every tile."""
        r = self.runner
        consts, addr = r.resident(kernel, cols)
        first, count = rows
        if spread:
            blocks = [(first + at, n) for at, n in kernel.split(count, cols, r.tiles, r.dev.caps.array)]
        else:
            blocks = [rows]
        for i, block in enumerate(blocks):
            t = i if spread else self.next % r.tiles
            caps = r.dev.caps
            stream = CommandStream(array=caps.array, spm_rows=caps.spm_rows, acc_rows=caps.acc_rows,
                                   mem_bytes=caps.mem_bytes, tile=t, what=f"serving {kernel.kind}")
            kernel.lower(stream, x, out, block, cols, consts, addr)
            self.streams[t].extend(stream.commands)
            r.stats.commands += len(stream.commands)
        self.next += not spread
        r.stats.kernels += 1

    def copy(self, src: int, dst: int, length: int) -> None:
        """A device-memory copy (the COPY command), on the next tile in turn."""
        self.streams[self.next % self.runner.tiles].append(
            pack_command(Opcode.COPY, tag=COPY_TAG, src_addr=src, dst_addr=dst, length=length))
        self.next += 1
        self.runner.stats.commands += 1

    def run(self) -> None:
        if any(self.streams):
            dev = self.runner.dev
            used = [t for t, cmds in enumerate(self.streams) if cmds]
            before = {t: dev.perf(t).read() for t in used}
            drive(dev, self.streams, self.runner.timeout)
            self.runner.stats.cycles += max(dev.perf(t).read().since(before[t]).cycles for t in used)


@dataclass
class _StepBuffers:
    """A step's scratch in device memory, carved from the runner's scratch region in this order.

    ``cols`` are the sequences' query columns (each padded to whole chunks), ``keys`` their block tables'
    positions; ``wanted`` the rows whose logits are read.  Every size only grows with ``tokens``, the sum of
    ``cols``, each ``keys`` and ``wanted`` (and each per-sequence buffer is whole 64-byte units), so the
    buffers of the largest step bound every step's (:meth:`worst_case`).
    """

    size: int
    o: int
    a: int
    m: int
    k: int
    v: int
    hf: int
    xa: int
    xm: int
    h: int
    f: int
    qt: int
    q: int
    ht: int
    logits: int
    st: list[list[int]]
    s: list[int]
    p: list[int]

    @classmethod
    def carve(cls, runner: ModelRunner, base: int, tokens: int, cols: list[int], keys: list[int],
              wanted: int) -> _StepBuffers:
        c, arr, vec = runner.model.config, runner.dev.caps.array, runner.dev.caps.vector
        t, d, heads, tq = tokens, c.width, c.heads, sum(cols)
        at = base

        def take(n: int) -> int:
            nonlocal at
            start, at = at, at + align_up(max(n, 64), 64)
            return start

        o, a, m, k, v, hf = (take(t * d) for _ in range(6))
        # On the vector unit the residual stream stays in device memory: [x | A] and [x2 | M], each block's
        # output written beside the stream by its GEMM.
        xa, xm = take(t * 2 * d), take(t * 2 * d)
        h, f, qt = take(t * d), take(t * padded(c.ffn, arr)), take(d * tq)
        # Q has a chunk of rows to spare: a sequence's transposition reads whole chunks of rows.
        q, ht = (take((t + arr) * d), 0) if vec else (0, take(d * tq))
        st = [[take(lp * w) for _ in range(heads)] for lp, w in zip(keys, cols, strict=True)]
        # S and P: a sequence's query rows, each head's keys side by side.  P takes the place of the heads'
        # S^T (as many bytes, each a whole number of 64-byte units, one after another), read before P is written.
        s = [take(w * heads * lp) if vec else 0 for lp, w in zip(keys, cols, strict=True)]
        p = [heads_st[0] for heads_st in st]
        logits = take(wanted * runner.vocab_padded * ACC_LANE_BYTES)
        return cls(at - base, o, a, m, k, v, hf, xa, xm, h, f, qt, q, ht, logits, st, s, p)

    @classmethod
    def worst_case(cls, runner: ModelRunner) -> int:
        """Bytes of the largest step: ``max_num_tokens`` tokens over as many sequences as may share them (up
        to ``max_num_seqs``), each as many query columns as padding can make and a whole context of keys,
        and the logits of every token."""
        arr, t = runner.dev.caps.array, runner.max_num_tokens
        n = min(runner.max_num_seqs, t)
        # Each sequence's query columns are its tokens padded up to a chunk: at most t + (arr - 1) n in all.
        total = (t + (arr - 1) * n) // arr * arr
        cols = [arr] * (n - 1) + [total - arr * (n - 1)]
        return cls.carve(runner, 0, t, cols, [runner.mask_keys] * n, t).size


class ModelRunner:
    """The quantised model on one device, its weights resident and its KV cache in ``num_blocks`` blocks.

    Parameters
    ----------
    dev:
        An open device.
    model:
        The quantised model.
    num_blocks, block_size:
        The KV cache's blocks (``block_size`` a multiple of 8: a block is a whole number of the GEMMs' chunks).
    num_host_blocks:
        Blocks of host memory for swapped-out sequences.
    max_num_tokens, max_num_seqs:
        The largest step :meth:`run` takes: tokens computed (default: one context) and sequences.  A step's
        scratch (its activations, each sequence's scores and probabilities, the logits) is one region reserved
        here for the largest step, so a step never runs out of device memory: what does not fit fails here.
    tiles:
        Tiles to use (default: the device's usable tiles).
    timeout:
        Seconds without progress before the driver's ``DeviceTimeout``.

    Raises
    ------
    ValueError
        A block size that is not a positive multiple of 8, or the weights, the kernels' constants, the step
        scratch and ``num_blocks`` KV blocks do not fit device memory.  ``num_blocks=None`` takes as many blocks
        as fit beside the rest (vLLM sizes its cache the same way).
    """

    def __init__(self, dev: Device, model: QuantCharLM, num_blocks: int | None, block_size: int = 16, *,
                 num_host_blocks: int = 0, max_num_tokens: int | None = None, max_num_seqs: int = 16,
                 tiles: int | None = None, timeout: float = 5.0):
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 8 or block_size % 8:
            raise ValueError(f"block_size must be a positive multiple of 8 on the device, not {block_size!r}")
        c = model.config
        max_num_tokens = c.context if max_num_tokens is None else max_num_tokens
        for name, value in (("max_num_tokens", max_num_tokens), ("max_num_seqs", max_num_seqs)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        self.dev, self.model, self.timeout = dev, model, timeout
        self.block_size, self.max_num_tokens, self.max_num_seqs = block_size, max_num_tokens, max_num_seqs
        self.tiles = len(dev.usable_tiles) if tiles is None else tiles
        self.width, self.vocab_padded = c.width, padded(len(c.vocab), dev.caps.array)
        self.kv_bytes = block_size * c.width  # one layer's keys (or values) of one block
        self.block_bytes = 2 * c.layers * self.kv_bytes
        self.stats = StepStats()
        # The softmax's causal mask has a row per query position (padded queries included) and the keys of
        # the longest block table: each sequence uses its first columns and the rows of its positions.
        self.mask_keys = ceil_div(c.context, block_size) * block_size
        self.mask_rows = padded(c.context, dev.caps.array) + dev.caps.array
        self.softmax = [Softmax(layer.softmax.s_in, groups=c.heads, causal=True, mask_keys=self.mask_keys)
                        for layer in model.layers]
        self.transpose = Transpose()
        weights = self._weight_arrays()
        consts = self._kernel_consts()
        total = sum(align_up(a.nbytes, 64) for a in weights.values())
        consts_bytes = sum(align_up(blob.nbytes, 64) for _, _, blob in consts)
        #: Bytes of the step scratch: the buffers of the largest step :meth:`run` takes.
        self.scratch_bytes = _StepBuffers.worst_case(self)
        fixed = total + consts_bytes + self.scratch_bytes
        for tile in range(self.tiles):  # the command queues' rings are device memory too: taken first
            dev.queue(tile)
        room = dev.allocator.largest_free
        parts = (f"the weights ({total} B), the kernels' constants ({consts_bytes} B){{}} the step scratch "
                 f"({self.scratch_bytes} B for {max_num_tokens} tokens and {max_num_seqs} sequences)")
        if num_blocks is None:
            num_blocks = max(room - fixed, 0) // self.block_bytes
            if num_blocks < ceil_div(c.context, block_size):
                raise ValueError(f"{parts.format(' and')} leave {max(room - fixed, 0)} B of the device's {room} B "
                                 f"free: not the {ceil_div(c.context, block_size)} KV blocks of one context")
        elif fixed + num_blocks * self.block_bytes > room:
            raise ValueError(f"{parts.format(',')} and {num_blocks} KV blocks of {self.block_bytes} B do not fit "
                             f"the device's {room} B free")
        self.num_blocks = num_blocks
        self._weights_base = dev.alloc(total)
        self.addr: dict[str, int] = {}
        offset = 0
        for name, array in weights.items():
            self.addr[name] = self._weights_base + offset
            dev.write_mem(self.addr[name], array)
            offset += align_up(array.nbytes, 64)
        self._consts: dict[Kernel, tuple[Consts, int]] = {}
        for kernel, kernel_consts, blob in consts:
            addr = dev.alloc(blob.nbytes)
            self._write(addr, blob)
            self._consts[kernel] = (kernel_consts, addr)
        self.pool = dev.alloc(num_blocks * self.block_bytes)
        self._scratch = dev.alloc(self.scratch_bytes)
        #: Swap space: per host block, per layer its keys then its values (``block_size x width`` each).
        self.host_kv = np.zeros((num_host_blocks, c.layers, 2, block_size, c.width), np.int8)
        self._closed = False

    def _weight_arrays(self) -> dict[str, np.ndarray]:
        """Every constant, zero-padded to whole chunks, by name."""
        arr = self.dev.caps.array
        out = {}

        def const(name: str, a: np.ndarray) -> None:
            shape = tuple(padded(n, arr) for n in a.shape)
            out[name] = pad_operand(a, shape)

        for i, layer in enumerate(self.model.layers):
            for name in ("wk_t", "wv_t", "wo_t", "w1_t", "w2_t", "bo", "b1", "b2"):
                const(f"{i}.{name}", getattr(layer, name))
            if self.dev.caps.vector:  # Q = h Wq^T, transposed per sequence on the vector unit
                const(f"{i}.wq_t", np.ascontiguousarray(layer.wq.T))
            else:  # Q^T = Wq h^T from the host's h^T
                const(f"{i}.wq", layer.wq)
        const("head_t", self.model.head_t)
        return out

    def _kernel_consts(self) -> list[tuple[Kernel, Consts, np.ndarray]]:
        """Every vector kernel's constants and their blob, for inputs of :attr:`mask_rows` rows at most: a
        layer norm's depend on its width only, a softmax's (its mask of :attr:`mask_rows` rows of
        :attr:`mask_keys`) on no block table's length, a transpose has none.  None without a vector unit."""
        if not self.dev.caps.vector:
            return []
        arr, d, heads = self.dev.caps.array, self.width, self.model.config.heads
        uses: list[tuple[Kernel, int]] = [(self.model.ln_f, d), (self.transpose, d)]
        for li, layer in enumerate(self.model.layers):
            uses += [(layer.ln1, d), (layer.ln2, d), (layer.add1, 2 * d), (layer.add2, 2 * d),
                     (self.softmax[li], heads * self.mask_keys)]
        out: list[tuple[Kernel, Consts, np.ndarray]] = []
        for kernel, cols in uses:
            if any(kernel == known for known, _, _ in out):  # equal kernels share their constants
                continue
            kernel.check(self.mask_rows, cols, arr)
            consts = kernel.consts(self.mask_rows, cols, arr)
            out.append((kernel, consts, consts.blob()))
        return out

    def resident(self, kernel: Kernel, cols: int) -> tuple[Consts, int]:
        """A kernel's constants and their device address (uploaded at construction), checked for inputs of
        ``cols`` columns and up to :attr:`mask_rows` rows."""
        kernel.check(self.mask_rows, cols, self.dev.caps.array)
        return self._consts[kernel]

    def _write(self, addr: int, data: np.ndarray) -> None:
        self.dev.write_mem(addr, data)
        self.stats.transfers += 1

    def _read(self, addr: int, shape: tuple[int, int], dtype: type) -> np.ndarray:
        self.stats.transfers += 1
        return self.dev.read_array(addr, shape, dtype)

    def _vector(self, kernel: Kernel, x: Mem, out: Mem, rows: int, cols: int) -> None:
        """One batch-wide kernel over ``rows`` rows, spread over the tiles, as a phase of its own."""
        phase = _Phase(self)
        phase.kernel(kernel, x, out, (0, rows), cols, spread=True)
        phase.run()

    def kv_address(self, block: int, layer: int, value: bool) -> int:
        """Device address of one layer's key (or value) rows of KV block ``block``.

        Each layer's keys (and values) of all blocks are one region, block after block, so blocks with
        consecutive ids are consecutive rows: a run of them in a block table is read by one GEMM.
        """
        return self.pool + ((2 * layer + value) * self.num_blocks + block) * self.kv_bytes

    def copy_blocks(self, copies: Seq[tuple[int, int]]) -> None:
        """Copy whole KV blocks ``src -> dst`` on the device (copy-on-write before a shared block is appended to)."""
        phase = _Phase(self)
        for src, dst in copies:
            for layer in range(self.model.config.layers):
                for value in (False, True):
                    phase.copy(self.kv_address(src, layer, value), self.kv_address(dst, layer, value), self.kv_bytes)
            self.stats.copies += 1
        phase.run()

    @staticmethod
    def _pair_runs(pairs: Seq[tuple[int, int]]) -> list[tuple[int, int, int]]:
        """``(first device block, first host block, blocks)`` of each run consecutive on both sides."""
        runs: list[tuple[int, int, int]] = []
        for dev_block, host_block in pairs:
            if runs and (dev_block, host_block) == (runs[-1][0] + runs[-1][2], runs[-1][1] + runs[-1][2]):
                runs[-1] = (*runs[-1][:2], runs[-1][2] + 1)
            else:
                runs.append((dev_block, host_block, 1))
        return runs

    def swap_out(self, pairs: Seq[tuple[int, int]]) -> None:
        """Copy device blocks to host blocks, ``(device, host)`` pairs (before the device blocks are reused)."""
        shape = (self.block_size, self.width)
        for dev_block, host_block, n in self._pair_runs(pairs):
            for layer in range(self.model.config.layers):
                for value in (False, True):
                    data = self._read(self.kv_address(dev_block, layer, value), (n * shape[0], shape[1]), np.int8)
                    self.host_kv[host_block:host_block + n, layer, int(value)] = data.reshape(n, *shape)
        self.stats.swapped_out += len(pairs)

    def swap_in(self, pairs: Seq[tuple[int, int]]) -> None:
        """Copy host blocks to device blocks, ``(host, device)`` pairs."""
        for dev_block, host_block, n in self._pair_runs([(d, h) for h, d in pairs]):
            for layer in range(self.model.config.layers):
                for value in (False, True):
                    self._write(self.kv_address(dev_block, layer, value),
                                np.ascontiguousarray(self.host_kv[host_block:host_block + n, layer, int(value)]))
        self.stats.swapped_in += len(pairs)

    @staticmethod
    def _runs(table: list[int], count: int) -> list[tuple[int, int]]:
        """``(first table index, blocks)`` of each run of consecutive block ids among the first ``count`` entries."""
        runs: list[tuple[int, int]] = []
        for i in range(count):
            if runs and table[i] == table[i - 1] + 1:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((i, 1))
        return runs

    # -- one step --------------------------------------------------------------------------------

    def run(self, items: Seq[ScheduledSeq], *, all_logits: bool = False) -> list[np.ndarray]:
        """Compute the scheduled tokens; per item, the logits of its last token (1, V) or of all of them.

        Each item's sequence must have a block table covering positions ``0 .. start + count - 1``, holding
        the keys and values of positions below ``start`` already.
        """
        if self._closed:
            raise ValueError("the model runner is closed")
        model, c, dev = self.model, self.model.config, self.dev
        bs, d, dh, arr, heads, vec = self.block_size, c.width, c.head_dim, dev.caps.array, c.heads, dev.caps.vector
        tokens, positions, rows = [], [], []
        for item in items:
            if item.start + item.count > c.context:
                raise ValueError(f"sequence {item.seq.seq_id} would hold {item.start + item.count} tokens; the "
                                 f"context is {c.context}")
            rows.append(len(tokens))
            tokens += item.seq.token_ids[item.start:item.start + item.count]
            positions += range(item.start, item.start + item.count)
        t = len(tokens)
        if t > self.max_num_tokens or len(items) > self.max_num_seqs:
            raise ValueError(f"a step of {t} tokens over {len(items)} sequences: this runner takes at most "
                             f"{self.max_num_tokens} tokens over {self.max_num_seqs} sequences")
        x = model.embed(tokens, positions)
        # Every sequence's queries are one column block of Q^T, padded to whole chunks (views start there).
        cols = [padded(item.count, arr) for item in items]
        col0 = [sum(cols[:i]) for i in range(len(items))]
        tq = sum(cols)
        nblocks = [ceil_div(item.start + item.count, bs) for item in items]
        keys = [n * bs for n in nblocks]
        runs = [self._runs(item.seq.block_table, n) for item, n in zip(items, nblocks, strict=True)]
        n_wanted = t if all_logits else len(items)
        buf = _StepBuffers.carve(self, self._scratch, t, cols, keys, n_wanted)
        if buf.size > self.scratch_bytes:
            raise RuntimeError(f"a step's buffers ({buf.size} B) outgrew the scratch reserved for the largest "
                               f"step ({self.scratch_bytes} B)")
        o_addr, a_addr, m_addr, k_addr, v_addr, hf_addr = buf.o, buf.a, buf.m, buf.k, buf.v, buf.hf
        xa, xm, h_addr, f_addr, qt_addr, q_addr, ht_addr = buf.xa, buf.xm, buf.h, buf.f, buf.qt, buf.q, buf.ht
        st_addrs, s_addrs, p_addrs = buf.st, buf.s, buf.p
        fp = padded(c.ffn, arr)
        if vec:
            self._write(xa, np.hstack([x, np.zeros_like(x)]))
            a_addr, m_addr, out_stride = xa + d, xm + d, 2 * d
        else:
            out_stride = d
        for li, layer in enumerate(model.layers):
            kv = _Phase(self)
            if vec:  # Q = h Wq^T over the batch, then each sequence's rows of Q to its columns of Q^T
                self._vector(layer.ln1, Mem(xa, 2 * d), Mem(h_addr, d), t, d)
                kv.gemm(t, d, d, h_addr, self.addr[f"{li}.wq_t"], q_addr, a_stride=d, b_stride=d, c_stride=d,
                        post=layer.post["q"], spread=True)
            else:  # Q^T = Wq h^T from the host's h^T, each sequence's columns padded to whole chunks
                h = layer.ln1.reference(x)
                self._write(h_addr, h)
                h_t = np.zeros((d, tq), np.int8)
                for item, row, at in zip(items, rows, col0, strict=True):
                    h_t[:, at:at + item.count] = h[row:row + item.count].T
                self._write(ht_addr, h_t)
                kv.gemm(d, d, tq, self.addr[f"{li}.wq"], ht_addr, qt_addr, a_stride=d, b_stride=tq,
                        c_stride=tq, post=layer.post["q"], spread=True)
            for w, out, post in (("wk_t", k_addr, "k"), ("wv_t", v_addr, "v")):
                kv.gemm(t, d, d, h_addr, self.addr[f"{li}.{w}"], out, a_stride=d, b_stride=d, c_stride=d,
                        post=layer.post[post], spread=True)
            kv.run()
            if vec:  # each sequence's rows of Q (and the next ones, as padding) to its columns of Q^T
                phase = _Phase(self)
                for row, at, w in zip(rows, col0, cols, strict=True):
                    phase.kernel(self.transpose, Mem(q_addr + row * d, d), Mem(qt_addr + at, tq), (0, w), d)
                phase.run()
            slots = _Phase(self)
            for item, row in zip(items, rows, strict=True):
                table, pos, end = item.seq.block_table, item.start, item.start + item.count
                while pos < end:  # one COPY per run of positions in physically consecutive blocks
                    first = pos
                    pos = min(end, (pos // bs + 1) * bs)
                    while pos < end and table[pos // bs] == table[pos // bs - 1] + 1:
                        pos = min(end, pos + bs)
                    src = (row + first - item.start) * d
                    for value, base in ((False, k_addr), (True, v_addr)):
                        slots.copy(base + src, self.kv_address(table[first // bs], li, value) + (first % bs) * d,
                                   (pos - first) * d)
            slots.run()
            scores = _Phase(self)
            for i, item in enumerate(items):
                table = item.seq.block_table
                for j in range(heads):
                    for b0, nb in runs[i]:
                        scores.gemm(nb * bs, dh, item.count, self.kv_address(table[b0], li, False) + j * dh,
                                    qt_addr + j * dh * tq + col0[i], st_addrs[i][j] + b0 * bs * cols[i],
                                    a_stride=d, b_stride=tq, c_stride=cols[i], post=layer.post["s"])
            scores.run()
            self._softmax(li, items, cols, keys, st_addrs, s_addrs, p_addrs)
            attend = _Phase(self)
            for i, (item, row) in enumerate(zip(items, rows, strict=True)):
                table, stride = item.seq.block_table, heads * keys[i]
                for j in range(heads):
                    terms = [GemmTerm(nb * bs, p_addrs[i] + j * keys[i] + b0 * bs,
                                      self.kv_address(table[b0], li, True) + j * dh, stride, d)
                             for b0, nb in runs[i]]
                    first = terms[0]
                    attend.gemm(item.count, first.k, dh, first.a_addr, first.b_addr, o_addr + row * d + j * dh,
                                a_stride=stride, b_stride=d, c_stride=d, post=layer.post["o"],
                                more=tuple(terms[1:]))
            attend.run()
            proj = _Phase(self)
            proj.gemm(t, d, d, o_addr, self.addr[f"{li}.wo_t"], a_addr, a_stride=d, b_stride=d, c_stride=out_stride,
                      post=layer.post["a"], bias=self.addr[f"{li}.bo"], spread=True)
            proj.run()
            if vec:
                self._vector(layer.add1, Mem(xa, 2 * d), Mem(xm, 2 * d), t, 2 * d)
                self._vector(layer.ln2, Mem(xm, 2 * d), Mem(h_addr, d), t, d)
            else:
                x = layer.add1.reference(np.hstack([x, self._read(a_addr, (t, d), np.int8)]))
                self._write(h_addr, layer.ln2.reference(x))
            mlp = _Phase(self)
            mlp.gemm(t, d, c.ffn, h_addr, self.addr[f"{li}.w1_t"], f_addr, a_stride=d, b_stride=fp,
                     c_stride=fp, post=layer.post["f"], bias=self.addr[f"{li}.b1"], spread=True)
            mlp.run()
            mlp = _Phase(self)
            mlp.gemm(t, c.ffn, d, f_addr, self.addr[f"{li}.w2_t"], m_addr, a_stride=fp, b_stride=d,
                     c_stride=out_stride,
                     post=layer.post["m"], bias=self.addr[f"{li}.b2"], spread=True)
            mlp.run()
            if vec:
                self._vector(layer.add2, Mem(xm, 2 * d), Mem(xa, 2 * d), t, 2 * d)
            else:
                x = layer.add2.reference(np.hstack([x, self._read(m_addr, (t, d), np.int8)]))
        # The rows whose logits are wanted: per item its last, or all of them.
        wanted = [(row + item.count - 1, 1) if not all_logits else (row, item.count)
                  for item, row in zip(items, rows, strict=True)]
        if vec:
            self._vector(model.ln_f, Mem(xa, 2 * d), Mem(h_addr, d), t, d)
            gather, at = _Phase(self), 0
            for row, n in wanted:
                gather.copy(h_addr + row * d, hf_addr + at * d, n * d)
                at += n
            gather.run()
        else:
            self._write(hf_addr, model.ln_f.reference(x[[r for row, n in wanted for r in range(row, row + n)]]))
        vp, logits_addr = self.vocab_padded, buf.logits
        head = _Phase(self)
        head.gemm(n_wanted, d, len(c.vocab), hf_addr, self.addr["head_t"], logits_addr, a_stride=d,
                  b_stride=vp, c_stride=vp * ACC_LANE_BYTES, post=None, spread=True)
        head.run()
        acc = self._read(logits_addr, (n_wanted, vp), np.int32)[:, :len(c.vocab)]
        logits = model.logits(acc)
        self.stats.steps += 1
        self.stats.tokens += t
        out, at = [], 0
        for item in items:
            n = item.count if all_logits else 1
            out.append(logits[at:at + n])
            at += n
        return out

    def _softmax(self, li: int, items: Seq[ScheduledSeq], cols: list[int], keys: list[int],
                 st_addrs: list[list[int]], s_addrs: list[int], p_addrs: list[int]) -> None:
        """Each sequence's int8 probabilities ``P`` (query rows, heads side by side) from its heads' ``S^T``."""
        layer, heads = self.model.layers[li], self.model.config.heads
        if not self.dev.caps.vector:
            for i, item in enumerate(items):
                p = np.zeros((item.count, heads * keys[i]), np.int8)  # the rows P V reads
                for j in range(heads):
                    s_t = self._read(st_addrs[i][j], (keys[i], cols[i]), np.int8)
                    p[:item.count, j * keys[i]:(j + 1) * keys[i]] = causal_probs(
                        layer.softmax, np.ascontiguousarray(s_t[:, :item.count].T), item.start)
                self._write(p_addrs[i], p)
            return
        transpose = _Phase(self)
        for i in range(len(items)):
            for j in range(heads):
                transpose.kernel(self.transpose, Mem(st_addrs[i][j], cols[i]),
                                 Mem(s_addrs[i] + j * keys[i], heads * keys[i]), (0, keys[i]), cols[i])
        transpose.run()
        softmax = _Phase(self)
        for i, item in enumerate(items):
            # The sequence's query rows are rows start .. of the causal softmax over the whole context: the
            # views begin `start` rows before the scores, so that row `start` is the first query's.  Only the
            # `count` rows P V reads (a decode step's one, not its chunk of padded query columns).
            stride = heads * keys[i]
            softmax.kernel(self.softmax[li], Mem(s_addrs[i] - item.start * stride, stride),
                           Mem(p_addrs[i] - item.start * stride, stride), (item.start, item.count), stride)
        softmax.run()

    def close(self) -> None:
        """Free the weights, the kernels' constants, the step scratch and the KV pool."""
        if not self._closed:
            self._closed = True
            for _, addr in self._consts.values():
                self.dev.free(addr)
            self.dev.free(self.pool)
            self.dev.free(self._scratch)
            self.dev.free(self._weights_base)
