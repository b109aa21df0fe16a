"""What every WebGPU device offers: the specification's default limits, which a device may
exceed but never undercut (Firefox, wgpu on Metal and Android offer no more), and the types
WGSL has without extensions. Every kernel of a webgpu library is checked against them when it
is built (``check_kernels``), so that a library runs on any device or fails at build time."""
from __future__ import annotations

from dataclasses import dataclass

MAX_STORAGE_BUFFERS = 8  # per shader stage
MAX_INVOCATIONS = 256  # per workgroup
MAX_WORKGROUP_BYTES = 16384
MAX_WORKGROUPS = 65535  # per dimension
MAX_BINDING_BYTES = 128 << 20  # per storage binding
# Scalar types WGSL lacks (f16 needs an extension some devices lack, SwiftShader among them).
MISSING_TYPES = ("i64", "u64", "f64", "f16", "i8", "u8", "i16", "u16")


class WebGpuLimitError(ValueError):
    """A kernel that some WebGPU device would refuse."""


@dataclass(frozen=True)
class Limit:
    name: str
    value: int
    unit: str


def over_limit(kernel: str, measured: int, limit: Limit) -> None:
    if measured > limit.value:
        raise WebGpuLimitError(f"webgpu kernel {kernel} needs {measured} {limit.unit}, over "
                               f"WebGPU's default {limit.name} ({limit.value}) that every "
                               "device offers")


STORAGE_BUFFERS = Limit("maxStorageBuffersPerShaderStage", MAX_STORAGE_BUFFERS,
                        "storage buffers")
INVOCATIONS = Limit("maxComputeInvocationsPerWorkgroup", MAX_INVOCATIONS, "invocations")
WORKGROUP_BYTES = Limit("maxComputeWorkgroupStorageSize", MAX_WORKGROUP_BYTES,
                        "bytes of workgroup memory")
WORKGROUPS = Limit("maxComputeWorkgroupsPerDimension", MAX_WORKGROUPS, "workgroups")
BINDING_BYTES = Limit("maxStorageBufferBindingSize", MAX_BINDING_BYTES, "bytes in one binding")
