"""Report sections on how the predictions transfer to prompts the calibration never served.

``transfer_sections`` gives markdown lines for ``validation.report.write_report``:

- what the chance that noise alone breaks a bound would need: the repeats of every
  configuration at which it is at most 10% (``validation.demo.noise_budget``; the held-out
  beside calibration table itself, `side_by_side`, leads the report: ``demo_report``);
- the acceptance-model candidates and their leave-one-prompt-out cross-validation scores over
  the calibration prompts (``validation.acceptance.cross_validation``), the one chosen;
- the held-out targets under the diagnostic acceptance models (the id-keyed replay of the
  calibration match patterns, per-position rates only, every run's own match patterns);
- the closed form: the consistency check (t and V from the pair's own SD run) beside the true
  prediction (calibrated t, V, overhead; fitted acceptance).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from psdlab.validation.tables import md_table
from psdlab.validation.report import fmt_num


def error_text(kind: str, v: Any) -> str:
    """An error or noise figure in its kind's unit: ``pp`` as points, else a percentage."""
    if v is None:
        return "n/a"
    return f"{v:.1f} pp" if kind == "pp" else f"{100 * v:.1f}%"


def _cells(s: Mapping[str, Any] | None) -> list[str]:
    if s is None:
        return ["-", "-", "-", "-"]
    chance = s.get("noise_break_chance")
    return [f"{error_text(s['kind'], s['max_abs_error'])} ({s['n']})",
            "n/a" if s["within"] is None else "yes" if s["within"] else "NO",
            error_text(s["kind"], s.get("noise_se")),
            "n/a" if chance is None else f"{100 * chance:.0f}%"]


def side_by_side(held: Sequence[Mapping[str, Any]], cal: Sequence[Mapping[str, Any]]
                 ) -> list[list[str]]:
    by_cal = {s["target"]: s for s in cal}
    out = []
    for s in held:
        bound = ("none" if s["bound"] is None else
                 f"{s['bound']:g} pp" if s["kind"] == "pp" else f"{100 * s['bound']:g}%")
        out.append([s["target"], bound, *_cells(s), *_cells(by_cal.get(s["target"]))])
    return out


SIDE_HEADER = ["target", "bound", "held-out: max |error| (n)", "within", "noise SE",
               "P(noise breaks)", "calibration: max |error| (n)", "within", "noise SE",
               "P(noise breaks)"]


def budget_section(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What P(noise breaks) <= 10% would take on the held-out runs: ``rows`` of
    ``validation.demo.noise_budget.budget``."""
    from psdlab.validation.demo.noise_budget import CHANCE, MOST
    if not rows:
        return []

    def need(r: Mapping[str, Any]) -> str:
        return f"over {MOST}" if r["repeats_needed"] is None else str(r["repeats_needed"])

    def secs(r: Mapping[str, Any]) -> str:
        return "n/a" if r["run_s_needed"] is None else f"{r['run_s_needed']:.0f} s"

    one = rows[0]
    return ["### What P(noise breaks) <= 10% would take", "",
            f"Per held-out target: the repeats its configurations had, the chance now, and the "
            f"fewest runs of every configuration (calibration too) at which the noise these "
            f"runs measured breaks the bound with chance at most {100 * CHANCE:.0f}% "
            f"(`validation.demo.noise_budget`), with the run time that many rounds take: "
            f"{one['round_s']:.0f} s a round (the runs' own durations, start-up between runs "
            f"left out); these runs took {one['run_s_now']:.0f} s. Assumes the machine stays "
            f"as noisy as these runs measured.", "",
            md_table(["target", "bound", "repeats now", "P(noise breaks) now",
                      f"repeats for <= {100 * CHANCE:.0f}%", "run time of those rounds"],
                     [[r["target"], error_text(r["kind"], r["bound"]) if r["kind"] == "pp"
                       else f"{100 * r['bound']:g}%",
                       fmt_num(r["repeats_now"], "g"),
                       "n/a" if r["chance_now"] is None else f"{100 * r['chance_now']:.0f}%",
                       need(r), secs(r)] for r in rows]), ""]


def _chosen_text(selection: Mapping[str, Any]) -> str:
    """The chosen spec, a drawn-pattern pool summarised (its patterns are in model.json)."""
    spec = dict(selection.get("spec") or {})
    if spec.get("name") == "resampled":
        counts = {s: len(p) for s, p in (spec.get("styles") or {}).items()}
        return f"`resampled`, patterns per style {counts} (listed in model.json)"
    return f"`{spec}`"


def transfer_sections(validation: Any, held: set[str], cal: set[str],
                      diagnostics: Sequence[tuple[str, Any]],
                      selection: Mapping[str, Any] | None,
                      budget: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    # the held-out beside calibration table itself leads the report (``demo_report``)
    md = budget_section(budget)
    if selection:
        md += ["## The acceptance model: candidates", "",
               f"Chosen by {selection.get('method', 'cross-validation')} "
               f"({len(selection.get('prompts', []))} prompts; the held-out runs were not "
               f"used): lowest CRPS of the left-out prompt's accepted draft tokens per "
               f"verification against the candidate's distribution for a new prompt of its "
               f"style (`validation.acceptance.cross_validation`); the negative "
               f"log-likelihood per tried "
               f"draft token (request level integrated out) beside it, where the candidate "
               f"has one.", "",
               md_table(["candidate", "CV CRPS", "CV NLL / token",
                         "CV rms error of accepted tokens", "chosen"],
                        [[r["candidate"], fmt_num(r.get("cv_crps"), ".4f"),
                          fmt_num(r.get("cv_nll_per_token"), ".4f"),
                          fmt_num(r.get("cv_accept_error"), ".1%"),
                          "yes" if r.get("chosen") else ""]
                         for r in selection.get("scores", [])]), "",
               f"Chosen: {_chosen_text(selection)}", ""]
    for label, alt in diagnostics:
        md += [f"### Diagnostic: the same runs {label}", "",
               md_table(SIDE_HEADER, side_by_side(
                   [x for x in alt.summary(held) if x["source"] == "sim"],
                   [x for x in alt.summary(cal) if x["source"] == "sim"])), ""]
    from psdlab.validation.results_file import closed_form_rows
    cf = closed_form_rows(validation, held)
    if cf:
        def x(v: Any) -> str:
            return "n/a" if v is None else f"{v:.3f}"

        body = []
        for r in cf:
            c, p = r["check_inputs"], r["prediction_inputs"] or {}
            body.append([r["pair"], x(r["measured_steady_speedup"]),
                         f"{x(r['consistency_check'])} "
                         f"({error_text('rel', r['consistency_error'])})",
                         f"{x(r['prediction'])} ({error_text('rel', r['prediction_error'])})",
                         f"{1e3 * c['t']:.1f} / {1e3 * c['V']:.1f}",
                         "n/a" if not p else f"{1e3 * p['t']:.1f} / {1e3 * p['V']:.1f}"])
        md += ["## Closed form: consistency check and prediction", "",
               "Consistency check: t, V, overhead and tokens per verification read from the "
               "held-out pair's own SD run. Prediction: t and V from the calibrated cost "
               "models at the pair's k and m, the calibrated overhead and jitter, tokens per "
               "verification from the fitted acceptance model.", "",
               md_table(["pair", "measured steady speedup", "check (error)",
                         "prediction (error)", "check t / V (ms)", "predicted t / V (ms)"],
                        body), ""]
    return md
