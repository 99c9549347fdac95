"""Choosing a config: the problem as the selection sees it (problem), the tiles it chooses among (tiles) and their
per-SM costs (tile_costs), the model's time for one config (predict, with memory_model), the rules that rank the
candidates (cost_model) and the tuned winners kept on disk (tune_cache); what fills that cache, ptxgemm.tune, stands
above the entry points it runs (ptxgemm/tuning.py)."""
