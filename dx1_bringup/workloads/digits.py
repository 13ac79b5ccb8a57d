"""The digits workload: an MLP classifier of scikit-learn's bundled 8x8 handwritten digits, on DX-1.

The data set ships inside scikit-learn (``load_digits``: 1,797 images, no download).  The MLP
(64 -> 64 -> 32 -> 10, ReLU) is trained here in float in about a second, quantised per tensor with the
training set as calibration (:func:`~dx1_bringup.torch.quantize.quantize_mlp`), and the held-out images
are classified four ways: float PyTorch, the PyTorch integer reference, and DX-1 on each device asked
for, as one graph (three fused GEMM + POSTOP layers, weights resident, one command stream per tile).
DX-1's int8 logits must equal the integer reference's bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from dx1_driver import Device

from ..runtime.graph import GraphSession, RunStats
from ..torch import backend as dx1_backend
from ..torch.context import device as dx1_device
from ..torch.quantize import QuantizedMLP, quantize_input, quantize_mlp

__all__ = ["DigitsData", "DigitsResult", "load_data", "train_mlp", "run_digits", "HIDDEN"]

#: Hidden layer widths of the classifier.
HIDDEN = (64, 32)


@dataclass(frozen=True)
class DigitsData:
    """Train/test split of the digits, features scaled to [0, 1]."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


@dataclass
class DigitsResult:
    """Accuracies (fraction of the test set) and, per device, the run's statistics and logits."""

    float_accuracy: float
    int_accuracy: float
    device_accuracy: dict[str, float] = field(default_factory=dict)
    stats: dict[str, RunStats] = field(default_factory=dict)
    bit_exact: dict[str, bool] = field(default_factory=dict)
    plan: str = ""
    #: ``torch.compile(..., backend="dx1")`` of the quantised MLP followed by a LogSoftmax DX-1 has no
    #: command for: where each FX node ran, and whether it equals eager PyTorch.
    compiled_placement: list = field(default_factory=list)
    compiled_matches_eager: bool | None = None


def load_data(seed: int = 0, test_fraction: float = 0.2) -> DigitsData:
    """scikit-learn's digits, shuffled with ``seed`` and split."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return DigitsData(x[train], y[train], x[test], y[test])


def train_mlp(data: DigitsData, seed: int = 0, epochs: int = 200) -> torch.nn.Sequential:
    """A float MLP trained full-batch with Adam (deterministic for a seed)."""
    torch.manual_seed(seed)
    sizes = (data.x_train.shape[1], *HIDDEN, 10)
    layers: list[torch.nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(epochs):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(data.x_train), data.y_train).backward()
        opt.step()
    return model.eval()


def _accuracy(logits: torch.Tensor | np.ndarray, labels: torch.Tensor) -> float:
    pred = torch.as_tensor(np.asarray(logits)).argmax(dim=1)
    return float((pred == labels).float().mean())


def _compiled(qmodel: QuantizedMLP, x: torch.Tensor, dev: Device, result: DigitsResult) -> None:
    """The quantised MLP and a LogSoftmax through ``torch.compile(backend="dx1")``: placement and check."""
    model = torch.nn.Sequential(qmodel, torch.nn.LogSoftmax(dim=1))
    torch._dynamo.reset()
    with dx1_device(dev):
        compiled_out = torch.compile(model, backend="dx1")(x)
        eager = model(x)
    result.compiled_matches_eager = bool(torch.equal(compiled_out, eager))
    result.compiled_placement = list(dx1_backend.compiled[-1].dx1_placement)


def run_digits(devices: list[str] | list[Device], *, seed: int = 0, tiles: int | None = None,
               progress: Callable[[str], None] = lambda _: None) -> tuple[DigitsResult, QuantizedMLP]:
    """Train, quantise and classify the test set on every device; see the module docstring."""
    data = load_data(seed)
    progress(f"training a {'-'.join(str(s) for s in (64, *HIDDEN, 10))} MLP on {len(data.x_train)} digits")
    model = train_mlp(data, seed)
    with torch.no_grad():
        float_logits = model(data.x_test)
    qmodel = quantize_mlp(model, data.x_train)
    q_in = quantize_input(data.x_test, qmodel.in_scale)
    int_logits = qmodel.reference_int(q_in).numpy()
    result = DigitsResult(_accuracy(float_logits, data.y_test), _accuracy(int_logits, data.y_test))
    graph = qmodel.to_graph(len(q_in))
    for device in devices:
        name = device if isinstance(device, str) else "device"
        progress(f"classifying {len(q_in)} digits on {name}")
        dev = Device.open(device) if isinstance(device, str) else device
        try:
            with GraphSession(dev, graph, tiles=tiles) as session:
                result.plan = session.plan_text()
                outputs, stats = session.run({"x": q_in.numpy()})
            if result.compiled_matches_eager is None:
                progress(f"torch.compile(backend='dx1') of the MLP and a LogSoftmax on {name}")
                _compiled(qmodel, data.x_test, dev, result)
        finally:
            if isinstance(device, str):
                dev.close()
        logits = outputs["logits"]
        result.device_accuracy[name] = _accuracy(logits, data.y_test)
        result.bit_exact[name] = bool(np.array_equal(logits, int_logits))
        result.stats[name] = stats
    return result, qmodel
