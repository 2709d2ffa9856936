"""Settings and CLI checks of the vLLM integration (pure; run without vLLM)."""
from __future__ import annotations

import argparse
import os

import pytest

from psdlab.runtime.vllm_ext.cli import config_from_args
from psdlab.runtime.vllm_ext.patches import check_surface, check_version, hide_running
from psdlab.runtime.vllm_ext.settings import PsdSettings


def _args(**kw):
    base = dict(mode="psd", k=4, batch=4, max_num_seqs=None, max_new_tokens=8, ignore_eos=True,
                temperature=0.0, top_p=1.0, seed=0, max_len=256, trace="t.jsonl", device="cpu",
                target_core=1, drafter_core=0, drafter_device=None, dtype="float32",
                arrivals="offline", controlled_alpha=None, prompts=None, num_prompts=None)
    base.update(kw)
    return argparse.Namespace(**base)


def test_cli_maps_modes_and_cores():
    cfg = config_from_args(_args(), "T", "D")
    assert (cfg.mode, cfg.target_cores, cfg.drafter_core, cfg.num_seqs) == ("psd", "1", 0, 8)
    assert config_from_args(_args(mode="sd"), "T", "D").num_seqs == 4


@pytest.mark.parametrize("kw,field", [({"mode": "sd-sep"}, "mode"),
                                      ({"arrivals": "poisson:2"}, "arrivals"),
                                      ({"controlled_alpha": 0.5}, "controlled_alpha"),
                                      ({"k": 0}, "k"), ({"batch": 0}, "batch")])
def test_cli_rejects_what_vllm_cannot_do_in_one_line(kw, field):
    with pytest.raises(ValueError, match=f"^{field}: ") as exc:
        config_from_args(_args(**kw), "T", "D")
    assert "\n" not in str(exc.value)


def test_psd_needs_a_draft_model():
    with pytest.raises(ValueError, match="^draft"):
        config_from_args(_args(), "T", None)
    with pytest.raises(ValueError, match="^draft_model"):
        PsdSettings(mode="psd", draft_model=None)
    assert PsdSettings(mode="ar").k == 4


@pytest.mark.parametrize("version,ok", [("0.32.0", True), ("0.33.1", True), ("0.31.2", False),
                                        ("0.34.0", False)])
def test_supported_versions(version, ok):
    if ok:
        check_version(version)
    else:
        with pytest.raises(ValueError, match="^vllm: version"):
            check_version(version)


def test_surface_check_names_what_a_vllm_lacks():
    from dataclasses import dataclass

    @dataclass
    class Output:
        scheduled_spec_decode_tokens: dict

    class Sched:
        def update_draft_token_ids(self): ...
        def update_from_output(self): ...
        def schedule(self): ...
        def finish_requests(self): ...

    assert check_surface(Output, Sched) == []

    @dataclass
    class Renamed:
        spec_tokens: dict

    class Older:
        def schedule(self): ...

    assert check_surface(Renamed, Older) == [
        "SchedulerOutput.scheduled_spec_decode_tokens", "Scheduler.update_draft_token_ids",
        "Scheduler.update_from_output", "Scheduler.finish_requests"]


def test_llm_kwargs_use_the_v1_runner_and_vllms_gpu_defaults(monkeypatch):
    """GPU: vLLM's defaults (CUDA graphs: no enforce_eager); CPU: eager; the V1 model runner
    always (0.32's V2 runner has no custom_class proposer)."""
    import os

    from psdlab.runtime.vllm_ext.vllm_runner import VllmRunConfig, _env, llm_kwargs
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    gpu = VllmRunConfig(mode="psd", target="T", draft="D", device="cuda:0",
                        drafter_device="cuda:1")
    _env(gpu)
    assert os.environ["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    kw = llm_kwargs(gpu)
    assert kw["enforce_eager"] is False and kw["async_scheduling"] is False
    assert kw["speculative_config"]["method"] == "custom_class"
    assert llm_kwargs(VllmRunConfig(mode="psd", target="T", draft="D"))["enforce_eager"] is True


class _Sched:
    def __init__(self):
        self.running = ["a", "b", "c", "d"]
        self.max_num_running_reqs = 4
        self.max_num_active_reqs = 4


def test_hide_running_restores_limits_and_keeps_admitted_and_preempted_changes():
    s = _Sched()
    with hide_running(s, ["b", "d"]):
        assert s.running == ["a", "c"] and s.max_num_running_reqs == 2
        s.running.remove("c")      # preempted inside the block
        s.running.append("e")      # admitted inside the block
    assert s.running == ["a", "e", "b", "d"]
    assert (s.max_num_running_reqs, s.max_num_active_reqs) == (4, 4)


# ------------------------------------------------------------------ CPU binding of the target

@pytest.mark.parametrize("text,cores", [("1", [1]), ("0-1", [0, 1]), ("1,0", [0, 1]),
                                        (" 0 - 0 ", [0])])
def test_parse_cores_reads_cpu_lists(text, cores):
    from psdlab.runtime.vllm_ext.vllm_runner import parse_cores
    if not set(cores) <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1")
    assert parse_cores("target_cores", text) == cores


@pytest.mark.parametrize("text", ["", "a", "1-0", "-1", "0,,1", "4096"])
def test_bad_target_cores_is_a_one_line_error_naming_the_field(text):
    from psdlab.runtime.vllm_ext.vllm_runner import VllmRunConfig
    with pytest.raises(ValueError) as err:
        VllmRunConfig(mode="ar", target="T", target_cores=text)
    assert str(err.value).startswith("target_cores:") and "\n" not in str(err.value)


def test_bind_pins_every_thread_and_torch_then_restores():
    """vLLM's in-process engine ignores VLLM_CPU_OMP_THREADS_BIND, so psdlab binds: every
    thread of the process (a thread started before the binding too: OpenMP's pool threads
    keep the affinity they were made with) and torch's thread count; restored after."""
    import threading

    import torch

    from psdlab.runtime.vllm_ext.vllm_runner import bind_target_cpus, restore_cpus
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1")
    before, threads = os.sched_getaffinity(0), torch.get_num_threads()
    started, stop = threading.Event(), threading.Event()
    ids = {}

    def other():
        ids["tid"] = threading.get_native_id()
        started.set()
        stop.wait(30)

    t = threading.Thread(target=other, daemon=True)
    t.start()
    started.wait(30)
    saved = bind_target_cpus("1")
    try:
        assert os.sched_getaffinity(0) == {1}
        assert os.sched_getaffinity(ids["tid"]) == {1}
        assert torch.get_num_threads() == 1
    finally:
        restore_cpus(saved)
        stop.set()
        t.join(30)
    assert os.sched_getaffinity(0) == before and torch.get_num_threads() == threads
