"""DX-1 for PyTorch: custom ops, a ``torch.compile`` backend named ``"dx1"``, quantisation and a reference.

Importing this package registers ``torch.ops.dx1.qlinear``, the vector unit's ``torch.ops.dx1.qsoftmax``,
``qlayer_norm``, ``qgelu`` and ``qsilu``, and the ``"dx1"`` backend.  Choose the device
with ``with dx1_bringup.torch.device("sim"): ...`` (default: the golden model, ``"model"``).
"""

from .backend import Dx1Backend, Dx1FallbackWarning, dx1_backend
from .context import DEFAULT_DEVICE, current_device, device
from .ops import check_qlinear, qgelu, qlayer_norm, qlinear, qsilu, qsoftmax
from .quantize import QuantizedMLP, quantize_mlp
from .reference import qlinear_reference, requantize, rounding_rules

__all__ = ["dx1_backend", "Dx1Backend", "Dx1FallbackWarning", "DEFAULT_DEVICE", "current_device", "device",
           "check_qlinear", "qlinear", "qsoftmax", "qlayer_norm", "qgelu", "qsilu",
           "QuantizedMLP", "quantize_mlp", "qlinear_reference", "requantize",
           "rounding_rules"]
