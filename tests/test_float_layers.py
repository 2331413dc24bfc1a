"""After PTQ every layer that carries weights is quantized or listed as left float with the reason
(UserInformation.float_layers, one warning in the log): recurrent layers and embedding tables borrow the
TPC's fully-connected kernel config, the tensors of tuple outputs are quantized as their layer's output,
and Keras' separable / einsum / recurrent layers are quantized, on both frameworks."""
import logging

import numpy as np
import pytest
import torch
from torch import nn

import hwquant as mct
from hwquant.torch.quantizers import PytorchQuantizationWrapper

PTQ = mct.ptq.pytorch_post_training_quantization


class TokensToClass(nn.Module):
    """Embedding -> bidirectional GRU -> 2-layer LSTM -> LSTM cell -> PReLU -> linear."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.gru = nn.GRU(16, 24, batch_first=True, bidirectional=True)
        self.lstm = nn.LSTM(48, 20, num_layers=2, batch_first=True)
        self.cell = nn.LSTMCell(20, 8)
        self.act = nn.PReLU()
        self.fc = nn.Linear(8, 5)

    def forward(self, tokens):
        x, _ = self.gru(self.emb(tokens))
        x, _ = self.lstm(x)
        h, _ = self.cell(x[:, -1])
        return self.fc(self.act(h))


def _tokens():
    g = torch.Generator().manual_seed(1)
    return [[torch.randint(0, 50, (8, 12), generator=g)] for _ in range(4)]


def _sqnr(f, q):
    return float(10 * torch.log10(f.pow(2).mean() / (f - q).pow(2).mean()))


def _config(**kw):
    return mct.core.CoreConfig(quantization_config=mct.core.QuantizationConfig(**kw))


def test_recurrent_and_embedding_weights_take_the_fully_connected_kernel_config(caplog):
    torch.manual_seed(0)
    model, data = TokensToClass().eval(), _tokens()
    with caplog.at_level(logging.WARNING, logger="hwquant"):
        q, info = PTQ(model, lambda: iter(data), core_config=_config(quantize_recurrent_and_embedding_weights=True))
    gru, emb, cell = q.gru, q.emb, q.cell
    assert isinstance(gru, PytorchQuantizationWrapper) and isinstance(emb, PytorchQuantizationWrapper)
    assert set(gru.weights_quantizers) == {"weight_ih_l0", "weight_hh_l0", "weight_ih_l0_reverse",
                                           "weight_hh_l0_reverse"}  # biases stay float, as a linear layer's
    assert set(q.lstm.weights_quantizers) == {"weight_ih_l0", "weight_hh_l0", "weight_ih_l1", "weight_hh_l1"}
    assert set(cell.weights_quantizers) == {"weight_ih", "weight_hh"}
    # IMX500's fully-connected kernel: 8 bits, per output channel (a recurrent layer's gate rows; an
    # embedding's dims, the output channels of its one-hot product)
    assert gru.weights_quantizers["weight_ih_l0"].num_bits == 8
    assert gru.weights_quantizers["weight_ih_l0"].channel_axis == 0 and emb.weights_quantizers["weight"].channel_axis == 1
    # the tensors a recurrent layer returns in a tuple are quantized as its outputs
    items = [n for n in q.graph.nodes if n.op == "call_function" and n.args and n.users
             and getattr(n.args[0], "target", None) in ("gru", "lstm", "cell")]
    quantized = {n.args[0].target: all(u.op == "call_module" and "holder" in u.target for u in n.users) for n in items}
    # (the GRU's sequence is read by the LSTM alone, which computes in float: it stays float, see below)
    assert quantized == {"gru": False, "lstm": True, "cell": True}
    # what stays float is listed, with the reason, and said once in the log
    assert info.float_layers == {"act": "PReLU: the TPC's operator set PReLU quantizes none of its weights (weight)"}
    warnings = [r for r in caplog.records if "left float" in r.getMessage()]
    assert len(warnings) == 1 and "act" in warnings[0].getMessage()
    x = _tokens()[0][0]
    assert _sqnr(model(x), q(x)) > 35


def test_recurrent_weights_stay_float_by_default_and_it_is_said():
    torch.manual_seed(0)
    model, data = TokensToClass().eval(), _tokens()
    q, info = PTQ(model, lambda: iter(data))
    assert not isinstance(q.gru, PytorchQuantizationWrapper)
    assert set(info.float_layers) == {"emb", "gru", "lstm", "cell", "act"}
    assert "quantize_recurrent_and_embedding_weights=True" in info.float_layers["gru"]
    # their outputs are quantized all the same (the TPC's default options quantize activations)
    assert any(u.op == "call_module" and "holder" in u.target for n in q.graph.nodes
               if n.op == "call_function" and n.args and getattr(n.args[0], "target", None) == "cell" for u in n.users)


def test_weights_the_user_switched_off_are_listed():
    ne = mct.core.network_editor
    rule = ne.EditRule(filter=ne.NodeNameFilter("fc"), action=ne.ChangeCandidatesWeightsQuantConfigAttr(
        attr_name="weight", enable_weights_quantization=False))
    torch.manual_seed(0)
    _, info = PTQ(TokensToClass().eval(), lambda: iter(_tokens()),
                  core_config=mct.core.CoreConfig(debug_config=mct.core.DebugConfig(network_editor=[rule])))
    assert "switched off by the user" in info.float_layers["fc"]


def test_keras_kernel_layers_are_all_quantized_or_listed():
    keras = pytest.importorskip("keras")
    from test_keras_capture import _kernel_layers_model

    from hwquant.keras.quantizers import KerasQuantizationWrapper

    model = _kernel_layers_model()
    rng = np.random.default_rng(0)
    data = [[rng.normal(size=(4, 16, 16, 3)).astype("float32")] for _ in range(3)]
    q, info = mct.ptq.keras_post_training_quantization(
        model, lambda: iter(data), core_config=_config(quantize_recurrent_and_embedding_weights=True),
        target_platform_capabilities=mct.get_target_platform_capabilities("tensorflow", "imx500"))
    wrapped = {layer.layer.name: set(layer.weights_quantizers) for layer in q.layers
               if isinstance(layer, KerasQuantizationWrapper)}
    # the separable convolutions as depthwise + pointwise (the batch norm folded into the pointwise one)
    assert {"sep_dw", "sep_pw_bn", "sep1_dw", "sep1_pw", "dw", "convt", "pw", "dense3d", "c1", "dw1", "einsum",
            "head"} <= set(wrapped)
    assert wrapped["gru"] == {"kernel", "recurrent_kernel"} and wrapped["rnn"] == {"kernel", "recurrent_kernel"}
    assert wrapped["bilstm"] == {"kernel", "recurrent_kernel", "kernel#1", "recurrent_kernel#1"}
    assert set(info.float_layers) == {"prelu"}
    weighted = {layer.name for layer in model.layers if layer.weights} - {"sep", "sep1", "sep_norm"}
    assert weighted <= set(wrapped) | set(info.float_layers) | {"sep_pw_bn"}
    x = data[0][0]
    f, y = (np.asarray(keras.ops.convert_to_numpy(m(x))) for m in (model, q))
    # (random recurrent layers amplify their input error: 28 dB before the recurrent stack, 20 dB with it float)
    assert 10 * np.log10((f ** 2).mean() / ((f - y) ** 2).mean()) > 15


def test_quantized_recurrent_layers_export_and_reload(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from hwquant.torch.deployment.saved_model import load_quantized_model, save_quantized_model

    torch.manual_seed(0)
    data = _tokens()
    q, _ = PTQ(TokensToClass().eval(), lambda: iter(data), core_config=_config(quantize_recurrent_and_embedding_weights=True))
    x = data[0][0]
    with torch.no_grad():
        expected = q(x)
    path = tmp_path / "tokens.onnx"
    mct.exporter.pytorch_export_model(q, str(path), lambda: iter(data),
                                      quantization_format=mct.exporter.QuantizationFormat.FAKELY_QUANT)
    session = ort.InferenceSession(str(path))
    np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0], expected.numpy(),
                               atol=1e-6)
    save_quantized_model(q, tmp_path / "tokens.pt")
    with torch.no_grad():
        assert torch.equal(load_quantized_model(tmp_path / "tokens.pt")(x), expected)
