"""The runtime side: everything `kokoro-tvm say` needs to speak with built libraries. It imports
nothing from the model, build or measure sides and no torch of its own (tvm_ffi imports torch
where it is installed: the runtime-only install has none)."""
