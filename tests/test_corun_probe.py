"""The co-run probe (``runtime.corun_probe``) and its fit (``analysis.contention``): a
simulated machine with known contention is recovered; the record round-trips and bad records
are one-line errors; the probe runs on real (tiny) workers and leaves them as they were; a
calibration with a probe never reads a PSD run."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdlab.analysis.contention import (DEFAULTS, CorunProbe, default_contention, fit_corun,
                                        layout_of)
from psdlab.runtime.corun_probe import corun_probe
from psdlab.runtime.workers import Result
from runtime_engine_util import shared_pair

models = pytest.fixture(scope="module")(shared_pair)


class Machine:
    """Two devices on one virtual clock with known contention: a command's solo time is
    ``base + per_pass * passes`` (a verification: one pass; a drafting phase: k); commands
    submitted before either is waited for run at the same time, each at ``1 - c`` of its solo
    speed while both run (the model the fit assumes), the second starting ``gap`` after the
    first (the driver's submit)."""

    def __init__(self, c: dict[str, float], solo: dict[str, tuple[float, float]],
                 gap: float = 1e-4, noise: float = 0.0, seed: int = 0):
        import random
        self.c, self.solo, self.gap, self.noise = c, solo, gap, noise
        self.rng = random.Random(seed)
        self.clock = 0.0
        self.pending: dict[str, tuple[float, float]] = {}     # role: (start, solo time)
        self.done: dict[str, Result] = {}

    def submit(self, role: str, method: str, args: tuple) -> None:
        if method in ("verify", "draft"):
            base, per = self.solo[role]
            passes = 1 if method == "verify" else max(args[3])
            w = (base + per * passes) * (1.0 + self.noise * self.rng.uniform(-1, 1))
            start = self.clock + (self.gap if self.pending else 0.0)
            self.pending[role] = (start, w)
        else:
            self.done[role] = Result(None, self.clock, self.clock)

    def wait(self, role: str) -> Result:
        if role in self.done:
            return self.done.pop(role)
        if len(self.pending) == 1:
            (r, (s, w)), = self.pending.items()
            self.done[r] = Result(None, s, s + w)
        else:
            (r1, (s1, w1)), (r2, (s2, w2)) = sorted(self.pending.items(),
                                                    key=lambda x: x[1][0])
            head = min(s2 - s1, w1)                 # r1 alone until r2 starts
            left1 = w1 - head
            if left1 <= 0:
                self.done[r1] = Result(None, s1, s1 + w1)
                self.done[r2] = Result(None, s2, s2 + w2)
            else:
                rate1, rate2 = 1 - self.c[r1], 1 - self.c[r2]
                both = min(left1 / rate1, w2 / rate2)       # until the first finishes
                e1 = s2 + both + (left1 - both * rate1)
                e2 = s2 + both + (w2 - both * rate2)
                self.done[r1] = Result(None, s1, e1)
                self.done[r2] = Result(None, s2, e2)
        self.pending.clear()
        self.clock = max(r.end for r in self.done.values()) + self.gap
        return self.done.pop(role)


class Device:
    def __init__(self, machine: Machine, role: str, label: str):
        self.m, self.role, self.label = machine, role, label
        self.info = {"max_len": 512, "vocab_size": 100}

    def submit(self, method: str, *args) -> None:
        self.m.submit(self.role, method, args)

    def wait(self) -> Result:
        return self.m.wait(self.role)


def _pair(c_t: float, c_d: float, noise: float = 0.0, seed: int = 0,
          solo=None) -> tuple[Device, Device]:
    m = Machine({"target": c_t, "drafter": c_d},
                solo or {"target": (0.030, 0.004), "drafter": (0.002, 0.006)},
                noise=noise, seed=seed)
    return Device(m, "target", "cpu:1"), Device(m, "drafter", "cpu:0")


@settings(max_examples=40, deadline=None)
@given(c_t=st.floats(0.0, 0.8), c_d=st.floats(0.0, 0.8),
       v_base=st.floats(0.005, 0.1), d_pass=st.floats(0.001, 0.03))
def test_known_contention_is_recovered_exactly(c_t, c_d, v_base, d_pass):
    """Noise-free: the probe's c per role is the machine's, at every mix of pass lengths
    (whichever finishes first, k = 1 to 5)."""
    target, drafter = _pair(c_t, c_d, solo={"target": (v_base, 0.0),
                                            "drafter": (0.0005, d_pass)})
    got = fit_corun(corun_probe(target, drafter, seqs=2, ks=(1, 3, 5), reps=3))
    assert got.target == pytest.approx(c_t, abs=1e-9)
    assert got.drafter == pytest.approx(c_d, abs=1e-9)
    assert got.source == "probe" and len(got.shapes) == 3


@settings(max_examples=20, deadline=None)
@given(c_t=st.floats(0.0, 0.6), c_d=st.floats(0.0, 0.6), seed=st.integers(0, 1000))
def test_known_contention_is_recovered_under_noise(c_t, c_d, seed):
    """With 2% uniform noise on every solo time, 16 repeats put c within 0.05."""
    target, drafter = _pair(c_t, c_d, noise=0.02, seed=seed)
    got = fit_corun(corun_probe(target, drafter, seqs=2, ks=(2, 4), reps=16))
    assert abs(got.target - c_t) < 0.05 and abs(got.drafter - c_d) < 0.05


def test_slowdown_and_overlap_factors_follow_the_model():
    """A drafting phase much shorter than the verification: the verification is slowed only
    while the drafter runs, so its co-run / solo ratio is far below 1 / (1 - c)."""
    target, drafter = _pair(0.3, 0.3, solo={"target": (0.1, 0.0), "drafter": (0.0, 0.002)})
    got = fit_corun(corun_probe(target, drafter, seqs=1, ks=(2,), reps=2))
    shape = got.shapes[0]
    assert 1.0 < shape.slowdown_verify < 1.02
    w, gap = 0.004, 1e-4          # the draft is submitted first: alone until the verify starts
    assert shape.slowdown_draft == pytest.approx((gap + (w - gap) / 0.7) / w, rel=1e-6)


def test_record_round_trips_and_bad_records_are_one_line_errors():
    target, drafter = _pair(0.1, 0.2)
    probe = corun_probe(target, drafter, seqs=2, ks=(2,), reps=2)
    doc = json.loads(json.dumps(probe.to_dict()))
    assert CorunProbe.from_dict(doc) == probe
    assert probe.layout == "cpu-cores" and probe.devices == ("cpu:1", "cpu:0")
    bad = [({**doc, "format": "x"}, "format"), ({**doc, "layout": "tpu"}, "layout"),
           ({**doc, "shapes": []}, "shapes"), ({**doc, "extra": 1}, "extra"),
           ({**doc, "devices": ["a"]}, "devices"),
           ({**doc, "shapes": [{**doc["shapes"][0], "k": 0}]}, "shapes[0].k"),
           ({**doc, "shapes": [{**doc["shapes"][0], "solo_verify_s": [1.0, "x"]}]},
            "solo_verify_s"),
           ({**doc, "shapes": [{**doc["shapes"][0], "corun_draft_s": [1.0]}]},
            "corun_draft_s"),
           ({**doc, "shapes": [{**doc["shapes"][0], "solo_draft_s": [float("nan"), 1.0]}]},
            "solo_draft_s")]
    for d, field in bad:
        with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")) as e:
            CorunProbe.from_dict(d)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("kw,field", [({"seqs": 9}, "seqs"), ({"reps": 1}, "reps"),
                                      ({"ks": ()}, "ks"), ({"ks": (0,)}, "ks"),
                                      ({"context": 600}, "context")])
def test_probe_rejects_bad_settings_by_name(kw, field):
    target, drafter = _pair(0.1, 0.1)
    with pytest.raises(ValueError, match=field):
        corun_probe(target, drafter, **kw)


def test_layouts_and_defaults():
    assert layout_of({"target": "cpu:1", "drafter": "cpu:0"}) == "cpu-cores"
    assert layout_of({"target": "cuda:0/s1", "drafter": "cuda:0/s2"}) == "gpu-streams"
    assert layout_of({"target": "cuda:0", "drafter": "cuda:1"}) == "gpus"
    streams = default_contention("gpu-streams")
    assert streams.target == DEFAULTS["gpu-streams"].target == 0.5
    assert streams.overlap_target == pytest.approx(2.0)
    assert default_contention("gpus").source == "default:gpus"
    with pytest.raises(ValueError, match="layout"):
        default_contention("tpu")


def test_probe_on_real_workers_leaves_the_engine_as_it_was(models):
    """On a real engine's (inline) workers: positive times of every kind, the slots emptied,
    and the engine's greedy output afterwards the same as a fresh engine's."""
    from psdlab.runtime.controller import Engine, EngineConfig
    from psdlab.runtime.requests import Request
    from psdlab.runtime.runner import ModelSpec
    cfg = EngineConfig(mode="psd", k=2, batch=2, max_new_tokens=6, ignore_eos=True,
                       max_len=96, backend="inline")
    reqs = [Request(i, [3 + i, 5, 7, 11], 0.0, None, 6) for i in range(4)]

    def outputs(eng):
        return {o.id: o.token_ids for o in eng.run(reqs, None).outputs}
    spec_t, spec_d = ModelSpec(str(models["target"])), ModelSpec(str(models["noisy"]))
    with Engine(cfg, spec_t, spec_d) as eng:
        got = corun_probe(eng.target, eng.drafter, seqs=2, ks=(1, 2), context=16, reps=2,
                          slots=cfg.slots)
        for shape in got.shapes:
            assert min(shape.solo_verify_s + shape.solo_draft_s + shape.corun_verify_s
                       + shape.corun_draft_s) > 0
        assert [s.k for s in got.shapes] == [1, 2]
        for w in (eng.target, eng.drafter):
            assert [w.runner.cache.host_lengths[s] for s in range(4)] == [0] * 4
        after = outputs(eng)
    with Engine(cfg, spec_t, spec_d) as fresh:
        assert after == outputs(fresh)


def _sim_trace(tmp_path, mode: str, k: int):
    from psdlab.analysis.trace import read_trace
    from psdlab.cli import main
    path = tmp_path / f"{mode}_k{k}.jsonl"
    assert main(["simulate", "sim/configs/psd_offline.toml", "--mode", mode, "--k", str(k),
                 "--m", "4", "--requests", "24", "--seed", "1", "--trace", str(path)]) == 0
    return str(path), read_trace(str(path))


def test_calibration_with_a_probe_never_reads_psd(tmp_path, capsys):
    """No leak: with a co-run probe, the model file is byte-identical whether or not PSD
    traces are among the inputs, and the PSD replay it gives is the same; the probe's
    contention is what the file's replay parameters carry."""
    from psdlab.validation.calibrate_files import calibrate_to_file
    from psdlab.validation.corun_file import write_corun
    from psdlab.sim.costs.fitted import read_fit_file
    from psdlab.validation.validate import validate
    import os
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sd = [_sim_trace(tmp_path, "sd-sep", k) for k in (2, 4)]
    psd = [_sim_trace(tmp_path, "psd", k) for k in (2, 3)]
    capsys.readouterr()
    target, drafter = _pair(0.12, 0.25)
    probe = corun_probe(target, drafter, seqs=4, ks=(2, 4), reps=4)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for out, inputs in ((a, sd), (b, [sd[0], psd[0], sd[1], psd[1]])):
        calibrate_to_file(out, [t for _, t in inputs], [os.path.basename(p) for p, _ in inputs],
                          corun=probe, select_acceptance=False)
    assert a.read_bytes() == b.read_bytes()
    doc = json.loads(a.read_text())
    assert doc["meta"]["replay"]["contention_target"] == pytest.approx(0.12, abs=1e-9)
    assert doc["meta"]["replay"]["contention_drafter"] == pytest.approx(0.25, abs=1e-9)
    assert doc["meta"]["contention"]["source"] == "probe"
    assert doc["meta"]["calibration"]["traces"] == ["sd-sep_k2.jsonl", "sd-sep_k4.jsonl"]
    held = [("psd_k3", psd[1][1])]
    pa = validate(read_fit_file(str(a), "model"), held, seeds=(0, 1)).to_dict()
    pb = validate(read_fit_file(str(b), "model"), held, seeds=(0, 1)).to_dict()
    def text(doc):                                      # less the model file's own path
        return json.dumps(doc, sort_keys=True, default=str).replace(str(b), str(a))
    assert text(pa) == text(pb)
    assert "predicted" in text(pa)
    # the command line: the probe file beside the traces is used, the PSD traces left out
    # with one warning line
    from psdlab.cli import main
    write_corun(tmp_path, probe)
    c = tmp_path / "c.json"
    assert main(["calibrate", *[p for p, _ in sd + psd], "-o", str(c),
                 "--no-acceptance-selection"]) == 0
    err = capsys.readouterr().err
    assert "2 trace(s) with overlapped (PSD) steps left out" in err
    assert json.loads(c.read_text())["meta"]["contention"]["source"] == "probe"


def test_without_probe_or_psd_runs_the_stated_default_is_used(tmp_path, capsys):
    """SD-sep traces alone and no probe: PSD's overlapped steps rest on the layout's stated
    default (named in the file and the notes), and PSD's controller overhead is SD-sep's,
    not 0 (what a calibration without PSD steps used to give)."""
    from psdlab.validation.calibrate import calibrate
    import os
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sd = [_sim_trace(tmp_path, "sd-sep", k)[1] for k in (2, 4)]
    cal = calibrate(sd)
    assert cal.contention is not None and cal.contention.source.startswith("default:")
    assert cal.replay.overhead_overlapped == cal.replay.overhead_serial
    assert any(n.startswith("psd: contention") for n in cal.notes)
    with_psd = calibrate(sd + [_sim_trace(tmp_path, "psd", 3)[1]])
    assert with_psd.contention is None                  # its own overlapped steps say it
