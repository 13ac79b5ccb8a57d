"""PyTorch integration: the int reference, dx1::qlinear (opcheck, errors), the "dx1" compile backend, digits."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e '.[torch]')")

import dx1_bringup.torch as dxt  # noqa: E402  (after the importorskip)
from dx1_bringup.runtime.reference import reference_gemm  # noqa: E402
from dx1_bringup.spec import PostOpParams  # noqa: E402


def _operands(seed, m=5, k=20, n=12):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, generator=g)
    b = torch.randint(-5000, 5000, (n,), dtype=torch.int32, generator=g)
    return x, w, b


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("shift", [0, 1, 13, 31, 47])
def test_torch_reference_equals_the_numpy_postop_at_the_extremes(relu, shift):
    x, w, b = _operands(shift)
    x[0] = -128
    w[:, :] = torch.where(w > 0, 127, -128).to(torch.int8)
    b[0], b[1] = (1 << 31) - 1, -(1 << 31)
    mult = 65535 if shift > 16 else 3
    got = dxt.qlinear_reference(x, w, b, mult, shift, relu).numpy()
    want = reference_gemm(x.numpy(), w.numpy().T.copy(), b.numpy(), PostOpParams(mult, shift, relu))
    assert np.array_equal(got, want)


def test_rounding_rules_differ_exactly_at_ties():
    p = torch.tensor([-5, -3, -1, 1, 3, 5, 4, -4])
    rules = dxt.rounding_rules(p, 1)
    assert rules["half_away_from_zero"].tolist() == [-3, -2, -1, 1, 2, 3, 2, -2]
    assert rules["torch_round_half_even"].tolist() == [-2, -2, 0, 0, 2, 2, 2, -2]
    assert rules["tosa_half_up"].tolist() == [-2, -1, 0, 1, 2, 3, 2, -2]


@pytest.mark.parametrize("with_bias", [True, False])
def test_qlinear_runs_on_the_model_and_passes_opcheck(with_bias):
    x, w, b = _operands(7)
    bias = b if with_bias else None
    got = torch.ops.dx1.qlinear(x, w, bias, 30000, 20, True)
    assert got.dtype == torch.int8 and got.shape == (5, 12)
    assert torch.equal(got, dxt.qlinear_reference(x, w, bias, 30000, 20, True))
    torch.library.opcheck(torch.ops.dx1.qlinear.default, (x, w, bias, 30000, 20, True))


@pytest.mark.parametrize("change, error, message", [
    (lambda x, w, b: (x.float(), w, b, 1, 0), TypeError, "takes int8 x and w, not torch.float32"),
    (lambda x, w, b: (x, w[:, :3], b, 1, 0), ValueError, "must agree on K"),
    (lambda x, w, b: (x[0], w, b, 1, 0), ValueError, "takes a 2-D x"),
    (lambda x, w, b: (x, w, b.to(torch.int64), 1, 0), TypeError, "int32 bias, not torch.int64"),
    (lambda x, w, b: (x, w, b[:3], 1, 0), ValueError, r"bias must have shape \[12\]"),
    (lambda x, w, b: (x, w, b, 1 << 16, 0), ValueError, "mult must fit in 16 bits unsigned"),
    (lambda x, w, b: (x, w, b, 1, 48), ValueError, "shift must be from 0 to 47"),
])
def test_qlinear_says_what_dx1_cannot_take(change, error, message):
    args = change(*_operands(1))
    with pytest.raises(error, match=message):
        torch.ops.dx1.qlinear(*args, False)


class _TwoLayers(torch.nn.Module):
    """Two qlinears DX-1 runs, then a softmax it has no command for."""

    def __init__(self):
        super().__init__()
        _, self.w1, self.b1 = _operands(3)
        self.w2 = torch.randint(-128, 128, (7, 12), dtype=torch.int8, generator=torch.Generator().manual_seed(4))

    def forward(self, x):
        h = torch.ops.dx1.qlinear(x, self.w1, self.b1, 30000, 20, True)
        y = torch.ops.dx1.qlinear(h, self.w2, None, 20000, 18, False)
        return torch.nn.functional.softmax(y.float(), -1)


def test_compile_backend_runs_the_qlinear_chain_on_dx1_and_the_rest_on_the_cpu():
    torch._dynamo.reset()
    model, (x, _, _) = _TwoLayers(), _operands(9)
    want = model(x)
    backend = dxt.Dx1Backend()
    fast = torch.compile(model, backend=backend)
    assert torch.equal(fast(x), want) and torch.equal(fast(x), want)
    gm = backend.compiled[-1]
    where = {p.node: (p.where, p.subgraph) for p in gm.dx1_placement}
    assert where["h"] == where["y"] == ("dx1", "dx1_subgraph_0")
    assert where["softmax"][0] == "cpu"
    sub = gm.dx1_subgraphs["dx1_subgraph_0"]
    assert sub.calls == 2 and sub.last_stats.device_segments == 1 and sub.last_stats.transfers == 2


@pytest.mark.parametrize("dynamic", [True, None])
def test_compile_backend_keeps_a_dynamic_batch_on_dx1(dynamic):
    """``dynamic=None`` is torch.compile's default: the second batch size recompiles with a dynamic batch."""
    torch._dynamo.reset()
    model, backend = _TwoLayers(), dxt.Dx1Backend()
    fast = torch.compile(model, backend=backend, dynamic=dynamic)
    with warnings.catch_warnings():
        warnings.simplefilter("error", dxt.Dx1FallbackWarning)
        for m in (3, 6, 9, 6):
            x = _operands(m, m=m)[0]
            assert torch.equal(fast(x), model(x))
    gm = backend.compiled[-1]
    assert {p.node: p.where for p in gm.dx1_placement if p.target == "dx1::qlinear"} == {"h": "dx1", "y": "dx1"}
    assert not any(p.target == "qlinear_reference" for g in backend.compiled for p in g.dx1_placement)
    assert sum(sub.calls for g in backend.compiled for sub in g.dx1_subgraphs.values()) == 4


class _RuntimeShift(torch.nn.Module):
    """A qlinear whose shift is computed from the input: DX-1 takes the POSTOP parameters as constants."""

    def __init__(self):
        super().__init__()
        _, self.w, self.b = _operands(3)

    def forward(self, x):
        return torch.ops.dx1.qlinear(x, self.w, self.b, 30000, x.shape[1], True)


def test_compile_backend_warns_why_a_qlinear_falls_back_to_the_cpu():
    torch._dynamo.reset()
    model, backend = _RuntimeShift(), dxt.Dx1Backend()
    x = _operands(5, m=4)[0]
    with pytest.warns(dxt.Dx1FallbackWarning, match=r"runs on the CPU, not on DX-1: CPU integer reference: shift is "
                                                    r"computed at run time"):
        assert torch.equal(torch.compile(model, backend=backend, dynamic=True)(x), model(x))
    (p,) = [p for p in backend.compiled[-1].dx1_placement if p.target == "qlinear_reference"]
    assert p.where == "cpu" and "POSTOP" in p.reason


def test_compile_backend_says_a_float_linear_must_be_quantised_first():
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    backend = dxt.Dx1Backend()
    with pytest.warns(dxt.Dx1FallbackWarning, match=r"input_1 \(linear\), input_3 \(linear\) run on the CPU, not "
                                                    r"on DX-1: a float linear: DX-1 multiplies int8 only; quantise "
                                                    r"first: dx1_bringup.torch.quantize_mlp\(model, calibration\)"):
        torch.compile(model, backend=backend)(torch.randn(3, 16))
    assert not any(p.where == "dx1" for p in backend.compiled[-1].dx1_placement)
    quantised = dxt.quantize_mlp(model, torch.randn(32, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("error", dxt.Dx1FallbackWarning)
        torch.compile(quantised, backend=backend)(torch.randn(3, 16))
    assert sum(p.where == "dx1" for p in backend.compiled[-1].dx1_placement) == 2


def test_compile_backend_keeps_no_compiled_graph_alive():
    import gc
    import weakref

    torch._dynamo.reset()
    model = _TwoLayers()
    torch.compile(model, backend="dx1")(_operands(9)[0])
    from dx1_bringup.torch import context

    subgraphs = [weakref.ref(h) for h in context._holders]
    assert subgraphs
    torch._dynamo.reset()
    gc.collect()
    assert all(ref() is None for ref in subgraphs)


def test_device_context_chooses_the_device():
    x, w, b = _operands(2)
    with dxt.device("model") as dev:
        assert dxt.current_device() is dev
        torch.ops.dx1.qlinear(x, w, b, 1, 0, False)
    assert dxt.current_device() is not dev
    with pytest.raises(TypeError, match="device string or a dx1_driver.Device"):
        with dxt.device(3):
            pass


def test_quantize_mlp_refuses_layers_it_cannot_map():
    with pytest.raises(ValueError, match="not Sigmoid"):
        dxt.quantize_mlp(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sigmoid()), torch.rand(8, 4))


def _small_mlp(*extra):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8), torch.nn.ReLU(), *extra,
                               torch.nn.Linear(8, 4)).eval()


def test_quantized_mlp_takes_one_sample_as_torch_nn_linear_does():
    q = dxt.quantize_mlp(_small_mlp(), torch.randn(64, 16))
    x = torch.randn(16)
    assert q(x).shape == (4,) and torch.equal(q(x), q(x[None])[0])
    for bad in (torch.randn(15), torch.tensor(1.0), torch.randn(2, 3, 4)):
        with pytest.raises(ValueError, match=r"QuantizedMLP takes a float input of shape \[batch, 16\] .* or one "
                                             rf"sample \[16\]\), not {re.escape(str(tuple(bad.shape)))}"):
            q(bad)


def test_quantized_mlp_repr_shows_its_layers():
    text = repr(dxt.quantize_mlp(_small_mlp(), torch.randn(64, 16)))
    assert "16 -> 8 ReLU -> 4, int8 on DX-1 (dx1::qlinear)" in text
    assert re.search(r"\(fc0\): qlinear 16 -> 8, int32 bias, ReLU, requantise x\d+ >> \d+", text)
    assert re.search(r"\(fc1\): qlinear 8 -> 4, int32 bias, requantise x\d+ >> \d+", text)


def test_quantize_mlp_leaves_out_dropout_in_eval_mode_and_refuses_it_in_training():
    model = _small_mlp(torch.nn.Dropout(0.5), torch.nn.Identity())
    q = dxt.quantize_mlp(model, torch.randn(64, 16))
    assert [layer.relu for layer in q.layers] == [True, False]
    x = torch.randn(10, 16)
    assert (q(x) - model(x)).abs().max() < 0.1
    with pytest.raises(ValueError, match=r"the Dropout at index 3 is in training mode .* call model.eval\(\) first"):
        dxt.quantize_mlp(model.train(), torch.randn(64, 16))
    with pytest.raises(ValueError, match=r"calibration must be a float tensor of sample inputs \[samples, 16\] .* "
                                         r"not \(16,\)"):
        dxt.quantize_mlp(model.eval(), torch.randn(16))


def test_quantize_mlp_docstring_lists_what_it_accepts():
    doc = dxt.quantize_mlp.__doc__
    for name in ("torch.nn.Sequential", "torch.nn.Linear", "torch.nn.ReLU", "Flatten", "Identity", "Dropout",
                 "eval mode", "[samples, features]", "Raises"):
        assert name in doc


@pytest.fixture(scope="module")
def digits_on_model():
    from dx1_bringup.workloads.digits import run_digits

    return run_digits(["model"])


def test_digits_on_the_model_match_the_int_reference_bit_for_bit(digits_on_model):
    result, qmodel = digits_on_model
    assert result.bit_exact == {"model": True}
    assert result.float_accuracy > 0.9 and result.int_accuracy > 0.9
    assert abs(result.int_accuracy - result.float_accuracy) < 0.03
    assert result.device_accuracy["model"] == result.int_accuracy
    assert result.stats["model"].device_segments == 1 and result.stats["model"].transfers == 2
    # torch.compile of the MLP and a LogSoftmax: the three qlinears on DX-1 as one subgraph, the rest on the CPU.
    assert result.compiled_matches_eager
    where = {p.target: (p.where, p.subgraph) for p in result.compiled_placement}
    assert where["dx1::qlinear"] == ("dx1", "dx1_subgraph_0") and where["log_softmax"][0] == "cpu"
    assert sum(p.target == "dx1::qlinear" for p in result.compiled_placement) == 3


def test_digits_through_torch_compile_equal_the_graph_runtime(digits_on_model):
    from dx1_bringup.workloads.digits import load_data

    _, qmodel = digits_on_model
    torch._dynamo.reset()
    x = load_data().x_test[:40]
    eager = qmodel(x)
    assert torch.equal(torch.compile(qmodel, backend="dx1")(x), eager)
    q = dxt.quantize.quantize_input(x, qmodel.in_scale)
    assert torch.equal(qmodel.forward_int(q), qmodel.reference_int(q))


@pytest.mark.verilator
def test_digits_on_the_rtl_match_the_int_reference_bit_for_bit(sim_transport):
    from dx1_driver import Device

    from dx1_bringup.workloads.digits import run_digits

    result, _ = run_digits([Device(sim_transport)])
    assert result.bit_exact == {"device": True}
    assert result.stats["device"].cycles > 0 and result.stats["device"].round_trips > 0


def test_encoder_block_on_the_model_is_bit_exact_per_device_op():
    from dx1_bringup.workloads.encoder import run_encoder

    result = run_encoder(["model"])
    assert result.mismatches == {"model": []}
    assert result.int_error == 0.0 and result.float_error < 0.05
    # Nothing on the host between the input's quantise and the output's dequantise.
    assert [name for name, where in result.placement if where == "host"] == ["quantize", "dequantize"]
    placement = dict(result.placement)
    for op in ("layer_norm1", "transpose", "softmax", "layer_norm2", "q_proj", "scores0", "attend1", "ffn2"):
        assert placement[op] == "device"
    stats = result.stats["model"]
    assert stats.device_segments == 1 and stats.host_ops == 2 and stats.transfers == 2
    assert "x1 @ residual2.identity" in result.plan  # the second residual reads x1 where out_proj wrote it
    assert "softmax: p = softmax(scores, 2 blocks a row)  [vector unit]" in result.plan


def test_decoder_block_on_the_model_is_all_integer_and_bit_exact():
    from dx1_bringup.workloads.decoder import run_decoder

    result = run_decoder(["model"])
    assert result.mismatches == {"model": []}
    assert result.int_error == 0.0 and result.float_error < 0.05
    assert [name for name, where in result.placement if where == "host"] == ["quantize", "dequantize"]
    assert "softmax(scores, 2 blocks a row, causal)" in result.plan
    assert "gelu: f = gelu(fpre)  [vector unit]" in result.plan
    stats = result.stats["model"]
    assert stats.device_segments == 1 and stats.host_ops == 2 and stats.transfers == 2


def test_encoder_block_without_a_vector_unit_runs_the_kernels_on_the_host_with_the_same_result():
    from dx1_bringup.workloads.encoder import run_encoder

    result = run_encoder(["model", "model:vector=0"])
    assert result.mismatches == {"model": [], "model:vector=0": []} and result.int_error == 0.0
    assert [name for name, where in result.placement if where == "host"] == [
        "quantize", "layer_norm1", "transpose", "softmax", "layer_norm2", "dequantize"]
    assert result.stats["model:vector=0"].host_ops == 6 and result.stats["model"].host_ops == 2


def test_graph_views_are_checked_where_the_device_would_read_past_them():
    from dx1_bringup.runtime.graph import Graph, QMatmul, Value, View

    g = Graph()
    g.add_input(Value("a", 8, 20, "int8"))
    g.add_const("b", np.zeros((4, 8), np.int8))
    g.add_value(Value("c", 8, 8, "int8"))
    g.add(QMatmul("mm", ((View("a", col0=8, cols=4), View("b")),), View("c"), None, PostOpParams(1, 0)))
    with pytest.raises(ValueError, match="must have a multiple of 8 columns or end at a's last column"):
        g.validate()


@pytest.mark.verilator
def test_encoder_block_on_the_rtl_is_bit_exact_per_device_op(sim_transport):
    from dx1_driver import Device

    from dx1_bringup.workloads.encoder import run_encoder

    result = run_encoder([Device(sim_transport)])
    assert result.mismatches == {"device": []}
    assert result.stats["device"].round_trips > 0


@pytest.mark.verilator
def test_decoder_block_on_the_rtl_is_bit_exact_per_device_op(sim_transport):
    from dx1_driver import Device

    from dx1_bringup.workloads.decoder import run_decoder

    result = run_decoder([Device(sim_transport)])
    assert result.mismatches == {"device": []}
    assert [name for name, where in result.placement if where == "host"] == ["quantize", "dequantize"]


class _Kernels(torch.nn.Module):
    """Layer norm, a qlinear, a causal softmax and a GELU in int8, then a float softmax."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(4)
        self.w = torch.randint(-64, 64, (16, 16), dtype=torch.int8, generator=gen)
        self.g = torch.rand(16, generator=gen) + 0.5
        self.b = torch.rand(16, generator=gen) - 0.5

    def forward(self, x):
        h = torch.ops.dx1.qlayer_norm(x, self.g, self.b, 1e-5, 0.05, 0.03)
        s = torch.ops.dx1.qlinear(h, self.w, None, 20000, 20, False)
        p = torch.ops.dx1.qsoftmax(s, 0.08, 2, True)
        return torch.ops.dx1.qgelu(p, 1 / 127, 1 / 127), torch.softmax(p.float(), -1)


def test_vector_kernel_ops_equal_their_int_reference_and_pass_opcheck():
    from dx1_bringup.torch.ops import vector_kernel_reference

    x = torch.randint(-128, 128, (16, 16), dtype=torch.int8, generator=torch.Generator().manual_seed(2))
    g, b = torch.linspace(0.5, 1.5, 16), torch.linspace(-0.2, 0.2, 16)
    for name, args in (("qsoftmax", (0.05, 2, True)), ("qlayer_norm", (g, b, 1e-5, 0.05, 0.03)),
                       ("qgelu", (0.05, 0.04)), ("qsilu", (0.05, 0.04))):
        op = getattr(torch.ops.dx1, name)
        assert torch.equal(op(x, *args), vector_kernel_reference(name, x, *args))
        torch.library.opcheck(op, (x, *args))
    with pytest.raises(TypeError, match=r"dx1::qgelu takes a 2-D int8 x, not torch.float32 with 2 dimensions"):
        torch.ops.dx1.qgelu(x.float(), 0.05, 0.04)


def test_compile_backend_places_softmax_layer_norm_and_gelu_on_the_vector_unit():
    torch._dynamo.reset()
    model, backend = _Kernels(), dxt.Dx1Backend()
    x = torch.randint(-128, 128, (16, 16), dtype=torch.int8, generator=torch.Generator().manual_seed(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", dxt.Dx1FallbackWarning)
        got = torch.compile(model, backend=backend)(x)
    want = model(x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    placement = {p.node: p for p in backend.compiled[-1].dx1_placement}
    for node, target in (("h", "dx1::qlayer_norm"), ("s", "dx1::qlinear"), ("p", "dx1::qsoftmax"),
                         ("qgelu", "dx1::qgelu")):
        assert (placement[node].target, placement[node].where, placement[node].subgraph) == (
            target, "dx1", "dx1_subgraph_0")
    assert placement["softmax"].where == "cpu" and "torch.ops.dx1.qsoftmax" in placement["softmax"].reason
    assert backend.compiled[-1].dx1_subgraphs["dx1_subgraph_0"].last_stats.device_segments == 1


def test_compile_backend_runs_the_kernels_reference_on_the_cpu_without_a_vector_unit():
    torch._dynamo.reset()
    model, backend = _Kernels(), dxt.Dx1Backend()
    x = torch.randint(-128, 128, (16, 16), dtype=torch.int8, generator=torch.Generator().manual_seed(3))
    with dxt.device("model:vector=0"):
        with pytest.warns(dxt.Dx1FallbackWarning, match=r"h \(vector_kernel_reference\), p \(vector_kernel_reference"
                                                        r"\), qgelu \(vector_kernel_reference\) run on the CPU, not on "
                                                        r"DX-1: CPU integer reference: the device has no vector unit"):
            got = torch.compile(model, backend=backend)(x)
        assert torch.equal(got[0], model(x)[0])
    placement = {p.node: p.where for p in backend.compiled[-1].dx1_placement}
    assert placement["s"] == "dx1" and placement["h"] == placement["p"] == placement["qgelu"] == "cpu"


def test_dx1_run_decoder_prints_the_plan_and_only_quantise_and_dequantise_on_the_host(capsys):
    from dx1_bringup.cli import main

    assert main(["run", "decoder", "--device", "model", "--device", "model:tiles=4"]) == 0
    out = capsys.readouterr().out
    assert "activation='gelu', norm_first=True), sequence 16, causal mask" in out
    assert "  on the host (2): quantize, dequantize\n" in out
    assert "  model: all 15 on-device results == int reference bit for bit" in out
    assert "  model:tiles=4: all 15 on-device results == int reference bit for bit" in out
    assert "dx1 run decoder: PASS" in out
