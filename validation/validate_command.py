"""What `psdlab validate --model MODEL.json TRACE...` does once its arguments are parsed: the
replays of psdlab / MineDraft traces in the calibrated simulator (``validation.validate``, the
report folder with ``-o``), or the predictions of vLLM / SGLang serving-benchmark results
(``validation.serving_results.compare_results``), and the lines it prints.  The command module
only parses and prints."""
from __future__ import annotations

import json
from typing import Any

from psdlab.validation.calibrate_report import Printout

SHOWN = ("throughput_tok_s", "ttft.mean", "ttft.p99", "tpot.mean", "tpot.p99", "e2e.mean",
         "e2e.p50", "e2e.p90", "e2e.p99", "acceptance_rate")


def _bench(model: str, traces: list[str], seeds: int, as_json: bool) -> Printout:
    from psdlab.validation.serving_results.calibration import BenchFit
    from psdlab.validation.serving_results.compare_results import compare_bench, format_rows

    fit = BenchFit.load(model)
    rows = compare_bench(fit, traces, seeds=seeds)
    if as_json:
        return Printout([json.dumps({"model": model, "seeds": seeds,
                                     "rows": [r.to_dict() for r in rows]}, allow_nan=False)])
    return Printout([format_rows(rows)])


def validate_command(model: str, traces: list[str], *, seeds: int = 5,
                     output: str | None = None, raw: bool = False,
                     acceptance: str | None = None, all_rows: bool = False,
                     as_json: bool = False) -> Printout:
    """Predicted vs measured for ``traces`` under the model file ``model``: what to print."""
    from psdlab.analysis.checks import check_int
    from psdlab.validation.importers import load_traces
    from psdlab.sim.costs.fitted import read_fit_file
    from psdlab.validation.model_file import acceptance_spec
    from psdlab.validation.replay_model import ReplayParams
    from psdlab.validation.report import format_summary, format_table, write_report
    from psdlab.validation.serving_results.replay import bench_inputs
    from psdlab.validation.validate import trace_name, validate

    seeds = check_int("--seeds", seeds, 1, 50)
    if bench_inputs(traces):
        if output or raw or acceptance:
            raise ValueError("-o/--raw/--acceptance: not used with bench results as "
                             "measurements")
        return _bench(model, traces, seeds, as_json)
    doc = read_fit_file(model, "model").doc
    spec = acceptance_spec(doc, acceptance) if acceptance else None
    named: list[tuple[str, Any]] = []
    used: set[str] = set()
    for path in traces:
        for tr in load_traces(path):
            named.append((trace_name(path, tr, used), tr))
    result = validate(model, named, seeds=range(seeds), params=ReplayParams() if raw else None,
                      acceptance=spec)
    files = {}
    if output:
        files = write_report(output, result, named, title="psdlab validate report")
    if as_json:
        return Printout([json.dumps({**result.to_dict(), "files": files}, allow_nan=False,
                                    default=str)])
    rows = result.rows if all_rows else [r for r in result.rows if r.metric in SHOWN
                                         or r.metric.startswith(("gain.", "speedup."))]
    out = [format_table(rows), "", format_summary(result.summary())]
    if files:
        out.append(f"wrote {files['report']}")
    return Printout(out, [f"note: {note}" for note in result.notes])
