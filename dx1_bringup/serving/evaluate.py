"""Perplexity of the float model, the int8 reference and a DX-1 device on held-back text, and greedy samples."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from dx1_driver import Device

from ..spec import ceil_div
from .block_manager import BlockManager
from .quant_model import QuantCharLM
from .runner import ModelRunner
from .scheduler import ScheduledSeq
from .sequence import Sequence

__all__ = ["Perplexity", "perplexities", "windows"]


@dataclass(frozen=True)
class Perplexity:
    """Per-character perplexity of each way of running the model over the same windows (and the characters)."""

    float: float
    int8_reference: float
    device: float | None
    characters: int
    device_equals_reference: bool | None


def windows(text: str, context: int, count: int) -> list[str]:
    """``count`` evenly spaced windows of ``context`` characters of ``text``."""
    if len(text) < context:
        raise ValueError(f"the text has {len(text)} characters; a window needs {context}")
    step = max(1, (len(text) - context) // max(1, count - 1)) if count > 1 else 1
    return [text[i:i + context] for i in range(0, len(text) - context + 1, step)][:count]


def _nll(logits: np.ndarray, tokens: list[int]) -> float:
    """Summed negative log-likelihood of ``tokens[1:]`` under ``logits[:-1]``."""
    z = logits[:-1].astype(np.float64)
    top = z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z - top).sum(axis=1)) + top[:, 0]
    return float(np.sum(lse - z[np.arange(len(z)), tokens[1:]]))


def perplexities(model: QuantCharLM, texts: list[str], dev: Device | None = None, block_size: int = 16) -> Perplexity:
    """Run every text (each at most one context long) through the float model, the int8 reference and ``dev``.

    On the device each text is one prefill through the paged runner; its logits must equal the reference's.
    """
    c = model.config
    sums = {"float": 0.0, "ref": 0.0, "dev": 0.0}
    chars, same = 0, True
    runner = None
    if dev is not None:
        blocks = ceil_div(c.context, block_size)
        runner = ModelRunner(dev, model, blocks, block_size, max_num_seqs=1)
    try:
        for text in texts:
            tokens = c.encode(text)
            ref = model.reference_logits(tokens)
            sums["float"] += _nll(model.float.forward(tokens), tokens)
            sums["ref"] += _nll(ref, tokens)
            if runner is not None:
                seq = Sequence(tokens)
                BlockManager(runner.num_blocks, block_size, prefix_caching=False).allocate(seq)
                got = runner.run([ScheduledSeq(seq, 0, len(tokens))], all_logits=True)[0]
                same = same and bool(np.array_equal(got, ref))
                sums["dev"] += _nll(got, tokens)
            chars += len(tokens) - 1
    finally:
        if runner is not None:
            runner.close()
    return Perplexity(math.exp(sums["float"] / chars), math.exp(sums["ref"] / chars),
                      math.exp(sums["dev"] / chars) if dev is not None else None, chars,
                      same if dev is not None else None)
