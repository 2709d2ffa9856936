"""Results files written whole or not at all: a temporary file beside the target, then a rename
(a reader never sees half a file; an interrupted writer leaves the old file in place)."""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any


def write_text(path: str, text: str) -> str:
    """``text`` at ``path`` (folders made), mode 0644; the path."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)           # mkstemp makes 0600; results files are for all
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_json_and_markdown(res: Any, path: str, md: str) -> tuple[str, str]:
    """JSON of ``res`` at ``path`` and the markdown ``md`` beside it (same name, .md)."""
    md_path = os.path.splitext(path)[0] + ".md"
    write_text(path, json.dumps(res, indent=1) + "\n")
    write_text(md_path, md)
    return path, md_path
