"""PTX to cubin: finding NVIDIA's tools (locate), whole-program ptxas with an on-disk cache and its report
(compiler), and a config's kernel as text and cubin (kernels)."""
