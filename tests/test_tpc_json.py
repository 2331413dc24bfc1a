"""TPC JSON: round trips, migration, and fuzzing (any input loads into a valid TPC or raises
InvalidTPCError, never anything else, and never leaves a file half-written)."""
import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwquant.errors import InvalidTPCError
from hwquant.tpc import (SCHEMA_VERSION, AttributeQuantizationConfig, Fusing, OperatorSetGroup, OperatorsSet,
                         OpQuantizationConfig, QuantizationConfigOptions, QuantizationMethod, Signedness,
                         TargetPlatformCapabilities, export_target_platform_capabilities,
                         get_target_platform_capabilities, load_target_platform_capabilities, tpc_from_dict,
                         tpc_from_json, tpc_to_dict)
from hwquant.tpc.platforms import PLATFORMS

SHIPPED = [(d, v) for d, (versions, _) in PLATFORMS.items() for v in versions]


@pytest.mark.parametrize("device,version", SHIPPED)
def test_shipped_tpc_round_trip_is_identity(tmp_path, device, version):
    tpc = get_target_platform_capabilities(version, device)
    path = export_target_platform_capabilities(tpc, tmp_path / "tpc.json")
    loaded = load_target_platform_capabilities(path)
    assert loaded == tpc
    assert tpc_to_dict(loaded) == tpc_to_dict(tpc)
    assert json.loads(path.read_text())["SCHEMA_VERSION"] == SCHEMA_VERSION


def test_json_uses_documented_encodings():
    data = tpc_to_dict(get_target_platform_capabilities("4.0"))
    conv = next(s for s in data["operator_set"] if s["name"] == "Conv")
    base = conv["qc_options"]["base_config"]
    assert base["activation_quantization_method"] == 0  # POWER_OF_TWO as its integer value
    assert base["attr_weights_configs_mapping"]["kernel_attr"]["weights_quantization_method"] == 2  # SYMMETRIC
    assert base["signedness"] == 0
    assert conv["type"] == "OperatorsSet"


# ---- strategies of valid TPCs ---------------------------------------------------------------
bits = st.integers(2, 16)
attr_cfgs = st.builds(
    lambda m, b, pc, en: AttributeQuantizationConfig(weights_quantization_method=m, weights_n_bits=b if en else b,
                                                     weights_per_channel_threshold=pc, enable_weights_quantization=en),
    st.sampled_from(list(QuantizationMethod)), bits, st.booleans(), st.booleans())


@st.composite
def op_cfgs(draw):
    preserving = draw(st.booleans())
    fixed = None if preserving else draw(st.one_of(st.none(), st.floats(1e-4, 10)))
    return OpQuantizationConfig(
        default_weight_attr_config=draw(attr_cfgs),
        attr_weights_configs_mapping=draw(st.dictionaries(st.sampled_from(["kernel_attr", "bias_attr", "pos_attr"]),
                                                          attr_cfgs, max_size=2)),
        activation_quantization_method=draw(st.sampled_from([QuantizationMethod.POWER_OF_TWO,
                                                             QuantizationMethod.SYMMETRIC, QuantizationMethod.UNIFORM])),
        activation_n_bits=draw(bits),
        supported_input_activation_n_bits=draw(st.lists(bits, min_size=1, max_size=3)),
        enable_activation_quantization=draw(st.booleans()),
        quantization_preserving=preserving,
        signedness=draw(st.sampled_from(list(Signedness))),
        fixed_scale=fixed,
        fixed_zero_point=None if fixed is None else draw(st.integers(-128, 127)),
        simd_size=draw(st.one_of(st.none(), st.integers(1, 128))))


@st.composite
def qcos(draw):
    options = draw(st.lists(op_cfgs(), min_size=1, max_size=3, unique_by=lambda c: c.model_dump_json()))
    return QuantizationConfigOptions(quantization_configurations=options, base_config=draw(st.sampled_from(options)))


@st.composite
def tpcs(draw):
    names = draw(st.lists(st.text("ABCDEFGHIJ", min_size=1, max_size=4), min_size=0, max_size=5, unique=True))
    sets = [OperatorsSet(name=n, qc_options=draw(st.one_of(st.none(), qcos()))) for n in names]
    fusings = []
    if len(sets) >= 2:
        for _ in range(draw(st.integers(0, 2))):
            a, b = draw(st.permutations(sets))[:2]
            group = draw(st.booleans())
            fusings.append(Fusing(operator_groups=[a, OperatorSetGroup(operators_set=[b]) if group else b]))
        uniq = {f.member_names(): f for f in fusings}
        fusings = list(uniq.values())
    default = draw(op_cfgs())
    return TargetPlatformCapabilities(
        default_qco=QuantizationConfigOptions(quantization_configurations=[default]),
        operator_set=sets, fusing_patterns=fusings, tpc_minor_version=draw(st.integers(0, 9)),
        tpc_patch_version=draw(st.integers(0, 9)), tpc_platform_type=draw(st.sampled_from([None, "x"])),
        name=draw(st.text(min_size=1, max_size=8)), is_simd_padding=draw(st.booleans()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tpcs())
def test_random_valid_tpc_round_trips(tpc):
    assert tpc_from_json(json.dumps(tpc_to_dict(tpc))) == tpc


# ---- fuzzing ----------------------------------------------------------------------------------
_BASE = tpc_to_dict(get_target_platform_capabilities("5.0"))
json_values = st.recursive(st.none() | st.booleans() | st.integers(-300, 300) | st.floats(allow_nan=True)
                           | st.text(max_size=6),
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                           max_leaves=8)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


_ALL_PATHS = [p for p in _paths(_BASE) if p]


def _loads_or_refuses(text):
    try:
        tpc = tpc_from_json(text)
    except InvalidTPCError:
        return None
    assert isinstance(tpc, TargetPlatformCapabilities)
    return tpc


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(_ALL_PATHS), json_values, st.booleans())
def test_mutated_tpc_json_loads_or_raises_validation_error(path, value, delete):
    data = copy.deepcopy(_BASE)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        if isinstance(parent, list):
            parent.pop(path[-1])
        else:
            del parent[path[-1]]
    else:
        parent[path[-1]] = value
    _loads_or_refuses(json.dumps(data))


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_arbitrary_json_is_refused_cleanly(value):
    assert _loads_or_refuses(json.dumps(value)) is None


_BASE_TEXT = json.dumps(_BASE)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, len(_BASE_TEXT) - 1))
def test_truncated_json_is_refused(cut):
    with pytest.raises(InvalidTPCError, match="not valid JSON"):
        tpc_from_json(_BASE_TEXT[:cut])


# ---- version handling and files ---------------------------------------------------------------
def test_truncated_file_error_says_truncated(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(_BASE_TEXT[: len(_BASE_TEXT) // 2])
    with pytest.raises(InvalidTPCError, match="truncated"):
        load_target_platform_capabilities(path)


@pytest.mark.parametrize("version,message", [(None, "no SCHEMA_VERSION"), ("2", "not an integer"),
                                             (99, "newer than this hwquant"), (0, "unknown")])
def test_bad_schema_versions(version, message):
    data = dict(_BASE)
    if version is None:
        del data["SCHEMA_VERSION"]
    else:
        data["SCHEMA_VERSION"] = version
    with pytest.raises(InvalidTPCError, match=message):
        tpc_from_dict(data)


def _as_schema_v1(data):
    """What an older (schema 1) file looks like: no insert_preserving_quantizers, no fused-op
    config, and the Expand set spelled 'Expend'."""
    old = copy.deepcopy(data)
    old["SCHEMA_VERSION"] = 1
    del old["insert_preserving_quantizers"]
    for f in old["fusing_patterns"]:
        del f["fuse_op_quantization_config"]
    for s in old["operator_set"]:
        if s["name"] == "Expand":
            s["name"] = "Expend"
    return old


def test_schema_v1_file_is_migrated(tmp_path):
    tpc = get_target_platform_capabilities("4.0")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(_as_schema_v1(tpc_to_dict(tpc))))
    loaded = load_target_platform_capabilities(path)
    assert loaded == tpc
    assert loaded.SCHEMA_VERSION == SCHEMA_VERSION
    assert loaded.is_opset_in_model("Expand")


def test_invalid_content_names_the_problem():
    data = copy.deepcopy(_BASE)
    data["operator_set"].append(copy.deepcopy(data["operator_set"][0]))
    with pytest.raises(InvalidTPCError, match="unique"):
        tpc_from_dict(data)


def test_missing_file_and_wrong_type(tmp_path):
    with pytest.raises(InvalidTPCError, match="does not exist"):
        load_target_platform_capabilities(tmp_path / "nope.json")
    with pytest.raises(TypeError, match="TargetPlatformCapabilities"):
        load_target_platform_capabilities(42)


def test_export_is_atomic_and_keeps_old_file_on_failure(tmp_path, monkeypatch):
    tpc = get_target_platform_capabilities()
    path = tmp_path / "tpc.json"
    path.write_text("previous contents")

    import hwquant.fileio as fileio

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(fileio.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        export_target_platform_capabilities(tpc, path)
    assert path.read_text() == "previous contents"
    assert [p.name for p in tmp_path.iterdir()] == ["tpc.json"]  # no temporary file left behind


def test_export_into_missing_folder_fails_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        export_target_platform_capabilities(get_target_platform_capabilities(), tmp_path / "no" / "tpc.json")
