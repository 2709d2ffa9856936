"""Glue for the `psdlab run` and `psdlab bench-runtime` commands: which models, which prompts,
which requests, and one call that runs them (with a controlled-acceptance reference pass when
asked).  Kept out of psdlab/ so the commands stay free of logic.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from psdlab.runtime.controller import Engine, EngineConfig, EngineResult
from psdlab.runtime.requests import Request, arrival_times
from psdlab.runtime.runner import ModelSpec


@dataclass(frozen=True)
class Models:
    target: str
    drafter: str | None
    tokenizer: str | None


def resolve_models(target: str | None, draft: str | None, need_draft: bool,
                   progress: bool = True) -> Models:
    """``--target/--draft`` directories, or the real pair of `runtime.model_pair` by default."""
    if target is None:
        if draft is not None:
            raise ValueError("target: --draft needs --target as well")
        from psdlab.runtime.model_pair import prepare_pair
        pair = prepare_pair(progress=progress)
        return Models(str(pair.target_dir), str(pair.drafter_dir), str(pair.tokenizer_dir))
    for name, path in (("target", target), ("draft", draft)):
        if path is not None and not (Path(path) / "config.json").is_file():
            raise FileNotFoundError(f"{name}: no config.json in {path}")
    if need_draft and draft is None:
        raise ValueError("draft: this mode needs a drafter; give --draft DIR with --target")
    return Models(target, draft, tokenizer_dir(target))


def tokenizer_dir(path: str) -> str | None:
    """``path`` when the model directory holds a tokenizer, else None."""
    return path if any((Path(path) / f).is_file()
                       for f in ("tokenizer.json", "tokenizer_config.json")) else None


def load_tokenizer(path: str | None) -> Any:
    if path is None:
        return None
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(path)


def load_requests(path: str | None, tokenizer: Any, arrivals: str = "offline",
                  limit: int | None = None, seed: int = 0,
                  format: str | None = None) -> list[Request]:
    """Requests from a prompts file: lines with ``prompt_ids`` (token ids, no tokenizer needed),
    `runtime.prompts` lines with text, or any format with prompt text that
    ``analysis.formats`` reads (ShareGPT, Spec-Bench, vLLM custom JSONL; ``format`` names it,
    else it is told by content); texts are wrapped in the chat template and tokenized."""
    from psdlab.runtime.prompts import Prompt, load_prompts
    first = _first_record(Path(path)) if path is not None else {}
    items: list[tuple[str, list[int], str | None]]
    if path is not None and "prompt_ids" in (first or {}) and format is None:
        rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        items = [(str(r.get("id", i)), [int(x) for x in r["prompt_ids"]], None)
                 for i, r in enumerate(rows)]
        items = items[:limit]
    else:
        if path is not None and (format is not None or not _own_prompt_line(first)):
            from psdlab.analysis.formats.prompt_text import read_prompt_texts
            prompts = [Prompt(id=t.id, style="file", text=t.text)
                       for t in read_prompt_texts(path, format)]
        else:
            prompts = load_prompts(path)
        items = _tokenized(prompts[:limit], tokenizer)
    if limit is not None and len(items) < limit:
        import warnings
        warnings.warn(f"--num-prompts {limit}: the prompts file has {len(items)}; running those "
                      f"{len(items)}", stacklevel=2)
    times = arrival_times(arrivals, len(items), seed)
    return [Request(i, tuple(ids), t, text) for (i, ids, text), t in zip(items, times)]


def _tokenized(prompts: Sequence[Any],
               tokenizer: Any) -> list[tuple[str, list[int], str | None]]:
    """(id, token ids of the chat-wrapped text, text) per prompt."""
    if tokenizer is None:
        raise ValueError("prompts: text prompts need a tokenizer (the target directory has "
                         "none); give prompt_ids lines instead")
    return [(p.id, list(tokenizer(p.chat_text(tokenizer), add_special_tokens=False)["input_ids"]),
             p.text) for p in prompts]


def _first_record(path: Path) -> dict[str, Any] | None:
    """The first non-empty line of ``path`` parsed as JSON; None when it is not a JSON object
    (a JSON array such as ShareGPT, a CSV, ...)."""
    if not path.is_file():
        raise FileNotFoundError(f"prompts file not found: {path}")
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    first = json.loads(line)
                except json.JSONDecodeError:
                    return None
                return first if isinstance(first, dict) else None
    raise ValueError(f"prompts: {path} is empty")


def _own_prompt_line(first: dict[str, Any] | None) -> bool:
    """Whether a file's first record is psdlab's own (``prompt_ids``, or ``{"id", "style",
    "text"}``), not a file another tool wrote."""
    return first is not None and ("prompt_ids" in first or {"id", "text"} <= set(first))


def run_requests(cfg: EngineConfig, models: Models, requests: Sequence[Request],
                 trace_path: Any = None, tokenizer: Any = None,
                 progress: Callable[[int, int], None] | None = None,
                 run_extra: dict[str, Any] | None = None) -> EngineResult:
    """Start the workers, run the requests, stop the workers.  With ``controlled_alpha`` a
    target-only greedy pass first gives the reference continuation (not traced)."""
    reference = None
    if cfg.controlled_alpha is not None:
        ar_cfg = replace(cfg, mode="ar", controlled_alpha=None, max_num_seqs=cfg.slots)
        with Engine(ar_cfg, ModelSpec(models.target)) as eng:
            ref = eng.run(requests, None)
        reference = {o.id: o.token_ids for o in ref.outputs}
    drafter = ModelSpec(models.drafter) if models.drafter and cfg.mode != "ar" else None
    with Engine(cfg, ModelSpec(models.target), drafter, tokenizer) as eng:
        return eng.run(requests, trace_path, reference=reference, progress=progress,
                       run_extra=run_extra)


def eos_of(tokenizer: Any, model_dir: str) -> int | None:
    """The end-of-sequence id: the tokenizer's, else the model config's."""
    if tokenizer is not None and getattr(tokenizer, "eos_token_id", None) is not None:
        return int(tokenizer.eos_token_id)
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    eos = cfg.get("eos_token_id")
    return int(eos[0] if isinstance(eos, list) else eos) if eos is not None else None
