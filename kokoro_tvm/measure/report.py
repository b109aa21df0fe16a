"""Figures for `snakemake --report`: the validation table and a spectrogram comparison.

- ``validation_table``: one row per library of a target (component, LSTM method, bucket, status)
  with every judged metric, its value and tolerance; failed or skipped rows stand out.
- ``spectrogram_comparison``: one sentence spoken by the TVM runtime and by PyTorch with the
  same SineGen noise draws, their log-mel spectrograms and the difference, with the SNR.
"""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.facts import SAMPLE_RATE

PathLike = str | Path


def _metric_cell(name: str, metric: dict[str, Any]) -> str:
    value = metric["value"]
    bound = "&le;" if metric.get("bound", "max") == "max" else "&ge;"
    mark = "" if metric.get("passed", True) else ' class="fail"'
    return (f"<span{mark}>{html.escape(name)} {value:.3g} {bound} "
            f"{metric['tolerance']:.3g}</span>")


def validation_table(reports: list[PathLike], target: str, out: PathLike) -> dict[str, int]:
    """An HTML table of a target's validation reports; returns the count per status."""
    rows, counts = [], {}
    for path in reports:
        report = json.loads(Path(path).read_text())
        status = report.get("status", "passed" if report["passed"] else "failed")
        counts[status] = counts.get(status, 0) + 1
        judged = [_metric_cell(name, m) for name, m in sorted(report["metrics"].items())
                  if m.get("tolerance") is not None]
        detail = "<br>".join(judged) or html.escape(report.get("reason", ""))
        rows.append(f"<tr class=\"{status}\"><td>{html.escape(report['component'])}</td>"
                    f"<td>{html.escape(report['lstm'])}</td><td>{report['bucket']}</td>"
                    f"<td>{status}</td><td>{detail}</td></tr>")
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    document = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Validation, {html.escape(target)}</title>
<style>
body {{ font-family: sans-serif; }} table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; vertical-align: top; }}
tr.failed td, .fail {{ color: #b00; font-weight: bold; }} tr.skipped td {{ color: #777; }}
</style></head><body>
<h2>Libraries of target {html.escape(target)} against PyTorch: {summary}</h2>
<table><tr><th>component</th><th>LSTM</th><th>bucket</th><th>status</th>
<th>metric value vs tolerance</th></tr>
{chr(10).join(rows)}
</table></body></html>
"""
    with atomic_path(out) as tmp:
        tmp.write_text(document, encoding="utf-8")
    return counts


def spectrogram_comparison(root: PathLike, target: str, sentence: str, voice: str,
                           out: PathLike, seed: int = 0) -> dict[str, float]:
    """TVM and PyTorch speaking ``sentence`` with the same noise: a three-panel PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kokoro_tvm.measure.validate import log_mel, snr_db
    from kokoro_tvm.model.reference import TorchEngine, kokoro_noise
    from kokoro_tvm.runtime.engine import TvmEngine
    from kokoro_tvm.runtime.g2p import phonemizer, token_ids
    from kokoro_tvm.runtime.speech import load_vocab
    from kokoro_tvm.runtime.voices import load_voice, style_for

    ids = token_ids(phonemizer("en-us")(sentence), load_vocab(root))
    ref_s = style_for(load_voice(voice, root), len(ids))
    tvm_audio = TvmEngine(root, target=target, noise=kokoro_noise).synthesize(ids, ref_s, 1.0, seed)
    torch_audio = TorchEngine(root, disable_complex=True).synthesize(ids, ref_s, 1.0, seed)
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
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)
    return figures
