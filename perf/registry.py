"""Every benchmark case, by family."""
from __future__ import annotations

import cases_decode
import cases_flash
import cases_gemm_pair
import cases_gemv
import cases_llama
import cases_norm
import cases_rope
from harness import Case

FAMILIES = {"norm": cases_norm.cases, "rope": cases_rope.cases, "flash_fwd": cases_flash.cases,
            "flash_decode": cases_decode.cases, "gemm_pair": cases_gemm_pair.cases,
            "gemv": cases_gemv.cases,
            "llama_decode": cases_llama.decode_cases, "llama_prefill": cases_llama.prefill_cases}
# The ops whose CUDA kernels must be built for a family's cases to run.
FAMILY_OPS = {"norm": ("rms_norm",), "rope": ("rotary_embedding",), "flash_fwd": ("flash_fwd",),
              "flash_decode": ("flash_decode",), "gemm_pair": ("gemm_pair",), "gemv": ("gemv",),
              "llama_decode": ("rms_norm", "rotary_embedding", "flash_decode", "gemm_pair", "gemv"),
              "llama_prefill": ("rms_norm", "rotary_embedding", "flash_fwd_varlen", "gemm_pair")}


def chosen_families(families: list[str] | None = None) -> list[str]:
    """`families` (all when None or empty), checked against the known ones."""
    chosen = list(dict.fromkeys(families)) if families else list(FAMILIES)
    unknown = set(chosen) - set(FAMILIES)
    if unknown:
        raise SystemExit(f"unknown benchmark families {sorted(unknown)}; known: {sorted(FAMILIES)}")
    return chosen


def all_cases(families: list[str] | None = None) -> list[Case]:
    return [c for f in chosen_families(families) for c in FAMILIES[f]()]
