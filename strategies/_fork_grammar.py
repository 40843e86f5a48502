"""Fork/join grammars: how a trained fork/join reasoner marks a fork, its children and the join.

A grammar is data, so a new model family is a new :class:`ForkGrammar` value, not new code. The
executor (``strategies/forkjoin.py``) decodes the trunk with ``fork_stop`` as a stop string; a
segment that stopped there and left a ``block_open`` unclosed is a fork, its children the labels
``outline_pattern`` finds after that opener. Each child continues the shared prefix (trunk text,
``fork_stop``, ``child_prefix``) and stops at ``child_stop``; the children's texts are joined as
``join_open`` + each ``child_joined`` + ``join_close`` and the trunk continues after them.

``THREADWEAVER`` follows the authors' inference code (threadweaver_sft/src/simple_eval.py,
``branching_generate``); ``MULTIVERSE`` follows the tags the Multiverse paper shows (its engine
was not read), with the same label syntax.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

# "1", "2", "1.2": the outline numbers ThreadWeaver's orchestrator accepts.
_NUMBERED = r"\s*([0-9]+(?:\.[0-9]+)*)\s*:"


@dataclass(frozen=True)
class ForkGrammar:
    """The markers of one fork/join format (templates take ``{label}`` and ``{text}``)."""

    name: str
    fork_stop: str  # the trunk stops here to fork (the end of the outline block)
    block_open: str  # opens the outline block whose entries are the children
    outline_pattern: str  # a regex whose first group is one child's label
    child_prefix: str  # appended to the shared prefix to start a child: "{label}"
    child_stop: str  # a child stops here
    join_open: str  # written before the first joined child
    child_joined: str  # one child in the joined text: "{label}" and "{text}"
    join_close: str  # written after the last child, before the trunk continues
    parallel_close: str  # written where a child did not close: the run ends after it

    @cached_property
    def _outline(self) -> re.Pattern[str]:
        return re.compile(self.outline_pattern)

    def child_labels(self, segment: str) -> list[str] | None:
        """The children a trunk segment that stopped at ``fork_stop`` asks for, in order, each once
        (a repeated label would run the same thread twice). None: the segment opened no outline
        block (its last ``block_open`` is missing or already closed), so it did not stop to fork.
        Empty: it opened one but no entry in it parses (a malformed fork)."""
        opener = segment.rfind(self.block_open)
        if opener < 0 or segment.find(self.fork_stop, opener) >= 0:
            return None
        labels = self._outline.findall(segment, opener + len(self.block_open))
        return list(dict.fromkeys(labels))

    def child_start(self, label: str) -> str:
        return self.child_prefix.format(label=label)

    def join(self, children: list[tuple[str, str]], *, cut_off: bool = False) -> str:
        """The text that replaces a fork's children in the trunk: ``(label, text)`` pairs in order,
        each text what its child wrote before ``child_stop``. ``cut_off``: a child did not reach its
        stop, so the trunk will not go on: the parallel block is closed after the last child."""
        body = "".join(self.child_joined.format(label=label, text=text) for label, text in children)
        return self.join_open + body + (self.parallel_close if cut_off else self.join_close)


THREADWEAVER = ForkGrammar(
    name="threadweaver",
    fork_stop="</Outlines>",
    block_open="<Outlines>",
    outline_pattern=r"<Outline>" + _NUMBERED,
    # Every child sees "\n<Thread>\n{label}:" after the outline block; the joined text has one
    # newline before the first thread and none between threads (the authors' merge, kept as is).
    child_prefix="\n<Thread>\n{label}:",
    child_stop="</Thread>",
    join_open="\n",
    child_joined="<Thread>\n{label}:{text}</Thread>",
    join_close="\n",
    parallel_close="\n</Parallel>",
)

MULTIVERSE = ForkGrammar(
    name="multiverse",
    fork_stop="</Goal>",
    block_open="<Goal>",
    outline_pattern=r"<Outline>" + _NUMBERED,
    child_prefix="\n<Path>\n{label}:",
    child_stop="</Path>",
    join_open="\n",
    child_joined="<Path>\n{label}:{text}</Path>\n",
    join_close="",
    parallel_close="\n</Parallel>",
)

GRAMMARS: dict[str, ForkGrammar] = {g.name: g for g in (THREADWEAVER, MULTIVERSE)}
