"""What ``psdlab cost`` prints: one pass priced from command-line fields (with one-line errors
that name the flag), and the predicted-vs-published report of public_check as a text table and
a markdown results file (with date, machine and commit).  Both results are frozen dataclasses
(``OnePass``, ``CostCheckReport``); their ``to_dict()`` is what ``--json`` prints."""
from __future__ import annotations

import dataclasses
import datetime
import os
import platform
from dataclasses import dataclass
from typing import Any, Mapping

from psdlab.analysis.json_out import finite_json
from psdlab.analysis.checks import check_int
from psdlab.analysis.version import git_commit

from .base import make_cost_model
from .gpu import GpuCost, engine_presets
from .roofline import RooflineCost
from .public_check import (MINEDRAFT_DRAFTS, MINEDRAFT_VERIFY, CostCheckRow, MinedraftGain,
                           borrowed_efficiencies, check_rows, minedraft_gains, minedraft_step,
                           per_step_gain, point_by_id)

COMMAND = "psdlab cost --check --out results/gpu_cost_check.md"


@dataclass(frozen=True)
class OnePass:
    """One forward pass priced: its seconds, the terms behind them and the cost model."""
    seconds: float
    model: str
    hardware: str
    tp: int
    dtype: str
    engine: str
    seqs: int
    tokens: int
    context: int
    terms: tuple[tuple[str, float], ...]         # (term, seconds), without the total
    bound: str                                   # compute | memory
    cost: Mapping[str, Any]                      # the cost model's describe()
    #: what the engine preset's efficiencies are borrowed from on a part it was not fitted
    #: on ("" when fitted on it, or the ideal roofline); public_check.borrowed_efficiencies
    borrowed: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
               "terms": dict(self.terms), "cost": dict(self.cost)}
        if not self.borrowed:                    # the fitted parts' JSON as before
            del out["borrowed"]
        return out


def one_pass(*, model: str, hardware: str, tp: int, dtype: str | None, engine: str,
             link: str | None, seqs: int, tokens: int, context: int) -> OnePass:
    """Seconds of one pass and its terms; ValueError naming the flag (``--tp: ...``).
    ``dtype`` None: the model's own weight format (a quantised config.json's), else bf16."""
    seqs = check_int("--seqs", seqs, 1, 10**6)
    tokens = check_int("--tokens", tokens, 1, 10**7)
    if tokens < seqs:
        raise ValueError(f"--tokens: must be >= --seqs ({seqs}): each sequence computes at "
                         f"least one token, got {tokens}")
    context = check_int("--context", context, 0, 10**10)
    tp = check_int("--tp", tp, 1, 64)
    spec: dict[str, str | int] = {"name": "gpu", "model": model, "hardware": hardware, "tp": tp,
                                  "engine": engine}
    if dtype is not None:
        spec["dtype"] = dtype
    if link is not None:
        spec["link"] = link
    try:
        cost = make_cost_model(spec, "cost")
    except ValueError as exc:
        msg = str(exc)
        raise ValueError("--" + msg[len("cost."):] if msg.startswith("cost.") else msg) from None
    assert isinstance(cost, (GpuCost, RooflineCost))     # what a "gpu" spec makes
    seconds = cost.forward_time(seqs, tokens, context)
    parts = cost.breakdown(seqs, tokens, context)
    borrowed = ""
    if isinstance(cost, GpuCost):
        bound = parts.pop("bound")
        terms = {k: v for k, v in parts.items() if k != "total"}
        borrowed = borrowed_efficiencies(cost.engine, cost.roofline.hardware.name)
    else:
        bound = "compute" if parts["compute"] > parts["memory"] else "memory"
        terms = {k: v for k, v in parts.items() if k != "total"}
    desc = cost.describe()
    return OnePass(seconds=seconds, model=desc["model"], hardware=desc["hardware"], tp=tp,
                   dtype=desc["dtype"], engine=engine, seqs=seqs, tokens=tokens,
                   context=context, terms=tuple(terms.items()), bound=bound, cost=desc,
                   borrowed=borrowed)


SETTING_DRAFTERS = ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b")


@dataclass(frozen=True)
class StepTimes:
    """One MineDraft step: drafting t and verification V (ms) and the per-step gain."""
    draft_ms: float
    verify_ms: float
    gain: float


@dataclass(frozen=True)
class SettingStepRow:
    """One setting at one k: the step per engine preset, and the paper's where it has one."""
    setting: int
    drafter: str
    k: int
    engines: tuple[tuple[str, StepTimes], ...]   # (engine preset, its step)
    paper: StepTimes | None

    def engine(self, name: str) -> StepTimes:
        return dict(self.engines)[name]

    def to_dict(self) -> dict[str, Any]:
        return {"setting": self.setting, "drafter": self.drafter, "k": self.k,
                **{eng: dataclasses.asdict(t) for eng, t in self.engines},
                "paper": None if self.paper is None else dataclasses.asdict(self.paper)}


def settings_table(engines: tuple[str, ...] = ("vllm-eager", "ideal")
                   ) -> tuple[SettingStepRow, ...]:
    """MineDraft settings 1-3 (drafter 0.6B / 1.7B / 4B), k = 1..5: predicted drafting t,
    verification V and per-step gain per engine, with the paper's Fig. 25 value where it has
    one."""
    published = {(d, k): (point_by_id(pid).published_ms, point_by_id(MINEDRAFT_VERIFY[k])
                          .published_ms) for d, k, pid in MINEDRAFT_DRAFTS}
    rows = []
    for number, drafter in enumerate(SETTING_DRAFTERS, start=1):
        for k in range(1, 6):
            steps = []
            for eng in engines:
                t, v = minedraft_step(drafter, k, eng)
                steps.append((eng, StepTimes(draft_ms=t * 1e3, verify_ms=v * 1e3,
                                             gain=per_step_gain(t, v))))
            pub = published.get((drafter, k))
            rows.append(SettingStepRow(
                setting=number, drafter=drafter, k=k, engines=tuple(steps),
                paper=None if pub is None else StepTimes(
                    draft_ms=pub[0], verify_ms=pub[1], gain=per_step_gain(pub[0], pub[1]))))
    return tuple(rows)


@dataclass(frozen=True)
class PresetSummary:
    """An engine preset: the points it was fitted on, its execution and description."""
    name: str
    fitted_on: tuple[str, ...]
    execution: str
    description: str


@dataclass(frozen=True)
class CostCheckReport:
    """``psdlab cost --check``: every public point, the MineDraft gains, Settings 1-3 per k,
    the presets and the worst error of a fitted point (None: none fitted)."""
    points: tuple[CostCheckRow, ...]
    minedraft_gains: tuple[MinedraftGain, ...]
    settings: tuple[SettingStepRow, ...]
    presets: tuple[PresetSummary, ...]
    worst_fitted_error: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"points": [dataclasses.asdict(r) for r in self.points],
                "minedraft_gains": [dataclasses.asdict(g) for g in self.minedraft_gains],
                "settings": [r.to_dict() for r in self.settings],
                "presets": {p.name: {"fitted_on": list(p.fitted_on), "execution": p.execution,
                                     "description": p.description} for p in self.presets},
                "worst_fitted_error": self.worst_fitted_error}


def check_report() -> CostCheckReport:
    rows = check_rows()
    fitted = [r for r in rows if r.fitted]
    return CostCheckReport(
        points=rows, minedraft_gains=minedraft_gains(), settings=settings_table(),
        presets=tuple(PresetSummary(name=n, fitted_on=tuple(p.fitted_on), execution=p.execution,
                                    description=p.description)
                      for n, p in engine_presets().items()),
        worst_fitted_error=max((abs(r.error) for r in fitted), default=None))


def format_cost_check_report(report: CostCheckReport) -> str:
    lines = [f"{'point':<28}{'preset':<15}{'fit':>4}{'published':>11}{'predicted':>11}"
             f"{'error':>8}{'ideal':>10}{'ideal err':>10}"]
    for r in report.points:
        lines.append(f"{r.id:<28}{r.preset:<15}{'yes' if r.fitted else 'no':>4}"
                     f"{r.published_ms:>9.3f}ms{r.predicted_ms:>9.3f}ms"
                     f"{r.error:>+8.1%}{r.ideal_ms:>8.3f}ms{r.ideal_error:>+10.1%}")
    lines.append("")
    lines.append("MineDraft per-step PSD/SD gain (t + V) / max(t, V), m = 16, vllm-eager:")
    lines.append(f"{'drafter':<12}{'k':>3}{'t pub':>9}{'V pub':>9}{'gain pub':>10}{'t pred':>9}"
                 f"{'V pred':>9}{'gain pred':>11}{'error':>8}  published t")
    for g in report.minedraft_gains:
        lines.append(f"{g.drafter:<12}{g.k:>3}{g.published_draft_ms:>9.2f}"
                     f"{g.published_verify_ms:>9.2f}{g.published_gain:>10.3f}"
                     f"{g.predicted_draft_ms:>9.2f}{g.predicted_verify_ms:>9.2f}"
                     f"{g.predicted_gain:>11.3f}{g.error:>+8.1%}  {g.derived}")
    lines.append("")
    lines.append("Settings 1-3 (Qwen3-32B TP 4 on L40 + drafter on an L40, m = 16, context "
                 "16 x 430): per-step t, V (ms) and gain")
    lines.append(f"{'set':>3} {'drafter':<11}{'k':>2}{'eager t':>9}{'eager V':>9}{'gain':>6}"
                 f"{'ideal t':>9}{'ideal V':>9}{'gain':>6}{'paper t':>9}{'paper V':>9}{'gain':>6}")
    for row in report.settings:
        e, i, p = row.engine("vllm-eager"), row.engine("ideal"), row.paper
        paper = (f"{p.draft_ms:>9.2f}{p.verify_ms:>9.2f}{p.gain:>6.2f}" if p
                 else f"{'-':>9}{'-':>9}{'-':>6}")
        lines.append(f"{row.setting:>3} {row.drafter:<11}{row.k:>2}{e.draft_ms:>9.2f}"
                     f"{e.verify_ms:>9.2f}{e.gain:>6.2f}{i.draft_ms:>9.2f}"
                     f"{i.verify_ms:>9.2f}{i.gain:>6.2f}" + paper)
    return "\n".join(lines)


def _commit() -> str:
    git = git_commit(os.path.dirname(os.path.abspath(__file__)), only=".")
    return (git.short or "unknown") + (" (sim/costs modified)" if git.dirty else "")


def write_cost_check_report(report: CostCheckReport, path: str) -> str:
    """The report as markdown with how and where it was made."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = [
        "# GPU cost presets: predicted vs published public measurements", "",
        f"Written by `{COMMAND}` on {now}, machine {platform.node() or 'unknown'} "
        f"({platform.platform()}), commit {_commit()}.  Pure computation: the numbers do not "
        "depend on the machine.", "",
        "Each point is priced with the preset of the engine that was measured "
        "(sim/costs/public_measurements.toml gives its source); `fit` says whether that preset "
        "was fitted on it (sim/costs/engines.toml, `fitted_on`); `ideal` is the ideal "
        "roofline.", "", "```", format_cost_check_report(report), "```", ""]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(head))
    return path


def one_pass_text(out: OnePass) -> str:
    """`one_pass`'s result as the one line `psdlab cost` prints."""
    terms = ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in out.terms)
    return (f"{out.model} on {out.tp}x {out.hardware} ({out.dtype}, "
            f"{out.engine}): {out.seconds * 1e3:.3f} ms for {out.seqs} seqs x "
            f"{out.tokens} tokens, context {out.context}"
            + (f" [{terms}; {out.bound}-bound]" if terms else "")
            + (f" ({out.borrowed})" if out.borrowed else ""))


def check_command(out: str | None = None, as_json: bool = False) -> str:
    """`psdlab cost --check [--out FILE]`: the report (written to ``out`` as markdown when
    given) as text, or one JSON object."""

    report = check_report()
    if out:
        write_cost_check_report(report, out)
    if as_json:
        return finite_json(report.to_dict(), sort_keys=True)
    return format_cost_check_report(report) + (f"\nwritten: {out}" if out else "")
