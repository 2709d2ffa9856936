"""The prompt texts of a file in any format that has them (ShareGPT, Spec-Bench, vLLM's custom
``{"prompt": ...}`` JSONL, ...), for ``psdlab run --prompts FILE``: the runtime tokenises
them (``runtime.run_setup``); this module only reads.  A format without text (a trace of
lengths: Azure, BurstGPT, Mooncake; a benchmark result, which keeps no prompts) is a one-line
:class:`~.errors.FormatError` naming the file.
"""
from __future__ import annotations

from dataclasses import dataclass

from .detect import module_for, read_workload
from .errors import fail
from .parsing import PathLike


@dataclass(frozen=True)
class PromptText:
    id: str
    text: str
    output_len: int      # the file's output length for it (0: the file gives none)
    source: str


def read_prompt_texts(path: PathLike, format: str | None = None) -> list[PromptText]:
    """The prompts of ``path`` in file order of arrival (format told by content unless
    ``format`` names it)."""
    if format is not None:
        module_for(format)
    wl = read_workload(path, format)
    if not wl.records:
        raise fail(path, "no requests in the file")
    missing = [i for i, r in enumerate(wl.records) if not r.text]
    if missing:
        what = "any" if len(missing) == len(wl.records) else f"request {missing[0]}'s"
        raise fail(path, f"has no prompt text ({wl.format} keeps lengths, not {what} prompt "
                   f"text); psdlab run needs prompts: ShareGPT, Spec-Bench, vLLM custom "
                   f"JSONL or psdlab's {{\"id\", \"style\", \"text\"}} lines",
                   field="text")
    return [PromptText(id=str(i), text=str(r.text), output_len=r.output_len,
                       source=r.source) for i, r in enumerate(wl.records)]
