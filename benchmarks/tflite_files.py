"""Runs TFLite files with ai-edge-litert for benchmarks/run_keras.py (in .venv-tf, which has it):

    .venv-tf/bin/python benchmarks/tflite_files.py --data in.npz --out out.npz a.tflite b.tflite ...

For each file: its size, its median latency at batch 1 (2 threads, XNNPACK, the first evaluation
image, after warm-up) and its logits on the evaluation images of `in.npz` (one image per call: a file
with a fixed batch of 1 takes no other).
"""
import argparse
import os
import time
from pathlib import Path

import numpy as np


def _interpreter(path: str):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path, num_threads=2)
    detail = interpreter.get_input_details()[0]
    if list(detail["shape"])[0] != 1:  # a file with a free batch (MCT's): run it at batch 1 too
        interpreter.resize_tensor_input(detail["index"], [1] + list(detail["shape"])[1:])
    interpreter.allocate_tensors()
    return interpreter, detail["index"], interpreter.get_output_details()[0]["index"]


def measure(path: str, images: np.ndarray, runs: int = 200):
    interpreter, inp, out = _interpreter(path)
    x = images[:1]
    for _ in range(20):
        interpreter.set_tensor(inp, x)
        interpreter.invoke()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        interpreter.set_tensor(inp, x)
        interpreter.invoke()
        times.append(time.perf_counter() - start)
    logits = []
    for i in range(len(images)):
        interpreter.set_tensor(inp, images[i:i + 1])
        interpreter.invoke()
        logits.append(interpreter.get_tensor(out).copy())
    return os.path.getsize(path), float(np.median(times)), np.concatenate(logits)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    images = np.load(args.data)["eval"]
    results = {}
    for path in args.files:
        size, seconds, logits = measure(path, images)
        name = Path(path).stem
        results.update({f"{name}:size": size, f"{name}:seconds": seconds, f"{name}:logits": logits})
        print(f"{name}: {size / 1e6:.2f} MB, {1e3 * seconds:.2f} ms at batch 1", flush=True)
    np.savez(args.out, **results)


if __name__ == "__main__":
    main()
