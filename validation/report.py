"""The validation report: tables as text, CSVs, and one markdown file with the figures.

``write_report(out_dir, validation, ...)`` writes

- ``comparison.csv``: every predicted-vs-measured row (run, metric, measured, predicted, error,
  error kind, source);
- ``summary.csv``: the worst error per target (``validation.validate.TARGETS``);
- ``runs.csv``: the measured headline metrics of every run (plus its role when known);
- ``calibration.csv``: the fitted cost coefficients with 95% intervals and held-out errors;
- the figures of ``validation.report_figs`` (PNG, each with the CSV behind it);
- ``report.md``: all of the above as markdown tables and embedded figures.

``format_table`` and ``format_summary`` give the same tables as plain text for the terminal.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np

from psdlab.validation.compare import Row
from psdlab.validation.tables import md_table, write_table_csv

ROW_COLUMNS = ("run", "metric", "label", "unit", "measured", "predicted", "error",
               "error_kind", "source")
RUN_COLUMNS = ("run", "role", "mode", "k", "m", "arrivals", "load_1min", "requests",
               "output_tokens",
               "throughput_tok_s", "decode_throughput_tok_s", "tpot.mean", "e2e.p99",
               "acceptance_rate", "mean_draft_time_s", "mean_verify_time_s")


def fmt_value(x: float | None, unit: str = "") -> str:
    if x is None:
        return "n/a"
    if unit == "s":
        return f"{x * 1e3:.1f} ms" if abs(x) < 1 else f"{x:.3f} s"
    if unit == "tok/s":
        return f"{x:.2f}"
    return f"{x:.3f}"


def fmt_error(row: Row) -> str:
    if row.error is None:
        return "n/a"
    if row.error_kind == "pp":
        return f"{row.error:+.1f} pp"
    return f"{100 * row.error:+.1f}%"


def _gain_value(row: Row, x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:+.1f}%" if row.error_kind == "pp" else f"{x:.3f}x"


def row_cells(row: Row) -> list[str]:
    if row.metric.startswith(("gain.", "speedup.")):
        meas, pred = _gain_value(row, row.measured), _gain_value(row, row.predicted)
    else:
        meas, pred = fmt_value(row.measured, row.unit), fmt_value(row.predicted, row.unit)
    return [row.run, row.label, meas, pred, fmt_error(row), row.source]


def _text_table(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h)
              for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in body]
    return "\n".join(lines)


TABLE_HEADER = ["run", "metric", "measured", "predicted", "error", "by"]


def format_table(rows: Sequence[Row]) -> str:
    return _text_table(TABLE_HEADER, [row_cells(r) for r in rows])


def _bound(item: Mapping[str, Any]) -> str:
    b = item["bound"]
    if b is None:
        return "none (listed)"
    return f"{b:g} pp" if item["kind"] == "pp" else f"{100 * b:g}%"


def _err(item: Mapping[str, Any], key: str) -> str:
    return fmt_err(item["kind"], item[key])


def fmt_err(kind: str, v: float) -> str:
    """An error or its noise in its target's units: percentage points or percent."""
    return f"{v:.1f} pp" if kind == "pp" else f"{100 * v:.1f}%"


def fmt_num(v: Any, fmt: str) -> str:
    """``v`` in format ``fmt``, or n/a."""
    return "n/a" if v is None else format(v, fmt)


def _noise_cells(s: Mapping[str, Any]) -> list[str]:
    se, z, chance = (s.get(k) for k in ("noise_se", "error_over_noise", "noise_break_chance"))
    return ["n/a" if se is None else fmt_err(s["kind"], se),
            "n/a" if z is None else f"{z:.2f}",
            "n/a" if chance is None else f"{100 * chance:.0f}%"]


def summary_cells(summary: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    return [[s["target"], s["source"], str(s["n"]), _err(s, "mean_abs_error"),
             _err(s, "max_abs_error"), s["worst_run"], _bound(s),
             "n/a" if s["within"] is None else "yes" if s["within"] else "NO",
             *_noise_cells(s)]
            for s in summary]


SUMMARY_HEADER = ["target", "by", "n", "mean |error|", "max |error|", "worst run", "bound",
                  "within", "noise SE", "rms error / SE", "P(noise alone breaks bound)"]

#: what the three noise columns mean, under every summary table that has them
NOISE_NOTE = ("*noise SE*: typical standard error of a measured median from the repeats' "
              "run-to-run noise (pooled over the configurations of one arrival pattern, "
              "`validation.noise`); *rms error / SE*: about 1 when the errors are what that "
              "noise alone gives, well above 1 when the model adds its own; *P(noise alone "
              "breaks bound)*: the chance that a perfect prediction still shows an error "
              "beyond the bound on at least one of the n runs, from the measurement noise "
              "alone, the SD and PSD runs of one workload counted with the correlation of "
              "their rounds (they serve the same prompts), other runs as independent, and the "
              "calibration runs' noise as one shift common to every run of a target "
              "(`validation.noise.calibration_se`; not for PSD/SD ratios, which cancel it). "
              "Still left out: the acceptance model's and the contention estimate's own "
              "sampling error, so the chance is a lower bound.")


def format_summary(summary: Sequence[Mapping[str, Any]]) -> str:
    return _text_table(SUMMARY_HEADER, summary_cells(summary))


# ---------------------------------------------------------------------------- files

def run_rows(named: Sequence[tuple[str, Any]], roles: Mapping[str, str] | None = None
             ) -> list[dict[str, Any]]:
    from psdlab.analysis.metrics import summarize
    from psdlab.validation.compare import flatten
    out = []
    for name, tr in named:
        s = flatten(summarize(tr))
        arrivals = "offline" if all(r.arrival == 0 for r in tr.requests) else "timed"
        load = (tr.run.extra or {}).get("load_1min")
        out.append({"run": name, "role": (roles or {}).get(name, ""), "mode": tr.run.mode,
                    "k": tr.run.k, "m": tr.run.m, "arrivals": arrivals,
                    "load_1min": load if isinstance(load, (int, float)) else None,
                    **{c: s.get(c) for c in RUN_COLUMNS[7:]}})
    return out


SPREAD_KEYS = ("throughput_tok_s", "tpot.mean", "e2e.p99")


def spread_rows(validation: Any) -> list[dict[str, Any]]:
    """Per configuration run more than once: the repeats, their load, and the spread
    ((max - min) / median) of the headline metrics -- the measurement's own noise."""
    out = []
    for c in validation.comparisons:
        if len(c.repeats) < 2:
            continue
        loads = [(t.run.extra or {}).get("load_1min") for t in c.repeats]
        out.append({"config": c.name, "repeats": len(c.repeats),
                    "load_1min": " / ".join("n/a" if not isinstance(x, (int, float))
                                            else f"{x:.2f}" for x in loads),
                    **{k: c.spread.get(k) for k in SPREAD_KEYS}})
    return out


def _spread_md(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    def pct(x: Any) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"
    body = [[r["config"], str(r["repeats"]), r["load_1min"], *(pct(r[k]) for k in SPREAD_KEYS)]
            for r in rows]
    med = ["median", "", "", *(pct(float(np.median(v))) if v else "n/a" for v in
                               ([r[k] for r in rows if r[k] is not None] for k in SPREAD_KEYS))]
    return ["## Noise floor: spread between repeats of one configuration", "",
            "Each configuration ran more than once (seeded random order, SD and PSD of one "
            "configuration back to back); the comparisons use the median over the repeats. "
            "(max - min) / median over the repeats is the machine's own run-to-run noise.", "",
            md_table(["config", "runs", "load (1 min) per run", "throughput", "mean TPOT",
                      "p99 e2e"], body + [med]), ""]


def calibration_rows(model: Mapping[str, Any]) -> list[dict[str, Any]]:
    fits = (model.get("meta") or {}).get("fits") or {}
    out = []
    for name, fit in fits.items():
        for term, value in (fit.get("coef") or {}).items():
            lo, hi = (fit.get("ci95") or {}).get(term, [None, None])
            out.append({"fit": name, "term": term, "estimate_s": value, "ci95_low": lo,
                        "ci95_high": hi,
                        "identified": (fit.get("identified") or {}).get(term),
                        "n": fit.get("n"), "heldout_error": fit.get("heldout_error")})
    return out


def write_tables(out_dir: str, validation: Any, runs: Sequence[dict[str, Any]],
                 model: Mapping[str, Any] | None, summary_runs: set[str] | None = None
                 ) -> dict[str, str]:
    os.makedirs(out_dir, exist_ok=True)
    files = {
        "comparison": write_table_csv(os.path.join(out_dir, "comparison.csv"), ROW_COLUMNS,
                                [r.to_dict() for r in validation.rows]),
        "summary": write_table_csv(os.path.join(out_dir, "summary.csv"),
                             ("target", "metric", "source", "n", "mean_abs_error",
                              "max_abs_error", "worst_run", "bound", "kind", "within",
                              "noise_se", "error_over_noise", "noise_break_chance"),
                             validation.summary(summary_runs)),
        "runs": write_table_csv(os.path.join(out_dir, "runs.csv"), RUN_COLUMNS, runs),
    }
    if model is not None:
        files["calibration"] = write_table_csv(
            os.path.join(out_dir, "calibration.csv"),
            ("fit", "term", "estimate_s", "ci95_low", "ci95_high", "identified", "n",
             "heldout_error"), calibration_rows(model))
    return files


# ---------------------------------------------------------------------------- markdown

def _fig(md: list[str], figures: Mapping[str, str], key: str, caption: str) -> None:
    if key in figures:
        md += [f"![{caption}]({os.path.basename(figures[key])})", "", f"*{caption}* "
               f"(data: `{key}.csv`)", ""]


def write_report(out_dir: str, validation: Any, named: Sequence[tuple[str, Any]], *,
                 roles: Mapping[str, str] | None = None, title: str = "psdlab validation",
                 intro: Sequence[str] = (), headline: Sequence[str] = (),
                 figures: bool = True, summary_runs: set[str] | None = None,
                 noise_runs: set[str] | None = None,
                 alternatives: Sequence[tuple[str, Any]] = (),
                 sections: Sequence[str] = ()) -> dict[str, str]:
    """Write the CSVs, figures and ``report.md`` (module docstring); returns the file paths.
    ``alternatives``: (what differs, Validation) replays of the same runs under another
    model, whose summaries over ``summary_runs`` are shown after the targets; ``sections``:
    markdown lines put after them (e.g. ``validation.demo.report_sections``)."""
    roles = dict(roles or {})
    os.makedirs(out_dir, exist_ok=True)
    model = validation.model.doc
    runs = run_rows(named, roles)
    files = write_tables(out_dir, validation, runs, model, summary_runs)
    figs: dict[str, str] = {}
    if figures:
        from psdlab.validation.report_figs import all_figures
        figs = all_figures(out_dir, validation, named, roles)
    files.update(figs)
    md = [f"# {title}", ""] + list(intro) + [""]
    if headline:
        md += ["## Result", "", "```", *headline, "```", ""]
    scope = "held-out runs" if summary_runs is not None else "all runs compared"
    md += [f"## Against the targets (worst |error| over the {scope})", "",
           md_table(SUMMARY_HEADER, summary_cells(validation.summary(summary_runs))), "",
           NOISE_NOTE, ""]
    for label, alt in alternatives:
        md += [f"### The same held-out runs {label}", "",
               md_table(SUMMARY_HEADER, summary_cells([x for x in alt.summary(summary_runs)
                                                        if x["source"] == "sim"])), ""]
    md += list(sections)
    spreads = spread_rows(validation)
    if spreads:
        files["repeats"] = write_table_csv(os.path.join(out_dir, "repeats.csv"),
                                     ("config", "repeats", "load_1min", *SPREAD_KEYS), spreads)
        md += _spread_md(spreads)
    if noise_runs:
        md += ["## Noise floor: calibration configurations run again", "",
               "The same configurations as calibration runs, measured again at the end: "
               "their errors are the machine's own drift between runs, not the model's.", "",
               md_table(SUMMARY_HEADER, summary_cells(validation.summary(noise_runs))), ""]
    held = [c for c in validation.comparisons if roles.get(c.name, "validate") == "validate"]
    md += ["## Held-out runs: predicted vs measured", ""]
    keys = ("throughput_tok_s", "tpot.mean", "e2e.p99", "ttft.mean", "acceptance_rate")
    body = [row_cells(r) for c in held for r in c.rows if r.metric in keys]
    md += [md_table(TABLE_HEADER, body), ""]
    ext = extrapolation_rows(validation, roles)
    if ext:
        md += ["## What each held-out run extrapolates", "", md_table(
            ["run", "differs from the calibration runs in", "throughput", "mean TPOT",
             "p99 e2e", "PSD/SD gain"],
            [[r["run"], r["differs"], *r["errors"]] for r in ext]), ""]
    md += ["## PSD/SD gain", "", md_table(TABLE_HEADER, [row_cells(r) for g in validation.gains
                                                        for r in g.rows]), ""]
    md += _schedule_md(out_dir, validation, files)
    _fig(md, figs, "predicted_vs_measured", "simulator vs measured")
    _fig(md, figs, "gains", "PSD/SD gains")
    _fig(md, figs, "throughput_vs_k", "throughput vs k")
    _fig(md, figs, "phase_fit", "calibrated phase-time model vs measured phases")
    md += ["## Measured runs", "", md_table(
        ["run", "role", "mode", "k", "m", "arrivals", "load (1 min)", "tok/s", "mean TPOT",
         "p99 e2e", "VSR"],
        [[r["run"], r["role"], r["mode"], str(r["k"]), str(r["m"]), r["arrivals"],
          "n/a" if r["load_1min"] is None else f"{r['load_1min']:.2f}",
          fmt_value(r["throughput_tok_s"], "tok/s"), fmt_value(r["tpot.mean"], "s"),
          fmt_value(r["e2e.p99"], "s"), fmt_value(r["acceptance_rate"])] for r in runs]), ""]
    md += _calibration_md(validation, model)
    md += ["", "## All rows", "", md_table(TABLE_HEADER, [row_cells(r)
                                                         for r in validation.rows]), ""]
    path = os.path.join(out_dir, "report.md")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(md) + "\n")
    files["report"] = path
    return files


def _calibration_md(validation: Any, model: Mapping[str, Any]) -> list[str]:
    """The report's calibration section: the replay's parameters, the identified fits, notes."""
    rp = validation.params
    md = ["## Calibration", "", f"Model file: `{os.path.basename(validation.model_path)}` "
           f"(phase-time fits on serial steps, unbiased for the mean). "
           f"Controller overhead per decode step: {1e3 * rp.overhead_serial:.2f} ms serial, "
           f"{1e3 * rp.overhead_overlapped:.2f} ms overlapped; overlap contention (share of "
           f"solo speed lost while the other device runs): target "
           f"{rp.contention_target:+.3f}, drafter {rp.contention_drafter:+.3f}; overlapped / "
           f"serial time over the calibration runs: target x{rp.slowdown[0]:.3f}, drafter "
           f"x{rp.slowdown[1]:.3f}; step-time jitter CV {rp.jitter_cv:.3f}; simulator seeds "
           f"averaged: {len(validation.seeds)}.",
           "",
           md_table(["fit", "term", "estimate (ms)", "95% CI (ms)", "held-out error"],
                    [[r["fit"], r["term"], _ms(r["estimate_s"]),
                      f"[{_ms(r['ci95_low'])}, {_ms(r['ci95_high'])}]",
                      "n/a" if r["heldout_error"] is None else
                      f"{100 * r['heldout_error']:.1f}%"]
                     for r in calibration_rows(model) if r["identified"]]), ""]
    cal_meta = (model.get("meta") or {}).get("calibration") or {}
    for note in list(cal_meta.get("notes", [])) + list(validation.notes):
        md.append(f"- note: {note}")
    for warning in cal_meta.get("warnings", []):
        md.append(f"- warning: {warning}")
    return md


def _schedule_md(out_dir: str, validation: Any, files: dict[str, str]) -> list[str]:
    """``schedule.csv`` and its section: does each replay take its run's schedule?"""
    from psdlab.validation.schedule import agreement_rows
    rows = agreement_rows(validation)
    if not rows:
        return []
    files["schedule"] = write_table_csv(os.path.join(out_dir, "schedule.csv"),
                                  ("run", "steps_measured", "steps_replayed", "matched",
                                   "share", "first_difference"), rows)
    body = [[r["run"], str(r["steps_measured"]), str(r["steps_replayed"]),
             f"{100 * r['share']:.0f}%",
             "none" if r["first_difference"] is None else str(r["first_difference"])]
            for r in rows]
    return ["## Does the replay take the run's schedule?", "",
            "Each step told by what it did (a prefill of n sequences, or the requests it "
            "verified); the first run of each configuration against its replay "
            "(`validation.schedule`).  With greedy match patterns an offline replay should "
            "make the run's steps in the run's order; positions the patterns do not know, and "
            "arrival times against step boundaries (Poisson runs), make it drift.", "",
            md_table(["run", "steps measured", "steps replayed", "matched", "first difference"],
                     body), ""]


def _ms(x: Any) -> str:
    return "inf" if x is None else f"{1e3 * float(x):.4g}"


def _timed(trace: Any) -> bool:
    return any(r.arrival > 0 for r in trace.requests)


def extrapolation_rows(validation: Any, roles: Mapping[str, str]) -> list[dict[str, Any]]:
    """Per held-out run: how it differs from the calibration runs, and its key errors."""
    cal = [c.trace for c in validation.comparisons if roles.get(c.name) == "calibrate"]
    if not cal:
        return []
    ks = sorted({t.run.k for t in cal if t.run.mode != "ar"})
    ms = sorted({t.run.m for t in cal})
    cal_timed = any(_timed(t) for t in cal)
    gain_err = {}
    for g in validation.gains:
        for r in g.rows:
            if r.metric == "gain.throughput_tok_s" and r.error is not None:
                gain_err[g.sd] = gain_err[g.psd] = f"{r.error:+.1f} pp"
    out = []
    for c in validation.comparisons:
        if roles.get(c.name, "validate") != "validate":
            continue
        run, diff = c.trace.run, []
        if run.mode != "ar" and run.k not in ks:
            where = "between" if ks and ks[0] < run.k < ks[-1] else "outside"
            diff.append(f"k = {run.k} ({where} fitted k {', '.join(map(str, ks))})")
        if run.m not in ms:
            diff.append(f"m = {run.m} (fitted m {', '.join(map(str, ms))})")
        if _timed(c.trace) and not cal_timed:
            diff.append("timed arrivals (fitted offline)")
        errs = {r.metric: r for r in c.rows}
        cells = [fmt_error(errs[m]) if m in errs else "n/a"
                 for m in ("throughput_tok_s", "tpot.mean", "e2e.p99")]
        out.append({"run": c.name, "differs": "; ".join(diff) or "nothing (a repeat)",
                    "errors": cells + [gain_err.get(c.name, "n/a")]})
    return out
