"""bench_web's model for kokoro-js (no browser runs): the tokenizer gives the runtime's token ids
(read by Hugging Face tokenizers, whose format transformers.js reads), the export's inputs and
output are renamed as kokoro-js feeds and reads them, and the command line refuses bad options
in one line."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime
import pytest
import tokenizers
from conftest import REPO
from onnx import TensorProto, helper

from kokoro_tvm.assets.model_config import load_vocab
from kokoro_tvm.measure.bench_web import (
    BenchWebError,
    kokoro_js_onnx,
    kokoro_js_tokenizer,
)
from kokoro_tvm.runtime.g2p import token_ids


def test_the_tokenizer_gives_the_runtimes_ids_between_pads():
    vocab = load_vocab()
    tokenizer = tokenizers.Tokenizer.from_str(json.dumps(kokoro_js_tokenizer(vocab)))
    # Punctuation, stress marks, a character class's specials and characters outside the
    # vocabulary (the digit, the emoji, the brackets), which the runtime drops.
    phonemes = "ðə kwˈɪk bɹˈWn fˈɑks, ʤˈʌmps! 7 [ɔːl]-^\\ 🦊 “wˈʌt?”"
    assert tokenizer.encode(phonemes).ids == [0, *token_ids(phonemes, vocab), 0]


def _graph(inputs: list[str], output: str) -> onnx.ModelProto:
    """``output = tokens-as-float + style + speed``, summed to one value per token."""
    nodes = [helper.make_node("Cast", [inputs[0]], ["t"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", [inputs[1]], ["s"], keepdims=0),
             helper.make_node("Add", ["t", "s"], ["ts"]),
             helper.make_node("Add", ["ts", inputs[2]], ["sum"]),
             helper.make_node("Reshape", ["sum", "flat"], [output])]
    graph = helper.make_graph(
        nodes, "export",
        [helper.make_tensor_value_info(inputs[0], TensorProto.INT64, [1, "n"]),
         helper.make_tensor_value_info(inputs[1], TensorProto.FLOAT, [1, 256]),
         helper.make_tensor_value_info(inputs[2], TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["n"])],
        [helper.make_tensor("flat", TensorProto.INT64, [1], [-1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_export_is_renamed_as_kokoro_js_feeds_it(tmp_path):
    source, dest = tmp_path / "export.onnx", tmp_path / "onnx" / "model_quantized.onnx"
    onnx.save(_graph(["tokens", "style", "speed"], "audio"), source)
    kokoro_js_onnx(source, dest)
    session = onnxruntime.InferenceSession(str(dest))
    assert [i.name for i in session.get_inputs()] == ["input_ids", "style", "speed"]
    [waveform] = session.run(["waveform"], {
        "input_ids": np.array([[0, 5, 0]], np.int64), "style": np.ones((1, 256), np.float32),
        "speed": np.array([0.5], np.float32)})
    np.testing.assert_array_equal(waveform, [256.5, 261.5, 256.5])


def test_an_export_named_otherwise_is_refused_in_one_line(tmp_path):
    source = tmp_path / "other.onnx"
    onnx.save(_graph(["input_ids", "style", "speed"], "waveform"), source)
    with pytest.raises(BenchWebError, match="not the int8 export's") as raised:
        kokoro_js_onnx(source, tmp_path / "out.onnx")
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "out.onnx").exists()


def test_the_command_line_refuses_an_unknown_engine_or_browser_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "workflow_scripts" / "bench_web.py"),
                           "--text", "Hi.", "--engines", "tvm,kokoro-js:webgl",
                           "--out-json", str(tmp_path / "web.json")],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "unknown engine 'kokoro-js:webgl'" in done.stderr
    assert "tvm, kokoro-js:wasm, kokoro-js:webgpu" in done.stderr
    done = subprocess.run([sys.executable, str(REPO / "workflow_scripts" / "bench_web.py"),
                           "--text", "Hi.", "--chromium", str(tmp_path / "no-chrome"),
                           "--out-json", str(tmp_path / "web.json")],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "no such browser; install Chromium" in done.stderr
