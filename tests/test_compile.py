"""Every component through export -> import -> specialize -> lower -> JSON round trip -> build
-> validate.

Tiny random Kokoro (tests/data/tiny.yaml), buckets T=16 / F=16, host CPU target. Also: the
library holds code only, one import serves every bucket, signatures match the registry, and
the patches reproduce Kokoro where they claim to.
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import tvm
import tvm_ffi

from kokoro_tvm.abi import ALIGN_FUNCTION, FRAME_TOKEN, NOISE_FUNCTION, NOISE_INPUTS
from kokoro_tvm.compile.build import build_library
from kokoro_tvm.compile.lower import lower
from kokoro_tvm.compile.relax import import_programs
from kokoro_tvm.compile.specialize import length_vars, specialize
from kokoro_tvm.compile.targets import make_target
from kokoro_tvm.components import ALIGNED_INPUTS, token_axis, valid_length
from kokoro_tvm.measure.validate import run_library, validate_component
from kokoro_tvm.model.components import (
    TORCH_COMPONENTS,
    export_component,
    reference_values,
    run_reference,
)
from kokoro_tvm.model.patches import PATCHES, merged_noise, noise_weight, patched, spread_noise
from kokoro_tvm.model.wrappers import DecoderWrapper, TextEncoderWrapper
from kokoro_tvm.stages.common import load_ir

BUCKET, OTHER_BUCKET = 16, 8
TARGET = {"kind": "llvm", "mcpu": "host", "num-cores": 2}
MIB = 1 << 20

pytestmark = pytest.mark.filterwarnings("ignore")


def lstm_of(name: str) -> str:
    return "unroll" if TORCH_COMPONENTS[name].has_lstm else "none"


@pytest.fixture(scope="module")
def target():
    return make_target(TARGET)


@pytest.fixture(scope="module", params=sorted(TORCH_COMPONENTS))
def built(request, tiny_kmodel, target, tmp_path_factory):
    """One component's artifacts at BUCKET, the build continuing from the JSON-loaded module."""
    name = request.param
    folder = tmp_path_factory.mktemp(name)
    mod, params = import_programs(export_component(tiny_kmodel, name), lstm_of(name))
    lowered = lower(specialize(mod, BUCKET), target)
    (folder / "lowered.json").write_text(tvm.ir.save_json(lowered))
    loaded = load_ir(folder / "lowered.json")  # as the build stage reads it
    so_path, params_npz = folder / f"b{BUCKET}.so", folder / "params.npz"
    info = build_library(loaded, target, so_path)
    np.savez(params_npz, **params)
    return SimpleNamespace(name=name, mod=mod, params=params, lowered=lowered, loaded=loaded,
                           info=info, so_path=so_path, params_npz=params_npz)


def test_lowered_module_survives_json(built):
    assert tvm_ffi.structural_equal(built.loaded, built.lowered)


def test_library_matches_pytorch(built, tiny_kmodel):
    env = run_reference(tiny_kmodel, built.name,
                        TORCH_COMPONENTS[built.name].example_inputs(tiny_kmodel, BUCKET, 0))
    result = validate_component(built.name, BUCKET, built.so_path, built.params_npz,
                                reference_values(tiny_kmodel, built.name, env))
    assert result["passed"], json.dumps(result["metrics"], indent=1)
    json.dumps(result)  # the validate stage writes it as JSON


def test_library_holds_no_weights(built):
    params_bytes = sum(a.nbytes for a in built.params.values())
    assert built.info["embedded_constant_bytes"] < 64 * 1024  # STFT kernels, position ids
    assert built.info["library_bytes"] == built.so_path.stat().st_size
    # Tiny bert's weights (0.2 MB) are smaller than any code; elsewhere weights dominate.
    assert built.info["library_bytes"] < max(params_bytes / 4, 4 * MIB)


def test_signature_matches_registry(built):
    """The component's functions, and those lowering adds: ``align`` where an input is gathered
    from tokens into frames (f0n, decoder), ``noise`` where the noise is an input (decoder)."""
    functions = built.info["functions"]
    component = TORCH_COMPONENTS[built.name]
    added = ([ALIGN_FUNCTION] if set(component.inputs) & set(ALIGNED_INPUTS) else []) + (
        [NOISE_FUNCTION] if set(NOISE_INPUTS) <= set(component.inputs) else [])
    assert added == {"f0n": [ALIGN_FUNCTION], "decoder": [ALIGN_FUNCTION, NOISE_FUNCTION]}.get(
        built.name, [])
    assert sorted(functions) == sorted([f.name for f in component.functions] + added)
    for fn in component.functions:
        signature = functions[fn.name]
        assert [i["name"] for i in signature["inputs"]] == list(fn.inputs)
        assert len(signature["outputs"]) == len(fn.outputs)
        assert set(signature["weights"]) <= set(built.params)
    used = {w for signature in functions.values() for w in signature["weights"]}
    assert used == set(built.params), "every stored weight is some function's input"


def test_align_gathers_token_features_into_frames(built):
    """The library's align (f0n's en from duration's d, the decoder's asr from the text
    encoder's t_en) at two token counts, the source's token axis being symbolic: frame f holds
    token frame_token[f]'s features, padding frames (-1) zeros."""
    aligned = [i for i in TORCH_COMPONENTS[built.name].inputs if i in ALIGNED_INPUTS]
    if not aligned:
        assert ALIGN_FUNCTION not in built.info["functions"]
        return
    (name,) = aligned
    source_name = ALIGNED_INPUTS[name]
    (frame_token,) = built.info["functions"][ALIGN_FUNCTION]["inputs"][1:]
    assert frame_token == {"name": FRAME_TOKEN, "shape": [BUCKET], "dtype": "int32"}
    channels = built.info["functions"][ALIGN_FUNCTION]["outputs"][0]["shape"][1]
    rng = np.random.default_rng(0)
    for tokens in (5, 12):
        shape = (1, tokens, channels) if token_axis(source_name) == 1 else (1, channels, tokens)
        source = rng.standard_normal(shape).astype(np.float32)
        index = np.full(BUCKET, -1, np.int32)
        index[:BUCKET - 3] = np.sort(rng.integers(0, tokens, BUCKET - 3))
        (out,) = run_library(built.so_path, built.params_npz, ALIGN_FUNCTION,
                             {source_name: source, FRAME_TOKEN: index})
        by_channel = source[0].T if token_axis(source_name) == 1 else source[0]
        expected = np.zeros((1, channels, BUCKET), np.float32)
        expected[0, :, :BUCKET - 3] = by_channel[:, index[:BUCKET - 3]]
        np.testing.assert_array_equal(out, expected)


def test_one_import_serves_every_bucket(built, tiny_kmodel):
    """The import keeps one symbolic length per function and our ops as placeholders;
    specialized, the module takes and returns exactly a bucket's shapes, at either bucket."""
    from kokoro_tvm.compile.build import signature
    from kokoro_tvm.compile.specialize import DEFERRED

    assert len(length_vars(built.mod)) >= 1
    assert (DEFERRED in built.mod.script(show_meta=False)) == (
        built.name in ("duration", "text_encoder", "f0n", "decoder"))
    component = TORCH_COMPONENTS[built.name]
    for bucket in (BUCKET, OTHER_BUCKET):
        specialized = specialize(built.mod, bucket)
        assert not length_vars(specialized)
        assert DEFERRED not in specialized.script(show_meta=False)
        env = run_reference(tiny_kmodel, built.name,
                            component.example_inputs(tiny_kmodel, bucket, 0))
        for fn in component.functions:
            found = signature(specialized)[fn.name]
            assert [tuple(i["shape"]) for i in found["inputs"]] == [
                tuple(env[i].shape) for i in fn.inputs], (fn.name, bucket)
            assert [tuple(o["shape"]) for o in found["outputs"]] == [
                tuple(env[o].shape) for o in fn.outputs], (fn.name, bucket)


@pytest.mark.parametrize("name", ["duration", "decoder"])
def test_specialized_module_is_the_static_import(tiny_kmodel, name):
    """The symbolic import bound to a bucket lowers to the module a static export at that
    bucket lowers to: the same kernels, so one import per component costs the libraries
    nothing (duration: the packed LSTMs; decoder: the masked norms and the resampling)."""
    from kokoro_tvm.model.components import _Bound, method

    component = TORCH_COMPONENTS[name]
    env = run_reference(tiny_kmodel, name, component.example_inputs(tiny_kmodel, BUCKET, 0))
    wrapper = component.wrapper(tiny_kmodel).eval()
    with patched(component.patches), torch.no_grad():
        static = {fn.name: torch.export.export(_Bound(wrapper, method(fn)),
                                               tuple(env[i] for i in fn.inputs),
                                               strict=False).run_decompositions()
                  for fn in component.functions}
    target = make_target(TARGET)
    from_static = lower(specialize(import_programs(static, lstm_of(name))[0], BUCKET), target)
    symbolic = import_programs(export_component(tiny_kmodel, name), lstm_of(name))[0]
    assert length_vars(symbolic)
    from_symbolic = lower(specialize(symbolic, BUCKET), target)
    assert tvm_ffi.structural_equal(from_symbolic.without_attr("kokoro_tvm.ir_lines"),
                                    from_static.without_attr("kokoro_tvm.ir_lines"))


@pytest.mark.parametrize("name", ["decoder", "duration"])
def test_export_archive_keeps_the_graph_and_leaves_the_weights_out(tiny_kmodel, name, tmp_path):
    """The export stage's archive stores placeholder parameters (the params stage carries the
    weights once per component): it imports into the same Relax module as the archive with the
    weights, and is a fraction of the weights' size. The decoder has both functions; duration
    a packed LSTM, whose import depends on the weights' layout."""
    from torch.export.pt2_archive._package import package_pt2

    from kokoro_tvm.stages.common import load_programs, save_programs

    with_weights, placeholders = tmp_path / "weights.pt2", tmp_path / "placeholders.pt2"
    programs = export_component(tiny_kmodel, name)
    package_pt2(str(with_weights), exported_programs=programs)
    weight_bytes = sum(v.numel() * v.element_size() for p in programs.values()
                       for v in p.state_dict.values())
    save_programs(programs, placeholders)  # replaces the programs' parameters
    assert placeholders.stat().st_size < 0.2 * weight_bytes < with_weights.stat().st_size
    imported = [import_programs(load_programs(path), lstm_of(name))[0].script(show_meta=False)
                for path in (with_weights, placeholders)]
    assert imported[0] == imported[1]


def test_archive_loads_alike_with_type_hints_cached(tiny_kmodel, tmp_path):
    """load_programs (typing's answers cached while torch deserializes) reads the same programs
    as torch's own loader, and leaves typing as it found it; the cache answers as typing does,
    and asks typing again for what it cannot key."""
    import typing

    from torch.export.pt2_archive._package import load_pt2

    from kokoro_tvm.stages.common import load_programs, save_programs, type_hints_cached

    archive = tmp_path / "bert.pt2"
    save_programs(export_component(tiny_kmodel, "bert"), archive)
    original = typing.get_type_hints
    cached = load_programs(archive)
    plain = dict(load_pt2(str(archive)).exported_programs)
    assert typing.get_type_hints is original
    assert cached.keys() == plain.keys()
    for name, program in plain.items():
        assert cached[name].graph_module.code == program.graph_module.code
        assert str(cached[name].graph_signature) == str(program.graph_signature)
        assert {k: (v.shape, v.stride()) for k, v in cached[name].state_dict.items()} == {
            k: (v.shape, v.stride()) for k, v in program.state_dict.items()}
    with type_hints_cached():
        assert typing.get_type_hints is not original
        assert typing.get_type_hints(SimpleNamespace) == original(SimpleNamespace)
        hints = typing.get_type_hints(load_programs)
        assert hints == original(load_programs) and hints
        assert typing.get_type_hints(load_programs) is hints
        unhashable = _Unhashable()
        assert typing.get_type_hints(unhashable) == original(unhashable) == {"size": int}


class _Unhashable:
    __hash__ = None
    size: int


_FAULTS_OF_REUSE = """
import ctypes, resource, sys
from kokoro_tvm.stages.common import keep_freed_memory
if sys.argv[1] == "keep":
    keep_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size = 64 << 20  # an activation of a long decoder pass; glibc maps anything over 32 MB alone
def use_once():
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
use_once()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    use_once()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_export_process_reuses_freed_blocks_without_page_faults():
    """keep_freed_memory (the export stage's process): a large block freed and allocated again
    comes back from the heap, its pages already mapped; by default glibc unmaps it and every
    page faults in again, zeroed by the kernel (docs/build-time.md)."""
    import subprocess
    import sys

    faults = {mode: int(subprocess.run([sys.executable, "-c", _FAULTS_OF_REUSE, mode],
                                       check=True, capture_output=True, text=True).stdout)
              for mode in ("default", "keep")}
    pages = 4 * (64 << 20) // 4096
    assert faults["default"] > pages // 2, faults
    assert faults["keep"] < pages // 100, faults


def test_example_inputs_fit_the_bucket(tiny_kmodel):
    """Every component's inputs: each length axis is the bucket's (times its positions per
    valid one), the mask leaves some padding, and token ids are Kokoro's framing."""
    for name, component in TORCH_COMPONENTS.items():
        inputs = component.example_inputs(tiny_kmodel, BUCKET, 0)
        first = component.functions[0]
        assert set(first.inputs) <= set(inputs), name
        for key, (axis, per_valid) in component.length_axes.items():
            if key in inputs:
                assert inputs[key].shape[axis] == BUCKET * per_valid, (name, key)
        assert 1 <= valid_length(name, inputs) < BUCKET, name
        if "input_ids" in inputs:
            ids = inputs["input_ids"][0]
            mask = inputs["text_mask"] if "text_mask" in inputs else inputs["attention_mask"] == 0
            valid = int((~mask[0]).sum())
            assert ids.shape == (BUCKET,) and ids[0] == 0 and ids[valid - 1] == 0
            assert (ids[valid:] == 0).all() and (ids[1:valid - 1] > 0).all()
        if "f0" in inputs:  # Kokoro's own features (F0 and N at twice the frame rate)
            assert inputs["asr"].shape[-1] == BUCKET
            assert inputs["f0"].shape == inputs["n"].shape == (1, 2 * BUCKET)
            assert torch.isfinite(inputs["f0"]).all() and torch.isfinite(inputs["asr"]).all()
            valid = int((~inputs["frame_mask"]).sum())
            assert BUCKET // 2 <= valid <= BUCKET


# ----------------------------------------------------------------------------------------------
# The patches.
# ----------------------------------------------------------------------------------------------

def test_patched_restores_originals():
    from kokoro.custom_stft import CustomSTFT
    from kokoro.istftnet import SineGen

    before = (torch.nn.utils.rnn.pack_padded_sequence, SineGen.forward, CustomSTFT.transform)
    with patched(tuple(PATCHES)):
        assert SineGen.forward is not before[1]
    after = (torch.nn.utils.rnn.pack_padded_sequence, SineGen.forward, CustomSTFT.transform)
    assert after == before
    with pytest.raises(RuntimeError), patched(tuple(PATCHES)):
        raise RuntimeError("restored on error too")
    assert SineGen.forward is before[1]


def test_decoder_split_and_noise_inputs_reproduce_kokoro(tiny_kmodel):
    """Kokoro's decoder drawing its own noise == our source+body fed the same draws, merged
    into the one channel the libraries take."""
    inputs = TORCH_COMPONENTS["decoder"].example_inputs(tiny_kmodel, BUCKET, 3)
    weight = noise_weight(tiny_kmodel)
    with torch.no_grad():
        torch.manual_seed(7)
        expected = tiny_kmodel.decoder(inputs["asr"], inputs["f0"], inputs["n"], inputs["s"])
        torch.manual_seed(7)  # the draws Kokoro makes, in its order
        phase_noise = torch.rand(inputs["phase_noise"].shape)
        # Kokoro's randn_like fills a [1, samples, harmonics] view of [1, harmonics, samples]
        # memory, and torch draws different values into strided memory.
        batch, samples, _ = inputs["sine_noise"].shape
        harmonics = phase_noise.shape[1]
        draws = torch.empty(batch, harmonics, samples).transpose(1, 2).normal_()
        with patched(TORCH_COMPONENTS["decoder"].patches):
            got = DecoderWrapper(tiny_kmodel)(inputs["asr"], inputs["f0"], inputs["n"],
                                              inputs["s"], phase_noise,
                                              merged_noise(draws, weight))
    torch.testing.assert_close(got, expected[:, 0], rtol=0, atol=1e-5 * expected.abs().max())


def test_merged_noise_is_standard_normal_and_spreads_back():
    """One N(0, 1) draw per sample stands for Kokoro's per-harmonic ones (the libraries take
    that; numpy draws it), and spreading it over the harmonics gives draws that Kokoro's linear
    layer merges into it again."""
    weight = torch.tensor([[0.3, -1.2, 0.05, 0.7, 0.0, -0.4, 2.0, 0.1, -0.9]])
    draws = torch.randn(1, 400_000, 9, generator=torch.Generator().manual_seed(0))
    merged = merged_noise(draws, weight)
    assert merged.shape == (1, 400_000, 1)
    assert abs(float(merged.mean())) < 0.01 and abs(float(merged.std()) - 1) < 0.01
    spread = spread_noise(merged, weight)
    assert spread.shape == draws.shape
    torch.testing.assert_close(merged_noise(spread, weight), merged)
    torch.testing.assert_close(spread @ weight.T, merged * weight.norm())


def test_packed_lstm_patch_is_kokoro_at_full_length(tiny_kmodel):
    """With every token valid, the patched wrapper is Kokoro's own packed code (tolerance 1e-6
    abs); tests/test_lstm.py covers shorter lengths."""
    inputs = TORCH_COMPONENTS["text_encoder"].example_inputs(tiny_kmodel, BUCKET, 0)
    ids, mask = inputs["input_ids"], torch.zeros_like(inputs["text_mask"])
    with torch.no_grad():
        expected = tiny_kmodel.text_encoder(ids, torch.tensor([BUCKET]), mask)
        with patched(TORCH_COMPONENTS["text_encoder"].patches):
            got = TextEncoderWrapper(tiny_kmodel)(ids, mask)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_make_target_resolves_host():
    target = make_target(TARGET)
    assert target.kind.name == "llvm" and str(target.attrs["mcpu"]) not in ("", "host", "native")
    assert int(target.attrs["num-cores"]) == 2


def test_specialize_refuses_a_function_with_two_lengths():
    """One symbolic length per function is what the bucket binds; a second would be left
    unbound."""
    from tvm import relax

    n, m = tvm.tirx.Var("n", "int64"), tvm.tirx.Var("m", "int64")
    x = relax.Var("x", relax.TensorType((n, m), "float32"))
    with pytest.raises(ValueError, match="2 symbolic lengths"):
        specialize(tvm.IRModule({"main": relax.Function([x], x)}), BUCKET)
