#!/usr/bin/env python3
"""Regenerate docs/benchmarks.md and one PNG per op family from perf/results/latest.json.

    python perf/report.py [--results perf/results/latest.json]

Needs matplotlib (`pip install -e .[report]`); runs on any machine.
"""
from __future__ import annotations

import argparse
import collections
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


# What each baseline is, in the order the header lists them.
BASELINES = {
    "torch_eager": "the same math in PyTorch eager (`cute_ops.reference`)",
    "torch_compile": "that function through `torch.compile(fullgraph=True)`",
    "torch_rms_norm": "`torch.nn.functional.rms_norm`",
    "sdpa_flash": ("`torch.nn.functional.scaled_dot_product_attention` restricted to its FlashAttention backend "
                   "(FlashAttention-2's code: the reference of the 'vs FA2' column unless flash_attn was measured)"),
    "sdpa_cudnn": "the same restricted to its cuDNN backend",
    "flash_attn": "`flash_attn_func` of the flash-attn package",
    "cublas_graph": ("cuBLAS through `torch.nn.functional.linear`: the merged [2I, H] gate/up matmul, "
                     "silu(gate) * up, the down matmul; CUDA-graph replayed"),
    "cublas_eager": "the same, eager back-to-back calls (launch costs included)",
}


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


def fmt_shape(shape: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


def has_metric(rows: list[dict], name: str) -> bool:
    return any(name in r["metrics"] for r in rows)


def fa2_us(r: dict) -> float | None:
    """FlashAttention-2's time: the flash_attn package where it was measured, else SDPA's FLASH
    backend (FlashAttention-2's code inside PyTorch)."""
    b = r["baselines_us"]
    return b.get("flash_attn", b.get("sdpa_flash"))


def family_table(rows: list[dict]) -> str:
    names = sorted({b for r in rows for b in r["baselines_us"]})
    with_tflops, with_tbps = has_metric(rows, "tflops"), has_metric(rows, "TBps")
    with_fa2 = any(fa2_us(r) for r in rows)
    head = ["op", "shape", "dtype", "ours us", *[f"{n} us" for n in names], "vs best",
            *(["vs FA2"] if with_fa2 else []),
            *(["TFLOP/s"] if with_tflops else []), *(["TB/s", "of copy"] if with_tbps else [])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        m = r["metrics"]
        cells = [r["op"], fmt_shape(r["shape"]), r["dtype"], f"{r['ours_us']:.1f}",
                 *[f"{r['baselines_us'][n]:.1f}" if n in r["baselines_us"] else "-" for n in names],
                 f"{m['speedup_vs_best_baseline']:.2f}x" if "speedup_vs_best_baseline" in m else "-"]
        if with_fa2:
            cells.append(f"{fa2_us(r) / r['ours_us']:.3f}x" if fa2_us(r) else "-")
        if with_tflops:
            cells.append(f"{m['tflops']:.1f}" if "tflops" in m else "-")
        if with_tbps:
            cells += [f"{m['TBps']:.2f}" if "TBps" in m else "-",
                      f"{100 * m['frac_of_copy']:.0f}%" if "frac_of_copy" in m else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_family(family: str, rows: list[dict], ceilings: dict, device: str) -> pathlib.Path:
    """Bars of each implementation's rate: TFLOP/s for a family whose cases count FLOPs (compute
    bound), else effective TB/s. Only ours has the rate in the results; a baseline's is ours scaled
    by the ratio of the times, since both did the same work."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if has_metric(rows, "tflops"):
        metric, ceiling, ceiling_label = "tflops", ceilings["matmul_bf16_tflops"], "bf16 matmul ceiling"
        unit, ylabel = "TFLOP/s", "TFLOP/s (the op's FLOPs / time)"
    else:
        metric, ceiling, ceiling_label = "TBps", ceilings["copy_TBps"], "copy ceiling"
        unit, ylabel = "TB/s", "effective TB/s (minimum bytes / time)"
    names = ["ours", *sorted({b for r in rows for b in r["baselines_us"]})]
    # Horizontal bars, one group per case, so that long shape labels stay readable.
    labels = [f"{r['op']} {fmt_shape(r['shape'])} {r['dtype']}" for r in rows]
    height = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(10, max(3.0, 0.22 * len(rows) * len(names) + 1.2)))
    for i, name in enumerate(names):
        vals = []
        for r in rows:
            us = r["ours_us"] if name == "ours" else r["baselines_us"].get(name)
            vals.append(r["metrics"][metric] * r["ours_us"] / us if us and metric in r["metrics"] else 0)
        ax.barh([y + i * height for y in range(len(rows))], vals, height, label=name)
    ax.axvline(ceiling, color="k", ls="--", lw=1, label=f"{ceiling_label} {ceiling:.2f} {unit}")
    ax.set_yticks([y + 0.4 - height / 2 for y in range(len(rows))], labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(ylabel)
    ax.set_title(f"{family} on {device}")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    out = DOCS / "img" / f"bench_{family}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=pathlib.Path, default=ROOT / "perf" / "results" / "latest.json")
    args = ap.parse_args()
    doc = json.loads(args.results.read_text())
    by_family = collections.defaultdict(list)
    for r in doc["results"]:
        by_family[r.get("family", r["op"])].append(r)
    c = doc["ceilings"]
    baselines = {b for r in doc["results"] for b in r["baselines_us"]}
    parts = [
        "# Benchmarks",
        "",
        f"Generated by `perf/report.py` from `{args.results.relative_to(ROOT)}`; do not edit by hand.",
        "",
        f"- device: **{doc['device']}**, torch {doc['torch']} (CUDA {doc.get('cuda')}), commit `{doc['commit']}`, "
        f"{doc['date']}",
        f"- ceilings measured in the same run: device-to-device copy **{c['copy_TBps']} TB/s** "
        f"(bytes read + written), bf16 8192³ matmul (cuBLAS) **{c['matmul_bf16_tflops']} TFLOP/s**",
        f"- times: {doc.get('timing', 'median of CUDA-event-timed calls (triton.testing.do_bench)')}; "
        "every baseline timed in the same run, the same way",
        "- TB/s: the fewest bytes the op must read and write, over our time; 'of copy' is that over the copy "
        "ceiling; 'vs best' is the best baseline's time over ours",
        *(["- TFLOP/s: the op's FLOPs over our time; attention counts 4·B·Hq·Sq·Sk·D (the two matmuls), "
           "halved when causal; plots of these families show every implementation's TFLOP/s"]
          if has_metric(doc["results"], "tflops") else []),
        "- baselines: " + ", ".join(f"`{name}` = {what}" for name, what in BASELINES.items() if name in baselines),
        "",
        "Regenerate on a GPU machine with `bash scripts/gpu_check.sh` (or `python perf/run.py`), then "
        "`python perf/report.py`.",
        "",
    ]
    for family, rows in by_family.items():
        img = plot_family(family, rows, c, doc["device"])
        parts += [f"## {family}", "", family_table(rows), "", f"![{family}]({img.relative_to(DOCS)})", ""]
        if any("variants_us" in r for r in rows):
            parts += ["Our other settings (in parentheses: their time over the default's; `ours_two_launches` is "
                      "the same tiles as two stream-ordered launches, the control for the one-launch scheduler):",
                      "", variants_table(rows), ""]
    (DOCS / "benchmarks.md").write_text("\n".join(parts))
    print(f"wrote {DOCS / 'benchmarks.md'} and {len(by_family)} plot(s)")


if __name__ == "__main__":
    main()
