"""The serving modes as data (``analysis.modes``, issue 51 item 1): the registry's entries, the
rules they obey, and the simulator laying its steps out as each mode's segments say."""
from __future__ import annotations

from dataclasses import replace
from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.analysis.modes import (AR_STEP, MODES, SEP_STEP, Mode,
                                   ModeSpec, StepSegments, mode_spec)


def test_registry_lists_every_mode_once():
    assert tuple(s.name for s in MODES) == get_args(Mode)
    assert all(mode_spec(s.name) is s for s in MODES)


def test_unknown_mode_is_a_one_line_error_naming_the_field():
    with pytest.raises(ValueError) as exc:
        mode_spec("spec", "server.mode")
    assert str(exc.value).startswith("server.mode: must be one of ar, sd, sd-sep, psd")
    assert "\n" not in str(exc.value)


def test_specs_refuse_segments_that_contradict_the_placement():
    psd = mode_spec("psd")
    with pytest.raises(ValueError, match="overlapped_step"):
        replace(psd, batches=1)
    with pytest.raises(ValueError, match="drafts exactly"):
        replace(mode_spec("ar"), step=SEP_STEP)
    with pytest.raises(ValueError, match="share a device"):
        replace(mode_spec("sd"), step=SEP_STEP)
    with pytest.raises(ValueError, match="batches"):
        ModeSpec("ar", "AR", 3, "none", AR_STEP)
    with pytest.raises(ValueError, match="twice"):
        StepSegments((("prefill_t", "verify"), ("verify",)))


@settings(max_examples=60, deadline=None)
@given(st.permutations(["prefill_t", "prefill_d", "draft", "verify"]),
       st.lists(st.booleans(), min_size=3, max_size=3))
def test_segment_lookups_agree_with_the_layout(order, cuts):
    """Any grouping of the four phases into consecutive segments: ``at`` finds each phase's
    segment, ``count`` and ``prefill_count`` count them, the overlap and serial-prefill flags
    say whether two phases share one."""
    segs: list[list[str]] = [[order[0]]]
    for phase, cut in zip(order[1:], cuts):
        if cut:
            segs.append([])
        segs[-1].append(phase)
    s = StepSegments(tuple(tuple(g) for g in segs))  # type: ignore[arg-type]
    for i, g in enumerate(segs):
        assert all(s.at(p) == i for p in g)
    assert s.count == len(segs)
    assert s.prefill_count == 1 + max(s.at("prefill_t"), s.at("prefill_d"))
    assert s.overlapped == (s.at("draft") == s.at("verify"))
    assert s.serial_prefill == (s.at("prefill_d") != s.at("prefill_t"))


def _segments_of(phases) -> list[set[str]]:
    """A simulated step's phases grouped by start time, one group per segment that ran; a
    step's first prefill is the target's, its second the drafter's."""
    groups: dict[float, set[str]] = {}
    prefills = iter(("prefill_t", "prefill_d"))
    for ph in phases:
        groups.setdefault(ph.start, set()).add(next(prefills) if ph.kind == "prefill"
                                               else ph.kind)
    return [groups[t] for t in sorted(groups)]


@pytest.mark.parametrize("mode", ["ar", "sd", "sd-sep", "psd"])
@pytest.mark.parametrize("path", ["fast", "simpy"])
def test_simulated_steps_follow_the_modes_segments(mode, path):
    """Every step of a simulated run runs its phases in the segments of its mode's spec, in
    their order: one-batch steps as ``step``, overlapped ones as ``overlapped_step`` (a step
    with a prefill is written as two records of one index: merged here)."""
    from psdlab.sim.simulation import simulate
    from sim_helpers import make_config
    spec = mode_spec(mode)
    res = simulate(make_config(mode=mode, requests=24, m=3), path=path)
    by_index: dict[int, list] = {}
    for rec in res.trace.steps:
        by_index.setdefault(rec.index, []).append(rec)
    kinds = set()
    for recs in by_index.values():
        phases = [ph for rec in recs for ph in rec.phases]
        segs = spec.overlapped_step if any(r.overlapped for r in recs) else spec.step
        assert segs is not None
        got = _segments_of(phases)
        ran = set().union(*got)
        assert got == [set(g) & ran for g in segs.segments if set(g) & ran]
        kinds.add((segs is spec.overlapped_step, "prefill_t" in ran, "draft" in ran))
    assert (False, True, spec.drafting) in kinds          # a step that prefilled and decoded
    if spec.overlap:
        assert (True, False, True) in kinds               # an overlapped decode step


@pytest.mark.parametrize("spec", [s for s in MODES if s.runtime], ids=lambda s: s.name)
def test_engine_places_the_drafter_and_sizes_its_slots_by_the_spec(spec):
    """The runtime's controller reads the registry: a drafter that shares the target's
    device gets its label and core (CPU and CUDA), the workers hold held_per_m x m slots."""
    from psdlab.runtime.controller import EngineConfig, _labels
    cpu = EngineConfig(mode=spec.name, batch=3, drafter_core=0, target_core=1)
    d, t, d_core, t_core = _labels(cpu)
    assert (d == t) == (d_core == t_core) == (spec.drafter == "shared")
    cuda = EngineConfig(mode=spec.name, batch=3, device="cuda:0", drafter_device="cuda:1",
                        backend="thread")
    d, t, _, _ = _labels(cuda)
    assert (d == t) == (spec.drafter == "shared")
    assert cpu.slots == 3 * spec.held_per_m


@pytest.mark.parametrize("spec", [s for s in MODES if not s.runtime], ids=lambda s: s.name)
def test_engine_refuses_a_simulator_only_mode(spec):
    from psdlab.runtime.controller import EngineConfig
    with pytest.raises(ValueError, match=r"^mode: .* simulator only"):
        EngineConfig(mode=spec.name)
