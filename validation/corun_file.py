"""The co-run probe's record as calibration data: kept as ``corun_probe.json`` beside the
calibration traces (the demo writes it there; ``psdlab probe`` writes it where it is told)
and read back by ``psdlab calibrate`` and the demo (``analysis.contention`` fits it)."""
from __future__ import annotations

import json
import os

from psdlab.analysis.atomic_write import write_text
from psdlab.analysis.contention import CorunProbe

#: the file's name beside the traces
CORUN_FILE = "corun_probe.json"


def write_corun(path: str | os.PathLike, probe: CorunProbe) -> str:
    """The record at ``path`` (a folder: ``CORUN_FILE`` in it), written whole; the path."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, CORUN_FILE)
    return write_text(path, json.dumps(probe.to_dict(), indent=1) + "\n")


def read_corun_file(path: str | os.PathLike) -> CorunProbe:
    """A record from its file; a one-line error naming the file and the field."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{os.fspath(path)}: not a co-run probe's record "
                         f"({str(exc).splitlines()[0]})") from None
    return CorunProbe.from_dict(doc, os.fspath(path))


def read_corun(folder: str | os.PathLike) -> CorunProbe | None:
    """The record kept in ``folder``, or None when there is none."""
    path = os.path.join(os.fspath(folder), CORUN_FILE)
    return read_corun_file(path) if os.path.exists(path) else None
