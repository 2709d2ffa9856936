"""Which reader a file needs, told from its content (not its name), and one entry point.

``FORMATS`` (a ``psdlab.analysis.registry.Registry``) maps each format's name to its reader
module; every module has ``NAME``,
``KIND`` ("workload", "bench", "counters" or "log"), ``sniff(head)`` and ``read(path)``.
:func:`read_workload` reads any format that holds requests (the bench results through their
``read_workload``: detailed results only).
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

from . import (
    azure,
    burstgpt,
    custom_prompts,
    mooncake,
    sglang_bench,
    sharegpt,
    specbench,
    vllm_bench,
    vllm_log,
    vllm_metrics,
)
from ..registry import Registry
from .errors import FormatError, fail
from .parsing import PathLike, head_text
from .records import FileWorkload

#: name -> reader module, in the order detection tries them (most specific first)
FORMATS: Registry[ModuleType] = Registry("format", error=FormatError)
for _module in (vllm_metrics, vllm_bench, sglang_bench, azure, burstgpt, mooncake, sharegpt,
                specbench, custom_prompts, vllm_log):
    FORMATS.add(_module.NAME, _module)
WORKLOAD_KINDS = ("workload", "bench")


def module_for(format: str) -> ModuleType:
    """The reader module called ``format``; an unknown name lists the allowed ones."""
    return FORMATS.get(format, "format")


def detect_format(path: PathLike) -> str:
    """The name of the format ``path`` is in, from its first bytes."""
    head = head_text(path)
    if not head.strip():
        raise fail(path, "the file is empty")
    for name, module in FORMATS.items():
        if module.sniff(head):
            return name
    raise fail(path, f"cannot tell the format from its content; pass format= one of "
               f"{', '.join(sorted(FORMATS))}")


def read_any(path: PathLike, format: str | None = None, **options: Any) -> Any:
    """Whatever the format's reader returns (FileWorkload, BenchSummary or SpecCounters)."""
    module = module_for(format) if format is not None else FORMATS[detect_format(path)]
    return module.read(path, **options)


def read_workload(path: PathLike, format: str | None = None, **options: Any) -> FileWorkload:
    """The requests in ``path`` as a FileWorkload, the format detected by content unless
    ``format`` names it.  ``options`` go to the reader (e.g. ``tokenizer=``, ``rate=``)."""
    module = module_for(format) if format is not None else FORMATS[detect_format(path)]
    if module.KIND not in WORKLOAD_KINDS:
        raise fail(path, f"is {module.NAME} ({module.KIND}), which holds no requests; "
                   f"read it with psdlab.analysis.formats.{module.NAME}.read")
    reader = module.read_workload if module.KIND == "bench" else module.read
    out: FileWorkload = reader(path, **options)
    return out
