"""The encoder workload: a transformer encoder block (pre-norm, multi-head attention, ReLU MLP) on DX-1.

The block is PyTorch's own ``nn.TransformerEncoderLayer`` (``norm_first=True``), at small sizes, with
seeded weights.  The same code builds the decoder workload (:mod:`.decoder`: causal self-attention, a GELU
MLP) from a :class:`BlockKind`.  It is quantised per tensor (calibrated on seeded inputs) into one graph:

* on DX-1, every matrix product, each one GEMM with its bias, ReLU and requantise fused into the POSTOP:
  the Q and V projections; K^T = W_k h^T (a product with the weights as the left operand, so the keys
  come out transposed, as Q K^T needs them; the key bias is dropped, which softmax cannot see);
  per head, Q_h K_h^T (views: the head's columns of Q, its rows of K^T) and P_h V_h written straight
  into the head's columns of the attention output; the output projection and the MLP;
* both residual connections as accumulating GEMMs: ``x1 = requant(o W_o^T + x (c I) + b_o)``, the
  residual a second GEMM term into the same accumulators, with the weights' scale chosen so that the
  residual's multiplier ``c`` is an integer (and the second one reads ``x1`` where the first wrote it);
* on the vector unit (:mod:`dx1_bringup.runtime.kernels`), each an integer kernel: both layer norms
  (of the quantised input and of ``x1``), the transpose of the normalised input (8x8 block TRANSPOSEs),
  the softmax of every head (an exp table, a 32-bit sum and its reciprocal; the decoder's with the
  causal mask) and the decoder's GELU (a table of every int8 pre-activation);
* on the host only the input's quantisation and the output's dequantisation: one device segment and two
  host transfers a forward pass.  A device without a vector unit runs the kernels' int reference on the
  host instead (the same integers, more segments).

Every on-device result is compared with the PyTorch integer reference (:mod:`dx1_bringup.torch.
graph_reference`) bit for bit, and the block's output with the float block's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from dx1_driver import Device, check_device

from ..runtime.graph import Graph, GraphSession, HostOp, QMatmul, RunStats, Value, View
from ..runtime.kernels import FUNCTIONS, P_ONE, LayerNorm, Softmax, TableMap, Transpose
from ..runtime.quant import INT8_MAX, quantize, quantize_bias, requant_multiplier, symmetric_scale
from ..spec import PostOpParams
from ..torch.graph_reference import run_reference

__all__ = ["SEQ", "MODEL", "HEADS", "FFN", "BlockSize", "SIZE", "BlockKind", "ENCODER", "make_block", "EncoderQuant",
           "quantize_encoder", "run_encoder", "run_block", "block_problem", "EncoderResult"]

#: Sequence length, model width, heads and MLP width (every one a multiple of the array size).
SEQ, MODEL, HEADS, FFN = 16, 32, 2, 64


@dataclass(frozen=True)
class BlockSize:
    """A block's sequence length, model width, attention heads and MLP width.

    Every width the graph slices (the model width, a head's width ``model // heads``, the MLP width and the
    sequence) must be a multiple of the bus width, 8, so that every view starts on a whole bus word.
    """

    seq: int = SEQ
    model: int = MODEL
    heads: int = HEADS
    ffn: int = FFN

    def __post_init__(self) -> None:
        for name in ("seq", "model", "heads", "ffn"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"a block's {name} must be a positive integer, not {value!r}")
        if self.model % self.heads:
            raise ValueError(f"a block's model width ({self.model}) must be a multiple of its heads ({self.heads})")
        for name, value in (("sequence", self.seq), ("head width", self.head), ("MLP width", self.ffn)):
            if value % 8:
                raise ValueError(f"a block's {name} must be a multiple of 8, not {value}")

    @property
    def head(self) -> int:
        """One head's width."""
        return self.model // self.heads

    def __str__(self) -> str:
        return f"sequence {self.seq}, d_model {self.model}, {self.heads} heads, MLP {self.ffn}"


#: The workload's block (``dx1 run encoder|decoder``).
SIZE = BlockSize()
#: The scale of the softmax's int8 probabilities (0 .. 127 for 0 .. 1).
P_SCALE = 1.0 / P_ONE


@dataclass(frozen=True)
class BlockKind:
    """Which block: ``causal`` self-attention or not, the MLP's ``activation`` (``relu`` or ``gelu``)."""

    name: str
    causal: bool
    activation: str


#: The encoder block: bidirectional attention, ReLU MLP.
ENCODER = BlockKind("encoder", causal=False, activation="relu")


def make_block(seed: int = 1, spec: BlockKind = ENCODER, size: BlockSize = SIZE) -> torch.nn.TransformerEncoderLayer:
    """PyTorch's pre-norm encoder layer at ``size``, with seeded weights and biases."""
    torch.manual_seed(seed)
    block = torch.nn.TransformerEncoderLayer(size.model, size.heads, size.ffn, dropout=0.0, activation=spec.activation,
                                             batch_first=True, norm_first=True)
    with torch.no_grad():
        for p in block.parameters():
            if p.dim() == 1:
                p.uniform_(-0.1, 0.1)  # PyTorch zeroes the attention biases; give every bias something to do
    return block.eval()


@dataclass
class _Float:
    """The block's weights in float64, split per projection."""

    wq: np.ndarray
    wk: np.ndarray
    wv: np.ndarray
    bq: np.ndarray
    bv: np.ndarray
    wo: np.ndarray
    bo: np.ndarray
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    ln1: torch.nn.LayerNorm
    ln2: torch.nn.LayerNorm

    @classmethod
    def of(cls, block: torch.nn.TransformerEncoderLayer) -> _Float:
        w = block.self_attn.in_proj_weight.detach().double().numpy()
        b = block.self_attn.in_proj_bias.detach().double().numpy()
        d = block.self_attn.embed_dim

        def p(t):
            return t.detach().double().numpy()

        return cls(w[:d], w[d:2 * d], w[2 * d:], b[:d], b[2 * d:], p(block.self_attn.out_proj.weight),
                   p(block.self_attn.out_proj.bias), p(block.linear1.weight), p(block.linear1.bias),
                   p(block.linear2.weight), p(block.linear2.bias), block.norm1, block.norm2)

    def layer_norm(self, which: torch.nn.LayerNorm, x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return which(torch.from_numpy(x).float()).double().numpy()

    def forward(self, x: np.ndarray, spec: BlockKind = ENCODER, size: BlockSize = SIZE) -> dict[str, np.ndarray]:
        """Every intermediate of the float block (float64), for calibration."""
        seq, heads, dh = size.seq, size.heads, size.head
        h = self.layer_norm(self.ln1, x)
        q, k, v = h @ self.wq.T + self.bq, h @ self.wk.T, h @ self.wv.T + self.bv
        scores = np.concatenate([q[:, i * dh:(i + 1) * dh] @ k[:, i * dh:(i + 1) * dh].T / math.sqrt(dh)
                                 for i in range(heads)], axis=1)
        # A masked score takes no part in the softmax, nor in its calibration.
        masked = np.triu(np.ones((seq, seq), bool), 1) if spec.causal else np.zeros((seq, seq), bool)
        p = np.concatenate([_softmax(np.where(masked, -np.inf, scores[:, i * seq:(i + 1) * seq]))
                            for i in range(heads)], axis=1)
        scores = np.where(np.tile(masked, (1, heads)), 0.0, scores)
        o = np.concatenate([p[:, i * seq:(i + 1) * seq] @ v[:, i * dh:(i + 1) * dh] for i in range(heads)], axis=1)
        x1 = x + o @ self.wo.T + self.bo
        h2 = self.layer_norm(self.ln2, x1)
        fpre = h2 @ self.w1.T + self.b1
        f = np.maximum(fpre, 0) if spec.activation == "relu" else FUNCTIONS["gelu"](fpre)
        y = x1 + f @ self.w2.T + self.b2
        return {"x": x, "h": h, "q": q, "kT": k.T, "v": v, "scores": scores, "o": o, "x1": x1, "h2": h2,
                "fpre": fpre, "f": f, "y": y}


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@dataclass
class EncoderQuant:
    """The quantised block: the graph, and the scales of its input and output."""

    graph: Graph
    x_scale: float
    y_scale: float
    #: The residual multipliers chosen for the two accumulating GEMMs.
    residual: tuple[int, int]


def _residual_weights(w: np.ndarray, s_in: float, s_res: float) -> tuple[np.ndarray, float, int]:
    """Weights ``w`` quantised so that a residual at scale ``s_res`` enters the same accumulator as an integer.

    The accumulator's unit is ``s_in * s_w``; the residual adds ``x_q * c`` with ``c = s_res / (s_in * s_w)``.
    ``c`` is the largest integer (1 .. 127) for which ``w`` still fits in int8 at ``s_w = s_res / (c s_in)``.
    """
    c = int(np.clip(math.floor(INT8_MAX * s_res / (np.max(np.abs(w)) * s_in)), 1, INT8_MAX))
    s_w = s_res / (c * s_in)
    return quantize(w, s_w), s_w, c


def _layer_norm(ln: torch.nn.LayerNorm, s_in: float, s_out: float) -> LayerNorm:
    return LayerNorm(ln.weight.detach().double().numpy(), ln.bias.detach().double().numpy(), s_in, s_out, ln.eps)


def quantize_encoder(block: torch.nn.TransformerEncoderLayer, calibration: list[np.ndarray],
                     spec: BlockKind = ENCODER, size: BlockSize = SIZE) -> EncoderQuant:
    """The block as a graph of quantised operators (see the module docstring), scales from ``calibration``."""
    seq, d, heads, ffn = size.seq, size.model, size.heads, size.ffn
    if spec.activation not in ("relu", "gelu"):
        raise ValueError(f"the block's MLP activation must be relu or gelu, not {spec.activation!r}")
    fl = _Float.of(block)
    peaks: dict[str, float] = {}
    for x in calibration:
        for name, value in fl.forward(x.astype(np.float64), spec, size).items():
            peaks[name] = max(peaks.get(name, 0.0), float(np.max(np.abs(value))))
    s = {name: (peak / INT8_MAX if peak > 0 else 1.0) for name, peak in peaks.items()}
    dh = size.head
    g = Graph()
    g.add_input(Value("x", seq, d, "float32", s["x"]))
    for name, rows, cols in (("xq", seq, d), ("h", seq, d), ("hT", d, seq), ("q", seq, d),
                             ("kT", d, seq), ("v", seq, d), ("scores", seq, heads * seq),
                             ("p", seq, heads * seq), ("o", seq, d), ("x1", seq, d), ("h2", seq, d),
                             *((("fpre", seq, ffn),) if spec.activation == "gelu" else ()), ("f", seq, ffn),
                             ("y", seq, d)):
        g.add_value(Value(name, rows, cols, "int8", s.get(name, P_SCALE)))
    g.add_value(Value("out", seq, d, "float32"))

    def post(real: float, relu: bool = False) -> PostOpParams:
        return PostOpParams(*requant_multiplier(real), relu)

    def host(name: str, inputs: tuple[str, ...], out: str, fn: Callable[..., np.ndarray]) -> None:
        g.add(HostOp(name, inputs, out, fn))

    host("quantize", ("x",), "xq", lambda x: quantize(x, s["x"]))
    g.kernel("layer_norm1", "xq", "h", _layer_norm(fl.ln1, s["x"], s["h"]))
    g.kernel("transpose", "h", "hT", Transpose())
    sw = {name: symmetric_scale(getattr(fl, name)) for name in ("wq", "wk", "wv", "w1")}
    g.linear("q_proj", "h", "q", quantize(fl.wq, sw["wq"]), quantize_bias(fl.bq, s["h"] * sw["wq"]),
             post(s["h"] * sw["wq"] / s["q"]))
    g.add_const("k_proj.weight", quantize(fl.wk, sw["wk"]))
    g.add(QMatmul("k_proj", ((View("k_proj.weight"), View("hT")),), View("kT"), None,
                  post(sw["wk"] * s["h"] / s["kT"])))
    g.linear("v_proj", "h", "v", quantize(fl.wv, sw["wv"]), quantize_bias(fl.bv, s["h"] * sw["wv"]),
             post(s["h"] * sw["wv"] / s["v"]))
    for i in range(heads):
        g.add(QMatmul(f"scores{i}", ((View("q", col0=i * dh, cols=dh), View("kT", row0=i * dh, rows=dh)),),
                      View("scores", col0=i * seq, cols=seq), None,
                      post(s["q"] * s["kT"] / (math.sqrt(dh) * s["scores"]))))

    g.kernel("softmax", "scores", "p", Softmax(s["scores"], groups=heads, causal=spec.causal))
    for i in range(heads):
        g.add(QMatmul(f"attend{i}", ((View("p", col0=i * seq, cols=seq), View("v", col0=i * dh, cols=dh)),),
                      View("o", col0=i * dh, cols=dh), None, post(P_SCALE * s["v"] / s["o"])))
    wo, s_wo, c1 = _residual_weights(fl.wo, s["o"], s["x"])
    g.add_const("residual1.identity", (np.eye(d) * c1).astype(np.int8))
    g.add_const("out_proj.weight", wo.T.copy())
    g.add(QMatmul("out_proj", ((View("o"), View("out_proj.weight")), (View("xq"), View("residual1.identity"))),
                  View("x1"), quantize_bias(fl.bo, s["o"] * s_wo), post(s["o"] * s_wo / s["x1"])))
    g.kernel("layer_norm2", "x1", "h2", _layer_norm(fl.ln2, s["x1"], s["h2"]))
    if spec.activation == "relu":
        g.linear("ffn1", "h2", "f", quantize(fl.w1, sw["w1"]), quantize_bias(fl.b1, s["h2"] * sw["w1"]),
                 post(s["h2"] * sw["w1"] / s["f"], relu=True))
    else:
        g.linear("ffn1", "h2", "fpre", quantize(fl.w1, sw["w1"]), quantize_bias(fl.b1, s["h2"] * sw["w1"]),
                 post(s["h2"] * sw["w1"] / s["fpre"]))
        g.kernel("gelu", "fpre", "f", TableMap("gelu", s["fpre"], s["f"]))
    w2, s_w2, c2 = _residual_weights(fl.w2, s["f"], s["x1"])
    g.add_const("residual2.identity", (np.eye(d) * c2).astype(np.int8))
    g.add_const("ffn2.weight", w2.T.copy())
    g.add(QMatmul("ffn2", ((View("f"), View("ffn2.weight")), (View("x1"), View("residual2.identity"))),
                  View("y"), quantize_bias(fl.b2, s["f"] * s_w2), post(s["f"] * s_w2 / s["y"])))
    host("dequantize", ("y",), "out", lambda y: (y.astype(np.float64) * s["y"]).astype(np.float32))
    g.outputs = ["out"]
    return EncoderQuant(g, s["x"], s["y"], (c1, c2))


@dataclass
class EncoderResult:
    """Per device: the run's statistics and which on-device operators equal the int reference bit for bit."""

    float_error: float
    int_error: float
    plan: str = ""
    stats: dict[str, RunStats] = field(default_factory=dict)
    mismatches: dict[str, list[str]] = field(default_factory=dict)
    placement: list[tuple[str, str]] = field(default_factory=list)
    residual: tuple[int, int] = (0, 0)


def _relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def run_encoder(devices: list[str] | list[Device], *, seed: int = 1, tiles: int | None = None,
                progress: Callable[[str], None] = lambda _: None) -> EncoderResult:
    """Quantise the encoder block, run one forward pass on every device, compare with the references."""
    return run_block(ENCODER, devices, seed=seed, tiles=tiles, progress=progress)


def block_problem(spec: BlockKind, seed: int = 1, size: BlockSize = SIZE
                  ) -> tuple[torch.nn.TransformerEncoderLayer, EncoderQuant, np.ndarray]:
    """The seeded ``spec`` block at ``size``, its quantised graph (calibrated on 16 seeded inputs) and an input."""
    block = make_block(seed, spec, size)
    rng = np.random.default_rng(seed)
    calibration = [rng.standard_normal((size.seq, size.model)) for _ in range(16)]
    quant = quantize_encoder(block, calibration, spec, size)
    x = rng.standard_normal((size.seq, size.model)).astype(np.float32)
    return block, quant, x


def run_block(spec: BlockKind, devices: list[str] | list[Device], *, seed: int = 1, tiles: int | None = None,
              progress: Callable[[str], None] = lambda _: None) -> EncoderResult:
    """Quantise the ``spec`` block, run one forward pass on every device, compare with the references."""
    for target in devices:  # a malformed device string is refused before any work
        if isinstance(target, str):
            check_device(target)
    block, quant, x = block_problem(spec, seed)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(SEQ) if spec.causal else None
    with torch.no_grad():
        want = block(torch.from_numpy(x)[None], src_mask=mask, is_causal=spec.causal)[0].double().numpy()
    reference = run_reference(quant.graph, {"x": x})
    result = EncoderResult(float_error=_relative_error(reference["out"].astype(np.float64), want), int_error=0.0,
                           placement=quant.graph.placement(), residual=quant.residual)
    for device in devices:
        name = device if isinstance(device, str) else "device"
        progress(f"one forward pass of the {spec.name} block on {name}")
        dev = Device.open(device) if isinstance(device, str) else device
        try:
            with GraphSession(dev, quant.graph, tiles=tiles) as session:
                result.plan = session.plan_text()
                result.placement = session.placement()
                device_ops = [op for op in quant.graph.ops if session.on_device(op)]
            # Every on-device result, to check, from a session that keeps each one (no memory shared) ...
            keep = tuple(dict.fromkeys(op.writes for op in device_ops))
            with GraphSession(dev, quant.graph, tiles=tiles, keep=keep) as checking:
                out, _ = checking.run({"x": x}, keep=keep)
            # ... and what a forward pass costs, with the planned memory.
            with GraphSession(dev, quant.graph, tiles=tiles) as session:
                again, stats = session.run({"x": x})
            if not np.array_equal(again["out"], out["out"]):
                raise RuntimeError(f"two forward passes on {name} gave different outputs")
        finally:
            if isinstance(device, str):
                dev.close()
        wrong = []
        for op in device_ops:
            rows, cols = op.out.shape(quant.graph)
            region = (slice(op.out.row0, op.out.row0 + rows), slice(op.out.col0, op.out.col0 + cols))
            if not np.array_equal(out[op.writes][region], reference[op.writes][region]):
                wrong.append(op.name)
        result.mismatches[name] = wrong
        result.stats[name] = stats
        result.int_error = max(result.int_error, _relative_error(out["out"].astype(np.float64),
                                                                 reference["out"].astype(np.float64)))
    return result
