"""Proof tasks: graded by LLM judges against each problem's guideline (see evals.run.judging).

- ``proofs_mini``: six short, easy proofs written for paragen's tests (evals/data/proofs_mini.jsonl),
  each with a reference solution and a guideline in IMO-ProofBench's style.
- ``imo_proofbench``: IMO-ProofBench (Luong et al., arXiv 2511.01846), 60 problems, as the hub
  dataset ``lm-provers/IMOProofBench`` (split ``train``; fields ``question_id``, ``problem``,
  ``solution``, ``grading_guidelines``). The official copy is ``imobench/proofbench.csv`` in
  google-deepmind/superhuman; the hub copy carries the same columns under these names. Pinned at
  the dataset commit that public harness code pins for it (a QED-Nano-compatible "value as tool"
  harness's benchmark table, 60 rows expected).
- ``usamo26``: USAMO 2026 from MathArena (``MathArena/usamo_2026``, split ``train``; fields
  ``problem_idx``, ``problem``, ``grading_scheme`` (a list of {title, points, desc}),
  ``sample_solution``, ``points``), as MathArena's own judge script reads it. **Not pinned**: no
  public code was found that pins a commit of this dataset, so it loads the hub's ``main``
  (``--revision`` asks for a commit); run.json records the rows' sha256 either way.

None of the hub copies ships with paragen; the hub cannot be reached from where these were set, so
a wrong hash fails the load loudly (the hub's error in one line), as for the MathArena tasks.
"""

from __future__ import annotations

from evals.tasks.base import Fields, HubSource, Task

PROOF_FIELDS = Fields("problem", None, "id", guideline="grading_guidelines", reference="solution")
IMO_PROOFBENCH_FIELDS = Fields(
    "problem", None, "question_id", guideline="grading_guidelines", reference="solution"
)
MATHARENA_PROOF_FIELDS = Fields(
    "problem", None, "problem_idx", guideline="grading_scheme", reference="sample_solution"
)

REVISIONS: dict[str, str | None] = {
    # pinned in a public harness's benchmark table (dataset="lm-provers/IMOProofBench",
    # revision=..., expected_rows=60, rubric column grading_guidelines)
    "lm-provers/IMOProofBench": "4b02dfebc3a956682398ce5847d56d0e820a758d",
    # no public pin found: the hub's main (see the module docstring)
    "MathArena/usamo_2026": None,
}

PROOFS_MINI = Task(
    name="proofs_mini",
    description="six short, easy proofs with guidelines, written for paragen's tests (judge-graded)",
    bundled="proofs_mini.jsonl",
    bundled_fields=PROOF_FIELDS,
    proof=True,
    prompt="proof",
)

IMO_PROOFBENCH = Task(
    name="imo_proofbench",
    description="IMO-ProofBench: 60 olympiad proofs with grading guidelines (hub only, judge-graded)",
    hub=HubSource(
        "lm-provers/IMOProofBench",
        split="train",
        revision=REVISIONS["lm-provers/IMOProofBench"],
        fields=IMO_PROOFBENCH_FIELDS,
        rows=60,
    ),
    note="hub only, no bundled copy",
    proof=True,
    prompt="proof",
)

USAMO26 = Task(
    name="usamo26",
    description="USAMO 2026 (MathArena): 6 proofs with grading schemes (hub only, judge-graded)",
    hub=HubSource("MathArena/usamo_2026", split="train", fields=MATHARENA_PROOF_FIELDS, rows=6),
    note="hub only, no bundled copy; revision not pinned (no public pin found): the hub's main",
    proof=True,
    prompt="proof",
)
