"""The runtime side: everything `kokoro-tvm say` needs to speak with built libraries. It imports
no torch, no TVM compiler and nothing from the model, build or measure sides."""
