"""Other targets from the same DAG (README: Other targets): CUDA GPUs, 64-bit Arm, and Macs
(macos_arm64, metal: their Mach-O and Metal checks are tests/test_apple.py's).

- Config: the other targets pass the schema, a plain `all` stays llvm only, and a cuda target
  that names a CPU is rejected.
- Each builds every component of the tiny config on this machine (`--config targets=...`).
  Their validation jobs cannot run here and say why in one line (`status: skipped`, never
  `passed: true`); the folder carries those libraries marked unvalidated, and the runtime here
  refuses it, naming the machine it is for.
- The aarch64 libraries are real aarch64 shared objects, and every component's runs under
  qemu-user (Debian's arm64 Python with a runtime-only TVM, tools/cross/aarch64_env.sh) and
  matches PyTorch on this machine with validation's own bars (measure/metrics.py
  TIGHT_RELATIVE, relative max abs error, where validation judges a function tight; spectral
  metrics for the decoder's waveform).
"""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import yaml
from conftest import OTHER_TARGETS, REPO, TINY, dry_run, model_folder, needs_nvcc, run_snakemake

from kokoro_tvm import cpu, paths
from kokoro_tvm.compile.devices import architecture, lstm_methods_for
from kokoro_tvm.compile.gpu import cuda_available
from kokoro_tvm.compile.runnable import cannot_run_reason
from kokoro_tvm.compile.targets import cpu_of
from kokoro_tvm.config import ConfigError, validate_config
from kokoro_tvm.cpu import host_cpu_extensions, listed_cpu_extensions
from kokoro_tvm.facts import COMPONENT_NAMES


def _config(**changes):
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config.update(changes)
    return config


def test_other_targets_pass_the_schema():
    validate_config(_config(targets=OTHER_TARGETS), REPO)


def test_cuda_target_naming_a_cpu_is_rejected():
    config = _config(targets=["cuda"])
    config["target_options"]["cuda"] = {"kind": "cuda", "arch": "sm_90", "mcpu": "znver4"}
    with pytest.raises(ConfigError, match="target_options.cuda"):
        validate_config(config, REPO)


def test_target_facts():
    options = yaml.safe_load((REPO / "config.yaml").read_text())["target_options"]
    assert architecture(options["aarch64"]) == "aarch64"
    assert architecture(options["cuda"]) == "cuda:sm_90"
    assert architecture(options["metal"]) == "metal"
    assert architecture(options["macos_arm64"]) == "aarch64"
    assert "aarch64" in cannot_run_reason(options["aarch64"])
    for target in ("macos_arm64", "metal"):
        assert "code for macOS on aarch64 cannot run" in cannot_run_reason(options[target])
    # GPUs take tir_vec (its kernel swapped for a GPU one when lowering), never the scalar tir
    assert lstm_methods_for(options["cuda"], ["tir", "tir_vec"]) == ["tir_vec"]
    assert lstm_methods_for(options["cuda"], ["tir"]) == ["tir_vec"]
    assert lstm_methods_for(options["aarch64"], ["tir_vec"]) == ["tir_vec"]


def test_a_gpu_target_falls_back_to_its_own_lstm_method(tmp_path):
    """lstm_methods [tir], which GPUs cannot build: the cuda libraries of the LSTM components
    use tir_vec (lstm_methods_for), and the workflow has a job for each (its lstm wildcard
    matches every device's methods, not only the configured ones)."""
    done = run_snakemake(tmp_path, "-n", "all", "--config", 'targets=["cuda"]',
                         'lstm_methods=["tir"]')
    text = done.stdout + done.stderr
    for component in ("duration", "text_encoder", "f0n"):
        assert paths.LIBRARY.format(target="cuda", component=component, lstm="tir_vec",
                                    bucket=16) in text, text[-2000:]
    assert "/tir/" not in text


def test_plain_all_builds_llvm_only(tmp_path):
    done = run_snakemake(tmp_path, "-n", "all", configfiles=())
    text = done.stdout + done.stderr
    assert "results/manifest/llvm.json" in text
    for target in OTHER_TARGETS:  # no library folder of theirs
        assert paths.LIBRARY.split("{component}")[0].format(target=target) not in text, target


def test_benchmarks_time_only_targets_this_machine_runs(tmp_path):
    """Benchmarks time libraries here: a configured cuda or aarch64 target that this machine
    cannot run is built by `all` but not benchmarked (no job that would fail for want of a
    device)."""
    done = run_snakemake(tmp_path, "-n", "bench_e2e", "bench_components", "bench_lstm",
                         "--config", f"targets={json.dumps(['llvm', *OTHER_TARGETS])}")
    text = done.stdout + done.stderr
    assert "results/bench/e2e/llvm.json" in text
    assert "results/bench/components/llvm.json" in text
    if not cuda_available():
        assert "results/bench/e2e/cuda.json" not in text
    for target in ("aarch64", "macos_arm64", "metal"):
        assert f"results/bench/e2e/{target}.json" not in text
        assert f"results/bench/lstm/{target}.json" not in text


# Per target: the architecture its manifest entries name, the CPU of its host code (the generic
# one for cuda, mcpu's extensions for the others) and why validation is skipped here.
OTHER_FACTS = {
    "cuda": ("cuda:sm_90", {"mcpu": None, "extensions": []}, "no CUDA device"),
    "aarch64": ("aarch64", {"mcpu": "neoverse-n1", "extensions": ["dotprod", "neon"]},
                "code for Linux on aarch64 cannot run on this Linux x86_64 machine"),
    "macos_arm64": ("aarch64", {"mcpu": "apple-m1", "extensions": ["dotprod", "neon"]},
                    "code for macOS on aarch64 cannot run on this Linux x86_64 machine"),
    "metal": ("metal", {"mcpu": "apple-m1", "extensions": ["dotprod", "neon"]},
              "code for macOS on aarch64 cannot run on this Linux x86_64 machine"),
}


@pytest.mark.parametrize("target", [pytest.param("cuda", marks=needs_nvcc), "aarch64",
                                    "macos_arm64", "metal"])
def test_every_component_builds_and_validation_is_skipped(other_built, target):
    """Each library's validation says in one line why it cannot run here; ELF libraries are for
    their machine (the Mach-O ones: tests/test_apple.py)."""
    architecture, cpu, reason = OTHER_FACTS[target]
    manifest = json.loads((other_built / f"results/manifest/{target}.json").read_text())
    assert {e["component"] for e in manifest["libraries"]} == set(COMPONENT_NAMES)
    for entry in manifest["libraries"]:
        assert entry["validated"] is False and entry["passed"] is False
        assert entry["architecture"] == architecture and entry["cpu"] == cpu
        report = json.loads((other_built / entry["validation"]).read_text())
        assert report["status"] == "skipped" and report["passed"] is False
        assert report["reason"] == reason
        if target in ("cuda", "metal"):
            assert entry["lstm"] in ("none", "tir_vec")
        so = (other_built / entry["library"]).read_bytes()
        if target in ("cuda", "aarch64"):
            machine = int.from_bytes(so[18:20], "little")  # ELF e_machine
            assert machine == (0xB7 if target == "aarch64" else 0x3E)  # AArch64 / x86-64


def test_model_folder_of_another_architecture_is_refused(other_built):
    """results/dist/aarch64 holds its libraries, marked as not validated (they are, where they
    run), and the runtime here refuses it naming the machine it is for."""
    from kokoro_tvm.runtime.engine import TvmEngine
    from kokoro_tvm.runtime.model_folder import ModelFolder, ModelFolderError

    folder = model_folder(other_built, "aarch64")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert len(manifest["libraries"]) == 5 and manifest["left_out"] == []
    assert not any(entry["validated"] for entry in manifest["libraries"])
    assert (manifest["architecture"], manifest["system"]) == ("aarch64", "linux")
    with pytest.raises(ModelFolderError,
                       match="code for Linux on aarch64 cannot run on this Linux x86_64"):
        TvmEngine(ModelFolder(folder))


# /proc/cpuinfo of two Arm CPUs: a Neoverse N1 (AWS Graviton2) and a Cortex-A72 (Raspberry Pi 4).
NEOVERSE_N1 = ("processor\t: 0\nBogoMIPS\t: 243.75\nFeatures\t: fp asimd evtstrm aes pmull sha1 "
               "sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs\n")
CORTEX_A72 = "processor\t: 0\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\n"
ARM = {"kind": "llvm", "mtriple": "aarch64-linux-gnu"}
# Every x86-64 CPU with AVX2 and FMA (Haswell, Zen 1 and later).
X86_64_V3 = {"kind": "llvm", "mcpu": "x86-64-v3"}


def test_linux_lists_the_cpu_extensions_llvm_implies():
    """cpu.CPU_EXTENSIONS' Linux names match LLVM's: the extensions this machine's /proc/cpuinfo
    lists (what the runtime reads) include every one LLVM's name for this CPU implies (what a
    build for mcpu: host records, so the machine runs its own build), and equal them for two Arm
    CPUs' lists and their mcpu. A virtual CPU may list more than its model's name implies (an
    Intel Rocket Lake guest listing AVX-VNNI), never less."""
    here = host_cpu_extensions()
    assert here is not None, "Linux on x86_64 lists its CPU's flags"
    assert set(cpu_of({"kind": "llvm", "mcpu": "host"})["extensions"]) <= here
    assert {"avx2", "fma"} <= here  # the test machines' floor
    assert listed_cpu_extensions(NEOVERSE_N1, "aarch64") == set(
        cpu_of({**ARM, "mcpu": "neoverse-n1"})["extensions"]) == {"neon", "dotprod"}
    assert listed_cpu_extensions(CORTEX_A72, "aarch64") == set(
        cpu_of({**ARM, "mcpu": "cortex-a72"})["extensions"]) == {"neon"}
    assert listed_cpu_extensions(CORTEX_A72, "x86_64") is None  # no flags line: cannot tell


def test_validation_skips_an_mcpu_with_extensions_this_cpu_lacks(monkeypatch, tmp_path):
    """A library for a newer mcpu than this machine's would die of an illegal instruction in
    its validation: the validation is skipped, naming what this CPU lacks (the library is then
    left out of the model folder, as other targets' that cannot run here)."""
    from kokoro_tvm.stages.validate import validate

    monkeypatch.setattr(cpu, "host_cpu_extensions", lambda: set(cpu_of(X86_64_V3)["extensions"]))
    assert cannot_run_reason({"kind": "llvm", "mcpu": "x86-64"}) is None
    assert cannot_run_reason(X86_64_V3) is None
    newer = {"kind": "llvm", "mcpu": "icelake-server"}
    lacking = cpu.lacking_cpu_extensions(cpu_of(newer)["extensions"])
    assert {"avx512f", "avx512vnni"} <= set(lacking) and "avx2" not in lacking
    report = validate("bert", "none", 16, tmp_path / "b16.so", tmp_path / "bert.npz",
                      tmp_path / "b16.reference.npz", tmp_path / "b16.json", newer)
    assert report["status"] == "skipped" and report["passed"] is False
    assert report["reason"] == (f"code for the CPU icelake-server may use {', '.join(lacking)}, "
                                "which this machine's CPU lacks")
    assert json.loads((tmp_path / "b16.json").read_text()) == report


def test_the_portable_x86_targets_differ_by_avx512_and_a_v3_cpu_is_refused_v4(monkeypatch):
    """config.yaml's portable floors: x86_64_v4 is x86_64_v3 plus AVX-512 F/BW/CD/DQ/VL
    (docs/serving.md, The CPU floor), so a CPU with v3's extensions alone runs a v3 folder's
    code and is refused v4's, naming the AVX-512 it lacks."""
    options = yaml.safe_load((REPO / "config.yaml").read_text())["target_options"]
    v3, v4 = (set(cpu_of(options[name])["extensions"]) for name in ("x86_64_v3", "x86_64_v4"))
    assert v4 - v3 == {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
    assert v3 < v4 and {"avx2", "fma"} <= v3
    monkeypatch.setattr(cpu, "host_cpu_extensions", lambda: v3)
    assert cannot_run_reason(options["x86_64_v3"]) is None
    assert cannot_run_reason(options["x86_64_v4"]) == (
        "code for the CPU x86-64-v4 may use avx512bw, avx512cd, avx512dq, avx512f, avx512vl, "
        "which this machine's CPU lacks")


# CPUs with more extensions than most: the first this machine's CPU falls short of is the one
# the planning test pins.
NEWER_CPUS = ("sapphirerapids", "icelake-server", "znver4")


def test_an_mcpu_beyond_this_cpu_is_neither_tuned_nor_benchmarked(tmp_path):
    """Tuning measures on this machine and the benchmarks run the libraries here: a target whose
    pinned mcpu implies extensions this CPU lacks is built (and its validation skipped) but
    gets no tuning and no benchmark jobs, as a target of another architecture."""
    newer = next((mcpu for mcpu in NEWER_CPUS
                  if cannot_run_reason({"kind": "llvm", "mcpu": mcpu}) is not None), None)
    if newer is None:
        pytest.skip(f"this CPU has every extension of {', '.join(NEWER_CPUS)}")
    config = tmp_path / "newer.yaml"
    config.write_text(yaml.safe_dump({
        "targets": ["llvm", "newer"], "tuning": {"enabled": True},
        "target_options": {"newer": {"kind": "llvm", "mcpu": newer}}}))
    jobs = dry_run(tmp_path, "--forceall", "all", "bench_components", "bench_lstm",
                   configfiles=(TINY, config))
    targets = {rule: {job["wildcards"]["target"] for job in jobs if job["rule"] == rule}
               for rule in ("lower", "validate", "tune", "bench_components_target",
                            "bench_lstm_target")}
    assert targets == {"lower": {"llvm", "newer"}, "validate": {"llvm", "newer"},
                       "tune": {"llvm"}, "bench_components_target": {"llvm"},
                       "bench_lstm_target": {"llvm"}}


def test_model_folder_for_a_cpu_with_more_extensions_is_refused(built, monkeypatch):
    """The manifest names the CPU the libraries were compiled for; a machine whose CPU lacks
    one of its extensions is refused when the folder is opened, with the fix; a folder for the
    generic CPU opens anywhere, and so does any folder where Linux does not list the CPU's."""
    from kokoro_tvm.runtime import model_folder as folders

    llvm, generic = model_folder(built), model_folder(built, "llvm_generic")
    built_for = json.loads((llvm / "manifest.json").read_text())["cpu"]
    assert built_for == cpu_of({"kind": "llvm", "mcpu": "host"})
    assert "avx2" in built_for["extensions"]
    assert json.loads((generic / "manifest.json").read_text())["cpu"] == {
        "mcpu": "x86-64", "extensions": []}
    folders.ModelFolder(llvm)  # this machine built it
    monkeypatch.setattr(cpu, "host_cpu_extensions",
                        lambda: set(built_for["extensions"]) - {"avx2", "fma"})
    with pytest.raises(folders.ModelFolderError) as refused:
        folders.ModelFolder(llvm)
    assert (f"code for the CPU {built_for['mcpu']} may use avx2, fma, which this machine's "
            "CPU lacks") in str(refused.value)
    assert "mcpu: x86-64-v3 runs on every x86-64 CPU with AVX2 and FMA" in str(refused.value)
    folders.ModelFolder(generic)
    monkeypatch.setattr(cpu, "host_cpu_extensions", lambda: None)
    folders.ModelFolder(llvm)


@pytest.fixture(scope="module")
def aarch64_python(aarch64_env):
    """Debian's arm64 Python under qemu-user with a runtime-only TVM."""
    return str(aarch64_env / "python")


@pytest.mark.parametrize("name", COMPONENT_NAMES)
def test_aarch64_library_runs_under_emulation_and_matches_pytorch(other_built, aarch64_python,
                                                                  tmp_path, name):
    """Each component's aarch64 library (the tir_vec LSTMs, masked InstanceNorm,
    conv_transpose included) under qemu against PyTorch, with validation's own bars: the
    functions chained from the example inputs, each against PyTorch's on the same inputs (tight
    where validation judges it), and the chain's spectral outputs (the decoder's waveform)
    against PyTorch's chain. Each function runs once: the decoder's body takes 35 s here."""
    import torch

    from kokoro_tvm.components import probe_inputs
    from kokoro_tvm.measure.metrics import (
        TIGHT_RELATIVE,
        spectral_metrics,
        tight_metrics,
    )
    from kokoro_tvm.model.components import TORCH_COMPONENTS, run_function, run_reference
    from kokoro_tvm.model.kmodel import load_kmodel

    manifest = json.loads((other_built / "results/manifest/aarch64.json").read_text())
    entry = min((e for e in manifest["libraries"] if e["component"] == name),
                key=lambda e: e["bucket"])
    kmodel = load_kmodel(other_built / paths.ASSET_CONFIG, other_built / paths.ASSET_WEIGHTS,
                         disable_complex=True)
    component = TORCH_COMPONENTS[name]
    inputs = component.example_inputs(kmodel, entry["bucket"], 0)
    ref = {k: v.numpy() for k, v in run_reference(kmodel, name, inputs).items()}

    def run(function: str, values: dict[str, np.ndarray]) -> list[np.ndarray]:
        np.savez(tmp_path / "in.npz", **values)
        subprocess.run([aarch64_python, "-m", "kokoro_tvm.runtime.bare", "--library",
                        str(other_built / entry["library"]),
                        "--params", str(other_built / paths.PARAMS.format(component=name)),
                        "--function", function, "--inputs", str(tmp_path / "in.npz"),
                        "--out", str(tmp_path / "out.npz")],
                       check=True, cwd=REPO, env={"PYTHONPATH": str(REPO)}, timeout=900)
        outs = np.load(tmp_path / "out.npz")
        return [outs[f"arr_{i}"] for i in range(len(outs.files))]

    chained = {k: v.numpy() for k, v in inputs.items()}
    for fn in component.functions:
        outs = run(fn.name, {i: chained[i] for i in fn.inputs})
        if fn.tight:
            want = run_function(kmodel, name, fn,
                                {i: torch.from_numpy(chained[i]) for i in fn.inputs})
            for out_name, out in zip(fn.outputs, outs):
                metrics = tight_metrics(out, want[out_name].numpy(), TIGHT_RELATIVE)
                assert metrics["relative_error"]["passed"], (fn.name, out_name, metrics)
        chained.update(zip(fn.outputs, outs))
    if component.spectral_outputs:
        probes = [run_reference(kmodel, name, nudged) for nudged in probe_inputs(name, inputs)]
        for out_name in component.spectral_outputs:
            metrics = spectral_metrics(chained[out_name], ref[out_name],
                                       np.stack([probe[out_name].numpy() for probe in probes]))
            assert all(m["passed"] for m in metrics.values() if "passed" in m), metrics


@pytest.mark.parametrize("files, cores", [
    ({"cpu.max": "150000 100000\n"}, 2),  # cgroup v2, 1.5 CPUs: rounded up
    ({"cpu.max": "max 100000\n"}, None),  # v2 without a quota
    ({"cpu/cpu.cfs_quota_us": "100000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),  # v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({}, None),  # no cgroup file system
])
def test_threads_stay_within_a_containers_cpu_quota(tmp_path, monkeypatch, files, cores):
    """A container limited to fewer CPUs than the host has runs that many threads (rounded
    up); without a quota, every core its affinity allows."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(cpu.os, "sched_getaffinity", lambda pid: set(range(64)))
    assert cpu.usable_cores(tmp_path) == (64 if cores is None else cores)
