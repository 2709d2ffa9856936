"""The theory's side of `psdlab frontier`'s result as frozen records (`FrontierPrediction`, from
``validation.frontier.theory.predict_optima``), and `record_doc`, which turns any record of the
result into the object results.json holds: its fields in order under their names (or the key
a field's ``metadata`` names), tuples as lists, mappings as dicts."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Mapping

#: the models' predictions, in results.json's order (``validation.frontier.theory``)
PREDICTION_MODELS = ("paper.points", "paper.fit", "batch.points", "batch.points_no_contention",
                     "batch.fit")


def record_doc(obj: Any) -> Any:
    """``obj`` as JSON-able data: a record (dataclass) as a dict of its fields, in order, under
    their names or ``metadata["key"]``; tuples and lists as lists; mappings as dicts; recursively.
    Anything else as it is (floats stay as computed: non-finite ones are the writer's)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.metadata.get("key", f.name): record_doc(getattr(obj, f.name))
                for f in fields(obj)}
    if isinstance(obj, (tuple, list)):
        return [record_doc(x) for x in obj]
    if isinstance(obj, Mapping):
        return {k: record_doc(v) for k, v in obj.items()}
    return obj


@dataclass(frozen=True)
class BestDrafter:
    """A model's best drafter of one mode: its name, drafting time and time per token."""
    drafter: str
    t_s: float
    time_per_token_s: float


@dataclass(frozen=True)
class ModelPrediction:
    """One model's time per generated token of every drafter (SD, PSD; the drafters' order),
    its best drafter of each mode and their ratio."""
    sd_time_per_token_s: tuple[float, ...]
    psd_time_per_token_s: tuple[float, ...]
    best_sd: BestDrafter
    best_psd: BestDrafter
    ratio_sd_over_psd: float


@dataclass(frozen=True)
class FitSummary:
    """f(t) = 1 - exp(-alpha t) fitted to the envelope: alpha, alpha*V (V the median), the
    quality on the envelope and on all points, f at every drafter's t."""
    alpha_per_s: float
    alpha_v: float
    rms_envelope: float
    r2_envelope: float | None
    rms_all: float
    r2_all: float | None
    vsr_fit: tuple[float, ...]


@dataclass(frozen=True)
class TheoryAtAlphaV:
    """The exact curve at the fitted alpha*V: T_SD/T_PSD, the saving, the optimal drafting
    times and the alpha*V of the peak saving."""
    exact_ratio: float
    saving: float
    t_sd_opt_s: float
    t_psd_opt_s: float
    peak_alpha_v: float


@dataclass(frozen=True)
class PooledInputs:
    """The medians over drafters the fitted curve's batch-aware model uses: overhead, CVs of t
    and V, overlap slowdowns."""
    overhead_s: float
    t_cv: float
    V_cv: float
    slow_t: float
    slow_V: float


@dataclass(frozen=True)
class ContentionSlowdowns:
    """Per drafter, the overlap slowdowns (drafting, verification) it is predicted with."""
    slow_t: tuple[float, ...]
    slow_V: tuple[float, ...]


@dataclass(frozen=True)
class PaperOptimum:
    """The paper's model on the fitted curve over continuous t: optimal t of SD and PSD and the
    exact ratio there."""
    t_sd_s: float
    t_psd_s: float
    ratio_sd_over_psd: float


@dataclass(frozen=True)
class BatchOptimum:
    """The batch-aware model on the fitted curve over a grid of t up to ``grid_max_s``: optimal
    t and time per token of SD and PSD, their ratio."""
    t_sd_s: float
    t_psd_s: float
    sd_time_per_token_s: float
    psd_time_per_token_s: float
    ratio_sd_over_psd: float
    grid_max_s: float


@dataclass(frozen=True)
class ContinuousOptima:
    """Both models' optima over continuous t (results.json: "paper.fit", "batch.fit")."""
    paper_fit: PaperOptimum = field(metadata={"key": "paper.fit"})
    batch_fit: BatchOptimum = field(metadata={"key": "batch.fit"})


@dataclass(frozen=True)
class FrontierPrediction:
    """`predict_optima`'s result: k, m, the drafters, V (median, range), the envelope, the fit,
    the exact theory at the fitted alpha*V, the pooled inputs, the contention, each model's
    predictions at the drafters (`PREDICTION_MODELS`) and the continuous optima."""
    k: int
    m: int
    drafters: tuple[str, ...]
    V_s: float
    V_range_s: tuple[float, float]
    envelope: tuple[str, ...]
    fit: FitSummary
    theory_at_alpha_v: TheoryAtAlphaV
    pooled: PooledInputs
    contention: ContentionSlowdowns
    predictions: Mapping[str, ModelPrediction]
    continuous: ContinuousOptima
