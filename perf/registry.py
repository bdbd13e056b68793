"""Every benchmark case, by family."""
from __future__ import annotations

import cases_decode
import cases_flash
import cases_gemm_pair
import cases_norm
import cases_rope
from harness import Case

FAMILIES = {"norm": cases_norm.cases, "rope": cases_rope.cases, "flash_fwd": cases_flash.cases,
            "flash_decode": cases_decode.cases, "gemm_pair": cases_gemm_pair.cases}
# One op per family whose CUDA kernels must be built for its cases to run.
FAMILY_OPS = {"norm": "rms_norm", "rope": "rotary_embedding", "flash_fwd": "flash_fwd",
              "flash_decode": "flash_decode", "gemm_pair": "gemm_pair"}


def all_cases(families: list[str] | None = None) -> list[Case]:
    chosen = families or list(FAMILIES)
    unknown = set(chosen) - set(FAMILIES)
    if unknown:
        raise SystemExit(f"unknown benchmark families {sorted(unknown)}; known: {sorted(FAMILIES)}")
    return [c for f in chosen for c in FAMILIES[f]()]


def chosen_families(families: list[str] | None = None) -> list[str]:
    return families or list(FAMILIES)
