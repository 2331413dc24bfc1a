"""`hwquant tpc`: the target platforms (list the shipped ones, show one, export one to JSON, check a file)."""
from __future__ import annotations

import os
from typing import Any, List

import click


@click.group(short_help="The target platforms: list, show, export, check.")
def tpc() -> None:
    """The target platforms (TPC): list the shipped ones, show one, export one to JSON, check a JSON file."""


def resolve_tpc(name: str, param_hint: str = "NAME") -> Any:
    """A shipped TPC by 'device:version' (or 'device' for its default version), or a TPC JSON file; bad names are
    usage errors (exit 2) that list the ones that exist."""
    from hwquant.errors import InvalidTPCError
    from hwquant.tpc.platforms import PLATFORMS, get_target_platform_capabilities
    from hwquant.tpc.serialization import load_target_platform_capabilities
    try:
        if name.endswith(".json") or os.path.sep in name:
            return load_target_platform_capabilities(name)
        device, _, version = name.partition(":")
        if device not in PLATFORMS:
            raise InvalidTPCError(f"no target platform '{device}'")
        return get_target_platform_capabilities(version or PLATFORMS[device][0][0], device)
    except InvalidTPCError as e:
        raise click.BadParameter(f"{e}. Shipped: {', '.join(_shipped_names())}; or a TPC JSON file.",
                                 param_hint=param_hint) from None


def _shipped_names() -> List[str]:
    from hwquant.tpc.platforms import PLATFORMS
    return [f"{device}:{version}" for device, (versions, _) in PLATFORMS.items() for version in versions]


def _bits(config: Any) -> str:
    """'W8A8'-style bits of one quantization configuration: the kernel's where the set has one, then the output's
    ('A=' where the output keeps its input's quantization, 'Afloat' where it stays float)."""
    kernel = next(iter(config.attr_weights_configs_mapping.values()), None)
    weights = "" if kernel is None else f"W{kernel.weights_n_bits}" if kernel.enable_weights_quantization else "Wfloat"
    if config.enable_activation_quantization:
        return f"{weights}A{config.activation_n_bits}"
    return weights + ("A=" if config.quantization_preserving else "Afloat")


def describe_tpc(t: Any) -> str:
    """What `hwquant tpc show` prints: the defaults, each operator set's options, the fusing patterns."""
    default = t.default_qco.base_config or t.default_qco.quantization_configurations[0]
    lines = [f"{t.name} (platform {t.tpc_platform_type or '-'}, version {t.tpc_minor_version}.{t.tpc_patch_version}"
             f"{', SIMD padding' if t.is_simd_padding else ''})",
             f"default: {_bits(default)}, activations {default.activation_quantization_method.name}, "
             f"SIMD {default.simd_size}", "operator sets:"]
    for op in t.operator_set or ():
        options = op.qc_options.quantization_configurations if op.qc_options else ()
        choices = " | ".join(dict.fromkeys(_bits(c) for c in options)) if options else "the default"
        lines.append(f"  {op.name:28s} {choices}")
    lines.append("fusing patterns:")
    for fusing in t.fusing_patterns or ():
        names = [getattr(g, "name", None) or "/".join(o.name for o in getattr(g, "operators_set", ()))
                 for g in fusing.operator_groups]
        lines.append("  " + " -> ".join(names))
    return "\n".join(lines)


@tpc.command("list")
def tpc_list() -> None:
    """The shipped target platforms, as NAME for the other commands."""
    from hwquant.tpc.platforms import DEFAULT_TPC_VERSION, IMX500_TPC
    for name in _shipped_names():
        click.echo(name + ("  (default)" if name == f"{IMX500_TPC}:{DEFAULT_TPC_VERSION}" else ""))


@tpc.command("show")
@click.argument("name")
def tpc_show(name: str) -> None:
    """What a target platform quantizes and how: NAME is 'device:version' (see `hwquant tpc list`) or a JSON file."""
    click.echo(describe_tpc(resolve_tpc(name)))


@tpc.command("export")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False, writable=True))
def tpc_export(name: str, file: str) -> None:
    """Write a target platform as JSON (edit it, then pass the file to any quantization call or command)."""
    from hwquant.tpc.serialization import export_target_platform_capabilities
    t = resolve_tpc(name)
    folder = os.path.dirname(os.path.abspath(file))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise click.BadParameter(f"cannot write into '{folder}' (missing or not writable)", param_hint="FILE")
    click.echo(f"wrote {export_target_platform_capabilities(t, file)}")


@tpc.command("check")
@click.argument("file")
def tpc_check(file: str) -> None:
    """Check a TPC JSON file against the schema: exit 0 and a summary if valid, exit 2 and what is wrong if not."""
    from hwquant.errors import InvalidTPCError
    from hwquant.tpc.serialization import load_target_platform_capabilities
    try:
        t = load_target_platform_capabilities(file)
    except InvalidTPCError as e:
        raise click.BadParameter(str(e), param_hint="FILE") from None
    click.echo(f"valid: {file}\n" + describe_tpc(t))
