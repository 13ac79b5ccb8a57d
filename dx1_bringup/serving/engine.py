"""The serving engine: requests in, tokens out, one scheduled step at a time.

:class:`LLMEngine` ties the parts together: the :class:`~.scheduler.Scheduler` picks a batch, the
:class:`~.runner.ModelRunner` computes it on the device (after the batch's copy-on-write copies), and the
engine samples each sequence's next token, applies its stop conditions and frees finished sequences' blocks
at once.  A request with ``n > 1`` is one sequence until its prompt is computed; then it forks into ``n``
sequences that share the prompt's blocks (the first append to a shared block copies it).

The engine is synchronous and single-threaded: the server (:mod:`.server`) calls :meth:`LLMEngine.step`
from one worker thread and hands the :class:`TokenEvent` s to the clients' streams.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np
from dx1_driver import Device

from .block_manager import BlockManager
from .quant_model import QuantCharLM
from .runner import ModelRunner
from .scheduler import BATCHING, Scheduler, StaticScheduler
from .sequence import SamplingParams, Sequence

__all__ = ["EngineConfig", "LLMEngine", "RequestState", "TokenEvent", "sample"]


@dataclass(frozen=True)
class EngineConfig:
    """The KV cache and the scheduler: ``batching`` is one of :data:`~.scheduler.BATCHING`; ``preemption`` is
    ``recompute`` or ``swap`` (to ``num_host_blocks`` blocks of host memory)."""

    #: KV blocks per device; None: as many as fit beside the weights and the largest step's scratch.
    num_blocks: int | None = None
    block_size: int = 16
    max_num_seqs: int = 16
    #: The scheduler's token budget (the context at least).  The runner reserves the scratch of the largest
    #: step it allows (and ``max_num_seqs``) before the KV blocks: on the golden model's 1 MiB, 128 tokens and
    #: 16 sequences leave 115 blocks.
    max_num_batched_tokens: int = 128
    batching: str = "continuous"
    prefix_caching: bool = True
    preemption: str = "recompute"
    num_host_blocks: int = 128

    def __post_init__(self) -> None:
        if self.batching not in BATCHING:
            raise ValueError(f"batching must be one of {', '.join(BATCHING)}, not {self.batching!r}")
        if self.preemption not in ("recompute", "swap"):
            raise ValueError(f"preemption must be 'recompute' or 'swap', not {self.preemption!r}")


@dataclass(frozen=True)
class TokenEvent:
    """What one step produced for one sample of a request: new text (possibly empty) and whether it ended."""

    request_id: str
    index: int
    text: str
    tokens: int
    finish_reason: str | None
    time: float


@dataclass
class RequestState:
    """A request: its samples' sequences, what each has emitted, and its timings."""

    request_id: str
    prompt: list[int]
    params: SamplingParams
    n: int
    arrival: float
    seqs: list[Sequence] = field(default_factory=list)
    emitted: list[int] = field(default_factory=list)
    rngs: list[np.random.Generator] = field(default_factory=list)
    first_token: float | None = None

    @property
    def finished(self) -> bool:
        return len(self.seqs) == self.n and all(s.finished for s in self.seqs)


def sample(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """The next token: the argmax at temperature 0, else a draw from the temperature-scaled top-p distribution."""
    if params.temperature == 0:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / params.temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    if params.top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        keep = order[:int(np.searchsorted(np.cumsum(p[order]), params.top_p)) + 1]
        mask = np.zeros_like(p)
        mask[keep] = p[keep]
        p = mask / mask.sum()
    return int(rng.choice(len(p), p=p))


class LLMEngine:
    """The model on one device behind a block manager and a scheduler.

    Parameters
    ----------
    dev:
        An open device (the engine does not close it).
    model:
        The quantised model.
    config:
        The cache and scheduler settings.
    """

    def __init__(self, dev: Device, model: QuantCharLM, config: EngineConfig = EngineConfig()):
        self.model, self.config = model, config
        self.context = model.config.context
        host_blocks = config.num_host_blocks if config.preemption == "swap" else 0
        #: Tokens a step at most: the configured budget, or a whole context if that is more (a prompt is never
        #: cut for want of budget).
        self.token_budget = budget = max(config.max_num_batched_tokens, self.context)
        # The runner reserves the scratch of the largest step the scheduler can make, then the blocks.
        self.runner = ModelRunner(dev, model, config.num_blocks, config.block_size, num_host_blocks=host_blocks,
                                  max_num_tokens=budget, max_num_seqs=config.max_num_seqs)
        self.blocks = BlockManager(self.runner.num_blocks, config.block_size, prefix_caching=config.prefix_caching,
                                   num_host_blocks=host_blocks)
        limits = dict(max_num_seqs=config.max_num_seqs, max_num_batched_tokens=budget,
                      max_model_len=self.context, preemption=config.preemption)
        if config.batching == "continuous":
            self.scheduler = Scheduler(self.blocks, **limits)
        else:
            self.scheduler = StaticScheduler(self.blocks, padded=config.batching == "static", **limits)
        self.requests: dict[str, RequestState] = {}
        self._owner: dict[int, tuple[RequestState, int]] = {}
        self._seeds = itertools.count(1 << 32)
        #: Sequences ended by :meth:`abort` before they finished.
        self.aborted = 0

    # -- requests --------------------------------------------------------------------------------

    def check_prompt(self, prompt: str, max_tokens: int) -> list[int]:
        """The prompt's tokens, or a ValueError saying why the model cannot take it."""
        if not prompt:
            raise ValueError("prompt must not be empty")
        tokens = self.model.config.encode(prompt)
        if len(tokens) + max_tokens > self.context:
            raise ValueError(f"the prompt has {len(tokens)} tokens and max_tokens is {max_tokens}: together they "
                             f"exceed the model's context of {self.context} tokens")
        return tokens

    def add_request(self, request_id: str, prompt: str, params: SamplingParams, n: int = 1) -> RequestState:
        """Queue a request (FIFO); its events come from later :meth:`step` calls.

        Raises
        ------
        ValueError
            An empty prompt, a character the model does not know, a prompt plus ``max_tokens`` longer than
            the context, ``n`` below 1, or a request id already in use.
        """
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive integer, not {n!r}")
        tokens = self.check_prompt(prompt, params.max_tokens)
        state = RequestState(request_id, tokens, params, n, time.monotonic())
        seeds = [params.seed + i if params.seed is not None else next(self._seeds) for i in range(n)]
        state.rngs = [np.random.default_rng(s) for s in seeds]
        seq = Sequence(list(tokens), params, arrival=state.arrival)
        state.seqs.append(seq)
        state.emitted.append(0)
        self._owner[seq.seq_id] = (state, 0)
        self.requests[request_id] = state
        self.scheduler.add(seq)
        return state

    def abort(self, request_id: str) -> None:
        """End a request now (a client went away): every sequence of it frees its blocks."""
        state = self.requests.pop(request_id, None)
        if state is None:
            return
        for seq in state.seqs:
            if not seq.finished:
                self.scheduler.finish(seq, "abort")
                self.aborted += 1
            self._owner.pop(seq.seq_id, None)
        state.n = len(state.seqs)

    @property
    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished

    # -- stepping --------------------------------------------------------------------------------

    def _emit(self, state: RequestState, index: int, final: str | None, now: float) -> TokenEvent:
        seq = state.seqs[index]
        text = self.model.config.decode(seq.completion_ids)
        stops = state.params.stop
        cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
        if cut >= 0:
            text, final = text[:cut], "stop"
        elif final is None and stops:
            # Hold back what could still become a stop string.
            text = text[:max(state.emitted[index], len(text) - max(len(s) for s in stops) + 1)]
        delta = text[state.emitted[index]:]
        state.emitted[index] += len(delta)
        return TokenEvent(state.request_id, index, delta, seq.num_completion_tokens, final, now)

    def step(self) -> list[TokenEvent]:
        """Schedule, run and sample one step; the new text of every sequence that ran (empty if none could)."""
        batch = self.scheduler.schedule()
        # Swap-outs first, even in a step with nothing to run: their device blocks may be reused next.
        self.runner.swap_out(batch.swap_out)
        self.runner.swap_in(batch.swap_in)
        if not batch:
            return []
        self.runner.copy_blocks(batch.copies)
        logits = self.runner.run(batch.items + batch.padding)[:len(batch.items)]
        now = time.monotonic()
        events = []
        for item, rows in zip(batch.items, logits, strict=True):
            seq = item.seq
            seq.num_computed_tokens = item.start + item.count
            state, index = self._owner[seq.seq_id]
            if len(state.seqs) < state.n:  # the prompt is in the cache: fork the other samples
                for _ in range(state.n - 1):
                    child = Sequence(list(seq.token_ids), state.params, arrival=state.arrival,
                                     num_prompt_tokens=seq.num_prompt_tokens)
                    self.blocks.fork(seq, child)
                    self.scheduler.add_running(child)
                    self._owner[child.seq_id] = (state, len(state.seqs))
                    state.seqs.append(child)
                    state.emitted.append(0)
                    events += self._sample(state, len(state.seqs) - 1, rows[-1], now)
            events += self._sample(state, index, rows[-1], now)
        for state in {id(s): s for s in (self._owner[i.seq.seq_id][0] for i in batch.items)}.values():
            if state.finished:
                self.requests.pop(state.request_id, None)
                for seq in state.seqs:
                    self._owner.pop(seq.seq_id, None)
        return events

    def _sample(self, state: RequestState, index: int, logits: np.ndarray, now: float) -> list[TokenEvent]:
        seq = state.seqs[index]
        seq.token_ids.append(sample(logits, state.params, state.rngs[index]))
        if state.first_token is None:
            state.first_token = now
        final = "length" if seq.num_completion_tokens >= state.params.max_tokens or len(seq) >= self.context else None
        event = self._emit(state, index, final, now)
        if event.finish_reason is not None:
            self.scheduler.finish(seq, event.finish_reason)
        return [event]

    def generate(self, prompts: list[str], params: SamplingParams, n: int = 1) -> list[list[str]]:
        """Run prompts to completion (for tests and scripts): per prompt, the text of each of its ``n`` samples."""
        ids = [f"gen-{i}-{next(self._seeds)}" for i in range(len(prompts))]
        out = {rid: [""] * n for rid in ids}
        for rid, prompt in zip(ids, prompts, strict=True):
            self.add_request(rid, prompt, params, n)
        while self.has_unfinished:
            for event in self.step():
                out[event.request_id][event.index] += event.text
        return [out[rid] for rid in ids]

    # -- state for metrics -------------------------------------------------------------------------

    def kv_slots(self) -> tuple[int, int]:
        """``(filled, allocated)`` token slots of the blocks in use: waste is the slots allocated but not filled."""
        bs = self.config.block_size
        filled: dict[int, int] = {}
        for seq in self.scheduler.running:
            for i, block in enumerate(seq.block_table):
                filled[block] = max(filled.get(block, 0), max(0, min(bs, seq.num_computed_tokens - i * bs)))
        return sum(filled.values()), self.blocks.num_used * bs

    def close(self) -> None:
        """Free the model's device memory."""
        self.runner.close()
