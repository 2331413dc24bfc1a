"""MCT 2.6.1's Keras PTQ on MobileNetV2 with torchvision's weights, for benchmarks/run_keras.py.
Runs in .venv-mct-keras (TensorFlow 2.15, Keras 2: MCT's Keras path needs TF <= 2.15):

    .venv-mct-keras/bin/python benchmarks/peer_mct_keras.py --data in.npz --out out.npz

`in.npz` holds the Keras layer weights by name (`w:<layer>:<k>`), the calibration and evaluation
images (NHWC); `out.npz` gets the float and quantized logits and the quantization time. The tf.keras
MobileNetV2's config is edited as benchmarks/keras_models.py edits the Keras 3 one (torchvision's
padding, batch-norm epsilon 1e-5), in Keras 2's config format.
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.keras_models import (  # noqa: E402
    mixed_precision_and_save,
    quantize_and_save,
    set_weights_by_name,
    torchvision_mobilenet_v2_config,
)


def _point_inbound_to(layer, source):
    """Keras 2's config format of a layer's single inbound tensor."""
    layer["inbound_nodes"] = [[[source, 0, 0, {}]]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tflite-dir", help="also export MCT's INT8 TFLite file there (mct_int8.tflite)")
    ap.add_argument("--mp-out", help="also run mixed precision at 75 %% of the weights memory; its results there")
    args = ap.parse_args()
    import model_compression_toolkit as mct
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(2)
    data = np.load(args.data)
    model = tf.keras.Model.from_config(torchvision_mobilenet_v2_config(tf.keras, _point_inbound_to))
    set_weights_by_name(model, data)
    tpc = mct.get_target_platform_capabilities("1.0", "imx500")
    quantized = quantize_and_save(model, lambda m, gen: mct.ptq.keras_post_training_quantization(
        m, gen, target_platform_capabilities=tpc)[0], data, args.out)
    if args.mp_out:
        mixed_precision_and_save(
            model, lambda m, gen: mct.core.keras_resource_utilization_data(m, gen, target_platform_capabilities=tpc),
            lambda m, gen, weights: mct.ptq.keras_post_training_quantization(
                m, gen, target_resource_utilization=mct.core.ResourceUtilization(weights_memory=weights),
                target_platform_capabilities=tpc)[0], data, args.mp_out, 0.75)
    if args.tflite_dir:
        mct.exporter.keras_export_model(quantized, str(Path(args.tflite_dir) / "mct_int8.tflite"),
                                        serialization_format=mct.exporter.KerasExportSerializationFormat.TFLITE,
                                        quantization_format=mct.exporter.QuantizationFormat.INT8)


if __name__ == "__main__":
    main()
