"""The demo's progress bars (tqdm, on stderr): runs done, and requests done in the current run."""
from __future__ import annotations

import sys
from typing import Any


class Bars:
    """Two tqdm bars on stderr: runs done, and requests done in the current run."""

    def __init__(self, runs: int, requests: int, enabled: bool):
        self.enabled = enabled
        self.outer = self.inner = None
        self.requests = requests
        if enabled:
            from tqdm import tqdm
            self._tqdm = tqdm
            self.outer = tqdm(total=runs, unit="run", desc="demo runs", position=0,
                              file=sys.stderr)

    def on_run(self, spec: Any, i: int, n: int) -> None:
        if not self.enabled:
            return
        assert self.outer is not None            # made in __init__ when enabled
        if self.inner is not None:
            self.inner.close()
            self.outer.update(1)
        self.outer.set_postfix_str(spec.name)
        self.inner = self._tqdm(total=self.requests, unit="req", desc=f"  {spec.name}",
                                position=1, leave=False, file=sys.stderr)

    def on_skip(self, spec: Any) -> None:
        if self.outer is not None:
            self.outer.update(1)

    def on_request(self, done: int, total: int) -> None:
        if self.inner is not None:
            self.inner.update(done - self.inner.n)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
            self.outer.update(1)
        if self.outer is not None:
            self.outer.close()

