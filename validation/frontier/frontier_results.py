"""The result of `psdlab frontier` (``validation.frontier.run_frontier.run_frontier``) as frozen
records, and the one place they become results.json's object (`FrontierResult.to_dict`): the
keys, their order and values the file has always had.  The plan and the family's members
(`FrontierPlan`, `Member`, re-exported by ``run_frontier``), the run records and the measured
table (``verdicts.measured_table``), the judgement (``verdicts.judge``), the machine, the
workload, the files; the prediction's records are ``prediction_results``'s."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from psdlab.analysis.checks import check_int
from psdlab.validation.frontier.prediction_results import FrontierPrediction, record_doc
from psdlab.validation.frontier.theory import FrontierPoint

DEFAULT_DEPTHS = (2, 8, 28, 29, 30)
QUICK_DEPTHS = (2, 30)


@dataclass(frozen=True)
class FrontierPlan:
    k: int = 4
    m: int = 4
    depths: tuple[int, ...] = DEFAULT_DEPTHS
    num_prompts: int = 24
    max_new_tokens: int = 16
    rounds: int = 2
    iso_c_rounds: int = 1       # rounds that also run PSD at 2 x m/2 (iso-concurrency)
    backend: str = "process"
    quick: bool = False

    def __post_init__(self) -> None:
        check_int("k", self.k, minimum=1, maximum=64)
        check_int("batch", self.m, minimum=1, maximum=64)
        check_int("prompts", self.num_prompts, minimum=1, maximum=1000)
        check_int("max_new_tokens", self.max_new_tokens, minimum=2, maximum=512)
        check_int("rounds", self.rounds, minimum=1, maximum=20)
        check_int("iso_c_rounds", self.iso_c_rounds, minimum=0, maximum=self.rounds)
        if not self.depths:
            raise ValueError("depths: need at least one early-exit depth")
        for d in self.depths:
            check_int("depths[]", d, minimum=1)


@dataclass(frozen=True)
class Member:
    """One drafter of the family: its name, early-exit depth (None: the committed one),
    whether it was distilled, its model directory."""
    name: str
    depth: int | None
    distilled: bool
    path: str
    layers: int


@dataclass(frozen=True)
class FrontierRun:
    """One run of one drafter (a mode in a round): the measured time per generated token over
    the steady state, whether there was one, and the trace's metrics; ``lossless``: whether its
    outputs equal AR's token for token (None until compared)."""
    drafter: str
    mode: str
    round: int
    wall_s: float
    time_per_token_s: float | None
    steady: bool
    decode_time_per_token_s: float | None
    t_s: float | None
    V_s: float | None
    vsr: float | None
    mean_acceptance_length: float | None
    accepted: int | None
    proposed: int | None
    draft_hidden_fraction: float | None
    lossless: bool | None = None


@dataclass(frozen=True)
class RoundStats:
    """Mean, SE and CV over rounds (None with too few), how many and the values."""
    mean: float | None
    se: float | None
    cv: float | None
    n: int
    values: tuple[float, ...]


@dataclass(frozen=True)
class MeasuredRow:
    """One drafter's row of the measured table: each mode's time per generated token, the SD
    runs' mean acceptance length and VSR over rounds, whether every run was steady and
    lossless."""
    drafter: str
    depth: int | None
    layers: int
    distilled: bool
    sd: RoundStats
    psd: RoundStats
    psd_iso_c: RoundStats
    ar: RoundStats
    ar_2m: RoundStats
    mean_acceptance_length: RoundStats
    vsr_rounds: RoundStats
    steady: bool
    lossless: bool

    def stats(self, mode: str) -> RoundStats:
        """The time per token of ``mode`` (sd, psd, psd_iso_c, ar, ar_2m)."""
        return {"sd": self.sd, "psd": self.psd, "psd_iso_c": self.psd_iso_c, "ar": self.ar,
                "ar_2m": self.ar_2m}[mode]


@dataclass(frozen=True)
class MeasuredBest:
    """The measured best drafter of SD and of PSD, their times and ratio (and its noise from
    the rounds)."""
    best_sd: str
    best_psd: str
    sd_time_per_token_s: float
    psd_time_per_token_s: float
    ratio_sd_over_psd: float
    ratio_by_round: tuple[float, ...]
    ratio_se: float | None


@dataclass(frozen=True)
class ModelVerdict:
    """One model's picks and ratio against the measured: the ratio's relative error and the
    measured excess time of each pick over the measured best."""
    best_sd: str
    best_psd: str
    ratio_sd_over_psd: float
    ratio_error: float
    sd_pick_excess: float
    psd_pick_excess: float


@dataclass(frozen=True)
class FrontierChecks:
    """The issue's checks of one model (``model``): ratio within 10%, picks within 3%."""
    model: str
    ratio_within_10pct: bool
    sd_pick_within_3pct: bool
    psd_pick_within_3pct: bool


@dataclass(frozen=True)
class PaperClaim:
    """The paper's claim (PSD favours a slower, better drafter) against the measured bests."""
    claim: str
    verdict: str
    best_sd_t_s: float
    best_psd_t_s: float
    best_sd_vsr: float
    best_psd_vsr: float
    V_s: float
    best_psd_t_over_V: float


@dataclass(frozen=True)
class FasterThanAr:
    """A drafter and mode faster than AR at the same concurrency (m or 2m)."""
    drafter: str
    mode: str
    concurrency: str
    speedup_over_ar: float


@dataclass(frozen=True)
class ArComparison:
    """AR's time per token at m and 2m (mean over the engines that ran it), their CV between
    engines, and what beat it."""
    ar_time_per_token_s: float
    ar_2m_time_per_token_s: float
    ar_cv_between_engines: float | None
    faster_than_ar: tuple[FasterThanAr, ...]


@dataclass(frozen=True)
class FrontierJudgement:
    """`judge`'s result: the measured bests, each model's verdict (the prediction's models, in
    order), the checks, the paper's claim, AR."""
    measured: MeasuredBest
    models: Mapping[str, ModelVerdict]
    checks: FrontierChecks
    paper_claim: PaperClaim
    vs_ar: ArComparison


@dataclass(frozen=True)
class FrontierMachine:
    """CPU model, its vector flags, cores, load average, date, git commit, Python."""
    cpu_model: str
    flags: tuple[str, ...]
    cores: int | None
    cores_usable: int | None
    load_average: tuple[float, ...] | None
    date_utc: str
    git_commit: str
    git_dirty: bool
    python: str


@dataclass(frozen=True)
class FrontierWorkload:
    """The prompts (a file, or the shipped split), requests per run, tokens each, greedy."""
    prompts: str
    requests: int
    max_new_tokens: int
    greedy: bool


@dataclass(frozen=True)
class FrontierFiles:
    """The files `psdlab frontier` writes."""
    json: str
    csv: str
    png: str
    markdown: str

    @classmethod
    def in_folder(cls, out: Path) -> FrontierFiles:
        return cls(json=str(out / "results.json"), csv=str(out / "frontier.csv"),
                   png=str(out / "frontier.png"), markdown=str(out / "summary.md"))

    def paths(self) -> tuple[str, ...]:
        return (self.json, self.csv, self.png, self.markdown)


@dataclass(frozen=True)
class FrontierResult:
    """Everything `psdlab frontier` measured, predicted and judged, and where it wrote it;
    ``load_average_end``: the load average when the measuring ended."""
    plan: FrontierPlan
    machine: FrontierMachine
    load_average_end: tuple[float, ...]
    workload: FrontierWorkload
    family: tuple[Member, ...]
    points: tuple[FrontierPoint, ...]
    measured: tuple[MeasuredRow, ...]
    prediction: FrontierPrediction
    judgement: FrontierJudgement
    runs: tuple[FrontierRun, ...]
    wall_s: float
    files: FrontierFiles

    def to_dict(self) -> dict[str, Any]:
        """results.json's object (and ``--json``'s, non-finite floats aside)."""
        return {"plan": asdict(self.plan), "machine": record_doc(self.machine),
                "machine_end": {"load_average": list(self.load_average_end)},
                "workload": record_doc(self.workload), "family": record_doc(self.family),
                "points": record_doc(self.points), "measured": record_doc(self.measured),
                "prediction": record_doc(self.prediction),
                "judgement": record_doc(self.judgement), "runs": record_doc(self.runs),
                "wall_s": self.wall_s, "files": record_doc(self.files)}


@dataclass(frozen=True)
class ModeTimes:
    """One drafter's time per generated token of one mode (SD at m or PSD at 2 x m; ms): the
    measured mean and SE, the batch-aware model's at the point and on the fit, the paper's at
    the point, AR's at the same concurrency."""
    measured: float | None
    se: float | None
    batch: float | None
    batch_fit: float | None
    paper: float | None
    ar: float | None


@dataclass(frozen=True)
class FrontierRow:
    """One drafter's row of frontier.csv (times in ms), the figure's and summary.md's input:
    its fields are the CSV's columns, in order."""
    drafter: str
    layers: int
    depth: int | None
    distilled: bool
    on_envelope: bool
    t_ms: float | None
    V_ms: float | None
    overhead_ms: float | None
    t_overlap_ms: float | None
    V_overlap_ms: float | None
    slow_t: float
    slow_V: float
    t_cv: float
    V_cv: float
    vsr: float
    vsr_se: float | None
    vsr_fit: float
    mean_acceptance_length: float | None
    sd_ms_per_tok: float | None
    sd_se: float | None
    psd_ms_per_tok: float | None
    psd_se: float | None
    psd_iso_c_ms_per_tok: float | None
    psd_iso_c_se: float | None
    ar_ms_per_tok: float | None
    ar_2m_ms_per_tok: float | None
    paper_sd_ms_per_tok: float | None
    paper_psd_ms_per_tok: float | None
    batch_sd_ms_per_tok: float | None
    batch_psd_ms_per_tok: float | None
    batch_fit_sd_ms_per_tok: float | None
    batch_fit_psd_ms_per_tok: float | None

    def mode_times(self, mode: str) -> ModeTimes:
        """The times of ``mode``: "sd" (AR at m) or "psd" (AR at 2m)."""
        if mode == "sd":
            return ModeTimes(self.sd_ms_per_tok, self.sd_se, self.batch_sd_ms_per_tok,
                             self.batch_fit_sd_ms_per_tok, self.paper_sd_ms_per_tok,
                             self.ar_ms_per_tok)
        if mode == "psd":
            return ModeTimes(self.psd_ms_per_tok, self.psd_se, self.batch_psd_ms_per_tok,
                             self.batch_fit_psd_ms_per_tok, self.paper_psd_ms_per_tok,
                             self.ar_2m_ms_per_tok)
        raise ValueError(f"mode: expected 'sd' or 'psd', got {mode!r}")
