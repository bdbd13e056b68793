#!/usr/bin/env python3
"""Compile every translation unit under csrc/ to an object file, without linking or running.

For CI and other machines without a GPU or a CUDA PyTorch: kernel `.cu` files go through nvcc for
every target architecture, and the torch glue `.cpp` files through the host compiler against the
installed PyTorch's headers (a CPU PyTorch ships the CUDA ones). Catches build breaks that the
schemas-only CPU install cannot.

Each `.cu` is one nvcc call with one -gencode per architecture, as in setup.py's build: nvcc then
parses and compiles the host side once and only the device side per architecture. The heaviest
files (the kernel instantiations) start first, so that no long one is left running alone at the end.
CUTLASS headers are found, or fetched, as setup.py does (scripts/build_config.py).

    python scripts/compile_check.py [--archs "90a;80"] [--jobs N] [--only norm,rope]
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

from build_config import DEFAULT_ARCHS, NVCC_FLAGS, ensure_cutlass_include, gencode_flags

ROOT = pathlib.Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
OUT = ROOT / "build" / "compile_check"


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


def cost_rank(src: pathlib.Path) -> int:
    """Smaller starts earlier: template instantiations take minutes, launch files seconds, glue less."""
    if src.suffix == ".cu":
        return 0 if "instantiations" in src.parts else 1
    return 2


def commands(archs: list[str], only: set[str] | None, nvcc_threads: int) -> list[tuple[str, list[str]]]:
    import torch.utils.cpp_extension as ext

    cuda = cuda_home()
    torch_inc = [f"-I{p}" for p in ext.include_paths()]
    common = [f"-I{CSRC}", f"-I{ensure_cutlass_include(lambda m: print(f'compile_check: {m}'))}", "-DNDEBUG"]
    gencodes = gencode_flags(";".join(archs))
    threads = [f"--threads={nvcc_threads}"] if nvcc_threads != 1 else []
    sources = sorted(CSRC.rglob("*.cu")) + sorted(CSRC.rglob("*.cpp"))
    cmds = []
    for src in sorted(sources, key=cost_rank):  # stable: alphabetical within a rank
        family = src.relative_to(CSRC).parts[0] if len(src.relative_to(CSRC).parts) > 1 else ""
        if only is not None and family and family not in only:
            continue
        rel = src.relative_to(ROOT)
        obj = OUT / f"{str(rel).replace('/', '_')}.o"
        if src.suffix == ".cu":
            cmds.append((f"{rel} [{', '.join('sm_' + a for a in archs)}]", [
                "nvcc", "-c", str(src), "-o", str(obj), "-std=c++17", *NVCC_FLAGS, *gencodes, *threads, *common]))
        else:
            # CPU wheels of PyTorch lack the generated c10/cuda macros header; its content only
            # matters for Windows DLL exports.
            cmds.append((str(rel), [
                "c++", "-c", str(src), "-o", str(obj), "-std=c++20", "-O1", "-fPIC",
                "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE", "-DTORCH_EXTENSION_NAME=_C", f"-I{cuda / 'include'}",
                *[f"-I{p}" for p in sysconfig.get_paths()["include"].split()],
                *torch_inc, *common]))
    return cmds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archs", default=DEFAULT_ARCHS, help=f"semicolon/comma list (default: {DEFAULT_ARCHS!r})")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="parallel compiler calls (default: cores)")
    ap.add_argument("--nvcc-threads", type=int, default=0,
                    help="nvcc --threads: architectures of one file compiled in parallel (0: all; 1: one by one)")
    ap.add_argument("--only", help="comma list of families (csrc/<family>/); default all")
    args = ap.parse_args()
    archs = [a for a in args.archs.replace(",", ";").split(";") if a]
    only = set(args.only.split(",")) if args.only else None
    OUT.mkdir(parents=True, exist_ok=True)
    cmds = commands(archs, only, args.nvcc_threads)
    t0 = time.time()

    def run(item):
        name, cmd = item
        start = time.time()
        with tempfile.TemporaryFile() as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            # wait4 gives the CPU time of the compiler and the processes it ran: unlike wall time it
            # does not grow when other work shares the cores, so runs stay comparable.
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            log.seek(0)
            out = log.read().decode(errors="replace")
        return name, proc.returncode, time.time() - start, usage.ru_utime + usage.ru_stime, out

    failed = 0
    cpu = []
    with cf.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        # as_completed: a line per file as it finishes, so a CI log shows progress.
        for fut in cf.as_completed([pool.submit(run, c) for c in cmds]):
            name, rc, secs, cpu_secs, out = fut.result()
            cpu.append((cpu_secs, name))
            print(f"{'ok  ' if rc == 0 else 'FAIL'} {secs:6.1f}s (cpu {cpu_secs:6.1f}s)  {name}", flush=True)
            if rc != 0:
                failed += 1
                print(out[-6000:], file=sys.stderr)
    wall = time.time() - t0
    slowest = ", ".join(f"{n.split('/')[-1].split(' ')[0]} {s:.0f}s" for s, n in sorted(cpu, reverse=True)[:3])
    print(f"compile_check: {len(cmds) - failed} of {len(cmds)} translation units built in {wall:.0f}s "
          f"({args.jobs} jobs, archs {';'.join(archs)}); cpu {sum(s for s, _ in cpu):.0f}s in all, "
          f"slowest: {slowest}")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
