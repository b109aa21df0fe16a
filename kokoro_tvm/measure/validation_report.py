"""The validation table of `snakemake --report`: one row per library of a target (component,
LSTM method, bucket, status) with every judged metric, its value and tolerance; failed or skipped
rows stand out."""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.paths import PathLike


def _metric_cell(name: str, metric: dict[str, Any]) -> str:
    value = metric["value"]
    bound = "&le;" if metric.get("bound", "max") == "max" else "&ge;"
    mark = "" if metric.get("passed", True) else ' class="fail"'
    return (f"<span{mark}>{html.escape(name)} {value:.3g} {bound} "
            f"{metric['tolerance']:.3g}</span>")


def validation_table(reports: list[PathLike], target: str, out: PathLike) -> dict[str, int]:
    """An HTML table of a target's validation reports; returns the count per status."""
    rows, counts = [], {}
    for path in reports:
        report = json.loads(Path(path).read_text())
        status = report.get("status", "passed" if report["passed"] else "failed")
        counts[status] = counts.get(status, 0) + 1
        judged = [_metric_cell(name, m) for name, m in sorted(report["metrics"].items())
                  if m.get("tolerance") is not None]
        detail = "<br>".join(judged) or html.escape(report.get("reason", ""))
        rows.append(f"<tr class=\"{status}\"><td>{html.escape(report['component'])}</td>"
                    f"<td>{html.escape(report['lstm'])}</td><td>{report['bucket']}</td>"
                    f"<td>{status}</td><td>{detail}</td></tr>")
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    document = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Validation, {html.escape(target)}</title>
<style>
body {{ font-family: sans-serif; }} table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; vertical-align: top; }}
tr.failed td, .fail {{ color: #b00; font-weight: bold; }} tr.skipped td {{ color: #777; }}
</style></head><body>
<h2>Libraries of target {html.escape(target)} against PyTorch: {summary}</h2>
<table><tr><th>component</th><th>LSTM</th><th>bucket</th><th>status</th>
<th>metric value vs tolerance</th></tr>
{chr(10).join(rows)}
</table></body></html>
"""
    with atomic_path(out) as tmp:
        tmp.write_text(document, encoding="utf-8")
    return counts
