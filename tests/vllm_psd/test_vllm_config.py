"""Settings and CLI checks of the vLLM integration (pure; run without vLLM)."""
from __future__ import annotations

import argparse

import pytest

from psdlab.runtime.vllm_ext.cli import config_from_args
from psdlab.runtime.vllm_ext.patches import check_version, hide_running
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
