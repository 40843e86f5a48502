"""How results are shown: the report's tables, its renderings, plots, and the results page."""
