"""Per-component latency of TVM libraries vs PyTorch eager, as JSON on stdout.

    TVM_NUM_THREADS=2 python workflow_scripts/bench_components.py --tokens 32 --frames 32
        [--components bert decoder] [--unscheduled] [--checkpoint X --model-config Y]

Without a checkpoint, Kokoro-82M's full-size configuration with random weights (speed does not
depend on the weights). TVM_NUM_THREADS must match --threads (TVM reads it at start-up).
"""
from __future__ import annotations

import argparse
import json
import os

import torch

from kokoro_tvm.bench import bench
from kokoro_tvm.components import COMPONENTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--components", nargs="+", default=sorted(COMPONENTS))
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--frames", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--unscheduled", action="store_true",
                        help="TVM's plain pipeline (no schedules): the 'before' figures")
    parser.add_argument("--mcpu", default="host")
    parser.add_argument("--checkpoint")
    parser.add_argument("--model-config")
    args = parser.parse_args()
    if os.environ.get("TVM_NUM_THREADS") != str(args.threads):
        parser.error(f"set TVM_NUM_THREADS={args.threads} (TVM reads it when it starts)")
    if args.checkpoint:
        from kokoro_tvm.model import load_kmodel
        kmodel = load_kmodel(args.model_config, args.checkpoint, disable_complex=True)
    else:
        from kokoro_tvm.assets.model_config import kokoro_config
        from kokoro_tvm.model import build_kmodel
        torch.manual_seed(0)
        kmodel = build_kmodel(kokoro_config(), disable_complex=True)
    target = {"kind": "llvm", "mcpu": args.mcpu, "num-cores": args.threads}
    results = bench(kmodel, args.components, {"tokens": args.tokens, "frames": args.frames},
                    target, args.threads, schedule=not args.unscheduled, repeats=args.repeats)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
