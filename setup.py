"""Build of the `cute_ops._C` extension.

On a CUDA build of PyTorch with nvcc available this compiles every kernel family under csrc/ for
sm_90a and sm_80 with ninja. With a CPU-only PyTorch it builds only the op schemas
(csrc/torch_bindings.cpp): `import cute_ops` works, fake impls trace, and calling an op on a GPU
tensor says that the kernels were not built.

Environment:
  CUTE_OPS_FAMILIES=norm,rope   build only these kernel families (default: all under csrc/)
  CUTE_OPS_ARCHS=90a;80         target architectures (default: 90a;80)
  CUTE_OPS_CPU_ONLY=1           build the schemas only, even with CUDA available
  CUTLASS_DIR=/path             CUTLASS checkout or unpacked headers (has include/cute)
  MAX_JOBS=N                    parallel compile jobs (ninja; default: all cores)
"""
from __future__ import annotations

import os
import pathlib
import sys

from setuptools import setup

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "scripts"))
from build_config import NVCC_FLAGS, find_cutlass_include, gencode_flags  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent
CSRC = ROOT / "csrc"
# Directories of csrc/ that hold shared code rather than an op family.
NON_FAMILIES = {"common"}


def log(msg: str) -> None:
    print(f"cute_ops setup: {msg}", file=sys.stderr)


def families() -> list[str]:
    present = sorted(p.name for p in CSRC.iterdir() if p.is_dir() and p.name not in NON_FAMILIES)
    wanted = os.environ.get("CUTE_OPS_FAMILIES")
    if not wanted:
        return present
    chosen = [f.strip() for f in wanted.split(",") if f.strip()]
    unknown = sorted(set(chosen) - set(present))
    if unknown:
        raise SystemExit(f"CUTE_OPS_FAMILIES names unknown families {unknown}; present: {present}")
    return chosen


def extensions():
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, CppExtension, CUDAExtension

    bindings = [str(CSRC.relative_to(ROOT) / "torch_bindings.cpp")]
    cxx_flags = ["-O3"]
    cuda_ok = torch.version.cuda is not None and CUDA_HOME is not None
    if os.environ.get("CUTE_OPS_CPU_ONLY") == "1" or not cuda_ok:
        why = "CUTE_OPS_CPU_ONLY=1" if cuda_ok else (
            "PyTorch has no CUDA support" if torch.version.cuda is None else "no CUDA toolkit (nvcc) found")
        log(f"building op schemas only, WITHOUT CUDA kernels ({why}); GPU ops will raise until rebuilt")
        return [CppExtension("cute_ops._C", bindings, include_dirs=[str(CSRC)],
                             extra_compile_args={"cxx": cxx_flags})]

    cutlass = find_cutlass_include()
    if cutlass is None:
        raise SystemExit("CUTLASS headers not found: set CUTLASS_DIR, run `python scripts/fetch_cutlass.py`, "
                         "or `pip install nvidia-cutlass==4.2.0.0`")
    fams = families()
    sources = list(bindings)
    for fam in fams:
        sources += sorted(str(p.relative_to(ROOT)) for p in (CSRC / fam).rglob("*.cu"))
        sources += sorted(str(p.relative_to(ROOT)) for p in (CSRC / fam).rglob("*.cpp"))
    log(f"CUDA {torch.version.cuda}, CUTLASS {cutlass}, families {fams}, {len(sources)} translation units")
    nvcc_flags = NVCC_FLAGS + gencode_flags(os.environ.get("CUTE_OPS_ARCHS", "90a;80"))
    return [CUDAExtension("cute_ops._C", sources, include_dirs=[str(CSRC), str(cutlass)],
                          extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags})]


def main() -> None:
    from torch.utils.cpp_extension import BuildExtension

    setup(ext_modules=extensions(),
          cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)})


main()
