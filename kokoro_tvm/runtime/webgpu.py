"""Playing webgpu libraries (compile/webgpu/plan.py) on WebGPU through ``wgpu``, without TVM.

A library is one JSON document: WGSL kernels and, per function, its buffers (inputs, weights,
constants, storage), the dispatches that run it and its outputs. A ``PlanLibrary`` makes each
function's buffers, pipelines, bind groups and uniforms once, when it is first called, and
keeps them; a call writes its inputs into the function's input buffers, runs every dispatch in
one compute pass, copies the outputs into new buffers (so that a later call leaves them as they
are) and submits all of it at once. Weights are uploaded once per component and prepared once
per function by the library's weight transform, as on the other devices (runtime/library.py).

wgpu picks the adapter: a real GPU's where there is one (Vulkan, Metal or D3D12), else a CPU
implementation such as Mesa's lavapipe (Debian's mesa-vulkan-drivers). The device is asked for
WebGPU's default limits, the ones every device offers and the build checks the kernels against.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from kokoro_tvm.abi import (
    TRANSFORM_SUFFIX,
    WEBGPU_PLAN_FORMAT,
    WEBGPU_PLAN_VERSION,
    WEBGPU_STORAGE,
)
from kokoro_tvm.errors import UserError
from kokoro_tvm.runtime.transfers import Transfers

INSTALL_HINT = ("install a GPU's Vulkan, Metal or D3D12 driver, or Mesa's CPU driver "
                "(Debian: apt-get install mesa-vulkan-drivers)")


class WebGpuError(UserError):
    """No WebGPU adapter, or a library this player cannot run."""


def _wgpu():
    try:
        import wgpu
    except ImportError as err:
        raise WebGpuError("webgpu model folders need the wgpu package: "
                          "pip install 'kokoro-tvm[webgpu]'") from err
    return wgpu


class WebGpuDevice:
    """The WebGPU device wgpu finds, with WebGPU's default limits."""

    def __init__(self):
        wgpu = _wgpu()
        try:
            adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        except Exception as err:  # noqa: BLE001 - no driver: wgpu raises its own kinds
            # wgpu's message lists every backend over several lines: the fix is what matters.
            raise WebGpuError(f"no WebGPU adapter found: {INSTALL_HINT}") from err
        if adapter is None:
            raise WebGpuError(f"no WebGPU adapter found: {INSTALL_HINT}")
        self.wgpu = wgpu
        self.adapter = adapter
        self.device = adapter.request_device_sync()
        self.queue = self.device.queue
        self._sync_buffer = self.buffer(4)

    def sync(self) -> None:
        """Waits for the work submitted so far (a read waits for the queue before it)."""
        self.queue.read_buffer(self._sync_buffer, 0, 4)

    def describe(self) -> str:
        """One line: the adapter, its backend and kind."""
        info = self.adapter.info
        return (f"WebGPU on {info['device']} ({info['backend_type']}, "
                f"{info['adapter_type'].lower()} adapter)")

    def buffer(self, size: int, usage=None):
        usage = usage or (self.wgpu.BufferUsage.STORAGE | self.wgpu.BufferUsage.COPY_SRC
                          | self.wgpu.BufferUsage.COPY_DST)
        return self.device.create_buffer(size=max(4, -(-size // 4) * 4), usage=usage)

    def upload(self, array: np.ndarray, dtype: str | None = None) -> "GpuTensor":
        """``array`` in a new buffer, stored as ``dtype`` (the plan's storage dtype)."""
        data = stored(array, dtype or str(array.dtype))
        buffer = self.buffer(data.nbytes)
        self.queue.write_buffer(buffer, 0, data.tobytes())
        return GpuTensor(self, buffer, array.shape, str(array.dtype), str(data.dtype))


def stored(array: np.ndarray, dtype: str) -> np.ndarray:
    """``array`` as the 32-bit type a plan stores it in; integers that int32 cannot hold are
    refused rather than wrapped."""
    array = np.ascontiguousarray(array)
    dtype = WEBGPU_STORAGE.get(dtype, dtype)
    if array.dtype.kind in "iu" and array.size and dtype == "int32" and (
            array.max() > np.iinfo(np.int32).max or array.min() < np.iinfo(np.int32).min):
        raise ValueError(f"values of {array.dtype} beyond int32 cannot go to WebGPU")
    return array.astype(dtype, copy=False)


class GpuTensor:
    """A tensor in a WebGPU buffer: its logical shape and dtype, and the dtype it is stored as."""

    def __init__(self, device: WebGpuDevice, buffer, shape, dtype: str, storage: str):
        self.device, self.buffer = device, buffer
        self.shape, self.dtype, self.storage = tuple(shape), dtype, storage

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * 4

    def numpy(self) -> np.ndarray:
        data = self.device.queue.read_buffer(self.buffer, 0, self.nbytes)
        array = np.frombuffer(data, self.storage).reshape(self.shape)
        return array.astype(self.dtype) if self.dtype != self.storage else array.copy()


@functools.cache
def webgpu_device() -> WebGpuDevice:
    """The process's WebGPU device (made on first use)."""
    return WebGpuDevice()


class PlanWeights:
    """One component's weights (a params .npz path, or name -> array), uploaded when a
    transform needs them; and the prepared weights its libraries share (as library.Weights)."""

    def __init__(self, source, device: WebGpuDevice):
        self.path = Path(source) if isinstance(source, (str, os.PathLike)) else None
        self.arrays = np.load(source) if self.path is not None else source
        self.device = device
        self.by_transform: dict[str, list] = {}
        self._prepared: dict[tuple, GpuTensor] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.arrays

    def __getitem__(self, name: str) -> GpuTensor:
        return self.device.upload(self.arrays[name])

    def shared(self, prepared: list[GpuTensor]) -> list[GpuTensor]:
        """``prepared`` with every tensor replaced by an equal one kept earlier, if any."""
        out = []
        for tensor in prepared:
            data = bytes(self.device.queue.read_buffer(tensor.buffer, 0, tensor.nbytes))
            key = (tensor.shape, tensor.dtype, hashlib.blake2b(data, digest_size=16).digest())
            out.append(self._prepared.setdefault(key, tensor))
        return out


class _Function:
    """One planned function on a device: its buffers, pipelines, bind groups and uniforms,
    made once."""

    def __init__(self, device: WebGpuDevice, plan: dict, kernels: dict, pipelines: Callable,
                 weights: list[GpuTensor] | None):
        self.device, self.plan = device, plan
        self.inputs = [s for s in plan["slots"] if s["kind"] == "input"]
        self.weight_slots = [s for s in plan["slots"] if s["kind"] == "weight"]
        buffers: dict[int, object] = {}
        for slot in plan["slots"]:
            if slot["kind"] == "constant":
                buffers[slot["slot"]] = device.buffer(slot["bytes"])
                device.queue.write_buffer(buffers[slot["slot"]], 0,
                                          base64.b64decode(slot["data"]))
            elif slot["kind"] in ("storage", "input"):
                size = slot["bytes"] if slot["kind"] == "storage" else _bytes(slot)
                buffers[slot["slot"]] = device.buffer(size)
        for slot, tensor in zip(self.weight_slots, weights or [], strict=True):
            buffers[slot["slot"]] = tensor.buffer
        self.buffers = buffers
        uniform_usage = device.wgpu.BufferUsage.UNIFORM | device.wgpu.BufferUsage.COPY_DST
        self.steps = []
        for dispatch in plan["dispatches"]:
            pipeline, layout = pipelines(dispatch["kernel"])
            words = np.array(dispatch["uniform"], np.uint32)
            uniform = device.buffer(-(-words.nbytes // 16) * 16, uniform_usage)
            device.queue.write_buffer(uniform, 0, words.tobytes())
            entries = [{"binding": i, "resource": {"buffer": buffers[s], "offset": 0,
                                                   "size": buffers[s].size}}
                       for i, s in enumerate(dispatch["bindings"])]
            entries.append({"binding": len(entries),
                            "resource": {"buffer": uniform, "offset": 0, "size": uniform.size}})
            group = device.device.create_bind_group(layout=layout, entries=entries)
            self.steps.append((pipeline, group, dispatch["grid"]))
        self.outputs = plan["outputs"]

    def __call__(self, inputs: list[GpuTensor]) -> list[GpuTensor]:
        device = self.device
        encoder = device.device.create_command_encoder()
        for slot, tensor in zip(self.inputs, inputs, strict=True):
            encoder.copy_buffer_to_buffer(tensor.buffer, 0, self.buffers[slot["slot"]], 0,
                                          _bytes(slot))
        compute = encoder.begin_compute_pass()
        for pipeline, group, grid in self.steps:
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, group)
            compute.dispatch_workgroups(*grid)
        compute.end()
        out = []
        for output in self.outputs:
            size = _bytes(output)
            buffer = device.buffer(size)
            encoder.copy_buffer_to_buffer(self.buffers[output["slot"]], 0, buffer, 0,
                                          -(-size // 4) * 4)
            out.append(GpuTensor(device, buffer, output["shape"], output["dtype"],
                                 output["storage"]))
        device.queue.submit([encoder.finish()])
        return out


def _bytes(tensor: Mapping) -> int:
    return max(4, 4 * int(np.prod(tensor["shape"])))


def read_plan(path: str | os.PathLike) -> dict:
    """A webgpu library's document, its format checked."""
    plan = json.loads(Path(path).read_text(encoding="utf-8"))
    if (plan.get("format"), plan.get("version")) != (WEBGPU_PLAN_FORMAT, WEBGPU_PLAN_VERSION):
        raise WebGpuError(f"{path} is not a webgpu plan of version {WEBGPU_PLAN_VERSION} "
                          f"(format {plan.get('format')!r}, version {plan.get('version')!r}): "
                          "rebuild it with snakemake")
    return plan


class PlanLibrary:
    """One webgpu library and the weights its functions read, called as runtime/library.py's
    ``Library`` is: functions by name, inputs by name, outputs as numpy arrays or left on the
    device (``GpuTensor``). ``allocator`` is taken for that likeness alone: a function's buffers
    are kept from its first call."""

    def __init__(self, plan_path: str | os.PathLike, weights: PlanWeights,
                 transforms: Mapping[str, str] | None = None, allocator: str = "pooled",
                 transfers: Transfers | None = None):
        self.path = Path(plan_path)
        self.weights = weights
        self.device = weights.device
        self.transfers = transfers or Transfers()
        self.transforms = dict(transforms or {})
        self.plan = read_plan(plan_path)
        self._pipelines: dict[str, tuple] = {}
        self._functions: dict[str, _Function] = {}
        self._prepared: dict[str, list[GpuTensor]] = {}

    def _pipeline(self, name: str):
        if name not in self._pipelines:
            kernel, wgpu = self.plan["kernels"][name], self.device.wgpu
            storage = {"read": wgpu.BufferBindingType.read_only_storage,
                       "read_write": wgpu.BufferBindingType.storage}
            entries = [{"binding": b["binding"], "visibility": wgpu.ShaderStage.COMPUTE,
                        "buffer": {"type": storage[b["access"]]}} for b in kernel["bindings"]]
            entries.append({"binding": len(entries), "visibility": wgpu.ShaderStage.COMPUTE,
                            "buffer": {"type": wgpu.BufferBindingType.uniform}})
            device = self.device.device
            layout = device.create_bind_group_layout(entries=entries)
            module = device.create_shader_module(code=kernel["wgsl"])
            pipeline = device.create_compute_pipeline(
                layout=device.create_pipeline_layout(bind_group_layouts=[layout]),
                compute={"module": module, "entry_point": name})
            self._pipelines[name] = (pipeline, layout)
        return self._pipelines[name]

    def _function(self, name: str, weights: list[GpuTensor] | None) -> _Function:
        if name not in self._functions:
            if name not in self.plan["functions"]:
                raise KeyError(f"{self.path} has no function {name}")
            self._functions[name] = _Function(self.device, self.plan["functions"][name],
                                              self.plan["kernels"], self._pipeline, weights)
        return self._functions[name]

    def prepared(self, function: str) -> list[GpuTensor]:
        """``function``'s prepared weights (computed on first use, then kept; shared with the
        component's other libraries whose transform has the same fingerprint)."""
        if function not in self._prepared:
            fingerprint = self.transforms.get(function)
            if fingerprint in self.weights.by_transform:
                self._prepared[function] = self.weights.by_transform[fingerprint]
                return self._prepared[function]
            # The transform takes every weight as stored (its num_input is 0), bound once.
            transform = self.plan["functions"][function + TRANSFORM_SUFFIX]
            names = [s["name"] for s in transform["slots"] if s["kind"] == "weight"]
            missing = [name for name in names if name not in self.weights]
            if missing:
                raise KeyError(f"{self.path}: needs weights {missing}, missing from its params "
                               "file")
            once = _Function(self.device, transform, self.plan["kernels"], self._pipeline,
                             [self.weights[name] for name in names])
            self._prepared[function] = self.weights.shared(once([]))
            if fingerprint is not None:
                self.weights.by_transform[fingerprint] = self._prepared[function]
        return self._prepared[function]

    def _call(self, function: str, inputs: Mapping[str, object]) -> Callable[[], list]:
        """``function`` with its inputs on the device: a call that submits it."""
        planned = self._function(function, self.prepared(function)
                                 if function + TRANSFORM_SUFFIX in self.plan["functions"]
                                 else [])
        names = [slot["name"] for slot in planned.inputs]
        missing = [name for name in names if name not in inputs]
        if missing:
            raise KeyError(f"{self.path}: {function} needs inputs {missing}")
        args = [self._fitted(inputs[name], slot) for name, slot in zip(names, planned.inputs)]
        return lambda: planned(args)

    def bind(self, function: str, inputs: Mapping[str, object]) -> Callable[[], list]:
        """A call of ``function`` with its inputs already on the device, which returns once
        the device has run it (for timing, as runtime/library.py's ``bind``)."""
        submit = self._call(function, inputs)

        def call() -> list[GpuTensor]:
            out = submit()
            self.device.queue.read_buffer(out[0].buffer, 0, 4)  # waits for the submission
            return out

        return call

    def on_device(self, function: str, inputs: Mapping[str, object]) -> list[GpuTensor]:
        """Runs ``function`` on ``inputs`` (by name); outputs left on the device."""
        return self._call(function, inputs)()

    def _fitted(self, value, slot: Mapping) -> GpuTensor:
        """An input on the device in its planned shape. Plans are static: ``align`` takes token
        features at the largest token bucket (compile/alignment.py), and those of a smaller
        one are zero-padded to it here, through the host."""
        shape = tuple(slot["shape"])
        if tuple(np.shape(value)) != shape:
            array = value.numpy() if isinstance(value, GpuTensor) else np.asarray(value)
            if array.ndim != len(shape) or any(a > b for a, b in zip(array.shape, shape)):
                raise ValueError(f"{self.path}: input {slot['name']} of shape {array.shape} "
                                 f"does not fit its planned shape {shape}")
            padded = np.zeros(shape, array.dtype)
            padded[tuple(slice(0, n) for n in array.shape)] = array
            value = padded
        if isinstance(value, GpuTensor):
            return value
        return self.transfers.upload(value, self.device)

    def __call__(self, function: str, inputs: Mapping[str, object]) -> list[np.ndarray]:
        """Runs ``function`` on ``inputs`` (by name); outputs as numpy arrays."""
        return [self.transfers.download(t) for t in self.on_device(function, inputs)]
