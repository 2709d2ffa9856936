"""SimPy discrete-event simulator of AR / SD / PSD serving (imports analysis/ only, never torch).

Entry points: ``sim.sim_config.load_config(path) -> SimConfig`` and
``sim.simulation.simulate(config, path="fast"|"simpy") -> SimResult`` (trace + metrics from
``analysis.metrics``); ``sim.capacity`` (capacity planning; its sweep runs on
``sim.sweep_backends``, local processes or Ray; its report ``sim.plan_report``, figure
``sim.plan_figure`` and vLLM k table ``sim.vllm_k_table``), ``sim.speed_bench`` (speed benchmark),
``sim.closed_form`` (exact finite-run makespans for constant step times).

Layout: ``config`` (TOML -> frozen dataclasses), ``trajectories`` (per-request accepted counts,
pre-sampled), ``batching`` (batch manager policies), ``kv`` (KV blocks, preemption),
``planner`` (step structure of each server, vectorised), ``core`` (the state machine),
``servers`` (SimPy processes; one step at a time), ``fast`` + ``lanes`` + ``sweep`` +
``costtable`` + ``lanes_build`` (the multi-step / multi-event path), ``records`` (trace
records), ``engine``.
Models by name: ``costs`` (cost models), ``acceptance``, ``workloads`` / ``lengths``.
"""
from __future__ import annotations

__all__ = ["load_config", "simulate"]


def __getattr__(name: str):
    if name == "load_config":
        from psdlab.sim.sim_config import load_config
        return load_config
    if name == "simulate":
        from psdlab.sim.simulation import simulate
        return simulate
    raise AttributeError(f"module 'sim' has no attribute {name!r}")
