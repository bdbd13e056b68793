"""Build settings shared by setup.py (the real build) and scripts/compile_check.py (CI's
compile-only check), so that both find the same CUTLASS and pass nvcc the same flags."""
from __future__ import annotations

import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent

NVCC_FLAGS = ["-O3", "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math", "-lineinfo",
              "-DNDEBUG",
              # PyTorch's extension flags turn these off; CuTe's 16-bit types need them.
              "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
              "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
              "-U__CUDA_NO_HALF2_OPERATORS__"]


def find_cutlass_include() -> pathlib.Path | None:
    """CUTLASS_DIR, then third_party/cutlass, then the installed nvidia-cutlass wheel."""
    candidates = []
    if os.environ.get("CUTLASS_DIR"):
        candidates.append(pathlib.Path(os.environ["CUTLASS_DIR"]))
    candidates.append(ROOT / "third_party" / "cutlass")
    try:
        import cutlass_library  # type: ignore

        candidates.append(pathlib.Path(cutlass_library.__file__).parent / "source")
    except ImportError:
        pass
    for c in candidates:
        if (c / "include" / "cute" / "tensor.hpp").exists():
            return c / "include"
    return None


def gencode_flags(archs: str) -> list[str]:
    """'90a;80' -> one -gencode per architecture (machine code only, no PTX)."""
    return [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs.replace(",", ";").split(";") if a.strip()]
