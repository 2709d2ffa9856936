"""The demo's report: the verdict first, then what a reader needs to trust it.

``write_demo_report`` writes ``report.md`` into the demo folder.  It leads with the verdict: the
measured and predicted PSD/SD gain, then every judged target over the held-out runs beside the
same target over the calibration runs (max |error|, within the bound or not, the noise SE and
the chance that noise alone breaks the bound), then one figure (simulator vs measured).  The
CSVs behind it (``comparison.csv``, ``summary.csv``, ``runs.csv``, ``calibration.csv``) are
always written.  With ``diagnostics`` the full validation report (``validation.report``) and
the demo's diagnostic sections (``validation.demo.report_sections``) follow the verdict.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

from psdlab.validation.demo.report_sections import SIDE_HEADER, side_by_side
from psdlab.validation.report import (TABLE_HEADER, fmt_value, row_cells, run_rows,
                                      write_report, write_tables)
from psdlab.validation.report_figs import predicted_vs_measured
from psdlab.validation.tables import md_table

#: the judged metrics shown per held-out run in the short report
RUN_METRICS = ("throughput_tok_s", "tpot.mean", "e2e.p99", "acceptance_rate")


def verdict_lines(validation: Any, headline: Sequence[str], held: set[str],
                  cal: set[str]) -> list[str]:
    """The verdict: the headline, then held-out beside calibration per target."""
    return ["## Verdict", "", "```", *headline, "```", "",
            "Every judged target over the held-out runs (prompts and configurations no "
            "calibration run used) beside the same target over the calibration runs. "
            "*noise SE*: the standard error of a measured median from the repeats' "
            "run-to-run noise; *P(noise breaks)*: the chance that a perfect prediction "
            "would still miss the bound on at least one run, from that noise alone.", "",
            md_table(SIDE_HEADER, side_by_side(validation.summary(held),
                                               validation.summary(cal))), ""]


def _runs_table(validation: Any, held: set[str]) -> list[str]:
    rows = [r for c in validation.comparisons if c.name in held for r in c.rows
            if r.metric in RUN_METRICS]
    if not rows:
        return []
    return ["## Held-out runs: predicted vs measured", "",
            md_table(TABLE_HEADER, [row_cells(r) for r in rows]), ""]


def _measured_runs(runs: Sequence[dict[str, Any]]) -> list[str]:
    body = [[r["run"], r["role"], r["mode"], str(r["k"]), str(r["m"]), r["arrivals"],
             fmt_value(r["throughput_tok_s"], "tok/s"), fmt_value(r["tpot.mean"], "s")]
            for r in runs]
    return ["## Measured runs", "", md_table(
        ["run", "role", "mode", "k", "m", "arrivals", "tok/s", "mean TPOT"], body), ""]


def write_demo_report(out_dir: str, validation: Any, named: Sequence[tuple[str, Any]], *,
                      roles: dict[str, str], held: set[str], cal: set[str],
                      repeats: set[str], headline: Sequence[str], intro: Sequence[str],
                      sections: Sequence[str] = (), diagnostics: bool = False,
                      psd_inputs: Sequence[str] = ()) -> dict[str, str]:
    """Write ``report.md`` and the CSVs (module docstring); returns the file paths.
    ``psd_inputs``: the section on what PSD was predicted from (``validation.psd_step``),
    after the held-out runs."""
    verdict = verdict_lines(validation, headline, held, cal)
    if diagnostics:
        return write_report(out_dir, validation, named, roles=roles,
                            title="psdlab demo report (with diagnostics)",
                            intro=[*verdict, *psd_inputs, "## Set-up", "", *intro],
                            summary_runs=held, noise_runs=repeats, sections=sections)
    os.makedirs(out_dir, exist_ok=True)
    runs = run_rows(named, roles)
    files = write_tables(out_dir, validation, runs, validation.model.doc, held)
    figure = predicted_vs_measured(out_dir, validation, roles)
    files["predicted_vs_measured"] = figure
    md = ["# psdlab demo report", "", *verdict,
          f"![simulator vs measured]({os.path.basename(figure)})", "",
          "*Simulator vs measured, every run (held-out runs in red; data: "
          "`predicted_vs_measured.csv`).*", "",
          *_runs_table(validation, held), *psd_inputs,
          "## Set-up", "", *(f"- {line}" for line in intro), "",
          *_measured_runs(runs),
          "## Files", "",
          "`comparison.csv` (every predicted-vs-measured row), `summary.csv` (the targets), "
          "`runs.csv` (every run), `calibration.csv` (the fitted costs with 95% intervals), "
          "`model.json` (the calibrated model: `psdlab validate --model model.json "
          "traces/*.jsonl` replays them again), `results.json` (every judged figure with the "
          "machine, date and commit). `psdlab demo --diagnostics` adds the diagnostic "
          "sections: the acceptance candidates, replays under diagnostic acceptance models, "
          "the noise budget, the closed form's inputs, the calibration's fits.", ""]
    path = os.path.join(out_dir, "report.md")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(md) + "\n")
    files["report"] = path
    return files
