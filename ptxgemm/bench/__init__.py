"""Measuring: the benchmark against the peers (suite, modes, summary), the same in whole transformers models
(transformer_models), the host's cost per call (host_cost). Torch and CuPy are imported only inside, when a
measurement runs."""
