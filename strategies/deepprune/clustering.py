"""DeepPrune's online greedy clustering and pruning decisions: pure functions, no event loop.

A trace is compared, once it reaches its truncation point, with up to K1 sampled members of
every cluster; the mean judge probability is its similarity to that cluster. It joins the
most similar cluster when that mean exceeds tau, else opens a new one (at most K clusters;
at the cap it joins the most similar: the paper leaves this case open). Then only the
largest cluster's first K2 traces run on; if every cluster is a singleton, K3 random ones.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

# Discourse markers that start or steer a reasoning step. Which words the paper counts as
# "reasoning words" is not confirmed; this list is paragen's choice and is configurable.
REASONING_MARKERS: tuple[str, ...] = (
    "wait", "so", "therefore", "thus", "hence", "since", "because", "but", "then", "first",
    "next", "finally", "now", "let", "check", "hmm", "alternatively", "however", "if", "means",
)  # fmt: skip

_WORD = re.compile(r"[A-Za-z']+")


def word_prefix(text: str, k: int, markers: Sequence[str] | None = None) -> str | None:
    """Text up to the k-th word (or k-th marker word when ``markers`` is given); None if not there yet."""
    wanted = None if markers is None else {m.lower() for m in markers}
    seen = 0
    for match in _WORD.finditer(text):
        if wanted is None or match.group().lower() in wanted:
            seen += 1
            if seen == k:
                return text[: match.end()]
    return None


@dataclass(slots=True)
class Clusters:
    """Clusters of trace ids, each in the order its members were assigned."""

    groups: list[list[int]] = field(default_factory=list)

    def add(self, trace_id: int, cluster: int | None) -> int:
        """Put ``trace_id`` in ``cluster`` (None opens a new one); returns the cluster's index."""
        if cluster is None:
            self.groups.append([trace_id])
            return len(self.groups) - 1
        self.groups[cluster].append(trace_id)
        return cluster

    @property
    def members(self) -> list[int]:
        return [i for group in self.groups for i in group]


def sample_members(groups: Sequence[Sequence[int]], k1: int, rng: random.Random) -> list[list[int]]:
    """Up to ``k1`` members of each cluster to compare with (all of them when there are few)."""
    return [list(g) if len(g) <= k1 else rng.sample(list(g), k1) for g in groups]


def choose_cluster(sims: Sequence[Sequence[float]], tau: float, max_clusters: int) -> int | None:
    """The cluster to join given per-cluster judge scores, or None to open a new cluster."""
    means = [sum(s) / len(s) for s in sims if s]
    if not means:
        return None
    best = max(range(len(means)), key=lambda i: (means[i], -i))
    if means[best] > tau or len(means) >= max_clusters:
        return best
    return None


def survivors(groups: Sequence[Sequence[int]], k2: int, k3: int, rng: random.Random) -> list[int]:
    """Trace ids allowed to run to completion: the largest cluster's first k2, or k3 random ones."""
    if not groups:
        return []
    if all(len(g) == 1 for g in groups):
        everyone = [g[0] for g in groups]
        return sorted(rng.sample(everyone, min(k3, len(everyone))))
    largest = max(groups, key=len)  # ties: the earliest-opened cluster
    return list(largest[:k2])
