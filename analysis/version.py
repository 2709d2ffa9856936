"""psdlab's version and the git commit it runs from, in the bottom layer so every layer can
write them into a trace's ``run`` record or a results file without importing the layers above
(pyproject.toml's ``version`` must equal ``__version__``: tested)."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass

__version__ = "0.1.0"


@dataclass(frozen=True)
class GitCommit:
    """The commit of the checkout a file lives in: the full hash, git's short form, and whether
    the tree (or one folder of it) has uncommitted changes; None where git could not say (no
    git, not a checkout)."""
    full: str | None
    short: str | None
    dirty: bool | None


def git_commit(folder: str, *, only: str | None = None, untracked: bool = True) -> GitCommit:
    """The commit of the checkout holding ``folder``; ``dirty`` counts changes under ``only``
    (a path relative to ``folder``; the whole tree when None), untracked files too unless
    ``untracked`` is false.  The one reader of the git commit: results files and reports stamp
    themselves with it."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True,
                                 timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    status = git("status", "--porcelain", *(() if untracked else ("--untracked-files=no",)),
                 *(("--", only) if only is not None else ()))
    return GitCommit(full=git("rev-parse", "HEAD") or None,
                     short=git("rev-parse", "--short", "HEAD") or None,
                     dirty=None if status is None else bool(status))
