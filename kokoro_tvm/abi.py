"""The contract between a built library and its callers, shared by the compiler side (lower,
build) and the runtime side (library, bare) without either importing the other."""

# Function ``f`` of a library comes with ``f + TRANSFORM_SUFFIX``, which takes the weights by
# KModel state-dict key and returns the prepared weights that ``f`` takes after its inputs.
TRANSFORM_SUFFIX = "_transform_params"

# A library with an input gathered from tokens into frames (components.ALIGNED_INPUTS) has
# ``ALIGN_FUNCTION(source, FRAME_TOKEN)``: that input from the token-side output ``source`` at
# any token bucket and the token of each frame (int32, -1 on padding; compile/alignment.py).
ALIGN_FUNCTION = "align"
FRAME_TOKEN = "frame_token"

# A decoder library's ``NOISE_FUNCTION(key)`` draws the noise inputs its source function takes,
# on the library's device (compile/noise.py); ``key`` is ``noise_key(seed)``.
NOISE_FUNCTION = "noise"
NOISE_KEY = "key"
# What it returns, in order: the source function's inputs of these names.
NOISE_INPUTS = ("phase_noise", "sine_noise")
# Its generator, Philox4x32-10 (Random123): multipliers, Weyl key increments, rounds; words per
# counter; the counter's second word for the samples' and the phases' streams.
PHILOX_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
PHILOX_KEY_STEPS = (0x9E3779B9, 0xBB67AE85)
PHILOX_ROUNDS = 10
PHILOX_WORDS = 4
SAMPLE_STREAM, PHASE_STREAM = 0, 1
# Seeds are its 64-bit keys (numpy's generators, the CPU's, would take any size).
MAX_SEED = 2**64 - 1


def noise_key(seed: int):
    """The generator's key for ``seed``: its low and high 32 bits, as the uint32 array
    ``NOISE_FUNCTION`` takes."""
    import numpy as np

    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"a noise seed is a whole number from 0 to {MAX_SEED}, not {seed}")
    return np.array([seed & 0xFFFFFFFF, seed >> 32], dtype=np.uint32)

# A webgpu library is a JSON document of this format and version (compile/webgpu/plan.py writes
# it, runtime/webgpu.py and the browser's module play it; docs/other-targets.md, WebGPU).
WEBGPU_PLAN_FORMAT = "kokoro-tvm-webgpu-plan"
WEBGPU_PLAN_VERSION = 1
# The 32-bit type each tensor dtype is stored in there (WGSL has no 8- or 64-bit scalars).
WEBGPU_STORAGE = {"bool": "int32", "int8": "int32", "uint8": "int32", "int64": "int32",
                  "float32": "float32", "int32": "int32", "uint32": "uint32"}
