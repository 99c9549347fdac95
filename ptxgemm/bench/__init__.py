"""Measuring: the benchmark against the peers (suite, modes, summary), the same in whole transformers models
(model), the host's cost per call (host_cost), and the autotuner (tune). Torch and CuPy are imported only inside,
when a measurement runs."""
