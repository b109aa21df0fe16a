"""The spectrogram figure of `snakemake --report`: one sentence spoken by the TVM runtime and by
PyTorch with the same SineGen noise draws, their log-mel spectrograms and the difference, with
the SNR."""
from __future__ import annotations

from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.measure.figures import pyplot, save_png
from kokoro_tvm.paths import PathLike


def spectrogram_comparison(root: PathLike, target: str, sentence: str, voice: str,
                           out: PathLike, seed: int = 0) -> dict[str, float]:
    """TVM and PyTorch speaking ``sentence`` with the same noise: a three-panel PNG."""
    plt = pyplot()

    from kokoro_tvm import paths
    from kokoro_tvm.measure.metrics import log_mel, snr_db
    from kokoro_tvm.model.reference import TorchEngine
    from kokoro_tvm.runtime.engine import TvmEngine
    from kokoro_tvm.runtime.g2p import phonemizer, token_ids
    from kokoro_tvm.runtime.model_folder import AssetFolder
    from kokoro_tvm.runtime.voices import load_voice, style_for

    assets = AssetFolder.of_build(root)
    ids = token_ids(phonemizer("en-us")(sentence), assets.vocab)
    ref_s = style_for(load_voice(voice, assets), len(ids))
    torch_engine = TorchEngine(root, disable_complex=True)
    tvm_audio = TvmEngine(paths.artifact(paths.DIST, root, target=target),
                          noise=torch_engine.noise).synthesize(ids, ref_s, 1.0, seed)
    torch_audio = torch_engine.synthesize(ids, ref_s, 1.0, seed)
    figures = {"snr_db": round(snr_db(tvm_audio, torch_audio), 2),
               "seconds": round(len(torch_audio) / SAMPLE_RATE, 3)}
    tvm_mel, torch_mel = log_mel(tvm_audio), log_mel(torch_audio)
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    difference = tvm_mel - torch_mel
    spread = float(abs(difference).max()) or 1.0
    panels = ((axes[0], torch_mel, "PyTorch", {"cmap": "magma"}),
              (axes[1], tvm_mel, f"TVM ({target})", {"cmap": "magma"}),
              (axes[2], difference, "TVM - PyTorch (log-mel)",
               {"cmap": "coolwarm", "vmin": -spread, "vmax": spread}))
    for ax, image, title, style in panels:
        shown = ax.imshow(image, origin="lower", aspect="auto", **style)
        ax.set_title(title)
        ax.set_ylabel("mel band")
        fig.colorbar(shown, ax=ax)
    axes[2].set_xlabel("frame")
    fig.suptitle(f"{sentence!r} ({voice}): waveform SNR {figures['snr_db']} dB")
    save_png(fig, out, dpi=90)
    return figures
