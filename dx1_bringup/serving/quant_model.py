"""The character model quantised to int8, its float reference and its unpaged int8 reference (numpy).

Per layer, with per-tensor symmetric scales calibrated on the float model (``s_name``):

* ``h = LN1(x)``: the residual stream ``x`` is int8 at ``s_x1`` (the embeddings quantised, then each add's
  result), the integer layer norm :class:`~dx1_bringup.runtime.kernels.LayerNorm` (on the vector unit);
* device: ``K = rq(h Wk^T)``, ``V = rq(h Wv^T)`` (written straight into the KV cache's blocks), and
  ``Q^T = rq(Wq h^T)`` (queries transposed, so that each key block is the *left* operand and its scores come
  out as rows: ``S^T = rq(K_blk Q^T / sqrt(d))``; a bias would be per row there, hence projections without);
* ``P``: the integer causal softmax (:class:`~dx1_bringup.runtime.kernels.Softmax`) of each query's scores,
  int8 at scale 1/127 (:data:`P_SCALE`);
* device: ``O_h = rq(sum_blk P_blk V_blk)``, ``A = rq(O Wo^T + bo)``, ``F = relu(rq(h2 W1^T + b1))``,
  ``M = rq(F W2^T + b2)``; the residual adds ``x2 = q(x s_x1 + A s_A)`` at ``s_x2`` and
  ``x = q(x2 s_x2 + M s_M)`` at the next layer norm's input scale (:class:`.residual.ResidualAdd`, integer
  multipliers), ``h2 = LN2(x2)``;
* ``hf = LNf(x)``; device: the unembedding's int32 accumulators ``hf Wh^T``; host:
  ``logits = acc s_hf s_Wh + bh``.

``rq`` is DX-1's POSTOP (:func:`~dx1_bringup.model.tile.requantize`) with the multiplier of the scales.
:meth:`QuantCharLM.reference_logits` runs all of it on one whole sequence with numpy GEMMs, the kernels' int
references and no cache: the paged runner on a device must give the same logits bit for bit, whatever the
batch and block size, because each int8 product is exact, the kernels work on one row (one query) at a time,
and a causal softmax's masked keys add exactly nothing (so the number of keys a row is padded to is moot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..runtime.kernels import LayerNorm, Softmax
from ..runtime.quant import INT8_MAX, quantize, quantize_bias, requant_multiplier, symmetric_scale
from ..runtime.reference import reference_gemm
from ..spec import PostOpParams
from .charlm import CharLMConfig, Checkpoint
from .residual import ResidualAdd

__all__ = ["FloatCharLM", "QuantCharLM", "QuantLayer", "P_SCALE", "causal_probs", "layer_norm"]

#: The scale of the softmax's int8 probabilities (0 .. 127 for 0 .. 1).
P_SCALE = 1.0 / INT8_MAX
_EPS = 1e-5


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Row-wise layer norm (torch's, eps 1e-5) in float64."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + _EPS) * weight + bias


def causal_probs(softmax: Softmax, scores: np.ndarray, start: int) -> np.ndarray:
    """The int8 probabilities of queries at positions ``start ..`` from their int8 scores over keys ``0 ..``.

    ``scores`` (queries, keys) are rows ``start ..`` of a causal softmax whose query ``i`` sees keys ``<= i``;
    the keys past a query's own are masked, so they may be anything (an unwritten slot of a KV block).
    """
    rows, keys = scores.shape
    whole = np.zeros((start + rows, keys), np.int8)
    whole[start:] = scores
    return softmax.reference(whole)[start:]


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class FloatCharLM:
    """The float model in numpy (float64): logits, and every activation for calibration."""

    def __init__(self, ckpt: Checkpoint):
        self.config, self.w = ckpt.config, {k: v.astype(np.float64) for k, v in ckpt.weights.items()}

    def forward(self, tokens: list[int], peaks: dict[str, float] | None = None) -> np.ndarray:
        """Logits (T, V) of every position; with ``peaks``, each activation's largest magnitude is recorded."""
        c, w = self.config, self.w
        t = len(tokens)
        d = c.head_dim

        def seen(name: str, value: np.ndarray) -> np.ndarray:
            if peaks is not None:
                peaks[name] = max(peaks.get(name, 0.0), float(np.max(np.abs(value))))
            return value

        x = w["tok.weight"][tokens] + w["pos.weight"][:t]
        causal = np.triu(np.ones((t, t), dtype=bool), 1)
        for i in range(c.layers):
            p = f"blocks.{i}."
            h = seen(p + "h", layer_norm(seen(p + "x1", x), w[p + "ln1.weight"], w[p + "ln1.bias"]))
            q, k, v = (seen(p + n, h @ w[p + f"w{n}.weight"].T) for n in "qkv")
            o = np.zeros_like(x)
            for j in range(c.heads):
                cols = slice(j * d, (j + 1) * d)
                s = seen(p + "s", q[:, cols] @ k[:, cols].T / math.sqrt(d))
                o[:, cols] = _softmax(np.where(causal, -np.inf, s)) @ v[:, cols]
            seen(p + "o", o)
            x = x + seen(p + "a", o @ w[p + "wo.weight"].T + w[p + "wo.bias"])
            h2 = seen(p + "h2", layer_norm(seen(p + "x2", x), w[p + "ln2.weight"], w[p + "ln2.bias"]))
            f = seen(p + "f", np.maximum(h2 @ w[p + "fc1.weight"].T + w[p + "fc1.bias"], 0))
            x = x + seen(p + "m", f @ w[p + "fc2.weight"].T + w[p + "fc2.bias"])
        hf = seen("hf", layer_norm(seen("xf", x), w["ln_f.weight"], w["ln_f.bias"]))
        return hf @ w["head.weight"].T + w["head.bias"]


def _post(real: float, relu: bool = False) -> PostOpParams:
    return PostOpParams(*requant_multiplier(real), relu)


@dataclass
class QuantLayer:
    """One block's int8 weights (in the layout the device reads), int32 biases, scales and requantisations."""

    wq: np.ndarray      # (D, D): the left operand of Q^T = Wq h^T
    wk_t: np.ndarray    # (D, D): K = h Wk^T
    wv_t: np.ndarray
    wo_t: np.ndarray
    bo: np.ndarray
    w1_t: np.ndarray    # (D, F)
    b1: np.ndarray
    w2_t: np.ndarray    # (F, D)
    b2: np.ndarray
    ln1: LayerNorm      # int8 x at s_x1 -> h at s_h
    ln2: LayerNorm      # int8 x at s_x2 -> h2 at s_h2
    softmax: Softmax    # causal, one head's scores at s_s -> int8 probabilities at 1/127
    add1: ResidualAdd   # [x | A] -> x2 at s_x2
    add2: ResidualAdd   # [x2 | M] -> the next layer's x (or the final layer norm's input)
    s: dict[str, float]
    post: dict[str, PostOpParams]


class QuantCharLM:
    """The int8 model: weights and scales for the device, and the unpaged reference of the whole computation.

    Parameters
    ----------
    ckpt:
        The trained model.
    calibration:
        Texts whose float activations set the scales (default: the checkpoint's ``info["calibration"]``).
    """

    def __init__(self, ckpt: Checkpoint, calibration: list[str] | None = None):
        self.config: CharLMConfig = ckpt.config
        self.float = FloatCharLM(ckpt)
        c, w = self.config, self.float.w
        texts = calibration if calibration is not None else ckpt.info["calibration"]
        self.calibration = list(texts)
        peaks: dict[str, float] = {}
        for text in texts:
            self.float.forward(c.encode(text)[:c.context], peaks)
        scale = {name: peak / INT8_MAX if peak > 0 else 1.0 for name, peak in peaks.items()}
        self.tok, self.pos = w["tok.weight"], w["pos.weight"]
        self.layers: list[QuantLayer] = []
        dh = math.sqrt(c.head_dim)
        for i in range(c.layers):
            p = f"blocks.{i}."
            s = {n: scale[p + n] for n in ("x1", "h", "q", "k", "v", "s", "o", "a", "x2", "h2", "f", "m")}
            sw = {n: symmetric_scale(w[p + n + ".weight"]) for n in ("wq", "wk", "wv", "wo", "fc1", "fc2")}
            qw = {n: quantize(w[p + n + ".weight"], sw[n]) for n in sw}
            post = {"q": _post(sw["wq"] * s["h"] / s["q"]), "k": _post(s["h"] * sw["wk"] / s["k"]),
                    "v": _post(s["h"] * sw["wv"] / s["v"]), "s": _post(s["k"] * s["q"] / (dh * s["s"])),
                    "o": _post(P_SCALE * s["v"] / s["o"]), "a": _post(s["o"] * sw["wo"] / s["a"]),
                    "f": _post(s["h2"] * sw["fc1"] / s["f"], relu=True), "m": _post(s["f"] * sw["fc2"] / s["m"])}
            self.layers.append(QuantLayer(
                qw["wq"], qw["wk"].T.copy(), qw["wv"].T.copy(), qw["wo"].T.copy(),
                quantize_bias(w[p + "wo.bias"], s["o"] * sw["wo"]), qw["fc1"].T.copy(),
                quantize_bias(w[p + "fc1.bias"], s["h2"] * sw["fc1"]), qw["fc2"].T.copy(),
                quantize_bias(w[p + "fc2.bias"], s["f"] * sw["fc2"]),
                LayerNorm(w[p + "ln1.weight"], w[p + "ln1.bias"], s["x1"], s["h"], _EPS),
                LayerNorm(w[p + "ln2.weight"], w[p + "ln2.bias"], s["x2"], s["h2"], _EPS),
                Softmax(s["s"], causal=True), ResidualAdd(s["x1"], s["a"], s["x2"]),
                ResidualAdd(s["x2"], s["m"], scale[f"blocks.{i + 1}.x1"] if i + 1 < c.layers else scale["xf"]),
                s, post))
        self.s_hf = scale["hf"]
        s_head = symmetric_scale(w["head.weight"])
        self.head_t = quantize(w["head.weight"], s_head).T.copy()  # (D, V)
        self.head_scale = self.s_hf * s_head
        self.head_bias = w["head.bias"]
        self.s_xf = scale["xf"]
        self.ln_f = LayerNorm(w["ln_f.weight"], w["ln_f.bias"], self.s_xf, self.s_hf, _EPS)

    # -- host steps, shared by the reference and the device runner ---------------------------------

    def embed(self, tokens: list[int], positions: list[int]) -> np.ndarray:
        """The residual stream's first value: the embeddings, int8 at the first layer norm's input scale."""
        return quantize(self.tok[tokens] + self.pos[positions], self.layers[0].s["x1"])

    def logits(self, acc: np.ndarray) -> np.ndarray:
        return acc.astype(np.float64) * self.head_scale + self.head_bias

    # -- the unpaged reference -----------------------------------------------------------------------

    def reference_logits(self, tokens: list[int]) -> np.ndarray:
        """Logits (T, V) of every position of one sequence, computed whole with numpy GEMMs (no KV cache)."""
        c = self.config
        t = len(tokens)
        if not 1 <= t <= c.context:
            raise ValueError(f"a sequence must have 1 to {c.context} tokens, not {t}")
        d = c.head_dim
        x = self.embed(tokens, list(range(t)))
        for layer in self.layers:
            h = layer.ln1.reference(x)
            k = reference_gemm(h, layer.wk_t, post=layer.post["k"])
            v = reference_gemm(h, layer.wv_t, post=layer.post["v"])
            q_t = reference_gemm(layer.wq, np.ascontiguousarray(h.T), post=layer.post["q"])
            o = np.zeros((t, c.width), np.int8)
            for j in range(c.heads):
                cols = slice(j * d, (j + 1) * d)
                s_t = reference_gemm(np.ascontiguousarray(k[:, cols]), np.ascontiguousarray(q_t[cols]),
                                     post=layer.post["s"])
                p = causal_probs(layer.softmax, np.ascontiguousarray(s_t.T), 0)
                o[:, cols] = reference_gemm(p, np.ascontiguousarray(v[:, cols]), post=layer.post["o"])
            a = reference_gemm(o, layer.wo_t, layer.bo, layer.post["a"])
            x = layer.add1.reference(np.hstack([x, a]))
            f = reference_gemm(layer.ln2.reference(x), layer.w1_t, layer.b1, layer.post["f"])
            m = reference_gemm(f, layer.w2_t, layer.b2, layer.post["m"])
            x = layer.add2.reference(np.hstack([x, m]))
        return self.logits(reference_gemm(self.ln_f.reference(x), self.head_t))
