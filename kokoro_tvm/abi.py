"""The contract between a built library and its callers, shared by the compiler side (lower,
build) and the runtime side (library, bare) without either importing the other."""

# Function ``f`` of a library comes with ``f + TRANSFORM_SUFFIX``, which takes the weights by
# KModel state-dict key and returns the prepared weights that ``f`` takes after its inputs.
TRANSFORM_SUFFIX = "_transform_params"
