"""The generated instantiations, dispatch tables and supported sets (csrc/generate_instantiations.py):
the committed files are the generator's current output, the extension and the Python wrappers
report the generator's sets, the headers the CPU-only build compiles need neither CUDA nor torch,
and the architecture axis does what the sm90 paths will need. CPU only."""
from __future__ import annotations

import dataclasses
import filecmp
import importlib
import importlib.util
import json
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

import cute_ops

ROOT = pathlib.Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
GENERATOR = CSRC / "generate_instantiations.py"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("generate_instantiations", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_committed_files_are_the_generators_output(tmp_path):
    # A hand edit, a file left behind by a removed configuration, or a FAMILIES change that was not
    # regenerated all fail here. The generator runs as documented, into a directory of its own.
    r = subprocess.run([sys.executable, str(GENERATOR), "--out", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert written
    differ = [str(p) for p in written if not (CSRC / p).is_file() or not filecmp.cmp(tmp_path / p, CSRC / p, False)]
    assert not differ, f"stale or missing (run `python csrc/generate_instantiations.py`): {differ}"
    families = {p.parts[0] for p in written}
    committed = {p.relative_to(CSRC) for f in families for p in (CSRC / f / "instantiations").iterdir()}
    assert not committed - set(written), "files under instantiations/ that the generator does not write"
    # --check agrees, and finds a stale file.
    assert subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True).returncode == 0
    victim = next(p for p in written if p.suffix == ".cu")
    (tmp_path / victim).write_text((tmp_path / victim).read_text() + "// edited\n")
    r = subprocess.run([sys.executable, str(GENERATOR), "--check", "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode != 0 and str(victim) in r.stderr


def test_instantiations_are_todays(gen):
    # The kernels must not change with the generator: the same template instantiations as the
    # hand-kept lists they replace (gemm_pair's files also instantiate its occupancy query).
    files = {p: text for p, text in gen.outputs().items() if "/instantiations/" in p}
    expected = {f"template void run_flash_fwd_<cutlass::{t}, {d}, {c}>(const FlashFwdParams& p, cudaStream_t stream);"
                for t in ("half_t", "bfloat16_t") for d in (64, 96, 128, 256) for c in ("false", "true")}
    # flash_fwd's sm90 kernel (wgmma, TMA): the same keys
    expected |= {f"template void run_flash_fwd_sm90_<cutlass::{t}, {d}, {c}>(const FlashFwdParams& p, "
                 "cudaStream_t stream);" for t in ("half_t", "bfloat16_t") for d in (64, 96, 128, 256)
                 for c in ("false", "true")}
    expected |= {f"template void run_flash_decode_<cutlass::{t}, {d}>(const FlashDecodeParams& p, cudaStream_t stream);"
                 for t in ("half_t", "bfloat16_t") for d in (64, 128)}
    for t in ("half_t", "bfloat16_t"):
        for m in (16, 64, 128):
            expected.add(f"template void run_gemm_pair_<cutlass::{t}, {m}>(const GemmPairParams& p, cudaStream_t stream);")
            expected.add(f"template int gemm_pair_ctas_per_sm_<cutlass::{t}, {m}>();")
        for m in (64, 128, 256):  # gemm_pair's sm90 kernels (wgmma, TMA): no 16-row config
            expected.add(f"template void run_gemm_pair_sm90_<cutlass::{t}, {m}>(const GemmPairParams& p, "
                         "cudaStream_t stream);")
            expected.add(f"template int gemm_pair_ctas_per_sm_sm90_<cutlass::{t}, {m}>();")
    found = [line for text in files.values() for line in text.splitlines() if line.startswith("template ")]
    assert sorted(found) == sorted(expected)
    assert len(files) == 16 + 16 + 4 + 6 + 6


def test_identity_macros_match_the_instantiation(gen):
    # flash_fwd's sm90 files say which instantiation they are before their header, which turns on
    # CuTe's extended wgmma shapes for the one config that uses them (flash_fwd_launch_sm90.h); the
    # macros must name the file's own template arguments, and no other family's files define them.
    for path, text in gen.outputs().items():
        if "/instantiations/" not in path:
            continue
        defines = dict(re.findall(r"^#define CUTE_OPS_INSTANCE_(\w+) (\d+)$", text, re.M))
        if "flash_fwd_sm90_" not in path:
            assert not defines, path
            continue
        args = re.search(r"run_flash_fwd_sm90_<cutlass::\w+, (\d+), (true|false)>", text)
        assert defines == {"HEAD_DIM": args[1], "CAUSAL": str(int(args[2] == "true"))}, path
        assert text.index("#define CUTE_OPS_INSTANCE_") < text.index("#include"), path


def _expected_sets(gen) -> dict:
    return {f.name: gen.supported_json(f) for f in gen.FAMILIES}


def test_extension_reports_the_generated_sets(gen):
    if not cute_ops.schemas_loaded():
        pytest.skip("cute_ops._C is not built")
    assert json.loads(torch.ops.cute_ops.supported_configs()) == _expected_sets(gen)
    assert cute_ops._library.supported_configs() == _expected_sets(gen)


def test_wrappers_use_the_extensions_sets(gen):
    if not cute_ops.schemas_loaded():
        pytest.skip("cute_ops._C is not built")
    sets = _expected_sets(gen)
    flash, decode, gemm_pair = (importlib.import_module(f"cute_ops.{m}") for m in ("flash", "decode", "gemm_pair"))
    dtypes = tuple(getattr(torch, n) for n in sets["flash_fwd"]["dtype"])
    assert flash.HEAD_DIMS == tuple(sets["flash_fwd"]["head_dim"]) and flash.DTYPES == dtypes
    assert decode.HEAD_DIMS == tuple(sets["flash_decode"]["head_dim"])
    assert decode.DTYPES == tuple(getattr(torch, n) for n in sets["flash_decode"]["dtype"])
    assert gemm_pair.BLOCK_MS == tuple(sets["gemm_pair"]["block_m"])
    assert gemm_pair.DTYPES == tuple(getattr(torch, n) for n in sets["gemm_pair"]["dtype"])
    # Plain tuples of ints and dtypes: constants for torch.compile, and the wrappers' messages.
    assert all(type(d) is int for d in flash.HEAD_DIMS + decode.HEAD_DIMS + gemm_pair.BLOCK_MS)
    with pytest.raises(KeyError):
        cute_ops._library.supported("flash_fwd", "block_m")  # a name the C++ side does not have


def test_wrappers_without_the_extension():
    # No set is restated in Python, so without the extension they are empty, and a wrapper must
    # say that the extension is missing, not that no head dim (or dtype) is allowed.
    code = """
import importlib, sys
sys.modules["cute_ops._C"] = None  # the import of the extension fails
import torch, cute_ops
assert not cute_ops.schemas_loaded()
flash, decode, gemm_pair = (importlib.import_module(f"cute_ops.{m}") for m in ("flash", "decode", "gemm_pair"))
assert flash.HEAD_DIMS == flash.DTYPES == decode.HEAD_DIMS == gemm_pair.BLOCK_MS == ()
assert cute_ops._library.supported_configs() == {}
q = torch.zeros(1, 1, 4, 64, dtype=torch.float16)
a = torch.zeros(16, 64, dtype=torch.float16)
for name, call in [("flash_fwd", lambda: cute_ops.flash_fwd(q, q, q)),
                   ("flash_fwd_varlen", lambda: cute_ops.flash_fwd_varlen(q[0], q[0], q[0], None, None, 1, 1)),
                   ("flash_decode", lambda: cute_ops.flash_decode(q, q, q, torch.zeros(1, dtype=torch.int32))),
                   ("gemm_pair", lambda: cute_ops.gemm_pair(a, a, a))]:
    try:
        call()
    except RuntimeError as e:
        assert f"cute_ops.{name}: " in str(e) and "cute_ops._C could not be imported" in str(e), e
    else:
        raise AssertionError(name + " did not raise")
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def _cxx() -> str:
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    return cxx


def test_supported_headers_need_neither_cuda_nor_torch(gen, tmp_path):
    # torch_bindings.cpp includes them in the CPU-only build: compile them with csrc/ as the only
    # include path, check the constexpr sets the C++ checks use, and that the JSON the op returns
    # is the generator's.
    lines = ["#include <cstdio>"]
    lines += [f'#include "{f.name}/{f.name}_supported.h"' for f in gen.FAMILIES]
    lines.append("namespace s = cute_ops::supported;")
    for f in gen.FAMILIES:
        for axis in f.axes:
            if axis.kind == "int":
                array = f"s::{f.name}::{gen._array(axis)}"
                for v in f.supported(axis):
                    lines.append(f"static_assert(s::{f.name}::contains({array}, {v}));")
                lines.append(f"static_assert(!s::{f.name}::contains({array}, {max(f.supported(axis)) + 1}));")
    lines.append("int main() {")
    lines += [f'  std::printf("%s\\n", s::{f.name}::kJson);' for f in gen.FAMILIES]
    lines.append("}")
    src = tmp_path / "supported.cpp"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "supported"
    r = subprocess.run([_cxx(), "-std=c++17", "-Wall", "-Werror", f"-I{CSRC}", str(src), "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert [json.loads(line) for line in out] == [gen.supported_json(f) for f in gen.FAMILIES]


def test_an_omitted_architecture_compiles_to_nothing(gen, tmp_path):
    # CUTE_OPS_OMIT_<FAMILY>_<ARCH> leaves an instantiation file empty (no kernel header is even
    # read), and the dispatch table names every instantiation under the same guard.
    cxx = _cxx()
    for f in gen.FAMILIES:
        for impl in f.impls:
            path = CSRC / f.name / "instantiations" / f.file_name(impl, f.instances(impl)[0])
            r = subprocess.run([cxx, "-E", "-P", "-x", "c++", f"-D{f.guard(impl)}", f"-I{CSRC}", str(path)],
                               capture_output=True, text=True)
            assert r.returncode == 0 and r.stdout.strip() == "", (path, r.stdout, r.stderr)
        dispatch = (CSRC / f.name / f"{f.name}_dispatch.h").read_text()
        for impl in f.impls:
            guarded = dispatch.split(f"#ifndef {f.guard(impl)}\n")
            assert len(guarded) == 3  # the extern declarations and the table's entries
            externs = guarded[1].split(f"#endif  // {f.guard(impl)}")[0]
            assert externs.count("extern template") == len(f.instances(impl)) * len(f.entry_points)


def test_an_architecture_is_one_line(gen):
    # What an sm90 path adds (flash_fwd's, here with other head dims): an Impl with its own header
    # and templates, and fewer head dims. Its files, guard, table entries (tried first, on 9.x only) and sets follow from it;
    # the sm80 instantiations stay as they are.
    fwd = next(f for f in gen.FAMILIES if f.name == "flash_fwd")
    fwd = dataclasses.replace(fwd, impls=tuple(i for i in fwd.impls if i.arch == "sm80"))
    sm90 = gen.Impl("sm90", "flash_fwd/sm90/flash_fwd_launch.h", {"run": "run_flash_fwd_sm90_"},
                    values={"head_dim": (64, 128)})
    both = dataclasses.replace(fwd, impls=(sm90, *fwd.impls))
    assert [both.file_name(sm90, k) for k in both.instances(sm90)][:2] == [
        "flash_fwd_sm90_hdim64_fp16.cu", "flash_fwd_sm90_hdim64_fp16_causal.cu"]
    text = gen.instantiation_file(both, sm90, ("bfloat16", 128, True))
    assert "#ifndef CUTE_OPS_OMIT_FLASH_FWD_SM90" in text and '#include "flash_fwd/sm90/flash_fwd_launch.h"' in text
    assert "template void run_flash_fwd_sm90_<cutlass::bfloat16_t, 128, true>(" in text
    table = gen.dispatch_header(both)
    assert table.index("if (major == 9) {") < table.index("if (major >= 8) {")
    assert table.count("visit(Sm90<") == 2 * 2 * 2 and table.count("visit(Sm80<") == 2 * 4 * 2
    assert "struct Sm90 {" in table and "run_flash_fwd_sm90_<Element, kHeadDim, kIsCausal>(p, stream)" in table
    sets = gen.supported_json(both)
    assert sets["arch"] == ["sm90", "sm80"] and sets["head_dim"] == [64, 96, 128, 256]
    assert sets["by_arch"]["sm90"]["head_dim"] == [64, 128]
    # A value that only the new architecture has joins the family's set, not the older one's.
    wider = dataclasses.replace(both, impls=(dataclasses.replace(sm90, values={"head_dim": (192, 64)}), *fwd.impls))
    assert gen.supported_json(wider)["head_dim"] == [64, 96, 128, 192, 256]
    assert gen.supported_json(wider)["by_arch"]["sm80"]["head_dim"] == [64, 96, 128, 256]
    assert "inline constexpr int kHeadDims[] = {64, 96, 128, 192, 256};" in gen.supported_header(wider)
