"""Simulator configuration: frozen dataclasses and TOML loading.

Every error is one line that names the offending field (``server.k: must be >= 1, got 0``);
unknown keys are rejected.  The model tables (``target.cost``, ``drafter.cost``,
``acceptance``, ``workload``) are parsed once, when the ``SimConfig`` is made, into the frozen
specs of ``sim.model_specs`` (their registries in ``sim.costs``, ``sim.acceptance_registry`` and
``sim.workloads`` validate their fields and build the model, which every run reuses); they
still read as the tables written.  A trace-file workload without ``max_model_len`` refuses the
requests longer than the target's catalog context length (``sim/costs/models.toml``), if any.

Layout of a config file (see ``sim/configs/*.toml``)::

    seed = 0
    requests = 200
    [server]      mode, k, k_choices, m, policy, kv_blocks, block_size, max_interval_steps,
                  dsd_hit_rate, dsd_fanout, dsd_hits (mode = "dsd"; docs/dsd.md),
                  cap_proposals (as psdlab's runtime: a sequence proposes min(k, tokens it
                  still needs - 1) and the verification computes every row at the longest
                  row's width; plans advance one step at a time), engine_step (host work
                  around the passes: "none" (default), a preset of sim/costs/engine_steps.toml,
                  "preset" (the target GPU cost preset's) or an inline table;
                  sim.costs.engine_step), scheduler ("v0" default, "v1": a token budget per
                  step with chunked prefill, max_num_batched_tokens; docs/scheduler.md)
    [target]      name, device, cost = {name = "roofline", ...}
    [drafter]     name, device, cost = {...}          (not needed for mode = "ar")
    [acceptance]  name = "geometric", alpha = 0.8, ...
    [workload]    name = "poisson", rate = 5.0, ...
    [jitter]      optional, passed to sim.costs.make_jitter
    [trace]       path, level = "step" | "request" | "none"
    [adaptive]    mode = "adaptive" only: modes, k_choices, margin, hold, ... (the policy's
                  settings, analysis.adaptive_policy; the server: sim.adaptive); read once into
                  ``SimConfig.policy`` (a frozen ``PolicyConfig``)

The drafter's device per mode is one rule here (``drafter_placement``, ``drafter_device``, from
the mode's ``ModeSpec.drafter`` in ``analysis.modes``), used by the simulator's build and by the
capacity planner's device count.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, cast, overload

from psdlab.analysis.adaptive_policy import PolicyConfig, policy_config
from psdlab.analysis.checks import check_choice, check_fields, check_int, check_range
from psdlab.analysis.modes import MODES, SERVER_MODES, Mode, ModeSpec, check_mode, mode_spec
from psdlab.analysis.toml_reader import tomllib
from psdlab.sim.batch_assignment import POLICIES as BATCH_POLICIES
from psdlab.sim.model_specs import AcceptanceSpec, CostSpec, WorkloadSpec

TRACE_LEVELS = ("step", "request", "none")

#: when the first token is emitted (server.first_token)
FIRST_TOKEN = ("prefill", "step")

#: the device a sim drafter gets when it needs one of its own and shares the target's name
OWN_DRAFTER_DEVICE = "sim:drafter"


def drafter_placement(mode: Mode) -> str:
    """Where a mode runs its drafter (its ``ModeSpec.drafter``): "none" (ar), "shared"
    (co-located sd: the target's devices) or "own" (sd-sep, psd, adaptive: a device of its
    own)."""
    return mode_spec(mode).drafter


def drafter_device(mode: Mode, target_device: str, drafter_dev: str | None) -> str:
    """The drafter's device in a run: the target's for co-located SD; else the drafter's own
    (``OWN_DRAFTER_DEVICE`` when it has none or names the target's)."""
    if drafter_placement(mode) == "shared":
        return target_device
    if drafter_dev is None or drafter_dev == target_device:
        return OWN_DRAFTER_DEVICE
    return drafter_dev


#: the step schedulers (``ServerConfig.scheduler``; docs/scheduler.md)
SCHEDULERS = ("v0", "v1")

#: how decoupled drafting's hits are drawn (``ServerConfig.dsd_hits``; sim.build)
DSD_HITS = ("rate", "accepted-length")


@dataclass(frozen=True)
class ServerConfig:
    mode: Mode = "psd"
    k: int = 4                     # draft tokens per step (ignored for ar)
    k_choices: tuple[int, ...] = ()  # optional: each request draws its k uniformly from these
    m: int = 16                    # max_num_seqs; per batch for psd
    policy: str = "paper"          # psd batch manager: paper | rebalance
    kv_blocks: int = 0             # KV-cache capacity in blocks; 0 = unlimited
    block_size: int = 16           # tokens per KV block
    max_interval_steps: int = 512  # fast path: most steps advanced at once
    cap_proposals: bool = False    # propose min(k, remaining - 1), pad the verification
    #: host work around the passes (sim.costs.engine_step): "none" | a preset name |
    #: "preset" (the target GPU cost preset's) | an inline table
    engine_step: str | Mapping[str, Any] = "none"
    #: when a request's first token reaches the client: "prefill" (at the end of the target's
    #: prefill pass) or "step" (at the end of the step that ran it: vLLM returns a step's outputs
    #: after the whole step, the draft model's proposals included)
    first_token: str = "prefill"
    #: mode = "dsd" (docs/dsd.md): the probability that a request's verification outcome is
    #: among those the drafter pre-drafted (a hit; drawn per request and verification), and
    #: the fan-out, the outcomes pre-drafted per request (the pre-drafting pass is an F-way
    #: batch of drafting passes); ``dsd_hits``: "rate" (a hit with probability dsd_hit_rate)
    #: or "accepted-length" (a hit when the accepted count is among the F likeliest of the
    #: run's accepted counts and, with probability dsd_hit_rate, the bonus token was guessed);
    #: ignored by the other modes
    dsd_hit_rate: float = 0.6
    dsd_fanout: int = 3
    dsd_hits: str = "rate"
    #: the step scheduler (docs/scheduler.md): "v0" (vLLM V0 without chunked prefill: every
    #: prompt admitted at a boundary is prefilled whole in a segment before the decode step;
    #: ``m`` is the only limit) or "v1" (vLLM V1 / SGLang: a token budget per step, decode
    #: tokens first, then prefill chunks FCFS in the same target pass; sim.token_budget)
    scheduler: str = "v0"
    #: scheduler = "v1": the most tokens one step's target pass computes (decode / verify
    #: tokens of the running requests plus prefill chunks); ignored by "v0"
    max_num_batched_tokens: int = 8192

    def __post_init__(self) -> None:
        check_mode("server.mode", self.mode, SERVER_MODES)
        check_int("server.k", self.k, 1 if self.spec.drafting else 0, 64)
        if not isinstance(self.k_choices, (list, tuple)):
            raise ValueError(f"server.k_choices: expected a list of integers, got "
                             f"{self.k_choices!r}")
        object.__setattr__(self, "k_choices", tuple(
            check_int(f"server.k_choices[{i}]", v, 1, 64) for i, v in enumerate(self.k_choices)))
        if self.k_choices and not self.spec.drafting:
            raise ValueError(f"server.k_choices: not allowed for server.mode = {self.mode!r}")
        check_int("server.m", self.m, 1, 4096)
        check_choice("server.policy", self.policy, tuple(BATCH_POLICIES))
        check_int("server.kv_blocks", self.kv_blocks, 0)
        check_int("server.block_size", self.block_size, 1, 4096)
        check_int("server.max_interval_steps", self.max_interval_steps, 1, 1 << 16)
        if not isinstance(self.cap_proposals, bool):
            raise ValueError(f"server.cap_proposals: expected true or false, got "
                             f"{self.cap_proposals!r}")
        check_choice("server.first_token", self.first_token, FIRST_TOKEN)
        object.__setattr__(self, "dsd_hit_rate",
                           check_range("server.dsd_hit_rate", self.dsd_hit_rate, 0.0, 1.0))
        check_int("server.dsd_fanout", self.dsd_fanout, 1, 64)
        check_choice("server.dsd_hits", self.dsd_hits, DSD_HITS)
        from psdlab.sim.costs.engine_step import check_spec
        check_spec(self.engine_step)
        self._check_scheduler()

    def _check_scheduler(self) -> None:
        """``scheduler`` and ``max_num_batched_tokens``; under "v1" the budget must hold one
        step's decode tokens, m * (k + 1) (the largest k of ``k_choices``; 1 a sequence for
        a mode without a drafter), and a mode whose policy picks each step is refused."""
        check_choice("server.scheduler", self.scheduler, SCHEDULERS)
        object.__setattr__(self, "max_num_batched_tokens", check_int(
            "server.max_num_batched_tokens", self.max_num_batched_tokens, 1, 1 << 24))
        if self.scheduler != "v1":
            return
        if self.spec.policy:
            raise ValueError(f"server.scheduler: \"v1\" is not supported with server.mode = "
                             f"{self.mode!r} (use \"v0\")")
        per_seq = max((self.k,) + self.k_choices) + 1 if self.spec.drafting else 1
        if self.max_num_batched_tokens < self.m * per_seq:
            raise ValueError(f"server.max_num_batched_tokens: must be >= server.m * (k + 1) = "
                             f"{self.m * per_seq} (one step's decode tokens) with server."
                             f"scheduler = \"v1\", got {self.max_num_batched_tokens!r}")

    @property
    def spec(self) -> ModeSpec:
        """The mode's entry in the registry (``analysis.modes``)."""
        return mode_spec(self.mode, "server.mode")


@dataclass(frozen=True)
class SimModel:
    name: str
    device: str
    cost: Mapping[str, Any]

    @property
    def cost_spec(self) -> CostSpec:
        """The cost table's typed view: the parsed spec of a config's model (parsed when the
        config is made), an unchecked view of a loose model's table."""
        return CostSpec.unchecked(self.cost, "cost")


def _with_cost(model: SimModel, where: str) -> SimModel:
    """``model`` with its cost table parsed (``CostSpec``); itself when it is already."""
    if isinstance(model.cost, CostSpec):
        return model
    return dataclasses.replace(model, cost=CostSpec.from_mapping(model.cost, where))


@dataclass(frozen=True)
class TraceConfig:
    path: str | None = None
    level: str = "step"

    def __post_init__(self) -> None:
        check_choice("trace.level", self.level, TRACE_LEVELS)


@dataclass(frozen=True)
class SimConfig:
    server: ServerConfig
    target: SimModel
    drafter: SimModel | None
    acceptance: Mapping[str, Any]
    workload: Mapping[str, Any]
    requests: int = 100
    seed: int = 0
    jitter: Mapping[str, Any] | None = None
    trace: TraceConfig = field(default_factory=TraceConfig)
    #: mode = "adaptive": the [adaptive] table as written (the policy's settings)
    adaptive: Mapping[str, Any] | None = None
    #: mode = "adaptive": that table read once (defaults where it is missing); None otherwise
    policy: PolicyConfig | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        check_int("requests", self.requests, 1, 100_000_000)
        if self.adaptive is not None or self.server.spec.policy:
            object.__setattr__(self, "policy", policy_config(self.adaptive))
            if not self.server.spec.policy:
                policy_modes = " or ".join(repr(s.name) for s in MODES if s.policy)
                raise ValueError(f"adaptive: only with server.mode = {policy_modes}, got "
                                 f"{self.server.mode!r}")
        check_int("seed", self.seed, 0)
        if self.server.spec.drafting and self.drafter is None:
            raise ValueError(f"drafter: missing (required for server.mode = "
                             f"{self.server.mode!r})")
        self._parse_specs()

    def _parse_specs(self) -> None:
        """The model tables parsed once (``sim.model_specs``), in the order the simulator used
        to build them: workload, target cost, drafter cost, acceptance (the last two unless
        mode = "ar", which needs neither); a table parsed already is kept as it is."""
        target = _with_cost(self.target, "target.cost")
        object.__setattr__(self, "workload", WorkloadSpec.with_default(
            self.workload, "workload", target.cost_spec.max_model_len))
        object.__setattr__(self, "target", target)
        if self.server.spec.drafting:
            assert self.drafter is not None          # checked in __post_init__
            object.__setattr__(self, "drafter", _with_cost(self.drafter, "drafter.cost"))
            object.__setattr__(self, "acceptance",
                               AcceptanceSpec.from_mapping(self.acceptance, "acceptance"))

    @property
    def workload_spec(self) -> WorkloadSpec:
        """The workload table, parsed (``__post_init__``)."""
        return cast(WorkloadSpec, self.workload)

    @property
    def acceptance_spec(self) -> AcceptanceSpec:
        """The acceptance table, parsed (mode != "ar" only: ``__post_init__``)."""
        return AcceptanceSpec.from_mapping(self.acceptance, "acceptance")

    def replace(self, **changes: Any) -> "SimConfig":
        """A copy with top-level fields or ``server_<field>`` / ``trace_<field>`` changed."""
        server = {k[7:]: v for k, v in changes.items() if k.startswith("server_")}
        trace = {k[6:]: v for k, v in changes.items() if k.startswith("trace_")}
        top = {k: v for k, v in changes.items()
               if not k.startswith("server_") and not k.startswith("trace_")}
        if server:
            top["server"] = dataclasses.replace(self.server, **server)
        if trace:
            top["trace"] = dataclasses.replace(self.trace, **trace)
        return dataclasses.replace(self, **top)


# ---------------------------------------------------------------------------- loading

_TOP_KEYS = ("seed", "requests", "server", "target", "drafter", "acceptance", "workload",
             "jitter", "trace", "plan", "adaptive")
_MODEL_KEYS = ("name", "device", "cost")


@overload
def _table(raw: Mapping[str, Any], name: str, *, required: Literal[True]) -> dict[str, Any]: ...
@overload
def _table(raw: Mapping[str, Any], name: str, *, required: bool) -> dict[str, Any] | None: ...
def _table(raw: Mapping[str, Any], name: str, *, required: bool) -> dict[str, Any] | None:
    value = raw.get(name)
    if value is None:
        if required:
            raise ValueError(f"{name}: missing table [{name}]")
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{name}: expected a table, got {value!r}")
    return value


def _resolve_paths(spec: Any, base_dir: str) -> Any:
    """Make relative ``path`` / ``trace`` file names in a spec relative to the config file, and
    a cost table's ``model`` when it names a config.json (a ``.json`` file, or a folder beside
    the config holding one: sim/costs/hf_config.py); a catalog name stays as it is."""
    if isinstance(spec, dict):
        out = {}
        for key, value in spec.items():
            if isinstance(value, str) and not os.path.isabs(value) and (
                    key in ("path", "trace") or key == "model" and _names_config(value, base_dir)):
                value = os.path.join(base_dir, value)
            out[key] = _resolve_paths(value, base_dir)
        return out
    return spec


def _names_config(value: str, base_dir: str) -> bool:
    """Whether a ``model`` value names a config.json relative to the config file."""
    return value.lower().endswith(".json") or os.path.isfile(
        os.path.join(base_dir, value, "config.json"))


@overload
def _model(raw: dict[str, Any], where: str, default_device: str) -> SimModel: ...
@overload
def _model(raw: dict[str, Any] | None, where: str, default_device: str) -> SimModel | None: ...
def _model(raw: dict[str, Any] | None, where: str, default_device: str) -> SimModel | None:
    if raw is None:
        return None
    check_fields(raw, where, optional=_MODEL_KEYS, named=False)
    cost = raw.get("cost")
    if not isinstance(cost, dict):
        raise ValueError(f"{where}.cost: expected a table like {{name = \"affine\", ...}}, "
                         f"got {cost!r}")
    name = raw.get("name", cost.get("model", cost.get("name")))
    device = raw.get("device", default_device)
    for key, value in (("name", name), ("device", device)):
        if not isinstance(value, str):
            raise ValueError(f"{where}.{key}: expected a string, got {value!r}")
    return SimModel(name=cast(str, name), device=device, cost=cost)  # checked just above


def _server(raw: dict[str, Any] | None) -> ServerConfig:
    raw = raw or {}
    names = [f.name for f in dataclasses.fields(ServerConfig)]
    check_fields(raw, "server", optional=names, named=False)
    return ServerConfig(**raw)


def config_from_dict(raw: Mapping[str, Any], base_dir: str = ".") -> SimConfig:
    """Build a SimConfig from a parsed TOML document (``base_dir`` resolves relative paths)."""
    check_fields(raw, "", optional=_TOP_KEYS, named=False)
    # input files named in model specs are relative to the config file; outputs (trace.path,
    # plan.csv) to the current directory
    raw = {key: (_resolve_paths(value, base_dir) if key not in ("trace", "plan") else value)
           for key, value in raw.items()}
    server = _server(_table(raw, "server", required=False))
    target = _model(_table(raw, "target", required=True), "target", "sim:target")
    # the drafter's device is resolved per mode by the engine (co-located for mode = "sd")
    drafter = _model(_table(raw, "drafter", required=False), "drafter", "sim:drafter")
    acceptance = _table(raw, "acceptance", required=server.spec.drafting) or {"name": "none"}
    workload = _table(raw, "workload", required=True)
    trace_raw = _table(raw, "trace", required=False) or {}
    check_fields(trace_raw, "trace", optional=("path", "level"), named=False)
    return SimConfig(server=server, target=target, drafter=drafter, acceptance=acceptance,
                     workload=workload, requests=raw.get("requests", 100),
                     seed=raw.get("seed", 0), jitter=_table(raw, "jitter", required=False),
                     trace=TraceConfig(**trace_raw),
                     adaptive=_table(raw, "adaptive", required=False))


def read_toml(path: str | os.PathLike) -> dict[str, Any]:
    """Parse a TOML file; syntax errors become one-line ValueErrors naming the file."""
    with open(path, "rb") as fh:
        try:
            return tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{os.fspath(path)}: invalid TOML: {exc}") from None


def load_config(path: str | os.PathLike) -> SimConfig:
    """Read and validate a simulator config file."""
    raw = read_toml(path)
    return config_from_dict(raw, os.path.dirname(os.path.abspath(path)))
