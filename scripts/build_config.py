"""Build settings shared by setup.py (the real build) and scripts/compile_check.py (CI's
compile-only check), so that both find the same CUTLASS and pass nvcc the same flags."""
from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import sys
from typing import Callable

_HERE = pathlib.Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # tests load this file by path
    sys.path.insert(0, str(_HERE))
from fetch_cutlass import CUTLASS_VERSION, FetchError, fetch  # noqa: E402

ROOT = _HERE.parent
# Hopper (sm_90a) and Ampere (sm_80); CUTE_OPS_ARCHS overrides it in setup.py.
DEFAULT_ARCHS = "90a;80"

NVCC_FLAGS = ["-O3", "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math", "-lineinfo",
              "-DNDEBUG",
              # PyTorch's extension flags turn these off; CuTe's 16-bit types need them.
              "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
              "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
              "-U__CUDA_NO_HALF2_OPERATORS__"]

CUTLASS_MISSING = ("CUTLASS headers not found: set CUTLASS_DIR, run `python scripts/fetch_cutlass.py`, "
                   f"or `pip install nvidia-cutlass=={CUTLASS_VERSION}`")


def _has_headers(d: pathlib.Path) -> bool:
    return (d / "include" / "cute" / "tensor.hpp").is_file()


def header_version(include: pathlib.Path) -> str | None:
    """'4.2.0.0' from include/cutlass/version.h, the same form as the wheel's version."""
    try:
        text = (include / "cutlass" / "version.h").read_text()
    except OSError:
        return None
    parts = [re.search(rf"#define\s+CUTLASS_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH", "BUILD")]
    return ".".join(m.group(1) for m in parts) if all(parts) else None


def cutlass_package_dir() -> pathlib.Path | None:
    """The `source` folder of the installed nvidia-cutlass package (module cutlass_library)."""
    # find_spec locates the package without importing it: its __init__ pulls in scipy, cuda-python...
    try:
        spec = importlib.util.find_spec("cutlass_library")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "source"


def cutlass_candidates(root: pathlib.Path = ROOT) -> list[tuple[str, pathlib.Path]]:
    """Where the headers are looked for, in order: $CUTLASS_DIR, third_party/cutlass, the installed
    nvidia-cutlass package (an isolated build has it from pyproject's [build-system] requires)."""
    candidates = []
    if os.environ.get("CUTLASS_DIR"):
        candidates.append(("$CUTLASS_DIR", pathlib.Path(os.environ["CUTLASS_DIR"])))
    candidates.append(("third_party/cutlass", root / "third_party" / "cutlass"))
    package = cutlass_package_dir()
    if package is not None:
        candidates.append(("the nvidia-cutlass package", package))
    return candidates


def find_cutlass(root: pathlib.Path = ROOT) -> tuple[pathlib.Path, str] | None:
    """(include dir, where it came from and its version), or None when no candidate has headers."""
    for label, path in cutlass_candidates(root):
        if _has_headers(path):
            include = path / "include"
            return include, f"{label} ({path}), CUTLASS {header_version(include) or 'of unknown version'}"
        if label == "$CUTLASS_DIR":
            # An explicit choice that is wrong is an error, not a reason to build against another copy.
            raise SystemExit(f"CUTLASS_DIR={path} has no include/cute/tensor.hpp "
                             "(point it at a CUTLASS checkout or an unpacked nvidia-cutlass source/ folder)")
    return None


def find_cutlass_include(root: pathlib.Path = ROOT) -> pathlib.Path | None:
    found = find_cutlass(root)
    return found[0] if found else None


def ensure_cutlass_include(log: Callable[[str], None] = print, root: pathlib.Path = ROOT) -> pathlib.Path:
    """find_cutlass(), else download the pinned nvidia-cutlass wheel with pip and unpack its headers
    into third_party/cutlass (scripts/fetch_cutlass.py), saying so. Exits with CUTLASS_MISSING
    when that fails too (no network, say)."""
    found = find_cutlass(root)
    if found is not None:
        include, where = found
        version = header_version(include)
        if version is not None and version != CUTLASS_VERSION:
            log(f"WARNING: CUTLASS {version} is not the pinned {CUTLASS_VERSION} that the kernels are tested with")
        log(f"CUTLASS headers from {where}")
        return include
    dest = root / "third_party" / "cutlass"
    log(f"no CUTLASS headers in $CUTLASS_DIR, third_party/cutlass or an installed nvidia-cutlass: "
        f"downloading nvidia-cutlass=={CUTLASS_VERSION} with pip to unpack its headers into {dest}")
    try:
        count = fetch(dest)
    except FetchError as e:
        raise SystemExit(f"{CUTLASS_MISSING}\n(fetching it failed: {e})") from None
    log(f"unpacked {count} headers of CUTLASS {CUTLASS_VERSION} into {dest}")
    return dest / "include"


def gencode_flags(archs: str) -> list[str]:
    """'90a;80' -> one -gencode per architecture (machine code only, no PTX)."""
    return [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs.replace(",", ";").split(";") if a.strip()]
