#!/usr/bin/env python3
"""Unpack the CUTLASS/CuTe C++ headers from the pinned `nvidia-cutlass` wheel into third_party/cutlass.

The GPU machine has no network, so the headers travel with the working tree (name
`third_party/cutlass` in the device tool's `carry`). Run this once on a machine that reaches PyPI,
or pass `--wheel PATH` to unpack a wheel that is already on disk.

    python scripts/fetch_cutlass.py            # download the pinned wheel and unpack
    python scripts/fetch_cutlass.py --check    # exit 1 unless the pinned version is unpacked
"""
from __future__ import annotations

import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

# Keep in step with the `cutlass` extra in pyproject.toml (tests/test_packaging.py checks it).
CUTLASS_VERSION = "4.2.0.0"
ROOT = pathlib.Path(__file__).resolve().parent.parent
DEST = ROOT / "third_party" / "cutlass"
PREFIX = "cutlass_library/source/include/"


def unpacked_version() -> str | None:
    stamp = DEST / "VERSION"
    return stamp.read_text().strip() if stamp.exists() else None


def download_wheel(tmp: pathlib.Path) -> pathlib.Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "-d", str(tmp), f"nvidia-cutlass=={CUTLASS_VERSION}"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wheels = list(tmp.glob("nvidia_cutlass-*.whl"))
    if not wheels:
        raise SystemExit(f"pip download produced no nvidia_cutlass wheel in {tmp}")
    return wheels[0]


def unpack(wheel: pathlib.Path) -> int:
    if DEST.exists():
        shutil.rmtree(DEST)
    count = 0
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if not name.startswith(PREFIX) or name.endswith("/"):
                continue
            target = DEST / "include" / name[len(PREFIX):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(name))
            count += 1
    if count == 0:
        raise SystemExit(f"{wheel} holds no headers under {PREFIX}")
    (DEST / "VERSION").write_text(CUTLASS_VERSION + "\n")
    return count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wheel", type=pathlib.Path, help="unpack this wheel instead of downloading")
    ap.add_argument("--check", action="store_true", help="only check that the pinned version is unpacked")
    args = ap.parse_args()
    have = unpacked_version()
    if args.check:
        ok = have == CUTLASS_VERSION and (DEST / "include" / "cute" / "tensor.hpp").exists()
        print(f"third_party/cutlass: {have or 'missing'} (pinned {CUTLASS_VERSION})")
        raise SystemExit(0 if ok else 1)
    if have == CUTLASS_VERSION and args.wheel is None:
        print(f"third_party/cutlass already holds CUTLASS {have}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel or download_wheel(pathlib.Path(tmp))
        n = unpack(wheel)
    print(f"unpacked {n} headers of CUTLASS {CUTLASS_VERSION} into {DEST.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
