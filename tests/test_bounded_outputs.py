"""An activation whose range its operator fixes (softmax and sigmoid [0, 1], tanh [-1, 1]: the
FrameworkInfo's min/max mappings) keeps that range: z-score outlier removal and the error method's
clipping search never cut it (issue 29, item 7: a softmax output cut to 0.5 read its top probabilities
as 0.498). On PyTorch and on Keras, in the layer, function and method spellings."""
import math

import numpy as np
import pytest

from hwquant.constants import RANGE_MAX, RANGE_MIN, SIGNED, THRESHOLD
from hwquant.core.configuration.config import QuantizationErrorMethod as E
from hwquant.core.statistics.parameter_search import activation_quantization_params
from hwquant.core.statistics.tensor_statistics import TensorStatistics
from hwquant.tpc.enums import QuantizationMethod as Q
from hwquant.tpc.enums import Signedness
from hwquant.tpc.platforms import get_target_platform_capabilities


def _softmax_stats(rows=400, classes=1000, seed=0):
    """Softmax outputs of confident logits: almost every value near 0, one per row near 1."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((rows, classes))
    logits[np.arange(rows), rng.integers(0, classes, rows)] += 12.0
    p = np.exp(logits - logits.max(1, keepdims=True))
    return TensorStatistics().update((p / p.sum(1, keepdims=True)).astype(np.float32))


@pytest.mark.parametrize("z", [3.0, 5.0, 9.0, 16.0, math.inf])
@pytest.mark.parametrize("error", [E.MSE, E.NOCLIPPING, E.MAE, E.KL])
def test_a_known_range_is_not_cut_by_outlier_removal_or_the_search(z, error):
    stats = _softmax_stats()
    cut = activation_quantization_params(Q.POWER_OF_TWO, 8, error, stats, z_threshold=z)
    kept = activation_quantization_params(Q.POWER_OF_TWO, 8, error, stats, z_threshold=z, output_range=(0, 1))
    assert kept == {THRESHOLD: 1.0, SIGNED: False}  # MCT's threshold for a bounded output
    if z <= 9:
        assert cut[THRESHOLD] <= 0.5  # what the statistics alone give: the top probabilities clipped
    sym = activation_quantization_params(Q.SYMMETRIC, 8, error, stats, z_threshold=z, output_range=(0, 1))
    assert sym == {THRESHOLD: 1.0, SIGNED: False}
    uni = activation_quantization_params(Q.UNIFORM, 8, error, stats, z_threshold=z, output_range=(0, 1))
    assert uni[RANGE_MIN] == 0.0 and uni[RANGE_MAX] == pytest.approx(1.0)


def test_a_signed_range_and_forced_signedness():
    x = np.tanh(np.random.default_rng(1).standard_normal(5000) * 0.2).astype(np.float32)  # well inside (-1, 1)
    stats = TensorStatistics().update(x)
    out = activation_quantization_params(Q.POWER_OF_TWO, 8, E.MSE, stats, z_threshold=3, output_range=(-1, 1))
    assert out == {THRESHOLD: 1.0, SIGNED: True}
    forced = activation_quantization_params(Q.POWER_OF_TWO, 8, E.MSE, stats, output_range=(-1, 1),
                                            signedness=Signedness.UNSIGNED)
    assert forced == {THRESHOLD: 1.0, SIGNED: False}
    uni = activation_quantization_params(Q.UNIFORM, 8, E.MSE, stats, output_range=(-1, 1))
    assert uni[RANGE_MIN] == pytest.approx(-1.0, abs=1e-2) and uni[RANGE_MAX] == pytest.approx(1.0, abs=1e-2)


def test_a_range_with_an_unknown_end_changes_nothing():
    stats = TensorStatistics().update(np.abs(np.random.default_rng(2).standard_normal(5000)).astype(np.float32))
    plain = activation_quantization_params(Q.POWER_OF_TWO, 8, E.MSE, stats, z_threshold=3)
    assert activation_quantization_params(Q.POWER_OF_TWO, 8, E.MSE, stats, z_threshold=3,
                                          output_range=(0, None)) == plain
    with pytest.raises(ValueError, match="output_range"):
        activation_quantization_params(Q.POWER_OF_TWO, 8, E.MSE, stats, output_range=(1, 0))
    with pytest.raises(ValueError, match="output_range"):
        activation_quantization_params(Q.POWER_OF_TWO, 8, E.MSE, stats, output_range=(0, 1, 2))


def _thresholds(state):
    return {n: v["activation"] for n, v in state.report.thresholds(state.graph).items() if "activation" in v}


# ---- PyTorch ------------------------------------------------------------------------------------------
def _torch_model(kind):
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.fc = nn.Linear(16, 50)
            self.head = nn.Softmax(dim=1) if kind == "module" else None

        def forward(self, x):
            y = self.fc(x) * 6.0  # confident: one class near 1 per row
            if kind == "module":
                return self.head(y)
            if kind == "function":
                return F.softmax(y, dim=1), torch.sigmoid(y), torch.tanh(y)
            return y.softmax(1), y.sigmoid(), y.tanh()

    return Net().eval()


@pytest.mark.parametrize("kind", ["module", "function", "method"])
@pytest.mark.parametrize("z", [3.0, 16.0, math.inf])
def test_torch_bounded_outputs_keep_their_range(kind, z):
    torch = pytest.importorskip("torch")
    from hwquant.core.configuration.config import CoreConfig, QuantizationConfig
    from hwquant.torch.facade import run_pytorch_ptq

    model = _torch_model(kind)
    gen = torch.Generator().manual_seed(1)
    data = [torch.randn(32, 16, generator=gen) for _ in range(3)]
    state = run_pytorch_ptq(model, lambda: iter([[x] for x in data]), None,
                            CoreConfig(QuantizationConfig(z_threshold=z)), get_target_platform_capabilities())[1]
    th = _thresholds(state)
    outputs = state.graph.output_names()
    signed = [False] if kind == "module" else [False, False, True]
    for name, negative in zip(outputs, signed):
        assert th[name] == {THRESHOLD: 1.0, SIGNED: negative}, name
    q = state.adapter.build(state.graph, quantized=True)
    with torch.no_grad():  # the top probabilities read above 0.5: nothing cut them
        top, top_q = (np.asarray(torch.as_tensor(m(data[0]) if kind == "module" else m(data[0])[0])).max(1)
                      for m in (model, q))
    assert top.max() > 0.9 and top_q.max() > 0.8


# ---- Keras --------------------------------------------------------------------------------------------
def _keras_model(kind):
    keras = pytest.importorskip("keras")
    L = keras.layers
    keras.utils.set_random_seed(0)
    x = keras.Input((16,))
    y = L.Dense(50, name="fc")(x)
    y = L.Rescaling(6.0)(y)
    if kind == "dense":  # keras.applications' classifier: Dense(activation="softmax")
        return keras.Model(x, L.Dense(20, activation="softmax", name="predictions")(y))
    if kind == "layers":
        return keras.Model(x, [L.Softmax()(y), L.Activation("sigmoid")(y), L.Activation("tanh")(y)])
    return keras.Model(x, [keras.ops.softmax(y), keras.ops.sigmoid(y), keras.ops.tanh(y)])


@pytest.mark.parametrize("kind", ["dense", "layers", "ops"])
@pytest.mark.parametrize("z", [3.0, 16.0, math.inf])
def test_keras_bounded_outputs_keep_their_range(kind, z):
    pytest.importorskip("keras")
    from hwquant.core.configuration.config import CoreConfig, QuantizationConfig
    from hwquant.keras.facade import run_keras_ptq

    model = _keras_model(kind)
    rng = np.random.default_rng(1)
    data = [rng.standard_normal((32, 16)).astype(np.float32) for _ in range(3)]
    state = run_keras_ptq(model, lambda: iter([[x] for x in data]), None,
                          CoreConfig(QuantizationConfig(z_threshold=z)), get_target_platform_capabilities())[1]
    th = _thresholds(state)
    signed = [False] if kind == "dense" else [False, False, True]
    outputs = state.graph.output_names()
    assert len(outputs) == len(signed)
    for name, negative in zip(outputs, signed):
        assert th[name] == {THRESHOLD: 1.0, SIGNED: negative}, name
    q = state.adapter.build(state.graph, quantized=True)
    top, top_q = (np.asarray(y[0] if isinstance(y, (list, tuple)) else y).max(1)
                  for y in (model.predict_on_batch(data[0]), q.predict_on_batch(data[0])))
    assert top.max() > 0.9 and top_q.max() > 0.8  # the top probabilities read above 0.5: nothing cut them


def test_adapters_report_their_frameworks_ranges():
    keras = pytest.importorskip("keras")
    torch = pytest.importorskip("torch")
    from hwquant.core.graph.model_graph import Node, NodeKind
    from hwquant.keras.adapter import KerasAdapter
    from hwquant.torch.adapter import PytorchAdapter

    k = KerasAdapter()
    relu6 = keras.layers.ReLU(6.0)
    # ReLU6: (0, None) as in MCT (a clip: its threshold is searched)
    assert k.output_range(Node("r", NodeKind.MODULE, keras.layers.ReLU, framework_attr=relu6.get_config())) == (0, None)
    assert k.output_range(Node("a", NodeKind.MODULE, keras.layers.Activation,
                               framework_attr={"activation": "hard_sigmoid"})) == (0, 1)
    assert k.output_range(Node("a", NodeKind.MODULE, keras.layers.Activation,
                               framework_attr={"activation": "swish"})) is None
    assert k.output_range(Node("d", NodeKind.MODULE, keras.layers.Dense)) is None
    t = PytorchAdapter()
    assert t.output_range(Node("s", NodeKind.MODULE, torch.nn.Softmax)) == (0, 1)
    assert t.output_range(Node("r", NodeKind.MODULE, torch.nn.ReLU6)) == (0, None)
    assert t.output_range(Node("s", NodeKind.METHOD, torch.Tensor.sigmoid)) == (0, 1)
    assert t.output_range(Node("s", NodeKind.FUNCTION, torch.nn.functional.hardsigmoid)) == (0, 1)
    assert t.output_range(Node("s", NodeKind.FUNCTION, torch.nn.functional.gelu)) is None
    assert t.output_range(Node("s", NodeKind.FUNCTION, [1])) is None  # an unhashable type
