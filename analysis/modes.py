"""The serving modes as data: one frozen ``ModeSpec`` per mode in one registry (``MODES``).

- ``ar``: autoregressive decoding, no drafter.
- ``sd``: speculative decoding, drafter and target alternate on the target's device(s).
- ``sd-sep``: SD with the drafter on its own device (still alternating).
- ``psd``: batch-parallel SD, two batches: one drafts while the other verifies.
- ``adaptive``: a policy picks AR, SD(k) or PSD(k) step by step (``analysis.adaptive_policy``).
- ``dsd``: decoupled drafting (SSD / Saguaro, arXiv 2603.03251): one batch; the drafter, on its
  own device, pre-drafts the next round for the likeliest verification outcomes while the
  target verifies; a request whose outcome was pre-drafted (a hit) is verified again at once,
  the others are drafted again first (a catch-up, as SD-sep).  Simulator only
  (``analysis.theory.decoupled``, docs/dsd.md).

Every layer reads a mode's fields instead of comparing its name: the simulator's step plan
(``sim.step_plan``, ``sim.core``, ``sim.lanes``, ``sim.step_layout``) lays a step out by the
mode's ``StepSegments``, the batch managers hold ``batches`` batches, the drafter goes where
``drafter`` says (``sim.sim_config.drafter_device``, ``runtime.controller``), the figures
take ``label`` / ``marker`` / ``color``, and the subsets below (what each layer accepts) are
read off the registry.  Adding a mode is one entry here plus the step plan its segments
describe (for a new step structure: a regime in ``sim.step_plan`` and its choice in
``sim.core``).

Modes are plain strings in configs, traces and CSVs; ``Mode`` is their type.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, TypeVar, cast, get_args

_T = TypeVar("_T")

__all__ = ["Mode", "PhaseKey", "StepSegments", "ModeSpec", "MODES", "mode_spec",
           "SERVER_MODES", "TRACE_MODES", "STEP_MODES", "SPEC_MODES", "VLLM_MODES",
           "DRAFTING_MODES", "RUNTIME_MODES", "check_mode"]

Mode = Literal["ar", "sd", "sd-sep", "psd", "adaptive", "dsd"]

#: the phases a step runs: the admissions' prefill on the target and on the drafter, drafting,
#: verification (also the simulator's jitter streams, ``sim.core.JITTER_KEYS``), and the
#: drafter's pre-drafting of the next round while the target verifies (decoupled drafting; it
#: draws the ``draft`` stream's factor)
PhaseKey = Literal["prefill_t", "prefill_d", "draft", "verify", "predraft"]
PHASE_KEYS: tuple[PhaseKey, ...] = get_args(PhaseKey)


@dataclass(frozen=True)
class StepSegments:
    """One step's structure: its segments in order, each the phases that run at the same time
    on their devices (a segment lasts as long as its longest phase; a step's segments run one
    after the other).  Within a segment the phases are listed in the order the simulator
    writes them; a phase a step does not run (no drafter, no admission) is simply absent."""
    segments: tuple[tuple[PhaseKey, ...], ...]

    def __post_init__(self) -> None:
        seen = [p for seg in self.segments for p in seg]
        for p in seen:
            if p not in PHASE_KEYS:
                raise ValueError(f"segments: unknown phase {p!r} (one of {', '.join(PHASE_KEYS)})")
        if len(set(seen)) != len(seen):
            raise ValueError(f"segments: a phase appears twice in {self.segments!r}")
        if not self.has("prefill_t") or not self.has("verify"):
            raise ValueError("segments: a step needs prefill_t and verify")

    def has(self, phase: str) -> bool:
        """Whether the step runs ``phase``."""
        return any(phase in seg for seg in self.segments)

    def at(self, phase: str) -> int:
        """The segment ``phase`` runs in (a one-line ValueError when the step has none)."""
        for i, seg in enumerate(self.segments):
            if phase in seg:
                return i
        raise ValueError(f"phase: {phase!r} is not a segment of {self.segments!r}")

    def ordered(self, by_phase: Mapping[str, _T]) -> list[_T]:
        """The values of ``by_phase`` (keyed by phase) in the step's order: segment by segment,
        within a segment as listed; phases it lacks are left out."""
        return [by_phase[p] for seg in self.segments for p in seg if p in by_phase]

    @property
    def count(self) -> int:
        """Segments per step."""
        return len(self.segments)

    @property
    def prefill_count(self) -> int:
        """Segments of a step that only prefills (through the last one holding a prefill)."""
        return 1 + max(i for i, seg in enumerate(self.segments)
                       if "prefill_t" in seg or "prefill_d" in seg)

    @property
    def overlapped(self) -> bool:
        """Whether drafting (or pre-drafting) runs at the same time as verification."""
        return any(self.has(p) and self.at(p) == self.at("verify") for p in ("draft", "predraft"))

    @property
    def serial_prefill(self) -> bool:
        """Whether the drafter's prefill waits for the target's (one device)."""
        return self.has("prefill_d") and self.at("prefill_d") != self.at("prefill_t")


#: AR: [prefill_t] [verify]
AR_STEP = StepSegments((("prefill_t",), ("verify",)))
#: SD co-located: [prefill_t] [prefill_d] [draft] [verify] (one device)
SD_STEP = StepSegments((("prefill_t",), ("prefill_d",), ("draft",), ("verify",)))
#: SD on a separate device: [prefill_t | prefill_d] [draft] [verify]
SEP_STEP = StepSegments((("prefill_t", "prefill_d"), ("draft",), ("verify",)))
#: PSD overlapped: [prefill_t | prefill_d] [verify X | draft Y] (also its start-up, draft Y
#: alone, and a verification alone while the other batch is empty)
OVERLAP_STEP = StepSegments((("prefill_t", "prefill_d"), ("verify", "draft")))
#: decoupled drafting: [prefill_t | prefill_d] [draft: catch-up of the rows not pre-drafted]
#: [verify | predraft of the next round] (the catch-up is empty when every row hit)
DSD_STEP = StepSegments((("prefill_t", "prefill_d"), ("draft",), ("verify", "predraft")))


@dataclass(frozen=True)
class ModeSpec:
    """What a serving mode is, for every layer.

    ``batches``: batches in flight (2: one drafts while the other verifies); ``held_per_m``:
    sequences held per unit of ``m`` (``server.m`` / the engine's ``batch``: 2 where m counts
    one of two batches); ``drafter``: where the drafter runs ("none": no drafter, "shared":
    on the target's device, "own": a device of its own); ``step``: the segments of a step of
    one batch (for a two-batch mode its fallback while the other batch is empty);
    ``overlapped_step``: the segments of a two-batch step (None with one batch); ``policy``:
    a policy picks each step's mode (``[adaptive]``; the simulator's ``sim.adaptive`` server,
    the runtime's ``runtime.adaptive_driver``); ``policy_step``: the policy may pick it for a
    step; ``theory``: compared by the closed form (``analysis.theory.batch``); ``vllm``: psdlab
    runs it inside vLLM; ``gain_over``: the modes whose traces of the same workload this
    mode's gain is measured against (``validation.gains``; the first is its serial twin on
    the same devices); ``label``, ``marker``, ``color``: how figures show it (None: no fixed
    style); ``runtime``: the runtime's engine runs it (False: simulator only)."""
    name: Mode
    label: str
    batches: int
    drafter: Literal["none", "shared", "own"]
    step: StepSegments
    overlapped_step: StepSegments | None = None
    held_per_m: int = 1
    policy: bool = False
    policy_step: bool = False
    theory: bool = False
    vllm: bool = False
    gain_over: tuple[Mode, ...] = ()
    marker: str | None = None
    color: str | None = None
    runtime: bool = True

    def __post_init__(self) -> None:
        if self.batches not in (1, 2):
            raise ValueError(f"batches: must be 1 or 2, got {self.batches!r}")
        if (self.overlapped_step is None) != (self.batches == 1):
            raise ValueError("overlapped_step: needed with two batches only")
        if not self.drafting == self.step.has("draft") == self.step.has("prefill_d"):
            raise ValueError(f"step: drafts exactly when the mode has a drafter "
                             f"({self.drafter!r})")
        if self.step.serial_prefill != (self.drafter == "shared"):
            raise ValueError("step: the drafter's prefill waits for the target's exactly when "
                             "they share a device")

    @property
    def drafting(self) -> bool:
        """Whether the mode has a drafter (and so drafts: k >= 1, an acceptance model)."""
        return self.drafter != "none"

    @property
    def overlap(self) -> bool:
        """Whether drafting overlaps verification (in the mode's overlapped steps)."""
        return self.step.overlapped or (self.overlapped_step is not None
                                        and self.overlapped_step.overlapped)


#: every mode, in the order of ``Mode``
MODES: tuple[ModeSpec, ...] = (
    ModeSpec("ar", "AR", 1, "none", AR_STEP, policy_step=True, theory=True, vllm=True, marker="^",
             color="#7f7f7f"),
    ModeSpec("sd", "SD", 1, "shared", SD_STEP, policy_step=True, theory=True, vllm=True,
             marker="s", color="#d62728"),
    ModeSpec("sd-sep", "SD-sep", 1, "own", SEP_STEP, marker="D", color="#9467bd"),
    ModeSpec("psd", "PSD", 2, "own", SEP_STEP, OVERLAP_STEP, held_per_m=2, policy_step=True,
             theory=True, vllm=True, gain_over=("sd-sep", "sd"), marker="o", color="#1f77b4"),
    ModeSpec("adaptive", "adaptive", 2, "own", SEP_STEP, OVERLAP_STEP, policy=True),
    ModeSpec("dsd", "DSD", 1, "own", DSD_STEP, marker="P", color="#6b6ecf", runtime=False),
)
_BY_NAME: dict[str, ModeSpec] = {s.name: s for s in MODES}
assert tuple(_BY_NAME) == get_args(Mode), "MODES must list every Mode once, in its order"

#: every mode a simulated or real server runs in (``[server] mode``)
SERVER_MODES: tuple[Mode, ...] = tuple(s.name for s in MODES)
#: the fixed modes a trace's run records (adaptive runs record steps of these)
TRACE_MODES: tuple[Mode, ...] = tuple(s.name for s in MODES if not s.policy)
#: what the adaptive policy switches between, one step at a time
STEP_MODES: tuple[Mode, ...] = tuple(s.name for s in MODES if s.policy_step)
#: the modes with a drafter in a theory comparison
SPEC_MODES: tuple[Mode, ...] = tuple(s.name for s in MODES if s.theory and s.drafting)
#: the fixed modes whose traces have drafting phases (the figures' and reports' SD/PSD runs)
DRAFTING_MODES: tuple[Mode, ...] = tuple(s.name for s in MODES if s.drafting and not s.policy)
#: what psdlab runs inside vLLM (``psdlab run --engine vllm``, ``runtime.vllm_ext``): ``sd`` is
#: vLLM's own draft-model SD; ``sd-sep`` and ``adaptive`` have no vLLM counterpart
VLLM_MODES: tuple[Mode, ...] = tuple(s.name for s in MODES if s.vllm)
#: what the runtime's engine runs (``runtime.controller``); dsd is simulator-only (docs/dsd.md)
RUNTIME_MODES: tuple[Mode, ...] = tuple(s.name for s in MODES if s.runtime)


def check_mode(name: str, value: Any, allowed: tuple[Mode, ...] = SERVER_MODES) -> Mode:
    """``value`` as a Mode, or a one-line ValueError naming ``name`` and the allowed modes."""
    if value not in allowed:
        raise ValueError(f"{name}: must be one of {', '.join(allowed)}, got {value!r}")
    return cast(Mode, value)


def mode_spec(value: Any, name: str = "mode") -> ModeSpec:
    """The registry's entry for a mode name (a one-line ValueError naming ``name`` for an
    unknown one)."""
    return _BY_NAME[check_mode(name, value)]
