"""Inputs torch would fail on deep inside get a clear error (what is wrong, how to fix it) before
anything runs: representative data of the wrong dtype or shape, models in half precision or on the
meta device, forward signatures the data cannot fill, endless or reused generators, unwritable
export targets."""
import errno

import pytest
import torch
from torch import nn

import hwquant as mct
from hwquant.errors import ExportError, InvalidConfigError
from hwquant.torch.capture.routes import CaptureError
from hwquant.torch.data import RepresentativeDataError

PTQ = mct.ptq.pytorch_post_training_quantization


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(self.conv(x).mean((2, 3)))


class Defaults(Net):
    def forward(self, x, mask=None, *, scale=1.0):
        y = super().forward(x) * scale
        return y if mask is None else y * mask


class KeywordOnly(Net):
    def forward(self, x, *, scale):
        return super().forward(x) * scale


def gen(n=3, shape=(4, 3, 8, 8), dtype=torch.float32):
    batches = [[torch.randn(*shape).to(dtype)] for _ in range(n)]
    return lambda: iter(batches)


def test_integer_image_data_says_to_give_floats():
    data = [[torch.randint(0, 255, (4, 3, 8, 8))]]
    with pytest.raises(CaptureError, match=r"(?s)dtypes \['int64'\].*Input 0 is torch.int64.*x.float\(\) / 255"):
        PTQ(Net().eval(), lambda: iter(data))


def test_half_precision_data_is_read_as_float32():
    q, _ = PTQ(Net().eval(), gen(dtype=torch.float16))
    assert q(torch.randn(2, 3, 8, 8)).dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_models_not_in_float32_are_refused(dtype):
    with pytest.raises(InvalidConfigError, match=f"'conv.weight' is {str(dtype)[6:]}.*model.float()"):
        PTQ(Net().to(dtype).eval(), gen())


def test_a_model_on_the_meta_device_is_refused():
    with pytest.raises(InvalidConfigError, match="meta device.*to_empty"):
        PTQ(Net().to("meta"), gen())


def test_defaulted_and_keyword_arguments_take_their_defaults():
    model = Defaults().eval()
    q, _ = PTQ(model, gen())
    x = torch.randn(2, 3, 8, 8)
    assert len([n for n in q.graph.nodes if n.op == "placeholder"]) == 1
    assert torch.allclose(q(x), model(x), atol=0.1)


def test_a_keyword_only_argument_without_default_is_named():
    with pytest.raises(CaptureError, match="keyword-only argument 'scale' with no default"):
        PTQ(KeywordOnly().eval(), gen())


@pytest.mark.parametrize("compile_", ["script", "trace"])
def test_a_torchscript_model_is_refused_naming_the_way_out(compile_):
    """(torch.fx failed on it: "no signature found for <torch.ScriptMethod>")"""
    model = Net().eval()
    scripted = torch.jit.script(model) if compile_ == "script" else torch.jit.trace(model, torch.randn(2, 3, 8, 8))
    with pytest.raises(InvalidConfigError, match=f"TorchScript module .*torch.jit.{compile_}.*Pass the original model"):
        PTQ(scripted, gen())
    holder = nn.Sequential(scripted, nn.ReLU()).eval()
    with pytest.raises(InvalidConfigError, match="submodule '0' is a TorchScript module.*original torch.nn.Module"):
        PTQ(holder, gen())


def test_representative_data_on_the_meta_device_is_refused():
    """(calibration failed with "Tensor.item() cannot be called on meta tensors")"""
    meta = [[torch.empty(4, 3, 8, 8, device="meta")]]
    with pytest.raises(RepresentativeDataError, match="input 0 of batch 0 is on the meta device.*real values, on cpu or cuda"):
        PTQ(Net().eval(), lambda: iter(meta))


class ByKeyword(nn.Module):
    """Inputs only by keyword, one with a default the batches do not give."""

    def __init__(self):
        super().__init__()
        self.conv, self.side = nn.Conv2d(3, 4, 3), nn.Conv2d(5, 4, 3)

    def forward(self, *, image, extra, gain=2.0):
        return torch.relu(self.conv(image) + self.side(extra)) * gain


class AnyKeywords(Net):
    def forward(self, **inputs):
        return super().forward(inputs["image"])


def _named_batches(n=3):
    g = torch.Generator().manual_seed(0)  # (dict order unlike the forward's: the names decide)
    batches = [{"extra": torch.randn(4, 5, 8, 8, generator=g), "image": torch.randn(4, 3, 8, 8, generator=g)}
               for _ in range(n)]
    return lambda: iter(batches)


def test_keyword_inputs_come_from_dict_batches(tmp_path):
    """A forward taking its inputs only by keyword quantizes from batches given as dicts (the entries
    passed by name, the forward's defaults traced); the quantized model takes the same keywords, and
    mixed precision and export read the same batches."""
    torch.manual_seed(0)
    model = ByKeyword().eval()
    q, _ = PTQ(model, _named_batches())
    x, e = torch.randn(2, 3, 8, 8), torch.randn(2, 5, 8, 8)
    with torch.no_grad():
        want = model(image=x, extra=e)
        assert [n.name for n in q.graph.nodes if n.op == "placeholder"] == ["image", "extra"]
        assert torch.allclose(q(image=x, extra=e), want, atol=0.1 * float(want.abs().max()))
        wrapped = PTQ(model, lambda: iter([[b] for b in _named_batches()()]))[0]  # ([{...}]: the list habit)
        assert torch.equal(wrapped(image=x, extra=e), q(image=x, extra=e))
    _, info = PTQ(model, _named_batches(), mct.core.ResourceUtilization(weights_memory=200))
    assert info.mixed_precision_cfg is not None
    path = mct.exporter.pytorch_export_model(q, tmp_path / "by_keyword.onnx", _named_batches())
    assert path.exists()


def test_keyword_inputs_given_wrongly_say_how_to_pass_them():
    model = ByKeyword().eval()
    with pytest.raises(RepresentativeDataError, match=r"only by keyword: yield each batch as a dict naming them "
                                                      r"\(\{'image': tensor, 'extra': tensor\}\)"):
        PTQ(model, gen())
    with pytest.raises(CaptureError, match=r"argument 'extra' with no default.*a dict naming every input"):
        PTQ(model, lambda: iter([{"image": torch.randn(4, 3, 8, 8)}]))
    with pytest.raises(RepresentativeDataError, match=r"give \['extra'\] but not 'image'.*add 'image' to the batches"):
        PTQ(model, lambda: iter([{"extra": torch.randn(4, 5, 8, 8)}]))
    with pytest.raises(RepresentativeDataError, match=r"name \['img'\], which ByKeyword.forward does not take"):
        PTQ(model, lambda: iter([{"img": torch.randn(4, 3, 8, 8)}]))
    batches = list(_named_batches()())
    mixed = [batches[0], {"image": batches[1]["image"]}]
    with pytest.raises(RepresentativeDataError, match=r"batch 1 names \['image'\] but the first batch named"):
        PTQ(model, lambda: iter(mixed))
    # (a forward reading **inputs failed with "list indices must be integers or slices, not str")
    with pytest.raises(RepresentativeDataError, match=r"through \*\*inputs, which capture cannot name: give forward "
                                                      r"named parameters"):
        PTQ(AnyKeywords().eval(), gen())
    with pytest.raises(RepresentativeDataError, match=r"through \*\*inputs, which capture cannot name"):
        PTQ(AnyKeywords().eval(), lambda: iter([{"image": torch.randn(4, 3, 8, 8)}]))


def test_an_endless_generator_is_bounded(monkeypatch):
    from hwquant.core.pipeline import representative_data
    monkeypatch.setattr(representative_data, "MAX_BATCHES_PER_PASS", 4)

    def endless():
        while True:
            yield [torch.randn(4, 3, 8, 8)]
    with pytest.warns(UserWarning, match="more than 4 batches"):
        q, _ = PTQ(Net().eval(), endless)
    assert q(torch.randn(1, 3, 8, 8)).shape == (1, 2)


def test_a_reused_iterator_is_named():
    batches = iter([[torch.randn(4, 3, 8, 8)] for _ in range(3)])
    with pytest.raises(RepresentativeDataError, match="same iterator.*fresh iterator"):
        PTQ(Net().eval(), lambda: batches)


@pytest.fixture(scope="module")
def quantized():
    return PTQ(Net().eval(), gen())[0]


def test_export_data_with_the_wrong_channels(quantized, tmp_path):
    with pytest.raises(ExportError, match=r"fails on the first batch of repr_dataset \(shapes \[\(4, 5, 8, 8\)\]"):
        mct.exporter.pytorch_export_model(quantized, tmp_path / "m.onnx", gen(shape=(4, 5, 8, 8)))
    assert list(tmp_path.iterdir()) == []


def test_export_into_a_read_only_folder(quantized, tmp_path, monkeypatch):
    from hwquant.torch.deployment import exporter as pytorch_exporter

    def read_only(path, data):
        raise OSError(errno.EROFS, "Read-only file system", str(path))
    monkeypatch.setattr(pytorch_exporter, "atomic_write", read_only)
    with pytest.raises(ExportError, match="cannot write .*Read-only file system; choose a writable folder"):
        mct.exporter.pytorch_export_model(quantized, tmp_path / "m.onnx", gen())


def test_gptq_data_with_the_wrong_channels():
    cfg = mct.gptq.get_pytorch_gptq_config(n_epochs=1)
    with pytest.raises(RepresentativeDataError, match="gptq_representative_data_gen: input 0 has shape"):
        mct.gptq.pytorch_gradient_post_training_quantization(Net().eval(), gen(), gptq_config=cfg,
                                                             gptq_representative_data_gen=gen(shape=(4, 5, 8, 8)))


class FullyConvolutional(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.Conv2d(8, 2, 1)

    def forward(self, x):
        y = torch.relu(self.a(x))
        z = torch.nn.functional.interpolate(torch.relu(self.b(y)), size=y.shape[-2:], mode="nearest")
        return self.c(y + z)


def test_image_pyramid_calibration_pools_statistics():
    torch.manual_seed(0)
    model = FullyConvolutional().eval()
    pyramid = [[torch.randn(4, 3, h, w)] for h, w in [(16, 16), (24, 32), (32, 24)]]
    q, _ = PTQ(model, lambda: iter(pyramid))
    big = torch.randn(2, 3, 32, 32)  # outside the first batch's size: the ranges cover every size seen
    f = model(big)
    assert 10 * torch.log10(f.pow(2).mean() / (f - q(big)).pow(2).mean()) > 25
    with pytest.raises(RepresentativeDataError, match="number of dimensions may not"):
        PTQ(model, lambda: iter(pyramid + [[torch.randn(4, 3, 16)]]))
    with pytest.raises(InvalidConfigError, match="GPTQ trains on shuffled samples of one size"):
        mct.gptq.pytorch_gradient_post_training_quantization(
            model, lambda: iter(pyramid), gptq_config=mct.gptq.get_pytorch_gptq_config(n_epochs=1))


class SpectrumLSTM(nn.Module):
    """A power spectrum (heavy-tailed: most values tiny) read by an LSTM the TPC leaves float."""

    def __init__(self):
        super().__init__()
        self.lstm, self.fc = nn.LSTM(8, 16, batch_first=True), nn.Linear(16, 4)

    def forward(self, power):
        _, (h, _) = self.lstm(power)
        return self.fc(torch.relu(h[-1]))


def test_a_tensor_only_float_layers_read_stays_float():
    torch.manual_seed(0)
    model = SpectrumLSTM().eval()
    spectra = [[torch.randn(16, 20, 8).pow(2) * torch.rand(16, 20, 1).pow(6) * 30] for _ in range(3)]
    q, _ = PTQ(model, lambda: iter(spectra))
    placeholder = next(n for n in q.graph.nodes if n.op == "placeholder")
    assert all(u.op != "call_module" or "holder" not in u.target for u in placeholder.users)
    x = spectra[0][0]
    f = model(x)
    assert 10 * torch.log10(f.pow(2).mean() / (f - q(x)).pow(2).mean()) > 30
