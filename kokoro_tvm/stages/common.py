"""What several stages share: the model, the .pt2 archive format, import figures."""
from __future__ import annotations

import contextlib
import sys
import typing
from pathlib import Path

from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.paths import PathLike

# Figures the relax stage keeps as module attributes ("kokoro_tvm.<name>") for the build
# stage's metadata; the build strips them so that libraries stay bit-identical across rebuilds.
IMPORT_FIGURES = ("ir_lines", "import_seconds")


def load_ir(path: PathLike):
    """A TVM module that a stage saved with ``tvm.ir.save_json``. ``tvm.ir.load_json`` first
    rewrites the whole file through Python's json for files of older TVM versions (1 s for a
    decoder's lowered module); every stage's ``versions`` parameter reruns what another TVM
    wrote, so here that step has nothing to do."""
    import tvm  # noqa: F401 - registers the node types the file names
    from tvm_ffi.serialization import from_json_graph_str

    return from_json_graph_str(Path(path).read_text())


def kmodel(checkpoint: PathLike, model_config: PathLike):
    """KModel with CustomSTFT (TorchSTFT's complex ops have no TVM converters)."""
    from kokoro_tvm.model.kmodel import load_kmodel

    return load_kmodel(model_config, checkpoint, disable_complex=True)


def save_programs(programs: dict, dest: PathLike) -> None:
    """All functions of a component in one .pt2 archive (one ExportedProgram per function),
    with placeholder parameters (``_placeholder_parameters``: the programs passed are changed)."""
    from torch.export.pt2_archive._package import package_pt2

    for program in programs.values():
        _placeholder_parameters(program)
    with atomic_path(dest) as tmp:
        package_pt2(str(tmp), exported_programs=programs)


def _placeholder_parameters(program) -> None:
    """Replaces the program's parameters by zeros of the same shapes, dtypes and strides, all
    views of one zero buffer per dtype. The import reads only their layout (weights stay
    function inputs) and the weights reach the libraries once per component, from the params
    stage, instead of once per bucket (docs/build-time.md)."""
    import torch

    kind = torch.export.graph_signature.InputKind.PARAMETER
    targets = [spec.target for spec in program.graph_signature.input_specs if spec.kind is kind]
    extent = {}  # dtype -> elements the largest view reaches
    for target in targets:
        value = program.state_dict[target]
        reach = value.storage_offset() + sum((n - 1) * s for n, s in
                                             zip(value.shape, value.stride())) + 1
        extent[value.dtype] = max(extent.get(value.dtype, 0), reach)
    zeros = {dtype: torch.zeros(n, dtype=dtype) for dtype, n in extent.items()}
    for target in targets:
        value = program.state_dict[target]
        program.state_dict[target] = torch.nn.Parameter(
            zeros[value.dtype].as_strided(value.shape, value.stride(), value.storage_offset()),
            requires_grad=value.requires_grad)


def load_programs(path: PathLike) -> dict:
    """The archive's programs; their parameters are placeholders (``save_programs``)."""
    from torch.export.pt2_archive._package import load_pt2

    with type_hints_cached():
        return dict(load_pt2(str(path)).exported_programs)


@contextlib.contextmanager
def type_hints_cached():
    """``typing.get_type_hints`` remembers its answers while the block runs. torch.export's
    deserializer asks it about the same few schema classes for every field of every node it
    reads (45,000 calls for a decoder archive, most of the load's time:
    docs/build-time.md), and the classes do not change meanwhile."""
    original = typing.get_type_hints
    answers = {}

    def get_type_hints(obj, globalns=None, localns=None, include_extras=False):
        try:
            hash(obj)
        except TypeError:  # an unhashable object: asked as is
            return original(obj, globalns, localns, include_extras)
        key = (obj, id(globalns), id(localns), include_extras)
        if key not in answers:  # the namespaces are kept with the answer: their ids stay theirs
            answers[key] = (globalns, localns, original(obj, globalns, localns, include_extras))
        return answers[key][-1]

    typing.get_type_hints = get_type_hints
    try:
        yield
    finally:
        typing.get_type_hints = original


def keep_freed_memory() -> None:
    """glibc's malloc keeps freed memory for reuse in this process instead of handing it back
    to the system. PyTorch's passes free and reallocate activations of megabytes per layer;
    handed back, each came again as fresh pages that the kernel zeroes and maps one by one,
    about half of a long decoder pass (docs/build-time.md). Blocks of any
    size come from the heap, none from a mapping of its own. A no-op without glibc."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_max = -1, -4  # malloc.h
    mallopt(m_mmap_max, 0)
    mallopt(m_trim_threshold, 1 << 30)


def without_torch() -> None:
    """Keeps PyTorch out of this process (``import torch`` fails): tvm_ffi imports it whenever
    it is installed, about 1 s of each job's start, and the stages after import need none of it.
    For a stage's own process only (its workflow script): nothing in it may import torch later."""
    sys.modules.setdefault("torch", None)
