"""The engine step around the GPU passes: host work per step, its overlap, SD/PSD-only terms.

A cost model (``sim.costs``) prices one forward pass.  A serving engine spends more per step:
the scheduler, the step's metadata, output processing (appending tokens, stop checks,
detokenisation), and for speculative decoding the proposer's bookkeeping and the move of drafts
between devices.  Whether that host work serialises with the GPU (vLLM V0) or hides behind it
(V1 async scheduling) decides how much of it a step pays.  ``EngineStep`` holds those terms;
presets live in ``engine_steps.toml`` with the public source of each number.

How the simulator applies it (``StepHost``, one per run; ``sim.step_plan.Planner`` calls it on
every verify and drafting phase, so all execution paths see the same times):

- target side, a step over n sequences and T scheduled tokens on a TP group of p GPUs:
  ``Hv = host_fixed_s + host_per_tp_rank_s p + host_per_seq_s n + host_per_token_s T``;
- drafter side (SD, PSD), a drafting phase of j passes proposing D draft tokens:
  ``Hd = draft_fixed_s + draft_per_pass_s j + draft_per_seq_s n + draft_per_token_s D`` plus,
  when the drafter has its own device (sd-sep, psd), ``transfer_s`` and the draft
  distributions shipped with the drafts (``transfer_prob_bytes`` x vocabulary per draft token
  over the drafter's link);
- AR and SD: the verify phase carries Hv, the drafting phase Hd (they run one after the other);
- PSD with ``single_driver``: one driver runs both halves' host work in sequence, so each of
  the two overlapped phases carries Hv + Hd of its own batch: the step lasts max(t, V) + Hv + Hd
  when the two batches have the same size (exact then; the batch manager keeps them within
  one).  A PSD run whose other batch is empty (start-up, tail) keeps that charge: an upper
  bound for those few steps;
- a phase carrying H lasts ``max(gpu, overlap H) + (1 - overlap) H``;
- a run served through the engine's API server (``served``): the part of the API server's
  per-token work that runs in the engine's own process (``1 - api_overlap``; vLLM up to 0.5.3)
  adds ``api_per_token_s`` per sequence to every step's Hv; the part in its own process
  (``api_overlap``) caps the output rate at ``api_bound_tok_s`` (``psdlab systems check``
  applies it to served throughput points);
- step-time variability: per phase kind, a gamma CV (``step_jitter``), used when the config
  has no ``[jitter]`` table.

Prefill stays outside the PSD overlap (its own segment, ``sim.step_plan``).  ``"none"`` (the
default) adds nothing: the simulator's results are then exactly those without this module.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, fields
from typing import Any, Mapping

import numpy as np

from psdlab.analysis.checks import check_fields, check_nonnegative, check_range
from psdlab.analysis.modes import mode_spec

from .catalog import _read_toml
from .step_jitter import Jitter, make_jitter

ENGINE_STEPS_TOML = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_steps.toml")
#: no engine step model (the default)
NONE = "none"
#: take the engine step the target's GPU cost preset names (engines.toml ``engine_step``)
FROM_PRESET = "preset"
#: fraction of a link's per-direction bandwidth a transfer reaches (engines.toml network_eff)
LINK_EFF = 0.7
#: the target side's host terms (every mode)
HOST_TERMS = ("host_fixed_s", "host_per_tp_rank_s", "host_per_seq_s", "host_per_token_s")
#: the SD-only terms of a drafting phase
DRAFT_TERMS = ("draft_fixed_s", "draft_per_pass_s", "draft_per_seq_s", "draft_per_token_s")
#: moving drafts and their distributions between devices
TRANSFER_TERMS = ("transfer_s", "transfer_prob_bytes")
#: a served engine's API server (HTTP, tokenisation, detokenisation, streaming): only when
#: the run goes through it (``served``)
API_TERMS = ("api_per_request_s", "api_per_token_s")
_SECONDS = HOST_TERMS + DRAFT_TERMS + TRANSFER_TERMS + API_TERMS
_CVS = ("cv_verify", "cv_draft", "cv_prefill")


@dataclass(frozen=True)
class EngineStep:
    """One engine's step terms; see engine_steps.toml for each field's meaning and source."""
    name: str
    host_fixed_s: float = 0.0
    host_per_tp_rank_s: float = 0.0
    host_per_seq_s: float = 0.0
    host_per_token_s: float = 0.0
    overlap: float = 0.0
    draft_fixed_s: float = 0.0
    draft_per_pass_s: float = 0.0
    draft_per_seq_s: float = 0.0
    draft_per_token_s: float = 0.0
    transfer_s: float = 0.0
    transfer_prob_bytes: float = 0.0
    api_per_request_s: float = 0.0
    api_per_token_s: float = 0.0
    api_overlap: float = 1.0
    served: bool = False
    single_driver: bool = True
    cv_verify: float = 0.0
    cv_draft: float = 0.0
    cv_prefill: float = 0.0
    description: str = ""
    sources: tuple[str, ...] = ()

    def describe(self) -> dict[str, Any]:
        return {f.name: (list(v) if isinstance(v, tuple) else v)
                for f in fields(self) for v in (getattr(self, f.name),)}

    def jitter(self) -> "PhaseJitter":
        """The per-phase gamma jitter of the CVs (inactive where a CV is 0)."""
        def one(cv: float) -> Jitter:
            return make_jitter({"dist": "gamma", "cv": cv}) if cv > 0 else Jitter()
        return PhaseJitter({"verify": one(self.cv_verify), "draft": one(self.cv_draft),
                            "prefill_t": one(self.cv_prefill), "prefill_d": one(self.cv_prefill)})


@dataclass(frozen=True)
class PhaseJitter:
    """A Jitter per phase kind (``sim.core.JitterStreams`` asks ``for_key``)."""
    by_key: Mapping[str, Jitter]

    @property
    def active(self) -> bool:
        return any(j.active for j in self.by_key.values())

    def for_key(self, key: str) -> Jitter:
        return self.by_key.get(key, Jitter())


def _step_from(name: str, raw: Mapping[str, Any], where: str) -> EngineStep:
    allowed = {f.name for f in fields(EngineStep)} - {"name"}
    check_fields(raw, where, optional=tuple(allowed), named=False)
    vals: dict[str, Any] = {}
    for key in _SECONDS:
        vals[key] = check_nonnegative(f"{where}.{key}", raw.get(key, 0.0))
    vals["overlap"] = check_range(f"{where}.overlap", raw.get("overlap", 0.0), 0.0, 1.0)
    vals["api_overlap"] = check_range(f"{where}.api_overlap", raw.get("api_overlap", 1.0),
                                      0.0, 1.0)
    for key in _CVS:
        vals[key] = check_range(f"{where}.{key}", raw.get(key, 0.0), 0.0, 3.0)
    drv, served = raw.get("single_driver", True), raw.get("served", False)
    for key, flag in (("single_driver", drv), ("served", served)):
        if not isinstance(flag, bool):
            raise ValueError(f"{where}.{key}: expected true or false, got {flag!r}")
    src = raw.get("sources", ())
    if not isinstance(src, (list, tuple)) or not all(isinstance(s, str) for s in src):
        raise ValueError(f"{where}.sources: expected a list of strings")
    return EngineStep(name=name, single_driver=drv, served=served,
                      description=str(raw.get("description", "")),
                      sources=tuple(src), **vals)


@functools.lru_cache(maxsize=None)
def engine_step_presets() -> dict[str, EngineStep]:
    """The named presets of engine_steps.toml."""
    raw = _read_toml(ENGINE_STEPS_TOML)
    return {k: _step_from(k, v, f"engine_steps.toml[{k}]") for k, v in raw.items()}


def known_names() -> str:
    return ", ".join(sorted(engine_step_presets()) + [NONE, FROM_PRESET])


def get_engine_step(value: Any, where: str = "server.engine_step",
                    preset_default: str | None = None) -> EngineStep | None:
    """None for ``"none"``; a preset by name; ``"preset"``: the one the GPU cost preset names
    (``preset_default``); or an inline table (a ``base`` preset plus fields to change, or all
    fields).  Bad values raise a one-line ValueError naming ``where``."""
    presets = engine_step_presets()
    if isinstance(value, Mapping):
        body = dict(value)
        base = body.pop("base", None)
        name = str(body.pop("name", "custom"))
        if base is not None:
            start = get_engine_step(base, f"{where}.base", preset_default)
            if start is None:
                raise ValueError(f"{where}.base: {base!r} has no fields to start from; "
                                 f"known: {', '.join(sorted(presets))}")
            merged = {f.name: getattr(start, f.name) for f in fields(EngineStep)
                      if f.name != "name"}
            merged.update(body)
            return _step_from(f"{start.name}+" if name == "custom" else name, merged, where)
        return _step_from(name, body, where)
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a preset name or a table, got {value!r}; "
                         f"known: {known_names()}")
    key = value.lower()
    if key == NONE:
        return None
    if key == FROM_PRESET:
        if not preset_default:
            raise ValueError(f"{where}: 'preset' needs a target cost of name 'gpu' whose engine "
                             f"preset names an engine_step (engines.toml)")
        return get_engine_step(preset_default, where)
    if key not in presets:
        raise ValueError(f"{where}: unknown engine step {value!r}; known: {known_names()}")
    return presets[key]


def check_spec(value: Any, where: str = "server.engine_step") -> None:
    """Validate a config value early (``"preset"`` is resolved when the models are built)."""
    if isinstance(value, str) and value.lower() == FROM_PRESET:
        return
    if isinstance(value, Mapping) and str(value.get("base", "")).lower() == FROM_PRESET:
        return
    get_engine_step(value, where)


def preset_default(cost_spec: Mapping[str, Any]) -> str | None:
    """The engine step the GPU cost spec's engine preset names, if any."""
    if cost_spec.get("name") != "gpu" or not isinstance(cost_spec.get("engine"), str):
        return None
    from .gpu import IDEAL, engine_presets
    eng = str(cost_spec["engine"]).lower()
    if eng == IDEAL or eng not in engine_presets():
        return None
    return engine_presets()[eng].engine_step or None


def api_bound_tok_s(step: EngineStep | None, output_len: float) -> float:
    """Output tokens/s that a served engine's API server can stream from its own process
    (``api_overlap`` of its work): ``1 / (api_overlap (api_per_token_s + api_per_request_s /
    output_len))``; infinite when the run is not served or the API work is all in the engine's
    process (then ``StepHost`` charges it per step instead)."""
    if step is None or not step.served or step.api_overlap <= 0.0:
        return float("inf")
    per_token = step.api_overlap * (step.api_per_token_s
                                    + step.api_per_request_s / max(1.0, float(output_len)))
    return float("inf") if per_token <= 0.0 else 1.0 / per_token


def prob_seconds_per_token(step: EngineStep, drafter: Any) -> float:
    """Seconds to ship one draft token's distribution over the drafter's link (0 when the
    drafter's cost model has no model/hardware catalog entry)."""
    if step.transfer_prob_bytes <= 0 or drafter is None:
        return 0.0
    rf = getattr(drafter, "roofline", drafter)
    model, hw = getattr(rf, "model", None), getattr(rf, "hardware", None)
    if model is None or hw is None:
        return 0.0
    return float(step.transfer_prob_bytes * model.vocab / (hw.link_bw * LINK_EFF))


class StepHost:
    """The engine step bound to one run: its mode and whether the drafter has its own device."""

    def __init__(self, step: EngineStep, mode: str, separate: bool, drafter: Any,
                 target: Any = None):
        self.step, self.mode = step, mode
        rf = getattr(target, "roofline", target)
        #: the target's fixed host work: per step plus per TP rank (1 for a non-GPU model)
        self.fixed = step.host_fixed_s + step.host_per_tp_rank_s * int(getattr(rf, "tp", 1))
        self.separate = bool(separate)
        self.prob_s = prob_seconds_per_token(step, drafter) if self.separate else 0.0
        self.both = mode_spec(mode).overlap and step.single_driver
        #: the API server's per-token work that runs in the engine's own process (served
        #: runs only): every sequence streams at least one token per step
        self.api_serial = (step.api_per_token_s * (1.0 - step.api_overlap)
                           if step.served else 0.0)

    def _hv(self, n, tokens):
        s = self.step
        return (self.fixed + (s.host_per_seq_s + self.api_serial) * n
                + s.host_per_token_s * tokens)

    def _hd(self, n, dtok, passes):
        s = self.step
        h = (s.draft_fixed_s + s.draft_per_pass_s * passes + s.draft_per_seq_s * n
             + s.draft_per_token_s * dtok)
        if self.separate:
            h = h + s.transfer_s + self.prob_s * dtok
        return h

    def _phase(self, gpu, host):
        f = self.step.overlap
        if f <= 0.0:
            return gpu + host
        return np.maximum(gpu, f * host) + (1.0 - f) * host

    def verify(self, gpu, n, tokens):
        """A verify (AR: decode) phase over n sequences and ``tokens`` scheduled tokens (the
        batch's drafting, for the single driver: tokens - n drafts in max k passes)."""
        n = np.asarray(n, dtype=float)
        tokens = np.asarray(tokens, dtype=float)
        host = self._hv(n, tokens)
        if self.both:
            dtok = tokens - n
            passes = np.ceil(dtok / np.maximum(n, 1.0))
            host = host + self._hd(n, dtok, passes)
        return self._phase(gpu, host)

    def draft(self, gpu, n, dtok, passes):
        """A drafting phase of ``passes`` drafter passes over n sequences proposing ``dtok``
        tokens (the GPU time unchanged where n is 0)."""
        n = np.asarray(n, dtype=float)
        dtok = np.asarray(dtok, dtype=float)
        host = self._hd(n, dtok, np.asarray(passes, dtype=float))
        if self.both:
            host = host + self._hv(n, dtok + n)
        return np.where(n > 0, self._phase(gpu, host), gpu)


__all__ = ["HOST_TERMS", "DRAFT_TERMS", "TRANSFER_TERMS", "API_TERMS", "api_bound_tok_s",
           "EngineStep", "PhaseJitter", "StepHost", "engine_step_presets", "get_engine_step",
           "check_spec", "preset_default", "known_names", "NONE", "FROM_PRESET"]
