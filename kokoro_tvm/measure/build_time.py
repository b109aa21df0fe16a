"""Where a build's time went, from the benchmark files its jobs left (``benchmarks/``, one
per job, written by Snakemake's ``benchmark:`` directive): per stage and component, the jobs
and the sum of their wall times; with a second build, both side by side and their ratio.

The jobs of a build on N cores run N at a time, so the sums are job time, not wall time; what
else took CPU meanwhile (Snakemake itself) shows as the gap between them and N x the wall time.

    python -m kokoro_tvm.measure.build_time BASELINE_DIR [DIR]
"""
from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

from kokoro_tvm.facts import COMPONENT_NAMES

OTHER = "-"  # the component column of jobs that belong to none (assets, manifest, dist)


def job_seconds(build_dir: str | Path) -> dict[tuple[str, str], tuple[int, float]]:
    """(stage, component) -> (jobs, summed wall seconds) over ``build_dir/benchmarks``: the
    stage is the benchmark's first folder (as the rules name them), the component the first
    folder or file named after one."""
    root = Path(build_dir) / "benchmarks"
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no benchmarks folder; give the folder a build ran in")
    totals: dict[tuple[str, str], list] = defaultdict(lambda: [0, 0.0])
    for tsv in sorted(root.rglob("*.tsv")):
        parts = tsv.relative_to(root).parts
        component = next((p for p in (*parts[1:-1], tsv.stem) if p in COMPONENT_NAMES), OTHER)
        with open(tsv, newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        total = totals[(parts[0], component)]
        total[0] += 1
        total[1] += float(rows[-1]["s"])  # a job benchmarked with repeats: its last run
    return {key: (jobs, seconds) for key, (jobs, seconds) in totals.items()}


def table(baseline: dict, build: dict | None = None) -> str:
    """A Markdown table of ``job_seconds`` results: one row per stage and component, then the
    total; with ``build``, its figures and build / baseline beside the baseline's."""
    keys = sorted(set(baseline) | set(build or {}),
                  key=lambda k: (k[0], (*COMPONENT_NAMES, OTHER).index(k[1])))
    header = ["stage", "component", "jobs", "job seconds"]
    if build is not None:
        header += ["jobs after", "job seconds after", "after / before"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]

    def row(name: str, component: str, before: tuple[int, float],
            after: tuple[int, float] | None) -> str:
        cells = [name, component, str(before[0]), f"{before[1]:,.0f}"]
        if build is not None:
            ratio = f"{after[1] / before[1]:.2f}" if before[1] else "-"
            cells += [str(after[0]), f"{after[1]:,.0f}", ratio]
        return "| " + " | ".join(cells) + " |"

    none = (0, 0.0)
    for key in keys:
        lines.append(row(*key, baseline.get(key, none),
                         None if build is None else build.get(key, none)))

    def summed(figures: dict) -> tuple[int, float]:
        return (sum(j for j, _ in figures.values()), sum(s for _, s in figures.values()))

    lines.append(row("all", "", summed(baseline), None if build is None else summed(build)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", help="the folder a build ran in (it holds benchmarks/)")
    parser.add_argument("build", nargs="?", help="another build's folder, to compare with")
    args = parser.parse_args(argv)
    text = table(job_seconds(args.baseline),
                 None if args.build is None else job_seconds(args.build))
    print(text)
    return text


if __name__ == "__main__":
    main()
