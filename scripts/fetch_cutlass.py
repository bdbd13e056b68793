#!/usr/bin/env python3
"""Unpack the CUTLASS/CuTe C++ headers from the pinned `nvidia-cutlass` wheel into third_party/cutlass.

setup.py does this by itself when it finds no CUTLASS headers (see scripts/build_config.py), so a
machine with network needs nothing more. A GPU machine without network needs the headers to travel
with the working tree (name `third_party/cutlass` in the device tool's `carry`): run this once on a
machine that reaches PyPI, or pass `--wheel PATH` to unpack a wheel that is already on disk.

    python scripts/fetch_cutlass.py            # download the pinned wheel and unpack
    python scripts/fetch_cutlass.py --check    # exit 1 unless the pinned version is unpacked
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

# Keep in step with pyproject.toml's [build-system] requires and `cutlass` extra
# (tests/test_packaging.py checks both).
CUTLASS_VERSION = "4.2.0.0"
ROOT = pathlib.Path(__file__).resolve().parent.parent
DEST = ROOT / "third_party" / "cutlass"
PREFIX = "cutlass_library/source/include/"
# The pip that downloads the wheel; tests put a fake one here.
PIP = [sys.executable, "-m", "pip"]


class FetchError(RuntimeError):
    """The pinned wheel could not be downloaded or holds no headers."""


def unpacked_version(dest: pathlib.Path = DEST) -> str | None:
    stamp = dest / "VERSION"
    return stamp.read_text().strip() if stamp.exists() else None


def _pip_env() -> dict[str, str]:
    env = dict(os.environ)
    # Inside pip's isolated build environment PYTHONPATH points at a sitecustomize that hides the
    # interpreter's site-packages, pip included; the download needs the interpreter's own pip.
    if "pip-build-env" in env.get("PYTHONPATH", ""):
        env.pop("PYTHONPATH")
        env.pop("PYTHONNOUSERSITE", None)
    return env


def download_wheel(tmp: pathlib.Path) -> pathlib.Path:
    # Few retries and a short socket timeout: on a machine without network this should fail in
    # seconds with a clear message, not retry for many minutes.
    cmd = [*PIP, "download", "--no-deps", "--only-binary=:all:", "--retries", "1", "--timeout", "30",
           "-d", str(tmp), f"nvidia-cutlass=={CUTLASS_VERSION}"]
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_pip_env())
    except OSError as e:
        raise FetchError(f"could not run pip: {e}") from e
    if r.returncode != 0:
        tail = [line.strip() for line in r.stdout.splitlines() if line.strip()][-3:]
        raise FetchError(f"`pip download nvidia-cutlass=={CUTLASS_VERSION}` failed (exit {r.returncode}): "
                         + " | ".join(tail))
    wheels = sorted(tmp.glob("nvidia_cutlass-*.whl"))
    if not wheels:
        raise FetchError(f"pip download produced no nvidia_cutlass wheel in {tmp}")
    return wheels[0]


def unpack(wheel: pathlib.Path, dest: pathlib.Path = DEST) -> int:
    """Unpack the headers into dest/include and stamp dest/VERSION; returns the header count.

    The headers go to a sibling folder first and are moved into place at the end, so an
    interrupted unpack never leaves a half-filled dest that the CUTLASS lookup would accept."""
    partial = dest.with_name(dest.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    count = 0
    try:
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if not name.startswith(PREFIX) or name.endswith("/"):
                    continue
                target = partial / "include" / name[len(PREFIX):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(name))
                count += 1
    except zipfile.BadZipFile as e:
        shutil.rmtree(partial, ignore_errors=True)
        raise FetchError(f"{wheel} is not a wheel: {e}") from e
    if count == 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise FetchError(f"{wheel} holds no headers under {PREFIX}")
    (partial / "VERSION").write_text(CUTLASS_VERSION + "\n")
    if dest.exists():
        shutil.rmtree(dest)
    partial.rename(dest)
    return count


def fetch(dest: pathlib.Path = DEST, wheel: pathlib.Path | None = None) -> int:
    """Download the pinned wheel (unless given one) and unpack its headers into dest."""
    with tempfile.TemporaryDirectory() as tmp:
        return unpack(wheel or download_wheel(pathlib.Path(tmp)), dest)


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
    try:
        n = fetch(DEST, args.wheel)
    except FetchError as e:
        raise SystemExit(f"fetch_cutlass: {e}") from None
    print(f"unpacked {n} headers of CUTLASS {CUTLASS_VERSION} into {DEST.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
