#!/usr/bin/env python3
"""Compile every translation unit under csrc/ to an object file, without linking or running.

For CI and other machines without a GPU or a CUDA PyTorch: kernel `.cu` files go through nvcc for
each target architecture, and the torch glue `.cpp` files through the host compiler against the
installed PyTorch's headers (a CPU PyTorch ships the CUDA ones). Catches build breaks that the
schemas-only CPU install cannot.

    python scripts/compile_check.py [--archs 90a] [--jobs 2] [--only norm,rope]
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import pathlib
import shutil
import subprocess
import sys
import time

from build_config import NVCC_FLAGS, find_cutlass_include, gencode_flags

ROOT = pathlib.Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
OUT = ROOT / "build" / "compile_check"


def cutlass_include() -> pathlib.Path:
    found = find_cutlass_include()
    if found is None:
        raise SystemExit("CUTLASS headers not found: run `python scripts/fetch_cutlass.py` first")
    return found


def cuda_home() -> pathlib.Path:
    """CUDA_HOME, else /usr/local/cuda, else the toolkit around nvcc (which may be a wrapper)."""
    candidates = [os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(pathlib.Path(nvcc).resolve().parent.parent))
    for c in candidates:
        if c and (pathlib.Path(c) / "include" / "cuda_runtime.h").exists():
            return pathlib.Path(c)
    raise SystemExit("no CUDA toolkit headers found: set CUDA_HOME")


def commands(archs: list[str], only: set[str] | None) -> list[tuple[str, list[str]]]:
    import torch.utils.cpp_extension as ext

    cuda = cuda_home()
    torch_inc = [f"-I{p}" for p in ext.include_paths()]
    common = [f"-I{CSRC}", f"-I{cutlass_include()}", "-DNDEBUG"]
    cmds = []
    for src in sorted(CSRC.rglob("*.cu")) + sorted(CSRC.rglob("*.cpp")):
        family = src.relative_to(CSRC).parts[0] if len(src.relative_to(CSRC).parts) > 1 else ""
        if only is not None and family and family not in only:
            continue
        rel = src.relative_to(ROOT)
        if src.suffix == ".cu":
            for arch in archs:
                obj = OUT / f"{str(rel).replace('/', '_')}.sm_{arch}.o"
                cmds.append((f"{rel} [sm_{arch}]", [
                    "nvcc", "-c", str(src), "-o", str(obj), "-std=c++17", *NVCC_FLAGS, *gencode_flags(arch),
                    *common]))
        else:
            obj = OUT / f"{str(rel).replace('/', '_')}.o"
            # CPU wheels of PyTorch lack the generated c10/cuda macros header; its content only
            # matters for Windows DLL exports.
            cmds.append((str(rel), [
                "c++", "-c", str(src), "-o", str(obj), "-std=c++20", "-O1", "-fPIC",
                "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE", "-DTORCH_EXTENSION_NAME=_C", f"-I{cuda / 'include'}",
                *[f"-I{p}" for p in __import__("sysconfig").get_paths()["include"].split()],
                *torch_inc, *common]))
    return cmds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archs", default="90a", help="semicolon/comma list, e.g. '90a;80'")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--only", help="comma list of families (csrc/<family>/); default all")
    args = ap.parse_args()
    archs = [a for a in args.archs.replace(",", ";").split(";") if a]
    only = set(args.only.split(",")) if args.only else None
    OUT.mkdir(parents=True, exist_ok=True)
    cmds = commands(archs, only)
    t0 = time.time()

    def run(item):
        name, cmd = item
        start = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True)
        return name, r.returncode, time.time() - start, r.stdout + r.stderr

    failed = 0
    with cf.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for name, rc, secs, log in pool.map(run, cmds):
            print(f"{'ok  ' if rc == 0 else 'FAIL'} {secs:6.1f}s  {name}", flush=True)
            if rc != 0:
                failed += 1
                print(log[-6000:], file=sys.stderr)
    print(f"compile_check: {len(cmds) - failed} of {len(cmds)} translation units built in "
          f"{time.time() - t0:.0f}s ({args.jobs} jobs)")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
