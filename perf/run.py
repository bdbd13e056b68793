#!/usr/bin/env python3
"""Event-timed benchmark runner: times every case (ours and each baseline, in the same run),
measures the ceilings, writes perf/results/latest.json and prints a table.

    python perf/run.py                      # all families
    python perf/run.py --families norm      # a subset (the JSON then holds only those)
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import torch  # noqa: E402

from harness import TIMING, ceilings, time_case  # noqa: E402
from registry import FAMILY_OPS, all_cases, chosen_families  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent


def commit() -> str:
    if os.environ.get("CUTE_OPS_COMMIT"):
        return os.environ["CUTE_OPS_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def measure(case, ceil) -> dict:
    times, how = time_case(case)
    ours = times.pop("ours")
    # "ours_<variant>": other settings of our op (policies, the two-launch control), not baselines.
    variants = {k: round(times.pop(k), 2) for k in list(times) if k.startswith("ours_")}
    metrics = {}
    if case.bytes:
        metrics["TBps"] = round(case.bytes / ours / 1e6, 3)
        metrics["frac_of_copy"] = round(metrics["TBps"] / ceil["copy_TBps"], 3)
    if case.flops:
        metrics["tflops"] = round(case.flops / ours / 1e6, 1)
        metrics["frac_of_matmul"] = round(metrics["tflops"] / ceil["matmul_bf16_tflops"], 3)
    if times:
        best = min(times, key=times.get)
        metrics["best_baseline"] = best
        metrics["speedup_vs_best_baseline"] = round(times[best] / ours, 3)
    return {"op": case.op, "family": case.family, "shape": case.shape,
            "dtype": str(case.dtype).removeprefix("torch."), "ours_us": round(ours, 2),
            "baselines_us": {k: round(v, 2) for k, v in times.items()},
            **({"variants_us": variants} if variants else {}), "metrics": metrics,
            "timing": how}


def table(results: list[dict]) -> str:
    rows = [("op", "shape", "dtype", "ours us", "best baseline us", "speedup", "TB/s or TFLOP/s", "of ceiling")]
    for r in results:
        m = r["metrics"]
        best = m.get("best_baseline")
        rows.append((r["op"], " ".join(f"{k}={v}" for k, v in r["shape"].items()), r["dtype"],
                     f"{r['ours_us']:.1f}", f"{r['baselines_us'][best]:.1f} ({best})" if best else "-",
                     f"{m.get('speedup_vs_best_baseline', 0):.2f}x",
                     f"{m['TBps']:.2f} TB/s" if "TBps" in m else f"{m.get('tflops', 0):.0f} TFLOP/s",
                     f"{100 * m['frac_of_copy']:.0f}% copy" if "frac_of_copy" in m
                     else f"{100 * m.get('frac_of_matmul', 0):.0f}% matmul"))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", help="comma list (default: all)")
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "perf" / "results" / "latest.json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("perf/run.py needs a CUDA GPU")
    import cute_ops

    families = chosen_families(args.families.split(",") if args.families else None)
    missing = [f for f in families if not cute_ops.cuda_kernels_available(FAMILY_OPS.get(f, f))]
    if missing:
        raise SystemExit(f"cute_ops was built without the CUDA kernels of {missing}: "
                         "`pip install --no-build-isolation -e .` (CUTE_OPS_FAMILIES unset builds all)")

    ceil = ceilings()
    print(f"{torch.cuda.get_device_name()}: copy {ceil['copy_TBps']} TB/s, "
          f"bf16 matmul {ceil['matmul_bf16_tflops']} TFLOP/s", flush=True)
    results = []
    for case in all_cases(families):
        r = measure(case, ceil)
        print(f"  {case.id}: ours {r['ours_us']} us, baselines {r['baselines_us']}", flush=True)
        results.append(r)
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "commit": commit(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "ceilings": ceil, "timing": TIMING, "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\nwrote {args.out}\n")
    print(table(results))


if __name__ == "__main__":
    main()
