"""Peer runner: Sony MCT 2.6.1 post-training quantization, run in its own virtualenv.

    .venv-mct/bin/python benchmarks/peer_mct.py --model mobilenet_v2 --data in.pt --out out.pt \
        [--variant default|w4|mp|gptq] [--weights-ratio 0.75] [--gptq-epochs 5] [--batch 32]

--data is a torch file {"calib": N x ..., "eval": M x ..., "extra": {name: tensor}} written by
benchmarks/run_ptq.py; --out receives {"eval_logits", "extra_logits", "ptq_seconds", ...}.
Models: "mobilenet_v2" (benchmarks/models.py + real weights) or a Fashion-MNIST model name, loaded
from the state dict cached by benchmarks.models.trained_fashion_model.
Variants (kept so later benchmarks can compare against MCT's other modes):
  default  mct.ptq.pytorch_post_training_quantization(model, rep_gen), default TPC
  w4       same, with every Conv2d/Linear kernel forced to 4 bits (BitWidthConfig), 8-bit activations
  mp       mixed precision: target weights memory = --weights-ratio x the 8-bit weights memory
  gptq     mct.gptq.pytorch_gradient_post_training_quantization, --gptq-epochs epochs
Only the quantization call itself is timed. --export PATH also writes the quantized model as MCT's
default export (MCTQ ONNX), timed apart. Models also include the benchmarks/edge_nets.py networks.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # repo root, for benchmarks.*


def import_mct():
    # MCT imports torchvision; PyPI's torchvision is built for CUDA torch and its C++ ops fail to
    # load on the CPU wheel ("operator torchvision::nms does not exist") unless the two operator
    # schemas are declared first. Only torchvision's pure-Python parts are used.
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    import_mct.keepalive = lib  # the schemas live as long as the Library object
    import model_compression_toolkit as mct
    return mct


def imx500_tpc_with_kernel_bits(bits: int):
    """MCT's IMX500 1.0 TPC with a ``bits``-bit kernel candidate added to its mixed-precision options
    (it offers 8, 4 and 2 bits; BitWidthConfig refuses a width no candidate has)."""
    from model_compression_toolkit.target_platform_capabilities.constants import KERNEL_ATTR, WEIGHTS_N_BITS
    from model_compression_toolkit.target_platform_capabilities.tpc_models.imx500_tpc.v1_0 import tpc
    base, candidates, default = tpc.get_op_quantization_configs()
    if all(c.attr_weights_configs_mapping[KERNEL_ATTR].weights_n_bits != bits for c in candidates):
        candidates = [*candidates, base.clone_and_edit(attr_to_edit={KERNEL_ATTR: {WEIGHTS_N_BITS: bits}})]
    return tpc.generate_tpc(default_config=default, base_config=base, mixed_precision_cfg_list=candidates,
                            name=f"imx500_w{bits}")


def build_model(name: str) -> torch.nn.Module:
    from benchmarks import edge_nets, models
    if name == "mobilenet_v2":
        return models.mobilenet_v2_pretrained()
    if name in edge_nets.EDGE_NETS:
        return edge_nets.build_edge_net(name)
    if name.startswith("real:"):
        from benchmarks import real_models
        return real_models.REGISTRY[name[5:]]().model
    return models.load_cached_fashion_model(name)


def layers_left_float(qmodel: torch.nn.Module) -> int:
    """Layers of MCT's quantized model that carry float weights outside any weight-quantizing wrapper."""
    wrapped = set()
    for name, m in qmodel.named_modules():
        if type(m).__name__ == "PytorchQuantizationWrapper" and getattr(m, "weights_quantizers", None):
            wrapped.update(n for n, _ in m.named_modules(prefix=name))
    return sum(1 for name, m in qmodel.named_modules()
               if name not in wrapped and not list(m.children())
               and any(p.is_floating_point() for p in m.parameters(recurse=False)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant", default="default", choices=["default", "w4", "mp", "gptq"])
    ap.add_argument("--weights-ratio", type=float, default=0.75)
    ap.add_argument("--activation-ratio", type=float, default=None,
                    help="mp: activation-memory target = ratio x the activation memory at the largest candidates")
    ap.add_argument("--tpc-version", default="1.0", help="IMX500 TPC version")
    ap.add_argument("--gptq-epochs", type=int, default=5)
    ap.add_argument("--gptq-no-hessian", action="store_true",
                    help="gptq: use_hessian_based_weights=False, use_hessian_sample_attention=False")
    ap.add_argument("--kernel-bits", type=int, default=None,
                    help="gptq: every Conv2d/Linear kernel at this many bits (BitWidthConfig); w4 implies 4")
    ap.add_argument("--export", default=None, help="also export the quantized model (MCTQ ONNX) to this path")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    random.seed(args.seed), np.random.seed(args.seed), torch.manual_seed(args.seed)
    mct = import_mct()
    data = torch.load(args.data, weights_only=True)
    calib = data["calib"] if isinstance(data["calib"], list) else [data["calib"]]  # one tensor per input
    model = build_model(args.model)

    def rep_gen():  # one list per batch, one tensor per model input
        for i in range(0, len(calib[0]), args.batch):
            yield [t[i:i + args.batch] for t in calib]

    extra_info = {}
    kernel_bits = 4 if args.variant == "w4" else args.kernel_bits
    kwargs = {}
    if kernel_bits is not None:
        bw = mct.core.BitWidthConfig()
        nf = mct.core.network_editor.NodeTypeFilter
        bw.set_manual_weights_bit_width([nf(torch.nn.Conv2d), nf(torch.nn.Linear)], kernel_bits, "weight")
        kwargs["core_config"] = mct.core.CoreConfig(bit_width_config=bw)
        kwargs["target_platform_capabilities"] = imx500_tpc_with_kernel_bits(kernel_bits)
    if args.variant in ("default", "w4", "mp"):
        if args.variant == "mp":
            # Target = ratio x the weights memory at the TPC's largest (8-bit) candidates; this
            # measurement is not part of the timed PTQ call but is reported alongside it.
            t0 = time.perf_counter()
            ru = mct.core.pytorch_resource_utilization_data(model, rep_gen)
            extra_info["ru_data_seconds"] = time.perf_counter() - t0
            extra_info["weights_memory_8bit"] = float(ru.weights_memory)
            extra_info["activation_memory_max"] = float(ru.activation_memory)
            target = {"weights_memory": ru.weights_memory * args.weights_ratio} if args.activation_ratio is None \
                else {"activation_memory": ru.activation_memory * args.activation_ratio}
            kwargs["target_resource_utilization"] = mct.core.ResourceUtilization(**target)
        kwargs["target_platform_capabilities"] = mct.get_target_platform_capabilities(args.tpc_version, "imx500")
        t0 = time.perf_counter()
        qmodel, info = mct.ptq.pytorch_post_training_quantization(model, rep_gen, **kwargs)
        seconds = time.perf_counter() - t0
        final = getattr(info, "final_resource_utilization", None)
        if final is not None:
            extra_info["final_weights_memory"] = float(final.weights_memory)
            extra_info["final_activation_memory"] = float(final.activation_memory)
    else:
        hessian = {"use_hessian_based_weights": False, "use_hessian_sample_attention": False} \
            if args.gptq_no_hessian else {}
        cfg = mct.gptq.get_pytorch_gptq_config(n_epochs=args.gptq_epochs, **hessian)
        t0 = time.perf_counter()
        qmodel, _ = mct.gptq.pytorch_gradient_post_training_quantization(model, rep_gen, gptq_config=cfg, **kwargs)
        seconds = time.perf_counter() - t0

    qmodel.eval()
    if args.export:
        # MCT 2.6.1 was written for torch.onnx.export's TorchScript exporter, the default before torch
        # 2.9; with torch 2.13's default (dynamo) its dynamic_axes call fails. Restore the old default.
        import functools
        torch.onnx.export = functools.partial(torch.onnx.export, dynamo=False)
        t0 = time.perf_counter()
        mct.exporter.pytorch_export_model(qmodel, args.export, rep_gen)
        extra_info["export_seconds"] = time.perf_counter() - t0

    @torch.no_grad()
    def predict(x):  # one tensor or a list (one per input); outputs flattened per sample and concatenated
        xs = x if isinstance(x, list) else [x]
        outs = []
        for i in range(0, len(xs[0]), 64):
            leaves = torch.utils._pytree.tree_leaves(qmodel(*[t[i:i + 64] for t in xs]))
            outs.append(torch.cat([t.float().reshape(t.shape[0], -1) for t in leaves], 1))
        return torch.cat(outs).cpu()

    out = {
        "tool": f"MCT {mct.__version__}",
        "layers_left_float": layers_left_float(qmodel),
        "variant": args.variant,
        "ptq_seconds": seconds,
        "eval_logits": predict(data["eval"]),
        "extra_logits": {k: predict(v) for k, v in data.get("extra", {}).items()},
        **extra_info,
    }
    torch.save(out, args.out)
    print(f"MCT {mct.__version__} {args.variant} on {args.model}: quantization {seconds:.1f} s")


if __name__ == "__main__":
    main()
