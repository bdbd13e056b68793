#!/usr/bin/env python3
"""Whether two builds of gemv give the same bits: the first run saves the outputs of a fixed set of
calls (seeded inputs) to FILE, every later run compares its outputs with them and says which
differ. For build knobs meant to change speed only (perf/tools/knob_ab.sh runs a command under A,
B, B, A: the first A saves, the rest compare):

    python perf/tools/gemv_bits.py /tmp/gemv_bits.pt

The calls: the LLaMA-3-8B projections on one GPU and at TP=2, shapes of whole plain-kernel waves
(with and without idle warps) and of stream-K, each with the norm, SwiGLU and residual variants it
takes in the model, at 1, 5 and 8 rows.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import cute_ops  # noqa: E402

# (k, n, variant): n is the output columns (SwiGLU: gate rows = up rows = n).
CALLS = [(4096, 6144, "norm"), (4096, 14336, "norm_swiglu"), (4096, 4096, "residual"), (14336, 4096, "residual"),
         (4096, 3072, "norm"), (4096, 7168, "norm_swiglu"), (2048, 4096, "residual"), (7168, 4096, "residual"),
         (1024, 16896, "norm"), (1024, 16896, "norm_swiglu"), (264, 16896, "residual"), (4104, 4401, "norm")]
ROWS = [1, 5, 8]


def outputs() -> dict[str, torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.bfloat16) * scale

    out = {}
    for k, n, variant in CALLS:
        for m in ROWS:
            x = rand(m, k)
            kw = {}
            if "swiglu" in variant:
                weight = cute_ops.pack_gate_up(rand(n, k, scale=k ** -0.5), rand(n, k, scale=k ** -0.5))
                kw["activation"] = "swiglu"
            else:
                weight = rand(n, k, scale=k ** -0.5)
            if "norm" in variant:
                kw["norm_weight"] = rand(k)
            if "residual" in variant:
                kw["residual"] = rand(m, n)
            out[f"k={k} n={n} {variant} m={m}"] = cute_ops.gemv(x, weight, **kw).cpu()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", type=pathlib.Path, help="the first run's outputs (written if absent)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("perf/tools/gemv_bits.py: no GPU here; run it on a GPU machine")
        return 0
    now = outputs()
    if not args.file.exists():
        torch.save(now, args.file)
        print(f"gemv_bits: saved {len(now)} outputs to {args.file}")
        return 0
    saved = torch.load(args.file)
    differ = [key for key in saved if not torch.equal(saved[key], now[key])]
    print(f"gemv_bits: {len(saved) - len(differ)} of {len(saved)} outputs bit-identical to {args.file}"
          + (": differ: " + ", ".join(differ) if differ else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
