"""The capacity plan's typed values: a configuration of the sweep (``PlanCombo``), what one
configuration sustains (``ConfigResult``) and one row of the plan (``PlanRow``: a result times
a replica count, with the Pareto flag).

A ``PlanRow`` also reads as a read-only mapping of its CSV columns (``row["mode"]``,
``dict(row)``), so the report, the figure and the k table take rows or plain dicts alike;
``to_csv_row()`` is the flat dict the CSV and ``--json`` write.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterator

from psdlab.analysis.modes import Mode
from psdlab.sim.sim_config import SimModel


@dataclass(frozen=True)
class PlanCombo:
    """One configuration of the sweep: mode, k, m and (not for ar) the drafter with its own
    acceptance spec (None: the config's)."""
    mode: Mode
    k: int
    m: int
    drafter: SimModel | None = None
    acceptance: Mapping[str, Any] | None = None

    @property
    def label(self) -> str:
        """How errors and the test hook name it: "psd k=4 m=16 drafter=qwen3-1.7b"."""
        if self.drafter is None:
            return f"{self.mode} m={self.m}"
        return f"{self.mode} k={self.k} m={self.m} drafter={self.drafter.name}"


@dataclass(frozen=True)
class ConfigResult:
    """What one configuration (one replica) sustains under the SLO: the means over seeds
    (``sim.capacity.evaluate_combo``), ``max_rate_*`` never above ``capacity_req_s`` (the
    offline steady-state capacity), and the rate's interval over seeds."""
    mode: str
    k: int
    m: int
    drafter: str
    capacity_req_s: float
    max_rate_req_s: float
    tok_s: float | None
    devices_per_replica: int
    cost_model: str
    #: (SLO column, its value at the highest sustainable rate), in the SLO's order
    slo: tuple[tuple[str, float | None], ...] = ()
    #: the rate's interval over seeds (None: one seed)
    max_rate_lo_req_s: float | None = None
    max_rate_hi_req_s: float | None = None
    seeds: int = 1
    #: what bounds the rate: "capacity" (capped: the SLO held at the offline capacity), "slo",
    #: "none" (no rate tried met the SLO: 0), "mixed" (the seeds differ)
    bound: str = "slo"
    #: the offline run's requests / makespan (its drain included: below ``capacity_req_s``)
    offline_req_s: float | None = None
    #: (SLO column, its value at the lowest rate tried), what comes closest when none meets it
    slo_lowest: tuple[tuple[str, float | None], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The flat dict (columns in the order the plan always wrote them, then those of
        ``sim.capacity.TAIL_COLUMNS``)."""
        return {"mode": self.mode, "k": self.k, "m": self.m, "drafter": self.drafter,
                "capacity_req_s": self.capacity_req_s, "max_rate_req_s": self.max_rate_req_s,
                "tok_s": self.tok_s, "devices_per_replica": self.devices_per_replica,
                "cost_model": self.cost_model, **dict(self.slo),
                "max_rate_lo_req_s": self.max_rate_lo_req_s,
                "max_rate_hi_req_s": self.max_rate_hi_req_s, "seeds": self.seeds,
                "bound": self.bound, "offline_req_s": self.offline_req_s}


@dataclass(frozen=True, eq=False)
class PlanRow(Mapping[str, Any]):
    """One row of the plan: a configuration's result with ``replicas`` replicas."""
    result: ConfigResult
    replicas: int
    pareto: bool = False

    @property
    def devices(self) -> int:
        return self.replicas * self.result.devices_per_replica

    @property
    def total_rate_req_s(self) -> float:
        return self.replicas * self.result.max_rate_req_s

    @property
    def tok_s_per_device(self) -> float:
        return (self.result.tok_s or 0.0) / self.result.devices_per_replica

    def to_csv_row(self) -> dict[str, Any]:
        """The row as the CSV (and ``--json``) write it."""
        return {**self.result.to_dict(), "replicas": self.replicas, "devices": self.devices,
                "total_rate_req_s": self.total_rate_req_s,
                "tok_s_per_device": self.tok_s_per_device, "pareto": self.pareto}

    def __getitem__(self, key: str) -> Any:
        return self.to_csv_row()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_csv_row())

    def __len__(self) -> int:
        return len(self.to_csv_row())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PlanRow):
            return (self.result, self.replicas, self.pareto) == (
                other.result, other.replicas, other.pareto)
        return Mapping.__eq__(self, other)

    def __hash__(self) -> int:
        return hash((self.result, self.replicas, self.pareto))
