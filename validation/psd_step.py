"""How far what PSD was predicted from explains PSD's measured step.

A PSD step overlaps the drafting of one batch with the verification of the other, so with
nothing shared and no controller it would last max(t, V): the longer of the two phases alone.
It lasts longer, by the contention of the overlapped passes and the controller's work, which a
prediction before PSD ran takes from the co-run probe and SD-sep's controller overhead
(``analysis.contention``). Per PSD run, over its overlapped decode steps with one draft and one
verify phase: the measured mean step (with the controller's pause before the next, as the
overhead is measured: ``replay_model.step_overheads``); the mean max(t, V) of the same phases'
solo times (the calibration's affine fits at each phase's shape); the predicted mean step (each
phase scaled by the contention model, ``ReplayParams.scales``, the longer plus PSD's controller
overhead); and the share of the measured excess over max(t, V) that the prediction accounts
for. The mean drafting and verification times beside their solo times show which role the
overlap slowed.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from psdlab.analysis.trace import Trace
from psdlab.validation.phase_model import calibration_view, design, with_draft_forwards
from psdlab.validation.replay_model import load_replay_params, steps_with_pause
from psdlab.validation.solo_times import is_decode


@dataclass(frozen=True)
class PsdStepRow:
    """One PSD configuration's overlapped steps (means over its runs' steps, seconds)."""
    config: str
    runs: int
    steps: int
    measured_step_s: float
    solo_max_s: float                   # max(t, V) of the phases alone
    predicted_step_s: float             # contention + controller overhead, from the inputs
    measured_draft_s: float
    solo_draft_s: float
    measured_verify_s: float
    solo_verify_s: float

    @property
    def explained(self) -> float | None:
        """Share of the measured excess over max(t, V) the prediction accounts for (None when
        the measured step is not above it)."""
        excess = self.measured_step_s - self.solo_max_s
        return (self.predicted_step_s - self.solo_max_s) / excess if excess > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "explained": self.explained}


def psd_step_rows(model: Mapping[str, Any], traces: Sequence[tuple[str, str, Trace]]
                  ) -> list[PsdStepRow]:
    """Per configuration, the rows of the module docstring over ``traces``: (run name, its
    configuration, trace), PSD runs only (those with overlapped steps)."""
    cal = calibration_view(model)
    replay = load_replay_params(dict(model))
    if "draft" not in cal.costs or "verify" not in cal.costs:
        return []
    acc: dict[str, dict[str, list[float]]] = {}
    runs: dict[str, set[str]] = {}
    for name, config, trace in traces:
        steps = [(s, pause, d[0], v[0])
                 for s, pause in steps_with_pause(with_draft_forwards(trace))
                 if s.overlapped and is_decode(s)
                 for d, v in [([p for p in s.phases if p.kind == "draft"],
                               [p for p in s.phases if p.kind == "verify"])]
                 if len(d) == 1 and len(v) == 1]
        if not steps:
            continue
        cols = acc.setdefault(config, {k: [] for k in ("step", "solo", "pred", "d", "wd",
                                                       "v", "wv")})
        runs.setdefault(config, set()).add(name)
        wd = cal.costs["draft"].predict(design("draft", [d for _, _, d, _ in steps]))
        wv = cal.costs["verify"].predict(design("verify", [v for *_, v in steps]))
        for (step, pause, d, v), a, b in zip(steps, wd, wv):
            if a <= 0 or b <= 0:
                continue
            st, sd = replay.scales("psd", float(a), float(b))
            cols["step"].append(step.end - step.start + pause)
            cols["solo"].append(max(float(a), float(b)))
            cols["pred"].append(max(float(a) * sd, float(b) * st)
                                + replay.overhead("psd"))
            cols["d"].append(d.end - d.start)
            cols["wd"].append(float(a))
            cols["v"].append(v.end - v.start)
            cols["wv"].append(float(b))
    out = []
    for config, c in acc.items():
        if not c["step"]:
            continue
        m = {k: float(np.mean(v)) for k, v in c.items()}
        out.append(PsdStepRow(config, len(runs[config]), len(c["step"]), m["step"], m["solo"],
                              m["pred"], m["d"], m["wd"], m["v"], m["wv"]))
    return out


def psd_step_lines(rows: Sequence[PsdStepRow], contention: Mapping[str, Any] | None
                   ) -> list[str]:
    """The report's section: what PSD was predicted from, and how far it explains the
    measured step (markdown lines; none without PSD rows)."""
    if not rows:
        return []
    lines = ["## PSD's inputs, measured without PSD", ""]
    if contention:
        lines.append(f"Contention ({contention.get('source')}: {contention.get('why')}): "
                     f"target c = {contention.get('target', 0):+.3f}, drafter c = "
                     f"{contention.get('drafter', 0):+.3f}; a co-run step hides "
                     f"{1e3 * contention.get('host_saving_s', 0):.2f} ms of SD-sep's "
                     f"controller time.")
        shapes = contention.get("shapes") or []
        if shapes:
            lines.append("Probe slowdown (co-run / alone) by shape: " + "; ".join(
                f"m {s['seqs']} k {s['k']}: verify x{s['slowdown_verify']:.3f}, draft "
                f"x{s['slowdown_draft']:.3f}" for s in shapes) + ".")
        lines.append("")

    def ms(x: float) -> str:
        return f"{1e3 * x:.1f}"
    body = [[r.config, str(r.steps), ms(r.solo_max_s), ms(r.predicted_step_s),
             ms(r.measured_step_s),
             "n/a" if r.explained is None else f"{100 * r.explained:.0f}%",
             f"{ms(r.measured_draft_s)} / {ms(r.solo_draft_s)}",
             f"{ms(r.measured_verify_s)} / {ms(r.solo_verify_s)}"] for r in rows]
    from psdlab.validation.tables import md_table
    lines += ["Overlapped PSD steps: max(t, V) of the phases alone (the calibration's fits), "
              "the step predicted from the probe and SD-sep's overhead, the measured step "
              "(ms, means), and the share of the measured excess the prediction explains.", "",
              md_table(["PSD run", "steps", "max(t, V) alone", "predicted", "measured",
                        "explained", "draft meas / alone", "verify meas / alone"], body), ""]
    return lines
