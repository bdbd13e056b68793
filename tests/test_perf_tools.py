"""CPU tests of the benchmark tooling in perf/: results file names, the merge rules of partial runs,
the metrics, and the side-by-side report, on synthetic results (no GPU is used or needed)."""
from __future__ import annotations

import importlib
import json
import os
import pathlib
import sys

import pytest
import torch

PERF = pathlib.Path(__file__).resolve().parent.parent / "perf"
sys.path.insert(0, str(PERF))

import registry  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402
import run_tp  # noqa: E402

CEIL = {"copy_TBps": 3.0, "read_TBps": 3.3, "matmul_bf16_tflops": 700.0,
        "read_by_kernel_TBps": {"torch_sum": 3.1, "triton_4096_4w": 3.3}}
CEIL_H200 = {"copy_TBps": 4.2, "read_TBps": 4.5, "matmul_bf16_tflops": 720.0,
             "read_by_kernel_TBps": {"torch_sum": 4.4, "triton_4096_4w": 4.5}}


def fake_rows(families: list[str], ceil: dict, scale: float = 1.0) -> list[dict]:
    """Rows as run.py writes them, from made-up times: ours 100 us, each baseline 10% slower than
    the one before it, variants 5% slower than ours."""
    rows = []
    for case in registry.all_cases(families):
        times = {"ours": 100.0 * scale}
        for i, name in enumerate(n for n in case.impls if n != "ours"):
            times[name] = 100.0 * scale * (1.05 if name.startswith("ours_") else 1.1 + 0.1 * i)
        rows.append(run.row(case, times, {n: "graph 16 calls over 1 sets" for n in times}, ceil))
    return rows


def fake_doc(device: str, commit: str, families: list[str], ceil: dict = CEIL, scale: float = 1.0) -> dict:
    return run.new_doc(device, commit, ceil, families, fake_rows(families, ceil, scale))


ALL = list(registry.FAMILIES)


# -- file names ---------------------------------------------------------------------------------

@pytest.mark.parametrize("device, gpus, name", [
    ("NVIDIA H100 80GB HBM3", 1, "h100"),
    ("NVIDIA H200", 1, "h200"),
    ("NVIDIA H200", 2, "h200x2"),
    ("NVIDIA H100 PCIe", 1, "h100_pcie"),
    ("NVIDIA A100-SXM4-80GB", 1, "a100_sxm4_80gb"),
    ("NVIDIA GeForce RTX 4090", 1, "geforce_rtx_4090"),
])
def test_results_file_name(device, gpus, name):
    assert report.gpu_slug(device, gpus) == name


def test_commit_from_environment_else_marked_git(monkeypatch):
    monkeypatch.setenv("CUTE_OPS_COMMIT", "0123abcd")
    assert run.commit() == "0123abcd"
    monkeypatch.delenv("CUTE_OPS_COMMIT")
    c = run.commit()
    assert c == "unknown" or c.endswith("(from git; may be stale)")


# -- metrics ------------------------------------------------------------------------------------

def test_frac_of_read_only_for_read_dominated_cases():
    read_dominated = {c.family for c in registry.all_cases() if c.read_dominated}
    assert read_dominated == {"flash_decode", "gemm_pair", "gemv", "llama_decode"}
    for r, case in zip(fake_rows(ALL, CEIL), registry.all_cases()):
        m = r["metrics"]
        assert ("frac_of_read" in m) == case.read_dominated, case.id
        if case.read_dominated:
            assert m["frac_of_read"] == pytest.approx(m["TBps"] / CEIL["read_TBps"], abs=1e-3)
            assert "frac_of_copy" in m  # beside it, not instead
    # Ceilings of a run without a read ceiling: no frac_of_read at all.
    old = {k: v for k, v in CEIL.items() if not k.startswith("read")}
    assert not any("frac_of_read" in r["metrics"] for r in fake_rows(["flash_decode"], old))


def test_best_baseline_includes_torch_compile_for_the_mlp():
    case = registry.FAMILIES["gemm_pair"]()[0]
    assert "torch_compile" in case.impls and "cublas_graph" in case.impls
    r = run.row(case, {"ours": 10.0, "cublas_graph": 12.0, "cublas_eager": 13.0, "torch_compile": 11.0,
                       "ours_overlap": 10.5}, {}, CEIL)
    assert r["metrics"]["best_baseline"] == "torch_compile"
    assert r["variants_us"] == {"ours_overlap": 10.5} and "ours_overlap" not in r["baselines_us"]


def test_printed_table_shows_read_only_for_read_dominated_rows():
    lines = run.table(fake_rows(["norm", "flash_decode"], CEIL)).splitlines()[1:]
    for line in lines:
        assert ("% read" in line) == line.startswith("flash_decode"), line


# -- merge rules --------------------------------------------------------------------------------

def test_subset_merges_only_into_same_device_and_commit(tmp_path):
    path = tmp_path / "h200.json"
    full = fake_doc("NVIDIA H200", "abc1234", ALL)
    assert run.merge_refusal(None, path, "NVIDIA H200", "abc1234", ["norm"]) is None
    assert run.merge_refusal(full, path, "NVIDIA H200", "abc1234", ["norm"]) is None
    assert run.merge_refusal(full, path, "NVIDIA H200", "abc1234def567890", ["norm"]) is None  # full sha
    for device, commit, says in [("NVIDIA H200", "fed4321", "commit abc1234"),
                                 ("NVIDIA H100 80GB HBM3", "abc1234", "NVIDIA H200")]:
        msg = run.merge_refusal(full, path, device, commit, ["norm"])
        assert msg and says in msg and "--replace" in msg and "--out" in msg
    unknown = fake_doc("NVIDIA H200", "unknown", ["norm"])
    assert run.merge_refusal(unknown, path, "NVIDIA H200", "unknown", ["rope"])


def test_merge_replaces_the_families_run_and_keeps_each_parts_ceilings():
    first = fake_doc("NVIDIA H200", "abc1234", ["norm", "rope", "flash_fwd"], CEIL_H200)
    ceil2 = {**CEIL_H200, "read_TBps": 4.0}
    second = fake_doc("NVIDIA H200", "abc1234", ["gemm_pair", "gemv", "flash_decode", "rope", "llama_decode",
                                                 "llama_prefill"],
                      ceil2, scale=2.0)
    doc = run.merge(first, second, ALL)
    assert doc["families"] == ALL
    assert [p["families"] for p in doc["parts"]] == [["norm", "flash_fwd"], ["gemm_pair", "gemv", "flash_decode", "rope",
                                                                             "llama_decode", "llama_prefill"]]
    assert [p["ceilings"]["read_TBps"] for p in doc["parts"]] == [4.5, 4.0]
    families = [r["family"] for r in doc["results"]]
    assert families == sorted(families, key=ALL.index)  # rows in the registry's family order
    rope = [r for r in doc["results"] if r["family"] == "rope"]
    assert len(rope) == len(registry.FAMILIES["rope"]()) and all(r["ours_us"] == 200.0 for r in rope)
    assert all(r["ours_us"] == 100.0 for r in doc["results"] if r["family"] in ("norm", "flash_fwd"))
    decode = next(r for r in doc["results"] if r["family"] == "flash_decode")
    assert decode["metrics"]["frac_of_read"] == pytest.approx(decode["metrics"]["TBps"] / 4.0, abs=1e-3)
    assert report.family_ceilings(doc, "flash_decode")["read_TBps"] == 4.0
    assert report.family_ceilings(doc, "norm")["read_TBps"] == 4.5
    # A later run of every family of a part drops that part.
    third = fake_doc("NVIDIA H200", "abc1234", ["norm", "flash_fwd"], CEIL_H200)
    assert [p["families"] for p in run.merge(doc, third, ALL)["parts"]] == [
        ["gemm_pair", "gemv", "flash_decode", "rope", "llama_decode", "llama_prefill"], ["norm", "flash_fwd"]]


class _Stop(Exception):
    pass


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    """run.main on a pretend H200: the device calls, the ceilings and the timing replaced; the
    default results directory moved to tmp_path."""
    import cute_ops

    monkeypatch.setattr(run.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(run.torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    monkeypatch.setattr(cute_ops, "cuda_kernels_available", lambda *a: True)
    monkeypatch.setattr(run, "ceilings", lambda: CEIL_H200)
    monkeypatch.setattr(run, "measure", lambda case, ceil: run.row(
        case, {n: 50.0 for n in case.impls}, {}, ceil))
    monkeypatch.setattr(run, "RESULTS", tmp_path)
    monkeypatch.setenv("CUTE_OPS_COMMIT", "abc1234")
    return tmp_path


def test_main_splits_a_full_run_and_refuses_a_partial_overwrite(fake_gpu, monkeypatch, capsys):
    path = fake_gpu / "h200.json"
    assert run.main(["--families", "norm,rope", "--replace"]) == 0
    assert json.loads(path.read_text())["families"] == ["norm", "rope"]
    assert run.main(["--families", "gemm_pair"]) == 0
    doc = json.loads(path.read_text())
    assert doc["families"] == ["norm", "rope", "gemm_pair"] and len(doc["parts"]) == 2
    assert json.loads((fake_gpu / "latest.json").read_text()) == doc
    assert "elapsed: ceilings" in capsys.readouterr().out

    # Another commit: refused before anything is measured; the file is left as it was.
    monkeypatch.setenv("CUTE_OPS_COMMIT", "fed4321")

    def no_measuring():
        raise _Stop
    monkeypatch.setattr(run, "ceilings", no_measuring)
    with pytest.raises(SystemExit, match="holds commit abc1234"):
        run.main(["--families", "norm"])
    assert json.loads(path.read_text()) == doc
    # --out elsewhere is allowed, and leaves the per-GPU file and latest.json alone.
    monkeypatch.setattr(run, "ceilings", lambda: CEIL_H200)
    other = fake_gpu / "elsewhere" / "norm.json"
    assert run.main(["--families", "norm", "--out", str(other)]) == 0
    assert json.loads(other.read_text())["commit"] == "fed4321"
    assert json.loads(path.read_text()) == doc == json.loads((fake_gpu / "latest.json").read_text())
    # A full run at the new commit replaces the file.
    assert run.main([]) == 0
    doc = json.loads(path.read_text())
    assert doc["commit"] == "fed4321" and doc["families"] == ALL and len(doc["parts"]) == 1


def test_merge_joins_runs_made_side_by_side_and_refuses_trials_and_other_commits(fake_gpu, monkeypatch, capsys):
    """--merge: families run at the same time on two GPUs (the second with --out) become one file."""
    path = fake_gpu / "h200.json"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert run.main(["--families", "norm,rope", "--replace"]) == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    other = fake_gpu / "part" / "gemm_pair.json"
    assert run.main(["--families", "gemm_pair", "--out", str(other)]) == 0
    first = json.loads(path.read_text())

    # A --match trial and a file of another commit are refused, and the file is left as it was.
    trial = fake_gpu / "trial.json"
    assert run.main(["--families", "gemv", "--match", "proj=o", "--out", str(trial)]) == 0
    with pytest.raises(SystemExit, match="--match trial"):
        run.main(["--merge", str(trial)])
    monkeypatch.setenv("CUTE_OPS_COMMIT", "fed4321")
    late = fake_gpu / "late.json"
    assert run.main(["--families", "gemv", "--out", str(late)]) == 0
    with pytest.raises(SystemExit, match="holds commit abc1234"):
        run.main(["--merge", str(other), str(late)])
    assert json.loads(path.read_text()) == first
    # A run over two GPUs (run_tp.py's) never goes into a one-GPU file.
    tp_file = fake_gpu / "tp.json"
    tp_file.write_text(json.dumps({**json.loads(other.read_text()), "gpus": 2}))
    with pytest.raises(SystemExit, match="different numbers of GPUs"):
        run.main(["--merge", str(tp_file), "--out", str(path)])
    assert json.loads(path.read_text()) == first

    # No GPU is needed to merge.
    monkeypatch.setattr(run.torch.cuda, "is_available", lambda: False)
    assert run.main(["--merge", str(other)]) == 0
    doc = json.loads(path.read_text())
    assert doc["families"] == ["norm", "rope", "gemm_pair"] and doc["commit"] == "abc1234"
    assert [(p["families"], p["cuda_visible_devices"]) for p in doc["parts"]] == [
        (["norm", "rope"], "0"), (["gemm_pair"], "1")]
    assert {r["family"] for r in doc["results"]} == {"norm", "rope", "gemm_pair"}
    assert json.loads((fake_gpu / "latest.json").read_text()) == doc
    assert "wrote" in capsys.readouterr().out


def test_main_without_gpu_exits_0_with_a_message(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(run.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(run, "RESULTS", tmp_path)
    assert run.main([]) == 0
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1 and "CUDA GPU" in out and "kernels" in out
    assert not list(tmp_path.iterdir())


def test_tp_runner_without_torchrun_exits_0_with_a_message(monkeypatch, capsys):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert run_tp.main() == 0
    assert "torchrun --nproc-per-node N" in capsys.readouterr().out


def test_tp_runner_refuses_a_build_without_the_peer_all_reduce(monkeypatch, capsys):
    # Without the allreduce family the model falls back to NCCL: timing that as `ours` would be a
    # results file about another all-reduce. It must refuse before it starts any process group.
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(run_tp.TensorParallel, "_peer_built", staticmethod(lambda *also: False))
    monkeypatch.setattr(run_tp.TensorParallel, "from_torchrun",
                        staticmethod(lambda world: pytest.fail("started a process group")))
    assert run_tp.main() == 2
    assert "without the allreduce family" in capsys.readouterr().err


def test_tp_runner_step_without_all_reduces_has_no_pushed_gemv(monkeypatch):
    # "auto" pushes the o and down gemvs' rows at one row: the step timed without all-reduces must
    # not keep those (session 68's first run of it did: its B = 1 time included them).
    from cute_ops import allreduce

    monkeypatch.setattr(run_tp.TensorParallel, "_peer_built", staticmethod(lambda *also: True))
    monkeypatch.setattr(allreduce.PeerAllReduce, "takes_gemv", staticmethod(lambda x, weight: True))
    row, weight = torch.ones(1, 64, dtype=torch.bfloat16), torch.ones(64, 64, dtype=torch.bfloat16)
    assert run_tp.TensorParallel(0, 2).pushes(row, weight)  # the rule the override must undo
    none = run_tp._NoAllReduce(0, 2)
    assert not none.pushes(row, weight) and none.all_reduce(row) is row


def test_tp_rows_report_the_speedup_over_one_gpu_and_the_all_reduce():
    times = {"ours": 2500.0, "one_shot": 2800.0, "folded": 2600.0, "nccl": 3300.0, "none": 2300.0, "each": 4.5,
             "each_one_shot": 7.0, "each_nccl": 12.5, "ours_again": 2540.0}
    r = run_tp.tp_row("llama_decode", {"model": "llama3-8b", "tp": 2, "B": 1, "ctx": 512}, 2500.0, {"tp1": 4500.0},
                      CEIL_H200, nbytes=8_000_000_000, times=times)
    m = r["metrics"]
    assert m["best_baseline"] == "tp1" and m["speedup_vs_best_baseline"] == 1.8
    assert m["frac_of_floor"] == round(8e9 / 2500e-6 / 1e12 / CEIL_H200["read_TBps"], 3)
    assert m["allreduce_us_per_step"] == 200.0 and m["allreduce_us_per_step_folded"] == 300.0
    assert m["allreduce_us_per_step_nccl"] == 1000.0 and m["step_us_folded"] == 2600.0
    assert m["step_us_nccl"] == 3300.0 and m["step_us_no_allreduce"] == 2300.0
    assert m["allreduce_us_each"] == 4.5 and m["allreduce_us_each_nccl"] == 12.5
    assert m["step_us_one_shot"] == 2800.0 and m["allreduce_us_per_step_one_shot"] == 500.0
    assert m["allreduce_us_each_one_shot"] == 7.0
    assert m["step_us_ours_again"] == 2540.0  # the drift over the run, reported beside the columns
    assert "tp1" in report.BASELINES


# -- report -------------------------------------------------------------------------------------

@pytest.fixture
def results_dir(tmp_path):
    """An H100 file of one full run, an H200 file joined from two invocations, and the files the
    report must not read."""
    d = tmp_path / "results"
    d.mkdir()
    h100 = fake_doc("NVIDIA H100 80GB HBM3", "abc1234", ALL, CEIL)
    h100["results"] = [r for r in h100["results"] if r["shape"].get("L") != 512]  # a shape only the H200 has
    h200 = run.merge(fake_doc("NVIDIA H200", "abc1234", ["norm", "rope", "flash_fwd"], CEIL_H200, 0.8),
                     fake_doc("NVIDIA H200", "abc1234", ["flash_decode", "gemm_pair", "gemv", "llama_decode", "llama_prefill"],
                              {**CEIL_H200, "read_TBps": 4.6}, 0.7), ALL)
    (d / "h100.json").write_text(json.dumps(h100))
    (d / "h200.json").write_text(json.dumps(h200))
    (d / "latest.json").write_text(json.dumps({**h200, "commit": "latest0"}))
    old = fake_doc("NVIDIA H200", "old0000", ["gemm_pair"], CEIL_H200)
    del old["parts"], old["families"]
    (d / "h200_gemm_pair.json").write_text(json.dumps(old))
    return d


def test_report_puts_the_gpus_side_by_side(results_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as where it is not installed
    docs = tmp_path / "docs"
    report.main(["--results-dir", str(results_dir), "--docs-dir", str(docs)])
    assert "plots skipped" in capsys.readouterr().out
    md = (docs / "benchmarks.md").read_text()
    assert "old0000" not in md and "latest0" not in md  # neither the old partial file nor latest.json
    assert "Plots were skipped" in md and "![" not in md
    runs = [line for line in md.splitlines() if line.startswith(("| H100 |", "| H200 |"))]
    assert len(runs) == 3  # one H100 invocation, two H200 ones with their own read ceilings
    assert "3.3" in runs[0] and "4.5" in runs[1] and "4.6" in runs[2] and "`abc1234`" in runs[2]
    for family in ALL:
        assert f"## {family}" in md
        for gpu in ("H100", "H200"):
            assert f"### {family} on {gpu}" in md
    head = next(line for line in md.splitlines() if line.startswith("| op | shape | dtype | H100 ours us"))
    assert "H200 ours us" in head and "H200 best baseline us" in head and "H100 of ceiling" in head
    section = md[md.index("## flash_decode"):md.index("### flash_decode on H100")]
    rows = [line for line in section.splitlines() if line.startswith("| flash_decode")]
    assert len(rows) == len(registry.FAMILIES["flash_decode"]())
    assert all("% read" in line for line in rows)
    assert any(line.count(" - |") == 4 for line in rows)  # L=512: H200 only
    norm = md[md.index("## norm"):md.index("### norm on H100")]
    assert "% copy" in norm and "% read" not in norm
    fwd = md[md.index("## flash_fwd"):md.index("### flash_fwd on H100")]
    assert "% matmul" in fwd
    # Our variants, per GPU: flash_fwd's sm90 kernel, gemm_pair's policies, flash_decode's bf16
    # cache beside its fp8 cases, llama_decode's fp8 cache.
    assert md.count("Our other settings on") == 8
    for family in ("flash_fwd", "gemm_pair", "flash_decode", "llama_decode"):
        start = md.index(f"### {family} on H100")
        end = md.find("\n## ", start)
        assert "Our other settings on" in md[start:end if end >= 0 else None], family
    assert "torch_compile us" in md[md.index("### gemm_pair on H100"):]


def test_report_plots_each_family_with_both_gpus(results_dir, tmp_path):
    pytest.importorskip("matplotlib")
    docs = tmp_path / "docs"
    report.main(["--results-dir", str(results_dir), "--docs-dir", str(docs), ])
    md = (docs / "benchmarks.md").read_text()
    for family in ALL:
        assert (docs / "img" / f"bench_{family}.png").stat().st_size > 0
        assert f"![{family}](img/bench_{family}.png)" in md


# -- perf/tools/gemm_pair_choices.py --------------------------------------------------------------

def _tool(name: str):
    """The module of perf/tools/<name>.py."""
    sys.path.insert(0, str(PERF / "tools"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(PERF / "tools"))


def _choices():
    return _tool("gemm_pair_choices")


BY_ARCH = {"sm80": {"dtype": ["bfloat16"], "block_m": [16, 64, 128]},
           "sm90": {"dtype": ["bfloat16"], "block_m": [64, 128, 256]}}


@pytest.mark.parametrize("splits", [False, True])
def test_gemm_pair_choices_force_every_kind_and_height(splits):
    choices = _choices().variants(BY_ARCH, splits)
    assert choices.pop("ours") == {}  # the op's own choice, next to every forced one
    heights = {(kw["arch"], kw["block_m"]) for kw in choices.values() if "block_m" in kw}
    assert heights == {(arch, m) for arch, sets in BY_ARCH.items() for m in sets["block_m"]}
    split = [kw for kw in choices.values() if "split_k0" in kw or "split_k1" in kw]
    assert bool(split) == splits
    # Whole sm90 K tiles for GEMM0, whole GEMM0 tiles of h (64 columns) for GEMM1.
    assert all(kw.get("split_k0", 0) % 64 == 0 and kw.get("split_k1", 0) % 64 == 0 for kw in split)


def test_gemm_pair_choices_pass_the_ops_checks():
    # Every variant through the op's input rules (its fake impl, on meta tensors of the MLP's shape).
    import torch

    import cute_ops
    from cute_ops import _library

    if not cute_ops.schemas_loaded():
        pytest.skip("the extension is not built: the op's checks live in it")
    by_arch = _library.supported_configs()["gemm_pair"]["by_arch"]
    x = torch.empty(17, 4096, device="meta", dtype=torch.bfloat16)
    w_gate_up = torch.empty(2 * 14336, 4096, device="meta", dtype=torch.bfloat16)
    w_down = torch.empty(4096, 14336, device="meta", dtype=torch.bfloat16)
    for name, kw in _choices().variants(by_arch, True).items():
        assert cute_ops.gemm_pair(x, w_gate_up, w_down, **kw).shape == (17, 4096), name


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="on a GPU the tool times for minutes")
def test_gemm_pair_choices_without_a_gpu_says_so(capsys):
    assert _choices().main(["1"]) == 0
    assert "needs a CUDA GPU" in capsys.readouterr().out


# -- perf/tools/step_timing.py ---------------------------------------------------------------------

def test_step_timing_without_a_gpu_says_so(monkeypatch, capsys):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert _tool("step_timing").main(["--preset", "llama3-8b"]) == 0
    assert "no GPU here" in capsys.readouterr().out


# -- perf/tools/llama_vs_baseline.py ---------------------------------------------------------------

@pytest.mark.parametrize("name, kind", [
    ("void cute_ops::decode::flash_decode_kernel<cute_ops::decode::FlashDecodeTraits<128, 3, cutlass::bfloat16_t>, "
     "true>(cute_ops::FlashDecodeParams)", "flash_decode_kernel"),
    ("nvjet_tst_128x64_64x8_2x1_v_bz_coopA_NTN", "nvjet"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>(cublasLt::cublasSplitKParams<float>)",
     "splitKreduce"),
    ("triton_poi_fused_add_mul_silu_7", "triton_poi"),
    ("void at::native::elementwise_kernel<128, 2>(int, at::native::gpu_kernel_impl_nocast<...>)",
     "elementwise_kernel"),
    ("void cute_ops::(anonymous namespace)::swiglu_kernel<__nv_bfloat16>(cute_ops::SwigluParams)", "swiglu_kernel"),
])
def test_llama_vs_baseline_groups_kernels_by_kind(name, kind):
    assert _tool("llama_vs_baseline").kind(name) == kind


def test_llama_vs_baseline_finds_the_idle_time_between_kernel_kinds():
    tool = _tool("llama_vs_baseline")
    norm, mm, swiglu = ("void cute_ops::rms_norm_kernel<float>(x)", "nvjet_tst_128x256_64x4_1x2_h_bz_coopB_TNT",
                        "void cute_ops::(anonymous namespace)::swiglu_kernel<__nv_bfloat16>(p)")
    # Two steps: norm, (4 us) matmul, swiglu overlapping the matmul's end (no gap), (10 us / 6 us) norm.
    kernels = [(norm, 0, 10), (mm, 14, 40), (swiglu, 38, 50), (norm, 60, 70),
               (mm, 70, 96), (swiglu, 96, 106), (norm, 112, 120)]
    found = tool.gaps(list(reversed(kernels)), steps=2)  # any order in, sorted by start inside
    assert found == [("swiglu_kernel", "rms_norm_kernel", 8.0, 1.0, 10.0), ("rms_norm_kernel", "nvjet", 2.0, 0.5, 4.0)]
    assert tool.gaps([(norm, 0, 10)], steps=1) == [] and tool.gaps([], steps=1) == []
    # The gap is charged to the kernel that ended last, not to the one that started last.
    assert tool.gaps([(mm, 0, 50), (norm, 10, 20), (swiglu, 60, 70)], steps=1) == [
        ("nvjet", "swiglu_kernel", 10.0, 1.0, 10.0)]


# -- perf/tools/gemv_bits.py -----------------------------------------------------------------------

def test_gemv_bits_without_a_gpu_says_so(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert _tool("gemv_bits").main([str(tmp_path / "bits.pt")]) == 0
    assert "no GPU here" in capsys.readouterr().out and not (tmp_path / "bits.pt").exists()


# -- perf/tools/allreduce_latency.py --------------------------------------------------------------

def test_allreduce_latency_outside_torchrun_says_so_with_multicast_off(monkeypatch, capsys):
    from cute_ops.models.llama.parallel import MULTICAST_OFF

    for name in MULTICAST_OFF:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert _tool("allreduce_latency").main(["--rows", "1"]) == 0
    assert "under torchrun with 2 or more GPUs" in capsys.readouterr().out
    assert all(os.environ[name] == value for name, value in MULTICAST_OFF.items())


def test_allreduce_latency_refuses_multicast_on(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    with pytest.raises(RuntimeError, match="NVLink multicast"):
        _tool("allreduce_latency").main(["--rows", "1"])


# -- perf/tools/flash_fwd_schedule.py -------------------------------------------------------------

def test_flash_fwd_schedule_model():
    model = _tool("flash_fwd_schedule")
    # Every (query block, head) once; causal sections longest-first, or alternating when asked.
    for causal, alternate in ((False, False), (True, False), (True, True)):
        blocks = model.order(5, 7, 3, causal, alternate)
        assert sorted(blocks) == sorted(list(range(5)) * 7)
    assert model.order(3, 2, 2, True, False) == [2, 2, 1, 1, 0, 0]
    assert model.order(3, 4, 2, True, True) == [0, 0, 1, 1, 2, 2, 2, 2, 1, 1, 0, 0]  # the last section longest-first
    # Equal tiles, a whole number of waves: every CTA ends together under either scheduler.
    costs = [3.0] * (2 * model.SMS)
    assert model.balance_dynamic(costs) == pytest.approx(1.0)
    assert model.balance_alternating(costs) == pytest.approx(1.0)
    # The collapse measured on an H100 (docs/perf-notes.md, session 41): causal 16k at one head a
    # section, alternating rounds; the dynamic queue does not share it.
    block_m, block_n = model.tile_config(128)
    tiles = [model.cost(m, 128, True, block_m, block_n) for m in model.order(128, 16, 1, True, True)]
    assert model.balance_alternating(tiles) < 0.7
    tiles = [model.cost(m, 128, True, block_m, block_n) for m in model.order(128, 16, 1, True, False)]
    assert model.balance_dynamic(tiles) > 0.95
    # Claim rules (session 56): a tile claimed as the one before it starts (Q ahead) balances
    # unequal causal tiles worse than one claimed near that tile's end; a claim a few blocks
    # before the end balances as the end's. Equal tiles: every rule alike.
    end, start, late = (model.balance_dynamic(tiles, rule, 2) for rule in ("end", "start", "late"))
    assert start < end - 0.05 and late == pytest.approx(end, abs=0.005)
    assert all(model.balance_dynamic(costs, rule, 2) == pytest.approx(1.0) for rule in ("start", "late"))
    # Head dim 256's key blocks: 80 non-causal, 64 causal (flash_fwd_launch_sm90.h).
    assert model.tile_config(256) == (128, 80) and model.tile_config(256, causal=True) == (128, 64)
    # A stream-K tail: whole waves need none (nothing cut), a part-filled last wave of long tiles
    # gains (15.5 waves: 0.970 as launched), and tiles of a few blocks lose to the merges.
    assert model.balance_stream_k_tail(2 * model.SMS, 16) == pytest.approx(1.0)
    long_tiles = [model.OVERHEAD + 128] * 2048
    assert model.balance_dynamic(long_tiles) == pytest.approx(2048 / model.SMS / 16)
    assert model.balance_stream_k_tail(2048, 128) > 0.99 > model.balance_dynamic(long_tiles)
    assert model.balance_stream_k_tail(2048, 4) < model.balance_dynamic([model.OVERHEAD + 4] * 2048)


# -- perf/tools/gemv_tile_probe.py ----------------------------------------------------------------

def test_gemv_tile_probe_without_a_gpu_says_so(monkeypatch, capsys):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert _tool("gemv_tile_probe").main(["--shapes", "gate_up70B_tp2"]) == 0
    assert "no GPU here" in capsys.readouterr().out


def test_gemv_tile_probe_refuses_an_unknown_shape():
    with pytest.raises(SystemExit):
        _tool("gemv_tile_probe").main(["--shapes", "gate_up9B"])


def test_llama_vs_baseline_kernel_span_counts_overlaps_once():
    tool = _tool("llama_vs_baseline")
    # Two steps: kernels from 5 to 105 us (overlapping ones included) -> a span of 50 us a step.
    kernels = [("a", 5, 30), ("b", 20, 60), ("c", 70, 105), ("d", 80, 90)]
    assert tool.kernel_span_us(kernels, steps=2) == 50.0
    assert tool.kernel_span_us([], steps=2) == 0.0


# -- perf/tools/prefill_levers.py ------------------------------------------------------------------

def test_prefill_levers_without_a_gpu_says_so(monkeypatch, capsys):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert _tool("prefill_levers").main([]) == 0
    assert "no GPU here" in capsys.readouterr().out
