"""Per-component latency: TVM libraries against PyTorch eager, side by side in one process.

For each component and bucket: export, import, lower (with our schedules and, optionally,
without: TVM's plain pipeline), build into a temporary folder, then time the library's
functions and the PyTorch wrapper's methods on the same example inputs, interleaved
(TVM, PyTorch, TVM, ...) so that load from other processes hits both alike. Reported: the
median of each, their ratio, and build seconds. PyTorch runs with ``threads`` threads, as does
TVM's thread pool (``TVM_NUM_THREADS``, read when the runtime starts: set it before).
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import tvm
from tvm import relax

from kokoro_tvm.compile.build import build_library
from kokoro_tvm.compile.importer import import_programs
from kokoro_tvm.compile.lower import lower
from kokoro_tvm.compile.targets import make_target
from kokoro_tvm.components import (COMPONENTS, config_of, export_component, patched,
                                   run_reference)


def _median_seconds(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def bench_component(kmodel, name: str, bucket: int, target_options: dict[str, Any],
                    schedule: bool = True, repeats: int = 5, seed: int = 0) -> dict[str, Any]:
    """One component at one bucket: per function, TVM and PyTorch median seconds and ratio."""
    component = COMPONENTS[name]
    target = make_target(target_options)
    inputs = component.example_inputs(config_of(kmodel), bucket, seed)
    env = run_reference(kmodel, name, inputs)
    mod, params = import_programs(export_component(kmodel, name, bucket, seed),
                                  "unroll" if component.has_lstm else "none")
    started = time.perf_counter()
    lowered = lower(mod, target, schedule=schedule)
    lower_seconds = time.perf_counter() - started
    wrapper = component.wrapper(kmodel).eval()
    result: dict[str, Any] = {"component": name, "bucket": bucket, "schedule": schedule,
                              "lower_seconds": round(lower_seconds, 3), "functions": {}}
    with tempfile.TemporaryDirectory() as tmp:
        so = Path(tmp) / "lib.so"
        info = build_library(lowered, target, so)
        result["build_seconds"] = info["build_seconds"]
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(so)), tvm.cpu())
        for fn in component.functions:
            names = [vm._get_function_param_name(fn.name, i)
                     for i in range(vm._get_function_arity(fn.name))]
            values = {**{k: v.detach().numpy() for k, v in env.items()}, **params}
            args = [tvm.runtime.tensor(np.ascontiguousarray(values[n])) for n in names]
            torch_args = tuple(env[i] for i in fn.inputs)
            method = getattr(wrapper, fn.method)

            def run_tvm():
                vm[fn.name](*args)

            def run_torch():
                with patched(component.patches), torch.no_grad():
                    method(*torch_args)

            run_tvm(), run_torch()  # warm up
            tvm_times, torch_times = [], []
            for _ in range(repeats):
                tvm_times += _median_seconds(run_tvm, 1)
                torch_times += _median_seconds(run_torch, 1)
            t_tvm, t_torch = statistics.median(tvm_times), statistics.median(torch_times)
            result["functions"][fn.name] = {
                "tvm_seconds": round(t_tvm, 5), "torch_seconds": round(t_torch, 5),
                "ratio": round(t_tvm / t_torch, 3)}
    return result


def bench(kmodel, components: list[str], buckets: dict[str, int],
          target_options: dict[str, Any], threads: int, schedule: bool = True,
          repeats: int = 5) -> list[dict[str, Any]]:
    torch.set_num_threads(threads)
    return [bench_component(kmodel, name, buckets[COMPONENTS[name].axis], target_options,
                            schedule, repeats) for name in components]
