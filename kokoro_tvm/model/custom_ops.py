"""The names of our custom PyTorch ops, stated once without importing torch: the model side
registers the ops under them (packed_lstm.py, masked_norm.py), the compiler side looks its
converters up by them (compile/relax.py, compile/lstm.py) in processes that load no PyTorch."""

PACKED_LSTM = "kokoro_tvm::packed_lstm"
MASKED_INSTANCE_NORM = "kokoro_tvm::masked_instance_norm"


def converter_key(op_name: str) -> str:
    """The overload name TVM's importer looks a converter up by (``node.target.__name__``)."""
    return f"{op_name.split('::')[1]}.default"
