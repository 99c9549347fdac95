"""Choosing a config: the problem as the selection sees it (problem), the cost model (model) and the tuned
winners kept on disk (tune_cache)."""
