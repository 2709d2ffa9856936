"""The typed result of ``psdlab systems check`` (``sim.system_check.check``): one row per public
point, the summary over the fitted, held-out and judge points, and the run's stamp (machine,
date, commit), each a frozen dataclass; ``to_dict()`` gives the JSON document the command writes
(keys in the order of the fields).  ``stamp()`` serves ``psdlab systems
gain`` (``paper_figs.settings_gain``) as well."""
from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import statistics
from dataclasses import dataclass
from typing import Any

from psdlab.analysis.version import git_commit

#: a held-out or judge point within this fraction counts as predicted
HELD_OUT_WITHIN = 0.15


@dataclass(frozen=True)
class RunStamp:
    """Where and when a result was computed (pure simulation: the numbers do not depend on
    it)."""
    machine: str
    date_utc: str
    commit: str
    note: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def stamp() -> RunStamp:
    """Machine, UTC date and git commit (+ dirty) of the working tree."""
    git = git_commit(os.path.dirname(os.path.abspath(__file__)))
    return RunStamp(machine=f"{platform.node() or 'unknown'} ({platform.platform()})",
                    date_utc=datetime.datetime.now(datetime.timezone.utc).strftime(
                        "%Y-%m-%d %H:%M UTC"),
                    commit=(git.short or "unknown") + (" dirty" if git.dirty else ""),
                    note="pure simulation: the numbers do not depend on the machine")


@dataclass(frozen=True)
class SystemPointResult:
    """One public point: published vs predicted, and how its SD acceptance was set."""
    id: str
    role: str
    quantity: str
    engine_step: str
    gpu_preset: str
    published: float
    predicted: float
    error: float
    within_10pct: bool
    acceptance: str          # "published", "alpha fitted on ID", "alpha ASSUMED ...", "" (AR)
    alpha: float | None
    source: str
    figure: str
    setup: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class JudgedSummary:
    """The judge points (never fitted on): how many, median |error|, how many within 15%."""
    judge: int
    judge_median_abs_error: float
    judge_within_15pct: int


@dataclass(frozen=True)
class SystemCheckSummary:
    fitted: int
    fitted_within_10pct: int
    held_out: int
    held_out_mean_abs_error: float | None       # None: no held-out point
    held_out_median_abs_error: float | None
    held_out_within_15pct: int
    judged: JudgedSummary | None                 # None: no judge point

    @classmethod
    def of(cls, rows: tuple[SystemPointResult, ...]) -> SystemCheckSummary:
        fit = [r for r in rows if r.role == "fit"]
        held = [abs(r.error) for r in rows if r.role == "held_out"]
        judge = [abs(r.error) for r in rows if r.role == "judge"]
        return cls(fitted=len(fit), fitted_within_10pct=sum(r.within_10pct for r in fit),
                   held_out=len(held),
                   held_out_mean_abs_error=sum(held) / len(held) if held else None,
                   held_out_median_abs_error=statistics.median(held) if held else None,
                   held_out_within_15pct=sum(e <= HELD_OUT_WITHIN for e in held),
                   judged=JudgedSummary(len(judge), statistics.median(judge),
                                        sum(e <= HELD_OUT_WITHIN for e in judge))
                   if judge else None)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        judged = out.pop("judged")
        return {**out, **(judged or {})}


@dataclass(frozen=True)
class SystemCheckResult:
    """``psdlab systems check``: every point predicted vs published, the summary, the stamp."""
    command: str
    seed: int
    points: tuple[SystemPointResult, ...]
    summary: SystemCheckSummary
    stamp: RunStamp

    def to_dict(self) -> dict[str, Any]:
        return {"command": self.command, "seed": self.seed,
                "points": [p.to_dict() for p in self.points], "summary": self.summary.to_dict(),
                **self.stamp.to_dict()}
