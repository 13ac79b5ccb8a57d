"""A request's sequence: its tokens, where it is in its life, and the KV-cache blocks that hold it."""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field

from ..spec import ceil_div

__all__ = ["SamplingParams", "Sequence", "SequenceStatus"]


class SequenceStatus(enum.Enum):
    """WAITING (queued, or preempted and waiting to be recomputed), RUNNING (has blocks), SWAPPED (preempted,
    its blocks in host memory), FINISHED."""

    WAITING = "waiting"
    RUNNING = "running"
    SWAPPED = "swapped"
    FINISHED = "finished"


@dataclass(frozen=True)
class SamplingParams:
    """How the next tokens are chosen and when a sequence ends.

    ``temperature`` 0 is greedy decoding; ``top_p`` keeps the smallest set of tokens whose probability
    reaches it; ``seed`` makes sampling reproducible; ``stop`` ends the text before any of these strings.
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()


_ids = itertools.count()


@dataclass(eq=False)
class Sequence:
    """One sequence of tokens: the prompt, then what was generated.

    Attributes
    ----------
    token_ids:
        Prompt and completion tokens.
    num_prompt_tokens:
        How many of ``token_ids`` are the prompt.
    block_table:
        The KV-cache block ids holding positions ``[i * block_size, (i + 1) * block_size)``.
    num_computed_tokens:
        Positions whose keys and values are in the cache (after prefix-cache hits and computed steps).
    num_cached_tokens:
        Of those, how many came from the prefix cache when the sequence was (re)admitted.
    host_table:
        While swapped out: the host-memory blocks holding what ``block_table`` held.
    """

    token_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    arrival: float = 0.0
    seq_id: int = field(default_factory=lambda: next(_ids))
    status: SequenceStatus = SequenceStatus.WAITING
    block_table: list[int] = field(default_factory=list)
    host_table: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    num_prompt_tokens: int = -1
    finish_reason: str | None = None
    preemptions: int = 0

    def __post_init__(self) -> None:
        if not self.token_ids:
            raise ValueError("a sequence needs at least one prompt token")
        self.token_ids = list(self.token_ids)
        if self.num_prompt_tokens < 0:
            self.num_prompt_tokens = len(self.token_ids)

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def completion_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    def num_blocks(self, block_size: int) -> int:
        """Blocks needed to hold every token of the sequence."""
        return ceil_div(len(self.token_ids), block_size)

    def block_tokens(self, i: int, block_size: int) -> list[int]:
        """The tokens of block ``i`` (fewer than ``block_size`` for a partial last block)."""
        return self.token_ids[i * block_size:(i + 1) * block_size]

    @property
    def finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED
