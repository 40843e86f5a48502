"""What a run's records say: metrics, statistics, the sample bank, matched budgets, comparisons,
published figures."""
