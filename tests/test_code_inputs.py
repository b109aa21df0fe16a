"""The code-inputs walker (kokoro_tvm/stages/code_inputs.py) on a package of its own: which
imports it follows, and what it leaves out for components without LSTMs and for CPU targets.
tests/test_layout.py checks its results on the real workflow against Python's modulefinder."""
from __future__ import annotations

from pathlib import Path

import pytest

from kokoro_tvm.stages.code_inputs import GPU_ONLY, LSTM_ONLY, code_files, module_file


def write_package(root: Path, modules: dict[str, str]) -> None:
    """Module name -> source; packages get an empty __init__.py where not given."""
    for name, source in modules.items():
        parts = name.split(".")
        for i in range(1, len(parts)):
            init = root.joinpath(*parts[:i], "__init__.py")
            init.parent.mkdir(parents=True, exist_ok=True)
            if not init.exists():
                init.write_text("")
        root.joinpath(*parts[:-1], parts[-1] + ".py").write_text(source)


def closure(root: Path, script: str, **options) -> set[str]:
    return {str(Path(p).relative_to(root)) for p in code_files(root, root / script, **options)}


@pytest.fixture
def package(tmp_path):
    lstm, gpu = LSTM_ONLY[0], GPU_ONLY[0]
    write_package(tmp_path, {
        "kokoro_tvm.shared": "",
        "kokoro_tvm.only_lstm": "",
        "kokoro_tvm.only_gpu": "",
        "kokoro_tvm.late": "import kokoro_tvm.shared\n",
        "kokoro_tvm.stage": ("import os\nimport kokoro_tvm.shared\n"
                             "from kokoro_tvm import sub\n"
                             "from .relative import nothing\n"
                             "def run():\n    from kokoro_tvm.late import x\n"
                             f"    import {lstm}\n    import {gpu}\n"),
        "kokoro_tvm.sub": "",
        "kokoro_tvm.relative": "",
        lstm: "import kokoro_tvm.only_lstm\nimport kokoro_tvm.shared\n",
        gpu: "import kokoro_tvm.only_gpu\n"})
    (tmp_path / "script.py").write_text("from kokoro_tvm.stage import run\nimport numpy\n")
    return tmp_path


def file_of(name: str) -> str:
    return name.replace(".", "/") + ".py"


def test_follows_every_package_import_with_the_packages_on_the_way(package):
    """Function-level imports count, ``from package import module`` names the module, the
    packages' __init__.py run too; other distributions are not ours, and relative imports are
    not followed (the package uses none)."""
    found = closure(package, "script.py")
    assert {"kokoro_tvm/__init__.py", "kokoro_tvm/stage.py", "kokoro_tvm/shared.py",
            "kokoro_tvm/sub.py", "kokoro_tvm/late.py", "kokoro_tvm/only_lstm.py",
            "kokoro_tvm/only_gpu.py", file_of(LSTM_ONLY[0]), file_of(GPU_ONLY[0])} <= found
    assert "kokoro_tvm/relative.py" not in found


@pytest.mark.parametrize("option, only, kept_too", [("lstm", LSTM_ONLY[0], "only_lstm"),
                                                    ("gpu", GPU_ONLY[0], "only_gpu")])
def test_leaves_out_what_only_lstm_or_gpu_code_imports(package, option, only, kept_too):
    """Without ``lstm`` (or ``gpu``) the LSTM-only (GPU-only) module goes, with what only it
    imports; what others import as well stays."""
    everything = closure(package, "script.py")
    without = closure(package, "script.py", **{option: False})
    assert everything - without == {file_of(only), f"kokoro_tvm/{kept_too}.py"}
    assert "kokoro_tvm/shared.py" in without


def test_the_lstm_and_gpu_only_modules_are_the_packages():
    """LSTM_ONLY names modules of the package (a rename must update it); GPU_ONLY is derived
    from compile/gpu/ and compile/webgpu/ (but WebGPU's limits, which every target reads)."""
    root = Path(__file__).resolve().parents[1]
    assert all(module_file(root, name) for name in LSTM_ONLY)
    assert GPU_ONLY == ("kokoro_tvm.compile.gpu.contraction",
                        "kokoro_tvm.compile.gpu.instance_norm", "kokoro_tvm.compile.gpu.lstm",
                        "kokoro_tvm.compile.gpu.without_float64",
                        "kokoro_tvm.compile.webgpu.fusion", "kokoro_tvm.compile.webgpu.narrow",
                        "kokoro_tvm.compile.webgpu.plan")
