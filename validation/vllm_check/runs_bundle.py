"""The runs file of `psdlab check-vllm`: every measured run's files in one ``runs.json``.

Per bench run a measured run writes vLLM bench's result (``bench/<run>.json``) and the server's
``/metrics`` snapshots around it (``metrics/<run>-before.txt``, ``-after.txt``).
`write_runs_bundle` gathers them into ``runs.json`` beside the report: ``files`` maps each path
as the report's run records give it (``runs[].result``, ``metrics_before``, ``metrics_after`` of
``check_vllm.json``, relative to the folder) to the bench result (its JSON object) or the
snapshot's text, verbatim; one line per file.  ``--reuse`` re-judges from the bundle when the
folder has one, else from the two folders (runs measured before the bundle): `reused_files`
hands the judgement a folder holding the files at those paths (the readers take paths), and
`swap_prefix` puts the report's paths back as the two folders would have given them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence, TypeVar, cast

#: the bundle's name in a check-vllm folder
BUNDLE = "runs.json"
#: the bundle's ``format`` key
FORMAT = "psdlab check-vllm runs 1"
#: a run record's keys that name its files
FILE_KEYS = ("result", "metrics_before", "metrics_after")

V = TypeVar("V")


def run_paths(runs: Sequence[Mapping[str, Any]], extra: Sequence[str] = ()) -> list[str]:
    """The files the run records ``runs`` name, in the order they name them, once each, then
    the ``extra`` files (PSD's traces and co-run probe: ``harness.psd_files``)."""
    return list(dict.fromkeys([str(r[k]) for r in runs for k in FILE_KEYS] + list(extra)))


def runs_bundle_text(folder: Path, runs: Sequence[Mapping[str, Any]],
                     extra: Sequence[str] = ()) -> str:
    """The bundle of the files ``runs`` name and the ``extra`` ones (paths relative to
    ``folder``), as text."""
    lines = []
    for rel in run_paths(runs, extra):
        text = (folder / rel).read_text()
        value = json.loads(text) if rel.endswith(".json") else text
        lines.append(f"  {json.dumps(rel)}: {json.dumps(value)}")
    head = {"format": FORMAT,
            "about": "every bench run's files, keyed by the paths the report's runs[] give "
                     "(result: vLLM bench's result JSON; metrics_before/after: the server's "
                     "/metrics text); psdlab check-vllm --reuse re-judges from it"}
    return ("{\n" + "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in head.items())
            + '  "files": {\n' + ",\n".join("  " + x for x in lines) + "\n  }\n}\n")


def write_runs_bundle(folder: Path, runs: Sequence[Mapping[str, Any]],
                      extra: Sequence[str] = ()) -> Path:
    """``folder/runs.json`` from the files the run records ``runs`` name (the measured run's
    ``bench/`` and ``metrics/``, or an older run's folders: the conversion) and ``extra``."""
    path = folder / BUNDLE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(runs_bundle_text(folder, runs, extra))
    tmp.replace(path)
    return path


def read_runs_bundle(path: Path) -> dict[str, object]:
    """The bundle's ``files`` (path -> JSON object or text); a one-line error when it is not
    one."""
    try:
        doc = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"--reuse: {path} is not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT \
            or not isinstance(doc.get("files"), dict):
        raise ValueError(f"--reuse: {path} is not a check-vllm runs file "
                         f"(format {FORMAT!r})")
    return doc["files"]


def unpack_runs(files: Mapping[str, object], folder: Path,
                runs: Sequence[Mapping[str, Any]], extra: Sequence[str] = ()) -> None:
    """Write the files ``runs`` name and ``extra`` from the bundle's ``files`` under
    ``folder``."""
    for rel in run_paths(runs, extra):
        if rel not in files:
            raise ValueError(f"--reuse: {BUNDLE} holds no {rel} (named in runs[])")
        value = files[rel]
        dest = folder / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(value if isinstance(value, str) else json.dumps(value))


@contextlib.contextmanager
def reused_files(out: Path, runs: Sequence[Mapping[str, Any]],
                 extra: Sequence[str] = ()) -> Iterator[Path]:
    """The folder the files of ``runs`` lie in under their recorded paths: ``out`` itself
    (the two folders of a run measured before the bundle), or, when ``out/runs.json`` exists,
    a temporary folder the bundle is unpacked into (removed afterwards)."""
    bundle = out / BUNDLE
    if not bundle.is_file():
        missing = [p for p in run_paths(runs, extra) if not (out / p).is_file()]
        if missing:
            raise ValueError(f"--reuse: no {bundle} and no {out / missing[0]}")
        yield out
        return
    files = read_runs_bundle(bundle)
    with tempfile.TemporaryDirectory(prefix="psdlab-check-vllm-") as tmp:
        unpack_runs(files, Path(tmp), runs, extra)
        yield Path(tmp)


def swap_prefix(value: V, old: Path, new: Path) -> V:
    """``value`` (a record: frozen dataclasses, mappings, lists, tuples, strings, numbers) with
    every path under ``old`` put under ``new`` (as the judgement would have written it reading
    ``new``)."""
    if old == new:
        return value
    return cast(V, _swapped(value, str(old) + os.sep, str(new) + os.sep))


def _swapped(value: object, a: str, b: str) -> object:
    if isinstance(value, str):
        return value.replace(a, b)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _swapped(getattr(value, f.name), a, b)
                                             for f in dataclasses.fields(value) if f.init})
    if isinstance(value, Mapping):
        return {_swapped(k, a, b): _swapped(v, a, b) for k, v in value.items()}
    if isinstance(value, list):
        return [_swapped(v, a, b) for v in value]
    if isinstance(value, tuple):
        return tuple(_swapped(v, a, b) for v in value)
    return value
