"""Post-training quantisation of a float MLP for DX-1: int8 weights and activations, int32 bias.

:func:`quantize_mlp` takes a float ``torch.nn.Sequential`` of ``Linear`` layers, each optionally followed by
a ``ReLU`` (fused into the layer's POSTOP), and calibration inputs.  Scales are symmetric and per tensor
(zero point 0): the input's and every layer output's scale cover the largest magnitude seen in
calibration, each weight's covers its largest weight.  A layer with input scale ``s_x``, weight scale
``s_w`` and output scale ``s_y`` gets ``bias_q = round(bias / (s_x s_w))`` and the POSTOP pair
``(mult, shift)`` of ``s_x s_w / s_y`` (:func:`~dx1_bringup.runtime.quant.requant_multiplier`).

The result, :class:`QuantizedMLP`, is an ``nn.Module`` whose forward quantises its float input on the
host, runs every layer as ``torch.ops.dx1.qlinear`` and dequantises the logits; the same integer network
runs on the PyTorch reference (:meth:`QuantizedMLP.reference_int`) and as one graph on the graph runtime
(:meth:`QuantizedMLP.to_graph`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..runtime.graph import Graph, Value
from ..runtime.quant import INT8_MAX, quantize, quantize_bias, requant_multiplier, symmetric_scale
from ..spec import PostOpParams
from .reference import qlinear_reference

__all__ = ["QuantizedLayer", "QuantizedMLP", "quantize_mlp", "quantize_input"]


def quantize_input(x: torch.Tensor, scale: float) -> torch.Tensor:
    """Float to int8 at ``scale``, rounded half away from zero (as the POSTOP rounds), saturated."""
    q = x.to(torch.float64) / scale
    return (torch.sign(q) * torch.floor(q.abs() + 0.5)).clamp(-INT8_MAX - 1, INT8_MAX).to(torch.int8)


@dataclass(frozen=True)
class QuantizedLayer:
    """One fused ``Linear (+ ReLU)`` layer: int8 weight (N, K), int32 bias, POSTOP pair, and its scales."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    mult: int
    shift: int
    relu: bool
    in_scale: float
    weight_scale: float
    out_scale: float


class QuantizedMLP(torch.nn.Module):
    """An int8 MLP that runs its layers on DX-1 (``torch.ops.dx1.qlinear``); float in, float logits out."""

    def __init__(self, layers: list[QuantizedLayer]):
        super().__init__()
        if not layers:
            raise ValueError("a quantised MLP needs at least one layer")
        self.layers = layers
        for i, layer in enumerate(layers):
            self.register_buffer(f"w{i}", layer.weight)
            self.register_buffer(f"b{i}", layer.bias)
        self.in_scale = layers[0].in_scale
        self.out_scale = layers[-1].out_scale

    def _params(self):
        for i, layer in enumerate(self.layers):
            yield getattr(self, f"w{i}"), getattr(self, f"b{i}"), layer

    def forward_int(self, q: torch.Tensor) -> torch.Tensor:
        """int8 input -> int8 logits, every layer on DX-1."""
        for w, b, layer in self._params():
            q = torch.ops.dx1.qlinear(q, w, b, layer.mult, layer.shift, layer.relu)
        return q

    def reference_int(self, q: torch.Tensor) -> torch.Tensor:
        """int8 input -> int8 logits on the PyTorch integer reference (no DX-1)."""
        for w, b, layer in self._params():
            q = qlinear_reference(q, w, b, layer.mult, layer.shift, layer.relu)
        return q

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = quantize_input(x.flatten(1), self.in_scale)
        return self.forward_int(q).to(torch.float32) * self.out_scale

    def to_graph(self, batch: int) -> Graph:
        """The network as a graph-runtime :class:`~dx1_bringup.runtime.graph.Graph` for ``batch`` rows.

        Its input is ``"x"`` (int8, ``batch x K``), its output ``"logits"`` (int8); the whole network is one
        device segment, so it runs as one command stream per tile with the weights resident.
        """
        g = Graph()
        k = self.layers[0].weight.shape[1]
        g.add_input(Value("x", batch, k, "int8", self.in_scale))
        prev = "x"
        for i, (w, b, layer) in enumerate(self._params()):
            out = "logits" if i == len(self.layers) - 1 else f"h{i}"
            g.add_value(Value(out, batch, w.shape[0], "int8", layer.out_scale))
            g.linear(f"fc{i}", prev, out, w.numpy(), None if b is None else b.numpy(),
                     PostOpParams(layer.mult, layer.shift, layer.relu))
            prev = out
        g.outputs = ["logits"]
        return g


def _fused_layers(model: torch.nn.Sequential) -> list[tuple[torch.nn.Linear, bool]]:
    modules = [m for m in model if not isinstance(m, torch.nn.Flatten)]
    layers: list[tuple[torch.nn.Linear, bool]] = []
    for m in modules:
        if isinstance(m, torch.nn.Linear):
            layers.append((m, False))
        elif isinstance(m, torch.nn.ReLU) and layers and not layers[-1][1]:
            layers[-1] = (layers[-1][0], True)
        else:
            raise ValueError(f"quantize_mlp takes Linear layers, each optionally followed by one ReLU (and Flatten), "
                             f"not {type(m).__name__} here")
    if not layers:
        raise ValueError("quantize_mlp needs at least one Linear layer")
    return layers


@torch.no_grad()
def quantize_mlp(model: torch.nn.Sequential, calibration: torch.Tensor) -> QuantizedMLP:
    """Quantise a float MLP with calibration inputs (float, ``[samples, features]``)."""
    if not isinstance(model, torch.nn.Sequential):
        raise TypeError(f"quantize_mlp takes a torch.nn.Sequential, not {type(model).__name__}")
    if not torch.is_floating_point(calibration) or calibration.shape[0] == 0:
        raise ValueError("calibration must be a non-empty float tensor of sample inputs")
    x = calibration.flatten(1).to(torch.float64)
    s_x = symmetric_scale(x.numpy())
    out: list[QuantizedLayer] = []
    for linear, relu in _fused_layers(model):
        w = linear.weight.detach().to(torch.float64)
        y = x @ w.t() + (0 if linear.bias is None else linear.bias.detach().to(torch.float64))
        if relu:
            y = y.clamp_min(0)
        s_w, s_y = symmetric_scale(w.numpy()), symmetric_scale(y.numpy())
        mult, shift = requant_multiplier(s_x * s_w / s_y)
        w_q = torch.from_numpy(quantize(w.numpy(), s_w))
        bias = None if linear.bias is None else torch.from_numpy(
            quantize_bias(linear.bias.detach().numpy(), s_x * s_w))
        out.append(QuantizedLayer(w_q, bias, mult, shift, relu, s_x, s_w, s_y))
        x, s_x = y, s_y
    return QuantizedMLP(out)
