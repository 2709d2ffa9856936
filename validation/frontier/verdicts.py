"""The verdicts of `psdlab frontier`: the measured table (mean, SE and CV over rounds of every
mode's time per generated token, per drafter) and `judge`, which sets the measured best drafter
of each mode and their time ratio against each model's prediction and tests the issue's checks
(ratio within 10%, picks within 3%, the paper's "PSD favours a slower, better drafter", AR at
the same concurrency)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from psdlab.validation.frontier.theory import FrontierPoint

COMPARED_MODES = ("sd", "psd", "psd_iso_c")


def _stats(values: Sequence[float | None]) -> dict[str, Any]:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"mean": None, "se": None, "cv": None, "n": 0, "values": []}
    mean = float(np.mean(vals))
    sd = float(np.std(vals, ddof=1)) if len(vals) > 1 else None
    return {"mean": mean, "se": sd / np.sqrt(len(vals)) if sd is not None else None,
            "cv": sd / mean if sd is not None and mean > 0 else None, "n": len(vals),
            "values": vals}


def measured_table(members: Sequence[Any], records: Sequence[dict]) -> list[dict]:
    """Per drafter: mean, SE and CV over rounds of each mode's time per generated token."""
    rows = []
    for mb in members:
        mine = [r for r in records if r["drafter"] == mb.name]
        row: dict[str, Any] = {"drafter": mb.name, "depth": mb.depth, "layers": mb.layers,
                               "distilled": mb.distilled}
        for mode in COMPARED_MODES + ("ar", "ar_2m"):
            row[mode] = _stats([r["time_per_token_s"] for r in mine if r["mode"] == mode])
        sd_runs = [r for r in mine if r["mode"] == "sd"]
        row["mean_acceptance_length"] = _stats([r["mean_acceptance_length"] for r in sd_runs])
        row["vsr_rounds"] = _stats([r["vsr"] for r in sd_runs])
        row["steady"] = all(r["steady"] for r in mine)
        row["lossless"] = all(r.get("lossless", True) for r in mine)
        rows.append(row)
    return rows


def judge(table: Sequence[dict], points: Sequence[FrontierPoint],
          pred: dict[str, Any], records: Sequence[dict]) -> dict[str, Any]:
    """The issue's checks: measured best of each mode and their ratio (with its noise from
    the rounds) against the batch-aware prediction at the points; the paper's claim."""
    names = [r["drafter"] for r in table]
    t_of = {p.name: p.t for p in points}
    vsr_of = {p.name: p.vsr for p in points}
    sd = {r["drafter"]: r["sd"]["mean"] for r in table}
    psd = {r["drafter"]: r["psd"]["mean"] for r in table}
    best_sd, best_psd = min(names, key=lambda n: sd[n]), min(names, key=lambda n: psd[n])
    ratio = sd[best_sd] / psd[best_psd]
    rounds = sorted({r["round"] for r in records if r["mode"] == "sd"})
    by_round = []
    for rnd in rounds:
        def val(name: str, mode: str, rnd: int = rnd) -> float | None:
            return next((r["time_per_token_s"] for r in records if r["drafter"] == name
                         and r["mode"] == mode and r["round"] == rnd), None)
        a, b = val(best_sd, "sd"), val(best_psd, "psd")
        if a and b:
            by_round.append(a / b)
    out: dict[str, Any] = {
        "measured": {"best_sd": best_sd, "best_psd": best_psd,
                     "sd_time_per_token_s": sd[best_sd], "psd_time_per_token_s": psd[best_psd],
                     "ratio_sd_over_psd": ratio, "ratio_by_round": by_round,
                     "ratio_se": (float(np.std(by_round, ddof=1) / np.sqrt(len(by_round)))
                                  if len(by_round) > 1 else None)},
        "models": {},
    }
    for key, p in pred["predictions"].items():
        ps, pp = p["best_sd"]["drafter"], p["best_psd"]["drafter"]
        out["models"][key] = {
            "best_sd": ps, "best_psd": pp,
            "ratio_sd_over_psd": p["ratio_sd_over_psd"],
            "ratio_error": p["ratio_sd_over_psd"] / ratio - 1.0,
            "sd_pick_excess": sd[ps] / sd[best_sd] - 1.0,
            "psd_pick_excess": psd[pp] / psd[best_psd] - 1.0}
    b = out["models"]["batch.points"]
    out["checks"] = {
        "model": "batch.points",
        "ratio_within_10pct": abs(b["ratio_error"]) <= 0.10,
        "sd_pick_within_3pct": b["sd_pick_excess"] <= 0.03,
        "psd_pick_within_3pct": b["psd_pick_excess"] <= 0.03}
    slower = t_of[best_psd] > t_of[best_sd]
    better = vsr_of[best_psd] > vsr_of[best_sd]
    verdict = ("confirmed" if slower and better else
               "not seen (the same drafter is best for both)" if best_sd == best_psd else
               "refuted")
    out["paper_claim"] = {
        "claim": "PSD favours a slower, better drafter than SD (PSD optimum at t = V)",
        "verdict": verdict, "best_sd_t_s": t_of[best_sd], "best_psd_t_s": t_of[best_psd],
        "best_sd_vsr": vsr_of[best_sd], "best_psd_vsr": vsr_of[best_psd],
        "V_s": pred["V_s"], "best_psd_t_over_V": t_of[best_psd] / pred["V_s"]}
    ar, ar2 = (np.mean([r[key]["mean"] for r in table if r[key]["mean"]]) for key in
               ("ar", "ar_2m"))
    faster = []
    for r in table:
        for mode, ref, conc in (("sd", ar, "m"), ("psd_iso_c", ar, "m"), ("psd", ar2, "2m")):
            if r[mode]["mean"] is not None and ref and r[mode]["mean"] < ref:
                faster.append({"drafter": r["drafter"], "mode": mode, "concurrency": conc,
                               "speedup_over_ar": float(ref / r[mode]["mean"])})
    out["vs_ar"] = {"ar_time_per_token_s": float(ar), "ar_2m_time_per_token_s": float(ar2),
                    "ar_cv_between_engines": _stats([r["ar"]["mean"] for r in table])["cv"],
                    "faster_than_ar": faster}
    return out
