"""Build metadata, the CUTLASS lookup and fetch, setup.py's helpers, and the import path of a
CPU-only install."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap
import zipfile

import pytest
import torch

import cute_ops

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import build_config  # noqa: E402
import fetch_cutlass  # noqa: E402


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_cutlass_pin_agrees_with_pyproject():
    pin = fetch_cutlass.CUTLASS_VERSION
    pyproject = _pyproject()
    # An isolated build takes the headers from [build-system]; setup.py's fetch and the extra must
    # give the same version.
    assert f"nvidia-cutlass=={pin}" in pyproject["build-system"]["requires"]
    assert pyproject["project"]["optional-dependencies"]["cutlass"] == [f"nvidia-cutlass=={pin}"]


def test_build_requires_no_torch():
    # A torch build requirement makes pip's isolated build download the newest PyTorch (several GB
    # with CUDA) and compile against it instead of the user's: setup.py's import_torch finds theirs.
    requires = _pyproject()["build-system"]["requires"]
    assert not [r for r in requires if re.match(r"torch\b", r)]
    assert "ninja" in requires


# --- CUTLASS lookup and fetch (scripts/build_config.py, scripts/fetch_cutlass.py) ---

def _fake_headers(folder: pathlib.Path, version=(4, 2, 0, 0)) -> pathlib.Path:
    (folder / "include" / "cute").mkdir(parents=True)
    (folder / "include" / "cute" / "tensor.hpp").write_text("// fake\n")
    (folder / "include" / "cutlass").mkdir()
    (folder / "include" / "cutlass" / "version.h").write_text("".join(
        f"#define CUTLASS_{k} {v}\n" for k, v in zip(("MAJOR", "MINOR", "PATCH", "BUILD"), version)))
    return folder


@pytest.fixture
def no_cutlass(tmp_path, monkeypatch):
    """A fake repository root with no CUTLASS anywhere: no CUTLASS_DIR, no third_party/cutlass, no
    installed package."""
    monkeypatch.delenv("CUTLASS_DIR", raising=False)
    monkeypatch.setattr(build_config, "cutlass_package_dir", lambda: None)
    root = tmp_path / "repo"
    root.mkdir()
    return root


def test_cutlass_lookup_order(no_cutlass, tmp_path, monkeypatch):
    root = no_cutlass
    assert build_config.find_cutlass(root) is None
    package = _fake_headers(tmp_path / "site" / "cutlass_library" / "source")
    monkeypatch.setattr(build_config, "cutlass_package_dir", lambda: package)
    assert build_config.find_cutlass_include(root) == package / "include"
    third_party = _fake_headers(root / "third_party" / "cutlass")
    assert build_config.find_cutlass_include(root) == third_party / "include"
    explicit = _fake_headers(tmp_path / "elsewhere", version=(4, 1, 0, 0))
    monkeypatch.setenv("CUTLASS_DIR", str(explicit))
    include, where = build_config.find_cutlass(root)
    assert include == explicit / "include"
    assert where.startswith("$CUTLASS_DIR") and "CUTLASS 4.1.0.0" in where


def test_wrong_cutlass_dir_is_an_error(no_cutlass, tmp_path, monkeypatch):
    _fake_headers(no_cutlass / "third_party" / "cutlass")
    monkeypatch.setenv("CUTLASS_DIR", str(tmp_path / "typo"))
    # Not a silent fall-back to third_party/cutlass: the user asked for another copy.
    with pytest.raises(SystemExit, match="CUTLASS_DIR=.*typo"):
        build_config.find_cutlass(no_cutlass)


def test_other_cutlass_version_is_reported(no_cutlass, monkeypatch):
    _fake_headers(no_cutlass / "third_party" / "cutlass", version=(3, 9, 2, 0))
    logs = []
    build_config.ensure_cutlass_include(logs.append, root=no_cutlass)
    assert any("3.9.2.0" in m and fetch_cutlass.CUTLASS_VERSION in m for m in logs), logs


def _fake_pip(tmp_path, monkeypatch, script: str) -> pathlib.Path:
    """Replace `python -m pip` in fetch_cutlass with a script; it records its arguments."""
    fake = tmp_path / "fake_pip.py"
    argv_file = tmp_path / "pip_argv"
    fake.write_text(f"import pathlib, sys, zipfile\npathlib.Path({str(argv_file)!r}).write_text(' '.join(sys.argv[1:]))\n"
                    + textwrap.dedent(script))
    monkeypatch.setattr(fetch_cutlass, "PIP", [sys.executable, str(fake)])
    return argv_file


def test_fetch_when_no_cutlass_is_found(no_cutlass, tmp_path, monkeypatch):
    pin = fetch_cutlass.CUTLASS_VERSION
    argv_file = _fake_pip(tmp_path, monkeypatch, f"""
        dest = pathlib.Path(sys.argv[sys.argv.index("-d") + 1])
        with zipfile.ZipFile(dest / "nvidia_cutlass-{pin}-py3-none-any.whl", "w") as zf:
            zf.writestr("cutlass_library/__init__.py", "")
            zf.writestr("cutlass_library/source/include/cute/tensor.hpp", "// fake")
            zf.writestr("cutlass_library/source/include/cutlass/version.h", "#define CUTLASS_MAJOR 4")
            zf.writestr("cutlass_library/source/tools/ignored.cpp", "")
    """)
    logs = []
    include = build_config.ensure_cutlass_include(logs.append, root=no_cutlass)
    dest = no_cutlass / "third_party" / "cutlass"
    assert include == dest / "include"
    assert (include / "cute" / "tensor.hpp").read_text() == "// fake"
    assert not (dest / "tools").exists() and not (dest / "include" / "__init__.py").exists()
    assert (dest / "VERSION").read_text().strip() == pin
    argv = argv_file.read_text()
    assert argv.startswith("download --no-deps") and argv.endswith(f"nvidia-cutlass=={pin}")
    # It says that it downloaded, and where the headers went.
    assert any("downloading" in m and f"nvidia-cutlass=={pin}" in m for m in logs), logs
    assert any("unpacked 2 headers" in m and str(dest) in m for m in logs), logs
    # The next build finds them without pip.
    monkeypatch.setattr(fetch_cutlass, "PIP", ["false"])
    assert build_config.ensure_cutlass_include(logs.append, root=no_cutlass) == include


def test_fetch_without_network_fails_with_the_usual_message(no_cutlass, tmp_path, monkeypatch):
    _fake_pip(tmp_path, monkeypatch, """
        print("ERROR: Could not find a version that satisfies the requirement nvidia-cutlass (no network)")
        sys.exit(1)
    """)
    with pytest.raises(SystemExit) as e:
        build_config.ensure_cutlass_include(lambda m: None, root=no_cutlass)
    message = str(e.value)
    assert message.startswith(build_config.CUTLASS_MISSING)
    assert "no network" in message and "exit 1" in message
    assert not (no_cutlass / "third_party").exists() or not any((no_cutlass / "third_party").iterdir())


def test_unpack_of_a_wheel_without_headers_leaves_nothing(tmp_path):
    wheel = tmp_path / "nvidia_cutlass-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("cutlass_library/__init__.py", "")
    dest = tmp_path / "third_party" / "cutlass"
    with pytest.raises(fetch_cutlass.FetchError, match="no headers"):
        fetch_cutlass.unpack(wheel, dest)
    assert not dest.exists() and not dest.with_name("cutlass.partial").exists()


# --- setup.py's helpers (setup.py runs the build only as __main__) ---

def _setup_module():
    import runpy

    return runpy.run_path(str(ROOT / "setup.py"), run_name="cute_ops_setup")


def test_cuda_build_compiles_every_source_file():
    # A .cpp or .cu under csrc/ that the CUDA build leaves out links nowhere, and on the GPU the
    # extension fails to load with an undefined symbol; CI (no CUDA PyTorch) would not see it.
    setup = _setup_module()
    built = set(setup["cuda_sources"](setup["families"]()))
    present = {str(p.relative_to(ROOT)) for ext in ("*.cu", "*.cpp") for p in (ROOT / "csrc").rglob(ext)}
    assert built == present
    # A subset of families still gets the shared code.
    assert {str(p.relative_to(ROOT)) for p in (ROOT / "csrc" / "common").rglob("*.cpp")} <= set(
        setup["cuda_sources"](["norm"]))


def test_setup_without_ninja_says_so(tmp_path, monkeypatch):
    require_ninja = _setup_module()["require_ninja"]
    g = require_ninja.__globals__
    monkeypatch.setenv("PATH", str(tmp_path))  # no ninja on PATH
    monkeypatch.setitem(sys.modules, "ninja", None)  # nor the ninja package
    monkeypatch.setattr(g["sysconfig"], "get_path", lambda name: str(tmp_path))  # nor beside python
    monkeypatch.delenv("CUTE_OPS_ALLOW_SERIAL_BUILD", raising=False)
    with pytest.raises(SystemExit, match=r"ninja not found: `pip install ninja`.* 42 CUDA translation units one at a time"):
        require_ninja(42)
    monkeypatch.setenv("CUTE_OPS_ALLOW_SERIAL_BUILD", "1")
    require_ninja(42)


def test_setup_finds_ninja_off_path(tmp_path, monkeypatch):
    require_ninja = _setup_module()["require_ninja"]
    bin_dir = tmp_path / "venv_bin"
    bin_dir.mkdir()
    (bin_dir / "ninja").write_text("#!/bin/sh\n")
    (bin_dir / "ninja").chmod(0o755)
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setitem(sys.modules, "ninja", type(sys)("ninja"))
    sys.modules["ninja"].BIN_DIR = str(bin_dir)
    require_ninja(42)
    assert os.environ["PATH"].split(os.pathsep)[0] == str(bin_dir)


def test_setup_imports_torch_hidden_by_build_isolation():
    # pip's isolated build runs setup.py with the user's interpreter but without its site-packages
    # on sys.path. The child process drops them the same way (`python -S` would not do in a
    # virtualenv: without the site module the interpreter does not know it is one), checks that
    # torch is then hidden, and import_torch must still find the installed one.
    code = ("import importlib.util, runpy, site, sys, sysconfig\n"
            "paths = sysconfig.get_paths()\n"
            "hidden = {*site.getsitepackages(), site.getusersitepackages(), paths['purelib'], paths['platlib']}\n"
            "sys.path[:] = [p for p in sys.path if p not in hidden and 'site-packages' not in p]\n"
            "assert importlib.util.find_spec('torch') is None, 'torch still visible'\n"
            "t = runpy.run_path('setup.py', run_name='x')['import_torch']()\n"
            "print(t.__version__)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == torch.__version__
    assert "isolated build: using the installed PyTorch" in r.stderr


def test_every_schema_is_registered():
    assert cute_ops.schemas_loaded()
    for op in ("rms_norm", "fused_add_rms_norm", "rotary_embedding", "flash_fwd", "flash_fwd_varlen", "flash_decode",
               "gemm_pair", "gemm_pair_order", "supported_configs"):
        assert hasattr(torch.ops.cute_ops, op)


def test_every_schema_has_a_fake_impl():
    # Each op declared in torch_bindings.cpp needs shape inference for meta and fake tensors, so
    # that torch.compile can trace it: a C++ Meta impl (<family>_checks.cpp, built into every build)
    # or a Python register_fake.
    text = (ROOT / "csrc" / "torch_bindings.cpp").read_text()
    # Host-only ops (no tensor arguments, like gemm_pair_order) run their C++ code under any
    # dispatch key, fake tensors included, and need none.
    declared = [name for name, args in re.findall(r'm\.def\("(\w+)\(([^)]*)\)', text) if "Tensor" in args]
    assert declared
    py = "\n".join(p.read_text() for p in (ROOT / "cute_ops").glob("*.py"))
    for op in declared:
        meta = torch._C._dispatch_has_kernel_for_dispatch_key(f"cute_ops::{op}", "Meta")
        assert meta or f'register_fake("cute_ops::{op}")' in py, f"no Meta impl or fake impl for cute_ops::{op}"


def test_kernels_built_where_a_gpu_is_visible():
    # On a GPU machine a missing kernel build is a failure, not a skip.
    if torch.cuda.is_available():
        assert cute_ops.cuda_kernels_available("rms_norm")
        assert cute_ops.cuda_kernels_available("rotary_embedding")
        assert cute_ops.cuda_kernels_available("flash_fwd")
        assert cute_ops.cuda_kernels_available("flash_fwd_varlen")
