"""Copies between the host and a device (TVM's devices, or WebGPU's: runtime/webgpu.py),
counted; imports no TVM."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class Transfers:
    """Copies between the host and a device, made through it: how many, their bytes, and the
    seconds they took (a copy to the host waits for the device's queued work first, so on a
    GPU its seconds include the device time not yet overlapped)."""

    to_device: int = 0
    to_device_bytes: int = 0
    to_device_seconds: float = 0.0
    to_host: int = 0
    to_host_bytes: int = 0
    to_host_seconds: float = 0.0

    def upload(self, array: np.ndarray, device):
        """``array`` as a new tensor on ``device``."""
        started = time.perf_counter()
        array = np.ascontiguousarray(array)
        if hasattr(device, "upload"):  # a WebGPU device (runtime/webgpu.py)
            tensor = device.upload(array)
        else:
            import tvm

            tensor = tvm.runtime.tensor(array, device)
        self.to_device += 1
        self.to_device_bytes += array.nbytes
        self.to_device_seconds += time.perf_counter() - started
        return tensor

    def download(self, tensor) -> np.ndarray:
        """``tensor`` as a numpy array."""
        started = time.perf_counter()
        array = tensor.numpy()
        self.to_host += 1
        self.to_host_bytes += array.nbytes
        self.to_host_seconds += time.perf_counter() - started
        return array

    def since(self, before: "Transfers") -> "Transfers":
        """What was copied after ``before`` (an earlier copy of this)."""
        now, then = asdict(self), asdict(before)
        return Transfers(**{key: now[key] - then[key] for key in now})

    def add(self, other: "Transfers") -> None:
        for key, value in asdict(other).items():
            setattr(self, key, getattr(self, key) + value)
