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
  CUTE_OPS_ALLOW_SERIAL_BUILD=1 build the CUDA kernels without ninja, one file at a time

CUTLASS: $CUTLASS_DIR, else third_party/cutlass, else an installed nvidia-cutlass package; if none
has the headers, the pinned nvidia-cutlass wheel is downloaded with pip and unpacked into
third_party/cutlass (scripts/build_config.py, scripts/fetch_cutlass.py).

PyTorch is not a build requirement in pyproject.toml: the extension must be compiled against the
PyTorch it will be loaded into (C++ ABI, CUDA version), which pip's isolated build environment
would replace with the newest release from PyPI. `pip install --no-build-isolation` builds against
the installed one; an isolated build (`pip install .`) finds the same one through the running
interpreter's site-packages (import_torch below).
"""
from __future__ import annotations

import os
import pathlib
import shutil
import site
import sys
import sysconfig

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "scripts"))
from build_config import DEFAULT_ARCHS, NVCC_FLAGS, ensure_cutlass_include, gencode_flags  # noqa: E402

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


def schema_sources() -> list[str]:
    """Translation units of every build, CPU-only included: the schemas (torch_bindings.cpp) and
    each family's input rules and Meta impls (<family>_checks.cpp, see csrc/common/op_checks.h), so
    that shape inference and input errors work without the kernels. ATen only, no CUDA header."""
    checks = sorted(str(p.relative_to(ROOT)) for p in CSRC.glob("*/*_checks.cpp"))
    return [str(CSRC.relative_to(ROOT) / "torch_bindings.cpp"), *checks]


def cuda_sources(fams: list[str]) -> list[str]:
    """Translation units of a CUDA build: schema_sources(), csrc/common's shared host and device
    code (e.g. the device-error status block every family reports through: built whichever families
    are chosen), and each chosen family's other .cu and .cpp files."""
    sources = schema_sources()
    for folder in [*sorted(NON_FAMILIES), *fams]:
        sources += sorted(str(p.relative_to(ROOT)) for p in (CSRC / folder).rglob("*.cu"))
        sources += sorted(str(p.relative_to(ROOT)) for p in (CSRC / folder).rglob("*.cpp")
                          if str(p.relative_to(ROOT)) not in sources)
    return sources


def import_torch():
    """The installed PyTorch, also from inside pip's isolated build environment.

    Isolation hides the interpreter's site-packages behind a sitecustomize, but pip runs the build
    with the user's own interpreter, so sysconfig and site still name them. They are appended after
    the build environment's paths: setuptools, wheel and ninja come from pyproject's [build-system]
    requires, torch and what it imports from the user's environment."""
    try:
        import torch
        return torch
    except ImportError:
        pass
    hidden = []
    for p in [*site.getsitepackages(), site.getusersitepackages(),
              sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]:
        if p and os.path.isdir(p) and p not in sys.path and p not in hidden:
            hidden.append(p)
    sys.path.extend(hidden)
    try:
        import torch
    except ImportError:
        raise SystemExit(f"PyTorch is not installed for {sys.executable}: install the CUDA build of PyTorch that "
                         "matches your nvcc first (https://pytorch.org/get-started/locally/), then "
                         "`pip install --no-build-isolation -e .`") from None
    log(f"isolated build: using the installed PyTorch {torch.__version__} from "
        f"{pathlib.Path(torch.__file__).parent.parent} so that the extension matches it")
    return torch


def require_ninja(n_sources: int) -> None:
    """Without ninja PyTorch silently compiles one file at a time. pip shows a build's output only
    with -v or on failure, so a warning would go unseen: fail and say what to do instead."""
    if shutil.which("ninja"):
        return
    # Installed but not on PATH, e.g. a virtualenv used without activating it.
    dirs = []
    try:
        import ninja
        dirs.append(getattr(ninja, "BIN_DIR", None))
    except ImportError:
        pass
    dirs.append(sysconfig.get_path("scripts"))
    for d in dirs:
        if d and shutil.which("ninja", path=d):
            os.environ["PATH"] = d + os.pathsep + os.environ.get("PATH", "")
            log(f"ninja is in {d}, which is not on PATH: using it")
            return
    if os.environ.get("CUTE_OPS_ALLOW_SERIAL_BUILD") == "1":
        log(f"WARNING: no ninja: compiling {n_sources} translation units one at a time (CUTE_OPS_ALLOW_SERIAL_BUILD=1)")
        return
    raise SystemExit(f"ninja not found: `pip install ninja` first. Without it PyTorch compiles the {n_sources} "
                     "CUDA translation units one at a time (tens of minutes instead of a few); "
                     "CUTE_OPS_ALLOW_SERIAL_BUILD=1 builds that way anyway")


def extensions():
    torch = import_torch()
    from torch.utils.cpp_extension import CUDA_HOME, CppExtension, CUDAExtension

    bindings = schema_sources()
    cuda_ok = torch.version.cuda is not None and CUDA_HOME is not None
    if os.environ.get("CUTE_OPS_CPU_ONLY") == "1" or not cuda_ok:
        why = "CUTE_OPS_CPU_ONLY=1" if cuda_ok else (
            "PyTorch has no CUDA support" if torch.version.cuda is None else "no CUDA toolkit (nvcc) found")
        log(f"building op schemas only, WITHOUT CUDA kernels ({why}); GPU ops will raise until rebuilt")
        # Schemas and host-side input checks only, nothing that runs hot: -O1 without debug info
        # compiles each file in about half the time of -O3 -g (what a CPU machine, CI's included,
        # waits for).
        return [CppExtension("cute_ops._C", bindings, include_dirs=[str(CSRC)],
                             extra_compile_args={"cxx": ["-O1", "-g0"]})]

    fams = families()
    sources = cuda_sources(fams)
    require_ninja(len(sources))
    cutlass = ensure_cutlass_include(log)
    log(f"CUDA {torch.version.cuda}, families {fams}, {len(sources)} translation units")
    nvcc_flags = NVCC_FLAGS + gencode_flags(os.environ.get("CUTE_OPS_ARCHS", DEFAULT_ARCHS))
    return [CUDAExtension("cute_ops._C", sources, include_dirs=[str(CSRC), str(cutlass)],
                          extra_compile_args={"cxx": ["-O3"], "nvcc": nvcc_flags})]


def main() -> None:
    from setuptools import setup

    ext_modules = extensions()  # imports torch first, from wherever import_torch finds it
    from torch.utils.cpp_extension import BuildExtension

    setup(ext_modules=ext_modules,
          cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)})


# setuptools' PEP 517 backend runs this file as __main__ too; tests import it to call its helpers.
if __name__ == "__main__":
    main()
