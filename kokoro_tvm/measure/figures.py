"""The measurement side's plots: matplotlib without a display, each PNG written atomically."""
from __future__ import annotations

from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.paths import PathLike


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed), imported when first plotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, out: PathLike, dpi: int = 100) -> None:
    """``fig`` laid out and written to ``out`` as a PNG (never half-written), then closed."""
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)
    pyplot().close(fig)
