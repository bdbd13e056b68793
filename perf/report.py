#!/usr/bin/env python3
"""Regenerate docs/benchmarks.md and one PNG per op family from the per-GPU results files,
perf/results/<gpu>.json (h100.json, h200.json, ...), with the GPUs side by side.

    python perf/report.py [--results-dir perf/results] [--docs-dir docs]

A per-GPU file is one whose name is gpu_slug() of the device it holds; latest.json (a copy of the
newest one written) and files named otherwise (older partial runs such as h200_gemm_pair.json) are
not read. Runs on any machine; the plots need matplotlib (`pip install -e .[report]`), and without
it the markdown is still written, without plots.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Devices whose results file has a short name; any other gets a slug of its model name.
SHORT_NAMES = {"NVIDIA H100 80GB HBM3": "h100", "NVIDIA H200": "h200"}

# What each baseline is, in the order the header lists them.
BASELINES = {
    "torch_eager": "the same math in PyTorch eager (`cute_ops.reference`)",
    "torch_compile": ("that function through `torch.compile(fullgraph=True)`; for gemm_pair the MLP's math as "
                      "`cublas_graph` writes it, which Inductor turns into the two cuBLAS matmuls around one fused "
                      "silu(gate) * up kernel (one compilation for every M >= 2, CUDA-graph replayed)"),
    "torch_rms_norm": "`torch.nn.functional.rms_norm`",
    "sdpa_flash": ("`torch.nn.functional.scaled_dot_product_attention` restricted to its FlashAttention backend "
                   "(FlashAttention-2's code: the reference of the 'vs FA2' column unless flash_attn was measured)"),
    "sdpa_cudnn": "the same restricted to its cuDNN backend",
    "flash_attn": "`flash_attn_func` of the flash-attn package",
    "cublas_graph": ("cuBLAS through `torch.nn.functional.linear`: the merged [2I, H] gate/up matmul, "
                     "silu(gate) * up as separate kernels, the down matmul; CUDA-graph replayed"),
    "cublas_eager": "the same, eager back-to-back calls (launch costs included)",
    "cublas_linear": ("for gemv: `torch.nn.functional.linear` alone (cuBLAS, CUDA-graph replayed), the matmul "
                      "without the norm or residual add that `ours` also does"),
    "gptfast_compile": ("for the LLaMA model: a gpt-fast-style model in plain PyTorch with a static KV cache "
                        "(perf/llama_baseline.py), same weights, through `torch.compile(mode=\"reduce-overhead\", "
                        "fullgraph=True)` (decode) or `torch.compile(fullgraph=True)` (prefill)"),
    "tp1": ("for tensor-parallel rows (perf/run_tp.py): our own model on one GPU of the same host, same shape, "
            "measured in the same run; 'vs best' is then the speedup of the row's GPUs over one"),
    "hf_eager": ("transformers' `LlamaForCausalLM` on the same weights, eager attention, run eagerly: decode over "
                 "its `StaticCache`, prefill without a cache"),
}

# Our own other settings ("ours_<name>" in a case's variants_us), as the report explains them.
VARIANTS = {
    "ours_sm80": "the op's sm80 kernel forced (`arch=\"sm80\"`: mma.sync, cp.async), beside its automatic choice",
    "ours_sm90": "the op's sm90 kernel forced (`arch=\"sm90\"`: wgmma, TMA), beside its automatic choice",
    "ours_two_launches": ("the same tiles as two stream-ordered launches, the control for gemm_pair's one-launch "
                          "scheduler"),
    "ours_cublas_swiglu": ("cuBLAS's two matmuls with our `swiglu` kernel between them on the packed weights: the "
                           "LLaMA model's other MLP route"),
    "ours_bf16_cache": ("our kernel over the bf16 cache of the same values, beside each fp8-cache case (issue 15's "
                        "fp8 target is a speedup over it)"),
    "ours_fp8_cache": "our decode step over an fp8 KV cache (`PagedKVCache(dtype=torch.float8_e4m3fn)`, scales 1.0)",
}


def gpu_slug(device: str, gpus: int = 1) -> str:
    """The name of a device's results file, without `.json`: "h100", "h200", else the model as a
    lowercase slug ("NVIDIA A100-SXM4-80GB" -> "a100_sxm4_80gb"). `gpus` > 1 appends the count
    ("h200x2"), for runs spread over several GPUs of one host."""
    name = SHORT_NAMES.get(device) or re.sub(r"[^a-z0-9]+", "_", device.lower().removeprefix("nvidia ")).strip("_")
    name = name or "gpu"
    return f"{name}x{gpus}" if gpus > 1 else name


def gpu_label(path: pathlib.Path) -> str:
    """Column label of a results file: its name in capitals, the GPU count suffix excepted (H200x2)."""
    return re.sub(r"X(\d+)$", r"x\1", path.stem.upper())


def parts_of(doc: dict) -> list[dict]:
    """The invocations a results file was assembled from, each with its families and ceilings. A
    file written before files recorded them counts as one part holding every family of its rows."""
    if doc.get("parts"):
        return doc["parts"]
    families = list(dict.fromkeys(r.get("family", r["op"]) for r in doc["results"]))
    return [{"families": families, **{k: doc.get(k) for k in ("commit", "date", "torch", "cuda", "ceilings")}}]


def family_ceilings(doc: dict, family: str) -> dict:
    """The ceilings measured in the invocation that measured `family`."""
    for part in parts_of(doc):
        if family in part["families"]:
            return part["ceilings"]
    return doc["ceilings"]


def gpu_files(results_dir: pathlib.Path) -> list[tuple[pathlib.Path, dict]]:
    """Every per-GPU results file in `results_dir`, by name."""
    found = []
    for path in sorted(results_dir.glob("*.json")):
        if path.name == "latest.json":
            continue
        doc = json.loads(path.read_text())
        if isinstance(doc, dict) and "device" in doc and path.stem == gpu_slug(doc["device"], doc.get("gpus", 1)):
            found.append((path, doc))
    return found


def fmt_shape(shape: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


def has_metric(rows: list[dict], name: str) -> bool:
    return any(name in r["metrics"] for r in rows)


def fa2_us(r: dict) -> float | None:
    """FlashAttention-2's time: the flash_attn package where it was measured, else SDPA's FLASH
    backend (FlashAttention-2's code inside PyTorch)."""
    b = r["baselines_us"]
    return b.get("flash_attn", b.get("sdpa_flash"))


def of_ceiling(m: dict) -> str:
    """Our rate against the ceiling that applies, labelled: read for an op that nearly only reads,
    else copy for a memory-bound one, matmul for one counted in FLOPs. An op with both bytes and
    FLOPs (the MLP: weight-read-bound at small M, matmul-bound at large M) shows the larger of its
    two fractions, the ceiling that binds at that shape."""
    options = []
    if "frac_of_read" in m:
        options.append((m["frac_of_read"], "read"))
    elif "frac_of_copy" in m:
        options.append((m["frac_of_copy"], "copy"))
    if "frac_of_matmul" in m:
        options.append((m["frac_of_matmul"], "matmul"))
    if not options:
        return "-"
    frac, name = max(options)
    return f"{100 * frac:.0f}% {name}"


def row_key(r: dict) -> tuple:
    return r["op"], json.dumps(r["shape"]), r["dtype"]


def side_by_side_table(gpus: list[tuple[str, list[dict]]]) -> str:
    """Rows = shapes; for each GPU: ours, the best baseline (time and name), our speedup over it,
    and our rate against the ceiling that applies."""
    order: dict[tuple, dict] = {}
    for _, rows in gpus:
        for r in rows:
            order.setdefault(row_key(r), r)
    head = ["op", "shape", "dtype"]
    for label, _ in gpus:
        head += [f"{label} ours us", f"{label} best baseline us", f"{label} vs best", f"{label} of ceiling"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by_gpu = [{row_key(r): r for r in rows} for _, rows in gpus]
    for key, first in order.items():
        cells = [first["op"], fmt_shape(first["shape"]), first["dtype"]]
        for rows in by_gpu:
            r = rows.get(key)
            if r is None:
                cells += ["-"] * 4
                continue
            m = r["metrics"]
            best = m.get("best_baseline")
            cells += [f"{r['ours_us']:.1f}", f"{r['baselines_us'][best]:.1f} ({best})" if best else "-",
                      f"{m['speedup_vs_best_baseline']:.2f}x" if "speedup_vs_best_baseline" in m else "-",
                      of_ceiling(m)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def family_table(rows: list[dict]) -> str:
    """One GPU's rows of a family with every baseline."""
    names = sorted({b for r in rows for b in r["baselines_us"]})
    with_tflops, with_tbps = has_metric(rows, "tflops"), has_metric(rows, "TBps")
    with_read = has_metric(rows, "frac_of_read")
    with_fa2 = any(fa2_us(r) for r in rows)
    head = ["op", "shape", "dtype", "ours us", *[f"{n} us" for n in names], "vs best",
            *(["vs FA2"] if with_fa2 else []), *(["TFLOP/s", "of matmul"] if with_tflops else []),
            *(["TB/s", "of copy"] if with_tbps else []), *(["of read"] if with_read else [])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        m = r["metrics"]
        cells = [r["op"], fmt_shape(r["shape"]), r["dtype"], f"{r['ours_us']:.1f}",
                 *[f"{r['baselines_us'][n]:.1f}" if n in r["baselines_us"] else "-" for n in names],
                 f"{m['speedup_vs_best_baseline']:.2f}x" if "speedup_vs_best_baseline" in m else "-"]
        if with_fa2:
            cells.append(f"{fa2_us(r) / r['ours_us']:.3f}x" if fa2_us(r) else "-")
        if with_tflops:
            cells += [f"{m['tflops']:.1f}" if "tflops" in m else "-",
                      f"{100 * m['frac_of_matmul']:.0f}%" if "frac_of_matmul" in m else "-"]
        if with_tbps:
            cells += [f"{m['TBps']:.2f}" if "TBps" in m else "-",
                      f"{100 * m['frac_of_copy']:.0f}%" if "frac_of_copy" in m else "-"]
        if with_read:
            cells.append(f"{100 * m['frac_of_read']:.0f}%" if "frac_of_read" in m else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def variants_table(rows: list[dict]) -> str:
    """Our other settings of the same op (policies, the two-launch control), as time and as the
    default's speedup over them."""
    names = sorted({v for r in rows for v in r.get("variants_us", {})})
    head = ["shape", "ours us", *[f"{n} us" for n in names]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        v = r.get("variants_us", {})
        lines.append("| " + " | ".join([fmt_shape(r["shape"]), f"{r['ours_us']:.1f}", *[
            f"{v[n]:.1f} ({v[n] / r['ours_us']:.2f}x)" if n in v else "-" for n in names]]) + " |")
    return "\n".join(lines)


def plot_family(family: str, gpus: list[tuple[str, str, list[dict], dict]], out: pathlib.Path) -> pathlib.Path:
    """One panel per GPU (label, device, rows, ceilings), bars of each implementation's rate:
    TFLOP/s for a family whose cases count FLOPs (compute bound), else effective TB/s. Only ours
    has the rate in the results; a baseline's is ours scaled by the ratio of the times, since both
    did the same work. The dashed line is the ceiling that applies (read for read-dominated ops,
    with copy dotted beside it), measured in the same run as the panel's rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    all_rows = [r for _, _, rows, _ in gpus for r in rows]
    names = ["ours", *sorted({b for r in all_rows for b in r["baselines_us"]})]
    keys = list(dict.fromkeys(row_key(r) for r in all_rows))
    labels = {}
    for r in all_rows:
        labels.setdefault(row_key(r), f"{r['op']} {fmt_shape(r['shape'])} {r['dtype']}")
    tflops = has_metric(all_rows, "tflops")
    height = 0.8 / len(names)
    fig, axes = plt.subplots(1, len(gpus), sharey=True, squeeze=False,
                             figsize=(6 + 4 * len(gpus), max(3.0, 0.22 * len(keys) * len(names) + 1.2)))
    for ax, (label, device, rows, ceil) in zip(axes[0], gpus):
        by_key = {row_key(r): r for r in rows}
        for i, name in enumerate(names):
            vals = []
            for key in keys:
                r = by_key.get(key)
                us = None if r is None else r["ours_us"] if name == "ours" else r["baselines_us"].get(name)
                metric = "tflops" if tflops else "TBps"
                vals.append(r["metrics"][metric] * r["ours_us"] / us if us and metric in r["metrics"] else 0)
            ax.barh([y + i * height for y in range(len(keys))], vals, height, label=name)
        if tflops:
            ax.axvline(ceil["matmul_bf16_tflops"], color="k", ls="--", lw=1,
                       label=f"bf16 matmul {ceil['matmul_bf16_tflops']:.0f} TFLOP/s")
            ax.set_xlabel("TFLOP/s (the op's FLOPs / time)")
        else:
            if has_metric(rows, "frac_of_read") and ceil.get("read_TBps"):
                ax.axvline(ceil["read_TBps"], color="k", ls="--", lw=1, label=f"read {ceil['read_TBps']:.2f} TB/s")
                ax.axvline(ceil["copy_TBps"], color="k", ls=":", lw=1, label=f"copy {ceil['copy_TBps']:.2f} TB/s")
            else:
                ax.axvline(ceil["copy_TBps"], color="k", ls="--", lw=1, label=f"copy {ceil['copy_TBps']:.2f} TB/s")
            ax.set_xlabel("effective TB/s (minimum bytes / time)")
        ax.set_title(f"{family} on {label} ({device})", fontsize=9)
        ax.legend(fontsize=7, loc="best")
    axes[0][0].set_yticks([y + 0.4 - height / 2 for y in range(len(keys))], [labels[k] for k in keys], fontsize=7)
    # First case at the top; the bars of case y span y - height / 2 .. y + 0.8 - height / 2.
    axes[0][0].set_ylim(len(keys) - 0.1 - height / 2, -0.1 - height / 2)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def shown(path: pathlib.Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def render(files: list[tuple[pathlib.Path, dict]], docs_dir: pathlib.Path, plots: bool) -> tuple[str, int]:
    """The markdown of benchmarks.md, writing the plots into docs_dir/img when `plots`; returns
    (markdown, plots written)."""
    gpus = [(gpu_label(path), doc) for path, doc in files]
    families = list(dict.fromkeys(r.get("family", r["op"]) for _, doc in gpus for r in doc["results"]))
    baselines = {b for _, doc in gpus for r in doc["results"] for b in r["baselines_us"]}
    all_rows = [r for _, doc in gpus for r in doc["results"]]
    runs = ["| GPU | device | commit | date | torch (CUDA) | families | copy TB/s | read TB/s | bf16 matmul TFLOP/s |",
            "|---|---|---|---|---|---|---|---|---|"]
    for label, doc in gpus:
        for part in parts_of(doc):
            c = part.get("ceilings") or {}
            runs.append(f"| {label} | {doc['device']} | `{part.get('commit', doc['commit'])}` | "
                        f"{part.get('date', doc['date'])} | {part.get('torch', doc.get('torch'))} "
                        f"(CUDA {part.get('cuda', doc.get('cuda'))}) | {', '.join(part['families'])} | "
                        f"{c.get('copy_TBps', '-')} | {c.get('read_TBps', '-')} | {c.get('matmul_bf16_tflops', '-')} |")
    parts = [
        "# Benchmarks",
        "",
        "Generated by `perf/report.py` from " + ", ".join(f"`{shown(p)}`" for p, _ in files)
        + "; do not edit by hand.",
        "",
        "Runs (one row per invocation of `perf/run.py`; a GPU's file may join two at the same commit, each row "
        "then compared with the ceilings measured in its own invocation):",
        "",
        *runs,
        "",
        "- ceilings, measured at the start of each invocation: device-to-device copy (bytes read + written), a read "
        "of a 4 GiB buffer (bytes read; the best of `torch.sum` and a Triton kernel), bf16 8192³ matmul (cuBLAS)",
        f"- times: {gpus[0][1].get('timing', 'median of CUDA-event-timed calls')}; every baseline timed in the same "
        "run, the same way",
        "- TB/s: the fewest bytes the op must read and write, over our time; 'of copy' is that over the copy "
        "ceiling; 'of read' that over the read ceiling, for ops that nearly only read (a KV cache, weights), which "
        "can stream faster than a copy's mix of reads and writes; 'vs best' is the best baseline's time over ours "
        "(above 1: ours is faster)",
        *(["- TFLOP/s: the op's FLOPs over our time, 'of matmul' that over the matmul ceiling; attention counts "
           "4·B·Hq·Sq·Sk·D (the two matmuls), halved when causal; plots of these families show every "
           "implementation's TFLOP/s"] if has_metric(all_rows, "tflops") else []),
        "- 'of ceiling' in the side-by-side tables: 'read' for read-dominated ops, 'copy' for other memory-bound "
        "ones, 'matmul' for ops counted in FLOPs; an op with both bytes and FLOPs (the MLP) shows the larger "
        "fraction, the ceiling that binds at that shape",
        "- baselines: " + ", ".join(f"`{name}` = {what}" for name, what in BASELINES.items() if name in baselines),
        "",
        "Regenerate on a GPU machine with `bash scripts/gpu_check.sh` (or `python perf/run.py`), then "
        "`python perf/report.py`. On a host of two GPUs, `gpu_check.sh --split-gpus` runs the model's "
        "families on the second GPU while the kernels' run on the first; each part's fractions use the "
        "ceilings measured on its own GPU.",
        "",
    ]
    if not plots:
        parts += ["Plots were skipped when this page was generated (matplotlib was not installed).", ""]
    written = 0
    for family in families:
        per_gpu = [(label, doc, [r for r in doc["results"] if r.get("family", r["op"]) == family])
                   for label, doc in gpus]
        per_gpu = [(label, doc, rows) for label, doc, rows in per_gpu if rows]
        parts += [f"## {family}", "", side_by_side_table([(label, rows) for label, _, rows in per_gpu]), ""]
        if plots:
            img = plot_family(family, [(label, doc["device"], rows, family_ceilings(doc, family))
                                       for label, doc, rows in per_gpu],
                              docs_dir / "img" / f"bench_{family}.png")
            written += 1
            parts += [f"![{family}]({img.relative_to(docs_dir).as_posix()})", ""]
        for label, doc, rows in per_gpu:
            parts += [f"### {family} on {label} ({doc['device']}), every baseline", "", family_table(rows), ""]
            names = sorted({n for r in rows for n in r.get("variants_us", {})})
            if names:
                what = "; ".join(f"`{n}`: {VARIANTS[n]}" for n in names if n in VARIANTS)
                parts += [f"Our other settings on {label} (in parentheses: their time over the default's"
                          + (f"; {what}" if what else "") + "):", "", variants_table(rows), ""]
    return "\n".join(parts), written


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results-dir", type=pathlib.Path, default=ROOT / "perf" / "results")
    ap.add_argument("--docs-dir", type=pathlib.Path, default=ROOT / "docs")
    args = ap.parse_args(argv)
    files = gpu_files(args.results_dir)
    if not files:
        raise SystemExit(f"no per-GPU results files (<gpu>.json, e.g. h100.json) in {args.results_dir}")
    plots = importlib.util.find_spec("matplotlib") is not None
    if not plots:
        print("plots skipped: matplotlib is not installed (`pip install -e .[report]`)")
    markdown, written = render(files, args.docs_dir, plots)
    args.docs_dir.mkdir(parents=True, exist_ok=True)
    (args.docs_dir / "benchmarks.md").write_text(markdown)
    print(f"read {', '.join(shown(p) for p, _ in files)}; wrote {shown(args.docs_dir / 'benchmarks.md')} "
          f"and {written} plot(s)")


if __name__ == "__main__":
    main()
