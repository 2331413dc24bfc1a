"""hwquant's Keras PTQ of MobileNetV2 on Keras' TensorFlow backend, for benchmarks/run_keras.py. Runs in
.venv-tf (scripts/setup_keras_tensorflow.sh makes it: TensorFlow, no torch):

    .venv-tf/bin/python benchmarks/hwquant_keras_tf.py --data in.npz --out out.npz [--tflite-dir DIR]

`in.npz` as for benchmarks/peer_mct_keras.py (weights by layer name, calibration and evaluation images).
With --tflite-dir: also writes there the float model as TFLite (float.tflite), the quantized model as
INT8 TFLite (hwquant_int8.tflite), the model quantized with the TFLite TPC and exported the same way
(hwquant_int8_tflite_tpc.tflite), and parity.npz: per file the worst layer's distance, in steps, from
the simulation fed the file's own inputs (first evaluation image).
"""
import argparse
import os
import sys
from pathlib import Path

os.environ["KERAS_BACKEND"] = "tensorflow"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tflite-dir")
    ap.add_argument("--mp-out", help="also run mixed precision at 75 %% of the weights memory; its results there")
    args = ap.parse_args()
    import keras
    import tensorflow as tf

    import hwquant as mct
    from benchmarks.keras_models import (float_tflite, keras_mobilenet_v2_architecture, mixed_precision_and_save,
                                         quantize_and_save, set_weights_by_name)
    from hwquant.keras.tflite_int8 import layer_parity

    tf.config.threading.set_intra_op_parallelism_threads(2)
    data = np.load(args.data)
    model = keras_mobilenet_v2_architecture()
    set_weights_by_name(model, data)
    quantized = quantize_and_save(model, lambda m, gen: mct.ptq.keras_post_training_quantization(m, gen)[0], data, args.out)
    if args.mp_out:
        mixed_precision_and_save(model, lambda m, gen: mct.core.keras_resource_utilization_data(m, gen),
                                 lambda m, gen, weights: mct.ptq.keras_post_training_quantization(
                                     m, gen, target_resource_utilization=mct.core.ResourceUtilization(weights_memory=weights))[0],
                                 data, args.mp_out, 0.75)
    if not args.tflite_dir:
        return
    folder, calib = Path(args.tflite_dir), data["calib"]
    float_tflite(keras, model, str(folder / "float.tflite"))
    tflite_tpc = mct.get_target_platform_capabilities("1.0", "tflite")
    for_tflite = mct.ptq.keras_post_training_quantization(
        model, lambda: ([calib[i:i + 32]] for i in range(0, len(calib), 32)), target_platform_capabilities=tflite_tpc)[0]
    parity = {}
    for name, q in (("hwquant_int8", quantized), ("hwquant_int8_tflite_tpc", for_tflite)):
        path = mct.exporter.keras_export_model(q, folder / f"{name}.tflite",
                                               serialization_format=mct.exporter.KerasExportSerializationFormat.TFLITE,
                                               quantization_format=mct.exporter.QuantizationFormat.INT8)
        steps = [v for v in layer_parity(q, path.read_bytes(), data["eval"][:1]).values() if not np.isnan(v)]
        parity[name] = np.array([max(steps), len(steps)])
    np.savez(folder / "parity.npz", **parity)


if __name__ == "__main__":
    main()
