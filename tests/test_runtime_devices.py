"""runtime.devices: the default worker backend per device layout, the command clock (host
readings on CPU; on CUDA the device interval from two events, checked here with recorded
event stand-ins, since no GPU runs in CI) and the private stream (a no-op on CPU)."""
from __future__ import annotations

import pytest

from psdlab.runtime.devices import CommandClock, default_backend, private_stream


@pytest.mark.parametrize("device,drafter,want", [
    ("cpu", None, "process"), ("cpu", "cpu", "process"),
    ("cuda:0", "cuda:1", "process"),          # one process per GPU: no shared GIL
    ("cuda:0", None, "thread"),               # two streams of one device need one context
    ("cuda:0", "cuda:0", "thread"),
])
def test_default_backend(device, drafter, want):
    assert default_backend(device, drafter) == want


def test_cli_run_takes_the_default_backend():
    import argparse

    from psdlab.runtime.run_command import run_engine_config
    ns = argparse.Namespace(
        mode="psd", k=3, batch=2, max_num_seqs=None, max_new_tokens=4, temperature=0.0,
        top_p=1.0, seed=0, ignore_eos=True, max_len=64, backend=None, device="cuda:0",
        drafter_device="cuda:1", drafter_core=0, target_core=1, dtype="float32",
        drafter_dtype=None, controlled_alpha=None, idle_spin_s=1.0)
    assert run_engine_config(ns, None).backend == "process"
    ns.drafter_device = None
    assert run_engine_config(ns, None).backend == "thread"


class _Clock:
    def __init__(self, readings):
        self.readings = list(readings)

    def __call__(self):
        return self.readings.pop(0)


class _Event:
    """A recorded CUDA event stand-in: `elapsed_time` in milliseconds, as torch's."""
    log: list[str] = []

    def __init__(self, at_ms: float):
        self.at_ms = at_ms

    def record(self):
        _Event.log.append("record")

    def synchronize(self):
        _Event.log.append("sync")

    def elapsed_time(self, other):
        return other.at_ms - self.at_ms


def test_cpu_clock_is_the_host_span():
    c = CommandClock("cpu", now=_Clock([10.0, 10.25]))
    c.start()
    assert c.stop() == (10.0, 10.25)


def test_cuda_clock_is_the_device_interval_ending_when_the_host_saw_it():
    """Host: the command was issued at 10.0 s and its end event seen at 10.5 s; the device was
    busy 120 ms between the two events: the phase is [10.38, 10.5], not the host's 0.5 s."""
    times = iter([100.0, 220.0])
    _Event.log = []
    c = CommandClock("cuda", now=_Clock([10.0, 10.5]), events=lambda: _Event(next(times)))
    c.start()
    start, end = c.stop()
    assert end == 10.5 and start == pytest.approx(10.38)
    assert _Event.log == ["record", "record", "sync"]


def test_cuda_interval_never_starts_before_the_command_was_issued():
    times = iter([0.0, 900.0])
    c = CommandClock("cuda", now=_Clock([10.0, 10.5]), events=lambda: _Event(next(times)))
    c.start()
    assert c.stop() == (10.0, 10.5)


def test_private_stream_is_a_no_op_on_cpu():
    import contextlib
    assert isinstance(private_stream("cpu"), contextlib.nullcontext)


@pytest.mark.e2e
def test_compiled_passes_give_the_same_tokens(tmp_path_factory):
    """--compile traces the layer stack with dynamo (backend "eager" here: inductor's code
    generation is too slow for CI); greedy drafting and verification give the same tokens and
    the runner really calls the compiled stack."""
    torch = pytest.importorskip("torch")
    from psdlab.runtime.runner import ModelRunner, ModelSpec, RunnerConfig
    from runtime_engine_util import shared_pair
    models = shared_pair(tmp_path_factory)
    out = {}
    for mode in ("off", "eager"):
        r = ModelRunner(RunnerConfig(ModelSpec(str(models["noisy"])), max_slots=3, max_len=64,
                                     compile=mode))
        assert hasattr(r.model._run, "_torchdynamo_orig_callable") == (mode == "eager")
        r.feed([0, 1], [0, 0], [[5, 9, 11, 3], [7, 2]])
        drafts, _ = r.draft([0, 1], [4, 2], [[21], [22]], [3, 3])
        out[mode] = (drafts, r.verify([0, 1], [4, 2], [[21], [22]], drafts, None))
    assert out["eager"] == out["off"]
    torch._dynamo.reset()


def test_bad_compile_mode_is_a_one_line_error():
    from psdlab.runtime.controller import EngineConfig
    with pytest.raises(ValueError, match="compile: must be one of"):
        EngineConfig(compile="max")
