"""Measuring: the benchmark against the peers (suite, modes, summary), the host's cost per call (host_cost),
and the autotuner (tune). Torch and CuPy are imported only inside, when a measurement runs."""
