"""The PyTorch side: Kokoro's model split into components, their patches, wrappers and example
inputs, and the PyTorch reference every library is checked against."""
