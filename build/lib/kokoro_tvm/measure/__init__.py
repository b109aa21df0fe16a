"""Measurement: validation against PyTorch, benchmarks, the report and their metrics."""
