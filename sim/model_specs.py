"""Typed, frozen model specs: a config's workload, cost and acceptance tables parsed once.

``SimConfig`` (``sim.sim_config``) turns its ``workload``, ``target.cost`` / ``drafter.cost`` and
``acceptance`` tables into a :class:`WorkloadSpec`, :class:`CostSpec` and
:class:`AcceptanceSpec` when it is made: ``from_mapping(raw, where)`` validates the table by
building its model through the registry (``sim.workloads.WORKLOADS``,
``sim.costs.base.COST_MODELS``, ``sim.acceptance_registry.ACCEPTANCE_REGISTRY``), so a bad
field raises the registry's one-line error at load, and keeps that model: ``spec.model()``
returns it, and every run of the config (a plan's bisection trials among them,
``sim.capacity.evaluate_combo``) reuses it instead of validating and building again.

A spec still reads as the mapping it was written as (``spec["rate"]``, ``dict(spec)``,
``spec == {...}``), so trace headers, cache keys (``sim.trajectories``) and the other layers
see the same table as before.  Pickling keeps the table and drops the model, which the
receiving process builds on first use (a plan's worker: once per configuration).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator, Mapping, TypeVar

_S = TypeVar("_S", bound="TableSpec")


@dataclass(frozen=True, eq=False)
class TableSpec(Mapping[str, Any]):
    """A validated model table: its ``name``, the table as written (``raw``), the ``where``
    prefix of its errors and the model built from it (``model()``)."""
    raw: Mapping[str, Any]
    where: str
    name: str
    _built: list[Any] = field(default_factory=list, repr=False, compare=False)

    #: the kind's word in "WHERE: expected a table with a 'name', got ..."
    expected: ClassVar[str] = "a table with a 'name'"

    @classmethod
    def from_mapping(cls: type[_S], raw: Mapping[str, Any], where: str) -> _S:
        """The spec of ``raw``, validated now (the registry's one-line errors, prefixed by
        ``where``); a spec of this kind is returned as it is."""
        if isinstance(raw, cls):
            return raw
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where}: expected {cls.expected}, got {raw!r}")
        spec = cls.unchecked(dict(raw), where)
        spec.model()
        return spec

    @classmethod
    def unchecked(cls: type[_S], raw: Mapping[str, Any], where: str) -> _S:
        """The typed view of ``raw`` without validating it (a spec of this kind as it is); its
        model is built, and so checked, on first use."""
        if isinstance(raw, cls):
            return raw
        return cls(raw=raw, where=where, name=str(raw.get("name", "")))

    def model(self) -> Any:
        """The model of this table, built on first use and kept."""
        if not self._built:
            self._built.append(self._make())
        return self._built[0]

    def _make(self) -> Any:
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self).unchecked, (dict(self.raw), self.where))

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)

    def __repr__(self) -> str:
        return repr(self.raw)


@dataclass(frozen=True, eq=False, repr=False)
class CostSpec(TableSpec):
    """A cost model's table (``sim.costs``): ``name``, the catalog ``model`` it names (gpu /
    roofline), its tensor-parallel degree ``tp``."""
    expected: ClassVar[str] = "a table/dict with a 'name'"

    @property
    def catalog_model(self) -> str | None:
        """The model catalog entry the table names by name (None: inline or none)."""
        value = self.raw.get("model")
        return value if isinstance(value, str) else None

    @property
    def tp(self) -> int:
        """Devices of one replica's tensor-parallel group (1 when the table sets none)."""
        return int(self.raw.get("tp", 1))

    @property
    def engine(self) -> str | Mapping[str, Any] | None:
        """The engine preset a gpu table names (``vllm-eager``, ...), an inline preset table,
        or None."""
        return self.raw.get("engine")

    @property
    def label(self) -> str:
        """How a plan row names the cost model: ``gpu:vllm-eager`` (a named engine preset),
        ``gpu:inline`` (an inline preset), else the model's name."""
        engine = self.engine
        if isinstance(engine, str):
            return f"{self.name}:{engine}"
        return f"{self.name}:inline" if engine is not None else self.name

    @property
    def max_model_len(self) -> int | None:
        """The context length of the catalog model a gpu / roofline table names
        (``sim/costs/models.toml``), or of the config.json it names (``max_position_embeddings``);
        None for an inline model, another cost model or an entry without one."""
        name = self.catalog_model
        if self.name not in ("gpu", "roofline") or name is None:
            return None
        from psdlab.sim.costs.catalog import model_catalog
        key = name.lower()
        for entry_name, entry in model_catalog().items():
            if key in (entry_name, entry.hf_id.lower()):
                value = getattr(entry, "max_model_len", None)
                return int(value) if value else None
        from psdlab.sim.costs.catalog import get_model
        from psdlab.sim.costs.hf_config import config_path
        if config_path(name) is not None:   # a config.json: its max_position_embeddings
            value = get_model(name, f"{self.where}.model").max_model_len
            return int(value) if value else None
        return None

    def _make(self) -> Any:
        from psdlab.sim.costs.base import COST_MODELS
        return COST_MODELS.get(self.raw.get("name"), f"{self.where}.name")(self.raw, self.where)


@dataclass(frozen=True, eq=False, repr=False)
class AcceptanceSpec(TableSpec):
    """An acceptance model's table (``sim.acceptance_registry``)."""

    def _make(self) -> Any:
        from psdlab.sim.acceptance_registry import ACCEPTANCE_REGISTRY
        return ACCEPTANCE_REGISTRY.get(self.raw.get("name"), f"{self.where}.name")(
            self.raw, self.where)


@dataclass(frozen=True, eq=False, repr=False)
class WorkloadSpec(TableSpec):
    """A workload's table (``sim.workloads``) and the context length that refuses a trace
    file's longer requests when the table sets none (``default_max_model_len``: the target's
    catalog ``max_model_len``, ``sim.sim_config``)."""
    default_max_model_len: int | None = None

    @classmethod
    def with_default(cls, raw: Mapping[str, Any], where: str,
                     max_model_len: int | None) -> "WorkloadSpec":
        """``from_mapping`` with a default context length (ignored unless ``name = "file"``)."""
        if isinstance(raw, cls) and raw.default_max_model_len == max_model_len:
            return raw
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where}: expected {cls.expected}, got {raw!r}")
        spec = cls(raw=dict(raw), where=where, name=str(raw.get("name", "")),
                   default_max_model_len=max_model_len)
        spec.model()
        return spec

    @property
    def resolved(self) -> Mapping[str, Any]:
        """The table the workload is built from: ``raw``, plus the default ``max_model_len``
        for a trace file that sets none."""
        return with_max_model_len(self.raw, self.default_max_model_len)

    @property
    def is_file(self) -> bool:
        """A trace file's requests (``name = "file"``)."""
        return self.name == "file"

    @property
    def rate_scale(self) -> float:
        """A trace file's arrival-rate multiplier (1 when the table sets none)."""
        return float(self.raw.get("rate_scale", 1.0))

    @property
    def rate(self) -> float | None:
        """Requests per second of a timed workload (poisson, gamma); None otherwise."""
        value = self.raw.get("rate")
        return float(value) if isinstance(value, (int, float)) else None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_workload_unchecked, (dict(self.raw), self.where, self.default_max_model_len))

    def _make(self) -> Any:
        from psdlab.sim.workloads import WORKLOADS
        return WORKLOADS.get(self.raw.get("name"), f"{self.where}.name")(self.resolved,
                                                                          self.where)


def with_max_model_len(raw: Mapping[str, Any], default: int | None) -> Mapping[str, Any]:
    """A trace-file workload table with ``max_model_len = default`` when it sets none (and a
    default is known); any other table as it is."""
    if default is None or raw.get("name") != "file" or raw.get("max_model_len") is not None:
        return raw
    return {**raw, "max_model_len": default}


def _workload_unchecked(raw: Mapping[str, Any], where: str,
                        default: int | None) -> WorkloadSpec:
    return WorkloadSpec(raw=raw, where=where, name=str(raw.get("name", "")),
                        default_max_model_len=default)
