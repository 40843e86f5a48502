"""MathArena's final-answer competitions on the hub: one Task per competition, its prompt theirs.

MathArena publishes each competition as a hub dataset (``MathArena/NAME``, split ``train``,
fields ``problem_idx``, ``problem``, ``answer``): the ids are the ``dataset_path`` /
``huggingface_id`` of its competition configs (github.com/eth-sri/matharena,
``configs/competitions/``). No copy ships with paragen, so these tasks need the hub.

Revisions: each task pins the dataset commit that public harnesses pin for it (the hashes and
where they are pinned are in :data:`REVISIONS`). MathArena's own runner loads ``main``; the hub
could not be reached from where the pins were set, so a wrong hash fails the load loudly (the
hub's error in one line) rather than falling back to other rows. Every run also records the rows'
sha256 (run.json ``data``). ``paragen eval --revision REV`` asks for another commit.
"""

from __future__ import annotations

from evals.tasks.base import Fields, HubSource, Task

FIELDS = Fields("problem", "answer", "problem_idx")
NOTE = "held out: hub only, no bundled copy"

# Dataset commits, each pinned by the public code named beside it.
REVISIONS = {
    # scitix/sieval sieval/datasets/aime_2026.py (AIME_2026_REVISION); aabbdev/openbench2
    # src/openbench/evals/matharena/aime_2026/aime_2026.py (revision=)
    "MathArena/aime_2026": "d2de22f3c656b4f56cf8981212186377d1e23bc3",
    # scitix/sieval sieval/datasets/hmmt_feb_2025.py (HMMT_FEB_2025_REVISION), and several
    # harnesses' dataset manifests with the same hash
    "MathArena/hmmt_feb_2025": "6fdc4277120810ff75aa22d2d5489b91f7a262a1",
    # scitix/sieval sieval/datasets/brumo_2025.py (BRUMO_2025_REVISION)
    "MathArena/brumo_2025": "6de9bc0987f5710c6376ee980e1483dbeb55cfda",
}


def matharena_task(name: str, repo: str, description: str, *, prompt: str, rows: int = 30) -> Task:
    """A MathArena competition read from the hub at its pinned commit (``rows``: how many problems)."""
    hub = HubSource(repo, split="train", revision=REVISIONS[repo], fields=FIELDS, rows=rows)
    return Task(
        name=name, description=description, hub=hub, bundled=None, grading="boxed", note=NOTE, prompt=prompt
    )
