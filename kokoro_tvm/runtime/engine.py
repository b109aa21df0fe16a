"""Speaking with the compiled libraries: Kokoro's forward pass, bucketed, with no PyTorch.

For one chunk of T tokens the engine picks, per component, the smallest bucket that fits, pads
with zeros and masks, runs bert -> duration -> (host: durations) -> text_encoder -> f0n
(``prosody``) -> decoder (``decode``, also on the first frames alone: a stream's lead), and
trims the audio to SAMPLES_PER_FRAME samples per valid frame. The token side's features stay
on the device: the f0n and decoder libraries gather them into frames themselves (their
ALIGN_FUNCTION), from the token of each frame, which the host computes from the durations.
Libraries and weights come from a model folder (runtime/model_folder.py), each file checked
against its sha256 when first used. They run on the device the folder's manifest names (the
CPU, or the first CUDA GPU, where each component's weights are uploaded and prepared once).
"""
from __future__ import annotations

import contextlib
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from kokoro_tvm import paths
from kokoro_tvm.abi import (
    ALIGN_FUNCTION,
    FRAME_TOKEN,
    NOISE_FUNCTION,
    NOISE_INPUTS,
    NOISE_KEY,
    noise_key,
)
from kokoro_tvm.components import ALIGNED_INPUTS, COMPONENTS
from kokoro_tvm.facts import (
    COMPONENT_NAMES,
    F0_PER_FRAME,
    HARMONICS,
    LSTM_METHOD_NAMES,
    SAMPLES_PER_FRAME,
    STYLE_DIM,
)
from kokoro_tvm.runtime.devices import device, library_types
from kokoro_tvm.runtime.model_folder import ModelFolder, ModelFolderError, build_command
from kokoro_tvm.runtime.speech import ChunkTooLong
from kokoro_tvm.runtime.transfers import Transfers


class BucketMissing(ChunkTooLong, ModelFolderError):
    """No bucket fits: the speaker splits the chunk, and reports this if it cannot."""


@dataclass
class Buckets:
    """One component's libraries by bucket, loaded on first use."""

    component: str
    entries: dict[int, dict[str, Any]]
    folder: ModelFolder
    weights: Any  # runtime/library.Weights, or its WebGPU form
    allocator: str = "pooled"
    transfers: Transfers = field(default_factory=Transfers)
    loaded: dict[int, Any] = field(default_factory=dict)

    def fit(self, size: int) -> int:
        fitting = [b for b in self.entries if b >= size]
        if not fitting:
            largest = max(self.entries)
            wanted = 1 << (size - 1).bit_length()
            raise BucketMissing(
                f"{self.component} needs a bucket of at least {size} (largest in "
                f"{self.folder.path}: {largest}); add {wanted} to buckets.{self.component} in "
                f"config.yaml and rebuild the folder: {build_command(self.folder.target)}")
        return min(fitting)

    def library(self, bucket: int):
        if bucket not in self.loaded:
            entry = self.entries[bucket]
            library_type, _ = library_types(entry["device"])
            self.loaded[bucket] = library_type(self.folder.file(entry["library"]), self.weights,
                                               entry["transforms"], self.allocator,
                                               self.transfers)
        return self.loaded[bucket]

    def run(self, bucket: int, function: str, inputs: dict[str, object]) -> list[np.ndarray]:
        """``function`` of the library at ``bucket`` (a size ``fit`` chose)."""
        return self.library(bucket)(function, inputs)

    def on_device(self, bucket: int, function: str, inputs: dict[str, object]) -> list:
        """As ``run``, the outputs left on the device."""
        return self.library(bucket).on_device(function, inputs)

    def aligned(self, bucket: int, source, frame_token: np.ndarray) -> dict[str, object]:
        """This component's aligned input at ``bucket`` (a device tensor), from the token-side
        output ``source`` and the token of each valid frame."""
        (name,) = (i for i in COMPONENTS[self.component].inputs if i in ALIGNED_INPUTS)
        tokens = np.full(bucket, -1, np.int32)  # padding frames take no token: zeros
        tokens[:len(frame_token)] = frame_token
        (aligned,) = self.on_device(bucket, ALIGN_FUNCTION, {ALIGNED_INPUTS[name]: source,
                                                             FRAME_TOKEN: tokens})
        return {name: aligned}


def device_kind(folder: ModelFolder) -> str:
    """The kind of device the folder's libraries run on (``cpu``, ``cuda``, ``metal`` or
    ``webgpu``)."""
    kinds = {entry["device"] for entry in folder.libraries}
    if len(kinds) != 1:
        raise ModelFolderError(f"{folder.path} mixes devices {sorted(kinds)}: rebuild it with: "
                               f"{build_command(folder.target)}")
    (kind,) = kinds
    return kind


def _device(folder: ModelFolder, kernels: Sequence[Path]):
    """The device the folder's libraries run on, with cuda kernels taken from ``kernels``."""
    return device(device_kind(folder), kernels)


def buckets_within(buckets: Iterable[int], max_frames: int) -> list[int]:
    """The frame buckets a bound of ``max_frames`` keeps: those up to the first bucket that holds
    ``max_frames`` (the largest, where none does), so that a folder with coarse buckets loses
    none it needs to decode chunks of that length."""
    ordered = sorted(buckets)
    bound = next((bucket for bucket in ordered if bucket >= max_frames), ordered[-1])
    return [bucket for bucket in ordered if bucket <= bound]


def load_components(folder: ModelFolder, lstm: str | None, kernels: Sequence[Path] = (),
                    allocator: str = "pooled", max_frames: int | None = None,
                    transfers: Transfers | None = None) -> dict[str, Buckets]:
    """Each component's buckets, with the LSTM lowering ``lstm`` where built, else the fastest;
    of the components whose buckets count frames, only those ``buckets_within`` ``max_frames``
    where given; their copies counted in ``transfers``."""
    transfers = transfers or Transfers()
    if not folder.libraries:
        left_out = folder.manifest["left_out"]
        raise ModelFolderError(
            f"{folder.path} has no libraries ({len(left_out)} built for {folder.target} failed "
            f"validation against PyTorch and were left out): rebuild it with "
            f"{build_command(folder.target)} and read results/validate/{folder.target}")
    folder.check_lstm(lstm)
    device = _device(folder, kernels)
    by_component: dict[str, dict[str, dict[int, dict]]] = {}
    for entry in folder.libraries:
        by_component.setdefault(entry["component"], {}).setdefault(entry["lstm"], {})[
            entry["bucket"]] = entry
    missing = [name for name in COMPONENT_NAMES if name not in by_component]
    if missing:
        raise ModelFolderError(f"{folder.path} has no {', '.join(missing)} libraries: rebuild "
                               f"it with: {build_command(folder.target)}")
    components = {}
    for component, methods in by_component.items():
        choice = lstm if lstm in methods else next(
            (m for m in (*LSTM_METHOD_NAMES, paths.WITHOUT_LSTM) if m in methods),
            sorted(methods)[0])
        chosen = methods[choice]
        if max_frames is not None and COMPONENTS[component].axis == "frames":
            chosen = {bucket: chosen[bucket] for bucket in buckets_within(chosen, max_frames)}
        params = folder.file(next(iter(chosen.values()))["params"])
        _, weights_type = library_types(device_kind(folder))
        components[component] = Buckets(component, chosen, folder, weights_type(params, device),
                                         allocator, transfers)
    return components


def release_pooled_memory() -> None:
    """runtime/library.release_pooled_memory, imported when first needed, so that a webgpu
    folder's process loads no TVM."""
    from kokoro_tvm.runtime import library

    library.release_pooled_memory()


def _padded(values: np.ndarray, size: int, axis: int = -1) -> np.ndarray:
    """``values`` zero-padded along ``axis`` to ``size``."""
    # zeros and a copy: over ten times faster than np.pad on a long sentence's SineGen noise
    # (docs/gpu.md, CUDA speed).
    shape = list(values.shape)
    shape[axis] = size
    out = np.zeros(shape, values.dtype)
    index = [slice(None)] * values.ndim
    index[axis] = slice(0, values.shape[axis])
    out[tuple(index)] = values
    return out


Noise = Callable[[int, int], tuple[np.ndarray, np.ndarray]]
# TvmEngine's ``noise`` that has the decoder libraries draw it on their device (their
# NOISE_FUNCTION, compile/noise.py): the default where they run on a GPU.
LIBRARY_NOISE = "library"


@dataclass
class TvmProsody:
    """One chunk after f0n: what the decoder needs for any prefix of its frames (speech.Prosody)."""

    durations: np.ndarray  # frames per token, pads included
    t_en: object  # [1, 512, token bucket], the text encoder's features, on the device
    frame_token: np.ndarray  # [frames] int32, the token of each frame (the alignment)
    f0n_bucket: int
    f0: object  # [1, F0_PER_FRAME * f0n_bucket], f0n's output, on the device
    n: object  # [1, F0_PER_FRAME * f0n_bucket]
    style: object  # [1, 128], the decoder's half of the style, on the device
    seed: int
    noise: Future | None  # SineGen's draws for all the frames (Noise); None: the library's


# Gaussian noise is drawn in chunks of this many samples, each from its own stream spawned from
# the seed, by up to NOISE_THREADS threads (numpy fills arrays without the GIL): a 45 s sentence
# needs 1.2 million draws (one per sample: Kokoro's per-harmonic draws merged, model/patches.py).
# The chunking, not the thread count, fixes the values.
NOISE_CHUNK = 1 << 16
NOISE_THREADS = min(8, os.cpu_count() or 1)


def numpy_noise(seed: int, frames: int) -> tuple[np.ndarray, np.ndarray]:
    """SineGen's random draws for ``frames`` frames: initial phases U[0,1) [1, harmonics] and
    Gaussian noise [1, samples, 1]. Those for fewer frames are a prefix of these, so a chunk's
    start decoded alone (TvmEngine.decode) hears the same noise as the whole."""
    phases = np.random.default_rng(seed).random((1, HARMONICS), dtype=np.float32)
    samples = SAMPLES_PER_FRAME * frames
    noise = np.empty((1, samples, 1), np.float32)
    starts = range(0, samples, NOISE_CHUNK)
    streams = np.random.SeedSequence(seed).spawn(len(starts))

    def fill(chunk: int) -> None:
        part = noise[0, starts[chunk]:starts[chunk] + NOISE_CHUNK]
        np.random.Generator(np.random.PCG64(streams[chunk])).standard_normal(
            out=part, dtype=np.float32)

    with ThreadPoolExecutor(NOISE_THREADS) as pool:
        list(pool.map(fill, range(len(starts))))
    return phases, noise


class TvmEngine:
    """Kokoro from the compiled libraries of a model folder; see the module docstring.

    ``noise`` draws SineGen's randomness for the valid frames (padding gets zeros):
    ``numpy_noise`` (the default on a CPU) needs only numpy, ``TorchEngine.noise``
    (model/reference.py) reproduces PyTorch's draws for comparisons, and ``LIBRARY_NOISE`` (the
    default for cuda folders) has each decoder library draw it where it runs, padding included,
    so that no noise crosses to the device (docs/gpu.md, CUDA speed). webgpu folders keep
    numpy's: a seed gives them the audio it gives a CPU folder (docs/other-targets.md).
    ``allocator`` is TVM's for the libraries' calls: "pooled" keeps every bucket's activations
    once it has run (the fastest for one utterance at a time), "naive" frees them after each
    call, so that a process that runs every bucket (a server) holds the largest call's
    activations, not the sum of all (docs/serving.md, Memory). ``max_frames`` leaves out the
    frame buckets above the first that holds it (``buckets_within``): longer chunks are split
    (speech.py halves them at a clause or word boundary), which bounds each call's time and
    memory.
    """

    def __init__(self, folder: ModelFolder | str | Path, *, lstm: str | None = None,
                 noise: Noise | str | None = None, kernels: Sequence[Path] = (),
                 allocator: str = "pooled", max_frames: int | None = None):
        self.folder = folder if isinstance(folder, ModelFolder) else ModelFolder(folder)
        self._decoder_bucket: int | None = None  # the last decode's: the pool holds its calls
        self.transfers = Transfers()
        self.components = load_components(self.folder, lstm, kernels, allocator, max_frames,
                                          self.transfers)
        self.device = self.components["decoder"].weights.device
        # Where the libraries run, in words (a WebGPU adapter names itself).
        self.device_name = (self.device.describe() if hasattr(self.device, "describe")
                            else str(self.device))
        if noise is None:
            noise = LIBRARY_NOISE if device_kind(self.folder) == "cuda" else numpy_noise
        self._check_functions(noise == LIBRARY_NOISE)
        self.noise = noise
        self._background = ThreadPoolExecutor(1)
        # Seconds and host-device copies per stage, summed over calls (clear() to restart).
        self.timings: dict[str, float] = {}
        self.copies: dict[str, Transfers] = {}
        # Frames the decoder was asked for, and those it computed (each call's bucket): what
        # padding costs (docs/cpu-speed.md, Padding).
        self.decoder_frames = {"asked": 0, "computed": 0}
        with self._stage("prepare"):
            self._prepare()

    def _check_functions(self, library_noise: bool) -> None:
        """Refuses a folder whose libraries lack a function the engine calls: one built before
        the alignment (or, with ``library_noise``, the noise) moved into the libraries."""
        wanted = {name: {ALIGN_FUNCTION} for name, c in COMPONENTS.items()
                  if set(c.inputs) & set(ALIGNED_INPUTS)}
        if library_noise:
            wanted.setdefault("decoder", set()).add(NOISE_FUNCTION)
        for name, functions in wanted.items():
            for bucket, entry in self.components[name].entries.items():
                if missing := functions - set(entry["transforms"]):
                    raise ModelFolderError(
                        f"the {name} library of {self.folder.path} at bucket {bucket} lacks "
                        f"{', '.join(sorted(missing))}: it was built by an older kokoro-tvm; "
                        f"rebuild the folder with: {build_command(self.folder.target)}")

    def _prepare(self) -> None:
        """Every component's prepared weights, the largest component first, with its smallest
        bucket's library: while a transform runs, the weights as stored are resident too, and
        doing the decoder's (about 200 MB) before the others are kept lowers the peak by their
        size. It also takes this work out of the first chunk's latency."""
        def stored_bytes(buckets: Buckets) -> int:
            return buckets.weights.path.stat().st_size

        for buckets in sorted(self.components.values(), key=stored_bytes, reverse=True):
            library = buckets.library(min(buckets.entries))
            for function in library.transforms:  # those the folder's manifest names
                library.prepared(function)

    def load_all(self) -> None:
        """Every bucket's library, its weights prepared: what a server does before it takes
        requests, so that none pays a library's first use."""
        for buckets in self.components.values():
            for bucket in buckets.entries:
                library = buckets.library(bucket)
                for function in library.transforms:
                    library.prepared(function)

    def decoder_padding(self) -> float | None:
        """The share of the decoder's computed frames that were padding (None before a decode)."""
        asked, computed = self.decoder_frames["asked"], self.decoder_frames["computed"]
        return 1 - asked / computed if computed else None

    def _upload(self, value):
        """``value`` on the libraries' device (as it is if it is there already)."""
        if isinstance(value, np.ndarray):
            return self.transfers.upload(value, self.device)
        return value

    @contextlib.contextmanager
    def _stage(self, stage: str):
        """Adds the block's seconds to ``timings[stage]`` and its copies to ``copies[stage]``."""
        started, before = time.perf_counter(), replace(self.transfers)
        yield
        self.timings[stage] = self.timings.get(stage, 0.0) + time.perf_counter() - started
        self.copies.setdefault(stage, Transfers()).add(self.transfers.since(before))

    def synthesize(self, ids: list[int], ref_s: np.ndarray, speed: float, seed: int) -> np.ndarray:
        return self.decode(self.prosody(ids, ref_s, speed, seed))

    def synthesize_with_durations(self, ids: list[int], ref_s: np.ndarray, speed: float,
                                  seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Audio and the integer frame count of every token (pads included), as TorchEngine."""
        prosody = self.prosody(ids, ref_s, speed, seed)
        return self.decode(prosody), prosody.durations

    def prosody(self, ids: list[int], ref_s: np.ndarray, speed: float, seed: int) -> TvmProsody:
        """bert -> duration -> alignment -> text_encoder -> f0n on the whole chunk, with SineGen's
        noise drawn meanwhile; refuses a chunk that no decoder bucket fits before any work."""
        c = self.components
        ref_s = np.asarray(ref_s, dtype=np.float32).reshape(1, -1)
        tokens = np.array([[0, *ids, 0]], dtype=np.int64)
        n = tokens.shape[1]
        uploaded: dict[int, dict[str, object]] = {}  # each token bucket's, copied once

        def text_inputs(bucket: int) -> dict[str, object]:
            if bucket not in uploaded:
                mask = np.arange(bucket)[None, :] >= n  # True on padding, as in KModel
                uploaded[bucket] = {name: self._upload(value) for name, value in (
                    ("input_ids", _padded(tokens, bucket)), ("text_mask", mask),
                    ("attention_mask", (~mask).astype(np.int64)))}
            return uploaded[bucket]

        with self._stage("text"):
            style_decoder, style_prosody = (self._upload(half) for half in (
                ref_s[:, :STYLE_DIM], ref_s[:, STYLE_DIM:]))
            bert_bucket = c["bert"].fit(n)
            (d_en,) = c["bert"].on_device(bert_bucket, "main", text_inputs(bert_bucket))
            bucket = c["duration"].fit(n)
            if bucket != bert_bucket:  # other buckets: through the host, cut to the utterance
                d_en = _padded(self.transfers.download(d_en)[:, :, :n], bucket)
            # d_en's padding holds BERT's outputs there: duration masks it (validated on random
            # padding), so the device tensor goes in as it came out.
            (d, durations) = c["duration"].on_device(bucket, "main", {
                **text_inputs(bucket), "d_en": d_en, "s": style_prosody})
            bucket = c["text_encoder"].fit(n)
            (t_en,) = c["text_encoder"].on_device(bucket, "main", text_inputs(bucket))
            durations = self.transfers.download(durations)[0, :n]
            frames = np.maximum(np.round(durations / speed), 1).astype(np.int64)
            frame_token = np.repeat(np.arange(n, dtype=np.int32), frames)  # the alignment
            total = len(frame_token)

        # SineGen's noise is drawn on the host while f0n runs (on a GPU, at the same time).
        with self._stage("f0n"):
            bucket = c["f0n"].fit(total)
            c["decoder"].fit(total)  # a chunk too long for the decoder is refused here
            noise = (None if self.noise == LIBRARY_NOISE
                     else self._background.submit(self.noise, seed, total))
            # F0 and N stay on the device for the decoder, padding included: the decoder masks
            # its padding (validated on padding that holds more features).
            (f0, noise_n) = c["f0n"].on_device(bucket, "main", {
                **c["f0n"].aligned(bucket, d, frame_token), "s": style_prosody,
                "frame_mask": np.arange(bucket)[None, :] >= total})  # True on padding
        return TvmProsody(frames, t_en, frame_token, bucket, f0, noise_n, style_decoder, seed,
                          noise)

    def decode_frames(self, frames: int) -> int:
        """The decoder bucket that ``frames`` frames are padded to."""
        return self.components["decoder"].fit(frames)

    def decode(self, prosody: TvmProsody, frames: int | None = None) -> np.ndarray:
        """The decoder on the first ``frames`` frames of ``prosody`` alone (all by default)."""
        total = len(prosody.frame_token)
        frames = total if frames is None else min(frames, total)
        bucket = self.components["decoder"].fit(frames)
        library = self.components["decoder"].library(bucket)
        if bucket != self._decoder_bucket:
            if device_kind(self.folder) != "webgpu":  # WebGPU's buffers are no TVM pool's
                release_pooled_memory()
            self._decoder_bucket = bucket
        with self._stage("noise"):  # on the host: what f0n did not hide
            if prosody.noise is None:  # drawn by the library, on its device, whole bucket
                noise = dict(zip(NOISE_INPUTS, library.on_device(
                    NOISE_FUNCTION, {NOISE_KEY: noise_key(prosody.seed)})))
            else:
                phase_noise, sine_noise = prosody.noise.result()
                # A prefix of the chunk's noise is the noise of that many frames (numpy_noise).
                noise = dict(zip(NOISE_INPUTS, (phase_noise, _padded(
                    sine_noise[:, :SAMPLES_PER_FRAME * frames], SAMPLES_PER_FRAME * bucket,
                    axis=1))))

        with self._stage("decoder"):
            self.decoder_frames["asked"] += frames
            self.decoder_frames["computed"] += bucket
            f0, n = prosody.f0, prosody.n
            if bucket != prosody.f0n_bucket:  # a prefix in a smaller bucket: cut on the host
                steps, bucket_steps = F0_PER_FRAME * frames, F0_PER_FRAME * bucket
                f0, n = (_padded(self.transfers.download(x)[:, :steps], bucket_steps)
                         for x in (f0, n))
            # Copied once for both functions.
            common = {"f0": self._upload(f0),
                      "frame_mask": self._upload(np.arange(bucket)[None, :] >= frames)}
            # The harmonic source stays on the device for the body (on a GPU, its 22 channels
            # of 245,761 STFT frames, 21.6 MB at 2048 frames, would otherwise go to the host and
            # back).
            (har,) = library.on_device("source", {**common, **noise})
            aligned = self.components["decoder"].aligned(bucket, prosody.t_en,
                                                         prosody.frame_token[:frames])
            (audio,) = library("body", {**common, **aligned, "n": n, "s": prosody.style,
                                        "har": har})
        return audio[0, :SAMPLES_PER_FRAME * frames].astype(np.float32)
