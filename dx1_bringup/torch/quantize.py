"""Post-training quantisation of a float MLP for DX-1: int8 weights and activations, int32 bias.

:func:`quantize_mlp` takes a float ``torch.nn.Sequential`` of ``Linear`` layers, each optionally followed by
a ``ReLU`` (fused into the layer's POSTOP), with ``Flatten``, ``Identity`` and eval-mode ``Dropout`` left
out, and calibration inputs.  Scales are symmetric and per tensor
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

    @property
    def in_features(self) -> int:
        """Features of one input sample (the first layer's K)."""
        return self.layers[0].weight.shape[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Float ``[batch, ...]`` (flattened to ``[batch, in_features]``) or one sample ``[in_features]`` in;
        float logits ``[batch, classes]`` (``[classes]`` for one sample) out, as ``torch.nn.Linear`` does."""
        one = x.dim() == 1
        if x.dim() == 0 or (x.reshape(1, -1) if one else x.flatten(1)).shape[1] != self.in_features:
            raise ValueError(f"QuantizedMLP takes a float input of shape [batch, {self.in_features}] (or one that "
                             f"flattens to it from the second dimension on, or one sample [{self.in_features}]), "
                             f"not {tuple(x.shape)}")
        rows = x.reshape(1, -1) if one else x.flatten(1)
        out = self.forward_int(quantize_input(rows, self.in_scale)).to(torch.float32) * self.out_scale
        return out[0] if one else out

    def extra_repr(self) -> str:
        sizes = f"{self.in_features} -> " + " -> ".join(
            f"{layer.weight.shape[0]}{' ReLU' if layer.relu else ''}" for layer in self.layers)
        lines = [f"{sizes}, int8 on DX-1 (dx1::qlinear), input scale {self.in_scale:.4g}, output scale "
                 f"{self.out_scale:.4g}"]
        for i, layer in enumerate(self.layers):
            n, k = layer.weight.shape
            lines.append(f"(fc{i}): qlinear {k} -> {n}, {'int32 bias' if layer.bias is not None else 'no bias'}, "
                         f"{'ReLU, ' if layer.relu else ''}requantise x{layer.mult} >> {layer.shift}")
        return "\n".join(lines)

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


#: Modules that pass their input through at inference, left out of the quantised network.
_PASS_THROUGH = (torch.nn.Flatten, torch.nn.Identity, torch.nn.Dropout)


def _fused_layers(model: torch.nn.Sequential) -> list[tuple[torch.nn.Linear, bool]]:
    layers: list[tuple[torch.nn.Linear, bool]] = []
    for i, m in enumerate(model):
        if isinstance(m, torch.nn.Dropout) and m.training:
            raise ValueError(f"quantize_mlp: the Dropout at index {i} is in training mode (it zeroes inputs at "
                             f"random); call model.eval() first, then it passes its input through and is left out")
        if isinstance(m, _PASS_THROUGH):
            continue
        if isinstance(m, torch.nn.Linear):
            layers.append((m, False))
        elif isinstance(m, torch.nn.ReLU) and layers and not layers[-1][1]:
            layers[-1] = (layers[-1][0], True)
        else:
            raise ValueError(f"quantize_mlp takes Linear layers, each optionally followed by one ReLU (and Flatten, "
                             f"Identity or Dropout in eval mode anywhere), not {type(m).__name__} at index {i}")
    if not layers:
        raise ValueError("quantize_mlp needs at least one Linear layer")
    return layers


@torch.no_grad()
def quantize_mlp(model: torch.nn.Sequential, calibration: torch.Tensor) -> QuantizedMLP:
    """Quantise a float MLP for DX-1 from calibration inputs (post-training, symmetric per-tensor int8).

    Parameters
    ----------
    model:
        A ``torch.nn.Sequential`` of ``torch.nn.Linear`` layers, each optionally followed by one
        ``torch.nn.ReLU`` (fused into that layer's POSTOP); ``Flatten``, ``Identity`` and ``Dropout`` (in
        eval mode: ``model.eval()``) may stand anywhere and are left out, since they pass their input through
        at inference.  Nothing else: no other activation, normalisation or nested module.  Left unchanged.
    calibration:
        Float sample inputs, ``[samples, features]`` or ``[samples, ...]`` (flattened from the second
        dimension on, as ``Flatten`` does), at least one sample: every scale covers the largest magnitude
        they produce.

    Returns
    -------
    QuantizedMLP
        Float in, float logits out; every layer ``torch.ops.dx1.qlinear`` on the current device.

    Raises
    ------
    TypeError
        ``model`` is not a ``torch.nn.Sequential``.
    ValueError
        A module the quantiser cannot map (named, with its index), a Dropout in training mode, no Linear at
        all, or calibration that is not a float tensor of at least one sample of the first layer's features.
    """
    if not isinstance(model, torch.nn.Sequential):
        raise TypeError(f"quantize_mlp takes a torch.nn.Sequential, not {type(model).__name__}")
    layers = _fused_layers(model)
    k = layers[0][0].in_features
    if (not isinstance(calibration, torch.Tensor) or not torch.is_floating_point(calibration)
            or calibration.dim() < 2 or calibration.shape[0] == 0 or calibration.flatten(1).shape[1] != k):
        shape = tuple(calibration.shape) if isinstance(calibration, torch.Tensor) else type(calibration).__name__
        raise ValueError(f"calibration must be a float tensor of sample inputs [samples, {k}] with at least one "
                         f"sample, not {shape}")
    x = calibration.flatten(1).to(torch.float64)
    s_x = symmetric_scale(x.numpy())
    out: list[QuantizedLayer] = []
    for linear, relu in layers:
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
