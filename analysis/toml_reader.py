"""The TOML reader for every config psdlab reads: the standard library's ``tomllib`` (Python
3.11+), else the ``tomli`` backport that pyproject installs on 3.10 (the same API)."""
from __future__ import annotations

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["tomllib"]
