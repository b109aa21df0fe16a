"""The PyTorch reference synthesizer: kokoro's KModel on our assets, exactly as Kokoro runs it.

Every compiled artifact is judged against this engine.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from kokoro_tvm import paths
from kokoro_tvm.facts import F0_PER_FRAME, HARMONICS, SAMPLES_PER_FRAME
from kokoro_tvm.model.kmodel import kmodel_from_params, load_kmodel
from kokoro_tvm.model.patches import merged_noise, noise_weight


@dataclass
class TorchProsody:
    """KModel's decoder inputs for one chunk (speech.Prosody), and the seed of its SineGen."""

    durations: np.ndarray
    decoder_inputs: tuple[torch.Tensor, ...]  # asr, F0, N, style, as forward_with_tokens has them
    seed: int


class _Capture(torch.nn.Module):
    """Stands in for KModel's decoder: keeps its inputs, returns no audio."""

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        self.inputs = inputs
        return inputs[0].new_zeros(0)


class TorchEngine:
    """KModel.forward_with_tokens with a seeded SineGen (its noise is the only randomness)."""

    def __init__(self, root: str | Path = ".", *, disable_complex: bool = False, kmodel=None):
        self.kmodel = kmodel or load_kmodel(paths.artifact(paths.ASSET_CONFIG, root),
                                            paths.artifact(paths.ASSET_WEIGHTS, root),
                                            disable_complex=disable_complex)

    @classmethod
    def of_model_folder(cls, folder) -> TorchEngine:
        """KModel on the weights of a model folder (runtime/model_folder.py): the reference on
        exactly what its libraries run."""
        params = sorted({entry["params"] for entry in folder.libraries})
        return cls(kmodel=kmodel_from_params(folder.file(paths.MODEL_CONFIG),
                                             [folder.file(p) for p in params]))

    def synthesize(self, ids: list[int], ref_s: np.ndarray, speed: float, seed: int) -> np.ndarray:
        return self.synthesize_with_durations(ids, ref_s, speed, seed)[0]

    def synthesize_with_durations(self, ids: list[int], ref_s: np.ndarray, speed: float,
                                  seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Audio and the integer frame count of every token, pads included."""
        torch.manual_seed(seed)
        input_ids = torch.tensor([[0, *ids, 0]], dtype=torch.long)
        style = torch.from_numpy(np.asarray(ref_s, dtype=np.float32).reshape(1, -1))
        with torch.inference_mode():
            audio, durations = self.kmodel.forward_with_tokens(input_ids, style, speed)
        return audio.numpy().astype(np.float32), durations.numpy()

    def prosody(self, ids: list[int], ref_s: np.ndarray, speed: float, seed: int) -> TorchProsody:
        """forward_with_tokens up to its decoder call, whose inputs it keeps (speech.Prosody)."""
        decoder, capture = self.kmodel.decoder, _Capture()
        self.kmodel.decoder = capture
        try:
            _, durations = self.synthesize_with_durations(ids, ref_s, speed, seed)
        finally:
            self.kmodel.decoder = decoder
        return TorchProsody(durations, capture.inputs, seed)

    @staticmethod
    def decode_frames(frames: int) -> int:
        """KModel runs at exactly the frames it is given."""
        return frames

    def decode(self, prosody: TorchProsody, frames: int | None = None) -> np.ndarray:
        """KModel's decoder on the first ``frames`` frames alone (all by default: then exactly
        ``synthesize``'s audio, the noise drawn after the same seed)."""
        asr, f0, n, style = prosody.decoder_inputs
        frames = asr.shape[-1] if frames is None else frames
        torch.manual_seed(prosody.seed)
        with torch.inference_mode():
            steps = F0_PER_FRAME * frames
            audio = self.kmodel.decoder(asr[..., :frames], f0[..., :steps], n[..., :steps],
                                        style)
        return audio.squeeze().numpy().astype(np.float32)

    def noise(self, seed: int, frames: int) -> tuple[np.ndarray, np.ndarray]:
        """The random draws this engine's SineGen makes after ``torch.manual_seed(seed)``, in
        its order (initial phases, then the Gaussian noise, which ``randn_like`` draws into a
        transposed view of [1, harmonics, samples] memory: torch draws different values into
        strided memory), in the form the libraries take them (patches.merged_noise). Lets the
        TVM runtime reproduce this engine: ``TvmEngine(folder, noise=torch_engine.noise)``."""
        harmonics, samples = HARMONICS, SAMPLES_PER_FRAME * frames
        torch.manual_seed(seed)
        phase = torch.rand(1, harmonics)
        sine = torch.empty(1, harmonics, samples).transpose(1, 2).normal_()
        return phase.numpy(), merged_noise(sine, noise_weight(self.kmodel)).numpy()
