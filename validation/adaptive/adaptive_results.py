"""The result of `psdlab bench-adaptive` (`validation.adaptive.bench_adaptive`) as frozen records,
and the one place they become results.json's object (`AdaptiveBenchResult.to_dict`): the keys
and values the file has always had (written with sorted keys)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from psdlab.analysis.adaptive_policy import AffineCosts
from psdlab.sim.policy_search import ChoiceRange, LoadRow, WinnerSwitch


@dataclass(frozen=True)
class BenchPlan:
    """What `psdlab bench-adaptive` runs (its options; ``bench_adaptive`` re-exports it)."""
    depth: int = 30            # the drafter: the target's first `depth` layers (early exit)
    k: int = 3
    m: int = 4                 # most sequences running (PSD: two batches of m/2)
    requests: int = 8
    max_new_tokens: int = 24
    calib_tokens: int = 8
    seed: int = 0
    repeat: bool = True
    budget_s: float = 660.0    # the second pass (configurations in reverse order) is skipped
                               # when the first ended past half of this


@dataclass(frozen=True)
class FitPoints:
    """How many calibration phases each cost fit had."""
    verify_points: int
    draft_points: int
    prefill_points: int


@dataclass(frozen=True)
class AdaptiveCalibration:
    """Step 1: the fitted costs, the acceptance per draft position, the measured prompts' mean
    length and the seconds from the start to the end of the calibration."""
    costs: AffineCosts
    points: FitPoints
    acceptance: tuple[float, ...]
    prompt_mean: float
    wall_s: float


@dataclass(frozen=True)
class AdaptivePrediction:
    """Step 2, before the measured runs: one request's AR service time alone, the Poisson
    rates, the policy's choice by batch size and the simulated sweep."""
    service_time_alone_s: float
    rates_req_s: Mapping[str, float]            # load name -> requests per second
    thresholds: tuple[ChoiceRange, ...]         # ``sim.policy_search``'s records
    rows: tuple[LoadRow, ...]
    switch_points: tuple[WinnerSwitch, ...]


@dataclass(frozen=True)
class AdaptiveRunStats:
    """The adaptive policy's own account of one measured run (``runtime.adaptive_driver``)."""
    steps_ar: int
    steps_sd: int
    steps_psd: int
    switches: int
    transitions: Mapping[str, int]              # "sd3->ar" -> how often
    timeline: tuple[tuple[float, str], ...]     # (seconds from the start, the choice)
    catch_up_tokens: int
    drafts_dropped: int


@dataclass(frozen=True)
class ConfigRun:
    """One configuration serving one load's requests: throughput, TPOT, wall time, every
    request's output tokens (judged against AR's, not written) and the policy's account."""
    tok_s: float
    tpot_p50: float | None
    tpot_p99: float | None
    wall_s: float
    outputs: tuple[tuple[int, ...], ...]
    adaptive: AdaptiveRunStats | None = None


@dataclass(frozen=True)
class LoadRun:
    """Every configuration at one load of one pass (the repeat's loads say "(repeat)"), with
    the machine's load averages before it."""
    load: str
    rate_req_s: float | None                    # None: the offline batch
    configs: Mapping[str, ConfigRun]
    uptime: tuple[float, ...]


@dataclass(frozen=True)
class PassPooling:
    """A load's two passes together: each configuration's mean throughput, adaptive over the
    best fixed one, and how far the passes differ (|difference| / mean)."""
    tok_s: Mapping[str, float]
    adaptive_vs_best: float
    spread: Mapping[str, float]


@dataclass(frozen=True)
class LoadResult:
    """A measured load judged: each configuration's output equal to AR's (``lossless``), the
    measured and the predicted winner, adaptive over the measured best, both passes pooled."""
    load: str
    rate_req_s: float | None
    configs: Mapping[str, ConfigRun]
    uptime: tuple[float, ...]
    lossless: Mapping[str, bool]
    winner_measured: str
    adaptive_vs_best: float
    winner_predicted: str | None
    pooled: PassPooling | None = None           # the main pass's loads, with a repeat


@dataclass(frozen=True)
class AdaptiveJudgement:
    """Step 3 judged over the loads of the main pass."""
    rows: tuple[LoadResult, ...]
    mean_normalised_tok_s: Mapping[str, float]
    pooled_adaptive_min_vs_best: float | None
    max_pass_spread: float | None
    adaptive_min_vs_best: float
    goal_097_every_load: bool
    adaptive_ahead_of_every_fixed_overall: bool
    winners_predicted_right: int
    loads: int


@dataclass(frozen=True)
class AdaptiveBenchResult:
    """results.json: the plan, the calibration, the prediction, the measured loads judged, and
    the run's provenance; ``files``: what was written (in the returned object, not the file)."""
    plan: BenchPlan
    drafter: str
    uptime_before: tuple[float, ...]
    calibration: AdaptiveCalibration
    prediction: AdaptivePrediction
    measured: AdaptiveJudgement
    machine: Mapping[str, Any]                  # `validation.results_file.machine_info`
    git: Mapping[str, Any]                      # `validation.results_file.git_info`
    date_utc: str
    uptime_after: tuple[float, ...]
    wall_s: float
    note: str
    files: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        cal, pred = self.calibration, self.prediction
        out = {"plan": asdict(self.plan), "drafter": self.drafter,
               "uptime_before": list(self.uptime_before),
               "calibration": {"costs": asdict(cal.costs), "points": asdict(cal.points),
                               "acceptance": list(cal.acceptance),
                               "prompt_mean": cal.prompt_mean, "wall_s": cal.wall_s},
               "prediction": {"service_time_alone_s": pred.service_time_alone_s,
                              "rates_req_s": dict(pred.rates_req_s),
                              "thresholds": [asdict(t) for t in pred.thresholds],
                              "rows": [r.to_dict() for r in pred.rows],
                              "switch_points": [s.to_dict() for s in pred.switch_points]},
               "measured": _judgement_doc(self.measured),
               "machine": dict(self.machine), "git": dict(self.git), "date_utc": self.date_utc,
               "uptime_after": list(self.uptime_after), "wall_s": self.wall_s,
               "note": self.note}
        return {**out, "files": list(self.files)} if self.files else out


def _config_doc(c: ConfigRun, lossless: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"tok_s": c.tok_s, "tpot_p50": c.tpot_p50, "tpot_p99": c.tpot_p99,
                           "wall_s": c.wall_s}
    if c.adaptive is not None:
        a = c.adaptive
        out["adaptive"] = {**asdict(a), "transitions": dict(a.transitions),
                           "timeline": [list(t) for t in a.timeline]}
    return {**out, "lossless": lossless}


def _load_doc(r: LoadResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "load": r.load, "rate_req_s": r.rate_req_s,
        "configs": {lab: _config_doc(c, r.lossless[lab]) for lab, c in r.configs.items()},
        "uptime": list(r.uptime), "winner_measured": r.winner_measured,
        "adaptive_vs_best": r.adaptive_vs_best, "winner_predicted": r.winner_predicted}
    if r.pooled is not None:
        out.update(pooled_tok_s=dict(r.pooled.tok_s),
                   pooled_adaptive_vs_best=r.pooled.adaptive_vs_best,
                   pass_spread=dict(r.pooled.spread))
    return out


def _judgement_doc(j: AdaptiveJudgement) -> dict[str, Any]:
    return {"rows": [_load_doc(r) for r in j.rows],
            "mean_normalised_tok_s": dict(j.mean_normalised_tok_s),
            "pooled_adaptive_min_vs_best": j.pooled_adaptive_min_vs_best,
            "max_pass_spread": j.max_pass_spread,
            "adaptive_min_vs_best": j.adaptive_min_vs_best,
            "goal_097_every_load": j.goal_097_every_load,
            "adaptive_ahead_of_every_fixed_overall": j.adaptive_ahead_of_every_fixed_overall,
            "winners_predicted_right": j.winners_predicted_right, "loads": j.loads}
