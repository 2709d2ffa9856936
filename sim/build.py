"""``build(config) -> Built``: the models, the requests and the server of a config, before any
simulation -- one code path for every mode, so that an adaptive run and a fixed-mode run of
one config serve the same requests.

Randomness: one ``SeedSequence(seed)`` spawns independent streams, in this order, for the
workload, the per-request acceptance parameters, the accepted counts, the step-time jitter and
the per-request k (``server.k_choices``), then (decoupled drafting) the hits; the same seed
gives the same trace (byte for byte) on either execution path.  The server is a
``sim.core.Core`` (ar, sd, sd-sep, psd, dsd: accepted counts pre-sampled per request,
``sim.trajectories``) or a ``sim.adaptive.AdaptiveServer``
(the policy picks the mode and k at every step; accepted counts drawn as steps are planned).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from psdlab.analysis.modes import STEP_MODES
from psdlab.analysis.trace import RunInfo
from psdlab.sim.adaptive import AdaptiveServer
from psdlab.sim.core import Core, JitterStreams
from psdlab.sim.sim_config import SimConfig, drafter_device


@dataclass
class Built:
    """A server ready to run and the header of its trace."""
    core: Core | AdaptiveServer
    run: RunInfo


@dataclass
class Inputs:
    """What every mode draws from a config: requests, models, acceptance, step costs."""
    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    keys: Any                  # the requests' keys (keyed acceptance models), or None
    target: Any
    drafter: Any               # None for ar
    acceptance: Any            # None for ar
    drafter_dev: str
    step: Any                  # the engine step (sim.costs.engine_step.EngineStep) or None
    jitter: JitterStreams
    s_par: np.random.SeedSequence
    s_acc: np.random.SeedSequence
    s_k: np.random.SeedSequence
    s_hit: np.random.SeedSequence

    @property
    def n(self) -> int:
        return int(self.arrival.size)

    def params(self) -> np.ndarray:
        """Per-request acceptance parameters (zeros without a drafter)."""
        from psdlab.sim.acceptance import KeyedAcceptanceModel
        acc = self.acceptance
        if acc is None:
            return np.zeros(self.n)
        rng = np.random.default_rng(self.s_par)
        if isinstance(acc, KeyedAcceptanceModel) and acc.needs_keys:
            return np.asarray(acc.request_params(rng, self.n, keys=self.keys), dtype=float)
        return np.asarray(acc.request_params(rng, self.n), dtype=float)

    def step_host(self, mode: str, target_dev: str) -> Any:
        """The engine step bound to a mode (``sim.costs.engine_step.StepHost``), or None."""
        if self.step is None:
            return None
        from psdlab.sim.costs.engine_step import StepHost
        return StepHost(self.step, mode, self.drafter_dev != target_dev, self.drafter,
                        self.target)


def _versions() -> dict[str, str]:
    import simpy

    from psdlab.analysis.version import __version__
    return {"psdlab": __version__, "numpy": np.__version__, "simpy": simpy.__version__}


def draw_inputs(config: SimConfig) -> Inputs:
    """The seed streams, the workload's requests, the cost models and acceptance model, the
    drafter's device, the engine step and the jitter of a config."""
    from psdlab.sim.costs import make_jitter
    from psdlab.sim.costs.engine_step import get_engine_step, preset_default
    from psdlab.sim.model_specs import CostSpec

    srv = config.server
    # spawn(6)'s first five streams are spawn(5)'s: the sixth (hits) changes no other mode
    s_work, s_par, s_acc, s_jit, s_k, s_hit = np.random.SeedSequence(config.seed).spawn(6)
    # the models the config built when it was made (sim.model_specs), reused run after run
    reqs = config.workload_spec.model().generate(np.random.default_rng(s_work),
                                                 config.requests)
    target = CostSpec.from_mapping(config.target.cost, "target.cost").model()
    drafter = acceptance = None
    if srv.spec.drafting:
        assert config.drafter is not None          # SimConfig requires one unless mode = "ar"
        drafter = CostSpec.from_mapping(config.drafter.cost, "drafter.cost").model()
        acceptance = config.acceptance_spec.model()
    step = get_engine_step(srv.engine_step, "server.engine_step",
                           preset_default(config.target.cost))
    # the engine step's per-phase CVs unless the config has its own [jitter]
    jitter: Any = make_jitter(dict(config.jitter) if config.jitter else None)
    if step is not None and not config.jitter:
        jitter = step.jitter()
    return Inputs(arrival=np.asarray(reqs.arrival, dtype=float),
                  prompt=np.asarray(reqs.prompt_len, dtype=np.int64),
                  output=np.asarray(reqs.output_len, dtype=np.int64), keys=reqs.keys,
                  target=target, drafter=drafter, acceptance=acceptance,
                  drafter_dev=drafter_device(srv.mode, config.target.device,
                                             config.drafter.device if config.drafter else None),
                  step=step, jitter=JitterStreams(jitter, s_jit), s_par=s_par, s_acc=s_acc,
                  s_k=s_k, s_hit=s_hit)


def _core(config: SimConfig, inp: Inputs) -> tuple[Core, int, dict[str, Any]]:
    """A fixed-mode server: per-request k, the KV check, the pre-sampled trajectories."""
    from psdlab.sim.kv import check_fits
    from psdlab.sim.trajectories import cached_trajectories

    srv = config.server
    n = inp.n
    if not srv.spec.drafting:
        karr = np.zeros(n, np.int64)
    elif srv.k_choices:
        karr = np.random.default_rng(inp.s_k).choice(np.asarray(srv.k_choices, np.int64), n)
    else:
        karr = np.full(n, srv.k, np.int64)
    check_fits(inp.prompt, inp.output, karr + 1, srv.block_size, srv.kv_blocks)
    traj = cached_trajectories(inp.s_acc, config.acceptance if inp.acceptance is not None
                               else {}, inp.acceptance, inp.params(), karr, inp.prompt,
                               inp.output)
    core = Core(mode=srv.mode, k=karr, m=srv.m, policy=srv.policy, kv_blocks=srv.kv_blocks,
                block_size=srv.block_size, target=inp.target, drafter=inp.drafter,
                target_dev=config.target.device, drafter_dev=inp.drafter_dev,
                arrival=inp.arrival, prompt=inp.prompt, output=inp.output, traj=traj,
                jitter=inp.jitter, cap_proposals=srv.cap_proposals and srv.spec.drafting,
                first_token_at_step_end=srv.first_token == "step",
                step_host=inp.step_host(srv.mode, config.target.device),
                token_budget=srv.max_num_batched_tokens if srv.scheduler == "v1" else 0,
                **_decoupled(config, inp, traj))
    extra = {"policy": srv.policy, "cap_proposals": srv.cap_proposals,
             "k_choices": list(srv.k_choices), "kv_blocks": srv.kv_blocks,
             "block_size": srv.block_size}
    if srv.scheduler == "v1":                # v0 runs keep the run record they always had
        extra["scheduler"] = {"name": "v1", "max_num_batched_tokens": srv.max_num_batched_tokens}
    if srv.spec.step.has("predraft"):
        extra["dsd"] = {"hit_rate": srv.dsd_hit_rate, "fanout": srv.dsd_fanout,
                        "hits": srv.dsd_hits}
    return core, int(karr.max()) if n else 0, extra


def _decoupled(config: SimConfig, inp: Inputs, traj: Any) -> dict[str, Any]:
    """Decoupled drafting (a step with a ``predraft`` phase): each verification's hit (per
    request and verification: its flat trajectory index) and the fan-out F; nothing for the
    other modes.  ``server.dsd_hits = "rate"``: a hit with probability ``dsd_hit_rate``;
    "accepted-length": the accepted count among the F most frequent of the run's pre-sampled
    counts (ties: the longer) and a draw of probability ``dsd_hit_rate`` (the bonus token)."""
    srv = config.server
    if not srv.spec.step.has("predraft"):
        return {}
    hits = np.random.default_rng(inp.s_hit).random(traj.ctx.size) < srv.dsd_hit_rate
    if srv.dsd_hits == "accepted-length":
        n = traj.nsteps
        first = np.repeat(traj.off, n)
        flat = first + np.arange(first.size) - np.repeat(np.cumsum(n) - n, n)
        acc = traj.acc.astype(np.int64)
        counts = np.bincount(acc[flat], minlength=1)
        likeliest = np.lexsort((-np.arange(counts.size), -counts))[:srv.dsd_fanout]
        hits &= np.isin(acc, likeliest)[:hits.size]
    return {"hits": hits, "fanout": srv.dsd_fanout}


def check_adaptive(srv: Any) -> None:
    """The ``[server]`` settings the adaptive server refuses (one-line errors)."""
    if srv.k_choices:
        raise ValueError("server.k_choices: not allowed for server.mode = 'adaptive' "
                         "(the policy picks k from adaptive.k_choices)")


def _adaptive(config: SimConfig, inp: Inputs) -> tuple[AdaptiveServer, int, dict[str, Any]]:
    """The adaptive server: the policy ([adaptive], read by SimConfig) picks mode and k; the
    KV limit (``sim.adaptive_kv``) reserves the lookahead of the largest k it may pick."""
    from psdlab.analysis.adaptive_policy import AdaptivePolicy
    from psdlab.sim.adaptive_kv import AdaptiveKV, adaptive_lookahead
    from psdlab.sim.kv import check_fits
    pcfg = config.policy
    assert pcfg is not None                        # SimConfig reads it for mode = "adaptive"
    if (inp.output < 1).any():
        bad = int(np.flatnonzero(inp.output < 1)[0])
        raise ValueError(f"workload: output_len must be >= 1, got {inp.output[bad]} for "
                         f"request {bad}")
    srv = config.server
    lookahead = adaptive_lookahead(pcfg.modes, pcfg.k_choices)
    check_fits(inp.prompt, inp.output, lookahead, srv.block_size, srv.kv_blocks)
    hosts: dict[str, Any] | None = None
    if inp.step is not None:
        hosts = {m: inp.step_host(m, config.target.device) for m in STEP_MODES}
    server = AdaptiveServer(m=config.server.m, policy=AdaptivePolicy(pcfg), target=inp.target,
                            drafter=inp.drafter, acceptance=inp.acceptance,
                            params=inp.params(), arrival=inp.arrival, prompt=inp.prompt,
                            output=inp.output, rng=np.random.default_rng(inp.s_acc),
                            target_dev=config.target.device, drafter_dev=inp.drafter_dev,
                            jitter=inp.jitter, hosts=hosts,
                            first_token_at_step_end=config.server.first_token == "step",
                            cap_proposals=config.server.cap_proposals,
                            kv=AdaptiveKV(srv.kv_blocks, srv.block_size, lookahead, inp.n))
    extra: dict[str, Any] = {"policy": dict(vars(pcfg))}
    if config.server.cap_proposals:
        extra["cap_proposals"] = True
    if srv.kv_blocks:                              # written only with a limit, as the run had
        extra.update(kv_blocks=srv.kv_blocks, block_size=srv.block_size,
                     kv_lookahead=lookahead)
    return server, max(pcfg.k_choices, default=0), extra


def build(config: SimConfig) -> Built:
    """The server of a config (no simulation yet) and its trace header."""
    srv = config.server
    if srv.spec.policy:
        check_adaptive(srv)
    inp = draw_inputs(config)
    core: Core | AdaptiveServer
    if srv.spec.policy:
        core, k, extra = _adaptive(config, inp)
    else:
        core, k, extra = _core(config, inp)
    target, drafter, step = inp.target, inp.drafter, inp.step
    devices = {"target": config.target.device}
    models = {"target": config.target.name}
    if drafter is not None:
        assert config.drafter is not None
        devices["drafter"] = inp.drafter_dev
        models["drafter"] = config.drafter.name
    extra.update({"requests": inp.n, "acceptance": dict(config.acceptance),
                  "costs": {"target": target.describe(),
                            "drafter": drafter.describe() if drafter else None}})
    if not srv.spec.policy or config.jitter:
        extra["jitter"] = dict(config.jitter) if config.jitter else None
    if step is not None:
        extra["engine_step"] = step.describe()
    extra["trace_level"] = config.trace.level
    run = RunInfo(mode=srv.mode, k=k, m=srv.m, source="sim", devices=devices, models=models,
                  workload=dict(config.workload), seed=config.seed, versions=_versions(),
                  extra=extra)
    return Built(core=core, run=run)
