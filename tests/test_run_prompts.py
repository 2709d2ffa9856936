"""``psdlab run --prompts FILE [--format F]``: prompt files of other tools (ShareGPT, Spec-Bench,
vLLM custom JSONL) become runtime requests through the real tokenizer; psdlab's own
``{"id", "style", "text"}`` lines still load; a file without prompt text is a one-line error."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from psdlab.analysis.formats import FormatError  # noqa: E402
from psdlab.runtime import model_pair as pair_mod  # noqa: E402
from psdlab.runtime.run_setup import load_requests  # noqa: E402

DATA = Path(__file__).parent / "data" / "formats"


@pytest.fixture(scope="module")
def tokenizer():
    try:
        pair_mod.find_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    pair = pair_mod.prepare_pair(progress=False)
    return transformers.AutoTokenizer.from_pretrained(pair.tokenizer_dir)


@pytest.mark.parametrize("name, fmt, n", [("sharegpt.json", None, 6),
                                          ("specbench_question.jsonl", "specbench", 13),
                                          ("custom_prompts.jsonl", None, 8)])
def test_foreign_prompt_files_become_requests(tokenizer, name, fmt, n):
    reqs = load_requests(str(DATA / name), tokenizer, format=fmt)
    assert len(reqs) == n
    for r in reqs:
        assert r.prompt_ids and r.prompt_text
        assert r.prompt_text.strip()[:20] in tokenizer.decode(list(r.prompt_ids))


def test_psdlab_prompt_lines_still_load(tokenizer, tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a", "style": "chat", "text": "Say hello."}\n'
                    '{"id": "b", "style": "code", "text": "Write a loop."}\n')
    reqs = load_requests(str(path), tokenizer, limit=1)
    assert [r.id for r in reqs] == ["a"]


def test_a_file_without_prompt_text_is_refused(tokenizer):
    with pytest.raises(FormatError, match=r"azure_code_2023\.csv: field 'text': has no prompt "
                                          r"text"):
        load_requests(str(DATA / "azure_code_2023.csv"), tokenizer)
