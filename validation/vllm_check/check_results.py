"""The records of `psdlab check-vllm`, frozen: the plan (`CheckPlan`), a measured run's records
(`RunRecord`, `ServedServer`, `RecordedSettings`, together `MeasuredRun`), the judgement
(`CheckJudgement`: a `ConfigRow` per configuration, each figure in a `PerFigure`, the tallies
`HeldOutTally` and `MetricSummary`; PSD inside vLLM's held-out rows `PsdRow` in a
`PsdJudgement`, from its runs' `PsdRunRecord`), the repeats' spread (`noise`) and the report
(`CheckReport`), whose ``to_dict()`` is the
one place they become ``check_vllm*.json``'s object: the keys, their order and values the file
has always had.  The harness (`validation.vllm_check.harness`) and the judgement
(`validation.vllm_check.judgement`) build them; this module imports neither."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Mapping, Sequence, TypeVar

if TYPE_CHECKING:
    from psdlab.analysis.formats.records import SpecCounters
    from psdlab.validation.serving_results.calibration import BenchFit

#: the compared figures: vLLM bench key -> label (the fields of `PerFigure`, in this order)
METRICS = {"mean_ttft_ms": "mean TTFT (ms)", "mean_tpot_ms": "mean TPOT (ms)",
           "output_throughput": "output throughput (tok/s)",
           "spec_decode_acceptance_length": "acceptance length"}
GOAL = 0.10
#: the report's ``paths`` note
PATHS_NOTE = "relative to this file's directory"
#: a measured run's ``shared_cores_note``
SHARED_CORES_NOTE = ("other jobs may share this machine's cores: each run's load average "
                     "before it is in rows[].load_before")

T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True)
class PlannedServer:
    """One server the plan starts: ``mode`` "sd" (with draft length ``k``) or "ar" (k 0)."""
    mode: str
    k: int


@dataclass(frozen=True)
class CheckPlan:
    """The checked settings (`harness.plan`): rates, ks, servers, configurations, the
    calibration."""
    rates: tuple[float, ...]
    ks: tuple[int, ...]
    servers: tuple[PlannedServer, ...]
    configs: tuple[str, ...]
    calibration: str
    psd_ks: tuple[int, ...] = ()       # PSD inside vLLM's draft lengths (none: no PSD runs)


@dataclass(frozen=True)
class RecordedSettings:
    """A measured run's ``settings``: the plan (less its servers) and what each run was."""
    rates: tuple[float, ...]
    ks: tuple[int, ...]
    configs: tuple[str, ...]
    calibration: str
    num_prompts: int
    output_len: int
    repeats: int
    tiny: bool
    seed: int
    target_core: int
    client_core: int

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RecordedSettings:
        return cls(**{**d, "rates": tuple(d["rates"]), "ks": tuple(d["ks"]),
                      "configs": tuple(d["configs"])})


@dataclass(frozen=True)
class ServedServer:
    """One server a measured run started: its name, port, start-up time, command line, log."""
    name: str
    mode: str
    k: int
    port: int
    ready_s: float
    argv: tuple[str, ...]
    log: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ServedServer:
        return cls(**{**d, "argv": tuple(d["argv"])})


@dataclass(frozen=True)
class RunRecord:
    """One measured bench run of a configuration."""

    config: str            # e.g. "sd-k4@0.5"
    mode: str              # "ar" or "sd"
    k: int
    request_rate: float
    repeat: int
    result: str            # the bench JSON
    metrics_before: str
    metrics_after: str
    load_before: tuple[float, ...] | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunRecord:
        load = d.get("load_before")
        return cls(**{**d, "load_before": None if load is None else tuple(load)})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PsdRunRecord:
    """One measured offline run of PSD inside vLLM (``psdlab run --engine vllm --mode psd``):
    its configuration (``psd-k4-m4``), k, batch m (requests verified per step; 2m in flight),
    repeat and trace."""
    config: str
    k: int
    batch: int
    repeat: int
    trace: str


@dataclass(frozen=True)
class MeasuredRun:
    """Where, when and what a measured run ran: what a re-judged report keeps of it (None where
    the measured run's report has no such key)."""
    machine: Mapping[str, Any] | None     # `validation.results_file.machine_info`
    git: Mapping[str, Any] | None         # `validation.results_file.git_info`
    date: str | None
    vllm_version: str | None
    shared_cores_note: str | None
    settings: RecordedSettings | None
    servers: tuple[ServedServer, ...] | None
    served_drafter_to_target_ratio: float | None
    runs: tuple[RunRecord, ...]
    measure_s: float | None
    psd_runs: tuple[PsdRunRecord, ...] = ()     # PSD inside vLLM, offline (none: not measured)
    corun_probe: str | None = None              # the co-run probe's record (PSD runs only)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MeasuredRun:
        """The measured run's parts of its report ``d`` (``check_vllm.json``)."""
        settings, servers = d.get("settings"), d.get("servers")
        return cls(machine=d.get("machine"), git=d.get("git"), date=d.get("date"),
                   vllm_version=d.get("vllm_version"),
                   shared_cores_note=d.get("shared_cores_note"),
                   settings=None if settings is None else RecordedSettings.from_dict(settings),
                   servers=None if servers is None
                   else tuple(ServedServer.from_dict(x) for x in servers),
                   served_drafter_to_target_ratio=d.get("served_drafter_to_target_ratio"),
                   runs=tuple(RunRecord.from_dict(r) for r in d.get("runs") or ()),
                   measure_s=d.get("measure_s"),
                   psd_runs=tuple(PsdRunRecord(**r) for r in d.get("psd_runs") or ()),
                   corun_probe=d.get("corun_probe"))


@dataclass(frozen=True)
class PerFigure(Generic[T]):
    """One value per compared figure (`METRICS`, in its order)."""
    mean_ttft_ms: T
    mean_tpot_ms: T
    output_throughput: T
    spec_decode_acceptance_length: T

    @classmethod
    def of(cls, value: Callable[[str], U]) -> PerFigure[U]:
        """``value(key)`` of each figure, in `METRICS`' order."""
        return PerFigure(mean_ttft_ms=value("mean_ttft_ms"), mean_tpot_ms=value("mean_tpot_ms"),
                         output_throughput=value("output_throughput"),
                         spec_decode_acceptance_length=value("spec_decode_acceptance_length"))

    def get(self, metric: str) -> T:
        if metric not in METRICS:
            raise KeyError(metric)
        value: T = getattr(self, metric)
        return value

    def items(self) -> tuple[tuple[str, T], ...]:
        return tuple((m, self.get(m)) for m in METRICS)

    def values(self) -> tuple[T, ...]:
        return tuple(self.get(m) for m in METRICS)


@dataclass(frozen=True)
class ConfigRow:
    """One configuration judged: measured (mean over its repeats) vs predicted, the error, the
    repeats' spread, and each repeat's figures, counters, load and result file."""
    config: str
    mode: str
    k: int
    request_rate: float
    role: str                        # "calibration" or "held-out"
    repeats: int
    measured: PerFigure[float | None]
    predicted: PerFigure[float | None]
    not_predicted: str | None        # why the prediction failed (None: predicted)
    error: PerFigure[float | None]
    noise: PerFigure[float | None]
    measured_repeats: tuple[PerFigure[float | None], ...]
    counters: tuple[SpecCounters | None, ...]
    load_before: tuple[tuple[float, ...] | None, ...]
    results: tuple[str, ...]


def noise(values: Sequence[float | None]) -> float | None:
    """Run-to-run spread of repeats: (max - min) / mean."""
    vals = [v for v in values if v is not None]
    if len(vals) < 2 or not statistics.fmean(vals):
        return None
    return (max(vals) - min(vals)) / statistics.fmean(vals)


@dataclass(frozen=True)
class HeldOutTally:
    """The held-out figures judged: within the goal, with repeat noise, and the misses told
    from their noise."""
    judged: int
    within_goal: int
    with_repeat_noise: int
    misses_beyond_noise: int
    misses_within_noise: int
    misses_noise_unmeasured: int

    @classmethod
    def of(cls, judged: Sequence[tuple[float, float | None]]) -> HeldOutTally:
        """From each held-out figure's (error, noise)."""
        misses = [(e, n) for e, n in judged if abs(e) > GOAL]
        return cls(judged=len(judged), within_goal=sum(abs(e) <= GOAL for e, _ in judged),
                   with_repeat_noise=sum(n is not None for _, n in judged),
                   misses_beyond_noise=sum(n is not None and abs(e) > n for e, n in misses),
                   misses_within_noise=sum(n is not None and abs(e) <= n for e, n in misses),
                   misses_noise_unmeasured=sum(n is None for _, n in misses))


@dataclass(frozen=True)
class MetricSummary:
    """One figure over the held-out configurations."""
    held_out_within_goal: int
    held_out_compared: int
    max_abs_error: float | None

    @classmethod
    def of(cls, errors: Sequence[float]) -> MetricSummary:
        """From the figure's held-out errors (those compared)."""
        return cls(held_out_within_goal=sum(abs(e) <= GOAL for e in errors),
                   held_out_compared=len(errors),
                   max_abs_error=max((abs(e) for e in errors), default=None))


#: PSD's compared figures (vLLM bench's keys, computed alike from the measured and the
#: simulated trace): key -> label
PSD_FIGURES = {"output_throughput": "output throughput (tok/s)",
               "mean_tpot_ms": "mean TPOT (ms)", "mean_e2el_ms": "mean e2e latency (ms)"}


@dataclass(frozen=True)
class PsdRow:
    """One PSD configuration, held out: measured (mean over its repeats) vs predicted from the
    served calibration and the co-run probe (`PSD_FIGURES`, each a key -> value table in that
    order), the error, the repeats' spread."""
    config: str
    k: int
    batch: int
    repeats: int
    measured: Mapping[str, float | None]
    predicted: Mapping[str, float | None]
    not_predicted: str | None
    error: Mapping[str, float | None]
    noise: Mapping[str, float | None]
    measured_repeats: tuple[Mapping[str, float | None], ...]
    acceptance_length: float | None          # measured, mean over repeats (not judged)
    traces: tuple[str, ...]


@dataclass(frozen=True)
class PsdJudgement:
    """PSD inside vLLM as a held-out judge: whether it was measured (``why`` when not), the
    probe's contention the prediction used, the rows, their tally and what differs between
    the served calibration and an offline PSD run (``notes``)."""
    measured: bool
    why: str | None
    probe: str | None
    contention: Mapping[str, Any] | None     # `analysis.contention.Contention.to_dict`
    drafter_scale: float | None              # PSD's drafter pass / the fit's (`psd_check`)
    rows: tuple[PsdRow, ...]
    held_out: HeldOutTally
    notes: tuple[str, ...]


@dataclass(frozen=True)
class CheckJudgement:
    """The fit on the calibration, every configuration predicted and compared, the tallies."""
    calibration: str
    calibration_configs: tuple[str, ...]
    goal: float
    fit: BenchFit
    drafter_to_target_ratio: float | None
    notes: tuple[str, ...]
    rows: tuple[ConfigRow, ...]
    held_out: HeldOutTally
    summary: PerFigure[MetricSummary]
    psd: PsdJudgement | None = None


@dataclass(frozen=True)
class CalibrationChoice:
    """Whether the default rule chose the calibration, and the rule."""
    default: bool
    rule: str


@dataclass(frozen=True)
class Rejudging:
    """A re-judging (``--reuse``): the report it read, when, at which commit."""
    reused_from: str
    date: str
    git: Mapping[str, Any]


@dataclass(frozen=True)
class CheckReport:
    """``check_vllm*.json``: the command, the measured run (and, re-judged, the re-judging),
    how the calibration was chosen, the judgement.  ``total_s``: the measured run's wall time
    (a re-judged report has none)."""
    judgement: CheckJudgement
    choice: CalibrationChoice | None = None
    command: str | None = None
    measured: MeasuredRun | None = None
    total_s: float | None = None
    rejudged: Rejudging | None = None

    def to_dict(self) -> dict[str, Any]:
        """The report's JSON object: the keys, their order and values ``check_vllm*.json``
        has always had."""
        run, j = self.measured, self.judgement
        kept = {} if run is None else {
            "machine": run.machine, "git": run.git, "date": run.date,
            "vllm_version": run.vllm_version, "shared_cores_note": run.shared_cores_note,
            "settings": None if run.settings is None else asdict(run.settings),
            "servers": None if run.servers is None else [asdict(x) for x in run.servers],
            "served_drafter_to_target_ratio": run.served_drafter_to_target_ratio,
            "runs": [r.to_dict() for r in run.runs], "measure_s": run.measure_s}
        if run is not None and run.psd_runs:      # a run without PSD keeps its keys as they were
            kept.update({"psd_runs": [asdict(r) for r in run.psd_runs],
                         "corun_probe": run.corun_probe})
        out: dict[str, Any] = {"command": self.command}
        if self.rejudged is not None:
            out.update({"paths": PATHS_NOTE, "reused_from": self.rejudged.reused_from,
                        "rejudged": {"date": self.rejudged.date, "git": self.rejudged.git},
                        **kept})
        elif run is not None:
            for key, value in kept.items():    # the paths note after where and when
                out[key] = value
                if key == "vllm_version":
                    out["paths"] = PATHS_NOTE
            out["total_s"] = self.total_s
        if self.choice is not None:
            out.update({"calibration_default": self.choice.default,
                        "calibration_rule": self.choice.rule})
        return {**out, "calibration": j.calibration,
                "calibration_configs": list(j.calibration_configs), "goal": j.goal,
                "fit": j.fit.to_dict(), "drafter_to_target_ratio": j.drafter_to_target_ratio,
                "notes": list(j.notes), "rows": [asdict(r) for r in j.rows],
                "held_out": asdict(j.held_out), "summary": asdict(j.summary),
                **({} if j.psd is None else {"psd": asdict(j.psd)})}
