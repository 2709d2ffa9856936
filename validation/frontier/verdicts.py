"""The verdicts of `psdlab frontier`: the measured table (mean, SE and CV over rounds of every
mode's time per generated token, per drafter) and `judge`, which sets the measured best drafter
of each mode and their time ratio against each model's prediction and tests the issue's checks
(ratio within 10%, picks within 3%, the paper's "PSD favours a slower, better drafter", AR at
the same concurrency)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from psdlab.validation.frontier.frontier_results import (ArComparison, FasterThanAr,
                                                         FrontierChecks, FrontierJudgement,
                                                         FrontierRun, MeasuredBest, MeasuredRow,
                                                         Member, ModelVerdict, PaperClaim,
                                                         RoundStats)
from psdlab.validation.frontier.prediction_results import FrontierPrediction
from psdlab.validation.frontier.theory import FrontierPoint

COMPARED_MODES = ("sd", "psd", "psd_iso_c")


def _stats(values: Sequence[float | None]) -> RoundStats:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return RoundStats(mean=None, se=None, cv=None, n=0, values=())
    mean = float(np.mean(vals))
    sd = float(np.std(vals, ddof=1)) if len(vals) > 1 else None
    return RoundStats(mean=mean, se=sd / np.sqrt(len(vals)) if sd is not None else None,
                      cv=sd / mean if sd is not None and mean > 0 else None, n=len(vals),
                      values=tuple(vals))


def measured_table(members: Sequence[Member],
                   records: Sequence[FrontierRun]) -> list[MeasuredRow]:
    """Per drafter: mean, SE and CV over rounds of each mode's time per generated token."""
    rows = []
    for mb in members:
        mine = [r for r in records if r.drafter == mb.name]
        modes = {mode: _stats([r.time_per_token_s for r in mine if r.mode == mode])
                 for mode in COMPARED_MODES + ("ar", "ar_2m")}
        sd_runs = [r for r in mine if r.mode == "sd"]
        rows.append(MeasuredRow(
            drafter=mb.name, depth=mb.depth, layers=mb.layers, distilled=mb.distilled,
            sd=modes["sd"], psd=modes["psd"], psd_iso_c=modes["psd_iso_c"], ar=modes["ar"],
            ar_2m=modes["ar_2m"],
            mean_acceptance_length=_stats([r.mean_acceptance_length for r in sd_runs]),
            vsr_rounds=_stats([r.vsr for r in sd_runs]),
            steady=all(r.steady for r in mine),
            lossless=all(r.lossless is not False for r in mine)))
    return rows


def _measured_best(table: Sequence[MeasuredRow],
                   records: Sequence[FrontierRun]) -> MeasuredBest:
    """The measured best drafter of SD and of PSD, their ratio and its ratio round by round."""
    names = [r.drafter for r in table]
    sd = {r.drafter: r.sd.mean for r in table}
    psd = {r.drafter: r.psd.mean for r in table}
    best_sd = min(names, key=lambda n: _mean(sd[n]))
    best_psd = min(names, key=lambda n: _mean(psd[n]))
    ratio = _mean(sd[best_sd]) / _mean(psd[best_psd])
    rounds = sorted({r.round for r in records if r.mode == "sd"})
    by_round = []
    for rnd in rounds:
        def val(name: str, mode: str, rnd: int = rnd) -> float | None:
            return next((r.time_per_token_s for r in records if r.drafter == name
                         and r.mode == mode and r.round == rnd), None)
        a, b = val(best_sd, "sd"), val(best_psd, "psd")
        if a and b:
            by_round.append(a / b)
    return MeasuredBest(
        best_sd=best_sd, best_psd=best_psd, sd_time_per_token_s=_mean(sd[best_sd]),
        psd_time_per_token_s=_mean(psd[best_psd]), ratio_sd_over_psd=ratio,
        ratio_by_round=tuple(by_round),
        ratio_se=(float(np.std(by_round, ddof=1) / np.sqrt(len(by_round)))
                  if len(by_round) > 1 else None))


def _mean(x: float | None) -> float:
    """A measured mode's mean time per token (every drafter ran SD and PSD)."""
    if x is None:
        raise ValueError("measured: a drafter without an SD or PSD time per token")
    return x


def _paper_claim(best: MeasuredBest, points: Sequence[FrontierPoint],
                 V_s: float) -> PaperClaim:
    t_of = {p.name: p.t for p in points}
    vsr_of = {p.name: p.vsr for p in points}
    best_sd, best_psd = best.best_sd, best.best_psd
    slower = t_of[best_psd] > t_of[best_sd]
    better = vsr_of[best_psd] > vsr_of[best_sd]
    verdict = ("confirmed" if slower and better else
               "not seen (the same drafter is best for both)" if best_sd == best_psd else
               "refuted")
    return PaperClaim(
        claim="PSD favours a slower, better drafter than SD (PSD optimum at t = V)",
        verdict=verdict, best_sd_t_s=t_of[best_sd], best_psd_t_s=t_of[best_psd],
        best_sd_vsr=vsr_of[best_sd], best_psd_vsr=vsr_of[best_psd],
        V_s=V_s, best_psd_t_over_V=t_of[best_psd] / V_s)


def _vs_ar(table: Sequence[MeasuredRow]) -> ArComparison:
    ar, ar2 = (np.mean([mean for mean in (r.stats(key).mean for r in table) if mean])
               for key in ("ar", "ar_2m"))
    faster = []
    for r in table:
        for mode, ref, conc in (("sd", ar, "m"), ("psd_iso_c", ar, "m"), ("psd", ar2, "2m")):
            mean = r.stats(mode).mean
            if mean is not None and ref and mean < ref:
                faster.append(FasterThanAr(drafter=r.drafter, mode=mode, concurrency=conc,
                                           speedup_over_ar=float(ref / mean)))
    return ArComparison(ar_time_per_token_s=float(ar), ar_2m_time_per_token_s=float(ar2),
                        ar_cv_between_engines=_stats([r.ar.mean for r in table]).cv,
                        faster_than_ar=tuple(faster))


def judge(table: Sequence[MeasuredRow], points: Sequence[FrontierPoint],
          pred: FrontierPrediction, records: Sequence[FrontierRun]) -> FrontierJudgement:
    """The issue's checks: measured best of each mode and their ratio (with its noise from
    the rounds) against the batch-aware prediction at the points; the paper's claim."""
    best = _measured_best(table, records)
    sd = {r.drafter: r.sd.mean for r in table}
    psd = {r.drafter: r.psd.mean for r in table}
    models = {}
    for key, p in pred.predictions.items():
        ps, pp = p.best_sd.drafter, p.best_psd.drafter
        models[key] = ModelVerdict(
            best_sd=ps, best_psd=pp, ratio_sd_over_psd=p.ratio_sd_over_psd,
            ratio_error=p.ratio_sd_over_psd / best.ratio_sd_over_psd - 1.0,
            sd_pick_excess=_mean(sd[ps]) / best.sd_time_per_token_s - 1.0,
            psd_pick_excess=_mean(psd[pp]) / best.psd_time_per_token_s - 1.0)
    b = models["batch.points"]
    checks = FrontierChecks(model="batch.points",
                            ratio_within_10pct=abs(b.ratio_error) <= 0.10,
                            sd_pick_within_3pct=b.sd_pick_excess <= 0.03,
                            psd_pick_within_3pct=b.psd_pick_excess <= 0.03)
    return FrontierJudgement(measured=best, models=models, checks=checks,
                             paper_claim=_paper_claim(best, points, pred.V_s),
                             vs_ar=_vs_ar(table))
