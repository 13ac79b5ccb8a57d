"""The decoder workload: a GPT-style pre-norm block (causal self-attention, GELU MLP) on DX-1.

PyTorch's ``nn.TransformerEncoderLayer(activation="gelu", norm_first=True)`` run with the causal mask is
exactly a decoder-only block; it is quantised and lowered by :mod:`.encoder` with :data:`DECODER`: the
softmax masks every key after its query (a constant added before the row maximum, so a masked lane
reads the exp table's zero entry) and the MLP's GELU is a table of every int8 pre-activation.
"""

from __future__ import annotations

from collections.abc import Callable

from dx1_driver import Device

from .encoder import BlockKind, EncoderResult, run_block

__all__ = ["DECODER", "run_decoder"]

#: The decoder block: causal self-attention, GELU MLP.
DECODER = BlockKind("decoder", causal=True, activation="gelu")


def run_decoder(devices: list[str] | list[Device], *, seed: int = 1, tiles: int | None = None,
                progress: Callable[[str], None] = lambda _: None) -> EncoderResult:
    """Quantise the decoder block, run one forward pass on every device, compare with the references."""
    return run_block(DECODER, devices, seed=seed, tiles=tiles, progress=progress)
