"""The result of `psdlab bench-gpu` (`validation.gpu.bench_gpu`) as frozen records, and the one
place they become summary.json's object (`GpuBenchSummary.to_dict`): the keys, their order and
values the file has always had.  Its pieces: the pass table (`validation.gpu.passes`), the
layouts' runs and simulator check (`validation.gpu.layouts`), the lossless rule
(`validation.gpu.lossless`)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from psdlab.validation.gpu.layouts import LayoutRun, SimulatorCheck
from psdlab.validation.gpu.lossless import Divergence, LosslessVerdict
from psdlab.validation.gpu.passes import KindRow, PassCell, PassTable

#: the parts of the bench, in the order they run
SECTIONS = ("passes", "invariant", "runs", "compiled")


@dataclass(frozen=True)
class GpuBenchConfig:
    """What `psdlab bench-gpu` runs (its options' defaults; ``bench_gpu`` re-exports it),
    recorded as summary.json's ``config``."""
    device: str = "cuda:0"
    out: str = "bench_gpu_out"
    target_dir: str | None = None
    drafter_dir: str | None = None
    target_size: str = "1.3b"
    drafter_size: str = "0.15b"
    vocab: int = 32000
    dtype: str = "bfloat16"
    k: int = 4
    batches: tuple[int, ...] = (4, 8)
    num_prompts: int = 16
    prompt_len: int = 128
    max_new_tokens: int = 64
    rounds: int = 2
    controlled_alpha: float | None = 0.7
    passes: str = "auto"
    batch_invariant: bool = True    # the runs' target passes one shape: bf16 output == AR's,
                                    # so controlled acceptance follows the AR continuation
    repeats: int = 30
    budget_s: float = 420.0
    seed: int = 0
    sections: tuple[str, ...] = SECTIONS


@dataclass(frozen=True)
class PhaseSpread:
    """One phase kind's step times over every timed trace of a run (ms)."""
    median_ms: float
    max_ms: float
    max_over_median: float
    n: int


@dataclass(frozen=True)
class InvariantCheck:
    """AR, SD-separate and PSD with every target pass one shape, at batch m: per mode the
    first request whose output departs from AR's (None: none) and how many equal it."""
    m: int
    equal: bool
    first_divergence: Mapping[str, int | None]
    requests_equal_to_ar: Mapping[str, int]
    requests: int


@dataclass(frozen=True)
class OverlapFigures:
    """The figures of `runtime.overlap_bench.bench_runtime` that the summary's text reads."""
    t_ms: float | None
    v_ms: float | None
    measured_gain: float | None
    measured_gain_by_round: tuple[float | None, ...]
    predicted_gain: float | None
    predicted_gain_contended: float | None
    sd_mean_acceptance_length: float | None
    psd_mean_acceptance_length: float | None

    @classmethod
    def of(cls, figures: Mapping[str, Any]) -> OverlapFigures:
        return cls(t_ms=figures["t_ms"], v_ms=figures["v_ms"],
                   measured_gain=figures["measured_gain"],
                   measured_gain_by_round=tuple(figures.get("measured_gain_by_round", [])),
                   predicted_gain=figures["predicted_gain"],
                   predicted_gain_contended=figures.get("predicted_gain_contended"),
                   sd_mean_acceptance_length=figures.get("sd_mean_acceptance_length"),
                   psd_mean_acceptance_length=figures.get("psd_mean_acceptance_length"))


@dataclass(frozen=True)
class RunFigure:
    """AR, SD-sep and PSD at one m: the layout's run, each phase kind's spread, the lossless
    rule's verdict and whether the target's passes were batch-invariant."""
    run: LayoutRun
    phase_spread: Mapping[str, PhaseSpread]
    lossless_rule: LosslessVerdict
    batch_invariant: bool

    @property
    def figures(self) -> OverlapFigures:
        return OverlapFigures.of(self.run.figures)


@dataclass(frozen=True)
class GpuSections:
    """The sections that ran so far (None: not reached)."""
    passes: PassTable | None = None
    batch_invariant: InvariantCheck | None = None
    runs: Mapping[str, RunFigure] | None = None      # m (as text) -> its runs
    compiled: PassTable | None = None


@dataclass(frozen=True)
class GpuBenchSummary:
    """summary.json: the machine, the config, the resolved passes, the models, the sections,
    what was skipped, the wall time so far and (at the end) whether the lossless rule held."""
    machine: Mapping[str, Any]          # `layouts.machine`: results_file's machine record
    dry_run: bool
    config: GpuBenchConfig
    passes: str
    models: Mapping[str, str]
    sections: GpuSections
    skipped: tuple[str, ...]
    wall_s: float
    lossless: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        s = self.sections
        sections = {"passes": None if s.passes is None else _table_doc(s.passes),
                    "batch_invariant": (None if s.batch_invariant is None else
                                        asdict(s.batch_invariant)),
                    "runs": (None if s.runs is None else
                             {m: _run_doc(f) for m, f in s.runs.items()}),
                    "compiled": None if s.compiled is None else _table_doc(s.compiled)}
        out = {"machine": dict(self.machine), "dry_run": self.dry_run,
               "config": asdict(self.config), "passes": self.passes,
               "models": dict(self.models),
               "sections": {k: v for k, v in sections.items() if v is not None},
               "skipped": list(self.skipped)}
        verdict = {} if self.lossless is None else {"lossless": self.lossless}
        return {**out, "wall_s": self.wall_s, **verdict}


def _cell_doc(cell: PassCell) -> Any:
    if cell is None or isinstance(cell, str):
        return cell
    out: dict[str, Any] = {"median_ms": cell.median_ms, "max_ms": cell.max_ms,
                           "min_ms": cell.min_ms, "n": cell.n}
    if cell.x_floor is not None:
        out["x_floor"] = cell.x_floor
    return out


def _kind_doc(row: KindRow) -> dict[str, Any]:
    return {"floor_ms": row.floor_ms, **{lab: _cell_doc(c) for lab, c in row.cells.items()}}


def _table_doc(t: PassTable) -> dict[str, Any]:
    out: dict[str, Any] = {
        "m": t.m, "k": t.k, "context": t.context, "hardware": t.hardware,
        "memory_bw_gbs": t.memory_bw_gbs, "static_passes": t.static_passes,
        "variants": {lab: dict(over) for lab, over in t.variants.items()},
        "kinds": {row.name: _kind_doc(row) for r in t.roles for row in r.kinds}}
    for r in t.roles:
        out.update({f"{r.role}_setup:{lab}": asdict(s) for lab, s in r.setups.items()})
        if r.with_hf:
            out[f"{r.role}_hf_generate_ms_per_token"] = r.hf_generate_ms_per_token
    return out


def _divergence_doc(d: Divergence) -> dict[str, Any]:
    return {**asdict(d), "top2": list(d.top2), "logits": list(d.logits)}


def _simulator_doc(c: SimulatorCheck) -> dict[str, Any]:
    return {"calibrated_on": list(c.calibrated_on), "validated_on": list(c.validated_on),
            "held_out": c.held_out, "model": c.model,
            "fit_heldout_errors": dict(c.fit_heldout_errors),
            "summary": [dict(r) for r in c.summary], "notes": list(c.notes),
            "psd_inputs": c.psd_inputs}


def _rule_doc(rule: LosslessVerdict) -> dict[str, Any]:
    return {"psd_equals_sd_sep": rule.psd_equals_sd_sep, "equal_to_ar": dict(rule.equal_to_ar),
            "divergences": {name: [_divergence_doc(d) for d in ds]
                            for name, ds in rule.divergences.items()},
            "divergences_total": rule.divergences_total,
            "divergences_accepted": rule.divergences_accepted, "holds": rule.holds}


def _run_doc(f: RunFigure) -> dict[str, Any]:
    return {**f.run.figures, "bench_wall_s": f.run.bench_wall_s, "layout": asdict(f.run.layout),
            "simulator": _simulator_doc(f.run.simulator),
            "phase_spread": {k: asdict(v) for k, v in f.phase_spread.items()},
            "lossless_rule": _rule_doc(f.lossless_rule), "batch_invariant": f.batch_invariant}
