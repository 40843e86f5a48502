"""MathArena's final-answer competitions on the hub: one Task per competition, its prompt theirs.

MathArena publishes each competition as a hub dataset (``MathArena/NAME``, split ``train``,
fields ``problem_idx``, ``problem``, ``answer``): the ids are the ``dataset_path`` /
``huggingface_id`` of its competition configs (github.com/eth-sri/matharena,
``configs/competitions/``). No copy ships with paragen, so these tasks need the hub.

Revisions: no commit hash of these datasets could be confirmed from here (the hub cannot be
reached from where this was written), so none is pinned and the hub's ``main`` is loaded;
every run records the rows' sha256 (run.json ``data``), so runs on different data are told
apart. Once a hash is known, set it as ``revision`` here.
"""

from __future__ import annotations

from evals.tasks.base import Fields, HubSource, Task

FIELDS = Fields("problem", "answer", "problem_idx")
NOTE = "held out: hub only, no bundled copy"


def matharena_task(name: str, repo: str, description: str, *, prompt: str, rows: int = 30) -> Task:
    """A MathArena competition read from the hub (``rows`` is how many problems it has)."""
    hub = HubSource(repo, split="train", revision=None, fields=FIELDS, rows=rows)
    return Task(
        name=name, description=description, hub=hub, bundled=None, grading="boxed", note=NOTE, prompt=prompt
    )
