#!/usr/bin/env python3
"""Command line of kokoro_tvm.measure.bench_web (its docstring is the --help)."""
import shutil
import sys

from kokoro_tvm import paths
from kokoro_tvm.errors import run_script
from kokoro_tvm.facts import DEFAULT_VOICE
from kokoro_tvm.measure import bench_web
from kokoro_tvm.script_args import add_engines_argument, chosen_engines, stage_parser


def main() -> None:
    parser = stage_parser(bench_web)
    parser.add_argument("--web", default=paths.WEB, help="the web folder (`snakemake web`)")
    parser.add_argument("--onnx", default=paths.ASSET_ONNX,
                        help="the int8 ONNX export, which kokoro-js runs")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium",
                        help="Chromium or Chrome to run (default: chromium on PATH)")
    parser.add_argument("--browser-args",
                        default=" ".join(bench_web.SWIFTSHADER_ARGS),
                        help="Chromium's flags, space-separated, given as --browser-args=... "
                             "(default: WebGPU on SwiftShader, for a machine without a GPU; on "
                             "one with a GPU: --browser-args=--enable-unsafe-webgpu)")
    add_engines_argument(parser, bench_web.ENGINES)
    parser.add_argument("--text", required=True, help="the text each engine speaks")
    parser.add_argument("--voice", default=DEFAULT_VOICE)
    parser.add_argument("--passes", type=int, default=2,
                        help="passes of the text per engine (the first compiles and warms up)")
    parser.add_argument("--workdir", default=paths.BENCH_WEB_WORK,
                        help="where kokoro-js is installed and the benchmark's site is made")
    parser.add_argument("--out-json", required=True, help=paths.BENCH_WEB)
    args = parser.parse_args()
    engines = chosen_engines(parser, args, bench_web.ENGINES)
    if shutil.which(args.chromium) is None:
        parser.error(f"--chromium {args.chromium}: no such browser; install Chromium (Debian: "
                     "apt-get install chromium) or give Chrome's path")
    if args.passes < 1:
        parser.error(f"--passes {args.passes}: at least 1")
    figures = bench_web.run(args.web, args.onnx, args.chromium, engines, args.text, args.voice,
                            args.passes, args.out_json, args.workdir,
                            args.browser_args.split())
    print(bench_web.summary(figures))


if __name__ == "__main__":
    sys.exit(run_script(main))
