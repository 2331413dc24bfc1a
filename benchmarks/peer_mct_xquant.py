"""MCT 2.6.1's xquant on the models of benchmarks/run_xquant.py: its PTQ, then its troubleshooting report
(PyTorch, in .venv-mct) or its report (Keras, in .venv-mct-keras: MCT has no Keras troubleshooting), each
call timed alone.

    .venv-mct/bin/python benchmarks/peer_mct_xquant.py --model mnv2 --data in.npz --out out.json [--w4]
    .venv-mct-keras/bin/python benchmarks/peer_mct_xquant.py --model fer_emotion --data in.npz --out out.json

in.npz: `repr` and `val` inputs (the model's layout). out.json: seconds of PTQ and of the report, the output
SQNR (dB) it reports on the representative data, and how many layers it compared and found degraded."""
import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--w4", action="store_true", help="every kernel at 4 bits (MobileNetV2)")
    ap.add_argument("--tpc-version", default="1.0")
    args = ap.parse_args()
    data = np.load(args.data)
    rep_x, val_x = data["repr"], data["val"]

    def rep():
        for s in range(0, len(rep_x), args.batch):
            yield [rep_x[s:s + args.batch]]

    def val():
        for s in range(0, len(val_x), args.batch):
            yield [val_x[s:s + args.batch]], None

    if args.model == "fer_emotion":
        import tensorflow as tf
        from benchmarks import keras_real_models as krm
        import model_compression_toolkit as mct
        import model_compression_toolkit.xquant  # noqa: F401 (not imported by the package itself)
        model = krm.load_fer_model(tf.keras)
        tpc = mct.get_target_platform_capabilities(tpc_version=args.tpc_version)
        start = time.perf_counter()
        q, _ = mct.ptq.keras_post_training_quantization(model, rep, target_platform_capabilities=tpc)
        ptq_s = time.perf_counter() - start
        report = mct.xquant.xquant_report_keras_experimental
        troubleshoot = False
    else:
        import torch
        from benchmarks.peer_mct import build_model, import_mct, imx500_tpc_with_kernel_bits
        mct = import_mct()
        import model_compression_toolkit.xquant  # noqa: F401 (not imported by the package itself)
        model = build_model(args.model) if args.model != "onet" else _onet()
        rep_t = [torch.from_numpy(rep_x[s:s + args.batch]) for s in range(0, len(rep_x), args.batch)]
        val_t = [torch.from_numpy(val_x[s:s + args.batch]) for s in range(0, len(val_x), args.batch)]

        def rep():  # noqa: F811 (torch tensors for MCT's PyTorch path)
            for t in rep_t:
                yield [t]

        def val():  # noqa: F811
            for t in val_t:
                yield [t], None
        core = mct.core.CoreConfig()
        tpc = mct.get_target_platform_capabilities(tpc_version=args.tpc_version)
        if args.w4:
            tpc = imx500_tpc_with_kernel_bits(4)
            bw = mct.core.BitWidthConfig()
            nf = mct.core.network_editor.NodeTypeFilter
            bw.set_manual_weights_bit_width([nf(torch.nn.Conv2d), nf(torch.nn.Linear)], 4, "weight")
            core = mct.core.CoreConfig(bit_width_config=bw)
        start = time.perf_counter()
        q, _ = mct.ptq.pytorch_post_training_quantization(model, rep, core_config=core,
                                                          target_platform_capabilities=tpc)
        ptq_s = time.perf_counter() - start
        report = mct.xquant.xquant_report_troubleshoot_pytorch_experimental
        troubleshoot = True
    with tempfile.TemporaryDirectory() as folder:
        config = mct.xquant.XQuantConfig(report_dir=folder)
        start = time.perf_counter()
        result = report(model, q, rep, val, config)
        report_s = time.perf_counter() - start
    similarity = result[0] if troubleshoot else result
    inter = similarity["intermediate_similarity_metrics_repr"]
    degraded = sum(1 for v in inter.values() if v["cs"] <= 0.1 or v["sqnr"] <= 0.1 or v["mse"] >= 0.1)
    sqnr = similarity["output_similarity_metrics_repr"]["sqnr"]
    out = {"ptq_s": ptq_s, "report_s": report_s, "output_sqnr_db": 10 * math.log10(sqnr) if sqnr > 0 else None,
           "layers_compared": len(inter), "degraded": degraded,
           "judged": {k: len(v) for k, v in result[1].items()} if troubleshoot else None}
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out))


def _onet():
    from benchmarks import real_models
    return real_models.load_mtcnn_onet().model


if __name__ == "__main__":
    main()
