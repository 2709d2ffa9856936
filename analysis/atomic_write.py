"""Results files written whole or not at all: a temporary file beside each target, then a
rename (a reader never sees half a file; an interrupted writer leaves the old file in place).
:func:`write_all` is the one primitive; the others are its common cases."""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any


def write_all(writers: Mapping[str, Callable[[str], object]]) -> None:
    """Every file or none: each writer writes a temporary file beside its path
    (``.NAME.PID.tmp``); they are renamed into place, mode 0644, only once all succeeded (on
    any error the temporaries go and the old files stay).  An OSError on a temporary file
    names the file asked for (``Not a directory: out/p.csv``), not the temporary."""
    temps: list[tuple[str, str]] = []
    try:
        for path, write in writers.items():
            tmp = os.path.join(os.path.dirname(path) or ".",
                               f".{os.path.basename(path)}.{os.getpid()}.tmp")
            temps.append((tmp, path))
            try:
                write(tmp)
            except OSError as exc:
                if exc.filename != tmp or exc.errno is None:
                    raise
                raise type(exc)(exc.errno, exc.strerror, path) from None
            os.chmod(tmp, 0o644)       # results files are for all, whatever the umask
        for tmp, path in temps:
            os.replace(tmp, path)
    finally:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.remove(tmp)


def write_text(path: str, text: str, *, make_folders: bool = True) -> str:
    """``text`` at ``path`` (its folders made unless ``make_folders`` is false); the path."""
    if make_folders:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
    write_all({path: write})
    return path


def write_json_and_markdown(res: Any, path: str, md: str) -> tuple[str, str]:
    """JSON of ``res`` at ``path`` and the markdown ``md`` beside it (same name, .md)."""
    md_path = os.path.splitext(path)[0] + ".md"
    write_text(path, json.dumps(res, indent=1) + "\n")
    write_text(md_path, md)
    return path, md_path
