"""Readers for the files real serving systems and public traces already write.

One module per foreign format, each with ``sniff(head) -> bool`` (detection by content) and
``read(path)``: vLLM ``bench serve`` results (``vllm_bench``), vLLM ``/metrics`` text
(``vllm_metrics``) and its "SpecDecoding metrics:" log line (``vllm_log``), SGLang
``bench_serving`` results (``sglang_bench``), the Azure LLM inference traces (``azure``),
BurstGPT (``burstgpt``), Mooncake (``mooncake``), ShareGPT (``sharegpt``), Spec-Bench
(``specbench``) and vLLM's ``{"prompt": ...}`` JSONL (``custom_prompts``).  They return the
neutral records of ``records``; :func:`read_workload` detects the format and returns the
requests.  Bad input raises :class:`FormatError` (one line: file, line, field).
numpy-free, stdlib only; imports nothing of psdlab outside ``psdlab.analysis``.
"""
from .detect import FORMATS, detect_format, read_any, read_workload
from .errors import FormatError, TruncatedInputWarning
from .records import BenchSummary, WorkloadRequest, SpecCounters, FileWorkload

__all__ = ["FORMATS", "BenchSummary", "FormatError", "WorkloadRequest", "SpecCounters",
           "TruncatedInputWarning", "FileWorkload", "detect_format", "read_any", "read_workload"]
