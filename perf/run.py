#!/usr/bin/env python3
"""Event-timed benchmark runner: times every case (ours and each baseline, in the same run),
measures the ceilings, writes this GPU's results file and prints a table.

    python perf/run.py                                  # all families: perf/results/<gpu>.json
    python perf/run.py --families norm,rope             # a subset, merged into <gpu>.json
    python perf/run.py --families norm,rope --replace   # a subset that starts <gpu>.json afresh
    python perf/run.py --families norm --out x.json     # a subset written elsewhere
    python perf/run.py --merge x.json [y.json ...]      # --out files merged into <gpu>.json (no GPU)

<gpu> is report.gpu_slug() of the device (h100, h200, ...); perf/results/latest.json is a copy of
the per-GPU file last written. A full run replaces the file. A subset is merged into it (replacing
the rows of its families) only when the file holds the same device and commit; otherwise the run
is refused before measuring anything. That lets a full run be split into invocations at one commit
(one command on the GPU machines may run 10 minutes at most): the first with --replace, the rest
merged in. The file lists its families and, per invocation ("parts"), the families, date and
ceilings; each row's fractions use the ceilings measured in its own invocation. The invocations may
also run at the same time on GPUs of one host (scripts/gpu_check.sh --split-gpus), each of the later
ones with --out, and then be merged with --merge under the same rules; a part records the
CUDA_VISIBLE_DEVICES it ran under. A --match trial is never merged: it lacks rows of its families.

The commit recorded is $CUTE_OPS_COMMIT, to be set to the sha the device runs (a device's git copy
may report a stale HEAD); without it, git's HEAD, marked as possibly stale.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import re
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import torch  # noqa: E402

from harness import TIMING, ceilings, time_case  # noqa: E402
from registry import FAMILIES, FAMILY_OPS, chosen_families  # noqa: E402
from report import gpu_slug, parts_of  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "perf" / "results"
STALE = "(from git; may be stale)"


def commit() -> str:
    if os.environ.get("CUTE_OPS_COMMIT"):
        return os.environ["CUTE_OPS_COMMIT"]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{sha} {STALE}"


def case_metrics(case, ours: float, baselines: dict[str, float], ceil: dict) -> dict:
    """Rates of our time and how they compare with the ceilings of this run and the baselines."""
    metrics = {}
    if case.bytes:
        metrics["TBps"] = round(case.bytes / ours / 1e6, 3)
        metrics["frac_of_copy"] = round(metrics["TBps"] / ceil["copy_TBps"], 3)
        if case.read_dominated and ceil.get("read_TBps"):
            metrics["frac_of_read"] = round(metrics["TBps"] / ceil["read_TBps"], 3)
            if case.floor_metric:
                metrics["frac_of_floor"] = metrics["frac_of_read"]
    if case.flops:
        metrics["tflops"] = round(case.flops / ours / 1e6, 1)
        metrics["frac_of_matmul"] = round(metrics["tflops"] / ceil["matmul_bf16_tflops"], 3)
    if baselines:
        best = min(baselines, key=baselines.get)
        metrics["best_baseline"] = best
        metrics["speedup_vs_best_baseline"] = round(baselines[best] / ours, 3)
    return metrics


def row(case, times: dict[str, float], how: dict[str, str], ceil: dict) -> dict:
    """One case's entry of the results file from its times ({impl: us per call})."""
    times = dict(times)
    ours = times.pop("ours")
    # "ours_<variant>": other settings of our op (policies, the two-launch control), not baselines.
    variants = {k: round(times.pop(k), 2) for k in list(times) if k.startswith("ours_")}
    return {"op": case.op, "family": case.family, "shape": case.shape,
            "dtype": str(case.dtype).removeprefix("torch."), "ours_us": round(ours, 2),
            "baselines_us": {k: round(v, 2) for k, v in times.items()},
            **({"variants_us": variants} if variants else {}), "metrics": case_metrics(case, ours, times, ceil),
            "timing": how}


def measure(case, ceil) -> dict:
    times, how = time_case(case)
    return row(case, times, how, ceil)


def of_ceiling(m: dict) -> str:
    if "frac_of_read" in m:
        return f"{100 * m['frac_of_read']:.0f}% read, {100 * m['frac_of_copy']:.0f}% copy"
    if "frac_of_copy" in m:
        return f"{100 * m['frac_of_copy']:.0f}% copy"
    return f"{100 * m.get('frac_of_matmul', 0):.0f}% matmul"


def table(results: list[dict]) -> str:
    rows = [("op", "shape", "dtype", "ours us", "best baseline us", "speedup", "TB/s or TFLOP/s", "of ceiling")]
    for r in results:
        m = r["metrics"]
        best = m.get("best_baseline")
        rows.append((r["op"], " ".join(f"{k}={v}" for k, v in r["shape"].items()), r["dtype"],
                     f"{r['ours_us']:.1f}", f"{r['baselines_us'][best]:.1f} ({best})" if best else "-",
                     f"{m.get('speedup_vs_best_baseline', 0):.2f}x",
                     f"{m['TBps']:.2f} TB/s" if "TBps" in m else f"{m.get('tflops', 0):.0f} TFLOP/s",
                     of_ceiling(m)))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows)


def new_doc(device: str, commit_: str, ceil: dict, families: list[str], results: list[dict],
            elapsed_s: dict[str, float] | None = None, gpus: int = 1, match: list[str] | None = None) -> dict:
    """The results file of one invocation (`match`: the --match filter of a trial, if any)."""
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    part = {"families": families, "commit": commit_, "date": date, "torch": torch.__version__,
            "cuda": torch.version.cuda, "ceilings": ceil, **({"elapsed_s": elapsed_s} if elapsed_s else {}),
            **({"cuda_visible_devices": visible} if visible else {}), **({"match": match} if match else {})}
    return {"device": device, "gpus": gpus, "torch": torch.__version__, "cuda": torch.version.cuda,
            "commit": commit_, "date": date, "ceilings": ceil, "timing": TIMING, "families": families,
            "parts": [part], "results": results}


def _sha(c: str) -> str | None:
    word = c.split()[0] if c else ""
    return word.lower() if re.fullmatch(r"[0-9a-fA-F]{7,40}", word) else None


def same_commit(a: str, b: str) -> bool:
    """Whether two recorded commits name the same sha (short or full; a note after it ignored)."""
    sa, sb = _sha(a), _sha(b)
    if sa and sb:
        return sa.startswith(sb) or sb.startswith(sa)
    return a == b and a != "unknown"


def merge_refusal(existing: dict | None, path: pathlib.Path, device: str, commit_: str,
                  families: list[str]) -> str | None:
    """Why a run of `families` (fewer than all) may not be merged into `existing` (the file at
    `path`), or None if it may. Asked before measuring, so that a refused run costs nothing."""
    if existing is None:
        return None
    how = ("Run every family, start the file afresh with --replace, or write these families elsewhere "
           "with --out FILE.")
    held = ", ".join(dict.fromkeys(f for p in parts_of(existing) for f in p["families"]))
    if existing["device"] != device:
        return (f"{path} holds a run on {existing['device']} ({held}); this GPU is {device}: a run of some "
                f"families ({', '.join(families)}) is merged only into a file of the same device and commit. {how}")
    if not same_commit(existing["commit"], commit_):
        return (f"{path} holds commit {existing['commit']} ({held}); this run is at commit {commit_}: a run of "
                f"some families ({', '.join(families)}) is merged only into a file of the same device and "
                f"commit (set CUTE_OPS_COMMIT to the sha being run). {how}")
    return None


def merge(existing: dict, new: dict, order: list[str]) -> dict:
    """`new` (a run of some families) merged into `existing`: the rows of those families replaced,
    each invocation kept as a part with the families it still provides, rows in `order` of family."""
    rank = {f: i for i, f in enumerate(order)}
    fams = set(new["families"])

    def family(r):
        return r.get("family", r["op"])

    rows = [r for r in existing["results"] if family(r) not in fams] + new["results"]
    rows.sort(key=lambda r: rank.get(family(r), len(rank)))  # stable: each family keeps its case order
    parts = [{**p, "families": [f for f in p["families"] if f not in fams]} for p in parts_of(existing)]
    parts = [p for p in parts if p["families"]] + new["parts"]
    families = sorted({f for p in parts for f in p["families"]}, key=lambda f: rank.get(f, len(rank)))
    # The sha as CUTE_OPS_COMMIT gave it rather than git's possibly stale one, where they differ.
    sha = new["commit"] if not new["commit"].endswith(STALE) else existing["commit"]
    return {**new, "commit": sha, "families": families, "parts": parts, "results": rows}


def write_results(doc: dict, out: pathlib.Path, copy_latest: bool) -> None:
    """`doc` written to `out` (and to perf/results/latest.json when `copy_latest`)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, indent=1) + "\n"
    out.write_text(text)
    written = [out]
    if copy_latest:
        (RESULTS / "latest.json").write_text(text)
        written.append(RESULTS / "latest.json")
    print(f"\nwrote {' and '.join(map(str, written))} (families: {', '.join(doc['families'])})\n")


def merge_files(paths: list[pathlib.Path], out: pathlib.Path) -> dict:
    """Results files written with --out (runs of some families, e.g. at the same time on other GPUs
    of the host) merged into `out` in the order given, under merge_refusal's rules: the same device
    and commit as `out` (when it exists) and as each other. Raises SystemExit, leaving `out` as it
    was, if any may not be merged."""
    doc = json.loads(out.read_text()) if out.exists() else None
    for path in paths:
        new = json.loads(path.read_text())
        trial = [p for p in parts_of(new) if p.get("match")]
        if trial:
            raise SystemExit(f"{path} is a --match trial ({', '.join(trial[0]['match'])}): it lacks rows of its "
                             "families, so it is never merged into a results file")
        refusal = merge_refusal(doc, out, new["device"], new["commit"], new["families"])
        if refusal:
            raise SystemExit(f"{path}: {refusal}")
        if doc is not None and doc.get("gpus", 1) != new.get("gpus", 1):
            raise SystemExit(f"{path} is a run on {new.get('gpus', 1)} GPU(s), {out} on {doc.get('gpus', 1)}: "
                             "runs over different numbers of GPUs go to different results files")
        doc = new if doc is None else merge(doc, new, list(FAMILIES))
    if doc is None:
        raise SystemExit("--merge needs at least one results file")
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", help="comma list (default: all)")
    ap.add_argument("--out", type=pathlib.Path,
                    help="results file (default: perf/results/<gpu>.json, copied to perf/results/latest.json)")
    ap.add_argument("--replace", action="store_true",
                    help="with --families: start the results file afresh instead of merging into it")
    ap.add_argument("--match", help="comma list: only the cases whose id contains one of these (a trial: needs "
                                    "--out, since a results file holds whole families)")
    ap.add_argument("--merge", nargs="+", type=pathlib.Path, metavar="FILE",
                    help="merge these results files (written with --out) into the per-GPU file named by "
                         "their device, or into --out; measures nothing and needs no GPU")
    args = ap.parse_args(argv)
    if args.merge:
        if args.families or args.replace or args.match:
            ap.error("--merge takes only --out")
        first = json.loads(args.merge[0].read_text())
        out = args.out or RESULTS / f"{gpu_slug(first['device'], first.get('gpus', 1))}.json"
        doc = merge_files(args.merge, out)
        write_results(doc, out, copy_latest=args.out is None)
        print(table(doc["results"]))
        return 0
    match = [m for m in (args.match or "").split(",") if m]
    if match and args.out is None:
        ap.error("--match needs --out: the per-GPU results files hold whole families")
    if not torch.cuda.is_available():
        print("perf/run.py: nothing measured: it needs a CUDA GPU and cute_ops built with its CUDA kernels "
              "(`pip install --no-build-isolation -e .` on a machine with nvcc)")
        return 0
    import cute_ops

    families = chosen_families([f for f in args.families.split(",") if f] if args.families else None)
    missing = [f for f in families if not all(map(cute_ops.cuda_kernels_available, FAMILY_OPS[f]))]
    if missing:
        raise SystemExit(f"cute_ops was built without the CUDA kernels of {missing}: "
                         "`pip install --no-build-isolation -e .` (CUTE_OPS_FAMILIES unset builds all)")

    device, sha = torch.cuda.get_device_name(), commit()
    out = args.out or RESULTS / f"{gpu_slug(device)}.json"
    subset = set(families) != set(FAMILIES) and not args.replace and not match
    existing = json.loads(out.read_text()) if subset and out.exists() else None
    refusal = merge_refusal(existing, out, device, sha, families) if subset else None
    if refusal:
        raise SystemExit(refusal)
    if sha.endswith(STALE):
        print(f"commit {sha}: set CUTE_OPS_COMMIT to the sha being run", file=sys.stderr)

    t0 = time.perf_counter()
    ceil = ceilings()
    elapsed = {"ceilings": round(time.perf_counter() - t0, 1)}
    print(f"{device} at {sha}: copy {ceil['copy_TBps']} TB/s, read {ceil['read_TBps']} TB/s "
          f"{ceil['read_by_kernel_TBps']}, bf16 matmul {ceil['matmul_bf16_tflops']} TFLOP/s", flush=True)
    results = []
    for family in families:
        t0 = time.perf_counter()
        for case in FAMILIES[family]():
            if match and not any(m in case.id for m in match):
                continue
            r = measure(case, ceil)
            print(f"  {case.id}: ours {r['ours_us']} us, baselines {r['baselines_us']}", flush=True)
            results.append(r)
        elapsed[family] = round(time.perf_counter() - t0, 1)
    doc = new_doc(device, sha, ceil, families, results, elapsed, match=match)
    if existing is not None:
        doc = merge(existing, doc, list(FAMILIES))
    write_results(doc, out, copy_latest=args.out is None)
    print(table(results))
    print("\nelapsed: " + ", ".join(f"{k} {v:.0f} s" for k, v in elapsed.items())
          + f"; total {sum(elapsed.values()):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
