"""Benchmarks for the tool-using strategies: Game of 24, the LLMCompiler JSON sets, a synthetic DAG.

Game of 24 and the three LLMCompiler sets are tasks of the harness like any other
(``paragen eval -t game24 -s llmcompiler,react``): :func:`tool_task` turns one into a
:class:`~evals.tasks.base.Task` whose grader is the set's own (exact evaluation for Game of
24, the reference's normalized match for the sets). Nothing here is imported until a tool
task is asked for. The synthetic task needs its scripted model and tools, so it is run from
Python (``benchmarks/llmcompiler.py``), not by name.
"""

from __future__ import annotations

import functools

from evals.tasks.base import Fields, Task

TOOL_TASKS = ("game24", "hotpotqa_comparison", "movie_recommendation", "parallelqa")


def tool_task(name: str) -> Task:
    """One of :data:`TOOL_TASKS` as a harness task (rows generated from the bundled files)."""
    if name == "game24":
        from evals.tasks.game24 import game24_rows, same_as_24

        return Task(
            name="game24",
            description="Game of 24, the Tree-of-Thoughts test rows 900-999 (gold: the four numbers)",
            bundled_fields=Fields("problem", "answer", "id"),
            generate=game24_rows,
            equivalence=same_as_24,
            note="the strategies need a calculator tool, e.g. -O llmcompiler.tools='[\"calculator\"]'",
        )
    from evals.tasks.llmcompiler_sets import SETS, grade, set_rows

    if name not in SETS:
        raise KeyError(name)
    return Task(
        name=name,
        description=f"LLMCompiler's {name} set (graded like the reference: normalized match, numbers 10%)",
        bundled_fields=Fields("problem", "answer", "id"),
        generate=functools.partial(set_rows, name),
        equivalence=grade,
        note='the lookup tool needs documents: -O \'llmcompiler.tool_options={"lookup": {"root": DIR}}\'',
    )


__all__ = ["TOOL_TASKS", "tool_task"]
