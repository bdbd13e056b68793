"""Quick check and timing of flash_fwd's kernel kinds at a few shapes of the benchmark grid: each
forced kind's output against a float64 reference on small odd shapes first (a wrong kernel is
not timed), then TFLOP/s of the automatic choice (sm90 on Hopper), the sm80 kernel and SDPA's
cuDNN and FLASH backends, with the harness's timing. For comparing sm90 builds
(perf/tools/flash_fwd_variants.sh) while iterating. Usage:
    python perf/tools/flash_fwd_quick.py [D:S[:causal][:llama][:bN][:hN][:fp16] ...]   e.g. 128:16384 128:4096:causal:llama
(llama: LLaMA-3-8B's heads, 32 sharing 8, one sequence; bN, hN: N sequences, N heads instead of
the grid's, e.g. 128:2048:b1:h132, 16 waves of 128-row tiles on 132 SMs, against 128:2048's 15.5;
fp16: float16 inputs, bfloat16 otherwise).
QUICK_KEEP=ours,sdpa_cudnn times only those variants; QUICK_CHECK=0 skips the reference check (for sweeps of one build)."""
from __future__ import annotations

import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent.parent / "tests"))

import torch  # noqa: E402

import cases_flash  # noqa: E402
import cute_ops  # noqa: E402
from conftest import assert_close_to_reference  # noqa: E402
from cute_ops import reference as ref  # noqa: E402
from harness import time_case  # noqa: E402

KEEP = tuple(os.environ.get("QUICK_KEEP", "ours,ours_sm80,sdpa_cudnn,sdpa_flash").split(","))
DEFAULT = ["64:2048", "128:2048", "128:16384", "128:16384:causal", "256:2048"]


def check(arch: str) -> None:
    for b, sq, sk, hq, hk, d, causal in ((2, 17, 33, 4, 2, 128, True), (1, 300, 1000, 8, 2, 128, False),
                                          (1, 1000, 17, 2, 2, 128, True), (2, 129, 129, 4, 4, 64, True),
                                          (1, 200, 260, 2, 1, 256, False), (1, 97, 300, 2, 2, 96, True)):
        q, k, v = (torch.randn(b, s, h, d, device="cuda").to(torch.bfloat16)
                   for s, h in ((sq, hq), (sk, hk), (sk, hk)))
        out, _ = cute_ops.flash_fwd(q, k, v, causal=causal, arch=arch)
        expected, _ = ref.attention(q.double(), k.double(), v.double(), causal=causal)
        lowp, _ = ref.attention(q, k, v, causal=causal, upcast=False)
        assert_close_to_reference(out, expected, lowp, k=2.0)
    # Varlen: three packed sequences (one empty), causal, against each sequence alone.
    lengths = [300, 0, 77]
    q, k, v = (torch.randn(sum(lengths), h, 128, device="cuda").to(torch.bfloat16) for h in (8, 2, 2))
    cu = torch.tensor([0, *lengths], device="cuda").cumsum(0).int()
    out, _ = cute_ops.flash_fwd_varlen(q, k, v, cu, cu, max(lengths), max(lengths), causal=True, arch=arch)
    for lo, hi in zip(cu[:-1].tolist(), cu[1:].tolist()):
        if hi > lo:
            seq = [t[lo:hi][None].double() for t in (q, k, v)]
            expected, _ = ref.attention(*seq, causal=True)
            lowp, _ = ref.attention(*(t[lo:hi][None] for t in (q, k, v)), causal=True, upcast=False)
            assert_close_to_reference(out[lo:hi][None], expected, lowp, k=2.0)
    print(f"{arch}: matches the reference", flush=True)


def main(args: list[str]) -> None:
    if os.environ.get("QUICK_CHECK", "1") != "0":
        check("sm80")
        check("sm90")
    for spec in args or DEFAULT:
        d, s, *rest = spec.split(":")
        d, s, causal = int(d), int(s), "causal" in rest
        # bN / hN: N sequences / N heads instead of the grid's (e.g. the tiles' waves over the SMs)
        sizes = {r[0]: int(r[1:]) for r in rest if r[:1] in ("b", "h") and r[1:].isdigit()}
        dtype = torch.float16 if "fp16" in rest else torch.bfloat16
        if "llama" in rest:  # LLaMA-3-8B prefill: one sequence, 32 query heads sharing 8 kv heads
            case = cases_flash._flash_case(sizes.get("b", 1), s, 32, 8, d, causal, dtype)
        else:
            heads = sizes.get("h", cases_flash.HIDDEN // d)
            case = cases_flash._flash_case(sizes.get("b", cases_flash.TOKENS // s), s, heads, heads, d, causal, dtype)
        setup = case.setup
        case.setup = lambda setup=setup: {k: v for k, v in setup().items() if k in KEEP}
        times, _ = time_case(case)
        row = "  ".join(f"{k} {case.flops / us / 1e6:6.1f}" for k, us in times.items())
        print(f"{torch.cuda.get_device_name()} {spec:>18}  TFLOP/s: {row}  "
              f"ours/cudnn {times.get('sdpa_cudnn', float('nan')) / times['ours']:.3f}x", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
