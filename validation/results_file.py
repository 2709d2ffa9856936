"""The demo's results file, ``results.json``: every judged figure with where it was measured.

What the README quotes must come from a file the demo wrote, and the file must say on which
machine, when and from which commit: ``machine_info`` (CPU model, the SIMD flags that decide
torch's CPU kernels, cores, load averages before and after the runs), ``git_info`` (commit,
and whether the working tree had uncommitted changes on top of it), and the figures:

- ``targets.heldout`` / ``targets.calibration``: the summary against the targets
  (``validation.validate.TARGETS``) over the held-out runs (held-out prompts and
  configurations) and over the calibration runs (in-sample), each target with its noise SE
  and the chance that noise alone breaks its bound;
- ``diagnostics``: the same held-out summary under other acceptance models (the id-keyed
  replay of the calibration match patterns, the per-position rates);
- ``acceptance_model``: the candidates and their cross-validation scores over the
  calibration prompts, and the one chosen;
- ``comparisons``: measured and predicted throughput of the held-out offline runs by
  concurrency (``concurrency_rows``: AR, SD and PSD at the same number of requests in flight,
  and PSD against SD at the same batch size m, where PSD holds 2m);
- ``closed_form``: per offline held-out pair the consistency check (t, V from the pair's own
  SD run) and the true prediction (calibrated models);
- ``calibrated_replay`` (controller overhead, overlap contention, jitter of the fit),
  ``repeat_spread`` (per configuration the repeats' loads and spread), ``rows`` (every
  predicted-vs-measured row, with its run's role) and ``diagnostic_rows``;
- ``prompt_sampling`` (added by the demo, ``validation.prompt_sampling``): accepted tokens
  per verification on each prompt side, measured and predicted, and the standard error
  prompt sampling alone gives their difference; ``matched_k``: the sides like for like, per
  style, at the largest k both served.
"""
from __future__ import annotations

import datetime as _dt
import os
from typing import Any, Mapping, Sequence

from psdlab.analysis.version import git_commit

#: CPU flags worth recording (torch's CPU kernels dispatch on them)
FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
         "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "neon", "asimd", "sve")


def _load() -> list[float] | None:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def machine_info(load_before: Sequence[float] | None = None) -> dict[str, Any]:
    """CPU model, flags (of ``FLAGS``), cores, load averages (1 / 5 / 15 min)."""
    model = "unknown"
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                key, _, val = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model", "Hardware") and model == "unknown":
                    model = val.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(val.split())
    except OSError:
        pass
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"cpu_model": model, "cpu_flags": [f for f in FLAGS if f in flags],
            "cpus": os.cpu_count(), "cpus_usable": affinity,
            "load_before": None if load_before is None else list(load_before),
            "load_after": _load()}


def git_info(path: str | None = None) -> dict[str, Any]:
    """Commit of the package's checkout and whether the tree has uncommitted changes."""
    git = git_commit(path or os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                     untracked=False)
    return {"commit": git.full, "short": git.full[:7] if git.full else None,
            "tree": None if git.dirty is None else
            ("uncommitted changes on top of HEAD" if git.dirty else "clean")}


def in_flight(mode: str, m: int) -> int:
    """Requests a run holds in flight: PSD runs two batches of m."""
    return 2 * m if mode == "psd" else m


def concurrency_rows(validation: Any, roles: Mapping[str, str]) -> list[dict[str, Any]]:
    """Measured and predicted throughput of every offline held-out-prompt configuration
    (roles ``validate`` and ``reference``), with its requests in flight."""
    out = []
    for c in validation.comparisons:
        run = c.trace.run
        if roles.get(c.name) not in ("validate", "reference"):
            continue
        if any(r.arrival > 0 for r in c.trace.requests):
            continue
        out.append({"config": c.name, "mode": run.mode, "k": run.k, "m": run.m,
                    "in_flight": in_flight(run.mode, run.m), "repeats": len(c.repeats or [1]),
                    "measured_tok_s": c.measured.get("throughput_tok_s"),
                    "predicted_tok_s": c.predicted.get("throughput_tok_s")})
    return out


def _ratio(a: Any, b: Any) -> float | None:
    return None if a is None or not b else a / b - 1.0


def headline_comparisons(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """PSD against SD at the same batch size (iso-batch: PSD holds 2m in flight, SD m), PSD
    against SD and AR at the same requests in flight (iso-concurrency), each measured and
    predicted (throughput ratio - 1)."""
    psd = [r for r in rows if r["mode"] == "psd"]
    others = [r for r in rows if r["mode"] != "psd"]
    out = []
    for p in psd:
        for o in others:
            same_k = o["mode"] == "ar" or o["k"] == p["k"]
            if not same_k:
                continue
            if o["mode"] != "ar" and o["m"] == p["m"]:
                basis = "iso-batch"
            elif o["in_flight"] == p["in_flight"]:
                basis = "iso-concurrency"
            else:
                continue
            out.append({"psd": p["config"], "other": o["config"], "other_mode": o["mode"],
                        "basis": basis, "in_flight": [p["in_flight"], o["in_flight"]],
                        "psd_tok_s": p["measured_tok_s"], "other_tok_s": o["measured_tok_s"],
                        "measured_gain": _ratio(p["measured_tok_s"], o["measured_tok_s"]),
                        "predicted_gain": _ratio(p["predicted_tok_s"], o["predicted_tok_s"])})
    return out


def headline_lines(comparisons: Sequence[Mapping[str, Any]]) -> list[str]:
    """The report's result lines: what each gain compares, measured and predicted."""
    lines = []
    for c in comparisons:
        what = ("PSD vs SD, same batch size m (PSD holds 2m in flight, SD m)"
                if c["basis"] == "iso-batch" else
                f"PSD vs {c['other_mode'].upper()}, same requests in flight "
                f"({c['in_flight'][0]})")
        meas = "n/a" if c["measured_gain"] is None else f"{100 * c['measured_gain']:+.1f}%"
        pred = "n/a" if c["predicted_gain"] is None else f"{100 * c['predicted_gain']:+.1f}%"
        lines.append(f"{c['psd']} vs {c['other']}: {what}: measured {meas} "
                     f"({c['psd_tok_s']:.1f} vs {c['other_tok_s']:.1f} tok/s), "
                     f"predicted {pred}")
    return lines


def closed_form_rows(validation: Any, only: set[str]) -> list[dict[str, Any]]:
    out = []
    for g in validation.gains:
        if g.sd not in only or g.psd not in only or g.closed_form is None:
            continue
        rows = {r.metric: r for r in g.rows}
        check, pred = rows.get("speedup.steady"), rows.get("speedup.steady.predicted")
        out.append({"pair": g.name, "measured_steady_speedup": check.measured if check else None,
                    "consistency_check": check.predicted if check else None,
                    "consistency_error": check.error if check else None,
                    "prediction": pred.predicted if pred else None,
                    "prediction_error": pred.error if pred else None,
                    "check_inputs": g.closed_form.to_dict(),
                    "prediction_inputs": g.predicted_cf.to_dict() if g.predicted_cf else None})
    return out


def build_results(*, validation: Any, roles: Mapping[str, str], held: set[str],
                  calibration: set[str], diagnostics: Sequence[tuple[str, Any]],
                  selection: Mapping[str, Any] | None, timings: Mapping[str, Any],
                  plan: Mapping[str, Any], load_before: Sequence[float] | None
                  ) -> dict[str, Any]:
    rows = concurrency_rows(validation, roles)
    return {"format": "psdlab.demo-results", "version": 1,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "git": git_info(), "machine": machine_info(load_before), "plan": dict(plan),
            "timings_s": dict(timings),
            "targets": {"heldout": validation.summary(only=held),
                        "calibration": validation.summary(only=calibration)},
            "diagnostics": {label: {"heldout": alt.summary(only=held),
                                    "calibration": alt.summary(only=calibration)}
                            for label, alt in diagnostics},
            "acceptance_model": selection,
            "comparisons": {"by_config": rows, "gains": headline_comparisons(rows)},
            "closed_form": closed_form_rows(validation, held),
            "calibrated_replay": validation.params.to_dict(),
            "repeat_spread": repeat_spread(validation),
            "rows": [dict(r.to_dict(), role=roles.get(r.run)) for r in validation.rows],
            "diagnostic_rows": {label: [r.to_dict() for r in alt.rows
                                        if r.metric in DIAGNOSTIC_METRICS]
                                for label, alt in diagnostics}}


#: the rows of the diagnostic replays kept in the results file
DIAGNOSTIC_METRICS = ("throughput_tok_s", "tpot.mean", "e2e.p99", "acceptance_rate",
                      "gain.throughput_tok_s")


def repeat_spread(validation: Any) -> list[dict[str, Any]]:
    """Per configuration: its repeats' load averages (1 min, at each run's start) and their
    spread ((max - min) / median) in throughput, mean TPOT and p99 end-to-end."""
    from psdlab.validation.report import spread_rows
    return spread_rows(validation)
