"""The thread stress run of docs/BENCHMARKS.md ("Threads"): every public call (PyTorch, and Keras on its
torch backend in the same process), each on its own model, run concurrently at 2, 4 and 8 threads (this
machine has 2 cores), round after round; each result compared bit for bit with the same call run alone.

    .venv/bin/python -m benchmarks.run_threads [--rounds 15] [--threads 2,4,8]

Writes benchmarks/results/threads.json. Exit status 1 when any concurrent result differs or fails.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", default="2,4,8")
    parser.add_argument("--no-keras", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # (each call's notes on what stays float, once per call)
    warnings.filterwarnings("ignore")
    from benchmarks import thread_stress as stress

    jobs = {**stress.TORCH_JOBS, **stress.REAL_JOBS, **({} if args.no_keras else stress.KERAS_JOBS)}
    references = stress.references_of(jobs)
    start = time.perf_counter()
    for job in jobs.values():  # once more, warm: what one of each costs run one after another
        job()
    alone_s = time.perf_counter() - start
    print(f"{len(jobs)} calls, each run alone twice: deterministic; {alone_s:.1f} s for one of each", flush=True)
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        result = stress.run_rounds(jobs, references, threads, args.rounds)
        per_call_alone = alone_s / len(jobs)
        rows.append({"threads": threads, "rounds": result.rounds, "calls": result.calls,
                     "differences": len(result.differences), "errors": len(result.errors),
                     "seconds": round(result.seconds, 1),
                     "seconds_if_run_one_after_another": round(per_call_alone * result.calls, 1),
                     "first_differences": result.differences[:5], "first_errors": result.errors[:5]})
        print(f"{threads} threads x {result.rounds} rounds: {result.calls} calls, {len(result.differences)} differ, "
              f"{len(result.errors)} failed, {result.seconds:.1f} s (one after another: "
              f"{per_call_alone * result.calls:.1f} s)", flush=True)
        for line in result.differences[:5] + result.errors[:5]:
            print("   ", line)
    out = Path(__file__).parent / "results" / "threads.json"
    out.write_text(json.dumps({"calls": sorted(jobs), "cores": os.cpu_count(), "runs": rows}, indent=1) + "\n")
    print(f"wrote {out}")
    return 1 if any(r["differences"] or r["errors"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
