"""The lm-evaluation-harness recipe of docs/evals.md, run against `paragen serve` (skipped without lm_eval).

lm_eval's ``local-chat-completions`` model posts to the server's /v1/chat/completions with
``model=majority-8/smollm2``: the server runs majority@8 per question. Here the served
backend is scripted (every sample answers 12), the task a two-line local JSON file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from paragen.backends.scripted import ScriptedBackend

lm_eval = pytest.importorskip("lm_eval")

TASK = """\
task: paragen_sums
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: []
  max_gen_toks: 64
filter_list:
  - name: last_number
    filter:
      - function: regex
        regex_pattern: "(-?[0-9]+)(?!.*[0-9])"
      - function: take_first
metric_list:
  - metric: exact_match
"""


def test_lm_eval_scores_majority_8_through_paragen_serve(
    tmp_path: Path, serve: object, scripted: ScriptedBackend
) -> None:
    tasks = pytest.importorskip("lm_eval.tasks")
    data = tmp_path / "sums.jsonl"
    rows = [{"question": "What is 7 + 5?", "answer": "12"}, {"question": "What is 6 + 6?", "answer": "12"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "paragen_sums.yaml").write_text(TASK.format(data=data))
    with serve(scripted, ("smollm2",)) as url:  # type: ignore[operator]
        results = lm_eval.simple_evaluate(
            model="local-chat-completions",
            model_args={
                "model": "majority-8/smollm2",
                "base_url": f"{url}/chat/completions",
                "num_concurrent": 2,
                "max_retries": 1,
                "tokenized_requests": False,
            },
            tasks=["paragen_sums"],
            task_manager=tasks.TaskManager(include_path=str(tmp_path)),
            apply_chat_template=True,
        )
    assert results is not None
    assert results["results"]["paragen_sums"]["exact_match,last_number"] == 1.0
