"""The test-sized character model, trained once per test process (a few seconds) and shared by the serving tests.

One layer, width 32, context 32, trained for 150 steps on the first 12,000 characters of a public-domain
excerpt of the Sonnets (tests/data/sonnets_excerpt.txt); nothing is downloaded.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from dx1_bringup.serving.charlm import CharLMConfig, Checkpoint, train
from dx1_bringup.serving.quant_model import QuantCharLM

TEXT = (Path(__file__).parent / "data" / "sonnets_excerpt.txt").read_text()
TRAIN, HELD_BACK = TEXT[:12000], TEXT[12000:]
CONFIG = CharLMConfig("".join(sorted(set(TEXT))), context=32, width=32, heads=2, layers=1, ffn=64)


@functools.cache
def tiny_checkpoint() -> Checkpoint:
    return train(CONFIG, TRAIN, steps=150, seed=0)


@functools.cache
def tiny_model() -> QuantCharLM:
    return QuantCharLM(tiny_checkpoint())


def greedy_reference(model: QuantCharLM, prompt: str, max_tokens: int) -> str:
    """Greedy decoding on the unpaged int8 reference, the whole sequence recomputed for every token."""
    tokens = model.config.encode(prompt)
    for _ in range(max_tokens):
        tokens.append(int(np.argmax(model.reference_logits(tokens)[-1])))
    return model.config.decode(tokens[len(prompt):])
