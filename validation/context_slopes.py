"""A controlled context probe's result as calibration data (``runtime.context_timing`` measures
it on the workers before the timed runs): where it is kept beside the traces, and the context
slopes it fixes in the decode fits of ``validation.calibrate``.

The file is ``context_probe.json`` in the folder of the calibration traces: ``{"seqs", "k",
"contexts", "reps", "verify": {"slope", "se", ...}, "draft": {...}}``, slopes in seconds per
summed context token (the draft's per one-token pass), as ``runtime.context_timing`` returns
them.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping

#: the file's name beside the traces
PROBE_FILE = "context_probe.json"
#: the probe's entry for each decode fit of ``validation.calibrate``
PROBE_ENTRY = {"verify": "verify", "draft": "draft"}


def probe_slopes(probe: Mapping[str, Any] | None) -> dict[str, tuple[float, float, float]]:
    """Per decode fit, (per_context, 95% low, 95% high) from a probe's result (a negative
    measured slope counts as 0); empty without a probe."""
    out = {}
    for fit, entry in PROBE_ENTRY.items():
        got = (probe or {}).get(entry)
        if not got:
            continue
        try:
            slope, se = float(got["slope"]), float(got["se"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"context_probe.{entry}: needs numbers slope and se, got "
                             f"{got!r}") from None
        if not (math.isfinite(slope) and math.isfinite(se)) or se < 0:
            raise ValueError(f"context_probe.{entry}: slope and se must be finite and se >= 0, "
                             f"got slope {slope}, se {se}")
        out[fit] = (max(slope, 0.0), max(slope - 1.96 * se, 0.0), max(slope + 1.96 * se, 0.0))
    return out


def write_probe(folder: str | os.PathLike, probe: Mapping[str, Any]) -> str:
    """Write a probe's result into ``folder`` (the traces' folder); returns the path."""
    path = os.path.join(os.fspath(folder), PROBE_FILE)
    with open(path, "w") as f:
        json.dump(dict(probe), f, indent=1)
        f.write("\n")
    return path


def read_probe(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The probe's result kept in ``folder``, or None when there is none; a file that is not
    a probe's result is a one-line error naming it."""
    path = os.path.join(os.fspath(folder), PROBE_FILE)
    return read_probe_file(path) if os.path.exists(path) else None


def read_probe_file(path: str | os.PathLike) -> dict[str, Any]:
    """A probe's result from its file (one-line errors naming the file)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a context probe's result ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a context probe's result (a JSON object is needed)")
    probe_slopes(doc)
    return doc
