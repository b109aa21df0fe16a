"""Macs from the Linux build machine (docs/other-targets.md, Macs): the macos_arm64 (CPU) and
metal (Apple GPU) targets, checked as far as Linux can check them. No Mac runs here, so nothing
in this file says the libraries work on one; tools/mac_check is what a Mac owner runs.

- Every library of both targets (the tiny build, every component) is an arm64 Mach-O dylib for
  macOS 11 or later that depends on libSystem alone, carries a signature whose page hashes
  match, and whose packed Relax VM executable deserializes with TVM's loader and calls only
  functions the library or TVM's runtime has (compile/macho.py); a changed byte, or an ELF file,
  is named as such.
- Every Metal kernel has no double, stays within Metal's buffer, threadgroup-memory and thread
  limits, and is defined under each name the host code launches (compile/metal.py); source that
  breaks one of these is named.
- What replaces float64 on Metal matches float64: sin and cos reduced in float32 up to phases of
  1e6, and the sine generator's phase summed in fixed point.
- The runtime here refuses both folders in one line naming the machine they are for, and a
  Metal device is refused where TVM has none.
- `snakemake -n` plans both targets' model folders.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
from conftest import dry_run, model_folder
from tvm import relax, te

from kokoro_tvm import paths
from kokoro_tvm.compile import fastmath, macho, metal
from kokoro_tvm.compile.gpu.without_float64 import fixed_point_cumsum
from kokoro_tvm.facts import COMPONENT_NAMES

MAC_TARGETS = ("macos_arm64", "metal")


def _libraries(other_built, target: str) -> list:
    manifest = json.loads((other_built / f"results/manifest/{target}.json").read_text())
    return [other_built / entry["library"] for entry in manifest["libraries"]]


@pytest.mark.parametrize("target", MAC_TARGETS)
def test_every_library_is_one_a_mac_loads(other_built, target):
    libraries = _libraries(other_built, target)
    assert len(libraries) == len(COMPONENT_NAMES)
    for library in libraries:
        assert macho.library_problems(library) == []
        import lief

        binary = lief.MachO.parse(str(library)).at(0)
        packed = macho.packed_modules(binary)
        assert set(packed) == ({"relax.VMExecutable", "metal"} if target == "metal"
                               else {"relax.VMExecutable"})
        if target == "metal":  # kernels launched by name, each defined in the Metal source
            launched = macho.launched_kernels(binary, library.read_bytes())
            defined = metal.kernels(packed["metal"].decode("utf-8", "replace"))
            assert launched and {name.decode() for name in launched} <= set(defined)


def test_a_changed_or_foreign_library_is_named(other_built, tmp_path):
    (library,) = [lib for lib in _libraries(other_built, "macos_arm64") if "bert" in str(lib)]
    changed = tmp_path / "changed.so"
    data = bytearray(library.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the signed code, before the signature
    changed.write_bytes(data)
    problems = macho.library_problems(changed)
    assert any("does not match its signed hash" in p for p in problems), problems
    with pytest.raises(macho.MachOError, match="signed hash"):
        macho.check_library(changed)
    (elf,) = [lib for lib in _libraries(other_built, "aarch64") if "bert" in str(lib)]
    assert macho.library_problems(elf) == [f"{elf} is not a Mach-O file"]


def test_a_vm_call_the_library_lacks_is_named(other_built, monkeypatch):
    import lief

    (library,) = [lib for lib in _libraries(other_built, "metal") if "bert" in str(lib)]
    binary = lief.MachO.parse(str(library)).at(0)
    assert macho.vm_problems(binary, library.read_bytes()) == []
    monkeypatch.setattr(type(binary), "has_symbol", lambda self, name: False)
    (problem,) = macho.vm_problems(binary, library.read_bytes())
    assert problem.startswith("its VM calls functions it lacks: ") and "fused_" in problem


def test_metal_source_beyond_the_limits_is_named():
    buffers = ",\n".join(f"  device float* a{i} [[ buffer({i}) ]]" for i in range(32))
    source = (f"kernel void wide_kernel({buffers}) {{\n}}\n"
              "kernel void shared_kernel(device float* x [[ buffer(0) ]]) {\n"
              "  threadgroup float big[8193];\n  double y = 0;\n}\n")
    problems = metal.source_problems(source, {"wide_kernel", "absent_kernel"})
    assert problems == [
        "float64 (double) arithmetic, which Apple GPUs lack",
        "wide_kernel takes 32 buffers (Metal allows 31)",
        "shared_kernel uses 32772 bytes of threadgroup memory (Metal allows 32768)",
        "the host launches kernels the source lacks: absent_kernel"]
    assert metal.source_problems(source.replace("double", "float").replace("8193", "8192")
                                 .replace("32 ", "31 "), {"shared_kernel"}) == [
        "wide_kernel takes 32 buffers (Metal allows 31)"]


@pytest.mark.parametrize("function, reference", [(fastmath.sin, np.sin), (fastmath.cos, np.cos)])
def test_float32_reduction_matches_float64_up_to_large_phases(function, reference):
    """Metal's sin and cos (no float64 to reduce the argument in) stay within 2e-7 of the exact
    value for phases up to 1e6 (the sine generator's), as the float64 reduction does (1e-7)."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-10, 10, 50000), rng.uniform(-1e6, 1e6, 50000),
                        rng.uniform(-1e-3, 1e-3, 1000)]).astype(np.float32)
    placeholder = te.placeholder(x.shape, "float32")
    errors = {}
    for wide in (True, False):
        out = te.compute(x.shape, lambda i: function(placeholder[i], wide=wide))
        kernel = tvm.compile(te.create_prim_func([placeholder, out]), target="llvm")
        got = tvm.runtime.tensor(np.empty_like(x))
        kernel(tvm.runtime.tensor(x), got)
        errors[wide] = float(np.abs(got.numpy() - reference(x.astype(np.float64))).max())
    assert errors[True] < 1e-7 and errors[False] < 2e-7, errors


def test_fixed_point_phase_sum_matches_float64():
    """The sine generator's float64 cumsum, rewritten for Metal: within one float32 rounding of
    the float64 sum (what PyTorch's CPU cumsum gives), where a float32 sum drifts further."""
    from tvm.script import relax as R

    steps = 4096  # the longest bucket's phase steps (2 per frame)

    @tvm.script.ir_module
    class Phase:
        @R.function
        def main(rad: R.Tensor((1, steps, 9), "float32")):
            with R.dataflow():
                wide = R.astype(rad, "float64")
                summed = R.cumsum(wide, axis=1)
                phase = R.astype(summed, "float32")
                R.output(phase)
            return phase

    rewritten = fixed_point_cumsum(Phase)
    assert "float64" not in rewritten.script()
    rad = np.random.default_rng(0).random((1, steps, 9), dtype=np.float32)
    exact = np.cumsum(rad.astype(np.float64), axis=1)
    vm = relax.VirtualMachine(tvm.compile(rewritten, target="llvm"), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(rad)).numpy()
    ulp = np.spacing(exact.astype(np.float32))
    assert np.all(np.abs(got - exact) <= ulp)  # one rounding, as float64 -> float32
    float32_sum = np.cumsum(rad, axis=1, dtype=np.float32)
    assert np.abs(float32_sum - exact).max() > 4 * np.abs(got - exact).max()


@pytest.mark.parametrize("target", MAC_TARGETS)
def test_the_runtime_here_refuses_a_mac_folder_in_one_line(other_built, target):
    from kokoro_tvm.runtime.engine import TvmEngine
    from kokoro_tvm.runtime.model_folder import ModelFolderError

    folder = model_folder(other_built, target)
    manifest = json.loads((folder / paths.MODEL_MANIFEST).read_text())
    assert (manifest["architecture"], manifest["system"]) == ("aarch64", "macos")
    assert len(manifest["libraries"]) == len(COMPONENT_NAMES)
    assert {entry["device"] for entry in manifest["libraries"]} == {
        "metal" if target == "metal" else "cpu"}
    with pytest.raises(ModelFolderError) as refused:
        TvmEngine(folder)
    message = str(refused.value)
    assert "\n" not in message
    assert "code for macOS on aarch64 cannot run on this Linux x86_64 machine" in message


def test_no_metal_device_here_is_said():
    from kokoro_tvm.runtime import metal as metal_runtime

    assert metal_runtime.metal_available() is False
    with pytest.raises(metal_runtime.MetalError, match="need a Mac with Apple silicon"):
        metal_runtime.metal_device()


def test_snakemake_plans_both_mac_folders(tmp_path):
    """Both folders as file targets of the same DAG, without the PyTorch reference their
    skipped validation would not read."""
    jobs = dry_run(tmp_path, *(paths.DIST.format(target=t) for t in MAC_TARGETS))
    planned = {job["wildcards"].get("target") for job in jobs if job["rule"] == "build"}
    assert planned == set(MAC_TARGETS)
    rules = {job["rule"] for job in jobs}
    assert rules >= {"lower", "build", "validate", "manifest", "dist"}
    assert "reference" not in rules  # their validation is skipped here: PyTorch is not asked


def test_zig_links_mac_libraries_reproducibly(other_built, tmp_path):
    """A second link of the same objects gives the same bytes (no path, time or random id of
    the building machine in the library or its signature)."""
    from kokoro_tvm.compile.build import build_library
    from kokoro_tvm.compile.devices import cross_linker
    from kokoro_tvm.compile.targets import make_target
    from kokoro_tvm.stages.common import load_ir

    options = {"kind": "llvm", "mtriple": "aarch64-apple-macos11", "mcpu": "apple-m1"}
    lowered = load_ir(other_built / paths.LOWERED.format(
        target="macos_arm64", component="bert", lstm="none", bucket=16))
    built = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        out = tmp_path / name / "b16.so"
        build_library(lowered, make_target(options), out, cross_linker(options), "macos")
        built.append(out.read_bytes())
    assert built[0] == built[1]
