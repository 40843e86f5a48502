"""DeepPrune (Tu et al., arXiv 2510.08483): prune redundant parallel traces by predicted answer agreement."""

from strategies.deepprune.strategy import DeepPrune, DeepPruneConfig

__all__ = ["DeepPrune", "DeepPruneConfig"]
