"""No model file given to hwquant runs code unless the user says it is trusted (hwquant.model_files).

Each loader gets a file that would create a marker file when loaded: a pickled .pt naming a function, a .pt
of a user-defined class, a .pt2 whose shape expression Python would evaluate, a .keras and a legacy .h5 with a
Lambda layer, an ONNX model whose external data lies outside its folder. Through the command line and the
library: refused before anything runs (no marker, exit code 2, a message naming what the file asks for and
--trust-model-file); with the flag a trusted file loads (and a malicious one runs: the documented risk).
Legitimate files (torch.nn / torchvision-style whole-model pickles, plain .pt2) load without the flag."""
import importlib.util
import json
import os
import pathlib
import shutil
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner

from hwquant.cli import main
from hwquant.errors import UnsafeModelFileError

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
FLAG = "--trust-model-file"


def _refused(result, *said):
    """The command refused the file: exit 2, one error line naming what the file asks for and the flag."""
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    assert FLAG in errors[0], result.output
    for text in said:
        assert text in errors[0], result.output


class _TouchOnLoad:
    """Unpickling it creates `marker` (pathlib.Path.touch, a plain function call)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (pathlib.Path(self.marker),)


class _SystemOnLoad:
    """Unpickling it runs a shell command (os.system: 'posix.system' in the pickle)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch '{self.marker}'",)


def _user_net():
    from torch import nn

    class UserNet(nn.Module):  # a class of the user's own: its code is in no allowlist
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.head = nn.Sequential(nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))

        def forward(self, x):
            return self.head(self.conv(x))

    UserNet.__module__, UserNet.__qualname__ = __name__, "UserNet"
    globals()["UserNet"] = UserNet
    return UserNet()


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "data.npz"
    np.savez(path, np.random.default_rng(0).normal(size=(16, 3, 8, 8)).astype(np.float32))
    return str(path)


# ---- pickled .pt / .pth --------------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("payload, named", [(_TouchOnLoad, "pathlib.Path"), (_SystemOnLoad, "posix.system")])
def test_a_pickle_that_runs_code_is_refused_by_every_command(tmp_path, data, payload, named):
    import torch

    marker = tmp_path / "marker"
    evil = tmp_path / "evil.pt"
    torch.save(payload(marker), evil)
    runner = CliRunner()
    _refused(runner.invoke(main, ["quantize", str(evil), "--data", data, "--out", str(tmp_path / "q.onnx"), "-q"]),
             named)
    _refused(runner.invoke(main, ["report", str(evil), str(tmp_path / "q.pt"), "--data", data,
                                  "--report-dir", str(tmp_path / "r")]), named)
    for command in (["export", str(evil), str(tmp_path / "e.onnx"), "--input-shape", "1,3,8,8"],
                    ["check", str(tmp_path / "x.torchscript"), str(evil), "--data", data]):
        (tmp_path / "x.torchscript").write_bytes(b"")
        result = runner.invoke(main, command)
        assert result.exit_code == 2, result.output  # a quantized model is read as plain data only
    assert not marker.exists()
    assert not (tmp_path / "q.onnx").exists() and not (tmp_path / "e.onnx").exists()


@needs_torch
def test_library_loaders_refuse_a_pickle_that_runs_code_and_run_it_only_when_trusted(tmp_path):
    import torch

    from hwquant.torch.command_line import load_model
    from hwquant.torch.model_files import load_pickled_model
    from hwquant.torch.xquant import load_float_model
    marker = tmp_path / "marker"
    evil = tmp_path / "evil.pth"
    torch.save({"weights": torch.ones(2), "payload": _SystemOnLoad(marker)}, evil)
    for load in (load_model, load_float_model, load_pickled_model):
        with pytest.raises(UnsafeModelFileError, match="posix.system.*--trust-model-file"):
            load(str(evil))
    legacy = tmp_path / "legacy.pt"  # torch.save's old, non-zip format: nothing to read ahead, refused all the same
    torch.save(_SystemOnLoad(marker), legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(UnsafeModelFileError, match="posix.system"):
        load_model(str(legacy))
    assert not marker.exists()
    load_pickled_model(evil, trust=True)  # the documented risk of the flag: the file's code runs
    assert marker.exists()


@needs_torch
def test_a_user_class_is_refused_by_default_and_loads_when_trusted(tmp_path, data):
    import torch

    from hwquant.torch.command_line import load_model
    path = tmp_path / "user.pt"
    torch.save(_user_net(), path)
    with pytest.raises(UnsafeModelFileError, match=f"{__name__}.UserNet"):
        load_model(str(path))
    assert type(load_model(str(path), trust=True)).__name__ == "UserNet"
    runner = CliRunner()
    out = tmp_path / "q.onnx"
    _refused(runner.invoke(main, ["quantize", str(path), "--data", data, "--out", str(out), "-q"]), "UserNet",
             "'file.py:function'", ".pt2")
    assert not out.exists()
    result = runner.invoke(main, ["quantize", str(path), "--data", data, "--out", str(out), "-q", "--holdout", "0",
                                  FLAG])
    assert result.exit_code == 0, result.output
    assert "UserNet (pytorch)" in result.output and out.is_file()


@needs_torch
def test_whole_model_pickles_of_torch_layers_load_without_the_flag(tmp_path):
    """torch.save(model) of torch.nn layers (nested containers, recurrent and attention layers, classes held as
    attributes) and of hwquant's quantization wrappers reads without --trust-model-file, as it was saved."""
    import torch
    from torch import nn

    from hwquant.torch.deployment import load_allowlist
    from hwquant.torch.command_line import load_model
    from hwquant.torch.quantizers import PytorchActivationQuantizationHolder, PytorchQuantizationWrapper
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU6(), nn.Upsample(scale_factor=2),
                          nn.ModuleDict({"pool": nn.AdaptiveAvgPool2d(1)}), nn.Flatten(), nn.Linear(4, 2).half())
    model.norm_layer = nn.BatchNorm2d  # a class as an attribute (torchvision's ResNet keeps its norm layer so)
    others = {"lstm.pt": nn.LSTM(3, 4), "attention.pt": nn.MultiheadAttention(8, 2), "seq.pth": model}
    for name, module in others.items():
        torch.save(module, tmp_path / name)
        loaded = load_model(str(tmp_path / name))
        assert type(loaded) is type(module)
        assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), module.state_dict().values()))
    assert load_model(str(tmp_path / "seq.pth")).norm_layer is nn.BatchNorm2d
    # hwquant's and mct-quantizers' layer classes are in the allowlist; functions and foreign classes never are
    for cls in (PytorchQuantizationWrapper, PytorchActivationQuantizationHolder, nn.Conv2d, nn.LSTM):
        assert load_allowlist.model_class(f"{cls.__module__}.{cls.__qualname__}") is cls
    for name in ("posix.system", "builtins.eval", "builtins.getattr", "subprocess.Popen", "torch.nn.modules.conv.F",
                 "torch.fx.graph_module.GraphModule", "torch.nn.functional.relu", "__main__.Net", "mypackage.Net",
                 "torch.nn.modules.module.__builtins__", "torchvision.models.resnet.load_state_dict_from_url"):
        assert load_allowlist.model_class(name) is None, name


@needs_torch
def test_torchvision_models_are_read_without_the_flag(tmp_path):
    pytest.importorskip("torchvision")
    import torch
    import torchvision

    from hwquant.torch.command_line import load_model
    torch.save(torchvision.models.mobilenet_v3_small(num_classes=3), tmp_path / "mnv3.pt")
    assert type(load_model(str(tmp_path / "mnv3.pt"))).__name__ == "MobileNetV3"


# ---- torch.export programs (.pt2) ------------------------------------------------------------------------------
def _rewrite_program(source, target, edit):
    """A copy of the .pt2 archive `source` with its program JSON edited by `edit(document)`."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith("models/model.json"):
                document = json.loads(data)
                edit(document)
                data = json.dumps(document).encode()
            dst.writestr(info, data)
    return target


@pytest.fixture
def program(tmp_path):
    import torch
    from torch import nn
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(2, 3, 8, 8),),
                                          dynamic_shapes=({0: torch.export.Dim("batch")},)), path)
    return path


@needs_torch
def test_a_pt2_that_runs_code_when_loaded_is_refused(tmp_path, data, program):
    """torch.export.load evaluates a shape expression with sympy (Python's eval): a crafted file runs code when
    loaded. hwquant checks the archive first; a plain exported program (a free batch) loads."""
    from hwquant.torch.command_line import load_model
    from hwquant.torch.model_files import exported_program_problems

    marker = tmp_path / "marker"
    expression = f"__import__('pathlib').Path({str(marker)!r}).touch() or 1"

    def inject(document):
        size = document["graph_module"]["graph"]["tensor_values"]["input"]["sizes"]
        size[0] = {"as_expr": {"expr_str": expression, "hint": {"as_int": 1}}}

    evil = _rewrite_program(program, tmp_path / "evil.pt2", inject)
    assert exported_program_problems(program) == []
    assert load_model(str(program)) is not None
    with pytest.raises(UnsafeModelFileError, match="shape expression"):
        load_model(str(evil))
    _refused(CliRunner().invoke(main, ["quantize", str(evil), "--data", data, "--out", str(tmp_path / "q.onnx")]),
             "shape expression", "__import__")
    assert not marker.exists()
    try:  # trusted, torch.export.load evaluates it (the documented risk)
        load_model(str(evil), trust=True)
    except Exception:  # noqa: BLE001 - whether the program then loads does not matter
        pass
    assert marker.exists()


@needs_torch
def test_a_pt2_with_calls_names_or_payloads_beyond_a_plain_program_is_refused(tmp_path, program):
    from hwquant.torch.model_files import check_exported_program

    def target(document):
        document["graph_module"]["graph"]["nodes"][0]["target"] = "torch.os.system"

    def name(document):
        document["graph_module"]["graph"]["nodes"][0]["name"] = "x=__import__('os')"

    def path(document):
        spec = document["graph_module"]["signature"]["input_specs"][0]["parameter"]
        spec["parameter_name"] = '0".weight'

    cases = {"call of torch.os.system": target, "the name": name, "module path": path}
    for said, edit in cases.items():
        with pytest.raises(UnsafeModelFileError, match=said):
            check_exported_program(_rewrite_program(program, tmp_path / "edited.pt2", edit))
    # compiled code and pickled Python objects in the archive
    for entry, said in (("data/aotinductor/model/model.so", "compiled"),
                        ("data/constants/opaque_obj_0", "pickled Python object")):
        shutil.copy(program, tmp_path / "extra.pt2")
        with zipfile.ZipFile(tmp_path / "extra.pt2", "a") as archive:
            archive.writestr(f"{archive.namelist()[0].split('/')[0]}/{entry}", b"\x80\x04N.")
        with pytest.raises(UnsafeModelFileError, match=said):
            check_exported_program(tmp_path / "extra.pt2")


# ---- Keras ---------------------------------------------------------------------------------------------------
@pytest.fixture
def keras_lambda_files(tmp_path):
    """(.keras, .h5 as Keras 3 writes it, .h5 as tf.keras 2 writes it, marker): each with a Lambda layer whose
    function creates the marker when it runs."""
    keras = pytest.importorskip("keras")
    marker = tmp_path / "marker"
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3)(inputs)
    touch = eval(f"lambda t: t * (__import__('pathlib').Path({str(marker)!r}).touch() or 1)")  # no closure to save
    x = keras.layers.Lambda(touch, name="touch")(x)
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(x)))
    files = [tmp_path / "lambda.keras"]
    model.save(files[0])
    if importlib.util.find_spec("h5py") is not None:
        import h5py
        from keras.src.utils import python_utils
        files.append(tmp_path / "lambda.h5")
        model.save(files[1])
        files.append(tmp_path / "lambda_tf2.h5")
        shutil.copy(files[1], files[2])
        code = python_utils.func_dump(touch)
        with h5py.File(files[2], "r+") as f:  # tf.keras 2's form: [code, defaults, closure], function_type lambda
            config = json.loads(f.attrs["model_config"])
            layer = next(la for la in config["config"]["layers"] if la["class_name"] == "Lambda")
            layer["config"].update(function=list(code), function_type="lambda", module="__main__")
            f.attrs["model_config"] = json.dumps(config)
    marker.unlink(missing_ok=True)  # building the model ran the lambda
    return files, marker


def test_a_keras_file_with_a_lambda_layer_is_refused_everywhere(tmp_path, keras_lambda_files):
    import hwquant as mct
    from hwquant.keras.command_line import load_model
    from hwquant.keras.model_files import load_keras_model
    from hwquant.keras.xquant import load_float_model
    files, marker = keras_lambda_files
    np.savez(tmp_path / "nhwc.npz", np.random.default_rng(0).normal(size=(8, 8, 8, 3)).astype(np.float32))
    runner = CliRunner()
    for path in files:
        for load in (load_model, load_float_model, load_keras_model, mct.keras_load_quantized_model):
            with pytest.raises(UnsafeModelFileError, match="Lambda layer 'touch'.*--trust-model-file"):
                load(path)
        _refused(runner.invoke(main, ["quantize", str(path), "--data", str(tmp_path / "nhwc.npz"),
                                      "--out", str(tmp_path / "q.keras"), "-q"]), "Lambda layer 'touch'")
    _refused(runner.invoke(main, ["export", str(files[0]), str(tmp_path / "e.onnx")]), "Lambda")
    _refused(runner.invoke(main, ["check", str(files[0]), str(files[0]), "--data", str(tmp_path / "nhwc.npz")]),
             "Lambda")
    assert not marker.exists() and not (tmp_path / "q.keras").exists()
    for path in files[1:]:
        from hwquant.keras.legacy_h5 import load_legacy_h5_model
        with pytest.raises(UnsafeModelFileError, match="Lambda layer 'touch'"):
            load_legacy_h5_model(path)
    assert not marker.exists()


def test_keras_safe_mode_refuses_what_the_check_does_not_see(keras_lambda_files, monkeypatch):
    """With hwquant's own check out of the way, Keras' safe mode still refuses the lambda, said the same way."""
    from hwquant.keras import model_files
    files, marker = keras_lambda_files
    monkeypatch.setattr(model_files, "check_keras_file", lambda path: None)
    for path in files:
        with pytest.raises(UnsafeModelFileError, match="safe mode"):
            model_files.load_keras_model(path)
    assert not marker.exists()


def test_a_trusted_keras_file_loads_and_runs_its_lambda(tmp_path, keras_lambda_files):
    import hwquant as mct
    from hwquant.keras.command_line import load_model
    files, marker = keras_lambda_files
    model = load_model(str(files[0]), trust=True)
    assert model.get_layer("touch") is not None and marker.exists()  # the documented risk of the flag
    marker.unlink()
    mct.keras_load_quantized_model(files[-1], compile=False, safe_mode=False)
    assert marker.exists()


# ---- ONNX ----------------------------------------------------------------------------------------------------
def _onnx_with_external_data(folder, location):
    """model.onnx in `folder`: y = x + w, w's data read from `location` (offset 0, 8 bytes)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    weight = numpy_helper.from_array(np.zeros(2, np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "8")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "model.onnx")
    return folder / "model.onnx"


@pytest.mark.parametrize("where", ["parent", "absolute", "link"])
def test_onnx_external_data_outside_the_model_folder_is_refused(tmp_path, where):
    from hwquant.exporter.onnx_runtime import run_onnx
    from hwquant.model_files import load_onnx
    secret = tmp_path / "outside"
    secret.write_bytes(np.arange(2, dtype=np.float32).tobytes())
    folder = tmp_path / "model"
    location = {"parent": "../outside", "absolute": str(secret), "link": "link.data"}[where]
    path = _onnx_with_external_data(folder, location)
    if where == "link":
        (folder / "link.data").symlink_to(secret)
    for load in (load_onnx, lambda p: run_onnx(p, [np.zeros((1, 2), np.float32)])):
        with pytest.raises(UnsafeModelFileError, match="outside its folder"):
            load(path)
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 2 and "outside its folder" in result.output, result.output
    if importlib.util.find_spec("torch") is not None:
        from hwquant.torch.capture.onnx_import import module_from_onnx
        with pytest.raises(UnsafeModelFileError, match="outside its folder"):
            module_from_onnx(path)
        np.savez(tmp_path / "d.npz", np.zeros((4, 2), np.float32))
        result = CliRunner().invoke(main, ["quantize", str(path), "--data", str(tmp_path / "d.npz"),
                                           "--out", str(tmp_path / "q.onnx")])
        assert result.exit_code == 2 and "outside its folder" in result.output, result.output


def test_onnx_external_data_inside_the_model_folder_loads(tmp_path):
    from hwquant.exporter.onnx_runtime import run_onnx
    from hwquant.model_files import load_onnx
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.data").write_bytes(np.array([1, 2], np.float32).tobytes())
    path = _onnx_with_external_data(folder, "weights.data")
    assert load_onnx(path).graph.initializer[0].raw_data == np.array([1, 2], np.float32).tobytes()
    out = run_onnx(path, [np.ones((1, 2), np.float32)])[0]
    np.testing.assert_array_equal(out, [[2, 3]])


# ---- the flag --------------------------------------------------------------------------------------------------
def test_every_command_that_reads_model_files_offers_the_flag_and_says_its_risk():
    for command in ("quantize", "report", "export", "check"):
        text = " ".join(CliRunner().invoke(main, [command, "--help"]).output.split())
        assert FLAG in text, command
        assert "runs any code the file holds; use only for files you made or trust" in text, command
