"""Saving and loading quantized PyTorch models as plain data (hwquant.torch.deployment.saved_model)."""
import copy
import operator

import pytest
import torch
from torch import nn

import hwquant as mct
from hwquant.torch.deployment.metadata import read_metadata
from hwquant.torch.quantizers import InferableQuantizer
from hwquant.torch.deployment.saved_model import SavedModelError, load_quantized_model, save_quantized_model


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.relu2 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        x = self.relu(self.bn(self.conv(x)))
        x = self.relu2(self.dw(x)) + x
        return self.fc(torch.flatten(self.pool(x), 1))


class TwoInTwoOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 1, bias=False)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(8, 6)

    def forward(self, x, y):
        z = torch.cat([self.relu(self.a(x)), self.b(y)], dim=1)
        m = z.mean(dim=(2, 3))
        return self.fc(m), m.view(m.size(0), 2, 4)


def _quantize(model, n_inputs):
    def gen():
        for _ in range(2):
            yield [torch.randn(4, 3, 16, 16) for _ in range(n_inputs)]
    torch.manual_seed(0)
    quantized, _ = mct.ptq.pytorch_post_training_quantization(model.eval(), gen)
    return quantized


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(0)
    return _quantize(CNN(), 1)


@pytest.fixture(scope="module")
def two():
    torch.manual_seed(1)
    return _quantize(TwoInTwoOut(), 2)


def _outputs(model, inputs):
    with torch.no_grad():
        out = model(*inputs)
    return out if isinstance(out, tuple) else (out,)


def _check_round_trip(model, path, n_inputs):
    save_quantized_model(model, path)
    assert isinstance(torch.load(path, weights_only=True), dict)  # plain data only
    loaded = load_quantized_model(path)
    assert isinstance(loaded, torch.fx.GraphModule) and not loaded.training
    inputs = [torch.randn(3, 3, 16, 16) for _ in range(n_inputs)]
    expected, got = _outputs(model, inputs), _outputs(loaded, inputs)
    assert len(expected) == len(got) and all(torch.equal(e, g) for e, g in zip(expected, got))
    assert list(loaded.state_dict()) == list(model.state_dict())
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    assert [(n, p.requires_grad) for n, p in loaded.named_parameters()] == \
           [(n, p.requires_grad) for n, p in model.named_parameters()]
    # the root's class is made per GraphModule instance by torch.fx: compare the submodules
    assert [(n, type(m)) for n, m in loaded.named_modules()][1:] == [(n, type(m)) for n, m in model.named_modules()][1:]
    assert read_metadata(loaded) == read_metadata(model) and read_metadata(loaded)["framework"] == "pytorch"
    assert type(loaded).__name__ == type(model).__name__
    return loaded


def test_cnn_round_trip(cnn, tmp_path):
    loaded = _check_round_trip(cnn, tmp_path / "cnn.pt", 1)
    targets = [n.target for n in loaded.graph.nodes if n.op == "call_function"]
    assert operator.add in targets and torch.flatten in targets  # the residual add survived quantization
    for (_, a), (_, b) in zip(cnn.named_modules(), loaded.named_modules()):
        if isinstance(a, InferableQuantizer):
            assert (a.method, a.num_bits, a.params, a.channel_axis, a.target) == \
                   (b.method, b.num_bits, b.params, b.channel_axis, b.target)
        if isinstance(a, nn.Conv2d):
            assert (b.kernel_size, b.padding, b.groups) == (a.kernel_size, a.padding, a.groups)
            assert isinstance(b.kernel_size, tuple)


def test_two_inputs_tuple_outputs_round_trip(two, tmp_path):
    loaded = _check_round_trip(two, tmp_path / "two.pt", 2)
    assert {n.op for n in loaded.graph.nodes} >= {"call_function", "call_method"}
    on_cpu = load_quantized_model(tmp_path / "two.pt", map_location="cpu")
    assert all(t.device.type == "cpu" for t in on_cpu.state_dict().values())


def test_generic_torch_modules_round_trip(cnn, tmp_path):
    """Nested containers, a None bias, BatchNorm buffers and a non-persistent buffer survive."""
    gm = _copy(cnn)
    block = nn.Sequential(nn.Conv2d(5, 5, 1, bias=False), nn.BatchNorm2d(5), nn.Hardswish()).eval()
    block[1].running_mean.uniform_(-1, 1)
    block.register_buffer("offset", torch.full((1, 5, 1, 1), 0.25), persistent=False)
    _append_module(gm, "extra", block)
    loaded = load_quantized_model(save_quantized_model(gm, tmp_path / "extra.pt"))
    x = torch.randn(2, 3, 16, 16)
    assert torch.equal(gm(x), loaded(x))
    assert loaded.extra[0].bias is None and "offset" in loaded.extra._non_persistent_buffers_set
    assert list(loaded.state_dict()) == list(gm.state_dict())


def _copy(model):
    copied = copy.deepcopy(model)  # the fixture's graph must stay untouched
    assert read_metadata(copied) == read_metadata(model)
    return copied


def _append_module(gm, name, module):
    """Put `module` after the model's output (through a view made with a tensor method)."""
    gm.add_submodule(name, module)
    graph = gm.graph
    out = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(out):
        shaped = graph.call_method("view", (out.args[0], -1, 5, 1, 1))
        new = graph.call_module(name, (shaped,))
    out.args = (new,)
    gm.recompile()


def test_refuses_float_model_and_non_modules(tmp_path):
    with pytest.raises(ValueError, match="quantize it first with mct.ptq.pytorch_post_training_quantization"):
        save_quantized_model(CNN(), tmp_path / "f.pt")
    with pytest.raises(ValueError, match="quantize it first"):
        save_quantized_model(torch.fx.symbolic_trace(CNN()), tmp_path / "f.pt")
    with pytest.raises(TypeError, match="nn.Module"):
        save_quantized_model({"weight": torch.ones(1)}, tmp_path / "f.pt")
    assert list(tmp_path.iterdir()) == []


def test_save_into_missing_folder_creates_nothing(cnn, tmp_path):
    with pytest.raises(FileNotFoundError):
        save_quantized_model(cnn, tmp_path / "missing" / "m.pt")
    assert list(tmp_path.iterdir()) == []


class Custom(nn.Module):
    def forward(self, x):
        return x * 2


def test_refuses_custom_module_at_save(cnn, tmp_path):
    gm = _copy(cnn)
    _append_module(gm, "custom", Custom())
    with pytest.raises(ValueError, match=r"module 'custom' \(Custom\).*test_saved_model.Custom.*ONNX or TorchScript"):
        save_quantized_model(gm, tmp_path / "c.pt")
    assert list(tmp_path.iterdir()) == []


def test_refuses_function_outside_allowlist_at_save(cnn, tmp_path):
    gm = _copy(cnn)
    out = next(n for n in gm.graph.nodes if n.op == "output")
    with gm.graph.inserting_before(out):
        new = gm.graph.call_function(print, (out.args[0],))
    out.args = (new,)
    gm.recompile()
    with pytest.raises(ValueError, match="print.*outside the allowlist"):
        save_quantized_model(gm, tmp_path / "p.pt")


def test_load_errors(cnn, tmp_path):
    with pytest.raises(SavedModelError, match="no quantized-model file"):
        load_quantized_model(tmp_path / "absent.pt")
    torch.save(CNN().state_dict(), tmp_path / "state.pt")
    with pytest.raises(SavedModelError, match="not a hwquant quantized-model file"):
        load_quantized_model(tmp_path / "state.pt")
    good = save_quantized_model(cnn, tmp_path / "good.pt")
    data = good.read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(SavedModelError, match="not a readable"):
        load_quantized_model(tmp_path / "cut.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a torch file" * 10)
    with pytest.raises(SavedModelError, match="not a readable"):
        load_quantized_model(tmp_path / "junk.pt")
    torch.save(CNN(), tmp_path / "pickled_module.pt")  # a whole pickled module: refused by weights_only
    with pytest.raises(SavedModelError, match="not a readable"):
        load_quantized_model(tmp_path / "pickled_module.pt")
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(SavedModelError, match="not a hwquant quantized-model file"):
        load_quantized_model(tmp_path / "list.pt")
    record = torch.load(good, weights_only=True)
    record["version"] = 99
    torch.save(record, tmp_path / "v99.pt")
    with pytest.raises(SavedModelError, match="version 99"):
        load_quantized_model(tmp_path / "v99.pt")


def _tampered(path, tmp_path, edit):
    """Edit the plain record the way an attacker could, and write it back with torch.save."""
    record = torch.load(path, weights_only=True)
    edit(record)
    torch.save(record, tmp_path / "tampered.pt")
    return tmp_path / "tampered.pt"


def _first(records, **match):
    return next(r for r in records if all(r.get(k) == v for k, v in match.items()))


def _set_class(name):
    def edit(record):
        next(s for _, s in record["modules"]["children"] if s["kind"] == "torch")["class"] = name
    return edit


def _set_function(name, args=None):
    def edit(record):
        node = _first(record["graph"], op="call_function")
        node["target"] = name
        if args is not None:
            node["args"], node["kwargs"] = {"$": "tuple", "items": args}, {"$": "dict", "items": []}
    return edit


@pytest.mark.parametrize("name", ["os.system", "subprocess.Popen", "torch.os.system",
                                  "torch.nn.modules.module.os.system",
                                  "torch.hub.load", "builtins.eval"])
def test_tampered_module_class_is_refused(cnn, tmp_path, name):
    path = save_quantized_model(cnn, tmp_path / "m.pt")
    with pytest.raises(SavedModelError, match=f"module class '{name}' is not in the allowlist"):
        load_quantized_model(_tampered(path, tmp_path, _set_class(name)))


@pytest.mark.parametrize("name", ["os.system", "subprocess.Popen", "torch.os.system", "torch.load", "torch.save",
                                  "torch.cond", "torch.get_device_module", "torch.ops.aten.from_file",
                                  "builtins.eval", "builtins.exec", "operator.attrgetter",
                                  "torch.Tensor.__reduce_ex__"])
def test_tampered_function_is_refused(cnn, tmp_path, name):
    path = save_quantized_model(cnn, tmp_path / "m.pt")
    with pytest.raises(SavedModelError, match=f"function '{name}' is not in the allowlist"):
        load_quantized_model(_tampered(path, tmp_path, _set_function(name)))


X = {"$": "node", "name": "x"}
EMPTY = {"$": "tuple", "items": []}


@pytest.mark.parametrize("edit, message", [
    (lambda r: _first(r["graph"], op="call_method").update(target="__class__"), "not a public torch.Tensor method"),
    (lambda r: _first(r["graph"], op="call_method").update(target="apply_"), "not a public torch.Tensor method"),
    (lambda r: _first(r["graph"], op="placeholder").update(target="x=__import__('os')"), "invalid input name"),
    (lambda r: _first(r["graph"], op="call_function")["kwargs"]["items"].append(["a=1);import os;(", 1]),
     "invalid keyword argument"),
    (_set_function("builtins.getattr", [X, "__class__"]), "getattr is allowed only with a literal public torch.Tensor"),
    (_set_function("builtins.getattr", [X, "os"]), "getattr is allowed only with a literal public torch.Tensor"),
    (lambda r: r["graph"].insert(1, {"op": "get_attr", "name": "g", "target": "_modules", "args": EMPTY,
                                     "kwargs": {"$": "dict", "items": []}}), "not a saved tensor"),
    (lambda r: r["graph"].insert(1, {"op": "call_module", "name": "g", "target": "a')\nimport os#", "args": EMPTY,
                                     "kwargs": {"$": "dict", "items": []}}), "invalid target"),
    (lambda r: r.update(class_name="A(); import os"), "invalid class name"),
    (lambda r: r.update(tensors=[]), "malformed"),
    (lambda r: r["modules"].update(kind="pickle"), "unknown module kind"),
])
def test_tampered_graph_is_refused(two, tmp_path, edit, message):
    path = save_quantized_model(two, tmp_path / "m.pt")
    with pytest.raises(SavedModelError, match=message):
        load_quantized_model(_tampered(path, tmp_path, edit))


def test_allowlisted_function_names_resolve():
    from hwquant.torch.deployment.saved_model import _function_name, _resolve_function
    for fn in (torch.cat, torch.flatten, torch.nn.functional.relu, torch.nn.functional.linear, torch.Tensor.mean,
               operator.add, operator.getitem, getattr, torch.ops.aten.add.Tensor, torch.ops.aten.relu,
               torch.fft.rfft, torch.stft, torch.einsum, torch.arange, torch.zeros, torch.special.erf):
        assert _resolve_function(_function_name(fn)) is fn


# ----------------------------------------------------------------------------- process-wide state, imports
F64 = {"$": "dtype", "name": "float64"}


@pytest.mark.parametrize("name, args", [
    ("torch.set_default_dtype", [F64]),
    ("torch.set_default_tensor_type", ["this"]),          # imports a module named in its argument
    ("torch.set_default_device", ["meta"]),
    ("torch.manual_seed", [1]),
    ("torch.set_num_threads", [1]),
    ("torch.set_grad_enabled", [True]),
    ("torch.use_deterministic_algorithms", [True]),
    ("torch.set_printoptions", []),
    ("torch.hub.load", ["a", "b"]),
    ("importlib.import_module", ["this"]),
    ("builtins.__import__", ["this"]),
])
def test_global_state_setters_and_imports_are_refused(cnn, tmp_path, name, args):
    import sys
    path = save_quantized_model(cnn, tmp_path / "m.pt")
    dtype, threads, had_this = torch.get_default_dtype(), torch.get_num_threads(), "this" in sys.modules
    with pytest.raises(SavedModelError, match=f"function '{name}' is not in the allowlist"):
        load_quantized_model(_tampered(path, tmp_path, _set_function(name, args)))
    assert torch.get_default_dtype() == dtype and torch.get_num_threads() == threads
    assert ("this" in sys.modules) == had_this  # nothing was imported by name


@pytest.mark.parametrize("name", ["torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.DataParallel",
                                  "torch.nn.utils.parametrize.ParametrizationList", "torch.nn.Module",
                                  "torch.nn.modules.lazy.LazyModuleMixin"])
def test_module_classes_outside_the_layer_list_are_refused(cnn, tmp_path, name):
    path = save_quantized_model(cnn, tmp_path / "m.pt")
    with pytest.raises(SavedModelError, match="not in the allowlist of layer classes"):
        load_quantized_model(_tampered(path, tmp_path, _set_class(name)))


def test_oversized_factory_is_refused(cnn, tmp_path):
    path = save_quantized_model(cnn, tmp_path / "m.pt")
    huge = {"$": "tuple", "items": [1 << 20, 1 << 20]}
    with pytest.raises(SavedModelError, match="zeros of 1099511627776 elements"):
        load_quantized_model(_tampered(path, tmp_path, _set_function("torch.zeros", [huge])))


def _replace_tensor(key, value):
    def edit(record):
        assert key in record["tensors"]
        record["tensors"][key] = value
    return edit


@pytest.mark.parametrize("key, value, message", [
    ("conv_bn.weight", torch.zeros(8, 3, 5, 5), r"'weight' has shape \(8, 3, 5, 5\), but the layer's attributes"),
    ("fc.layer.bias", torch.zeros(100000), r"'bias' has shape \(100000,\)"),
])
def test_tensors_of_the_wrong_shape_are_refused(cnn, tmp_path, key, value, message):
    path = save_quantized_model(cnn, tmp_path / "m.pt")
    with pytest.raises(SavedModelError, match=message):
        load_quantized_model(_tampered(path, tmp_path, _replace_tensor(key, value)))


def test_quantizer_channels_must_match_the_weight(cnn, tmp_path):
    path = save_quantized_model(cnn, tmp_path / "m.pt")

    def edit(record):
        wrapper = next(s for n, s in record["modules"]["children"] if s["kind"] == "wrapper")
        for item in wrapper["quantizers"]["weight"]["params"]["items"]:
            if isinstance(item[1], list):
                item[1] = item[1] * 3
    with pytest.raises(SavedModelError, match="has 24 channels, the weight 8"):
        load_quantized_model(_tampered(path, tmp_path, edit))

    def per_tensor_with_many(record):
        holder = next(s for n, s in record["modules"]["children"] if s["kind"] == "holder")
        for item in holder["quantizer"]["params"]["items"]:
            if item[0] == "threshold":
                item[1] = [1.0, 2.0]
    with pytest.raises(SavedModelError, match="per-tensor quantizer holds several values"):
        load_quantized_model(_tampered(path, tmp_path, per_tensor_with_many))


@pytest.mark.parametrize("keep", [0.0, 0.5, 0.99])
def test_truncated_file_is_refused(cnn, tmp_path, keep):
    data = save_quantized_model(cnn, tmp_path / "m.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[:int(len(data) * keep)])
    with pytest.raises(SavedModelError, match="not a readable hwquant quantized-model file"):
        load_quantized_model(tmp_path / "cut.pt")
