"""Choosing a config: the problem as the selection sees it (problem), the cost model (cost_model) and the tuned
winners kept on disk (tune_cache); what fills that cache, ptxgemm.tune, stands above the entry points it runs
(ptxgemm/tuning.py)."""
