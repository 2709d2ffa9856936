"""What PSD adds to SD with the drafter on its own device, measured without PSD: the co-run
probe's record, its contention fit, and the stated defaults where no probe was run.

An overlapped PSD step runs the drafter's drafting phase and the target's verification at the
same time.  When the two devices share anything (two cores of one CPU share memory bandwidth
and the last-level cache; two streams of one GPU share its SMs and bandwidth) each runs slower
than alone.  The simulator's contention model (``validation.replay_model``): while both run,
a role progresses at ``1 - c`` of its solo speed, so a pass of solo time ``w`` that overlapped
the other for ``o`` seconds lasts ``w + c * o``.

The **co-run probe** (``runtime.corun_probe``) measures ``c`` without a PSD controller: on
the real workers, per shape (sequences, k, context) it times the verification and the
drafting phase alone and then both at once (submitted together, as PSD does), ``reps`` times
alternately; per role and shape ``c`` is the least-squares slope of (co-run duration - solo
median) on the time the two intervals overlapped, and the probe's ``c`` per role is the
median over shapes.  The probe also times the same two commands one after the other from the
same driver (SD-sep's structure): the driver's time beyond the passes is ``serial_host``
there and ``corun_host`` (beyond the longer pass) in the co-run; their difference is the host
time a PSD step hides (the drafter's hand-off runs while the target computes), which is taken
off SD-sep's measured controller overhead to give PSD's (``Contention.host_saving_s``).

Where no probe was run, ``DEFAULTS`` states the contention from first principles per device
layout (``ContentionDefault``), and says so wherever it is used.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from psdlab.analysis.checks import check_fields

#: contention coefficients are clipped to this range (c < 0: faster while overlapped)
C_RANGE = (-0.5, 0.9)
#: the probe record's format name and version
PROBE_FORMAT = "psdlab.corun-probe"
PROBE_VERSION = 1


@dataclass(frozen=True)
class ContentionDefault:
    """A stated default for a layout of the two devices, from first principles (no probe)."""
    name: str
    target: float           # c of the target while the drafter runs
    drafter: float          # c of the drafter while the target runs
    why: str                # the principle, in words (printed where the default is used)


#: the defaults by layout; a probe replaces them.
DEFAULTS: dict[str, ContentionDefault] = {d.name: d for d in (
    ContentionDefault("cpu-cores", 0.0, 0.0,
                 "two cores of one CPU, one torch thread each: a one-thread pass is bound by "
                 "its own core (compute, L1/L2), and one core's demand is below the socket's "
                 "memory bandwidth, so no first-principles slowdown (measured on 2-core VMs: "
                 "0-5%, which only a probe gives)"),
    ContentionDefault("gpu-streams", 0.5, 0.5,
                 "two streams of one GPU: two bandwidth-bound passes share its memory "
                 "bandwidth, each at half its solo speed while both run (the roofline's "
                 "share); launch-bound passes overlap better, which only a probe measures"),
    ContentionDefault("gpus", 0.0, 0.0,
                 "separate GPUs share nothing during the passes; the drafts' transfer over the "
                 "link is the simulator's transfer term, not contention"),
)}


def layout_of(devices: Mapping[str, Any] | None) -> str:
    """The layout of a trace's ``run.devices`` labels (``cpu:N`` cores, ``cuda:N`` GPUs,
    ``cuda:N/sM`` streams of one GPU)."""
    labels = [str(v) for v in (devices or {}).values()]
    gpu = [lab.split("/")[0] for lab in labels if lab.startswith("cuda")]
    if not gpu:
        return "cpu-cores"
    return "gpu-streams" if len(set(gpu)) < len(gpu) else "gpus"


@dataclass(frozen=True)
class CorunShape:
    """One probed shape: ``reps`` timings of each kind (seconds)."""
    seqs: int
    k: int
    context: int
    solo_verify_s: tuple[float, ...]
    solo_draft_s: tuple[float, ...]
    corun_verify_s: tuple[float, ...]
    corun_draft_s: tuple[float, ...]
    corun_overlap_s: tuple[float, ...]     # how long the two intervals overlapped
    corun_host_s: tuple[float, ...]        # the co-run's wall beyond its longer pass
    serial_host_s: tuple[float, ...]       # the serial pair's wall beyond both passes

    SERIES = ("solo_verify_s", "solo_draft_s", "corun_verify_s", "corun_draft_s",
              "corun_overlap_s", "corun_host_s", "serial_host_s")

    @classmethod
    def from_dict(cls, doc: Any, where: str) -> "CorunShape":
        if not isinstance(doc, dict):
            raise ValueError(f"{where}: must be a table, got {type(doc).__name__}")
        check_fields(doc, where, ("seqs", "k", "context", *cls.SERIES), named=False)
        ints = {}
        for name in ("seqs", "k", "context"):
            v = doc.get(name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "context"
                                                                     else 1):
                raise ValueError(f"{where}.{name}: must be an integer >= "
                                 f"{0 if name == 'context' else 1}, got {v!r}")
            ints[name] = v
        series: dict[str, tuple[float, ...]] = {}
        n = None
        for name in cls.SERIES:
            xs = doc.get(name)
            if not isinstance(xs, list) or not xs:
                raise ValueError(f"{where}.{name}: must be a non-empty list of seconds, "
                                 f"got {xs!r}")
            for x in xs:
                if (isinstance(x, bool) or not isinstance(x, (int, float))
                        or not math.isfinite(x)
                        or (x < 0 and not name.endswith("host_s"))):
                    raise ValueError(f"{where}.{name}: every entry must be a finite number of "
                                     f"seconds (>= 0 but for host times), got {x!r}")
            if n is not None and len(xs) != n:
                raise ValueError(f"{where}.{name}: {len(xs)} entries; every series of a shape "
                                 f"needs the same number ({n})")
            n = len(xs)
            series[name] = tuple(float(x) for x in xs)
        return cls(ints["seqs"], ints["k"], ints["context"],
                   *(series[name] for name in cls.SERIES))


@dataclass(frozen=True)
class CorunProbe:
    """A co-run probe's record (``runtime.corun_probe``): where it ran and its shapes."""
    layout: str                         # a DEFAULTS key: what kind of devices it measured
    devices: tuple[str, str]            # (target, drafter) device labels
    shapes: tuple[CorunShape, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"format": PROBE_FORMAT, "version": PROBE_VERSION, "layout": self.layout,
                "devices": list(self.devices),
                "shapes": [{k: (list(v) if isinstance(v, tuple) else v)
                            for k, v in asdict(s).items()} for s in self.shapes]}

    @classmethod
    def from_dict(cls, doc: Any, where: str = "corun_probe") -> "CorunProbe":
        """The record from its JSON object; a one-line ValueError naming the field."""
        if not isinstance(doc, dict) or doc.get("format") != PROBE_FORMAT:
            raise ValueError(f"{where}: not a co-run probe's record (format must be "
                             f"{PROBE_FORMAT!r})")
        check_fields(doc, where, ("format", "version", "layout", "devices", "shapes"), named=False)
        if doc.get("version") != PROBE_VERSION:
            raise ValueError(f"{where}.version: must be {PROBE_VERSION}, got "
                             f"{doc.get('version')!r}")
        layout = doc.get("layout")
        if layout not in DEFAULTS:
            raise ValueError(f"{where}.layout: must be one of {', '.join(DEFAULTS)}, got "
                             f"{layout!r}")
        devices = doc.get("devices")
        if (not isinstance(devices, list) or len(devices) != 2
                or not all(isinstance(d, str) for d in devices)):
            raise ValueError(f"{where}.devices: must be two device labels [target, drafter], "
                             f"got {devices!r}")
        shapes = doc.get("shapes")
        if not isinstance(shapes, list) or not shapes:
            raise ValueError(f"{where}.shapes: must be a non-empty list, got {shapes!r}")
        return cls(str(layout), (devices[0], devices[1]),
                   tuple(CorunShape.from_dict(s, f"{where}.shapes[{i}]")
                         for i, s in enumerate(shapes)))


@dataclass(frozen=True)
class ShapeContention:
    """One shape's fit: ``c`` per role and the co-run / solo mean ratio (slowdown)."""
    seqs: int
    k: int
    context: int
    target: float
    drafter: float
    slowdown_verify: float
    slowdown_draft: float


@dataclass(frozen=True)
class Contention:
    """What the replay of an overlapped step uses: ``c`` per role, the constant overlap
    factors (co-run / solo, the closed form's variant), the host time a PSD step hides
    against SD-sep's, and where each came from (``source``: ``probe`` or
    ``default:<layout>``, with ``why``)."""
    target: float
    drafter: float
    overlap_target: float
    overlap_drafter: float
    host_saving_s: float
    source: str
    why: str
    shapes: tuple[ShapeContention, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _slope(overlap: Sequence[float], excess: Sequence[float]) -> float:
    o, e = np.asarray(overlap, float), np.asarray(excess, float)
    den = float(o @ o)
    return float(o @ e / den) if den > 0 else 0.0


def fit_corun(probe: CorunProbe) -> Contention:
    """The probe's contention (module docstring): per shape and role the least-squares ``c``
    of (co-run - solo median) on the overlap, the median over shapes, clipped to C_RANGE;
    the overlap factors pooled over shapes (total co-run / total solo, reps weighted alike);
    the host saving as median serial host - median co-run host, pooled over shapes
    (at least 0: a PSD step is never charged less than nothing)."""
    per_shape = []
    for s in probe.shapes:
        w_v, w_d = float(np.median(s.solo_verify_s)), float(np.median(s.solo_draft_s))
        c_t = _slope(s.corun_overlap_s, [x - w_v for x in s.corun_verify_s])
        c_d = _slope(s.corun_overlap_s, [x - w_d for x in s.corun_draft_s])
        per_shape.append(ShapeContention(
            s.seqs, s.k, s.context, float(np.clip(c_t, *C_RANGE)),
            float(np.clip(c_d, *C_RANGE)),
            float(np.mean(s.corun_verify_s) / np.mean(s.solo_verify_s))
            if np.mean(s.solo_verify_s) > 0 else 1.0,
            float(np.mean(s.corun_draft_s) / np.mean(s.solo_draft_s))
            if np.mean(s.solo_draft_s) > 0 else 1.0))
    solo_v = sum(float(np.mean(s.solo_verify_s)) for s in probe.shapes)
    solo_d = sum(float(np.mean(s.solo_draft_s)) for s in probe.shapes)
    co_v = sum(float(np.mean(s.corun_verify_s)) for s in probe.shapes)
    co_d = sum(float(np.mean(s.corun_draft_s)) for s in probe.shapes)
    serial = float(np.median([x for s in probe.shapes for x in s.serial_host_s]))
    corun = float(np.median([x for s in probe.shapes for x in s.corun_host_s]))
    return Contention(
        target=float(np.median([p.target for p in per_shape])),
        drafter=float(np.median([p.drafter for p in per_shape])),
        overlap_target=co_v / solo_v if solo_v > 0 else 1.0,
        overlap_drafter=co_d / solo_d if solo_d > 0 else 1.0,
        host_saving_s=max(serial - corun, 0.0), source="probe",
        why=f"co-run probe on {probe.devices[0]} + {probe.devices[1]} "
            f"({len(probe.shapes)} shapes)",
        shapes=tuple(per_shape))


def default_contention(layout: str) -> Contention:
    """The stated default of a layout (``DEFAULTS``): no host saving (PSD's controller
    overhead taken as SD-sep's), overlap factors 1 + c (the whole pass overlapped)."""
    if layout not in DEFAULTS:
        raise ValueError(f"layout: must be one of {', '.join(DEFAULTS)}, got {layout!r}")
    d = DEFAULTS[layout]
    return Contention(d.target, d.drafter, 1.0 / (1.0 - d.target), 1.0 / (1.0 - d.drafter),
                      0.0, f"default:{layout}", d.why)
